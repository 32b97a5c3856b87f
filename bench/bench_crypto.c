/* bench_crypto: what a signed chain costs. The candidate object hashes
   (SHA-256, BLAKE2b-256 as wsync_blake2b runs it (AVX2 where the CPU has
   it) and portable, and SHA-512 for comparison) over one 256 MiB
   buffer, next to memcmp of two equal copies of it and wsync64
   (wsync_digest) over it, in the same run; best of REPS; each as GB/s of
   the buffer and as its time over memcmp's. Then Ed25519: a key pair, a
   signature and a verification of a 4 KiB HEAD-sized message (median of
   21), and what a 1.2 GB anchor would take to hash at each speed.

   With DIR: a model of 1.26 GB (ten 120 MiB bf16 tensors of random bits)
   published as an anchor into a directory store at DIR (no fsync) and
   pulled by a subscriber without a step (streamed into its targets),
   unsigned and signed (sign_key, verify_key) alternated twice: the wall
   time each takes, which is what a signed chain adds to an anchor.

   usage: build/bench_crypto [MiB [DIR]]   (default 256 MiB, no DIR) */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "bench_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 3

static volatile uint64_t g_sink;

/* One anchor published and pulled through a directory store: seconds. */
static int e2e(const char *dir, int sign, double *pub_s, double *pull_s)
{
    enum { NT = 10 };
    const size_t ne = (size_t)60 << 20;
    uint16_t *w[NT], *g[NT];
    wsync_tensor t[NT], tg[NT];
    uint64_t shape[1];
    char names[NT][8], cmd[4200];
    uint8_t seed[32], pub[32], sec[64];
    wsync_error err;
    wsync_store st;
    wsync_store_options so;
    wsync_chain_options po, co;
    wsync_publisher *p = NULL;
    wsync_subscriber *s = NULL;
    uint64_t x = 88172645463325252ull;
    double t0;
    int i, ok = 1;
    size_t k;
    shape[0] = ne;
    memset(seed, 7, sizeof seed);
    wsync_ed25519_keypair(seed, pub, sec);
    for (i = 0; i < NT; i++) {
        w[i] = (uint16_t *)malloc(ne * 2);
        g[i] = (uint16_t *)calloc(ne, 2);
        if (!w[i] || !g[i]) return 0;
        snprintf(names[i], sizeof names[i], "t%d", i);
        for (k = 0; k < ne; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            w[i][k] = (uint16_t)x;
        }
        wsync_tensor_dense(&t[i], names[i], WSYNC_DTYPE_BF16, 1, shape, w[i], NULL);
        wsync_tensor_dense(&tg[i], names[i], WSYNC_DTYPE_BF16, 1, shape, g[i], NULL);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 0;
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;
    memset(&po, 0, sizeof po);
    memset(&co, 0, sizeof co);
    if (sign) po.sign_key = sec, co.verify_key = pub;
    if (wsync_store_dir_open(dir, &so, &st, &err) != WSYNC_OK || wsync_publisher_open(&st, &po, &p, &err) != WSYNC_OK) {
        fprintf(stderr, "bench_crypto: %s\n", err.message);
        return 0;
    }
    t0 = bench_cpu__now();
    ok = wsync_publish(p, 0, t, NT, NULL, &err) == WSYNC_OK;
    *pub_s = bench_cpu__now() - t0;
    wsync_publisher_close(p);
    ok = ok && wsync_subscriber_open(&st, tg, NT, &co, &s, &err) == WSYNC_OK;
    t0 = bench_cpu__now();
    ok = ok && wsync_subscriber_sync(s, WSYNC_STEP_LATEST, NULL, &err) == WSYNC_OK;
    *pull_s = bench_cpu__now() - t0;
    if (!ok) fprintf(stderr, "bench_crypto: %s\n", err.message);
    for (i = 0; i < NT; i++) {
        if (ok && memcmp(w[i], g[i], ne * 2) != 0) ok = 0, fprintf(stderr, "bench_crypto: pulled bytes differ\n");
        free(w[i]);
        free(g[i]);
    }
    wsync_subscriber_close(s);
    wsync_store_close(&st);
    if (system(cmd) != 0) return 0;
    return ok;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 256, n = mib << 20, i;
    uint8_t *a = (uint8_t *)malloc(n), *b = (uint8_t *)malloc(n);
    const char *names[6] = {"memcmp (2 copies)", "wsync64", "SHA-256", "BLAKE2b-256", "BLAKE2b-256 portable",
                            "SHA-512"};
    double best[6];
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
    for (k = 0; k < 6; k++) best[k] = 1e30;
    for (rep = 0; rep < REPS; rep++) {
        for (k = 0; k < 6; k++) {
            uint8_t out[64];
            double t0 = bench_cpu__now(), t;
            switch (k) {
            case 0: g_sink += (uint64_t)memcmp(a, b, n); break;
            case 1: g_sink += wsync_digest(a, n); break;
            case 2: wsync_sha256(a, n, out); break;
            case 3: wsync_blake2b(a, n, out, 32); break;
            case 4: wsync_blake2b_using(WSYNC_IMPL_SCALAR, a, n, out, 32, NULL); break;
            default: wsync_sha512(a, n, out); break;
            }
            t = bench_cpu__now() - t0;
            g_sink += out[0];
            if (t < best[k]) best[k] = t;
        }
    }
    printf("%-20s %10s %12s %16s\n", "", "GB/s", "vs memcmp", "1.2 GB anchor");
    for (k = 0; k < 6; k++)
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
    if (argc > 2) {
        int round;
        printf("a 1.26 GB anchor through a directory store (%s, no fsync): publish, then pull streamed\n", argv[2]);
        for (round = 0; round < 4; round++) {
            double ps = 0, ls = 0;
            if (!e2e(argv[2], round & 1, &ps, &ls)) return 1;
            printf("  %-9s publish %.2f s, pull %.2f s\n", round & 1 ? "signed" : "unsigned", ps, ls);
        }
    }
    return 0;
}
