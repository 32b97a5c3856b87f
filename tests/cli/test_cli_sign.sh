#!/usr/bin/env bash
# Signed chains through the command-line tool: wsync keygen; publish
# --sign-key (and WSYNC_SIGN_KEY) for files and model directories; pull,
# follow and log --verify-key (and WSYNC_VERIFY_KEY). Each refusal is checked
# with the target's bytes unchanged (sha256sum), the rule named on stderr and
# exit 6: an unsigned HEAD, a bad signature, a HEAD altered after signing, a
# HEAD signed by another key, another chain's HEAD signed by the same key, an
# object whose bytes differ from HEAD's, a directory's config file replaced.
# A secret key file that others may read is refused.
# Forged HEADs are written as an attacker would: the bytes changed, then the
# HEAD's "check" (wsync64, no secret) recomputed through libwsync.so's
# wspy_digest, so that only the signature can tell.
# usage: tests/cli/test_cli_sign.sh path/to/wsync path/to/libwsync.so
set -u
cd "$(dirname "$0")/../.."
bin=${1:-build/wsync}
lib=${2:-build/libwsync.so}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
case $lib in /*) ;; *) lib=$PWD/$lib ;; esac
tmp=$(mktemp -d)
bg=()
cleanup() {
    local p
    for p in "${bg[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
expect_rc() { # name, expected rc, command...: stdout in $tmp/out, stderr in $tmp/err
    local name=$1 want=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ $rc -eq "$want" ]; then pass "$name"; else fail "$name: exit $rc, wanted $want"; head -n 5 "$tmp/err"; fi
}
grep_err() { # name, pattern: in the last command's stderr
    if grep -q -e "$2" "$tmp/err"; then pass "$1"; else fail "$1: no '$2' in: $(head -c 600 "$tmp/err")"; fi
}
sums() { # every regular file under a path (a link followed), hashed
    if [ -d "$1" ]; then (cd -L "$1" && find . -type f | LC_ALL=C sort | xargs sha256sum; readlink "$1")
    else sha256sum "$1"; fi
}
same_bytes() { # name, file with sums before, path
    if [ "$(sums "$3")" = "$(cat "$2")" ]; then pass "$1"; else fail "$1: $3 changed"; fi
}
py=
for cand in /usr/bin/python3 python3; do
    if "$cand" -c 'import ctypes' >/dev/null 2>&1; then py=$cand; break; fi
done
if [ -z "$py" ] || [ ! -f "$lib" ]; then
    fail "needs python3 and libwsync.so ($lib) to forge HEADs"
    echo "summary: $passed passed, $failed failed"; exit 1
fi
# forge MODE HEAD: sig (one hex digit of "sig" changed), state (HEAD's
# "state" changed after signing), unsign (signer, id and sig removed); then
# "check" recomputed
forge() {
    "$py" - "$1" "$2" "$lib" <<'EOF'
import ctypes, re, sys
mode, path, lib = sys.argv[1:4]
L = ctypes.CDLL(lib)
L.wspy_digest.restype = ctypes.c_uint64
L.wspy_digest.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
t = open(path, 'rb').read()
t = t[:t.index(b'"check":"')]
def flip(s, at):
    c = s[at:at + 1]
    return s[:at] + (b'0' if c != b'0' else b'1') + s[at + 1:]
if mode == 'sig':
    t = flip(t, t.index(b'"sig":"') + 7 + 10)
elif mode == 'state':
    t = flip(t, t.index(b'"state":"') + 9 + 3)
elif mode == 'unsign':
    t = re.sub(rb',"id":"[0-9a-f]*","signer":"[0-9a-f]*"', b'', t)
    t = re.sub(rb',"blake2b":"[0-9a-f]*"', b'', t)
    t = re.sub(rb'"sig":"[0-9a-f]*",\n', b'', t)
else:
    sys.exit('mode?')
d = L.wspy_digest(t, len(t))
open(path, 'wb').write(t + b'"check":"%016x"}\n' % d)
EOF
}
cd "$tmp" || exit 1

# ---- keygen ----
expect_rc "keygen writes a pair" 0 "$bin" keygen k
[ "$(cat out)" = "k.pub" ] && pass "keygen prints the public key's path" || fail "keygen printed '$(cat out)'"
grep_err "keygen's hint names both files" "sign-key k.key.*verify-key k.pub"
[ "$(stat -c %a k.key)" = 600 ] && pass "k.key is mode 0600" || fail "k.key is mode $(stat -c %a k.key)"
grep -q '^wsync ed25519 public ' k.pub && pass "k.pub is a public key" || fail "k.pub: $(cat k.pub)"
cp k.key k.key.before
expect_rc "keygen never replaces a key" 1 "$bin" keygen k
cmp -s k.key k.key.before && pass "k.key unchanged" || fail "k.key replaced"
expect_rc "keygen --help" 0 "$bin" keygen --help
grep -q 'sign-key' out && pass "keygen --help says how to use the keys" || fail "keygen --help: $(head -c 300 out)"
expect_rc "keygen without NAME is a usage error" 2 "$bin" keygen
"$bin" keygen other >/dev/null 2>&1 || fail "keygen other"

# ---- models ----
for s in 1 2 3 4; do "$bin" gen --model tiny --step $s -o m$s.safetensors || fail "gen $s"; done
for s in 1 2 3; do "$bin" gen --model tiny --step $s --shards 2 -o d$s || fail "gen dir $s"; done

# ---- a signed file chain ----
expect_rc "signed publish 1" 0 "$bin" publish --store S --sign-key k.key m1.safetensors
grep -q 'HEAD signed' out && pass "publish says HEAD is signed" || fail "publish: $(cat out)"
grep -q '"sig":"' S/HEAD && grep -q '"blake2b":"' S/HEAD && pass "HEAD carries sig and blake2b" || fail "HEAD unsigned"
expect_rc "signed publish 2 (WSYNC_SIGN_KEY)" 0 env WSYNC_SIGN_KEY=k.key "$bin" publish --store S m2.safetensors
expect_rc "verified pull" 0 "$bin" pull --store S --verify-key k.pub f.safetensors
expect_rc "the pulled file matches step 2" 0 "$bin" verify f.safetensors m2.safetensors
"$bin" inspect f.safetensors | grep -q 'wsync_chain = [0-9a-f]\{32\}' && pass "the file records its chain" ||
    fail "no wsync_chain in f.safetensors"
expect_rc "log --verify-key" 0 "$bin" log --store S --verify-key k.pub
grep -q 'signed by .*verified with the key given' out && pass "log says signed and verified" || fail "log: $(head -2 out)"
expect_rc "log --json --verify-key" 0 "$bin" log --store S --json --verify-key k.pub
grep -q '"verified": true' out && grep -q '"signer": "[0-9a-f]\{64\}"' out && pass "log --json signer, verified" ||
    fail "log --json: $(head -c 400 out)"
expect_rc "log refuses another key" 6 "$bin" log --store S --verify-key other.pub
grep_err "log names the rule" "signed by another key"
# the signed chain gains step 3; refusals are tested on copies of it
expect_rc "signed publish 3" 0 "$bin" publish --store S --sign-key k.key m3.safetensors
sums f.safetensors >f.sum

refuse() { # name, store, rule pattern, [extra pull options]: pull refused, f.safetensors unchanged
    local name=$1 store=$2 rule=$3; shift 3
    expect_rc "$name: pull refused (exit 6)" 6 "$bin" pull --store "$store" --verify-key k.pub "$@" f.safetensors
    grep_err "$name: the rule named" "$rule"
    same_bytes "$name: the file unchanged" f.sum f.safetensors
}
# unsigned HEAD: the chain's own HEAD with its signature stripped
cp -r S U1 && forge unsign U1/HEAD
expect_rc "the stripped HEAD reads without a key" 0 "$bin" log --store U1
refuse "unsigned HEAD" U1 "WSYNC_ERR_SIGNATURE.*not signed"
# an unsigned chain (a publisher without the key)
"$bin" publish --store U2 --step 5 m4.safetensors >/dev/null 2>&1
refuse "unsigned chain" U2 "not signed"
# a bad signature
cp -r S B && forge sig B/HEAD
refuse "bad signature" B "WSYNC_ERR_SIGNATURE.*does not verify\|WSYNC_ERR_SIGNATURE.*changed"
# HEAD altered after signing
cp -r S A && forge state A/HEAD
refuse "altered HEAD" A "WSYNC_ERR_SIGNATURE"
# another key
"$bin" publish --store O --sign-key other.key --step 5 m4.safetensors >/dev/null 2>&1
refuse "another key" O "signed by another key"
# another chain signed by the same key
"$bin" publish --store C --sign-key k.key --step 5 m4.safetensors >/dev/null 2>&1
refuse "another chain" C "another chain" 
grep_err "another chain: the hint names --new-chain" "new-chain"
# an object whose bytes differ from HEAD's
cp -r S X && printf '\125' | dd of=X/deltas/step_000003.safetensors bs=1 seek=3000 conv=notrunc 2>/dev/null
refuse "altered delta" X "WSYNC_ERR_DIGEST_MISMATCH.*step_000003"
# WSYNC_VERIFY_KEY, and --verify-key over the environment
expect_rc "WSYNC_VERIFY_KEY refuses an unsigned chain" 6 env WSYNC_VERIFY_KEY=k.pub "$bin" pull --store U2 f.safetensors
same_bytes "WSYNC_VERIFY_KEY: the file unchanged" f.sum f.safetensors
expect_rc "--verify-key over WSYNC_VERIFY_KEY" 6 env WSYNC_VERIFY_KEY=other.pub "$bin" pull --store O \
    --verify-key k.pub f.safetensors
# accepted: the chain itself, then another chain with --new-chain
expect_rc "verified pull to step 3" 0 "$bin" pull --store S --verify-key k.pub f.safetensors
expect_rc "step 3 pulled" 0 "$bin" verify f.safetensors m3.safetensors
expect_rc "--new-chain takes the other chain" 0 "$bin" pull --store C --verify-key k.pub --new-chain f.safetensors
expect_rc "step 5 of the other chain pulled" 0 "$bin" verify f.safetensors m4.safetensors
expect_rc "a verify key that is a secret key is refused" 1 "$bin" pull --store S --verify-key k.key g.safetensors
[ ! -e g.safetensors ] && pass "nothing written for a bad key file" || fail "g.safetensors written"

# ---- publish's own refusals ----
cp k.key open.key && chmod 644 open.key
cp -r S P && sums P >P.sum
expect_rc "a secret key others may read is refused" 1 "$bin" publish --store P --sign-key open.key m4.safetensors
grep_err "the mode rule named" "open.key"
same_bytes "the store unchanged after the refused key" P.sum P
expect_rc "WSYNC_SIGN_KEY with mode 0644 is refused" 1 env WSYNC_SIGN_KEY=open.key "$bin" publish --store P \
    m4.safetensors
expect_rc "publish without a key over a signed chain (exit 6)" 6 "$bin" publish --store P m4.safetensors
expect_rc "publish with another key (exit 6)" 6 "$bin" publish --store P --sign-key other.key m4.safetensors
same_bytes "the store unchanged after the refusals" P.sum P
expect_rc "publish --sign-key over an unsigned chain (exit 6)" 6 "$bin" publish --store U2 --sign-key k.key \
    --step 6 m3.safetensors

# ---- follow ----
rm -f g.safetensors
expect_rc "verified follow to step 3" 0 timeout 20 "$bin" follow --store S --verify-key k.pub --interval 0.1 \
    --until-step 3 g.safetensors
expect_rc "the followed file is step 3" 0 "$bin" verify g.safetensors m3.safetensors
"$bin" pull --store S --step 2 --verify-key k.pub h.safetensors >/dev/null 2>&1
sums h.safetensors >h.sum
follow_refused() { # name, store, rule, [env]: a follower that keeps refusing, stopped by SIGTERM, exits 6
    local name=$1 store=$2 rule=$3 key=(--verify-key k.pub) pre=()
    [ "${4:-}" = env ] && key=() pre=(env WSYNC_VERIFY_KEY=k.pub) # the key from the environment
    "${pre[@]}" "$bin" follow --store "$store" "${key[@]}" --interval 0.1 h.safetensors >"$tmp/out" 2>"$tmp/err" &
    local pid=$!; bg+=("$pid")
    sleep 1.5
    kill -TERM "$pid"; wait "$pid"; local rc=$?
    [ $rc -eq 6 ] && pass "$name: follow stopped while refusing exits 6" || fail "$name: follow exit $rc, wanted 6"
    grep_err "$name: follow names the rule" "$rule"
    same_bytes "$name: the followed file unchanged" h.sum h.safetensors
}
follow_refused "follow, bad signature" B "WSYNC_ERR_SIGNATURE"
follow_refused "follow, another key" O "signed by another key"
follow_refused "follow, altered delta" X "WSYNC_ERR_DIGEST_MISMATCH"
follow_refused "follow, another chain" C "another chain"
follow_refused "follow, unsigned HEAD" U1 "WSYNC_ERR_SIGNATURE.*not signed"
follow_refused "follow with WSYNC_VERIFY_KEY, an unsigned chain" U2 "not signed" env
follow_refused "follow with WSYNC_VERIFY_KEY, another key" O "signed by another key" env
# a forged HEAD (a stale cache, a replica) that gives way to the trainer's
# signed HEAD, then its next step: followed
cp -r S F && forge sig F/HEAD
"$bin" follow --store F --verify-key k.pub --interval 0.1 --until-step 4 h.safetensors >"$tmp/fout" 2>"$tmp/ferr" &
fp=$!; bg+=("$fp")
sleep 1
same_bytes "follow keeps the step while HEAD is forged" h.sum h.safetensors
cp S/HEAD F/HEAD
expect_rc "the trainer publishes step 4 over its own HEAD" 0 "$bin" publish --store F --sign-key k.key --step 4 \
    m4.safetensors
for _ in $(seq 100); do kill -0 "$fp" 2>/dev/null || break; sleep 0.1; done
kill -9 "$fp" 2>/dev/null
wait "$fp"; rc=$?
[ $rc -eq 0 ] && pass "follow goes on once HEAD is signed again" || { fail "follow exit $rc"; head -5 "$tmp/ferr"; }
expect_rc "the follower reached step 4" 0 "$bin" verify h.safetensors m4.safetensors

# ---- model directories ----
expect_rc "signed directory publish 1" 0 "$bin" publish --store D --sign-key k.key d1
expect_rc "signed directory publish 2" 0 "$bin" publish --store D --sign-key k.key d2
grep -q '"blake2b"' D/HEAD && pass "the directory's HEAD hashes its files" || fail "D/HEAD has no blake2b"
expect_rc "verified directory pull" 0 "$bin" pull --store D --verify-key k.pub dm
for f in d2/*.safetensors; do
    "$bin" verify "$f" "dm/${f##*/}" >/dev/null 2>&1 || fail "dm/${f##*/} differs from $f"
done
cmp -s d2/config.json dm/config.json && pass "config.json pulled" || fail "config.json differs"
grep -q '"chain":"[0-9a-f]\{32\}"' dm/wsync-step.json && pass "the version records its chain" ||
    fail "wsync-step.json: $(cat dm/wsync-step.json)"
echo ' ' >>d3/config.json # a config that changed: the version fetches it, not a link to the last one's
expect_rc "signed directory publish 3" 0 "$bin" publish --store D --sign-key k.key --anchor-every 1 d3
sums dm >dm.sum
# the anchor's config.json replaced (same size): refused, the link kept
cp -r D DX
cfg=$(ls DX/anchors/step_000003/config.json)
printf '\125' | dd of="$cfg" bs=1 seek=5 conv=notrunc 2>/dev/null
expect_rc "a replaced config.json refused (exit 6)" 6 "$bin" pull --store DX --verify-key k.pub dm
grep_err "the replaced file named" "config.json"
same_bytes "the directory unchanged" dm.sum dm
cp -r D DB && forge sig DB/HEAD
expect_rc "a directory's bad signature refused" 6 "$bin" pull --store DB --verify-key k.pub dm
same_bytes "the directory unchanged (bad signature)" dm.sum dm
"$bin" publish --store DO --sign-key other.key d1 >/dev/null 2>&1
"$bin" follow --store DO --verify-key k.pub --interval 0.1 dm >"$tmp/out" 2>"$tmp/err" &
fp=$!; bg+=("$fp"); sleep 1.2; kill -TERM "$fp"; wait "$fp"; rc=$?
[ $rc -eq 6 ] && pass "directory follow, another key: exit 6" || fail "directory follow, another key: exit $rc"
same_bytes "the directory unchanged (another key)" dm.sum dm
expect_rc "verified directory follow to step 3" 0 timeout 20 "$bin" follow --store D --verify-key k.pub \
    --interval 0.1 --until-step 3 dm
cmp -s d3/config.json dm/config.json && grep -q '"step":3' dm/wsync-step.json && pass "the directory is at step 3" ||
    fail "dm: $(cat dm/wsync-step.json)"

echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
