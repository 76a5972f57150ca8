# Every target sets up what it needs on a fresh machine: a venv with pinned dependencies,
# then an incremental build (ccache when present). `make test` is what CI runs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
JOBS ?= $(shell nproc)
SOURCES := CMakeLists.txt pyproject.toml $(shell find runtime csrc -name '*.[ch]' -o -name '*.cpp' -o -name 'CMakeLists.txt')
PYTEST_ARGS ?=
BLAS_DIR = $$($(PY) -c "import os, scipy_openblas32 as s; print(os.path.dirname(s.get_lib_dir()))")

.PHONY: setup build test test-c test-asan test-py test-dist-4 conformance demo bench clean

setup: .stamp-build

APT_JARGON = apt-get install -y -q --reinstall -o 'Dpkg::Options::=--path-include=/usr/share/doc/jargon-text/*' jargon-text >/dev/null 2>&1
$(VENV)/.stamp-deps: requirements-dev.txt
	@command -v ccache >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get install -y -q ccache >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q ccache >/dev/null 2>&1)); } || \
	  echo "note: ccache not available; building without it"
	@# The demo and test corpus: the Jargon File (public domain), Debian package jargon-text
	@# (--path-include: images that exclude /usr/share/doc from packages still get it).
	@test -f /usr/share/doc/jargon-text/jargon.txt.gz || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { $(APT_JARGON) || (apt-get update -q >/dev/null 2>&1 && $(APT_JARGON)); } && \
	  test -f /usr/share/doc/jargon-text/jargon.txt.gz; } || \
	  echo "note: the demo corpus is missing: sudo apt-get install jargon-text (make demo and make test need it)"
	@# iproute2 (ip netns): tests/test_distributed_two_hosts.py joins two network namespaces.
	@command -v ip >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get install -y -q iproute2 >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q iproute2 >/dev/null 2>&1)); } || \
	  echo "note: iproute2 is missing: sudo apt-get install iproute2 (the two-host test needs it)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements-dev.txt
	touch $@

# Autoload off while building: a broken earlier build must not stop its own rebuild.
.stamp-build: $(VENV)/.stamp-deps $(SOURCES)
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PIP) install -q --no-build-isolation --no-deps -e .
	touch $@

build: .stamp-build

# C runtime tests (ctest), plain and under AddressSanitizer + UBSan.
test-c: $(VENV)/.stamp-deps
	cmake -S runtime -B build/runtime -DCMAKE_BUILD_TYPE=Release -DVNC_BLAS_DIR=$(BLAS_DIR) >/dev/null
	cmake --build build/runtime -j $(JOBS)
	cd build/runtime && ctest --output-on-failure

test-asan: $(VENV)/.stamp-deps
	cmake -S runtime -B build/runtime-asan -DVNC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DVNC_BLAS_DIR=$(BLAS_DIR) >/dev/null
	cmake --build build/runtime-asan -j $(JOBS)
	cd build/runtime-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure

test-py: .stamp-build
	$(PY) -m pytest tests $(PYTEST_ARGS)

test: test-c test-asan test-py

# Every OpInfo reaching a native kernel, every dtype, all call forms, and every input of every
# stock torch.nn module (module_db) in train and eval mode (make test runs a bounded slice of
# each); prints counts per dtype and the overloads no sample reached; progress in
# build/conformance.jsonl; the fallbacks seen go to docs/conformance_fallbacks.json.
conformance: .stamp-build
	mkdir -p build && rm -f build/conformance.jsonl
	NEURON_CONFORMANCE=full NEURON_CONFORMANCE_LOG=build/conformance.jsonl \
	  NEURON_CONFORMANCE_FALLBACKS=docs/conformance_fallbacks.json \
	  $(PY) -m pytest tests/test_conformance.py tests/test_module_db.py $(PYTEST_ARGS)

# Trains a small GPT on the Jargon File on neuron (about 80 s on 2 cores); writes runs/demo/.
demo: .stamp-build
	$(PY) examples/train_gpt.py --run-name demo

# The 2-D mesh (FSDP x tensor parallel) on 4 ranks: slower, so not part of make test.
test-dist-4: .stamp-build
	$(PY) -m pytest tests/dist_mesh_4ranks.py $(PYTEST_ARGS)

bench: .stamp-build
	$(PY) bench/bench_device.py
	$(PY) bench/run_tiers.py
	$(PY) bench/bench_compile.py
	$(PY) bench/bench_dist.py

clean:
	rm -rf build .stamp-build $(VENV)/.stamp-deps
