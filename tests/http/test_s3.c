/* The S3 store (wsync_http.h) against a real S3 server (s3rver, which
   verifies SigV4), started by tests/http/test_s3.sh, which sets:
     WSYNC_TEST_S3_ENDPOINT  http://127.0.0.1:PORT
     WSYNC_TEST_S3_BUCKET    a bucket created at startup
     WSYNC_TEST_S3_TAG       a prefix unique to this run
     WSYNC_TEST_S3_FRONT     http://127.0.0.1:PORT of tests/http/s3/front.py
   and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Without them only the
   pieces that need no server run: SigV4's encoding and canonical query
   against AWS's published examples, the ListObjectsV2 parser on hostile
   input, and the URL and credential checks of open.

   With the server (what every store must do, the chain over it included,
   is the conformance suite's: tests/http/test_conformance.c, which
   tests/http/test_s3.sh runs against this s3rver too): a wrong secret (an
   authentication error after one request), pagination past 1,000 keys, a
   multipart upload's requests, open_url's options; through the front: a
   302 to another origin followed with no signature, token or cookie sent
   there, a 307 on the same origin still signed, and the session token sent,
   signed (s3rver refuses it once the front changes it). s3rver's PUT is not
   atomic and it ignores conditional writes: nothing here relies on
   either. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"
#include "check.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *g_endpoint, *g_bucket, *g_tag;

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

static void fast_opts(wsync_s3_options *o)
{
    memset(o, 0, sizeof *o);
    o->http.max_attempts = 3;
    o->http.backoff_ms = 20;
    o->http.max_backoff_ms = 500;
    o->http.connect_timeout_ms = 2000;
    o->endpoint = g_endpoint;
}

/* A store on s3://bucket/tag/sub. */
static int open_at(const char *sub, const wsync_s3_options *o, wsync_store *s)
{
    char url[512];
    wsync_error err;
    snprintf(url, sizeof url, "s3://%s/%s/%s", g_bucket, g_tag, sub);
    if (wsync_store_s3_open(url, o, s, &err) != WSYNC_OK) {
        CHECK_MSG(0, "open %s: %s", url, err.message);
        return 0;
    }
    return 1;
}

/* ======================================================================
   SigV4's encoding, against AWS's published examples
   ====================================================================== */

static size_t q(const char *const *n, const char *const *v, size_t k, char *out)
{
    return wsync_s3_query(n, v, k, out, 512);
}

static void test_sigv4_pieces(void)
{
    char out[512];
    TEST_BEGIN("sigv4: URI encoding (aws-sig-v4-test-suite get-utf8, get-space; S3's rules)");
    /* get-utf8: GET /ሴ  ->  canonical URI /%E1%88%B4 */
    CHECK_EQ_INT(wsync_s3_uri_encode("/\xe1\x88\xb4", 4, 1, out, sizeof out), 10);
    CHECK_EQ_STR(out, "/%E1%88%B4");
    /* get-space (S3 does not normalize): /example space/ */
    wsync_s3_uri_encode("/example space/", 15, 1, out, sizeof out);
    CHECK_EQ_STR(out, "/example%20space/");
    /* unreserved characters stay; everything else is %XX, upper case, '/' only in paths */
    wsync_s3_uri_encode("-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", 66, 0, out, sizeof out);
    CHECK_EQ_STR(out, "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
    wsync_s3_uri_encode("a/b c+d=e&f*g!'()", 17, 0, out, sizeof out);
    CHECK_EQ_STR(out, "a%2Fb%20c%2Bd%3De%26f%2Ag%21%27%28%29");
    wsync_s3_uri_encode("a/b", 3, 1, out, sizeof out);
    CHECK_EQ_STR(out, "a/b");
    CHECK_EQ_INT(wsync_s3_uri_encode("\xff", 1, 0, out, 4), 3);
    CHECK_EQ_STR(out, "%FF");
    CHECK(wsync_s3_uri_encode("\xff", 1, 0, out, 3) == (size_t)-1); /* no room for the NUL */
    CHECK(wsync_s3_uri_encode("abc", 3, 0, out, 3) == (size_t)-1);
    TEST_END();

    TEST_BEGIN("sigv4: canonical query strings (get-vanilla-query-order-key-case, -order-value, -unreserved, -utf8)");
    {
        const char *n1[] = {"Param2", "Param1"}, *v1[] = {"value2", "value1"};
        const char *n2[] = {"Param1", "Param1"}, *v2[] = {"value2", "value1"};
        const char *n3[] = {"-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"};
        const char *v3[] = {"-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"};
        const char *n4[] = {"\xe1\x88\xb4"}, *v4[] = {"bar"};
        CHECK(q(n1, v1, 2, out) != (size_t)-1);
        CHECK_EQ_STR(out, "Param1=value1&Param2=value2");
        q(n2, v2, 2, out);
        CHECK_EQ_STR(out, "Param1=value1&Param1=value2");
        q(n3, v3, 1, out);
        CHECK_EQ_STR(out, "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
                          "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
        q(n4, v4, 1, out);
        CHECK_EQ_STR(out, "%E1%88%B4=bar");
    }
    TEST_END();

    TEST_BEGIN("sigv4: S3's examples: ListObjects max-keys/prefix, empty values keep '=', '/' encoded in values");
    {
        const char *n1[] = {"prefix", "max-keys"}, *v1[] = {"J", "2"};
        const char *n2[] = {"uploads"}, *v2[] = {NULL};
        const char *n3[] = {"prefix", "list-type", "continuation-token"}, *v3[] = {"run/a b/", "2", "1x/+=="};
        const char *n4[] = {"a=b", "a", "a-b"}, *v4[] = {"1", "2", "3"};
        q(n1, v1, 2, out);
        CHECK_EQ_STR(out, "max-keys=2&prefix=J"); /* GET /?max-keys=2&prefix=J in the S3 docs */
        q(n2, v2, 1, out);
        CHECK_EQ_STR(out, "uploads=");
        q(n3, v3, 3, out);
        CHECK_EQ_STR(out, "continuation-token=1x%2F%2B%3D%3D&list-type=2&prefix=run%2Fa%20b%2F");
        q(n4, v4, 3, out); /* sorted by encoded name, not by "name=value" */
        CHECK_EQ_STR(out, "a=2&a%3Db=1&a-b=3");
        CHECK(wsync_s3_query(n1, v1, 2, out, 10) == (size_t)-1);
        CHECK(wsync_s3_query(n1, v1, 17, out, sizeof out) == (size_t)-1);
        CHECK_EQ_INT(wsync_s3_query(n1, v1, 0, out, sizeof out), 0);
        CHECK_EQ_STR(out, "");
    }
    TEST_END();
}

/* ======================================================================
   The ListObjectsV2 parser
   ====================================================================== */

typedef struct lkeys {
    char keys[8][64];
    uint64_t sizes[8];
    int n;
} lkeys;

static int lk(void *user, const char *key, size_t len, uint64_t size)
{
    lkeys *l = (lkeys *)user;
    if (l->n < 8 && len < 64) {
        memcpy(l->keys[l->n], key, len + 1);
        l->sizes[l->n] = size;
    }
    l->n++;
    return 0;
}

static wsync_result parse(const char *xml, lkeys *l, int *trunc, char *token)
{
    wsync_error err;
    memset(l, 0, sizeof *l);
    return wsync_s3_listing_parse(xml, strlen(xml), lk, l, trunc, token, 64, &err);
}

static void test_listing_parser(void)
{
    lkeys l;
    int trunc;
    char token[64];
    size_t i;
    TEST_BEGIN("s3 listing: AWS's shape, entities, truncation and the token");
    CHECK_EQ_INT(parse("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                       "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                       "<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
                       "<IsTruncated>true</IsTruncated>"
                       "<Contents><Key>p/a&amp;b &lt;c&gt; &quot;d&quot; &apos;e&apos;</Key>"
                       "<LastModified>2009-10-12T17:50:30.000Z</LastModified><ETag>&quot;fba9&quot;</ETag>"
                       "<Size>434234</Size><StorageClass>STANDARD</StorageClass></Contents>\n"
                       "  <Contents><Size>0</Size><Key>p/&#252;&#x20AC;&#x1F600;</Key></Contents>"
                       "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
                       "<!-- a comment --></ListBucketResult>\n",
                       &l, &trunc, token),
                 WSYNC_OK);
    CHECK_EQ_INT(l.n, 2);
    CHECK_EQ_STR(l.keys[0], "p/a&b <c> \"d\" 'e'");
    CHECK_EQ_U64(l.sizes[0], 434234);
    CHECK_EQ_STR(l.keys[1], "p/\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80");
    CHECK_EQ_U64(l.sizes[1], 0);
    CHECK_EQ_INT(trunc, 1);
    CHECK_EQ_STR(token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    CHECK_EQ_INT(parse("<ListBucketResult><IsTruncated>false</IsTruncated><Prefix/></ListBucketResult>", &l, &trunc,
                       token),
                 WSYNC_OK);
    CHECK(l.n == 0 && trunc == 0 && token[0] == 0);
    TEST_END();

    TEST_BEGIN("s3 listing: hostile and malformed responses are refused with an offset");
    {
        static const char *bad[] = {
            "",
            "<Error><Code>AccessDenied</Code></Error>",
            "<ListBucketResult>",
            "<ListBucketResult></ListBucketResults>",
            "<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a</Key><Key>b</Key><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key></Key><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a&#0;b</Key><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a&#xD800;</Key><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a&#x110000;</Key><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a&foo;</Key><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a&amp</Key><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a<b/></Key><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a</Key><Size>9223372036854775808</Size></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a</Key><Size>1 </Size></Contents></ListBucketResult>",
            "<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>",
            "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
            "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><ListBucketResult></ListBucketResult>",
            "<ListBucketResult><Contents><Key><![CDATA[a]]></Key><Size>1</Size></Contents></ListBucketResult>",
            "<ListBucketResult></ListBucketResult><ListBucketResult></ListBucketResult>",
            "junk<ListBucketResult></ListBucketResult>",
            "<ListBucketResult><a><b><c><d><e><f><g><h><i><j><k><l><m><n><o><p><q>"
            "</q></p></o></n></m></l></k></j></i></h></g></f></e></d></c></b></a></ListBucketResult>",
            "<ListBucketResult><NextContinuationToken>"
            "0123456789012345678901234567890123456789012345678901234567890123456789"
            "</NextContinuationToken></ListBucketResult>",
            "<ListBucketResult a=\"x>\" <b></ListBucketResult>",
            "<ListBucketResult><!-- never closed </ListBucketResult>",
            "< ListBucketResult></ListBucketResult>",
        };
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            wsync_error err;
            memset(&l, 0, sizeof l);
            CHECK_MSG(wsync_s3_listing_parse(bad[i], strlen(bad[i]), lk, &l, &trunc, token, 64, &err) == WSYNC_ERR_IO,
                      "case %u accepted: %s", (unsigned)i, bad[i]);
            CHECK_MSG(strstr(err.message, "byte") != NULL, "case %u: %s", (unsigned)i, err.message);
        }
    }
    TEST_END();

    TEST_BEGIN("s3 listing: every prefix of a valid response parses or fails cleanly (no read past the end)");
    {
        static const char ok[] = "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a&amp;&#x41;</Key>"
                                 "<Size>12</Size></Contents><NextContinuationToken>t</NextContinuationToken>"
                                 "</ListBucketResult>";
        int oks = 0;
        for (i = 0; i <= sizeof ok - 1; i++) {
            wsync_error err;
            char *copy = (char *)malloc(i ? i : 1); /* exact size: ASan sees any overread */
            memcpy(copy, ok, i);
            memset(&l, 0, sizeof l);
            if (wsync_s3_listing_parse(copy, i, lk, &l, &trunc, token, 64, &err) == WSYNC_OK) oks++;
            free(copy);
        }
        CHECK_EQ_INT(oks, 1);
        CHECK(l.n == 1 && strcmp(l.keys[0], "a&A") == 0 && l.sizes[0] == 12 && trunc && strcmp(token, "t") == 0);
    }
    TEST_END();
}

static void test_open_args(void)
{
    wsync_store s;
    wsync_error err;
    wsync_s3_options o;
    memset(&o, 0, sizeof o);
    o.endpoint = "http://127.0.0.1:1";
    o.access_key_id = "k";
    o.secret_access_key = "s";
    TEST_BEGIN("s3 open: URLs, buckets, prefixes, regions and endpoints that are wrong are refused");
    CHECK_EQ_INT(wsync_store_s3_open("http://b/p", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_s3_open("s3://", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_s3_open("s3:///p", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_s3_open("s3://b?x/p", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_s3_open("s3://b/../p", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_s3_open("s3://b/a b\x01", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(wsync_store_s3_open(NULL, &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    o.region = "us:east";
    CHECK_EQ_INT(wsync_store_s3_open("s3://b/p", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    o.region = NULL;
    o.endpoint = "ftp://h";
    CHECK_EQ_INT(wsync_store_s3_open("s3://b/p", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "ftp://h") != NULL);
    o.endpoint = "http://127.0.0.1:1/";
    CHECK_EQ_INT(wsync_store_s3_open("S3://b//p/q//", &o, &s, &err), WSYNC_OK);
    wsync_store_close(&s);
    CHECK_EQ_INT(wsync_store_s3_open("s3://b", &o, &s, &err), WSYNC_OK);
    wsync_store_close(&s);
    TEST_END();

    TEST_BEGIN("s3 open: no credentials in the options or the environment is a clear error");
    {
        char *id = getenv("AWS_ACCESS_KEY_ID"), *sec = getenv("AWS_SECRET_ACCESS_KEY");
        char save_id[256] = "", save_sec[256] = "";
        if (id) snprintf(save_id, sizeof save_id, "%s", id);
        if (sec) snprintf(save_sec, sizeof save_sec, "%s", sec);
        unsetenv("AWS_ACCESS_KEY_ID");
        unsetenv("AWS_SECRET_ACCESS_KEY");
        o.access_key_id = o.secret_access_key = NULL;
        CHECK_EQ_INT(wsync_store_s3_open("s3://b/p", &o, &s, &err), WSYNC_ERR_INVALID_ARGUMENT);
        CHECK(strstr(err.message, "AWS_ACCESS_KEY_ID") != NULL);
        setenv("AWS_ACCESS_KEY_ID", "envkey", 1);
        setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
        CHECK_EQ_INT(wsync_store_s3_open("s3://b/p", &o, &s, &err), WSYNC_OK);
        wsync_store_close(&s);
        if (id) setenv("AWS_ACCESS_KEY_ID", save_id, 1);
        else unsetenv("AWS_ACCESS_KEY_ID");
        if (sec) setenv("AWS_SECRET_ACCESS_KEY", save_sec, 1);
        else unsetenv("AWS_SECRET_ACCESS_KEY");
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

static void test_auth(void)
{
    wsync_store s;
    wsync_s3_options o;
    wsync_error err;
    wsync_http_stats st;
    uint64_t size;
    collected c;
    TEST_BEGIN("s3: a wrong secret is WSYNC_ERR_AUTH with S3's code, after one request (SigV4 checked by the server)");
    fast_opts(&o);
    o.access_key_id = getenv("AWS_ACCESS_KEY_ID");
    o.secret_access_key = "not-the-secret";
    if (open_at("auth", &o, &s)) {
        CHECK_EQ_INT(s.put(s.user, "HEAD", "x", 1, &err), WSYNC_ERR_AUTH);
        CHECK_MSG(strstr(err.message, "SignatureDoesNotMatch") && strstr(err.message, "PUT"), "%s", err.message);
        CHECK(wsync_store_http_stats(&s, &st) && st.requests == 1 && st.retries == 0);
        CHECK_EQ_INT(s.head(s.user, "HEAD", &size, &err), WSYNC_ERR_AUTH); /* no body: the status says it */
        memset(&c, 0, sizeof c);
        CHECK_EQ_INT(s.list(s.user, "", collect, &c, &err), WSYNC_ERR_AUTH);
        CHECK(wsync_store_http_stats(&s, &st) && st.requests == 3 && st.retries == 0);
        wsync_store_close(&s);
    }
    o.access_key_id = "NOSUCHKEY";
    if (open_at("auth", &o, &s)) {
        CHECK_EQ_INT(s.put(s.user, "HEAD", "x", 1, &err), WSYNC_ERR_AUTH);
        CHECK_MSG(strstr(err.message, "InvalidAccessKeyId") != NULL, "%s", err.message);
        wsync_store_close(&s);
    }
    TEST_END();
    TEST_BEGIN("s3: a region other than the server's still signs consistently; a missing bucket lists as NO_STORE");
    fast_opts(&o);
    o.region = "eu-west-3";
    if (open_at("region", &o, &s)) {
        CHECK_MSG(s.put(s.user, "k", "v", 1, &err) == WSYNC_OK, "%s", err.message);
        wsync_store_close(&s);
    }
    fast_opts(&o);
    {
        wsync_store s2;
        if (wsync_store_s3_open("s3://no-such-bucket-here/p", &o, &s2, &err) == WSYNC_OK) {
            memset(&c, 0, sizeof c);
            CHECK_EQ_INT(s2.list(s2.user, "", collect, &c, &err), WSYNC_ERR_NO_STORE);
            /* HEAD has no body to say which: a reader's chain read goes on to the listing */
            CHECK_EQ_INT(s2.head(s2.user, "HEAD", &size, &err), WSYNC_ERR_NOT_FOUND);
            wsync_store_close(&s2);
        } else CHECK_MSG(0, "%s", err.message);
    }
    TEST_END();
}

typedef struct counted {
    size_t n;
    char first[64], last[64];
    int sorted;
    char prev[64];
} counted;

static int count_keys(void *user, const char *key, uint64_t size)
{
    counted *c = (counted *)user;
    (void)size;
    if (c->n == 0) snprintf(c->first, sizeof c->first, "%s", key);
    else if (strcmp(c->prev, key) >= 0) c->sorted = 0;
    snprintf(c->prev, sizeof c->prev, "%s", key);
    snprintf(c->last, sizeof c->last, "%s", key);
    c->n++;
    return 0;
}

static void test_pagination(void)
{
    wsync_store s;
    wsync_s3_options o;
    wsync_error err;
    wsync_http_stats st0, st1;
    counted c;
    int i, ok = 1;
    char key[64];
    fast_opts(&o);
    if (!open_at("pages", &o, &s)) return;
    TEST_BEGIN("s3: list past 1,000 keys follows continuation tokens (1,100 keys, 2+ pages), in byte order");
    for (i = 0; i < 1100 && ok; i++) {
        snprintf(key, sizeof key, "deltas/step_%06d.safetensors", i);
        ok = s.put(s.user, key, key, 4, &err) == WSYNC_OK;
        CHECK_MSG(ok, "put %s: %s", key, err.message);
    }
    CHECK(s.put(s.user, "HEAD", "{}", 2, &err) == WSYNC_OK);
    wsync_store_http_stats(&s, &st0);
    memset(&c, 0, sizeof c);
    c.sorted = 1;
    CHECK_MSG(s.list(s.user, "deltas/", count_keys, &c, &err) == WSYNC_OK, "%s", err.message);
    wsync_store_http_stats(&s, &st1);
    CHECK_EQ_INT(c.n, 1100);
    CHECK(c.sorted);
    CHECK_EQ_STR(c.first, "deltas/step_000000.safetensors");
    CHECK_EQ_STR(c.last, "deltas/step_001099.safetensors");
    CHECK_MSG(st1.requests - st0.requests >= 2, "%llu listing requests", (unsigned long long)(st1.requests - st0.requests));
    memset(&c, 0, sizeof c);
    c.sorted = 1;
    CHECK(s.list(s.user, "", count_keys, &c, &err) == WSYNC_OK);
    CHECK_EQ_INT(c.n, 1101);
    CHECK_EQ_STR(c.first, "HEAD");
    memset(&c, 0, sizeof c);
    CHECK(s.list(s.user, "deltas/step_0010", count_keys, &c, &err) == WSYNC_OK);
    CHECK_EQ_INT(c.n, 100);
    TEST_END();
    wsync_store_close(&s);
}

static void test_multipart(void)
{
    wsync_store s;
    wsync_s3_options o;
    wsync_error err;
    wsync_http_stats st0, st1;
    size_t n = (11u << 20) + 12345;
    uint8_t *big = pattern(n, 7), *all = NULL;
    uint64_t size = 0;
    collected c;
    fast_opts(&o);
    o.multipart_threshold = 6u << 20;
    o.multipart_part_size = 1u << 20; /* raised to S3's 5 MiB minimum */
    o.http.parallel_threshold = 4u << 20;
    o.http.part_size = 3u << 20;
    if (!open_at("multipart", &o, &s)) {
        free(big);
        return;
    }
    TEST_BEGIN("s3: above the threshold a multipart upload (3 parts of 5 MiB) reassembles bit-exact");
    wsync_store_http_stats(&s, &st0);
    CHECK_MSG(s.put(s.user, "anchors/step_000000.safetensors", big, n, &err) == WSYNC_OK, "%s", err.message);
    wsync_store_http_stats(&s, &st1);
    /* create, 3 parts, complete */
    CHECK_MSG(st1.requests - st0.requests == 5, "%llu requests", (unsigned long long)(st1.requests - st0.requests));
    CHECK_EQ_INT(s.head(s.user, "anchors/step_000000.safetensors", &size, &err), WSYNC_OK);
    CHECK_EQ_U64(size, n);
    CHECK_EQ_INT(wsync_store_get_all(&s, "anchors/step_000000.safetensors", NULL, &all, &size, &err), WSYNC_OK);
    CHECK(size == n && all && memcmp(all, big, n) == 0);
    free(all);
    wsync_store_http_stats(&s, &st1);
    CHECK_MSG(st1.parallel_gets >= 1, "the download went parallel: %llu", (unsigned long long)st1.parallel_gets);
    memset(&c, 0, sizeof c);
    CHECK(s.list(s.user, "", collect, &c, &err) == WSYNC_OK);
    CHECK_EQ_INT(c.n, 1);
    TEST_END();
    TEST_BEGIN("s3: a multipart upload replaces an object whole; below the threshold one PUT");
    big[0] ^= 0xFF;
    big[n - 1] ^= 0xFF;
    CHECK_MSG(s.put(s.user, "anchors/step_000000.safetensors", big, n, &err) == WSYNC_OK, "%s", err.message);
    CHECK_EQ_INT(wsync_store_get_all(&s, "anchors/step_000000.safetensors", NULL, &all, &size, &err), WSYNC_OK);
    CHECK(size == n && all && memcmp(all, big, n) == 0);
    free(all);
    wsync_store_http_stats(&s, &st0);
    CHECK(s.put(s.user, "small", big, 6u << 20, &err) == WSYNC_OK);
    wsync_store_http_stats(&s, &st1);
    CHECK_EQ_U64(st1.requests - st0.requests, 1);
    TEST_END();
    wsync_store_close(&s);
    free(big);
}

/* wsync_store_open_url("s3://..."): the options reach the S3 store (part
   size and threshold: a multipart upload of 3 parts), credentials and
   endpoint from the environment as tests/http/test_s3.sh sets them. */
static void test_open_url(void)
{
    wsync_store s;
    wsync_store_url_options o;
    wsync_http_stats st0, st1;
    wsync_error err;
    char url[512];
    size_t n = (11u << 20) + 99;
    uint8_t *big = pattern(n, 11), *all = NULL;
    uint64_t size = 0;
    TEST_BEGIN("open_url: s3:// with credentials from the environment; the part size and threshold reach it "
               "(3 parts of 5 MiB), read back bit-exact");
    snprintf(url, sizeof url, "s3://%s/%s/open-url", g_bucket, g_tag);
    memset(&o, 0, sizeof o);
    o.http.max_attempts = 3;
    o.http.backoff_ms = 20;
    o.s3.multipart_threshold = 6u << 20;
    o.s3.multipart_part_size = 5u << 20;
    CHECK_MSG(wsync_store_open_url(url, &o, &s, &err) == WSYNC_OK, "%s", err.message);
    if (s.put) {
        wsync_store_http_stats(&s, &st0);
        CHECK_MSG(s.put(s.user, "anchors/a", big, n, &err) == WSYNC_OK, "%s", err.message);
        wsync_store_http_stats(&s, &st1);
        CHECK_MSG(st1.requests - st0.requests == 5, "%llu requests",
                  (unsigned long long)(st1.requests - st0.requests));
        CHECK_MSG(wsync_store_get_all(&s, "anchors/a", NULL, &all, &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK(size == n && all && memcmp(all, big, n) == 0);
        free(all);
        CHECK_EQ_INT(s.del(s.user, "anchors/a", &err), WSYNC_OK);
        wsync_store_close(&s);
    }
    TEST_END();
    TEST_BEGIN("open_url: s3:// to a bucket that does not exist says so");
    CHECK_MSG(wsync_store_open_url("s3://no-such-bucket-here/p", &o, &s, &err) == WSYNC_OK, "%s", err.message);
    if (s.list) {
        collected c;
        memset(&c, 0, sizeof c);
        CHECK_EQ_INT(s.list(s.user, "", collect, &c, &err), WSYNC_ERR_NO_STORE);
        CHECK_MSG(strstr(err.message, "no such bucket"), "%s", err.message);
        wsync_store_close(&s);
    }
    TEST_END();
    free(big);
}

/* ======================================================================
   Through tests/http/s3/front.py: redirects (to another origin: a CDN stand-in
   that refuses credentials; to the same origin: still signed, s3rver
   checks), and the session token (captured, signed, tampered with)
   ====================================================================== */

static const char *g_front;

typedef struct grow {
    uint8_t *p;
    size_t n, cap;
} grow;

static int grow_sink(void *user, const void *b, size_t n)
{
    grow *g = (grow *)user;
    if (n > g->cap - g->n) {
        size_t cap = g->cap ? g->cap : 65536;
        uint8_t *q;
        while (cap - g->n < n) cap *= 2;
        if (!(q = (uint8_t *)realloc(g->p, cap))) return 1;
        g->p = q;
        g->cap = cap;
    }
    memcpy(g->p + g->n, b, n);
    g->n += n;
    return 0;
}

/* GET g_front + path; the body, malloc'd and NUL-terminated ("" on error). */
static char *front_ctl(const char *fmt, const char *arg)
{
    char path[512], url[700];
    CURL *c = curl_easy_init();
    FILE *f = tmpfile();
    char *out = NULL;
    long n = 0;
    snprintf(path, sizeof path, fmt, arg);
    snprintf(url, sizeof url, "%s%s", g_front, path);
    if (c && f) {
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
        if (curl_easy_perform(c) == CURLE_OK) n = ftell(f);
    }
    out = (char *)malloc((size_t)(n > 0 ? n : 0) + 1);
    if (out) {
        size_t got = 0;
        if (n > 0) {
            rewind(f);
            got = fread(out, 1, (size_t)n, f);
        }
        out[got] = 0;
    }
    if (f) fclose(f);
    if (c) curl_easy_cleanup(c);
    return out;
}

/* Lines of `text` that contain a and b (b may be NULL). */
static int count_lines(const char *text, const char *a, const char *b)
{
    int n = 0;
    const char *p = text;
    while (p && *p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        if (strstr(line, a) && (!b || strstr(line, b))) n++;
        p = e ? e + 1 : NULL;
    }
    return n;
}

static void test_front(void)
{
    static const char *const cookie[] = {"Cookie: session=wsync-secret", NULL};
    wsync_store direct, xs, ss, ts;
    wsync_s3_options o;
    wsync_error err;
    wsync_http_stats st;
    size_t n = (6u << 20) + 333;
    uint8_t *big = pattern(n, 9), *all = NULL;
    uint64_t size = 0;
    char needle[256], *seen;
    if (!g_front) {
        free(big);
        return;
    }
    fast_opts(&o);
    if (!open_at("front/plain", &o, &direct)) return;
    CHECK_EQ_INT(direct.put(direct.user, "HEAD", "{\"step\": 3}", 11, &err), WSYNC_OK);
    CHECK_EQ_INT(direct.put(direct.user, "anchors/big", big, n, &err), WSYNC_OK);
    o.endpoint = g_front;
    o.session_token = "wsync-token-1";
    o.http.headers = cookie;
    o.http.parallel = 3;
    o.http.parallel_threshold = 1u << 20;
    o.http.part_size = 1u << 20;
    free(front_ctl("/__front/clear%s", ""));

    TEST_BEGIN("s3 redirect: GET and HEAD follow a 302 to another origin (the gateway to its CDN), bit-exact");
    if (open_at("front/xhost", &o, &xs)) {
        grow g;
        CHECK_MSG(xs.head(xs.user, "HEAD", &size, &err) == WSYNC_OK && size == 11, "%s", err.message);
        CHECK_MSG(wsync_store_get_all(&xs, "HEAD", NULL, &all, &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK(all && size == 11 && memcmp(all, "{\"step\": 3}", 11) == 0);
        free(all);
        all = NULL;
        memset(&g, 0, sizeof g);
        CHECK_MSG(xs.get(xs.user, "anchors/big", 0, UINT64_MAX, grow_sink, &g, &size, &err) == WSYNC_OK, "%s",
                  err.message);
        CHECK(g.n == n && size == n && memcmp(g.p, big, n) == 0);
        free(g.p);
        wsync_store_http_stats(&xs, &st);
        CHECK_EQ_U64(st.parallel_gets, 1);
        CHECK_EQ_INT(xs.head(xs.user, "nope", &size, &err), WSYNC_ERR_NOT_FOUND);
        wsync_store_close(&xs);
    }
    TEST_END();

    TEST_BEGIN("s3 redirect: no signature, session token or Cookie reaches the other origin");
    snprintf(needle, sizeof needle, "/%s/front/plain/", g_tag);
    seen = front_ctl("/__front/seen?path=%s", needle);
    CHECK_MSG(count_lines(seen, "cdn ", NULL) >= 6, "%s", seen);
    CHECK_MSG(count_lines(seen, "cdn ", "token=[] cookie=[] auth=[0]") == count_lines(seen, "cdn ", NULL), "%s",
              seen);
    free(seen);
    snprintf(needle, sizeof needle, "/%s/front/xhost/", g_tag);
    seen = front_ctl("/__front/seen?path=%s", needle);
    /* at the gateway (our origin) they were all there, signed */
    CHECK_MSG(count_lines(seen, "front ", "token=[wsync-token-1] cookie=[session=wsync-secret] auth=[1]") ==
                      count_lines(seen, "front ", NULL) &&
                  count_lines(seen, "front ", NULL) >= 3,
              "%s", seen);
    free(seen);
    TEST_END();

    TEST_BEGIN("s3 redirect: a 307 on the same origin stays signed (s3rver verifies it)");
    if (open_at("front/same", &o, &ss)) {
        CHECK_MSG(wsync_store_get_all(&ss, "HEAD", NULL, &all, &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK(all && size == 11 && memcmp(all, "{\"step\": 3}", 11) == 0);
        free(all);
        all = NULL;
        wsync_store_close(&ss);
    }
    snprintf(needle, sizeof needle, "/%s/front/plain/HEAD", g_tag);
    seen = front_ctl("/__front/seen?path=%s", needle);
    CHECK_MSG(count_lines(seen, "front GET", "auth=[1]") >= 1, "%s", seen);
    free(seen);
    TEST_END();

    free(front_ctl("/__front/clear%s", ""));
    o.http.headers = NULL;
    if (open_at("front/plain", &o, &ts)) {
        collected c;
        TEST_BEGIN("s3 session token: sent as x-amz-security-token and signed; s3rver accepts the signature");
        CHECK_MSG(ts.put(ts.user, "HEAD", "{\"step\": 4}", 11, &err) == WSYNC_OK, "%s", err.message);
        CHECK_MSG(wsync_store_get_all(&ts, "HEAD", NULL, &all, &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK(all && size == 11 && memcmp(all, "{\"step\": 4}", 11) == 0);
        free(all);
        all = NULL;
        memset(&c, 0, sizeof c);
        CHECK_MSG(ts.list(ts.user, "", collect, &c, &err) == WSYNC_OK && c.n == 2, "%s", err.message);
        seen = front_ctl("/__front/seen?path=%s", g_tag);
        CHECK_MSG(count_lines(seen, "front ", NULL) >= 3 &&
                      count_lines(seen, "front ", "token=[wsync-token-1]") == count_lines(seen, "front ", NULL) &&
                      count_lines(seen, "front ", ";x-amz-security-token") == count_lines(seen, "front ", NULL),
                  "%s", seen);
        free(seen);
        TEST_END();
        TEST_BEGIN("s3 session token: changed on the way, the signature fails (WSYNC_ERR_AUTH, not retried)");
        free(front_ctl("/__front/clear%s", ""));
        free(front_ctl("/__front/tamper?on=1%s", ""));
        CHECK_EQ_INT(ts.head(ts.user, "HEAD", &size, &err), WSYNC_ERR_AUTH); /* a HEAD's 403 has no body */
        CHECK_EQ_INT(ts.put(ts.user, "HEAD", "x", 1, &err), WSYNC_ERR_AUTH);
        CHECK_MSG(strstr(err.message, "SignatureDoesNotMatch") != NULL, "%s", err.message);
        free(front_ctl("/__front/tamper?on=0%s", ""));
        CHECK_MSG(wsync_store_get_all(&ts, "HEAD", NULL, &all, &size, &err) == WSYNC_OK, "%s", err.message);
        CHECK(all && size == 11 && memcmp(all, "{\"step\": 4}", 11) == 0);
        free(all);
        all = NULL;
        seen = front_ctl("/__front/seen?path=%s", g_tag);
        /* the tampered HEAD and PUT once each (not retried), then get_all's HEAD */
        CHECK_MSG(count_lines(seen, "front HEAD", NULL) == 1 + 1 && count_lines(seen, "front PUT", NULL) == 1, "%s",
                  seen);
        free(seen);
        wsync_store_close(&ts);
        TEST_END();
    }

    TEST_BEGIN("s3 session token: AWS_SESSION_TOKEN is the default");
    o.session_token = NULL;
    setenv("AWS_SESSION_TOKEN", "wsync-token-env", 1);
    free(front_ctl("/__front/clear%s", ""));
    if (open_at("front/plain", &o, &ts)) {
        unsetenv("AWS_SESSION_TOKEN");
        CHECK_MSG(ts.head(ts.user, "HEAD", &size, &err) == WSYNC_OK, "%s", err.message);
        seen = front_ctl("/__front/seen?path=%s", g_tag);
        CHECK_MSG(count_lines(seen, "front HEAD", "token=[wsync-token-env]") == 1, "%s", seen);
        free(seen);
        wsync_store_close(&ts);
    }
    unsetenv("AWS_SESSION_TOKEN");
    TEST_END();
    free(big);
    wsync_store_close(&direct);
}

int main(void)
{
    static char tag[128];
    g_endpoint = getenv("WSYNC_TEST_S3_ENDPOINT");
    g_bucket = getenv("WSYNC_TEST_S3_BUCKET");
    g_tag = getenv("WSYNC_TEST_S3_TAG");
    g_front = getenv("WSYNC_TEST_S3_FRONT");
    if (!g_tag) {
        snprintf(tag, sizeof tag, "t%ld", (long)getpid());
        g_tag = tag;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_sigv4_pieces();
    test_listing_parser();
    test_open_args();
    if (!g_endpoint || !g_bucket) {
        printf("(WSYNC_TEST_S3_ENDPOINT and friends unset: run tests/http/test_s3.sh for the server tests)\n");
        curl_global_cleanup();
        return check_summary();
    }
    test_auth();
    test_multipart();
    test_open_url();
    test_pagination();
    test_front();
    curl_global_cleanup();
    return check_summary();
}
