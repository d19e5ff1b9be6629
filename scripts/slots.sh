#!/usr/bin/env bash
# Replays issue 30's slot holding (item 4) against a standalone idgen built
# from this checkout, under an open-file limit of 1024 as in the issue, and
# prints what the node did (docs/security.md, "Measured"). About 2 minutes.
#
#   scripts/slots.sh
#
# Needs prlimit (util-linux) and Linux (the second client address,
# 127.0.0.2, is routed to lo). Nothing is asserted: the figures go to the
# docs with the commit they were measured on.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
go build -o "$dir/idgen" ./cmd/idgen
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rpc=127.0.0.1:$(free_port)
admin=127.0.0.1:$(free_port)
prlimit --nofile=1024:1024 "$dir/idgen" --rpc-addr "$rpc" --admin-addr "$admin" --data-dir "$dir/data" \
	--log-format console >"$dir/idgen.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
	curl -fs "http://$admin/healthz" >/dev/null 2>&1 && break
	sleep 0.2
done
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '(not a git checkout)'), idgen pid $pid, rpc $rpc, admin $admin"
go run ./scripts/slots "$rpc" "$admin"
echo "log lines about the limits:"
grep -E 'refusing RPC|admin port full|admin connection over' "$dir/idgen.log" | cut -c1-300 | head -10 || true
