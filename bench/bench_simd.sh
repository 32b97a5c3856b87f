#!/usr/bin/env bash
# The SIMD figures of one machine, in one short run (issue 27): the CPU head,
# AUTO's choice in fresh processes, every path and AUTO at data offsets 0, 8
# and 16 (bench_probe --align), bench_delta (every diff and digest path,
# SIMD build and portable build) and bench_apply (SIMD and portable) on the
# tool's deltas of two generated steps. For a machine lent for minutes: build
# the binaries elsewhere without -march (the SIMD paths are chosen at run
# time), carry them, and run this with a time limit per stage.
# usage: bench/bench_simd.sh BIN_DIR WORK_DIR [MODEL] [STEPS]
#   BIN_DIR holds bench_delta, bench_delta_portable, bench_apply,
#   bench_apply_portable, bench_probe and wsync; WORK_DIR gets about 2.5 GB
#   (qwen3-0.6b). Each stage is limited to STAGE_S seconds (default 240).
#   ALIGN_MIB (default 1137, 1.19 GB) sizes bench_probe --align's three images.
set -u
bin=$1
work=$2
model=${3:-qwen3-0.6b}
steps=${4:-2}
limit=${STAGE_S:-240}
mkdir -p "$work" || exit 1
stage() { echo "== $*"; timeout "$limit" "$@"; echo "== exit $?"; }
echo "== cpu"
grep -m1 'model name' /proc/cpuinfo
grep -m1 -E '^cpu family' /proc/cpuinfo
grep -m1 -E '^model[[:space:]]' /proc/cpuinfo
nproc
stage bench/bench_probe.sh "$bin/bench_probe" 10
# every path and AUTO at data offsets 0, 8 and 16 (mod 64), ratios to memcmp
# in the same run, and the load-only ceiling (issue 44); 3.6 GB of memory
stage "$bin/bench_probe" --align "${ALIGN_MIB:-1137}" 16
stage "$bin/bench_delta" "$model" "$steps"
stage "$bin/bench_delta_portable" "$model" 1
stage "$bin/wsync" gen --model "$model" --step 1 -o "$work/1.st"
stage "$bin/wsync" gen --model "$model" --step 2 -o "$work/2.st"
for e in packed packed-max trl-v3; do
    stage "$bin/wsync" diff "$work/1.st" "$work/2.st" -o "$work/d.$e" --encoding $e
    for b in bench_apply bench_apply_portable; do
        stage "$bin/$b" "$work/1.st" "$work/d.$e"
    done
done
rm -rf "$work"
