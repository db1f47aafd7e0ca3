#!/usr/bin/env bash
# Writes the modules.conf of an installed redlock to stdout: the repository's
# modules.conf (every config, documented), with the absolute path of the
# installed module on its loadmodule line.
#
#   packaging/modules-conf.sh MODULE_PATH CONF_PATH
#
# MODULE_PATH is where the module is installed (e.g.
# /usr/lib/redis/modules/libredlock.so), CONF_PATH where this file is
# installed (e.g. /etc/redis/redlock.conf): the header names it in the
# `include` line to add to redis.conf.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 MODULE_PATH CONF_PATH" >&2; exit 2; }
module=$1
conf=$2
case "$module$conf" in
  *'|'*) echo "$0: paths must not contain '|'" >&2; exit 2 ;;
esac
case "$module" in
  /*) ;;
  *) echo "$0: the module path must be absolute, got '$module'" >&2; exit 2 ;;
esac

source_conf="$(dirname "$0")/../modules.conf"
grep -q '^loadmodule ' "$source_conf" || {
  echo "$0: no loadmodule line in $source_conf" >&2
  exit 1
}

# The repository's file explains how to build the module and resolves a
# relative path; the installed one names the installed files instead.
sed -e "s|/path/to/redlock/modules.conf|$conf|g" \
    -e "s|/usr/local/lib/redis/modules/libredlock.so|$module|g" \
    -e '/^# The module library/,/^loadmodule /c\
# The installed module library.\
loadmodule '"$module" \
    "$source_conf"
