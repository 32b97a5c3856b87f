/* The ibverbs backend of wsync_rdma.h against tests/rdma/fake_verbs.h (no NIC
   here): device selection, descriptors, the handshake (and hostile ones,
   from both sides), writes bit-exact over RoCE and InfiniBand ports,
   splitting by max message size and across two NICs, write_imm ordering,
   selective signaling with a full send queue (back-pressure, ENOMEM),
   error completions breaking a remote, timeouts, dereg, cleanup of every
   verbs object. Also the real libibverbs table on this machine. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#include "check.h"

#if WSYNC_RDMA_AVAILABLE
#include "fake_verbs.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    size_t i;
    for (i = 0; i < n; i++) p[i] = (uint8_t)(mix(seed * 0x1000003ull + i / 8) >> (8 * (i % 8)));
}

/* ---- fabrics over the fake ---- */

static fv_world *W;
static wsync_verbs_ops OPS;

typedef struct fopts {
    const char *devices;
    int send_only;
    unsigned sq_depth, signal_every, timeout_ms, max_wr, split_min, rq_depth;
} fopts;

static wsync_result vopen(const fopts *fo, wsync_fabric *f, wsync_error *e)
{
    wsync_fabric_verbs_options o;
    memset(&o, 0, sizeof o);
    o.ops = &OPS;
    if (fo) {
        o.devices = fo->devices;
        o.send_only = fo->send_only;
        o.sq_depth = fo->sq_depth;
        o.signal_every = fo->signal_every;
        o.timeout_ms = fo->timeout_ms;
        o.max_wr_bytes = fo->max_wr;
        o.split_min = fo->split_min;
        o.rq_depth = fo->rq_depth;
    }
    if (!o.timeout_ms) o.timeout_ms = 3000;
    o.connect_timeout_ms = 1000;
    return wsync_fabric_verbs_open(&o, f, e);
}

/* A receiver fabric with one region of n bytes, and a sender with a
   source of n bytes and the region opened. */
typedef struct pair {
    wsync_fabric rx, tx;
    uint8_t *dst, *src;
    size_t n;
    wsync_fabric_mr *rmr, *smr;
    wsync_fabric_desc desc;
    wsync_fabric_remote *rem;
} pair;

static wsync_error LASTE; /* why the last pair_open failed */

static int pair_open(pair *p, size_t n, const fopts *rxo, const fopts *txo)
{
    wsync_error e;
    wsync_fabric_desc unused, d2;
    uint8_t wire[WSYNC_FABRIC_DESC_WIRE];
    fopts so;
    memset(p, 0, sizeof *p);
    p->n = n;
    p->dst = (uint8_t *)calloc(1, n);
    p->src = (uint8_t *)malloc(n);
    fill(p->src, n, 1);
    if (vopen(rxo, &p->rx, &e) != WSYNC_OK) {
        LASTE = e;
        return -1;
    }
    so = *txo;
    so.send_only = 1;
    if (vopen(&so, &p->tx, &e) != WSYNC_OK) {
        LASTE = e;
        return -1;
    }
    if (p->rx.reg(p->rx.user, p->dst, n, WSYNC_MEM_HOST, &p->rmr, &p->desc, &e) != WSYNC_OK ||
        p->tx.reg(p->tx.user, p->src, n, WSYNC_MEM_HOST, &p->smr, &unused, &e) != WSYNC_OK) {
        LASTE = e;
        return -1;
    }
    wsync_fabric_desc_encode(&p->desc, wire);
    if (wsync_fabric_desc_decode(wire, sizeof wire, &d2, &e) != WSYNC_OK) {
        LASTE = e;
        return -1;
    }
    if (p->tx.open_remote(p->tx.user, &d2, &p->rem, &e) != WSYNC_OK) {
        LASTE = e;
        return -1;
    }
    return 0;
}

static void pair_close(pair *p)
{
    wsync_fabric_close(&p->tx);
    wsync_fabric_close(&p->rx);
    free(p->dst);
    free(p->src);
}

static fv_world *world(void)
{
    W = fv_new();
    OPS = fv_ops(W);
    return W;
}

static void world_end(void)
{
    CHECK_MSG(fv_live(W) == 0, "%ld verbs objects left", fv_live(W));
    fv_free(W);
    W = NULL;
}

/* ---- tests ---- */

static void test_real_libibverbs(void)
{
    wsync_fabric f;
    wsync_error e;
    wsync_result r;
    TEST_BEGIN("real libibverbs table: no devices here, a clean error");
    r = wsync_fabric_verbs_open(NULL, &f, &e);
    CHECK_EQ_INT(r, WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "no RDMA devices") || strstr(e.message, "libibverbs not found") ||
                  strstr(e.message, "no active port"),
              "%s", e.message);
    CHECK(f.user == NULL);
    TEST_END();
}

static void test_devices(void)
{
    wsync_fabric f;
    wsync_error e;
    wsync_fabric_verbs_stats st;
    fopts o;
    fv_dev *d0, *d1;
    memset(&o, 0, sizeof o);

    TEST_BEGIN("verbs devices: none, list failure");
    world();
    CHECK_EQ_INT(vopen(NULL, &f, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "no RDMA devices") != NULL, "%s", e.message);
    W->fail_device_list = 1;
    CHECK_EQ_INT(vopen(NULL, &f, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "no RDMA devices") && strstr(e.message, "ibv_get_device_list"), "%s", e.message);
    world_end();
    TEST_END();

    TEST_BEGIN("verbs devices: default first active port, named, all, inactive, failing");
    world();
    d0 = fv_add_dev(W, "mlx5_0", 2, IBV_LINK_LAYER_INFINIBAND);
    d1 = fv_add_dev(W, "mlx5_1", 1, IBV_LINK_LAYER_ETHERNET);
    d0->port[0].state = IBV_PORT_DOWN;
    CHECK_EQ_INT(vopen(NULL, &f, &e), WSYNC_OK);
    CHECK(wsync_fabric_verbs_stats_get(&f, &st) == 1);
    CHECK_EQ_INT(st.n_nics, 1);
    CHECK_EQ_STR(st.nic[0].name, "mlx5_0:2");
    wsync_fabric_close(&f);
    o.devices = "all";
    CHECK_EQ_INT(vopen(&o, &f, &e), WSYNC_OK);
    CHECK(wsync_fabric_verbs_stats_get(&f, &st) == 1);
    CHECK_EQ_INT(st.n_nics, 2);
    CHECK_EQ_STR(st.nic[1].name, "mlx5_1:1");
    CHECK_EQ_INT(st.nic[1].ethernet, 1);
    wsync_fabric_close(&f);
    o.devices = "mlx5_1,mlx5_0:2";
    CHECK_EQ_INT(vopen(&o, &f, &e), WSYNC_OK);
    CHECK(wsync_fabric_verbs_stats_get(&f, &st) == 1);
    CHECK_EQ_INT(st.n_nics, 2);
    CHECK_EQ_STR(st.nic[0].name, "mlx5_1:1");
    wsync_fabric_close(&f);
    o.devices = "mlx5_0:1";
    CHECK_EQ_INT(vopen(&o, &f, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "mlx5_0 port 1 is not active") != NULL, "%s", e.message);
    o.devices = "mlx5_9";
    CHECK_EQ_INT(vopen(&o, &f, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "no RDMA device named 'mlx5_9'") != NULL, "%s", e.message);
    o.devices = "mlx5_0:x";
    CHECK_EQ_INT(vopen(&o, &f, &e), WSYNC_ERR_INVALID_ARGUMENT);
    d0->fail_open = 1;
    o.devices = "mlx5_0";
    CHECK_EQ_INT(vopen(&o, &f, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "ibv_open_device(mlx5_0)") != NULL, "%s", e.message);
    CHECK_EQ_INT(vopen(NULL, &f, &e), WSYNC_OK); /* passed over: the next device */
    CHECK(wsync_fabric_verbs_stats_get(&f, &st) == 1);
    CHECK_EQ_STR(st.nic[0].name, "mlx5_1:1");
    wsync_fabric_close(&f);
    d1->fail_open = 1;
    CHECK_EQ_INT(vopen(NULL, &f, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "ibv_open_device") != NULL, "%s", e.message);
    world_end();
    TEST_END();
}

static void test_basic(int link, const char *name)
{
    pair p;
    fopts o;
    wsync_error e;
    wsync_fabric_desc bad;
    wsync_fabric_remote *r2;
    wsync_fabric_stats rs;
    size_t n = 1 << 20;
    TEST_BEGIN(name);
    world();
    fv_add_dev(W, "rx0", 1, link);
    fv_add_dev(W, "tx0", 1, link);
    memset(&o, 0, sizeof o);
    o.devices = "rx0";
    {
        fopts t = o;
        t.devices = "tx0";
        CHECK(pair_open(&p, n, &o, &t) == 0);
    }
    CHECK_EQ_INT(p.desc.backend, WSYNC_FABRIC_VERBS);
    CHECK(wsync_fabric_verbs_port(&p.rx) != 0);
    CHECK_EQ_INT(wsync_fabric_verbs_port(&p.tx), 0);
    /* writes at offsets, 0 bytes, 1 byte, the end */
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, 1, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 5, p.rem, 5, 0, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 100, p.rem, 100, 4000, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, n - 77, p.rem, n - 77, 77, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 8192, p.rem, 8192 + 3, 50000, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    CHECK(p.dst[0] == p.src[0] && p.dst[1] == 0);
    CHECK(memcmp(p.dst + 100, p.src + 100, 4000) == 0);
    CHECK(memcmp(p.dst + n - 77, p.src + n - 77, 77) == 0);
    CHECK(memcmp(p.dst + 8195, p.src + 8192, 50000) == 0);
    /* bounds, checked before anything is posted */
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 0, p.rem, n - 10, 11, &e), WSYNC_ERR_OUT_OF_BOUNDS);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, n - 10, p.rem, 0, 11, &e), WSYNC_ERR_OUT_OF_BOUNDS);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, UINT64_MAX, p.rem, 0, 2, &e), WSYNC_ERR_OUT_OF_BOUNDS);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    /* the whole region, then flush */
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, n, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    CHECK(memcmp(p.dst, p.src, n) == 0);
    /* a descriptor of another backend, a malformed one */
    bad = p.desc;
    bad.backend = WSYNC_FABRIC_TCP;
    CHECK_EQ_INT(p.tx.open_remote(p.tx.user, &bad, &r2, &e), WSYNC_ERR_INVALID_ARGUMENT);
    bad = p.desc;
    bad.bytes[3] = 9;
    CHECK_EQ_INT(p.tx.open_remote(p.tx.user, &bad, &r2, &e), WSYNC_ERR_INVALID_ARGUMENT);
    bad = p.desc;
    bad.n_bytes--;
    CHECK_EQ_INT(p.tx.open_remote(p.tx.user, &bad, &r2, &e), WSYNC_ERR_INVALID_ARGUMENT);
    /* a wrong key: the receiver refuses the handshake */
    bad = p.desc;
    bad.bytes[8] ^= 1;
    CHECK_EQ_INT(p.tx.open_remote(p.tx.user, &bad, &r2, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "wrong key") != NULL, "%s", e.message);
    CHECK(wsync_fabric_stats_get(&p.rx, &rs) == 1);
    CHECK_EQ_INT(rs.rejected, 1);
    CHECK_EQ_INT(rs.connections, 2);
    pair_close(&p);
    world_end();
    TEST_END();
}

/* Region of 4 MiB, 3 regions, random writes, small requests: bit-exact. */
static void test_multi_region(void)
{
    enum { NREG = 3 };
    wsync_fabric rx, tx;
    wsync_fabric_mr *rmr[NREG], *smr;
    wsync_fabric_remote *rem[NREG];
    wsync_fabric_desc d, unused;
    wsync_error e;
    uint8_t *dst[NREG], *src, *want[NREG];
    size_t n = 4u << 20;
    fopts ro, to;
    int i, k, ok = 1;
    uint64_t s = 7;
    TEST_BEGIN("verbs: 3 regions x 4 MiB, 600 random writes, 64 KiB requests, port max_msg 48 KiB: bit-exact");
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_ETHERNET)->port[0].max_msg = 48 << 10;
    memset(&ro, 0, sizeof ro);
    memset(&to, 0, sizeof to);
    ro.devices = "rx0";
    to.devices = "tx0";
    to.send_only = 1;
    to.max_wr = 64 << 10;
    to.sq_depth = 32;
    CHECK_EQ_INT(vopen(&ro, &rx, &e), WSYNC_OK);
    CHECK_EQ_INT(vopen(&to, &tx, &e), WSYNC_OK);
    src = (uint8_t *)malloc(n);
    fill(src, n, 99);
    CHECK_EQ_INT(tx.reg(tx.user, src, n, WSYNC_MEM_HOST, &smr, &unused, &e), WSYNC_OK);
    for (i = 0; i < NREG; i++) {
        dst[i] = (uint8_t *)calloc(1, n);
        want[i] = (uint8_t *)calloc(1, n);
        CHECK_EQ_INT(rx.reg(rx.user, dst[i], n, WSYNC_MEM_HOST, &rmr[i], &d, &e), WSYNC_OK);
        CHECK_EQ_INT(tx.open_remote(tx.user, &d, &rem[i], &e), WSYNC_OK);
    }
    for (k = 0; k < 600 && ok; k++) {
        uint64_t len, so, dof;
        s = mix(s);
        i = (int)(s % NREG);
        len = (s >> 8) % (k % 10 == 0 ? n : 200000) + 1;
        so = (s >> 30) % (n - len + 1);
        dof = mix(s) % (n - len + 1);
        memcpy(want[i] + dof, src + so, (size_t)len);
        ok = tx.write(tx.user, smr, so, rem[i], dof, len, &e) == WSYNC_OK;
        if (k % 97 == 0) ok = ok && tx.flush(tx.user, &e) == WSYNC_OK; /* overlapping writes stay in order */
    }
    CHECK_MSG(ok, "%s", e.message);
    CHECK_EQ_INT(tx.flush(tx.user, &e), WSYNC_OK);
    for (i = 0; i < NREG; i++) CHECK(memcmp(dst[i], want[i], n) == 0);
    for (i = 0; i < NREG; i++) {
        free(want[i]);
    }
    wsync_fabric_close(&tx);
    wsync_fabric_close(&rx);
    for (i = 0; i < NREG; i++) free(dst[i]);
    free(src);
    world_end();
    TEST_END();
}

/* Immediates in order, each after its bytes (and after earlier writes on
   other NICs): a receiver thread checks the bytes as each one arrives.
   Write i: a plain write of plain_len(i), then write_imm of imm_len(i)
   (short ones take one NIC, long ones are split; 0 bytes too). */
#define IMM_N 240
#define IMM_CHUNK 32768
static size_t plain_len(uint32_t i)
{
    return i % 3 == 0 ? 1000 : IMM_CHUNK / 2;
}
static size_t imm_len(uint32_t i)
{
    return i % 3 == 0 ? 1000 : i % 3 == 1 ? IMM_CHUNK / 2 : 0;
}

typedef struct imm_rx {
    pair *p;
    int bad_order, bad_bytes, missing;
} imm_rx;

static void *imm_rx_main(void *arg)
{
    imm_rx *x = (imm_rx *)arg;
    wsync_error e;
    uint32_t i, imm;
    for (i = 0; i < IMM_N; i++) {
        uint64_t off = (uint64_t)i * IMM_CHUNK;
        if (x->p->rx.recv_imm(x->p->rx.user, x->p->rmr, &imm, 5000, &e) != WSYNC_OK) {
            x->missing = (int)(IMM_N - i);
            break;
        }
        if (imm != i) x->bad_order++;
        if (memcmp(x->p->dst + off, x->p->src + off, plain_len(i) + imm_len(i)) != 0) x->bad_bytes++;
    }
    return NULL;
}

static void test_imm(const char *name, const char *rxd, const char *txd)
{
    pair p;
    fopts ro, to;
    wsync_error e;
    imm_rx x;
    pthread_t th;
    uint32_t i, imm;
    int ok = 1;
    TEST_BEGIN(name);
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "rx1", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx1", 1, IBV_LINK_LAYER_ETHERNET)->slow_us = 2000; /* lags NIC 0 */
    memset(&ro, 0, sizeof ro);
    memset(&to, 0, sizeof to);
    ro.devices = rxd;
    ro.rq_depth = 8;  /* fewer than the immediates in flight: reposting must keep up */
    to.devices = txd;
    to.split_min = 4096;
    CHECK(pair_open(&p, (size_t)IMM_N * IMM_CHUNK, &ro, &to) == 0);
    memset(&x, 0, sizeof x);
    x.p = &p;
    pthread_create(&th, NULL, imm_rx_main, &x);
    for (i = 0; i < IMM_N && ok; i++) {
        uint64_t off = (uint64_t)i * IMM_CHUNK;
        size_t a = plain_len(i);
        ok = p.tx.write(p.tx.user, p.smr, off, p.rem, off, a, &e) == WSYNC_OK &&
             p.tx.write_imm(p.tx.user, p.smr, off + a, p.rem, off + a, imm_len(i), i, &e) == WSYNC_OK;
    }
    CHECK_MSG(ok, "%s", e.message);
    pthread_join(th, NULL);
    CHECK_EQ_INT(x.missing, 0);
    CHECK_EQ_INT(x.bad_order, 0);
    CHECK_EQ_INT(x.bad_bytes, 0);
    CHECK_EQ_INT(p.rx.recv_imm(p.rx.user, p.rmr, &imm, 20, &e), WSYNC_ERR_LIMIT);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    pair_close(&p);
    world_end();
    TEST_END();
}

static void test_two_nics(void)
{
    pair p;
    fopts ro, to;
    wsync_error e;
    wsync_fabric_verbs_stats st;
    size_t n = 8u << 20;
    int k, ok = 1;
    TEST_BEGIN("verbs: 2 NICs each side, 8 MiB writes split across both, bit-exact");
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_INFINIBAND);
    fv_add_dev(W, "rx1", 1, IBV_LINK_LAYER_INFINIBAND);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_INFINIBAND);
    fv_add_dev(W, "tx1", 1, IBV_LINK_LAYER_INFINIBAND);
    memset(&ro, 0, sizeof ro);
    memset(&to, 0, sizeof to);
    ro.devices = "rx0,rx1";
    to.devices = "tx0,tx1";
    to.max_wr = 1 << 20;
    CHECK(pair_open(&p, n, &ro, &to) == 0);
    CHECK(p.desc.n_bytes == 24 + 8 + strlen("127.0.0.1"));
    for (k = 0; k < 4 && ok; k++) {
        fill(p.src, n, 100 + (uint64_t)k);
        ok = p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, n, &e) == WSYNC_OK && p.tx.flush(p.tx.user, &e) == WSYNC_OK;
        CHECK(memcmp(p.dst, p.src, n) == 0);
    }
    CHECK_MSG(ok, "%s", e.message);
    CHECK(wsync_fabric_verbs_stats_get(&p.tx, &st) == 1);
    CHECK_EQ_INT(st.n_nics, 2);
    CHECK_MSG(st.nic[0].bytes >= n && st.nic[1].bytes >= n, "%llu %llu", (unsigned long long)st.nic[0].bytes,
              (unsigned long long)st.nic[1].bytes);
    CHECK_EQ_U64(st.nic[0].bytes + st.nic[1].bytes, 4 * (uint64_t)n);
    CHECK(W->dev[0].bytes_in > 0 && W->dev[1].bytes_in > 0); /* both receiver NICs took bytes */
    CHECK(W->dev[2].bytes_out > 0 && W->dev[3].bytes_out > 0);
    pair_close(&p);
    world_end();
    TEST_END();

    TEST_BEGIN("verbs: 1 sender NIC to 2 receiver NICs (two lanes on one NIC)");
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "rx1", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_ETHERNET);
    ro.devices = "rx0,rx1";
    to.devices = "tx0";
    CHECK(pair_open(&p, n, &ro, &to) == 0);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 1, p.rem, 3, n - 3, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    CHECK(memcmp(p.dst + 3, p.src + 1, n - 3) == 0);
    CHECK(W->dev[0].bytes_in > 0 && W->dev[1].bytes_in > 0);
    pair_close(&p);
    world_end();
    TEST_END();

    TEST_BEGIN("verbs: InfiniBand sender to a RoCE receiver is refused");
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_INFINIBAND);
    ro.devices = "rx0";
    to.devices = "tx0";
    CHECK(pair_open(&p, 4096, &ro, &to) != 0);
    pair_close(&p);
    world_end();
    TEST_END();
}

static void test_backpressure(void)
{
    pair p;
    fopts ro, to;
    wsync_error e;
    wsync_fabric_verbs_stats st;
    size_t n = 1u << 20;
    int k, ok = 1;
    TEST_BEGIN("verbs: send queue of 4, 3000 writes: back-pressure, never more than 4 outstanding");
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_ETHERNET);
    W->delay_us = 1;
    memset(&ro, 0, sizeof ro);
    memset(&to, 0, sizeof to);
    ro.devices = "rx0";
    to.devices = "tx0";
    to.sq_depth = 4;
    to.signal_every = 3;
    CHECK(pair_open(&p, n, &ro, &to) == 0);
    for (k = 0; k < 3000 && ok; k++) {
        uint64_t off = ((uint64_t)k * 347) % (n - 300);
        ok = p.tx.write(p.tx.user, p.smr, off, p.rem, off, 300, &e) == WSYNC_OK;
    }
    CHECK_MSG(ok, "%s", e.message);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    CHECK(wsync_fabric_verbs_stats_get(&p.tx, &st) == 1);
    CHECK(st.sq_full_waits > 0);
    CHECK(st.signaled < 3000 && st.signaled >= 1000);
    CHECK(W->max_outstanding <= 4);
    CHECK_EQ_INT(W->enomem, 0); /* the backend counted, the provider never had to refuse */
    for (k = 0; k < 3000; k++) {
        uint64_t off = ((uint64_t)k * 347) % (n - 300);
        if (memcmp(p.dst + off, p.src + off, 300) != 0) break;
    }
    CHECK_EQ_INT(k, 3000);
    /* the provider refuses a post (its own limit): poll and retry */
    W->fail_post_nth = W->posts + 5;
    for (k = 0; k < 20 && ok; k++) ok = p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, 1000, &e) == WSYNC_OK;
    CHECK_MSG(ok, "%s", e.message);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    CHECK(wsync_fabric_verbs_stats_get(&p.tx, &st) == 1);
    CHECK_EQ_INT(st.enomem_retries, 1);
    CHECK_EQ_INT(W->enomem, 1);
    pair_close(&p);
    world_end();
    TEST_END();
}

static void test_errors(void)
{
    pair p;
    fopts ro, to;
    wsync_error e;
    wsync_fabric_desc d;
    wsync_fabric_remote *r2;
    size_t n = 1u << 20;
    int k;
    int64_t t0;
    memset(&ro, 0, sizeof ro);
    memset(&to, 0, sizeof to);
    ro.devices = "rx0";
    to.devices = "tx0";

    TEST_BEGIN("verbs: an error completion breaks the remote, named by status; reopen works");
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_ETHERNET);
    CHECK(pair_open(&p, n, &ro, &to) == 0);
    W->fail_exec_nth = W->execs + 3;
    W->fail_status = IBV_WC_REM_OP_ERR;
    for (k = 0; k < 10; k++) p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, 100, &e);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "IBV_WC_REM_OP_ERR") && strstr(e.message, "tx0:1") && strstr(e.message, "127.0.0.1:"),
              "%s", e.message);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, 100, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "IBV_WC_REM_OP_ERR") != NULL, "%s", e.message);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_ERR_IO);
    p.tx.close_remote(p.tx.user, p.rem);
    CHECK_EQ_INT(p.tx.open_remote(p.tx.user, &p.desc, &p.rem, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, n, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    CHECK(memcmp(p.dst, p.src, n) == 0);
    TEST_END();

    TEST_BEGIN("verbs: a wrong rkey completes with IBV_WC_REM_ACCESS_ERR");
    d = p.desc;
    d.bytes[24] ^= 0x10;
    CHECK_EQ_INT(p.tx.open_remote(p.tx.user, &d, &r2, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 0, r2, 0, 64, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "IBV_WC_REM_ACCESS_ERR") != NULL, "%s", e.message);
    p.tx.close_remote(p.tx.user, r2);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    TEST_END();

    TEST_BEGIN("verbs: a stalled NIC fails flush within the timeout");
    pair_close(&p);
    to.timeout_ms = 300;
    CHECK(pair_open(&p, n, &ro, &to) == 0);
    W->paused = 1;
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, 100, &e), WSYNC_OK);
    t0 = now_ms();
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_ERR_IO);
    CHECK(now_ms() - t0 < 2000);
    CHECK_MSG(strstr(e.message, "no completion from tx0:1 within 300 ms") != NULL, "%s", e.message);
    W->paused = 0;
    TEST_END();

    TEST_BEGIN("verbs: dereg at the receiver breaks the sender's remote");
    p.rx.dereg(p.rx.user, p.rmr);
    p.rmr = NULL;
    p.tx.close_remote(p.tx.user, p.rem);
    CHECK_EQ_INT(p.tx.open_remote(p.tx.user, &p.desc, &p.rem, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "unknown region") != NULL, "%s", e.message);
    pair_close(&p);
    to.timeout_ms = 0;
    CHECK(pair_open(&p, n, &ro, &to) == 0);
    p.rx.dereg(p.rx.user, p.rmr);
    t0 = now_ms();
    while (now_ms() - t0 < 2000 && p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, 100, &e) == WSYNC_OK) usleep(1000);
    CHECK_MSG(strstr(e.message, "closed the control connection") != NULL, "%s", e.message);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_ERR_IO);
    pair_close(&p);
    world_end();
    TEST_END();

    TEST_BEGIN("verbs: failures in setup (reg_mr, create_qp) are results naming the verb");
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_ETHERNET);
    W->fail_reg_mr_nth = 1;
    CHECK(pair_open(&p, 4096, &ro, &to) != 0);
    CHECK_MSG(strstr(LASTE.message, "ibv_reg_mr(rx0:1, 4096 bytes)") != NULL, "%s", LASTE.message);
    pair_close(&p);
    W->fail_reg_mr_nth = 0;
    W->fail_create_qp_nth = W->create_qps + 1;
    CHECK(pair_open(&p, 4096, &ro, &to) != 0);
    CHECK_MSG(strstr(LASTE.message, "ibv_create_qp(tx0:1") != NULL, "%s", LASTE.message);
    pair_close(&p);
    W->fail_create_qp_nth = W->create_qps + 2; /* the receiver's */
    CHECK(pair_open(&p, 4096, &ro, &to) != 0);
    CHECK_MSG(strstr(LASTE.message, "could not set up its queue pairs") != NULL, "%s", LASTE.message);
    pair_close(&p);
    world_end();
    TEST_END();
}

/* ---- the control connection: timeouts and hostile peers ---- */

static int listen_any(unsigned *port)
{
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0) return -1;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

static int connect_to(unsigned port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A well-formed hello (or reply) of n lanes on an Ethernet NIC 0. */
static size_t make_msg(uint8_t *m, uint32_t magic, uint32_t region_or_status, const uint8_t *key8, uint32_t n)
{
    uint32_t i;
    memset(m, 0, 32 + 40 * n);
    put32(m, magic);
    put32(m + 4, 1);
    put32(m + 8, 32 + 40 * n);
    put32(m + 12, region_or_status);
    if (key8) memcpy(m + 16, key8, 8);
    put32(m + 24, n);
    for (i = 0; i < n; i++) {
        uint8_t *l = m + 32 + 40 * i;
        put32(l + 4, 0x4242 + i); /* qpn */
        put32(l + 8, 77);         /* psn */
        put32(l + 12, 1u << 30);  /* max_msg */
        l[18] = 1;                /* ethernet */
        l[19] = IBV_MTU_1024;
        l[20] = 1;
        l[24 + 10] = 0xff, l[24 + 11] = 0xff, l[24 + 12] = 10;
    }
    return 32 + 40 * n;
}

/* Sends msg (len bytes, or cut at `cut`), returns the reply's status, or
   -1 when the receiver closed without one. */
static int hello_status(unsigned port, const uint8_t *msg, size_t len, size_t cut)
{
    uint8_t rep[32 + 40 * 8];
    int fd = connect_to(port), st = -1;
    struct pollfd pf;
    ssize_t got;
    if (fd < 0) return -2;
    send(fd, msg, cut ? cut : len, MSG_NOSIGNAL);
    if (cut) shutdown(fd, SHUT_WR);
    pf.fd = fd;
    pf.events = POLLIN;
    pf.revents = 0;
    if (poll(&pf, 1, 3000) == 1 && (got = recv(fd, rep, sizeof rep, MSG_WAITALL)) >= 32 &&
        get32(rep) == 0x32565357u)
        st = (int)get32(rep + 12);
    close(fd);
    return st;
}

static void test_hostile_hello(void)
{
    pair p;
    fopts ro, to;
    wsync_fabric_stats rs;
    uint8_t m[32 + 40 * 9], key[8];
    unsigned port;
    size_t len;
    uint32_t region;
    int fd;
    int64_t t0;
    TEST_BEGIN("verbs receiver: hostile handshakes refused (magic, version, lengths, lanes), silence dropped");
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_ETHERNET);
    memset(&ro, 0, sizeof ro);
    memset(&to, 0, sizeof to);
    ro.devices = "rx0";
    ro.timeout_ms = 300;
    to.devices = "tx0";
    CHECK(pair_open(&p, 65536, &ro, &to) == 0);
    port = wsync_fabric_verbs_port(&p.rx);
    region = get32(p.desc.bytes + 4);
    memcpy(key, p.desc.bytes + 8, 8);
    len = make_msg(m, 0x31565357u, region, key, 1);
    put32(m, 0x31565358u);
    CHECK_EQ_INT(hello_status(port, m, len, 0), 1);
    len = make_msg(m, 0x31565357u, region, key, 1);
    put32(m + 4, 2);
    CHECK_EQ_INT(hello_status(port, m, len, 0), 2);
    len = make_msg(m, 0x31565357u, region, key, 1);
    put32(m + 8, 73);
    CHECK_EQ_INT(hello_status(port, m, len, 0), 3);
    len = make_msg(m, 0x31565357u, region, key, 9);
    CHECK_EQ_INT(hello_status(port, m, len, 0), 3);
    len = make_msg(m, 0x31565357u, region, key, 1);
    put32(m + 24, 0);
    CHECK_EQ_INT(hello_status(port, m, len, 0), 3);
    len = make_msg(m, 0x31565357u, region, key, 1);
    put32(m + 32 + 4, 0); /* qpn 0 */
    CHECK_EQ_INT(hello_status(port, m, len, 0), 6);
    len = make_msg(m, 0x31565357u, region, key, 1);
    put32(m + 32 + 4, 0x1000000); /* qpn past 24 bits */
    CHECK_EQ_INT(hello_status(port, m, len, 0), 6);
    len = make_msg(m, 0x31565357u, region, key, 1);
    put32(m + 32, 3); /* the receiver's NIC 3 */
    CHECK_EQ_INT(hello_status(port, m, len, 0), 6);
    len = make_msg(m, 0x31565357u, region, key, 1);
    m[32 + 18] = 0; /* InfiniBand lane to a RoCE NIC */
    CHECK_EQ_INT(hello_status(port, m, len, 0), 6);
    len = make_msg(m, 0x31565357u, region, key, 1);
    m[32 + 19] = 9; /* MTU */
    CHECK_EQ_INT(hello_status(port, m, len, 0), 6);
    len = make_msg(m, 0x31565357u, region, key, 1);
    memset(m + 32 + 24, 0, 16); /* no GID on RoCE */
    CHECK_EQ_INT(hello_status(port, m, len, 0), 6);
    len = make_msg(m, 0x31565357u, region + 5, key, 1);
    CHECK_EQ_INT(hello_status(port, m, len, 0), 4);
    len = make_msg(m, 0x31565357u, region, NULL, 1);
    CHECK_EQ_INT(hello_status(port, m, len, 0), 5);
    CHECK(wsync_fabric_stats_get(&p.rx, &rs) == 1);
    CHECK_EQ_INT(rs.rejected, 13);
    CHECK_MSG(strstr(rs.last_reject, "wrong key") != NULL, "%s", rs.last_reject);
    /* truncated: a header promising a lane, half of it, then the end */
    len = make_msg(m, 0x31565357u, region, key, 1);
    CHECK_EQ_INT(hello_status(port, m, len, 52), -1);
    CHECK_EQ_INT(hello_status(port, m, len, 10), -1);
    /* a sender that connects and says nothing: dropped after the timeout */
    fd = connect_to(port);
    t0 = now_ms();
    while (now_ms() - t0 < 3000 && wsync_fabric_stats_get(&p.rx, &rs) && rs.dropped < 3) usleep(10000);
    CHECK_EQ_INT(rs.dropped, 3);
    CHECK(now_ms() - t0 < 2000);
    close(fd);
    /* and the receiver still serves: a valid sender writes */
    {
        wsync_error e;
        CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, 65536, &e), WSYNC_OK);
        CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
        CHECK(memcmp(p.dst, p.src, 65536) == 0);
    }
    pair_close(&p);
    world_end();
    TEST_END();
}

/* A fake receiver: accepts one connection, reads the hello, answers per mode. */
typedef struct fake_rx {
    int lfd, mode;
} fake_rx;

static void *fake_rx_main(void *arg)
{
    fake_rx *f = (fake_rx *)arg;
    uint8_t h[32 + 40 * 8], rep[32 + 40 * 8];
    int fd = accept(f->lfd, NULL, NULL);
    size_t len;
    if (fd < 0) return NULL;
    if (f->mode == 0) { /* silent: hold the connection until the sender gives up */
        struct pollfd pf;
        pf.fd = fd;
        pf.events = POLLIN;
        pf.revents = 0;
        poll(&pf, 1, 5000);
        close(fd);
        return NULL;
    }
    recv(fd, h, 32 + 40, MSG_WAITALL);
    len = make_msg(rep, 0x32565357u, 0, NULL, 1);
    put32(rep + 32, 0);
    if (f->mode == 1) put32(rep + 4, 7);            /* version */
    if (f->mode == 2) len = 50;                     /* truncated */
    if (f->mode == 3) put32(rep + 32 + 4, 0);       /* qpn 0 */
    if (f->mode == 4) put32(rep + 12, 4);           /* refused: region */
    if (f->mode == 5) put32(rep + 24, 2);           /* lanes other than asked */
    send(fd, rep, len, MSG_NOSIGNAL);
    if (f->mode == 2) {
        struct pollfd pf;
        pf.fd = fd;
        pf.events = POLLIN;
        pf.revents = 0;
        poll(&pf, 1, 5000); /* hold it open: the sender times out */
    }
    close(fd);
    return NULL;
}

static void test_hostile_reply(void)
{
    static const char *want[] = {"no handshake reply from 127.0.0.1:", "bad magic or version 7",
                                 "truncated handshake reply", "invalid queue pair",
                                 "refused the handshake: unknown region", "malformed handshake"};
    pair p;
    fopts ro, to;
    wsync_fabric_desc d;
    wsync_fabric_remote *r2;
    wsync_error e;
    fake_rx f;
    pthread_t th;
    unsigned port;
    int mode, lfd;
    int64_t t0;
    TEST_BEGIN("verbs sender: silent, hostile and refusing receivers fail open_remote within the timeout");
    world();
    fv_add_dev(W, "rx0", 1, IBV_LINK_LAYER_ETHERNET);
    fv_add_dev(W, "tx0", 1, IBV_LINK_LAYER_ETHERNET);
    memset(&ro, 0, sizeof ro);
    memset(&to, 0, sizeof to);
    ro.devices = "rx0";
    to.devices = "tx0";
    to.timeout_ms = 300;
    CHECK(pair_open(&p, 4096, &ro, &to) == 0);
    for (mode = 0; mode < 6; mode++) {
        lfd = listen_any(&port);
        f.lfd = lfd;
        f.mode = mode;
        pthread_create(&th, NULL, fake_rx_main, &f);
        d = p.desc;
        d.bytes[0] = (uint8_t)port;
        d.bytes[1] = (uint8_t)(port >> 8);
        t0 = now_ms();
        CHECK_EQ_INT(p.tx.open_remote(p.tx.user, &d, &r2, &e), WSYNC_ERR_IO);
        CHECK_MSG(now_ms() - t0 < 2000, "mode %d took %lld ms", mode, (long long)(now_ms() - t0));
        CHECK_MSG(strstr(e.message, want[mode]) != NULL, "mode %d: %s", mode, e.message);
        shutdown(lfd, SHUT_RDWR);
        pthread_join(th, NULL);
        close(lfd);
    }
    /* nobody listens on the port */
    lfd = listen_any(&port);
    close(lfd);
    d = p.desc;
    d.bytes[0] = (uint8_t)port;
    d.bytes[1] = (uint8_t)(port >> 8);
    CHECK_EQ_INT(p.tx.open_remote(p.tx.user, &d, &r2, &e), WSYNC_ERR_IO);
    CHECK_MSG(strstr(e.message, "127.0.0.1:") && strstr(e.message, "refused"), "%s", e.message);
    /* nothing leaked by the failures: the good remote still works */
    CHECK_EQ_INT(p.tx.write(p.tx.user, p.smr, 0, p.rem, 0, 4096, &e), WSYNC_OK);
    CHECK_EQ_INT(p.tx.flush(p.tx.user, &e), WSYNC_OK);
    pair_close(&p);
    world_end();
    TEST_END();
}

int main(void)
{
    int64_t t0 = now_ms();
    test_real_libibverbs();
    test_devices();
    test_basic(IBV_LINK_LAYER_ETHERNET, "verbs RoCE: reg, descriptor wire form, open, writes at offsets, bounds, keys");
    test_basic(IBV_LINK_LAYER_INFINIBAND, "verbs InfiniBand: reg, descriptor wire form, open, writes at offsets, bounds, keys");
    test_multi_region();
    test_imm("verbs: 240 write_imm in order, bytes first (1 NIC each side)", "rx0", "tx0");
    test_imm("verbs: 240 write_imm in order, bytes first (2 NICs each side, split, one lagging)", "rx0,rx1", "tx0,tx1");
    test_two_nics();
    test_backpressure();
    test_errors();
    test_hostile_hello();
    test_hostile_reply();
    if (getenv("CHECK_VERBOSE")) printf("took %lld ms\n", (long long)(now_ms() - t0));
    return check_summary();
}

#else /* no verbs headers: the backend says so */

int main(void)
{
    wsync_fabric f;
    wsync_error e;
    TEST_BEGIN("verbs fabric without rdma-core's headers: UNSUPPORTED");
    CHECK_EQ_INT(wsync_fabric_verbs_open(NULL, &f, &e), WSYNC_ERR_UNSUPPORTED);
    CHECK(strstr(e.message, "verbs") != NULL);
    TEST_END();
    return check_summary();
}

#endif
