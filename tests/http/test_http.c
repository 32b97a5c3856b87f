/* The HTTP store (wsync_http.h) against a real nginx, started by
   tests/http/test_http.sh, which sets:
     WSYNC_TEST_HTTP_URL     http://127.0.0.1:PORT  (nginx, dav + JSON autoindex)
     WSYNC_TEST_HTTP_PROXY   http://127.0.0.1:PORT  (tests/http/servers/fault_proxy.py in front of it)
     WSYNC_TEST_HTTP_DATA    nginx's root directory (to corrupt objects behind its back)
     WSYNC_TEST_NGINX_PID, WSYNC_TEST_NGINX_START   (to kill and restart it)
     WSYNC_TEST_HTTP_TAG     a prefix unique to this run
   Without them only the listing parser's tests run.

   What every store must do (put, get, ranges, listing, the chain over it)
   is the conformance suite's (tests/http/test_conformance.c, which
   tests/http/test_http.sh runs against this nginx too). Here: parallel
   ranged downloads, MKCOL, the JSON listing parser on hostile input, what
   a server without listings says, kept connections, and faults: 500/503/429 retried, bodies cut short
   and resumed, a slowed response abandoned in time, 401 not retried, nginx
   killed and restarted with the subscriber catching up, and nginx killed in
   the middle of a download (one stream, parallel parts), an upload, a
   subscriber's anchor and a publisher's anchor: each completes bit-exact
   after retries or fails cleanly in time, and the subscriber catches up. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"
#include "check.h"
#include "small_model.h"

#include <curl/curl.h>
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *g_url, *g_proxy, *g_data, *g_tag;

typedef struct collected {
    char keys[64][160];
    uint64_t sizes[64];
    int n, stop_after;
} collected;

static int collect(void *user, const char *key, uint64_t size)
{
    collected *c = (collected *)user;
    if (c->n < 64) {
        snprintf(c->keys[c->n], sizeof c->keys[c->n], "%s", key);
        c->sizes[c->n] = size;
    }
    c->n++;
    return c->stop_after && c->n >= c->stop_after;
}

/* A store on base + "/" + g_tag + "/" + sub. */
static int open_at(const char *base, const char *sub, const wsync_http_options *o, wsync_store *s)
{
    char url[512];
    wsync_error err;
    snprintf(url, sizeof url, "%s/%s/%s", base, g_tag, sub);
    if (wsync_store_http_open(url, o, s, &err) != WSYNC_OK) {
        CHECK_MSG(0, "open %s: %s", url, err.message);
        return 0;
    }
    return 1;
}

/* The fault proxy's control requests. */
static long proxy_ctl(const char *fmt, ...)
{
    char path[512], url[700], out[64];
    size_t got = 0;
    va_list ap;
    CURL *c = curl_easy_init();
    FILE *f;
    long v = -1;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    snprintf(url, sizeof url, "%s%s", g_proxy, path);
    f = tmpfile();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    if (curl_easy_perform(c) == CURLE_OK && f) {
        rewind(f);
        got = fread(out, 1, sizeof out - 1, f);
        out[got] = 0;
        v = strtol(out, NULL, 10);
    }
    if (f) fclose(f);
    curl_easy_cleanup(c);
    return v;
}

/* ======================================================================
   The listing parser, on its own
   ====================================================================== */

typedef struct entries {
    char names[16][64];
    int dir[16];
    uint64_t size[16];
    int n;
} entries;

static int entry_fn(void *user, const char *name, size_t len, int is_dir, uint64_t size)
{
    entries *e = (entries *)user;
    if (e->n < 16) {
        snprintf(e->names[e->n], sizeof e->names[e->n], "%.*s", (int)len, name);
        e->dir[e->n] = is_dir;
        e->size[e->n] = size;
    }
    e->n++;
    return 0;
}

static wsync_result parse(const char *s, entries *e, wsync_error *err)
{
    memset(e, 0, sizeof *e);
    return wsync_http_listing_parse(s, strlen(s), entry_fn, e, err);
}

static void test_listing_parser(void)
{
    static const char good[] =
        "[\n{ \"name\":\"anchors\", \"type\":\"directory\", \"mtime\":\"Wed, 29 Nov 2023 17:14:00 GMT\" },\n"
        "{ \"name\":\"HEAD\", \"type\":\"file\", \"mtime\":\"Wed, 29 Nov 2023 17:14:00 GMT\", \"size\":1234 },\n"
        "{ \"name\":\"q\\\"b\\\\s\\u00fc\\ud83d\\ude00\", \"type\":\"file\", \"size\":0 },\n"
        "{ \"name\":\"link\", \"type\":\"other\", \"size\":3, \"x\": null, \"y\": -1.5e3 }\n]\n";
    static const char *bad[] = {
        "", "[", "{}", "[{}]", "[{\"name\":\"a\"}]", "[{\"name\":\"a\",\"type\":\"file\"}]",
        "[{\"name\":\"a\",\"type\":\"file\",\"size\":-1}]", "[{\"name\":\"a\",\"type\":\"file\",\"size\":1.5}]",
        "[{\"name\":\"a\",\"type\":\"file\",\"size\":99999999999999999999}]",
        "[{\"name\":\"a\",\"type\":\"file\",\"size\":\"1\"}]", "[{\"name\":\"a/b\",\"type\":\"file\",\"size\":1}]",
        "[{\"name\":\"..\",\"type\":\"directory\"}]", "[{\"name\":\"\",\"type\":\"directory\"}]",
        "[{\"name\":\"a\\u0000b\",\"type\":\"directory\"}]", "[{\"name\":\"\\ud800\",\"type\":\"directory\"}]",
        "[{\"name\":\"a\",\"name\":\"b\",\"type\":\"directory\"}]", "[{\"name\":\"a\",\"type\":\"directory\"},]",
        "[{\"name\":\"a\",\"type\":\"directory\"}] x", "[{\"name\":\"a\",\"type\":\"directory\",\"m\":{}}]",
        "[{\"name\":\"a\x01\",\"type\":\"directory\"}]", "[{\"name\":\"a\",\"type\":\"directory\"", "<html>",
        "[{\"name\":\"a\",\"type\":\"file\",\"size\":01}]"};
    entries e;
    wsync_error err;
    size_t i, k, len = sizeof good - 1;
    uint64_t x = 88172645463325252ull;
    char *buf;
    TEST_BEGIN("listing parser: nginx's JSON, escapes and unicode, unknown types skipped");
    CHECK_EQ_INT(parse(good, &e, &err), WSYNC_OK);
    CHECK_EQ_INT(e.n, 3);
    CHECK(e.n >= 3 && strcmp(e.names[0], "anchors") == 0 && e.dir[0]);
    CHECK(e.n >= 3 && strcmp(e.names[1], "HEAD") == 0 && !e.dir[1] && e.size[1] == 1234);
    CHECK(e.n >= 3 && strcmp(e.names[2], "q\"b\\s\xc3\xbc\xf0\x9f\x98\x80") == 0 && e.size[2] == 0);
    CHECK_EQ_INT(parse("[]", &e, &err), WSYNC_OK);
    CHECK_EQ_INT(parse(" [ ] ", &e, &err), WSYNC_OK);
    TEST_END();
    TEST_BEGIN("listing parser: malformed listings are INVALID_JSON with an offset");
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wsync_result r = parse(bad[i], &e, &err);
        CHECK_MSG(r == WSYNC_ERR_INVALID_JSON, "'%s' gave %s", bad[i], wsync_result_name(r));
        CHECK(err.message[0] != 0);
    }
    TEST_END();
    TEST_BEGIN("listing parser: every truncation and 20000 mutations, no crash (exact-size buffers)");
    for (k = 0; k + 1 < len; k++) { /* the last byte is a newline */
        buf = (char *)malloc(k ? k : 1);
        memcpy(buf, good, k);
        memset(&e, 0, sizeof e);
        CHECK(wsync_http_listing_parse(buf, k, entry_fn, &e, &err) != WSYNC_OK);
        free(buf);
    }
    for (k = 0; k < 20000; k++) {
        size_t n = 1 + (size_t)(x % len), j;
        buf = (char *)malloc(n);
        memcpy(buf, good, n);
        for (j = 0; j < 1 + k % 4; j++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[x % n] = (char)(x >> 24);
        }
        memset(&e, 0, sizeof e);
        (void)wsync_http_listing_parse(buf, n, entry_fn, &e, &err);
        free(buf);
    }
    TEST_END();
}

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = (uint8_t *)malloc(n);
    size_t i;
    for (i = 0; i < n; i++) p[i] = (uint8_t)((i * 2654435761u + seed * 40503u) >> 11);
    return p;
}

/* Collects into a growing buffer. */
typedef struct grow {
    uint8_t *p;
    size_t n, cap;
    size_t calls;
} grow;

static int grow_sink(void *user, const void *b, size_t n)
{
    grow *g = (grow *)user;
    if (g->n + n > g->cap) {
        size_t cap = g->cap ? g->cap : 65536;
        while (cap < g->n + n) cap *= 2;
        g->p = (uint8_t *)realloc(g->p, cap);
        g->cap = cap;
    }
    memcpy(g->p + g->n, b, n);
    g->n += n;
    g->calls++;
    return 0;
}

/* A parallel download on a thread of its own (two at once on one store:
   one holds the store's multi handle and kept buffers, the other its own). */
typedef struct par_job {
    wsync_store *s;
    const char *key;
    grow g;
    wsync_result r;
    wsync_error err;
} par_job;

static int grow_sink(void *user, const void *b, size_t n);

static void *par_job_main(void *arg)
{
    par_job *j = (par_job *)arg;
    int k;
    for (k = 0; k < 3 && j->r == WSYNC_OK; k++) {
        j->g.n = 0;
        j->r = j->s->get(j->s->user, j->key, 0, UINT64_MAX, grow_sink, &j->g, NULL, &j->err);
    }
    return NULL;
}

/* Records the pieces a download hands the sink; fails (7) on reaching
   byte fail_at. `streamed` counts pieces strictly inside a part after the
   first (the first is a plain stream): only a part streamed to the sink as
   it arrives gives those. */
typedef struct piece_sink {
    uint64_t part, total, fail_at;
    uint64_t n, sum, calls, streamed;
} piece_sink;

static uint64_t sum_of(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    size_t i;
    for (i = 0; i < n; i++) s = s * 31 + p[i];
    return s;
}

static int piece_sink_fn(void *user, const void *b, size_t len)
{
    piece_sink *ps = (piece_sink *)user;
    const uint8_t *p = (const uint8_t *)b;
    size_t i;
    if (ps->fail_at >= ps->n && ps->fail_at < ps->n + len) return 7;
    if (ps->n >= ps->part && len < ps->part && ps->n + len < ps->total &&
        (ps->n % ps->part != 0 || (ps->n + len) % ps->part != 0))
        ps->streamed++;
    for (i = 0; i < len; i++) ps->sum = ps->sum * 31 + p[i];
    ps->n += len;
    ps->calls++;
    return 0;
}

static void test_parallel(void)
{
    wsync_store s;
    wsync_http_options o;
    wsync_http_stats st;
    wsync_error err;
    size_t n = (5u << 20) + 12345;
    uint8_t *obj = pattern(n, 7);
    grow g;
    memset(&o, 0, sizeof o);
    o.parallel = 4;
    o.parallel_threshold = 1u << 20;
    o.part_size = 300000;
    TEST_BEGIN("http: a large object as parallel ranged GETs, in order, bit-exact (whole and ranges)");
    if (open_at(g_url, "parallel", &o, &s)) {
        uint64_t size = 0;
        CHECK_EQ_INT(s.put(s.user, "anchors/step_000001.safetensors", obj, n, &err), WSYNC_OK);
        memset(&g, 0, sizeof g);
        CHECK_EQ_INT(s.get(s.user, "anchors/step_000001.safetensors", 0, UINT64_MAX, grow_sink, &g, &size, &err),
                     WSYNC_OK);
        CHECK(g.n == n && size == n && memcmp(g.p, obj, n) == 0);
        wsync_store_http_stats(&s, &st);
        CHECK_EQ_U64(st.parallel_gets, 1);
        g.n = 0;
        CHECK_EQ_INT(s.get(s.user, "anchors/step_000001.safetensors", 777777, 3000001, grow_sink, &g, &size, &err),
                     WSYNC_OK);
        CHECK(g.n == 3000001 && memcmp(g.p, obj + 777777, 3000001) == 0);
        g.n = 0;
        CHECK_EQ_INT(s.get(s.user, "anchors/step_000001.safetensors", 1000, UINT64_MAX, grow_sink, &g, &size, &err),
                     WSYNC_OK);
        CHECK(g.n == n - 1000 && memcmp(g.p, obj + 1000, n - 1000) == 0);
        g.n = 0;
        CHECK_EQ_INT(s.get(s.user, "anchors/step_000001.safetensors", 1000, n, grow_sink, &g, &size, &err),
                     WSYNC_ERR_OUT_OF_BOUNDS);
        CHECK_EQ_INT(g.n, 0);
        wsync_store_http_stats(&s, &st);
        CHECK(st.parallel_gets >= 3);
        free(g.p);
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("http: the part next in order streams to the sink as it arrives (pieces smaller than a part)");
    o.part_size = 1u << 20;
    if (open_at(g_url, "parallel", &o, &s)) {
        piece_sink ps;
        memset(&ps, 0, sizeof ps);
        ps.part = o.part_size;
        ps.total = n;
        ps.fail_at = UINT64_MAX;
        CHECK_EQ_INT(s.get(s.user, "anchors/step_000001.safetensors", 0, UINT64_MAX, piece_sink_fn, &ps, NULL, &err),
                     WSYNC_OK);
        CHECK_EQ_U64(ps.n, n);
        CHECK_EQ_U64(ps.sum, sum_of(obj, n));
        CHECK_MSG(ps.streamed > 0, "%llu pieces, none of them inside a parallel part", (unsigned long long)ps.calls);
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("http: two threads download in parallel parts from one store at once, bit-exact, three times each");
    if (open_at(g_url, "parallel", &o, &s)) {
        par_job j[2];
        pthread_t th[2];
        int k, started[2];
        memset(j, 0, sizeof j);
        for (k = 0; k < 2; k++) {
            j[k].s = &s;
            j[k].key = "anchors/step_000001.safetensors";
            started[k] = pthread_create(&th[k], NULL, par_job_main, &j[k]) == 0;
        }
        for (k = 0; k < 2; k++) {
            if (started[k]) pthread_join(th[k], NULL);
            CHECK_MSG(started[k] && j[k].r == WSYNC_OK, "%s", j[k].err.message);
            CHECK(j[k].g.n == n && memcmp(j[k].g.p, obj, n) == 0);
            free(j[k].g.p);
        }
        wsync_store_http_stats(&s, &st);
        CHECK_EQ_U64(st.parallel_gets, 6);
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("http: a sink failing inside a streamed part is WSYNC_ERR_SINK; the store works after");
    if (open_at(g_url, "parallel", &o, &s)) {
        piece_sink ps;
        uint64_t fail_at[3];
        int k;
        fail_at[0] = (5u << 19) + 1000; /* inside a part */
        fail_at[1] = 1u << 20;          /* the first parallel part's first byte */
        fail_at[2] = n - 1;             /* the last byte */
        for (k = 0; k < 3; k++) {
            memset(&ps, 0, sizeof ps);
            ps.part = o.part_size;
            ps.total = n;
            ps.fail_at = fail_at[k];
            CHECK_EQ_INT(s.get(s.user, "anchors/step_000001.safetensors", 0, UINT64_MAX, piece_sink_fn, &ps, NULL, &err),
                         WSYNC_ERR_SINK);
            CHECK_MSG(strstr(err.message, "sink failed (7)") != NULL, "%s", err.message);
            CHECK(ps.n <= fail_at[k]);
        }
        memset(&g, 0, sizeof g);
        CHECK_EQ_INT(s.get(s.user, "anchors/step_000001.safetensors", 0, UINT64_MAX, grow_sink, &g, NULL, &err),
                     WSYNC_OK);
        CHECK(g.n == n && memcmp(g.p, obj, n) == 0);
        free(g.p);
        wsync_store_close(&s);
    }
    TEST_END();
    free(obj);
}

/* A location without create_full_put_path: parents made with MKCOL. */
static void test_mkcol(void)
{
    wsync_store s;
    wsync_error err;
    uint8_t *all = NULL;
    uint64_t size;
    char url[512];
    TEST_BEGIN("http: without create_full_put_path, put makes the parent collections (MKCOL)");
    snprintf(url, sizeof url, "%s/nocreate/%s", g_url, g_tag);
    CHECK_EQ_INT(wsync_store_http_open(url, NULL, &s, &err), WSYNC_OK);
    CHECK_MSG(s.put(s.user, "deltas/deep/step_000001.safetensors", "abc", 3, &err) == WSYNC_OK, "%s", err.message);
    CHECK_EQ_INT(wsync_store_get_all(&s, "deltas/deep/step_000001.safetensors", NULL, &all, &size, &err), WSYNC_OK);
    CHECK(all && size == 3 && memcmp(all, "abc", 3) == 0);
    free(all);
    wsync_store_close(&s);
    TEST_END();
}

/* ======================================================================
   A small model that changes a little every step (the fault tests' chain)
   ====================================================================== */

#define NT 3
static const sm_def g_defs[NT] = {{"model.embed_tokens.weight", 2, {96, 128}, 0},
                                  {"lm_head.weight", 2, {96, 128}, 0},
                                  {"model.norm.weight", 2, {128, 1}, 0}};
static sm_model g_model; /* of g_defs (main makes it) */

/* Step s: ~1.5% of the elements move by one bf16 step from step s-1. */
static void gen_step(uint16_t *img, uint64_t step) { sm_scatter(img, g_model.total, 15, step); }

/* Syncs to `to` and checks the image against the generator. */
static int sync_exact(sm_sub *u, uint64_t to, const char *what) { return sm_sync_exact(u, to, what, NULL, gen_step); }

static int publish(wsync_publisher *p, uint64_t step, wsync_error *err)
{
    return sm_publish(p, &g_model, gen_step, step, err);
}

/* ======================================================================
   Faults, through the proxy
   ====================================================================== */

static void fast_opts(wsync_http_options *o)
{
    memset(o, 0, sizeof *o);
    o->max_attempts = 4;
    o->backoff_ms = 20;
    o->max_backoff_ms = 1500;
    o->low_speed_bytes = 1024;
    o->low_speed_seconds = 1;
    o->connect_timeout_ms = 2000;
}

static void test_faults(void)
{
    wsync_store s, direct;
    wsync_http_options o;
    wsync_http_stats st;
    wsync_error err;
    uint8_t *all = NULL, *obj;
    uint64_t size;
    size_t n = 1u << 20;
    char path[256];
    double t0;
    grow g401;
    fast_opts(&o);
    if (!open_at(g_proxy, "faults", &o, &s)) return;
    if (!open_at(g_url, "faults", &o, &direct)) return;
    obj = pattern(n, 3);
    CHECK_EQ_INT(direct.put(direct.user, "deltas/obj", obj, n, &err), WSYNC_OK);
    snprintf(path, sizeof path, "/%s/faults/deltas/obj", g_tag);

    TEST_BEGIN("faults: 503, 500 and 503 again are retried and the get succeeds bit-exact");
    proxy_ctl("/__fault/clear");
    proxy_ctl("/__fault/add?method=GET&path=%s&action=status&arg=503&count=2", path);
    proxy_ctl("/__fault/add?method=GET&path=%s&action=status&arg=500&count=1", path);
    CHECK_EQ_INT(wsync_store_get_all(&s, "deltas/obj", NULL, &all, &size, &err), WSYNC_OK);
    CHECK(all && size == n && memcmp(all, obj, n) == 0);
    free(all);
    wsync_store_http_stats(&s, &st);
    CHECK(st.retries >= 3);
    TEST_END();

    TEST_BEGIN("faults: 429 with Retry-After: 1 on a PUT waits about a second, then succeeds");
    proxy_ctl("/__fault/clear");
    proxy_ctl("/__fault/add?method=PUT&path=/faults/HEAD&action=status&arg=429&retry_after=1&count=1");
    t0 = now_s();
    CHECK_MSG(s.put(s.user, "HEAD", "x", 1, &err) == WSYNC_OK, "%s", err.message);
    CHECK_MSG(now_s() - t0 >= 0.9 && now_s() - t0 < 5, "took %.2f s", now_s() - t0);
    CHECK_EQ_INT(proxy_ctl("/__fault/count?method=PUT&path=/faults/HEAD"), 2);
    TEST_END();

    TEST_BEGIN("faults: persistent 503 fails after max_attempts, naming URL and status");
    proxy_ctl("/__fault/clear");
    proxy_ctl("/__fault/add?path=%s&action=status&arg=503&count=100", path);
    CHECK_EQ_INT(s.head(s.user, "deltas/obj", &size, &err), WSYNC_ERR_IO);
    CHECK_MSG(strstr(err.message, "503") && strstr(err.message, "deltas/obj") && strstr(err.message, "4 attempts"),
              "%s", err.message);
    CHECK_EQ_INT(proxy_ctl("/__fault/count?path=%s", path), 4);
    TEST_END();

    TEST_BEGIN("faults: a body cut short is resumed by range, bit-exact");
    proxy_ctl("/__fault/clear");
    proxy_ctl("/__fault/add?method=GET&path=%s&action=cut&arg=300000&count=1", path);
    proxy_ctl("/__fault/add?method=GET&path=%s&action=cut&arg=5000&count=1", path);
    memset(&st, 0, sizeof st);
    {
        wsync_http_stats before;
        wsync_store_http_stats(&s, &before);
        CHECK_EQ_INT(wsync_store_get_all(&s, "deltas/obj", NULL, &all, &size, &err), WSYNC_OK);
        CHECK(all && size == n && memcmp(all, obj, n) == 0);
        free(all);
        wsync_store_http_stats(&s, &st);
        CHECK_MSG(st.resumed >= before.resumed + 2, "resumed %llu", (unsigned long long)(st.resumed - before.resumed));
    }
    TEST_END();

    TEST_BEGIN("faults: parts of a parallel download cut short are resumed, bit-exact");
    {
        wsync_store ps;
        wsync_http_options po = o;
        grow g;
        po.parallel = 3;
        po.parallel_threshold = 100000;
        po.part_size = 200000;
        if (open_at(g_proxy, "faults", &po, &ps)) {
            proxy_ctl("/__fault/clear");
            proxy_ctl("/__fault/add?method=GET&path=%s&action=cut&arg=50000&count=3", path);
            proxy_ctl("/__fault/add?method=GET&path=%s&action=status&arg=503&count=1", path);
            memset(&g, 0, sizeof g);
            CHECK_MSG(ps.get(ps.user, "deltas/obj", 0, UINT64_MAX, grow_sink, &g, &size, &err) == WSYNC_OK, "%s",
                      err.message);
            CHECK(g.n == n && memcmp(g.p, obj, n) == 0);
            wsync_store_http_stats(&ps, &st);
            CHECK(st.parallel_gets == 1 && st.retries >= 1);
            free(g.p);
            wsync_store_close(&ps);
        }
    }
    TEST_END();

    TEST_BEGIN("faults: a response slowed below the floor is abandoned in time and retried");
    proxy_ctl("/__fault/clear");
    proxy_ctl("/__fault/add?method=GET&path=%s&action=slow&arg=300&count=1", path);
    t0 = now_s();
    CHECK_EQ_INT(wsync_store_get_all(&s, "deltas/obj", NULL, &all, &size, &err), WSYNC_OK);
    CHECK(all && size == n && memcmp(all, obj, n) == 0);
    free(all);
    CHECK_MSG(now_s() - t0 < 8, "took %.2f s", now_s() - t0);
    TEST_END();

    TEST_BEGIN("faults: always slow: fails within the low-speed limits, no hang");
    proxy_ctl("/__fault/clear");
    proxy_ctl("/__fault/add?method=GET&path=%s&action=slow&arg=300&count=100", path);
    {
        wsync_store ss;
        wsync_http_options so = o;
        so.max_attempts = 2;
        if (open_at(g_proxy, "faults", &so, &ss)) {
            t0 = now_s();
            CHECK_EQ_INT(wsync_store_get_all(&ss, "deltas/obj", NULL, &all, &size, &err), WSYNC_ERR_IO);
            CHECK_MSG(now_s() - t0 < 6, "took %.2f s", now_s() - t0);
            CHECK_MSG(strstr(err.message, "deltas/obj") != NULL, "%s", err.message);
            wsync_store_close(&ss);
        }
    }
    proxy_ctl("/__fault/clear");
    TEST_END();

    TEST_BEGIN("faults: 401 is an authentication error after one request, not retried");
    memset(&g401, 0, sizeof g401);
    proxy_ctl("/__fault/clear");
    proxy_ctl("/__fault/add?path=%s&action=status&arg=401&count=100", path);
    CHECK_EQ_INT(s.get(s.user, "deltas/obj", 0, UINT64_MAX, grow_sink, &g401, &size, &err), WSYNC_ERR_AUTH);
    CHECK_MSG(strstr(err.message, "authentication") && strstr(err.message, "401") && strstr(err.message, "deltas/obj"),
              "%s", err.message);
    CHECK_EQ_INT(proxy_ctl("/__fault/count?path=%s", path), 1);
    CHECK_EQ_INT(s.put(s.user, "deltas/obj", "x", 1, &err), WSYNC_ERR_AUTH);
    CHECK_EQ_INT(proxy_ctl("/__fault/count?path=%s", path), 2);
    proxy_ctl("/__fault/clear");
    TEST_END();

    TEST_BEGIN("faults: a connection dropped before any answer is retried");
    proxy_ctl("/__fault/clear");
    proxy_ctl("/__fault/add?path=%s&action=drop&count=2", path);
    CHECK_EQ_INT(s.head(s.user, "deltas/obj", &size, &err), WSYNC_OK);
    CHECK_EQ_U64(size, n);
    proxy_ctl("/__fault/clear");
    TEST_END();

    free(obj);
    wsync_store_close(&s);
    wsync_store_close(&direct);
}

static int nginx_kill(void)
{
    const char *pidf = getenv("WSYNC_TEST_NGINX_PID");
    FILE *f = pidf ? fopen(pidf, "r") : NULL;
    long pid = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld", &pid) != 1) pid = 0;
    fclose(f);
    if (pid <= 0 || kill((pid_t)pid, SIGKILL) != 0) return 0;
    sleep_ms(100);
    return 1;
}

static int nginx_start(void)
{
    const char *cmd = getenv("WSYNC_TEST_NGINX_START");
    int i;
    if (!cmd) return 0;
    for (i = 0; i < 20; i++) {
        if (system(cmd) == 0) return 1;
        sleep_ms(100);
    }
    return 0;
}

static int nginx_pid_alive(void)
{
    const char *pidf = getenv("WSYNC_TEST_NGINX_PID");
    FILE *f = pidf ? fopen(pidf, "r") : NULL;
    long pid = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld", &pid) != 1) pid = 0;
    fclose(f);
    return pid > 0 && kill((pid_t)pid, 0) == 0;
}

/* nginx killed with SIGKILL while a chain runs: publishes and syncs fail
   (clearly, in bounded time) while it is down, and after it restarts the
   publisher goes on and the subscriber catches up bit-exact. */
static void test_restart(void)
{
    wsync_store s;
    wsync_http_options o;
    wsync_chain_options co;
    wsync_publisher *p = NULL;
    wsync_error err;
    sm_sub *u = NULL;
    uint64_t step, have = 0;
    double t0;
    fast_opts(&o);
    o.max_attempts = 3;
    memset(&co, 0, sizeof co);
    co.anchor_every = 5;
    if (!open_at(g_url, "restart", &o, &s)) return;
    TEST_BEGIN("restart: nginx killed mid-run; the publisher and the subscriber recover");
    CHECK_EQ_INT(wsync_publisher_open(&s, &co, &p, &err), WSYNC_OK);
    u = sm_sub_new(&s, &g_model, &co);
    for (step = 0; step <= 6 && p && u; step++) CHECK_MSG(publish(p, step, &err), "%s", err.message);
    if (u) sync_exact(u, 6, "before the kill");
    CHECK(nginx_kill());
    t0 = now_s();
    if (p) CHECK(!publish(p, 7, &err));
    CHECK_MSG(strstr(err.message, "127.0.0.1") != NULL, "%s", err.message);
    if (u) CHECK(wsync_subscriber_sync(u->s, WSYNC_STEP_LATEST, NULL, &err) != WSYNC_OK);
    CHECK_MSG(now_s() - t0 < 10, "failing took %.2f s", now_s() - t0);
    if (u) CHECK(wsync_subscriber_step(u->s, &have) && have == 6);
    CHECK(nginx_start());
    /* the publisher may have lost track: a fresh one continues from HEAD */
    if (p) wsync_publisher_close(p);
    p = NULL;
    CHECK_EQ_INT(wsync_publisher_open(&s, &co, &p, &err), WSYNC_OK);
    for (step = 7; step <= 12 && p; step++) CHECK_MSG(publish(p, step, &err), "step %llu: %s", (unsigned long long)step, err.message);
    if (u) sync_exact(u, 12, "after the restart");
    TEST_END();
    sm_sub_free(u);
    if (p) wsync_publisher_close(p);
    wsync_store_close(&s);
}

/* ======================================================================
   nginx killed mid-transfer (SIGKILL; the config runs one process, no
   master, so that is all of it) and restarted on the same port a second
   later, from another thread, while a download or an upload is running
   ====================================================================== */

typedef struct killer {
    pthread_t th;
    int running;
    const char *watch_dir;      /* upload: kill when a file here (nginx's body temp) reaches watch_bytes */
    uint64_t watch_bytes;
    long down_ms;               /* how long nginx stays down */
    volatile int killed;        /* set once nginx was killed */
    volatile int restarted;
} killer;

static uint64_t biggest_file(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    uint64_t best = 0;
    char path[1024];
    struct stat sb;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            uint64_t b = biggest_file(path); /* nginx's temp levels */
            if (b > best) best = b;
        } else if (stat(path, &sb) == 0 && (uint64_t)sb.st_size > best) {
            best = (uint64_t)sb.st_size;
        }
    }
    closedir(d);
    return best;
}

static void *killer_main(void *arg)
{
    killer *k = (killer *)arg;
    if (k->watch_dir) {
        double t0 = now_s();
        while (biggest_file(k->watch_dir) < k->watch_bytes && now_s() - t0 < 30) sleep_ms(1);
        k->killed = nginx_kill();
    }
    sleep_ms(k->down_ms);
    k->restarted = nginx_start();
    return NULL;
}

/* Kill now (from a sink), restart after down_ms from a thread. */
static void killer_fire(killer *k)
{
    if (k->running) return;
    k->killed = nginx_kill();
    k->running = pthread_create(&k->th, NULL, killer_main, k) == 0;
}

/* Kill when an upload's body passes `bytes` in nginx's temp directory. */
static void killer_watch(killer *k, uint64_t bytes)
{
    static char dir[512];
    DIR *d;
    struct dirent *e;
    char path[1024];
    snprintf(dir, sizeof dir, "%s/../body", g_data);
    /* bodies left by an earlier kill would fire it at once */
    if ((d = opendir(dir)) != NULL) {
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            remove(path);
        }
        closedir(d);
    }
    k->watch_dir = dir;
    k->watch_bytes = bytes;
    k->running = pthread_create(&k->th, NULL, killer_main, k) == 0;
}

static void killer_join(killer *k)
{
    if (k->running) pthread_join(k->th, NULL);
    k->running = 0;
    /* whatever happened, nginx is up for what follows */
    if (!k->restarted && !nginx_pid_alive()) k->restarted = nginx_start();
}

/* A sink that kills nginx on reaching byte `at` of what it receives. */
typedef struct kill_sink {
    grow g;
    uint64_t at;
    killer *k;
} kill_sink;

static int kill_sink_fn(void *user, const void *b, size_t n)
{
    kill_sink *ks = (kill_sink *)user;
    if (ks->g.n + n > ks->at && ks->k) killer_fire(ks->k);
    return grow_sink(&ks->g, b, n);
}

/* Retries enough to outlast a second of nginx down (backoff 100, 200, 400,
   800, 1000, 1000 ms: 3.5 s), timeouts short enough to keep the tests fast. */
static void kill_opts(wsync_http_options *o)
{
    fast_opts(o);
    o->max_attempts = 7;
    o->backoff_ms = 100;
    o->max_backoff_ms = 1000;
}

static void test_kill_transfer(void)
{
    wsync_store s;
    wsync_http_options o;
    wsync_http_stats st0, st;
    wsync_error err;
    size_t n = 64u << 20;
    uint8_t *obj = pattern(n, 11), *obj2 = pattern(n, 12), *all = NULL;
    uint64_t size = 0;
    double t0;
    int par;
    kill_opts(&o);
    o.parallel_threshold = 8u << 20;
    o.part_size = 8u << 20;
    for (par = 0; par < 2; par++) {
        killer k;
        kill_sink ks;
        o.parallel = par ? 4 : 1;
        TEST_BEGIN(par ? "kill: nginx killed during a parallel download and restarted: completes bit-exact after retries"
                       : "kill: nginx killed during a one-stream download and restarted: resumes, bit-exact");
        if (open_at(g_url, "kill", &o, &s)) {
            CHECK_EQ_INT(s.put(s.user, "anchors/big", obj, n, &err), WSYNC_OK);
            memset(&k, 0, sizeof k);
            k.down_ms = 1000;
            memset(&ks, 0, sizeof ks);
            ks.k = &k;
            /* parallel: as the parts after the first (a plain stream) begin */
            ks.at = par ? (8u << 20) + 1000 : (5u << 20) + 1000;
            wsync_store_http_stats(&s, &st0);
            t0 = now_s();
            CHECK_MSG(s.get(s.user, "anchors/big", 0, UINT64_MAX, kill_sink_fn, &ks, &size, &err) == WSYNC_OK, "%s",
                      err.message);
            CHECK_MSG(now_s() - t0 < 10, "took %.2f s", now_s() - t0);
            killer_join(&k);
            CHECK(k.killed && k.restarted);
            CHECK(ks.g.n == n && size == n && memcmp(ks.g.p, obj, n) == 0);
            wsync_store_http_stats(&s, &st);
            CHECK_MSG(st.retries > st0.retries && st.parallel_gets == st0.parallel_gets + (uint64_t)par,
                      "retries %llu, parallel %llu", (unsigned long long)(st.retries - st0.retries),
                      (unsigned long long)(st.parallel_gets - st0.parallel_gets));
            CHECK_MSG(st.resumed > st0.resumed, "nothing resumed: the kill did not cut a transfer");
            free(ks.g.p);
            wsync_store_close(&s);
        }
        TEST_END();
    }

    TEST_BEGIN("kill: nginx down for longer than the retries: the download fails cleanly, in time, naming the URL");
    {
        killer k;
        kill_sink ks;
        wsync_http_options so = o;
        so.parallel = 4;
        so.max_attempts = 3; /* 100 + 200 ms of backoff */
        if (open_at(g_url, "kill", &so, &s)) {
            memset(&k, 0, sizeof k);
            k.down_ms = 4000;
            memset(&ks, 0, sizeof ks);
            ks.k = &k;
            ks.at = (8u << 20) + 1000;
            t0 = now_s();
            CHECK_EQ_INT(s.get(s.user, "anchors/big", 0, UINT64_MAX, kill_sink_fn, &ks, &size, &err), WSYNC_ERR_IO);
            CHECK_MSG(now_s() - t0 < 3.5, "took %.2f s", now_s() - t0);
            CHECK_MSG(strstr(err.message, "/kill/anchors/big") != NULL, "%s", err.message);
            CHECK(ks.g.n < n);
            killer_join(&k);
            CHECK(k.killed && k.restarted);
            free(ks.g.p);
            /* and after nginx is back, the same store reads it whole */
            CHECK_EQ_INT(wsync_store_get_all(&s, "anchors/big", NULL, &all, &size, &err), WSYNC_OK);
            CHECK(all && size == n && memcmp(all, obj, n) == 0);
            free(all);
            all = NULL;
            wsync_store_close(&s);
        }
    }
    TEST_END();

    TEST_BEGIN("kill: nginx killed during an upload and restarted: the put retries and lands whole");
    if (open_at(g_url, "kill", &o, &s)) {
        killer k;
        memset(&k, 0, sizeof k);
        k.down_ms = 1000;
        wsync_store_http_stats(&s, &st0);
        killer_watch(&k, 8u << 20);
        t0 = now_s();
        CHECK_MSG(s.put(s.user, "anchors/big", obj2, n, &err) == WSYNC_OK, "%s", err.message);
        CHECK_MSG(now_s() - t0 < 10, "took %.2f s", now_s() - t0);
        killer_join(&k);
        CHECK(k.killed && k.restarted);
        wsync_store_http_stats(&s, &st);
        CHECK(st.retries > st0.retries);
        CHECK_EQ_INT(wsync_store_get_all(&s, "anchors/big", NULL, &all, &size, &err), WSYNC_OK);
        CHECK(all && size == n && memcmp(all, obj2, n) == 0);
        free(all);
        all = NULL;
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("kill: an upload cut by a kill that outlasts the retries fails cleanly; the old object stays whole");
    {
        wsync_http_options so = o;
        so.max_attempts = 2;
        if (open_at(g_url, "kill", &so, &s)) {
            killer k;
            memset(&k, 0, sizeof k);
            k.down_ms = 3000;
            killer_watch(&k, 8u << 20);
            t0 = now_s();
            CHECK_EQ_INT(s.put(s.user, "anchors/big", obj, n, &err), WSYNC_ERR_IO);
            CHECK_MSG(now_s() - t0 < 3, "took %.2f s", now_s() - t0);
            CHECK_MSG(strstr(err.message, "PUT") && strstr(err.message, "/kill/anchors/big"), "%s", err.message);
            killer_join(&k);
            CHECK(k.killed && k.restarted);
            CHECK_EQ_INT(wsync_store_get_all(&s, "anchors/big", NULL, &all, &size, &err), WSYNC_OK);
            CHECK(all && size == n && memcmp(all, obj2, n) == 0);
            free(all);
            all = NULL;
            wsync_store_close(&s);
        }
    }
    TEST_END();
    free(obj);
    free(obj2);
}

/* The chain with a model large enough for a kill to land mid-object (one
   bf16 tensor of 16 MiB): the subscriber's anchor download and the
   publisher's anchor upload are cut by a kill; each either completes after
   retries or fails cleanly, and the subscriber catches up bit-exact. */
#define BIG_ROWS 2048
#define BIG_COLS 4096
#define BIG_N ((size_t)BIG_ROWS * BIG_COLS)
static const uint64_t g_big_shape[2] = {BIG_ROWS, BIG_COLS};

static void gen_big(uint16_t *img, uint64_t step)
{
    size_t j;
    uint64_t s;
    for (j = 0; j < BIG_N; j++) img[j] = (uint16_t)(0x3C00u + (mix64(j) & 0x3FFu));
    for (s = 1; s <= step; s++)
        for (j = 0; j < BIG_N * 15 / 1000; j++) {
            uint64_t h = mix64(s * 1000003ull + j);
            img[h % BIG_N] = (uint16_t)(img[h % BIG_N] + ((h >> 40) & 1 ? 1 : -1));
        }
}

static void big_tensor(uint16_t *img, wsync_tensor *t)
{
    memset(t, 0, sizeof *t);
    t->name = "model.layers.0.mlp.up_proj.weight";
    t->dtype = WSYNC_DTYPE_BF16;
    t->rank = 2;
    t->shape = g_big_shape;
    t->data = img;
    t->nbytes = (uint64_t)BIG_N * 2;
}

/* A store that passes everything to `in`, and kills nginx when one get of
   a key containing `match` has handed its sink `at` bytes. */
typedef struct kstore {
    wsync_store in;
    killer *k;
    const char *match;
    uint64_t at;
} kstore;

typedef struct kstore_sink {
    wsync_sink_fn sink;
    void *user;
    uint64_t n, at;
    killer *k;
} kstore_sink;

static int kstore_sink_fn(void *user, const void *b, size_t n)
{
    kstore_sink *w = (kstore_sink *)user;
    if (w->k && w->n + n > w->at) killer_fire(w->k);
    w->n += n;
    return w->sink(w->user, b, n);
}

static wsync_result kstore_put(void *u, const char *key, const void *b, size_t n, wsync_error *err)
{
    kstore *w = (kstore *)u;
    return w->in.put(w->in.user, key, b, n, err);
}

static wsync_result kstore_get(void *u, const char *key, uint64_t off, uint64_t len, wsync_sink_fn sink,
                               void *sink_user, uint64_t *size, wsync_error *err)
{
    kstore *w = (kstore *)u;
    kstore_sink ws;
    if (!w->k || w->k->running || !strstr(key, w->match))
        return w->in.get(w->in.user, key, off, len, sink, sink_user, size, err);
    ws.sink = sink;
    ws.user = sink_user;
    ws.n = 0;
    ws.at = w->at;
    ws.k = w->k;
    return w->in.get(w->in.user, key, off, len, kstore_sink_fn, &ws, size, err);
}

static wsync_result kstore_head(void *u, const char *key, uint64_t *size, wsync_error *err)
{
    kstore *w = (kstore *)u;
    return w->in.head(w->in.user, key, size, err);
}

static wsync_result kstore_list(void *u, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    kstore *w = (kstore *)u;
    return w->in.list(w->in.user, prefix, fn, fn_user, err);
}

static wsync_result kstore_del(void *u, const char *key, wsync_error *err)
{
    kstore *w = (kstore *)u;
    return w->in.del(w->in.user, key, err);
}

static int publish_big(wsync_publisher *p, uint16_t *img, uint64_t step, wsync_error *err)
{
    wsync_tensor t;
    gen_big(img, step);
    big_tensor(img, &t);
    return wsync_publish(p, step, &t, 1, NULL, err) == WSYNC_OK;
}

static void test_kill_chain(void)
{
    wsync_store s, ws;
    wsync_http_options o;
    wsync_chain_options co;
    wsync_publisher *p = NULL;
    wsync_subscriber *sub = NULL;
    wsync_tensor t;
    wsync_error err;
    kstore w;
    killer k;
    uint16_t *img = (uint16_t *)calloc(BIG_N, 2), *want = (uint16_t *)calloc(BIG_N, 2), *pimg = (uint16_t *)calloc(BIG_N, 2);
    uint64_t step, have = 0;
    wsync_result r;
    double t0;
    kill_opts(&o);
    o.parallel_threshold = 4u << 20;
    o.part_size = 4u << 20;
    memset(&co, 0, sizeof co);
    co.anchor_every = 3;
    if (!img || !want || !pimg || !open_at(g_url, "killchain", &o, &s)) goto out;
    memset(&w, 0, sizeof w);
    memset(&k, 0, sizeof k);
    k.down_ms = 1000;
    w.in = s;
    w.k = &k;
    w.match = "anchors/";
    w.at = 1u << 20;
    memset(&ws, 0, sizeof ws);
    ws.user = &w;
    ws.put = kstore_put;
    ws.get = kstore_get;
    ws.head = kstore_head;
    ws.list = kstore_list;
    ws.del = kstore_del;
    big_tensor(img, &t);

    TEST_BEGIN("kill chain: nginx killed during the subscriber's anchor download: it completes or fails cleanly, then catches up");
    CHECK_EQ_INT(wsync_publisher_open(&s, &co, &p, &err), WSYNC_OK);
    for (step = 0; step <= 4 && p; step++) CHECK_MSG(publish_big(p, pimg, step, &err), "%s", err.message);
    CHECK_EQ_INT(wsync_subscriber_open(&ws, &t, 1, &co, &sub, &err), WSYNC_OK);
    if (sub) {
        t0 = now_s();
        r = wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err);
        CHECK_MSG(now_s() - t0 < 10, "took %.2f s", now_s() - t0);
        CHECK_MSG(r == WSYNC_OK || (r == WSYNC_ERR_IO && strstr(err.message, "127.0.0.1")), "%d: %s", (int)r,
                  err.message);
        killer_join(&k);
        CHECK(k.killed && k.restarted);
        w.k = NULL;
        CHECK_MSG(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err) == WSYNC_OK, "%s", err.message);
        CHECK(wsync_subscriber_step(sub, &have) && have == 4);
        gen_big(want, 4);
        CHECK(memcmp(img, want, BIG_N * 2) == 0);
    }
    TEST_END();

    TEST_BEGIN("kill chain: nginx killed during the publisher's anchor upload: it lands or fails cleanly, then the subscriber catches up");
    if (p && sub) {
        CHECK_MSG(publish_big(p, pimg, 5, &err), "%s", err.message);
        memset(&k, 0, sizeof k);
        k.down_ms = 1000;
        killer_watch(&k, 2u << 20);
        t0 = now_s();
        r = publish_big(p, pimg, 6, &err) ? WSYNC_OK : err.code;
        CHECK_MSG(now_s() - t0 < 10, "took %.2f s", now_s() - t0);
        killer_join(&k);
        CHECK(k.killed && k.restarted);
        if (r != WSYNC_OK) {
            /* failed cleanly: a fresh publisher goes on from what HEAD says */
            CHECK_MSG(strstr(err.message, "127.0.0.1") != NULL, "%s", err.message);
            wsync_publisher_close(p);
            p = NULL;
            CHECK_EQ_INT(wsync_publisher_open(&s, &co, &p, &err), WSYNC_OK);
            if (p) CHECK_MSG(publish_big(p, pimg, 6, &err), "%s", err.message);
        }
        if (p) CHECK_MSG(publish_big(p, pimg, 7, &err), "%s", err.message);
        CHECK_MSG(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err) == WSYNC_OK, "%s", err.message);
        CHECK(wsync_subscriber_step(sub, &have) && have == 7);
        gen_big(want, 7);
        CHECK(memcmp(img, want, BIG_N * 2) == 0);
    }
    TEST_END();
    if (sub) wsync_subscriber_close(sub);
    if (p) wsync_publisher_close(p);
    wsync_store_close(&s);
out:
    free(img);
    free(want);
    free(pimg);
}

/* ======================================================================
   Redirects: nginx's /gw/ answers GET and HEAD with a 302 to another origin
   (a second port that refuses requests carrying credentials and logs what
   came), /same/ with a 302 on the same origin
   ====================================================================== */

/* Lines of log file `name` (under WSYNC_TEST_HTTP_LOGS) that contain
   `needle`; *with_cred of them carry an Authorization or Cookie value
   (nginx logs an absent one as "-"), *with_must of them contain `must`. */
static int log_lines(const char *name, const char *needle, const char *must, int *with_cred, int *with_must)
{
    const char *dir = getenv("WSYNC_TEST_HTTP_LOGS");
    char path[600], line[2048];
    FILE *f;
    int n = 0;
    *with_cred = 0;
    if (with_must) *with_must = 0;
    if (!dir) return -1;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, "r"))) return -1;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, needle)) continue;
        n++;
        if (!strstr(line, "auth=[-]") || !strstr(line, "cookie=[-]")) ++*with_cred;
        if (with_must && must && strstr(line, must)) ++*with_must;
    }
    fclose(f);
    return n;
}

/* log_lines, waiting up to 5 s for at least `min` lines: nginx writes a
   request's access-log line after it has sent the response, so a client
   that reads the log as soon as its request returns can find the line not
   written yet (seen once in CI: 0 lines). */
static int log_lines_wait(const char *name, const char *needle, const char *must, int min, int *with_cred,
                          int *with_must)
{
    int n = -1, tries;
    for (tries = 0; tries < 100; tries++) {
        n = log_lines(name, needle, must, with_cred, with_must);
        if (n >= min) break;
        sleep_ms(50);
    }
    return n;
}

static void test_redirect(void)
{
    static const char *const creds[] = {"Authorization: Bearer wsync-secret", "Cookie: session=wsync-secret",
                                        "X-Wsync-Test: kept", NULL};
    wsync_store direct, gw, same;
    wsync_http_options o;
    wsync_http_stats st;
    wsync_error err;
    size_t n = 3u << 20;
    uint8_t *obj = pattern(n, 21), *all = NULL;
    uint64_t size = 0;
    char needle[256], url[512];
    int lines, cred, must;
    const char *target = getenv("WSYNC_TEST_HTTP_REDIRECT_TARGET");
    grow g;
    if (!target) {
        free(obj);
        return;
    }
    memset(&o, 0, sizeof o);
    o.headers = creds;
    o.parallel = 3;
    o.parallel_threshold = 1u << 20;
    o.part_size = 512u << 10;
    if (!open_at(g_url, "redir", NULL, &direct)) return;
    snprintf(url, sizeof url, "%s/gw", g_url);
    if (!open_at(url, "redir", &o, &gw)) return;
    snprintf(url, sizeof url, "%s/same", g_url);
    if (!open_at(url, "redir", &o, &same)) return;
    CHECK_EQ_INT(direct.put(direct.user, "anchors/step_000001.safetensors", obj, n, &err), WSYNC_OK);
    CHECK_EQ_INT(direct.put(direct.user, "HEAD", "{\"step\": 1}", 11, &err), WSYNC_OK);

    TEST_BEGIN("redirect: GET and HEAD follow a 302 to another origin, bit-exact, parallel parts included");
    CHECK_MSG(gw.head(gw.user, "HEAD", &size, &err) == WSYNC_OK && size == 11, "%s", err.message);
    CHECK_MSG(wsync_store_get_all(&gw, "HEAD", NULL, &all, &size, &err) == WSYNC_OK, "%s", err.message);
    CHECK(all && size == 11 && memcmp(all, "{\"step\": 1}", 11) == 0);
    free(all);
    all = NULL;
    memset(&g, 0, sizeof g);
    CHECK_MSG(gw.get(gw.user, "anchors/step_000001.safetensors", 0, UINT64_MAX, grow_sink, &g, &size, &err) ==
                  WSYNC_OK, "%s", err.message);
    CHECK(g.n == n && size == n && memcmp(g.p, obj, n) == 0);
    g.n = 0;
    CHECK_MSG(gw.get(gw.user, "anchors/step_000001.safetensors", 1000, 5000, grow_sink, &g, &size, &err) == WSYNC_OK,
              "%s", err.message);
    CHECK(g.n == 5000 && memcmp(g.p, obj + 1000, 5000) == 0);
    free(g.p);
    wsync_store_http_stats(&gw, &st);
    CHECK_EQ_U64(st.parallel_gets, 1);
    TEST_END();

    TEST_BEGIN("redirect: Authorization and Cookie are not sent to the other origin; other headers are");
    snprintf(needle, sizeof needle, "/%s/redir/", g_tag);
    lines = log_lines_wait("cdn.log", needle, "xt=[kept]", 5, &cred, &must);
    CHECK_MSG(lines >= 5, "%d requests reached the redirect target", lines);
    CHECK_MSG(cred == 0, "%d of %d requests to the other origin carried credentials", cred, lines);
    CHECK_MSG(must == lines, "%d of %d requests to the other origin kept X-Wsync-Test", must, lines);
    TEST_END();

    TEST_BEGIN("redirect: on the same origin the 302 is followed and the credentials stay");
    CHECK_MSG(wsync_store_get_all(&same, "HEAD", NULL, &all, &size, &err) == WSYNC_OK, "%s", err.message);
    CHECK(all && size == 11 && memcmp(all, "{\"step\": 1}", 11) == 0);
    free(all);
    all = NULL;
    snprintf(needle, sizeof needle, "GET /%s/redir/HEAD ", g_tag);
    lines = log_lines_wait("cred.log", needle, "auth=[Bearer wsync-secret] cookie=[session=wsync-secret]", 1, &cred,
                           &must);
    CHECK_MSG(lines >= 1 && must == lines, "%d lines, %d with the credentials", lines, must);
    TEST_END();

    TEST_BEGIN("redirect: a key that is a directory is still NOT_FOUND through a redirect (nginx's 301 to '/')");
    CHECK_EQ_INT(gw.head(gw.user, "anchors", &size, &err), WSYNC_ERR_NOT_FOUND);
    CHECK_EQ_INT(wsync_store_get_all(&gw, "anchors", NULL, &all, &size, &err), WSYNC_ERR_NOT_FOUND);
    CHECK_EQ_INT(wsync_store_get_all(&gw, "nope", NULL, &all, &size, &err), WSYNC_ERR_NOT_FOUND);
    TEST_END();
    free(obj);
    wsync_store_close(&direct);
    wsync_store_close(&gw);
    wsync_store_close(&same);
}

/* ======================================================================
   TLS: nginx with a self-signed certificate for 127.0.0.1
   ====================================================================== */

static void test_tls(void)
{
    const char *url = getenv("WSYNC_TEST_HTTPS_URL"), *ca = getenv("WSYNC_TEST_HTTPS_CA");
    wsync_store s;
    wsync_http_options o;
    wsync_http_stats st;
    wsync_error err;
    uint64_t size = 0;
    uint8_t *all = NULL;
    char lurl[256];
    if (!url || !ca) return;
    fast_opts(&o);

    TEST_BEGIN("tls: a self-signed certificate fails verification by default, at once, saying what to do");
    if (open_at(url, "tls", &o, &s)) {
        CHECK_EQ_INT(s.head(s.user, "HEAD", &size, &err), WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "TLS") && strstr(err.message, "certificate") &&
                      strstr(err.message, "WSYNC_CA_BUNDLE") && strstr(err.message, "https://127.0.0.1:"),
                  "%s", err.message);
        CHECK_EQ_INT(s.put(s.user, "HEAD", "x", 1, &err), WSYNC_ERR_IO);
        wsync_store_http_stats(&s, &st);
        CHECK_MSG(st.requests == 2 && st.retries == 0, "%llu requests, %llu retries",
                  (unsigned long long)st.requests, (unsigned long long)st.retries);
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("tls: with ca_file the store works end to end (contract, parallel get, chain)");
    o.ca_file = ca;
    o.parallel_threshold = 1u << 20;
    o.part_size = 512u << 10;
    if (open_at(url, "tls", &o, &s)) {
        size_t n = (3u << 20) + 7;
        uint8_t *obj = pattern(n, 31);
        grow g;
        wsync_chain_options co;
        wsync_publisher *p = NULL;
        wsync_error e2;
        sm_sub *u;
        uint64_t step;
        CHECK_MSG(s.put(s.user, "anchors/big", obj, n, &err) == WSYNC_OK, "%s", err.message);
        memset(&g, 0, sizeof g);
        CHECK_MSG(s.get(s.user, "anchors/big", 0, UINT64_MAX, grow_sink, &g, &size, &err) == WSYNC_OK, "%s",
                  err.message);
        CHECK(g.n == n && memcmp(g.p, obj, n) == 0);
        free(g.p);
        free(obj);
        wsync_store_http_stats(&s, &st);
        CHECK_EQ_U64(st.parallel_gets, 1);
        memset(&co, 0, sizeof co);
        co.prefix = "chain";
        co.anchor_every = 3;
        CHECK_EQ_INT(wsync_publisher_open(&s, &co, &p, &e2), WSYNC_OK);
        u = sm_sub_new(&s, &g_model, &co);
        for (step = 0; step <= 5 && p && u; step++) {
            CHECK_MSG(publish(p, step, &e2), "%s", e2.message);
            if (step % 2) sync_exact(u, WSYNC_STEP_LATEST, "over tls");
        }
        if (u) sync_exact(u, 5, "over tls, the head");
        sm_sub_free(u);
        if (p) wsync_publisher_close(p);
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("tls: WSYNC_CA_BUNDLE is the default ca_file; the name is still checked (localhost is not 127.0.0.1)");
    o.ca_file = NULL;
    setenv("WSYNC_CA_BUNDLE", ca, 1);
    if (open_at(url, "tls", &o, &s)) {
        unsetenv("WSYNC_CA_BUNDLE"); /* copied at open */
        CHECK_MSG(wsync_store_get_all(&s, "chain/HEAD", NULL, &all, &size, &err) == WSYNC_OK, "%s", err.message);
        free(all);
        all = NULL;
        wsync_store_close(&s);
    }
    setenv("WSYNC_CA_BUNDLE", ca, 1);
    snprintf(lurl, sizeof lurl, "https://localhost:%s", strrchr(url, ':') + 1);
    if (open_at(lurl, "tls", &o, &s)) {
        CHECK_EQ_INT(s.head(s.user, "chain/HEAD", &size, &err), WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "TLS") != NULL, "%s", err.message);
        wsync_store_close(&s);
    }
    unsetenv("WSYNC_CA_BUNDLE");
    TEST_END();
}

/* Background prefetch uses the store from a second thread while the caller
   polls: the store's handle pool and locks under ASan. */
static void test_prefetch(void)
{
    wsync_store s;
    wsync_chain_options co;
    wsync_publisher *p = NULL;
    wsync_error err;
    sm_sub *u;
    uint64_t step, ready = 0;
    int tries;
    memset(&co, 0, sizeof co);
    co.anchor_every = 4;
    if (!open_at(g_url, "prefetch", NULL, &s)) return;
    TEST_BEGIN("prefetch thread over http: the follower applies what was prefetched, bit-exact");
    CHECK_EQ_INT(wsync_publisher_open(&s, &co, &p, &err), WSYNC_OK);
    u = sm_sub_new(&s, &g_model, &co);
    if (p && u) {
        CHECK(publish(p, 0, &err));
        sync_exact(u, 0, "start");
        CHECK_EQ_INT(wsync_subscriber_start(u->s, 20, &err), WSYNC_OK);
        for (step = 1; step <= 6; step++) {
            wsync_sync_stats ss;
            CHECK(publish(p, step, &err));
            for (tries = 0; tries < 200; tries++) {
                if (wsync_subscriber_ready(u->s, &ready) && ready == step) break;
                sleep_ms(10);
            }
            CHECK_MSG(ready == step, "ready %llu, wanted %llu", (unsigned long long)ready, (unsigned long long)step);
            CHECK_EQ_INT(wsync_subscriber_apply_ready(u->s, &ss, &err), WSYNC_OK);
            {
                uint16_t *want = (uint16_t *)malloc(g_model.total * 2);
                if (want) gen_step(want, step);
                CHECK(want && memcmp(u->img, want, g_model.total * 2) == 0);
                free(want);
            }
        }
        wsync_subscriber_stop(u->s);
    }
    TEST_END();
    sm_sub_free(u);
    if (p) wsync_publisher_close(p);
    wsync_store_close(&s);
}

static void test_open_args(void)
{
    wsync_store s;
    wsync_error err;
    TEST_BEGIN("http open: URLs that are not http(s), or have no host, are refused");
    CHECK_EQ_INT(wsync_store_http_open("ftp://x/y", NULL, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_http_open("http://", NULL, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_http_open("http:///x", NULL, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_http_open("http://h/a b", NULL, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_http_open("http://h/a?x=1", NULL, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_http_open(NULL, NULL, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_http_open("HTTPS://h:1/", NULL, &s, &err), WSYNC_OK);
    wsync_store_close(&s);
    TEST_END();
    TEST_BEGIN("http: a refused connection fails after the attempts, naming the URL, quickly");
    {
        wsync_http_options o;
        uint64_t size;
        double t0 = now_s();
        fast_opts(&o);
        CHECK_EQ_INT(wsync_store_http_open("http://127.0.0.1:1/x", &o, &s, &err), WSYNC_OK);
        CHECK_EQ_INT(s.head(s.user, "HEAD", &size, &err), WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "http://127.0.0.1:1/x/HEAD") && strstr(err.message, "4 attempts"), "%s",
                  err.message);
        CHECK(now_s() - t0 < 5);
        wsync_store_close(&s);
    }
    TEST_END();
    TEST_BEGIN("http: a URL's password (basic authentication) never appears in a message");
    {
        wsync_http_options o;
        uint64_t size;
        fast_opts(&o);
        CHECK_EQ_INT(wsync_store_http_open("http://trainer:s3cr3t-pw@127.0.0.1:1/x", &o, &s, &err), WSYNC_OK);
        CHECK_EQ_INT(s.head(s.user, "HEAD", &size, &err), WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "s3cr3t") == NULL && strstr(err.message, "trainer") == NULL &&
                      strstr(err.message, "http://***@127.0.0.1:1/x/HEAD") != NULL,
                  "%s", err.message);
        wsync_store_close(&s);
    }
    TEST_END();
}

static int count_key(void *user, const char *key, uint64_t size)
{
    (void)key;
    (void)size;
    ++*(unsigned *)user;
    return 0;
}

/* A server without listings (nginx's dav module alone: PROPFIND 405, a
   folder GET 403) says so, what works without one and how to enable one,
   never blaming credentials (the conformance suite checks the rest: a chain
   with HEAD works there, each listing is refused as unavailable). */
static void test_nolist(void)
{
    wsync_store s;
    wsync_error err;
    char url[512];
    unsigned n = 0;
    wsync_subscriber *sub = NULL;
    static uint16_t got[64 * 64];
    static const uint64_t shape[2] = {64, 64};
    wsync_tensor tg;
    TEST_BEGIN("a server without listings: the listing refused (WSYNC_ERR_UNSUPPORTED) naming both answers, "
               "what works without one and how to enable one, not an authentication failure");
    snprintf(url, sizeof url, "%s/nolist/%s", g_url, g_tag);
    CHECK_EQ_INT(wsync_store_http_open(url, NULL, &s, &err), WSYNC_OK);
    wsync_tensor_dense(&tg, "w", WSYNC_DTYPE_BF16, 2, shape, got, NULL);
    CHECK_MSG(s.put(s.user, "anchors/step_000000.safetensors", "x", 1, &err) == WSYNC_OK, "%s", err.message);
    CHECK_EQ_INT(s.list(s.user, "", count_key, &n, &err), WSYNC_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "offers no listing") && strstr(err.message, "HTTP 405") &&
                  strstr(err.message, "HTTP 403") && strstr(err.message, "dav_ext") &&
                  strstr(err.message, "A chain with HEAD needs none") && !strstr(err.message, "credentials"),
              "%s", err.message);
    CHECK_EQ_INT(wsync_subscriber_open(&s, &tg, 1, NULL, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_UNSUPPORTED);
    CHECK_MSG(!strstr(err.message, "credentials"), "%s", err.message);
    wsync_subscriber_close(sub);
    wsync_store_close(&s);
    TEST_END();
}

/* Connections from this machine to 127.0.0.1:port that are open
   (ESTABLISHED, counted on the client's side), from /proc/net/tcp. */
static int conns_to(unsigned port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    int n = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned rport = 0, st = 0;
        char loc[64], rem[64];
        if (sscanf(line, " %*d: %63s %63s %x", loc, rem, &st) != 3) continue;
        if (strchr(rem, ':') && sscanf(strchr(rem, ':') + 1, "%x", &rport) == 1 && rport == port && st == 1 &&
            strncmp(rem, "0100007F", 8) == 0)
            n++;
    }
    fclose(f);
    return n;
}

/* A follower's poll holds no connection open through its next sleep: a
   request long after the last one (idle_close_ms) closes its connection,
   requests close together reuse one, and wsync_store_http_idle closes the
   kept ones (Apache prefork gives each open connection a worker). */
static void test_idle_close(void)
{
    wsync_store s;
    wsync_http_options o;
    wsync_error err;
    uint64_t size = 0;
    unsigned port = (unsigned)atoi(strrchr(g_url, ':') + 1);
    TEST_BEGIN("http: a poll long after the last request closes its connection; close requests reuse one; "
               "wsync_store_http_idle closes what is kept");
    memset(&o, 0, sizeof o);
    if (conns_to(port) < 0) {
        printf("  (no /proc/net/tcp: skipped)\n");
        TEST_END();
        return;
    }
    CHECK_EQ_INT(conns_to(port), 0);
    if (open_at(g_url, "idle", &o, &s)) {
        CHECK_MSG(s.put(s.user, "HEAD", "x", 1, &err) == WSYNC_OK, "%s", err.message);
        CHECK_MSG(s.head(s.user, "HEAD", &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(conns_to(port), 1); /* kept: the requests came together */
        sleep_ms(700);                   /* longer than idle_close_ms (500) */
        CHECK_MSG(s.head(s.user, "HEAD", &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(conns_to(port), 0); /* a poll: closed when done */
        CHECK_MSG(s.head(s.user, "HEAD", &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(conns_to(port), 1);
        CHECK(wsync_store_http_idle(&s) >= 1);
        CHECK_EQ_INT(conns_to(port), 0);
        CHECK_MSG(s.head(s.user, "HEAD", &size, &err) == WSYNC_OK, "%s", err.message); /* connects again */
        wsync_store_close(&s);
    }
    o.idle_close_ms = UINT_MAX;
    if (open_at(g_url, "idle", &o, &s)) {
        CHECK_MSG(s.head(s.user, "HEAD", &size, &err) == WSYNC_OK, "%s", err.message);
        sleep_ms(700);
        CHECK_MSG(s.head(s.user, "HEAD", &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(conns_to(port), 1); /* never closed */
        CHECK_EQ_INT(s.del(s.user, "HEAD", &err), WSYNC_OK);
        wsync_store_close(&s);
    }
    CHECK_EQ_INT(wsync_store_http_idle(NULL), 0);
    TEST_END();
}

/* ---- wsync_store_open_url ---- */

typedef struct count_alloc {
    unsigned long allocs;
} count_alloc;

static void *ca_alloc(void *user, size_t n)
{
    ((count_alloc *)user)->allocs++;
    return malloc(n);
}

static void ca_free(void *user, void *ptr)
{
    (void)user;
    free(ptr);
}

/* Without a server: what each string opens, and the refusals. */
static void test_open_url_local(void)
{
    wsync_store s;
    wsync_store_url_options o;
    wsync_error err;
    wsync_http_stats st;
    char tmpl[] = "/tmp/wsync-openurl.XXXXXX", path[600], cwd[1024];
    const char *dir;
    struct stat sb;
    uint64_t size = 0;
    uint8_t *all = NULL;
    count_alloc ca;

    TEST_BEGIN("open_url: no string, or an empty one, is refused saying what a store is");
    CHECK_EQ_INT(wsync_store_open_url(NULL, NULL, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_open_url("", NULL, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "no store given") && strstr(err.message, "s3://"), "%s", err.message);
    CHECK(s.put == NULL && s.user == NULL);
    TEST_END();

    dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!dir || !getcwd(cwd, sizeof cwd) || chdir(dir) != 0) return;

    TEST_BEGIN("open_url: an unknown scheme is WSYNC_ERR_UNSUPPORTED naming the URL and the kinds, and creates nothing");
    CHECK_EQ_INT(wsync_store_open_url("ftp://x/y", NULL, &s, &err), WSYNC_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "'ftp://x/y'") && strstr(err.message, "unknown scheme 'ftp://'") &&
                  strstr(err.message, "http://") && strstr(err.message, "s3://bucket/prefix"),
              "%s", err.message);
    CHECK(stat("ftp:", &sb) != 0);
    CHECK_EQ_INT(wsync_store_open_url("file:///tmp", NULL, &s, &err), WSYNC_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "unknown scheme 'file://'"), "%s", err.message);
    CHECK_EQ_INT(wsync_store_open_url("ftp://mirror:hunter2@x/y", NULL, &s, &err), WSYNC_ERR_UNSUPPORTED);
    CHECK_MSG(!strstr(err.message, "hunter2") && strstr(err.message, "ftp://***@x/y"), "%s", err.message);
    TEST_END();

    TEST_BEGIN("open_url: a directory whose name looks like a scheme (ftp:/x) is that directory");
    CHECK(mkdir("ftp:", 0755) == 0 && mkdir("ftp:/x", 0755) == 0);
    CHECK_MSG(wsync_store_open_url("ftp://x", NULL, &s, &err) == WSYNC_OK, "%s", err.message);
    if (s.put) {
        CHECK_EQ_INT(s.put(s.user, "HEAD", "abc", 3, &err), WSYNC_OK);
        CHECK(stat("ftp:/x/HEAD", &sb) == 0 && sb.st_size == 3);
        CHECK_EQ_INT(wsync_store_http_stats(&s, &st), 0); /* not an HTTP store */
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("open_url: a directory; WSYNC_STORE_NO_CREATE (a reader) creates nothing and says so at each call; "
               "no_fsync and the allocator reach it");
    snprintf(path, sizeof path, "%s/bucket/run", dir);
    memset(&o, 0, sizeof o);
    o.flags = WSYNC_STORE_NO_CREATE;
    CHECK_MSG(wsync_store_open_url(path, &o, &s, &err) == WSYNC_OK, "%s", err.message);
    if (s.head) {
        CHECK_EQ_INT(s.head(s.user, "HEAD", &size, &err), WSYNC_ERR_NO_STORE);
        wsync_store_close(&s);
    }
    CHECK(stat(path, &sb) != 0);
    memset(&ca, 0, sizeof ca);
    o.flags = 0;
    o.no_fsync = 1;
    o.allocator.alloc = ca_alloc;
    o.allocator.free = ca_free;
    o.allocator.user = &ca;
    CHECK_MSG(wsync_store_open_url(path, &o, &s, &err) == WSYNC_OK, "%s", err.message);
    CHECK(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK(ca.allocs > 0);
    if (s.put) {
        CHECK_EQ_INT(s.put(s.user, "deltas/step_000001.safetensors", "hello", 5, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_store_get_all(&s, "deltas/step_000001.safetensors", NULL, &all, &size, &err), WSYNC_OK);
        CHECK(all && size == 5 && memcmp(all, "hello", 5) == 0);
        free(all);
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("open_url: http(s):// and s3:// in any case open those stores, nothing sent; bad ones are refused "
               "naming the URL");
    memset(&o, 0, sizeof o);
    CHECK_MSG(wsync_store_open_url("HTTPS://h:1/p", &o, &s, &err) == WSYNC_OK, "%s", err.message);
    CHECK_EQ_INT(wsync_store_http_stats(&s, &st), 1);
    CHECK_EQ_U64(st.requests, 0);
    wsync_store_close(&s);
    CHECK_EQ_INT(wsync_store_open_url("http://", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "'http://'") && strstr(err.message, "no host"), "%s", err.message);
    CHECK_EQ_INT(wsync_store_open_url("http://h/a b", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "'http://h/a b'"), "%s", err.message);
    o.http.listing = (wsync_http_listing)7;
    CHECK_EQ_INT(wsync_store_open_url("http://h/p", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "listing 7"), "%s", err.message);
    o.http.listing = WSYNC_HTTP_LISTING_AUTO;
    CHECK_EQ_INT(wsync_store_open_url("s3://", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "'s3://'") && strstr(err.message, "no bucket"), "%s", err.message);
    o.s3.access_key_id = "AKID";
    o.s3.secret_access_key = "SECRET";
    o.s3.endpoint = "http://127.0.0.1:1";
    CHECK_MSG(wsync_store_open_url("S3://bucket/p", &o, &s, &err) == WSYNC_OK, "%s", err.message);
    CHECK_EQ_INT(wsync_store_http_stats(&s, &st), 1);
    wsync_store_close(&s);
    o.s3.multipart_part_size = 0;
    setenv("WSYNC_S3_PART_SIZE", "lots", 1); /* the environment is read, as wsync_store_s3_open does */
    CHECK_EQ_INT(wsync_store_open_url("s3://bucket/p", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "WSYNC_S3_PART_SIZE"), "%s", err.message);
    unsetenv("WSYNC_S3_PART_SIZE");
    TEST_END();

    if (chdir(cwd) != 0) CHECK(0);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    if (system(path) != 0) CHECK(0);
}

/* Against nginx: the options reach the store (listing, insecure TLS, retries). */
static void test_open_url_server(void)
{
    wsync_store s;
    wsync_store_url_options o;
    wsync_error err;
    wsync_http_stats st;
    collected c;
    char url[512];
    const char *https = getenv("WSYNC_TEST_HTTPS_URL");
    uint64_t size = 0;

    TEST_BEGIN("open_url: an http:// store over nginx works; the listing option reaches it (propfind refused by "
               "plain nginx, json lists)");
    snprintf(url, sizeof url, "%s/%s/open-url", g_url, g_tag);
    memset(&o, 0, sizeof o);
    o.http.max_attempts = 1;
    o.http.listing = WSYNC_HTTP_LISTING_JSON;
    CHECK_MSG(wsync_store_open_url(url, &o, &s, &err) == WSYNC_OK, "%s", err.message);
    if (s.put) {
        CHECK_MSG(s.put(s.user, "deltas/x", "12345", 5, &err) == WSYNC_OK, "%s", err.message);
        memset(&c, 0, sizeof c);
        CHECK_MSG(s.list(s.user, "", collect, &c, &err) == WSYNC_OK && c.n == 1 && c.sizes[0] == 5, "%d: %s", c.n,
                  err.message);
        wsync_store_http_stats(&s, &st);
        CHECK_EQ_U64(st.requests, 3); /* PUT, then GET of the two folders: no PROPFIND tried */
        wsync_store_close(&s);
    }
    o.http.listing = WSYNC_HTTP_LISTING_PROPFIND;
    CHECK_MSG(wsync_store_open_url(url, &o, &s, &err) == WSYNC_OK, "%s", err.message);
    if (s.list) {
        memset(&c, 0, sizeof c);
        CHECK_EQ_INT(s.list(s.user, "", collect, &c, &err), WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "PROPFIND") && strstr(err.message, "HTTP 405"), "%s", err.message);
        CHECK_EQ_INT(s.del(s.user, "deltas/x", &err), WSYNC_OK);
        wsync_store_close(&s);
    }
    TEST_END();

    if (!https) return;
    TEST_BEGIN("open_url: https with a self-signed certificate: refused, and read with insecure set");
    snprintf(url, sizeof url, "%s/%s/open-url", https, g_tag);
    memset(&o, 0, sizeof o);
    o.http.max_attempts = 1;
    CHECK_MSG(wsync_store_open_url(url, &o, &s, &err) == WSYNC_OK, "%s", err.message);
    if (s.head) {
        CHECK_EQ_INT(s.head(s.user, "HEAD", &size, &err), WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "certificate"), "%s", err.message);
        wsync_store_close(&s);
    }
    o.http.insecure = 1;
    CHECK_MSG(wsync_store_open_url(url, &o, &s, &err) == WSYNC_OK, "%s", err.message);
    if (s.head) {
        CHECK_MSG(s.head(s.user, "HEAD", &size, &err) == WSYNC_ERR_NOT_FOUND, "%s", err.message);
        wsync_store_close(&s);
    }
    TEST_END();
}

/* An object replaced behind nginx's back by one of 1.5 GB (sparse): read
   with the size HEAD gave it, or with a cap, the download stops there. */
static void test_limits(void)
{
    wsync_store s;
    wsync_http_options o;
    wsync_http_stats st0, st1;
    wsync_error err;
    uint8_t small[100], *bytes = NULL;
    uint64_t size = 0;
    char path[1024];
    int pass;
    memset(small, 5, sizeof small);
    for (pass = 0; pass < 2; pass++) {
        memset(&o, 0, sizeof o);
        if (pass) {
            o.parallel = 4;
            o.parallel_threshold = 1u << 20;
            o.part_size = 300000;
        }
        TEST_BEGIN(pass ? "http: limits (parallel): an object grown to 1.5 GB behind nginx's back is read no further"
                        : "http: limits: an object grown to 1.5 GB behind nginx's back is read no further");
        if (!open_at(g_url, pass ? "limits-par" : "limits", &o, &s)) {
            TEST_END();
            continue;
        }
        CHECK_EQ_INT(s.put(s.user, "deltas/obj", small, sizeof small, &err), WSYNC_OK);
        snprintf(path, sizeof path, "%s/%s/%s/deltas/obj", g_data, g_tag, pass ? "limits-par" : "limits");
        CHECK_MSG(truncate(path, (off_t)1536 << 20) == 0, "truncate %s", path);
        wsync_store_http_stats(&s, &st0);
        CHECK_EQ_INT(wsync_store_get_capped(&s, "deltas/obj", 100, WSYNC_STORE_GET_EXACT, NULL, &bytes, &size, &err),
                     WSYNC_ERR_LIMIT);
        CHECK_MSG(strstr(err.message, "'deltas/obj' is 1610612736 bytes, more than the 100 expected") != NULL, "%s",
                  err.message);
        wsync_store_http_stats(&s, &st1);
        CHECK_MSG(st1.bytes_down - st0.bytes_down <= 100, "%llu bytes down",
                  (unsigned long long)(st1.bytes_down - st0.bytes_down));
        /* a cap on an object of unknown size: cut off by the sink */
        CHECK_EQ_INT(wsync_store_get_capped(&s, "deltas/obj", 1000, 0, NULL, &bytes, &size, &err), WSYNC_ERR_LIMIT);
        CHECK_MSG(strstr(err.message, "deltas/obj") && strstr(err.message, "1000"), "%s", err.message);
        wsync_store_http_stats(&s, &st0);
        CHECK_MSG(st0.bytes_down - st1.bytes_down <= 1000, "%llu bytes down",
                  (unsigned long long)(st0.bytes_down - st1.bytes_down));
        CHECK(bytes == NULL);
        CHECK_EQ_INT(s.del(s.user, "deltas/obj", &err), WSYNC_OK);
        wsync_store_close(&s);
        TEST_END();
    }
}

int main(void)
{
    static char tag[128];
    g_url = getenv("WSYNC_TEST_HTTP_URL");
    g_proxy = getenv("WSYNC_TEST_HTTP_PROXY");
    g_data = getenv("WSYNC_TEST_HTTP_DATA");
    g_tag = getenv("WSYNC_TEST_HTTP_TAG");
    if (!g_tag) {
        snprintf(tag, sizeof tag, "t%ld", (long)getpid());
        g_tag = tag;
    }
    g_model = sm_model_make(g_defs, NT);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_listing_parser();
    test_open_args();
    test_open_url_local();
    if (!g_url || !g_proxy || !g_data) {
        printf("(WSYNC_TEST_HTTP_URL and friends unset: run tests/http/test_http.sh for the server tests)\n");
        curl_global_cleanup();
        return check_summary();
    }
    test_parallel();
    test_mkcol();
    test_prefetch();
    test_nolist();
    test_open_url_server();
    test_idle_close();
    test_limits();
    test_faults();
    test_restart();
    test_redirect();
    test_tls();
    test_kill_transfer();
    test_kill_chain();
    curl_global_cleanup();
    return check_summary();
}
