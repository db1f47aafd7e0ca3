# redlock: build, test, demo, safety suite and benchmarks.
# Every target installs the system packages it needs when they are missing.

CARGO ?= cargo
RELEASE_MODULE := $(CURDIR)/target/release/libredlock.so
TEST_MODULE := $(CURDIR)/target/debug/libredlock.so

.PHONY: deps build test lint demo safety bench clean

deps:
	@./scripts/install-deps.sh

## build: the release module (target/release/libredlock.so) and the CLI
build: deps
	$(CARGO) build --release -p redlock-module -p redlock-client

## test: formatting, lints, every unit and integration test (module, client, safety mutants, benchmark smoke run), then the safety quick run
test: deps lint
	$(CARGO) build --release -p redlock-module
	$(CARGO) build -p redlock-module --features test-hooks
	REDLOCK_RELEASE_MODULE=$(RELEASE_MODULE) REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) test --workspace --features redlock-module/test-hooks,redlock-client/danger-test-switches
	REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) run -q -p redlock-safety --bin safety -- --quick --out target/safety-quick
	$(MAKE) python-test

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p redlock-module --all-targets --features test-hooks -- -D warnings
	$(CARGO) clippy -p redlock-client --all-targets -- -D warnings

## python-test: the Python package (python/): built into target/pyvenv (PyPI for the tools), pytest against five local nodes, mypy --strict, stubtest
.PHONY: python-test python-fault bench-python
PYVENV := $(CURDIR)/target/pyvenv
PYTHON_BUILD = PATH=$(PYVENV)/bin:$$PATH $(PYVENV)/bin/pip install -q --no-build-isolation --no-deps --force-reinstall ./python
python-test: deps
	$(CARGO) build -p redlock-module --features test-hooks
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/pip install -q -r python/requirements-test.txt
	MATURIN_PEP517_ARGS="--profile dev" $(PYTHON_BUILD)
	cd python && REDLOCK_MODULE=$(TEST_MODULE) $(PYVENV)/bin/python -m pytest -q -p no:cacheprovider tests
	cd python && $(PYVENV)/bin/python -m mypy --strict pysrc tests
	cd python && $(PYVENV)/bin/python -m mypy.stubtest redlock_fenced

## python-fault: the Python fault test's long form (make python-test runs 8 s of it); PY_FAULT_SECONDS=… to vary
PY_FAULT_SECONDS ?= 120
python-fault: python-test
	cd python && REDLOCK_MODULE=$(TEST_MODULE) $(PYVENV)/bin/python tests/fault.py --duration $(PY_FAULT_SECONDS) --seed $(SEED)

## bench-python: redlock_fenced against pottery (PyPI) and the Rust client, one run on five local nodes (release builds); ARGS=--secs … --rounds …
bench-python: deps
	$(CARGO) build --release -p redlock-module
	$(CARGO) build --release -p redlock-bench --example python_baseline
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/pip install -q maturin==1.16.0 pottery==3.0.1
	$(PYTHON_BUILD)
	REDLOCK_MODULE=$(RELEASE_MODULE) $(PYVENV)/bin/python python/bench/bench_python.py $(ARGS)

## demo: five local nodes loading the module through modules.conf, contending workers, a killed node, a stale write refused
demo: build
	$(CARGO) run --release -q -p redlock-client --example demo

## safety: the full fault-injection matrix (about 11 minutes); SEED=… DURATION=… (seconds) to vary it
SEED ?= 7
DURATION ?= 600
safety: deps
	$(CARGO) build -p redlock-module --features test-hooks
	REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) run -q -p redlock-safety --bin safety -- --seed $(SEED) --duration $(DURATION) --out target/safety

## bench: the benchmark table (five local nodes; about two minutes). ARGS=--smoke for a quick check
bench: deps
	./scripts/bench.sh $(ARGS)

clean:
	$(CARGO) clean
