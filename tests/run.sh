#!/usr/bin/env bash
# Runs test programs and scripts, adds up their "summary: P passed, F failed"
# lines, and prints the total as the last line. A program that dies without a
# summary counts as one failure, so a crash is never silent.
# Runs TEST_JOBS commands at a time (default: one per core), started in the
# order given, and prints each one's lines together as soon as it is done (in
# the order given with TEST_JOBS=1); each command's line ends with its wall
# time and the CPU time (user + sys) of what it ran.
# usage: tests/run.sh LABEL CMD...   (each CMD is one program or script)
set -u
label=$1; shift
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cmds=("$@"); n=${#cmds[@]}
# Each command in a process group of its own (job control), so that an
# interrupt of this script stops every command still running, whole.
set -m
pids=()
stop() {
    local p; for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
    echo "run.sh: interrupted"; exit 130
}
trap stop INT TERM HUP
passed=0; failed=0

# Runs command $1 in the background: its output, exit status, wall time in ms
# and its children's CPU time (times, in this subshell), then "done".
start() {
    (
        w0=$(date +%s%N)
        (eval "${cmds[$1]}") >"$dir/$1.out" 2>&1 </dev/null
        echo $? >"$dir/$1.rc"
        w1=$(date +%s%N)
        echo $(((w1 - w0) / 1000000)) >"$dir/$1.wall"
        times >"$dir/$1.times"
        : >"$dir/$1.done"
    ) 2>>"$dir/$1.out" &
    pids+=($!)
}
# ms of CPU from the second line of times' output ("0m1.234s 0m0.567s")
cpu_ms() { tail -n 1 "$1" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60000 + a[2] * 1000 } printf "%d", s }'; }
# The report of command $1, as the sequential runner printed it.
report() {
    local i=$1 cmd=${cmds[$1]} out=$dir/$1.out rc line p f tm
    rc=$(cat "$dir/$i.rc")
    tm=$(awk -v w="$(cat "$dir/$i.wall")" -v c="$(cpu_ms "$dir/$i.times")" 'BEGIN { printf "%.1f s, cpu %.1f s", w / 1000, c / 1000 }')
    line=$(grep -E '^summary: [0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
    grep -v -E '^summary: ' "$out" | grep -E 'FAIL|error|ERROR|check failed|runtime error|Sanitizer' | head -n 40
    if [ -z "$line" ]; then
        echo "FAIL $cmd: exited $rc without a summary line ($tm)"
        tail -n 20 "$out"
        failed=$((failed + 1))
        return
    fi
    p=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\1/')
    f=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\2/')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $cmd: exit status $rc"; fi
    echo "  $label: $cmd: $p passed, $f failed ($tm)"
    passed=$((passed + p)); failed=$((failed + f))
}

t0=$(date +%s%N)
next=0; shown=0; running=0
declare -A reported=()
while [ $shown -lt $n ]; do
    while [ $running -lt "$jobs" ] && [ $next -lt $n ]; do
        start $next; next=$((next + 1)); running=$((running + 1))
    done
    if ! wait -n 2>/dev/null; then
        # no job left to wait for: any command without its done marker died
        # with the subshell that ran it
        for ((i = 0; i < next; i++)); do
            [ -e "$dir/$i.done" ] && continue
            [ -e "$dir/$i.rc" ] || echo 255 >"$dir/$i.rc"
            [ -e "$dir/$i.wall" ] || echo 0 >"$dir/$i.wall"
            [ -e "$dir/$i.times" ] || printf '0m0s 0m0s\n0m0s 0m0s\n' >"$dir/$i.times"
            : >"$dir/$i.done"
        done
    fi
    # report what has finished (the done markers), count what has not
    running=0
    for ((i = 0; i < next; i++)); do
        [ -n "${reported[$i]:-}" ] && continue
        if [ -e "$dir/$i.done" ]; then report $i; reported[$i]=1; shown=$((shown + 1))
        else running=$((running + 1)); fi
    done
done
wait
total=0; for ((i = 0; i < n; i++)); do total=$((total + $(cpu_ms "$dir/$i.times"))); done
awk -v l="$label" -v n=$n -v j="$jobs" -v w=$(( ($(date +%s%N) - t0) / 1000000 )) -v c=$total \
    'BEGIN { printf "  %s: %d commands, %d at a time: %.1f s, cpu %.1f s\n", l, n, j, w / 1000, c / 1000 }'
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
