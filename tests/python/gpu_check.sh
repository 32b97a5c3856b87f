#!/usr/bin/env bash
# The CUDA paths in one short run, for a lent GPU machine: the engine map's
# tests (tests/python/test_engine.py: test_bf16_ranks_cuda takes through the
# map into CUDA parameters, test_cuda_one_upload_per_take_exact checks the
# batched scatter wsync stages itself: one pinned upload a take, an
# index_copy_ per parameter, exact after every take;
# test_cuda_staging_limit_tied: a 512-byte staging limit, so uploads inside
# the take and parameters in pieces), the
# mirror's TestMirrorCuda (tests/python/test_wsync.py), and `make
# bench-engine BENCH_ENGINE_ARGS="--device cuda"` (each rank's pause with
# CUDA parameters: the batched scatter, its uploads a take), then a summary
# with the card's name. Each part must really run on the GPU: a test that
# skips, in either test file, counts as a failure here.
#
# Without CUDA (no torch, or torch.cuda.is_available() False) it runs
# nothing, says so and exits 0: nothing in its output then claims a GPU run.
# Logs go to $GPU_CHECK_LOGS (default $OUT/gpu_check when $OUT is set, else
# a temporary directory, printed).
# usage: tests/python/gpu_check.sh          (PYTHON=... picks the interpreter)
set -u
cd "$(dirname "$0")/../.."

py=${PYTHON:-}
if [ -z "$py" ]; then
    for cand in /usr/bin/python3 python3; do
        if "$cand" -c 'import torch' >/dev/null 2>&1; then py=$cand; break; fi
    done
fi
if [ -z "$py" ] || ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    echo "gpu_check: skip: no CUDA here (${py:-no python3 with torch}: torch.cuda.is_available() is not True);" \
         "nothing ran on a GPU"
    echo "summary: 0 passed, 0 failed (skipped: no CUDA)"
    exit 0
fi

logs=${GPU_CHECK_LOGS:-}
if [ -z "$logs" ]; then
    if [ -n "${OUT:-}" ]; then logs=$OUT/gpu_check; else logs=$(mktemp -d /tmp/wsync-gpu.XXXXXX); fi
fi
mkdir -p "$logs"
card=$("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')
"$py" -c 'import torch; print("gpu_check: %s, torch %s (CUDA %s), %s" % (torch.cuda.get_device_name(0),
    torch.__version__, torch.version.cuda, __import__("sys").executable))' | tee "$logs/device.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee -a "$logs/device.txt"
echo "gpu_check: logs in $logs"

passed=0 failed=0
lines=()
# step NAME LIMIT_S CHECK CMD...: runs CMD (output in $logs/NAME.log); CHECK
# is a function that reads the log and returns 0 when the step passed.
step() {
    local name=$1 limit=$2 check=$3 t0 rc
    shift 3
    t0=$(date +%s)
    timeout "$limit" "$@" >"$logs/$name.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && "$check" "$logs/$name.log"; then
        passed=$((passed + 1)); lines+=("ok   $name ($(( $(date +%s) - t0 )) s)")
    else
        failed=$((failed + 1)); lines+=("FAIL $name (exit $rc, $(( $(date +%s) - t0 )) s; see $logs/$name.log)")
        tail -n 30 "$logs/$name.log"
    fi
}

# the test scripts' own verdicts, and no CUDA test skipped
engine_ok() { # (verbose unittest: the docstring's first line, then "... ok", may follow the name's line)
    grep -q 'summary: [0-9]* passed, 0 failed' "$1" && ! grep -q 'skipped' "$1" &&
        grep -A1 '^test_bf16_ranks_cuda' "$1" | grep -q ' ok$' &&
        grep -A1 '^test_cuda_one_upload_per_take_exact' "$1" | grep -q ' ok$' &&
        grep -A1 '^test_cuda_staging_limit_tied' "$1" | grep -q ' ok$'
}
mirror_ok() { grep -q '^OK' "$1" && ! grep -q 'skipped' "$1" && grep -q '^Ran [1-9]' "$1"; }
bench_ok() { # on the GPU, exact, every rank's take in a few uploads (the batched scatter ran)
    grep -q 'targets on cuda' "$1" && ! grep -q 'differ' "$1" &&
        awk '$1 ~ /^[0-9]+$/ && NF >= 14 { n++; if ($10 < 1 || $10 > 4 || $14 != "yes") bad = 1 }
             END { exit !(n >= 1 && !bad) }' "$1"
}
built_ok() { [ -f build/libwsync.so ]; }

step build 300 built_ok make python
export WSYNC_LIB=$PWD/build/libwsync.so PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1
step engine_tests 300 engine_ok env CHECK_VERBOSE=1 "$py" tests/python/test_engine.py
step mirror_cuda 300 mirror_ok env PYTHONPATH="$PYTHONPATH:$PWD/tests/python" \
    "$py" -m unittest -v test_wsync.TestMirrorCuda
if [ "$py" = /usr/bin/python3 ]; then   # the Makefile's bench-engine runs /usr/bin/python3
    step bench_engine 420 bench_ok make bench-engine BENCH_ENGINE_ARGS="--device cuda"
else
    step bench_engine 420 bench_ok "$py" bench/bench_engine.py --device cuda
fi

echo
echo "gpu_check on $card:"
for l in "${lines[@]}"; do echo "  $l"; done
echo "bench-engine (--device cuda):"
grep -E '^(bench-engine|rank|[0-9]+ |\(a\)|batched|check_unmoved|memory)' "$logs/bench_engine.log" 2>/dev/null | sed 's/^/  /'
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
