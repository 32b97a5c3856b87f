/* Work in progress: the pipelined executor of wsync_rdma.h (issue 7), kept
   apart while other sections are written; merged into wsync_rdma.h later.
   Include after wsync_rdma.h. */
#ifndef WSYNC_EXEC_WIP_H
#define WSYNC_EXEC_WIP_H

#include "wsync_rdma.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the pipelined executor -------------------------------------------

   Every transfer of a step is a task that moves through up to
   WSYNC_EXEC_STAGES_MAX stages (e.g. stage-in copy, preparation: gather,
   fuse, quantize; the write), one thread per stage, a FIFO queue in front
   of each. A task holds tmp_bytes of the caller's staging arena from the
   moment it enters the first stage until it leaves the last; a task enters
   only while the bytes held by tasks in flight plus its own fit in the
   arena, so the arena's length is the memory watermark. Tasks leave in the
   order they entered (every stage is FIFO), so the arena is a ring.

   Tasks come in mesh groups (ascending): no task of group g + 1 enters
   before every task of group g has left the last stage and the barrier
   callback for g returned (the global barrier between mesh groups).

   A stage's failure stops admission; tasks already in flight drain without
   running further stages; the result names the task and the stage. */

#define WSYNC_EXEC_STAGES_MAX 4

typedef struct wsync_exec_task {
    uint64_t tmp_bytes;        /* staging bytes the task holds (0: none) */
    uint32_t group;            /* mesh group, ascending over the task list */
    void *user;                /* the caller's description of the work */
} wsync_exec_task;

/* Runs one stage of task t; tmp points at its tmp_bytes in the arena, which
   start tmp_off bytes into it (for a write from a registered arena). */
typedef wsync_result (*wsync_exec_stage_fn)(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t tmp_off,
                                            wsync_error *err);

typedef struct wsync_exec_options {
    wsync_allocator allocator;
    uint8_t *staging;          /* the arena; its length is the watermark */
    uint64_t staging_len;
    unsigned n_stages;         /* 1..WSYNC_EXEC_STAGES_MAX */
    wsync_exec_stage_fn stages[WSYNC_EXEC_STAGES_MAX];
    const char *stage_names[WSYNC_EXEC_STAGES_MAX]; /* for errors and stats; NULL: "stage k" */
    /* After every task of `group` left the last stage; NULL: no barrier. */
    wsync_result (*barrier)(void *user, uint32_t group, wsync_error *err);
    void *user;
} wsync_exec_options;

typedef struct wsync_exec_stats {
    uint64_t tasks, groups;
    uint64_t peak_tmp_bytes;   /* the most staging bytes held at once */
    unsigned peak_active;      /* the most stages running a task at the same moment */
    double wall_s;
    double busy_s[WSYNC_EXEC_STAGES_MAX]; /* time each stage spent in its function */
    double wait_s;             /* time admission waited for the watermark */
} wsync_exec_stats;

/* Runs every task through every stage. Fails before starting when a task
   needs more than the whole arena or groups are not ascending. */
WSYNC_DEF wsync_result wsync_exec_run(const wsync_exec_options *opt, const wsync_exec_task *tasks, size_t n,
                                      wsync_exec_stats *stats, wsync_error *err);

/* ---- preparation: fp8 quantization ----

   A rows x cols bf16 matrix (row stride in elements, so a column slice of
   a larger matrix works in place) to fp8 e4m3 with one f32 scale per
   block x block tile (block 0: one scale for the whole matrix), the
   DeepSeek-V3 convention of weight_scale_inv: scale = amax / 448 over the
   tile (1 when the tile is all zero, or holds an infinity or NaN), q =
   e4m3(w / scale) with saturation. dst: rows x cols bytes, row-major;
   scales: ceil(rows / block) x ceil(cols / block) floats, row-major. */
WSYNC_DEF wsync_result wsync_quantize_e4m3(const uint16_t *bf16, uint64_t rows, uint64_t cols, uint64_t stride,
                                           uint64_t block, uint8_t *dst, float *scales, wsync_error *err);
/* Scale tiles of a rows x cols matrix: ceil(rows/block) x ceil(cols/block), 1 for block 0. */
WSYNC_DEF uint64_t wsync_quantize_scale_count(uint64_t rows, uint64_t cols, uint64_t block);

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_EXEC_WIP_H */

#if defined(WSYNC_RDMA_IMPLEMENTATION) && !defined(WSYNC__EXEC_IMPLEMENTED)
#define WSYNC__EXEC_IMPLEMENTED

#ifdef __cplusplus
extern "C" {
#endif

WSYNC_DEF uint64_t wsync_quantize_scale_count(uint64_t rows, uint64_t cols, uint64_t block)
{
    if (block == 0) return 1;
    return (rows / block + (rows % block != 0)) * (cols / block + (cols % block != 0));
}

/* One tile's scale: amax / 448, or 1 for a tile of zeros or one holding a
   non-finite value (saturation then clamps infinities, NaN stays NaN). */
static float wsync__tile_scale(const uint16_t *bf16, uint64_t stride, uint64_t r0, uint64_t r1, uint64_t c0,
                               uint64_t c1)
{
    uint64_t r, c;
    float amax = 0;
    for (r = r0; r < r1; r++)
        for (c = c0; c < c1; c++) {
            float v = wsync_bf16_to_f32(bf16[r * stride + c]);
            float a = v < 0 ? -v : v;
            if (!(a <= 3.4e38f)) return 1.0f;
            if (a > amax) amax = a;
        }
    return amax > 0 ? amax / 448.0f : 1.0f;
}

WSYNC_DEF wsync_result wsync_quantize_e4m3(const uint16_t *bf16, uint64_t rows, uint64_t cols, uint64_t stride,
                                           uint64_t block, uint8_t *dst, float *scales, wsync_error *err)
{
    uint64_t br = block ? block : rows, bc = block ? block : cols, tcols, r0, c0, r, c;
    wsync__rerr_reset(err);
    if (!scales || stride < cols)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "quantize: no scales, or a stride below the columns");
    if (rows == 0 || cols == 0) {
        if (!block) scales[0] = 1.0f;
        return WSYNC_OK;
    }
    if (!bf16 || !dst) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "quantize: buffers");
    if (rows > UINT64_MAX / stride) return wsync__rfail(err, WSYNC_ERR_OVERFLOW, "%s", "quantize: size");
    tcols = (cols + bc - 1) / bc;
    for (r0 = 0; r0 < rows; r0 += br) {
        uint64_t r1 = rows - r0 > br ? r0 + br : rows;
        for (c0 = 0; c0 < cols; c0 += bc) {
            uint64_t c1 = cols - c0 > bc ? c0 + bc : cols;
            float scale = wsync__tile_scale(bf16, stride, r0, r1, c0, c1);
            scales[(r0 / br) * tcols + c0 / bc] = scale;
            for (r = r0; r < r1; r++)
                for (c = c0; c < c1; c++)
                    dst[r * cols + c] = wsync_f32_to_e4m3(wsync_bf16_to_f32(bf16[r * stride + c]) / scale,
                                                          WSYNC_FP8_SATURATE);
        }
    }
    return WSYNC_OK;
}

#if WSYNC__RDMA_OK

typedef struct wsync__exec {
    const wsync_exec_options *o;
    const wsync_exec_task *tasks;
    size_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* any change: a queue grew, a task left, a failure */
    size_t next[WSYNC_EXEC_STAGES_MAX + 1]; /* next[k]: tasks that entered stage k (next[n_stages]: left) */
    uint64_t *off;             /* each task's offset in the arena */
    uint64_t head, tail, used; /* the ring: bytes [tail, head) modulo wrap are held */
    uint64_t wrap_at;          /* where the ring wrapped (bytes after it unused), or 0 */
    unsigned active;
    int failed;
    wsync_error err;
    wsync_exec_stats st;
} wsync__exec;

static double wsync__exec_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *wsync__exec_stage_name(const wsync_exec_options *o, unsigned k, char *buf, size_t cap)
{
    if (o->stage_names[k]) return o->stage_names[k];
    snprintf(buf, cap, "stage %u", k);
    return buf;
}

/* Under mu: where `need` contiguous bytes fit in the ring, or UINT64_MAX
   to wait. Held bytes are [tail, head), or [tail, wrap_at) and [0, head)
   once the newest allocations wrapped to the start (wrap_at != 0). */
static uint64_t wsync__exec_fit(wsync__exec *x, uint64_t need)
{
    uint64_t cap = x->o->staging_len;
    if (need == 0) return 0;
    if (x->used == 0) {
        x->head = x->tail = x->wrap_at = 0;
        return 0;
    }
    if (!x->wrap_at) {
        if (cap - x->head >= need) return x->head;
        if (x->tail >= need) { /* the end is too short: wrap, leaving it unused */
            x->wrap_at = x->head;
            x->head = 0;
            return 0;
        }
        return UINT64_MAX;
    }
    return x->tail - x->head >= need ? x->head : UINT64_MAX;
}

/* Under mu: task i left the last stage; its bytes return to the ring. */
static void wsync__exec_release(wsync__exec *x, size_t i)
{
    uint64_t b = x->tasks[i].tmp_bytes;
    if (b == 0) return;
    x->used -= b;
    x->tail = x->off[i] + b;
    if (x->wrap_at && x->tail == x->wrap_at) { /* the older part is gone: unwrapped again */
        x->tail = 0;
        x->wrap_at = 0;
    }
    if (x->used == 0) x->head = x->tail = x->wrap_at = 0;
}

typedef struct wsync__exec_worker {
    wsync__exec *x;
    unsigned k;
    pthread_t th;
} wsync__exec_worker;

static void *wsync__exec_main(void *p)
{
    wsync__exec_worker *w = (wsync__exec_worker *)p;
    wsync__exec *x = w->x;
    const wsync_exec_options *o = x->o;
    unsigned k = w->k, last = o->n_stages - 1;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        size_t i;
        wsync_result r = WSYNC_OK;
        wsync_error e;
        double t0;
        int skip;
        /* task next[k + 1] is ready for stage k once it left stage k - 1 */
        while (x->next[k + 1] < x->n && x->next[k + 1] >= x->next[k]) pthread_cond_wait(&x->cv, &x->mu);
        if (x->next[k + 1] >= x->n) break;
        i = x->next[k + 1];
        x->active++;
        if (x->active > x->st.peak_active) x->st.peak_active = x->active;
        skip = x->failed; /* after a failure tasks drain without work */
        pthread_mutex_unlock(&x->mu);
        t0 = wsync__exec_now();
        if (!skip) {
            wsync__rerr_reset(&e);
            r = o->stages[k](o->user, &x->tasks[i], o->staging ? o->staging + x->off[i] : NULL, x->off[i], &e);
        }
        pthread_mutex_lock(&x->mu);
        x->st.busy_s[k] += wsync__exec_now() - t0;
        x->active--;
        if (r != WSYNC_OK && !x->failed) {
            char nb[16];
            x->failed = 1;
            wsync__rfail(&x->err, r, "task %zu, %s: %.300s", i, wsync__exec_stage_name(o, k, nb, sizeof nb),
                         e.message[0] ? e.message : wsync_result_str(r));
        }
        x->next[k + 1] = i + 1;
        if (k == last) wsync__exec_release(x, i);
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

static wsync_result wsync__exec_check(const wsync_exec_options *o, const wsync_exec_task *tasks, size_t n,
                                      wsync_error *err)
{
    size_t i;
    unsigned k;
    if (!o || (n && !tasks)) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "exec: options and tasks");
    if (o->n_stages < 1 || o->n_stages > WSYNC_EXEC_STAGES_MAX)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "exec: %u stages (1 to %u)", o->n_stages,
                            WSYNC_EXEC_STAGES_MAX);
    for (k = 0; k < o->n_stages; k++)
        if (!o->stages[k]) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "exec: stage %u has no function", k);
    for (i = 0; i < n; i++) {
        if (tasks[i].tmp_bytes > o->staging_len || (tasks[i].tmp_bytes && !o->staging))
            return wsync__rfail(err, WSYNC_ERR_LIMIT,
                                "exec: task %zu needs %llu staging bytes, more than the watermark of %llu", i,
                                (unsigned long long)tasks[i].tmp_bytes, (unsigned long long)o->staging_len);
        if (i && tasks[i].group < tasks[i - 1].group)
            return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "exec: task %zu is in mesh group %u after group %u (groups ascend)", i,
                                (unsigned)tasks[i].group, (unsigned)tasks[i - 1].group);
    }
    return WSYNC_OK;
}

/* The admitting thread (the caller's): tasks enter stage 0 while the
   watermark allows, and groups wait for the barrier. */
static void wsync__exec_admit(wsync__exec *x)
{
    const wsync_exec_options *o = x->o;
    size_t i;
    pthread_mutex_lock(&x->mu);
    for (i = 0; i < x->n && !x->failed; i++) {
        uint64_t at;
        double t0 = wsync__exec_now();
        if (i && x->tasks[i].group != x->tasks[i - 1].group) {
            wsync_error e;
            wsync_result r = WSYNC_OK;
            while (x->next[o->n_stages] < i && !x->failed) pthread_cond_wait(&x->cv, &x->mu);
            if (x->failed) break;
            x->st.groups++;
            if (o->barrier) {
                pthread_mutex_unlock(&x->mu);
                wsync__rerr_reset(&e);
                r = o->barrier(o->user, x->tasks[i - 1].group, &e);
                pthread_mutex_lock(&x->mu);
            }
            if (r != WSYNC_OK) {
                x->failed = 1;
                wsync__rfail(&x->err, r, "barrier after mesh group %u: %.300s", (unsigned)x->tasks[i - 1].group,
                             e.message[0] ? e.message : wsync_result_str(r));
                break;
            }
        }
        while ((at = wsync__exec_fit(x, x->tasks[i].tmp_bytes)) == UINT64_MAX && !x->failed)
            pthread_cond_wait(&x->cv, &x->mu);
        x->st.wait_s += wsync__exec_now() - t0;
        if (x->failed) break;
        x->off[i] = at;
        if (x->tasks[i].tmp_bytes) x->head = at + x->tasks[i].tmp_bytes;
        x->used += x->tasks[i].tmp_bytes;
        if (x->used > x->st.peak_tmp_bytes) x->st.peak_tmp_bytes = x->used;
        x->next[0] = i + 1;
        pthread_cond_broadcast(&x->cv);
    }
    /* after a failure the stages drain what entered, and end there */
    if (x->failed) {
        x->n = x->next[0];
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
}

WSYNC_DEF wsync_result wsync_exec_run(const wsync_exec_options *opt, const wsync_exec_task *tasks, size_t n,
                                      wsync_exec_stats *stats, wsync_error *err)
{
    wsync__exec x;
    wsync__exec_worker w[WSYNC_EXEC_STAGES_MAX];
    unsigned k, started = 0;
    double t0 = wsync__exec_now();
    wsync_result r;
    wsync__rerr_reset(err);
    if (stats) memset(stats, 0, sizeof *stats);
    if ((r = wsync__exec_check(opt, tasks, n, err)) != WSYNC_OK) return r;
    memset(&x, 0, sizeof x);
    x.o = opt;
    x.tasks = tasks;
    x.n = n;
    if (!(x.off = (uint64_t *)wsync__ralloc(&opt->allocator, (n ? n : 1) * sizeof *x.off)))
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "exec: %zu tasks", n);
    pthread_mutex_init(&x.mu, NULL);
    pthread_cond_init(&x.cv, NULL);
    for (k = 0; k < opt->n_stages; k++) {
        w[k].x = &x;
        w[k].k = k;
        if (pthread_create(&w[k].th, NULL, wsync__exec_main, &w[k]) != 0) {
            pthread_mutex_lock(&x.mu);
            x.failed = 1;
            wsync__rfail(&x.err, WSYNC_ERR_IO, "%s", "exec: pthread_create");
            pthread_mutex_unlock(&x.mu);
            break;
        }
        started++;
    }
    if (started == opt->n_stages) wsync__exec_admit(&x);
    else {
        pthread_mutex_lock(&x.mu);
        x.n = x.next[0];
        pthread_cond_broadcast(&x.cv);
        pthread_mutex_unlock(&x.mu);
    }
    for (k = 0; k < started; k++) pthread_join(w[k].th, NULL);
    if (!x.failed && n) x.st.groups++;
    x.st.tasks = x.next[opt->n_stages];
    x.st.wall_s = wsync__exec_now() - t0;
    if (stats) *stats = x.st;
    r = x.failed ? x.err.code : WSYNC_OK;
    if (x.failed && err) *err = x.err;
    pthread_cond_destroy(&x.cv);
    pthread_mutex_destroy(&x.mu);
    wsync__rfree(&opt->allocator, x.off);
    return r;
}

#else /* !WSYNC__RDMA_OK */

WSYNC_DEF wsync_result wsync_exec_run(const wsync_exec_options *opt, const wsync_exec_task *tasks, size_t n,
                                      wsync_exec_stats *stats, wsync_error *err)
{
    (void)opt;
    (void)tasks;
    (void)n;
    if (stats) memset(stats, 0, sizeof *stats);
    return wsync__rno(err, "the executor");
}

#endif

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_RDMA_IMPLEMENTATION (executor) */
