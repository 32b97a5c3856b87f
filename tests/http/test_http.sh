#!/usr/bin/env bash
# The HTTP store against a real nginx (dav module, JSON autoindex) started
# here on 127.0.0.1 with an ephemeral port, plus a fault-injecting proxy in
# front of it (tests/http/servers/fault_proxy.py): runs each test binary given (the
# plain and the ASan build of tests/http/test_http.c), the store conformance
# suite (tests/http/test_conformance.c beside each: build/, build/san/)
# against nginx with and without a listing, then the tool's publish,
# log and pull over http:// end to end. The same nginx also answers
# redirects to a second port (tests/http/*redirect.conf.in) and serves the
# bucket over TLS on a third with a self-signed certificate made here with
# openssl (tests/http/servers/servers-tls.conf.in). Stops everything on exit.
# usage: tests/http/test_http.sh TEST_BIN... WSYNC_BIN   (the last argument is the tool)
set -u
cd "$(dirname "$0")/../.."
root=$PWD
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
finish() { echo "summary: $passed passed, $failed failed"; [ $failed -eq 0 ]; exit; }

[ $# -ge 1 ] || { echo "usage: $0 TEST_BIN... WSYNC_BIN"; exit 2; }
bins=("${@:1:$#-1}"); tool=${!#}
case $tool in /*) ;; *) tool=$root/$tool ;; esac
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
if [ ! -x "$NGINX" ]; then fail "nginx is not installed (tests/install-deps.sh installs nginx-light)"; finish; fi
if ! "$NGINX" -V 2>&1 | grep -q -- --with-http_dav_module; then fail "$NGINX has no dav module"; finish; fi

tmp=$(mktemp -d /tmp/wsync-http.XXXXXX)
proxy_pid=
cleanup() {
    [ -f "$tmp/nginx.pid" ] && kill -9 "$(cat "$tmp/nginx.pid")" 2>/dev/null
    [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/data" "$tmp/body" "$tmp/proxy" "$tmp/fastcgi" "$tmp/uwsgi" "$tmp/scgi" "$tmp/conf.d" "$tmp/tls"
chmod 755 "$tmp"

# a self-signed certificate for 127.0.0.1 (its own CA) for the TLS server
tls=1
if ! "$NGINX" -V 2>&1 | grep -q -- --with-http_ssl_module; then tls=0; fail "$NGINX has no ssl module: no TLS tests"
elif ! command -v openssl >/dev/null; then tls=0; fail "openssl is not installed: no TLS tests"
elif ! openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
        -addext "subjectAltName=IP:127.0.0.1" -keyout "$tmp/tls/key.pem" -out "$tmp/tls/cert.pem" \
        >"$tmp/tls/openssl.log" 2>&1; then
    tls=0; fail "openssl could not make a certificate: $(tail -n 3 "$tmp/tls/openssl.log")"
fi

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

# nginx: a random high port, another one if that is taken
user_line=; [ "$(id -u)" -eq 0 ] && user_line="user root;"
started=0
for try in 1 2 3 4 5; do
    port=$(free_port); port2=$(free_port); port3=$(free_port)
    subst() { sed -e "s|@DIR@|$tmp|g" -e "s|@PORT@|$port|g" -e "s|@PORT2@|$port2|g" -e "s|@PORT3@|$port3|g" \
                  -e "s|@USER@|$user_line|" "$1"; }
    subst tests/http/servers/nginx.conf.in > "$tmp/nginx.conf"
    subst tests/http/servers/main-redirect.conf.in > "$tmp/conf.d/main-redirect.conf"
    subst tests/http/servers/servers-redirect.conf.in > "$tmp/conf.d/servers-redirect.conf"
    if [ $tls -eq 1 ]; then subst tests/http/servers/servers-tls.conf.in > "$tmp/conf.d/servers-tls.conf"; fi
    if "$NGINX" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" 2>>"$tmp/start.log"; then started=1; break; fi
done
if [ $started -ne 1 ]; then fail "nginx did not start: $(tail -n 3 "$tmp/start.log" "$tmp/error.log" 2>/dev/null)"; finish; fi
for i in $(seq 50); do [ -s "$tmp/nginx.pid" ] && break; sleep 0.05; done

# the fault proxy, in front of nginx
for try in 1 2 3 4 5; do
    pport=$(free_port)
    python3 tests/http/servers/fault_proxy.py "$pport" "$port" > "$tmp/proxy.out" 2>&1 &
    proxy_pid=$!
    for i in $(seq 100); do grep -q ready "$tmp/proxy.out" 2>/dev/null && break; kill -0 $proxy_pid 2>/dev/null || break; sleep 0.05; done
    grep -q ready "$tmp/proxy.out" && break
    kill $proxy_pid 2>/dev/null; proxy_pid=
done
if [ -z "$proxy_pid" ]; then fail "the fault proxy did not start: $(tail -n 3 "$tmp/proxy.out")"; finish; fi

export WSYNC_TEST_HTTP_URL="http://127.0.0.1:$port"
export WSYNC_TEST_HTTP_PROXY="http://127.0.0.1:$pport"
export WSYNC_TEST_HTTP_DATA="$tmp/data"
export WSYNC_TEST_NGINX_PID="$tmp/nginx.pid"
export WSYNC_TEST_HTTP_REDIRECT_TARGET="http://127.0.0.1:$port2"
if [ $tls -eq 1 ]; then
    export WSYNC_TEST_HTTPS_URL="https://127.0.0.1:$port3" WSYNC_TEST_HTTPS_CA="$tmp/tls/cert.pem"
fi
export WSYNC_TEST_HTTP_LOGS="$tmp"
unset WSYNC_CA_BUNDLE
export WSYNC_TEST_NGINX_START="'$NGINX' -p '$tmp' -c '$tmp/nginx.conf' -e '$tmp/error.log'"

# ---- the C tests (each prints its own summary line; they are added up here) ----
for b in "${bins[@]}"; do
    case $b in /*) ;; *) b=$root/$b ;; esac
    out=$(WSYNC_TEST_HTTP_TAG="$(basename "$(dirname "$b")")-$$" "$b" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^summary: '
    line=$(printf '%s\n' "$out" | grep -E '^summary: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then fail "$b exited $rc without a summary line"; printf '%s\n' "$out" | tail -n 20; continue; fi
    p=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\1/')
    f=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\2/')
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { f=1; echo "FAIL $b: exit status $rc"; }
    echo "  http: $b: $p passed, $f failed"
    passed=$((passed + p)); failed=$((failed + f))
    # nginx may have been killed and restarted by the fault tests: it must be up again
    if ! kill -0 "$(cat "$tmp/nginx.pid" 2>/dev/null)" 2>/dev/null; then
        eval "$WSYNC_TEST_NGINX_START" 2>/dev/null || true
    fi
done

# ---- the store conformance suite: nginx's dav module with the JSON autoindex,
# and alone (/nolist/: no listing) ----
. tests/http/lib_conformance.sh
conf_dirs=()
for b in "${bins[@]}"; do conf_dirs+=("$(dirname "$b")"); done
conformance "${conf_dirs[@]}" -- "nginx-dav,$WSYNC_TEST_HTTP_URL/@RUN@" "nginx-nolist,$WSYNC_TEST_HTTP_URL/nolist/@RUN@"

# ---- the tool over http:// ----
check() { # name, command...
    local name=$1; shift
    if "$@" >"$tmp/out" 2>&1; then pass "$name"; else fail "$name: $(head -c 400 "$tmp/out")"; fi
}
url="$WSYNC_TEST_HTTP_URL/cli-$$"
m=$tmp/models; mkdir -p "$m"
ok_gen=1
for s in 0 1 2 3 4 5; do "$tool" gen --model tiny --step $s -o "$m/g$s.safetensors" >/dev/null 2>&1 || ok_gen=0; done
if [ $ok_gen -eq 1 ]; then pass "cli: gen"; else fail "cli: gen"; fi
for s in 0 1 2 3 4 5; do
    check "cli: publish step $s to $url" "$tool" publish --store "$url" --step $s --anchor-every 3 "$m/g$s.safetensors"
done
check "cli: log over http" "$tool" log --store "$url"
if grep -q "5" "$tmp/out"; then pass "cli: log names step 5"; else fail "cli: log names step 5: $(head -c 300 "$tmp/out")"; fi
cp "$m/g0.safetensors" "$tmp/local.safetensors"
check "cli: pull from scratch-ish (step 0 file) to the head" "$tool" pull --store "$url" "$tmp/local.safetensors"
check "cli: the pulled file is step 5 bit for bit" "$tool" verify "$tmp/local.safetensors" "$m/g5.safetensors"
cp "$m/g1.safetensors" "$tmp/mid.safetensors"
check "cli: pull to step 4" "$tool" pull --store "$url" --step 4 "$tmp/mid.safetensors"
check "cli: the pulled file is step 4 bit for bit" "$tool" verify "$tmp/mid.safetensors" "$m/g4.safetensors"
check "cli: prefix in the URL and --prefix together" "$tool" publish --store "$WSYNC_TEST_HTTP_URL/cli2-$$" --prefix run/a --step 1 "$m/g1.safetensors"
if [ -f "$tmp/data/cli2-$$/run/a/HEAD" ]; then pass "cli: HEAD lands under URL prefix + --prefix"; else fail "cli: HEAD lands under URL prefix + --prefix"; fi
# a checkpoint directory through the store (tests/cli/lib_dir_store.sh)
. tests/cli/lib_dir_store.sh
dir_over_store "$tool" "$WSYNC_TEST_HTTP_URL/cli-dir-$$" "$tmp/dirs" "cli: http directory"
"$tool" pull --store "http://127.0.0.1:1/nothing" "$tmp/local.safetensors" >"$tmp/out" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "127.0.0.1:1" "$tmp/out"; then pass "cli: an unreachable server fails and names the URL"
else fail "cli: an unreachable server: rc $rc: $(head -c 300 "$tmp/out")"; fi
# ---- the tool over https:// (nginx with the self-signed certificate) ----
if [ $tls -eq 1 ]; then
    surl="$WSYNC_TEST_HTTPS_URL/cli-tls-$$"
    "$tool" publish --store "$surl" --step 0 "$m/g0.safetensors" >"$tmp/out" 2>&1; rc=$?
    if [ $rc -ne 0 ] && grep -q "certificate" "$tmp/out" && grep -q "WSYNC_CA_BUNDLE" "$tmp/out"; then
        pass "cli: https with a self-signed certificate fails verification and names WSYNC_CA_BUNDLE"
    else fail "cli: https, self-signed, no CA: rc $rc: $(head -c 300 "$tmp/out")"; fi
    for s in 0 1 2; do
        check "cli: publish step $s over https with WSYNC_CA_BUNDLE" env WSYNC_CA_BUNDLE="$tmp/tls/cert.pem" \
            "$tool" publish --store "$surl" --step $s "$m/g$s.safetensors"
    done
    cp "$m/g0.safetensors" "$tmp/tls.safetensors"
    check "cli: pull over https" env WSYNC_CA_BUNDLE="$tmp/tls/cert.pem" "$tool" pull --store "$surl" "$tmp/tls.safetensors"
    check "cli: the file pulled over https is step 2 bit for bit" "$tool" verify "$tmp/tls.safetensors" "$m/g2.safetensors"
fi
finish
