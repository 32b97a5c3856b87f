#!/usr/bin/env bash
# Nothing lost, nothing silently wrong: a corrupt local file is repaired and
# saved, a failed pull saves only a step it checked against HEAD, and the
# tool's temporary files are its own (no symbolic link followed, no two runs
# sharing one).
# usage: tests/cli/test_cli_safety.sh path/to/wsync
set -u
cd "$(dirname "$0")/../.."
bin=${1:-build/wsync}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
check() { # name, command...: passes when the command succeeds
    local name=$1; shift
    if "$@" >/dev/null 2>&1; then pass "$name"; else fail "$name"; fi
}
expect_rc() { # name, expected rc, command...
    local name=$1 want=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ $rc -eq "$want" ]; then pass "$name"; else fail "$name: exit $rc, wanted $want"; head -n 5 "$tmp/err"; fi
}
grep_out() { # name, pattern, file
    if grep -q -e "$2" "$3"; then pass "$1"; else fail "$1: no '$2' in: $(head -c 600 "$3")"; fi
}
claimed_step() {
    "$bin" inspect --json "$1" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print((d["metadata"] or {}).get("step", "none"))' 2>/dev/null || echo unreadable
}
holds_step() { # name, file, step: claims `step` and holds the generated step bit for bit
    local name=$1 f=$2 s=$3 got
    got=$(claimed_step "$f")
    if [ "$got" != "$s" ]; then fail "$name: claims step $got, wanted $s"; return 0; fi
    if "$bin" verify "$f" "$G/g$s.safetensors" >/dev/null 2>&1; then pass "$name"
    else fail "$name: claims step $s but differs from the generated step $s"; fi
}
flip_byte() { # file, offset: inverts one byte in place
    python3 -c '
import sys
p, at = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read()); b[at] ^= 0xFF; open(p, "wb").write(b)' "$1" "$2"
}
relabel() { # in, out, step: the file of `in` claiming another step in its __metadata__
    python3 - "$1" "$2" "$3" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
h = json.loads(raw[8:8 + n]); h['__metadata__']['step'] = sys.argv[3]
hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + raw[8 + n:])
PY
}
size_of() { wc -c < "$1" | tr -d ' '; }
no_temps() { # name, dir: no temporary file of the tool is left
    local left; left=$(find "$2" \( -name '*.wsync-tmp.*' -o -name '*.tmp.*' \) | head -3)
    if [ -z "$left" ]; then pass "$1"; else fail "$1: left $left"; fi
}

G=$tmp/g; mkdir -p "$G"
for s in $(seq 0 8); do "$bin" gen --model tiny --step $s -o "$G/g$s.safetensors" >/dev/null || fail "gen step $s"; done

# ---- (2) a file claiming step N whose bytes differ: repaired and saved ----
B=$tmp/b  # packed deltas, an anchor every 5 steps
for s in $(seq 0 8); do "$bin" publish --store "$B" --step $s --anchor-every 5 "$G/g$s.safetensors" >/dev/null; done
P=$tmp/p; mkdir -p "$P"
"$bin" pull --store "$B" "$P/clean.safetensors" >/dev/null 2>&1
holds_step "a clean pull holds HEAD's step" "$P/clean.safetensors" 8
cp "$P/clean.safetensors" "$P/x.safetensors"
flip_byte "$P/x.safetensors" $(( $(size_of "$P/x.safetensors") / 2 ))
expect_rc "pull a file at HEAD's step with a flipped byte" 0 "$bin" pull --store "$B" "$P/x.safetensors"
grep_out "the flipped byte is reported" "does not match HEAD's state digest" "$tmp/err"
check "the repaired file is saved: its bytes equal a clean pull" cmp "$P/x.safetensors" "$P/clean.safetensors"
expect_rc "pull the repaired file again" 0 "$bin" pull --store "$B" "$P/x.safetensors"
grep_out "the repaired file is up to date" "at step 8 already" "$tmp/out"
if grep -q 'state digest' "$tmp/err"; then fail "the repaired file is still reported corrupt"; else pass "the repaired file is not reported again"; fi
# the same below HEAD: pull --step 6 of a file claiming 6
"$bin" pull --store "$B" --step 6 "$P/c6.safetensors" >/dev/null 2>&1
cp "$P/c6.safetensors" "$P/x6.safetensors"
flip_byte "$P/x6.safetensors" $(( $(size_of "$P/x6.safetensors") / 3 ))
expect_rc "pull --step 6 of a file claiming 6 with a flipped byte" 0 "$bin" pull --store "$B" --step 6 "$P/x6.safetensors"
check "pull --step 6: the repaired file is saved" cmp "$P/x6.safetensors" "$P/c6.safetensors"
# follow checks the file it starts from, even when it claims HEAD's step
cp "$P/clean.safetensors" "$P/fx.safetensors"
flip_byte "$P/fx.safetensors" $(( $(size_of "$P/fx.safetensors") / 2 ))
expect_rc "follow a file at HEAD's step with a flipped byte" 0 \
    timeout 20 "$bin" follow --store "$B" --interval 0.05 --max-steps 1 "$P/fx.safetensors"
check "follow: the repaired file is saved" cmp "$P/fx.safetensors" "$P/clean.safetensors"

# ---- (3) a failed pull saves only a step checked against HEAD ----
T=$tmp/t  # trl-v1: deltas without base digests, so only the state digest can tell
for s in $(seq 0 8); do "$bin" publish --store "$T" --encoding trl-v1 --step $s "$G/g$s.safetensors" >/dev/null; done
flip_byte "$T/deltas/step_000008.safetensors" $(( $(size_of "$T/deltas/step_000008.safetensors") / 2 ))
relabel "$G/g2.safetensors" "$P/liar.safetensors" 4  # holds step 2, claims 4
cp "$P/liar.safetensors" "$P/liar.before"
expect_rc "a wrong file through a corrupt later delta: exit 1" 1 "$bin" pull --store "$T" "$P/liar.safetensors"
check "a wrong file: no unverified step saved (the file is unchanged)" cmp "$P/liar.safetensors" "$P/liar.before"
grep_out "a wrong file: the check says so" "HEAD's state digest" "$tmp/err"
if grep -q "now holds step" "$tmp/err"; then fail "a wrong file: said it holds a step"; else pass "a wrong file: no claim of a step reached"; fi
cp "$G/g4.safetensors" "$P/ok4.safetensors"
expect_rc "a clean file through a corrupt later delta: exit 1" 1 "$bin" pull --store "$T" "$P/ok4.safetensors"
grep_out "a clean file: says where the file is" "now holds step 7" "$tmp/err"
holds_step "a clean file: saved at the last verified step" "$P/ok4.safetensors" 7
# follow the same way: the wrong file is never saved as step 7 unchecked;
# the follower starts again from the anchor and saves step 7 once it checks
cp "$P/liar.before" "$P/fliar.safetensors"
expect_rc "follow a wrong file through a corrupt later delta" 0 \
    timeout 20 "$bin" follow --store "$T" --interval 0.05 --max-steps 1 "$P/fliar.safetensors"
holds_step "follow: the wrong file is replaced only by a checked step 7" "$P/fliar.safetensors" 7
# without HEAD there is no state digest: a failed sync saves nothing
cp -r "$T" "$tmp/tl"; rm -f "$tmp/tl/HEAD"
head -c 100 "$T/deltas/step_000008.safetensors" > "$tmp/tl/deltas/step_000008.safetensors"
cp "$G/g4.safetensors" "$P/l4.safetensors"
expect_rc "no HEAD, a truncated later delta: exit 1" 1 "$bin" pull --store "$tmp/tl" "$P/l4.safetensors"
check "no HEAD: the unverifiable step is not saved" cmp "$P/l4.safetensors" "$G/g4.safetensors"
cp "$G/g4.safetensors" "$P/l4.safetensors"
expect_rc "no HEAD, a successful pull: exit 0" 0 "$bin" pull --store "$tmp/tl" --step 7 "$P/l4.safetensors"
holds_step "no HEAD, a successful pull: saved" "$P/l4.safetensors" 7
grep_out "no HEAD: the pull warns that nothing was verified" "warning: .*no HEAD" "$tmp/err"
no_temps "no temporary files after the pulls" "$P"

# ---- (6) temporary files: created exclusively, never through a link ----
L=$tmp/l; mkdir -p "$L"
"$bin" diff "$G/g0.safetensors" "$G/g1.safetensors" -o "$L/d01" >/dev/null
"$bin" apply "$G/g0.safetensors" "$L/d01" -o "$L/ref" >/dev/null
echo precious > "$L/victim"; cp "$L/victim" "$L/victim.before"
now=$(date +%s)
for t in $(seq $((now - 2)) $((now + 8))); do
    for o in out.apply out.diff out.gen; do ln -sf "$L/victim" "$L/$o.tmp.$t"; done
done
expect_rc "apply with links planted at its old temporary names" 0 "$bin" apply "$G/g0.safetensors" "$L/d01" -o "$L/out.apply"
check "apply: the link's target is unchanged" cmp "$L/victim" "$L/victim.before"
cp "$L/victim.before" "$L/victim"
check "apply: OUT is the result" cmp "$L/out.apply" "$L/ref"
expect_rc "diff with links planted" 0 "$bin" diff "$G/g0.safetensors" "$G/g1.safetensors" -o "$L/out.diff"
check "diff: the link's target is unchanged" cmp "$L/victim" "$L/victim.before"
cp "$L/victim.before" "$L/victim"
check "diff: OUT is the delta" cmp "$L/out.diff" "$L/d01"
expect_rc "gen with links planted" 0 "$bin" gen --model tiny --step 1 -o "$L/out.gen"
check "gen: the link's target is unchanged" cmp "$L/victim" "$L/victim.before"
cp "$L/victim.before" "$L/victim"
check "gen: OUT is the model" cmp "$L/out.gen" "$G/g1.safetensors"
# pull and follow: a link at MODEL.wsync-tmp.<pid> (the shell knows the pid wsync will have)
for c in pull follow; do
    rm -f "$L/m.$c"
    extra=; [ $c = follow ] && extra="--max-steps 1 --interval 0.05"
    expect_rc "$c with a link planted at its pid's temporary name" 0 timeout 20 sh -c \
        'ln -s "$2" "$1.wsync-tmp.$$"; ln -s "$2" "$1.wsync-tmp.$$.0"; shift 2; exec "$@"' \
        sh "$L/m.$c" "$L/victim" "$bin" $c --store "$B" $extra "$L/m.$c"
    check "$c: the link's target is unchanged" cmp "$L/victim" "$L/victim.before"
    cp "$L/victim.before" "$L/victim"
    check "$c: MODEL holds HEAD" cmp "$L/m.$c" "$P/clean.safetensors"
done
# stale temporaries of a dead process are removed, links included, their targets kept
true & dead=$!; wait $dead
cp "$P/clean.safetensors" "$L/s.safetensors"
echo stale > "$L/s.safetensors.wsync-tmp.$dead"
echo stale > "$L/s.safetensors.wsync-tmp.$dead.x1y2z3"
ln -s "$L/victim" "$L/s.safetensors.wsync-tmp.$dead.a1b2c3"
expect_rc "pull next to a dead process's temporaries" 0 "$bin" pull --store "$B" "$L/s.safetensors"
if ls "$L"/s.safetensors.wsync-tmp.* >/dev/null 2>&1; then fail "stale temporaries left: $(ls "$L"/s.safetensors.wsync-tmp.*)"
else pass "stale temporaries (old and new names, a link) removed"; fi
check "stale temporaries: the link's target is unchanged" cmp "$L/victim" "$L/victim.before"

# many concurrent applies to one OUT: each run whole, OUT one whole result
"$bin" gen --model tiny --vocab 4096 --step 0 -o "$L/v0" >/dev/null
"$bin" gen --model tiny --vocab 4096 --step 1 -o "$L/v1" >/dev/null
"$bin" diff "$L/v0" "$L/v1" -o "$L/dv" >/dev/null
"$bin" apply "$L/v0" "$L/dv" -o "$L/refv" >/dev/null
C=$tmp/c; mkdir -p "$C"
bad=0; mixed=0
for round in 1 2 3; do
    pids=()
    for i in $(seq 1 20); do
        "$bin" apply "$G/g0.safetensors" "$L/d01" -o "$C/out" >/dev/null 2>"$C/err.a$i" & pids+=($!)
        "$bin" apply "$L/v0" "$L/dv" -o "$C/out" >/dev/null 2>"$C/err.b$i" & pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
    cmp -s "$C/out" "$L/ref" || cmp -s "$C/out" "$L/refv" || mixed=$((mixed + 1))
done
[ $bad -eq 0 ] && pass "120 concurrent applies to one OUT all succeed" \
    || fail "$bad of 120 concurrent applies failed: $(cat "$C"/err.* | sort | uniq -c | head -3)"
[ $mixed -eq 0 ] && pass "after each round of 40 concurrent applies OUT is one whole result" \
    || fail "$mixed of 3 rounds left OUT matching neither result"
rm -f "$C"/err.*
no_temps "no temporary files after concurrent applies" "$C"
# and concurrent pulls into one MODEL
rm -f "$C/m.safetensors"; pids=(); bad=0
for i in $(seq 1 8); do "$bin" pull --store "$B" "$C/m.safetensors" >/dev/null 2>&1 & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
[ $bad -eq 0 ] && pass "8 concurrent pulls into one MODEL succeed" || fail "$bad of 8 concurrent pulls failed"
check "concurrent pulls: MODEL holds HEAD" cmp "$C/m.safetensors" "$P/clean.safetensors"
no_temps "no temporary files after concurrent pulls" "$C"

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
