#!/usr/bin/env bash
# scripts/ab.sh REV [ROUNDS] [DURATION]: is the hot path of this tree as fast
# as REV's? Builds idgen at REV (a temporary git worktree) and from the
# working tree, then runs ROUNDS (3) interleaved rounds: each binary started
# standalone on loopback, `idctl bench` with 16 callers for DURATION (5s) on
# SNOWFLAKE and on UNORDERED, stopped. Prints every run and, per channel,
# the medians and new/old. Ratios from one run of this script only: the
# machine's noise is about as large as the differences it can show.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/ab.sh REV [ROUNDS] [DURATION]}
rounds=${2:-3}
dur=${3:-5s}
out=output/ab
rm -rf "$out" && mkdir -p "$out"
wt=$(mktemp -d)
git worktree add -q --detach "$wt" "$rev"
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true; pkill -f "$out/(old|new)-idgen" 2>/dev/null || true' EXIT
(cd "$wt" && go build -o "$OLDPWD/$out/old-idgen" ./cmd/idgen)
go build -o "$out/new-idgen" ./cmd/idgen
go build -o "$out/idctl" ./cmd/idctl
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for ((r = 1; r <= rounds; r++)); do
  for v in old new; do
    rpc=$(port) adm=$(port)
    rm -rf "$out/data-$v"
    "$out/$v-idgen" --data-dir "$out/data-$v" --rpc-addr "127.0.0.1:$rpc" --admin-addr "127.0.0.1:$adm" \
      --log-level warn >"$out/$v.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do "$out/idctl" health --admin-addr "127.0.0.1:$adm" --ready --timeout 1s >/dev/null 2>&1 && break; sleep 0.1; done
    for ch in snowflake unordered; do
      "$out/idctl" bench --addr "127.0.0.1:$rpc" --biz "ab$ch" --channel "$ch" --concurrency 16 --duration "$dur" --json |
        python3 -c 'import json,sys; d=json.load(sys.stdin); l=d["latency_us"]; print(sys.argv[1], sys.argv[2], sys.argv[3], round(d["requests_per_s"]), l["p50"], l["p99"], d["failed"])' "$r" "$v" "$ch" |
        tee -a "$out/runs.txt"
    done
    kill "$pid" && wait "$pid" || true
  done
done
python3 - "$out/runs.txt" <<'PY'
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
print("\nchannel    old req/s  new req/s  new/old  (medians of %d rounds; p50 us old/new)" % len({r[0] for r in runs}))
for ch in ("snowflake", "unordered"):
    med = {v: statistics.median(float(r[3]) for r in runs if r[1] == v and r[2] == ch) for v in ("old", "new")}
    p50 = {v: statistics.median(float(r[4]) for r in runs if r[1] == v and r[2] == ch) for v in ("old", "new")}
    print("%-10s %9.0f  %9.0f  %7.2f  (%.0f / %.0f)" % (ch, med["old"], med["new"], med["new"] / med["old"], p50["old"], p50["new"]))
PY
