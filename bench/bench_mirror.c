/* The engine's pause with the mirror against a full apply of the same delta.

   build/bench_mirror [MODEL | elements_in_millions] [threads] [steps]
                                              (default qwen3-0.6b, 2, 5)

   MODEL is one of the generator's (tool/wsync_gen.h: tiny, qwen3-0.6b,
   qwen2.5-7b), its tensors' names and shapes in bf16; a number instead is a
   model of 8 equal tensors of that many million elements in all. Every step
   changes 1.6% of the elements (by one or two ulps) and is published
   (packed) into a memory store. Reported, medians over the steps (after
   two warm-up steps, in which the mirror's logs grow to their steady size,
   when there are more than 4; BENCH_MIRROR_VERBOSE=1 prints every step):
     apply   wsync_subscriber_sync of one delta into plain host tensors
             (today's full apply; state digest checked, as the mirror does)
     mirror  wsync_mirror_sync of the same delta into the mirror (the apply
             and the recording of its changes)
     pause   wsync_mirror_take, with a callback that copies each chunk
             (positions and values) into a staging buffer that stands in
             for device memory, as an engine would copy a chunk to the
             device and scatter it there (the definition)
     scatter the staged changes scattered into a second copy of the model
             afterwards, by the CPU (the engine's part, on the host; a CPU
             engine's pause would be pause + scatter)
   and the ratios pause/apply and mirror/plain apply (apply / mirror: the
   mirror's speed relative to a plain apply). The engine copy is checked
   equal to the trainer's image after every step. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_GEN_IMPLEMENTATION
#include "../tool/wsync_gen.h"
#include "bench_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void die(const char *what, const wsync_error *e)
{
    fprintf(stderr, "bench_mirror: %s: %s\n", what, e ? e->message : "out of memory");
    exit(1);
}

/* The engine stand-in: whole tensors copied into its memory; positions and
   values of the chunks appended to a staging buffer (one per take), which
   is scattered into its memory after the take. */
typedef struct eng {
    size_t n;
    uint8_t **data;
    uint8_t *stage;        /* entries: tensor index (8), position (8), value (2) */
    uint64_t len, cap;     /* bytes */
} eng;

static int stage_copy(void *user, const wsync_changes *c)
{
    eng *E = (eng *)user;
    uint64_t need;
    if (c->whole) {
        memcpy(E->data[c->index], c->values, (size_t)c->tensor->nbytes);
        return 0;
    }
    /* one header (index, count) then the chunk's positions and values, as
       one host-to-device copy of the chunk would carry them */
    need = 16 + c->count * (8 + (uint64_t)c->width);
    if (E->len + need > E->cap) {
        uint64_t cap = E->cap ? E->cap * 2 : ((uint64_t)64 << 20);
        uint8_t *p;
        while (cap < E->len + need) cap *= 2;
        if (!(p = (uint8_t *)realloc(E->stage, (size_t)cap))) return 1;
        E->stage = p;
        E->cap = cap;
    }
    {
        uint64_t h[2];
        h[0] = c->index;
        h[1] = c->count;
        memcpy(E->stage + E->len, h, 16);
    }
    memcpy(E->stage + E->len + 16, c->positions, (size_t)c->count * 8);
    memcpy(E->stage + E->len + 16 + c->count * 8, c->values, (size_t)c->count * c->width);
    E->len += need;
    return 0;
}

/* The engine's part after the take: the staged chunks scattered. */
static void stage_scatter(eng *E)
{
    uint64_t off = 0;
    while (off < E->len) {
        uint64_t h[2], k;
        const uint64_t *pos;
        const uint8_t *val;
        uint8_t *dst;
        memcpy(h, E->stage + off, 16);
        pos = (const uint64_t *)(const void *)(E->stage + off + 16);
        val = E->stage + off + 16 + h[1] * 8;
        dst = E->data[h[0]];
        for (k = 0; k < h[1]; k++) memcpy(dst + pos[k] * 2, val + k * 2, 2);
        off += 16 + h[1] * 10;
    }
    E->len = 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    const char *arg = argc > 1 ? argv[1] : "qwen3-0.6b";
    unsigned threads = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
    int steps = argc > 3 ? atoi(argv[3]) : 5, s, j;
    size_t nt, i;
    uint64_t total = 0, k, changed = 0;
    uint64_t (*shape)[2];
    uint64_t *off;
    char (*names)[WSYNC_GEN_NAME_MAX];
    uint32_t *rank;
    uint16_t *img, *plain;
    wsync_tensor *t, *pt;
    wsync_store st;
    wsync_chain_options co;
    wsync_publisher *p;
    wsync_subscriber *sub;
    wsync_mirror *m;
    wsync_mirror_options mo;
    wsync_error err;
    wsync_sync_stats ss;
    wsync_mirror_stats ms;
    eng E;
    double *ta, *tm, *tp, *tsc, t0;
    char label[96];

    if (steps < 1) steps = 1;
    if (threads < 1) threads = 1;
    bench_cpu_print(stdout, "bench_mirror");
    if (arg[0] >= '0' && arg[0] <= '9') {
        uint64_t mel = strtoull(arg, NULL, 10);
        nt = 8;
        shape = (uint64_t(*)[2])calloc(nt, sizeof *shape);
        names = (char(*)[WSYNC_GEN_NAME_MAX])calloc(nt, sizeof *names);
        rank = (uint32_t *)calloc(nt, sizeof *rank);
        if (!shape || !names || !rank) die("memory", NULL);
        for (i = 0; i < nt; i++) {
            snprintf(names[i], sizeof names[i], "layer.%zu", i);
            shape[i][0] = mel * 1000000 / nt;
            rank[i] = 1;
        }
        snprintf(label, sizeof label, "8 tensors of %llu M elements", (unsigned long long)(mel / 8));
    } else {
        wsync_gen_model gm;
        if (wsync_gen_model_lookup(arg, &gm) != WSYNC_OK) {
            fprintf(stderr, "bench_mirror: unknown model '%s' (try tiny, qwen3-0.6b, qwen2.5-7b, or a number)\n", arg);
            return 2;
        }
        nt = gm.n_tensors;
        shape = (uint64_t(*)[2])calloc(nt, sizeof *shape);
        names = (char(*)[WSYNC_GEN_NAME_MAX])calloc(nt, sizeof *names);
        rank = (uint32_t *)calloc(nt, sizeof *rank);
        if (!shape || !names || !rank) die("memory", NULL);
        for (i = 0; i < nt; i++) {
            wsync_gen_tensor_info info;
            wsync_gen_model_tensor(&gm, i, &info);
            memcpy(names[i], info.name, sizeof names[i]);
            shape[i][0] = info.shape[0];
            shape[i][1] = info.shape[1];
            rank[i] = info.rank;
        }
        snprintf(label, sizeof label, "%s shapes (%zu tensors)", arg, nt);
    }
    off = (uint64_t *)calloc(nt + 1, sizeof *off);
    t = (wsync_tensor *)calloc(nt, sizeof *t);
    pt = (wsync_tensor *)calloc(nt, sizeof *pt);
    ta = (double *)calloc((size_t)steps, sizeof(double));
    tm = (double *)calloc((size_t)steps, sizeof(double));
    tp = (double *)calloc((size_t)steps, sizeof(double));
    tsc = (double *)calloc((size_t)steps, sizeof(double));
    if (!off || !t || !pt || !ta || !tm || !tp || !tsc) die("memory", NULL);
    for (i = 0; i < nt; i++) {
        off[i] = total;
        total += shape[i][0] * (rank[i] == 2 ? shape[i][1] : 1);
    }
    off[nt] = total;
    img = (uint16_t *)malloc((size_t)total * 2);
    plain = (uint16_t *)calloc((size_t)total, 2);
    memset(&E, 0, sizeof E);
    E.n = nt;
    E.data = (uint8_t **)calloc(nt, sizeof *E.data);
    if (!img || !plain || !E.data) die("memory", NULL);
    for (k = 0; k < total; k++) img[k] = (uint16_t)(0x3C00 + (mix64(k) & 0x3FF) - 0x200);
    for (i = 0; i < nt; i++) {
        if (wsync_tensor_dense(&t[i], names[i], WSYNC_DTYPE_BF16, rank[i], shape[i], img + off[i], &err) != WSYNC_OK ||
            wsync_tensor_dense(&pt[i], names[i], WSYNC_DTYPE_BF16, rank[i], shape[i], plain + off[i], &err) != WSYNC_OK)
            die("tensor", &err);
        if (!(E.data[i] = (uint8_t *)malloc((size_t)(off[i + 1] - off[i]) * 2))) die("memory", NULL);
    }
    wsync_store_mem_open(NULL, &st, &err);
    memset(&co, 0, sizeof co);
    co.threads = threads;
    co.anchor_every = 1000;
    co.retain = 1000;
    co.flags = WSYNC_CHAIN_VERIFY_STATE;
    if (wsync_publisher_open(&st, &co, &p, &err) != WSYNC_OK || wsync_publish(p, 0, t, nt, NULL, &err) != WSYNC_OK)
        die("publish", &err);
    if (wsync_subscriber_open(&st, pt, nt, &co, &sub, &err) != WSYNC_OK) die("subscriber", &err);
    memset(&mo, 0, sizeof mo);
    mo.chain = co;
    if (wsync_mirror_open(&st, NULL, 0, &mo, &m, &err) != WSYNC_OK) die("mirror", &err);
    if (wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &err) != WSYNC_OK ||
        wsync_mirror_sync(m, WSYNC_STEP_LATEST, &ss, &err) != WSYNC_OK ||
        wsync_mirror_take(m, stage_copy, &E, &ms, &err) != WSYNC_OK)
        die("step 0", &err);
    stage_scatter(&E);
    for (s = 1; s <= steps; s++) {
        changed = 0;
        for (k = 0; k < total; k++) { /* 1.6% */
            uint64_t h = mix64(k * 31 + (uint64_t)s);
            if (h % 1000 < 16) {
                img[k] = (uint16_t)(img[k] + ((h >> 32) & 1 ? 1 : 2));
                changed++;
            }
        }
        if (wsync_publish(p, (uint64_t)s, t, nt, NULL, &err) != WSYNC_OK) die("publish", &err);
        /* the two applies in turn, in alternating order (a loaded machine
           and the caches favour neither) */
        for (j = 0; j < 2; j++) {
            t0 = now_s();
            if ((j ^ (s & 1)) == 0) {
                if (wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &err) != WSYNC_OK) die("subscriber sync", &err);
                ta[s - 1] = now_s() - t0;
            } else {
                if (wsync_mirror_sync(m, WSYNC_STEP_LATEST, &ss, &err) != WSYNC_OK) die("mirror sync", &err);
                tm[s - 1] = now_s() - t0;
            }
        }
        if (wsync_mirror_take(m, stage_copy, &E, &ms, &err) != WSYNC_OK) die("take", &err);
        if (getenv("BENCH_MIRROR_VERBOSE")) printf("  step %d: plain %.4f s, mirror %.4f s (%s first)\n", s, ta[s - 1], tm[s - 1], (s & 1) ? "mirror" : "plain");
        tp[s - 1] = ms.pause_seconds;
        t0 = now_s();
        stage_scatter(&E);
        tsc[s - 1] = now_s() - t0;
        if (ms.whole_tensors || ms.positions != changed) {
            fprintf(stderr, "bench_mirror: step %d handed %llu positions and %llu whole tensors, %llu changed\n", s,
                    (unsigned long long)ms.positions, (unsigned long long)ms.whole_tensors,
                    (unsigned long long)changed);
            return 1;
        }
        for (i = 0; i < nt; i++)
            if (memcmp(E.data[i], img + off[i], (size_t)(off[i + 1] - off[i]) * 2) != 0) {
                fprintf(stderr, "bench_mirror: the engine differs at step %d\n", s);
                return 1;
            }
    }
    {
        /* the speed ratio step by step (the two applies of a step ran one
           right after the other), before the medians sort the times */
        /* the first steps grow the mirror's logs to their steady size
           (allocation and first touch, once per mirror): reported apart,
           and left out of the medians when there are steps enough */
        int warm = steps > 4 ? 2 : 0, n = steps - warm;
        double *rs = (double *)calloc((size_t)steps, sizeof(double)), rlo, rhi, rmed;
        if (!rs) die("memory", NULL);
        for (j = 0; j < warm; j++)
            printf("  warm-up step %d (the mirror's logs grow): plain %.4f s, mirror %.4f s\n", j + 1, ta[j], tm[j]);
        for (j = 0; j < n; j++) rs[j] = ta[warm + j] / tm[warm + j];
        rmed = median(rs, n);
        rlo = rs[0];
        rhi = rs[n - 1];
        free(rs);
        {
        double a = median(ta + warm, n), mi = median(tm + warm, n), pa = median(tp + warm, n), sc = median(tsc + warm, n);
        printf("bench_mirror: %s, %.0f M bf16 elements, 1.6%% changed per step, %u threads, medians of %d steps after %d warm-up\n",
               label, (double)total / 1e6, threads, n, warm);
        printf("  records %.1f MiB (bitmaps and the log of one step), %.1f MB handed a step\n",
               (double)ms.record_bytes / 1048576.0, (double)ms.bytes / 1e6);
        printf("  plain apply (subscriber sync) %.4f s, mirror sync %.4f s\n", a, mi);
        printf("  engine pause (take, chunks copied to a staging buffer) %.4f s; then the CPU scatter %.4f s\n", pa, sc);
        printf("  ratios: pause/apply %.3f (target <= 0.15), mirror/plain apply speed %.3f (target >= 0.9), "
               "(pause+scatter)/apply %.3f\n",
               pa / a, a / mi, (pa + sc) / a);
        printf("  mirror/plain apply speed step by step (plain/mirror of the same step): median %.3f, %.3f-%.3f "
               "over %d steps\n", rmed, rlo, rhi, n);
        }
    }
    wsync_mirror_close(m);
    wsync_subscriber_close(sub);
    wsync_publisher_close(p);
    wsync_store_close(&st);
    for (i = 0; i < nt; i++) free(E.data[i]);
    free(E.data);
    free(E.stage);
    free(img);
    free(plain);
    free(t);
    free(pt);
    free(off);
    free(shape);
    free(names);
    free(rank);
    free(ta);
    free(tm);
    free(tp);
    free(tsc);
    return 0;
}
