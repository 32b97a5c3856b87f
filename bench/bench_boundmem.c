/* Peak resident memory of a subscriber's anchor sync, as a ratio to the
   model's size (not run by make test). A model of qwen3-0.6b's shapes (596 M
   bf16 elements, 1.19 GB) is published into directory stores, then each
   pull runs in a process of its own so that its VmHWM is its own:

     cc -std=c99 -O2 -I. -o /tmp/bench_boundmem bench/bench_boundmem.c -lm -lpthread
     /tmp/bench_boundmem publish /tmp/bm      # /tmp/bm/a: anchors 0, 1; /tmp/bm/d: anchor 0, deltas 1..10
     /tmp/bench_boundmem pull /tmp/bm fresh   # targets without a step: anchor 0 (streamed)
     /tmp/bench_boundmem pull /tmp/bm spool   # targets vouched at 0: anchor 1 (spooled)
     /tmp/bench_boundmem pull /tmp/bm follow  # anchor 0, then deltas 1..10

   "extra" is VmHWM after the sync minus VmRSS before it (the targets
   allocated and touched), over the model's bytes. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "bench_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LAYERS 28
#define NT (1 + 7 * LAYERS)

static char g_names[NT][64];
static uint64_t g_shapes[NT][2];
static size_t g_off[NT + 1];

static size_t model(void)
{
    static const char *w[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    static const uint64_t sh[7][2] = {{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048},
                                      {3072, 1024}, {3072, 1024}, {1024, 3072}};
    size_t i, total = 0;
    snprintf(g_names[0], 64, "model.embed_tokens.weight");
    g_shapes[0][0] = 151936;
    g_shapes[0][1] = 1024;
    for (i = 1; i < NT; i++) {
        size_t l = (i - 1) / 7, k = (i - 1) % 7;
        snprintf(g_names[i], 64, "model.layers.%zu.%s.weight", l, w[k]);
        g_shapes[i][0] = sh[k][0];
        g_shapes[i][1] = sh[k][1];
    }
    for (i = 0; i < NT; i++) {
        g_off[i] = total;
        total += (size_t)(g_shapes[i][0] * g_shapes[i][1]);
    }
    g_off[NT] = total;
    return total;
}

static void tensors(uint16_t *img, wsync_tensor *t)
{
    size_t i;
    for (i = 0; i < NT; i++) {
        t[i].name = g_names[i];
        t[i].dtype = WSYNC_DTYPE_BF16;
        t[i].rank = 2;
        t[i].shape = g_shapes[i];
        t[i].data = img + g_off[i];
        t[i].nbytes = (uint64_t)(g_off[i + 1] - g_off[i]) * 2;
    }
}

static void fill(uint16_t *img, size_t n, uint64_t step)
{
    size_t k;
    for (k = 0; k < n; k++) img[k] = (uint16_t)(0x3F00u + ((((uint32_t)k * 2654435761u) >> 11) & 0xFFu));
    for (; step > 0; step--) /* about 1.6% of the elements move a step */
        for (k = (size_t)(step % 61); k < n; k += 61) img[k] ^= 1;
}

static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0) v = strtol(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

static void die(const char *what, const wsync_error *err)
{
    fprintf(stderr, "%s: %s\n", what, err ? err->message : "");
    exit(1);
}

static void publish(const char *dir, int anchors_only, uint64_t last, uint16_t *img, size_t n)
{
    wsync_store st;
    wsync_store_options so;
    wsync_chain_options o;
    wsync_publisher *p;
    wsync_publish_stats ps;
    wsync_error err;
    wsync_tensor t[NT];
    uint64_t s;
    memset(&so, 0, sizeof so);
    memset(&ps, 0, sizeof ps);
    so.no_fsync = 1;
    memset(&o, 0, sizeof o);
    o.threads = 2;
    o.retain = 100;
    o.anchor_every = 1000;
    if (anchors_only) o.anchor_fraction = 1e-12;
    if (wsync_store_dir_open(dir, &so, &st, &err) != WSYNC_OK) die("store", &err);
    if (wsync_publisher_open(&st, &o, &p, &err) != WSYNC_OK) die("publisher", &err);
    for (s = 0; s <= last; s++) {
        fill(img, n, s);
        tensors(img, t);
        if (wsync_publish(p, s, t, NT, &ps, &err) != WSYNC_OK) die("publish", &err);
        printf("%s step %llu: %s %llu bytes\n", dir, (unsigned long long)s, ps.wrote_anchor ? "anchor" : "delta",
               (unsigned long long)(ps.wrote_anchor ? ps.anchor_bytes : ps.delta_bytes));
    }
    wsync_publisher_close(p);
    wsync_store_close(&st);
}

int main(int argc, char **argv)
{
    size_t n = model();
    char path[512];
    bench_cpu_print(stdout, "bench_boundmem");
    if (argc >= 3 && strcmp(argv[1], "publish") == 0) {
        uint16_t *img = (uint16_t *)malloc(n * 2);
        if (!img) die("memory", NULL);
        snprintf(path, sizeof path, "%s/a", argv[2]);
        publish(path, 1, 1, img, n);
        snprintf(path, sizeof path, "%s/d", argv[2]);
        publish(path, 0, 10, img, n);
        free(img);
        return 0;
    }
    if (argc >= 4 && strcmp(argv[1], "pull") == 0) {
        const char *mode = argv[3];
        int follow = strcmp(mode, "follow") == 0, spool = strcmp(mode, "spool") == 0;
        wsync_store st;
        wsync_chain_options o;
        wsync_subscriber *s;
        wsync_sync_stats ss;
        wsync_error err;
        wsync_tensor t[NT];
        uint16_t *img = (uint16_t *)malloc(n * 2), *ref;
        long rss0, hwm;
        struct timespec t0, t1;
        if (!img) die("memory", NULL);
        memset(img, 0x5A, n * 2); /* resident before the baseline (not 0: malloc+memset 0 becomes calloc) */
        snprintf(path, sizeof path, "%s/%s", argv[2], follow ? "d" : "a");
        if (wsync_store_dir_open(path, NULL, &st, &err) != WSYNC_OK) die("store", &err);
        memset(&o, 0, sizeof o);
        o.threads = 2;
        tensors(img, t);
        if (wsync_subscriber_open(&st, t, NT, &o, &s, &err) != WSYNC_OK) die("subscriber", &err);
        if (spool) {
            fill(img, n, 0);
            wsync_subscriber_set_step(s, 0);
        }
        rss0 = status_kb("VmRSS:");
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (wsync_subscriber_sync(s, follow ? 0 : spool ? 1 : 0, &ss, &err) != WSYNC_OK) die("sync", &err);
        if (follow && wsync_subscriber_sync(s, 10, &ss, &err) != WSYNC_OK) die("sync", &err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        hwm = status_kb("VmHWM:");
        ref = (uint16_t *)malloc(n * 2);
        if (ref) {
            fill(ref, n, follow ? 10 : spool ? 1 : 0);
            if (memcmp(ref, img, n * 2) != 0) die("not bit-exact", NULL);
            free(ref);
        }
        printf("%-6s model %.3f GB  rss before %.3f GB  VmHWM %.3f GB  extra %.3f GB = %.3fx the model  "
               "(%.2f s, path %s)\n",
               mode, n * 2 / 1e9, rss0 * 1024 / 1e9, hwm * 1024 / 1e9, (hwm - rss0) * 1024 / 1e9,
               (double)(hwm - rss0) * 1024 / (double)(n * 2),
               (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, ss.path);
        wsync_subscriber_close(s);
        wsync_store_close(&st);
        free(img);
        return 0;
    }
    fprintf(stderr, "usage: %s publish DIR | pull DIR fresh|spool|follow\n", argv[0]);
    return 2;
}
