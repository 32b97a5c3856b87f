/* The delta chain: publisher and subscriber over memory and directory stores.

   Long chains with anchors and retention in every encoding, bit-exact from
   any retained step and from nothing; publisher continuity across reopen;
   corrupted deltas, anchors and HEAD (detected, named, routed around, the
   targets never a mixture); HEAD's parser on malformed texts; a TRL-style
   bucket without HEAD; background prefetch; and a publisher killed with
   SIGKILL at random points in real processes.

   The weights are a small bf16 model whose image at every step is a pure
   function of (variant, step): ~1.5% of elements move per step, mostly by
   one ordered-integer step, as in RL training. Every expectation (state
   digests, cheapest paths, retention) is computed here again from the
   declared contract rather than taken from wsync.h. */
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
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define VERBOSE check__is_verbose()

/* ======================================================================
   The model and its steps
   ====================================================================== */

/* Deliberately not in name order: the state digest sorts by name. */
static const sm_def g_small_defs[] = {
    {"model.layers.0.mlp.down_proj.weight", 2, {128, 64}, 0},
    {"lm_head.weight", 2, {96, 128}, 0},
    {"model.embed_tokens.weight", 2, {96, 128}, 0},
    {"model.layers.0.self_attn.q_proj.bias", 1, {128, 0}, 0},
    {"model.norm.weight", 1, {128, 0}, 0},
};
static const sm_def g_f32_defs[] = {
    {"model.layers.0.mlp.up_proj.weight", 2, {64, 96}, 1},
    {"model.norm.weight", 1, {96, 0}, 1},
    {"model.embed_tokens.weight", 2, {48, 96}, 0},
};
/* The small model plus one tensor: a change of tensors. */
static const sm_def g_grown_defs[] = {
    {"model.layers.0.mlp.down_proj.weight", 2, {128, 64}, 0},
    {"lm_head.weight", 2, {96, 128}, 0},
    {"model.embed_tokens.weight", 2, {96, 128}, 0},
    {"model.layers.0.self_attn.q_proj.bias", 1, {128, 0}, 0},
    {"model.norm.weight", 1, {128, 0}, 0},
    {"model.layers.1.mlp.down_proj.weight", 2, {32, 64}, 0},
};

static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) { return mix64(a ^ mix64(b ^ mix64(c))); }

static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}
/* Round to nearest even, for finite inputs (written here again). */
static uint16_t rne_bf16(uint32_t bits) { return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16); }

static uint16_t ord16(uint16_t u) { return (u & 0x8000u) ? (uint16_t)~u : (uint16_t)(u | 0x8000u); }
static uint16_t unord16(uint16_t o) { return (o & 0x8000u) ? (uint16_t)(o & 0x7FFFu) : (uint16_t)~o; }

static void gen_init(const sm_model *m, uint16_t *img)
{
    size_t i, j;
    for (i = 0; i < m->n; i++) {
        int norm = strstr(m->t[i].name, "norm") != NULL, bias = strstr(m->t[i].name, "bias") != NULL;
        for (j = 0; j < m->nelem[i]; j++) {
            uint64_t u = hash3(77, i, j);
            double x = (double)(u >> 11) / 9007199254740992.0 * 2.0 - 1.0;
            float f = norm ? (float)(1.0 + 0.05 * x) : bias ? (float)(0.01 * x * x * x) : (float)(0.04 * x);
            img[m->off[i] + j] = rne_bf16(f32_bits(f));
        }
    }
}

/* Step `step` of the sequence `variant`: ~1.5% of each tensor's elements
   move, mostly by +-1 in ordered-integer space, 1 in 16 by 2..9. */
static void gen_advance(const sm_model *m, uint16_t *img, uint64_t variant, uint64_t step)
{
    size_t i, j;
    for (i = 0; i < m->n; i++) {
        size_t n = m->nelem[i], k = n * 15 / 1000;
        if (k < 1) k = 1;
        for (j = 0; j < k; j++) {
            uint64_t h = hash3(variant * 0x100000001ull + 1, step, i * 1000003ull + j);
            size_t pos = (size_t)(h % n);
            unsigned mag = ((h >> 32) & 15) == 0 ? 2u + (unsigned)((h >> 36) & 7) : 1u;
            int neg = (int)((h >> 40) & 1);
            uint16_t o = ord16(img[m->off[i] + pos]), nb;
            if (neg ? o < mag : o > 0xFFFFu - mag) continue;
            nb = unord16((uint16_t)(neg ? o - mag : o + mag));
            if ((nb & 0x7F80u) == 0x7F80u) continue;
            img[m->off[i] + pos] = nb;
        }
    }
}

static void gen_image(const sm_model *m, uint64_t variant, uint64_t step, uint16_t *img)
{
    uint64_t s;
    gen_init(m, img);
    for (s = 1; s <= step; s++) gen_advance(m, img, variant, s);
}

/* Images of steps 0..last of variant 0. */
static uint16_t *gen_refs(const sm_model *m, uint64_t last)
{
    uint64_t s;
    uint16_t *r = (uint16_t *)malloc((size_t)(last + 1) * m->total * 2);
    if (!r) {
        printf("out of memory\n");
        exit(2);
    }
    gen_init(m, r);
    for (s = 1; s <= last; s++) {
        memcpy(r + s * m->total, r + (s - 1) * m->total, m->total * 2);
        gen_advance(m, r + s * m->total, 0, s);
    }
    return r;
}
#define REF(refs, m, s) ((refs) + (size_t)(s) * (m)->total)

/* Publisher input where F32 tensors carry the image's bf16 bits in their
   high half and fixed per-element low bits (so rounding goes both ways and
   ties occur); `expect` gets what must be published (the RNE cast). */
static void f32_input(const sm_model *m, const uint16_t *img, float *buf, wsync_tensor *t, uint16_t *expect)
{
    size_t i, j;
    for (i = 0; i < m->n; i++) {
        t[i].name = m->t[i].name;
        t[i].rank = m->t[i].rank;
        t[i].shape = m->t[i].shape;
        if (m->t[i].f32) {
            for (j = 0; j < m->nelem[i]; j++) {
                uint64_t h = hash3(99, i, j);
                uint32_t low = (j % 97 == 0) ? 0x8000u : (uint32_t)(h & 0xFFFFu);
                uint32_t bits = ((uint32_t)img[m->off[i] + j] << 16) | low;
                memcpy(&buf[m->off[i] + j], &bits, 4);
                expect[m->off[i] + j] = rne_bf16(bits);
            }
            t[i].dtype = WSYNC_DTYPE_F32;
            t[i].data = buf + m->off[i];
            t[i].nbytes = (uint64_t)m->nelem[i] * 4;
        } else {
            memcpy(expect + m->off[i], img + m->off[i], m->nelem[i] * 2);
            t[i].dtype = WSYNC_DTYPE_BF16;
            t[i].data = (void *)(img + m->off[i]);
            t[i].nbytes = (uint64_t)m->nelem[i] * 2;
        }
    }
}

static uint64_t count_diff(const uint16_t *a, const uint16_t *b, size_t n)
{
    uint64_t c = 0;
    size_t i;
    for (i = 0; i < n; i++) c += a[i] != b[i];
    return c;
}

/* The state digest as declared: wsync_digest over the little-endian u64
   digests of the tensors' bytes, tensors in byte order of their names. */
static uint64_t my_state(const wsync_tensor *t, size_t n)
{
    size_t order[SM_MAXT], i, j;
    uint8_t buf[8 * SM_MAXT];
    for (i = 0; i < n; i++) order[i] = i;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && strcmp(t[order[j - 1]].name, t[order[j]].name) > 0; j--) {
            size_t x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    for (i = 0; i < n; i++) {
        uint64_t d = wsync_digest(t[order[i]].data, (size_t)t[order[i]].nbytes);
        for (j = 0; j < 8; j++) buf[8 * i + j] = (uint8_t)(d >> (8 * j));
    }
    return wsync_digest(buf, 8 * n);
}

static uint64_t img_state(const sm_model *m, uint16_t *img)
{
    wsync_tensor t[SM_MAXT];
    sm_tensors(m, img, t);
    return my_state(t, m->n);
}

/* ======================================================================
   Store helpers
   ====================================================================== */

typedef struct keylist {
    size_t n, cap;
    char **k;
    uint64_t *size;
} keylist;

static int kl_add(void *user, const char *key, uint64_t size)
{
    keylist *l = (keylist *)user;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->k = (char **)realloc(l->k, l->cap * sizeof *l->k);
        l->size = (uint64_t *)realloc(l->size, l->cap * sizeof *l->size);
        if (!l->k || !l->size) exit(2);
    }
    l->k[l->n] = (char *)malloc(strlen(key) + 1);
    strcpy(l->k[l->n], key);
    l->size[l->n] = size;
    l->n++;
    return 0;
}

static void kl_free(keylist *l)
{
    size_t i;
    for (i = 0; i < l->n; i++) free(l->k[i]);
    free(l->k);
    free(l->size);
    memset(l, 0, sizeof *l);
}

static keylist list_keys(const wsync_store *s, const char *prefix)
{
    keylist l;
    wsync_error err;
    memset(&l, 0, sizeof l);
    if (s->list(s->user, prefix, kl_add, &l, &err) != WSYNC_OK) printf("  list: %s\n", err.message);
    return l;
}

static int kl_find(const keylist *l, const char *key)
{
    size_t i;
    for (i = 0; i < l->n; i++)
        if (strcmp(l->k[i], key) == 0) return (int)i;
    return -1;
}

/* "<prefix>/<key>" or "<key>" */
static const char *pkey(char *buf, size_t cap, const char *prefix, const char *key)
{
    if (prefix && *prefix) snprintf(buf, cap, "%s/%s", prefix, key);
    else snprintf(buf, cap, "%s", key);
    return buf;
}

static const char *akey(char *buf, size_t cap, const char *prefix, uint64_t step)
{
    char k[64];
    snprintf(k, sizeof k, "anchors/step_%06llu.safetensors", (unsigned long long)step);
    return pkey(buf, cap, prefix, k);
}
static const char *dkey(char *buf, size_t cap, const char *prefix, uint64_t step)
{
    char k[64];
    snprintf(k, sizeof k, "deltas/step_%06llu.safetensors", (unsigned long long)step);
    return pkey(buf, cap, prefix, k);
}

static uint8_t *obj_get(const wsync_store *s, const char *key, uint64_t *size)
{
    uint8_t *p = NULL;
    wsync_error err;
    *size = 0;
    if (wsync_store_get_all(s, key, NULL, &p, size, &err) != WSYNC_OK) return NULL;
    return p;
}

static int obj_put(const wsync_store *s, const char *key, const void *bytes, size_t len)
{
    wsync_error err;
    wsync_result r = s->put(s->user, key, bytes, len, &err);
    if (r != WSYNC_OK) printf("  put %s: %s\n", key, err.message);
    return r == WSYNC_OK;
}

/* A whole store, to show that a refused call left it untouched. */
typedef struct snapshot {
    keylist keys;
    uint8_t **data;
} snapshot;

static snapshot snap_take(const wsync_store *s)
{
    snapshot sn;
    size_t i;
    sn.keys = list_keys(s, "");
    sn.data = (uint8_t **)calloc(sn.keys.n + 1, sizeof *sn.data);
    for (i = 0; i < sn.keys.n; i++) {
        uint64_t size;
        sn.data[i] = obj_get(s, sn.keys.k[i], &size);
    }
    return sn;
}

static void snap_free(snapshot *sn)
{
    size_t i;
    for (i = 0; i < sn->keys.n; i++) free(sn->data[i]);
    free(sn->data);
    kl_free(&sn->keys);
}

static int snap_same(const wsync_store *s, const snapshot *sn)
{
    snapshot now = snap_take(s);
    size_t i;
    int same = now.keys.n == sn->keys.n;
    for (i = 0; same && i < now.keys.n; i++) {
        same = strcmp(now.keys.k[i], sn->keys.k[i]) == 0 && now.keys.size[i] == sn->keys.size[i] &&
               now.data[i] && sn->data[i] && memcmp(now.data[i], sn->data[i], (size_t)now.keys.size[i]) == 0;
    }
    snap_free(&now);
    return same;
}

static void snap_restore(const wsync_store *s, const snapshot *sn)
{
    keylist l = list_keys(s, "");
    wsync_error err;
    size_t i;
    for (i = 0; i < l.n; i++)
        if (kl_find(&sn->keys, l.k[i]) < 0) s->del(s->user, l.k[i], &err);
    for (i = 0; i < sn->keys.n; i++)
        if (sn->data[i]) obj_put(s, sn->keys.k[i], sn->data[i], (size_t)sn->keys.size[i]);
    kl_free(&l);
}

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", dir);
}

static int make_tmpdir(char *buf, size_t cap, const char *what)
{
    mkdir("build", 0777);
    snprintf(buf, cap, "build/test_chain.%s.XXXXXX", what);
    if (!mkdtemp(buf)) {
        printf("  mkdtemp %s failed\n", buf);
        return 0;
    }
    return 1;
}

static wsync_chain_options chain_opts(const char *prefix, wsync_encoding enc, uint32_t k, uint32_t retain)
{
    wsync_chain_options o;
    memset(&o, 0, sizeof o);
    o.prefix = prefix;
    o.encoding = enc;
    o.anchor_every = k;
    o.retain = retain;
    return o;
}

/* ======================================================================
   Expected paths: the cheapest in bytes over a chain's entries, computed
   here (Bellman-Ford over steps); `bad` marks entries to route around.
   ====================================================================== */

typedef struct plan {
    int ok;
    unsigned anchors, deltas;
    uint64_t bytes;
} plan;

#define NO_STEP UINT64_MAX
#define MAXNODES 1024

static plan plan_path(const wsync_chain_info *c, const int *bad, uint64_t from, uint64_t to)
{
    uint64_t steps[MAXNODES], dist[MAXNODES];
    int via[MAXNODES]; /* entry index that reached the node; -1: start */
    size_t nn = 0, i, j;
    int changed = 1, iter = 0;
    plan p;
    memset(&p, 0, sizeof p);
    for (i = 0; i < c->n_entries && nn < MAXNODES - 1; i++) {
        for (j = 0; j < nn && steps[j] != c->entries[i].step; j++) {
        }
        if (j == nn) steps[nn++] = c->entries[i].step;
    }
    if (from != NO_STEP) {
        for (j = 0; j < nn && steps[j] != from; j++) {
        }
        if (j == nn) steps[nn++] = from;
    }
    for (j = 0; j < nn; j++) {
        dist[j] = UINT64_MAX;
        via[j] = -1;
        if (steps[j] == from) dist[j] = 0;
    }
    while (changed && iter++ < 4 * MAXNODES) {
        changed = 0;
        for (i = 0; i < c->n_entries; i++) {
            const wsync_chain_entry *e = &c->entries[i];
            uint64_t base_cost = UINT64_MAX;
            size_t to_node = 0;
            if (bad && bad[i]) continue;
            for (j = 0; j < nn; j++)
                if (steps[j] == e->step) to_node = j;
            if (e->kind == WSYNC_CHAIN_ANCHOR) base_cost = 0;
            else
                for (j = 0; j < nn; j++)
                    if (steps[j] == e->base && dist[j] != UINT64_MAX) base_cost = dist[j];
            if (base_cost == UINT64_MAX) continue;
            if (base_cost + e->bytes < dist[to_node]) {
                dist[to_node] = base_cost + e->bytes;
                via[to_node] = (int)i;
                changed = 1;
            }
        }
    }
    for (j = 0; j < nn && steps[j] != to; j++) {
    }
    if (j == nn || dist[j] == UINT64_MAX) return p;
    p.ok = 1;
    p.bytes = dist[j];
    while (via[j] >= 0) {
        const wsync_chain_entry *e = &c->entries[via[j]];
        size_t k;
        if (e->kind == WSYNC_CHAIN_ANCHOR) {
            p.anchors++;
            break;
        }
        p.deltas++;
        for (k = 0; k < nn && steps[k] != e->base; k++) {
        }
        j = k;
        if (j == nn) break;
    }
    return p;
}

static int find_entry(const wsync_chain_info *c, wsync_chain_kind kind, uint64_t step)
{
    size_t i;
    for (i = 0; i < c->n_entries; i++)
        if (c->entries[i].kind == kind && c->entries[i].step == step) return (int)i;
    return -1;
}

/* ======================================================================
   Subscriber helpers
   ====================================================================== */

static void sub_set(sm_sub *u, const uint16_t *img, uint64_t step)
{
    memcpy(u->img, img, u->m->total * 2);
    wsync_subscriber_set_step(u->s, step);
}

static int is_zero(const uint16_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* ======================================================================
   Chain checks shared by the tests
   ====================================================================== */

/* HEAD against the store: every entry well-formed, its object present with
   HEAD's size and digest, its state digest the reference's (when refs). */
static void check_info_vs_store(const wsync_store *st, const char *prefix, const wsync_chain_info *c,
                                const sm_model *m, const uint16_t *refs)
{
    size_t i;
    char key[256], want[64];
    for (i = 0; i < c->n_entries; i++) {
        const wsync_chain_entry *e = &c->entries[i];
        uint64_t size = 0;
        uint8_t *b;
        snprintf(want, sizeof want, "%s/step_%06llu.safetensors", e->kind == WSYNC_CHAIN_ANCHOR ? "anchors" : "deltas",
                 (unsigned long long)e->step);
        CHECK_MSG(strcmp(e->key, want) == 0, "entry key '%s', expected '%s'", e->key, want);
        if (i > 0) {
            const wsync_chain_entry *p = &c->entries[i - 1];
            CHECK_MSG(p->kind < e->kind || (p->kind == e->kind && p->step < e->step), "entries out of order at %zu", i);
        }
        CHECK(e->step <= c->head_step);
        if (e->kind == WSYNC_CHAIN_ANCHOR) CHECK_EQ_U64(e->base, e->step);
        else CHECK_MSG(e->base < e->step, "delta %llu base %llu", (unsigned long long)e->step,
                       (unsigned long long)e->base);
        b = obj_get(st, pkey(key, sizeof key, prefix, e->key), &size);
        CHECK_MSG(b != NULL, "%s listed in HEAD but missing", key);
        if (b) {
            CHECK_EQ_U64(size, e->bytes);
            if (e->has_digests) CHECK_EQ_U64(wsync_digest(b, (size_t)size), e->digest);
        }
        free(b);
        if (refs && e->has_digests)
            CHECK_MSG(e->state == img_state(m, (uint16_t *)REF(refs, m, e->step)), "state of %s", e->key);
    }
}

static int parse_step_key(const char *k, const char *dir, uint64_t *step)
{
    size_t n = strlen(dir);
    unsigned long long s;
    char tail[32];
    if (strncmp(k, dir, n) != 0) return 0;
    if (sscanf(k + n, "step_%llu%31s", &s, tail) != 2 || strcmp(tail, ".safetensors") != 0) return 0;
    *step = s;
    return 1;
}

/* One sync of `u` to `to`, checked against the plan and the references. */
static void sync_expect(sm_sub *u, const wsync_chain_info *c, const int *bad, uint64_t to, const uint16_t *refs,
                        const char *what)
{
    wsync_sync_stats st;
    wsync_error err;
    uint64_t from = sm_sub_step(u), target = to == WSYNC_STEP_LATEST ? c->head_step : to;
    plan p = plan_path(c, bad, from, target);
    uint16_t *before = (uint16_t *)malloc(u->m->total * 2);
    wsync_result r;
    memcpy(before, u->img, u->m->total * 2);
    memset(&st, 0, sizeof st);
    r = wsync_subscriber_sync(u->s, to, &st, &err);
    if (p.ok) {
        CHECK_MSG(r == WSYNC_OK, "%s: sync %llu -> %llu: %s: %s", what, (unsigned long long)from,
                  (unsigned long long)target, wsync_result_name(r), err.message);
        CHECK_MSG(memcmp(u->img, REF(refs, u->m, target), u->m->total * 2) == 0, "%s: %llu -> %llu not bit-exact",
                  what, (unsigned long long)from, (unsigned long long)target);
        CHECK_EQ_U64(sm_sub_step(u), target);
        CHECK_EQ_U64(st.step, target);
        CHECK_EQ_U64(st.head_step, c->head_step);
        CHECK_EQ_INT(st.had_step, from != NO_STEP);
        if (from != NO_STEP) CHECK_EQ_U64(st.from_step, from);
        CHECK_MSG(st.anchors == p.anchors && st.deltas == p.deltas,
                  "%s: %llu -> %llu took %u anchors + %u deltas (%s), cheapest is %u + %u", what,
                  (unsigned long long)from, (unsigned long long)target, st.anchors, st.deltas, st.path, p.anchors,
                  p.deltas);
        CHECK_MSG(st.bytes_fetched >= p.bytes, "%s: fetched %llu < %llu", what, (unsigned long long)st.bytes_fetched,
                  (unsigned long long)p.bytes);
        if (!bad) CHECK_EQ_INT(st.rejected, 0);
        CHECK(st.path[0] != 0);
        if (from == target) CHECK_EQ_STR(st.path, "none");
    } else {
        CHECK_MSG(r != WSYNC_OK, "%s: sync %llu -> %llu should have no path", what, (unsigned long long)from,
                  (unsigned long long)target);
        CHECK_MSG(r == WSYNC_ERR_NO_PATH || r == WSYNC_ERR_NOT_FOUND, "%s: %s", what, wsync_result_name(r));
        CHECK_MSG(memcmp(u->img, before, u->m->total * 2) == 0, "%s: a failed sync without a path moved the targets",
                  what);
        CHECK_EQ_U64(sm_sub_step(u), from);
    }
    free(before);
}

/* ======================================================================
   1. Long chains: anchors, retention, every encoding, both stores
   ====================================================================== */

typedef struct chain_case {
    const char *label;
    wsync_store *st;
    const char *prefix;
    wsync_encoding enc;
    uint64_t last;      /* steps 0..last */
    uint32_t k, retain; /* options as given (0: defaults) */
    unsigned sub_flags, threads;
    int f32;            /* use the F32 model */
    int full;           /* the exhaustive subscriber sweep */
} chain_case;

static void run_chain(const chain_case *cc)
{
    sm_model m = cc->f32 ? sm_model_make(g_f32_defs, sizeof g_f32_defs / sizeof g_f32_defs[0])
                      : sm_model_make(g_small_defs, sizeof g_small_defs / sizeof g_small_defs[0]);
    uint32_t K = cc->k ? cc->k : 20, R = cc->retain ? cc->retain : 2 * K;
    uint16_t *inrefs = gen_refs(&m, cc->last);
    uint16_t *refs = cc->f32 ? (uint16_t *)calloc((size_t)(cc->last + 1) * m.total, 2) : inrefs;
    float *f32buf = (float *)malloc(m.total * 4);
    uint8_t *wrote = (uint8_t *)calloc((size_t)cc->last + 1, 1);
    wsync_chain_options o = chain_opts(cc->prefix, cc->enc, cc->k, cc->retain), so;
    wsync_publisher *pub = NULL;
    wsync_error err;
    wsync_chain_info info;
    sm_sub fol, u;
    uint64_t s, last_anchor = 0, written = 0, deleted = 0, head = 0;
    char name[200], key[256];
    size_t i;
    int ok_pub = 1;

    o.threads = cc->threads;
    so = o;
    so.flags = cc->sub_flags;
    memset(&info, 0, sizeof info);

#define NAME(what) (snprintf(name, sizeof name, "%s: %s", cc->label, what), name)
    TEST_BEGIN(NAME("an empty store has no chain"));
    CHECK_EQ_INT(wsync_chain_read(cc->st, &o, &info, &err), WSYNC_ERR_NOT_FOUND);
    if (sm_sub_open(&u, cc->st, &m, &so, 0)) {
        wsync_sync_stats ss;
        CHECK(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err) != WSYNC_OK);
        CHECK(is_zero(u.img, m.total));
        CHECK_EQ_U64(sm_sub_step(&u), NO_STEP);
    }
    sm_sub_close(&u);
    TEST_END();

    TEST_BEGIN(NAME("publish every step; a follower takes one delta per step, bit-exact"));
    CHECK_EQ_INT(wsync_publisher_open(cc->st, &o, &pub, &err), WSYNC_OK);
    CHECK(!wsync_publisher_head(pub, &head));
    sm_sub_open(&fol, cc->st, &m, &so, 1);
    for (s = 0; s <= cc->last && pub && ok_pub; s++) {
        wsync_tensor t[SM_MAXT];
        wsync_publish_stats ps;
        wsync_sync_stats ss;
        int expect_anchor = s == 0 || s - last_anchor >= K;
        if (cc->f32) {
            uint16_t *exp = REF(refs, &m, s);
            f32_input(&m, REF(inrefs, &m, s), f32buf, t, exp);
            for (i = 0; i < m.n; i++)
                if (m.t[i].f32) {
                    /* the expected cast, also by the library's own conversion */
                    uint16_t *chk = (uint16_t *)malloc(m.nelem[i] * 2);
                    wsync_f32_to_bf16_n(f32buf + m.off[i], chk, m.nelem[i]);
                    CHECK(memcmp(chk, exp + m.off[i], m.nelem[i] * 2) == 0);
                    free(chk);
                }
        } else {
            sm_tensors(&m, REF(refs, &m, s), t);
        }
        memset(&ps, 0, sizeof ps);
        if (wsync_publish(pub, s, t, m.n, &ps, &err) != WSYNC_OK) {
            CHECK_MSG(0, "publish %llu: %s", (unsigned long long)s, err.message);
            ok_pub = 0;
            break;
        }
        CHECK_EQ_U64(ps.step, s);
        CHECK_MSG(ps.wrote_anchor == expect_anchor, "step %llu: wrote_anchor %d", (unsigned long long)s,
                  ps.wrote_anchor);
        if (s == 0) CHECK(!ps.wrote_delta);
        if (!expect_anchor) CHECK_MSG(ps.wrote_delta, "step %llu: no delta", (unsigned long long)s);
        if (ps.wrote_delta) {
            CHECK_EQ_U64(ps.base_step, s - 1);
            CHECK_EQ_U64(ps.elements, m.total);
            CHECK_EQ_U64(ps.changed, count_diff(REF(refs, &m, s - 1), REF(refs, &m, s), m.total));
            CHECK(ps.delta_bytes > 0);
        }
        if (ps.wrote_anchor) CHECK(ps.anchor_bytes >= m.total * 2);
        CHECK_EQ_U64(ps.state, img_state(&m, REF(refs, &m, s)));
        CHECK(wsync_publisher_head(pub, &head) && head == s);
        if (expect_anchor) last_anchor = s;
        wrote[s] = (uint8_t)((ps.wrote_anchor ? 1 : 0) | (ps.wrote_delta ? 2 : 0));
        written += (uint64_t)(ps.wrote_anchor != 0) + (uint64_t)(ps.wrote_delta != 0);
        deleted += ps.deleted;

        if (fol.s) {
            wsync_result r = wsync_subscriber_sync(fol.s, WSYNC_STEP_LATEST, &ss, &err);
            CHECK_MSG(r == WSYNC_OK, "follower at %llu: %s", (unsigned long long)s, err.message);
            CHECK_MSG(memcmp(fol.img, REF(refs, &m, s), m.total * 2) == 0, "follower at %llu not bit-exact",
                      (unsigned long long)s);
            CHECK_EQ_U64(ss.step, s);
            if (s == 0) CHECK(ss.anchors == 1 && ss.deltas == 0);
            else if (ps.wrote_delta)
                CHECK_MSG(ss.anchors == 0 && ss.deltas == 1, "follower %llu: %u anchors %u deltas (%s)",
                          (unsigned long long)s, ss.anchors, ss.deltas, ss.path);
        }

        /* retention, after every publish */
        {
            keylist l = list_keys(cc->st, pkey(key, sizeof key, cc->prefix, ""));
            uint64_t t2;
            for (t2 = 0; t2 <= s; t2++) {
                int kind;
                for (kind = 1; kind <= 2; kind++) {
                    int present, keep, gone;
                    if (!(wrote[t2] & kind)) continue;
                    if (kind == 1) akey(key, sizeof key, cc->prefix, t2);
                    else dkey(key, sizeof key, cc->prefix, t2);
                    present = kl_find(&l, key) >= 0;
                    keep = t2 + R > s || t2 >= last_anchor;
                    gone = t2 + R + K <= s && t2 < last_anchor;
                    if (keep) CHECK_MSG(present, "head %llu: %s was deleted", (unsigned long long)s, key);
                    if (gone) CHECK_MSG(!present, "head %llu: %s was retained", (unsigned long long)s, key);
                }
            }
            for (i = 0; i < l.n; i++) CHECK(strstr(l.k[i], WSYNC_STORE_TMP_MARK) == NULL);
            kl_free(&l);
        }
    }
    sm_sub_close(&fol);
    TEST_END();

    TEST_BEGIN(NAME("HEAD: fields, every object present with its size and digests, no orphans"));
    if (wsync_chain_read(cc->st, &o, &info, &err) != WSYNC_OK) {
        CHECK_MSG(0, "chain_read: %s", err.message);
        memset(&info, 0, sizeof info);
    } else {
        keylist la, ld;
        size_t na = 0, nd = 0;
        CHECK_EQ_INT(info.has_head, 1);
        CHECK_EQ_U64(info.head_step, cc->last);
        CHECK_EQ_U64(info.anchor_step, last_anchor);
        CHECK_EQ_U64(info.head_state, img_state(&m, REF(refs, &m, cc->last)));
        CHECK_EQ_INT(info.encoding, cc->enc ? cc->enc : WSYNC_ENCODING_PACKED);
        check_info_vs_store(cc->st, cc->prefix, &info, &m, refs);
        for (i = 0; i < info.n_entries; i++) {
            CHECK(info.entries[i].has_digests);
            if (info.entries[i].kind == WSYNC_CHAIN_ANCHOR) na++;
            else {
                nd++;
                CHECK_EQ_U64(info.entries[i].base, info.entries[i].step - 1);
            }
        }
        size_t plen = strlen(pkey(key, sizeof key, cc->prefix, ""));
        la = list_keys(cc->st, pkey(key, sizeof key, cc->prefix, "anchors/"));
        ld = list_keys(cc->st, pkey(key, sizeof key, cc->prefix, "deltas/"));
        CHECK_EQ_INT(la.n, na);
        CHECK_EQ_INT(ld.n, nd);
        CHECK_EQ_U64(written - deleted, la.n + ld.n);
        CHECK(find_entry(&info, WSYNC_CHAIN_ANCHOR, last_anchor) >= 0);
        for (i = 0; i < la.n; i++) {
            uint64_t st2;
            CHECK(parse_step_key(la.k[i] + plen, "anchors/", &st2) &&
                  find_entry(&info, WSYNC_CHAIN_ANCHOR, st2) >= 0);
        }
        for (i = 0; i < ld.n; i++) {
            uint64_t st2;
            CHECK(parse_step_key(ld.k[i] + plen, "deltas/", &st2) &&
                  find_entry(&info, WSYNC_CHAIN_DELTA, st2) >= 0);
        }
        if (cc->last >= R + 2 * K) CHECK_MSG(deleted > 0, "nothing was deleted after %llu steps",
                                             (unsigned long long)cc->last);
        kl_free(&la);
        kl_free(&ld);
        {
            uint64_t sd = 0;
            wsync_tensor t[SM_MAXT];
            sm_tensors(&m, REF(refs, &m, cc->last), t);
            CHECK_EQ_INT(wsync_state_digest(t, m.n, 0, &sd, &err), WSYNC_OK);
            CHECK_EQ_U64(sd, info.head_state);
            CHECK_EQ_INT(wsync_state_digest(t, m.n, 2, &sd, &err), WSYNC_OK);
            CHECK_EQ_U64(sd, info.head_state);
        }
    }
    TEST_END();

    if (info.n_entries == 0) goto done;

    TEST_BEGIN(NAME("from nothing to the latest step: the newest anchor and its deltas"));
    if (sm_sub_open(&u, cc->st, &m, &so, 0)) {
        sync_expect(&u, &info, NULL, WSYNC_STEP_LATEST, refs, "from nothing");
        sync_expect(&u, &info, NULL, WSYNC_STEP_LATEST, refs, "again (nothing to do)");
    }
    sm_sub_close(&u);
    TEST_END();

    TEST_BEGIN(NAME("from every retained step (and older ones) to the latest, bit-exact"));
    if (sm_sub_open(&u, cc->st, &m, &so, 0)) {
        uint64_t lo = cc->last > R + K ? cc->last - R - K : 0;
        for (s = 0; s <= cc->last; s++) {
            if (s < lo && s % 10 != 3 && s != 0) continue;
            if (!cc->full && s < cc->last - 3 && s % 4 != 0) continue;
            sub_set(&u, REF(refs, &m, s), s);
            sync_expect(&u, &info, NULL, WSYNC_STEP_LATEST, refs, "to latest");
            if (s + 1 == cc->last && find_entry(&info, WSYNC_CHAIN_DELTA, cc->last) >= 0) {
                /* one delta, checked by sync_expect's plan; stated here too */
                sub_set(&u, REF(refs, &m, s), s);
                {
                    wsync_sync_stats ss;
                    CHECK_EQ_INT(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
                    CHECK(ss.deltas == 1 && ss.anchors == 0 && ss.rejected == 0);
                }
            }
        }
    }
    sm_sub_close(&u);
    TEST_END();

    TEST_BEGIN(NAME("to specific steps, from nothing and from earlier steps"));
    {
        uint64_t lo = cc->last > R + K ? cc->last - R - K : 0, t2;
        for (t2 = lo; t2 <= cc->last; t2++) {
            if (!cc->full && t2 % 3 != 0 && t2 != cc->last) continue;
            if (sm_sub_open(&u, cc->st, &m, &so, t2 & 1)) {
                sync_expect(&u, &info, NULL, t2, refs, "nothing -> step");
                if (t2 >= 3) {
                    sub_set(&u, REF(refs, &m, t2 - 3), t2 - 3);
                    sync_expect(&u, &info, NULL, t2, refs, "step-3 -> step");
                }
                if (t2 + 2 <= cc->last) {
                    sub_set(&u, REF(refs, &m, t2), t2);
                    sync_expect(&u, &info, NULL, t2 + 2, refs, "step -> step+2");
                }
            }
            sm_sub_close(&u);
        }
    }
    TEST_END();

    TEST_BEGIN(NAME("a step past HEAD is refused, the targets untouched"));
    if (sm_sub_open(&u, cc->st, &m, &so, 0)) {
        wsync_sync_stats ss;
        sub_set(&u, REF(refs, &m, cc->last - 1), cc->last - 1);
        CHECK(wsync_subscriber_sync(u.s, cc->last + 5, &ss, &err) != WSYNC_OK);
        CHECK(memcmp(u.img, REF(refs, &m, cc->last - 1), m.total * 2) == 0);
        CHECK_EQ_U64(sm_sub_step(&u), cc->last - 1);
    }
    sm_sub_close(&u);
    TEST_END();

done:
    if (pub) wsync_publisher_close(pub);
    wsync_chain_info_free(&info);
    if (refs != inrefs) free(refs);
    free(inrefs);
    free(f32buf);
    free(wrote);
#undef NAME
}

static void test_chains(void)
{
    wsync_store mem;
    wsync_store_options so;
    wsync_error err;
    char root[256];
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;

    {
        chain_case c = {"memory, packed, 130 steps, K 7, retain 30", NULL, NULL, WSYNC_ENCODING_PACKED, 130, 7, 30,
                        0, 0, 0, 1};
        if (wsync_store_mem_open(NULL, &mem, &err) == WSYNC_OK) {
            c.st = &mem;
            run_chain(&c);
            wsync_store_close(&mem);
        }
    }
    if (make_tmpdir(root, sizeof root, "dir")) {
        wsync_store ds;
        chain_case c = {"directory+prefix, packed-max, 110 steps, K 7, retain 30, verify", NULL, "runs/exp1",
                        WSYNC_ENCODING_PACKED_MAX, 110, 7, 30, WSYNC_CHAIN_VERIFY_STATE, 0, 0, 1};
        if (wsync_store_dir_open(root, &so, &ds, &err) == WSYNC_OK) {
            c.st = &ds;
            run_chain(&c);
            wsync_store_close(&ds);
        }
        rm_rf(root);
    }
    {
        chain_case c = {"memory, trl-v1, 40 steps, K 9, default retain", NULL, NULL, WSYNC_ENCODING_TRL_V1, 40, 9, 0,
                        0, 0, 0, 0};
        if (wsync_store_mem_open(NULL, &mem, &err) == WSYNC_OK) {
            c.st = &mem;
            run_chain(&c);
            wsync_store_close(&mem);
        }
    }
    if (make_tmpdir(root, sizeof root, "dir3")) {
        wsync_store ds;
        chain_case c = {"directory, trl-v3, 45 steps, K 6, retain 10, 2 threads", NULL, NULL, WSYNC_ENCODING_TRL_V3,
                        45, 6, 10, WSYNC_CHAIN_VERIFY_STATE, 2, 0, 0};
        if (wsync_store_dir_open(root, &so, &ds, &err) == WSYNC_OK) {
            c.st = &ds;
            run_chain(&c);
            wsync_store_close(&ds);
        }
        rm_rf(root);
    }
    {
        chain_case c = {"memory, F32 input published as BF16, 30 steps, K 8", NULL, "f32", WSYNC_ENCODING_PACKED, 30,
                        8, 12, WSYNC_CHAIN_VERIFY_STATE, 0, 1, 0};
        if (wsync_store_mem_open(NULL, &mem, &err) == WSYNC_OK) {
            c.st = &mem;
            run_chain(&c);
            wsync_store_close(&mem);
        }
    }
    {
        /* defaults everywhere: K 20, retain 40, packed */
        chain_case c = {"memory, all defaults, 65 steps", NULL, NULL, (wsync_encoding)0, 65, 0, 0, 0, 0, 0, 0};
        if (wsync_store_mem_open(NULL, &mem, &err) == WSYNC_OK) {
            c.st = &mem;
            run_chain(&c);
            wsync_store_close(&mem);
        }
    }
}

/* F32 with WSYNC_CHAIN_KEEP_F32: published as F32, the subscriber's F32
   targets equal the input. */
static void test_keep_f32(void)
{
    sm_model m = sm_model_make(g_f32_defs, sizeof g_f32_defs / sizeof g_f32_defs[0]);
    uint16_t *refs = gen_refs(&m, 6), *exp = (uint16_t *)malloc(m.total * 2);
    float *in = (float *)malloc(m.total * 4), *out = (float *)calloc(m.total, 4);
    wsync_store mem;
    wsync_error err;
    wsync_chain_options o = chain_opts(NULL, WSYNC_ENCODING_PACKED, 4, 0);
    wsync_publisher *pub = NULL;
    wsync_subscriber *su = NULL;
    wsync_tensor t[SM_MAXT], tt[SM_MAXT];
    uint64_t s;
    size_t i;
    o.flags = WSYNC_CHAIN_KEEP_F32;
    TEST_BEGIN("KEEP_F32: F32 tensors published as F32, bit-exact");
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &mem, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publisher_open(&mem, &o, &pub, &err), WSYNC_OK);
    /* subscriber targets: F32 where the input is F32 */
    f32_input(&m, refs, in, t, exp);
    {
        uint16_t *bf = (uint16_t *)calloc(m.total, 2);
        for (i = 0; i < m.n; i++) {
            tt[i] = t[i];
            tt[i].data = m.t[i].f32 ? (void *)(out + m.off[i]) : (void *)(bf + m.off[i]);
        }
        CHECK_EQ_INT(wsync_subscriber_open(&mem, tt, m.n, &o, &su, &err), WSYNC_OK);
        for (s = 0; s <= 6 && pub && su; s++) {
            wsync_sync_stats ss;
            wsync_publish_stats ps;
            f32_input(&m, REF(refs, &m, s), in, t, exp);
            CHECK_EQ_INT(wsync_publish(pub, s, t, m.n, &ps, &err), WSYNC_OK);
            CHECK_EQ_U64(ps.state, my_state(t, m.n));
            CHECK_EQ_INT(wsync_subscriber_sync(su, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
            for (i = 0; i < m.n; i++)
                CHECK_MSG(memcmp(tt[i].data, t[i].data, (size_t)t[i].nbytes) == 0, "step %llu tensor %s",
                          (unsigned long long)s, t[i].name);
        }
        if (su) wsync_subscriber_close(su);
        free(bf);
    }
    if (pub) wsync_publisher_close(pub);
    wsync_store_close(&mem);
    TEST_END();
    free(refs);
    free(exp);
    free(in);
    free(out);
}

/* ======================================================================
   2. Publisher continuity
   ====================================================================== */

static void test_continuity(void)
{
    sm_model m = sm_model_make(g_small_defs, sizeof g_small_defs / sizeof g_small_defs[0]);
    uint16_t *refs = gen_refs(&m, 40);
    wsync_store mem;
    wsync_error err;
    wsync_chain_options o = chain_opts(NULL, WSYNC_ENCODING_PACKED, 7, 0);
    wsync_publisher *pub = NULL;
    wsync_tensor t[SM_MAXT];
    wsync_publish_stats ps;
    wsync_chain_info info;
    sm_sub fol, u;
    uint64_t s, head = 0;
    memset(&info, 0, sizeof info);
    if (wsync_store_mem_open(NULL, &mem, &err) != WSYNC_OK) return;

    TEST_BEGIN("continuity: a reopened publisher continues with a delta, not an anchor");
    CHECK_EQ_INT(wsync_publisher_open(&mem, &o, &pub, &err), WSYNC_OK);
    sm_sub_open(&fol, &mem, &m, &o, 0);
    for (s = 0; s <= 17 && pub; s++) {
        sm_tensors(&m, REF(refs, &m, s), t);
        CHECK_EQ_INT(wsync_publish(pub, s, t, m.n, &ps, &err), WSYNC_OK);
    }
    if (pub) wsync_publisher_close(pub);
    pub = NULL;
    if (fol.s) {
        wsync_sync_stats ss;
        CHECK_EQ_INT(wsync_subscriber_sync(fol.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK_EQ_U64(sm_sub_step(&fol), 17);
    }
    CHECK_EQ_INT(wsync_publisher_open(&mem, &o, &pub, &err), WSYNC_OK);
    CHECK(pub && wsync_publisher_head(pub, &head) && head == 17);
    for (s = 18; s <= 30 && pub; s++) {
        wsync_sync_stats ss;
        sm_tensors(&m, REF(refs, &m, s), t);
        memset(&ps, 0, sizeof ps);
        CHECK_EQ_INT(wsync_publish(pub, s, t, m.n, &ps, &err), WSYNC_OK);
        if (s == 18) {
            CHECK_MSG(ps.wrote_delta && !ps.wrote_anchor, "after reopen: delta %d anchor %d", ps.wrote_delta,
                      ps.wrote_anchor);
            CHECK_EQ_U64(ps.base_step, 17);
            CHECK_EQ_U64(ps.changed, count_diff(REF(refs, &m, 17), REF(refs, &m, 18), m.total));
        }
        CHECK_EQ_INT(ps.wrote_anchor, s == 21 || s == 28);
        if (fol.s) {
            CHECK_EQ_INT(wsync_subscriber_sync(fol.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
            CHECK(memcmp(fol.img, REF(refs, &m, s), m.total * 2) == 0);
            if (ps.wrote_delta) CHECK(ss.deltas == 1 && ss.anchors == 0);
        }
    }
    TEST_END();

    TEST_BEGIN("continuity: the chain replays bit-exact to every retained step");
    if (wsync_chain_read(&mem, &o, &info, &err) == WSYNC_OK) {
        uint64_t t2;
        CHECK_EQ_U64(info.head_step, 30);
        check_info_vs_store(&mem, NULL, &info, &m, refs);
        for (t2 = 0; t2 <= 30; t2++) {
            if (sm_sub_open(&u, &mem, &m, &o, 0)) sync_expect(&u, &info, NULL, t2, refs, "replay");
            sm_sub_close(&u);
        }
    } else CHECK_MSG(0, "chain_read: %s", err.message);
    wsync_chain_info_free(&info);
    TEST_END();

    TEST_BEGIN("continuity: a step not above HEAD is refused and the store is untouched");
    {
        snapshot sn = snap_take(&mem);
        sm_tensors(&m, REF(refs, &m, 31), t);
        CHECK(pub && wsync_publish(pub, 30, t, m.n, &ps, &err) != WSYNC_OK);
        CHECK(pub && wsync_publish(pub, 29, t, m.n, &ps, &err) != WSYNC_OK);
        CHECK(pub && wsync_publish(pub, 0, t, m.n, &ps, &err) != WSYNC_OK);
        CHECK(snap_same(&mem, &sn));
        if (pub) wsync_publisher_close(pub);
        pub = NULL;
        CHECK_EQ_INT(wsync_publisher_open(&mem, &o, &pub, &err), WSYNC_OK);
        CHECK(pub && wsync_publish(pub, 30, t, m.n, &ps, &err) != WSYNC_OK);
        CHECK(pub && wsync_publish(pub, 12, t, m.n, &ps, &err) != WSYNC_OK);
        CHECK(pub && wsync_publish(pub, WSYNC_STEP_MAX + 1, t, m.n, &ps, &err) != WSYNC_OK);
        CHECK(snap_same(&mem, &sn));
        snap_free(&sn);
        /* and the publisher still works */
        CHECK(pub && wsync_publish(pub, 31, t, m.n, &ps, &err) == WSYNC_OK);
        CHECK(ps.wrote_delta && ps.base_step == 30);
    }
    TEST_END();

    TEST_BEGIN("continuity: steps may skip; the delta's base is the previous published step");
    sm_tensors(&m, REF(refs, &m, 34), t);
    CHECK(pub && wsync_publish(pub, 34, t, m.n, &ps, &err) == WSYNC_OK);
    CHECK(ps.wrote_delta && ps.base_step == 31);
    CHECK_EQ_U64(ps.changed, count_diff(REF(refs, &m, 31), REF(refs, &m, 34), m.total));
    if (fol.s) {
        wsync_sync_stats ss;
        CHECK_EQ_INT(wsync_subscriber_sync(fol.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK(memcmp(fol.img, REF(refs, &m, 34), m.total * 2) == 0);
        CHECK(ss.deltas == 2 && ss.anchors == 0); /* 31, 34 */
    }
    /* a step that was never published is not reachable */
    if (sm_sub_open(&u, &mem, &m, &o, 0)) {
        wsync_sync_stats ss;
        CHECK(wsync_subscriber_sync(u.s, 33, &ss, &err) != WSYNC_OK);
        CHECK(is_zero(u.img, m.total));
    }
    sm_sub_close(&u);
    TEST_END();

    TEST_BEGIN("continuity: a reopened publisher that cannot rebuild (delta corrupt) writes an anchor");
    if (pub) wsync_publisher_close(pub);
    pub = NULL;
    {
        char key[128];
        uint64_t size;
        uint8_t *b = obj_get(&mem, dkey(key, sizeof key, NULL, 34), &size);
        CHECK(b != NULL);
        if (b) {
            b[size / 2] ^= 0x10;
            obj_put(&mem, key, b, (size_t)size);
        }
        free(b);
    }
    CHECK_EQ_INT(wsync_publisher_open(&mem, &o, &pub, &err), WSYNC_OK);
    sm_tensors(&m, REF(refs, &m, 35), t);
    memset(&ps, 0, sizeof ps);
    CHECK(pub && wsync_publish(pub, 35, t, m.n, &ps, &err) == WSYNC_OK);
    CHECK_MSG(ps.wrote_anchor, "wrote_anchor %d wrote_delta %d", ps.wrote_anchor, ps.wrote_delta);
    if (sm_sub_open(&u, &mem, &m, &o, 0)) {
        wsync_sync_stats ss;
        CHECK_EQ_INT(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK(memcmp(u.img, REF(refs, &m, 35), m.total * 2) == 0);
    }
    sm_sub_close(&u);
    if (fol.s) { /* at 34, good weights: it reaches 35 (through the anchor) */
        wsync_sync_stats ss;
        CHECK_EQ_INT(wsync_subscriber_sync(fol.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK(memcmp(fol.img, REF(refs, &m, 35), m.total * 2) == 0);
    }
    TEST_END();

    TEST_BEGIN("continuity: a change of tensors forces an anchor");
    {
        sm_model g = sm_model_make(g_grown_defs, sizeof g_grown_defs / sizeof g_grown_defs[0]);
        uint16_t *img = (uint16_t *)malloc(g.total * 2);
        gen_image(&g, 0, 36, img);
        sm_tensors(&g, img, t);
        memset(&ps, 0, sizeof ps);
        CHECK(pub && wsync_publish(pub, 36, t, g.n, &ps, &err) == WSYNC_OK);
        CHECK(ps.wrote_anchor && !ps.wrote_delta);
        if (sm_sub_open(&u, &mem, &g, &o, 1)) {
            wsync_sync_stats ss;
            CHECK_EQ_INT(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
            CHECK(memcmp(u.img, img, g.total * 2) == 0);
            CHECK(ss.anchors == 1 && ss.deltas == 0);
        }
        sm_sub_close(&u);
        /* and the next step is a delta again */
        gen_advance(&g, img, 0, 37);
        CHECK(pub && wsync_publish(pub, 37, t, g.n, &ps, &err) == WSYNC_OK);
        CHECK(ps.wrote_delta && !ps.wrote_anchor);
        free(img);
    }
    TEST_END();

    sm_sub_close(&fol);
    if (pub) wsync_publisher_close(pub);
    wsync_store_close(&mem);
    free(refs);
}

/* ======================================================================
   3. Corruption: deltas, anchors, HEAD
   ====================================================================== */

/* Rewrites an object: kinds 0..3 flip a bit (8-byte length, JSON header,
   data middle, last byte), 4..6 truncate (L-1, L/2, 0), 7 appends a byte;
   8 and 9 edit the file in place in a directory store (flip, truncate). */
#define N_CORRUPT 8
static const char *corrupt_name(int kind)
{
    static const char *names[] = {"flip in length", "flip in JSON header", "flip in data", "flip in last byte",
                                  "truncate by 1", "truncate to half", "truncate to 0", "one byte appended",
                                  "in-place flip in the file", "file truncated in place"};
    return names[kind];
}

static int corrupt(const wsync_store *st, const char *dir_root, const char *key, const uint8_t *orig, uint64_t size,
                   int kind)
{
    uint8_t *b = (uint8_t *)malloc((size_t)size + 1);
    size_t len = (size_t)size;
    int ok;
    memcpy(b, orig, (size_t)size);
    switch (kind) {
    case 0: b[3] ^= 0x01; break;
    case 1: b[20] ^= 0x04; break;
    case 2: b[size / 2] ^= 0x40; break;
    case 3: b[size - 1] ^= 0x80; break;
    case 4: len = (size_t)size - 1; break;
    case 5: len = (size_t)size / 2; break;
    case 6: len = 0; break;
    case 7: b[size] = 0; len = (size_t)size + 1; break;
    default: break;
    }
    if (kind >= 8) {
        char path[600];
        FILE *f;
        free(b);
        snprintf(path, sizeof path, "%s/%s", dir_root, key);
        if (kind == 8) {
            int c;
            f = fopen(path, "r+b");
            if (!f) return 0;
            fseek(f, (long)(size / 3), SEEK_SET);
            c = fgetc(f);
            fseek(f, (long)(size / 3), SEEK_SET);
            fputc(c ^ 0x02, f);
            fclose(f);
            return 1;
        }
        return truncate(path, (off_t)(size * 2 / 3)) == 0;
    }
    ok = obj_put(st, key, b, len);
    free(b);
    return ok;
}

typedef struct corr_env {
    const char *label;
    wsync_store *st;
    const char *prefix;
    const char *dir_root; /* directory store: its root, for in-place edits */
    sm_model m;
    uint16_t *refs;
    wsync_chain_options o;
    wsync_chain_info info;
} corr_env;

static int restore(corr_env *e, const char *key, const uint8_t *orig, uint64_t size)
{
    return obj_put(e->st, key, orig, (size_t)size);
}

/* Sync `u` to `to` where `bad` marks corrupted entries: success along a
   route around them, or failure at a published step (bit-exact), never a
   mixture; the error names `bad_key`. */
static void expect_route(corr_env *e, sm_sub *u, const int *bad, uint64_t to, const char *bad_key, const char *what)
{
    wsync_sync_stats ss;
    wsync_error err;
    uint64_t from = sm_sub_step(u), at;
    plan p = plan_path(&e->info, bad, from, to), clean = plan_path(&e->info, NULL, from, to);
    wsync_result r;
    memset(&ss, 0, sizeof ss);
    memset(&err, 0, sizeof err);
    r = wsync_subscriber_sync(u->s, to, &ss, &err);
    at = sm_sub_step(u);
    if (p.ok) {
        CHECK_MSG(r == WSYNC_OK, "%s: a route around exists: %s: %s", what, wsync_result_name(r), err.message);
        CHECK_EQ_U64(at, to);
        CHECK_MSG(at == to && memcmp(u->img, REF(e->refs, &e->m, to), e->m.total * 2) == 0, "%s: not bit-exact",
                  what);
        /* it must have met the bad object if the clean route uses it */
        if (clean.bytes < p.bytes)
            CHECK_MSG(ss.rejected >= 1, "%s: rejected %u (path %s)", what, ss.rejected, ss.path);
    } else {
        CHECK_MSG(r != WSYNC_OK, "%s: succeeded without a route", what);
        CHECK_MSG(strstr(err.message, bad_key) != NULL, "%s: message does not name %s: \"%s\"", what, bad_key,
                  err.message);
        if (at == NO_STEP) {
            CHECK_MSG(from == NO_STEP && is_zero(u->img, e->m.total), "%s: no step but targets written", what);
        } else {
            CHECK_MSG(at <= e->info.head_step &&
                          memcmp(u->img, REF(e->refs, &e->m, at), e->m.total * 2) == 0,
                      "%s: stopped at %llu, targets not that step", what, (unsigned long long)at);
            CHECK_MSG(from == NO_STEP || (at >= from && at < to), "%s: stopped at %llu (from %llu to %llu)", what,
                      (unsigned long long)at, (unsigned long long)from, (unsigned long long)to);
        }
    }
}

static void corruption_suite(corr_env *e, int with_inplace)
{
    wsync_error err;
    char name[200], key[256], bad_key[64];
    int bad[MAXNODES];
    uint64_t dsize = 0, asize = 0, hsize = 0;
    uint8_t *dorig, *aorig, *horig;
    int kind, di, ai;
    sm_sub u;
    const uint64_t D = 41, A = 49, T = 45;
    int kinds_n = with_inplace ? 10 : N_CORRUPT;

#define NAME(what) (snprintf(name, sizeof name, "%s: %s", e->label, what), name)
    di = find_entry(&e->info, WSYNC_CHAIN_DELTA, D);
    ai = find_entry(&e->info, WSYNC_CHAIN_ANCHOR, A);
    dorig = obj_get(e->st, dkey(key, sizeof key, e->prefix, D), &dsize);
    aorig = obj_get(e->st, akey(key, sizeof key, e->prefix, A), &asize);
    horig = obj_get(e->st, pkey(key, sizeof key, e->prefix, "HEAD"), &hsize);
    if (di < 0 || ai < 0 || !dorig || !aorig || !horig || find_entry(&e->info, WSYNC_CHAIN_ANCHOR, 42) < 0) {
        TEST_BEGIN(NAME("corruption setup"));
        CHECK_MSG(0, "delta %llu / anchors 42, %llu / HEAD missing", (unsigned long long)D, (unsigned long long)A);
        TEST_END();
        goto out;
    }

    TEST_BEGIN(NAME("a corrupt delta: routed around through the next anchor, else refused at the last good step"));
    snprintf(bad_key, sizeof bad_key, "deltas/step_%06llu", (unsigned long long)D);
    for (kind = 0; kind < kinds_n; kind++) {
        char what[160];
        memset(bad, 0, sizeof bad);
        bad[di] = 1;
        snprintf(what, sizeof what, "delta %llu, %s", (unsigned long long)D, corrupt_name(kind));
        CHECK(corrupt(e->st, e->dir_root, dkey(key, sizeof key, e->prefix, D), dorig, dsize, kind));
        if (sm_sub_open(&u, e->st, &e->m, &e->o, kind & 1)) {
            /* 40 -> 45: anchor 42 + deltas 43..45 */
            sub_set(&u, REF(e->refs, &e->m, 40), 40);
            expect_route(e, &u, bad, T, bad_key, what);
            CHECK_EQ_U64(sm_sub_step(&u), T);
            /* 40 -> 41: no route; stays at 40 */
            sub_set(&u, REF(e->refs, &e->m, 40), 40);
            expect_route(e, &u, bad, D, bad_key, what);
            CHECK_EQ_U64(sm_sub_step(&u), 40);
            CHECK(memcmp(u.img, REF(e->refs, &e->m, 40), e->m.total * 2) == 0);
        }
        sm_sub_close(&u);
        if (sm_sub_open(&u, e->st, &e->m, &e->o, 0)) /* nothing -> 41: anchor 35, deltas 36..41 */
            expect_route(e, &u, bad, D, bad_key, what);
        sm_sub_close(&u);
        CHECK(restore(e, dkey(key, sizeof key, e->prefix, D), dorig, dsize));
    }
    {
        /* the error's text, once, for the record */
        wsync_sync_stats ss;
        CHECK(corrupt(e->st, e->dir_root, dkey(key, sizeof key, e->prefix, D), dorig, dsize, 2));
        if (sm_sub_open(&u, e->st, &e->m, &e->o, 0)) {
            sub_set(&u, REF(e->refs, &e->m, 40), 40);
            CHECK(wsync_subscriber_sync(u.s, D, &ss, &err) != WSYNC_OK);
            if (VERBOSE) printf("  note: %s: %s\n", wsync_result_name(err.code), err.message);
        }
        sm_sub_close(&u);
        CHECK(restore(e, dkey(key, sizeof key, e->prefix, D), dorig, dsize));
    }
    TEST_END();

    TEST_BEGIN(NAME("a corrupt delta with no anchor after it: stops at a published step, bit-exact"));
    {
        int d44 = find_entry(&e->info, WSYNC_CHAIN_DELTA, 44);
        uint64_t size44 = 0;
        uint8_t *o44 = obj_get(e->st, dkey(key, sizeof key, e->prefix, 44), &size44);
        CHECK(d44 >= 0 && o44);
        if (d44 >= 0 && o44) {
            memset(bad, 0, sizeof bad);
            bad[d44] = 1;
            CHECK(corrupt(e->st, e->dir_root, key, o44, size44, 2));
            if (sm_sub_open(&u, e->st, &e->m, &e->o, 0))
                expect_route(e, &u, bad, T, "deltas/step_000044", "nothing -> 45");
            sm_sub_close(&u);
            if (sm_sub_open(&u, e->st, &e->m, &e->o, 0)) {
                sub_set(&u, REF(e->refs, &e->m, 42), 42);
                expect_route(e, &u, bad, T, "deltas/step_000044", "42 -> 45");
                if (VERBOSE) printf("  note: 42 -> 45 with delta 44 bad stopped at %llu\n",
                                    (unsigned long long)sm_sub_step(&u));
            }
            sm_sub_close(&u);
            CHECK(restore(e, dkey(key, sizeof key, e->prefix, 44), o44, size44));
        }
        free(o44);
    }
    TEST_END();

    TEST_BEGIN(NAME("a corrupt anchor: routed around through an older anchor"));
    snprintf(bad_key, sizeof bad_key, "anchors/step_%06llu", (unsigned long long)A);
    for (kind = 0; kind < kinds_n; kind++) {
        char what[160];
        memset(bad, 0, sizeof bad);
        bad[ai] = 1;
        snprintf(what, sizeof what, "anchor %llu, %s", (unsigned long long)A, corrupt_name(kind));
        CHECK(corrupt(e->st, e->dir_root, akey(key, sizeof key, e->prefix, A), aorig, asize, kind));
        if (sm_sub_open(&u, e->st, &e->m, &e->o, 0)) {
            expect_route(e, &u, bad, e->info.head_step, bad_key, what);
            CHECK_MSG(plan_path(&e->info, bad, NO_STEP, e->info.head_step).ok, "%s", "test setup: no route around");
        }
        sm_sub_close(&u);
        if (sm_sub_open(&u, e->st, &e->m, &e->o, 0)) expect_route(e, &u, bad, A, bad_key, what);
        sm_sub_close(&u);
        CHECK(restore(e, akey(key, sizeof key, e->prefix, A), aorig, asize));
    }
    TEST_END();

    TEST_BEGIN(NAME("every anchor corrupt: a subscriber without a step stays empty; one with a step uses deltas"));
    {
        size_t i, na = 0;
        uint8_t *origs[64];
        uint64_t sizes[64];
        uint64_t steps[64];
        memset(bad, 0, sizeof bad);
        for (i = 0; i < e->info.n_entries && na < 64; i++)
            if (e->info.entries[i].kind == WSYNC_CHAIN_ANCHOR) {
                steps[na] = e->info.entries[i].step;
                origs[na] = obj_get(e->st, akey(key, sizeof key, e->prefix, steps[na]), &sizes[na]);
                if (origs[na]) CHECK(corrupt(e->st, e->dir_root, key, origs[na], sizes[na], (int)(na % 7)));
                bad[i] = 1;
                na++;
            }
        if (sm_sub_open(&u, e->st, &e->m, &e->o, 0)) expect_route(e, &u, bad, e->info.head_step,
                                                            "anchors/step_", "nothing, all anchors bad");
        sm_sub_close(&u);
        if (sm_sub_open(&u, e->st, &e->m, &e->o, 0)) {
            sub_set(&u, REF(e->refs, &e->m, 43), 43);
            expect_route(e, &u, bad, e->info.head_step, "anchors/step_", "43 -> head, all anchors bad");
        }
        sm_sub_close(&u);
        /* two newest anchors bad: through the third */
        for (i = 0; i < na; i++) CHECK(restore(e, akey(key, sizeof key, e->prefix, steps[i]), origs[i], sizes[i]));
        memset(bad, 0, sizeof bad);
        if (na >= 3) {
            bad[find_entry(&e->info, WSYNC_CHAIN_ANCHOR, steps[na - 1])] = 1;
            bad[find_entry(&e->info, WSYNC_CHAIN_ANCHOR, steps[na - 2])] = 1;
            CHECK(corrupt(e->st, e->dir_root, akey(key, sizeof key, e->prefix, steps[na - 1]), origs[na - 1],
                          sizes[na - 1], 6));
            CHECK(corrupt(e->st, e->dir_root, akey(key, sizeof key, e->prefix, steps[na - 2]), origs[na - 2],
                          sizes[na - 2], 1));
            if (sm_sub_open(&u, e->st, &e->m, &e->o, 0))
                expect_route(e, &u, bad, e->info.head_step, "anchors/step_", "two newest anchors bad");
            sm_sub_close(&u);
            CHECK(restore(e, akey(key, sizeof key, e->prefix, steps[na - 1]), origs[na - 1], sizes[na - 1]));
            CHECK(restore(e, akey(key, sizeof key, e->prefix, steps[na - 2]), origs[na - 2], sizes[na - 2]));
        }
        for (i = 0; i < na; i++) free(origs[i]);
    }
    TEST_END();

    TEST_BEGIN(NAME("a corrupt HEAD is BAD_HEAD and leaves the weights alone"));
    {
        int variants[] = {0, 1, 2, 3, 4, 5, 6, 7, 100, 101};
        size_t v;
        for (v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            int kd = variants[v];
            char what[160];
            wsync_chain_info ci;
            wsync_sync_stats ss;
            uint8_t tail = horig[hsize - 1];
            /* dropping trailing whitespace may leave an equivalent text */
            if (kd == 4 && (tail == ' ' || tail == '\n' || tail == '\r' || tail == '\t')) continue;
            if (kd >= 100) { /* flips at a quarter and three quarters */
                uint8_t *b = (uint8_t *)malloc((size_t)hsize);
                memcpy(b, horig, (size_t)hsize);
                b[hsize * (kd == 100 ? 1 : 3) / 4] ^= 0x01;
                obj_put(e->st, pkey(key, sizeof key, e->prefix, "HEAD"), b, (size_t)hsize);
                free(b);
                snprintf(what, sizeof what, "HEAD, flip at %d/4", kd == 100 ? 1 : 3);
            } else {
                CHECK(corrupt(e->st, e->dir_root, pkey(key, sizeof key, e->prefix, "HEAD"), horig, hsize, kd));
                snprintf(what, sizeof what, "HEAD, %s", corrupt_name(kd));
            }
            memset(&ci, 0, sizeof ci);
            CHECK_MSG(wsync_chain_read(e->st, &e->o, &ci, &err) == WSYNC_ERR_BAD_HEAD, "%s: %s", what,
                      wsync_result_name(err.code));
            wsync_chain_info_free(&ci);
            if (sm_sub_open(&u, e->st, &e->m, &e->o, 1)) {
                sub_set(&u, REF(e->refs, &e->m, 40), 40);
                CHECK_MSG(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err) == WSYNC_ERR_BAD_HEAD, "%s: %s",
                          what, wsync_result_name(err.code));
                CHECK(sm_sub_step(&u) == 40 && memcmp(u.img, REF(e->refs, &e->m, 40), e->m.total * 2) == 0);
                CHECK_MSG(wsync_subscriber_sync(u.s, 44, &ss, &err) == WSYNC_ERR_BAD_HEAD, "%s: to 44: %s", what,
                          wsync_result_name(err.code));
                CHECK(sm_sub_step(&u) == 40 && memcmp(u.img, REF(e->refs, &e->m, 40), e->m.total * 2) == 0);
            }
            sm_sub_close(&u);
            if (sm_sub_open(&u, e->st, &e->m, &e->o, 0)) {
                CHECK_MSG(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err) == WSYNC_ERR_BAD_HEAD, "%s", what);
                CHECK(sm_sub_step(&u) == NO_STEP && is_zero(u.img, e->m.total));
            }
            sm_sub_close(&u);
            CHECK(restore(e, pkey(key, sizeof key, e->prefix, "HEAD"), horig, hsize));
        }
    }
    TEST_END();

    /* A publisher refuses a bad HEAD (it would delete what it cannot prove
       its own); WSYNC_CHAIN_NEW_CHAIN starts a new chain with an anchor,
       which must be a valid chain that subscribers follow bit-exact. */
    TEST_BEGIN(NAME("a publisher refuses a corrupt HEAD; a new chain there is valid and subscribers follow it"));
    {
        int variants[] = {2, 5};
        size_t v;
        uint64_t h = e->info.head_step;
        uint16_t *img = (uint16_t *)malloc(e->m.total * 2);
        for (v = 0; v < 2; v++) {
            wsync_publisher *p = NULL;
            wsync_publish_stats ps;
            wsync_tensor t[SM_MAXT];
            snapshot sn = snap_take(e->st), bad;
            wsync_chain_info ci;
            wsync_chain_options no = e->o;
            memcpy(img, REF(e->refs, &e->m, h), e->m.total * 2);
            gen_advance(&e->m, img, 77, h + 1);
            CHECK(corrupt(e->st, e->dir_root, pkey(key, sizeof key, e->prefix, "HEAD"), horig, hsize, variants[v]));
            sm_tensors(&e->m, img, t);
            memset(&ps, 0, sizeof ps);
            bad = snap_take(e->st);
            CHECK_EQ_INT(wsync_publisher_open(e->st, &e->o, &p, &err), WSYNC_ERR_BAD_HEAD);
            CHECK_MSG(snap_same(e->st, &bad), "%s", "a refused open changed the store");
            snap_free(&bad);
            no.flags |= WSYNC_CHAIN_NEW_CHAIN;
            if (wsync_publisher_open(e->st, &no, &p, &err) == WSYNC_OK) {
                if (wsync_publish(p, h + 1, t, e->m.n, &ps, &err) == WSYNC_OK) {
                    CHECK(ps.wrote_anchor);
                    memset(&ci, 0, sizeof ci);
                    CHECK_EQ_INT(wsync_chain_read(e->st, &e->o, &ci, &err), WSYNC_OK);
                    CHECK_EQ_U64(ci.head_step, h + 1);
                    wsync_chain_info_free(&ci);
                    if (sm_sub_open(&u, e->st, &e->m, &e->o, 0)) {
                        wsync_sync_stats ss;
                        sub_set(&u, REF(e->refs, &e->m, 40), 40);
                        CHECK_EQ_INT(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
                        CHECK(sm_sub_step(&u) == h + 1 && memcmp(u.img, img, e->m.total * 2) == 0);
                    }
                    sm_sub_close(&u);
                    if (VERBOSE && v == 0) printf("  note: a new chain over a bad HEAD wrote anchor %llu\n",
                                                  (unsigned long long)(h + 1));
                } else CHECK_MSG(0, "new chain: publish %llu: %s", (unsigned long long)(h + 1), err.message);
                wsync_publisher_close(p);
            } else CHECK_MSG(0, "new chain: open: %s", err.message);
            /* put the old chain back as it was */
            snap_restore(e->st, &sn);
            snap_free(&sn);
            CHECK(restore(e, pkey(key, sizeof key, e->prefix, "HEAD"), horig, hsize));
        }
        free(img);
    }
    TEST_END();

    TEST_BEGIN(NAME("after repairs everything syncs again"));
    if (sm_sub_open(&u, e->st, &e->m, &e->o, 0))
        sync_expect(&u, &e->info, NULL, WSYNC_STEP_LATEST, e->refs, "repaired");
    sm_sub_close(&u);
    TEST_END();
out:
    free(dorig);
    free(aorig);
    free(horig);
#undef NAME
}

static void corr_build(corr_env *e, uint64_t last)
{
    wsync_publisher *p = NULL;
    wsync_error err;
    uint64_t s;
    e->m = sm_model_make(g_small_defs, sizeof g_small_defs / sizeof g_small_defs[0]);
    e->refs = gen_refs(&e->m, last);
    memset(&e->info, 0, sizeof e->info);
    if (wsync_publisher_open(e->st, &e->o, &p, &err) != WSYNC_OK) return;
    for (s = 0; s <= last; s++) {
        wsync_tensor t[SM_MAXT];
        wsync_publish_stats ps;
        sm_tensors(&e->m, REF(e->refs, &e->m, s), t);
        if (wsync_publish(p, s, t, e->m.n, &ps, &err) != WSYNC_OK) break;
    }
    wsync_publisher_close(p);
    if (wsync_chain_read(e->st, &e->o, &e->info, &err) != WSYNC_OK) memset(&e->info, 0, sizeof e->info);
}

/* --- HEAD's text --- */

/* First occurrence of `from` replaced by `to`; NULL when absent. */
static char *str_replace1(const char *s, const char *from, const char *to)
{
    const char *at = strstr(s, from);
    size_t a, fl = strlen(from), tl = strlen(to), sl = strlen(s);
    char *o;
    if (!at) return NULL;
    a = (size_t)(at - s);
    o = (char *)malloc(sl - fl + tl + 1);
    memcpy(o, s, a);
    memcpy(o + a, to, tl);
    memcpy(o + a + tl, at + fl, sl - a - fl + 1);
    return o;
}

/* HEAD ends with "check": the digest of every byte before that key (as the
   text from wsync_chain_head_format shows); seal an edited body so that
   only the rules, not the digest, can refuse it. */
static char *head_seal(const char *body, const char *tail)
{
    size_t bl = strlen(body);
    char *o = (char *)malloc(bl + 64 + strlen(tail));
    memcpy(o, body, bl);
    snprintf(o + bl, 64 + strlen(tail), "\"check\":\"%016llx\"%s", (unsigned long long)wsync_digest(body, bl), tail);
    return o;
}

/* The text of the entry {"step":S,...} (up to its '}'), or "" */
static void entry_text(const char *text, uint64_t step, int delta, char *out, size_t cap)
{
    char pat[64];
    const char *a, *b;
    snprintf(pat, sizeof pat, delta ? "{\"step\":%llu,\"base\"" : "{\"step\":%llu,\"bytes\"",
             (unsigned long long)step);
    out[0] = 0;
    a = strstr(text, pat);
    if (!a) return;
    b = strchr(a, '}');
    if (!b || (size_t)(b - a + 2) > cap) return;
    memcpy(out, a, (size_t)(b - a + 1));
    out[b - a + 1] = 0;
}

static void head_raw_tests(const char *text, size_t len, uint64_t head, uint64_t anchor)
{
    char *body, *found;
    size_t cut;
    char top[96], l41[200], l42[200], a0[200], tmp[600], tmp2[600], deep[200];
    wsync_chain_info p;
    wsync_error err;
    size_t i;
    struct edit {
        const char *what;
        const char *from, *to;
        int expect; /* 0 refused, 1 accepted, 2 either (no crash) */
    } ed[64];
    int ne = 0;
    char vals[40][512];
    int nv = 0;
#define VAL(...) (snprintf(vals[nv], sizeof vals[nv], __VA_ARGS__), vals[nv++])
#define EDIT(w, f, t, x) (ed[ne].what = (w), ed[ne].from = (f), ed[ne].to = (t), ed[ne].expect = (x), ne++)

    TEST_BEGIN("HEAD text: sealed edits; the parser's rules refuse malformed fields");
    found = strstr(text, ",\n\"check\":");
    CHECK(found != NULL);
    if (!found || len < 32) {
        TEST_END();
        return;
    }
    cut = (size_t)(found - text) + 2;
    body = (char *)malloc(cut + 1);
    memcpy(body, text, cut);
    body[cut] = 0;
    snprintf(top, sizeof top, "\"step\":%llu,\"anchor\":%llu,", (unsigned long long)head, (unsigned long long)anchor);
    entry_text(text, 41, 1, l41, sizeof l41);
    entry_text(text, 42, 1, l42, sizeof l42);
    entry_text(text, 0, 0, a0, sizeof a0);
    CHECK(l41[0] && l42[0] && a0[0]);
    memset(deep, '[', 40);
    memset(deep + 40, ']', 40);
    deep[80] = 0;

    EDIT("unchanged, resealed", top, top, 1);
    EDIT("an unknown key", "\"encoding\":", "\"comment\":\"a \\\" b\",\"encoding\":", 1);
    EDIT("an unknown key in an entry", "{\"step\":0,", "{\"x\":[1,{\"y\":null},true],\"step\":0,", 1);
    EDIT("whitespace", "\"version\":1", "\"version\" :\t1 ", 1);
    EDIT("step -1", top, VAL("\"step\":-1,\"anchor\":%llu,", (unsigned long long)anchor), 0);
    EDIT("step 52.0", top, VAL("\"step\":%llu.0,\"anchor\":%llu,", (unsigned long long)head, (unsigned long long)anchor), 0);
    EDIT("step with a leading zero", top, VAL("\"step\":0%llu,\"anchor\":%llu,", (unsigned long long)head, (unsigned long long)anchor), 0);
    EDIT("step in exponent form", top, VAL("\"step\":%llue0,\"anchor\":%llu,", (unsigned long long)head, (unsigned long long)anchor), 0);
    EDIT("step as a string", top, VAL("\"step\":\"%llu\",\"anchor\":%llu,", (unsigned long long)head, (unsigned long long)anchor), 0);
    EDIT("step 2^64", top, VAL("\"step\":18446744073709551616,\"anchor\":%llu,", (unsigned long long)anchor), 0);
    EDIT("step 2^64-1", top, VAL("\"step\":18446744073709551615,\"anchor\":%llu,", (unsigned long long)anchor), 0);
    EDIT("step 10^15", top, VAL("\"step\":1000000000000000,\"anchor\":%llu,", (unsigned long long)anchor), 0);
    EDIT("step 10^40", top, VAL("\"step\":10000000000000000000000000000000000000000,\"anchor\":%llu,", (unsigned long long)anchor), 0);
    EDIT("step empty", top, VAL("\"step\":,\"anchor\":%llu,", (unsigned long long)anchor), 0);
    EDIT("step below the newest object", top, VAL("\"step\":%llu,\"anchor\":%llu,", (unsigned long long)head - 1, (unsigned long long)anchor), 0);
    EDIT("step above the newest object", top, VAL("\"step\":%llu,\"anchor\":%llu,", (unsigned long long)head + 1, (unsigned long long)anchor), 0);
    EDIT("anchor not the newest", top, VAL("\"step\":%llu,\"anchor\":%llu,", (unsigned long long)head, (unsigned long long)anchor - 7), 0);
    EDIT("duplicate step", top, VAL("\"step\":%llu,%s", (unsigned long long)head, top), 0);
    EDIT("version 3", "\"version\":1", "\"version\":3", 0);
    EDIT("version 2 without a directory anchor", "\"version\":1", "\"version\":2", 1);
    EDIT("version 0", "\"version\":1", "\"version\":0", 0);
    EDIT("version \"1\"", "\"version\":1", "\"version\":\"1\"", 0);
    EDIT("another format", "\"wsync-chain\"", "\"wsync-chainx\"", 0);
    EDIT("missing format", "\"format\":\"wsync-chain\",", "", 0);
    EDIT("missing version", "\"version\":1,", "", 0);
    EDIT("missing step", top, VAL("\"anchor\":%llu,", (unsigned long long)anchor), 0);
    EDIT("missing anchor", top, VAL("\"step\":%llu,", (unsigned long long)head), 0);
    EDIT("missing state", "\"state\":\"", "\"stat\":\"", 0);
    EDIT("missing anchors", "\"anchors\":", "\"anchorz\":", 0);
    EDIT("missing deltas", "\"deltas\":", "\"deltaz\":", 0);
    EDIT("state in upper case", "\"state\":\"", "\"state\":\"ABCDEF0123456789\",\"x\":\"", 0);
    EDIT("state of 15 digits", "\"state\":\"", "\"state\":\"abcdef012345678\",\"x\":\"", 0);
    EDIT("an entry without bytes", "\"bytes\":", "\"bytez\":", 0);
    EDIT("a delta without base", "\"base\":", "\"basf\":", 0);
    EDIT("an anchor with a base", "{\"step\":0,\"bytes\"", "{\"step\":0,\"base\":0,\"bytes\"", 0);
    EDIT("a delta onto itself", "{\"step\":41,\"base\":40,", "{\"step\":41,\"base\":41,", 0);
    EDIT("a delta onto a later step", "{\"step\":41,\"base\":40,", "{\"step\":41,\"base\":44,", 0);
    EDIT("an entry step of 10^15", "{\"step\":41,\"base\":40,", "{\"step\":1000000000000000,\"base\":40,", 0);
    EDIT("an entry with a negative step", "{\"step\":41,", "{\"step\":-41,", 0);
    EDIT("an entry that is an array", "{\"step\":41,", "[{\"step\":41,", 0);
    EDIT("a control character in a string", "\"encoding\":", "\"comment\":\"a\tb\",\"encoding\":", 0);
    EDIT("deep nesting in an unknown key", "\"encoding\":", VAL("\"comment\":%s,\"encoding\":", deep), 2);
    EDIT("no anchors at all", "\"anchors\":[", "\"anchors\":[],\"x\":[", 2);
    if (l41[0] && l42[0]) {
        snprintf(tmp, sizeof tmp, "%s,\n%s", l41, l42);
        snprintf(tmp2, sizeof tmp2, "%s,\n%s", l42, l41);
        /* the declarations do not say whether order in the text matters */
        EDIT("two deltas out of order", tmp, tmp2, 2);
        EDIT("a delta twice", l41, VAL("%s,\n%s", l41, l41), 0);
    }

    for (i = 0; i < (size_t)ne; i++) {
        char *b2 = str_replace1(body, ed[i].from, ed[i].to), *t2;
        wsync_result r;
        if (!b2) {
            CHECK_MSG(0, "edit '%s': '%s' not found", ed[i].what, ed[i].from);
            continue;
        }
        t2 = head_seal(b2, "}\n");
        memset(&p, 0, sizeof p);
        r = wsync_chain_head_parse(t2, strlen(t2), NULL, &p, &err);
        if (ed[i].expect == 0)
            CHECK_MSG(r == WSYNC_ERR_BAD_HEAD, "%s: %s", ed[i].what, wsync_result_name(r));
        else if (ed[i].expect == 1)
            CHECK_MSG(r == WSYNC_OK, "%s: %s: %s", ed[i].what, wsync_result_name(r), err.message);
        else if (VERBOSE)
            printf("  note: HEAD with %s: %s\n", ed[i].what, r == WSYNC_OK ? "accepted" : err.message);
        if (r == WSYNC_OK) {
            size_t j;
            for (j = 1; j < p.n_entries; j++)
                CHECK(p.entries[j - 1].kind < p.entries[j].kind ||
                      (p.entries[j - 1].kind == p.entries[j].kind && p.entries[j - 1].step < p.entries[j].step));
            CHECK_EQ_U64(p.head_step, head);
            wsync_chain_info_free(&p);
        }
        free(b2);
        free(t2);
    }
    {
        /* "check" must close the object, exactly once */
        static const char *tails[] = {",\"x\":1}\n", "}\nx", "}}", ""};
        for (i = 0; i < sizeof tails / sizeof tails[0]; i++) {
            char *t2 = head_seal(body, tails[i]);
            wsync_result r = wsync_chain_head_parse(t2, strlen(t2), NULL, &p, &err);
            if (r == WSYNC_OK) wsync_chain_info_free(&p);
            CHECK_MSG(r == WSYNC_ERR_BAD_HEAD, "tail '%s': %s", tails[i], wsync_result_name(r));
            free(t2);
        }
    }
    free(body);
    TEST_END();
#undef VAL
#undef EDIT
}

static void head_text_tests(corr_env *e)
{
    wsync_error err;
    char *text = NULL, *text2 = NULL;
    size_t len = 0, len2 = 0, i, end;
    wsync_chain_info p;
    int rejected_all = 1, accepted = 0;
    char key[256];
    uint64_t hsize;
    uint8_t *horig;

    TEST_BEGIN("HEAD text: format(chain_read()) is the HEAD the publisher wrote");
    memset(&p, 0, sizeof p);
    CHECK_EQ_INT(wsync_chain_head_format(&e->info, &text, &len, &err), WSYNC_OK);
    horig = obj_get(e->st, pkey(key, sizeof key, e->prefix, "HEAD"), &hsize);
    CHECK(text && horig && hsize == len && memcmp(text, horig, len) == 0);
    TEST_END();

    TEST_BEGIN("HEAD text: format and parse round-trip");
    if (text && wsync_chain_head_parse(text, len, NULL, &p, &err) == WSYNC_OK) {
        CHECK_EQ_INT(p.has_head, 1);
        CHECK_EQ_U64(p.head_step, e->info.head_step);
        CHECK_EQ_U64(p.anchor_step, e->info.anchor_step);
        CHECK_EQ_U64(p.head_state, e->info.head_state);
        CHECK_EQ_INT(p.encoding, e->info.encoding);
        CHECK_EQ_INT(p.n_entries, e->info.n_entries);
        for (i = 0; i < p.n_entries && i < e->info.n_entries; i++) {
            const wsync_chain_entry *a = &p.entries[i], *b = &e->info.entries[i];
            CHECK(a->kind == b->kind && a->step == b->step && a->base == b->base && a->bytes == b->bytes &&
                  a->has_digests == b->has_digests && a->digest == b->digest && a->state == b->state &&
                  strcmp(a->key, b->key) == 0);
        }
        CHECK_EQ_INT(wsync_chain_head_format(&p, &text2, &len2, &err), WSYNC_OK);
        CHECK(text2 && len2 == len && memcmp(text, text2, len) == 0);
        free(text2);
        wsync_chain_info_free(&p);
    } else CHECK_MSG(0, "parse of formatted HEAD: %s", err.message);
    free(horig);
    TEST_END();
    if (!text) return;

    TEST_BEGIN("HEAD text: every truncation is refused");
    end = len;
    while (end > 0 && (text[end - 1] == ' ' || text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == '\t'))
        end--;
    for (i = 0; i < len; i++) {
        wsync_result r;
        if (i > 600 && i + 600 < len && i % 5 != 0) continue;
        r = wsync_chain_head_parse(text, i, NULL, &p, &err);
        if (r == WSYNC_OK) {
            wsync_chain_info_free(&p);
            if (i < end) {
                rejected_all = 0;
                CHECK_MSG(0, "truncated to %zu of %zu bytes accepted", i, len);
            } else accepted++;
        } else {
            CHECK_MSG(r == WSYNC_ERR_BAD_HEAD, "truncated to %zu: %s", i, wsync_result_name(r));
            CHECK(err.message[0] != 0);
        }
    }
    CHECK(rejected_all);
    if (VERBOSE && accepted) printf("  note: %d truncations inside trailing whitespace accepted\n", accepted);
    TEST_END();

    TEST_BEGIN("HEAD text: a flipped bit anywhere is refused");
    {
        char *b = (char *)malloc(len);
        int bits[] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x40, 0x80};
        for (i = 0; i < len; i++) {
            wsync_result r;
            memcpy(b, text, len);
            b[i] = (char)(b[i] ^ bits[i % 7]);
            r = wsync_chain_head_parse(b, len, NULL, &p, &err);
            if (r == WSYNC_OK) wsync_chain_info_free(&p);
            CHECK_MSG(r == WSYNC_ERR_BAD_HEAD, "flip 0x%02x at byte %zu ('%c'): %s", bits[i % 7], i, text[i],
                      wsync_result_name(r));
            if (i % 13 == 0) { /* and through the store */
                wsync_chain_info ci;
                obj_put(e->st, pkey(key, sizeof key, e->prefix, "HEAD"), b, len);
                memset(&ci, 0, sizeof ci);
                CHECK_EQ_INT(wsync_chain_read(e->st, &e->o, &ci, &err), WSYNC_ERR_BAD_HEAD);
                wsync_chain_info_free(&ci);
            }
        }
        obj_put(e->st, pkey(key, sizeof key, e->prefix, "HEAD"), text, len);
        free(b);
    }
    TEST_END();

    TEST_BEGIN("HEAD text: junk is refused without crashing");
    {
        static const char *junk[] = {"", "{}", "[]", "null", "{\"step\": 1}", "\xff\xfe", "{\"a\":", "{{{{{{{{{{{{",
                                     "{\"head_step\": 18446744073709551616}", "0"};
        for (i = 0; i < sizeof junk / sizeof junk[0]; i++) {
            wsync_result r = wsync_chain_head_parse(junk[i], strlen(junk[i]), NULL, &p, &err);
            if (r == WSYNC_OK) wsync_chain_info_free(&p);
            CHECK_MSG(r == WSYNC_ERR_BAD_HEAD, "junk %zu: %s", i, wsync_result_name(r));
        }
        /* the text with a NUL inside, and doubled */
        {
            char *b = (char *)malloc(2 * len);
            wsync_result r;
            memcpy(b, text, len);
            memcpy(b + len, text, len);
            r = wsync_chain_head_parse(b, 2 * len, NULL, &p, &err);
            if (r == WSYNC_OK) wsync_chain_info_free(&p);
            CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
            b[len / 2] = 0;
            r = wsync_chain_head_parse(b, len, NULL, &p, &err);
            if (r == WSYNC_OK) wsync_chain_info_free(&p);
            CHECK_EQ_INT(r, WSYNC_ERR_BAD_HEAD);
            free(b);
        }
    }
    TEST_END();

    head_raw_tests(text, len, e->info.head_step, e->info.anchor_step);

    TEST_BEGIN("HEAD rules: an info that breaks them is refused by format or by parse");
    {
        size_t n = e->info.n_entries, na = 0;
        int mut;
        for (i = 0; i < n; i++) na += e->info.entries[i].kind == WSYNC_CHAIN_ANCHOR;
        for (mut = 0; mut < 13; mut++) {
            wsync_chain_info bad = e->info;
            wsync_chain_entry *en = (wsync_chain_entry *)malloc((n + 1) * sizeof *en);
            char *t = NULL;
            size_t tl = 0;
            wsync_result r;
            memcpy(en, e->info.entries, n * sizeof *en);
            bad.entries = en;
            switch (mut) {
            case 0: { /* two deltas swapped */
                wsync_chain_entry x = en[na];
                en[na] = en[na + 1];
                en[na + 1] = x;
                break;
            }
            case 1: en[na + 2].base = en[na + 2].step; break;      /* a delta onto itself */
            case 2: en[na + 2].base = en[na + 2].step + 1; break;  /* base after step */
            case 3: bad.head_step = en[n - 1].step - 1; break;     /* an object newer than HEAD */
            case 4: bad.head_step = WSYNC_STEP_MAX + 1; en[n - 1].step = WSYNC_STEP_MAX + 1; break;
            case 5: en[na + 1] = en[na]; break;                    /* duplicate entry */
            case 6: /* key disagrees with the step (HEAD holds no keys: ignored) */
                snprintf(en[na + 3].key, sizeof en[na + 3].key, "deltas/step_%06llu.safetensors",
                         (unsigned long long)(en[na + 3].step + 1));
                break;
            case 7: en[0].base = en[0].step + 1; break;            /* anchor base != step */
            case 8: en[1].kind = (wsync_chain_kind)3; break;       /* no such kind */
            case 9: snprintf(en[1].key, sizeof en[1].key, "anchors/../HEAD"); break;
            case 10: { /* an anchor after the deltas */
                wsync_chain_entry x = en[0];
                memmove(en, en + 1, (n - 1) * sizeof *en);
                en[n - 1] = x;
                break;
            }
            case 11: en[0].kind = WSYNC_CHAIN_DELTA; break;        /* a delta among the anchors, base = step */
            case 12: snprintf(en[1].key, sizeof en[1].key, "anchors/step_%06llu.bin", (unsigned long long)en[1].step);
                break;
            default: break;
            }
            r = wsync_chain_head_format(&bad, &t, &tl, &err);
            if (r == WSYNC_OK) {
                wsync_result r2 = wsync_chain_head_parse(t, tl, NULL, &p, &err);
                if (mut == 6 || mut == 9 || mut == 12) {
                    /* keys are not in HEAD's text: what comes back is the
                       canonical key of each step */
                    size_t j;
                    CHECK_MSG(r2 == WSYNC_OK, "mutation %d: %s", mut, wsync_result_name(r2));
                    for (j = 0; r2 == WSYNC_OK && j < p.n_entries; j++) {
                        char want[64];
                        snprintf(want, sizeof want, "%s/step_%06llu.safetensors",
                                 p.entries[j].kind == WSYNC_CHAIN_ANCHOR ? "anchors" : "deltas",
                                 (unsigned long long)p.entries[j].step);
                        CHECK_EQ_STR(p.entries[j].key, want);
                    }
                } else {
                    CHECK_MSG(r2 == WSYNC_ERR_BAD_HEAD, "mutation %d formatted and parsed back: %s", mut,
                              wsync_result_name(r2));
                }
                if (r2 == WSYNC_OK) wsync_chain_info_free(&p);
                free(t);
            }
            free(en);
        }
    }
    TEST_END();

    free(text);
}

static void test_corruption(void)
{
    corr_env e;
    wsync_error err;
    wsync_store mem, ds;
    wsync_store_options so;
    char root[256], droot[300];
    memset(&so, 0, sizeof so);
    so.no_fsync = 1;

    memset(&e, 0, sizeof e);
    if (wsync_store_mem_open(NULL, &mem, &err) == WSYNC_OK) {
        e.label = "corruption, memory, packed";
        e.st = &mem;
        e.o = chain_opts(NULL, WSYNC_ENCODING_PACKED, 7, 100);
        corr_build(&e, 52);
        if (e.info.n_entries) {
            corruption_suite(&e, 0);
            head_text_tests(&e);
        } else {
            TEST_BEGIN("corruption, memory: chain built");
            CHECK(0);
            TEST_END();
        }
        wsync_chain_info_free(&e.info);
        free(e.refs);
        wsync_store_close(&mem);
    }
    memset(&e, 0, sizeof e);
    if (make_tmpdir(root, sizeof root, "corrupt") && wsync_store_dir_open(root, &so, &ds, &err) == WSYNC_OK) {
        snprintf(droot, sizeof droot, "%s", root);
        e.label = "corruption, directory+prefix, trl-v1";
        e.st = &ds;
        e.prefix = "bucket";
        e.dir_root = droot;
        e.o = chain_opts("bucket", WSYNC_ENCODING_TRL_V1, 7, 100);
        corr_build(&e, 52);
        if (e.info.n_entries) corruption_suite(&e, 1);
        else {
            TEST_BEGIN("corruption, directory: chain built");
            CHECK(0);
            TEST_END();
        }
        wsync_chain_info_free(&e.info);
        free(e.refs);
        wsync_store_close(&ds);
        rm_rf(root);
    }
}

/* ======================================================================
   7. A failure in the middle of a multi-delta path
   ====================================================================== */

static void test_mid_path(wsync_encoding enc)
{
    sm_model m = sm_model_make(g_small_defs, sizeof g_small_defs / sizeof g_small_defs[0]);
    uint16_t *refs = gen_refs(&m, 12);
    wsync_store mem;
    wsync_error err;
    wsync_chain_options o = chain_opts(NULL, enc, 1000, 0);
    wsync_publisher *p = NULL;
    uint64_t s, size = 0, at;
    uint8_t *orig;
    char key[128], name[160];
    sm_sub u;
    const uint64_t k = 3;
    snprintf(name, sizeof name, "mid-path (%s): delta k+3 of k..k+5 corrupt, no anchor: a published step, bit-exact",
             wsync_encoding_name(enc));
    TEST_BEGIN(name);
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &mem, &err), WSYNC_OK);
    CHECK_EQ_INT(wsync_publisher_open(&mem, &o, &p, &err), WSYNC_OK);
    for (s = 0; s <= 12 && p; s++) {
        wsync_tensor t[SM_MAXT];
        wsync_publish_stats ps;
        sm_tensors(&m, REF(refs, &m, s), t);
        CHECK_EQ_INT(wsync_publish(p, s, t, m.n, &ps, &err), WSYNC_OK);
        CHECK_EQ_INT(ps.wrote_anchor, s == 0);
    }
    if (p) wsync_publisher_close(p);
    orig = obj_get(&mem, dkey(key, sizeof key, NULL, k + 3), &size);
    CHECK(orig != NULL);
    if (orig) {
        wsync_sync_stats ss;
        wsync_result r;
        uint8_t *b = (uint8_t *)malloc((size_t)size);
        memcpy(b, orig, (size_t)size);
        b[size - 3] ^= 0x08;
        obj_put(&mem, key, b, (size_t)size);
        free(b);
        if (sm_sub_open(&u, &mem, &m, &o, 0)) {
            sub_set(&u, REF(refs, &m, k), k);
            memset(&err, 0, sizeof err);
            r = wsync_subscriber_sync(u.s, k + 5, &ss, &err);
            at = sm_sub_step(&u);
            CHECK(r != WSYNC_OK);
            CHECK_MSG(strstr(err.message, "deltas/step_000006") != NULL, "message: \"%s\"", err.message);
            CHECK_MSG(at >= k && at <= k + 2, "at %llu", (unsigned long long)at);
            CHECK_MSG(at == k + 2, "stopped at %llu: deltas k+1, k+2 are good and were not applied",
                      (unsigned long long)at);
            CHECK(at <= 12 && memcmp(u.img, REF(refs, &m, at), m.total * 2) == 0);
            if (VERBOSE) printf("  note: %s; stopped at %llu\n", err.message, (unsigned long long)at);
            /* repaired: continues from where it stopped */
            obj_put(&mem, key, orig, (size_t)size);
            CHECK_EQ_INT(wsync_subscriber_sync(u.s, k + 5, &ss, &err), WSYNC_OK);
            CHECK(memcmp(u.img, REF(refs, &m, k + 5), m.total * 2) == 0);
            CHECK_EQ_INT(ss.deltas, k + 5 - at);
            CHECK_EQ_INT(ss.anchors, 0);
        }
        sm_sub_close(&u);
    }
    free(orig);
    TEST_END();

    snprintf(name, sizeof name, "wrong base vouched for (%s): packed recovers through the anchor",
             wsync_encoding_name(enc));
    TEST_BEGIN(name);
    if (sm_sub_open(&u, &mem, &m, &o, 0)) {
        wsync_sync_stats ss;
        wsync_result r;
        /* holds step 3, claims 4 */
        sub_set(&u, REF(refs, &m, 3), 4);
        r = wsync_subscriber_sync(u.s, 8, &ss, &err);
        if (enc == WSYNC_ENCODING_PACKED) {
            /* the delta is proven good by HEAD's digest, so the targets are
               wrong: the subscriber forgets its step and takes an anchor */
            CHECK_EQ_INT(r, WSYNC_OK);
            CHECK(memcmp(u.img, REF(refs, &m, 8), m.total * 2) == 0);
            CHECK_EQ_INT(ss.anchors, 1);
            CHECK(ss.rejected >= 1);
        }
        if (VERBOSE) printf("  note: %s, claims 4 holding 3: %s (%s)\n", wsync_encoding_name(enc), wsync_result_name(r),
                            r == WSYNC_OK ? ss.path : err.message);
    }
    sm_sub_close(&u);
    {
        /* with VERIFY_STATE, trl too must notice (its deltas carry no digests) */
        wsync_chain_options vo = o;
        vo.flags = WSYNC_CHAIN_VERIFY_STATE;
        if (sm_sub_open(&u, &mem, &m, &vo, 0)) {
            wsync_sync_stats ss;
            wsync_result r;
            sub_set(&u, REF(refs, &m, 3), 4);
            r = wsync_subscriber_sync(u.s, 8, &ss, &err);
            CHECK_MSG(r != WSYNC_OK || memcmp(u.img, REF(refs, &m, 8), m.total * 2) == 0,
                      "VERIFY_STATE: a wrong result passed as step 8 (%s)", ss.path);
            if (VERBOSE) printf("  note: %s + VERIFY_STATE, claims 4 holding 3: %s (%s), now at %llu\n",
                                wsync_encoding_name(enc), wsync_result_name(r), r == WSYNC_OK ? ss.path : err.message,
                                (unsigned long long)sm_sub_step(&u));
        }
        sm_sub_close(&u);
    }
    TEST_END();
    wsync_store_close(&mem);
    free(refs);
}

/* ======================================================================
   4. A TRL-style bucket: no HEAD
   ====================================================================== */

static int put_sink(void *user, const void *bytes, size_t len)
{
    wsync_buffer *b = (wsync_buffer *)user;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        uint8_t *nb;
        while (cap < b->len + len) cap *= 2;
        nb = (uint8_t *)realloc(b->bytes, cap);
        if (!nb) return 1;
        b->bytes = nb;
        b->cap = cap;
    }
    memcpy(b->bytes + b->len, bytes, len);
    b->len += len;
    return 0;
}

static void trl_put_anchor(wsync_store *st, const sm_model *m, uint16_t *img, uint64_t step, int with_meta)
{
    wsync_st_tensor_desc d[SM_MAXT];
    wsync_buffer b = {NULL, 0, 0};
    wsync_error err;
    wsync_st_kv meta;
    char sv[32], key[64];
    size_t i;
    for (i = 0; i < m->n; i++) {
        d[i].name = m->t[i].name;
        d[i].dtype = WSYNC_DTYPE_BF16;
        d[i].rank = m->t[i].rank;
        d[i].shape = m->t[i].shape;
        d[i].data = img + m->off[i];
        d[i].nbytes = (uint64_t)m->nelem[i] * 2;
        d[i].name_len = 0;
    }
    snprintf(sv, sizeof sv, "%llu", (unsigned long long)step);
    meta.key = "step";
    meta.key_len = 0;
    meta.value = sv;
    meta.value_len = 0;
    CHECK_EQ_INT(wsync_st_write(d, m->n, with_meta ? &meta : NULL, with_meta ? 1 : 0, put_sink, &b, NULL, &err),
                 WSYNC_OK);
    CHECK(obj_put(st, akey(key, sizeof key, NULL, step), b.bytes, b.len));
    free(b.bytes);
}

static void trl_put_delta(wsync_store *st, const sm_model *m, uint16_t *base, uint16_t *next, uint64_t step,
                          wsync_encoding enc)
{
    wsync_tensor tb[SM_MAXT], tn[SM_MAXT];
    wsync_delta_options o;
    wsync_buffer b = {NULL, 0, 0};
    wsync_error err;
    char key[64];
    memset(&o, 0, sizeof o);
    o.encoding = enc;
    o.base_step = step - 1;
    o.step = step;
    sm_tensors(m, base, tb);
    sm_tensors(m, next, tn);
    CHECK_EQ_INT(wsync_delta_encode(tb, tn, m->n, &o, put_sink, &b, NULL, &err), WSYNC_OK);
    CHECK(obj_put(st, dkey(key, sizeof key, NULL, step), b.bytes, b.len));
    free(b.bytes);
}

static void test_trl_bucket(void)
{
    sm_model m = sm_model_make(g_small_defs, sizeof g_small_defs / sizeof g_small_defs[0]);
    const uint64_t N = 16, MID = 10;
    uint16_t *refs = gen_refs(&m, N);
    wsync_store mem;
    wsync_error err;
    wsync_chain_options o = chain_opts(NULL, (wsync_encoding)0, 0, 0);
    wsync_chain_info info;
    sm_sub fol, u;
    uint64_t s;
    size_t i;
    memset(&info, 0, sizeof info);
    if (wsync_store_mem_open(NULL, &mem, &err) != WSYNC_OK) return;

    TEST_BEGIN("TRL bucket: a follower from the first anchor, one delta at a time (trl-v1 and trl-v3)");
    trl_put_anchor(&mem, &m, REF(refs, &m, 0), 0, 0);
    sm_sub_open(&fol, &mem, &m, &o, 0);
    if (fol.s) {
        wsync_sync_stats ss;
        CHECK_EQ_INT(wsync_subscriber_sync(fol.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK(sm_sub_step(&fol) == 0 && memcmp(fol.img, REF(refs, &m, 0), m.total * 2) == 0);
    }
    for (s = 1; s <= N; s++) {
        trl_put_delta(&mem, &m, REF(refs, &m, s - 1), REF(refs, &m, s), s,
                      s % 2 ? WSYNC_ENCODING_TRL_V1 : WSYNC_ENCODING_TRL_V3);
        if (s == MID) trl_put_anchor(&mem, &m, REF(refs, &m, MID), MID, 1);
        if (fol.s) {
            wsync_sync_stats ss;
            wsync_result r = wsync_subscriber_sync(fol.s, WSYNC_STEP_LATEST, &ss, &err);
            CHECK_MSG(r == WSYNC_OK, "step %llu: %s", (unsigned long long)s, err.message);
            CHECK(sm_sub_step(&fol) == s && memcmp(fol.img, REF(refs, &m, s), m.total * 2) == 0);
            CHECK_MSG(ss.deltas == 1 && ss.anchors == 0, "step %llu: %s", (unsigned long long)s, ss.path);
        }
    }
    sm_sub_close(&fol);
    TEST_END();

    TEST_BEGIN("TRL bucket: chain_read lists it (no HEAD)");
    if (wsync_chain_read(&mem, &o, &info, &err) == WSYNC_OK) {
        size_t na = 0;
        CHECK_EQ_INT(info.has_head, 0);
        CHECK_EQ_U64(info.head_step, N);
        CHECK_EQ_U64(info.anchor_step, MID);
        CHECK_EQ_INT(info.n_entries, 2 + N);
        for (i = 0; i < info.n_entries; i++) {
            const wsync_chain_entry *en = &info.entries[i];
            CHECK(!en->has_digests);
            if (en->kind == WSYNC_CHAIN_ANCHOR) {
                CHECK(en->step == (na == 0 ? 0 : MID) && en->base == en->step);
                na++;
            } else {
                CHECK(i >= 2 && en->step == i - 1 && en->base == en->step - 1);
            }
        }
        CHECK_EQ_INT(na, 2);
        check_info_vs_store(&mem, NULL, &info, &m, NULL);
    } else CHECK_MSG(0, "chain_read: %s", err.message);
    TEST_END();

    TEST_BEGIN("TRL bucket: from scratch to the latest and to every step, bit-exact");
    if (info.n_entries) {
        for (s = 0; s <= N; s++) {
            if (sm_sub_open(&u, &mem, &m, &o, (int)(s & 1))) {
                sync_expect(&u, &info, NULL, s, refs, "trl from nothing");
                if (s + 3 <= N) sync_expect(&u, &info, NULL, s + 3, refs, "trl onward");
            }
            sm_sub_close(&u);
        }
        if (sm_sub_open(&u, &mem, &m, &o, 0)) {
            wsync_sync_stats ss;
            CHECK_EQ_INT(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
            CHECK(memcmp(u.img, REF(refs, &m, N), m.total * 2) == 0);
            CHECK(ss.anchors == 1 && ss.deltas == N - MID);
        }
        sm_sub_close(&u);
    }
    wsync_chain_info_free(&info);
    TEST_END();

    TEST_BEGIN("a HEAD-less chain: a published chain whose HEAD is deleted is read by listing");
    {
        wsync_store m2;
        wsync_publisher *p = NULL;
        wsync_chain_options po = chain_opts(NULL, WSYNC_ENCODING_PACKED, 5, 100);
        CHECK_EQ_INT(wsync_store_mem_open(NULL, &m2, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_publisher_open(&m2, &po, &p, &err), WSYNC_OK);
        for (s = 0; s <= 12 && p; s++) {
            wsync_tensor t[SM_MAXT];
            wsync_publish_stats ps;
            sm_tensors(&m, REF(refs, &m, s), t);
            CHECK_EQ_INT(wsync_publish(p, s, t, m.n, &ps, &err), WSYNC_OK);
        }
        if (p) wsync_publisher_close(p);
        CHECK_EQ_INT(m2.del(m2.user, "HEAD", &err), WSYNC_OK);
        memset(&info, 0, sizeof info);
        if (wsync_chain_read(&m2, &po, &info, &err) == WSYNC_OK) {
            CHECK_EQ_INT(info.has_head, 0);
            CHECK_EQ_U64(info.head_step, 12);
            CHECK_EQ_U64(info.anchor_step, 10);
            for (s = 0; s <= 12; s++) {
                if (sm_sub_open(&u, &m2, &m, &po, 0)) sync_expect(&u, &info, NULL, s, refs, "HEAD deleted");
                sm_sub_close(&u);
            }
        } else CHECK_MSG(0, "chain_read: %s", err.message);
        wsync_chain_info_free(&info);
        wsync_store_close(&m2);
    }
    TEST_END();

    wsync_store_close(&mem);
    free(refs);
}

/* ======================================================================
   5. Background prefetch
   ====================================================================== */

/* Polls until ready says `want` (10 s at most); the targets must keep
   `held` all the while. */
static int wait_ready(sm_sub *u, uint64_t want, const uint16_t *held)
{
    double end = now_s() + 10.0;
    uint64_t r = NO_STEP;
    int untouched = 1;
    while (now_s() < end) {
        int ready = wsync_subscriber_ready(u->s, &r);
        if (memcmp(u->img, held, u->m->total * 2) != 0) untouched = 0;
        if (ready && r == want) break;
        sleep_ms(2);
    }
    CHECK_MSG(untouched, "%s", "the targets changed before apply_ready");
    CHECK_MSG(r == want, "ready reported %llu, waited for %llu", (unsigned long long)r, (unsigned long long)want);
    return r == want;
}

static void test_prefetch(void)
{
    sm_model m = sm_model_make(g_small_defs, sizeof g_small_defs / sizeof g_small_defs[0]);
    uint16_t *refs = gen_refs(&m, 20);
    wsync_store mem;
    wsync_error err;
    wsync_chain_options o = chain_opts(NULL, WSYNC_ENCODING_PACKED, 10, 0);
    wsync_publisher *p = NULL;
    wsync_sync_stats ss;
    sm_sub u, u2;
    uint64_t s, r;
    if (wsync_store_mem_open(NULL, &mem, &err) != WSYNC_OK) return;
    if (wsync_publisher_open(&mem, &o, &p, &err) != WSYNC_OK) {
        wsync_store_close(&mem);
        return;
    }
#define PUB(step)                                                                \
    do {                                                                         \
        wsync_tensor t_[SM_MAXT];                                                   \
        wsync_publish_stats ps_;                                                 \
        sm_tensors(&m, REF(refs, &m, (step)), t_);                               \
        CHECK_EQ_INT(wsync_publish(p, (step), t_, m.n, &ps_, &err), WSYNC_OK);   \
    } while (0)

    TEST_BEGIN("prefetch: ready reports the newest step, the targets move only in apply_ready");
    for (s = 0; s <= 5; s++) PUB(s);
    if (sm_sub_open(&u, &mem, &m, &o, 0)) {
        CHECK_EQ_INT(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK_EQ_INT(wsync_subscriber_start(u.s, 5, &err), WSYNC_OK);
        sleep_ms(40);
        CHECK(!wsync_subscriber_ready(u.s, &r));
        CHECK_EQ_INT(wsync_subscriber_apply_ready(u.s, &ss, &err), WSYNC_OK);
        CHECK_EQ_STR(ss.path, "none");
        CHECK(memcmp(u.img, REF(refs, &m, 5), m.total * 2) == 0);
        for (s = 6; s <= 8; s++) PUB(s);
        if (wait_ready(&u, 8, REF(refs, &m, 5))) {
            CHECK(memcmp(u.img, REF(refs, &m, 5), m.total * 2) == 0);
            CHECK_EQ_U64(sm_sub_step(&u), 5);
            CHECK_EQ_INT(wsync_subscriber_apply_ready(u.s, &ss, &err), WSYNC_OK);
            CHECK_EQ_U64(ss.step, 8);
            CHECK_EQ_U64(sm_sub_step(&u), 8);
            CHECK(memcmp(u.img, REF(refs, &m, 8), m.total * 2) == 0);
            CHECK(ss.deltas == 3 && ss.anchors == 0);
        }
        CHECK_EQ_INT(wsync_subscriber_apply_ready(u.s, &ss, &err), WSYNC_OK);
        CHECK_EQ_STR(ss.path, "none");
        CHECK(memcmp(u.img, REF(refs, &m, 8), m.total * 2) == 0);
        /* a second round, crossing an anchor (10) */
        for (s = 9; s <= 14; s++) PUB(s);
        if (wait_ready(&u, 14, REF(refs, &m, 8))) {
            CHECK_EQ_INT(wsync_subscriber_apply_ready(u.s, &ss, &err), WSYNC_OK);
            CHECK(sm_sub_step(&u) == 14 && memcmp(u.img, REF(refs, &m, 14), m.total * 2) == 0);
        }
        wsync_subscriber_stop(u.s);
        wsync_subscriber_stop(u.s); /* twice is fine */
        PUB(15);
        sleep_ms(30);
        /* after stop, a plain sync still works */
        CHECK_EQ_INT(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
        CHECK(sm_sub_step(&u) == 15 && memcmp(u.img, REF(refs, &m, 15), m.total * 2) == 0);
    }
    sm_sub_close(&u);
    TEST_END();

    TEST_BEGIN("prefetch: from nothing; close with the thread running");
    if (sm_sub_open(&u2, &mem, &m, &o, 1)) {
        uint16_t *zero = (uint16_t *)calloc(m.total, 2);
        CHECK_EQ_INT(wsync_subscriber_start(u2.s, 3, &err), WSYNC_OK);
        if (wait_ready(&u2, 15, zero)) {
            CHECK_EQ_U64(sm_sub_step(&u2), NO_STEP);
            CHECK_EQ_INT(wsync_subscriber_apply_ready(u2.s, &ss, &err), WSYNC_OK);
            CHECK(sm_sub_step(&u2) == 15 && memcmp(u2.img, REF(refs, &m, 15), m.total * 2) == 0);
            CHECK(ss.anchors == 1);
        }
        PUB(16);
        PUB(17);
        sleep_ms(20);
        free(zero);
    }
    sm_sub_close(&u2); /* close stops the thread */
    TEST_END();
#undef PUB
    wsync_publisher_close(p);
    wsync_store_close(&mem);
    free(refs);
}

/* ======================================================================
   5b. Subscribers racing a publisher whose retention deletes fast
   ====================================================================== */

typedef struct race {
    const sm_model *m;
    const uint16_t *refs;
    wsync_store *st;
    wsync_chain_options o;
    uint64_t last;
    int failed;
} race;

static void *race_publisher(void *user)
{
    race *r = (race *)user;
    wsync_publisher *p = NULL;
    wsync_error err;
    uint64_t s;
    if (wsync_publisher_open(r->st, &r->o, &p, &err) != WSYNC_OK) {
        r->failed = 1;
        return NULL;
    }
    for (s = 0; s <= r->last; s++) {
        wsync_tensor t[SM_MAXT];
        wsync_publish_stats ps;
        sm_tensors(r->m, (uint16_t *)REF(r->refs, r->m, s), t);
        if (wsync_publish(p, s, t, r->m->n, &ps, &err) != WSYNC_OK) {
            r->failed = 1;
            break;
        }
        if (s % 4 == 0) sleep_ms(1);
    }
    wsync_publisher_close(p);
    return NULL;
}

static void test_race(void)
{
    sm_model m = sm_model_make(g_small_defs, sizeof g_small_defs / sizeof g_small_defs[0]);
    race r;
    pthread_t th;
    wsync_store mem;
    wsync_error err;
    uint64_t last_seen = 0;
    int syncs = 0, ok = 0, refused = 0, wrong = 0, done = 0;
    double end;
    memset(&r, 0, sizeof r);
    r.m = &m;
    r.last = 240;
    r.refs = gen_refs(&m, r.last);
    r.o = chain_opts(NULL, WSYNC_ENCODING_PACKED, 3, 3);
    TEST_BEGIN("race: subscribers follow a publisher whose retention deletes behind them; never a mixture");
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &mem, &err), WSYNC_OK);
    r.st = &mem;
    if (pthread_create(&th, NULL, race_publisher, &r) != 0) {
        CHECK(0);
    } else {
        sm_sub u, slow;
        end = now_s() + 20.0;
        sm_sub_open(&u, &mem, &m, &r.o, 0);
        sm_sub_open(&slow, &mem, &m, &r.o, 1);
        while (!done && now_s() < end && u.s && slow.s) {
            wsync_sync_stats ss;
            sm_sub *w = (syncs % 3 == 2) ? &slow : &u;
            uint64_t at;
            wsync_result res = wsync_subscriber_sync(w->s, WSYNC_STEP_LATEST, &ss, &err);
            syncs++;
            at = sm_sub_step(w);
            if (res == WSYNC_OK) ok++;
            else refused++;
            if (at != NO_STEP) {
                if (at > r.last || memcmp(w->img, REF(r.refs, &m, at), m.total * 2) != 0) wrong++;
                if (w == &u && at < last_seen) wrong++;
                if (w == &u) last_seen = at;
            } else if (!is_zero(w->img, m.total)) wrong++;
            if (w == &slow) sleep_ms(3); /* falls behind the retention window */
            done = at == r.last && w == &u;
        }
        pthread_join(th, NULL);
        CHECK(!r.failed);
        CHECK_MSG(wrong == 0, "%d of %d syncs left targets that are no published step", wrong, syncs);
        CHECK(ok > 0);
        /* both end at the last step once the publisher is done */
        if (u.s && slow.s) {
            wsync_sync_stats ss;
            CHECK_EQ_INT(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
            CHECK_EQ_INT(wsync_subscriber_sync(slow.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
            CHECK(memcmp(u.img, REF(r.refs, &m, r.last), m.total * 2) == 0);
            CHECK(memcmp(slow.img, REF(r.refs, &m, r.last), m.total * 2) == 0);
        }
        if (VERBOSE) printf("  note: race: %d syncs, %d ok, %d refused (objects deleted under them)\n", syncs, ok,
                            refused);
        sm_sub_close(&u);
        sm_sub_close(&slow);
    }
    wsync_store_close(&mem);
    free((void *)r.refs);
    TEST_END();
}

/* ======================================================================
   6. A publisher killed with SIGKILL, in real processes
   ====================================================================== */

static void test_crash(int iterations, int fsync_on)
{
    sm_model m = sm_model_make(g_small_defs, sizeof g_small_defs / sizeof g_small_defs[0]);
    uint16_t *cur = (uint16_t *)malloc(m.total * 2);
    wsync_store ds;
    wsync_store_options so;
    wsync_error err;
    wsync_chain_options o = chain_opts(NULL, WSYNC_ENCODING_PACKED, 5, 8);
    char root[256], name[160];
    uint64_t head = 0, s;
    int it, killed = 0, progressed = 0, orphans = 0, stale = 0, failures = 0, early = 0;
    double t0 = now_s();
    memset(&so, 0, sizeof so);
    so.no_fsync = !fsync_on;
    snprintf(name, sizeof name, "crash: a publisher killed with SIGKILL %d times (fsync %s)", iterations,
             fsync_on ? "on" : "off");
    TEST_BEGIN(name);
    if (!make_tmpdir(root, sizeof root, "crash") || wsync_store_dir_open(root, &so, &ds, &err) != WSYNC_OK) {
        CHECK(0);
        TEST_END();
        free(cur);
        return;
    }
    {
        wsync_publisher *p = NULL;
        gen_init(&m, cur);
        CHECK_EQ_INT(wsync_publisher_open(&ds, &o, &p, &err), WSYNC_OK);
        for (s = 0; s <= 4 && p; s++) {
            wsync_tensor t[SM_MAXT];
            wsync_publish_stats ps;
            if (s) gen_advance(&m, cur, 0, s);
            sm_tensors(&m, cur, t);
            CHECK_EQ_INT(wsync_publish(p, s, t, m.n, &ps, &err), WSYNC_OK);
        }
        if (p) wsync_publisher_close(p);
        head = 4;
    }
    srand((unsigned)getpid() ^ 0x5eed);
    for (it = 0; it < iterations && failures < 3; it++) {
        pid_t child;
        int status = 0, f0 = check__case_failures;
        uint64_t h;
        wsync_chain_info info;
        keylist l;
        size_t i;
        fflush(stdout);
        child = fork();
        if (child == 0) {
            /* the trainer: continues the chain until killed; variant `it` */
            wsync_store cs;
            wsync_publisher *p = NULL;
            wsync_error e2;
            uint64_t st;
            if (wsync_store_dir_open(root, &so, &cs, &e2) != WSYNC_OK) _exit(3);
            if (wsync_publisher_open(&cs, &o, &p, &e2) != WSYNC_OK) _exit(4);
            for (st = head + 1;; st++) {
                wsync_tensor t[SM_MAXT];
                wsync_publish_stats ps;
                gen_advance(&m, cur, 1000 + (uint64_t)it, st);
                sm_tensors(&m, cur, t);
                if (wsync_publish(p, st, t, m.n, &ps, &e2) != WSYNC_OK) {
                    fprintf(stderr, "child publish %llu: %s\n", (unsigned long long)st, e2.message);
                    _exit(5);
                }
            }
        }
        if (child < 0) {
            CHECK(0);
            break;
        }
        /* vary: early (open, rebuild), mid-publish, several publishes in */
        {
            int mode = rand() % 4;
            long us = mode == 0 ? rand() % 3000 : mode == 1 ? 3000 + rand() % 10000 : 10000 + rand() % 40000;
            struct timespec ts;
            ts.tv_sec = 0;
            ts.tv_nsec = us * 1000L;
            nanosleep(&ts, NULL);
        }
        kill(child, SIGKILL);
        if (waitpid(child, &status, 0) != child) status = -1;
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) killed++;
        else {
            early++;
            CHECK_MSG(0, "iteration %d: the child exited on its own (status 0x%x)", it, status);
        }

        /* the store: no temporary names listed, HEAD valid, its objects there */
        l = list_keys(&ds, "");
        for (i = 0; i < l.n; i++)
            CHECK_MSG(strstr(l.k[i], WSYNC_STORE_TMP_MARK) == NULL, "listed: %s", l.k[i]);
        memset(&info, 0, sizeof info);
        if (wsync_chain_read(&ds, &o, &info, &err) != WSYNC_OK) {
            CHECK_MSG(0, "iteration %d: chain_read: %s", it, err.message);
            kl_free(&l);
            failures++;
            continue;
        }
        CHECK_EQ_INT(info.has_head, 1);
        h = info.head_step;
        CHECK_MSG(h >= head, "HEAD went back: %llu < %llu", (unsigned long long)h, (unsigned long long)head);
        check_info_vs_store(&ds, NULL, &info, &m, NULL);
        /* objects the HEAD does not name: orphans of a killed publish, or
           not yet removed by retention */
        for (i = 0; i < l.n; i++) {
            uint64_t st2;
            if (parse_step_key(l.k[i], "anchors/", &st2) || parse_step_key(l.k[i], "deltas/", &st2)) {
                int kind = l.k[i][0] == 'a' ? WSYNC_CHAIN_ANCHOR : WSYNC_CHAIN_DELTA;
                if (find_entry(&info, (wsync_chain_kind)kind, st2) < 0) {
                    if (st2 > h) orphans++;
                    else stale++;
                }
            }
        }
        kl_free(&l);
        if (h > head) progressed++;
        for (s = head + 1; s <= h; s++) gen_advance(&m, cur, 1000 + (uint64_t)it, s);
        CHECK_EQ_U64(info.head_state, img_state(&m, cur));

        /* a fresh subscriber reaches HEAD's step bit-exact */
        {
            sm_sub u;
            wsync_sync_stats ss;
            wsync_chain_options vo = o;
            vo.flags = WSYNC_CHAIN_VERIFY_STATE;
            if (sm_sub_open(&u, &ds, &m, &vo, it & 1)) {
                wsync_result r = wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err);
                CHECK_MSG(r == WSYNC_OK, "iteration %d: sync: %s", it, err.message);
                CHECK_MSG(sm_sub_step(&u) == h && memcmp(u.img, cur, m.total * 2) == 0,
                          "iteration %d: not bit-exact at %llu", it, (unsigned long long)h);
                /* a new publisher continues with h + 1 */
                {
                    wsync_publisher *p = NULL;
                    wsync_tensor t[SM_MAXT];
                    wsync_publish_stats ps;
                    memset(&ps, 0, sizeof ps);
                    gen_advance(&m, cur, 5000 + (uint64_t)it, h + 1);
                    sm_tensors(&m, cur, t);
                    CHECK_EQ_INT(wsync_publisher_open(&ds, &o, &p, &err), WSYNC_OK);
                    r = p ? wsync_publish(p, h + 1, t, m.n, &ps, &err) : WSYNC_ERR_INVALID_ARGUMENT;
                    CHECK_MSG(r == WSYNC_OK, "iteration %d: publish %llu: %s", it, (unsigned long long)(h + 1),
                              err.message);
                    if (r == WSYNC_OK && h + 1 - info.anchor_step < 5)
                        CHECK_MSG(ps.wrote_delta && !ps.wrote_anchor, "iteration %d: %llu: anchor %d delta %d", it,
                                  (unsigned long long)(h + 1), ps.wrote_anchor, ps.wrote_delta);
                    if (p) wsync_publisher_close(p);
                    r = wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err);
                    CHECK_MSG(r == WSYNC_OK, "iteration %d: sync to %llu: %s", it, (unsigned long long)(h + 1),
                              err.message);
                    CHECK(sm_sub_step(&u) == h + 1 && memcmp(u.img, cur, m.total * 2) == 0);
                    if (ps.wrote_delta) CHECK(ss.deltas == 1 && ss.anchors == 0);
                }
            }
            sm_sub_close(&u);
            if (sm_sub_open(&u, &ds, &m, &o, 0)) {
                CHECK_EQ_INT(wsync_subscriber_sync(u.s, WSYNC_STEP_LATEST, &ss, &err), WSYNC_OK);
                CHECK(sm_sub_step(&u) == h + 1 && memcmp(u.img, cur, m.total * 2) == 0);
            }
            sm_sub_close(&u);
        }
        head = h + 1;
        wsync_chain_info_free(&info);
        if (check__case_failures != f0) failures++;
    }
    CHECK(killed + early == it);
    TEST_END();

    /* Retention after the crashes: once a publish completes cleanly, HEAD
       names no object older than the window. Objects a killed publisher left
       behind (named by no HEAD, or no longer named when its retention was
       cut short) stay: nothing proves them this chain's, and retention never
       deletes by listing (test_pub_safety). */
    snprintf(name, sizeof name, "crash: after %d kills and a clean publish, HEAD names no old objects", iterations);
    TEST_BEGIN(name);
    {
        keylist l = list_keys(&ds, "");
        wsync_chain_info info;
        size_t i, old = 0, outside = 0;
        memset(&info, 0, sizeof info);
        if (wsync_chain_read(&ds, &o, &info, &err) == WSYNC_OK) {
            for (i = 0; i < l.n; i++) {
                uint64_t st2;
                int a = parse_step_key(l.k[i], "anchors/", &st2), d = !a && parse_step_key(l.k[i], "deltas/", &st2);
                if (!a && !d) continue;
                if (find_entry(&info, a ? WSYNC_CHAIN_ANCHOR : WSYNC_CHAIN_DELTA, st2) < 0) outside++;
                else if (st2 + 8 + 5 <= info.head_step && st2 < info.anchor_step) old++;
            }
            CHECK_MSG(old == 0, "HEAD names %zu objects older than retain + anchor_every steps, head %llu, %zu "
                      "objects in all", old, (unsigned long long)info.head_step, l.n);
            if (VERBOSE) printf("  note: %zu objects left by killed publishers, named by no HEAD\n", outside);
        } else CHECK(0);
        wsync_chain_info_free(&info);
        kl_free(&l);
    }
    TEST_END();
    if (VERBOSE)
        printf("  note: %d kills, %d with progress, %d orphan objects seen, %d stale (retention cut short), "
               "head %llu, %.1f s\n",
               killed, progressed, orphans, stale, (unsigned long long)head, now_s() - t0);
    wsync_store_close(&ds);
    rm_rf(root);
    free(cur);
}

/* ====================================================================== */

static void test_args(void)
{
    wsync_store mem;
    wsync_error err;
    wsync_publisher *p = NULL;
    wsync_chain_options o = chain_opts("bad//prefix", WSYNC_ENCODING_PACKED, 0, 0);
    TEST_BEGIN("arguments: a bad prefix is refused (at open or at the first publish)");
    CHECK_EQ_INT(wsync_store_mem_open(NULL, &mem, &err), WSYNC_OK);
    {
        static const char *bad[] = {"bad//prefix", "../up", "/abs"};
        sm_model m = sm_model_make(g_small_defs, sizeof g_small_defs / sizeof g_small_defs[0]);
        uint16_t *img = (uint16_t *)calloc(m.total, 2);
        wsync_tensor t[SM_MAXT];
        size_t i;
        keylist l;
        sm_tensors(&m, img, t);
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            o.prefix = bad[i];
            p = NULL;
            if (wsync_publisher_open(&mem, &o, &p, &err) == WSYNC_OK) {
                wsync_publish_stats ps;
                CHECK_MSG(wsync_publish(p, 1, t, m.n, &ps, &err) != WSYNC_OK, "prefix '%s' accepted", bad[i]);
                wsync_publisher_close(p);
            }
        }
        l = list_keys(&mem, "");
        CHECK_EQ_INT(l.n, 0);
        kl_free(&l);
        free(img);
    }
    wsync_store_close(&mem);
    TEST_END();
}

/* Counts the allocations of WSYNC_POOL_MIN_BLOCK bytes or more. */
typedef struct bigcount {
    size_t n_big, live;
} bigcount;

static void *bc_alloc(void *user, size_t size)
{
    bigcount *c = (bigcount *)user;
    void *p = malloc(size ? size : 1);
    if (size >= WSYNC_POOL_MIN_BLOCK) c->n_big++;
    if (p) c->live++;
    return p;
}

static void bc_free(void *user, void *p)
{
    bigcount *c = (bigcount *)user;
    if (!p) return;
    c->live--;
    free(p);
}

/* A subscriber's applies go through a pool of its own: after the first
   packed-max delta, the next ones take from the caller's allocator only
   what their fetch needs, and close gives everything back. */
static void test_sub_pool(void)
{
    static const sm_def defs[] = {
        {"model.layers.0.mlp.up_proj.weight", 2, {1024, 512}, 0},
        {"model.norm.weight", 1, {512, 0}, 0},
    };
    sm_model m = sm_model_make(defs, sizeof defs / sizeof defs[0]);
    uint16_t *refs = gen_refs(&m, 5);
    wsync_store mem;
    wsync_error err;
    wsync_chain_options o = chain_opts(NULL, WSYNC_ENCODING_PACKED_MAX, 100, 0), so;
    wsync_publisher *pub = NULL;
    wsync_tensor t[SM_MAXT];
    wsync_publish_stats ps;
    bigcount bc;
    sm_sub fol;
    size_t n_big[6] = {0, 0, 0, 0, 0, 0};
    uint64_t s;
    if (wsync_store_mem_open(NULL, &mem, &err) != WSYNC_OK) return;
    TEST_BEGIN("subscriber pool: deltas after the first take no apply memory from the caller's allocator");
    CHECK_EQ_INT(wsync_publisher_open(&mem, &o, &pub, &err), WSYNC_OK);
    for (s = 0; s <= 5 && pub; s++) {
        sm_tensors(&m, REF(refs, &m, s), t);
        CHECK_EQ_INT(wsync_publish(pub, s, t, m.n, &ps, &err), WSYNC_OK);
        CHECK_EQ_INT(ps.wrote_anchor, s == 0);
    }
    if (pub) wsync_publisher_close(pub);
    memset(&bc, 0, sizeof bc);
    so = o;
    so.allocator.alloc = bc_alloc;
    so.allocator.free = bc_free;
    so.allocator.user = &bc;
    if (sm_sub_open(&fol, &mem, &m, &so, 0)) {
        for (s = 0; s <= 5; s++) {
            wsync_sync_stats ss;
            size_t before = bc.n_big;
            CHECK_EQ_INT(wsync_subscriber_sync(fol.s, s, &ss, &err), WSYNC_OK);
            CHECK(memcmp(fol.img, REF(refs, &m, s), m.total * 2) == 0);
            CHECK_EQ_INT(ss.deltas, s > 0);
            n_big[s] = bc.n_big - before;
        }
        /* the first delta fills the pool (its list and the decoder's
           scratch); each later one allocates only the object it fetches */
        CHECK_MSG(n_big[1] >= 3, "first delta: %lu large blocks", (unsigned long)n_big[1]);
        for (s = 2; s <= 5; s++)
            CHECK_MSG(n_big[s] <= 1, "delta %lu: %lu large blocks (first: %lu)", (unsigned long)s,
                      (unsigned long)n_big[s], (unsigned long)n_big[1]);
        sm_sub_close(&fol);
        CHECK_EQ_U64(bc.live, 0);
    }
    TEST_END();
    free(refs);
    wsync_store_close(&mem);
}

/* A publisher's encodes go through a pool of its own: after the first
   delta, the next ones take no large block from the caller's allocator
   (fresh pages, a fault each on first touch), and close gives everything
   back. Packed and packed-max, on one and on two threads. */
static void test_pub_pool(wsync_encoding enc, unsigned threads)
{
    static const sm_def defs[] = {
        {"model.layers.0.mlp.up_proj.weight", 2, {1024, 512}, 0},
        {"model.layers.0.mlp.down_proj.weight", 2, {512, 1024}, 0},
        {"model.norm.weight", 1, {512, 0}, 0},
    };
    sm_model m = sm_model_make(defs, sizeof defs / sizeof defs[0]);
    uint16_t *refs = gen_refs(&m, 6);
    wsync_store mem;
    wsync_error err;
    wsync_chain_options o = chain_opts(NULL, enc, 100, 0);
    wsync_publisher *pub = NULL;
    wsync_tensor t[SM_MAXT];
    wsync_publish_stats ps;
    bigcount bc;
    sm_sub fol;
    size_t n_big[7] = {0, 0, 0, 0, 0, 0, 0};
    uint64_t s;
    char name[160];
    if (wsync_store_mem_open(NULL, &mem, &err) != WSYNC_OK) return;
    snprintf(name, sizeof name,
             "publisher pool (%s, %u thread%s): deltas after the first take no large block from the caller's "
             "allocator", wsync_encoding_name(enc), threads, threads == 1 ? "" : "s");
    TEST_BEGIN(name);
    memset(&bc, 0, sizeof bc);
    o.allocator.alloc = bc_alloc;
    o.allocator.free = bc_free;
    o.allocator.user = &bc;
    o.threads = threads;
    CHECK_EQ_INT(wsync_publisher_open(&mem, &o, &pub, &err), WSYNC_OK);
    for (s = 0; s <= 6 && pub; s++) {
        size_t before = bc.n_big;
        sm_tensors(&m, REF(refs, &m, s), t);
        CHECK_EQ_INT(wsync_publish(pub, s, t, m.n, &ps, &err), WSYNC_OK);
        CHECK_EQ_INT(ps.wrote_anchor, s == 0);
        CHECK_EQ_INT(ps.wrote_delta, s > 0);
        n_big[s] = bc.n_big - before;
    }
    /* the first delta fills the pool (the delta's buffer, the encoder's
       scratch); the later ones take all of it from there */
    CHECK_MSG(n_big[1] >= 1, "first delta: %lu large blocks", (unsigned long)n_big[1]);
    for (s = 2; s <= 6; s++)
        CHECK_MSG(n_big[s] == 0, "delta %lu: %lu large blocks (first: %lu)", (unsigned long)s,
                  (unsigned long)n_big[s], (unsigned long)n_big[1]);
    if (pub) wsync_publisher_close(pub);
    CHECK_EQ_U64(bc.live, 0);
    /* and what it published replays bit-exact */
    if (sm_sub_open(&fol, &mem, &m, &o, 0)) {
        wsync_sync_stats ss;
        for (s = 0; s <= 6; s++) {
            CHECK_EQ_INT(wsync_subscriber_sync(fol.s, s, &ss, &err), WSYNC_OK);
            CHECK(memcmp(fol.img, REF(refs, &m, s), m.total * 2) == 0);
        }
        sm_sub_close(&fol);
    }
    TEST_END();
    free(refs);
    wsync_store_close(&mem);
}

int main(int argc, char **argv)
{
    double t0 = now_s();
    int crash_iters = argc > 1 ? atoi(argv[1]) : 50;
    test_args();
    test_chains();
    test_keep_f32();
    test_continuity();
    test_sub_pool();
    test_pub_pool(WSYNC_ENCODING_PACKED, 1);
    test_pub_pool(WSYNC_ENCODING_PACKED, 2);
    test_pub_pool(WSYNC_ENCODING_PACKED_MAX, 1);
    test_corruption();
    test_mid_path(WSYNC_ENCODING_PACKED);
    test_mid_path(WSYNC_ENCODING_TRL_V1);
    test_trl_bucket();
    test_prefetch();
    test_race();
    test_crash(crash_iters, 1);
    if (VERBOSE) printf("  note: %.1f s in all\n", now_s() - t0);
    return check_summary();
}
