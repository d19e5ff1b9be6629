#!/usr/bin/env bash
# idgen build script.
#
#   ./build.sh build              compile idgen and idctl into output/ (Kitex layout), version from git
#   ./build.sh run [flags]        build output/bin/idgen (and idctl) and exec idgen (standalone; data in ./data)
#   ./build.sh test [--quick] [PKG...]
#                                 lint, promtool, provision ZooKeeper + MariaDB, go test -race, 15 s decode fuzz
#                                 (the fuzz only without PKG: the whole suite);
#                                 --quick: no staticcheck, no race detector. Ends with one line
#                                 "TIME: N passed, N failed, N skipped"; full log in output/test/test.log,
#                                 go test's events in output/test/go-test.json, JUnit in output/test/junit.xml; the servers' logs in output/test/{mariadb,zookeeper}.log
#   ./build.sh lint               gofmt, go vet (also -tags faultinject), staticcheck, large files
#   ./build.sh gen                regenerate kitex_gen/ from idl/idgen.thrift
#   ./build.sh servers start      start ZooKeeper + MariaDB (and an empty database idgen) for development;
#                                 writes .testenv (IDGEN_TEST_MYSQL_DSN names the database)
#   ./build.sh servers stop       stop them
#   ./build.sh cluster up [N]     a local cluster: servers, database, migrate, cluster init with ZooKeeper
#                                 auth, secrets in 0600 files, N nodes (default 3) in two IDCs; prints the
#                                 export lines for idctl (scripts/cluster.sh; output/cluster)
#   ./build.sh cluster down       stop what cluster up started
#   ./build.sh install [PREFIX]   build, then install idgen and idctl in PREFIX/bin (default /usr/local, where
#                                 deploy/systemd's unit runs them), the unit in /etc/systemd/system, and
#                                 /etc/idgen/idgen.env when there is none; DESTDIR stages it (packaging)
#   ./build.sh image [--smoke] [TAG]  container image FROM scratch (deploy/container); --smoke runs and checks it
#   ./build.sh faults [--seed N] [--soak DUR] [SCENARIO...]
#                                 fault-injection suite (faults/): own ZooKeeper + MariaDB, 3+ real
#                                 nodes under load, independent checker, negative controls; not part
#                                 of test. ./build.sh faults --list names the scenarios
#   ./build.sh sim [--seed N | --seeds K [--first N]] [--budget DUR] [--control NAME] [--parallel P]
#                  [--repeat R] [--list] [-v]
#                                 cluster simulator (sim/): in-process nodes running the real code on a
#                                 simulated ZooKeeper, MySQL, clocks and processes; faults drawn from
#                                 the seed; a failing seed prints its schedule, --seed N replays it.
#                                 --control IDGEN_FAULT_X runs a negative control (must find a
#                                 violation); ./build.sh sim --list names them. test runs a short budget
#
# Servers are installed with apt-get when missing (with sudo when not root).
# IDGEN_VERSION overrides the version stamped into the binaries.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
MODULE=github.com/idgen/idgen
STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2
# promtool comes from this Debian package version, unpacked on its own
# (the full prometheus package installs ~320 MiB with its web dependencies).
PROMTOOL_DEB=2.42.0+ds-5+deb12u1
ZKSERVER=/usr/share/zookeeper/bin/zkServer.sh
LOG=/dev/null # ./build.sh test: output/test/test.log
# The decode fuzz budget of ./build.sh test (IDGEN_FUZZTIME overrides).
FUZZTIME=${IDGEN_FUZZTIME:-15s}
# The simulator's budget in ./build.sh test (IDGEN_SIMTIME overrides; seeds
# from IDGEN_SIMSEED, default 1, so a run of test replays the same schedules).
SIMTIME=${IDGEN_SIMTIME:-30s}
SIMSEED=${IDGEN_SIMSEED:-1}

log() {
  printf '==> %s\n' "$*" >&2
  printf '==> %s\n' "$*" >>"$LOG"
}
die() {
  printf 'build.sh: %s\n' "$*" >&2
  printf 'build.sh: %s\n' "$*" >>"$LOG"
  exit 1
}

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

as_root() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    die "need root for: $* (run as root, or install sudo)"
  fi
}

version() {
  if [ -n "${IDGEN_VERSION:-}" ]; then
    printf '%s\n' "$IDGEN_VERSION"
  else
    git describe --tags --always --dirty 2>/dev/null || echo dev
  fi
}
ldflags() { printf -- '-X=main.version=%s' "$(version)"; }

# ---- exit: stop what this process started; ./build.sh test prints its summary

STARTED_DIR='' # servers started by this process: stopped at exit ...
KEEP_SERVERS=0 # ... unless ./build.sh servers start brought them up
TESTING=0
on_exit() {
  local rc=$?
  trap - EXIT
  if [ -n "$STARTED_DIR" ] && [ "$KEEP_SERVERS" = 0 ]; then stop_dir "$STARTED_DIR" || true; fi
  if [ "$TESTING" = 1 ]; then finish_test "$rc"; fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- build and run ------------------------------------------------------------

cmd_gen() {
  go tool kitex -module "$MODULE" idl/idgen.thrift
  gofmt -w kitex_gen
}

cmd_build() {
  local v tags=()
  v=$(version)
  [ -z "${BUILD_TAGS:-}" ] || tags=(-tags "$BUILD_TAGS")
  mkdir -p output/bin output/conf
  go build "${tags[@]}" -ldflags "-X=main.version=$v" -o output/bin/idgen ./cmd/idgen
  go build -ldflags "-X=main.version=$v" -o output/bin/idctl ./cmd/idctl
  cp script/bootstrap.sh output/bootstrap.sh
  chmod +x output/bootstrap.sh
  cp conf/idgen.yaml output/conf/idgen.yaml
  log "built output/bin/idgen and output/bin/idctl, version $v"
}

cmd_run() {
  mkdir -p output/bin
  go build -ldflags "$(ldflags)" -o output/bin/idgen ./cmd/idgen
  go build -ldflags "$(ldflags)" -o output/bin/idctl ./cmd/idctl # for the README's session
  exec "$ROOT/output/bin/idgen" "$@"
}

# ---- tools and servers --------------------------------------------------------

# find_bin NAME...: absolute path of the first NAME found on PATH or in the
# sbin/bin directories (a non-root PATH often lacks /usr/sbin).
find_bin() {
  local n d p
  for n; do
    p=$(command -v "$n" 2>/dev/null || true)
    if [[ $p == /* ]]; then
      printf '%s\n' "$p"
      return 0
    fi
    for d in /usr/sbin /usr/bin /usr/local/sbin /usr/local/bin /sbin /bin; do
      if [ -x "$d/$n" ]; then
        printf '%s\n' "$d/$n"
        return 0
      fi
    done
  done
  return 1
}

apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "missing $*, and no apt-get: install them by hand"
  log "installing $* with apt-get"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

MARIADBD='' INSTALL_DB='' MARIADB=''
ensure_servers() {
  local need=()
  [ -x "$ZKSERVER" ] || need+=(zookeeper)
  { find_bin mariadbd mysqld && find_bin mariadb-install-db mysql_install_db; } >/dev/null || need+=(mariadb-server)
  find_bin mariadb mysql >/dev/null || need+=(mariadb-client)
  [ ${#need[@]} = 0 ] || apt_install "${need[@]}"
  [ -x "$ZKSERVER" ] || die "no $ZKSERVER after installing zookeeper"
  MARIADBD=$(find_bin mariadbd mysqld) || die "no mariadbd after installing mariadb-server"
  INSTALL_DB=$(find_bin mariadb-install-db mysql_install_db) || die "no mariadb-install-db after installing mariadb-server"
  MARIADB=$(find_bin mariadb mysql) || die "no mariadb client after installing mariadb-client"
}

# mysql_sql DSN SQL: run SQL with the mariadb client (ensure_servers sets
# MARIADB) on the server of a Go MySQL DSN, user[:password]@tcp(host:port)/...
# (the form IDGEN_TEST_MYSQL and idgen's --mysql take); the password goes
# through MYSQL_PWD, never the command line.
mysql_sql() {
  local re='^([^:@]+)(:([^@]*))?@tcp\(([^:)]+):([0-9]+)\)/'
  [[ $1 =~ $re ]] || die "mysql_sql: want a DSN user[:password]@tcp(host:port)/..., got one that is not"
  MYSQL_PWD=${BASH_REMATCH[3]} "$MARIADB" --no-defaults --protocol=tcp -h "${BASH_REMATCH[4]}" \
    -P "${BASH_REMATCH[5]}" -u "${BASH_REMATCH[1]}" -e "$2"
}

# ensure_test_tools: what ./build.sh test needs besides Go, installed in one
# apt-get run when missing: the servers, Chromium for the status page's
# browser test (sets CHROMIUM) and systemd-analyze for the unit check.
CHROMIUM=''
ensure_test_tools() {
  local need=()
  [ -x "$ZKSERVER" ] || need+=(zookeeper)
  { find_bin mariadbd mysqld && find_bin mariadb-install-db mysql_install_db; } >/dev/null || need+=(mariadb-server)
  find_bin chromium chromium-browser >/dev/null || need+=(chromium)
  find_bin systemd-analyze >/dev/null || need+=(systemd)
  [ ${#need[@]} = 0 ] || apt_install "${need[@]}"
  CHROMIUM=$(find_bin chromium chromium-browser) || die "no chromium after installing Debian's chromium package"
  find_bin systemd-analyze >/dev/null || die "no systemd-analyze after installing Debian's systemd package"
}

# ensure_promtool sets PROMTOOL: promtool on PATH, else the one unpacked from
# Debian's prometheus $PROMTOOL_DEB into ~/.cache/idgen (19 MB download).
PROMTOOL=
ensure_promtool() {
  if PROMTOOL=$(find_bin promtool); then return 0; fi
  local cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/idgen
  PROMTOOL=$cache/promtool-$PROMTOOL_DEB
  [ -x "$PROMTOOL" ] && return 0
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    die "no promtool and no apt-get: install promtool (Prometheus $PROMTOOL_DEB) by hand"
  fi
  local tmp deb
  tmp=$(mktemp -d)
  log "fetching promtool from Debian's prometheus $PROMTOOL_DEB into $cache"
  if ! (cd "$tmp" && apt-get download "prometheus=$PROMTOOL_DEB") >"$tmp/log" 2>&1; then
    as_root apt-get update -qq
    if ! (cd "$tmp" && apt-get download "prometheus=$PROMTOOL_DEB") >>"$tmp/log" 2>&1; then
      log "prometheus $PROMTOOL_DEB is no longer served: taking the current version (update PROMTOOL_DEB)"
      (cd "$tmp" && apt-get download prometheus) >>"$tmp/log" 2>&1 || {
        cat "$tmp/log" >&2
        rm -rf "$tmp"
        die "could not download Debian's prometheus package"
      }
    fi
  fi
  deb=$(find "$tmp" -name 'prometheus_*.deb' | head -1)
  PROMTOOL=$cache/promtool-$(basename "$deb" .deb | cut -d_ -f2)
  mkdir -p "$cache"
  dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/promtool >"$PROMTOOL.tmp"
  chmod +x "$PROMTOOL.tmp"
  mv "$PROMTOOL.tmp" "$PROMTOOL"
  rm -rf "$tmp"
}

# free_port: a free 127.0.0.1 port outside the kernel's ephemeral range,
# where no client socket is given a port while a server is down (the
# suite restarts ZooKeeper and MariaDB on theirs); internal/freeport does
# the same for the Go side and says why.
free_port() {
  python3 - <<'PY' 2>/dev/null || echo $((10000 + RANDOM % 20000))
import random, socket
try:
    lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
except Exception:
    lo, hi = 32768, 60999
pool = [p for p in range(10000, 65536) if p < lo or p > hi] or list(range(10000, 65536))
for p in random.sample(pool, 200):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
else:
    raise SystemExit(1)
PY
}

wait_port() { # port seconds pid: 127.0.0.1:port accepts, fails early if pid exits
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# servers_start ENVFILE: ZooKeeper and MariaDB on free 127.0.0.1 ports, in a
# new temp dir; their addresses go to ENVFILE. On any failure the exit trap
# stops whatever had started (STARTED_DIR is set before the first start).
servers_start() {
  local envfile=$1 dir zkport myport i asroot=()
  ensure_servers
  dir=$(mktemp -d "${TMPDIR:-/tmp}/idgen-test.XXXXXX")
  STARTED_DIR=$dir
  zkport=$(free_port)
  myport=$(free_port)
  while [ "$myport" = "$zkport" ]; do myport=$(free_port); done
  [ "$(id -u)" != 0 ] || asroot=(--user=root)
  mkdir -p "$dir/zk/data" "$dir/zk/log" "$dir/mysql"
  cat >"$dir/zk/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$dir/zk/data
clientPort=$zkport
clientPortAddress=127.0.0.1
minSessionTimeout=1000
maxSessionTimeout=60000
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
CFG
  log "starting ZooKeeper on 127.0.0.1:$zkport ($dir/zk)"
  # start-foreground execs the JVM (so $! is the server) and, unlike `start`,
  # needs no writable /var/log/zookeeper (Debian's zkEnv.sh forces that dir).
  JVMFLAGS="-Xmx256m -Dzookeeper.root.logger=INFO,CONSOLE" \
    nohup "$ZKSERVER" start-foreground "$dir/zk/zoo.cfg" >"$dir/zk/server.log" 2>&1 </dev/null &
  echo $! >"$dir/zk/pid"

  log "starting MariaDB on 127.0.0.1:$myport ($dir/mysql)"
  "$INSTALL_DB" --no-defaults --datadir="$dir/mysql/data" --auth-root-authentication-method=normal \
    "${asroot[@]}" >"$dir/mysql/install.log" 2>&1 ||
    { cat "$dir/mysql/install.log" >&2; die "$INSTALL_DB failed"; }
  nohup "$MARIADBD" --no-defaults --datadir="$dir/mysql/data" --socket="$dir/mysql/sock" --port="$myport" \
    --bind-address=127.0.0.1 "${asroot[@]}" --pid-file="$dir/mysql/pid" --innodb-buffer-pool-size=128M \
    --innodb-flush-log-at-trx-commit=1 --sync-binlog=1 \
    --max-connections=1000 --skip-name-resolve >"$dir/mysql/server.log" 2>&1 &
  echo $! >"$dir/mysql/mysqld.pid"

  wait_port "$zkport" 60 "$(cat "$dir/zk/pid")" ||
    { tail -50 "$dir/zk/server.log" >&2; die "ZooKeeper not listening on 127.0.0.1:$zkport"; }
  wait_port "$myport" 60 "$(cat "$dir/mysql/mysqld.pid")" ||
    { tail -50 "$dir/mysql/server.log" >&2; die "MariaDB not listening on 127.0.0.1:$myport"; }

  # The database "idgen", empty, for idctl and idgen (IDGEN_TEST_MYSQL_DSN):
  # IDGEN_TEST_MYSQL names no database because the tests create their own
  # on it (internal/testdb appends a name), and IDGEN_MYSQL itself is not
  # exported here because every idgen a test starts inherits the
  # environment (internal/testnode). Port open is not yet queries served:
  # retried for 10 s.
  for ((i = 0; ; i++)); do
    mysql_sql "root@tcp(127.0.0.1:$myport)/" 'CREATE DATABASE IF NOT EXISTS idgen' >>"$dir/mysql/create.log" 2>&1 && break
    [ "$i" -lt 100 ] || { cat "$dir/mysql/create.log" >&2; die "MariaDB on 127.0.0.1:$myport: CREATE DATABASE idgen failed"; }
    sleep 0.1
  done

  cat >"$envfile" <<ENV
export IDGEN_TEST_DIR=$dir
export IDGEN_TEST_ZK=127.0.0.1:$zkport
export IDGEN_TEST_ZK_CFG=$dir/zk/zoo.cfg
export IDGEN_TEST_MYSQL='root@tcp(127.0.0.1:$myport)/'
export IDGEN_TEST_MYSQL_DSN='root@tcp(127.0.0.1:$myport)/idgen'
export IDGEN_TEST_MYSQL_DATADIR=$dir/mysql/data
export IDGEN_TEST_MYSQL_SOCKET=$dir/mysql/sock
export IDGEN_TEST_MYSQL_PORT=$myport
ENV
  log "servers up"
}

# stop_pids PID...: SIGTERM to each, then SIGKILL to those still running
# 30 s later.
stop_pids() {
  local pids=() pid i
  for pid; do
    if kill "$pid" 2>/dev/null; then pids+=("$pid"); fi
  done
  for ((i = 0; i < 300 && ${#pids[@]} > 0; i++)); do
    for pid in "${!pids[@]}"; do kill -0 "${pids[$pid]}" 2>/dev/null || unset "pids[$pid]"; done
    [ ${#pids[@]} = 0 ] || sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}

# stop_dir DIR: stop the servers whose pid files are in DIR, then remove it.
stop_dir() {
  local dir=$1 f pid pids=()
  case $dir in */idgen-test.*) ;; *) return 0 ;; esac
  [ -d "$dir" ] || return 0
  for f in "$dir/zk/pid" "$dir/mysql/mysqld.pid" "$dir/mysql/pid"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] || continue
    pids+=("$pid")
  done
  stop_pids "${pids[@]}"
  # A test run keeps the servers' logs beside its own (a server that died
  # mid-run is diagnosed from them).
  if [ "$TESTING" = 1 ] && [ -d "$ROOT/output/test" ]; then
    cp "$dir/mysql/server.log" "$ROOT/output/test/mariadb.log" 2>/dev/null || true
    cp "$dir/zk/server.log" "$ROOT/output/test/zookeeper.log" 2>/dev/null || true
  fi
  rm -rf "$dir"
  log "servers stopped"
}

servers_stop() {
  [ -f "$ROOT/.testenv" ] || return 0
  stop_dir "$(sed -n 's/^export IDGEN_TEST_DIR=//p' "$ROOT/.testenv")"
  rm -f "$ROOT/.testenv"
}

cmd_servers() {
  case "${1:-}" in
    start)
      servers_stop
      servers_start "$ROOT/.testenv"
      KEEP_SERVERS=1
      log "environment in .testenv; stop them with ./build.sh servers stop"
      log "for idctl and idgen (the database idgen, empty: idctl db migrate first): source .testenv; export IDGEN_MYSQL=\"\$IDGEN_TEST_MYSQL_DSN\""
      ;;
    stop) servers_stop ;;
    *) die "usage: ./build.sh servers start|stop" ;;
  esac
}

# ---- checks -----------------------------------------------------------------
# Each check is counted in ./build.sh test's summary; its output goes to the
# log, and to the terminal when it fails.

NPASS=0 NFAIL=0 NSKIP=0 STEP='' FAILED=()
run_check() { # name command...
  local name=$1 out rc=0
  shift
  STEP=$name
  log "$name"
  out=$("$@" 2>&1) || rc=$?
  [ -z "$out" ] || printf '%s\n' "$out" >>"$LOG"
  if [ "$rc" = 0 ]; then
    NPASS=$((NPASS + 1))
  else
    NFAIL=$((NFAIL + 1))
    FAILED+=("check: $name")
    [ -z "$out" ] || printf '%s\n' "$out" | tail -n 200 >&2
    log "FAILED: $name (exit $rc)"
  fi
}
skip_check() { # name why
  NSKIP=$((NSKIP + 1))
  log "$1: skipped ($2)"
}

check_gofmt() {
  local files=() f bad
  while IFS= read -r f; do
    if [ -f "$f" ] && [[ $f != kitex_gen/* ]]; then files+=("$f"); fi
  done < <(git ls-files --cached --others --exclude-standard -- '*.go' 2>/dev/null ||
    find . -name '*.go' -not -path './output/*' -not -path './kitex_gen/*')
  [ ${#files[@]} -gt 0 ] || return 0
  bad=$(gofmt -l "${files[@]}") || return 1
  [ -z "$bad" ] || { printf 'gofmt needed on:\n%s\n' "$bad"; return 1; }
}

# check_large_files: no file over 1 MiB that is not text is tracked by git
# (built binaries, archives, data dumps belong elsewhere).
check_large_files() {
  local f size bad=0
  git rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git work tree: skipped"; return 0; }
  while IFS= read -r -d '' f; do
    if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
    size=$(stat -c %s "$f")
    [ "$size" -gt 1048576 ] || continue
    if ! LC_ALL=C grep -qI '' "$f"; then
      printf '%s: %d bytes and not text; do not track it in git\n' "$f" "$size"
      bad=1
    fi
  done < <(git ls-files -z)
  return "$bad"
}

lint_checks() { # quick: 1 skips staticcheck
  run_check gofmt check_gofmt
  run_check "go vet" go vet ./...
  run_check "go vet -tags faultinject" go vet -tags faultinject ./...
  if [ "$1" = 1 ]; then
    skip_check staticcheck "--quick"
  else
    run_check staticcheck go run "$STATICCHECK" ./...
  fi
  run_check "large files" check_large_files
}

cmd_lint() {
  lint_checks 0
  [ "$NFAIL" = 0 ] || die "lint failed: ${FAILED[*]}"
  log "lint passed"
}

# ---- test -----------------------------------------------------------------------

TEST_T0=0 TEST_TMP='' TEST_DONE=0
cmd_test() {
  local quick=0 pkgs=() all=0 flags st res p f s e
  while [ $# -gt 0 ]; do
    case $1 in
      --quick) quick=1 ;;
      --) shift; pkgs+=("$@"); break ;;
      -*) die "unknown flag $1: ./build.sh test [--quick] [PKG...]" ;;
      *) pkgs+=("$1") ;;
    esac
    shift
  done
  [ ${#pkgs[@]} -gt 0 ] || { pkgs=(./...); all=1; }
  TESTING=1
  TEST_T0=$SECONDS
  mkdir -p output/test
  LOG=$ROOT/output/test/test.log
  : >"$LOG"
  TEST_TMP=$(mktemp -d)
  log "idgen $(version); full log in $LOG"

  lint_checks "$quick"
  if [ -d deploy/prometheus ]; then
    STEP=promtool
    ensure_promtool
    run_check "promtool check rules" "$PROMTOOL" check rules deploy/prometheus/alerts.yml
    run_check "promtool test rules" "$PROMTOOL" test rules deploy/prometheus/alerts_test.yml
  fi

  STEP="gotestsum"
  build_gotestsum "$TEST_TMP/gotestsum"
  STEP="test tools"
  ensure_test_tools
  run_check "systemd unit" check_systemd_unit
  run_check "Dockerfile" check_dockerfile
  run_check "kubernetes manifests" check_kube_manifests
  STEP="servers"
  servers_start "$TEST_TMP/testenv"
  # shellcheck disable=SC1091
  . "$TEST_TMP/testenv"
  export IDGEN_TEST_JAVA=${IDGEN_TEST_JAVA:-$(command -v java || true)}
  export IDGEN_TEST_CHROMIUM=${IDGEN_TEST_CHROMIUM:-$CHROMIUM}

  STEP="go test"
  flags=(-count=1 -timeout 12m -ldflags "$(ldflags)")
  [ "$quick" = 1 ] || flags=(-race "${flags[@]}")
  log "go test ${flags[*]} ${pkgs[*]}"
  set +e
  "$TEST_TMP/gotestsum" --format pkgname-and-test-fails --format-icons text --hide-summary skipped \
    --jsonfile output/test/go-test.json --junitfile output/test/junit.xml \
    --junitfile-project-name idgen --junitfile-testcase-classname relative \
    --post-run-command "$TEST_TMP/counts" -- "${flags[@]}" "${pkgs[@]}" 2>&1 | tee -a "$LOG"
  st=("${PIPESTATUS[@]}")
  set -e
  if [ -s "$TEST_TMP/result" ]; then
    # gotestsum's counts: TOTAL includes subtests; ERRORS are packages that
    # did not build (also counted in FAILED).
    read -r p f s e <"$TEST_TMP/result"
    [ "$e" -le "$f" ] || f=$e
    NPASS=$((NPASS + p - f - s)) NFAIL=$((NFAIL + f)) NSKIP=$((NSKIP + s))
    mapfile -t res < <(failed_tests output/test/go-test.json)
    FAILED+=("${res[@]}")
  else
    f=0
    NFAIL=$((NFAIL + 1))
    FAILED+=("gotestsum (exit ${st[0]})")
  fi
  if [ "${st[0]}" != 0 ] && [ "$f" = 0 ]; then
    NFAIL=$((NFAIL + 1))
    FAILED+=("go test (exit ${st[0]})")
  fi
  # A short fuzz of the server's request decoding (server/codec_test.go):
  # no panic, no allocation in proportion to a declared length. An input
  # that fails is written to server/testdata/fuzz/ and replays in go test.
  # Only in the whole suite: a run of named packages does not pay for
  # building ./server/ with coverage instrumentation and the fuzz time.
  if [ "$all" = 1 ]; then
    run_check "fuzz FuzzServerDecode ($FUZZTIME)" go test -run '^$' -fuzz '^FuzzServerDecode$' -fuzztime "$FUZZTIME" ./server/
    # The cluster simulator, a short budget of seeds (sim/; the long run
    # is ./build.sh sim --seeds 1000).
    run_check "sim ($SIMTIME from seed $SIMSEED)" go run -tags faultinject ./cmd/idgen-sim --budget "$SIMTIME" --first "$SIMSEED" --parallel 2
    # The simulator's negative controls whose switches the packages read
    # (faultinject builds only; the plain run above leaves them out).
    run_check "sim controls (-tags faultinject)" go test -tags faultinject -count=1 -run 'TestControlsAreFound|TestKilledPredecessorIsALimit' ./sim/
  fi
  TEST_DONE=1
}

finish_test() { # exit status
  local rc=$1 el=$((SECONDS - TEST_T0))
  if [ "$rc" != 0 ] && [ "$TEST_DONE" = 0 ]; then
    NFAIL=$((NFAIL + 1))
    FAILED+=("${STEP:-build.sh}: aborted (exit $rc)")
  fi
  [ -z "$TEST_TMP" ] || rm -rf "$TEST_TMP"
  {
    echo
    if [ "$NFAIL" -gt 0 ]; then
      echo "FAILED:"
      printf '  %s\n' "${FAILED[@]}"
    fi
    echo "full log: $LOG"
    printf '%dm%02ds: %d passed, %d failed, %d skipped\n' $((el / 60)) $((el % 60)) "$NPASS" "$NFAIL" "$NSKIP"
  } | tee -a "$LOG"
  if [ "$NFAIL" -gt 0 ]; then exit 1; fi
  exit 0
}

# build_gotestsum OUT: gotestsum (pinned in tools/go.mod, built once per
# run) filters `go test -json`: one line per package and the output of the
# failing tests on the terminal, every event in output/test/go-test.json,
# JUnit XML in output/test/junit.xml for CI systems. Its post-run command
# (OUT's sibling "counts") writes "TOTAL FAILED SKIPPED ERRORS" to "result".
build_gotestsum() {
  local dir
  dir=$(dirname "$1")
  go build -modfile=tools/go.mod -o "$1" gotest.tools/gotestsum
  cat >"$dir/counts" <<SH
#!/bin/sh
echo "\$TESTS_TOTAL \$TESTS_FAILED \$TESTS_SKIPPED \$TESTS_ERRORS" >"$dir/result"
SH
  chmod +x "$dir/counts"
}

# failed_tests JSONFILE: "package Test" for each failing test, and the
# package alone when it failed outside any test (a build failure, a panic
# in TestMain), from go test's JSON events.
failed_tests() {
  grep '"Action":"fail"' "$1" 2>/dev/null |
    sed -n 's/.*"Package":"\([^"]*\)"\(,"Test":"\([^"]*\)"\)\{0,1\}.*/\1 \3/p' |
    sed "s|^$MODULE/||; s|^$MODULE\$|.|" |
    awk '$2 != "" { t[$1] = 1; print; next } { p[$1] = 1 }
      END { for (k in p) if (!(k in t)) print k " (outside any test: build failure, panic or timeout)" }' | sort -u
}

# ---- deploy ---------------------------------------------------------------------
# deploy/systemd, deploy/container and deploy/kubernetes: the checks that
# ./build.sh test runs on them, and ./build.sh image.

# install_tree BINDIR PREFIX ETC DESTDIR: BINDIR's idgen and idctl in
# PREFIX/bin, the README in PREFIX/share/doc/idgen, deploy/systemd's unit
# in ETC/systemd/system with ExecStart= and Documentation= pointing into
# PREFIX (the shipped unit names /usr/local), and idgen.env in ETC/idgen
# (0600, in a 0700 dir) unless one is there (it holds the operator's
# edits). Every path is written under DESTDIR. PRIV=1 runs the writes as
# root (as_root).
PRIV=0
install_tree() {
  local bin=$1 prefix=$2 etc=$3 dest=$4 tmp unit
  priv() { if [ "$PRIV" = 1 ]; then as_root "$@"; else "$@"; fi; }
  tmp=$(mktemp)
  sed -e "s#^ExecStart=/usr/local/bin/idgen\([[:space:]]\)#ExecStart=$prefix/bin/idgen\1#" \
    -e "s#^Documentation=file:///usr/local/share/doc/idgen/#Documentation=file://$prefix/share/doc/idgen/#" \
    "$ROOT/deploy/systemd/idgen.service" >"$tmp"
  if ! grep -q "^ExecStart=$prefix/bin/idgen[[:space:]]" "$tmp" || ! grep -q "^Documentation=file://$prefix/share/doc/idgen/" "$tmp"; then
    rm -f "$tmp"
    echo "deploy/systemd/idgen.service: want 'ExecStart=/usr/local/bin/idgen ...' and 'Documentation=file:///usr/local/share/doc/idgen/...' lines to point into $prefix" >&2
    return 1
  fi
  unit=$dest$etc/systemd/system/idgen.service
  priv install -d -m 0755 "$dest$prefix/bin" "$dest$prefix/share/doc/idgen" "$dest$etc/systemd/system"
  priv install -m 0755 "$bin/idgen" "$bin/idctl" "$dest$prefix/bin/"
  priv install -m 0644 "$ROOT/README.md" "$dest$prefix/share/doc/idgen/README.md"
  priv install -m 0644 "$tmp" "$unit"
  rm -f "$tmp"
  priv install -d -m 0700 "$dest$etc/idgen"
  if priv test -e "$dest$etc/idgen/idgen.env"; then
    log "$dest$etc/idgen/idgen.env exists: kept (the shipped one is deploy/systemd/idgen.env)"
  else
    priv install -m 0600 "$ROOT/deploy/systemd/idgen.env" "$dest$etc/idgen/idgen.env"
  fi
}

# cmd_install [PREFIX]: ./build.sh build, then install_tree from output/bin
# into PREFIX (default /usr/local) and /etc (SYSCONFDIR overrides), under
# DESTDIR when set; as root (sudo) when the targets are not writable.
# Without DESTDIR the installed unit is checked with systemd-analyze
# verify, when there is one. The unit is not enabled: it needs the secret
# files first (docs/production.md).
cmd_install() {
  local prefix=${1:-/usr/local} etc=${SYSCONFDIR:-/etc} dest=${DESTDIR:-} out
  [ $# -le 1 ] || die "usage: ./build.sh install [PREFIX]"
  [[ $prefix == /* ]] || die "install PREFIX: want an absolute path, got '$prefix'"
  prefix=${prefix%/}
  [ -n "$prefix" ] || die "install PREFIX: / is not a prefix (want /usr or /usr/local)"
  cmd_build
  [ -z "$dest" ] || mkdir -p "$dest" 2>/dev/null || true
  if [ "$(id -u)" != 0 ] && { [ -z "$dest" ] || ! [ -w "$dest" ]; }; then PRIV=1; fi
  install_tree "$ROOT/output/bin" "$prefix" "$etc" "$dest" || die "install failed"
  log "installed $dest$prefix/bin/idgen, $dest$prefix/bin/idctl, $dest$etc/systemd/system/idgen.service, $dest$etc/idgen/idgen.env"
  if [ -z "$dest" ] && command -v systemd-analyze >/dev/null 2>&1; then
    if out=$(systemd-analyze verify "$etc/systemd/system/idgen.service" 2>&1) && ! grep -q 'idgen.service' <<<"$out"; then
      log "systemd-analyze verify $etc/systemd/system/idgen.service: no complaint"
    else
      printf '%s\n' "$out" >&2
      die "systemd-analyze verify $etc/systemd/system/idgen.service complains (above)"
    fi
  fi
  cat <<NEXT
Next (docs/production.md): the secret files in $etc/idgen (mode 0600: admin.token,
client.token, master.key, mysql.dsn, zk.auth), the settings in $etc/idgen/idgen.env
(IDGEN_ZK, IDGEN_CLUSTER, IDGEN_IDC), idctl db migrate and idctl cluster init once, then
  systemctl daemon-reload && systemctl enable --now idgen
  $prefix/bin/idctl health --ready
NEXT
}

# check_systemd_unit: systemd-analyze verify on deploy/systemd/idgen.service
# as ./build.sh install puts it (install_tree into a temp dir, so verify,
# which refuses a unit whose ExecStart binary is missing, finds the idgen
# built there and the rewriting of the unit's paths is checked); verify only warns
# (exit 0) on an unknown key or a bad value, so any line it prints about the
# unit fails the check. Also checked: the flags of ExecStart and the IDGEN_*
# names of idgen.env are idgen's (its --help); every %d/FILE has its
# LoadCredential=FILE and the reverse; no secret in its plain form (flag or
# variable); TimeoutStopSec= above the ORDERED hand-off (10 s), the drain
# (IDGEN_SHUTDOWN_TIMEOUT of idgen.env, default 10 s), the mark's write (5 s)
# and the admin port's close (2 s); the hardening (systemd-analyze security
# --offline) at an exposure of 2.0 or less.
check_systemd_unit() {
  local unit=$ROOT/deploy/systemd/idgen.service envfile=$ROOT/deploy/systemd/idgen.env
  local tmp out line bad=0 f n stop drain
  if ! command -v systemd-analyze >/dev/null 2>&1; then apt_install systemd; fi
  tmp=$(mktemp -d)
  if ! go build -o "$tmp/bin/idgen" ./cmd/idgen || ! go build -o "$tmp/bin/idctl" ./cmd/idctl; then
    rm -rf "$tmp"
    echo "go build ./cmd/idgen ./cmd/idctl failed"
    return 1
  fi
  if ! PRIV=0 install_tree "$tmp/bin" "$tmp/usr/local" "$tmp/etc" "" 2>&1; then
    rm -rf "$tmp"
    return 1
  fi
  out=$(cd "$tmp" && systemd-analyze verify "$tmp/etc/systemd/system/idgen.service" 2>&1) || bad=1
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    case $line in
      *idgen.service*) printf 'systemd-analyze verify: %s\n' "${line//$tmp\//}"; bad=1 ;;
      *) printf 'systemd-analyze verify (another unit, ignored): %s\n' "$line" ;;
    esac
  done <<<"$out"

  # ExecStart's flags (the continuation lines up to the first line without
  # a trailing backslash) and idgen.env's variables must be idgen's.
  "$tmp/usr/local/bin/idgen" --help >"$tmp/help" 2>&1 || true
  for f in $(awk '/^ExecStart=/ { on = 1 } on { print } on && !/\\$/ { exit }' "$unit" | grep -o -- '--[a-z][a-z0-9-]*'); do
    grep -qE -- "^  -${f#--}([[:space:]]|\$)" "$tmp/help" || { echo "$unit: ExecStart flag $f is not an idgen flag"; bad=1; }
  done
  for n in $(sed -n 's/^\(IDGEN_[A-Z0-9_]*\)=.*/\1/p' "$envfile"); do
    [ "$n" = IDGEN_CONFIG ] || grep -q "(env $n," "$tmp/help" || { echo "$envfile: $n names no idgen setting"; bad=1; }
  done

  # Secrets: files from credentials only.
  if grep -v '^[[:space:]]*#' "$unit" | grep -E -- '--(mysql|admin-token|client-token|zk-auth)([[:space:]=]|$)'; then
    echo "$unit: a secret's plain flag (use its -file twin with %d/ and LoadCredential=)"
    bad=1
  fi
  if cat "$unit" "$envfile" | grep -v '^[[:space:]]*#' | grep -E '(^|[[:space:]=])IDGEN_(MYSQL|ADMIN_TOKEN|CLIENT_TOKEN|ZK_AUTH)='; then
    echo "a secret in the environment: use the *_FILE twin with %d/ and LoadCredential="
    bad=1
  fi
  for f in $(grep -v '^[[:space:]]*#' "$unit" | grep -o '%d/[A-Za-z0-9._-]*' | sort -u); do
    grep -q "^LoadCredential=${f#%d/}:" "$unit" || { echo "$unit: $f is used but no LoadCredential=${f#%d/}: loads it"; bad=1; }
  done
  for f in $(sed -n 's/^LoadCredential=\([^:]*\):.*/\1/p' "$unit"); do
    grep -v '^[[:space:]]*#' "$unit" | grep -q "%d/$f\\b" || { echo "$unit: LoadCredential=$f: is never passed to idgen (%d/$f)"; bad=1; }
  done

  # Stop: SIGKILL must not cut the hand-off, the drain or the mark's write.
  stop=$(sed -n 's/^TimeoutStopSec=//p' "$unit" | tail -1)
  case $stop in
    *min) stop=$((${stop%min} * 60)) ;;
    *s) stop=${stop%s} ;;
  esac
  drain=$(sed -n 's/^IDGEN_SHUTDOWN_TIMEOUT=\([0-9]*\)s$/\1/p' "$envfile" | tail -1)
  drain=${drain:-10}
  if ! [[ $stop =~ ^[0-9]+$ ]] || [ "$stop" -le $((10 + drain + 5 + 2)) ]; then
    echo "$unit: TimeoutStopSec=$stop must exceed 10 s (hand-off) + ${drain} s (IDGEN_SHUTDOWN_TIMEOUT) + 5 s (mark) + 2 s (admin port)"
    bad=1
  fi
  if ! grep -q '^KillSignal=SIGTERM$' "$unit"; then echo "$unit: KillSignal= is not SIGTERM"; bad=1; fi

  if ! out=$(cd "$tmp" && systemd-analyze security --offline=yes --threshold=20 "$tmp/etc/systemd/system/idgen.service" 2>&1); then
    echo "$unit: exposure above 2.0 in systemd-analyze security (the hardening got weaker):"
    printf '%s\n' "$out"
    bad=1
  else
    printf '%s\n' "$out" | grep -o 'Overall exposure level.*' || true
  fi
  rm -rf "$tmp"
  return "$bad"
}

# check_dockerfile: what ./build.sh test can check of deploy/container/
# Dockerfile without building it (no image tool is assumed in CI; ./build.sh
# image --smoke builds and runs it): the final stage is FROM scratch and
# copies only the files cmd_image puts in the context, the user is numeric
# and not root, and the HEALTHCHECK runs `idctl health`, a command idctl has.
check_dockerfile() {
  local df=$ROOT/deploy/container/Dockerfile bad=0 last user f tmp
  last=$(grep -iE '^FROM[[:space:]]' "$df" | tail -1 | awk '{ print $2 }')
  [ "$last" = scratch ] || { echo "$df: the final stage is FROM $last, want scratch"; bad=1; }
  user=$(grep -iE '^USER[[:space:]]' "$df" | tail -1 | awk '{ print $2 }')
  if ! [[ $user =~ ^[1-9][0-9]*(:[1-9][0-9]*)?$ ]]; then
    echo "$df: USER '$user': want a numeric non-root uid[:gid] (a scratch image has no /etc/passwd)"
    bad=1
  fi
  for f in $(awk 'toupper($1) == "COPY" { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' "$df"); do
    case $f in idgen | idctl | data/) ;; *) echo "$df: COPY $f: the context has only idgen, idctl and data/"; bad=1 ;; esac
  done
  grep -qE '^HEALTHCHECK .*CMD \["/usr/local/bin/idctl", "health"' "$df" ||
    grep -A1 -E '^HEALTHCHECK' "$df" | grep -q '"/usr/local/bin/idctl", "health"' ||
    { echo "$df: no HEALTHCHECK running idctl health"; bad=1; }
  grep -qE '^ENTRYPOINT \["/usr/local/bin/idgen"\]' "$df" || { echo "$df: ENTRYPOINT is not /usr/local/bin/idgen"; bad=1; }
  tmp=$(mktemp -d)
  go build -o "$tmp/idctl" ./cmd/idctl && "$tmp/idctl" health --help >/dev/null 2>&1 ||
    { echo "idctl has no working 'health' command for the HEALTHCHECK"; bad=1; }
  rm -rf "$tmp"
  return "$bad"
}

# check_kube_manifests: deploy/kubernetes/check, a Go module of its own (the
# service's module takes no Kubernetes dependency), renders every
# kustomization of deploy/kubernetes (cluster: settings and the init Job;
# idc1, idc2 over base) with kustomize's library pinned in its go.mod,
# decodes every document strictly into its Kubernetes type and checks
# probes, grace period, storage, security context, secrets, the PDB, the
# IDCs together and the init Job.
check_kube_manifests() {
  GOWORK=off go -C "$ROOT/deploy/kubernetes/check" vet ./... &&
    GOWORK=off go -C "$ROOT/deploy/kubernetes/check" test -count=1 ./...
}

# cmd_image [--smoke] [TAG]: the container image of deploy/container/Dockerfile
# (FROM scratch: the two static binaries, an empty data dir owned by 65532).
# The binaries are built here (CGO_ENABLED=0 go build -trimpath: no Go image
# is pulled) into output/image, the build context; podman build, else buildah
# bud, builds it in docker format (the OCI format drops HEALTHCHECK). TAG
# defaults to localhost/idgen:VERSION. --smoke then runs it with podman
# (extra `podman run` options in IDGEN_IMAGE_RUN_OPTS), waits for /healthz
# from the host, checks it runs as uid 65532, that its HEALTHCHECK is there
# and passes, that it hands out IDs, and that SIGTERM stops it cleanly.
cmd_image() {
  local smoke=0 tag='' v ctx tool=() name rport aport pid uid i ok=1 opts=()
  while [ $# -gt 0 ]; do
    case $1 in
      --smoke) smoke=1 ;;
      -*) die "unknown flag $1: ./build.sh image [--smoke] [TAG]" ;;
      *) [ -z "$tag" ] || die "one TAG only: ./build.sh image [--smoke] [TAG]"; tag=$1 ;;
    esac
    shift
  done
  v=$(version)
  [ -n "$tag" ] || tag=localhost/idgen:$(printf '%s' "$v" | tr -c 'A-Za-z0-9_.-' '-')
  ctx=$ROOT/output/image
  rm -rf "$ctx"
  mkdir -p "$ctx/data"
  log "building static idgen and idctl $v into $ctx"
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X=main.version=$v" -o "$ctx/idgen" ./cmd/idgen
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X=main.version=$v" -o "$ctx/idctl" ./cmd/idctl
  if command -v podman >/dev/null 2>&1 && podman info >/dev/null 2>&1; then
    tool=(podman build)
  elif command -v buildah >/dev/null 2>&1 && buildah info >/dev/null 2>&1; then
    tool=(buildah bud)
  else
    die "neither podman nor buildah works here: install one (apt-get install podman)"
  fi
  log "${tool[*]} --format docker -t $tag (FROM scratch)"
  "${tool[@]}" --format docker --build-arg "VERSION=$v" -f "$ROOT/deploy/container/Dockerfile" -t "$tag" "$ctx"
  cat <<RUN
image $tag built with ${tool[0]} (docker format: HEALTHCHECK kept). Run it:
  podman run -d --name idgen -p 8888:8888 -p 127.0.0.1:8889:8889 -v idgen-data:/var/lib/idgen $tag
  podman healthcheck run idgen                                  # idctl health in the container: /healthz
  podman exec idgen /usr/local/bin/idctl health --ready         # /readyz
  podman stop -t 60 idgen                                       # SIGTERM: hand-off, drain, exact mark
Secrets as files: add -v /etc/idgen:/run/secrets/idgen:ro and, after the image,
  --admin-token-file /run/secrets/idgen/admin.token (flags after the image are idgen's).
Kubernetes: push it and set image: in deploy/kubernetes/base/statefulset.yaml and
deploy/kubernetes/cluster/init-job.yaml (docs/production.md).
RUN
  [ "$smoke" = 1 ] || return 0

  command -v podman >/dev/null 2>&1 || die "--smoke runs the image with podman, which is not installed"
  read -r -a opts <<<"${IDGEN_IMAGE_RUN_OPTS:-}"
  name=idgen-smoke-$$
  rport=$(free_port)
  aport=$(free_port)
  while [ "$aport" = "$rport" ]; do aport=$(free_port); done
  log "smoke: podman run ${opts[*]} $tag (RPC 127.0.0.1:$rport, admin 127.0.0.1:$aport)"
  if ! podman run -d --name "$name" -p "127.0.0.1:$rport:8888" -p "127.0.0.1:$aport:8889" "${opts[@]}" "$tag" >/dev/null; then
    podman rm -f -v "$name" >/dev/null 2>&1 || true
    die "smoke: podman run failed (the error is above; in a sandbox without CAP_SYS_RESOURCE or with hybrid cgroups, try IDGEN_IMAGE_RUN_OPTS='--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096')"
  fi
  for ((i = 0; i < 60; i++)); do # /healthz from the host, through the published port
    if "$ctx/idctl" health --admin-addr "127.0.0.1:$aport" --timeout 1s >/dev/null 2>&1; then break; fi
    sleep 0.5
  done
  "$ctx/idctl" health --admin-addr "127.0.0.1:$aport" || ok=0
  for ((i = 0; i < 60; i++)); do # /readyz: the store opened, the slot claimed
    if "$ctx/idctl" health --admin-addr "127.0.0.1:$aport" --ready --timeout 1s >/dev/null 2>&1; then break; fi
    sleep 0.5
  done
  "$ctx/idctl" health --admin-addr "127.0.0.1:$aport" --ready || ok=0
  pid=$(podman inspect -f '{{.State.Pid}}' "$name")
  uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
  if [ "$uid" = 65532 ]; then log "smoke: idgen runs as uid $uid"; else log "smoke: idgen runs as uid '$uid', want 65532"; ok=0; fi
  if podman inspect -f '{{json .Config.Healthcheck}}' "$name" | grep -q 'idctl'; then
    log "smoke: healthcheck $(podman inspect -f '{{json .Config.Healthcheck.Test}}' "$name")"
  else
    log "smoke: the container has no HEALTHCHECK"
    ok=0
  fi
  if podman healthcheck run "$name"; then log "smoke: podman healthcheck run: healthy"; else log "smoke: podman healthcheck run failed"; ok=0; fi
  if ! "$ctx/idctl" get --addr "127.0.0.1:$rport" --biz smoke --count 2; then ok=0; fi
  podman stop -t 60 "$name" >/dev/null || ok=0
  if [ "$(podman inspect -f '{{.State.ExitCode}}' "$name")" = 0 ] && podman logs "$name" 2>&1 | grep -q '"idgen stopped"'; then
    log "smoke: SIGTERM: exit 0 after \"idgen stopped\""
  else
    podman logs "$name" 2>&1 | tail -20 >&2
    log "smoke: idgen did not stop cleanly"
    ok=0
  fi
  podman rm -f -v "$name" >/dev/null 2>&1 || true
  [ "$ok" = 1 ] || die "smoke: the image failed a check (above)"
  log "smoke: passed"
}

# ---- faults -------------------------------------------------------------------

# cmd_faults: the fault-injection suite (docs/reliability.md). Builds idgen
# (normal and -tags faultinject), idctl and the suite into output/faults/bin,
# starts its own ZooKeeper and MariaDB on fresh loopback ports (stopped by
# the exit trap, even after a failure; the suite rewrites their pid files
# when it restarts them), and runs the scenarios. Every idgen node the suite
# starts, and the three-server ZooKeeper ensemble the ensemble scenarios
# start for themselves (zkServer.sh, like the single server), dies with it
# (PDEATHSIG) and is also stopped here by its pid file.
cmd_faults() {
  local bin=$ROOT/output/faults/bin args=() rc=0 f pid
  while [ $# -gt 0 ]; do
    case $1 in
      --seed | --soak | --work | --results) args+=("-${1#--}" "$2"); shift ;;
      --list) args+=(-list) ;;
      -*) die "unknown flag $1: ./build.sh faults [--seed N] [--soak DUR] [--work DIR] [--results FILE] [--list] [SCENARIO...]" ;;
      *) args+=("$1") ;;
    esac
    shift
  done
  mkdir -p "$bin"
  log "building idgen, idgen (faultinject), idctl and the suite into $bin"
  go build -ldflags "$(ldflags)" -o "$bin/idgen" ./cmd/idgen
  go build -tags faultinject -ldflags "$(ldflags)" -o "$bin/idgen-faultinject" ./cmd/idgen
  go build -ldflags "$(ldflags)" -o "$bin/idctl" ./cmd/idctl
  go build -o "$bin/faults" ./faults/cmd/faults
  args=(-bin "$bin/idgen" -bin-faultinject "$bin/idgen-faultinject" -idctl "$bin/idctl" "${args[@]}")
  if [[ " ${args[*]} " == *" -list "* ]]; then
    "$bin/faults" "${args[@]}"
    return 0
  fi
  servers_start "$bin/env"
  # shellcheck disable=SC1091
  . "$bin/env"
  export IDGEN_FAULTS_MARIADBD=$MARIADBD IDGEN_FAULTS_ZKSERVER=$ZKSERVER IDGEN_FAULTS_PIDDIR=$STARTED_DIR/faults-pids
  mkdir -p "$IDGEN_FAULTS_PIDDIR"
  "$bin/faults" "${args[@]}" || rc=$?
  for f in "$IDGEN_FAULTS_PIDDIR"/*.pid; do
    [ -s "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if [[ $pid =~ ^[0-9]+$ ]]; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  [ "$rc" = 0 ] || die "faults: a scenario failed or a negative control did not fail (exit $rc)"
}

# ./build.sh sim: the cluster simulator, built with -tags faultinject so
# the negative controls' switches exist in-process.
cmd_sim() {
  local bin=$ROOT/output/sim/bin args=()
  while [ $# -gt 0 ]; do
    case $1 in
      --seed | --seeds | --first | --budget | --control | --parallel | --repeat | --nodes | --duration) args+=("-${1#--}" "$2"); shift ;;
      --list) args+=(-list) ;;
      -v) args+=(-v) ;;
      --expect-violation) args+=(-expect-violation) ;;
      *) die "unknown argument $1: ./build.sh sim [--seed N | --seeds K [--first N]] [--budget DUR] [--control NAME] [--parallel P] [--repeat R] [--list] [-v]" ;;
    esac
    shift
  done
  mkdir -p "$bin"
  go build -tags faultinject -o "$bin/idgen-sim" ./cmd/idgen-sim
  "$bin/idgen-sim" "${args[@]}" || die "sim: a seed failed (its schedule is printed above; replay it with --seed N)"
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  run) shift; cmd_run "$@" ;;
  test) shift; cmd_test "$@" ;;
  gen) shift; cmd_gen "$@" ;;
  servers) shift; cmd_servers "$@" ;;
  cluster) shift; . "$ROOT/scripts/cluster.sh"; cmd_cluster "$@" ;;
  lint) shift; cmd_lint "$@" ;;
  faults) shift; cmd_faults "$@" ;;
  sim) shift; cmd_sim "$@" ;;
  image) shift; cmd_image "$@" ;;
  install) shift; cmd_install "$@" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
