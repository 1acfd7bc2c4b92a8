# Two entry points (README): `make reproduce` runs the pipeline, `make test` runs the tests.
# Both create .venv and install everything they need on a fresh Debian/Ubuntu machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
CORES ?= all
SNAKEMAKE_ARGS ?=
# Rules call `python -m pipeline_lib...`: the venv's python must come first on PATH.
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: reproduce reproduce-converged reproduce-gpu test install corpus browser lint dryrun clean

$(VENV)/.installed: pyproject.toml constraints-cpu.txt
	test -x $(PY) || python3 -m venv $(VENV)
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

# Profiles (README "Profiles"): every job trained to its dev plateau (results/converged/), and the
# same on one GPU machine with CUDA, bf16 and GPU sizes (results/gpu/). The GPU profile installs
# into its own venv: pip's torch wheel, the CUDA build on Linux x86-64, next to .venv's CPU one.
PROFILE_CONFIGS := --configfile config/config.yaml config/converged.yaml

reproduce-converged: corpus
	$(VENV)/bin/snakemake --cores $(CORES) $(PROFILE_CONFIGS) $(SNAKEMAKE_ARGS)

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

# Two pytest-xdist workers; --dist loadgroup, where no test names a group, schedules each test as
# a unit of its own: 24 min 11 s at 7faf70b, against 30 min 11 s at 935fef2 with the default
# `load` distribution (2 cores, bench/RESULTS.md; why the two differ was not looked into).
test: corpus browser
	$(PY) -m pytest -q -x -n 2 --dist loadgroup --durations=15 tests

lint: install
	$(VENV)/bin/snakemake --lint

dryrun: install
	$(VENV)/bin/snakemake -n --quiet rules

clean:
	rm -rf results logs .snakemake
