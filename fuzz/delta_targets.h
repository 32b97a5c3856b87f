/* delta_targets.h - the fixed tensors fuzz_delta_apply.c applies deltas to.

   Shared with make_delta_seeds.c, so that the seeds in
   fuzz/corpus/delta_apply/ are deltas against exactly these bases. Changing
   a name, shape, dtype or a base value here makes the packed seeds fail
   their digest checks: regenerate them (see make_delta_seeds.c).

   Include after wsync.h (any translation unit; everything is static). */
#ifndef WSYNC_FUZZ_DELTA_TARGETS_H
#define WSYNC_FUZZ_DELTA_TARGETS_H

#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define DT_UNUSED __attribute__((unused))
#else
#define DT_UNUSED
#endif

/* w: a small matrix; b: F32 bias; e: fp8 (one-byte elements); x: two
   blocks at the default block size (65536) and many at small ones; s: an
   8-byte scalar (rank 0). */
#define DT_N 5

typedef struct dt_spec {
    const char *name;
    wsync_dtype dtype;
    uint32_t rank;
    uint64_t shape[2];
} dt_spec;

static const dt_spec dt_specs[DT_N] = {
    {"w", WSYNC_DTYPE_BF16, 2, {37, 5}},
    {"b", WSYNC_DTYPE_F32, 1, {7, 0}},
    {"e", WSYNC_DTYPE_F8_E4M3, 1, {300, 0}},
    {"x", WSYNC_DTYPE_BF16, 1, {70000, 0}},
    {"s", WSYNC_DTYPE_F64, 0, {0, 0}},
};

DT_UNUSED static unsigned dt_width(size_t i)
{
    return wsync_dtype_bits(dt_specs[i].dtype) / 8;
}

DT_UNUSED static uint64_t dt_nelem(size_t i)
{
    uint64_t n = 1;
    uint32_t d;
    for (d = 0; d < dt_specs[i].rank; d++) n *= dt_specs[i].shape[d];
    return n;
}

DT_UNUSED static size_t dt_nbytes(size_t i)
{
    return (size_t)dt_nelem(i) * dt_width(i);
}

/* Index of the target called name[0..len), or -1. */
DT_UNUSED static int dt_find(const char *name, size_t len)
{
    int i;
    for (i = 0; i < DT_N; i++)
        if (strlen(dt_specs[i].name) == len && memcmp(dt_specs[i].name, name, len) == 0) return i;
    return -1;
}

DT_UNUSED static uint64_t dt_rand(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The base of target i: small weights, with special values (NaN with a
   payload, -0, +inf, a subnormal, the largest finite) at fixed places. */
DT_UNUSED static void dt_fill_base(size_t i, uint8_t *out)
{
    uint64_t s = 0x5EED0000u + (uint64_t)i, k, n = dt_nelem(i);
    for (k = 0; k < n; k++) {
        uint64_t r = dt_rand(&s);
        float f = (float)((double)(int32_t)(uint32_t)r / 2147483648.0) / (float)(1u << (r >> 60));
        switch (dt_specs[i].dtype) {
        case WSYNC_DTYPE_BF16: {
            static const uint16_t sp[5] = {0x7F81, 0x8000, 0x7F80, 0x0001, 0x7F7F};
            uint16_t v = k % 997 == 3 ? sp[(k / 997) % 5] : wsync_f32_to_bf16(f);
            memcpy(out + 2 * k, &v, 2);
        } break;
        case WSYNC_DTYPE_F32: {
            uint32_t v;
            memcpy(&v, &f, 4);
            if (k == 5) v = 0x80000000u;
            memcpy(out + 4 * k, &v, 4);
        } break;
        case WSYNC_DTYPE_F8_E4M3:
            out[k] = k == 7 ? 0x7F : wsync_f32_to_e4m3(f * 100.0f, WSYNC_FP8_SATURATE);
            break;
        default: { /* F64 */
            double d = (double)f * 3.0;
            memcpy(out + 8 * k, &d, 8);
        } break;
        }
    }
}

/* Views over data[i] (each dt_nbytes(i) bytes) for wsync_delta_apply. */
DT_UNUSED static void dt_views(uint8_t *const *data, wsync_tensor *out)
{
    size_t i;
    for (i = 0; i < DT_N; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].name = dt_specs[i].name;
        out[i].dtype = dt_specs[i].dtype;
        out[i].rank = dt_specs[i].rank;
        out[i].shape = dt_specs[i].rank ? dt_specs[i].shape : NULL;
        out[i].data = data[i];
        out[i].nbytes = dt_nbytes(i);
    }
}

#endif
