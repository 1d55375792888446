# llmexplore: one-command entry points. Needs GNU make and Python >= 3.11 (no conda).
#
#   make report   build offline HTML reports into reports/ (sets up .venv first if needed)
#   make test     run the whole test suite                 (sets up .venv first if needed)
#   make lab      JupyterLab on notebooks/
#   make serve    Voila serving notebooks/ on http://127.0.0.1:$(PORT)/
#   make bench    run every benchmarks/bench_*.py
#   make strip    remove outputs, execution counts and widget state from notebooks/*.ipynb (before a commit)
#   make git-filter  have git strip notebook outputs on every commit in this clone (nbstripout)
#   make clean    remove reports and caches (make distclean also removes .venv)
#
# Variables: PYTHON=python3.12  OUT=reports  PORT=8866  ARGS="-p BATCH 8" (report)  PYTEST_ARGS="-m 'not browser'"
#            VOILA_ARGS="--preheat_kernel=True --pool_size=1" (serve; default --progressive_rendering=True)
#            TEST_WORKERS=2 (pytest-xdist workers of make test)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
OUT ?= reports
PORT ?= 8866
ARGS ?=
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.llmexplore-installed
# Live front ends render figures through plotly's mime renderer only; the report builder sets its own
# offline renderer, so nothing here affects the HTML reports.
LIVE_ENV := PLOTLY_RENDERER=plotly_mimetype

.PHONY: help report test lab serve bench strip git-filter clean distclean venv

help:  # the comment block at the top of this file
	@awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' Makefile

# The venv is (re)built when missing, when pyproject.toml is newer than the last install, or when its
# interpreter no longer runs or is older than 3.11 (e.g. made by another Python).
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "error: '$(PYTHON)' not found. Install Python 3.11 or newer, or run: make PYTHON=/path/to/python3.11 ..." >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "error: llmexplore needs Python >= 3.11, but '$(PYTHON)' is $$($(PYTHON) -V 2>&1)." >&2; \
	  echo "       Install a newer Python and run: make PYTHON=python3.11 (or python3.12, ...)" >&2; exit 1; }
	@if [ -e "$(VPY)" ] && ! "$(VPY)" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
	  echo "$(VENV) is broken or too old: recreating it"; rm -rf "$(VENV)"; fi
	@if [ ! -e "$(VPY)" ]; then \
	  echo "creating $(VENV) with $$($(PYTHON) -V 2>&1)"; \
	  $(PYTHON) -m venv "$(VENV)" || { \
	    echo "error: '$(PYTHON) -m venv' failed; on Debian/Ubuntu: sudo apt-get install python3-venv" >&2; \
	    rm -rf "$(VENV)"; exit 1; }; fi
	@echo "installing llmexplore and its dev dependencies into $(VENV) (about 30-60 s the first time)"
	$(VPY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(VPY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	@touch "$@"

venv: $(STAMP)

report: $(STAMP)
	$(VENV)/bin/llmexplore report --out "$(OUT)" $(ARGS)

# Two pytest workers (pytest-xdist): the tests that run kernels, servers and browsers (tests/notebooks,
# tests/browser: one group, so their session fixtures are built once and shared) on one, the rest on both.
test: $(STAMP)
	$(VPY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# JupyterLab refuses to run as root without --allow-root (containers and CI machines often are root).
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: $(STAMP)
	$(LIVE_ENV) $(VENV)/bin/jupyter lab --notebook-dir=notebooks $(LAB_ROOT)

# Voila with the project's template (share/jupyter/voila/templates/llmexplore: nothing from a CDN; static
# figures through plotly's offline HTML) and the classic tree page (the JavaScript one starts the widget
# plugins without a kernel and logs errors). tests/browser/test_voila.py serves the same way.
SERVE_ENV := JUPYTER_PATH=$(CURDIR)/share/jupyter PLOTLY_RENDERER=plotly_mimetype+notebook

serve: $(STAMP)
	@echo "Voila: http://127.0.0.1:$(PORT)/ (Ctrl-C to stop)"
	$(SERVE_ENV) $(VENV)/bin/voila notebooks --template=llmexplore --classic-tree --no-browser --port=$(PORT) --Voila.ip=127.0.0.1 $(or $(VOILA_ARGS),--progressive_rendering=True)

bench: $(STAMP)
	@shopt -s nullglob; files=(benchmarks/bench_*.py); \
	if [ $${#files[@]} -eq 0 ]; then echo "no benchmarks/bench_*.py yet"; exit 0; fi; \
	for f in "$${files[@]}"; do echo "== $$f"; $(VPY) "$$f"; done

# JupyterLab saves outputs and widget state into the .ipynb; committed notebooks carry neither.
strip: $(STAMP)
	$(VENV)/bin/nbstripout notebooks/*.ipynb

git-filter: $(STAMP)
	$(VENV)/bin/nbstripout --install
	@echo "git now commits notebooks without outputs; your working copies keep theirs (run 'make strip' to clear them)"

clean:
	rm -rf "$(OUT)" build .pytest_cache .hypothesis
	find . -path "./$(VENV)" -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -print0 \
	  | xargs -0 rm -rf

distclean: clean
	rm -rf "$(VENV)" *.egg-info
