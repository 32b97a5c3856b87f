/* The store conformance suite: one set of checks of what wsync relies on a
   store for, written once and run against every kind of store and server
   the tests start. Each store's results end in one line,
     conformance KIND: CHECK ok, CHECK listing unavailable, CHECK n/a, ...
   from which README.md's server table is made.

   usage: test_conformance [KIND,URL[,S3_ENDPOINT] ...]
   Without arguments: the memory store and a directory store (make test runs
   it so). Each argument names a store the scripts started a server for:
     nginx-dav      tests/http/test_http.sh: nginx's dav module, JSON autoindex
     nginx-nolist   the same nginx's /nolist/: the dav module alone, no listing
     nginx-dav-ext  tests/http/test_webdav.sh: nginx with the dav-ext module
     apache         tests/http/test_webdav.sh: Apache 2.4, mod_dav + mod_dav_fs
     rclone         tests/http/test_rclone.sh: rclone serve webdav
     s3rver         tests/http/test_s3.sh: s3rver 4.0.4 (s3:// URL; endpoint)
     s3-11m         tests/http/test_s3_limits.sh: s3rver behind nginx with
                    client_max_body_size 11m (the body limit of fauxqs)
     fauxqs         tests/http/test_s3_limits.sh: fauxqs 1.9.2's S3 (its own 11 MiB
                    body limit), where it is installed in build/fauxqs
   The URL is the store's own path, unique to the run (the suite owns
   everything under it).

   The checks (each one case of the summary):
     put-get     put, head, get and get_all agree, bytes and sizes
     range       ranged gets: inside, at the end (empty), past the end
                 (WSYNC_ERR_OUT_OF_BOUNDS naming the key), of length 0
     missing     a missing key is WSYNC_ERR_NOT_FOUND for head, get, a
                 ranged get and del, naming the key (and HTTP 404); a folder
                 is no object (head and get fail, nothing read)
     bad-key     keys wsync_store_key_check refuses are WSYNC_ERR_INVALID_ARGUMENT
     overwrite   a put replaces the whole object, longer or shorter (HEAD's
                 way)
     list        byte order, sizes, a folder prefix, a partial name, early
                 stop, a prefix with nothing under it
     order       byte order across folder boundaries ("x-z", "x.bin", "x/y")
     dir-anchors anchors/step_N/NAME listed under anchors/; without HEAD it
                 is step N of a foreign chain: a publisher refuses and
                 writes nothing
     del         del removes (head, listing); a second del is NOT_FOUND
     empty       an empty object (a checkpoint's empty file) exists: head,
                 get, listed with size 0
     sink        a sink that refuses is WSYNC_ERR_SINK
     odd-keys    keys that need percent-encoding round-trip and list as
                 themselves
     big         a 12 MiB object (parallel ranged GETs over HTTP, multipart
                 over S3) round-trips, is replaced whole, then by a small one
     atomic      a reader during overwrites sees one whole version, never a
                 mixture or a short object
     chain       11 steps published (anchors every 3, retain 4): after each
                 the store lists what a memory store lists; a follower, a
                 subscriber from scratch and one from mid-chain bit-exact; a
                 delta corrupted in the store is routed around
     headless    without HEAD the chain is read from the listing (head step,
                 a subscriber bit-exact) and a publisher refuses it
     fresh       a prefix never written lists nothing, is an empty chain,
                 and takes a chain
     no-store    a store that is not there (a directory reader's missing
                 root, a bucket that does not exist) is WSYNC_ERR_NO_STORE
   A check a server is known to fail (caps below: fauxqs's empty PUT,
   an overwrite that a racing reader can see torn) reports "lacks" with
   what it saw, and fails only where the store should have done it.
   A store that offers no listing (nginx-nolist): each check that needs
   one sees the listing refused as unavailable (WSYNC_ERR_UNSUPPORTED, a
   message that says how to enable one and not "credentials"), never an
   empty listing, and says "listing unavailable". */
#define _XOPEN_SOURCE 700
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"
#include "check.h"
#include "small_model.h"

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- what a kind of store is expected to do ---- */

typedef struct conf_caps {
    const char *kind;
    int http;         /* messages name the HTTP status */
    int s3;           /* an s3:// URL */
    int listing;      /* 1: it lists; 0: it offers no listing (each check needing one sees "unavailable") */
    int amp_quote;    /* keys with '&' and '\'' list as themselves (s3rver 4.0.4 escapes them twice) */
    int empty;        /* takes an empty object (fauxqs 1.9.2 answers a PUT of 0 bytes with HTTP 500) */
    int body_limit;   /* refuses bodies over 11 MiB (413): the big object's single PUT goes again in parts */
    int atomic;       /* a read racing an overwrite gets one whole version; 0: not (Apache stats the file,
                         then opens it by name: one version's length, the other's bytes; rclone 1.60 writes
                         in place; s3rver keeps size and bytes apart): the check then reports what a reader
                         saw */
} conf_caps;

static const conf_caps g_kinds[] = {
    /* kind             http s3 list &' empty limit atomic */
    {"memory",          0,   0, 1,   1, 1,    0,    1},
    {"dir",             0,   0, 1,   1, 1,    0,    1},
    {"nginx-dav",       1,   0, 1,   1, 1,    0,    1},
    {"nginx-nolist",    1,   0, 0,   1, 1,    0,    1},
    {"nginx-dav-ext",   1,   0, 1,   1, 1,    0,    1},
    {"apache",          1,   0, 1,   1, 1,    0,    0},
    {"rclone",          1,   0, 1,   1, 1,    0,    0},
    {"s3rver",          1,   1, 1,   0, 1,    0,    0},
    {"s3-11m",          1,   1, 1,   0, 1,    1,    0},
    {"fauxqs",          1,   1, 1,   1, 0,    1,    1},
};

/* a check's result: passed, passed where the store refused a listing as
   unavailable, not for this store, a lack of the server's (reported, not
   a failure), failed */
enum { CR_NONE, CR_OK, CR_UNAVAIL, CR_NA, CR_LACKS, CR_FAIL };
enum {
    C_PUT_GET, C_RANGE, C_MISSING, C_BAD_KEY, C_OVERWRITE, C_LIST, C_ORDER, C_DIR_ANCHORS, C_DEL, C_EMPTY, C_SINK,
    C_ODD_KEYS, C_BIG, C_ATOMIC, C_CHAIN, C_HEADLESS, C_FRESH, C_NO_STORE, NCHECKS
};
static const char *g_check_names[NCHECKS + 1] = {
    "put-get", "range", "missing", "bad-key", "overwrite", "list",  "order",    "dir-anchors", "del",     "empty",
    "sink",    "odd-keys", "big",  "atomic",  "chain",     "headless", "fresh", "no-store",    NULL};

typedef struct conf {
    const conf_caps *caps;
    wsync_store *s;
    const wsync_store *missing; /* a store that is not there, or NULL */
    const char *where;          /* what its messages name (a URL), or NULL */
    int result[NCHECKS];
    char note[NCHECKS][96];
    double secs[NCHECKS], t0;
    int unavail;                /* the current check met "listing unavailable" */
    char case_name[200];
} conf;

static void conf_begin(conf *c, int i, const char *what)
{
    snprintf(c->case_name, sizeof c->case_name, "%s: %s: %s", c->caps->kind, g_check_names[i], what);
    c->unavail = 0;
    c->t0 = now_s();
    TEST_BEGIN(c->case_name);
}

static void conf_end(conf *c, int i)
{
    c->result[i] = check__case_failures ? CR_FAIL : c->unavail ? CR_UNAVAIL : CR_OK;
    c->secs[i] = now_s() - c->t0;
    TEST_END();
}

static void conf_na(conf *c, int i, int result, const char *note)
{
    c->result[i] = result;
    snprintf(c->note[i], sizeof c->note[i], "%s", note);
}

/* ---- listing ---- */

typedef struct keys {
    char k[64][128];
    uint64_t size[64];
    int n, stop_after;
} keys;

static int keys_add(void *user, const char *key, uint64_t size)
{
    keys *c = (keys *)user;
    if (c->n < 64) {
        snprintf(c->k[c->n], sizeof c->k[c->n], "%s", key);
        c->size[c->n] = size;
    }
    c->n++;
    return c->stop_after && c->n >= c->stop_after;
}

/* Lists prefix into k: 1 when listed. A store that offers no listing must
   refuse it as unavailable (then 0, and the check says so); a store that
   lists must list. */
static int lst(conf *c, const wsync_store *s, const char *prefix, keys *k)
{
    wsync_error err;
    wsync_result r;
    int stop = k->stop_after;
    memset(k, 0, sizeof *k);
    k->stop_after = stop;
    r = s->list(s->user, prefix, keys_add, k, &err);
    if (r == WSYNC_OK) return 1;
    if (!c->caps->listing) {
        CHECK_MSG(r == WSYNC_ERR_UNSUPPORTED &&
                      (strstr(err.message, "listing is unavailable") || strstr(err.message, "offers no listing")) &&
                      (strstr(err.message, "enable") || strstr(err.message, "autoindex")) &&
                      !strstr(err.message, "credentials"),
                  "list '%s': a refusal that does not say the listing is unavailable: %s: %s", prefix,
                  wsync_result_str(r), err.message);
        c->unavail = 1;
        return 0;
    }
    CHECK_MSG(0, "list '%s': %s: %s", prefix, wsync_result_str(r), err.message);
    return 0;
}

static int keys_is(const keys *k, const char *const *want, const uint64_t *sizes, int n)
{
    int i;
    if (k->n != n) return 0;
    for (i = 0; i < n; i++)
        if (strcmp(k->k[i], want[i]) != 0 || (sizes && k->size[i] != sizes[i])) return 0;
    return 1;
}

static void keys_print(const char *what, const keys *k)
{
    int i;
    printf("  %s (%d):", what, k->n);
    for (i = 0; i < k->n && i < 64; i++) printf(" %s(%llu)", k->k[i], (unsigned long long)k->size[i]);
    printf("\n");
}

#define KEYS_IS(k, want, sizes)                                                                                      \
    do {                                                                                                             \
        if (!keys_is(&(k), want, sizes, (int)(sizeof want / sizeof want[0]))) {                                      \
            keys_print("listed", &(k));                                                                              \
            CHECK_MSG(0, "the listing is not %s", #want);                                                            \
        }                                                                                                            \
    } while (0)

/* ---- small helpers ---- */

static int put(const wsync_store *s, const char *key, const void *b, size_t n)
{
    wsync_error err;
    wsync_result r = s->put(s->user, key, b, n, &err);
    CHECK_MSG(r == WSYNC_OK, "put %s (%lu bytes): %s", key, (unsigned long)n, err.message);
    return r == WSYNC_OK;
}

/* The object is exactly b[0, n). */
static int is(const wsync_store *s, const char *key, const void *b, size_t n)
{
    wsync_error err;
    uint8_t *all = NULL;
    uint64_t size = 0, hsize = 0;
    int ok;
    if (s->head(s->user, key, &hsize, &err) != WSYNC_OK) {
        CHECK_MSG(0, "head %s: %s", key, err.message);
        return 0;
    }
    if (wsync_store_get_all(s, key, NULL, &all, &size, &err) != WSYNC_OK) {
        CHECK_MSG(0, "get %s: %s", key, err.message);
        return 0;
    }
    ok = size == n && hsize == n && all && (n == 0 || memcmp(all, b, n) == 0);
    CHECK_MSG(ok, "%s: %llu bytes (head %llu), wanted %lu%s", key, (unsigned long long)size,
              (unsigned long long)hsize, (unsigned long)n, size == n ? ", different bytes" : "");
    free(all);
    return ok;
}

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = (uint8_t *)malloc(n ? n : 1);
    size_t i;
    for (i = 0; i < n; i++) p[i] = (uint8_t)((i * 2654435761u + seed * 40503u) >> 11);
    return p;
}

/* ======================================================================
   Objects
   ====================================================================== */

static const char g_hello[] = "hello, store";
#define HELLO_N (sizeof g_hello - 1)

static void check_put_get(conf *c)
{
    conf_begin(c, C_PUT_GET, "put, head, get and get_all agree");
    if (put(c->s, "deltas/step_000001.safetensors", g_hello, HELLO_N)) is(c->s, "deltas/step_000001.safetensors", g_hello, HELLO_N);
    conf_end(c, C_PUT_GET);
}

static void check_range(conf *c)
{
    wsync_store *s = c->s;
    wsync_error err;
    uint8_t buf[64];
    wsync_buffer wb;
    uint64_t size = 0;
    const char *k = "deltas/step_000001.safetensors";
    conf_begin(c, C_RANGE, "ranged gets: inside, at the end, past the end (OUT_OF_BOUNDS naming the key), length 0");
    wb.bytes = buf;
    wb.cap = sizeof buf;
    wb.len = 0;
    CHECK_EQ_INT(s->get(s->user, k, 7, 5, wsync_buffer_sink, &wb, &size, &err), WSYNC_OK);
    CHECK(wb.len == 5 && memcmp(buf, "store", 5) == 0);
    CHECK_EQ_U64(size, HELLO_N);
    wb.len = 0;
    CHECK_EQ_INT(s->get(s->user, k, 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err), WSYNC_OK);
    CHECK(wb.len == HELLO_N && memcmp(buf, g_hello, HELLO_N) == 0);
    wb.len = 0;
    CHECK_EQ_INT(s->get(s->user, k, HELLO_N, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err), WSYNC_OK);
    CHECK_EQ_INT(wb.len, 0);
    CHECK_EQ_INT(s->get(s->user, k, HELLO_N + 1, 1, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_OUT_OF_BOUNDS);
    CHECK_EQ_INT(s->get(s->user, k, HELLO_N + 1, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err),
                 WSYNC_ERR_OUT_OF_BOUNDS);
    CHECK_EQ_INT(s->get(s->user, k, 10, 3, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_OUT_OF_BOUNDS);
    CHECK_MSG(strstr(err.message, "step_000001") != NULL, "%s", err.message);
    CHECK_EQ_INT(wb.len, 0);
    CHECK_EQ_INT(s->get(s->user, k, 3, 0, wsync_buffer_sink, &wb, &size, &err), WSYNC_OK);
    CHECK(wb.len == 0 && size == HELLO_N);
    conf_end(c, C_RANGE);
}

static void check_missing(conf *c)
{
    wsync_store *s = c->s;
    wsync_error err;
    uint8_t buf[8];
    wsync_buffer wb;
    uint64_t size = 0;
    wsync_result r;
    conf_begin(c, C_MISSING, "a missing key is NOT_FOUND for head, get, a range and del, naming the key; a folder "
                     "is no object");
    wb.bytes = buf;
    wb.cap = sizeof buf;
    wb.len = 0;
    CHECK_EQ_INT(s->head(s->user, "nope", &size, &err), WSYNC_ERR_NOT_FOUND);
    CHECK_EQ_INT(s->get(s->user, "nope", 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err.message, "nope") && (!c->caps->http || strstr(err.message, "404")) &&
                  (!c->where || strstr(err.message, c->where)),
              "%s", err.message);
    CHECK_EQ_INT(s->get(s->user, "nope", 5, 10, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_NOT_FOUND);
    CHECK_EQ_INT(s->get(s->user, "deeper/nope", 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err),
                 WSYNC_ERR_NOT_FOUND);
    CHECK_EQ_INT(s->del(s->user, "nope", &err), WSYNC_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err.message, "nope"), "%s", err.message);
    /* a folder is no object: it fails, unread (NOT_FOUND from nginx,
       Apache, S3 and the directory store, which says it is a folder;
       rclone answers 405) */
    r = s->head(s->user, "deltas", &size, &err);
    CHECK_MSG(r == WSYNC_ERR_NOT_FOUND || r == WSYNC_ERR_IO, "head of a folder: %s: %s", wsync_result_str(r),
              err.message);
    r = s->get(s->user, "deltas", 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err);
    CHECK_MSG(r == WSYNC_ERR_NOT_FOUND || r == WSYNC_ERR_IO, "get of a folder: %s: %s", wsync_result_str(r),
              err.message);
    CHECK_EQ_INT(wb.len, 0);
    conf_end(c, C_MISSING);
}

static void check_bad_key(conf *c)
{
    static const char *bad[] = {"../escape", "/etc/passwd", "a//b", "a/./b", "dir/", "", "back\\slash"};
    wsync_store *s = c->s;
    wsync_error err;
    uint8_t buf[8];
    wsync_buffer wb;
    uint64_t size;
    size_t i;
    conf_begin(c, C_BAD_KEY, "keys the store contract refuses are INVALID_ARGUMENT for put, get, head and del");
    wb.bytes = buf;
    wb.cap = sizeof buf;
    wb.len = 0;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(s->put(s->user, bad[i], "x", 1, &err) == WSYNC_ERR_INVALID_ARGUMENT, "put '%s': %s", bad[i],
                  err.message);
        CHECK_MSG(s->get(s->user, bad[i], 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err) ==
                      WSYNC_ERR_INVALID_ARGUMENT,
                  "get '%s': %s", bad[i], err.message);
        CHECK_MSG(s->head(s->user, bad[i], &size, &err) == WSYNC_ERR_INVALID_ARGUMENT, "head '%s'", bad[i]);
        CHECK_MSG(s->del(s->user, bad[i], &err) == WSYNC_ERR_INVALID_ARGUMENT, "del '%s'", bad[i]);
    }
    conf_end(c, C_BAD_KEY);
}

static void check_overwrite(conf *c)
{
    wsync_store *s = c->s;
    conf_begin(c, C_OVERWRITE, "a put replaces the whole object, longer and shorter (HEAD's way)");
    if (put(s, "HEAD", "{\"step\": 1}", 11) && put(s, "HEAD", "{\"step\": 22}", 12)) is(s, "HEAD", "{\"step\": 22}", 12);
    if (put(s, "HEAD", "{\"step\": 3}", 11)) is(s, "HEAD", "{\"step\": 3}", 11);
    conf_end(c, C_OVERWRITE);
}

/* An empty object (a checkpoint directory's empty file is one under its
   directory anchor). */
static void check_empty(conf *c)
{
    wsync_store *s = c->s;
    wsync_error err;
    uint8_t *all = NULL, buf[8];
    wsync_buffer wb;
    uint64_t size = 7;
    wsync_result r;
    keys k;
    if (!c->caps->empty && (r = s->put(s->user, "e/empty", NULL, 0, &err)) != WSYNC_OK) {
        /* reported, not a failure: the server is known to refuse one */
        conf_na(c, C_EMPTY, CR_LACKS, "(a PUT of 0 bytes fails)");
        printf("  %s: empty: %.300s\n", c->caps->kind, err.message);
        return;
    }
    conf_begin(c, C_EMPTY, "an empty object exists: put, head, get, listed with size 0, del");
    memset(&k, 0, sizeof k);
    if (put(s, "e/empty", NULL, 0)) {
        CHECK_EQ_INT(s->head(s->user, "e/empty", &size, &err), WSYNC_OK);
        CHECK_EQ_U64(size, 0);
        CHECK_MSG(wsync_store_get_all(s, "e/empty", NULL, &all, &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK(all != NULL && size == 0);
        free(all);
        wb.bytes = buf;
        wb.cap = sizeof buf;
        wb.len = 0;
        CHECK_EQ_INT(s->get(s->user, "e/empty", 0, UINT64_MAX, wsync_buffer_sink, &wb, &size, &err), WSYNC_OK);
        CHECK(wb.len == 0 && size == 0);
        CHECK_EQ_INT(s->get(s->user, "e/empty", 1, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err),
                     WSYNC_ERR_OUT_OF_BOUNDS);
        if (lst(c, s, "e/", &k)) CHECK_MSG(k.n == 1 && strcmp(k.k[0], "e/empty") == 0 && k.size[0] == 0, "%d keys", k.n);
        CHECK_MSG(s->del(s->user, "e/empty", &err) == WSYNC_OK, "%s", err.message);
    }
    conf_end(c, C_EMPTY);
}

static void check_list(conf *c)
{
    static const char *deltas[] = {"deltas/step_000001.safetensors", "deltas/step_000002.safetensors",
                                   "deltas/step_000003.safetensors"};
    static const uint64_t dsizes[] = {HELLO_N, 2, 3};
    static const char *all[] = {"HEAD", "anchors/step_000000.safetensors", "deltas/step_000001.safetensors",
                                "deltas/step_000002.safetensors", "deltas/step_000003.safetensors"};
    static const uint64_t asizes[] = {11, 1, HELLO_N, 2, 3};
    wsync_store *s = c->s;
    keys k;
    conf_begin(c, C_LIST, "byte order and sizes; a folder prefix, a partial name, early stop, nothing under a prefix");
    memset(&k, 0, sizeof k);
    if (put(s, "deltas/step_000003.safetensors", "333", 3) && put(s, "deltas/step_000002.safetensors", "22", 2) &&
        put(s, "anchors/step_000000.safetensors", "a", 1)) {
        if (lst(c, s, "deltas/", &k)) KEYS_IS(k, deltas, dsizes);
        if (lst(c, s, "", &k)) KEYS_IS(k, all, asizes);
        if (lst(c, s, "del", &k)) KEYS_IS(k, deltas, dsizes);
        if (lst(c, s, "deltas/step_00000", &k)) KEYS_IS(k, deltas, dsizes);
        k.stop_after = 2;
        if (lst(c, s, "", &k)) CHECK_EQ_INT(k.n, 2);
        k.stop_after = 0;
        /* nothing there: an empty listing, on every store (a missing folder
           is known to be missing) */
        if (lst(c, s, "nodir/deeper/", &k)) CHECK_EQ_INT(k.n, 0);
        if (lst(c, s, "deltas/zzz", &k)) CHECK_EQ_INT(k.n, 0);
    }
    conf_end(c, C_LIST);
}

static void check_order(conf *c)
{
    static const char *want[] = {"l/x-z.bin", "l/x.bin", "l/x/y.bin", "l/x0"};
    wsync_store *s = c->s;
    keys k;
    size_t i;
    conf_begin(c, C_ORDER, "byte order across folders: l/x-z.bin < l/x.bin < l/x/y.bin < l/x0");
    memset(&k, 0, sizeof k);
    for (i = 4; i-- > 0;)
        if (!put(s, want[i], want[i], strlen(want[i]))) break;
    if (lst(c, s, "l/", &k)) KEYS_IS(k, want, NULL);
    if (lst(c, s, "l/x", &k)) KEYS_IS(k, want, NULL);
    conf_end(c, C_ORDER);
}

static void check_dir_anchors(conf *c)
{
    static const char *want[] = {"da/anchors/step_000004/config.json",
                                 "da/anchors/step_000004/model-00001-of-00002.safetensors",
                                 "da/anchors/step_000004/model-00002-of-00002.safetensors"};
    static const char foreign[] = "a foreign chain's shard";
    wsync_store *s = c->s;
    wsync_error err;
    wsync_chain_options co;
    wsync_chain_info ci;
    wsync_publisher *p = NULL;
    wsync_result r;
    uint64_t size;
    keys k;
    size_t i;
    conf_begin(c, C_DIR_ANCHORS, "anchors/step_N/NAME listed under anchors/; without HEAD step N of a foreign chain: a "
                     "publisher refuses, writing nothing");
    memset(&k, 0, sizeof k);
    memset(&co, 0, sizeof co);
    co.prefix = "da";
    for (i = 0; i < 3; i++)
        if (!put(s, want[i], foreign, sizeof foreign - 1)) break;
    if (lst(c, s, "da/anchors/", &k)) KEYS_IS(k, want, NULL);
    memset(&ci, 0, sizeof ci);
    r = wsync_chain_read(s, &co, &ci, &err);
    if (c->caps->listing) {
        CHECK_MSG(r == WSYNC_OK, "chain_read: %s", err.message);
        if (r == WSYNC_OK) {
            CHECK_EQ_U64(ci.head_step, 4);
            CHECK_EQ_U64(ci.anchor_step, 4);
            CHECK_EQ_U64(ci.n_entries, 1);
        }
    } else {
        CHECK_MSG(r == WSYNC_ERR_UNSUPPORTED, "chain_read without a listing: %s: %s", wsync_result_str(r), err.message);
        c->unavail = 1;
    }
    wsync_chain_info_free(&ci);
    r = wsync_publisher_open(s, &co, &p, &err);
    CHECK_MSG(r == (c->caps->listing ? WSYNC_ERR_BAD_HEAD : WSYNC_ERR_UNSUPPORTED), "publisher_open: %s: %s",
              wsync_result_str(r), err.message);
    if (p) wsync_publisher_close(p);
    CHECK_EQ_INT(s->head(s->user, "da/HEAD", &size, &err), WSYNC_ERR_NOT_FOUND);
    for (i = 0; i < 3; i++) is(s, want[i], foreign, sizeof foreign - 1);
    conf_end(c, C_DIR_ANCHORS);
}

static void check_del(conf *c)
{
    static const char *left[] = {"deltas/step_000001.safetensors", "deltas/step_000003.safetensors"};
    wsync_store *s = c->s;
    wsync_error err;
    uint64_t size;
    keys k;
    conf_begin(c, C_DEL, "del removes (head, listing); a second del is NOT_FOUND; a folder emptied lists nothing");
    memset(&k, 0, sizeof k);
    CHECK_MSG(s->del(s->user, "deltas/step_000002.safetensors", &err) == WSYNC_OK, "%s", err.message);
    CHECK_EQ_INT(s->head(s->user, "deltas/step_000002.safetensors", &size, &err), WSYNC_ERR_NOT_FOUND);
    CHECK_EQ_INT(s->del(s->user, "deltas/step_000002.safetensors", &err), WSYNC_ERR_NOT_FOUND);
    if (lst(c, s, "deltas/", &k)) KEYS_IS(k, left, NULL);
    if (put(s, "gone/deep/x", "x", 1)) {
        CHECK_MSG(s->del(s->user, "gone/deep/x", &err) == WSYNC_OK, "%s", err.message);
        if (lst(c, s, "gone/", &k)) CHECK_EQ_INT(k.n, 0);
    }
    conf_end(c, C_DEL);
}

static void check_sink(conf *c)
{
    wsync_store *s = c->s;
    wsync_error err;
    uint8_t buf[3];
    wsync_buffer wb;
    conf_begin(c, C_SINK, "a sink that refuses is WSYNC_ERR_SINK");
    wb.bytes = buf;
    wb.cap = sizeof buf;
    wb.len = 0;
    CHECK_EQ_INT(s->get(s->user, "HEAD", 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_SINK);
    conf_end(c, C_SINK);
}

static void check_odd_keys(conf *c)
{
    static const char *odd[] = {"odd/%41 not decoded twice.bin", "odd/a b%20c+d=e,f", "odd/semi;colon,comma(q)\"",
                                "odd/x..y~z", "odd/\xc3\xbc\xe2\x82\xac.bin", "odd/&amp;'q'"};
    static const char *sorted_all[] = {"odd/%41 not decoded twice.bin", "odd/&amp;'q'", "odd/a b%20c+d=e,f",
                                       "odd/semi;colon,comma(q)\"", "odd/x..y~z", "odd/\xc3\xbc\xe2\x82\xac.bin"};
    static const char *sorted_some[] = {"odd/%41 not decoded twice.bin", "odd/a b%20c+d=e,f",
                                        "odd/semi;colon,comma(q)\"", "odd/x..y~z", "odd/\xc3\xbc\xe2\x82\xac.bin"};
    wsync_store *s = c->s;
    size_t i, n = c->caps->amp_quote ? 6 : 5;
    keys k;
    conf_begin(c, C_ODD_KEYS, c->caps->amp_quote ? "keys that need percent-encoding round-trip and list as themselves"
                                         : "keys that need percent-encoding round-trip and list as themselves "
                                           "(no '&' or '\\'': this server escapes them twice in its listings)");
    memset(&k, 0, sizeof k);
    for (i = 0; i < n; i++)
        if (put(s, odd[i], odd[i], strlen(odd[i]))) is(s, odd[i], odd[i], strlen(odd[i]));
    if (lst(c, s, "odd/", &k)) {
        if (n == 6) KEYS_IS(k, sorted_all, NULL);
        else KEYS_IS(k, sorted_some, NULL);
    }
    conf_end(c, C_ODD_KEYS);
}

#define BIG ((12u << 20) + 4321)

static void check_big(conf *c)
{
    wsync_store *s = c->s;
    uint8_t *big = pattern(BIG, 7);
    wsync_http_stats st0, st1;
    int http = wsync_store_http_stats(s, &st0);
    conf_begin(c, C_BIG, "a 12 MiB object (parallel ranged GETs over HTTP, multipart over S3) round-trips, is "
                      "replaced whole, then by a small one");
    if (put(s, "anchors/big", big, BIG) && is(s, "anchors/big", big, BIG) && http) {
        wsync_store_http_stats(s, &st1);
        CHECK_MSG(st1.parallel_gets > st0.parallel_gets, "the download went parallel: %llu",
                  (unsigned long long)(st1.parallel_gets - st0.parallel_gets));
        if (c->caps->body_limit) /* one PUT over the limit, refused, sent again in parts */
            CHECK_MSG(st1.smaller_parts > st0.smaller_parts, "uploads sent again in smaller parts: %llu",
                      (unsigned long long)(st1.smaller_parts - st0.smaller_parts));
    }
    big[0] ^= 0xFF;
    big[BIG / 2] ^= 0xFF;
    big[BIG - 1] ^= 0xFF;
    if (put(s, "anchors/big", big, BIG)) is(s, "anchors/big", big, BIG);
    if (put(s, "anchors/big", big + 100, 1000)) is(s, "anchors/big", big + 100, 1000);
    conf_end(c, C_BIG);
    free(big);
}

/* A reader during overwrites: every get is one whole version. */
#define ATOM_A (96u << 10)
#define ATOM_B (64u << 10)
#define ATOM_PUTS 16
typedef struct atom {
    const wsync_store *s;
    volatile int done, torn, errors;
    int reads, min_reads;
    char why[sizeof(((wsync_error *)0)->message) + 16];
} atom;

typedef struct grow {
    uint8_t *p;
    size_t n, cap;
} grow;

static int grow_sink(void *user, const void *b, size_t n)
{
    grow *g = (grow *)user;
    if (g->n + n > g->cap) {
        size_t cap = g->cap ? g->cap : 65536;
        uint8_t *np;
        while (cap < g->n + n) cap *= 2;
        if (!(np = (uint8_t *)realloc(g->p, cap))) return 1;
        g->p = np;
        g->cap = cap;
    }
    memcpy(g->p + g->n, b, n);
    g->n += n;
    return 0;
}

static void *atom_reader(void *arg)
{
    atom *a = (atom *)arg;
    grow g;
    wsync_error err;
    memset(&g, 0, sizeof g);
    while (!a->done || a->reads < a->min_reads) {
        size_t i;
        uint8_t want;
        g.n = 0;
        if (a->s->get(a->s->user, "atomic", 0, UINT64_MAX, grow_sink, &g, NULL, &err) != WSYNC_OK) {
            if (!a->errors++) snprintf(a->why, sizeof a->why, "get: %s", err.message);
            if (a->errors > 3) break;
            continue;
        }
        a->reads++;
        want = g.n == ATOM_A ? 'A' : 'B';
        if (g.n != ATOM_A && g.n != ATOM_B) {
            if (!a->torn++) snprintf(a->why, sizeof a->why, "read %lu bytes", (unsigned long)g.n);
            continue;
        }
        for (i = 0; i < g.n && g.p[i] == want; i++) {}
        if (i < g.n && !a->torn++)
            snprintf(a->why, sizeof a->why, "%lu bytes of '%c' then '%c' at %lu", (unsigned long)g.n, want, g.p[i],
                     (unsigned long)i);
    }
    free(g.p);
    return NULL;
}

static void check_atomic(conf *c)
{
    wsync_store *s = c->s;
    uint8_t *a = (uint8_t *)malloc(ATOM_A), *b = (uint8_t *)malloc(ATOM_B);
    atom at;
    pthread_t th;
    int i;
    if (c->caps->atomic) conf_begin(c, C_ATOMIC, "a reader during 16 overwrites sees one whole version each time");
    memset(a, 'A', ATOM_A);
    memset(b, 'B', ATOM_B);
    memset(&at, 0, sizeof at);
    at.s = s;
    at.min_reads = c->caps->atomic ? 4 : 0;
    if (put(s, "atomic", a, ATOM_A) && pthread_create(&th, NULL, atom_reader, &at) == 0) {
        double t0 = now_s();
        /* where the server is known not to be atomic: until the first torn
           or failed read, for a second at most (a torn body can stall) */
        for (i = 0; i < ATOM_PUTS && (c->caps->atomic || (!(at.torn || at.errors) && now_s() - t0 < 1.0)); i++)
            if (!put(s, "atomic", i % 2 ? a : b, i % 2 ? ATOM_A : ATOM_B)) break;
        at.done = 1;
        pthread_join(th, NULL);
        if (c->caps->atomic) {
            CHECK_MSG(at.torn == 0 && at.errors == 0, "%d torn and %d failed of %d reads: %s", at.torn, at.errors,
                      at.reads, at.why);
            CHECK_MSG(at.reads >= 4, "%d reads", at.reads);
        } else {
            char note[96];
            snprintf(note, sizeof note, "(%d of %d reads torn, %d failed)", at.torn, at.reads, at.errors);
            conf_na(c, C_ATOMIC, CR_LACKS, note);
            c->secs[C_ATOMIC] = now_s() - t0;
            if (at.torn || at.errors) printf("  %s: atomic: %.200s\n", c->caps->kind, at.why);
        }
    }
    free(a);
    free(b);
    if (c->caps->atomic) conf_end(c, C_ATOMIC);
}

/* ======================================================================
   The chain
   ====================================================================== */

#define NT 3
static const sm_def g_defs[NT] = {{"model.embed_tokens.weight", 2, {64, 96}, 0},
                                  {"lm_head.weight", 2, {64, 96}, 0},
                                  {"model.norm.weight", 2, {96, 1}, 0}};
static sm_model g_model; /* of g_defs (main makes it) */

/* Step s: ~1.5% of the elements move by one bf16 step from step s-1. */
static void gen_step(uint16_t *img, uint64_t step) { sm_scatter(img, g_model.total, 15, step); }

/* Syncs to `to` and checks the image against the generator. */
static int sync_exact(sm_sub *u, uint64_t to, const char *what, wsync_sync_stats *ss_out)
{
    return sm_sync_exact(u, to, what, ss_out, gen_step);
}

static int publish(wsync_publisher *p, uint64_t step, wsync_error *err)
{
    return sm_publish(p, &g_model, gen_step, step, err);
}

#define STEPS 11
static void check_chain(conf *c)
{
    wsync_store *s = c->s, m;
    wsync_store_options mo;
    wsync_chain_options co;
    wsync_publisher *p = NULL, *pm = NULL;
    wsync_error err;
    wsync_chain_info info;
    sm_sub *f = NULL, *b = NULL;
    keys got, want;
    uint64_t step;
    int ok = 1;
    conf_begin(c, C_CHAIN, "11 steps (anchors every 3, retain 4): the store lists what a memory store lists after each "
                      "(where it lists); a follower, subscribers from scratch and mid-chain bit-exact; a corrupt delta "
                      "routed around");
    memset(&co, 0, sizeof co);
    memset(&mo, 0, sizeof mo);
    memset(&got, 0, sizeof got);
    memset(&want, 0, sizeof want);
    co.prefix = "run";
    co.anchor_every = 3;
    co.retain = 4;
    CHECK_EQ_INT(wsync_store_mem_open(&mo, &m, &err), WSYNC_OK);
    CHECK_MSG(wsync_publisher_open(s, &co, &p, &err) == WSYNC_OK, "publisher: %s", err.message);
    CHECK_MSG(wsync_publisher_open(&m, &co, &pm, &err) == WSYNC_OK, "publisher (memory): %s", err.message);
    if (p) f = sm_sub_new(s, &g_model, &co);
    for (step = 0; step < STEPS && ok && p && pm && f; step++) {
        ok = publish(p, step, &err);
        CHECK_MSG(ok, "publish %llu: %s", (unsigned long long)step, err.message);
        ok = ok && publish(pm, step, &err);
        if (!ok) break;
        if (c->caps->listing && lst(c, s, "run/", &got) && lst(c, &m, "run/", &want)) {
            int i, same = got.n == want.n;
            for (i = 0; same && i < got.n; i++)
                same = strcmp(got.k[i], want.k[i]) == 0 && got.size[i] == want.size[i];
            if (!same) {
                printf("  after step %llu:\n", (unsigned long long)step);
                keys_print("store", &got);
                keys_print("memory", &want);
                CHECK_MSG(0, "%s", "the store does not hold what the chain's retention leaves");
                ok = 0;
            }
        }
        if (ok && step % 2 == 1) ok = sync_exact(f, WSYNC_STEP_LATEST, "follower", NULL);
    }
    if (ok && p) {
        CHECK_MSG(wsync_chain_read(s, &co, &info, &err) == WSYNC_OK, "chain_read: %s", err.message);
        if (err.code == WSYNC_OK) {
            CHECK_EQ_U64(info.head_step, STEPS - 1);
            CHECK_EQ_U64(info.anchor_step, 9);
            wsync_chain_info_free(&info);
        }
        sync_exact(f, WSYNC_STEP_LATEST, "follower at the end", NULL);
        b = sm_sub_new(s, &g_model, &co);
        sync_exact(b, WSYNC_STEP_LATEST, "from scratch", NULL);
        sm_sub_free(b);
        b = sm_sub_new(s, &g_model, &co);
        if (b) { /* retention kept steps 7-10: from 4, anchor 9 then delta 10 */
            gen_step(b->img, 4);
            wsync_subscriber_set_step(b->s, 4);
            sync_exact(b, STEPS - 1, "from 4 to 10", NULL);
        }
        sm_sub_free(b);
        /* delta 8 corrupted in the store: from 7, the way round is anchor 9 */
        b = sm_sub_new(s, &g_model, &co);
        if (b) {
            uint8_t *d = NULL;
            uint64_t n = 0;
            wsync_sync_stats ss;
            CHECK_MSG(wsync_store_get_all(s, "run/deltas/step_000008.safetensors", NULL, &d, &n, &err) == WSYNC_OK,
                      "%s", err.message);
            if (d && n > 8) {
                d[n - 5] ^= 0x5A;
                put(s, "run/deltas/step_000008.safetensors", d, (size_t)n);
                gen_step(b->img, 7);
                wsync_subscriber_set_step(b->s, 7);
                memset(&ss, 0, sizeof ss);
                if (sync_exact(b, WSYNC_STEP_LATEST, "from 7 past a corrupt delta 8", &ss))
                    CHECK_MSG(ss.rejected >= 1, "path %s, rejected %u", ss.path, ss.rejected);
            }
            free(d);
        }
        sm_sub_free(b);
    }
    sm_sub_free(f);
    if (p) wsync_publisher_close(p);
    if (pm) wsync_publisher_close(pm);
    wsync_store_close(&m);
    conf_end(c, C_CHAIN);
}

/* After check_chain: HEAD gone, the chain read from the listing. */
static void check_headless(conf *c)
{
    wsync_store *s = c->s;
    wsync_chain_options co;
    wsync_chain_info info;
    wsync_publisher *p = NULL;
    wsync_error err;
    wsync_result r;
    uint64_t size;
    sm_sub *b;
    conf_begin(c, C_HEADLESS, "without HEAD the chain is read from the listing (head step, a subscriber bit-exact); a "
                      "publisher refuses it");
    memset(&co, 0, sizeof co);
    co.prefix = "run";
    CHECK_MSG(s->del(s->user, "run/HEAD", &err) == WSYNC_OK, "del HEAD: %s", err.message);
    memset(&info, 0, sizeof info);
    r = wsync_chain_read(s, &co, &info, &err);
    if (c->caps->listing) {
        CHECK_MSG(r == WSYNC_OK, "chain_read: %s", err.message);
        if (r == WSYNC_OK) CHECK_EQ_U64(info.head_step, STEPS - 1);
        b = sm_sub_new(s, &g_model, &co);
        sync_exact(b, WSYNC_STEP_LATEST, "HEAD-less, from scratch", NULL);
        sm_sub_free(b);
    } else {
        CHECK_MSG(r == WSYNC_ERR_UNSUPPORTED && !strstr(err.message, "credentials"),
                  "chain_read without a listing: %s: %s", wsync_result_str(r), err.message);
        c->unavail = 1;
    }
    wsync_chain_info_free(&info);
    r = wsync_publisher_open(s, &co, &p, &err);
    CHECK_MSG(r == (c->caps->listing ? WSYNC_ERR_BAD_HEAD : WSYNC_ERR_UNSUPPORTED), "publisher_open: %s: %s",
              wsync_result_str(r), err.message);
    if (p) wsync_publisher_close(p);
    CHECK_EQ_INT(s->head(s->user, "run/HEAD", &size, &err), WSYNC_ERR_NOT_FOUND);
    conf_end(c, C_HEADLESS);
}

static void check_fresh(conf *c)
{
    wsync_store *s = c->s;
    wsync_chain_options co;
    wsync_chain_info info;
    wsync_publisher *p = NULL;
    wsync_error err;
    wsync_result r;
    uint64_t size = 0;
    keys k;
    conf_begin(c, C_FRESH, "a prefix never written lists nothing, is an empty chain (NOT_FOUND), and takes a chain");
    memset(&co, 0, sizeof co);
    memset(&k, 0, sizeof k);
    co.prefix = "fresh/a/b";
    if (lst(c, s, "fresh/a/b/anchors/", &k)) CHECK_EQ_INT(k.n, 0);
    if (lst(c, s, "fresh/", &k)) CHECK_EQ_INT(k.n, 0);
    memset(&info, 0, sizeof info);
    r = wsync_chain_read(s, &co, &info, &err);
    CHECK_MSG(r == WSYNC_ERR_NOT_FOUND, "chain_read: %s: %s", wsync_result_str(r), err.message);
    wsync_chain_info_free(&info);
    CHECK_MSG(wsync_publisher_open(s, &co, &p, &err) == WSYNC_OK, "publisher: %s", err.message);
    if (p) {
        CHECK_MSG(publish(p, 0, &err), "publish: %s", err.message);
        wsync_publisher_close(p);
        CHECK_MSG(s->head(s->user, "fresh/a/b/HEAD", &size, &err) == WSYNC_OK && size > 0, "HEAD: %s", err.message);
    }
    conf_end(c, C_FRESH);
}

static void check_no_store(conf *c)
{
    const wsync_store *s = c->missing;
    wsync_error err;
    uint8_t buf[8];
    wsync_buffer wb;
    uint64_t size;
    keys k;
    wsync_result r;
    if (!s) {
        conf_na(c, C_NO_STORE, CR_NA, "");
        return;
    }
    conf_begin(c, C_NO_STORE, "a store that is not there is NO_STORE for list, get and head, never an empty one");
    wb.bytes = buf;
    wb.cap = sizeof buf;
    wb.len = 0;
    memset(&k, 0, sizeof k);
    r = s->list(s->user, "", keys_add, &k, &err);
    CHECK_MSG(r == WSYNC_ERR_NO_STORE, "list: %s: %s", wsync_result_str(r), err.message);
    r = s->get(s->user, "HEAD", 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err);
    CHECK_MSG(r == WSYNC_ERR_NO_STORE, "get: %s: %s", wsync_result_str(r), err.message);
    r = s->head(s->user, "HEAD", &size, &err);
    CHECK_MSG(r == WSYNC_ERR_NO_STORE || r == WSYNC_ERR_NOT_FOUND, "head: %s: %s", wsync_result_str(r), err.message);
    conf_end(c, C_NO_STORE);
}

/* ======================================================================
   One store
   ====================================================================== */

static void conf_run(const conf_caps *caps, wsync_store *s, const wsync_store *missing, const char *where)
{
    conf c;
    int i, n_ok = 0, n_un = 0, n_na = 0, n_lack = 0, n_fail = 0;
    char line[1024];
    size_t used;
    memset(&c, 0, sizeof c);
    c.caps = caps;
    c.s = s;
    c.missing = missing;
    c.where = where;
    check_put_get(&c);
    if (c.result[C_PUT_GET] != CR_OK) {
        printf("conformance %s: stopped: the store does not take and give back an object\n", caps->kind);
        return;
    }
    check_range(&c);
    check_missing(&c);
    check_bad_key(&c);
    check_overwrite(&c);
    check_list(&c);
    check_order(&c);
    check_dir_anchors(&c);
    check_del(&c);
    check_empty(&c);
    check_sink(&c);
    check_odd_keys(&c);
    check_big(&c);
    check_atomic(&c);
    check_chain(&c);
    check_headless(&c);
    check_fresh(&c);
    check_no_store(&c);
    used = (size_t)snprintf(line, sizeof line, "conformance %s:", caps->kind);
    for (i = 0; g_check_names[i]; i++) {
        const char *w = c.result[i] == CR_OK       ? "ok"
                        : c.result[i] == CR_UNAVAIL ? "listing unavailable"
                        : c.result[i] == CR_NA      ? "n/a"
                        : c.result[i] == CR_LACKS   ? "lacks"
                        : c.result[i] == CR_NONE    ? "not run"
                                                    : "FAILED";
        n_ok += c.result[i] == CR_OK;
        n_un += c.result[i] == CR_UNAVAIL;
        n_na += c.result[i] == CR_NA;
        n_lack += c.result[i] == CR_LACKS;
        n_fail += c.result[i] == CR_FAIL || c.result[i] == CR_NONE;
        if (used < sizeof line)
            used += (size_t)snprintf(line + used, sizeof line - used, "%s %s %s%s%s", i ? "," : "", g_check_names[i],
                                     w, c.note[i][0] ? " " : "", c.note[i]);
        if (used < sizeof line && c.secs[i] >= 0.5) /* the slow ones: where a server's time goes */
            used += (size_t)snprintf(line + used, sizeof line - used, " (%.1f s)", c.secs[i]);
    }
    printf("%s (%d ok, %d listing unavailable, %d n/a, %d lacking, %d failed)\n", line, n_ok, n_un, n_na, n_lack,
           n_fail);
}

static int rm_fn(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int run_memory(void)
{
    wsync_store s;
    wsync_store_options mo;
    wsync_error err;
    memset(&mo, 0, sizeof mo);
    if (wsync_store_mem_open(&mo, &s, &err) != WSYNC_OK) {
        printf("FAIL memory store: %s\n", err.message);
        return 1;
    }
    conf_run(&g_kinds[0], &s, NULL, NULL);
    wsync_store_close(&s);
    return 0;
}

static int run_dir(void)
{
    char root[] = "/tmp/wsync-conformance.XXXXXX", missing[128];
    wsync_store s, m;
    wsync_store_options o;
    wsync_error err;
    int opened_m;
    if (!mkdtemp(root)) {
        printf("FAIL dir store: mkdtemp\n");
        return 1;
    }
    memset(&o, 0, sizeof o);
    o.no_fsync = 1;
    if (wsync_store_dir_open(root, &o, &s, &err) != WSYNC_OK) {
        printf("FAIL dir store: %s\n", err.message);
        rmdir(root);
        return 1;
    }
    snprintf(missing, sizeof missing, "%s/not/there", root);
    o.flags = WSYNC_STORE_NO_CREATE;
    opened_m = wsync_store_dir_open(missing, &o, &m, &err) == WSYNC_OK;
    conf_run(&g_kinds[1], &s, opened_m ? &m : NULL, root);
    wsync_store_close(&s);
    if (opened_m) wsync_store_close(&m);
    nftw(root, rm_fn, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* KIND,URL[,S3_ENDPOINT] */
static int run_server(const char *arg)
{
    char spec[1024], missing[600];
    char *url, *endpoint;
    const conf_caps *caps = NULL;
    wsync_store s, m;
    wsync_store_url_options o;
    wsync_error err;
    size_t i;
    int opened_m = 0;
    snprintf(spec, sizeof spec, "%s", arg);
    if (!(url = strchr(spec, ','))) {
        printf("FAIL '%s': not KIND,URL[,S3_ENDPOINT]\n", arg);
        return 1;
    }
    *url++ = 0;
    if ((endpoint = strchr(url, ',')) != NULL) *endpoint++ = 0;
    for (i = 0; i < sizeof g_kinds / sizeof g_kinds[0]; i++)
        if (strcmp(g_kinds[i].kind, spec) == 0) caps = &g_kinds[i];
    if (!caps) {
        printf("FAIL '%s': an unknown kind of store\n", spec);
        return 1;
    }
    memset(&o, 0, sizeof o);
    o.http.max_attempts = 3;
    o.http.backoff_ms = 20;
    o.http.low_speed_seconds = 2; /* a body that stalls (s3rver's, replaced under a reader) is given up sooner */
    o.http.parallel_threshold = 4u << 20;
    o.http.part_size = 3u << 20;
    o.s3.endpoint = endpoint;
    if (!caps->body_limit) { /* else one PUT, refused (413), then parts */
        o.s3.multipart_threshold = 6u << 20;
        o.s3.multipart_part_size = 5u << 20;
    }
    if (wsync_store_open_url(url, &o, &s, &err) != WSYNC_OK) {
        TEST_BEGIN(spec);
        CHECK_MSG(0, "open %s: %s", url, err.message);
        TEST_END();
        return 1;
    }
    if (caps->s3) {
        const char *p = strchr(url + 5, '/');
        snprintf(missing, sizeof missing, "s3://wsync-no-such-bucket%s", p ? p : "");
        opened_m = wsync_store_open_url(missing, &o, &m, &err) == WSYNC_OK;
    }
    conf_run(caps, &s, opened_m ? &m : NULL, caps->s3 ? endpoint : url);
    wsync_store_close(&s);
    if (opened_m) wsync_store_close(&m);
    return 0;
}

int main(int argc, char **argv)
{
    int i;
    g_model = sm_model_make(g_defs, NT);
    if (argc < 2) {
        run_memory();
        run_dir();
    }
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "memory") == 0) run_memory();
        else if (strcmp(argv[i], "dir") == 0) run_dir();
        else run_server(argv[i]);
    }
    return check_summary();
}
