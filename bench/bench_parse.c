/* bench_parse.c - how fast wsync_st_parse reads a large safetensors header,
   and how fast the writer produces one. `make bench` builds and runs it.

   The input is built in memory: a header of 100,000 tensors named the way a
   transformer checkpoint names them (model.layers.{i}.mlp.gate_proj.weight),
   BF16 projections, F32 norms, F8_E4M3 MLP weights with F32 scales in every
   fourth layer, 2-D shapes. The shapes are small so the data section stays
   small: the header is what is measured.

   Reported per step: best and median of N runs, header MB/s and tensors/s
   (MB = 10^6 bytes). On a shared machine absolute figures move with the
   load, so the same run also times a plain memchr/memcmp scan over the same
   header bytes (find every '"', compare the key that follows), alternating
   parse and scan run by run, and prints parse throughput as a fraction of
   that scan's (the median of the per-pair ratios).

   usage: bench_parse [TENSORS [RUNS]]   (defaults 100000 and 21) */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "bench_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_DEFAULT_TENSORS 100000u
#define BENCH_DEFAULT_RUNS 21u

static void bench_die(const char *what)
{
    fprintf(stderr, "bench_parse: %s\n", what);
    exit(1);
}

static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------
   The input
   --------------------------------------------------------------------- */

typedef struct bench_tensor {
    char name[96];
    wsync_dtype dtype;
    uint64_t shape[2];
    uint64_t nbytes;
} bench_tensor;

typedef struct bench_text {
    char *p;
    size_t len, cap;
} bench_text;

static void text_put(bench_text *t, const char *s, size_t n)
{
    if (n > t->cap - t->len) {
        size_t cap = t->cap ? t->cap : 1 << 20;
        char *p;
        while (n > cap - t->len) cap *= 2;
        p = (char *)realloc(t->p, cap);
        if (!p) bench_die("out of memory");
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
}

static void text_str(bench_text *t, const char *s) { text_put(t, s, strlen(s)); }

static void text_u64(bench_text *t, uint64_t v)
{
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    text_put(t, buf, (size_t)n);
}

static void add(bench_tensor *ts, size_t *n, size_t max, const char *name, wsync_dtype dt,
                uint64_t rows, uint64_t cols)
{
    bench_tensor *t;
    if (*n >= max) return;
    t = &ts[(*n)++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->shape[0] = rows;
    t->shape[1] = cols;
    if (wsync_dtype_nbytes(dt, rows * cols, &t->nbytes) != WSYNC_OK) bench_die("dtype size");
}

/* Llama-style names; hidden 8, kv 2, intermediate 16 keep the data small. */
static size_t make_tensors(bench_tensor *ts, size_t want)
{
    static const char *attn[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    static const char *mlp[3] = {"gate_proj", "up_proj", "down_proj"};
    const uint64_t h = 8, kv = 2, inter = 16;
    size_t n = 0, layer, i;
    char name[96];
    size_t tail = 2; /* model.norm.weight and lm_head.weight */
    add(ts, &n, want, "model.embed_tokens.weight", WSYNC_DTYPE_BF16, 32, h);
    for (layer = 0; n < want - tail; layer++) {
        int fp8 = layer % 4 == 3;
        snprintf(name, sizeof name, "model.layers.%lu.input_layernorm.weight", (unsigned long)layer);
        add(ts, &n, want - tail, name, WSYNC_DTYPE_F32, 1, h);
        for (i = 0; i < 4; i++) {
            uint64_t rows = (i == 1 || i == 2) ? kv : h;
            snprintf(name, sizeof name, "model.layers.%lu.self_attn.%s.weight",
                     (unsigned long)layer, attn[i]);
            add(ts, &n, want - tail, name, WSYNC_DTYPE_BF16, rows, h);
        }
        snprintf(name, sizeof name, "model.layers.%lu.post_attention_layernorm.weight",
                 (unsigned long)layer);
        add(ts, &n, want - tail, name, WSYNC_DTYPE_F32, 1, h);
        for (i = 0; i < 3; i++) {
            uint64_t rows = i == 2 ? h : inter, cols = i == 2 ? inter : h;
            snprintf(name, sizeof name, "model.layers.%lu.mlp.%s.weight", (unsigned long)layer,
                     mlp[i]);
            add(ts, &n, want - tail, name, fp8 ? WSYNC_DTYPE_F8_E4M3 : WSYNC_DTYPE_BF16, rows,
                cols);
            if (fp8) {
                snprintf(name, sizeof name, "model.layers.%lu.mlp.%s.weight_scale",
                         (unsigned long)layer, mlp[i]);
                add(ts, &n, want - tail, name, WSYNC_DTYPE_F32, 1, 1);
            }
        }
    }
    add(ts, &n, want, "model.norm.weight", WSYNC_DTYPE_F32, 1, h);
    add(ts, &n, want, "lm_head.weight", WSYNC_DTYPE_BF16, 32, h);
    return n;
}

/* The way Python's safetensors lays a file out: metadata first, tensors in
   offset order, compact JSON, spaces to a multiple of 8. */
static uint8_t *make_file(const bench_tensor *ts, size_t n, uint64_t *size_out,
                          uint64_t *header_len, uint64_t *data_len)
{
    bench_text t = {NULL, 0, 0};
    uint64_t off = 0, total, i;
    uint8_t *file;
    size_t k;
    text_str(&t, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (k = 0; k < n; k++) {
        text_str(&t, ",\"");
        text_str(&t, ts[k].name);
        text_str(&t, "\":{\"dtype\":\"");
        text_str(&t, wsync_dtype_name(ts[k].dtype));
        text_str(&t, "\",\"shape\":[");
        text_u64(&t, ts[k].shape[0]);
        text_str(&t, ",");
        text_u64(&t, ts[k].shape[1]);
        text_str(&t, "],\"data_offsets\":[");
        text_u64(&t, off);
        text_str(&t, ",");
        text_u64(&t, off + ts[k].nbytes);
        text_str(&t, "]}");
        off += ts[k].nbytes;
    }
    text_str(&t, "}");
    while (t.len % 8) text_str(&t, " ");
    *header_len = t.len;
    *data_len = off;
    total = 8 + t.len + off;
    file = (uint8_t *)malloc((size_t)total);
    if (!file) bench_die("out of memory");
    for (i = 0; i < 8; i++) file[i] = (uint8_t)(t.len >> (8 * i));
    memcpy(file + 8, t.p, t.len);
    for (i = 0; i < off; i++) file[8 + t.len + i] = (uint8_t)(i * 131 + 7);
    free(t.p);
    *size_out = total;
    return file;
}

/* ---------------------------------------------------------------------
   Timed steps
   --------------------------------------------------------------------- */

typedef struct bench_ctx {
    const uint8_t *file;
    uint64_t size, header_len;
    wsync_st_tensor_desc *desc;
    size_t n_desc;
    wsync_st_kv *meta;
    size_t n_meta;
    uint8_t *out;
    size_t out_cap;
    uint64_t check; /* results fold in here so nothing is optimized away */
} bench_ctx;

static void step_parse(bench_ctx *c)
{
    wsync_st_file st;
    wsync_error err;
    if (wsync_st_parse(c->file, c->size, NULL, &st, &err) != WSYNC_OK) bench_die(err.message);
    c->check += st.n_tensors;
    wsync_st_free(&st);
}

/* The yardstick: every quote found with memchr, the key after it compared
   with memcmp; about the least work any reader of this text must do. */
static void step_scan(bench_ctx *c)
{
    static const char key[] = "\"data_offsets\"";
    const char *p = (const char *)c->file + 8, *end = p + c->header_len;
    uint64_t hits = 0;
    while ((p = (const char *)memchr(p, '"', (size_t)(end - p))) != NULL) {
        if ((size_t)(end - p) >= sizeof key - 1 && memcmp(p, key, sizeof key - 1) == 0) {
            hits++;
            p += sizeof key - 1;
        } else {
            p++;
        }
    }
    c->check += hits;
}

static void step_write(bench_ctx *c)
{
    uint64_t total = 0;
    wsync_buffer b;
    wsync_error err;
    if (wsync_st_write_size(c->desc, c->n_desc, c->meta, c->n_meta, &total, &err) != WSYNC_OK)
        bench_die(err.message);
    if (total > c->out_cap) bench_die("write_size larger than the buffer");
    b.bytes = c->out;
    b.cap = c->out_cap;
    b.len = 0;
    if (wsync_st_write(c->desc, c->n_desc, c->meta, c->n_meta, wsync_buffer_sink, &b, NULL, &err) !=
        WSYNC_OK)
        bench_die(err.message);
    c->check += b.len;
}

static void step_write_header(bench_ctx *c)
{
    wsync_st_writer w;
    wsync_buffer b;
    wsync_error err;
    b.bytes = c->out;
    b.cap = c->out_cap;
    b.len = 0;
    if (wsync_st_writer_begin(&w, c->desc, c->n_desc, c->meta, c->n_meta, wsync_buffer_sink, &b,
                              NULL, &err) != WSYNC_OK)
        bench_die(err.message);
    c->check += b.len;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct bench_time {
    double best, median; /* seconds */
} bench_time;

static bench_time time_step(void (*fn)(bench_ctx *), bench_ctx *c, unsigned runs)
{
    double *t = (double *)malloc(runs * sizeof *t);
    bench_time r;
    unsigned i;
    if (!t) bench_die("out of memory");
    fn(c); /* warm up: page faults, allocator, caches */
    for (i = 0; i < runs; i++) {
        double t0 = bench_now();
        fn(c);
        t[i] = bench_now() - t0;
    }
    qsort(t, runs, sizeof *t, cmp_double);
    r.best = t[0];
    r.median = runs % 2 ? t[runs / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2;
    free(t);
    return r;
}

/* Two steps run alternately, so that both see the same load; the ratio of
   each pair's times is taken before the median, which keeps it steady on a
   busy machine when absolute times are not. *ratio = median of tb/ta. */
static void time_pair(void (*fa)(bench_ctx *), void (*fb)(bench_ctx *), bench_ctx *c,
                      unsigned runs, bench_time *ta, bench_time *tb, double *ratio)
{
    double *a = (double *)malloc(3 * runs * sizeof *a), *b = a + runs, *q = b + runs;
    unsigned i;
    if (!a) bench_die("out of memory");
    fa(c);
    fb(c);
    for (i = 0; i < runs; i++) {
        double t0 = bench_now(), t1, t2;
        fa(c);
        t1 = bench_now();
        fb(c);
        t2 = bench_now();
        a[i] = t1 - t0;
        b[i] = t2 - t1;
        q[i] = b[i] / a[i];
    }
    qsort(a, runs, sizeof *a, cmp_double);
    qsort(b, runs, sizeof *b, cmp_double);
    qsort(q, runs, sizeof *q, cmp_double);
#define BENCH_MEDIAN(v) (runs % 2 ? (v)[runs / 2] : ((v)[runs / 2 - 1] + (v)[runs / 2]) / 2)
    ta->best = a[0];
    ta->median = BENCH_MEDIAN(a);
    tb->best = b[0];
    tb->median = BENCH_MEDIAN(b);
    *ratio = BENCH_MEDIAN(q);
#undef BENCH_MEDIAN
    free(a);
}

static void row(const char *label, bench_time t, double bytes, double tensors)
{
    printf("  %-30s %9.2f %9.2f %10.1f %12.0f\n", label, t.best * 1e3, t.median * 1e3,
           bytes / t.median / 1e6, tensors / t.median);
}

int main(int argc, char **argv)
{
    size_t want = BENCH_DEFAULT_TENSORS, n, i;
    unsigned runs = BENCH_DEFAULT_RUNS;
    bench_tensor *ts;
    bench_ctx c;
    uint64_t size, header_len, data_len;
    wsync_st_file st;
    wsync_error err;
    bench_time tp, ts_scan, tw, twh;
    double ratio;
    uint64_t written_header;

    if (argc > 1) want = (size_t)strtoul(argv[1], NULL, 10);
    if (argc > 2) runs = (unsigned)strtoul(argv[2], NULL, 10);
    if (want < 3 || runs < 1) bench_die("usage: bench_parse [TENSORS>=3 [RUNS>=1]]");

    ts = (bench_tensor *)malloc(want * sizeof *ts);
    if (!ts) bench_die("out of memory");
    n = make_tensors(ts, want);
    memset(&c, 0, sizeof c);
    c.file = make_file(ts, n, &size, &header_len, &data_len);
    c.size = size;
    c.header_len = header_len;

    /* one checked parse, whose tensors become the writer's input */
    if (wsync_st_parse(c.file, c.size, NULL, &st, &err) != WSYNC_OK) bench_die(err.message);
    if (st.n_tensors != n) bench_die("parsed tensor count differs from the generated one");
    for (i = 0; i < n; i++) {
        const wsync_st_tensor *t = wsync_st_find(&st, ts[i].name);
        if (!t || t->dtype != ts[i].dtype || t->rank != 2 || t->shape[0] != ts[i].shape[0] ||
            t->shape[1] != ts[i].shape[1] || t->end - t->begin != ts[i].nbytes)
            bench_die("parsed tensor differs from the generated one");
    }
    c.desc = (wsync_st_tensor_desc *)malloc(n * sizeof *c.desc);
    if (!c.desc) bench_die("out of memory");
    for (i = 0; i < n; i++) {
        const wsync_st_tensor *t = &st.tensors[i];
        c.desc[i].name = t->name;
        c.desc[i].dtype = t->dtype;
        c.desc[i].rank = t->rank;
        c.desc[i].shape = t->shape;
        c.desc[i].data = t->data;
        c.desc[i].nbytes = t->end - t->begin;
        c.desc[i].name_len = t->name_len;
    }
    c.n_desc = n;
    c.meta = st.metadata;
    c.n_meta = st.n_metadata;
    {
        uint64_t total = 0;
        if (wsync_st_write_size(c.desc, n, c.meta, c.n_meta, &total, &err) != WSYNC_OK)
            bench_die(err.message);
        c.out_cap = (size_t)total;
        c.out = (uint8_t *)malloc(c.out_cap);
        if (!c.out) bench_die("out of memory");
        written_header = total - 8 - data_len;
    }

    time_pair(step_parse, step_scan, &c, runs, &tp, &ts_scan, &ratio);
    tw = time_step(step_write, &c, runs);
    twh = time_step(step_write_header, &c, runs);

    bench_cpu_print(stdout, "bench_parse");
    printf("bench_parse: %lu tensors, header %.2f MB (%llu bytes), data %.2f MB, %u runs\n",
           (unsigned long)n, (double)header_len / 1e6, (unsigned long long)header_len,
           (double)data_len / 1e6, runs);
    printf("  %-30s %9s %9s %10s %12s\n", "step", "best ms", "median ms", "MB/s", "tensors/s");
    row("wsync_st_parse", tp, (double)header_len, (double)n);
    row("scan (memchr+memcmp)", ts_scan, (double)header_len, (double)n);
    row("write_size + write (buffer)", tw, (double)written_header, (double)n);
    row("writer_begin (header only)", twh, (double)written_header, (double)n);
    printf("  (MB/s and tensors/s from the median; write rows count the %llu-byte header they\n"
           "   emit; write_size + write also copies the %.2f MB data section)\n",
           (unsigned long long)written_header, (double)data_len / 1e6);
    printf("  parse throughput / scan throughput: %.3f (median of %u interleaved pairs;\n"
           "   from the best times %.3f)\n",
           ratio, runs, ts_scan.best / tp.best);
    if (c.check == 0) printf("  (check %llu)\n", (unsigned long long)c.check);

    wsync_st_free(&st);
    free(c.desc);
    free(c.out);
    free((void *)c.file);
    free(ts);
    return 0;
}
