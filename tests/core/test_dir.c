/* Model directories through the library (wsync.h >>dir), no tool: a
   sharded checkpoint directory (three shards, the index, config and
   tokenizer files, a file taken by an include pattern) published at three
   steps with wsync_dir_read and wsync_dir_publish into a directory store,
   each step pulled with wsync_dir_pull into a new link and one follower
   brought forward step by step, every file compared byte for byte with the
   trainer's; versions beside the link (the previous kept, older pruned);
   the step a directory claims (its shards', else wsync-step.json's); and
   refusals, each with an error naming what failed and nothing changed: a
   malformed index, a missing shard, weight_map entries that leave the
   directory ("../x", "/abs/x"), a directory of the caller's as the target. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_root[256];

static void remove_tree(const char *path);

/* ---- files ---- */

static int write_file(const char *dir, const char *name, const void *bytes, size_t n)
{
    char p[1024];
    FILE *f;
    int ok;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (!(f = fopen(p, "wb"))) return 0;
    ok = fwrite(bytes, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static int write_text(const char *dir, const char *name, const char *text)
{
    return write_file(dir, name, text, strlen(text));
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *b = NULL;
    long k;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (k = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = (unsigned char *)malloc((size_t)k + 1)) != NULL && fread(b, 1, (size_t)k, f) == (size_t)k)
        *n = (size_t)k;
    else free(b), b = NULL;
    fclose(f);
    return b;
}

static int file_sink(void *user, const void *bytes, size_t len)
{
    return fwrite(bytes, 1, len, (FILE *)user) == len ? 0 : -1;
}

/* The names of the regular files in dir, sorted, one per line in out. */
static void listing(const char *dir, char *out, size_t cap)
{
    char *names[64];
    size_t n = 0, i, at = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    out[0] = 0;
    if (!d) return;
    while ((e = readdir(d)) != NULL && n < 64)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    for (i = 1; i < n; i++) { /* insertion sort */
        char *x = names[i];
        size_t j = i;
        while (j && strcmp(names[j - 1], x) > 0) names[j] = names[j - 1], j--;
        names[j] = x;
    }
    for (i = 0; i < n; i++) {
        at += (size_t)snprintf(out + at, at < cap ? cap - at : 0, "%s\n", names[i]);
        free(names[i]);
    }
}

/* Every file of `want` is in `got` with the same bytes, and `got` holds
   those and the step file only. */
static int same_dir(const char *want, const char *got, char *why, size_t cap)
{
    char lw[4096], lg[4096], expect[4200], *line, *save = NULL;
    listing(want, lw, sizeof lw);
    listing(got, lg, sizeof lg);
    snprintf(expect, sizeof expect, "%s", lw);
    { /* the pulled version holds wsync-step.json too, in name order */
        char tmp[4200] = "";
        int put = 0;
        size_t at = 0;
        for (line = strtok_r(lw, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            if (!put && strcmp(line, WSYNC_DIR_STEP_FILE) > 0)
                at += (size_t)snprintf(tmp + at, sizeof tmp - at, "%s\n", WSYNC_DIR_STEP_FILE), put = 1;
            at += (size_t)snprintf(tmp + at, sizeof tmp - at, "%s\n", line);
        }
        if (!put) snprintf(tmp + at, sizeof tmp - at, "%s\n", WSYNC_DIR_STEP_FILE);
        snprintf(expect, sizeof expect, "%s", tmp);
    }
    if (strcmp(expect, lg) != 0) return snprintf(why, cap, "files [%.250s] want [%.250s]", lg, expect), 0;
    save = NULL;
    listing(want, lw, sizeof lw);
    for (line = strtok_r(lw, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char a[1024], b[1024];
        size_t na = 0, nb = 0;
        unsigned char *x, *y;
        int same;
        snprintf(a, sizeof a, "%s/%s", want, line);
        snprintf(b, sizeof b, "%s/%s", got, line);
        x = read_all(a, &na);
        y = read_all(b, &nb);
        same = x && y && na == nb && memcmp(x, y, na) == 0;
        free(x);
        free(y);
        if (!same) return snprintf(why, cap, "%s differs (%zu vs %zu bytes)", line, nb, na), 0;
    }
    return 1;
}

/* ---- the checkpoint: 3 shards of bf16 tensors, the index, small files ---- */

#define NT 6
static const char *const g_names[NT] = {"model.embed.weight", "model.layers.0.w", "model.layers.0.b",
                                         "model.layers.1.w", "model.layers.1.b", "lm_head.weight"};
static const uint64_t g_shapes[NT][2] = {{40, 16}, {16, 16}, {16, 1}, {24, 16}, {24, 1}, {40, 16}};
static const int g_shard_of[NT] = {0, 0, 1, 1, 2, 2};
static const char *const g_shard_names[3] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                             "model-00003-of-00003.safetensors"};

/* Step k's values: a base, a few elements changed per step. */
static void tensor_at(int t, uint64_t k, uint16_t *v, size_t ne)
{
    size_t i;
    uint64_t s;
    for (i = 0; i < ne; i++) v[i] = (uint16_t)(0x3C00 + ((i * 7 + (size_t)t * 13) & 0x1FF));
    for (s = 1; s <= k; s++)
        for (i = (size_t)(s * 3 + (uint64_t)t) % 11; i < ne; i += 29) v[i] = (uint16_t)(v[i] + 1 + s);
}

/* flags for write_checkpoint */
#define CK_NO_STEP 1u      /* shards without __metadata__ "step" */
#define CK_STEP_FILE 2u    /* and a wsync-step.json saying the step */

/* The checkpoint at step k into dir (created). config.json changes at step 2. */
static int write_checkpoint(const char *dir, uint64_t k, unsigned flags)
{
    uint16_t *vals[NT];
    wsync_st_tensor_desc d[NT];
    char stepbuf[24], idx[4096], cfg[256];
    size_t i, s, at = 0;
    uint64_t total = 0;
    int ok = 1;
    if (mkdir(dir, 0755) != 0) return 0;
    snprintf(stepbuf, sizeof stepbuf, "%llu", (unsigned long long)k);
    for (i = 0; i < NT; i++) {
        size_t ne = (size_t)(g_shapes[i][0] * g_shapes[i][1]);
        vals[i] = (uint16_t *)malloc(ne * 2);
        tensor_at((int)i, k, vals[i], ne);
        memset(&d[i], 0, sizeof d[i]);
        d[i].name = g_names[i];
        d[i].dtype = WSYNC_DTYPE_BF16;
        d[i].rank = g_shapes[i][1] == 1 ? 1 : 2;
        d[i].shape = g_shapes[i];
        d[i].data = vals[i];
        d[i].nbytes = ne * 2;
        total += ne * 2;
    }
    for (s = 0; s < 3; s++) {
        wsync_st_tensor_desc sd[NT];
        wsync_st_kv meta[3];
        size_t n = 0, nm = 0;
        char p[1024];
        FILE *f;
        wsync_error err;
        memset(meta, 0, sizeof meta);
        meta[nm].key = "format", meta[nm++].value = "pt";
        if (s == 0) meta[nm].key = "model", meta[nm++].value = "tiny"; /* a trainer's own key, kept */
        if (!(flags & CK_NO_STEP)) meta[nm].key = "step", meta[nm++].value = stepbuf;
        for (i = 0; i < NT; i++)
            if (g_shard_of[i] == (int)s) sd[n++] = d[i];
        snprintf(p, sizeof p, "%s/%s", dir, g_shard_names[s]);
        if (!(f = fopen(p, "wb"))) return 0;
        ok &= wsync_st_write(sd, n, meta, nm, file_sink, f, NULL, &err) == WSYNC_OK;
        ok &= fclose(f) == 0;
    }
    at += (size_t)snprintf(idx + at, sizeof idx - at, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n"
                           "  \"weight_map\": {\n", (unsigned long long)total);
    for (i = 0; i < NT; i++)
        at += (size_t)snprintf(idx + at, sizeof idx - at, "    \"%s\": \"%s\"%s\n", g_names[i],
                               g_shard_names[g_shard_of[i]], i + 1 < NT ? "," : "");
    snprintf(idx + at, sizeof idx - at, "  }\n}\n");
    ok &= write_text(dir, WSYNC_DIR_INDEX, idx);
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"tiny\", \"revision\": %d}\n", k >= 2 ? 2 : 1);
    ok &= write_text(dir, "config.json", cfg);
    ok &= write_text(dir, "tokenizer.json", "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\"}}\n");
    ok &= write_text(dir, "notes.txt", "taken by the include pattern\n");
    if (flags & CK_STEP_FILE) {
        char sf[64];
        snprintf(sf, sizeof sf, "{\"step\":%llu,\"state\":\"0000000000000000\"}\n", (unsigned long long)k);
        ok &= write_text(dir, WSYNC_DIR_STEP_FILE, sf);
    }
    for (i = 0; i < NT; i++) free(vals[i]);
    return ok;
}

static void path_of(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", g_root, name);
}

static int open_store(const char *name, wsync_store *s)
{
    char p[512];
    wsync_store_options so;
    wsync_error err;
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;
    path_of(p, sizeof p, name);
    return wsync_store_dir_open(p, &so, s, &err) == WSYNC_OK;
}

static const char *const g_include[1] = {"notes.*"};

/* Publishes the checkpoint directory `ck` (the step its shards claim). */
static wsync_result publish_dir(wsync_store *s, const char *ck, uint64_t step, wsync_publish_stats *ps,
                                wsync_error *err)
{
    wsync_chain_options co;
    wsync_publisher *pub = NULL;
    wsync_dir_checkpoint c;
    wsync_result r;
    memset(&co, 0, sizeof co);
    co.anchor_every = 4;
    co.flags = WSYNC_CHAIN_KEEP_F32;
    if ((r = wsync_dir_read(ck, g_include, 1, &c, err)) != WSYNC_OK) return r;
    if ((r = wsync_publisher_open(s, &co, &pub, err)) == WSYNC_OK) r = wsync_dir_publish(pub, step, &c, ps, err);
    wsync_publisher_close(pub);
    wsync_dir_checkpoint_free(&c);
    return r;
}

/* The store's HEAD, for "nothing changed". */
static unsigned char *head_bytes(const char *store, size_t *n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s/HEAD", g_root, store);
    return read_all(p, n);
}

static int count_versions(const char *parent, const char *base)
{
    DIR *d = opendir(parent);
    struct dirent *e;
    int n = 0;
    size_t bl = strlen(base);
    if (!d) return -1;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, base, bl) == 0 && strncmp(e->d_name + bl, ".step_", 6) == 0) n++;
    closedir(d);
    return n;
}

/* A step file says "step":K */
static int says_step(const char *dir, uint64_t k)
{
    char p[1024], want[64];
    size_t n = 0;
    unsigned char *b;
    int ok;
    snprintf(p, sizeof p, "%s/%s", dir, WSYNC_DIR_STEP_FILE);
    snprintf(want, sizeof want, "{\"step\":%llu,", (unsigned long long)k);
    if (!(b = read_all(p, &n))) return 0;
    ok = n >= strlen(want) && memcmp(b, want, strlen(want)) == 0;
    free(b);
    return ok;
}

static void test_publish_and_pull(void)
{
    wsync_store s;
    wsync_publish_stats ps;
    wsync_dir_sync_stats ds;
    wsync_dir_follower *f = NULL;
    wsync_chain_options co;
    wsync_error err;
    char ck[512], pull[512], why[600], fpath[512];
    uint64_t k, held = 0;

    TEST_BEGIN("three steps of a sharded directory published (anchor, delta, anchor for a new config.json)");
    CHECK(open_store("s", &s));
    for (k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "ck%llu", (unsigned long long)k);
        path_of(ck, sizeof ck, name);
        CHECK(write_checkpoint(ck, k, 0));
        memset(&ps, 0, sizeof ps);
        CHECK_MSG(publish_dir(&s, ck, WSYNC_STEP_LATEST, &ps, &err) == WSYNC_OK, "step %llu: %s", (unsigned long long)k,
                  err.message);
        CHECK_EQ_U64(ps.step, k);
        CHECK_EQ_INT(ps.wrote_anchor, k != 1);
        CHECK_EQ_INT(ps.wrote_delta, k != 0); /* step 2: its anchor, and a delta from 1 */
    }
    {
        char a[512];
        struct stat sb;
        snprintf(a, sizeof a, "%s/s/anchors/step_000002/config.json", g_root);
        CHECK_MSG(stat(a, &sb) == 0, "%s", "anchor 2 carries config.json as an object of its own");
        snprintf(a, sizeof a, "%s/s/anchors/step_000000/notes.txt", g_root);
        CHECK_MSG(stat(a, &sb) == 0, "%s", "the include pattern's file is carried");
    }
    TEST_END();

    TEST_BEGIN("wsync_dir_pull of each step into a new directory: the trainer's files byte for byte");
    memset(&co, 0, sizeof co);
    for (k = 0; k < 3; k++) {
        char name[32], got[600];
        snprintf(name, sizeof name, "ck%llu", (unsigned long long)k);
        path_of(ck, sizeof ck, name);
        snprintf(name, sizeof name, "p%llu", (unsigned long long)k);
        path_of(pull, sizeof pull, name);
        CHECK(mkdir(pull, 0755) == 0);
        snprintf(got, sizeof got, "%s/model", pull);
        CHECK_MSG(wsync_dir_pull(&s, &co, got, k, &ds, &err) == WSYNC_OK, "step %llu: %s", (unsigned long long)k,
                  err.message);
        CHECK(ds.switched && ds.has_step && ds.step == k && !ds.had_step);
        CHECK_MSG(same_dir(ck, got, why, sizeof why), "step %llu: %s", (unsigned long long)k, why);
        CHECK(says_step(got, k));
        CHECK_EQ_INT(count_versions(pull, "model"), 1);
    }
    TEST_END();

    TEST_BEGIN("a follower brought forward 0, 1, 2 and kept: the previous version stays, older ones go");
    path_of(fpath, sizeof fpath, "f");
    CHECK(mkdir(fpath, 0755) == 0);
    strcat(fpath, "/model/"); /* a trailing slash names the link */
    CHECK_MSG(wsync_dir_follower_open(&s, &co, fpath, &f, &err) == WSYNC_OK, "%s", err.message);
    CHECK(f && !wsync_dir_follower_step(f, &held));
    for (k = 0; f && k < 3; k++) {
        char name[32], link[512];
        snprintf(name, sizeof name, "ck%llu", (unsigned long long)k);
        path_of(ck, sizeof ck, name);
        path_of(link, sizeof link, "f/model");
        CHECK_MSG(wsync_dir_follower_sync(f, k == 2 ? WSYNC_STEP_LATEST : k, &ds, &err) == WSYNC_OK, "step %llu: %s",
                  (unsigned long long)k, err.message);
        CHECK(ds.switched && ds.step == k && ds.had_step == (k > 0));
        CHECK(wsync_dir_follower_step(f, &held) && held == k);
        CHECK_MSG(same_dir(ck, link, why, sizeof why), "step %llu: %s", (unsigned long long)k, why);
        snprintf(name, sizeof name, "model.step_%06llu", (unsigned long long)k);
        CHECK_EQ_STR(ds.version, name);
        path_of(link, sizeof link, "f");
        CHECK_EQ_INT(count_versions(link, "model"), k == 0 ? 1 : 2);
    }
    if (f) {
        CHECK(wsync_dir_follower_sync(f, WSYNC_STEP_LATEST, &ds, &err) == WSYNC_OK);
        CHECK_MSG(!ds.switched && ds.step == 2, "%s", "at HEAD already: nothing written");
    }
    wsync_dir_follower_close(f);
    /* a new follower of the same link starts from the version there */
    f = NULL;
    CHECK(wsync_dir_follower_open(&s, &co, fpath, &f, &err) == WSYNC_OK);
    CHECK(f && wsync_dir_follower_step(f, &held) && held == 2);
    if (f) {
        char link[512];
        path_of(ck, sizeof ck, "ck1");
        path_of(link, sizeof link, "f/model");
        CHECK_MSG(wsync_dir_follower_sync(f, 1, &ds, &err) == WSYNC_OK, "%s", err.message);
        CHECK(ds.switched && ds.from_step == 2 && ds.step == 1);
        CHECK_MSG(same_dir(ck, link, why, sizeof why), "back to 1: %s", why);
    }
    wsync_dir_follower_close(f);
    TEST_END();

    TEST_BEGIN("a pulled version relayed: its step from its shards and wsync-step.json, which is not carried");
    {
        wsync_dir_checkpoint c;
        const char *inc[1] = {"*.json"};
        char got[512];
        path_of(got, sizeof got, "p1/model");
        CHECK_MSG(wsync_dir_read(got, inc, 1, &c, &err) == WSYNC_OK, "%s", err.message);
        CHECK(c.has_step && c.step == 1 && c.skipped_step_file && c.n_shards == 3 && c.n_tensors == NT);
        CHECK(c.n_files == 3); /* config.json, tokenizer.json, the index */
        wsync_dir_checkpoint_free(&c);
    }
    wsync_store_close(&s);
    TEST_END();
}

static void test_step_claims(void)
{
    wsync_dir_checkpoint c;
    wsync_error err;
    wsync_store s;
    wsync_publish_stats ps;
    wsync_dir_sync_stats ds;
    wsync_chain_options co;
    char ck[512], got[512], p[1024];
    wsync_st_file st;
    wsync_mapped map;

    TEST_BEGIN("shards without \"step\": the step from wsync-step.json, else none (publish needs one)");
    path_of(ck, sizeof ck, "nostep5");
    CHECK(write_checkpoint(ck, 5, CK_NO_STEP | CK_STEP_FILE));
    CHECK(wsync_dir_read(ck, NULL, 0, &c, &err) == WSYNC_OK);
    CHECK(c.has_step && c.step == 5);
    wsync_dir_checkpoint_free(&c);
    path_of(ck, sizeof ck, "nostep6");
    CHECK(write_checkpoint(ck, 6, CK_NO_STEP));
    CHECK(wsync_dir_read(ck, NULL, 0, &c, &err) == WSYNC_OK);
    CHECK(!c.has_step);
    wsync_dir_checkpoint_free(&c);
    CHECK(open_store("s2", &s));
    CHECK(publish_dir(&s, ck, WSYNC_STEP_LATEST, &ps, &err) == WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "claims no step") != NULL, "%s", err.message);
    TEST_END();

    TEST_BEGIN("a shard published without \"step\" gains one at pull, after the trainer's keys");
    CHECK_MSG(publish_dir(&s, ck, 6, &ps, &err) == WSYNC_OK, "%s", err.message);
    memset(&co, 0, sizeof co);
    path_of(got, sizeof got, "q6");
    CHECK(wsync_dir_pull(&s, &co, got, WSYNC_STEP_LATEST, &ds, &err) == WSYNC_OK);
    snprintf(p, sizeof p, "%s/%s", got, g_shard_names[0]);
    CHECK(wsync_file_map(p, &map, &err) == WSYNC_OK);
    CHECK(wsync_st_parse(map.bytes, map.size, NULL, &st, &err) == WSYNC_OK);
    CHECK_EQ_INT(st.n_metadata, 3);
    if (st.n_metadata == 3) {
        CHECK_EQ_STR(st.metadata[0].key, "format");
        CHECK_EQ_STR(st.metadata[1].key, "model");
        CHECK_EQ_STR(st.metadata[2].key, "step");
        CHECK_EQ_STR(st.metadata[2].value, "6");
    }
    wsync_st_free(&st);
    wsync_file_unmap(&map);
    TEST_END();

    TEST_BEGIN("a directory anchor with no HEAD yet (a publisher between its files and HEAD): NOT_FOUND, "
               "retry once HEAD is written, nothing made");
    path_of(p, sizeof p, "s2/HEAD");
    CHECK(unlink(p) == 0);
    path_of(got, sizeof got, "q6-nohead");
    CHECK(wsync_dir_pull(&s, &co, got, WSYNC_STEP_LATEST, &ds, &err) == WSYNC_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err.message, "anchors/step_000006/") && strstr(err.message, "only HEAD names its files") &&
                  strstr(err.message, "retry"),
              "%s", err.message);
    CHECK(access(got, F_OK) != 0);
    wsync_store_close(&s);
    TEST_END();
}

/* A refused read: the error's code and a text it names; the directory
   and the store as they were. */
static void refused(const char *what, const char *ck, wsync_result code, const char *names)
{
    wsync_dir_checkpoint c;
    wsync_error err;
    wsync_store s;
    wsync_publish_stats ps;
    char before[4096], after[4096];
    unsigned char *h0, *h1;
    size_t n0 = 0, n1 = 0;
    TEST_BEGIN(what);
    listing(ck, before, sizeof before);
    h0 = head_bytes("s", &n0);
    CHECK(wsync_dir_read(ck, g_include, 1, &c, &err) == code);
    CHECK_MSG(err.code == code && strstr(err.message, names) != NULL, "%s: %s", wsync_result_name(err.code),
              err.message);
    CHECK(c.n_shards == 0 && c.tensors == NULL && c.priv == NULL);
    CHECK(open_store("s", &s));
    CHECK(publish_dir(&s, ck, 9, &ps, &err) == code);
    wsync_store_close(&s);
    listing(ck, after, sizeof after);
    h1 = head_bytes("s", &n1);
    CHECK_MSG(strcmp(before, after) == 0, "%s", "the directory unchanged");
    CHECK_MSG(h0 && h1 && n0 == n1 && memcmp(h0, h1, n0) == 0, "%s", "the store's HEAD unchanged");
    free(h0);
    free(h1);
    TEST_END();
}

/* The index of `ck` with `from` replaced by `to` (once). */
static int edit_index(const char *ck, const char *from, const char *to)
{
    char p[1024], out[8192];
    size_t n = 0;
    unsigned char *b;
    char *at;
    int ok;
    snprintf(p, sizeof p, "%s/%s", ck, WSYNC_DIR_INDEX);
    if (!(b = read_all(p, &n))) return 0;
    b[n] = 0;
    if (!(at = strstr((char *)b, from))) return free(b), 0;
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - (char *)b), (char *)b, to, at + strlen(from));
    free(b);
    ok = write_text(ck, WSYNC_DIR_INDEX, out);
    return ok;
}

static void test_refusals(void)
{
    char ck[512], abs_target[600], outside[600], p[1024], q[1024];
    wsync_store s;
    wsync_dir_sync_stats ds;
    wsync_chain_options co;
    wsync_error err;
    struct stat sb;

    path_of(ck, sizeof ck, "bad_json");
    write_checkpoint(ck, 3, 0);
    edit_index(ck, "  }\n}\n", "  }\n"); /* cut short */
    refused("a malformed index is refused, the file and the byte named", ck, WSYNC_ERR_INVALID_JSON, WSYNC_DIR_INDEX);

    path_of(ck, sizeof ck, "bad_missing");
    write_checkpoint(ck, 3, 0);
    snprintf(p, sizeof p, "%s/%s", ck, g_shard_names[1]);
    unlink(p);
    refused("a missing shard is refused, named", ck, WSYNC_ERR_NOT_FOUND, g_shard_names[1]);

    /* the shard is there, outside the directory: "../NAME" */
    path_of(ck, sizeof ck, "bad_dotdot");
    write_checkpoint(ck, 3, 0);
    snprintf(p, sizeof p, "%s/%s", ck, g_shard_names[0]);
    snprintf(outside, sizeof outside, "%s/%s", g_root, g_shard_names[0]);
    CHECK(rename(p, outside) == 0);
    snprintf(q, sizeof q, "\"../%s\"", g_shard_names[0]);
    snprintf(p, sizeof p, "\"%s\"", g_shard_names[0]);
    while (edit_index(ck, p, q)) {
    }
    refused("a weight_map entry \"../shard\" is refused, the entry named", ck, WSYNC_ERR_INVALID_ARGUMENT,
            "../model-00001");

    path_of(ck, sizeof ck, "bad_abs");
    write_checkpoint(ck, 3, 0);
    snprintf(abs_target, sizeof abs_target, "%s/abs_%s", g_root, g_shard_names[2]);
    snprintf(p, sizeof p, "%s/%s", ck, g_shard_names[2]);
    CHECK(rename(p, abs_target) == 0);
    snprintf(q, sizeof q, "\"%s\"", abs_target);
    snprintf(p, sizeof p, "\"%s\"", g_shard_names[2]);
    while (edit_index(ck, p, q)) {
    }
    refused("a weight_map entry with an absolute path is refused, the entry named", ck, WSYNC_ERR_INVALID_ARGUMENT,
            abs_target);

    TEST_BEGIN("a pull into a directory of the caller's is refused, the directory untouched");
    CHECK(open_store("s", &s));
    memset(&co, 0, sizeof co);
    path_of(ck, sizeof ck, "mine");
    CHECK(mkdir(ck, 0755) == 0 && write_text(ck, "keep.txt", "mine\n"));
    CHECK(wsync_dir_pull(&s, &co, ck, WSYNC_STEP_LATEST, &ds, &err) == WSYNC_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, ck) != NULL, "%s", err.message);
    /* whole, to its advice (it once named the path three times and was cut) */
    CHECK_MSG(strstr(err.message, "give a path that does not exist yet") != NULL, "%s", err.message);
    snprintf(p, sizeof p, "%s/keep.txt", ck);
    CHECK(stat(p, &sb) == 0 && count_versions(g_root, "mine") == 0);
    /* a dangling link to something that is not a version of ours */
    path_of(ck, sizeof ck, "dangling");
    CHECK(symlink("nowhere", ck) == 0);
    CHECK(wsync_dir_pull(&s, &co, ck, WSYNC_STEP_LATEST, &ds, &err) == WSYNC_ERR_UNSUPPORTED);
    CHECK(lstat(ck, &sb) == 0 && S_ISLNK(sb.st_mode));
    wsync_store_close(&s);
    TEST_END();
}

/* Two processes pulling one link at once, to alternate steps, take turns
   on its lock: every switch leaves the link on a whole version, and a
   dangling link to a version of ours is rebuilt, not taken for a file. */
static void test_overlap(void)
{
    char link[512], parent[512], why[600], ck[1100], target[512];
    pid_t kids[2];
    int i, status, ok = 1;
    wsync_store s;
    wsync_chain_options co;
    wsync_dir_sync_stats ds;
    wsync_error err;
    struct stat sb;
    ssize_t n;
    TEST_BEGIN("two processes pulling one link to alternate steps: a whole version after every switch");
    path_of(parent, sizeof parent, "o");
    CHECK(mkdir(parent, 0755) == 0);
    path_of(link, sizeof link, "o/model");
    for (i = 0; i < 2; i++) {
        if ((kids[i] = fork()) == 0) {
            int k, bad = 0;
            wsync_store ks;
            wsync_chain_options kco;
            memset(&kco, 0, sizeof kco);
            if (!open_store("s", &ks)) _exit(2);
            for (k = 0; k < 8; k++) {
                char want[512];
                uint64_t step = (uint64_t)((k + i) % 2 + 1);
                wsync_dir_sync_stats kds;
                wsync_error kerr;
                char lockp[600];
                int fd;
                if (wsync_dir_pull(&ks, &kco, link, step, &kds, &kerr) != WSYNC_OK || kds.step != step) bad = 1;
                /* between runs (holding the lock they take): the link on a whole version */
                snprintf(lockp, sizeof lockp, "%s/.model.wsync-lock", parent);
                if ((fd = open(lockp, O_RDWR)) < 0 || flock(fd, LOCK_EX) != 0) bad = 1;
                snprintf(want, sizeof want, "%s/ck%d", g_root, says_step(link, 1) ? 1 : says_step(link, 2) ? 2 : 9);
                if (!same_dir(want, link, why, sizeof why)) bad = 1;
                if (fd >= 0) close(fd);
            }
            wsync_store_close(&ks);
            _exit(bad);
        }
    }
    for (i = 0; i < 2; i++) ok &= waitpid(kids[i], &status, 0) == kids[i] && WIFEXITED(status) && !WEXITSTATUS(status);
    CHECK_MSG(ok, "%s", "each process's pulls succeeded and each version it linked was whole");
    CHECK(count_versions(parent, "model") <= 3);
    CHECK(open_store("s", &s));
    memset(&co, 0, sizeof co);
    /* the version the link names removed under it: rebuilt from the chain */
    n = readlink(link, target, sizeof target - 1);
    CHECK(n > 0);
    target[n > 0 ? n : 0] = 0;
    snprintf(ck, sizeof ck, "%s/%s", parent, target);
    remove_tree(ck);
    CHECK(stat(link, &sb) != 0 && lstat(link, &sb) == 0);
    CHECK_MSG(wsync_dir_pull(&s, &co, link, WSYNC_STEP_LATEST, &ds, &err) == WSYNC_OK, "%s", err.message);
    path_of(ck, sizeof ck, "ck2");
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode) && ds.step == 2);
    CHECK_MSG(same_dir(ck, link, why, sizeof why), "rebuilt: %s", why);
    wsync_store_close(&s);
    TEST_END();
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    char p[1024];
    struct stat sb;
    if (!d) {
        unlink(path);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(path);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/wsync_test_dir_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        return 1;
    }
    test_publish_and_pull();
    test_step_claims();
    test_refusals();
    test_overlap();
    remove_tree(g_root);
    return check_summary();
}
