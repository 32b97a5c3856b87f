/* cmd_push.c - wsync push-demo: the direct path end to end on one machine.
   Part of the command-line tool (cli.h).

   The parent runs the controller and forks T trainer and I inference
   processes. Trainers hold the model's tensors as row shards (or whole,
   --layout replica) in memory registered on a fabric; inference ranks hold
   the whole model in one registered region. Every step, each trainer
   fills its shards with that step's data, the controller says GO, the
   trainers write straight into the inference ranks' memory, and at COMMIT
   each inference rank checks every byte against the step's data, computed
   on its own, before its version word moves. The parent makes a random
   job key (wsync_random_bytes) and hands it to its children (they inherit
   it across fork): only they can join its controller. */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"
#include "layouts.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PUSH_SEED 0x57535950ull /* "WSYP" */

/* The job key of this run: random, made by the parent before it forks, so
   that its own processes (and nothing else) join its controller (none with
   --insecure). */
static char push_job_key[65];

typedef struct push_opts {
    const char *backend;       /* cma, shm, tcp */
    unsigned trainers, inference;
    uint64_t steps;
    unsigned timeout_ms;
    int replica;               /* every trainer holds the whole model */
    int bench;                 /* baselines measured in the same run */
    int reshard, fp8;          /* inference ranks: tensor-parallel slices, fused; fp8 projections */
    unsigned block;            /* fp8 tile (0: one scale per part) */
    uint64_t watermark;        /* trainers' staging bytes */
    const char *dump;          /* receivers leave their memory and layout here */
    const char *bind;          /* --bind: the controller's address [127.0.0.1] */
    int insecure;              /* --insecure: no job key (on a trusted network) */
    int mesh_groups;           /* trainers: MLP weights in mesh group 1, a barrier before them */
    uint32_t schedule;         /* wsync_ctl_schedule */
    double partial;            /* even steps move this fraction of the tensors (0: every step all) */
    double pace;               /* Gb/s: trainers keep the plan's start times at this rate (0: off) */
    /* fault injection for tests: a rank of a role dies or stops at a step */
    int kill_role, kill_rank, stall_role, stall_rank;
    int stall_mid;             /* --stall-mid: stop in the middle of the first group's writes, not before DONE */
    uint64_t kill_step, stall_step;
    int corrupt_role, corrupt_rank; /* --corrupt: an inference rank flips a byte of its memory before its check */
    uint64_t corrupt_step;
    wsync_gen_model model;
    int sparse;                /* --sparse: steps after the first send only what changed */
    double density;            /* --density: the fraction of elements a step changes */
    double sparse_max;         /* --sparse-max: the trainers' threshold (0: the library's default) */
    double staging;            /* --staging: each inference rank's staging, a fraction of its bytes */
    uint64_t dense_every;      /* --dense-every K: steps 1 + K, 1 + 2K, ... dense too (0: only step 1) */
} push_opts;

/* What each child reports to the parent at its end (one write to a pipe,
   under PIPE_BUF, so reports never interleave). */
typedef struct push_report {
    uint32_t role, rank;
    uint64_t version, verified, last_verified, mismatches;
    int ok;
    char msg[200];
    /* --sparse: step 1 (dense) and the sum over the later steps */
    uint64_t sp_steps, sp_changes, sp_staged, sp_dense, sp_rs, sp_rd, sp_ro;
    double sp_diff, sp_pack, sp_wire, sp_update, sp_wire1, sp_update1; /* trainers */
    double sp_validate, sp_scatter, sp_verify, sp_verify1;            /* inference ranks */
    uint64_t sp_dsteps;                       /* --dense-every: the dense steps after step 1, summed */
    double sp_dwire, sp_dupdate, sp_dverify;
    /* --sparse --fp8: the sparse steps' fp8 tiles (trainers), summed */
    uint64_t sp_ftiles, sp_fmoved, sp_frescaled, sp_fbytes, sp_fsent, sp_fgathered, sp_fgsparse;
    double sp_fp8;
} push_report;

/* Byte g of tensor k at step s is byte (g & 7) of a hash of (s, k, g >> 3):
   any rank can compute any slice of any step on its own. */
static void push_fill(uint8_t *p, uint64_t g, uint64_t n, uint64_t step, uint64_t k)
{
    uint64_t key = wsync_gen_mix64(PUSH_SEED ^ step * 0x9E3779B97F4A7C15ull ^ k << 40);
    while (n) {
        uint64_t w = wsync_gen_mix64(key ^ (g >> 3)), b = g & 7, take = 8 - b;
        if (take > n) take = n;
        if (b == 0 && take == 8) memcpy(p, &w, 8);
        else {
            uint8_t tmp[8];
            memcpy(tmp, &w, 8);
            memcpy(p, tmp + b, (size_t)take);
        }
        p += take;
        g += take;
        n -= take;
    }
}

/* --partial: step s moves every tensor when s is odd, and when even the
   round(partial * n) tensors (at least one) of smallest hash of (s, k): a
   deterministic choice every rank makes on its own. */
static int push_moves(const push_opts *o, uint64_t k, uint64_t step)
{
    uint64_t n = o->model.n_tensors, m, j, below = 0, hk;
    if (o->partial <= 0 || step % 2) return 1;
    m = (uint64_t)(o->partial * (double)n + 0.5);
    if (m < 1) m = 1;
    hk = wsync_gen_mix64(PUSH_SEED ^ step << 32 ^ k);
    for (j = 0; j < n; j++) {
        uint64_t hj = wsync_gen_mix64(PUSH_SEED ^ step << 32 ^ j);
        below += hj < hk || (hj == hk && j < k);
    }
    return below < m;
}

/* The step whose data tensor k holds at step s: the last that moved it. */
static uint64_t push_data_step(const push_opts *o, uint64_t k, uint64_t step)
{
    return push_moves(o, k, step) ? step : step - 1; /* odd steps move everything */
}

static void push_layout_opts(const push_opts *o, cli_push_layout *l)
{
    memset(l, 0, sizeof *l);
    l->trainers = o->trainers;
    l->inference = o->inference;
    l->block = o->block;
    l->replica = o->replica;
    l->reshard = o->reshard;
    l->fp8 = o->fp8;
    l->mesh_groups = o->mesh_groups;
}

/* --sparse: from step 2 on, element g (of the whole tensor, row-major) of
   tensor k changes at step s when a 16-bit hash of (s, k, g) falls below
   density * 65536, to another such hash: about that fraction of the
   elements, spread like an RL step's. Applied in place to n elements
   from g (little-endian bf16). */
static void push_sp_apply(uint8_t *p, uint64_t g, uint64_t n, uint64_t step, uint64_t k, uint32_t thr)
{
    const uint64_t top = 0x8000800080008000ull; /* each 16-bit lane's top bit */
    uint64_t kc = wsync_gen_mix64(PUSH_SEED ^ 0x5350000000000000ull ^ step * 0x9E3779B97F4A7C15ull ^ k << 40),
             kv = wsync_gen_mix64(kc ^ 0x56414c5545ull), end = g + n, q, t4 = thr * 0x0001000100010001ull;
    if (n == 0) return;
    for (q = g >> 2; q <= (end - 1) >> 2; q++) { /* the hashes of elements 4q .. 4q + 3 */
        uint64_t w = wsync_gen_mix64(kc ^ q), hit = 0, v;
        unsigned l;
        /* a lane's top bit in hit when the lane is below thr: with thr at
           most 0x8000, (lane | 0x8000) - thr keeps its top bit exactly when
           lane & 0x7FFF >= thr, and borrows from no other lane */
        if (thr <= 0x8000) hit = ~(w | ((w | top) - t4)) & top;
        else
            for (l = 0; l < 4; l++) hit |= (uint64_t)(((w >> 16 * l) & 0xFFFF) < thr) << (16 * l + 15);
        if (!hit) continue; /* most quads: nothing changes */
        v = wsync_gen_mix64(kv ^ q);
        for (l = 0; l < 4; l++) {
            uint64_t e = q * 4 + l;
            if (!(hit >> (16 * l + 15) & 1) || e < g || e >= end) continue;
            p[2 * (e - g)] = (uint8_t)(v >> 16 * l);
            p[2 * (e - g) + 1] = (uint8_t)(v >> (16 * l + 8));
        }
    }
}

/* --sparse: rows [r0, r1) of the part, holding step `from - 1`'s source
   elements, moved on to step `to`'s: each step's changes in turn. */
static void push_sp_advance(const push_opts *o, uint8_t *p, const wsync_ctl_tensor *t, uint32_t k, uint64_t r0,
                            uint64_t r1, uint64_t from, uint64_t to)
{
    uint64_t r, s, cols = push_part_cols(t);
    uint32_t thr = (uint32_t)(o->density * 65536 + 0.5);
    for (r = r0; r < r1; r++, p += cols * 2)
        for (s = from; s <= to; s++)
            push_sp_apply(p, (t->row_begin + r) * push_cols(t) + t->col_begin, cols, s, k, thr);
}

/* The part's source elements (bf16) at a step, rows [r0, r1) of it;
   --sparse: step 1's, then each later step's changes. */
static void push_fill_rows_of(const push_opts *o, uint8_t *p, const wsync_ctl_tensor *t, uint32_t k, uint64_t r0,
                              uint64_t r1, uint64_t step)
{
    uint64_t r, cols = push_part_cols(t);
    int sparse = o && o->sparse;
    for (r = r0; r < r1; r++)
        push_fill(p + (r - r0) * cols * 2, ((t->row_begin + r) * push_cols(t) + t->col_begin) * 2, cols * 2,
                  sparse ? 1 : step, k);
    if (sparse) push_sp_advance(o, p, t, k, r0, r1, 2, step);
}

static void push_fill_rows(uint8_t *p, const wsync_ctl_tensor *t, uint32_t k, uint64_t r0, uint64_t r1, uint64_t step)
{
    push_fill_rows_of(NULL, p, t, k, r0, r1, step);
}

/* A trainer's parts at a step: every tensor, also those a partial step does
   not move (it does not name them), so that an inference rank holding the
   previous step's bytes for those shows that they were not written.
   --sparse: from step 2 on, the step's changes to the last step's data. */
static void push_fill_step(const push_opts *o, uint8_t *base, const push_layout *l, uint64_t step)
{
    size_t i;
    uint64_t r;
    for (i = 0; i < l->n; i++) {
        const wsync_ctl_tensor *t = &l->t[i];
        uint64_t cols = push_part_cols(t);
        if (!o->sparse || step == 1) {
            push_fill_rows(base + t->offset, t, l->k[i], 0, t->row_count, step);
            continue;
        }
        for (r = 0; r < t->row_count; r++)
            push_sp_apply(base + t->offset + r * cols * 2, (t->row_begin + r) * push_cols(t) + t->col_begin, cols,
                          step, l->k[i], (uint32_t)(o->density * 65536 + 0.5));
    }
}

/* --sparse: the steps that go dense (step 1, and with --dense-every K each Kth after it). */
static int push_dense_step(const push_opts *o, uint64_t step)
{
    return step == 1 || (o->dense_every && (step - 1) % o->dense_every == 0);
}

/* --partial: a step that does not move everything names what it moves. */
static wsync_result push_select(const push_opts *o, wsync_rank *r, const push_layout *l, uint64_t step,
                                wsync_error *err)
{
    const char **names;
    size_t i;
    uint32_t n = 0;
    wsync_result res;
    if (o->partial <= 0 || step % 2) return WSYNC_OK;
    if (!(names = (const char **)calloc(l->n ? l->n : 1, sizeof *names))) {
        err->code = WSYNC_ERR_OUT_OF_MEMORY;
        snprintf(err->message, sizeof err->message, "%s", "out of memory");
        return WSYNC_ERR_OUT_OF_MEMORY;
    }
    for (i = 0; i < l->n; i++)
        if (push_moves(o, l->k[i], step)) names[n++] = l->t[i].name;
    res = wsync_rank_select(r, names, n, err);
    free(names);
    return res;
}

/* A fabric; TCP: under the run's job key, writing as sender id `id` (a
   trainer's rank: what the inference ranks' write windows list). */
/* Where the ranks find the controller: --bind's host, 127.0.0.1 for a wildcard. */
static const char *push_rank_host(const push_opts *o)
{
    if (!o->bind || !strcmp(o->bind, "0.0.0.0") || !strcmp(o->bind, "::") || !o->bind[0]) return "127.0.0.1";
    return o->bind;
}

static wsync_result push_fabric_open(const push_opts *o, int sender, uint32_t id, wsync_fabric *f, wsync_error *err)
{
    if (strcmp(o->backend, "tcp") == 0) {
        wsync_fabric_tcp_options t;
        memset(&t, 0, sizeof t);
        t.send_only = sender;
        t.timeout_ms = o->timeout_ms;
        t.job_key = push_job_key[0] ? push_job_key : NULL;
        t.job_key_len = strlen(push_job_key);
        t.sender_id = id;
        return wsync_fabric_tcp_open(&t, f, err);
    } else {
        wsync_fabric_host_options h;
        memset(&h, 0, sizeof h);
        h.mode = strcmp(o->backend, "shm") == 0 ? WSYNC_FABRIC_HOST_SHM : WSYNC_FABRIC_HOST_CMA;
        h.send_only = sender;
        h.allow_any_writer = !sender; /* the writers are siblings, not ancestors */
        h.timeout_ms = o->timeout_ms;
        return wsync_fabric_host_open(&h, f, err);
    }
}

static double push_now(void);

static void push_send_report(int fd, const push_report *r)
{
    if (write(fd, r, sizeof *r) != (ssize_t)sizeof *r) { /* the parent says the report is missing */
    }
}

/* --sparse: a step's source data is step 1's with every later step's
   changes applied, so computing it from nothing costs a pass per step so
   far. Each inference rank instead keeps the source elements (bf16) its
   parts held at their last check, computed on its own (never read from its
   memory, which the trainers write), and moves them on by the steps since
   then: one pass over them a step, whatever the step. The cost: a second
   copy of its parts' sources next to its memory (as large as its memory in
   bf16, twice its fp8 parts' bytes with --fp8), so only with --sparse (a
   dense run's step is one pass from nothing); without the memory for it,
   the checks compute each step from nothing, slower but the same. */
typedef struct push_receiver {
    const push_opts *o;
    const push_layout *l;
    uint8_t *mem;
    uint8_t *scratch;
    uint8_t *held;       /* --sparse: part i's source elements at offset held_at[i] */
    uint64_t *held_at;
    uint64_t *held_step; /* the step part i's held elements are of; 0: none (make them afresh) */
    push_report rep;
    wsync_rank *volatile rank; /* once joined (--sparse: the scatter's figures) */
} push_receiver;

#define PUSH_SCRATCH (4u << 20)

static wsync_result push_mismatch(push_receiver *r, const wsync_ctl_tensor *t, const char *dst, const char *what,
                                  uint64_t at, uint64_t step, wsync_error *err)
{
    r->rep.mismatches++;
    err->code = WSYNC_ERR_DIGEST_MISMATCH;
    snprintf(err->message, sizeof err->message, "%.120s (%.120s rows %llu+%llu): %s differ at byte %llu at step %llu",
             dst, t->name, (unsigned long long)t->row_begin, (unsigned long long)t->row_count, what,
             (unsigned long long)at, (unsigned long long)step);
    return WSYNC_ERR_DIGEST_MISMATCH;
}

/* Where two buffers that differ first differ. */
static uint64_t push_first_diff(const uint8_t *a, const uint8_t *b, uint64_t n)
{
    uint64_t j = 0;
    while (j < n && a[j] == b[j]) j++;
    return j;
}

/* One part against the step's data, a band of rows at a time (for fp8 a
   band is one row of tiles, quantized here with the core's conversion). */
static wsync_result push_check_part(push_receiver *r, size_t i, uint64_t step, wsync_error *err)
{
    const wsync_ctl_tensor *t = &r->l->t[i];
    uint64_t cols = push_part_cols(t), r0, band, tcols, want = push_data_step(r->o, r->l->k[i], step), from = 0;
    uint8_t *held = r->held ? r->held + r->held_at[i] : NULL;
    int fp8 = t->to_dtype == WSYNC_DTYPE_F8_E4M3;
    if (cols == 0 || t->row_count == 0) return WSYNC_OK;
    band = PUSH_SCRATCH / 2 / (cols * 2);
    if (band == 0) band = 1;
    if (fp8) band = t->block ? t->block : t->row_count;
    tcols = fp8 ? wsync_quantize_scale_count(1, cols, t->block) : 0;
    if (held) { /* the steps after the held one; none held (or a later one): from nothing */
        from = r->held_step[i] && r->held_step[i] <= want ? r->held_step[i] + 1 : 0;
        r->held_step[i] = 0; /* until every band moved: a mismatch below leaves them to be made afresh */
    }
    for (r0 = 0; r0 < t->row_count; r0 += band) {
        uint64_t r1 = t->row_count - r0 > band ? r0 + band : t->row_count, n = (r1 - r0) * cols;
        uint8_t *src = held ? held + r0 * cols * 2 : r->scratch;
        if (from) push_sp_advance(r->o, src, t, r->l->k[i], r0, r1, from, want);
        else push_fill_rows_of(r->o, src, t, r->l->k[i], r0, r1, want);
        if (!fp8) {
            const uint8_t *got = r->mem + t->offset + r0 * cols * 2;
            if (memcmp(src, got, (size_t)n * 2) != 0)
                return push_mismatch(r, t, r->l->dst[i], "bytes", r0 * cols * 2 + push_first_diff(src, got, n * 2),
                                     step, err);
        } else {
            uint8_t *q = held ? r->scratch : src + n * 2;
            float *sc = (float *)(void *)(q + ((n + 63) & ~(uint64_t)63));
            uint64_t tile_row = t->block ? r0 / t->block : 0;
            const uint8_t *got = r->mem + t->offset + r0 * cols;
            const uint8_t *gsc = r->mem + t->scale_offset + tile_row * tcols * 4;
            wsync_quantize_e4m3((const uint16_t *)(void *)src, r1 - r0, cols, cols, t->block, q, sc, err);
            if (memcmp(q, got, (size_t)n) != 0)
                return push_mismatch(r, t, r->l->dst[i], "fp8 bytes", r0 * cols + push_first_diff(q, got, n), step,
                                     err);
            if (memcmp(sc, gsc, (size_t)tcols * 4) != 0)
                return push_mismatch(r, t, r->l->dst[i], "fp8 scales",
                                     tile_row * tcols * 4 + push_first_diff((const uint8_t *)sc, gsc, tcols * 4), step,
                                     err);
        }
    }
    if (held) r->held_step[i] = want;
    return WSYNC_OK;
}

/* --sparse: room for every part's source elements (see push_receiver); 0
   when there is none (the checks then compute each step from nothing). */
static int push_held_open(push_receiver *r)
{
    const push_layout *l = r->l;
    uint64_t total = 0;
    size_t i;
    if (!r->o->sparse || l->n == 0) return 0;
    if (!(r->held_at = (uint64_t *)calloc(l->n, sizeof *r->held_at)) ||
        !(r->held_step = (uint64_t *)calloc(l->n, sizeof *r->held_step)))
        return 0;
    for (i = 0; i < l->n; i++) {
        r->held_at[i] = total;
        total += l->t[i].row_count * push_part_cols(&l->t[i]) * 2;
    }
    if (total == 0 || total != (size_t)total) return 0;
    if (!(r->held = (uint8_t *)malloc((size_t)total))) return 0;
    memset(r->held, 0, (size_t)total); /* fault it in before the first step, as the region */
    return 1;
}

/* Scratch for checking: a band of source rows, and for fp8 its codes and scales. */
static size_t push_scratch_bytes(const push_layout *l)
{
    size_t i, need = PUSH_SCRATCH;
    for (i = 0; i < l->n; i++) {
        const wsync_ctl_tensor *t = &l->t[i];
        uint64_t cols = push_part_cols(t), rows = t->block ? t->block : t->row_count, n;
        if (t->to_dtype != WSYNC_DTYPE_F8_E4M3) continue;
        if (rows > t->row_count) rows = t->row_count;
        n = rows * cols * 3 + 64 + 4 * wsync_quantize_scale_count(rows, cols, t->block);
        if (n > need) need = (size_t)n;
    }
    return need;
}

/* --corrupt (a test of the check): flips the middle byte of the rank's
   largest part, of its largest fp8 part when it has one (an e4m3 code),
   after the step's writes (and a sparse step's scatter) and before the
   check, which must find it. */
static void push_corrupt(push_receiver *r, uint64_t step)
{
    const push_layout *l = r->l;
    size_t i, pick = l->n;
    uint64_t best = 0, at;
    int want_fp8 = 0;
    for (i = 0; i < l->n; i++) want_fp8 |= l->t[i].to_dtype == WSYNC_DTYPE_F8_E4M3;
    for (i = 0; i < l->n; i++) {
        const wsync_ctl_tensor *t = &l->t[i];
        int fp8 = t->to_dtype == WSYNC_DTYPE_F8_E4M3;
        uint64_t n = t->row_count * push_part_cols(t) * (fp8 ? 1 : 2);
        if (fp8 == want_fp8 && n > best) best = n, pick = i;
    }
    if (pick == l->n) return;
    at = best / 2;
    r->mem[l->t[pick].offset + at] ^= 0x01;
    fprintf(stderr,
            "push-demo: --corrupt: inference rank %u flipped %s byte %llu of %s (memory byte %llu) at step %llu\n",
            (unsigned)r->rep.rank, want_fp8 ? "fp8" : "bf16", (unsigned long long)at, l->dst[pick],
            (unsigned long long)(l->t[pick].offset + at), (unsigned long long)step);
}

/* At COMMIT: every byte against the step's data before the version moves
   (--partial: the tensors the step did not move hold the previous step's). */
static wsync_result push_on_commit(void *user, uint64_t step, wsync_error *err)
{
    push_receiver *r = (push_receiver *)user;
    size_t i;
    wsync_result res;
    double t0 = push_now();
    if (r->o->corrupt_role == WSYNC_CTL_INFERENCE && r->o->corrupt_step == step &&
        (uint32_t)r->o->corrupt_rank == r->rep.rank)
        push_corrupt(r, step);
    for (i = 0; i < r->l->n; i++)
        if ((res = push_check_part(r, i, step, err)) != WSYNC_OK) return res;
    if (r->o->sparse && step == 1) r->rep.sp_verify1 = push_now() - t0;
    else if (r->o->sparse && push_dense_step(r->o, step)) r->rep.sp_dsteps++, r->rep.sp_dverify += push_now() - t0;
    else if (r->o->sparse && r->rank) { /* the slots were scattered before this callback */
        wsync_sparse_stats st;
        wsync_rank_sparse_stats(r->rank, &st);
        r->rep.sp_steps++;
        r->rep.sp_validate += st.validate_s;
        r->rep.sp_scatter += st.scatter_s;
        r->rep.sp_verify += push_now() - t0;
        r->rep.sp_changes += st.scattered;
    }
    r->rep.verified++;
    r->rep.last_verified = step;
    return WSYNC_OK;
}

/* --dump: the region and its layout, for tests/cli/push_check.py. */
static void push_dump(const push_opts *o, unsigned rank, const push_layout *l, const uint8_t *mem, uint64_t step)
{
    char path[4096];
    FILE *f;
    size_t i;
    snprintf(path, sizeof path, "%s/inference_%u.bin", o->dump, rank);
    if (!(f = fopen(path, "wb"))) return;
    fwrite(mem, 1, (size_t)l->bytes, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/inference_%u.json", o->dump, rank);
    if (!(f = fopen(path, "w"))) return;
    fprintf(f, "{\"rank\": %u, \"step\": %llu, \"bytes\": %llu, \"parts\": [", rank, (unsigned long long)step,
            (unsigned long long)l->bytes);
    for (i = 0; i < l->n; i++) {
        const wsync_ctl_tensor *t = &l->t[i];
        fprintf(f,
                "%s\n {\"dst\": \"%s\", \"tensor\": %u, \"name\": \"%s\", \"shape\": [%llu, %llu], "
                "\"row_begin\": %llu, \"rows\": %llu, \"col_begin\": %llu, \"cols\": %llu, \"dtype\": \"%s\", "
                "\"offset\": %llu, \"block\": %u, \"scale_offset\": %llu, \"step\": %llu}",
                i ? "," : "", l->dst[i], (unsigned)l->k[i], t->name, (unsigned long long)t->shape[0],
                (unsigned long long)push_cols(t), (unsigned long long)t->row_begin, (unsigned long long)t->row_count,
                (unsigned long long)t->col_begin, (unsigned long long)push_part_cols(t),
                t->to_dtype == WSYNC_DTYPE_F8_E4M3 ? "f8_e4m3" : "bf16", (unsigned long long)t->offset,
                (unsigned)t->block, (unsigned long long)t->scale_offset,
                (unsigned long long)(step ? push_data_step(o, l->k[i], step) : 0));
    }
    fprintf(f, "\n]}\n");
    fclose(f);
}

static int push_inference_main(const push_opts *o, unsigned rank, unsigned port, int rfd)
{
    push_layout l;
    push_receiver rc;
    wsync_fabric f;
    wsync_fabric_mr *mr = NULL, *mrs[2] = {NULL, NULL};
    wsync_fabric_desc desc, descs[2];
    wsync_rank_options ro;
    wsync_rank *r = NULL;
    wsync_error err;
    void *mem = NULL, *stg = NULL;
    wsync_ctl_tensor *tens = NULL; /* --sparse: the entries and the staging */
    uint64_t stg_bytes = 0;
    int shm = strcmp(o->backend, "shm") == 0;
    memset(&rc, 0, sizeof rc);
    memset(&f, 0, sizeof f);
    rc.rep.role = WSYNC_CTL_INFERENCE;
    rc.rep.rank = rank;
    cli_push_layout lo;
    push_layout_opts(o, &lo);
    if (!push_rank_layout(&o->model, &lo, 0, rank, &l) ||
        !(rc.scratch = (uint8_t *)malloc(push_scratch_bytes(&l)))) {
        snprintf(rc.rep.msg, sizeof rc.rep.msg, "%s", "out of memory");
        goto out;
    }
    if (push_fabric_open(o, 0, UINT32_MAX, &f, &err) != WSYNC_OK) goto fail;
    if (shm) {
        if (wsync_fabric_host_alloc(&f, l.bytes, &mem, &err) != WSYNC_OK) goto fail;
    } else {
        mem = mmap(NULL, (size_t)l.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) {
            mem = NULL;
            snprintf(rc.rep.msg, sizeof rc.rep.msg, "cannot map %llu bytes", (unsigned long long)l.bytes);
            goto out;
        }
    }
    memset(mem, 0, (size_t)l.bytes); /* fault it in before the first step */
    if (f.reg(f.user, mem, l.bytes, WSYNC_MEM_HOST, &mr, &desc, &err) != WSYNC_OK) goto fail;
    mrs[0] = mr;
    descs[0] = desc;
    if (o->sparse) { /* the staging region: a slot per trainer, --staging of this rank's bytes */
        uint64_t unit = 64ull * o->trainers;
        stg_bytes = (uint64_t)((double)l.bytes * o->staging) / unit * unit;
        if (stg_bytes < 64 * unit) stg_bytes = 64 * unit;
        if (shm) {
            if (wsync_fabric_host_alloc(&f, stg_bytes, &stg, &err) != WSYNC_OK) goto fail;
        } else if ((stg = mmap(NULL, (size_t)stg_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) ==
                   MAP_FAILED) {
            stg = NULL;
            snprintf(rc.rep.msg, sizeof rc.rep.msg, "cannot map %llu bytes", (unsigned long long)stg_bytes);
            goto out;
        }
        memset(stg, 0, (size_t)stg_bytes);
        if (f.reg(f.user, stg, stg_bytes, WSYNC_MEM_HOST, &mrs[1], &descs[1], &err) != WSYNC_OK) goto fail;
        if (!(tens = (wsync_ctl_tensor *)calloc(l.n + 1, sizeof *tens))) {
            snprintf(rc.rep.msg, sizeof rc.rep.msg, "%s", "out of memory");
            goto out;
        }
        memcpy(tens, l.t, l.n * sizeof *tens);
        tens[l.n].name = WSYNC_CTL_STAGING;
        tens[l.n].dtype = WSYNC_DTYPE_U8;
        tens[l.n].ndim = 1;
        tens[l.n].shape[0] = stg_bytes;
        tens[l.n].row_count = stg_bytes;
        tens[l.n].region = 1;
    }
    rc.o = o;
    rc.l = &l;
    rc.mem = (uint8_t *)mem;
    push_held_open(&rc); /* none: slower checks, the same */
    memset(&ro, 0, sizeof ro);
    ro.port = port;
    ro.host = push_rank_host(o);
    ro.job_key = push_job_key;
    ro.job_key_len = strlen(push_job_key);
    ro.role = WSYNC_CTL_INFERENCE;
    ro.rank = rank;
    ro.tensors = tens ? tens : l.t;
    ro.n_tensors = (uint32_t)l.n + (tens ? 1 : 0);
    ro.fabric = &f;
    ro.mrs = mrs;
    ro.descs = descs;
    ro.n_regions = tens ? 2 : 1;
    ro.timeout_ms = o->timeout_ms * 3;
    ro.on_commit = push_on_commit;
    ro.user = &rc;
    if (wsync_rank_join(&ro, &r, &err) != WSYNC_OK) goto fail;
    rc.rank = r;
    while (!wsync_rank_ended(r, rc.rep.msg, sizeof rc.rep.msg)) wsync_rank_wait_version(r, UINT64_MAX, 200, NULL);
    rc.rep.version = wsync_rank_version(r);
    if (o->dump) push_dump(o, rank, &l, (const uint8_t *)mem, rc.rep.version);
    rc.rep.ok = rc.rep.mismatches == 0 && rc.rep.version == rc.rep.last_verified;
    goto out;
fail:
    snprintf(rc.rep.msg, sizeof rc.rep.msg, "%.190s", err.message);
out:
    if (r) rc.rep.version = wsync_rank_version(r);
    rc.rank = NULL;
    wsync_rank_close(r);
    if (mr) f.dereg(f.user, mr);
    if (mrs[1]) f.dereg(f.user, mrs[1]);
    if (stg && shm) wsync_fabric_host_free(&f, stg);
    else if (stg) munmap(stg, (size_t)stg_bytes);
    free(tens);
    if (mem && shm) wsync_fabric_host_free(&f, mem);
    else if (mem) munmap(mem, (size_t)l.bytes);
    if (f.close) wsync_fabric_close(&f);
    push_send_report(rfd, &rc.rep);
    push_layout_free(&l);
    free(rc.scratch);
    free(rc.held);
    free(rc.held_at);
    free(rc.held_step);
    return rc.rep.ok ? 0 : 1;
}

/* Writes the first half of the assigned transfers, then dies: a trainer
   lost in the middle of a step. */
/* Half of the first mesh group's writes (with a gather phase: half of the
   gather between trainers), then the signal: SIGKILL dies, SIGSTOP stalls. */
static void push_die_midway(wsync_rank *r, int sig)
{
    uint32_t n = 0, n0 = 0;
    const wsync_ctl_transfer *x = wsync_rank_transfers(r, &n);
    while (n0 < n && x[n0].group == 0) n0++;
    wsync_rank_push_some(r, 0, n0 / 2, 0, NULL);
    raise(sig);
}

/* One byte on `fd` (the parent's ready pipe): this trainer holds the data
   of its next step, so that the parent's GO times the step's writes, not
   the filling of the step before (a training step's optimizer). */
static void push_ready(int fd)
{
    if (fd >= 0 && write(fd, "r", 1) != 1) { /* the parent then waits its timeout and says GO anyway */
    }
}

/* One byte on `fd` (the parent's fill pipe): the step is over for every
   trainer, fill the next one. 0: the pipe closed (no further step). */
static int push_await_fill(int fd)
{
    char c;
    ssize_t got;
    if (fd < 0) return 1;
    do
        got = read(fd, &c, 1);
    while (got < 0 && errno == EINTR);
    return got == 1;
}

static int push_trainer_main(const push_opts *o, unsigned rank, unsigned port, int rfd, int ready_fd, int fill_fd)
{
    push_layout l;
    push_report rep;
    wsync_fabric f;
    wsync_fabric_mr *mrs[2] = {NULL, NULL};
    wsync_fabric_desc descs[2];
    wsync_rank_options ro;
    wsync_rank *r = NULL;
    wsync_error err;
    wsync_ctl_tensor *tens = NULL; /* the entries and a gather inbox, when it needs one */
    uint8_t *mem = NULL, *inbox = NULL;
    uint64_t want = 1, inbox_bytes = 0;
    int shm_mem = 0;
    memset(&rep, 0, sizeof rep);
    memset(&f, 0, sizeof f);
    rep.role = WSYNC_CTL_TRAINER;
    rep.rank = rank;
    cli_push_layout lo;
    push_layout_opts(o, &lo);
    if (!push_rank_layout(&o->model, &lo, 1, rank, &l)) {
        snprintf(rep.msg, sizeof rep.msg, "%s", "out of memory");
        goto out;
    }
    if (o->fp8 && !o->replica) { /* row shards to fp8: tiles across shards gather through an inbox */
        size_t i;
        for (i = 0; i < l.n; i++)
            if (l.t[i].ndim == 2) {
                uint64_t rows = l.t[i].shape[0] < 128ull * (o->inference + 1) ? l.t[i].shape[0]
                                                                               : 128ull * (o->inference + 1);
                inbox_bytes += (rows * l.t[i].shape[1] * 2 + 7) & ~7ull;
            }
        if (!(tens = (wsync_ctl_tensor *)calloc(l.n + 1, sizeof *tens))) {
            snprintf(rep.msg, sizeof rep.msg, "%s", "out of memory");
            goto out;
        }
        memcpy(tens, l.t, l.n * sizeof *tens);
        tens[l.n].name = WSYNC_CTL_INBOX;
        tens[l.n].dtype = WSYNC_DTYPE_U8;
        tens[l.n].ndim = 1;
        tens[l.n].shape[0] = inbox_bytes;
        tens[l.n].row_count = inbox_bytes;
        tens[l.n].region = 1;
    }
    if (push_fabric_open(o, !tens, rank, &f, &err) != WSYNC_OK) goto fail;
    shm_mem = tens && strcmp(o->backend, "shm") == 0; /* a receiver in SHM mode registers shareable memory only */
    if (shm_mem) {
        void *m = NULL;
        if (wsync_fabric_host_alloc(&f, l.bytes, &m, &err) != WSYNC_OK) goto fail;
        mem = (uint8_t *)m;
    } else {
        mem = (uint8_t *)mmap(NULL, (size_t)l.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == (uint8_t *)MAP_FAILED) {
            mem = NULL;
            snprintf(rep.msg, sizeof rep.msg, "cannot map %llu bytes", (unsigned long long)l.bytes);
            goto out;
        }
    }
    push_fill_step(o, mem, &l, 1);
    if (f.reg(f.user, mem, l.bytes, WSYNC_MEM_HOST, &mrs[0], &descs[0], &err) != WSYNC_OK) goto fail;
    if (tens) { /* the inbox: from the fabric's shareable memory on one host */
        if (strcmp(o->backend, "tcp") == 0) {
            if (!(inbox = (uint8_t *)malloc((size_t)inbox_bytes))) {
                snprintf(rep.msg, sizeof rep.msg, "%s", "out of memory");
                goto out;
            }
        } else {
            void *ib = NULL;
            if (wsync_fabric_host_alloc(&f, inbox_bytes, &ib, &err) != WSYNC_OK) goto fail;
            inbox = (uint8_t *)ib;
        }
        if (f.reg(f.user, inbox, inbox_bytes, WSYNC_MEM_HOST, &mrs[1], &descs[1], &err) != WSYNC_OK) goto fail;
    }
    memset(&ro, 0, sizeof ro);
    ro.port = port;
    ro.host = push_rank_host(o);
    ro.job_key = push_job_key;
    ro.job_key_len = strlen(push_job_key);
    ro.role = WSYNC_CTL_TRAINER;
    ro.rank = rank;
    ro.tensors = tens ? tens : l.t;
    ro.n_tensors = (uint32_t)l.n + (tens ? 1 : 0);
    ro.fabric = &f;
    ro.mrs = mrs;
    ro.descs = descs;
    ro.n_regions = tens ? 2 : 1;
    ro.timeout_ms = o->timeout_ms * 3;
    ro.staging_bytes = o->watermark;
    ro.sparse = o->sparse;
    ro.sparse_max = o->sparse_max;
    if (wsync_rank_join(&ro, &r, &err) != WSYNC_OK) goto fail;
    push_ready(ready_fd);
    for (;;) {
        uint64_t step = 0;
        int bye = 0;
        wsync_result res;
        if (wsync_rank_wait_go(r, &step, &bye, -1, &err) != WSYNC_OK) goto fail;
        if (bye) break;
        if (step != want) { /* the data for another step is not here: refuse */
            wsync_rank_done(r, step, WSYNC_ERR_INVALID_ARGUMENT, "GO for a step this trainer has no data for",
                            NULL);
            snprintf(rep.msg, sizeof rep.msg, "GO for step %llu, data for %llu", (unsigned long long)step,
                     (unsigned long long)want);
            goto out;
        }
        if ((res = push_select(o, r, &l, step, &err)) == WSYNC_OK) {
            if (o->kill_role == WSYNC_CTL_TRAINER && o->kill_rank == (int)rank && o->kill_step == step)
                push_die_midway(r, SIGKILL);
            if (o->stall_mid && o->stall_rank == (int)rank && o->stall_step == step) push_die_midway(r, SIGSTOP);
            if (o->sparse && push_dense_step(o, step)) wsync_rank_sparse_reset(r);
            res = wsync_rank_push(r, &err);
            if (res == WSYNC_OK && o->sparse) { /* the phases, for the parent's summary */
                wsync_sparse_stats st;
                wsync_rank_sparse_stats(r, &st);
                if (step == 1) rep.sp_wire1 = st.wire_s, rep.sp_update1 = st.update_s;
                else if (push_dense_step(o, step)) rep.sp_dsteps++, rep.sp_dwire += st.wire_s, rep.sp_dupdate += st.update_s;
                else {
                    rep.sp_steps++;
                    rep.sp_diff += st.diff_s, rep.sp_pack += st.pack_s, rep.sp_wire += st.wire_s;
                    rep.sp_update += st.update_s;
                    rep.sp_changes += st.changes, rep.sp_staged += st.staged_bytes, rep.sp_dense += st.dense_bytes;
                    rep.sp_rs += st.regions_sparse, rep.sp_rd += st.regions_dense, rep.sp_ro += st.regions_overflow;
                    rep.sp_ftiles += st.fp8_tiles, rep.sp_fmoved += st.fp8_tiles_moved;
                    rep.sp_frescaled += st.fp8_tiles_rescaled, rep.sp_fbytes += st.fp8_bytes;
                    rep.sp_fsent += st.fp8_moved, rep.sp_fgathered = st.fp8_gathered, rep.sp_fgsparse = st.fp8_gathered_sparse, rep.sp_fp8 += st.fp8_s;
                }
            }
        }
        if (!o->stall_mid && o->stall_role == WSYNC_CTL_TRAINER && o->stall_rank == (int)rank &&
            o->stall_step == step)
            raise(SIGSTOP);
        if (wsync_rank_done(r, step, res, res == WSYNC_OK ? "" : err.message, NULL) != WSYNC_OK) break;
        rep.version = step;
        /* the next step's data once every trainer's step is over: filling
           now would take the cores from the trainers still writing */
        if (!push_await_fill(fill_fd)) continue; /* no further step: BYE comes next */
        push_fill_step(o, mem, &l, ++want);
        push_ready(ready_fd);
    }
    rep.ok = 1;
    goto out;
fail:
    snprintf(rep.msg, sizeof rep.msg, "%.190s", err.message);
out:
    wsync_rank_close(r);
    if (mrs[0]) f.dereg(f.user, mrs[0]);
    if (mrs[1]) f.dereg(f.user, mrs[1]);
    if (inbox && strcmp(o->backend, "tcp") == 0) free(inbox);
    else if (inbox) wsync_fabric_host_free(&f, inbox);
    if (mem && shm_mem) wsync_fabric_host_free(&f, mem);
    else if (mem) munmap(mem, (size_t)l.bytes);
    if (f.close) wsync_fabric_close(&f);
    push_send_report(rfd, &rep);
    push_layout_free(&l);
    free(tens);
    return rep.ok ? 0 : 1;
}

static int push_parse_fault(const char *v, int *role, int *rank, uint64_t *step)
{
    const char *at = strchr(v, '@'), *colon = strchr(v, ':');
    uint64_t r;
    char num[32];
    if (!at || !colon || colon > at) return 0;
    if (strncmp(v, "trainer:", 8) == 0) *role = WSYNC_CTL_TRAINER;
    else if (strncmp(v, "inference:", 10) == 0) *role = WSYNC_CTL_INFERENCE;
    else return 0;
    if ((size_t)(at - colon - 1) >= sizeof num || at == colon + 1) return 0;
    memcpy(num, colon + 1, (size_t)(at - colon - 1));
    num[at - colon - 1] = 0;
    if (!cli_parse_u64(num, &r) || r > 65535 || !cli_parse_u64(at + 1, step) || *step < 1) return 0;
    *rank = (int)r;
    return 1;
}

static const char *push_usage_key =
    "       wsync push-demo ... [--bind HOST] [--insecure]\n"
    "Every process of the run proves a job key made at random for it (the controller to the\n"
    "ranks and each rank to the controller; the TCP fabric likewise, and an inference rank\n"
    "takes writes only from its planned trainers between GO and COMMIT). --bind puts the\n"
    "controller on HOST (0.0.0.0: every address; the ranks connect to 127.0.0.1 then).\n"
    "--insecure runs without a key, which a controller on an address other than loopback\n"
    "refuses unless it is given: anyone who reaches the port could join.\n";

static const char *push_usage =
    "usage: wsync push-demo [--backend cma|shm|tcp] [--trainers T] [--inference I]\n"
    "                       [--model tiny|qwen3-0.6b|qwen2.5-7b] [--steps N] [--layout shard|replica]\n"
    "                       [--reshard] [--fp8 [--block B]] [--mesh-groups] [--watermark-mb M] [--dump DIR]\n"
    "                       [--timeout-ms MS] [--kill ROLE:RANK@STEP] [--stall[-mid] trainer:RANK@STEP] [--bench]\n"
    "                       [--schedule auto|plan|greedy] [--partial F] [--pace GBPS]\n"
    "                       [--corrupt inference:RANK@STEP]\n"
    "The controller schedules with the planner (the plan `wsync plan --demo` prints for the\n"
    "same model and layout: the same plan digest); --schedule greedy maps every inference\n"
    "byte to the least loaded holder instead, auto (the default) falls back to it when the\n"
    "planner does not model the layout. --bench prints the simulator's prediction for the\n"
    "plan run, with constants measured here in the same run (the senders' rate all at once,\n"
    "a core's copy and quantize rates on this data while every core works, per-task cost,\n"
    "round trip, and the cores: every rank shares them), next to the measured step (GO, once\n"
    "every trainer holds its data, to the last DONE), and each step against the senders'\n"
    "rate probed right after it.\n"
    "--pace G paces the planner's schedule: no trainer writes a task before its mesh group's\n"
    "start plus the task's planned start read at G Gb/s (senders keep the plan instead of\n"
    "taking receivers first come, first served); a step then lasts at least the last planned\n"
    "start, which the run prints. Off by default: the plan's clock is a line rate, and one\n"
    "host has none.\n"
    "The direct path on this machine: a controller (this process), T trainer and I inference\n"
    "processes (default 4 and 2, model tiny, 3 steps). Trainers hold the model's bf16 tensors\n"
    "as row shards (--layout replica: each holds all of it); every inference rank holds the\n"
    "whole model; with --reshard each holds its tensor-parallel slice (q/k/v and gate/up split\n"
    "by rows and fused into qkv_proj and gate_up_proj, o_proj and down_proj by columns, the\n"
    "vocabulary by rows), and with --fp8 the projections arrive as fp8 e4m3 with BxB tile\n"
    "scales (default 128; from row shards, a tile that crosses a shard boundary is gathered\n"
    "into the inbox of its first row's holder by the other holders' writes, in a gather phase\n"
    "before each mesh group's writes). Trainers prepare slices that are not\n"
    "contiguous in their memory through a pipelined executor in at most M MiB of staging\n"
    "(default 64). --mesh-groups puts the trainers' MLP weights in a second mesh group:\n"
    "no trainer writes one before every trainer is through the rest (a barrier through\n"
    "the controller). --dump leaves each inference rank's memory and layout in DIR for\n"
    "tests/cli/push_check.py. Each step the trainers write straight into the inference ranks' memory\n"
    "(cma: process_vm_writev; shm: shared memory; tcp: the TCP fabric), and each inference\n"
    "rank checks every byte against the step's data, computed on its own, before its version\n"
    "word moves; the controller checks every trainer's report of the writes it ran against\n"
    "the plan before COMMIT. --partial F makes every even step move only a fraction F\n"
    "(0 < F <= 1) of the tensors, a deterministic choice per step that every trainer names\n"
    "(odd steps move everything): the trainers fill every tensor with the step's data, and\n"
    "the inference ranks check the tensors moved against it and the others against the\n"
    "step before; the run ends with the partial steps' mean time over the full steps' (3 on).\n";

/* The faults tests inject, the exit status and --bench (a string of its own: C99 promises
   string literals of 4095 characters). */
static const char *push_usage_faults =
    "--kill makes a rank die in the middle of a step (a trainer after half of its first mesh\n"
    "group's writes, which with row-sharded fp8 is half of its gather between trainers; an\n"
    "inference rank right after GO), --stall makes a trainer stop before its DONE, --stall-mid\n"
    "where --kill would die:\n"
    "the step must fail within --timeout-ms (default 5000) and the others keep their last\n"
    "complete step.\n"
    "--corrupt (a test hook): inference rank RANK flips a byte before its check at STEP (must fail).\n"
    "Exit 0 when every step committed and every receiver was bit-exact at every step, 1\n"
    "otherwise, 2 usage error. --bench then measures, in the same run, memcpy and\n"
    "one process_vm_writev of one inference rank's bytes, and prints the push's throughput\n"
    "as ratios to both.\n";

static const char *push_usage_sparse =
    "       wsync push-demo ... [--sparse [--density D] [--sparse-max F] [--staging F] [--dense-every K]]\n"
    "--sparse: every step after the first changes a fraction D of the elements (default\n"
    "0.016, spread by a hash), and the trainers send only the changes: each diffs its shard\n"
    "against the last step it sent and writes, per inference rank, the changed elements'\n"
    "positions (in the receiver's memory, after resharding) and values into a staging\n"
    "region the receiver registered (F of its bytes, default 0.25, a slot per trainer); at\n"
    "COMMIT each receiver validates every slot, scatters it, checks every byte as always, and\n"
    "only then moves its version (to check a step in one pass, each receiver keeps its\n"
    "own copy of what it holds, in bf16, computed on its own and moved on by each step's\n"
    "changes: as much memory again, twice its fp8 bytes). A receiver region whose changes\n"
    "cost more than F of its dense bytes (--sparse-max, default the library's), or that\n"
    "overflows its slot, and the first step go dense; --dense-every K makes steps 1 + K,\n"
    "1 + 2K, ... dense too.\n"
    "With --fp8, per tile: nothing when no e4m3 byte moved, the moved bytes when the scale\n"
    "did not, else the whole tile and its scale; parts quantized from a gather inbox (row\n"
    "shards whose tiles cross trainers) too, packed after the gather's barrier (the bf16\n"
    "rows the trainers gather stay dense writes between them). The run ends with the\n"
    "sparse steps' time over the dense steps' (step 1, which also faults pages in, and the\n"
    "later ones), each phase (diff, pack, wire, update; validate, scatter, verify), and\n"
    "with --fp8 the tiles.\n";

/* Seconds a paced full step lasts at least: each mesh group's last planned
   start at `gbps`, added up (a group starts after the one before ends). */
static double push_pace_span(const wsync_plan *p, double gbps)
{
    double last[64] = {0}, s = 0;
    uint64_t i;
    uint32_t g;
    for (i = 0; i < p->n_tasks; i++) { /* whole microseconds, as the controller sends them */
        double us = floor((double)p->tasks[i].start / (gbps * 1e9 / 8) * 1e6);
        if (p->tasks[i].group < 64 && us > last[p->tasks[i].group]) last[p->tasks[i].group] = us;
    }
    for (g = 0; g < p->n_groups && g < 64; g++) s += last[g] * 1e-6;
    return s;
}

static int push_wait_children(pid_t *pids, unsigned n, int grace_ms)
{
    unsigned i, left = n;
    int64_t until;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    until = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + grace_ms;
    while (left) {
        for (i = 0; i < n; i++) {
            int st;
            if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                pids[i] = 0;
                left--;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (left && (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 > until) {
            for (i = 0; i < n; i++)
                if (pids[i] > 0) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], NULL, 0);
                    pids[i] = 0;
                }
            return 0;
        }
        if (left) usleep(10000);
    }
    return 1;
}

static double push_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The baselines for --bench, on the bytes one inference rank receives, best
   of 3 each: memcpy in one process, and one process_vm_writev of all of
   them into another process (the fastest a single one-host writer can go). */
static void push_baselines(uint64_t bytes, double *memcpy_s, double *pvw_s)
{
    uint8_t *src, *dst;
    int k, go[2], ready[2];
    pid_t child;
    char c = 0;
    *memcpy_s = *pvw_s = 0;
    src = (uint8_t *)mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    dst = (uint8_t *)mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == (uint8_t *)MAP_FAILED || dst == (uint8_t *)MAP_FAILED) return;
    memset(src, 0x5A, (size_t)bytes);
    memset(dst, 0, (size_t)bytes);
    for (k = 0; k < 3; k++) {
        double t = push_now();
        memcpy(dst, src, (size_t)bytes);
        t = push_now() - t;
        if (*memcpy_s == 0 || t < *memcpy_s) *memcpy_s = t;
    }
    if (pipe(go) == 0 && pipe(ready) == 0 && (child = fork()) >= 0) {
        if (child == 0) { /* holds its own copy of dst, faulted in, until told to go */
            memset(dst, 1, (size_t)bytes);
            if (write(ready[1], "r", 1) != 1) _exit(1);
            if (read(go[0], &c, 1) < 0) _exit(1);
            _exit(0);
        }
        if (read(ready[0], &c, 1) == 1)
            for (k = 0; k < 3; k++) {
                struct iovec l, r;
                uint64_t done = 0;
                double t = push_now();
                while (done < bytes) {
                    ssize_t w;
                    l.iov_base = src + done;
                    l.iov_len = (size_t)(bytes - done);
                    r.iov_base = dst + done;
                    r.iov_len = l.iov_len;
                    w = process_vm_writev(child, &l, 1, &r, 1, 0);
                    if (w <= 0) break;
                    done += (uint64_t)w;
                }
                t = push_now() - t;
                if (done == bytes && (*pvw_s == 0 || t < *pvw_s)) *pvw_s = t;
            }
        if (write(go[1], "g", 1) != 1) kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        close(go[0]);
        close(go[1]);
        close(ready[0]);
        close(ready[1]);
    }
    munmap(src, (size_t)bytes);
    munmap(dst, (size_t)bytes);
}

/* ---- --bench: the simulator's constants measured on this machine ---- */

typedef struct push_consts {
    double send_Bps;           /* what one of T concurrent senders writes per second */
    double task_s;             /* a small write's cost and the executor's hand-offs */
    double copy_Bps, quant_Bps;
    double rtt_s;              /* a control message's round trip between processes */
    long cpus;                 /* the cores online */
} push_consts;

typedef struct push_mw {
    wsync_fabric f;
    wsync_fabric_mr *mr;
    wsync_fabric_remote *rem;
    uint8_t *src;
    uint64_t len, at, n_small;
    int ok;
} push_mw;

static void *push_mw_main(void *p)
{
    push_mw *w = (push_mw *)p;
    wsync_error e;
    uint64_t k;
    w->ok = 1;
    if (w->n_small) {
        for (k = 0; k < w->n_small && w->ok; k++)
            w->ok = w->f.write(w->f.user, w->mr, 0, w->rem, w->at + (k % 16) * 4096, 4096, &e) == WSYNC_OK;
    } else {
        w->ok = w->f.write(w->f.user, w->mr, 0, w->rem, w->at, w->len, &e) == WSYNC_OK;
    }
    if (w->ok) w->ok = w->f.flush(w->f.user, &e) == WSYNC_OK;
    return NULL;
}

static wsync_result push_exec_nop(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t off, wsync_error *err)
{
    (void)user, (void)t, (void)tmp, (void)off, (void)err;
    return WSYNC_OK;
}

/* One core's copy and quantize rates, best of 3, on 32 MiB of bf16 (with
   one per core, beyond the caches) holding the demo's own data: its bit
   patterns decide the conversion's branches, so a rate measured on other
   values would not be this data's. */
typedef struct push_cq {
    uint8_t *a, *b;
    float *sc;
    double copy_Bps, quant_Bps;
} push_cq;

#define PUSH_CQ_ROWS 4096u
#define PUSH_CQ_COLS 4096u

static int push_cq_init(push_cq *q, uint64_t k)
{
    uint64_t n = (uint64_t)PUSH_CQ_ROWS * PUSH_CQ_COLS * 2;
    memset(q, 0, sizeof *q);
    q->a = (uint8_t *)malloc((size_t)n);
    q->b = (uint8_t *)malloc((size_t)n);
    q->sc = (float *)malloc((size_t)wsync_quantize_scale_count(PUSH_CQ_ROWS, PUSH_CQ_COLS, 128) * 4);
    if (!q->a || !q->b || !q->sc) return 0;
    push_fill(q->a, 0, n, 1, k);
    memset(q->b, 0, (size_t)n);
    return 1;
}

static void *push_cq_main(void *p)
{
    push_cq *q = (push_cq *)p;
    uint64_t n = (uint64_t)PUSH_CQ_ROWS * PUSH_CQ_COLS * 2;
    int rep;
    for (rep = 0; rep < 3; rep++) {
        double s = push_now(), d;
        memcpy(q->b, q->a, (size_t)n);
        d = push_now() - s;
        if (d > 0 && (double)n / d > q->copy_Bps) q->copy_Bps = (double)n / d;
        s = push_now();
        wsync_quantize_e4m3((const uint16_t *)(void *)q->a, PUSH_CQ_ROWS, PUSH_CQ_COLS, PUSH_CQ_COLS, 128, q->b,
                            q->sc, NULL);
        d = push_now() - s;
        if (d > 0 && (double)n / d > q->quant_Bps) q->quant_Bps = (double)n / d;
    }
    return NULL;
}

/* The bytes each of push_probe's writers writes in a round: its trainer's
   step, 1 to 64 MiB (one round of up to 1 GiB, a whole step's span, was
   tried: the schedule grid's predictions were no closer on a 2-core guest,
   and each run took 20-30 s more). */
static uint64_t push_bench_bytes(const wsync_controller_plan *plan)
{
    uint64_t B = plan->max_trainer_bytes;
    if (B < (1u << 20)) B = 1u << 20;
    if (B > (64u << 20)) B = 64u << 20;
    return B;
}

/* T writers (each its own sender fabric, as each trainer has) into I
   receivers (writer t into receiver t mod I), threads of this process,
   each writing B bytes a round, all at once; set up once: --bench runs it after
   each step, for as many bytes as the step's, as well as after the run,
   so that each step has a sender rate measured within a second of it
   (this guest changes speed that often). */
typedef struct push_probe {
    unsigned T, I;
    int shm;
    uint64_t B, per;
    wsync_fabric *rf;
    wsync_fabric_mr **rmr;
    wsync_fabric_desc *rd;
    void **rmem;
    push_mw *w;
    pthread_t *th;
} push_probe;

static void push_probe_close(push_probe *p)
{
    unsigned t;
    for (t = 0; p->w && t < p->T; t++) {
        if (p->w[t].f.close) wsync_fabric_close(&p->w[t].f);
        free(p->w[t].src);
    }
    for (t = 0; p->rf && t < p->I; t++) {
        if (p->rmr && p->rmr[t]) p->rf[t].dereg(p->rf[t].user, p->rmr[t]);
        if (p->rmem && p->rmem[t] && p->shm) wsync_fabric_host_free(&p->rf[t], p->rmem[t]);
        else if (p->rmem) free(p->rmem[t]);
        if (p->rf[t].close) wsync_fabric_close(&p->rf[t]);
    }
    free(p->rf);
    free(p->rmr);
    free(p->rd);
    free(p->rmem);
    free(p->w);
    free(p->th);
    memset(p, 0, sizeof *p);
}

static int push_probe_open(const push_opts *o, uint64_t B, push_probe *p)
{
    unsigned T = o->trainers, I = o->inference, t;
    wsync_error e;
    int ok;
    memset(p, 0, sizeof *p);
    p->T = T, p->I = I, p->B = B;
    p->per = (T + I - 1) / I * B + 16 * 4096;
    p->shm = strcmp(o->backend, "shm") == 0;
    p->rf = (wsync_fabric *)calloc(I, sizeof *p->rf);
    p->rmr = (wsync_fabric_mr **)calloc(I, sizeof *p->rmr);
    p->rd = (wsync_fabric_desc *)calloc(I, sizeof *p->rd);
    p->rmem = (void **)calloc(I, sizeof *p->rmem);
    p->w = (push_mw *)calloc(T, sizeof *p->w);
    p->th = (pthread_t *)calloc(T, sizeof *p->th);
    ok = p->rf && p->rmr && p->rd && p->rmem && p->w && p->th;
    for (t = 0; ok && t < I; t++) {
        uint64_t len = t < T ? p->per : 4096; /* a receiver no writer writes to */
        ok = push_fabric_open(o, 0, UINT32_MAX, &p->rf[t], &e) == WSYNC_OK;
        if (ok && p->shm) ok = wsync_fabric_host_alloc(&p->rf[t], len, &p->rmem[t], &e) == WSYNC_OK;
        else if (ok && !(p->rmem[t] = calloc(1, (size_t)len))) ok = 0;
        if (ok) memset(p->rmem[t], 1, (size_t)len);
        if (ok) ok = p->rf[t].reg(p->rf[t].user, p->rmem[t], len, WSYNC_MEM_HOST, &p->rmr[t], &p->rd[t], &e) == WSYNC_OK;
    }
    for (t = 0; ok && t < T; t++) {
        push_mw *w = &p->w[t];
        wsync_fabric_desc unused;
        w->len = B;
        w->at = (t / I) * B;
        ok = push_fabric_open(o, 1, 0, &w->f, &e) == WSYNC_OK && (w->src = (uint8_t *)malloc((size_t)B)) != NULL;
        if (ok) memset(w->src, 0x5A, (size_t)B);
        if (ok) ok = w->f.reg(w->f.user, w->src, B, WSYNC_MEM_HOST, &w->mr, &unused, &e) == WSYNC_OK;
        if (ok) ok = w->f.open_remote(w->f.user, &p->rd[t % I], &w->rem, &e) == WSYNC_OK;
    }
    if (!ok) push_probe_close(p);
    return ok;
}

/* `rounds` rounds, each every writer its B bytes at once: the bytes a
   writer wrote over the time, 0 when a write failed. */
static double push_probe_rate(push_probe *p, unsigned rounds)
{
    unsigned t, k;
    int ok = 1;
    double s = push_now(), d;
    for (k = 0; ok && k < rounds; k++) {
        for (t = 0; t < p->T; t++) pthread_create(&p->th[t], NULL, push_mw_main, &p->w[t]);
        for (t = 0; t < p->T; t++) pthread_join(p->th[t], NULL);
        for (t = 0; t < p->T; t++) ok = ok && p->w[t].ok;
    }
    d = push_now() - s;
    return ok && d > 0 ? (double)p->B * rounds / d : 0;
}

/* The constants: the rate one sender gets while all write at once, the
   best of 3 rounds of `p`; then the small-write cost, the executor's
   hand-offs, a core's copy and quantize rates, a round trip. */
static int push_measure(const push_opts *o, push_probe *p, push_consts *c)
{
    unsigned T = o->trainers, I = o->inference, rep;
    int ok = 1;
    memset(c, 0, sizeof *c);
    c->cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (c->cpus < 1) c->cpus = 1;
    for (rep = 0; ok && rep < 3; rep++) {
        double r = push_probe_rate(p, 1);
        ok = r > 0;
        if (r > c->send_Bps) c->send_Bps = r;
    }
    if (ok) { /* small writes, one sender alone: per write beyond its bytes */
        push_mw *w0 = &p->w[0];
        double s, d;
        uint64_t at = w0->at;
        w0->n_small = 512;
        w0->at = p->per - 16 * 4096;
        s = push_now();
        push_mw_main(w0);
        d = push_now() - s;
        ok = w0->ok;
        w0->n_small = 0;
        w0->at = at;
        c->task_s = d / 512 - 4096 / c->send_Bps * (T > I ? (double)I / T : 1.0);
        if (c->task_s < 0) c->task_s = 0;
    }
    if (ok) { /* the executor's hand-offs per task: two stages doing nothing */
        wsync_exec_options eo;
        wsync_exec_task *tk = (wsync_exec_task *)calloc(1024, sizeof *tk);
        wsync_error e;
        double s;
        memset(&eo, 0, sizeof eo);
        eo.n_stages = 2;
        eo.stages[0] = eo.stages[1] = push_exec_nop;
        s = push_now();
        if (tk && wsync_exec_run(&eo, tk, 1024, NULL, &e) == WSYNC_OK) c->task_s += (push_now() - s) / 1024;
        free(tk);
    }
    if (ok) { /* copy and quantize rates: what one core does while every core does the same */
        pthread_t *ct = (pthread_t *)calloc((size_t)c->cpus, sizeof *ct);
        push_cq *cq = (push_cq *)calloc((size_t)c->cpus, sizeof *cq);
        long j;
        ok = ct && cq;
        for (j = 0; ok && j < c->cpus; j++) ok = push_cq_init(&cq[j], (uint64_t)j);
        for (j = 0; ok && j < c->cpus; j++) pthread_create(&ct[j], NULL, push_cq_main, &cq[j]);
        for (j = 0; ok && j < c->cpus; j++) pthread_join(ct[j], NULL);
        for (j = 0; ok && j < c->cpus; j++) { /* the slowest core's */
            if (j == 0 || cq[j].copy_Bps < c->copy_Bps) c->copy_Bps = cq[j].copy_Bps;
            if (j == 0 || cq[j].quant_Bps < c->quant_Bps) c->quant_Bps = cq[j].quant_Bps;
        }
        for (j = 0; cq && j < c->cpus; j++) {
            free(cq[j].a);
            free(cq[j].b);
            free(cq[j].sc);
        }
        free(ct);
        free(cq);
    }
    if (ok) { /* a round trip between two processes over a socket, best of 200 */
        int sv[2];
        pid_t ch;
        char x = 0;
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 && (ch = fork()) >= 0) {
            if (ch == 0) {
                close(sv[0]);
                while (read(sv[1], &x, 1) == 1)
                    if (write(sv[1], &x, 1) != 1) break;
                _exit(0);
            }
            close(sv[1]);
            for (rep = 0; rep < 200; rep++) {
                double s = push_now(), d;
                if (write(sv[0], &x, 1) != 1 || read(sv[0], &x, 1) != 1) break;
                d = push_now() - s;
                if (c->rtt_s == 0 || d < c->rtt_s) c->rtt_s = d;
            }
            close(sv[0]);
            waitpid(ch, NULL, 0);
        }
    }
    return ok && c->send_Bps > 0;
}

/* Before GO: every trainer's ready byte (its data for the step is filled),
   or the timeout (a trainer that died or stopped: GO then fails the step
   by name). */
static void push_wait_ready(int fd, unsigned n, int timeout_ms)
{
    double end = push_now() + timeout_ms / 1e3;
    char b[64];
    while (n > 0) {
        struct pollfd pf;
        ssize_t got;
        int left = (int)((end - push_now()) * 1e3);
        if (left <= 0) return;
        pf.fd = fd;
        pf.events = POLLIN;
        pf.revents = 0;
        if (poll(&pf, 1, left) <= 0) return;
        got = read(fd, b, n < sizeof b ? n : sizeof b);
        if (got <= 0) return;
        n -= (unsigned)got;
    }
}

/* --bench: each full step from the second on against the simulator with
   the sender rate probed right after it (the other constants as measured
   after the run): this guest changes speed within seconds, so a rate
   measured once, after the steps, may be another speed's. */
static void push_bench_steps(const wsync_plan *pl, const wsync_plan_sim_options *after, const push_consts *k,
                             const double *step_t, const double *step_rate, uint64_t steps)
{
    double ms = 0, ps = 0, best = 0, lo = 0, hi = 0;
    unsigned n = 0;
    uint64_t q;
    wsync_plan_sim_options so = *after;
    wsync_plan_sim_result sr;
    wsync_error err;
    for (q = 2; q <= steps; q++) {
        double pq;
        if (step_rate[q] <= 0) continue; /* a partial step, or the probe failed */
        so.nic_gbps = step_rate[q] * 8 / 1e9;
        if (wsync_plan_simulate(pl, &so, &sr, &err) != WSYNC_OK) {
            printf("bench: simulate: %s\n", err.message);
            return;
        }
        pq = sr.seconds + k->rtt_s;
        if (n == 0 || step_t[q] / pq < best) best = step_t[q] / pq;
        if (n == 0 || step_rate[q] < lo) lo = step_rate[q];
        if (n == 0 || step_rate[q] > hi) hi = step_rate[q];
        ms += step_t[q], ps += pq, n++;
    }
    if (n)
        printf("bench: each step against the sender rate probed right after it (%.2f-%.2f GB/s per sender, %u "
               "steps): predicted %.3f ms mean; measured/predicted %.3f mean, %.3f best\n",
               lo / 1e9, hi / 1e9, n, ps / n * 1e3, ms / ps, best);
}

/* --sparse: the sparse steps against the dense ones in this run (step 1,
   which also faults pages in, and --dense-every's), and each phase: the
   mean over the steps of each rank, the slowest rank's. tc: step 1's
   transfer and commit seconds, the sparse steps' sums, the later dense
   steps' sums. */
static void push_sparse_summary(const push_opts *o, const wsync_controller_plan *plan, const push_report *reps,
                                const unsigned char *have, uint64_t committed, const double *tc)
{
    unsigned i, n = o->trainers + o->inference;
    double d = 0, pk = 0, w = 0, u = 0, w1 = 0, u1 = 0, dw = 0, du = 0, va = 0, sc = 0, ve = 0, ve1 = 0, dve = 0;
    /* a step's changes, bytes and regions: each rank's mean over the sparse steps it ran, summed (a
       step that failed may have run on some ranks: it is in their sums, not in the steps committed) */
    double ch = 0, st = 0, de = 0, rs = 0, rd = 0, ro = 0, sch = 0;
    uint64_t s, ns = 0, nd = 0;
    uint64_t fg = 0, fgs = 0;
    double k, kd, fq = 0, ft = 0, fm = 0, fr = 0, fb = 0, fs = 0; /* fp8: each trainer's mean, summed */
    for (s = 2; s <= committed; s++) push_dense_step(o, s) ? nd++ : ns++;
    k = ns ? (double)ns : 1;
    kd = nd ? (double)nd : 1;
    for (i = 0; i < n; i++) {
        const push_report *r = &reps[i];
        double m = r->sp_steps ? (double)r->sp_steps : 1, md = r->sp_dsteps ? (double)r->sp_dsteps : 1;
        if (!have[i]) continue;
        if (i < o->trainers) {
            if (r->sp_diff / m > d) d = r->sp_diff / m;
            if (r->sp_pack / m > pk) pk = r->sp_pack / m;
            if (r->sp_wire / m > w) w = r->sp_wire / m;
            if (r->sp_update / m > u) u = r->sp_update / m;
            if (r->sp_wire1 > w1) w1 = r->sp_wire1;
            if (r->sp_update1 > u1) u1 = r->sp_update1;
            if (r->sp_dwire / md > dw) dw = r->sp_dwire / md;
            if (r->sp_dupdate / md > du) du = r->sp_dupdate / md;
            ch += (double)r->sp_changes / m, st += (double)r->sp_staged / m, de += (double)r->sp_dense / m;
            rs += (double)r->sp_rs / m, rd += (double)r->sp_rd / m, ro += (double)r->sp_ro / m;
            ft += (double)r->sp_ftiles / m, fm += (double)r->sp_fmoved / m, fr += (double)r->sp_frescaled / m;
            fb += (double)r->sp_fbytes / m, fs += (double)r->sp_fsent / m;
            fg += r->sp_fgathered, fgs += r->sp_fgsparse;
            if (r->sp_fp8 / m > fq) fq = r->sp_fp8 / m;
        } else {
            if (r->sp_validate / m > va) va = r->sp_validate / m;
            if (r->sp_scatter / m > sc) sc = r->sp_scatter / m;
            if (r->sp_verify / m > ve) ve = r->sp_verify / m;
            if (r->sp_verify1 > ve1) ve1 = r->sp_verify1;
            if (r->sp_dverify / md > dve) dve = r->sp_dverify / md;
            sch += (double)r->sp_changes / m;
        }
    }
    if (ns)
        printf("sparse: %llu sparse steps: %.2f%% of the elements sent changed (%.0f changes a step), %.2f MB staged "
               "and %.2f MB dense a step of %.2f MB; receiver regions %.1f sparse, %.1f dense (%.1f overflowed) a "
               "step; %.0f changes scattered a step\n",
               (unsigned long long)ns, plan->bytes ? 100.0 * ch / ((double)plan->bytes / 2) : 0.0, ch, st / 1e6,
               de / 1e6, (double)plan->bytes / 1e6, rs, rd, ro, sch);
    if (ns && o->fp8) /* the tiles each sparse step quantized and compared with what was sent last */
        printf("sparse: fp8: %.0f tiles compared a step: %.2f%% unchanged, %.2f%% bytes moved under the same scale, "
               "%.2f%% rescaled (sent whole); %.2f%% of %.2f MB fp8 bytes sent; fp8 transfers quantized from a "
               "gather inbox: %llu sparse, %llu dense; quantize and compare %.2f ms\n",
               ft, ft - fm - fr > 0.5 ? 100.0 * (ft - fm - fr) / ft : 0.0, ft > 0 ? 100.0 * fm / ft : 0.0,
               ft > 0 ? 100.0 * fr / ft : 0.0, fb > 0 ? 100.0 * fs / fb : 0.0, fb / 1e6, (unsigned long long)fgs, (unsigned long long)fg,
               fq * 1e3);
    printf("sparse: transfer (GO to the last DONE) %.2f ms a sparse step (mean of %llu); dense: step 1 %.2f ms",
           tc[2] / k * 1e3, (unsigned long long)ns, tc[0] * 1e3);
    if (nd)
        printf(", later dense steps %.2f ms (mean of %llu): sparse/dense %.3f", tc[4] / kd * 1e3, (unsigned long long)nd,
               tc[4] > 0 ? tc[2] / k / (tc[4] / kd) : 0.0);
    printf("; sparse/step 1 %.3f\n", tc[0] > 0 ? tc[2] / k / tc[0] : 0.0);
    printf("sparse: commit (COMMIT to the last ACK: validate, scatter, verify) %.2f ms sparse, %.2f ms step 1%s",
           tc[3] / k * 1e3, tc[1] * 1e3, nd ? ", " : "\n");
    if (nd) printf("%.2f ms later dense\n", tc[5] / kd * 1e3);
    printf("sparse: phases, the slowest rank's mean: sparse steps: diff %.2f ms, pack %.2f ms, wire %.2f ms, update "
           "%.2f ms; validate %.3f ms, scatter %.2f ms, verify %.2f ms\n",
           d * 1e3, pk * 1e3, w * 1e3, u * 1e3, va * 1e3, sc * 1e3, ve * 1e3);
    printf("sparse: phases, dense steps: step 1 wire %.2f ms, copy %.2f ms, verify %.2f ms", w1 * 1e3, u1 * 1e3,
           ve1 * 1e3);
    if (nd) printf("; later: wire %.2f ms, copy %.2f ms, verify %.2f ms", dw * 1e3, du * 1e3, dve * 1e3);
    printf("\n");
}

static int push_run(const push_opts *o)
{
    wsync_controller_options co;
    wsync_controller *c = NULL;
    wsync_controller_plan plan;
    wsync_error err;
    unsigned n = o->trainers + o->inference, i;
    pid_t *pids = (pid_t *)calloc(n, sizeof *pids);
    push_report *reps = (push_report *)calloc(n, sizeof *reps);
    unsigned char *have = (unsigned char *)calloc(n, 1);
    int pfd[2] = {-1, -1}, rdy[2] = {-1, -1}, fil[2] = {-1, -1}, failed = 0, bad = 0;
    double pace_span = 0;     /* --pace: the least a full step lasts */
    uint64_t s, committed = 0, full_tasks = 0, part_tasks = 0, part_bytes = 0, part_n = 0, full_n = 0, wrong = 0;
    double sum_t = 0, best_t = 0, first_t = 0, part_t = 0, full_t = 0;
    double sp_t1 = 0, sp_c1 = 0, sp_t = 0, sp_c = 0; /* --sparse: step 1's transfer and commit, the sparse ones' sums */
    double sp_dt = 0, sp_dc = 0;                      /* and the dense steps' after step 1 */
    push_probe probe;         /* --bench: the sender rate after each step */
    int have_probe = 0;
    double *step_t = (double *)calloc(o->steps + 1, sizeof *step_t);    /* --bench: a full step's time, */
    double *step_rate = (double *)calloc(o->steps + 1, sizeof *step_rate); /* the probe's rate after it */
    memset(&probe, 0, sizeof probe);
    if (!pids || !reps || !have || !step_t || !step_rate || pipe(pfd) != 0 || pipe(rdy) != 0 || pipe(fil) != 0) {
        fprintf(stderr, "push-demo: out of memory or pipe\n");
        return 1;
    }
    if (!o->insecure) {
        uint8_t k[32];
        unsigned q;
        if (wsync_random_bytes(k, sizeof k) != WSYNC_OK) {
            fprintf(stderr, "push-demo: no random source for the job key\n");
            return 1;
        }
        for (q = 0; q < sizeof k; q++) snprintf(push_job_key + 2 * q, 3, "%02x", k[q]);
    }
    memset(&co, 0, sizeof co);
    co.job_key = push_job_key;
    co.job_key_len = strlen(push_job_key);
    co.bind_host = o->bind;
    co.insecure = o->insecure;
    co.n_trainers = o->trainers;
    co.n_inference = o->inference;
    co.step_timeout_ms = o->timeout_ms;
    co.join_timeout_ms = o->timeout_ms * 4;
    co.schedule = o->schedule;
    co.pace_gbps = o->pace;
    if (wsync_controller_open(&co, &c, &err) != WSYNC_OK) {
        fprintf(stderr, "push-demo: %s\n", err.message);
        return 1;
    }
    fflush(stdout);
    for (i = 0; i < n; i++) {
        pid_t p = fork();
        if (p < 0) {
            fprintf(stderr, "push-demo: fork: %s\n", strerror(errno));
            failed = 1;
            break;
        }
        if (p == 0) {
            int rc;
            close(pfd[0]);
            close(rdy[0]);
            close(fil[1]);
            rc = i < o->trainers ? push_trainer_main(o, i, wsync_controller_port(c), pfd[1], rdy[1], fil[0])
                                 : push_inference_main(o, i - o->trainers, wsync_controller_port(c), pfd[1]);
            _exit(rc);
        }
        pids[i] = p;
    }
    close(pfd[1]);
    close(rdy[1]); /* fil[0] stays open here: a write to it never raises SIGPIPE */
    if (!failed && wsync_controller_accept(c, &err) != WSYNC_OK) {
        fprintf(stderr, "push-demo: joining: %s\n", err.message);
        failed = 1;
    }
    if (!failed) {
        wsync_controller_plan_get(c, &plan);
        printf("plan: %llu transfers, %.1f MB per step; per trainer %.1f MB max, %.1f MB min; "
               "%.1f MB per inference rank\n",
               (unsigned long long)plan.transfers, (double)plan.bytes / 1e6, (double)plan.max_trainer_bytes / 1e6,
               (double)plan.min_trainer_bytes / 1e6, (double)plan.max_inference_bytes / 1e6);
        if (plan.schedule == WSYNC_CTL_SCHEDULE_PLAN) {
            unsigned ng = plan.gather_transfers ? plan.groups / 2 : plan.groups; /* a gather phase per group */
            printf("schedule: planner, %u mesh group%s%s, plan digest %016llx\n", ng, ng == 1 ? "" : "s",
                   plan.gather_transfers ? " (each after a gather phase)" : "", (unsigned long long)plan.digest);
        }
        else
            printf("schedule: greedy (least loaded holder)%s%s\n", plan.why_greedy[0] ? "; the planner: " : "",
                   plan.why_greedy);
        if (plan.gather_transfers)
            printf("gather: %llu transfers, %.2f MB, between trainers: the rows of fp8 tiles across shard boundaries, "
                   "into each tile's first row holder's inbox before its mesh group's writes\n",
                   (unsigned long long)plan.gather_transfers, (double)plan.gather_bytes / 1e6);
        if (o->pace > 0 && wsync_controller_plan_ref(c)) {
            pace_span = push_pace_span(wsync_controller_plan_ref(c), o->pace);
            printf("pacing: planned starts at %g Gb/s; a full step lasts at least %.3f ms (each mesh group's last "
                   "planned start, added up)\n",
                   o->pace, pace_span * 1e3);
        } else if (o->pace > 0)
            printf("pacing: off (the greedy schedule plans no start times)\n");
        printf("%5s %12s %12s %10s  %s\n", "step", "transfer ms", "verify ms", "GB/s", "result");
        if (o->bench) /* the probe's memory before step 1: no allocation between the steps */
            have_probe = push_probe_open(o, push_bench_bytes(&plan), &probe);
    }
    for (s = 1; !failed && s <= o->steps; s++) {
        double tt = 0, vt = 0;
        uint64_t tasks = 0, bytes = 0;
        int part = o->partial > 0 && s % 2 == 0;
        wsync_result r;
        push_wait_ready(rdy[0], o->trainers, (int)o->timeout_ms);
        r = wsync_controller_go(c, s, &err);
        if (r == WSYNC_OK && o->kill_role == WSYNC_CTL_INFERENCE && o->kill_step == s &&
            (unsigned)o->kill_rank < o->inference)
            kill(pids[o->trainers + (unsigned)o->kill_rank], SIGKILL);
        if (r == WSYNC_OK) r = wsync_controller_finish(c, s, &err);
        if (r != WSYNC_OK) {
            printf("%5llu %12s %12s %10s  FAILED: %s\n", (unsigned long long)s, "-", "-", "-", err.message);
            failed = 1;
            break;
        }
        wsync_controller_step_times(c, &tt, &vt);
        if (s == 1) sp_t1 = tt, sp_c1 = vt;
        else if (push_dense_step(o, s)) sp_dt += tt, sp_dc += vt;
        else sp_t += tt, sp_c += vt;
        /* what the trainers ran, as the controller checked it against the plan */
        wsync_controller_step_tasks(c, &tasks, &bytes);
        if (part) {
            part_t += tt, part_n++, part_tasks += tasks, part_bytes += bytes;
        } else {
            if (tasks != plan.transfers || bytes != plan.bytes) wrong++; /* a full step is the whole plan */
            /* the trainers did not keep the planned starts (a sparse step
               writes one slot per receiver: no plan to pace) */
            if (tt < pace_span && (!o->sparse || push_dense_step(o, s))) {
                printf("push-demo: step %llu took %.3f ms, less than its planned starts' %.3f ms: NOT PACED\n",
                       (unsigned long long)s, tt * 1e3, pace_span * 1e3);
                bad = 1;
            }
            full_tasks = tasks;
            if (s > 1) full_t += tt, full_n++;
            sum_t += tt;
            if (s == 1) first_t = tt;
            if (best_t == 0 || tt < best_t) best_t = tt;
        }
        committed = s;
        printf("%5llu %12.1f %12.1f %10.2f  ok: %u ranks bit-exact, %llu tasks%s\n", (unsigned long long)s, tt * 1e3,
               vt * 1e3, tt > 0 ? (double)bytes / tt / 1e9 : 0.0, o->inference, (unsigned long long)tasks,
               part ? " (partial)" : "");
        fflush(stdout);
        if (have_probe && !part) { /* every rank is idle until the fill byte */
            step_t[s] = tt;
            /* as many bytes as a trainer's step: as long as the step, as exposed to the guest's pauses */
            step_rate[s] = push_probe_rate(&probe, (unsigned)((plan.max_trainer_bytes + probe.B - 1) / probe.B));
        }
        if (s < o->steps) { /* every trainer may fill its next step now (a byte each) */
            for (i = 0; i < o->trainers; i++)
                if (write(fil[1], "f", 1) != 1) break;
        }
    }
    close(fil[1]); /* no further step: the trainers wait for BYE */
    fil[1] = -1;
    if (committed && !wrong)
        printf("executed tasks match the plan: %llu tasks at every full step%s\n", (unsigned long long)full_tasks,
               part_n ? ", and at every partial step the tasks of the tensors the trainers named" : "");
    else if (committed) {
        printf("push-demo: EXECUTED TASKS DIFFER from the plan at %llu steps\n", (unsigned long long)wrong);
        bad = 1;
    }
    if (part_n) {
        double pm = part_t / (double)part_n, fm = full_n ? full_t / (double)full_n : 0;
        printf("partial: %llu steps of %.0f%% of the tensors, %.0f tasks and %.2f MB each on average, %.2f ms mean; "
               "full steps (3 on) %.2f ms mean for %llu tasks and %.2f MB; partial/full time %.3f, bytes %.3f\n",
               (unsigned long long)part_n, o->partial * 100, (double)part_tasks / (double)part_n,
               (double)part_bytes / (double)part_n / 1e6, pm * 1e3, fm * 1e3, (unsigned long long)full_tasks,
               (double)plan.bytes / 1e6, fm > 0 ? pm / fm : 0.0,
               (double)part_bytes / (double)part_n / (double)(plan.bytes ? plan.bytes : 1));
    }
    if (o->bench && !failed && committed) { /* the ranks wait for GO: the machine is ours */
        const wsync_plan *pl = wsync_controller_plan_ref(c);
        push_consts k;
        wsync_plan_sim_options so;
        wsync_plan_sim_result sr;
        /* the first step faults the receivers' pages in: the mean of the later ones */
        uint64_t nf = committed - part_n; /* full steps */
        double mean = nf > 1 ? (sum_t - first_t) / (double)(nf - 1) : sum_t, pred, replay = 0;
        if (!pl) printf("bench: no prediction: the greedy schedule is no plan\n");
        else if (!have_probe || !push_measure(o, &probe, &k))
            printf("bench: no prediction: measuring the fabric failed\n");
        else {
            memset(&so, 0, sizeof so);
            so.nic_gbps = k.send_Bps * 8 / 1e9;
            so.recv_gbps = -1; /* folded into the concurrent senders' rate */
            so.copy_gbps = k.copy_Bps * 8 / 1e9;
            so.quant_gbps = k.quant_Bps * 8 / 1e9;
            so.task_us = k.task_s > 0 ? k.task_s * 1e6 : -1;
            so.barrier_us = k.rtt_s * 1e6 + 1e-3;
            so.pace_gbps = o->pace; /* the trainers' pacing, as the controller sent it */
            so.nic_senders = o->trainers; /* push_measure's writers, all at once */
            so.cpus = 0; /* the replay alone, for the record */
            if (wsync_plan_simulate(pl, &so, &sr, &err) == WSYNC_OK) replay = sr.seconds + k.rtt_s;
            so.cpus = (double)k.cpus;
            if (wsync_plan_simulate(pl, &so, &sr, &err) != WSYNC_OK)
                printf("bench: simulate: %s\n", err.message);
            else {
                pred = sr.seconds + k.rtt_s; /* and GO to DONE: one round trip */
                printf("bench: measured constants: %.2f GB/s per sender (%u at once), copy %.2f GB/s, quantize "
                       "%.2f GB/s (a core's while all work, this data), task %.1f us, round trip %.1f us, %ld cpus\n",
                       k.send_Bps / 1e9, o->trainers, k.copy_Bps / 1e9, k.quant_Bps / 1e9, k.task_s * 1e6,
                       k.rtt_s * 1e6, k.cpus);
                printf("bench: step measured %.3f ms mean (%s), %.3f ms best; predicted %.3f ms (simulator on this plan, "
                       "%u groups; replay %.3f ms with a core per rank, CPU work over %ld cores %.3f ms); "
                       "measured/predicted %.3f mean, %.3f best\n",
                       mean * 1e3, part_n ? "full steps 3 on" : "steps 2 on", best_t * 1e3, pred * 1e3, sr.n_groups,
                       replay * 1e3, k.cpus, sr.cpu_seconds * 1e3, mean / pred, best_t / pred);
                push_bench_steps(pl, &so, &k, step_t, step_rate, committed);
            }
        }
    }
    if (have_probe) push_probe_close(&probe);
    free(step_t);
    free(step_rate);
    wsync_controller_close(c);
    if (o->stall_role == WSYNC_CTL_TRAINER) { /* it stopped itself, as asked: it cannot end alone */
        kill(pids[o->stall_rank], SIGKILL);
        printf("trainer rank %d: stopped at step %llu, as asked\n", o->stall_rank, (unsigned long long)o->stall_step);
    }
    if (!push_wait_children(pids, n, (int)o->timeout_ms + 5000)) {
        printf("push-demo: a process did not end in time and was killed\n");
        bad = 1;
    }
    for (;;) { /* the reports */
        push_report r;
        ssize_t got = read(pfd[0], &r, sizeof r);
        unsigned k;
        if (got != (ssize_t)sizeof r) break;
        k = r.role == WSYNC_CTL_TRAINER ? r.rank : o->trainers + r.rank;
        if (k < n) {
            reps[k] = r;
            have[k] = 1;
        }
    }
    close(pfd[0]);
    close(rdy[0]);
    close(fil[0]);
    for (i = o->trainers; i < n; i++) {
        push_report *r = &reps[i];
        unsigned ir = i - o->trainers;
        int killed = o->kill_role == WSYNC_CTL_INFERENCE && (unsigned)o->kill_rank == ir;
        if (!have[i]) {
            printf("inference rank %u: %s\n", ir, killed ? "killed, as asked" : "no report (it died)");
            if (!killed) bad = 1;
            continue;
        }
        /* a survivor's version is the last step it verified, and no step
           the controller committed is missing */
        if (!r->ok || r->version < committed || r->version > committed + 1) bad = 1;
        printf("inference rank %u: version %llu, %llu steps verified bit-exact%s%s (%s)\n", ir,
               (unsigned long long)r->version, (unsigned long long)r->verified,
               r->mismatches ? ", MISMATCH" : "", r->version != r->last_verified ? ", VERSION NOT VERIFIED" : "",
               r->msg);
    }
    for (i = 0; i < o->trainers; i++)
        if (have[i] && !reps[i].ok) {
            printf("trainer rank %u: %s\n", i, reps[i].msg);
            if (!failed) bad = 1;
        }
    if (o->sparse && committed > 1) {
        double tc[6];
        tc[0] = sp_t1, tc[1] = sp_c1, tc[2] = sp_t, tc[3] = sp_c, tc[4] = sp_dt, tc[5] = sp_dc;
        push_sparse_summary(o, &plan, reps, have, committed, tc);
    }
    if (!failed && !bad)
        printf("push-demo: %llu of %llu steps committed, every inference rank bit-exact at every step; "
               "mean transfer %.1f ms (full steps)\n",
               (unsigned long long)committed, (unsigned long long)o->steps,
               sum_t * 1e3 / (double)(committed > part_n ? committed - part_n : 1));
    else
        printf("push-demo: %llu of %llu steps committed%s\n", (unsigned long long)committed,
               (unsigned long long)o->steps, bad ? "; a receiver is wrong or a process misbehaved" : "");
    if (o->bench && !failed && !bad && best_t > 0) {
        double mc = 0, pv = 0, per_rank = best_t / (double)o->inference;
        push_baselines(plan.max_inference_bytes, &mc, &pv);
        /* the push moves plan.bytes (every inference rank's copy); the
           baselines move one rank's bytes, so compare time per rank */
        printf("bench: push %u->%u over %s: best step %.1f ms for %.1f MB = %.2f GB/s; "
               "memcpy %.2f GB/s, one process_vm_writev %.2f GB/s (of %.1f MB)\n",
               o->trainers, o->inference, o->backend, best_t * 1e3, (double)plan.bytes / 1e6,
               (double)plan.bytes / best_t / 1e9, mc > 0 ? (double)plan.max_inference_bytes / mc / 1e9 : 0.0,
               pv > 0 ? (double)plan.max_inference_bytes / pv / 1e9 : 0.0, (double)plan.max_inference_bytes / 1e6);
        printf("bench: push throughput / memcpy = %.2f, / one process_vm_writev = %.2f (target 0.8)\n",
               mc > 0 ? mc / per_rank : 0.0, pv > 0 ? pv / per_rank : 0.0);
    }
    free(pids);
    free(reps);
    free(have);
    return failed || bad ? 1 : 0;
}

int cmd_push_demo(int argc, char **argv)
{
    push_opts o;
    const char *model = "tiny", *v;
    uint64_t x;
    int i;
    memset(&o, 0, sizeof o);
    o.backend = "cma";
    o.trainers = 4;
    o.inference = 2;
    o.steps = 3;
    o.timeout_ms = 5000;
    o.block = 128;
    o.watermark = 64ull << 20;
    for (i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(push_usage, stdout);
            fputs(push_usage_faults, stdout);
            fputs(push_usage_sparse, stdout);
            fputs(push_usage_key, stdout);
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--backend", &v)) {
            if (strcmp(v, "cma") && strcmp(v, "shm") && strcmp(v, "tcp"))
                return cli_usage_error("push-demo: --backend takes cma, shm or tcp, not '%s'", v);
            o.backend = v;
        } else if (cli_opt_value(argc, argv, &i, "--trainers", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > 64)
                return cli_usage_error("push-demo: --trainers takes 1..64, not '%s'", v);
            o.trainers = (unsigned)x;
        } else if (cli_opt_value(argc, argv, &i, "--inference", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > 64)
                return cli_usage_error("push-demo: --inference takes 1..64, not '%s'", v);
            o.inference = (unsigned)x;
        } else if (cli_opt_value(argc, argv, &i, "--steps", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > 100000)
                return cli_usage_error("push-demo: --steps takes 1..100000, not '%s'", v);
            o.steps = x;
        } else if (cli_opt_value(argc, argv, &i, "--timeout-ms", &v)) {
            if (!cli_parse_u64(v, &x) || x < 100 || x > 600000)
                return cli_usage_error("push-demo: --timeout-ms takes 100..600000, not '%s'", v);
            o.timeout_ms = (unsigned)x;
        } else if (cli_opt_value(argc, argv, &i, "--layout", &v)) {
            if (strcmp(v, "shard") && strcmp(v, "replica"))
                return cli_usage_error("push-demo: --layout takes shard or replica, not '%s'", v);
            o.replica = strcmp(v, "replica") == 0;
        } else if (cli_opt_value(argc, argv, &i, "--model", &v)) model = v;
        else if (cli_opt_value(argc, argv, &i, "--kill", &v)) {
            if (!push_parse_fault(v, &o.kill_role, &o.kill_rank, &o.kill_step))
                return cli_usage_error("push-demo: --kill takes trainer:R@S or inference:R@S, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--stall", &v) || cli_opt_value(argc, argv, &i, "--stall-mid", &v)) {
            o.stall_mid = strcmp(argv[i - 1], "--stall-mid") == 0;
            if (!push_parse_fault(v, &o.stall_role, &o.stall_rank, &o.stall_step) || o.stall_role != WSYNC_CTL_TRAINER)
                return cli_usage_error("push-demo: %s takes trainer:R@S, not '%s'", argv[i - 1], v);
        } else if (cli_opt_value(argc, argv, &i, "--corrupt", &v)) {
            if (!push_parse_fault(v, &o.corrupt_role, &o.corrupt_rank, &o.corrupt_step) ||
                o.corrupt_role != WSYNC_CTL_INFERENCE)
                return cli_usage_error("push-demo: --corrupt takes inference:R@S, not '%s'", v);
        } else if (strcmp(argv[i], "--bench") == 0) o.bench = 1;
        else if (strcmp(argv[i], "--reshard") == 0) o.reshard = 1;
        else if (cli_opt_value(argc, argv, &i, "--schedule", &v)) {
            if (strcmp(v, "auto") == 0) o.schedule = WSYNC_CTL_SCHEDULE_AUTO;
            else if (strcmp(v, "plan") == 0) o.schedule = WSYNC_CTL_SCHEDULE_PLAN;
            else if (strcmp(v, "greedy") == 0) o.schedule = WSYNC_CTL_SCHEDULE_GREEDY;
            else return cli_usage_error("push-demo: --schedule takes auto, plan or greedy, not '%s'", v);
        }
        else if (strcmp(argv[i], "--mesh-groups") == 0) o.mesh_groups = 1;
        else if (cli_opt_value(argc, argv, &i, "--pace", &v)) {
            char *end = NULL;
            o.pace = strtod(v, &end);
            if (!end || *end || end == v || !(o.pace >= 0.001 && o.pace <= 1e6))
                return cli_usage_error("push-demo: --pace takes Gb/s from 0.001 to 1e6, not '%s'", v);
        }
        else if (cli_opt_value(argc, argv, &i, "--partial", &v)) {
            char *end = NULL;
            o.partial = strtod(v, &end);
            if (!end || *end || end == v || !(o.partial > 0 && o.partial <= 1))
                return cli_usage_error("push-demo: --partial takes a fraction in (0, 1], not '%s'", v);
        }
        else if (strcmp(argv[i], "--fp8") == 0) o.fp8 = o.reshard = 1;
        else if (cli_opt_value(argc, argv, &i, "--block", &v)) {
            if (!cli_parse_u64(v, &x) || x > 4096)
                return cli_usage_error("push-demo: --block takes 0..4096, not '%s'", v);
            o.block = (unsigned)x;
        } else if (cli_opt_value(argc, argv, &i, "--watermark-mb", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > 65536)
                return cli_usage_error("push-demo: --watermark-mb takes 1..65536, not '%s'", v);
            o.watermark = x << 20;
        } else if (cli_opt_value(argc, argv, &i, "--dump", &v)) o.dump = v;
        else if (cli_opt_value(argc, argv, &i, "--bind", &v)) o.bind = v;
        else if (strcmp(argv[i], "--insecure") == 0) o.insecure = 1;
        else if (strcmp(argv[i], "--sparse") == 0) o.sparse = 1;
        else if (cli_opt_value(argc, argv, &i, "--density", &v) || cli_opt_value(argc, argv, &i, "--sparse-max", &v) ||
                 cli_opt_value(argc, argv, &i, "--staging", &v)) {
            const char *name = argv[i - 1];
            char *end = NULL;
            double f = strtod(v, &end);
            if (!end || *end || end == v || !(f > 0 && f <= (strcmp(name, "--sparse-max") ? 1.0 : 100.0)))
                return cli_usage_error("push-demo: %s takes a fraction in (0, %s], not '%s'", name,
                                       strcmp(name, "--sparse-max") ? "1" : "100", v);
            if (!strcmp(name, "--density")) o.density = f;
            else if (!strcmp(name, "--sparse-max")) o.sparse_max = f;
            else o.staging = f;
        } else if (cli_opt_value(argc, argv, &i, "--dense-every", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > 100000)
                return cli_usage_error("push-demo: --dense-every takes 1..100000, not '%s'", v);
            o.dense_every = x;
        }
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("push-demo: unknown or incomplete option '%s'", argv[i]);
        else return cli_usage_error("push-demo: unexpected argument '%s'", argv[i]);
    }
    if (wsync_gen_model_lookup(model, &o.model) != WSYNC_OK) return cli_usage_models("push-demo", model);
    if (!o.sparse && (o.density > 0 || o.sparse_max > 0 || o.staging > 0 || o.dense_every))
        return cli_usage_error("%s", "push-demo: --density, --sparse-max, --staging and --dense-every go with --sparse");
    if (o.sparse && (o.partial > 0 || o.bench))
        return cli_usage_error("%s", "push-demo: --sparse does not go with --partial or --bench");
    if (o.sparse && o.density == 0) o.density = 0.016;
    if (o.sparse && o.staging == 0) o.staging = 0.25;
    if ((o.kill_role == WSYNC_CTL_TRAINER && (unsigned)o.kill_rank >= o.trainers) ||
        (o.kill_role == WSYNC_CTL_INFERENCE && (unsigned)o.kill_rank >= o.inference) ||
        (o.stall_role && (unsigned)o.stall_rank >= o.trainers) ||
        (o.corrupt_role && (unsigned)o.corrupt_rank >= o.inference))
        return cli_usage_error("%s", "push-demo: --kill/--stall/--corrupt names a rank that does not exist");
    if (o.corrupt_role && o.corrupt_step > o.steps)
        return cli_usage_error("push-demo: --corrupt names step %llu of a run of %llu steps",
                               (unsigned long long)o.corrupt_step, (unsigned long long)o.steps);
    printf("push-demo: %s (%zu tensors, %.1f MB bf16), backend %s, %u trainers (%s) -> %u inference ranks "
           "(%s), %llu steps\n",
           o.model.name, o.model.n_tensors, (double)o.model.n_params * 2 / 1e6, o.backend, o.trainers,
           o.replica ? "each the whole model" : "row shards", o.inference,
           o.fp8 ? "tensor-parallel slices, fused, fp8 projections" : o.reshard ? "tensor-parallel slices, fused"
                                                                            : "each the whole model",
           (unsigned long long)o.steps);
    if (o.sparse)
        printf("sparse: steps 2 on change %.2f%% of the elements; staging %.0f%% of each inference rank's bytes; "
               "a receiver region goes sparse at up to %.2f of its dense bytes\n",
               o.density * 100, o.staging * 100, o.sparse_max > 0 ? o.sparse_max : WSYNC_SPARSE_MAX_DEFAULT);
    return push_run(&o);
}
