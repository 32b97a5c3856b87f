/* The store interface: the memory and directory stores, key rules, ranges,
   listing order, and the directory store's atomic put checked with real
   processes (a concurrent reader, and a writer killed with SIGKILL). */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct collected {
    char keys[64][128];
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

static void rm_rf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", dir);
}

static void test_keys(void)
{
    static const char *bad[] = {"", "/abs", "a//b", "a/", "..", "a/../b", ".", "a/./b", "a\\b",
                                "x" WSYNC_STORE_TMP_MARK "1", "tab\there"};
    static const char *good[] = {"HEAD", "deltas/step_000041.safetensors", "a/b/c", "a..b", ".hidden", "x.y"};
    size_t i;
    wsync_error err;
    TEST_BEGIN("store keys: the refused ones name the rule");
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(wsync_store_key_check(bad[i], &err) == WSYNC_ERR_INVALID_ARGUMENT, "'%s' accepted", bad[i]);
        CHECK(err.message[0] != 0);
    }
    CHECK_EQ_INT(wsync_store_key_check(NULL, &err), WSYNC_ERR_INVALID_ARGUMENT);
    TEST_END();
    TEST_BEGIN("store keys: ordinary keys pass");
    for (i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK_MSG(wsync_store_key_check(good[i], &err) == WSYNC_OK, "'%s': %s", good[i], err.message);
    TEST_END();
}

/* The same contract for any store. */
static void test_contract(const char *label, wsync_store *s)
{
    char name[160];
    wsync_error err;
    uint64_t size = 0;
    uint8_t *all = NULL, buf[64];
    wsync_buffer wb;
    collected c;
    static const char hello[] = "hello, store";

#define NAME(what) (snprintf(name, sizeof name, "%s: %s", label, what), name)
    TEST_BEGIN(NAME("put then get, head and get_all"));
    CHECK_EQ_INT(s->put(s->user, "deltas/step_000001.safetensors", hello, sizeof hello - 1, &err), WSYNC_OK);
    CHECK_EQ_INT(s->head(s->user, "deltas/step_000001.safetensors", &size, &err), WSYNC_OK);
    CHECK_EQ_U64(size, sizeof hello - 1);
    CHECK_EQ_INT(wsync_store_get_all(s, "deltas/step_000001.safetensors", NULL, &all, &size, &err), WSYNC_OK);
    CHECK(size == sizeof hello - 1 && all && memcmp(all, hello, (size_t)size) == 0);
    free(all);
    TEST_END();

    TEST_BEGIN(NAME("ranged get"));
    wb.bytes = buf;
    wb.cap = sizeof buf;
    wb.len = 0;
    CHECK_EQ_INT(s->get(s->user, "deltas/step_000001.safetensors", 7, 5, wsync_buffer_sink, &wb, &size, &err), WSYNC_OK);
    CHECK(wb.len == 5 && memcmp(buf, "store", 5) == 0);
    CHECK_EQ_U64(size, sizeof hello - 1);
    wb.len = 0;
    CHECK_EQ_INT(s->get(s->user, "deltas/step_000001.safetensors", 12, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err),
                 WSYNC_OK);
    CHECK_EQ_INT(wb.len, 0);
    CHECK_EQ_INT(s->get(s->user, "deltas/step_000001.safetensors", 13, 1, wsync_buffer_sink, &wb, NULL, &err),
                 WSYNC_ERR_OUT_OF_BOUNDS);
    CHECK_EQ_INT(s->get(s->user, "deltas/step_000001.safetensors", 10, 3, wsync_buffer_sink, &wb, NULL, &err),
                 WSYNC_ERR_OUT_OF_BOUNDS);
    CHECK(strstr(err.message, "step_000001") != NULL);
    TEST_END();

    TEST_BEGIN(NAME("missing keys are NOT_FOUND, bad keys INVALID_ARGUMENT"));
    CHECK_EQ_INT(s->head(s->user, "nope", &size, &err), WSYNC_ERR_NOT_FOUND);
    CHECK_EQ_INT(s->get(s->user, "nope", 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_NOT_FOUND);
    CHECK_EQ_INT(s->del(s->user, "nope", &err), WSYNC_ERR_NOT_FOUND);
    CHECK_EQ_INT(s->put(s->user, "../escape", "x", 1, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(s->get(s->user, "/etc/passwd", 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err),
                 WSYNC_ERR_INVALID_ARGUMENT);
    TEST_END();

    TEST_BEGIN(NAME("overwrite replaces, empty objects exist"));
    CHECK_EQ_INT(s->put(s->user, "HEAD", "{\"step\": 1}", 11, &err), WSYNC_OK);
    CHECK_EQ_INT(s->put(s->user, "HEAD", "{\"step\": 22}", 12, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_store_get_all(s, "HEAD", NULL, &all, &size, &err), WSYNC_OK);
    CHECK(size == 12 && memcmp(all, "{\"step\": 22}", 12) == 0);
    free(all);
    CHECK_EQ_INT(s->put(s->user, "empty", NULL, 0, &err), WSYNC_OK);
    CHECK_EQ_INT(s->head(s->user, "empty", &size, &err), WSYNC_OK);
    CHECK_EQ_U64(size, 0);
    CHECK_EQ_INT(wsync_store_get_all(s, "empty", NULL, &all, &size, &err), WSYNC_OK);
    CHECK(all != NULL && size == 0);
    free(all);
    TEST_END();

    TEST_BEGIN(NAME("list: byte order, prefix, sizes, early stop"));
    CHECK_EQ_INT(s->put(s->user, "deltas/step_000003.safetensors", "333", 3, &err), WSYNC_OK);
    CHECK_EQ_INT(s->put(s->user, "deltas/step_000002.safetensors", "22", 2, &err), WSYNC_OK);
    CHECK_EQ_INT(s->put(s->user, "anchors/step_000000.safetensors", "a", 1, &err), WSYNC_OK);
    memset(&c, 0, sizeof c);
    CHECK_EQ_INT(s->list(s->user, "deltas/", collect, &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 3);
    CHECK_EQ_STR(c.keys[0], "deltas/step_000001.safetensors");
    CHECK_EQ_STR(c.keys[1], "deltas/step_000002.safetensors");
    CHECK_EQ_STR(c.keys[2], "deltas/step_000003.safetensors");
    CHECK(c.sizes[0] == 12 && c.sizes[1] == 2 && c.sizes[2] == 3);
    memset(&c, 0, sizeof c);
    CHECK_EQ_INT(s->list(s->user, "", collect, &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 6);
    CHECK_EQ_STR(c.keys[0], "HEAD");
    CHECK_EQ_STR(c.keys[1], "anchors/step_000000.safetensors");
    CHECK_EQ_STR(c.keys[5], "empty");
    memset(&c, 0, sizeof c);
    c.stop_after = 2;
    CHECK_EQ_INT(s->list(s->user, "", collect, &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 2);
    memset(&c, 0, sizeof c);
    CHECK_EQ_INT(s->list(s->user, "zzz", collect, &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 0);
    TEST_END();

    TEST_BEGIN(NAME("del removes"));
    CHECK_EQ_INT(s->del(s->user, "deltas/step_000002.safetensors", &err), WSYNC_OK);
    CHECK_EQ_INT(s->head(s->user, "deltas/step_000002.safetensors", &size, &err), WSYNC_ERR_NOT_FOUND);
    memset(&c, 0, sizeof c);
    CHECK_EQ_INT(s->list(s->user, "deltas/", collect, &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 2);
    TEST_END();

    TEST_BEGIN(NAME("a failing sink is WSYNC_ERR_SINK"));
    wb.cap = 3;
    wb.len = 0;
    CHECK_EQ_INT(s->get(s->user, "HEAD", 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_SINK);
    TEST_END();

    TEST_BEGIN(NAME("a 3 MB object round-trips"));
    {
        size_t n = 3u << 20, i;
        uint8_t *big = (uint8_t *)malloc(n);
        for (i = 0; i < n; i++) big[i] = (uint8_t)(i * 2654435761u >> 13);
        CHECK_EQ_INT(s->put(s->user, "anchors/big", big, n, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_store_get_all(s, "anchors/big", NULL, &all, &size, &err), WSYNC_OK);
        CHECK(size == n && memcmp(all, big, n) == 0);
        free(all);
        free(big);
    }
    TEST_END();
#undef NAME
}

static void test_mem(void)
{
    wsync_store s;
    wsync_error err;
    TEST_BEGIN("memory store opens");
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &s, &err), WSYNC_OK);
    TEST_END();
    test_contract("memory store", &s);
    wsync_store_close(&s);
}

static char g_root[256];

static void test_dir(void)
{
    wsync_store s;
    wsync_error err;
    wsync_store_options o;
    char path[512];
    FILE *f;
    collected c;
    memset(&o, 0, sizeof o);
    snprintf(g_root, sizeof g_root, "build/test_store.%ld", (long)getpid());
    rm_rf(g_root);
    TEST_BEGIN("directory store opens (and creates its root)");
    CHECK_EQ_INT(wsync_store_dir_open(g_root, &o, &s, &err), WSYNC_OK);
    TEST_END();
    test_contract("directory store", &s);

    TEST_BEGIN("directory store: objects are plain files; temporary files are not listed");
    snprintf(path, sizeof path, "%s/deltas/step_000001.safetensors", g_root);
    f = fopen(path, "rb");
    CHECK(f != NULL);
    if (f) fclose(f);
    /* what a put killed half way leaves behind */
    snprintf(path, sizeof path, "%s/deltas/step_000009.safetensors" WSYNC_STORE_TMP_MARK "123.1", g_root);
    f = fopen(path, "wb");
    if (f) {
        fputs("torn", f);
        fclose(f);
    }
    memset(&c, 0, sizeof c);
    CHECK_EQ_INT(s.list(s.user, "deltas/", collect, &c, &err), WSYNC_OK);
    CHECK_EQ_INT(c.n, 2);
    TEST_END();
    wsync_store_close(&s);

    TEST_BEGIN("directory store: a key that is a folder is no object: head and get say so alike (NOT_FOUND)");
    {
        static const uint8_t one = 1;
        uint8_t buf[8];
        wsync_buffer wb;
        uint64_t size = 77;
        char head_msg[sizeof err.message];
        CHECK_EQ_INT(wsync_store_dir_open(g_root, &o, &s, &err), WSYNC_OK);
        CHECK_EQ_INT(s.put(s.user, "folder/inside.bin", &one, 1, &err), WSYNC_OK);
        CHECK_EQ_INT(s.head(s.user, "folder", &size, &err), WSYNC_ERR_NOT_FOUND);
        CHECK_EQ_U64(size, 77);
        CHECK_MSG(strstr(err.message, "'folder'") && strstr(err.message, "is a folder, not an object"), "%s",
                  err.message);
        snprintf(head_msg, sizeof head_msg, "%s", err.message);
        wb.bytes = buf;
        wb.cap = sizeof buf;
        wb.len = 0;
        CHECK_EQ_INT(s.get(s.user, "folder", 0, UINT64_MAX, wsync_buffer_sink, &wb, &size, &err),
                     WSYNC_ERR_NOT_FOUND);
        CHECK_EQ_STR(err.message, head_msg);
        CHECK_EQ_U64(wb.len, 0);
        CHECK_EQ_U64(size, 77);
        CHECK_EQ_INT(s.get(s.user, "folder", 2, 3, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_NOT_FOUND);
        /* the object inside is still there, and a missing key stays plain NOT_FOUND */
        CHECK_EQ_INT(s.head(s.user, "folder/inside.bin", &size, &err), WSYNC_OK);
        CHECK_EQ_U64(size, 1);
        CHECK_EQ_INT(s.head(s.user, "folder/nope", &size, &err), WSYNC_ERR_NOT_FOUND);
        CHECK(strstr(err.message, "folder, not") == NULL);
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("directory store: a FIFO at a key is refused unread by head and get alike (IO)");
    {
        uint8_t buf[8];
        wsync_buffer wb;
        uint64_t size = 77;
        CHECK_EQ_INT(wsync_store_dir_open(g_root, &o, &s, &err), WSYNC_OK);
        snprintf(path, sizeof path, "%s/folder/fifo", g_root);
        CHECK(mkfifo(path, 0600) == 0);
        CHECK_EQ_INT(s.head(s.user, "folder/fifo", &size, &err), WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "not a regular file"), "%s", err.message);
        CHECK_EQ_U64(size, 77);
        wb.bytes = buf;
        wb.cap = sizeof buf;
        wb.len = 0;
        CHECK_EQ_INT(s.get(s.user, "folder/fifo", 0, UINT64_MAX, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "not a regular file"), "%s", err.message);
        CHECK_EQ_U64(wb.len, 0);
        remove(path);
        wsync_store_close(&s);
    }
    TEST_END();

    TEST_BEGIN("directory store: a file where the root should be is an IO error");
    snprintf(path, sizeof path, "%s/HEAD", g_root);
    CHECK_EQ_INT(wsync_store_dir_open(path, &o, &s, &err), WSYNC_ERR_IO);
    CHECK(strstr(err.message, "HEAD") != NULL);
    TEST_END();
}

/* A reader process reads while a writer replaces the object: every read
   must be one whole generation (all bytes equal its first byte, and the
   size that generation has). */
static void test_dir_atomic_reader(void)
{
    wsync_store s;
    wsync_error err;
    wsync_store_options o;
    pid_t child;
    int status = 0, gen;
    memset(&o, 0, sizeof o);
    o.no_fsync = 1;
    TEST_BEGIN("directory store: a concurrent reader never sees a torn object");
    CHECK_EQ_INT(wsync_store_dir_open(g_root, &o, &s, &err), WSYNC_OK);
    {
        uint8_t first[100 + 4096]; /* generation 1 */
        memset(first, 1, sizeof first);
        CHECK_EQ_INT(s.put(s.user, "torn/test", first, sizeof first, &err), WSYNC_OK);
    }
    child = fork();
    if (child == 0) {
        /* reader: 1 s of reads */
        time_t end = time(NULL) + 2;
        int bad = 0, reads = 0;
        while (time(NULL) < end && !bad) {
            uint8_t *p = NULL;
            uint64_t n = 0, i;
            if (wsync_store_get_all(&s, "torn/test", NULL, &p, &n, &err) != WSYNC_OK) bad = 1;
            else {
                for (i = 0; i < n; i++)
                    if (p[i] != p[0]) bad = 1;
                if (n != 100 + 4096u * p[0]) bad = 1;
            }
            free(p);
            reads++;
        }
        _exit(bad ? 1 : (reads > 10 ? 0 : 2));
    }
    {
        int reaped = 0;
        for (gen = 2; gen < 250 && !reaped; gen++) {
            size_t n = 100 + 4096u * (uint8_t)gen;
            uint8_t *p = (uint8_t *)malloc(n);
            memset(p, (uint8_t)gen, n);
            if (s.put(s.user, "torn/test", p, n, &err) != WSYNC_OK) CHECK_MSG(0, "put: %s", err.message);
            free(p);
            reaped = waitpid(child, &status, WNOHANG) == child;
        }
        if (!reaped && waitpid(child, &status, 0) != child) status = -1;
    }
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reader status %d", status);
    wsync_store_close(&s);
    TEST_END();
}

/* A writer killed with SIGKILL at random points: the key holds a whole
   earlier object or the new one, and listing shows no debris. */
static void test_dir_killed_writer(void)
{
    wsync_store s;
    wsync_error err;
    wsync_store_options o;
    int round, bad = 0;
    memset(&o, 0, sizeof o);
    TEST_BEGIN("directory store: a writer killed with SIGKILL 20 times never leaves a torn object");
    CHECK_EQ_INT(wsync_store_dir_open(g_root, &o, &s, &err), WSYNC_OK);
    srand((unsigned)getpid());
    for (round = 0; round < 20 && !bad; round++) {
        pid_t child = fork();
        if (child == 0) {
            int gen;
            for (gen = 1;; gen++) {
                size_t n = (size_t)(1u << 20) + (size_t)gen;
                uint8_t *p = (uint8_t *)malloc(n);
                memset(p, (uint8_t)gen, n);
                s.put(s.user, "killed/obj", p, n, &err);
                free(p);
            }
        } else {
            struct timespec ts;
            int status;
            uint8_t *p = NULL;
            uint64_t n = 0, i;
            collected c;
            ts.tv_sec = 0;
            ts.tv_nsec = 2000000L + (long)(rand() % 30) * 1000000L;
            nanosleep(&ts, NULL);
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
            if (wsync_store_get_all(&s, "killed/obj", NULL, &p, &n, &err) == WSYNC_OK) {
                for (i = 0; i < n; i++)
                    if (p[i] != p[0]) bad = 1;
                if (n != (1u << 20) + 0u && (n - (1u << 20)) % 256 != p[0]) bad = 1;
            } else if (err.code != WSYNC_ERR_NOT_FOUND) {
                bad = 1;
            }
            free(p);
            memset(&c, 0, sizeof c);
            s.list(s.user, "killed/", collect, &c, &err);
            if (c.n > 1) bad = 1;
        }
    }
    CHECK_MSG(!bad, "round %d: a torn object or debris in the listing", round);
    CHECK_EQ_INT(s.put(s.user, "killed/obj", "after", 5, &err), WSYNC_OK);
    wsync_store_close(&s);
    TEST_END();
}

int main(void)
{
    test_keys();
    test_mem();
    test_dir();
    test_dir_atomic_reader();
    test_dir_killed_writer();
    rm_rf(g_root);
    return check_summary();
}
