/* The planner and simulator of wsync_rdma.h: model tensor lists and
   parameter totals, layouts that deliver every source element to every
   replica, plans that cover every destination byte exactly once (gather
   meshes and row shards, bf16 and fp8), determinism by digest, the
   kimi-k2 targets (imbalance, predicted over bound, planning time), a
   badly ordered and an unbalanced schedule predicting slower than the
   bound, barriers, ranks sharing cores (cpus), the watermark, input checks, and allocation failures. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* ---- a counting allocator that can fail the n-th allocation ---- */
typedef struct counting {
    long allocs, frees, fail_at;
} counting;

static void *c_alloc(void *user, size_t n)
{
    counting *c = (counting *)user;
    if (c->fail_at > 0 && c->allocs + 1 == c->fail_at) return NULL;
    c->allocs++;
    return malloc(n);
}

static void c_free(void *user, void *p)
{
    counting *c = (counting *)user;
    c->frees++;
    free(p);
}

static wsync_allocator counting_allocator(counting *c)
{
    wsync_allocator a;
    a.alloc = c_alloc;
    a.free = c_free;
    a.user = c;
    return a;
}

static wsync_plan_model model(const char *name)
{
    wsync_plan_model m;
    wsync_error e;
    memset(&m, 0, sizeof m);
    if (wsync_plan_model_lookup(name, &m, &e) != WSYNC_OK) printf("lookup %s: %s\n", name, e.message);
    return m;
}

static int layout(const char *name, uint32_t T, uint32_t I, uint32_t R, int fp8, int shards, wsync_plan_layout *L)
{
    wsync_plan_model m = model(name);
    wsync_plan_layout_options o;
    wsync_error e;
    memset(&o, 0, sizeof o);
    o.n_trainers = T;
    o.n_inference = I;
    o.replicas = R;
    o.fp8 = (uint32_t)fp8;
    o.shards_only = (uint32_t)shards;
    if (wsync_plan_layout_model(&m, &o, L, &e) != WSYNC_OK) {
        printf("layout %s: %s\n", name, e.message);
        return 0;
    }
    return 1;
}

static wsync_plan *build(const wsync_plan_layout *L, uint32_t nics)
{
    wsync_plan_options o;
    wsync_plan *p = NULL;
    wsync_error e;
    memset(&o, 0, sizeof o);
    o.nics_per_rank = nics;
    if (wsync_plan_build(&L->input, &o, &p, &e) != WSYNC_OK) printf("build: %s\n", e.message);
    return p;
}

static int sim(const wsync_plan *p, wsync_plan_sim_result *r)
{
    wsync_error e;
    if (wsync_plan_simulate(p, NULL, r, &e) != WSYNC_OK) {
        printf("simulate: %s\n", e.message);
        return 0;
    }
    return 1;
}

/* The simulator with the executor's pacing at the default line rate. */
static int sim_paced(const wsync_plan *p, wsync_plan_sim_result *r)
{
    wsync_plan_sim_options o;
    wsync_error e;
    memset(&o, 0, sizeof o);
    o.pace_gbps = 400;
    if (wsync_plan_simulate(p, &o, r, &e) != WSYNC_OK) {
        printf("simulate: %s\n", e.message);
        return 0;
    }
    return 1;
}

/* ---- models ---- */

static void test_models(void)
{
    wsync_plan_model m;
    wsync_plan_tensor_info ti;
    wsync_error e;
    uint64_t n, i, sum, last_layer_tensor = 0;
    int saw_bias = 0, saw_expert = 0;

    TEST_BEGIN("model parameter totals");
    m = model("qwen3-0.6b");
    CHECK_EQ_U64(wsync_plan_model_params(&m), 596049920ull);
    m = model("qwen2.5-7b");
    CHECK_EQ_U64(wsync_plan_model_params(&m), 7615616512ull); /* Hugging Face's count for Qwen2.5-7B */
    m = model("kimi-k2");
    CHECK_MSG((double)wsync_plan_model_params(&m) > 1.03e12 * 0.99 && (double)wsync_plan_model_params(&m) < 1.03e12 * 1.01,
              "%llu", (unsigned long long)wsync_plan_model_params(&m));
    CHECK(wsync_plan_model_lookup("gpt-5", &m, &e) == WSYNC_ERR_NOT_FOUND);
    TEST_END();

    TEST_BEGIN("model tensor lists: names, shapes, totals agree");
    {
        const char *names[3] = {"qwen3-0.6b", "qwen2.5-7b", "kimi-k2"};
        unsigned k;
        for (k = 0; k < 3; k++) {
            m = model(names[k]);
            n = wsync_plan_model_tensors(&m);
            for (i = 0, sum = 0; i < n; i++) {
                CHECK(wsync_plan_model_tensor(&m, i, &ti, &e) == WSYNC_OK);
                sum += ti.rows * ti.cols;
                if (strstr(ti.name, "q_proj.bias")) saw_bias = 1;
                if (strstr(ti.name, "mlp.experts.383.down_proj.weight")) saw_expert = 1;
                if (ti.layer != UINT32_MAX) last_layer_tensor = i;
            }
            CHECK_EQ_U64(sum, wsync_plan_model_params(&m));
            CHECK(wsync_plan_model_tensor(&m, n, &ti, &e) == WSYNC_ERR_OUT_OF_BOUNDS);
        }
        CHECK(saw_bias && saw_expert);
        (void)last_layer_tensor;
    }
    m = model("qwen3-0.6b");
    CHECK_EQ_U64(wsync_plan_model_tensors(&m), 310); /* 1 + 28 * 11 + 1 (tied lm_head) */
    CHECK(wsync_plan_model_tensor(&m, 0, &ti, &e) == WSYNC_OK);
    CHECK_EQ_STR(ti.name, "model.embed_tokens.weight");
    CHECK_EQ_U64(ti.rows, 151936);
    CHECK(wsync_plan_model_tensor(&m, 2, &ti, &e) == WSYNC_OK);
    CHECK_EQ_STR(ti.name, "model.layers.0.self_attn.q_proj.weight");
    CHECK(ti.rows == 2048 && ti.cols == 1024);
    m = model("kimi-k2");
    n = wsync_plan_model_tensors(&m);
    CHECK(n > 69000 && n < 71000);
    CHECK(wsync_plan_model_tensor(&m, n - 1, &ti, &e) == WSYNC_OK);
    CHECK_EQ_STR(ti.name, "lm_head.weight");
    CHECK(wsync_plan_model_tensor(&m, 2, &ti, &e) == WSYNC_OK);
    CHECK_EQ_STR(ti.name, "model.layers.0.self_attn.q_a_proj.weight");
    CHECK(ti.rows == 1536 && ti.cols == 7168);
    {
        int found = 0;
        for (i = 0; i < n && !found; i++) {
            wsync_plan_model_tensor(&m, i, &ti, &e);
            if (strcmp(ti.name, "model.layers.60.mlp.gate.e_score_correction_bias") == 0) found = ti.rows == 384;
        }
        CHECK(found);
    }
    TEST_END();
}

/* ---- layouts ---- */

typedef struct ival {
    uint64_t key, lo, hi;
} ival;

static int ival_cmp(const void *a, const void *b)
{
    const ival *x = (const ival *)a, *y = (const ival *)b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return 0;
}


/* Every source element reaches every replica (the slices of a source cover
   it, ranks sharing a slice each get it), and no two destinations on a
   rank overlap or leave the rank's regions. */
static void check_layout(const wsync_plan_layout *L, uint32_t R)
{
    const wsync_plan_input *in = &L->input;
    uint64_t u, k, d, P = in->n_inference / R;
    uint64_t *got = (uint64_t *)calloc((size_t)(in->n_sources * R), sizeof *got);
    uint64_t *end0 = (uint64_t *)calloc((size_t)in->n_inference * 2, sizeof *end0);
    int overlap = 0;
    uint64_t nv = 0, cap = in->n_dests;
    ival *v = (ival *)malloc((size_t)cap * sizeof *v);
    for (u = 0; u < in->n_units; u++) {
        const wsync_plan_unit *un = &in->units[u];
        uint64_t rows = 0, cols = in->pieces[un->first_piece].cols, eb = un->dtype == WSYNC_DTYPE_F8_E4M3 ? 1 : 2;
        for (k = un->first_piece; k < un->first_piece + un->n_pieces; k++) rows += in->pieces[k].rows;
        for (d = un->first_dest; d < un->first_dest + un->n_dests; d++) {
            const wsync_plan_dest *ds = &in->dests[d];
            uint64_t rep = ds->rank / P;
            for (k = un->first_piece; k < un->first_piece + un->n_pieces; k++)
                got[in->pieces[k].source * R + rep] += in->pieces[k].rows * in->pieces[k].cols;
            if (nv < cap) {
                v[nv].key = ds->rank;
                v[nv].lo = ds->offset;
                v[nv].hi = ds->offset + rows * cols * eb;
                nv++;
            }
            if (ds->offset + rows * cols * eb > end0[2 * ds->rank]) end0[2 * ds->rank] = ds->offset + rows * cols * eb;
        }
    }
    qsort(v, (size_t)nv, sizeof *v, ival_cmp);
    for (k = 1; k < nv; k++)
        if (v[k].key == v[k - 1].key && v[k].lo < v[k - 1].hi) overlap = 1;
    free(v);
    CHECK(!overlap);
    for (k = 0; k < in->n_inference; k++) CHECK(end0[2 * k] <= L->region_bytes[2 * k]);
    for (k = 0; k < in->n_sources; k++) {
        uint64_t size = in->sources[k].rows * in->sources[k].cols, r;
        for (r = 0; r < R; r++)
            CHECK_MSG(got[k * R + r] >= size && got[k * R + r] % size == 0, "source %llu replica %llu: %llu of %llu",
                      (unsigned long long)k, (unsigned long long)r, (unsigned long long)got[k * R + r],
                      (unsigned long long)size);
    }
    free(got);
    free(end0);
}

static void test_layouts(void)
{
    wsync_plan_layout L;
    uint64_t k, bytes = 0;
    TEST_BEGIN("layout qwen3-0.6b TP 2 bf16: every element to every replica");
    if (layout("qwen3-0.6b", 4, 2, 1, 0, 0, &L)) {
        check_layout(&L, 1);
        for (k = 0; k < L.input.n_dests; k++) CHECK(L.input.dests[k].rank < 2);
        wsync_plan_layout_free(&L);
    }
    TEST_END();
    TEST_BEGIN("layout qwen2.5-7b TP 8 (28 heads, 4 KV heads: shared slices)");
    if (layout("qwen2.5-7b", 8, 16, 2, 0, 0, &L)) {
        check_layout(&L, 2);
        wsync_plan_layout_free(&L);
    }
    TEST_END();
    TEST_BEGIN("layout kimi-k2 8 replicas x 16 fp8: experts 24 per rank, ~64 GB each");
    if (layout("kimi-k2", 256, 128, 8, 1, 0, &L)) {
        check_layout(&L, 8);
        for (k = 0; k < 128; k++) bytes += L.region_bytes[2 * k] + L.region_bytes[2 * k + 1];
        CHECK_MSG(bytes / 128 > 60000000000ull && bytes / 128 < 70000000000ull, "%llu per rank",
                  (unsigned long long)(bytes / 128));
        for (k = 1; k < 128; k++) CHECK_EQ_U64(L.region_bytes[2 * k], L.region_bytes[0]);
        wsync_plan_layout_free(&L);
    }
    TEST_END();
    TEST_BEGIN("layout errors");
    {
        wsync_plan_model m = model("qwen3-0.6b");
        wsync_plan_layout_options o;
        wsync_error e;
        memset(&o, 0, sizeof o);
        o.n_trainers = 4;
        o.n_inference = 6;
        o.replicas = 4;
        CHECK(wsync_plan_layout_model(&m, &o, &L, &e) == WSYNC_ERR_INVALID_ARGUMENT);
        CHECK(strstr(e.message, "replicas") != NULL);
        o.n_inference = 0;
        CHECK(wsync_plan_layout_model(&m, &o, &L, &e) == WSYNC_ERR_INVALID_ARGUMENT);
    }
    TEST_END();
}

/* ---- plans ---- */

/* Tasks write every destination byte of the input exactly once: their
   intervals do not overlap and add up to the destinations' bytes; each
   task's prep and NICs are in range; fp8 data tasks carry their scales. */
static void check_cover(const wsync_plan_layout *L, const wsync_plan *p)
{
    const wsync_plan_input *in = &L->input;
    ival *v = (ival *)malloc((size_t)p->n_tasks * sizeof *v);
    uint64_t i, want = 0, have = 0, data = 0, scales = 0;
    ival *ds = (ival *)malloc((size_t)p->n_tasks * sizeof *ds); /* data tasks: (prep, receiver), start */
    uint64_t nds = 0;
    int bad = 0, bad_start = 0;
    for (i = 0; i < in->n_units; i++) {
        const wsync_plan_unit *un = &in->units[i];
        uint64_t rows = 0, k, cols = in->pieces[un->first_piece].cols;
        for (k = un->first_piece; k < un->first_piece + un->n_pieces; k++) rows += in->pieces[k].rows;
        want += un->n_dests * rows * cols * (un->dtype == WSYNC_DTYPE_F8_E4M3 ? 1 : 2);
        if (un->dtype == WSYNC_DTYPE_F8_E4M3) want += un->n_dests * ((rows + 127) / 128) * ((cols + 127) / 128) * 4;
    }
    for (i = 0; i < p->n_tasks; i++) {
        const wsync_plan_task *t = &p->tasks[i];
        const wsync_plan_prep *pr = &p->preps[t->prep];
        v[i].key = (uint64_t)t->dst_rank * 4 + t->region;
        v[i].lo = t->dst_offset;
        v[i].hi = t->dst_offset + t->len;
        have += t->len;
        if (t->flags & WSYNC_PLAN_SCALES) {
            scales++;
            if (t->len != pr->scale_bytes || t->src_offset != pr->out_bytes) bad = 1;
        } else {
            data++;
            if (t->len != pr->out_bytes) bad = 1;
        }
        if (pr->rank != t->src_rank || t->src_nic >= p->nics_per_rank || t->dst_nic >= p->nics_per_rank) bad = 1;
        if (v[i].hi > L->region_bytes[2 * t->dst_rank + t->region]) bad = 1;
        if (i > 0 && p->tasks[i - 1].src_rank > t->src_rank) bad = 1;
        /* planned starts: ascending within a rank's group; the scales start with their data */
        if (i > 0 && p->tasks[i - 1].src_rank == t->src_rank && p->tasks[i - 1].group == t->group &&
            p->tasks[i - 1].start > t->start)
            bad_start = 1;
        if (!(t->flags & WSYNC_PLAN_SCALES)) {
            ds[nds].key = (uint64_t)t->prep << 32 | t->dst_rank;
            ds[nds].lo = t->start;
            ds[nds++].hi = 0;
        }
    }
    qsort(ds, (size_t)nds, sizeof *ds, ival_cmp);
    for (i = 0; i < p->n_tasks; i++)
        if (p->tasks[i].flags & WSYNC_PLAN_SCALES) { /* a data task of its preparation and receiver, same start */
            ival k;
            k.key = (uint64_t)p->tasks[i].prep << 32 | p->tasks[i].dst_rank;
            k.lo = p->tasks[i].start;
            k.hi = 0;
            if (!bsearch(&k, ds, (size_t)nds, sizeof *ds, ival_cmp)) bad_start = 1;
        }
    CHECK_MSG(!bad_start, "%s", "planned starts out of order, or scales not with their data");
    free(ds);
    qsort(v, (size_t)p->n_tasks, sizeof *v, ival_cmp);
    for (i = 1; i < p->n_tasks; i++)
        if (v[i].key == v[i - 1].key && v[i].lo < v[i - 1].hi) bad = 1;
    CHECK(!bad);
    CHECK_EQ_U64(have, want);
    for (i = 0; i < p->n_preps; i++) {
        const wsync_plan_prep *pr = &p->preps[i];
        if (pr->dtype == WSYNC_DTYPE_F8_E4M3) {
            CHECK(pr->flags & WSYNC_PLAN_QUANT);
            CHECK(pr->temp_bytes >= pr->out_bytes + pr->scale_bytes);
        }
        CHECK((pr->n_pieces > 1) == ((pr->flags & WSYNC_PLAN_FUSE) != 0));
    }
    if (scales) CHECK(scales <= data);
    free(v);
}

static void test_plans(void)
{
    wsync_plan_layout L;
    wsync_plan *p, *q;
    int shards, fp8;
    for (shards = 0; shards < 2; shards++)
        for (fp8 = 0; fp8 < 2; fp8++) {
            char name[120];
            snprintf(name, sizeof name, "plan qwen3-0.6b 4 -> 2x2 %s %s: every byte once, NICs 2",
                     shards ? "row shards" : "gather mesh", fp8 ? "fp8" : "bf16");
            TEST_BEGIN(name);
            if (layout("qwen3-0.6b", 4, 4, 2, fp8, shards, &L)) {
                p = build(&L, 2);
                CHECK(p != NULL);
                if (p) {
                    uint64_t i;
                    check_cover(&L, p);
                    if (shards) /* a holder sends what it holds; only strided or block-straddling slices gather */
                        for (i = 0; i < p->n_preps; i++) {
                            const wsync_plan_prep *pr = &p->preps[i];
                            const wsync_plan_piece *pc = &p->pieces[pr->first_piece];
                            const wsync_plan_source *s = &L.input.sources[pc->source];
                            uint64_t chunk = (s->rows + 3) / 4;
                            if (!(pr->flags & WSYNC_PLAN_GATHER)) {
                                CHECK_EQ_U64(pr->rank, pc->row0 / chunk);
                                CHECK(pc->cols == s->cols);
                            }
                        }
                    wsync_plan_free(p);
                }
                wsync_plan_layout_free(&L);
            }
            TEST_END();
        }

    TEST_BEGIN("plan is deterministic (digest of two builds), and differs when the input does");
    if (layout("qwen2.5-7b", 16, 8, 2, 1, 0, &L)) {
        p = build(&L, 2);
        q = build(&L, 2);
        CHECK(p && q);
        if (p && q) {
            CHECK_EQ_U64(wsync_plan_digest(p), wsync_plan_digest(q));
            CHECK(p->n_tasks == q->n_tasks && memcmp(p->tasks, q->tasks, (size_t)p->n_tasks * sizeof *p->tasks) == 0);
            check_cover(&L, p);
        }
        wsync_plan_free(q);
        q = build(&L, 1);
        if (p && q) CHECK(wsync_plan_digest(p) != wsync_plan_digest(q));
        wsync_plan_free(p);
        wsync_plan_free(q);
        wsync_plan_layout_free(&L);
    }
    TEST_END();
}

/* ---- kimi-k2 targets ---- */

/* Stable: each rank's tasks by destination rank, so every sender starts at
   receiver 0 and they queue there together. */
static int by_rank_group_dst(const void *a, const void *b)
{
    const wsync_plan_task *x = (const wsync_plan_task *)a, *y = (const wsync_plan_task *)b;
    if (x->src_rank != y->src_rank) return x->src_rank < y->src_rank ? -1 : 1;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    if (x->dst_rank != y->dst_rank) return x->dst_rank < y->dst_rank ? -1 : 1;
    if (x->dst_offset != y->dst_offset) return x->dst_offset < y->dst_offset ? -1 : 1;
    return x->flags < y->flags ? -1 : x->flags > y->flags;
}

/* Reorders the plan so that every sender starts with receiver 0; the
   prediction must exceed the (unchanged) bound by the factor. */
static int bad_order(wsync_plan *p, double factor)
{
    wsync_plan_sim_result good, bad;
    wsync_error e;
    int ok = 1;
    if (!sim(p, &good)) return 0;
    qsort(p->tasks, (size_t)p->n_tasks, sizeof *p->tasks, by_rank_group_dst);
    if (wsync_plan_reindex(p, &e) != WSYNC_OK || !sim(p, &bad)) return 0;
    if (bad.bound_seconds != good.bound_seconds) ok = 0;
    if (!(bad.seconds > factor * bad.bound_seconds)) ok = 0;
    if (!ok || check__is_verbose())
        printf("  badly ordered: predicted %.4f s, bound %.4f s (planned order %.4f s)\n", bad.seconds,
               bad.bound_seconds, good.seconds);
    return ok;
}


static int verbose_kimi(void)
{
    return check__is_verbose();
}

static double cpu_s(void)
{
    return (double)clock() / CLOCKS_PER_SEC;
}

static void test_kimi(uint32_t R)
{
    wsync_plan_layout L;
    wsync_plan *p, *q;
    wsync_plan_stats st;
    wsync_plan_sim_result r;
    char name[160];
    double t0, t1;
    snprintf(name, sizeof name,
             "kimi-k2 256 -> %u x %u fp8 at 400 Gb/s: plans in < 2 s, imbalance <= 1.05, predicted <= 1.25x bound, "
             "deterministic",
             R, 128 / R);
    TEST_BEGIN(name);
    t0 = cpu_s();
    if (!layout("kimi-k2", 256, 128, R, 1, 0, &L)) {
        CHECK(0);
        TEST_END();
        return;
    }
    p = build(&L, 1);
    t1 = cpu_s();
    CHECK(p != NULL);
    if (p) {
        wsync_plan_stats_get(p, &st);
        if (!SANITIZED) CHECK_MSG(t1 - t0 < 2.0, "planning took %.2f s of CPU", t1 - t0);
        CHECK_MSG(st.imbalance_send <= 1.05 && st.imbalance_recv <= 1.05, "send %.4f recv %.4f", st.imbalance_send,
                  st.imbalance_recv);
        CHECK(sim(p, &r));
        CHECK_MSG(r.seconds <= 1.25 * r.bound_seconds && r.seconds >= r.bound_seconds, "predicted %.4f bound %.4f",
                  r.seconds, r.bound_seconds);
        if (R == 8) /* each receiver about 64 GB: 1.29 s at 50 GB/s */
            CHECK_MSG(r.bound_seconds > 1.25 && r.bound_seconds < 1.35, "bound %.4f", r.bound_seconds);
        else
            CHECK_MSG(r.bound_seconds > 0.12 && r.bound_seconds < 0.25, "bound %.4f", r.bound_seconds);
        if (verbose_kimi())
            printf("  kimi-k2 R=%u: plan %.3f s CPU, %llu tasks, imbalance %.4f/%.4f, bound %.4f, predicted %.4f\n", R,
                   t1 - t0, (unsigned long long)st.tasks, st.imbalance_send, st.imbalance_recv, r.bound_seconds,
                   r.seconds);
        if (R == 8) { /* paced, the replay keeps the plan: at most 1.05x the bound (issue 25) */
            wsync_plan_sim_result pr;
            CHECK(sim_paced(p, &pr));
            CHECK_MSG(pr.seconds <= 1.05 * pr.bound_seconds && pr.seconds >= pr.bound_seconds,
                      "paced %.4f bound %.4f (first come, first served %.4f)", pr.seconds, pr.bound_seconds,
                      r.seconds);
            if (verbose_kimi()) printf("  kimi-k2 R=8 paced: predicted %.4f\n", pr.seconds);
        }
        if (R == 8) CHECK(bad_order(p, 1.5)); /* every sender to receiver 0 first */
        if (R == 1) {
            q = build(&L, 1);
            CHECK(q && wsync_plan_digest(p) == wsync_plan_digest(q));
            wsync_plan_free(q);
        }
        wsync_plan_free(p);
    }
    wsync_plan_layout_free(&L);
    TEST_END();
}

/* ---- the simulation is not bytes over bandwidth ---- */

static void test_sim(void)
{
    wsync_plan_layout L;
    wsync_plan *p;
    wsync_plan_sim_result good, bad;
    wsync_error e;
    TEST_BEGIN("simulation: qwen2.5-7b 8 -> 4: the plan's order within 1.25x of the bound, everyone to receiver 0 first slower");
    if (layout("qwen2.5-7b", 8, 4, 1, 0, 0, &L) && (p = build(&L, 1)) != NULL) {
        CHECK(sim(p, &good));
        CHECK_MSG(good.seconds <= 1.25 * good.bound_seconds, "planned %.4f bound %.4f", good.seconds,
                  good.bound_seconds);
        CHECK(bad_order(p, 1.0));
        wsync_plan_free(p);
        wsync_plan_layout_free(&L);
    } else
        CHECK(0);
    TEST_END();

    TEST_BEGIN("simulation: an unbalanced schedule (one sender does half the work) predicts its busiest NIC");
    if (layout("qwen2.5-7b", 8, 4, 1, 0, 0, &L) && (p = build(&L, 1)) != NULL) {
        uint64_t i;
        CHECK(sim(p, &good));
        for (i = 0; i < p->n_tasks; i++) /* ranks 0..3's tasks all move to rank 0 */
            if (p->tasks[i].src_rank < 4) {
                p->tasks[i].src_rank = 0;
                p->preps[p->tasks[i].prep].rank = 0;
            }
        CHECK(wsync_plan_reindex(p, &e) == WSYNC_OK);
        CHECK(sim(p, &bad));
        CHECK(bad.bound_seconds > 1.5 * good.bound_seconds);
        CHECK(bad.seconds >= bad.bound_seconds);
        CHECK(bad.seconds > 1.5 * good.seconds);
        wsync_plan_free(p);
        wsync_plan_layout_free(&L);
    } else
        CHECK(0);
    TEST_END();

    TEST_BEGIN("simulation: paced, the replay keeps the plan's start times; slower pacing, slower steps");
    {
        static const char *models[3] = {"qwen2.5-7b", "qwen3-0.6b", "qwen2.5-7b"};
        int mi;
        for (mi = 0; mi < 3; mi++) { /* bf16; fp8 with scales; row shards without a gather */
            if (!layout(models[mi], 8, 4, 1, mi == 1, mi == 2, &L) || (p = build(&L, 1)) == NULL) {
                CHECK(0);
                continue;
            }
            {
                wsync_plan_sim_options o;
                wsync_plan_sim_result a, b, f;
                double span[WSYNC_PLAN_SIM_GROUPS] = {0}, last[WSYNC_PLAN_SIM_GROUPS] = {0}, sum = 0, lsum = 0;
                uint64_t i;
                uint32_t g;
                for (i = 0; i < p->n_tasks; i++) { /* the plan's makespan per group, at 400 Gb/s */
                    const wsync_plan_task *t = &p->tasks[i];
                    double end = ((double)t->start + (double)t->len + 250000.0) / 50e9;
                    if (t->group >= WSYNC_PLAN_SIM_GROUPS) continue;
                    if (end > span[t->group]) span[t->group] = end;
                    if ((double)t->start > last[t->group]) last[t->group] = (double)t->start;
                }
                CHECK(sim(p, &f));
                CHECK(sim_paced(p, &a));
                memset(&o, 0, sizeof o);
                o.pace_gbps = 40; /* ten times slower than the line */
                CHECK(wsync_plan_simulate(p, &o, &b, &e) == WSYNC_OK);
                for (g = 0; g < a.n_groups && g < WSYNC_PLAN_SIM_GROUPS; g++) {
                    CHECK_MSG(a.group_seconds[g] >= span[g] * 0.999 && a.group_seconds[g] <= span[g] * 1.02,
                              "%s group %u: paced %.6f s, the plan's makespan %.6f s", models[mi], g,
                              a.group_seconds[g], span[g]);
                    sum += span[g];
                    lsum += last[g] / 5e9;
                }
                CHECK_MSG(b.seconds >= lsum && b.seconds > a.seconds, "%s: paced at 40 Gb/s %.6f s, its last starts %.6f s",
                          models[mi], b.seconds, lsum);
                if (verbose_kimi())
                    printf("  %s: plan %.6f s, paced %.6f s, first come %.6f s, paced at 40 Gb/s %.6f s\n",
                           models[mi], sum, a.seconds, f.seconds, b.seconds);
            }
            wsync_plan_free(p);
            wsync_plan_layout_free(&L);
        }
    }
    TEST_END();

    TEST_BEGIN("simulation: barriers add up, start-up costs count, the watermark holds");
    if (layout("qwen3-0.6b", 8, 4, 1, 1, 0, &L) && (p = build(&L, 1)) != NULL) {
        wsync_plan_sim_options o;
        wsync_plan_sim_result a, b, c;
        wsync_plan_stats st;
        uint64_t i;
        wsync_plan_stats_get(p, &st);
        memset(&o, 0, sizeof o);
        o.task_us = -1;
        o.barrier_us = -1;
        CHECK(wsync_plan_simulate(p, &o, &a, &e) == WSYNC_OK);
        o.task_us = 100;
        CHECK(wsync_plan_simulate(p, &o, &b, &e) == WSYNC_OK);
        /* every receiver NIC serializes its tasks: at least its count times 100 us more */
        CHECK(b.seconds >= a.seconds + 95e-6 * (double)(st.tasks / (4 * p->nics_per_rank)));
        memset(&o, 0, sizeof o);
        o.watermark = st.temp_max;
        CHECK(wsync_plan_simulate(p, &o, &c, &e) == WSYNC_OK);
        /* over the watermark only where every rank would wait forever otherwise */
        CHECK_MSG(c.peak_temp <= st.temp_max || c.watermark_overruns > 0, "peak %llu over %llu",
                  (unsigned long long)c.peak_temp, (unsigned long long)st.temp_max);
        CHECK(c.peak_temp <= 2 * st.temp_max);
        CHECK(sim(p, &a));
        CHECK(c.seconds >= a.seconds);
        for (i = 0; i < p->n_tasks; i++) p->tasks[i].group = 1; /* an empty group 0 still costs its barrier */
        for (i = 0; i < p->n_preps; i++) p->preps[i].group = 1;
        p->n_groups = 2;
        CHECK(sim(p, &b));
        CHECK(b.n_groups == 2 && b.group_seconds[0] == 0);
        CHECK(b.seconds > a.seconds);
        wsync_plan_free(p);
        wsync_plan_layout_free(&L);
    } else
        CHECK(0);
    TEST_END();
}

/* ---- cpus: ranks sharing the cores of one host ---- */

/* Two trainers, one inference rank, one NIC each: each trainer quantizes
   1 MB of bf16 (1 ms at 8 Gb/s) and writes its 0.5 MB (0.5 ms at 8 Gb/s),
   no start-up cost, receivers no resource. Each rank on its own core: 1.5
   ms. On one core: 2 ms of quantizing plus 1 ms of writing at half a core
   each (two senders on one core) = 2.5 ms; on two cores 3 ms / 2 = 1.5 ms,
   the replay's. */
static void test_sim_cpus(void)
{
    wsync_plan_prep pr[2];
    wsync_plan_task tk[2];
    uint64_t first[3] = {0, 1, 2}, sb[2] = {500000, 500000}, rb[1] = {1000000};
    wsync_plan p;
    wsync_plan_sim_options o;
    wsync_plan_sim_result r;
    wsync_error e;
    unsigned i;
    TEST_BEGIN("simulation: cpus, two ranks quantizing on one core take their CPU work, on two the replay");
    memset(pr, 0, sizeof pr);
    memset(tk, 0, sizeof tk);
    memset(&p, 0, sizeof p);
    for (i = 0; i < 2; i++) {
        pr[i].rank = i;
        pr[i].flags = WSYNC_PLAN_QUANT;
        pr[i].dtype = WSYNC_DTYPE_F8_E4M3;
        pr[i].src_bytes = 1000000;
        pr[i].out_bytes = pr[i].temp_bytes = 500000;
        pr[i].n_tasks = 1;
        tk[i].prep = i;
        tk[i].src_rank = i;
        tk[i].dst_offset = 500000 * (uint64_t)i;
        tk[i].len = 500000;
    }
    p.n_trainers = 2;
    p.n_inference = 1;
    p.nics_per_rank = 1;
    p.n_groups = 1;
    p.preps = pr;
    p.n_preps = 2;
    p.tasks = tk;
    p.n_tasks = 2;
    p.rank_first = first;
    p.send_bytes = sb;
    p.recv_bytes = rb;
    memset(&o, 0, sizeof o);
    o.nic_gbps = 8;
    o.quant_gbps = 8;
    o.task_us = -1;
    o.recv_gbps = -1;
    CHECK(wsync_plan_simulate(&p, &o, &r, &e) == WSYNC_OK);
    CHECK_MSG(fabs(r.seconds - 1.5e-3) < 1e-12 && r.cpu_seconds == 0, "%.9f s", r.seconds);
    o.cpus = 1;
    CHECK(wsync_plan_simulate(&p, &o, &r, &e) == WSYNC_OK);
    CHECK_MSG(fabs(r.seconds - 2.5e-3) < 1e-12 && fabs(r.cpu_seconds - 2.5e-3) < 1e-12, "%.9f s, cpu %.9f s",
              r.seconds, r.cpu_seconds);
    o.cpus = 2;
    CHECK(wsync_plan_simulate(&p, &o, &r, &e) == WSYNC_OK);
    CHECK_MSG(fabs(r.seconds - 1.5e-3) < 1e-12 && fabs(r.cpu_seconds - 1.5e-3) < 1e-12, "%.9f s, cpu %.9f s",
              r.seconds, r.cpu_seconds);
    o.cpus = 4; /* more cores than work: the replay */
    CHECK(wsync_plan_simulate(&p, &o, &r, &e) == WSYNC_OK);
    CHECK_MSG(fabs(r.seconds - 1.5e-3) < 1e-12 && fabs(r.cpu_seconds - 0.75e-3) < 1e-12, "%.9f s, cpu %.9f s",
              r.seconds, r.cpu_seconds);
    TEST_END();

    /* Plain writes of 0.5 MB, nic_gbps = 8 measured with both trainers
       writing at once on one core: a core writes 16 Gb/s. One group: 1 MB
       of writes on one core, 0.5 ms. Two groups of one sender each (mesh
       groups): each sender has the core to itself, 0.25 ms a group, 0.5 ms
       in all; counted at the rate measured with both writing it would be
       twice that. */
    TEST_BEGIN("simulation: cpus and nic_senders, a mesh group of fewer senders writes on the cores they leave");
    for (i = 0; i < 2; i++) {
        pr[i].flags = 0;
        pr[i].dtype = WSYNC_DTYPE_BF16;
        pr[i].temp_bytes = 0;
    }
    memset(&o, 0, sizeof o);
    o.nic_gbps = 8;
    o.task_us = -1;
    o.barrier_us = -1;
    o.recv_gbps = -1;
    o.cpus = 1;
    o.nic_senders = 2;
    CHECK(wsync_plan_simulate(&p, &o, &r, &e) == WSYNC_OK);
    CHECK_MSG(fabs(r.seconds - 0.5e-3) < 1e-12 && fabs(r.cpu_seconds - 0.5e-3) < 1e-12, "one group: %.9f s, cpu %.9f s",
              r.seconds, r.cpu_seconds);
    pr[1].group = tk[1].group = 1;
    p.n_groups = 2;
    CHECK(wsync_plan_simulate(&p, &o, &r, &e) == WSYNC_OK);
    CHECK_MSG(fabs(r.seconds - 0.5e-3) < 1e-12 && fabs(r.group_seconds[0] - 0.25e-3) < 1e-12 &&
                  fabs(r.group_seconds[1] - 0.25e-3) < 1e-12,
              "two groups: %.9f s (%.9f + %.9f)", r.seconds, r.group_seconds[0], r.group_seconds[1]);
    o.nic_senders = 0; /* nic_gbps as each group's own senders' rate */
    CHECK(wsync_plan_simulate(&p, &o, &r, &e) == WSYNC_OK);
    CHECK_MSG(fabs(r.seconds - 1e-3) < 1e-12, "two groups, nic_senders 0: %.9f s", r.seconds);
    o.cpus = 0; /* without cpus, nic_senders changes nothing */
    o.nic_senders = 2;
    CHECK(wsync_plan_simulate(&p, &o, &r, &e) == WSYNC_OK);
    CHECK_MSG(fabs(r.seconds - 1e-3) < 1e-12, "two groups, cpus 0: %.9f s", r.seconds);
    TEST_END();
}

/* Layout, plan and simulation of qwen3-0.6b fp8 with the n-th allocation
   failing, for every n until one run succeeds (with fetches, if asked):
   each failure is reported as out of memory and nothing leaks. */
static void alloc_failures(uint32_t T, int shards, uint32_t nics, int need_fetches)
{
    long n;
    int failures = 0, leaks = 0, succeeded = 0;
    wsync_error e;
    for (n = 1; n < 400 && !succeeded; n++) {
        counting c;
        wsync_plan_layout L;
        wsync_plan_layout_options lo;
        wsync_plan_options o;
        wsync_plan *p;
        wsync_plan_model m = model("qwen3-0.6b");
        wsync_result r;
        memset(&c, 0, sizeof c);
        c.fail_at = n;
        memset(&lo, 0, sizeof lo);
        lo.allocator = counting_allocator(&c);
        lo.n_trainers = T;
        lo.n_inference = 2;
        lo.fp8 = 1;
        lo.shards_only = (uint32_t)shards;
        r = wsync_plan_layout_model(&m, &lo, &L, &e);
        if (r == WSYNC_OK) {
            memset(&o, 0, sizeof o);
            o.allocator = lo.allocator;
            o.nics_per_rank = nics;
            r = wsync_plan_build(&L.input, &o, &p, &e);
            if (r == WSYNC_OK) {
                wsync_plan_sim_options so;
                wsync_plan_sim_result sr;
                memset(&so, 0, sizeof so);
                so.allocator = lo.allocator;
                r = wsync_plan_simulate(p, &so, &sr, &e);
                if (r == WSYNC_OK) succeeded = !need_fetches || p->n_fetches > 0;
                wsync_plan_free(p);
            }
            wsync_plan_layout_free(&L);
        }
        if (r != WSYNC_OK && r != WSYNC_ERR_OUT_OF_MEMORY) failures++;
        if (c.allocs != c.frees) leaks++;
    }
    CHECK(succeeded);
    CHECK_EQ_INT(failures, 0);
    CHECK_EQ_INT(leaks, 0);
}

/* ---- fetches: fp8 tiles across row shards ---- */

/* Every FETCH preparation's rows come from fetches that partition them,
   each from the rank whose torch.chunk shard holds those rows, the
   gatherer's own rows included; no other preparation is fetched for; each
   holder's fetches go to gatherers in the rotation after it. */
static void check_fetches(const wsync_plan_layout *L, const wsync_plan *p, uint32_t K)
{
    uint64_t i, *got = (uint64_t *)calloc(p->n_preps ? p->n_preps : 1, sizeof *got);
    int bad_holder = 0, bad_range = 0, bad_order = 0, bad_nic = 0, self = 0, fetch_preps = 0, bad_flags = 0;
    uint32_t T = p->n_trainers;
    CHECK(got != NULL);
    if (!got) return;
    for (i = 0; i < p->n_fetches; i++) {
        const wsync_plan_fetch *f = &p->fetches[i];
        const wsync_plan_prep *pr = &p->preps[f->prep];
        const wsync_plan_piece *pc = &p->pieces[f->piece];
        const wsync_plan_source *s = &L->input.sources[pc->source];
        const wsync_plan_mesh *m = &L->input.meshes[s->mesh];
        uint64_t chunk = (s->rows + m->count - 1) / m->count;
        if (!(pr->flags & WSYNC_PLAN_FETCH)) bad_flags++;
        if (f->holder != m->first + f->row0 / chunk || (f->row0 + f->rows - 1) / chunk != f->row0 / chunk) bad_holder++;
        if (f->piece < pr->first_piece || f->piece >= pr->first_piece + pr->n_pieces || f->row0 < pc->row0 ||
            f->row0 + f->rows > pc->row0 + pc->rows || f->len != f->rows * pc->cols * 2 ||
            f->dst_offset + f->len > pr->src_bytes)
            bad_range++;
        if (f->src_nic >= K || f->dst_nic >= K) bad_nic++;
        if (f->holder == pr->rank) self++;
        got[f->prep] += f->rows;
        if (i > 0) {
            const wsync_plan_fetch *q = &p->fetches[i - 1];
            uint32_t d = (pr->rank + T - f->holder) % T, dq = (p->preps[q->prep].rank + T - q->holder) % T;
            if (q->holder > f->holder || (q->holder == f->holder && dq > d)) bad_order++;
        }
    }
    for (i = 0; i < p->n_preps; i++) {
        const wsync_plan_prep *pr = &p->preps[i];
        if (!(pr->flags & WSYNC_PLAN_FETCH)) {
            if (got[i]) bad_flags++;
            continue;
        }
        fetch_preps++;
        if (got[i] != pr->rows || !(pr->flags & WSYNC_PLAN_GATHER) || !(pr->flags & WSYNC_PLAN_QUANT)) bad_range++;
    }
    CHECK_EQ_INT(bad_flags, 0);
    CHECK_EQ_INT(bad_holder, 0);
    CHECK_EQ_INT(bad_range, 0);
    CHECK_EQ_INT(bad_nic, 0);
    CHECK_EQ_INT(bad_order, 0);
    CHECK_MSG(self == fetch_preps, "%d fetches from the gatherer itself, %d fetching preparations", self, fetch_preps);
    free(got);
}

static void test_fetches(void)
{
    wsync_plan_layout L;
    wsync_plan *p;
    wsync_plan_sim_result r;
    wsync_error e;
    TEST_BEGIN("fetches: qwen3-0.6b fp8 from 3 row shards, tiles across shard boundaries gathered by fetches");
    if (layout("qwen3-0.6b", 3, 2, 1, 1, 1, &L)) {
        if ((p = build(&L, 2)) != NULL) {
            wsync_plan_stats st;
            wsync_plan_stats_get(p, &st);
            CHECK(p->n_fetches > 0);
            CHECK_EQ_U64(st.fetches, p->n_fetches);
            check_fetches(&L, p, 2);
            check_cover(&L, p);
            CHECK(sim(p, &r));
            CHECK_MSG(r.fetch_seconds > 0 && r.seconds > r.fetch_seconds, "%.6f s, gather phases %.6f s", r.seconds,
                      r.fetch_seconds);
            wsync_plan_free(p);
        }
        wsync_plan_layout_free(&L);
    }
    TEST_END();

    TEST_BEGIN("fetches: none where shards end on tile boundaries (4 shards of 128-row multiples) or ranks hold replicas");
    if (layout("qwen3-0.6b", 4, 2, 1, 1, 1, &L)) {
        if ((p = build(&L, 1)) != NULL) {
            uint64_t i;
            int fetch = 0;
            for (i = 0; i < p->n_preps; i++) fetch += (p->preps[i].flags & WSYNC_PLAN_FETCH) != 0;
            CHECK_EQ_U64(p->n_fetches, 0);
            CHECK_EQ_INT(fetch, 0);
            CHECK(sim(p, &r) && r.fetch_seconds == 0);
            wsync_plan_free(p);
        }
        wsync_plan_layout_free(&L);
    }
    if (layout("qwen3-0.6b", 3, 2, 1, 1, 0, &L)) {
        if ((p = build(&L, 1)) != NULL) {
            CHECK_EQ_U64(p->n_fetches, 0);
            wsync_plan_free(p);
        }
        wsync_plan_layout_free(&L);
    }
    TEST_END();

    /* By hand: rank 0 quantizes 1 MB that ranks 0 and 1 hold half each, and
       writes the 0.5 MB of fp8. At 8 Gb/s (1 GB/s): the two fetches share
       rank 0's receiving NIC, 0.5 ms each, 1 ms; a 50 us barrier; quantizing
       1 ms (no copy: the fetches assembled the buffer); the write 0.5 ms:
       2.55 ms. With receivers no resource the fetches overlap: 2.05 ms. */
    TEST_BEGIN("fetches: the gather phase in the simulator, its barrier, no copy after it");
    {
        wsync_plan_prep pr;
        wsync_plan_task tk;
        wsync_plan_fetch fe[2];
        wsync_plan_piece pc;
        uint64_t first[3] = {0, 1, 1}, sb[2] = {500000, 0}, rb[1] = {500000};
        wsync_plan pl;
        wsync_plan_sim_options o;
        unsigned i;
        memset(&pr, 0, sizeof pr);
        memset(&tk, 0, sizeof tk);
        memset(fe, 0, sizeof fe);
        memset(&pc, 0, sizeof pc);
        memset(&pl, 0, sizeof pl);
        pc.rows = 2;
        pc.cols = 250000;
        pr.flags = WSYNC_PLAN_GATHER | WSYNC_PLAN_QUANT | WSYNC_PLAN_FETCH;
        pr.dtype = WSYNC_DTYPE_F8_E4M3;
        pr.rows = 2;
        pr.cols = 250000;
        pr.n_pieces = 1;
        pr.src_bytes = 1000000;
        pr.out_bytes = 500000;
        pr.temp_bytes = 1500000;
        pr.n_tasks = 1;
        tk.len = 500000;
        for (i = 0; i < 2; i++) {
            fe[i].holder = i;
            fe[i].row0 = i;
            fe[i].rows = 1;
            fe[i].dst_offset = 500000 * (uint64_t)i;
            fe[i].len = 500000;
        }
        pl.n_trainers = 2;
        pl.n_inference = 1;
        pl.nics_per_rank = 1;
        pl.n_groups = 1;
        pl.preps = &pr;
        pl.n_preps = 1;
        pl.pieces = &pc;
        pl.n_pieces = 1;
        pl.tasks = &tk;
        pl.n_tasks = 1;
        pl.rank_first = first;
        pl.send_bytes = sb;
        pl.recv_bytes = rb;
        pl.fetches = fe;
        pl.n_fetches = 2;
        memset(&o, 0, sizeof o);
        o.nic_gbps = 8;
        o.copy_gbps = 0.001; /* a copy would take 8 s */
        o.quant_gbps = 8;
        o.task_us = -1;
        o.barrier_us = 50;
        CHECK(wsync_plan_simulate(&pl, &o, &r, &e) == WSYNC_OK);
        CHECK_MSG(fabs(r.seconds - 2.55e-3) < 1e-12 && fabs(r.fetch_seconds - 1.05e-3) < 1e-12 &&
                      fabs(r.group_seconds[0] - 2.55e-3) < 1e-12,
                  "%.9f s, gather phase %.9f s, group %.9f s", r.seconds, r.fetch_seconds, r.group_seconds[0]);
        o.recv_gbps = -1;
        CHECK(wsync_plan_simulate(&pl, &o, &r, &e) == WSYNC_OK);
        CHECK_MSG(fabs(r.seconds - 2.05e-3) < 1e-12 && fabs(r.fetch_seconds - 0.55e-3) < 1e-12,
                  "receivers no resource: %.9f s, gather phase %.9f s", r.seconds, r.fetch_seconds);
        pr.flags &= ~WSYNC_PLAN_FETCH; /* without the flag, the gather is a copy again: 8 s */
        pl.n_fetches = 0;
        CHECK(wsync_plan_simulate(&pl, &o, &r, &e) == WSYNC_OK);
        CHECK_MSG(r.seconds > 7.9 && r.fetch_seconds == 0, "as a copy: %.9f s", r.seconds);
    }
    TEST_END();

    TEST_BEGIN("fetches: every allocation failure is reported and leaks nothing");
    alloc_failures(3, 1, 1, 1);
    TEST_END();
}

/* ---- input checks and allocation failures ---- */

static void test_errors(void)
{
    wsync_plan_source src[2];
    wsync_plan_mesh mesh;
    wsync_plan_piece pc[2];
    wsync_plan_dest ds[2];
    wsync_plan_unit un;
    wsync_plan_input in;
    wsync_plan_options o;
    wsync_plan *p = NULL;
    wsync_error e;
    TEST_BEGIN("input checks name what is wrong");
    memset(src, 0, sizeof src);
    memset(&mesh, 0, sizeof mesh);
    memset(pc, 0, sizeof pc);
    memset(ds, 0, sizeof ds);
    memset(&un, 0, sizeof un);
    memset(&in, 0, sizeof in);
    src[0].rows = 256;
    src[0].cols = 64;
    src[0].dtype = WSYNC_DTYPE_BF16;
    src[1] = src[0];
    src[1].cols = 32;
    mesh.count = 4;
    mesh.gather = 1;
    pc[0].source = 0;
    pc[0].rows = 256;
    pc[0].cols = 64;
    pc[1] = pc[0];
    ds[1].rank = 1;
    un.n_pieces = 1;
    un.n_dests = 2;
    un.dtype = WSYNC_DTYPE_F8_E4M3;
    in.n_trainers = 4;
    in.n_inference = 2;
    in.sources = src;
    in.n_sources = 2;
    in.meshes = &mesh;
    in.n_meshes = 1;
    in.pieces = pc;
    in.n_pieces = 1;
    in.dests = ds;
    in.n_dests = 2;
    in.units = &un;
    in.n_units = 1;
    CHECK(wsync_plan_build(&in, NULL, &p, &e) == WSYNC_OK);
    if (p) {
        CHECK_EQ_U64(p->n_tasks, 4); /* data and scales to 2 ranks */
        CHECK(p->preps[0].scale_bytes == 2 * 1 * 4);
        wsync_plan_free(p);
    }
    pc[0].row0 = 1; /* past the end */
    CHECK(wsync_plan_build(&in, NULL, &p, &e) == WSYNC_ERR_OUT_OF_BOUNDS && p == NULL);
    CHECK(strstr(e.message, "piece 0") != NULL);
    pc[0].row0 = 0;
    pc[1].source = 1;
    pc[1].cols = 32;
    in.n_pieces = 2;
    un.n_pieces = 2;
    CHECK(wsync_plan_build(&in, NULL, &p, &e) == WSYNC_ERR_SIZE_MISMATCH);
    un.n_pieces = 1;
    ds[1].rank = 2;
    CHECK(wsync_plan_build(&in, NULL, &p, &e) == WSYNC_ERR_OUT_OF_BOUNDS);
    ds[1].rank = 1;
    un.dtype = WSYNC_DTYPE_F16;
    CHECK(wsync_plan_build(&in, NULL, &p, &e) == WSYNC_ERR_UNSUPPORTED);
    un.dtype = WSYNC_DTYPE_BF16;
    mesh.count = 5;
    CHECK(wsync_plan_build(&in, NULL, &p, &e) == WSYNC_ERR_OUT_OF_BOUNDS);
    mesh.count = 4;
    memset(&o, 0, sizeof o);
    o.max_tasks = 1;
    CHECK(wsync_plan_build(&in, &o, &p, &e) == WSYNC_ERR_LIMIT);
    o.max_tasks = 0;
    o.nics_per_rank = WSYNC_PLAN_MAX_NICS + 1;
    CHECK(wsync_plan_build(&in, &o, &p, &e) == WSYNC_ERR_INVALID_ARGUMENT);
    src[0].rows = UINT64_MAX / 2;
    CHECK(wsync_plan_build(&in, NULL, &p, &e) == WSYNC_ERR_OVERFLOW);
    CHECK(wsync_plan_build(NULL, NULL, &p, &e) == WSYNC_ERR_INVALID_ARGUMENT);
    TEST_END();

    TEST_BEGIN("every allocation failure is reported and leaks nothing");
    alloc_failures(4, 0, 2, 0);
    TEST_END();
}

/* issue 25: the controller's planner input from what ranks declare */
static wsync_ctl_tensor pi_t(const char *name, uint64_t rows, uint64_t cols, uint64_t rb, uint64_t rc, uint64_t off)
{
    wsync_ctl_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = WSYNC_DTYPE_BF16;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.row_begin = rb;
    t.row_count = rc;
    t.offset = off;
    return t;
}

static void test_ctl_input(void)
{
    /* 3 trainers: "a" (10 x 4) as torch.chunk shards 4, 4, 2; "b" (2 x 8)
       whole at ranks 1 and 2; 2 inference ranks: a whole at both, b's
       columns [0, 4) at rank 0 in fp8, b whole at rank 1 */
    wsync_ctl_tensor t0[1], t1[2], t2[2], i0[2], i1[2];
    const wsync_ctl_tensor *tl[5];
    uint32_t nl[5] = {1, 2, 2, 2, 2};
    wsync_ctl_plan_input pi;
    wsync_plan *p = NULL, *q = NULL;
    wsync_plan_options po;
    wsync_error e;
    TEST_BEGIN("controller input: torch.chunk shards and replicas become meshes, equal entries one unit");
    t0[0] = pi_t("a", 10, 4, 0, 4, 0);
    t1[0] = pi_t("a", 10, 4, 4, 4, 0);
    t1[1] = pi_t("b", 2, 8, 0, 2, 64);
    t2[0] = pi_t("b", 2, 8, 0, 2, 0);
    t2[1] = pi_t("a", 10, 4, 8, 2, 64);
    i0[0] = pi_t("a", 10, 4, 0, 10, 0);
    i0[1] = pi_t("b", 2, 8, 0, 2, 128);
    i0[1].col_count = 4;
    i0[1].to_dtype = WSYNC_DTYPE_F8_E4M3;
    i0[1].block = 0;
    i0[1].scale_offset = 200;
    i1[0] = pi_t("b", 2, 8, 0, 2, 0);
    i1[1] = pi_t("a", 10, 4, 0, 10, 64);
    tl[0] = t0, tl[1] = t1, tl[2] = t2, tl[3] = i0, tl[4] = i1;
    CHECK_MSG(wsync_ctl_plan_input_build(tl, nl, 3, 2, NULL, &pi, &e) == WSYNC_OK, "%s", e.message);
    CHECK_EQ_U64(pi.input.n_sources, 2);
    CHECK_EQ_U64(pi.input.n_meshes, 2);
    CHECK_EQ_U64(pi.input.n_units, 3);
    CHECK_EQ_U64(pi.input.n_dests, 4);
    if (pi.input.n_meshes == 2 && pi.input.n_units == 3) {
        CHECK(pi.input.meshes[0].gather == 0 && pi.input.meshes[0].first == 0 && pi.input.meshes[0].count == 3);
        CHECK(pi.input.meshes[1].gather == 2 && pi.input.meshes[1].first == 1 && pi.input.meshes[1].count == 2);
        CHECK(pi.input.units[0].n_dests == 2 && pi.input.units[0].dtype == WSYNC_DTYPE_BF16); /* a */
        CHECK(pi.input.units[1].n_dests == 1 && pi.input.units[1].dtype == WSYNC_DTYPE_F8_E4M3); /* b's slice */
        CHECK_EQ_U64(pi.holder_entry[0 * 3 + 2], 1);
        memset(&po, 0, sizeof po);
        CHECK(wsync_plan_build(&pi.input, &po, &p, &e) == WSYNC_OK);
        CHECK(wsync_plan_build(&pi.input, &po, &q, &e) == WSYNC_OK);
        if (p && q) {
            uint64_t k;
            CHECK(wsync_plan_digest(p) == wsync_plan_digest(q));
            for (k = 0; k < p->n_tasks; k++) { /* "a" from its holders, "b" from rank 1 or 2 */
                const wsync_plan_prep *pr = &p->preps[p->tasks[k].prep];
                CHECK(pr->unit == 0 ? pr->flags == 0 : pr->rank >= 1);
            }
        }
        wsync_plan_free(p);
        wsync_plan_free(q);
    }
    wsync_ctl_plan_input_free(&pi);
    /* rows that are neither whole nor torch.chunk shards: not modelled */
    t1[0] = pi_t("a", 10, 4, 4, 3, 0);
    t2[1] = pi_t("a", 10, 4, 7, 3, 64);
    CHECK(wsync_ctl_plan_input_build(tl, nl, 3, 2, NULL, &pi, &e) == WSYNC_ERR_UNSUPPORTED &&
          strstr(e.message, "'a'") != NULL);
    /* a tensor no trainer holds */
    t1[0] = pi_t("a", 10, 4, 4, 4, 0);
    t2[1] = pi_t("a", 10, 4, 8, 2, 64);
    i1[0].name = "c";
    CHECK(wsync_ctl_plan_input_build(tl, nl, 3, 2, NULL, &pi, &e) == WSYNC_ERR_UNSUPPORTED &&
          strstr(e.message, "'c'") != NULL);
    TEST_END();
}

int main(void)
{
    test_models();
    test_layouts();
    test_plans();
    test_sim();
    test_sim_cpus();
    test_fetches();
    test_errors();
    test_ctl_input();
    test_kimi(1);
    test_kimi(8);
    return check_summary();
}
