/* make_delta_seeds.c - writes the seed corpus of fuzz_delta_apply.c.

   usage (from the repository root):
     cc -std=c99 -O2 -I. -o build/make_delta_seeds fuzz/make_delta_seeds.c -lm
     build/make_delta_seeds fuzz/corpus/delta_apply

   Every seed is a delta against the bases of delta_targets.h (the same
   tensors the harness resets before each input):
     seed_ok_*    valid packed, trl-v1 and trl-v3 deltas: several densities,
                  block sizes from 64 elements to 65536 (x spans several
                  blocks), value escapes (random jumps), gap escapes, U16
                  and U32 trl-v3 gaps, unchanged tensors, subsets of the
                  targets, nothing changed at all
     seed_flip_*  the same deltas with one bit of the data section flipped
                  (packed rejects them; trl, which has no digests, may not)
     seed_bad_*   the same deltas truncated, with a wrong digest or block
                  table, and hand-built trl files with
                  out-of-range, repeated or descending indices, gaps past
                  the end, mismatched counts or dtypes; a non-delta file and
                  an unknown format
   The output is deterministic: rerunning it rewrites identical files. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "delta_targets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *out_dir;
static int n_written;

static void die(const char *what)
{
    fprintf(stderr, "make_delta_seeds: %s\n", what);
    exit(1);
}

static void write_file(const char *name, const uint8_t *p, size_t n)
{
    char path[1024];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s.safetensors", out_dir, name);
    f = fopen(path, "wb");
    if (!f) die(path);
    if (n && fwrite(p, 1, n, f) != n) die(path);
    if (fclose(f) != 0) die(path);
    n_written++;
}

/* ---- the next step: the base with some elements changed ---- */

static uint8_t *base[DT_N], *next[DT_N];

enum { M_STEP = 1, M_JUMP = 2, M_MIX = 3 };

static uint64_t rng_state = 12345;

static uint64_t rnd(void) { return dt_rand(&rng_state); }

static uint64_t load(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    unsigned i;
    for (i = w; i > 0; i--) v = (v << 8) | p[i - 1];
    return v;
}

static void store(uint8_t *p, unsigned w, uint64_t v)
{
    unsigned i;
    for (i = 0; i < w; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* one ulp up or down in sign-magnitude order, or a random jump */
static uint64_t change(uint64_t old, unsigned w, int mode)
{
    uint64_t sign = (uint64_t)1 << (8 * w - 1), mask = w == 8 ? ~(uint64_t)0 : (sign << 1) - 1, o, x;
    int jump = mode == M_JUMP || (mode == M_MIX && rnd() % 4 == 0);
    if (jump) {
        do x = rnd() & mask;
        while (x == old);
        return x;
    }
    o = (old & sign) ? (sign - 1 - (old & (sign - 1))) : (old | sign);
    o = (rnd() & 1 ? o + 1 + rnd() % 3 : o - 1 - rnd() % 3) & mask;
    return (o & sign) ? (o & (sign - 1)) : (sign | (sign - 1 - o));
}

/* density per target (negative: leave it unchanged) */
static void make_next(const double *density, int mode)
{
    size_t i;
    for (i = 0; i < DT_N; i++) {
        uint64_t k, n = dt_nelem(i);
        unsigned w = dt_width(i);
        memcpy(next[i], base[i], dt_nbytes(i));
        if (density[i] <= 0) continue;
        for (k = 0; k < n; k++)
            if ((double)(rnd() >> 11) / 9007199254740992.0 < density[i])
                store(next[i] + k * w, w, change(load(base[i] + k * w, w), w, mode));
    }
}

static void set_next(size_t i, uint64_t k, int mode)
{
    unsigned w = dt_width(i);
    store(next[i] + k * w, w, change(load(base[i] + k * w, w), w, mode));
}

/* ---- encoding ---- */

typedef struct blob {
    uint8_t *p;
    size_t len;
} blob;

/* mask: which targets go into the delta */
static blob encode(wsync_encoding enc, unsigned block_log2, unsigned mask)
{
    wsync_tensor b[DT_N], x[DT_N], bs[DT_N], xs[DT_N];
    wsync_delta_options o;
    wsync_buffer buf;
    wsync_error err;
    blob out;
    size_t i, n = 0;
    dt_views(base, b);
    dt_views(next, x);
    for (i = 0; i < DT_N; i++)
        if (mask & (1u << i)) bs[n] = b[i], xs[n] = x[i], n++;
    memset(&o, 0, sizeof o);
    o.encoding = enc;
    o.block_log2 = block_log2;
    o.base_step = 41;
    o.step = 42;
    buf.cap = 8u << 20;
    buf.bytes = (uint8_t *)malloc(buf.cap);
    buf.len = 0;
    if (!buf.bytes) die("out of memory");
    if (wsync_delta_encode(bs, xs, n, &o, wsync_buffer_sink, &buf, NULL, &err) != WSYNC_OK) die(err.message);
    out.p = buf.bytes;
    out.len = buf.len;
    return out;
}

/* The encoded delta must apply to the bases and give next exactly (the
   targets outside mask: their base). */
static void verify(const blob *d, unsigned mask)
{
    uint8_t *work[DT_N];
    wsync_tensor t[DT_N];
    wsync_error err;
    size_t i;
    for (i = 0; i < DT_N; i++) {
        work[i] = (uint8_t *)malloc(dt_nbytes(i));
        if (!work[i]) die("out of memory");
        memcpy(work[i], base[i], dt_nbytes(i));
    }
    dt_views(work, t);
    if (wsync_delta_apply(d->p, d->len, t, DT_N, NULL, NULL, &err) != WSYNC_OK) die(err.message);
    for (i = 0; i < DT_N; i++) {
        if (memcmp(work[i], (mask & (1u << i)) ? next[i] : base[i], dt_nbytes(i)) != 0) die("round trip differs");
        free(work[i]);
    }
}

static size_t stream_at(const blob *d, const char *name, size_t *size)
{
    wsync_st_file f;
    const wsync_st_tensor *t;
    size_t at = 0;
    if (wsync_st_parse(d->p, d->len, NULL, &f, NULL) != WSYNC_OK) die("cannot parse own delta");
    t = wsync_st_find(&f, name);
    if (!t) die("no such stream");
    at = (size_t)(t->data - d->p);
    *size = (size_t)(t->end - t->begin);
    wsync_st_free(&f);
    return at;
}

/* a valid seed, and its damaged variants */
static void emit(const char *name, wsync_encoding enc, unsigned block_log2, unsigned mask, int variants)
{
    char fn[256];
    blob d = encode(enc, block_log2, mask);
    verify(&d, mask);
    snprintf(fn, sizeof fn, "seed_ok_%s", name);
    write_file(fn, d.p, d.len);
    if (variants) {
        uint8_t *c = (uint8_t *)malloc(d.len);
        if (!c) die("out of memory");
        snprintf(fn, sizeof fn, "seed_bad_%s_truncated_half", name);
        write_file(fn, d.p, d.len / 2);
        snprintf(fn, sizeof fn, "seed_bad_%s_truncated_last_byte", name);
        write_file(fn, d.p, d.len - 1);
        memcpy(c, d.p, d.len);
        c[d.len - 1 - (d.len - 8 - (size_t)load(d.p, 8)) / 3] ^= 0x10; /* a bit in the data section */
        snprintf(fn, sizeof fn, "seed_flip_%s", name); /* trl may accept it: no digests */
        write_file(fn, c, d.len);
        if (enc == WSYNC_ENCODING_PACKED && (mask & 8u)) {
            size_t size = 0, at = stream_at(&d, "x", &size);
            memcpy(c, d.p, d.len);
            c[at + 24] ^= 1; /* x has rank 1: base digest at 24 */
            snprintf(fn, sizeof fn, "seed_bad_%s_base_digest", name);
            write_file(fn, c, d.len);
            memcpy(c, d.p, d.len);
            c[at + 32] ^= 1;
            snprintf(fn, sizeof fn, "seed_bad_%s_result_digest", name);
            write_file(fn, c, d.len);
            if (size > 40 + 4) {
                memcpy(c, d.p, d.len);
                c[at + 40] += 1; /* first block table entry */
                snprintf(fn, sizeof fn, "seed_bad_%s_block_table", name);
                write_file(fn, c, d.len);
            }
        }
        free(c);
    }
    free(d.p);
}

/* x alone in one block of 2^17 (70000 elements), then declaring 2^24:
   every other field stays valid, and a reader must refuse a block above
   WSYNC_DELTA_MAX_BLOCK_LOG2 before it sizes any scratch by it. */
static void emit_block24(const char *name, wsync_encoding enc)
{
    char fn[256];
    size_t size = 0, at;
    blob d = encode(enc, 17, 0x8);
    verify(&d, 0x8);
    at = stream_at(&d, "x", &size);
    d.p[at + 7] = 24;
    snprintf(fn, sizeof fn, "seed_bad_%s_declares_b24", name);
    write_file(fn, d.p, d.len);
    free(d.p);
}

/* ---- hand-built trl files against w (185 elements) ---- */

static void emit_built(const char *name, const wsync_st_tensor_desc *t, size_t n, const wsync_st_kv *m, size_t nm)
{
    uint64_t size = 0;
    wsync_buffer buf;
    wsync_error err;
    if (wsync_st_write_size(t, n, m, nm, &size, &err) != WSYNC_OK) die(err.message);
    buf.bytes = (uint8_t *)malloc((size_t)size);
    buf.cap = (size_t)size;
    buf.len = 0;
    if (!buf.bytes) die("out of memory");
    if (wsync_st_write(t, n, m, nm, wsync_buffer_sink, &buf, NULL, &err) != WSYNC_OK) die(err.message);
    write_file(name, buf.bytes, buf.len);
    free(buf.bytes);
}

static wsync_st_tensor_desc desc(const char *name, wsync_dtype dt, const uint64_t *shape, const void *data)
{
    wsync_st_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.name = name;
    d.dtype = dt;
    d.rank = 1;
    d.shape = shape;
    d.data = data;
    d.nbytes = shape[0] * wsync_dtype_bits(dt) / 8;
    return d;
}

static wsync_st_kv kv(const char *k, const char *v)
{
    wsync_st_kv r;
    r.key = k;
    r.key_len = 0;
    r.value = v;
    r.value_len = 0;
    return r;
}

static void emit_trl_built(void)
{
    static const uint16_t vals[4] = {0x3F80, 0x4000, 0x4040, 0x4080};
    static const uint32_t fvals[4] = {0x3F800000u, 0x40000000u, 0x40400000u, 0x40800000u};
    static const int32_t ok[4] = {0, 5, 9, 184}, neg[4] = {0, 5, -1, 9}, end[4] = {0, 5, 9, 185},
                         dup[4] = {0, 5, 5, 9}, desc_[4] = {0, 9, 5, 10};
    static const int64_t ok64[4] = {0, 5, 9, 184};
    static const uint16_t g_ok[4] = {0, 4, 3, 174}, g_past[4] = {0, 4, 3, 175};
    static const uint32_t g32_ok[4] = {0, 4, 3, 174}, g32_huge[4] = {0, 0xFFFFFFFFu, 0, 0};
    uint64_t sh4[1] = {4}, sh3[1] = {3};
    wsync_st_kv m1[5], m3[6];
    wsync_st_tensor_desc t[3];
    m1[0] = kv("format", "sparse_weight_patch");
    m1[1] = kv("version", "1");
    m1[2] = kv("sparse", "True");
    m1[3] = kv("model_version", "42");
    m1[4] = kv("total_elements", "70349");
    memcpy(m3, m1, sizeof m1);
    m3[5] = kv("encoding", "gap_delta");

#define V1(fname, idx, idt, ishape, val, vdt, vshape)                           \
    (t[0] = desc("w.indices", idt, ishape, idx), t[1] = desc("w.values", vdt, vshape, val), \
     emit_built(fname, t, 2, m1, 5))
#define V3(fname, idx, idt, val)                                                \
    (t[0] = desc("w.idx", idt, sh4, idx), t[1] = desc("w.val", WSYNC_DTYPE_BF16, sh4, val), \
     emit_built(fname, t, 2, m3, 6))
    V1("seed_ok_trl_v1_built_i32", ok, WSYNC_DTYPE_I32, sh4, vals, WSYNC_DTYPE_BF16, sh4);
    V1("seed_ok_trl_v1_built_i64", ok64, WSYNC_DTYPE_I64, sh4, vals, WSYNC_DTYPE_BF16, sh4);
    V1("seed_bad_trl_v1_negative_index", neg, WSYNC_DTYPE_I32, sh4, vals, WSYNC_DTYPE_BF16, sh4);
    V1("seed_bad_trl_v1_index_eq_nelem", end, WSYNC_DTYPE_I32, sh4, vals, WSYNC_DTYPE_BF16, sh4);
    V1("seed_bad_trl_v1_duplicate_index", dup, WSYNC_DTYPE_I32, sh4, vals, WSYNC_DTYPE_BF16, sh4);
    V1("seed_bad_trl_v1_descending", desc_, WSYNC_DTYPE_I32, sh4, vals, WSYNC_DTYPE_BF16, sh4);
    V1("seed_bad_trl_v1_count_mismatch", ok, WSYNC_DTYPE_I32, sh4, vals, WSYNC_DTYPE_BF16, sh3);
    V1("seed_bad_trl_v1_f32_values", ok, WSYNC_DTYPE_I32, sh4, fvals, WSYNC_DTYPE_F32, sh4);
    V3("seed_ok_trl_v3_built_u16", g_ok, WSYNC_DTYPE_U16, vals);
    V3("seed_ok_trl_v3_built_u32", g32_ok, WSYNC_DTYPE_U32, vals);
    V3("seed_bad_trl_v3_gap_past_end", g_past, WSYNC_DTYPE_U16, vals);
    V3("seed_bad_trl_v3_gap_2e32", g32_huge, WSYNC_DTYPE_U32, vals);
#undef V1
#undef V3
    /* values without indices; an entry with another suffix */
    t[0] = desc("w.values", WSYNC_DTYPE_BF16, sh4, vals);
    emit_built("seed_bad_trl_v1_values_only", t, 1, m1, 5);
    t[0] = desc("w.indices", WSYNC_DTYPE_I32, sh4, ok);
    t[1] = desc("w.values", WSYNC_DTYPE_BF16, sh4, vals);
    t[2] = desc("w.other", WSYNC_DTYPE_BF16, sh4, vals);
    emit_built("seed_bad_trl_v1_stray_entry", t, 3, m1, 5);
    /* not deltas */
    t[0] = desc("w", WSYNC_DTYPE_BF16, sh4, vals);
    emit_built("seed_bad_not_a_delta", t, 1, NULL, 0);
    m1[0] = kv("format", "pt");
    emit_built("seed_bad_unknown_format", t, 1, m1, 1);
    m1[0] = kv("format", "wsync-delta");
    m1[1] = kv("version", "1");
    m1[2] = kv("encoding", "packed");
    t[0] = desc("w", WSYNC_DTYPE_U8, sh4, "WSD1");
    emit_built("seed_bad_packed_stream_too_short", t, 1, m1, 3);
}

int main(int argc, char **argv)
{
    static const double none[DT_N] = {-1, -1, -1, -1, -1};
    static const double tiny[DT_N] = {0.02, -1, 0.01, -1, -1};
    static const double low[DT_N] = {0.05, 0.3, 0.03, 0.01, 1};
    static const double mid[DT_N] = {0.2, 0.5, 0.1, 0.05, 1};
    static const double all[DT_N] = {1, 1, 1, -1, 1};
    size_t i;
    out_dir = argc > 1 ? argv[1] : "fuzz/corpus/delta_apply";
    for (i = 0; i < DT_N; i++) {
        base[i] = (uint8_t *)malloc(dt_nbytes(i));
        next[i] = (uint8_t *)malloc(dt_nbytes(i));
        if (!base[i] || !next[i]) die("out of memory");
        dt_fill_base(i, base[i]);
    }

    make_next(tiny, M_STEP);
    set_next(3, 0, M_STEP);
    set_next(3, 69999, M_JUMP); /* gap 69998: U32 in trl-v3; a gap escape in packed */
    emit("packed_tiny_b16", WSYNC_ENCODING_PACKED, 16, 0x1F, 1);
    emit("packed_tiny_b6", WSYNC_ENCODING_PACKED, 6, 0x1F, 1);
    emit("packed_max_tiny", WSYNC_ENCODING_PACKED_MAX, 0, 0x1F, 1);
    emit("packed_max_tiny_b6", WSYNC_ENCODING_PACKED_MAX, 6, 0x1F, 1);
    emit("trl_v1_tiny", WSYNC_ENCODING_TRL_V1, 0, 0x1F, 1);
    emit("trl_v3_tiny_u32_gaps", WSYNC_ENCODING_TRL_V3, 0, 0x1F, 1);
    emit_block24("packed_tiny", WSYNC_ENCODING_PACKED);
    emit_block24("packed_max_tiny", WSYNC_ENCODING_PACKED_MAX);

    make_next(low, M_MIX);
    emit("packed_low_mixed_b8", WSYNC_ENCODING_PACKED, 8, 0x1F, 1);
    emit("packed_low_mixed_b16", WSYNC_ENCODING_PACKED, 16, 0x1F, 0);
    emit("packed_max_low_mixed_b8", WSYNC_ENCODING_PACKED_MAX, 8, 0x1F, 1);
    emit("packed_max_low_mixed_b16", WSYNC_ENCODING_PACKED_MAX, 16, 0x1F, 0);
    emit("trl_v1_low_mixed", WSYNC_ENCODING_TRL_V1, 0, 0x1F, 1);
    emit("trl_v3_low_mixed", WSYNC_ENCODING_TRL_V3, 0, 0x1F, 1);
    emit("packed_low_subset_w_x", WSYNC_ENCODING_PACKED, 12, 0x9, 0);

    make_next(mid, M_JUMP);
    emit("packed_mid_jumps_b10", WSYNC_ENCODING_PACKED, 10, 0x1F, 1);
    emit("packed_max_mid_jumps_b10", WSYNC_ENCODING_PACKED_MAX, 10, 0x1F, 1);
    emit("trl_v3_mid_jumps", WSYNC_ENCODING_TRL_V3, 0, 0x17, 0);

    make_next(all, M_STEP);
    emit("packed_all_steps_b6", WSYNC_ENCODING_PACKED, 6, 0x17, 1);
    emit("packed_max_all_steps_b6", WSYNC_ENCODING_PACKED_MAX, 6, 0x17, 1);
    emit("trl_v1_all_steps", WSYNC_ENCODING_TRL_V1, 0, 0x17, 0);

    make_next(none, M_STEP);
    emit("packed_nothing_changed", WSYNC_ENCODING_PACKED, 0, 0x1F, 0);
    emit("trl_v1_nothing_changed", WSYNC_ENCODING_TRL_V1, 0, 0x1F, 0);
    emit("trl_v3_nothing_changed", WSYNC_ENCODING_TRL_V3, 0, 0x1F, 0);

    emit_trl_built();
    printf("make_delta_seeds: %d files in %s\n", n_written, out_dir);
    return 0;
}
