/* The pipelined executor: stages run concurrently in FIFO order, a task's
   staging bytes are its own while it is in flight, the watermark is never
   exceeded, mesh groups are separated by the barrier, failures stop it
   cleanly and name the task and stage. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"

#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>

typedef struct job {
    uint32_t id;
    uint64_t dst;             /* where the last stage puts its bytes in out */
} job;

typedef struct ctx {
    uint8_t *out;
    job *jobs;
    pthread_mutex_t mu;
    unsigned concurrent, max_concurrent;
    size_t done_last[64];      /* per group: tasks that left the last stage */
    size_t entered[64];        /* per group: tasks that entered stage 0 */
    size_t group_size[64];
    int barrier_ok;
    uint32_t barriers[64];
    unsigned n_barriers;
    int fail_stage;
    uint32_t fail_task;
    uint32_t fail_barrier;
    size_t ran[WSYNC_EXEC_STAGES_MAX];
    int sleepy;
    double *wstart;            /* pacing test: when the last stage began each task */
    double gref[64];           /* pacing test: a time before each group's first task entered */
} ctx;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void enter(ctx *c, unsigned stage)
{
    pthread_mutex_lock(&c->mu);
    c->concurrent++;
    if (c->concurrent > c->max_concurrent) c->max_concurrent = c->concurrent;
    c->ran[stage]++;
    pthread_mutex_unlock(&c->mu);
}
static void leave(ctx *c)
{
    pthread_mutex_lock(&c->mu);
    c->concurrent--;
    pthread_mutex_unlock(&c->mu);
}

static uint8_t pat(uint32_t id, uint64_t i)
{
    return (uint8_t)(id * 31u + i * 7u + (i >> 8));
}

/* stage 0: fill the task's staging bytes with its pattern */
static wsync_result s_fill(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t off, wsync_error *err)
{
    ctx *c = (ctx *)user;
    const job *j = (const job *)t->user;
    uint64_t i;
    (void)off;
    (void)err;
    enter(c, 0);
    pthread_mutex_lock(&c->mu);
    c->entered[t->group]++;
    pthread_mutex_unlock(&c->mu);
    for (i = 0; i < t->tmp_bytes; i++) tmp[i] = pat(j->id, i);
    if (c->sleepy) usleep(300);
    leave(c);
    if (c->fail_stage == 0 && j->id == c->fail_task) {
        snprintf(err->message, sizeof err->message, "%s", "injected");
        return WSYNC_ERR_IO;
    }
    return WSYNC_OK;
}

/* stage 1: check the pattern is intact, then invert it */
static wsync_result s_check(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t off, wsync_error *err)
{
    ctx *c = (ctx *)user;
    const job *j = (const job *)t->user;
    uint64_t i;
    wsync_result r = WSYNC_OK;
    (void)off;
    enter(c, 1);
    for (i = 0; i < t->tmp_bytes; i++)
        if (tmp[i] != pat(j->id, i)) {
            snprintf(err->message, sizeof err->message, "task %u byte %llu overwritten", j->id,
                     (unsigned long long)i);
            r = WSYNC_ERR_DIGEST_MISMATCH;
            break;
        }
    for (i = 0; r == WSYNC_OK && i < t->tmp_bytes; i++) tmp[i] = (uint8_t)~tmp[i];
    if (c->sleepy) usleep(300);
    leave(c);
    if (r == WSYNC_OK && c->fail_stage == 1 && j->id == c->fail_task) {
        snprintf(err->message, sizeof err->message, "%s", "injected");
        return WSYNC_ERR_IO;
    }
    return r;
}

/* stage 2: "write": the inverted bytes to the output */
static wsync_result s_write(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t off, wsync_error *err)
{
    ctx *c = (ctx *)user;
    const job *j = (const job *)t->user;
    (void)off;
    (void)err;
    if (c->wstart) c->wstart[j->id] = now_s();
    enter(c, 2);
    if (t->tmp_bytes) memcpy(c->out + j->dst, tmp, (size_t)t->tmp_bytes);
    if (c->sleepy) usleep(300);
    pthread_mutex_lock(&c->mu);
    c->done_last[t->group]++;
    pthread_mutex_unlock(&c->mu);
    leave(c);
    return WSYNC_OK;
}

static wsync_result s_barrier(void *user, uint32_t group, wsync_error *err)
{
    ctx *c = (ctx *)user;
    pthread_mutex_lock(&c->mu);
    /* every task of the group is through, none of the next one started */
    if (c->done_last[group] != c->group_size[group] || c->entered[group + 1] != 0) c->barrier_ok = 0;
    c->barriers[c->n_barriers++] = group;
    if (group + 1 < 64) c->gref[group + 1] = now_s(); /* the next group enters after this */
    pthread_mutex_unlock(&c->mu);
    if (c->fail_barrier == group + 1) {
        snprintf(err->message, sizeof err->message, "%s", "peer gone");
        return WSYNC_ERR_IO;
    }
    return WSYNC_OK;
}

typedef struct setup {
    ctx c;
    wsync_exec_options o;
    wsync_exec_task *t;
    job *j;
    uint8_t *arena;
    size_t n;
    uint64_t total;
} setup;

/* n tasks of sizes from size(i), groups from group(i) */
static void make(setup *s, size_t n, uint64_t watermark, uint64_t (*size)(size_t), uint32_t (*group)(size_t))
{
    size_t i;
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->c.mu, NULL);
    s->c.barrier_ok = 1;
    s->c.fail_stage = -1;
    s->n = n;
    s->t = (wsync_exec_task *)calloc(n ? n : 1, sizeof *s->t);
    s->j = (job *)calloc(n ? n : 1, sizeof *s->j);
    for (i = 0; i < n; i++) {
        s->j[i].id = (uint32_t)i;
        s->j[i].dst = s->total;
        s->t[i].tmp_bytes = size(i);
        s->t[i].group = group ? group(i) : 0;
        s->t[i].user = &s->j[i];
        s->total += s->t[i].tmp_bytes;
        s->c.group_size[s->t[i].group]++;
    }
    s->c.out = (uint8_t *)calloc(s->total ? s->total : 1, 1);
    s->arena = watermark ? (uint8_t *)malloc(watermark) : NULL;
    s->o.staging = s->arena;
    s->o.staging_len = watermark;
    s->o.n_stages = 3;
    s->o.stages[0] = s_fill;
    s->o.stages[1] = s_check;
    s->o.stages[2] = s_write;
    s->o.stage_names[0] = "stage-in";
    s->o.stage_names[1] = "prepare";
    s->o.stage_names[2] = "write";
    s->o.barrier = s_barrier;
    s->o.user = &s->c;
}

static void unmake(setup *s)
{
    free(s->t);
    free(s->j);
    free(s->c.out);
    free(s->arena);
    pthread_mutex_destroy(&s->c.mu);
}

static int out_ok(const setup *s, size_t upto)
{
    size_t i;
    uint64_t k;
    for (i = 0; i < upto; i++)
        for (k = 0; k < s->t[i].tmp_bytes; k++)
        {
            uint8_t want = (uint8_t)~pat((uint32_t)i, k);
            if (s->c.out[s->j[i].dst + k] != want) return 0;
        }
    return 1;
}

static uint64_t size_mixed(size_t i)
{
    return 1 + (uint64_t)((i * 2654435761u) % 3000u);
}
static uint64_t size_60(size_t i)
{
    (void)i;
    return 60;
}
static uint64_t size_zero(size_t i)
{
    (void)i;
    return 0;
}
static uint32_t group_by_100(size_t i)
{
    return (uint32_t)(i / 100);
}

static void test_many_tasks(void)
{
    setup s;
    wsync_exec_stats st;
    wsync_error err;
    make(&s, 2000, 8000, size_mixed, NULL);
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_OK);
    CHECK(st.tasks == 2000);
    CHECK(out_ok(&s, s.n));
    CHECK(st.peak_tmp_bytes <= 8000);
    CHECK(st.peak_tmp_bytes >= 3000); /* more than one task in flight at a time */
    CHECK(s.c.ran[0] == 2000 && s.c.ran[1] == 2000 && s.c.ran[2] == 2000);
    CHECK(st.groups == 1);
    unmake(&s);
}

static void test_stages_overlap(void)
{
    setup s;
    wsync_exec_stats st;
    wsync_error err;
    make(&s, 200, 1 << 16, size_mixed, NULL);
    s.c.sleepy = 1;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_OK);
    CHECK(out_ok(&s, s.n));
    CHECK(st.peak_active >= 2);
    CHECK(s.c.max_concurrent >= 2);
    CHECK(st.busy_s[0] > 0 && st.busy_s[1] > 0 && st.busy_s[2] > 0);
    unmake(&s);
}

static void test_watermark_serialises(void)
{
    setup s;
    wsync_exec_stats st;
    wsync_error err;
    make(&s, 50, 100, size_60, NULL); /* two tasks of 60 never fit in 100 */
    s.c.sleepy = 1;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_OK);
    CHECK(st.peak_tmp_bytes == 60);
    CHECK(st.peak_active == 1);
    CHECK(s.c.max_concurrent == 1);
    CHECK(out_ok(&s, s.n));
    unmake(&s);
    make(&s, 50, 120, size_60, NULL); /* exactly two */
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_OK);
    CHECK(st.peak_tmp_bytes <= 120);
    CHECK(out_ok(&s, s.n));
    unmake(&s);
}

static void test_groups_and_barrier(void)
{
    setup s;
    wsync_exec_stats st;
    wsync_error err;
    make(&s, 450, 4096, size_mixed, group_by_100); /* groups 0..4 */
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_OK);
    CHECK(out_ok(&s, s.n));
    CHECK(s.c.barrier_ok);
    CHECK(s.c.n_barriers == 4);
    CHECK(s.c.barriers[0] == 0 && s.c.barriers[3] == 3);
    CHECK(st.groups == 5);
    unmake(&s);
}

static void test_stage_failure(void)
{
    setup s;
    wsync_exec_stats st;
    wsync_error err;
    make(&s, 500, 4096, size_mixed, NULL);
    s.c.fail_stage = 1;
    s.c.fail_task = 37;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_ERR_IO);
    CHECK(err.code == WSYNC_ERR_IO);
    CHECK(strstr(err.message, "task 37") != NULL);
    CHECK(strstr(err.message, "prepare") != NULL);
    CHECK(strstr(err.message, "injected") != NULL);
    CHECK(s.c.ran[2] <= 37);             /* nothing after the failure was written */
    CHECK(out_ok(&s, s.c.ran[2]));       /* and what was written is right */
    CHECK(s.c.ran[0] < 500);             /* admission stopped */
    unmake(&s);

    make(&s, 300, 4096, size_mixed, group_by_100);
    s.c.fail_barrier = 2; /* after group 1 */
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_ERR_IO);
    CHECK(strstr(err.message, "barrier after mesh group 1") != NULL);
    CHECK(strstr(err.message, "peer gone") != NULL);
    CHECK(s.c.entered[2] == 0);
    unmake(&s);
}

static uint32_t group_by_10(size_t i)
{
    return (uint32_t)(i / 10);
}

/* Pacing: no task's last stage starts before its group's start plus its
   start_s (a lower bound the clock proves), tasks stay in order, the wait
   is counted; a task without start_s is not held. */
static void test_pacing(void)
{
    setup s;
    wsync_exec_stats st;
    wsync_error err;
    size_t i;
    double t0, wall;
    int attempt, counted = 0;
    /* The bounds and the order hold on every run. How long the executor
       waited depends on how late the machine ran the tasks (a task already
       past its start does not wait), so on a loaded machine under a
       sanitizer one run can wait less than one group's 27 ms: the wait
       must be counted in at least one of three runs. */
    for (attempt = 0; attempt < 3 && !counted; attempt++) {
        make(&s, 30, 4096, size_mixed, group_by_10); /* groups 0, 1, 2 of 10 tasks */
        s.c.wstart = (double *)calloc(s.n, sizeof *s.c.wstart);
        for (i = 0; i < s.n; i++) s.t[i].start_s = i % 10 == 4 ? 0 : 0.003 * (double)(i % 10); /* to 27 ms */
        t0 = s.c.gref[0] = now_s();
        CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_OK);
        wall = now_s() - t0;
        CHECK(out_ok(&s, s.n));
        CHECK(s.c.barrier_ok && s.c.n_barriers == 2);
        for (i = 0; i < s.n; i++) {
            CHECK_MSG(s.c.wstart[i] >= s.c.gref[i / 10] + s.t[i].start_s, "task %zu wrote %.6f s into its group, planned %.6f",
                      i, s.c.wstart[i] - s.c.gref[i / 10], s.t[i].start_s);
            if (i % 10) CHECK(s.c.wstart[i] >= s.c.wstart[i - 1]); /* in order */
        }
        CHECK(wall >= 3 * 0.027);
        CHECK(st.pace_s >= 0 && st.pace_s <= wall);
        counted = st.pace_s > 0.027;
        free(s.c.wstart);
        unmake(&s);
    }
    CHECK_MSG(counted, "the wait was %.6f s in each of three runs, want more than 0.027", st.pace_s);
    /* the start must be a number of seconds in [0, 86400] */
    make(&s, 4, 4096, size_mixed, NULL);
    s.t[2].start_s = -0.5;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "task 2: planned start") != NULL);
    s.t[2].start_s = NAN;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_ERR_INVALID_ARGUMENT);
    s.t[2].start_s = 1e6;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(s.c.ran[0] == 0);
    s.t[2].start_s = 0;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_OK && st.pace_s == 0);
    unmake(&s);
}

static void test_checks(void)
{
    setup s;
    wsync_exec_stats st;
    wsync_error err;
    make(&s, 10, 100, size_mixed, NULL); /* sizes above 100 */
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_ERR_LIMIT);
    CHECK(strstr(err.message, "watermark") != NULL);
    CHECK(s.c.ran[0] == 0);
    unmake(&s);
    make(&s, 10, 4096, size_mixed, NULL);
    s.t[5].group = 3;
    s.t[6].group = 1;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "group") != NULL);
    s.t[5].group = s.t[6].group = 0;
    s.o.n_stages = 0;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_ERR_INVALID_ARGUMENT);
    s.o.n_stages = 3;
    s.o.stages[1] = NULL;
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_ERR_INVALID_ARGUMENT);
    s.o.stages[1] = s_check;
    CHECK(wsync_exec_run(&s.o, s.t, 0, &st, &err) == WSYNC_OK);
    CHECK(st.tasks == 0);
    unmake(&s);
    make(&s, 100, 0, size_zero, NULL); /* no staging at all */
    CHECK(wsync_exec_run(&s.o, s.t, s.n, &st, &err) == WSYNC_OK);
    CHECK(st.tasks == 100 && st.peak_tmp_bytes == 0);
    unmake(&s);
}

/* An independent reference: tile by tile with doubles for amax (exact for
   bf16 inputs), the scale as a float division (1 for a tile holding an
   infinity or NaN), the core's conversion. */
static void ref_quant(const uint16_t *w, uint64_t rows, uint64_t cols, uint64_t stride, uint64_t block, uint8_t *q,
                      float *sc)
{
    uint64_t bi, bj, nbr = block ? (rows + block - 1) / block : 1, nbc = block ? (cols + block - 1) / block : 1;
    for (bi = 0; bi < nbr; bi++)
        for (bj = 0; bj < nbc; bj++) {
            uint64_t r0 = block ? bi * block : 0, r1 = block ? (r0 + block < rows ? r0 + block : rows) : rows;
            uint64_t c0 = block ? bj * block : 0, c1 = block ? (c0 + block < cols ? c0 + block : cols) : cols;
            uint64_t r, c;
            double m = 0;
            int finite = 1;
            float s;
            for (r = r0; r < r1; r++)
                for (c = c0; c < c1; c++) {
                    double v = fabs((double)wsync_bf16_to_f32(w[r * stride + c]));
                    if (!(v <= 3.5e38)) finite = 0;
                    else if (v > m) m = v;
                }
            s = finite && m > 0 ? (float)m / 448.0f : 1.0f;
            sc[bi * nbc + bj] = s;
            for (r = r0; r < r1; r++)
                for (c = c0; c < c1; c++) q[r * cols + c] = wsync_f32_to_e4m3(wsync_bf16_to_f32(w[r * stride + c]) / s, WSYNC_FP8_SATURATE);
        }
}

/* The quantizer's inlined conversion equals the core's saturating one:
   every 251st of the 2^32 floats (about 17 million, all exponents and
   signs, NaNs and infinities among them), every tie, and the edges around
   2^-6 and 464. (All 2^32 were checked once, equal.) */
static void test_e4m3_inline(void)
{
    uint64_t i, bad = 0;
    static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x3C7FFFFFu, 0x3C800000u, 0x3C800001u,
                                     0x3A800000u, 0x3B000000u, 0x3B400000u, 0x43E00000u, 0x43E7FFFFu, 0x43E80000u,
                                     0x43E80001u, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFFFFFFFu};
    for (i = 0; i <= 0xFFFFFFFFull; i += 251) {
        uint32_t u = (uint32_t)i;
        float f;
        memcpy(&f, &u, 4);
        bad += wsync__e4m3_sat(f) != wsync_f32_to_e4m3(f, WSYNC_FP8_SATURATE);
    }
    /* every float whose low 19 bits are zero: each tie between two e4m3
       values (normal and subnormal) and each exact value, both signs */
    for (i = 0; i <= 0xFFFFFFFFull; i += 1u << 19) {
        uint32_t u = (uint32_t)i;
        float f;
        memcpy(&f, &u, 4);
        bad += wsync__e4m3_sat(f) != wsync_f32_to_e4m3(f, WSYNC_FP8_SATURATE);
    }
    for (i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        float f;
        memcpy(&f, &edges[i], 4);
        bad += wsync__e4m3_sat(f) != wsync_f32_to_e4m3(f, WSYNC_FP8_SATURATE);
    }
    CHECK_EQ_U64(bad, 0);
#if WSYNC__QSSE2
    /* the SSE2 lanes: the same floats, four at a time */
    for (i = 0, bad = 0; i <= 0xFFFFFFFFull; i += 4 * 251) {
        uint32_t u[4], k, got[4];
        float f[4];
        for (k = 0; k < 4; k++) u[k] = (uint32_t)(i + k * 251 + (k == 3 ? 0x80000000u : 0));
        memcpy(f, u, 16);
        _mm_storeu_si128((__m128i *)(void *)got, wsync__e4m3_sat4(_mm_loadu_ps(f)));
        for (k = 0; k < 4; k++) bad += got[k] != wsync_f32_to_e4m3(f[k], WSYNC_FP8_SATURATE);
    }
    for (i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        uint32_t got[4];
        float f[4];
        memcpy(&f[0], &edges[i], 4);
        f[1] = f[2] = f[3] = f[0];
        _mm_storeu_si128((__m128i *)(void *)got, wsync__e4m3_sat4(_mm_loadu_ps(f)));
        bad += got[0] != wsync_f32_to_e4m3(f[0], WSYNC_FP8_SATURATE);
    }
    CHECK_EQ_U64(bad, 0);
#endif
}

/* kind 0: weights of mixed magnitudes; 1: every bit pattern (f32
   subnormals, infinities and NaNs among them). */
static void test_quantize(int kind)
{
    static const uint64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {128, 128, 128}, {300, 200, 260}, {129, 257, 257},
                                         {64, 1000, 1031}};
    static const uint64_t blocks[] = {0, 128, 16, 1};
    size_t si, bi;
    wsync_error err;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
            uint64_t rows = shapes[si][0], cols = shapes[si][1], stride = shapes[si][2], i;
            uint64_t ns = wsync_quantize_scale_count(rows, cols, blocks[bi]);
            uint16_t *w = (uint16_t *)malloc(rows * stride * 2);
            uint8_t *q = (uint8_t *)malloc(rows * cols), *rq = (uint8_t *)malloc(rows * cols);
            float *s = (float *)malloc(ns * 4), *rs = (float *)malloc(ns * 4);
            for (i = 0; i < rows * stride; i++) {
                /* weights of mixed magnitudes, some zero tiles' worth of zeros */
                float v = (float)((int)((i * 2654435761u) % 2001u) - 1000) * 1e-4f * (float)(1 + i % 7);
                w[i] = wsync_f32_to_bf16(i % 97 < 3 ? 0.0f : v);
                if (kind) w[i] = (uint16_t)((i * 2654435761u) >> 9 ^ (i * 40503u));
            }
            CHECK(wsync_quantize_e4m3(w, rows, cols, stride, blocks[bi], q, s, &err) == WSYNC_OK);
            ref_quant(w, rows, cols, stride, blocks[bi], rq, rs);
            CHECK(memcmp(q, rq, rows * cols) == 0);
            CHECK(memcmp(s, rs, ns * 4) == 0);
            free(w);
            free(q);
            free(rq);
            free(s);
            free(rs);
        }
    {
        uint16_t z[4] = {0, 0, 0x7F80 /* +inf */, 0x3F80 /* 1.0 */};
        uint8_t q[4];
        float s[4];
        CHECK(wsync_quantize_e4m3(z, 2, 2, 2, 1, q, s, &err) == WSYNC_OK);
        CHECK(s[0] == 1.0f && q[0] == 0);             /* a zero tile */
        CHECK(s[2] == 1.0f && q[2] == 0x7E);          /* infinity saturates to 448 */
        CHECK(s[3] == 1.0f / 448.0f && q[3] == 0x7E); /* the tile's amax maps to 448 */
        CHECK(wsync_quantize_e4m3(z, 2, 2, 1, 0, q, s, &err) == WSYNC_ERR_INVALID_ARGUMENT);
        CHECK(wsync_quantize_scale_count(0, 5, 128) == 0 && wsync_quantize_scale_count(0, 5, 0) == 1);
        CHECK(wsync_quantize_e4m3(NULL, 0, 5, 5, 0, NULL, s, &err) == WSYNC_OK && s[0] == 1.0f);
    }
}

int main(void)
{
    TEST_BEGIN("the quantizer's inlined e4m3 conversion equals the core's");
    test_e4m3_inline();
    TEST_END();
    TEST_BEGIN("fp8 e4m3 quantization with tile scales equals an independent reference");
    test_quantize(0);
    test_quantize(1);
    TEST_END();
#if WSYNC__QSSE2 && defined(__GNUC__)
    /* the CPU's widest path ran above; now SSE2 alone, as on a CPU without AVX2 */
    TEST_BEGIN("fp8 e4m3 quantization, the SSE2 loop (AVX2 off), equals the reference too");
    __atomic_store_n(&wsync__quant_avx2, 0, __ATOMIC_RELAXED);
    test_quantize(0);
    test_quantize(1);
    __atomic_store_n(&wsync__quant_avx2, -1, __ATOMIC_RELAXED);
    TEST_END();
#endif
    TEST_BEGIN("2000 tasks of mixed sizes through 3 stages, bit-exact, under the watermark");
    test_many_tasks();
    TEST_END();
    TEST_BEGIN("stages run at the same time");
    test_stages_overlap();
    TEST_END();
    TEST_BEGIN("a watermark for one task at a time serialises them");
    test_watermark_serialises();
    TEST_END();
    TEST_BEGIN("mesh groups: the barrier sees its group done and the next not started");
    test_groups_and_barrier();
    TEST_END();
    TEST_BEGIN("a failing stage or barrier stops it and names the task, stage or group");
    test_stage_failure();
    TEST_END();
    TEST_BEGIN("pacing: no write before its group's start plus its planned start, in order");
    test_pacing();
    TEST_END();
    TEST_BEGIN("up-front checks: task above the watermark, groups out of order, stages");
    test_checks();
    TEST_END();
    return check_summary();
}
