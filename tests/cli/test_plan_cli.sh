#!/usr/bin/env bash
# wsync plan: exit codes, the JSON fields, and the kimi-k2 targets of issue 7
# (256 trainers -> 128 inference ranks at 400 Gb/s, 1 and 8 replicas: plans
# in under 2 s, imbalance <= 1.05 both ways, predicted <= 1.25x the bound;
# issue 25: paced, 8 replicas within 1.05x).
# usage: tests/cli/test_plan_cli.sh build/wsync
set -u
W=${1:-build/wsync}
passed=0; failed=0
ok() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
expect_rc() { # rc name cmd...
    local want=$1 name=$2; shift 2
    "$@" >/dev/null 2>&1; local rc=$?
    if [ "$rc" -eq "$want" ]; then ok "$name"; else bad "$name: exit $rc, wanted $want"; fi
}
field() { # json key -> number
    sed -E "s/.*\"$2\": ([0-9.e+-]+).*/\1/" <<<"$1"
}
expect_rc 0 "plan --help" "$W" plan --help
expect_rc 2 "plan without --model" "$W" plan --trainers 4 --inference 2
expect_rc 2 "plan unknown model" "$W" plan --model gpt-5 --trainers 4 --inference 2
expect_rc 2 "plan replicas do not divide" "$W" plan --model qwen3-0.6b --trainers 4 --inference 6 --replicas 4
expect_rc 2 "plan bad dtype" "$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --dtype fp4
expect_rc 2 "plan bad nic-gbps" "$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --nic-gbps -3
expect_rc 0 "plan row shards qwen3-0.6b fp8" "$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --shards-only --dtype fp8
expect_rc 0 "plan qwen3-0.6b text" "$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --nics-per-rank 2
a=$("$W" plan --model qwen2.5-7b --trainers 8 --inference 4 --json); b=$("$W" plan --model qwen2.5-7b --trainers 8 --inference 4 --json)
if [ "$(sed -E 's/.*"digest": "([0-9a-f]+)".*/\1/' <<<"$a")" = "$(sed -E 's/.*"digest": "([0-9a-f]+)".*/\1/' <<<"$b")" ]; then ok "plan digest equal run to run"; else bad "plan digest differs run to run"; fi
for r in 1 8; do
    j=$("$W" plan --model kimi-k2 --trainers 256 --inference 128 --nic-gbps 400 --replicas $r --json)
    if [ -z "$j" ]; then bad "kimi-k2 replicas $r: no output"; continue; fi
    for k in plan_seconds tasks imbalance bound_seconds predicted_seconds; do
        grep -q "\"$k\": " <<<"$j" && ok "kimi-k2 replicas $r: $k" || bad "kimi-k2 replicas $r: no $k"
    done
    ps=$(field "$j" plan_seconds); is=$(field "$j" imbalance_send); ir=$(field "$j" imbalance_recv)
    bo=$(field "$j" bound_seconds); pr=$(field "$j" predicted_seconds)
    # a guard against a planner gone quadratic, not a timing target (the
    # planner's speed is measured by make bench-schedule): on a quiet machine it
    # plans in under 1 s; 4 s was seen with the machine loaded ten times over
    awk -v v="$ps" 'BEGIN{exit !(v < 30)}' && ok "kimi-k2 replicas $r: plans in $ps s" || bad "kimi-k2 replicas $r: plan took $ps s"
    awk -v s="$is" -v r="$ir" 'BEGIN{exit !(s <= 1.05 && r <= 1.05)}' && ok "kimi-k2 replicas $r: imbalance" || bad "kimi-k2 replicas $r: imbalance $is / $ir"
    awk -v p="$pr" -v b="$bo" 'BEGIN{exit !(p >= b && p <= 1.25 * b)}' && ok "kimi-k2 replicas $r: predicted $pr s, bound $bo s" || bad "kimi-k2 replicas $r: predicted $pr bound $bo"
    # issue 25: paced (the default, at the line rate), 8 replicas at most 1.05x the
    # bound; first come, first served stays on record and is not faster
    up=$(field "$j" unpaced_seconds); pg=$(field "$j" pace_gbps)
    [ "$pg" = 400 ] && ok "kimi-k2 replicas $r: paced at the line rate" || bad "kimi-k2 replicas $r: pace_gbps '$pg'"
    awk -v p="$pr" -v u="$up" 'BEGIN{exit !(u >= p)}' && ok "kimi-k2 replicas $r: unpaced $up s >= paced $pr s" \
        || bad "kimi-k2 replicas $r: unpaced $up s, paced $pr s"
    if [ "$r" = 8 ]; then
        awk -v p="$pr" -v b="$bo" 'BEGIN{exit !(p <= 1.05 * b)}' && ok "kimi-k2 replicas 8: paced within 1.05x the bound" \
            || bad "kimi-k2 replicas 8: paced $pr s over 1.05 x $bo s"
    fi
    [ -n "${CHECK_VERBOSE:-}" ] && echo "  replicas $r: plan $ps s, imbalance $is/$ir, bound $bo s, predicted $pr s (unpaced $up s)"
done
jo=$("$W" plan --model kimi-k2 --trainers 256 --inference 128 --replicas 8 --pace off --json)
[ "$(field "$jo" predicted_seconds)" = "$(field "$jo" unpaced_seconds)" ] && [ "$(field "$jo" pace_gbps)" = 0 ] \
    && ok "plan --pace off: the first-come replay" || bad "plan --pace off: $jo"
expect_rc 2 "plan bad --pace" "$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --pace fast
# issue 25: the plan `wsync plan --demo` prints for a push-demo layout is
# the plan push-demo's controller runs (equal digests), for each layout kind
expect_rc 2 "plan --demo unknown model" "$W" plan --demo gpt-9 --trainers 2 --inference 2
while read -r T I opts; do
    j=$("$W" plan --demo tiny --trainers "$T" --inference "$I" $opts --json)
    d=$(sed -E 's/.*"digest": "([0-9a-f]+)".*/\1/' <<<"$j")
    out=$("$W" push-demo --trainers "$T" --inference "$I" --steps 1 --schedule plan $opts 2>&1)
    p=$(sed -nE 's/^schedule: planner.*plan digest ([0-9a-f]+)$/\1/p' <<<"$out")
    if [ -n "$d" ] && [ "$d" = "$p" ] && grep -q "every inference rank bit-exact" <<<"$out"; then
        ok "plan digest = push-demo's: $T->$I $opts"
    else
        bad "plan digest $d, push-demo's '$p': $T->$I $opts"; tail -n 3 <<<"$out"
    fi
    # the gather between trainers push-demo runs is the plan's fetches
    fn=$(sed -E 's/.*"fetches": ([0-9]+).*/\1/' <<<"$j"); fb=$(sed -E 's/.*"fetch_bytes": ([0-9]+).*/\1/' <<<"$j")
    gn=$(sed -nE 's/^gather: ([0-9]+) transfers, ([0-9.]+) MB.*/\1/p' <<<"$out")
    gm=$(sed -nE 's/^gather: ([0-9]+) transfers, ([0-9.]+) MB.*/\2/p' <<<"$out")
    if [ "${gn:-0}" = "$fn" ] && [ "$(awk -v b="$fb" 'BEGIN { printf "%.2f", b / 1e6 }')" = "${gm:-0.00}" ]; then
        ok "push-demo's gather = the plan's fetches ($fn, $fb bytes): $T->$I $opts"
    else
        bad "push-demo's gather '$gn' transfers '$gm' MB, the plan's fetches $fn of $fb bytes: $T->$I $opts"
    fi
done <<'EOF2'
4 2
3 2 --reshard
4 2 --reshard --mesh-groups
2 3 --layout replica
4 2 --layout replica --fp8 --block 32
5 3 --reshard
4 2 --fp8 --block 32
5 3 --fp8 --block 16 --mesh-groups
EOF2
# greedy stays a named alternative: no digest, still bit-exact
out=$("$W" push-demo --steps 1 --schedule greedy 2>&1)
grep -q "^schedule: greedy" <<<"$out" && grep -q "every inference rank bit-exact" <<<"$out" \
    && ok "push-demo --schedule greedy" || bad "push-demo --schedule greedy"
# row-sharded fp8 with the default tile: plan --demo plans it
out=$("$W" plan --demo tiny --trainers 4 --inference 2 --fp8 --json 2>&1)
grep -q '"digest"' <<<"$out" && ok "plan --demo of row-sharded fp8 plans" || bad "plan --demo row-sharded fp8: $out"
# issue 43: the sparse step's prediction beside the dense one: its phases
# add up to it, the bound is the largest, the option checks; kimi-k2 256 ->
# 8 x 16 at the measured densities: under the dense step, within 0.1 s at a
# GPU's memory rate (--mem-gbps 12000)
sparse_sum() { # json -> "sum max-phase"
    sed -E 's/.*"sparse_phases": \{([^}]*)\}.*/\1/' <<<"$1" | tr ',' '\n' \
        | awk -F': ' '{gsub(/[" ]/, "", $1); s += $2; if ($2 > m) { m = $2; n = $1 } } END { printf "%.6f %s", s, n }'
}
for mem in "" 12000; do
    if [ -n "$mem" ]; then
        j=$("$W" plan --model kimi-k2 --trainers 256 --inference 128 --replicas 8 --mem-gbps "$mem" --json)
    else
        j=$("$W" plan --model kimi-k2 --trainers 256 --inference 128 --replicas 8 --json)
    fi
    ss=$(field "$j" sparse_seconds); pr=$(field "$j" predicted_seconds)
    bd=$(sed -E 's/.*"sparse_bound": "([a-z]+)".*/\1/' <<<"$j")
    read -r sum big <<<"$(sparse_sum "$j")"
    awk -v a="$sum" -v b="$ss" 'BEGIN{exit !(a - b < 2e-6 && b - a < 2e-6)}' && [ "$big" = "$bd" ] \
        && ok "kimi-k2 sparse ${mem:-default}: phases sum to $ss s, bound by $bd" \
        || bad "kimi-k2 sparse ${mem:-default}: phases sum $sum, total $ss, largest $big, bound '$bd'"
    awk -v s="$ss" -v p="$pr" 'BEGIN{exit !(s > 0 && s < p)}' && ok "kimi-k2 sparse ${mem:-default}: $ss s < dense $pr s" \
        || bad "kimi-k2 sparse ${mem:-default}: $ss s, dense $pr s"
    if [ -n "$mem" ]; then
        awk -v s="$ss" 'BEGIN{exit !(s <= 0.1)}' && ok "kimi-k2 sparse at $mem Gb/s within 0.1 s ($ss s)" \
            || bad "kimi-k2 sparse at $mem Gb/s: $ss s"
    fi
done
out=$("$W" plan --model qwen3-0.6b --trainers 4 --inference 2)
grep -q "^  sparse step .* bound by [a-z]*$" <<<"$out" && grep -q "^    by phase  *diff .*, barriers " <<<"$out" \
    && ok "plan text: the sparse step and its phases" || bad "plan text: no sparse lines: $out"
out=$("$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --density 1)
grep -q " 0 regions sparse" <<<"$out" && ok "plan --density 1: every region dense" || bad "plan --density 1: $out"
j0=$("$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --density 0 --json)
j1=$("$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --density 0.005 --json)
awk -v a="$(field "$j0" sparse_seconds)" -v b="$(field "$j1" sparse_seconds)" 'BEGIN{exit !(a > 0 && a < b)}' \
    && ok "plan --density 0 below --density 0.005" || bad "plan --density 0 / 0.005: $(field "$j0" sparse_seconds) / $(field "$j1" sparse_seconds)"
j2=$("$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --density 0.005 --verify-all --json)
awk -v a="$(field "$j1" sparse_seconds)" -v b="$(field "$j2" sparse_seconds)" 'BEGIN{exit !(a < b)}' \
    && ok "plan --verify-all digests more" || bad "plan --verify-all"
j3=$("$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --density 0.005 --dense-above 0.001 --json)
[ "$(field "$j3" sparse_tasks)" = 0 ] && ok "plan --dense-above: every region over it dense" || bad "plan --dense-above: $j3"
j4=$("$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --density 0.005 --staging 0.001 --json)
[ "$(field "$j4" sparse_dense_tasks)" -gt 0 ] && ok "plan --staging: what does not fit goes dense" || bad "plan --staging: $j4"
j5=$("$W" plan --demo tiny --trainers 4 --inference 2 --reshard --json 2>&1)
grep -q '"sparse_seconds": ' <<<"$j5" && grep -q '"sparse_phases": {"diff": ' <<<"$j5" \
    && ok "plan --demo: the sparse step" || bad "plan --demo: no sparse step: $j5"
# one host's constants (bench/bench_sim_check.sh passes them): 4 trainers
# on 2 cores diff twice as long as on a core each, a halved diff ratio
# doubles the diff, and a dense step of a run with sparse steps adds the
# base's copy (text and JSON)
phase() { sed -E "s/.*\"sparse_phases\": \{[^}]*\"$2\": ([0-9.]+).*/\1/" <<<"$1"; }
h0=$("$W" plan --demo qwen3-0.6b --trainers 4 --inference 2 --dense-above 0.25 --mem-gbps 100 --json)
h1=$("$W" plan --demo qwen3-0.6b --trainers 4 --inference 2 --dense-above 0.25 --mem-gbps 100 --cpus 2 --json)
h2=$("$W" plan --demo qwen3-0.6b --trainers 4 --inference 2 --dense-above 0.25 --mem-gbps 100 --cpus 2 \
    --diff-ratio "$(awk 'BEGIN{print 1.10 / 2}')" --json)
awk -v a="$(phase "$h0" diff)" -v b="$(phase "$h1" diff)" -v c="$(phase "$h2" diff)" \
    'BEGIN{exit !(a > 0 && b > 1.98 * a && b < 2.01 * a && c > 1.99 * b && c < 2.01 * b)}' \
    && ok "plan --cpus 2: 4 trainers' diff twice as long; --diff-ratio halved: twice again" \
    || bad "plan --cpus / --diff-ratio: diff $(phase "$h0" diff), $(phase "$h1" diff), $(phase "$h2" diff)"
awk -v a="$(phase "$h0" scatter)" -v b="$(phase "$h1" scatter)" 'BEGIN{exit !(a > 0 && a == b)}' \
    && ok "plan --cpus 2: 2 receivers on 2 cores scatter as on a core each" || bad "plan --cpus 2: scatter $h1"
awk -v b="$(field "$h1" sparse_base_seconds)" -v a="$(field "$h0" sparse_base_seconds)" 'BEGIN{exit !(a > 0 && b > 1.98 * a)}' \
    && ok "plan: the base a dense step copies ($(field "$h0" sparse_base_seconds) s)" || bad "plan: sparse_base_seconds: $h0"
out=$("$W" plan --demo qwen3-0.6b --trainers 4 --inference 2 --nic-gbps 40 --recv-gbps free --copy-gbps 80 --barrier-us 9 \
    --task-us 1 --nic-senders 4 --cpus 2)
grep -q "^  predicted .* at 40 Gb/s per NIC" <<<"$out" && grep -q "^    dense with a base  *[0-9.]* s" <<<"$out" \
    && ok "plan --demo: --nic-gbps and the one-host flags taken; the dense step with its base" || bad "plan --demo host flags: $out"
for o in "--cpus 0" "--cpus x" "--nic-senders -1" "--copy-gbps 0" "--recv-gbps slow" "--barrier-us -5" "--pack-ratio 0" \
    "--scatter-ratio x" "--verify-ratio -1" "--diff-ratio" "--quant-ratio 0"; do
    # shellcheck disable=SC2086
    expect_rc 2 "plan $o refused" "$W" plan --model qwen3-0.6b --trainers 4 --inference 2 $o
done
err=$("$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --pack-ratio 0 2>&1)
grep -q -- "--pack-ratio takes a positive number, not '0'" <<<"$err" && ok "plan --pack-ratio 0: the message names it" \
    || bad "plan --pack-ratio 0: $err"
for o in "--density 2" "--density x" "--fp8-bytes -0.1" "--fp8-scales 1.5" "--mem-gbps 0" "--dense-above 0" "--staging 3"; do
    # shellcheck disable=SC2086
    expect_rc 2 "plan $o refused" "$W" plan --model qwen3-0.6b --trainers 4 --inference 2 $o
done
err=$("$W" plan --model qwen3-0.6b --trainers 4 --inference 2 --density 2 2>&1)
grep -q -- "--density takes 0..1, not '2'" <<<"$err" && ok "plan --density 2: the message names it" || bad "plan --density 2: $err"
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
