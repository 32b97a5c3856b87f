/* The HTTP store's WebDAV listing (PROPFIND, wsync_http.h) against real
   servers started by tests/http/test_webdav.sh, which sets:
     WSYNC_TEST_APACHE_URL, WSYNC_TEST_APACHE_DATA   Apache 2.4, mod_dav + mod_dav_fs
     WSYNC_TEST_DAVEXT_URL, WSYNC_TEST_DAVEXT_DATA   nginx with the dav-ext module, no autoindex
     WSYNC_TEST_JSON_URL                             the same nginx, a server with the JSON
                                                     autoindex and no PROPFIND (auto falls back)
     WSYNC_TEST_HOSTILE_URL                          tests/http/webdav/canned.py: PROPFIND of /NAME/
                                                     answers 207 with tests/http/webdav/hostile/NAME.xml
     WSYNC_TEST_DAV_TAG                              a prefix unique to this run
   Without them only the parser's tests run.

   What every store must do over these servers (put, get, ranges, PROPFIND
   listings in auto mode, the chain with retention, without HEAD) is the
   conformance suite's: tests/http/test_conformance.c, which
   tests/http/test_webdav.sh runs against Apache and nginx dav-ext. Here:
   nginx dav-ext with the JSON listing forced says it offers none (not a
   credentials problem); a listing that fails is never an empty chain
   (Apache's 404s, canned answers). The JSON server: auto lists through the JSON
   autoindex; PROPFIND forced is refused with a message naming the
   servers' settings. Hostile answers: each fails with WSYNC_ERR_IO and a
   message naming PROPFIND and what was wrong. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"
#include "check.h"
#include "small_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_tag;

/* ---- keys listed ---- */

typedef struct keys {
    char k[128][96];
    uint64_t size[128];
    int n;
} keys;

static int keys_add(void *user, const char *key, uint64_t size)
{
    keys *c = (keys *)user;
    if (c->n < 128) {
        snprintf(c->k[c->n], sizeof c->k[c->n], "%s", key);
        c->size[c->n] = size;
    }
    c->n++;
    return 0;
}

static int keys_list(const wsync_store *s, const char *prefix, keys *c, wsync_error *err)
{
    memset(c, 0, sizeof *c);
    return s->list(s->user, prefix, keys_add, c, err) == WSYNC_OK;
}

/* ---- a small model that changes a little every step ---- */

#define NT 3
static const sm_def g_defs[NT] = {{"model.embed_tokens.weight", 2, {64, 96}, 0},
                                  {"lm_head.weight", 2, {64, 96}, 0},
                                  {"model.norm.weight", 2, {96, 1}, 0}};
static sm_model g_model; /* of g_defs (main makes it) */

/* Step s: ~2% of the elements move by one bf16 step from step s-1. */
static void gen_step(uint16_t *img, uint64_t step) { sm_scatter(img, g_model.total, 20, step); }

/* ---- one WebDAV server ---- */

static int open_store(const char *base, const char *sub, wsync_http_listing how, wsync_store *s)
{
    char url[600];
    wsync_error err;
    wsync_http_options o;
    memset(&o, 0, sizeof o);
    o.listing = how;
    o.max_attempts = 2;
    o.backoff_ms = 20;
    snprintf(url, sizeof url, "%s/%s/%s", base, g_tag, sub);
    if (wsync_store_http_open(url, &o, s, &err) != WSYNC_OK) {
        CHECK_MSG(0, "open %s: %s", url, err.message);
        return 0;
    }
    return 1;
}

/* nginx with dav-ext and no autoindex, the JSON listing asked for: a
   folder's GET is 403 there. The listing is unavailable: the server
   offers no JSON listing, and how to get one, never "check the
   credentials". */
static void test_json_forced(const char *base)
{
    wsync_store s, w;
    wsync_error err;
    keys c;
    TEST_BEGIN("nginx dav-ext, listing json: a folder's GET answered 403 is 'no JSON listing' "
               "(WSYNC_ERR_UNSUPPORTED, how to enable one), not an authentication failure");
    if (open_store(base, "json-forced", WSYNC_HTTP_LISTING_PROPFIND, &w)) {
        CHECK_MSG(w.put(w.user, "deltas/step_000001.safetensors", "x", 1, &err) == WSYNC_OK, "%s", err.message);
        wsync_store_close(&w);
    }
    if (open_store(base, "json-forced", WSYNC_HTTP_LISTING_JSON, &s)) {
        CHECK(!keys_list(&s, "deltas/", &c, &err));
        CHECK_EQ_INT(err.code, WSYNC_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(err.message, "offers no JSON listing") && strstr(err.message, "HTTP 403") &&
                      strstr(err.message, "autoindex_format json") && strstr(err.message, "propfind") &&
                      !strstr(err.message, "credentials"),
                  "%s", err.message);
        CHECK(!keys_list(&s, "", &c, &err) && err.code == WSYNC_ERR_UNSUPPORTED);
        wsync_store_close(&s);
    }
    TEST_END();
}

/* The JSON-autoindex nginx: auto falls back to it; PROPFIND forced is refused. */
static void test_json_server(const char *base)
{
    wsync_store s;
    wsync_error err;
    keys c;
    TEST_BEGIN("nginx without dav-ext: auto lists through the JSON autoindex after PROPFIND's 405");
    if (open_store(base, "json", WSYNC_HTTP_LISTING_AUTO, &s)) {
        CHECK_MSG(s.put(s.user, "deltas/a.bin", "abc", 3, &err) == WSYNC_OK, "%s", err.message);
        CHECK_MSG(s.put(s.user, "HEAD", "x", 1, &err) == WSYNC_OK, "%s", err.message);
        CHECK_MSG(keys_list(&s, "", &c, &err) && c.n == 2 && strcmp(c.k[1], "deltas/a.bin") == 0 && c.size[1] == 3,
                  "%d keys: %s", c.n, err.message);
        CHECK_MSG(keys_list(&s, "", &c, &err) && c.n == 2, "again: %d keys: %s", c.n, err.message);
        wsync_store_close(&s);
    }
    TEST_END();
    TEST_BEGIN("nginx without dav-ext: PROPFIND forced fails, naming the status and how to enable it");
    if (open_store(base, "json", WSYNC_HTTP_LISTING_PROPFIND, &s)) {
        CHECK(!keys_list(&s, "", &c, &err));
        CHECK_EQ_INT(err.code, WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "PROPFIND") && strstr(err.message, "HTTP 405") && strstr(err.message, "dav-ext"),
                  "%s", err.message);
        wsync_store_close(&s);
    }
    TEST_END();
}

/* Canned answers (tests/http/webdav/hostile/NAME.xml behind PROPFIND /NAME/). */
static void test_hostile(const char *base)
{
    static const struct {
        const char *name, *says;
    } cases[] = {
        {"dotdot", "\"..\" segment"},
        {"pct_bad", "two hex digits"},
        {"pct_nul", "encoded NUL"},
        {"doctype", "DOCTYPE"},
        {"entity", "entity"},
        {"outside", "outside the collection"},
        {"grandchild", "not a direct child"},
        {"slash_file", "not a collection"},
        {"no_length", "without <getcontentlength>"},
        {"huge_length", "2^63"},
        {"deep", "deeper than 16"},
        {"truncated", "ends inside an element"},
        {"not_multistatus", "not <multistatus>"},
        {"relative", "neither an absolute URL nor an absolute path"},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char url[600], t[200];
        wsync_store s;
        wsync_error err;
        wsync_http_options o;
        keys c;
        snprintf(t, sizeof t, "hostile PROPFIND answer '%s': WSYNC_ERR_IO naming PROPFIND and \"%s\"", cases[i].name,
                 cases[i].says);
        TEST_BEGIN(t);
        memset(&o, 0, sizeof o);
        o.max_attempts = 1;
        snprintf(url, sizeof url, "%s/%s", base, cases[i].name);
        if (wsync_store_http_open(url, &o, &s, &err) == WSYNC_OK) {
            CHECK(!keys_list(&s, "", &c, &err));
            CHECK_EQ_INT(err.code, WSYNC_ERR_IO);
            CHECK_MSG(strstr(err.message, "PROPFIND") && strstr(err.message, cases[i].says) &&
                          strstr(err.message, url + 7),
                      "%s", err.message);
            CHECK_EQ_INT(c.n, 0);
            wsync_store_close(&s);
        } else CHECK_MSG(0, "open: %s", err.message);
        TEST_END();
    }
}

/* ---- a listing that fails is never an empty chain ---- */

static int open_plain(const char *url, wsync_http_listing how, wsync_store *s)
{
    wsync_error err;
    wsync_http_options o;
    memset(&o, 0, sizeof o);
    o.listing = how;
    o.max_attempts = 1;
    if (wsync_store_http_open(url, &o, s, &err) != WSYNC_OK) {
        CHECK_MSG(0, "open %s: %s", url, err.message);
        return 0;
    }
    return 1;
}

/* A publisher over s must refuse (nothing written), the listing being
   unavailable. */
static void refuses_unknown(wsync_store *s, const char *what)
{
    wsync_error err;
    wsync_chain_info ci;
    wsync_publisher *p = NULL;
    wsync_chain_options co;
    keys c;
    CHECK_MSG(!keys_list(s, "", &c, &err) && err.code == WSYNC_ERR_UNSUPPORTED && strstr(err.message, "unavailable"),
              "%s: list: %d keys: %s", what, c.n, err.message);
    memset(&ci, 0, sizeof ci);
    CHECK_EQ_INT(wsync_chain_read(s, NULL, &ci, &err), WSYNC_ERR_UNSUPPORTED);
    wsync_chain_info_free(&ci);
    CHECK_EQ_INT(wsync_publisher_open(s, NULL, &p, &err), WSYNC_ERR_UNSUPPORTED);
    if (p) wsync_publisher_close(p);
    p = NULL;
    memset(&co, 0, sizeof co);
    co.flags = WSYNC_CHAIN_NEW_CHAIN;
    CHECK_EQ_INT(wsync_publisher_open(s, &co, &p, &err), WSYNC_ERR_UNSUPPORTED);
    if (p) wsync_publisher_close(p);
}

/* A new prefix: positively empty, and a publisher starts a chain there. */
static void takes_chain(wsync_store *s, const char *what)
{
    wsync_error err;
    wsync_publisher *p = NULL;
    keys c;
    uint64_t size = 0;
    CHECK_MSG(keys_list(s, "", &c, &err) && c.n == 0, "%s: list: %d keys: %s", what, c.n, err.message);
    CHECK_MSG(keys_list(s, "anchors/", &c, &err) && c.n == 0, "%s: list anchors/: %d keys: %s", what, c.n,
              err.message);
    CHECK_MSG(wsync_publisher_open(s, NULL, &p, &err) == WSYNC_OK, "%s: publisher: %s", what, err.message);
    if (!p) return;
    CHECK_MSG(sm_publish(p, &g_model, gen_step, 0, &err), "%s: publish: %s", what, err.message);
    CHECK_MSG(s->head(s->user, "HEAD", &size, &err) == WSYNC_OK, "%s: HEAD: %s", what, err.message);
    wsync_publisher_close(p);
}

static void test_unknown_state(const char *apache, const char *davext, const char *json, const char *hostile)
{
    static const char foreign[] = "a foreign chain's anchor, not ours to overwrite";
    wsync_store s, w;
    wsync_error err;
    char url[600];
    uint8_t *all = NULL;
    uint64_t size = 0;
    keys c;
    if (apache) {
        TEST_BEGIN("apache, listing json: a folder's GET is 404 there, so a HEAD-less chain's state is unknown: the "
                   "listing is unavailable (WSYNC_ERR_UNSUPPORTED), and a publisher refuses, writing nothing");
        if (open_store(apache, "foreign", WSYNC_HTTP_LISTING_PROPFIND, &w)) {
            CHECK_MSG(w.put(w.user, "anchors/step_000000.safetensors", foreign, sizeof foreign - 1, &err) == WSYNC_OK,
                      "%s", err.message);
            if (open_store(apache, "foreign", WSYNC_HTTP_LISTING_JSON, &s)) {
                refuses_unknown(&s, "apache json, a foreign chain");
                CHECK_MSG(!keys_list(&s, "", &c, &err) && strstr(err.message, "PROPFIND") &&
                              strstr(err.message, "404"),
                          "%s", err.message);
                wsync_store_close(&s);
            }
            CHECK_EQ_INT(w.head(w.user, "HEAD", &size, &err), WSYNC_ERR_NOT_FOUND);
            CHECK_MSG(wsync_store_get_all(&w, "anchors/step_000000.safetensors", NULL, &all, &size, &err) ==
                              WSYNC_OK &&
                          size == sizeof foreign - 1 && memcmp(all, foreign, size) == 0,
                      "the foreign anchor changed: %s", err.message);
            free(all);
            all = NULL;
            wsync_store_close(&w);
        }
        TEST_END();
        TEST_BEGIN("apache: a new prefix is not known to be empty through GET (refused); through PROPFIND (auto) it "
                   "is (its parents are read up to one that lists), and takes a chain");
        if (open_store(apache, "fresh-json/a", WSYNC_HTTP_LISTING_JSON, &s)) {
            refuses_unknown(&s, "apache json, a new prefix");
            wsync_store_close(&s);
        }
        if (open_store(apache, "fresh-auto/a/b", WSYNC_HTTP_LISTING_AUTO, &s)) {
            takes_chain(&s, "apache auto, a new prefix");
            wsync_store_close(&s);
        }
        TEST_END();
    }
    if (json) {
        TEST_BEGIN("nginx with the JSON autoindex: a new prefix is empty (a parent lists without it), json and auto");
        if (open_store(json, "fresh-json/a/b", WSYNC_HTTP_LISTING_JSON, &s)) {
            takes_chain(&s, "nginx json");
            wsync_store_close(&s);
        }
        if (open_store(json, "fresh-auto/a", WSYNC_HTTP_LISTING_AUTO, &s)) {
            takes_chain(&s, "nginx auto");
            wsync_store_close(&s);
        }
        TEST_END();
    }
    if (davext) {
        TEST_BEGIN("nginx dav-ext without autoindex, listing json: a 404 under a folder that answers 403 (there, "
                   "unlisted) is a missing folder: empty");
        if (open_store(davext, "store", WSYNC_HTTP_LISTING_PROPFIND, &w)) {
            CHECK_MSG(w.put(w.user, "x", "y", 1, &err) == WSYNC_OK, "%s", err.message);
            wsync_store_close(&w);
        }
        if (open_store(davext, "store/fresh", WSYNC_HTTP_LISTING_JSON, &s)) {
            CHECK_MSG(keys_list(&s, "", &c, &err) && c.n == 0, "%d keys: %s", c.n, err.message);
            wsync_store_close(&s);
        }
        TEST_END();
    }
    if (hostile) {
        TEST_BEGIN("canned: a folder answered 404 that its parent lists as a folder is unavailable; one its parent "
                   "does not list (or lists as a file) is empty; 404 up to the root is unavailable");
        snprintf(url, sizeof url, "%s/ghost/sub", hostile);
        if (open_plain(url, WSYNC_HTTP_LISTING_PROPFIND, &s)) {
            CHECK(!keys_list(&s, "", &c, &err));
            CHECK_EQ_INT(err.code, WSYNC_ERR_UNSUPPORTED);
            CHECK_MSG(strstr(err.message, "a folder that is there") && strstr(err.message, "'sub'"), "%s",
                      err.message);
            wsync_store_close(&s);
        }
        snprintf(url, sizeof url, "%s/ghost/other", hostile);
        if (open_plain(url, WSYNC_HTTP_LISTING_PROPFIND, &s)) {
            CHECK_MSG(keys_list(&s, "", &c, &err) && c.n == 0, "%s", err.message);
            wsync_store_close(&s);
        }
        snprintf(url, sizeof url, "%s/ghost/file", hostile);
        if (open_plain(url, WSYNC_HTTP_LISTING_PROPFIND, &s)) {
            CHECK_MSG(keys_list(&s, "deltas/", &c, &err) && c.n == 0, "%s", err.message);
            wsync_store_close(&s);
        }
        snprintf(url, sizeof url, "%s/nothing/here", hostile);
        if (open_plain(url, WSYNC_HTTP_LISTING_PROPFIND, &s)) {
            CHECK(!keys_list(&s, "", &c, &err));
            CHECK_EQ_INT(err.code, WSYNC_ERR_UNSUPPORTED);
            CHECK_MSG(strstr(err.message, "every folder above it"), "%s", err.message);
            wsync_store_close(&s);
        }
        TEST_END();
    }
}

/* ---- the parser alone (no server) ---- */

static int count_fn(void *user, const char *path, size_t len, int is_dir, uint64_t size)
{
    (void)path;
    (void)len;
    (void)is_dir;
    (void)size;
    (*(int *)user)++;
    return 0;
}

static void test_parser(void)
{
    static const char ok[] =
        "<?xml version=\"1.0\"?><m:multistatus xmlns:m=\"DAV:\"><m:response><m:href>http://h:1/a%20b/</m:href>"
        "<m:propstat><m:prop><x:resourcetype xmlns:x=\"DAV:\"><x:collection/></x:resourcetype></m:prop>"
        "<m:status>HTTP/1.1 200 OK</m:status></m:propstat></m:response>"
        "<m:response><m:href>/a%20b/f&amp;g</m:href><m:propstat><m:prop><m:getcontentlength>12"
        "</m:getcontentlength></m:prop><m:status>HTTP/1.1 200 OK</m:status></m:propstat>"
        "<m:propstat><m:prop><m:getcontentlength/></m:prop><m:status>HTTP/1.1 404 Not Found</m:status></m:propstat>"
        "</m:response></m:multistatus>";
    wsync_error err;
    int n = 0;
    TEST_BEGIN("propfind parser: prefixes, an absolute URL, entities and %XX decoded, a 404 propstat ignored");
    CHECK_MSG(wsync_http_propfind_parse(ok, sizeof ok - 1, count_fn, &n, &err) == WSYNC_OK, "%s", err.message);
    CHECK_EQ_INT(n, 2);
    TEST_END();
}

int main(void)
{
    const char *apache = getenv("WSYNC_TEST_APACHE_URL"), *apache_data = getenv("WSYNC_TEST_APACHE_DATA");
    const char *davext = getenv("WSYNC_TEST_DAVEXT_URL"), *davext_data = getenv("WSYNC_TEST_DAVEXT_DATA");
    const char *json = getenv("WSYNC_TEST_JSON_URL"), *hostile = getenv("WSYNC_TEST_HOSTILE_URL");
    g_tag = getenv("WSYNC_TEST_DAV_TAG");
    if (!g_tag) g_tag = "t";
    g_model = sm_model_make(g_defs, NT);
    test_parser();
    if (davext) test_json_forced(davext);
    if (json) test_json_server(json);
    if (hostile) test_hostile(hostile);
    test_unknown_state(apache && apache_data ? apache : NULL, davext && davext_data ? davext : NULL, json, hostile);
    return check_summary();
}
