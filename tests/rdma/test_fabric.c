/* The fabric backends of wsync_rdma.h (TCP, one-host CMA and SHM) with real
   processes: 4 sender processes write disjoint, unaligned slices of a 64 MB
   region in 2 receiver processes over several steps, checked bit-exact by
   digest; immediates counted and checked to arrive after their bytes;
   bounds refused by the sender and (TCP, forged frames on a raw socket
   that passed the handshake: bad tags, replays, out of sequence) by the
   receiver; a receiver killed (or stopped) mid-step fails the sender
   within the timeout; a sender killed mid-step leaves the receiver serving.
   Also the descriptor's wire form. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REGION (64ull << 20)
#define NS 4
#define NR 2
#define SRC_SHIFT 7 /* the source holds destination byte o at o + SRC_SHIFT */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- deterministic data: byte p of step k, any sub-range on its own ---- */

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void gen(uint8_t *dst, uint64_t pos, uint64_t len, uint64_t step)
{
    uint64_t i = 0;
    while (i < len) {
        uint64_t p = pos + i, w = mix((p >> 3) ^ (step * 0xD6E8FEB86659FD93ull));
        unsigned k = (unsigned)(p & 7);
        if (k == 0 && len - i >= 8) {
            memcpy(dst + i, &w, 8); /* little-endian: byte k is w >> 8k */
            i += 8;
            continue;
        }
        for (; k < 8 && i < len; k++, i++) dst[i] = (uint8_t)(w >> (k * 8));
    }
}

static uint64_t image_digest(uint64_t step, uint64_t size)
{
    uint8_t *b = (uint8_t *)malloc((size_t)size);
    uint64_t d;
    gen(b, 0, size, step);
    d = wsync_digest(b, (size_t)size);
    free(b);
    return d;
}

/* bytes of [off, off + len) of `mem` that differ from step's data */
static uint64_t range_diff(const uint8_t *mem, uint64_t off, uint64_t len, uint64_t step)
{
    uint8_t buf[65536];
    uint64_t bad = 0, i = 0;
    while (i < len) {
        uint64_t n = len - i < sizeof buf ? len - i : sizeof buf, j;
        gen(buf, off + i, n, step);
        if (memcmp(buf, mem + off + i, (size_t)n) != 0)
            for (j = 0; j < n; j++) bad += buf[j] != mem[off + i + j];
        i += n;
    }
    return bad;
}

/* slices: unaligned boundaries */
static uint64_t bounds4[NS + 1] = {0, (16ull << 20) + 3, (32ull << 20) - 5, (48ull << 20) + 7, REGION};
static uint64_t bounds2[3] = {0, (32ull << 20) + 3, REGION};

#define MAX_PIECES 64
/* A slice's writes: 1 byte, 0 bytes, 13 bytes, then pieces of 1 MiB + 17. */
static int pieces(uint64_t lo, uint64_t hi, uint64_t *off, uint64_t *len)
{
    int n = 0;
    uint64_t p = lo;
    off[n] = p, len[n++] = 1, p += 1;
    off[n] = p, len[n++] = 0;
    off[n] = p, len[n++] = 13, p += 13;
    while (p < hi && n < MAX_PIECES) {
        uint64_t l = hi - p < (1ull << 20) + 17 ? hi - p : (1ull << 20) + 17;
        off[n] = p, len[n++] = l, p += l;
    }
    return n;
}

/* ---- processes talking through pipes ---- */

typedef struct msg {
    int op, a, b, status;
    uint64_t v[6];
    uint8_t wire[WSYNC_FABRIC_DESC_WIRE];
    char text[400];
} msg;

typedef struct proc {
    pid_t pid;
    int to, from;
} proc;

static int write_full(int fd, const void *p, size_t n)
{
    const char *c = (const char *)p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* 1 got a message, 0 the other end closed, -1 timeout or error */
static int msg_recv(int fd, msg *m, int timeout_ms)
{
    char *c = (char *)m;
    size_t got = 0;
    int64_t deadline = now_ms() + timeout_ms;
    while (got < sizeof *m) {
        struct pollfd pf;
        ssize_t r;
        int64_t left = deadline - now_ms();
        pf.fd = fd;
        pf.events = POLLIN;
        pf.revents = 0;
        if (left <= 0 || poll(&pf, 1, (int)left) == 0) return -1;
        r = read(fd, c + got, sizeof *m - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return got ? -1 : 0;
        got += (size_t)r;
    }
    return 1;
}

static void msg_send(int fd, const msg *m)
{
    if (write_full(fd, m, sizeof *m) != 0) { /* the reader sees EOF */
    }
}

static msg cmd(int op, int a, int b)
{
    msg m;
    memset(&m, 0, sizeof m);
    m.op = op;
    m.a = a;
    m.b = b;
    return m;
}

typedef void (*proc_fn)(int in, int out, void *arg);

static int proc_start(proc *p, proc_fn fn, void *arg)
{
    int down[2], up[2];
    if (pipe(down) != 0) return -1;
    if (pipe(up) != 0) return -1;
    fflush(stdout);
    p->pid = fork();
    if (p->pid < 0) return -1;
    if (p->pid == 0) {
        int fd;
        for (fd = 3; fd < 1024; fd++) /* other children's pipes, and the parent's sockets */
            if (fd != down[0] && fd != up[1]) close(fd);
        signal(SIGPIPE, SIG_DFL);
        fn(down[0], up[1], arg);
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    p->to = down[1];
    p->from = up[0];
    return 0;
}

static int proc_call(proc *p, msg *m, int timeout_ms)
{
    msg_send(p->to, m);
    return msg_recv(p->from, m, timeout_ms);
}

static void proc_end(proc *p, int kill_it)
{
    int status;
    if (p->pid <= 0) return;
    if (kill_it) kill(p->pid, SIGKILL);
    close(p->to);
    close(p->from);
    if (!kill_it) {
        int i;
        for (i = 0; i < 1000 && waitpid(p->pid, &status, WNOHANG) == 0; i++) usleep(10000);
        if (i == 1000) kill(p->pid, SIGKILL);
        else {
            p->pid = 0;
            return;
        }
    }
    waitpid(p->pid, &status, 0);
    p->pid = 0;
}

/* ---- configurations ---- */

typedef struct cfg {
    const char *name;
    unsigned backend;
    wsync_fabric_host_mode rx_mode, tx_mode;
    int rx_shm[NR];            /* receiver i allocates with wsync_fabric_host_alloc */
    unsigned timeout_ms;
    int n_senders;
    const uint64_t *bounds;
    /* filled by the parent before the senders start */
    int n_receivers;
    uint8_t wire[NR][WSYNC_FABRIC_DESC_WIRE];
    int index;                 /* which receiver / sender a child is */
} cfg;

static wsync_result open_fabric(const cfg *c, int send_only, wsync_fabric *f, wsync_error *e)
{
    if (c->backend == WSYNC_FABRIC_TCP) {
        wsync_fabric_tcp_options o;
        memset(&o, 0, sizeof o);
        o.send_only = send_only;
        o.timeout_ms = c->timeout_ms;
        o.connect_timeout_ms = 2000;
        return wsync_fabric_tcp_open(&o, f, e);
    } else {
        wsync_fabric_host_options o;
        memset(&o, 0, sizeof o);
        o.send_only = send_only;
        o.timeout_ms = c->timeout_ms;
        o.mode = send_only ? c->tx_mode : c->rx_mode;
        return wsync_fabric_host_open(&o, f, e);
    }
}

/* ---- the receiver process ---- */

static void rx_main(int in, int out, void *arg)
{
    const cfg *c = (const cfg *)arg;
    wsync_fabric f;
    wsync_fabric_mr *mr = NULL;
    wsync_fabric_desc d;
    wsync_error e;
    uint8_t *mem = NULL;
    msg m = cmd('R', 0, 0);
    int shm = c->backend == WSYNC_FABRIC_HOST && c->rx_shm[c->index];
    if (open_fabric(c, 0, &f, &e) != WSYNC_OK) goto fail;
    if (shm) {
        void *p;
        if (wsync_fabric_host_alloc(&f, REGION, &p, &e) != WSYNC_OK) goto fail;
        mem = (uint8_t *)p;
    } else {
        mem = (uint8_t *)mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if ((void *)mem == MAP_FAILED) {
            snprintf(e.message, sizeof e.message, "mmap failed");
            goto fail;
        }
    }
    gen(mem, 0, REGION, 0);
    if (f.reg(f.user, mem, REGION, WSYNC_MEM_HOST, &mr, &d, &e) != WSYNC_OK) goto fail;
    wsync_fabric_desc_encode(&d, m.wire);
    m.v[0] = (uint64_t)(uintptr_t)mem;
    msg_send(out, &m);
    for (;;) {
        if (msg_recv(in, &m, 3600 * 1000) != 1) break;
        m.status = 0;
        if (m.op == 'D') {
            m.v[0] = wsync_digest(mem, REGION);
        } else if (m.op == 'I') { /* m.v[0] immediates of step m.a, each checked against its bytes at arrival */
            uint64_t got = 0, bad = 0, want = m.v[0];
            uint32_t imm;
            while (got < want) {
                uint64_t off[MAX_PIECES], len[MAX_PIECES];
                int s, k, np;
                if (f.recv_imm(f.user, mr, &imm, 20000, &e) != WSYNC_OK) break;
                got++;
                s = (int)(imm >> 16);
                k = (int)(imm & 0xFFFF);
                if (s >= c->n_senders) {
                    bad++;
                    continue;
                }
                np = pieces(c->bounds[s], c->bounds[s + 1], off, len);
                if (k >= np) bad++;
                else bad += range_diff(mem, off[k], len[k], (uint64_t)m.a) != 0;
            }
            if (f.recv_imm(f.user, mr, &imm, 100, &e) == WSYNC_OK) bad += 1000; /* one too many */
            m.v[0] = got;
            m.v[1] = bad;
        } else if (m.op == 'O') { /* [v0, v1): every byte of step a or of step b; counts of each */
            uint64_t i, na = 0, nb = 0, neither = 0, lo = m.v[0], hi = m.v[1];
            uint8_t *ga = (uint8_t *)malloc((size_t)(hi - lo)), *gb = (uint8_t *)malloc((size_t)(hi - lo));
            gen(ga, lo, hi - lo, (uint64_t)m.a);
            gen(gb, lo, hi - lo, (uint64_t)m.b);
            for (i = lo; i < hi; i++) {
                if (mem[i] == ga[i - lo]) na++;
                else if (mem[i] == gb[i - lo]) nb++;
                else neither++;
            }
            free(ga);
            free(gb);
            m.v[0] = na;
            m.v[1] = nb;
            m.v[2] = neither;
        } else if (m.op == 'E') { /* [v0, v1) differs from step a in how many bytes */
            m.v[2] = range_diff(mem, m.v[0], m.v[1] - m.v[0], (uint64_t)m.a);
        } else if (m.op == 'S') {
            wsync_fabric_stats st;
            wsync_fabric_stats_get(&f, &st);
            m.v[0] = st.connections;
            m.v[1] = st.frames;
            m.v[2] = st.rejected;
            m.v[3] = st.dropped;
            m.v[4] = st.imms;
        } else if (m.op == 'Q') {
            f.dereg(f.user, mr);
            wsync_fabric_close(&f);
            msg_send(out, &m);
            return;
        }
        msg_send(out, &m);
    }
    return;
fail:
    m.status = 1;
    snprintf(m.text, sizeof m.text, "receiver %d: %s", c->index, e.message);
    msg_send(out, &m);
}

/* ---- the sender process ---- */

typedef struct tx_state {
    const cfg *c;
    wsync_fabric f;
    wsync_fabric_mr *src;
    wsync_fabric_remote *rem[NR];
    uint8_t *mem;
    uint64_t lo, hi;
} tx_state;

/* Writes this sender's slice of step k to every receiver, then flushes. */
static wsync_result tx_step(tx_state *t, uint64_t k, int imm, uint64_t *writes, wsync_error *e)
{
    uint64_t off[MAX_PIECES], len[MAX_PIECES];
    int np = pieces(t->lo, t->hi, off, len), i, r;
    wsync_result res;
    gen(t->mem + t->lo + SRC_SHIFT, t->lo, t->hi - t->lo, k);
    *writes = (uint64_t)np;
    for (i = 0; i < np; i++)
        for (r = 0; r < t->c->n_receivers; r++) {
            if (imm)
                res = t->f.write_imm(t->f.user, t->src, off[i] + SRC_SHIFT, t->rem[r], off[i], len[i],
                                     (uint32_t)t->c->index << 16 | (uint32_t)i, e);
            else
                res = t->f.write(t->f.user, t->src, off[i] + SRC_SHIFT, t->rem[r], off[i], len[i], e);
            if (res != WSYNC_OK) return res;
        }
    return t->f.flush(t->f.user, e);
}

/* Writes the remote's bounds can refuse locally: every one must fail, none reach the receiver. */
static int tx_bounds(tx_state *t, char *why, size_t cap)
{
    wsync_error e;
    wsync_fabric_remote *r = t->rem[0];
    uint64_t n = REGION + 64;
    struct {
        uint64_t so, doff, len;
        int ok;
    } cases[] = {
        {0, REGION - 10, 11, 0},   /* one past the destination's end */
        {0, UINT64_MAX, 2, 0},     /* offset + length wraps */
        {0, 1, UINT64_MAX, 0},     /* length wraps */
        {n, 0, 1, 0},              /* one past the source's end */
        {n - 1, 0, 2, 0},
        {0, REGION, 0, 1},         /* 0 bytes at the very end: allowed */
        {0, REGION + 1, 0, 0},     /* 0 bytes past the end */
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wsync_result res = t->f.write(t->f.user, t->src, cases[i].so, r, cases[i].doff, cases[i].len, &e);
        wsync_result res2 = t->f.write_imm(t->f.user, t->src, cases[i].so, r, cases[i].doff, cases[i].len, 77, &e);
        if (cases[i].ok ? res != WSYNC_OK : res != WSYNC_ERR_OUT_OF_BOUNDS) {
            snprintf(why, cap, "case %u: write gave %s", (unsigned)i, wsync_result_name(res));
            return 1;
        }
        if (!cases[i].ok && res2 != WSYNC_ERR_OUT_OF_BOUNDS) {
            snprintf(why, cap, "case %u: write_imm gave %s", (unsigned)i, wsync_result_name(res2));
            return 1;
        }
    }
    return t->f.flush(t->f.user, &e) == WSYNC_OK ? 0 : (snprintf(why, cap, "flush: %s", e.message), 1);
}

static void tx_main(int in, int out, void *arg)
{
    const cfg *c = (const cfg *)arg;
    tx_state t;
    wsync_fabric_desc d, unused;
    wsync_error e;
    msg m = cmd('T', 0, 0);
    int r;
    memset(&t, 0, sizeof t);
    t.c = c;
    t.lo = c->bounds[c->index];
    t.hi = c->bounds[c->index + 1];
    if (open_fabric(c, 1, &t.f, &e) != WSYNC_OK) goto fail;
    t.mem = (uint8_t *)mmap(NULL, REGION + 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if ((void *)t.mem == MAP_FAILED) goto fail;
    if (t.f.reg(t.f.user, t.mem, REGION + 64, WSYNC_MEM_HOST, &t.src, &unused, &e) != WSYNC_OK) goto fail;
    for (r = 0; r < c->n_receivers; r++) {
        if (wsync_fabric_desc_decode(c->wire[r], WSYNC_FABRIC_DESC_WIRE, &d, &e) != WSYNC_OK) goto fail;
        if (t.f.open_remote(t.f.user, &d, &t.rem[r], &e) != WSYNC_OK) goto fail;
        m.v[r] = c->backend == WSYNC_FABRIC_HOST ? (uint64_t)wsync_fabric_host_remote_mode(&t.f, t.rem[r]) : 0;
    }
    msg_send(out, &m);
    for (;;) {
        if (msg_recv(in, &m, 3600 * 1000) != 1) break;
        m.status = 0;
        m.text[0] = 0;
        if (m.op == 'W') {
            if (tx_step(&t, (uint64_t)m.a, m.b, &m.v[0], &e) != WSYNC_OK) {
                m.status = 1;
                snprintf(m.text, sizeof m.text, "%s", e.message);
            }
        } else if (m.op == 'B') {
            m.status = tx_bounds(&t, m.text, sizeof m.text);
        } else if (m.op == 'L') { /* steps a and b alternately, until a call fails; "started" after the first */
            uint64_t w, pass = 0;
            for (;;) {
                if (tx_step(&t, pass % 2 ? (uint64_t)m.b : (uint64_t)m.a, 0, &w, &e) != WSYNC_OK) break;
                if (pass++ == 0) {
                    msg s = cmd('s', 0, 0);
                    msg_send(out, &s);
                }
            }
            m.status = 1;
            m.v[0] = pass;
            snprintf(m.text, sizeof m.text, "%s: %s", wsync_result_name(e.code), e.message);
        } else if (m.op == 'Q') {
            wsync_fabric_close(&t.f);
            msg_send(out, &m);
            return;
        }
        msg_send(out, &m);
    }
    return;
fail:
    m.status = 1;
    snprintf(m.text, sizeof m.text, "sender %d: %s", c->index, e.message);
    msg_send(out, &m);
}

/* ---- scenarios ---- */

static cfg base_cfg(const char *name, unsigned backend)
{
    cfg c;
    memset(&c, 0, sizeof c);
    c.name = name;
    c.backend = backend;
    c.timeout_ms = 2000;
    c.n_senders = NS;
    c.n_receivers = NR;
    c.bounds = bounds4;
    return c;
}

static int start_receivers(cfg *c, proc *rx, uint64_t *addr)
{
    int i, ok = 1;
    for (i = 0; i < c->n_receivers; i++) {
        msg m;
        c->index = i;
        rx[i].pid = 0;
        if (proc_start(&rx[i], rx_main, c) != 0) return 0;
        if (msg_recv(rx[i].from, &m, 30000) != 1 || m.status) {
            CHECK_MSG(0, "%s: receiver %d did not start: %s", c->name, i, m.text);
            ok = 0;
            continue;
        }
        memcpy(c->wire[i], m.wire, WSYNC_FABRIC_DESC_WIRE);
        if (addr) addr[i] = m.v[0];
    }
    return ok;
}

static int start_senders(cfg *c, proc *tx, int first, int n, uint64_t *modes)
{
    int i, ok = 1;
    for (i = first; i < first + n; i++) {
        msg m;
        c->index = i;
        tx[i].pid = 0;
        if (proc_start(&tx[i], tx_main, c) != 0) return 0;
        if (msg_recv(tx[i].from, &m, 30000) != 1 || m.status) {
            CHECK_MSG(0, "%s: sender %d did not start: %s", c->name, i, m.text);
            ok = 0;
            continue;
        }
        if (modes) memcpy(modes + (size_t)i * NR, m.v, NR * sizeof *modes);
    }
    return ok;
}

static const char *mode_name(uint64_t m)
{
    return m == WSYNC_FABRIC_HOST_CMA ? "CMA (process_vm_writev)" : m == WSYNC_FABRIC_HOST_SHM ? "SHM (memfd)" : "-";
}

/* 4 senders, 2 receivers, 3 steps plain and one with immediates. */
static void scenario_transfer(cfg c, wsync_fabric_host_mode expect_mode)
{
    proc rx[NR], tx[NS];
    uint64_t modes[NS * NR];
    int i, k, ok;
    int64_t t0 = now_ms();
    char name[160];
    snprintf(name, sizeof name, "%s: 4 senders -> 2 receivers, 64 MB, steps bit-exact", c.name);
    TEST_BEGIN(name);
    memset(rx, 0, sizeof rx);
    memset(tx, 0, sizeof tx);
    ok = start_receivers(&c, rx, NULL) && start_senders(&c, tx, 0, NS, modes);
    if (ok && c.backend == WSYNC_FABRIC_HOST) {
        printf("  %s: sender 0 writes receiver 0 with %s, receiver 1 with %s\n", c.name, mode_name(modes[0]),
               mode_name(modes[1]));
        for (i = 0; i < NS * NR; i++)
            CHECK_MSG(expect_mode == WSYNC_FABRIC_HOST_AUTO || modes[i] == (uint64_t)expect_mode,
                      "remote %d uses %s", i, mode_name(modes[i]));
    }
    for (k = 1; ok && k <= 3; k++) {
        int imm = k == 3;
        uint64_t want = image_digest((uint64_t)k, REGION), n_imm = 0;
        uint64_t off[MAX_PIECES], len[MAX_PIECES];
        for (i = 0; i < NS; i++) n_imm += (uint64_t)pieces(c.bounds[i], c.bounds[i + 1], off, len);
        if (imm)
            for (i = 0; i < NR; i++) {
                msg m = cmd('I', k, 0);
                m.v[0] = n_imm;
                msg_send(rx[i].to, &m);
            }
        for (i = 0; i < NS; i++) {
            msg m = cmd('W', k, imm);
            msg_send(tx[i].to, &m);
        }
        for (i = 0; i < NS; i++) {
            msg m;
            int rr = msg_recv(tx[i].from, &m, 120000);
            CHECK_MSG(rr == 1 && m.status == 0, "step %d sender %d: %s", k, i, rr == 1 ? m.text : "no reply");
            if (rr != 1 || m.status) ok = 0;
        }
        if (imm)
            for (i = 0; i < NR; i++) {
                msg m;
                int rr = msg_recv(rx[i].from, &m, 120000);
                CHECK_MSG(rr == 1 && m.v[0] == n_imm && m.v[1] == 0,
                          "receiver %d: %llu of %llu immediates, %llu wrong (before their bytes, unknown, extra)", i,
                          (unsigned long long)m.v[0], (unsigned long long)n_imm, (unsigned long long)m.v[1]);
            }
        for (i = 0; ok && i < NR; i++) {
            msg m = cmd('D', 0, 0);
            CHECK_MSG(proc_call(&rx[i], &m, 60000) == 1 && m.v[0] == want, "step %d receiver %d: digest %llx, want %llx",
                      k, i, (unsigned long long)m.v[0], (unsigned long long)want);
        }
    }
    if (ok) { /* writes refused by the sender's own bounds check; the data stays as it was */
        msg m = cmd('B', 0, 0);
        uint64_t want = image_digest(3, REGION);
        CHECK_MSG(proc_call(&tx[0], &m, 60000) == 1 && m.status == 0, "bounds: %s", m.text);
        for (i = 0; i < NR; i++) {
            m = cmd('D', 0, 0);
            CHECK_MSG(proc_call(&rx[i], &m, 60000) == 1 && m.v[0] == want, "after bounds, receiver %d changed", i);
        }
        m = cmd('S', 0, 0);
        if (proc_call(&rx[0], &m, 10000) == 1)
            printf("  %s: receiver 0: %llu connections, %llu frames, %llu immediates, %llu refused\n", c.name,
                   (unsigned long long)m.v[0], (unsigned long long)m.v[1], (unsigned long long)m.v[4],
                   (unsigned long long)m.v[2]);
        CHECK_EQ_INT(m.v[2], 0);
    }
    for (i = 0; i < NS; i++) {
        msg m = cmd('Q', 0, 0);
        if (tx[i].pid > 0) proc_call(&tx[i], &m, 10000);
        proc_end(&tx[i], 0);
    }
    for (i = 0; i < NR; i++) {
        msg m = cmd('Q', 0, 0);
        if (rx[i].pid > 0) proc_call(&rx[i], &m, 10000);
        proc_end(&rx[i], 0);
    }
    printf("  %s: transfer scenario %.1f s\n", c.name, (double)(now_ms() - t0) / 1000);
    TEST_END();
}

/* A receiver killed (or, stop=1, stopped) while a sender writes: the
   sender's write or flush fails within the timeout, never hangs. */
static void scenario_receiver_dies(cfg c, int stop)
{
    proc rx[NR], tx[NS];
    msg m;
    int64_t t0, dt;
    int rr;
    char name[160];
    snprintf(name, sizeof name, "%s: a receiver %s mid-step fails the sender within the timeout", c.name,
             stop ? "stopped (SIGSTOP)" : "killed");
    TEST_BEGIN(name);
    memset(rx, 0, sizeof rx);
    memset(tx, 0, sizeof tx);
    c.n_receivers = 1;
    c.n_senders = 1;
    c.bounds = bounds4; /* slice 0: 16 MB */
    if (start_receivers(&c, rx, NULL) && start_senders(&c, tx, 0, 1, NULL)) {
        m = cmd('L', 5, 6);
        msg_send(tx[0].to, &m);
        rr = msg_recv(tx[0].from, &m, 60000);
        CHECK_MSG(rr == 1 && m.op == 's', "sender did not start: %s", m.text);
        usleep(20000);
        t0 = now_ms();
        kill(rx[0].pid, stop ? SIGSTOP : SIGKILL);
        rr = msg_recv(tx[0].from, &m, (int)c.timeout_ms + 8000);
        dt = now_ms() - t0;
        CHECK_MSG(rr == 1 && m.status == 1, "the sender did not fail (rr %d)", rr);
        CHECK_MSG(dt < (int64_t)c.timeout_ms + 1500, "failed after %lld ms, the timeout is %u ms", (long long)dt,
                  c.timeout_ms);
        CHECK_MSG(strstr(m.text, "WSYNC_ERR_IO") != NULL, "%s", m.text);
        printf("  %s: receiver %s -> sender failed after %lld ms: %.160s\n", c.name, stop ? "stopped" : "killed",
               (long long)dt, m.text);
        m = cmd('Q', 0, 0);
        CHECK(proc_call(&tx[0], &m, 10000) == 1);
    }
    proc_end(&tx[0], 0);
    proc_end(&rx[0], 1);
    TEST_END();
}

/* Two senders; one is killed while it writes: the receiver keeps serving,
   the other sender's slice is complete, the killed one's holds only bytes
   of the steps it was writing, and the next step (a new sender) is exact. */
static void scenario_sender_dies(cfg c)
{
    proc rx[NR], tx[NS];
    msg m;
    int i, rr, ok;
    char name[160];
    snprintf(name, sizeof name, "%s: a sender killed mid-step leaves the receiver serving", c.name);
    TEST_BEGIN(name);
    memset(rx, 0, sizeof rx);
    memset(tx, 0, sizeof tx);
    c.n_receivers = 1;
    c.n_senders = 2;
    c.bounds = bounds2;
    ok = start_receivers(&c, rx, NULL) && start_senders(&c, tx, 0, 2, NULL);
    for (i = 0; ok && i < 2; i++) { /* step 1 complete */
        m = cmd('W', 1, 0);
        CHECK_MSG((rr = proc_call(&tx[i], &m, 60000)) == 1 && m.status == 0, "step 1: %s", m.text);
        if (rr != 1 || m.status) ok = 0;
    }
    if (ok) {
        m = cmd('D', 0, 0);
        CHECK(proc_call(&rx[0], &m, 60000) == 1 && m.v[0] == image_digest(1, REGION));
        /* step 2: sender 1 completes, sender 0 alternates steps 2 and 3 until killed */
        m = cmd('W', 2, 0);
        CHECK_MSG(proc_call(&tx[1], &m, 60000) == 1 && m.status == 0, "%s", m.text);
        m = cmd('L', 2, 3);
        msg_send(tx[0].to, &m);
        rr = msg_recv(tx[0].from, &m, 60000);
        CHECK(rr == 1 && m.op == 's');
        usleep(30000);
        proc_end(&tx[0], 1);
        usleep(50000);
        m = cmd('O', 2, 3);
        m.v[0] = bounds2[0];
        m.v[1] = bounds2[1];
        CHECK_MSG(proc_call(&rx[0], &m, 60000) == 1 && m.v[2] == 0,
                  "the killed sender's slice: %llu bytes of step 2, %llu of step 3, %llu of neither",
                  (unsigned long long)m.v[0], (unsigned long long)m.v[1], (unsigned long long)m.v[2]);
        printf("  %s: killed sender's slice: %llu bytes of step 2, %llu of step 3, %llu other\n", c.name,
               (unsigned long long)m.v[0], (unsigned long long)m.v[1], (unsigned long long)m.v[2]);
        m = cmd('E', 2, 0);
        m.v[0] = bounds2[1];
        m.v[1] = bounds2[2];
        CHECK_MSG(proc_call(&rx[0], &m, 60000) == 1 && m.v[2] == 0, "the other slice: %llu bytes wrong",
                  (unsigned long long)m.v[2]);
        /* a new sender 0, and step 4 is bit-exact */
        ok = start_senders(&c, tx, 0, 1, NULL);
        for (i = 0; ok && i < 2; i++) {
            m = cmd('W', 4, 0);
            CHECK_MSG(proc_call(&tx[i], &m, 60000) == 1 && m.status == 0, "step 4: %s", m.text);
        }
        m = cmd('D', 0, 0);
        CHECK_MSG(proc_call(&rx[0], &m, 60000) == 1 && m.v[0] == image_digest(4, REGION), "%s",
                  "step 4 not bit-exact after a sender died");
        m = cmd('S', 0, 0);
        if (proc_call(&rx[0], &m, 10000) == 1)
            printf("  %s: receiver: %llu connections, %llu dropped mid-frame, %llu refused\n", c.name,
                   (unsigned long long)m.v[0], (unsigned long long)m.v[3], (unsigned long long)m.v[2]);
    }
    for (i = 0; i < 2; i++) {
        m = cmd('Q', 0, 0);
        if (tx[i].pid > 0) proc_call(&tx[i], &m, 10000);
        proc_end(&tx[i], 0);
    }
    m = cmd('Q', 0, 0);
    if (rx[0].pid > 0) proc_call(&rx[0], &m, 10000);
    proc_end(&rx[0], 0);
    TEST_END();
}

/* ---- descriptors ---- */

static void test_desc(void)
{
    wsync_fabric_desc d, o;
    uint8_t w[WSYNC_FABRIC_DESC_WIRE + 8], w2[WSYNC_FABRIC_DESC_WIRE];
    wsync_error e;
    unsigned i;
    TEST_BEGIN("descriptor: wire round trip and every malformed form refused");
    memset(&d, 0, sizeof d);
    d.backend = WSYNC_FABRIC_TCP;
    d.kind = WSYNC_MEM_HOST;
    d.version = 1;
    d.flags = 0xA5A5A5A5u;
    d.addr = 0x00007F0012345678ull;
    d.len = 123456789;
    d.n_bytes = 37;
    for (i = 0; i < d.n_bytes; i++) d.bytes[i] = (uint8_t)(i * 7 + 1);
    wsync_fabric_desc_encode(&d, w);
    CHECK_EQ_INT(wsync_fabric_desc_decode(w, WSYNC_FABRIC_DESC_WIRE, &o, &e), WSYNC_OK);
    CHECK(memcmp(&d, &o, sizeof d) == 0);
    /* every n_bytes, including none and all */
    for (i = 0; i <= WSYNC_FABRIC_DESC_MAX; i += 1) {
        d.n_bytes = i;
        memset(d.bytes, 0, sizeof d.bytes);
        memset(d.bytes, 0xEE, i);
        wsync_fabric_desc_encode(&d, w);
        if (wsync_fabric_desc_decode(w, WSYNC_FABRIC_DESC_WIRE, &o, &e) != WSYNC_OK || memcmp(&d, &o, sizeof d) != 0) {
            CHECK_MSG(0, "n_bytes %u", i);
            break;
        }
    }
    d.n_bytes = 37;
    wsync_fabric_desc_encode(&d, w);
    /* truncated at every length, and trailing bytes */
    for (i = 0; i < WSYNC_FABRIC_DESC_WIRE; i++)
        if (wsync_fabric_desc_decode(w, i, &o, &e) != WSYNC_ERR_TRUNCATED) {
            CHECK_MSG(0, "truncated to %u accepted", i);
            break;
        }
    w[WSYNC_FABRIC_DESC_WIRE] = 0;
    CHECK_EQ_INT(wsync_fabric_desc_decode(w, WSYNC_FABRIC_DESC_WIRE + 1, &o, &e), WSYNC_ERR_TRAILING_BYTES);
    CHECK_EQ_INT(wsync_fabric_desc_decode(NULL, 0, &o, &e), WSYNC_ERR_TRUNCATED);
    CHECK_EQ_INT(wsync_fabric_desc_decode(w, WSYNC_FABRIC_DESC_WIRE, NULL, &e), WSYNC_ERR_INVALID_ARGUMENT);
    /* bad memory kind */
    memcpy(w2, w, sizeof w2);
    w2[4] = 2;
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_ERR_INVALID_ARGUMENT);
    memcpy(w2, w, sizeof w2);
    w2[7] = 0x80;
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_ERR_INVALID_ARGUMENT);
    memcpy(w2, w, sizeof w2);
    w2[4] = 1; /* CUDA is a known kind */
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_OK);
    /* address + length overflow, and an empty region */
    memcpy(w2, w, sizeof w2);
    memset(w2 + 16, 0xFF, 8);
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_ERR_OVERFLOW);
    memcpy(w2, w, sizeof w2);
    memset(w2 + 24, 0, 8);
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_ERR_OVERFLOW);
    memcpy(w2, w, sizeof w2);
    memset(w2 + 16, 0, 8);
    memset(w2 + 24, 0xFF, 8); /* addr 0, len 2^64 - 1: fits */
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_OK);
    w2[16] = 1;
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_ERR_OVERFLOW);
    /* n_bytes over the maximum */
    memcpy(w2, w, sizeof w2);
    w2[32] = WSYNC_FABRIC_DESC_MAX + 1;
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_ERR_OUT_OF_BOUNDS);
    memcpy(w2, w, sizeof w2);
    w2[35] = 1;
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_ERR_OUT_OF_BOUNDS);
    /* nonzero padding at every position after the used bytes */
    for (i = 36 + 37; i < WSYNC_FABRIC_DESC_WIRE; i++) {
        memcpy(w2, w, sizeof w2);
        w2[i] = 1;
        if (wsync_fabric_desc_decode(w2, sizeof w2, &o, &e) != WSYNC_ERR_INVALID_ARGUMENT) {
            CHECK_MSG(0, "padding byte %u accepted", i);
            break;
        }
    }
    /* shrinking n_bytes exposes a used byte as padding */
    memcpy(w2, w, sizeof w2);
    w2[32] = 36;
    CHECK_EQ_INT(wsync_fabric_desc_decode(w2, sizeof w2, &o, &e), WSYNC_ERR_INVALID_ARGUMENT);
    TEST_END();
}

/* Descriptors a backend must refuse at open_remote, after decode passed. */
static void test_backend_desc(void)
{
    wsync_fabric rx, tx;
    wsync_fabric_tcp_options o;
    wsync_fabric_mr *mr = NULL;
    wsync_fabric_remote *rem = NULL;
    wsync_fabric_desc d, bad;
    wsync_error e;
    static uint8_t mem[4096];
    TEST_BEGIN("descriptors: each backend refuses another's and malformed endpoint bytes");
    memset(&o, 0, sizeof o);
    CHECK_EQ_INT(wsync_fabric_tcp_open(NULL, &rx, &e), WSYNC_OK);
    o.send_only = 1;
    CHECK_EQ_INT(wsync_fabric_tcp_open(&o, &tx, &e), WSYNC_OK);
    CHECK_EQ_INT(rx.reg(rx.user, mem, sizeof mem, WSYNC_MEM_HOST, &mr, &d, &e), WSYNC_OK);
    CHECK(wsync_fabric_tcp_port(&rx) != 0);
    CHECK_EQ_INT(rx.reg(rx.user, mem, sizeof mem, WSYNC_MEM_CUDA, &mr, &bad, &e), WSYNC_ERR_UNSUPPORTED);
    CHECK_EQ_INT(rx.reg(rx.user, mem, 0, WSYNC_MEM_HOST, &mr, &bad, &e), WSYNC_ERR_INVALID_ARGUMENT);
    bad = d;
    bad.backend = WSYNC_FABRIC_HOST;
    CHECK_EQ_INT(tx.open_remote(tx.user, &bad, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
    bad = d;
    bad.version = 2;
    CHECK_EQ_INT(tx.open_remote(tx.user, &bad, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
    bad = d;
    bad.n_bytes--;
    CHECK_EQ_INT(tx.open_remote(tx.user, &bad, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
    bad = d;
    bad.bytes[2] = 0;
    CHECK_EQ_INT(tx.open_remote(tx.user, &bad, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
    bad = d;
    bad.bytes[16] = 0;
    CHECK_EQ_INT(tx.open_remote(tx.user, &bad, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
    bad = d;
    bad.bytes[0] = bad.bytes[1] = 0;
    CHECK_EQ_INT(tx.open_remote(tx.user, &bad, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
    /* a send-only fabric's descriptor names no endpoint */
    {
        wsync_fabric_mr *smr;
        wsync_fabric_desc sd;
        CHECK_EQ_INT(tx.reg(tx.user, mem, sizeof mem, WSYNC_MEM_HOST, &smr, &sd, &e), WSYNC_OK);
        CHECK_EQ_INT(sd.n_bytes, 0);
        CHECK_EQ_INT(tx.open_remote(tx.user, &sd, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
    }
    /* a port nobody listens on: refused quickly */
    bad = d;
    rx.dereg(rx.user, mr);
    wsync_fabric_close(&rx);
    CHECK_EQ_INT(tx.open_remote(tx.user, &bad, &rem, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "refused") != NULL, "%s", e.message);
    wsync_fabric_close(&tx);
    /* one-host */
    {
        wsync_fabric_host_options ho;
        wsync_fabric h, hs;
        wsync_fabric_mr *hm;
        memset(&ho, 0, sizeof ho);
        CHECK_EQ_INT(wsync_fabric_host_open(&ho, &h, &e), WSYNC_OK);
        ho.send_only = 1;
        CHECK_EQ_INT(wsync_fabric_host_open(&ho, &hs, &e), WSYNC_OK);
        CHECK_EQ_INT(h.reg(h.user, mem, sizeof mem, WSYNC_MEM_HOST, &hm, &d, &e), WSYNC_OK);
        bad = d;
        bad.backend = WSYNC_FABRIC_TCP;
        CHECK_EQ_INT(hs.open_remote(hs.user, &bad, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
        bad = d;
        bad.flags = 4;
        CHECK_EQ_INT(hs.open_remote(hs.user, &bad, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
        bad = d;
        bad.n_bytes++;
        CHECK_EQ_INT(hs.open_remote(hs.user, &bad, &rem, &e), WSYNC_ERR_INVALID_ARGUMENT);
        bad = d;
        bad.bytes[8] ^= 1; /* the key: the receiver refuses the handshake */
        CHECK_EQ_INT(hs.open_remote(hs.user, &bad, &rem, &e), WSYNC_ERR_IO);
        CHECK_MSG(strstr(e.message, "key") != NULL, "%s", e.message);
        bad = d;
        bad.bytes[4] ^= 0x40; /* the region */
        CHECK_EQ_INT(hs.open_remote(hs.user, &bad, &rem, &e), WSYNC_ERR_IO);
        /* CMA-only memory, SHM-only sender */
        wsync_fabric_close(&hs);
        ho.mode = WSYNC_FABRIC_HOST_SHM;
        CHECK_EQ_INT(wsync_fabric_host_open(&ho, &hs, &e), WSYNC_OK);
        CHECK_EQ_INT(hs.open_remote(hs.user, &d, &rem, &e), WSYNC_ERR_UNSUPPORTED);
        wsync_fabric_close(&hs);
        wsync_fabric_close(&h);
        /* an SHM-mode receiver takes only wsync_fabric_host_alloc memory */
        ho.send_only = 0;
        CHECK_EQ_INT(wsync_fabric_host_open(&ho, &h, &e), WSYNC_OK);
        CHECK_EQ_INT(h.reg(h.user, mem, sizeof mem, WSYNC_MEM_HOST, &hm, &d, &e), WSYNC_ERR_INVALID_ARGUMENT);
        wsync_fabric_close(&h);
    }
    TEST_END();
}

/* ---- TCP: frames forged on a raw socket, after a real handshake ---- */

static int raw_connect(unsigned port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A raw connection that passed the handshake (no job key: the region's
   key from the descriptor), and the connection's MAC key; -1 if refused. */
static int raw_authed(unsigned port, uint32_t region, uint64_t key, wsync_hmac_sha256_state *mac)
{
    wsync_error e;
    int fd = raw_connect(port);
    if (fd < 0) return -1;
    if (wsync__tcp_hs_client(fd, NULL, 0, 0, region, key, 2000, "test", mac, &e) != WSYNC_OK) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A frame header (64 bytes) tagged with mac (bad_tag: one bit of it
   flipped), and the tag of its data (16 bytes) after the data when data. */
static size_t frame(uint8_t *h, const wsync_hmac_sha256_state *mac, uint32_t magic, uint32_t type, uint32_t region,
                    uint32_t imm, uint64_t off, uint64_t len, uint64_t seq, const uint8_t *data, size_t n,
                    int bad_tag)
{
    uint8_t dkey[32];
    put32(h, magic);
    put32(h + 4, type);
    put32(h + 8, region);
    put32(h + 12, imm);
    put64(h + 16, off);
    put64(h + 24, len);
    put64(h + 32, seq);
    put64(h + 40, 0);
    wsync__tcp_frame_keys(mac, h, h + 48, dkey);
    if (bad_tag) h[50] ^= 4;
    if (!data) return WSYNC__TCP_HDR;
    {
        wsync__poly p;
        memcpy(h + WSYNC__TCP_HDR, data, n);
        wsync__poly_init(&p, dkey);
        wsync__poly_update(&p, data, n);
        wsync__poly_final(&p, h + WSYNC__TCP_HDR + n);
        return WSYNC__TCP_HDR + n + WSYNC__TAG;
    }
}

/* Sends bytes on fd, then reads until the receiver closes; the ack's status (or -1 for none). */
static int forge_fd(int fd, const uint8_t *bytes, size_t n)
{
    uint8_t ack[64];
    size_t got = 0;
    int status = -1;
    if (fd < 0) return -2;
    if (send(fd, bytes, n, MSG_NOSIGNAL) != (ssize_t)n) {
        close(fd);
        return -3;
    }
    for (;;) {
        struct pollfd pf;
        ssize_t r;
        pf.fd = fd;
        pf.events = POLLIN;
        pf.revents = 0;
        if (poll(&pf, 1, 5000) <= 0) break;
        r = recv(fd, ack + got, sizeof ack - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
        if (got >= sizeof ack) break;
    }
    if (got >= WSYNC__ACK_LEN && get32(ack) == WSYNC__ACK_MAGIC) status = (int)get32(ack + 4);
    close(fd);
    return status;
}

static void test_tcp_forged(void)
{
    wsync_fabric rx, tx;
    wsync_fabric_tcp_options o;
    wsync_fabric_mr *mr, *smr;
    wsync_fabric_remote *rem;
    wsync_fabric_desc d, sd;
    wsync_fabric_stats st;
    wsync_hmac_sha256_state mac, old_mac;
    wsync_error e;
    uint8_t *mem = (uint8_t *)malloc(1 << 20), *src = (uint8_t *)malloc(1 << 20);
    uint8_t buf[2 * WSYNC__TCP_HDR + 256], pay[16], replay[WSYNC__TCP_HDR + 16 + WSYNC__TAG];
    uint64_t key, dig;
    uint32_t region, imm;
    unsigned port;
    int before, k, fd;
    size_t n;
    struct {
        const char *what;
        uint32_t magic, type, region_xor;
        uint64_t off, len, seq;
        int bad_tag, status;
    } cases[] = {
        {"bad magic", 0x31465357u, 1, 0, 0, 16, 1, 0, 1},
        {"type 0", WSYNC__TCP_MAGIC, 0, 0, 0, 16, 1, 0, 1},
        {"type 4", WSYNC__TCP_MAGIC, 4, 0, 0, 16, 1, 0, 1},
        {"a bad tag", WSYNC__TCP_MAGIC, 1, 0, 0, 16, 1, 1, 10},
        {"out of sequence (2 first)", WSYNC__TCP_MAGIC, 1, 0, 0, 16, 2, 0, 9},
        {"sequence 0", WSYNC__TCP_MAGIC, 1, 0, 0, 16, 0, 0, 9},
        {"another region than the handshake's", WSYNC__TCP_MAGIC, 1, 0x100, 0, 16, 1, 0, 2},
        {"one byte past the end", WSYNC__TCP_MAGIC, 1, 0, (1 << 20) - 15, 16, 1, 0, 4},
        {"offset past the end", WSYNC__TCP_MAGIC, 1, 0, 1 << 20, 1, 1, 0, 4},
        {"length past the end", WSYNC__TCP_MAGIC, 1, 0, 0, (1 << 20) + 1, 1, 0, 4},
        {"offset + length wraps", WSYNC__TCP_MAGIC, 1, 0, UINT64_MAX - 7, 16, 1, 0, 4},
        {"length wraps", WSYNC__TCP_MAGIC, 1, 0, 16, UINT64_MAX, 1, 0, 4},
        {"flush with a region", WSYNC__TCP_MAGIC, 3, 0, 0, 0, 1, 0, 6},
        {"flush with a length", WSYNC__TCP_MAGIC, 3, 0, 0, 16, 1, 0, 6},
    };
    TEST_BEGIN("TCP: forged frames on an authenticated raw socket write nothing, are counted, the receiver survives");
    memset(&o, 0, sizeof o);
    o.timeout_ms = 300;
    CHECK_EQ_INT(wsync_fabric_tcp_open(&o, &rx, &e), WSYNC_OK);
    gen(mem, 0, 1 << 20, 9);
    dig = wsync_digest(mem, 1 << 20);
    CHECK_EQ_INT(rx.reg(rx.user, mem, 1 << 20, WSYNC_MEM_HOST, &mr, &d, &e), WSYNC_OK);
    port = wsync_fabric_tcp_port(&rx);
    region = get32(d.bytes + 4);
    key = (uint64_t)get32(d.bytes + 8) | (uint64_t)get32(d.bytes + 12) << 32;
    memset(buf, 0xAB, sizeof buf);
    for (k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        int status;
        uint32_t r = cases[k].type == 3 ? (k == 12 ? region : 0) : region ^ cases[k].region_xor;
        fd = raw_authed(port, region, key, &mac);
        CHECK_MSG(fd >= 0, "%s: the handshake failed", cases[k].what);
        frame(buf, &mac, cases[k].magic, cases[k].type, r, 0, cases[k].off, cases[k].len, cases[k].seq, NULL, 0,
              cases[k].bad_tag);
        wsync_fabric_stats_get(&rx, &st);
        before = (int)st.rejected;
        status = forge_fd(fd, buf, sizeof buf);
        CHECK_MSG(status == cases[k].status, "%s: ack status %d, want %d", cases[k].what, status, cases[k].status);
        wsync_fabric_stats_get(&rx, &st);
        CHECK_MSG((int)st.rejected == before + 1, "%s: not counted (%s)", cases[k].what, st.last_reject);
        CHECK_MSG(strstr(st.last_reject, "127.0.0.1:") != NULL, "%s: the log names no peer: %s", cases[k].what,
                  st.last_reject);
        CHECK_MSG(wsync_digest(mem, 1 << 20) == dig, "%s: the region changed", cases[k].what);
    }
    printf("  TCP forged: last refusal: %s\n", st.last_reject);
    /* a frame with a right header whose data was altered on the way: refused by its data tag */
    fd = raw_authed(port, region, key, &mac);
    memset(pay, 0x3C, sizeof pay);
    n = frame(buf, &mac, WSYNC__TCP_MAGIC, 1, region, 0, 5000, 16, 1, pay, 16, 0);
    buf[WSYNC__TCP_HDR + 3] ^= 1;
    CHECK_EQ_INT(forge_fd(fd, buf, n), 10);
    wsync_fabric_stats_get(&rx, &st);
    CHECK_MSG(strstr(st.last_reject, "tag mismatch") != NULL, "%s", st.last_reject);
    gen(mem, 0, 1 << 20, 9); /* its bytes landed before their tag came: the refusal fails the sender's flush */
    /* a truncated header, then a close; a valid header whose bytes never come (dropped after the timeout) */
    fd = raw_authed(port, region, key, &mac);
    frame(buf, &mac, WSYNC__TCP_MAGIC, 1, region, 0, 0, 16, 1, NULL, 0, 0);
    CHECK(fd >= 0 && send(fd, buf, 20, MSG_NOSIGNAL) == 20);
    close(fd);
    fd = raw_authed(port, region, key, &mac);
    frame(buf, &mac, WSYNC__TCP_MAGIC, 1, region, 0, 100, 200, 1, NULL, 0, 0);
    {
        int64_t t0 = now_ms();
        char c;
        CHECK(fd >= 0 && send(fd, buf, WSYNC__TCP_HDR + 10, MSG_NOSIGNAL) == WSYNC__TCP_HDR + 10);
        CHECK(recv(fd, &c, 1, 0) == 0); /* the receiver gives up on the rest after its 300 ms timeout */
        CHECK_MSG(now_ms() - t0 < 4000, "stalled frame held for %lld ms", (long long)(now_ms() - t0));
        close(fd);
    }
    /* a positive control for the hand-made frames: a correct one lands and is acknowledged */
    fd = raw_authed(port, region, key, &mac);
    memset(pay, 0x5C, sizeof pay);
    n = frame(buf, &mac, WSYNC__TCP_MAGIC, 2, region, 4242, 1000, 16, 1, pay, 16, 0);
    memcpy(replay, buf, sizeof replay);
    old_mac = mac;
    n += frame(buf + n, &mac, WSYNC__TCP_MAGIC, 3, 0, 0, 0, 0, 2, NULL, 0, 0);
    {
        uint8_t ack[WSYNC__ACK_LEN], tag[WSYNC__TAG];
        CHECK(fd >= 0 && send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n);
        CHECK(recv(fd, ack, sizeof ack, MSG_WAITALL) == (ssize_t)sizeof ack && get32(ack) == WSYNC__ACK_MAGIC &&
              get32(ack + 4) == 0 && ack[8] == 2);
        wsync__tcp_ack_tag(&mac, ack, tag);
        CHECK_MSG(memcmp(tag, ack + 16, WSYNC__TAG) == 0, "%s", "the ack's tag");
        close(fd);
        CHECK(mem[1000] == 0x5C && mem[1015] == 0x5C && mem[999] != 0x5C);
        CHECK_EQ_INT(rx.recv_imm(rx.user, mr, &imm, 1000, &e), WSYNC_OK);
        CHECK_EQ_INT(imm, 4242);
    }
    /* the same frame twice on one connection: the second is a replay (its sequence number is old) */
    gen(mem, 0, 1 << 20, 9);
    fd = raw_authed(port, region, key, &mac);
    memset(pay, 0x6D, sizeof pay);
    n = frame(buf, &mac, WSYNC__TCP_MAGIC, 1, region, 0, 2000, 16, 1, pay, 16, 0);
    memcpy(buf + n, buf, n);
    memset(buf + n + WSYNC__TCP_HDR, 0x11, 16); /* what a replay would want to put back: the old bytes */
    {
        wsync__poly p;
        uint8_t dkey[32], tag[WSYNC__TAG];
        wsync__tcp_frame_keys(&mac, buf, tag, dkey); /* (the replayed data keeps a valid tag for seq 1) */
        wsync__poly_init(&p, dkey);
        wsync__poly_update(&p, buf + n + WSYNC__TCP_HDR, 16);
        wsync__poly_final(&p, buf + n + WSYNC__TCP_HDR + 16);
    }
    CHECK_EQ_INT(forge_fd(fd, buf, 2 * n), 9);
    CHECK(mem[2000] == 0x6D && mem[2015] == 0x6D); /* the first landed, the replay did not */
    gen(mem, 0, 1 << 20, 9);
    /* the same frame replayed on a new connection: its tag was for the old connection's key */
    gen(mem, 0, 1 << 20, 9);
    fd = raw_authed(port, region, key, &mac);
    CHECK(memcmp(&mac, &old_mac, sizeof mac) != 0);
    CHECK_EQ_INT(forge_fd(fd, replay, sizeof replay), 10);
    CHECK(wsync_digest(mem, 1 << 20) == dig);
    /* the thread serves a real sender afterwards */
    o.send_only = 1;
    CHECK_EQ_INT(wsync_fabric_tcp_open(&o, &tx, &e), WSYNC_OK);
    gen(src, 0, 1 << 20, 10);
    CHECK_EQ_INT(tx.reg(tx.user, src, 1 << 20, WSYNC_MEM_HOST, &smr, &sd, &e), WSYNC_OK);
    CHECK_EQ_INT(tx.open_remote(tx.user, &d, &rem, &e), WSYNC_OK);
    CHECK_EQ_INT(tx.write_imm(tx.user, smr, 0, rem, 0, 1 << 20, 7, &e), WSYNC_OK);
    CHECK_EQ_INT(tx.flush(tx.user, &e), WSYNC_OK);
    CHECK(memcmp(mem, src, 1 << 20) == 0);
    CHECK_EQ_INT(rx.recv_imm(rx.user, mr, &imm, 1000, &e), WSYNC_OK);
    CHECK_EQ_INT(imm, 7);
    CHECK_EQ_INT(rx.recv_imm(rx.user, mr, &imm, 50, &e), WSYNC_ERR_LIMIT);
    CHECK_EQ_INT(tx.flush(tx.user, &e), WSYNC_OK); /* nothing pending */
    /* the receiver deregisters: the sender's next frame is refused and its flush says why */
    rx.dereg(rx.user, mr);
    CHECK_EQ_INT(tx.write(tx.user, smr, 0, rem, 0, 64, &e), WSYNC_OK);
    CHECK_EQ_INT(tx.flush(tx.user, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "unknown region") != NULL, "%s", e.message);
    CHECK_EQ_INT(tx.write(tx.user, smr, 0, rem, 0, 64, &e), WSYNC_ERR_IO); /* broken stays broken */
    tx.close_remote(tx.user, rem);
    wsync_fabric_close(&tx);
    wsync_fabric_close(&rx);
    free(mem);
    free(src);
    TEST_END();
}

/* ---- one host: is process_vm_writev allowed between sibling processes here? ---- */

static void idle_child(int in, int out, void *arg)
{
    msg m;
    (void)arg;
    m = cmd('r', 0, 0);
    msg_send(out, &m);
    while (msg_recv(in, &m, 3600 * 1000) == 1) msg_send(out, &m);
}

static int cma_permitted(char *why, size_t cap)
{
    cfg c = base_cfg("probe", WSYNC_FABRIC_HOST);
    proc rx[NR];
    wsync_fabric f;
    wsync_fabric_remote *rem;
    wsync_fabric_desc d;
    wsync_error e;
    int ok = 0;
    c.n_receivers = 1;
    c.rx_mode = WSYNC_FABRIC_HOST_CMA;
    memset(rx, 0, sizeof rx);
    if (!start_receivers(&c, rx, NULL)) return 0;
    c.tx_mode = WSYNC_FABRIC_HOST_CMA;
    if (open_fabric(&c, 1, &f, &e) == WSYNC_OK) {
        if (wsync_fabric_desc_decode(c.wire[0], WSYNC_FABRIC_DESC_WIRE, &d, &e) == WSYNC_OK &&
            f.open_remote(f.user, &d, &rem, &e) == WSYNC_OK)
            ok = 1;
        else
            snprintf(why, cap, "%s", e.message);
        wsync_fabric_close(&f);
    }
    {
        msg m = cmd('Q', 0, 0);
        proc_call(&rx[0], &m, 10000);
        proc_end(&rx[0], 0);
    }
    return ok;
}

int main(void)
{
    cfg c;
    char why[400] = "";
    int cma;
    int64_t t0 = now_ms();
    signal(SIGPIPE, SIG_IGN);
    test_desc();
    test_backend_desc();
    test_tcp_forged();

    /* TCP */
    c = base_cfg("TCP", WSYNC_FABRIC_TCP);
    scenario_transfer(c, WSYNC_FABRIC_HOST_AUTO);
    scenario_receiver_dies(c, 0);
    c.timeout_ms = 1000;
    scenario_receiver_dies(c, 1);
    c.timeout_ms = 2000;
    scenario_sender_dies(c);

    /* one host */
    cma = cma_permitted(why, sizeof why);
    {
        proc p;
        msg m;
        char w2[400] = "";
        int direct = -1;
        if (proc_start(&p, idle_child, NULL) == 0 && msg_recv(p.from, &m, 10000) == 1) {
            static uint64_t word; /* the child's copy of it */
            direct = wsync_fabric_host_cma_allowed((int)p.pid, &word, w2, sizeof w2);
        }
        proc_end(&p, 1);
        TEST_BEGIN("one-host: wsync_fabric_host_cma_allowed agrees with open_remote's probe");
        CHECK_EQ_INT(direct, cma);
        TEST_END();
    }
    printf("one-host: process_vm_writev between sibling processes is %s here%s%s\n",
           cma ? "permitted: running CMA and, forced, SHM" : "NOT permitted: running the SHM fallback only",
           cma ? "" : ": ", cma ? "" : why);
    c = base_cfg(cma ? "one-host AUTO (CMA)" : "one-host AUTO (SHM fallback)", WSYNC_FABRIC_HOST);
    c.rx_shm[0] = !cma; /* receiver 0: plain memory when CMA works (it offers CMA only) */
    c.rx_shm[1] = 1;    /* receiver 1: memfd memory, offers both */
    scenario_transfer(c, cma ? WSYNC_FABRIC_HOST_CMA : WSYNC_FABRIC_HOST_SHM);
    scenario_receiver_dies(c, 0);
    scenario_sender_dies(c);
    c = base_cfg("one-host SHM (forced)", WSYNC_FABRIC_HOST);
    c.rx_shm[0] = c.rx_shm[1] = 1;
    c.tx_mode = WSYNC_FABRIC_HOST_SHM;
    scenario_transfer(c, WSYNC_FABRIC_HOST_SHM);
    scenario_receiver_dies(c, 0);
    scenario_sender_dies(c);
    if (cma) {
        c = base_cfg("one-host CMA (forced)", WSYNC_FABRIC_HOST);
        c.rx_mode = WSYNC_FABRIC_HOST_CMA;
        c.tx_mode = WSYNC_FABRIC_HOST_CMA;
        c.rx_shm[1] = 1; /* memfd memory, offered as CMA only */
        scenario_transfer(c, WSYNC_FABRIC_HOST_CMA);
    }
    printf("test_fabric: %.1f s\n", (double)(now_ms() - t0) / 1000);
    return check_summary();
}
