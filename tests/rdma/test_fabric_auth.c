/* Who may write through the TCP fabric (wsync_rdma.h, TCP AUTHENTICATION),
   with real sockets on 127.0.0.1: a rogue with no job key, with a wrong
   one, and with the region's key from a stolen descriptor, writes nothing;
   a receiver with another key is refused by the sender; a sender the
   window does not name, and a writer after the window closed (after the
   step's commit), are refused; 256 idle connections and a slow one do not
   keep the real sender out, nor does a flood of new connections with
   HELLOs from another address (127.0.0.2) cut its handshakes. Each
   refusal is counted and logged with the
   peer's address, and the region's bytes are checked unchanged. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#include "check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

#define LEN (1u << 20)

static const char KEY[] = "job key: 32 bytes of test secret";
static const char OTHER[] = "another job's key, 32 bytes long";

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The log hook: the lines the receiver wrote, joined. */
static char logbuf[1 << 16];
static void log_line(void *user, const char *line)
{
    size_t n = strlen(logbuf);
    (void)user;
    snprintf(logbuf + n, sizeof logbuf - n, "%s\n", line);
}

typedef struct rx {
    wsync_fabric f;
    wsync_fabric_mr *mr;
    wsync_fabric_desc d;
    uint8_t *mem;
    uint64_t dig;
} rx;

static int rx_open(rx *r, const char *key, unsigned max_pending)
{
    wsync_fabric_tcp_options o;
    wsync_error e;
    memset(&o, 0, sizeof o);
    o.timeout_ms = 2000;
    o.job_key = key;
    o.job_key_len = key ? strlen(key) : 0;
    o.sender_id = UINT32_MAX;
    o.max_unauthenticated = max_pending;
    o.log = log_line;
    r->mem = (uint8_t *)malloc(LEN);
    memset(r->mem, 0x11, LEN);
    r->dig = wsync_digest(r->mem, LEN);
    if (wsync_fabric_tcp_open(&o, &r->f, &e) != WSYNC_OK ||
        r->f.reg(r->f.user, r->mem, LEN, WSYNC_MEM_HOST, &r->mr, &r->d, &e) != WSYNC_OK) {
        printf("  receiver: %s\n", e.message);
        return 0;
    }
    return 1;
}

static void rx_close(rx *r)
{
    wsync_fabric_close(&r->f);
    free(r->mem);
}

static uint64_t rejected(const rx *r, char *last, size_t cap)
{
    wsync_fabric_stats st;
    wsync_fabric_stats_get(&r->f, &st);
    if (last) snprintf(last, cap, "%s", st.last_reject);
    return st.rejected;
}

static wsync_fabric_stats stats(const rx *r)
{
    wsync_fabric_stats st;
    memset(&st, 0, sizeof st);
    wsync_fabric_stats_get(&r->f, &st);
    return st;
}

/* A sender's fabric with this key and id, its source "INJECTED..." (or
   the given byte), opened to r's region: 0 on success, else the error. */
typedef struct tx {
    wsync_fabric f;
    wsync_fabric_mr *mr;
    wsync_fabric_remote *rem;
    uint8_t src[4096];
} tx;

static wsync_result tx_open(tx *t, const rx *r, const char *key, uint32_t id, wsync_error *e)
{
    wsync_fabric_tcp_options o;
    wsync_fabric_desc unused;
    wsync_result res;
    memset(&o, 0, sizeof o);
    o.send_only = 1;
    o.timeout_ms = 2000;
    o.job_key = key;
    o.job_key_len = key ? strlen(key) : 0;
    o.sender_id = id;
    memset(t->src, 'I', sizeof t->src);
    memcpy(t->src, "INJECTED", 8);
    t->rem = NULL;
    if ((res = wsync_fabric_tcp_open(&o, &t->f, e)) != WSYNC_OK) return res;
    if ((res = t->f.reg(t->f.user, t->src, sizeof t->src, WSYNC_MEM_HOST, &t->mr, &unused, e)) != WSYNC_OK) return res;
    return t->f.open_remote(t->f.user, &r->d, &t->rem, e);
}

static wsync_result tx_write(tx *t, uint64_t off, wsync_error *e)
{
    wsync_result res = t->f.write(t->f.user, t->mr, 0, t->rem, off, sizeof t->src, e);
    return res != WSYNC_OK ? res : t->f.flush(t->f.user, e);
}

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

/* 1 when the peer closed fd within ms (a read returns 0 or an error). */
static int closed_within(int fd, int ms)
{
    struct pollfd pf;
    char c;
    pf.fd = fd;
    pf.events = POLLIN;
    pf.revents = 0;
    if (poll(&pf, 1, ms) <= 0) return 0;
    return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

static void test_rogues(void)
{
    rx r;
    tx t;
    wsync_error e;
    char last[256];
    uint64_t before;
    int k;
    const char *names[3] = {"no job key", "another job's key", "the right key"};
    const char *keys[3] = {NULL, OTHER, KEY};
    TEST_BEGIN("TCP fabric: a rogue with no key or a wrong one (and the descriptor) cannot write; the real one can");
    CHECK(rx_open(&r, KEY, 0));
    for (k = 0; k < 3; k++) {
        before = rejected(&r, NULL, 0);
        logbuf[0] = 0;
        memset(&t, 0, sizeof t);
        if (k < 2) {
            wsync_result res = tx_open(&t, &r, keys[k], 0, &e);
            CHECK_MSG(res == WSYNC_ERR_IO && strstr(e.message, "did not prove the job key"), "%s: %d %s", names[k],
                      (int)res, e.message);
            if (t.rem) CHECK(tx_write(&t, 0, &e) != WSYNC_OK);
            wsync_fabric_close(&t.f);
            {
                int64_t t0 = now_ms(); /* the receiver logs it when the rogue hangs up (or at its deadline) */
                while (rejected(&r, NULL, 0) == before && now_ms() - t0 < 3000) poll(NULL, 0, 5);
            }
            CHECK_MSG(rejected(&r, last, sizeof last) == before + 1, "%s: not counted", names[k]);
            CHECK_MSG(strstr(last, "127.0.0.1:") && strstr(last, "proof"), "%s: %s", names[k], last);
            CHECK_MSG(strstr(logbuf, "127.0.0.1:") != NULL, "%s: the log hook got: %s", names[k], logbuf);
            printf("  %s: sender: %s\n  %s: receiver: %s\n", names[k], e.message, names[k], last);
            CHECK_MSG(wsync_digest(r.mem, LEN) == r.dig, "%s: the region changed", names[k]);
        } else {
            CHECK_EQ_INT(tx_open(&t, &r, keys[k], 0, &e), WSYNC_OK);
            CHECK_EQ_INT(tx_write(&t, 100, &e), WSYNC_OK);
            CHECK(memcmp(r.mem + 100, "INJECTED", 8) == 0 && r.mem[99] == 0x11);
            CHECK_EQ_INT(rejected(&r, NULL, 0), before);
            wsync_fabric_close(&t.f);
        }
    }
    /* a raw rogue that skips checking the receiver's proof and sends a made-up one */
    {
        uint8_t hello[WSYNC__TH_HELLO_LEN], chal[WSYNC__TH_CHAL_LEN], proof[WSYNC__TH_PROOF_LEN], done[16];
        int fd = raw_connect(wsync_fabric_tcp_port(&r.f));
        memset(r.mem, 0x11, LEN);
        before = rejected(&r, NULL, 0);
        memset(hello, 0, sizeof hello);
        wsync__rdma_put32(hello, WSYNC__TH_HELLO);
        wsync__rdma_put32(hello + 4, 1);
        wsync__rdma_put32(hello + 8, r.mr->id);
        wsync__rdma_put32(hello + 12, 0);
        memset(proof, 0x42, sizeof proof);
        wsync__rdma_put32(proof, WSYNC__TH_PROOF);
        wsync__rdma_put32(proof + 4, 0);
        CHECK(fd >= 0 && send(fd, hello, sizeof hello, 0) == (ssize_t)sizeof hello);
        CHECK(recv(fd, chal, sizeof chal, MSG_WAITALL) == (ssize_t)sizeof chal);
        CHECK(send(fd, proof, sizeof proof, 0) == (ssize_t)sizeof proof);
        CHECK(recv(fd, done, sizeof done, MSG_WAITALL) == (ssize_t)sizeof done);
        CHECK_EQ_INT(wsync__rdma_get32(done + 4), WSYNC__REJ_AUTH);
        CHECK(closed_within(fd, 2000));
        close(fd);
        CHECK_EQ_INT(rejected(&r, last, sizeof last), before + 1);
        CHECK_MSG(strstr(last, "127.0.0.1:") && strstr(last, "authentication failed"), "%s", last);
        printf("  a made-up proof: receiver: %s\n", last);
        CHECK(wsync_digest(r.mem, LEN) == r.dig);
    }
    rx_close(&r);
    TEST_END();

    TEST_BEGIN("TCP fabric: a sender with the key refuses a receiver with another key (or none)");
    CHECK(rx_open(&r, OTHER, 0));
    memset(&t, 0, sizeof t);
    CHECK_EQ_INT(tx_open(&t, &r, KEY, 0, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "did not prove the job key") != NULL, "%s", e.message);
    wsync_fabric_close(&t.f);
    rx_close(&r);
    CHECK(rx_open(&r, NULL, 0));
    memset(&t, 0, sizeof t);
    CHECK_EQ_INT(tx_open(&t, &r, KEY, 0, &e), WSYNC_ERR_IO);
    wsync_fabric_close(&t.f);
    CHECK(wsync_digest(r.mem, LEN) == r.dig);
    rx_close(&r);
    TEST_END();
}

static void test_window(void)
{
    rx r;
    tx a, b;
    wsync_error e;
    char last[256];
    uint32_t planned[2] = {7, 3};
    uint64_t before;
    TEST_BEGIN("TCP fabric: the write window: only the planned senders, only between a step's start and commit");
    CHECK(rx_open(&r, KEY, 0));
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    CHECK_EQ_INT(wsync_fabric_window_close(&r.f, 0, &e), WSYNC_OK); /* starts closed */
    CHECK_EQ_INT(tx_open(&a, &r, KEY, 3, &e), WSYNC_OK);            /* connecting is fine... */
    before = rejected(&r, NULL, 0);
    CHECK_EQ_INT(tx_write(&a, 0, &e), WSYNC_ERR_IO); /* ...writing before the step is not */
    CHECK_MSG(strstr(e.message, "outside the write window") != NULL, "%s", e.message);
    CHECK(wsync_digest(r.mem, LEN) == r.dig);
    CHECK_EQ_INT(rejected(&r, last, sizeof last), before + 1);
    CHECK_MSG(strstr(last, "127.0.0.1:") && strstr(last, "sender 3"), "%s", last);
    wsync_fabric_close(&a.f);
    /* step 1: senders 7 and 3 */
    CHECK_EQ_INT(wsync_fabric_window_open(&r.f, 1, planned, 2, &e), WSYNC_OK);
    memset(&a, 0, sizeof a);
    CHECK_EQ_INT(tx_open(&a, &r, KEY, 3, &e), WSYNC_OK);
    CHECK_EQ_INT(tx_open(&b, &r, KEY, 5, &e), WSYNC_OK); /* has the key, not in the plan */
    CHECK_EQ_INT(tx_write(&a, 4096, &e), WSYNC_OK);
    CHECK(memcmp(r.mem + 4096, "INJECTED", 8) == 0);
    memset(r.mem, 0x11, LEN);
    before = rejected(&r, NULL, 0);
    CHECK_EQ_INT(tx_write(&b, 0, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "outside the write window") != NULL, "%s", e.message);
    CHECK(wsync_digest(r.mem, LEN) == r.dig);
    CHECK_EQ_INT(rejected(&r, last, sizeof last), before + 1);
    CHECK_MSG(strstr(last, "sender 5"), "%s", last);
    printf("  unplanned sender: %s\n", last);
    /* the step commits: the window closes; the planned sender writes again ("INJECTED" after COMMIT) */
    CHECK_EQ_INT(wsync_fabric_window_close(&r.f, 1, &e), WSYNC_OK);
    before = rejected(&r, NULL, 0);
    CHECK_EQ_INT(tx_write(&a, 0, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "outside the write window") != NULL, "%s", e.message);
    CHECK_MSG(wsync_digest(r.mem, LEN) == r.dig, "%s", "bytes written after the commit");
    CHECK_EQ_INT(rejected(&r, last, sizeof last), before + 1);
    CHECK_MSG(strstr(last, "127.0.0.1:") && strstr(last, "sender 3"), "%s", last);
    printf("  after commit: %s\n", last);
    wsync_fabric_close(&a.f);
    wsync_fabric_close(&b.f);
    /* the next step opens again for the same sender, on a new connection */
    CHECK_EQ_INT(wsync_fabric_window_open(&r.f, 2, planned, 2, &e), WSYNC_OK);
    memset(&a, 0, sizeof a);
    CHECK_EQ_INT(tx_open(&a, &r, KEY, 7, &e), WSYNC_OK);
    CHECK_EQ_INT(tx_write(&a, 8, &e), WSYNC_OK);
    CHECK(memcmp(r.mem + 8, "INJECTED", 8) == 0);
    wsync_fabric_close(&a.f);
    /* arguments; and the fabrics whose writes are one-sided say they cannot enforce it */
    CHECK_EQ_INT(wsync_fabric_window_open(&r.f, 3, NULL, 2, &e), WSYNC_ERR_INVALID_ARGUMENT);
    rx_close(&r);
    {
        wsync_fabric h;
        wsync_fabric_host_options ho;
        memset(&ho, 0, sizeof ho);
        CHECK_EQ_INT(wsync_fabric_host_open(&ho, &h, &e), WSYNC_OK);
        CHECK_EQ_INT(wsync_fabric_window_open(&h, 1, planned, 2, &e), WSYNC_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(e.message, "one-sided") != NULL, "%s", e.message);
        CHECK_EQ_INT(wsync_fabric_auth_set(&h, KEY, strlen(KEY), 1, &e), WSYNC_OK);
        wsync_fabric_close(&h);
    }
    TEST_END();
}

static void test_idle(void)
{
    enum { IDLE = 256 };
    static int fds[IDLE];
    rx r;
    tx t;
    wsync_error e;
    char last[256];
    unsigned port;
    int i, closed = 0, fd;
    int64_t t0;
    TEST_BEGIN("TCP fabric: 256 idle connections and a slow one do not keep the real sender out; all are closed");
    CHECK(rx_open(&r, KEY, 0));
    port = wsync_fabric_tcp_port(&r.f);
    logbuf[0] = 0;
    for (i = 0; i < IDLE; i++) {
        fds[i] = raw_connect(port);
        CHECK(fds[i] >= 0);
    }
    poll(NULL, 0, 100); /* the receiver has accepted them */
    t0 = now_ms();
    memset(&t, 0, sizeof t);
    CHECK_EQ_INT(tx_open(&t, &r, KEY, 0, &e), WSYNC_OK);
    CHECK_EQ_INT(tx_write(&t, 0, &e), WSYNC_OK);
    CHECK(memcmp(r.mem, "INJECTED", 8) == 0);
    printf("  the real sender opened and wrote in %lld ms with %d idle connections\n", (long long)(now_ms() - t0),
           IDLE);
    /* and still while they are held: a second real connection */
    wsync_fabric_close(&t.f);
    memset(&t, 0, sizeof t);
    CHECK_EQ_INT(tx_open(&t, &r, KEY, 0, &e), WSYNC_OK);
    CHECK_EQ_INT(tx_write(&t, 8192, &e), WSYNC_OK);
    /* a slow handshake: one byte every 300 ms is cut at the 1 s deadline */
    fd = raw_connect(port);
    t0 = now_ms();
    for (i = 0; i < 10 && !closed_within(fd, 0); i++) {
        if (send(fd, "W", 1, MSG_NOSIGNAL) != 1) break;
        poll(NULL, 0, 300);
    }
    CHECK(closed_within(fd, 2000));
    CHECK_MSG(now_ms() - t0 < 2000, "a slow handshake held %lld ms", (long long)(now_ms() - t0));
    close(fd);
    /* every idle one is closed by its deadline (or by newer ones), none is left holding a slot */
    for (i = 0; i < IDLE; i++) closed += closed_within(fds[i], 2000);
    CHECK_EQ_INT(closed, IDLE);
    for (i = 0; i < IDLE; i++) close(fds[i]);
    /* each idle one and the slow one refused once: closed for a newer one
       (by the acceptor) or cut at its deadline, never both, nor also
       counted as dropped; the real sender's two connections not at all */
    t0 = now_ms();
    while (rejected(&r, NULL, 0) < IDLE + 1 && now_ms() - t0 < 3000) poll(NULL, 0, 10);
    poll(NULL, 0, 200);
    CHECK_EQ_INT(stats(&r).connections, IDLE + 3);
    CHECK_EQ_INT(rejected(&r, last, sizeof last), IDLE + 1);
    CHECK_EQ_INT(stats(&r).dropped, 0);
    CHECK_MSG(strstr(logbuf, "127.0.0.1:") && strstr(logbuf, "closed before authenticating") &&
                  strstr(logbuf, "no complete handshake within 1000 ms"),
              "%.400s", logbuf);
    printf("  e.g. %s\n", last);
    /* the real sender's connection outlived them all */
    CHECK_EQ_INT(tx_write(&t, 16384, &e), WSYNC_OK);
    CHECK(memcmp(r.mem + 16384, "INJECTED", 8) == 0);
    wsync_fabric_close(&t.f);
    rx_close(&r);
    TEST_END();
}

/* A connection to port from source address src (host order), or -1 when
   it did not open within 50 ms (a full accept queue drops the SYN). */
static int connect_from(uint32_t src, unsigned port)
{
    struct sockaddr_in sa;
    struct pollfd pf;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
    socklen_t el = sizeof err;
    if (fd < 0) return -1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(src);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    pf.fd = fd;
    pf.events = POLLOUT;
    if ((connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) || poll(&pf, 1, 50) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* In a child: for ms, new connections from 127.0.0.2 as fast as they
   open, each sending a HELLO that claims sender 0 and the region (what a
   rogue without the key can send); exits with the count / 256. */
static void flood(unsigned port, uint32_t region, int ms)
{
    enum { RING = 512 };
    static int ring[RING];
    unsigned n = 0, i;
    int64_t until = now_ms() + ms;
    uint8_t hello[WSYNC__TH_HELLO_LEN];
    memset(hello, 0, sizeof hello);
    wsync__rdma_put32(hello, WSYNC__TH_HELLO);
    wsync__rdma_put32(hello + 4, 1);
    wsync__rdma_put32(hello + 8, region);
    for (i = 0; i < RING; i++) ring[i] = -1;
    while (now_ms() < until) {
        int fd = connect_from(INADDR_LOOPBACK + 1, port);
        if (fd < 0) continue;
        (void)!send(fd, hello, sizeof hello, MSG_NOSIGNAL);
        if (ring[n % RING] >= 0) close(ring[n % RING]);
        ring[n % RING] = fd;
        n++;
    }
    _exit((int)(n / 256 > 255 ? 255 : n / 256));
}

static void test_flood(void)
{
    rx r;
    tx t;
    wsync_error e;
    pid_t pid;
    int status = 0, k, ok = 0;
    uint64_t before, before_conns, flood_conns;
    int64_t t0;
    TEST_BEGIN("TCP fabric: a flood of new connections from another host, each with a HELLO, does not cut the real "
               "sender's handshakes");
    CHECK(rx_open(&r, KEY, 0));
    logbuf[0] = 0;
    before = rejected(&r, NULL, 0);
    before_conns = stats(&r).connections;
    fflush(stdout);
    pid = fork();
    if (pid == 0) flood(wsync_fabric_tcp_port(&r.f), r.mr->id, 2000);
    CHECK(pid > 0);
    poll(NULL, 0, 200); /* the flood is under way */
    t0 = now_ms();
    for (k = 0; k < 10 && now_ms() - t0 < 1500; k++) { /* new connections, each a handshake, during the flood */
        memset(&t, 0, sizeof t);
        if (tx_open(&t, &r, KEY, 0, &e) == WSYNC_OK && tx_write(&t, 4096 * (uint64_t)k, &e) == WSYNC_OK &&
            memcmp(r.mem + 4096 * (uint64_t)k, "INJECTED", 8) == 0)
            ok++;
        else
            printf("  handshake %d: %s\n", k, e.message);
        wsync_fabric_close(&t.f);
    }
    CHECK_EQ_INT(ok, k);
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    printf("  %d handshakes of the real sender, all through, during a flood of about %d connections (%llu refused)\n",
           k, WEXITSTATUS(status) * 256, (unsigned long long)(rejected(&r, NULL, 0) - before));
    CHECK(rejected(&r, NULL, 0) - before > 32); /* the flood overflowed the pending slots */
    /* every flood connection the receiver accepted is refused exactly once
       (closed for a newer one, hung up, or cut at its deadline: all within
       the 1 s handshake deadline once the flood stopped) */
    t0 = now_ms();
    do {
        poll(NULL, 0, 100);
        flood_conns = stats(&r).connections - before_conns - (uint64_t)k;
    } while (rejected(&r, NULL, 0) - before < flood_conns && now_ms() - t0 < 5000);
    poll(NULL, 0, 300);
    flood_conns = stats(&r).connections - before_conns - (uint64_t)k;
    CHECK_MSG(rejected(&r, NULL, 0) - before == flood_conns, "%llu refused, %llu flood connections accepted",
              (unsigned long long)(rejected(&r, NULL, 0) - before), (unsigned long long)flood_conns);
    CHECK(strstr(logbuf, "127.0.0.2:") != NULL);
    rx_close(&r);
    TEST_END();
}

static void test_self(void)
{
    rx r;
    wsync_fabric_remote *rem = NULL;
    wsync_fabric_mr *smr;
    wsync_fabric_desc sd;
    wsync_error e;
    static uint8_t src[256];
    int64_t t0 = now_ms();
    TEST_BEGIN("TCP fabric: one fabric writes into its own region (its receiver thread is the handshake's other end)");
    CHECK(rx_open(&r, KEY, 0));
    CHECK_EQ_INT(wsync_fabric_auth_set(&r.f, KEY, strlen(KEY), 9, &e), WSYNC_OK);
    memset(src, 0x77, sizeof src);
    CHECK_EQ_INT(r.f.reg(r.f.user, src, sizeof src, WSYNC_MEM_HOST, &smr, &sd, &e), WSYNC_OK);
    CHECK_EQ_INT(r.f.open_remote(r.f.user, &r.d, &rem, &e), WSYNC_OK);
    CHECK_EQ_INT(r.f.write(r.f.user, smr, 0, rem, 64, sizeof src, &e), WSYNC_OK);
    CHECK_EQ_INT(r.f.flush(r.f.user, &e), WSYNC_OK);
    CHECK(r.mem[64] == 0x77 && r.mem[64 + sizeof src - 1] == 0x77 && r.mem[63] == 0x11);
    CHECK_MSG(now_ms() - t0 < 1500, "took %lld ms", (long long)(now_ms() - t0));
    CHECK_EQ_INT(wsync_fabric_auth_set(&r.f, KEY, 2000, 9, &e), WSYNC_ERR_INVALID_ARGUMENT);
    rx_close(&r);
    TEST_END();
}

static void test_poly1305(void)
{
    /* RFC 8439 2.5.2, and A.3's vectors 1 (zero key) and 2 */
    static const uint8_t k1[32] = {0x85, 0xd6, 0xbe, 0x78, 0x57, 0x55, 0x6d, 0x33, 0x7f, 0x44, 0x52,
                                   0xfe, 0x42, 0xd5, 0x06, 0xa8, 0x01, 0x03, 0x80, 0x8a, 0xfb, 0x0d,
                                   0xb2, 0xfd, 0x4a, 0xbf, 0xf6, 0xaf, 0x41, 0x49, 0xf5, 0x1b};
    static const uint8_t t1[16] = {0xa8, 0x06, 0x1d, 0xc1, 0x30, 0x51, 0x36, 0xc6,
                                   0xc2, 0x2b, 0x8b, 0xaf, 0x0c, 0x01, 0x27, 0xa9};
    static const uint8_t t2[16] = {0x36, 0xe5, 0xf6, 0xb5, 0xc5, 0xe0, 0x60, 0x70,
                                   0xf0, 0xef, 0xca, 0x96, 0x22, 0x7a, 0x86, 0x3e};
    const char *m1 = "Cryptographic Forum Research Group";
    const char *m2 = "Any submission to the IETF intended by the Contributor for publication as all or part of an "
                     "IETF Internet-Draft or RFC and any statement made within the context of an IETF activity "
                     "is considered an \"IETF Contribution\". Such statements include oral statements in IETF "
                     "sessions, as well as written and electronic communications made at any time or place, "
                     "which are addressed to";
    uint8_t k2[32], tag[16], zero[64];
    wsync__poly p;
    size_t cut;
    TEST_BEGIN("Poly1305 (the TCP fabric's data tag): RFC 8439's vectors, whole and in pieces");
    for (cut = 0; cut <= strlen(m1); cut += 5) {
        wsync__poly_init(&p, k1);
        wsync__poly_update(&p, (const uint8_t *)m1, cut);
        wsync__poly_update(&p, (const uint8_t *)m1 + cut, strlen(m1) - cut);
        wsync__poly_final(&p, tag);
        CHECK_MSG(memcmp(tag, t1, 16) == 0, "cut at %u", (unsigned)cut);
    }
    memset(zero, 0, sizeof zero);
    wsync__poly_init(&p, zero);
    wsync__poly_update(&p, zero, 64);
    wsync__poly_final(&p, tag);
    CHECK(memcmp(tag, zero, 16) == 0);
    memset(k2, 0, 16);
    memcpy(k2 + 16, "\x36\xe5\xf6\xb5\xc5\xe0\x60\x70\xf0\xef\xca\x96\x22\x7a\x86\x3e", 16);
    wsync__poly_init(&p, k2);
    wsync__poly_update(&p, (const uint8_t *)m2, strlen(m2));
    wsync__poly_final(&p, tag);
    CHECK(memcmp(tag, t2, 16) == 0);
    TEST_END();
}

int main(void)
{
    int64_t t0 = now_ms();
    signal(SIGPIPE, SIG_IGN);
    test_poly1305();
    test_rogues();
    test_window();
    test_idle();
    test_flood();
    test_self();
    printf("test_fabric_auth: %.1f s\n", (double)(now_ms() - t0) / 1000);
    return check_summary();
}
