#!/usr/bin/env bash
# The delta chain through the command-line tool, with real files and real
# processes: publish, log, pull (from scratch, to a step, forward, through
# corrupt objects, killed with SIGKILL part way), follow, demo.
# usage: tests/cli/test_cli_chain.sh path/to/wsync
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
# The step a safetensors file claims in its __metadata__, or "none".
claimed_step() {
    "$bin" inspect --json "$1" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print((d["metadata"] or {}).get("step", "none"))' 2>/dev/null || echo unreadable
}
# name, file, step: the file claims `step` and holds the generator's step bit for bit
holds_step() {
    local name=$1 f=$2 s=$3 got
    got=$(claimed_step "$f")
    if [ "$got" != "$s" ]; then fail "$name: claims step $got, wanted $s"; return 0; fi
    if "$bin" verify "$f" "$G/g$s.safetensors" >/dev/null 2>&1; then pass "$name"
    else fail "$name: claims step $s but differs from the generated step $s"; fi
}
no_temps() { # name, dir: nothing named *.wsync-tmp.* is left
    local left; left=$(find "$2" -name '*.wsync-tmp.*' | head -3)
    if [ -z "$left" ]; then pass "$1"; else fail "$1: left $left"; fi
}
flip_byte() { # file, offset: inverts one byte in place
    python3 -c '
import sys
p, at = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read()); b[at] ^= 0xFF; open(p, "wb").write(b)' "$1" "$2"
}
size_of() { wc -c < "$1" | tr -d ' '; }

# ---- usage: --help for each command, usage errors exit 2 ----
for c in publish pull follow log gen demo; do
    expect_rc "$c --help" 0 "$bin" $c --help
    grep_out "$c --help prints its usage" "usage: wsync $c" "$tmp/out"
done
expect_rc "--help" 0 "$bin" --help
for c in publish pull follow log gen demo; do grep_out "--help lists $c" "^  $c" "$tmp/out"; done
expect_rc "publish without arguments" 2 "$bin" publish
expect_rc "publish without MODEL" 2 "$bin" publish --store "$tmp/u" --step 1
expect_rc "publish without --store" 2 "$bin" publish --step 1 x.safetensors
expect_rc "publish unknown option" 2 "$bin" publish --store "$tmp/u" --bogus x.safetensors
expect_rc "publish bad --step" 2 "$bin" publish --store "$tmp/u" --step 1x x.safetensors
expect_rc "publish negative --step" 2 "$bin" publish --store "$tmp/u" --step -1 x.safetensors
expect_rc "publish unknown encoding" 2 "$bin" publish --store "$tmp/u" --step 1 --encoding zstd x.safetensors
expect_rc "publish --anchor-every 0" 2 "$bin" publish --store "$tmp/u" --step 1 --anchor-every 0 x.safetensors
expect_rc "publish --threads 0" 2 "$bin" publish --store "$tmp/u" --step 1 --threads 0 x.safetensors
expect_rc "publish two models" 2 "$bin" publish --store "$tmp/u" --step 1 a b
expect_rc "pull without arguments" 2 "$bin" pull
expect_rc "pull without MODEL" 2 "$bin" pull --store "$tmp/u"
expect_rc "pull bad --step" 2 "$bin" pull --store "$tmp/u" --step x m
expect_rc "pull --store without a value" 2 "$bin" pull m --store
expect_rc "follow --interval 0" 2 "$bin" follow --store "$tmp/u" --interval 0 m
expect_rc "follow --interval abc" 2 "$bin" follow --store "$tmp/u" --interval abc m
expect_rc "follow --max-steps 0" 2 "$bin" follow --store "$tmp/u" --max-steps 0 m
expect_rc "pull --listing bad" 2 "$bin" pull --store "$tmp/u" --listing xml m
grep_out "--listing names its values" "takes auto, json or propfind" "$tmp/err"
expect_rc "publish --s3-part-size 4M" 2 "$bin" publish --store "$tmp/u" --s3-part-size 4M m
expect_rc "publish --s3-multipart-threshold 0" 2 "$bin" publish --store "$tmp/u" --s3-multipart-threshold 0 m
expect_rc "log --s3-part-size 1X" 2 "$bin" log --store "$tmp/u" --s3-part-size 1X
expect_rc "log without --store" 2 "$bin" log
expect_rc "log unknown option" 2 "$bin" log --store "$tmp/u" --bogus
expect_rc "log extra argument" 2 "$bin" log --store "$tmp/u" extra
expect_rc "gen without -o" 2 "$bin" gen --model tiny --step 1
expect_rc "gen unknown model" 2 "$bin" gen --model nope -o "$tmp/x"
expect_rc "demo unknown model" 2 "$bin" demo --model nope
grep_out "demo lists the known models" "qwen3-0.6b" "$tmp/err"
expect_rc "demo --steps 0" 2 "$bin" demo --steps 0
[ ! -e "$tmp/u" ] && pass "usage errors create nothing" || fail "a usage error created the store"

# ---- the generated model, steps 0..12 (tiny: 1.3 M bf16 parameters) ----
G=$tmp/g; mkdir -p "$G"
for s in $(seq 0 12); do "$bin" gen --model tiny --step $s -o "$G/g$s.safetensors" || fail "gen step $s"; done
"$bin" gen --model tiny --step 3 --threads 3 -o "$tmp/g3again" >/dev/null 2>&1
check "gen is deterministic (any thread count)" cmp "$G/g3.safetensors" "$tmp/g3again"
[ "$(claimed_step "$G/g7.safetensors")" = 7 ] && pass "gen writes its step" || fail "gen step metadata"

# ---- publish 0..12, an anchor every 5 steps, default retention (10 steps) ----
B=$tmp/b
for s in $(seq 0 12); do
    expect_rc "publish step $s" 0 "$bin" publish --store "$B" --step $s --anchor-every 5 "$G/g$s.safetensors"
    cp "$tmp/out" "$tmp/pub$s"
done
grep_out "step 0 is an anchor" "^step 0: anchor" "$tmp/pub0"
grep_out "step 5 is an anchor (every 5)" "^step 5: anchor" "$tmp/pub5"
grep_out "step 10 is an anchor (every 5)" "^step 10: anchor" "$tmp/pub10"
grep_out "step 7 is a delta from 6" "^step 7: delta from 6, [0-9]* of 1313152 elements changed (1\.[0-9]*%)" "$tmp/pub7"
grep_out "publish prints delta and full bytes and ms" "kB vs 2.6 MB full, [0-9.]* ms" "$tmp/pub7"
expect_rc "publish a step equal to HEAD's" 1 "$bin" publish --store "$B" --step 12 "$G/g12.safetensors"
grep_out "non-increasing step: reason named" "WSYNC_ERR_" "$tmp/err"
grep_out "non-increasing step: how to go on" "publish a step after 12 (wsync_publisher_head, or wsync log" "$tmp/err"
grep_out "non-increasing step: how to start over" "new prefix or in an empty store" "$tmp/err"
expect_rc "publish a step below HEAD's" 1 "$bin" publish --store "$B" --step 3 "$G/g3.safetensors"
expect_rc "publish a file that is not safetensors" 1 "$bin" publish --store "$B" --step 13 "$tmp/pub7"
expect_rc "publish a missing file" 1 "$bin" publish --store "$B" --step 13 "$tmp/missing.safetensors"
expect_rc "publish without --step takes the file's step" 0 "$bin" publish --store "$tmp/ns" "$G/g4.safetensors"
grep_out "the file's step is published" "^step 4: anchor" "$tmp/out"
expect_rc "publish without --step, a file without a step" 2 "$bin" publish --store "$tmp/ns" tests/fixtures/corpus/safetensors/Elyasb14__models__models_cnn.safetensors

# ---- log ----
expect_rc "log" 0 "$bin" log --store "$B"
grep_out "log reads HEAD" "chain read from HEAD, head step 12, newest anchor 10" "$tmp/out"
grep_out "log lists delta 12" "^delta  *12  *11  *[0-9]*  [0-9a-f]\{16\}  deltas/step_000012.safetensors" "$tmp/out"
expect_rc "log --json" 0 "$bin" log --store "$B" --json
if python3 - "$tmp/out" "$B" <<'PY'
import json, os, re, sys
d = json.load(open(sys.argv[1]))
assert d["source"] == "HEAD" and d["head_step"] == 12 and d["anchor_step"] == 10, d
assert d["encoding"] == "packed" and re.fullmatch("[0-9a-f]{16}", d["head_state"])
anchors = [e["step"] for e in d["entries"] if e["kind"] == "anchor"]
deltas = [e for e in d["entries"] if e["kind"] == "delta"]
assert 10 in anchors and 5 in anchors and 0 not in anchors, anchors  # retention: the last 10 steps
assert [e["step"] for e in deltas] == sorted(e["step"] for e in deltas)
assert deltas[-1]["step"] == 12 and 1 not in [e["step"] for e in deltas]
for e in d["entries"]:
    assert e["base"] == (e["step"] - 1 if e["kind"] == "delta" else e["step"]), e
    assert re.fullmatch("[0-9a-f]{16}", e["digest"]) and re.fullmatch("[0-9a-f]{16}", e["state"]), e
    assert os.path.getsize(os.path.join(sys.argv[2], e["key"])) == e["bytes"], e
last = [e for e in d["entries"] if e["step"] == 12]
assert all(e["state"] == d["head_state"] for e in last)
PY
then pass "log --json: HEAD, retention, bases, sizes and digests agree with the bucket"; else fail "log --json content"; fi
[ ! -e "$B/anchors/step_000000.safetensors" ] && [ ! -e "$B/deltas/step_000001.safetensors" ] \
    && pass "retention removed the objects of old steps" || fail "retention kept step 0/1 objects"
expect_rc "log of a store that does not exist: exit 3" 3 "$bin" log --store "$tmp/empty"
grep_out "missing store named" "WSYNC_ERR_NO_STORE.*empty' does not exist" "$tmp/err"
[ ! -e "$tmp/empty" ] && pass "log does not create a missing store" || fail "log created the store"
mkdir -p "$tmp/empty"
expect_rc "log of an empty store: exit 4" 4 "$bin" log --store "$tmp/empty"
grep_out "empty chain named" "WSYNC_ERR_NOT_FOUND" "$tmp/err"

# ---- pull: from scratch, to a step, forward, when up to date ----
P=$tmp/p; mkdir -p "$P"
expect_rc "pull from scratch" 0 "$bin" pull --store "$B" "$P/m.safetensors"
grep_out "pull prints path, bytes, steps, ms" "no step -> 12 (anchor 10 + deltas 11..12), [0-9.]* MB fetched, [0-9.]* ms" "$tmp/out"
holds_step "pull from scratch ends at HEAD, bit-exact" "$P/m.safetensors" 12
for k in 5 6 9 10 11; do
    rm -f "$P/k.safetensors"
    expect_rc "pull --step $k from scratch" 0 "$bin" pull --store "$B" --step $k "$P/k.safetensors"
    holds_step "pull --step $k is bit-exact" "$P/k.safetensors" $k
done
rm -f "$P/k.safetensors"
expect_rc "pull --step 1 (retired by retention)" 1 "$bin" pull --store "$B" --step 1 "$P/k.safetensors"
grep_out "retired step: reason named" "WSYNC_ERR_" "$tmp/err"
[ ! -e "$P/k.safetensors" ] && pass "no file after a pull that reached no step" || fail "file written after a failed pull"
cp "$G/g6.safetensors" "$P/f.safetensors"
expect_rc "pull an existing file forward" 0 "$bin" pull --store "$B" "$P/f.safetensors"
grep_out "forward pull: deltas only" "step 6 -> 12 (deltas 7..12)" "$tmp/out"
holds_step "forward pull is bit-exact" "$P/f.safetensors" 12
cp "$P/f.safetensors" "$P/f.before"
expect_rc "pull when up to date" 0 "$bin" pull --store "$B" "$P/f.safetensors"
grep_out "up to date: said so" "at step 12 already" "$tmp/out"
check "up to date: file untouched" cmp "$P/f.safetensors" "$P/f.before"
cp "$G/g11.safetensors" "$P/back.safetensors"
expect_rc "pull --step back to an earlier step" 0 "$bin" pull --store "$B" --step 7 "$P/back.safetensors"
holds_step "pull back is bit-exact" "$P/back.safetensors" 7
# --spool-dir: an anchor for a MODEL that holds a step is spooled there (not in $TMPDIR) while it is checked
mkdir -p "$tmp/spool"
cp "$G/g11.safetensors" "$P/sp.safetensors"
expect_rc "pull back through an anchor, \$TMPDIR missing: the spool file cannot be made" 1 \
    env TMPDIR="$tmp/nodir" "$bin" pull --store "$B" --step 7 "$P/sp.safetensors"
grep_out "the spool failure is named" "cannot create the spool file.*nodir" "$tmp/err"
check "the spool failure leaves MODEL as it was" cmp "$P/sp.safetensors" "$G/g11.safetensors"
expect_rc "pull back through an anchor with --spool-dir" 0 \
    env TMPDIR="$tmp/nodir" "$bin" pull --store "$B" --step 7 --spool-dir "$tmp/spool" "$P/sp.safetensors"
grep_out "--spool-dir: the anchor was taken" "step 11 -> 7 (anchor 5" "$tmp/out"
holds_step "--spool-dir: bit-exact" "$P/sp.safetensors" 7
[ -z "$(ls -A "$tmp/spool")" ] && pass "--spool-dir: the spool file is gone" || fail "--spool-dir: left $(ls "$tmp/spool")"
expect_rc "pull --spool-dir that does not exist" 2 "$bin" pull --store "$B" --spool-dir "$tmp/nodir" "$P/sp.safetensors"
grep_out "--spool-dir: the reason" "takes an existing directory" "$tmp/err"
expect_rc "follow --spool-dir that is a file" 2 "$bin" follow --store "$B" --spool-dir "$G/g1.safetensors" "$P/sp.safetensors"
expect_rc "publish does not take --spool-dir" 2 "$bin" publish --store "$B" --spool-dir "$tmp/spool" --step 13 "$G/g12.safetensors"
printf 'not a model' > "$P/bad.safetensors"
expect_rc "pull into a file that is not safetensors" 1 "$bin" pull --store "$B" "$P/bad.safetensors"
grep_out "bad local file named" "bad.safetensors" "$tmp/err"
check "bad local file left alone" test "$(cat "$P/bad.safetensors")" = "not a model"
"$bin" gen --model tiny --vocab 4096 --step 6 -o "$P/other.safetensors" 2>/dev/null
cp "$P/other.safetensors" "$P/other.before"
expect_rc "pull into a file of another model: exit 5" 5 "$bin" pull --store "$B" "$P/other.safetensors"
grep_out "another model: both shapes named" "WSYNC_ERR_LAYOUT.*the chain has BF16 \[2048, 128\], the target is BF16 \[4096, 128\]" "$tmp/err"
grep_out "another model: what to do named" "left as it was: remove it, or give another path" "$tmp/err"
check "another model: file left alone" cmp "$P/other.safetensors" "$P/other.before"
no_temps "no temporary files after pulls" "$P"

expect_rc "pull from a store that does not exist: exit 3" 3 "$bin" pull --store "$tmp/nowhere" "$P/n.safetensors"
grep_out "missing store named" "WSYNC_ERR_NO_STORE: the store '.*nowhere' does not exist" "$tmp/err"
mkdir -p "$tmp/emptystore"
expect_rc "pull from an empty store: exit 4" 4 "$bin" pull --store "$tmp/emptystore" "$P/n.safetensors"
grep_out "empty chain named" "WSYNC_ERR_NOT_FOUND.*an empty chain" "$tmp/err"
[ ! -e "$P/n.safetensors" ] && pass "no file after a pull from no chain" || fail "a pull from no chain wrote a file"
[ ! -e "$tmp/nowhere" ] && pass "pull does not create a missing store" || fail "pull created the store"

# A file claiming a step it does not hold, under deltas without base digests
# (trl-v1): HEAD's state digest catches it, the pull starts over from an anchor.
for s in 0 1 2 3 4 5 6; do "$bin" publish --store "$tmp/bt" --encoding trl-v1 --step $s "$G/g$s.safetensors" >/dev/null; done
python3 - "$G/g2.safetensors" "$P/liar.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
h = json.loads(raw[8:8 + n]); h['__metadata__']['step'] = '4'    # holds step 2, claims 4
hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + raw[8 + n:])
PY
expect_rc "pull a file that claims a step it does not hold (trl-v1)" 0 "$bin" pull --store "$tmp/bt" "$P/liar.safetensors"
grep_out "the false claim is reported" "does not match HEAD's state digest" "$tmp/err"
holds_step "the false claim is repaired from an anchor" "$P/liar.safetensors" 6

# ---- prefixes: two chains in one bucket ----
for s in 0 1 2; do
    expect_rc "publish --prefix run1 step $s" 0 "$bin" publish --store "$B" --prefix run1/ --step $s "$G/g$s.safetensors"
done
expect_rc "log --prefix" 0 "$bin" log --store "$B" --prefix run1
grep_out "log --prefix: its own chain" "head step 2, newest anchor 0" "$tmp/out"
[ -e "$B/run1/HEAD" ] && pass "prefix: objects under run1/" || fail "prefix: no run1/HEAD"
expect_rc "pull --prefix" 0 "$bin" pull --store "$B" --prefix run1 "$P/r.safetensors"
holds_step "pull --prefix is bit-exact" "$P/r.safetensors" 2
expect_rc "log without the prefix: the first chain" 0 "$bin" log --store "$B"
grep_out "prefix: the first chain still at 12" "head step 12" "$tmp/out"

# ---- corrupt objects: reported, routed around, the local file stays consistent ----
D=$B/deltas
cp "$D/step_000012.safetensors" "$tmp/d12"
flip_byte "$D/step_000012.safetensors" $(( $(size_of "$tmp/d12") / 2 ))
rm -f "$P/c.safetensors"; "$bin" pull --store "$B" --step 11 "$P/c.safetensors" >/dev/null 2>&1
cp "$P/c.safetensors" "$P/c.before"
expect_rc "pull through a corrupt delta 12" 1 "$bin" pull --store "$B" "$P/c.safetensors"
grep_out "corrupt delta: the object is named" "deltas/step_000012.safetensors" "$tmp/err"
grep_out "corrupt delta: the reason is named" "WSYNC_ERR_" "$tmp/err"
check "corrupt delta: the file at 11 is untouched" cmp "$P/c.safetensors" "$P/c.before"
holds_step "corrupt delta: the file still holds 11" "$P/c.safetensors" 11
cp "$G/g8.safetensors" "$P/c8.safetensors"
expect_rc "pull 8 -> 12 through a corrupt delta 12" 1 "$bin" pull --store "$B" "$P/c8.safetensors"
grep_out "partial pull: says where the file is" "now holds step 11" "$tmp/err"
holds_step "partial pull: the file holds the last step reached" "$P/c8.safetensors" 11
cp "$tmp/d12" "$D/step_000012.safetensors"
cp "$D/step_000007.safetensors" "$tmp/d7"
flip_byte "$D/step_000007.safetensors" 100
cp "$G/g6.safetensors" "$P/c6.safetensors"
expect_rc "pull 6 -> 12 around a corrupt delta 7" 0 "$bin" pull --store "$B" "$P/c6.safetensors"
grep_out "routed around through the anchor" "anchor 10.*rejected" "$tmp/out"
holds_step "routed around: bit-exact at 12" "$P/c6.safetensors" 12
cp "$tmp/d7" "$D/step_000007.safetensors"
cp "$B/HEAD" "$tmp/head"
flip_byte "$B/HEAD" 20
expect_rc "log with a corrupt HEAD" 1 "$bin" log --store "$B"
grep_out "corrupt HEAD named" "WSYNC_ERR_BAD_HEAD" "$tmp/err"
cp "$G/g9.safetensors" "$P/h.safetensors"
expect_rc "pull with a corrupt HEAD" 1 "$bin" pull --store "$B" "$P/h.safetensors"
holds_step "corrupt HEAD: the file stays at 9" "$P/h.safetensors" 9
cp "$tmp/head" "$B/HEAD"
no_temps "no temporary files after failed pulls" "$P"

# ---- a bucket without HEAD (as TRL writes them): read by listing ----
cp -r "$B" "$tmp/bl"; rm -rf "$tmp/bl/HEAD" "$tmp/bl/run1"
expect_rc "log without HEAD" 0 "$bin" log --store "$tmp/bl"
grep_out "log says it listed" "a listing (no HEAD), head step 12" "$tmp/out"
expect_rc "pull without HEAD" 0 "$bin" pull --store "$tmp/bl" "$P/l.safetensors"
holds_step "pull without HEAD is bit-exact" "$P/l.safetensors" 12

# ---- a damaged or foreign chain: publish refuses; --new-chain keeps every object ----
kept_all() { # name, file listing paths, that all still exist
    local gone; gone=$(while read -r f; do [ -e "$f" ] || echo "$f"; done < "$2" | head -3)
    if [ -z "$gone" ]; then pass "$1"; else fail "$1: $gone deleted"; fi
}
"$bin" publish --help > "$tmp/out"
grep_out "publish --help names --new-chain" "--new-chain" "$tmp/out"
cp -r "$tmp/bl" "$tmp/nc"; find "$tmp/nc" -type f > "$tmp/nc.files"
expect_rc "publish over objects without HEAD is refused" 1 "$bin" publish --store "$tmp/nc" --step 13 "$G/g12.safetensors"
grep_out "without HEAD: a foreign or damaged chain named" "WSYNC_ERR_BAD_HEAD.*no HEAD.*a foreign or damaged chain" "$tmp/err"
grep_out "without HEAD: the way out named" "start a new chain here with WSYNC_CHAIN_NEW_CHAIN (wsync publish --new-chain)" "$tmp/err"
[ ! -e "$tmp/nc/HEAD" ] && pass "a refused publish writes no HEAD" || fail "a refused publish wrote HEAD"
expect_rc "publish --new-chain at the newest step present is refused" 1 \
    "$bin" publish --store "$tmp/nc" --new-chain --step 12 "$G/g12.safetensors"
grep_out "--new-chain: the newest step named" "not after step 12, the newest in the store" "$tmp/err"
expect_rc "publish --new-chain after the newest step" 0 "$bin" publish --store "$tmp/nc" --new-chain --step 13 "$G/g12.safetensors"
grep_out "--new-chain starts with an anchor" "^step 13: anchor" "$tmp/out"
kept_all "--new-chain keeps every old object" "$tmp/nc.files"
expect_rc "publish after --new-chain continues the new chain" 0 "$bin" publish --store "$tmp/nc" --step 14 "$G/g12.safetensors"
kept_all "the new chain's retention keeps every old object" "$tmp/nc.files"
cp -r "$B" "$tmp/nh"; rm -rf "$tmp/nh/run1"; flip_byte "$tmp/nh/HEAD" 40; find "$tmp/nh" -type f > "$tmp/nh.files"
expect_rc "publish over a corrupt HEAD is refused" 1 "$bin" publish --store "$tmp/nh" --step 13 "$G/g12.safetensors"
grep_out "corrupt HEAD: what failed named" "WSYNC_ERR_BAD_HEAD.*HEAD fails its check" "$tmp/err"
kept_all "a refused publish deletes nothing" "$tmp/nh.files"
expect_rc "publish --new-chain over a corrupt HEAD" 0 "$bin" publish --store "$tmp/nh" --new-chain --step 13 "$G/g12.safetensors"
kept_all "--new-chain over a corrupt HEAD keeps every old object" "$tmp/nh.files"
expect_rc "log of the new chain" 0 "$bin" log --store "$tmp/nh"
grep_out "the new chain's HEAD" "chain read from HEAD, head step 13, newest anchor 13" "$tmp/out"

# ---- follow: a second process picks up each step as it is published ----
F=$tmp/f
"$bin" publish --store "$F" --step 0 "$G/g0.safetensors" >/dev/null
timeout 30 "$bin" follow --store "$F" --interval 0.02 --until-step 3 "$P/fo.safetensors" >"$tmp/fo.out" 2>&1 &
fpid=$!
for s in 1 2 3; do
    sleep 0.15
    "$bin" publish --store "$F" --step $s "$G/g$s.safetensors" >/dev/null || fail "publish $s while following"
done
wait $fpid; rc=$?
[ $rc -eq 0 ] && pass "follow --until-step 3 exits 0" || fail "follow --until-step: exit $rc: $(tail -3 "$tmp/fo.out")"
holds_step "follow: the file holds step 3" "$P/fo.safetensors" 3
[ "$(grep -c 'written$' "$tmp/fo.out")" -ge 2 ] && pass "follow prints a line per update" \
    || fail "follow output: $(cat "$tmp/fo.out")"
grep_out "follow: the update line names steps, path and bytes" "step [0-9]* -> 3 (delta.*fetched" "$tmp/fo.out"
timeout 30 "$bin" follow --store "$F" --interval 0.02 --max-steps 1 "$P/fo.safetensors" >"$tmp/fo.out" 2>&1 &
fpid=$!
sleep 0.2
"$bin" publish --store "$F" --step 4 "$G/g4.safetensors" >/dev/null
wait $fpid; rc=$?
[ $rc -eq 0 ] && pass "follow --max-steps 1 exits 0 after one update" || fail "follow --max-steps: exit $rc"
holds_step "follow --max-steps: the file holds step 4" "$P/fo.safetensors" 4
for sig in TERM INT; do
    timeout 30 "$bin" follow --store "$F" --interval 5 "$P/fo.safetensors" >"$tmp/fo.out" 2>&1 &
    fpid=$!
    sleep 0.3
    kill -$sig $fpid
    wait $fpid; rc=$?
    [ $rc -eq 0 ] && pass "follow stops cleanly on SIG$sig" || fail "follow on SIG$sig: exit $rc"
    grep_out "follow on SIG$sig says why it stopped" "stopped by a signal" "$tmp/fo.out"
done
holds_step "follow: the file is intact after the signals" "$P/fo.safetensors" 4

# ---- follow --on-update: a command after each update, with the step and the path ----
U=$tmp/onup; mkdir -p "$U"
"$bin" publish --store "$U/b" --step 0 "$G/g0.safetensors" >/dev/null
hook='cp "$WSYNC_MODEL" "$HOOKDIR/snap.$WSYNC_STEP" && echo "$WSYNC_STEP $WSYNC_MODEL" >> "$HOOKDIR/hook.log"'
HOOKDIR=$U timeout 30 "$bin" follow --store "$U/b" --interval 0.02 --until-step 3 --on-update "$hook" \
    "$U/m.safetensors" >"$tmp/fo.out" 2>&1 &
fpid=$!
for s in 1 2 3; do
    sleep 0.15
    "$bin" publish --store "$U/b" --step $s "$G/g$s.safetensors" >/dev/null || fail "publish $s while following with a hook"
done
wait $fpid; rc=$?
[ $rc -eq 0 ] && pass "follow --on-update exits 0" || fail "follow --on-update: exit $rc: $(tail -3 "$tmp/fo.out")"
n_written=$(grep -c 'written$' "$tmp/fo.out"); n_hook=$(wc -l < "$U/hook.log" 2>/dev/null || echo 0)
[ "$n_written" -ge 2 ] && [ "$n_written" -eq "$n_hook" ] && pass "--on-update ran once per update ($n_hook)" \
    || fail "--on-update: $n_written updates, $n_hook hook runs: $(cat "$U/hook.log" 2>/dev/null)"
[ "$(tail -n 1 "$U/hook.log" 2>/dev/null)" = "3 $U/m.safetensors" ] && pass "--on-update: WSYNC_STEP and WSYNC_MODEL" \
    || fail "--on-update environment: $(cat "$U/hook.log" 2>/dev/null)"
sort -n -c "$U/hook.log" 2>/dev/null && pass "--on-update: steps in order" || fail "--on-update: steps out of order"
while read -r s _; do  # what the command saw at each update is that step, whole
    holds_step "--on-update: the file at step $s when the command ran" "$U/snap.$s" "$s"
done < "$U/hook.log"
"$bin" publish --store "$U/b" --step 4 "$G/g4.safetensors" >/dev/null
expect_rc "follow with a failing --on-update goes on (exit 0)" 0 timeout 30 "$bin" follow --store "$U/b" \
    --interval 0.02 --max-steps 1 --on-update 'exit 3' "$U/m.safetensors"
grep_out "a failing --on-update command is reported" "on-update command exited with status 3 after step 4" "$tmp/err"
expect_rc "follow --on-update ''" 2 "$bin" follow --store "$U/b" --on-update '' "$U/m.safetensors"

# ---- follow from no file while the store cannot give the anchor: reported, tried again ----
A=$tmp/fa
"$bin" publish --store "$A" --step 0 "$G/g0.safetensors" >/dev/null
a0=$(cd "$A" && ls anchors/ | head -n 1)
mv "$A/anchors/$a0" "$tmp/fa.anchor"
timeout 30 "$bin" follow --store "$A" --interval 0.05 --until-step 0 "$P/fa.safetensors" >"$tmp/fa.out" 2>"$tmp/fa.err" &
fpid=$!
sleep 1
if kill -0 $fpid 2>/dev/null; then pass "follow keeps trying while the anchor cannot be read"
else fail "follow gave up when the anchor could not be read: $(cat "$tmp/fa.err")"; fi
mv "$tmp/fa.anchor" "$A/anchors/$a0"
wait $fpid; rc=$?
[ $rc -eq 0 ] && pass "follow reaches the step once the anchor is back" || fail "follow after the anchor came back: exit $rc"
holds_step "follow: the file holds step 0 after the store recovered" "$P/fa.safetensors" 0
grep_out "follow reported the anchor it could not read" "$a0" "$tmp/fa.err"

# ---- retention that cannot delete: a warning, HEAD keeps naming it, a later publish removes it ----
R=$tmp/ret
"$bin" publish --store "$R" --step 0 "$G/g0.safetensors" >/dev/null
"$bin" publish --store "$R" --step 1 --retain 1 --anchor-every 100 "$G/g1.safetensors" >/dev/null
d1=$(cd "$R" && ls deltas/ | head -n 1)
rm -f "$R/deltas/$d1"; mkdir -p "$R/deltas/$d1/x"  # a delete of a non-empty directory fails, even as root
expect_rc "publish whose retention cannot delete exits 0" 0 "$bin" publish --store "$R" --step 2 --retain 1 \
    --anchor-every 100 "$G/g2.safetensors"
grep_out "retention that fails is a warning naming the count" "warning: retention could not delete 1 object" "$tmp/err"
"$bin" log --store "$R" --json >"$tmp/out" 2>/dev/null
grep_out "HEAD still names what retention could not delete" "$d1" "$tmp/out"
rm -rf "$R/deltas/$d1"
expect_rc "the next publish" 0 "$bin" publish --store "$R" --step 3 --retain 1 --anchor-every 100 "$G/g3.safetensors"
if grep -q "retention could not" "$tmp/err"; then fail "retention still fails after the obstacle went"
else pass "the next publish's retention is clean"; fi
"$bin" log --store "$R" --json >"$tmp/out" 2>/dev/null
if grep -q "$d1" "$tmp/out"; then fail "HEAD names $d1 after it was collected"; else pass "a later publish collects it"; fi

# ---- kill -9 part way through pulls: the file is the old step or the new one ----
K=$tmp/k; mkdir -p "$K/g"
for s in 0 1 2 3; do  # tiny with a 32768-token vocabulary: 9.2 M parameters, 18 MB
    "$bin" gen --model tiny --vocab 32768 --step $s -o "$K/g/g$s.safetensors" || fail "gen big $s"
    "$bin" publish --store "$K/b" --step $s "$K/g/g$s.safetensors" >/dev/null || fail "publish big $s"
done
t0=$(date +%s%N)
"$bin" pull --store "$K/b" "$K/probe.safetensors" >/dev/null 2>&1
window=$(( ($(date +%s%N) - t0) / 1000000 + 5 ))  # ms: kills land anywhere in one pull
old=0; new=0; bad=0
for i in $(seq 1 16); do
    if [ $((i % 2)) -eq 0 ]; then cp "$K/g/g1.safetensors" "$K/m.safetensors"; from=1; else rm -f "$K/m.safetensors"; from=none; fi
    "$bin" pull --store "$K/b" "$K/m.safetensors" >/dev/null 2>&1 &
    pid=$!
    sleep "$(printf '0.%03d' $((RANDOM % window)))"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    if [ ! -e "$K/m.safetensors" ]; then
        [ $from = none ] && old=$((old + 1)) || { bad=$((bad + 1)); echo "FAIL kill $i: the file vanished"; }
        continue
    fi
    s=$(claimed_step "$K/m.safetensors")
    if { [ "$s" = 3 ] || [ "$s" = "$from" ]; } && "$bin" verify "$K/m.safetensors" "$K/g/g$s.safetensors" >/dev/null 2>&1; then
        [ "$s" = 3 ] && new=$((new + 1)) || old=$((old + 1))
    else
        bad=$((bad + 1)); echo "FAIL kill $i (from $from): the file claims step $s and does not hold it"
    fi
done
[ $bad -eq 0 ] && pass "16 pulls killed with SIGKILL: every file whole at its old or new step ($old old, $new new)" \
    || fail "$bad killed pulls left a file that is not a whole published step"
[ $old -gt 0 ] && pass "some kills landed before the file was replaced ($old)" \
    || fail "no kill landed mid-pull (window $window ms): the test did not test"
expect_rc "a pull after the kills" 0 "$bin" pull --store "$K/b" "$K/m.safetensors"
no_temps "the next pull removes the killed pulls' temporary files" "$K"
G_tiny=$G; G=$K/g
holds_step "after the kills: bit-exact at 3" "$K/m.safetensors" 3
G=$G_tiny

# ---- demo: two processes, every step bit-exact ----
expect_rc "demo --model tiny --steps 3" 0 "$bin" demo --model tiny --steps 3 --bucket "$tmp/db"
[ "$(grep -c '^step [0-3]: .*bit-exact$' "$tmp/out")" -eq 4 ] && pass "demo: steps 0..3 each bit-exact" \
    || fail "demo output: $(cat "$tmp/out")"
grep_out "demo: table header" "step  train s  kind    changed %   delta MB    full MB  publish ms  pull+apply  latency ms  check" "$tmp/out"
grep_out "demo: summary" "^4 of 4 steps bit-exact" "$tmp/out"
if grep -q MISMATCH "$tmp/out"; then fail "demo printed MISMATCH"; else pass "demo: no MISMATCH"; fi
expect_rc "demo again in the same bucket (old chain removed)" 0 "$bin" demo --model tiny --steps 2 --bucket "$tmp/db" --encoding trl-v3
grep_out "demo trl-v3: bit-exact" "^3 of 3 steps bit-exact" "$tmp/out"
expect_rc "log of the demo's bucket" 0 "$bin" log --store "$tmp/db"
grep_out "the demo's chain ends at its last step" "head step 2" "$tmp/out"

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
