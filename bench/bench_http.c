/* bench_http: the HTTP store's upload and download throughput against a
   local nginx, next to the curl command-line tool moving the same object in
   the same run (bench/bench_http.sh starts nginx and runs this).

   usage: bench_http URL [ANCHOR_MIB [DELTA_MB]]   (default 1024 and 30)

   For each object (a 1 GiB anchor and a 30 MB delta): upload with
   wsync's put and with `curl -T FILE`, download with wsync's get (into a
   sink that only counts; the anchor once on one connection and once as 4
   parallel ranged GETs, the default above 64 MiB) and with
   `curl -o /dev/null`; best of three, interleaved,
   and the ratio wsync / curl. curl reads its upload from a file in the page
   cache and writes its download to /dev/null, so both sides move the bytes
   between memory and the socket only. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"
#include "bench_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int count_sink(void *user, const void *bytes, size_t len)
{
    (void)bytes;
    *(uint64_t *)user += len;
    return 0;
}

static double run_curl(const char *cmd)
{
    double t0 = now();
    if (system(cmd) != 0) {
        fprintf(stderr, "bench_http: failed: %s\n", cmd);
        exit(1);
    }
    return now() - t0;
}

static void bench_object(wsync_store *s, const char *url, const char *name, size_t size)
{
    uint8_t *buf = (uint8_t *)malloc(size);
    char path[256], cmd[1024], key[64];
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    wsync_error e;
    size_t i;
    int rep;
    FILE *f;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    if (!buf) {
        fprintf(stderr, "bench_http: out of memory\n");
        exit(1);
    }
    for (i = 0; i + 8 <= size; i += 8) { /* incompressible, not that it matters here */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
    snprintf(path, sizeof path, "/tmp/wsync-bench-http-%ld.bin", (long)getpid());
    if (!(f = fopen(path, "wb")) || fwrite(buf, 1, size, f) != size || fclose(f) != 0) {
        fprintf(stderr, "bench_http: cannot write %s\n", path);
        exit(1);
    }
    snprintf(key, sizeof key, "bench/%s", name);
    for (rep = 0; rep < 3; rep++) {
        double t0;
        uint64_t got = 0;
        wsync_result r;
        t0 = now();
        if ((r = s->put(s->user, key, buf, size, &e)) != WSYNC_OK) {
            fprintf(stderr, "bench_http: put: %s\n", e.message);
            exit(1);
        }
        if (now() - t0 < best[0]) best[0] = now() - t0;
        snprintf(cmd, sizeof cmd, "curl -s -f -T '%s' '%s/bench/%s-curl'", path, url, name);
        t0 = run_curl(cmd);
        if (t0 < best[1]) best[1] = t0;
        t0 = now();
        if ((r = s->get(s->user, key, 0, UINT64_MAX, count_sink, &got, NULL, &e)) != WSYNC_OK || got != size) {
            fprintf(stderr, "bench_http: get: %s\n", r ? e.message : "short");
            exit(1);
        }
        if (now() - t0 < best[2]) best[2] = now() - t0;
        snprintf(cmd, sizeof cmd, "curl -s -f -o /dev/null '%s/bench/%s-curl'", url, name);
        t0 = run_curl(cmd);
        if (t0 < best[3]) best[3] = t0;
    }
    printf("%-22s %9.1f MB  up %7.0f MB/s (curl %7.0f): %.2fx   down %7.0f MB/s (curl %7.0f): %.2fx\n", name,
           (double)size / 1e6, (double)size / best[0] / 1e6, (double)size / best[1] / 1e6, best[1] / best[0],
           (double)size / best[2] / 1e6, (double)size / best[3] / 1e6, best[3] / best[2]);
    fflush(stdout);
    s->del(s->user, key, NULL);
    remove(path);
    free(buf);
}

int main(int argc, char **argv)
{
    wsync_store s;
    wsync_error e;
    size_t anchor = (size_t)(argc > 2 ? atol(argv[2]) : 1024) << 20;
    size_t delta = (size_t)(argc > 3 ? atol(argv[3]) : 30) * 1000000;
    if (argc < 2) {
        fprintf(stderr, "usage: bench_http URL [ANCHOR_MIB [DELTA_MB]]\n");
        return 2;
    }
    static const unsigned conns[2] = {1, 4};
    int c;
    bench_cpu_print(stdout, "bench_http");
    printf("bench_http: %s, best of 3; ratio = wsync throughput / curl tool throughput (target >= 0.9)\n", argv[1]);
    for (c = 0; c < 2; c++) {
        wsync_http_options ho;
        memset(&ho, 0, sizeof ho);
        ho.parallel = conns[c];
        if (wsync_store_http_open(argv[1], &ho, &s, &e) != WSYNC_OK) {
            fprintf(stderr, "bench_http: %s\n", e.message);
            return 1;
        }
        printf("downloads above 64 MiB on %u connection%s%s:\n", conns[c], conns[c] == 1 ? "" : "s",
               conns[c] == 4 ? " (the default)" : "");
        if (c == 0) bench_object(&s, argv[1], "delta", delta);
        bench_object(&s, argv[1], "anchor", anchor);
        wsync_store_close(&s);
    }
    return 0;
}
