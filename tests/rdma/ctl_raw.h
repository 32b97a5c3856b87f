/* ctl_raw.h - the controller protocol by hand, for tests that play a rank
   or a controller themselves (tests/rdma/test_ctl.c, tests/rdma/test_ctl_auth.c):
   the handshake (HELLO, CHALLENGE, PROOF) and frames with their MACs,
   built from the public codec (wsync_ctl_encode, wsync_ctl_auth_derive,
   wsync_ctl_frame_mac). Include after wsync_rdma.h and the socket headers. */
#ifndef WSYNC_TESTS_CTL_RAW_H
#define WSYNC_TESTS_CTL_RAW_H

#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct rawsess {
    wsync_ctl_auth au;
    uint64_t tx, rx;           /* sequence numbers */
    int ctl;                   /* 1: this side plays the controller */
} rawsess;

static int64_t raw_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* n bytes within ms; 1 when they came */
static int raw_read(int fd, uint8_t *buf, size_t n, int ms)
{
    size_t got = 0;
    int64_t until = raw_now_ms() + ms;
    while (got < n) {
        struct pollfd pf;
        ssize_t k;
        int64_t left = until - raw_now_ms();
        if (left <= 0) return 0;
        pf.fd = fd;
        pf.events = POLLIN;
        if (poll(&pf, 1, (int)left) <= 0) return 0;
        k = recv(fd, buf + got, n - got, 0);
        if (k <= 0) return 0;
        got += (size_t)k;
    }
    return 1;
}

/* One frame (its MAC after it when s is given); 1 when sent. */
static int raw_send(int fd, rawsess *s, const wsync_ctl_msg *m)
{
    uint8_t buf[1 << 16];
    size_t len = 0;
    wsync_error e;
    if (wsync_ctl_encode(m, buf, sizeof buf - WSYNC_CTL_MAC, &len, &e) != WSYNC_OK) return 0;
    if (s) wsync_ctl_frame_mac(s->ctl ? s->au.to_rank : s->au.to_ctl, s->tx++, buf, len, buf + len);
    len += s ? WSYNC_CTL_MAC : 0;
    return send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len;
}

/* One frame within ms, its MAC checked when s is given; 1 and *out
   decoded, 0 (nothing to free) otherwise. */
static int raw_recv(int fd, rawsess *s, wsync_ctl_msg *out, int ms)
{
    uint8_t buf[1 << 16];
    uint8_t mac[WSYNC_CTL_MAC], want[WSYNC_CTL_MAC];
    uint32_t type = 0, pl = 0;
    wsync_error e;
    if (!raw_read(fd, buf, WSYNC_CTL_HEADER, ms) ||
        wsync_ctl_header(buf, WSYNC_CTL_HEADER, &type, &pl, &e) != WSYNC_OK ||
        pl > sizeof buf - WSYNC_CTL_HEADER || (pl && !raw_read(fd, buf + WSYNC_CTL_HEADER, pl, ms)))
        return 0;
    if (s) {
        if (!raw_read(fd, mac, sizeof mac, ms)) return 0;
        wsync_ctl_frame_mac(s->ctl ? s->au.to_ctl : s->au.to_rank, s->rx++, buf, WSYNC_CTL_HEADER + pl, want);
        if (memcmp(mac, want, sizeof mac) != 0) return 0;
    }
    return wsync_ctl_decode(type, buf + WSYNC_CTL_HEADER, pl, NULL, out, &e) == WSYNC_OK;
}

/* A rank's side of the handshake under key (NULL: none): 1 when the
   controller proved the key and the PROOF went out (s then authenticates
   the frames); 0 otherwise. check 0: the controller's proof is not
   checked (a rogue rank that goes on regardless). */
static int raw_hello(int fd, uint32_t role, uint32_t rank, const wsync_job_key *key, rawsess *s, int check)
{
    wsync_ctl_msg h, c;
    memset(&h, 0, sizeof h);
    memset(s, 0, sizeof *s);
    h.type = WSYNC_CTL_HELLO;
    h.role = role;
    h.rank = rank;
    if (wsync_random_bytes(h.nonce, sizeof h.nonce) != WSYNC_OK || !raw_send(fd, NULL, &h) ||
        !raw_recv(fd, NULL, &c, 3000))
        return 0;
    if (c.type != WSYNC_CTL_CHALLENGE) {
        wsync_ctl_msg_free(&c);
        return 0;
    }
    wsync_ctl_auth_derive(key, role, rank, h.nonce, c.nonce, &s->au);
    if (check && memcmp(c.mac, s->au.ctl_proof, WSYNC_CTL_MAC) != 0) return 0;
    memset(&h, 0, sizeof h);
    h.type = WSYNC_CTL_PROOF;
    memcpy(h.mac, s->au.rank_proof, WSYNC_CTL_MAC);
    return raw_send(fd, NULL, &h);
}

/* A controller's side under key (NULL: none): reads HELLO (its role and
   rank in *role, *rank), sends CHALLENGE; 1 when the rank's PROOF holds
   (check 0: whatever it is, or none within 500 ms). */
static int raw_challenge(int fd, const wsync_job_key *key, rawsess *s, uint32_t *role, uint32_t *rank, int check)
{
    wsync_ctl_msg h, c;
    memset(s, 0, sizeof *s);
    s->ctl = 1;
    if (!raw_recv(fd, NULL, &h, 3000)) return 0;
    if (h.type != WSYNC_CTL_HELLO) {
        wsync_ctl_msg_free(&h);
        return 0;
    }
    *role = h.role;
    *rank = h.rank;
    memset(&c, 0, sizeof c);
    c.type = WSYNC_CTL_CHALLENGE;
    if (wsync_random_bytes(c.nonce, sizeof c.nonce) != WSYNC_OK) return 0;
    wsync_ctl_auth_derive(key, h.role, h.rank, h.nonce, c.nonce, &s->au);
    memcpy(c.mac, s->au.ctl_proof, WSYNC_CTL_MAC);
    if (!raw_send(fd, NULL, &c)) return 0;
    if (!raw_recv(fd, NULL, &h, check ? 3000 : 500)) return !check;
    if (h.type != WSYNC_CTL_PROOF) {
        wsync_ctl_msg_free(&h);
        return 0;
    }
    return !check || memcmp(h.mac, s->au.rank_proof, WSYNC_CTL_MAC) == 0;
}

#endif
