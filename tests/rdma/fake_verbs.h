/* fake_verbs.h - an in-memory verbs provider for testing wsync_rdma.h's
   ibverbs backend without a NIC (a wsync_verbs_ops table).

   One "world" holds devices (names, ports with a link layer, LID, GID
   table, MTU, max message size), and the objects made on them. RC is
   emulated within one process, so sender and receiver fabrics both live in
   the test:
   - QPs follow RESET -> INIT -> RTR -> RTS (and ERR), with the attribute
     masks real providers require; post_send needs RTS, post_recv INIT or
     later. RTR checks the address vector: RoCE (Ethernet) ports need
     is_global with a non-zero dgid and a valid sgid_index; IB ports a dlid.
   - An engine thread executes send queues asynchronously, one request per
     QP per round. A request reaches its peer by the dest_qpn given at RTR,
     and only when the peer points back, the address (dgid on RoCE, dlid on
     IB) is one of the peer port's and the PSNs agree; otherwise it
     completes with IBV_WC_RETRY_EXC_ERR. RDMA WRITE copies the bytes into
     the target MR when it executes; the lkey must name an MR of the QP's
     PD with the bytes in bounds (else IBV_WC_LOC_PROT_ERR), the rkey an MR
     of the peer's PD with REMOTE_WRITE access and the bytes in bounds, on a
     peer QP that allows remote writes (else IBV_WC_REM_ACCESS_ERR); longer
     than the port's max_msg_sz: IBV_WC_LOC_LEN_ERR.
   - WRITE_WITH_IMM also consumes a receive posted on the peer QP and puts
     a receive completion with the immediate on the peer's CQ. With no
     receive posted: rnr_retry 7 (infinite) waits for one, anything lower
     completes with IBV_WC_RNR_RETRY_EXC_ERR.
   - An error completion moves the QP to ERR; every request still queued
     then completes with IBV_WC_WR_FLUSH_ERR (signaled or not).
   - Completions only for signaled requests (and errors). A send queue
     slot is freed only when a completion at or after its request is
     polled: post_send returns ENOMEM while max_send_wr requests are
     outstanding, as real providers do.
   - A CQ holds exactly cqe entries; one more is an overrun, after which
     poll_cq fails.
   - dealloc_pd and destroy_cq refuse (EBUSY) while objects use them;
     fv_live() counts what is left.
   Fault knobs (fv_world fields): fail_device_list, a device's fail_open,
   fail_post_nth (the Nth post_send returns ENOMEM), fail_exec_nth with
   fail_status (the Nth executed request completes with that status),
   fail_reg_mr_nth, fail_create_qp_nth, paused (the engine stops),
   delay_us (a pause between requests), and a device's slow_us (its
   requests execute that long after their post: one NIC lags another). */
#ifndef WSYNC_TESTS_FAKE_VERBS_H
#define WSYNC_TESTS_FAKE_VERBS_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FV_MAX_DEV 8
#define FV_MAX_PORT 2
#define FV_GIDS 4

typedef struct fv_world fv_world;

typedef struct fv_port {
    int state, link, mtu;
    uint16_t lid;
    uint32_t max_msg;
    uint8_t gid[FV_GIDS][16];
} fv_port;

typedef struct fv_dev {
    struct ibv_device d;       /* first: the verbs object */
    fv_world *w;
    int n_ports, fail_open, opened;
    unsigned slow_us;          /* a request executes no sooner than this after its post */
    fv_port port[FV_MAX_PORT];
    uint64_t bytes_out, bytes_in; /* written as requester; received as responder */
} fv_dev;

typedef struct fv_ctx {
    struct ibv_context c;
    fv_dev *dev;
} fv_ctx;

typedef struct fv_pd {
    struct ibv_pd pd;
    int users;                 /* MRs and QPs on it */
} fv_pd;

typedef struct fv_mr {
    struct ibv_mr mr;
    struct fv_mr *next;
    int access;
} fv_mr;

typedef struct fv_cqe {
    struct ibv_wc wc;
    int send;                  /* a send completion: retires its QP's requests up to seq */
    uint64_t seq;
} fv_cqe;

typedef struct fv_cq {
    struct ibv_cq cq;
    int cap, head, n, overrun, users;
    fv_cqe *q;
} fv_cq;

typedef struct fv_wr {
    uint64_t wr_id, seq;
    int opcode, signaled;
    uint64_t laddr, raddr;
    uint32_t len, lkey, rkey, imm;
    int64_t at_us;             /* when it was posted */
} fv_wr;

typedef struct fv_qp {
    struct ibv_qp qp;
    struct fv_qp *next;
    fv_dev *dev;
    int port, access, mtu, is_global, sgid_index, rnr_retry, psn_checked;
    uint32_t dest_qpn, rq_psn, sq_psn;
    uint16_t dlid;
    uint8_t dgid[16];
    unsigned max_send_wr, max_recv_wr;
    fv_wr *sq;                 /* ring of max_send_wr */
    unsigned sq_head, sq_n;    /* queued, not executed yet */
    uint64_t posted, retired;  /* requests posted; retired by polled completions */
    uint64_t *rq;              /* posted receives (wr_ids), a ring */
    unsigned rq_head, rq_n;
} fv_qp;

struct fv_world {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t engine;
    int started, stop;
    int n_dev;
    fv_dev dev[FV_MAX_DEV];
    fv_qp *qps;
    fv_mr *mrs;
    uint32_t next_qpn, next_key;
    /* knobs */
    int fail_device_list, paused;
    unsigned delay_us;
    uint64_t fail_post_nth, fail_exec_nth, fail_reg_mr_nth, fail_create_qp_nth;
    int fail_status;
    /* counters */
    uint64_t posts, execs, reg_mrs, create_qps, enomem, max_outstanding, imms, rnr_waits, bytes;
    long live_ctx, live_pd, live_mr, live_cq, live_qp;
};

static fv_world *fv_of_ctx(struct ibv_context *c)
{
    return ((fv_ctx *)c)->dev->w;
}

static int64_t fv_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void fv_sleep_us(unsigned us)
{
    struct timespec ts;
    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (long)(us % 1000000) * 1000;
    nanosleep(&ts, NULL);
}

/* ---- world and devices ---- */

static fv_world *fv_new(void)
{
    fv_world *w = (fv_world *)calloc(1, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->next_qpn = 0x1000 + (uint32_t)(getpid() & 0xff);
    w->next_key = 0x5a5a0001u;
    return w;
}

/* A device with n_ports ports, all active, of one link layer
   (IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET). RoCE GIDs:
   0 link-local, 1 IPv4-mapped 10.0.<dev>.<port>; IB: 0 only. */
static fv_dev *fv_add_dev(fv_world *w, const char *name, int n_ports, int link)
{
    fv_dev *d = &w->dev[w->n_dev];
    int p, id = w->n_dev++;
    memset(d, 0, sizeof *d);
    d->w = w;
    snprintf(d->d.name, sizeof d->d.name, "%s", name);
    snprintf(d->d.dev_name, sizeof d->d.dev_name, "uverbs%d", id);
    d->d.node_type = IBV_NODE_CA;
    d->d.transport_type = IBV_TRANSPORT_IB;
    d->n_ports = n_ports;
    for (p = 0; p < n_ports; p++) {
        fv_port *pt = &d->port[p];
        pt->state = IBV_PORT_ACTIVE;
        pt->link = link;
        pt->mtu = link == IBV_LINK_LAYER_ETHERNET ? IBV_MTU_1024 : IBV_MTU_4096;
        pt->max_msg = 1u << 30;
        pt->gid[0][0] = 0xfe;
        pt->gid[0][1] = 0x80;
        pt->gid[0][14] = (uint8_t)id;
        pt->gid[0][15] = (uint8_t)(p + 1);
        if (link == IBV_LINK_LAYER_ETHERNET) {
            pt->gid[1][10] = 0xff;
            pt->gid[1][11] = 0xff;
            pt->gid[1][12] = 10;
            pt->gid[1][14] = (uint8_t)id;
            pt->gid[1][15] = (uint8_t)(p + 1);
        } else {
            pt->lid = (uint16_t)(0x10 + id * 4 + p);
        }
    }
    return d;
}

static long fv_live(fv_world *w)
{
    long n;
    pthread_mutex_lock(&w->mu);
    n = w->live_ctx + w->live_pd + w->live_mr + w->live_cq + w->live_qp;
    pthread_mutex_unlock(&w->mu);
    return n;
}

static void fv_free(fv_world *w)
{
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->engine, NULL);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* ---- lookups (under w->mu) ---- */

static fv_qp *fv_find_qp(fv_world *w, uint32_t qpn)
{
    fv_qp *q;
    for (q = w->qps; q; q = q->next)
        if (q->qp.qp_num == qpn) return q;
    return NULL;
}

static fv_mr *fv_find_mr(fv_world *w, uint32_t key, int remote)
{
    fv_mr *m;
    for (m = w->mrs; m; m = m->next)
        if ((remote ? m->mr.rkey : m->mr.lkey) == key) return m;
    return NULL;
}

static int fv_in(const fv_mr *m, uint64_t addr, uint64_t len)
{
    uint64_t lo = (uint64_t)(uintptr_t)m->mr.addr;
    return addr >= lo && len <= m->mr.length && addr - lo <= m->mr.length - len;
}

/* ---- completions ---- */

static void fv_cq_push(fv_cq *c, const struct ibv_wc *wc, int send, uint64_t seq)
{
    fv_cqe *e;
    if (c->n == c->cap) {
        c->overrun = 1;
        return;
    }
    e = &c->q[(c->head + c->n) % c->cap];
    e->wc = *wc;
    e->send = send;
    e->seq = seq;
    c->n++;
}

static void fv_send_cqe(fv_qp *q, const fv_wr *r, enum ibv_wc_status st)
{
    struct ibv_wc wc;
    memset(&wc, 0, sizeof wc);
    wc.wr_id = r->wr_id;
    wc.status = st;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = q->qp.qp_num;
    wc.byte_len = r->len;
    fv_cq_push((fv_cq *)q->qp.send_cq, &wc, 1, r->seq);
}

/* The QP goes to ERR: every queued request completes flushed. */
static void fv_qp_error(fv_qp *q)
{
    q->qp.state = IBV_QPS_ERR;
    while (q->sq_n) {
        fv_wr *r = &q->sq[q->sq_head];
        fv_send_cqe(q, r, IBV_WC_WR_FLUSH_ERR);
        q->sq_head = (q->sq_head + 1) % q->max_send_wr;
        q->sq_n--;
    }
}

/* ---- the engine: executes send queues ---- */

static enum ibv_wc_status fv_check_path(fv_world *w, fv_qp *q, fv_qp **peer_out)
{
    fv_qp *p = fv_find_qp(w, q->dest_qpn);
    const fv_port *pp;
    int i, found = 0;
    *peer_out = p;
    if (!p || p->qp.state == IBV_QPS_RESET || p->qp.state == IBV_QPS_INIT || p->qp.state == IBV_QPS_ERR ||
        p->dest_qpn != q->qp.qp_num)
        return IBV_WC_RETRY_EXC_ERR;
    pp = &p->dev->port[p->port - 1];
    if (q->dev->port[q->port - 1].link != pp->link) return IBV_WC_RETRY_EXC_ERR;
    if (pp->link == IBV_LINK_LAYER_ETHERNET) {
        for (i = 0; i < FV_GIDS; i++)
            if (memcmp(q->dgid, pp->gid[i], 16) == 0) found = 1;
        if (!found) return IBV_WC_RETRY_EXC_ERR;
    } else if (q->dlid != pp->lid) {
        return IBV_WC_RETRY_EXC_ERR;
    }
    if (!q->psn_checked) {
        if (q->sq_psn != p->rq_psn) return IBV_WC_RETRY_EXC_ERR;
        q->psn_checked = 1;
    }
    return IBV_WC_SUCCESS;
}

/* 1: executed (or failed); 0: blocked (no receive for an immediate). */
static int fv_exec(fv_world *w, fv_qp *q)
{
    fv_wr *r = &q->sq[q->sq_head];
    fv_qp *p = NULL;
    fv_mr *lm = NULL, *rm = NULL;
    enum ibv_wc_status st = fv_check_path(w, q, &p);
    if (st == IBV_WC_SUCCESS && r->len > q->dev->port[q->port - 1].max_msg) st = IBV_WC_LOC_LEN_ERR;
    if (st == IBV_WC_SUCCESS && r->len) {
        lm = fv_find_mr(w, r->lkey, 0);
        if (!lm || lm->mr.pd != q->qp.pd || !fv_in(lm, r->laddr, r->len)) st = IBV_WC_LOC_PROT_ERR;
    }
    if (st == IBV_WC_SUCCESS && r->len) {
        rm = fv_find_mr(w, r->rkey, 1);
        if (!rm || rm->mr.pd != p->qp.pd || !(rm->access & IBV_ACCESS_REMOTE_WRITE) || !fv_in(rm, r->raddr, r->len) ||
            !(p->access & IBV_ACCESS_REMOTE_WRITE))
            st = IBV_WC_REM_ACCESS_ERR;
    }
    if (st == IBV_WC_SUCCESS && r->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && p->rq_n == 0) {
        if (q->rnr_retry == 7) {
            w->rnr_waits++;
            return 0;
        }
        st = IBV_WC_RNR_RETRY_EXC_ERR;
    }
    w->execs++;
    if (st == IBV_WC_SUCCESS && w->fail_exec_nth && w->execs == w->fail_exec_nth) st = (enum ibv_wc_status)w->fail_status;
    if (st != IBV_WC_SUCCESS) {
        fv_send_cqe(q, r, st);
        q->sq_head = (q->sq_head + 1) % q->max_send_wr;
        q->sq_n--;
        fv_qp_error(q);
        return 1;
    }
    if (r->len) memcpy((void *)(uintptr_t)r->raddr, (const void *)(uintptr_t)r->laddr, r->len);
    q->dev->bytes_out += r->len;
    p->dev->bytes_in += r->len;
    w->bytes += r->len;
    if (r->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        struct ibv_wc wc;
        memset(&wc, 0, sizeof wc);
        wc.wr_id = p->rq[p->rq_head];
        p->rq_head = (p->rq_head + 1) % p->max_recv_wr;
        p->rq_n--;
        wc.status = IBV_WC_SUCCESS;
        wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
        wc.wc_flags = IBV_WC_WITH_IMM;
        wc.imm_data = r->imm;
        wc.byte_len = r->len;
        wc.qp_num = p->qp.qp_num;
        wc.src_qp = q->qp.qp_num;
        fv_cq_push((fv_cq *)p->qp.recv_cq, &wc, 0, 0);
        w->imms++;
    }
    if (r->signaled) fv_send_cqe(q, r, IBV_WC_SUCCESS);
    q->sq_head = (q->sq_head + 1) % q->max_send_wr;
    q->sq_n--;
    return 1;
}

static void *fv_engine(void *arg)
{
    fv_world *w = (fv_world *)arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        fv_qp *q;
        int progress = 0;
        if (!w->paused)
            for (q = w->qps; q; q = q->next) {
                if (q->qp.state != IBV_QPS_RTS || !q->sq_n) continue;
                if (q->dev->slow_us && fv_now_us() - q->sq[q->sq_head].at_us < (int64_t)q->dev->slow_us) continue;
                progress += fv_exec(w, q);
            }
        if (progress && w->delay_us) {
            pthread_mutex_unlock(&w->mu);
            fv_sleep_us(w->delay_us);
            pthread_mutex_lock(&w->mu);
        } else if (!progress) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 1000000;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ---- the verbs ---- */

static struct ibv_device **fv_get_device_list(void *user, int *n)
{
    fv_world *w = (fv_world *)user;
    struct ibv_device **l;
    int i;
    if (w->fail_device_list) {
        errno = ENOSYS;
        return NULL;
    }
    l = (struct ibv_device **)calloc((size_t)w->n_dev + 1, sizeof *l);
    for (i = 0; i < w->n_dev; i++) l[i] = &w->dev[i].d;
    if (n) *n = w->n_dev;
    return l;
}

static void fv_free_device_list(struct ibv_device **l)
{
    free(l);
}

static const char *fv_get_device_name(struct ibv_device *d)
{
    return d->name;
}

static struct ibv_context *fv_open_device(struct ibv_device *d)
{
    fv_dev *dev = (fv_dev *)d;
    fv_world *w = dev->w;
    fv_ctx *c;
    if (dev->fail_open) {
        errno = EIO;
        return NULL;
    }
    c = (fv_ctx *)calloc(1, sizeof *c);
    c->c.device = d;
    c->dev = dev;
    pthread_mutex_lock(&w->mu);
    w->live_ctx++;
    dev->opened++;
    if (!w->started) {
        w->started = 1;
        pthread_create(&w->engine, NULL, fv_engine, w);
    }
    pthread_mutex_unlock(&w->mu);
    return &c->c;
}

static int fv_close_device(struct ibv_context *c)
{
    fv_world *w = fv_of_ctx(c);
    pthread_mutex_lock(&w->mu);
    w->live_ctx--;
    pthread_mutex_unlock(&w->mu);
    free(c);
    return 0;
}

static int fv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
    fv_dev *d = ((fv_ctx *)c)->dev;
    memset(a, 0, sizeof *a);
    a->phys_port_cnt = (uint8_t)d->n_ports;
    a->max_qp_wr = 16384;
    a->max_cqe = 1 << 20;
    a->max_sge = 4;
    return 0;
}

static int fv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    fv_dev *d = ((fv_ctx *)c)->dev;
    const fv_port *p;
    if (port < 1 || port > d->n_ports) {
        errno = EINVAL;
        return EINVAL;
    }
    p = &d->port[port - 1];
    memset(a, 0, sizeof *a);
    a->state = (enum ibv_port_state)p->state;
    a->max_mtu = (enum ibv_mtu)p->mtu;
    a->active_mtu = (enum ibv_mtu)p->mtu;
    a->gid_tbl_len = FV_GIDS;
    a->max_msg_sz = p->max_msg;
    a->lid = p->lid;
    a->link_layer = (uint8_t)p->link;
    return 0;
}

static int fv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g)
{
    fv_dev *d = ((fv_ctx *)c)->dev;
    if (port < 1 || port > d->n_ports || index < 0 || index >= FV_GIDS) {
        errno = EINVAL;
        return EINVAL;
    }
    memcpy(g->raw, d->port[port - 1].gid[index], 16);
    return 0;
}

static struct ibv_pd *fv_alloc_pd(struct ibv_context *c)
{
    fv_world *w = fv_of_ctx(c);
    fv_pd *p = (fv_pd *)calloc(1, sizeof *p);
    p->pd.context = c;
    pthread_mutex_lock(&w->mu);
    w->live_pd++;
    pthread_mutex_unlock(&w->mu);
    return &p->pd;
}

static int fv_dealloc_pd(struct ibv_pd *pd)
{
    fv_world *w = fv_of_ctx(pd->context);
    fv_pd *p = (fv_pd *)pd;
    pthread_mutex_lock(&w->mu);
    if (p->users) {
        pthread_mutex_unlock(&w->mu);
        return EBUSY;
    }
    w->live_pd--;
    pthread_mutex_unlock(&w->mu);
    free(p);
    return 0;
}

static struct ibv_mr *fv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    fv_world *w = fv_of_ctx(pd->context);
    fv_mr *m;
    if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL; /* as real providers: remote write needs local write */
        return NULL;
    }
    pthread_mutex_lock(&w->mu);
    w->reg_mrs++;
    if (w->fail_reg_mr_nth && w->reg_mrs == w->fail_reg_mr_nth) {
        pthread_mutex_unlock(&w->mu);
        errno = ENOMEM;
        return NULL;
    }
    m = (fv_mr *)calloc(1, sizeof *m);
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = len;
    m->access = access;
    m->mr.lkey = w->next_key;
    m->mr.rkey = w->next_key ^ 0x00ff0000u;
    w->next_key += 0x0101;
    m->next = w->mrs;
    w->mrs = m;
    ((fv_pd *)pd)->users++;
    w->live_mr++;
    pthread_mutex_unlock(&w->mu);
    return &m->mr;
}

static int fv_dereg_mr(struct ibv_mr *mr)
{
    fv_world *w = fv_of_ctx(mr->context);
    fv_mr **pp;
    pthread_mutex_lock(&w->mu);
    for (pp = &w->mrs; *pp; pp = &(*pp)->next)
        if (&(*pp)->mr == mr) {
            *pp = (*pp)->next;
            break;
        }
    ((fv_pd *)mr->pd)->users--;
    w->live_mr--;
    pthread_mutex_unlock(&w->mu);
    free(mr);
    return 0;
}

static struct ibv_cq *fv_create_cq(struct ibv_context *c, int cqe, void *user, struct ibv_comp_channel *ch, int vec)
{
    fv_world *w = fv_of_ctx(c);
    fv_cq *q;
    (void)ch;
    (void)vec;
    if (cqe < 1 || cqe > (1 << 20)) {
        errno = EINVAL;
        return NULL;
    }
    q = (fv_cq *)calloc(1, sizeof *q);
    q->cq.context = c;
    q->cq.cq_context = user;
    q->cq.cqe = cqe;
    q->cap = cqe;
    q->q = (fv_cqe *)calloc((size_t)cqe, sizeof *q->q);
    pthread_mutex_lock(&w->mu);
    w->live_cq++;
    pthread_mutex_unlock(&w->mu);
    return &q->cq;
}

static int fv_destroy_cq(struct ibv_cq *cq)
{
    fv_world *w = fv_of_ctx(cq->context);
    fv_cq *q = (fv_cq *)cq;
    pthread_mutex_lock(&w->mu);
    if (q->users) {
        pthread_mutex_unlock(&w->mu);
        return EBUSY;
    }
    w->live_cq--;
    pthread_mutex_unlock(&w->mu);
    free(q->q);
    free(q);
    return 0;
}

static struct ibv_qp *fv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
    fv_world *w = fv_of_ctx(pd->context);
    fv_qp *q;
    if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq || a->cap.max_send_wr < 1 ||
        a->cap.max_send_wr > 16384 || a->cap.max_recv_wr > 16384 || a->cap.max_send_sge > 4 || a->cap.max_recv_sge > 4) {
        errno = EINVAL;
        return NULL;
    }
    pthread_mutex_lock(&w->mu);
    w->create_qps++;
    if (w->fail_create_qp_nth && w->create_qps == w->fail_create_qp_nth) {
        pthread_mutex_unlock(&w->mu);
        errno = ENOMEM;
        return NULL;
    }
    q = (fv_qp *)calloc(1, sizeof *q);
    q->qp.context = pd->context;
    q->qp.pd = pd;
    q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq;
    q->qp.qp_type = IBV_QPT_RC;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_num = w->next_qpn++;
    q->dev = ((fv_ctx *)pd->context)->dev;
    q->max_send_wr = a->cap.max_send_wr;
    q->max_recv_wr = a->cap.max_recv_wr ? a->cap.max_recv_wr : 1;
    q->sq = (fv_wr *)calloc(q->max_send_wr, sizeof *q->sq);
    q->rq = (uint64_t *)calloc(q->max_recv_wr, sizeof *q->rq);
    q->next = w->qps;
    w->qps = q;
    ((fv_pd *)pd)->users++;
    ((fv_cq *)a->send_cq)->users++;
    ((fv_cq *)a->recv_cq)->users++;
    w->live_qp++;
    pthread_mutex_unlock(&w->mu);
    return &q->qp;
}

/* The masks real providers require for each RC transition. */
static int fv_modify_locked(fv_qp *q, struct ibv_qp_attr *a, int mask)
{
    int from = q->qp.state, to = (mask & IBV_QP_STATE) ? (int)a->qp_state : from;
    const fv_port *pt;
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
        if (to == IBV_QPS_ERR) fv_qp_error(q);
        q->qp.state = (enum ibv_qp_state)to;
        return 0;
    }
    if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
        int need = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        if ((mask & need) != need || a->port_num < 1 || a->port_num > q->dev->n_ports) return EINVAL;
        q->port = a->port_num;
        q->access = (int)a->qp_access_flags;
    } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
        int need = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        if ((mask & need) != need) return EINVAL;
        pt = &q->dev->port[q->port - 1];
        if ((int)a->path_mtu > pt->mtu || a->path_mtu < IBV_MTU_256 || a->ah_attr.port_num != q->port) return EINVAL;
        if (pt->link == IBV_LINK_LAYER_ETHERNET) {
            static const uint8_t zero[16] = {0};
            if (!a->ah_attr.is_global || memcmp(a->ah_attr.grh.dgid.raw, zero, 16) == 0 ||
                a->ah_attr.grh.sgid_index >= FV_GIDS || memcmp(pt->gid[a->ah_attr.grh.sgid_index], zero, 16) == 0)
                return EINVAL;
        } else if (a->ah_attr.dlid == 0) {
            return EINVAL;
        }
        q->dest_qpn = a->dest_qp_num;
        q->rq_psn = a->rq_psn;
        q->mtu = a->path_mtu;
        q->is_global = a->ah_attr.is_global;
        q->dlid = a->ah_attr.dlid;
        memcpy(q->dgid, a->ah_attr.grh.dgid.raw, 16);
    } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
        int need = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                   IBV_QP_MAX_QP_RD_ATOMIC;
        if ((mask & need) != need) return EINVAL;
        q->sq_psn = a->sq_psn;
        q->rnr_retry = a->rnr_retry;
    } else {
        return EINVAL;
    }
    q->qp.state = (enum ibv_qp_state)to;
    return 0;
}

static int fv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    fv_world *w = fv_of_ctx(qp->context);
    int rc;
    pthread_mutex_lock(&w->mu);
    rc = fv_modify_locked((fv_qp *)qp, a, mask);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static int fv_destroy_qp(struct ibv_qp *qp)
{
    fv_world *w = fv_of_ctx(qp->context);
    fv_qp *q = (fv_qp *)qp, **pp;
    pthread_mutex_lock(&w->mu);
    for (pp = &w->qps; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    ((fv_pd *)qp->pd)->users--;
    ((fv_cq *)qp->send_cq)->users--;
    ((fv_cq *)qp->recv_cq)->users--;
    w->live_qp--;
    pthread_mutex_unlock(&w->mu);
    free(q->sq);
    free(q->rq);
    free(q);
    return 0;
}

static int fv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    fv_world *w = fv_of_ctx(qp->context);
    fv_qp *q = (fv_qp *)qp;
    int rc = 0;
    pthread_mutex_lock(&w->mu);
    for (; wr; wr = wr->next) {
        fv_wr *r;
        w->posts++;
        if (q->qp.state != IBV_QPS_RTS) rc = EINVAL;
        else if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) rc = EINVAL;
        else if (wr->num_sge < 0 || wr->num_sge > 1 || (wr->num_sge && !wr->sg_list)) rc = EINVAL;
        else if (q->posted - q->retired >= q->max_send_wr) rc = ENOMEM;
        else if (w->fail_post_nth && w->posts == w->fail_post_nth) rc = ENOMEM;
        if (rc) {
            if (rc == ENOMEM) w->enomem++;
            *bad = wr;
            break;
        }
        r = &q->sq[(q->sq_head + q->sq_n) % q->max_send_wr];
        memset(r, 0, sizeof *r);
        r->wr_id = wr->wr_id;
        r->seq = ++q->posted;
        r->opcode = wr->opcode;
        r->signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
        if (wr->num_sge) {
            r->laddr = wr->sg_list[0].addr;
            r->len = wr->sg_list[0].length;
            r->lkey = wr->sg_list[0].lkey;
        }
        r->raddr = wr->wr.rdma.remote_addr;
        r->rkey = wr->wr.rdma.rkey;
        r->imm = wr->imm_data;
        r->at_us = fv_now_us();
        q->sq_n++;
        if (q->posted - q->retired > w->max_outstanding) w->max_outstanding = q->posted - q->retired;
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static int fv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    fv_world *w = fv_of_ctx(qp->context);
    fv_qp *q = (fv_qp *)qp;
    int rc = 0;
    pthread_mutex_lock(&w->mu);
    for (; wr; wr = wr->next) {
        if (q->qp.state == IBV_QPS_RESET) rc = EINVAL;
        else if (q->rq_n == q->max_recv_wr) rc = ENOMEM;
        if (rc) {
            *bad = wr;
            break;
        }
        q->rq[(q->rq_head + q->rq_n) % q->max_recv_wr] = wr->wr_id;
        q->rq_n++;
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static int fv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    fv_world *w = fv_of_ctx(cq->context);
    fv_cq *c = (fv_cq *)cq;
    int k = 0;
    pthread_mutex_lock(&w->mu);
    if (c->overrun) {
        pthread_mutex_unlock(&w->mu);
        return -1;
    }
    while (k < n && c->n) {
        fv_cqe *e = &c->q[c->head];
        wc[k++] = e->wc;
        if (e->send) {
            fv_qp *q = fv_find_qp(w, e->wc.qp_num);
            if (q && e->seq > q->retired) q->retired = e->seq;
        }
        c->head = (c->head + 1) % c->cap;
        c->n--;
    }
    pthread_mutex_unlock(&w->mu);
    return k;
}

static wsync_verbs_ops fv_ops(fv_world *w)
{
    wsync_verbs_ops o;
    memset(&o, 0, sizeof o);
    o.user = w;
    o.get_device_list = fv_get_device_list;
    o.free_device_list = fv_free_device_list;
    o.get_device_name = fv_get_device_name;
    o.open_device = fv_open_device;
    o.close_device = fv_close_device;
    o.query_device = fv_query_device;
    o.query_port = fv_query_port;
    o.query_gid = fv_query_gid;
    o.alloc_pd = fv_alloc_pd;
    o.dealloc_pd = fv_dealloc_pd;
    o.reg_mr = fv_reg_mr;
    o.dereg_mr = fv_dereg_mr;
    o.create_cq = fv_create_cq;
    o.destroy_cq = fv_destroy_cq;
    o.create_qp = fv_create_qp;
    o.modify_qp = fv_modify_qp;
    o.destroy_qp = fv_destroy_qp;
    o.post_send = fv_post_send;
    o.post_recv = fv_post_recv;
    o.poll_cq = fv_poll_cq;
    return o;
}

#endif
