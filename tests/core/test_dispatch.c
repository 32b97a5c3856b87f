/* test_dispatch: the SIMD paths of the diff and the digest and AUTO's choice
   between them.

   Every path the CPU has gives the scalar reference's results (diff:
   positions of every width, sizes, start alignments and densities of
   change; digest: sizes, alignments, and the streaming form in random
   pieces), with positions written only inside pos[0, n). AUTO's choice is
   a path the CPU has, never AUTO, the same on every call, and what
   wsync_diff and wsync_digest compute with. The environment override
   (WSYNC_SIMD, WSYNC_DIFF_IMPL, WSYNC_DIGEST_IMPL) is checked in child
   processes (this program run again with --child), where the choice is
   made afresh: a name the CPU has is taken, one it lacks or a bad one is
   ignored without a crash, and threads choosing at once agree. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t rng(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static int diff_has(wsync_impl impl)
{
    uint8_t a = 0;
    uint32_t pos = 0;
    int ok = 0;
    (void)wsync_diff_using(impl, &a, &a, 0, 1, &pos, &ok);
    return ok;
}

static int digest_has(wsync_impl impl)
{
    uint8_t a = 0;
    int ok = 0;
    (void)wsync_digest_using(impl, &a, 0, &ok);
    return ok;
}

/* ---- the child: prints what it chose, and checks threads agree ---- */

typedef struct pick {
    wsync_impl diff, digest;
} pick;

static void *pick_thread(void *arg)
{
    pick *p = (pick *)arg;
    p->diff = wsync_diff_impl();
    p->digest = wsync_digest_impl();
    return NULL;
}

static int child(void)
{
    pthread_t th[4];
    pick p[4];
    int i, agree = 1, started[4];
    for (i = 0; i < 4; i++) started[i] = pthread_create(&th[i], NULL, pick_thread, &p[i]) == 0;
    for (i = 0; i < 4; i++)
        if (started[i]) pthread_join(th[i], NULL);
    for (i = 0; i < 4; i++)
        if (started[i] && (p[i].diff != wsync_diff_impl() || p[i].digest != wsync_digest_impl())) agree = 0;
    printf("diff=%s digest=%s agree=%d\n", wsync_impl_name(wsync_diff_impl()), wsync_impl_name(wsync_digest_impl()),
           agree);
    return 0;
}

/* Runs this program with --child under `env` (VAR=value ...); writes the
   diff's and the digest's choice into d and g and whether threads agreed. */
static int run_child(const char *self, const char *env, char *d, char *g, int *agree)
{
    char cmd[1024], line[256];
    FILE *f;
    int got = 0;
    snprintf(cmd, sizeof cmd,
             "env -u WSYNC_SIMD -u WSYNC_DIFF_IMPL -u WSYNC_DIGEST_IMPL %s '%s' --child 2>&1", env, self);
    f = popen(cmd, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "diff=%31s digest=%31s agree=%d", d, g, agree) == 3) got = 1;
    return pclose(f) == 0 && got ? 0 : -1;
}

int main(int argc, char **argv)
{
    size_t i;
    const size_t big = (1u << 20) + 4096;
    uint8_t *a, *b;
    int impl;
    char self[4096];

    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();

    a = (uint8_t *)malloc(big);
    b = (uint8_t *)malloc(big);
    if (!a || !b) return 1;
    for (i = 0; i < big; i++) a[i] = (uint8_t)rng();

    TEST_BEGIN("dispatch: scalar is always there, AUTO too, past the enum nothing");
    CHECK(diff_has(WSYNC_IMPL_SCALAR) && digest_has(WSYNC_IMPL_SCALAR));
    CHECK(diff_has(WSYNC_IMPL_AUTO) && digest_has(WSYNC_IMPL_AUTO));
    CHECK(!diff_has(WSYNC_IMPL_COUNT) && !digest_has(WSYNC_IMPL_COUNT));
    CHECK(!digest_has(WSYNC_IMPL_NEON)); /* the digest has no NEON path */
    if (check__is_verbose())
        for (impl = WSYNC_IMPL_SCALAR; impl < WSYNC_IMPL_COUNT; impl++)
            printf("     %-7s diff %s, digest %s\n", wsync_impl_name((wsync_impl)impl),
                   diff_has((wsync_impl)impl) ? "yes" : "no", digest_has((wsync_impl)impl) ? "yes" : "no");
    TEST_END();

    TEST_BEGIN("dispatch: AUTO's choice is a path the CPU has, the same every call");
    {
        wsync_impl d = wsync_diff_impl(), g = wsync_digest_impl();
        CHECK(d != WSYNC_IMPL_AUTO && g != WSYNC_IMPL_AUTO);
        CHECK_MSG(diff_has(d), "%s", wsync_impl_name(d));
        CHECK_MSG(digest_has(g), "%s", wsync_impl_name(g));
        for (i = 0; i < 100; i++) {
            CHECK(wsync_diff_impl() == d);
            CHECK(wsync_digest_impl() == g);
        }
        if (check__is_verbose()) printf("     AUTO: diff %s, digest %s\n", wsync_impl_name(d), wsync_impl_name(g));
    }
    TEST_END();

    TEST_BEGIN("digest: every path the CPU has equals scalar, sizes 0..1 MiB, 8 alignments");
    {
        static const size_t lens[] = {0,    1,    7,    63,   64,    65,    127,   1000,   1023,
                                      1024, 1025, 2047, 4096, 65535, 65536, 65537, 131072 + 333, 1u << 20};
        for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
            size_t off;
            for (off = 0; off < 8; off++) {
                uint64_t want = wsync_digest_using(WSYNC_IMPL_SCALAR, a + off, lens[i], NULL);
                CHECK_EQ_U64(wsync_digest(a + off, lens[i]), want);
                for (impl = WSYNC_IMPL_SSE2; impl < WSYNC_IMPL_COUNT; impl++) {
                    int ok = 0;
                    uint64_t got = wsync_digest_using((wsync_impl)impl, a + off, lens[i], &ok);
                    if (ok)
                        CHECK_MSG(got == want, "%s len %lu off %lu", wsync_impl_name((wsync_impl)impl),
                                  (unsigned long)lens[i], (unsigned long)off);
                }
            }
        }
    }
    TEST_END();

    TEST_BEGIN("digest: the streaming form in random pieces equals the one-call digest");
    {
        int rep;
        for (rep = 0; rep < 20; rep++) {
            size_t len = (size_t)(rng() % (300u * 1024u)), at = 0, off = (size_t)(rng() % 64);
            wsync_digest_state s;
            wsync_digest_init(&s);
            while (at < len) {
                size_t piece = (size_t)(rng() % 5000);
                if (rng() % 4 == 0) piece = (size_t)(rng() % 70000);
                if (piece > len - at) piece = len - at;
                wsync_digest_update(&s, a + off + at, piece);
                at += piece;
            }
            CHECK_EQ_U64(wsync_digest_final(&s), wsync_digest_using(WSYNC_IMPL_SCALAR, a + off, len, NULL));
        }
    }
    TEST_END();

    TEST_BEGIN("diff: every path the CPU has equals scalar: widths, sizes, alignments, densities");
    {
        static const size_t counts[] = {0, 1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255,
                                        256, 257, 511, 1000, 1024, 4099, 65536 + 7};
        static const unsigned widths[] = {1, 2, 4, 8};
        static const unsigned per_mille[] = {0, 1, 10, 100, 500, 1000};
        size_t c, wi, di;
        for (wi = 0; wi < 4; wi++)
            for (c = 0; c < sizeof counts / sizeof counts[0]; c++)
                for (di = 0; di < sizeof per_mille / sizeof per_mille[0]; di++) {
                    unsigned w = widths[wi];
                    size_t n = counts[c], nb = n * w, off = (size_t)(rng() % 64), j, want_n;
                    /* pos exactly n long (one more for n = 0): a store past it is the sanitizer's */
                    uint32_t *want = (uint32_t *)malloc((n ? n : 1) * sizeof *want);
                    uint32_t *got = (uint32_t *)malloc((n ? n : 1) * sizeof *got);
                    const uint8_t *x = a + off;
                    uint8_t *y = b + (size_t)(rng() % 64);
                    if (!want || !got) return 1;
                    memcpy(y, x, nb);
                    for (j = 0; j < n; j++)
                        if (rng() % 1000 < per_mille[di]) y[j * w + (size_t)(rng() % w)] ^= (uint8_t)(1u << (rng() % 8));
                    want_n = wsync_diff_scalar(x, y, n, w, want);
                    for (impl = WSYNC_IMPL_AUTO; impl < WSYNC_IMPL_COUNT; impl++) {
                        int ok = 0;
                        size_t got_n = wsync_diff_using((wsync_impl)impl, x, y, n, w, got, &ok);
                        if (!ok) continue;
                        CHECK_MSG(got_n == want_n && memcmp(got, want, want_n * sizeof *got) == 0,
                                  "%s width %u n %lu density %u/1000: %lu positions, want %lu",
                                  wsync_impl_name((wsync_impl)impl), w, (unsigned long)n, per_mille[di],
                                  (unsigned long)got_n, (unsigned long)want_n);
                    }
                    CHECK_EQ_INT(wsync_diff(x, y, n, w, got), want_n);
                    free(want);
                    free(got);
                }
    }
    TEST_END();

    TEST_BEGIN("diff: 1 MiB of bf16 with 1% changed, every path");
    {
        size_t n = (1u << 20) / 2, j, want_n;
        uint32_t *want = (uint32_t *)malloc(n * sizeof *want), *got = (uint32_t *)malloc(n * sizeof *got);
        if (!want || !got) return 1;
        memcpy(b, a, 2 * n);
        for (j = 0; j < n / 100; j++) b[2 * (size_t)(rng() % n) + 1] ^= 0x40;
        want_n = wsync_diff_scalar(a, b, n, 2, want);
        CHECK(want_n > n / 200);
        for (impl = WSYNC_IMPL_SSE2; impl < WSYNC_IMPL_COUNT; impl++) {
            int ok = 0;
            size_t got_n = wsync_diff_using((wsync_impl)impl, a, b, n, 2, got, &ok);
            if (ok)
                CHECK_MSG(got_n == want_n && memcmp(got, want, want_n * sizeof *got) == 0, "%s",
                          wsync_impl_name((wsync_impl)impl));
        }
        free(want);
        free(got);
    }
    TEST_END();

    TEST_BEGIN("every path at the offsets tensors have (0, 8, 16, ... mod 64) equals scalar: digest and diff");
    {
        /* a 64-byte-aligned start, then each multiple of 8 within the line
           (a safetensors file's data sits 8 past a boundary, a large malloc
           block 16) and two odd ones; lengths across the 1 KiB rounds, the
           64 KiB blocks and a tail */
        static const size_t offs[] = {0, 8, 16, 24, 32, 40, 48, 56, 1, 63};
        static const size_t lens[] = {1024, 4096 + 64, 65536 + 1000, 3 * 65536 + 520};
        uint8_t *line = a + (64 - (uintptr_t)a % 64) % 64, *bline = b + (64 - (uintptr_t)b % 64) % 64;
        size_t oi, li, j;
        uint32_t *want = (uint32_t *)malloc(lens[3] / 2 * sizeof *want), *got = (uint32_t *)malloc(lens[3] / 2 * sizeof *got);
        if (!want || !got) return 1;
        for (oi = 0; oi < sizeof offs / sizeof offs[0]; oi++)
            for (li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const uint8_t *x = line + offs[oi];
                uint8_t *y = bline + offs[oi];
                size_t len = lens[li], n = len / 2, want_n;
                uint64_t dwant = wsync_digest_using(WSYNC_IMPL_SCALAR, x, len, NULL);
                memcpy(y, x, len);
                for (j = 0; j < n / 100 + 1; j++) y[2 * (size_t)(rng() % n) + (size_t)(rng() % 2)] ^= 0x10;
                want_n = wsync_diff_scalar(x, y, n, 2, want);
                for (impl = WSYNC_IMPL_AUTO; impl < WSYNC_IMPL_COUNT; impl++) {
                    int ok = 0;
                    uint64_t d = wsync_digest_using((wsync_impl)impl, x, len, &ok);
                    size_t got_n;
                    if (ok)
                        CHECK_MSG(d == dwant, "digest %s offset %lu len %lu", wsync_impl_name((wsync_impl)impl),
                                  (unsigned long)offs[oi], (unsigned long)len);
                    got_n = wsync_diff_using((wsync_impl)impl, x, y, n, 2, got, &ok);
                    if (ok)
                        CHECK_MSG(got_n == want_n && memcmp(got, want, want_n * sizeof *got) == 0,
                                  "diff %s offset %lu len %lu: %lu positions, want %lu",
                                  wsync_impl_name((wsync_impl)impl), (unsigned long)offs[oi], (unsigned long)len,
                                  (unsigned long)got_n, (unsigned long)want_n);
                }
            }
        free(want);
        free(got);
    }
    TEST_END();

#if WSYNC__X86
    TEST_BEGIN("AUTO's probe: its images at data offset 8 (mod 64) whatever the allocator's, inside its block");
    {
        /* the block at each multiple of 8 within a line: the images
           where the probe reads them, and everything inside the block
           (under the sanitizer the probe's reads and writes check too) */
        uint8_t *raw = (uint8_t *)malloc(WSYNC__PROBE_MEM + 64);
        size_t start, j;
        if (!raw) return 1;
        for (start = 0; start < 64; start += 8) {
            uint8_t *mem = raw + (start + 64 - (uintptr_t)raw % 64) % 64, *pa, *pb;
            uint32_t *pos;
            size_t diffs = 0, half = WSYNC__PROBE_LARGE / 2;
            int k;
            wsync__probe_images(mem, &pa, &pb, &pos);
            CHECK_MSG((uintptr_t)pa % 64 == 8 && (uintptr_t)pb % 64 == 8, "block at %lu mod 64",
                      (unsigned long)((uintptr_t)mem % 64));
            CHECK(pa >= mem && pb >= pa + WSYNC__PROBE_LARGE + 8 && (uintptr_t)pos % 4 == 0);
            CHECK((uint8_t *)pos >= pb + WSYNC__PROBE_LARGE + 8 &&
                  (uint8_t *)(pos + half) <= mem + WSYNC__PROBE_MEM);
            /* what a pass reads: LARGE bytes of each at +0 and +8, 1% of
               the elements changed, and the digest's 2 LARGE from a */
            for (j = 0; j < WSYNC__PROBE_LARGE + 8; j += 2) diffs += memcmp(pa + j, pb + j, 2) != 0;
            CHECK_MSG(diffs > half / 200 && diffs <= half / 100, "%lu of %lu elements differ", (unsigned long)diffs,
                      (unsigned long)half);
            for (k = 0; k < 2; k++) {
                size_t want_n = wsync_diff_scalar(pa + 8 * k, pb + 8 * k, half, 2, pos);
                for (impl = WSYNC_IMPL_SSE2; impl < WSYNC_IMPL_COUNT; impl++) {
                    int ok = 0;
                    size_t got_n = wsync_diff_using((wsync_impl)impl, pa + 8 * k, pb + 8 * k, half, 2, pos, &ok);
                    if (ok) CHECK_MSG(got_n == want_n, "%s at +%d", wsync_impl_name((wsync_impl)impl), 8 * k);
                    (void)wsync_digest_using((wsync_impl)impl, pa + 8 * k, 2 * (size_t)WSYNC__PROBE_LARGE, &ok);
                }
            }
        }
        free(raw);
    }
    TEST_END();

    TEST_BEGIN("AUTO's rule: the widest unless a narrower path is 1.4x faster in most rounds");
    {
        /* t[k][r]: ticks of candidate k (widest first) in round r */
        uint64_t t[4][WSYNC__PROBE_ROUNDS];
        int in[4] = {1, 1, 1, 1}, r, k;
        /* level, with every round's times off by up to 35% each way: the widest */
        for (r = 0; r < WSYNC__PROBE_ROUNDS; r++)
            for (k = 0; k < 4; k++) t[k][r] = 1000 + (uint64_t)(rng() % 700) - 350;
        CHECK_EQ_INT(wsync__simd_rule(4, in, (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t), 0);
        /* the widest 1.3x behind every other path in every round: still the widest */
        for (r = 0; r < WSYNC__PROBE_ROUNDS; r++)
            for (k = 0; k < 4; k++) t[k][r] = k == 0 ? 1300 : 1000;
        CHECK_EQ_INT(wsync__simd_rule(4, in, (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t), 0);
        /* avx2 (1) 1.5x faster in 4 of 9 rounds, level in the rest: the widest */
        for (r = 0; r < WSYNC__PROBE_ROUNDS; r++)
            for (k = 0; k < 4; k++) t[k][r] = k == 1 && r < 4 ? 1000 : 1500;
        CHECK_EQ_INT(wsync__simd_rule(4, in, (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t), 0);
        /* in 5 of 9 (the median round): avx2 */
        t[1][4] = 1000;
        CHECK_EQ_INT(wsync__simd_rule(4, in, (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t), 1);
        /* exactly 1.4x in every round is enough */
        for (r = 0; r < WSYNC__PROBE_ROUNDS; r++)
            for (k = 0; k < 4; k++) t[k][r] = k == 0 ? 1400 : k == 1 ? 1000 : 2000;
        CHECK_EQ_INT(wsync__simd_rule(4, in, (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t), 1);
        /* a narrower path is held to the pick, not to the widest: sse2 (2)
           1.2x faster than avx2, which is 1.5x faster than avx512: avx2;
           1.5x faster than avx2: sse2 */
        for (r = 0; r < WSYNC__PROBE_ROUNDS; r++) {
            t[0][r] = 2250;
            t[1][r] = 1500;
            t[2][r] = 1250;
            t[3][r] = 5000;
        }
        CHECK_EQ_INT(wsync__simd_rule(4, in, (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t), 1);
        for (r = 0; r < WSYNC__PROBE_ROUNDS; r++) t[2][r] = 1000;
        CHECK_EQ_INT(wsync__simd_rule(4, in, (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t), 2);
        /* a path not timed (its 0 ticks) is never taken */
        in[1] = in[2] = 0;
        for (r = 0; r < WSYNC__PROBE_ROUNDS; r++) t[1][r] = t[2][r] = 0;
        CHECK_EQ_INT(wsync__simd_rule(4, in, (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t), 0);
        /* the widest alone */
        CHECK_EQ_INT(wsync__simd_rule(1, in, (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t), 0);
    }
    TEST_END();

#endif

    /* the child's path: /proc/self/exe where there is one, else argv[0] */
    {
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k > 0) {
            self[k] = 0;
        } else {
            snprintf(self, sizeof self, "%s", argv[0]);
        }
    }

    TEST_BEGIN("env: no override: a choice the CPU has, made by four threads at once, agreed");
    {
        char d[32], g[32];
        int agree = 0;
        CHECK(run_child(self, "", d, g, &agree) == 0);
        CHECK(agree == 1);
        for (impl = WSYNC_IMPL_SCALAR; impl < WSYNC_IMPL_COUNT; impl++) {
            if (strcmp(d, wsync_impl_name((wsync_impl)impl)) == 0) CHECK_MSG(diff_has((wsync_impl)impl), "%s", d);
            if (strcmp(g, wsync_impl_name((wsync_impl)impl)) == 0) CHECK_MSG(digest_has((wsync_impl)impl), "%s", g);
        }
        CHECK(strcmp(d, "auto") != 0 && strcmp(g, "auto") != 0);
    }
    TEST_END();

    TEST_BEGIN("env: each path the CPU has, named by WSYNC_SIMD, is taken for both");
    for (impl = WSYNC_IMPL_SCALAR; impl < WSYNC_IMPL_COUNT; impl++) {
        char env[64], d[32], g[32];
        const char *name = wsync_impl_name((wsync_impl)impl);
        int agree = 0;
        snprintf(env, sizeof env, "WSYNC_SIMD=%s", name);
        CHECK_MSG(run_child(self, env, d, g, &agree) == 0, "%s", env);
        CHECK(agree == 1);
        if (diff_has((wsync_impl)impl))
            CHECK_MSG(strcmp(d, name) == 0, "%s: diff %s", env, d);
        else
            CHECK_MSG(strcmp(d, name) != 0 && strcmp(d, "auto") != 0, "%s: diff %s", env, d);
        if (digest_has((wsync_impl)impl))
            CHECK_MSG(strcmp(g, name) == 0, "%s: digest %s", env, g);
        else
            CHECK_MSG(strcmp(g, name) != 0 && strcmp(g, "auto") != 0, "%s: digest %s", env, g);
    }
    TEST_END();

    TEST_BEGIN("env: WSYNC_DIFF_IMPL and WSYNC_DIGEST_IMPL win over WSYNC_SIMD, each for its own");
    {
        char d[32], g[32];
        int agree = 0;
        CHECK(run_child(self, "WSYNC_SIMD=scalar WSYNC_DIGEST_IMPL=sse2", d, g, &agree) == 0);
        CHECK_EQ_STR(d, "scalar");
        CHECK_EQ_STR(g, digest_has(WSYNC_IMPL_SSE2) ? "sse2" : "scalar");
        CHECK(run_child(self, "WSYNC_DIFF_IMPL=scalar", d, g, &agree) == 0);
        CHECK_EQ_STR(d, "scalar");
        CHECK(strcmp(g, "auto") != 0); /* the digest's measured */
        CHECK(run_child(self, "WSYNC_SIMD=sse2 WSYNC_DIFF_IMPL=scalar WSYNC_DIGEST_IMPL=scalar", d, g, &agree) == 0);
        CHECK_EQ_STR(d, "scalar");
        CHECK_EQ_STR(g, "scalar");
    }
    TEST_END();

    TEST_BEGIN("env: bad names and paths the CPU lacks are ignored, no crash");
    {
        static const char *const envs[] = {"WSYNC_SIMD=", "WSYNC_SIMD=fast", "WSYNC_SIMD=AVX2", "WSYNC_SIMD=auto",
                                           "WSYNC_DIGEST_IMPL=neon", "WSYNC_DIFF_IMPL=avx512 WSYNC_DIGEST_IMPL=avx512",
                                           "WSYNC_SIMD=neon"};
        for (i = 0; i < sizeof envs / sizeof envs[0]; i++) {
            char d[32], g[32];
            int agree = 0;
            CHECK_MSG(run_child(self, envs[i], d, g, &agree) == 0, "%s", envs[i]);
            CHECK(strcmp(d, "auto") != 0 && strcmp(g, "auto") != 0 && strcmp(g, "neon") != 0);
            if (!diff_has(WSYNC_IMPL_AVX512)) CHECK_MSG(strcmp(d, "avx512") != 0, "%s", envs[i]);
            if (!digest_has(WSYNC_IMPL_AVX512)) CHECK_MSG(strcmp(g, "avx512") != 0, "%s", envs[i]);
            if (!diff_has(WSYNC_IMPL_NEON)) CHECK_MSG(strcmp(d, "neon") != 0, "%s", envs[i]);
        }
    }
    TEST_END();

    free(a);
    free(b);
    return check_summary();
}
