# Two entry points (README): `make reproduce` runs the pipeline, `make test` runs the tests.
# Both create .venv and install everything they need on a fresh Debian/Ubuntu machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# The Python that creates the venv: 3.11 or later (Snakemake 9 needs it), e.g. PYTHON=python3.11.
PYTHON ?= python3
CORES ?= all
SNAKEMAKE_ARGS ?=
# Rules call `python -m pipeline_lib...`: the venv's python must come first on PATH.
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: reproduce reproduce-seeds reproduce-converged reproduce-gpu test install corpus browser \
	lint dryrun clean

$(VENV)/.installed: pyproject.toml constraints-cpu.txt
	@test -x $(PY) || $(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else \
	  f"$(PYTHON) is Python {sys.version.split()[0]}; this pipeline needs Python 3.11 or later " \
	  "(Snakemake 9): install one (Debian 12, Ubuntu 24.04: python3; Ubuntu 22.04: apt install " \
	  "python3.11 python3.11-venv) and run make PYTHON=python3.11 ...")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints-cpu.txt torch
	$(PY) -m pip install -q -c constraints-cpu.txt -e '.[test]'
	touch $@

install: $(VENV)/.installed

# The embedded corpus: Debian's SWORD modules when apt-get works, else the SWORD repository.
corpus: install
	$(PY) -m pipeline_lib.ingest.sword_modules --ensure

reproduce: corpus
	$(VENV)/bin/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS)

# Profiles (docs/profiles.md): every job trained to its dev plateau (results/converged/), and the
# same on one GPU machine with CUDA, bf16 and GPU sizes (results/gpu/). The GPU profile installs
# into its own venv: pip's torch wheel, the CUDA build on Linux x86-64, next to .venv's CPU one.
PROFILE_CONFIGS := --configfile config/config.yaml config/converged.yaml

reproduce-converged: corpus
	$(VENV)/bin/snakemake --cores $(CORES) $(PROFILE_CONFIGS) $(SNAKEMAKE_ARGS)

# The smoke budgets over three seeds, with the random-context twins (results/smoke_seeds/).
reproduce-seeds: corpus
	$(VENV)/bin/snakemake --cores $(CORES) --configfile config/config.yaml config/smoke_seeds.yaml \
	  $(SNAKEMAKE_ARGS)

reproduce-gpu:
	$(MAKE) corpus VENV=.venv-gpu
	.venv-gpu/bin/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'torch sees no CUDA device')"
	$(MAKE) reproduce VENV=.venv-gpu SNAKEMAKE_ARGS="$(PROFILE_CONFIGS) config/gpu.yaml $(SNAKEMAKE_ARGS)"

# Headless Chromium renders the HTML report in tests (Debian package; needs root or sudo).
# Without recommends: upower, udev, notification-daemon, system-config-printer (CUPS) etc. are for
# a desktop session; headless rendering needs only the package's dependencies (fonts come from
# fontconfig's own dependency, fonts-dejavu-core).
browser:
	command -v chromium >/dev/null || { apt-get update -qq \
	  && apt-get install -y -qq --no-install-recommends chromium; } \
	  || echo "chromium could not be installed: the report browser test will be skipped"

# Two pytest-xdist workers; --dist loadgroup schedules each test as a unit of its own, except
# tests/integration/test_reruns.py's, which edit the tiny run every worker shares and so run on
# one worker (timings: bench/RESULTS.md).
test: corpus browser
	$(PY) -m pytest -q -x -n 2 --dist loadgroup --durations=15 tests

lint: install
	$(VENV)/bin/snakemake --lint
	$(VENV)/bin/snakefmt --check Snakefile workflow/rules/

dryrun: install
	$(VENV)/bin/snakemake -n --quiet rules

clean:
	rm -rf results logs .snakemake
