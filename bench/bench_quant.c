/* bench_quant: wsync_quantize_e4m3 (bf16 -> fp8 e4m3, one f32 scale per
   128x128 tile) on a 4096 x 4096 matrix (32 MiB of bf16), as a ratio to
   memcpy of the same bytes in the same run (best of 5), on two kinds of
   data:
     weights      bf16 values of a trained layer's scale (normal, about
                  1e-2, a few far larger): what an update moves;
     random bits  every bf16 bit pattern equally likely (push-demo's fill):
                  1 in 256 is an f32 subnormal and 1 in 128 infinity or NaN,
                  which the FPU handles slowly.
   A digest of the codes and scales is printed, so runs can be compared.

   usage: build/bench_quant */
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#include "bench_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 4096u
#define COLS 4096u
#define REPS 5

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

int main(void)
{
    uint64_t n = (uint64_t)ROWS * COLS, i, s = 42, ns = wsync_quantize_scale_count(ROWS, COLS, 128);
    uint16_t *w = (uint16_t *)malloc(n * 2);
    uint8_t *copy = (uint8_t *)malloc(n * 2), *q = (uint8_t *)malloc(n);
    float *sc = (float *)malloc(ns * 4);
    int kind, rep;
    if (!w || !copy || !q || !sc) {
        fprintf(stderr, "bench_quant: out of memory\n");
        return 1;
    }
    bench_cpu_print(stdout, "bench_quant");
    printf("bench_quant: %u x %u bf16 (%.1f MiB) -> fp8 e4m3, 128x128 tiles, best of %d\n", ROWS, COLS,
           (double)n * 2 / 1048576.0, REPS);
    printf("%-12s %10s %10s %12s   %-16s\n", "data", "GB/s", "memcpy", "vs memcpy", "digest");
    for (kind = 0; kind < 2; kind++) {
        double bq = 1e9, bc = 1e9;
        wsync_error e;
        wsync_digest_state d;
        for (i = 0; i < n; i++) {
            uint64_t r = rng(&s);
            if (kind == 1) {
                w[i] = (uint16_t)r;
            } else { /* about N(0, 0.01), one in 4096 ten times larger */
                double u1 = ((double)(r >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(rng(&s) >> 11) / 9007199254740992.0;
                double g = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2) * 0.01;
                w[i] = bf16_of((float)((r & 4095) == 0 ? g * 10 : g));
            }
        }
        for (rep = 0; rep < REPS; rep++) {
            double t = bench_cpu__now();
            memcpy(copy, w, (size_t)n * 2);
            t = bench_cpu__now() - t;
            if (t < bc) bc = t;
            t = bench_cpu__now();
            if (wsync_quantize_e4m3(w, ROWS, COLS, COLS, 128, q, sc, &e) != WSYNC_OK) {
                fprintf(stderr, "bench_quant: %s\n", e.message);
                return 1;
            }
            t = bench_cpu__now() - t;
            if (t < bq) bq = t;
        }
        wsync_digest_init(&d);
        wsync_digest_update(&d, q, (size_t)n);
        wsync_digest_update(&d, sc, (size_t)ns * 4);
        printf("%-12s %10.3f %10.2f %12.4f   %016llx\n", kind ? "random bits" : "weights", (double)n * 2 / bq / 1e9,
               (double)n * 2 / bc / 1e9, bc / bq, (unsigned long long)wsync_digest_final(&d));
    }
    free(w);
    free(copy);
    free(q);
    free(sc);
    return 0;
}
