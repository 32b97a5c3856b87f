/* Signed chains (issue 46): a publisher given an Ed25519 secret key signs
   every HEAD, which then names a BLAKE2b-256 hash of every object and the
   chain's identity; a subscriber given the public key follows only that.

   - a signed chain followed exactly, step by step and from scratch,
     through anchors and deltas, by sync and by the background prefetch,
     a directory's anchor included; a publisher reopened keeps the chain's
     identity; old readers' keys (the unsigned HEAD) unchanged;
   - refused with WSYNC_ERR_SIGNATURE, the targets at their step, bytes
     unchanged: an unsigned HEAD, a HEAD whose bytes changed after signing
     (its "check" fixed up), a HEAD signed by another key, another chain
     signed by the same key (until wsync_subscriber_set_chain_id), a chain
     without HEAD; the prefetch's status says so too;
   - the attack wsync64 cannot see: an object altered while HEAD's digest
     matches it (as a crafted wsync64 collision would), refused by its
     BLAKE2b-256 (WSYNC_ERR_DIGEST_MISMATCH): a delta, a spooled anchor, a
     streamed anchor (which leaves targets without a step zeroed), a file
     of a directory's anchor; a delta routed around through an anchor;
   - a signed HEAD replayed from an earlier step: WSYNC_ERR_STALE_HEAD;
   - the publisher: a sign key whose halves disagree, an unsigned
     publisher over a signed chain, another key's publisher, each refused;
     WSYNC_CHAIN_NEW_CHAIN starts a new identity;
   - HEAD's rules: "sig" just before "check", a signed HEAD naming every
     hash, wsync_chain_head_verify;
   - key files: wsync_keygen, wsync_key_read_secret and _public, and
     their refusals. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"
#include "small_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#define A_N (64 * 32)
#define B_N 1000
static uint64_t g_a_shape[2] = {64, 32}, g_b_shape[1] = {B_N};

typedef struct image {
    uint16_t a[A_N], b[B_N];
} image;

/* The trainer's image at `step`: about 4% of the elements move a step. */
static void image_at(image *im, uint64_t step)
{
    sm_fill(im->a, A_N, 0x3C00u, 0, 1, step);
    sm_fill(im->b, B_N, 0x4000u, 77777, 2, step);
}

static void tensors_of(image *im, wsync_tensor *t)
{
    wsync_tensor_dense(&t[0], "a", WSYNC_DTYPE_BF16, 2, g_a_shape, im->a, NULL);
    wsync_tensor_dense(&t[1], "b", WSYNC_DTYPE_BF16, 1, g_b_shape, im->b, NULL);
}

static void nap(void)
{
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

static int holds(const image *got, uint64_t step)
{
    image want;
    image_at(&want, step);
    return memcmp(got, &want, sizeof want) == 0;
}

/* Two trainers' keys: A signs the chain, B is someone else's. */
static uint8_t g_pub_a[32], g_sec_a[64], g_pub_b[32], g_sec_b[64];

static void make_keys(void)
{
    uint8_t seed[32];
    size_t i;
    for (i = 0; i < 32; i++) seed[i] = (uint8_t)(i * 13 + 5);
    wsync_ed25519_keypair(seed, g_pub_a, g_sec_a);
    for (i = 0; i < 32; i++) seed[i] = (uint8_t)(i * 31 + 9);
    wsync_ed25519_keypair(seed, g_pub_b, g_sec_b);
}

static wsync_chain_options copts(uint32_t anchor_every, const uint8_t *sign, const uint8_t *verify)
{
    wsync_chain_options o;
    memset(&o, 0, sizeof o);
    o.anchor_every = anchor_every;
    o.anchor_fraction = 0.95;
    o.sign_key = sign;
    o.verify_key = verify;
    return o;
}

static wsync_store mem_store(void)
{
    wsync_store s;
    wsync_store_mem_open(NULL, &s, NULL);
    return s;
}

/* Publishes steps first..last with sign key `sign` (NULL: unsigned). */
static wsync_result publish_range(const wsync_store *st, uint32_t anchor_every, const uint8_t *sign, unsigned flags,
                                  uint64_t first, uint64_t last, wsync_error *err)
{
    wsync_publisher *p = NULL;
    wsync_chain_options o = copts(anchor_every, sign, NULL);
    wsync_tensor t[2];
    image *im = (image *)malloc(sizeof *im);
    uint64_t s;
    wsync_result r;
    o.flags = flags;
    if (!im) return WSYNC_ERR_OUT_OF_MEMORY;
    r = wsync_publisher_open(st, &o, &p, err);
    for (s = first; r == WSYNC_OK && s <= last; s++) {
        image_at(im, s);
        tensors_of(im, t);
        r = wsync_publish(p, s, t, 2, NULL, err);
        if (r != WSYNC_OK) printf("  publish %llu: %s\n", (unsigned long long)s, err->message);
    }
    wsync_publisher_close(p);
    free(im);
    return r;
}

/* An object's bytes (NULL when missing); free(). */
static uint8_t *get_obj(const wsync_store *s, const char *key, uint64_t *size)
{
    uint8_t *b = NULL;
    if (wsync_store_get_all(s, key, NULL, &b, size, NULL) != WSYNC_OK) return NULL;
    return b;
}

static int put_obj(const wsync_store *s, const char *key, const void *b, size_t n)
{
    return s->put(s->user, key, b, n, NULL) == WSYNC_OK;
}

/* HEAD parsed without a key. */
static int read_head(const wsync_store *s, wsync_chain_info *c)
{
    uint64_t n = 0;
    uint8_t *b = get_obj(s, "HEAD", &n);
    int ok = b && wsync_chain_head_parse(b, (size_t)n, NULL, c, NULL) == WSYNC_OK;
    free(b);
    return ok;
}

/* HEAD for c written to the store: signed with sec, or unsigned (NULL). */
static int write_head(const wsync_store *s, const wsync_chain_info *c, const uint8_t *sec)
{
    char *text = NULL;
    size_t len = 0;
    wsync_error err;
    int ok = (sec ? wsync_chain_head_format_signed(c, sec, &text, &len, &err)
                  : wsync_chain_head_format(c, &text, &len, &err)) == WSYNC_OK;
    if (!ok) printf("  head format: %s\n", err.message);
    ok = ok && put_obj(s, "HEAD", text, len);
    free(text);
    return ok;
}

/* Sets "check" again after an edit of the bytes before it (what anyone who
   can write the bucket can do: wsync64 is no secret). */
static void fix_check(char *t, size_t len)
{
    char *at = strstr(t, "\"check\":\"");
    uint64_t d;
    int i;
    if (!at || (size_t)(at - t) + 26 > len) return;
    d = wsync_digest(t, (size_t)(at - t));
    for (i = 15; i >= 0; i--, d >>= 4) at[9 + i] = "0123456789abcdef"[d & 15];
}

static long entry_of(const wsync_chain_info *c, wsync_chain_kind kind, uint64_t step)
{
    size_t i;
    for (i = 0; i < c->n_entries; i++)
        if (c->entries[i].kind == kind && c->entries[i].step == step) return (long)i;
    return -1;
}

/* The attack: the object at `key` altered in place (same size), and HEAD
   re-signed with A naming the altered bytes' wsync64 but the original's
   BLAKE2b-256, as if the altered bytes collided with the original's
   digest. Returns the original bytes (free) for a later repair. */
static uint8_t *tamper(const wsync_store *s, const char *key, wsync_chain_kind kind, uint64_t step, const char *file,
                       uint64_t *size)
{
    uint8_t *orig = get_obj(s, key, size), *alt;
    wsync_chain_info c;
    long k;
    if (!orig || !read_head(s, &c)) return orig;
    alt = (uint8_t *)malloc((size_t)*size);
    memcpy(alt, orig, (size_t)*size);
    alt[*size - 3] ^= 0x01; /* a tensor's bytes near the end: the header still parses */
    alt[*size / 2] ^= 0x10;
    put_obj(s, key, alt, (size_t)*size);
    k = entry_of(&c, kind, step);
    if (k >= 0 && !file) {
        c.entries[k].digest = wsync_digest(alt, (size_t)*size);
    } else if (k >= 0) {
        size_t f;
        for (f = 0; f < c.entries[k].n_files; f++) {
            wsync_chain_file *cf = (wsync_chain_file *)&c.entries[k].files[f];
            if (strcmp(cf->name, file) == 0) cf->digest = wsync_digest(alt, (size_t)*size);
        }
        /* the entry's digest is wsync64 of its files' digests */
        {
            wsync_digest_state ds;
            wsync_digest_init(&ds);
            for (f = 0; f < c.entries[k].n_files; f++) {
                uint8_t le[8];
                uint64_t d = c.entries[k].files[f].digest;
                int b;
                for (b = 0; b < 8; b++) le[b] = (uint8_t)(d >> (8 * b));
                wsync_digest_update(&ds, le, 8);
            }
            c.entries[k].digest = wsync_digest_final(&ds);
        }
    }
    write_head(s, &c, g_sec_a);
    wsync_chain_info_free(&c);
    free(alt);
    return orig;
}

/* ======================================================================
   Followed exactly
   ====================================================================== */

static void test_follow_exact(void)
{
    wsync_store st = mem_store();
    wsync_subscriber *sub = NULL, *fresh = NULL;
    wsync_chain_options o = copts(0, NULL, g_pub_a);
    wsync_error err;
    wsync_tensor t[2], t2[2];
    image *got = (image *)calloc(1, sizeof *got), *got2 = (image *)calloc(1, sizeof *got2);
    uint64_t s;
    unsigned anchors = 0, deltas = 0;
    uint8_t id[16], id2[16];
    wsync_chain_info c;
    TEST_BEGIN("signed chain: followed exactly step by step and from scratch, anchors and deltas");
    tensors_of(got, t);
    tensors_of(got2, t2);
    o.flags = WSYNC_CHAIN_VERIFY_STATE;
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 2, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_chain_id(sub, id), 0);
    for (s = 0; s <= 11; s++) {
        wsync_sync_stats ss;
        wsync_result r;
        CHECK_EQ_INT(publish_range(&st, 3, g_sec_a, 0, s, s, &err), WSYNC_OK);
        r = wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &err);
        CHECK_MSG(r == WSYNC_OK, "step %llu: %s", (unsigned long long)s, err.message);
        CHECK_MSG(holds(got, s), "step %llu", (unsigned long long)s);
        CHECK(ss.verified && ss.rejected == 0);
        anchors += ss.anchors, deltas += ss.deltas;
        /* a subscriber from scratch at every step: an anchor, then deltas */
        CHECK_EQ_INT(wsync_subscriber_open(&st, t2, 2, &o, &fresh, &err), WSYNC_OK);
        memset(got2, 0, sizeof *got2);
        r = wsync_subscriber_sync(fresh, s, &ss, &err);
        CHECK_MSG(r == WSYNC_OK && holds(got2, s), "fresh at step %llu: %s", (unsigned long long)s, err.message);
        CHECK_EQ_INT(ss.anchors, 1);
        CHECK_EQ_INT(ss.deltas, s % 3);
        wsync_subscriber_close(fresh);
    }
    CHECK_EQ_INT(anchors, 1);
    CHECK_EQ_INT(deltas, 11);
    CHECK_EQ_INT(wsync_subscriber_chain_id(sub, id), 1);
    /* the identity is HEAD's, kept by each publisher that continued */
    CHECK(read_head(&st, &c));
    CHECK(c.has_sig && c.has_id && memcmp(c.id, id, 16) == 0 && memcmp(c.signer, g_pub_a, 32) == 0);
    CHECK(c.entries[0].has_hash);
    wsync_chain_info_free(&c);
    /* a spooled anchor (the targets hold a step) and the prefetch */
    {
        wsync_sync_stats ss;
        wsync_prefetch_status ps;
        uint64_t ready = 0;
        int tries;
        CHECK_EQ_INT(wsync_subscriber_sync(sub, 9, &ss, &err), WSYNC_OK);
        CHECK(holds(got, 9) && ss.anchors == 1 && ss.deltas == 0);
        CHECK_EQ_INT(publish_range(&st, 3, g_sec_a, 0, 12, 12, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_subscriber_start(sub, 5, &err), WSYNC_OK);
        for (tries = 0; tries < 2000 && !(wsync_subscriber_ready(sub, &ready) && ready == 12); tries++)
            nap();
        CHECK_EQ_INT(ready, 12);
        CHECK_EQ_INT(wsync_subscriber_apply_ready(sub, &ss, &err), WSYNC_OK);
        CHECK(holds(got, 12));
        wsync_subscriber_prefetch_status(sub, &ps);
        CHECK_EQ_INT(ps.last_result, WSYNC_OK);
        wsync_subscriber_stop(sub);
    }
    CHECK_EQ_INT(wsync_subscriber_chain_id(sub, id2), 1);
    CHECK(memcmp(id, id2, 16) == 0);
    wsync_subscriber_close(sub);
    /* an unsigned subscriber reads the signed chain as before */
    CHECK_EQ_INT(wsync_subscriber_open(&st, t2, 2, NULL, &fresh, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(fresh, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    CHECK(holds(got2, 12));
    wsync_subscriber_close(fresh);
    wsync_store_close(&st);
    free(got);
    free(got2);
    TEST_END();

    TEST_BEGIN("signed chain: an unsigned publisher's HEAD names no id, hash or signature");
    st = mem_store();
    CHECK_EQ_INT(publish_range(&st, 3, NULL, 0, 0, 4, &err), WSYNC_OK);
    {
        uint64_t n = 0;
        uint8_t *h = get_obj(&st, "HEAD", &n);
        char *text = (char *)calloc(1, (size_t)n + 1);
        if (h && text) memcpy(text, h, (size_t)n);
        CHECK(text && !strstr(text, "\"id\"") && !strstr(text, "blake2b") && !strstr(text, "\"sig\"") &&
              !strstr(text, "signer"));
        free(h);
        free(text);
    }
    wsync_store_close(&st);
    TEST_END();
}

/* A directory's anchor (two shards and a file), signed: followed exactly;
   a shard altered with its digest fixed up is refused by its hash. */
static void test_directory(void)
{
    wsync_store st = mem_store();
    wsync_publisher *p = NULL;
    wsync_subscriber *sub = NULL;
    wsync_chain_options po = copts(4, g_sec_a, NULL), so = copts(0, NULL, g_pub_a);
    wsync_anchor_shard sh[2] = {{"model-00001-of-00002.safetensors", 0, 1, NULL, 0},
                                {"model-00002-of-00002.safetensors", 1, 1, NULL, 0}};
    wsync_anchor_file cfg = {"config.json", "{\"hidden\":64}", 13};
    wsync_error err;
    wsync_tensor t[2], pt[2];
    image *im = (image *)malloc(sizeof *im), *got = (image *)calloc(1, sizeof *got);
    wsync_chain_info c;
    uint8_t *orig;
    uint64_t s, size = 0;
    wsync_result r;
    TEST_BEGIN("signed chain: a directory's anchor, every file hashed, followed exactly; a shard altered refused");
    CHECK_EQ_INT(wsync_publisher_open(&st, &po, &p, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publisher_set_layout(p, sh, 2, &cfg, 1, &err), WSYNC_OK);
    for (s = 0; s <= 5; s++) {
        image_at(im, s);
        tensors_of(im, pt);
        CHECK_EQ_INT(wsync_publish(p, s, pt, 2, NULL, &err), WSYNC_OK);
    }
    wsync_publisher_close(p);
    CHECK(read_head(&st, &c));
    {
        long k = entry_of(&c, WSYNC_CHAIN_ANCHOR, 4);
        size_t f;
        int all = k >= 0 && c.entries[k].n_files == 3;
        for (f = 0; all && f < 3; f++) all = c.entries[k].files[f].has_hash;
        CHECK(all);
    }
    wsync_chain_info_free(&c);
    tensors_of(got, t);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 2, &so, &sub, &err), WSYNC_OK);
    r = wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err);
    CHECK_MSG(r == WSYNC_OK && holds(got, 5), "%s", err.message);
    /* shard 2 of anchor 4 altered; the subscriber at 5 asks for 4: routed
       around through anchor 0 and deltas 1..4 */
    orig = tamper(&st, "anchors/step_000004/model-00002-of-00002.safetensors", WSYNC_CHAIN_ANCHOR, 4,
                  "model-00002-of-00002.safetensors", &size);
    {
        wsync_sync_stats ss;
        r = wsync_subscriber_sync(sub, 4, &ss, &err);
        CHECK_MSG(r == WSYNC_OK && holds(got, 4), "%s", err.message);
        CHECK_EQ_INT(ss.rejected, 1);
        CHECK_EQ_INT(ss.deltas, 4);
    }
    free(orig);
    /* shard 1 of anchor 0: the only way to step 0 */
    orig = tamper(&st, "anchors/step_000000/model-00001-of-00002.safetensors", WSYNC_CHAIN_ANCHOR, 0,
                  "model-00001-of-00002.safetensors", &size);
    r = wsync_subscriber_sync(sub, 0, NULL, &err);
    CHECK_EQ_INT(r, WSYNC_ERR_DIGEST_MISMATCH);
    CHECK_MSG(strstr(err.message, "BLAKE2b-256") && strstr(err.message, "model-00001"), "%s", err.message);
    {
        uint64_t step = 0;
        CHECK(wsync_subscriber_step(sub, &step) && step == 4 && holds(got, 4));
    }
    wsync_subscriber_close(sub);
    free(orig);
    wsync_store_close(&st);
    free(im);
    free(got);
    TEST_END();
}

/* An anchor above 16 MiB: its hash runs on a thread while it is put. */
static void test_large_anchor(void)
{
    enum { N = 12u << 20 }; /* bf16 elements: 24 MiB */
    wsync_store st = mem_store();
    wsync_publisher *p = NULL;
    wsync_subscriber *sub = NULL;
    wsync_chain_options po = copts(100, g_sec_a, NULL), so = copts(0, NULL, g_pub_a);
    uint16_t *w = (uint16_t *)malloc((size_t)N * 2), *got = (uint16_t *)calloc(N, 2);
    uint64_t shape[1] = {N}, size = 0;
    wsync_tensor t, tg;
    wsync_error err;
    uint8_t *orig;
    size_t i;
    TEST_BEGIN("signed chain: a 24 MiB anchor, hashed beside its put, followed; altered, refused");
    for (i = 0; i < N; i++) w[i] = (uint16_t)(0x3C00u + (mix64(i) & 0x3FFu));
    wsync_tensor_dense(&t, "w", WSYNC_DTYPE_BF16, 1, shape, w, NULL);
    wsync_tensor_dense(&tg, "w", WSYNC_DTYPE_BF16, 1, shape, got, NULL);
    CHECK_EQ_INT(wsync_publisher_open(&st, &po, &p, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publish(p, 0, &t, 1, NULL, &err), WSYNC_OK);
    for (i = 0; i < N; i += 97) w[i]++;
    CHECK_EQ_INT(wsync_publish(p, 1, &t, 1, NULL, &err), WSYNC_OK);
    wsync_publisher_close(p);
    CHECK_EQ_INT(wsync_subscriber_open(&st, &tg, 1, &so, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    CHECK(memcmp(w, got, (size_t)N * 2) == 0);
    /* back to step 0: only its anchor leads there, spooled, refused */
    orig = tamper(&st, "anchors/step_000000.safetensors", WSYNC_CHAIN_ANCHOR, 0, NULL, &size);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, 0, NULL, &err), WSYNC_ERR_DIGEST_MISMATCH);
    CHECK(memcmp(w, got, (size_t)N * 2) == 0);
    free(orig);
    wsync_subscriber_close(sub);
    wsync_store_close(&st);
    free(w);
    free(got);
    TEST_END();
}

/* ======================================================================
   HEADs refused: the targets keep their step
   ====================================================================== */

typedef struct follower {
    wsync_store st;
    wsync_subscriber *sub;
    image *got;
    wsync_tensor t[2];
    uint8_t *head;             /* the good HEAD at `step`, to put back */
    uint64_t head_len, step;
} follower;

/* A chain of steps 0..5 signed by A (anchors every 100: one anchor, then
   deltas only), a subscriber with A's key at step 5. */
static int follower_open(follower *f, unsigned flags)
{
    wsync_chain_options o = copts(0, NULL, g_pub_a);
    wsync_error err;
    memset(f, 0, sizeof *f);
    f->st = mem_store();
    f->got = (image *)calloc(1, sizeof *f->got);
    tensors_of(f->got, f->t);
    o.flags = flags;
    if (publish_range(&f->st, 100, g_sec_a, 0, 0, 5, &err) != WSYNC_OK) return 0;
    if (wsync_subscriber_open(&f->st, f->t, 2, &o, &f->sub, &err) != WSYNC_OK) return 0;
    if (wsync_subscriber_sync(f->sub, WSYNC_STEP_LATEST, NULL, &err) != WSYNC_OK) return 0;
    f->step = 5;
    f->head = get_obj(&f->st, "HEAD", &f->head_len);
    return f->head != NULL && holds(f->got, 5);
}

static void follower_close(follower *f)
{
    wsync_subscriber_close(f->sub);
    wsync_store_close(&f->st);
    free(f->got);
    free(f->head);
}

/* The targets still hold f->step, bytes and all. */
static int kept(const follower *f)
{
    uint64_t step = 0;
    return wsync_subscriber_step(f->sub, &step) && step == f->step && holds(f->got, f->step);
}

/* A sync is refused with `code`, the message holding `words`, the targets kept. */
static void refused(follower *f, wsync_result code, const char *words)
{
    wsync_error err;
    wsync_sync_stats ss;
    wsync_result r = wsync_subscriber_sync(f->sub, WSYNC_STEP_LATEST, &ss, &err);
    CHECK_MSG(r == code, "%s, not %s: %s", wsync_result_name(r), wsync_result_name(code), err.message);
    CHECK_MSG(strstr(err.message, words) != NULL, "'%s' not in: %s", words, err.message);
    CHECK_MSG(kept(f), "%s", "the targets moved");
}

static void test_refused_heads(void)
{
    follower f;
    wsync_chain_info c;
    wsync_error err;

    TEST_BEGIN("refused: an unsigned HEAD (a publisher without the key, or anyone), targets kept");
    CHECK(follower_open(&f, 0));
    CHECK_EQ_INT(publish_range(&f.st, 100, g_sec_a, 0, 6, 7, &err), WSYNC_OK);
    CHECK(read_head(&f.st, &c));
    CHECK(write_head(&f.st, &c, NULL)); /* step 7's HEAD, without a signature */
    wsync_chain_info_free(&c);
    refused(&f, WSYNC_ERR_SIGNATURE, "not signed");
    follower_close(&f);
    TEST_END();

    TEST_BEGIN("refused: a HEAD whose bytes changed after signing (\"check\" fixed up), targets kept");
    CHECK(follower_open(&f, 0));
    CHECK_EQ_INT(publish_range(&f.st, 100, g_sec_a, 0, 6, 6, &err), WSYNC_OK);
    {
        uint64_t n = 0;
        uint8_t *h = get_obj(&f.st, "HEAD", &n);
        char *text = (char *)calloc(1, (size_t)n + 1), *d;
        memcpy(text, h, (size_t)n);
        /* a delta's digest rewritten (to name other bytes), "check" made to match */
        d = strstr(text, "\"base\":5,\"bytes\":");
        d = d ? strstr(d, "\"digest\":\"") : NULL;
        CHECK(d != NULL);
        if (d) d[10] = d[10] == '0' ? '1' : '0';
        fix_check(text, (size_t)n);
        CHECK_EQ_INT(wsync_chain_head_parse(text, (size_t)n, NULL, &c, &err), WSYNC_OK);
        wsync_chain_info_free(&c);
        put_obj(&f.st, "HEAD", text, (size_t)n);
        free(h);
        free(text);
    }
    refused(&f, WSYNC_ERR_SIGNATURE, "does not verify");
    follower_close(&f);
    TEST_END();

    TEST_BEGIN("refused: a HEAD signed by another key, targets kept");
    CHECK(follower_open(&f, 0));
    CHECK_EQ_INT(publish_range(&f.st, 100, g_sec_a, 0, 6, 6, &err), WSYNC_OK);
    CHECK(read_head(&f.st, &c));
    CHECK(write_head(&f.st, &c, g_sec_b));
    wsync_chain_info_free(&c);
    refused(&f, WSYNC_ERR_SIGNATURE, "another key");
    follower_close(&f);
    TEST_END();

    TEST_BEGIN("refused: a chain without HEAD (a listing), targets kept; an empty store waits");
    CHECK(follower_open(&f, 0));
    CHECK_EQ_INT(publish_range(&f.st, 100, g_sec_a, 0, 6, 6, &err), WSYNC_OK);
    CHECK_EQ_INT(f.st.del(f.st.user, "HEAD", NULL), WSYNC_OK);
    refused(&f, WSYNC_ERR_SIGNATURE, "without HEAD is not signed");
    follower_close(&f);
    {
        wsync_store st = mem_store();
        wsync_chain_options o = copts(0, NULL, g_pub_a);
        wsync_chain_info ci;
        CHECK_EQ_INT(wsync_chain_read(&st, &o, &ci, &err), WSYNC_ERR_NOT_FOUND);
        wsync_store_close(&st);
    }
    TEST_END();

    TEST_BEGIN("refused: a signed HEAD replayed from an earlier step is stale, targets kept");
    CHECK(follower_open(&f, 0));
    {
        uint8_t *old = f.head;
        uint64_t old_len = f.head_len;
        CHECK_EQ_INT(publish_range(&f.st, 100, g_sec_a, 0, 6, 8, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_subscriber_sync(f.sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
        f.step = 8;
        CHECK(holds(f.got, 8));
        put_obj(&f.st, "HEAD", old, (size_t)old_len); /* step 5's, validly signed */
        refused(&f, WSYNC_ERR_STALE_HEAD, "older than step 8");
    }
    follower_close(&f);
    TEST_END();
}

/* Another chain signed by the same key: refused once the subscriber has
   seen its own, followed after set_chain_id(NULL); the prefetch says it. */
static void test_other_chain(void)
{
    follower f;
    wsync_store other = mem_store();
    wsync_error err;
    wsync_chain_info c1, c2;
    uint8_t id[16];
    TEST_BEGIN("refused: another chain signed by the same key, until the subscriber is told; the prefetch too");
    CHECK(follower_open(&f, 0));
    CHECK_EQ_INT(publish_range(&other, 100, g_sec_a, 0, 0, 9, &err), WSYNC_OK);
    CHECK(read_head(&f.st, &c1));
    CHECK(read_head(&other, &c2));
    CHECK(c1.has_id && c2.has_id && memcmp(c1.id, c2.id, 16) != 0);
    wsync_chain_info_free(&c1);
    /* the other chain's objects and HEAD copied over this one's */
    {
        size_t i;
        for (i = 0; i < c2.n_entries; i++) {
            uint64_t n = 0;
            uint8_t *b = get_obj(&other, c2.entries[i].key, &n);
            CHECK(b && put_obj(&f.st, c2.entries[i].key, b, (size_t)n));
            free(b);
        }
        {
            uint64_t n = 0;
            uint8_t *b = get_obj(&other, "HEAD", &n);
            CHECK(b && put_obj(&f.st, "HEAD", b, (size_t)n));
            free(b);
        }
    }
    refused(&f, WSYNC_ERR_SIGNATURE, "another chain");
    {
        wsync_prefetch_status ps;
        int tries;
        CHECK_EQ_INT(wsync_subscriber_start(f.sub, 5, &err), WSYNC_OK);
        for (tries = 0; tries < 2000; tries++) {
            wsync_subscriber_prefetch_status(f.sub, &ps);
            if (ps.polls >= 2 && ps.last_result != WSYNC_OK) break;
            nap();
        }
        CHECK_EQ_INT(ps.last_result, WSYNC_ERR_SIGNATURE);
        CHECK(strstr(ps.last_error.message, "another chain") != NULL);
        CHECK(!wsync_subscriber_ready(f.sub, NULL));
        wsync_subscriber_stop(f.sub);
        CHECK(kept(&f));
    }
    /* told to follow the new chain */
    CHECK(wsync_subscriber_chain_id(f.sub, id) && memcmp(id, c2.id, 16) != 0);
    wsync_subscriber_set_chain_id(f.sub, NULL);
    CHECK_EQ_INT(wsync_subscriber_sync(f.sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    CHECK(holds(f.got, 9));
    CHECK(wsync_subscriber_chain_id(f.sub, id) && memcmp(id, c2.id, 16) == 0);
    /* pinned back to the first: refused again */
    wsync_subscriber_set_chain_id(f.sub, c2.id);
    CHECK_EQ_INT(wsync_subscriber_sync(f.sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    wsync_chain_info_free(&c2);
    follower_close(&f);
    wsync_store_close(&other);
    TEST_END();
}

/* ======================================================================
   Objects altered, HEAD's wsync64 matching them
   ====================================================================== */

static void test_altered_objects(void)
{
    follower f;
    wsync_error err;
    uint8_t *orig;
    uint64_t size = 0;

    TEST_BEGIN("refused by its hash: a delta altered, HEAD's wsync64 matching it, targets kept; repaired, followed");
    CHECK(follower_open(&f, 0));
    CHECK_EQ_INT(publish_range(&f.st, 100, g_sec_a, 0, 6, 6, &err), WSYNC_OK);
    orig = tamper(&f.st, "deltas/step_000006.safetensors", WSYNC_CHAIN_DELTA, 6, NULL, &size);
    CHECK(orig != NULL);
    {
        wsync_sync_stats ss;
        wsync_result r = wsync_subscriber_sync(f.sub, WSYNC_STEP_LATEST, &ss, &err);
        CHECK_EQ_INT(r, WSYNC_ERR_DIGEST_MISMATCH);
        CHECK_MSG(strstr(err.message, "BLAKE2b-256") && strstr(err.message, "deltas/step_000006"), "%s", err.message);
        CHECK(ss.rejected >= 1);
        CHECK(kept(&f));
    }
    /* the object repaired (HEAD still names the altered digest: re-published) */
    put_obj(&f.st, "deltas/step_000006.safetensors", orig, (size_t)size);
    free(orig);
    CHECK_EQ_INT(publish_range(&f.st, 100, g_sec_a, 0, 7, 7, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(f.sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    follower_close(&f);
    TEST_END();

    TEST_BEGIN("refused by its hash: a delta altered, routed around through an anchor");
    {
        wsync_store st = mem_store();
        wsync_subscriber *sub = NULL;
        wsync_chain_options o = copts(0, NULL, g_pub_a);
        image *got = (image *)calloc(1, sizeof *got);
        wsync_tensor t[2];
        wsync_sync_stats ss;
        wsync_result r;
        tensors_of(got, t);
        CHECK_EQ_INT(publish_range(&st, 3, g_sec_a, 0, 0, 5, &err), WSYNC_OK); /* anchors 0, 3 */
        CHECK_EQ_INT(wsync_subscriber_open(&st, t, 2, &o, &sub, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_subscriber_sync(sub, 2, NULL, &err), WSYNC_OK);
        free(tamper(&st, "deltas/step_000003.safetensors", WSYNC_CHAIN_DELTA, 3, NULL, &size));
        r = wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &err);
        CHECK_MSG(r == WSYNC_OK && holds(got, 5), "%s", err.message);
        CHECK_EQ_INT(ss.rejected, 1);
        CHECK_EQ_INT(ss.anchors, 1);
        wsync_subscriber_close(sub);
        wsync_store_close(&st);
        free(got);
    }
    TEST_END();

    TEST_BEGIN("refused by its hash: an anchor altered, spooled (targets hold a step): targets kept");
    CHECK(follower_open(&f, 0));
    orig = tamper(&f.st, "anchors/step_000000.safetensors", WSYNC_CHAIN_ANCHOR, 0, NULL, &size);
    {
        wsync_result r = wsync_subscriber_sync(f.sub, 0, NULL, &err); /* back to 0: only the anchor */
        CHECK_EQ_INT(r, WSYNC_ERR_DIGEST_MISMATCH);
        CHECK_MSG(strstr(err.message, "BLAKE2b-256") != NULL, "%s", err.message);
        CHECK(kept(&f));
    }
    TEST_END();

    TEST_BEGIN("refused by its hash: an anchor altered, streamed into targets without a step: zeroed, no step");
    {
        image *g2 = (image *)malloc(sizeof *g2);
        wsync_tensor t2[2];
        wsync_subscriber *s2 = NULL;
        wsync_chain_options o = copts(0, NULL, g_pub_a);
        image zero;
        wsync_result r;
        memset(g2, 0x55, sizeof *g2);
        memset(&zero, 0, sizeof zero);
        tensors_of(g2, t2);
        CHECK_EQ_INT(wsync_subscriber_open(&f.st, t2, 2, &o, &s2, &err), WSYNC_OK);
        r = wsync_subscriber_sync(s2, WSYNC_STEP_LATEST, NULL, &err);
        CHECK_EQ_INT(r, WSYNC_ERR_DIGEST_MISMATCH);
        CHECK(!wsync_subscriber_step(s2, NULL));
        CHECK(memcmp(g2, &zero, sizeof zero) == 0);
        /* repaired and re-published: followed */
        put_obj(&f.st, "anchors/step_000000.safetensors", orig, (size_t)size);
        CHECK_EQ_INT(publish_range(&f.st, 100, g_sec_a, 0, 6, 6, &err), WSYNC_OK);
        r = wsync_subscriber_sync(s2, WSYNC_STEP_LATEST, NULL, &err);
        CHECK_MSG(r == WSYNC_OK && holds(g2, 6), "%s", err.message);
        wsync_subscriber_close(s2);
        free(g2);
    }
    free(orig);
    follower_close(&f);
    TEST_END();
}

/* ======================================================================
   The publisher
   ====================================================================== */

static void test_publisher(void)
{
    wsync_error err;
    wsync_store st = mem_store();
    wsync_chain_info c1, c2;
    wsync_publisher *p = NULL;

    TEST_BEGIN("publisher: reopened with its key, it keeps the chain's identity and signs");
    CHECK_EQ_INT(publish_range(&st, 3, g_sec_a, 0, 0, 2, &err), WSYNC_OK);
    CHECK(read_head(&st, &c1));
    CHECK_EQ_INT(publish_range(&st, 3, g_sec_a, 0, 3, 4, &err), WSYNC_OK); /* a new process: image restored */
    CHECK(read_head(&st, &c2));
    CHECK(c1.has_id && c2.has_id && memcmp(c1.id, c2.id, 16) == 0 && c2.head_step == 4 && c2.has_sig);
    wsync_chain_info_free(&c1);
    wsync_chain_info_free(&c2);
    TEST_END();

    TEST_BEGIN("publisher: refused without the key, with another key, with a damaged key; NEW_CHAIN a new id");
    {
        wsync_chain_options o = copts(3, NULL, NULL);
        uint8_t bad[64];
        CHECK_EQ_INT(wsync_publisher_open(&st, &o, &p, &err), WSYNC_ERR_SIGNATURE);
        CHECK_MSG(strstr(err.message, "no sign key") != NULL, "%s", err.message);
        o.sign_key = g_sec_b;
        CHECK_EQ_INT(wsync_publisher_open(&st, &o, &p, &err), WSYNC_ERR_SIGNATURE);
        CHECK_MSG(strstr(err.message, "another key") != NULL, "%s", err.message);
        memcpy(bad, g_sec_a, 64);
        bad[40] ^= 1;
        o.sign_key = bad;
        CHECK_EQ_INT(wsync_publisher_open(&st, &o, &p, &err), WSYNC_ERR_INVALID_ARGUMENT);
        /* nothing was written by the refusals */
        CHECK(read_head(&st, &c1));
        CHECK_EQ_INT(c1.head_step, 4);
        /* a new chain over it: a new identity (by B, say) */
        CHECK_EQ_INT(publish_range(&st, 3, g_sec_b, WSYNC_CHAIN_NEW_CHAIN, 5, 6, &err), WSYNC_OK);
        CHECK(read_head(&st, &c2));
        CHECK(memcmp(c1.id, c2.id, 16) != 0 && memcmp(c2.signer, g_pub_b, 32) == 0);
        wsync_chain_info_free(&c1);
        wsync_chain_info_free(&c2);
        /* and an unsigned chain becomes a signed one only as a new chain */
        wsync_store_close(&st);
        st = mem_store();
        CHECK_EQ_INT(publish_range(&st, 3, NULL, 0, 0, 2, &err), WSYNC_OK);
        CHECK_EQ_INT(publish_range(&st, 3, g_sec_a, 0, 3, 3, &err), WSYNC_ERR_SIGNATURE);
        CHECK_MSG(strstr(err.message, "not signed") != NULL, "%s", err.message);
        CHECK_EQ_INT(publish_range(&st, 3, g_sec_a, WSYNC_CHAIN_NEW_CHAIN, 3, 4, &err), WSYNC_OK);
        CHECK(read_head(&st, &c1));
        CHECK(c1.has_sig && c1.head_step == 4);
        wsync_chain_info_free(&c1);
    }
    wsync_store_close(&st);
    TEST_END();
}

/* ======================================================================
   HEAD's rules
   ====================================================================== */

static void test_head_rules(void)
{
    wsync_store st = mem_store();
    wsync_error err;
    wsync_chain_info c;
    uint64_t n = 0;
    uint8_t *h;
    char *text;
    TEST_BEGIN("HEAD: wsync_chain_head_verify; \"sig\" just before \"check\"; a signed HEAD names every hash");
    CHECK_EQ_INT(publish_range(&st, 3, g_sec_a, 0, 0, 4, &err), WSYNC_OK);
    h = get_obj(&st, "HEAD", &n);
    text = (char *)calloc(1, (size_t)n + 64);
    memcpy(text, h, (size_t)n);
    CHECK_EQ_INT(wsync_chain_head_verify(text, (size_t)n, g_pub_a, NULL, &c, &err), WSYNC_OK);
    CHECK(c.has_sig && c.n_entries == 6);
    wsync_chain_info_free(&c);
    CHECK_EQ_INT(wsync_chain_head_verify(text, (size_t)n, g_pub_b, NULL, NULL, &err), WSYNC_ERR_SIGNATURE);
    /* a key between "sig" and "check" */
    {
        char *sig = strstr(text, "\"sig\":\""), *check = strstr(text, "\"check\":\"");
        char *t2 = (char *)calloc(1, (size_t)n + 64);
        size_t at = (size_t)(check - text);
        CHECK(sig && check);
        memcpy(t2, text, at);
        memcpy(t2 + at, "\"x\":1,\n", 7);
        memcpy(t2 + at + 7, text + at, (size_t)n - at);
        fix_check(t2, (size_t)n + 7);
        CHECK_EQ_INT(wsync_chain_head_parse(t2, (size_t)n + 7, NULL, &c, &err), WSYNC_ERR_BAD_HEAD);
        CHECK_MSG(strstr(err.message, "just before") != NULL, "%s", err.message);
        free(t2);
    }
    /* a hash removed from a signed HEAD (renamed: an unknown key) */
    {
        char *b = strstr(text, "\"blake2b\"");
        CHECK(b != NULL);
        if (b) b[1] = 'B';
        fix_check(text, (size_t)n);
        CHECK_EQ_INT(wsync_chain_head_parse(text, (size_t)n, NULL, &c, &err), WSYNC_ERR_BAD_HEAD);
        CHECK_MSG(strstr(err.message, "every object") != NULL, "%s", err.message);
    }
    /* format_signed refuses an info without its identity */
    CHECK(read_head(&st, &c));
    c.has_id = 0;
    {
        char *t3 = NULL;
        size_t l3 = 0;
        CHECK_EQ_INT(wsync_chain_head_format_signed(&c, g_sec_a, &t3, &l3, &err), WSYNC_ERR_INVALID_ARGUMENT);
    }
    wsync_chain_info_free(&c);
    free(h);
    free(text);
    wsync_store_close(&st);
    TEST_END();
}

/* Key files: wsync_keygen writes NAME.key (0600) and NAME.pub; the keys
   read back sign and verify; keygen never replaces a file; a secret key
   readable by others, a public file given as secret (and the reverse), a
   bad hex digit, a second key, a missing file are refused by name. */
static void test_key_files(void)
{
    char dir[] = "/tmp/wsync_keysXXXXXX", name[128], kp[160], pp[160];
    uint8_t sec[64], pub[32], pub2[32], sig[64];
    wsync_error err;
    struct stat st;
    FILE *f;
    TEST_BEGIN("key_files");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(name, sizeof name, "%s/trainer", dir);
    snprintf(kp, sizeof kp, "%s.key", name);
    snprintf(pp, sizeof pp, "%s.pub", name);
    CHECK_EQ_INT(wsync_keygen(name, &err), WSYNC_OK);
    CHECK(stat(kp, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_EQ_INT(wsync_key_read_secret(kp, sec, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_key_read_public(pp, pub, &err), WSYNC_OK);
    CHECK(memcmp(sec + 32, pub, 32) == 0);
    wsync_ed25519_sign(sec, "step 7", 6, sig);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, "step 7", 6, sig), 1);
    /* never replaced */
    CHECK_EQ_INT(wsync_keygen(name, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "already exists") != NULL);
    CHECK_EQ_INT(wsync_key_read_public(pp, pub2, &err), WSYNC_OK);
    CHECK(memcmp(pub, pub2, 32) == 0);
    /* the wrong kind of file, each way */
    CHECK_EQ_INT(wsync_key_read_public(kp, pub2, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "secret key file") != NULL);
    CHECK(chmod(pp, 0600) == 0);
    CHECK_EQ_INT(wsync_key_read_secret(pp, sec, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "public key file") != NULL);
    /* a secret key others may read */
    CHECK(chmod(kp, 0640) == 0);
    CHECK_EQ_INT(wsync_key_read_secret(kp, sec, &err), WSYNC_ERR_AUTH);
    CHECK(strstr(err.message, "chmod 600") != NULL);
    CHECK(chmod(kp, 0600) == 0);
    /* damaged files */
    f = fopen(pp, "w");
    CHECK(f != NULL);
    if (f) fprintf(f, "wsync ed25519 public %064d\n%064d\n", 0, 0), fclose(f);
    CHECK_EQ_INT(wsync_key_read_public(pp, pub2, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "more than one key") != NULL);
    f = fopen(pp, "w");
    if (f) fprintf(f, "wsync ed25519 public %063dg\n", 0), fclose(f);
    CHECK_EQ_INT(wsync_key_read_public(pp, pub2, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "not a hex digit") != NULL);
    f = fopen(pp, "w");
    if (f) fprintf(f, "ssh-ed25519 AAAA\n"), fclose(f);
    CHECK_EQ_INT(wsync_key_read_public(pp, pub2, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "wsync keygen writes them") != NULL);
    unlink(pp);
    CHECK_EQ_INT(wsync_key_read_public(pp, pub2, &err), WSYNC_ERR_IO);
    CHECK(strstr(err.message, pp) != NULL);
    unlink(kp);
    rmdir(dir);
    TEST_END();
}

int main(void)
{
    make_keys();
    test_follow_exact();
    test_directory();
    test_large_anchor();
    test_refused_heads();
    test_other_chain();
    test_altered_objects();
    test_publisher();
    test_head_rules();
    test_key_files();
    return check_summary();
}
