#!/usr/bin/env bash
# The S3 store against S3 servers with smaller request bodies, and a bucket
# that does not exist: s3rver 4.0.4 (npm, build/s3rver, as tests/http/test_s3.sh
# starts it) behind an nginx reverse proxy (tests/http/s3/limits-nginx.conf.in)
# with client_max_body_size 11m on one port and 4m on another. Runs each
# test binary given (the plain and the ASan build of tests/http/test_s3_limits.c),
# and, given the tool (a path ending in /wsync), its --s3-part-size and
# --s3-multipart-threshold and its warning after a 413; then the store
# conformance suite (tests/http/test_conformance.c beside each test binary)
# through the 11m proxy, and against fauxqs's S3 where it is installed
# (build/fauxqs; tests/http/s3/run_fauxqs.mjs starts it on 127.0.0.1).
# usage: tests/http/test_s3_limits.sh TEST_BIN... [path/to/wsync]
set -u
cd "$(dirname "$0")/../.."
root=$PWD
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
finish() { echo "summary: $passed passed, $failed failed"; [ $failed -eq 0 ]; exit; }

[ $# -ge 1 ] || { echo "usage: $0 TEST_BIN..."; exit 2; }
S3RVER_DIR=${S3RVER_DIR:-$root/build/s3rver/node_modules/@20minutes/s3rver}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
if ! command -v node >/dev/null; then fail "node is not installed (tests/install-deps.sh installs nodejs)"; finish; fi
if [ ! -f "$S3RVER_DIR/lib/cli.js" ]; then fail "s3rver is not installed in $S3RVER_DIR (run tests/install-deps.sh)"; finish; fi
if [ ! -x "$NGINX" ]; then fail "nginx is not installed (tests/install-deps.sh installs nginx-light)"; finish; fi

tmp=$(mktemp -d /tmp/wsync-s3lim.XXXXXX)
server_pid=; fauxqs_pid=
cleanup() {
    [ -f "$tmp/nginx.pid" ] && kill -9 "$(cat "$tmp/nginx.pid")" 2>/dev/null
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    [ -n "$fauxqs_pid" ] && kill "$fauxqs_pid" 2>/dev/null && wait "$fauxqs_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/body" "$tmp/proxy" "$tmp/fastcgi" "$tmp/uwsgi" "$tmp/scgi"
bucket=wsync-limits

NODE_OPTIONS=--openssl-legacy-provider node tests/http/s3/run_s3rver.js "$S3RVER_DIR" \
    -d "$tmp/data" -a 127.0.0.1 -p 0 --silent --configure-bucket "$bucket" > "$tmp/server.out" 2>&1 &
server_pid=$!
port=
for i in $(seq 200); do
    port=$(sed -n -E 's/^S3rver listening on 127\.0\.0\.1:([0-9]+)$/\1/p' "$tmp/server.out" 2>/dev/null)
    [ -n "$port" ] && break
    kill -0 $server_pid 2>/dev/null || break
    sleep 0.05
done
if [ -z "$port" ]; then fail "s3rver did not start: $(tail -n 5 "$tmp/server.out")"; finish; fi

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
started=0
for try in 1 2 3 4 5; do
    p1=$(free_port); p2=$(free_port)
    sed -e "s|@DIR@|$tmp|g" -e "s|@PORT@|$p1|g" -e "s|@PORT2@|$p2|g" -e "s|@S3PORT@|$port|g" -e "s|@USER@|$user_line|" \
        tests/http/s3/limits-nginx.conf.in > "$tmp/nginx.conf"
    if "$NGINX" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" 2>>"$tmp/start.log"; then started=1; break; fi
done
if [ $started -ne 1 ]; then fail "nginx did not start: $(tail -n 3 "$tmp/start.log" "$tmp/error.log" 2>/dev/null)"; finish; fi
for i in $(seq 50); do [ -s "$tmp/nginx.pid" ] && break; sleep 0.05; done

export WSYNC_TEST_S3_ENDPOINT="http://127.0.0.1:$port" WSYNC_TEST_S3_BUCKET=$bucket
export WSYNC_TEST_S3_PROXY_11M="http://127.0.0.1:$p1" WSYNC_TEST_S3_PROXY_4M="http://127.0.0.1:$p2"
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_DEFAULT_REGION AWS_CA_BUNDLE WSYNC_CA_BUNDLE \
    WSYNC_S3_PART_SIZE WSYNC_S3_MULTIPART_THRESHOLD

tool=
for b in "$@"; do
    case $b in /*) ;; *) b=$root/$b ;; esac
    case $b in */wsync) tool=$b; continue ;; esac
    out=$(WSYNC_TEST_S3_TAG="$(basename "$(dirname "$b")")-$$" "$b" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^summary: '
    line=$(printf '%s\n' "$out" | grep -E '^summary: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then fail "$b exited $rc without a summary line"; printf '%s\n' "$out" | tail -n 20; continue; fi
    p=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\1/')
    f=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\2/')
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { f=1; echo "FAIL $b: exit status $rc"; }
    echo "  s3-limits: $b: $p passed, $f failed"
    passed=$((passed + p)); failed=$((failed + f))
done
# the tool through the 11m proxy: an 18 MB anchor as one PUT is refused and
# goes again in parts (a warning says so); with the options, no refusal
if [ -n "$tool" ]; then
    "$tool" gen --model tiny --vocab 32768 --step 0 -o "$tmp/g0.st" >/dev/null || fail "gen"
    "$tool" gen --model tiny --vocab 32768 --step 1 -o "$tmp/g1.st" >/dev/null || fail "gen"
    export AWS_ENDPOINT_URL="http://127.0.0.1:$p1"
    url="s3://$bucket/cli-$$"
    "$tool" publish --store "$url/a" --step 0 "$tmp/g0.st" >"$tmp/out" 2>"$tmp/err"; rc=$?
    [ $rc -eq 0 ] && pass "tool: publish of an 18 MB anchor through an 11m limit" || fail "tool publish: exit $rc: $(cat "$tmp/err")"
    grep -q "warning: the server refused [0-9]* uploads\? as too large (HTTP 413).*--s3-part-size" "$tmp/err" \
        && pass "tool: the 413 retry is a warning naming --s3-part-size" || fail "tool: no 413 warning: $(cat "$tmp/err")"
    "$tool" publish --store "$url/b" --s3-part-size 8M --s3-multipart-threshold 8M --step 0 "$tmp/g0.st" \
        >"$tmp/out" 2>"$tmp/err"; rc=$?
    [ $rc -eq 0 ] && ! grep -q "refused" "$tmp/err" && pass "tool: --s3-part-size 8M --s3-multipart-threshold 8M: no refusal" \
        || fail "tool publish with part options: exit $rc: $(cat "$tmp/err")"
    "$tool" publish --store "$url/b" --s3-part-size 8M --s3-multipart-threshold 8M --step 1 "$tmp/g1.st" \
        >/dev/null 2>"$tmp/err" || fail "tool: publish step 1: $(cat "$tmp/err")"
    "$tool" pull --store "$url/b" "$tmp/p.st" >/dev/null 2>"$tmp/err" && "$tool" verify "$tmp/p.st" "$tmp/g1.st" >/dev/null 2>&1 \
        && pass "tool: pulled back bit-exact" || fail "tool: pull: $(cat "$tmp/err")"
    "$tool" publish --store "$url/c" --s3-part-size 4M --step 0 "$tmp/g0.st" >/dev/null 2>"$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -q "at least 5M" "$tmp/err" && pass "tool: --s3-part-size below 5M is a usage error" \
        || fail "tool: --s3-part-size 4M: exit $rc: $(cat "$tmp/err")"
    unset AWS_ENDPOINT_URL
fi
# the store conformance suite through the 11m proxy (the body limit of
# fauxqs): its 12 MiB object goes as one PUT, is refused, and goes in parts
. tests/http/lib_conformance.sh
conf_dirs=()
for b in "$@"; do case $b in */wsync) ;; *) conf_dirs+=("$(dirname "$b")") ;; esac; done
conformance "${conf_dirs[@]}" -- "s3-11m,s3://$bucket/@RUN@,http://127.0.0.1:$p1"
# fauxqs's S3 itself, where it is installed (npm fauxqs 1.9.2 in build/fauxqs):
# its own 11 MiB body limit, and whatever else the suite finds
FAUXQS_DIR=${FAUXQS_DIR:-$root/build/fauxqs/node_modules/fauxqs}
if [ -f "$FAUXQS_DIR/dist/app.js" ]; then
    node tests/http/s3/run_fauxqs.mjs "$FAUXQS_DIR" "$bucket" > "$tmp/fauxqs.out" 2>&1 &
    fauxqs_pid=$!
    fport=
    for i in $(seq 200); do
        fport=$(sed -n -E 's/^fauxqs listening on 127\.0\.0\.1:([0-9]+)$/\1/p' "$tmp/fauxqs.out" 2>/dev/null)
        [ -n "$fport" ] && break
        kill -0 $fauxqs_pid 2>/dev/null || break
        sleep 0.05
    done
    if [ -n "$fport" ]; then conformance "${conf_dirs[@]}" -- "fauxqs,s3://$bucket/@RUN@,http://127.0.0.1:$fport"
    else fail "fauxqs did not start: $(tail -n 5 "$tmp/fauxqs.out")"; fi
else
    echo "  s3-limits: fauxqs is not installed in $FAUXQS_DIR (npm fauxqs@1.9.2 there): its conformance line skipped"
fi
# the proxy really refused bodies: its log has 413s
if grep -q '" 413 ' "$tmp/access.log" 2>/dev/null; then pass "the proxy answered 413 (its access log)"
else fail "the proxy's access log has no 413"; fi
finish
