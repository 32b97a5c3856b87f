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
    uint8_t *mem = (uint8_t *)malloc(4 * (size_t)WSYNC__PROBE_LARGE), *a, *b;
    uint32_t *pos;
    if (!mem) return 1;
    wsync__probe_images(mem, &a, &b, &pos);
    wsync__probe_filter(cand, nc, a, b, pos, &sink, in);
    printf("bench_probe: %d passes of %d rounds, %u KiB images from memory; a narrower path needs widest/path"
           " >= %.2f in the median round\n",
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
    if (argc > 1) n = atoi(argv[1]);
    bench_cpu_print(stdout, "bench_probe");
#if WSYNC__X86
    if (n > 0) return passes(n);
#else
    (void)n;
#endif
    return 0;
}
