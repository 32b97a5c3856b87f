/* bench_probe: AUTO's choice of SIMD paths (wsync_diff_impl's comment has
   the rule), and how far the measurement behind it sits from changing it.

   usage: bench_probe [PASSES]     the CPU head (bench/bench_cpu.h, with the
                                   choice and its time at first use), then
                                   PASSES (default 3) more passes of the
                                   probe: per op and path its median ticks
                                   and the median of the per-round ratios
                                   widest/path, against the 1.4 a narrower
                                   path must reach, and each pass's pick
          bench_probe --choice     only "diff=X digest=Y" (bench/bench_probe.sh
                                   runs it in many fresh processes)
          bench_probe --head NAME  only the head, under NAME: for the benches that
                                   are scripts (bench/bench_fanout.sh,
                                   bench_schedule.sh, bench_python.py); its
                                   AUTO line is this process's choice, the
                                   same as theirs where the choice is
                                   deterministic (make bench-probe)
          bench_probe --hog SECS   load for that long: memcpy over 64 MiB, to
                                   run beside the probes (memory and a core)
          bench_probe --align [MIB [PAIRS]]
                                   the diff (2-byte elements, 1% changed) and
                                   the digest by every path and by AUTO at
                                   data offsets 0, 8 and 16 (mod 64): MIB-MiB
                                   images (default 1137, qwen3-0.6b's 1.19
                                   GB), called on 64 MiB pieces in turn, each
                                   call right after a memcmp of two equal
                                   copies of the same piece at the same
                                   offset; per path the median and quartiles
                                   of PAIRS (default 16) such ratios (the
                                   digest per byte: memcmp reads two
                                   images), in thread CPU time (a core shared
                                   with other work moves wall time far more),
                                   and AUTO over the best path (the path of
                                   the highest median): the median of the
                                   rounds' ratios of AUTO's figure to that
                                   path's in the same round, with its
                                   quartiles (paired within a round, so that
                                   a spell of load hits both). Then two
                                   loops that only load the digest's bytes
                                   (no arithmetic, no software prefetch):
                                   what one core streams at that offset

   x86 only past the head: elsewhere there is no measurement to show. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "bench_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int hog(double secs)
{
    size_t n = (size_t)64 << 20;
    char *a = (char *)malloc(n), *b = (char *)malloc(n);
    double t0 = bench_cpu__now();
    volatile char sink = 0;
    if (!a || !b) return 1;
    memset(a, 1, n);
    while (bench_cpu__now() - t0 < secs) {
        memcpy(b, a, n);
        memcpy(a, b, n);
        sink = (char)(sink + a[n / 2]);
    }
    free(a);
    free(b);
    return 0;
}

#if WSYNC__X86
static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static int cmp_dbl(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static int passes(int n)
{
    static const char *const ops[2] = {"diff", "digest"};
    wsync_impl cand[4];
    int nc = wsync__probe_candidates(cand), in[2][4], p, op, k, r;
    volatile uint64_t sink = 0;
    uint8_t *mem = (uint8_t *)malloc(WSYNC__PROBE_MEM), *a, *b;
    uint32_t *pos;
    if (!mem) return 1;
    wsync__probe_images(mem, &a, &b, &pos);
    wsync__probe_filter(cand, nc, a, b, pos, &sink, in);
    printf("bench_probe: %d passes of %d rounds, %u KiB images from memory at data offsets 8 and 16 (mod 64, the "
           "rounds alternating); a narrower path needs widest/path >= %.2f in the median round\n",
           n, WSYNC__PROBE_ROUNDS, WSYNC__PROBE_LARGE / 1024u, (double)WSYNC__PROBE_WIN_NUM / WSYNC__PROBE_WIN_DEN);
    for (p = 0; p < n; p++) {
        uint64_t t[2][4][WSYNC__PROBE_ROUNDS];
        wsync__probe_pass(cand, nc, in, a, b, pos, &sink, t);
        for (op = 0; op < 2; op++) {
            int pick = wsync__simd_rule(nc, in[op], (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t[op]);
            printf("bench_probe: pass %d %-6s", p + 1, ops[op]);
            for (k = 0; k < nc; k++) {
                uint64_t s[WSYNC__PROBE_ROUNDS];
                double q[WSYNC__PROBE_ROUNDS];
                if (!in[op][k]) {
                    printf("  %s (not timed: 1.5x behind in L2)", wsync_impl_name(cand[k]));
                    continue;
                }
                for (r = 0; r < WSYNC__PROBE_ROUNDS; r++) {
                    s[r] = t[op][k][r];
                    q[r] = (double)t[op][0][r] / (double)t[op][k][r];
                }
                qsort(s, WSYNC__PROBE_ROUNDS, sizeof s[0], cmp_u64);
                qsort(q, WSYNC__PROBE_ROUNDS, sizeof q[0], cmp_dbl);
                if (k == 0)
                    printf("  %s %llu", wsync_impl_name(cand[k]), (unsigned long long)s[WSYNC__PROBE_ROUNDS / 2]);
                else
                    printf("  %s %llu (%.3f)", wsync_impl_name(cand[k]), (unsigned long long)s[WSYNC__PROBE_ROUNDS / 2],
                           q[WSYNC__PROBE_ROUNDS / 2]);
            }
            printf("  -> %s\n", wsync_impl_name(cand[pick]));
        }
    }
    free(mem);
    (void)sink;
    return 0;
}
#endif

#if WSYNC__X86
/* ---- bench_probe --align ---- */

static double thread_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The loads of the digest alone at p (n bytes), xored together: 64 bytes a
   step as two 256-bit loads, into a 512-bit register (WSYNC__LOAD512) or
   two 256-bit ones. No software prefetch. */
WSYNC__AVX512 static uint64_t loads_avx512(const uint8_t *p, size_t n)
{
    __m512i x = _mm512_setzero_si512(), y = _mm512_setzero_si512();
    uint64_t o[8];
    size_t i;
    for (i = 0; i + 128 <= n; i += 128) {
        x = _mm512_xor_si512(x, WSYNC__LOAD512(p + i));
        y = _mm512_xor_si512(y, WSYNC__LOAD512(p + i + 64));
    }
    _mm512_storeu_si512((void *)o, _mm512_xor_si512(x, y));
    return o[0] ^ o[7];
}

WSYNC__AVX2 static uint64_t loads_avx2(const uint8_t *p, size_t n)
{
    __m256i x = _mm256_setzero_si256(), y = _mm256_setzero_si256();
    uint64_t o[4];
    size_t i;
    for (i = 0; i + 64 <= n; i += 64) {
        x = _mm256_xor_si256(x, _mm256_loadu_si256((const __m256i *)(const void *)(p + i)));
        y = _mm256_xor_si256(y, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 32)));
    }
    _mm256_storeu_si256((__m256i *)(void *)o, _mm256_xor_si256(x, y));
    return o[0] ^ o[3];
}

#define ALIGN_PIECE ((size_t)64 << 20)
#define ALIGN_COLS 8 /* scalar sse2 avx2 avx512 AUTO, loads avx512, loads avx2, (unused) */

/* One timed call: op 0 the diff, 1 the digest, 2 the loads alone; col
   the path (0..3 scalar..avx512, 4 AUTO: wsync_diff / wsync_digest) or,
   for op 2, 0 AVX-512 and 1 AVX2. Returns seconds of thread CPU time, or
   -1 where the CPU lacks the path. */
static double align_call(int op, int col, const uint8_t *a, const uint8_t *b, size_t bytes, uint32_t *pos,
                         volatile uint64_t *sink)
{
    static const wsync_impl path[4] = {WSYNC_IMPL_SCALAR, WSYNC_IMPL_SSE2, WSYNC_IMPL_AVX2, WSYNC_IMPL_AVX512};
    double t0;
    int ok = 1;
    if (op == 2 && !(col == 0 ? wsync__has_avx512bw() : wsync__has_avx2())) return -1;
    if (op < 2 && col < 4) {
        if (op == 0)
            (void)wsync_diff_using(path[col], a, b, 0, 2, pos, &ok);
        else
            (void)wsync_digest_using(path[col], a, 0, &ok);
        if (!ok) return -1;
    }
    t0 = thread_now();
    if (op == 0)
        *sink += col == 4 ? wsync_diff(a, b, bytes / 2, 2, pos) : wsync_diff_using(path[col], a, b, bytes / 2, 2, pos, &ok);
    else if (op == 1)
        *sink += col == 4 ? wsync_digest(a, bytes) : wsync_digest_using(path[col], a, bytes, &ok);
    else
        *sink += col == 0 ? loads_avx512(a, bytes) : loads_avx2(a, bytes);
    return thread_now() - t0;
}

static int align_bench(size_t mib, int pairs)
{
    static const int offs[3] = {0, 8, 16};
    static const char *const names[ALIGN_COLS] = {"scalar", "sse2", "avx2", "avx512", "AUTO", "ld512", "ld256", ""};
    size_t n = mib << 20, npiece, i, turn = 0;
    uint8_t *ma, *mb, *mc;
    uint32_t *pos;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    volatile uint64_t sink = 0;
    double *q, *qr;
    int o, op, col, r;
    if (n < 2 * ALIGN_PIECE || pairs < 1) {
        fprintf(stderr, "bench_probe --align: at least %u MiB and 1 pair\n", (unsigned)(2 * ALIGN_PIECE >> 20));
        return 2;
    }
    npiece = n / ALIGN_PIECE;
    /* three images, page-aligned, each 4 KiB longer than the pieces it is cut into */
    {
        void *p1 = NULL, *p2 = NULL, *p3 = NULL;
        if (posix_memalign(&p1, 4096, n + 4096)) p1 = NULL;
        if (posix_memalign(&p2, 4096, n + 4096)) p2 = NULL;
        if (posix_memalign(&p3, 4096, n + 4096)) p3 = NULL;
        ma = (uint8_t *)p1, mb = (uint8_t *)p2, mc = (uint8_t *)p3;
    }
    pos = (uint32_t *)malloc(ALIGN_PIECE / 2 * sizeof *pos);
    q = (double *)malloc((size_t)ALIGN_COLS * (size_t)pairs * sizeof *q);
    qr = (double *)malloc((size_t)ALIGN_COLS * (size_t)pairs * sizeof *qr); /* q by round, unsorted */
    if (!ma || !mb || !mc || !pos || !q || !qr) {
        fprintf(stderr, "bench_probe --align: out of memory for 3 x %zu MiB\n", mib);
        return 1;
    }
    for (i = 0; i < n + 4096; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(ma + i, &x, 8);
    }
    memcpy(mb, ma, n + 4096);
    memcpy(mc, ma, n + 4096);
    for (i = 0; i < n / 2 / 100; i++) { /* 1% of the 2-byte elements of b changed, as after a training step */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        mb[2 * (size_t)(x % (n / 2))] ^= 1;
    }
    printf("bench_probe: align: %zu MiB images, calls on %zu MiB pieces in turn, %d pairs (call, memcmp of two "
           "equal copies at the same offset) per figure; thread CPU time\n",
           mib, ALIGN_PIECE >> 20, pairs);
    printf("bench_probe: align: / memcmp, median [quartiles]; the digest and the loads per byte (memcmp reads two "
           "images); AUTO = diff %s, digest %s\n",
           wsync_impl_name(wsync_diff_impl()), wsync_impl_name(wsync_digest_impl()));
    for (o = 0; o < 3; o++)
        for (op = 0; op < 3; op++) {
            int ncol = op == 2 ? 2 : 5, got[ALIGN_COLS] = {0};
            double med[ALIGN_COLS], best = 0;
            int bestcol = -1;
            /* the paths take turns within each round (the order reversed
               every other round), so that each sees the same spells of load */
            for (r = 0; r < pairs; r++)
                for (i = 0; i < (size_t)ncol; i++) {
                    size_t at, at2;
                    double tm, t0, t;
                    col = r & 1 ? ncol - 1 - (int)i : (int)i;
                    at = (turn++ % npiece) * ALIGN_PIECE + (size_t)offs[o];
                    at2 = (turn++ % npiece) * ALIGN_PIECE + (size_t)offs[o];
                    t0 = thread_now();
                    sink += (uint64_t)memcmp(ma + at, mc + at, ALIGN_PIECE);
                    tm = thread_now() - t0;
                    t = align_call(op, col, ma + at2, mb + at2, ALIGN_PIECE, pos, &sink);
                    qr[col * pairs + r] = t > 0 ? (op == 0 ? tm / t : tm / 2 / t) : -1;
                    if (t > 0) q[col * pairs + got[col]++] = qr[col * pairs + r];
                }
            printf("bench_probe: align: offset %2d %-6s", offs[o], op == 0 ? "diff" : op == 1 ? "digest" : "loads");
            for (col = 0; col < ncol; col++) {
                double *c = q + col * pairs;
                int g = got[col];
                const char *name = names[op == 2 ? 5 + col : col];
                med[col] = 0;
                if (!g) {
                    printf("  %s -", name);
                    continue;
                }
                qsort(c, (size_t)g, sizeof *c, cmp_dbl);
                med[col] = c[g / 2];
                if (op < 2 && col < 4 && med[col] > best) best = med[col], bestcol = col;
                printf("  %s %.2f [%.2f-%.2f]", name, c[g / 2], c[g / 4], c[(3 * g) / 4]);
            }
            if (op < 2 && bestcol >= 0) {
                /* AUTO's and the best path's calls of the same round; every
                   round has both (AUTO and the best path always run) */
                for (r = 0; r < pairs; r++) q[r] = qr[4 * pairs + r] / qr[bestcol * pairs + r];
                qsort(q, (size_t)pairs, sizeof *q, cmp_dbl);
                printf("  AUTO/%s %.2f [%.2f-%.2f]", names[bestcol], q[pairs / 2], q[pairs / 4], q[(3 * pairs) / 4]);
            }
            printf("\n");
            fflush(stdout);
        }
    free(ma);
    free(mb);
    free(mc);
    free(pos);
    free(q);
    free(qr);
    (void)sink;
    return 0;
}
#endif

int main(int argc, char **argv)
{
    int n = 3;
    if (argc > 1 && strcmp(argv[1], "--choice") == 0) {
        wsync_impl d = wsync_diff_impl();
        printf("diff=%s digest=%s\n", wsync_impl_name(d), wsync_impl_name(wsync_digest_impl()));
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "--head") == 0) {
        bench_cpu_print(stdout, argv[2]);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "--hog") == 0) return hog(atof(argv[2]));
    if (argc > 1 && strcmp(argv[1], "--align") == 0) {
        bench_cpu_print(stdout, "bench_probe");
#if WSYNC__X86
        return align_bench(argc > 2 ? (size_t)atol(argv[2]) : 1137, argc > 3 ? atoi(argv[3]) : 16);
#else
        printf("bench_probe: --align: x86 only\n");
        return 0;
#endif
    }
    if (argc > 1) n = atoi(argv[1]);
    bench_cpu_print(stdout, "bench_probe");
#if WSYNC__X86
    if (n > 0) return passes(n);
#else
    (void)n;
#endif
    return 0;
}
