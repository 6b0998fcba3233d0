# Two commands do all the set-up on a fresh machine:
#   make demo   - .venv, torch==$(TORCH), DeepSpeed (its CPU ops built while the rest installs), rssprobe; then
#                 the default scenario, baseline vs PR #8132, 3 runs each, ending with the answer
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

.PHONY: install demo test test-fast test-slow bench gate-check lint clean gpu-check verdict

install: $(STAMP)

# The Python floor, as pyproject.toml's requires-python declares it (a test holds the two equal). The Python the
# venv is (or will be) made with is asked before anything is made: below the floor, or not a Python, is one line.
PYTHON_FLOOR = 3.11
FLOOR_PYTHON = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
below_floor = $(shell $(FLOOR_PYTHON) -c 'import sys; print("" if sys.version_info >= ($(subst .,$(comma),$(PYTHON_FLOOR)),) else "Python %d.%d.%d" % sys.version_info[:3])' 2>&1 | tail -1)
comma := ,

$(STAMP): pyproject.toml
	$(if $(below_floor),$(error rssprobe needs Python $(PYTHON_FLOOR) or newer: $(FLOOR_PYTHON) is $(below_floor); give one, e.g. make PYTHON=python3.12 $(MAKECMDGOALS)))
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv installs in seconds what pip takes a minute for (pip where uv cannot), from the wheels on disk that pip
	@# is configured with (find-links: where a CPU torch may lie). Bytecode is compiled at install: a Python that
	@# may not write it (PYTHONDONTWRITEBYTECODE, as on CI machines) otherwise compiles DeepSpeed, pandas and
	@# scipy from source in every process (~3 s of each run's worker, ~5 s of each diff on 2 cores)
	$(BIN)/pip install --quiet uv ninja
	links="$$($(BIN)/pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p" | head -1)"; \
		ds="$$(grep -o '"deepspeed[^"]*"' pyproject.toml | tr -d '"')"; \
		$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python $${links:+--find-links "$$links"} \
			"torch==$(TORCH)" "$$ds" || \
		{ $(BIN)/pip install --quiet "torch==$(TORCH)" && $(BIN)/pip install --quiet "$$ds"; }
	@# DeepSpeed's two CPU ops compile in the background (both at once, ~300 CPU-seconds) while uv installs the
	@# rest; the rest's bytecode compiles at the lowest priority meanwhile, on what the compilers leave idle
	PYTHONPATH=. $(BIN)/python -m rssprobe.run.opbuild > $(VENV)/opbuild.log 2>&1 & ops=$$!; \
		{ $(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[dev,memray,hf]" || \
		  $(BIN)/pip install --quiet -e ".[dev,memray,hf]"; }; status=$$?; \
		nice -n 19 $(BIN)/python -m compileall -q -j 0 rssprobe tools \
			"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" > /dev/null; \
		wait $$ops; cat $(VENV)/opbuild.log; exit $$status
	@# rssprobe/data/shapes.json answers a first estimate without torch or transformers, for the transformers it was
	@# computed with; where uv installed a newer one in range, the same answers go to the cache root now (~11 s)
	$(BIN)/python -m tools.shapes --warm || echo "shapes: not computed ahead; the first estimate computes them"
	rm -f $(VENV)/.rssprobe-installed-torch-*
	touch $@

# The main job on the default scenario: baseline vs PR #8132, 3 fresh runs each, then the answer (diff), the
# markdown for a review and the HTML report. The runs' own tables go to files; the last screen is the answer.
demo: install
	rm -rf $(DEMO)
	mkdir -p $(DEMO)
	@# the two sides run side by side, a fresh process per run each (a run measures its own process only): on 2
	@# cores the six runs take ~75 s instead of ~135 s one after the other, and each pair of runs shares the
	@# machine's load. Baseline's progress goes to its log; patched's is shown. A background job ignores Ctrl-C
	@# (POSIX sh): the trap stops it (rssprobe takes SIGTERM as Ctrl-C) when the recipe line ends however it ends
	@echo "baseline and patched (PR #8132), 3 runs each, side by side (baseline's progress: $(DEMO)/baseline.log)"
	$(BIN)/rssprobe run --baseline --repeat 3 --trim-at-end --out $(DEMO)/baseline > $(DEMO)/baseline.txt \
		2> $(DEMO)/baseline.log & base=$$!; trap 'kill $$base 2>/dev/null' EXIT INT TERM; \
		$(BIN)/rssprobe run --patched --repeat 3 --trim-at-end --out $(DEMO)/patched > $(DEMO)/patched.txt; \
		patched=$$?; wait $$base || { tail -3 $(DEMO)/baseline.log; exit 1; }; exit $$patched
	$(BIN)/rssprobe diff $(DEMO)/baseline $(DEMO)/patched --format markdown > $(DEMO)/diff.md & md=$$!; \
		$(BIN)/rssprobe report $(DEMO)/baseline $(DEMO)/patched --out $(DEMO)/report > /dev/null; \
		status=$$?; wait $$md && exit $$status
	@echo
	$(BIN)/rssprobe diff $(DEMO)/baseline $(DEMO)/patched
	@echo
	@echo "Report: $(DEMO)/report/report.html (open it in a browser); for a PR review: $(DEMO)/diff.md"
	@echo "Next: rssprobe show $(DEMO)/baseline/run-01 (who owns every byte), rssprobe run llama-small (a real"
	@echo "architecture), rssprobe estimate --model llama-2-7b --gpus-per-node 8 (size a node); README."

# Both cores: test files run in two processes (pytest-xdist; a file's tests and its shared runs stay together)
test: install
	$(BIN)/ruff check rssprobe tests tools
	$(BIN)/pytest -q -m "not slow" -n 2 --dist loadfile

# The end-to-end checks of minutes each (checkpoint loads, scripts as exact as scenarios, every launcher, a real
# environment, a sharded matrix, memray's native captures): run before a release or when touching those paths
test-slow: install
	$(BIN)/pytest -q -m slow

# The tests that never start a training worker (unit, schema, statistics, reporters, refusals), without the
# integration checks that run whole tool chains in fresh processes (a device script, git bisect, pip): the
# developer's loop. A test that trains carries @pytest.mark.worker, and one that trains without it fails
# (tests/conftest.py); `make test` runs everything but the slow lane.
test-fast: install
	$(BIN)/ruff check rssprobe tests tools
	$(BIN)/pytest -q -m "not worker and not integration and not slow" -n 2 --dist loadfile

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
	$(BIN)/rssprobe verdict $(PLAN) --runs $(PLANRUNS) --out reports/issue7693-verdict.md

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

# ruff, then mypy over the paths pyproject.toml's [tool.mypy] names (tests/test_types.py runs it in the fast lane)
lint: install
	$(BIN)/ruff check rssprobe tests tools
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info
