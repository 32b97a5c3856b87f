/* fuzz_delta_apply.c - fuzz harness for wsync_delta_apply (and wsync_delta_info).

   Build and run (from the repository root):

     libFuzzer (clang):   clang -g -O1 -fsanitize=fuzzer,address,undefined \
                              -fno-sanitize-recover=all -I. \
                              -o build/fuzz/fuzz_delta_apply fuzz/fuzz_delta_apply.c
                          mkdir -p build/fuzz/work_delta_apply
                          build/fuzz/fuzz_delta_apply -dict=fuzz/delta_apply.dict \
                              build/fuzz/work_delta_apply fuzz/corpus/delta_apply
       (or `make fuzz` once fuzz_delta_apply is in the Makefile's FUZZERS)
     AFL++ (its libFuzzer-compatible driver comes with -fsanitize=fuzzer):
                          AFL_USE_ASAN=1 AFL_USE_UBSAN=1 afl-clang-fast -g -O1 \
                              -fsanitize=fuzzer -I. -o build/afl_delta_apply \
                              fuzz/fuzz_delta_apply.c
                          afl-fuzz -i fuzz/corpus/delta_apply -o build/afl_out \
                              -x fuzz/delta_apply.dict -- build/afl_delta_apply
     Replay without a fuzzer (any C99 compiler):
                          cc -std=c99 -I. -o build/replay_delta_apply fuzz/replay.c \
                              fuzz/fuzz_delta_apply.c -lm
                          build/replay_delta_apply fuzz/corpus/delta_apply fuzz/data/delta_apply

   The input is a delta file. The targets are the fixed tensors of
   delta_targets.h (w BF16 [37,5], b F32 [7], e F8_E4M3 [300], x BF16 [70000],
   s F64 scalar), each reset to its deterministic base before every apply.
   The seeds (make_delta_seeds.c) are valid deltas against exactly these
   bases, so mutations start from deltas that pass every digest check.

   What one input goes through:
     1. It is copied into a malloc'd buffer of exactly its size (ASan sees a
        read past the end) and applied with a counting allocator that also
        refuses any single allocation out of proportion to the input.
     2. Failure: the wsync_error matches the result with a nonempty message,
        nothing leaked, and every target equals its base byte for byte.
        WSYNC_ERR_TRUNCATED only for a file that is short (the safetensors
        reader says so too): a stream that does not decode is CORRUPT.
     3. Success:
          packed (and packed-max): for every stream, the target it names has
          the base digest and the result digest the stream declares, and
          exactly the declared number of its elements changed; targets the
          delta does not name are untouched.
          trl-v1/trl-v3: the result equals an independent interpretation of
          the indices (or gaps) and values; a file this interpreter finds
          invalid must not have been accepted.
        The stats agree with the file, wsync_delta_info accepts it with the
        same encoding and change count, and the first, middle and last
        allocation of the apply made to fail each give
        WSYNC_ERR_OUT_OF_MEMORY, no leak and untouched targets.
     4. The same input with both digest checks skipped: if the checked apply
        succeeded, the same result; if it fails, untouched targets; if it
        succeeds on its own, packed streams still change exactly the
        declared number of elements.
   Any violation prints what failed and calls abort(), the fuzzer's signal.

   Compile-time switch:
     FZ_ALLOC_RATIO  no single allocation larger than this many times the
                     input size plus 2 MiB (the apply's digest scratch is 1 MiB) */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "delta_targets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FZ_ALLOC_RATIO
#define FZ_ALLOC_RATIO 64u
#endif
#define FZ_ALLOC_SLACK ((size_t)2 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Failing loudly (fz_fail, FZ_CHECK), the input's hash, the counting allocator */
#include "fuzz_common.h"

/* ---------------------------------------------------------------------
   Targets
   --------------------------------------------------------------------- */

static uint8_t *fz_base[DT_N], *fz_work[DT_N], *fz_first[DT_N];
static uint64_t fz_base_digest[DT_N];
static wsync_tensor fz_targets[DT_N];

static void fz_init(void)
{
    static int done;
    size_t i;
    if (done) return;
    done = 1;
    for (i = 0; i < DT_N; i++) {
        fz_base[i] = (uint8_t *)malloc(dt_nbytes(i));
        fz_work[i] = (uint8_t *)malloc(dt_nbytes(i));
        fz_first[i] = (uint8_t *)malloc(dt_nbytes(i));
        FZ_CHECK(fz_base[i] && fz_work[i] && fz_first[i]);
        dt_fill_base(i, fz_base[i]);
        fz_base_digest[i] = wsync_digest(fz_base[i], dt_nbytes(i));
    }
    dt_views(fz_work, fz_targets);
}

static void fz_reset(void)
{
    size_t i;
    for (i = 0; i < DT_N; i++) memcpy(fz_work[i], fz_base[i], dt_nbytes(i));
}

static int fz_untouched(size_t i) { return memcmp(fz_work[i], fz_base[i], dt_nbytes(i)) == 0; }

static int fz_all_untouched(void)
{
    size_t i;
    for (i = 0; i < DT_N; i++)
        if (!fz_untouched(i)) return 0;
    return 1;
}

static uint64_t fz_changed_elems(size_t i)
{
    uint64_t k, c = 0, n = dt_nelem(i);
    unsigned w = dt_width(i);
    for (k = 0; k < n; k++) c += memcmp(fz_work[i] + k * w, fz_base[i] + k * w, w) != 0;
    return c;
}

/* ---------------------------------------------------------------------
   Small independent readers
   --------------------------------------------------------------------- */

static uint64_t fz_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    unsigned i;
    for (i = n; i > 0; i--) v = (v << 8) | p[i - 1];
    return v;
}

/* TRUNCATED is for input that ends early, never for corrupt streams. */
static void fz_check_truncated(const uint8_t *buf, size_t size, wsync_result r)
{
    wsync_st_file f;
    wsync_result rs;
    if (r != WSYNC_ERR_TRUNCATED) return;
    rs = wsync_st_parse(buf, size, NULL, &f, NULL);
    if (rs == WSYNC_OK) wsync_st_free(&f);
    FZ_CHECK(rs == WSYNC_ERR_TRUNCATED);
}

static int fz_ends_with(const wsync_st_tensor *t, const char *sfx)
{
    size_t n = strlen(sfx);
    return t->name_len > n && memcmp(t->name + t->name_len - n, sfx, n) == 0;
}

/* After a successful packed apply: every stream's target has the declared
   digests (unless skipped) and exactly the declared number of changes (at
   most that many for a Rice stream with the digests skipped: see below);
   other targets are untouched. Returns the total declared changes. */
static uint64_t fz_check_packed(const wsync_st_file *f, int digests_checked)
{
    int named[DT_N];
    size_t i;
    uint64_t total = 0;
    memset(named, 0, sizeof named);
    for (i = 0; i < f->n_tensors; i++) {
        const wsync_st_tensor *t = &f->tensors[i];
        const uint8_t *p = t->data;
        uint64_t size = t->end - t->begin, changed;
        unsigned rank, d;
        int ti = dt_find(t->name, t->name_len);
        FZ_CHECK(ti >= 0);
        FZ_CHECK(!named[ti]);
        named[ti] = 1;
        FZ_CHECK(t->dtype == WSYNC_DTYPE_U8 && t->rank == 1);
        FZ_CHECK(size >= 8 && memcmp(p, "WSD1", 4) == 0);
        rank = p[6];
        FZ_CHECK(size >= 32 + 8 * (uint64_t)rank);
        FZ_CHECK(p[5] == (uint8_t)dt_specs[ti].dtype && rank == dt_specs[ti].rank);
        for (d = 0; d < rank; d++) FZ_CHECK(fz_le(p + 8 + 8 * d, 8) == dt_specs[ti].shape[d]);
        changed = fz_le(p + 8 + 8 * rank, 8);
        if (digests_checked) {
            FZ_CHECK(fz_le(p + 16 + 8 * rank, 8) == fz_base_digest[ti]);
            FZ_CHECK(fz_le(p + 24 + 8 * rank, 8) == wsync_digest(fz_work[ti], dt_nbytes((size_t)ti)));
        }
        /* A Rice stream (coder 1) is checked without the base, and its value
           codes are taken modulo the element's bits: a corrupt code can give
           an element its base value back, which only the result digest
           catches. With the digests skipped, such an element is declared
           but unchanged (fuzz/corpus/delta_apply/crash-rice-raw-equals-base).
           packed-max refuses a listed element that does not change. */
        if (p[4] == 1 && !digests_checked) FZ_CHECK(fz_changed_elems((size_t)ti) <= changed);
        else FZ_CHECK(fz_changed_elems((size_t)ti) == changed);
        total += changed;
    }
    for (i = 0; i < DT_N; i++)
        if (!named[i]) FZ_CHECK(fz_untouched(i));
    return total;
}

/* After a successful trl apply: the result is what the entries say. */
static uint64_t fz_check_trl(const wsync_st_file *f, int v3)
{
    const char *isfx = v3 ? ".idx" : ".indices", *vsfx = v3 ? ".val" : ".values";
    size_t il = strlen(isfx), vl = strlen(vsfx), i;
    uint8_t *expect[DT_N];
    uint64_t total = 0;
    for (i = 0; i < DT_N; i++) {
        expect[i] = (uint8_t *)malloc(dt_nbytes(i));
        FZ_CHECK(expect[i] != NULL);
        memcpy(expect[i], fz_base[i], dt_nbytes(i));
    }
    for (i = 0; i < f->n_tensors; i++) {
        const wsync_st_tensor *t = &f->tensors[i], *v;
        char vname[1024];
        int ti;
        unsigned iw, w;
        uint64_t k, cur = 0, n;
        if (fz_ends_with(t, vsfx)) {
            /* its indices must exist */
            FZ_CHECK(t->name_len - vl + il < sizeof vname);
            memcpy(vname, t->name, t->name_len - vl);
            memcpy(vname + t->name_len - vl, isfx, il);
            FZ_CHECK(wsync_st_find_n(f, vname, t->name_len - vl + il) != NULL);
            continue;
        }
        FZ_CHECK(fz_ends_with(t, isfx));
        ti = dt_find(t->name, t->name_len - il);
        FZ_CHECK(ti >= 0);
        FZ_CHECK(t->name_len - il + vl < sizeof vname);
        memcpy(vname, t->name, t->name_len - il);
        memcpy(vname + t->name_len - il, vsfx, vl);
        v = wsync_st_find_n(f, vname, t->name_len - il + vl);
        FZ_CHECK(v != NULL);
        FZ_CHECK(v->dtype == dt_specs[ti].dtype);
        FZ_CHECK(t->rank == 1 && v->rank == 1 && t->nelem == v->nelem);
        if (v3) FZ_CHECK(t->dtype == WSYNC_DTYPE_U16 || t->dtype == WSYNC_DTYPE_U32);
        else FZ_CHECK(t->dtype == WSYNC_DTYPE_I32 || t->dtype == WSYNC_DTYPE_I64);
        iw = wsync_dtype_bits(t->dtype) / 8;
        w = dt_width((size_t)ti);
        n = dt_nelem((size_t)ti);
        for (k = 0; k < t->nelem; k++) {
            uint64_t x = fz_le(t->data + k * iw, iw);
            if (v3) {
                FZ_CHECK(x < n && (k == 0 ? x : cur + 1 + x) < n);
                cur = k == 0 ? x : cur + 1 + x;
            } else {
                FZ_CHECK(!(x >> (8 * iw - 1))); /* not negative */
                FZ_CHECK(x < n);
                FZ_CHECK(k == 0 || x > cur);
                cur = x;
            }
            memcpy(expect[ti] + cur * w, v->data + k * w, w);
        }
        total += t->nelem;
    }
    for (i = 0; i < DT_N; i++) {
        FZ_CHECK(memcmp(expect[i], fz_work[i], dt_nbytes(i)) == 0);
        free(expect[i]);
    }
    return total;
}

/* ---------------------------------------------------------------------
   Entry point
   --------------------------------------------------------------------- */

static void fz_after_success(const uint8_t *buf, size_t size, const wsync_delta_stats *st, int digests_checked)
{
    wsync_st_file f;
    wsync_error err;
    wsync_result r;
    uint64_t declared;
    int packed = st->encoding == WSYNC_ENCODING_PACKED || st->encoding == WSYNC_ENCODING_PACKED_MAX;
    FZ_CHECK(st->encoding >= WSYNC_ENCODING_PACKED && st->encoding <= WSYNC_ENCODING_TRL_V3);
    FZ_CHECK(st->bytes == size);
    r = wsync_st_parse(buf, size, NULL, &f, &err);
    FZ_CHECK(r == WSYNC_OK);
    if (packed) declared = fz_check_packed(&f, digests_checked);
    else declared = fz_check_trl(&f, st->encoding == WSYNC_ENCODING_TRL_V3);
    FZ_CHECK(st->changed == declared);
    FZ_CHECK(st->changed_tensors <= st->tensors);
    wsync_st_free(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t empty_input[1];
    uint8_t *buf;
    wsync_delta_options opt;
    wsync_delta_stats st, st2;
    wsync_error err;
    wsync_result r, r2;
    fz_heap heap;
    size_t i, n_calls;

    fz_input_size = size;
    fz_input_hash = fz_fnv1a(data, size);
    fz_init();

    buf = (uint8_t *)malloc(size);
    if (!buf && size == 0) buf = empty_input;
    FZ_CHECK(buf != NULL);
    if (size) memcpy(buf, data, size);

    /* 1-3: checked apply */
    fz_reset();
    memset(&opt, 0, sizeof opt);
    opt.allocator = fz_allocator(&heap, SIZE_MAX);
    memset(&err, 0xA5, sizeof err);
    memset(&st, 0, sizeof st);
    r = wsync_delta_apply(buf, size, fz_targets, DT_N, &opt, &st, &err);
    FZ_CHECK(heap.live == 0);
    n_calls = heap.calls;
    if (r != WSYNC_OK) {
        FZ_CHECK(r != WSYNC_ERR_OUT_OF_MEMORY);
        fz_check_error(&err, r, size);
        FZ_CHECK(fz_all_untouched());
        fz_check_truncated(buf, size, r);
    } else {
        wsync_delta_stats info;
        FZ_CHECK(err.code == WSYNC_OK);
        fz_after_success(buf, size, &st, 1);
        for (i = 0; i < DT_N; i++) memcpy(fz_first[i], fz_work[i], dt_nbytes(i));
        r2 = wsync_delta_info(buf, size, &info, &err);
        FZ_CHECK(r2 == WSYNC_OK);
        FZ_CHECK(info.encoding == st.encoding);
        FZ_CHECK(info.changed == st.changed);
        FZ_CHECK(info.has_steps == st.has_steps);
        FZ_CHECK(!st.has_steps || (info.step == st.step && info.base_step == st.base_step));
        for (i = 0; i < 3 && n_calls > 0; i++) {
            size_t k = i == 0 ? 0 : i == 1 ? n_calls / 2 : n_calls - 1;
            fz_reset();
            opt.allocator = fz_allocator(&heap, k);
            r2 = wsync_delta_apply(buf, size, fz_targets, DT_N, &opt, NULL, &err);
            FZ_CHECK(r2 == WSYNC_ERR_OUT_OF_MEMORY);
            fz_check_error(&err, r2, size);
            FZ_CHECK(heap.live == 0);
            FZ_CHECK(fz_all_untouched());
        }
    }

    /* 4: digests skipped */
    fz_reset();
    opt.allocator = fz_allocator(&heap, SIZE_MAX);
    opt.flags = WSYNC_DELTA_SKIP_BASE_DIGEST | WSYNC_DELTA_SKIP_RESULT_DIGEST;
    memset(&st2, 0, sizeof st2);
    r2 = wsync_delta_apply(buf, size, fz_targets, DT_N, &opt, &st2, &err);
    FZ_CHECK(heap.live == 0);
    if (r == WSYNC_OK) {
        FZ_CHECK(r2 == WSYNC_OK);
        for (i = 0; i < DT_N; i++) FZ_CHECK(memcmp(fz_first[i], fz_work[i], dt_nbytes(i)) == 0);
        FZ_CHECK(st2.changed == st.changed);
    } else if (r2 != WSYNC_OK) {
        FZ_CHECK(r2 != WSYNC_ERR_OUT_OF_MEMORY);
        fz_check_error(&err, r2, size);
        FZ_CHECK(fz_all_untouched());
        fz_check_truncated(buf, size, r2);
    } else {
        FZ_CHECK(r == WSYNC_ERR_DIGEST_MISMATCH);
        fz_after_success(buf, size, &st2, 0);
    }

    /* info on anything: no crash, a filled error on failure */
    {
        wsync_delta_stats info;
        r2 = wsync_delta_info(buf, size, &info, &err);
        if (r2 != WSYNC_OK) fz_check_error(&err, r2, size);
        else FZ_CHECK(info.encoding >= WSYNC_ENCODING_PACKED && info.encoding <= WSYNC_ENCODING_TRL_V3);
    }

    if (buf != empty_input) free(buf);
    return 0;
}
