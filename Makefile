# Two commands do all the set-up on a fresh machine:
#   make demo   - .venv, torch==$(TORCH), DeepSpeed, rssprobe; then the default scenario, baseline vs patched
#   make test   - the same set-up, then the test suite
# TORCH=2.14.1 make demo picks another torch (pinned: an unpinned torch pulls a multi-GB CUDA build).

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= 2.13.0
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.rssprobe-installed-torch-$(TORCH)
DEMO    = reports/demo

PLAN    = reports/issue7693/plan.toml
PLANRUNS = reports/matrix/issue7693
VERDICT_DEBS = libjemalloc2 libtcmalloc-minimal4 ccache

.PHONY: install demo test bench gate-check lint clean gpu-check verdict

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "torch==$(TORCH)"
	$(BIN)/pip install --quiet -e ".[dev,memray,hf]"
	rm -f $(VENV)/.rssprobe-installed-torch-*
	touch $@

demo: install
	rm -rf $(DEMO)
	$(BIN)/rssprobe run --baseline --repeat 3 --trim-at-end --out $(DEMO)/baseline
	$(BIN)/rssprobe run --patched --repeat 3 --trim-at-end --out $(DEMO)/patched
	$(BIN)/rssprobe diff $(DEMO)/baseline $(DEMO)/patched --format markdown > $(DEMO)/diff.md
	$(BIN)/rssprobe report $(DEMO)/baseline $(DEMO)/patched --out $(DEMO)/report
	$(BIN)/rssprobe diff $(DEMO)/baseline $(DEMO)/patched
	# beside the Linear stack, a real architecture (~50 s): a Llama with GQA from a transformers config
	$(BIN)/rssprobe run llama-small --trim-at-end --out $(DEMO)/llama-small

test: install
	$(BIN)/ruff check rssprobe tests tools
	$(BIN)/pytest -q

# On a machine with a CUDA torch (the device tool's, say): its own python3, wheels carried in .whl/ (README).
gpu-check:
	PYTHON=$(PYTHON) bash tests/gpu/check.sh

# The #7693 / PR #8132 verdict: the plan's runs (resumable; add OPTIONAL=1 for the GB-sized axes), then the
# report. The allocator axis needs jemalloc and tcmalloc; ccache makes each new DeepSpeed env compile less.
# On several machines: `rssprobe matrix --plan $(PLAN) --shard K/N` on each, then `rssprobe merge`
# (docs/github-actions-sharded-plan.yml, docs/slurm-sharded-plan.sh); this target runs it on one.
verdict: install
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y --no-install-recommends $(VERDICT_DEBS) >/dev/null || \
		{ apt-get update -qq && apt-get install -y --no-install-recommends $(VERDICT_DEBS) >/dev/null; }; \
	else \
		for p in $(VERDICT_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo "verdict: install $$p (apt-get install $$p)"; done; \
	fi
	$(BIN)/rssprobe matrix --plan $(PLAN) --out $(PLANRUNS) $(if $(OPTIONAL),--optional)
	$(BIN)/python -m rssprobe.reporters.verdict $(PLAN) --runs $(PLANRUNS) --out reports/issue7693-verdict.md

# tools/ is the developers' (not installed with rssprobe): run from the checkout
# make bench SCRIPT=examples/train_linear.py: the same A/B on a script run (its loop runs as long as asked)
bench: install
	$(BIN)/python -m tools.bench $(if $(SCRIPT),--scenario $(SCRIPT) -- --steps 100000)

# N interleaved A/A gates and N gates whose candidate retains BPP bytes per parameter, REPEAT runs a side, on
# SCENARIO: false regressions and detections. GLIBC=steady fixes the mmap threshold (as bisect and matrix run),
# GLIBC=default is glibc as users have it. e.g. make gate-check N=10 BPP=0.5 SCENARIO=default GLIBC=default
N ?= 10
BPP ?= 1
SCENARIO ?= tiny
GLIBC ?= steady
REPEAT ?= 3
gate-check: install
	$(BIN)/python -m tools.gatecheck --n $(N) --bpp $(BPP) --scenario $(SCENARIO) --glibc $(GLIBC) --repeat $(REPEAT)

lint: install
	$(BIN)/ruff check rssprobe tests tools

clean:
	rm -rf $(VENV) build *.egg-info
