/* Limits that a hostile store or file must not get past: the directory
   store's walk (symbolic links, the prefix), a store that sends more bytes
   than HEAD or a listing promised, and a delta's block size choosing the
   decoder's memory. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a counting allocator: live bytes, their peak, calls ---- */

typedef struct counting {
    size_t live, peak, calls;
} counting;

static void *count_alloc(void *user, size_t n)
{
    counting *c = (counting *)user;
    size_t *p = (size_t *)malloc(n + sizeof(size_t) * 2);
    if (!p) return NULL;
    p[0] = n;
    c->live += n;
    if (c->live > c->peak) c->peak = c->live;
    c->calls++;
    return p + 2;
}

static void count_free(void *user, void *ptr)
{
    counting *c = (counting *)user;
    size_t *p = (size_t *)ptr;
    if (!p) return;
    p -= 2;
    c->live -= p[0];
    free(p);
}

static wsync_allocator counting_allocator(counting *c)
{
    wsync_allocator a;
    memset(c, 0, sizeof *c);
    a.alloc = count_alloc;
    a.free = count_free;
    a.user = c;
    return a;
}

/* ---- listing ---- */

typedef struct collected {
    char keys[64][128];
    uint64_t sizes[64];
    int n;
} collected;

static int collect(void *user, const char *key, uint64_t size)
{
    collected *c = (collected *)user;
    if (c->n < 64) {
        snprintf(c->keys[c->n], sizeof c->keys[c->n], "%s", key);
        c->sizes[c->n] = size;
    }
    c->n++;
    return 0;
}

static void rm_rf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", dir);
}

static int put_str(wsync_store *s, const char *key, const char *text)
{
    return s->put(s->user, key, text, strlen(text), NULL) == WSYNC_OK;
}

static int link_at(const char *root, const char *target, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, name);
    return symlink(target, path) == 0;
}

/* Lists prefix into c (reset first). */
static wsync_result list_into(wsync_store *s, const char *prefix, collected *c, wsync_error *err)
{
    memset(c, 0, sizeof *c);
    return s->list(s->user, prefix, collect, c, err);
}

static void test_dir_links(void)
{
    char root[] = "/tmp/wsync-limits.XXXXXX";
    wsync_store s;
    wsync_store_options so;
    wsync_error err;
    collected c;
    static const char *want[] = {"a/b/flink", "a/b/x", "a/b/xy/z", "a/c/y", "top"};
    int i;
    TEST_BEGIN("dir store: links to '.' (two) and to '/' are not walked; the listing is the real objects");
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;
    CHECK(mkdtemp(root) != NULL);
    CHECK_EQ_INT(wsync_store_dir_open(root, &so, &s, &err), WSYNC_OK);
    CHECK(put_str(&s, "a/b/x", "12345"));
    CHECK(put_str(&s, "a/b/xy/z", "1"));
    CHECK(put_str(&s, "a/c/y", "12"));
    CHECK(put_str(&s, "top", "123"));
    CHECK(link_at(root, ".", "loop"));
    CHECK(link_at(root, ".", "a/loop"));
    CHECK(link_at(root, "/", "slash"));
    CHECK(link_at(root, "x", "a/b/flink"));    /* a regular file inside: listed */
    CHECK(link_at(root, "nowhere", "a/dangling"));
    CHECK_EQ_INT(list_into(&s, "", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 5);
    for (i = 0; i < 5 && i < c.n; i++) CHECK_EQ_STR(c.keys[i], want[i]);
    CHECK_EQ_U64(c.sizes[0], 5); /* the link's target's size */
    TEST_END();

    TEST_BEGIN("dir store: a prefix through a directory link lists nothing");
    CHECK_EQ_INT(list_into(&s, "slash/", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 0);
    CHECK_EQ_INT(list_into(&s, "loop/a/", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 0);
    CHECK_EQ_INT(list_into(&s, "../", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 0);
    CHECK_EQ_INT(list_into(&s, "a/../a/", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 0);
    CHECK_EQ_INT(list_into(&s, "top/", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 0);
    CHECK_EQ_INT(list_into(&s, "a/nothing/", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 0);
    TEST_END();

    TEST_BEGIN("dir store: prefixes ending inside a name and at a '/'");
    CHECK_EQ_INT(list_into(&s, "a/b/x", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 2);
    if (c.n == 2) {
        CHECK_EQ_STR(c.keys[0], "a/b/x");
        CHECK_EQ_STR(c.keys[1], "a/b/xy/z");
    }
    CHECK_EQ_INT(list_into(&s, "a/b/", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 3);
    CHECK_EQ_INT(list_into(&s, "a/", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 4);
    CHECK_EQ_INT(list_into(&s, "t", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 1);
    CHECK_EQ_INT(list_into(&s, "a/b/xy/z", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 1);
    TEST_END();
    wsync_store_close(&s);
    rm_rf(root);
}

/* A prefix's listing does not walk its siblings: counted by the keys the
   walk allocates (one each) with 300 objects next to the prefix. */
static void test_dir_prefix_walk(void)
{
    char root[] = "/tmp/wsync-limits.XXXXXX";
    wsync_store s;
    wsync_store_options so;
    wsync_error err;
    collected c;
    counting cnt;
    size_t before;
    int i;
    TEST_BEGIN("dir store: listing 'a/b/' reads only a/b (300 objects in a sibling are not walked)");
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;
    so.allocator = counting_allocator(&cnt);
    CHECK(mkdtemp(root) != NULL);
    CHECK_EQ_INT(wsync_store_dir_open(root, &so, &s, &err), WSYNC_OK);
    CHECK(put_str(&s, "a/b/one", "1"));
    CHECK(put_str(&s, "a/b/two", "2"));
    for (i = 0; i < 300; i++) {
        char key[64];
        snprintf(key, sizeof key, "a/sibling/k%03d", i);
        CHECK(put_str(&s, key, "x"));
    }
    before = cnt.calls;
    CHECK_EQ_INT(list_into(&s, "a/b/", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 2);
    CHECK_MSG(cnt.calls - before < 10, "%lu allocations for a listing of 2 keys", (unsigned long)(cnt.calls - before));
    before = cnt.calls;
    CHECK_EQ_INT(list_into(&s, "a/b", &c, &err), WSYNC_OK); /* "a/b" also matches "a/bx", not "a/sibling" */
    CHECK_EQ_INT(c.n, 2);
    CHECK_MSG(cnt.calls - before < 10, "%lu allocations for a listing of 2 keys", (unsigned long)(cnt.calls - before));
    CHECK_EQ_INT(list_into(&s, "a/", &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 302);
    TEST_END();
    wsync_store_close(&s);
    CHECK_EQ_INT(cnt.live, 0);
    rm_rf(root);
}


/* ---- a delta's block size ---- */

#define BL_N ((size_t)1 << 22) /* elements of the one BF16 tensor */

typedef struct bytes {
    uint8_t *p;
    size_t len;
} bytes;

static int bytes_sink(void *user, const void *p, size_t n)
{
    bytes *b = (bytes *)user;
    uint8_t *q = (uint8_t *)realloc(b->p, b->len + n + 1);
    if (!q) return -1;
    memcpy(q + b->len, p, n);
    b->p = q;
    b->len += n;
    return 0;
}

static void bl_tensor(wsync_tensor *t, const uint64_t *shape, void *data)
{
    memset(t, 0, sizeof *t);
    t->name = "t";
    t->dtype = WSYNC_DTYPE_BF16;
    t->rank = 1;
    t->shape = shape;
    t->data = data;
    t->nbytes = BL_N * 2;
}

/* The base (bf16 values near 1) and the next step, changed at 200 places in
   the first 2^20 elements only. */
static void bl_models(uint16_t *base, uint16_t *next)
{
    size_t i;
    uint64_t s = 7;
    for (i = 0; i < BL_N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        base[i] = next[i] = (uint16_t)(0x3F00 + (s >> 57));
    }
    for (i = 0; i < 200; i++) next[i * 5000 + 3] = (uint16_t)(next[i * 5000 + 3] + 1);
}

/* d (one stream "t" in blocks of 2^20, changes in the first block only)
   rewritten to declare blocks of 2^24: the same single block of changes
   and a table of one entry. Every field but the block size stays valid. */
static bytes bl_declare_24(const bytes *d)
{
    wsync_st_file f;
    const wsync_st_tensor *t;
    wsync_st_tensor_desc td;
    bytes out, s;
    uint64_t shape[1];
    size_t fixed, b0;
    memset(&out, 0, sizeof out);
    if (wsync_st_parse(d->p, d->len, NULL, &f, NULL) != WSYNC_OK) return out;
    t = wsync_st_find(&f, "t");
    fixed = 8 + 8 + 24 + (t->data[4] == 1 ? 0 : 8); /* rank 1; coders 2 and 3 add the class rule */
    b0 = (size_t)t->data[fixed] | (size_t)t->data[fixed + 1] << 8 | (size_t)t->data[fixed + 2] << 16 |
         (size_t)t->data[fixed + 3] << 24;
    s.len = fixed + 4 + b0;
    s.p = (uint8_t *)malloc(s.len);
    memcpy(s.p, t->data, fixed + 4);
    s.p[7] = 24;
    memcpy(s.p + fixed + 4, t->data + fixed + 4 * 4, b0); /* after the four entries of 2^22 / 2^20 */
    memset(&td, 0, sizeof td);
    shape[0] = s.len;
    td.name = "t";
    td.dtype = WSYNC_DTYPE_U8;
    td.rank = 1;
    td.shape = shape;
    td.data = s.p;
    td.nbytes = s.len;
    if (wsync_st_write(&td, 1, f.metadata, f.n_metadata, bytes_sink, &out, NULL, NULL) != WSYNC_OK) out.len = 0;
    free(s.p);
    wsync_st_free(&f);
    return out;
}

static void test_block_size(void)
{
    uint16_t *base = (uint16_t *)malloc(BL_N * 2), *next = (uint16_t *)malloc(BL_N * 2),
             *work = (uint16_t *)malloc(BL_N * 2);
    uint64_t shape[1];
    wsync_tensor tb, tn, tw;
    int e;
    shape[0] = BL_N;
    bl_models(base, next);
    bl_tensor(&tb, shape, base);
    bl_tensor(&tn, shape, next);
    bl_tensor(&tw, shape, work);
    for (e = 0; e < 2; e++) {
        wsync_encoding enc = e ? WSYNC_ENCODING_PACKED_MAX : WSYNC_ENCODING_PACKED;
        wsync_delta_options o;
        wsync_error err;
        wsync_delta_stats ds;
        counting cnt;
        bytes d, big;
        unsigned threads;
        char name[160];
        memset(&o, 0, sizeof o);
        memset(&d, 0, sizeof d);
        o.encoding = enc;
        o.block_log2 = 21;
        snprintf(name, sizeof name, "%s: the encoder refuses block_log2 21 (above WSYNC_DELTA_MAX_BLOCK_LOG2)",
                 wsync_encoding_name(enc));
        TEST_BEGIN(name);
        CHECK_EQ_INT(wsync_delta_encode(&tb, &tn, 1, &o, bytes_sink, &d, NULL, &err), WSYNC_ERR_INVALID_ARGUMENT);
        CHECK(strstr(err.message, "block_log2 21") != NULL);
        TEST_END();
        free(d.p);
        memset(&d, 0, sizeof d);
        o.block_log2 = 20;
        CHECK_EQ_INT(wsync_delta_encode(&tb, &tn, 1, &o, bytes_sink, &d, NULL, &err), WSYNC_OK);
        for (threads = 1; threads <= 4; threads *= 4) {
            snprintf(name, sizeof name, "%s: blocks of 2^20, %u thread(s): the apply's peak stays under %u MiB",
                     wsync_encoding_name(enc), threads, 20 * threads);
            TEST_BEGIN(name);
            memcpy(work, base, BL_N * 2);
            o.allocator = counting_allocator(&cnt);
            o.threads = threads;
            CHECK_MSG(wsync_delta_apply(d.p, d.len, &tw, 1, &o, NULL, &err) == WSYNC_OK, "%s", err.message);
            CHECK(memcmp(work, next, BL_N * 2) == 0);
            CHECK_MSG(cnt.peak < ((size_t)20 << 20) * threads, "peak %lu KiB", (unsigned long)(cnt.peak >> 10));
            CHECK_EQ_U64(cnt.live, 0);
            TEST_END();
        }
        big = bl_declare_24(&d);
        snprintf(name, sizeof name, "%s: a %lu-byte delta declaring blocks of 2^24 is refused before any scratch",
                 wsync_encoding_name(enc), (unsigned long)big.len);
        TEST_BEGIN(name);
        CHECK(big.len > 0 && big.len < d.len);
        memcpy(work, base, BL_N * 2);
        o.allocator = counting_allocator(&cnt);
        o.threads = 16;
        CHECK_EQ_INT(wsync_delta_apply(big.p, big.len, &tw, 1, &o, NULL, &err), WSYNC_ERR_INVALID_HEADER);
        CHECK_MSG(strstr(err.message, "block_log2 24") != NULL, "%s", err.message);
        CHECK_MSG(cnt.peak < ((size_t)1 << 20), "peak %lu KiB", (unsigned long)(cnt.peak >> 10));
        CHECK(memcmp(work, base, BL_N * 2) == 0);
        CHECK_MSG(wsync_delta_info(big.p, big.len, &ds, &err) == WSYNC_OK, "%s", err.message); /* the container is fine */
        TEST_END();
        free(big.p);
        free(d.p);
    }
    free(base);
    free(next);
    free(work);
}

/* ---- a store that sends more than it promised ---- */

/* Lists and heads "obj" at `promised` bytes but get sends `actual` bytes
   from offset 0 in 64 KiB pieces whatever range was asked for (a server
   ignoring Range and Content-Length), until the sink refuses one. */
typedef struct liar {
    uint64_t promised, actual, sent;
} liar;

static wsync_result liar_get(void *user, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                             void *sink_user, uint64_t *size, wsync_error *err)
{
    static uint8_t piece[65536];
    liar *l = (liar *)user;
    (void)key;
    (void)offset;
    (void)len;
    if (size) *size = l->promised;
    while (l->sent < l->actual) {
        size_t n = l->actual - l->sent < sizeof piece ? (size_t)(l->actual - l->sent) : sizeof piece;
        if (sink(sink_user, piece, n) != 0) {
            if (err) snprintf(err->message, sizeof err->message, "%s", "the sink failed");
            return WSYNC_ERR_SINK;
        }
        l->sent += n;
    }
    return WSYNC_OK;
}

static wsync_result liar_head(void *user, const char *key, uint64_t *size, wsync_error *err)
{
    (void)key;
    (void)err;
    *size = ((liar *)user)->promised;
    return WSYNC_OK;
}

static void test_capped(void)
{
    liar l;
    wsync_store s;
    wsync_error err;
    counting cnt;
    wsync_allocator a = counting_allocator(&cnt);
    uint8_t *bytes = NULL;
    uint64_t size = 0;
    memset(&s, 0, sizeof s);
    s.user = &l;
    s.get = liar_get;
    s.head = liar_head;

    TEST_BEGIN("get_capped (exact): promised 100 bytes, sends 1.5 GB: stopped at the first piece, clear error");
    l.promised = 100;
    l.actual = (uint64_t)1536 << 20;
    l.sent = 0;
    CHECK_EQ_INT(wsync_store_get_capped(&s, "deltas/obj", 100, WSYNC_STORE_GET_EXACT, &a, &bytes, &size, &err),
                 WSYNC_ERR_LIMIT);
    CHECK(bytes == NULL);
    CHECK_MSG(l.sent == 0, "%llu bytes taken", (unsigned long long)l.sent);
    CHECK_MSG(strstr(err.message, "deltas/obj") && strstr(err.message, "100"), "%s", err.message);
    CHECK_MSG(cnt.peak <= 4096, "peak %lu", (unsigned long)cnt.peak);
    CHECK_EQ_U64(cnt.live, 0);
    TEST_END();

    TEST_BEGIN("get_capped (cap 1 MiB): a 1.5 GB object is cut off past the cap");
    l.promised = l.actual;
    l.sent = 0;
    cnt.peak = 0;
    CHECK_EQ_INT(wsync_store_get_capped(&s, "HEAD", 1 << 20, 0, &a, &bytes, &size, &err), WSYNC_ERR_LIMIT);
    CHECK_MSG(l.sent <= 1 << 20, "%llu bytes taken", (unsigned long long)l.sent);
    CHECK_MSG(strstr(err.message, "'HEAD'") && strstr(err.message, "1048576"), "%s", err.message);
    CHECK_MSG(cnt.peak <= (size_t)2 << 20, "peak %lu", (unsigned long)cnt.peak);
    CHECK_EQ_U64(cnt.live, 0);
    TEST_END();

    TEST_BEGIN("get_capped: an object of the size expected, and a shorter one, are read whole");
    l.promised = l.actual = 70000;
    l.sent = 0;
    CHECK_EQ_INT(wsync_store_get_capped(&s, "obj", 70000, WSYNC_STORE_GET_EXACT, &a, &bytes, &size, &err), WSYNC_OK);
    CHECK_EQ_U64(size, 70000);
    count_free(&cnt, bytes);
    l.sent = 0;
    CHECK_EQ_INT(wsync_store_get_capped(&s, "obj", 70001, 0, &a, &bytes, &size, &err), WSYNC_OK);
    CHECK_EQ_U64(size, 70000);
    count_free(&cnt, bytes);
    CHECK_EQ_U64(cnt.live, 0);
    TEST_END();
}

static void test_capped_mem(void)
{
    wsync_store s;
    wsync_error err;
    uint8_t *bytes = NULL, big[1000];
    uint64_t size = 0;
    TEST_BEGIN("get_capped (exact) on the memory store: longer says both sizes; shorter is read whole");
    memset(big, 7, sizeof big);
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &s, &err), WSYNC_OK);
    CHECK_EQ_INT(s.put(s.user, "a/obj", big, sizeof big, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_store_get_capped(&s, "a/obj", 100, WSYNC_STORE_GET_EXACT, NULL, &bytes, &size, &err),
                 WSYNC_ERR_LIMIT);
    CHECK_MSG(strstr(err.message, "'a/obj' is 1000 bytes, more than the 100 expected") != NULL, "%s", err.message);
    CHECK_EQ_INT(wsync_store_get_capped(&s, "a/obj", 2000, WSYNC_STORE_GET_EXACT, NULL, &bytes, &size, &err),
                 WSYNC_OK);
    CHECK_EQ_U64(size, 1000);
    free(bytes);
    CHECK_EQ_INT(wsync_store_get_capped(&s, "a/obj", 1000, WSYNC_STORE_GET_EXACT, NULL, &bytes, &size, &err),
                 WSYNC_OK);
    CHECK_EQ_U64(size, 1000);
    free(bytes);
    CHECK_EQ_INT(wsync_store_get_capped(&s, "a/none", 10, WSYNC_STORE_GET_EXACT, NULL, &bytes, &size, &err),
                 WSYNC_ERR_NOT_FOUND);
    wsync_store_close(&s);
    TEST_END();
}

int main(void)
{
    test_dir_links();
    test_dir_prefix_walk();
    test_block_size();
    test_capped();
    test_capped_mem();
    return check_summary();
}
