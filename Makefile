# Two entry points, both idempotent: `make demo` and `make test`.
# Everything is installed into .venv/ in the project root.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# what the install builds from: the package's metadata and the JupyterLab extension's sources
# (a changed extension is rebuilt into .venv, where JupyterLab loads it from)
INSTALL_INPUTS := pyproject.toml Makefile jupyter_distcomp/contracts.json \
	$(wildcard labextension/package.json labextension/src/*.ts labextension/style/*.css \
	labextension/schema/*.json)
HASH := $(shell cat $(INSTALL_INPUTS) | sha1sum | cut -c1-12)
# make demo installs the package and what it needs, with uv (a third of pip's time), and
# byte-compiled (a rank's imports are then read, not compiled, at each start); the JupyterLab
# extension is not built: the demo runs its notebook headless. make lab builds the extension
# (Node.js); make test adds the extra [test]: the test tools and the tensorflow and deepspeed
# launchers' frameworks, with pip, which takes torch's pinned version from the wheel on disk
STAMP := $(VENV)/.installed-$(HASH)
LAB_STAMP := $(VENV)/.installed-lab-$(HASH)
TEST_STAMP := $(VENV)/.installed-test-$(HASH)

.PHONY: demo lab test test-gpu test-fast screenshots soak lint format bench docs horovod

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) $(INSTALL_INPUTS)
	$(PY) -m pip install -q --upgrade pip uv
	SKIP_JUPYTER_BUILDER=1 $(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode -e .
	rm -f $(VENV)/.installed-*
	touch $@

$(LAB_STAMP): $(STAMP)
	rm -rf jupyter_distcomp/labextension  # built again from labextension/ by the install
	$(PY) -m pip install -q -e .
	touch $@

# the extension built by the install above is kept (the editable build skips it when present)
$(TEST_STAMP): $(LAB_STAMP)
	$(PY) -m pip install -q 'torch==2.13.0'
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: $(STAMP)
	$(PY) -m jupyter_distcomp.demo

# JupyterLab with the extension, on the notebooks (it listens on localhost only)
lab: $(LAB_STAMP)
	$(VENV)/bin/jupyter lab notebooks

# The browser tests (tests/test_browser.py) drive Debian's chromium; Playwright's own browser
# downloads are not reachable from CI.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	else \
		echo "make test needs Debian's chromium at $(CHROMIUM) for the browser tests." >&2; \
		echo "Fix: sudo apt-get install -y chromium (or run make test as root)." >&2; exit 1; \
	fi

# The multi-host tests (tests/test_ranks_hosts.py) run Debian's sshd in network namespaces;
# local ranks listen on loopback through a small preloaded library built with the C compiler.
SSHD := /usr/sbin/sshd
$(SSHD):
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server gcc; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server gcc; \
	else \
		echo "make test needs Debian's openssh-server ($(SSHD)) for the multi-host tests." >&2; \
		echo "Fix: sudo apt-get install -y openssh-server gcc (or run make test as root)." >&2; exit 1; \
	fi

# Horovod for PyTorch over MPI (tests/test_horovod*.py; opt-in otherwise): its last release
# compiled from its sdist with C++17 against .venv's torch and Open MPI, with a C++ compiler
# and cmake (Debian's), the wheel cached under ~/.cache/jupyter-distcomp/wheels/ (about 5
# minutes on 2 cores the first time); nothing to do when `horovodrun --check-build` shows
# PyTorch and MPI (python -m jupyter_distcomp.horovod_install, docs/horovod.md)
CMAKE := /usr/bin/cmake
$(CMAKE):
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q cmake g++; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q cmake g++; \
	else \
		echo "make horovod needs Debian's cmake ($(CMAKE)) and g++ to compile Horovod." >&2; \
		echo "Fix: sudo apt-get install -y cmake g++ (or run make horovod as root)." >&2; exit 1; \
	fi

horovod: $(TEST_STAMP) $(CMAKE)
	$(PY) -m jupyter_distcomp.horovod_install

test: lint $(CHROMIUM) $(SSHD) horovod
	$(PY) -m pytest

# the GPU tests alone (tests/test_gpu.py): on a machine with at least one CUDA GPU; elsewhere
# they are skipped with the reason. bench/gpu_check.sh runs them with the NCCL ledger bench.
test-gpu: $(TEST_STAMP)
	$(PY) -m pytest -m gpu tests/

# the documentation site, with the shipped notebooks executed as pages (build/docs/html/;
# docs/execute.py runs them, the debugging notebook's prompts answered as its cells script)
docs: $(TEST_STAMP)
	$(PY) docs/build.py build/docs

# the edit loop: no test that starts ranks, kernels, servers or browsers
test-fast: $(TEST_STAMP)
	$(PY) -m pytest -m "not slow"

# the README's screenshots (docs/screenshots/), retaken by the browser tests that take them;
# make test writes them under test-output/screenshots/ instead
SCREENSHOT_TESTS := $(shell grep -l 'doc_screenshot\|DOCS_SCREENSHOTS' tests/test_*.py)
screenshots: $(TEST_STAMP) $(CHROMIUM)
	DISTCOMP_SCREENSHOTS=docs/screenshots $(PY) -m pytest $(SCREENSHOT_TESTS)

# not part of make test: 1,000 cells, 100 command runs, 50 rank kills in one kernel
soak: $(TEST_STAMP)
	$(PY) bench/soak.py

# style, types and the import contracts of pyproject.toml ([tool.importlinter])
lint: $(TEST_STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	cd labextension && ../$(VENV)/bin/jlpm run lint:check

format: $(TEST_STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

bench: $(TEST_STAMP)
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done
