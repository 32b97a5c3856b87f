/* A subscriber syncs an anchor in bounded memory: into targets without a
   step it streams the anchor straight in; into targets with a step it goes
   through a spool file first (unlinked at once) and only a good anchor is
   copied in. Checked here:
     - anchor syncs are bit-exact, fresh (streamed) and from a step (spooled),
       through sync and through the background prefetch;
     - a corrupt anchor (a bit flipped in its data, cut short, a wrong or
       broken header, with HEAD's digest matching it or not) leaves targets
       that held a step at that step exactly, and targets without one with
       none (and zeroed); the error names the object and the rule;
     - the spool file is never visible in its directory (during the fetch,
       after success, after failure); an unusable spool directory fails the
       sync with WSYNC_ERR_IO and leaves the targets alone;
     - the subscriber's allocator never holds more than 64 MiB plus the
       largest delta, for a model of 112 MiB (this fails on a subscriber that
       holds the anchor whole).
   Chains are published with wsync_publish into a memory store, every step
   an anchor (anchor_fraction tiny), images a pure function of the step. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ======================================================================
   A counting allocator (thread-safe: the prefetch allocates too)
   ====================================================================== */

typedef struct counter {
    pthread_mutex_t mu;
    uint64_t live, peak, largest;
} counter;

static void *c_alloc(void *user, size_t size)
{
    counter *c = (counter *)user;
    uint64_t *p = (uint64_t *)malloc(size + 16);
    if (!p) return NULL;
    p[0] = size;
    pthread_mutex_lock(&c->mu);
    c->live += size;
    if (c->live > c->peak) c->peak = c->live;
    if (size > c->largest) c->largest = size;
    pthread_mutex_unlock(&c->mu);
    return p + 2;
}

static void c_free(void *user, void *ptr)
{
    counter *c = (counter *)user;
    uint64_t *p;
    if (!ptr) return;
    p = (uint64_t *)ptr - 2;
    pthread_mutex_lock(&c->mu);
    c->live -= p[0];
    pthread_mutex_unlock(&c->mu);
    free(p);
}

static void counter_reset_peak(counter *c)
{
    pthread_mutex_lock(&c->mu);
    c->peak = c->live;
    c->largest = 0;
    pthread_mutex_unlock(&c->mu);
}

/* ======================================================================
   Models: tensors whose image at every step is a pure function of it
   ====================================================================== */

#define MAXT 4
typedef struct model {
    size_t nt;
    const char *names[MAXT];
    uint64_t shapes[MAXT][2];
    size_t off[MAXT + 1];
    size_t total; /* elements */
} model;

static void model_init(model *m, size_t nt, const uint64_t (*shapes)[2])
{
    static const char *names[MAXT] = {"layer.1.w", "layer.0.w", "embed", "norm"};
    size_t i;
    m->nt = nt;
    m->total = 0;
    for (i = 0; i < nt; i++) {
        m->names[i] = names[i];
        m->shapes[i][0] = shapes[i][0];
        m->shapes[i][1] = shapes[i][1];
        m->off[i] = m->total;
        m->total += (size_t)(shapes[i][0] * shapes[i][1]);
    }
    m->off[nt] = m->total;
}

static void fill(const model *m, uint16_t *img, uint64_t step)
{
    size_t k;
    for (k = 0; k < m->total; k++) /* finite bf16 values near 1 */
        img[k] = (uint16_t)(0x3F00u + ((((uint32_t)k * 2654435761u) >> 11 ^ (uint32_t)(step * 40503u)) & 0xFFu));
}

static void tensors_of(const model *m, uint16_t *img, wsync_tensor *t)
{
    size_t i;
    for (i = 0; i < m->nt; i++) {
        t[i].name = m->names[i];
        t[i].dtype = WSYNC_DTYPE_BF16;
        t[i].rank = 2;
        t[i].shape = m->shapes[i];
        t[i].data = img + m->off[i];
        t[i].nbytes = (uint64_t)(m->off[i + 1] - m->off[i]) * 2;
    }
}

static int same_as(const model *m, const uint16_t *img, uint64_t step)
{
    uint16_t *ref = (uint16_t *)malloc(m->total * 2 + 2);
    int same;
    if (!ref) exit(2);
    fill(m, ref, step);
    same = memcmp(img, ref, m->total * 2) == 0;
    free(ref);
    return same;
}

static int is_zero(const uint16_t *img, size_t n)
{
    size_t k;
    for (k = 0; k < n; k++)
        if (img[k]) return 0;
    return 1;
}

/* Publishes steps 0..last, every one an anchor. */
static void publish(wsync_store *st, const model *m, uint64_t last)
{
    wsync_chain_options o;
    wsync_publisher *p = NULL;
    wsync_publish_stats ps;
    wsync_error err;
    wsync_tensor t[MAXT];
    uint16_t *img = (uint16_t *)malloc(m->total * 2 + 2);
    uint64_t s;
    if (!img) exit(2);
    memset(&o, 0, sizeof o);
    o.anchor_fraction = 1e-12; /* every delta is "too large": anchors only */
    o.retain = 100;
    if (wsync_publisher_open(st, &o, &p, &err) != WSYNC_OK) {
        fprintf(stderr, "publisher_open: %s\n", err.message);
        exit(2);
    }
    for (s = 0; s <= last; s++) {
        fill(m, img, s);
        tensors_of(m, img, t);
        if (wsync_publish(p, s, t, m->nt, &ps, &err) != WSYNC_OK || !ps.wrote_anchor || ps.wrote_delta) {
            fprintf(stderr, "publish %llu: %s\n", (unsigned long long)s, err.message);
            exit(2);
        }
    }
    wsync_publisher_close(p);
    free(img);
}

/* ======================================================================
   A store that looks into the spool directory while an anchor streams
   ====================================================================== */

static char g_spool[256];

static int dir_entries(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *de;
    int n = 0;
    if (!d) return -1;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

typedef struct wstore {
    wsync_store inner;
    int seen_in_spool; /* entries seen in the spool directory during a get */
    unsigned anchor_gets;
} wstore;

typedef struct wsink {
    wstore *w;
    wsync_sink_fn sink;
    void *user;
} wsink;

static int w_sink(void *u, const void *bytes, size_t len)
{
    wsink *k = (wsink *)u;
    int n = dir_entries(g_spool);
    if (n > k->w->seen_in_spool) k->w->seen_in_spool = n;
    return k->sink(k->user, bytes, len);
}

static wsync_result w_put(void *u, const char *key, const void *bytes, size_t len, wsync_error *err)
{
    wstore *w = (wstore *)u;
    return w->inner.put(w->inner.user, key, bytes, len, err);
}

static wsync_result w_get(void *u, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                          void *sink_user, uint64_t *size, wsync_error *err)
{
    wstore *w = (wstore *)u;
    wsink k;
    k.w = w;
    k.sink = sink;
    k.user = sink_user;
    if (strncmp(key, "anchors/", 8) == 0) w->anchor_gets++;
    return w->inner.get(w->inner.user, key, offset, len, w_sink, &k, size, err);
}

static wsync_result w_head(void *u, const char *key, uint64_t *size, wsync_error *err)
{
    wstore *w = (wstore *)u;
    return w->inner.head(w->inner.user, key, size, err);
}

static wsync_result w_list(void *u, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    wstore *w = (wstore *)u;
    return w->inner.list(w->inner.user, prefix, fn, fn_user, err);
}

static wsync_result w_del(void *u, const char *key, wsync_error *err)
{
    wstore *w = (wstore *)u;
    return w->inner.del(w->inner.user, key, err);
}

static wsync_store wrap(wstore *w)
{
    wsync_store s;
    memset(&s, 0, sizeof s);
    s.user = w;
    s.put = w_put;
    s.get = w_get;
    s.head = w_head;
    s.list = w_list;
    s.del = w_del;
    return s;
}

/* ======================================================================
   Subscribers
   ====================================================================== */

typedef struct sub {
    wsync_subscriber *s;
    uint16_t *img;
    wsync_tensor t[MAXT];
} sub;

static void sub_open(sub *u, const wsync_store *st, const model *m, counter *c, const char *spool_dir)
{
    wsync_chain_options o;
    wsync_error err;
    memset(&o, 0, sizeof o);
    if (c) {
        o.allocator.alloc = c_alloc;
        o.allocator.free = c_free;
        o.allocator.user = c;
    }
    o.spool_dir = spool_dir;
    u->img = (uint16_t *)calloc(m->total + 1, 2);
    if (!u->img) exit(2);
    tensors_of(m, u->img, u->t);
    if (wsync_subscriber_open(st, u->t, m->nt, &o, &u->s, &err) != WSYNC_OK) {
        fprintf(stderr, "subscriber_open: %s\n", err.message);
        exit(2);
    }
}

static void sub_close(sub *u)
{
    wsync_subscriber_close(u->s);
    free(u->img);
}

static uint64_t sub_step(const sub *u)
{
    uint64_t s = 0;
    return wsync_subscriber_step(u->s, &s) ? s : UINT64_MAX;
}

static wsync_result sync_to(sub *u, uint64_t step, wsync_error *err)
{
    wsync_sync_stats ss;
    memset(err, 0, sizeof *err);
    return wsync_subscriber_sync(u->s, step, &ss, err);
}

/* ======================================================================
   Corrupting an anchor
   ====================================================================== */

typedef struct saved {
    uint8_t *obj, *head;
    uint64_t obj_size, head_size;
} saved;

static void save(wsync_store *st, const char *key, saved *sv)
{
    wsync_error err;
    if (wsync_store_get_all(st, key, NULL, &sv->obj, &sv->obj_size, &err) != WSYNC_OK ||
        wsync_store_get_all(st, "HEAD", NULL, &sv->head, &sv->head_size, &err) != WSYNC_OK) {
        fprintf(stderr, "save: %s\n", err.message);
        exit(2);
    }
}

static void restore(wsync_store *st, const char *key, saved *sv)
{
    wsync_error err;
    if (st->put(st->user, key, sv->obj, (size_t)sv->obj_size, &err) != WSYNC_OK ||
        st->put(st->user, "HEAD", sv->head, (size_t)sv->head_size, &err) != WSYNC_OK) {
        fprintf(stderr, "restore: %s\n", err.message);
        exit(2);
    }
}

static void saved_free(saved *sv)
{
    free(sv->obj);
    free(sv->head);
}

/* Puts `bytes` under `key`; with fix_head, HEAD is rewritten to name them
   (size and digest), so that only their content can be blamed. */
static void put_object(wsync_store *st, const char *key, const uint8_t *bytes, size_t len, int fix_head)
{
    wsync_error err;
    if (st->put(st->user, key, bytes, len, &err) != WSYNC_OK) exit(2);
    if (fix_head) {
        wsync_chain_info c;
        char *text;
        size_t tl, i;
        if (wsync_chain_read(st, NULL, &c, &err) != WSYNC_OK) {
            fprintf(stderr, "chain_read: %s\n", err.message);
            exit(2);
        }
        for (i = 0; i < c.n_entries; i++)
            if (strcmp(c.entries[i].key, key) == 0) {
                c.entries[i].bytes = len;
                c.entries[i].digest = wsync_digest(bytes, len);
            }
        if (wsync_chain_head_format(&c, &text, &tl, &err) != WSYNC_OK ||
            st->put(st->user, "HEAD", text, tl, &err) != WSYNC_OK) {
            fprintf(stderr, "head: %s\n", err.message);
            exit(2);
        }
        free(text);
        wsync_chain_info_free(&c);
    }
}

enum { C_BITFLIP, C_TRUNCATED, C_DTYPE, C_DTYPE_FIXED, C_JSON_FIXED, C_HLEN_FIXED, C_SHORT_FIXED, C_N };
static const char *c_names[C_N] = {"a bit flipped in the data",
                                   "cut short",
                                   "a wrong dtype in the header (HEAD's digest not matching)",
                                   "a wrong dtype in the header (HEAD's digest matching)",
                                   "broken header JSON (HEAD's digest matching)",
                                   "a header length past the end (HEAD's digest matching)",
                                   "4 bytes long (HEAD's digest matching)"};
static const wsync_result c_codes[C_N] = {WSYNC_ERR_DIGEST_MISMATCH, WSYNC_ERR_TRUNCATED,   WSYNC_ERR_DIGEST_MISMATCH,
                                          WSYNC_ERR_LAYOUT,          WSYNC_ERR_INVALID_JSON, WSYNC_ERR_TRUNCATED,
                                          WSYNC_ERR_TRUNCATED};
static const char *c_words[C_N] = {"digest", "truncated", "digest", "the chain has F16", "", "header length", "fewer"};

/* Applies corruption `kind` to the object under key (saved in sv). */
static void corrupt(wsync_store *st, const char *key, const saved *sv, int kind)
{
    uint8_t *b = (uint8_t *)malloc((size_t)sv->obj_size + 1);
    size_t n = (size_t)sv->obj_size;
    uint64_t hlen = 0;
    char *p;
    int k;
    if (!b) exit(2);
    memcpy(b, sv->obj, n);
    for (k = 0; k < 8; k++) hlen |= (uint64_t)b[k] << (8 * k);
    switch (kind) {
    case C_BITFLIP: b[n - 1000] ^= 0x10; break;
    case C_TRUNCATED: n -= 100; break;
    case C_DTYPE:
    case C_DTYPE_FIXED:
    case C_JSON_FIXED:
        b[8 + hlen] = 0;
        p = strstr((char *)b + 8, "\"BF16\"");
        if (!p) exit(2);
        if (kind == C_JSON_FIXED) p[0] = '#';
        else memcpy(p, "\"F16\" ", 6); /* the same length: the offsets stay */
        b[8 + hlen] = sv->obj[8 + hlen];
        break;
    case C_HLEN_FIXED:
        hlen = (uint64_t)n;
        for (k = 0; k < 8; k++) b[k] = (uint8_t)(hlen >> (8 * k));
        break;
    case C_SHORT_FIXED: n = 4; break;
    }
    put_object(st, key, b, n, kind != C_BITFLIP && kind != C_TRUNCATED && kind != C_DTYPE);
    free(b);
}

/* ======================================================================
   Tests
   ====================================================================== */

static const uint64_t small_shapes[3][2] = {{64, 48}, {96, 32}, {200, 3}};

static void test_exact(void)
{
    model m;
    wstore w;
    wsync_store st;
    sub u;
    wsync_error err;
    wsync_result r;
    counter c;
    memset(&w, 0, sizeof w);
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    model_init(&m, 3, small_shapes);
    if (wsync_store_mem_open(NULL, &w.inner, &err) != WSYNC_OK) exit(2);
    st = wrap(&w);
    publish(&st, &m, 3);

    TEST_BEGIN("a fresh anchor sync streams into the targets, exactly");
    sub_open(&u, &st, &m, &c, g_spool);
    r = sync_to(&u, 1, &err);
    CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
    CHECK_EQ_U64(sub_step(&u), 1);
    CHECK(same_as(&m, u.img, 1));
    CHECK_EQ_INT(w.seen_in_spool, 0);
    TEST_END();

    TEST_BEGIN("an anchor sync from a step goes through the spool, exactly, and leaves no file");
    w.seen_in_spool = 0;
    r = sync_to(&u, 3, &err);
    CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
    CHECK_EQ_U64(sub_step(&u), 3);
    CHECK(same_as(&m, u.img, 3));
    CHECK_EQ_INT(w.seen_in_spool, 0); /* unlinked as soon as it was made */
    CHECK_EQ_INT(dir_entries(g_spool), 0);
    r = sync_to(&u, 2, &err); /* backwards: an anchor again */
    CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
    CHECK(same_as(&m, u.img, 2));
    CHECK_EQ_INT(dir_entries(g_spool), 0);
    sub_close(&u);
    CHECK_EQ_U64(c.live, 0);
    TEST_END();

    TEST_BEGIN("the spool defaults to $TMPDIR");
    {
        char dir[] = "/tmp/wsync-bm-tmpdir-XXXXXX";
        const char *old = getenv("TMPDIR");
        char *saved_tmp = old ? strdup(old) : NULL;
        CHECK(mkdtemp(dir) != NULL);
        setenv("TMPDIR", dir, 1);
        sub_open(&u, &st, &m, NULL, NULL);
        CHECK(sync_to(&u, 1, &err) == WSYNC_OK);
        w.seen_in_spool = 0;
        r = sync_to(&u, 2, &err);
        CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
        CHECK(same_as(&m, u.img, 2));
        CHECK_EQ_INT(dir_entries(dir), 0);
        sub_close(&u);
        /* a TMPDIR that does not exist: the sync says so, the step stays */
        setenv("TMPDIR", "/nonexistent/wsync-bm", 1);
        sub_open(&u, &st, &m, NULL, NULL);
        CHECK(sync_to(&u, 1, &err) == WSYNC_OK); /* no step: streamed, no spool */
        r = sync_to(&u, 2, &err);
        CHECK_EQ_INT(r, WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "spool") != NULL, "%s", err.message);
        CHECK_EQ_U64(sub_step(&u), 1);
        CHECK(same_as(&m, u.img, 1));
        sub_close(&u);
        if (saved_tmp) setenv("TMPDIR", saved_tmp, 1);
        else unsetenv("TMPDIR");
        free(saved_tmp);
        rmdir(dir);
    }
    TEST_END();

    TEST_BEGIN("the prefetch spools an anchor and apply_ready copies it in, exactly");
    {
        uint64_t ready = 0, base;
        int i;
        wsync_sync_stats ss;
        sub_open(&u, &st, &m, &c, g_spool);
        CHECK(sync_to(&u, 1, &err) == WSYNC_OK);
        counter_reset_peak(&c);
        base = c.live;
        CHECK(wsync_subscriber_start(u.s, 5, &err) == WSYNC_OK);
        for (i = 0; i < 2000 && !(wsync_subscriber_ready(u.s, &ready) && ready == 3); i++) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        CHECK_EQ_U64(ready, 3);
        CHECK_EQ_INT(dir_entries(g_spool), 0);
        r = wsync_subscriber_apply_ready(u.s, &ss, &err);
        CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
        CHECK_EQ_U64(sub_step(&u), 3);
        CHECK(same_as(&m, u.img, 3));
        CHECK_EQ_INT((int)ss.anchors, 1);
        wsync_subscriber_stop(u.s);
        /* never the anchor whole (its data alone is 2 * total bytes) */
        CHECK_MSG(c.peak - base < m.total * 2, "peak %llu over %llu", (unsigned long long)(c.peak - base),
                  (unsigned long long)base);
        sub_close(&u);
        CHECK_EQ_U64(c.live, 0);
    }
    TEST_END();

    wsync_store_close(&w.inner);
    pthread_mutex_destroy(&c.mu);
}

static void test_corrupt(void)
{
    model m;
    wstore w;
    wsync_store st;
    saved sv;
    wsync_error err;
    wsync_result r;
    int kind;
    char name[200];
    const char *key = "anchors/step_000002.safetensors";
    memset(&w, 0, sizeof w);
    model_init(&m, 3, small_shapes);
    if (wsync_store_mem_open(NULL, &w.inner, &err) != WSYNC_OK) exit(2);
    st = wrap(&w);
    publish(&st, &m, 2);
    save(&st, key, &sv);
    for (kind = 0; kind < C_N; kind++) {
        sub u, v;
        snprintf(name, sizeof name, "anchor %s: targets at a step keep it exactly; the error says why", c_names[kind]);
        TEST_BEGIN(name);
        sub_open(&u, &st, &m, NULL, g_spool);
        CHECK(sync_to(&u, 1, &err) == WSYNC_OK);
        corrupt(&st, key, &sv, kind);
        r = sync_to(&u, 2, &err);
        CHECK_MSG(r == c_codes[kind], "%s, expected %s: %s", wsync_result_name(r), wsync_result_name(c_codes[kind]),
                  err.message);
        CHECK_MSG(strstr(err.message, key) != NULL && strstr(err.message, c_words[kind]) != NULL, "message: %s",
                  err.message);
        CHECK_EQ_U64(sub_step(&u), 1);
        CHECK(same_as(&m, u.img, 1));
        CHECK_EQ_INT(dir_entries(g_spool), 0);
        /* the prefetch refuses it too, and offers nothing */
        {
            wsync_prefetch_status ps;
            int i;
            CHECK(wsync_subscriber_start(u.s, 5, &err) == WSYNC_OK);
            for (i = 0; i < 2000; i++) {
                struct timespec ts = {0, 5000000};
                wsync_subscriber_prefetch_status(u.s, &ps);
                if (ps.polls >= 2) break;
                nanosleep(&ts, NULL);
            }
            wsync_subscriber_stop(u.s);
            CHECK(!wsync_subscriber_ready(u.s, NULL));
            CHECK(wsync_subscriber_apply_ready(u.s, NULL, &err) == WSYNC_OK);
            CHECK_EQ_U64(sub_step(&u), 1);
            CHECK(same_as(&m, u.img, 1));
        }
        TEST_END();

        snprintf(name, sizeof name, "anchor %s: targets without a step get none (and hold zeros)", c_names[kind]);
        TEST_BEGIN(name);
        sub_open(&v, &st, &m, NULL, g_spool);
        r = sync_to(&v, 2, &err);
        CHECK_MSG(r == c_codes[kind], "%s, expected %s: %s", wsync_result_name(r), wsync_result_name(c_codes[kind]),
                  err.message);
        CHECK_MSG(strstr(err.message, key) != NULL, "message: %s", err.message);
        CHECK_EQ_U64(sub_step(&v), UINT64_MAX);
        CHECK(is_zero(v.img, m.total));
        CHECK_EQ_INT(dir_entries(g_spool), 0);
        TEST_END();

        TEST_BEGIN("the anchor repaired: both reach it exactly");
        restore(&st, key, &sv);
        r = sync_to(&u, 2, &err);
        CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
        CHECK(same_as(&m, u.img, 2));
        r = sync_to(&v, 2, &err);
        CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
        CHECK(same_as(&m, v.img, 2));
        CHECK_EQ_INT(dir_entries(g_spool), 0);
        sub_close(&u);
        sub_close(&v);
        TEST_END();
    }
    saved_free(&sv);
    wsync_store_close(&w.inner);
}

/* 112 MiB of tensors: more than the bound of 64 MiB (no deltas here). */
static void test_peak(void)
{
    static const uint64_t big[3][2] = {{8192, 4096}, {4096, 4096}, {2048, 4096}};
    model m;
    wstore w;
    wsync_store st;
    wsync_chain_info ci;
    sub u;
    wsync_error err;
    wsync_result r;
    counter c;
    uint64_t bound = (uint64_t)64 << 20, largest_delta = 0;
    size_t i;
    memset(&w, 0, sizeof w);
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    model_init(&m, 3, big);
    if (wsync_store_mem_open(NULL, &w.inner, &err) != WSYNC_OK) exit(2);
    st = wrap(&w);
    publish(&st, &m, 1);
    if (wsync_chain_read(&st, NULL, &ci, &err) != WSYNC_OK) exit(2);
    for (i = 0; i < ci.n_entries; i++)
        if (ci.entries[i].kind == WSYNC_CHAIN_DELTA && ci.entries[i].bytes > largest_delta)
            largest_delta = ci.entries[i].bytes;
    wsync_chain_info_free(&ci);
    bound += largest_delta;

    TEST_BEGIN("peak memory: a fresh anchor sync of 112 MiB holds under 64 MiB + the largest delta");
    sub_open(&u, &st, &m, &c, g_spool);
    CHECK((uint64_t)m.total * 2 > bound);
    counter_reset_peak(&c);
    r = sync_to(&u, 0, &err);
    CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
    CHECK(same_as(&m, u.img, 0));
    CHECK_MSG(c.peak < bound, "peak %llu bytes, bound %llu", (unsigned long long)c.peak, (unsigned long long)bound);
    CHECK_MSG(c.largest < bound, "largest %llu", (unsigned long long)c.largest);
    printf("  fresh: peak %llu bytes live, largest allocation %llu, model %llu\n", (unsigned long long)c.peak,
           (unsigned long long)c.largest, (unsigned long long)m.total * 2);
    TEST_END();

    TEST_BEGIN("peak memory: a spooled anchor sync of 112 MiB holds under 64 MiB + the largest delta");
    counter_reset_peak(&c);
    r = sync_to(&u, 1, &err);
    CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
    CHECK(same_as(&m, u.img, 1));
    CHECK_MSG(c.peak < bound, "peak %llu bytes, bound %llu", (unsigned long long)c.peak, (unsigned long long)bound);
    CHECK_MSG(c.largest < bound, "largest %llu", (unsigned long long)c.largest);
    CHECK_EQ_INT(dir_entries(g_spool), 0);
    printf("  spooled: peak %llu bytes live, largest allocation %llu\n", (unsigned long long)c.peak,
           (unsigned long long)c.largest);
    sub_close(&u);
    TEST_END();

    wsync_store_close(&w.inner);
    pthread_mutex_destroy(&c.mu);
}

int main(void)
{
    snprintf(g_spool, sizeof g_spool, "/tmp/wsync-bm-spool-XXXXXX");
    if (!mkdtemp(g_spool)) {
        perror("mkdtemp");
        return 2;
    }
    test_exact();
    test_corrupt();
    test_peak();
    rmdir(g_spool);
    return check_summary();
}
