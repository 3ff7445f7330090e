# simsci: the two commands of README.md are `make tour` and `make test`.
#
# `make venv` creates .venv and installs simsci editable with its extras (dev, plot, and
# rl + minari so the Stable Baselines3 and Minari tests run rather than skip;
# neuraloperator's model classes, for the neuralop.* backbones' tests; aeon, for the aeon
# importer's tests). If the Python that creates it already has torch (a user's own CUDA
# build, say), the venv sees it through --system-site-packages and keeps it; otherwise
# torch==2.13.0 is installed (on this project's machines a CPU build of it lies on disk).
#
# pip byte-compiles what it installs one file at a time (~50 s of the install on 2 cores,
# torch alone ~30 s); --no-compile then compileall -j 0 does the same on every core. The
# .pyc files must exist: where PYTHONDONTWRITEBYTECODE is set (as on CI) nothing caches
# them later and every process would recompile torch on import (+3 s each). Left out:
# packages' own tests/ and pip; a failure is ignored (torch ships a py3.12-only file that
# 3.11 cannot compile, as pip also skips), since it only costs speed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_FLAGS ?= -q
# extra arguments of benchmarks/gpu_check.py (make gpu-check), e.g. --script-timeout 60
GPU_CHECK_FLAGS ?=
# make test / test-all run the suite on PYTEST_WORKERS processes (pytest-xdist): one per
# CPU this process may use (nproc), at most 4; on the 2-core CI machine that is 2, the
# fastest there (the tests are CPU-bound: a third worker only adds its start-up). Not
# `-n auto`: it counts physical cores (psutil), 1 on a VM whose 2 vCPUs are one
# hyperthreaded core, and ignores CPU affinity. Past 4 the longest tests bound the wall
# time while each worker still pays its imports and collection (~10 s of CPU) and builds
# its own module fixtures. --dist worksteal: each worker starts on one contiguous share
# of the tests (a module's fixtures are built once) and takes over half of another's
# remaining tests when it runs dry (no idle tail). PYTEST_WORKERS=0: one process (pdb, -x).
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2); [ "$$n" -gt 4 ] && n=4; echo $$n)
PYTEST_XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist worksteal)
GPU_TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -gt 12 ] && n=12; echo $$n)

.PHONY: venv tour test test-all lint lint-imports format bench gpu-check pretrained-vectorworld clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
	    echo "using the torch that $(PYTHON) already has"; \
	    $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else \
	    $(PYTHON) -m venv $(VENV); \
	  fi; \
	fi
	@$(PY) -c "import torch" >/dev/null 2>&1 || $(PY) -m pip install --no-compile "torch==2.13.0"
	$(PY) -m pip install --no-compile -e ".[dev,plot,rl,minari]"
# neuraloperator (the extra simsci[neuralop]) for the neuralop.* backbones and their tests,
# with --no-deps: its declared requirements pull wandb and config tools used only by its
# training scripts; its model classes need these three beside torch, numpy, h5py and
# matplotlib
	$(PY) -m pip install --no-compile --no-deps "neuraloperator==2.0.0" "tensorly==0.10.0" \
	  "tensorly-torch==0.5.0" "opt_einsum==3.4.0"
# aeon (the extra simsci[aeon]) for the aeon importer, its tests and the classification
# test on aeon's bundled sets, with --no-deps: every aeon release caps numba < 0.64, whose
# releases cap numpy < 2.4, so resolving it would downgrade numpy. numba 0.67.0 takes
# numpy < 2.6 (aeon-toolkit/aeon#3833 raises aeon's cap past it); the rest are aeon's
# and scikit-learn's other requirements, all new to the venv (~90 MB of wheels, llvmlite
# 60 of them)
	$(PY) -m pip install --no-compile --no-deps "aeon==1.6.0" "numba==0.67.0" "llvmlite==0.49.0" \
	  "pandas==3.0.6" "scikit-learn==1.9.1" "joblib==1.6.0" "threadpoolctl==3.8.0" \
	  "narwhals==2.29.0" "Deprecated==1.3.1" "wrapt==2.5.2"
	@$(PY) -m compileall -q -j 0 -x '/tests/|/site-packages/pip/' \
	  "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
	@touch $(STAMP)

tour: venv
	$(VENV)/bin/simsci tour

# simsci's own .pyc files (git-ignored __pycache__): with PYTHONDONTWRITEBYTECODE set, as
# on CI, each of the ~40 processes a run starts would compile what it imports (~0.6 s).
# A later edit only makes Python recompile that file in memory.
PYCOMPILE = $(PY) -m compileall -q -j 0 simsci envs operators >/dev/null

test: venv
	@$(PYCOMPILE)
	$(PY) -m pytest $(PYTEST_XDIST) $(PYTEST_FLAGS)

test-all: venv
	@$(PYCOMPILE)
	$(PY) -m pytest $(PYTEST_XDIST) $(PYTEST_FLAGS) -m ""

lint: venv lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# the layers and the private-module rule of shared/design/architecture.md (import-linter)
lint-imports: venv
	bash .ci/lint_imports.sh

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: venv
	$(PY) benchmarks/run_all.py

# Every integrator, model and environment on CUDA, then the CUDA benchmarks (target < 5
# min; 8.2 min on an H200 on 2026-12-04 before the benchmarks went to quick sizes, ~520 s
# after: tests 139 s on 8 workers, scripts 276 s, trainings ~105 s). The device tests
# run on GPU_TEST_WORKERS processes: one per CPU, at most 12 (they are mostly CPU-bound
# set-up around short CUDA work; the 4-worker cap of `make test` would double them there).
# Both parts run even when the first fails; the target fails if either did.
# On a GPU machine without network whose python3 already has the dependencies, skip the
# venv: `make gpu-check PY=python3` (run from the repository root). simsci is then
# installed editable into that python (no dependencies, no index): envs/ and operators/
# only become simsci.envs and simsci.operators through an install (package-dir).
gpu-check: $(if $(filter $(VENV)/bin/python,$(PY)),venv)
	$(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu-check: torch sees no CUDA device')"
	$(if $(filter $(VENV)/bin/python,$(PY)),,$(PY) -m pip install -q --no-deps --no-build-isolation --no-index -e .)
	@status=0; \
	SIMSCI_TEST_DEVICE=cuda $(PY) -m pytest $(PYTEST_FLAGS) -n $(GPU_TEST_WORKERS) --dist worksteal -m "device and not slow" || status=1; \
	$(PY) benchmarks/gpu_check.py $(GPU_CHECK_FLAGS) || status=1; \
	exit $$status

# The VectorWorld shipped as package data (simsci/pretrained/vectorworld, its command,
# seeds and hashes in simsci/pretrained/manifest.json): 2,000 simulated drives (data seed
# 0), the tile generator (seam frames: 1,500 steps and a 1,500-step warm restart), VAE
# and ΔSim trained on one CPU thread (seed 0; 51 min on a 2-core machine), then copied
# in with 64 openings made ahead. Run it again after an interruption: it resumes.
VW_DEFAULT := runs/vw_default
pretrained-vectorworld: venv
	test -f $(VW_DEFAULT)/scenes.h5 || OMP_NUM_THREADS=1 $(PY) -m simsci generate driving \
	  --episodes 2000 --seed 0 --out $(VW_DEFAULT)/scenes.h5
	OMP_NUM_THREADS=1 $(PY) -m simsci train vectorworld --data $(VW_DEFAULT)/scenes.h5 \
	  --out $(VW_DEFAULT)/model --param tile_steps=1500 --param vae_steps=6000 \
	  --param npc_steps=3000 --param seam_frame=true --param tile_more_steps=1500 \
	  --seed 0 --resume --no-progress
	$(PY) -c "from simsci.models.vectorworld._bundle import ship_default; \
	  print(ship_default('$(VW_DEFAULT)/model', data_seed=0, train_seed=0))"

clean:
	rm -rf $(VENV) build dist *.egg-info runs
