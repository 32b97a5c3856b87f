/* bench_chain: publish-to-applied latency of the delta chain on a directory
   store, next to the cost it replaces (copying the full bf16 model file).

   usage: bench_chain [MODEL [STEPS]]      (default qwen3-0.6b, 3 steps)
   env:   WSYNC_BENCH_THREADS=N            encode/apply/digest threads
                                           (default: online CPUs, at most 4)
          WSYNC_BENCH_DIR=PATH             the bucket (default build/bench-bucket)

   One process plays both sides in turn, so the latency has no polling delay
   in it: publish (diff, encode, put the delta, fsync, rename, write HEAD)
   then sync (read HEAD, get the delta, check digests, apply in place). The
   training step itself (the generator) is timed apart and excluded. Every
   step is checked bit-exact: the subscriber's state digest against the
   publisher's. The baseline, measured in the same run: copying the anchor
   file (the full model) to a new file in the same directory, with fsync, as
   a full-model publish through the same filesystem would. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_GEN_IMPLEMENTATION
#include "../tool/wsync_gen.h"
#include "bench_cpu.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, wsync_result r, const wsync_error *e)
{
    fprintf(stderr, "bench_chain: %s: %s: %s\n", what, wsync_result_name(r), e ? e->message : "");
    exit(1);
}

/* Copies src to dst with read/write and fsync: the full-model baseline. */
static double copy_file(const char *src, const char *dst, uint64_t *bytes)
{
    static char buf[1 << 20];
    double t0 = now();
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ssize_t n;
    *bytes = 0;
    if (in < 0 || out < 0) {
        fprintf(stderr, "bench_chain: cannot copy %s to %s\n", src, dst);
        exit(1);
    }
    while ((n = read(in, buf, sizeof buf)) > 0) {
        if (write(out, buf, (size_t)n) != n) {
            fprintf(stderr, "bench_chain: short write to %s\n", dst);
            exit(1);
        }
        *bytes += (uint64_t)n;
    }
    fsync(out);
    close(in);
    close(out);
    return now() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *model_name = argc > 1 ? argv[1] : "qwen3-0.6b";
    int steps = argc > 2 ? atoi(argv[2]) : 3, s;
    const char *dir = getenv("WSYNC_BENCH_DIR") ? getenv("WSYNC_BENCH_DIR") : "build/bench-bucket";
    const char *th = getenv("WSYNC_BENCH_THREADS");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = th ? (unsigned)atoi(th) : (unsigned)(cpus < 1 ? 1 : cpus > 4 ? 4 : cpus);
    wsync_gen_model m;
    wsync_gen_config cfg;
    wsync_gen g;
    wsync_store st;
    wsync_store_options so;
    wsync_chain_options co;
    wsync_publisher *pub;
    wsync_subscriber *sub;
    wsync_tensor *tp, *ts;
    wsync_error e;
    wsync_result r;
    size_t i, nt;
    double full_bytes = 0, t0, t_pub, t_sync, copy_s, *lat;
    uint64_t copied, state;
    char path[1024], cmd[1200];

    if (wsync_gen_model_lookup(model_name, &m) != WSYNC_OK) {
        fprintf(stderr, "bench_chain: unknown model '%s' (try tiny, qwen3-0.6b, qwen2.5-7b)\n", model_name);
        return 2;
    }
    if (steps < 1) steps = 1;
    if (threads < 1) threads = 1;
    bench_cpu_print(stdout, "bench_chain");
    wsync_gen_config_default(&cfg);
    cfg.mode = WSYNC_GEN_LIGHT;
    cfg.warm_start = 1;
    cfg.threads = threads;
    if (wsync_gen_init(&g, &m, &cfg) != WSYNC_OK) die("generator init", WSYNC_ERR_OUT_OF_MEMORY, NULL);
    nt = m.n_tensors;
    tp = (wsync_tensor *)calloc(nt, sizeof *tp);
    ts = (wsync_tensor *)calloc(nt, sizeof *ts);
    lat = (double *)calloc((size_t)steps, sizeof *lat);
    if (!tp || !ts || !lat) die("memory", WSYNC_ERR_OUT_OF_MEMORY, NULL);
    for (i = 0; i < nt; i++) {
        const wsync_gen_tensor_info *info = &g.tensors[i].info;
        tp[i].name = info->name;
        tp[i].dtype = WSYNC_DTYPE_BF16;
        tp[i].rank = info->rank;
        tp[i].shape = info->shape;
        tp[i].nbytes = info->nelem * 2;
        tp[i].data = g.bf16[i];
        ts[i] = tp[i];
        if (!(ts[i].data = calloc(1, (size_t)tp[i].nbytes))) die("memory", WSYNC_ERR_OUT_OF_MEMORY, NULL);
        full_bytes += (double)tp[i].nbytes;
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_chain: could not clear %s\n", dir);
    memset(&so, 0, sizeof so);
    if ((r = wsync_store_dir_open(dir, &so, &st, &e)) != WSYNC_OK) die("store", r, &e);
    memset(&co, 0, sizeof co);
    co.threads = threads;
    if ((r = wsync_publisher_open(&st, &co, &pub, &e)) != WSYNC_OK) die("publisher", r, &e);
    if ((r = wsync_subscriber_open(&st, ts, nt, &co, &sub, &e)) != WSYNC_OK) die("subscriber", r, &e);

    printf("bench_chain: %s, %llu parameters (%.0f MB bf16) in %zu tensors, directory store %s (fsync on), "
           "%u thread%s\n",
           m.name, (unsigned long long)m.n_params, full_bytes / 1e6, nt, dir, threads, threads == 1 ? "" : "s");
    {
        wsync_publish_stats ps;
        wsync_sync_stats ss;
        t0 = now();
        if ((r = wsync_publish(pub, 0, tp, nt, &ps, &e)) != WSYNC_OK) die("publish step 0", r, &e);
        t_pub = now() - t0;
        t0 = now();
        if ((r = wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &e)) != WSYNC_OK) die("sync step 0", r, &e);
        t_sync = now() - t0;
        printf("step 0: anchor %.1f MB: publish %.0f ms, pull+apply %.0f ms (%s)\n", (double)ps.anchor_bytes / 1e6,
               t_pub * 1e3, t_sync * 1e3, ss.path);
    }
    snprintf(path, sizeof path, "%s/anchors/step_000000.safetensors", dir);
    {
        char dst[1100];
        snprintf(dst, sizeof dst, "%s/full-copy.safetensors", dir);
        copy_s = copy_file(path, dst, &copied);
        unlink(dst);
    }
    printf("baseline: copying the full model file once (%.1f MB, read + write + fsync): %.0f ms\n",
           (double)copied / 1e6, copy_s * 1e3);
    printf("\n%5s %9s %9s %10s %11s %9s %7s %11s %11s %10s\n", "step", "changed", "delta MB", "train ms",
           "publish ms", "(encode", "put)", "pull+apply", "latency ms", "check");
    for (s = 1; s <= steps; s++) {
        wsync_publish_stats ps;
        wsync_sync_stats ss;
        double t_train;
        t0 = now();
        wsync_gen_step(&g);
        t_train = now() - t0;
        t0 = now();
        if ((r = wsync_publish(pub, (uint64_t)s, tp, nt, &ps, &e)) != WSYNC_OK) die("publish", r, &e);
        t_pub = now() - t0;
        t0 = now();
        if ((r = wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, &ss, &e)) != WSYNC_OK) die("sync", r, &e);
        t_sync = now() - t0;
        lat[s - 1] = t_pub + t_sync;
        if ((r = wsync_state_digest(ts, nt, threads, &state, &e)) != WSYNC_OK) die("state digest", r, &e);
        printf("%5d %8.2f%% %9.2f %10.0f %11.0f %9.0f %7.0f %11.0f %11.0f %10s\n", s,
               100.0 * (double)ps.changed / (double)ps.elements, (double)ps.delta_bytes / 1e6, t_train * 1e3,
               t_pub * 1e3, ps.encode_seconds * 1e3, ps.put_seconds * 1e3, t_sync * 1e3, lat[s - 1] * 1e3, state == ps.state ? "bit-exact" : "MISMATCH");
        if (state != ps.state) return 1;
        fflush(stdout);
    }
    qsort(lat, (size_t)steps, sizeof *lat, cmp_double);
    printf("\nlatency (publish + pull + apply, training excluded): median %.0f ms over %d steps "
           "(target < 500 ms); %.2fx the time of one full-model copy\n",
           lat[steps / 2] * 1e3, steps, lat[steps / 2] / copy_s);
    wsync_subscriber_close(sub);
    wsync_publisher_close(pub);
    wsync_store_close(&st);
    for (i = 0; i < nt; i++) free(ts[i].data);
    free(tp);
    free(ts);
    free(lat);
    wsync_gen_free(&g);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_chain: could not remove %s\n", dir);
    return 0;
}
