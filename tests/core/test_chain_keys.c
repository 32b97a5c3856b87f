/* Keys and encodings of the chain (issue 21, defects 5 and 6).

   A bucket without HEAD whose step numbers are not zero-padded
   ("anchors/step_0.safetensors", "deltas/step_1.safetensors") is read from
   its listing and each object fetched by the key it was listed under; one
   step of one kind under two keys ("step_0" and "step_000000") is refused
   with WSYNC_ERR_BAD_HEAD naming both keys, by wsync_chain_read, the
   subscriber and the publisher (which with WSYNC_CHAIN_NEW_CHAIN still
   starts a new chain there). Only "step_" + 1 to 15 decimal digits +
   ".safetensors" is a step.

   HEAD records each delta's encoding in its entry: a chain continued by a
   publisher with another encoding names both, and a subscriber syncs across
   them bit-exact. A HEAD in the format before (no "encoding" in its
   entries) still parses, syncs and is continued; unknown keys in an entry
   are skipped, so a reader of that format reads the new one.

   Build against an older wsync.h with -DCK_OLD_HEADER (the entry's
   encoding field compiled out) to see the cases fail. */
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

#ifdef CK_OLD_HEADER
#define ENTRY_ENC(e) ((int)-1)
#else
#define ENTRY_ENC(e) ((int)(e)->encoding)
#endif

/* ---- a small bf16 model whose image is a function of the step ---- */

#define NW (64 * 32)
#define NB 32
static const uint64_t g_wshape[2] = {64, 32};
static const uint64_t g_bshape[1] = {NB};

typedef struct model {
    uint16_t w[NW], b[NB];
    wsync_tensor t[2];
} model;

static void model_views(model *m)
{
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

static void model_at(model *m, uint64_t step)
{
    size_t i;
    uint64_t s;
    for (i = 0; i < NW; i++) m->w[i] = (uint16_t)(0x3c00u + (i * 7) % 251);
    for (i = 0; i < NB; i++) m->b[i] = (uint16_t)(0x3f00u + i);
    for (s = 1; s <= step; s++) {
        for (i = 0; i < 12; i++) m->w[(s * 37 + i * 101) % NW] ^= 1u;
        m->b[s % NB] ^= 2u;
    }
    model_views(m);
}

/* 1 when m holds exactly the image of `step`. */
static int model_is(const model *m, uint64_t step)
{
    model want;
    model_at(&want, step);
    return memcmp(m->w, want.w, sizeof want.w) == 0 && memcmp(m->b, want.b, sizeof want.b) == 0;
}

static wsync_chain_options opts(wsync_encoding enc, const char *prefix, unsigned flags)
{
    wsync_chain_options o;
    memset(&o, 0, sizeof o);
    o.encoding = enc;
    o.prefix = prefix;
    o.anchor_every = 100;
    o.retain = 100;
    o.anchor_fraction = 1000; /* every step after the first a delta */
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

/* A fresh subscriber (no step, or `from` synced first when from_set)
   synced to `step`; the result, its error and the model reached. */
static wsync_result sync_to(const wsync_store *st, const char *prefix, int from_set, uint64_t from, uint64_t step,
                            model *m, wsync_sync_stats *ss, wsync_error *err)
{
    wsync_subscriber *s = NULL;
    wsync_chain_options o;
    wsync_result r;
    memset(&o, 0, sizeof o);
    o.prefix = prefix;
    o.flags = WSYNC_CHAIN_VERIFY_STATE;
    memset(m, 0, sizeof *m);
    model_views(m);
    memset(ss, 0, sizeof *ss);
    if ((r = wsync_subscriber_open(st, m->t, 2, &o, &s, err)) != WSYNC_OK) return r;
    if (from_set && (r = wsync_subscriber_sync(s, from, ss, err)) != WSYNC_OK) {
        wsync_subscriber_close(s);
        return r;
    }
    r = wsync_subscriber_sync(s, step, ss, err);
    wsync_subscriber_close(s);
    return r;
}

/* ---- stores ---- */

/* "<prefix>/<rel>" or "<rel>" */
static void key_of(char *buf, size_t cap, const char *prefix, const char *rel)
{
    if (prefix && *prefix) snprintf(buf, cap, "%s/%s", prefix, rel);
    else snprintf(buf, cap, "%s", rel);
}

/* Copies object `from` of src to key `to` of dst (both without prefix). */
static int copy_obj(const wsync_store *src, const char *sp, const char *from, const wsync_store *dst, const char *dp,
                    const char *to)
{
    char k1[256], k2[256];
    uint8_t *b = NULL;
    uint64_t size = 0;
    wsync_error err;
    int ok;
    key_of(k1, sizeof k1, sp, from);
    key_of(k2, sizeof k2, dp, to);
    if (wsync_store_get_all(src, k1, NULL, &b, &size, &err) != WSYNC_OK) {
        printf("  get %s: %s\n", k1, err.message);
        return 0;
    }
    ok = dst->put(dst->user, k2, b, (size_t)size, &err) == WSYNC_OK;
    if (!ok) printf("  put %s: %s\n", k2, err.message);
    free(b);
    return ok;
}

static int put_text(const wsync_store *st, const char *prefix, const char *rel, const char *text)
{
    char k[256];
    wsync_error err;
    key_of(k, sizeof k, prefix, rel);
    return st->put(st->user, k, text, strlen(text), &err) == WSYNC_OK;
}

/* A chain of steps 0..3 published in a memory store (anchor 0, deltas
   1..3, packed), the source of objects planted under other keys. */
static int source_chain(wsync_store *src)
{
    wsync_error err;
    wsync_chain_options o = opts(WSYNC_ENCODING_PACKED, NULL, 0);
    if (wsync_store_mem_open(NULL, src, &err) != WSYNC_OK) return 0;
    return publish_range(src, &o, 0, 3);
}

static const char *g_padded[4] = {"anchors/step_000000.safetensors", "deltas/step_000001.safetensors",
                                  "deltas/step_000002.safetensors", "deltas/step_000003.safetensors"};

/* ====================================================================== */
/* Defect 5: keys as listed */

static void test_unpadded(int dir, const char *prefix)
{
    static const char *keys[4] = {"anchors/step_0.safetensors", "deltas/step_1.safetensors",
                                  "deltas/step_02.safetensors", "deltas/step_000000000000003.safetensors"};
    sm_env e;
    wsync_store src;
    wsync_chain_info ci;
    wsync_error err;
    wsync_sync_stats ss;
    wsync_result r;
    model m;
    char name[160];
    size_t i;
    snprintf(name, sizeof name, "unpadded step numbers: listed, fetched by the key listed (%s, prefix %s)",
             dir ? "dir" : "mem", prefix ? prefix : "none");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_chain_keys"));
    CHECK(source_chain(&src));
    for (i = 0; i < 4; i++) CHECK(copy_obj(&src, NULL, g_padded[i], &e.st, prefix, keys[i]));
    {
        wsync_chain_options o = opts((wsync_encoding)0, prefix, 0);
        r = wsync_chain_read(&e.st, &o, &ci, &err);
    }
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    if (r == WSYNC_OK) {
        CHECK_EQ_INT(ci.has_head, 0);
        CHECK_EQ_U64(ci.head_step, 3);
        CHECK_EQ_U64(ci.anchor_step, 0);
        CHECK_EQ_U64(ci.n_entries, 4);
        for (i = 0; i < ci.n_entries && i < 4; i++) {
            CHECK_EQ_U64(ci.entries[i].step, i);
            CHECK_EQ_STR(ci.entries[i].key, keys[i]);
        }
        wsync_chain_info_free(&ci);
    }
    r = sync_to(&e.st, prefix, 0, 0, WSYNC_STEP_LATEST, &m, &ss, &err);
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    CHECK_EQ_U64(ss.step, 3);
    CHECK_EQ_INT(ss.verified, 0);
    CHECK(model_is(&m, 3));
    /* forward from a step, deltas only */
    r = sync_to(&e.st, prefix, 1, 1, 3, &m, &ss, &err);
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    CHECK_EQ_U64(ss.step, 3);
    CHECK(model_is(&m, 3));
    wsync_store_close(&src);
    sm_env_close(&e);
    TEST_END();
}

/* msg names both keys (in either order) */
static int names_both(const char *msg, const char *a, const char *b)
{
    return strstr(msg, a) && strstr(msg, b);
}

static void test_two_spellings(int dir, int delta)
{
    sm_env e;
    wsync_store src;
    wsync_chain_info ci;
    wsync_error err;
    wsync_sync_stats ss;
    wsync_publisher *p = NULL;
    wsync_result r;
    model m;
    char name[160], k1[64], k2[64];
    size_t i;
    const char *kind = delta ? "deltas" : "anchors";
    unsigned step = delta ? 2 : 0;
    snprintf(name, sizeof name, "%s step %u under two keys: refused, naming both (%s)", kind, step,
             dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_chain_keys"));
    CHECK(source_chain(&src));
    for (i = 0; i < 4; i++) CHECK(copy_obj(&src, NULL, g_padded[i], &e.st, NULL, g_padded[i]));
    snprintf(k1, sizeof k1, "%s/step_%u.safetensors", kind, step);
    snprintf(k2, sizeof k2, "%s/step_%06u.safetensors", kind, step);
    CHECK(copy_obj(&src, NULL, k2, &e.st, NULL, k1));
    memset(&err, 0, sizeof err);
    r = wsync_chain_read(&e.st, NULL, &ci, &err);
    CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
    CHECK_MSG(names_both(err.message, k1, k2), "message: %s", err.message);
    if (r == WSYNC_OK) wsync_chain_info_free(&ci);
    else CHECK(ci.entries == NULL && ci.n_entries == 0);

    /* the subscriber stays where it is */
    memset(&err, 0, sizeof err);
    r = sync_to(&e.st, NULL, 0, 0, WSYNC_STEP_LATEST, &m, &ss, &err);
    CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
    CHECK_MSG(names_both(err.message, k1, k2), "message: %s", err.message);

    /* the publisher refuses, saying what is wrong (not that HEAD fails) */
    {
        wsync_chain_options o = opts(WSYNC_ENCODING_PACKED, NULL, 0);
        memset(&err, 0, sizeof err);
        r = wsync_publisher_open(&e.st, &o, &p, &err);
        CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
        CHECK_MSG(names_both(err.message, k1, k2), "message: %s", err.message);
        CHECK_MSG(!strstr(err.message, "HEAD fails"), "message: %s", err.message);
        if (r == WSYNC_OK) wsync_publisher_close(p);
        p = NULL;
    }
    /* ... and starts a new chain there on request, after the newest step */
    {
        wsync_chain_options o = opts(WSYNC_ENCODING_PACKED, NULL, WSYNC_CHAIN_NEW_CHAIN);
        CHECK(publish_range(&e.st, &o, 4, 5));
        r = sync_to(&e.st, NULL, 0, 0, WSYNC_STEP_LATEST, &m, &ss, &err);
        CHECK_MSG(r == WSYNC_OK, "%s", err.message);
        CHECK_EQ_U64(ss.step, 5);
        CHECK(model_is(&m, 5));
    }
    wsync_store_close(&src);
    sm_env_close(&e);
    TEST_END();
}

/* Only "step_" + 1 to 15 decimal digits + ".safetensors" is a step. */
static void test_step_names(void)
{
    static const char *junk[] = {
        "anchors/step_.safetensors",          "anchors/step_-1.safetensors",
        "anchors/step_+1.safetensors",        "anchors/step_ 1.safetensors",
        "anchors/step_1 .safetensors",        "anchors/step_1e3.safetensors",
        "anchors/step_0x10.safetensors",      "anchors/step_1.5.safetensors",
        "anchors/step_1000000000000000.safetensors",     /* 16 digits: above WSYNC_STEP_MAX */
        "anchors/step_0000000000000001.safetensors",     /* 16 digits, leading zeros */
        "anchors/step_18446744073709551617.safetensors", /* past u64 */
        "anchors/step_99999999999999999999999999.safetensors",
        "anchors/step_1.safetensors.tmp",     "anchors/step_1.SAFETENSORS",
        "anchors/STEP_1.safetensors",         "anchors/x/step_1.safetensors",
        "anchors/step_1safetensors",          "deltas/step_-2.safetensors",
        "deltas/step_2.safetensors.part",
    };
    sm_env e;
    wsync_store src;
    wsync_chain_info ci;
    wsync_error err;
    wsync_result r;
    size_t i;
    TEST_BEGIN("listing: a step name is 1 to 15 decimal digits, nothing else (no sign, no overflow)");
    CHECK(sm_env_open(&e, 0, "test_chain_keys"));
    CHECK(source_chain(&src));
    CHECK(copy_obj(&src, NULL, g_padded[0], &e.st, NULL, "anchors/step_0.safetensors"));
    CHECK(copy_obj(&src, NULL, g_padded[0], &e.st, NULL, "anchors/step_999999999999999.safetensors"));
    for (i = 0; i < sizeof junk / sizeof *junk; i++) CHECK(put_text(&e.st, NULL, junk[i], "x"));
    r = wsync_chain_read(&e.st, NULL, &ci, &err);
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    if (r == WSYNC_OK) {
        CHECK_EQ_U64(ci.n_entries, 2);
        CHECK_EQ_U64(ci.head_step, WSYNC_STEP_MAX);
        if (ci.n_entries == 2) {
            CHECK_EQ_STR(ci.entries[0].key, "anchors/step_0.safetensors");
            CHECK_EQ_STR(ci.entries[1].key, "anchors/step_999999999999999.safetensors");
        }
        wsync_chain_info_free(&ci);
    }
    /* 15 digits with leading zeros is a step, and collides with its twin */
    CHECK(copy_obj(&src, NULL, g_padded[0], &e.st, NULL, "anchors/step_000000000000000.safetensors"));
    r = wsync_chain_read(&e.st, NULL, &ci, &err);
    CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
    CHECK_MSG(names_both(err.message, "anchors/step_0.safetensors", "anchors/step_000000000000000.safetensors"),
              "message: %s", err.message);
    if (r == WSYNC_OK) wsync_chain_info_free(&ci);
    wsync_store_close(&src);
    sm_env_close(&e);
    TEST_END();
}

/* ====================================================================== */
/* Defect 6: the encoding of each delta in HEAD */

static char *get_head(const wsync_store *st, size_t *len)
{
    uint8_t *b = NULL;
    uint64_t size = 0;
    wsync_error err;
    char *t;
    if (wsync_store_get_all(st, "HEAD", NULL, &b, &size, &err) != WSYNC_OK) return NULL;
    t = (char *)malloc((size_t)size + 1);
    memcpy(t, b, (size_t)size);
    t[size] = 0;
    free(b);
    *len = (size_t)size;
    return t;
}

/* The text of delta `step`'s entry in HEAD ("{\"step\":N,...}"), or "". */
static void head_entry(const char *head, uint64_t step, char *out, size_t cap)
{
    char pat[48];
    const char *d = strstr(head, "\"deltas\":["), *a, *z;
    out[0] = 0;
    if (!d) return;
    snprintf(pat, sizeof pat, "{\"step\":%llu,", (unsigned long long)step);
    if (!(a = strstr(d, pat)) || !(z = strchr(a, '}'))) return;
    snprintf(out, cap, "%.*s", (int)(z - a + 1), a);
}

/* HEAD's text with every delta entry's "encoding" taken out and "check"
   recomputed: what a publisher before this format wrote. */
static char *old_format(const char *head)
{
    size_t n = strlen(head), o = 0, i = 0;
    char *t = (char *)malloc(n + 64), *c;
    const char *deltas = strstr(head, "\"deltas\":[");
    while (i < n) {
        if (deltas && head + i > deltas && strncmp(head + i, ",\"encoding\":\"", 13) == 0) {
            const char *q = strchr(head + i + 13, '"');
            i = (size_t)(q - head) + 1;
            continue;
        }
        t[o++] = head[i++];
    }
    t[o] = 0;
    c = strstr(t, "\"check\":\"");
    {
        uint64_t d = wsync_digest(t, (size_t)(c - t));
        snprintf(c, 64, "\"check\":\"%016llx\"}\n", (unsigned long long)d);
    }
    return t;
}

static void test_mixed_encodings(int dir)
{
    sm_env e;
    wsync_chain_info ci;
    wsync_error err;
    wsync_sync_stats ss;
    wsync_result r;
    model m;
    char name[160], ent[256];
    char *head = NULL;
    size_t len = 0, i;
    uint64_t s;
    snprintf(name, sizeof name, "a chain continued with another encoding: HEAD names each delta's (%s)",
             dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_chain_keys"));
    {
        wsync_chain_options a = opts(WSYNC_ENCODING_PACKED, NULL, 0), b = opts(WSYNC_ENCODING_TRL_V1, NULL, 0);
        CHECK(publish_range(&e.st, &a, 0, 3));
        CHECK(publish_range(&e.st, &b, 4, 6));
    }
    CHECK((head = get_head(&e.st, &len)) != NULL);
    for (s = 1; head && s <= 6; s++) {
        head_entry(head, s, ent, sizeof ent);
        CHECK_MSG(strstr(ent, s <= 3 ? ",\"encoding\":\"packed\"}" : ",\"encoding\":\"trl-v1\"}") != NULL,
                  "delta %llu's entry: %s", (unsigned long long)s, ent);
    }
    CHECK(head && strstr(head, "\"encoding\":\"trl-v1\",\n\"anchors\":[") != NULL); /* the top-level one */
    CHECK(head && strstr(head, "\"version\":1,") != NULL);
    r = wsync_chain_read(&e.st, NULL, &ci, &err);
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    if (r == WSYNC_OK) {
        CHECK_EQ_INT(ci.encoding, WSYNC_ENCODING_TRL_V1);
        CHECK_EQ_U64(ci.n_entries, 7);
        for (i = 0; i < ci.n_entries; i++) {
            const wsync_chain_entry *en = &ci.entries[i];
            int want = en->kind == WSYNC_CHAIN_ANCHOR ? 0
                       : en->step <= 3                ? (int)WSYNC_ENCODING_PACKED
                                                      : (int)WSYNC_ENCODING_TRL_V1;
            CHECK_MSG(ENTRY_ENC(en) == want, "entry %s: encoding %d, want %d", en->key, ENTRY_ENC(en), want);
        }
        /* format gives HEAD's bytes back */
        {
            char *t = NULL;
            size_t tl = 0;
            CHECK(wsync_chain_head_format(&ci, &t, &tl, &err) == WSYNC_OK);
            CHECK(t && head && tl == len && memcmp(t, head, len) == 0);
            free(t);
        }
        wsync_chain_info_free(&ci);
    }
    /* bit-exact across both: from nothing, and from a packed step */
    r = sync_to(&e.st, NULL, 0, 0, WSYNC_STEP_LATEST, &m, &ss, &err);
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    CHECK_EQ_U64(ss.step, 6);
    CHECK(model_is(&m, 6));
    r = sync_to(&e.st, NULL, 1, 1, 6, &m, &ss, &err);
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    CHECK_EQ_U64(ss.step, 6);
    CHECK_EQ_INT(ss.deltas, 5);
    CHECK(model_is(&m, 6));

    /* HEAD in the format before: no encoding in its entries */
    if (head) {
        char *old = old_format(head);
        CHECK(strstr(old, "\"encoding\":\"packed\"") == NULL);
        CHECK(strstr(old, "\"encoding\":\"trl-v1\",\n\"anchors\"") != NULL);
        CHECK(put_text(&e.st, NULL, "HEAD", old));
        r = wsync_chain_read(&e.st, NULL, &ci, &err);
        CHECK_MSG(r == WSYNC_OK, "old HEAD: %s", err.message);
        if (r == WSYNC_OK) {
            CHECK_EQ_INT(ci.encoding, WSYNC_ENCODING_TRL_V1);
            CHECK_EQ_U64(ci.n_entries, 7);
            for (i = 0; i < ci.n_entries; i++)
                CHECK_MSG(ENTRY_ENC(&ci.entries[i]) == 0 || ENTRY_ENC(&ci.entries[i]) == -1, "entry %s: %d",
                          ci.entries[i].key, ENTRY_ENC(&ci.entries[i]));
            wsync_chain_info_free(&ci);
        }
        r = sync_to(&e.st, NULL, 0, 0, WSYNC_STEP_LATEST, &m, &ss, &err);
        CHECK_MSG(r == WSYNC_OK, "%s", err.message);
        CHECK_EQ_U64(ss.step, 6);
        CHECK(model_is(&m, 6));
        /* continued by a packed publisher: old entries stay unrecorded */
        {
            wsync_chain_options a = opts(WSYNC_ENCODING_PACKED, NULL, 0);
            CHECK(publish_range(&e.st, &a, 7, 7));
        }
        free(head);
        head = get_head(&e.st, &len);
        CHECK(head != NULL);
        if (head) {
            head_entry(head, 6, ent, sizeof ent);
            CHECK_MSG(ent[0] && !strstr(ent, "encoding"), "delta 6: %s", ent);
            head_entry(head, 7, ent, sizeof ent);
            CHECK_MSG(strstr(ent, ",\"encoding\":\"packed\"}") != NULL, "delta 7: %s", ent);
        }
        r = sync_to(&e.st, NULL, 1, 2, 7, &m, &ss, &err);
        CHECK_MSG(r == WSYNC_OK, "%s", err.message);
        CHECK_EQ_U64(ss.step, 7);
        CHECK(model_is(&m, 7));
        free(old);
    }
    free(head);
    sm_env_close(&e);
    TEST_END();
}

/* ---- HEAD texts written by hand ---- */

/* text + "\"check\":\"<digest>\"}\n" */
static char *with_check(const char *body)
{
    size_t n = strlen(body);
    char *t = (char *)malloc(n + 40);
    memcpy(t, body, n);
    snprintf(t + n, 40, "\"check\":\"%016llx\"}\n", (unsigned long long)wsync_digest(body, n));
    return t;
}

static wsync_result parse(const char *body, wsync_chain_info *ci, wsync_error *err)
{
    char *t = with_check(body);
    wsync_result r = wsync_chain_head_parse(t, strlen(t), NULL, ci, err);
    free(t);
    return r;
}

#define H_TOP "{\"format\":\"wsync-chain\",\"version\":1,\"step\":3,\"anchor\":1,\"state\":\"00000000000000a5\","
#define H_A1 "{\"step\":1,\"bytes\":7,\"digest\":\"0123456789abcdef\",\"state\":\"fedcba9876543210\""
#define H_D(s, b) "{\"step\":" s ",\"base\":" b ",\"bytes\":9,\"digest\":\"00000000deadbeef\",\"state\":\"0000000000000001\""

static void test_head_texts(void)
{
    wsync_chain_info ci;
    wsync_error err;
    wsync_result r;
    TEST_BEGIN("HEAD: a delta entry's encoding read; unknown keys and names skipped; bad ones refused");
    /* per-entry encodings, an unknown name, an "encoding" in an anchor (an
       unknown key there) and unknown keys of every kind around them */
    r = parse(H_TOP "\"encoding\":\"trl-v1\",\"anchors\":[" H_A1 ",\"encoding\":{\"x\":[1]}}],\"deltas\":["
                    H_D("2", "1") ",\"encoding\":\"packed-max\",\"later\":[1,{\"k\":null}]},"
                    H_D("3", "2") ",\"zz\":\"q\",\"encoding\":\"zstd-v9\",\"t\":1e-3}],\n",
              &ci, &err);
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    if (r == WSYNC_OK) {
        CHECK_EQ_U64(ci.n_entries, 3);
        CHECK_EQ_INT(ci.encoding, WSYNC_ENCODING_TRL_V1);
        if (ci.n_entries == 3) {
            CHECK_EQ_INT(ENTRY_ENC(&ci.entries[0]), 0);
            CHECK_EQ_INT(ENTRY_ENC(&ci.entries[1]), WSYNC_ENCODING_PACKED_MAX);
            CHECK_EQ_INT(ENTRY_ENC(&ci.entries[2]), 0); /* a later version's name */
            CHECK_EQ_STR(ci.entries[1].key, "deltas/step_000002.safetensors");
        }
        wsync_chain_info_free(&ci);
    }
    /* without any: the format before */
    r = parse(H_TOP "\"encoding\":\"packed\",\"anchors\":[" H_A1 "}],\"deltas\":[" H_D("2", "1") "}," H_D("3", "2")
                    "}],\n",
              &ci, &err);
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    if (r == WSYNC_OK) {
        CHECK_EQ_INT(ci.encoding, WSYNC_ENCODING_PACKED);
        if (ci.n_entries == 3) CHECK(ENTRY_ENC(&ci.entries[2]) <= 0);
        wsync_chain_info_free(&ci);
    }
    /* a delta's encoding twice, not a string, too long, escaped: refused */
    r = parse(H_TOP "\"anchors\":[" H_A1 "}],\"deltas\":[" H_D("2", "1") ",\"encoding\":\"packed\",\"encoding\":\"packed\"},"
                    H_D("3", "2") "}],\n",
              &ci, &err);
    CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
    CHECK_MSG(strstr(err.message, "duplicate") != NULL, "%s", err.message);
    r = parse(H_TOP "\"anchors\":[" H_A1 "}],\"deltas\":[" H_D("2", "1") ",\"encoding\":1}," H_D("3", "2") "}],\n", &ci,
              &err);
    CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
    r = parse(H_TOP "\"anchors\":[" H_A1 "}],\"deltas\":[" H_D("2", "1") ",\"encoding\":\"abcdefghijklmnop\"},"
                    H_D("3", "2") "}],\n",
              &ci, &err);
    CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
    r = parse(H_TOP "\"anchors\":[" H_A1 "}],\"deltas\":[" H_D("2", "1") ",\"encoding\":\"pack\\u0065d\"},"
                    H_D("3", "2") "}],\n",
              &ci, &err);
    CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
    /* 15 characters is the longest name read */
    r = parse(H_TOP "\"anchors\":[" H_A1 "}],\"deltas\":[" H_D("2", "1") ",\"encoding\":\"abcdefghijklmno\"},"
                    H_D("3", "2") "}],\n",
              &ci, &err);
    CHECK_MSG(r == WSYNC_OK, "%s", err.message);
    if (r == WSYNC_OK) wsync_chain_info_free(&ci);
    TEST_END();
}

int main(void)
{
    int dir;
    for (dir = 0; dir < 2; dir++) {
        test_unpadded(dir, NULL);
        test_unpadded(dir, "p/q");
        test_two_spellings(dir, 0);
        test_two_spellings(dir, 1);
        test_mixed_encodings(dir);
    }
    test_step_names();
    test_head_texts();
    return check_summary();
}
