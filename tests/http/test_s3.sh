#!/usr/bin/env bash
# The S3 store against a real S3 server: s3rver 4.0.4 (npm, installed into
# build/s3rver by tests/install-deps.sh; it verifies SigV4), started here on
# 127.0.0.1 with an ephemeral port, a temporary data directory and a bucket
# created at startup, and tests/http/s3/front.py in front of it (redirects, the
# session token captured and tampered with). Runs each test binary given (the plain and the ASan
# build of tests/http/test_s3.c), the store conformance suite
# (tests/http/test_conformance.c beside each), then the tool's publish, log and pull over
# s3:// end to end. Stops the server on exit.
# usage: tests/http/test_s3.sh TEST_BIN... WSYNC_BIN   (the last argument is the tool)
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
S3RVER_DIR=${S3RVER_DIR:-$root/build/s3rver/node_modules/@20minutes/s3rver}
if ! command -v node >/dev/null; then fail "node is not installed (tests/install-deps.sh installs nodejs)"; finish; fi
if [ ! -f "$S3RVER_DIR/lib/cli.js" ]; then fail "s3rver is not installed in $S3RVER_DIR (run tests/install-deps.sh)"; finish; fi

tmp=$(mktemp -d /tmp/wsync-s3.XXXXXX)
server_pid=
front_pid=
cleanup() {
    [ -n "$front_pid" ] && kill "$front_pid" 2>/dev/null && wait "$front_pid" 2>/dev/null
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
bucket=wsync-test

# the legacy provider: s3rver encrypts continuation tokens with a cipher
# OpenSSL 3 keeps there (paginated listings fail without it)
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

# the front (tests/http/s3/front.py): redirects to a CDN stand-in on another
# port, captures headers, tampers with the session token on request
python3 tests/http/s3/front.py "$port" "$tmp/data" > "$tmp/front.out" 2>&1 &
front_pid=$!
for i in $(seq 100); do grep -q ready "$tmp/front.out" 2>/dev/null && break; kill -0 $front_pid 2>/dev/null || break; sleep 0.05; done
fport=$(sed -n -E 's/^ready ([0-9]+) [0-9]+$/\1/p' "$tmp/front.out")
if [ -n "$fport" ]; then export WSYNC_TEST_S3_FRONT="http://127.0.0.1:$fport"
else fail "the s3 front did not start: $(tail -n 3 "$tmp/front.out")"; fi

export WSYNC_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
export WSYNC_TEST_S3_BUCKET=$bucket
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 AWS_DEFAULT_REGION AWS_CA_BUNDLE WSYNC_CA_BUNDLE

# ---- the C tests (each prints its own summary line; they are added up here) ----
for b in "${bins[@]}"; do
    case $b in /*) ;; *) b=$root/$b ;; esac
    out=$(WSYNC_TEST_S3_TAG="$(basename "$(dirname "$b")")-$$" "$b" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^summary: '
    line=$(printf '%s\n' "$out" | grep -E '^summary: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then fail "$b exited $rc without a summary line"; printf '%s\n' "$out" | tail -n 20; continue; fi
    p=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\1/')
    f=$(echo "$line" | sed -E 's/^summary: ([0-9]+) passed, ([0-9]+) failed$/\2/')
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { f=1; echo "FAIL $b: exit status $rc"; }
    echo "  s3: $b: $p passed, $f failed"
    passed=$((passed + p)); failed=$((failed + f))
done

# ---- the store conformance suite against s3rver ----
. tests/http/lib_conformance.sh
conf_dirs=()
for b in "${bins[@]}"; do conf_dirs+=("$(dirname "$b")"); done
conformance "${conf_dirs[@]}" -- "s3rver,s3://$bucket/@RUN@,http://127.0.0.1:$port"

# ---- the tool over s3:// ----
check() { # name, command...
    local name=$1; shift
    if "$@" >"$tmp/out" 2>&1; then pass "$name"; else fail "$name: $(head -c 400 "$tmp/out")"; fi
}
url="s3://$bucket/cli-$$"
m=$tmp/models; mkdir -p "$m"
ok_gen=1
for s in 0 1 2 3 4 5; do "$tool" gen --model tiny --step $s -o "$m/g$s.safetensors" >/dev/null 2>&1 || ok_gen=0; done
if [ $ok_gen -eq 1 ]; then pass "cli: gen"; else fail "cli: gen"; fi
for s in 0 1 2 3 4 5; do
    check "cli: publish step $s to $url" "$tool" publish --store "$url" --step $s --anchor-every 3 "$m/g$s.safetensors"
done
check "cli: log over s3" "$tool" log --store "$url"
if grep -q "anchors/step_000003" "$tmp/out"; then pass "cli: log lists anchor 3"; else fail "cli: log lists anchor 3: $(head -c 300 "$tmp/out")"; fi
cp "$m/g0.safetensors" "$tmp/local.safetensors"
check "cli: pull to the head" "$tool" pull --store "$url" "$tmp/local.safetensors"
check "cli: the pulled file is step 5 bit for bit" "$tool" verify "$tmp/local.safetensors" "$m/g5.safetensors"
cp "$m/g1.safetensors" "$tmp/mid.safetensors"
check "cli: pull to step 4" "$tool" pull --store "$url" --step 4 "$tmp/mid.safetensors"
check "cli: the pulled file is step 4 bit for bit" "$tool" verify "$tmp/mid.safetensors" "$m/g4.safetensors"
check "cli: prefix in the URL and --prefix together" "$tool" publish --store "s3://$bucket/cli2-$$" --prefix run/a --step 1 "$m/g1.safetensors"
if [ -f "$tmp/data/$bucket/cli2-$$/run/a/HEAD._S3rver_object" ]; then pass "cli: HEAD lands under URL prefix + --prefix"
else fail "cli: HEAD lands under URL prefix + --prefix: $(cd "$tmp/data/$bucket" && find . -name 'HEAD*' | head -3)"; fi
# a checkpoint directory through the store (tests/cli/lib_dir_store.sh)
. tests/cli/lib_dir_store.sh
dir_over_store "$tool" "s3://$bucket/cli-dir-$$" "$tmp/dirs" "cli: s3 directory"
AWS_SECRET_ACCESS_KEY=wrong "$tool" log --store "$url" >"$tmp/out" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "SignatureDoesNotMatch" "$tmp/out" && grep -q "WSYNC_ERR_AUTH" "$tmp/out"; then
    pass "cli: a wrong secret fails as an authentication error naming S3's code"
else fail "cli: a wrong secret: rc $rc: $(head -c 300 "$tmp/out")"; fi
env -u AWS_ACCESS_KEY_ID "$tool" log --store "$url" >"$tmp/out" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "AWS_ACCESS_KEY_ID" "$tmp/out"; then pass "cli: no credentials says which variables to set"
else fail "cli: no credentials: rc $rc: $(head -c 300 "$tmp/out")"; fi
finish
