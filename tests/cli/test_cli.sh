#!/usr/bin/env bash
# The command-line tool's contract: exit codes, messages, --json output.
# usage: tests/cli/test_cli.sh path/to/wsync
set -u
cd "$(dirname "$0")/../.."
bin=${1:-build/wsync}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
expect_rc() { # name, expected rc, command...
    local name=$1 want=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ $rc -eq "$want" ]; then pass "$name"; else fail "$name: exit $rc, wanted $want"; head -n 5 "$tmp/err"; fi
}

for f in tests/fixtures/corpus/safetensors/*.safetensors; do
    expect_rc "inspect valid $(basename "$f")" 0 "$bin" inspect "$f"
    if [ -s "$tmp/err" ]; then fail "inspect valid $(basename "$f") wrote to stderr"; fi
    # --json: one object, tensors in offset order, contiguous, ending at the data size
    "$bin" inspect --json "$f" >"$tmp/j" 2>/dev/null
    if python3 - "$tmp/j" "$f" <<'PY'
import json, struct, sys
doc = json.load(open(sys.argv[1]))
raw = open(sys.argv[2], 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
ref = {k: v for k, v in hdr.items() if k != '__metadata__'}
assert set(doc) == {'metadata', 'tensors'}
assert doc['metadata'] == hdr.get('__metadata__'), (doc['metadata'], hdr.get('__metadata__'))
names = [t['name'] for t in doc['tensors']]
assert sorted(names) == sorted(ref), 'names differ'
pos = 0
for t in doc['tensors']:
    r = ref[t['name']]
    assert t['dtype'] == r['dtype'] and t['shape'] == r['shape'] and t['data_offsets'] == r['data_offsets']
    assert t['data_offsets'][0] == pos
    pos = t['data_offsets'][1]
assert pos == len(raw) - 8 - n
PY
    then pass "inspect --json $(basename "$f") agrees with python's json"; else fail "inspect --json $(basename "$f")"; fi
done

for f in tests/fixtures/corpus/safetensors-invalid/*.safetensors; do
    expect_rc "inspect invalid $(basename "$f")" 1 "$bin" inspect "$f"
    if grep -q "invalid safetensors (WSYNC_ERR_" "$tmp/err"; then pass "reason on stderr for $(basename "$f")"
    else fail "no reason on stderr for $(basename "$f")"; fi
done

# A truncated copy of a real file names the rule that failed.
head -c 300 tests/fixtures/corpus/safetensors/huggingface__safetensors__samples_overall.safetensors > "$tmp/cut.safetensors"
expect_rc "inspect truncated file" 1 "$bin" inspect "$tmp/cut.safetensors"
grep -q "WSYNC_ERR_TRUNCATED" "$tmp/err" && pass "truncation named" || fail "truncation not named: $(cat "$tmp/err")"

expect_rc "inspect missing file" 1 "$bin" inspect "$tmp/does-not-exist"
grep -q "cannot open" "$tmp/err" && pass "missing file named" || fail "missing file message: $(cat "$tmp/err")"
expect_rc "inspect a directory" 1 "$bin" inspect "$tmp"
expect_rc "no command" 2 "$bin"
expect_rc "unknown command" 2 "$bin" frobnicate
expect_rc "inspect without a file" 2 "$bin" inspect
expect_rc "inspect unknown option" 2 "$bin" inspect --bogus tests/fixtures/corpus/safetensors/huggingface__safetensors__samples_B.safetensors
expect_rc "inspect two files" 2 "$bin" inspect a b
expect_rc "--help" 0 "$bin" --help
grep -q "inspect FILE" "$tmp/out" && pass "--help lists inspect" || fail "--help text"
expect_rc "inspect --help" 0 "$bin" inspect --help
expect_rc "--version" 0 "$bin" --version
grep -q "^wsync [0-9]" "$tmp/out" && pass "--version prints a version" || fail "--version text"
expect_rc "demo --help" 0 "$bin" demo --help   # the demo itself: tests/cli/test_cli_chain.sh

# diff / apply / verify on the real AdamW trajectory, every encoding.
T=tests/fixtures/corpus/trajectory
for enc in packed packed-max trl-v1 trl-v3; do
    expect_rc "diff --encoding $enc" 0 "$bin" diff $T/step_0000.safetensors $T/step_0001.safetensors -o "$tmp/d.$enc" --encoding $enc --step 1
    grep -q "45127 of 668800 elements changed" "$tmp/out" && pass "diff $enc counts the trajectory's 45127 changes" \
        || fail "diff $enc output: $(cat "$tmp/out")"
    expect_rc "apply $enc" 0 "$bin" apply $T/step_0000.safetensors "$tmp/d.$enc" -o "$tmp/r.$enc.safetensors"
    expect_rc "verify after apply $enc" 0 "$bin" verify "$tmp/r.$enc.safetensors" $T/step_0001.safetensors
done
# packed-max's range coder (coder 2, for readers before class-Rice): applies the same; coder byte 2 vs 3
expect_rc "diff --encoding packed-max --range-coder" 0 "$bin" diff $T/step_0000.safetensors $T/step_0001.safetensors -o "$tmp/d.range" --encoding packed-max --range-coder --step 1
expect_rc "apply packed-max range coder" 0 "$bin" apply $T/step_0000.safetensors "$tmp/d.range" -o "$tmp/r.range.safetensors"
expect_rc "verify after apply packed-max range coder" 0 "$bin" verify "$tmp/r.range.safetensors" $T/step_0001.safetensors
python3 - "$tmp/d.range" "$tmp/d.packed-max" <<'PY' && pass "packed-max streams: coder 2 with --range-coder, 3 without" || fail "packed-max coder bytes"
import json, struct, sys
def coders(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    return {raw[8 + n + v['data_offsets'][0] + 4] for k, v in hdr.items() if k != '__metadata__'}
assert coders(sys.argv[1]) == {2}, coders(sys.argv[1])
assert coders(sys.argv[2]) == {3}, coders(sys.argv[2])
PY
expect_rc "diff --range-coder with packed" 2 "$bin" diff $T/step_0000.safetensors $T/step_0001.safetensors -o "$tmp/x" --range-coder
# a chain of packed deltas, 0 -> 4, with threads
cp $T/step_0000.safetensors "$tmp/chain.safetensors"
for s in 1 2 3 4; do
    "$bin" diff $T/step_000$((s - 1)).safetensors $T/step_000$s.safetensors -o "$tmp/c$s" --step $s --threads 2 >/dev/null 2>&1
    "$bin" apply "$tmp/chain.safetensors" "$tmp/c$s" -o "$tmp/chain.safetensors" --threads 2 >/dev/null 2>&1 || fail "chain apply $s"
done
expect_rc "chain of four packed deltas ends bit-exact at step 4" 0 "$bin" verify "$tmp/chain.safetensors" $T/step_0004.safetensors
expect_rc "verify different files" 1 "$bin" verify $T/step_0000.safetensors $T/step_0001.safetensors
grep -q "elements differ" "$tmp/out" && pass "verify lists differences" || fail "verify output: $(head -3 "$tmp/out")"
rm -f "$tmp/none.safetensors"
expect_rc "apply a packed delta to the wrong base" 1 "$bin" apply $T/step_0001.safetensors "$tmp/d.packed" -o "$tmp/none.safetensors"
grep -q "WSYNC_ERR_DIGEST_MISMATCH" "$tmp/err" && pass "wrong base named" || fail "wrong base message: $(cat "$tmp/err")"
[ ! -e "$tmp/none.safetensors" ] && pass "no output after a failed apply" || fail "output written after a failed apply"
head -c 3000 "$tmp/d.packed" > "$tmp/cut.delta"
expect_rc "apply a truncated delta" 1 "$bin" apply $T/step_0000.safetensors "$tmp/cut.delta" -o "$tmp/none.safetensors"
[ ! -e "$tmp/none.safetensors" ] && pass "no output after a truncated delta" || fail "output written after a truncated delta"
expect_rc "diff with an unknown encoding" 2 "$bin" diff a b -o c --encoding zstd
expect_rc "diff without -o" 2 "$bin" diff $T/step_0000.safetensors $T/step_0001.safetensors
expect_rc "diff of files with different tensors" 1 "$bin" diff $T/step_0000.safetensors tests/fixtures/corpus/safetensors/huggingface__safetensors__samples_B.safetensors -o "$tmp/x"
expect_rc "diff --help" 0 "$bin" diff --help
expect_rc "apply --help" 0 "$bin" apply --help
expect_rc "verify --help" 0 "$bin" verify --help

# A name holding U+0000 ("a\u0000x") is valid safetensors but is never matched to
# a C-string name ("a"): inspect shows it, diff, apply, verify and publish refuse it.
python3 - "$tmp" <<'PY'
import json, struct, sys
def put(path, tensors):
    hdr, data = {}, b''
    for name, vals in tensors:
        raw = struct.pack('<%dH' % len(vals), *vals)
        hdr[name] = {'dtype': 'BF16', 'shape': [len(vals)], 'data_offsets': [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr).encode()
    h += b' ' * (-len(h) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + data)
d = sys.argv[1]
put(d + '/nul.safetensors', [('a\0x', [5, 6])])
put(d + '/a5.safetensors', [('a', [5, 6])])
put(d + '/a7.safetensors', [('a', [5, 7])])
PY
expect_rc "inspect a name holding U+0000" 0 "$bin" inspect "$tmp/nul.safetensors"
grep -q 'a\\u0000x' <("$bin" inspect --json "$tmp/nul.safetensors") && pass "inspect --json escapes U+0000" \
    || fail "inspect --json of a U+0000 name"
expect_rc "diff a on a" 0 "$bin" diff "$tmp/a5.safetensors" "$tmp/a7.safetensors" -o "$tmp/a.trl" --encoding trl-v1
rm -f "$tmp/none.safetensors"
expect_rc "apply a delta on \"a\" to a file holding \"a\\u0000x\"" 1 "$bin" apply "$tmp/nul.safetensors" "$tmp/a.trl" -o "$tmp/none.safetensors"
grep -q "U+0000 at byte 1 of the name" "$tmp/err" && pass "apply names the U+0000" || fail "apply U+0000 message: $(cat "$tmp/err")"
[ ! -e "$tmp/none.safetensors" ] && pass "no output after a U+0000 name" || fail "output written for a U+0000 name"
expect_rc "diff of a file holding \"a\\u0000x\"" 1 "$bin" diff "$tmp/nul.safetensors" "$tmp/a7.safetensors" -o "$tmp/x"
expect_rc "verify of a file holding \"a\\u0000x\"" 1 "$bin" verify "$tmp/nul.safetensors" "$tmp/a5.safetensors"
grep -q "U+0000" "$tmp/err" && pass "verify names the U+0000" || fail "verify U+0000 message: $(cat "$tmp/err")"
expect_rc "publish of a file holding \"a\\u0000x\"" 1 "$bin" publish --store "$tmp/nulstore" --step 0 "$tmp/nul.safetensors"
grep -q "U+0000" "$tmp/err" && pass "publish names the U+0000" || fail "publish U+0000 message: $(cat "$tmp/err")"

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
