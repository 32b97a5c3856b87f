/* Changes handed to an engine: wsync_delta_apply's on_changes and the
   mirror subscriber (wsync_mirror_*).

   An engine stand-in is a second buffer updated ONLY through the changes
   handed to it, by a plain scatter (or a copy for a whole tensor); it must
   equal the mirror, and the published image, bit for bit after every take:
   step by step, after catch-up over many steps (merged patches), across
   anchors, after a corrupted object, after a publisher restart, over a
   retention gap, and with the background thread running. Reports and
   merged patches are compared with an independent diff of two images.

   The model: four tensors (bf16 and f32, published with
   WSYNC_CHAIN_KEEP_F32), every image a pure function of its step. An
   element that changes is incremented as an integer of its width, so an
   element never returns to an earlier value and the union of the
   positions changed over steps k+1..k+m is exactly the diff of steps k
   and k+m. The last cases run the same checks on the real AdamW trajectory
   in tests/fixtures/corpus/trajectory, where elements do return to older values. */
#define _POSIX_C_SOURCE 200809L
/* the write phase keeps a few hundred changes for the report, the report
   decodes the rest again: both paths, and their seam inside a tensor */
#define WSYNC__CAPTURE_MAX ((uint64_t)600)
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"
#include "small_model.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NT 4      /* the generated model's tensors */
#define MAXT 64   /* tensors of any model loaded (the trajectory has 41) */
static const char *g_names[MAXT] = {"w.b", "w.a", "norm", "emb"};
static uint64_t g_shapes[MAXT][2] = {{64, 48}, {96, 32}, {200, 0}, {1000, 0}};
static uint32_t g_ranks[MAXT] = {2, 2, 1, 1};
static wsync_dtype g_dtypes[MAXT] = {WSYNC_DTYPE_BF16, WSYNC_DTYPE_BF16, WSYNC_DTYPE_F32, WSYNC_DTYPE_BF16};
#define MAXSTEP 48

/* The model loaded: the generated one (model_make) or the real trajectory
   (model_load_trajectory); its images are ref(0) .. ref(g_maxstep). */
static size_t g_nt = NT;
static uint64_t g_maxstep = MAXSTEP;
static size_t g_off[MAXT + 1], g_total;
static unsigned g_w[MAXT];
static uint64_t g_nelem[MAXT];
static uint8_t *g_refs;

static uint8_t *ref(uint64_t step) { return g_refs + (size_t)step * g_total; }

static int tensor_index(const char *name)
{
    size_t i;
    for (i = 0; i < g_nt; i++)
        if (strcmp(g_names[i], name) == 0) return (int)i;
    return -1;
}

/* Widths, element counts and offsets of the g_nt tensors in an image. */
static void model_layout(void)
{
    size_t i;
    g_total = 0;
    for (i = 0; i < g_nt; i++) {
        g_w[i] = wsync_dtype_bits(g_dtypes[i]) / 8;
        g_nelem[i] = g_ranks[i] == 2 ? g_shapes[i][0] * g_shapes[i][1] : g_shapes[i][0];
        g_off[i] = g_total;
        g_total += (size_t)g_nelem[i] * g_w[i];
    }
    g_off[g_nt] = g_total;
}

static void model_make(void)
{
    size_t i, k;
    uint64_t s;
    model_layout();
    g_refs = (uint8_t *)malloc((MAXSTEP + 1) * g_total);
    if (!g_refs) exit(2);
    for (k = 0; k < g_total; k++) g_refs[k] = (uint8_t)(mix64(k) & 0x7F);
    for (s = 1; s <= MAXSTEP; s++) {
        uint8_t *img = ref(s);
        memcpy(img, img - g_total, g_total);
        for (i = 0; i < NT; i++)
            for (k = 0; k < g_nelem[i]; k++) {
                uint64_t h = mix64(k * 1000003u + s * 7919u + i);
                /* about 3% a step; "emb" half of it every fifth step */
                int change = h % 32 == 0 || (i == 3 && s % 5 == 0 && h % 2 == 1);
                if (change) {
                    uint8_t *e = img + g_off[i] + k * g_w[i];
                    uint16_t v;
                    memcpy(&v, e, 2); /* the low 16 bits, +1: never back to an older value */
                    v++;
                    memcpy(e, &v, 2);
                }
            }
    }
}

static void tensors_of(uint8_t *img, wsync_tensor *t)
{
    size_t i;
    for (i = 0; i < g_nt; i++) {
        t[i].name = g_names[i];
        t[i].dtype = g_dtypes[i];
        t[i].rank = g_ranks[i];
        t[i].shape = g_shapes[i];
        t[i].data = img + g_off[i];
        t[i].nbytes = (uint64_t)(g_off[i + 1] - g_off[i]);
    }
}

/* ======================================================================
   The engine stand-in: buffers by tensor index, changed only by scatter
   ====================================================================== */

typedef struct engine {
    size_t n;
    uint8_t *data[MAXT];
    uint64_t nbytes[MAXT];
    uint8_t *seen[MAXT];  /* 1 per element reported since the last reset */
    int whole[MAXT];      /* handed whole since the last reset */
    uint64_t calls, positions, chunk;
    uint64_t next[MAXT];  /* the next position must be at least this */
    int open[MAXT];       /* a tensor's chunks have begun and not ended */
    int bad;              /* a rule broken: order, bounds, chunk size */
    int refuse_after;     /* >0: the call with this number returns 7 */
    pthread_mutex_t mu;   /* PARALLEL reports */
} engine;

static void engine_init(engine *E, const wsync_tensor *t, size_t n, uint64_t chunk)
{
    size_t i;
    memset(E, 0, sizeof *E);
    E->n = n;
    E->chunk = chunk;
    pthread_mutex_init(&E->mu, NULL);
    for (i = 0; i < n; i++) {
        E->nbytes[i] = t[i].nbytes;
        E->data[i] = (uint8_t *)calloc((size_t)t[i].nbytes + 1, 1);
        E->seen[i] = (uint8_t *)calloc((size_t)t[i].nbytes + 1, 1);
    }
}

static void engine_reset_seen(engine *E)
{
    size_t i;
    for (i = 0; i < E->n; i++) {
        memset(E->seen[i], 0, (size_t)E->nbytes[i]);
        E->whole[i] = 0;
        E->open[i] = 0;
        E->next[i] = 0;
    }
    E->calls = E->positions = 0;
    E->bad = 0;
}

static void engine_free(engine *E)
{
    size_t i;
    for (i = 0; i < E->n; i++) {
        free(E->data[i]);
        free(E->seen[i]);
    }
    pthread_mutex_destroy(&E->mu);
}

static int scatter(void *user, const wsync_changes *c)
{
    engine *E = (engine *)user;
    size_t i = c->index;
    uint64_t k;
    int rc = 0;
    pthread_mutex_lock(&E->mu);
    E->calls++;
    if (E->refuse_after && E->calls == (uint64_t)E->refuse_after) rc = 7;
    if (i >= E->n || tensor_index(c->tensor->name) < 0 || c->width != g_w[tensor_index(c->tensor->name)] ||
        c->tensor->nbytes != E->nbytes[i]) {
        E->bad = 1;
    } else if (c->whole) {
        if (E->open[i] || c->positions || !c->last || c->count * c->width != E->nbytes[i]) E->bad = 1;
        memcpy(E->data[i], c->values, (size_t)E->nbytes[i]);
        E->whole[i] = 1;
        memset(E->seen[i], 1, (size_t)(E->nbytes[i] / c->width));
    } else {
        const uint8_t *v = (const uint8_t *)c->values;
        if (c->count == 0 || c->count > E->chunk) E->bad = 1;
        for (k = 0; k < c->count; k++) {
            uint64_t p = c->positions[k];
            if (p < E->next[i] || (p + 1) * c->width > E->nbytes[i]) {
                E->bad = 1;
                break;
            }
            E->next[i] = p + 1;
            memcpy(E->data[i] + p * c->width, v + k * c->width, c->width);
            E->seen[i][p] = 1;
        }
        E->positions += c->count;
        E->open[i] = !c->last;
        if (c->last) E->next[i] = 0;
    }
    pthread_mutex_unlock(&E->mu);
    return rc;
}

/* The engine's tensor i against img's tensor named as t[i]. */
static int engine_is(const engine *E, const wsync_tensor *t, const uint8_t *img)
{
    size_t i;
    for (i = 0; i < E->n; i++) {
        int j = tensor_index(t[i].name);
        if (j < 0 || memcmp(E->data[i], img + g_off[j], (size_t)E->nbytes[i]) != 0) return 0;
    }
    return 1;
}

static int tensors_are(const wsync_tensor *t, size_t n, const uint8_t *img)
{
    size_t i;
    for (i = 0; i < n; i++) {
        int j = tensor_index(t[i].name);
        if (j < 0 || memcmp(t[i].data, img + g_off[j], (size_t)t[i].nbytes) != 0) return 0;
    }
    return 1;
}

/* What was reported equals the diff of images a and b exactly: a tensor
   handed whole only where its diff is at least the whole threshold (or
   always_whole), else exactly the positions that differ. */
static int reported_is_diff(const engine *E, const wsync_tensor *t, const uint8_t *a, const uint8_t *b,
                            int whole_ok)
{
    size_t i;
    for (i = 0; i < E->n; i++) {
        int j = tensor_index(t[i].name);
        unsigned w = g_w[j];
        uint64_t k, diff = 0;
        for (k = 0; k < g_nelem[j]; k++) {
            int d = memcmp(a + g_off[j] + k * w, b + g_off[j] + k * w, w) != 0;
            diff += (uint64_t)d;
            if (!E->whole[i] && d != E->seen[i][k]) return 0;
        }
        if (E->whole[i] && !whole_ok && !WSYNC_CHANGES_WHOLE(diff, g_nelem[j], w)) return 0;
        if (!E->whole[i] && WSYNC_CHANGES_WHOLE(diff, g_nelem[j], w)) return 0;
    }
    return 1;
}

/* What a merged take from step `from` to step `to` reported: per tensor,
   exactly the union of the positions each step between changed (the diffs
   of consecutive images), or the tensor whole where that union reaches the
   whole threshold (or anyway, whole_ok); and, checked apart, every element
   where the images of `from` and `to` differ (their own diff, memcmp per
   element) among them. On the generated model no element returns to an
   older value and the union is that diff (reported_is_diff); a real
   trajectory has elements that go A, B, A over two steps, which the take
   hands with their value unchanged: *extra counts them. */
static int reported_is_union(const engine *E, const wsync_tensor *t, uint64_t from, uint64_t to, int whole_ok,
                             uint64_t *extra)
{
    size_t i;
    *extra = 0;
    for (i = 0; i < E->n; i++) {
        int j = tensor_index(t[i].name);
        unsigned w;
        uint64_t k, s, uni = 0;
        if (j < 0) return 0;
        w = g_w[j];
        for (k = 0; k < g_nelem[j]; k++) {
            size_t at = g_off[j] + (size_t)k * w;
            int u = 0, d = memcmp(ref(from) + at, ref(to) + at, w) != 0;
            for (s = from; s < to && !u; s++) u = memcmp(ref(s) + at, ref(s + 1) + at, w) != 0;
            uni += (uint64_t)u;
            if (E->whole[i]) continue;
            if (u != E->seen[i][k] || (d && !E->seen[i][k])) return 0;
            *extra += (uint64_t)(u && !d);
        }
        if (E->whole[i] && !whole_ok && !WSYNC_CHANGES_WHOLE(uni, g_nelem[j], w)) return 0;
        if (!E->whole[i] && WSYNC_CHANGES_WHOLE(uni, g_nelem[j], w)) return 0;
    }
    return 1;
}

/* ======================================================================
   Deltas, encoded and applied with on_changes
   ====================================================================== */

static const wsync_encoding g_encs[4] = {WSYNC_ENCODING_PACKED, WSYNC_ENCODING_PACKED_MAX, WSYNC_ENCODING_TRL_V1,
                                         WSYNC_ENCODING_TRL_V3};

static void encode(wsync_encoding enc, uint64_t from, uint64_t to, sm_buf *out)
{
    wsync_tensor a[NT], b[NT];
    wsync_delta_options o;
    wsync_error err;
    memset(&o, 0, sizeof o);
    memset(out, 0, sizeof *out);
    o.encoding = enc;
    o.base_step = from;
    o.step = to;
    o.block_log2 = 6; /* many blocks, even in these small tensors */
    tensors_of(ref(from), a);
    tensors_of(ref(to), b);
    CHECK_EQ_INT(wsync_delta_encode(a, b, NT, &o, sm_buf_sink, out, NULL, &err), WSYNC_OK);
}

static void test_apply_reports(void)
{
    size_t e;
    uint8_t *img = (uint8_t *)malloc(g_total);
    for (e = 0; e < 4; e++) {
        int mode;
        char name[96];
        snprintf(name, sizeof name, "apply reports equal the diff (%s)", wsync_encoding_name(g_encs[e]));
        TEST_BEGIN(name);
        for (mode = 0; mode < 3; mode++) {
            uint64_t s;
            for (s = 1; s <= 12; s++) {
                uint64_t from = mode == 2 ? 0 : s - 1; /* mode 2: multi-step deltas, denser */
                wsync_tensor t[NT];
                wsync_delta_options o;
                wsync_delta_stats ds;
                wsync_error err;
                engine E;
                sm_buf d;
                encode(g_encs[e], from, s, &d);
                memcpy(img, ref(from), g_total);
                tensors_of(img, t);
                engine_init(&E, t, NT, mode == 0 ? 7 : 65536);
                {
                    size_t i;
                    for (i = 0; i < NT; i++) memcpy(E.data[i], ref(from) + g_off[i], (size_t)E.nbytes[i]);
                }
                memset(&o, 0, sizeof o);
                o.on_changes = scatter;
                o.changes_user = &E;
                o.changes_chunk = mode == 0 ? 7 : 0;
                o.threads = mode == 1 ? 3 : 1;
                if (mode == 1) o.flags |= WSYNC_DELTA_CHANGES_PARALLEL;
                CHECK_EQ_INT(wsync_delta_apply(d.p, d.len, t, NT, &o, &ds, &err), WSYNC_OK);
                CHECK(memcmp(img, ref(s), g_total) == 0);
                CHECK(!E.bad);
                CHECK(engine_is(&E, t, ref(s)));
                CHECK(reported_is_diff(&E, t, ref(from), ref(s), 0));
                if (mode != 2) CHECK(E.calls > 0);
                /* invalid deltas: nothing written, no call at all */
                {
                    uint64_t calls = E.calls;
                    sm_buf c;
                    memcpy(img, ref(from), g_total);
                    CHECK(wsync_delta_apply(d.p, d.len - 1, t, NT, &o, NULL, &err) != WSYNC_OK);
                    if (g_encs[e] == WSYNC_ENCODING_PACKED || g_encs[e] == WSYNC_ENCODING_PACKED_MAX) {
                        c.p = (uint8_t *)malloc(d.len);
                        memcpy(c.p, d.p, d.len);
                        c.p[d.len - 3] ^= 0x10;
                        CHECK(wsync_delta_apply(c.p, d.len, t, NT, &o, NULL, &err) != WSYNC_OK);
                        /* the right delta on the wrong base (digests) */
                        memcpy(img, ref(s), g_total);
                        CHECK_EQ_INT(wsync_delta_apply(d.p, d.len, t, NT, &o, NULL, &err), WSYNC_ERR_DIGEST_MISMATCH);
                        CHECK(memcmp(img, ref(s), g_total) == 0);
                        free(c.p);
                    }
                    CHECK_EQ_U64(E.calls, calls);
                }
                /* a callback that refuses: WSYNC_ERR_SINK after the write */
                if (mode == 0 && s == 3) {
                    memcpy(img, ref(from), g_total);
                    engine_reset_seen(&E);
                    E.refuse_after = 2;
                    CHECK_EQ_INT(wsync_delta_apply(d.p, d.len, t, NT, &o, &ds, &err), WSYNC_ERR_SINK);
                    CHECK(strstr(err.message, "returned 7") != NULL);
                    CHECK(memcmp(img, ref(s), g_total) == 0);
                    CHECK_EQ_U64(E.calls, 2);
                    CHECK_EQ_U64(ds.step, s);
                }
                engine_free(&E);
                free(d.p);
            }
        }
        TEST_END();
    }
    free(img);
}

/* ======================================================================
   The mirror
   ====================================================================== */

static wsync_chain_options chain_opts(wsync_encoding enc, uint32_t anchor_every, uint32_t retain)
{
    wsync_chain_options o;
    memset(&o, 0, sizeof o);
    o.encoding = enc;
    o.anchor_every = anchor_every;
    o.retain = retain;
    o.anchor_fraction = 0.99;
    o.flags = WSYNC_CHAIN_KEEP_F32;
    return o;
}

typedef struct pub {
    wsync_store st;
    wsync_chain_options o;
    wsync_publisher *p;
} pub;

static void pub_open(pub *P, const wsync_store *st, wsync_chain_options o)
{
    wsync_error err;
    P->st = *st;
    P->o = o;
    P->p = NULL;
    CHECK_EQ_INT(wsync_publisher_open(st, &o, &P->p, &err), WSYNC_OK);
}

static void pub_step(pub *P, uint64_t s)
{
    wsync_tensor t[MAXT];
    wsync_publish_stats ps;
    wsync_error err;
    tensors_of(ref(s), t);
    if (P->p) CHECK_EQ_INT(wsync_publish(P->p, s, t, g_nt, &ps, &err), WSYNC_OK);
}

static void pub_close(pub *P)
{
    if (P->p) wsync_publisher_close(P->p);
    P->p = NULL;
}

/* Begins the case "title (encoding e)": a memory store in st, and P
   publishing to it with anchor_every and retain. */
static void mirror_case(const char *title, size_t e, wsync_store *st, pub *P, uint32_t anchor_every, uint32_t retain)
{
    static char name[128];
    wsync_error err;
    snprintf(name, sizeof name, "%s (%s)", title, wsync_encoding_name(g_encs[e]));
    TEST_BEGIN(name);
    CHECK_EQ_INT(wsync_store_mem_open(NULL, st, &err), WSYNC_OK);
    pub_open(P, st, chain_opts(g_encs[e], anchor_every, retain));
}

typedef struct mir {
    wsync_mirror *m;
    uint8_t *img;          /* caller-supplied mirror memory, or NULL */
    wsync_tensor own[MAXT];
    const wsync_tensor *t; /* the mirror's tensors */
    size_t n;
    engine E;
} mir;

static int mir_open(mir *M, const wsync_store *st, wsync_encoding enc, int owned, uint32_t chunk)
{
    wsync_mirror_options o;
    wsync_error err;
    memset(M, 0, sizeof *M);
    memset(&o, 0, sizeof o);
    o.chain = chain_opts(enc, 0, 0);
    o.chunk = chunk;
    o.interval_ms = 5;
    if (!owned) {
        M->img = (uint8_t *)calloc(g_total, 1);
        tensors_of(M->img, M->own);
    }
    if (wsync_mirror_open(st, owned ? NULL : M->own, owned ? 0 : g_nt, &o, &M->m, &err) != WSYNC_OK) {
        CHECK_MSG(0, "mirror_open: %s", err.message);
        return 0;
    }
    M->t = wsync_mirror_tensors(M->m, &M->n);
    CHECK_EQ_U64(M->n, g_nt);
    engine_init(&M->E, M->t, M->n, chunk ? chunk : 65536);
    return 1;
}

static void mir_close(mir *M)
{
    wsync_mirror_close(M->m);
    engine_free(&M->E);
    free(M->img);
}

static wsync_result mir_sync(mir *M)
{
    wsync_error err;
    wsync_sync_stats ss;
    return wsync_mirror_sync(M->m, WSYNC_STEP_LATEST, &ss, &err);
}

/* The bound on a mirror's change records (wsync.h, the mirror section):
   the bitmaps, one bit per element (in whole 64-bit words), and the logs,
   all together at most the model's bytes. */
static void record_bounds(const wsync_tensor *t, size_t n, uint64_t *bitmaps, uint64_t *model)
{
    size_t i;
    *bitmaps = *model = 0;
    for (i = 0; i < n; i++) {
        unsigned w = wsync_dtype_bits(t[i].dtype) / 8;
        *model += t[i].nbytes;
        if (w == 1 || w == 2 || w == 4 || w == 8) *bitmaps += (t[i].nbytes / w + 63) / 64 * 8;
    }
}

/* A take; then the engine must be the mirror, and the published image of
   its step, and the state digest that of what it holds; the change
   records within their documented bound. */
static uint64_t mir_take_check(mir *M, wsync_mirror_stats *out)
{
    wsync_mirror_stats ms;
    wsync_error err;
    uint64_t step = UINT64_MAX, dig = 0, mine = 0, bitmaps, model;
    wsync_tensor et[MAXT];
    size_t i;
    engine_reset_seen(&M->E);
    CHECK_EQ_INT(wsync_mirror_take(M->m, scatter, &M->E, &ms, &err), WSYNC_OK);
    CHECK(!M->E.bad);
    CHECK(wsync_mirror_engine_step(M->m, &step));
    CHECK_EQ_U64(ms.step, step);
    CHECK(ms.pause_seconds >= 0);
    CHECK_EQ_U64(ms.positions, M->E.positions);
    record_bounds(M->t, M->n, &bitmaps, &model);
    CHECK_MSG(ms.record_bytes >= bitmaps && ms.record_bytes <= model + bitmaps,
              "record_bytes %llu: bitmaps %llu, model %llu", (unsigned long long)ms.record_bytes,
              (unsigned long long)bitmaps, (unsigned long long)model);
    for (i = 0; i < M->n; i++)
        CHECK_MSG(memcmp(M->E.data[i], M->t[i].data, (size_t)M->t[i].nbytes) == 0, "engine != mirror: %s",
                  M->t[i].name);
    if (step <= g_maxstep) {
        CHECK_MSG(engine_is(&M->E, M->t, ref(step)), "engine at step %llu", (unsigned long long)step);
        CHECK(tensors_are(M->t, M->n, ref(step)));
    }
    for (i = 0; i < M->n; i++) {
        et[i] = M->t[i];
        et[i].data = M->E.data[i];
    }
    CHECK(wsync_mirror_state_digest(M->m, &dig));
    CHECK_EQ_INT(wsync_state_digest(et, M->n, 1, &mine, &err), WSYNC_OK);
    CHECK_EQ_U64(dig, mine);
    if (getenv("MIRROR_VERBOSE"))
        printf("  take: step %llu, %llu steps merged, %llu tensors (%llu whole), %llu positions, %llu chunks, "
               "pause %.6f s\n", (unsigned long long)step, (unsigned long long)ms.steps,
               (unsigned long long)ms.tensors, (unsigned long long)ms.whole_tensors,
               (unsigned long long)ms.positions, (unsigned long long)ms.chunks, ms.pause_seconds);
    if (out) *out = ms;
    return step;
}

static void test_mirror_steps(void)
{
    size_t e;
    for (e = 0; e < 4; e++) {
        wsync_store st;
        wsync_error err;
        pub P;
        mir M;
        uint64_t s;
        mirror_case("mirror: step by step, caught up, across anchors", e, &st, &P, 1000, 1000);
        pub_step(&P, 0);
        if (mir_open(&M, &st, g_encs[e], e % 2 == 0, e == 1 ? 5 : 0)) {
            wsync_mirror_stats ms;
            /* nothing yet: no call, no step */
            engine_reset_seen(&M.E);
            CHECK_EQ_INT(wsync_mirror_take(M.m, scatter, &M.E, &ms, &err), WSYNC_OK);
            CHECK_EQ_U64(M.E.calls, 0);
            CHECK(!ms.handed && !ms.has_step);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 0);
            CHECK_EQ_U64(ms.whole_tensors, NT); /* the anchor */
            /* step by step */
            for (s = 1; s <= 8; s++) {
                pub_step(&P, s);
                CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
                CHECK_EQ_U64(mir_take_check(&M, &ms), s);
                CHECK(reported_is_diff(&M.E, M.t, ref(s - 1), ref(s), 0));
                CHECK_EQ_U64(ms.steps, 1);
            }
            /* nothing new: no call */
            engine_reset_seen(&M.E);
            CHECK_EQ_INT(wsync_mirror_take(M.m, scatter, &M.E, &ms, &err), WSYNC_OK);
            CHECK_EQ_U64(M.E.calls, 0);
            CHECK_EQ_U64(ms.step, 8);
            /* catch-up: steps 9..20 synced one by one, one merged take */
            for (s = 9; s <= 20; s++) {
                pub_step(&P, s);
                CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            }
            CHECK_EQ_U64(mir_take_check(&M, &ms), 20);
            CHECK(reported_is_diff(&M.E, M.t, ref(8), ref(20), 0));
            CHECK_EQ_U64(ms.steps, 12);
            /* one sync over many deltas */
            for (s = 21; s <= 27; s++) pub_step(&P, s);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 27);
            CHECK(reported_is_diff(&M.E, M.t, ref(20), ref(27), 0));
            mir_close(&M);
        }
        pub_close(&P);
        /* anchors in between: whole tensors, never a mixture */
        wsync_store_close(&st);
        CHECK_EQ_INT(wsync_store_mem_open(NULL, &st, &err), WSYNC_OK);
        pub_open(&P, &st, chain_opts(g_encs[e], 4, 1000));
        pub_step(&P, 0);
        if (mir_open(&M, &st, g_encs[e], e % 2 == 1, 0)) {
            wsync_mirror_stats ms;
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            mir_take_check(&M, NULL);
            for (s = 1; s <= 3; s++) pub_step(&P, s);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 3);
            CHECK(reported_is_diff(&M.E, M.t, ref(0), ref(3), 0));
            for (s = 4; s <= 11; s++) {
                pub_step(&P, s);
                CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            }
            CHECK_EQ_U64(mir_take_check(&M, &ms), 11);
            CHECK(reported_is_diff(&M.E, M.t, ref(3), ref(11), 1));
            CHECK(ms.whole_tensors > 0);
            mir_close(&M);
        }
        pub_close(&P);
        wsync_store_close(&st);
        TEST_END();
    }
}

/* One pending step is handed from the log the apply's report filled, not
   read from the mirror: with the mirror's memory scribbled over after the
   sync, the engine still gets the step's values for every tensor handed as
   positions. Two pending steps are merged (the log folded into the
   bitmap) and equal the diff of the two states. */
static void test_mirror_log(void)
{
    size_t e;
    for (e = 0; e < 4; e++) {
        wsync_store st;
        wsync_error err;
        pub P;
        mir M;
        mirror_case("mirror: one pending step handed from its log, two merged", e, &st, &P, 1000, 1000);
        pub_step(&P, 0);
        if (mir_open(&M, &st, g_encs[e], 0, e == 0 ? 5 : 0)) {
            wsync_mirror_stats ms;
            uint8_t *keep = (uint8_t *)malloc(g_total);
            uint64_t s, bitmaps;
            size_t i, checked = 0;
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            mir_take_check(&M, &ms);
            bitmaps = ms.record_bytes;
            for (s = 1; s <= 3; s++) {
                pub_step(&P, s);
                CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
                memcpy(keep, M.img, g_total);
                memset(M.img, 0xA5, g_total);
                engine_reset_seen(&M.E);
                CHECK_EQ_INT(wsync_mirror_take(M.m, scatter, &M.E, &ms, &err), WSYNC_OK);
                CHECK(ms.handed && !M.E.bad);
                CHECK(ms.record_bytes > bitmaps); /* the logs */
                memcpy(M.img, keep, g_total);
                for (i = 0; i < NT; i++) {
                    int j = tensor_index(M.t[i].name);
                    if (M.E.whole[i]) continue;
                    CHECK_MSG(memcmp(M.E.data[i], ref(s) + g_off[j], (size_t)M.E.nbytes[i]) == 0,
                              "step %llu tensor %s", (unsigned long long)s, M.t[i].name);
                    checked++;
                }
                /* the whole ones (from the scribbled mirror) set right */
                for (i = 0; i < NT; i++)
                    if (M.E.whole[i]) memcpy(M.E.data[i], M.t[i].data, (size_t)M.E.nbytes[i]);
                CHECK(engine_is(&M.E, M.t, ref(s)));
            }
            CHECK(checked > 0);
            /* two steps pending: merged */
            for (s = 4; s <= 5; s++) {
                pub_step(&P, s);
                CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            }
            CHECK_EQ_U64(mir_take_check(&M, &ms), 5);
            CHECK(reported_is_diff(&M.E, M.t, ref(3), ref(5), 0));
            CHECK_EQ_U64(ms.steps, 2);
            /* then one again: from the log */
            pub_step(&P, 6);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 6);
            CHECK(reported_is_diff(&M.E, M.t, ref(5), ref(6), 0));
            free(keep);
            mir_close(&M);
        }
        pub_close(&P);
        wsync_store_close(&st);
        TEST_END();
    }
}

static void test_mirror_failures(void)
{
    size_t e;
    for (e = 0; e < 4; e++) {
        char key[64];
        wsync_store st;
        wsync_error err;
        pub P;
        mir M;
        uint64_t s, size = 0, calls;
        uint8_t *orig = NULL;
        mirror_case("mirror: corrupt object, refused take, restart, retention gap", e, &st, &P, 1000, 1000);
        for (s = 0; s <= 3; s++) pub_step(&P, s);
        if (mir_open(&M, &st, g_encs[e], e % 2 == 0, 0)) {
            wsync_mirror_stats ms;
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, NULL), 3);
            for (s = 4; s <= 6; s++) pub_step(&P, s);
            /* delta 5 corrupt: the mirror stops at 4 (no path past it) */
            snprintf(key, sizeof key, "deltas/step_%06llu.safetensors", 5ull);
            if (wsync_store_get_all(&st, key, NULL, &orig, &size, &err) == WSYNC_OK) {
                uint8_t *b = (uint8_t *)malloc((size_t)size);
                memcpy(b, orig, (size_t)size);
                b[size / 2] ^= 0x40;
                CHECK_EQ_INT(st.put(st.user, key, b, (size_t)size, &err), WSYNC_OK);
                free(b);
            }
            CHECK(mir_sync(&M) != WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 4);
            CHECK(reported_is_diff(&M.E, M.t, ref(3), ref(4), 0));
            /* again: nothing new applied, no call */
            CHECK(mir_sync(&M) != WSYNC_OK);
            engine_reset_seen(&M.E);
            CHECK_EQ_INT(wsync_mirror_take(M.m, scatter, &M.E, &ms, &err), WSYNC_OK);
            CHECK_EQ_U64(M.E.calls, 0);
            /* repaired */
            if (orig) CHECK_EQ_INT(st.put(st.user, key, orig, (size_t)size, &err), WSYNC_OK);
            free(orig);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 6);
            CHECK(reported_is_diff(&M.E, M.t, ref(4), ref(6), 0));
            /* the engine's callback refuses: a mixture until the next take */
            pub_step(&P, 7);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            engine_reset_seen(&M.E);
            M.E.refuse_after = 2;
            CHECK_EQ_INT(wsync_mirror_take(M.m, scatter, &M.E, &ms, &err), WSYNC_ERR_SINK);
            CHECK(!wsync_mirror_engine_step(M.m, NULL));
            CHECK(!wsync_mirror_state_digest(M.m, NULL));
            M.E.refuse_after = 0;
            pub_step(&P, 8);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 8);
            /* a publisher restart: reopened on the same chain */
            pub_close(&P);
            pub_open(&P, &st, chain_opts(g_encs[e], 1000, 1000));
            for (s = 9; s <= 12; s++) pub_step(&P, s);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 12);
            CHECK(reported_is_diff(&M.E, M.t, ref(8), ref(12), 1));
            /* a new chain over it (WSYNC_CHAIN_NEW_CHAIN): from an anchor */
            pub_close(&P);
            {
                wsync_chain_options o = chain_opts(g_encs[e], 1000, 1000);
                o.flags |= WSYNC_CHAIN_NEW_CHAIN;
                pub_open(&P, &st, o);
            }
            for (s = 13; s <= 15; s++) pub_step(&P, s);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 15);
            /* retention gap: the engine's step long gone, an anchor instead */
            pub_close(&P);
            {
                wsync_chain_options o = chain_opts(g_encs[e], 3, 2);
                pub_open(&P, &st, o);
            }
            for (s = 16; s <= 30; s++) pub_step(&P, s);
            snprintf(key, sizeof key, "deltas/step_%06llu.safetensors", 17ull);
            CHECK(st.head(st.user, key, &size, &err) == WSYNC_ERR_NOT_FOUND);
            calls = 0;
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 30);
            CHECK(ms.whole_tensors > 0);
            (void)calls;
            mir_close(&M);
        }
        pub_close(&P);
        wsync_store_close(&st);
        TEST_END();
    }
}

/* A corrupt anchor, the only way on from the engine's step (retention
   took the deltas): the mirror's sync fails and the mirror keeps its step
   (the anchor is checked before a byte of it reaches the mirror), the
   engine is handed nothing and stays at its old step, again at a second
   try; with the anchor repaired both move to the newest step, the tensors
   handed whole. */
static void test_mirror_corrupt_anchor(void)
{
    size_t e;
    for (e = 0; e < 4; e++) {
        char key[64];
        wsync_store st;
        wsync_error err;
        pub P;
        mir M;
        uint64_t s, size = 0;
        uint8_t *orig = NULL;
        mirror_case("mirror: a corrupt anchor hands the engine nothing, then it recovers", e, &st, &P, 3, 1);
        pub_step(&P, 0);
        if (mir_open(&M, &st, g_encs[e], e % 2 == 1, 0)) {
            wsync_mirror_stats ms;
            uint64_t step = UINT64_MAX, dig = 0, dig2 = 0;
            int try_;
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, NULL), 0);
            pub_step(&P, 1);
            pub_step(&P, 2);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 2);
            CHECK(reported_is_diff(&M.E, M.t, ref(0), ref(2), 0));
            CHECK(wsync_mirror_state_digest(M.m, &dig));
            /* anchors at 0, 3, 6; retention leaves anchor 6 and delta 7 */
            for (s = 3; s <= 7; s++) pub_step(&P, s);
            snprintf(key, sizeof key, "deltas/step_%06llu.safetensors", 3ull);
            CHECK(st.head(st.user, key, &size, &err) == WSYNC_ERR_NOT_FOUND);
            snprintf(key, sizeof key, "anchors/step_%06llu.safetensors", 6ull);
            CHECK_EQ_INT(wsync_store_get_all(&st, key, NULL, &orig, &size, &err), WSYNC_OK);
            if (orig) {
                uint8_t *b = (uint8_t *)malloc((size_t)size);
                memcpy(b, orig, (size_t)size);
                b[size - size / 4] ^= 0x08; /* in the data section */
                CHECK_EQ_INT(st.put(st.user, key, b, (size_t)size, &err), WSYNC_OK);
                free(b);
            }
            /* the background's poll finds it corrupt (and will not fetch it
               again, wsync_subscriber_start), then two syncs do */
            for (try_ = 0; try_ < 3; try_++) {
                if (try_ > 0) {
                    CHECK_EQ_INT(mir_sync(&M), WSYNC_ERR_DIGEST_MISMATCH);
                } else {
                    wsync_prefetch_status ps;
                    double end = now_s() + 20.0;
                    CHECK_EQ_INT(wsync_mirror_start(M.m, &err), WSYNC_OK);
                    memset(&ps, 0, sizeof ps);
                    while (now_s() < end && wsync_subscriber_prefetch_status(wsync_mirror_subscriber(M.m), &ps) ==
                                                WSYNC_OK && ps.last_result == WSYNC_OK)
                        sleep_ms(5);
                    CHECK_EQ_INT(ps.last_result, WSYNC_ERR_DIGEST_MISMATCH);
                    CHECK(!ps.caught_up && !ps.ready);
                }
                CHECK(wsync_mirror_step(M.m, &step));
                CHECK_EQ_U64(step, 2);
                CHECK(tensors_are(M.t, M.n, ref(2)));
                engine_reset_seen(&M.E);
                CHECK_EQ_INT(wsync_mirror_take(M.m, scatter, &M.E, &ms, &err), WSYNC_OK);
                CHECK_EQ_U64(M.E.calls, 0);
                CHECK(!ms.handed);
                CHECK(ms.had_step && ms.has_step);
                CHECK_EQ_U64(ms.step, 2);
                CHECK(wsync_mirror_engine_step(M.m, &step));
                CHECK_EQ_U64(step, 2);
                CHECK(engine_is(&M.E, M.t, ref(2)));
                CHECK(wsync_mirror_state_digest(M.m, &dig2));
                CHECK_EQ_U64(dig2, dig);
            }
            /* repaired: a sync (which tries refused objects again) applies
               the anchor, then delta 7, the background still running */
            if (orig) CHECK_EQ_INT(st.put(st.user, key, orig, (size_t)size, &err), WSYNC_OK);
            free(orig);
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            wsync_mirror_stop(M.m);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 7);
            CHECK_EQ_U64(ms.whole_tensors, NT);
            CHECK(reported_is_diff(&M.E, M.t, ref(2), ref(7), 1));
            mir_close(&M);
        }
        pub_close(&P);
        wsync_store_close(&st);
        TEST_END();
    }
}

/* The background thread applies while the engine takes. */
typedef struct taker {
    mir *M;
    volatile int stop;
    int takes, bad;
    uint64_t last;
} taker;

static void *taker_main(void *arg)
{
    taker *T = (taker *)arg;
    while (!T->stop) {
        wsync_mirror_stats ms;
        wsync_error err;
        uint64_t step;
        engine_reset_seen(&T->M->E);
        if (wsync_mirror_take(T->M->m, scatter, &T->M->E, &ms, &err) != WSYNC_OK || T->M->E.bad) T->bad++;
        if (wsync_mirror_engine_step(T->M->m, &step)) {
            if (step < T->last || step > MAXSTEP || !engine_is(&T->M->E, T->M->t, ref(step))) T->bad++;
            T->last = step;
        }
        T->takes++;
        sleep_ms(1);
    }
    return NULL;
}

static void test_mirror_background(void)
{
    size_t e;
    for (e = 0; e < 4; e++) {
        wsync_store st;
        wsync_error err;
        pub P;
        mir M;
        uint64_t s;
        mirror_case("mirror: the background applies while the engine takes", e, &st, &P, 8, 1000);
        pub_step(&P, 0);
        if (mir_open(&M, &st, g_encs[e], e % 2 == 1, 0)) {
            taker T;
            pthread_t th;
            double end;
            uint64_t step = 0;
            memset(&T, 0, sizeof T);
            T.M = &M;
            CHECK_EQ_INT(wsync_mirror_start(M.m, &err), WSYNC_OK);
            pthread_create(&th, NULL, taker_main, &T);
            for (s = 1; s <= MAXSTEP; s++) {
                pub_step(&P, s);
                if (s % 3 == 0) sleep_ms(3);
            }
            end = now_s() + 20.0;
            while (now_s() < end && !(wsync_mirror_engine_step(M.m, &step) && step == MAXSTEP)) sleep_ms(5);
            T.stop = 1;
            pthread_join(th, NULL);
            CHECK_EQ_U64(step, MAXSTEP);
            CHECK_EQ_INT(T.bad, 0);
            CHECK(T.takes > 1);
            wsync_mirror_stop(M.m);
            CHECK_EQ_U64(mir_take_check(&M, NULL), MAXSTEP);
            mir_close(&M);
        }
        pub_close(&P);
        wsync_store_close(&st);
        TEST_END();
    }
}

/* ======================================================================
   The real AdamW trajectory (tests/fixtures/corpus/trajectory/README.md)
   ====================================================================== */

#define TRAJ_DIR "tests/fixtures/corpus/trajectory"
#define TRAJ_STEPS 5
static char *g_traj_names[MAXT];

/* The trajectory's five images as the model (ref(0) .. ref(4)), its
   tensors in the first file's order; 0 when a file is missing or does not
   hold the same bf16 tensors of rank 1 or 2 as the first. */
static int model_load_trajectory(void)
{
    uint64_t s;
    size_t i;
    for (s = 0; s < TRAJ_STEPS; s++) {
        char path[128];
        wsync_mapped mp;
        wsync_st_file f;
        wsync_error err;
        int ok = 1;
        snprintf(path, sizeof path, "%s/step_%04llu.safetensors", TRAJ_DIR, (unsigned long long)s);
        if (wsync_file_map(path, &mp, &err) != WSYNC_OK) {
            CHECK_MSG(0, "%s: %s", path, err.message);
            return 0;
        }
        if (wsync_st_parse(mp.bytes, mp.size, NULL, &f, &err) != WSYNC_OK) {
            CHECK_MSG(0, "%s: %s", path, err.message);
            wsync_file_unmap(&mp);
            return 0;
        }
        if (s == 0) {
            if (f.n_tensors == 0 || f.n_tensors > MAXT) ok = 0;
            for (i = 0; ok && i < f.n_tensors; i++) {
                const wsync_st_tensor *x = &f.tensors[i];
                if (x->dtype != WSYNC_DTYPE_BF16 || x->rank < 1 || x->rank > 2 || !(g_traj_names[i] = strdup(x->name))) {
                    ok = 0;
                    break;
                }
                g_names[i] = g_traj_names[i];
                g_dtypes[i] = x->dtype;
                g_ranks[i] = x->rank;
                g_shapes[i][0] = x->shape[0];
                g_shapes[i][1] = x->rank == 2 ? x->shape[1] : 0;
            }
            if (ok) {
                g_nt = f.n_tensors;
                model_layout();
                free(g_refs);
                g_refs = (uint8_t *)malloc(TRAJ_STEPS * g_total);
                if (!g_refs) exit(2);
                g_maxstep = TRAJ_STEPS - 1;
            }
        }
        for (i = 0; ok && i < g_nt; i++) {
            const wsync_st_tensor *x = wsync_st_find(&f, g_names[i]);
            if (!x || x->dtype != g_dtypes[i] || x->nelem != g_nelem[i] || f.n_tensors != g_nt) ok = 0;
            else memcpy(ref(s) + g_off[i], x->data, (size_t)(x->end - x->begin));
        }
        wsync_st_free(&f);
        wsync_file_unmap(&mp);
        CHECK_MSG(ok, "%s: not the tensors of step 0", path);
        if (!ok) return 0;
    }
    return 1;
}

/* For every encoding: the trajectory published into a memory store, a
   mirror following it. Step by step (each take from the apply's log, equal
   to the diff of the two steps), then caught up over several steps by
   merged takes (the bitmaps): from an anchor at step 0 through 4 deltas
   synced one at a time, and from step 1 to 3 in one sync over two deltas.
   After every take the engine stand-in (a scatter of what it was handed)
   equals the mirror and the published image (mir_take_check). */
static void test_mirror_trajectory(void)
{
    size_t e;
    uint64_t extra_seen = 0;
    if (!model_load_trajectory()) return;
    for (e = 0; e < 4; e++) {
        wsync_store st;
        wsync_error err;
        wsync_sync_stats ss;
        wsync_mirror_stats ms;
        pub P;
        mir M;
        uint64_t s, extra;
        mirror_case("mirror: the real AdamW trajectory, step by step and caught up", e, &st, &P, 1000, 1000);
        pub_step(&P, 0);
        /* step by step */
        if (mir_open(&M, &st, g_encs[e], e % 2 == 0, e == 1 ? 4096 : 0)) {
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 0);
            CHECK_EQ_U64(ms.whole_tensors, g_nt);
            for (s = 1; s <= g_maxstep; s++) {
                pub_step(&P, s);
                CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
                CHECK_EQ_U64(mir_take_check(&M, &ms), s);
                CHECK_EQ_U64(ms.steps, 1);
                CHECK(ms.positions > 0);
                CHECK_MSG(reported_is_diff(&M.E, M.t, ref(s - 1), ref(s), 0), "step %llu", (unsigned long long)s);
            }
            mir_close(&M);
        }
        /* caught up from step 0 over four deltas, each synced apart */
        if (mir_open(&M, &st, g_encs[e], e % 2 == 1, 0)) {
            CHECK_EQ_INT(wsync_mirror_sync(M.m, 0, &ss, &err), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 0);
            for (s = 1; s <= g_maxstep; s++) CHECK_EQ_INT(wsync_mirror_sync(M.m, s, &ss, &err), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), g_maxstep);
            CHECK_EQ_U64(ms.steps, g_maxstep);
            CHECK(reported_is_union(&M.E, M.t, 0, g_maxstep, 0, &extra));
            extra_seen += extra;
            mir_close(&M);
        }
        /* from step 1 to 3 in one sync, then 4 */
        if (mir_open(&M, &st, g_encs[e], e % 2 == 0, e == 2 ? 777 : 0)) {
            CHECK_EQ_INT(wsync_mirror_sync(M.m, 1, &ss, &err), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 1);
            CHECK_EQ_INT(wsync_mirror_sync(M.m, 3, &ss, &err), WSYNC_OK);
            CHECK_EQ_U64(ss.deltas, 2);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 3);
            CHECK_EQ_U64(ms.steps, 2);
            CHECK(reported_is_union(&M.E, M.t, 1, 3, 0, &extra));
            extra_seen += extra;
            CHECK_EQ_INT(mir_sync(&M), WSYNC_OK);
            CHECK_EQ_U64(mir_take_check(&M, &ms), 4);
            CHECK(reported_is_diff(&M.E, M.t, ref(3), ref(4), 0));
            mir_close(&M);
        }
        pub_close(&P);
        wsync_store_close(&st);
        TEST_END();
    }
    /* the trajectory has elements that return to their value: the merged
       takes above handed some of them (else the union check said nothing
       the diff check did not) */
    TEST_BEGIN("mirror: the trajectory's merged takes handed elements that returned to their value");
    CHECK(extra_seen > 0);
    TEST_END();
    if (getenv("MIRROR_VERBOSE"))
        printf("  trajectory: %llu positions handed with their value unchanged\n", (unsigned long long)extra_seen);
}

/* A plain subscriber's wsync_subscriber_on_changes: an anchor streamed into
   fresh targets, and one spooled over a held step, are handed whole; the
   deltas between them as positions; the engine equals the targets. */
static void test_subscriber_anchor_reports(void)
{
    wsync_store st;
    wsync_error err;
    wsync_sync_stats ss;
    wsync_subscriber *sub = NULL;
    wsync_tensor t[NT];
    uint8_t *img = (uint8_t *)calloc(g_total + 1, 1);
    engine E;
    pub P;
    uint64_t s;
    size_t i;
    int whole;
    TEST_BEGIN("subscriber on_changes: streamed and spooled anchors handed whole");
    if (!img) exit(2);
    tensors_of(img, t);
    engine_init(&E, t, NT, 1000);
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &st, &err), WSYNC_OK);
    pub_open(&P, &st, chain_opts(WSYNC_ENCODING_PACKED, 3, 1));
    pub_step(&P, 0);
    CHECK_EQ_INT(wsync_subscriber_open(&st, t, NT, NULL, &sub, &err), WSYNC_OK);
    if (sub) {
        wsync_subscriber_on_changes(sub, scatter, &E, 1000, 0);
        /* no step held: the anchor streams into the targets */
        CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK_EQ_U64(ss.anchors, 1);
        for (whole = 0, i = 0; i < NT; i++) whole += E.whole[i];
        CHECK_EQ_INT(whole, NT);
        CHECK(!E.bad);
        CHECK(engine_is(&E, t, ref(0)));
        /* deltas: positions only */
        engine_reset_seen(&E);
        pub_step(&P, 1);
        pub_step(&P, 2);
        CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK_EQ_U64(ss.anchors, 0);
        CHECK(E.positions > 0);
        CHECK(!E.bad);
        CHECK(engine_is(&E, t, ref(2)));
        /* retention left no delta path from step 2: anchor 6 is spooled
           (a step is held), handed whole, then delta 7 */
        for (s = 3; s <= 7; s++) pub_step(&P, s);
        engine_reset_seen(&E);
        CHECK_EQ_INT(wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK_EQ_U64(ss.anchors, 1);
        CHECK_EQ_U64(ss.step, 7);
        for (whole = 0, i = 0; i < NT; i++) whole += E.whole[i];
        CHECK_EQ_INT(whole, NT);
        CHECK(!E.bad);
        CHECK(engine_is(&E, t, ref(7)));
        CHECK(tensors_are(t, NT, ref(7)));
        wsync_subscriber_close(sub);
    }
    pub_close(&P);
    wsync_store_close(&st);
    engine_free(&E);
    free(img);
    TEST_END();
}

int main(void)
{
    model_make();
    test_apply_reports();
    test_mirror_steps();
    test_mirror_log();
    test_mirror_failures();
    test_mirror_corrupt_anchor();
    test_mirror_background();
    test_subscriber_anchor_reports();
    test_mirror_trajectory(); /* last: it replaces the generated model */
    free(g_refs);
    {
        size_t i;
        for (i = 0; i < MAXT; i++) free(g_traj_names[i]);
    }
    return check_summary();
}
