#!/usr/bin/env bash
# Installs the Python package's wheel into a fresh venv on a PATH without any
# Rust toolchain (`pip install --no-index`: nothing fetched, nothing compiled), and
# runs the Python suite against the installed package (not the source tree).
#
#   scripts/wheel-test.sh WHEEL_DIR TEST_MODULE [pytest args…]
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 WHEEL_DIR TEST_MODULE [pytest args]" >&2; exit 2; }
wheel_dir=$1
module=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
shopt -s nullglob
wheels=("$wheel_dir"/redlock_fenced-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "$0: expected one wheel in $wheel_dir, found ${#wheels[@]} (make wheel)" >&2; exit 1; }
wheel=${wheels[0]}

# PATH without every directory that holds cargo, rustc or rustup.
clean_path=""
IFS=: read -r -a dirs <<< "$PATH"
for dir in "${dirs[@]}"; do
  [ -n "$dir" ] || continue
  if [ -e "$dir/cargo" ] || [ -e "$dir/rustc" ] || [ -e "$dir/rustup" ]; then
    continue
  fi
  clean_path=${clean_path:+$clean_path:}$dir
done
export PATH=$clean_path
unset CARGO RUSTC RUSTUP_HOME CARGO_HOME
if command -v cargo >/dev/null || command -v rustc >/dev/null; then
  echo "$0: a Rust toolchain is still on PATH: $(command -v cargo rustc)" >&2
  exit 1
fi

venv=$root/target/wheel-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --no-index "$wheel"
"$venv/bin/pip" install -q --only-binary=:all: -r "$root/python/requirements-wheel-test.txt"
installed=$("$venv/bin/python" -c 'import redlock_fenced; print(redlock_fenced.__file__)')
case "$installed" in
  "$venv"/*) echo "testing the installed wheel: $installed" ;;
  *) echo "$0: redlock_fenced imported from $installed, not from the wheel" >&2; exit 1 ;;
esac
# The suite in place: python/pysrc is on no import path (pytest adds only
# the tests' own folder), so every test imports the installed wheel; the
# check below the run says so again.
unset PYTHONPATH
cd "$root/python"
REDLOCK_MODULE=$module "$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
"$venv/bin/python" - "$venv" <<'PY'
import sys
import redlock_fenced, redlock_fenced._native as native
for mod in (redlock_fenced, native):
    assert mod.__file__.startswith(sys.argv[1]), f"{mod.__name__} from {mod.__file__}"
print(f"the suite ran against {native.__file__}")
PY
