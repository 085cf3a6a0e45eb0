# The two commands a newcomer runs: `make demo` and `make test` (`make docs` builds the site).
# Each installs what is missing first: into the active virtualenv if there is one, otherwise into
# ./.venv (created with python3), with the checked stack's exact versions (CONSTRAINTS, which
# needs Python 3.11). `make demo` installs the package without DGL (on another Python, from
# setup.py's ranges); `make test` adds the [dgl,test] extras, since the suite compares with
# DGL. `make install CONSTRAINTS=` installs from setup.py's ranges alone.
# `make test-core` runs the DGL-free layers' tests in ./.venv-core: newest torch and numpy, no DGL.
# docs/install.md has the matrix.
PYTHON ?= python3
VENV ?= .venv
CONSTRAINTS ?= constraints/cpu-py311.txt

ifdef VIRTUAL_ENV
  ENV_DIR := $(VIRTUAL_ENV)
else
  ENV_DIR := $(VENV)
endif
PY := $(ENV_DIR)/bin/python
STAMP := $(ENV_DIR)/.dglx_dist-installed
DEMO_STAMP := $(ENV_DIR)/.dglx_dist-demo-installed
# no pip cache: a fresh clone's CI fills no disk with a second copy of the wheels
PIP := -m pip install --disable-pip-version-check --no-cache-dir -q

# The second virtualenv: setup.py's CORE_REQUIRES and TEST_REQUIRES, newest on the index, no DGL.
# torch is CORE_TORCH: 2.13.0, whose CPU build these machines keep in pip's find-links (about
# 1 GB installed); the index's newest is a CUDA build (5.8 GB), and CI's disk did not hold it
# beside ./.venv's. `make test-core CORE_TORCH=torch` (after `rm -rf .venv-core`) takes the newest.
CORE_TORCH ?= torch==2.13.0
CORE_VENV ?= .venv-core
CORE_PY := $(CORE_VENV)/bin/python
CORE_STAMP := $(CORE_VENV)/.dglx_dist-core-installed
# The tests of the DGL-free layers (data, partition, runtime, comm, health, KVStore, autograd
# exchanges, checkpoint files and layout, offload tasks, sampling and each strategy's loader,
# the pipelined loader with DGL's delivery options and gpu_cache (on the GPU where CUDA
# exists: scripts/gpu_checklist.sh's CORE=1), failures under the newer torchrun, which checks
# its ranks every 0.1 s);
# tests marked `dgl` in them are left out.
CORE_TESTS := tests/unit/test_import_boundary.py tests/unit/test_book.py tests/unit/test_aggregate.py \
	tests/unit/test_checkpoint_files.py tests/unit/test_checkpoint_layout.py \
	tests/unit/test_data.py tests/unit/test_graph.py tests/unit/test_hetero_data.py \
	tests/unit/test_mag.py \
	tests/unit/test_device.py tests/unit/test_errors.py \
	tests/unit/test_fuzz_loaders.py \
	tests/unit/test_health.py tests/unit/test_in_edges.py tests/unit/test_kvstore.py \
	tests/unit/test_memory.py \
	tests/unit/test_no_unpickling.py tests/unit/test_graphbolt_reader.py \
	tests/unit/test_offload_executors.py \
	tests/unit/test_offload_ops.py tests/unit/test_offload_payload.py \
	tests/unit/test_partition.py tests/unit/test_partition_io.py tests/unit/test_metis_lib.py \
	tests/unit/test_preflight.py \
	tests/unit/test_registry.py tests/unit/test_runtime_env.py tests/unit/test_synthetic.py \
	tests/unit/test_bench_h2d.py tests/dist/test_comm.py tests/dist/test_exchanges.py \
	tests/dist/test_kvstore_dist.py tests/dist/test_sampling_without_dgl.py tests/dist/test_device_sampler.py \
	tests/e2e/test_train.py tests/unit/test_dgl_extra.py tests/unit/test_pyg.py \
	tests/e2e/test_pyg_example.py tests/unit/test_plan.py tests/e2e/test_launch.py \
	tests/dist/test_pipelined_loader.py tests/unit/test_pipeline_worker.py \
	tests/unit/test_loader_options.py tests/dist/test_gpu_cache.py tests/dist/test_kvstore_cache.py \
	tests/dist/test_kvstore_recent.py

.PHONY: demo test test-core test-core-here docs install clean

demo: $(DEMO_STAMP)
	$(PY) -m dglx_dist demo

# two workers (pytest-xdist), a whole file to a worker: the suite's tests wait on
# launches, timeouts and peers' deadlines about half of the time one worker runs them
test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile

# the static site, into site/ (mkdocs.yml); the [test] extra the stamp installs includes [docs]
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

install: $(STAMP)

# `make demo` needs no DGL: the package and what it requires, at the checked versions on
# Python 3.11 (CONSTRAINTS), from setup.py's ranges on another Python
$(DEMO_STAMP): setup.py $(CONSTRAINTS)
	@test -x $(PY) || $(PYTHON) -m venv $(ENV_DIR)
	$(PY) $(PIP) $(if $(strip $(CONSTRAINTS)),$$($(PY) -c 'import sys; print("-c $(CONSTRAINTS)" if sys.version_info[:2] == (3, 11) else "")')) -e .
	@touch $(DEMO_STAMP)

$(STAMP): setup.py $(CONSTRAINTS)
	@test -x $(PY) || $(PYTHON) -m venv $(ENV_DIR)
ifneq ($(strip $(CONSTRAINTS)),)
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "$(CONSTRAINTS) is the stack checked on Python 3.11 (DGL 2.1 with torch 2.2.1, on CPU), exact versions checked there only; this is Python " + sys.version.split()[0] + ". Use Python 3.11 (PYTHON=python3.11), or install from the ranges without it: make install CONSTRAINTS= (DGL 2.1-2.4 with a matching torch, Python 3.10-3.12; see docs/install.md)")'
	$(PY) $(PIP) -c $(CONSTRAINTS) -e ".[dgl,test]"
else
	$(PY) $(PIP) -e ".[dgl,test]"
endif
	@# ogb (the test extra's) starts a thread at every `import dgl` (DGL's dgl.data imports it)
	@# that asks PyPI's JSON API whether ogb is outdated, and each process waits for it at exit
	@# (3 s a process where only the package index is reachable): without its `outdated`
	@# package, ogb skips the check
	$(PY) -m pip uninstall -y -q outdated
	@touch $(STAMP)

test-core: $(CORE_STAMP)
	@$(CORE_PY) -c 'import platform, numpy, pyarrow, torch; print("test-core: Python", platform.python_version(), "torch", torch.__version__, "numpy", numpy.__version__, "pyarrow", pyarrow.__version__, "(no DGL)")'
	$(CORE_PY) -m pytest -p no:cacheprovider -m "not dgl" $(CORE_TESTS)

# The same tests with the Python at hand and what it has installed (a machine with no package
# index, e.g. a GPU machine with torch, numpy, pyarrow and pytest): where CUDA exists, the
# comm, exchange and KVStore tests also run their ranks on the GPU.
test-core-here:
	$(PYTHON) -m pytest -p no:cacheprovider -m "not dgl" $(CORE_TESTS)

# Refreshed only when setup.py changes; `rm -rf .venv-core` picks up newer releases.
$(CORE_STAMP): setup.py scripts/core_requirements.py
	@test -x $(CORE_PY) || $(PYTHON) -m venv $(CORE_VENV)
	$(PYTHON) scripts/core_requirements.py > $(CORE_VENV)/core-requirements.txt
	$(CORE_PY) $(PIP) --upgrade -r $(CORE_VENV)/core-requirements.txt "$(CORE_TORCH)"
	$(CORE_PY) $(PIP) --no-deps -e .
	@$(CORE_PY) -c 'import importlib.util, sys; sys.exit("dgl is installed in $(CORE_VENV); test-core needs an environment without it" if importlib.util.find_spec("dgl") else 0)'
	@touch $(CORE_STAMP)

clean:
	rm -rf $(VENV) $(CORE_VENV) *.egg-info .pytest_cache site
