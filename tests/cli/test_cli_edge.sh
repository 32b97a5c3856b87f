#!/usr/bin/env bash
# The chain commands at the edges, with real files and real processes: a
# stale HEAD (an older HEAD copied over the newest) and a restarted chain
# (the store wiped, a new run published) never move pull or follow back
# unless asked (--step N, --follow-restart); a chain whose tensors change
# (a vocabulary resized) rebuilds the output, file or directory; follow
# never waits in silence (a missing store, --wait, an empty chain, an
# unreachable URL); the exit codes of the three store situations; errors
# that say what the input is.
# usage: tests/cli/test_cli_edge.sh path/to/wsync
set -u
cd "$(dirname "$0")/../.."
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
count_lines() { # pattern, file: how many lines match
    grep -c -e "$1" "$2" 2>/dev/null || true
}
claimed_step() { # the step a safetensors file claims in its __metadata__, or "none"
    "$bin" inspect --json "$1" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print((d["metadata"] or {}).get("step", "none"))' 2>/dev/null || echo unreadable
}
holds() { # name, file, step, reference: the file claims `step` and holds the reference's tensors bit for bit
    local name=$1 f=$2 s=$3 ref=$4 got
    got=$(claimed_step "$f")
    if [ "$got" != "$s" ]; then fail "$name: claims step $got, wanted $s"; return 0; fi
    if "$bin" verify "$f" "$ref" >"$tmp/verify" 2>&1; then pass "$name"
    else fail "$name: differs from $(basename "$ref"): $(head -c 300 "$tmp/verify")"; fi
}
wait_for() { # seconds, command...: polls every 0.1 s until the command succeeds
    local t=$1 i=0; shift
    while [ $i -lt $((t * 10)) ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; i=$((i + 1)); done
    return 1
}
stop() { # pid: SIGTERM, then its exit status (a process that outlives it by 30 s is killed, and fails)
    local i=0
    kill -TERM "$1" 2>/dev/null
    while kill -0 "$1" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 "$1" 2>/dev/null; then fail "pid $1 still running 30 s after SIGTERM"; kill -9 "$1" 2>/dev/null; fi
    wait "$1" 2>/dev/null
}
alive() { kill -0 "$1" 2>/dev/null; }

# The generator's steps: the first run (light), a second run with other
# weights (adamw), and the first run's model with a resized vocabulary.
G=$tmp/g; mkdir -p "$G"
for s in 0 1 2 3 4; do
    "$bin" gen --model tiny --step $s -o "$G/a$s.safetensors" || fail "gen a$s"
    "$bin" gen --model tiny --vocab 4096 --step $s -o "$G/v$s.safetensors" || fail "gen v$s"
done
for s in 0 1; do "$bin" gen --model tiny --mode adamw --step $s -o "$G/r$s.safetensors" || fail "gen r$s"; done
if "$bin" verify "$G/a1.safetensors" "$G/r1.safetensors" >/dev/null 2>&1; then
    fail "the second run's weights are the first run's"; fi

# ---- a stale HEAD: pull keeps the newer step it holds (exit 0, a warning) ----
B=$tmp/b
for s in 0 1 2 3; do
    "$bin" publish --store "$B" --step $s "$G/a$s.safetensors" >/dev/null || fail "publish a$s"
    [ $s = 1 ] && cp "$B/HEAD" "$tmp/head1"
done
cp "$B/HEAD" "$tmp/head3"
P=$tmp/p; mkdir -p "$P"
expect_rc "pull to step 3" 0 "$bin" pull --store "$B" "$P/m.safetensors"
holds "pull: step 3" "$P/m.safetensors" 3 "$G/a3.safetensors"
cp "$P/m.safetensors" "$P/m.3"
cp "$tmp/head1" "$B/HEAD"   # an older HEAD over the newest (a cache, a restored backup)
expect_rc "pull over a stale HEAD exits 0" 0 "$bin" pull --store "$B" "$P/m.safetensors"
grep_out "stale HEAD: a warning with both steps" \
    "warning: HEAD in .* names step 1, older than step 3 that .*m.safetensors holds" "$tmp/err"
grep_out "stale HEAD: the output kept, said" "m.safetensors kept at step 3" "$tmp/err"
grep_out "stale HEAD: the ways on named" "--follow-restart follows a restarted chain; --step N takes step N" "$tmp/err"
grep_out "stale HEAD: stdout says kept" "kept at step 3 (HEAD 1 is older)" "$tmp/out"
check "stale HEAD: the output is unchanged" cmp "$P/m.safetensors" "$P/m.3"
cp "$P/m.3" "$P/back.safetensors"
expect_rc "pull --step 1 under the stale HEAD: asked for, so taken" 0 "$bin" pull --store "$B" --step 1 "$P/back.safetensors"
holds "pull --step 1: step 1 exactly" "$P/back.safetensors" 1 "$G/a1.safetensors"

# ---- follow over a stale HEAD: keeps following, warns once, moves on when HEAD does ----
cp "$P/m.3" "$P/f.safetensors"
timeout -k 5 60 "$bin" follow --store "$B" --interval 0.05 --until-step 4 "$P/f.safetensors" \
    >"$tmp/f.out" 2>"$tmp/f.err" &
fpid=$!; bg+=($fpid)
sleep 1.5
alive $fpid && pass "follow over a stale HEAD keeps following" || fail "follow over a stale HEAD exited: $(cat "$tmp/f.err")"
n=$(count_lines "names step 1, older than step 3" "$tmp/f.err")
[ "$n" = 1 ] && pass "follow warns about the stale HEAD once (not every poll)" \
    || fail "follow's stale HEAD warnings: $n: $(head -c 600 "$tmp/f.err")"
grep_out "follow: the warning says following goes on" "kept at step 3; following goes on" "$tmp/f.err"
check "follow over a stale HEAD: the output is unchanged" cmp "$P/f.safetensors" "$P/m.3"
cp "$tmp/head3" "$B/HEAD"
"$bin" publish --store "$B" --step 4 "$G/a4.safetensors" >/dev/null || fail "publish a4"
wait $fpid; rc=$?
[ $rc -eq 0 ] && pass "follow moves on once HEAD does (--until-step 4, exit 0)" || fail "follow after the stale HEAD: exit $rc: $(tail -3 "$tmp/f.err")"
holds "follow: step 4 exactly after the stale HEAD" "$P/f.safetensors" 4 "$G/a4.safetensors"

# ---- a restarted chain: the store wiped, a new run's steps 0..1 ----
cp "$P/f.safetensors" "$P/m.4"
rm -rf "$B"
for s in 0 1; do "$bin" publish --store "$B" --step $s "$G/r$s.safetensors" >/dev/null || fail "publish r$s"; done
cp "$P/m.4" "$P/r.safetensors"
expect_rc "pull of a restarted chain without --follow-restart exits 0" 0 "$bin" pull --store "$B" "$P/r.safetensors"
grep_out "restarted chain: warned" "names step 1, older than step 4" "$tmp/err"
check "restarted chain: the output is unchanged" cmp "$P/r.safetensors" "$P/m.4"
expect_rc "pull --follow-restart" 0 "$bin" pull --store "$B" --follow-restart "$P/r.safetensors"
holds "pull --follow-restart: the new chain's step 1 exactly" "$P/r.safetensors" 1 "$G/r1.safetensors"
grep_out "pull --follow-restart: from the new chain's anchor" "step 4 -> 1 (anchor 0" "$tmp/out"
# follow: without the flag it keeps step 4; with it, it takes the new chain
cp "$P/m.4" "$P/rf.safetensors"
timeout -k 5 60 "$bin" follow --store "$B" --interval 0.05 "$P/rf.safetensors" >"$tmp/rf.out" 2>"$tmp/rf.err" &
fpid=$!; bg+=($fpid)
sleep 1
alive $fpid && pass "follow of a restarted chain keeps following" || fail "follow of a restarted chain exited"
check "follow of a restarted chain without the flag: output kept" cmp "$P/rf.safetensors" "$P/m.4"
[ "$(count_lines "older than step 4" "$tmp/rf.err")" = 1 ] && pass "follow of a restarted chain: warned once" \
    || fail "follow of a restarted chain: $(head -c 600 "$tmp/rf.err")"
stop $fpid
timeout -k 5 60 "$bin" follow --store "$B" --interval 0.05 --follow-restart "$P/rf.safetensors" >"$tmp/rf.out" 2>"$tmp/rf.err" &
fpid=$!; bg+=($fpid)
claims() { [ "$(claimed_step "$1")" = "$2" ]; }
if wait_for 20 claims "$P/rf.safetensors" 1; then pass "follow --follow-restart takes the new chain"
else fail "follow --follow-restart: $(cat "$tmp/rf.err")"; fi
stop $fpid
holds "follow --follow-restart: the new chain's step 1 exactly" "$P/rf.safetensors" 1 "$G/r1.safetensors"
# while following: the store wiped and a new run started under a running follower
W=$tmp/w
for s in 0 1 2; do "$bin" publish --store "$W" --step $s "$G/a$s.safetensors" >/dev/null; done
timeout -k 5 60 "$bin" follow --store "$W" --interval 0.05 --follow-restart "$P/wf.safetensors" >"$tmp/wf.out" 2>"$tmp/wf.err" &
fpid=$!; bg+=($fpid)
wait_for 20 claims "$P/wf.safetensors" 2 || fail "follow did not reach step 2: $(cat "$tmp/wf.err")"
rm -rf "$W"
sleep 0.5
for s in 0 1; do "$bin" publish --store "$W" --step $s "$G/r$s.safetensors" >/dev/null; done
is_step() { [ "$(claimed_step "$1")" = "$2" ] && "$bin" verify "$1" "$3" >/dev/null 2>&1; }
if wait_for 20 is_step "$P/wf.safetensors" 1 "$G/r1.safetensors"
then pass "follow --follow-restart: a store wiped and republished under it is followed"
else fail "follow through a wiped store: $(tail -5 "$tmp/wf.err")"; fi
alive $fpid && pass "follow outlives its store being wiped" || fail "follow exited when its store was wiped"
grep_out "follow says the store is gone while waiting" "waiting for the store .* to appear\|waiting for a first step" "$tmp/wf.err"
stop $fpid
holds "follow through a wiped store: the new run's step 1 exactly" "$P/wf.safetensors" 1 "$G/r1.safetensors"

# ---- the chain's tensors change (a vocabulary resized): the output is rebuilt ----
S=$tmp/s
for s in 0 1 2; do "$bin" publish --store "$S" --step $s "$G/a$s.safetensors" >/dev/null || fail "publish a$s to S"; done
expect_rc "pull to step 2 before the resize" 0 "$bin" pull --store "$S" "$P/s.safetensors"
cp "$P/s.safetensors" "$P/sf.safetensors"
timeout -k 5 60 "$bin" follow --store "$S" --interval 0.05 --until-step 4 "$P/sf.safetensors" >"$tmp/sf.out" 2>"$tmp/sf.err" &
fpid=$!; bg+=($fpid)
sleep 0.5
for s in 3 4; do
    expect_rc "publish step $s with the vocabulary resized" 0 "$bin" publish --store "$S" --step $s "$G/v$s.safetensors"
done
expect_rc "pull across the resize exits 0" 0 "$bin" pull --store "$S" "$P/s.safetensors"
holds "pull across the resize: the new model at step 4 exactly" "$P/s.safetensors" 4 "$G/v4.safetensors"
grep_out "pull across the resize: said, with both shapes" \
    "the chain's tensors changed.*\[4096, 128\].*\[2048, 128\].*rebuilt with the tensors of anchor 3" "$tmp/err"
wait $fpid; rc=$?
[ $rc -eq 0 ] && pass "follow across the resize reaches step 4 (exit 0)" || fail "follow across the resize: exit $rc: $(tail -3 "$tmp/sf.err")"
holds "follow across the resize: the new model at step 4 exactly" "$P/sf.safetensors" 4 "$G/v4.safetensors"
expect_rc "pull --step 2 back across the resize" 0 "$bin" pull --store "$S" --step 2 "$P/s.safetensors"
holds "pull back across the resize: the old model at step 2 exactly" "$P/s.safetensors" 2 "$G/a2.safetensors"
# a file of another model is still refused, by follow too (exit 5), and left alone
"$bin" gen --model tiny --vocab 1024 --step 4 -o "$P/o.safetensors"
cp "$P/o.safetensors" "$P/o.before"
expect_rc "follow into a file of another model: exit 5" 5 timeout -k 5 30 "$bin" follow --store "$S" --interval 0.05 "$P/o.safetensors"
grep_out "follow: another model named" "WSYNC_ERR_LAYOUT" "$tmp/err"
check "follow: another model left alone" cmp "$P/o.safetensors" "$P/o.before"

# ---- the same for a model directory (a link switched to versions) ----
D=$tmp/d; mkdir -p "$D"
for s in 0 1; do "$bin" gen --model tiny --step $s --shards 2 -o "$D/a$s" >/dev/null || fail "gen dir a$s"; done
for s in 2 3; do "$bin" gen --model tiny --vocab 4096 --step $s --shards 3 -o "$D/v$s" >/dev/null || fail "gen dir v$s"; done
same_dir() { # name, pulled dir, generated dir: every shard's tensors bit for bit
    local name=$1 got=$2 ref=$3 f bad=
    for f in "$ref"/*.safetensors; do
        "$bin" verify "$got/$(basename "$f")" "$f" >/dev/null 2>&1 || bad="$bad $(basename "$f")"
    done
    [ "$(ls "$got"/*.safetensors | wc -l)" = "$(ls "$ref"/*.safetensors | wc -l)" ] || bad="$bad (shard count)"
    if [ -z "$bad" ]; then pass "$name"; else fail "$name:$bad"; fi
}
SD=$tmp/sd
for s in 0 1; do "$bin" publish --store "$SD" --step $s "$D/a$s" >/dev/null || fail "publish dir a$s"; done
expect_rc "pull a directory at step 1" 0 "$bin" pull --store "$SD" "$P/md"
same_dir "directory at step 1" "$P/md" "$D/a1"
"$bin" pull --store "$SD" "$P/mf" >/dev/null 2>&1 || fail "pull a second directory"
timeout -k 5 60 "$bin" follow --store "$SD" --interval 0.05 --until-step 3 "$P/mf" >"$tmp/mf.out" 2>"$tmp/mf.err" &
fpid=$!; bg+=($fpid)
sleep 0.5
for s in 2 3; do
    expect_rc "publish directory step $s resized (3 shards)" 0 "$bin" publish --store "$SD" --step $s "$D/v$s"
done
expect_rc "pull a directory across the resize" 0 "$bin" pull --store "$SD" "$P/md"
same_dir "directory across the resize: the new model at step 3, 3 shards" "$P/md" "$D/v3"
grep_out "directory across the resize: said" "rebuilt with the tensors of anchor 2" "$tmp/err"
grep_out "directory across the resize: a new version" "md -> md.step_000003" "$tmp/out"
wait $fpid; rc=$?
[ $rc -eq 0 ] && pass "follow of a directory across the resize (exit 0)" || fail "follow dir across the resize: exit $rc: $(tail -3 "$tmp/mf.err")"
same_dir "follow of a directory across the resize: step 3 exactly" "$P/mf" "$D/v3"

# ---- follow never waits in silence ----
expect_rc "follow of a store that does not exist: exit 3" 3 timeout -k 5 30 "$bin" follow --store "$tmp/typo-bucket" "$P/n.safetensors"
grep_out "follow: the missing store named" "WSYNC_ERR_NO_STORE: the store '.*typo-bucket' does not exist" "$tmp/err"
grep_out "follow: --wait named" "--wait waits for the store to appear" "$tmp/err"
[ ! -e "$tmp/typo-bucket" ] && pass "follow does not create a missing store" || fail "follow created the store"
# --wait: waits for the store, says so at once, and takes the first step once published
timeout -k 5 60 "$bin" follow --store "$tmp/later" --wait --interval 0.1 --until-step 0 "$P/later.safetensors" \
    >"$tmp/later.out" 2>"$tmp/later.err" &
wpid=$!; bg+=($wpid)
# an empty chain: waited for, and said
mkdir -p "$tmp/emptyb"
timeout -k 5 60 "$bin" follow --store "$tmp/emptyb" --interval 0.1 "$P/e.safetensors" >"$tmp/e.out" 2>"$tmp/e.err" &
epid=$!; bg+=($epid)
# a store that never appears: said at once, 10 s later, not every poll
timeout -k 5 60 "$bin" follow --store "$tmp/never" --wait --interval 0.05 "$P/never.safetensors" >"$tmp/nv.out" 2>"$tmp/nv.err" &
npid=$!; bg+=($npid)
# an unreachable URL: the retrying said periodically too (a tool built with libcurl)
"$bin" log --store http://127.0.0.1:1/x >/dev/null 2>"$tmp/curl.err"
has_curl=1; grep -q "without libcurl" "$tmp/curl.err" && has_curl=0
if [ $has_curl = 1 ]; then
    timeout -k 5 60 "$bin" follow --store http://127.0.0.1:1/bucket --interval 0.5 "$P/u.safetensors" >"$tmp/u.out" 2>"$tmp/u.err" &
    upid=$!; bg+=($upid)
fi
sleep 2
alive $wpid && pass "follow --wait waits for a missing store" || fail "follow --wait exited: $(cat "$tmp/later.err")"
grep_out "follow --wait says what it waits for" "waiting for the store .*later to appear (trying again every 0.1 s)" "$tmp/later.err"
grep_out "follow --wait says the last error" "WSYNC_ERR_NO_STORE" "$tmp/later.err"
[ ! -e "$tmp/later" ] && pass "follow --wait creates nothing" || fail "follow --wait created the store"
"$bin" publish --store "$tmp/later" --step 0 "$G/a0.safetensors" >/dev/null || fail "publish into the awaited store"
wait $wpid; rc=$?
[ $rc -eq 0 ] && pass "follow --wait takes the first step once the store appears" || fail "follow --wait: exit $rc: $(tail -3 "$tmp/later.err")"
holds "follow --wait: step 0 exactly" "$P/later.safetensors" 0 "$G/a0.safetensors"
alive $epid && pass "follow waits for an empty chain" || fail "follow of an empty chain exited: $(cat "$tmp/e.err")"
grep_out "follow says it waits for a first step" "waiting for a first step to be published in .*emptyb" "$tmp/e.err"
stop $epid
wait_for 15 grep -q "still waiting for the store .*never" "$tmp/nv.err"   # the second report, 10 s after the first
n=$(count_lines "waiting for the store .*never to appear" "$tmp/nv.err")
[ "$n" -ge 2 ] && [ "$n" -le 3 ] && pass "a long wait is said again after 10 s, not every poll ($n lines)" \
    || fail "a long wait: $n lines: $(head -c 800 "$tmp/nv.err")"
grep_out "the repeat says how long and the last error" "still waiting for the store .*never to appear after 1[0-9] s ([0-9]* tries); the last error: .*WSYNC_ERR_NO_STORE" "$tmp/nv.err"
stop $npid
if [ $has_curl = 1 ]; then
    # each read of the chain takes its attempts (HEAD, then a listing: about 6 s)
    wait_for 25 grep -q "still waiting for the chain in http://127.0.0.1:1/bucket" "$tmp/u.err"
    alive $upid && pass "follow keeps retrying an unreachable URL" || fail "follow of an unreachable URL exited: $(cat "$tmp/u.err")"
    grep_out "an unreachable URL: said at once, with the error" \
        "waiting for the chain in http://127.0.0.1:1/bucket to be readable (trying again every 0.5 s): .*127.0.0.1" "$tmp/u.err"
    grep_out "an unreachable URL: the retrying said again" "still waiting for the chain in http://127.0.0.1:1/bucket to be readable after 1[0-9] s ([0-9]* tries); the last error: .*127.0.0.1" "$tmp/u.err"
    stop $upid
else
    echo "note: the tool has no libcurl: the unreachable URL case is not run"
fi

# ---- the three store situations: distinct exit codes, stated in --help ----
"$bin" --help >"$tmp/help"
grep_out "--help states exit 3" "3  pull, follow, log: no store there (WSYNC_ERR_NO_STORE" "$tmp/help"
grep_out "--help states exit 4" "4  pull, log: an empty chain (WSYNC_ERR_NOT_FOUND" "$tmp/help"
grep_out "--help states exit 5" "5  pull, follow: the local model does not match the chain (WSYNC_ERR_LAYOUT" "$tmp/help"
for c in pull follow; do
    "$bin" $c --help >"$tmp/help"
    grep_out "$c --help states the exit codes" "3 no store there" "$tmp/help"
    grep_out "$c --help names --follow-restart" "--follow-restart" "$tmp/help"
done
grep_out "follow --help names --wait" "--wait" "$tmp/help"
expect_rc "log: no store, exit 3" 3 "$bin" log --store "$tmp/none"
mkdir -p "$tmp/none"
expect_rc "log: an empty chain, exit 4" 4 "$bin" log --store "$tmp/none"
expect_rc "pull: no store, exit 3" 3 "$bin" pull --store "$tmp/none2" "$P/x.safetensors"
expect_rc "pull: an empty chain, exit 4" 4 "$bin" pull --store "$tmp/none" "$P/x.safetensors"
expect_rc "pull: a model of another layout, exit 5" 5 "$bin" pull --store "$S" "$P/o.safetensors"

# ---- errors that say what the input is ----
cp README.md "$tmp/README.md"
size=$(wc -c < "$tmp/README.md" | tr -d ' ')
for c in inspect verify; do
    if [ $c = inspect ]; then expect_rc "$c of a text file" 1 "$bin" inspect "$tmp/README.md"
    else expect_rc "$c of a text file" 1 "$bin" verify "$tmp/README.md" "$G/a0.safetensors"; fi
    grep_out "$c: not a safetensors file, said" "does not look like a safetensors file" "$tmp/err"
    grep_out "$c: why: the length and the size" "first 8 bytes (\"# wsync.*\") read as a header length of [0-9]* bytes while the file is $size bytes" "$tmp/err"
done
expect_rc "publish of a text file" 1 "$bin" publish --store "$tmp/pt" --step 0 "$tmp/README.md"
grep_out "publish: not a safetensors file, said" "does not look like a safetensors file" "$tmp/err"
cp README.md "$P/text.safetensors"
expect_rc "pull into a text file" 1 "$bin" pull --store "$S" "$P/text.safetensors"
grep_out "pull: a text file, said" "does not look like a safetensors file.*while the file is $size bytes" "$tmp/err"
printf '\x20\x00\x00\x00\x00\x00\x00\x00[1, 2, 3]                       ' > "$tmp/array.safetensors"
expect_rc "inspect of a header that is not an object" 1 "$bin" inspect "$tmp/array.safetensors"
grep_out "a header that is not an object: said" "header after the length does not start with '{' but with \"\[1, 2, 3" "$tmp/err"
for c in inspect verify diff; do
    case $c in
    inspect) expect_rc "$c of a missing file" 1 "$bin" inspect "$tmp/missing.safetensors" ;;
    verify) expect_rc "$c of a missing file" 1 "$bin" verify "$G/a0.safetensors" "$tmp/missing.safetensors" ;;
    diff) expect_rc "$c of a missing file" 1 "$bin" diff "$tmp/missing.safetensors" "$G/a0.safetensors" -o "$tmp/d" ;;
    esac
    grep_out "$c: a missing file says why" "cannot open '.*missing.safetensors': No such file or directory" "$tmp/err"
done
expect_rc "apply of a missing delta" 1 "$bin" apply "$G/a0.safetensors" "$tmp/missing.delta" -o "$tmp/x"
grep_out "apply: a missing delta says why" "cannot open '.*missing.delta': No such file or directory" "$tmp/err"
cd "$tmp"
for c in pull follow log publish; do
    case $c in
    pull|follow) expect_rc "$c --store ftp://: a usage error" 2 timeout -k 5 10 "$bin" $c --store ftp://host/x "$P/x.safetensors" ;;
    log) expect_rc "$c --store ftp://: a usage error" 2 "$bin" log --store ftp://host/x ;;
    publish) expect_rc "$c --store ftp://: a usage error" 2 "$bin" publish --store ftp://host/x --step 0 "$G/a0.safetensors" ;;
    esac
    grep_out "$c --store ftp://: the schemes wsync knows" "unknown scheme 'ftp://'; a store is a directory, http://.*https://.*s3://" "$tmp/err"
done
[ ! -e "$tmp/ftp:" ] && pass "--store ftp://: nothing created" || fail "--store ftp:// created a directory"
cd - >/dev/null

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
