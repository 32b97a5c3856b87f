#!/usr/bin/env bash
# Issue 25 item 3: measured step time over the simulator's prediction for
# the same plan, constants measured in the same run (push-demo --bench),
# over a grid of fabrics, trainer and inference counts, bf16 and fp8
# (replica, and row shards with the gather between trainers), one and two
# mesh groups. Not run by `make test`: figures on a
# shared machine are noisy.
# usage: bench/bench_schedule.sh build/wsync [--model tiny] [--steps N]
set -u
W=${1:-build/wsync}; shift || true
MODEL=tiny; STEPS=6
while [ $# -gt 0 ]; do case $1 in --model) MODEL=$2; shift 2;; --steps) STEPS=$2; shift 2;; *) shift;; esac; done
# the CPU head every bench prints (bench/bench_cpu.h), from the bench_probe built beside W
probe=$(dirname "$W")/bench_probe
[ -x "$probe" ] && "$probe" --head bench_schedule
# pred/mean/p/best/p: the constants measured once after the steps (the
# sender rate the best of 3 rounds); step-p mean/best: each step against
# the sender rate probed right after it (this guest changes speed within
# seconds). The summary reads the per-step ratio.
printf '%-5s %-4s %-32s %10s %10s %10s %8s %8s %8s %8s\n' fabric T-I config "mean ms" "best ms" "pred ms" "mean/p" "best/p" \
    "step-p" "best"
ratios=(); failed=0
while read -r b T I cfg; do
    opts=${cfg//,/ }; [ "$opts" = "-" ] && opts=""
    out=$("$W" push-demo --backend "$b" --trainers "$T" --inference "$I" --model "$MODEL" --steps "$STEPS" --timeout-ms 30000 --bench $opts 2>&1)
    line=$(grep '^bench: step measured' <<<"$out")
    if [ -z "$line" ]; then printf '%-5s %-4s %-32s FAILED: %s\n' "$b" "$T-$I" "$cfg" "$(tail -n 1 <<<"$out")"; failed=$((failed + 1)); continue; fi
    read -r mean best pred rm rb < <(sed -E 's/.*measured ([0-9.]+) ms mean \(steps 2 on\), ([0-9.]+) ms best; predicted ([0-9.]+) ms.*predicted ([0-9.]+) mean, ([0-9.]+) best/\1 \2 \3 \4 \5/' <<<"$line")
    each=$(grep '^bench: each step against' <<<"$out")
    if [ -n "$each" ]; then
        read -r sm sb < <(sed -E 's/.*measured\/predicted ([0-9.]+) mean, ([0-9.]+) best/\1 \2/' <<<"$each")
    else
        sm=$rm; sb=$rb
    fi
    printf '%-5s %-4s %-32s %10s %10s %10s %8s %8s %8s %8s\n' "$b" "$T-$I" "$cfg" "$mean" "$best" "$pred" "$rm" "$rb" "$sm" "$sb"
    ratios+=("$sm")
done <<'GRID'
cma 4 2 -
cma 2 4 -
cma 8 2 -
cma 4 2 --reshard
cma 4 2 --reshard,--mesh-groups
cma 4 2 --layout,replica,--fp8,--block,128
shm 4 2 -
shm 2 3 --reshard
shm 4 2 --layout,replica,--fp8,--block,128
tcp 4 2 -
tcp 2 2 --reshard,--mesh-groups
tcp 4 2 --layout,replica,--fp8,--block,128
cma 1 3 -
shm 8 4 --reshard
cma 3 2 --fp8,--block,128
tcp 3 2 --fp8,--block,128,--mesh-groups
GRID
# The worst configuration: the mean ratio farthest from 1 (as a factor
# either way), and how many fall outside the target band 0.8-1.25.
if [ ${#ratios[@]} -gt 0 ]; then
    printf '%s\n' "${ratios[@]}" | awk -v failed="$failed" '
        { r = $1 + 0; f = r >= 1 ? r : (r > 0 ? 1 / r : 1e9); if (f > wf) { wf = f; w = r }
          if (r < 0.8 || r > 1.25) out++; if (n == 0 || r < lo) lo = r; if (r > hi) hi = r; n++ }
        END { printf "schedule: %d configurations measured (%d failed), measured/predicted %.2f-%.2f, worst %.2f, %d outside 0.8-1.25\n", n, failed, lo, hi, w, out + 0 }'
fi
