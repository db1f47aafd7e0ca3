#!/usr/bin/env bash
# `make bench`: builds the release module and the benchmark, then runs it.
# The benchmark starts its own nodes on free loopback ports, prints one
# Markdown table (medians over rounds, ratios measured in the same run) and
# stops them again. Extra arguments go to redlock-bench, e.g.
#   scripts/bench.sh --smoke            # a second or two, checks every column
#   scripts/bench.sh --json bench.json  # also write every figure as JSON
#   scripts/bench.sh --rounds 9 --secs 2
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p redlock-module -p redlock-bench
target_dir="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)"
export REDLOCK_MODULE="${REDLOCK_MODULE:-$target_dir/release/libredlock.so}"
exec "$target_dir/release/redlock-bench" "$@"
