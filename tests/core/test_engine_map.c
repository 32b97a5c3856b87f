/* The engine map (wsync.h >>engine-map): a mirror's changes into an
   engine's fused and tensor-parallel parameters.

   A Qwen-like checkpoint (q, k, v, o, gate, up, down, a norm, an
   embedding and an lm_head, bf16 and f32) is published step by step; two
   ranks, each with its own mirror, map it into vLLM's layout for tensor
   parallelism over 2: qkv_proj and gate_up_proj fused column-parallel
   shards (dim 0), o_proj and down_proj row-parallel (dim 1), the
   vocabulary split with padding rows, the norm one to one by name. After
   every take each rank's parameters must equal the trainer's tensors fused
   and sliced, bit for bit (compared by wsync_digest against parameters
   built here from the published image), padding rows untouched: stepping,
   merged over several steps, across anchors, through the scatter and
   through a callback, and again after a callback that refused; a sink
   that defers to the take's end call (WSYNC_ENGINE_END_CALL), refusing
   there or part way, gets the whole take again. Then the
   refusals: a tensor not covered (and the part named), overlapping
   pieces, a dtype mismatch, a parameter smaller than its pieces, a pad
   that does not fill, an unknown tensor; each names the parameter and
   moves nothing. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H 16
#define V 250
#define VP 128 /* a rank's vocabulary rows: 125 + 3 padding */
enum { T_EMB, T_Q, T_K, T_V, T_O, T_GATE, T_UP, T_DOWN, T_NORM, T_HEAD, NT };
static const char *g_names[NT] = {"embed_tokens.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
                                  "o_proj.weight", "gate_proj.weight", "up_proj.weight", "down_proj.weight",
                                  "norm.weight", "lm_head.weight"};
static uint64_t g_shapes[NT][2] = {{V, H}, {32, H}, {H, H}, {H, H}, {H, 32}, {48, H}, {48, H}, {H, 48}, {H, 0}, {V, H}};
static uint32_t g_ranks[NT] = {2, 2, 2, 2, 2, 2, 2, 2, 1, 2};
static size_t g_off[NT + 1];
#define MAXSTEP 24
static uint8_t *g_img[MAXSTEP + 1];

static unsigned width(size_t i) { return i == T_NORM ? 4 : 2; }
static wsync_dtype dtype(size_t i) { return i == T_NORM ? WSYNC_DTYPE_F32 : WSYNC_DTYPE_BF16; }

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* step 0: random; each step changes about 3% of elements (+1 as an integer) */
static void make_images(void)
{
    size_t i, s;
    uint64_t seed = 0x9e3779b97f4a7c15ull, b;
    g_off[0] = 0;
    for (i = 0; i < NT; i++)
        g_off[i + 1] = g_off[i] + (size_t)(g_shapes[i][0] * (g_ranks[i] > 1 ? g_shapes[i][1] : 1)) * width(i);
    for (s = 0; s <= MAXSTEP; s++) {
        g_img[s] = (uint8_t *)malloc(g_off[NT]);
        if (!s) {
            for (b = 0; b < g_off[NT]; b++) g_img[0][b] = (uint8_t)(rnd(&seed) & 0x3f); /* finite values */
            continue;
        }
        memcpy(g_img[s], g_img[s - 1], g_off[NT]);
        for (i = 0; i < NT; i++) {
            size_t n = (g_off[i + 1] - g_off[i]) / width(i), e;
            for (e = 0; e < n; e++)
                if (rnd(&seed) % 100 < 3) g_img[s][g_off[i] + e * width(i)]++;
        }
    }
}

static void tensors_of(uint8_t *img, wsync_tensor *t)
{
    size_t i;
    wsync_error err;
    for (i = 0; i < NT; i++)
        CHECK_EQ_INT(wsync_tensor_dense(&t[i], g_names[i], dtype(i), g_ranks[i], g_shapes[i], img + g_off[i], &err),
                     WSYNC_OK);
}

/* One rank's parameters (vLLM's names) and their host memory. */
#define NP 7
typedef struct rank_map {
    int rank;
    wsync_map_piece pc[NP][3];
    uint64_t shape[NP][2];
    wsync_map_param p[NP];
    uint8_t *buf[NP];
    size_t bytes[NP];
} rank_map;

static void piece(wsync_map_piece *pc, size_t t, uint64_t start, uint64_t len)
{
    pc->tensor = g_names[t];
    pc->start = start;
    pc->length = len;
}

static void param(rank_map *R, size_t j, const char *name, size_t t0, uint64_t rows, uint64_t cols, uint32_t dim,
                  size_t npieces, uint64_t pad)
{
    wsync_map_param *q = &R->p[j];
    R->shape[j][0] = rows;
    R->shape[j][1] = cols;
    memset(q, 0, sizeof *q);
    q->name = name;
    q->dtype = dtype(t0);
    q->rank = g_ranks[t0];
    q->shape = R->shape[j];
    q->dim = dim;
    q->pieces = npieces ? R->pc[j] : NULL;
    q->n_pieces = npieces;
    q->pad = pad;
    R->bytes[j] = (size_t)(rows * (q->rank > 1 ? cols : 1)) * width(t0);
    R->buf[j] = (uint8_t *)malloc(R->bytes[j]);
    memset(R->buf[j], 0xAB, R->bytes[j]); /* padding keeps this */
    q->data = R->buf[j];
}

static void rank_init(rank_map *R, int r)
{
    memset(R, 0, sizeof *R);
    R->rank = r;
    piece(&R->pc[0][0], T_Q, (uint64_t)r * 16, 16);
    piece(&R->pc[0][1], T_K, (uint64_t)r * 8, 8);
    piece(&R->pc[0][2], T_V, (uint64_t)r * 8, 8);
    param(R, 0, "qkv_proj.weight", T_Q, 32, H, 0, 3, 0);
    piece(&R->pc[1][0], T_O, (uint64_t)r * 16, 16);
    param(R, 1, "o_proj.weight", T_O, H, 16, 1, 1, 0);
    piece(&R->pc[2][0], T_GATE, (uint64_t)r * 24, 24);
    piece(&R->pc[2][1], T_UP, (uint64_t)r * 24, 24);
    param(R, 2, "gate_up_proj.weight", T_GATE, 48, H, 0, 2, 0);
    piece(&R->pc[3][0], T_DOWN, (uint64_t)r * 24, 24);
    param(R, 3, "down_proj.weight", T_DOWN, H, 24, 1, 1, 0);
    param(R, 4, "norm.weight", T_NORM, H, 0, 0, 0, 0);
    piece(&R->pc[5][0], T_EMB, (uint64_t)r * 125, 125);
    param(R, 5, "embed_tokens.weight", T_EMB, VP, H, 0, 1, 3);
    piece(&R->pc[6][0], T_HEAD, (uint64_t)r * 125, 125);
    param(R, 6, "lm_head.weight", T_HEAD, VP, H, 0, 1, 3);
}

static void rank_free(rank_map *R)
{
    size_t j;
    for (j = 0; j < NP; j++) free(R->buf[j]);
}

/* The parameter as it should be: the image's tensors fused and sliced,
   padding 0xAB. */
static uint64_t expected_digest(const rank_map *R, size_t j, const uint8_t *img)
{
    const wsync_map_param *q = &R->p[j];
    uint8_t *x = (uint8_t *)malloc(R->bytes[j]);
    uint64_t d, o, outer = 1, inner = 1, at = 0;
    size_t k, t0 = 0, dd;
    unsigned w;
    memset(x, 0xAB, R->bytes[j]);
    if (!q->n_pieces) {
        for (k = 0; k < NT; k++)
            if (!strcmp(g_names[k], q->name)) t0 = k;
        memcpy(x, img + g_off[t0], R->bytes[j]);
    } else {
        for (dd = 0; dd < q->rank; dd++) {
            if (dd < q->dim) outer *= q->shape[dd];
            if (dd > q->dim) inner *= q->shape[dd];
        }
        w = q->dtype == WSYNC_DTYPE_F32 ? 4 : 2;
        for (o = 0; o < outer; o++) {
            at = o * q->shape[q->dim] * inner;
            for (k = 0; k < q->n_pieces; k++) {
                size_t t;
                for (t = 0; t < NT; t++)
                    if (!strcmp(g_names[t], q->pieces[k].tensor)) break;
                memcpy(x + at * w,
                       img + g_off[t] + ((o * g_shapes[t][q->dim] + q->pieces[k].start) * inner) * w,
                       (size_t)(q->pieces[k].length * inner * w));
                at += q->pieces[k].length * inner;
            }
        }
    }
    d = wsync_digest(x, R->bytes[j]);
    free(x);
    return d;
}

static int rank_is(const rank_map *R, const uint8_t *img)
{
    size_t j;
    int ok = 1;
    for (j = 0; j < NP; j++)
        if (wsync_digest(R->buf[j], R->bytes[j]) != expected_digest(R, j, img)) {
            printf("  rank %d: parameter %s differs\n", R->rank, R->p[j].name);
            ok = 0;
        }
    return ok;
}

/* A callback engine: scatters itself, checks the positions. */
typedef struct cb_engine {
    rank_map *R;
    int bad, refuse;
    uint64_t calls;
} cb_engine;

static int on_param(void *user, const wsync_param_changes *c)
{
    cb_engine *E = (cb_engine *)user;
    rank_map *R = E->R;
    uint64_t i, n = R->bytes[c->index] / c->width, rows_ok;
    const wsync_map_param *q = c->param;
    E->calls++;
    if (E->refuse && E->calls >= (uint64_t)E->refuse) return 5;
    if (q != &R->p[c->index] || !c->tensor || c->width != (q->dtype == WSYNC_DTYPE_F32 ? 4u : 2u)) E->bad = 1;
    /* padding rows (dim 0, the last pad rows) are never written */
    rows_ok = q->pad ? (q->shape[0] - q->pad) * (q->rank > 1 ? q->shape[1] : 1) : n;
    for (i = 0; i < c->count; i++) {
        if (c->positions[i] >= rows_ok || (i && c->positions[i] <= c->positions[i - 1])) E->bad = 1;
        if (c->positions[i] < n)
            memcpy(R->buf[c->index] + c->positions[i] * c->width, (const uint8_t *)c->values + i * c->width,
                   c->width);
    }
    return 0;
}

static wsync_chain_options chain_opts(uint32_t anchor_every)
{
    wsync_chain_options o;
    memset(&o, 0, sizeof o);
    o.encoding = WSYNC_ENCODING_PACKED;
    o.anchor_every = anchor_every;
    o.retain = 1000;
    o.anchor_fraction = 0.99;
    o.flags = WSYNC_CHAIN_KEEP_F32;
    return o;
}

typedef struct node {
    rank_map R;
    uint8_t *host;
    wsync_tensor t[NT];
    wsync_mirror *m;
    wsync_engine *e;
} node;

/* tied: the checkpoint has no lm_head.weight (its NT - 1 tensors), and the
   rank's lm_head.weight is tied to the embedding (the same rows). */
static int node_open_tied(node *N, const wsync_store *st, int r, uint32_t chunk, int tied)
{
    wsync_mirror_options o;
    wsync_error err;
    memset(N, 0, sizeof *N);
    rank_init(&N->R, r);
    if (tied) N->R.pc[6][0].tensor = g_names[T_EMB];
    N->host = (uint8_t *)calloc(g_off[NT], 1);
    tensors_of(N->host, N->t);
    memset(&o, 0, sizeof o);
    o.chain = chain_opts(0);
    o.chunk = chunk;
    if (wsync_mirror_open(st, N->t, tied ? NT - 1 : NT, &o, &N->m, &err) != WSYNC_OK) {
        CHECK_MSG(0, "mirror_open: %s", err.message);
        return 0;
    }
    if (wsync_engine_open(N->m, N->R.p, NP, WSYNC_MAP_SHARD, &N->e, &err) != WSYNC_OK) {
        CHECK_MSG(0, "engine_open: %s", err.message);
        return 0;
    }
    return 1;
}

static int node_open(node *N, const wsync_store *st, int r, uint32_t chunk)
{
    return node_open_tied(N, st, r, chunk, 0);
}

static void node_close(node *N)
{
    wsync_engine_close(N->e);
    wsync_mirror_close(N->m);
    rank_free(&N->R);
    free(N->host);
}

static void test_steps(int use_cb, uint32_t chunk)
{
    char name[128];
    wsync_store st;
    wsync_publisher *P = NULL;
    wsync_chain_options co = chain_opts(7);
    wsync_error err;
    node N[2];
    uint64_t s;
    int r;
    snprintf(name, sizeof name, "engine map: 2 ranks, fused and sharded, every take exact (%s, chunk %u)",
             use_cb == 2 ? "callback and scatter" : use_cb ? "callback" : "scatter", chunk);
    TEST_BEGIN(name);
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &st, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publisher_open(&st, &co, &P, &err), WSYNC_OK);
    for (s = 0; s <= MAXSTEP; s++) {
        wsync_tensor t[NT];
        wsync_publish_stats ps;
        tensors_of(g_img[s], t);
        CHECK_EQ_INT(wsync_publish(P, s, t, NT, &ps, &err), WSYNC_OK);
        if (s == 0) {
            if (!node_open(&N[0], &st, 0, chunk) || !node_open(&N[1], &st, 1, chunk)) break;
            /* a parameter without data goes to the callback (2: half of them) */
            for (r = 0; r < 2 && use_cb; r++) {
                size_t j;
                for (j = 0; j < NP; j++)
                    if (use_cb == 1 || j % 2) N[r].R.p[j].data = NULL;
            }
        }
        /* takes every step up to 10, then every third step (merged) */
        if (s > 10 && s % 3) continue;
        for (r = 0; r < 2; r++) {
            wsync_engine_stats es;
            cb_engine E;
            uint64_t got = 0;
            memset(&E, 0, sizeof E);
            E.R = &N[r].R;
            CHECK_EQ_INT(wsync_mirror_sync(N[r].m, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
            if (use_cb) CHECK_EQ_INT(wsync_engine_take(N[r].e, on_param, &E, &es, &err), WSYNC_OK);
            else CHECK_EQ_INT(wsync_engine_take(N[r].e, NULL, NULL, &es, &err), WSYNC_OK);
            CHECK(!E.bad);
            CHECK(es.mirror.handed);
            CHECK(wsync_mirror_engine_step(N[r].m, &got) && got == s);
            CHECK_MSG(rank_is(&N[r].R, g_img[s]), "rank %d step %llu", r, (unsigned long long)s);
            if (s == 0) CHECK_EQ_U64(es.params, NP);
            CHECK(es.positions > 0 && es.calls > 0);
        }
    }
    /* a callback that refuses: WSYNC_ERR_SINK, no step; the next take hands
       again what was not handed, and the rank is exact */
    {
        wsync_tensor t[NT];
        wsync_publish_stats ps;
        cb_engine E;
        uint64_t got;
        s = MAXSTEP + 1;
        tensors_of(g_img[1], t); /* back to step 1's image: many changes */
        CHECK_EQ_INT(wsync_publish(P, s, t, NT, &ps, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_mirror_sync(N[0].m, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
        memset(&E, 0, sizeof E);
        E.R = &N[0].R;
        E.refuse = 3;
        {
            size_t j;
            for (j = 0; j < NP; j++) N[0].R.p[j].data = NULL;
        }
        CHECK_EQ_INT(wsync_engine_take(N[0].e, on_param, &E, NULL, &err), WSYNC_ERR_SINK);
        CHECK(!wsync_mirror_engine_step(N[0].m, &got));
        CHECK(strstr(err.message, "returned 5") != NULL);
        E.refuse = 0;
        if (!use_cb) {
            size_t j;
            for (j = 0; j < NP; j++) N[0].R.p[j].data = N[0].R.buf[j];
        }
        CHECK_EQ_INT(wsync_engine_take(N[0].e, use_cb ? on_param : NULL, &E, NULL, &err), WSYNC_OK);
        CHECK(wsync_mirror_engine_step(N[0].m, &got) && got == s);
        CHECK(rank_is(&N[0].R, g_img[1]));
    }
    wsync_publisher_close(P);
    node_close(&N[0]);
    node_close(&N[1]);
    wsync_store_close(&st);
    TEST_END();
}

/* Each bad map refused at open, naming the parameter (and what), nothing moved. */
static void expect_refused(wsync_mirror *m, const wsync_map_param *p, size_t n, unsigned flags, const char *what,
                           const char *w1, const char *w2)
{
    wsync_engine *e = (wsync_engine *)1;
    wsync_error err;
    uint64_t s0 = 0, s1 = 0;
    int h0 = wsync_mirror_engine_step(m, &s0);
    CHECK_EQ_INT(wsync_engine_open(m, p, n, flags, &e, &err), WSYNC_ERR_LAYOUT);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.message, w1) != NULL, "%s: '%s' not in: %s", what, w1, err.message);
    CHECK_MSG(!w2 || strstr(err.message, w2) != NULL, "%s: '%s' not in: %s", what, w2, err.message);
    CHECK(wsync_mirror_engine_step(m, &s1) == h0 && s0 == s1);
    if (check__is_verbose()) printf("  %s: %s\n", what, err.message);
}

static void test_refusals(void)
{
    wsync_store st;
    wsync_publisher *P = NULL;
    wsync_chain_options co = chain_opts(7);
    wsync_error err;
    wsync_tensor t[NT];
    wsync_publish_stats ps;
    node N;
    rank_map A, B, C;
    TEST_BEGIN("engine map: bad maps refused at open, naming the parameter and the piece");
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &st, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publisher_open(&st, &co, &P, &err), WSYNC_OK);
    tensors_of(g_img[0], t);
    CHECK_EQ_INT(wsync_publish(P, 0, t, NT, &ps, &err), WSYNC_OK);
    if (node_open(&N, &st, 0, 0)) {
        uint8_t *before = (uint8_t *)malloc(N.R.bytes[0]);
        CHECK_EQ_INT(wsync_mirror_sync(N.m, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_engine_take(N.e, NULL, NULL, NULL, &err), WSYNC_OK);
        CHECK(rank_is(&N.R, g_img[0]));
        rank_init(&A, 0);
        /* a rank's share is not the whole model: refused without WSYNC_MAP_SHARD */
        expect_refused(N.m, A.p, NP, 0, "share as whole", "embed_tokens.weight", "[125, 250) along dim 0");
        /* a tensor no parameter names */
        expect_refused(N.m, A.p, NP - 1, WSYNC_MAP_SHARD, "uncovered", "lm_head.weight", "covered by no parameter");
        /* overlap: k's piece moved onto q's rows... in the same tensor */
        A.pc[0][1].tensor = g_names[T_Q];
        A.pc[0][1].start = 8;
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "overlap", "qkv_proj.weight", "overlaps");
        rank_free(&A);
        rank_init(&A, 0);
        /* two parameters from one tensor's rows (lm_head from the embedding),
           not the same rows: an overlap */
        A.pc[6][0].tensor = g_names[T_EMB];
        A.pc[6][0].start = 1;
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "overlap of two", "parameter 'lm_head.weight' piece 0 overlaps",
                       "parameter 'embed_tokens.weight' piece 0 in tensor 'embed_tokens.weight' at 1");
        /* the same rows: tied to the embedding, but this checkpoint has its
           own lm_head.weight, which no parameter holds now */
        A.pc[6][0].start = 0;
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "tied, head in the checkpoint", "'lm_head.weight'",
                       "covered by no parameter");
        /* the same rows but not the same parameter (another pad): no tie */
        A.shape[6][0] = VP + 1;
        A.p[6].pad = 4;
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "tie of another shape", "parameter 'lm_head.weight' piece 0 overlaps",
                       "'embed_tokens.weight' piece 0");
        A.shape[6][0] = VP;
        A.p[6].pad = 3;
        A.pc[6][0].tensor = g_names[T_HEAD];
        A.p[4].dtype = WSYNC_DTYPE_BF16; /* the norm is f32 */
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "dtype", "norm.weight", "dtype BF16");
        A.p[4].dtype = WSYNC_DTYPE_F32;
        A.shape[0][0] = 24; /* qkv smaller than its 32 rows of pieces */
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "smaller", "qkv_proj.weight", "smaller than its pieces");
        A.shape[0][0] = 32;
        A.p[5].pad = 2; /* 125 + 2 != 128 */
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "pad", "embed_tokens.weight", "pad 2");
        A.p[5].pad = 3;
        A.pc[2][1].tensor = "up.weight";
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "unknown", "gate_up_proj.weight", "piece 1: no checkpoint");
        A.pc[2][1].tensor = g_names[T_UP];
        A.pc[3][0].start = 40; /* [40, 64) of down's 48 columns */
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "outside", "down_proj.weight", "piece 0");
        A.pc[3][0].start = 0;
        A.shape[1][0] = 8; /* o_proj's dim 0 must equal the tensor's */
        expect_refused(N.m, A.p, NP, WSYNC_MAP_SHARD, "other dim", "o_proj.weight", "dim 0 is 8");
        A.shape[1][0] = H;
        /* a scatter without data: refused before anything moves */
        A.p[2].data = NULL;
        {
            wsync_engine *e;
            uint64_t got = 0;
            CHECK_EQ_INT(wsync_engine_open(N.m, A.p, NP, WSYNC_MAP_SHARD, &e, &err), WSYNC_OK);
            memcpy(before, A.buf[0], N.R.bytes[0]);
            CHECK_EQ_INT(wsync_engine_take(e, NULL, NULL, NULL, &err), WSYNC_ERR_INVALID_ARGUMENT);
            CHECK(strstr(err.message, "gate_up_proj.weight") != NULL);
            CHECK(memcmp(before, A.buf[0], N.R.bytes[0]) == 0);
            CHECK(wsync_mirror_engine_step(N.m, &got) && got == 0);
            wsync_engine_close(e);
        }
        rank_free(&A);
        /* both ranks together cover everything; rank 1 holding v_proj's
           rows [8, 12) only leaves [12, 16) to no rank */
        rank_init(&A, 0);
        rank_init(&B, 1);
        {
            wsync_map_rank two[2];
            two[0].params = A.p;
            two[0].n = NP;
            two[1].params = B.p;
            two[1].n = NP;
            CHECK_EQ_INT(wsync_engine_map_check(N.t, NT, two, 2, &err), WSYNC_OK);
            CHECK_EQ_INT(wsync_engine_map_check(N.t, NT, two, 1, &err), WSYNC_ERR_LAYOUT);
            CHECK(strstr(err.message, "'embed_tokens.weight': [125, 250) along dim 0") != NULL);
            B.pc[0][2].length = 0;
            CHECK_EQ_INT(wsync_engine_map_check(N.t, NT, two, 2, &err), WSYNC_ERR_LAYOUT);
            CHECK(strstr(err.message, "qkv_proj.weight") != NULL && strstr(err.message, "piece 2") != NULL);
            B.pc[0][2].length = 4;
            B.shape[0][0] = 28;
            CHECK_EQ_INT(wsync_engine_map_check(N.t, NT, two, 2, &err), WSYNC_ERR_LAYOUT);
            CHECK_MSG(strstr(err.message, "'v_proj.weight': [12, 16) along dim 0 is covered by no parameter "
                                          "(parameter 'qkv_proj.weight' piece 2 of rank 1 ends there)") != NULL,
                      "%s", err.message);
            B.shape[0][0] = 32;
            B.pc[0][2].length = 8;
            CHECK_EQ_INT(wsync_engine_map_check(N.t, NT, two, 2, &err), WSYNC_OK);
            /* rank 1's q rows moved onto rank 0's: [8, 24) overlaps [0, 16),
               and [24, 32) is nobody's; the overlap is named first */
            B.pc[0][0].start = 8;
            CHECK_EQ_INT(wsync_engine_map_check(N.t, NT, two, 2, &err), WSYNC_ERR_LAYOUT);
            CHECK_MSG(strstr(err.message, "parameter 'qkv_proj.weight' piece 0 of rank 1: [8, 24) of tensor "
                                          "'q_proj.weight' along dim 0 overlaps parameter 'qkv_proj.weight' piece 0 "
                                          "of rank 0's [0, 16)") != NULL, "%s", err.message);
            if (check__is_verbose()) printf("  overlap across ranks: %s\n", err.message);
            B.pc[0][0].start = 16;
            /* o_proj's columns: rank 1 takes [0, 16) as rank 0 does, so
               [16, 32) is nobody's (a dim-1 gap, named with the piece) */
            B.pc[1][0].start = 0;
            CHECK_EQ_INT(wsync_engine_map_check(N.t, NT, two, 2, &err), WSYNC_ERR_LAYOUT);
            CHECK_MSG(strstr(err.message, "'o_proj.weight': [16, 32) along dim 1 is covered by no parameter") != NULL &&
                      strstr(err.message, "parameter 'o_proj.weight' piece 0 of rank") != NULL, "%s", err.message);
            B.pc[1][0].start = 16;
        }
        /* replicas: a third rank holding rank 0's slices again (a second
           copy of the shard) is the same slices, accepted; one of its
           slices shifted is an overlap, named with its rank */
        rank_init(&C, 0);
        {
            wsync_map_rank three[3];
            three[0].params = A.p;
            three[0].n = NP;
            three[1].params = B.p;
            three[1].n = NP;
            three[2].params = C.p;
            three[2].n = NP;
            CHECK_EQ_INT(wsync_engine_map_check(N.t, NT, three, 3, &err), WSYNC_OK);
            C.pc[2][1].start = 4; /* up [4, 28): overlaps rank 0's [0, 24) and rank 1's [24, 48) */
            CHECK_EQ_INT(wsync_engine_map_check(N.t, NT, three, 3, &err), WSYNC_ERR_LAYOUT);
            CHECK_MSG(strstr(err.message, "parameter 'gate_up_proj.weight' piece 1 of rank 2") != NULL &&
                      strstr(err.message, "'up_proj.weight'") != NULL, "%s", err.message);
        }
        rank_free(&C);
        rank_free(&A);
        rank_free(&B);
        free(before);
        node_close(&N);
    }
    wsync_publisher_close(P);
    wsync_store_close(&st);
    TEST_END();
}

/* Tied embeddings: a checkpoint without lm_head.weight (Qwen3-0.6B's, with
   tie_word_embeddings), engines whose lm_head.weight is tied to the
   embedding. (1) Two tensor-parallel ranks, each lm_head shard the
   embedding's rows of that rank (one checkpoint tensor feeding two
   parameters); (2) one rank holding everything, the embedding by name and
   lm_head.weight its piece [0, V) (a parameter absent from the checkpoint).
   Every take exact (lm_head equal to the embedding's rows), through the
   scatter and through a callback, which sees both parameters. */
static void test_tied(void)
{
    wsync_store st;
    wsync_publisher *P = NULL;
    wsync_chain_options co = chain_opts(5);
    wsync_error err;
    node N[2];
    wsync_tensor wt[NT];
    wsync_mirror *wm = NULL;
    wsync_engine *we = NULL;
    wsync_map_param wp[NT];
    wsync_map_piece head;
    uint8_t *whost = (uint8_t *)calloc(g_off[NT], 1), *wbuf[NT];
    uint64_t s;
    size_t j;
    int r, opened = 0;
    TEST_BEGIN("engine map: tied embeddings (lm_head.weight not in the checkpoint), every take exact");
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &st, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publisher_open(&st, &co, &P, &err), WSYNC_OK);
    memset(wp, 0, sizeof wp);
    memset(wbuf, 0, sizeof wbuf);
    for (s = 0; s <= 12; s++) {
        wsync_tensor t[NT];
        wsync_publish_stats ps;
        tensors_of(g_img[s], t);
        CHECK_EQ_INT(wsync_publish(P, s, t, NT - 1, &ps, &err), WSYNC_OK);
        if (s == 0) {
            wsync_mirror_options o;
            wsync_map_rank two[2];
            if (!node_open_tied(&N[0], &st, 0, 0, 1) || !node_open_tied(&N[1], &st, 1, 7, 1)) break;
            opened = 1;
            /* rank 1 scatters itself through a callback */
            for (j = 0; j < NP; j++) N[1].R.p[j].data = NULL;
            two[0].params = N[0].R.p;
            two[0].n = NP;
            two[1].params = N[1].R.p;
            two[1].n = NP;
            CHECK_EQ_INT(wsync_engine_map_check(N[0].t, NT - 1, two, 2, &err), WSYNC_OK);
            /* (2): every tensor by name, and lm_head.weight = embed [0, V) */
            tensors_of(whost, wt);
            memset(&o, 0, sizeof o);
            o.chain = chain_opts(0);
            CHECK_EQ_INT(wsync_mirror_open(&st, wt, NT - 1, &o, &wm, &err), WSYNC_OK);
            for (j = 0; j < NT; j++) {
                wp[j].name = g_names[j];
                wp[j].dtype = dtype(j);
                wp[j].rank = g_ranks[j];
                wp[j].shape = g_shapes[j];
                wbuf[j] = (uint8_t *)malloc(g_off[j + 1] - g_off[j]);
                wp[j].data = wbuf[j];
            }
            head.tensor = g_names[T_EMB];
            head.start = 0;
            head.length = V;
            wp[T_HEAD].pieces = &head;
            wp[T_HEAD].n_pieces = 1;
            wp[T_HEAD].dim = 0;
            CHECK_EQ_INT(wsync_engine_open(wm, wp, NT, 0, &we, &err), WSYNC_OK);
            if (!we) break;
        }
        if (s > 6 && s % 2) continue; /* then merged over two steps */
        for (r = 0; r < 2; r++) {
            wsync_engine_stats es;
            cb_engine E;
            memset(&E, 0, sizeof E);
            E.R = &N[r].R;
            CHECK_EQ_INT(wsync_mirror_sync(N[r].m, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
            CHECK_EQ_INT(wsync_engine_take(N[r].e, r ? on_param : NULL, &E, &es, &err), WSYNC_OK);
            CHECK(!E.bad && es.mirror.handed);
            CHECK_MSG(rank_is(&N[r].R, g_img[s]), "tied: rank %d step %llu", r, (unsigned long long)s);
            if (s == 0) CHECK_EQ_U64(es.params, NP);
        }
        {
            wsync_engine_stats es;
            CHECK_EQ_INT(wsync_mirror_sync(wm, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
            CHECK_EQ_INT(wsync_engine_take(we, NULL, NULL, &es, &err), WSYNC_OK);
            for (j = 0; j < NT; j++) {
                size_t from = j == T_HEAD ? g_off[T_EMB] : g_off[j];
                CHECK_MSG(memcmp(wbuf[j], g_img[s] + from, g_off[j + 1] - g_off[j]) == 0, "tied, one rank: %s step %llu",
                          g_names[j], (unsigned long long)s);
            }
            if (s == 0) CHECK_EQ_U64(es.params, NT);
        }
    }
    wsync_engine_close(we);
    wsync_mirror_close(wm);
    for (j = 0; j < NT; j++) free(wbuf[j]);
    free(whost);
    wsync_publisher_close(P);
    if (opened) {
        node_close(&N[0]);
        node_close(&N[1]);
    }
    wsync_store_close(&st);
    TEST_END();
}

/* A sink that defers (the binding's batched device scatter): each call is
   staged into a copy of the parameters, written at the end call
   (WSYNC_ENGINE_END_CALL) or, refused there, dropped. */
typedef struct defer_engine {
    rank_map *R;
    uint8_t *stage[NP];
    int bad, ended, refuse_end;
    uint64_t calls, ends, calls_at_end, refuse_at;
} defer_engine;

static int on_defer(void *user, const wsync_param_changes *c)
{
    defer_engine *D = (defer_engine *)user;
    uint64_t i;
    size_t j;
    if (!c->param) { /* the end call */
        if (c->index != SIZE_MAX || c->tensor || c->count || c->positions || c->values || D->ended) D->bad = 1;
        D->ends++;
        D->ended = 1;
        D->calls_at_end = D->calls;
        for (j = 0; j < NP; j++)
            if (D->refuse_end) memcpy(D->stage[j], D->R->buf[j], D->R->bytes[j]);
            else memcpy(D->R->buf[j], D->stage[j], D->R->bytes[j]);
        return D->refuse_end ? 7 : 0;
    }
    D->calls++;
    if (D->calls == D->refuse_at) { /* refused part way: what was staged dropped */
        for (j = 0; j < NP; j++) memcpy(D->stage[j], D->R->buf[j], D->R->bytes[j]);
        return 5;
    }
    if (D->ended || c->index >= NP || c->param != &D->R->p[c->index]) {
        D->bad = 1; /* a change after the end call */
        return 0;
    }
    for (i = 0; i < c->count; i++)
        if (c->positions[i] < D->R->bytes[c->index] / c->width)
            memcpy(D->stage[c->index] + c->positions[i] * c->width, (const uint8_t *)c->values + i * c->width,
                   c->width);
    return 0;
}

/* The end call: once per take, after every change; its refusal leaves the
   engine without the new step and the next take hands all of this take's
   tensors again (the deferred sink wrote none of them), exact; so does a
   refusal part way (no end call then). Without the flag no end call comes. */
static void test_end_call(uint32_t chunk)
{
    char name[128];
    wsync_store st;
    wsync_publisher *P = NULL;
    wsync_chain_options co = chain_opts(7);
    wsync_error err;
    node N;
    defer_engine D;
    uint64_t s, got, last_ok = 0;
    size_t j;
    int opened = 0;
    snprintf(name, sizeof name, "engine map: the end call, once per take, its refusal re-hands the take (chunk %u)",
             chunk);
    TEST_BEGIN(name);
    memset(&D, 0, sizeof D);
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &st, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publisher_open(&st, &co, &P, &err), WSYNC_OK);
    for (s = 0; s <= 9; s++) {
        wsync_tensor t[NT];
        wsync_publish_stats ps;
        wsync_engine_stats es;
        wsync_result r;
        tensors_of(g_img[s], t);
        CHECK_EQ_INT(wsync_publish(P, s, t, NT, &ps, &err), WSYNC_OK);
        if (s == 0) {
            if (!(opened = node_open(&N, &st, 1, chunk))) break;
            wsync_engine_close(N.e);
            N.e = NULL;
            CHECK_EQ_INT(wsync_engine_open(N.m, N.R.p, NP, WSYNC_MAP_SHARD | WSYNC_ENGINE_END_CALL, &N.e, &err),
                         WSYNC_OK);
            if (!N.e) break;
            D.R = &N.R;
            for (j = 0; j < NP; j++) {
                N.R.p[j].data = NULL;
                D.stage[j] = (uint8_t *)malloc(N.R.bytes[j]);
                memcpy(D.stage[j], N.R.buf[j], N.R.bytes[j]);
            }
        }
        if (s == 8) continue; /* step 8 merged into 9's take */
        CHECK_EQ_INT(wsync_mirror_sync(N.m, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
        D.ended = 0;
        D.ends = D.calls = D.calls_at_end = 0;
        D.refuse_end = s == 3 || s == 7;
        D.refuse_at = s == 5 ? 3 : 0;
        r = wsync_engine_take(N.e, on_defer, &D, &es, &err);
        CHECK(!D.bad);
        if (D.refuse_at) {
            CHECK_EQ_INT(r, WSYNC_ERR_SINK);
            CHECK(D.ends == 0 && D.calls == 3);
            CHECK(!wsync_mirror_engine_step(N.m, &got));
            CHECK(rank_is(&N.R, g_img[last_ok]));
            continue;
        }
        CHECK_EQ_U64(D.ends, 1);
        CHECK(D.calls > 0 && D.calls_at_end == D.calls && es.calls == D.calls);
        if (D.refuse_end) {
            CHECK_EQ_INT(r, WSYNC_ERR_SINK);
            CHECK_MSG(strstr(err.message, "end call returned 7") != NULL, "%s", err.message);
            CHECK(!wsync_mirror_engine_step(N.m, &got));
            CHECK(!es.mirror.handed);
            CHECK(rank_is(&N.R, g_img[last_ok])); /* the last take's: nothing written */
        } else {
            CHECK_EQ_INT(r, WSYNC_OK);
            got = UINT64_MAX;
            CHECK(wsync_mirror_engine_step(N.m, &got) && got == s);
            CHECK_MSG(rank_is(&N.R, g_img[s]), "step %llu", (unsigned long long)s);
            last_ok = s;
            if (s == 4 || s == 6 || s == 9) /* after a refusal: every tensor the refused take handed, whole */
                CHECK(es.mirror.whole_tensors > 0);
        }
    }
    if (opened && N.e) {
        /* nothing pending: no call at all */
        D.ended = 0;
        D.ends = D.calls = 0;
        CHECK_EQ_INT(wsync_engine_take(N.e, on_defer, &D, NULL, &err), WSYNC_OK);
        CHECK(D.ends == 0 && D.calls == 0);
        /* without the flag: the changes, no end call */
        wsync_engine_close(N.e);
        N.e = NULL;
        CHECK_EQ_INT(wsync_engine_open(N.m, N.R.p, NP, WSYNC_MAP_SHARD, &N.e, &err), WSYNC_OK);
        {
            wsync_tensor t[NT];
            wsync_publish_stats ps;
            tensors_of(g_img[10], t);
            CHECK_EQ_INT(wsync_publish(P, 10, t, NT, &ps, &err), WSYNC_OK);
        }
        CHECK_EQ_INT(wsync_mirror_sync(N.m, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_engine_take(N.e, on_defer, &D, NULL, &err), WSYNC_OK);
        CHECK(D.calls > 0 && D.ends == 0 && !D.bad);
        /* a flag it does not know: refused */
        {
            wsync_engine *e2 = NULL;
            CHECK_EQ_INT(wsync_engine_open(N.m, N.R.p, NP, WSYNC_MAP_SHARD | 8u, &e2, &err),
                         WSYNC_ERR_INVALID_ARGUMENT);
            CHECK(e2 == NULL);
        }
    }
    for (j = 0; j < NP; j++) free(D.stage[j]);
    wsync_publisher_close(P);
    if (opened) node_close(&N);
    wsync_store_close(&st);
    TEST_END();
}

/* WSYNC_ENGINE_MERGE: a sink that counts each parameter's calls in a take
   and checks the positions ascending and (with a reserve) in its own
   staging arena. */
typedef struct merge_engine {
    rank_map *R;
    int bad, use_reserve, refuse_reserve;
    uint64_t calls, refuse_at, reserves;
    uint64_t per[NP];          /* calls per parameter in this take */
    uint8_t *arena;            /* the reserve's memory */
    size_t cap, used;
    uint64_t *rpos[NP];        /* where each parameter's reserve put its positions */
} merge_engine;

static int on_reserve(void *user, size_t index, uint64_t count, unsigned width, uint64_t **positions, void **values)
{
    merge_engine *M = (merge_engine *)user;
    size_t need = (size_t)count * (8 + width) + 8;
    if (index >= NP || !count || width != (M->R->p[index].dtype == WSYNC_DTYPE_F32 ? 4u : 2u)) M->bad = 1;
    if (++M->reserves == (uint64_t)M->refuse_reserve) return 9;
    if (index % 3 == 2 || M->used + need > M->cap) return 0; /* NULL: the engine's memory */
    *positions = M->rpos[index % NP] = (uint64_t *)(void *)(M->arena + M->used);
    *values = M->arena + M->used + (size_t)count * 8;
    M->used += (need + 7) & ~(size_t)7;
    return 0;
}

static int on_merge(void *user, const wsync_param_changes *c)
{
    merge_engine *M = (merge_engine *)user;
    uint64_t i, n;
    if (!c->param) return 0; /* the end call */
    M->calls++;
    if (M->calls == M->refuse_at) return 5;
    if (c->index >= NP || c->param != &M->R->p[c->index] || !c->count) {
        M->bad = 1;
        return 0;
    }
    M->per[c->index]++;
    /* the reserve's memory when it gave some */
    if (M->use_reserve && c->index % 3 != 2 && c->positions != M->rpos[c->index]) M->bad = 1;
    /* one tensor named, or NULL when several fed it */
    if (c->tensor ? M->R->p[c->index].n_pieces > 1 && strcmp(c->tensor, M->R->p[c->index].pieces[0].tensor) &&
                        strcmp(c->tensor, M->R->p[c->index].pieces[M->R->p[c->index].n_pieces - 1].tensor)
                  : M->R->p[c->index].n_pieces < 2)
        M->bad = 1;
    n = M->R->bytes[c->index] / c->width;
    for (i = 0; i < c->count; i++) {
        if (c->positions[i] >= n || (i && c->positions[i] <= c->positions[i - 1])) {
            M->bad = 1;
            break;
        }
        memcpy(M->R->buf[c->index] + c->positions[i] * c->width, (const uint8_t *)c->values + i * c->width,
               c->width);
    }
    return 0;
}

/* One call per parameter per take, positions ascending, however many
   chunks, pieces and tensors fed it: qkv's pieces in the reverse of the
   tensors' order (v, k, q), o_proj in two pieces along dim 1 (its rows
   interleave), a small chunk; exact after every take; a refusal (the
   callback's, the reserve's) re-hands the take whole, exact after. */
static void test_merge(uint32_t chunk, int use_reserve)
{
    char name[160];
    wsync_store st;
    wsync_publisher *P = NULL;
    wsync_chain_options co = chain_opts(7);
    wsync_error err;
    node N;
    merge_engine M;
    uint64_t s, got, last_ok = 0, multi = 0;
    size_t j;
    int opened = 0;
    snprintf(name, sizeof name, "engine map: WSYNC_ENGINE_MERGE, one call per parameter per take, ascending "
             "(chunk %u%s)", chunk, use_reserve ? ", into a reserve" : "");
    TEST_BEGIN(name);
    memset(&M, 0, sizeof M);
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &st, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publisher_open(&st, &co, &P, &err), WSYNC_OK);
    for (s = 0; s <= 12; s++) {
        wsync_tensor t[NT];
        wsync_publish_stats ps;
        wsync_engine_stats es;
        wsync_result r;
        tensors_of(g_img[s], t);
        CHECK_EQ_INT(wsync_publish(P, s, t, NT, &ps, &err), WSYNC_OK);
        if (s == 0) {
            if (!(opened = node_open(&N, &st, 1, chunk))) break;
            wsync_engine_close(N.e);
            N.e = NULL;
            /* qkv as v, k, q; o_proj as two pieces of 8 columns */
            piece(&N.R.pc[0][0], T_V, 8, 8);
            piece(&N.R.pc[0][1], T_K, 8, 8);
            piece(&N.R.pc[0][2], T_Q, 16, 16);
            piece(&N.R.pc[1][0], T_O, 16, 8);
            piece(&N.R.pc[1][1], T_O, 24, 8);
            N.R.p[1].n_pieces = 2;
            CHECK_EQ_INT(wsync_engine_open(N.m, N.R.p, NP, WSYNC_MAP_SHARD | WSYNC_ENGINE_MERGE |
                                           WSYNC_ENGINE_END_CALL, &N.e, &err), WSYNC_OK);
            if (!N.e) break;
            M.R = &N.R;
            M.use_reserve = use_reserve;
            M.cap = 1 << 20;
            M.arena = (uint8_t *)malloc(M.cap);
            if (use_reserve) wsync_engine_reserve(N.e, on_reserve, &M);
            for (j = 0; j < NP; j++) N.R.p[j].data = NULL;
        }
        if (s == 8) continue; /* step 8 merged into 9's take */
        CHECK_EQ_INT(wsync_mirror_sync(N.m, WSYNC_STEP_LATEST, NULL, &err), WSYNC_OK);
        memset(M.per, 0, sizeof M.per);
        M.calls = M.reserves = 0;
        M.used = 0;
        M.refuse_at = s == 5 ? 3 : 0;
        M.refuse_reserve = use_reserve && s == 10 ? 2 : 0;
        r = wsync_engine_take(N.e, on_merge, &M, &es, &err);
        CHECK(!M.bad);
        for (j = 0; j < NP; j++) CHECK_MSG(M.per[j] <= 1, "step %llu: %s got %llu calls", (unsigned long long)s,
                                             N.R.p[j].name, (unsigned long long)M.per[j]);
        if (M.refuse_at || M.refuse_reserve) {
            CHECK_EQ_INT(r, WSYNC_ERR_SINK);
            CHECK(!wsync_mirror_engine_step(N.m, &got));
            continue;
        }
        CHECK_EQ_INT(r, WSYNC_OK);
        CHECK(wsync_mirror_engine_step(N.m, &got) && got == s);
        CHECK_MSG(rank_is(&N.R, g_img[s]), "step %llu", (unsigned long long)s);
        CHECK(es.calls == es.params && es.calls == M.calls && es.params > 0);
        for (j = 0; j < NP; j++) CHECK(M.per[j] == 1 || !M.per[j]);
        if (use_reserve) CHECK_EQ_U64(M.reserves, es.params);
        if (es.mirror.chunks > es.mirror.tensors) multi++; /* some tensor came in several chunks */
        if (s == 6 || (use_reserve && s == 11)) CHECK(es.mirror.whole_tensors > 0); /* after a refusal: whole */
        last_ok = s;
    }
    CHECK(last_ok == 12);
    if (chunk && chunk < 64) CHECK(multi > 0);
    free(M.arena);
    wsync_publisher_close(P);
    if (opened) node_close(&N);
    wsync_store_close(&st);
    TEST_END();
}

int main(void)
{
    size_t s;
    make_images();
    test_steps(0, 0);
    test_steps(1, 0);
    test_steps(1, 7);
    test_steps(2, 0);
    test_steps(0, 5);
    test_refusals();
    test_tied();
    test_end_call(0);
    test_end_call(7);
    test_merge(0, 0);
    test_merge(5, 0);
    test_merge(5, 1);
    test_merge(0, 1);
    for (s = 0; s <= MAXSTEP; s++) free(g_img[s]);
    return check_summary();
}
