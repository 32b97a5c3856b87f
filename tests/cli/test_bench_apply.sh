#!/usr/bin/env bash
# bench_apply's contract on the small real trajectory: it applies a delta of
# every encoding, counts the same changes as `wsync diff`, checks the
# scatter's result against the apply's, and refuses bad input.
# usage: tests/cli/test_bench_apply.sh path/to/bench_apply path/to/wsync
set -u
cd "$(dirname "$0")/../.."
bench=${1:-build/bench_apply}
bin=${2:-build/wsync}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
expect_rc() { # name, expected rc, command...
    local name=$1 want=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ $rc -eq "$want" ]; then pass "$name"; else fail "$name: exit $rc, wanted $want"; head -n 5 "$tmp/err"; fi
}
T=tests/fixtures/corpus/trajectory

for e in packed packed-max trl-v1 trl-v3; do
    "$bin" diff $T/step_0001.safetensors $T/step_0002.safetensors -o "$tmp/d.$e" --encoding $e >"$tmp/diff" 2>&1
    want=$(sed -n 's/.*delta, \([0-9]*\) of .*/\1/p' "$tmp/diff")
    expect_rc "bench_apply $e" 0 "$bench" --reps 2 $T/step_0001.safetensors "$tmp/d.$e"
    got=$(sed -n 's/.*: \([0-9]*\) changes in \([0-9]*\) tensors.*/\1/p' "$tmp/out")
    [ -n "$want" ] && [ "$got" = "$want" ] && pass "bench_apply $e counts the diff's $want changes" \
        || fail "bench_apply $e counted '$got' changes, the diff '$want'"
    grep -q "($e, " "$tmp/out" && pass "bench_apply names $e" || fail "bench_apply $e output: $(head -1 "$tmp/out")"
    grep -q "apply / scatter speed: [0-9]" "$tmp/out" && pass "bench_apply $e prints the ratio" \
        || fail "bench_apply $e: no ratio in $(cat "$tmp/out")"
done
expect_rc "bench_apply --digests on its base" 0 "$bench" --digests --reps 1 --threads 2 $T/step_0001.safetensors "$tmp/d.packed"
grep -q "2 threads, digests checked" "$tmp/out" && pass "threads and digests reported" || fail "output: $(cat "$tmp/out")"
expect_rc "bench_apply --digests on the wrong base" 1 "$bench" --digests $T/step_0000.safetensors "$tmp/d.packed"
grep -q "not this delta's base" "$tmp/err" && pass "wrong base named" || fail "wrong base message: $(cat "$tmp/err")"
# without digests nothing checks the base: applied to its own result, the
# delta changes nothing there, which is reported as an error
expect_rc "bench_apply to the delta's result" 1 "$bench" --reps 1 $T/step_0002.safetensors "$tmp/d.trl-v1"
grep -q "changes nothing" "$tmp/err" && pass "nothing to measure named" || fail "message: $(cat "$tmp/err")"
head -c 2000 "$tmp/d.packed-max" > "$tmp/cut"
expect_rc "bench_apply a truncated delta" 1 "$bench" $T/step_0001.safetensors "$tmp/cut"
expect_rc "bench_apply an empty delta (a base against itself)" 1 sh -c \
    "'$bin' diff $T/step_0001.safetensors $T/step_0001.safetensors -o '$tmp/none' >/dev/null && '$bench' $T/step_0001.safetensors '$tmp/none'"
grep -q "changes nothing" "$tmp/err" && pass "empty delta named" || fail "empty delta message: $(cat "$tmp/err")"
expect_rc "bench_apply --help" 0 "$bench" --help
expect_rc "bench_apply without a delta" 2 "$bench" $T/step_0001.safetensors
expect_rc "bench_apply --reps 0" 2 "$bench" --reps 0 $T/step_0001.safetensors "$tmp/d.packed"
expect_rc "bench_apply --threads x" 2 "$bench" --threads x $T/step_0001.safetensors "$tmp/d.packed"
expect_rc "bench_apply --threads 17" 2 "$bench" --threads 17 $T/step_0001.safetensors "$tmp/d.packed"
expect_rc "bench_apply an unknown option" 2 "$bench" --fast $T/step_0001.safetensors "$tmp/d.packed"
expect_rc "bench_apply a missing base" 1 "$bench" "$tmp/nope" "$tmp/d.packed"

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
