#!/usr/bin/env bash
# The build records what it detected (libcurl or not) in BUILD/config.mk and
# rebuilds what depends on it when, and only when, that changes: any order of
# make, make demo and make test ends with a tool built for the machine as it
# is. Builds into a temporary BUILD directory, at -O0.
# usage: tests/core/test_build_config.sh
set -u
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
b=$tmp/b
mk() { make --no-print-directory BUILD="$b" CFLAGS=-O0 "$@" >"$tmp/make.out" 2>&1; }
built() { grep -q -e "-o $b/$1 " "$tmp/make.out"; } # the last make ran $1's recipe
mtime() { stat -c %Y.%y "$1" 2>/dev/null; }
# as if the last make had built what its recipes named with -o (CC=true writes
# nothing), in the order they ran: the test programs' shared objects
# ($b/impl/*.o) before the programs
as_built() { grep -o -e "-o $b/[^ ]*" "$tmp/make.out" | cut -c4- | while read -r o; do mkdir -p "$(dirname "$o")"; touch "$o"; done; }
url=http://127.0.0.1:9/none  # nothing listens: a build with libcurl fails to connect, not to open
have_curl=; pkg-config --exists libcurl 2>/dev/null && have_curl=1

# ---- the recipes alone (CC=true compiles nothing): which targets follow the configuration ----
targets="wsync san/wsync test_http san/test_http test_s3 san/test_s3 bench_http"
paths=; for t in $targets; do paths="$paths $b/$t"; done
if mk CC=true HAVE_CURL= $paths; then pass "a make without libcurl"; else fail "make: $(tail -3 "$tmp/make.out")"; fi
grep -q '^HAVE_CURL := $' "$b/config.mk" 2>/dev/null && pass "config.mk records no libcurl" \
    || fail "config.mk: $(cat "$b/config.mk" 2>&1)"
as_built
c0=$(mtime "$b/config.mk")
sleep 1
mk CC=true HAVE_CURL= $paths
n=0; for t in $targets; do built $t && n=$((n + 1)); done
[ $n -eq 0 ] && pass "the same configuration again: nothing rebuilt" || fail "the same configuration rebuilt $n targets"
[ "$(mtime "$b/config.mk")" = "$c0" ] && pass "the same configuration: config.mk not rewritten" \
    || fail "config.mk rewritten with the same contents"
mk CC=true HAVE_CURL=1 CURL_LIBS=-lcurl $paths
for t in $targets; do built $t && pass "another configuration rebuilds $t" || fail "another configuration did not rebuild $t"; done
grep -q '^CURL_LIBS := -lcurl$' "$b/config.mk" && pass "config.mk records the new configuration" \
    || fail "config.mk: $(cat "$b/config.mk")"
as_built
mk CC=true HAVE_CURL=1 CURL_LIBS=-lcurl $paths
n=0; for t in $targets; do built $t && n=$((n + 1)); done
[ $n -eq 0 ] && pass "then again: nothing rebuilt" || fail "the new configuration rebuilt $n targets twice"
rm -rf "$b"

# ---- the real tool: built without libcurl, then with it as detected (make demo, then make test) ----
if mk HAVE_CURL= "$b/wsync"; then pass "the tool built without libcurl"; else fail "build: $(tail -5 "$tmp/make.out")"; fi
"$b/wsync" log --store "$url" >/dev/null 2>"$tmp/err"
grep -q "built without libcurl" "$tmp/err" && pass "without libcurl the tool says so for a URL" \
    || fail "without libcurl: $(head -3 "$tmp/err")"
t0=$(mtime "$b/wsync")
mk HAVE_CURL= "$b/wsync"
! built wsync && [ "$(mtime "$b/wsync")" = "$t0" ] && pass "the same configuration: the tool not rebuilt" \
    || fail "the tool rebuilt with nothing changed"
if [ -n "$have_curl" ]; then
    if mk "$b/wsync"; then pass "make with libcurl detected"; else fail "build: $(tail -5 "$tmp/make.out")"; fi
    built wsync && pass "libcurl detected: the tool rebuilt" || fail "libcurl detected: the tool not rebuilt"
    "$b/wsync" log --store "$url" >/dev/null 2>"$tmp/err"
    if grep -q "built without libcurl" "$tmp/err"; then fail "the rebuilt tool still has no libcurl"
    else pass "the rebuilt tool takes a URL store"; fi
    mk "$b/wsync"
    ! built wsync && pass "libcurl again: not rebuilt" || fail "libcurl again: rebuilt"
else
    echo "note: no libcurl development files here; the rebuild with libcurl is shown by the recipes above"
fi

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
