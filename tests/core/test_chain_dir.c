/* Directory anchors: a model kept as shards and files (a Hugging Face
   checkpoint) published with wsync_publisher_set_layout.

   Each anchor is its shards (plain safetensors files of their tensors) and
   files under anchors/step_NNNNNN/, named in a version 2 HEAD; a subscriber
   reads them into its targets by name, streamed when it holds no step and
   spooled when it does; retention removes every object of an old anchor; a
   reopened publisher rebuilds its image from them; a bad shard is refused
   as a bad anchor is. Each case runs on the memory store and a directory
   store. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"
#include "small_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- five bf16 tensors in three shards, plus two files ---- */

#define NT 5
static const char *const g_names[NT] = {"model.w0", "model.b0", "model.w1", "model.b1", "lm_head"};
static const uint64_t g_shapes[NT][2] = {{48, 32}, {32, 1}, {64, 16}, {16, 1}, {20, 24}};
static const uint32_t g_ranks[NT] = {2, 1, 2, 1, 2};

typedef struct model {
    uint16_t *d[NT];
    size_t ne[NT];
    wsync_tensor t[NT];
} model;

static void model_init(model *m)
{
    size_t i;
    for (i = 0; i < NT; i++) {
        m->ne[i] = (size_t)(g_shapes[i][0] * g_shapes[i][1]);
        m->d[i] = (uint16_t *)calloc(m->ne[i], 2);
        m->t[i].name = g_names[i];
        m->t[i].dtype = WSYNC_DTYPE_BF16;
        m->t[i].rank = g_ranks[i];
        m->t[i].shape = g_shapes[i];
        m->t[i].data = m->d[i];
        m->t[i].nbytes = m->ne[i] * 2;
    }
}

static void model_free(model *m)
{
    size_t i;
    for (i = 0; i < NT; i++) free(m->d[i]);
}

/* The image at `step`: a base, then a few elements flipped per step. */
static void model_at(model *m, uint64_t step)
{
    size_t i, k;
    uint64_t s;
    for (i = 0; i < NT; i++)
        for (k = 0; k < m->ne[i]; k++) m->d[i][k] = (uint16_t)(0x3c00u + (i * 131 + k * 7) % 251);
    for (s = 1; s <= step; s++)
        for (i = 0; i < NT; i++)
            for (k = 0; k < 5; k++) m->d[i][(s * 37 + k * 101 + i) % m->ne[i]] ^= (uint16_t)(1u + (s & 3));
}

static int model_same(const model *a, const model *b)
{
    size_t i;
    for (i = 0; i < NT; i++)
        if (memcmp(a->d[i], b->d[i], a->ne[i] * 2) != 0) return 0;
    return 1;
}

static const char g_config[] = "{\"architectures\": [\"TestForCausalLM\"], \"hidden_size\": 32}\n";
static const char g_index[] = "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {}}\n";
static const char *const g_shard_names[3] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                             "model-00003-of-00003.safetensors"};

static wsync_result set_layout(wsync_publisher *p, const char *config, wsync_error *err)
{
    wsync_anchor_shard sh[3];
    wsync_anchor_file f[2];
    memset(sh, 0, sizeof sh); /* fields not set here (metadata) 0 */
    sh[0].name = g_shard_names[0], sh[0].first = 0, sh[0].count = 2;
    sh[1].name = g_shard_names[1], sh[1].first = 2, sh[1].count = 1;
    sh[2].name = g_shard_names[2], sh[2].first = 3, sh[2].count = 2;
    f[0].name = "config.json", f[0].data = config, f[0].size = strlen(config);
    f[1].name = "model.safetensors.index.json", f[1].data = g_index, f[1].size = strlen(g_index);
    return wsync_publisher_set_layout(p, sh, 3, f, 2, err);
}

static wsync_chain_options opts(uint32_t k, uint32_t retain, unsigned flags)
{
    wsync_chain_options o;
    memset(&o, 0, sizeof o);
    o.anchor_every = k;
    o.retain = retain;
    o.flags = flags;
    return o;
}

/* Publishes from..to with one publisher in the directory layout; the
   number of anchors written, or -1. */
static int publish_range(const wsync_store *st, const wsync_chain_options *o, uint64_t from, uint64_t to,
                         const char *config)
{
    wsync_publisher *p = NULL;
    wsync_error err;
    uint64_t s;
    int anchors = 0;
    model m;
    if (wsync_publisher_open(st, o, &p, &err) != WSYNC_OK || set_layout(p, config, &err) != WSYNC_OK) {
        printf("  open: %s\n", err.message);
        wsync_publisher_close(p);
        return -1;
    }
    model_init(&m);
    for (s = from; s <= to && anchors >= 0; s++) {
        wsync_publish_stats ps;
        model_at(&m, s);
        if (wsync_publish(p, s, m.t, NT, &ps, &err) != WSYNC_OK) {
            printf("  publish %llu: %s\n", (unsigned long long)s, err.message);
            anchors = -1;
        } else if (ps.wrote_anchor) {
            anchors++;
        }
    }
    model_free(&m);
    wsync_publisher_close(p);
    return anchors;
}

static int has_key(const wsync_store *st, const char *key)
{
    uint64_t size;
    return st->head(st->user, key, &size, NULL) == WSYNC_OK;
}

static int anchor_key(char *buf, size_t cap, uint64_t step, const char *name)
{
    return snprintf(buf, cap, "anchors/step_%06llu/%s", (unsigned long long)step, name) < (int)cap;
}

/* Flips one byte of an object in place (a corrupt upload). */
static int flip_object(const wsync_store *st, const char *key, uint64_t at)
{
    uint8_t *b = NULL;
    uint64_t n = 0;
    int ok;
    if (wsync_store_get_all(st, key, NULL, &b, &n, NULL) != WSYNC_OK || at >= n) return 0;
    b[at] ^= 0x40;
    ok = st->put(st->user, key, b, (size_t)n, NULL) == WSYNC_OK;
    free(b);
    return ok;
}

/* A subscriber over fresh targets; syncs to `step`. */
static wsync_result sync_fresh(const wsync_store *st, uint64_t step, model *out, wsync_sync_stats *ss,
                               wsync_error *err)
{
    wsync_subscriber *s = NULL;
    wsync_chain_options o = opts(0, 0, WSYNC_CHAIN_VERIFY_STATE);
    wsync_result r;
    model_init(out);
    if ((r = wsync_subscriber_open(st, out->t, NT, &o, &s, err)) != WSYNC_OK) return r;
    r = wsync_subscriber_sync(s, step, ss, err);
    wsync_subscriber_close(s);
    return r;
}

/* ====================================================================== */

/* Objects, HEAD, retention, and the shards as files a loader reads. */
static void test_layout(int dir)
{
    sm_env e;
    char key[200], name[80];
    uint8_t *b = NULL;
    uint64_t n = 0;
    wsync_chain_info c;
    wsync_error err;
    wsync_chain_options o = opts(4, 2, 0);
    model m, want;
    size_t i;
    snprintf(name, sizeof name, "directory anchors: objects, HEAD, retention (%s)", dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_chain_dir"));
    CHECK_EQ_INT(publish_range(&e.st, &o, 0, 9, g_config), 3); /* anchors 0, 4, 8 */
    CHECK(wsync_store_get_all(&e.st, "HEAD", NULL, &b, &n, NULL) == WSYNC_OK);
    CHECK(b && strstr((const char *)b, "\"version\":2") != NULL);
    CHECK(b && strstr((const char *)b, "\"name\":\"model-00002-of-00003.safetensors\"") != NULL);
    free(b);
    b = NULL;
    CHECK(wsync_chain_read(&e.st, &o, &c, &err) == WSYNC_OK);
    CHECK_EQ_INT(c.anchor_step, 8);
    for (i = 0; i < c.n_entries; i++) {
        const wsync_chain_entry *en = &c.entries[i];
        if (en->kind != WSYNC_CHAIN_ANCHOR) continue;
        CHECK_EQ_INT(en->n_files, 5);
        CHECK_EQ_STR(en->key, "anchors/step_000008/");
        CHECK_EQ_INT(en->files[0].tensors, 2);
        CHECK_EQ_INT(en->files[3].tensors, 0);
        CHECK_EQ_STR(en->files[3].name, "config.json");
    }
    wsync_chain_info_free(&c);
    /* retention: every object of anchors 0 and 4 went */
    for (i = 0; i < 3; i++) {
        CHECK(anchor_key(key, sizeof key, 0, g_shard_names[i]) && !has_key(&e.st, key));
        CHECK(anchor_key(key, sizeof key, 4, g_shard_names[i]) && !has_key(&e.st, key));
        CHECK(anchor_key(key, sizeof key, 8, g_shard_names[i]) && has_key(&e.st, key));
    }
    CHECK(anchor_key(key, sizeof key, 4, "config.json") && !has_key(&e.st, key));
    /* the files byte for byte, each shard a safetensors file of its tensors */
    CHECK(anchor_key(key, sizeof key, 8, "config.json") &&
          wsync_store_get_all(&e.st, key, NULL, &b, &n, NULL) == WSYNC_OK);
    CHECK(b && n == strlen(g_config) && memcmp(b, g_config, (size_t)n) == 0);
    free(b);
    b = NULL;
    model_init(&want);
    model_at(&want, 8);
    CHECK(anchor_key(key, sizeof key, 8, g_shard_names[2]) &&
          wsync_store_get_all(&e.st, key, NULL, &b, &n, NULL) == WSYNC_OK);
    if (b) {
        wsync_st_file f;
        CHECK(wsync_st_parse(b, n, NULL, &f, &err) == WSYNC_OK);
        CHECK_EQ_INT(f.n_tensors, 2);
        CHECK(f.n_tensors == 2 && strcmp(f.tensors[0].name, "model.b1") == 0 &&
              memcmp(f.tensors[0].data, want.d[3], want.ne[3] * 2) == 0 &&
              memcmp(f.tensors[1].data, want.d[4], want.ne[4] * 2) == 0);
        CHECK(wsync_st_metadata_get(&f, "step") && strcmp(wsync_st_metadata_get(&f, "step"), "000008") == 0);
        wsync_st_free(&f);
        free(b);
    }
    /* a fresh subscriber streams the shards into its targets */
    {
        wsync_sync_stats ss;
        model_at(&want, 9);
        CHECK(sync_fresh(&e.st, WSYNC_STEP_LATEST, &m, &ss, &err) == WSYNC_OK);
        CHECK_EQ_INT(ss.step, 9);
        CHECK_EQ_INT(ss.anchors, 1);
        CHECK(model_same(&m, &want));
        model_free(&m);
    }
    model_free(&want);
    sm_env_close(&e);
    TEST_END();
}

/* A subscriber that holds a step spools a directory anchor (routing around
   a corrupt delta), and a corrupt shard is refused like a corrupt anchor. */
static void test_follow(int dir)
{
    sm_env e;
    char key[200], name[80];
    wsync_error err;
    wsync_chain_options o = opts(4, 20, 0);
    wsync_chain_options so = opts(0, 0, WSYNC_CHAIN_VERIFY_STATE);
    wsync_subscriber *s = NULL;
    wsync_sync_stats ss;
    model m, want;
    snprintf(name, sizeof name, "directory anchors: spooled around a bad delta, a bad shard refused (%s)",
             dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_chain_dir"));
    model_init(&want);
    CHECK_EQ_INT(publish_range(&e.st, &o, 0, 3, g_config), 1);
    model_init(&m);
    CHECK(wsync_subscriber_open(&e.st, m.t, NT, &so, &s, &err) == WSYNC_OK);
    CHECK(wsync_subscriber_sync(s, WSYNC_STEP_LATEST, &ss, &err) == WSYNC_OK && ss.step == 3);
    model_at(&want, 3);
    CHECK(model_same(&m, &want));
    CHECK_EQ_INT(publish_range(&e.st, &o, 4, 9, g_config), 2); /* anchors 4 and 8 */
    /* delta 5 and the first shard of anchor 4 corrupt: deltas 4 (from 3),
       then anchor 8, spooled, then delta 9 */
    CHECK(flip_object(&e.st, "deltas/step_000005.safetensors", 100));
    CHECK(anchor_key(key, sizeof key, 4, g_shard_names[0]) && flip_object(&e.st, key, 300));
    CHECK(wsync_subscriber_sync(s, WSYNC_STEP_LATEST, &ss, &err) == WSYNC_OK);
    CHECK_EQ_INT(ss.step, 9);
    CHECK_EQ_INT(ss.anchors, 1);
    CHECK(ss.rejected >= 1);
    model_at(&want, 9);
    CHECK_MSG(model_same(&m, &want), "%s", ss.path);
    CHECK_MSG(strstr(ss.path, "anchor 8") != NULL, "%s", ss.path); /* spooled: the targets held step 3 */
    wsync_subscriber_close(s);
    model_free(&m);
    /* a shard of anchor 8 corrupt too: a fresh subscriber has no way in
       (anchor 4 is bad, 0 is the only other) but anchor 0 and deltas 1..4 */
    CHECK(anchor_key(key, sizeof key, 8, g_shard_names[1]) && flip_object(&e.st, key, 200));
    CHECK(sync_fresh(&e.st, 9, &m, &ss, &err) != WSYNC_OK);
    model_free(&m);
    CHECK(sync_fresh(&e.st, 4, &m, &ss, &err) == WSYNC_OK && ss.step == 4);
    model_at(&want, 4);
    CHECK(model_same(&m, &want));
    model_free(&m);
    /* a subscriber at step 7 keeps it when the only way on is the bad anchor
       8 and delta 8 is gone */
    {
        uint64_t dummy;
        CHECK(e.st.del(e.st.user, "deltas/step_000008.safetensors", NULL) == WSYNC_OK);
        model_init(&m);
        model_at(&m, 7);
        CHECK(wsync_subscriber_open(&e.st, m.t, NT, &so, &s, &err) == WSYNC_OK);
        wsync_subscriber_set_step(s, 7);
        CHECK(wsync_subscriber_sync(s, 9, &ss, &err) != WSYNC_OK);
        CHECK(wsync_subscriber_step(s, &dummy) && dummy == 7);
        model_at(&want, 7);
        CHECK(model_same(&m, &want));
        wsync_subscriber_close(s);
        model_free(&m);
    }
    model_free(&want);
    sm_env_close(&e);
    TEST_END();
}

/* A reopened publisher rebuilds its image from a directory anchor (and
   writes a delta); a changed file forces an anchor that carries it. */
static void test_reopen(int dir)
{
    sm_env e;
    char key[200], name[80];
    wsync_error err;
    wsync_chain_options o = opts(50, 100, 0);
    wsync_publisher *p = NULL;
    wsync_publish_stats ps;
    uint8_t *b = NULL;
    uint64_t n = 0;
    model m;
    snprintf(name, sizeof name, "directory anchors: a publisher reopened, a file changed (%s)", dir ? "dir" : "mem");
    TEST_BEGIN(name);
    CHECK(sm_env_open(&e, dir, "test_chain_dir"));
    CHECK_EQ_INT(publish_range(&e.st, &o, 0, 2, g_config), 1);
    model_init(&m);
    CHECK(wsync_publisher_open(&e.st, &o, &p, &err) == WSYNC_OK);
    CHECK(set_layout(p, g_config, &err) == WSYNC_OK);
    model_at(&m, 3);
    CHECK(wsync_publish(p, 3, m.t, NT, &ps, &err) == WSYNC_OK);
    CHECK_EQ_INT(ps.wrote_anchor, 0);
    CHECK_EQ_INT(ps.wrote_delta, 1);
    CHECK(set_layout(p, "{\"hidden_size\": 33}\n", &err) == WSYNC_OK);
    model_at(&m, 4);
    CHECK(wsync_publish(p, 4, m.t, NT, &ps, &err) == WSYNC_OK);
    CHECK_EQ_INT(ps.wrote_anchor, 1);
    CHECK(anchor_key(key, sizeof key, 4, "config.json") &&
          wsync_store_get_all(&e.st, key, NULL, &b, &n, NULL) == WSYNC_OK);
    CHECK(b && n == 20 && memcmp(b, "{\"hidden_size\": 33}\n", 20) == 0);
    free(b);
    /* the layout checked against what is published */
    {
        wsync_anchor_shard sh[2];
        memset(sh, 0, sizeof sh);
        sh[0].name = "a.safetensors", sh[0].first = 0, sh[0].count = 2;
        sh[1].name = "b.safetensors", sh[1].first = 2, sh[1].count = 2;
        CHECK(wsync_publisher_set_layout(p, sh, 2, NULL, 0, &err) == WSYNC_OK);
        model_at(&m, 5);
        CHECK(wsync_publish(p, 5, m.t, NT, &ps, &err) == WSYNC_ERR_INVALID_ARGUMENT);
        sh[1].first = 3;
        CHECK(wsync_publisher_set_layout(p, sh, 2, NULL, 0, &err) == WSYNC_ERR_INVALID_ARGUMENT);
        sh[1].first = 2, sh[1].name = "../b.safetensors";
        CHECK(wsync_publisher_set_layout(p, sh, 2, NULL, 0, &err) == WSYNC_ERR_INVALID_ARGUMENT);
        sh[1].name = "a.safetensors";
        CHECK(wsync_publisher_set_layout(p, sh, 2, NULL, 0, &err) == WSYNC_ERR_INVALID_ARGUMENT);
        /* back to one object */
        CHECK(wsync_publisher_set_layout(p, NULL, 0, NULL, 0, &err) == WSYNC_OK);
        CHECK(wsync_publish(p, 5, m.t, NT, &ps, &err) == WSYNC_OK);
        CHECK_EQ_INT(ps.wrote_anchor, 1);
        CHECK(has_key(&e.st, "anchors/step_000005.safetensors"));
    }
    wsync_publisher_close(p);
    {
        model got;
        wsync_sync_stats ss;
        CHECK(sync_fresh(&e.st, WSYNC_STEP_LATEST, &got, &ss, &err) == WSYNC_OK && ss.step == 5);
        CHECK(model_same(&got, &m));
        model_free(&got);
    }
    model_free(&m);
    sm_env_close(&e);
    TEST_END();
}

/* The background prefetch spools a directory anchor and hands it over. */
static void test_prefetch(void)
{
    sm_env e;
    wsync_error err;
    wsync_chain_options o = opts(3, 20, 0);
    wsync_chain_options so = opts(0, 0, WSYNC_CHAIN_VERIFY_STATE);
    wsync_subscriber *s = NULL;
    wsync_sync_stats ss;
    uint64_t ready = 0;
    model m, want;
    int i;
    TEST_BEGIN("directory anchors: the prefetch spools one and apply_ready takes it");
    CHECK(sm_env_open(&e, 0, "test_chain_dir"));
    CHECK_EQ_INT(publish_range(&e.st, &o, 0, 1, g_config), 1);
    model_init(&m);
    model_init(&want);
    CHECK(wsync_subscriber_open(&e.st, m.t, NT, &so, &s, &err) == WSYNC_OK);
    CHECK(wsync_subscriber_sync(s, WSYNC_STEP_LATEST, &ss, &err) == WSYNC_OK && ss.step == 1);
    CHECK_EQ_INT(publish_range(&e.st, &o, 2, 7, g_config), 2); /* anchors 3 and 6 */
    CHECK(flip_object(&e.st, "deltas/step_000004.safetensors", 90));
    CHECK(wsync_subscriber_start(s, 5, &err) == WSYNC_OK);
    for (i = 0; i < 400 && !(wsync_subscriber_ready(s, &ready) && ready == 7); i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ_INT(ready, 7);
    CHECK(wsync_subscriber_apply_ready(s, &ss, &err) == WSYNC_OK);
    CHECK_EQ_INT(ss.step, 7);
    CHECK_MSG(strstr(ss.path, "anchor 6") != NULL, "%s", ss.path);
    model_at(&want, 7);
    CHECK_MSG(model_same(&m, &want), "%s", ss.path);
    wsync_subscriber_close(s);
    model_free(&m);
    model_free(&want);
    sm_env_close(&e);
    TEST_END();
}

/* HEAD's directory anchors: the rules of version 2. */
static void test_head_rules(void)
{
    wsync_chain_info c, back;
    wsync_chain_entry en;
    wsync_chain_file f[2];
    wsync_error err;
    char *text = NULL, *t2;
    size_t len = 0;
    TEST_BEGIN("directory anchors: HEAD version 2 written, read back, and its rules");
    memset(&c, 0, sizeof c);
    memset(&en, 0, sizeof en);
    memset(f, 0, sizeof f);
    snprintf(f[0].name, sizeof f[0].name, "model.safetensors");
    f[0].bytes = 1000, f[0].digest = 0x1234, f[0].tensors = 7, f[0].step = 5;
    snprintf(f[1].name, sizeof f[1].name, "config.json");
    f[1].bytes = 30, f[1].digest = 0x99, f[1].step = 5;
    en.kind = WSYNC_CHAIN_ANCHOR;
    en.step = en.base = 5;
    en.has_digests = 1;
    en.bytes = 1030;
    en.state = 0xabc;
    en.files = f;
    en.n_files = 2;
    {
        /* the entry's digest is wsync64 of its files' digests */
        uint8_t d[16];
        size_t k;
        for (k = 0; k < 8; k++) d[k] = (uint8_t)(f[0].digest >> (8 * k)), d[8 + k] = (uint8_t)(f[1].digest >> (8 * k));
        en.digest = wsync_digest(d, 16);
    }
    c.has_head = 1;
    c.head_step = c.anchor_step = 5;
    c.entries = &en;
    c.n_entries = 1;
    CHECK(wsync_chain_head_format(&c, &text, &len, &err) == WSYNC_OK);
    CHECK(text && strstr(text, "\"version\":2") && strstr(text, "\"tensors\":7"));
    CHECK(text && wsync_chain_head_parse(text, len, NULL, &back, &err) == WSYNC_OK);
    if (text && back.n_entries == 1) {
        CHECK_EQ_INT(back.entries[0].n_files, 2);
        CHECK_EQ_STR(back.entries[0].key, "anchors/step_000005/");
        CHECK_EQ_STR(back.entries[0].files[1].name, "config.json");
        CHECK_EQ_U64(back.entries[0].files[0].bytes, 1000);
        wsync_chain_info_free(&back);
    }
    /* version 1 with files: refused (an older reader would look for one object) */
    if (text && (t2 = strstr(text, "\"version\":2")) != NULL) {
        char *copy = (char *)malloc(len + 1);
        memcpy(copy, text, len + 1);
        copy[(t2 - text) + 10] = '1';
        CHECK(wsync_chain_head_parse(copy, len, NULL, &back, &err) == WSYNC_ERR_BAD_HEAD);
        free(copy);
    }
    free(text);
    /* what the formatter refuses to write */
    en.bytes = 1031; /* not the files' sum */
    CHECK(wsync_chain_head_format(&c, &text, &len, &err) == WSYNC_ERR_BAD_HEAD);
    en.bytes = 1030;
    snprintf(f[1].name, sizeof f[1].name, "../x");
    CHECK(wsync_chain_head_format(&c, &text, &len, &err) == WSYNC_ERR_BAD_HEAD);
    snprintf(f[1].name, sizeof f[1].name, "model.safetensors");
    CHECK(wsync_chain_head_format(&c, &text, &len, &err) == WSYNC_ERR_BAD_HEAD);
    snprintf(f[1].name, sizeof f[1].name, "config.json");
    f[0].tensors = 0; /* no shard first */
    CHECK(wsync_chain_head_format(&c, &text, &len, &err) == WSYNC_ERR_BAD_HEAD);
    CHECK(wsync_chain_file_name_check("model-00001-of-00004.safetensors", NULL) == WSYNC_OK);
    CHECK(wsync_chain_file_name_check(".hidden", NULL) != WSYNC_OK);
    CHECK(wsync_chain_file_name_check("a/b", NULL) != WSYNC_OK);
    CHECK(wsync_chain_file_name_check("", NULL) != WSYNC_OK);
    TEST_END();
}

int main(void)
{
    int dir;
    for (dir = 0; dir < 2; dir++) {
        test_layout(dir);
        test_follow(dir);
        test_reopen(dir);
    }
    test_prefetch();
    test_head_rules();
    return check_summary();
}
