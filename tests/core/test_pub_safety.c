/* The publisher never deletes what it cannot prove it wrote or superseded.

   Over a HEAD that fails its check, or a store holding chain objects
   without HEAD (a foreign or damaged chain), wsync_publisher_open refuses;
   WSYNC_CHAIN_NEW_CHAIN starts a new chain there, keeps every old object
   and publishes only steps after the newest one present. Retention deletes
   only what an older HEAD of this chain named and the new one does not:
   objects planted by someone else stay, and a delete that fails is counted
   and kept named in HEAD until a later publish removes it. Each case runs
   on the memory store and on a directory store. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"
#include "small_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a small bf16 model whose image is a function of the step ---- */

#define NW (64 * 32)
#define NB 32
static const uint64_t g_wshape[2] = {64, 32};
static const uint64_t g_bshape[1] = {NB};

typedef struct model {
    uint16_t w[NW], b[NB];
    wsync_tensor t[2];
} model;

static void model_at(model *m, uint64_t step)
{
    size_t i;
    uint64_t s;
    for (i = 0; i < NW; i++) m->w[i] = (uint16_t)(0x3c00u + (i * 7) % 251);
    for (i = 0; i < NB; i++) m->b[i] = (uint16_t)(0x3f00u + i);
    for (s = 1; s <= step; s++)
        for (i = 0; i < 12; i++) m->w[(s * 37 + i * 101) % NW] ^= 1u;
    m->t[0].name = "w";
    m->t[0].dtype = WSYNC_DTYPE_BF16;
    m->t[0].rank = 2;
    m->t[0].shape = g_wshape;
    m->t[0].data = m->w;
    m->t[0].nbytes = sizeof m->w;
    m->t[1].name = "b";
    m->t[1].dtype = WSYNC_DTYPE_BF16;
    m->t[1].rank = 1;
    m->t[1].shape = g_bshape;
    m->t[1].data = m->b;
    m->t[1].nbytes = sizeof m->b;
}

static wsync_chain_options opts(uint32_t k, uint32_t retain, unsigned flags)
{
    wsync_chain_options o;
    memset(&o, 0, sizeof o);
    o.anchor_every = k;
    o.retain = retain;
    o.flags = flags;
    return o;
}

/* Publishes from..to with one publisher; 1 when all went through. */
static int publish_range(const wsync_store *st, const wsync_chain_options *o, uint64_t from, uint64_t to)
{
    wsync_publisher *p = NULL;
    wsync_error err;
    uint64_t s;
    int ok = 1;
    model m;
    if (wsync_publisher_open(st, o, &p, &err) != WSYNC_OK) {
        printf("  open: %s\n", err.message);
        return 0;
    }
    for (s = from; s <= to && ok; s++) {
        wsync_publish_stats ps;
        model_at(&m, s);
        if (wsync_publish(p, s, m.t, 2, &ps, &err) != WSYNC_OK) {
            printf("  publish %llu: %s\n", (unsigned long long)s, err.message);
            ok = 0;
        }
    }
    wsync_publisher_close(p);
    return ok;
}

/* One publish with a fresh publisher; the result, stats and error. */
static wsync_result publish_one(const wsync_store *st, const wsync_chain_options *o, uint64_t step,
                                wsync_publish_stats *ps, wsync_error *err)
{
    wsync_publisher *p = NULL;
    wsync_result r;
    model m;
    memset(ps, 0, sizeof *ps);
    if ((r = wsync_publisher_open(st, o, &p, err)) != WSYNC_OK) return r;
    model_at(&m, step);
    r = wsync_publish(p, step, m.t, 2, ps, err);
    wsync_publisher_close(p);
    return r;
}

/* ---- what a store holds: keys with a digest of their bytes ---- */

typedef struct snap {
    char (*k)[96];
    uint64_t *dig;
    size_t n, cap;
} snap;

static int snap_add(void *user, const char *key, uint64_t size)
{
    snap *s = (snap *)user;
    (void)size;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 32;
        s->k = (char(*)[96])realloc(s->k, s->cap * 96);
        s->dig = (uint64_t *)realloc(s->dig, s->cap * sizeof *s->dig);
    }
    snprintf(s->k[s->n++], 96, "%s", key);
    return 0;
}

static snap snap_take(const wsync_store *st)
{
    snap s;
    wsync_error err;
    size_t i;
    memset(&s, 0, sizeof s);
    if (st->list(st->user, "", snap_add, &s, &err) != WSYNC_OK) printf("  list: %s\n", err.message);
    for (i = 0; i < s.n; i++) {
        uint8_t *b = NULL;
        uint64_t size = 0;
        s.dig[i] = 0;
        if (wsync_store_get_all(st, s.k[i], NULL, &b, &size, &err) == WSYNC_OK) s.dig[i] = wsync_digest(b, size);
        free(b);
    }
    return s;
}

static void snap_free(snap *s)
{
    free(s->k);
    free(s->dig);
    memset(s, 0, sizeof *s);
}

static long snap_find(const snap *s, const char *key)
{
    size_t i;
    for (i = 0; i < s->n; i++)
        if (strcmp(s->k[i], key) == 0) return (long)i;
    return -1;
}

/* Every object of `old` is in `now` with the same bytes (HEAD excepted
   when `but_head`); 1 when so, else names the first missing one. */
static int snap_kept(const snap *old, const snap *now, int but_head)
{
    size_t i;
    for (i = 0; i < old->n; i++) {
        long j;
        if (but_head && strcmp(old->k[i], "HEAD") == 0) continue;
        j = snap_find(now, old->k[i]);
        if (j < 0 || now->dig[j] != old->dig[i]) {
            printf("  %s %s\n", old->k[i], j < 0 ? "was deleted" : "was changed");
            return 0;
        }
    }
    return 1;
}

static int snap_same(const snap *a, const snap *b)
{
    return a->n == b->n && snap_kept(a, b, 0);
}

static int has_key(const wsync_store *st, const char *key)
{
    uint64_t size;
    return st->head(st->user, key, &size, NULL) == WSYNC_OK;
}

static int head_names(const wsync_store *st, wsync_chain_kind kind, uint64_t step)
{
    wsync_chain_info ci;
    wsync_error err;
    size_t i;
    int found = 0;
    if (wsync_chain_read(st, NULL, &ci, &err) != WSYNC_OK) {
        printf("  chain_read: %s\n", err.message);
        return -1;
    }
    for (i = 0; i < ci.n_entries; i++)
        if (ci.entries[i].kind == kind && ci.entries[i].step == step) found = 1;
    if (!ci.has_head) found = -1;
    wsync_chain_info_free(&ci);
    return found;
}

static int flip_head(const wsync_store *st)
{
    uint8_t *b = NULL;
    uint64_t size = 0;
    wsync_error err;
    int ok;
    if (wsync_store_get_all(st, "HEAD", NULL, &b, &size, &err) != WSYNC_OK || size < 2) return 0;
    b[size / 2] ^= 0x01;
    ok = st->put(st->user, "HEAD", b, (size_t)size, &err) == WSYNC_OK;
    free(b);
    return ok;
}

/* ---- a store wrapped so its del fails, or is missing ---- */

typedef struct wrap {
    wsync_store in;
    int fail_del;
    unsigned del_calls;
} wrap;

static wsync_result w_put(void *u, const char *key, const void *bytes, size_t len, wsync_error *err)
{
    wrap *w = (wrap *)u;
    return w->in.put(w->in.user, key, bytes, len, err);
}
static wsync_result w_get(void *u, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                          void *sink_user, uint64_t *size, wsync_error *err)
{
    wrap *w = (wrap *)u;
    return w->in.get(w->in.user, key, offset, len, sink, sink_user, size, err);
}
static wsync_result w_head(void *u, const char *key, uint64_t *size, wsync_error *err)
{
    wrap *w = (wrap *)u;
    return w->in.head(w->in.user, key, size, err);
}
static wsync_result w_list(void *u, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    wrap *w = (wrap *)u;
    return w->in.list(w->in.user, prefix, fn, fn_user, err);
}
static wsync_result w_del(void *u, const char *key, wsync_error *err)
{
    wrap *w = (wrap *)u;
    w->del_calls++;
    if (w->fail_del) {
        if (err) {
            err->code = WSYNC_ERR_AUTH;
            snprintf(err->message, sizeof err->message, "%s", "delete refused (test)");
        }
        return WSYNC_ERR_AUTH;
    }
    return w->in.del(w->in.user, key, err);
}

static wsync_store wrap_store(wrap *w, const wsync_store *in, int with_del)
{
    wsync_store s;
    memset(w, 0, sizeof *w);
    w->in = *in;
    memset(&s, 0, sizeof s);
    s.user = w;
    s.put = w_put;
    s.get = w_get;
    s.head = w_head;
    s.list = w_list;
    s.del = with_del ? w_del : NULL;
    return s;
}

/* ====================================================================== */

static void test_bad_head(int dir)
{
    sm_env e;
    snap before, after;
    wsync_publisher *p = NULL;
    wsync_publish_stats ps;
    wsync_error err;
    wsync_chain_options o = opts(3, 2, 0), no = opts(3, 2, WSYNC_CHAIN_NEW_CHAIN);
    char name[160];
    uint64_t s;

    snprintf(name, sizeof name, "%s: a HEAD with one flipped byte: open refuses, nothing is deleted",
             dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_pub_safety"));
    CHECK(publish_range(&e.st, &o, 0, 6));
    CHECK(flip_head(&e.st));
    before = snap_take(&e.st);
    CHECK(before.n >= 3);
    CHECK_EQ_INT(wsync_publisher_open(&e.st, &o, &p, &err), WSYNC_ERR_BAD_HEAD);
    CHECK_MSG(strstr(err.message, "HEAD") && strstr(err.message, "WSYNC_CHAIN_NEW_CHAIN") &&
                  strstr(err.message, "--new-chain"),
              "message: %s", err.message);
    if (check__is_verbose() && !dir) printf("  note: %s\n", err.message);
    if (p) { /* the old behaviour: a new chain that deletes the old one */
        model m;
        model_at(&m, 7);
        wsync_publish(p, 7, m.t, 2, &ps, &err);
        wsync_publisher_close(p);
        p = NULL;
    }
    after = snap_take(&e.st);
    CHECK(snap_same(&before, &after));
    snap_free(&after);
    TEST_END();

    snprintf(name, sizeof name, "%s: WSYNC_CHAIN_NEW_CHAIN over a bad HEAD: only steps after the newest, old "
             "objects kept", dir ? "dir" : "mem");
    TEST_BEGIN(name);
    for (s = 0; s <= 6; s++) {
        CHECK_MSG(publish_one(&e.st, &no, s, &ps, &err) == WSYNC_ERR_INVALID_ARGUMENT, "step %llu",
                  (unsigned long long)s);
        CHECK_MSG(strstr(err.message, "newest") != NULL, "message: %s", err.message);
    }
    after = snap_take(&e.st);
    CHECK(snap_same(&before, &after));
    snap_free(&after);
    CHECK_EQ_INT(publish_one(&e.st, &no, 7, &ps, &err), WSYNC_OK);
    CHECK(ps.wrote_anchor);
    CHECK_EQ_U64(ps.deleted, 0);
    CHECK_EQ_INT(head_names(&e.st, WSYNC_CHAIN_ANCHOR, 7), 1);
    /* the new chain goes on; its retention never touches the old objects */
    CHECK(publish_range(&e.st, &o, 8, 20));
    after = snap_take(&e.st);
    CHECK(snap_kept(&before, &after, 1));
    CHECK(!has_key(&e.st, "anchors/step_000007.safetensors")); /* its own: retention works */
    CHECK(has_key(&e.st, "anchors/step_000019.safetensors"));
    snap_free(&after);
    snap_free(&before);
    sm_env_close(&e);
    TEST_END();
}

static void test_headless(int dir)
{
    sm_env e;
    snap before, after;
    wsync_publisher *p = NULL;
    wsync_publish_stats ps;
    wsync_error err;
    wsync_chain_options o = opts(20, 40, 0), no = opts(20, 40, WSYNC_CHAIN_NEW_CHAIN);
    char name[160];

    snprintf(name, sizeof name, "%s: a store without HEAD holding steps 0-2: open refuses", dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_pub_safety"));
    CHECK(publish_range(&e.st, &o, 0, 2));
    CHECK_EQ_INT(e.st.del(e.st.user, "HEAD", &err), WSYNC_OK);
    before = snap_take(&e.st);
    CHECK_EQ_INT(before.n, 3);
    CHECK_EQ_INT(wsync_publisher_open(&e.st, &o, &p, &err), WSYNC_ERR_BAD_HEAD);
    CHECK_MSG(strstr(err.message, "WSYNC_CHAIN_NEW_CHAIN") != NULL, "message: %s", err.message);
    if (check__is_verbose() && !dir) printf("  note: %s\n", err.message);
    if (p) {
        model m;
        model_at(&m, 1);
        wsync_publish(p, 1, m.t, 2, &ps, &err);
        wsync_publisher_close(p);
        p = NULL;
    }
    after = snap_take(&e.st);
    CHECK(snap_same(&before, &after));
    snap_free(&after);
    TEST_END();

    snprintf(name, sizeof name, "%s: WSYNC_CHAIN_NEW_CHAIN without HEAD: step 1 refused, step 3 kept with step 2",
             dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK_EQ_INT(publish_one(&e.st, &no, 1, &ps, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "step 2") != NULL, "message: %s", err.message);
    CHECK_EQ_INT(publish_one(&e.st, &no, 2, &ps, &err), WSYNC_ERR_INVALID_ARGUMENT);
    after = snap_take(&e.st);
    CHECK(snap_same(&before, &after));
    snap_free(&after);
    CHECK_EQ_INT(publish_one(&e.st, &no, 3, &ps, &err), WSYNC_OK);
    CHECK(has_key(&e.st, "deltas/step_000002.safetensors"));
    after = snap_take(&e.st);
    CHECK(snap_kept(&before, &after, 0));
    snap_free(&after);
    snap_free(&before);
    sm_env_close(&e);
    TEST_END();

    snprintf(name, sizeof name, "%s: WSYNC_CHAIN_NEW_CHAIN on an empty store publishes any step",
             dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_pub_safety"));
    CHECK_EQ_INT(publish_one(&e.st, &no, 0, &ps, &err), WSYNC_OK);
    CHECK(ps.wrote_anchor);
    sm_env_close(&e);
    TEST_END();
}

static void test_foreign(int dir)
{
    sm_env e;
    wsync_error err;
    wsync_chain_options o = opts(5, 2, 0);
    char name[160];
    static const char *planted[] = {"deltas/step_000001.safetensors", "anchors/step_000003.safetensors",
                                    "deltas/step_000012.safetensors"};
    size_t i;
    wsync_chain_info ci;

    snprintf(name, sizeof name, "%s: retention never deletes an object HEAD never named", dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_pub_safety"));
    CHECK(publish_range(&e.st, &o, 0, 10));
    CHECK(!has_key(&e.st, "deltas/step_000001.safetensors")); /* retention removed the chain's own */
    for (i = 0; i < 3; i++) CHECK_EQ_INT(e.st.put(e.st.user, planted[i], "not ours", 8, &err), WSYNC_OK);
    CHECK(publish_range(&e.st, &o, 11, 11)); /* reopened: HEAD 10 */
    CHECK(publish_range(&e.st, &o, 13, 25)); /* 12 skipped: the planted delta is never named */
    for (i = 0; i < 3; i++) CHECK_MSG(has_key(&e.st, planted[i]), "%s deleted", planted[i]);
    /* and everything else outside the retention window is gone */
    memset(&ci, 0, sizeof ci);
    CHECK_EQ_INT(wsync_chain_read(&e.st, NULL, &ci, &err), WSYNC_OK);
    {
        snap now = snap_take(&e.st);
        for (i = 0; i < now.n; i++) {
            size_t j;
            int named = strcmp(now.k[i], "HEAD") == 0;
            for (j = 0; j < 3; j++) named |= strcmp(now.k[i], planted[j]) == 0;
            for (j = 0; j < ci.n_entries; j++) named |= strcmp(now.k[i], ci.entries[j].key) == 0;
            CHECK_MSG(named, "%s left behind", now.k[i]);
        }
        snap_free(&now);
    }
    wsync_chain_info_free(&ci);
    sm_env_close(&e);
    TEST_END();
}

static void test_del_fails(int dir, int with_del)
{
    sm_env e;
    wrap w;
    wsync_store s;
    wsync_publisher *p = NULL;
    wsync_publish_stats ps;
    wsync_error err;
    wsync_chain_options o = opts(3, 2, 0);
    char name[160];
    model m;
    uint64_t st;

    snprintf(name, sizeof name, "%s: a store %s: counted, still named in HEAD, removed later",
             dir ? "dir" : "mem", with_del ? "whose deletes fail" : "without del");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_pub_safety"));
    s = wrap_store(&w, &e.st, with_del);
    w.fail_del = 1;
    memset(&ps, 0, sizeof ps);
    CHECK_EQ_INT(wsync_publisher_open(&s, &o, &p, &err), WSYNC_OK);
    for (st = 0; st <= 3 && p; st++) {
        model_at(&m, st);
        CHECK_EQ_INT(wsync_publish(p, st, m.t, 2, &ps, &err), WSYNC_OK);
        if (st < 3) CHECK_EQ_U64(ps.retention_failed, 0);
    }
    /* at 3 (an anchor) retention drops anchor 0 and delta 1 */
    CHECK_EQ_U64(ps.deleted, 0);
    CHECK_EQ_U64(ps.retention_failed, 2);
    CHECK(has_key(&e.st, "anchors/step_000000.safetensors"));
    CHECK(has_key(&e.st, "deltas/step_000001.safetensors"));
    CHECK_EQ_INT(head_names(&e.st, WSYNC_CHAIN_ANCHOR, 0), 1);
    CHECK_EQ_INT(head_names(&e.st, WSYNC_CHAIN_DELTA, 1), 1);
    wsync_publisher_close(p);
    p = NULL;
    /* a later publish, by a new process, with a working del */
    if (with_del) {
        w.fail_del = 0;
        CHECK_EQ_INT(publish_one(&s, &o, 4, &ps, &err), WSYNC_OK);
    } else {
        CHECK_EQ_INT(publish_one(&e.st, &o, 4, &ps, &err), WSYNC_OK);
    }
    CHECK_EQ_U64(ps.retention_failed, 0);
    CHECK_EQ_U64(ps.deleted, 3); /* anchor 0, deltas 1 and 2 */
    CHECK(!has_key(&e.st, "anchors/step_000000.safetensors"));
    CHECK(!has_key(&e.st, "deltas/step_000001.safetensors"));
    CHECK(!has_key(&e.st, "deltas/step_000002.safetensors"));
    CHECK_EQ_INT(head_names(&e.st, WSYNC_CHAIN_ANCHOR, 0), 0);
    CHECK_EQ_INT(head_names(&e.st, WSYNC_CHAIN_DELTA, 1), 0);
    sm_env_close(&e);
    TEST_END();
}

static void test_step_message(void)
{
    sm_env e;
    wsync_publish_stats ps;
    wsync_error err;
    wsync_chain_options o = opts(5, 10, 0);
    TEST_BEGIN("a step not after HEAD's: the message says how to go on or start over");
    CHECK(sm_env_open(&e, 0, "test_pub_safety"));
    CHECK(publish_range(&e.st, &o, 0, 5));
    CHECK_EQ_INT(publish_one(&e.st, &o, 0, &ps, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "step 0 is not after HEAD's step 5") && strstr(err.message, "after 5") &&
                  strstr(err.message, "wsync_publisher_head") && strstr(err.message, "wsync log") &&
                  strstr(err.message, "new prefix") && strstr(err.message, "empty store"),
              "message: %s", err.message);
    sm_env_close(&e);
    TEST_END();
}

int main(void)
{
    int dir;
    for (dir = 0; dir < 2; dir++) {
        test_bad_head(dir);
        test_headless(dir);
        test_foreign(dir);
        test_del_fails(dir, 1);
        test_del_fails(dir, 0);
    }
    test_step_message();
    return check_summary();
}
