#!/usr/bin/env bash
# Measures idgen's availability figures for BENCHMARKS.md (issue 10): time
# from a crash restart to the first SNOWFLAKE ID (standalone and cluster) and
# the longest SNOWFLAKE gap per node while ZooKeeper is down for 12 s.
#
#   scripts/availability.sh          # starts ZooKeeper + MariaDB like ./build.sh test
#
# It prints one "MEASURE ..." line per figure. Nothing here is asserted:
# figures depend on the machine; record them with its description.
set -euo pipefail
cd "$(dirname "$0")/.."
./build.sh servers start >&2
trap './build.sh servers stop >&2' EXIT
# shellcheck disable=SC1091
. ./.testenv
IDGEN_MEASURE=1 go test -count=1 -timeout 20m -run 'TestMeasure_' -v ./server/ 2>&1 | grep -E '^MEASURE|^(ok|FAIL|---)' || true
