# mk/browser.mk — the browser that tests/test_report_browser.py drives (included from the Makefile).
#
# The report's test opens `ablate report`'s page in headless Chromium through Playwright, driving Debian's
# chromium rather than a browser Playwright downloads, so nothing is fetched when the tests run. Installed with
# apt as slurm/up installs SLURM: only when /usr/bin/chromium is missing (a file target: make does nothing once
# it exists), which needs root and Debian. fonts-liberation: metric-compatible Arial/Helvetica for the figures'
# text (chromium only recommends it).
CHROMIUM := /usr/bin/chromium

.PHONY: browser-setup

browser-setup: $(CHROMIUM)

$(CHROMIUM):
	@[ "$$(id -u)" = 0 ] || { echo "browser-setup: installing chromium needs root (apt-get)" >&2; exit 1; }
	@echo "browser-setup: installing chromium fonts-liberation" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation >&2
	@test -x $(CHROMIUM) || { echo "browser-setup: apt-get installed chromium but $(CHROMIUM) is missing" >&2; exit 1; }
