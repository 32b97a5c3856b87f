/* bench_crypto: what a signed chain costs. The candidate object hashes
   (SHA-256, BLAKE2b-256, and SHA-512 for comparison) over one 256 MiB
   buffer, next to memcmp of two equal copies of it and wsync64
   (wsync_digest) over it, in the same run; best of REPS; each as GB/s of
   the buffer and as its time over memcmp's. Then Ed25519: a key pair, a
   signature and a verification of a 4 KiB HEAD-sized message (median of
   21), and what a 1.2 GB anchor would take to hash at each speed.

   usage: build/bench_crypto [MiB]   (default 256) */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "bench_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 3

static volatile uint64_t g_sink;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 256, n = mib << 20, i;
    uint8_t *a = (uint8_t *)malloc(n), *b = (uint8_t *)malloc(n);
    const char *names[5] = {"memcmp (2 copies)", "wsync64", "SHA-256", "BLAKE2b-256", "SHA-512"};
    double best[5];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int k, rep;
    if (!a || !b || !mib) {
        fprintf(stderr, "bench_crypto: out of memory\n");
        return 1;
    }
    bench_cpu_print(stdout, "bench_crypto");
    for (i = 0; i < n; i += 8) { /* random bytes: the hashes' speed does not depend on them */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(a + i, &x, 8);
    }
    memcpy(b, a, n);
    printf("bench_crypto: %zu MiB, best of %d, one thread\n", mib, REPS);
    for (k = 0; k < 5; k++) best[k] = 1e30;
    for (rep = 0; rep < REPS; rep++) {
        for (k = 0; k < 5; k++) {
            uint8_t out[64];
            double t0 = bench_cpu__now(), t;
            switch (k) {
            case 0: g_sink += (uint64_t)memcmp(a, b, n); break;
            case 1: g_sink += wsync_digest(a, n); break;
            case 2: wsync_sha256(a, n, out); break;
            case 3: wsync_blake2b(a, n, out, 32); break;
            default: wsync_sha512(a, n, out); break;
            }
            t = bench_cpu__now() - t0;
            g_sink += out[0];
            if (t < best[k]) best[k] = t;
        }
    }
    printf("%-20s %10s %12s %16s\n", "", "GB/s", "vs memcmp", "1.2 GB anchor");
    for (k = 0; k < 5; k++)
        printf("%-20s %10.3f %11.2fx %14.2f s\n", names[k], (double)n / best[k] / 1e9, best[k] / best[0],
               1.2e9 / ((double)n / best[k]));
    {
        uint8_t seed[32], pub[32], sec[64], sig[64], msg[4096];
        double tk[21], ts[21], tv[21];
        int ok = 1;
        for (i = 0; i < 32; i++) seed[i] = (uint8_t)(i * 29 + 1);
        for (i = 0; i < sizeof msg; i++) msg[i] = (uint8_t)(i * 7);
        for (rep = 0; rep < 21; rep++) {
            double t0 = bench_cpu__now();
            wsync_ed25519_keypair(seed, pub, sec);
            tk[rep] = bench_cpu__now() - t0;
            t0 = bench_cpu__now();
            wsync_ed25519_sign(sec, msg, sizeof msg, sig);
            ts[rep] = bench_cpu__now() - t0;
            t0 = bench_cpu__now();
            ok &= wsync_ed25519_verify(pub, msg, sizeof msg, sig);
            tv[rep] = bench_cpu__now() - t0;
        }
        qsort(tk, 21, sizeof *tk, cmp_d);
        qsort(ts, 21, sizeof *ts, cmp_d);
        qsort(tv, 21, sizeof *tv, cmp_d);
        printf("Ed25519 (4 KiB message, median of 21): keypair %.2f ms, sign %.2f ms, verify %.2f ms%s\n",
               tk[10] * 1e3, ts[10] * 1e3, tv[10] * 1e3, ok ? "" : " (VERIFY FAILED)");
    }
    free(a);
    free(b);
    return 0;
}
