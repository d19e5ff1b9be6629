#!/usr/bin/env bash
# Side-by-side benchmarks for BENCHMARKS.md.
#
#   scripts/bench.sh              the full run (3 repetitions, 5 s per load run)
#   RUNS=1 DURATION=2s GOBENCH=0 scripts/bench.sh   a quick look
#   BASELINE=old-go.txt GOCOUNT=6 scripts/bench.sh
#                                 also compare the Go benchmarks with an earlier run
#
# Builds idgen, idctl and noop, starts on loopback (temp data dirs):
#   idgen      standalone, default settings          (snowflake, unordered, ordered, batches, RSS)
#   idgen-s1   standalone, --max-step 1              (UNORDERED step pinned at 1 / a huge-step business)
#   idgen-s100 standalone, --max-step 100            (UNORDERED step pinned at 100)
#   noop       the constant-answer Kitex server      (the RPC floor)
#   idgen-my   --mysql, --max-step 100               (only with IDGEN_TEST_MYSQL, see ./build.sh servers start)
#   own1, own2a+own2b  ZooKeeper + MariaDB clusters of 1 and 2 nodes: ORDERED shard owners,
#              cached and gapless, one hot key or 64 keys, callers split over 2 nodes
#              (only with IDGEN_TEST_MYSQL and IDGEN_TEST_ZK)
#   own3a+own3b+own3c  a three-node cluster; own1, own2 and own3 are also driven by the
#              discovering client (idctl bench --zk, or --addr with every node), which
#              sends ORDERED to the shard's owner: scenarios own*-zk-*, own*-list-*
# then runs every scenario RUNS times, interleaved (rep 1 of all, rep 2 of all, ...),
# and the Go benchmarks of bench/ (and BenchmarkOrdered* of segment/mysqlstore
# with IDGEN_TEST_MYSQL). Results: bench/results/<stamp>.jsonl (one `idctl bench
# --json` object per line, with scenario, rep and server RSS) and <stamp>-go.txt
# (`go test -bench` output as it is: the Go benchmark format benchstat reads);
# copied to latest.jsonl / latest-go.txt. Prints the markdown tables of the load
# runs (scripts/chart), benchstat's summary of the Go benchmarks and, with
# BASELINE, benchstat's comparison of BASELINE (old) with this run (new); writes
# docs/bench-latency.svg. benchstat is pinned in tools/go.mod.
#
# Environment: RUNS (3), DURATION (5s), WARMUP (1s), GOBENCH (1), BENCHTIME (500ms), ORDERED_BENCHTIME (3000x),
# GOCOUNT (-count of the Go benchmarks, default RUNS; benchstat wants 6 or more for
# confidence intervals, 4 or more to call a difference), BASELINE (an earlier
# <stamp>-go.txt, or any `go test -bench` output, to compare with; needs GOBENCH=1),
# BENCHSTAT_FLAGS (extra benchstat flags, e.g. '-ignore cpu' to compare a BASELINE
# from another machine, which benchstat otherwise keeps in a table of its own),
# OUT_DIR (bench/results), SVG (docs/bench-latency.svg), IDGEN_TEST_MYSQL (optional;
# .testenv is read when present), ONLY (an extended regexp: run only the load
# scenarios it matches, e.g. ONLY='^(noop|idgen)-c(16|64)$'; latest.* and the
# chart are then left alone), BASE_IDGEN (an idgen binary built from another commit,
# e.g. main: it runs as a second one-node owner cluster, own1base, and every
# one-node owner scenario (own-cached-*, own-gapless-*) runs on it too, as
# NAME-base, right after this build's, so the two are compared in one run,
# req/s and RSS; it also runs as two- and three-node clusters, own2base and
# own3base, and every own2-/own3- cluster scenario runs on them as NAME-base),
# BASE_IDCTL (the other build's idctl: it drives the NAME-base cluster
# scenarios, so a client change is compared too).
#
# PERF_DIR=DIR records a system-wide CPU profile (perf record -a -g) of every
# load run into DIR/NAME-rREP.data, for `perf report -i FILE --sort comm` (the
# share of each process: idctl, the nodes, MariaDB, ZooKeeper) and
# `perf report -i FILE --pid PID --no-children` (one process).
#
# With the owner clusters, every rep also times single durable commits on the
# same MariaDB (200 autocommit single-row UPDATEs in a row on one connection:
# t_commit) and the summary reports each gapless scenario against its bound
# floor x t_rpc / (t_rpc + t_commit), t_rpc = callers / floor (issue 31).
set -euo pipefail
case ${BASELINE:-} in
'' | /*) ;;
*) BASELINE=$PWD/$BASELINE ;; # relative to where the script was started
esac
cd "$(dirname "$0")/.."
ROOT=$(pwd)

RUNS=${RUNS:-3}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
GOBENCH=${GOBENCH:-1}
BENCHTIME=${BENCHTIME:-500ms}
GOCOUNT=${GOCOUNT:-$RUNS}
BASELINE=${BASELINE:-}
OUT_DIR=${OUT_DIR:-$ROOT/bench/results}
SVG=${SVG:-$ROOT/docs/bench-latency.svg}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'bench.sh: %s\n' "$*" >&2; exit 1; }

read -r -a BENCHSTAT_ARGS <<<"${BENCHSTAT_FLAGS:-}"
benchstat() { go tool -modfile="$ROOT/tools/go.mod" benchstat ${BENCHSTAT_ARGS[@]+"${BENCHSTAT_ARGS[@]}"} "$@"; }

# Check BASELINE before the long runs, not after them.
if [ -n "$BASELINE" ]; then
  [ "$GOBENCH" = 1 ] || die "BASELINE=$BASELINE compares Go benchmarks: it needs GOBENCH=1"
  [ -r "$BASELINE" ] || die "BASELINE=$BASELINE: no such file"
  grep -qs '^Benchmark' "$BASELINE" || die "BASELINE=$BASELINE: no benchmark results in it (want \`go test -bench\` output, e.g. bench/results/latest-go.txt)"
fi

free_port() {
  python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

wait_port() { # port seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

WORK=$(mktemp -d /tmp/idgen-bench.XXXXXX)
PIDS=()
MYSQL_DB=""
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$MYSQL_DB" ]; then
    mariadb -h127.0.0.1 -P"$IDGEN_TEST_MYSQL_PORT" -uroot -e "DROP DATABASE IF EXISTS \`$MYSQL_DB\`; DROP DATABASE IF EXISTS \`${MYSQL_DB}_own1\`; DROP DATABASE IF EXISTS \`${MYSQL_DB}_own2\`; DROP DATABASE IF EXISTS \`${MYSQL_DB}_own3\`; DROP DATABASE IF EXISTS \`${MYSQL_DB}_own1base\`; DROP DATABASE IF EXISTS \`${MYSQL_DB}_own2base\`; DROP DATABASE IF EXISTS \`${MYSQL_DB}_own3base\`" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
if [ -n "$BASELINE" ]; then
  # A snapshot: BASELINE may be latest-go.txt, which this run replaces.
  cp "$BASELINE" "$WORK/baseline-go.txt"
fi

log "building idgen, idctl, noop into $WORK/bin"
mkdir -p "$WORK/bin" "$OUT_DIR"
go build -o "$WORK/bin/idgen" ./cmd/idgen
go build -o "$WORK/bin/idctl" ./cmd/idctl
go build -o "$WORK/bin/noop" ./cmd/noop
IDCTL=$WORK/bin/idctl

declare -A ADDR PID ADMIN
# start_idgen NAME [flags...]
start_idgen() {
  local name=$1; shift
  local port admin; port=$(free_port); admin=$(free_port)
  local bin=$WORK/bin/idgen
  case $name in own1base | own[23]base?) bin=$BASE_IDGEN ;; esac
  mkdir -p "$WORK/$name"
  "$bin" --data-dir "$WORK/$name/data" --rpc-addr "127.0.0.1:$port" --admin-addr "127.0.0.1:$admin" \
    --log-level warn "$@" >"$WORK/$name/log" 2>&1 &
  PID[$name]=$!; PIDS+=($!)
  ADDR[$name]=127.0.0.1:$port ADMIN[$name]=127.0.0.1:$admin
  wait_port "$port" 30 || { cat "$WORK/$name/log" >&2; die "$name did not start"; }
  wait_ready "127.0.0.1:$admin" 30 || { cat "$WORK/$name/log" >&2; die "$name did not become ready"; }
  log "$name on ${ADDR[$name]} (pid ${PID[$name]})"
}
# wait_ready ADMIN_ADDR SECONDS: every channel serves, as a user would check
# (`idctl health --channel`): a node answers from its first moment but
# refuses a channel as "starting" until that channel can serve (issue 31).
wait_ready() {
  local end=$((SECONDS + $2)) ch
  for ch in snowflake unordered ordered; do
    until "$IDCTL" health --admin-addr "$1" --channel "$ch" >/dev/null 2>&1; do
      [ "$SECONDS" -lt "$end" ] || return 1
      sleep 0.1
    done
  done
}
start_noop() {
  local port; port=$(free_port)
  "$WORK/bin/noop" --addr "127.0.0.1:$port" >"$WORK/noop.log" 2>&1 &
  PID[noop]=$!; PIDS+=($!)
  ADDR[noop]=127.0.0.1:$port
  wait_port "$port" 30 || { cat "$WORK/noop.log" >&2; die "noop did not start"; }
  log "noop on ${ADDR[noop]} (pid ${PID[noop]})"
}
biz() { # SERVER NAME CHANNEL STEP
  "$IDCTL" biz create --addr "${ADDR[$1]}" --admin-token-file "$WORK/$1/data/admin.token" --biz "$2" --channel "$3" --step "$4" >/dev/null
}
# ordbiz SERVER NAME MODE: an ORDERED business in ordered_mode MODE
ordbiz() {
  # A node refuses calls until it has claimed its ORDERED shards: retry.
  local i
  for ((i = 0; i < 20; i++)); do
    if "$IDCTL" biz create --addr "${ADDR[$1]}" --admin-token-file "$WORK/$1/data/admin.token" --biz "$2" --channel ordered --ordered-mode "$3" >/dev/null 2>"$WORK/ordbiz.err"; then
      return 0
    fi
    grep -qs 'retryable' "$WORK/ordbiz.err" || break
    sleep 0.5
  done
  cat "$WORK/ordbiz.err" >&2
  return 1
}

start_idgen idgen
start_idgen idgen-s1 --max-step 1
start_idgen idgen-s100 --max-step 100
start_noop
biz idgen bench-sf snowflake 1000
biz idgen bench-un unordered 1000
biz idgen bench-ord ordered 1000
biz idgen bench-batch unordered 1
biz idgen-s1 tiny unordered 1
biz idgen-s1 huge unordered 100000000
biz idgen-s100 small unordered 100

# MariaDB, when the test servers run (./build.sh servers start).
if [ -z "${IDGEN_TEST_MYSQL:-}" ] && [ -f "$ROOT/.testenv" ]; then
  # shellcheck disable=SC1091
  . "$ROOT/.testenv"
fi
WITH_MYSQL=0
if [ -n "${IDGEN_TEST_MYSQL:-}" ] && [ -n "${IDGEN_TEST_MYSQL_PORT:-}" ] && wait_port "$IDGEN_TEST_MYSQL_PORT" 1 \
  && command -v mariadb >/dev/null; then
  MYSQL_DB=idgen_bench_$$
  mariadb -h127.0.0.1 -P"$IDGEN_TEST_MYSQL_PORT" -uroot -e "CREATE DATABASE \`$MYSQL_DB\`"
  DSN="${IDGEN_TEST_MYSQL%/}/$MYSQL_DB"
  "$IDCTL" db migrate --mysql "$DSN" >/dev/null
  start_idgen idgen-my --mysql "$DSN" --max-step 100
  biz idgen-my small unordered 100
  biz idgen-my huge unordered 100000000
  biz idgen-my bench-ord ordered 1000
  WITH_MYSQL=1
else
  log "no MariaDB (IDGEN_TEST_MYSQL unset or unreachable): skipping the MySQL scenarios"
fi

# ORDERED shard owners (issue 20): clusters on ZooKeeper + MariaDB. own1 is
# a one-node cluster (it owns all 64 shards); own2a + own2b a two-node
# cluster whose callers are split over both nodes, so the half sent to the
# node that does not own the hot key's shard is forwarded (one hop).
WITH_OWNERS=0
if [ "$WITH_MYSQL" = 1 ] && [ -n "${IDGEN_TEST_ZK:-}" ]; then
  for c in own1 own2; do
    "$IDCTL" cluster init --zk "$IDGEN_TEST_ZK" --cluster "bench-$c-$$" >/dev/null 2>&1
  done
  # A database per cluster: two clusters on one database would take each
  # other's shards (their epochs come from different ZooKeeper subtrees);
  # a node of a second cluster is refused at start.
  MYSQL_DB1=${MYSQL_DB}_own1
  mariadb -h127.0.0.1 -P"$IDGEN_TEST_MYSQL_PORT" -uroot -e "CREATE DATABASE \`$MYSQL_DB1\`"
  DSN1="${IDGEN_TEST_MYSQL%/}/$MYSQL_DB1"
  "$IDCTL" db migrate --mysql "$DSN1" >/dev/null
  start_idgen own1 --zk "$IDGEN_TEST_ZK" --cluster "bench-own1-$$" --mysql "$DSN1" --advertise-host 127.0.0.1 --properties-dir "$WORK/own1"
  MYSQL_DB2=${MYSQL_DB}_own2
  mariadb -h127.0.0.1 -P"$IDGEN_TEST_MYSQL_PORT" -uroot -e "CREATE DATABASE \`$MYSQL_DB2\`"
  DSN2="${IDGEN_TEST_MYSQL%/}/$MYSQL_DB2"
  "$IDCTL" db migrate --mysql "$DSN2" >/dev/null
  start_idgen own2a --zk "$IDGEN_TEST_ZK" --cluster "bench-own2-$$" --mysql "$DSN2" --advertise-host 127.0.0.1 --properties-dir "$WORK/own2a"
  start_idgen own2b --zk "$IDGEN_TEST_ZK" --cluster "bench-own2-$$" --mysql "$DSN2" --advertise-host 127.0.0.1 --properties-dir "$WORK/own2b"
  ordbiz own1 own-cached cached
  ordbiz own1 own-gapless gapless
  if [ -n "${BASE_IDGEN:-}" ]; then
    [ -x "$BASE_IDGEN" ] || die "BASE_IDGEN=$BASE_IDGEN: not an executable"
    "$IDCTL" cluster init --zk "$IDGEN_TEST_ZK" --cluster "bench-own1base-$$" >/dev/null 2>&1
    MYSQL_DBB=${MYSQL_DB}_own1base
    mariadb -h127.0.0.1 -P"$IDGEN_TEST_MYSQL_PORT" -uroot -e "CREATE DATABASE \`$MYSQL_DBB\`"
    DSNB="${IDGEN_TEST_MYSQL%/}/$MYSQL_DBB"
    "$IDCTL" db migrate --mysql "$DSNB" >/dev/null
    start_idgen own1base --zk "$IDGEN_TEST_ZK" --cluster "bench-own1base-$$" --mysql "$DSNB" --advertise-host 127.0.0.1 --properties-dir "$WORK/own1base"
    ordbiz own1base own-cached cached
    ordbiz own1base own-gapless gapless
  fi
  ordbiz own2a own2-cached cached
  ordbiz own2a own2-gapless gapless
  sleep 4 # the two-node cluster settles: shards handed to own2b by rendezvous
  WITH_OWNERS=1
else
  log "no ZooKeeper or MariaDB test server: skipping the ORDERED shard-owner scenarios"
fi

# perf_start NAME REP / perf_stop: the PERF_DIR profile of one load run.
PERF_PID=
perf_start() {
  [ -n "${PERF_DIR:-}" ] || return 0
  mkdir -p "$PERF_DIR"
  perf record -a -g -F 499 -o "$PERF_DIR/$1-r$2.data" >/dev/null 2>&1 &
  PERF_PID=$!
}
perf_stop() {
  [ -n "$PERF_PID" ] || return 0
  kill -INT "$PERF_PID" 2>/dev/null || true
  wait "$PERF_PID" 2>/dev/null || true
  PERF_PID=
}

# --- clusters driven by the discovering client (issue 31, item 2) ---------
# own3a+own3b+own3c: a three-node cluster on its own database. Scenarios whose
# SERVER is @zk:CLUSTER run `idctl bench --zk` (the client discovers the
# members in ZooKeeper), @list:CLUSTER `idctl bench --addr a,b,c` (every
# node), @zk:CLUSTER*2 two such processes at once with the callers split.
# Each records the nodes' forwarded ORDERED calls during the run
# ("forwarded", from idgen_ordered_forwarded_total), the client's routing
# counts (result.routing) and the largest node RSS.
declare -A CLUSTER_NODES=([own1]="own1" [own2]="own2a own2b" [own3]="own3a own3b own3c")
# node_metric NODE NAME: an unlabelled metric of the node's /metrics (0 if absent)
node_metric() {
  curl -s -m 2 -H "Authorization: Bearer $(cat "$WORK/$1/data/admin.token" 2>/dev/null)" "http://${ADMIN[$1]}/metrics" 2>/dev/null \
    | awk -v m="$2" '$1 == m {print $2; found=1} END {if (!found) print 0}'
}
# cluster_metric CLUSTER NAME: the metric summed over the cluster's nodes
cluster_metric() {
  local n sum=0 v
  for n in ${CLUSTER_NODES[$1]}; do
    v=$(node_metric "$n" "$2")
    sum=$(awk -v a="$sum" -v b="$v" 'BEGIN {printf "%.0f", a + b}')
  done
  echo "$sum"
}
# wait_settled CLUSTER: every node owns shards and the cluster owns all 64
# (the hand-offs to the later nodes by rendezvous are done).
wait_settled() {
  local i n ok
  for ((i = 0; i < 300; i++)); do
    ok=1
    for n in ${CLUSTER_NODES[$1]}; do
      [ "$(node_metric "$n" idgen_ordered_shards_owned)" != 0 ] || ok=0
    done
    [ "$ok" = 1 ] && [ "$(cluster_metric "$1" idgen_ordered_shards_owned)" = 64 ] && return 0
    sleep 0.1
  done
  log "cluster $1 did not settle: shards owned $(cluster_metric "$1" idgen_ordered_shards_owned) of 64"
}
WITH_CLUSTERS=0
if [ "$WITH_OWNERS" = 1 ]; then
  "$IDCTL" cluster init --zk "$IDGEN_TEST_ZK" --cluster "bench-own3-$$" >/dev/null 2>&1
  MYSQL_DB3=${MYSQL_DB}_own3
  mariadb -h127.0.0.1 -P"$IDGEN_TEST_MYSQL_PORT" -uroot -e "CREATE DATABASE \`$MYSQL_DB3\`"
  DSN3="${IDGEN_TEST_MYSQL%/}/$MYSQL_DB3"
  "$IDCTL" db migrate --mysql "$DSN3" >/dev/null
  for n in own3a own3b own3c; do
    start_idgen "$n" --zk "$IDGEN_TEST_ZK" --cluster "bench-own3-$$" --mysql "$DSN3" --advertise-host 127.0.0.1 --properties-dir "$WORK/$n"
  done
  ordbiz own3a own3-cached cached
  # With BASE_IDGEN: own2base (own2basea+b) and own3base (own3basea+b+c),
  # the same clusters of the other build, so every own2-/own3- cluster
  # scenario also runs on them as NAME-base, right after this build's
  # (driven by BASE_IDCTL when given: the other build's client too).
  BASE_CLUSTERS=()
  if [ -n "${BASE_IDGEN:-}" ]; then
    CLUSTER_NODES[own2base]="own2basea own2baseb"
    CLUSTER_NODES[own3base]="own3basea own3baseb own3basec"
    for c in own2base own3base; do
      "$IDCTL" cluster init --zk "$IDGEN_TEST_ZK" --cluster "bench-$c-$$" >/dev/null 2>&1
      mariadb -h127.0.0.1 -P"$IDGEN_TEST_MYSQL_PORT" -uroot -e "CREATE DATABASE \`${MYSQL_DB}_$c\`"
      "$IDCTL" db migrate --mysql "${IDGEN_TEST_MYSQL%/}/${MYSQL_DB}_$c" >/dev/null
      for n in ${CLUSTER_NODES[$c]}; do
        start_idgen "$n" --zk "$IDGEN_TEST_ZK" --cluster "bench-$c-$$" --mysql "${IDGEN_TEST_MYSQL%/}/${MYSQL_DB}_$c" --advertise-host 127.0.0.1 --properties-dir "$WORK/$n"
      done
      BASE_CLUSTERS+=("$c")
    done
    ordbiz own2basea own2-cached cached
    ordbiz own3basea own3-cached cached
  fi
  for c in own1 own2 own3 "${BASE_CLUSTERS[@]}"; do wait_settled "$c"; done
  # noop2a+b, noop3a+b+c: the RPC floor of a two- and a three-process
  # "cluster" on this machine, driven as own2 and own3 are (one client that
  # knows every node: --addr with the list), so each cluster scenario has a
  # floor with the same number of server processes sharing the cores as
  # well as the one-process floor (noop-c16).
  for n in noop2a noop2b noop3a noop3b noop3c; do
    port=$(free_port)
    "$WORK/bin/noop" --addr "127.0.0.1:$port" >"$WORK/$n.log" 2>&1 &
    PID[$n]=$!; PIDS+=($!); ADDR[$n]=127.0.0.1:$port
    wait_port "$port" 30 || { cat "$WORK/$n.log" >&2; die "$n did not start"; }
  done
  CLUSTER_NODES[noop2]="noop2a noop2b"
  CLUSTER_NODES[noop3]="noop3a noop3b noop3c"
  WITH_CLUSTERS=1
fi
# cluster_target SPEC: the idctl bench flags that reach the cluster
cluster_target() {
  local c=${1#@*:}; c=${c%\*2}
  case $1 in
  @zk:*) echo --zk "$IDGEN_TEST_ZK" --cluster "bench-$c-$$" ;;
  @list:*)
    local n list=()
    for n in ${CLUSTER_NODES[$c]}; do list+=("${ADDR[$n]}"); done
    echo --addr "$(IFS=,; echo "${list[*]}")" ;;
  esac
}
# run_cluster_scenario NAME SPEC REP IDCTL-ARGS...: runs and records one
# scenario on a cluster (see above).
run_cluster_scenario() {
  local name=$1 spec=$2 rep=$3; shift 3
  local c=${spec#@*:} procs=1 n rc p1 rc2 fwd0 fwd1 out
  if [[ $c == *\*2 ]]; then procs=2; c=${c%\*2}; fi
  local target; read -r -a target <<<"$(cluster_target "$spec")"
  local IDCTL=$IDCTL # the other build's client for its own clusters
  if [[ $c == *base ]] && [ -n "${BASE_IDCTL:-}" ]; then IDCTL=$BASE_IDCTL; fi
  log "rep $rep/$RUNS: $name ($*, ${target[*]}, $procs process(es))"
  echo 0 >"$WORK/rss-cluster"
  (
    best=0
    while :; do
      for n in ${CLUSTER_NODES[$c]}; do
        v=$(rss_kib "${PID[$n]}" VmRSS); v=${v:-0}
        # rename, never truncate (as the one-server sampler): killed
        # mid-write, it left an empty file, and RESULTS an invalid line
        if [ "$v" -gt "$best" ]; then best=$v; echo "$best" >"$WORK/rss-cluster.tmp" && mv -f "$WORK/rss-cluster.tmp" "$WORK/rss-cluster"; fi
      done
      sleep 0.2
    done
  ) &
  local sampler=$!
  fwd0=$(cluster_metric "$c" idgen_ordered_forwarded_total)
  local busy0 total0 busy1 total1 srv0=0 srv1=0 t0
  read -r busy0 total0 < <(machine_ticks)
  for n in ${CLUSTER_NODES[$c]}; do srv0=$((srv0 + $(proc_ticks "${PID[$n]}"))); done
  t0=$(date +%s.%N)
  perf_start "$name" "$rep"
  set +e
  if [ "$procs" = 2 ]; then
    "$IDCTL" bench "${target[@]}" --duration "$DURATION" --warmup "$WARMUP" --json --quiet "$@" >"$WORK/split1" 2>"$WORK/bench.err" &
    p1=$!
    "$IDCTL" bench "${target[@]}" --duration "$DURATION" --warmup "$WARMUP" --json --quiet "$@" >"$WORK/split2" 2>>"$WORK/bench.err"
    rc2=$?
    wait "$p1"
    rc=$(($? | rc2))
  else
    "$IDCTL" bench "${target[@]}" --duration "$DURATION" --warmup "$WARMUP" --json --quiet "$@" >"$WORK/split1" 2>"$WORK/bench.err"
    rc=$?
    : >"$WORK/split2"
  fi
  set -e
  perf_stop
  read -r busy1 total1 < <(machine_ticks)
  for n in ${CLUSTER_NODES[$c]}; do srv1=$((srv1 + $(proc_ticks "${PID[$n]}"))); done
  # As for one server: the machine's busy fraction and the CPU seconds of
  # all the cluster's server processes together (warmup included).
  local cpu
  cpu=$(awk -v b="$((busy1 - busy0))" -v t="$((total1 - total0))" -v s="$((srv1 - srv0))" \
    -v hz="$(getconf CLK_TCK)" -v w0="$t0" -v w1="$(date +%s.%N)" \
    'BEGIN {printf "{\"machine_busy\":%.3f,\"server_s\":%.2f,\"mysqld_s\":0,\"wall_s\":%.2f}", (t > 0 ? b / t : 0), s / hz, w1 - w0}')
  fwd1=$(cluster_metric "$c" idgen_ordered_forwarded_total)
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  [ -s "$WORK/split1" ] || { cat "$WORK/bench.err" >&2; die "idctl bench gave no result for $name"; }
  # Two processes: requests/s summed, latencies the worse of the two.
  out=$(python3 - "$WORK/split1" "$WORK/split2" <<'PY'
import json, sys
rs = [json.loads(open(f).read()) for f in sys.argv[1:3] if open(f).read().strip()]
out = dict(rs[0])
for b in rs[1:]:
    for k in ("ok", "failed", "ids", "requests_per_s", "ids_per_s", "concurrency"):
        out[k] += b[k]
    out["latency_us"] = {k: max(v, b["latency_us"][k]) for k, v in out["latency_us"].items()}
    for k, v in (b.get("errors") or {}).items():
        out["errors"][k] = out["errors"].get(k, 0) + v
    if "routing" in b:
        out["routing"] = {k: v + b["routing"][k] for k, v in out.get("routing", {}).items()}
print(json.dumps(out))
PY
)
  [ "$rc" = 0 ] || { log "idctl bench exited $rc for $name: $(cat "$WORK/bench.err")"; FAILED=1; }
  printf '{"scenario":"%s","server":"%s","rep":%d,"exit":%d,"rss_max_kib":%s,"hwm_kib":0,"forwarded":%s,"cpu":%s,"result":%s}\n' \
    "$name" "$spec" "$rep" "$rc" "$(cat "$WORK/rss-cluster")" "$((fwd1 - fwd0))" "$cpu" "$out" >>"$RESULTS"
  log "  $(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); c=json.loads(sys.argv[2]); print("%.0f req/s, p50 %.0f us, p99 %.0f us, routing %s, machine busy %.2f, servers %.1f us CPU/req" % (r["requests_per_s"], r["latency_us"]["p50"], r["latency_us"]["p99"], r.get("routing"), c["machine_busy"], c["server_s"] / max(r["requests_per_s"] * c["wall_s"], 1) * 1e6))' "$out" "$cpu"), forwarded by the nodes $((fwd1 - fwd0))"
}
# --- end of the discovering-client cluster block ---------------------------

# scenario NAME SERVER IDCTL-ARGS...
SCENARIOS=()
scenario() { SCENARIOS+=("$*"); }
scenario noop-c16 noop --biz bench-sf --channel snowflake --concurrency 16
scenario idgen-c16 idgen --biz bench-sf --channel snowflake --concurrency 16 --check
scenario noop-c64 noop --biz bench-sf --channel snowflake --concurrency 64
scenario idgen-c64 idgen --biz bench-sf --channel snowflake --concurrency 64 --check
scenario unordered-c16 idgen --biz bench-un --channel unordered --concurrency 16 --check
scenario ordered-c16 idgen --biz bench-ord --channel ordered --keys 1000 --concurrency 16 --check
scenario refill-step1-c16 idgen-s1 --biz tiny --channel unordered --concurrency 16 --check
scenario refill-step100-c16 idgen-s100 --biz small --channel unordered --concurrency 16 --check
scenario refill-huge-c16 idgen-s1 --biz huge --channel unordered --concurrency 16 --check
scenario unordered-batch1000-c64 idgen --biz bench-batch --channel unordered --count 1000 --concurrency 64 --check
if [ "$WITH_MYSQL" = 1 ]; then
  scenario mysql-refill-step100-c16 idgen-my --biz small --channel unordered --concurrency 16 --check
  scenario mysql-refill-huge-c16 idgen-my --biz huge --channel unordered --concurrency 16 --check
  scenario mysql-ordered-c16 idgen-my --biz bench-ord --channel ordered --keys 1000 --concurrency 16 --check
fi

if [ "$WITH_OWNERS" = 1 ]; then
  # own_scenario NAME ARGS...: NAME on own1 and, with BASE_IDGEN, NAME-base
  # on own1base right after it (same-run before/after, RSS of each build).
  own_scenario() {
    local name=$1; shift
    scenario "$name" own1 "$@"
    if [ -n "${BASE_IDGEN:-}" ]; then scenario "$name-base" own1base "$@"; fi
  }
  own_scenario own-cached-hot-c16 --biz own-cached --channel ordered --sub-key hot --concurrency 16 --check
  own_scenario own-cached-64-c16 --biz own-cached --channel ordered --keys 64 --concurrency 16 --check
  own_scenario own-gapless-hot-c16 --biz own-gapless --channel ordered --sub-key hot --concurrency 16 --check
  own_scenario own-gapless-64-c16 --biz own-gapless --channel ordered --keys 64 --concurrency 16 --check
  own_scenario own-gapless-hot-c64 --biz own-gapless --channel ordered --sub-key hot --concurrency 64 --check
  own_scenario own-gapless-64-c64 --biz own-gapless --channel ordered --keys 64 --concurrency 64 --check
  own_scenario own-cached-hot-c64 --biz own-cached --channel ordered --sub-key hot --concurrency 64 --check
  own_scenario own-cached-64-c64 --biz own-cached --channel ordered --keys 64 --concurrency 64 --check
  # SERVER a+b: two idctl bench processes at once, half the callers each.
  scenario own-cached-hot-split-c16 own2a+own2b --biz own2-cached --channel ordered --sub-key hot --concurrency 8 --check
  scenario own-gapless-hot-split-c16 own2a+own2b --biz own2-gapless --channel ordered --sub-key hot --concurrency 8 --check
fi

# --- discovering-client cluster scenarios (issue 31, item 2) ---
if [ "$WITH_CLUSTERS" = 1 ]; then
  # The same-topology floors: what noop-c16 runs, spread over 2 and 3 no-op
  # processes by one client (and, for the split, by two clients of 8).
  scenario noop2-list-c16 @list:noop2 --biz bench-sf --channel snowflake --concurrency 16
  scenario noop3-list-c16 @list:noop3 --biz bench-sf --channel snowflake --concurrency 16
  scenario noop2-list-split-c16 '@list:noop2*2' --biz bench-sf --channel snowflake --concurrency 8
  scenario own1-zk-cached-64-c16 @zk:own1 --biz own-cached --channel ordered --keys 64 --concurrency 16 --check
  # cluster_scenario NAME SPEC ARGS...: NAME and, with BASE_IDGEN, NAME-base
  # on the other build's cluster of the same size right after it.
  cluster_scenario() {
    local name=$1 spec=$2; shift 2
    scenario "$name" "$spec" "$@"
    if [ -n "${BASE_IDGEN:-}" ]; then
      case $spec in
      *own2* | *own3*) scenario "$name-base" "$(sed -E 's/own([23])/own\1base/' <<<"$spec")" "$@" ;;
      esac
    fi
  }
  cluster_scenario own2-zk-cached-64-c16 @zk:own2 --biz own2-cached --channel ordered --keys 64 --concurrency 16 --check
  cluster_scenario own3-zk-cached-64-c16 @zk:own3 --biz own3-cached --channel ordered --keys 64 --concurrency 16 --check
  cluster_scenario own3-list-cached-64-c16 @list:own3 --biz own3-cached --channel ordered --keys 64 --concurrency 16 --check
  # two applications (idctl processes) of 8 callers each on one hot key
  cluster_scenario own2-zk-cached-hot-split-c16 '@zk:own2*2' --biz own2-cached --channel ordered --sub-key hot --concurrency 8 --check
fi
# --- end of the discovering-client cluster scenarios ---

if [ -n "${ONLY:-}" ]; then
  kept=()
  for sc in "${SCENARIOS[@]}"; do
    if [[ ${sc%% *} =~ $ONLY ]]; then kept+=("$sc"); fi
  done
  [ ${#kept[@]} -gt 0 ] || die "ONLY=$ONLY matches no scenario"
  SCENARIOS=("${kept[@]}")
  # Stop the servers no kept scenario drives. An idle cluster node costs
  # 21-28 ms of CPU a second on a 2-core VM (its ZooKeeper session, the
  # ORDERED coordinator's rounds, lease renewals, the runtime's wake-ups),
  # and a full setup keeps 6 of them (12 with BASE_IDGEN) besides 4
  # standalone nodes: up to a seventh of the machine taken from every
  # scenario, the floors included (issue 31, the cluster floor's profile).
  declare -A USED=()
  for sc in "${SCENARIOS[@]}"; do
    read -r -a a <<<"$sc"
    case ${a[1]} in
    @*) c=${a[1]#@*:}; c=${c%\*2}; for n in ${CLUSTER_NODES[$c]}; do USED[$n]=1; done ;;
    *+*) USED[${a[1]%%+*}]=1; USED[${a[1]##*+}]=1 ;;
    *) USED[${a[1]}]=1 ;;
    esac
  done
  # a cluster is kept whole: a stopped peer's shards would move under load
  for c in "${!CLUSTER_NODES[@]}"; do
    for n in ${CLUSTER_NODES[$c]}; do
      if [ -n "${USED[$n]:-}" ]; then
        for m in ${CLUSTER_NODES[$c]}; do USED[$m]=1; done
        break
      fi
    done
  done
  for n in "${!PID[@]}"; do
    [ -z "${USED[$n]:-}" ] || continue
    kill "${PID[$n]}" 2>/dev/null || true
    wait "${PID[$n]}" 2>/dev/null || true
    log "$n stopped: no scenario of ONLY uses it"
  done
fi

rss_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# CPU accounting, to tell a run bound by round trips from one bound by the
# machine (idctl bench, idgen and MariaDB share its cores): proc_ticks is a
# process's user+system clock ticks, machine_ticks the busy and total
# ticks of every core (/proc/stat's first line; idle and iowait are idle).
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
machine_ticks() { awk '$1 == "cpu" {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit}' /proc/stat; }
MYSQLD_PID=
if [ -n "${IDGEN_TEST_DIR:-}" ] && [ -f "$IDGEN_TEST_DIR/mysql/pid" ]; then
  MYSQLD_PID=$(cat "$IDGEN_TEST_DIR/mysql/pid")
fi

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=$OUT_DIR/$STAMP.jsonl
{
  printf '# machine: %s cores, %s, %s MiB RAM; %s; %s\n' "$(nproc)" \
    "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)" \
    "$(awk '/^MemTotal/ {printf "%d", $2/1024}' /proc/meminfo)" "$(go version)" "$(date -u +%FT%TZ)"
  printf '# duration %s, warmup %s, runs %s\n' "$DURATION" "$WARMUP" "$RUNS"
} >"$RESULTS"

# commit_ms prints the mean time of one durable commit on the owners'
# MariaDB, in ms: 200 autocommit single-row UPDATEs in a row on one
# connection, timed by the server between the first and the last (so the
# client's start is not counted, its round trips are).
commit_ms() {
  local db=${MYSQL_DB}_own1
  {
    echo "CREATE TABLE IF NOT EXISTS bench_commit (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB;"
    echo "INSERT IGNORE INTO bench_commit VALUES (1, 0);"
    echo "SET @t0 = SYSDATE(6);"
    for ((i = 0; i < 200; i++)); do echo "UPDATE bench_commit SET n = n + 1 WHERE id = 1;"; done
    echo "SELECT TIMESTAMPDIFF(MICROSECOND, @t0, SYSDATE(6)) / 200 / 1000;"
  } | mariadb -h127.0.0.1 -P"$IDGEN_TEST_MYSQL_PORT" -uroot -N -B "$db"
}

FAILED=0
for ((rep = 1; rep <= RUNS; rep++)); do
  if [ "$WITH_OWNERS" = 1 ]; then
    tc=$(commit_ms)
    log "rep $rep/$RUNS: single durable commit on MariaDB: $tc ms"
    printf '# t_commit_ms rep=%d %s\n' "$rep" "$tc" >>"$RESULTS"
  fi
  for sc in "${SCENARIOS[@]}"; do
    read -r -a a <<<"$sc"
    name=${a[0]} server=${a[1]} args=("${a[@]:2}")
    if [[ $server == @* ]]; then run_cluster_scenario "$name" "$server" "$rep" "${args[@]}"; continue; fi # cluster block
    if [[ $server == *+* ]]; then
      # Split: both nodes driven at once; requests/s summed, latencies the
      # worse of the two (percentiles cannot be merged exactly).
      log "rep $rep/$RUNS: $name (${args[*]}, on ${server/+/ and })"
      set +e
      "$IDCTL" bench --addr "${ADDR[${server%%+*}]}" --duration "$DURATION" --warmup "$WARMUP" --json --quiet "${args[@]}" >"$WORK/split1" 2>"$WORK/bench.err" &
      p1=$!
      "$IDCTL" bench --addr "${ADDR[${server##*+}]}" --duration "$DURATION" --warmup "$WARMUP" --json --quiet "${args[@]}" >"$WORK/split2" 2>>"$WORK/bench.err"
      rc2=$?
      wait "$p1"
      rc=$(( $? | rc2 ))
      set -e
      out=$(python3 - "$WORK/split1" "$WORK/split2" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
out = dict(a)
for k in ("ok", "failed", "ids", "requests_per_s", "ids_per_s", "concurrency"):
    out[k] = a[k] + b[k]
out["latency_us"] = {k: max(a["latency_us"][k], b["latency_us"][k]) for k in a["latency_us"]}
out["addr"] = a["addr"] + "+" + b["addr"]
errs = dict(a.get("errors") or {})
for k, v in (b.get("errors") or {}).items():
    errs[k] = errs.get(k, 0) + v
out["errors"] = errs
print(json.dumps(out))
PY
)
      [ "$rc" = 0 ] || { log "idctl bench exited $rc for $name: $(cat "$WORK/bench.err")"; FAILED=1; }
      printf '{"scenario":"%s","server":"%s","rep":%d,"exit":%d,"rss_max_kib":0,"hwm_kib":0,"result":%s}\n' \
        "$name" "$server" "$rep" "$rc" "$out" >>"$RESULTS"
      continue
    fi
    pid=${PID[$server]}
    log "rep $rep/$RUNS: $name (${args[*]})"
    # sample the server's RSS during the run
    echo 0 >"$WORK/rss"
    (
      best=0
      while kill -0 "$pid" 2>/dev/null; do
        v=$(rss_kib "$pid" VmRSS); v=${v:-0}
        # rename, never truncate: the sampler is killed at any point, and a
        # half-written file read as an empty figure (invalid JSON in RESULTS)
        if [ "$v" -gt "$best" ]; then best=$v; echo "$best" >"$WORK/rss.tmp" && mv -f "$WORK/rss.tmp" "$WORK/rss"; fi
        sleep 0.2
      done
    ) &
    sampler=$!
    read -r busy0 total0 < <(machine_ticks)
    srv0=$(proc_ticks "$pid") db0=0
    [ -z "$MYSQLD_PID" ] || db0=$(proc_ticks "$MYSQLD_PID")
    t0=$(date +%s.%N)
    perf_start "$name" "$rep"
    set +e
    out=$("$IDCTL" bench --addr "${ADDR[$server]}" --duration "$DURATION" --warmup "$WARMUP" --json --quiet "${args[@]}" 2>"$WORK/bench.err")
    rc=$?
    set -e
    perf_stop
    read -r busy1 total1 < <(machine_ticks)
    srv1=$(proc_ticks "$pid") db1=0
    [ -z "$MYSQLD_PID" ] || db1=$(proc_ticks "$MYSQLD_PID")
    # Over the whole call (warmup included): the machine's busy fraction of
    # all cores, and the server's and MariaDB's CPU seconds.
    cpu=$(awk -v b="$((busy1 - busy0))" -v t="$((total1 - total0))" -v s="$((srv1 - srv0))" -v d="$((db1 - db0))" \
      -v hz="$(getconf CLK_TCK)" -v w0="$t0" -v w1="$(date +%s.%N)" \
      'BEGIN {printf "{\"machine_busy\":%.3f,\"server_s\":%.2f,\"mysqld_s\":%.2f,\"wall_s\":%.2f}", (t > 0 ? b / t : 0), s / hz, d / hz, w1 - w0}')
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    if [ -z "$out" ]; then
      cat "$WORK/bench.err" >&2
      die "idctl bench gave no result for $name"
    fi
    if [ "$rc" != 0 ]; then
      log "idctl bench exited $rc for $name: $(cat "$WORK/bench.err")"
      FAILED=1
    fi
    printf '{"scenario":"%s","server":"%s","rep":%d,"exit":%d,"rss_max_kib":%s,"hwm_kib":%s,"cpu":%s,"result":%s}\n' \
      "$name" "$server" "$rep" "$rc" "$(cat "$WORK/rss")" "$(rss_kib "$pid" VmHWM)" "$cpu" "$out" >>"$RESULTS"
  done
done
[ -n "${ONLY:-}" ] || cp "$RESULTS" "$OUT_DIR/latest.jsonl"

GORESULTS=$OUT_DIR/$STAMP-go.txt
if [ "$GOBENCH" = 1 ]; then
  log "Go benchmarks in bench/ (-count $GOCOUNT -benchtime $BENCHTIME)"
  (cd bench && go test -run '^$' -bench . -count "$GOCOUNT" -benchtime "$BENCHTIME" .) | tee "$GORESULTS" >&2
  if [ "$WITH_MYSQL" = 1 ] && grep -qs 'func BenchmarkOrdered' segment/mysqlstore/*_test.go; then
    log "BenchmarkOrdered* in segment/mysqlstore (MariaDB)"
    go test -run '^$' -bench '^BenchmarkOrdered' -benchtime "${ORDERED_BENCHTIME:-3000x}" -count "$GOCOUNT" \
      ./segment/mysqlstore | tee -a "$GORESULTS" >&2
  fi
  [ -n "${ONLY:-}" ] || cp "$GORESULTS" "$OUT_DIR/latest-go.txt"
fi

RATIOS=(
  -ratio "idgen/noop c16=idgen-c16/noop-c16:rps"
  -ratio "idgen/noop c64=idgen-c64/noop-c64:rps"
  -ratio "refill step 1/huge=refill-step1-c16/refill-huge-c16:p999"
  -ratio "refill step 100/huge=refill-step100-c16/refill-huge-c16:p999"
)
if [ "$WITH_MYSQL" = 1 ]; then
  RATIOS+=(-ratio "MariaDB refill step 100/huge=mysql-refill-step100-c16/mysql-refill-huge-c16:p999")
fi
if [ "$WITH_OWNERS" = 1 ]; then
  RATIOS+=(
    -ratio "cached hot/noop=own-cached-hot-c16/noop-c16:rps"
    -ratio "cached 64 keys/noop=own-cached-64-c16/noop-c16:rps"
    -ratio "gapless hot/noop=own-gapless-hot-c16/noop-c16:rps"
    -ratio "gapless 64 keys/noop=own-gapless-64-c16/noop-c16:rps"
    -ratio "cached hot split/one node=own-cached-hot-split-c16/own-cached-hot-c16:rps"
    -ratio "gapless hot split/one node=own-gapless-hot-split-c16/own-gapless-hot-c16:rps"
    -ratio "per-request MySQL ORDERED/noop=mysql-ordered-c16/noop-c16:rps"
  )
fi
if [ "$WITH_CLUSTERS" = 1 ]; then # discovering-client cluster block
  RATIOS+=(
    -ratio "cached 64 keys, 1 node, --zk/noop=own1-zk-cached-64-c16/noop-c16:rps"
    -ratio "cached 64 keys, 2 nodes, --zk/noop=own2-zk-cached-64-c16/noop-c16:rps"
    -ratio "cached 64 keys, 3 nodes, --zk/noop=own3-zk-cached-64-c16/noop-c16:rps"
    -ratio "cached 64 keys, 3 nodes, --addr list/noop=own3-list-cached-64-c16/noop-c16:rps"
    -ratio "cached 64 keys, 1 node, --zk/1-process noop floor=own1-zk-cached-64-c16/noop-c16:rps"
    -ratio "cached 64 keys, 2 nodes, --zk/2-process noop floor=own2-zk-cached-64-c16/noop2-list-c16:rps"
    -ratio "cached 64 keys, 3 nodes, --zk/3-process noop floor=own3-zk-cached-64-c16/noop3-list-c16:rps"
    -ratio "cached 64 keys, 3 nodes, --addr list/3-process noop floor=own3-list-cached-64-c16/noop3-list-c16:rps"
    -ratio "noop 2 processes/noop 1 process=noop2-list-c16/noop-c16:rps"
    -ratio "noop 3 processes/noop 1 process=noop3-list-c16/noop-c16:rps"
    -ratio "cached hot split, --zk/one node=own2-zk-cached-hot-split-c16/own-cached-hot-c16:rps"
    -ratio "cached hot split, --zk/2-process split noop floor=own2-zk-cached-hot-split-c16/noop2-list-split-c16:rps"
    -ratio "noop 2 processes split/noop 1 process=noop2-list-split-c16/noop-c16:rps"
  )
  if [ -n "${BASE_IDGEN:-}" ]; then
    for sc in own2-zk-cached-64-c16 own3-zk-cached-64-c16 own3-list-cached-64-c16 own2-zk-cached-hot-split-c16; do
      RATIOS+=(-ratio "$sc, this build/base=$sc/$sc-base:rps")
    done
  fi
fi
echo
echo "## Load runs ($RESULTS)"
echo
go run ./scripts/chart table -in "$RESULTS" "${RATIOS[@]}"
if [ "$WITH_OWNERS" = 1 ]; then
  echo
  echo "## Gapless against its bound (floor x t_rpc / (t_rpc + t_commit), t_rpc = callers / floor)"
  echo
  python3 - "$RESULTS" <<'PY'
import json, re, statistics, sys
runs, tcommit = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"# t_commit_ms rep=(\d+) ([0-9.]+)", line)
    if m:
        tcommit[int(m.group(1))] = float(m.group(2)) / 1000
        continue
    if line.startswith("#") or not line.strip():
        continue
    r = json.loads(line)
    runs.setdefault(r["scenario"], {})[r["rep"]] = dict(r["result"], cpu=r.get("cpu") or {})
# machine busy: the fraction of every core busy during the run (idctl
# bench, idgen and MariaDB share them); idgen and MariaDB CPU: their CPU
# time per request (warmup included in both the time and the requests).
print("| scenario | req/s | p50 | p99 | x floor | x bound | bound req/s | t_commit | machine busy | idgen CPU/req | MariaDB CPU/req |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name in sorted(runs):
    m = re.match(r"own-gapless-(hot|64)-c(\d+)(-base)?$", name)
    if not m:
        continue
    c = int(m.group(2))
    floor = runs.get("noop-c%d" % c, {})
    xf, xb, bounds, rps, p50, p99, tcs, busy, srv, db = [], [], [], [], [], [], [], [], [], []
    for rep, res in runs[name].items():
        if rep not in floor or rep not in tcommit:
            continue
        fl = floor[rep]["requests_per_s"]
        if fl <= 0:
            continue
        t_rpc = c / fl
        bound = fl * t_rpc / (t_rpc + tcommit[rep])
        rps.append(res["requests_per_s"]); p50.append(res["latency_us"]["p50"]); p99.append(res["latency_us"]["p99"])
        xf.append(res["requests_per_s"] / fl); xb.append(res["requests_per_s"] / bound); bounds.append(bound); tcs.append(tcommit[rep])
        cpu = res["cpu"]
        # A rep with no request (a stalled database) has no CPU per request.
        if cpu.get("wall_s") and res["requests_per_s"] > 0:
            reqs = res["requests_per_s"] * cpu["wall_s"]
            busy.append(cpu["machine_busy"]); srv.append(cpu["server_s"] / reqs * 1e6); db.append(cpu["mysqld_s"] / reqs * 1e6)
    if not rps:
        continue
    med = statistics.median
    cpus = "| %.2f | %.0f us | %.0f us |" % (med(busy), med(srv), med(db)) if busy else "| | | |"
    print("| %s | %.0f | %.0f us | %.0f us | %.2f | %.2f | %.0f | %.3f ms %s" % (
        name, med(rps), med(p50), med(p99), med(xf), med(xb), med(bounds), med(tcs) * 1000, cpus))
PY
fi
if [ "$WITH_CLUSTERS" = 1 ]; then # discovering-client cluster block
  echo
  echo "## Clusters against the one-process floor and their own topology's floor"
  echo
  python3 - "$RESULTS" <<'PY'
import json, re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    r = json.loads(line)
    runs.setdefault(r["scenario"], {})[r["rep"]] = r
# The floor of the same topology: as many no-op processes, driven the same
# way (one client knowing every node; two clients for a split).
def topo(name):
    if name.startswith("noop"):
        return None  # a floor itself
    if name.startswith("own1-"):
        return "noop-c16"
    if "-split-" in name:
        return "noop2-list-split-c16"
    m = re.match(r"own([23])-", name)
    return m and "noop%s-list-c16" % m.group(1)
def cpu_per_req(r):
    c, res = r.get("cpu") or {}, r["result"]
    reqs = res["requests_per_s"] * c.get("wall_s", 0)
    return c["server_s"] / reqs * 1e6 if reqs else None
med = statistics.median
print("| scenario | req/s | p50 | p99 | x floor (1 process) | x floor (same topology) | floor of the topology | servers CPU/req | its floor's CPU/req | machine busy | forwarded | routing to owner / elsewhere |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for name in sorted(runs):
    if not re.match(r"(own[123]-(zk|list)-|noop[23]-list)", name):
        continue
    tf = topo(name)
    xf, xt, rps, p50, p99, cpr, fcpr, busy, fwd, to, el = ([] for _ in range(11))
    for rep, r in runs[name].items():
        res = r["result"]
        rps.append(res["requests_per_s"]); p50.append(res["latency_us"]["p50"]); p99.append(res["latency_us"]["p99"])
        if rep in runs.get("noop-c16", {}):
            xf.append(res["requests_per_s"] / runs["noop-c16"][rep]["result"]["requests_per_s"])
        if tf and rep in runs.get(tf, {}):
            xt.append(res["requests_per_s"] / runs[tf][rep]["result"]["requests_per_s"])
            v = cpu_per_req(runs[tf][rep]) if runs[tf][rep].get("cpu") else None
            if v is not None:
                fcpr.append(v)
        if r.get("cpu"):
            v = cpu_per_req(r)
            if v is not None:
                cpr.append(v)
            busy.append(r["cpu"]["machine_busy"])
        fwd.append(r.get("forwarded", 0))
        rt = res.get("routing") or {}
        to.append(rt.get("to_owner", 0)); el.append(rt.get("elsewhere", 0))
    f = lambda v, fmt: fmt % med(v) if v else ""
    print("| %s | %.0f | %.0f us | %.0f us | %s | %s | %s | %s | %s | %s | %d | %d / %d |" % (
        name, med(rps), med(p50), med(p99), f(xf, "%.2f"), f(xt, "%.2f"), tf or "",
        f(cpr, "%.0f us"), f(fcpr, "%.0f us"), f(busy, "%.2f"), sum(fwd), sum(to), sum(el)))
PY
fi
if [ -f "$GORESULTS" ]; then
  echo
  echo "## Go benchmarks ($GORESULTS, benchstat)"
  echo
  benchstat "$GORESULTS"
  if [ -n "$BASELINE" ]; then
    echo
    echo "## Go benchmarks: $BASELINE (old) against this run (new), benchstat"
    echo
    old_cpu=$(grep -m1 '^cpu:' "$WORK/baseline-go.txt" || true)
    new_cpu=$(grep -m1 '^cpu:' "$GORESULTS" || true)
    if [ "$old_cpu" != "$new_cpu" ] && [[ " ${BENCHSTAT_FLAGS:-} " != *" -ignore "* ]]; then
      log "BASELINE ran on another CPU (${old_cpu:-none} / ${new_cpu:-none}): benchstat tables old and new apart," \
        "without a comparison; BENCHSTAT_FLAGS='-ignore cpu' compares them anyway (a cross-machine difference)"
    fi
    benchstat old="$WORK/baseline-go.txt" new="$GORESULTS"
  fi
fi
if [ -z "${ONLY:-}" ]; then
  mkdir -p "$(dirname "$SVG")"
  go run ./scripts/chart svg -in "$RESULTS" -out "$SVG" -title "NextIDs latency by channel (standalone idgen on loopback)"
  log "chart written to $SVG"
fi
[ "$FAILED" = 0 ] || die "some idctl bench runs failed (see exit in $RESULTS)"
