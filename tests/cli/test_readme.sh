#!/usr/bin/env bash
# README.md tells the truth about itself, as far as a script can check:
#
# 1. Every ```c block compiles warning-free: gcc (and clang when present),
#    -std=c99 -Wall -Wextra -Wpedantic -Werror -fsyntax-only.
#    A block that defines main() is a complete program, compiled as it is.
#    Any other block is a fragment, and the line right before its fence
#    names it: <!-- snippet: NAME -->. The fragment is compiled as:
#      the C headers every program has (stdint, stddef, stdio, stdlib, string);
#      the fragment's preprocessor lines (#define, #include), in order;
#      #include "wsync.h" and the extra headers of NAME below;
#      NAME's global stand-ins (functions and objects the fragment calls but
#        does not declare: my_sink, serve_a_batch, ...);
#      the fragment's file-scope definitions: from a line starting with
#        "static " at column 0 to the next line that is "}" alone;
#      int readme_snippet(void) { NAME's local stand-ins; the rest of the
#        fragment, where a line starting with "..." is a comment; NAME's
#        "after" lines (uses of what the fragment declares but, being a
#        fragment, does not use); return 0; }
#    The stand-ins are in the table below: adding a fragment to README.md
#    means adding its name there. A name in README.md missing from the table,
#    and a table entry no fragment uses, both fail.
# 2. The Python examples say what to do when torch is missing (an interpreter
#    run with -S: no site-packages, so no torch) or when the binding's
#    library is (WSYNC_LIB naming no file), instead of a traceback.
# 3. `make -n examples` builds the three C examples (a .PHONY target: there
#    is a directory named examples).
# 4. The Status paragraph's list of the tool's commands ("The tool has
#    `inspect`, ... and `version`") is the list `wsync --help` prints.
#
# Prints one line per failure (every line with CHECK_VERBOSE=1) and
# "summary: N passed, M failed". Takes a few seconds. TEST_README_KEEP=DIR
# keeps the compiled units there (u<N>.c, N the block's number); TEST_README
# checks another file than README.md.
# usage: tests/cli/test_readme.sh [WSYNC_TOOL]   (default build/wsync; without it, 4 is skipped)
set -u
cd "$(dirname "$0")/../.."
readme=${TEST_README:-README.md}
tool=${1:-build/wsync}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0; skipped=0
pass() { passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; return 0; }
skip() { skipped=$((skipped + 1)); echo "skip $1"; return 0; }

# ---- the stand-ins, by fragment name ----
# INC: extra headers; G: file-scope declarations; L: locals; A: after.
standins() {
    INC=; G=; L=; A=
    case $1 in
    read)       A='(void)t; (void)fmt;' ;;
    write)      G='int my_sink(void *user, const void *bytes, size_t len); extern void *my_user;'
                L='wsync_error err;' ;;
    dense)      L='wsync_error err; void *old_bits = NULL, *new_bits = NULL;' ;;
    encode)     G='int my_sink(void *user, const void *bytes, size_t len); extern void *my_user;'
                L='wsync_error err; wsync_tensor base[1], next[1], weights[1]; size_t n = 1;
                   wsync_delta_stats stats; const void *delta_bytes = NULL; uint64_t delta_size = 0;' ;;
    pool)       L='wsync_error err; wsync_tensor weights[1]; size_t n = 1; wsync_delta_stats stats;
                   const void *delta_bytes = NULL; uint64_t delta_size = 0;' ;;
    publish)    G='typedef struct my_model my_model; void train_one_step(my_model *m);'
                L='wsync_error err; my_model *model = NULL; size_t n = 2; uint64_t step, first = 0, last = 10;
                   uint64_t embed_shape[2] = {151936, 1024}; uint16_t *embed = NULL; wsync_publish_stats stats;' ;;
    subscribe)  G='void serve_a_batch(void); void my_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));'
                L='wsync_error err; wsync_store store; size_t n = 2; uint64_t embed_shape[2] = {151936, 1024};
                   uint16_t *engine_embed = NULL; wsync_sync_stats st;' ;;
    prefetch)   G='void serve_a_batch(void); void my_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
                   void alert_if_it_lasts(uint64_t head_step);'
                L='wsync_error err; wsync_subscriber *sub = NULL; uint64_t step; wsync_sync_stats st;' ;;
    mirror)     G='int my_engine_scatter(void *engine, size_t index, const uint64_t *positions, const void *values,
                                         uint64_t count, int whole);'
                L='wsync_error err; wsync_store store; void *engine = NULL; wsync_mirror_stats ms;' ;;
    http)       L='wsync_error err;' ;;
    s3)         INC='#include "wsync_http.h"'; L='wsync_error err;' ;;
    direct)     INC='#include "wsync_rdma.h"'
                L='wsync_error err; void *weights = NULL; uint64_t bytes = 0; wsync_fabric_mr *mr; wsync_fabric_desc desc;
                   unsigned controller_port = 7000; const wsync_ctl_tensor *entries = NULL; uint32_t n = 0;
                   wsync_rank *rank; uint64_t step; int bye; const char *const *changed = NULL; uint32_t n_changed = 0;
                   wsync_controller_options copt = {0}; wsync_controller *ctl;' ;;
    *) return 1 ;;
    esac
    return 0
}
TABLE="read write dense encode pool publish subscribe prefetch mirror http s3 direct"

# ---- 1. the C blocks ----
# Each block to $tmp/b<N>.c; its README line and name (or "-") to $tmp/blocks.
awk -v dir="$tmp" '
    /^```c[ \t]*$/ { n++; name = "-"
        if (match(prev, /^<!-- snippet: [A-Za-z0-9_-]+ -->[ \t]*$/)) { name = prev; sub(/^<!-- snippet: /, "", name); sub(/ -->.*/, "", name) }
        print n, NR, name > (dir "/blocks"); out = dir "/b" n ".c"; printf "" > out; inb = 1; prev = $0; next }
    inb && /^```/ { inb = 0; close(out); prev = $0; next }
    inb { print > out }
    { prev = $0 }' "$readme"
[ -s "$tmp/blocks" ] || { fail "no \`\`\`c block in $readme"; echo "summary: $passed passed, $failed failed"; exit 1; }

compilers=(gcc)
command -v clang >/dev/null 2>&1 && compilers+=(clang)
CURL_CFLAGS=$(pkg-config --cflags libcurl 2>/dev/null)
have_curl=0; printf '#include <curl/curl.h>\n' | gcc -E $CURL_CFLAGS -x c - >/dev/null 2>&1 && have_curl=1
used=" "

while read -r n line name; do
    src=$tmp/b$n.c unit=$tmp/u$n.c what="${readme##*/}:$line ($name)"
    if grep -q '^[a-z].*[ *]main *(' "$src"; then # a complete program
        cp "$src" "$unit"; what="${readme##*/}:$line (a program)"
    else
        if [ "$name" = - ]; then
            fail "$what: a fragment needs <!-- snippet: NAME --> on the line before its fence, and NAME in tests/cli/test_readme.sh"
            continue
        fi
        if ! standins "$name"; then fail "$what: no stand-ins for '$name' in tests/cli/test_readme.sh"; continue; fi
        case $used in *" $name "*) fail "$what: the name '$name' is used twice"; continue ;; esac
        used="$used$name "
        {
            printf '/* %s, wrapped by tests/cli/test_readme.sh */\n' "$what"
            printf '#include <stdint.h>\n#include <stddef.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n'
            grep '^[ \t]*#' "$src"
            printf '#include "wsync.h"\n%s\n%s\n' "$INC" "$G"
            awk '/^static / { f = 1 } f { print } f && /^}[ \t]*$/ { f = 0 }' "$src"
            printf 'int readme_snippet(void);\nint readme_snippet(void)\n{\n%s\n' "$L"
            awk '/^static / { f = 1; next } f { if (/^}[ \t]*$/) f = 0; next }
                 /^[ \t]*#/ { next }
                 /^[ \t]*\.\.\./ { sub(/\.\.\./, "/* ..."); gsub(/\*\//, "* /"); print $0 " */"; next }
                 { print }' "$src"
            printf '%s\n    return 0;\n}\n' "$A"
        } > "$unit"
    fi
    if grep -q 'wsync_http\.h' "$unit" && [ $have_curl -eq 0 ]; then
        skip "$what: needs libcurl's headers (libcurl4-openssl-dev)"; continue
    fi
    for cc in "${compilers[@]}"; do
        if "$cc" -std=c99 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I. $CURL_CFLAGS "$unit" >"$tmp/cc.out" 2>&1; then
            pass "$what compiles warning-free with $cc"
        else
            fail "$what with $cc:"; sed 's/^/    /' "$tmp/cc.out" | head -n 20
        fi
    done
done < "$tmp/blocks"
[ -n "${TEST_README_KEEP:-}" ] && mkdir -p "$TEST_README_KEEP" && cp "$tmp"/u*.c "$TEST_README_KEEP"/
for name in $TABLE; do
    case $used in *" $name "*) ;; *) fail "tests/cli/test_readme.sh has stand-ins for '$name', which no fragment in $readme is named" ;; esac
done

# ---- 2. the Python examples without torch, without the library ----
py=
for cand in /usr/bin/python3 python3; do
    if command -v "$cand" >/dev/null 2>&1 && ! "$cand" -S -c 'import torch' >/dev/null 2>&1; then py=$cand; break; fi
done
if [ -z "$py" ]; then
    skip "examples/python without torch: no python3 here runs without it, even with -S"
else
    for ex in train serve; do
        env -u PYTHONPATH "$py" -S "examples/python/$ex.py" --store "$tmp/py-bucket" >"$tmp/out" 2>"$tmp/err"; rc=$?
        if [ $rc -ne 0 ] && grep -q "no torch" "$tmp/err" && grep -q "pip install torch" "$tmp/err" &&
            grep -q "python3-torch" "$tmp/err" && ! grep -q Traceback "$tmp/err" && [ ! -e "$tmp/py-bucket" ]; then
            pass "examples/python/$ex.py without torch ($py -S) exits $rc, naming torch and how to get it"
        else
            fail "examples/python/$ex.py without torch ($py -S): exit $rc: $(head -c 800 "$tmp/err")"
        fi
    done
fi
pyt=
for cand in /usr/bin/python3 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import torch' >/dev/null 2>&1; then pyt=$cand; break; fi
done
if [ -z "$pyt" ]; then
    skip "examples/python without the library: no python3 here has torch"
else
    for ex in train serve; do
        PYTHONPATH=python WSYNC_LIB=$tmp/none.so "$pyt" "examples/python/$ex.py" --store "$tmp/py-bucket" >"$tmp/out" 2>"$tmp/err"; rc=$?
        if [ $rc -ne 0 ] && grep -q "make python" "$tmp/err" && grep -q "WSYNC_LIB" "$tmp/err" &&
            ! grep -q Traceback "$tmp/err" && [ ! -e "$tmp/py-bucket" ]; then
            pass "examples/python/$ex.py without the library exits $rc, naming make python and WSYNC_LIB"
        else
            fail "examples/python/$ex.py without the library: exit $rc: $(head -c 800 "$tmp/err")"
        fi
    done
fi

# ---- 3. make examples ----
if make -n examples BUILD="$tmp/build" >"$tmp/make.out" 2>&1 &&
    for e in trainer engine direct; do grep -q -- "-o $tmp/build/example_$e examples/$e.c" "$tmp/make.out" || exit 1; done; then
    pass "make examples builds example_trainer, example_engine and example_direct"
else
    fail "make examples: $(head -c 600 "$tmp/make.out")"
fi

# ---- 4. the tool's commands in the Status paragraph ----
if [ ! -x "$tool" ]; then
    skip "the Status paragraph's commands: no tool at $tool (make)"
else
    "$tool" --help 2>&1 | awk '/^commands:/ { c = 1; next } /^options:/ { c = 0 } c && /^  [a-z]/ { print $1 }' |
        sort > "$tmp/help.cmds"
    awk '/The tool has `/ { t = 1 } t { s = s " " $0 } t && /;/ { exit } END { print s }' "$readme" |
        sed 's/.*The tool has //; s/;.*//' | grep -o '`[a-z-]*`' | tr -d '`' | sort > "$tmp/readme.cmds"
    if [ -s "$tmp/help.cmds" ] && cmp -s "$tmp/help.cmds" "$tmp/readme.cmds"; then
        pass "the Status paragraph names the $(wc -l < "$tmp/help.cmds") commands of wsync --help"
    else
        fail "the Status paragraph's commands differ from wsync --help's (< help, > README): $(diff "$tmp/help.cmds" "$tmp/readme.cmds" | grep '^[<>]' | tr '\n' ' ')"
    fi
fi

[ $skipped -gt 0 ] && echo "test_readme: $skipped skipped"
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
