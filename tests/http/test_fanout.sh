#!/usr/bin/env bash
# Fan-out under load: one publisher writes a chain into a WebDAV bucket on a
# real nginx (tests/http/servers/fanout.conf.in, started here on 127.0.0.1 as
# tests/http/test_http.sh starts its own) while many `wsync follow` processes
# follow it, with nginx's limit_conn set low enough that it refuses requests
# with 503, and with nginx killed (SIGKILL) and started again on the same port
# in the middle of the run. The followers come in three kinds: from no file
# (started before step 0), from a stale file (step 0's, started at once) and
# late ones (a `wsync pull` once a third of the steps are out, then follow;
# a pull still running when nginx goes down fails after its attempts, and
# must say so).
# Checks: every publish succeeds, nginx refused some requests (503) and was
# restarted, every follower exits 0 before its timeout (none hangs), says it
# is at the last step, and its file is bit-exact with the
# generated last step (wsync verify); requests were served after the restart.
# Prints the aggregate bytes per second nginx served the followers (the body
# bytes in its access log over the wall time of the run) against one curl
# downloading the bucket's objects in the same run, and what the followers
# printed about retries.
# usage: tests/http/test_fanout.sh WSYNC_BIN
# sizes (the defaults fit make test; bench/bench_fanout.sh sets the full size):
#   FANOUT_FOLLOWERS (20)  follower processes
#   FANOUT_STEPS (10)      steps published, 0..STEPS-1
#   FANOUT_VOCAB ()        gen --vocab for a larger model (empty: tiny as it is)
#   FANOUT_LIMIT (1)       nginx limit_conn on the followers' port: requests in
#                          progress at once; over it nginx answers 503 (the
#                          refusals come mostly from the burst when an anchor
#                          appears: on loopback small requests rarely overlap)
#   FANOUT_GAP (0.3)       seconds between two publishes
#   FANOUT_DOWN (5)        seconds nginx stays down at the restart: longer than
#                          the HTTP store's retries of one request (5 attempts,
#                          0.2+0.4+0.8+1.6 s of backoff, up to 25% jitter), so
#                          requests made while it is down fail and the tool
#                          reports them; follow retries at its next check
#   FANOUT_TIMEOUT (60)    seconds each follower (and late pull) may run
#   FANOUT_ANCHOR_EVERY (4) publish --anchor-every
#   FANOUT_KEEP            set: keep the temporary directory (logs, files)
set -u
cd "$(dirname "$0")/../.."
root=$PWD
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
finish() { echo "summary: $passed passed, $failed failed"; [ $failed -eq 0 ]; exit; }
check() { if [ "$1" ]; then pass "$2"; else fail "$2${3:+: $3}"; fi; }

[ $# -eq 1 ] || { echo "usage: $0 WSYNC_BIN"; exit 2; }
tool=$1
case $tool in /*) ;; *) tool=$root/$tool ;; esac
N=${FANOUT_FOLLOWERS:-20}
STEPS=${FANOUT_STEPS:-10}
VOCAB=${FANOUT_VOCAB:-}
LIMIT=${FANOUT_LIMIT:-1}
GAP=${FANOUT_GAP:-0.3}
DOWN=${FANOUT_DOWN:-5}
TMO=${FANOUT_TIMEOUT:-60}
AEVERY=${FANOUT_ANCHOR_EVERY:-4}
last=$((STEPS - 1))
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
if [ ! -x "$NGINX" ]; then fail "nginx is not installed (tests/install-deps.sh installs nginx-light)"; finish; fi
if ! "$NGINX" -V 2>&1 | grep -q -- --with-http_dav_module; then fail "$NGINX has no dav module"; finish; fi
for c in curl timeout python3; do
    command -v $c >/dev/null || { fail "$c is not installed"; finish; }
done

tmp=$(mktemp -d /tmp/wsync-fanout.XXXXXX)
jobs_started=()   # background jobs (each its own process group: set -m)
set -m
# every wsync run under `timeout`, which puts itself and the command in a
# process group of their own (so a job's group does not reach them): their
# pids are in $tmp/pids and each group is ended here, TERM then KILL, only
# processes whose command line names $tmp (a follower stuck in its HTTP
# retries answers TERM only when they end)
ours() { # the processes in the groups listed in $tmp/pids whose command line names $tmp
    ps -eo pid=,pgid=,args= | awk -v t="$tmp" 'NR == FNR { g[$1] = 1; next } ($2 in g) && index($0, t) { print $1 }' "$tmp/pids" -
}
cleanup() {
    local j q
    for j in "${jobs_started[@]}"; do kill -TERM -- "-$j" 2>/dev/null; done
    [ -f "$tmp/nginx.pid" ] && kill -9 "$(cat "$tmp/nginx.pid")" 2>/dev/null
    if [ -f "$tmp/pids" ]; then
        q=$(ours)
        if [ -n "$q" ]; then kill -TERM $q 2>/dev/null; sleep 0.5; kill -KILL $(ours) 2>/dev/null; fi
    fi
    for j in "${jobs_started[@]}"; do kill -KILL -- "-$j" 2>/dev/null; done
    if [ -n "${FANOUT_KEEP:-}" ]; then echo "  fanout: kept $tmp"; else rm -rf "$tmp"; fi
}
# runs a command under timeout -k 5 SECONDS, its pid in $tmp/pids; its status
tmo() { local secs=$1; shift; timeout -k 5 "$secs" "$@" & local p=$!; echo "$p" >>"$tmp/pids"; wait "$p"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$tmp/data/bucket" "$tmp/body" "$tmp/proxy" "$tmp/fastcgi" "$tmp/uwsgi" "$tmp/scgi" "$tmp/m" "$tmp/f"
chmod 755 "$tmp"
now() { date +%s.%N; }

# ---- the model's steps ----
vocab_args=(); [ -n "$VOCAB" ] && vocab_args=(--vocab "$VOCAB")
ok=1
for s in $(seq 0 $last); do
    "$tool" gen --model tiny "${vocab_args[@]}" --step $s -o "$tmp/m/g$s.safetensors" >/dev/null 2>"$tmp/gen.err" || ok=0
done
check "$([ $ok -eq 1 ] && echo 1)" "gen: steps 0..$last of tiny${VOCAB:+ --vocab $VOCAB}" "$(head -c 300 "$tmp/gen.err")"
[ $ok -eq 1 ] || finish

# ---- nginx: a random free port pair, another one if taken ----
free_port() {
    python3 -c 'import random, socket
for _ in range(50):
    p = random.randint(20000, 60000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); s.close(); print(p); break
    except OSError:
        s.close()'
}
user_line=; [ "$(id -u)" -eq 0 ] && user_line="user root;"
start_nginx() { "$NGINX" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" 2>>"$tmp/start.log"; }
wait_pid_file() { local i; for i in $(seq 100); do [ -s "$tmp/nginx.pid" ] && kill -0 "$(cat "$tmp/nginx.pid")" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
started=0
for try in 1 2 3 4 5; do
    port=$(free_port); pubport=$(free_port)
    [ "$port" = "$pubport" ] && continue
    sed -e "s|@DIR@|$tmp|g" -e "s|@PORT@|$port|g" -e "s|@PUBPORT@|$pubport|g" -e "s|@LIMIT@|$LIMIT|g" \
        -e "s|@USER@|$user_line|" tests/http/servers/fanout.conf.in > "$tmp/nginx.conf"
    if start_nginx && wait_pid_file; then started=1; break; fi
done
if [ $started -ne 1 ]; then fail "nginx did not start: $(tail -n 3 "$tmp/start.log" "$tmp/error.log" 2>/dev/null)"; finish; fi
pass "nginx started (limit_conn $LIMIT on the followers' port $port, publisher on $pubport)"
url="http://127.0.0.1:$port/bucket"
puburl="http://127.0.0.1:$pubport/bucket"

# ---- the followers ----
# follower K: $tmp/f/K.{safetensors,out,err,rc}; rc 124/137: timed out
follow_cmd() { # K
    tmo "$TMO" "$tool" follow --store "$url" "$tmp/f/$1.safetensors" --interval 0.05 --until-step $last \
        >"$tmp/f/$1.out" 2>"$tmp/f/$1.err"
    echo $? >"$tmp/f/$1.rc"
}
late_cmd() { # K: a pull, then follow
    tmo "$TMO" "$tool" pull --store "$url" "$tmp/f/$1.safetensors" >"$tmp/f/$1.pull.out" 2>"$tmp/f/$1.pull.err"
    echo $? >"$tmp/f/$1.pull.rc"
    follow_cmd "$1"
}
n_scratch=$(( (N + 1) / 2 )); n_stale=$(( N / 4 )); n_late=$(( N - n_scratch - n_stale ))
t0=$(now)
for k in $(seq 1 $n_scratch); do follow_cmd $k & jobs_started+=($!); done
for k in $(seq $((n_scratch + 1)) $((n_scratch + n_stale))); do
    cp "$tmp/m/g0.safetensors" "$tmp/f/$k.safetensors"
    follow_cmd $k & jobs_started+=($!)
done

# ---- the publisher (its own port; each step tried up to 3 times) ----
wait_file() { while [ ! -e "$1" ]; do sleep 0.01; done; }
publisher() {
    local s try
    for s in $(seq 0 $last); do
        for try in 1 2 3; do
            if tmo 60 "$tool" publish --store "$puburl" --step $s --anchor-every "$AEVERY" --retain 1000 \
                "$tmp/m/g$s.safetensors" >>"$tmp/pub.out" 2>>"$tmp/pub.err"; then
                echo $s >"$tmp/published"; break
            fi
            echo "$s" >>"$tmp/pub.retried"
            [ $try -eq 3 ] && { echo failed >"$tmp/pub.rc"; return; }
            sleep 0.5
        done
        # the late followers start, and nginx is killed, before the next step
        [ $s -eq $((STEPS / 3)) ] && wait_file "$tmp/late.started"
        [ $s -eq $((STEPS / 2)) ] && wait_file "$tmp/killed"
        sleep "$GAP"
    done
    echo 0 >"$tmp/pub.rc"
}
sleep 0.3   # the followers find no chain yet
publisher & jobs_started+=($!)
wait_published() { # step: waits for it (or the publisher's end)
    while :; do
        [ -f "$tmp/pub.rc" ] && return
        [ -f "$tmp/published" ] && [ "$(cat "$tmp/published")" -ge "$1" ] 2>/dev/null && return
        sleep 0.02
    done
}

# the late followers, once a third of the steps are out
wait_published $((STEPS / 3))
for k in $(seq $((n_scratch + n_stale + 1)) $N); do late_cmd $k & jobs_started+=($!); done
touch "$tmp/late.started"

# nginx killed and started again, halfway
wait_published $((STEPS / 2))
sleep "$(python3 -c "print($GAP / 2)")"   # (the publisher waits for it before the next step)
old_pid=$(cat "$tmp/nginx.pid")
t_kill=$(now)
kill -9 "$old_pid"
touch "$tmp/killed"
for i in $(seq 100); do kill -0 "$old_pid" 2>/dev/null || break; sleep 0.02; done
rm -f "$tmp/nginx.pid"
sleep "$DOWN" & jobs_started+=($!); wait $!   # (a signal ends the wait at once)
restarted=0
for try in 1 2 3 4 5; do
    if start_nginx && wait_pid_file; then restarted=1; break; fi
    sleep 0.2
done
t_up=$(now)
new_pid=$(cat "$tmp/nginx.pid" 2>/dev/null)
check "$([ $restarted -eq 1 ] && [ "$new_pid" != "$old_pid" ] && echo 1)" \
    "nginx killed (pid $old_pid) and started again on port $port (pid ${new_pid:-none}) after ${DOWN}s" \
    "$(tail -n 3 "$tmp/start.log" "$tmp/error.log" 2>/dev/null)"

# ---- wait for everyone ----
for j in "${jobs_started[@]}"; do wait "$j" 2>/dev/null; done
t1=$(now)

check "$([ "$(cat "$tmp/pub.rc" 2>/dev/null)" = 0 ] && echo 1)" "publisher: steps 0..$last published" \
    "$(tail -c 400 "$tmp/pub.err" 2>/dev/null)"
pub_retried=$(cat "$tmp/pub.retried" 2>/dev/null | wc -l)
hung=(); bad=(); notlast=(); notexact=(); badpull=(); pull_outage=0
for k in $(seq 1 $N); do
    rc=$(cat "$tmp/f/$k.rc" 2>/dev/null || echo none)
    case $rc in 124|137) hung+=($k) ;; 0) ;; *) bad+=("$k:rc=$rc") ;; esac
    grep -q "at step $last after" "$tmp/f/$k.out" 2>/dev/null || notlast+=($k)
    "$tool" verify "$tmp/f/$k.safetensors" "$tmp/m/g$last.safetensors" >/dev/null 2>&1 || notexact+=($k)
    # a late pull (one-shot) may fail in the outage, after its attempts, and
    # must then say so; the follow after it still has to end at the last step
    if [ -f "$tmp/f/$k.pull.rc" ]; then
        prc=$(cat "$tmp/f/$k.pull.rc")
        if [ "$prc" = 1 ] && grep -q "127.0.0.1:$port.*after [0-9]* attempts" "$tmp/f/$k.pull.err"; then pull_outage=$((pull_outage + 1))
        elif [ "$prc" != 0 ]; then badpull+=("$k:rc=$prc"); fi
    fi
done
first_err() { # the first follower's stderr in a list "K..." (K:...)
    [ $# -gt 0 ] || return; local k=${1%%:*}; echo "follower $k: $(head -c 300 "$tmp/f/$k.err" 2>/dev/null)"
}
check "$([ ${#hung[@]} -eq 0 ] && echo 1)" "no follower hung past its ${TMO}s timeout ($N followers)" \
    "timed out: ${hung[*]}; $(first_err "${hung[@]}")"
check "$([ ${#bad[@]} -eq 0 ] && echo 1)" "every follower exited 0 ($n_scratch from no file, $n_stale from step 0's file, $n_late late)" \
    "${bad[*]}; $(first_err "${bad[@]}")"
check "$([ ${#notlast[@]} -eq 0 ] && echo 1)" "every follower says it is at step $last" "${notlast[*]}; $(first_err "${notlast[@]}")"
check "$([ ${#notexact[@]} -eq 0 ] && echo 1)" "every follower's file is bit-exact with step $last (wsync verify)" \
    "${notexact[*]}; $(first_err "${notexact[@]}")"
check "$([ ${#badpull[@]} -eq 0 ] && echo 1)" "every late pull ($n_late) exited 0, or 1 naming a request that failed after its attempts ($pull_outage did, in the outage)" \
    "${badpull[*]}; $(for b in "${badpull[@]}"; do head -c 300 "$tmp/f/${b%%:*}.pull.err"; break; done)"

# ---- nginx's access log: refusals, the restart, bytes served ----
log=$tmp/access.log
n503=$(awk -v p="$port" '$2 == p && $3 == 503' "$log" | wc -l)
nreq=$(awk -v p="$port" '$2 == p && $7 !~ /^"curl/' "$log" | wc -l)
check "$([ "$n503" -gt 0 ] && echo 1)" "nginx refused some followers' requests with 503 (limit_conn $LIMIT): $n503 of $nreq" \
    "none refused: lower FANOUT_LIMIT"
after=$(awk -v p="$port" -v t="$t_up" '$2 == p && $1 > t && ($3 == 200 || $3 == 206)' "$log" | wc -l)
check "$([ "$after" -gt 0 ] && echo 1)" "the followers were served after the restart ($after requests)"
grep -q "limiting connections" "$tmp/error.log" && pass "nginx's error log names the limit_conn refusals" ||
    fail "nginx's error log names no limit_conn refusal"
served=$(awk -v p="$port" '$2 == p && ($3 == 200 || $3 == 206) && $7 !~ /^"curl/ { s += $4 } END { printf "%d", s }' "$log")
wall=$(python3 -c "print('%.3f' % ($t1 - $t0))")
# the busiest second of the run (the followers mostly wait for the publisher)
peak=$(awk -v p="$port" '$2 == p && ($3 == 200 || $3 == 206) && $7 !~ /^"curl/ { b[int($1)] += $4 }
    END { m = 0; for (k in b) if (b[k] > m) m = b[k]; printf "%d", m }' "$log")

# what the tool said about retries: follow reports a read or sync that failed
# after the HTTP store's attempts ("... after 5 attempts") and retries at its
# next check; the HTTP store's retried attempts (wsync_http_stats.retries: a
# 503 from limit_conn, a connection refused while nginx is down, whether the
# request then succeeded or not) are counted on the next update line that
# pull and follow print (", N requests retried"). Every follower is still
# following while nginx is down (the publisher waits for the kill before step
# $((STEPS / 2 + 1)), and each follows to step $last), polls HEAD then, and
# updates after the restart: at least one follower prints the count.
n_fail_msgs=$(cat "$tmp"/f/*.err 2>/dev/null | grep -c "sync to HEAD\|reading the chain" || true)
n_retry_words=$(cat "$tmp"/f/*.err "$tmp"/f/*.out 2>/dev/null | grep -ci "retr" || true)
n_followers_msgs=$(for k in $(seq 1 $N); do [ -s "$tmp/f/$k.err" ] && echo $k; done | wc -l)
n_reported=$(for k in $(seq 1 $N); do grep -q "127.0.0.1:$port.*after [0-9]* attempts" "$tmp/f/$k.err" 2>/dev/null && echo $k; done | wc -l)
n_counted=$(for k in $(seq 1 $N); do grep -Eq ", [0-9]+ requests? retried" "$tmp/f/$k.out" 2>/dev/null && echo $k; done | wc -l)
check "$([ "$n_counted" -gt 0 ] && echo 1)" \
    "followers printed the HTTP store's retried requests on an update line ($n_counted of $N: the outage, limit_conn's 503s)" \
    "no follower's output has \", N requests retried\"; e.g. $(grep -h "written" "$tmp"/f/*.out 2>/dev/null | head -n 1)"
if python3 -c "import sys; sys.exit(0 if $DOWN >= 4 else 1)"; then
    check "$([ "$n_reported" -gt 0 ] && echo 1)" \
        "followers reported requests that failed after the store's attempts while nginx was down ($n_reported of $N), and still ended at step $last" \
        "no follower's stderr names a request to 127.0.0.1:$port that failed after its attempts"
fi
echo "  fanout: $N followers (limit_conn $LIMIT), steps 0..$last, nginx down ${DOWN}s at step $((STEPS / 2)); publisher retried $pub_retried step(s)"
echo "  fanout: nginx refused $n503 of $nreq follower requests with 503; $n_followers_msgs followers wrote to stderr:" \
     "$n_fail_msgs failed-sync/chain-read reports, $n_retry_words lines mentioning a retry"
sed -n 1p $(for k in $(seq 1 $N); do [ -s "$tmp/f/$k.err" ] && echo "$tmp/f/$k.err"; done | head -n 3) /dev/null 2>/dev/null |
    sed 's/^/  fanout: e.g. /' | head -n 3

# ---- one curl, the same objects, the same nginx, now idle ----
# the bucket's objects, repeated until about as many bytes as the followers got
# (at most 16 rounds), in one curl process over one connection
(cd "$tmp/data" && find bucket -type f | sort) >"$tmp/objects"
objbytes=$(cd "$tmp/data" && cat "$tmp/objects" | xargs stat -c %s | awk '{ s += $1 } END { printf "%d", s }')
rounds=1
[ "$objbytes" -gt 0 ] && rounds=$(( served / objbytes )); [ $rounds -lt 1 ] && rounds=1; [ $rounds -gt 16 ] && rounds=16
: >"$tmp/curl.cfg"
for r in $(seq $rounds); do
    while read -r o; do printf 'url = "http://127.0.0.1:%s/%s"\noutput = "/dev/null"\n' "$port" "$o"; done <"$tmp/objects" >>"$tmp/curl.cfg"
done
c0=$(now)
curl -s -f --max-time 120 -K "$tmp/curl.cfg" -w '%{size_download}\n' >"$tmp/curl.out" 2>"$tmp/curl.err"; crc=$?
c1=$(now)
cbytes=$(awk '{ s += $1 } END { printf "%d", s }' "$tmp/curl.out")
check "$([ $crc -eq 0 ] && [ "$cbytes" -eq $((objbytes * rounds)) ] && echo 1)" \
    "one curl downloaded the bucket's $(wc -l <"$tmp/objects") objects $rounds time(s)" "rc $crc, $cbytes bytes: $(head -c 200 "$tmp/curl.err")"
python3 - "$served" "$wall" "$cbytes" "$(python3 -c "print($c1 - $c0)")" "$N" "$peak" <<'EOF'
import sys
served, wall, cbytes, ctime, n = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
peak = int(sys.argv[6])
agg = served / wall if wall > 0 else 0
one = cbytes / ctime if ctime > 0 else 0
print("  fanout: aggregate served to %s followers: %d bytes in %.2f s = %.1f MB/s (busiest second: %.1f MB/s)"
      % (n, served, wall, agg / 1e6, peak / 1e6))
print("  fanout: one curl, the same objects: %d bytes in %.3f s = %.1f MB/s (aggregate / one curl: %.2fx, busiest second / one curl: %.2fx)"
      % (cbytes, ctime, one / 1e6, agg / one if one > 0 else 0, peak / one if one > 0 else 0))
EOF
finish
