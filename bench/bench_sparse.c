/* bench_sparse: what a sparse direct step moves, and what its phases cost
   here (issue 43). Two parts, in one run:

   densities   per step, on real and generated bf16 trajectories: the bf16
               elements that changed; and for the tensors an fp8 receiver
               holds (e4m3, one f32 scale per 128x128 tile, the DeepSeek-V3
               convention of wsync_quantize_e4m3), each tile of the step
               classified as
                 none    no fp8 byte and not the scale moved: nothing sent;
                 bytes   the scale is unchanged, some fp8 bytes moved: those
                         bytes are sent with their positions;
                 scale   the tile's scale moved (its amax changed): the whole
                         tile is sent;
               with the fraction of fp8 bytes that moved (in "bytes" tiles)
               and of scales that moved, and the two expectations checked:
               e4m3's coarser grid hides most bf16 one-ulp moves (of the bf16
               changes in tiles whose scale held, how many moved their fp8
               code), and a tile's amax changes rarely. Every tile's
               classification is checked by rebuilding the new codes and
               scales from the old ones and what would be sent (bit-exact,
               or the bench fails).
                 trajectory  tests/fixtures/corpus/trajectory: a small model
                             trained by real AdamW at an RL learning rate
                             (fp8: the 2-D weights but the embeddings and
                             head, as vLLM serves them);
                 generator   tool/wsync_gen.h's qwen3-0.6b (steady-state
                             LIGHT mode by default), step S-1 -> S (fp8: the
                             projections; embeddings and norms bf16).
   rates       the phases of a sparse step on one core, each as a ratio to
               memcpy of the same bytes in the same run (best of REPS):
                 diff      wsync_diff of a bf16 buffer against the last step
                           sent (bytes of one buffer per second);
                 pack      the changes into staging: u32 positions, then the
                           values (packed bytes per second);
                 scatter   the staging into the receiver's weights (packed
                           bytes per second);
                 verify    wsync_digest (bytes per second);
                 quantize  wsync_quantize_e4m3 of whole tiles (bf16 bytes per
                           second);
               and memcmp of equal buffers beside them. The incremental fp8
               update (the bf16 diff's positions, each tile's amax kept:
               only a tile whose amax moved is quantized whole, other
               changes one element against the kept scale) is timed against
               whole-tile quantization, and checked bit-exact against it.
               wsync_rdma.h's WSYNC_PLAN_SPARSE_* constants are these ratios.

   usage: build/bench_sparse [--trajectory DIR] [--model NAME|none] [--step S]
                             [--mode light|adamw] [--rows N] [--threads N]
                             [--density D] [--mib M] [--no-rates] [--no-densities]
          build/bench_sparse --ranks MIB [--threads N] [--slots S] [--density D]
     --trajectory DIR   the real trajectory [tests/fixtures/corpus/trajectory]
     --model NAME       the generator's model [qwen3-0.6b]; none: skip it
     --step S           compare step S-1 with step S [2]
     --mode M           the generator's mode [light]; adamw: AdamW from fresh moments
     --rows N           only the first N rows of each generated tensor (a multiple
                        of 128 keeps whole tiles) [all]
     --density D        the rates' buffers change this fraction of bf16 elements [0.0161]
     --mib M            the rates' buffers, MiB of bf16 [32]
     --ranks MIB        only the phases as the ranks run them (below), on MIB MiB of
                        bf16 a thread (a rank's shard), by --threads N at once [1];
                        prints the flags that give wsync plan these rates
     --slots S          with --ranks: the slots a thread packs, validates and scatters
                        in a step [1] (below) */
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#define WSYNC_GEN_IMPLEMENTATION
#include "tool/wsync_gen.h"
#include "bench_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 128u
#define REPS 9

/* ---- densities ---- */

typedef struct sp_count {
    uint64_t bf16_elems, bf16_changed;      /* every tensor */
    uint64_t fp8_elems, fp8_changed_bf16;   /* fp8 tensors: elements, their bf16 changes */
    uint64_t tiles, tiles_none, tiles_bytes, tiles_scale;
    uint64_t bytes_moved;                   /* fp8 bytes moved in "bytes" tiles */
    uint64_t scale_tile_elems;              /* elements of "scale" tiles */
    uint64_t held_changes, held_moved;      /* bf16 changes in tiles whose scale held; of them, code moved */
    uint64_t one_ulp, one_ulp_moved;        /* of those, the one-ulp moves; of them, code moved */
    uint64_t wire;                          /* sparse fp8 bytes: moved bytes + positions, whole tiles + scales */
    uint64_t dense_wire;                    /* the dense fp8 step: codes + scales */
    uint64_t bad;                           /* tiles whose rebuild did not match */
} sp_count;

static void sp_die(const char *what)
{
    fprintf(stderr, "bench_sparse: %s\n", what);
    exit(2);
}

static void *sp_alloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) sp_die("out of memory");
    return p;
}

static uint64_t sp_changed(const uint16_t *a, const uint16_t *b, uint64_t n)
{
    uint64_t i, c = 0;
    for (i = 0; i < n; i++) c += a[i] != b[i];
    return c;
}

static int sp_ordered_step(uint16_t a, uint16_t b)
{
    int x = wsync_gen_bf16_ordered(a), y = wsync_gen_bf16_ordered(b);
    return x > y ? x - y : y - x;
}

/* One fp8 matrix's step old -> new: classify every tile, count, and
   rebuild the new codes and scales from the old ones and what would be
   sent. */
static void sp_fp8_matrix(const uint16_t *old, const uint16_t *nw, uint64_t rows, uint64_t cols, sp_count *c)
{
    uint64_t n = rows * cols, ns = wsync_quantize_scale_count(rows, cols, BLOCK), tcols = (cols + BLOCK - 1) / BLOCK;
    uint8_t *qo = (uint8_t *)sp_alloc((size_t)n), *qn = (uint8_t *)sp_alloc((size_t)n), *rb = (uint8_t *)sp_alloc((size_t)n);
    float *so = (float *)sp_alloc((size_t)ns * 4), *sn = (float *)sp_alloc((size_t)ns * 4), *sr = (float *)sp_alloc((size_t)ns * 4);
    uint64_t t;
    wsync_error e;
    if (wsync_quantize_e4m3(old, rows, cols, cols, BLOCK, qo, so, &e) != WSYNC_OK ||
        wsync_quantize_e4m3(nw, rows, cols, cols, BLOCK, qn, sn, &e) != WSYNC_OK)
        sp_die(e.message);
    memcpy(rb, qo, (size_t)n);
    memcpy(sr, so, (size_t)ns * 4);
    c->fp8_elems += n;
    c->dense_wire += n + ns * 4;
    for (t = 0; t < ns; t++) {
        uint64_t r0 = (t / tcols) * BLOCK, c0 = (t % tcols) * BLOCK, r, k, moved = 0, changed = 0;
        uint64_t r1 = r0 + BLOCK < rows ? r0 + BLOCK : rows, c1 = c0 + BLOCK < cols ? c0 + BLOCK : cols;
        int scale = memcmp(&so[t], &sn[t], 4) != 0;
        c->tiles++;
        for (r = r0; r < r1; r++)
            for (k = c0; k < c1; k++) {
                uint64_t i = r * cols + k;
                int ch = old[i] != nw[i], mv = qo[i] != qn[i];
                changed += ch;
                moved += mv;
                if (!scale && ch) {
                    int one = sp_ordered_step(old[i], nw[i]) == 1;
                    c->held_changes++;
                    c->held_moved += mv;
                    c->one_ulp += one;
                    c->one_ulp_moved += one && mv;
                }
                if (!scale && mv && !ch) c->bad++; /* a code moved with neither its value nor its scale */
            }
        c->fp8_changed_bf16 += changed;
        if (scale) { /* the whole tile and its scale */
            c->tiles_scale++;
            c->scale_tile_elems += (r1 - r0) * (c1 - c0);
            c->wire += (r1 - r0) * (c1 - c0) + 4 + 4; /* codes, scale, the tile's position */
            for (r = r0; r < r1; r++) memcpy(rb + r * cols + c0, qn + r * cols + c0, (size_t)(c1 - c0));
            sr[t] = sn[t];
        } else if (moved) {
            c->tiles_bytes++;
            c->bytes_moved += moved;
            c->wire += moved * 5; /* u32 position and the code */
            for (r = r0; r < r1; r++)
                for (k = c0; k < c1; k++)
                    if (qo[r * cols + k] != qn[r * cols + k]) rb[r * cols + k] = qn[r * cols + k];
        } else {
            c->tiles_none++;
        }
    }
    if (memcmp(rb, qn, (size_t)n) != 0 || memcmp(sr, sn, (size_t)ns * 4) != 0) c->bad++;
    free(qo);
    free(qn);
    free(rb);
    free(so);
    free(sn);
    free(sr);
}

static void sp_print_head(void)
{
    printf("  %-14s %9s %9s | %8s %8s %8s %8s | %9s %9s | %8s %8s | %8s\n", "step", "bf16 chg", "fp8 t.chg",
           "tiles", "none", "bytes", "scale", "fp8 B mv", "scales mv", "hidden", "1ulp hid", "wire");
}

static void sp_print(const char *label, const sp_count *c)
{
    double tl = c->tiles ? (double)c->tiles : 1;
    printf("  %-14s %8.4f%% %8.4f%% | %8llu %7.3f%% %7.3f%% %7.3f%% | %8.4f%% %8.4f%% | %7.2f%% %7.2f%% | %7.4f%%\n",
           label, 100.0 * (double)c->bf16_changed / (double)(c->bf16_elems ? c->bf16_elems : 1),
           100.0 * (double)c->fp8_changed_bf16 / (double)(c->fp8_elems ? c->fp8_elems : 1),
           (unsigned long long)c->tiles, 100.0 * (double)c->tiles_none / tl, 100.0 * (double)c->tiles_bytes / tl,
           100.0 * (double)c->tiles_scale / tl, 100.0 * (double)c->bytes_moved / (double)(c->fp8_elems ? c->fp8_elems : 1),
           100.0 * (double)c->tiles_scale / tl,
           100.0 * (1.0 - (double)c->held_moved / (double)(c->held_changes ? c->held_changes : 1)),
           100.0 * (1.0 - (double)c->one_ulp_moved / (double)(c->one_ulp ? c->one_ulp : 1)),
           100.0 * (double)c->wire / (double)(c->dense_wire ? c->dense_wire : 1));
}

static void sp_add(sp_count *a, const sp_count *b)
{
    a->bf16_elems += b->bf16_elems;
    a->bf16_changed += b->bf16_changed;
    a->fp8_elems += b->fp8_elems;
    a->fp8_changed_bf16 += b->fp8_changed_bf16;
    a->tiles += b->tiles;
    a->tiles_none += b->tiles_none;
    a->tiles_bytes += b->tiles_bytes;
    a->tiles_scale += b->tiles_scale;
    a->bytes_moved += b->bytes_moved;
    a->scale_tile_elems += b->scale_tile_elems;
    a->held_changes += b->held_changes;
    a->held_moved += b->held_moved;
    a->one_ulp += b->one_ulp;
    a->one_ulp_moved += b->one_ulp_moved;
    a->wire += b->wire;
    a->dense_wire += b->dense_wire;
    a->bad += b->bad;
}

static uint8_t *sp_read_file(const char *path, uint64_t *size)
{
    FILE *f = fopen(path, "rb");
    long n;
    uint8_t *b;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    b = (uint8_t *)sp_alloc((size_t)n);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    *size = (uint64_t)n;
    return b;
}

/* The trajectory's fp8 tensors: 2-D weights but the embeddings and head. */
static int sp_traj_fp8(const wsync_st_tensor *t)
{
    return t->rank == 2 && !strstr(t->name, "tok.") && !strstr(t->name, "pos.") && !strstr(t->name, "head.");
}

static int sp_trajectory(const char *dir, sp_count *all)
{
    uint8_t *buf[2] = {NULL, NULL};
    wsync_st_file f[2];
    int s, steps = 0;
    memset(f, 0, sizeof f);
    printf("densities: the real AdamW trajectory (%s), bf16 -> fp8 e4m3, %ux%u tiles\n", dir, BLOCK, BLOCK);
    sp_print_head();
    for (s = 0;; s++) {
        char path[4096];
        uint64_t size;
        wsync_error e;
        int cur = s & 1;
        snprintf(path, sizeof path, "%s/step_%04d.safetensors", dir, s);
        free(buf[cur]);
        wsync_st_free(&f[cur]);
        if (!(buf[cur] = sp_read_file(path, &size))) break;
        if (wsync_st_parse(buf[cur], size, NULL, &f[cur], &e) != WSYNC_OK) sp_die(e.message);
        if (s > 0) {
            sp_count c;
            size_t i;
            char label[32];
            memset(&c, 0, sizeof c);
            for (i = 0; i < f[cur].n_tensors; i++) {
                const wsync_st_tensor *tn = &f[cur].tensors[i];
                const wsync_st_tensor *to = wsync_st_find(&f[1 - cur], tn->name);
                uint16_t *a, *b;
                if (!to || tn->dtype != WSYNC_DTYPE_BF16 || to->nelem != tn->nelem) sp_die("trajectory: tensors differ");
                a = (uint16_t *)sp_alloc((size_t)tn->nelem * 2);
                b = (uint16_t *)sp_alloc((size_t)tn->nelem * 2);
                memcpy(a, to->data, (size_t)tn->nelem * 2); /* aligned copies */
                memcpy(b, tn->data, (size_t)tn->nelem * 2);
                c.bf16_elems += tn->nelem;
                c.bf16_changed += sp_changed(a, b, tn->nelem);
                if (sp_traj_fp8(tn)) sp_fp8_matrix(a, b, tn->shape[0], tn->shape[1], &c);
                free(a);
                free(b);
            }
            snprintf(label, sizeof label, "%d -> %d", s - 1, s);
            sp_print(label, &c);
            sp_add(all, &c);
            steps++;
        }
    }
    free(buf[0]);
    free(buf[1]);
    wsync_st_free(&f[0]);
    wsync_st_free(&f[1]);
    if (steps) sp_print("all steps", all);
    return steps;
}

static int sp_gen_fp8(const wsync_gen_tensor_info *ti)
{
    return ti->kind == WSYNC_GEN_KIND_MATRIX && ti->rank == 2 && !strstr(ti->name, "lm_head");
}

/* The generator's model, step S-1 -> S, tensor by tensor (bounded memory). */
static void sp_generator(const char *name, int step, wsync_gen_mode mode, uint64_t rows_max, sp_count *c)
{
    wsync_gen_model m;
    wsync_gen_config cfg;
    size_t i;
    double t0 = bench_cpu__now();
    if (wsync_gen_model_lookup(name, &m) != WSYNC_OK) sp_die("unknown generator model");
    wsync_gen_config_default(&cfg);
    cfg.mode = mode;
    printf("densities: the generator's %s (%s), step %d -> %d%s\n", name, mode == WSYNC_GEN_LIGHT ? "light" : "adamw",
           step - 1, step, rows_max ? " (the first rows of each tensor)" : "");
    for (i = 0; i < m.n_tensors; i++) {
        wsync_gen_tensor_info ti;
        wsync_gen_tensor t;
        uint64_t cols, rows, n;
        uint16_t *a, *b;
        int s;
        if (wsync_gen_model_tensor(&m, i, &ti) != WSYNC_OK) sp_die("generator tensor");
        cols = ti.rank > 1 ? ti.shape[1] : ti.nelem;
        rows = ti.rank > 1 ? ti.shape[0] : 1;
        if (rows_max && rows > rows_max) rows = rows_max;
        n = rows * cols;
        a = (uint16_t *)sp_alloc((size_t)n * 2);
        b = (uint16_t *)sp_alloc((size_t)n * 2);
        if (wsync_gen_tensor_init(&t, &m, i, 0, n, &cfg, step == 1 ? a : NULL) != WSYNC_OK) sp_die("generator init");
        for (s = 1; s < step - 1; s++) wsync_gen_tensor_step(&t, NULL);
        if (step > 1) wsync_gen_tensor_step(&t, a);
        wsync_gen_tensor_step(&t, b);
        wsync_gen_tensor_free(&t);
        c->bf16_elems += n;
        c->bf16_changed += sp_changed(a, b, n);
        if (sp_gen_fp8(&ti)) sp_fp8_matrix(a, b, rows, cols, c);
        free(a);
        free(b);
    }
    sp_print_head();
    sp_print(name, c);
    printf("  (%.1f s)\n", bench_cpu__now() - t0);
}

static void sp_summary(const char *what, const sp_count *c)
{
    double tl = c->tiles ? (double)c->tiles : 1;
    printf("  %s: bf16 %.4f%% changed; fp8 bytes moved %.4f%% (in tiles whose scale held), scales moved %.4f%% "
           "of tiles; e4m3 hid %.2f%% of the bf16 changes (%.2f%% of one-ulp moves); sparse fp8 wire %.4f%% of "
           "dense; %llu tiles checked, %llu rebuilt wrong\n",
           what, 100.0 * (double)c->bf16_changed / (double)(c->bf16_elems ? c->bf16_elems : 1),
           100.0 * (double)c->bytes_moved / (double)(c->fp8_elems ? c->fp8_elems : 1),
           100.0 * (double)c->tiles_scale / tl,
           100.0 * (1.0 - (double)c->held_moved / (double)(c->held_changes ? c->held_changes : 1)),
           100.0 * (1.0 - (double)c->one_ulp_moved / (double)(c->one_ulp ? c->one_ulp : 1)),
           100.0 * (double)c->wire / (double)(c->dense_wire ? c->dense_wire : 1), (unsigned long long)c->tiles,
           (unsigned long long)c->bad);
}

/* ---- rates ---- */

static uint64_t sp_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint16_t sp_bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* The incremental fp8 update of a rows x cols matrix (row-major, whole
   BLOCK tiles): from the bf16 diff's positions, each tile's kept amax
   (bf16 bits without the sign) and scale, and the old codes: a tile whose
   amax moved is quantized whole (its codes and scale replaced), every
   other change one element against the kept scale. Writes the new codes
   into q (the old ones on entry), amax and scales in place; returns the
   codes that moved outside whole tiles. */
static uint64_t sp_fp8_update(const uint16_t *old, const uint16_t *nw, uint64_t rows, uint64_t cols,
                              const uint32_t *pos, size_t np, uint16_t *amax, float *scales, uint8_t *q, uint8_t *mark,
                              uint32_t *tl, uint64_t *requant)
{
    static uint8_t tile[BLOCK * BLOCK];
    uint64_t tcols = cols / BLOCK, ntiles = (rows / BLOCK) * tcols, t, moved = 0, row = 0, row0 = 0;
    size_t k;
    wsync_error e;
    memset(mark, 0, (size_t)ntiles);
    for (k = 0; k < np; k++) { /* each change's tile (positions ascend: no division), and the tile's amax */
        uint64_t i = pos[k];
        uint16_t a = (uint16_t)(nw[i] & 0x7FFFu);
        while (i >= row0 + cols) row0 += cols, row++;
        t = tl[k] = (uint32_t)((row / BLOCK) * tcols + (i - row0) / BLOCK);
        if (a > amax[t]) mark[t] = 1;
        else if (a < amax[t] && (old[i] & 0x7FFFu) == amax[t]) mark[t] |= 2; /* the max may have fallen */
    }
    *requant = 0;
    for (t = 0; t < ntiles; t++) {
        uint64_t r0 = (t / tcols) * BLOCK, c0 = (t % tcols) * BLOCK, r, c;
        uint16_t m = 0;
        if (!mark[t]) continue;
        if (mark[t] == 2) { /* amax can only have fallen: the tile's max */
            for (r = r0; r < r0 + BLOCK; r++)
                for (c = c0; c < c0 + BLOCK; c++) {
                    uint16_t a = (uint16_t)(nw[r * cols + c] & 0x7FFFu);
                    m = a > m ? a : m;
                }
            if (m == amax[t]) {
                mark[t] = 0;
                continue;
            }
        }
        mark[t] = 1;
        (*requant)++;
        if (wsync_quantize_e4m3(nw + r0 * cols + c0, BLOCK, BLOCK, cols, BLOCK, tile, &scales[t], &e) != WSYNC_OK)
            sp_die(e.message);
        for (r = 0; r < BLOCK; r++) memcpy(q + (r0 + r) * cols + c0, tile + r * BLOCK, BLOCK);
        amax[t] = 0;
        for (r = r0; r < r0 + BLOCK; r++)
            for (c = c0; c < c0 + BLOCK; c++) {
                uint16_t a = (uint16_t)(nw[r * cols + c] & 0x7FFFu);
                amax[t] = a > amax[t] ? a : amax[t];
            }
    }
    for (k = 0; k < np; k++) {
        uint64_t i = pos[k];
        uint8_t code;
        if (mark[tl[k]]) continue;
        code = wsync_f32_to_e4m3(wsync_bf16_to_f32(nw[i]) / scales[tl[k]], WSYNC_FP8_SATURATE);
        if (code != q[i]) q[i] = code, moved++;
    }
    return moved;
}

/* The diff and the incremental fp8 update together, a band of BLOCK rows at
   a time (the band's bf16 still in cache when its changes are handled), as
   a sender would run them. Returns the changes; *moved the codes moved
   outside whole tiles. */
static size_t sp_fp8_banded(const uint16_t *old, const uint16_t *nw, uint64_t rows, uint64_t cols, uint32_t *pos,
                            uint16_t *amax, float *scales, uint8_t *q, uint8_t *mark, uint32_t *tl, uint64_t *requant,
                            uint64_t *moved)
{
    uint64_t r0, tcols = cols / BLOCK, rq = 0;
    size_t got = 0;
    *moved = 0;
    *requant = 0;
    for (r0 = 0; r0 < rows; r0 += BLOCK) {
        size_t np = wsync_diff(old + r0 * cols, nw + r0 * cols, (size_t)(BLOCK * cols), 2, pos);
        *moved += sp_fp8_update(old + r0 * cols, nw + r0 * cols, BLOCK, cols, pos, np, amax + (r0 / BLOCK) * tcols,
                                scales + (r0 / BLOCK) * tcols, q + r0 * cols, mark, tl, &rq);
        *requant += rq;
        got += np;
    }
    return got;
}

#define SP_PHASES 7

static double sp_median(double *v, int n)
{
    int i, j;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double sp_best(double best, double t)
{
    return t < best ? t : best;
}

static void sp_rates(double density, uint64_t mib)
{
    uint64_t n = mib * 1048576 / 2, cols = 4096, rows, i, s = 7, np = 0, ns;
    uint16_t *old, *nw, *dst, *vals, *amax0, *amax;
    uint8_t *copy, *q0, *q, *qfull, *mark;
    uint32_t *pos, *pos2, *tlist;
    uint64_t requant = 0;
    float *sc0, *sc, *scfull;
    double tcpy = 1e9, tdiff, tq, tinc, best[SP_PHASES], ratio[SP_PHASES][REPS], rmed[SP_PHASES], rbest[SP_PHASES];
    double packed, mc;
    volatile int sink = 0;
    volatile uint64_t vsink = 0;
    size_t got = 0;
    int rep, exact = 1;
    wsync_error e;
    for (rep = 0; rep < SP_PHASES; rep++) best[rep] = 1e9;
    rows = n / cols / BLOCK * BLOCK;
    n = rows * cols;
    ns = wsync_quantize_scale_count(rows, cols, BLOCK);
    old = (uint16_t *)sp_alloc((size_t)n * 2);
    nw = (uint16_t *)sp_alloc((size_t)n * 2);
    dst = (uint16_t *)sp_alloc((size_t)n * 2);
    copy = (uint8_t *)sp_alloc((size_t)n * 2);
    pos = (uint32_t *)sp_alloc((size_t)n * 4);
    tlist = (uint32_t *)sp_alloc((size_t)n * 4);
    pos2 = (uint32_t *)sp_alloc((size_t)BLOCK * cols * 4);
    vals = (uint16_t *)sp_alloc((size_t)n * 2);
    q0 = (uint8_t *)sp_alloc((size_t)n);
    q = (uint8_t *)sp_alloc((size_t)n);
    qfull = (uint8_t *)sp_alloc((size_t)n);
    mark = (uint8_t *)sp_alloc((size_t)ns);
    amax0 = (uint16_t *)sp_alloc((size_t)ns * 2);
    amax = (uint16_t *)sp_alloc((size_t)ns * 2);
    sc0 = (float *)sp_alloc((size_t)ns * 4);
    sc = (float *)sp_alloc((size_t)ns * 4);
    scfull = (float *)sp_alloc((size_t)ns * 4);
    /* weights about N(0, 0.01), one in 4096 ten times larger; a step moves
       `density` of them by one bf16 ulp (as most of an RL step's changes) */
    for (i = 0; i < n; i++) {
        uint64_t r = sp_rng(&s);
        double u1 = ((double)(r >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(sp_rng(&s) >> 11) / 9007199254740992.0;
        double g = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2) * 0.01;
        old[i] = sp_bf16_of((float)((r & 4095) == 0 ? g * 10 : g));
        nw[i] = old[i];
        if ((double)(sp_rng(&s) >> 11) / 9007199254740992.0 < density) {
            nw[i] = (uint16_t)(old[i] + ((sp_rng(&s) & 1) && (old[i] & 0x7F) != 0 ? -1 : 1));
            if ((nw[i] & 0x7F80u) == 0x7F80u) nw[i] = old[i];
        }
    }
    if (wsync_quantize_e4m3(old, rows, cols, cols, BLOCK, q0, sc0, &e) != WSYNC_OK) sp_die(e.message);
    for (i = 0; i < ns; i++) { /* the kept amax per tile */
        uint64_t r0 = (i / (cols / BLOCK)) * BLOCK, c0 = (i % (cols / BLOCK)) * BLOCK, r, c;
        amax0[i] = 0;
        for (r = r0; r < r0 + BLOCK; r++)
            for (c = c0; c < c0 + BLOCK; c++) {
                uint16_t a = (uint16_t)(old[r * cols + c] & 0x7FFFu);
                amax0[i] = a > amax0[i] ? a : amax0[i];
            }
    }
    memcpy(dst, old, (size_t)n * 2);
    /* each phase timed right after a memcpy of the buffer: its ratio is the
       median over the pairs (the machine is shared: a pair sees the same
       load), its rate the best time */
    for (rep = 0; rep < REPS; rep++) {
        int k;
        for (k = 0; k < SP_PHASES; k++) {
            double t = bench_cpu__now(), tc, tp;
            uint64_t moved;
            memcpy(copy, old, (size_t)n * 2);
            tc = bench_cpu__now() - t;
            tcpy = sp_best(tcpy, tc);
            if (k == 6) { /* the fp8 update starts from the old codes */
                memcpy(q, q0, (size_t)n);
                memcpy(sc, sc0, (size_t)ns * 4);
                memcpy(amax, amax0, (size_t)ns * 2);
            }
            t = bench_cpu__now();
            switch (k) {
            case 0: sink += memcmp(copy, old, (size_t)n * 2); break;
            case 1: got = wsync_diff(old, nw, (size_t)n, 2, pos); break;
            case 2: /* pack: positions (already in staging: the diff wrote them), then the values */
                for (i = 0; i < got; i++) vals[i] = nw[pos[i]];
                break;
            case 3:
                for (i = 0; i < got; i++) dst[pos[i]] = vals[i];
                break;
            case 4: vsink += wsync_digest(nw, (size_t)n * 2); break; /* not the buffer the memcpy touched */
            case 5:
                if (wsync_quantize_e4m3(nw, rows, cols, cols, BLOCK, qfull, scfull, &e) != WSYNC_OK) sp_die(e.message);
                break;
            default:
                (void)sp_fp8_banded(old, nw, rows, cols, pos2, amax, sc, q, mark, tlist, &requant, &moved);
                vsink += moved;
                break;
            }
            tp = bench_cpu__now() - t;
            best[k] = sp_best(best[k], tp);
            ratio[k][rep] = tc / tp; /* per byte counted: scaled below */
        }
        if (memcmp(q, qfull, (size_t)n) != 0 || memcmp(sc, scfull, (size_t)ns * 4) != 0) exact = 0;
    }
    np = got;
    if (memcmp(dst, nw, (size_t)n * 2) != 0) exact = 0;
    packed = (double)np * 6; /* u32 position and the bf16 value */
    mc = (double)n * 2 / tcpy;
    {
        static const char *const name[SP_PHASES] = {"memcmp", "diff", "pack", "scatter", "verify", "quantize", "diff+fp8"};
        static const char *const what[SP_PHASES] = {
            "bytes of one buffer", "bf16 bytes of one buffer (wsync_diff)", "packed bytes (6 a change)",
            "packed bytes (6 a change)", "bytes digested (wsync_digest)",
            "bf16 bytes (wsync_quantize_e4m3, whole tiles)",
            "bf16 bytes (the diff and the incremental fp8 update, band by band)"};
        int k;
        printf("rates: %llu x %llu bf16 (%.0f MiB), %.4f%% changed by one ulp (%llu), one core; each phase after a "
               "memcpy, %d times: best rate over best memcpy (the model's), and the median of the pairs' ratios\n",
               (unsigned long long)rows, (unsigned long long)cols, (double)n * 2 / 1048576.0,
               100.0 * (double)np / (double)n, (unsigned long long)np, REPS);
        printf("  %-10s %10s %10s %10s   %s\n", "phase", "GB/s", "vs memcpy", "(median)", "bytes counted");
        printf("  %-10s %10.3f %10.4f %10s   %s\n", "memcpy", mc / 1e9, 1.0, "", "bytes copied");
        for (k = 0; k < SP_PHASES; k++) {
            double bytes = k == 2 || k == 3 ? packed : (double)n * 2;
            rmed[k] = sp_median(ratio[k], REPS) * bytes / ((double)n * 2);
            rbest[k] = bytes / best[k] / mc;
            printf("  %-10s %10.3f %10.4f %10.4f   %s\n", name[k], bytes / best[k] / 1e9, rbest[k], rmed[k], what[k]);
        }
    }
    tdiff = best[1];
    tq = best[5];
    tinc = best[6];
    printf("  the incremental fp8 update's own part: %.4f of memcpy in bf16 bytes of the changed elements (the "
           "model's quantize ratio)\n",
           rbest[6] < rbest[1] ? (double)np * 2 / ((double)n * 2) / (1 / rbest[6] - 1 / rbest[1]) : 0.0);
    printf("  incremental fp8 update: the diff and it take %.4fx the diff's time, %.4fx whole-tile quantization's "
           "(%.4f%% changed, %llu of %llu tiles quantized whole: their amax moved); its own part %.2f ns a change; %s\n",
           tinc / tdiff, tinc / tq, 100.0 * (double)np / (double)n, (unsigned long long)requant, (unsigned long long)ns,
           tinc > tdiff ? (tinc - tdiff) / (double)(np ? np : 1) * 1e9 : 0.0, exact ? "bit-exact with it" : "NOT BIT-EXACT");
    if (!exact) sp_die("the incremental fp8 update or the scatter differs from the reference");
    (void)sink;
    (void)vsink;
    free(old);
    free(nw);
    free(dst);
    free(copy);
    free(pos);
    free(tlist);
    free(pos2);
    free(vals);
    free(q0);
    free(q);
    free(qfull);
    free(mark);
    free(amax0);
    free(amax);
    free(sc0);
    free(sc);
    free(scfull);
}

/* ---- ranks: the phases as the ranks run them (bench/bench_sim_check.sh) ----

   What wsync_rank_push and a receiver's COMMIT run (wsync_rdma.h's
   >>sparse), on buffers the size of a rank's (beyond the caches, as a
   shard of a real model is), by N threads at once (the ranks that share
   this host's cores run their phases at the same time), each thread a
   core's share of a step's slots, S (--slots): T trainers each pack a slot
   per receiver, I receivers each validate every trainer's slot, then
   scatter them all (wsync__rank_stg_commit), T*I/N slots a core for both
   (bench/bench_sim_check.sh passes that). Timed over all S slots at once:
   one slot (14 MB for a 284 MiB shard at 1.6%) validates in 2-5 ms, and on
   a shared 2-core machine a median of such reps moved 4x within minutes
   (the verify ratio 0.64-2.57); S slots make a rep S times longer. Per
   thread, the median of SP_RK_REPS (on a shared machine a best time is a
   lucky one, and a run's step is not), each phase's rate over the fastest
   of the memcpys timed beside it (the ratios wsync_plan_sparse_options
   takes), and that memcpy rate (its mem_gbps; with N the cores, a core's
   while every core works):
     diff     wsync_diff in chunks of 32 Ki elements, each change's position
              and value kept and the copy brought up to date (bf16 bytes of
              one buffer);
     pack     per slot, per transfer of SP_RK_XFER elements, its changes
              found, a section reserved (wsync_sparse_section), positions
              and values written, then wsync_sparse_finish's digest: the
              thread's changes into each of S slots, as a trainer packs its
              changes for each receiver (slot bytes, all S);
     verify   wsync_sparse_validate of each of the S slots, one staging
              buffer as a receiver's (slot bytes, all S);
     scatter  wsync_sparse_scatter of each slot into its own copy of the
              weights (a receiver's shards of S trainers), each checked
              bit-exact against the new buffer (slot bytes, all S). */

#define SP_RK_REPS 9
#define SP_RK_CHUNK 32768u   /* wsync_rdma.h's WSYNC__SP_CHUNK */
#define SP_RK_XFER 524288u   /* elements a transfer: 1 MiB, about qwen3-0.6b's mean per trainer and tensor */
/* memcpy (the copy), diff, pack, memcpy (the receiver's S copies), verify, memcpy
   (the new buffer over the copy, equal: the slot out of the caches),
   scatter: a receiver reads slots other processes wrote, more bytes than
   the caches hold (4 trainers' on qwen3-0.6b), so neither verify nor
   scatter finds the slot in a cache */
#define SP_RK_PHASES 7
#define SP_RK_EVICT (96u << 20) /* bytes read and written before pack, verify and scatter: 3x this L3 */

typedef struct sp_rk {
    uint64_t n, nchg, cap_chg, slot_cap, slot_bytes, slots; /* slot_bytes: one slot's (all S alike) */
    uint16_t *old, *cur, *prev, *recv, *val; /* recv: S copies of n elements */
    uint64_t *chg;
    uint32_t *pos;
    uint8_t *slot, *evict; /* slot: S slots of slot_cap bytes */
    int phase, rep, ok;
    double t[SP_RK_PHASES][SP_RK_REPS], best[SP_RK_PHASES]; /* best: the median of t */
} sp_rk;

static uint64_t sp_rk_lb(const uint64_t *c, uint64_t n, uint64_t e)
{
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (c[mid] < e) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void sp_rk_diff(sp_rk *k)
{
    uint64_t at, j;
    k->nchg = 0;
    for (at = 0; at < k->n; at += SP_RK_CHUNK) {
        uint64_t m = k->n - at < SP_RK_CHUNK ? k->n - at : SP_RK_CHUNK,
                 c = wsync_diff(k->prev + at, k->cur + at, (size_t)m, 2, k->pos);
        if (k->nchg + c > k->cap_chg) sp_die("ranks: more changes than counted");
        for (j = 0; j < c; j++) {
            uint64_t e = at + k->pos[j];
            k->chg[k->nchg + j] = e;
            memcpy(&k->val[k->nchg + j], &k->cur[e], 2);
            memcpy(&k->prev[e], &k->val[k->nchg + j], 2);
        }
        k->nchg += c;
    }
}

static void sp_rk_pack(sp_rk *k, uint64_t s)
{
    wsync_sparse_writer w;
    wsync_error e;
    uint64_t x, i;
    wsync_sparse_begin(&w, k->slot + s * k->slot_cap, k->slot_cap, 2, 1, (uint32_t)s);
    for (x = 0; x < k->n; x += SP_RK_XFER) {
        uint64_t end = k->n - x < SP_RK_XFER ? k->n : x + SP_RK_XFER, a = sp_rk_lb(k->chg, k->nchg, x),
                 b = sp_rk_lb(k->chg, k->nchg, end);
        uint32_t *pos;
        uint8_t *val;
        if (a == b) continue;
        if (wsync_sparse_section(&w, 0, 2, x, b - a, &pos, &val, &e) != WSYNC_OK) sp_die(e.message);
        for (i = a; i < b; i++) {
            pos[i - a] = (uint32_t)(k->chg[i] - x);
            memcpy(val + 2 * (i - a), &k->val[i], 2);
        }
    }
    k->slot_bytes = wsync_sparse_finish(&w);
}

static void *sp_rk_main(void *p)
{
    sp_rk *k = (sp_rk *)p;
    uint64_t len = k->n * 2;
    wsync_sparse_expect x;
    wsync_error e;
    uint64_t s;
    double t;
    if (k->phase == 2 || k->phase == 4 || k->phase == 6) { /* untimed: what the phase reads out of the caches */
        uint64_t i, acc = 0;
        for (i = 0; i < SP_RK_EVICT; i += 64) acc += k->evict[i]++;
        k->evict[0] = (uint8_t)acc;
    }
    t = bench_cpu__now();
    switch (k->phase) {
    case 0: memcpy(k->prev, k->old, (size_t)len); break;
    case 1: sp_rk_diff(k); break;
    case 2:
        for (s = 0; s < k->slots; s++) sp_rk_pack(k, s);
        break;
    case 3:
        for (s = 0; s < k->slots; s++) memcpy(k->recv + s * k->n, k->old, (size_t)len);
        break;
    case 4:
        memset(&x, 0, sizeof x);
        x.step = 2, x.base = 1, x.n_regions = 1, x.region_len = &len;
        for (s = 0; s < k->slots; s++) {
            x.sender = (uint32_t)s;
            if (wsync_sparse_validate(k->slot + s * k->slot_cap, k->slot_cap, &x, NULL, &e) != WSYNC_OK) k->ok = 0;
        }
        break;
    case 5: memcpy(k->prev, k->cur, (size_t)len); break;
    default:
        for (s = 0; s < k->slots; s++) {
            uint8_t *region = (uint8_t *)(k->recv + s * k->n);
            wsync_sparse_scatter(k->slot + s * k->slot_cap, &region);
        }
        break;
    }
    k->t[k->phase][k->rep] = bench_cpu__now() - t;
    return NULL;
}

static void sp_ranks(double density, uint64_t mib, unsigned nt, uint64_t slots)
{
    sp_rk *ks = (sp_rk *)sp_alloc(nt * sizeof *ks);
    pthread_t *th = (pthread_t *)sp_alloc(nt * sizeof *th);
    uint32_t thr = (uint32_t)(density * 65536 + 0.5);
    double sum[SP_RK_PHASES] = {0, 0, 0, 0, 0, 0, 0}, ratio[4] = {0, 0, 0, 0}, mem = 0, slot = 0, S = (double)slots;
    static const char *const name[4] = {"diff", "pack", "verify", "scatter"};
    static const char *const what[4] = {
        "bf16 bytes of one buffer (wsync_diff by 32 Ki elements, the changes kept, the copy updated)",
        "slot bytes, all slots (sections by 1 MiB transfers, positions, values, wsync_sparse_finish)",
        "slot bytes, all slots (wsync_sparse_validate: the digest, every position)",
        "slot bytes, all slots (wsync_sparse_scatter, each into its copy of the weights)"};
    unsigned t;
    int rep, ph;
    for (t = 0; t < nt; t++) {
        sp_rk *k = &ks[t];
        uint64_t i, s = 11 + t;
        memset(k, 0, sizeof *k);
        k->n = mib * 1048576 / 2;
        k->slots = slots;
        k->ok = 1;
        k->old = (uint16_t *)sp_alloc((size_t)k->n * 2);
        k->cur = (uint16_t *)sp_alloc((size_t)k->n * 2);
        k->prev = (uint16_t *)sp_alloc((size_t)k->n * 2);
        k->recv = (uint16_t *)sp_alloc((size_t)(k->n * 2 * slots));
        k->pos = (uint32_t *)sp_alloc((size_t)SP_RK_CHUNK * 4);
        for (i = 0; i < k->n; i++) { /* the old weights; `density` of them move to another value */
            uint64_t r = sp_rng(&s);
            k->old[i] = k->cur[i] = (uint16_t)(0x3C00u + (r & 0x0FFFu));
            if (((r >> 32) & 0xFFFFu) < thr) k->cur[i] = (uint16_t)(k->old[i] ^ (1u + ((r >> 48) & 0xFFu)));
        }
        k->cap_chg = sp_changed(k->old, k->cur, k->n);
        k->chg = (uint64_t *)sp_alloc((size_t)(k->cap_chg ? k->cap_chg : 1) * 8);
        k->val = (uint16_t *)sp_alloc((size_t)(k->cap_chg ? k->cap_chg : 1) * 2);
        k->slot_cap = WSYNC_SPARSE_HEADER + (k->n / SP_RK_XFER + 1) * (WSYNC_SPARSE_SECTION + 16) + k->cap_chg * 6;
        k->slot = (uint8_t *)sp_alloc((size_t)(k->slot_cap * slots));
        k->evict = (uint8_t *)sp_alloc(SP_RK_EVICT);
        memset(k->evict, 1, SP_RK_EVICT);
        memset(k->recv, 0, (size_t)(k->n * 2 * slots)); /* faulted in, as a receiver's memory is */
        memset(k->prev, 0, (size_t)k->n * 2);
    }
    for (rep = 0; rep < SP_RK_REPS; rep++)
        for (ph = 0; ph < SP_RK_PHASES; ph++) { /* every thread in the same phase at once */
            for (t = 0; t < nt; t++) {
                ks[t].phase = ph, ks[t].rep = rep;
                if (pthread_create(&th[t], NULL, sp_rk_main, &ks[t]) != 0) sp_die("ranks: pthread_create");
            }
            for (t = 0; t < nt; t++) pthread_join(th[t], NULL);
        }
    for (t = 0; t < nt; t++) {
        sp_rk *k = &ks[t];
        double len = (double)k->n * 2, mc, sb = (double)k->slot_bytes * S; /* mc: the fastest memcpy, bytes/s */
        uint64_t s;
        for (ph = 0; ph < SP_RK_PHASES; ph++) k->best[ph] = sp_median(k->t[ph], SP_RK_REPS);
        mc = len / k->best[0];
        if (len * S / k->best[3] > mc) mc = len * S / k->best[3];
        if (len / k->best[5] > mc) mc = len / k->best[5];
        if (!k->ok) sp_die("ranks: wsync_sparse_validate refused a slot");
        if (memcmp(k->prev, k->cur, (size_t)k->n * 2) != 0) sp_die("ranks: the copy is not the new buffer");
        for (s = 0; s < slots; s++)
            if (memcmp(k->recv + s * k->n, k->cur, (size_t)k->n * 2) != 0)
                sp_die("ranks: a scatter's copy of the weights is not the new buffer");
        mem += mc / nt;
        slot += (double)k->slot_bytes / nt;
        for (ph = 0; ph < SP_RK_PHASES; ph++) sum[ph] += k->best[ph] / nt;
        ratio[0] += (len / k->best[1]) / mc / nt;
        ratio[1] += (sb / k->best[2]) / mc / nt;
        ratio[2] += (sb / k->best[4]) / mc / nt;
        ratio[3] += (sb / k->best[6]) / mc / nt;
    }
    printf("ranks: the phases as the ranks run them, %u thread%s at once, each %llu MiB of bf16 with %.4f%% changed "
           "(%llu), %llu slot%s of %.2f MB (%.2f MB) a thread; per thread, the median of %d, over its fastest memcpy "
           "(the threads' mean)\n",
           nt, nt == 1 ? "" : "s", (unsigned long long)mib, 100.0 * (double)ks[0].cap_chg / (double)ks[0].n,
           (unsigned long long)ks[0].cap_chg, (unsigned long long)slots, slots == 1 ? "" : "s", slot / 1e6,
           slot * S / 1e6, SP_RK_REPS);
    printf("  %-10s %10s %10s   %s\n", "phase", "GB/s", "vs memcpy", "bytes counted");
    printf("  %-10s %10.3f %10.4f   %s\n", "memcpy", mem / 1e9, 1.0, "bytes copied, a thread's while all copy");
    for (ph = 0; ph < 4; ph++) {
        double tm = sum[ph == 0 ? 1 : ph == 1 ? 2 : ph == 2 ? 4 : 6], bytes = ph == 0 ? (double)ks[0].n * 2 : slot * S;
        printf("  %-10s %10.3f %10.4f   %s\n", name[ph], bytes / tm / 1e9, ratio[ph], what[ph]);
    }
    printf("ranks: plan flags: --mem-gbps %.3f --diff-ratio %.4f --pack-ratio %.4f --verify-ratio %.4f "
           "--scatter-ratio %.4f\n",
           mem * 8 / 1e9, ratio[0], ratio[1], ratio[2], ratio[3]);
    for (t = 0; t < nt; t++) {
        free(ks[t].old), free(ks[t].cur), free(ks[t].prev), free(ks[t].recv), free(ks[t].pos);
        free(ks[t].chg), free(ks[t].val), free(ks[t].slot), free(ks[t].evict);
    }
    free(ks);
    free(th);
}

int main(int argc, char **argv)
{
    const char *traj = "tests/fixtures/corpus/trajectory", *model = "qwen3-0.6b";
    int i, step = 2, rates = 1, dens = 1;
    uint64_t rows = 0, mib = 32, rk_mib = 0, rk_slots = 1;
    unsigned rk_threads = 1;
    double density = 0.0161;
    wsync_gen_mode mode = WSYNC_GEN_LIGHT;
    sp_count tc, gc;
    for (i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--trajectory") == 0 && v) traj = v, i++;
        else if (strcmp(argv[i], "--model") == 0 && v) model = v, i++;
        else if (strcmp(argv[i], "--step") == 0 && v) step = atoi(v), i++;
        else if (strcmp(argv[i], "--mode") == 0 && v) mode = strcmp(v, "adamw") == 0 ? WSYNC_GEN_ADAMW : WSYNC_GEN_LIGHT, i++;
        else if (strcmp(argv[i], "--rows") == 0 && v) rows = strtoull(v, NULL, 10), i++;
        else if (strcmp(argv[i], "--density") == 0 && v) density = atof(v), i++;
        else if (strcmp(argv[i], "--mib") == 0 && v) mib = strtoull(v, NULL, 10), i++;
        else if (strcmp(argv[i], "--no-rates") == 0) rates = 0;
        else if (strcmp(argv[i], "--no-densities") == 0) dens = 0;
        else if (strcmp(argv[i], "--ranks") == 0 && v) rk_mib = strtoull(v, NULL, 10), i++;
        else if (strcmp(argv[i], "--threads") == 0 && v) rk_threads = (unsigned)strtoul(v, NULL, 10), i++;
        else if (strcmp(argv[i], "--slots") == 0 && v) rk_slots = strtoull(v, NULL, 10), i++;
        else {
            fprintf(stderr, "bench_sparse: unknown option or missing value '%s' (see the head of bench/bench_sparse.c)\n",
                    argv[i]);
            return 2;
        }
    }
    if (step < 1 || !(density >= 0 && density <= 1) || mib < 1 || mib > 4096 || rk_mib > 4096 || rk_threads < 1 ||
        rk_threads > 64 || rk_slots < 1 || rk_slots > 64) {
        fprintf(stderr, "bench_sparse: --step takes 1 or more, --density 0..1, --mib and --ranks 1..4096, --threads and "
                        "--slots 1..64\n");
        return 2;
    }
    bench_cpu_print(stdout, "bench_sparse");
    memset(&tc, 0, sizeof tc);
    memset(&gc, 0, sizeof gc);
    if (rk_mib) { /* only the ranks' phases */
        sp_ranks(density, rk_mib, rk_threads, rk_slots);
        return 0;
    }
    if (rates) sp_rates(density, mib);
    if (dens) {
        int have = sp_trajectory(traj, &tc);
        if (!have) printf("  (no trajectory at %s)\n", traj);
        if (strcmp(model, "none") != 0) sp_generator(model, step, mode, rows, &gc);
        printf("summary (columns: bf16 chg = elements changed; fp8 t.chg = bf16 changes in the fp8 tensors; tiles "
               "none / bytes / scale = what a tile sends; fp8 B mv = fp8 bytes moved in tiles whose scale held, of "
               "all fp8 bytes; hidden = bf16 changes in those tiles whose code did not move; wire = sparse fp8 "
               "bytes over dense, u32 positions)\n");
        if (have) sp_summary("trajectory", &tc);
        if (strcmp(model, "none") != 0) sp_summary(model, &gc);
        if (tc.bad || gc.bad) {
            fprintf(stderr, "bench_sparse: %llu tiles rebuilt wrong\n", (unsigned long long)(tc.bad + gc.bad));
            return 1;
        }
    }
    return 0;
}
