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

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p redlock-module --all-targets --features test-hooks -- -D warnings
	$(CARGO) clippy -p redlock-client --all-targets -- -D warnings

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

## fuzz-restore: the RESTORE fuzz run of tests/restore.rs with many more payloads (about four minutes); FUZZ_SEED=… FUZZ_CASES=… to vary it
FUZZ_SEED ?= 1
FUZZ_CASES ?= 100000
.PHONY: fuzz-restore
fuzz-restore: deps
	$(CARGO) build -p redlock-module --features test-hooks
	REDLOCK_MODULE=$(TEST_MODULE) REDLOCK_FUZZ_SEED=$(FUZZ_SEED) REDLOCK_FUZZ_CASES=$(FUZZ_CASES) \
		$(CARGO) test -p redlock-module --features test-hooks --test restore -- fuzzed --nocapture

## bench: the benchmark table (five local nodes; about two minutes). ARGS=--smoke for a quick check
bench: deps
	./scripts/bench.sh $(ARGS)

clean:
	$(CARGO) clean
