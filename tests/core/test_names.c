/* Names and bases: two ways a follower could patch the wrong thing.

   1. Tensor names holding U+0000. The reader accepts them (as the reference
      safetensors does), but a wsync_tensor's name is a C string: "a\u0000x"
      read as one is "a". No such name may ever be matched to a target: not
      by wsync_st_find, not by the subscriber's anchors, not by
      wsync_delta_apply (trl-v1, trl-v3, packed); each refuses with an error
      that says so, and the targets are untouched.
   2. A store without HEAD (a TRL bucket) with a delta missing in the middle:
      the next delta's base is not the previous listed step. A delta that
      carries its base (prev_model_version) is checked against it; one that
      does not is followed only through consecutive steps. Either way the
      follower stops at the last good step and names the object. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- bytes ---- */

static int grow_sink(void *user, const void *bytes, size_t len)
{
    wsync_buffer *b = (wsync_buffer *)user;
    if (len > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        uint8_t *nb;
        while (cap - b->len < len) cap *= 2;
        if (!(nb = (uint8_t *)realloc(b->bytes, cap))) return 1;
        b->bytes = nb;
        b->cap = cap;
    }
    memcpy(b->bytes + b->len, bytes, len);
    b->len += len;
    return 0;
}

/* A safetensors file from a header written by hand (padded to 8 with
   spaces) and its data section. */
static wsync_buffer raw_file(const char *json, const void *data, size_t dlen)
{
    wsync_buffer b = {NULL, 0, 0};
    size_t jl = strlen(json), n = (jl + 7) / 8 * 8, i;
    uint8_t len8[8];
    for (i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)n >> (8 * i));
    grow_sink(&b, len8, 8);
    grow_sink(&b, json, jl);
    for (i = jl; i < n; i++) grow_sink(&b, " ", 1);
    if (dlen) grow_sink(&b, data, dlen);
    return b;
}

static int has(const char *s, const char *part) { return strstr(s, part) != NULL; }

/* Writes `in` again: every tensor name starting with `from` has it replaced
   by to[0..to_len); the metadata key `key` (when given) gets `val`, or is
   left out when val is NULL. */
static wsync_buffer st_rewrite(const wsync_buffer *in, const char *from, const char *to, size_t to_len,
                               const char *key, const char *val)
{
    wsync_buffer out = {NULL, 0, 0};
    wsync_st_file f;
    wsync_st_tensor_desc d[16];
    wsync_st_kv kv[24];
    char names[16][96];
    size_t i, nk = 0, fl = strlen(from);
    wsync_error err;
    if (wsync_st_parse(in->bytes, in->len, NULL, &f, &err) != WSYNC_OK || f.n_tensors > 16 || f.n_metadata > 23) {
        CHECK_MSG(0, "rewrite: %s", err.message);
        return out;
    }
    for (i = 0; i < f.n_tensors; i++) {
        const wsync_st_tensor *t = &f.tensors[i];
        size_t nl = t->name_len;
        if (nl >= fl && memcmp(t->name, from, fl) == 0 && nl - fl + to_len < sizeof names[i]) {
            memcpy(names[i], to, to_len);
            memcpy(names[i] + to_len, t->name + fl, nl - fl);
            nl = nl - fl + to_len;
        } else {
            memcpy(names[i], t->name, nl);
        }
        names[i][nl] = 0;
        d[i].name = names[i];
        d[i].name_len = nl;
        d[i].dtype = t->dtype;
        d[i].rank = t->rank;
        d[i].shape = t->shape;
        d[i].data = t->data;
        d[i].nbytes = t->end - t->begin;
    }
    for (i = 0; i < f.n_metadata; i++) {
        if (key && strcmp(f.metadata[i].key, key) == 0) continue;
        kv[nk++] = f.metadata[i];
    }
    if (key && val) {
        kv[nk].key = key, kv[nk].key_len = 0, kv[nk].value = val, kv[nk].value_len = 0;
        nk++;
    }
    CHECK_EQ_INT(wsync_st_write(d, f.n_tensors, kv, nk, grow_sink, &out, NULL, &err), WSYNC_OK);
    wsync_st_free(&f);
    return out;
}

/* ======================================================================
   1. Names holding U+0000
   ====================================================================== */

static const uint64_t g_sh2[1] = {2};

#define ENTRY(dt, shape, offs) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

static void test_find(void)
{
    static const uint16_t data[4] = {1, 2, 9, 9};
    wsync_buffer both = raw_file("{\"a\":" ENTRY("BF16", "[2]", "[0,4]")
                                 ",\"a\\u0000x\":" ENTRY("BF16", "[2]", "[4,8]") "}", data, 8);
    wsync_buffer only = raw_file("{\"a\\u0000x\":" ENTRY("BF16", "[2]", "[0,4]") "}", data + 2, 4);
    wsync_buffer clean = raw_file("{\"a\":" ENTRY("BF16", "[2]", "[0,4]") "}", data, 4);
    wsync_st_file f, g, h;
    wsync_error err;

    TEST_BEGIN("st_find: a name holding U+0000 is found by its length only, never as its C-string prefix");
    CHECK_EQ_INT(wsync_st_parse(both.bytes, both.len, NULL, &f, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_st_parse(only.bytes, only.len, NULL, &g, &err), WSYNC_OK);
    if (f.n_tensors == 2 && g.n_tensors == 1) {
        const wsync_st_tensor *a = wsync_st_find(&f, "a"), *ax = wsync_st_find_n(&f, "a\0x", 3);
        CHECK(a && a->name_len == 1 && a->data == f.data);
        CHECK(ax && ax->name_len == 3 && ax->data == f.data + 4);
        CHECK(wsync_st_find(&g, "a") == NULL);
        CHECK(wsync_st_find_n(&g, "a", 1) == NULL);
        CHECK(wsync_st_find_n(&g, "a\0x", 3) == g.tensors);
        CHECK(wsync_st_find_n(&g, "a\0", 2) == NULL);
    }
    TEST_END();

    TEST_BEGIN("st_check_names: refuses a file holding a name with U+0000, saying where; a clean file passes");
    CHECK_EQ_INT(wsync_st_parse(clean.bytes, clean.len, NULL, &h, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_st_check_names(&h, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_st_check_names(&f, &err), WSYNC_ERR_UNSUPPORTED);
    CHECK_MSG(has(err.message, "contains U+0000 at byte 1 of the name") && has(err.message, "C-string name"), "%s",
              err.message);
    CHECK_EQ_STR(err.tensor, "a?x");
    CHECK_EQ_INT(wsync_st_check_names(&g, &err), WSYNC_ERR_UNSUPPORTED);
    TEST_END();

    wsync_st_free(&f);
    wsync_st_free(&g);
    wsync_st_free(&h);
    free(both.bytes);
    free(only.bytes);
    free(clean.bytes);
}

static void test_subscriber_anchor(void)
{
    static const uint16_t d_both[4] = {1, 2, 9, 9}, d_only[2] = {9, 9};
    struct {
        const char *what, *json;
        const uint16_t *data;
        size_t dlen;
    } cases[2];
    size_t c;
    cases[0].what = "an anchor holding only \"a\\u0000x\"";
    cases[0].json = "{\"a\\u0000x\":" ENTRY("BF16", "[2]", "[0,4]") "}";
    cases[0].data = d_only, cases[0].dlen = 4;
    cases[1].what = "an anchor holding \"a\" and \"a\\u0000x\"";
    cases[1].json = "{\"__metadata__\":{\"step\":\"0\"},\"a\\u0000x\":" ENTRY("BF16", "[2]", "[4,8]")
                    ",\"a\":" ENTRY("BF16", "[2]", "[0,4]") "}";
    cases[1].data = d_both, cases[1].dlen = 8;
    for (c = 0; c < 2; c++) {
        wsync_store mem;
        wsync_error err;
        wsync_buffer b = raw_file(cases[c].json, cases[c].data, cases[c].dlen);
        uint16_t img[2] = {5, 6};
        wsync_tensor t;
        wsync_subscriber *s = NULL;
        char name[160];
        uint64_t step;
        snprintf(name, sizeof name, "subscriber: %s is refused for target \"a\", the target untouched", cases[c].what);
        TEST_BEGIN(name);
        CHECK_EQ_INT(wsync_store_mem_open(NULL, &mem, &err), WSYNC_OK);
        CHECK_EQ_INT(mem.put(mem.user, "anchors/step_000000.safetensors", b.bytes, b.len, &err), WSYNC_OK);
        t.name = "a", t.dtype = WSYNC_DTYPE_BF16, t.rank = 1, t.shape = g_sh2, t.data = img, t.nbytes = 4;
        CHECK_EQ_INT(wsync_subscriber_open(&mem, &t, 1, NULL, &s, &err), WSYNC_OK);
        if (s) {
            wsync_result r = wsync_subscriber_sync(s, WSYNC_STEP_LATEST, NULL, &err);
            CHECK_EQ_INT(r, WSYNC_ERR_UNSUPPORTED);
            CHECK_MSG(has(err.message, "U+0000") && has(err.message, "anchors/step_000000.safetensors"), "%s",
                      err.message);
            CHECK(img[0] == 5 && img[1] == 6);
            CHECK(!wsync_subscriber_step(s, &step));
            wsync_subscriber_close(s);
        }
        wsync_store_close(&mem);
        free(b.bytes);
        TEST_END();
    }
}

/* A delta on the target "a" (2 elements, [5, 6] -> [5, 7]) in `enc`, with
   "a" in every tensor name replaced by "a\u0000x". */
static wsync_buffer nul_delta(wsync_encoding enc)
{
    static uint16_t base[2] = {5, 6}, next[2] = {5, 7};
    wsync_tensor tb, tn;
    wsync_delta_options o;
    wsync_buffer b = {NULL, 0, 0}, out;
    wsync_error err;
    memset(&o, 0, sizeof o);
    o.encoding = enc;
    o.base_step = 0, o.step = 1;
    tb.name = "a", tb.dtype = WSYNC_DTYPE_BF16, tb.rank = 1, tb.shape = g_sh2, tb.data = base, tb.nbytes = 4;
    tn = tb;
    tn.data = next;
    CHECK_EQ_INT(wsync_delta_encode(&tb, &tn, 1, &o, grow_sink, &b, NULL, &err), WSYNC_OK);
    out = st_rewrite(&b, "a", "a\0x", 3, NULL, NULL);
    free(b.bytes);
    return out;
}

static void test_delta_apply(void)
{
    static const wsync_encoding encs[4] = {WSYNC_ENCODING_TRL_V1, WSYNC_ENCODING_TRL_V3, WSYNC_ENCODING_PACKED,
                                           WSYNC_ENCODING_PACKED_MAX};
    size_t e;
    for (e = 0; e < 4; e++) {
        wsync_buffer d = nul_delta(encs[e]);
        uint16_t img[2] = {5, 6};
        wsync_tensor t;
        wsync_error err;
        char name[160];
        snprintf(name, sizeof name, "delta_apply: a %s delta on \"a\\u0000x\" is refused for target \"a\"",
                 wsync_encoding_name(encs[e]));
        TEST_BEGIN(name);
        t.name = "a", t.dtype = WSYNC_DTYPE_BF16, t.rank = 1, t.shape = g_sh2, t.data = img, t.nbytes = 4;
        CHECK_EQ_INT(wsync_delta_apply(d.bytes, d.len, &t, 1, NULL, NULL, &err), WSYNC_ERR_UNSUPPORTED);
        CHECK_MSG(has(err.message, "contains U+0000 at byte 1 of the name"), "%s", err.message);
        CHECK(img[0] == 5 && img[1] == 6);
        TEST_END();
        free(d.bytes);
    }

    TEST_BEGIN("delta_apply: trl-v1 with U+0000 after the suffix (\"a.values\\u0000x\") is refused");
    {
        static const int32_t idx[1] = {1};
        static const uint16_t val[1] = {7};
        uint8_t data[6];
        wsync_buffer d;
        uint16_t img[2] = {5, 6};
        wsync_tensor t;
        wsync_error err;
        memcpy(data, idx, 4);
        memcpy(data + 4, val, 2);
        d = raw_file("{\"__metadata__\":{\"format\":\"sparse_weight_patch\",\"model_version\":\"1\"},"
                     "\"a.indices\":" ENTRY("I32", "[1]", "[0,4]")
                     ",\"a.values\\u0000x\":" ENTRY("BF16", "[1]", "[4,6]") "}", data, 6);
        t.name = "a", t.dtype = WSYNC_DTYPE_BF16, t.rank = 1, t.shape = g_sh2, t.data = img, t.nbytes = 4;
        CHECK_EQ_INT(wsync_delta_apply(d.bytes, d.len, &t, 1, NULL, NULL, &err), WSYNC_ERR_UNSUPPORTED);
        CHECK_MSG(has(err.message, "contains U+0000 at byte 8 of the name"), "%s", err.message);
        CHECK(img[0] == 5 && img[1] == 6);
        free(d.bytes);
    }
    TEST_END();

    TEST_BEGIN("delta_apply: the same deltas without U+0000 apply (the refusal is the name's alone)");
    for (e = 0; e < 4; e++) {
        static uint16_t base[2] = {5, 6}, next[2] = {5, 7};
        wsync_tensor tb, tn, t;
        wsync_delta_options o;
        wsync_buffer b = {NULL, 0, 0};
        wsync_error err;
        uint16_t img[2] = {5, 6};
        memset(&o, 0, sizeof o);
        o.encoding = encs[e];
        o.step = 1;
        tb.name = "a", tb.dtype = WSYNC_DTYPE_BF16, tb.rank = 1, tb.shape = g_sh2, tb.data = base, tb.nbytes = 4;
        tn = tb;
        tn.data = next;
        CHECK_EQ_INT(wsync_delta_encode(&tb, &tn, 1, &o, grow_sink, &b, NULL, &err), WSYNC_OK);
        t = tb;
        t.data = img;
        CHECK_EQ_INT(wsync_delta_apply(b.bytes, b.len, &t, 1, NULL, NULL, &err), WSYNC_OK);
        CHECK(img[0] == 5 && img[1] == 7);
        free(b.bytes);
    }
    TEST_END();
}

/* ======================================================================
   2. A bucket without HEAD, a delta missing in the middle
   ====================================================================== */

#define NS 6   /* steps 0..5 */
#define NE 256 /* elements of "w" */
static const uint64_t g_shw[1] = {NE};

static void ref_steps(uint16_t ref[NS][NE])
{
    size_t s, i;
    for (i = 0; i < NE; i++) ref[0][i] = (uint16_t)(0x3F00u + i);
    for (s = 1; s < NS; s++) {
        memcpy(ref[s], ref[s - 1], sizeof ref[s]);
        /* every step moves its own elements, so a wrong base shows */
        for (i = 0; i < 8; i++) ref[s][(s * 37 + i * 29) % NE] += (uint16_t)(s + 1);
    }
}

static wsync_tensor wt(uint16_t *data)
{
    wsync_tensor t;
    t.name = "w", t.dtype = WSYNC_DTYPE_BF16, t.rank = 1, t.shape = g_shw, t.data = data, t.nbytes = 2 * NE;
    return t;
}

/* prev: 0 as encoded (prev_model_version = base), 1 without it, 2 with "-1"
   (TRL's PatchMetadata default when the base is unknown). */
static void put_delta(wsync_store *st, uint16_t ref[NS][NE], uint64_t base, uint64_t step, wsync_encoding enc,
                      int prev)
{
    wsync_tensor tb = wt(ref[base]), tn = wt(ref[step]);
    wsync_delta_options o;
    wsync_buffer b = {NULL, 0, 0}, w;
    wsync_error err;
    char key[64];
    memset(&o, 0, sizeof o);
    o.encoding = enc;
    o.base_step = base, o.step = step;
    CHECK_EQ_INT(wsync_delta_encode(&tb, &tn, 1, &o, grow_sink, &b, NULL, &err), WSYNC_OK);
    w = prev ? st_rewrite(&b, "", "", 0, "prev_model_version", prev == 2 ? "-1" : NULL) : b;
    snprintf(key, sizeof key, "deltas/step_%06llu.safetensors", (unsigned long long)step);
    CHECK_EQ_INT(st->put(st->user, key, w.bytes, w.len, &err), WSYNC_OK);
    if (w.bytes != b.bytes) free(w.bytes);
    free(b.bytes);
}

static void put_anchor(wsync_store *st, uint16_t ref[NS][NE], uint64_t step)
{
    wsync_st_tensor_desc d;
    wsync_buffer b = {NULL, 0, 0};
    wsync_error err;
    char key[64];
    memset(&d, 0, sizeof d);
    d.name = "w", d.dtype = WSYNC_DTYPE_BF16, d.rank = 1, d.shape = g_shw, d.data = ref[step], d.nbytes = 2 * NE;
    CHECK_EQ_INT(wsync_st_write(&d, 1, NULL, 0, grow_sink, &b, NULL, &err), WSYNC_OK);
    snprintf(key, sizeof key, "anchors/step_%06llu.safetensors", (unsigned long long)step);
    CHECK_EQ_INT(st->put(st->user, key, b.bytes, b.len, &err), WSYNC_OK);
    free(b.bytes);
}

static const char *prev_name(int prev)
{
    return prev == 0 ? "with prev_model_version" : prev == 1 ? "without prev_model_version" : "prev_model_version -1";
}

static void test_gap(wsync_encoding enc, int prev)
{
    static uint16_t ref[NS][NE];
    uint16_t img[NE];
    wsync_store mem;
    wsync_error err;
    wsync_tensor t = wt(img);
    wsync_subscriber *s = NULL;
    wsync_result r;
    uint64_t step = 0, k;
    char name[200];
    ref_steps(ref);
    if (wsync_store_mem_open(NULL, &mem, &err) != WSYNC_OK) return;
    put_anchor(&mem, ref, 0);
    for (k = 1; k < NS; k++)
        if (k != 3) put_delta(&mem, ref, k - 1, k, enc, prev);

    snprintf(name, sizeof name, "no HEAD, %s %s, delta 3 missing: from nothing, stops at step 2 naming delta 4",
             wsync_encoding_name(enc), prev_name(prev));
    TEST_BEGIN(name);
    memset(img, 0, sizeof img);
    CHECK_EQ_INT(wsync_subscriber_open(&mem, &t, 1, NULL, &s, &err), WSYNC_OK);
    if (s) {
        r = wsync_subscriber_sync(s, WSYNC_STEP_LATEST, NULL, &err);
        CHECK_EQ_INT(r, WSYNC_ERR_NO_PATH);
        CHECK_MSG(has(err.message, "deltas/step_000004.safetensors"), "%s", err.message);
        if (prev == 0) CHECK_MSG(has(err.message, "applies to step 3"), "%s", err.message);
        else
            CHECK_MSG(has(err.message, "carries no base step and step 3 is missing from the listing"), "%s",
                      err.message);
        CHECK(wsync_subscriber_step(s, &step) && step == 2);
        CHECK(memcmp(img, ref[2], sizeof img) == 0);
        /* again, from step 2 */
        r = wsync_subscriber_sync(s, WSYNC_STEP_LATEST, NULL, &err);
        CHECK_EQ_INT(r, WSYNC_ERR_NO_PATH);
        CHECK_MSG(has(err.message, "deltas/step_000004.safetensors"), "%s", err.message);
        CHECK(wsync_subscriber_step(s, &step) && step == 2);
        CHECK(memcmp(img, ref[2], sizeof img) == 0);
        wsync_subscriber_close(s);
    }
    TEST_END();

    snprintf(name, sizeof name, "no HEAD, %s %s, delta 3 missing: consecutive steps 0..2 are followed, bit-exact",
             wsync_encoding_name(enc), prev_name(prev));
    TEST_BEGIN(name);
    memset(img, 0, sizeof img);
    CHECK_EQ_INT(wsync_subscriber_open(&mem, &t, 1, NULL, &s, &err), WSYNC_OK);
    if (s) {
        for (k = 0; k <= 2; k++) {
            r = wsync_subscriber_sync(s, k, NULL, &err);
            CHECK_MSG(r == WSYNC_OK, "step %llu: %s", (unsigned long long)k, err.message);
            CHECK(wsync_subscriber_step(s, &step) && step == k);
            CHECK(memcmp(img, ref[k], sizeof img) == 0);
        }
        wsync_subscriber_close(s);
    }
    TEST_END();

    snprintf(name, sizeof name, "no HEAD, %s %s: with delta 3 back, the latest step, bit-exact",
             wsync_encoding_name(enc), prev_name(prev));
    TEST_BEGIN(name);
    put_delta(&mem, ref, 2, 3, enc, prev);
    memset(img, 0, sizeof img);
    CHECK_EQ_INT(wsync_subscriber_open(&mem, &t, 1, NULL, &s, &err), WSYNC_OK);
    if (s) {
        r = wsync_subscriber_sync(s, WSYNC_STEP_LATEST, NULL, &err);
        CHECK_MSG(r == WSYNC_OK, "%s", err.message);
        CHECK(wsync_subscriber_step(s, &step) && step == NS - 1);
        CHECK(memcmp(img, ref[NS - 1], sizeof img) == 0);
        wsync_subscriber_close(s);
    }
    TEST_END();
    wsync_store_close(&mem);
}

/* A delta whose base is carried may skip steps: 4 on 2 is fine when it says 2. */
static void test_carried_skip(void)
{
    static uint16_t ref[NS][NE];
    uint16_t img[NE];
    wsync_store mem;
    wsync_error err;
    wsync_tensor t = wt(img);
    wsync_subscriber *s = NULL;
    uint64_t step = 0;
    ref_steps(ref);
    TEST_BEGIN("no HEAD: a delta carrying its base (4 on 2) bridges a step the listing lacks, bit-exact");
    if (wsync_store_mem_open(NULL, &mem, &err) != WSYNC_OK) return;
    put_anchor(&mem, ref, 0);
    put_delta(&mem, ref, 0, 1, WSYNC_ENCODING_TRL_V1, 0);
    put_delta(&mem, ref, 1, 2, WSYNC_ENCODING_TRL_V1, 0);
    put_delta(&mem, ref, 2, 4, WSYNC_ENCODING_TRL_V1, 0);
    put_delta(&mem, ref, 4, 5, WSYNC_ENCODING_TRL_V1, 0);
    memset(img, 0, sizeof img);
    CHECK_EQ_INT(wsync_subscriber_open(&mem, &t, 1, NULL, &s, &err), WSYNC_OK);
    if (s) {
        CHECK_MSG(wsync_subscriber_sync(s, WSYNC_STEP_LATEST, NULL, &err) == WSYNC_OK, "%s", err.message);
        CHECK(wsync_subscriber_step(s, &step) && step == 5);
        CHECK(memcmp(img, ref[5], sizeof img) == 0);
        wsync_subscriber_close(s);
    }
    wsync_store_close(&mem);
    TEST_END();
}

int main(void)
{
    test_find();
    test_subscriber_anchor();
    test_delta_apply();
    test_gap(WSYNC_ENCODING_TRL_V1, 0);
    test_gap(WSYNC_ENCODING_TRL_V1, 1);
    test_gap(WSYNC_ENCODING_TRL_V1, 2);
    test_gap(WSYNC_ENCODING_TRL_V3, 0);
    test_gap(WSYNC_ENCODING_TRL_V3, 1);
    test_carried_skip();
    return check_summary();
}
