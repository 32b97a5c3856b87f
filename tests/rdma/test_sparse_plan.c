/* The sparse step's model in wsync_rdma.h (wsync_plan_sparse_simulate):
   the breakdown by phase sums to the total and names the largest phase;
   the prediction never falls as the densities rise or the rates fall;
   regions go dense above the threshold (given, or where the rates break
   even) and past the staging, and everything goes dense when everything
   changed; receivers that digest everything take longer; the fetches of
   a plan of row shards are counted; one host's ranks share its cores
   (a phase at least all ranks' work over them, a rank's hidden behind the
   others' adding nothing) and a dense step keeps a base; bad options are
   refused by name;
   allocation failures leak nothing; Kimi-K2 (256 -> 8 x 16, fp8) at the
   measured densities: faster than the dense step at the default rates,
   within 0.1 s at a GPU's memory rate. */
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
    if (p) c->frees++;
    free(p);
}

/* A model's plan: T trainers to I inference ranks in R replicas. */
static wsync_plan *plan_of(const char *name, uint32_t T, uint32_t I, uint32_t R, int fp8, int shards)
{
    wsync_plan_model m;
    wsync_plan_layout_options lo;
    wsync_plan_layout L;
    wsync_plan_options po;
    wsync_plan *p = NULL;
    wsync_error e;
    memset(&lo, 0, sizeof lo);
    memset(&po, 0, sizeof po);
    lo.n_trainers = T;
    lo.n_inference = I;
    lo.replicas = R;
    lo.fp8 = (uint32_t)fp8;
    lo.shards_only = (uint32_t)shards;
    po.nics_per_rank = 1;
    if (wsync_plan_model_lookup(name, &m, &e) != WSYNC_OK || wsync_plan_layout_model(&m, &lo, &L, &e) != WSYNC_OK) {
        printf("layout %s: %s\n", name, e.message);
        return NULL;
    }
    if (wsync_plan_build(&L.input, &po, &p, &e) != WSYNC_OK) printf("build %s: %s\n", name, e.message);
    wsync_plan_layout_free(&L);
    return p;
}

static wsync_plan_sparse_options dens(double bf16, double fp8_bytes, double fp8_scales)
{
    wsync_plan_sparse_options o;
    memset(&o, 0, sizeof o);
    o.bf16 = bf16 > 0 ? bf16 : -1;
    o.fp8_bytes = fp8_bytes > 0 ? fp8_bytes : -1;
    o.fp8_scales = fp8_scales > 0 ? fp8_scales : -1;
    return o;
}

static int run(const wsync_plan *p, const wsync_plan_sim_options *so, const wsync_plan_sparse_options *o,
               wsync_plan_sparse_result *r)
{
    wsync_error e;
    if (wsync_plan_sparse_simulate(p, so, o, r, &e) != WSYNC_OK) {
        printf("sparse simulate: %s\n", e.message);
        return 0;
    }
    return 1;
}

/* The phases add up to the total, each one at least 0, and bound is the largest. */
static int sums(const wsync_plan_sparse_result *r)
{
    double s = 0;
    uint32_t k, big = 0;
    for (k = 0; k < WSYNC_PLAN_PHASES; k++) {
        if (!(r->phase[k] >= 0)) return 0;
        s += r->phase[k];
        if (r->phase[k] > r->phase[big]) big = k;
    }
    return fabs(s - r->seconds) <= 1e-12 * (s > 1 ? s : 1) && r->bound == big && r->seconds > 0;
}

static void test_breakdown(const wsync_plan *bf, const wsync_plan *f8)
{
    wsync_plan_sparse_result r;
    wsync_plan_sparse_options o = dens(0, 0, 0);
    uint32_t k;
    TEST_BEGIN("sparse: the phases sum to the total and the bound is the largest");
    o = dens(0.005, 0, 0); /* below the break-even of bf16 regions at the default rates (4.5%: 1.5% changed) */
    CHECK(run(bf, NULL, &o, &r) && sums(&r));
    CHECK(r.phase[WSYNC_PLAN_PHASE_DIFF] > 0 && r.phase[WSYNC_PLAN_PHASE_WIRE] > 0 &&
          r.phase[WSYNC_PLAN_PHASE_SCATTER] > 0 && r.phase[WSYNC_PLAN_PHASE_VERIFY] > 0);
    CHECK(r.phase[WSYNC_PLAN_PHASE_QUANT] == 0); /* bf16 receivers quantize nothing */
    CHECK(r.wire_bytes < r.dense_bytes && r.sparse_tasks + r.dense_tasks == bf->n_tasks);
    memset(&o, 0, sizeof o); /* the defaults: the measured densities and rates */
    CHECK(run(f8, NULL, &o, &r) && sums(&r) && r.phase[WSYNC_PLAN_PHASE_QUANT] > 0);
    /* barriers: the mesh groups' (n_groups - 1), writes-done and commit, 50 us each */
    CHECK(fabs(r.phase[WSYNC_PLAN_PHASE_BARRIER] - (double)(f8->n_groups + 1) * 50e-6) < 1e-12);
    for (k = 0; k < WSYNC_PLAN_PHASES; k++) CHECK(wsync_plan_phase_name(k) != NULL);
    CHECK(strcmp(wsync_plan_phase_name(WSYNC_PLAN_PHASE_QUANT), "quantize") == 0);
    CHECK(wsync_plan_phase_name(WSYNC_PLAN_PHASES) == NULL);
    o = dens(0.02, 0.002, 0.001); /* one phase much slower: it bounds the step (every region sparse) */
    o.dense_above = 1;
    o.scatter = 1e-6;
    CHECK(run(f8, NULL, &o, &r) && sums(&r) && r.bound == WSYNC_PLAN_PHASE_SCATTER);
    o.scatter = 0;
    o.quant = 1e-6;
    CHECK(run(f8, NULL, &o, &r) && sums(&r) && r.bound == WSYNC_PLAN_PHASE_QUANT);
    TEST_END();
}

static void test_monotone(const wsync_plan *p, const char *what)
{
    static const double d[] = {0, 1e-4, 1e-3, 0.005, 0.0161, 0.03, 0.05, 0.1, 0.3, 0.6, 1.0};
    wsync_plan_sparse_result r, prev;
    wsync_plan_sparse_options o;
    size_t i;
    int ok = 1;
    char name[96];
    snprintf(name, sizeof name, "sparse: %s: monotone in the densities and the rates", what);
    TEST_BEGIN(name);
    memset(&prev, 0, sizeof prev);
    for (i = 0; i < sizeof d / sizeof d[0]; i++) { /* every density together */
        o = dens(d[i], d[i] / 10, d[i] / 100);
        if (!run(p, NULL, &o, &r) || !sums(&r)) ok = 0;
        if (i > 0 && (r.seconds < prev.seconds * (1 - 1e-9) || r.wire_bytes < prev.wire_bytes)) {
            printf("  density %g: %.6f s, %llu bytes after %.6f s, %llu bytes\n", d[i], r.seconds,
                   (unsigned long long)r.wire_bytes, prev.seconds, (unsigned long long)prev.wire_bytes);
            ok = 0;
        }
        prev = r;
    }
    CHECK(ok);
    for (i = 1, ok = 1; i < sizeof d / sizeof d[0]; i++) { /* bf16 alone */
        wsync_plan_sparse_result a;
        wsync_plan_sparse_options x = dens(d[i - 1], 0.001, 0), y = dens(d[i], 0.001, 0);
        if (!run(p, NULL, &x, &a) || !run(p, NULL, &y, &r) || r.seconds < a.seconds * (1 - 1e-9)) ok = 0;
    }
    CHECK(ok);
    { /* a faster memory, or any faster phase, is never slower */
        static const double mem[] = {100, 650, 2000, 12000, 1e5};
        wsync_plan_sparse_result a;
        o = dens(0.005, 0.0013, 0.00015);
        for (i = 0, ok = 1; i < sizeof mem / sizeof mem[0]; i++) {
            o.mem_gbps = mem[i];
            if (!run(p, NULL, &o, &r) || (i > 0 && r.seconds > prev.seconds * (1 + 1e-9))) ok = 0;
            prev = r;
        }
        CHECK(ok);
        o.mem_gbps = 0;
        CHECK(run(p, NULL, &o, &a));
        o.pack = WSYNC_PLAN_SPARSE_PACK * 4;
        o.scatter = WSYNC_PLAN_SPARSE_SCATTER * 4;
        o.dense_above = a.dense_above; /* the same regions sparse: only the rates differ */
        CHECK(run(p, NULL, &o, &r) && r.seconds < a.seconds && r.phase[WSYNC_PLAN_PHASE_DIFF] == a.phase[WSYNC_PLAN_PHASE_DIFF]);
    }
    TEST_END();
}

/* A bf16 plan's regions: sparse bytes are section + n/2 * d * 6, so the
   threshold falls between two densities. */
static void test_dense_fallback(const wsync_plan *bf, const wsync_plan *f8)
{
    wsync_plan_sparse_result r, a;
    wsync_plan_sparse_options o;
    wsync_plan_sim_options so;
    uint64_t i, small = UINT64_MAX;
    TEST_BEGIN("sparse: dense above the threshold, past the staging, and when everything changed");
    for (i = 0; i < bf->n_tasks; i++)
        if (bf->tasks[i].len < small) small = bf->tasks[i].len;
    o = dens(0.03, 0, 0); /* 9% of each region's bytes, plus its header */
    o.dense_above = 0.5;
    CHECK(run(bf, NULL, &o, &r) && r.dense_tasks == 0 && r.sparse_tasks == bf->n_tasks);
    o.dense_above = 0.08; /* every region over it */
    CHECK(run(bf, NULL, &o, &r) && r.sparse_tasks == 0 && r.dense_tasks == bf->n_tasks);
    CHECK(r.wire_bytes == r.dense_bytes && r.phase[WSYNC_PLAN_PHASE_SCATTER] == 0 && sums(&r));
    /* the dense fallback's preparation is the sender's again: never faster than sparse */
    o.dense_above = 0.5;
    CHECK(run(bf, NULL, &o, &a) && r.seconds > a.seconds);
    /* just above and below 0.09 + 32 / len for the smallest region */
    o.dense_above = 0.09 + 32.0 / (double)small * 0.999;
    CHECK(run(bf, NULL, &o, &r) && r.dense_tasks >= 1);
    o.dense_above = 0.09 + 32.0 / (double)small * 1.001 + 1e-9;
    CHECK(run(bf, NULL, &o, &r) && r.dense_tasks == 0);
    /* the break-even threshold from the rates: wire / (wire + pack + scatter) in time per byte */
    memset(&o, 0, sizeof o);
    CHECK(run(bf, NULL, &o, &r));
    {
        double wire = 400e9 / 8, mem = 400 * 13.0 / 8 * 1e9 / 8;
        double be = (1 / wire) / (1 / wire + 1 / (WSYNC_PLAN_SPARSE_PACK * mem) + 1 / (WSYNC_PLAN_SPARSE_SCATTER * mem));
        CHECK(fabs(r.dense_above - be) < 1e-12);
    }
    /* everything changed: every region dense at the break-even */
    o = dens(1, 1, 0);
    CHECK(run(bf, NULL, &o, &r) && r.sparse_tasks == 0 && r.wire_bytes == r.dense_bytes);
    CHECK(run(f8, NULL, &o, &r) && r.sparse_tasks == f8->n_tasks - r.dense_tasks && r.dense_tasks > 0);
    for (i = 0; i < f8->n_tasks; i++) /* no scale moved: their regions are sparse, the rest dense */
        if (f8->tasks[i].flags & WSYNC_PLAN_SCALES) break;
    CHECK(i < f8->n_tasks);
    o = dens(1, 0, 1); /* every scale moved: every tile whole */
    CHECK(run(f8, NULL, &o, &r) && r.sparse_tasks == 0);
    /* staging: a small one sends the regions that do not fit dense, and holds no more than it has */
    o = dens(0.0161, 0.0013, 0.00015);
    CHECK(run(f8, NULL, &o, &a) && a.staging_max > 0);
    o.staging = 0.002;
    CHECK(run(f8, NULL, &o, &r) && r.dense_tasks > a.dense_tasks && r.seconds >= a.seconds);
    for (i = 0; i < (uint64_t)f8->n_inference * f8->nics_per_rank; i++)
        CHECK((double)r.staging_max <= 0.002 * (double)f8->recv_bytes[i] + 1 || f8->recv_bytes[i] == 0);
    /* receivers that digest everything */
    o.staging = 0;
    o.verify_all = 1;
    CHECK(run(f8, NULL, &o, &r) && r.phase[WSYNC_PLAN_PHASE_VERIFY] > a.phase[WSYNC_PLAN_PHASE_VERIFY] * 1.5);
    /* the simulation's constants: barriers off, slower NICs */
    memset(&so, 0, sizeof so);
    so.barrier_us = -1;
    o.verify_all = 0;
    CHECK(run(f8, &so, &o, &r) && r.phase[WSYNC_PLAN_PHASE_BARRIER] == 0 && sums(&r));
    so.barrier_us = 0;
    so.nic_gbps = 100;
    o.dense_above = a.dense_above; /* the same regions sparse */
    so.copy_gbps = 650; /* the same memory rate as the default at 400 */
    CHECK(run(f8, &so, &o, &r) && r.phase[WSYNC_PLAN_PHASE_WIRE] > a.phase[WSYNC_PLAN_PHASE_WIRE]);
    CHECK(fabs(r.phase[WSYNC_PLAN_PHASE_DIFF] - a.phase[WSYNC_PLAN_PHASE_DIFF]) < 1e-12);
    TEST_END();
}

/* One host (the simulation's cpus): the ranks share the cores, so a phase
   takes at least all ranks' work over them; a rank's phase hidden behind
   the others' (more cores than ranks) adds nothing; a dense step of a run
   with sparse steps copies each sender's sources (base_seconds). */
static void test_cpus(const wsync_plan *bf)
{
    wsync_plan_sim_options so;
    wsync_plan_sparse_options o = dens(0.0161, 0, 0);
    wsync_plan_sparse_result r0, r1, r2, rm;
    double most = 0, mem = 400 * 13.0 / 8 * 1e9 / 8;
    uint64_t i;
    uint32_t k, t;
    TEST_BEGIN("sparse: one host's cores shared by the ranks, and the base a dense step keeps");
    o.dense_above = 0.25; /* every region of qwen3-0.6b sparse at 1.61% (4.8% of its bytes) but the small */
    memset(&so, 0, sizeof so);
    CHECK(run(bf, &so, &o, &r0) && sums(&r0));
    so.cpus = 64; /* more cores than ranks: each phase is its slowest rank's, as with a core per rank */
    CHECK(run(bf, &so, &o, &rm) && sums(&rm));
    for (k = 0; k < WSYNC_PLAN_PHASES; k++)
        if (k != WSYNC_PLAN_PHASE_WIRE) CHECK(fabs(rm.phase[k] - r0.phase[k]) <= 1e-12 * (r0.phase[k] + 1e-9));
    CHECK(rm.base_seconds == r0.base_seconds);
    so.cpus = 2; /* 4 equal trainers on 2 cores: their phases twice as long; 2 receivers on 2: unchanged */
    CHECK(run(bf, &so, &o, &r2) && sums(&r2));
    for (k = WSYNC_PLAN_PHASE_DIFF; k <= WSYNC_PLAN_PHASE_PACK; k += 2) {
        CHECK(r2.phase[k] <= 2 * r0.phase[k] * (1 + 1e-12) && r2.phase[k] >= 1.98 * r0.phase[k]);
        CHECK(r0.phase[k] > 0);
    }
    CHECK(fabs(r2.phase[WSYNC_PLAN_PHASE_SCATTER] - r0.phase[WSYNC_PLAN_PHASE_SCATTER]) <=
          1e-12 * r0.phase[WSYNC_PLAN_PHASE_SCATTER]);
    CHECK(fabs(r2.phase[WSYNC_PLAN_PHASE_VERIFY] - r0.phase[WSYNC_PLAN_PHASE_VERIFY]) <=
          1e-12 * r0.phase[WSYNC_PLAN_PHASE_VERIFY]);
    CHECK(r2.base_seconds <= 2 * r0.base_seconds * (1 + 1e-12) && r2.base_seconds >= 1.98 * r0.base_seconds);
    CHECK(r2.seconds > r0.seconds);
    so.cpus = 1; /* 2 receivers on 1 core: scatter and verify twice as long */
    CHECK(run(bf, &so, &o, &r1) && sums(&r1));
    CHECK(r1.phase[WSYNC_PLAN_PHASE_SCATTER] <= 2 * r0.phase[WSYNC_PLAN_PHASE_SCATTER] * (1 + 1e-12) &&
          r1.phase[WSYNC_PLAN_PHASE_SCATTER] >= 1.98 * r0.phase[WSYNC_PLAN_PHASE_SCATTER]);
    CHECK(r1.phase[WSYNC_PLAN_PHASE_DIFF] >= 1.98 * r2.phase[WSYNC_PLAN_PHASE_DIFF]);
    /* the base: the slowest sender's bf16 sources at the memory rate (the default: 13/8 of 400 Gb/s) */
    for (t = 0; t < bf->n_trainers; t++) {
        double b = 0;
        for (i = 0; i < bf->n_preps; i++)
            if (bf->preps[i].rank == t && bf->preps[i].n_tasks) b += (double)bf->preps[i].src_bytes;
        if (b > most) most = b;
    }
    CHECK(most > 0 && fabs(r0.base_seconds - most / mem) <= 1e-9 * r0.base_seconds);
    o.mem_gbps = 1300; /* twice the memory rate: half the base */
    CHECK(run(bf, NULL, &o, &r1) && fabs(r1.base_seconds * 2 - r0.base_seconds) <= 1e-9 * r0.base_seconds);
    TEST_END();
}

static void test_fetches(void)
{
    wsync_plan *p = plan_of("qwen3-0.6b", 3, 2, 1, 1, 1); /* shards of rows across fp8 tiles */
    wsync_plan_sparse_result r, z;
    wsync_plan_sparse_options o = dens(0.0161, 0.0013, 0.00015);
    TEST_BEGIN("sparse: a plan of row shards with fetches");
    CHECK(p != NULL && p->n_fetches > 0);
    if (p) {
        uint64_t i, fb = 0;
        for (i = 0; i < p->n_fetches; i++) fb += p->fetches[i].len;
        CHECK(run(p, NULL, &o, &r) && sums(&r));
        /* fetches' barriers: one per group, with the groups' and the step's */
        CHECK(fabs(r.phase[WSYNC_PLAN_PHASE_BARRIER] - (double)(2 * p->n_groups + 1) * 50e-6) < 1e-12);
        o = dens(0, 0, 0);
        CHECK(run(p, NULL, &o, &z));
        /* nothing changed: headers, and the fetches' sections (regions smaller than a header's
           worth go dense) */
        CHECK(z.wire_bytes < r.wire_bytes && z.wire_bytes < fb / 100 && z.sparse_tasks > p->n_tasks / 4);
        wsync_plan_free(p);
    }
    TEST_END();
}

static void test_errors(const wsync_plan *p)
{
    wsync_plan_sparse_result r;
    wsync_plan_sparse_options o;
    wsync_plan_sim_options so;
    wsync_error e;
    counting c;
    long n;
    int ok = 1;
    TEST_BEGIN("sparse: bad options refused by name, allocation failures leak nothing");
    memset(&o, 0, sizeof o);
    CHECK(wsync_plan_sparse_simulate(NULL, NULL, &o, &r, &e) == WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(wsync_plan_sparse_simulate(p, NULL, &o, NULL, &e) == WSYNC_ERR_INVALID_ARGUMENT);
    o.bf16 = 1.5;
    CHECK(wsync_plan_sparse_simulate(p, NULL, &o, &r, &e) == WSYNC_ERR_INVALID_ARGUMENT && strstr(e.message, "bf16 1.5"));
    o.bf16 = NAN;
    CHECK(wsync_plan_sparse_simulate(p, NULL, &o, &r, &e) == WSYNC_ERR_INVALID_ARGUMENT && strstr(e.message, "density"));
    o.bf16 = 0;
    o.fp8_scales = 2;
    CHECK(wsync_plan_sparse_simulate(p, NULL, &o, &r, &e) == WSYNC_ERR_INVALID_ARGUMENT && strstr(e.message, "fp8 scales 2"));
    o.fp8_scales = 0;
    o.scatter = -1;
    CHECK(wsync_plan_sparse_simulate(p, NULL, &o, &r, &e) == WSYNC_ERR_INVALID_ARGUMENT && strstr(e.message, "below 0"));
    o.scatter = 0;
    o.staging = -0.5;
    CHECK(wsync_plan_sparse_simulate(p, NULL, &o, &r, &e) == WSYNC_ERR_INVALID_ARGUMENT);
    o.staging = 0;
    o.mem_gbps = NAN;
    CHECK(wsync_plan_sparse_simulate(p, NULL, &o, &r, &e) == WSYNC_ERR_INVALID_ARGUMENT);
    o.mem_gbps = 0;
    CHECK(wsync_plan_sparse_simulate(p, NULL, &o, &r, &e) == WSYNC_OK && e.code == WSYNC_OK);
    memset(&so, 0, sizeof so);
    so.allocator.alloc = c_alloc;
    so.allocator.free = c_free;
    so.allocator.user = &c;
    for (n = 1; n < 400; n++) {
        wsync_result res;
        memset(&c, 0, sizeof c);
        c.fail_at = n;
        res = wsync_plan_sparse_simulate(p, &so, &o, &r, &e);
        if (c.allocs != c.frees || (res != WSYNC_OK && res != WSYNC_ERR_OUT_OF_MEMORY)) ok = 0;
        if (res == WSYNC_OK) break;
    }
    CHECK(ok && n > 5 && n < 400);
    TEST_END();
}

static void test_kimi(void)
{
    wsync_plan *p;
    wsync_plan_sim_options so;
    wsync_plan_sim_result d;
    wsync_plan_sparse_result r, g;
    wsync_plan_sparse_options o;
    wsync_error e;
    TEST_BEGIN("sparse: kimi-k2 256 -> 8 x 16 fp8 at the measured densities");
    p = plan_of("kimi-k2", 256, 128, 8, 1, 0);
    CHECK(p != NULL);
    if (p) {
        memset(&so, 0, sizeof so);
        memset(&o, 0, sizeof o);
        so.pace_gbps = 400;
        CHECK(wsync_plan_simulate(p, &so, &d, &e) == WSYNC_OK && d.seconds > 1.3 && d.seconds < 1.4);
        CHECK(run(p, &so, &o, &r) && sums(&r));
        /* the default rates (a rank's memory at the preparations' 650 Gb/s): faster than dense, not within 0.1 s */
        CHECK(r.seconds < d.seconds / 2 && r.seconds > 0.1);
        o.mem_gbps = 12000; /* a GPU's memory (1.5 TB/s) */
        CHECK(run(p, &so, &o, &g) && sums(&g) && g.seconds <= 0.1);
        CHECK(g.wire_bytes < g.dense_bytes / 50);
        if (check__is_verbose())
            printf("  dense %.4f s; sparse %.4f s (bound by %s), at 12000 Gb/s %.4f s (bound by %s)\n", d.seconds,
                   r.seconds, wsync_plan_phase_name(r.bound), g.seconds, wsync_plan_phase_name(g.bound));
        wsync_plan_free(p);
    }
    TEST_END();
}

int main(void)
{
    wsync_plan *bf = plan_of("qwen3-0.6b", 4, 2, 1, 0, 0), *f8 = plan_of("qwen2.5-7b", 8, 4, 2, 1, 0);
    if (!bf || !f8) {
        printf("summary: 0 passed, 1 failed\n");
        return 1;
    }
    test_breakdown(bf, f8);
    test_monotone(bf, "qwen3-0.6b bf16");
    test_monotone(f8, "qwen2.5-7b fp8");
    test_dense_fallback(bf, f8);
    test_cpus(bf);
    test_fetches();
    test_errors(bf);
    if (!SANITIZED) test_kimi();
    wsync_plan_free(bf);
    wsync_plan_free(f8);
    return check_summary();
}
