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

## test: formatting, lints, the module's unit and integration tests, the client's, the safety suite's short run and the benchmark smoke run
test: deps lint
	$(CARGO) build --release -p redlock-module
	$(CARGO) build -p redlock-module --features test-hooks
	REDLOCK_RELEASE_MODULE=$(RELEASE_MODULE) REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) test --workspace --features redlock-module/test-hooks

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p redlock-module --all-targets --features test-hooks -- -D warnings

## demo: five local nodes loading the module through modules.conf, contending workers, a killed node, a stale write refused
demo: build
	$(CARGO) run --release -q -p redlock-client --example demo

## bench: the benchmark table (five local nodes; about two minutes). ARGS=--smoke for a quick check
bench: deps
	./scripts/bench.sh $(ARGS)

clean:
	$(CARGO) clean
