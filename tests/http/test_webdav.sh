#!/usr/bin/env bash
# The HTTP store's WebDAV listing (PROPFIND) against real servers started
# here on 127.0.0.1 with ephemeral ports, each from this test's own config
# (nothing from /etc/apache2 or /etc/nginx):
#   Apache 2.4 with mod_dav and mod_dav_fs (tests/http/webdav/apache.conf.in),
#     run as `setsid apache2 -f CONF -D FOREGROUND` (prefork, a few children,
#     in a session of its own);
#   nginx with the dav-ext module loaded by load_module
#     (tests/http/webdav/nginx-dav-ext.conf.in), and in the same nginx a plain
#     WebDAV server with the JSON autoindex and no PROPFIND;
#   tests/http/webdav/canned.py, hostile PROPFIND answers from tests/http/webdav/hostile/.
# Runs each test binary given (the plain and the ASan build of
# tests/http/test_webdav.c), then the store conformance suite
# (tests/http/test_conformance.c beside each) against Apache and nginx
# dav-ext. Stops everything on exit.
# usage: tests/http/test_webdav.sh TEST_BIN...
set -u
cd "$(dirname "$0")/../.."
root=$PWD
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
finish() { echo "summary: $passed passed, $failed failed"; [ $failed -eq 0 ]; exit; }

[ $# -ge 1 ] || { echo "usage: $0 TEST_BIN..."; exit 2; }
APACHE=${APACHE:-$(command -v apache2 || echo /usr/sbin/apache2)}
APACHE_MODULES=${APACHE_MODULES:-/usr/lib/apache2/modules}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
DAV_EXT=${DAV_EXT:-/usr/lib/nginx/modules/ngx_http_dav_ext_module.so}

tmp=$(mktemp -d /tmp/wsync-webdav.XXXXXX)
apache_pid=; canned_pid=
cleanup() {
    [ -n "$apache_pid" ] && kill "$apache_pid" 2>/dev/null && wait "$apache_pid" 2>/dev/null
    [ -f "$tmp/nginx/nginx.pid" ] && kill -9 "$(cat "$tmp/nginx/nginx.pid")" 2>/dev/null
    [ -n "$canned_pid" ] && kill "$canned_pid" 2>/dev/null && wait "$canned_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
chmod 755 "$tmp"

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
# waits until something answers HTTP on port $1 (any status)
wait_http() {
    local i
    for i in $(seq 100); do
        curl -s -o /dev/null -m 1 "http://127.0.0.1:$1/" && return 0
        sleep 0.05
    done
    return 1
}

# ---- Apache ----
if [ ! -x "$APACHE" ]; then fail "apache2 is not installed (tests/install-deps.sh installs it)"
elif [ ! -f "$APACHE_MODULES/mod_dav_fs.so" ]; then fail "no mod_dav_fs in $APACHE_MODULES"
else
    a=$tmp/apache; mkdir -p "$a/data" "$a/logs"
    user_line=
    if [ "$(id -u)" -eq 0 ]; then
        # Apache does not serve as root: its child runs as www-data (or nobody)
        u=www-data; id -u $u >/dev/null 2>&1 || u=nobody
        g=$(id -gn $u)
        user_line="User $u
Group $g"
        chown -R "$u:$g" "$a"
    fi
    for try in 1 2 3 4 5; do
        aport=$(free_port)
        sed -e "s|@DIR@|$a|g" -e "s|@PORT@|$aport|g" -e "s|/usr/lib/apache2/modules|$APACHE_MODULES|g" \
            tests/http/webdav/apache.conf.in | awk -v u="$user_line" '{ if ($0 == "@USER@") print u; else print }' > "$tmp/apache.conf"
        # its own session: prefork's parent signals its whole process group
        # when it stops, which would otherwise be this script's (and make's)
        setsid "$APACHE" -f "$tmp/apache.conf" -D FOREGROUND > "$tmp/apache.out" 2>&1 &
        apache_pid=$!
        if wait_http "$aport" && kill -0 $apache_pid 2>/dev/null; then break; fi
        kill $apache_pid 2>/dev/null; wait $apache_pid 2>/dev/null; apache_pid=
    done
    if [ -n "$apache_pid" ]; then
        export WSYNC_TEST_APACHE_URL="http://127.0.0.1:$aport" WSYNC_TEST_APACHE_DATA="$a/data"
        echo "  webdav: $("$APACHE" -v | head -n 1 | sed 's/^Server version: //') on port $aport"
    else fail "apache2 did not start: $(tail -n 3 "$tmp/apache.out" "$a/apache-error.log" 2>/dev/null)"; fi
fi

# ---- nginx with dav-ext, and a plain JSON-autoindex server ----
if [ ! -x "$NGINX" ]; then fail "nginx is not installed (tests/install-deps.sh installs nginx-light)"
elif [ ! -f "$DAV_EXT" ]; then fail "no dav-ext module at $DAV_EXT (tests/install-deps.sh installs libnginx-mod-http-dav-ext)"
else
    n=$tmp/nginx; mkdir -p "$n/data" "$n/json" "$n/body" "$n/proxy" "$n/fastcgi" "$n/uwsgi" "$n/scgi"
    user_line=; [ "$(id -u)" -eq 0 ] && user_line="user root;"
    started=0
    for try in 1 2 3 4 5; do
        nport=$(free_port); jport=$(free_port)
        sed -e "s|@DIR@|$n|g" -e "s|@PORT@|$nport|g" -e "s|@PORT2@|$jport|g" -e "s|@USER@|$user_line|" \
            -e "s|@MODULE@|load_module $DAV_EXT;|" tests/http/webdav/nginx-dav-ext.conf.in > "$n/nginx.conf"
        if "$NGINX" -p "$n" -c "$n/nginx.conf" -e "$n/nginx-error.log" 2>>"$n/start.log"; then started=1; break; fi
    done
    if [ $started -eq 1 ] && wait_http "$nport"; then
        export WSYNC_TEST_DAVEXT_URL="http://127.0.0.1:$nport" WSYNC_TEST_DAVEXT_DATA="$n/data"
        export WSYNC_TEST_JSON_URL="http://127.0.0.1:$jport"
        echo "  webdav: $("$NGINX" -v 2>&1 | sed 's/^nginx version: //') with dav-ext on port $nport, JSON autoindex on $jport"
    else fail "nginx did not start: $(tail -n 3 "$n/start.log" "$n/nginx-error.log" 2>/dev/null)"; fi
fi

# ---- canned hostile answers ----
python3 tests/http/webdav/canned.py tests/http/webdav/hostile > "$tmp/canned.out" 2>&1 &
canned_pid=$!
for i in $(seq 100); do grep -q ready "$tmp/canned.out" 2>/dev/null && break; kill -0 $canned_pid 2>/dev/null || break; sleep 0.05; done
cport=$(sed -n -E 's/^ready ([0-9]+)$/\1/p' "$tmp/canned.out")
if [ -n "$cport" ]; then export WSYNC_TEST_HOSTILE_URL="http://127.0.0.1:$cport"
else fail "tests/http/webdav/canned.py did not start: $(tail -n 3 "$tmp/canned.out")"; canned_pid=; fi

# ---- the C tests (each prints its own summary line; they are added up here) ----
for b in "$@"; do
    case $b in /*) ;; *) b=$root/$b ;; esac
    out=$(WSYNC_TEST_DAV_TAG="$(basename "$(dirname "$b")")-$$" "$b" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^summary: '
    line=$(printf '%s\n' "$out" | grep -E '^summary: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then fail "$b exited $rc without a summary line"; printf '%s\n' "$out" | tail -n 20; continue; fi
    p=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\1/')
    f=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\2/')
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { f=1; echo "FAIL $b: exit status $rc"; }
    echo "  webdav: $b: $p passed, $f failed"
    passed=$((passed + p)); failed=$((failed + f))
done
# ---- the store conformance suite against Apache and nginx dav-ext ----
. tests/http/lib_conformance.sh
conf_dirs=(); conf_specs=()
for b in "$@"; do conf_dirs+=("$(dirname "$b")"); done
[ -n "${WSYNC_TEST_DAVEXT_URL:-}" ] && conf_specs+=("nginx-dav-ext,$WSYNC_TEST_DAVEXT_URL/@RUN@")
[ -n "${WSYNC_TEST_APACHE_URL:-}" ] && conf_specs+=("apache,$WSYNC_TEST_APACHE_URL/@RUN@")
[ ${#conf_specs[@]} -gt 0 ] && conformance "${conf_dirs[@]}" -- "${conf_specs[@]}"
# every server answered the way the tests assume: PROPFIND went to Apache and dav-ext
if [ -n "${WSYNC_TEST_APACHE_URL:-}" ]; then
    if grep -q '^PROPFIND .* 207 ' "$tmp/apache/apache-access.log" 2>/dev/null; then pass "apache answered PROPFIND with 207"
    else fail "apache's log has no PROPFIND answered 207: $(tail -n 3 "$tmp/apache/apache-access.log" 2>/dev/null)"; fi
fi
if [ -n "${WSYNC_TEST_DAVEXT_URL:-}" ]; then
    if grep -q '"PROPFIND [^"]*" 207 ' "$tmp/nginx/nginx-access.log" 2>/dev/null; then pass "nginx dav-ext answered PROPFIND with 207"
    else fail "nginx's log has no PROPFIND answered 207"; fi
fi
finish
