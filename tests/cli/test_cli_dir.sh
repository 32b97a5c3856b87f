#!/usr/bin/env bash
# Model directories (Hugging Face checkpoints) through the command-line tool:
# sharded directories made from the safetensors corpus (tests/cli/make_dirs.py)
# published step by step, pulled and followed into a directory switched by a
# symbolic link (DIR -> DIR.step_NNNNNN/), bit-exact tensor by tensor with the
# small files byte for byte; the anchors' objects in the store; bad
# directories refused with nothing written; an engine-like reader while a
# follower updates and while followers are killed with SIGKILL; single-file
# buckets and single-file models; a bucket of the old single-file format;
# issue 41's defects, each with the processes that broke it (overlapping
# pulls and follows of one directory, a dangling link, ...).
# The first section checks the checks (make_dirs.py's comparisons and reader
# against fakes), so it passes whatever the tool can do.
# usage: tests/cli/test_cli_dir.sh path/to/wsync
set -u
cd "$(dirname "$0")/../.."
root=$PWD
bin=${1:-build/wsync}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
tmp=$(mktemp -d)
bg=()   # background processes this script started
cleanup() {
    local p
    for p in "${bg[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
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

# An interpreter with numpy (Debian's python3 has it when a python3 earlier on PATH may not).
py=
for cand in /usr/bin/python3 python3; do
    if "$cand" -c 'import numpy' >/dev/null 2>&1; then py=$cand; break; fi
done
if [ -z "$py" ]; then
    fail "no python3 with numpy (tests/install-deps.sh installs python3-numpy)"
    echo "summary: $passed passed, $failed failed"; exit 1
fi
mk() { "$py" "$root/tests/cli/make_dirs.py" "$@"; }

# F32 tensors: kept with --keep-f32 where the tool has it, else the comparison
# expects the publisher's BF16 cast (round to nearest even).
keep=(); cast=--f32-as-bf16
if "$bin" publish --help 2>&1 | grep -q -e '--keep-f32'; then keep=(--keep-f32); cast=; fi

same() { # name, step, published dir, pulled dir [--anchor]: every tensor and file
    local name=$1 s=$2 pub=$3 got=$4; shift 4
    if mk compare $cast "$@" "$s" "$pub" "$got" >"$tmp/cmp" 2>&1; then pass "$name"
    else fail "$name: $(head -n 6 "$tmp/cmp")"; fi
}
same_file() { # name, step, published file, pulled file
    if mk compare-file $cast "$2" "$3" "$4" >"$tmp/cmp" 2>&1; then pass "$1"
    else fail "$1: $(head -n 6 "$tmp/cmp")"; fi
}
link_step() { # the step DIR's link names (DIR.step_NNNNNN), or "none"
    local t; t=$(readlink "$1" 2>/dev/null) || { echo none; return; }
    t=${t%/}; t=${t##*/}
    case $t in "$(basename "$1")".step_[0-9]*) echo $((10#${t##*.step_})) ;; *) echo "none($t)" ;; esac
}
versions() { # how many DIR.step_NNNNNN sit beside DIR
    local n=0 e b; b=$(basename "$1")
    for e in "$(dirname "$1")/$b".step_*; do
        [ -e "$e" ] || continue
        case ${e##*/} in "$b".step_*[!0-9]*) ;; "$b".step_[0-9]*) n=$((n + 1)) ;; esac
    done
    echo $n
}
others() { # what sits beside DIR named DIR.* that is not a version (temporaries)
    local e b; b=$(basename "$1")
    for e in "$(dirname "$1")/$b".*; do
        [ -e "$e" ] || [ -L "$e" ] || continue
        case ${e##*/} in "$b".step_*[!0-9]*) echo "${e##*/}" ;; "$b".step_[0-9]*) ;; *) echo "${e##*/}" ;; esac
    done
}
pulled_dir() { # name, dir, step: a link to DIR.step_N, at most two versions, no temporaries
    local name=$1 d=$2 s=$3 ls left
    ls=$(link_step "$d")
    if [ -L "$d" ] && [ "$ls" = "$s" ]; then pass "$name: a link to its step $s version"
    else fail "$name: $d is $( [ -L "$d" ] && echo "a link to step $ls" || { [ -e "$d" ] && echo "not a link" || echo missing; } ), wanted a link to step $s"; fi
    [ "$(versions "$d")" -le 2 ] && pass "$name: at most two versions" \
        || fail "$name: $(versions "$d") versions: $(cd "$(dirname "$d")" && ls -d "$(basename "$d")".step_* | tr '\n' ' ')"
    left=$(others "$d" | head -n 3 | tr '\n' ' ')
    [ -z "$left" ] && pass "$name: no temporaries left" || fail "$name: left $left"
}
listing() { # a directory's names, sizes and contents, for before/after comparisons
    if [ -e "$1" ]; then (cd "$1" && find . -printf '%y %p %s\n' | sort && find . -type f -exec sha1sum {} + | sort); fi
}
ms_sleep() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# ---- the checks checked: make_dirs.py's directories, comparisons and reader ----
R=$tmp/gen; mkdir -p "$R"
mk steps bf16 "$R/bf16" 0 30 || fail "make_dirs.py steps bf16"
mk steps mixed "$R/mixed" 0 8 || fail "make_dirs.py steps mixed"
mk steps single "$R/single" 0 2 || fail "make_dirs.py steps single"
mk model bf16 "$tmp/bf16.5" --step 5
check "make_dirs.py is deterministic (model and steps agree)" diff -r "$tmp/bf16.5" "$R/bf16/step_5"
if "$py" - "$R" <<'PY'
import glob, json, os, struct, sys
# an independent reading: the index names exactly the shards' tensors, its
# total_size is their data, it is written as transformers writes it
for model in ("bf16", "mixed"):
    for d in sorted(glob.glob(os.path.join(sys.argv[1], model, "step_*"))):
        raw = open(os.path.join(d, "model.safetensors.index.json")).read()
        idx = json.loads(raw)
        assert raw == json.dumps(idx, indent=2, sort_keys=True) + "\n"
        seen, total = {}, 0
        for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
            b = open(f, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
            h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
            for k, v in h.items():
                assert k not in seen; seen[k] = os.path.basename(f)
                total += v["data_offsets"][1] - v["data_offsets"][0]
        assert seen == idx["weight_map"], d
        assert idx["metadata"]["total_size"] == total, d
        assert len(set(seen.values())) == 3 and all(f.startswith("model-0000") for f in seen.values())
PY
then pass "the indexes name exactly the shards' tensors, total_size right, transformers' layout"
else fail "make_dirs.py's indexes"; fi
for i in 1 2 3; do
    src=$(sed -n "$i"p <<'EOF'
FluxML__SafeTensors.jl__test_non_sharded_model.with_metadata.safetensors
wyek1n__MLX-CLI__adapters_adapters.safetensors
Elyasb14__models__models_cnn.safetensors
EOF
)
    check "mixed step 0: shard $i is the corpus file byte for byte" cmp "$R/mixed/step_0/model-0000$i-of-00003.safetensors" "tests/fixtures/corpus/safetensors/$src"
done
if "$py" - "$R" <<'PY'
import os, struct, sys
sys.path.insert(0, "tests/cli"); import make_dirs as m
import numpy as np
r = sys.argv[1]
for i in (1, 2, 3):
    a = open(os.path.join(r, "mixed/step_0/model-0000%d-of-00003.safetensors" % i), "rb").read()
    b = open(os.path.join(r, "mixed/step_8/model-0000%d-of-00003.safetensors" % i), "rb").read()
    n = struct.unpack("<Q", a[:8])[0]
    assert a[:8 + n] == b[:8 + n] and a != b     # the other writer's header kept, data moved
for model, shard in (("bf16", "model-00002-of-00003.safetensors"), ("mixed", "model-00001-of-00003.safetensors")):
    x = m.read(os.path.join(r, model, "step_4", shard))[2]
    y = m.read(os.path.join(r, model, "step_5", shard))[2]
    ch = tot = 0
    for k, (dt, _, b) in x.items():
        if dt in m.FLOAT_BITS and b:
            u = np.frombuffer(b, m.FLOAT_BITS[dt]); v = np.frombuffer(y[k][2], m.FLOAT_BITS[dt])
            ch += int((u != v).sum()); tot += u.size
            assert ((u ^ v) & ~np.array(0x70000 if dt == "F32" else 7, dtype=u.dtype)).max() == 0  # mantissa LSBs only
        else:
            assert b == y[k][2], k                  # integer, bool and fp8 tensors never change
    assert 0.005 * tot < ch < 0.05 * tot or tot < 1000, (model, ch, tot)
PY
then pass "the trajectory: a few % of float elements per step, low mantissa bits, headers kept"
else fail "the trajectory"; fi

F=$tmp/fake; mkdir -p "$F"
mk fake-pull 4 "$R/bf16/step_4" "$F/ok" $cast
same "compare: a right pull passes" 4 "$R/bf16/step_4" "$F/ok"
expect_mismatch() { # name, step, published, pulled: compare must fail
    if mk compare $cast "$2" "$3" "$4" >/dev/null 2>&1; then fail "$1: compare passed"; else pass "$1"; fi
}
expect_mismatch "compare: another step fails" 5 "$R/bf16/step_5" "$F/ok"
expect_mismatch "compare: the published directory itself fails (no step written)" 4 "$R/bf16/step_4" "$R/bf16/step_4"
cp -r "$F/ok" "$F/flip"
"$py" -c '
import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-3] ^= 1; open(p, "wb").write(b)' \
    "$F/flip/model-00003-of-00003.safetensors"
expect_mismatch "compare: one flipped tensor bit fails" 4 "$R/bf16/step_4" "$F/flip"
cp -r "$F/ok" "$F/mix"; cp "$R/bf16/step_5/model-00002-of-00003.safetensors" "$F/mix/"
mk fake-pull 5 "$R/bf16/step_5" "$F/ok5" $cast; cp "$F/ok5/model-00002-of-00003.safetensors" "$F/mix/"
expect_mismatch "compare: a shard of another step fails" 4 "$R/bf16/step_4" "$F/mix"
cp -r "$F/ok" "$F/cfg"; echo ' ' >> "$F/cfg/tokenizer.json"
expect_mismatch "compare: a changed small file fails" 4 "$R/bf16/step_4" "$F/cfg"
cp -r "$F/ok" "$F/nofile"; rm "$F/nofile/generation_config.json"
expect_mismatch "compare: a missing small file fails" 4 "$R/bf16/step_4" "$F/nofile"
mk fake-pull 2 "$R/mixed/step_2" "$F/m2" $cast
same "compare: mixed dtypes, a right pull passes" 2 "$R/mixed/step_2" "$F/m2"

# The reader against fake followers: one that switches a link (never a
# mixture), one that rewrites the files in place (mixtures).
fake_follow() { # mode (link|inplace), dir, first, last
    local mode=$1 d=$2 k
    for k in $(seq "$3" "$4"); do
        if [ "$mode" = link ]; then
            mk fake-pull "$k" "$R/bf16/step_$k" "$d.step_$k.tmp" $cast
            mv "$d.step_$k.tmp" "$d.step_$(printf %06d "$k")"
            ln -sfn "$(basename "$d").step_$(printf %06d "$k")" "$d.link" && mv -T "$d.link" "$d"
            [ "$k" -ge $(( $3 + 2 )) ] && rm -rf "$d.step_$(printf %06d $((k - 2)))"
        else
            mk fake-pull "$k" "$R/bf16/step_$k" "$d.new" $cast; mkdir -p "$d"
            for f in "$d.new"/*; do cp "$f" "$d/"; sleep 0.02; done
            rm -rf "$d.new"
        fi
        sleep 0.05
    done
}
for mode in link inplace; do
    rm -f "$tmp/stop"
    mk reader "$F/$mode" "$R/bf16" "$tmp/stop" "$tmp/reader.$mode" $cast & rpid=$!; bg+=($rpid)
    fake_follow $mode "$F/$mode" 0 8
    touch "$tmp/stop"; wait $rpid
done
"$py" - "$tmp/reader.link" "$tmp/reader.inplace" >"$tmp/rd" 2>&1 <<'PY'
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
assert a["n_errors"] == 0 and a["reads"] > 10 and len(a["steps"]) >= 3, a
assert b["n_errors"] > 0, b
print("link: %d reads, steps %s; in place: %d of %d reads mixed" % (a["reads"], a["steps"], b["n_errors"], b["reads"]))
PY
[ $? -eq 0 ] && pass "the reader: none mixed under a link switch, mixtures caught in place ($(cat "$tmp/rd"))" \
    || fail "the reader against fakes: $(cat "$tmp/rd")"

# ---- (a) publish steps 0..8 of sharded directories, pull every step bit-exact ----
P=$tmp/p; mkdir -p "$P"
for model in bf16 mixed; do
    S=$tmp/s_$model
    inc=(); [ $model = bf16 ] && inc=(--include notes.txt)
    ok=1
    for k in $(seq 0 8); do
        expect_rc "$model: publish the directory at step $k" 0 \
            "$bin" publish --store "$S" --step $k --anchor-every 3 --retain 100 "${keep[@]}" "${inc[@]}" "$R/$model/step_$k"
        cp "$tmp/out" "$tmp/pub.$model.$k"
        if [ $k -eq 0 ] && ! grep -q "^step 0" "$tmp/out"; then ok=0; break; fi
    done
    if [ $ok -eq 0 ]; then
        fail "$model: no directory publish; the rest of (a) skipped"
        continue
    fi
    for k in 0 3 6; do grep_out "$model: step $k is an anchor (every 3)" "^step $k: anchor" "$tmp/pub.$model.$k"; done
    grep_out "$model: step 4 is a delta from 3" "^step 4: delta from 3" "$tmp/pub.$model.4"
    grep_out "$model: step 8 is a delta from 7" "^step 8: delta from 7" "$tmp/pub.$model.8"
    [ $model = bf16 ] && grep_out "bf16: step 7, whose config.json changed, is an anchor" "^step 7: anchor" "$tmp/pub.$model.7"
    for k in $(seq 0 8); do
        mkdir -p "$P/$model.$k"
        expect_rc "$model: pull --step $k into a new directory" 0 "$bin" pull --store "$S" --step $k "$P/$model.$k/model"
        pulled_dir "$model: pull --step $k" "$P/$model.$k/model" $k
        same "$model: pull --step $k is the published step, bit-exact, small files identical" $k "$R/$model/step_$k" "$P/$model.$k/model"
    done
    mkdir -p "$P/$model.head"
    expect_rc "$model: pull the newest step" 0 "$bin" pull --store "$S" "$P/$model.head/model"
    same "$model: pull without --step gives step 8" 8 "$R/$model/step_8" "$P/$model.head/model"
    D=$P/$model.fwd/model; mkdir -p "$P/$model.fwd"
    for k in $(seq 0 8); do
        expect_rc "$model: pull the same directory forward to $k" 0 "$bin" pull --store "$S" --step $k "$D"
        pulled_dir "$model: forward to $k" "$D" $k
        same "$model: forward to $k is bit-exact" $k "$R/$model/step_$k" "$D"
    done
    listing "$(readlink -f "$D")" > "$tmp/before"
    expect_rc "$model: pull when up to date" 0 "$bin" pull --store "$S" "$D"
    [ "$(link_step "$D")" = 8 ] && listing "$(readlink -f "$D")" | cmp -s - "$tmp/before" \
        && pass "$model: up to date: the directory untouched" || fail "$model: up to date: the directory changed"
    expect_rc "$model: pull back to step 2" 0 "$bin" pull --store "$S" --step 2 "$D"
    same "$model: pull back to 2 is bit-exact" 2 "$R/$model/step_2" "$D"
    pulled_dir "$model: back to 2" "$D" 2
done

# F32 cast to BF16 (the default without --keep-f32) in a directory too
for k in 0 1 2; do
    "$bin" publish --store "$tmp/s_cast" --step $k "$R/mixed/step_$k" >"$tmp/out" 2>&1 || { fail "publish without --keep-f32, step $k: $(head -c 300 "$tmp/out")"; break; }
done
mkdir -p "$P/cast"
expect_rc "pull a directory published without --keep-f32" 0 "$bin" pull --store "$tmp/s_cast" "$P/cast/model"
if mk compare --f32-as-bf16 2 "$R/mixed/step_2" "$P/cast/model" >"$tmp/cmp" 2>&1; then
    pass "without --keep-f32: F32 shards' tensors are their BF16 casts, the rest bit-exact"
else fail "without --keep-f32: $(head -n 4 "$tmp/cmp")"; fi

# A Hugging Face cache snapshot: every file a link into ../../blobs
H=$tmp/hf; mkdir -p "$H/blobs" "$H/snapshots/0123abcd"
for f in "$R/bf16/step_4"/*; do
    b=$(sha1sum "$f" | cut -c1-40); cp "$f" "$H/blobs/$b"; ln -s "../../blobs/$b" "$H/snapshots/0123abcd/${f##*/}"
done
expect_rc "a cache snapshot (files linked into ../../blobs) publishes" 0 \
    "$bin" publish --store "$tmp/s_hf" --step 4 "${keep[@]}" --include notes.txt "$H/snapshots/0123abcd"
mkdir -p "$P/hf"
expect_rc "a cache snapshot's bucket pulls" 0 "$bin" pull --store "$tmp/s_hf" "$P/hf/model"
same "a cache snapshot pulls bit-exact" 4 "$R/bf16/step_4" "$P/hf/model"

# A pull between a publisher's first anchor files and its HEAD: the listing
# shows a directory anchor whose files only HEAD names, so the pull says
# to retry (it once read "anchors/step_000004/" as a file), and makes nothing
cp -a "$tmp/s_hf" "$tmp/s_nohead" && rm -f "$tmp/s_nohead/HEAD"
for t in "$P/nohead/model" "$P/nohead/model.safetensors"; do
    mkdir -p "$P/nohead"
    expect_rc "no HEAD yet, a directory anchor listed: pull ${t##*/} fails" 1 "$bin" pull --store "$tmp/s_nohead" "$t"
    grep_out "no HEAD yet: pull ${t##*/} says only HEAD names the files, retry" "only HEAD names its files.*retry" "$tmp/err"
    [ ! -e "$t" ] && pass "no HEAD yet: nothing made at ${t##*/}" || fail "no HEAD yet: ${t##*/} was made"
done

# ---- (b) the store holds each anchor as one object per file under anchors/step_NNNNNN/ ----
for model in bf16 mixed; do
    S=$tmp/s_$model
    [ -e "$S/HEAD" ] || { fail "$model: no store to look at (publish failed)"; continue; }
    ks="0 3 6"; [ $model = bf16 ] && ks="0 3 6 7"
    for k in $ks; do
        a=$S/anchors/step_$(printf %06d $k)
        if [ -d "$a" ]; then pass "$model: anchor $k is a directory of objects"
        else fail "$model: no $a/ (anchors: $(ls "$S/anchors" 2>/dev/null | tr '\n' ' '))"; continue; fi
        same "$model: anchor $k's objects are the step's shards and files, byte for byte" $k "$R/$model/step_$k" "$a" --anchor
        [ ! -e "$a.safetensors" ] && pass "$model: anchor $k is not also one whole-model object" \
            || fail "$model: anchor $k also written as $a.safetensors"
    done
    missing=
    for f in $(cd "$R/$model/step_0" && ls); do grep -q -F "$f" "$S/HEAD" || missing="$missing $f"; done
    [ -z "$missing" ] && pass "$model: HEAD names every object of the anchors" || fail "$model: HEAD does not name$missing"
    for k in 1 2 4 5 8; do
        n=$(find "$S/deltas" -name "*step_$(printf %06d $k)*" 2>/dev/null | wc -l)
        [ "$n" -eq 1 ] && pass "$model: step $k is one delta object" || fail "$model: step $k: $n delta objects"
    done
done

# ---- (c) bad directories: exit 1, the file named, nothing written ----
B=$tmp/s_bad
mk model bf16 "$tmp/bad0"
expect_rc "a store for the bad directories (step 0)" 0 "$bin" publish --store "$B" --step 0 "${keep[@]}" --include notes.txt "$tmp/bad0"
for kind in $(mk names | sed -n 's/^bad: //p'); do
    mkdir -p "$tmp/bad/$kind"
    names=$(mk bad "$kind" "$tmp/bad/$kind/model") || { fail "make_dirs.py bad $kind"; continue; }
    listing "$B" > "$tmp/before"
    expect_rc "bad directory ($kind): refused with exit 1" 1 "$bin" publish --store "$B" --step 1 "${keep[@]}" --include notes.txt "$tmp/bad/$kind/model"
    pats=(); while read -r n; do pats+=(-e "$n"); done <<< "$names"
    if grep -q -i -F "${pats[@]}" "$tmp/err"; then pass "bad directory ($kind): the message names $(head -n 1 <<< "$names")"
    else fail "bad directory ($kind): the message names none of: $(tr '\n' ' ' <<< "$names"): $(head -c 400 "$tmp/err")"; fi
    listing "$B" | cmp -s - "$tmp/before" && pass "bad directory ($kind): the store unchanged" \
        || fail "bad directory ($kind): the store changed: $(listing "$B" | diff "$tmp/before" - | head -n 4 | tr '\n' ' ')"
done
expect_rc "a bad directory into a new store: refused" 1 "$bin" publish --store "$tmp/s_new" --step 0 "${keep[@]}" "$tmp/bad/missing-shard/model"
[ -z "$(ls -A "$tmp/s_new" 2>/dev/null)" ] && pass "a bad directory writes nothing into a new store" \
    || fail "a refused publish wrote into a new store: $(cd "$tmp/s_new" && find . | head -n 5 | tr '\n' ' ')"
mkdir -p "$P/bad"
expect_rc "the store still pulls step 0 after the refusals" 0 "$bin" pull --store "$B" "$P/bad/model"
same "the store's step 0 intact after the refusals" 0 "$tmp/bad0" "$P/bad/model"

# ---- (d) an engine reading the directory while it is followed, and while followers are killed ----
S=$tmp/s_follow; D=$tmp/follow/model; mkdir -p "$tmp/follow"
pubd() { "$bin" publish --store "$S" --step "$1" --anchor-every 5 "${keep[@]}" --include notes.txt "$R/bf16/step_$1" >/dev/null 2>"$tmp/pubd.err"; }
if ! pubd 0; then
    fail "(d) skipped: publish step 0: $(head -c 300 "$tmp/pubd.err")"
else
    rm -f "$tmp/stop"
    mk reader "$D" "$R/bf16" "$tmp/stop" "$tmp/reader.json" $cast & rpid=$!; bg+=($rpid)
    hook='echo "$WSYNC_STEP $(ls -d "$WSYNC_MODEL".step_* 2>/dev/null | wc -l) $(readlink "$WSYNC_MODEL")" >> "$HOOKLOG"'
    HOOKLOG=$tmp/hook.log timeout 90 "$bin" follow --store "$S" --interval 0.02 --until-step 20 --on-update "$hook" "$D" \
        >"$tmp/fo.out" 2>&1 & fpid=$!; bg+=($fpid)
    pub_ok=1
    for s in $(seq 1 20); do
        sleep 0.1
        pubd $s || { pub_ok=0; fail "publish step $s while following: $(head -c 300 "$tmp/pubd.err")"; }
    done
    wait $fpid; rc=$?
    [ $rc -eq 0 ] && pass "follow --until-step 20 exits 0" || fail "follow --until-step 20: exit $rc: $(tail -n 3 "$tmp/fo.out")"
    pulled_dir "follow to 20" "$D" 20
    same "follow: the directory holds step 20, bit-exact" 20 "$R/bf16/step_20" "$D"
    n_hook=$(wc -l < "$tmp/hook.log" 2>/dev/null || echo 0)
    [ "$n_hook" -ge 5 ] && pass "follow: one --on-update per update ($n_hook updates)" || fail "follow: $n_hook updates: $(tail -n 3 "$tmp/fo.out")"
    bad_hook=$(awk '$2 > 2 || $3 !~ ("step_0*" $1 "/?$") { print }' "$tmp/hook.log" 2>/dev/null | head -n 3)
    [ -z "$bad_hook" ] && pass "follow: after each update, DIR names that step and at most two versions remain" \
        || fail "follow: after an update (step, versions, link): $bad_hook"

    # SIGKILL part way: each kill lands at a random point of an update; the
    # next run cleans what the killed one left and goes on.
    t0=$(date +%s%N)
    mkdir -p "$tmp/probe"; "$bin" pull --store "$S" "$tmp/probe/model" >/dev/null 2>&1
    window=$(( ($(date +%s%N) - t0) / 1000000 + 10 ))
    before=0; after=0; left_seen=0
    for s in $(seq 21 30); do
        pubd $s || fail "publish step $s"
        "$bin" follow --store "$S" --interval 0.02 "$D" >/dev/null 2>&1 & kpid=$!; bg+=($kpid)
        ms_sleep $((RANDOM % window))
        kill -9 $kpid 2>/dev/null; wait $kpid 2>/dev/null
        ls_k=$(link_step "$D")
        if [ "$ls_k" = $((s - 1)) ]; then before=$((before + 1))
        elif [ "$ls_k" = "$s" ]; then after=$((after + 1))
        else fail "kill at step $s: DIR names step $ls_k, wanted $((s - 1)) or $s"; fi
        case $ls_k in [0-9]*) same "kill at step $s: the directory holds the step it names" "$ls_k" "$R/bf16/step_$ls_k" "$D" ;; esac
        [ -n "$(others "$D")" ] || [ "$(versions "$D")" -gt 2 ] && left_seen=$((left_seen + 1))
        t0=$(date +%s%N)
        expect_rc "restart after the kill at step $s (follow --until-step $s)" 0 \
            timeout 30 "$bin" follow --store "$S" --interval 0.02 --until-step $s "$D"
        w=$(( ($(date +%s%N) - t0) / 1000000 + 10 )); [ $w -gt $window ] && window=$w
        pulled_dir "the run after the kill at step $s cleaned up" "$D" $s
    done
    same "after the kills: step 30, bit-exact" 30 "$R/bf16/step_30" "$D"
    # What a run killed between the switch and the removal leaves, made for
    # certain: a third, older version (a copy of the previous one, renamed).
    prev=$(cd "$(dirname "$D")" && ls -d "$(basename "$D")".step_[0-9]* | grep -v -x "$(basename "$(readlink "$D")")" | head -n 1)
    if [ -n "$prev" ]; then
        cp -a "$(dirname "$D")/$prev" "$D.step_000019"
        expect_rc "pull when up to date, with a third version left by a killed run" 0 "$bin" pull --store "$S" "$D"
        pulled_dir "an up-to-date pull cleaned the killed run's version" "$D" 30
        # A run killed half way through removing an old version (its step
        # file already gone): the next run still removes what is left.
        cp -a "$(dirname "$D")/$prev" "$D.step_000018"
        expect_rc "pull killed (SIGKILL) half way through removing an old version" 137 \
            env WSYNC_TEST_DIE_IN_REMOVAL=1 "$bin" pull --store "$S" "$D"
        expect_rc "pull after the run killed during a removal" 0 "$bin" pull --store "$S" "$D"
        pulled_dir "the run after a kill during a removal cleaned it up" "$D" 30
    else
        fail "after the kills: no previous version kept beside step 30"
    fi
    [ $before -gt 0 ] && pass "some kills landed before the switch ($before; $after after)" \
        || fail "no kill landed before the switch (window $window ms): the kills did not test"
    [ $left_seen -gt 0 ] && pass "some kills left temporaries for the next run to clean ($left_seen)" \
        || echo "note: no kill left a temporary behind (window $window ms)"
    touch "$tmp/stop"; wait $rpid
    "$py" - "$tmp/reader.json" >"$tmp/rd" 2>&1 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("%d reads, %d errors, steps %s, %d vanished" % (r["reads"], r["n_errors"], r["steps"][:8] + ["..."] + r["steps"][-3:], r["vanished"]))
for e in r["errors"][:5]:
    print("  " + e)
sys.exit(0 if r["n_errors"] == 0 and r["reads"] > 20 and len(r["steps"]) >= 5 else 1)
PY
    [ $? -eq 0 ] && pass "the reader saw one whole step at every read ($(head -n 1 "$tmp/rd"))" \
        || fail "the reader: $(cat "$tmp/rd")"
fi

# ---- (e) single files: a single-file bucket pulls into a file; a one-shard directory too ----
S1=$tmp/s_file; mkdir -p "$P/e"
for k in 0 1 2; do
    expect_rc "single-file publish, step $k" 0 "$bin" publish --store "$S1" --step $k "${keep[@]}" "$R/single/step_$k/model.safetensors"
done
for dst in "$P/e/f.safetensors" "$P/e/plain"; do
    expect_rc "a single-file bucket pulls into $(basename "$dst")" 0 "$bin" pull --store "$S1" "$dst"
    [ -f "$dst" ] && [ ! -L "$dst" ] && pass "$(basename "$dst"): a plain file" || fail "$(basename "$dst"): not a plain file"
    same_file "$(basename "$dst"): bit-exact at step 2" 2 "$R/single/step_2/model.safetensors" "$dst"
done
S2=$tmp/s_one
for k in 0 1 2; do
    expect_rc "a one-shard directory (model.safetensors) published, step $k" 0 \
        "$bin" publish --store "$S2" --step $k "${keep[@]}" "$R/single/step_$k"
    grep -q "^step $k" "$tmp/out" || break
done
expect_rc "a one-shard directory's bucket pulls into a .safetensors path" 0 "$bin" pull --store "$S2" "$P/e/one.safetensors"
[ -f "$P/e/one.safetensors" ] && [ ! -L "$P/e/one.safetensors" ] && pass "one.safetensors: a plain file" \
    || fail "one.safetensors: not a plain file"
same_file "one.safetensors: bit-exact at step 2" 2 "$R/single/step_2/model.safetensors" "$P/e/one.safetensors"
expect_rc "a one-shard directory's bucket pulls into a directory" 0 "$bin" pull --store "$S2" "$P/e/onedir"
pulled_dir "one-shard directory" "$P/e/onedir" 2
same "one-shard directory: bit-exact, config.json identical" 2 "$R/single/step_2" "$P/e/onedir"

# ---- (f) a bucket of the old format (HEAD version 1, trl-v1 deltas, written by wsync 0.2.0) ----
cp -r tests/fixtures/data/chain_v1 "$tmp/v1"; listing "$tmp/v1" > "$tmp/before"
mk steps flux "$R/flux" 0 3
expect_rc "old format: log" 0 "$bin" log --store "$tmp/v1"
grep_out "old format: head step 3" "head step 3" "$tmp/out"
for k in 1 3; do
    expect_rc "old format: pull --step $k into a file" 0 "$bin" pull --store "$tmp/v1" --step $k "$P/e/v1.$k.safetensors"
    if mk compare-file --f32-as-bf16 $k "$R/flux/step_$k/model.safetensors" "$P/e/v1.$k.safetensors" >"$tmp/cmp" 2>&1
    then pass "old format: step $k bit-exact (F32 as the old publisher cast it)"; else fail "old format: step $k: $(head -n 4 "$tmp/cmp")"; fi
done
listing "$tmp/v1" | cmp -s - "$tmp/before" && pass "old format: the bucket untouched" || fail "old format: the bucket changed"

# ---- (g) wsync gen --shards: a generated checkpoint directory, and the directory bench on it ----
G=$tmp/gen; mkdir -p "$G/one"
expect_rc "gen --shards 3: a directory" 0 "$bin" gen --model tiny --step 2 --shards 3 -o "$G/dir"
expect_rc "gen: the same step as one file" 0 "$bin" gen --model tiny --step 2 -o "$G/one/model.safetensors"
[ -f "$G/dir/model-00003-of-00003.safetensors" ] && [ -f "$G/dir/model.safetensors.index.json" ] && [ -f "$G/dir/config.json" ] \
    && pass "gen --shards 3: three shards, the index and config.json" || fail "gen --shards 3: $(ls "$G/dir" | tr '\n' ' ')"
"$py" "$root/bench/bench_dir_hash.py" "$G/dir" | grep -v -e '^model.safetensors.index.json ' -e '^config.json ' >"$G/h.dir"
"$py" "$root/bench/bench_dir_hash.py" "$G/one" >"$G/h.one"
[ -s "$G/h.one" ] && cmp -s "$G/h.dir" "$G/h.one" && pass "gen --shards: every tensor the single file's, bit for bit" \
    || fail "gen --shards: the tensors differ from the single file's: $(diff "$G/h.dir" "$G/h.one" | head -n 3)"
if "$py" - "$G/dir" <<'PYEOF' >"$tmp/out" 2>&1
import json, struct, sys, glob, os
d = sys.argv[1]
ix = json.load(open(os.path.join(d, "model.safetensors.index.json")))
held, total = {}, 0
for p in glob.glob(os.path.join(d, "*.safetensors")):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
    for k, v in h.items():
        if k != "__metadata__":
            held[k] = os.path.basename(p); total += v["data_offsets"][1] - v["data_offsets"][0]
    assert h["__metadata__"]["step"] == "2", h["__metadata__"]
assert ix["weight_map"] == held, "weight_map is not where the tensors are"
assert ix["metadata"]["total_size"] == total, (ix["metadata"], total)
PYEOF
then pass "gen --shards: the index's weight_map and total_size are the shards', every shard says step 2"
else fail "gen --shards: index: $(tail -n 2 "$tmp/out")"; fi
expect_rc "gen --shards 0 refused" 2 "$bin" gen --model tiny --step 0 --shards 0 -o "$G/bad"
if "$root/bench/bench_dir.sh" "$bin" --model tiny --shards 3 --steps 3 --work "$G/bench" >"$tmp/out" 2>&1 &&
    [ "$(grep -c 'every tensor equal to the published one' "$tmp/out")" -eq 4 ]; then
    pass "bench_dir.sh on tiny: publish and pull 4 steps, every pulled tensor the published one"
else fail "bench_dir.sh on tiny: $(tail -n 4 "$tmp/out")"; fi

# ---- (h) issue 41's defects, each checked with real processes ----
H=$tmp/h; mkdir -p "$H"
for s in 1 2 3 4 5 6 7; do "$bin" gen --model tiny --step $s --shards 2 -o "$H/d$s" >/dev/null 2>&1 || fail "gen d$s"; done
# 1. Overlapping runs: three pulls of one directory at once, after each
# publish, then three followers at once: every run exits 0, the link always
# resolves to a whole version of the newest step, and a dangling link is
# never taken for a file.
"$bin" publish --store "$H/S" "$H/d1" >/dev/null 2>&1 || fail "publish d1"
"$bin" pull --store "$H/S" "$H/m" >/dev/null 2>&1 || fail "pull m"
ok=1
for s in 2 3 4 5; do
    "$bin" publish --store "$H/S" "$H/d$s" >/dev/null 2>&1 || fail "publish d$s"
    pids=()
    for k in 1 2 3; do "$bin" pull --store "$H/S" "$H/m" >"$H/o$k" 2>&1 & pids+=($!); bg+=($!); done
    for k in 0 1 2; do wait "${pids[$k]}" || { ok=0; echo "pull $((k + 1)) of step $s: $(tail -n 2 "$H/o$((k + 1))")"; }; done
    if [ -d "$H/m/" ] && grep -q "\"step\":$s," "$H/m/wsync-step.json" 2>/dev/null && [ -f "$H/m/config.json" ]; then :
    else ok=0; echo "after three pulls of step $s: m -> $(readlink "$H/m"), $(cat "$H/m/wsync-step.json" 2>&1)"; fi
done
[ $ok = 1 ] && pass "1: three overlapping pulls of one directory, four times: each exits 0, the link whole" \
    || fail "1: overlapping pulls broke the directory"
"$bin" publish --store "$H/S" "$H/d6" >/dev/null 2>&1 || fail "publish d6"
pids=()
for k in 1 2 3; do
    timeout 30 "$bin" follow --store "$H/S" --interval 0.05 --until-step 7 "$H/m" >"$H/o$k" 2>&1 & pids+=($!); bg+=($!)
done
sleep 0.5
"$bin" publish --store "$H/S" "$H/d7" >/dev/null 2>&1 || fail "publish d7"
ok=1
for k in 0 1 2; do wait "${pids[$k]}" || { ok=0; echo "follow $((k + 1)): $(tail -n 2 "$H/o$((k + 1))")"; }; done
[ $ok = 1 ] && [ -d "$H/m/" ] && grep -q '"step":7,' "$H/m/wsync-step.json" && cmp -s "$H/d7/config.json" "$H/m/config.json" \
    && pass "1: three overlapping follows: each exits 0, the link a whole step 7" \
    || fail "1: overlapping follows: m -> $(readlink "$H/m"): $(cat "$H/m/wsync-step.json" 2>&1)"
[ "$(versions "$H/m")" -le 2 ] && [ -z "$(others "$H/m")" ] && pass "1: at most two versions, nothing else left" \
    || fail "1: beside m: $(cd "$H" && ls -d m.* | tr '\n' ' ')"
# a dangling link (its version removed by hand): never replaced by a file
rm -rf "$H/$(readlink "$H/m")"
expect_rc "1: a pull over a dangling link to a version" 0 "$bin" pull --store "$H/S" "$H/m"
[ -L "$H/m" ] && [ -d "$H/m/" ] && grep -q '"step":7,' "$H/m/wsync-step.json" && cmp -s "$H/d7/config.json" "$H/m/config.json" \
    && pass "1: the dangling link rebuilt as a directory at step 7" \
    || fail "1: after a pull over a dangling link, m is $(ls -ld "$H/m" 2>&1)"
ln -sfn elsewhere "$H/m2"
expect_rc "1: a dangling link to something not ours is refused" 1 "$bin" pull --store "$H/S" "$H/m2"
[ "$(readlink "$H/m2")" = elsewhere ] && [ ! -e "$H/elsewhere" ] && pass "1: the foreign link left alone" \
    || fail "1: m2 is $(ls -ld "$H/m2")"
# 2. A version without its files: pull --step 3 after retention dropped the
# anchor before it takes config.json and the index from the previous
# version; with no previous version and no anchor, the pull fails and the
# link stays where it was.
"$bin" publish --store "$H/S2" --anchor-every 4 --retain 3 "$H/d1" >/dev/null 2>&1 || fail "2: publish d1"
"$bin" pull --store "$H/S2" "$H/p2" >/dev/null 2>&1 || fail "2: pull step 1"
"$bin" publish --store "$H/S2" --anchor-every 4 --retain 3 "$H/d2" >/dev/null 2>&1 || fail "2: publish d2"
"$bin" pull --store "$H/S2" "$H/p2" >/dev/null 2>&1 || fail "2: pull step 2"
for s in 3 4 5; do "$bin" publish --store "$H/S2" --anchor-every 4 --retain 3 "$H/d$s" >/dev/null 2>&1 || fail "2: publish d$s"; done
"$bin" log --store "$H/S2" --json >"$tmp/out" 2>&1
if ! grep -q '"kind": "anchor", "step": 1,' "$tmp/out" && grep -q '"kind": "delta", "step": 3,' "$tmp/out"; then
    pass "2: retention dropped anchor 1 and kept delta 3"
else fail "2: the chain: $(head -c 400 "$tmp/out")"; fi
expect_rc "2: pull --step 3 with no anchor at or before it" 0 "$bin" pull --store "$H/S2" --step 3 "$H/p2"
grep -q '"step":3,' "$H/p2/wsync-step.json" && cmp -s "$H/d3/config.json" "$H/p2/config.json" &&
    cmp -s "$H/d3/model.safetensors.index.json" "$H/p2/model.safetensors.index.json" \
    && pass "2: step 3 holds config.json and the index" \
    || fail "2: step 3's version holds: $(ls "$H/p2/" | tr '\n' ' ')"
for f in "$H"/d3/*.safetensors; do
    "$bin" verify "$f" "$H/p2/${f##*/}" >/dev/null 2>&1 || fail "2: ${f##*/} differs from the published step 3"
done
expect_rc "2: a first pull --step 3 with no anchor at or before it fails" 1 "$bin" pull --store "$H/S2" --step 3 "$H/q2"
[ ! -e "$H/q2" ] && [ ! -L "$H/q2" ] && pass "2: nothing made at q2" || fail "2: q2 is $(ls -ld "$H/q2")"
# 4. The reserved name: a pulled directory relayed with --include '*.json'
# does not carry wsync-step.json, and the relay bucket pulls, again and again.
"$bin" pull --store "$H/S" "$H/p4" >/dev/null 2>&1 || fail "4: pull p4"
expect_rc "4: a pulled directory relayed with --include '*.json'" 0 "$bin" publish --store "$H/R" --step 7 \
    --include '*.json' "$H/p4"
grep_out "4: publish says wsync-step.json is not published" "wsync-step.json is not published" "$tmp/err"
[ ! -e "$H/R/anchors/step_000007/wsync-step.json" ] && pass "4: the relay's anchor holds no wsync-step.json" \
    || fail "4: the relay's anchor carries wsync-step.json"
expect_rc "4: the relay bucket pulls" 0 "$bin" pull --store "$H/R" "$H/r"
"$bin" publish --store "$H/R" --step 8 --include '*.json' "$H/d6" >/dev/null 2>&1
expect_rc "4: and pulls its next step" 0 "$bin" pull --store "$H/R" "$H/r"
grep -q '"step":8,' "$H/r/wsync-step.json" && pass "4: the relay's pull at step 8" || fail "4: r: $(cat "$H/r/wsync-step.json")"
# 5. A large index: 20,000 shard names (none of them there) are refused in
# n log n, not after re-sorting the list at each new name (12-16 s).
mkdir -p "$H/big"
"$py" - "$H/big/model.safetensors.index.json" <<'PYEOF'
import json, sys
n = 20000
wm = {"t%05d" % i: "s-%05d-of-%05d.safetensors" % (i, n) for i in range(n)}
json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, open(sys.argv[1], "w"))
PYEOF
t0=$(date +%s%N)
expect_rc "5: an index of 20,000 missing shards refused" 1 "$bin" publish --store "$H/B5" --step 1 "$H/big"
ms=$((($(date +%s%N) - t0) / 1000000))
grep_out "5: the missing shard named" "missing shard" "$tmp/err"
[ "$ms" -lt 3000 ] && pass "5: refused in $ms ms" || fail "5: the refusal took $ms ms (the list sorted at each name?)"
[ ! -e "$H/B5" ] && pass "5: nothing written" || fail "5: the store was created"
# 6. Shard metadata: a pulled step is the published directory byte for byte
# (sha256sum of every file), at an anchor and at a delta: the trainer's
# __metadata__ keys come back in their order with their values, "step" the
# pulled step (d: gen's shards; e: keys in no sorted order). A trainer that
# wrote no "step" gets its keys in order and "step" last: every pulled shard
# claims its step.
same_bytes() { # name, published dir, pulled dir: every file identical, nothing else but wsync-step.json
    local name=$1 pub=$2 got=$3 f bad=
    [ -d "$got/" ] || { fail "$name: $got is no directory"; return; }
    for f in "$pub"/*; do
        [ "$(sha256sum <"$f")" = "$(sha256sum <"$got/${f##*/}" 2>/dev/null)" ] || bad="$bad ${f##*/}"
    done
    for f in "$got"/*; do [ -e "$pub/${f##*/}" ] || [ "${f##*/}" = wsync-step.json ] || bad="$bad +${f##*/}"; done
    if [ -z "$bad" ]; then pass "$name"
    else fail "$name: differ:$bad ($(head -c 300 "$got/${bad## }" 2>/dev/null | tail -c +9 | tr -d '\0' | head -c 160))"; fi
}
"$py" - "$root/tests/cli" "$H/d1" "$H/e1" "$H/d2" "$H/e2" <<'PYEOF'
import os, sys
sys.path.insert(0, sys.argv[1])
import make_dirs as md
for src, dst in ((sys.argv[2], sys.argv[3]), (sys.argv[4], sys.argv[5])):
    os.makedirs(dst)
    for fn in sorted(os.listdir(src)):
        with open(os.path.join(src, fn), "rb") as f:
            raw = f.read()
        if fn.endswith(".safetensors"):
            _, meta, ts, _ = md.read(os.path.join(src, fn))
            raw = md.st_bytes([(n,) + tuple(t) for n, t in ts.items()],
                              {"model": "tiny", "format": "pt", "run": "a\"b\\c/d", "step": meta["step"]})
        with open(os.path.join(dst, fn), "wb") as f:
            f.write(raw)
PYEOF
grep -q '"model":"tiny"' "$H/d1/model-00001-of-00002.safetensors" && grep -q '"run":"a' "$H/e1/model-00001-of-00002.safetensors" \
    && pass "6: the trainer's shards carry metadata keys of their own" || fail "6: no trainer metadata in d1/e1"
for c in d e; do
    "$bin" publish --store "$H/S6$c" --step 1 --anchor-every 10 "${keep[@]}" "$H/${c}1" >/dev/null 2>&1 || fail "6: publish ${c}1"
    "$bin" publish --store "$H/S6$c" --step 2 --anchor-every 10 "${keep[@]}" "$H/${c}2" >"$tmp/out" 2>&1 || fail "6: publish ${c}2"
    grep_out "6: $c: step 2 is a delta" "^step 2: delta from 1" "$tmp/out"
    for s in 1 2; do
        mkdir -p "$H/q6$c$s"
        expect_rc "6: $c: pull --step $s" 0 "$bin" pull --store "$H/S6$c" --step $s "$H/q6$c$s/m"
        same_bytes "6: $c: pulled step $s is the published directory byte for byte" "$H/$c$s" "$H/q6$c$s/m"
    done
    expect_rc "6: $c: pull forward from 1 to 2" 0 "$bin" pull --store "$H/S6$c" --step 2 "$H/q6${c}1/m"
    same_bytes "6: $c: pulled forward to 2, byte for byte" "$H/${c}2" "$H/q6${c}1/m"
done
mkdir -p "$H/f1" "$H/q6f"
"$py" - "$root/tests/cli" "$H/d1" "$H/f1" <<'PYEOF'
import os, sys
sys.path.insert(0, sys.argv[1])
import make_dirs as md
for fn in os.listdir(sys.argv[2]):
    with open(os.path.join(sys.argv[2], fn), "rb") as f:
        raw = f.read()
    if fn.endswith(".safetensors"):
        ts = md.read(os.path.join(sys.argv[2], fn))[2]
        raw = md.st_bytes([(n,) + tuple(t) for n, t in ts.items()], {"model": "tiny", "format": "pt"})
    with open(os.path.join(sys.argv[3], fn), "wb") as f:
        f.write(raw)
PYEOF
"$bin" publish --store "$H/S6f" --step 5 "${keep[@]}" "$H/f1" >/dev/null 2>&1 || fail "6: publish f1"
expect_rc "6: pull a step whose trainer wrote no \"step\"" 0 "$bin" pull --store "$H/S6f" "$H/q6f/m"
want='{"__metadata__":{"model":"tiny","format":"pt","step":"5"},'
[ "$(tail -c +9 "$H/q6f/m/model-00001-of-00002.safetensors" | head -c ${#want})" = "$want" ] \
    && pass "6: no \"step\" from the trainer: its keys in order, then \"step\"" \
    || fail "6: no \"step\" from the trainer: $(head -c 120 "$H/q6f/m/model-00001-of-00002.safetensors" | tail -c +9)"

# a trainer's "wsync" key is the anchor's own: refused, the shard named, nothing published
mkdir -p "$H/g1"
"$py" - "$root/tests/cli" "$H/d1" "$H/g1" <<'PYEOF'
import os, sys
sys.path.insert(0, sys.argv[1])
import make_dirs as md
for fn in os.listdir(sys.argv[2]):
    with open(os.path.join(sys.argv[2], fn), "rb") as f:
        raw = f.read()
    if fn.endswith(".safetensors"):
        ts = md.read(os.path.join(sys.argv[2], fn))[2]
        raw = md.st_bytes([(n,) + tuple(t) for n, t in ts.items()], {"format": "pt", "wsync": "x"})
    with open(os.path.join(sys.argv[3], fn), "wb") as f:
        f.write(raw)
PYEOF
expect_rc "6: a shard whose __metadata__ holds \"wsync\" is refused" 1 "$bin" publish --store "$H/S6g" --step 1 "$H/g1"
grep_out "6: the refusal names the shard and the key" 'model-00001-of-00002.safetensors.*"wsync"' "$tmp/err"
[ -z "$(ls -A "$H/S6g" 2>/dev/null)" ] && pass "6: nothing published" || fail "6: S6g holds $(ls -A "$H/S6g")"

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
