#!/usr/bin/env bash
# Instructions a node spends per write of the fenced-writes benchmark, from
# callgrind on redis-server (deterministic, unlike CPU time on a shared
# machine): run twice with different N and divide the difference of the
# totals by the difference of N.
#
#   scripts/fenced-callgrind.sh MODULE N set       # N × SET {r}k v
#   scripts/fenced-callgrind.sh MODULE N fenced    # N × REDLOCK.FENCED {r}g lk 7 SET {r}k v
#   scripts/fenced-callgrind.sh MODULE N evalsha   # N × EVALSHA of the Lua recipe (bench/src/fenced.rs)
#
# Prints the mode, N, the server's total instruction count and the run's
# directory. Needs valgrind, redis-server, redis-cli and python3; the server
# listens on a free loopback port and is shut down with SHUTDOWN NOSAVE.
set -euo pipefail
module=$(realpath "$1"); n=$2; mode=$3
dir=$(mktemp -d /tmp/fenced-callgrind.XXXX)
python3 - "$n" "$mode" > "$dir/in.resp" <<'PY'
import sys, hashlib
n, mode = int(sys.argv[1]), sys.argv[2]
lua = b"""local t = tonumber(ARGV[1])
local h = tonumber(redis.call('GET', KEYS[1]) or '0')
if t < h then return redis.error_reply('STALE token ' .. ARGV[1] .. ' is below ' .. h) end
if t > h then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('SET', KEYS[2], ARGV[2])"""
sha = hashlib.sha1(lua).hexdigest().encode()
def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out
parts=[]
if mode=="evalsha": parts.append(cmd(b"SCRIPT",b"LOAD",lua))
for i in range(n):
    v=b"value-%08d" % i
    if mode=="set": parts.append(cmd(b"SET",b"{r}k",v))
    elif mode=="fenced": parts.append(cmd(b"REDLOCK.FENCED",b"{r}g",b"lk",b"7",b"SET",b"{r}k",v))
    else: parts.append(cmd(b"EVALSHA",sha,b"2",b"{r}g",b"{r}k",b"7",v))
sys.stdout.buffer.write(b"".join(parts))
PY
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cd "$dir"
valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --loadmodule "$module" > "$dir/server.log" 2>&1 &
server=$!
for _ in $(seq 1 300); do redis-cli -p "$port" PING > /dev/null 2>&1 && break; sleep 0.2; done
redis-cli -p "$port" --pipe < "$dir/in.resp" > "$dir/pipe.out" 2>&1
redis-cli -p "$port" SHUTDOWN NOSAVE > /dev/null 2>&1 || true
wait "$server" || true
grep -q "errors: 0" "$dir/pipe.out" || { echo "error replies:" >&2; cat "$dir/pipe.out" >&2; }
echo "$mode $n $(awk '/^summary:/ {print $2}' "$dir/callgrind.out") $dir"
