# The two commands a newcomer runs: `make demo` and `make test` (`make docs` builds the site).
# Each installs what is missing first: into the active virtualenv if there is one, otherwise into
# ./.venv (created with python3, which must be Python 3.11).
PYTHON ?= python3
VENV ?= .venv

ifdef VIRTUAL_ENV
  ENV_DIR := $(VIRTUAL_ENV)
else
  ENV_DIR := $(VENV)
endif
PY := $(ENV_DIR)/bin/python
STAMP := $(ENV_DIR)/.dglx_dist-installed

.PHONY: demo test docs install clean

demo: $(STAMP)
	$(PY) -m dglx_dist demo

test: $(STAMP)
	$(PY) -m pytest

# the static site, into site/ (mkdocs.yml); the [test] extra the stamp installs includes [docs]
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

install: $(STAMP)

$(STAMP): setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(ENV_DIR)
	@$(PY) -c 'import sys; assert sys.version_info[:2] == (3, 11), "dglx_dist needs Python 3.11 (DGL 2.1 wheels); got " + sys.version'
	$(PY) -m pip install --disable-pip-version-check -q -e ".[test]"
	@touch $(STAMP)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache site
