#!/usr/bin/env bash
# Instructions a node spends per pipelined command pair, from callgrind on
# redis-server: run twice with different N and divide the difference of the
# totals by the difference of N (start-up and shutdown cancel out).
#
#   scripts/node-callgrind.sh MODULE N          # N × (REDLOCK.ACQUIRE + REDLOCK.RELEASE)
#   scripts/node-callgrind.sh MODULE N ping     # N × (PING + PING), the floor
#   scripts/node-callgrind.sh MODULE N floor    # with FLOOR on ACQUIRE, as the client sends it
#
# Each pair takes a free lock with a fresh 36-byte owner and frees it again;
# names cycle through a pool of 100. Prints the server's total instruction
# count; the callgrind output stays in the printed directory (stderr).
# Needs valgrind, redis-server, redis-cli and python3; the server listens on
# a free loopback port and is shut down with SHUTDOWN NOSAVE.
set -euo pipefail
module=$(realpath "$1")
n=$2
mode=${3:-redlock}
dir=$(mktemp -d /tmp/node-callgrind.XXXX)
python3 - "$n" "$mode" > "$dir/in.resp" <<'PY'
import sys
n, mode = int(sys.argv[1]), sys.argv[2]
def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out
parts = []
for i in range(n):
    if mode == "ping":
        parts += [cmd(b"PING"), cmd(b"PING")]
    else:
        key, owner = b"lock:%d" % (i % 100), b"%036d" % i
        acquire = [b"REDLOCK.ACQUIRE", key, owner, b"10000"]
        if mode == "floor":
            # A clock floor as the client sends it: microseconds since the epoch.
            acquire += [b"FLOOR", b"%d" % (1764626400000000 + i)]
        parts += [cmd(*acquire), cmd(b"REDLOCK.RELEASE", key, owner)]
sys.stdout.buffer.write(b"".join(parts))
PY
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cd "$dir"
valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --loadmodule "$module" restart-grace-ms 0 > "$dir/server.log" 2>&1 &
server=$!
for _ in $(seq 1 300); do redis-cli -p "$port" PING > /dev/null 2>&1 && break; sleep 0.2; done
redis-cli -p "$port" --pipe < "$dir/in.resp" > "$dir/pipe.out" 2>&1
redis-cli -p "$port" SHUTDOWN NOSAVE > /dev/null 2>&1 || true
wait "$server" || true
grep -q "errors: 0" "$dir/pipe.out" || { echo "error replies:" >&2; cat "$dir/pipe.out" >&2; }
awk '/^summary:/ {print $2}' "$dir/callgrind.out"
echo "$dir" >&2
