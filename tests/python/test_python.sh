#!/usr/bin/env bash
# The Python binding (python/wsync) over build/libwsync.so: runs
# tests/python/test_wsync.py with an interpreter that has torch when there is
# one (Debian's python3-torch is in /usr/bin/python3; a python3 earlier on
# PATH may lack it), with the wsync tool for the round trips against C, and
# with an nginx WebDAV bucket (tests/http/servers/nginx.conf.in) for the HTTP store
# when nginx is installed; then examples/python's train.py and serve.py for a
# few steps. Builds nothing: make test built the library.
# usage: tests/python/test_python.sh LIBWSYNC_SO [WSYNC_TOOL]
set -u
cd "$(dirname "$0")/../.."
root=$PWD
[ $# -ge 1 ] || { echo "usage: $0 LIBWSYNC_SO [WSYNC_TOOL]"; exit 2; }
lib=$1; case $lib in /*) ;; *) lib=$root/$lib ;; esac
tool=${2:-}; [ -n "$tool" ] && case $tool in /*) ;; *) tool=$root/$tool ;; esac
if [ ! -f "$lib" ]; then echo "FAIL $lib is missing (make python)"; echo "summary: 0 passed, 1 failed"; exit 1; fi

py=
for cand in /usr/bin/python3 python3; do
    if "$cand" -c 'import torch' >/dev/null 2>&1; then py=$cand; break; fi
done
if [ -z "$py" ]; then
    for cand in /usr/bin/python3 python3; do
        if "$cand" -c 'import numpy' >/dev/null 2>&1; then py=$cand; break; fi
    done
fi
[ -n "$py" ] || py=python3
echo "test_python: $py (torch and numpy tests skip where missing; tests/install-deps.sh installs them)"

tmp=$(mktemp -d /tmp/wsync-py.XXXXXX)
cleanup() {
    [ -f "$tmp/nginx.pid" ] && kill -9 "$(cat "$tmp/nginx.pid")" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# nginx for the HTTP store test (optional: the test skips without it)
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
if [ -x "$NGINX" ] && "$NGINX" -V 2>&1 | grep -q -- --with-http_dav_module; then
    mkdir -p "$tmp/data" "$tmp/body" "$tmp/proxy" "$tmp/fastcgi" "$tmp/uwsgi" "$tmp/scgi" "$tmp/conf.d"
    chmod 755 "$tmp"
    user_line=; [ "$(id -u)" -eq 0 ] && user_line="user root;"
    for try in 1 2 3 4 5; do
        port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
        sed -e "s|@DIR@|$tmp|g" -e "s|@PORT@|$port|g" -e "s|@USER@|$user_line|" tests/http/servers/nginx.conf.in > "$tmp/nginx.conf"
        if "$NGINX" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" 2>>"$tmp/start.log"; then
            for i in $(seq 50); do [ -s "$tmp/nginx.pid" ] && break; sleep 0.05; done
            export WSYNC_TEST_HTTP_URL="http://127.0.0.1:$port"
            break
        fi
    done
fi

export WSYNC_LIB=$lib PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1
[ -n "$tool" ] && export WSYNC_TOOL=$tool
passed=0 failed=0
# Runs one of tests/python's scripts; its "summary: N passed, M failed" adds
# into the totals (no summary, or a failing exit with none failed, is one
# failure).
py_tests() { # script
    local out=$tmp/$(basename "$1" .py).out line p f rc
    "$py" "$1" > "$out" 2>&1; rc=$?
    grep -v -E '^summary: ' "$out"
    line=$(grep -E '^summary: [0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
    p=$(echo "$line" | sed -nE 's/^summary: ([0-9]+) passed.*/\1/p'); p=${p:-0}
    f=$(echo "$line" | sed -nE 's/^summary: [0-9]+ passed, ([0-9]+) failed$/\1/p'); f=${f:-0}
    if [ -z "$line" ]; then echo "FAIL $1: exited $rc without a summary line"; f=1
    elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL $1: exit status $rc"; f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
}
py_tests tests/python/test_wsync.py
# the model's edge (issue 38): moved, freed and lazy targets, iterables, the
# poll interval, a subscriber before its store, HEAD's digest, tied and
# partial models, a stale HEAD
py_tests tests/python/test_edge.py
# the engine map (issue 42): EngineLayout, a take through the map on 2 ranks
# exact after every take, the refusals (CUDA cases skip without a device)
py_tests tests/python/test_engine.py
py_tests tests/python/test_dir.py

# examples/python/engine_tp.py: a trainer and 2 tensor-parallel engine ranks
# (fused qkv and gate_up); every "rank R step S ... digest D" line must equal
# the trainer's "train step S rank R ... digest D", and both ranks must
# print every step.
if "$py" -c 'import torch' >/dev/null 2>&1; then
    tp_steps=4
    timeout 120 "$py" examples/python/engine_tp.py --store "$tmp/tp-bucket" --steps $tp_steps --pace 0.05 \
        > "$tmp/tp.out" 2>&1; tp_rc=$?
    awk '$1 == "train" && $2 == "step" { print $3, $5, $NF }' "$tmp/tp.out" | sort > "$tmp/tp.train"
    awk '$1 == "rank" && $3 == "step" { print $4, $2, $NF }' "$tmp/tp.out" | sort > "$tmp/tp.rank"
    want=$((2 * (tp_steps + 1)))
    if [ $tp_rc -eq 0 ] && [ "$(wc -l < "$tmp/tp.train")" -eq $want ] && cmp -s "$tmp/tp.train" "$tmp/tp.rank"; then
        passed=$((passed + 1))
        echo "ok   examples/python: engine_tp.py, 2 ranks, steps 0-$tp_steps, every digest the trainer's"
    else
        failed=$((failed + 1))
        echo "FAIL examples/python: engine_tp.py exit $tp_rc; trainer and ranks' digests:"
        diff "$tmp/tp.train" "$tmp/tp.rank" | head -n 10; tail -n 5 "$tmp/tp.out"
    fi
else
    echo "skip examples/python: engine_tp.py needs torch ($py has none)"
fi

# examples/python: serve.py follows train.py (CPU torch, a few steps, as
# examples/python/README.md runs them); the engine must reach the trainer's
# last step, and every step it printed must carry the trainer's digest. The
# model is made smaller than the examples' default (about 3.2M parameters) to
# keep this fast: 2 layers, 4 heads, d_model 128 (418,048 parameters), given
# to both sides as the README says.
steps=10
size="--layers 2 --heads 4 --d-model 128"
if "$py" -c 'import torch' >/dev/null 2>&1; then
    ex=$tmp/ex-bucket
    timeout 120 "$py" examples/python/serve.py --store "$ex" --until-step $steps --interval 20 --wait 60 \
        $size > "$tmp/serve.out" 2>&1 &
    serve_pid=$!
    timeout 120 "$py" examples/python/train.py --store "$ex" --steps $steps $size > "$tmp/train.out" 2>&1; train_rc=$?
    wait $serve_pid; serve_rc=$?
    # "train step N ... digest D" / "serve step N ... digest D"
    digests() { awk -v k="$1" '$1 == k && $2 == "step" { print $3, $NF }' "$2"; }
    digests train "$tmp/train.out" > "$tmp/train.dig"
    digests serve "$tmp/serve.out" > "$tmp/serve.dig"
    last_train=$(tail -n 1 "$tmp/train.dig"); last_serve=$(tail -n 1 "$tmp/serve.dig")
    bad=$(awk 'NR == FNR { d[$1] = $2; next } !($1 in d) || d[$1] != $2' "$tmp/train.dig" "$tmp/serve.dig")
    if [ $train_rc -eq 0 ] && [ $serve_rc -eq 0 ] && [ "$(wc -l < "$tmp/train.dig")" -eq $((steps + 1)) ] &&
        [ -n "$last_serve" ] && [ "$last_serve" = "$last_train" ] && [ "${last_serve%% *}" = "$steps" ] &&
        [ -z "$bad" ]; then
        passed=$((passed + 1))
        echo "ok   examples/python: serve.py reached step $steps of train.py, $(wc -l < "$tmp/serve.dig") steps, digests equal"
    else
        failed=$((failed + 1))
        echo "FAIL examples/python: train.py exit $train_rc, serve.py exit $serve_rc, trainer's last '$last_train', engine's last '$last_serve'${bad:+, digests differ: $bad}"
        tail -n 5 "$tmp/train.out" "$tmp/serve.out"
    fi
else
    echo "skip examples/python: torch is not installed for $py"
fi
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
