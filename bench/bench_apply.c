/* bench_apply: apply one delta file to its base, best of N, next to a bare
   scatter of the same changes measured in the same run, the two taking
   turns round by round.

   usage: bench_apply [--reps N] [--threads T] [--digests] BASE DELTA

   The output opens with the CPU, its SIMD flags, the paths this build has
   and the ones AUTO chose (bench/bench_cpu.h); `make bench-apply` runs a
   portable build (WSYNC_NO_SIMD, build/bench_apply_portable) next to this
   one. An untimed apply first gives the changed elements (the result
   diffed against BASE). Then N rounds (default 5), each with fresh copies
   of BASE's tensors (the copy is not timed): the delta applied with malloc
   (whose large blocks are fresh pages each time, zeroed by the kernel on
   first touch), applied through a wsync_pool kept between applies (as a
   subscriber applies step after step), and the same changes written by a
   bare loop that already knows every position and value (one store per
   change): the least any apply must do, since it reads and writes each
   touched cache line. Both digest checks are skipped unless --digests is
   given. The loop's result must equal the apply's, byte for byte.

   It prints the changes, the delta's bytes per change, the apply's and the
   loop's best times (the apply's both ways), changes per second, ns per
   change, their ratio, and the spread of the ratio over the rounds: a
   machine whose speed moves between runs moves both sides of a round.
   Reproduce the README's per-encoding apply figures with:

     build/wsync gen --model qwen3-0.6b --step 1 -o s1.st
     build/wsync gen --model qwen3-0.6b --step 2 -o s2.st
     build/wsync diff s1.st s2.st -o d.pm --encoding packed-max
     build/bench_apply s1.st d.pm */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "bench_cpu.h"

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
        fprintf(stderr, "bench_apply: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: bench_apply [--reps N] [--threads T] [--digests] BASE DELTA\n"
               "  apply DELTA (any encoding) to copies of BASE's tensors N times (default 5),\n"
               "  best of N, next to a bare scatter of the same changes in the same run\n"
               "  --reps N      applies and scatters to time (1..1000)\n"
               "  --threads T   apply on T threads, 1..16 (default 1; the scatter is on one)\n"
               "  --digests     check the packed encodings' base and result digests too\n");
    return f == stdout ? 0 : 2;
}

static int parse_count(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* One tensor's changes: positions and new values, as the scatter writes them. */
typedef struct change_list {
    uint32_t *pos;
    uint8_t *val;
    size_t n;
    unsigned w;
} change_list;

/* The changes of one tensor, base -> result, in chunks of at most 2^20
   elements (wsync_diff writes up to one position per element). */
static void find_changes(const uint8_t *base, const uint8_t *res, uint64_t nelem, unsigned w, change_list *cl,
                         uint32_t *tmp)
{
    size_t cap = 1024, k;
    uint64_t at;
    cl->w = w;
    cl->n = 0;
    cl->pos = (uint32_t *)xmalloc(cap * sizeof(uint32_t));
    cl->val = (uint8_t *)xmalloc(cap * w);
    for (at = 0; at < nelem; at += (uint64_t)1 << 20) {
        uint64_t len = nelem - at < ((uint64_t)1 << 20) ? nelem - at : ((uint64_t)1 << 20);
        size_t c = wsync_diff(base + at * w, res + at * w, (size_t)len, w, tmp);
        if (cl->n + c > cap) {
            while (cl->n + c > cap) cap *= 2;
            cl->pos = (uint32_t *)realloc(cl->pos, cap * sizeof(uint32_t));
            cl->val = (uint8_t *)realloc(cl->val, cap * w);
            if (!cl->pos || !cl->val) {
                fprintf(stderr, "bench_apply: out of memory (a change list of %zu)\n", cap);
                exit(1);
            }
        }
        for (k = 0; k < c; k++) {
            uint64_t p = at + tmp[k];
            cl->pos[cl->n + k] = (uint32_t)p;
            memcpy(cl->val + (cl->n + k) * w, res + p * w, w);
        }
        cl->n += c;
    }
}

/* The bare loop: each change stored at its position, the width a constant. */
static void scatter(uint8_t *dst, const change_list *cl)
{
    size_t k, n = cl->n;
    const uint32_t *pos = cl->pos;
    switch (cl->w) {
    case 1:
        for (k = 0; k < n; k++) dst[pos[k]] = cl->val[k];
        break;
    case 2:
        for (k = 0; k < n; k++) memcpy(dst + 2 * (size_t)pos[k], cl->val + 2 * k, 2);
        break;
    case 4:
        for (k = 0; k < n; k++) memcpy(dst + 4 * (size_t)pos[k], cl->val + 4 * k, 4);
        break;
    default:
        for (k = 0; k < n; k++) memcpy(dst + 8 * (size_t)pos[k], cl->val + 8 * k, 8);
        break;
    }
}

int main(int argc, char **argv)
{
    long reps = 5, threads = 1;
    int digests = 0, i, r;
    const char *base_path = NULL, *delta_path = NULL;
    wsync_mapped mb, md;
    wsync_st_file st;
    wsync_error err;
    wsync_delta_options o;
    wsync_delta_stats ds;
    wsync_tensor *tt;
    change_list *cl;
    uint32_t *tmp;
    size_t nt, t;
    uint64_t changes = 0, listed = 0;
    double best_apply = 1e30, best_pooled = 1e30, best_scatter = 1e30;
    uint64_t model_bytes = 0;
    wsync_pool *pool;
    size_t kept;
    uint8_t **sc;
    double rmin = 1e30, rmax = 0, pmin = 1e30, pmax = 0;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
        if (!strcmp(argv[i], "--digests")) {
            digests = 1;
        } else if (!strcmp(argv[i], "--reps")) {
            if (i + 1 >= argc || parse_count(argv[i + 1], 1, 1000, &reps)) {
                fprintf(stderr, "bench_apply: --reps needs a count (1..1000)\n");
                return 2;
            }
            i++;
        } else if (!strcmp(argv[i], "--threads")) {
            if (i + 1 >= argc || parse_count(argv[i + 1], 1, 16, &threads)) {
                fprintf(stderr, "bench_apply: --threads needs a count (1..16, the most an apply uses)\n");
                return 2;
            }
            i++;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "bench_apply: unknown option %s\n", argv[i]);
            return usage(stderr);
        } else if (!base_path) {
            base_path = argv[i];
        } else if (!delta_path) {
            delta_path = argv[i];
        } else {
            return usage(stderr);
        }
    }
    if (!delta_path) return usage(stderr);
    bench_cpu_print(stdout, "bench_apply");

    if (wsync_file_map(base_path, &mb, &err) || wsync_st_parse(mb.bytes, mb.size, NULL, &st, &err)) {
        fprintf(stderr, "bench_apply: %s: %s\n", base_path, err.message);
        return 1;
    }
    if (wsync_file_map(delta_path, &md, &err) || wsync_delta_info(md.bytes, md.size, &ds, &err)) {
        fprintf(stderr, "bench_apply: %s: %s\n", delta_path, err.message);
        return 1;
    }

    nt = st.n_tensors;
    tt = (wsync_tensor *)xmalloc(nt * sizeof *tt);
    cl = (change_list *)xmalloc(nt * sizeof *cl);
    tmp = (uint32_t *)xmalloc(((size_t)1 << 20) * sizeof(uint32_t));
    for (t = 0; t < nt; t++) {
        const wsync_st_tensor *s = &st.tensors[t];
        unsigned bits = wsync_dtype_bits(s->dtype);
        if (bits % 8 || bits > 64 || s->nelem > ((uint64_t)1 << 32)) {
            fprintf(stderr, "bench_apply: %s: tensor %s: the scatter takes 1, 2, 4 or 8-byte elements, "
                            "at most 2^32 of them\n", base_path, s->name);
            return 1;
        }
        tt[t].name = s->name;
        tt[t].dtype = s->dtype;
        tt[t].rank = s->rank;
        tt[t].shape = s->shape;
        tt[t].nbytes = s->end - s->begin;
        tt[t].data = xmalloc((size_t)tt[t].nbytes);
    }

    memset(&o, 0, sizeof o);
    o.threads = (unsigned)threads;
    o.flags = digests ? 0 : WSYNC_DELTA_SKIP_BASE_DIGEST | WSYNC_DELTA_SKIP_RESULT_DIGEST;
    /* each rep applies twice: with malloc, whose large blocks are fresh
       pages every time, and through a pool kept between applies, as a
       subscriber does (the steady state of a follower) */
    for (t = 0; t < nt; t++) model_bytes += tt[t].nbytes;
    if (!(pool = wsync_pool_new((size_t)(model_bytes / 8), NULL))) {
        fprintf(stderr, "bench_apply: out of memory\n");
        return 1;
    }
    /* an untimed apply: its result gives the changes the scatter writes */
    for (t = 0; t < nt; t++) memcpy(tt[t].data, st.tensors[t].data, (size_t)tt[t].nbytes);
    if (wsync_delta_apply(md.bytes, md.size, tt, nt, &o, &ds, &err)) {
        fprintf(stderr, "bench_apply: applying %s to %s: %s\n", delta_path, base_path, err.message);
        return 1;
    }
    listed = ds.changed;
    for (t = 0; t < nt; t++) {
        find_changes(st.tensors[t].data, (const uint8_t *)tt[t].data, st.tensors[t].nelem,
                     wsync_dtype_bits(st.tensors[t].dtype) / 8, &cl[t], tmp);
        changes += cl[t].n;
    }
    if (changes == 0) {
        fprintf(stderr, "bench_apply: %s changes nothing in %s: no rate to measure\n", delta_path, base_path);
        return 1;
    }
    sc = (uint8_t **)xmalloc(nt * sizeof *sc);
    for (t = 0; t < nt; t++) sc[t] = (uint8_t *)xmalloc((size_t)tt[t].nbytes);
    /* rounds: apply, apply through the pool, scatter; each ratio from one round */
    for (r = 0; r < reps; r++) {
        int pooled;
        double ta = 0, tp = 0, ts, t0;
        for (pooled = 0; pooled < 2; pooled++) {
            double dt;
            memset(&o.allocator, 0, sizeof o.allocator);
            if (pooled) o.allocator = wsync_pool_allocator(pool);
            for (t = 0; t < nt; t++) memcpy(tt[t].data, st.tensors[t].data, (size_t)tt[t].nbytes);
            t0 = now();
            if (wsync_delta_apply(md.bytes, md.size, tt, nt, &o, &ds, &err)) {
                fprintf(stderr, "bench_apply: applying %s to %s: %s\n", delta_path, base_path, err.message);
                return 1;
            }
            dt = now() - t0;
            if (pooled) tp = dt;
            else ta = dt;
            if (pooled && dt < best_pooled) best_pooled = dt;
            if (!pooled && dt < best_apply) best_apply = dt;
        }
        for (t = 0; t < nt; t++) memcpy(sc[t], st.tensors[t].data, (size_t)tt[t].nbytes);
        t0 = now();
        for (t = 0; t < nt; t++) scatter(sc[t], &cl[t]);
        ts = now() - t0;
        if (ts < best_scatter) best_scatter = ts;
        if (ts / ta < rmin) rmin = ts / ta;
        if (ts / ta > rmax) rmax = ts / ta;
        if (ts / tp < pmin) pmin = ts / tp;
        if (ts / tp > pmax) pmax = ts / tp;
    }
    kept = wsync_pool_kept(pool);
    wsync_pool_free(pool);
    for (t = 0; t < nt; t++)
        if (memcmp(sc[t], tt[t].data, (size_t)tt[t].nbytes)) {
            fprintf(stderr, "bench_apply: tensor %s: the scatter's result differs from the apply's\n", tt[t].name);
            return 1;
        }
    for (t = 0; t < nt; t++) free(sc[t]);
    free(sc);

    printf("bench_apply: %s (%s, %.1f MB) on %s: %llu changes in %zu tensors, %.3f bytes a change\n",
           delta_path, wsync_encoding_name(ds.encoding), (double)md.size / 1e6, base_path,
           (unsigned long long)changes, nt, (double)md.size / (double)changes);
    if (listed != changes)
        printf("  (the delta lists %llu elements, %llu of which differ from this base: is it the delta's base?%s)\n",
               (unsigned long long)listed, (unsigned long long)changes,
               digests ? "" : " --digests would check");
    printf("  apply (%ld thread%s, digests %s): best of %ld %.1f ms, %.1f M changes/s, %.2f ns a change\n", threads,
           threads == 1 ? "" : "s", digests ? "checked" : "skipped", reps, best_apply * 1e3,
           (double)changes / best_apply / 1e6, best_apply / (double)changes * 1e9);
    printf("  the same through a wsync_pool kept between applies (%.1f MB kept): best of %ld %.1f ms, "
           "%.1f M changes/s, %.2f ns a change\n", (double)kept / 1e6, reps, best_pooled * 1e3,
           (double)changes / best_pooled / 1e6, best_pooled / (double)changes * 1e9);
    printf("  bare scatter of the same changes (one thread): best of %ld %.1f ms, %.1f M changes/s, %.2f ns a change\n",
           reps, best_scatter * 1e3, (double)changes / best_scatter / 1e6, best_scatter / (double)changes * 1e9);
    printf("  apply / scatter speed: %.3f (through the pool: %.3f)\n", best_scatter / best_apply,
           best_scatter / best_pooled);
    printf("  apply / scatter in each of %ld rounds, interleaved: %.3f-%.3f (through the pool: %.3f-%.3f)\n", reps,
           rmin, rmax, pmin, pmax);

    for (t = 0; t < nt; t++) {
        free(tt[t].data);
        free(cl[t].pos);
        free(cl[t].val);
    }
    free(tt);
    free(cl);
    free(tmp);
    wsync_st_free(&st);
    wsync_file_unmap(&mb);
    wsync_file_unmap(&md);
    return 0;
}
