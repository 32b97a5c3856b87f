#!/usr/bin/env bash
# Followers against a small Apache prefork (issue: followers must not starve
# a small server). Starts Apache 2.4 (mpm_prefork, mod_dav; nothing from
# /etc/apache2) on 127.0.0.1 with MaxRequestWorkers WORKERS and the default
# keep-alive (KeepAlive On, KeepAliveTimeout 5), publishes step 0, starts
# FOLLOWERS `wsync follow --interval INTERVAL` processes, then times each
# publish of steps 1..STEPS-1 (GAP seconds apart) and prints them beside the
# same publishes with no follower. Also counts Apache's busy workers (its
# children with a connection, from /proc: sockets in ESTABLISHED) halfway
# through each gap. Not part of make test (it takes STEPS x GAP seconds per
# run); the HTTP store's idle_close_ms is what it measures.
# Apache runs in a session of its own: at shutdown prefork signals its
# whole process group.
# usage: tests/http/servers/apache_fanout.sh WSYNC_BIN [FOLLOWERS WORKERS STEPS]
#   env: INTERVAL (1) follow --interval; GAP (2) seconds between publishes
set -u
cd "$(dirname "$0")/../.."
W=$1; F=${2:-8}; N=${3:-4}; STEPS=${4:-6}
INTERVAL=${INTERVAL:-1}; GAP=${GAP:-2}
case $W in /*) ;; *) W=$PWD/$W ;; esac
APACHE=${APACHE:-$(command -v apache2 || echo /usr/sbin/apache2)}
MODS=${APACHE_MODULES:-/usr/lib/apache2/modules}
tmp=$(mktemp -d /tmp/wsync-apfan.XXXXXX); chmod 755 "$tmp"
apid=; fpids=()
cleanup() {
    for p in "${fpids[@]}"; do kill "$p" 2>/dev/null; done
    [ -n "$apid" ] && kill "$apid" 2>/dev/null && wait "$apid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/data" "$tmp/m" "$tmp/f"
port=$(( 20000 + RANDOM % 30000 ))
user=
if [ "$(id -u)" -eq 0 ]; then u=www-data; id -u $u >/dev/null 2>&1 || u=nobody; user="User $u
Group $(id -gn $u)"; fi
cat > "$tmp/apache.conf" <<CONF
ServerRoot "$tmp"
ServerName 127.0.0.1
PidFile $tmp/apache.pid
Listen 127.0.0.1:$port
LoadModule mpm_prefork_module $MODS/mod_mpm_prefork.so
LoadModule authz_core_module $MODS/mod_authz_core.so
LoadModule dav_module $MODS/mod_dav.so
LoadModule dav_fs_module $MODS/mod_dav_fs.so
$user
ErrorLog $tmp/error.log
LogLevel warn
DavLockDB $tmp/davlock
DocumentRoot "$tmp/data"
LimitRequestBody 0
StartServers $N
MinSpareServers 1
MaxSpareServers $N
ServerLimit $N
MaxRequestWorkers $N
<Directory "$tmp/data">
    Dav On
    Require all granted
</Directory>
CONF
[ -n "$user" ] && chown -R "${u}:$(id -gn $u)" "$tmp"
setsid "$APACHE" -f "$tmp/apache.conf" -D FOREGROUND >"$tmp/apache.out" 2>&1 &
apid=$!
for i in $(seq 100); do curl -s -o /dev/null -m 1 "http://127.0.0.1:$port/" && break; sleep 0.05; done
for s in $(seq 0 $((STEPS - 1))); do "$W" gen --model tiny --step $s -o "$tmp/m/g$s.safetensors" >/dev/null || exit 1; done

busy() { # sockets in ESTABLISHED whose local port is Apache's: connections held (or queued)
    awk -v p=$(printf ':%04X' $port) '$2 ~ p"$" && $4 == "01" {n++} END {print n + 0}' /proc/net/tcp
}
run() { # label prefix followers
    local label=$1 url="http://127.0.0.1:$port/$2" nf=$3 s t0 t1 times=() maxbusy=0 b
    "$W" publish --store "$url" --step 0 "$tmp/m/g0.safetensors" >/dev/null || { echo "publish 0 failed"; return; }
    fpids=()
    for i in $(seq $nf); do
        timeout $((STEPS * GAP + 60)) "$W" follow --store "$url" "$tmp/f/$2-$i.safetensors" --interval "$INTERVAL" \
            --until-step $((STEPS - 1)) >"$tmp/f/$2-$i.log" 2>&1 &
        fpids+=($!)
    done
    sleep 3
    for s in $(seq 1 $((STEPS - 1))); do
        t0=$(date +%s.%N)
        timeout 60 "$W" publish --store "$url" --step $s "$tmp/m/g$s.safetensors" >/dev/null 2>&1 || echo "  publish $s failed or timed out"
        t1=$(date +%s.%N)
        times+=($(echo "$t1 - $t0" | bc))
        sleep $(echo "$GAP / 2" | bc -l)
        b=$(busy); [ "$b" -gt "$maxbusy" ] && maxbusy=$b
        sleep $(echo "$GAP / 2" | bc -l)
    done
    ok=0
    for p in "${fpids[@]}"; do wait "$p" && ok=$((ok + 1)); done
    fpids=()
    printf '%-28s followers %2d  publish s: %s  (followers done: %d/%d; connections to Apache between publishes, max: %d)\n' \
        "$label" "$nf" "${times[*]}" $ok $nf $maxbusy
}
echo "Apache prefork MaxRequestWorkers $N, KeepAliveTimeout 5 (default), follow --interval $INTERVAL, a publish every ${GAP}s; $W"
run "no follower" base 0
run "followers" fan "$F"
