#!/usr/bin/env bash
# make bench's HTTP part: starts nginx (tests/http/servers/nginx.conf.in) on
# 127.0.0.1 with a random free port, runs bench_http against it, stops it.
# usage: bench/bench_http.sh BENCH_BIN [ANCHOR_MIB [DELTA_MB]]
set -u
cd "$(dirname "$0")/.."
bin=$1; shift
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
if [ ! -x "$NGINX" ] || ! command -v curl >/dev/null; then
    echo "bench_http: skipped (needs nginx and curl: tests/install-deps.sh installs them)"; exit 0
fi
tmp=$(mktemp -d /tmp/wsync-bench-http.XXXXXX)
trap '[ -f "$tmp/nginx.pid" ] && kill -9 "$(cat "$tmp/nginx.pid")" 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/data" "$tmp/body" "$tmp/proxy" "$tmp/fastcgi" "$tmp/uwsgi" "$tmp/scgi"
chmod 755 "$tmp"
user_line=; [ "$(id -u)" -eq 0 ] && user_line="user root;"
for try in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    sed -e "s|@DIR@|$tmp|g" -e "s|@PORT@|$port|g" -e "s|@USER@|$user_line|" tests/http/servers/nginx.conf.in > "$tmp/nginx.conf"
    "$NGINX" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" 2>>"$tmp/start.log" && break
done
for i in $(seq 50); do [ -s "$tmp/nginx.pid" ] && break; sleep 0.05; done
"$bin" "http://127.0.0.1:$port/b" "$@"
