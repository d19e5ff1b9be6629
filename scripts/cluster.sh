# shellcheck shell=bash
# ./build.sh cluster up [N] | down: a local idgen cluster of N nodes (default
# 3, at most 9) in two IDCs, made the way docs/production.md makes one on
# real machines: servers, database, `idctl db migrate`, `idctl cluster init`
# with ZooKeeper auth, secrets in 0600 files, then the nodes.
#
# Sourced by build.sh, whose functions it uses (log, die, free_port,
# servers_start, stop_dir, stop_pids, mysql_sql, ldflags) and whose exit
# trap stops the servers when `up` fails half-way.
#
# Everything lives in one directory, $IDGEN_CLUSTER_DIR (default
# output/cluster):
#   bin/idgen, bin/idctl    the binaries the nodes run (a later ./build.sh
#                           build does not change them under the nodes)
#   secrets/                admin.token, client.token, zk.auth, mysql.dsn (0600)
#   env                     the export lines `up` prints (source it)
#   servers.env             the servers `up` started (./build.sh servers' format)
#   shared                  instead, the database `up` made on servers it did
#                           not start, dropped by `down`
#   nodeK/                  data/, properties/, idgen.log, pid, rpc, admin
#
# Servers: with IDGEN_TEST_ZK and IDGEN_TEST_MYSQL set (source .testenv, or
# under ./build.sh test), `up` uses those servers, in a database and a
# cluster name of its own, and `down` leaves them running; otherwise it
# starts ZooKeeper and MariaDB as `./build.sh servers start` does, and
# `down` stops them.

CLUSTER_DIR=${IDGEN_CLUSTER_DIR:-$ROOT/output/cluster}
# CLUSTER_MARK says a directory is one `up` made: `down` removes no other
# (IDGEN_CLUSTER_DIR=/tmp must not mean rm -rf /tmp).
CLUSTER_MARK=.idgen-local-cluster
CLUSTER_UP_DONE=1 # 0 while up runs: its exit trap stops the nodes it started

cmd_cluster() {
  case "${1:-}" in
    up) shift; cluster_up "$@" ;;
    down) shift; [ $# = 0 ] || die "usage: ./build.sh cluster down"; cluster_down ;;
    *) die "usage: ./build.sh cluster up [N] | ./build.sh cluster down" ;;
  esac
}

# cluster_exit: the exit trap while `up` runs. A failed `up` stops the nodes
# it started and removes its directory; build.sh's on_exit (called with the
# same status) then stops the servers it started.
cluster_exit() {
  local rc=$?
  set +e # a failing step here must not skip on_exit (the servers)
  if [ "$CLUSTER_UP_DONE" = 0 ]; then
    cluster_stop_nodes
    cluster_drop_shared_db
    rm -rf "$CLUSTER_DIR"
    log "cluster up failed: stopped what it had started"
  fi
  (exit "$rc")
  on_exit
}

# CLUSTER_ENV: a command prefix (env -u ...) that drops every IDGEN_*
# variable of the caller's shell (one that sourced an earlier cluster's env
# must not point the new one's idctl or nodes elsewhere); their own
# settings are flags. A prefix, not a function: `"${CLUSTER_ENV[@]}" idgen &`
# leaves idgen's pid in $!, where a backgrounded function would leave a
# subshell's.
CLUSTER_ENV=(env)
for v in $(compgen -e); do
  case $v in IDGEN_*) CLUSTER_ENV+=(-u "$v") ;; esac
done
unset v

cluster_up() {
  local n=${1:-3} shared=0 zk base db name sec i k idc rp ap ports=() pid
  [ $# -le 1 ] || die "usage: ./build.sh cluster up [N]"
  [[ $n =~ ^[1-9]$ ]] || die "cluster up N: N is the number of nodes, 1 to 9 (got '$n')"
  if [ -e "$CLUSTER_DIR" ]; then
    log "a cluster is up in $CLUSTER_DIR: taking it down first"
    cluster_down
  fi
  mkdir -p "$CLUSTER_DIR/bin"
  : >"$CLUSTER_DIR/$CLUSTER_MARK"
  CLUSTER_UP_DONE=0
  trap cluster_exit EXIT
  chmod 700 "$CLUSTER_DIR"
  sec=$CLUSTER_DIR/secrets
  (umask 077 && mkdir -p "$sec")

  log "building idgen and idctl into $CLUSTER_DIR/bin"
  go build -ldflags "$(ldflags)" -o "$CLUSTER_DIR/bin/" ./cmd/idgen ./cmd/idctl # one command: linked side by side

  if [ -n "${IDGEN_TEST_ZK:-}" ] && [ -n "${IDGEN_TEST_MYSQL:-}" ]; then
    # Servers someone else started (and stops): a database and a cluster
    # name of this cluster's own, so runs beside the tests do not meet.
    shared=1
    cluster_mariadb_client
    k=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    zk=$IDGEN_TEST_ZK base=${IDGEN_TEST_MYSQL%/}/ db=idgen_local_$k name=local-$k
    log "using the servers of IDGEN_TEST_ZK ($zk) and IDGEN_TEST_MYSQL: database $db, cluster $name"
    printf '%s\n%s\n' "$base" "$db" >"$CLUSTER_DIR/shared"
    mysql_sql "$base" "CREATE DATABASE \`$db\`" || die "cannot create database $db on IDGEN_TEST_MYSQL"
  else
    servers_start "$CLUSTER_DIR/servers.env"
    zk=$(sed -n 's/^export IDGEN_TEST_ZK=//p' "$CLUSTER_DIR/servers.env")
    base=$(sed -n "s/^export IDGEN_TEST_MYSQL='\(.*\)'\$/\1/p" "$CLUSTER_DIR/servers.env")
    db=idgen name=local # servers_start created the database idgen
  fi

  # Secrets: random, in files of mode 0600 (idgen refuses wider ones).
  (
    umask 077
    cluster_random >"$sec/admin.token"
    cluster_random >"$sec/client.token"
    printf 'idgen:%s\n' "$(cluster_random)" >"$sec/zk.auth"
    printf '%s%s\n' "$base" "$db" >"$sec/mysql.dsn"
  )

  "${CLUSTER_ENV[@]}" IDGEN_MYSQL_FILE="$sec/mysql.dsn" "$CLUSTER_DIR/bin/idctl" db migrate >"$CLUSTER_DIR/migrate.log" ||
    die "idctl db migrate failed: $(cat "$CLUSTER_DIR/migrate.log")"
  log "idctl db migrate: $(tail -1 "$CLUSTER_DIR/migrate.log") (all: $CLUSTER_DIR/migrate.log)"
  log "idctl cluster init --cluster $name (digest ACL from secrets/zk.auth)"
  "${CLUSTER_ENV[@]}" IDGEN_ZK_AUTH_FILE="$sec/zk.auth" "$CLUSTER_DIR/bin/idctl" cluster init --zk "$zk" --cluster "$name"

  for ((i = 1; i <= n; i++)); do
    rp=$(cluster_port "${ports[@]}")
    ports+=("$rp")
    ap=$(cluster_port "${ports[@]}")
    ports+=("$ap")
    idc=$((2 - i % 2)) # nodes 1, 3, ... in IDC 1; 2, 4, ... in IDC 2
    k=$CLUSTER_DIR/node$i
    mkdir -p "$k/data" "$k/properties"
    chmod 700 "$k/data" "$k/properties"
    echo "127.0.0.1:$rp" >"$k/rpc"
    echo "127.0.0.1:$ap" >"$k/admin"
    log "starting node $i (IDC $idc): RPC 127.0.0.1:$rp, admin 127.0.0.1:$ap, log $k/idgen.log"
    "${CLUSTER_ENV[@]}" nohup "$CLUSTER_DIR/bin/idgen" --zk "$zk" --zk-auth-file "$sec/zk.auth" --cluster "$name" \
      --mysql-file "$sec/mysql.dsn" --idc "$idc" --advertise-host 127.0.0.1 \
      --rpc-addr "127.0.0.1:$rp" --admin-addr "127.0.0.1:$ap" \
      --data-dir "$k/data" --properties-dir "$k/properties" \
      --admin-token-file "$sec/admin.token" --client-token-file "$sec/client.token" \
      --shutdown-timeout 2s >"$k/idgen.log" 2>&1 </dev/null &
    echo $! >"$k/pid"
  done
  for ((i = 1; i <= n; i++)); do
    k=$CLUSTER_DIR/node$i
    cluster_wait_ready "$k" || die "node $i is not ready: $(tail -20 "$k/idgen.log")"
  done
  log "all $n nodes ready"

  # The first business, through the admin RPC as an operator makes one:
  # every channel, so `idctl get --biz demo --channel C` works for each.
  "${CLUSTER_ENV[@]}" IDGEN_ADMIN_TOKEN_FILE="$sec/admin.token" "$CLUSTER_DIR/bin/idctl" biz create \
    --addr "$(cat "$CLUSTER_DIR/node1/rpc")" --biz demo --channels snowflake,unordered,ordered >/dev/null
  log "business demo created (channels snowflake, unordered, ordered)"

  cluster_write_env "$zk" "$name" "$n"
  CLUSTER_UP_DONE=1
  # shellcheck disable=SC2034 # build.sh's on_exit reads it: the servers stay up
  [ "$shared" = 1 ] || KEEP_SERVERS=1
  cluster_print "$n"
}

# cluster_mariadb_client sets MARIADB (mysql_sql's client) on servers this
# script did not start: the client alone, not ensure_servers' servers.
cluster_mariadb_client() {
  [ -z "$MARIADB" ] || return 0
  MARIADB=$(find_bin mariadb mysql) && return 0
  apt_install mariadb-client
  MARIADB=$(find_bin mariadb mysql) || die "no mariadb client after installing mariadb-client"
}

# cluster_random: 32 random bytes as 64 hex digits (tokens, the ZooKeeper
# digest's password).
cluster_random() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }

# cluster_port USED...: a free port (build.sh's free_port) that is none of USED.
cluster_port() {
  local p used=" $* "
  p=$(free_port)
  while [[ $used == *" $p "* ]]; do p=$(free_port); done
  printf '%s\n' "$p"
}

# cluster_wait_ready NODEDIR: /readyz of the node answers 200 (idctl health
# --ready), within 60 s; fails early when the node exits.
cluster_wait_ready() {
  local k=$1 i pid
  pid=$(cat "$k/pid")
  for ((i = 0; i < 120; i++)); do
    if "$CLUSTER_DIR/bin/idctl" health --admin-addr "$(cat "$k/admin")" --ready --timeout 1s >/dev/null 2>&1; then return 0; fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

# cluster_write_env ZK NAME N: the export lines that point every idctl
# command at the cluster, in $CLUSTER_DIR/env. Secrets are named by their
# files (the node's own variables, which idctl reads too), never held.
cluster_write_env() {
  local zk=$1 name=$2 n=$3 sec=$CLUSTER_DIR/secrets addrs='' i
  for ((i = 1; i <= n; i++)); do addrs+=${addrs:+,}$(cat "$CLUSTER_DIR/node$i/rpc"); done
  cat >"$CLUSTER_DIR/env" <<ENV
export IDGEN_ADDR=$(cat "$CLUSTER_DIR/node1/rpc")  # get, biz, decode: node 1 (bench: --addr $addrs)
export IDGEN_ADMIN_ADDR=$(cat "$CLUSTER_DIR/node1/admin")  # health: node 1
export IDGEN_ADMIN_TOKEN_FILE=$sec/admin.token
export IDGEN_CLIENT_TOKEN_FILE=$sec/client.token
export IDGEN_ZK=$zk IDGEN_CLUSTER=$name IDGEN_ZK_AUTH_FILE=$sec/zk.auth
export IDGEN_MYSQL_FILE=$sec/mysql.dsn
export IDGEN_AUDIT_FILE=$CLUSTER_DIR/node1/data/audit.jsonl  # audit: node 1's (each node writes its own)
ENV
}

cluster_print() {
  local n=$1 i k
  cat <<TXT

idgen cluster of $n nodes is up ($CLUSTER_DIR). Point idctl at it:

$(cat "$CLUSTER_DIR/env")

(or: source $CLUSTER_DIR/env). Then, for example:
  $CLUSTER_DIR/bin/idctl get --biz demo --channel ordered --sub-key user-1
  $CLUSTER_DIR/bin/idctl workers
  curl -H "Authorization: Bearer \$(cat $CLUSTER_DIR/secrets/admin.token)" http://\$IDGEN_ADMIN_ADDR/status

Nodes:
TXT
  for ((i = 1; i <= n; i++)); do
    k=$CLUSTER_DIR/node$i
    printf '  node %d  IDC %d  RPC %s  status http://%s/status  log %s\n' \
      "$i" $((2 - i % 2)) "$(cat "$k/rpc")" "$(cat "$k/admin")" "$k/idgen.log"
  done
  printf '\nStop everything: ./build.sh cluster down\n'
}

# cluster_stop_nodes: stop (build.sh's stop_pids: SIGTERM, SIGKILL after
# 30 s) every node whose pid file names a process running this cluster's
# idgen; a pid reused by another process is left alone.
cluster_stop_nodes() {
  local f pid pids=()
  for f in "$CLUSTER_DIR"/node*/pid; do
    [ -s "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] || continue
    if [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" != "$CLUSTER_DIR/bin/idgen" ]; then
      log "$f: process $pid is gone (or is not this cluster's idgen): left alone"
      continue
    fi
    pids+=("$pid")
  done
  stop_pids "${pids[@]}"
}

# cluster_drop_shared_db: the database `up` created on servers it did not
# start (the servers' own directory goes with them otherwise).
cluster_drop_shared_db() {
  local base db
  [ -s "$CLUSTER_DIR/shared" ] || return 0
  { read -r base && read -r db; } <"$CLUSTER_DIR/shared" || return 0
  cluster_mariadb_client
  mysql_sql "$base" "DROP DATABASE IF EXISTS \`$db\`" || log "could not drop database $db (servers gone?)"
}

# cluster_down: stop what `up` started (nodes, then the servers it started),
# drop the database it made on servers it did not start, remove the
# directory. Nothing up: nothing to do.
cluster_down() {
  local dir
  if [ ! -e "$CLUSTER_DIR" ]; then
    log "no cluster in $CLUSTER_DIR: nothing to stop"
    return 0
  fi
  [ -f "$CLUSTER_DIR/$CLUSTER_MARK" ] ||
    die "$CLUSTER_DIR exists but is no cluster made by ./build.sh cluster up (no $CLUSTER_MARK): remove it or set IDGEN_CLUSTER_DIR to another path"
  cluster_stop_nodes
  log "nodes stopped"
  cluster_drop_shared_db
  if [ -s "$CLUSTER_DIR/servers.env" ]; then
    dir=$(sed -n 's/^export IDGEN_TEST_DIR=//p' "$CLUSTER_DIR/servers.env")
    [ -z "$dir" ] || stop_dir "$dir"
  fi
  rm -rf "$CLUSTER_DIR"
  log "cluster down"
}
