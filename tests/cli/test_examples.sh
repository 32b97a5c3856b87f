#!/usr/bin/env bash
# The programs under examples/ that show how to vendor wsync, run as a user
# would: trainer.c publishes into a directory store, engine.c follows it
# (after the trainer has finished, and while it publishes), and each step the
# engine reaches holds the state digest the trainer printed for it; direct.c
# writes from one process into another over the one-host fabric.
# usage: tests/cli/test_examples.sh build/example_trainer build/example_engine build/example_direct
set -u
cd "$(dirname "$0")/../.."
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
trainer=$(abs "${1:-build/example_trainer}")
engine=$(abs "${2:-build/example_engine}")
direct=$(abs "${3:-build/example_direct}")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
check() { # name, command...: passes when the command succeeds
    local name=$1; shift
    if "$@" >/dev/null 2>&1; then pass "$name"; else fail "$name"; fi
}
expect_rc() { # name, expected rc, command...: stdout in $tmp/out, stderr in $tmp/err
    local name=$1 want=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ $rc -eq "$want" ]; then pass "$name"; else fail "$name: exit $rc, wanted $want"; head -n 5 "$tmp/err"; fi
}
grep_out() { # name, pattern, file
    if grep -q -e "$2" "$3"; then pass "$1"; else fail "$1: no '$2' in: $(head -c 600 "$3")"; fi
}
# The state digest the trainer printed for a step (file, step).
trainer_state() { sed -n "s/^trainer: step $2 .*, state \([0-9a-f]\{16\}\), .*/\1/p" "$1"; }
# name, trainer's output, engine's output, step: the engine reached exactly
# that step and holds the bits the trainer published for it
same_state() {
    local name=$1 want got
    want=$(trainer_state "$2" "$4")
    got=$(sed -n "s/^engine: reached step $4, state \([0-9a-f]\{16\}\)$/\1/p" "$3")
    if [ -n "$want" ] && [ "$got" = "$want" ]; then pass "$name"
    else fail "$name: engine '$(grep 'reached' "$3")', trainer's state for step $4 '$want'"; fi
}

# ---- usage errors exit 2 ----
expect_rc "trainer without arguments" 2 "$trainer"
expect_rc "trainer 0 steps" 2 "$trainer" "$tmp/u" 0
expect_rc "trainer bad SLEEP_MS" 2 "$trainer" "$tmp/u" 3 x
expect_rc "engine without arguments" 2 "$engine"
expect_rc "engine bad STEP" 2 "$engine" "$tmp/u" 3x
expect_rc "engine TIMEOUT_S 0" 2 "$engine" "$tmp/u" 3 0
expect_rc "direct unknown mode" 2 "$direct" rdma

# ---- the trainer: 25 steps, an anchor at 1 and 21, deltas of about 2% ----
expect_rc "trainer publishes 25 steps" 0 "$trainer" "$tmp/s1" 25
cp "$tmp/out" "$tmp/t1"
n=$(grep -c '^trainer: step [0-9]* ' "$tmp/t1")
if [ "$n" = 25 ]; then pass "trainer prints one line per step"; else fail "trainer printed $n step lines, wanted 25"; fi
grep_out "step 1 is an anchor" '^trainer: step 1 anchor, 49216 elements' "$tmp/t1"
grep_out "step 2 is a delta from 1" '^trainer: step 2 delta from 1, ' "$tmp/t1"
grep_out "step 21 is a delta and an anchor" '^trainer: step 21 delta from 20, .* and an anchor' "$tmp/t1"
if awk '/ delta from / { split($0, a, " of "); c = a[1]; sub(/.*, /, "", c);
        e = a[2] + 0; if (c / e < 0.01 || c / e > 0.03) bad = 1; n++ }
        END { exit !(n == 24 && !bad) }' "$tmp/t1"; then pass "each delta changes 1-3% of the elements"
else fail "each delta changes 1-3% of the elements: $(grep 'step 2 ' "$tmp/t1")"; fi
check "the store holds HEAD, anchors and deltas as the chain names them" \
    test -f "$tmp/s1/HEAD" -a -f "$tmp/s1/anchors/step_000001.safetensors" \
    -a -f "$tmp/s1/anchors/step_000021.safetensors" -a -f "$tmp/s1/deltas/step_000025.safetensors"
expect_rc "a second trainer on the same store is refused (steps follow HEAD)" 1 "$trainer" "$tmp/s1" 3
grep_out "the refusal names HEAD's step" 'not after HEAD' "$tmp/err"
a=$(trainer_state "$tmp/t1" 7)
expect_rc "trainer is deterministic" 0 "$trainer" "$tmp/s1b" 7
b=$(trainer_state "$tmp/out" 7)
if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "two runs publish the same step 7"; else fail "step 7: '$a' then '$b'"; fi

# ---- the engine after the trainer: the newest anchor and the deltas after it ----
expect_rc "engine reaches step 25" 0 "$engine" "$tmp/s1" 25 30
cp "$tmp/out" "$tmp/e1"
same_state "engine at step 25 holds the trainer's step 25" "$tmp/t1" "$tmp/e1" 25
grep_out "engine took anchor 21 and deltas 22..25" '^engine: serving step 25 (anchor 21 + deltas 22..25, ' "$tmp/e1"
grep_out "engine says it caught up with HEAD" 'caught up with HEAD at step 25)' "$tmp/e1"
expect_rc "engine asked for step 10 serves the newest, 25" 0 "$engine" "$tmp/s1" 10 30
same_state "engine asked for 10 holds the trainer's step 25" "$tmp/t1" "$tmp/out" 25
expect_rc "engine times out on a step not published" 1 "$engine" "$tmp/s1" 26 1
grep_out "the timeout says what it serves" 'no step 26 after 1 s: serving step 25, HEAD at step 25' "$tmp/err"
expect_rc "engine times out on an empty store" 1 "$engine" "$tmp/empty" 1 1
grep_out "the timeout says there is no chain" 'nothing served yet, no chain found' "$tmp/err"

# ---- the engine while the trainer publishes: started first, on no store yet ----
"$engine" "$tmp/s2" 15 60 >"$tmp/e2" 2>"$tmp/e2.err" &
epid=$!
sleep 0.3
expect_rc "trainer publishes 15 steps, 50 ms apart" 0 "$trainer" "$tmp/s2" 15 50
cp "$tmp/out" "$tmp/t2"
wait "$epid"; rc=$?
if [ $rc -eq 0 ]; then pass "engine following the trainer reaches step 15"
else fail "engine following the trainer: exit $rc"; head -n 5 "$tmp/e2.err"; fi
same_state "engine following the trainer holds its step 15" "$tmp/t2" "$tmp/e2" 15
n=$(grep -c '^engine: serving step ' "$tmp/e2")
if [ "$n" -ge 2 ]; then pass "engine served steps as they came ($n applies)"
else fail "engine applied $n times while the trainer published 15 steps: $(cat "$tmp/e2")"; fi
grep_out "engine's first step is the anchor" '^engine: serving step [0-9]* (anchor 1' "$tmp/e2"
if awk '/^engine: serving step / { if ($4 + 0 <= last) exit 1; last = $4 + 0 } END { exit last != 15 }' "$tmp/e2"
then pass "engine's steps only move forward, to 15"; else fail "engine's steps: $(grep serving "$tmp/e2")"; fi

# ---- direct: one process writes into another's memory ----
expect_rc "direct (auto) delivers every byte" 0 "$direct"
grep_out "direct's receiver checked every byte" '^direct: receiver: 4194304 bytes of step 7 in place, every one as sent' "$tmp/out"
grep_out "direct says ok" '^direct: ok$' "$tmp/out"
mode=$(sed -n 's/^direct: one-host fabric, mode \([A-Z]*\) .*/\1/p' "$tmp/out")
if [ "$mode" = CMA ] || [ "$mode" = SHM ]; then pass "direct names its mode"; else fail "direct named no mode"; fi
echo "test_examples: direct's auto mode ran ${mode:-nothing} here"
expect_rc "direct (shm) delivers every byte" 0 "$direct" shm
grep_out "direct (shm) ran SHM" '^direct: one-host fabric, mode SHM ' "$tmp/out"
if [ "$mode" = CMA ]; then
    expect_rc "direct (cma) delivers every byte" 0 "$direct" cma
    grep_out "direct (cma) ran CMA" '^direct: one-host fabric, mode CMA ' "$tmp/out"
else # auto fell back: process_vm_writev is refused here, and forced CMA says so
    expect_rc "direct (cma) fails where CMA is refused" 1 "$direct" cma
fi

echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
