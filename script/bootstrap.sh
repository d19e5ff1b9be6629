#!/usr/bin/env bash
# Starts idgen from a Kitex-style output/ directory: output/bootstrap.sh [flags].
# Uses conf/idgen.yaml when present; any flag overrides it.
set -euo pipefail
CURDIR=$(cd "$(dirname "$0")" && pwd)
args=()
if [ -f "$CURDIR/conf/idgen.yaml" ] && [ -z "${IDGEN_CONFIG:-}" ]; then
  args+=(--config "$CURDIR/conf/idgen.yaml")
fi
exec "$CURDIR/bin/idgen" "${args[@]}" "$@"
