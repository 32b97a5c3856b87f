/* test_exhaustive.c - every one of the 2^32 f32 bit patterns through the
   f32 -> bf16/f16/fp8 conversions (`make test-exhaustive`, built with -O3).

   - bf16 and f16: per-chunk digests of wsync's results are compared with
     tests/fixtures/data/{bf16,f16}_exhaustive_digests.bin, the same digests of
     torch's x.to(torch.bfloat16) and numpy's x.astype(np.float16) (NaN inputs
     following wsync's rule) written by tests/fixtures/gen_convert_oracle.py. On a
     mismatch the first failing chunk is rescanned against a plain rint-based
     reference to name the first input that differs.
   - e4m3fn and e5m2, SATURATE and TORCH: each result against a reference
     that shares nothing with wsync's bit arithmetic: a binary search over the
     sorted table of the format's values, ties decided by exact midpoints.

   usage: test_exhaustive [FIRST_CHUNK [COUNT]]   (chunks of 2^24 patterns,
   256 in all; a partial run is for debugging). WSYNC_THREADS sets the
   thread count (default: online CPUs); WSYNC_TEST_DATA the data directory
   (default tests/fixtures/data, relative to the repository root). Progress goes to
   stdout every 16 chunks. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, sysconf under -std=c99 */
#endif

#define WSYNC_IMPLEMENTATION
#include "wsync.h"

#include "check.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_BITS 24
#define N_CHUNKS 256
#define MAX_THREADS 64

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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ digest */

/* Must match digest() in tests/fixtures/gen_convert_oracle.py: the sum, mod 2^64, of
   the splitmix64 finaliser of ((u << 16) | out(u)) + golden ratio. The
   finaliser is a bijection, so any wrong output changes a chunk's digest
   (except with probability ~2^-64), and the sum lets threads and loops visit
   inputs in any order. */
static uint64_t digest_term(uint32_t u, uint16_t out)
{
    uint64_t z = (((uint64_t)u << 16) | out) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t expected_bf16[N_CHUNKS], expected_f16[N_CHUNKS];

static int load_digests(const char *name, uint64_t *out)
{
    const char *dir = getenv("WSYNC_TEST_DATA");
    char path[1024];
    unsigned char buf[16 + 8 * N_CHUNKS + 1];
    size_t got, i;
    FILE *f;
    if (!dir || !*dir) dir = "tests/fixtures/data";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "rb");
    if (!f) {
        printf("  cannot open %s (run from the repository root or set WSYNC_TEST_DATA)\n", path);
        return 0;
    }
    got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    /* magic, chunk count, log2 chunk size; layout in gen_convert_oracle.py */
    if (got != 16 + 8 * N_CHUNKS || memcmp(buf, "WSCVTD01", 8) != 0 || buf[8] != N_CHUNKS % 256 ||
        buf[9] != N_CHUNKS / 256 || buf[10] || buf[11] || buf[12] != CHUNK_BITS || buf[13] ||
        buf[14] || buf[15]) {
        printf("  %s: bad header or size\n", path);
        return 0;
    }
    for (i = 0; i < N_CHUNKS; i++) {
        const unsigned char *p = buf + 16 + 8 * i;
        uint64_t v = 0;
        int k;
        for (k = 7; k >= 0; k--) v = (v << 8) | p[k];
        out[i] = v;
    }
    return 1;
}

/* ------------------------------------------------------------------ references */

/* f32 -> a 16-bit IEEE-style format (bf16: 8/7, f16: 5/10) by arithmetic:
   scale |x| so the kept bits are the integer part, rint (nearest even in the
   default rounding mode), rebuild. Only used to locate a digest mismatch. */
static uint16_t ref_narrow(float x, int ebits, int mbits)
{
    uint16_t sign = (uint16_t)((f2u(x) >> 16) & 0x8000u);
    int bias = (1 << (ebits - 1)) - 1, e;
    uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
    double m, r;
    if (x != x) return (uint16_t)(sign | inf | (1u << (mbits - 1))); /* wsync NaN rule */
    m = fabs((double)x);
    if (m == HUGE_VAL) return (uint16_t)(sign | inf);
    if (m == 0) return sign;
    e = ilogb(m);
    if (e < 1 - bias) e = 1 - bias;           /* subnormal: fixed quantum */
    r = rint(ldexp(m, mbits - e));            /* exact scaling, then round */
    if (r == ldexp(1.0, mbits + 1)) {         /* rounded up into the next binade */
        r /= 2;
        e++;
    }
    if (e > bias) return (uint16_t)(sign | inf);
    if (r < ldexp(1.0, mbits)) return (uint16_t)(sign | (uint16_t)r); /* subnormal */
    return (uint16_t)(sign | ((unsigned)(e + bias) << mbits) | ((unsigned)r - (1u << mbits)));
}

/* fp8: a sorted table of the format's non-negative finite values, val[n]
   the value one step past the largest (480 for e4m3fn, 65536 for e5m2,
   whose code n = 0x7F / 0x7C decides the tie at the top), padded with +inf
   so a branch-free binary search needs no bounds. mid[k] is the exact
   midpoint of val[k] and val[k+1] (few significant bits: exact in double). */
typedef struct fp8_ref {
    const char *name;
    unsigned n;
    int has_inf;
    double val[129];
    double mid[128];
} fp8_ref;

static fp8_ref E4M3, E5M2;

static void fp8_ref_init(fp8_ref *f, const char *name, int ebits, int mbits, int has_inf)
{
    int bias = (1 << (ebits - 1)) - 1;
    unsigned c, top = has_inf ? ((1u << ebits) - 1) << mbits : 0x7Fu;
    f->name = name;
    f->has_inf = has_inf;
    f->n = top;
    /* value of code c from its fields; c == top is the virtual value */
    for (c = 0; c <= top; c++) {
        unsigned e = c >> mbits, m = c & ((1u << mbits) - 1);
        f->val[c] = e == 0 ? ldexp((double)m, 1 - bias - mbits)
                           : ldexp((double)(m + (1u << mbits)), (int)e - bias - mbits);
    }
    for (; c < 129; c++) f->val[c] = HUGE_VAL;
    for (c = 0; c < top; c++) f->mid[c] = (f->val[c] + f->val[c + 1]) / 2;
}

/* Both modes' expected codes for x: out[0] SATURATE, out[1] TORCH. */
static void ref_fp8(const fp8_ref *f, uint32_t u, uint8_t out[2])
{
    unsigned sign = (u >> 24) & 0x80u, k = 0, step;
    double m;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        out[0] = out[1] = (uint8_t)(0x7Fu | sign);
        return;
    }
    m = fabs((double)u2f(u));
    /* largest k with val[k] <= m (val[0] = 0 <= m) */
    for (step = 64; step; step >>= 1)
        k += f->val[k + step] <= m ? step : 0;
    if (k < f->n && (m > f->mid[k] || (m == f->mid[k] && (k & 1)))) k++;
    if (k >= f->n) {
        out[0] = (uint8_t)((f->n - 1) | sign);               /* +-max */
        out[1] = (uint8_t)((f->has_inf ? f->n : 0x7Fu) | sign); /* inf, or NaN */
    } else {
        out[0] = out[1] = (uint8_t)(k | sign);
    }
}

/* ------------------------------------------------------------------ workers */

enum { FP8_E4M3_SAT, FP8_E4M3_TORCH, FP8_E5M2_SAT, FP8_E5M2_TORCH, FP8_CASES };
static const char *const fp8_case_name[FP8_CASES] = {
    "f32->e4m3fn SATURATE all 2^32 vs table reference",
    "f32->e4m3fn TORCH all 2^32 vs table reference",
    "f32->e5m2 SATURATE all 2^32 vs table reference",
    "f32->e5m2 TORCH all 2^32 vs table reference"};

static struct {
    pthread_mutex_t lock;
    unsigned next, end, done, total;
    double t0;
    uint64_t got_bf16[N_CHUNKS], got_f16[N_CHUNKS];
    uint64_t fp8_fail[FP8_CASES];
    uint32_t fp8_first[FP8_CASES]; /* smallest failing input */
    uint8_t fp8_first_want[FP8_CASES], fp8_first_got[FP8_CASES];
} W = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, {0}, {0}, {0}, {0}, {0}, {0}};

static void run_chunk(unsigned c)
{
    uint32_t u = (uint32_t)c << CHUNK_BITS, last = u + ((1u << CHUNK_BITS) - 1);
    uint64_t dbf = 0, dh = 0, fails[FP8_CASES] = {0};
    uint32_t first[FP8_CASES] = {0};
    uint8_t fwant[FP8_CASES] = {0}, fgot[FP8_CASES] = {0};
    int k;
    for (;; u++) {
        float x = u2f(u);
        uint8_t want[2], got[FP8_CASES];
        dbf += digest_term(u, wsync_f32_to_bf16(x));
        dh += digest_term(u, wsync_f32_to_f16(x));
        got[FP8_E4M3_SAT] = wsync_f32_to_e4m3(x, WSYNC_FP8_SATURATE);
        got[FP8_E4M3_TORCH] = wsync_f32_to_e4m3(x, WSYNC_FP8_TORCH);
        got[FP8_E5M2_SAT] = wsync_f32_to_e5m2(x, WSYNC_FP8_SATURATE);
        got[FP8_E5M2_TORCH] = wsync_f32_to_e5m2(x, WSYNC_FP8_TORCH);
        ref_fp8(&E4M3, u, want);
        if (got[0] != want[0] || got[1] != want[1]) {
            for (k = 0; k < 2; k++)
                if (got[k] != want[k] && !fails[k]++) {
                    first[k] = u, fwant[k] = want[k], fgot[k] = got[k];
                }
        }
        ref_fp8(&E5M2, u, want);
        if (got[2] != want[0] || got[3] != want[1]) {
            for (k = 0; k < 2; k++)
                if (got[2 + k] != want[k] && !fails[2 + k]++) {
                    first[2 + k] = u, fwant[2 + k] = want[k], fgot[2 + k] = got[2 + k];
                }
        }
        if (u == last) break;
    }

    pthread_mutex_lock(&W.lock);
    W.got_bf16[c] = dbf;
    W.got_f16[c] = dh;
    for (k = 0; k < FP8_CASES; k++) {
        if (fails[k] && (!W.fp8_fail[k] || first[k] < W.fp8_first[k])) {
            W.fp8_first[k] = first[k];
            W.fp8_first_want[k] = fwant[k];
            W.fp8_first_got[k] = fgot[k];
        }
        W.fp8_fail[k] += fails[k];
    }
    W.done++;
    if (W.done % 16 == 0 || W.done == W.total) {
        printf("exhaustive: %u/%u chunks, %.0f s\n", W.done, W.total, now_s() - W.t0);
        fflush(stdout);
    }
    pthread_mutex_unlock(&W.lock);
}

static void *worker(void *arg)
{
    (void)arg;
    for (;;) {
        unsigned c;
        pthread_mutex_lock(&W.lock);
        c = W.next < W.end ? W.next++ : N_CHUNKS;
        pthread_mutex_unlock(&W.lock);
        if (c == N_CHUNKS) return NULL;
        run_chunk(c);
    }
}

/* A digest mismatch says which chunk, not which input: rescan the chunk with
   the plain reference and name the first input where wsync differs. If the
   reference's own digest differs from the oracle's too, say so: then the
   reference, not only wsync, disagrees with torch/numpy there. */
static void locate(const char *what, unsigned c, const uint64_t *expected, int is_bf16)
{
    uint32_t u = (uint32_t)c << CHUNK_BITS, last = u + ((1u << CHUNK_BITS) - 1);
    uint64_t dref = 0;
    int reported = 0;
    for (;; u++) {
        float x = u2f(u);
        uint16_t want = is_bf16 ? ref_narrow(x, 8, 7) : ref_narrow(x, 5, 10);
        uint16_t got = is_bf16 ? wsync_f32_to_bf16(x) : wsync_f32_to_f16(x);
        dref += digest_term(u, want);
        if (got != want && reported < 5) {
            printf("  %s: f32 0x%08lx (%.9g): reference 0x%04x, wsync 0x%04x\n", what,
                   (unsigned long)u, x, want, got);
            reported++;
        }
        if (u == last) break;
    }
    printf("  %s: chunk %u: the plain reference %s the oracle's digest\n", what, c,
           dref == expected[c] ? "matches" : "does NOT match");
}

static void check_digests(const char *name, const uint64_t *got, const uint64_t *expected,
                          unsigned first, unsigned end, int is_bf16)
{
    unsigned c, bad = 0, first_bad = 0;
    TEST_BEGIN(name);
    for (c = first; c < end; c++) {
        if (got[c] != expected[c] && !bad++) first_bad = c;
        CHECK_MSG(got[c] == expected[c], "chunk %u (f32 0x%08lx..0x%08lx): digest 0x%016llx, oracle 0x%016llx",
                  c, (unsigned long)c << CHUNK_BITS, ((unsigned long)c << CHUNK_BITS) | 0xFFFFFFul,
                  (unsigned long long)got[c], (unsigned long long)expected[c]);
    }
    if (bad) {
        printf("  %s: %u of %u chunks differ; first mismatching inputs of chunk %u:\n", name, bad,
               end - first, first_bad);
        locate(is_bf16 ? "bf16" : "f16", first_bad, expected, is_bf16);
    }
    TEST_END();
}

int main(int argc, char **argv)
{
    pthread_t th[MAX_THREADS];
    long nthreads;
    const char *env = getenv("WSYNC_THREADS");
    unsigned first = 0, count = N_CHUNKS, k;
    int ok_bf16, ok_f16;
    int i;

    if (argc > 1) first = (unsigned)strtoul(argv[1], NULL, 0);
    if (argc > 2) count = (unsigned)strtoul(argv[2], NULL, 0);
    if (first >= N_CHUNKS) first = N_CHUNKS - 1;
    if (count > N_CHUNKS - first) count = N_CHUNKS - first;
    nthreads = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (nthreads < 1) nthreads = 1;
    if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;

    fp8_ref_init(&E4M3, "e4m3fn", 4, 3, 0);
    fp8_ref_init(&E5M2, "e5m2", 5, 2, 1);

    TEST_BEGIN("reference tables and digest files");
    CHECK(E4M3.n == 0x7F && E4M3.val[0x7E] == 448.0 && E4M3.val[0x7F] == 480.0 &&
          E4M3.mid[0x7E] == 464.0);
    CHECK(E5M2.n == 0x7C && E5M2.val[0x7B] == 57344.0 && E5M2.val[0x7C] == 65536.0 &&
          E5M2.mid[0x7B] == 61440.0);
    ok_bf16 = load_digests("bf16_exhaustive_digests.bin", expected_bf16);
    ok_f16 = load_digests("f16_exhaustive_digests.bin", expected_f16);
    CHECK(ok_bf16 && ok_f16);
    TEST_END();

    printf("exhaustive: chunks %u..%u of %u (2^%d patterns each), %ld threads\n", first,
           first + count - 1, N_CHUNKS, CHUNK_BITS, nthreads);
    fflush(stdout);
    W.next = first;
    W.end = first + count;
    W.total = count;
    W.t0 = now_s();
    for (i = 0; i < nthreads; i++)
        if (pthread_create(&th[i], NULL, worker, NULL) != 0) break;
    if (i == 0) worker(NULL); /* no threads at all: do it here */
    nthreads = i;
    for (i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    printf("exhaustive: done in %.1f s\n", now_s() - W.t0);

    if (ok_bf16) check_digests("f32->bf16 all 2^32 vs torch digests", W.got_bf16, expected_bf16,
                               first, first + count, 1);
    if (ok_f16) check_digests("f32->f16 all 2^32 vs numpy digests", W.got_f16, expected_f16, first,
                              first + count, 0);
    for (k = 0; k < FP8_CASES; k++) {
        TEST_BEGIN(fp8_case_name[k]);
        CHECK_MSG(W.fp8_fail[k] == 0,
                  "%llu inputs differ; the smallest, f32 0x%08lx (%.9g): reference 0x%02x, wsync 0x%02x",
                  (unsigned long long)W.fp8_fail[k], (unsigned long)W.fp8_first[k],
                  u2f(W.fp8_first[k]), W.fp8_first_want[k], W.fp8_first_got[k]);
        TEST_END();
    }
    return check_summary();
}
