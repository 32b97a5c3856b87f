#!/usr/bin/env bash
# make bench-probe: whether AUTO's choice of SIMD paths is the same in every
# process on this machine (wsync_diff_impl's comment has the rule). Prints
# the CPU head and a few passes of the probe with their margins
# (bench_probe), then runs `bench_probe --choice` in N fresh processes with
# the machine as it is and N more beside a load (`bench_probe --hog`:
# memcpy over 64 MiB on another core), and counts the choices. Exits 1 when
# they differ. Not part of make test: it measures, and says how this
# machine behaves rather than whether the code is right.
# usage: bench/bench_probe.sh BENCH_PROBE_BIN [N]   (default N 20)
set -u
bin=$1
n=${2:-20}
"$bin" 3 || exit 1
out=$(mktemp /tmp/wsync-bench-probe.XXXXXX)
hog=
trap '[ -n "$hog" ] && kill "$hog" 2>/dev/null; rm -f "$out"' EXIT
for i in $(seq "$n"); do env -u WSYNC_SIMD -u WSYNC_DIFF_IMPL -u WSYNC_DIGEST_IMPL "$bin" --choice; done | sed 's/^/as is: /' >>"$out"
"$bin" --hog 3600 &
hog=$!
sleep 0.5
for i in $(seq "$n"); do env -u WSYNC_SIMD -u WSYNC_DIFF_IMPL -u WSYNC_DIGEST_IMPL "$bin" --choice; done | sed 's/^/loaded: /' >>"$out"
kill "$hog" 2>/dev/null
wait "$hog" 2>/dev/null
hog=
sort "$out" | uniq -c | sed 's/^/bench_probe: choices: /'
kinds=$(sed 's/^[a-z ]*: //' "$out" | sort -u | wc -l)
total=$(wc -l <"$out")
if [ "$total" -ne $((2 * n)) ] || [ "$kinds" -ne 1 ]; then
    echo "bench_probe: FAIL: $total processes (want $((2 * n))), $kinds different choices"
    exit 1
fi
echo "bench_probe: the same choice in all $total processes ($n as the machine is, $n beside a load)"
