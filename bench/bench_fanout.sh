#!/usr/bin/env bash
# make bench-fanout: tests/http/test_fanout.sh at full size (issue 21, "Load: many
# followers on one bucket"): 64 `wsync follow` processes on one nginx bucket
# (limit_conn 8 on their port, so some requests are refused with 503), 20
# steps of tiny with a 32768-entry vocabulary (18 MB a step), nginx killed and
# started again in the middle; every follower must end bit-exact at step 19.
# Prints each check and the aggregate bytes per second nginx served the
# followers (and its busiest second) against one curl downloading the same
# objects from the same nginx. Any FANOUT_* variable set in the environment
# wins (tests/http/test_fanout.sh lists them).
# usage: bench/bench_fanout.sh WSYNC_BIN
set -u
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 WSYNC_BIN"; exit 2; }
if ! command -v "${NGINX:-nginx}" >/dev/null && [ ! -x /usr/sbin/nginx ] || ! command -v curl >/dev/null; then
    echo "bench_fanout: skipped (needs nginx and curl: tests/install-deps.sh installs them)"; exit 0
fi
# the CPU head every bench prints (bench/bench_cpu.h), from the bench_probe built beside WSYNC_BIN
probe=$(dirname "$1")/bench_probe
[ -x "$probe" ] && "$probe" --head bench_fanout
export FANOUT_FOLLOWERS=${FANOUT_FOLLOWERS:-64}
export FANOUT_STEPS=${FANOUT_STEPS:-20}
export FANOUT_VOCAB=${FANOUT_VOCAB:-32768}
export FANOUT_LIMIT=${FANOUT_LIMIT:-8}
export FANOUT_GAP=${FANOUT_GAP:-0.2}
export FANOUT_DOWN=${FANOUT_DOWN:-5}
export FANOUT_TIMEOUT=${FANOUT_TIMEOUT:-300}
export FANOUT_ANCHOR_EVERY=${FANOUT_ANCHOR_EVERY:-5}
echo "bench_fanout: $FANOUT_FOLLOWERS followers, steps 0..$((FANOUT_STEPS - 1)) of tiny --vocab $FANOUT_VOCAB," \
     "limit_conn $FANOUT_LIMIT, nginx down ${FANOUT_DOWN}s once, --anchor-every $FANOUT_ANCHOR_EVERY, ${FANOUT_GAP}s between publishes"
start=$(date +%s)
CHECK_VERBOSE=1 tests/http/test_fanout.sh "$1"; rc=$?
echo "bench_fanout: $(( $(date +%s) - start )) s in all"
exit $rc
