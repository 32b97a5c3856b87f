#!/usr/bin/env bash
# The HTTP store against rclone's `serve webdav` (Debian's rclone), a server
# nobody on the team wrote: it answers a PUT under a missing collection
# with 404 (nginx 409, Apache 409), so the store makes the collections with
# MKCOL after a 404 too. Publish (anchors, deltas, retention), pull and
# follow, of a file and of a model directory, each step checked bit for
# bit against the trainer's with `wsync verify`; then the store conformance
# suite (test_conformance beside the tool, and in its san/). Skips (one line, no
# failure) when rclone is not installed; tests/install-deps.sh installs it.
# usage: tests/http/test_rclone.sh path/to/wsync
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: $0 path/to/wsync"; exit 2; }
W=$1
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
finish() { echo "summary: $passed passed, $failed failed"; [ $failed -eq 0 ]; exit; }
if ! command -v rclone >/dev/null; then
    echo "test_rclone: rclone is not installed (tests/install-deps.sh installs it): skipped"
    finish
fi

tmp=$(mktemp -d /tmp/wsync-rclone.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$tmp/data"
for try in 1 2 3 4 5; do
    port=$(( 20000 + (RANDOM % 20000) ))
    rclone serve webdav "$tmp/data" --addr "127.0.0.1:$port" >"$tmp/rclone.log" 2>&1 &
    pid=$!
    for i in $(seq 50); do
        curl -s -o /dev/null "http://127.0.0.1:$port/" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    wait "$pid" 2>/dev/null; pid=
done
if [ -z "$pid" ]; then fail "rclone serve webdav did not start: $(tail -3 "$tmp/rclone.log")"; finish; fi
url="http://127.0.0.1:$port"

# A file: steps 0..7, an anchor every 3, 4 steps kept; a pull after each.
ok=1
for s in 0 1 2 3 4 5 6 7; do
    "$W" gen --model tiny --step $s -o "$tmp/m$s.st" >/dev/null || ok=0
    if ! "$W" publish --store "$url/run/file" --step $s --anchor-every 3 --retain 4 "$tmp/m$s.st" \
        >"$tmp/pub.out" 2>&1; then
        ok=0; fail "publish step $s to a new prefix on rclone: $(tail -2 "$tmp/pub.out")"; break
    fi
    if ! "$W" pull --store "$url/run/file" "$tmp/pulled.st" >"$tmp/pull.out" 2>&1 ||
        ! "$W" verify "$tmp/pulled.st" "$tmp/m$s.st" >/dev/null 2>&1; then
        ok=0; fail "pull of step $s from rclone is not the trainer's: $(tail -2 "$tmp/pull.out")"; break
    fi
    rm -f "$tmp/m$((s - 1)).st" 2>/dev/null
done
[ $ok -eq 1 ] && pass "file: publish (a new prefix: MKCOL after rclone's 404) and pull, steps 0..7, exact"
# retention removed what HEAD no longer names
n=$(find "$tmp/data/run/file" -name 'step_*' | wc -l)
if [ "$n" -ge 2 ] && [ "$n" -le 6 ]; then pass "file: retention deletes on rclone ($n objects kept)"
else fail "file: retention kept $n objects"; fi
"$W" log --store "$url/run/file" >"$tmp/log.out" 2>&1 && grep -q "chain read from HEAD, head step 7" "$tmp/log.out" &&
    pass "file: log reads HEAD from rclone" || fail "file: log: $(tail -2 "$tmp/log.out")"

# follow: two more steps while a follower runs
"$W" follow --store "$url/run/file" "$tmp/followed.st" --interval 0.2 --until-step 9 >"$tmp/follow.out" 2>&1 &
fpid=$!
for s in 8 9; do
    "$W" gen --model tiny --step $s -o "$tmp/m$s.st" >/dev/null
    "$W" publish --store "$url/run/file" --step $s --anchor-every 3 --retain 4 "$tmp/m$s.st" >/dev/null 2>&1 ||
        fail "publish step $s"
done
for i in $(seq 150); do kill -0 $fpid 2>/dev/null || break; sleep 0.2; done
if kill -0 $fpid 2>/dev/null; then kill $fpid; fail "follow did not reach step 9: $(tail -2 "$tmp/follow.out")"
elif wait $fpid && "$W" verify "$tmp/followed.st" "$tmp/m9.st" >/dev/null 2>&1; then
    pass "file: follow reaches step 9 on rclone, exact"
else fail "follow: $(tail -2 "$tmp/follow.out")"; fi

# A model directory: 3 shards, steps 0..3 (directory anchors: every shard
# and file its own object under anchors/step_N/).
ok=1
for s in 0 1 2 3; do
    rm -rf "$tmp/ckpt"
    "$W" gen --model tiny --step $s --shards 3 -o "$tmp/ckpt" >/dev/null || ok=0
    if ! "$W" publish --store "$url/run/dir" --step $s --anchor-every 2 "$tmp/ckpt" >"$tmp/pub.out" 2>&1; then
        ok=0; fail "publish directory step $s: $(tail -2 "$tmp/pub.out")"; break
    fi
    if ! "$W" pull --store "$url/run/dir" "$tmp/model" >"$tmp/pull.out" 2>&1; then
        ok=0; fail "pull directory step $s: $(tail -2 "$tmp/pull.out")"; break
    fi
    for f in "$tmp/ckpt"/*.safetensors; do
        "$W" verify "$tmp/model/$(basename "$f")" "$f" >/dev/null 2>&1 ||
            { ok=0; fail "directory step $s: $(basename "$f") differs"; }
    done
    cmp -s "$tmp/ckpt/config.json" "$tmp/model/config.json" || { ok=0; fail "directory step $s: config.json differs"; }
done
[ $ok -eq 1 ] && pass "directory: publish and pull of a 3-shard checkpoint on rclone, steps 0..3, exact"

# the store conformance suite (tests/http/test_conformance.c, built beside the tool)
. tests/http/lib_conformance.sh
conf_dirs=("$(dirname "$W")")
[ -x "$(dirname "$W")/san/test_conformance" ] && conf_dirs+=("$(dirname "$W")/san")
conformance "${conf_dirs[@]}" -- "rclone,$url/@RUN@"
finish
