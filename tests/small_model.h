/* small_model.h: the tests' small training-like model (static functions;
   include after wsync.h and check.h).

   What the data look like: training-like bf16 updates. Values are finite
   bf16 weights of a model's magnitudes (base + 10 random bits: 0x3C00 +
   0..0x3FF is 2^-7 up to 2), and each step changes a few % of the elements
   by one bf16 ulp from the step before, as training does (most weights move
   by less than an ulp a step), so a delta is small and sparse while an
   anchor is dense. Every value is a pure function of (element, step): a
   test rebuilds the image of any step and checks a subscriber against it
   bit-exact. Names, shapes and rates are each test's own, passed here as
   parameters.

   mix64                         the splitmix64 finaliser the generators draw from
   sm_fill                       one tensor at a step: each element +1 with
                                 chance 1/25 a step (about 4%)
   sm_scatter                    an image at a step: each step moves
                                 per_mille/1000 of n drawn positions by +-1
   sm_def, sm_model,             tensors (name, rank, shape) laid end to end
   sm_model_make, sm_tensors     in one bf16 image, and their wsync_tensors
   sm_sub, sm_sub_open,          a subscriber over a model's zeroed targets,
   sm_sub_close, sm_sub_step,    in place or on the heap (sm_sub_new)
   sm_sub_new, sm_sub_free
   sm_sync_exact, sm_publish     sync and check bit-exact against a
                                 generator; publish a generated step
   sleep_ms, now_s               a sleep, and a monotonic clock in seconds
                                 (POSIX: the test defines _POSIX_C_SOURCE)
   sm_env, sm_env_open,          a case's store: memory, or a directory store
   sm_env_close                  in a fresh folder under build/ (POSIX)
   sm_rm_rf                      a folder and all below it removed
   sm_buf, sm_buf_sink           a growable byte buffer, a wsync_sink_fn */
#ifndef WSYNC_TESTS_SMALL_MODEL_H
#define WSYNC_TESTS_SMALL_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Every function is static; a test uses some of them. */
#if defined(__GNUC__) || defined(__clang__)
#define SM_UNUSED __attribute__((unused))
#else
#define SM_UNUSED
#endif

SM_UNUSED static void sleep_ms(long ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

SM_UNUSED static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

SM_UNUSED static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* v[0..n) at `step`: v[k] starts at base + (mix64(seed + k) & 0x3FF) and
   each step s in 1..step adds 1 where mix64((salt << 40) ^ (s << 20) ^ k)
   % 25 == 0. Different salts give tensors that change independently. */
SM_UNUSED static void sm_fill(uint16_t *v, size_t n, uint16_t base, uint64_t seed, uint64_t salt, uint64_t step)
{
    size_t k;
    uint64_t s;
    for (k = 0; k < n; k++) {
        v[k] = (uint16_t)(base + (mix64(seed + k) & 0x3FFu));
        for (s = 1; s <= step; s++)
            if (mix64((salt << 40) ^ (s << 20) ^ k) % 25 == 0) v[k]++;
    }
}

/* img[0..n) at `step`: img[j] starts at 0x3C00 + (mix64(j) & 0x3FF); each
   step s in 1..step draws n * per_mille / 1000 positions (with repeats)
   and moves each by one bf16 step up or down. */
SM_UNUSED static void sm_scatter(uint16_t *img, size_t n, unsigned per_mille, uint64_t step)
{
    size_t j;
    uint64_t s;
    for (j = 0; j < n; j++) img[j] = (uint16_t)(0x3C00u + (mix64(j) & 0x3FFu));
    for (s = 1; s <= step; s++)
        for (j = 0; j < n * per_mille / 1000; j++) {
            uint64_t h = mix64(s * 1000003ull + j);
            img[h % n] = (uint16_t)(img[h % n] + ((h >> 40) & 1 ? 1 : -1));
        }
}

/* A tensor of the model: rank 1 (shape[0] elements) or 2. */
typedef struct sm_def {
    const char *name;
    uint32_t rank;
    uint64_t shape[2];
    int f32; /* a test may feed it to its publisher as F32; the image is bf16 */
} sm_def;

#define SM_MAXT 8
typedef struct sm_model {
    size_t n;
    const sm_def *t;
    size_t off[SM_MAXT + 1]; /* where each tensor starts in the image (elements) */
    size_t nelem[SM_MAXT];
    size_t total; /* elements */
} sm_model;

SM_UNUSED static sm_model sm_model_make(const sm_def *t, size_t n)
{
    sm_model m;
    size_t i;
    if (n > SM_MAXT) {
        printf("small_model.h: %lu tensors, at most %d\n", (unsigned long)n, SM_MAXT);
        exit(2);
    }
    memset(&m, 0, sizeof m);
    m.n = n;
    m.t = t;
    for (i = 0; i < n; i++) {
        m.off[i] = m.total;
        m.nelem[i] = (size_t)(t[i].rank == 2 ? t[i].shape[0] * t[i].shape[1] : t[i].shape[0]);
        m.total += m.nelem[i];
    }
    m.off[n] = m.total;
    return m;
}

/* The model's tensors (bf16, dense) over the image img, in its order. */
SM_UNUSED static void sm_tensors(const sm_model *m, uint16_t *img, wsync_tensor *t)
{
    size_t i;
    for (i = 0; i < m->n; i++) {
        t[i].name = m->t[i].name;
        t[i].dtype = WSYNC_DTYPE_BF16;
        t[i].rank = m->t[i].rank;
        t[i].shape = m->t[i].shape;
        t[i].data = img + m->off[i];
        t[i].nbytes = (uint64_t)m->nelem[i] * 2;
    }
}

/* A subscriber whose targets are an image of the model (img). */
typedef struct sm_sub {
    const sm_model *m;
    uint16_t *img;
    wsync_tensor t[SM_MAXT];
    wsync_subscriber *s;
} sm_sub;

/* Targets zeroed; `reverse` lists them in the opposite order (matching is
   by name). 0 (a failed check, u->s NULL) where the subscriber does not
   open; sm_sub_close it either way. */
SM_UNUSED static int sm_sub_open(sm_sub *u, const wsync_store *st, const sm_model *m,
                                 const wsync_chain_options *opt, int reverse)
{
    wsync_error err;
    wsync_tensor t[SM_MAXT];
    size_t i;
    memset(u, 0, sizeof *u);
    u->m = m;
    u->img = (uint16_t *)calloc(m->total, 2);
    sm_tensors(m, u->img, t);
    for (i = 0; i < m->n; i++) u->t[i] = t[reverse ? m->n - 1 - i : i];
    if (wsync_subscriber_open(st, u->t, m->n, opt, &u->s, &err) != WSYNC_OK) {
        CHECK_MSG(0, "subscriber_open: %s", err.message);
        u->s = NULL;
        return 0;
    }
    return 1;
}

SM_UNUSED static void sm_sub_close(sm_sub *u)
{
    if (u->s) wsync_subscriber_close(u->s);
    free(u->img);
    memset(u, 0, sizeof *u);
}

/* The step the subscriber holds; UINT64_MAX where it holds none. */
SM_UNUSED static uint64_t sm_sub_step(const sm_sub *u)
{
    uint64_t s = UINT64_MAX;
    if (!wsync_subscriber_step(u->s, &s)) return UINT64_MAX;
    return s;
}

/* sm_sub_open on the heap: NULL (a failed check) where it does not open. */
SM_UNUSED static sm_sub *sm_sub_new(const wsync_store *st, const sm_model *m, const wsync_chain_options *opt)
{
    sm_sub *u = (sm_sub *)calloc(1, sizeof *u);
    if (u && !sm_sub_open(u, st, m, opt, 0)) {
        sm_sub_close(u);
        free(u);
        return NULL;
    }
    return u;
}

SM_UNUSED static void sm_sub_free(sm_sub *u)
{
    if (!u) return;
    sm_sub_close(u);
    free(u);
}

/* The image of a step, as the test's generator makes it. */
typedef void (*sm_image_fn)(uint16_t *img, uint64_t step);

/* Syncs u to `to` (WSYNC_STEP_LATEST: the newest) and checks its targets
   bit-exact against image_at of the step it reached; 0 where u is NULL or
   the sync failed (a failed check). ss_out (may be NULL) gets the stats. */
SM_UNUSED static int sm_sync_exact(sm_sub *u, uint64_t to, const char *what, wsync_sync_stats *ss_out,
                                   sm_image_fn image_at)
{
    wsync_error err;
    wsync_sync_stats ss;
    uint16_t *want;
    uint64_t step = UINT64_MAX;
    if (!u) return 0;
    if (wsync_subscriber_sync(u->s, to, &ss, &err) != WSYNC_OK) {
        CHECK_MSG(0, "%s: sync to %llu: %s", what, (unsigned long long)to, err.message);
        return 0;
    }
    if (ss_out) *ss_out = ss;
    wsync_subscriber_step(u->s, &step);
    if (to != WSYNC_STEP_LATEST)
        CHECK_MSG(step == to, "%s: at %llu, wanted %llu", what, (unsigned long long)step, (unsigned long long)to);
    want = (uint16_t *)malloc(u->m->total * 2);
    if (!want) {
        printf("out of memory\n");
        exit(2);
    }
    image_at(want, step);
    CHECK_MSG(memcmp(u->img, want, u->m->total * 2) == 0, "%s: step %llu is not bit-exact (path %s)", what,
              (unsigned long long)step, ss.path);
    free(want);
    return 1;
}

/* Publishes image_at(step) of the model as `step`; 1 where it went in. */
SM_UNUSED static int sm_publish(wsync_publisher *p, const sm_model *m, sm_image_fn image_at, uint64_t step,
                                wsync_error *err)
{
    wsync_tensor t[SM_MAXT];
    uint16_t *img = (uint16_t *)malloc(m->total * 2);
    int ok;
    if (!img) {
        printf("out of memory\n");
        exit(2);
    }
    image_at(img, step);
    sm_tensors(m, img, t);
    ok = wsync_publish(p, step, t, m->n, NULL, err) == WSYNC_OK;
    free(img);
    return ok;
}

/* A growable byte buffer: zero it, pass sm_buf_sink and it as a sink
   (nonzero where memory runs out), free(p) when done. */
typedef struct sm_buf {
    uint8_t *p;
    size_t len, cap;
} sm_buf;

SM_UNUSED static int sm_buf_sink(void *user, const void *bytes, size_t len)
{
    sm_buf *b = (sm_buf *)user;
    if (b->len + len > b->cap) {
        size_t cap = (b->len + len) * 2;
        uint8_t *p = (uint8_t *)realloc(b->p, cap);
        if (!p) return 1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, bytes, len);
    b->len += len;
    return 0;
}

/* Removes path and everything below it (rm -rf); 1 where that worked. */
SM_UNUSED static int sm_rm_rf(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    return system(cmd) == 0;
}

/* A store for a case: the memory store (dir 0) or a directory store in a
   new folder build/<tag>.XXXXXX, which sm_env_close removes. */
typedef struct sm_env {
    wsync_store st;
    char root[128];
    int dir;
    const char *name; /* "dir" or "mem" */
} sm_env;

/* 1 where the store opened; sm_env_close it either way. */
SM_UNUSED static int sm_env_open(sm_env *e, int dir, const char *tag)
{
    wsync_error err;
    wsync_store_options so;
    memset(e, 0, sizeof *e);
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;
    e->dir = dir;
    e->name = dir ? "dir" : "mem";
    if (!dir) return wsync_store_mem_open(NULL, &e->st, &err) == WSYNC_OK;
    mkdir("build", 0777);
    snprintf(e->root, sizeof e->root, "build/%s.XXXXXX", tag);
    if (!mkdtemp(e->root)) return 0;
    return wsync_store_dir_open(e->root, &so, &e->st, &err) == WSYNC_OK;
}

SM_UNUSED static void sm_env_close(sm_env *e)
{
    wsync_store_close(&e->st);
    if (e->dir && !sm_rm_rf(e->root)) printf("  (could not remove %s)\n", e->root);
}

#endif
