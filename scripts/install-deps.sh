#!/usr/bin/env bash
# Installs the system packages the build and the tests need, when missing:
# redis-server (Redis 7.0+), libclang (for redis-module's bindgen),
# Python's venv (the Python package's tests run in a venv), the openssl
# command (the Python and Node TLS tests make their certificates with it),
# and Node.js with npm for the Node package (node/), which needs Node 20+.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if ! command -v python3 >/dev/null 2>&1; then
  missing+=(python3 python3-venv)
elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libclang\(-[0-9.]*\)\?\.so'; then
  missing+=(libclang-dev)
fi
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
node_new_enough() {
  # The Node package needs Node.js 20 or newer (Debian 12's nodejs is 18;
  # Debian 13 and NodeSource's packages have 20+).
  command -v node >/dev/null 2>&1 || return 0
  local major
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$major" -lt 20 ]; then
    echo "Node.js $(node --version) is too old for the Node package (node/): it needs 20 or newer" >&2
    return 1
  fi
}
if [ ${#missing[@]} -eq 0 ]; then
  node_new_enough
  exit
fi

echo "installing: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "need root or sudo to install ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
node_new_enough
