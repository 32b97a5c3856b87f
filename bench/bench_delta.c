/* bench_delta: diff, digest, encode and apply on a training-like model.

   usage: bench_delta [MODEL [STEPS]]     (default qwen3-0.6b, 3 steps)
   env:   WSYNC_BENCH_MODE=adamw          use the AdamW generator (more memory)
          WSYNC_BENCH_THREADS=N           encode and apply on N threads (default 1)
          WSYNC_BENCH_ONLY=NAME           measure one encoding (e.g. packed-max: both its
                                          coders; pm-range: its range coder alone)

   The output opens with the CPU (model, family, SIMD flags), the paths
   this build has, and the paths AUTO chose (bench/bench_cpu.h). Every
   speed is reported next to a baseline measured in the same run on the
   same bytes, because absolute times drift on shared machines:
     diff    vs memcmp of two equal copies of the base image (a full scan of
             both buffers, which is what a diff must read): AUTO, then every
             path the build and CPU have (wsync_diff_using), side by side,
             each rep taking its turn with memcmp
     digest  vs the same memcmp, per byte of input; AUTO and every path
     encode  (diff + encode, whole model, best of three) vs that memcmp; the
             base digests come from the previous step, as a publisher keeps them
     apply   changed elements per second on one core
   Sizes are compared with the memoryless entropy bound: per tensor,
   positions as Bernoulli(p) (n * H(p) bits) plus the empirical entropy of
   the value steps (new minus base in ordered-integer space). */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_GEN_IMPLEMENTATION
#include "../tool/wsync_gen.h"
#include "bench_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_delta: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static uint16_t ord16(uint16_t u)
{
    return (u & 0x8000) ? (uint16_t)(~u & 0xFFFF) : (uint16_t)(u | 0x8000);
}

/* Memoryless bound in bits for one tensor pair. */
static double bound_bits(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *hist, uint64_t *changed_out)
{
    size_t i, c = 0;
    double bits = 0, p;
    memset(hist, 0, sizeof(uint32_t) * 131072);
    for (i = 0; i < n; i++)
        if (a[i] != b[i]) {
            int d = (int)ord16(b[i]) - (int)ord16(a[i]);
            hist[d + 65536]++;
            c++;
        }
    *changed_out = c;
    if (c == 0) return 0;
    p = (double)c / (double)n;
    if (c < n) bits += (double)n * (-(p * log2(p) + (1 - p) * log2(1 - p)));
    for (i = 0; i < 131072; i++)
        if (hist[i]) bits -= (double)hist[i] * log2((double)hist[i] / (double)c);
    return bits;
}

typedef struct membuf {
    uint8_t *p;
    size_t len, cap;
} membuf;

static int membuf_sink(void *user, const void *bytes, size_t len)
{
    membuf *m = (membuf *)user;
    if (len > m->cap - m->len) {
        size_t cap = m->cap ? m->cap : 1 << 20;
        uint8_t *np;
        while (cap - m->len < len) cap *= 2;
        np = (uint8_t *)realloc(m->p, cap);
        if (!np) return -1;
        m->p = np;
        m->cap = cap;
    }
    memcpy(m->p + m->len, bytes, len);
    m->len += len;
    return 0;
}

typedef struct enc_row {
    double bytes, encode_s, encode_pool_s, apply_s, apply_verified_s;
} enc_row;

int main(int argc, char **argv)
{
    const char *model_name = argc > 1 ? argv[1] : "qwen3-0.6b";
    int steps = argc > 2 ? atoi(argv[2]) : 3, s, e;
    const char *mode = getenv("WSYNC_BENCH_MODE");
    const char *threads_env = getenv("WSYNC_BENCH_THREADS");
    const char *only = getenv("WSYNC_BENCH_ONLY");
    unsigned threads = threads_env ? (unsigned)atoi(threads_env) : 1;
    wsync_gen_model m;
    wsync_gen_config cfg;
    wsync_gen g;
    size_t i, nt, chunk = (size_t)1 << 20;
    uint16_t **prev, **copy, **target;
    uint32_t *pos = (uint32_t *)xmalloc(chunk * sizeof *pos), *hist = (uint32_t *)xmalloc(131072 * sizeof *hist);
    wsync_tensor *tb, *tn, *tt;
    wsync_pool *enc_pool;
    /* packed-max twice: its class-Rice coder (the default) and, last, the
       range coder it wrote before (WSYNC_DELTA_RANGE_CODER) */
    static const wsync_encoding encs[5] = {WSYNC_ENCODING_PACKED, WSYNC_ENCODING_PACKED_MAX, WSYNC_ENCODING_TRL_V1,
                                           WSYNC_ENCODING_TRL_V3, WSYNC_ENCODING_PACKED_MAX};
    static const unsigned enc_flags[5] = {0, 0, 0, 0, WSYNC_DELTA_RANGE_CODER};
    static const char *const enc_names[5] = {"packed", "packed-max", "trl-v1", "trl-v3", "pm-range"};
    enc_row rows[5];
    double t_memcmp = 0, t_diff = 0, t_digest = 0, bound = 0, total_bytes = 0;
    /* each path's diff and digest, [WSYNC_IMPL_*]; have[] those this build and CPU have */
    double t_pdiff[WSYNC_IMPL_COUNT], t_pdigest[WSYNC_IMPL_COUNT];
    int have[WSYNC_IMPL_COUNT], k;
    uint64_t changed_total = 0, elements_total = 0;
    uint64_t *dig_prev, *dig_next;
    volatile int sink_int = 0;
    volatile uint64_t sink_u64 = 0;

    if (wsync_gen_model_lookup(model_name, &m) != WSYNC_OK) {
        fprintf(stderr, "bench_delta: unknown model '%s' (try tiny, qwen3-0.6b, qwen2.5-7b)\n", model_name);
        return 2;
    }
    if (steps < 1) steps = 1;
    bench_cpu_print(stdout, "bench_delta");
    for (k = 0; k < WSYNC_IMPL_COUNT; k++) {
        uint8_t x = 0;
        uint32_t p1 = 0;
        int ok = 0;
        (void)wsync_diff_using((wsync_impl)k, &x, &x, 0, 1, &p1, &ok);
        have[k] = k != WSYNC_IMPL_AUTO && ok;
        t_pdiff[k] = t_pdigest[k] = 0;
    }
    wsync_gen_config_default(&cfg);
    cfg.mode = mode && strcmp(mode, "adamw") == 0 ? WSYNC_GEN_ADAMW : WSYNC_GEN_LIGHT;
    cfg.warm_start = 1;
    cfg.threads = 2;
    if (threads < 1) threads = 1;
    printf("bench_delta: %s, %llu parameters in %zu tensors, %d steps, generator %s, lr %g, %u thread%s\n",
           m.name, (unsigned long long)m.n_params, m.n_tensors, steps,
           cfg.mode == WSYNC_GEN_LIGHT ? "light" : "adamw", cfg.lr, threads, threads == 1 ? "" : "s");
    fflush(stdout);
    if (wsync_gen_init(&g, &m, &cfg) != WSYNC_OK) {
        fprintf(stderr, "bench_delta: generator init failed\n");
        return 1;
    }
    nt = m.n_tensors;
    prev = (uint16_t **)xmalloc(nt * sizeof *prev);
    copy = (uint16_t **)xmalloc(nt * sizeof *copy);
    target = (uint16_t **)xmalloc(nt * sizeof *target);
    tb = (wsync_tensor *)xmalloc(nt * sizeof *tb);
    tn = (wsync_tensor *)xmalloc(nt * sizeof *tn);
    tt = (wsync_tensor *)xmalloc(nt * sizeof *tt);
    dig_prev = (uint64_t *)xmalloc(nt * sizeof *dig_prev);
    dig_next = (uint64_t *)xmalloc(nt * sizeof *dig_next);
    for (i = 0; i < nt; i++) {
        const wsync_gen_tensor_info *info = &g.tensors[i].info;
        size_t bytes = (size_t)info->nelem * 2;
        prev[i] = (uint16_t *)xmalloc(bytes);
        copy[i] = (uint16_t *)xmalloc(bytes);
        target[i] = (uint16_t *)xmalloc(bytes);
        tb[i].name = tn[i].name = tt[i].name = info->name;
        tb[i].dtype = tn[i].dtype = tt[i].dtype = WSYNC_DTYPE_BF16;
        tb[i].rank = tn[i].rank = tt[i].rank = info->rank;
        tb[i].shape = tn[i].shape = tt[i].shape = info->shape;
        tb[i].nbytes = tn[i].nbytes = tt[i].nbytes = bytes;
        tb[i].data = prev[i];
        tn[i].data = g.bf16[i];
        tt[i].data = target[i];
        total_bytes += (double)bytes;
    }
    memset(rows, 0, sizeof rows);
    /* the encodes' pool: an eighth of the model, as wsync_publish keeps */
    if (!(enc_pool = wsync_pool_new((size_t)(total_bytes / 8) + ((size_t)16 << 20), NULL))) {
        fprintf(stderr, "bench_delta: out of memory\n");
        return 1;
    }
    for (s = 1; s <= steps; s++) {
        double t0, t_gen;
        uint64_t changed = 0;
        for (i = 0; i < nt; i++) {
            memcpy(prev[i], g.bf16[i], tb[i].nbytes);
            memcpy(copy[i], g.bf16[i], tb[i].nbytes);
            dig_prev[i] = wsync_digest(prev[i], (size_t)tb[i].nbytes); /* a publisher has these already */
        }
        t0 = now();
        wsync_gen_step(&g);
        t_gen = now() - t0;

        /* Baseline and scans, interleaved and best of three, so that a burst
           of load from elsewhere on the machine does not decide the ratio. */
        {
            double best_m = 1e30, best_d = 1e30, best_g = 1e30, best_pd[WSYNC_IMPL_COUNT], best_pg[WSYNC_IMPL_COUNT];
            int rep;
            for (k = 0; k < WSYNC_IMPL_COUNT; k++) best_pd[k] = best_pg[k] = 1e30;
            for (rep = 0; rep < 3; rep++) {
                size_t cnt = 0;
                t0 = now();
                for (i = 0; i < nt; i++) sink_int += memcmp(prev[i], copy[i], (size_t)tb[i].nbytes);
                if (now() - t0 < best_m) best_m = now() - t0;
                t0 = now();
                for (i = 0; i < nt; i++) {
                    size_t n = (size_t)(tb[i].nbytes / 2), off;
                    for (off = 0; off < n; off += chunk)
                        cnt += wsync_diff(prev[i] + off, g.bf16[i] + off, n - off < chunk ? n - off : chunk, 2, pos);
                }
                if (now() - t0 < best_d) best_d = now() - t0;
                t0 = now();
                for (i = 0; i < nt; i++) sink_u64 ^= wsync_digest(prev[i], (size_t)tb[i].nbytes);
                if (now() - t0 < best_g) best_g = now() - t0;
                changed = cnt;
                /* every path, each after a memcmp of its own, so that each
                   ratio's two times are minutes apart at most */
                for (k = 0; k < WSYNC_IMPL_COUNT; k++) {
                    size_t pc = 0;
                    uint64_t h = 0;
                    if (!have[k]) continue;
                    t0 = now();
                    for (i = 0; i < nt; i++) sink_int += memcmp(prev[i], copy[i], (size_t)tb[i].nbytes);
                    if (now() - t0 < best_m) best_m = now() - t0;
                    t0 = now();
                    for (i = 0; i < nt; i++) {
                        size_t n = (size_t)(tb[i].nbytes / 2), off;
                        for (off = 0; off < n; off += chunk)
                            pc += wsync_diff_using((wsync_impl)k, prev[i] + off, g.bf16[i] + off,
                                                   n - off < chunk ? n - off : chunk, 2, pos, NULL);
                    }
                    if (now() - t0 < best_pd[k]) best_pd[k] = now() - t0;
                    t0 = now();
                    for (i = 0; i < nt; i++) h ^= wsync_digest_using((wsync_impl)k, prev[i], (size_t)tb[i].nbytes, NULL);
                    if (now() - t0 < best_pg[k]) best_pg[k] = now() - t0;
                    sink_u64 ^= h;
                    if (pc != cnt) {
                        fprintf(stderr, "bench_delta: the %s diff found %zu changes, AUTO %zu\n",
                                wsync_impl_name((wsync_impl)k), pc, cnt);
                        return 1;
                    }
                }
            }
            t_memcmp += best_m;
            t_diff += best_d;
            t_digest += best_g;
            for (k = 0; k < WSYNC_IMPL_COUNT; k++) {
                t_pdiff[k] += best_pd[k];
                t_pdigest[k] += best_pg[k];
            }
        }
        for (i = 0; i < nt; i++) {
            uint64_t c;
            bound += bound_bits(prev[i], g.bf16[i], (size_t)(tb[i].nbytes / 2), hist, &c);
        }
        changed_total += changed;
        elements_total += m.n_params;
        printf("step %d: %.3f%% of elements changed (generated in %.1f s)\n", s,
               100.0 * (double)changed / (double)m.n_params, t_gen);
        fflush(stdout);

        for (e = 0; e < 5; e++) {
            membuf mb = {NULL, 0, 0};
            if (only && strcmp(only, enc_names[e]) != 0 && wsync_encoding_from_name(only) != encs[e]) continue;
            wsync_delta_options o;
            wsync_error err;
            wsync_delta_stats st;
            memset(&o, 0, sizeof o);
            o.encoding = encs[e];
            o.flags = enc_flags[e];
            o.threads = threads;
            o.base_step = (uint64_t)s - 1;
            o.step = (uint64_t)s;
            o.base_digests = dig_prev;
            o.result_digests_out = dig_next;
            { /* best of three, as for the memcmp baseline (the output is the same each time), with
                 the encoder's memory from malloc (fresh pages) and through a pool kept between
                 encodes (a publisher's steady state), alternated */
                double best = 1e30, best_pool = 1e30;
                int rep, pooled;
                for (rep = 0; rep < 3; rep++)
                    for (pooled = 0; pooled < 2; pooled++) {
                        double dt;
                        memset(&o.allocator, 0, sizeof o.allocator);
                        if (pooled) o.allocator = wsync_pool_allocator(enc_pool);
                        mb.len = 0;
                        t0 = now();
                        if (wsync_delta_encode(tb, tn, nt, &o, membuf_sink, &mb, &st, &err) != WSYNC_OK) {
                            fprintf(stderr, "encode %s: %s\n", enc_names[e], err.message);
                            return 1;
                        }
                        dt = now() - t0;
                        if (pooled && dt < best_pool) best_pool = dt;
                        if (!pooled && dt < best) best = dt;
                    }
                memset(&o.allocator, 0, sizeof o.allocator);
                rows[e].encode_s += best;
                rows[e].encode_pool_s += best_pool;
            }
            rows[e].bytes += (double)mb.len;
            for (i = 0; i < nt; i++) memcpy(target[i], prev[i], tb[i].nbytes);
            o.base_digests = NULL;
            o.result_digests_out = NULL;
            o.flags = WSYNC_DELTA_SKIP_BASE_DIGEST | WSYNC_DELTA_SKIP_RESULT_DIGEST;
            t0 = now();
            if (wsync_delta_apply(mb.p, mb.len, tt, nt, &o, NULL, &err) != WSYNC_OK) {
                fprintf(stderr, "apply %s: %s\n", enc_names[e], err.message);
                return 1;
            }
            rows[e].apply_s += now() - t0;
            for (i = 0; i < nt; i++)
                if (memcmp(target[i], g.bf16[i], tb[i].nbytes) != 0) {
                    fprintf(stderr, "apply %s: tensor %s differs from the trainer's\n",
                            enc_names[e], tb[i].name);
                    return 1;
                }
            if (encs[e] == WSYNC_ENCODING_PACKED || encs[e] == WSYNC_ENCODING_PACKED_MAX) {
                for (i = 0; i < nt; i++) memcpy(target[i], prev[i], tb[i].nbytes);
                o.flags = 0;
                t0 = now();
                if (wsync_delta_apply(mb.p, mb.len, tt, nt, &o, NULL, &err) != WSYNC_OK) {
                    fprintf(stderr, "apply %s (verified): %s\n", enc_names[e], err.message);
                    return 1;
                }
                rows[e].apply_verified_s += now() - t0;
            }
            free(mb.p);
        }
    }
    {
        double gb = total_bytes * steps / 1e9, bpc_bound = bound / 8.0 / (double)changed_total;
        printf("\nwhole model, %d steps, %.2f GB of bf16 per image, %.3f%% changed on average\n", steps,
               total_bytes / 1e9, 100.0 * (double)changed_total / (double)elements_total);
        printf("%-34s %10s %12s\n", "", "GB/s", "vs memcmp");
        printf("%-34s %10.2f %12s\n", "memcmp (two equal images)", 2 * gb / t_memcmp, "1.00");
        printf("%-34s %10.2f %12.2f\n", "diff (reads both images)", 2 * gb / t_diff, t_memcmp / t_diff);
        printf("%-34s %10.2f %12.2f\n", "digest (reads one image)", gb / t_digest, (t_memcmp / 2) / t_digest);
        printf("(digest compares bytes per second: memcmp covers an image's bytes in half its time)\n");
        printf("\nevery path, same run, same buffers (AUTO: diff %s, digest %s)\n", wsync_impl_name(wsync_diff_impl()),
               wsync_impl_name(wsync_digest_impl()));
        printf("%-10s %10s %12s %12s %14s\n", "path", "diff GB/s", "diff/memcmp", "digest GB/s", "digest/memcmp");
        for (k = 0; k < WSYNC_IMPL_COUNT; k++)
            if (have[k])
                printf("%-10s %10.2f %12.2f %12.2f %14.2f\n", wsync_impl_name((wsync_impl)k), 2 * gb / t_pdiff[k],
                       t_memcmp / t_pdiff[k], gb / t_pdigest[k], (t_memcmp / 2) / t_pdigest[k]);
        printf("\nmemoryless entropy bound: %.3f bytes per changed element\n", bpc_bound);
        printf("%-11s %12s %10s %10s %13s %11s %14s %14s\n", "encoding", "bytes/step", "B/changed", "vs bound",
               "encode/memcmp", "(fresh mem)", "apply Mchg/s", "+digests Mchg/s");
        for (e = 0; e < 5; e++) {
            double bpc = rows[e].bytes / (double)changed_total;
            char verified[32] = "-";
            if (only && strcmp(only, enc_names[e]) != 0 && wsync_encoding_from_name(only) != encs[e]) continue;
            if (rows[e].apply_verified_s > 0)
                snprintf(verified, sizeof verified, "%.1f", (double)changed_total / rows[e].apply_verified_s / 1e6);
            printf("%-11s %12.0f %10.3f %10.3f %13.2f %11.2f %14.1f %14s\n", enc_names[e],
                   rows[e].bytes / steps, bpc, bpc / bpc_bound, t_memcmp / rows[e].encode_pool_s,
                   t_memcmp / rows[e].encode_s,
                   (double)changed_total / rows[e].apply_s / 1e6, verified);
        }
        printf("(encode/memcmp: whole-model diff+encode time over memcmp time, the encoder's memory through a "
               "wsync_pool kept between encodes as wsync_publish does; fresh mem: from malloc on every encode; "
               "apply: decode and write, changed "
               "elements per second on %u thread%s, digest checks off; +digests: base and result digests "
               "verified)\n", threads, threads == 1 ? "" : "s");
    }
    wsync_pool_free(enc_pool);
    for (i = 0; i < nt; i++) {
        free(prev[i]);
        free(copy[i]);
        free(target[i]);
    }
    free(prev);
    free(copy);
    free(target);
    free(tb);
    free(tn);
    free(tt);
    free(pos);
    free(hist);
    free(dig_prev);
    free(dig_next);
    wsync_gen_free(&g);
    return sink_int == 12345 && sink_u64 == 1 ? 3 : 0;
}
