/* The S3 store (wsync_http.h) against S3 servers with smaller request
   bodies and a bucket that does not exist, started by
   tests/http/test_s3_limits.sh, which sets:
     WSYNC_TEST_S3_ENDPOINT   s3rver itself
     WSYNC_TEST_S3_PROXY_11M  nginx in front of it, client_max_body_size 11m
     WSYNC_TEST_S3_PROXY_4M   the same with 4m (below S3's 5 MiB minimum part)
     WSYNC_TEST_S3_BUCKET, WSYNC_TEST_S3_TAG, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
   Behind the 11m proxy: a 40 MiB single PUT answered 413 goes up again in
   16 MiB parts, answered 413, then 8 MiB parts: the object reads back
   bit-exact and the stats count it; the next upload starts below the limit
   learned (no new 413); a multipart upload above the threshold does the
   same; WSYNC_S3_PART_SIZE=8M avoids the 413s; a malformed value is refused
   at open. Behind the 4m proxy: a 12 MiB upload fails at 5 MiB parts with a
   message naming the part, its size, the server's answer and the options,
   without nginx's setting and without "the object", and leaves no object; a
   4.5 MiB object cannot be split and says so. A bucket that does not exist:
   put and the publisher's publish say NoSuchBucket. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_bucket, *g_tag;

static int open_s3(const char *endpoint, const char *bucket, const char *sub, uint64_t threshold, uint64_t part,
                   wsync_store *s, wsync_error *err)
{
    wsync_s3_options o;
    char url[400];
    memset(&o, 0, sizeof o);
    o.http.max_attempts = 2;
    o.http.backoff_ms = 20;
    o.endpoint = endpoint;
    o.multipart_threshold = threshold;
    o.multipart_part_size = part;
    snprintf(url, sizeof url, "s3://%s/%s/%s", bucket, g_tag, sub);
    return wsync_store_s3_open(url, &o, s, err) == WSYNC_OK;
}

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = (uint8_t *)malloc(n);
    size_t i;
    uint32_t x = 2463534242u ^ seed;
    for (i = 0; p && i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
    return p;
}

static int reads_back(const wsync_store *s, const char *key, const uint8_t *want, size_t n)
{
    uint8_t *all = NULL;
    uint64_t size = 0;
    wsync_error err;
    int ok;
    if (wsync_store_get_all(s, key, NULL, &all, &size, &err) != WSYNC_OK) {
        CHECK_MSG(0, "get %s: %s", key, err.message);
        return 0;
    }
    ok = size == n && memcmp(all, want, n) == 0;
    free(all);
    return ok;
}

#define MIB ((size_t)1 << 20)

static void test_11m(const char *proxy)
{
    wsync_store s;
    wsync_error err;
    wsync_http_stats st;
    uint8_t *a = pattern(40 * MIB, 1), *b = pattern(20 * MIB, 2);
    uint64_t before;
    TEST_BEGIN("11 MiB limit: a 40 MiB single PUT answered 413 goes up in smaller parts, bit-exact, counted");
    if (a && b && open_s3(proxy, g_bucket, "lim11", 0, 0, &s, &err)) {
        CHECK_MSG(s.put(s.user, "anchors/step_000000.safetensors", a, 40 * MIB, &err) == WSYNC_OK, "%s", err.message);
        CHECK(reads_back(&s, "anchors/step_000000.safetensors", a, 40 * MIB));
        CHECK(wsync_store_http_stats(&s, &st) && st.smaller_parts >= 1);
        before = st.smaller_parts;
        /* the limit learned: the next upload starts below it (no new 413) */
        CHECK_MSG(s.put(s.user, "anchors/step_000001.safetensors", b, 20 * MIB, &err) == WSYNC_OK, "%s", err.message);
        CHECK(reads_back(&s, "anchors/step_000001.safetensors", b, 20 * MIB));
        CHECK(wsync_store_http_stats(&s, &st) && st.smaller_parts == before);
        /* small objects still go in one PUT */
        CHECK_MSG(s.put(s.user, "HEAD", "head", 4, &err) == WSYNC_OK, "%s", err.message);
        wsync_store_close(&s);
    } else CHECK_MSG(0, "open: %s", err.message);
    TEST_END();

    TEST_BEGIN("11 MiB limit: a multipart upload (above a 20 MiB threshold) whose 16 MiB part is answered 413");
    if (a && open_s3(proxy, g_bucket, "lim11mp", 20 * MIB, 0, &s, &err)) {
        CHECK_MSG(s.put(s.user, "anchors/step_000002.safetensors", a, 33 * MIB, &err) == WSYNC_OK, "%s", err.message);
        CHECK(reads_back(&s, "anchors/step_000002.safetensors", a, 33 * MIB));
        CHECK(wsync_store_http_stats(&s, &st) && st.smaller_parts == 1);
        wsync_store_close(&s);
    } else CHECK_MSG(0, "open: %s", err.message);
    TEST_END();

    TEST_BEGIN("11 MiB limit: WSYNC_S3_PART_SIZE=8M and WSYNC_S3_MULTIPART_THRESHOLD=8MiB avoid the 413s");
    setenv("WSYNC_S3_PART_SIZE", "8M", 1);
    setenv("WSYNC_S3_MULTIPART_THRESHOLD", "8MiB", 1);
    if (a && open_s3(proxy, g_bucket, "lim11env", 0, 0, &s, &err)) {
        CHECK_MSG(s.put(s.user, "anchors/step_000003.safetensors", a, 30 * MIB, &err) == WSYNC_OK, "%s", err.message);
        CHECK(reads_back(&s, "anchors/step_000003.safetensors", a, 30 * MIB));
        CHECK(wsync_store_http_stats(&s, &st) && st.smaller_parts == 0);
        wsync_store_close(&s);
    } else CHECK_MSG(0, "open: %s", err.message);
    setenv("WSYNC_S3_PART_SIZE", "8 M", 1);
    CHECK(!open_s3(proxy, g_bucket, "x", 0, 0, &s, &err) && err.code == WSYNC_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "WSYNC_S3_PART_SIZE"));
    unsetenv("WSYNC_S3_PART_SIZE");
    unsetenv("WSYNC_S3_MULTIPART_THRESHOLD");
    TEST_END();
    free(a);
    free(b);
}

static void test_4m(const char *proxy)
{
    wsync_store s;
    wsync_error err;
    uint8_t *a = pattern(12 * MIB, 3);
    TEST_BEGIN("4 MiB limit: 5 MiB parts refused too: the message names the part, its size, the answer, the options");
    if (a && open_s3(proxy, g_bucket, "lim4", 0, 0, &s, &err)) {
        CHECK(s.put(s.user, "anchors/step_000000.safetensors", a, 12 * MIB, &err) == WSYNC_ERR_IO);
        printf("  (the message: %s)\n", err.message);
        CHECK_MSG(strstr(err.message, "part 1 (5242880 bytes") && strstr(err.message, "HTTP 413") &&
                      strstr(err.message, "Request Entity Too Large") && strstr(err.message, "multipart_part_size") &&
                      strstr(err.message, "WSYNC_S3_PART_SIZE") && strstr(err.message, "anchors/step_000000"),
                  "%s", err.message);
        CHECK_MSG(!strstr(err.message, "client_max_body_size") && !strstr(err.message, "the object"), "%s",
                  err.message);
        CHECK_EQ_INT(s.head(s.user, "anchors/step_000000.safetensors", NULL, &err), WSYNC_ERR_NOT_FOUND);
        wsync_store_close(&s);
    } else CHECK_MSG(0, "open: %s", err.message);
    TEST_END();
    TEST_BEGIN("4 MiB limit: a 4.5 MiB object in one PUT answered 413 cannot be split, and says so");
    if (a && open_s3(proxy, g_bucket, "lim4", 0, 0, &s, &err)) {
        CHECK(s.put(s.user, "deltas/step_000001.safetensors", a, 9 * MIB / 2, &err) == WSYNC_ERR_IO);
        CHECK_MSG(strstr(err.message, "HTTP 413") && strstr(err.message, "cannot be split") &&
                      strstr(err.message, "4718592 bytes") && !strstr(err.message, "client_max_body_size"),
                  "%s", err.message);
        wsync_store_close(&s);
    } else CHECK_MSG(0, "open: %s", err.message);
    TEST_END();
    free(a);
}

static void test_no_bucket(const char *endpoint)
{
    wsync_store s;
    wsync_error err;
    wsync_chain_options co;
    wsync_publisher *p = NULL;
    static uint16_t img[64 * 64];
    static const uint64_t shape[2] = {64, 64};
    wsync_tensor t;
    TEST_BEGIN("a bucket that does not exist: WSYNC_ERR_NO_STORE from put, a subscriber's sync, and the "
               "publisher's publish, saying NoSuchBucket");
    if (open_s3(endpoint, "wsync-no-such-bucket", "run", 0, 0, &s, &err)) {
        wsync_subscriber *sub = NULL;
        CHECK_EQ_INT(s.put(s.user, "HEAD", "x", 1, &err), WSYNC_ERR_NO_STORE);
        CHECK_MSG(strstr(err.message, "NoSuchBucket") && strstr(err.message, "PUT"), "%s", err.message);
        memset(&co, 0, sizeof co);
        memset(&t, 0, sizeof t);
        t.name = "w";
        t.dtype = WSYNC_DTYPE_BF16;
        t.rank = 2;
        t.shape = shape;
        t.data = img;
        t.nbytes = sizeof img;
        /* a reader can wait on it (not an empty chain, not a model that does not match) */
        CHECK_EQ_INT(wsync_subscriber_open(&s, &t, 1, &co, &sub, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_NO_STORE);
        wsync_subscriber_close(sub);
        if (wsync_publisher_open(&s, &co, &p, &err) == WSYNC_OK) {
            CHECK(wsync_publish(p, 0, &t, 1, NULL, &err) != WSYNC_OK);
            CHECK_MSG(strstr(err.message, "NoSuchBucket") != NULL, "publish: %s", err.message);
            wsync_publisher_close(p);
        } else CHECK_MSG(strstr(err.message, "NoSuchBucket") != NULL, "publisher_open: %s", err.message);
        wsync_store_close(&s);
    } else CHECK_MSG(0, "open: %s", err.message);
    TEST_END();
}

int main(void)
{
    const char *endpoint = getenv("WSYNC_TEST_S3_ENDPOINT"), *p11 = getenv("WSYNC_TEST_S3_PROXY_11M"),
               *p4 = getenv("WSYNC_TEST_S3_PROXY_4M");
    g_bucket = getenv("WSYNC_TEST_S3_BUCKET");
    g_tag = getenv("WSYNC_TEST_S3_TAG");
    if (!g_tag) g_tag = "t";
    if (!endpoint || !p11 || !p4 || !g_bucket) {
        printf("test_s3_limits: no server (run it through tests/http/test_s3_limits.sh)\n");
        return check_summary();
    }
    test_11m(p11);
    test_4m(p4);
    test_no_bucket(endpoint);
    return check_summary();
}
