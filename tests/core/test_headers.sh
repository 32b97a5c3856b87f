#!/usr/bin/env bash
# Every header compiles warning-free (-Werror) with gcc and clang, as C99 and as
# C++, with and without its implementation, with WSYNC_STATIC, two
# translation units (one with the implementation) link into one program, each
# companion links with its implementation in a translation unit of its own,
# and the three headers' implementations link together (in one file, and each
# in its own file beside the user's main).
# usage: tests/core/test_headers.sh [COMPILER...]   (gcc, clang; both by default:
# make test runs one command for each, side by side)
set -u
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
check() { # name, command...
    local name=$1; shift
    if out=$("$@" 2>&1); then passed=$((passed + 1)); [ -n "${CHECK_VERBOSE:-}" ] && echo "ok   $name"
    else failed=$((failed + 1)); echo "FAIL $name"; echo "$out" | head -n 20; fi
}
W="-Wall -Wextra -Wpedantic -Werror -I."
[ $# -gt 0 ] || set -- gcc clang
for cc in "$@"; do
    command -v $cc >/dev/null || { echo "FAIL $cc not installed"; failed=$((failed + 1)); continue; }
    cxx=g++; [ $cc = clang ] && cxx=clang++
    for h in wsync wsync_http wsync_rdma; do
        H=$(echo $h | tr a-z A-Z)
        # wsync_http.h's implementation links libcurl (or, without it, builds its stub)
        L=; if [ $h = wsync_http ]; then
            if pkg-config --exists libcurl 2>/dev/null; then L="$(pkg-config --libs libcurl) -lpthread"; else L=-DWSYNC_HTTP_NO_CURL; fi
        fi
        printf '#define WSYNC_IMPLEMENTATION\n#define %s_IMPLEMENTATION\n#include "%s.h"\nint main(void) { return 0; }\n' "$H" "$h" > "$tmp/$h.c"
        printf '#include "%s.h"\nint f_%s(void) { return WSYNC_VERSION_MAJOR; }\n' "$h" "$h" > "$tmp/${h}_decl.c"
        check "$cc C99 $h.h with implementation" $cc -std=c99 $W -o "$tmp/a" "$tmp/$h.c" $L
        check "$cc C11 $h.h with implementation" $cc -std=c11 $W -o "$tmp/a" "$tmp/$h.c" $L
        check "$cxx C++11 $h.h with implementation" $cxx -x c++ -std=c++11 $W -o "$tmp/a" "$tmp/$h.c" $L
        check "$cxx C++17 $h.h with implementation" $cxx -x c++ -std=c++17 $W -o "$tmp/a" "$tmp/$h.c" $L
        check "$cc C99 -O2 $h.h with implementation" $cc -std=c99 -O2 $W -o "$tmp/a" "$tmp/$h.c" $L
        check "$cc C99 -O3 -march=native $h.h with implementation" $cc -std=c99 -O3 -march=native $W -o "$tmp/a" "$tmp/$h.c" $L
        check "$cxx C++11 -O2 $h.h with implementation" $cxx -x c++ -std=c++11 -O2 $W -o "$tmp/a" "$tmp/$h.c" $L
        check "$cc C99 $h.h declarations only" $cc -std=c99 $W -c -o "$tmp/d.o" "$tmp/${h}_decl.c"
        check "$cxx C++11 $h.h declarations only" $cxx -x c++ -std=c++11 $W -c -o "$tmp/d.o" "$tmp/${h}_decl.c"
    done
    printf '#define WSYNC_HTTP_NO_CURL\n#define WSYNC_IMPLEMENTATION\n#define WSYNC_HTTP_IMPLEMENTATION\n#include "wsync_http.h"\nint main(void) { wsync_store s; wsync_error e; return wsync_store_http_open("http://h/x", NULL, &s, &e) == WSYNC_ERR_UNSUPPORTED && strstr(e.message, "libcurl") ? 0 : 1; }\n' > "$tmp/nocurl.c"
    check "$cc wsync_http.h without libcurl (WSYNC_HTTP_NO_CURL) builds and says so" $cc -std=c99 $W -include string.h -o "$tmp/nc" "$tmp/nocurl.c"
    check "$cc wsync_http.h without libcurl: the message" "$tmp/nc"
    # wsync_rdma.h's verbs backend left out (as without rdma-core's headers): it builds and says so
    printf '#define WSYNC_RDMA_NO_VERBS\n#define WSYNC_IMPLEMENTATION\n#define WSYNC_RDMA_IMPLEMENTATION\n#include "wsync_rdma.h"\nint main(void) { wsync_fabric f; wsync_error e; return !WSYNC_RDMA_AVAILABLE && wsync_fabric_verbs_open(NULL, &f, &e) == WSYNC_ERR_UNSUPPORTED && strstr(e.message, "verbs.h") ? 0 : 1; }\n' > "$tmp/noverbs.c"
    check "$cc wsync_rdma.h without verbs (WSYNC_RDMA_NO_VERBS) builds" $cc -std=c99 $W -o "$tmp/nv" "$tmp/noverbs.c"
    check "$cxx wsync_rdma.h without verbs as C++" $cxx -x c++ -std=c++11 $W -o "$tmp/nvx" "$tmp/noverbs.c"
    check "$cc wsync_rdma.h without verbs: UNSUPPORTED and the message" "$tmp/nv"
    if [ -f /usr/include/infiniband/verbs.h ]; then
        printf '#define WSYNC_IMPLEMENTATION\n#define WSYNC_RDMA_IMPLEMENTATION\n#include "wsync_rdma.h"\n#if !WSYNC_RDMA_AVAILABLE\n#error "verbs.h is here but the verbs backend is not built"\n#endif\nint main(void) { return 0; }\n' > "$tmp/verbs.c"
        check "$cc wsync_rdma.h with verbs.h: WSYNC_RDMA_AVAILABLE" $cc -std=c99 $W -o "$tmp/v" "$tmp/verbs.c"
    fi
    # WSYNC_STATIC: a program that uses a few functions builds warning-free
    # (no "defined but not used"; -O2 inlines enough to expose what -O0 hides),
    # the companions too (their functions take WSYNC_DEF from wsync.h).
    printf '#define WSYNC_STATIC\n#define WSYNC_IMPLEMENTATION\n#include "wsync.h"\nint main(void) { uint64_t sh[1] = {2}, n = 0; uint16_t v[2] = {0, 0}; wsync_st_tensor_desc t = {"w", WSYNC_DTYPE_BF16, 1, sh, v, 4, 0};\n return wsync_f32_to_bf16(1.0f) == 0x3F80 && wsync_st_write_size(&t, 1, NULL, 0, &n, NULL) == WSYNC_OK && n > 8 ? 0 : 1; }\n' > "$tmp/static.c"
    printf '#define WSYNC_STATIC\n#define WSYNC_IMPLEMENTATION\n#define WSYNC_HTTP_IMPLEMENTATION\n#include "wsync_http.h"\nint main(void) { char o[16]; return wsync_s3_uri_encode("a b", 3, 0, o, sizeof o) == 5 ? 0 : 1; }\n' > "$tmp/static_http.c"
    printf '#define WSYNC_STATIC\n#define WSYNC_IMPLEMENTATION\n#define WSYNC_RDMA_IMPLEMENTATION\n#include "wsync_rdma.h"\nint main(void) { return wsync_quantize_scale_count(4, 4, 0) == 1 ? 0 : 1; }\n' > "$tmp/static_rdma.c"
    LH=-DWSYNC_HTTP_NO_CURL; pkg-config --exists libcurl 2>/dev/null && LH="$(pkg-config --libs libcurl)"
    for O in -O0 -O2; do
        check "$cc C99 $O WSYNC_STATIC" $cc -std=c99 $O $W -o "$tmp/s" "$tmp/static.c" -lpthread
        check "$cxx C++11 $O WSYNC_STATIC" $cxx -x c++ -std=c++11 $O $W -o "$tmp/s" "$tmp/static.c" -lpthread
        check "$cc C99 $O WSYNC_STATIC wsync_http.h" $cc -std=c99 $O $W -o "$tmp/s" "$tmp/static_http.c" $LH -lpthread
        check "$cxx C++11 $O WSYNC_STATIC wsync_http.h" $cxx -x c++ -std=c++11 $O $W -o "$tmp/s" "$tmp/static_http.c" $LH -lpthread
        check "$cc C99 $O WSYNC_STATIC wsync_rdma.h" $cc -std=c99 $O $W -o "$tmp/s" "$tmp/static_rdma.c" -lpthread -ldl
        check "$cxx C++11 $O WSYNC_STATIC wsync_rdma.h" $cxx -x c++ -std=c++11 $O $W -o "$tmp/s" "$tmp/static_rdma.c" -lpthread -ldl
    done
    check "$cc WSYNC_STATIC runs" sh -c "$cc -std=c99 $W -o '$tmp/s' '$tmp/static.c' -lpthread && '$tmp/s'"
    printf '#define WSYNC_NO_SIMD\n#define WSYNC_NO_THREADS\n#define WSYNC_NO_MMAP\n#define WSYNC_IMPLEMENTATION\n#include "wsync.h"\nint main(void) { return 0; }\n' > "$tmp/portable.c"
    check "$cc portable build (no SIMD, threads, mmap)" $cc -std=c99 -O2 $W -o "$tmp/p" "$tmp/portable.c"
    printf '#include "wsync.h"\nint other(void);\nint main(void) { return other() + (wsync_dtype_bits(WSYNC_DTYPE_BF16) == 16 ? 0 : 1); }\n' > "$tmp/main.c"
    printf '#define WSYNC_IMPLEMENTATION\n#include "wsync.h"\nint other(void) { return 0; }\n' > "$tmp/impl.c"
    check "$cc two translation units link" $cc -std=c99 $W -o "$tmp/two" "$tmp/main.c" "$tmp/impl.c"
    check "$cc two translation units run" "$tmp/two"
    # Each companion vendored the usual way: wsync.h's implementation in one
    # file, the companion's in another, a third that sees only declarations.
    # The companion's code may use only wsync.h's public API.
    printf '#define WSYNC_IMPLEMENTATION\n#include "wsync.h"\n' > "$tmp/core.c"
    printf '#define WSYNC_HTTP_IMPLEMENTATION\n#include "wsync_http.h"\n' > "$tmp/comp_http.c"
    printf '#define WSYNC_RDMA_IMPLEMENTATION\n#include "wsync_rdma.h"\n' > "$tmp/comp_rdma.c"
    printf '#include "wsync_http.h"\n#include <string.h>\nint main(void) { char o[16]; wsync_store s; wsync_error e; wsync_result r = wsync_store_mem_open(NULL, &s, &e);\n if (r != WSYNC_OK || wsync_s3_uri_encode("a b", 3, 0, o, sizeof o) != 5 || strcmp(o, "a%%20b") != 0) return 1;\n wsync_store_close(&s); return strlen(wsync_result_str(WSYNC_OK)) ? 0 : 1; }\n' > "$tmp/use_http.c"
    printf '#include "wsync_rdma.h"\n#include <string.h>\nint main(void) { uint16_t w[4] = {0x3F80, 0x4000, 0xBF80, 0}; uint8_t q[4]; float sc[1]; wsync_error e;\n if (wsync_quantize_e4m3(w, 2, 2, 2, 0, q, sc, &e) != WSYNC_OK || wsync_quantize_scale_count(2, 2, 0) != 1) return 1;\n return strlen(wsync_result_str(WSYNC_OK)) ? 0 : 1; }\n' > "$tmp/use_rdma.c"
    for h in http rdma; do
        L=-lpthread; [ $h = rdma ] && L="-lpthread -ldl"
        D=; if [ $h = http ]; then
            if pkg-config --exists libcurl 2>/dev/null; then L="$(pkg-config --libs libcurl) -lpthread"; else D=-DWSYNC_HTTP_NO_CURL; fi
        fi
        check "$cc C99 wsync_$h.h in its own translation unit links" \
            $cc -std=c99 $W $D -o "$tmp/three_$h" "$tmp/use_$h.c" "$tmp/comp_$h.c" "$tmp/core.c" $L
        check "$cc C99 wsync_$h.h in its own translation unit runs" "$tmp/three_$h"
        check "$cxx C++11 wsync_$h.h in its own translation unit links" \
            $cxx -x c++ -std=c++11 $W $D -o "$tmp/three_${h}_cxx" "$tmp/use_$h.c" "$tmp/comp_$h.c" "$tmp/core.c" $L
        check "$cxx C++11 wsync_$h.h in its own translation unit runs" "$tmp/three_${h}_cxx"
    done
    # The three headers' implementations together: (a) in one file, (b) each
    # in its own translation unit (core.c, comp_http.c, comp_rdma.c above)
    # with a fourth, the user's main, that calls one function of each.
    printf '#define WSYNC_IMPLEMENTATION\n#define WSYNC_HTTP_IMPLEMENTATION\n#define WSYNC_RDMA_IMPLEMENTATION\n#include "wsync.h"\n#include "wsync_http.h"\n#include "wsync_rdma.h"\n#include <string.h>\nint main(void) { char o[16];\n if (wsync_s3_uri_encode("a b", 3, 0, o, sizeof o) != 5 || wsync_quantize_scale_count(2, 2, 0) != 1) return 1;\n return strlen(wsync_result_str(WSYNC_OK)) ? 0 : 1; }\n' > "$tmp/all_one.c"
    printf '#include "wsync.h"\n#include "wsync_http.h"\n#include "wsync_rdma.h"\n#include <string.h>\nint main(void) { char o[16];\n if (wsync_s3_uri_encode("a b", 3, 0, o, sizeof o) != 5 || strcmp(o, "a%%20b") != 0) return 1;\n if (wsync_quantize_scale_count(2, 2, 0) != 1) return 1;\n return strlen(wsync_result_str(WSYNC_OK)) ? 0 : 1; }\n' > "$tmp/use_all.c"
    L="-lpthread -ldl"; D=
    if pkg-config --exists libcurl 2>/dev/null; then L="$(pkg-config --libs libcurl) -lpthread -ldl"; else D=-DWSYNC_HTTP_NO_CURL; fi
    check "$cc C99 the three headers' implementations in one file links" \
        $cc -std=c99 $W $D -o "$tmp/all1" "$tmp/all_one.c" $L
    check "$cc C99 the three headers' implementations in one file runs" "$tmp/all1"
    check "$cxx C++11 the three headers' implementations in one file links" \
        $cxx -x c++ -std=c++11 $W $D -o "$tmp/all1x" "$tmp/all_one.c" $L
    check "$cxx C++11 the three headers' implementations in one file runs" "$tmp/all1x"
    check "$cc C99 the three headers' implementations in four translation units link" \
        $cc -std=c99 $W $D -o "$tmp/all4" "$tmp/use_all.c" "$tmp/comp_http.c" "$tmp/comp_rdma.c" "$tmp/core.c" $L
    check "$cc C99 the three headers' implementations in four translation units run" "$tmp/all4"
    check "$cxx C++11 the three headers' implementations in four translation units link" \
        $cxx -x c++ -std=c++11 $W $D -o "$tmp/all4x" "$tmp/use_all.c" "$tmp/comp_http.c" "$tmp/comp_rdma.c" "$tmp/core.c" $L
    check "$cxx C++11 the three headers' implementations in four translation units run" "$tmp/all4x"
    # The opt-outs: WSYNC_NO_CHAIN (the codec alone), WSYNC_NO_ENCODE (no
    # encoders, no publisher), both. Each builds warning-free (C99 to an
    # object, C++ checked), and nm shows what was left out absent and what
    # stays present; their declarations are gone too.
    cat > "$tmp/nm_check.sh" <<'EOS'
# object, absent-pattern (ERE over the defined global symbols), names that must be there
syms=$(nm -g --defined-only "$1" | awk '{print $3}')
bad=$(printf '%s\n' "$syms" | grep -E "$2") && { echo "left in:" $bad; exit 1; }
shift 2
for s in "$@"; do printf '%s\n' "$syms" | grep -qx "$s" || { echo "missing: $s"; exit 1; }; done
EOS
    runtime='^wsync_(store|chain|publish|subscriber|mirror|fabric|state_digest|dir_)'
    for opts in "WSYNC_NO_CHAIN" "WSYNC_NO_ENCODE" "WSYNC_NO_CHAIN WSYNC_NO_ENCODE"; do
        tag=$(echo $opts | tr ' ' '+'); D=; for o in $opts; do D="$D -D$o"; done
        case $opts in
            "WSYNC_NO_CHAIN") gone=$runtime; keep="wsync_st_parse wsync_delta_apply wsync_delta_encode wsync_ed25519_verify";;
            "WSYNC_NO_ENCODE") gone='^wsync_(delta_encode|publish|dir_read|dir_publish|dir_checkpoint)'; keep="wsync_delta_apply wsync_subscriber_sync wsync_mirror_take wsync_store_dir_open wsync_dir_pull";;
            *) gone="$runtime|^wsync_delta_encode"; keep="wsync_st_parse wsync_delta_apply wsync_delta_info wsync_digest";;
        esac
        check "$cc C99 $tag builds" $cc -std=c99 $W $D -c -o "$tmp/opt_$tag.o" "$tmp/core.c"
        check "$cc C99 $tag: nm shows what was left out absent" sh "$tmp/nm_check.sh" "$tmp/opt_$tag.o" "$gone" $keep
        check "$cxx C++11 $tag builds" $cxx -x c++ -std=c++11 $W $D -fsyntax-only "$tmp/core.c"
    done
    printf '#include "wsync.h"\nvoid f(void);\nvoid f(void) { wsync_store s; (void)s; }\n' > "$tmp/decl_store.c"
    printf '#include "wsync.h"\nvoid f(void);\nvoid f(void) { (void)wsync_delta_encode; }\n' > "$tmp/decl_enc.c"
    check "$cc WSYNC_NO_CHAIN: no store declared" sh -c "! $cc -std=c99 $W -DWSYNC_NO_CHAIN -fsyntax-only '$tmp/decl_store.c'"
    check "$cc WSYNC_NO_ENCODE: no wsync_delta_encode declared" sh -c "! $cc -std=c99 $W -DWSYNC_NO_ENCODE -fsyntax-only '$tmp/decl_enc.c'"
    # A companion with WSYNC_NO_CHAIN does not build (it needs the runtime);
    # where it says so itself, its message names the option.
    for h in wsync_http wsync_rdma; do
        printf '#define WSYNC_NO_CHAIN\n#include "%s.h"\n' $h > "$tmp/nochain_$h.c"
        if grep -q 'WSYNC_NO_CHAIN' $h.h; then
            check "$cc $h.h with WSYNC_NO_CHAIN: #error naming it" sh -c "out=\$($cc -std=c99 -I. -fsyntax-only '$tmp/nochain_$h.c' 2>&1); [ \$? -ne 0 ] && echo \"\$out\" | grep -q '#error.*WSYNC_NO_CHAIN'"
        else
            check "$cc $h.h with WSYNC_NO_CHAIN does not build" sh -c "! $cc -std=c99 -I. -fsyntax-only '$tmp/nochain_$h.c' >/dev/null 2>&1"
        fi
    done
    # The codec alone (both options) in a program that parses a safetensors
    # file and applies a delta: a packed-max seed of the fuzzer onto its
    # fixed targets (fuzz/delta_targets.h), which must then hold the result
    # (the delta checks both digests); applied again it must be refused.
    printf '%s\n' '#define WSYNC_NO_CHAIN' '#define WSYNC_NO_ENCODE' '#define WSYNC_IMPLEMENTATION' '#include "wsync.h"' \
        '#include "fuzz/delta_targets.h"' '#include <stdlib.h>' \
        'int main(int argc, char **argv) {' \
        '    wsync_mapped m, d; wsync_st_file st; wsync_error e; wsync_tensor t[DT_N]; wsync_delta_stats ds; size_t i; uint8_t *buf[DT_N];' \
        '    if (argc != 3 || wsync_file_map(argv[1], &m, &e) || wsync_st_parse(m.bytes, m.size, NULL, &st, &e) || st.n_tensors == 0) return 1;' \
        '    wsync_st_free(&st); wsync_file_unmap(&m);' \
        '    for (i = 0; i < DT_N; i++) { buf[i] = (uint8_t *)malloc(dt_nbytes(i) + 1); dt_fill_base(i, buf[i]);' \
        '        if (wsync_tensor_dense(&t[i], dt_specs[i].name, dt_specs[i].dtype, dt_specs[i].rank, dt_specs[i].shape, buf[i], &e)) return 2; }' \
        '    if (wsync_file_map(argv[2], &d, &e) || wsync_delta_apply(d.bytes, d.size, t, DT_N, NULL, &ds, &e) || ds.changed == 0) return 3;' \
        '    if (wsync_delta_apply(d.bytes, d.size, t, DT_N, NULL, NULL, &e) != WSYNC_ERR_DIGEST_MISMATCH) return 4;' \
        '    wsync_file_unmap(&d); for (i = 0; i < DT_N; i++) free(buf[i]); return 0; }' > "$tmp/codec.c"
    check "$cc C99 the codec alone: a program that parses and applies links" $cc -std=c99 $W -o "$tmp/codec" "$tmp/codec.c"
    check "$cc C99 the codec alone: it parses and applies" "$tmp/codec" tests/fixtures/corpus/trajectory/step_0000.safetensors \
        fuzz/corpus/delta_apply/seed_ok_packed_max_low_mixed_b8.safetensors
    printf '#include <stdlib.h>\n#define WSYNC_MALLOC(n) malloc(n)\n#define WSYNC_IMPLEMENTATION\n#include "wsync.h"\nint main(void) { return 0; }\n' > "$tmp/half.c"
    if $cc -std=c99 $W -o "$tmp/h" "$tmp/half.c" >/dev/null 2>&1; then
        failed=$((failed + 1)); echo "FAIL $cc: WSYNC_MALLOC without WSYNC_FREE compiled"
    else passed=$((passed + 1)); fi
done
echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
