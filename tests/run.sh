#!/usr/bin/env bash
# Runs test programs and scripts, adds up their "summary: P passed, F failed"
# lines, and prints the total as the last line. A program that dies without a
# summary counts as one failure, so a crash is never silent.
# usage: tests/run.sh LABEL CMD...   (each CMD is one program or script)
set -u
label=$1; shift
passed=0; failed=0
for cmd in "$@"; do
    out=$(eval "$cmd" 2>&1); rc=$?
    line=$(printf '%s\n' "$out" | grep -E '^summary: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    printf '%s\n' "$out" | grep -v -E '^summary: ' | grep -E 'FAIL|error|ERROR|check failed|runtime error|Sanitizer' | head -n 40
    if [ -z "$line" ]; then
        echo "FAIL $cmd: exited $rc without a summary line"
        printf '%s\n' "$out" | tail -n 20
        failed=$((failed + 1))
        continue
    fi
    p=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\1/')
    f=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\2/')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $cmd: exit status $rc"; fi
    echo "  $label: $cmd: $p passed, $f failed"
    passed=$((passed + p)); failed=$((failed + f))
done
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
