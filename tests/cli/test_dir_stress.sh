#!/usr/bin/env bash
# Model directories under load (issue 41): a publisher of 30 steps of a small
# sharded checkpoint (3 shards, the index, config, generation config and
# tokenizer files), three overlapping `wsync follow`s of one directory, and
# a reader that keeps resolving the link (once per read, as an engine loads)
# and checks every version it sees is whole and unmixed: wsync-step.json's
# step is a published one and the link's name says it, the files are that
# step's and no others, each shard byte for byte the trainer's at that step
# (its __metadata__ "step" the same), the index names every shard, the
# carried files are there, byte for byte; the link never goes back. Followers
# are SIGKILLed at random moments (a fixed seed, printed, or STRESS_SEED);
# after each kill a `wsync pull` of the same directory must exit 0 and leave
# a whole version, and a follower is started again in its place. At the end
# the link is step 30, whole, with at most two versions and no leftovers
# beside it. Pure Python (stdlib) for the files and the checks.
# usage: tests/cli/test_dir_stress.sh path/to/wsync
set -u
cd "$(dirname "$0")/../.."
bin=${1:-build/wsync}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
py=/usr/bin/python3; [ -x $py ] || py=python3
tmp=$(mktemp -d /tmp/wsync-dirstress.XXXXXX)
bg=()   # background processes this script started
cleanup() {
    local p
    for p in "${bg[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
# a copy: the tool runs some hundred times here, and a rebuild meanwhile must not break a run
cp "$bin" "$tmp/wsync" || { echo "FAIL no tool at $bin"; echo "summary: 0 passed, 1 failed"; exit 1; }
bin=$tmp/wsync
passed=0; failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
STEPS=30
seed=${STRESS_SEED:-$(( $(date +%s) % 100000 ))}
echo "test_dir_stress: seed $seed (STRESS_SEED=$seed reruns these kill moments)"
t_start=$(date +%s%N)

cat > "$tmp/dirs.py" <<'EOF'
"""make ROOT N: ROOT/step_K (K = 1..N) and ROOT/manifest.json;
once LINK MANIFEST: exit 0 when LINK resolves to a whole version (prints its step);
reader LINK MANIFEST STOP REPORT: reads LINK until STOP exists, REPORT as JSON."""
import hashlib, json, os, random, struct, sys, time

INDEX, STEP_FILE = "model.safetensors.index.json", "wsync-step.json"
SHARDS = ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]
CARRIED = {
    "config.json": b'{\n  "architectures": ["StressForCausalLM"],\n  "hidden_size": 64\n}\n',
    "generation_config.json": b'{\n  "eos_token_id": 2\n}\n',
    "tokenizer.json": json.dumps({"model": {"type": "WordLevel", "vocab": {str(i): i for i in range(100)}}}).encode(),
    "tokenizer_config.json": b'{"model_max_length": 256}\n',
}
TENSORS = [("model.embed_tokens.weight", [128, 64], 0), ("model.layers.0.mlp.up_proj.weight", [96, 64], 0),
           ("model.layers.0.self_attn.q_proj.weight", [64, 64], 1), ("model.layers.0.mlp.down_proj.weight", [64, 96], 1),
           ("model.norm.weight", [64], 2), ("lm_head.weight", [128, 64], 2)]


def st_bytes(ts, meta):
    ts = sorted(ts)
    header, off = {"__metadata__": meta}, 0
    for name, shape, b in ts:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(t[2] for t in ts)


def make(root, n):
    rng = random.Random(4141)
    data = {}
    for name, shape, _ in TENSORS:
        count = 1
        for d in shape:
            count *= d
        data[name] = bytearray(rng.getrandbits(8) for _ in range(2 * count))
    wmap = {name: SHARDS[s] for name, _, s in TENSORS}
    index = (json.dumps({"metadata": {"total_size": sum(len(b) for b in data.values())}, "weight_map": wmap},
                        indent=2, sort_keys=True) + "\n").encode()
    manifest = {"carried": {fn: hashlib.sha256(b).hexdigest() for fn, b in CARRIED.items()},
                "index": hashlib.sha256(index).hexdigest(), "steps": {}}
    for k in range(1, n + 1):
        for name in sorted(data):                   # about 2% of the bytes change a step
            b = data[name]
            for _ in range(len(b) // 50):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        d = os.path.join(root, "step_%d" % k)
        os.makedirs(d)
        files = dict(CARRIED)
        files[INDEX] = index
        for s, sn in enumerate(SHARDS):
            files[sn] = st_bytes([(nm, sh, bytes(data[nm])) for nm, sh, si in TENSORS if si == s],
                                 {"format": "pt", "model": "stress", "step": str(k)})
        for fn, b in files.items():
            with open(os.path.join(d, fn), "wb") as f:
                f.write(b)
        manifest["steps"][str(k)] = {sn: hashlib.sha256(files[sn]).hexdigest() for sn in SHARDS}
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def check_version(link, man):
    """(step or None, problems or None when the version vanished while read)."""
    try:
        fd = os.open(link, os.O_RDONLY | os.O_DIRECTORY)   # resolves the link once: one version
    except FileNotFoundError:
        return None, ["%s does not resolve" % link]
    raw = {}
    try:
        target = os.readlink("/proc/self/fd/%d" % fd)      # the version opened (not the link now)
        names = os.listdir(fd)
        for fn in names:
            with os.fdopen(os.open(fn, os.O_RDONLY, dir_fd=fd), "rb") as fo:
                raw[fn] = fo.read()
        gone = os.fstat(fd).st_nlink == 0                  # removed while we held it
    except FileNotFoundError:
        return None, None                                   # pruned while we read it: not a defect
    finally:
        os.close(fd)
    if gone:
        return None, None
    try:
        step = json.loads(raw[STEP_FILE])["step"]
    except (KeyError, ValueError, TypeError) as e:
        return None, ["no readable %s (%r) in %s; files %s" % (STEP_FILE, e, target, sorted(raw))]
    want = man["steps"].get(str(step))
    if want is None:
        return step, ["%s says step %r, never published" % (STEP_FILE, step)]
    probs = []
    base = os.path.basename(target.rstrip("/"))
    prefix = os.path.basename(link) + ".step_"
    if not base.startswith(prefix) or int(base[len(prefix):].split(".")[0]) != step:
        probs.append("the link names %s, %s says step %d" % (target, STEP_FILE, step))
    expect = set(SHARDS) | set(CARRIED) | {INDEX, STEP_FILE}
    if set(raw) != expect:
        probs.append("files %s; missing %s, extra %s" % (len(raw), sorted(expect - set(raw)), sorted(set(raw) - expect)))
    if INDEX in raw:
        try:
            named = set(json.loads(raw[INDEX])["weight_map"].values())
            if named != set(SHARDS) or not named <= set(raw):
                probs.append("the index names %s, the version holds %s" % (sorted(named), sorted(n for n in raw if n.endswith(".safetensors"))))
        except (KeyError, ValueError, AttributeError) as e:
            probs.append("the index does not parse: %r" % e)
        if hashlib.sha256(raw[INDEX]).hexdigest() != man["index"]:
            probs.append("the index differs from the trainer's")
    for fn in CARRIED:
        if fn in raw and hashlib.sha256(raw[fn]).hexdigest() != man["carried"][fn]:
            probs.append("%s differs from the trainer's" % fn)
    for sn in SHARDS:
        if sn not in raw:
            continue
        b = raw[sn]
        try:
            n = struct.unpack("<Q", b[:8])[0]
            meta = json.loads(b[8:8 + n]).get("__metadata__") or {}
        except (struct.error, ValueError) as e:
            probs.append("%s does not parse: %r" % (sn, e))
            continue
        if meta.get("step") != str(step):
            probs.append("%s claims step %r in a version of step %d" % (sn, meta.get("step"), step))
        if hashlib.sha256(b).hexdigest() != want[sn]:
            other = [k for k, v in man["steps"].items() if v[sn] == hashlib.sha256(b).hexdigest()]
            probs.append("%s is not step %d's bytes (it is step %s's)" % (sn, step, other or "no step"))
    return step, probs


def main(argv):
    if argv[1] == "make":
        make(argv[2], int(argv[3]))
        return 0
    with open(argv[3]) as f:
        man = json.load(f)
    if argv[1] == "once":
        for _ in range(50):
            step, probs = check_version(argv[2], man)
            if probs is not None:
                break
        if probs:
            print("; ".join(probs)[:800])
            return 1
        print(step)
        return 0
    link, stop, report = argv[2], argv[4], argv[5]
    seen, errors = [], []
    reads = absent = vanished = 0
    while not os.path.exists(stop):
        if not os.path.lexists(link):
            absent += 1
            time.sleep(0.003)
            continue
        step, probs = check_version(link, man)
        if probs is None:
            vanished += 1
            continue
        reads += 1
        if step is not None and seen and step < seen[-1]:
            probs = probs + ["step %d after step %d: the link went back" % (step, seen[-1])]
        if probs:
            errors.append("read %d (step %s): %s" % (reads, step, "; ".join(probs)[:500]))
        if step is not None and (not seen or seen[-1] != step):
            seen.append(step)
    with open(report, "w") as f:
        json.dump({"reads": reads, "absent": absent, "vanished": vanished, "steps": seen,
                   "errors": errors[:10], "n_errors": len(errors)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
EOF

if ! "$py" "$tmp/dirs.py" make "$tmp/trainer" $STEPS 2>"$tmp/make.err"; then
    fail "making $STEPS steps of the checkpoint: $(head -c 300 "$tmp/make.err")"
    echo "summary: $passed passed, $failed failed"; exit 1
fi
S=$tmp/store; mkdir -p "$tmp/serve"; M=$tmp/serve/model; MAN=$tmp/trainer/manifest.json
whole() { "$py" "$tmp/dirs.py" once "$M" "$MAN"; }   # prints the step, or what is wrong

# the checks themselves, on fake versions: a whole one passes; a shard of
# another step, a missing carried file, a link naming another step do not
fake() { # step, the link's step: a fake version from the trainer's files
    rm -rf "$tmp/fake"; mkdir -p "$tmp/fake/model.step_$2"
    cp "$tmp/trainer/step_$1"/* "$tmp/fake/model.step_$2/"
    printf '{"step":%d,"state":"0000000000000000"}' "$1" > "$tmp/fake/model.step_$2/wsync-step.json"
    ln -s "model.step_$2" "$tmp/fake/model"
}
fake_rejected() { # name
    if "$py" "$tmp/dirs.py" once "$tmp/fake/model" "$MAN" >/dev/null 2>&1; then fail "the checks: $1 passed"
    else pass "the checks: $1 is caught"; fi
}
fake 3 3
if got=$("$py" "$tmp/dirs.py" once "$tmp/fake/model" "$MAN" 2>&1) && [ "$got" = 3 ]; then pass "the checks: a whole fake version passes"
else fail "the checks: a whole fake version: $got"; fi
fake 3 3; cp "$tmp/trainer/step_4/model-00002-of-00003.safetensors" "$tmp/fake/model.step_3/"
fake_rejected "a shard of step 4 in a version of step 3"
fake 3 3; rm "$tmp/fake/model.step_3/config.json"; fake_rejected "a version without config.json"
fake 3 2; fake_rejected "a link naming step 2 to a version of step 3"

# the reader, started before anything exists
"$py" "$tmp/dirs.py" reader "$M" "$MAN" "$tmp/stop" "$tmp/report.json" 2>"$tmp/reader.err" & reader=$!; bg+=($reader)

# three followers of one directory, started before the store exists (--wait)
declare -a fpid
nf=0    # follower runs started (the tool itself: a SIGKILL must reach it, not a wrapper)
follower() { # slot
    "$bin" follow --store "$S" --wait --interval 0.03 --until-step $STEPS "$M" >"$tmp/follow$nf.out" 2>&1 &
    fpid[$1]=$!; bg+=($!); nf=$((nf + 1))
}
for k in 0 1 2; do follower $k; done

# the publisher, in the background, paced a little
(
    for k in $(seq 1 $STEPS); do
        "$bin" publish --store "$S" --anchor-every 6 "$tmp/trainer/step_$k" >"$tmp/pub$k.out" 2>&1 ||
            { echo "publish step $k: $(head -c 300 "$tmp/pub$k.out")" > "$tmp/pub.failed"; exit 1; }
        sleep 0.08
    done
) & publisher=$!; bg+=($publisher)

# the killer: SIGKILL a follower at a random moment (every other time one
# caught writing a version, where one is), pull, check, start another;
# from the first HEAD on (before it, the chain is a listing, where a
# directory's anchor cannot be read)
for i in $(seq 400); do [ -e "$S/HEAD" ] && break; sleep 0.025; done
RANDOM=$seed
kills=0; mid=0; pull_bad=
writing() { # the slot of a follower caught writing a version (PATH.step_N.tmp.PID), polled a little while
    local i f k
    for ((i = 0; i < 2000; i++)); do
        for f in "$tmp/serve"/model.step_*.tmp.*; do
            [ -e "$f" ] || continue
            for k in 0 1 2; do [ "${fpid[$k]}" = "${f##*.tmp.}" ] && { echo $k; return; }; done
        done
    done
}
while kill -0 $publisher 2>/dev/null; do
    sleep "0.$(printf '%02d' $((RANDOM % 30 + 5)))"
    slot=$((RANDOM % 3))
    if [ $((kills % 2)) -eq 1 ]; then   # every other kill: one caught writing, where one is
        w=$(writing); [ -n "$w" ] && slot=$w
    fi
    p=${fpid[$slot]}
    if kill -0 "$p" 2>/dev/null; then
        # writing a version right now (PATH.step_N.tmp.PID beside the link)?
        ls -A "$tmp/serve" 2>/dev/null | grep -q "\.tmp\.$p\$" && mid=$((mid + 1))
        kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null
        kills=$((kills + 1))
        if ! timeout 30 "$bin" pull --store "$S" "$M" >"$tmp/pull.out" 2>&1; then
            pull_bad+="after kill $kills: pull exit $(tail -n 2 "$tmp/pull.out"); "
        elif ! got=$(whole 2>&1); then
            pull_bad+="after kill $kills: $got; "
        fi
        follower $slot
    fi
done
wait $publisher; pub_rc=$?
if [ $pub_rc -eq 0 ] && [ ! -e "$tmp/pub.failed" ]; then pass "publisher: $STEPS steps published while followed"
else fail "publisher: $(cat "$tmp/pub.failed" 2>/dev/null)"; fi

# the followers still running reach step 30 and exit 0
frc=0; fbad=
limit=600; [ $pub_rc -eq 0 ] && [ ! -e "$tmp/pub.failed" ] || limit=30   # 60 s at most, 3 s without step 30
for i in $(seq $limit); do
    kill -0 "${fpid[0]}" 2>/dev/null || kill -0 "${fpid[1]}" 2>/dev/null || kill -0 "${fpid[2]}" 2>/dev/null || break
    sleep 0.1
done
for k in 0 1 2; do
    kill -9 "${fpid[$k]}" 2>/dev/null && fbad+="follower in slot $k still running after $((limit / 10)) s; "
    wait "${fpid[$k]}"; rc=$?
    [ $rc -eq 0 ] || { frc=$rc; fbad+="follower in slot $k: exit $rc: $(tail -n 2 "$tmp/follow$((nf - 3 + k)).out" 2>/dev/null); "; }
done
[ $frc -eq 0 ] && [ -z "$fbad" ] && pass "three overlapping followers ($nf runs, $kills killed): the last three exit 0 at step $STEPS" \
    || fail "followers: $fbad"
if [ $kills -ge 3 ] && [ -z "$pull_bad" ]; then pass "$kills followers SIGKILLed at random moments ($mid while writing a version): each next pull exits 0 and leaves a whole version"
elif [ -n "$pull_bad" ]; then fail "pull after a SIGKILL: ${pull_bad:0:800}"
else fail "only $kills kills happened (wanted 3 or more): the publisher finished too soon"; fi

touch "$tmp/stop"; wait $reader
r=$("$py" -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["reads"], len(r["steps"]), r["n_errors"], r["vanished"], r["steps"][-1] if r["steps"] else "none")' "$tmp/report.json" 2>&1)
read -r reads nsteps nerr vanished last <<< "$r"
if [ "${nerr:-x}" = 0 ] && [ "${reads:-0}" -ge 20 ] && [ "${nsteps:-0}" -ge 5 ] && [ "$last" = $STEPS ]; then
    pass "reader: $reads reads of $nsteps versions, each whole and unmixed, never back ($vanished pruned while read), last step $last"
else
    fail "reader: $r: $("$py" -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["errors"]))' "$tmp/report.json" 2>&1 | head -c 1500) $(head -c 300 "$tmp/reader.err")"
fi

# the end state, after one more pull
timeout 30 "$bin" pull --store "$S" "$M" >"$tmp/pull.out" 2>&1; rc=$?
got=$(whole 2>&1)
left=$(cd "$tmp/serve" && ls -A | grep -v -x -e model -e '.model.wsync-lock' | grep -v -E '^model\.step_[0-9]+$' | tr '\n' ' ')
nv=$(cd "$tmp/serve" && ls -A | grep -c -E '^model\.step_[0-9]+$')
if [ $rc -eq 0 ] && [ "$got" = $STEPS ] && [ "$nv" -le 2 ] && [ -z "$left" ]; then
    pass "the end: the link is a whole step $STEPS, $nv versions beside it, nothing left by the killed runs"
else
    fail "the end: pull exit $rc, version: $got, $nv versions, left beside it: ${left:-nothing} ($(tail -n 2 "$tmp/pull.out"))"
fi
ms=$(( ($(date +%s%N) - t_start) / 1000000 ))
echo "test_dir_stress: $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s, $nf follower runs, $kills SIGKILLs ($mid while writing), reader: $reads reads"
echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
