#!/usr/bin/env bash
# The tool's files call each other one way only: for each pair of tool/*.c,
# the functions and data defined in one and used by the other (nm of each
# file compiled alone) must not go both ways. tool/cli.h lists the files.
# usage: tests/cli/test_tool_cycles.sh [CC]   (default: $CC, else cc)
set -u
cd "$(dirname "$0")/../.." || exit 1
cc=${1:-${CC:-cc}}
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

names=()
for f in tool/*.c; do
    b=$(basename "$f" .c)
    # -O0: only the symbols matter; no curl needed (WSYNC_CLI_HTTP=0)
    if ! "$cc" -std=c99 -O0 -DWSYNC_CLI_HTTP=0 -I. -c "$f" -o "$tmp/$b.o" 2>"$tmp/$b.err"; then
        fail "$f does not compile alone: $(head -c 300 "$tmp/$b.err")"
        continue
    fi
    nm "$tmp/$b.o" | awk '$2 ~ /^[TDBRC]$/ {print $3}' | sort -u >"$tmp/$b.def"
    nm "$tmp/$b.o" | awk '$1 == "U" {print $2}' | sort -u >"$tmp/$b.und"
    names+=("$b")
done

# The reading works: main.c calls the commands, defined in files of their own.
if [ -f "$tmp/main.und" ] && grep -qx cmd_publish "$tmp/main.und" && grep -qx cmd_publish "$tmp/cmd_chain.def"; then
    pass "nm sees main.c call cmd_publish, defined in cmd_chain.c"
else
    fail "nm does not show main.c calling cmd_chain.c's cmd_publish: the check cannot read the objects"
fi

for a in "${names[@]}"; do
    for b in "${names[@]}"; do
        [[ "$a" < "$b" ]] || continue
        ab=$(comm -12 "$tmp/$a.def" "$tmp/$b.und" | tr '\n' ' ')
        ba=$(comm -12 "$tmp/$b.def" "$tmp/$a.und" | tr '\n' ' ')
        if [ -n "$ab" ] && [ -n "$ba" ]; then
            fail "tool/$a.c and tool/$b.c call each other: $b.c uses $a.c's ${ab% }; $a.c uses $b.c's ${ba% }"
        else
            pass "tool/$a.c and tool/$b.c"
        fi
    done
done

echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
