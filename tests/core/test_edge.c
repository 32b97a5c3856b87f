/* The model's edge: what an engine's tensors may be, and what the chain
   may say, and what wsync does when they disagree. Every case ends exact
   or refused with its documented code, the targets as they were.

   - tied targets (an lm_head that is the token embedding: two names, one
     memory) in every encoding, on plain subscribers and mirrors, through
     anchors (streamed, spooled, in memory) and deltas; memory that
     overlaps otherwise is refused, naming both;
   - partial and mismatched models: WSYNC_ERR_LAYOUT at the anchor, with
     the expected and actual dtype and shape, before a byte moves, and
     WSYNC_CHAIN_PARTIAL for an engine that holds part of the model; the
     background prefetch says it too, and keeps saying it;
   - a store that does not exist (WSYNC_STORE_NO_CREATE: WSYNC_ERR_NO_STORE),
     one with nothing published (WSYNC_ERR_NOT_FOUND);
   - a stale HEAD never moves a subscriber back (WSYNC_ERR_STALE_HEAD, in
     sync and in the prefetch's status); a restarted chain is followed only
     with WSYNC_CHAIN_FOLLOW_RESTART;
   - a transient AUTH failure is retried at the next poll, not refused;
   - a mirror's take says what was fetched.

   The model: every image a pure function of its step; an element that
   changes is incremented as a 16-bit integer, about 4% of them a step. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"
#include "small_model.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EMB_N (64 * 32)
#define W_N (48 * 16)
#define B_N 16
static uint64_t g_emb_shape[2] = {64, 32}, g_w_shape[2] = {48, 16}, g_b_shape[1] = {16};

typedef struct image {
    uint16_t emb[EMB_N], head[EMB_N], w[W_N], b[B_N];
} image;

static void fill(uint16_t *v, size_t n, uint64_t salt, uint64_t step)
{
    sm_fill(v, n, 0x3C00u, salt * 1000003u, salt, step);
}

/* The trainer's image at `step` (about 4% of the elements move a step);
   head equals emb (tied) unless `untie`. */
static void image_at(image *im, uint64_t step, int untie)
{
    fill(im->emb, EMB_N, 1, step);
    fill(im->w, W_N, 2, step);
    fill(im->b, B_N, 3, step);
    if (untie) fill(im->head, EMB_N, 4, step);
    else memcpy(im->head, im->emb, sizeof im->head);
}

/* Tensors over an image: tok_emb, lm_head, w, b; tied: lm_head's data is
   tok_emb's. Names in an order that is not sorted. */
static size_t tensors_of(image *im, int tied, wsync_tensor *t)
{
    wsync_tensor_dense(&t[0], "w", WSYNC_DTYPE_BF16, 2, g_w_shape, im->w, NULL);
    wsync_tensor_dense(&t[1], "tok_emb", WSYNC_DTYPE_BF16, 2, g_emb_shape, im->emb, NULL);
    wsync_tensor_dense(&t[2], "lm_head", WSYNC_DTYPE_BF16, 2, g_emb_shape, tied ? im->emb : im->head, NULL);
    wsync_tensor_dense(&t[3], "b", WSYNC_DTYPE_BF16, 1, g_b_shape, im->b, NULL);
    return 4;
}

/* The targets hold the trainer's image at `step` (tied: lm_head is tok_emb). */
static int holds(const image *got, uint64_t step, int tied)
{
    image want;
    image_at(&want, step, 0);
    return memcmp(got->emb, want.emb, sizeof want.emb) == 0 && memcmp(got->w, want.w, sizeof want.w) == 0 &&
           memcmp(got->b, want.b, sizeof want.b) == 0 &&
           (tied || memcmp(got->head, want.emb, sizeof want.emb) == 0);
}

static wsync_chain_options copts(wsync_encoding enc, uint32_t anchor_every, unsigned flags)
{
    wsync_chain_options o;
    memset(&o, 0, sizeof o);
    o.encoding = enc;
    o.anchor_every = anchor_every;
    o.anchor_fraction = 0.95;
    o.flags = flags;
    return o;
}

/* Publishes steps first..last of the tied trainer (untie: lm_head its own
   memory, with other bytes). */
static int publish_range(const wsync_store *st, wsync_encoding enc, uint32_t anchor_every, uint64_t first,
                         uint64_t last, int untie, uint64_t *state)
{
    wsync_publisher *p = NULL;
    wsync_chain_options o = copts(enc, anchor_every, 0);
    wsync_error err;
    wsync_tensor t[4];
    image *im = (image *)malloc(sizeof *im);
    uint64_t s;
    int ok = im && wsync_publisher_open(st, &o, &p, &err) == WSYNC_OK;
    for (s = first; ok && s <= last; s++) {
        wsync_publish_stats ps;
        image_at(im, s, untie);
        tensors_of(im, !untie, t);
        ok = wsync_publish(p, s, t, 4, &ps, &err) == WSYNC_OK;
        if (!ok) printf("  publish %llu: %s\n", (unsigned long long)s, err.message);
        if (ok && state) *state = ps.state;
    }
    wsync_publisher_close(p);
    free(im);
    return ok;
}

static wsync_store mem_store(void)
{
    wsync_store s;
    wsync_store_mem_open(NULL, &s, NULL);
    return s;
}

static const wsync_encoding g_encs[4] = {WSYNC_ENCODING_PACKED, WSYNC_ENCODING_PACKED_MAX, WSYNC_ENCODING_TRL_V1,
                                         WSYNC_ENCODING_TRL_V3};

/* ======================================================================
   Tied targets
   ====================================================================== */

static void test_tied_plain(void)
{
    size_t e;
    for (e = 0; e < 4; e++) {
        char name[160];
        wsync_store st = mem_store();
        wsync_subscriber *sub = NULL;
        wsync_chain_options o = copts((wsync_encoding)0, 0, WSYNC_CHAIN_VERIFY_STATE);
        wsync_error err;
        wsync_tensor t[4];
        image *got = (image *)calloc(1, sizeof *got);
        uint64_t s, state = 0, mine = 1;
        snprintf(name, sizeof name, "tied: lm_head is tok_emb, %s, plain subscriber, anchors and deltas exact",
                 wsync_encoding_name(g_encs[e]));
        TEST_BEGIN(name);
        tensors_of(got, 1, t);
        CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
        for (s = 0; s <= 9; s++) {
            wsync_sync_stats ss;
            wsync_result r;
            CHECK(publish_range(&st, g_encs[e], 4, s, s, 0, &state));
            r = wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &err);
            CHECK_MSG(r == WSYNC_OK, "step %llu: %s", (unsigned long long)s, err.message);
            CHECK_MSG(holds(got, s, 1), "step %llu", (unsigned long long)s);
            CHECK_EQ_INT(wsync_state_digest(t, 4, 0, &mine, &err), WSYNC_OK);
            CHECK(mine == state);
        }
        wsync_subscriber_close(sub);
        wsync_store_close(&st);
        free(got);
        TEST_END();
    }
}

/* The engine stand-in for a mirror: its own tied memory, written only by takes. */
typedef struct engine {
    image im;
    wsync_tensor t[4];
    unsigned calls;
} engine;

static int engine_take(void *user, const wsync_changes *c)
{
    engine *g = (engine *)user;
    uint8_t *dst = (uint8_t *)g->t[c->index].data;
    uint64_t k;
    g->calls++;
    if (c->whole) memcpy(dst, c->values, (size_t)(c->count * c->width));
    else
        for (k = 0; k < c->count; k++)
            memcpy(dst + c->positions[k] * c->width, (const uint8_t *)c->values + k * c->width, c->width);
    return 0;
}

static void test_tied_mirror(void)
{
    size_t e;
    for (e = 0; e < 4; e++) {
        char name[160];
        wsync_store st = mem_store();
        wsync_mirror *m = NULL;
        wsync_mirror_options mo;
        wsync_error err;
        wsync_tensor t[4];
        image *host = (image *)calloc(1, sizeof *host);
        engine *g = (engine *)calloc(1, sizeof *g);
        uint64_t s;
        snprintf(name, sizeof name, "tied: %s, a mirror on tied caller memory, an engine with tied memory, exact",
                 wsync_encoding_name(g_encs[e]));
        TEST_BEGIN(name);
        memset(&mo, 0, sizeof mo);
        tensors_of(host, 1, t);
        tensors_of(&g->im, 1, g->t);
        CHECK_EQ_INT(wsync_mirror_open(&st, t, 4, &mo, &m, &err), WSYNC_OK);
        for (s = 0; s <= 9; s += 1 + (s & 1)) { /* some takes merge two steps */
            wsync_sync_stats ss;
            wsync_mirror_stats ms;
            uint64_t from = s ? s - 1 - ((s - 1) & 1) + 1 : 0;
            CHECK(publish_range(&st, g_encs[e], 4, from, s, 0, NULL));
            CHECK_MSG(wsync_mirror_sync(m, WSYNC_STEP_LATEST, &ss, &err) == WSYNC_OK, "%s", err.message);
            CHECK_EQ_INT(wsync_mirror_take(m, engine_take, g, &ms, &err), WSYNC_OK);
            CHECK(ms.handed == 1 && ms.step == s);
            CHECK(ms.anchors + ms.deltas >= 1 && ms.bytes_fetched > 0); /* what was fetched is said */
            CHECK_MSG(holds(host, s, 1), "mirror at step %llu", (unsigned long long)s);
            CHECK_MSG(holds(&g->im, s, 1), "engine at step %llu", (unsigned long long)s);
        }
        wsync_mirror_close(m);
        wsync_store_close(&st);
        free(host);
        free(g);
        TEST_END();
    }
}

/* The chain holds other bytes under lm_head than under tok_emb (an untied
   trainer) while the engine ties them: refused at the anchor and at the
   delta, before anything is written. */
static void test_tied_differ(void)
{
    size_t e;
    TEST_BEGIN("tied targets, untied chain: WSYNC_ERR_LAYOUT naming both, at the anchor (streamed and spooled) "
               "and at a delta, targets unchanged");
    for (e = 0; e < 4; e++) {
        wsync_store st = mem_store(), st2 = mem_store();
        wsync_subscriber *sub = NULL;
        wsync_chain_options o = copts((wsync_encoding)0, 0, 0);
        wsync_error err;
        wsync_tensor t[4];
        image *got = (image *)calloc(1, sizeof *got), *before = (image *)malloc(sizeof *before);
        wsync_result r;
        uint64_t held = 0;
        tensors_of(got, 1, t);
        /* an untied chain from step 0 */
        CHECK(publish_range(&st, g_encs[e], 100, 0, 1, 1, NULL));
        CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
        r = wsync_subscriber_sync(sub, 0, NULL, &err);
        CHECK_EQ_INT(r, WSYNC_ERR_LAYOUT);
        CHECK(strstr(err.message, "lm_head") && strstr(err.message, "tok_emb"));
        CHECK(!wsync_subscriber_step(sub, NULL));
        wsync_subscriber_close(sub);
        /* a chain tied at its anchor, untied at its first delta: the delta
           is refused before it writes (the targets stay at step 0) */
        CHECK(publish_range(&st2, g_encs[e], 100, 0, 0, 0, NULL));
        CHECK(publish_range(&st2, g_encs[e], 100, 1, 1, 1, NULL));
        CHECK_EQ_INT(wsync_subscriber_open(&st2, t, 4, &o, &sub, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_subscriber_sync(sub, 0, NULL, &err), WSYNC_OK);
        memcpy(before, got, sizeof *before);
        r = wsync_subscriber_sync(sub, 1, NULL, &err);
        CHECK_MSG(r == WSYNC_ERR_LAYOUT, "%s: %s", wsync_encoding_name(g_encs[e]), err.message);
        CHECK(memcmp(before, got, sizeof *before) == 0);
        CHECK(wsync_subscriber_step(sub, &held) && held == 0);
        /* now holding a step, an untied anchor goes through the spool and is
           refused there */
        wsync_subscriber_close(sub);
        CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
        wsync_subscriber_set_step(sub, 7);
        r = wsync_subscriber_sync(sub, 0, NULL, &err);
        CHECK_EQ_INT(r, WSYNC_ERR_LAYOUT);
        CHECK(memcmp(before, got, sizeof *before) == 0);
        wsync_subscriber_close(sub);
        wsync_store_close(&st);
        wsync_store_close(&st2);
        free(got);
        free(before);
    }
    TEST_END();
}

static void test_overlap(void)
{
    image *im = (image *)calloc(1, sizeof *im);
    wsync_tensor t[4];
    wsync_store st = mem_store();
    wsync_subscriber *sub = NULL;
    wsync_mirror *m = NULL;
    wsync_error err;
    uint64_t half[2] = {32, 32};
    TEST_BEGIN("targets whose memory overlaps without being one tensor: WSYNC_ERR_INVALID_ARGUMENT naming both");
    tensors_of(im, 0, t);
    /* lm_head starts inside tok_emb */
    t[2].data = im->emb + 16;
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, NULL, &sub, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(sub == NULL);
    CHECK(strstr(err.message, "lm_head") || strstr(err.tensor, "lm_head"));
    CHECK(strstr(err.message, "tok_emb") || strstr(err.tensor, "tok_emb"));
    CHECK_EQ_INT(wsync_mirror_open(&st, t, 4, NULL, &m, &err), WSYNC_ERR_INVALID_ARGUMENT);
    /* the same start, another size: not the same tensor */
    tensors_of(im, 1, t);
    wsync_tensor_dense(&t[2], "lm_head", WSYNC_DTYPE_BF16, 2, half, im->emb, NULL);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, NULL, &sub, &err), WSYNC_ERR_INVALID_ARGUMENT);
    /* the same memory as another dtype: not the same tensor either */
    tensors_of(im, 1, t);
    t[2].dtype = WSYNC_DTYPE_F16;
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, NULL, &sub, &err), WSYNC_ERR_INVALID_ARGUMENT);
    /* and wsync_delta_apply given such targets refuses too, before writing */
    CHECK(sub == NULL);
    wsync_store_close(&st);
    free(im);
    TEST_END();
}

/* A publisher given tied entries, and subscribers that do not tie: exact. */
static void test_tied_publisher(void)
{
    size_t e;
    TEST_BEGIN("a publisher given a state_dict with tied entries stays exact (untied subscribers, every encoding)");
    for (e = 0; e < 4; e++) {
        wsync_store st = mem_store();
        wsync_subscriber *sub = NULL;
        wsync_chain_options o = copts((wsync_encoding)0, 0, WSYNC_CHAIN_VERIFY_STATE);
        wsync_error err;
        wsync_tensor t[4];
        image *got = (image *)calloc(1, sizeof *got);
        uint64_t s;
        tensors_of(got, 0, t);
        CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
        for (s = 0; s <= 6; s++) {
            CHECK(publish_range(&st, g_encs[e], 3, s, s, 0, NULL));
            CHECK_MSG(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err) == WSYNC_OK, "%s", err.message);
            CHECK(holds(got, s, 0));
        }
        wsync_subscriber_close(sub);
        wsync_store_close(&st);
        free(got);
    }
    TEST_END();
}

/* ======================================================================
   Partial and mismatched models
   ====================================================================== */

static void test_layout(void)
{
    wsync_store st = mem_store();
    wsync_subscriber *sub = NULL;
    wsync_chain_options o = copts((wsync_encoding)0, 0, 0);
    wsync_error err;
    wsync_tensor t[5];
    image *got = (image *)calloc(1, sizeof *got), *before = (image *)malloc(sizeof *before);
    uint16_t extra[8] = {0}, wide[48 * 17];
    uint64_t eshape[1] = {8}, wshape[2] = {48, 17};
    TEST_BEGIN("layout: a missing, an extra, a reshaped or retyped target is WSYNC_ERR_LAYOUT at the anchor, "
               "with both shapes, before a byte moves");
    CHECK(publish_range(&st, WSYNC_ENCODING_PACKED, 100, 0, 2, 1, NULL));
    memset(got, 0x5A, sizeof *got);
    memcpy(before, got, sizeof *before);
    /* a target the chain does not have */
    tensors_of(got, 0, t);
    wsync_tensor_dense(&t[4], "rope.inv_freq", WSYNC_DTYPE_BF16, 1, eshape, extra, NULL);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 5, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_LAYOUT);
    CHECK_EQ_STR(err.tensor, "rope.inv_freq");
    CHECK(memcmp(before, got, sizeof *before) == 0);
    wsync_subscriber_close(sub);
    /* a chain tensor no target has (the default is the whole model) */
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 3, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_LAYOUT);
    CHECK_EQ_STR(err.tensor, "b");
    CHECK(strstr(err.message, "WSYNC_CHAIN_PARTIAL") != NULL);
    CHECK(memcmp(before, got, sizeof *before) == 0);
    wsync_subscriber_close(sub);
    /* no targets at all */
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 0, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_LAYOUT);
    wsync_subscriber_close(sub);
    /* a shape that differs: the message gives both */
    tensors_of(got, 0, t);
    wsync_tensor_dense(&t[0], "w", WSYNC_DTYPE_BF16, 2, wshape, wide, NULL);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_LAYOUT);
    CHECK_MSG(strstr(err.message, "BF16 [48, 16]") && strstr(err.message, "BF16 [48, 17]"), "%s", err.message);
    CHECK(memcmp(before, got, sizeof *before) == 0);
    wsync_subscriber_close(sub);
    /* a dtype that differs */
    tensors_of(got, 0, t);
    t[3].dtype = WSYNC_DTYPE_F16;
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_LAYOUT);
    CHECK_MSG(strstr(err.message, "BF16 [16]") && strstr(err.message, "F16 [16]"), "%s", err.message);
    CHECK(memcmp(before, got, sizeof *before) == 0);
    wsync_subscriber_close(sub);
    /* a delta checked too: targets vouched for at step 1, one reshaped */
    tensors_of(got, 0, t);
    wsync_tensor_dense(&t[0], "w", WSYNC_DTYPE_BF16, 2, wshape, wide, NULL);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
    wsync_subscriber_set_step(sub, 1);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, 2, NULL, &err), WSYNC_ERR_LAYOUT);
    CHECK(memcmp(before, got, sizeof *before) == 0);
    wsync_subscriber_close(sub);
    wsync_store_close(&st);
    free(got);
    free(before);
    TEST_END();
}

/* WSYNC_CHAIN_PARTIAL: an engine holding w and tok_emb only follows them
   exactly through anchors and deltas of every encoding. */
static void test_partial(void)
{
    size_t e;
    TEST_BEGIN("WSYNC_CHAIN_PARTIAL: a subset of the model follows exactly, every encoding, plain and mirror");
    for (e = 0; e < 4; e++) {
        wsync_store st = mem_store();
        wsync_subscriber *sub = NULL;
        wsync_mirror *m = NULL;
        wsync_mirror_options mo;
        wsync_chain_options o = copts((wsync_encoding)0, 0, WSYNC_CHAIN_PARTIAL | WSYNC_CHAIN_VERIFY_STATE);
        wsync_error err;
        wsync_tensor t[4], mt[4];
        image *got = (image *)calloc(1, sizeof *got), *mir = (image *)calloc(1, sizeof *mir), want;
        uint64_t s;
        tensors_of(got, 0, t);
        tensors_of(mir, 0, mt);
        memset(&mo, 0, sizeof mo);
        mo.chain = o;
        CHECK_EQ_INT(wsync_subscriber_open(&st, t, 2, &o, &sub, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_mirror_open(&st, mt, 2, &mo, &m, &err), WSYNC_OK);
        for (s = 0; s <= 6; s++) {
            CHECK(publish_range(&st, g_encs[e], 4, s, s, 0, NULL));
            CHECK_MSG(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err) == WSYNC_OK, "%s", err.message);
            CHECK_MSG(wsync_mirror_sync(m, WSYNC_STEP_LATEST, NULL, &err) == WSYNC_OK, "%s", err.message);
            image_at(&want, s, 0);
            CHECK(memcmp(got->w, want.w, sizeof want.w) == 0 && memcmp(got->emb, want.emb, sizeof want.emb) == 0);
            CHECK(memcmp(mir->w, want.w, sizeof want.w) == 0 && memcmp(mir->emb, want.emb, sizeof want.emb) == 0);
        }
        wsync_mirror_close(m);
        wsync_subscriber_close(sub);
        wsync_store_close(&st);
        free(got);
        free(mir);
    }
    TEST_END();
}

/* The background prefetch says the model does not match, and keeps
   saying it (not "refused earlier"), with nothing offered. */
static void test_prefetch_layout(void)
{
    wsync_store st = mem_store();
    wsync_subscriber *sub = NULL;
    wsync_chain_options o = copts((wsync_encoding)0, 0, 0);
    wsync_error err;
    wsync_tensor t[4];
    image *got = (image *)calloc(1, sizeof *got);
    uint16_t wide[48 * 17];
    uint64_t wshape[2] = {48, 17}, polls0;
    wsync_prefetch_status ps;
    int i;
    TEST_BEGIN("prefetch: a model that does not match is WSYNC_ERR_LAYOUT in the status, poll after poll; "
               "nothing is ready (anchor and delta)");
    CHECK(publish_range(&st, WSYNC_ENCODING_PACKED, 100, 0, 3, 0, NULL));
    tensors_of(got, 1, t);
    wsync_tensor_dense(&t[0], "w", WSYNC_DTYPE_BF16, 2, wshape, wide, NULL);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_start(sub, 5, &err), WSYNC_OK);
    for (i = 0; i < 400; i++) {
        wsync_subscriber_prefetch_status(sub, &ps);
        if (ps.polls >= 3) break;
        sleep_ms(10);
    }
    CHECK_EQ_INT(ps.last_result, WSYNC_ERR_LAYOUT);
    CHECK_EQ_STR(ps.last_error.tensor, "w");
    CHECK(!wsync_subscriber_ready(sub, NULL));
    polls0 = ps.polls;
    for (i = 0; i < 800; i++) {
        wsync_subscriber_prefetch_status(sub, &ps);
        if (ps.polls >= polls0 + 2) break;
        sleep_ms(10);
    }
    CHECK_EQ_INT(ps.last_result, WSYNC_ERR_LAYOUT); /* the root cause stays */
    wsync_subscriber_stop(sub);
    /* from a vouched-for step: the deltas are checked in the background too */
    wsync_subscriber_set_step(sub, 1);
    CHECK_EQ_INT(wsync_subscriber_start(sub, 5, &err), WSYNC_OK);
    for (i = 0; i < 400; i++) {
        wsync_subscriber_prefetch_status(sub, &ps);
        if (ps.polls >= 2 && ps.last_error_time > 0) break;
        sleep_ms(10);
    }
    CHECK_EQ_INT(ps.last_result, WSYNC_ERR_LAYOUT);
    CHECK(!wsync_subscriber_ready(sub, NULL));
    wsync_subscriber_close(sub);
    wsync_store_close(&st);
    free(got);
    TEST_END();
}

/* ======================================================================
   Stores that are not there, chains with nothing in them
   ====================================================================== */

static void test_no_store(void)
{
    char root[256], deep[320];
    wsync_store st, pst;
    wsync_store_options so;
    wsync_subscriber *sub = NULL;
    wsync_chain_options o = copts((wsync_encoding)0, 0, 0);
    wsync_error err;
    wsync_tensor t[4];
    image *got = (image *)calloc(1, sizeof *got);
    struct stat sb;
    TEST_BEGIN("store codes: WSYNC_ERR_NO_STORE (missing, nothing created), WSYNC_ERR_NOT_FOUND (empty), then OK; "
               "a publisher creates the parents");
    snprintf(root, sizeof root, "/tmp/wsync-edge-%ld", (long)getpid());
    snprintf(deep, sizeof deep, "%s/a/b/bucket", root);
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;
    so.flags = WSYNC_STORE_NO_CREATE;
    CHECK_EQ_INT(wsync_store_dir_open(deep, &so, &st, &err), WSYNC_OK);
    CHECK(stat(root, &sb) != 0); /* nothing made */
    tensors_of(got, 1, t);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_NO_STORE);
    CHECK(strstr(err.message, deep) != NULL);
    CHECK(stat(root, &sb) != 0);
    /* the trainer comes up: its store makes every directory above */
    so.flags = 0;
    CHECK_EQ_INT(wsync_store_dir_open(deep, &so, &pst, &err), WSYNC_OK);
    CHECK(stat(deep, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_NOT_FOUND);
    CHECK(publish_range(&pst, WSYNC_ENCODING_PACKED, 10, 0, 2, 0, NULL));
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    CHECK(holds(got, 2, 1));
    wsync_subscriber_close(sub);
    wsync_store_close(&st);
    /* a file where the store should be */
    so.flags = WSYNC_STORE_NO_CREATE;
    {
        char f[400];
        FILE *fp;
        snprintf(f, sizeof f, "%s/a/file", root);
        fp = fopen(f, "w");
        if (fp) fclose(fp);
        CHECK_EQ_INT(wsync_store_dir_open(f, &so, &st, &err), WSYNC_ERR_NO_STORE);
        remove(f);
    }
    wsync_store_close(&pst);
    CHECK(sm_rm_rf(root));
    free(got);
    TEST_END();
}

/* ======================================================================
   Stale HEAD and restarted chains
   ====================================================================== */

static uint8_t *obj_get(const wsync_store *s, const char *key, uint64_t *size)
{
    uint8_t *b = NULL;
    *size = 0;
    if (wsync_store_get_all(s, key, NULL, &b, size, NULL) != WSYNC_OK) return NULL;
    return b;
}

static void test_stale_head(void)
{
    wsync_store st = mem_store();
    wsync_subscriber *sub = NULL;
    wsync_chain_options o = copts((wsync_encoding)0, 0, 0);
    wsync_error err;
    wsync_tensor t[4];
    image *got = (image *)calloc(1, sizeof *got), *before = (image *)malloc(sizeof *before);
    uint8_t *old_head, *new_head;
    uint64_t old_n, new_n, held = 0;
    wsync_prefetch_status ps;
    wsync_sync_stats ss;
    int i;
    TEST_BEGIN("stale HEAD: sync(LATEST) and the prefetch never go back (WSYNC_ERR_STALE_HEAD, targets kept); "
               "an explicit older step still syncs");
    CHECK(publish_range(&st, WSYNC_ENCODING_PACKED, 100, 0, 1, 0, NULL));
    old_head = obj_get(&st, "HEAD", &old_n);
    CHECK(publish_range(&st, WSYNC_ENCODING_PACKED, 100, 2, 3, 0, NULL));
    new_head = obj_get(&st, "HEAD", &new_n);
    tensors_of(got, 1, t);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    CHECK(holds(got, 3, 1));
    memcpy(before, got, sizeof *before);
    /* a cache serves HEAD as it was at step 1 */
    CHECK(old_head && st.put(st.user, "HEAD", old_head, (size_t)old_n, NULL) == WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &err), WSYNC_ERR_STALE_HEAD);
    CHECK(strstr(err.message, "step 1") && strstr(err.message, "step 3"));
    CHECK(wsync_subscriber_step(sub, &held) && held == 3);
    CHECK(memcmp(before, got, sizeof *before) == 0);
    wsync_subscriber_prefetch_status(sub, &ps);
    CHECK_EQ_INT(ps.last_result, WSYNC_ERR_STALE_HEAD);
    /* the prefetch: nothing offered, the status says why */
    CHECK_EQ_INT(wsync_subscriber_start(sub, 5, &err), WSYNC_OK);
    for (i = 0; i < 400; i++) {
        wsync_subscriber_prefetch_status(sub, &ps);
        if (ps.polls >= 3) break;
        sleep_ms(10);
    }
    CHECK_EQ_INT(ps.last_result, WSYNC_ERR_STALE_HEAD);
    CHECK(!wsync_subscriber_ready(sub, NULL));
    CHECK_EQ_INT(wsync_subscriber_apply_ready(sub, &ss, &err), WSYNC_OK);
    CHECK(wsync_subscriber_step(sub, &held) && held == 3);
    CHECK(memcmp(before, got, sizeof *before) == 0);
    wsync_subscriber_stop(sub);
    /* asked for, an older step is taken */
    CHECK_EQ_INT(wsync_subscriber_sync(sub, 1, NULL, &err), WSYNC_OK);
    CHECK(holds(got, 1, 1));
    /* and HEAD fresh again moves it on */
    CHECK(new_head && st.put(st.user, "HEAD", new_head, (size_t)new_n, NULL) == WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    CHECK(holds(got, 3, 1));
    wsync_subscriber_close(sub);
    wsync_store_close(&st);
    free(old_head);
    free(new_head);
    free(got);
    free(before);
    TEST_END();
}

typedef struct keys {
    char k[64][80];
    size_t n;
} keys;

static int key_add(void *user, const char *key, uint64_t size)
{
    keys *ks = (keys *)user;
    (void)size;
    if (ks->n < 64) snprintf(ks->k[ks->n++], sizeof ks->k[0], "%s", key);
    return 0;
}

/* Every object of the store removed (the store is wiped). */
static void wipe(const wsync_store *st)
{
    keys ks;
    size_t i;
    ks.n = 0;
    st->list(st->user, "", key_add, &ks, NULL);
    for (i = 0; i < ks.n; i++) st->del(st->user, ks.k[i], NULL);
}

static void test_restart(void)
{
    wsync_store st = mem_store();
    wsync_subscriber *sub = NULL, *fol = NULL;
    wsync_chain_options o = copts((wsync_encoding)0, 0, 0);
    wsync_chain_options of = copts((wsync_encoding)0, 0, WSYNC_CHAIN_FOLLOW_RESTART);
    wsync_error err;
    wsync_tensor t[4], tf[4];
    image *got = (image *)calloc(1, sizeof *got), *gf = (image *)calloc(1, sizeof *gf);
    image *before = (image *)malloc(sizeof *before);
    uint64_t held = 0;
    wsync_prefetch_status ps;
    int i;
    TEST_BEGIN("a chain restarted at a lower step: WSYNC_ERR_STALE_HEAD by default, followed with "
               "WSYNC_CHAIN_FOLLOW_RESTART (sync and the prefetch), exact");
    CHECK(publish_range(&st, WSYNC_ENCODING_PACKED, 100, 0, 5, 0, NULL));
    tensors_of(got, 1, t);
    tensors_of(gf, 1, tf);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_open(&st, tf, 4, &of, &fol, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(fol, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    memcpy(before, got, sizeof *before);
    /* the store is wiped and a new run publishes steps 0..2 */
    wipe(&st);
    CHECK(publish_range(&st, WSYNC_ENCODING_PACKED, 100, 0, 2, 0, NULL));
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_ERR_STALE_HEAD);
    CHECK(memcmp(before, got, sizeof *before) == 0);
    CHECK_EQ_INT(wsync_subscriber_sync(fol, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    CHECK(wsync_subscriber_step(fol, &held) && held == 2);
    CHECK(holds(gf, 2, 1));
    /* the prefetch follows too, only when asked to */
    CHECK(publish_range(&st, WSYNC_ENCODING_PACKED, 100, 3, 8, 0, NULL));
    wipe(&st);
    CHECK(publish_range(&st, WSYNC_ENCODING_PACKED, 100, 0, 1, 0, NULL));
    CHECK_EQ_INT(wsync_subscriber_sync(fol, 8, NULL, &err), WSYNC_ERR_NO_PATH); /* gone */
    wsync_subscriber_set_step(fol, 4);
    CHECK_EQ_INT(wsync_subscriber_start(fol, 5, &err), WSYNC_OK);
    for (i = 0; i < 400 && !wsync_subscriber_ready(fol, NULL); i++) sleep_ms(10);
    CHECK(wsync_subscriber_ready(fol, &held) && held == 1);
    CHECK_EQ_INT(wsync_subscriber_apply_ready(fol, NULL, &err), WSYNC_OK);
    CHECK(wsync_subscriber_step(fol, &held) && held == 1);
    CHECK(holds(gf, 1, 1));
    wsync_subscriber_prefetch_status(fol, &ps);
    CHECK(ps.caught_up);
    wsync_subscriber_close(fol);
    CHECK_EQ_INT(wsync_subscriber_start(sub, 5, &err), WSYNC_OK);
    for (i = 0; i < 400; i++) {
        wsync_subscriber_prefetch_status(sub, &ps);
        if (ps.polls >= 3) break;
        sleep_ms(10);
    }
    CHECK_EQ_INT(ps.last_result, WSYNC_ERR_STALE_HEAD);
    CHECK(!wsync_subscriber_ready(sub, NULL));
    wsync_subscriber_close(sub);
    wsync_store_close(&st);
    free(got);
    free(gf);
    free(before);
    TEST_END();
}

/* ======================================================================
   A transient AUTH failure
   ====================================================================== */

typedef struct flaky {
    wsync_store inner;
    pthread_mutex_t mu;
    int fail_left;      /* gets of deltas that answer AUTH */
    unsigned auth_sent;
} flaky;

static wsync_result f_put(void *u, const char *key, const void *bytes, size_t len, wsync_error *err)
{
    flaky *f = (flaky *)u;
    return f->inner.put(f->inner.user, key, bytes, len, err);
}

static wsync_result f_get(void *u, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                          void *sink_user, uint64_t *size, wsync_error *err)
{
    flaky *f = (flaky *)u;
    int fail = 0;
    pthread_mutex_lock(&f->mu);
    if (strncmp(key, "deltas/", 7) == 0 && f->fail_left > 0) {
        f->fail_left--;
        f->auth_sent++;
        fail = 1;
    }
    pthread_mutex_unlock(&f->mu);
    if (fail) return wsync__fail(err, WSYNC_ERR_AUTH, UINT64_MAX, NULL, 0, "HTTP 403 from GET %s", key);
    return f->inner.get(f->inner.user, key, offset, len, sink, sink_user, size, err);
}

static wsync_result f_head(void *u, const char *key, uint64_t *size, wsync_error *err)
{
    flaky *f = (flaky *)u;
    return f->inner.head(f->inner.user, key, size, err);
}

static wsync_result f_list(void *u, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    flaky *f = (flaky *)u;
    return f->inner.list(f->inner.user, prefix, fn, fn_user, err);
}

static void test_transient_auth(void)
{
    flaky f;
    wsync_store st;
    wsync_subscriber *sub = NULL;
    wsync_chain_options o = copts((wsync_encoding)0, 0, 0);
    wsync_error err;
    wsync_tensor t[4];
    image *got = (image *)calloc(1, sizeof *got);
    wsync_prefetch_status ps;
    uint64_t ready = 0;
    int i;
    TEST_BEGIN("prefetch: a transient HTTP 403 on an intact delta is the store's: retried at the next poll, "
               "not refused");
    memset(&f, 0, sizeof f);
    f.inner = mem_store();
    pthread_mutex_init(&f.mu, NULL);
    memset(&st, 0, sizeof st);
    st.user = &f;
    st.put = f_put;
    st.get = f_get;
    st.head = f_head;
    st.list = f_list;
    CHECK(publish_range(&f.inner, WSYNC_ENCODING_PACKED, 100, 0, 1, 0, NULL));
    tensors_of(got, 1, t);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
    CHECK(publish_range(&f.inner, WSYNC_ENCODING_PACKED, 100, 2, 2, 0, NULL));
    f.fail_left = 1;
    CHECK_EQ_INT(wsync_subscriber_start(sub, 5, &err), WSYNC_OK);
    for (i = 0; i < 1000 && !wsync_subscriber_ready(sub, &ready); i++) sleep_ms(10);
    CHECK(f.auth_sent == 1);
    CHECK(ready == 2);
    wsync_subscriber_prefetch_status(sub, &ps);
    CHECK_EQ_INT(ps.refused, 0);
    CHECK_EQ_INT(wsync_subscriber_apply_ready(sub, NULL, &err), WSYNC_OK);
    CHECK(holds(got, 2, 1));
    wsync_subscriber_close(sub);
    wsync_store_close(&f.inner);
    pthread_mutex_destroy(&f.mu);
    free(got);
    TEST_END();
}

/* wsync_delta_apply itself, given tied targets: each change written once. */
static void test_apply_tied(void)
{
    size_t e;
    TEST_BEGIN("wsync_delta_apply with tied targets: written once, reported under both names, every encoding");
    for (e = 0; e < 4; e++) {
        image *a = (image *)malloc(sizeof *a), *b = (image *)malloc(sizeof *b), *got = (image *)malloc(sizeof *got);
        wsync_tensor ta[4], tb[4], tg[4];
        wsync_delta_options d;
        sm_buf out;
        wsync_error err;
        engine *g = (engine *)calloc(1, sizeof *g);
        image_at(a, 3, 0);
        image_at(b, 4, 0);
        memcpy(got, a, sizeof *got);
        memcpy(&g->im, a, sizeof *a);
        tensors_of(a, 1, ta);
        tensors_of(b, 1, tb);
        tensors_of(got, 1, tg);
        tensors_of(&g->im, 0, g->t); /* the engine unties: both names must be handed */
        memcpy(g->im.head, a->emb, sizeof a->emb);
        memset(&d, 0, sizeof d);
        d.encoding = g_encs[e];
        memset(&out, 0, sizeof out);
        CHECK_EQ_INT(wsync_delta_encode(ta, tb, 4, &d, sm_buf_sink, &out, NULL, &err), WSYNC_OK);
        memset(&d, 0, sizeof d);
        d.on_changes = engine_take;
        d.changes_user = g;
        CHECK_MSG(wsync_delta_apply(out.p, out.len, tg, 4, &d, NULL, &err) == WSYNC_OK, "%s", err.message);
        CHECK(holds(got, 4, 1));
        CHECK(holds(&g->im, 4, 0));
        free(out.p);
        free(a);
        free(b);
        free(got);
        free(g);
    }
    TEST_END();
}

/* ======================================================================
   Stores and files that would hang or mislead
   ====================================================================== */

static void on_alarm(int sig)
{
    (void)sig;
    printf("FAIL a FIFO in the store blocked (alarm)\n");
    fflush(stdout);
    _exit(1);
}

static void test_fifo(void)
{
    char root[256], path[320];
    wsync_store st;
    wsync_store_options so;
    wsync_chain_info c;
    wsync_error err;
    wsync_mapped map;
    TEST_BEGIN("a FIFO where HEAD or an anchor should be is refused at once, unread (no blocked open)");
    snprintf(root, sizeof root, "/tmp/wsync-edge-fifo-%ld", (long)getpid());
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;
    CHECK_EQ_INT(wsync_store_dir_open(root, &so, &st, &err), WSYNC_OK);
    CHECK(publish_range(&st, WSYNC_ENCODING_PACKED, 100, 0, 1, 0, NULL));
    signal(SIGALRM, on_alarm);
    alarm(20);
    snprintf(path, sizeof path, "%s/HEAD", root);
    remove(path);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK(wsync_chain_read(&st, NULL, &c, &err) != WSYNC_OK);
    CHECK_MSG(strstr(err.message, "not a regular file") != NULL, "%s", err.message);
    CHECK(wsync_file_map(path, &map, &err) != WSYNC_OK);
    CHECK(strstr(err.message, "not a regular file") != NULL);
    remove(path);
    snprintf(path, sizeof path, "%s/anchors/step_000000.safetensors", root);
    remove(path);
    CHECK(mkfifo(path, 0600) == 0);
    {
        uint64_t size = 0;
        uint8_t *b = NULL;
        CHECK_EQ_INT(wsync_store_get_all(&st, "anchors/step_000000.safetensors", NULL, &b, &size, &err),
                     WSYNC_ERR_IO);
        free(b);
    }
    alarm(0);
    wsync_store_close(&st);
    CHECK(sm_rm_rf(root));
    TEST_END();
}

typedef struct evil {
    wsync_store inner;
} evil;

static wsync_result e_get(void *u, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                          void *sink_user, uint64_t *size, wsync_error *err)
{
    evil *v = (evil *)u;
    if (strncmp(key, "anchors/", 8) == 0)
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0,
                           "HTTP 500: \x1b]0;owned\x07\x1b[2J\r\nall good \xc2\x9b" "31m");
    return v->inner.get(v->inner.user, key, offset, len, sink, sink_user, size, err);
}

static wsync_result e_list(void *u, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    evil *v = (evil *)u;
    return v->inner.list(v->inner.user, prefix, fn, fn_user, err);
}

static int clean(const char *m)
{
    const unsigned char *p = (const unsigned char *)m;
    for (; *p; p++)
        if (*p < 0x20 || *p == 0x7F || (*p == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F)) return 0;
    return 1;
}

static void test_messages(void)
{
    evil v;
    wsync_store st;
    wsync_subscriber *sub = NULL;
    wsync_error err;
    wsync_tensor t[4];
    image *got = (image *)calloc(1, sizeof *got);
    wsync_mapped map;
    wsync_st_file f;
    static const char readme[] = "# wsync\n\nwsync moves model weights from a trainer to inference engines.\n";
    char m[64];
    TEST_BEGIN("messages: no control bytes from a store's words, no URL passwords; a missing file says why; a file that is not "
               "safetensors says so");
    memset(&v, 0, sizeof v);
    v.inner = mem_store();
    memset(&st, 0, sizeof st);
    st.user = &v;
    st.get = e_get;
    st.list = e_list;
    CHECK(publish_range(&v.inner, WSYNC_ENCODING_PACKED, 100, 0, 0, 0, NULL));
    tensors_of(got, 1, t);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, NULL, &sub, &err), WSYNC_OK);
    CHECK(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, NULL, &err) != WSYNC_OK);
    CHECK_MSG(clean(err.message) && strstr(err.message, "all good"), "%s", err.message);
    wsync_subscriber_close(sub);
    wsync_store_close(&v.inner);
    snprintf(m, sizeof m, "a\x1b[31mb\xc2\x85" "c\xc3\xa9");
    wsync_error_clean(m);
    CHECK_EQ_STR(m, "a?[31mb??" "c\xc3\xa9"); /* UTF-8 text stays */
    {
        char u[200];
        snprintf(u, sizeof u, "GET http://trainer:s3cr3t-pass@host:8080/run/HEAD: HTTP 500; 'https://a@b/x' s3://k/p");
        wsync_error_clean(u);
        CHECK_EQ_STR(u, "GET http://***@host:8080/run/HEAD: HTTP 500; 'https://*@b/x' s3://k/p");
    }
    CHECK(wsync_file_map("/nonexistent/missing.safetensors", &map, &err) == WSYNC_ERR_IO);
    CHECK_MSG(strstr(err.message, "No such file") != NULL, "%s", err.message);
    CHECK(wsync_st_parse(readme, sizeof readme - 1, NULL, &f, &err) != WSYNC_OK);
    CHECK_MSG(strstr(err.message, "does not look like a safetensors file") && strstr(err.message, "header length"),
              "%s", err.message);
    free(got);
    TEST_END();
}

/* A model directory's anchor (anchors/step_N/NAME) counts as step N in a
   listing: a HEAD-less store holding one is a foreign chain, and a new
   chain starts after it, so its shards are never written over. */
static void test_dir_anchor_listed(void)
{
    char root[256], path[320];
    wsync_store st;
    wsync_store_options so;
    wsync_publisher *p = NULL;
    wsync_subscriber *sub = NULL;
    wsync_chain_options o = copts(WSYNC_ENCODING_PACKED, 100, 0);
    wsync_error err;
    wsync_tensor t[4];
    wsync_anchor_shard sh[2] = {{"model-00001-of-00002.safetensors", 0, 2, NULL, 0},
                                {"model-00002-of-00002.safetensors", 2, 2, NULL, 0}};
    static const char cfg[] = "{\"model_type\": \"tiny\"}";
    wsync_anchor_file fl[1];
    wsync_chain_info c;
    image *im = (image *)calloc(1, sizeof *im), *got = (image *)calloc(1, sizeof *got);
    uint64_t head = 0;
    TEST_BEGIN("a model directory's anchor counts as its step in a listing: no HEAD is a foreign chain, a new "
               "chain starts after it, a subscriber names it");
    fl[0].name = "config.json";
    fl[0].data = cfg;
    fl[0].size = sizeof cfg - 1;
    snprintf(root, sizeof root, "/tmp/wsync-edge-dir-%ld", (long)getpid());
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;
    CHECK_EQ_INT(wsync_store_dir_open(root, &so, &st, &err), WSYNC_OK);
    image_at(im, 5, 0);
    tensors_of(im, 1, t);
    CHECK_EQ_INT(wsync_publisher_open(&st, &o, &p, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publisher_set_layout(p, sh, 2, fl, 1, &err), WSYNC_OK);
    CHECK_MSG(wsync_publish(p, 5, t, 4, NULL, &err) == WSYNC_OK, "%s", err.message);
    wsync_publisher_close(p);
    p = NULL;
    snprintf(path, sizeof path, "%s/HEAD", root);
    CHECK(remove(path) == 0); /* HEAD lost: the directory anchor alone */
    CHECK_EQ_INT(wsync_chain_read(&st, NULL, &c, &err), WSYNC_OK);
    CHECK(c.n_entries == 1 && c.head_step == 5 && c.entries[0].kind == WSYNC_CHAIN_ANCHOR);
    wsync_chain_info_free(&c);
    CHECK_EQ_INT(wsync_publisher_open(&st, &o, &p, &err), WSYNC_ERR_BAD_HEAD);
    o.flags = WSYNC_CHAIN_NEW_CHAIN;
    CHECK_EQ_INT(wsync_publisher_open(&st, &o, &p, &err), WSYNC_OK);
    CHECK(wsync_publish(p, 5, t, 4, NULL, &err) != WSYNC_OK); /* step 5 is taken */
    CHECK_MSG(wsync_publish(p, 6, t, 4, NULL, &err) == WSYNC_OK, "%s", err.message);
    CHECK(wsync_publisher_head(p, &head) && head == 6);
    wsync_publisher_close(p);
    /* the old shards are as written */
    snprintf(path, sizeof path, "%s/anchors/step_000005/config.json", root);
    {
        FILE *f = fopen(path, "rb");
        char b[64] = {0};
        CHECK(f != NULL);
        if (f) {
            CHECK(fread(b, 1, sizeof b - 1, f) == sizeof cfg - 1 && strcmp(b, cfg) == 0);
            fclose(f);
        }
    }
    /* HEAD-less again (only the listing): a subscriber cannot read a directory
       anchor from it and says so, naming it */
    snprintf(path, sizeof path, "%s/HEAD", root);
    CHECK(remove(path) == 0);
    snprintf(path, sizeof path, "%s/anchors/step_000006.safetensors", root);
    remove(path);
    tensors_of(got, 1, t);
    o.flags = 0;
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, 4, &o, &sub, &err), WSYNC_OK);
    CHECK(wsync_subscriber_sync(sub, 5, NULL, &err) != WSYNC_OK);
    CHECK_MSG(strstr(err.message, "anchors/step_000005/") && strstr(err.message, "only a HEAD"), "%s", err.message);
    wsync_subscriber_close(sub);
    wsync_store_close(&st);
    CHECK(sm_rm_rf(root));
    free(im);
    free(got);
    TEST_END();
}

/* A store whose listing shows nothing (a server that does not list, a
   listing that failed as "nothing") over a foreign, HEAD-less chain: the
   publisher starts a chain, and must not write over the objects there. */
static wsync_result blind_list(void *u, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    (void)u;
    (void)prefix;
    (void)fn;
    (void)fn_user;
    (void)err;
    return WSYNC_OK;
}

static void test_blind_listing(void)
{
    wsync_store inner = mem_store(), st;
    wsync_publisher *p = NULL;
    wsync_chain_options o = copts(WSYNC_ENCODING_PACKED, 100, 0);
    wsync_error err;
    wsync_tensor t[4];
    image *im = (image *)calloc(1, sizeof *im);
    uint8_t *before, *after;
    uint64_t nb = 0, na = 0;
    TEST_BEGIN("a listing that shows nothing over a foreign chain: the new chain's publisher writes over none of "
               "its objects (WSYNC_ERR_BAD_HEAD naming the object)");
    CHECK(publish_range(&inner, WSYNC_ENCODING_PACKED, 100, 0, 2, 1, NULL));
    inner.del(inner.user, "HEAD", NULL); /* a foreign, HEAD-less chain */
    before = obj_get(&inner, "anchors/step_000000.safetensors", &nb);
    st = inner;
    st.list = blind_list;
    st.close = NULL;
    CHECK_EQ_INT(wsync_publisher_open(&st, &o, &p, &err), WSYNC_OK); /* it looks empty */
    image_at(im, 0, 0);
    tensors_of(im, 1, t);
    CHECK_EQ_INT(wsync_publish(p, 0, t, 4, NULL, &err), WSYNC_ERR_BAD_HEAD);
    CHECK_MSG(strstr(err.message, "anchors/step_000000.safetensors") != NULL, "%s", err.message);
    after = obj_get(&inner, "anchors/step_000000.safetensors", &na);
    CHECK(before && after && na == nb && memcmp(before, after, (size_t)nb) == 0);
    CHECK(obj_get(&inner, "HEAD", &na) == NULL);
    wsync_publisher_close(p);
    /* an empty store stays publishable the same way */
    {
        wsync_store fresh = mem_store();
        CHECK(publish_range(&fresh, WSYNC_ENCODING_PACKED, 100, 0, 3, 0, NULL));
        wsync_store_close(&fresh);
    }
    free(before);
    free(after);
    free(im);
    wsync_store_close(&inner);
    TEST_END();
}

int main(void)
{
    test_tied_plain();
    test_tied_mirror();
    test_tied_differ();
    test_overlap();
    test_tied_publisher();
    test_apply_tied();
    test_layout();
    test_partial();
    test_prefetch_layout();
    test_no_store();
    test_stale_head();
    test_restart();
    test_transient_auth();
    test_fifo();
    test_messages();
    test_dir_anchor_listed();
    test_blind_listing();
    return check_summary();
}
