/* test_convert.c - numeric conversions (f32 <-> bf16/f16/fp8) against
   oracles that do not share code with wsync.h.

   - f32 -> bf16 and f32 -> f16 against a committed sample of PyTorch
     (bf16) and numpy (f16) results, tests/fixtures/data/convert_sample.bin, written
     by tests/fixtures/gen_convert_oracle.py. NaN inputs there already follow wsync's
     rule (quiet NaN, input's sign), not the oracle's.
   - bf16/f16/fp8 -> f32 for every code, against ldexp arithmetic.
   - f32 -> fp8 (e4m3fn, e5m2; SATURATE and TORCH modes) against a brute-force
     nearest-value search over every finite fp8 value, on random inputs and on
     every midpoint between adjacent fp8 values and its f32 neighbours.
   - the bulk _n functions against the scalar ones.
   - a few famous values, their expected bits taken from torch 1.13 / numpy.

   Data files are found under tests/fixtures/data relative to the working directory
   (tests run from the repository root); WSYNC_TEST_DATA overrides that
   directory. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"

#include "check.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* 2^e, spelled this way because hex float literals are not C++11. */
static float p2(int e)
{
    return ldexpf(1.0f, e);
}

/* splitmix64: deterministic, so a failure reproduces run after run. */
static uint64_t rng_state = 0x5753594E43ull;
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Same bits, or both NaN with the same sign (decoders promise NaN, not a
   particular payload). */
static int same_float(float a, float b)
{
    if (a != a || b != b)
        return a != a && b != b && (f2u(a) >> 31) == (f2u(b) >> 31);
    return f2u(a) == f2u(b);
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t rd16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Whole file into memory; NULL (and a message) if it cannot be read. */
static unsigned char *load_data(const char *name, size_t *size)
{
    const char *dir = getenv("WSYNC_TEST_DATA");
    char path[1024];
    FILE *f;
    long len;
    unsigned char *buf;
    if (!dir || !*dir) dir = "tests/fixtures/data";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "rb");
    if (!f) {
        printf("  cannot open %s (run from the repository root or set WSYNC_TEST_DATA)\n", path);
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = (unsigned char *)malloc((size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)len;
    return buf;
}

/* ------------------------------------------------------------------ sample */

typedef struct sample {
    size_t n;
    uint32_t *in;    /* f32 bits */
    uint16_t *bf16;  /* torch x.to(torch.bfloat16), wsync NaN rule */
    uint16_t *f16;   /* numpy x.astype(np.float16), wsync NaN rule */
} sample;

/* Layout documented in tests/fixtures/gen_convert_oracle.py. */
static int load_sample(sample *s)
{
    size_t size = 0, i;
    unsigned char *buf = load_data("convert_sample.bin", &size);
    memset(s, 0, sizeof *s);
    if (!buf) return 0;
    if (size < 16 || memcmp(buf, "WSCVTS01", 8) != 0 || (size - 16) / 8 != rd32(buf + 8) ||
        (size - 16) % 8 != 0) {
        printf("  convert_sample.bin: bad header or size\n");
        free(buf);
        return 0;
    }
    s->n = rd32(buf + 8);
    s->in = (uint32_t *)malloc(s->n * sizeof *s->in + 1);
    s->bf16 = (uint16_t *)malloc(s->n * sizeof *s->bf16 + 1);
    s->f16 = (uint16_t *)malloc(s->n * sizeof *s->f16 + 1);
    if (!s->in || !s->bf16 || !s->f16) {
        free(buf);
        return 0;
    }
    for (i = 0; i < s->n; i++) {
        const unsigned char *r = buf + 16 + 8 * i;
        s->in[i] = rd32(r);
        s->bf16[i] = rd16(r + 4);
        s->f16[i] = rd16(r + 6);
    }
    free(buf);
    return 1;
}

static void free_sample(sample *s)
{
    free(s->in);
    free(s->bf16);
    free(s->f16);
}

static void test_sample(const sample *s)
{
    size_t i;
    float *src;
    uint16_t *dst;

    TEST_BEGIN("f32->bf16 sample vs torch");
    CHECK_MSG(s->n > 100000, "sample holds %lu patterns", (unsigned long)s->n);
    for (i = 0; i < s->n; i++) {
        uint16_t got = wsync_f32_to_bf16(u2f(s->in[i]));
        CHECK_MSG(got == s->bf16[i], "f32 0x%08lx: expected 0x%04x, got 0x%04x",
                  (unsigned long)s->in[i], s->bf16[i], got);
    }
    TEST_END();

    TEST_BEGIN("f32->f16 sample vs numpy");
    CHECK_MSG(s->n > 100000, "sample holds %lu patterns", (unsigned long)s->n);
    for (i = 0; i < s->n; i++) {
        uint16_t got = wsync_f32_to_f16(u2f(s->in[i]));
        CHECK_MSG(got == s->f16[i], "f32 0x%08lx: expected 0x%04x, got 0x%04x",
                  (unsigned long)s->in[i], s->f16[i], got);
    }
    TEST_END();

    /* The bulk paths may be vectorised separately; hold them to the oracle
       too, not only to the scalar functions. */
    src = (float *)calloc(s->n + 1, sizeof *src);
    dst = (uint16_t *)calloc(s->n + 1, sizeof *dst);
    TEST_BEGIN("f32->bf16_n and f32->f16_n sample vs oracles");
    CHECK(src && dst);
    if (src && dst) {
        for (i = 0; i < s->n; i++) src[i] = u2f(s->in[i]);
        wsync_f32_to_bf16_n(src, dst, s->n);
        for (i = 0; i < s->n; i++)
            CHECK_MSG(dst[i] == s->bf16[i], "bf16_n f32 0x%08lx: expected 0x%04x, got 0x%04x",
                      (unsigned long)s->in[i], s->bf16[i], dst[i]);
        wsync_f32_to_f16_n(src, dst, s->n);
        for (i = 0; i < s->n; i++)
            CHECK_MSG(dst[i] == s->f16[i], "f16_n f32 0x%08lx: expected 0x%04x, got 0x%04x",
                      (unsigned long)s->in[i], s->f16[i], dst[i]);
    }
    TEST_END();
    free(src);
    free(dst);
}

/* ------------------------------------------------------------------ decoders */

/* Independent decoders: the value from sign, exponent and mantissa fields by
   ldexp, never by shifting bits into an f32. */
static float ref_decode(unsigned code, int ebits, int mbits, int has_inf)
{
    unsigned sign = (code >> (ebits + mbits)) & 1;
    unsigned e = (code >> mbits) & ((1u << ebits) - 1);
    unsigned m = code & ((1u << mbits) - 1);
    int bias = (1 << (ebits - 1)) - 1;
    double v;
    if (e == (1u << ebits) - 1 && (has_inf || m == (1u << mbits) - 1)) {
        /* IEEE-like formats reserve the top exponent; e4m3fn only S.1111.111 */
        if (has_inf && m == 0)
            v = HUGE_VAL;
        else
            v = NAN;
    } else if (e == 0) {
        v = ldexp((double)m, 1 - bias - mbits);
    } else {
        v = ldexp((double)(m + (1u << mbits)), (int)e - bias - mbits);
    }
    return (float)(sign ? -v : v);
}

static void test_decoders(void)
{
    unsigned c;

    TEST_BEGIN("bf16->f32 all 65536");
    for (c = 0; c < 65536; c++) {
        float got = wsync_bf16_to_f32((uint16_t)c);
        float want = u2f((uint32_t)c << 16);   /* bf16 is the top half of an f32 */
        CHECK_MSG(same_float(got, want), "bf16 0x%04x: expected 0x%08lx, got 0x%08lx", c,
                  (unsigned long)f2u(want), (unsigned long)f2u(got));
    }
    TEST_END();

    TEST_BEGIN("f16->f32 all 65536");
    for (c = 0; c < 65536; c++) {
        float got = wsync_f16_to_f32((uint16_t)c);
        float want = ref_decode(c, 5, 10, 1);
        CHECK_MSG(same_float(got, want), "f16 0x%04x: expected 0x%08lx, got 0x%08lx", c,
                  (unsigned long)f2u(want), (unsigned long)f2u(got));
    }
    TEST_END();

    TEST_BEGIN("e4m3fn->f32 all 256");
    for (c = 0; c < 256; c++) {
        float got = wsync_e4m3_to_f32((uint8_t)c);
        float want = ref_decode(c, 4, 3, 0);
        CHECK_MSG(same_float(got, want), "e4m3 0x%02x: expected %.9g, got %.9g", c, want, got);
    }
    CHECK(wsync_e4m3_to_f32(0x7E) == 448.0f && wsync_e4m3_to_f32(0x01) == p2(-9));
    TEST_END();

    TEST_BEGIN("e5m2->f32 all 256");
    for (c = 0; c < 256; c++) {
        float got = wsync_e5m2_to_f32((uint8_t)c);
        float want = ref_decode(c, 5, 2, 1);
        CHECK_MSG(same_float(got, want), "e5m2 0x%02x: expected %.9g, got %.9g", c, want, got);
    }
    CHECK(wsync_e5m2_to_f32(0x7B) == 57344.0f && wsync_e5m2_to_f32(0x01) == p2(-16));
    TEST_END();

    /* Every finite bf16/f16 is exact in f32, so encoding it back must give
       the same code: a cheap check over all codes the sample cannot cover. */
    TEST_BEGIN("bf16 and f16 round trip all finite codes");
    for (c = 0; c < 65536; c++) {
        if ((c & 0x7F80) != 0x7F80 || (c & 0x7F) == 0) {
            uint16_t got = wsync_f32_to_bf16(wsync_bf16_to_f32((uint16_t)c));
            CHECK_MSG(got == c, "bf16 0x%04x -> 0x%04x", c, got);
        }
        if ((c & 0x7C00) != 0x7C00 || (c & 0x3FF) == 0) {
            uint16_t got = wsync_f32_to_f16(wsync_f16_to_f32((uint16_t)c));
            CHECK_MSG(got == c, "f16 0x%04x -> 0x%04x", c, got);
        }
    }
    TEST_END();
}

/* ------------------------------------------------------------------ fp8 */

/* A format's finite non-negative values in code order (which is value order),
   plus one virtual value just past the largest: the next value the format
   would have had, 480 (code 0x7F) for e4m3fn and 65536 (code 0x7C) for e5m2.
   Rounding to it means "overflow"; its code's parity decides the tie at the
   top (464 rounds down to 448 = 0x7E; 61440 rounds up to 65536 = 0x7C). */
typedef struct fp8_fmt {
    const char *name;
    int ebits, mbits, has_inf;
    unsigned n;          /* finite codes 0..n-1; code n is the virtual value */
    double val[128];
} fp8_fmt;

static fp8_fmt E4M3, E5M2;

static void fp8_init(fp8_fmt *f, const char *name, int ebits, int mbits, int has_inf)
{
    unsigned c;
    f->name = name;
    f->ebits = ebits;
    f->mbits = mbits;
    f->has_inf = has_inf;
    for (c = 0; c < 128; c++) {
        float v = ref_decode(c, ebits, mbits, has_inf);
        if (v != v || v == HUGE_VALF) break;
        f->val[c] = v;
    }
    f->n = c;
    /* The same formula one step further, as if the exponent continued. */
    f->val[c] = ldexp((double)((c & ((1u << mbits) - 1)) + (1u << mbits)),
                      (int)(c >> mbits) - ((1 << (ebits - 1)) - 1) - mbits);
}

static const char *mode_name(wsync_fp8_mode m)
{
    return m == WSYNC_FP8_SATURATE ? "SATURATE" : "TORCH";
}

/* Brute force: the nearest of all finite values (and the virtual one), ties
   to the even code. Returns the code of |x|, n meaning overflow.
   At or past the virtual value the answer is n; below it, x lies between two
   table values a <= x <= b <= 2a (or a = 0), where the distances x - a and
   b - x are exact in double (Sterbenz), and any other value is farther by at
   least half a step, so rounding never fools the comparison. (Past the
   virtual value it would: for FLT_MAX, |x - 448| and |x - 480| round to the
   same double.) */
static unsigned fp8_nearest(const fp8_fmt *f, double ax)
{
    unsigned c, best = 0;
    double bestd;
    if (ax >= f->val[f->n]) return f->n;
    bestd = fabs(ax - f->val[0]);
    for (c = 1; c <= f->n; c++) {
        double d = fabs(ax - f->val[c]);
        if (d < bestd || (d == bestd && (c & 1) == 0)) {
            best = c;
            bestd = d;
        }
    }
    return best;
}

/* The reference result for both modes (index 0 SATURATE, 1 TORCH). */
static void ref_fp8(const fp8_fmt *f, float x, uint8_t out[2])
{
    unsigned sign = (f2u(x) >> 24) & 0x80, c;
    if (x != x) {
        out[0] = out[1] = (uint8_t)(0x7F | sign);
        return;
    }
    c = fabsf(x) == HUGE_VALF ? f->n : fp8_nearest(f, fabs((double)x));
    if (c == f->n) {
        out[0] = (uint8_t)((f->n - 1) | sign);                 /* +-max */
        out[1] = (uint8_t)((f->has_inf ? f->n : 0x7F) | sign); /* e5m2 inf, e4m3fn NaN */
    } else {
        out[0] = out[1] = (uint8_t)(c | sign);
    }
}

static uint8_t fp8_convert(const fp8_fmt *f, float x, wsync_fp8_mode mode)
{
    return f == &E4M3 ? wsync_f32_to_e4m3(x, mode) : wsync_f32_to_e5m2(x, mode);
}

static const wsync_fp8_mode MODES[2] = {WSYNC_FP8_SATURATE, WSYNC_FP8_TORCH};

/* One input, both modes, against the reference. */
static void check_fp8(const fp8_fmt *f, float x)
{
    uint8_t want[2];
    int m;
    ref_fp8(f, x, want);
    for (m = 0; m < 2; m++) {
        uint8_t got = fp8_convert(f, x, MODES[m]);
        CHECK_MSG(got == want[m], "%s %s f32 0x%08lx (%.9g): expected 0x%02x, got 0x%02x",
                  f->name, mode_name(MODES[m]), (unsigned long)f2u(x), x, want[m], got);
    }
}

static void test_fp8_format(const fp8_fmt *f)
{
    char name[96];
    unsigned c;
    long i;

    snprintf(name, sizeof name, "f32->%s midpoints, values and neighbours", f->name);
    TEST_BEGIN(name);
    for (c = 0; c <= f->n; c++) {
        /* fp8 values and their midpoints have few significant bits, so both
           are exact in f32. */
        float v = (float)f->val[c];
        float cand[6];
        int k, s;
        cand[0] = v;
        cand[1] = nextafterf(v, 0.0f);
        cand[2] = nextafterf(v, HUGE_VALF);
        k = 3;
        if (c < f->n) {
            float mid = (float)((f->val[c] + f->val[c + 1]) / 2);
            CHECK((double)mid == (f->val[c] + f->val[c + 1]) / 2);
            cand[k++] = mid;
            cand[k++] = nextafterf(mid, 0.0f);
            cand[k++] = nextafterf(mid, HUGE_VALF);
        }
        for (s = 0; s < k; s++) {
            check_fp8(f, cand[s]);
            check_fp8(f, -cand[s]);
        }
    }
    TEST_END();

    snprintf(name, sizeof name, "f32->%s specials", f->name);
    TEST_BEGIN(name);
    {
        static const uint32_t specials[] = {
            0x00000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000,
            0x7F800001, 0x7FA00000, 0x7FC00000, 0x7FFFFFFF, 0x3F800000, 0x47800000,
            0x477FFFFF, 0x43E80000, 0x43E80001, 0x43F00000, 0x43EFFFFF, 0x47700000,
            0x476FFFFF, 0x47700001};
        for (c = 0; c < sizeof specials / sizeof specials[0]; c++) {
            check_fp8(f, u2f(specials[c]));
            check_fp8(f, u2f(specials[c] | 0x80000000u));
        }
    }
    TEST_END();

    snprintf(name, sizeof name, "f32->%s random patterns", f->name);
    TEST_BEGIN(name);
    for (i = 0; i < 1000000; i++) {
        uint64_t r = rng_next();
        check_fp8(f, u2f((uint32_t)r));
        /* and one in the format's own range, where the rounding happens:
           exponents from the smallest subnormal to past the largest value */
        {
            int lo = f == &E4M3 ? -12 : -19, hi = f == &E4M3 ? 10 : 17;
            int e = lo + (int)((r >> 32) % (uint64_t)(hi - lo + 1));
            float x = ldexpf(1.0f + (float)((r >> 40) & 0xFFFFFF) * p2(-24), e);
            check_fp8(f, (r >> 39) & 1 ? -x : x);
        }
    }
    TEST_END();
}

/* Hand-picked cases; the expectations follow the header's mode rules and
   agree with c10's Float8_e4m3fn/Float8_e5m2 code for TORCH. */
static void test_fp8_famous(void)
{
    const wsync_fp8_mode S = WSYNC_FP8_SATURATE, T = WSYNC_FP8_TORCH;

    TEST_BEGIN("fp8 famous values");
    CHECK_EQ_INT(wsync_f32_to_e4m3(1.0f, S), 0x38);
    CHECK_EQ_INT(wsync_f32_to_e4m3(-2.0f, T), 0xC0);
    CHECK_EQ_INT(wsync_f32_to_e4m3(448.0f, T), 0x7E);
    CHECK_EQ_INT(wsync_f32_to_e4m3(464.0f, T), 0x7E);          /* tie, 0x7E is even */
    CHECK_EQ_INT(wsync_f32_to_e4m3(nextafterf(464.0f, 500.0f), T), 0x7F);
    CHECK_EQ_INT(wsync_f32_to_e4m3(nextafterf(464.0f, 500.0f), S), 0x7E);
    CHECK_EQ_INT(wsync_f32_to_e4m3(-1000.0f, T), 0xFF);
    CHECK_EQ_INT(wsync_f32_to_e4m3(-1000.0f, S), 0xFE);
    CHECK_EQ_INT(wsync_f32_to_e4m3(HUGE_VALF, T), 0x7F);
    CHECK_EQ_INT(wsync_f32_to_e4m3(HUGE_VALF, S), 0x7E);
    CHECK_EQ_INT(wsync_f32_to_e4m3(-HUGE_VALF, S), 0xFE);
    CHECK_EQ_INT(wsync_f32_to_e4m3(NAN, S), 0x7F);
    CHECK_EQ_INT(wsync_f32_to_e4m3(u2f(0xFFC00000), T), 0xFF);
    CHECK_EQ_INT(wsync_f32_to_e4m3(u2f(0x7F800001), T), 0x7F);
    CHECK_EQ_INT(wsync_f32_to_e4m3(p2(-9), S), 0x01);          /* smallest subnormal */
    CHECK_EQ_INT(wsync_f32_to_e4m3(p2(-10), S), 0x00);         /* tie to even: zero */
    CHECK_EQ_INT(wsync_f32_to_e4m3(nextafterf(p2(-10), 1.0f), S), 0x01);
    CHECK_EQ_INT(wsync_f32_to_e4m3(-p2(-10), T), 0x80);        /* signed zero */
    CHECK_EQ_INT(wsync_f32_to_e4m3(7.5f * p2(-9), T), 0x08);   /* tie 0x07/0x08: up to min normal */
    CHECK_EQ_INT(wsync_f32_to_e4m3(6.5f * p2(-9), T), 0x06);   /* tie 0x06/0x07: down */
    CHECK_EQ_INT(wsync_f32_to_e5m2(1.0f, S), 0x3C);
    CHECK_EQ_INT(wsync_f32_to_e5m2(57344.0f, T), 0x7B);
    CHECK_EQ_INT(wsync_f32_to_e5m2(61440.0f, T), 0x7C);        /* tie, rounds to even = inf */
    CHECK_EQ_INT(wsync_f32_to_e5m2(61440.0f, S), 0x7B);
    CHECK_EQ_INT(wsync_f32_to_e5m2(nextafterf(61440.0f, 0.0f), T), 0x7B);
    CHECK_EQ_INT(wsync_f32_to_e5m2(-HUGE_VALF, T), 0xFC);
    CHECK_EQ_INT(wsync_f32_to_e5m2(-HUGE_VALF, S), 0xFB);
    CHECK_EQ_INT(wsync_f32_to_e5m2(FLT_MAX, S), 0x7B);
    CHECK_EQ_INT(wsync_f32_to_e5m2(NAN, T), 0x7F);
    CHECK_EQ_INT(wsync_f32_to_e5m2(u2f(0xFFC00000), S), 0xFF);
    CHECK_EQ_INT(wsync_f32_to_e5m2(u2f(0xFF800001), T), 0xFF);
    CHECK_EQ_INT(wsync_f32_to_e5m2(p2(-16), S), 0x01);
    CHECK_EQ_INT(wsync_f32_to_e5m2(p2(-17), S), 0x00);
    CHECK_EQ_INT(wsync_f32_to_e5m2(1.5f * p2(-16), S), 0x02);  /* tie 0x01/0x02: even */
    TEST_END();
}

/* ------------------------------------------------------------------ famous */

/* Expected bits from torch 1.13 x.to(torch.bfloat16) and numpy 1.24
   x.astype(np.float16), except NaN, which follows wsync's documented rule
   (torch gives 0xFFFF for every NaN; numpy keeps the payload). */
static void test_famous(void)
{
    static const struct {
        uint32_t in;
        uint16_t bf16, f16;
    } cases[] = {
        {0x3F800000, 0x3F80, 0x3C00}, /* 1.0 */
        {0x3F808000, 0x3F80, 0x3C04}, /* 1.00390625: bf16 tie, down to even */
        {0x3F818000, 0x3F82, 0x3C0C}, /* 1.01171875: bf16 tie, up to even */
        {0x7F7FFFFF, 0x7F80, 0x7C00}, /* FLT_MAX: bf16 rounds up to inf */
        {0x7F7F8000, 0x7F80, 0x7C00}, /* bf16 tie above the largest 0x7F7F: inf */
        {0x7F7F7FFF, 0x7F7F, 0x7C00}, /* just below: largest finite bf16 */
        {0x000116C2, 0x0001, 0x0000}, /* 1e-40f: bf16 subnormal kept */
        {0x00000001, 0x0000, 0x0000}, /* smallest f32 subnormal */
        {0x80000000, 0x8000, 0x8000}, /* -0.0 */
        {0x7F800000, 0x7F80, 0x7C00}, /* inf */
        {0xFF800000, 0xFF80, 0xFC00}, /* -inf */
        {0x3DCCCCCD, 0x3DCD, 0x2E66}, /* 0.1f */
        {0xC0490FD0, 0xC049, 0xC248}, /* -3.14159f */
        {0x477FE000, 0x4780, 0x7BFF}, /* 65504: largest f16 */
        {0x477FF000, 0x4780, 0x7C00}, /* 65520: f16 tie, to even = inf */
        {0x477FEFFF, 0x4780, 0x7BFF}, /* just below 65520 */
        {0x33000000, 0x3300, 0x0000}, /* 2^-25: f16 tie with zero, to even */
        {0x33000001, 0x3300, 0x0001}, /* just above: smallest f16 subnormal */
        {0x33800000, 0x3380, 0x0001}, /* 2^-24 */
        {0x7FC00000, 0x7FC0, 0x7E00}, /* NaN */
        {0xFFC00000, 0xFFC0, 0xFE00}, /* -NaN */
        {0x7F800001, 0x7FC0, 0x7E00}, /* signalling NaN, payload lost in bf16 */
        {0x7FA00000, 0x7FC0, 0x7E00}, /* signalling NaN numpy keeps as f16 sNaN */
        {0xFFFFFFFF, 0xFFC0, 0xFE00}, /* all ones */
    };
    size_t i;
    TEST_BEGIN("famous values");
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t b = wsync_f32_to_bf16(u2f(cases[i].in));
        uint16_t h = wsync_f32_to_f16(u2f(cases[i].in));
        CHECK_MSG(b == cases[i].bf16, "bf16 of f32 0x%08lx: expected 0x%04x, got 0x%04x",
                  (unsigned long)cases[i].in, cases[i].bf16, b);
        CHECK_MSG(h == cases[i].f16, "f16 of f32 0x%08lx: expected 0x%04x, got 0x%04x",
                  (unsigned long)cases[i].in, cases[i].f16, h);
    }
    CHECK(f2u(1e-40f) == 0x000116C2);   /* the literal above is 1e-40f */
    CHECK(f2u(FLT_MAX) == 0x7F7FFFFF);
    TEST_END();
}

/* ------------------------------------------------------------------ bulk */

/* Inputs that cover every kind of float: random patterns, some specials. */
static float bulk_input(size_t i)
{
    static const uint32_t specials[] = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000,
                                        0x7FC00000, 0xFF800001, 0x00000001, 0x3F808000,
                                        0x477FF000, 0x43E80000, 0x47700000, 0x7F7FFFFF};
    uint64_t r = rng_next();
    if (i % 5 == 0) return u2f(specials[(r >> 8) % (sizeof specials / sizeof specials[0])]);
    if (i % 5 == 1) return ldexpf((float)(r & 0xFFFFFF), (int)((r >> 32) % 48) - 54);
    return u2f((uint32_t)r);
}

#define BULK_MAX 1003

static void test_bulk(void)
{
    /* Index 1 onwards: src and dst sit off any 16-byte boundary a vector loop
       might assume, and element 0 and n+1 are canaries the call must not touch. */
    static float src[BULK_MAX + 2], dstf[BULK_MAX + 2];
    static uint16_t src16[BULK_MAX + 2], dst16[BULK_MAX + 2];
    static uint8_t src8[BULK_MAX + 2], dst8[BULK_MAX + 2];
    static const size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 17, 33, BULK_MAX};
    size_t li, i;
    int m;
    const float canaryf = u2f(0x12345678);
    const uint16_t canary16 = 0xA5A5;
    const uint8_t canary8 = 0x5A;

    TEST_BEGIN("bulk _n equals scalar");
    for (li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        for (i = 0; i < BULK_MAX + 2; i++) {
            src[i] = bulk_input(i);
            src16[i] = (uint16_t)rng_next();
            src8[i] = (uint8_t)rng_next();
        }
        /* make sure NaN, inf, zero and subnormal codes appear in the short arrays too */
        if (n >= 7) {
            src16[1] = 0x7FC1; src16[2] = 0xFC00; src16[3] = 0x8000; src16[4] = 0x0001;
            src8[1] = 0x7F; src8[2] = 0xFC; src8[3] = 0x80; src8[4] = 0x01;
        }

/* Fill dst with the canary, run the bulk call on [1, n], then demand the
   canaries intact and every element equal to the scalar function's. */
#define BULK_CHECK(call, dst, canary, scalar_expr, eq, what)                              \
    do {                                                                                  \
        for (i = 0; i < BULK_MAX + 2; i++) dst[i] = canary;                               \
        call;                                                                             \
        CHECK_MSG(memcmp(&dst[0], &canary, sizeof canary) == 0 &&                         \
                      memcmp(&dst[n + 1], &canary, sizeof canary) == 0,                   \
                  "%s n=%lu wrote outside [1, n]", what, (unsigned long)n);              \
        for (i = 1; i <= n; i++)                                                          \
            CHECK_MSG(eq(dst[i], scalar_expr), "%s n=%lu index %lu differs from scalar",   \
                      what, (unsigned long)n, (unsigned long)i);                          \
    } while (0)
#define EQ_INT(a, b) ((a) == (b))

        BULK_CHECK(wsync_f32_to_bf16_n(src + 1, dst16 + 1, n), dst16, canary16,
                   wsync_f32_to_bf16(src[i]), EQ_INT, "f32_to_bf16_n");
        BULK_CHECK(wsync_f32_to_f16_n(src + 1, dst16 + 1, n), dst16, canary16,
                   wsync_f32_to_f16(src[i]), EQ_INT, "f32_to_f16_n");
        BULK_CHECK(wsync_bf16_to_f32_n(src16 + 1, dstf + 1, n), dstf, canaryf,
                   wsync_bf16_to_f32(src16[i]), same_float, "bf16_to_f32_n");
        BULK_CHECK(wsync_f16_to_f32_n(src16 + 1, dstf + 1, n), dstf, canaryf,
                   wsync_f16_to_f32(src16[i]), same_float, "f16_to_f32_n");
        BULK_CHECK(wsync_e4m3_to_f32_n(src8 + 1, dstf + 1, n), dstf, canaryf,
                   wsync_e4m3_to_f32(src8[i]), same_float, "e4m3_to_f32_n");
        BULK_CHECK(wsync_e5m2_to_f32_n(src8 + 1, dstf + 1, n), dstf, canaryf,
                   wsync_e5m2_to_f32(src8[i]), same_float, "e5m2_to_f32_n");
        for (m = 0; m < 2; m++) {
            BULK_CHECK(wsync_f32_to_e4m3_n(src + 1, dst8 + 1, n, MODES[m]), dst8, canary8,
                       wsync_f32_to_e4m3(src[i], MODES[m]), EQ_INT, "f32_to_e4m3_n");
            BULK_CHECK(wsync_f32_to_e5m2_n(src + 1, dst8 + 1, n, MODES[m]), dst8, canary8,
                       wsync_f32_to_e5m2(src[i], MODES[m]), EQ_INT, "f32_to_e5m2_n");
        }
#undef BULK_CHECK
#undef EQ_INT
    }
    TEST_END();
}

int main(void)
{
    sample s;

    fp8_init(&E4M3, "e4m3fn", 4, 3, 0);
    fp8_init(&E5M2, "e5m2", 5, 2, 1);
    TEST_BEGIN("fp8 reference tables");
    CHECK_EQ_INT(E4M3.n, 0x7F);
    CHECK(E4M3.val[0x7E] == 448.0 && E4M3.val[0x7F] == 480.0 && E4M3.val[1] == p2(-9));
    CHECK_EQ_INT(E5M2.n, 0x7C);
    CHECK(E5M2.val[0x7B] == 57344.0 && E5M2.val[0x7C] == 65536.0 && E5M2.val[1] == p2(-16));
    TEST_END();

    TEST_BEGIN("oracle sample loads");
    CHECK(load_sample(&s));
    TEST_END();
    test_sample(&s);
    free_sample(&s);

    test_decoders();
    test_famous();
    test_fp8_famous();
    test_fp8_format(&E4M3);
    test_fp8_format(&E5M2);
    test_bulk();
    return check_summary();
}
