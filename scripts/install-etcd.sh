#!/usr/bin/env bash
# Installs etcd (Debian's etcd-server) when no `etcd` is on PATH: the baseline
# of `make bench-election`. Not needed by the build or the tests.
set -euo pipefail

command -v etcd >/dev/null 2>&1 && exit 0

echo "installing: etcd-server"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "need root or sudo to install etcd-server" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server >/dev/null
