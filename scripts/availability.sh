#!/usr/bin/env bash
# Measures idgen's availability figures for BENCHMARKS.md (issue 10): time
# from a crash restart to the first SNOWFLAKE ID (standalone and cluster) and
# the longest SNOWFLAKE gap per node while ZooKeeper is down for 12 s; and the
# unit costs of docs/scale.md's capacity model (ZooKeeper writes, MySQL
# transactions, statements and rows, RPC bytes per 1,000 requests of each
# channel and mode; issue 31).
#
#   scripts/availability.sh                    # starts ZooKeeper + MariaDB like ./build.sh test
#   MEASURE=UnitCosts scripts/availability.sh  # only TestMeasure_UnitCosts
#
# The MariaDB server it starts is its own: the unit costs read the server's
# global status counters, which another user of the server would skew.
#
# It prints one "MEASURE ..." line per figure. Nothing here is asserted:
# figures depend on the machine; record them with its description.
set -euo pipefail
cd "$(dirname "$0")/.."
./build.sh servers start >&2
trap './build.sh servers stop >&2' EXIT
# shellcheck disable=SC1091
. ./.testenv
IDGEN_MEASURE=1 go test -count=1 -timeout 20m -run "TestMeasure_${MEASURE:-}" -v ./server/ 2>&1 | grep -E '^MEASURE|^(ok|FAIL|---)' || true
