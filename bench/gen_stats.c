/* gen_stats.c - how the generator's bf16 steps compare with real training.

   For a model from tool/wsync_gen.h, runs N optimizer steps and prints,
   per step: the fraction of bf16 elements that changed, how far they moved
   in ordered-integer space (+-1, +-2, more), and the rate of change by the
   base value's exponent (|w| in [2^e, 2^(e+1))). Then the same statistics
   for a real trajectory (consecutive bf16 safetensors files, e.g.
   shared/corpus/trajectory/step_000*.safetensors), and both side by side.

   build: cc -std=c99 -O2 -I. -o build/gen_stats bench/gen_stats.c -lm -lpthread
   usage: gen_stats [options] [FILE.safetensors ...]
     --model NAME    tiny (default), qwen3-0.6b, qwen2.5-7b; none: no generator
     --steps N       optimizer steps (default 4)
     --seed N        (default 1)
     --lr X          learning rate (default 1e-6)
     --signal X      persistent gradient vs noise (default 0.8)
     --mode M        adamw (default) or light
     --warm          AdamW moments start at their steady state
     --threads N     (default 2)
     --slice N       tensor by tensor, in slices of N elements (bounded memory)
     --limit N       with --slice: only the first N elements of each tensor
     --quiet         no per-step exponent tables, only the side-by-side one */
#define _XOPEN_SOURCE 700
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_GEN_IMPLEMENTATION
#include "tool/wsync_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define GS_MAX_STEPS 64
#define GS_MAX_FILES 65

static double gs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double gs_peak_rss_gb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
    return (double)ru.ru_maxrss * 1024.0 / 1e9; /* Linux: KiB */
}

static void gs_die(const char *what)
{
    fprintf(stderr, "gen_stats: %s\n", what);
    exit(2);
}

static void gs_print_step(int step, const wsync_gen_stats *s, double seconds)
{
    double ch = s->changed ? (double)s->changed : 1.0;
    printf("  %4d  %10llu  %7.4f%%  %6.3f %6.3f %6.3f", step, (unsigned long long)s->changed,
           100.0 * (double)s->changed / (double)(s->total ? s->total : 1), (double)s->step1 / ch,
           (double)s->step2 / ch, (double)s->step_more / ch);
    if (seconds >= 0) printf("  %8.2f s", seconds);
    printf("\n");
}

static void gs_step_header(int timed)
{
    printf("  step     changed     frac      +-1    +-2   more%s\n", timed ? "      time" : "");
}

/* The exponent fields worth a row: at least 1e-4 of all elements. */
static int gs_row_ok(const wsync_gen_stats *s, int e)
{
    return s->exp_total[e] > 0 && (double)s->exp_total[e] >= 1e-4 * (double)s->total;
}

static void gs_exp_label(int e, char *buf, size_t cap)
{
    if (e == 0) snprintf(buf, cap, "  sub");
    else snprintf(buf, cap, "%5d", e - 127);
}

static void gs_print_exp_table(const wsync_gen_stats *st, int n)
{
    int e, k;
    char lab[16];
    printf("  rate of change by base exponent (e: |w| in [2^e, 2^(e+1)); share of elements):\n");
    printf("      e   share ");
    for (k = 0; k < n; k++) printf("  step %-3d", k + 1);
    printf("\n");
    for (e = 0; e < 255; e++) {
        if (!gs_row_ok(&st[0], e)) continue;
        gs_exp_label(e, lab, sizeof lab);
        printf("  %s  %6.3f%%", lab, 100.0 * (double)st[0].exp_total[e] / (double)st[0].total);
        for (k = 0; k < n; k++)
            printf("  %8.5f", st[k].exp_total[e] ? (double)st[k].exp_changed[e] / (double)st[k].exp_total[e] : 0.0);
        printf("\n");
    }
}

/* ---------------------------------------------------------------------- */

typedef struct gs_opts {
    const char *model;
    int steps;
    uint64_t slice, limit;
    int quiet;
    wsync_gen_config cfg;
} gs_opts;

static const char *gs_kind_name(int k)
{
    static const char *names[] = {"matrix", "embedding", "norm", "bias"};
    return k >= 0 && k < 4 ? names[k] : "?";
}

/* Whole model in memory: wsync_gen plus a copy of the previous images. */
static void gs_run_whole(const gs_opts *o, const wsync_gen_model *m, wsync_gen_stats *st,
                         wsync_gen_stats kinds[4])
{
    wsync_gen g;
    uint16_t **prev;
    size_t i;
    int s;
    double t0 = gs_now();
    if (wsync_gen_init(&g, m, &o->cfg) != WSYNC_OK) gs_die("wsync_gen_init failed (memory?)");
    printf("  init (step 0): %.2f s\n", gs_now() - t0);
    prev = (uint16_t **)calloc(m->n_tensors, sizeof *prev);
    if (!prev) gs_die("out of memory");
    for (i = 0; i < m->n_tensors; i++) {
        prev[i] = (uint16_t *)malloc((size_t)g.tensors[i].count * 2);
        if (!prev[i]) gs_die("out of memory");
    }
    gs_step_header(1);
    for (s = 0; s < o->steps; s++) {
        double dt;
        for (i = 0; i < m->n_tensors; i++) memcpy(prev[i], g.bf16[i], (size_t)g.tensors[i].count * 2);
        t0 = gs_now();
        wsync_gen_step(&g);
        dt = gs_now() - t0;
        for (i = 0; i < m->n_tensors; i++) {
            wsync_gen_stats_add(&st[s], prev[i], g.bf16[i], (size_t)g.tensors[i].count);
            if (s == o->steps - 1)
                wsync_gen_stats_add(&kinds[g.tensors[i].info.kind], prev[i], g.bf16[i],
                                    (size_t)g.tensors[i].count);
        }
        gs_print_step(s + 1, &st[s], dt);
    }
    printf("  memory: state %.2f GB + image %.2f GB (+ %.2f GB previous image here); peak RSS %.2f GB\n",
           (double)wsync_gen_state_bytes(o->cfg.mode, m->n_params) / 1e9, (double)m->n_params * 2 / 1e9,
           (double)m->n_params * 2 / 1e9, gs_peak_rss_gb());
    for (i = 0; i < m->n_tensors; i++) free(prev[i]);
    free(prev);
    wsync_gen_free(&g);
}

/* Tensor by tensor, slice by slice: bounded memory. */
static void gs_run_sliced(const gs_opts *o, const wsync_gen_model *m, wsync_gen_stats *st,
                          wsync_gen_stats kinds[4])
{
    uint16_t *a = (uint16_t *)malloc((size_t)o->slice * 2), *b = (uint16_t *)malloc((size_t)o->slice * 2);
    double tstep[GS_MAX_STEPS], tinit = 0, t0;
    size_t i;
    int s;
    uint64_t done = 0;
    if (!a || !b) gs_die("out of memory");
    memset(tstep, 0, sizeof tstep);
    for (i = 0; i < m->n_tensors; i++) {
        wsync_gen_tensor_info ti;
        uint64_t begin, end;
        wsync_gen_model_tensor(m, i, &ti);
        end = o->limit && o->limit < ti.nelem ? o->limit : ti.nelem;
        for (begin = 0; begin < end; begin += o->slice) {
            wsync_gen_tensor t;
            uint64_t n = end - begin < o->slice ? end - begin : o->slice;
            t0 = gs_now();
            if (wsync_gen_tensor_init(&t, m, i, begin, n, &o->cfg, a) != WSYNC_OK) gs_die("init failed");
            tinit += gs_now() - t0;
            for (s = 0; s < o->steps; s++) {
                uint16_t *x;
                t0 = gs_now();
                wsync_gen_tensor_step(&t, b);
                tstep[s] += gs_now() - t0;
                wsync_gen_stats_add(&st[s], a, b, (size_t)n);
                if (s == o->steps - 1) wsync_gen_stats_add(&kinds[ti.kind], a, b, (size_t)n);
                x = a, a = b, b = x;
            }
            wsync_gen_tensor_free(&t);
            done += n;
        }
    }
    printf("  sliced: %llu elements in slices of %llu; init %.2f s\n", (unsigned long long)done,
           (unsigned long long)o->slice, tinit);
    gs_step_header(1);
    for (s = 0; s < o->steps; s++) gs_print_step(s + 1, &st[s], tstep[s]);
    printf("  memory: state %.3f GB per slice + 2 images; peak RSS %.2f GB\n",
           (double)wsync_gen_state_bytes(o->cfg.mode, o->slice) / 1e9, gs_peak_rss_gb());
    free(a);
    free(b);
}

/* ---------------------------------------------------------------------- */

static int gs_real(char **files, int n, wsync_gen_stats *st)
{
    wsync_mapped mp[GS_MAX_FILES];
    wsync_st_file f[GS_MAX_FILES];
    wsync_error err;
    int k;
    size_t t;
    if (n < 2 || n > GS_MAX_FILES) return 0;
    memset(f, 0, sizeof f);
    for (k = 0; k < n; k++) {
        if (wsync_file_map(files[k], &mp[k], &err) != WSYNC_OK ||
            wsync_st_parse(mp[k].bytes, mp[k].size, NULL, &f[k], &err) != WSYNC_OK) {
            fprintf(stderr, "gen_stats: %s: %s\n", files[k], err.message);
            exit(2);
        }
    }
    printf("\nreal trajectory: %d files, %llu tensors (first: %s)\n", n,
           (unsigned long long)f[0].n_tensors, files[0]);
    gs_step_header(0);
    for (k = 1; k < n; k++) {
        for (t = 0; t < f[k].n_tensors; t++) {
            const wsync_st_tensor *b = &f[k].tensors[t];
            const wsync_st_tensor *a = wsync_st_find_n(&f[k - 1], b->name, b->name_len);
            if (b->dtype != WSYNC_DTYPE_BF16 || !a || a->dtype != WSYNC_DTYPE_BF16 || a->nelem != b->nelem)
                continue;
            /* safetensors data are only byte-aligned: copy to aligned buffers */
            {
                uint16_t *x = (uint16_t *)malloc((size_t)a->nelem * 2 + 2);
                uint16_t *y = (uint16_t *)malloc((size_t)b->nelem * 2 + 2);
                if (!x || !y) gs_die("out of memory");
                memcpy(x, a->data, (size_t)a->nelem * 2);
                memcpy(y, b->data, (size_t)b->nelem * 2);
                wsync_gen_stats_add(&st[k - 1], x, y, (size_t)a->nelem);
                free(x);
                free(y);
            }
        }
        gs_print_step(k, &st[k - 1], -1);
    }
    for (k = 0; k < n; k++) {
        wsync_st_free(&f[k]);
        wsync_file_unmap(&mp[k]);
    }
    return n - 1;
}

static void gs_side_by_side(const wsync_gen_stats *g, int gstep, const wsync_gen_stats *r, int rstep)
{
    int e;
    char lab[16];
    printf("\nside by side: generator step %d vs real step %d\n", gstep, rstep);
    printf("      e  | gen share    rate    | real share   rate\n");
    for (e = 0; e < 255; e++) {
        int gok = gs_row_ok(g, e), rok = gs_row_ok(r, e);
        if (!gok && !rok) continue;
        gs_exp_label(e, lab, sizeof lab);
        printf("  %s  |", lab);
        if (gok)
            printf(" %7.3f%%  %8.5f  |", 100.0 * (double)g->exp_total[e] / (double)g->total,
                   (double)g->exp_changed[e] / (double)g->exp_total[e]);
        else
            printf("        -         -  |");
        if (rok)
            printf(" %7.3f%%  %8.5f", 100.0 * (double)r->exp_total[e] / (double)r->total,
                   (double)r->exp_changed[e] / (double)r->exp_total[e]);
        else
            printf("        -         -");
        printf("\n");
    }
    printf("  all    | %8.4f%% changed      | %8.4f%% changed\n",
           100.0 * (double)g->changed / (double)(g->total ? g->total : 1),
           100.0 * (double)r->changed / (double)(r->total ? r->total : 1));
}

int main(int argc, char **argv)
{
    gs_opts o;
    char *files[GS_MAX_FILES];
    int n_files = 0, i, real_steps = 0;
    static wsync_gen_stats gst[GS_MAX_STEPS], rst[GS_MAX_FILES], kinds[4];
    wsync_gen_model m;

    memset(&o, 0, sizeof o);
    o.model = "tiny";
    o.steps = 4;
    wsync_gen_config_default(&o.cfg);
    o.cfg.threads = 2;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--warm") == 0) { o.cfg.warm_start = 1; continue; }
        if (strcmp(a, "--quiet") == 0) { o.quiet = 1; continue; }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            size_t k;
            printf("usage: gen_stats [--model NAME] [--steps N] [--seed N] [--lr X] [--signal X]\n"
                   "                 [--mode adamw|light] [--warm] [--threads N] [--slice N]\n"
                   "                 [--limit N] [--quiet] [FILE.safetensors ...]\nmodels:");
            for (k = 0; wsync_gen_model_name(k); k++) printf(" %s", wsync_gen_model_name(k));
            printf(" none\n");
            return 0;
        }
        if (a[0] != '-') {
            if (n_files >= GS_MAX_FILES) gs_die("too many files");
            files[n_files++] = argv[i];
            continue;
        }
        if (!v) gs_die("option needs a value (see --help)");
        i++;
        if (strcmp(a, "--model") == 0) o.model = v;
        else if (strcmp(a, "--steps") == 0) o.steps = atoi(v);
        else if (strcmp(a, "--seed") == 0) o.cfg.seed = strtoull(v, NULL, 0);
        else if (strcmp(a, "--lr") == 0) o.cfg.lr = atof(v);
        else if (strcmp(a, "--signal") == 0) o.cfg.signal = atof(v);
        else if (strcmp(a, "--threads") == 0) o.cfg.threads = (unsigned)atoi(v);
        else if (strcmp(a, "--slice") == 0) o.slice = strtoull(v, NULL, 0);
        else if (strcmp(a, "--limit") == 0) o.limit = strtoull(v, NULL, 0);
        else if (strcmp(a, "--mode") == 0) {
            if (strcmp(v, "adamw") == 0) o.cfg.mode = WSYNC_GEN_ADAMW;
            else if (strcmp(v, "light") == 0) o.cfg.mode = WSYNC_GEN_LIGHT;
            else gs_die("--mode: adamw or light");
        } else gs_die("unknown option (see --help)");
    }
    if (o.steps < 1 || o.steps > GS_MAX_STEPS) gs_die("--steps: 1..64");

    if (strcmp(o.model, "none") != 0) {
        int k;
        if (wsync_gen_model_lookup(o.model, &m) != WSYNC_OK) gs_die("unknown model (see --help)");
        printf("generator: %s, %llu parameters in %llu tensors; mode %s%s, lr %g, signal %g, seed %llu, "
               "threads %u\n",
               m.name, (unsigned long long)m.n_params, (unsigned long long)m.n_tensors,
               o.cfg.mode == WSYNC_GEN_LIGHT ? "light" : "adamw", o.cfg.warm_start ? " (warm start)" : "",
               o.cfg.lr, o.cfg.signal, (unsigned long long)o.cfg.seed, o.cfg.threads);
        if (o.slice) gs_run_sliced(&o, &m, gst, kinds);
        else gs_run_whole(&o, &m, gst, kinds);
        printf("  by kind at step %d:", o.steps);
        for (k = 0; k < 4; k++)
            if (kinds[k].total)
                printf("  %s %.4f%% (+-1 %.3f)", gs_kind_name(k),
                       100.0 * (double)kinds[k].changed / (double)kinds[k].total,
                       kinds[k].changed ? (double)kinds[k].step1 / (double)kinds[k].changed : 0.0);
        printf("\n");
        if (!o.quiet) gs_print_exp_table(gst, o.steps);
    }
    if (n_files >= 2) {
        real_steps = gs_real(files, n_files, rst);
        if (!o.quiet) gs_print_exp_table(rst, real_steps);
    } else if (n_files == 1) {
        gs_die("a trajectory needs at least two files");
    }
    if (strcmp(o.model, "none") != 0 && real_steps > 0) {
        int k = o.steps < real_steps ? o.steps : real_steps;
        gs_side_by_side(&gst[k - 1], k, &rst[k - 1], k);
    }
    return 0;
}
