/* The controller protocol's authentication (wsync_rdma.h, protocol
   version 4), with real processes over real sockets on 127.0.0.1: the
   controller runs here, every rank (real or rogue) is a forked process.

   - rogues that join first, before the real ranks: an inference rank 0
     and a trainer rank 0 with no job key and with a wrong one (the
     trainer then sends DONE for step 1 regardless). Each is refused at its
     PROOF, logged with its address, receives nothing after the handshake
     and takes no slot; the real ranks join, two steps commit, and the
     inference rank's memory holds the trainer's bytes of each step.
   - the write window: a trainer with the key that writes after its step
     committed is refused; the inference rank keeps the committed bytes.
   - a trainer with the key that replays its step-1 DONE frame at step 2:
     the MAC (sequence number) refuses it, step 2 aborts, version stays 1.
   - a rogue controller bound first, without the key and with a wrong
     one: the real rank refuses it (WSYNC_ERR_AUTH) and sends it nothing
     but its HELLO.
   - secure by default: no key on a non-loopback address refuses to start
     unless insecure; the key from the options, WSYNC_JOB_KEY and
     WSYNC_JOB_KEY_FILE, and keys too short or too long refused.
   - a rank without the key refuses the keyed controller, saying so.
   - a silent connection and one trickling its HELLO are cut within about
     1 s each, logged, and the real ranks still join.
   - 256 idle connections opened before the real ranks: the ranks join and
     a step commits; every idle one is cut and logged.
   - a flood of new connections while the real ranks join, silent from
     the ranks' own address, or HELLOs naming the real ranks from another
     address (127.0.0.2): the handshake slots overflow, and the cut falls
     on the flood, never on a real rank's handshake. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#include "check.h"
#include "ctl_raw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NBYTES 8192u
static const char KEY[] = "0123456789abcdef0123456789abcdef-the-job";
static const char WRONG[] = "0123456789abcdef0123456789abcdef-not-this";

static int has(const char *s, const char *sub)
{
    return s && strstr(s, sub) != NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

/* the trainer's byte i at step s */
static uint8_t val(uint64_t s, uint64_t i)
{
    return (uint8_t)((s * 0x9E3779B1u + i * 31u + (i >> 7)) ^ 0x5A);
}

/* ---- the controller's log ---- */

static char log_buf[1 << 17];
static size_t log_n;

static void log_line(void *user, const char *line)
{
    (void)user;
    if (log_n + strlen(line) + 2 < sizeof log_buf)
        log_n += (size_t)snprintf(log_buf + log_n, sizeof log_buf - log_n, "%s\n", line);
}

/* lines of the log holding both a and b */
static unsigned logged(const char *a, const char *b)
{
    unsigned n = 0;
    const char *p = log_buf;
    while (*p) {
        const char *e = strchr(p, '\n');
        char line[600];
        size_t k;
        if (!e) e = p + strlen(p);
        k = (size_t)(e - p) < sizeof line - 1 ? (size_t)(e - p) : sizeof line - 1;
        memcpy(line, p, k);
        line[k] = 0;
        n += has(line, a) && has(line, b);
        p = *e ? e + 1 : e;
    }
    return n;
}

static wsync_controller *ctl_open(const char *key, unsigned join_ms, wsync_error *e)
{
    wsync_controller_options o;
    wsync_controller *c = NULL;
    memset(&o, 0, sizeof o);
    o.n_trainers = 1;
    o.n_inference = 1;
    o.join_timeout_ms = join_ms;
    o.step_timeout_ms = 3000;
    o.job_key = key;
    o.job_key_len = key ? strlen(key) : 0;
    o.log = log_line;
    log_n = 0;
    log_buf[0] = 0;
    if (wsync_controller_open(&o, &c, e) != WSYNC_OK) return NULL;
    return c;
}

/* ---- children: each reports one line through a pipe, then exits ---- */

typedef struct child {
    pid_t pid;
    int rd;
    char line[512];
} child;

static void report(int fd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void report(int fd, const char *fmt, ...)
{
    char b[512];
    va_list ap;
    ssize_t k;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    k = write(fd, b, strlen(b));
    (void)k;
}

static int spawn(child *ch, void (*fn)(int wfd, unsigned port, const void *arg), unsigned port, const void *arg)
{
    int p[2];
    memset(ch, 0, sizeof *ch);
    if (pipe(p) != 0) return 0;
    fflush(stdout);
    ch->pid = fork();
    if (ch->pid < 0) return 0;
    if (ch->pid == 0) {
        close(p[0]);
        fn(p[1], port, arg);
        close(p[1]);
        _exit(0);
    }
    close(p[1]);
    ch->rd = p[0];
    return 1;
}

/* the child's report (within ms), then its exit */
static const char *reap(child *ch, int ms)
{
    size_t n = 0;
    int64_t until = raw_now_ms() + ms;
    for (;;) {
        struct pollfd pf;
        ssize_t k;
        int64_t left = until - raw_now_ms();
        if (left <= 0) break;
        pf.fd = ch->rd;
        pf.events = POLLIN;
        if (poll(&pf, 1, (int)left) <= 0) break;
        k = read(ch->rd, ch->line + n, sizeof ch->line - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
    }
    ch->line[n] = 0;
    close(ch->rd);
    if (waitpid(ch->pid, NULL, WNOHANG) == 0) {
        kill(ch->pid, SIGKILL);
        waitpid(ch->pid, NULL, 0);
    }
    return ch->line;
}

/* reap, and a check that the child's report holds `want` */
static void reap_says(child *ch, int ms, const char *want)
{
    const char *line = reap(ch, ms);
    CHECK_MSG(has(line, want), "%s", line);
}

static int connect_to(unsigned port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* bytes that arrive on fd until it closes or ms pass */
static size_t drain(int fd, int ms)
{
    uint8_t b[4096];
    size_t n = 0;
    int64_t until = raw_now_ms() + ms;
    for (;;) {
        struct pollfd pf;
        ssize_t k;
        int64_t left = until - raw_now_ms();
        if (left <= 0) break;
        pf.fd = fd;
        pf.events = POLLIN;
        if (poll(&pf, 1, (int)left) <= 0) break;
        k = recv(fd, b, sizeof b, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    return n;
}

/* A rogue rank: the handshake by hand under key (NULL: none), going on
   whatever the controller proves; a trainer then sends DONE for step 1
   (MAC'd under what it derived). Reports "proof-sent received=N" with the
   bytes that came after the CHALLENGE. */
typedef struct rogue_arg {
    uint32_t role;
    const char *key;
} rogue_arg;

static void rogue_rank(int wfd, unsigned port, const void *arg)
{
    const rogue_arg *ra = (const rogue_arg *)arg;
    wsync_job_key k;
    rawsess s;
    int fd = connect_to(port);
    memset(&k, 0, sizeof k);
    if (ra->key) wsync_job_key_resolve(ra->key, strlen(ra->key), &k, NULL);
    if (fd < 0 || !raw_hello(fd, ra->role, 0, ra->key ? &k : NULL, &s, 0)) {
        report(wfd, "handshake failed");
        return;
    }
    if (ra->role == WSYNC_CTL_TRAINER) {
        wsync_ctl_msg m;
        static uint8_t bits[1] = {1};
        memset(&m, 0, sizeof m);
        m.type = WSYNC_CTL_DONE;
        m.step = 1;
        m.n_named = WSYNC_CTL_NAMED_ALL;
        m.n_ran = 1;
        m.runs = 1;
        m.ran = bits;
        raw_send(fd, &s, &m);
    }
    report(wfd, "proof-sent received=%zu", drain(fd, 4000));
    close(fd);
}

/* ---- the real ranks ---- */

static wsync_ctl_tensor entry(void)
{
    wsync_ctl_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.dtype = WSYNC_DTYPE_U8;
    t.ndim = 1;
    t.shape[0] = NBYTES;
    t.row_count = NBYTES;
    return t;
}

/* A real trainer with the key: every step its bytes are val(step, i). As
   "late" (LATE as its argument) it writes "INJECTED" over the inference
   rank's bytes 300 ms after its DONE for step 1, when the step committed. */
static const char LATE[] = "late";

static void real_trainer(int wfd, unsigned port, const void *arg)
{
    const char *key = KEY;
    int late = arg == (const void *)LATE, late_refused = -1;
    char late_why[200] = "";
    wsync_fabric f;
    wsync_fabric_tcp_options fo;
    wsync_fabric_mr *mr = NULL;
    wsync_fabric_desc d;
    wsync_rank_options o;
    wsync_rank *r = NULL;
    wsync_error e;
    wsync_ctl_tensor t = entry();
    uint8_t *mem = (uint8_t *)malloc(NBYTES);
    uint64_t step = 0, i, steps = 0;
    int bye = 0;
    memset(&fo, 0, sizeof fo);
    fo.send_only = 1;
    fo.job_key = key;
    fo.job_key_len = strlen(key);
    fo.sender_id = 0; /* trainer rank 0 */
    if (!mem || wsync_fabric_tcp_open(&fo, &f, &e) != WSYNC_OK ||
        f.reg(f.user, mem, NBYTES, WSYNC_MEM_HOST, &mr, &d, &e) != WSYNC_OK) {
        report(wfd, "trainer setup: %s", e.message);
        return;
    }
    memset(&o, 0, sizeof o);
    o.port = port;
    o.role = WSYNC_CTL_TRAINER;
    o.tensors = &t;
    o.n_tensors = 1;
    o.fabric = &f;
    o.mrs = &mr;
    o.descs = &d;
    o.n_regions = 1;
    o.timeout_ms = 5000;
    o.job_key = key;
    o.job_key_len = strlen(key);
    if (wsync_rank_join(&o, &r, &e) != WSYNC_OK) {
        report(wfd, "trainer join: %s", e.message);
        return;
    }
    for (;;) {
        if (wsync_rank_wait_go(r, &step, &bye, 5000, &e) != WSYNC_OK || bye) break;
        for (i = 0; i < NBYTES; i++) mem[i] = val(step, i);
        if (wsync_rank_push(r, &e) != WSYNC_OK || wsync_rank_done(r, step, WSYNC_OK, NULL, &e) != WSYNC_OK) break;
        steps++;
        if (late && step == 1) {
            wsync_error le;
            sleep_ms(300);
            for (i = 0; i < NBYTES; i++) mem[i] = (uint8_t)"INJECTED"[i % 8];
            late_refused = wsync_rank_push(r, &le) != WSYNC_OK;
            snprintf(late_why, sizeof late_why, "%.190s", le.message);
        }
    }
    report(wfd, "trainer steps=%llu bye=%d late_refused=%d (%s) %s", (unsigned long long)steps, bye, late_refused,
           late_why, bye ? "" : e.message);
    wsync_rank_close(r);
    f.dereg(f.user, mr);
    wsync_fabric_close(&f);
    free(mem);
}

typedef struct inf_state {
    uint8_t *mem;
    uint64_t bad, checked;
} inf_state;

static wsync_result inf_commit(void *user, uint64_t step, wsync_error *err)
{
    inf_state *st = (inf_state *)user;
    uint64_t i;
    (void)err;
    for (i = 0; i < NBYTES; i++) st->bad += st->mem[i] != val(step, i);
    st->checked++;
    return WSYNC_OK;
}

/* A real inference rank with key; reports its version, the steps it
   checked at COMMIT and the bytes that were not the trainer's. */
static void real_inference(int wfd, unsigned port, const void *arg)
{
    const char *key = (const char *)arg;
    wsync_fabric f;
    wsync_fabric_mr *mr = NULL;
    wsync_fabric_desc d;
    wsync_rank_options o;
    wsync_rank *r = NULL;
    wsync_error e;
    wsync_ctl_tensor t = entry();
    wsync_fabric_tcp_options fo;
    inf_state st;
    char why[200] = "";
    uint64_t i, end_bad = 0;
    memset(&st, 0, sizeof st);
    memset(&fo, 0, sizeof fo);
    fo.job_key = key;
    fo.job_key_len = strlen(key);
    fo.sender_id = UINT32_MAX;
    st.mem = (uint8_t *)calloc(1, NBYTES);
    if (!st.mem || wsync_fabric_tcp_open(&fo, &f, &e) != WSYNC_OK ||
        f.reg(f.user, st.mem, NBYTES, WSYNC_MEM_HOST, &mr, &d, &e) != WSYNC_OK) {
        report(wfd, "inference setup: %s", e.message);
        return;
    }
    memset(&o, 0, sizeof o);
    o.port = port;
    o.role = WSYNC_CTL_INFERENCE;
    o.tensors = &t;
    o.n_tensors = 1;
    o.fabric = &f; /* its write window */
    o.mrs = &mr;
    o.descs = &d;
    o.n_regions = 1;
    o.timeout_ms = 5000;
    o.on_commit = inf_commit;
    o.user = &st;
    o.job_key = key;
    o.job_key_len = strlen(key);
    if (wsync_rank_join(&o, &r, &e) != WSYNC_OK) {
        report(wfd, "inference join: %s", e.message);
        return;
    }
    {
        int64_t until = raw_now_ms() + 8000;
        while (!wsync_rank_ended(r, why, sizeof why) && raw_now_ms() < until) sleep_ms(5);
    }
    /* at the end: still the last committed step's bytes */
    for (i = 0; wsync_rank_version(r) && i < NBYTES; i++) end_bad += st.mem[i] != val(wsync_rank_version(r), i);
    report(wfd, "inference version=%llu checked=%llu bad=%llu end_bad=%llu", (unsigned long long)wsync_rank_version(r),
           (unsigned long long)st.checked, (unsigned long long)st.bad, (unsigned long long)end_bad);
    wsync_rank_close(r);
    f.dereg(f.user, mr);
    wsync_fabric_close(&f);
    free(st.mem);
}

/* ---- the tests ---- */

/* wsync_controller_accept on a thread of its own. */
typedef struct accept_job {
    wsync_controller *c;
    wsync_result r;
    wsync_error e;
} accept_job;

static void *accept_main(void *p)
{
    accept_job *j = (accept_job *)p;
    j->r = wsync_controller_accept(j->c, &j->e);
    return NULL;
}

static void test_rogue_ranks(void)
{
    static const rogue_arg ra[4] = {{WSYNC_CTL_INFERENCE, NULL},
                                    {WSYNC_CTL_INFERENCE, WRONG},
                                    {WSYNC_CTL_TRAINER, NULL},
                                    {WSYNC_CTL_TRAINER, WRONG}};
    child rog[4], tr, in;
    wsync_controller *c;
    wsync_error e;
    unsigned port, k;
    int64_t t0;
    accept_job acc;
    pthread_t acc_th;
    int acc_on;
    TEST_BEGIN("rogue inference and trainer ranks 0 (no key, a wrong key) joining first are refused, logged, sent "
               "nothing; the real ranks join and two steps commit the trainer's bytes");
    c = ctl_open(KEY, 6000, &e);
    CHECK_MSG(c != NULL, "%s", e.message);
    if (!c) return;
    port = wsync_controller_port(c);
    for (k = 0; k < 4; k++) CHECK(spawn(&rog[k], rogue_rank, port, &ra[k]));
    /* the rogues go first: accept runs on a thread and the real ranks start
       only once all four are refused (on a loaded machine a rogue's PROOF
       could otherwise come after every real rank had joined) */
    acc.c = c;
    acc.r = WSYNC_ERR_IO;
    t0 = raw_now_ms();
    acc_on = pthread_create(&acc_th, NULL, accept_main, &acc) == 0;
    CHECK(acc_on);
    while (wsync_controller_refused(c, NULL, 0) < 4 && raw_now_ms() - t0 < 5000) sleep_ms(5);
    CHECK(spawn(&tr, real_trainer, port, KEY));
    CHECK(spawn(&in, real_inference, port, KEY));
    if (acc_on) pthread_join(acc_th, NULL);
    CHECK_MSG(acc.r == WSYNC_OK, "%s", acc.e.message);
    CHECK_MSG(raw_now_ms() - t0 < 3000, "accept took %lld ms", (long long)(raw_now_ms() - t0));
    CHECK_MSG(wsync_controller_step(c, 1, &e) == WSYNC_OK, "%s", e.message);
    CHECK_MSG(wsync_controller_step(c, 2, &e) == WSYNC_OK, "%s", e.message);
    CHECK_MSG(wsync_controller_refused(c, NULL, 0) == 4, "%u refused:\n%s", wsync_controller_refused(c, NULL, 0),
              log_buf);
    wsync_controller_close(c);
    for (k = 0; k < 4; k++) {
        const char *line = reap(&rog[k], 6000);
        CHECK_MSG(has(line, "proof-sent received=0"), "rogue %u: %s", k, line);
    }
    CHECK_MSG(logged("refused the connection from 127.0.0.1:", "inference rank 0 did not prove the job key") == 2,
              "%s", log_buf);
    CHECK_MSG(logged("refused the connection from 127.0.0.1:", "trainer rank 0 did not prove the job key") == 2, "%s",
              log_buf);
    reap_says(&in, 8000, "inference version=2 checked=2 bad=0");
    reap_says(&tr, 8000, "trainer steps=2 bye=1");
    TEST_END();
}

/* a trainer with the key, by hand: joins, answers GO 1 with a DONE that
   counts its transfers as run (it writes nothing), and answers GO 2 with
   the DONE frame of step 1 again, byte for byte (its old MAC) */
static void replaying_trainer(int wfd, unsigned port, const void *arg)
{
    wsync_job_key k;
    wsync_ctl_tensor t = entry();
    wsync_fabric_desc d;
    wsync_ctl_msg m, in;
    rawsess s;
    uint8_t frame[256], bits[8];
    size_t flen = 0, got = 0;
    uint32_t nx = 0;
    int fd = connect_to(port);
    (void)arg;
    wsync_job_key_resolve(KEY, strlen(KEY), &k, NULL);
    memset(&d, 0, sizeof d);
    d.backend = WSYNC_FABRIC_TCP;
    d.version = 1;
    d.addr = 4096;
    d.len = NBYTES;
    d.n_bytes = 8;
    memset(&m, 0, sizeof m);
    m.type = WSYNC_CTL_JOIN;
    m.role = WSYNC_CTL_TRAINER;
    m.n_regions = 1;
    m.regions = &d;
    m.n_tensors = 1;
    m.tensors = &t;
    if (fd < 0 || !raw_hello(fd, WSYNC_CTL_TRAINER, 0, &k, &s, 1) || !raw_send(fd, &s, &m)) {
        report(wfd, "replayer: join failed");
        return;
    }
    while (raw_recv(fd, &s, &in, 5000)) {
        uint32_t type = in.type;
        uint64_t step = in.step;
        if (type == WSYNC_CTL_ASSIGN) nx = in.n_transfers;
        wsync_ctl_msg_free(&in);
        if (type != WSYNC_CTL_GO) continue;
        if (step == 1) {
            memset(&m, 0, sizeof m);
            memset(bits, 0xFF, sizeof bits);
            if (nx % 8) bits[nx / 8] = (uint8_t)((1u << (nx % 8)) - 1);
            m.type = WSYNC_CTL_DONE;
            m.step = 1;
            m.n_named = WSYNC_CTL_NAMED_ALL;
            m.n_ran = nx;
            m.runs = nx;
            m.ran = bits;
            if (nx > 32 || wsync_ctl_encode(&m, frame, sizeof frame - WSYNC_CTL_MAC, &flen, NULL) != WSYNC_OK) break;
            wsync_ctl_frame_mac(s.au.to_ctl, s.tx++, frame, flen, frame + flen);
            flen += WSYNC_CTL_MAC;
        }
        /* step 1: the genuine frame; step 2: the same bytes again */
        if (send(fd, frame, flen, MSG_NOSIGNAL) != (ssize_t)flen) break;
        got++;
    }
    report(wfd, "replayer sent=%zu", got);
    close(fd);
}

static void test_replayed_done(void)
{
    child tr, in;
    wsync_controller *c;
    wsync_error e;
    unsigned port;
    TEST_BEGIN("a trainer's DONE replayed at the next step fails its MAC: the step aborts, the version stays");
    c = ctl_open(KEY, 6000, &e);
    CHECK_MSG(c != NULL, "%s", e.message);
    if (!c) return;
    port = wsync_controller_port(c);
    CHECK(spawn(&tr, replaying_trainer, port, NULL));
    CHECK(spawn(&in, real_inference, port, KEY));
    CHECK_MSG(wsync_controller_accept(c, &e) == WSYNC_OK, "%s", e.message);
    CHECK_MSG(wsync_controller_step(c, 1, &e) == WSYNC_OK, "%s", e.message);
    CHECK(wsync_controller_step(c, 2, &e) != WSYNC_OK);
    CHECK_MSG(has(e.message, "trainer rank 0") && has(e.message, "MAC does not match"), "%s", e.message);
    wsync_controller_close(c);
    /* step 1 committed (the trainer wrote nothing: its bytes are what they were), step 2 did not */
    reap_says(&in, 8000, "inference version=1 checked=1");
    reap_says(&tr, 8000, "replayer sent=2");
    TEST_END();
}

/* A rogue controller bound first, without the key or with a wrong one:
   reads HELLO, sends a CHALLENGE under that key, and reports the bytes the
   rank sends after its HELLO (a PROOF would be 44, a JOIN more). */
typedef struct rogue_ctl_arg {
    int lfd;
    const char *key; /* NULL: none */
} rogue_ctl_arg;

static void rogue_controller(int wfd, unsigned unused, const void *arg)
{
    const rogue_ctl_arg *ra = (const rogue_ctl_arg *)arg;
    int lfd = ra->lfd, fd;
    wsync_job_key k;
    rawsess s;
    uint32_t role = 0, rank = 0;
    struct pollfd pf;
    (void)unused;
    memset(&k, 0, sizeof k);
    if (ra->key) wsync_job_key_resolve(ra->key, strlen(ra->key), &k, NULL);
    pf.fd = lfd;
    pf.events = POLLIN;
    if (poll(&pf, 1, 5000) != 1 || (fd = accept(lfd, NULL, NULL)) < 0) {
        report(wfd, "no rank came");
        return;
    }
    /* check 0: waits 500 ms for a PROOF; none must come */
    raw_challenge(fd, ra->key ? &k : NULL, &s, &role, &rank, 0);
    report(wfd, "rogue-ctl role=%u after-hello=%zu", (unsigned)role, drain(fd, 1000));
    close(fd);
}

static void test_late_write(void)
{
    child tr, in;
    wsync_controller *c;
    wsync_error e;
    unsigned port;
    TEST_BEGIN("the write window: a trainer with the key that writes after its step committed is refused, and the "
               "inference rank keeps the committed bytes");
    c = ctl_open(KEY, 6000, &e);
    CHECK_MSG(c != NULL, "%s", e.message);
    if (!c) return;
    port = wsync_controller_port(c);
    CHECK(spawn(&tr, real_trainer, port, LATE));
    CHECK(spawn(&in, real_inference, port, KEY));
    CHECK_MSG(wsync_controller_accept(c, &e) == WSYNC_OK, "%s", e.message);
    CHECK_MSG(wsync_controller_step(c, 1, &e) == WSYNC_OK, "%s", e.message);
    sleep_ms(700); /* the late write comes and is refused */
    wsync_controller_close(c);
    reap_says(&tr, 8000, "trainer steps=1 bye=1 late_refused=1");
    reap_says(&in, 8000, "inference version=1 checked=1 bad=0 end_bad=0");
    TEST_END();
}

static void test_rogue_controller(void)
{
    static const char *const keys[2] = {NULL, WRONG};
    unsigned v;
    TEST_BEGIN("a rank refuses a controller that does not prove the job key (it has none, or a wrong one), and sends "
               "it nothing after HELLO");
    for (v = 0; v < 2; v++) {
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        rogue_ctl_arg ra;
        child rc, in;
        ra.lfd = socket(AF_INET, SOCK_STREAM, 0);
        ra.key = keys[v];
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        CHECK(ra.lfd >= 0 && bind(ra.lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(ra.lfd, 4) == 0 &&
              getsockname(ra.lfd, (struct sockaddr *)&a, &al) == 0);
        CHECK(spawn(&rc, rogue_controller, 0, &ra));
        CHECK(spawn(&in, real_inference, ntohs(a.sin_port), KEY));
        {
            const char *line = reap(&in, 8000);
            CHECK_MSG(has(line, "inference join: inference rank 0: the controller at 127.0.0.1 port ") &&
                          has(line, "did not prove the job key") && !has(line, "this rank has no key"),
                      "%s key: %s", v ? "wrong" : "no", line);
            line = reap(&rc, 8000);
            /* the rank closed after the CHALLENGE: no PROOF, no JOIN */
            CHECK_MSG(has(line, "rogue-ctl role=2 after-hello=0"), "%s key: %s", v ? "wrong" : "no", line);
        }
        if (ra.lfd >= 0) close(ra.lfd);
    }
    TEST_END();
}

static void test_secure_default(void)
{
    wsync_controller_options o;
    wsync_controller *c = NULL;
    wsync_error e;
    TEST_BEGIN("secure by default: no key on a non-loopback address refuses to start unless insecure");
    unsetenv("WSYNC_JOB_KEY");
    unsetenv("WSYNC_JOB_KEY_FILE");
    memset(&o, 0, sizeof o);
    o.n_trainers = o.n_inference = 1;
    o.bind_host = "0.0.0.0";
    CHECK(wsync_controller_open(&o, &c, &e) == WSYNC_ERR_AUTH && c == NULL);
    CHECK_MSG(has(e.message, "no job key to listen on 0.0.0.0") && has(e.message, "insecure"), "%s", e.message);
    o.insecure = 1;
    CHECK_MSG(wsync_controller_open(&o, &c, &e) == WSYNC_OK, "%s", e.message);
    wsync_controller_close(c);
    c = NULL;
    o.insecure = 0;
    o.job_key = KEY;
    o.job_key_len = strlen(KEY);
    CHECK_MSG(wsync_controller_open(&o, &c, &e) == WSYNC_OK, "%s", e.message);
    wsync_controller_close(c);
    c = NULL;
    /* the key from the environment counts */
    o.job_key = NULL;
    o.job_key_len = 0;
    setenv("WSYNC_JOB_KEY", KEY, 1);
    CHECK_MSG(wsync_controller_open(&o, &c, &e) == WSYNC_OK, "%s", e.message);
    wsync_controller_close(c);
    c = NULL;
    unsetenv("WSYNC_JOB_KEY");
    /* loopback without a key: as before */
    o.bind_host = "127.0.0.1";
    CHECK_MSG(wsync_controller_open(&o, &c, &e) == WSYNC_OK, "%s", e.message);
    wsync_controller_close(c);
    TEST_END();
}

static void test_key_sources(void)
{
    wsync_job_key k;
    wsync_error e;
    char path[] = "/tmp/wsync_ctl_auth_keyXXXXXX";
    int fd;
    TEST_BEGIN("the job key: options, then WSYNC_JOB_KEY, then WSYNC_JOB_KEY_FILE; bad keys refused by source");
    unsetenv("WSYNC_JOB_KEY");
    unsetenv("WSYNC_JOB_KEY_FILE");
    CHECK(wsync_job_key_resolve(NULL, 0, &k, &e) == WSYNC_OK && k.len == 0);
    CHECK(wsync_job_key_resolve(KEY, strlen(KEY), &k, &e) == WSYNC_OK && k.len == strlen(KEY) &&
          memcmp(k.bytes, KEY, k.len) == 0);
    CHECK(wsync_job_key_resolve("short", 5, &k, &e) == WSYNC_ERR_INVALID_ARGUMENT && k.len == 0);
    CHECK_MSG(has(e.message, "job key from the options: 5 bytes"), "%s", e.message);
    fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, WRONG, strlen(WRONG)) == (ssize_t)strlen(WRONG) && write(fd, "\r\n", 2) == 2);
        close(fd);
        setenv("WSYNC_JOB_KEY_FILE", path, 1);
        CHECK(wsync_job_key_resolve(NULL, 0, &k, &e) == WSYNC_OK && k.len == strlen(WRONG) &&
              memcmp(k.bytes, WRONG, k.len) == 0);
        setenv("WSYNC_JOB_KEY", KEY, 1); /* the variable before the file */
        CHECK(wsync_job_key_resolve(NULL, 0, &k, &e) == WSYNC_OK && k.len == strlen(KEY) &&
              memcmp(k.bytes, KEY, k.len) == 0);
        CHECK(wsync_job_key_resolve(WRONG, strlen(WRONG), &k, &e) == WSYNC_OK && memcmp(k.bytes, WRONG, k.len) == 0);
        unsetenv("WSYNC_JOB_KEY");
        unlink(path);
        CHECK(wsync_job_key_resolve(NULL, 0, &k, &e) == WSYNC_ERR_IO && k.len == 0);
        CHECK_MSG(has(e.message, "WSYNC_JOB_KEY_FILE '/tmp/wsync_ctl_auth_key") && has(e.message, "No such file"), "%s",
                  e.message);
        unsetenv("WSYNC_JOB_KEY_FILE");
    }
    {
        char big[WSYNC_JOB_KEY_MAX + 2];
        memset(big, 'k', sizeof big - 1);
        big[sizeof big - 1] = 0;
        setenv("WSYNC_JOB_KEY", big, 1);
        CHECK(wsync_job_key_resolve(NULL, 0, &k, &e) == WSYNC_ERR_INVALID_ARGUMENT);
        CHECK_MSG(has(e.message, "job key from WSYNC_JOB_KEY: 257 bytes"), "%s", e.message);
        unsetenv("WSYNC_JOB_KEY");
    }
    TEST_END();
}

/* HELLO's first 8 bytes, then one byte every 300 ms */
static void trickler(int wfd, unsigned port, const void *arg)
{
    wsync_ctl_msg h;
    uint8_t b[64];
    size_t n = 0, i;
    int fd = connect_to(port);
    (void)arg;
    memset(&h, 0, sizeof h);
    h.type = WSYNC_CTL_HELLO;
    h.role = WSYNC_CTL_INFERENCE;
    if (fd < 0 || wsync_ctl_encode(&h, b, sizeof b, &n, NULL) != WSYNC_OK) return;
    for (i = 0; i < n; i++) {
        if (send(fd, b + i, 1, MSG_NOSIGNAL) != 1) break;
        if (i >= 8) sleep_ms(300);
    }
    report(wfd, "trickled=%zu", i);
    close(fd);
}

static void test_slow_handshakes(void)
{
    child tk, tr, in;
    wsync_controller *c;
    wsync_error e;
    unsigned port;
    int silent;
    int64_t t0;
    TEST_BEGIN("a silent connection and a trickled HELLO are cut within about 1 s and logged; the real ranks join");
    c = ctl_open(KEY, 5000, &e);
    CHECK_MSG(c != NULL, "%s", e.message);
    if (!c) return;
    port = wsync_controller_port(c);
    silent = connect_to(port);
    CHECK(spawn(&tk, trickler, port, NULL));
    sleep_ms(100);
    CHECK(spawn(&tr, real_trainer, port, KEY));
    CHECK(spawn(&in, real_inference, port, KEY));
    t0 = raw_now_ms();
    CHECK_MSG(wsync_controller_accept(c, &e) == WSYNC_OK, "%s", e.message);
    CHECK_MSG(raw_now_ms() - t0 < 2500, "accept took %lld ms", (long long)(raw_now_ms() - t0));
    CHECK_MSG(wsync_controller_step(c, 1, &e) == WSYNC_OK, "%s", e.message);
    /* the silent one and the trickler: cut by their 1 s (accept may have
       ended before; then closing the controller drops them) */
    wsync_controller_close(c);
    CHECK(drain(silent, 2000) == 0);
    close(silent);
    {
        const char *line = reap(&tk, 8000);
        CHECK_MSG(has(line, "trickled=") && atoi(line + 9) < 20, "%s", line);
        reap_says(&in, 8000, "inference version=1 checked=1 bad=0");
        reap(&tr, 8000);
    }
    TEST_END();
}

static void test_rank_without_key(void)
{
    child in;
    wsync_controller *c;
    wsync_error e;
    TEST_BEGIN("a rank without the key refuses the keyed controller, saying it has none; the controller logs it");
    c = ctl_open(KEY, 1200, &e);
    CHECK_MSG(c != NULL, "%s", e.message);
    if (!c) return;
    CHECK(spawn(&in, real_inference, wsync_controller_port(c), ""));
    CHECK(wsync_controller_accept(c, &e) == WSYNC_ERR_LIMIT &&
          has(e.message, "missing: trainer rank 0, inference rank 0"));
    CHECK_MSG(logged("from 127.0.0.1:", "inference rank 0 closed the connection in the handshake") == 1, "%s",
              log_buf);
    wsync_controller_close(c);
    {
        const char *line = reap(&in, 8000);
        CHECK_MSG(has(line, "did not prove the job key") && has(line, "this rank has no key"), "%s", line);
    }
    TEST_END();
}

static void test_deadline_logged(void)
{
    wsync_controller *c;
    wsync_error e;
    int silent;
    int64_t t0;
    TEST_BEGIN("a connection that sends nothing is refused after 1 s and logged with its address");
    c = ctl_open(KEY, 1800, &e);
    CHECK_MSG(c != NULL, "%s", e.message);
    if (!c) return;
    silent = connect_to(wsync_controller_port(c));
    t0 = raw_now_ms();
    CHECK(wsync_controller_accept(c, &e) == WSYNC_ERR_LIMIT); /* nobody real came */
    CHECK(raw_now_ms() - t0 >= 1700);
    CHECK_MSG(logged("refused the connection from 127.0.0.1:", "no HELLO within 1000 ms of connecting") == 1, "%s",
              log_buf);
    CHECK(drain(silent, 500) == 0);
    close(silent);
    wsync_controller_close(c);
    TEST_END();
}

/* 1 when the peer closed fd within ms (a read returns 0 or an error). */
static int closed_within(int fd, int ms)
{
    struct pollfd pf;
    char b;
    pf.fd = fd;
    pf.events = POLLIN;
    pf.revents = 0;
    if (poll(&pf, 1, ms) <= 0) return 0;
    return recv(fd, &b, 1, MSG_DONTWAIT) <= 0;
}

/* a connection to port from the source address src (host order), or -1
   when it did not open within 50 ms (a full accept queue drops the SYN) */
static int connect_from(uint32_t src, unsigned port)
{
    struct sockaddr_in a;
    struct pollfd pf;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
    socklen_t el = sizeof err;
    if (fd < 0) return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(src);
    if (src != INADDR_LOOPBACK && bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    pf.fd = fd;
    pf.events = POLLOUT;
    if ((connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) || poll(&pf, 1, 50) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void test_idle_flood(void)
{
    enum { IDLE = 256 };
    static int fds[IDLE];
    child tr, in;
    wsync_controller *c;
    wsync_error e;
    unsigned port, i, opened = 0, closed = 0;
    int64_t t0;
    TEST_BEGIN("256 idle connections opened before the real ranks: the ranks join, a step commits the trainer's "
               "bytes, every idle one is cut and logged with its address");
    c = ctl_open(KEY, 8000, &e);
    CHECK_MSG(c != NULL, "%s", e.message);
    if (!c) return;
    port = wsync_controller_port(c);
    for (i = 0; i < IDLE; i++) opened += (fds[i] = connect_to(port)) >= 0;
    CHECK_EQ_INT(opened, IDLE);
    CHECK(spawn(&tr, real_trainer, port, KEY));
    CHECK(spawn(&in, real_inference, port, KEY));
    t0 = raw_now_ms();
    CHECK_MSG(wsync_controller_accept(c, &e) == WSYNC_OK, "%s", e.message);
    printf("  the real ranks joined in %lld ms behind %d idle connections\n", (long long)(raw_now_ms() - t0), IDLE);
    CHECK_MSG(wsync_controller_step(c, 1, &e) == WSYNC_OK, "%s", e.message);
    /* every idle one: closed by the controller, refused and logged, before it closes */
    for (i = 0; i < IDLE; i++) closed += fds[i] >= 0 && closed_within(fds[i], 2000);
    CHECK_EQ_INT(closed, IDLE);
    CHECK_MSG(wsync_controller_refused(c, NULL, 0) == IDLE, "%u refused", wsync_controller_refused(c, NULL, 0));
    CHECK_MSG(logged("refused the connection from 127.0.0.1:", "") == IDLE, "%u logged", logged("refused the connection from 127.0.0.1:", ""));
    wsync_controller_close(c);
    for (i = 0; i < IDLE; i++)
        if (fds[i] >= 0) close(fds[i]);
    reap_says(&in, 8000, "inference version=1 checked=1 bad=0 end_bad=0");
    reap_says(&tr, 8000, "trainer steps=1 bye=1");
    TEST_END();
}

/* A flood: new connections from the source address in arg as fast as
   they open, for 2 s; each silent, or sending a HELLO as trainer rank 0
   or inference rank 0 in turn (a rogue without the key can send that).
   At most RING held; reports the count. */
typedef struct flood_arg {
    uint32_t src;
    int hello;
} flood_arg;

static void flooder(int wfd, unsigned port, const void *arg)
{
    enum { RING = 512 };
    const flood_arg *fa = (const flood_arg *)arg;
    static int ring[RING];
    unsigned n = 0, i;
    int64_t until = raw_now_ms() + 2000;
    for (i = 0; i < RING; i++) ring[i] = -1;
    while (raw_now_ms() < until) {
        int fd = connect_from(fa->src, port);
        if (fd < 0) continue;
        if (fa->hello) {
            wsync_ctl_msg h;
            uint8_t b[64];
            size_t len = 0;
            memset(&h, 0, sizeof h);
            h.type = WSYNC_CTL_HELLO;
            h.role = n % 2 ? WSYNC_CTL_TRAINER : WSYNC_CTL_INFERENCE;
            if (wsync_ctl_encode(&h, b, sizeof b, &len, NULL) == WSYNC_OK) (void)!send(fd, b, len, MSG_NOSIGNAL);
        }
        if (ring[n % RING] >= 0) close(ring[n % RING]);
        ring[n % RING] = fd;
        n++;
    }
    report(wfd, "flooded=%u", n);
}

static void test_flood_while_joining(void)
{
    /* (a flood of HELLOs from the ranks' own address can cut their
       handshakes: README, What is not protected) */
    static const struct {
        flood_arg fa;
        const char *what;
    } v[2] = {{{INADDR_LOOPBACK, 0}, "silent, from the ranks' own address"},
              {{INADDR_LOOPBACK + 1, 1}, "HELLOs as the real ranks, from another address"}};
    unsigned k;
    for (k = 0; k < 2; k++) {
        child fl, tr, in;
        wsync_controller *c;
        wsync_error e;
        unsigned port;
        wsync_result r;
        char name[200];
        unsigned refused;
        accept_job acc;
        pthread_t acc_th;
        int acc_on;
        snprintf(name, sizeof name, "a flood of new connections while the real ranks join (%s)", v[k].what);
        TEST_BEGIN(name);
        c = ctl_open(KEY, 8000, &e);
        CHECK_MSG(c != NULL, "%s", e.message);
        if (!c) return;
        port = wsync_controller_port(c);
        acc.c = c;
        acc.r = WSYNC_ERR_IO;
        acc_on = pthread_create(&acc_th, NULL, accept_main, &acc) == 0;
        CHECK(acc_on);
        CHECK(spawn(&fl, flooder, port, &v[k].fa));
        sleep_ms(300);
        CHECK(spawn(&tr, real_trainer, port, KEY));
        CHECK(spawn(&in, real_inference, port, KEY));
        if (acc_on) pthread_join(acc_th, NULL);
        r = acc.r;
        e = acc.e;
        CHECK_MSG(r == WSYNC_OK, "%s", e.message);
        if (r == WSYNC_OK) CHECK_MSG(wsync_controller_step(c, 1, &e) == WSYNC_OK, "%s", e.message);
        refused = wsync_controller_refused(c, NULL, 0);
        wsync_controller_close(c);
        {
            const char *line;
            reap_says(&in, 8000, "inference version=1 checked=1 bad=0 end_bad=0");
            reap_says(&tr, 8000, "trainer steps=1 bye=1");
            line = reap(&fl, 5000);
            /* the flood overflowed the handshake slots while the ranks joined */
            CHECK_MSG(has(line, "flooded=") && refused > 64 && refused <= (unsigned)atoi(line + 8), "%s, %u refused",
                      line, refused);
            printf("  %s connections, %u of them refused while the ranks joined\n", line, refused);
        }
        CHECK_MSG(logged(k ? "refused the connection from 127.0.0.2:" : "refused the connection from 127.0.0.1:",
                         "too many connections in their handshakes") > 0,
                  "%.300s", log_buf);
        /* the real ranks' handshakes (from 127.0.0.1) were never cut */
        CHECK_EQ_INT(logged("refused the connection from 127.0.0.1:", k ? "handshake cut" : "after its HELLO"), 0);
        CHECK_EQ_INT(logged("refused the connection from 127.0.0.1:", "no PROOF within"), 0);
        TEST_END();
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    unsetenv("WSYNC_JOB_KEY");
    unsetenv("WSYNC_JOB_KEY_FILE");
    test_key_sources();
    test_secure_default();
    test_rogue_ranks();
    test_replayed_done();
    test_rogue_controller();
    test_late_write();
    test_rank_without_key();
    test_deadline_logged();
    test_slow_handshakes();
    test_idle_flood();
    test_flood_while_joining();
    return check_summary();
}
