# Sourced by the scripts in tests/http/ that start servers: runs the store
# conformance suite (tests/http/test_conformance.c) against the stores the
# script started, and adds its summary to the script's counts.
# usage: conformance DIR... -- KIND,URL[,S3_ENDPOINT]...
# Runs DIR/test_conformance (build/ and build/san/) with the stores given;
# @RUN@ in a URL becomes a name unique to each run (the suite owns the path
# under it and expects it empty). Prints each store's line
# ("conformance KIND: CHECK ok, ...") and uses the caller's pass and fail.
conformance() {
    local dirs=() specs=() d s out rc line p f n=0 t0 t1
    while [ $# -gt 0 ] && [ "$1" != -- ]; do dirs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    for d in "${dirs[@]}"; do
        n=$((n + 1))
        if [ ! -x "$d/test_conformance" ]; then
            fail "conformance: $d/test_conformance is not built (make $d/test_conformance)"
            continue
        fi
        specs=()
        for s in "$@"; do specs+=("${s//@RUN@/conf-$$-$n}"); done
        t0=$(date +%s.%N)
        out=$("$d/test_conformance" "${specs[@]}" 2>&1); rc=$?
        t1=$(date +%s.%N)
        printf '%s\n' "$out" | grep -v '^summary: '
        line=$(printf '%s\n' "$out" | grep -E '^summary: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
        if [ -z "$line" ]; then fail "$d/test_conformance exited $rc without a summary line"; continue; fi
        p=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\1/')
        f=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\2/')
        [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { f=1; echo "FAIL $d/test_conformance: exit status $rc"; }
        echo "  conformance: $d/test_conformance: $p passed, $f failed ($(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s)"
        passed=$((passed + p)); failed=$((failed + f))
    done
}
