#!/usr/bin/env bash
# idgen build script.
#
#   ./build.sh build            compile idgen and idctl into output/ (Kitex layout)
#   ./build.sh run [flags]      build and run a standalone idgen (data in ./data)
#   ./build.sh test             provision ZooKeeper + MariaDB, run every check and test
#   ./build.sh gen              regenerate kitex_gen/ from idl/idgen.thrift
#   ./build.sh servers start    start ZooKeeper + MariaDB for development; writes .testenv
#   ./build.sh servers stop     stop them
#   ./build.sh lint             gofmt, go vet, staticcheck
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
MODULE=github.com/idgen/idgen
STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

cmd_gen() {
  go tool kitex -module "$MODULE" idl/idgen.thrift
  gofmt -w kitex_gen
}

cmd_build() {
  local tags=${BUILD_TAGS:-}
  mkdir -p output/bin output/conf
  go build ${tags:+-tags "$tags"} -o output/bin/idgen ./cmd/idgen
  go build -o output/bin/idctl ./cmd/idctl
  cp script/bootstrap.sh output/bootstrap.sh
  chmod +x output/bootstrap.sh
  [ -f conf/idgen.yaml ] && cp conf/idgen.yaml output/conf/ || true
  log "built output/bin/idgen and output/bin/idctl"
}

cmd_run() {
  go run ./cmd/idgen "$@"
}

# ---- test servers ---------------------------------------------------------

need_apt=()
ensure_packages() {
  [ -x /usr/share/zookeeper/bin/zkServer.sh ] || need_apt+=(zookeeper)
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need_apt+=(mariadb-server)
  command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
  if [ ${#need_apt[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || die "missing ${need_apt[*]} and no apt-get: install them by hand"
    log "installing ${need_apt[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  fi
}

free_port() {
  python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

wait_port() { # host port seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

servers_start() {
  ensure_packages
  local dir; dir=$(mktemp -d /tmp/idgen-test.XXXXXX)
  local zkport myport; zkport=$(free_port); myport=$(free_port)
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
  ZOO_LOG_DIR="$dir/zk/log" ZOOPIDFILE="$dir/zk/pid" JVMFLAGS="-Xmx256m" \
    /usr/share/zookeeper/bin/zkServer.sh start "$dir/zk/zoo.cfg" >"$dir/zk/start.log" 2>&1 ||
    { cat "$dir/zk/start.log" >&2; die "ZooKeeper did not start"; }

  log "starting MariaDB on 127.0.0.1:$myport ($dir/mysql)"
  mariadb-install-db --no-defaults --datadir="$dir/mysql/data" --auth-root-authentication-method=normal \
    --user=root >"$dir/mysql/install.log" 2>&1 || { cat "$dir/mysql/install.log" >&2; die "mariadb-install-db failed"; }
  nohup mariadbd --no-defaults --datadir="$dir/mysql/data" --socket="$dir/mysql/sock" --port="$myport" \
    --bind-address=127.0.0.1 --user=root --pid-file="$dir/mysql/pid" --innodb-buffer-pool-size=128M \
    --max-connections=1000 --skip-name-resolve >"$dir/mysql/server.log" 2>&1 &
  echo $! >"$dir/mysql/mysqld.pid"

  wait_port 127.0.0.1 "$zkport" 60 || { cat "$dir/zk/log/"* >&2 || true; die "ZooKeeper not listening on $zkport"; }
  wait_port 127.0.0.1 "$myport" 60 || { tail -50 "$dir/mysql/server.log" >&2; die "MariaDB not listening on $myport"; }

  cat >"$ROOT/.testenv" <<ENV
export IDGEN_TEST_DIR=$dir
export IDGEN_TEST_ZK=127.0.0.1:$zkport
export IDGEN_TEST_ZK_CFG=$dir/zk/zoo.cfg
export IDGEN_TEST_MYSQL='root@tcp(127.0.0.1:$myport)/'
export IDGEN_TEST_MYSQL_DATADIR=$dir/mysql/data
export IDGEN_TEST_MYSQL_SOCKET=$dir/mysql/sock
export IDGEN_TEST_MYSQL_PORT=$myport
ENV
  log "servers up; environment in .testenv"
}

servers_stop() {
  [ -f "$ROOT/.testenv" ] || return 0
  # shellcheck disable=SC1091
  . "$ROOT/.testenv"
  local dir=$IDGEN_TEST_DIR
  if [ -f "$dir/zk/pid" ]; then
    ZOO_LOG_DIR="$dir/zk/log" ZOOPIDFILE="$dir/zk/pid" \
      /usr/share/zookeeper/bin/zkServer.sh stop "$dir/zk/zoo.cfg" >/dev/null 2>&1 || true
  fi
  for f in "$dir/mysql/pid" "$dir/mysql/mysqld.pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  sleep 1
  rm -rf "$dir" "$ROOT/.testenv"
  log "servers stopped"
}

cmd_servers() {
  case "${1:-}" in
    start) servers_stop; servers_start ;;
    stop) servers_stop ;;
    *) die "usage: ./build.sh servers start|stop" ;;
  esac
}

cmd_lint() {
  log "gofmt"
  local bad; bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go') | grep -v '^kitex_gen/' || true)
  [ -z "$bad" ] || die "gofmt needed on: $bad"
  log "go vet"
  go vet ./...
  go vet -tags faultinject ./...
  log "staticcheck"
  go run "$STATICCHECK" ./...
}

cmd_test() {
  cmd_lint
  ensure_packages
  if [ -d deploy/prometheus ]; then
    log "promtool"
    promtool check rules deploy/prometheus/alerts.yml
    promtool test rules deploy/prometheus/alerts_test.yml
  fi
  servers_start
  trap servers_stop EXIT
  # shellcheck disable=SC1091
  . "$ROOT/.testenv"
  export IDGEN_TEST_JAVA=${IDGEN_TEST_JAVA:-$(command -v java || true)}
  log "go test -race ./..."
  go test -race -count=1 -timeout 12m ./... 2>&1 | tee "$IDGEN_TEST_DIR/gotest.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || die "tests failed"
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  run) shift; cmd_run "$@" ;;
  test) shift; cmd_test "$@" ;;
  gen) shift; cmd_gen "$@" ;;
  servers) shift; cmd_servers "$@" ;;
  lint) shift; cmd_lint "$@" ;;
  *) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
