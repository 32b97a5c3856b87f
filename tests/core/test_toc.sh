#!/bin/sh
# Each header's CONTENTS lists its sections' tags (>>name). A tag must
# appear, beyond the contents, once in the declarations and once in the
# implementation; a tag marked * (code only in the implementation) once,
# in the implementation. "where is X" is then one search.
cd "$(dirname "$0")/../.." || exit 1
pass=0
fail=0
for h in wsync.h wsync_http.h wsync_rdma.h; do
    # the contents: from the CONTENTS heading to the end of that comment
    toc=$(awk '/^CONTENTS$/ {f = 1} f && /^\*\/$/ {exit} f' "$h")
    if [ -z "$toc" ]; then
        echo "FAIL $h: no CONTENTS section"
        fail=$((fail + 1))
        continue
    fi
    start=$(awk '/^CONTENTS$/ {print NR; exit}' "$h")
    end=$(awk -v s="$start" 'NR > s && /^\*\/$/ {print NR; exit}' "$h")
    impl=$(awk '/^   IMPLEMENTATION$/ {print NR; exit}' "$h")
    tags=$(printf '%s\n' "$toc" | awk '$1 ~ /^>>[a-z0-9-]+$/ {print $1 ($2 == "*" ? "*" : "")}')
    for t in $tags; do
        name=${t%\*}
        # occurrences outside the contents, as line numbers (a tag is a
        # whole word: >>store does not count >>store-mem)
        lines=$(awk -v s="$start" -v e="$end" -v tag="$name" '
            NR >= s && NR <= e {next}
            {
                line = $0
                while ((i = index(line, tag)) > 0) {
                    c = substr(line, i + length(tag), 1)
                    if (c !~ /[a-z0-9-]/) print NR
                    line = substr(line, i + length(tag))
                }
            }' "$h")
        decl=0
        imp=0
        for l in $lines; do
            if [ "$l" -lt "$impl" ]; then decl=$((decl + 1)); else imp=$((imp + 1)); fi
        done
        if [ "$t" != "$name" ]; then want_decl=0; else want_decl=1; fi
        if [ "$decl" -eq "$want_decl" ] && [ "$imp" -eq 1 ]; then
            pass=$((pass + 1))
        else
            echo "FAIL $h: $name: $decl in the declarations (want $want_decl), $imp in the implementation (want 1)"
            fail=$((fail + 1))
        fi
    done
done
echo "summary: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
