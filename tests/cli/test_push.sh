#!/usr/bin/env bash
# The direct path with real processes: `wsync push-demo` runs a controller,
# trainer and inference processes on this machine over the one-host (CMA,
# SHM) and TCP fabrics; every inference rank checks every byte of every step
# on its own. Then the failures: a rank killed mid-step, a trainer that
# stops, each must fail the step within the timeout while the others keep
# their last complete step.
# usage: tests/cli/test_push.sh path/to/wsync
set -u
cd "$(dirname "$0")/../.."
bin=${1:-build/wsync}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
run() { # name, expected rc, command...: output in $tmp/out, seconds in $secs
    local name=$1 want=$2; shift 2
    local t0=$(date +%s%N)
    timeout 120 "$@" >"$tmp/out" 2>&1; rc=$?
    secs=$(( ($(date +%s%N) - t0) / 1000000000 ))
    if [ $rc -eq "$want" ]; then pass "$name: exit $want"; else fail "$name: exit $rc, wanted $want"; tail -n 12 "$tmp/out"; fi
}
has() { # name, fixed string expected in $tmp/out
    if grep -qF -- "$2" "$tmp/out"; then pass "$1"; else fail "$1: no '$2' in the output"; tail -n 12 "$tmp/out"; fi
}
has_re() { # name, extended regular expression expected in $tmp/out
    if grep -qE -- "$2" "$tmp/out"; then pass "$1"; else fail "$1: nothing matches '$2' in the output"; tail -n 12 "$tmp/out"; fi
}
hasnt() {
    if grep -qF -- "$2" "$tmp/out"; then fail "$1: '$2' in the output"; tail -n 12 "$tmp/out"; else pass "$1"; fi
}

# ---- bit-exact transfers, 4 trainers to 2 inference ranks ----
for b in cma shm tcp; do
    run "$b 4->2" 0 "$bin" push-demo --backend $b --trainers 4 --inference 2 --steps 4
    has "$b: every step committed" "4 of 4 steps committed, every inference rank bit-exact at every step"
    has "$b: inference rank 0 verified every step" "inference rank 0: version 4, 4 steps verified bit-exact"
    has "$b: inference rank 1 verified every step" "inference rank 1: version 4, 4 steps verified bit-exact"
    has "$b: row shards make 472 writes per step" "plan: 472 transfers"
    has "$b: the trainers ran the plan's tasks" "executed tasks match the plan: 472 tasks at every full step"
done
run "replicas: each trainer holds the whole model" 0 "$bin" push-demo --layout replica --steps 2
# the planner's schedule: one task (one write) per tensor copy, 59 x 2
has "replicas: one write per tensor copy (the plan's tasks)" "plan: 118 transfers"
has "replicas: the planner's schedule" "schedule: planner, 1 mesh group, plan digest"
has "replicas: every step committed" "2 of 2 steps committed"
has "replicas: the trainers ran the plan's tasks" "executed tasks match the plan: 118 tasks at every full step"
# the byte balance of whole tensors over 4 trainers stays within 1.5x
python3 - "$tmp/out" <<'PY' && pass "replicas: balanced bytes" || fail "replicas: balanced bytes"
import re, sys
m = re.search(r'per trainer ([\d.]+) MB max, ([\d.]+) MB min', open(sys.argv[1]).read())
assert m and float(m.group(1)) <= 1.5 * float(m.group(2)), m and m.groups()
PY
run "replicas, greedy schedule" 0 "$bin" push-demo --layout replica --steps 2 --schedule greedy
# 118 tensor copies, merged where consecutive tensors go to the same trainer
has "replicas greedy: one write per run of tensors and receiver" "plan: 58 transfers"
has "replicas greedy: named" "schedule: greedy (least loaded holder)"
has "replicas greedy: the trainers ran its tasks" "executed tasks match the plan: 58 tasks at every full step"
run "one trainer, three receivers" 0 "$bin" push-demo --trainers 1 --inference 3 --steps 2
has "1->3: every rank verified" "inference rank 2: version 2, 2 steps verified bit-exact"
run "8 trainers to 4 inference ranks over shm" 0 \
    "$bin" push-demo --trainers 8 --inference 4 --steps 2 --backend shm
has "8->4: every step committed" "2 of 2 steps committed"

# ---- resharding, fusing, fp8: checked by the ranks, and independently ----
for b in cma tcp; do
    rm -rf "$tmp/d" && mkdir "$tmp/d"
    run "$b: tensor-parallel slices, fused" 0 "$bin" push-demo --backend $b --reshard --steps 3 --dump "$tmp/d"
    has "$b reshard: every step committed" "3 of 3 steps committed, every inference rank bit-exact at every step"
    has "$b reshard: the trainers ran the plan's tasks" "executed tasks match the plan"
    python3 tests/cli/push_check.py "$tmp/d" >"$tmp/check" 2>&1 && pass "$b reshard: push_check.py agrees" \
        || { fail "$b reshard: push_check.py"; tail -n 5 "$tmp/check"; }
    rm -rf "$tmp/d" && mkdir "$tmp/d"
    run "$b: fp8 projections" 0 "$bin" push-demo --backend $b --fp8 --block 32 --layout replica --steps 2 \
        --watermark-mb 1 --dump "$tmp/d"
    has "$b fp8: every step committed" "2 of 2 steps committed, every inference rank bit-exact at every step"
    has "$b fp8: the trainers ran the plan's tasks" "executed tasks match the plan"
    python3 tests/cli/push_check.py "$tmp/d" >"$tmp/check" 2>&1 && pass "$b fp8: push_check.py agrees" \
        || { fail "$b fp8: push_check.py"; tail -n 5 "$tmp/check"; }
done
rm -rf "$tmp/d" && mkdir "$tmp/d"
run "fp8, one scale per part, 3 receivers" 0 "$bin" push-demo --fp8 --block 0 --layout replica --inference 3 \
    --trainers 2 --steps 2 --dump "$tmp/d"
python3 tests/cli/push_check.py "$tmp/d" >"$tmp/check" 2>&1 && pass "fp8 block 0: push_check.py agrees" \
    || { fail "fp8 block 0: push_check.py"; tail -n 5 "$tmp/check"; }
# the checker is not vacuous: one flipped fp8 code and one flipped scale are found
python3 - "$tmp/d" <<'PY'
import json, sys
d = sys.argv[1]
lay = json.load(open(d + '/inference_1.json'))
f8 = [p for p in lay['parts'] if p['dtype'] == 'f8_e4m3']
b = bytearray(open(d + '/inference_1.bin', 'rb').read())
b[f8[0]['offset'] + 3] ^= 0x01
b[f8[1]['scale_offset']] ^= 0x01
open(d + '/inference_1.bin', 'wb').write(b)
PY
python3 tests/cli/push_check.py "$tmp/d" >"$tmp/check" 2>&1
[ $? -eq 1 ] && grep -q "byte 3 differs" "$tmp/check" && grep -q "scales differ" "$tmp/check" \
    && pass "push_check.py finds a flipped code and a flipped scale" || { fail "push_check.py misses corruption"; cat "$tmp/check"; }
# mesh groups: the trainers' MLP weights after a barrier through the controller
for b in cma tcp; do
    rm -rf "$tmp/d" && mkdir "$tmp/d"
    run "$b: two mesh groups, resharded" 0 "$bin" push-demo --backend $b --mesh-groups --reshard --steps 3 --dump "$tmp/d"
    has "$b mesh groups: every step committed" "3 of 3 steps committed, every inference rank bit-exact at every step"
    has "$b mesh groups: the trainers ran the plan's tasks" "executed tasks match the plan"
    python3 tests/cli/push_check.py "$tmp/d" >"$tmp/check" 2>&1 && pass "$b mesh groups: push_check.py agrees" \
        || { fail "$b mesh groups: push_check.py"; tail -n 5 "$tmp/check"; }
done
run "mesh groups: a trainer killed mid-step" 1 "$bin" push-demo --mesh-groups --kill trainer:3@2 --timeout-ms 2000
has "mesh groups: the dead trainer is named" "trainer rank 3 went away"
has "mesh groups: survivors keep step 1" "inference rank 0: version 1, 1 steps verified bit-exact"
hasnt "mesh groups: no process hangs" "did not end in time"

# ---- fp8 from row shards: tiles across shard boundaries gathered between trainers ----
# A 32-row tile whose rows two or more trainers hold is gathered into the
# inbox of its first row's holder (a gather phase, a barrier), quantized
# there and written: every fp8 value and scale checked by the receivers and
# again by push_check.py from the dump, tiles across boundaries included.
for b in cma shm tcp; do
    rm -rf "$tmp/d" && mkdir "$tmp/d"
    run "$b: fp8 from row shards" 0 "$bin" push-demo --backend $b --fp8 --block 32 --steps 3 --dump "$tmp/d"
    has "$b fp8 row shards: every step committed" "3 of 3 steps committed, every inference rank bit-exact at every step"
    has "$b fp8 row shards: one mesh group after a gather phase" "schedule: planner, 1 mesh group (each after a gather phase)"
    grep -qE "^gather: [1-9][0-9]* transfers" "$tmp/out" && pass "$b fp8 row shards: tiles gathered between trainers" \
        || fail "$b fp8 row shards: no gather between trainers"
    has "$b fp8 row shards: the trainers ran the plan's tasks" "executed tasks match the plan: 408 tasks at every full step"
    python3 tests/cli/push_check.py "$tmp/d" >"$tmp/check" 2>&1 && pass "$b fp8 row shards: push_check.py agrees" \
        || { fail "$b fp8 row shards: push_check.py"; tail -n 5 "$tmp/check"; }
done
rm -rf "$tmp/d" && mkdir "$tmp/d"
run "fp8 row shards, 5 -> 3, 16-row tiles, two mesh groups" 0 "$bin" push-demo --fp8 --block 16 --trainers 5 --inference 3 \
    --mesh-groups --steps 2 --dump "$tmp/d"
has "fp8 row shards 5->3: committed" "2 of 2 steps committed, every inference rank bit-exact at every step"
has "fp8 row shards 5->3: two mesh groups, each after a gather phase" "2 mesh groups (each after a gather phase)"
python3 tests/cli/push_check.py "$tmp/d" >"$tmp/check" 2>&1 && pass "fp8 row shards 5->3: push_check.py agrees" \
    || { fail "fp8 row shards 5->3: push_check.py"; tail -n 5 "$tmp/check"; }
run "fp8 row shards, partial steps" 0 "$bin" push-demo --backend tcp --fp8 --block 32 --partial 0.3 --steps 4
has "fp8 row shards partial: committed" "4 of 4 steps committed, every inference rank bit-exact at every step"
has "fp8 row shards partial: checked against the plan" "and at every partial step the tasks of the tensors the trainers named"
for b in cma tcp; do
    run "$b: a trainer killed in the middle of the gather" 1 "$bin" push-demo --backend $b --fp8 --block 32 --steps 3 \
        --kill trainer:1@2 --timeout-ms 2000
    has "$b gather kill: the dead trainer is named" "trainer rank 1 went away"
    has "$b gather kill: inference 0 keeps step 1" "inference rank 0: version 1, 1 steps verified bit-exact"
    has "$b gather kill: inference 1 keeps step 1" "inference rank 1: version 1, 1 steps verified bit-exact"
    hasnt "$b gather kill: no process hangs" "did not end in time"
    [ "$secs" -le 10 ] && pass "$b gather kill: fails within the timeout ($secs s)" || fail "$b gather kill: took $secs s"
    run "$b: a trainer stalled in the middle of the gather" 1 "$bin" push-demo --backend $b --fp8 --block 32 --steps 3 \
        --stall-mid trainer:2@2 --timeout-ms 1500
    # named by the step's timeout, or beside a writer whose flush into its inbox went unacknowledged first;
    # a writer blocked on its inbox reaches no barrier either, and is named beside it
    has_re "$b gather stall: the stalled trainer is named" \
        "(trainer rank [0-9]+, )*trainer rank 2(, trainer rank [0-9]+)* reached no barrier of mesh group 0"
    has "$b gather stall: inference 0 keeps step 1" "inference rank 0: version 1, 1 steps verified bit-exact"
    hasnt "$b gather stall: no process hangs" "did not end in time"
    [ "$secs" -le 10 ] && pass "$b gather stall: fails within the timeout ($secs s)" || fail "$b gather stall: took $secs s"
done
run "fp8 row shards, one scale per part" 1 "$bin" push-demo --fp8 --block 0 --steps 1
has "fp8 row shards, block 0: says why" "wants one fp8 scale for all its rows (block 0), and the plan cuts them"
run "fp8 row shards, greedy schedule" 1 "$bin" push-demo --fp8 --schedule greedy --steps 1
has "greedy cannot gather: says why" "no trainer holds all of them"

# ---- pacing: trainers keep the plan's start times (at a slow clock here) ----
# At 2 Gb/s the plan's last starts are ~245 ms into a step that takes ~10 ms
# unpaced: a full step below that span is a trainer that did not pace, which
# push-demo reports (NOT PACED) and the test reads back from the table too.
# Partial steps are not paced (the plan's times are the whole plan's).
for b in cma tcp; do
    rm -rf "$tmp/d" && mkdir "$tmp/d"
    run "$b: paced, two mesh groups, resharded, partial" 0 "$bin" push-demo --backend $b --pace 2 --mesh-groups \
        --reshard --partial 0.2 --steps 4 --dump "$tmp/d"
    has "$b paced: every step committed" "4 of 4 steps committed, every inference rank bit-exact at every step"
    has "$b paced: the planned span" "pacing: planned starts at 2 Gb/s; a full step lasts at least"
    hasnt "$b paced: every full step kept the planned starts" "NOT PACED"
    has "$b paced: the trainers ran the plan's tasks" "executed tasks match the plan"
    python3 - "$tmp/out" <<'PY' && pass "$b paced: full steps last the span, partial steps are not held" \
        || fail "$b paced: full steps last the span, partial steps are not held"
import re, sys
t = open(sys.argv[1]).read()
span = float(re.search(r'lasts at least ([\d.]+) ms', t).group(1))
rows = re.findall(r'^ +(\d+) +([\d.]+) .* tasks( \(partial\))?$', t, re.M)
assert span > 100 and len(rows) == 4, (span, rows)
for step, ms, part in rows:
    assert (float(ms) < span / 2) if part else (float(ms) >= span), (step, ms, part, span)
PY
    python3 tests/cli/push_check.py "$tmp/d" >"$tmp/check" 2>&1 && pass "$b paced: push_check.py agrees" \
        || { fail "$b paced: push_check.py"; tail -n 5 "$tmp/check"; }
done
run "--pace 0" 2 "$bin" push-demo --pace 0

# ---- partial steps: even steps move 10% of the tensors, named by the trainers ----
# Trainers fill every tensor with the step's data and name only the chosen
# ones: each inference rank finds the named tensors at the new step's bytes
# and every other byte at the step before (never written).
for b in cma shm tcp; do
    run "$b: partial steps" 0 "$bin" push-demo --backend $b --partial 0.1 --steps 4
    has "$b partial: every step committed" "4 of 4 steps committed, every inference rank bit-exact at every step"
    has "$b partial: a partial step runs the tasks of 6 tensors" "48 tasks (partial)"
    grep -qE "^ +3 .* 472 tasks$" "$tmp/out" && pass "$b partial: step 3 runs the whole plan" \
        || fail "$b partial: step 3 runs the whole plan"
    has "$b partial: checked against the plan" \
        "executed tasks match the plan: 472 tasks at every full step, and at every partial step the tasks of the tensors the trainers named"
    has "$b partial: measured" "partial: 2 steps of 10% of the tensors"
    has "$b partial: inference rank 1 verified every step" "inference rank 1: version 4, 4 steps verified bit-exact"
done
rm -rf "$tmp/d" && mkdir "$tmp/d"
run "partial, fp8, resharded, replicas" 0 "$bin" push-demo --partial 0.25 --fp8 --block 32 --layout replica --steps 2 \
    --dump "$tmp/d"
has "partial fp8: every step committed" "2 of 2 steps committed, every inference rank bit-exact at every step"
python3 - "$tmp/d" <<'PY' && pass "partial fp8: the dump holds parts of steps 1 and 2" || fail "partial fp8: parts of steps 1 and 2"
import json, sys
steps = {p['step'] for p in json.load(open(sys.argv[1] + '/inference_0.json'))['parts']}
assert steps == {1, 2}, steps
PY
python3 tests/cli/push_check.py "$tmp/d" >"$tmp/check" 2>&1 && pass "partial fp8: push_check.py agrees" \
    || { fail "partial fp8: push_check.py"; tail -n 5 "$tmp/check"; }
run "partial, two mesh groups, resharded" 0 "$bin" push-demo --partial 0.3 --mesh-groups --reshard --steps 4 --backend tcp
has "partial mesh groups: every step committed" "4 of 4 steps committed, every inference rank bit-exact at every step"
for b in cma tcp; do
    run "$b: a trainer killed in the middle of a partial step" 1 "$bin" push-demo --backend $b --partial 0.5 --steps 5 \
        --kill trainer:2@4 --timeout-ms 2000
    has "$b partial kill: the dead trainer is named" "trainer rank 2 went away"
    has "$b partial kill: inference 0 keeps step 3" "inference rank 0: version 3, 3 steps verified bit-exact"
    has "$b partial kill: inference 1 keeps step 3" "inference rank 1: version 3, 3 steps verified bit-exact"
    has "$b partial kill: steps 1 to 3 committed" "3 of 5 steps committed"
    hasnt "$b partial kill: no process hangs" "did not end in time"
    run "$b: an inference rank killed in the middle of a partial step" 1 "$bin" push-demo --backend $b --partial 0.1 \
        --steps 3 --kill inference:1@2 --timeout-ms 2000
    has "$b partial kill inference: the step fails" "FAILED: step 2:"
    grep -qE "inference rank 0: version [12], [12] steps verified bit-exact" "$tmp/out" \
        && pass "$b partial kill inference: the survivor keeps a verified step" \
        || fail "$b partial kill inference: the survivor keeps a verified step"
    hasnt "$b partial kill inference: the survivor is never wrong" "MISMATCH"
done

# ---- failures ----
for b in cma tcp; do
    run "$b: an inference rank killed mid-step" 1 "$bin" push-demo --backend $b --kill inference:1@2 --timeout-ms 2000
    has "$b: the step fails" "FAILED: step 2:"
    has "$b: the dead rank is named" "inference rank 1"
    has "$b: the killed rank is reported as killed" "inference rank 1: killed, as asked"
    has "$b: step 1 stayed committed" "1 of 3 steps committed"
    hasnt "$b: the survivor is never wrong" "MISMATCH"
    hasnt "$b: no process hangs" "did not end in time"
    grep -qE "inference rank 0: version [12], [12] steps verified bit-exact" "$tmp/out" \
        && pass "$b: the survivor keeps a verified step" || fail "$b: the survivor keeps a verified step"
    [ "$secs" -le 10 ] && pass "$b: fails within the timeout ($secs s)" || fail "$b: took $secs s"

    run "$b: a trainer killed mid-step" 1 "$bin" push-demo --backend $b --kill trainer:2@2 --timeout-ms 2000
    has "$b: the dead trainer is named" "trainer rank 2 went away"
    has "$b: survivors keep step 1 (0)" "inference rank 0: version 1, 1 steps verified bit-exact"
    has "$b: survivors keep step 1 (1)" "inference rank 1: version 1, 1 steps verified bit-exact"
    [ "$secs" -le 10 ] && pass "$b: fails within the timeout ($secs s)" || fail "$b: took $secs s"
done
run "a trainer that stops before DONE" 1 "$bin" push-demo --stall trainer:0@3 --timeout-ms 1000
has "stall: the timeout is named" "trainer rank 0 sent no DONE within 1000 ms"
has "stall: step 2 stayed committed" "2 of 3 steps committed"
has "stall: survivors keep step 2" "inference rank 1: version 2, 2 steps verified bit-exact"
[ "$secs" -le 8 ] && pass "stall: fails within the timeout ($secs s)" || fail "stall: took $secs s"

# ---- the check can fail: --corrupt flips a byte of an inference rank's memory before its check ----
# Each run is one of the passing runs above with --corrupt added: the rank
# flips the middle byte of its largest part (its largest fp8 part with
# --fp8) after the step's writes (a sparse step: after the scatter), so
# its check must name that part and byte, fail the step, keep the rank at
# the step before, and make push-demo exit 1.
corrupt_case() { # name, rank, step, "bytes" or "fp8 bytes", push-demo arguments, --steps N first
    local name=$1 r=$2 s=$3 what=$4 line byte dst
    shift 4
    run "$name: inference rank $r corrupted at step $s" 1 "$bin" push-demo "$@" --corrupt inference:$r@$s --timeout-ms 2000
    line=$(grep -oE "inference rank $r flipped (bf16|fp8) byte [0-9]+ of [^ ]+ \(memory byte [0-9]+\) at step $s\$" "$tmp/out")
    [ -n "$line" ] && pass "$name: the flip is reported" || { fail "$name: no flip reported"; tail -n 12 "$tmp/out"; }
    [ "$what" = "fp8 bytes" ] && has "$name: an e4m3 byte" "inference rank $r flipped fp8 byte"
    byte=$(sed -E 's/.* byte ([0-9]+) of .*/\1/' <<<"$line"); dst=$(sed -E 's/.* of ([^ ]+) \(memory.*/\1/' <<<"$line")
    has "$name: the step fails, the check names the part" \
        "FAILED: step $s: inference rank $r failed: $dst ("
    has_re "$name: the check names the byte and the step" "FAILED: step $s: .*: $what differ at byte $byte at step $s\$"
    has "$name: the rank keeps the step before" \
        "inference rank $r: version $((s - 1)), $((s - 1)) steps verified bit-exact, MISMATCH"
    has "$name: the steps before committed" "$((s - 1)) of $2 steps committed"
    hasnt "$name: no process hangs" "did not end in time"
    grep -F "MISMATCH" "$tmp/out" | grep -vqF "inference rank $r:" \
        && fail "$name: another rank has a mismatch" || pass "$name: only the corrupted rank has a mismatch"
}
# dense: the first test's run (4 -> 2, cma, 4 steps)
corrupt_case "corrupt dense" 1 2 "bytes" --steps 4 --backend cma --trainers 4 --inference 2
# sparse: "sparse cma, resharded" (dense steps 1 and 4), at sparse step 3
corrupt_case "corrupt sparse" 0 3 "bytes" --steps 5 --sparse --backend cma --reshard --dense-every 3
has "corrupt sparse: step 2 went sparse before it" "receiver regions 8.0 sparse, 0.0 dense"
# sparse fp8: "sparse fp8 cma, resharded", at sparse step 3
corrupt_case "corrupt sparse fp8" 1 3 "fp8 bytes" --steps 4 --sparse --fp8 --block 32 --layout replica --trainers 2 \
    --backend cma
# dense fp8 from row shards (gathered tiles), over tcp
corrupt_case "corrupt fp8 row shards tcp" 0 2 "fp8 bytes" --steps 3 --fp8 --block 32 --backend tcp
run "--corrupt of a trainer" 2 "$bin" push-demo --corrupt trainer:0@1
has "--corrupt of a trainer: says what it takes" "--corrupt takes inference:R@S"
run "--corrupt of a rank that does not exist" 2 "$bin" push-demo --inference 2 --corrupt inference:2@1
run "--corrupt after the last step" 2 "$bin" push-demo --steps 3 --corrupt inference:0@4

# ---- --bench: the simulator's prediction for the plan run, constants measured in the run ----
run "--bench, 3 steps, two mesh groups" 0 "$bin" push-demo --steps 3 --bench --mesh-groups
has "bench: the constants" "bench: measured constants:"
python3 - "$tmp/out" <<'PY' && pass "bench: measured over predicted, positive and consistent" || fail "bench: the prediction line"
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'step measured ([\d.]+) ms mean .*?, ([\d.]+) ms best; predicted ([\d.]+) ms .*'
              r'measured/predicted ([\d.]+) mean, ([\d.]+) best', t)
mean, best, pred, rm, rb = map(float, m.groups())
assert pred > 0 and abs(rm - mean / pred) < 0.01 * rm and abs(rb - best / pred) < 0.01 * rb, m.groups()
PY
# each full step from the second on against the sender rate probed right
# after it: steps 2 and 3; the best step's ratio is at most the mean's
# (the mean is the steps' times over their predictions, summed)
python3 - "$tmp/out" <<'PY' && pass "bench: each step against its own probe" || fail "bench: the per-step line"
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'each step against the sender rate probed right after it \(([\d.]+)-([\d.]+) GB/s per sender, '
              r'(\d+) steps\): predicted ([\d.]+) ms mean; measured/predicted ([\d.]+) mean, ([\d.]+) best', t)
lo, hi, n, pred, rm, rb = map(float, m.groups())
assert 0 < lo <= hi and n == 2 and pred > 0 and 0 < rb <= rm + 0.001, m.groups()
PY
has "bench: the throughput against process_vm_writev" "/ one process_vm_writev ="

# ---- the job key: push-demo's own random key on a non-loopback address ----
run "--bind 0.0.0.0: under push-demo's own job key" 0 "$bin" push-demo --bind 0.0.0.0 --backend tcp --steps 2
has "--bind 0.0.0.0: both steps committed" "2 of 2 steps committed"
run "--bind 0.0.0.0 --insecure: no key, on a trusted network" 0 "$bin" push-demo --bind 0.0.0.0 --backend tcp --steps 2 --insecure
has "--insecure: both steps committed" "2 of 2 steps committed"

# ---- sparse steps: only the changes, into staging, scattered at COMMIT ----
for b in cma shm tcp; do
    run "sparse $b, resharded" 0 "$bin" push-demo --sparse --backend $b --reshard --steps 5 --dense-every 3
    has "sparse $b: every step committed bit-exact" "5 of 5 steps committed, every inference rank bit-exact at every step"
    has "sparse $b: the trainers ran the plan's tasks" "executed tasks match the plan: 336 tasks at every full step"
    # steps 2, 3 and 5 sparse (1 and 4 dense): every receiver region sparse,
    # about 1.6% of the elements, each change scattered by a receiver
    has_re "sparse $b: three sparse steps, 1.5-1.7% changed" "sparse: 3 sparse steps: 1\.(5|6)[0-9]% of the elements"
    has "sparse $b: every receiver region sparse" "receiver regions 8.0 sparse, 0.0 dense (0.0 overflowed) a step"
    python3 - "$tmp/out" <<'PY' && pass "sparse $b: as many scattered as sent, staged bytes under a tenth" || fail "sparse $b: scattered and staged"
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'\((\d+) changes a step\), ([\d.]+) MB staged and ([\d.]+) MB dense a step of ([\d.]+) MB;.* (\d+) changes scattered', t)
assert m, t[-2000:]
sent, staged, dense, total, scat = int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4)), int(m.group(5))
assert sent == scat and sent > 0, (sent, scat)
assert dense == 0 and 0 < staged < total / 10, (staged, dense, total)
PY
done
# fp8 receivers, tensor-parallel slices and fused entries from whole-model
# trainers (no tile gathered): per tile nothing, the moved e4m3 bytes, or
# the whole tile and its scale; every byte and scale checked at every step
for b in cma shm tcp; do
    run "sparse fp8 $b, resharded" 0 "$bin" push-demo --sparse --fp8 --block 32 --layout replica --trainers 2 \
        --backend $b --steps 4
    has "sparse fp8 $b: every step committed bit-exact" "4 of 4 steps committed, every inference rank bit-exact at every step"
    has "sparse fp8 $b: every receiver region sparse" "receiver regions 4.0 sparse, 0.0 dense (0.0 overflowed) a step"
    python3 - "$tmp/out" <<'PY' && pass "sparse fp8 $b: moved bytes and rescaled tiles sent, staged bytes under a tenth" || fail "sparse fp8 $b: the fp8 tiles"
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'\((\d+) changes a step\), ([\d.]+) MB staged and ([\d.]+) MB dense a step of ([\d.]+) MB;.* (\d+) changes scattered', t)
f = re.search(r'fp8: (\d+) tiles compared a step: [\d.]+% unchanged, ([\d.]+)% bytes moved under the same scale, '
              r'([\d.]+)% rescaled \(sent whole\); ([\d.]+)% of ([\d.]+) MB fp8 bytes sent; fp8 transfers quantized '
              r'from a gather inbox: \d+ sparse, (\d+) dense', t)
assert m and f, t[-2000:]
sent, staged, dense, total, scat = int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4)), int(m.group(5))
assert sent == scat and sent > 0, (sent, scat)
assert dense == 0 and 0 < staged < total / 10, (staged, dense, total)
tiles, moved, rescaled, frac, fbytes, gathered = int(f.group(1)), float(f.group(2)), float(f.group(3)), float(f.group(4)), float(f.group(5)), int(f.group(6))
assert tiles == 768 and moved > 90 and rescaled > 0 and 0 < frac < 3 and fbytes > 0.7 and gathered == 0, f.groups()
PY
done
# row shards: the tiles across shard boundaries gather into an inbox during
# the push; the fp8 transfers quantized from it are packed after the gather's
# barrier and go sparse like the rest: the dense bytes of a sparse step are
# the gather's own (bf16 rows between trainers) and a few small regions';
# after a dense step (4) sparse again
for b in cma shm tcp; do
    run "sparse fp8 $b: row shards, gathered tiles sparse" 0 "$bin" push-demo --sparse --fp8 --trainers 3 --steps 5 \
        --dense-every 3 --backend $b
    has "sparse fp8 row shards $b: every step committed bit-exact" "5 of 5 steps committed, every inference rank bit-exact at every step"
    has "sparse fp8 row shards $b: no gathered transfer dense" " sparse, 0 dense; quantize and compare"
    python3 - "$tmp/out" <<'PY' && pass "sparse fp8 row shards $b: dense bytes the gather's, staged under a tenth" || fail "sparse fp8 row shards $b: dense and staged bytes"
import re, sys
t = open(sys.argv[1]).read()
g = re.search(r'^gather: \d+ transfers, ([\d.]+) MB', t, re.M)
m = re.search(r'\((\d+) changes a step\), ([\d.]+) MB staged and ([\d.]+) MB dense a step of ([\d.]+) MB;.* \(([\d.]+) overflowed\) a step; (\d+) changes scattered', t)
f = re.search(r'fp8: (\d+) tiles compared a step.*gather inbox: (\d+) sparse, 0 dense', t)
assert g and m and f and int(f.group(2)) > 0, t[-2000:]
sent, staged, dense, total, over, scat = int(m.group(1)), float(m.group(2)), m.group(3), float(m.group(4)), float(m.group(5)), int(m.group(6))
assert sent == scat and sent > 0 and over == 0, (sent, scat, over)
# the small bf16 regions a few changes make dear (norms) go dense: a few KB
assert abs(float(dense) - float(g.group(1))) <= 0.02 and 0 < staged < total / 10, (staged, dense, g.group(1), total)
assert int(f.group(1)) > 0, f.group(1)
PY
done
run "sparse: a threshold nothing meets goes dense" 0 "$bin" push-demo --sparse --sparse-max 0.001 --steps 3
has "sparse-max: every step committed bit-exact" "3 of 3 steps committed, every inference rank bit-exact at every step"
has "sparse-max: every region dense, none overflowed" "receiver regions 0.0 sparse, 8.0 dense (0.0 overflowed)"
has "sparse-max: nothing scattered" " 0 changes scattered a step"
# the smallest staging (a slot of 4 KiB per trainer): the changes overflow it, so they go dense
run "sparse: staging overflow falls back to dense" 0 "$bin" push-demo --sparse --staging 0.0005 --steps 3 --backend tcp
has "overflow: every step committed bit-exact" "3 of 3 steps committed, every inference rank bit-exact at every step"
has "overflow: every region overflowed to dense" "receiver regions 0.0 sparse, 8.0 dense (8.0 overflowed)"
run "sparse: mesh groups, replicas, 2 -> 3" 0 "$bin" push-demo --sparse --mesh-groups --layout replica --trainers 2 \
    --inference 3 --steps 3
has "sparse mesh groups: every step committed bit-exact" "3 of 3 steps committed, every inference rank bit-exact at every step"
run "sparse: an inference rank killed mid-step" 1 "$bin" push-demo --sparse --kill inference:1@3 --steps 4 --timeout-ms 2000
has "sparse kill: the step fails" "FAILED: step 3:"
# the survivor may have committed step 3 before the controller saw the other go
has_re "sparse kill: the survivor keeps a verified step" "inference rank 0: version [23], [23] steps verified bit-exact"
hasnt "sparse kill: the survivor is never wrong" "MISMATCH"
# pacing: the dense steps (1 and 3) keep the plan's starts; a sparse step has one slot a receiver, no plan to pace
run "sparse: paced dense steps" 0 "$bin" push-demo --sparse --pace 5 --steps 4 --dense-every 2
has "sparse paced: every step committed bit-exact" "4 of 4 steps committed, every inference rank bit-exact at every step"
hasnt "sparse paced: the dense steps kept the plan" "NOT PACED"
run "--density without --sparse" 2 "$bin" push-demo --density 0.1
run "--sparse with --partial" 2 "$bin" push-demo --sparse --partial 0.5
run "--sparse --density 0" 2 "$bin" push-demo --sparse --density 0

# ---- usage ----
run "--help" 0 "$bin" push-demo --help
has "--help names the backends" "--backend cma|shm|tcp"
run "unknown backend" 2 "$bin" push-demo --backend rdma
run "malformed --kill" 2 "$bin" push-demo --kill trainer@2
run "--kill of a rank that does not exist" 2 "$bin" push-demo --trainers 2 --kill trainer:2@1
run "--stall of an inference rank" 2 "$bin" push-demo --stall inference:0@1
run "unknown model" 2 "$bin" push-demo --model gpt-9
run "zero trainers" 2 "$bin" push-demo --trainers 0
run "--partial 0" 2 "$bin" push-demo --partial 0
run "--partial above 1" 2 "$bin" push-demo --partial 1.5
has "--partial says what it takes" "--partial takes a fraction in (0, 1]"

echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
