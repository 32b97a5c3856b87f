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

int main(void)
{
    test_dir_links();
    test_dir_prefix_walk();
    return check_summary();
}
