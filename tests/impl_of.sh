#!/usr/bin/env bash
# Which of the headers' implementations a test program (tests/LAYER/test_*.c,
# fuzz/fuzz_*.c) can take from the objects the Makefile builds once per
# configuration ($(BUILD)/impl/*.o, $(BUILD)/san/impl/*.o from tests/impl.c)
# instead of compiling them in its own translation unit. Prints one line of
# words: core (wsync.h), http (wsync_http.h with libcurl), httpnc
# (wsync_http.h with WSYNC_HTTP_NO_CURL), rdma (wsync_rdma.h): the shared
# implementations; curl: the program links libcurl; "none" when it takes
# none of them and does not link libcurl.
#
# A header's implementation stays in the program's own translation unit
# (compiled as before) when the program
# - names one of that header's internals (wsync__*, WSYNC__*), which only a
#   translation unit holding the implementation sees; or
# - defines a WSYNC_ configuration macro of its own before the include
#   (WSYNC_MALLOC, WSYNC_NO_SIMD, ...): then every implementation stays.
# Internals named in none of the headers keep every implementation too.
# usage: tests/impl_of.sh FILE.c
set -u
f=$1
cd "$(dirname "$0")/.." || exit 1
defines() { grep -q -E "^[[:space:]]*#[[:space:]]*define[[:space:]]+$1([[:space:]]|\$)" "$f"; }
out=()
http_curl=
if defines WSYNC_HTTP_IMPLEMENTATION && ! defines WSYNC_HTTP_NO_CURL; then http_curl=1; fi
# configuration macros other than the implementation switches: keep everything
if grep -E '^[[:space:]]*#[[:space:]]*define[[:space:]]+WSYNC_[A-Za-z0-9_]+' "$f" |
    grep -v -q -E 'define[[:space:]]+WSYNC_((HTTP|RDMA|GEN)_)?IMPLEMENTATION([[:space:]]|$)|define[[:space:]]+WSYNC_HTTP_NO_CURL([[:space:]]|$)'; then
    [ -n "$http_curl" ] && echo curl || echo none
    exit 0
fi
ids=$(grep -o -E '\b(wsync__|WSYNC__)[A-Za-z0-9_]+' "$f" | sort -u)
keep_core=; keep_http=; keep_rdma=
if [ -n "$ids" ]; then
    in_core=$(grep -o -w -F "$ids" wsync.h | sort -u)
    in_http=$(grep -o -w -F "$ids" wsync_http.h | sort -u)
    in_rdma=$(grep -o -w -F "$ids" wsync_rdma.h | sort -u)
    [ -n "$in_core" ] && keep_core=1
    [ -n "$in_http" ] && keep_http=1
    [ -n "$in_rdma" ] && keep_rdma=1
    # an internal none of the headers names (another header's, the test's own):
    # keep everything rather than guess
    if [ -n "$(comm -23 <(echo "$ids") <(printf '%s\n' $in_core $in_http $in_rdma | sort -u))" ]; then
        keep_core=1; keep_http=1; keep_rdma=1
    fi
fi
if defines WSYNC_IMPLEMENTATION && [ -z "$keep_core" ]; then out+=(core); fi
if defines WSYNC_HTTP_IMPLEMENTATION && [ -z "$keep_http" ]; then
    if [ -n "$http_curl" ]; then out+=(http); else out+=(httpnc); fi
fi
if defines WSYNC_RDMA_IMPLEMENTATION && [ -z "$keep_rdma" ]; then out+=(rdma); fi
[ -n "$http_curl" ] && out+=(curl)
[ ${#out[@]} -eq 0 ] && out=(none)
echo "${out[*]}"
