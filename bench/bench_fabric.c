/* bench_fabric: one-host and TCP loopback transfer of a qwen3-0.6b-sized
   image (1192 MB of bf16) from 1 and 2 sender processes into 1 receiver
   process, through wsync_rdma.h's fabrics, as ratios to memcpy of the same
   bytes and to a single process_vm_writev of the same bytes, measured in
   the same run (best of BENCH_REPS, 3). Senders write in 4 MiB pieces
   (about the mean tensor) and flush; the receiver's memory is faulted in
   first. Each configuration ends with a digest check of the whole region.
   TCP runs three ways: as shipped (each frame's data tagged with
   Poly1305), and, for the cost of that tag, with no data tag and with
   HMAC-SHA256 as the data tag (a private switch of the implementation,
   set alike on both sides; the handshake and header tags stay).

   usage: build/bench_fabric [megabytes]   (default 1192) */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#include "bench_cpu.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PIECE (4ull << 20)

static uint64_t SIZE;
static int REPS = 3;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t *big(uint64_t n)
{
    void *p = mmap(NULL, (size_t)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "bench_fabric: cannot map %llu bytes\n", (unsigned long long)n);
        exit(1);
    }
    return (uint8_t *)p;
}

/* byte i of the image in run r */
static void fill(uint8_t *p, uint64_t off, uint64_t n, int r)
{
    uint64_t i;
    for (i = 0; i < n; i++) p[i] = (uint8_t)(((off + i) * 131u >> 7) + (uint64_t)r * 17u);
}

typedef struct msg {
    int op, a, b, status;
    double t;
    uint64_t v[4];
    uint8_t wire[4][WSYNC_FABRIC_DESC_WIRE];
    char text[400];
} msg;

static void xwrite(int fd, const msg *m)
{
    if (write(fd, m, sizeof *m) != (ssize_t)sizeof *m) exit(2);
}

static int xread(int fd, msg *m)
{
    size_t got = 0;
    while (got < sizeof *m) {
        ssize_t r = read(fd, (char *)m + got, sizeof *m - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        got += (size_t)r;
    }
    return 1;
}

typedef struct child {
    pid_t pid;
    int to, from;
} child;

static void spawn(child *c, void (*fn)(int, int, void *), void *arg)
{
    int down[2], up[2];
    if (pipe(down) || pipe(up)) exit(1);
    fflush(stdout);
    c->pid = fork();
    if (c->pid == 0) {
        int fd;
        for (fd = 3; fd < 1024; fd++) /* other children's pipes: they must see EOF when the parent closes them */
            if (fd != down[0] && fd != up[1]) close(fd);
        fn(down[0], up[1], arg);
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    c->to = down[1];
    c->from = up[0];
}

static void finish(child *c)
{
    int st;
    close(c->to);
    close(c->from);
    waitpid(c->pid, &st, 0);
}

/* The TCP data tag of backend b (2, 3, 4): Poly1305, none, HMAC-SHA256. */
static int data_tag(int b)
{
    return b == 3 ? WSYNC__TAG_NONE : b == 4 ? WSYNC__TAG_HMAC : WSYNC__TAG_POLY;
}

/* The receiver: one region (memfd memory, so SHM works too) registered
   with a one-host fabric and with three TCP fabrics (one per data tag). */
static void receiver(int in, int out, void *arg)
{
    wsync_fabric h, t[3];
    wsync_fabric_mr *hm, *tm;
    wsync_fabric_desc d;
    wsync_error e;
    void *p;
    msg m;
    int i;
    (void)arg;
    memset(&m, 0, sizeof m);
    if (wsync_fabric_host_open(NULL, &h, &e) != WSYNC_OK || wsync_fabric_host_alloc(&h, SIZE, &p, &e) != WSYNC_OK) {
        fprintf(stderr, "receiver: %s\n", e.message);
        exit(1);
    }
    memset(p, 1, (size_t)SIZE); /* fault it in */
    if (h.reg(h.user, p, SIZE, WSYNC_MEM_HOST, &hm, &d, &e) != WSYNC_OK) exit(1);
    wsync_fabric_desc_encode(&d, m.wire[0]);
    for (i = 0; i < 3; i++) {
        if (wsync_fabric_tcp_open(NULL, &t[i], &e) != WSYNC_OK) {
            fprintf(stderr, "receiver: %s\n", e.message);
            exit(1);
        }
        ((wsync__fab_base *)t[i].user)->data_tag = data_tag(2 + i);
        if (t[i].reg(t[i].user, p, SIZE, WSYNC_MEM_HOST, &tm, &d, &e) != WSYNC_OK) exit(1);
        wsync_fabric_desc_encode(&d, m.wire[1 + i]);
    }
    m.v[0] = (uint64_t)(uintptr_t)p;
    m.v[1] = (uint64_t)getpid();
    xwrite(out, &m);
    while (xread(in, &m)) {
        if (m.op == 'D') m.v[0] = wsync_digest(p, (size_t)SIZE);
        xwrite(out, &m);
    }
    for (i = 0; i < 3; i++) wsync_fabric_close(&t[i]);
    wsync_fabric_close(&h);
}

typedef struct sender_arg {
    int backend;               /* 0 CMA, 1 SHM, 2 TCP, 3 TCP without data tags, 4 TCP with HMAC-SHA256 ones */
    int index, n;
    const uint8_t *wire;       /* the receiver's descriptor for this backend */
} sender_arg;

static void sender(int in, int out, void *arg)
{
    const sender_arg *s = (const sender_arg *)arg;
    wsync_fabric f;
    wsync_fabric_mr *src;
    wsync_fabric_remote *rem;
    wsync_fabric_desc d, unused;
    wsync_error e;
    uint64_t lo = SIZE / (uint64_t)s->n * (uint64_t)s->index;
    uint64_t hi = s->index == s->n - 1 ? SIZE : SIZE / (uint64_t)s->n * (uint64_t)(s->index + 1);
    uint8_t *mem = big(hi - lo);
    msg m;
    wsync_result r;
    memset(&m, 0, sizeof m);
    if (s->backend >= 2) {
        wsync_fabric_tcp_options o;
        memset(&o, 0, sizeof o);
        o.send_only = 1;
        r = wsync_fabric_tcp_open(&o, &f, &e);
        if (r == WSYNC_OK) ((wsync__fab_base *)f.user)->data_tag = data_tag(s->backend);
    } else {
        wsync_fabric_host_options o;
        memset(&o, 0, sizeof o);
        o.send_only = 1;
        o.mode = s->backend == 0 ? WSYNC_FABRIC_HOST_CMA : WSYNC_FABRIC_HOST_SHM;
        r = wsync_fabric_host_open(&o, &f, &e);
    }
    if (r == WSYNC_OK) r = f.reg(f.user, mem, hi - lo, WSYNC_MEM_HOST, &src, &unused, &e);
    if (r == WSYNC_OK) r = wsync_fabric_desc_decode(s->wire, WSYNC_FABRIC_DESC_WIRE, &d, &e);
    if (r == WSYNC_OK) r = f.open_remote(f.user, &d, &rem, &e);
    if (r != WSYNC_OK) {
        m.status = 1;
        snprintf(m.text, sizeof m.text, "%s", e.message);
    }
    xwrite(out, &m);
    if (r != WSYNC_OK) return;
    while (xread(in, &m)) {
        uint64_t o;
        double t0;
        if (m.op == 'F') { /* new data each run, outside the timing */
            fill(mem, lo, hi - lo, m.a);
            xwrite(out, &m);
            continue;
        }
        t0 = now_s();
        for (o = lo; o < hi && r == WSYNC_OK; o += PIECE) {
            uint64_t n = hi - o < PIECE ? hi - o : PIECE;
            r = f.write(f.user, src, o - lo, rem, o, n, &e);
        }
        if (r == WSYNC_OK) r = f.flush(f.user, &e);
        m.t = now_s() - t0;
        m.status = r != WSYNC_OK;
        if (r != WSYNC_OK) snprintf(m.text, sizeof m.text, "%s", e.message);
        xwrite(out, &m);
    }
    wsync_fabric_close(&f);
}

static uint64_t expected_digest(int run)
{
    uint8_t *p = big(SIZE);
    uint64_t d;
    fill(p, 0, SIZE, run);
    d = wsync_digest(p, (size_t)SIZE);
    munmap(p, (size_t)SIZE);
    return d;
}

/* Best wall time of REPS runs of n senders, from "go" to the last flush done. */
static double run_fabric(child *rx, const msg *rdesc, int backend, int n, int *run, int *ok)
{
    child tx[2];
    sender_arg sa[2];
    double best = 1e30;
    int i, k;
    msg m;
    *ok = 1;
    for (i = 0; i < n; i++) {
        sa[i].backend = backend;
        sa[i].index = i;
        sa[i].n = n;
        sa[i].wire = rdesc->wire[backend >= 2 ? backend - 1 : 0];
        spawn(&tx[i], sender, &sa[i]);
        if (!xread(tx[i].from, &m) || m.status) {
            printf("sender %d: %s\n", i, m.text);
            *ok = 0;
        }
    }
    for (k = 0; k < REPS && *ok; k++) {
        double t0, dt;
        ++*run;
        for (i = 0; i < n; i++) {
            memset(&m, 0, sizeof m);
            m.op = 'F';
            m.a = *run;
            xwrite(tx[i].to, &m);
        }
        for (i = 0; i < n; i++)
            if (!xread(tx[i].from, &m)) *ok = 0;
        /* all senders go at once; the time runs until the last one's flush returned */
        t0 = now_s();
        for (i = 0; i < n; i++) {
            memset(&m, 0, sizeof m);
            m.op = 'W';
            xwrite(tx[i].to, &m);
        }
        for (i = 0; i < n; i++)
            if (!xread(tx[i].from, &m) || m.status) {
                printf("sender %d: %s\n", i, m.text);
                *ok = 0;
            }
        dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    for (i = 0; i < n; i++) finish(&tx[i]);
    if (*ok) {
        memset(&m, 0, sizeof m);
        m.op = 'D';
        m.a = *run;
        xwrite(rx->to, &m);
        if (!xread(rx->from, &m) || m.v[0] != expected_digest(*run)) {
            printf("DIGEST MISMATCH after %s, run %d\n", backend == 0 ? "CMA" : backend == 1 ? "SHM" : "TCP", *run);
            *ok = 0;
        }
    }
    return best;
}

int main(int argc, char **argv)
{
    uint8_t *src, *dst;
    double best_memcpy = 1e30, best_pvw = 1e30, t;
    child rx;
    msg rd;
    int k, run = 0, ok, all_ok = 1, b, n;
    const char *names[5] = {"one-host CMA (process_vm_writev)", "one-host SHM (memfd + memcpy)",
                            "TCP loopback (Poly1305 data tags)", "TCP, no data tags (cost baseline)",
                            "TCP, HMAC-SHA256 data tags"};
    double tcp[5][3];
    const char *reps = getenv("BENCH_REPS");
    SIZE = (argc > 1 ? strtoull(argv[1], NULL, 10) : 1192ull) * 1000ull * 1000ull;
    if (reps && atoi(reps) > 0) REPS = atoi(reps);
    signal(SIGPIPE, SIG_IGN);
    bench_cpu_print(stdout, "bench_fabric");
    printf("bench_fabric: %.1f MB (qwen3-0.6b bf16 size), 4 MiB writes then flush, best of %d\n", (double)SIZE / 1e6,
           REPS);

    /* baseline 1: memcpy in one process, both sides faulted in */
    src = big(SIZE);
    dst = big(SIZE);
    fill(src, 0, SIZE, 0);
    memset(dst, 0, (size_t)SIZE);
    for (k = 0; k < REPS; k++) {
        double t0 = now_s();
        memcpy(dst, src, (size_t)SIZE);
        t = now_s() - t0;
        if (t < best_memcpy) best_memcpy = t;
    }
    munmap(dst, (size_t)SIZE);

    spawn(&rx, receiver, NULL);
    if (!xread(rx.from, &rd)) return 1;

    /* baseline 2: one process_vm_writev of all the bytes into the receiver */
    for (k = 0; k < REPS; k++) {
        struct iovec l, r;
        double t0 = now_s();
        ssize_t w;
        l.iov_base = src;
        l.iov_len = (size_t)SIZE;
        r.iov_base = (void *)(uintptr_t)rd.v[0];
        r.iov_len = (size_t)SIZE;
        w = process_vm_writev((pid_t)rd.v[1], &l, 1, &r, 1, 0);
        t = now_s() - t0;
        if (w != (ssize_t)SIZE) {
            printf("process_vm_writev: %s (wrote %lld)\n", w < 0 ? strerror(errno) : "short", (long long)w);
            break;
        }
        if (t < best_pvw) best_pvw = t;
    }
    munmap(src, (size_t)SIZE);

    printf("%-36s %8s %10s %10s %14s\n", "", "senders", "ms", "GB/s", "vs memcpy  vs one pvw");
    printf("%-36s %8s %10.1f %10.2f %10s\n", "memcpy (one process)", "-", best_memcpy * 1e3, (double)SIZE / best_memcpy / 1e9,
           "1.00");
    if (best_pvw < 1e29)
        printf("%-36s %8s %10.1f %10.2f %10.2f %10s\n", "one process_vm_writev (1.2 GB iov)", "1", best_pvw * 1e3,
               (double)SIZE / best_pvw / 1e9, best_memcpy / best_pvw, "1.00");
    for (b = 0; b < 5; b++)
        for (n = 1; n <= 2; n++) {
            t = run_fabric(&rx, &rd, b, n, &run, &ok);
            tcp[b][n] = ok ? t : 0;
            if (!ok) {
                printf("%-36s %8d FAILED\n", names[b], n);
                all_ok = 0;
                continue;
            }
            printf("%-36s %8d %10.1f %10.2f %10.2f %10.2f\n", names[b], n, t * 1e3, (double)SIZE / t / 1e9,
                   best_memcpy / t, best_pvw < 1e29 ? best_pvw / t : 0.0);
        }
    finish(&rx);
    for (n = 1; n <= 2; n++)
        if (tcp[2][n] > 0 && tcp[3][n] > 0 && tcp[4][n] > 0)
            printf("TCP, %d sender%s: time with Poly1305 data tags / without: %.2f; with HMAC-SHA256 / without: %.2f\n",
                   n, n > 1 ? "s" : "", tcp[2][n] / tcp[3][n], tcp[4][n] / tcp[3][n]);
    printf("every configuration checked by digest of the receiver's region: %s\n", all_ok ? "bit-exact" : "FAILED");
    return all_ok ? 0 : 1;
}
