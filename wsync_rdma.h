/* wsync_rdma.h - the direct path: one-sided writes into inference memory.

OVERVIEW
========
Inside a cluster, trainer ranks write weights straight into the inference
ranks' memory: the receiver registers a region, hands its descriptor to
the sender over any control channel, and the sender writes at offsets; the
receiving application's threads do nothing. This header provides backends
for the `wsync_fabric` interface of wsync.h ("Fabric: one-sided writes"):

    one-host  processes on one machine. Mode CMA: process_vm_writev straight
              into the receiver's memory (a syscall, no receiver CPU at all).
              Mode SHM, the fallback where ptrace rules forbid CMA: the
              region lives in a memfd (wsync_fabric_host_alloc) that the
              sender maps after receiving it over a Unix socket; a write is
              a memcpy.
    TCP       clusters without RDMA: a receiver thread (started by the
              first reg) reads framed writes and puts the bytes straight
              into the registered memory, checking region, key and bounds
              of every frame first.
    verbs     RDMA RC (InfiniBand or RoCE) through libibverbs: RDMA WRITE
              and WRITE_WITH_IMM from registered memory on one or several
              NICs; queue pairs are connected over a small TCP control
              connection (the receiver's listener thread, started by the
              first reg). Every verbs call goes through a table
              (wsync_verbs_ops): libibverbs loaded at run time by default,
              or the caller's (tests/fake_verbs.h is an in-memory one).

The verbs backend has NEVER RUN ON A NIC: it is tested only against the
fake provider in tests/fake_verbs.h. Expect the first run on hardware to
find what a fake cannot (provider limits, RoCE GID types, timeouts).
Still to come (issue 6): the controller protocol, the schedule and the
pipeline.

QUICK START
===========
    #define WSYNC_IMPLEMENTATION
    #define WSYNC_RDMA_IMPLEMENTATION   (before any #include: see PLATFORM)
    #include "wsync_rdma.h"

    receiver:                                  sender:
    wsync_fabric f;                            wsync_fabric f;
    wsync_fabric_tcp_open(NULL, &f, &err);     wsync_fabric_tcp_options o = {0};
    f.reg(f.user, weights, n, WSYNC_MEM_HOST,  o.send_only = 1;
          &mr, &desc, &err);                   wsync_fabric_tcp_open(&o, &f, &err);
    wsync_fabric_desc_encode(&desc, wire);     f.reg(f.user, src, n, WSYNC_MEM_HOST, &smr, &unused, &err);
    ... send wire to the sender ...            wsync_fabric_desc_decode(wire, sizeof wire, &desc, &err);
                                               f.open_remote(f.user, &desc, &rem, &err);
                                               f.write(f.user, smr, 0, rem, 0, n, &err);
                                               f.flush(f.user, &err);   (the bytes are in place)
    wsync_fabric_close(&f);                    wsync_fabric_close(&f);

A sender must register its source memory too (`write` takes a registered
source); `send_only` keeps such a fabric from listening.
RDMA: wsync_fabric_verbs_open(&opts, &f, &err) in place of
wsync_fabric_tcp_open (opts.devices = "mlx5_0,mlx5_1" for two NICs); the
calls are the same.

SEMANTICS PER BACKEND
=====================
                 one-host CMA          one-host SHM          TCP
    write        process_vm_writev,    memcpy into the       frame to the receiver
                 done on return        mapping, done on      thread (sent from the
                                       return                source, no copy)
    write_imm    write, then the immediate on the Unix       after the bytes, in
                 socket; the receiver's thread queues it     the same stream
    flush        full fence; fails if a receiver went away   waits for an ack from
                 (its socket closed)                         every remote written to
    recv_imm     the region's queue of immediates (receiver side), in arrival order

    verbs
    write        RDMA WRITE requests of at most max_wr_bytes (and both ports'
                 max_msg_sz), posted and returned: not done on return.
                 Writes of split_min bytes per lane or more are split across
                 every lane on 4 KiB boundaries, shorter ones go round-robin.
                 Every signal_every-th request asks for a completion; a full
                 send queue (sq_depth, or ENOMEM from the provider) is polled
                 until it has room (back-pressure, bounded by timeout_ms).
                 Overlapping writes to one remote may land in any order
                 across lanes: flush between them.
    write_imm    the other lanes drained first (RC orders one queue pair
                 only), then the bytes and WRITE_WITH_IMM on lane 0: the
                 immediate arrives after every byte written to that remote.
    flush        every lane of every remote drained (an empty signaled write
                 after an unsignaled tail); timeout_ms bounds it.
    recv_imm     lane 0 of each connection posts rq_depth receives; its
                 connection thread polls the completions every millisecond
                 (no completion channel yet), queues each immediate on the
                 connection's region and posts the receive again.
    An error completion (named: IBV_WC_REM_ACCESS_ERR, RETRY_EXC_ERR, ...,
    with the NIC) breaks the remote, as does the control connection
    closing (the receiver exited or deregistered the region).

Writes check the source and destination bounds locally (WSYNC_ERR_OUT_OF_BOUNDS).
A remote whose receiver failed (exited, closed the connection, refused a
frame, stalled past the timeout) is broken: every later write and flush
fails with WSYNC_ERR_IO naming the reason; close it and open it again.
Calls on one fabric are not thread-safe with each other except recv_imm
(any thread) and the fabric's own receiver thread. Deregister a region only
when no sender writes to it any more: with CMA nothing can stop a write
already issued (dereg closes the senders' connections, which makes their
next write fail).

ONE-HOST: WHICH MODE
====================
The receiver's reg offers CMA for any memory and SHM for memory from
wsync_fabric_host_alloc (options.mode restricts either side). The
sender's open_remote, in AUTO mode, probes CMA with an 8-byte write to a
word the receiver keeps for this; if the kernel refuses (Yama
ptrace_scope, another uid, seccomp in a container) it takes SHM when
offered, and otherwise fails with the reason and what to change.
wsync_fabric_host_remote_mode says which mode a remote uses. The Unix
socket is in Linux's abstract namespace (one network namespace).

VERBS: NICS, LANES, CONNECTIONS
===============================
options.devices picks the NICs ("mlx5_0:1,mlx5_1", "all"; default: the
first active port); each has its own PD, and every region is registered
on each (its descriptor carries an rkey per NIC). Opening a remote makes
max(sender NICs, receiver NICs) lanes, lane i from the sender's NIC
i % S to the receiver's i % R, each an RC queue pair with its own CQ on
both sides, over one TCP control connection per remote. Queue pairs are
not shared across regions: an immediate carries 32 bits of the caller's
and nothing else, so the queue pair it arrives on is what names its
region. RoCE ports address peers by GID (is_global, GRH; the index from
options or the first IPv4-mapped one), InfiniBand ports by LID; both
sides must share the link layer. Each side picks a random 24-bit PSN.

VERBS WIRE FORMAT (little-endian)
=================================
    descriptor bytes (version 1): u16 control port, u8 host length (1..63),
           u8 NICs (1..8), u32 region, u64 key, u64 fabric instance,
           u32 rkey per NIC, host
    hello  32 bytes: "WSV1", version 1, total length, region, key (64),
           lanes (1..8), 0; then 40 bytes per lane
    reply  the same with "WSV2" and a status (0, or why it was refused) in
           place of the region, key 0
    lane   u32 the receiver's NIC index, u32 QP number (24 bits), u32 PSN
           (24 bits), u32 max message size, u16 LID, u8 RoCE (0/1), u8 MTU
           (IBV_MTU_256..4096), u8 port, 3 zero bytes, GID (16)
Both sides check every field against their own (lengths, version, ranges,
the NIC's link layer) before it reaches a verb; a peer that sends nothing,
or not all of it, within timeout_ms fails the handshake. After the reply
the connection carries nothing: its closing tells either side the other
went away, and the receiver then destroys its queue pairs.

TCP WIRE FORMAT (little-endian)
===============================
    frame  48 bytes: "WSF1", type (1 write, 2 write+imm, 3 flush), region,
           imm, key (64), offset (64), length (64), seq (64); then length bytes
    ack    16 bytes: "WSA1", status (0, or the reason a frame was refused), seq
The receiver checks magic, type, region, key and offset + length against
the region before a byte is written; a refused frame gets an ack with the
reason, its connection is closed, and it is counted (wsync_fabric_stats).

PLATFORM
========
Linux (all backends), POSIX threads. The implementation needs glibc's
GNU declarations (process_vm_writev, memfd_create, accept4): this header
defines _GNU_SOURCE itself when WSYNC_RDMA_IMPLEMENTATION is defined before
the first #include of the translation unit; otherwise define _GNU_SOURCE
there yourself. Without them (or off Linux, or with WSYNC_NO_THREADS) the
open functions fail with WSYNC_ERR_UNSUPPORTED and say why. No rdma-core
is needed to build or link: the verbs backend is compiled where
<infiniband/verbs.h> is found (WSYNC_RDMA_AVAILABLE 1; WSYNC_RDMA_NO_VERBS
leaves it out) and loads libibverbs.so.1 with dlopen when a fabric opens
with the default table; without it wsync_fabric_verbs_open fails with
WSYNC_ERR_UNSUPPORTED (no headers) or WSYNC_ERR_IO ("libibverbs not
found", "no RDMA devices"). Register memory within RLIMIT_MEMLOCK.
Senders should not rely on SIGPIPE being ignored: every send uses
MSG_NOSIGNAL.

LICENSE
=======
MIT, as wsync.h.
*/
#if defined(WSYNC_RDMA_IMPLEMENTATION) && defined(__linux__) && !defined(_GNU_SOURCE) && !defined(_FEATURES_H)
#define _GNU_SOURCE 1
#endif

#ifndef WSYNC_RDMA_H
#define WSYNC_RDMA_H

#include "wsync.h"

/* The ibverbs backend is compiled where rdma-core's headers are found
   (<infiniband/verbs.h>; Debian: libibverbs-dev), on Linux with threads;
   define WSYNC_RDMA_NO_VERBS to leave it out. Nothing links libibverbs:
   it is loaded at run time. WSYNC_RDMA_AVAILABLE says whether it is in. */
#if !defined(WSYNC_RDMA_NO_VERBS) && defined(__linux__) && !defined(WSYNC_NO_THREADS) && defined(__has_include)
#if __has_include(<infiniband/verbs.h>)
#define WSYNC__HAVE_VERBS 1
#endif
#endif
#ifndef WSYNC__HAVE_VERBS
#define WSYNC__HAVE_VERBS 0
#endif
#define WSYNC_RDMA_AVAILABLE WSYNC__HAVE_VERBS

#ifdef __cplusplus
extern "C" {
#endif

#define WSYNC_RDMA_REQUIRES_VERSION 100

#if WSYNC_VERSION_NUMBER < WSYNC_RDMA_REQUIRES_VERSION
#error "wsync_rdma.h needs a newer wsync.h"
#endif

/* Backend ids (wsync_fabric.backend and wsync_fabric_desc.backend). */
#define WSYNC_FABRIC_VERBS 1u /* ibverbs RC RDMA WRITE */
#define WSYNC_FABRIC_HOST 2u  /* one host: process_vm_writev or shared memory */
#define WSYNC_FABRIC_TCP 3u   /* TCP with a receiver thread */

/* Counters of a fabric's receiver side since open. */
typedef struct wsync_fabric_stats {
    uint64_t connections;      /* accepted from senders */
    uint64_t frames;           /* TCP: write frames applied; one-host: immediates received */
    uint64_t bytes;            /* TCP: payload bytes written into regions */
    uint64_t imms;             /* immediates queued for recv_imm */
    uint64_t rejected;         /* frames or handshakes refused (magic, region, key, bounds):
                                  nothing written, the connection closed */
    uint64_t dropped;          /* connections that ended inside a frame (sender gone, or
                                  stalled past the timeout) */
    char last_reject[128];     /* why the last refusal happened */
} wsync_fabric_stats;

/* 1 and *out filled when f is a TCP, one-host or verbs fabric; 0 otherwise.
   verbs: frames counts immediates received; bytes stays 0 (the receiver
   sees none). */
WSYNC_DEF int wsync_fabric_stats_get(const wsync_fabric *f, wsync_fabric_stats *out);

/* ---- TCP ------------------------------------------------------------- */

/* All zero (or NULL) means the defaults in brackets. */
typedef struct wsync_fabric_tcp_options {
    wsync_allocator allocator;
    const char *bind_host;         /* [127.0.0.1] where the receiver listens ("0.0.0.0", "::", a name) */
    unsigned port;                 /* [0: ephemeral] */
    const char *advertise_host;    /* [bind_host, or gethostname() for a wildcard] put in descriptors */
    unsigned connect_timeout_ms;   /* [5000] */
    unsigned timeout_ms;           /* [10000] flush's wait for acks, a stalled send, and at the
                                      receiver the rest of a frame once it started */
    unsigned socket_buffer;        /* [8 MiB] SO_SNDBUF and SO_RCVBUF, when the process may go past
                                      the system's caps (CAP_NET_ADMIN); else autotuning decides */
    unsigned chunk;                /* [4 MiB] bytes per send call */
    unsigned max_connections;      /* [256] served at once by the receiver thread */
    int send_only;                 /* 1: reg never starts the receiver (a sender's fabric) */
} wsync_fabric_tcp_options;

/* A TCP fabric. The receiver starts (listening) at the first reg unless
   send_only; its descriptors carry the advertised host and port, the
   region's id and a random 64-bit key. */
WSYNC_DEF wsync_result wsync_fabric_tcp_open(const wsync_fabric_tcp_options *opt, wsync_fabric *out,
                                             wsync_error *err);
/* The port the receiver listens on (0 before the first reg, or for another backend). */
WSYNC_DEF unsigned wsync_fabric_tcp_port(const wsync_fabric *f);

/* ---- one host --------------------------------------------------------- */

typedef enum wsync_fabric_host_mode {
    WSYNC_FABRIC_HOST_AUTO = 0,    /* CMA when the kernel allows it, else SHM where offered */
    WSYNC_FABRIC_HOST_CMA = 1,     /* process_vm_writev only */
    WSYNC_FABRIC_HOST_SHM = 2      /* shared memory only */
} wsync_fabric_host_mode;

typedef struct wsync_fabric_host_options {
    wsync_allocator allocator;
    wsync_fabric_host_mode mode;   /* receiver: what reg offers; sender: what open_remote takes */
    int allow_any_writer;          /* receiver: prctl(PR_SET_PTRACER_ANY) at open, so that under Yama
                                      ptrace_scope 1 processes that are not its ancestors may use
                                      CMA (process-wide; also allows them to ptrace it) */
    unsigned timeout_ms;           /* [5000] the handshake at open_remote, a stalled send */
    int send_only;                 /* 1: reg never starts the receiver thread */
} wsync_fabric_host_options;

WSYNC_DEF wsync_result wsync_fabric_host_open(const wsync_fabric_host_options *opt, wsync_fabric *out,
                                              wsync_error *err);
/* Shared memory that reg can offer in SHM mode (a memfd, or shm_open where
   memfd_create is missing), mapped here at *ptr, zero-filled. */
WSYNC_DEF wsync_result wsync_fabric_host_alloc(wsync_fabric *f, uint64_t len, void **ptr, wsync_error *err);
/* Unmaps memory from wsync_fabric_host_alloc (deregister its regions first). */
WSYNC_DEF void wsync_fabric_host_free(wsync_fabric *f, void *ptr);
/* The mode an opened one-host remote writes with (CMA or SHM); AUTO when
   f or r is not one-host. */
WSYNC_DEF wsync_fabric_host_mode wsync_fabric_host_remote_mode(const wsync_fabric *f,
                                                               const wsync_fabric_remote *r);
/* 1 when this process may process_vm_writev into pid (an 8-byte probe:
   reads a word and writes it back, so use it only on memory nobody else
   writes, e.g. a child's); 0 and `why` filled otherwise. */
WSYNC_DEF int wsync_fabric_host_cma_allowed(int pid, const void *addr, char *why, size_t why_cap);

/* ======================================================================
   ibverbs (RDMA RC): declarations
   ======================================================================
   Every verbs call goes through wsync_verbs_ops, so that tests can put a
   fake provider (tests/fake_verbs.h) in place of libibverbs. The types are
   rdma-core's, declared here only as incomplete types: this part needs no
   <infiniband/verbs.h>; the implementation does. */

struct ibv_device;
struct ibv_context;
struct ibv_device_attr;
struct ibv_port_attr;
union ibv_gid;
struct ibv_pd;
struct ibv_mr;
struct ibv_cq;
struct ibv_comp_channel;
struct ibv_qp;
struct ibv_qp_init_attr;
struct ibv_qp_attr;
struct ibv_send_wr;
struct ibv_recv_wr;
struct ibv_wc;

/* The verbs the backend uses, with libibverbs' signatures, except that
   get_device_list (the only call without a verbs object to find its state
   through) takes `user`. */
typedef struct wsync_verbs_ops {
    void *user;
    struct ibv_device **(*get_device_list)(void *user, int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
    int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
    const char *(*wc_status_str)(int status);   /* optional: NULL uses wsync's own names */
} wsync_verbs_ops;

#define WSYNC_VERBS_MAX_NICS 8

/* All zero (or NULL) means the defaults in brackets. */
typedef struct wsync_fabric_verbs_options {
    wsync_allocator allocator;
    const wsync_verbs_ops *ops;    /* [libibverbs, loaded at run time with dlopen("libibverbs.so.1")] */
    const char *devices;           /* [the first active port] NICs to use, comma-separated:
                                      "mlx5_0:1,mlx5_1" (no port: the device's first active one),
                                      or "all": every active port of every device */
    int use_gid_index;             /* 1: RoCE ports use gid_index; [0: the first IPv4-mapped GID
                                      (RoCE v2 over IPv4, usually), else the first non-zero one] */
    int gid_index;
    unsigned sq_depth;             /* [256] work requests outstanding per queue pair at most */
    unsigned signal_every;         /* [sq_depth / 4] every Nth write request asks for a completion */
    unsigned rq_depth;             /* [256] receives kept posted per connection (for write_imm) */
    unsigned max_wr_bytes;         /* [1 GiB, and both ports' max_msg_sz] bytes per work request */
    unsigned split_min;            /* [256 KiB] writes shorter than this per NIC use one NIC */
    /* the control connection (a TCP listener, started by the first reg) */
    const char *bind_host;         /* [127.0.0.1] */
    unsigned port;                 /* [0: ephemeral] */
    const char *advertise_host;    /* [bind_host, or gethostname() for a wildcard] */
    unsigned connect_timeout_ms;   /* [5000] */
    unsigned timeout_ms;           /* [10000] the handshake, flush's wait for completions, a full
                                      send queue */
    int send_only;                 /* 1: reg never starts the listener (a sender's fabric) */
} wsync_fabric_verbs_options;

/* An RDMA RC fabric over every NIC in options.devices. Fails with
   WSYNC_ERR_UNSUPPORTED when built without rdma-core's headers, and with
   WSYNC_ERR_IO naming what is missing when libibverbs, devices or active
   ports are not there. */
WSYNC_DEF wsync_result wsync_fabric_verbs_open(const wsync_fabric_verbs_options *opt, wsync_fabric *out,
                                               wsync_error *err);
/* The control listener's port (0 before the first reg, or for another backend). */
WSYNC_DEF unsigned wsync_fabric_verbs_port(const wsync_fabric *f);

/* Sender-side counters of a verbs fabric since open. */
typedef struct wsync_fabric_verbs_stats {
    unsigned n_nics;
    struct {
        char name[72];             /* "mlx5_0:1" */
        int ethernet;              /* 1: RoCE (GRH addressing), 0: InfiniBand (LID) */
        uint64_t bytes;            /* bytes of write requests posted through it */
        uint64_t wrs;              /* write requests posted */
    } nic[WSYNC_VERBS_MAX_NICS];
    uint64_t signaled;             /* requests that asked for a completion */
    uint64_t completions;          /* completions polled */
    uint64_t sq_full_waits;        /* posts that waited for a full send queue to drain */
    uint64_t enomem_retries;       /* post_send ENOMEM answered by polling and retrying */
    uint64_t imms;                 /* immediates sent */
} wsync_fabric_verbs_stats;

/* 1 and *out filled when f is a verbs fabric; 0 otherwise. */
WSYNC_DEF int wsync_fabric_verbs_stats_get(const wsync_fabric *f, wsync_fabric_verbs_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_RDMA_H */

/* ======================================================================
   IMPLEMENTATION
   ====================================================================== */
#if defined(WSYNC_RDMA_IMPLEMENTATION) && !defined(WSYNC__RDMA_IMPLEMENTED)
#define WSYNC__RDMA_IMPLEMENTED

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__) && !defined(WSYNC_NO_THREADS) && \
    (defined(__USE_GNU) || (!defined(__GLIBC__) && defined(_GNU_SOURCE)))
#define WSYNC__RDMA_OK 1
#else
#define WSYNC__RDMA_OK 0
#endif

#if WSYNC__RDMA_OK
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#if WSYNC__HAVE_VERBS
#include <arpa/inet.h>
#include <dlfcn.h>
#include <infiniband/verbs.h>
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Errors are filled here rather than through wsync.h's private helpers: the
   implementation of wsync.h may live in another translation unit. */
static wsync_result wsync__rfail(wsync_error *err, wsync_result code, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static wsync_result wsync__rfail(wsync_error *err, wsync_result code, const char *fmt, ...)
{
    va_list ap;
    if (!err) return code;
    err->code = code;
    err->offset = UINT64_MAX;
    err->tensor[0] = 0;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

static void wsync__rerr_reset(wsync_error *err)
{
    if (!err) return;
    err->code = WSYNC_OK;
    err->offset = UINT64_MAX;
    err->tensor[0] = 0;
    err->message[0] = 0;
}

#if !WSYNC__RDMA_OK

static wsync_result wsync__rno(wsync_error *err, const char *what)
{
    wsync__rerr_reset(err);
#if defined(__linux__) && !defined(WSYNC_NO_THREADS)
    return wsync__rfail(err, WSYNC_ERR_UNSUPPORTED,
                        "%s: built without GNU declarations: define _GNU_SOURCE (or WSYNC_RDMA_IMPLEMENTATION) "
                        "before the first #include of the implementation file", what);
#else
    return wsync__rfail(err, WSYNC_ERR_UNSUPPORTED, "%s: needs Linux and POSIX threads", what);
#endif
}

WSYNC_DEF int wsync_fabric_stats_get(const wsync_fabric *f, wsync_fabric_stats *out)
{
    (void)f;
    (void)out;
    return 0;
}
WSYNC_DEF wsync_result wsync_fabric_tcp_open(const wsync_fabric_tcp_options *opt, wsync_fabric *out,
                                             wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    return wsync__rno(err, "the TCP fabric");
}
WSYNC_DEF unsigned wsync_fabric_tcp_port(const wsync_fabric *f)
{
    (void)f;
    return 0;
}
WSYNC_DEF wsync_result wsync_fabric_host_open(const wsync_fabric_host_options *opt, wsync_fabric *out,
                                              wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    return wsync__rno(err, "the one-host fabric");
}
WSYNC_DEF wsync_result wsync_fabric_host_alloc(wsync_fabric *f, uint64_t len, void **ptr, wsync_error *err)
{
    (void)f;
    (void)len;
    if (ptr) *ptr = NULL;
    return wsync__rno(err, "wsync_fabric_host_alloc");
}
WSYNC_DEF void wsync_fabric_host_free(wsync_fabric *f, void *ptr)
{
    (void)f;
    (void)ptr;
}
WSYNC_DEF wsync_fabric_host_mode wsync_fabric_host_remote_mode(const wsync_fabric *f,
                                                               const wsync_fabric_remote *r)
{
    (void)f;
    (void)r;
    return WSYNC_FABRIC_HOST_AUTO;
}
WSYNC_DEF int wsync_fabric_host_cma_allowed(int pid, const void *addr, char *why, size_t why_cap)
{
    (void)pid;
    (void)addr;
    if (why && why_cap) snprintf(why, why_cap, "%s", "not built with the one-host backend");
    return 0;
}
WSYNC_DEF wsync_result wsync_fabric_verbs_open(const wsync_fabric_verbs_options *opt, wsync_fabric *out,
                                               wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    return wsync__rno(err, "the verbs fabric");
}
WSYNC_DEF unsigned wsync_fabric_verbs_port(const wsync_fabric *f)
{
    (void)f;
    return 0;
}
WSYNC_DEF int wsync_fabric_verbs_stats_get(const wsync_fabric *f, wsync_fabric_verbs_stats *out)
{
    (void)f;
    (void)out;
    return 0;
}

#else /* WSYNC__RDMA_OK */

/* ---------------------------------------------------------------------
   Common: bytes, time, randomness, allocation
   --------------------------------------------------------------------- */

#define WSYNC__TCP_MAGIC 0x31465357u   /* "WSF1" */
#define WSYNC__ACK_MAGIC 0x31415357u   /* "WSA1" */
#define WSYNC__HELLO_MAGIC 0x31485357u /* "WSH1" */
#define WSYNC__REPLY_MAGIC 0x32485357u /* "WSH2" */
#define WSYNC__IMM_MAGIC 0x31495357u   /* "WSI1" */
#define WSYNC__TCP_HDR 48
#define WSYNC__ACK_LEN 16
#define WSYNC__HELLO_LEN 24
#define WSYNC__REPLY_LEN 40
#define WSYNC__IMM_LEN 16
#define WSYNC__IMM_QUEUE_MAX (1u << 24)
#define WSYNC__HOST_NAME_MAX 100

enum {
    WSYNC__FR_WRITE = 1,
    WSYNC__FR_IMM = 2,
    WSYNC__FR_FLUSH = 3
};

/* Why the receiver refused a frame (the ack's status). */
enum {
    WSYNC__REJ_MAGIC = 1,
    WSYNC__REJ_REGION = 2,
    WSYNC__REJ_KEY = 3,
    WSYNC__REJ_BOUNDS = 4,
    WSYNC__REJ_QUEUE = 5,
    WSYNC__REJ_FLUSH = 6
};

static const char *wsync__rej_str(uint32_t s)
{
    switch (s) {
    case WSYNC__REJ_MAGIC: return "bad magic or frame type";
    case WSYNC__REJ_REGION: return "unknown region (never registered, or deregistered)";
    case WSYNC__REJ_KEY: return "wrong key";
    case WSYNC__REJ_BOUNDS: return "offset and length outside the region";
    case WSYNC__REJ_QUEUE: return "immediate queue full (nobody calls recv_imm)";
    case WSYNC__REJ_FLUSH: return "malformed flush frame";
    default: return "unknown reason";
    }
}

static void wsync__rput32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static void wsync__rput64(uint8_t *p, uint64_t v)
{
    wsync__rput32(p, (uint32_t)v);
    wsync__rput32(p + 4, (uint32_t)(v >> 32));
}
static uint32_t wsync__rget32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t wsync__rget64(const uint8_t *p)
{
    return (uint64_t)wsync__rget32(p) | (uint64_t)wsync__rget32(p + 4) << 32;
}

static int64_t wsync__rnow_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t wsync__rmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Keys need to be unguessable by other processes, not cryptographic. */
static uint64_t wsync__rrandom64(void)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    struct timespec ts;
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0;
        close(fd);
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    return v ^ wsync__rmix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 20) ^
                           (uint64_t)(uintptr_t)&v);
}

static void *wsync__ralloc(const wsync_allocator *a, size_t n)
{
    void *p;
    if (n == 0) n = 1;
    p = a->alloc ? a->alloc(a->user, n) : WSYNC_MALLOC(n);
    if (p) memset(p, 0, n);
    return p;
}

static void wsync__rfree(const wsync_allocator *a, void *p)
{
    if (!p) return;
    if (a->free) a->free(a->user, p);
    else WSYNC_FREE(p);
}

/* 1 when [off, off + len) lies in [0, size). */
static int wsync__rin(uint64_t off, uint64_t len, uint64_t size)
{
    return len <= size && off <= size - len;
}

/* Reads exactly len bytes. idle: the wait for the first byte is unbounded
   (between frames); once a byte arrived, each wait is at most timeout_ms.
   1 done, 0 clean end of stream before the first byte, -1 error or
   timeout (errno ETIMEDOUT). */
static int wsync__rrecv_full(int fd, void *buf, size_t len, int timeout_ms, int idle)
{
    uint8_t *p = (uint8_t *)buf;
    size_t got = 0;
    while (got < len) {
        struct pollfd pf;
        ssize_t n;
        int pr;
        pf.fd = fd;
        pf.events = POLLIN;
        pf.revents = 0;
        pr = poll(&pf, 1, idle && got == 0 ? -1 : timeout_ms);
        if (pr < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (pr == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        n = recv(fd, p + got, len - got, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return -1;
        }
        if (n == 0) {
            if (got == 0) return 0;
            errno = ECONNRESET;
            return -1;
        }
        got += (size_t)n;
    }
    return 1;
}

/* Sends exactly len bytes (SO_SNDTIMEO bounds a stall: EAGAIN). */
static int wsync__rsend_all(int fd, const void *buf, size_t len, int more)
{
    const uint8_t *p = (const uint8_t *)buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) errno = ETIMEDOUT;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void wsync__rset_timeouts(int fd, unsigned ms)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* Socket buffers above the system's caps (net.core.[rw]mem_max) need
   CAP_NET_ADMIN; without it the kernel's autotuning (which a plain
   SO_SNDBUF would switch off, capped lower) is left alone. */
static void wsync__rbig_buffers(int fd, unsigned size)
{
    int v = (int)size;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof v);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof v);
}

/* 1 when the peer closed (or reset) a connection it never writes on. */
static int wsync__rpeer_gone(int fd)
{
    struct pollfd pf;
    pf.fd = fd;
    pf.events = POLLIN;
    pf.revents = 0;
    return poll(&pf, 1, 0) != 0;
}

/* ---------------------------------------------------------------------
   Common: regions, immediates, the receiver thread
   --------------------------------------------------------------------- */

struct wsync_fabric_mr {
    struct wsync_fabric_mr *next;
    uint32_t backend, id;
    uint64_t key;
    uint8_t *addr;
    uint64_t len;
    unsigned refs;             /* receiver connections writing into it now */
    int linked;                /* in the fabric's list (peers may write) */
    uint32_t *q;               /* immediates: a ring */
    size_t q_cap, q_head, q_n;
    int shm_fd;                /* one-host SHM: the allocation's fd (borrowed), or -1 */
    uint64_t shm_off, shm_size;
    void *ext;                 /* verbs: the ibv_mr of each NIC */
};

struct wsync_fabric_remote {
    struct wsync_fabric_remote *next;
    uint32_t backend;
    int fd;
    uint32_t region;
    uint64_t key, addr, len;
    uint64_t seq, pending;     /* TCP: flushes sent, writes since the last flush */
    int broken;
    char why[400];
    char peer[96];
    int pid;                   /* one-host */
    int mode;
    uint8_t *map;              /* SHM: the mapping, and where the region starts in it */
    size_t map_len, map_delta;
    void *ext;                 /* verbs: the queue pairs, one per NIC lane */
};

typedef struct wsync__rconn {
    struct wsync__rconn *next;
    struct wsync__rbase *base;
    int fd, done;
    pthread_t th;
    struct wsync_fabric_mr *busy;  /* TCP: being written; one-host: bound by the handshake */
} wsync__rconn;

/* What both backends share: the receiver side and the list of remotes. */
typedef struct wsync__rbase {
    uint32_t backend;
    wsync_allocator a;
    pthread_mutex_t mu;
    pthread_cond_t imm_cv, ref_cv;
    struct wsync_fabric_mr *regions, *sources;
    struct wsync_fabric_remote *remotes;
    uint32_t next_id;
    unsigned timeout_ms, max_conns;
    int send_only;
    wsync_fabric_stats stats;
    /* the receiver thread */
    int lfd, wake[2], started, stop;
    pthread_t th;
    wsync__rconn *conns;
    unsigned n_conns;
    void (*serve)(struct wsync__rbase *b, wsync__rconn *c);
} wsync__rbase;

static wsync_result wsync__rbase_init(wsync__rbase *b, uint32_t backend, const wsync_allocator *a,
                                      wsync_error *err)
{
    b->backend = backend;
    if (a) b->a = *a;
    b->lfd = -1;
    b->wake[0] = b->wake[1] = -1;
    b->next_id = 1;
    if (pthread_mutex_init(&b->mu, NULL) != 0) return wsync__rfail(err, WSYNC_ERR_IO, "%s", "pthread_mutex_init");
    if (pthread_cond_init(&b->imm_cv, NULL) != 0) {
        pthread_mutex_destroy(&b->mu);
        return wsync__rfail(err, WSYNC_ERR_IO, "%s", "pthread_cond_init");
    }
    if (pthread_cond_init(&b->ref_cv, NULL) != 0) {
        pthread_cond_destroy(&b->imm_cv);
        pthread_mutex_destroy(&b->mu);
        return wsync__rfail(err, WSYNC_ERR_IO, "%s", "pthread_cond_init");
    }
    return WSYNC_OK;
}

static void wsync__rreject(wsync__rbase *b, const char *fmt, uint64_t a1, uint64_t a2)
{
    pthread_mutex_lock(&b->mu);
    b->stats.rejected++;
    snprintf(b->stats.last_reject, sizeof b->stats.last_reject, fmt, (unsigned long long)a1,
             (unsigned long long)a2);
    pthread_mutex_unlock(&b->mu);
}

/* Under b->mu. */
static struct wsync_fabric_mr *wsync__rfind(wsync__rbase *b, uint32_t id)
{
    struct wsync_fabric_mr *m;
    for (m = b->regions; m; m = m->next)
        if (m->id == id) return m;
    return NULL;
}

/* Under b->mu: 0, or a WSYNC__REJ_ reason. */
static int wsync__rimm_push(wsync__rbase *b, struct wsync_fabric_mr *m, uint32_t imm)
{
    if (m->q_n == m->q_cap) {
        size_t cap = m->q_cap ? m->q_cap * 2 : 1024, i;
        uint32_t *q;
        if (cap > WSYNC__IMM_QUEUE_MAX) return WSYNC__REJ_QUEUE;
        q = (uint32_t *)wsync__ralloc(&b->a, cap * sizeof *q);
        if (!q) return WSYNC__REJ_QUEUE;
        for (i = 0; i < m->q_n; i++) q[i] = m->q[(m->q_head + i) % m->q_cap];
        wsync__rfree(&b->a, m->q);
        m->q = q;
        m->q_cap = cap;
        m->q_head = 0;
    }
    m->q[(m->q_head + m->q_n) % m->q_cap] = imm;
    m->q_n++;
    b->stats.imms++;
    pthread_cond_broadcast(&b->imm_cv);
    return 0;
}

static wsync_result wsync__rrecv_imm(void *user, wsync_fabric_mr *mr, uint32_t *imm, int timeout_ms,
                                     wsync_error *err)
{
    wsync__rbase *b = (wsync__rbase *)user;
    struct timespec until;
    wsync_result r = WSYNC_OK;
    wsync__rerr_reset(err);
    if (!b || !mr || !imm) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "recv_imm arguments");
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms > 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->mu);
    while (mr->q_n == 0) {
        if (timeout_ms == 0) break;
        if (timeout_ms < 0) pthread_cond_wait(&b->imm_cv, &b->mu);
        else if (pthread_cond_timedwait(&b->imm_cv, &b->mu, &until) == ETIMEDOUT) break;
    }
    if (mr->q_n) {
        *imm = mr->q[mr->q_head];
        mr->q_head = (mr->q_head + 1) % mr->q_cap;
        mr->q_n--;
    } else {
        r = WSYNC_ERR_LIMIT;
    }
    pthread_mutex_unlock(&b->mu);
    if (r != WSYNC_OK)
        return wsync__rfail(err, r, "no immediate on region %u within %d ms", (unsigned)mr->id, timeout_ms);
    return WSYNC_OK;
}

static void *wsync__rconn_main(void *p)
{
    wsync__rconn *c = (wsync__rconn *)p;
    wsync__rbase *b = c->base;
    b->serve(b, c);
    pthread_mutex_lock(&b->mu);
    c->done = 1;
    c->busy = NULL;
    pthread_mutex_unlock(&b->mu);
    if (write(b->wake[1], "r", 1) < 0) { /* the acceptor reaps at its next wake-up anyway */
    }
    return NULL;
}

/* Joins and frees the connections whose thread ended (all of them at stop). */
static void wsync__rreap(wsync__rbase *b, int all)
{
    wsync__rconn *dead = NULL, **pp, *c;
    pthread_mutex_lock(&b->mu);
    pp = &b->conns;
    while ((c = *pp) != NULL) {
        if (all || c->done) {
            *pp = c->next;
            c->next = dead;
            dead = c;
            b->n_conns--;
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&b->mu);
    while (dead) {
        c = dead;
        dead = c->next;
        pthread_join(c->th, NULL);
        close(c->fd);
        wsync__rfree(&b->a, c);
    }
}

static void *wsync__rsrv_main(void *p)
{
    wsync__rbase *b = (wsync__rbase *)p;
    for (;;) {
        struct pollfd pf[2];
        int stop, fd;
        wsync__rconn *c;
        char drain[64];
        pf[0].fd = b->lfd;
        pf[0].events = POLLIN;
        pf[0].revents = 0;
        pf[1].fd = b->wake[0];
        pf[1].events = POLLIN;
        pf[1].revents = 0;
        if (poll(pf, 2, -1) < 0 && errno != EINTR) break;
        if (pf[1].revents)
            while (read(b->wake[0], drain, sizeof drain) > 0) {
            }
        pthread_mutex_lock(&b->mu);
        stop = b->stop;
        pthread_mutex_unlock(&b->mu);
        if (stop) break;
        wsync__rreap(b, 0);
        if (!(pf[0].revents & POLLIN)) continue;
        fd = accept4(b->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS)
                poll(NULL, 0, 10); /* out of descriptors: do not spin on the pending connection */
            continue;
        }
        c = (wsync__rconn *)wsync__ralloc(&b->a, sizeof *c);
        pthread_mutex_lock(&b->mu);
        if (!c || b->n_conns >= b->max_conns) {
            b->stats.rejected++;
            snprintf(b->stats.last_reject, sizeof b->stats.last_reject, "%s",
                     c ? "too many connections" : "out of memory for a connection");
            pthread_mutex_unlock(&b->mu);
            close(fd);
            wsync__rfree(&b->a, c);
            continue;
        }
        c->fd = fd;
        c->base = b;
        c->next = b->conns;
        b->conns = c;
        b->n_conns++;
        b->stats.connections++;
        if (pthread_create(&c->th, NULL, wsync__rconn_main, c) != 0) {
            b->conns = c->next;
            b->n_conns--;
            pthread_mutex_unlock(&b->mu);
            close(fd);
            wsync__rfree(&b->a, c);
            continue;
        }
        pthread_mutex_unlock(&b->mu);
    }
    return NULL;
}

/* Starts the receiver thread on a bound, listening socket (taken over). */
static wsync_result wsync__rsrv_start(wsync__rbase *b, int lfd, wsync_error *err)
{
    if (pipe2(b->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        close(lfd);
        return wsync__rfail(err, WSYNC_ERR_IO, "pipe2: %s", strerror(errno));
    }
    b->lfd = lfd;
    if (pthread_create(&b->th, NULL, wsync__rsrv_main, b) != 0) {
        close(b->wake[0]);
        close(b->wake[1]);
        close(lfd);
        b->lfd = b->wake[0] = b->wake[1] = -1;
        return wsync__rfail(err, WSYNC_ERR_IO, "%s", "cannot start the receiver thread");
    }
    b->started = 1;
    return WSYNC_OK;
}

static void wsync__rsrv_stop(wsync__rbase *b)
{
    wsync__rconn *c;
    if (!b->started) return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_mutex_unlock(&b->mu);
    if (write(b->wake[1], "s", 1) < 0) { /* the pipe is full: a wake-up is pending already */
    }
    pthread_join(b->th, NULL);
    pthread_mutex_lock(&b->mu);
    for (c = b->conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&b->mu);
    wsync__rreap(b, 1);
    close(b->lfd);
    close(b->wake[0]);
    close(b->wake[1]);
    b->lfd = b->wake[0] = b->wake[1] = -1;
    b->started = 0;
}

/* Unlinks a region so no peer reaches it any more, cuts the connections
   using it, waits for writes into it to end, and frees it. */
static void wsync__runlink(wsync__rbase *b, struct wsync_fabric_mr *m)
{
    struct wsync_fabric_mr **pp;
    wsync__rconn *c;
    pthread_mutex_lock(&b->mu);
    for (pp = m->linked ? &b->regions : &b->sources; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    m->linked = 0;
    for (c = b->conns; c; c = c->next)
        if (c->busy == m) {
            shutdown(c->fd, SHUT_RDWR);
            c->busy = NULL; /* a one-host connection bound to m queues nothing more */
        }
    while (m->refs) pthread_cond_wait(&b->ref_cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

static void wsync__rdereg(void *user, wsync_fabric_mr *m)
{
    wsync__rbase *b = (wsync__rbase *)user;
    if (!b || !m) return;
    wsync__runlink(b, m);
    wsync__rfree(&b->a, m->q);
    wsync__rfree(&b->a, m);
}

/* Registers a region: linked (peers may write) when the receiver runs. */
static wsync_result wsync__rreg_common(wsync__rbase *b, void *addr, uint64_t len, wsync_mem_kind kind,
                                       struct wsync_fabric_mr **out, wsync_error *err)
{
    struct wsync_fabric_mr *m;
    uint64_t end;
    if (!b || !out || (!addr && len)) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "reg arguments");
    *out = NULL;
    if (kind != WSYNC_MEM_HOST)
        return wsync__rfail(err, WSYNC_ERR_UNSUPPORTED, "%s", "only host memory can be registered (no dmabuf yet)");
    if (len == 0) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "an empty region");
    if (!wsync_add_u64((uint64_t)(uintptr_t)addr, len, &end) || len > (uint64_t)(SIZE_MAX / 2))
        return wsync__rfail(err, WSYNC_ERR_OVERFLOW, "%s", "region address + length overflows");
    m = (struct wsync_fabric_mr *)wsync__ralloc(&b->a, sizeof *m);
    if (!m) return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "reg");
    m->backend = b->backend;
    m->addr = (uint8_t *)addr;
    m->len = len;
    m->key = wsync__rrandom64();
    m->shm_fd = -1;
    *out = m;
    return WSYNC_OK;
}

static void wsync__rlink(wsync__rbase *b, struct wsync_fabric_mr *m)
{
    pthread_mutex_lock(&b->mu);
    m->id = b->next_id++;
    if (b->next_id == 0) b->next_id = 1;
    if (b->started) {
        m->linked = 1;
        m->next = b->regions;
        b->regions = m;
    } else {
        m->next = b->sources;
        b->sources = m;
    }
    pthread_mutex_unlock(&b->mu);
}

static void wsync__rclose_remote(void *user, wsync_fabric_remote *r)
{
    wsync__rbase *b = (wsync__rbase *)user;
    struct wsync_fabric_remote **pp;
    if (!b || !r) return;
    for (pp = &b->remotes; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    if (r->fd >= 0) close(r->fd);
    if (r->map) munmap(r->map, r->map_len);
    wsync__rfree(&b->a, r);
}

/* Everything a fabric holds; the backend frees its own state after. */
static void wsync__rbase_close(wsync__rbase *b)
{
    wsync__rsrv_stop(b);
    while (b->remotes) wsync__rclose_remote(b, b->remotes);
    while (b->regions) wsync__rdereg(b, b->regions);
    while (b->sources) wsync__rdereg(b, b->sources);
    pthread_cond_destroy(&b->ref_cv);
    pthread_cond_destroy(&b->imm_cv);
    pthread_mutex_destroy(&b->mu);
}

static wsync_result wsync__rcheck_write(wsync__rbase *b, const wsync_fabric_mr *src, uint64_t src_off,
                                        const wsync_fabric_remote *dst, uint64_t dst_off, uint64_t len,
                                        wsync_error *err)
{
    if (!b || !src || !dst || src->backend != b->backend || dst->backend != b->backend)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "write: a region or remote of another fabric");
    if (!wsync__rin(src_off, len, src->len))
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_BOUNDS,
                            "write: source bytes %llu + %llu outside the registered %llu",
                            (unsigned long long)src_off, (unsigned long long)len, (unsigned long long)src->len);
    if (!wsync__rin(dst_off, len, dst->len))
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_BOUNDS,
                            "write: %llu bytes at %llu outside %s region %u (%llu bytes)", (unsigned long long)len,
                            (unsigned long long)dst_off, dst->peer, (unsigned)dst->region,
                            (unsigned long long)dst->len);
    if (dst->broken)
        return wsync__rfail(err, WSYNC_ERR_IO, "write to %s region %u: %s", dst->peer, (unsigned)dst->region,
                            dst->why);
    return WSYNC_OK;
}

static wsync_result wsync__rbreak(wsync_fabric_remote *r, wsync_error *err, const char *fmt, const char *arg)
{
    r->broken = 1;
    snprintf(r->why, sizeof r->why, fmt, arg);
    return wsync__rfail(err, WSYNC_ERR_IO, "%s region %u: %s", r->peer, (unsigned)r->region, r->why);
}

static const wsync__rbase *wsync__rbase_of(const wsync_fabric *f)
{
    if (!f || !f->user ||
        (f->backend != WSYNC_FABRIC_TCP && f->backend != WSYNC_FABRIC_HOST && f->backend != WSYNC_FABRIC_VERBS))
        return NULL;
    return (const wsync__rbase *)f->user;
}

WSYNC_DEF int wsync_fabric_stats_get(const wsync_fabric *f, wsync_fabric_stats *out)
{
    wsync__rbase *b = (wsync__rbase *)wsync__rbase_of(f);
    if (!b || !out) return 0;
    pthread_mutex_lock(&b->mu);
    *out = b->stats;
    pthread_mutex_unlock(&b->mu);
    return 1;
}

/* ---------------------------------------------------------------------
   TCP
   --------------------------------------------------------------------- */

typedef struct wsync__tcp {
    wsync__rbase b;            /* first: the fabric's user pointer is both */
    char bind_host[256], adv_host[64];
    unsigned port, connect_timeout_ms, sockbuf, chunk;
} wsync__tcp;

/* Descriptor bytes (version 1): u16 port, u8 host length (1..63), u8 0,
   u32 region, u64 key, then the host. */
#define WSYNC__TCP_DESC_FIXED 16

static void wsync__tcp_reply(int fd, uint32_t status, uint64_t seq)
{
    uint8_t a[WSYNC__ACK_LEN];
    wsync__rput32(a, WSYNC__ACK_MAGIC);
    wsync__rput32(a + 4, status);
    wsync__rput64(a + 8, seq);
    if (wsync__rsend_all(fd, a, sizeof a, 0) != 0) { /* the sender sees the closed connection instead */
    }
}

static void wsync__tcp_refuse(wsync__rbase *b, wsync__rconn *c, uint32_t why, uint32_t region, uint64_t off,
                              uint64_t len)
{
    char msg[128];
    snprintf(msg, sizeof msg, "%s (region %u, offset %%llu, length %%llu)", wsync__rej_str(why), (unsigned)region);
    wsync__rreject(b, msg, off, len);
    wsync__tcp_reply(c->fd, why, 0);
    shutdown(c->fd, SHUT_WR);
}

/* One sender's connection: frames in order, each checked before a byte of
   it lands in a region; the payload is received straight into the region. */
static void wsync__tcp_serve(wsync__rbase *b, wsync__rconn *c)
{
    uint8_t h[WSYNC__TCP_HDR];
    for (;;) {
        uint32_t magic, type, region, imm, why = 0;
        uint64_t key, off, len, seq;
        struct wsync_fabric_mr *m;
        int rc;
        rc = wsync__rrecv_full(c->fd, h, sizeof h, (int)b->timeout_ms, 1);
        if (rc == 0) return;
        if (rc < 0) {
            pthread_mutex_lock(&b->mu);
            b->stats.dropped++;
            pthread_mutex_unlock(&b->mu);
            return;
        }
        magic = wsync__rget32(h);
        type = wsync__rget32(h + 4);
        region = wsync__rget32(h + 8);
        imm = wsync__rget32(h + 12);
        key = wsync__rget64(h + 16);
        off = wsync__rget64(h + 24);
        len = wsync__rget64(h + 32);
        seq = wsync__rget64(h + 40);
        if (magic != WSYNC__TCP_MAGIC || type < WSYNC__FR_WRITE || type > WSYNC__FR_FLUSH) {
            wsync__tcp_refuse(b, c, WSYNC__REJ_MAGIC, region, off, len);
            return;
        }
        if (type == WSYNC__FR_FLUSH) {
            if (region || imm || key || off || len) {
                wsync__tcp_refuse(b, c, WSYNC__REJ_FLUSH, region, off, len);
                return;
            }
            /* everything before this frame is in the regions: publish it before the ack */
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            wsync__tcp_reply(c->fd, 0, seq);
            continue;
        }
        pthread_mutex_lock(&b->mu);
        m = wsync__rfind(b, region);
        if (!m) why = WSYNC__REJ_REGION;
        else if (key != m->key) why = WSYNC__REJ_KEY;
        else if (!wsync__rin(off, len, m->len)) why = WSYNC__REJ_BOUNDS;
        else {
            m->refs++;
            c->busy = m;
        }
        pthread_mutex_unlock(&b->mu);
        if (why) {
            wsync__tcp_refuse(b, c, why, region, off, len);
            return;
        }
        rc = len ? wsync__rrecv_full(c->fd, m->addr + off, (size_t)len, (int)b->timeout_ms, 0) : 1;
        pthread_mutex_lock(&b->mu);
        m->refs--;
        c->busy = NULL;
        if (m->refs == 0) pthread_cond_broadcast(&b->ref_cv);
        if (rc == 1) {
            b->stats.frames++;
            b->stats.bytes += len;
            if (type == WSYNC__FR_IMM) {
                __atomic_thread_fence(__ATOMIC_RELEASE);
                why = (uint32_t)wsync__rimm_push(b, m, imm);
            }
        } else {
            b->stats.dropped++;
        }
        pthread_mutex_unlock(&b->mu);
        if (rc != 1) return;
        if (why) {
            wsync__tcp_refuse(b, c, why, region, off, len);
            return;
        }
    }
}

static wsync_result wsync__tcp_listen(wsync__tcp *t, wsync_error *err)
{
    struct addrinfo hints, *res = NULL, *ai;
    char port[16];
    int fd = -1, one = 1, gai, e = 0;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(port, sizeof port, "%u", t->port);
    gai = getaddrinfo(t->bind_host, port, &hints, &res);
    if (gai != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "TCP fabric: cannot resolve bind host '%s': %s", t->bind_host,
                            gai_strerror(gai));
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        wsync__rbig_buffers(fd, t->sockbuf); /* accepted sockets inherit them */
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "TCP fabric: cannot listen on %s port %u: %s", t->bind_host,
                            t->port, strerror(e));
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        t->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return wsync__rsrv_start(&t->b, fd, err);
}

static wsync_result wsync__tcp_reg(void *user, void *addr, uint64_t len, wsync_mem_kind kind, wsync_fabric_mr **mr,
                                   wsync_fabric_desc *desc, wsync_error *err)
{
    wsync__tcp *t = (wsync__tcp *)user;
    struct wsync_fabric_mr *m;
    wsync_result r;
    size_t hl;
    wsync__rerr_reset(err);
    if (!t || !mr || !desc) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "reg arguments");
    memset(desc, 0, sizeof *desc);
    if (!t->b.send_only && !t->b.started && (r = wsync__tcp_listen(t, err)) != WSYNC_OK) return r;
    if ((r = wsync__rreg_common(&t->b, addr, len, kind, &m, err)) != WSYNC_OK) return r;
    wsync__rlink(&t->b, m);
    desc->backend = WSYNC_FABRIC_TCP;
    desc->kind = WSYNC_MEM_HOST;
    desc->version = 1;
    desc->addr = (uint64_t)(uintptr_t)addr;
    desc->len = len;
    if (m->linked) { /* a send_only fabric's descriptor names no endpoint: peers cannot open it */
        hl = strlen(t->adv_host);
        desc->bytes[0] = (uint8_t)t->port;
        desc->bytes[1] = (uint8_t)(t->port >> 8);
        desc->bytes[2] = (uint8_t)hl;
        wsync__rput32(desc->bytes + 4, m->id);
        wsync__rput64(desc->bytes + 8, m->key);
        memcpy(desc->bytes + WSYNC__TCP_DESC_FIXED, t->adv_host, hl);
        desc->n_bytes = (uint32_t)(WSYNC__TCP_DESC_FIXED + hl);
    }
    *mr = m;
    return WSYNC_OK;
}

/* Connects with a timeout; the socket is blocking afterwards. */
static int wsync__tcp_connect(const char *host, unsigned port, unsigned timeout_ms, char *why, size_t cap)
{
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    int fd = -1, gai;
    int64_t deadline = wsync__rnow_ms() + timeout_ms;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(ps, sizeof ps, "%u", port);
    gai = getaddrinfo(host, ps, &hints, &res);
    if (gai != 0) {
        snprintf(why, cap, "cannot resolve '%s': %s", host, gai_strerror(gai));
        return -1;
    }
    snprintf(why, cap, "%s", "no address");
    for (ai = res; ai; ai = ai->ai_next) {
        int e = 0, rc;
        socklen_t el = sizeof e;
        struct pollfd pf;
        int64_t left = deadline - wsync__rnow_ms();
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            snprintf(why, cap, "socket: %s", strerror(errno));
            continue;
        }
        rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            pf.fd = fd;
            pf.events = POLLOUT;
            pf.revents = 0;
            do {
                rc = poll(&pf, 1, left > 0 ? (int)left : 0);
            } while (rc < 0 && errno == EINTR);
            if (rc == 0) {
                snprintf(why, cap, "no connection within %u ms", timeout_ms);
                rc = -1;
            } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
                snprintf(why, cap, "connect: %s", strerror(e ? e : errno));
                rc = -1;
            } else {
                rc = 0;
            }
        } else if (rc != 0) {
            snprintf(why, cap, "connect: %s", strerror(errno));
        }
        if (rc == 0) {
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
            break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static wsync_result wsync__tcp_open_remote(void *user, const wsync_fabric_desc *d, wsync_fabric_remote **out,
                                           wsync_error *err)
{
    wsync__tcp *t = (wsync__tcp *)user;
    struct wsync_fabric_remote *r;
    char host[64], why[160];
    unsigned port, hl;
    int fd, one = 1;
    wsync__rerr_reset(err);
    if (!t || !d || !out) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "open_remote arguments");
    *out = NULL;
    if (d->backend != WSYNC_FABRIC_TCP || d->version != 1 || d->kind != WSYNC_MEM_HOST)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT,
                            "not a TCP fabric descriptor (backend %u, version %u, kind %u)", (unsigned)d->backend,
                            (unsigned)d->version, (unsigned)d->kind);
    if (d->n_bytes < WSYNC__TCP_DESC_FIXED + 1 || d->n_bytes > WSYNC_FABRIC_DESC_MAX)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "TCP descriptor: %u backend bytes (a send-only fabric's?)",
                            (unsigned)d->n_bytes);
    port = (unsigned)d->bytes[0] | (unsigned)d->bytes[1] << 8;
    hl = d->bytes[2];
    if (hl == 0 || hl >= sizeof host || d->n_bytes != WSYNC__TCP_DESC_FIXED + hl || d->bytes[3] || port == 0 ||
        d->len == 0)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "TCP descriptor: malformed endpoint");
    memcpy(host, d->bytes + WSYNC__TCP_DESC_FIXED, hl);
    host[hl] = 0;
    if (strlen(host) != hl) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "TCP descriptor: NUL in host");
    fd = wsync__tcp_connect(host, port, t->connect_timeout_ms, why, sizeof why);
    if (fd < 0) return wsync__rfail(err, WSYNC_ERR_IO, "TCP fabric: %s port %u: %s", host, port, why);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    wsync__rbig_buffers(fd, t->sockbuf);
    wsync__rset_timeouts(fd, t->b.timeout_ms);
    r = (struct wsync_fabric_remote *)wsync__ralloc(&t->b.a, sizeof *r);
    if (!r) {
        close(fd);
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "open_remote");
    }
    r->backend = WSYNC_FABRIC_TCP;
    r->fd = fd;
    r->region = wsync__rget32(d->bytes + 4);
    r->key = wsync__rget64(d->bytes + 8);
    r->addr = d->addr;
    r->len = d->len;
    snprintf(r->peer, sizeof r->peer, "%s:%u", host, port);
    r->next = t->b.remotes;
    t->b.remotes = r;
    *out = r;
    return WSYNC_OK;
}

static void wsync__tcp_hdr(uint8_t *h, uint32_t type, const struct wsync_fabric_remote *r, uint32_t imm, uint64_t off,
                           uint64_t len, uint64_t seq)
{
    wsync__rput32(h, WSYNC__TCP_MAGIC);
    wsync__rput32(h + 4, type);
    wsync__rput32(h + 8, r ? r->region : 0);
    wsync__rput32(h + 12, imm);
    wsync__rput64(h + 16, r ? r->key : 0);
    wsync__rput64(h + 24, off);
    wsync__rput64(h + 32, len);
    wsync__rput64(h + 40, seq);
}

/* A send failed or the connection ended: the receiver may have said why
   (a refusal) before it closed; that is the reason to report. */
static wsync_result wsync__tcp_broken(struct wsync_fabric_remote *r, wsync_error *err, const char *what, int e)
{
    uint8_t a[WSYNC__ACK_LEN];
    char why[160];
    ssize_t n = recv(r->fd, a, sizeof a, MSG_DONTWAIT);
    if (n == (ssize_t)sizeof a && wsync__rget32(a) == WSYNC__ACK_MAGIC && wsync__rget32(a + 4) != 0)
        return wsync__rbreak(r, err, "the receiver refused a write: %s", wsync__rej_str(wsync__rget32(a + 4)));
    snprintf(why, sizeof why, "%s: %s", what, e == ETIMEDOUT ? "no progress within the timeout" : strerror(e));
    return wsync__rbreak(r, err, "%s", why);
}

static wsync_result wsync__tcp_send(wsync__tcp *t, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                    uint64_t dst_off, uint64_t len, uint32_t type, uint32_t imm, wsync_error *err)
{
    uint8_t h[WSYNC__TCP_HDR];
    const uint8_t *p;
    wsync_result r;
    wsync__rerr_reset(err);
    if ((r = wsync__rcheck_write(t ? &t->b : NULL, src, src_off, dst, dst_off, len, err)) != WSYNC_OK) return r;
    if (len == 0 && type == WSYNC__FR_WRITE) return WSYNC_OK;
    wsync__tcp_hdr(h, type, dst, imm, dst_off, len, 0);
    if (wsync__rsend_all(dst->fd, h, sizeof h, len != 0) != 0)
        return wsync__tcp_broken(dst, err, "sending a frame", errno);
    /* straight from the registered source, a chunk per call */
    p = src->addr + src_off;
    while (len) {
        size_t n = len > t->chunk ? t->chunk : (size_t)len;
        if (wsync__rsend_all(dst->fd, p, n, 0) != 0)
            return wsync__tcp_broken(dst, err, "sending a frame's bytes", errno);
        p += n;
        len -= n;
    }
    dst->pending++;
    return WSYNC_OK;
}

static wsync_result wsync__tcp_write(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                     uint64_t dst_off, uint64_t len, wsync_error *err)
{
    return wsync__tcp_send((wsync__tcp *)user, src, src_off, dst, dst_off, len, WSYNC__FR_WRITE, 0, err);
}

static wsync_result wsync__tcp_write_imm(void *user, wsync_fabric_mr *src, uint64_t src_off,
                                         wsync_fabric_remote *dst, uint64_t dst_off, uint64_t len, uint32_t imm,
                                         wsync_error *err)
{
    return wsync__tcp_send((wsync__tcp *)user, src, src_off, dst, dst_off, len, WSYNC__FR_IMM, imm, err);
}

/* Sends a flush frame to every remote written to since the last flush,
   then collects the acks (pipelined, one deadline for all). */
static wsync_result wsync__tcp_flush(void *user, wsync_error *err)
{
    wsync__tcp *t = (wsync__tcp *)user;
    struct wsync_fabric_remote *r;
    wsync_result res = WSYNC_OK;
    int64_t deadline;
    wsync__rerr_reset(err);
    if (!t) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "flush arguments");
    for (r = t->b.remotes; r; r = r->next) {
        uint8_t h[WSYNC__TCP_HDR];
        if (r->broken || !r->pending) continue;
        wsync__tcp_hdr(h, WSYNC__FR_FLUSH, NULL, 0, 0, 0, r->seq + 1);
        if (wsync__rsend_all(r->fd, h, sizeof h, 0) != 0) {
            wsync__tcp_broken(r, NULL, "sending a flush", errno);
            continue;
        }
        r->seq++;
    }
    deadline = wsync__rnow_ms() + t->b.timeout_ms;
    for (r = t->b.remotes; r; r = r->next) {
        uint8_t a[WSYNC__ACK_LEN];
        int64_t left;
        int rc;
        if (r->broken || !r->pending) continue;
        left = deadline - wsync__rnow_ms();
        rc = wsync__rrecv_full(r->fd, a, sizeof a, left > 0 ? (int)left : 0, 0);
        if (rc != 1) {
            char why[96];
            snprintf(why, sizeof why, "%s", rc == 0 ? "the receiver closed the connection"
                                     : errno == ETIMEDOUT ? "no acknowledgement within the timeout"
                                                          : strerror(errno));
            wsync__rbreak(r, NULL, "flush: %s", why);
            continue;
        }
        if (wsync__rget32(a) != WSYNC__ACK_MAGIC) {
            wsync__rbreak(r, NULL, "flush: %s", "a malformed acknowledgement");
            continue;
        }
        if (wsync__rget32(a + 4) != 0) {
            wsync__rbreak(r, NULL, "the receiver refused a write: %s", wsync__rej_str(wsync__rget32(a + 4)));
            continue;
        }
        if (wsync__rget64(a + 8) != r->seq) {
            wsync__rbreak(r, NULL, "flush: %s", "acknowledgement out of sequence");
            continue;
        }
        r->pending = 0;
    }
    for (r = t->b.remotes; r; r = r->next)
        if (r->broken && res == WSYNC_OK) {
            res = wsync__rfail(err, WSYNC_ERR_IO, "flush: %s region %u: %s", r->peer, (unsigned)r->region, r->why);
        }
    return res;
}

static void wsync__tcp_close(void *user)
{
    wsync__tcp *t = (wsync__tcp *)user;
    wsync_allocator a;
    if (!t) return;
    a = t->b.a;
    wsync__rbase_close(&t->b);
    wsync__rfree(&a, t);
}

WSYNC_DEF wsync_result wsync_fabric_tcp_open(const wsync_fabric_tcp_options *opt, wsync_fabric *out,
                                             wsync_error *err)
{
    wsync_fabric_tcp_options o;
    wsync_allocator a;
    wsync__tcp *t;
    wsync_result r;
    const char *adv;
    wsync__rerr_reset(err);
    if (!out) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "tcp_open arguments");
    memset(out, 0, sizeof *out);
    if (opt) o = *opt;
    else memset(&o, 0, sizeof o);
    a = o.allocator;
    if (!o.bind_host || !*o.bind_host) o.bind_host = "127.0.0.1";
    if (strlen(o.bind_host) >= 256 || (o.advertise_host && strlen(o.advertise_host) >= 64) || o.port > 65535)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "TCP fabric: host name too long or bad port");
    t = (wsync__tcp *)wsync__ralloc(&a, sizeof *t);
    if (!t) return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "tcp_open");
    if ((r = wsync__rbase_init(&t->b, WSYNC_FABRIC_TCP, &a, err)) != WSYNC_OK) {
        wsync__rfree(&a, t);
        return r;
    }
    t->b.serve = wsync__tcp_serve;
    t->b.timeout_ms = o.timeout_ms ? o.timeout_ms : 10000;
    t->b.max_conns = o.max_connections ? o.max_connections : 256;
    t->b.send_only = o.send_only;
    snprintf(t->bind_host, sizeof t->bind_host, "%s", o.bind_host);
    adv = o.advertise_host && *o.advertise_host ? o.advertise_host : NULL;
    if (!adv && strcmp(o.bind_host, "0.0.0.0") != 0 && strcmp(o.bind_host, "::") != 0) adv = o.bind_host;
    if (adv) snprintf(t->adv_host, sizeof t->adv_host, "%s", adv);
    else if (gethostname(t->adv_host, sizeof t->adv_host - 1) != 0 || !t->adv_host[0])
        snprintf(t->adv_host, sizeof t->adv_host, "%s", "127.0.0.1");
    if (!t->adv_host[0] || strlen(t->adv_host) > 63) {
        wsync__tcp_close(t);
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "TCP fabric: advertised host too long");
    }
    t->port = o.port;
    t->connect_timeout_ms = o.connect_timeout_ms ? o.connect_timeout_ms : 5000;
    t->sockbuf = o.socket_buffer ? o.socket_buffer : 8u << 20;
    if (t->sockbuf > (unsigned)INT32_MAX) t->sockbuf = (unsigned)INT32_MAX;
    t->chunk = o.chunk ? o.chunk : 4u << 20;
    out->user = t;
    out->backend = WSYNC_FABRIC_TCP;
    out->reg = wsync__tcp_reg;
    out->dereg = wsync__rdereg;
    out->open_remote = wsync__tcp_open_remote;
    out->close_remote = wsync__rclose_remote;
    out->write = wsync__tcp_write;
    out->write_imm = wsync__tcp_write_imm;
    out->recv_imm = wsync__rrecv_imm;
    out->flush = wsync__tcp_flush;
    out->close = wsync__tcp_close;
    return WSYNC_OK;
}

WSYNC_DEF unsigned wsync_fabric_tcp_port(const wsync_fabric *f)
{
    const wsync__tcp *t;
    if (!f || f->backend != WSYNC_FABRIC_TCP || !f->user) return 0;
    t = (const wsync__tcp *)f->user;
    return t->b.started ? t->port : 0;
}

/* ---------------------------------------------------------------------
   One host: process_vm_writev (CMA) or shared memory (SHM)
   --------------------------------------------------------------------- */

typedef struct wsync__hmem {
    struct wsync__hmem *next;
    uint8_t *ptr;
    uint64_t len;
    int fd;
} wsync__hmem;

typedef struct wsync__host {
    wsync__rbase b;            /* first: the fabric's user pointer is both */
    wsync_fabric_host_mode mode;
    wsync__hmem *mem;
    char name[WSYNC__HOST_NAME_MAX + 1];  /* the abstract socket's name */
    volatile uint64_t probe;   /* senders test CMA by writing here */
} wsync__host;

#define WSYNC__HOST_CMA 1u
#define WSYNC__HOST_SHM 2u
/* Descriptor bytes (version 1): u32 pid, u32 region, u64 key, u64 probe
   address, u64 shm offset, u64 shm size, u8 name length, name.
   flags: WSYNC__HOST_CMA | WSYNC__HOST_SHM, what the region offers. */
#define WSYNC__HOST_DESC_FIXED 41

static int wsync__host_unix_addr(const char *name, struct sockaddr_un *sa, socklen_t *sl)
{
    size_t n = strlen(name);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (n + 1 > sizeof sa->sun_path) return -1;
    memcpy(sa->sun_path + 1, name, n); /* sun_path[0] = 0: the abstract namespace */
    *sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    return 0;
}

/* A sender's connection: a handshake (region, key; the fd back in SHM
   mode), then immediates. The receiver writes nothing else on it, so the
   sender reads its closing as "the receiver has gone". */
static void wsync__host_serve(wsync__rbase *b, wsync__rconn *c)
{
    uint8_t h[WSYNC__HELLO_LEN], rep[WSYNC__REPLY_LEN];
    uint32_t region, status = 0, offers = 0;
    uint64_t key, shm_off = 0, shm_size = 0;
    int want_shm, shm_fd = -1;
    struct wsync_fabric_mr *m;
    struct msghdr msg;
    struct iovec iov;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } cm;
    if (wsync__rrecv_full(c->fd, h, sizeof h, (int)b->timeout_ms, 0) != 1) return;
    region = wsync__rget32(h + 4);
    key = wsync__rget64(h + 8);
    want_shm = wsync__rget32(h + 16) != 0;
    pthread_mutex_lock(&b->mu);
    m = wsync__rfind(b, region);
    if (wsync__rget32(h) != WSYNC__HELLO_MAGIC) status = WSYNC__REJ_MAGIC;
    else if (!m) status = WSYNC__REJ_REGION;
    else if (m->key != key) status = WSYNC__REJ_KEY;
    else {
        c->busy = m;
        offers = ((wsync__host *)b)->mode != WSYNC_FABRIC_HOST_SHM ? WSYNC__HOST_CMA : 0;
        if (m->shm_fd >= 0) {
            offers |= WSYNC__HOST_SHM;
            shm_fd = m->shm_fd;
            shm_off = m->shm_off;
            shm_size = m->shm_size;
        }
    }
    pthread_mutex_unlock(&b->mu);
    if (status) wsync__rreject(b, "one-host handshake refused (region %llu): reason %llu", region, status);
    wsync__rput32(rep, WSYNC__REPLY_MAGIC);
    wsync__rput32(rep + 4, status);
    wsync__rput32(rep + 8, offers);
    wsync__rput32(rep + 12, (uint32_t)getpid());
    wsync__rput64(rep + 16, shm_off);
    wsync__rput64(rep + 24, shm_size);
    wsync__rput64(rep + 32, 0);
    memset(&msg, 0, sizeof msg);
    iov.iov_base = rep;
    iov.iov_len = sizeof rep;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!status && want_shm && shm_fd >= 0) {
        struct cmsghdr *cmh;
        memset(&cm, 0, sizeof cm);
        msg.msg_control = cm.buf;
        msg.msg_controllen = sizeof cm.buf;
        cmh = CMSG_FIRSTHDR(&msg);
        cmh->cmsg_level = SOL_SOCKET;
        cmh->cmsg_type = SCM_RIGHTS;
        cmh->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmh), &shm_fd, sizeof(int));
    }
    if (sendmsg(c->fd, &msg, MSG_NOSIGNAL) != (ssize_t)sizeof rep || status) return;
    for (;;) {
        uint8_t im[WSYNC__IMM_LEN];
        uint32_t why = 0;
        int rc = wsync__rrecv_full(c->fd, im, sizeof im, (int)b->timeout_ms, 1);
        if (rc == 0) return;
        if (rc < 0) {
            pthread_mutex_lock(&b->mu);
            b->stats.dropped++;
            pthread_mutex_unlock(&b->mu);
            return;
        }
        pthread_mutex_lock(&b->mu);
        if (wsync__rget32(im) != WSYNC__IMM_MAGIC || wsync__rget32(im + 12) != 0) why = WSYNC__REJ_MAGIC;
        else if (!c->busy || c->busy != m || wsync__rget32(im + 4) != region) why = WSYNC__REJ_REGION;
        else {
            b->stats.frames++;
            why = (uint32_t)wsync__rimm_push(b, m, wsync__rget32(im + 8));
        }
        pthread_mutex_unlock(&b->mu);
        if (why) {
            wsync__rreject(b, "one-host immediate refused (region %llu): reason %llu", region, why);
            return;
        }
    }
}

static wsync_result wsync__host_listen(wsync__host *h, wsync_error *err)
{
    struct sockaddr_un sa;
    socklen_t sl = 0;
    int fd, tries;
    for (tries = 0; tries < 8; tries++) {
        snprintf(h->name, sizeof h->name, "wsync-%ld-%016llx", (long)getpid(),
                 (unsigned long long)wsync__rrandom64());
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: socket: %s", strerror(errno));
        wsync__host_unix_addr(h->name, &sa, &sl);
        if (bind(fd, (struct sockaddr *)&sa, sl) == 0 && listen(fd, 128) == 0) return wsync__rsrv_start(&h->b, fd, err);
        close(fd);
        if (errno != EADDRINUSE) break;
    }
    return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: cannot listen on a Unix socket: %s", strerror(errno));
}

static wsync_result wsync__host_reg(void *user, void *addr, uint64_t len, wsync_mem_kind kind, wsync_fabric_mr **mr,
                                    wsync_fabric_desc *desc, wsync_error *err)
{
    wsync__host *h = (wsync__host *)user;
    struct wsync_fabric_mr *m;
    wsync__hmem *a;
    wsync_result r;
    size_t nl;
    wsync__rerr_reset(err);
    if (!h || !mr || !desc) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "reg arguments");
    memset(desc, 0, sizeof *desc);
    if ((r = wsync__rreg_common(&h->b, addr, len, kind, &m, err)) != WSYNC_OK) return r;
    for (a = h->mem; a; a = a->next)
        if ((uint8_t *)addr >= a->ptr && wsync__rin((uint64_t)((uint8_t *)addr - a->ptr), len, a->len)) {
            m->shm_fd = a->fd;
            m->shm_off = (uint64_t)((uint8_t *)addr - a->ptr);
            m->shm_size = a->len;
        }
    if (h->mode == WSYNC_FABRIC_HOST_CMA) m->shm_fd = -1;
    if (h->mode == WSYNC_FABRIC_HOST_SHM && m->shm_fd < 0 && !h->b.send_only) {
        wsync__rfree(&h->b.a, m);
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s",
                            "one-host SHM mode: register memory from wsync_fabric_host_alloc");
    }
    if (!h->b.send_only && !h->b.started && (r = wsync__host_listen(h, err)) != WSYNC_OK) {
        wsync__rfree(&h->b.a, m);
        return r;
    }
    wsync__rlink(&h->b, m);
    desc->backend = WSYNC_FABRIC_HOST;
    desc->kind = WSYNC_MEM_HOST;
    desc->version = 1;
    desc->addr = (uint64_t)(uintptr_t)addr;
    desc->len = len;
    if (m->linked) {
        desc->flags = (h->mode != WSYNC_FABRIC_HOST_SHM ? WSYNC__HOST_CMA : 0) |
                      (m->shm_fd >= 0 ? WSYNC__HOST_SHM : 0);
        nl = strlen(h->name);
        wsync__rput32(desc->bytes, (uint32_t)getpid());
        wsync__rput32(desc->bytes + 4, m->id);
        wsync__rput64(desc->bytes + 8, m->key);
        wsync__rput64(desc->bytes + 16, (uint64_t)(uintptr_t)&h->probe);
        wsync__rput64(desc->bytes + 24, m->shm_off);
        wsync__rput64(desc->bytes + 32, m->shm_fd >= 0 ? m->shm_size : 0);
        desc->bytes[40] = (uint8_t)nl;
        memcpy(desc->bytes + WSYNC__HOST_DESC_FIXED, h->name, nl);
        desc->n_bytes = (uint32_t)(WSYNC__HOST_DESC_FIXED + nl);
    }
    *mr = m;
    return WSYNC_OK;
}

/* process_vm_writev of all len bytes (it may stop short at a page it cannot reach). */
static int wsync__host_cma(int pid, const uint8_t *src, uint64_t addr, uint64_t len)
{
    while (len) {
        struct iovec l, rm;
        ssize_t n;
        size_t step = len > (1ull << 30) ? (size_t)(1ull << 30) : (size_t)len;
        l.iov_base = (void *)(uintptr_t)src;
        l.iov_len = step;
        rm.iov_base = (void *)(uintptr_t)addr;
        rm.iov_len = step;
        n = process_vm_writev((pid_t)pid, &l, 1, &rm, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) {
            errno = EFAULT;
            return -1;
        }
        src += n;
        addr += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

static void wsync__host_cma_why(int e, int pid, char *why, size_t cap)
{
    char scope[16] = "";
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f) {
        if (!fgets(scope, sizeof scope, f)) scope[0] = 0;
        fclose(f);
        scope[strcspn(scope, "\n")] = 0;
    }
    if (e == EPERM || e == EACCES)
        snprintf(why, cap,
                 "process_vm_writev into pid %d not permitted (%s): Yama ptrace_scope %s; the receiver may "
                 "set allow_any_writer, or run both as one uid with ptrace_scope 0 or CAP_SYS_PTRACE, or "
                 "register memory from wsync_fabric_host_alloc for SHM mode",
                 pid, strerror(e), scope[0] ? scope : "absent");
    else if (e == ENOSYS)
        snprintf(why, cap, "process_vm_writev is not available (ENOSYS: a seccomp filter in a container, or "
                           "a kernel without CONFIG_CROSS_MEMORY_ATTACH); use SHM mode");
    else
        snprintf(why, cap, "process_vm_writev into pid %d: %s", pid, strerror(e));
}

WSYNC_DEF int wsync_fabric_host_cma_allowed(int pid, const void *addr, char *why, size_t why_cap)
{
    uint64_t v = 0;
    struct iovec l, rm;
    l.iov_base = &v;
    l.iov_len = sizeof v;
    rm.iov_base = (void *)(uintptr_t)addr;
    rm.iov_len = sizeof v;
    if (process_vm_readv((pid_t)pid, &l, 1, &rm, 1, 0) != (ssize_t)sizeof v ||
        process_vm_writev((pid_t)pid, &l, 1, &rm, 1, 0) != (ssize_t)sizeof v) {
        if (why && why_cap) wsync__host_cma_why(errno, pid, why, why_cap);
        return 0;
    }
    if (why && why_cap) why[0] = 0;
    return 1;
}

/* The handshake: connect, check the peer's pid, send region and key, read
   the reply (and the memfd when asked for SHM). */
static wsync_result wsync__host_hello(wsync__host *h, struct wsync_fabric_remote *r, const char *name, int want_shm,
                                      uint32_t *offers, int *peer_pid, int *shm_fd, uint64_t *shm_off,
                                      uint64_t *shm_size, wsync_error *err)
{
    struct sockaddr_un sa;
    socklen_t sl = 0;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    uint8_t hello[WSYNC__HELLO_LEN], rep[WSYNC__REPLY_LEN];
    struct msghdr msg;
    struct iovec iov;
    struct cmsghdr *cmh;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } cm;
    ssize_t n;
    struct pollfd pf;
    *shm_fd = -1;
    r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r->fd < 0) return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: socket: %s", strerror(errno));
    wsync__rset_timeouts(r->fd, h->b.timeout_ms);
    wsync__host_unix_addr(name, &sa, &sl);
    if (connect(r->fd, (struct sockaddr *)&sa, sl) != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: cannot reach %s: %s (has it exited?)", r->peer,
                            strerror(errno));
    if (getsockopt(r->fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: SO_PEERCRED: %s", strerror(errno));
    *peer_pid = (int)cred.pid;
    memset(hello, 0, sizeof hello);
    wsync__rput32(hello, WSYNC__HELLO_MAGIC);
    wsync__rput32(hello + 4, r->region);
    wsync__rput64(hello + 8, r->key);
    wsync__rput32(hello + 16, (uint32_t)want_shm);
    wsync__rput32(hello + 20, (uint32_t)getpid());
    if (wsync__rsend_all(r->fd, hello, sizeof hello, 0) != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: handshake with %s: %s", r->peer, strerror(errno));
    pf.fd = r->fd;
    pf.events = POLLIN;
    pf.revents = 0;
    if (poll(&pf, 1, (int)h->b.timeout_ms) <= 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: no handshake reply from %s within %u ms", r->peer,
                            h->b.timeout_ms);
    memset(&msg, 0, sizeof msg);
    memset(&cm, 0, sizeof cm);
    iov.iov_base = rep;
    iov.iov_len = sizeof rep;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cm.buf;
    msg.msg_controllen = sizeof cm.buf;
    n = recvmsg(r->fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    for (cmh = CMSG_FIRSTHDR(&msg); cmh; cmh = CMSG_NXTHDR(&msg, cmh))
        if (cmh->cmsg_level == SOL_SOCKET && cmh->cmsg_type == SCM_RIGHTS && cmh->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(shm_fd, CMSG_DATA(cmh), sizeof(int));
    if (n != (ssize_t)sizeof rep || wsync__rget32(rep) != WSYNC__REPLY_MAGIC)
        return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: bad handshake reply from %s", r->peer);
    if (wsync__rget32(rep + 4) != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: %s refused the handshake: %s", r->peer,
                            wsync__rej_str(wsync__rget32(rep + 4)));
    *offers = wsync__rget32(rep + 8);
    *shm_off = wsync__rget64(rep + 16);
    *shm_size = wsync__rget64(rep + 24);
    return WSYNC_OK;
}

static wsync_result wsync__host_map(wsync__host *h, struct wsync_fabric_remote *r, int fd, uint64_t off,
                                    uint64_t size, wsync_error *err)
{
    struct stat st;
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t base;
    void *p;
    (void)h;
    if (fd < 0) return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: %s sent no shared memory", r->peer);
    if (pg <= 0) pg = 4096;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < size || !wsync__rin(off, r->len, size))
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "one-host fabric: %s's shared memory is smaller than the region",
                            r->peer);
    base = off - off % (uint64_t)pg;
    r->map_delta = (size_t)(off - base);
    r->map_len = (size_t)(r->len + r->map_delta);
    /* populated now, so the first step pays no page faults */
    p = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, (off_t)base);
    if (p == MAP_FAILED) {
        r->map_len = 0;
        return wsync__rfail(err, WSYNC_ERR_IO, "one-host fabric: mapping %s's memory: %s", r->peer, strerror(errno));
    }
    r->map = (uint8_t *)p;
    return WSYNC_OK;
}

static wsync_result wsync__host_open_remote(void *user, const wsync_fabric_desc *d, wsync_fabric_remote **out,
                                            wsync_error *err)
{
    wsync__host *h = (wsync__host *)user;
    struct wsync_fabric_remote *r;
    char name[WSYNC__HOST_NAME_MAX + 1], why[384];
    unsigned nl;
    uint32_t offers = 0;
    int peer_pid = 0, shm_fd = -1, want_shm, try_cma;
    uint64_t shm_off = 0, shm_size = 0, probe;
    wsync_result res;
    wsync__rerr_reset(err);
    if (!h || !d || !out) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "open_remote arguments");
    *out = NULL;
    if (d->backend != WSYNC_FABRIC_HOST || d->version != 1 || d->kind != WSYNC_MEM_HOST)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT,
                            "not a one-host fabric descriptor (backend %u, version %u, kind %u)",
                            (unsigned)d->backend, (unsigned)d->version, (unsigned)d->kind);
    nl = d->n_bytes > WSYNC__HOST_DESC_FIXED ? d->bytes[40] : 0;
    if (nl == 0 || nl > WSYNC__HOST_NAME_MAX || d->n_bytes != WSYNC__HOST_DESC_FIXED + nl || d->len == 0 ||
        d->flags == 0 || (d->flags & ~(WSYNC__HOST_CMA | WSYNC__HOST_SHM)) != 0)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s",
                            "one-host descriptor: malformed (a send-only fabric's?)");
    memcpy(name, d->bytes + WSYNC__HOST_DESC_FIXED, nl);
    name[nl] = 0;
    if (strlen(name) != nl) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "one-host descriptor: NUL in name");
    want_shm = (d->flags & WSYNC__HOST_SHM) && h->mode != WSYNC_FABRIC_HOST_CMA;
    try_cma = (d->flags & WSYNC__HOST_CMA) && h->mode != WSYNC_FABRIC_HOST_SHM;
    if (!want_shm && !try_cma)
        return wsync__rfail(err, WSYNC_ERR_UNSUPPORTED, "one-host fabric: the region offers %s, this sender takes %s only",
                            d->flags & WSYNC__HOST_CMA ? "CMA" : "SHM",
                            h->mode == WSYNC_FABRIC_HOST_CMA ? "CMA" : "SHM");
    r = (struct wsync_fabric_remote *)wsync__ralloc(&h->b.a, sizeof *r);
    if (!r) return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "open_remote");
    r->backend = WSYNC_FABRIC_HOST;
    r->fd = -1;
    r->pid = (int)wsync__rget32(d->bytes);
    r->region = wsync__rget32(d->bytes + 4);
    r->key = wsync__rget64(d->bytes + 8);
    probe = wsync__rget64(d->bytes + 16);
    r->addr = d->addr;
    r->len = d->len;
    snprintf(r->peer, sizeof r->peer, "pid %d", r->pid);
    res = wsync__host_hello(h, r, name, want_shm, &offers, &peer_pid, &shm_fd, &shm_off, &shm_size, err);
    if (res != WSYNC_OK) goto fail;
    why[0] = 0;
    if (try_cma && !(offers & WSYNC__HOST_CMA)) {
        try_cma = 0;
        snprintf(why, sizeof why, "%s", "the receiver does not offer CMA");
    }
    if (try_cma && peer_pid != r->pid) {
        try_cma = 0;
        snprintf(why, sizeof why, "the receiver is pid %d in its namespace, %d in ours (another pid namespace)", r->pid,
                 peer_pid);
    }
    if (try_cma) {
        uint64_t v = (uint64_t)getpid();
        if (wsync__host_cma(r->pid, (const uint8_t *)&v, probe, sizeof v) == 0) {
            r->mode = WSYNC_FABRIC_HOST_CMA;
        } else {
            wsync__host_cma_why(errno, r->pid, why, sizeof why);
        }
    }
    if (r->mode != WSYNC_FABRIC_HOST_CMA) {
        if (!want_shm || !(offers & WSYNC__HOST_SHM)) {
            res = wsync__rfail(err, WSYNC_ERR_UNSUPPORTED, "one-host fabric: %s region %u: %s%s", r->peer,
                               (unsigned)r->region, why[0] ? why : "no mode in common",
                               d->flags & WSYNC__HOST_SHM ? "" : " (and the region offers no SHM)");
            goto fail;
        }
        if ((res = wsync__host_map(h, r, shm_fd, shm_off, shm_size, err)) != WSYNC_OK) goto fail;
        r->mode = WSYNC_FABRIC_HOST_SHM;
    }
    if (shm_fd >= 0) close(shm_fd);
    r->next = h->b.remotes;
    h->b.remotes = r;
    *out = r;
    return WSYNC_OK;
fail:
    if (shm_fd >= 0) close(shm_fd);
    if (r->fd >= 0) close(r->fd);
    wsync__rfree(&h->b.a, r);
    return res;
}

static wsync_result wsync__host_send(wsync__host *h, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                     uint64_t dst_off, uint64_t len, int with_imm, uint32_t imm, wsync_error *err)
{
    wsync_result r;
    wsync__rerr_reset(err);
    if ((r = wsync__rcheck_write(h ? &h->b : NULL, src, src_off, dst, dst_off, len, err)) != WSYNC_OK) return r;
    /* a closed socket means the receiver exited or deregistered: its memory is not the region any more */
    if (wsync__rpeer_gone(dst->fd))
        return wsync__rbreak(dst, err, "%s", "the receiver closed the connection (exited, or deregistered the region)");
    if (len) {
        if (dst->mode == WSYNC_FABRIC_HOST_SHM) {
            memcpy(dst->map + dst->map_delta + dst_off, src->addr + src_off, (size_t)len);
        } else if (wsync__host_cma(dst->pid, src->addr + src_off, dst->addr + dst_off, len) != 0) {
            char why[384];
            wsync__host_cma_why(errno, dst->pid, why, sizeof why);
            return wsync__rbreak(dst, err, "%s", why);
        }
    }
    if (with_imm) {
        uint8_t im[WSYNC__IMM_LEN];
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        wsync__rput32(im, WSYNC__IMM_MAGIC);
        wsync__rput32(im + 4, dst->region);
        wsync__rput32(im + 8, imm);
        wsync__rput32(im + 12, 0);
        if (wsync__rsend_all(dst->fd, im, sizeof im, 0) != 0)
            return wsync__rbreak(dst, err, "sending an immediate: %s", strerror(errno));
    }
    return WSYNC_OK;
}

static wsync_result wsync__host_write(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                      uint64_t dst_off, uint64_t len, wsync_error *err)
{
    return wsync__host_send((wsync__host *)user, src, src_off, dst, dst_off, len, 0, 0, err);
}

static wsync_result wsync__host_write_imm(void *user, wsync_fabric_mr *src, uint64_t src_off,
                                          wsync_fabric_remote *dst, uint64_t dst_off, uint64_t len, uint32_t imm,
                                          wsync_error *err)
{
    return wsync__host_send((wsync__host *)user, src, src_off, dst, dst_off, len, 1, imm, err);
}

/* The writes are done when they return; what is left is ordering, and
   telling the caller when a receiver went away under them. */
static wsync_result wsync__host_flush(void *user, wsync_error *err)
{
    wsync__host *h = (wsync__host *)user;
    struct wsync_fabric_remote *r;
    wsync__rerr_reset(err);
    if (!h) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "flush arguments");
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (r = h->b.remotes; r; r = r->next)
        if (!r->broken && wsync__rpeer_gone(r->fd))
            wsync__rbreak(r, NULL, "%s", "the receiver closed the connection (exited, or deregistered the region)");
    for (r = h->b.remotes; r; r = r->next)
        if (r->broken)
            return wsync__rfail(err, WSYNC_ERR_IO, "flush: %s region %u: %s", r->peer, (unsigned)r->region, r->why);
    return WSYNC_OK;
}

static void wsync__host_close(void *user)
{
    wsync__host *h = (wsync__host *)user;
    wsync_allocator a;
    if (!h) return;
    a = h->b.a;
    wsync__rbase_close(&h->b);
    while (h->mem) {
        wsync__hmem *m = h->mem;
        h->mem = m->next;
        munmap(m->ptr, (size_t)m->len);
        close(m->fd);
        wsync__rfree(&a, m);
    }
    wsync__rfree(&a, h);
}

WSYNC_DEF wsync_result wsync_fabric_host_open(const wsync_fabric_host_options *opt, wsync_fabric *out,
                                              wsync_error *err)
{
    wsync_fabric_host_options o;
    wsync__host *h;
    wsync_result r;
    wsync__rerr_reset(err);
    if (!out) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "host_open arguments");
    memset(out, 0, sizeof *out);
    if (opt) o = *opt;
    else memset(&o, 0, sizeof o);
    if (o.mode != WSYNC_FABRIC_HOST_AUTO && o.mode != WSYNC_FABRIC_HOST_CMA && o.mode != WSYNC_FABRIC_HOST_SHM)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "one-host fabric: unknown mode %d", (int)o.mode);
    h = (wsync__host *)wsync__ralloc(&o.allocator, sizeof *h);
    if (!h) return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "host_open");
    if ((r = wsync__rbase_init(&h->b, WSYNC_FABRIC_HOST, &o.allocator, err)) != WSYNC_OK) {
        wsync__rfree(&o.allocator, h);
        return r;
    }
    h->b.serve = wsync__host_serve;
    h->b.timeout_ms = o.timeout_ms ? o.timeout_ms : 5000;
    h->b.max_conns = 1024;
    h->b.send_only = o.send_only;
    h->mode = o.mode;
#if defined(PR_SET_PTRACER) && defined(PR_SET_PTRACER_ANY)
    if (o.allow_any_writer) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
    out->user = h;
    out->backend = WSYNC_FABRIC_HOST;
    out->reg = wsync__host_reg;
    out->dereg = wsync__rdereg;
    out->open_remote = wsync__host_open_remote;
    out->close_remote = wsync__rclose_remote;
    out->write = wsync__host_write;
    out->write_imm = wsync__host_write_imm;
    out->recv_imm = wsync__rrecv_imm;
    out->flush = wsync__host_flush;
    out->close = wsync__host_close;
    return WSYNC_OK;
}

static int wsync__host_memfd(void)
{
#ifdef MFD_CLOEXEC
    int fd = memfd_create("wsync-fabric", MFD_CLOEXEC);
    if (fd >= 0 || errno != ENOSYS) return fd;
#endif
    {
        char name[64];
        int fd2, tries;
        for (tries = 0; tries < 8; tries++) {
            snprintf(name, sizeof name, "/wsync-%ld-%016llx", (long)getpid(), (unsigned long long)wsync__rrandom64());
            fd2 = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (fd2 >= 0) {
                shm_unlink(name);
                return fd2;
            }
            if (errno != EEXIST) break;
        }
        return -1;
    }
}

WSYNC_DEF wsync_result wsync_fabric_host_alloc(wsync_fabric *f, uint64_t len, void **ptr, wsync_error *err)
{
    wsync__host *h;
    wsync__hmem *m;
    void *p;
    int fd;
    wsync__rerr_reset(err);
    if (ptr) *ptr = NULL;
    if (!f || f->backend != WSYNC_FABRIC_HOST || !f->user || !ptr || len == 0)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "host_alloc: a one-host fabric, a length, a pointer");
    if (len > (uint64_t)(SIZE_MAX / 2) || len > (uint64_t)INT64_MAX)
        return wsync__rfail(err, WSYNC_ERR_OVERFLOW, "%s", "host_alloc: too large");
    h = (wsync__host *)f->user;
    fd = wsync__host_memfd();
    if (fd < 0) return wsync__rfail(err, WSYNC_ERR_IO, "host_alloc: memfd_create and shm_open: %s", strerror(errno));
    if (ftruncate(fd, (off_t)len) != 0) {
        int e = errno;
        close(fd);
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "host_alloc: %llu bytes: %s", (unsigned long long)len,
                            strerror(e));
    }
    p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    m = (wsync__hmem *)wsync__ralloc(&h->b.a, sizeof *m);
    if (p == MAP_FAILED || !m) {
        if (p != MAP_FAILED) munmap(p, (size_t)len);
        close(fd);
        wsync__rfree(&h->b.a, m);
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "host_alloc: mapping %llu bytes", (unsigned long long)len);
    }
    m->ptr = (uint8_t *)p;
    m->len = len;
    m->fd = fd;
    m->next = h->mem;
    h->mem = m;
    *ptr = p;
    return WSYNC_OK;
}

WSYNC_DEF void wsync_fabric_host_free(wsync_fabric *f, void *ptr)
{
    wsync__host *h;
    wsync__hmem **pp, *m;
    if (!f || f->backend != WSYNC_FABRIC_HOST || !f->user || !ptr) return;
    h = (wsync__host *)f->user;
    for (pp = &h->mem; (m = *pp) != NULL; pp = &m->next)
        if (m->ptr == (uint8_t *)ptr) {
            *pp = m->next;
            munmap(m->ptr, (size_t)m->len);
            close(m->fd);
            wsync__rfree(&h->b.a, m);
            return;
        }
}

WSYNC_DEF wsync_fabric_host_mode wsync_fabric_host_remote_mode(const wsync_fabric *f,
                                                               const wsync_fabric_remote *r)
{
    if (!f || f->backend != WSYNC_FABRIC_HOST || !r || r->backend != WSYNC_FABRIC_HOST) return WSYNC_FABRIC_HOST_AUTO;
    return (wsync_fabric_host_mode)r->mode;
}


/* ======================================================================
   ibverbs (RDMA RC): implementation
   ======================================================================
   Never run on a NIC: tested only against tests/fake_verbs.h. */
#if WSYNC__HAVE_VERBS

#define WSYNC__VB_HELLO_MAGIC 0x31565357u /* "WSV1" */
#define WSYNC__VB_REPLY_MAGIC 0x32565357u /* "WSV2" */
#define WSYNC__VB_VERSION 1u
#define WSYNC__VB_HDR 32
#define WSYNC__VB_LANE 40
#define WSYNC__VB_DESC_FIXED 24
#define WSYNC__VB_GID_SCAN 256        /* GID table entries looked at, at most */

/* Why a receiver refused a handshake (the reply's status). */
enum {
    WSYNC__VREJ_MAGIC = 1,
    WSYNC__VREJ_VERSION = 2,
    WSYNC__VREJ_LENGTH = 3,
    WSYNC__VREJ_REGION = 4,
    WSYNC__VREJ_KEY = 5,
    WSYNC__VREJ_LANE = 6,
    WSYNC__VREJ_VERBS = 7
};

static const char *wsync__vrej_str(uint32_t s)
{
    switch (s) {
    case WSYNC__VREJ_MAGIC: return "not a verbs handshake (magic)";
    case WSYNC__VREJ_VERSION: return "unsupported handshake version";
    case WSYNC__VREJ_LENGTH: return "handshake length or lane count out of range";
    case WSYNC__VREJ_REGION: return "unknown region (never registered, or deregistered)";
    case WSYNC__VREJ_KEY: return "wrong key";
    case WSYNC__VREJ_LANE: return "a lane's NIC, queue pair number, PSN, MTU or address is invalid, or the link "
                                  "layers differ (InfiniBand and RoCE)";
    case WSYNC__VREJ_VERBS: return "the receiver could not set up its queue pairs";
    default: return "unknown reason";
    }
}

static const char *wsync__vwc_name(int s)
{
    switch (s) {
    case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS (success)";
    case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR (local length error)";
    case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR (local QP operation error)";
    case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR (local protection error)";
    case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR (work request flushed)";
    case IBV_WC_BAD_RESP_ERR: return "IBV_WC_BAD_RESP_ERR (bad response)";
    case IBV_WC_LOC_ACCESS_ERR: return "IBV_WC_LOC_ACCESS_ERR (local access error)";
    case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR (remote invalid request)";
    case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR (remote access error: rkey, bounds or access flags)";
    case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR (remote operation error)";
    case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded: peer unreachable)";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR (receiver not ready: no receive posted)";
    case IBV_WC_REM_ABORT_ERR: return "IBV_WC_REM_ABORT_ERR (remote aborted)";
    case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR (fatal error)";
    case IBV_WC_RESP_TIMEOUT_ERR: return "IBV_WC_RESP_TIMEOUT_ERR (response timeout)";
    case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR (general error)";
    default: return "an unknown completion status";
    }
}

/* ---- the default table: libibverbs, loaded at run time --------------
   dlopen keeps libibverbs out of the link line of every program that
   includes this header; the library stays loaded once found. */

typedef struct wsync__vlib {
    int ok;
    char why[256];
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    const char *(*get_device_name)(struct ibv_device *);
    struct ibv_context *(*open_device)(struct ibv_device *);
    int (*close_device)(struct ibv_context *);
    int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
    int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
    int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    int (*dealloc_pd)(struct ibv_pd *);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    int (*dereg_mr)(struct ibv_mr *);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
    int (*destroy_cq)(struct ibv_cq *);
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    int (*destroy_qp)(struct ibv_qp *);
    const char *(*wc_status_str)(enum ibv_wc_status);
} wsync__vlib;

static wsync__vlib wsync__vlib_g;
static pthread_once_t wsync__vlib_once = PTHREAD_ONCE_INIT;

/* POSIX guarantees a function pointer fits a void *; the copy avoids the
   cast ISO C forbids. */
static int wsync__vsym(void *h, const char *name, void *fp)
{
    void *p = dlsym(h, name);
    if (!p) {
        snprintf(wsync__vlib_g.why, sizeof wsync__vlib_g.why, "libibverbs.so.1 has no %s", name);
        return 0;
    }
    memcpy(fp, &p, sizeof p);
    return 1;
}

static void wsync__vlib_load(void)
{
    wsync__vlib *g = &wsync__vlib_g;
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    const char *e;
    if (!h) {
        e = dlerror();
        snprintf(g->why, sizeof g->why, "libibverbs not found (dlopen libibverbs.so.1: %s)", e ? e : "?");
        return;
    }
    /* ibv_reg_mr and ibv_query_port are macros in verbs.h over exported
       functions of these names: the exported ones are what dlsym finds.
       The exported query_port fills the compatible prefix of
       ibv_port_attr, which holds every field used here. */
    g->ok = wsync__vsym(h, "ibv_get_device_list", &g->get_device_list) &&
            wsync__vsym(h, "ibv_free_device_list", &g->free_device_list) &&
            wsync__vsym(h, "ibv_get_device_name", &g->get_device_name) &&
            wsync__vsym(h, "ibv_open_device", &g->open_device) &&
            wsync__vsym(h, "ibv_close_device", &g->close_device) &&
            wsync__vsym(h, "ibv_query_device", &g->query_device) &&
            wsync__vsym(h, "ibv_query_port", &g->query_port) &&
            wsync__vsym(h, "ibv_query_gid", &g->query_gid) &&
            wsync__vsym(h, "ibv_alloc_pd", &g->alloc_pd) &&
            wsync__vsym(h, "ibv_dealloc_pd", &g->dealloc_pd) &&
            wsync__vsym(h, "ibv_reg_mr", &g->reg_mr) &&
            wsync__vsym(h, "ibv_dereg_mr", &g->dereg_mr) &&
            wsync__vsym(h, "ibv_create_cq", &g->create_cq) &&
            wsync__vsym(h, "ibv_destroy_cq", &g->destroy_cq) &&
            wsync__vsym(h, "ibv_create_qp", &g->create_qp) &&
            wsync__vsym(h, "ibv_modify_qp", &g->modify_qp) &&
            wsync__vsym(h, "ibv_destroy_qp", &g->destroy_qp) &&
            wsync__vsym(h, "ibv_wc_status_str", &g->wc_status_str);
}

static struct ibv_device **wsync__vd_get_device_list(void *user, int *n)
{
    (void)user;
    return wsync__vlib_g.get_device_list(n);
}
static int wsync__vd_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    memset(a, 0, sizeof *a); /* the exported function fills a prefix only */
    return wsync__vlib_g.query_port(c, port, a);
}
/* post_send, post_recv and poll_cq are inline in verbs.h: calls through
   the context's ops, no symbol to link. */
static int wsync__vd_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    return ibv_post_send(qp, wr, bad);
}
static int wsync__vd_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return ibv_post_recv(qp, wr, bad);
}
static int wsync__vd_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    return ibv_poll_cq(cq, n, wc);
}
static const char *wsync__vd_wc_status_str(int s)
{
    return wsync__vlib_g.wc_status_str((enum ibv_wc_status)s);
}

static wsync_result wsync__vops_default(wsync_verbs_ops *o, wsync_error *err)
{
    const wsync__vlib *g = &wsync__vlib_g;
    pthread_once(&wsync__vlib_once, wsync__vlib_load);
    if (!g->ok) return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s", g->why);
    memset(o, 0, sizeof *o);
    o->get_device_list = wsync__vd_get_device_list;
    o->free_device_list = g->free_device_list;
    o->get_device_name = g->get_device_name;
    o->open_device = g->open_device;
    o->close_device = g->close_device;
    o->query_device = g->query_device;
    o->query_port = wsync__vd_query_port;
    o->query_gid = g->query_gid;
    o->alloc_pd = g->alloc_pd;
    o->dealloc_pd = g->dealloc_pd;
    o->reg_mr = g->reg_mr;
    o->dereg_mr = g->dereg_mr;
    o->create_cq = g->create_cq;
    o->destroy_cq = g->destroy_cq;
    o->create_qp = g->create_qp;
    o->modify_qp = g->modify_qp;
    o->destroy_qp = g->destroy_qp;
    o->post_send = wsync__vd_post_send;
    o->post_recv = wsync__vd_post_recv;
    o->poll_cq = wsync__vd_poll_cq;
    o->wc_status_str = wsync__vd_wc_status_str;
    return WSYNC_OK;
}

/* ---- state ---------------------------------------------------------- */

typedef struct wsync__vnic {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    uint8_t port, ethernet, mtu;
    uint16_t lid;
    int gid_index;
    uint8_t gid[16];
    uint32_t max_msg;
    char name[72];
    uint64_t bytes, wrs;
} wsync__vnic;

typedef struct wsync__vb {
    wsync__tcp t;              /* first: the control listener is the TCP backend's; t.b is the rbase */
    wsync_verbs_ops ops;
    unsigned n_nics;
    wsync__vnic nic[WSYNC_VERBS_MAX_NICS];
    unsigned sq_depth, signal_every, rq_depth;
    uint64_t split_min;
    uint32_t max_wr;
    uint64_t instance;         /* tells this fabric's descriptors from a restarted one's */
    wsync_fabric_verbs_stats st;
} wsync__vb;

/* A source or region: its registration on every NIC. */
typedef struct wsync__vmr {
    struct ibv_mr *mr[WSYNC_VERBS_MAX_NICS];
} wsync__vmr;

/* One queue pair of a remote (sender side). Completions are asked for by
   selected requests only; a completion retires every request before it,
   so `done` is the count of requests known finished. */
typedef struct wsync__vlane {
    wsync__vnic *nic;
    unsigned nic_i;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint32_t rkey, max_msg;
    uint64_t posted, done, last_sig, since_sig;
} wsync__vlane;

typedef struct wsync__vrem {
    unsigned n, rr;
    wsync__vlane lane[WSYNC_VERBS_MAX_NICS];
} wsync__vrem;

/* One side of a lane, as the handshake carries it. */
typedef struct wsync__vend {
    uint32_t nic, qpn, psn, max_msg;
    uint16_t lid;
    uint8_t ethernet, mtu, port;
    uint8_t gid[16];
} wsync__vend;

static void wsync__vend_put(uint8_t *p, const wsync__vend *e)
{
    memset(p, 0, WSYNC__VB_LANE);
    wsync__rput32(p, e->nic);
    wsync__rput32(p + 4, e->qpn);
    wsync__rput32(p + 8, e->psn);
    wsync__rput32(p + 12, e->max_msg);
    p[16] = (uint8_t)e->lid;
    p[17] = (uint8_t)(e->lid >> 8);
    p[18] = e->ethernet;
    p[19] = e->mtu;
    p[20] = e->port;
    memcpy(p + 24, e->gid, 16);
}

static void wsync__vend_get(const uint8_t *p, wsync__vend *e)
{
    e->nic = wsync__rget32(p);
    e->qpn = wsync__rget32(p + 4);
    e->psn = wsync__rget32(p + 8);
    e->max_msg = wsync__rget32(p + 12);
    e->lid = (uint16_t)(p[16] | p[17] << 8);
    e->ethernet = p[18];
    e->mtu = p[19];
    e->port = p[20];
    memcpy(e->gid, p + 24, 16);
}

static int wsync__vzero16(const uint8_t *g)
{
    int i;
    for (i = 0; i < 16; i++)
        if (g[i]) return 0;
    return 1;
}

/* A peer's lane, hostile until checked: 0 when usable against `local`. */
static int wsync__vend_bad(const wsync__vend *e, const wsync__vnic *local, const uint8_t *raw)
{
    if (e->qpn == 0 || e->qpn > 0xFFFFFFu || e->psn > 0xFFFFFFu || e->max_msg == 0) return 1;
    if (e->mtu < IBV_MTU_256 || e->mtu > IBV_MTU_4096 || e->ethernet > 1 || e->ethernet != local->ethernet) return 1;
    if (raw[21] || raw[22] || raw[23]) return 1;
    if (e->ethernet ? wsync__vzero16(e->gid) : e->lid == 0) return 1;
    return 0;
}

static wsync__vend wsync__vend_of(const wsync__vnic *n, uint32_t nic_index, struct ibv_qp *qp, uint32_t psn)
{
    wsync__vend e;
    memset(&e, 0, sizeof e);
    e.nic = nic_index;
    e.qpn = qp->qp_num;
    e.psn = psn;
    e.max_msg = n->max_msg;
    e.lid = n->lid;
    e.ethernet = n->ethernet;
    e.mtu = n->mtu;
    e.port = n->port;
    memcpy(e.gid, n->gid, 16);
    return e;
}

/* ---- NICs ------------------------------------------------------------ */

/* RoCE: the configured GID, else the first IPv4-mapped one (RoCE v2 over
   IPv4 on the usual setups), else the first non-zero one. */
static wsync_result wsync__vnic_gid(wsync__vb *v, wsync__vnic *n, int gid_len, int use_index, int index,
                                    wsync_error *err)
{
    union ibv_gid g;
    int i, first = -1;
    if (!n->ethernet || use_index) {
        i = n->ethernet ? index : 0;
        if (i < 0 || (gid_len > 0 && i >= gid_len))
            return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs fabric: %s: GID index %d outside the table (%d)",
                                n->name, i, gid_len);
        if (v->ops.query_gid(n->ctx, n->port, i, &g) != 0)
            return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_query_gid(%s, %d): %s", n->name, i,
                                strerror(errno));
        if (n->ethernet && wsync__vzero16(g.raw))
            return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs fabric: %s: GID %d is empty", n->name, i);
        n->gid_index = i;
        memcpy(n->gid, g.raw, 16);
        return WSYNC_OK;
    }
    for (i = 0; i < gid_len && i < WSYNC__VB_GID_SCAN; i++) {
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (v->ops.query_gid(n->ctx, n->port, i, &g) != 0 || wsync__vzero16(g.raw)) continue;
        if (memcmp(g.raw, v4, 12) == 0) {
            first = i;
            break;
        }
        if (first < 0) first = i;
    }
    if (first < 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s: RoCE port without a GID (no IP address?)", n->name);
    return wsync__vnic_gid(v, n, gid_len, 1, first, err);
}

/* Opens one NIC: device, port (0: its first active one from `from` on), GID, PD.
   1: opened; 0: no active port (not an error when picking any);
   -1: failed, err says why. */
static int wsync__vnic_open(wsync__vb *v, struct ibv_device *dev, unsigned port, unsigned from, int use_gid,
                            int gid_index, wsync__vnic *n, wsync_error *err)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    const char *dn = v->ops.get_device_name(dev);
    unsigned p, last;
    memset(n, 0, sizeof *n);
    if (!dn) dn = "?";
    n->ctx = v->ops.open_device(dev);
    if (!n->ctx) {
        wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_open_device(%s): %s", dn, strerror(errno ? errno : ENODEV));
        return -1;
    }
    memset(&da, 0, sizeof da);
    if (v->ops.query_device(n->ctx, &da) != 0) {
        wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_query_device(%s): %s", dn, strerror(errno));
        goto fail;
    }
    last = port ? port : da.phys_port_cnt;
    for (p = port ? port : from; p <= last; p++) {
        if (v->ops.query_port(n->ctx, (uint8_t)p, &pa) != 0) {
            if (!port) continue;
            wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_query_port(%s, %u): %s", dn, p, strerror(errno));
            goto fail;
        }
        if (pa.state == IBV_PORT_ACTIVE) break;
        if (port) {
            wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s port %u is not active (state %d)", dn, p, (int)pa.state);
            goto fail;
        }
    }
    if (p > last || p > 255) {
        v->ops.close_device(n->ctx);
        n->ctx = NULL;
        return 0;
    }
    n->port = (uint8_t)p;
    n->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    n->mtu = (uint8_t)pa.active_mtu;
    n->lid = pa.lid;
    n->max_msg = pa.max_msg_sz ? pa.max_msg_sz : (1u << 31);
    snprintf(n->name, sizeof n->name, "%.63s:%u", dn, p);
    if (n->mtu < IBV_MTU_256 || n->mtu > IBV_MTU_4096) n->mtu = IBV_MTU_1024;
    if (!n->ethernet && n->lid == 0) {
        wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s: InfiniBand port without a LID (no subnet manager?)", n->name);
        goto fail;
    }
    if (wsync__vnic_gid(v, n, pa.gid_tbl_len, use_gid, gid_index, err) != WSYNC_OK) goto fail;
    n->pd = v->ops.alloc_pd(n->ctx);
    if (!n->pd) {
        wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_alloc_pd(%s): %s", n->name, strerror(errno ? errno : ENOMEM));
        goto fail;
    }
    return 1;
fail:
    v->ops.close_device(n->ctx);
    n->ctx = NULL;
    return -1;
}

static void wsync__vnic_close(wsync__vb *v, wsync__vnic *n)
{
    if (n->pd) v->ops.dealloc_pd(n->pd);
    if (n->ctx) v->ops.close_device(n->ctx);
    n->pd = NULL;
    n->ctx = NULL;
}

/* One entry of options.devices ("name" or "name:port"). */
static wsync_result wsync__vnic_named(wsync__vb *v, struct ibv_device **list, int nd, const char *tok, size_t tl,
                                      int use_gid, int gid_index, wsync_error *err)
{
    char name[72], *colon, *end;
    unsigned long port = 0;
    int i, rc;
    if (tl == 0 || tl >= sizeof name)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs fabric: bad device name in options.devices");
    memcpy(name, tok, tl);
    name[tl] = 0;
    colon = strchr(name, ':');
    if (colon) {
        *colon = 0;
        port = strtoul(colon + 1, &end, 10);
        if (*end || port == 0 || port > 255)
            return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs fabric: bad port in '%s'", tok);
    }
    if (v->n_nics == WSYNC_VERBS_MAX_NICS)
        return wsync__rfail(err, WSYNC_ERR_LIMIT, "verbs fabric: more than %d NICs", WSYNC_VERBS_MAX_NICS);
    for (i = 0; i < nd; i++) {
        const char *dn = v->ops.get_device_name(list[i]);
        if (!dn || strcmp(dn, name) != 0) continue;
        rc = wsync__vnic_open(v, list[i], (unsigned)port, 1, use_gid, gid_index, &v->nic[v->n_nics], err);
        if (rc < 0) return err ? err->code : WSYNC_ERR_IO;
        if (rc == 0) return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s has no active port", name);
        v->n_nics++;
        return WSYNC_OK;
    }
    return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: no RDMA device named '%s' (%d devices)", name, nd);
}

/* Every active port of every device ("all"), or the first one (NULL).
   A device that fails to open is passed over; its error is reported when
   no NIC is left. */
static wsync_result wsync__vnic_any(wsync__vb *v, struct ibv_device **list, int nd, int all, int use_gid,
                                    int gid_index, wsync_error *err)
{
    int i, rc, failed = 0;
    for (i = 0; i < nd && v->n_nics < WSYNC_VERBS_MAX_NICS; i++) {
        unsigned from = 1;
        while (v->n_nics < WSYNC_VERBS_MAX_NICS) {
            rc = wsync__vnic_open(v, list[i], 0, from, use_gid, gid_index, &v->nic[v->n_nics], err);
            if (rc < 0) failed = 1;
            if (rc <= 0) break;
            from = (unsigned)v->nic[v->n_nics].port + 1;
            v->n_nics++;
            if (!all) return WSYNC_OK;
        }
    }
    if (v->n_nics) {
        wsync__rerr_reset(err);
        return WSYNC_OK;
    }
    if (failed) return err ? err->code : WSYNC_ERR_IO;
    return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: no active port on any of %d RDMA devices", nd);
}

static wsync_result wsync__vnic_open_all(wsync__vb *v, const char *spec, int use_gid, int gid_index, wsync_error *err)
{
    struct ibv_device **list;
    int nd = 0;
    wsync_result r = WSYNC_OK;
    errno = 0;
    list = v->ops.get_device_list(v->ops.user, &nd);
    if (!list)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: no RDMA devices (ibv_get_device_list: %s)",
                            strerror(errno ? errno : ENODEV));
    if (nd <= 0) r = wsync__rfail(err, WSYNC_ERR_IO, "%s", "verbs fabric: no RDMA devices");
    else if (!spec || !*spec) r = wsync__vnic_any(v, list, nd, 0, use_gid, gid_index, err);
    else if (strcmp(spec, "all") == 0) r = wsync__vnic_any(v, list, nd, 1, use_gid, gid_index, err);
    else {
        const char *p = spec;
        while (r == WSYNC_OK) {
            size_t tl = strcspn(p, ",");
            r = wsync__vnic_named(v, list, nd, p, tl, use_gid, gid_index, err);
            if (!p[tl]) break;
            p += tl + 1;
        }
    }
    v->ops.free_device_list(list);
    return r;
}

/* ---- queue pairs ------------------------------------------------------ */

static void wsync__vqp_destroy(wsync__vb *v, struct ibv_cq **cq, struct ibv_qp **qp)
{
    if (*qp) v->ops.destroy_qp(*qp);
    if (*cq) v->ops.destroy_cq(*cq);
    *qp = NULL;
    *cq = NULL;
}

/* An RC queue pair with a CQ of its own, in INIT. The CQ holds a
   completion for every request the queues can hold: on an error every
   outstanding request completes (flushed), signaled or not. */
static wsync_result wsync__vqp_create(wsync__vb *v, wsync__vnic *n, unsigned send_wr, unsigned recv_wr,
                                      int remote_write, struct ibv_cq **cq, struct ibv_qp **qp, wsync_error *err)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr a;
    int rc;
    *qp = NULL;
    *cq = v->ops.create_cq(n->ctx, (int)(send_wr + recv_wr + 1), NULL, NULL, 0);
    if (!*cq)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_create_cq(%s, %u): %s", n->name,
                            send_wr + recv_wr + 1, strerror(errno ? errno : ENOMEM));
    memset(&ia, 0, sizeof ia);
    ia.send_cq = *cq;
    ia.recv_cq = *cq;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 0;
    ia.cap.max_send_wr = send_wr;
    ia.cap.max_recv_wr = recv_wr;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    *qp = v->ops.create_qp(n->pd, &ia);
    if (!*qp) {
        rc = errno ? errno : ENOMEM;
        wsync__vqp_destroy(v, cq, qp);
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_create_qp(%s, RC, %u send, %u receive): %s",
                            n->name, send_wr, recv_wr, strerror(rc));
    }
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = n->port;
    a.qp_access_flags = remote_write ? IBV_ACCESS_REMOTE_WRITE : 0;
    rc = v->ops.modify_qp(*qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        wsync__vqp_destroy(v, cq, qp);
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_modify_qp(%s, INIT): %s", n->name, strerror(rc));
    }
    return WSYNC_OK;
}

/* INIT -> RTR (addressed to the peer: GRH on RoCE, LID on InfiniBand),
   then -> RTS when this side sends. */
static wsync_result wsync__vqp_connect(wsync__vb *v, wsync__vnic *n, struct ibv_qp *qp, const wsync__vend *peer,
                                       uint32_t my_psn, int rts, wsync_error *err)
{
    struct ibv_qp_attr a;
    int rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)(peer->mtu < n->mtu ? peer->mtu : n->mtu);
    a.dest_qp_num = peer->qpn;
    a.rq_psn = peer->psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12; /* 0.64 ms */
    a.ah_attr.port_num = n->port;
    if (n->ethernet) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)n->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    } else {
        a.ah_attr.dlid = peer->lid;
    }
    rc = v->ops.modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_modify_qp(%s, RTR to QP %u): %s", n->name,
                            (unsigned)peer->qpn, strerror(rc));
    if (!rts) return WSYNC_OK;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;   /* 4.096 us * 2^14 = 67 ms per try */
    a.retry_cnt = 7;
    a.rnr_retry = 7;  /* a receiver out of receives stalls the sender; flush's timeout bounds it */
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    rc = v->ops.modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                              IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_modify_qp(%s, RTS): %s", n->name, strerror(rc));
    return WSYNC_OK;
}

static int wsync__vpost_recv(wsync__vb *v, struct ibv_qp *qp, unsigned n)
{
    while (n--) {
        struct ibv_recv_wr wr, *bad = NULL;
        memset(&wr, 0, sizeof wr);
        wr.num_sge = 0; /* write-with-immediate consumes a receive but writes no bytes through it */
        if (v->ops.post_recv(qp, &wr, &bad) != 0) return -1;
    }
    return 0;
}

static void wsync__vput_hdr(uint8_t *h, uint32_t magic, uint32_t n_lanes, uint32_t region_or_status, uint64_t key)
{
    wsync__rput32(h, magic);
    wsync__rput32(h + 4, WSYNC__VB_VERSION);
    wsync__rput32(h + 8, WSYNC__VB_HDR + n_lanes * WSYNC__VB_LANE);
    wsync__rput32(h + 12, region_or_status);
    wsync__rput64(h + 16, key);
    wsync__rput32(h + 24, n_lanes);
    wsync__rput32(h + 28, 0);
}

/* ---- regions ------------------------------------------------------------ */

static void wsync__vmr_free(wsync__vb *v, struct wsync_fabric_mr *m)
{
    wsync__vmr *x = (wsync__vmr *)m->ext;
    unsigned i;
    if (!x) return;
    for (i = 0; i < v->n_nics; i++)
        if (x->mr[i]) v->ops.dereg_mr(x->mr[i]);
    wsync__rfree(&v->t.b.a, x);
    m->ext = NULL;
}

/* Unlinked first (no new handshake finds it, the connections writing to
   it are cut), then deregistered from every NIC: after that no remote
   write can land in the memory. */
static void wsync__vb_dereg(void *user, wsync_fabric_mr *m)
{
    wsync__vb *v = (wsync__vb *)user;
    if (!v || !m) return;
    wsync__runlink(&v->t.b, m);
    wsync__vmr_free(v, m);
    wsync__rfree(&v->t.b.a, m->q);
    wsync__rfree(&v->t.b.a, m);
}

static wsync_result wsync__vb_reg(void *user, void *addr, uint64_t len, wsync_mem_kind kind, wsync_fabric_mr **mr,
                                  wsync_fabric_desc *desc, wsync_error *err)
{
    wsync__vb *v = (wsync__vb *)user;
    struct wsync_fabric_mr *m;
    wsync__vmr *x;
    wsync_result r;
    unsigned i;
    size_t hl;
    int access;
    wsync__rerr_reset(err);
    if (!v || !mr || !desc) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "reg arguments");
    memset(desc, 0, sizeof *desc);
    if (!v->t.b.send_only && !v->t.b.started && (r = wsync__tcp_listen(&v->t, err)) != WSYNC_OK) return r;
    if ((r = wsync__rreg_common(&v->t.b, addr, len, kind, &m, err)) != WSYNC_OK) return r;
    if (len > (uint64_t)SIZE_MAX) {
        wsync__rfree(&v->t.b.a, m);
        return wsync__rfail(err, WSYNC_ERR_OVERFLOW, "%s", "reg: region too large");
    }
    x = (wsync__vmr *)wsync__ralloc(&v->t.b.a, sizeof *x);
    if (!x) {
        wsync__rfree(&v->t.b.a, m);
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "reg");
    }
    m->ext = x;
    /* a sender's source needs local access only; remote write needs local write too */
    access = IBV_ACCESS_LOCAL_WRITE | (v->t.b.send_only ? 0 : IBV_ACCESS_REMOTE_WRITE);
    for (i = 0; i < v->n_nics; i++) {
        x->mr[i] = v->ops.reg_mr(v->nic[i].pd, addr, (size_t)len, access);
        if (!x->mr[i]) {
            int e = errno ? errno : ENOMEM;
            wsync__vmr_free(v, m);
            wsync__rfree(&v->t.b.a, m);
            return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: ibv_reg_mr(%s, %llu bytes): %s%s", v->nic[i].name,
                                (unsigned long long)len, strerror(e),
                                e == ENOMEM || e == EPERM ? " (RLIMIT_MEMLOCK? see ulimit -l)" : "");
        }
    }
    wsync__rlink(&v->t.b, m);
    desc->backend = WSYNC_FABRIC_VERBS;
    desc->kind = WSYNC_MEM_HOST;
    desc->version = 1;
    desc->addr = (uint64_t)(uintptr_t)addr;
    desc->len = len;
    if (m->linked) { /* a send_only fabric's descriptor names no endpoint: peers cannot open it */
        hl = strlen(v->t.adv_host);
        desc->bytes[0] = (uint8_t)v->t.port;
        desc->bytes[1] = (uint8_t)(v->t.port >> 8);
        desc->bytes[2] = (uint8_t)hl;
        desc->bytes[3] = (uint8_t)v->n_nics;
        wsync__rput32(desc->bytes + 4, m->id);
        wsync__rput64(desc->bytes + 8, m->key);
        wsync__rput64(desc->bytes + 16, v->instance);
        for (i = 0; i < v->n_nics; i++) wsync__rput32(desc->bytes + WSYNC__VB_DESC_FIXED + 4 * i, x->mr[i]->rkey);
        memcpy(desc->bytes + WSYNC__VB_DESC_FIXED + 4 * v->n_nics, v->t.adv_host, hl);
        desc->n_bytes = (uint32_t)(WSYNC__VB_DESC_FIXED + 4 * v->n_nics + hl);
    }
    *mr = m;
    return WSYNC_OK;
}

/* ---- the receiver: one thread per control connection ------------------ */

static void wsync__vb_note(wsync__rbase *b, int rejected, const char *fmt, const char *arg)
{
    char msg[600];
    size_t k;
    snprintf(msg, sizeof msg, fmt, arg);
    k = strlen(msg); /* cut to the stats' room: the start is what matters */
    if (k >= sizeof b->stats.last_reject) k = sizeof b->stats.last_reject - 1;
    pthread_mutex_lock(&b->mu);
    if (rejected) b->stats.rejected++;
    else b->stats.dropped++;
    memcpy(b->stats.last_reject, msg, k);
    b->stats.last_reject[k] = 0;
    pthread_mutex_unlock(&b->mu);
}

/* A sender's hello, hostile until checked: 0, a WSYNC__VREJ_ reason, or
   -1 when it did not arrive whole within the timeout. */
static int wsync__vb_read_hello(wsync__vb *v, int fd, uint32_t *region, uint64_t *key, unsigned *n, wsync__vend *peer)
{
    uint8_t h[WSYNC__VB_HDR], lanes[WSYNC_VERBS_MAX_NICS * WSYNC__VB_LANE];
    int64_t deadline = wsync__rnow_ms() + v->t.b.timeout_ms, left;
    uint32_t nl, i;
    if (wsync__rrecv_full(fd, h, sizeof h, (int)v->t.b.timeout_ms, 0) != 1) return -1;
    if (wsync__rget32(h) != WSYNC__VB_HELLO_MAGIC) return WSYNC__VREJ_MAGIC;
    if (wsync__rget32(h + 4) != WSYNC__VB_VERSION) return WSYNC__VREJ_VERSION;
    nl = wsync__rget32(h + 24);
    if (nl == 0 || nl > WSYNC_VERBS_MAX_NICS || wsync__rget32(h + 8) != WSYNC__VB_HDR + nl * WSYNC__VB_LANE ||
        wsync__rget32(h + 28) != 0)
        return WSYNC__VREJ_LENGTH;
    left = deadline - wsync__rnow_ms();
    if (left <= 0 || wsync__rrecv_full(fd, lanes, nl * WSYNC__VB_LANE, (int)left, 0) != 1) return -1;
    for (i = 0; i < nl; i++) {
        const uint8_t *raw = lanes + i * WSYNC__VB_LANE;
        wsync__vend_get(raw, &peer[i]);
        if (peer[i].nic >= v->n_nics || wsync__vend_bad(&peer[i], &v->nic[peer[i].nic], raw)) return WSYNC__VREJ_LANE;
    }
    *region = wsync__rget32(h + 12);
    *key = wsync__rget64(h + 16);
    *n = nl;
    return 0;
}

/* Until the sender closes the connection (or dereg or close cuts it):
   immediates from lane 0's receive completions into the region's queue,
   each receive posted again at once. Polled every millisecond: there is
   no completion channel (yet). */
static void wsync__vb_serve_loop(wsync__vb *v, wsync__rconn *c, struct wsync_fabric_mr *m, struct ibv_cq *cq,
                                 struct ibv_qp *qp)
{
    wsync__rbase *b = &v->t.b;
    int busy = 0;
    for (;;) {
        struct ibv_wc wc[16];
        struct pollfd pf;
        int pr, k, i;
        pf.fd = c->fd;
        pf.events = POLLIN;
        pf.revents = 0;
        pr = poll(&pf, 1, busy ? 0 : 1);
        if (pr < 0 && errno != EINTR) return;
        if (pr > 0) {
            uint8_t x;
            ssize_t got = recv(c->fd, &x, 1, MSG_DONTWAIT);
            if (got == 0) return; /* the sender closed: its queue pairs are gone */
            if (got > 0) {
                wsync__vb_note(b, 1, "verbs: %s", "bytes on the control connection after the handshake");
                return;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;
        }
        k = v->ops.poll_cq(cq, 16, wc);
        if (k < 0) {
            wsync__vb_note(b, 0, "verbs: %s", "ibv_poll_cq failed on a receiver's queue");
            return;
        }
        busy = k > 0;
        for (i = 0; i < k; i++) {
            int why = 0;
            if (wc[i].status != IBV_WC_SUCCESS) {
                wsync__vb_note(b, 0, "verbs receive completion: %s", wsync__vwc_name((int)wc[i].status));
                return;
            }
            if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc[i].wc_flags & IBV_WC_WITH_IMM)) {
                pthread_mutex_lock(&b->mu);
                if (c->busy == m) {
                    b->stats.frames++;
                    why = wsync__rimm_push(b, m, ntohl(wc[i].imm_data));
                }
                pthread_mutex_unlock(&b->mu);
            }
            if (why) {
                wsync__vb_note(b, 1, "verbs: %s", wsync__rej_str((uint32_t)why));
                return;
            }
            if (wsync__vpost_recv(v, qp, 1) != 0) {
                wsync__vb_note(b, 0, "verbs: %s", "ibv_post_recv failed");
                return;
            }
        }
    }
}

/* Creates this side of every lane, in RTR; lane 0 with receives posted. */
static int wsync__vb_accept_lanes(wsync__vb *v, unsigned n, const wsync__vend *peer, wsync__vend *mine,
                                  struct ibv_cq **cq, struct ibv_qp **qp, wsync_error *e)
{
    unsigned i;
    for (i = 0; i < n; i++) {
        wsync__vnic *nic = &v->nic[peer[i].nic];
        uint32_t psn = (uint32_t)wsync__rrandom64() & 0xFFFFFFu;
        if (wsync__vqp_create(v, nic, 1, i == 0 ? v->rq_depth : 1, 1, &cq[i], &qp[i], e) != WSYNC_OK) return -1;
        if (i == 0 && wsync__vpost_recv(v, qp[0], v->rq_depth) != 0) {
            wsync__rfail(e, WSYNC_ERR_IO, "verbs fabric: ibv_post_recv(%s): %s", nic->name, strerror(errno));
            return -1;
        }
        if (wsync__vqp_connect(v, nic, qp[i], &peer[i], psn, 0, e) != WSYNC_OK) return -1;
        mine[i] = wsync__vend_of(nic, peer[i].nic, qp[i], psn);
    }
    return 0;
}

static void wsync__vb_serve(wsync__rbase *b, wsync__rconn *c)
{
    wsync__vb *v = (wsync__vb *)b;
    wsync__vend peer[WSYNC_VERBS_MAX_NICS], mine[WSYNC_VERBS_MAX_NICS];
    struct ibv_cq *cq[WSYNC_VERBS_MAX_NICS];
    struct ibv_qp *qp[WSYNC_VERBS_MAX_NICS];
    uint8_t rep[WSYNC__VB_HDR + WSYNC_VERBS_MAX_NICS * WSYNC__VB_LANE];
    struct wsync_fabric_mr *m = NULL;
    uint32_t region = 0;
    uint64_t key = 0;
    unsigned n = 0, i;
    int st;
    wsync_error e;
    memset(cq, 0, sizeof cq);
    memset(qp, 0, sizeof qp);
    st = wsync__vb_read_hello(v, c->fd, &region, &key, &n, peer);
    if (st < 0) {
        wsync__vb_note(b, 0, "verbs: %s", "a sender sent no complete handshake within the timeout");
        return;
    }
    if (st == 0) {
        pthread_mutex_lock(&b->mu);
        m = wsync__rfind(b, region);
        if (!m) st = WSYNC__VREJ_REGION;
        else if (m->key != key) st = WSYNC__VREJ_KEY;
        else c->busy = m;
        pthread_mutex_unlock(&b->mu);
    }
    if (st == 0 && wsync__vb_accept_lanes(v, n, peer, mine, cq, qp, &e) != 0) {
        st = WSYNC__VREJ_VERBS;
        wsync__vb_note(b, 1, "%s", e.message);
    } else if (st) {
        wsync__vb_note(b, 1, "verbs handshake refused: %s", wsync__vrej_str((uint32_t)st));
    }
    if (st) n = 0;
    wsync__vput_hdr(rep, WSYNC__VB_REPLY_MAGIC, n, (uint32_t)st, 0);
    for (i = 0; i < n; i++) wsync__vend_put(rep + WSYNC__VB_HDR + i * WSYNC__VB_LANE, &mine[i]);
    if (wsync__rsend_all(c->fd, rep, WSYNC__VB_HDR + n * WSYNC__VB_LANE, 0) == 0 && st == 0)
        wsync__vb_serve_loop(v, c, m, cq[0], qp[0]);
    for (i = 0; i < WSYNC_VERBS_MAX_NICS; i++) wsync__vqp_destroy(v, &cq[i], &qp[i]);
}

/* ---- the sender: remotes ------------------------------------------------ */

static void wsync__vrem_free(wsync__vb *v, struct wsync_fabric_remote *r)
{
    wsync__vrem *x = (wsync__vrem *)r->ext;
    unsigned i;
    if (!x) return;
    for (i = 0; i < WSYNC_VERBS_MAX_NICS; i++) wsync__vqp_destroy(v, &x->lane[i].cq, &x->lane[i].qp);
    wsync__rfree(&v->t.b.a, x);
    r->ext = NULL;
}

static void wsync__vb_close_remote(void *user, wsync_fabric_remote *r)
{
    wsync__vb *v = (wsync__vb *)user;
    if (!v || !r) return;
    wsync__vrem_free(v, r);
    wsync__rclose_remote(&v->t.b, r);
}

/* The descriptor, hostile until checked: endpoint, region, key, rkeys. */
static wsync_result wsync__vb_parse_desc(const wsync_fabric_desc *d, char *host, size_t host_cap, unsigned *port,
                                         unsigned *n_nics, uint32_t *rkeys, wsync_error *err)
{
    unsigned hl, i;
    if (d->backend != WSYNC_FABRIC_VERBS || d->version != 1 || d->kind != WSYNC_MEM_HOST)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT,
                            "not a verbs fabric descriptor (backend %u, version %u, kind %u)", (unsigned)d->backend,
                            (unsigned)d->version, (unsigned)d->kind);
    if (d->n_bytes < WSYNC__VB_DESC_FIXED + 5 || d->n_bytes > WSYNC_FABRIC_DESC_MAX)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs descriptor: %u backend bytes (a send-only fabric's?)",
                            (unsigned)d->n_bytes);
    *port = (unsigned)d->bytes[0] | (unsigned)d->bytes[1] << 8;
    hl = d->bytes[2];
    *n_nics = d->bytes[3];
    if (hl == 0 || hl >= host_cap || *n_nics == 0 || *n_nics > WSYNC_VERBS_MAX_NICS || *port == 0 || d->len == 0 ||
        d->n_bytes != WSYNC__VB_DESC_FIXED + 4 * *n_nics + hl)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs descriptor: malformed endpoint or NIC count");
    for (i = 0; i < *n_nics; i++) rkeys[i] = wsync__rget32(d->bytes + WSYNC__VB_DESC_FIXED + 4 * i);
    memcpy(host, d->bytes + WSYNC__VB_DESC_FIXED + 4 * *n_nics, hl);
    host[hl] = 0;
    if (strlen(host) != hl) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs descriptor: NUL in host");
    return WSYNC_OK;
}

/* The receiver's reply, hostile until checked. */
static wsync_result wsync__vb_read_reply(wsync__vb *v, struct wsync_fabric_remote *r, unsigned n,
                                         const wsync__vend *mine, wsync__vend *peer, wsync_error *err)
{
    uint8_t h[WSYNC__VB_HDR], lanes[WSYNC_VERBS_MAX_NICS * WSYNC__VB_LANE];
    int64_t deadline = wsync__rnow_ms() + v->t.b.timeout_ms, left;
    wsync__vrem *x = (wsync__vrem *)r->ext;
    unsigned i;
    int rc = wsync__rrecv_full(r->fd, h, sizeof h, (int)v->t.b.timeout_ms, 0);
    if (rc == 0) return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s closed the connection in the handshake", r->peer);
    if (rc < 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: no handshake reply from %s within %u ms%s", r->peer,
                            v->t.b.timeout_ms, errno == ETIMEDOUT ? "" : " (the connection failed)");
    if (wsync__rget32(h) != WSYNC__VB_REPLY_MAGIC || wsync__rget32(h + 4) != WSYNC__VB_VERSION)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s answered with a bad magic or version %u", r->peer,
                            (unsigned)wsync__rget32(h + 4));
    if (wsync__rget32(h + 12) != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s refused the handshake: %s", r->peer,
                            wsync__vrej_str(wsync__rget32(h + 12)));
    if (wsync__rget32(h + 24) != n || wsync__rget32(h + 8) != WSYNC__VB_HDR + n * WSYNC__VB_LANE ||
        wsync__rget32(h + 28) != 0 || wsync__rget64(h + 16) != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s answered with a malformed handshake (%u lanes, asked %u)",
                            r->peer, (unsigned)wsync__rget32(h + 24), n);
    left = deadline - wsync__rnow_ms();
    if (left <= 0 || wsync__rrecv_full(r->fd, lanes, n * WSYNC__VB_LANE, (int)left, 0) != 1)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s: a truncated handshake reply within %u ms", r->peer,
                            v->t.b.timeout_ms);
    for (i = 0; i < n; i++) {
        const uint8_t *raw = lanes + i * WSYNC__VB_LANE;
        wsync__vend_get(raw, &peer[i]);
        if (peer[i].nic != mine[i].nic || wsync__vend_bad(&peer[i], x->lane[i].nic, raw))
            return wsync__rfail(err, WSYNC_ERR_IO,
                                "verbs fabric: %s lane %u: invalid queue pair, PSN, MTU or address, or another link "
                                "layer than %s's",
                                r->peer, i, x->lane[i].nic->name);
    }
    return WSYNC_OK;
}

/* Lanes: max(our NICs, the receiver's); lane i goes from our NIC i % S
   to theirs i % R. */
static wsync_result wsync__vb_handshake(wsync__vb *v, struct wsync_fabric_remote *r, unsigned rn,
                                        const uint32_t *rkeys, wsync_error *err)
{
    wsync__vrem *x = (wsync__vrem *)r->ext;
    wsync__vend mine[WSYNC_VERBS_MAX_NICS], peer[WSYNC_VERBS_MAX_NICS];
    uint8_t hello[WSYNC__VB_HDR + WSYNC_VERBS_MAX_NICS * WSYNC__VB_LANE];
    wsync_result res;
    unsigned i, n = v->n_nics > rn ? v->n_nics : rn;
    x->n = n;
    for (i = 0; i < n; i++) {
        wsync__vlane *l = &x->lane[i];
        uint32_t psn = (uint32_t)wsync__rrandom64() & 0xFFFFFFu;
        l->nic_i = i % v->n_nics;
        l->nic = &v->nic[l->nic_i];
        l->rkey = rkeys[i % rn];
        if ((res = wsync__vqp_create(v, l->nic, v->sq_depth, 1, 0, &l->cq, &l->qp, err)) != WSYNC_OK) return res;
        mine[i] = wsync__vend_of(l->nic, i % rn, l->qp, psn);
    }
    wsync__vput_hdr(hello, WSYNC__VB_HELLO_MAGIC, n, r->region, r->key);
    for (i = 0; i < n; i++) wsync__vend_put(hello + WSYNC__VB_HDR + i * WSYNC__VB_LANE, &mine[i]);
    if (wsync__rsend_all(r->fd, hello, WSYNC__VB_HDR + n * WSYNC__VB_LANE, 0) != 0)
        return wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: sending the handshake to %s: %s", r->peer, strerror(errno));
    if ((res = wsync__vb_read_reply(v, r, n, mine, peer, err)) != WSYNC_OK) return res;
    for (i = 0; i < n; i++) {
        wsync__vlane *l = &x->lane[i];
        uint32_t mm = peer[i].max_msg < l->nic->max_msg ? peer[i].max_msg : l->nic->max_msg;
        l->max_msg = mm < v->max_wr ? mm : v->max_wr;
        if ((res = wsync__vqp_connect(v, l->nic, l->qp, &peer[i], mine[i].psn, 1, err)) != WSYNC_OK) return res;
    }
    return WSYNC_OK;
}

static wsync_result wsync__vb_open_remote(void *user, const wsync_fabric_desc *d, wsync_fabric_remote **out,
                                          wsync_error *err)
{
    wsync__vb *v = (wsync__vb *)user;
    struct wsync_fabric_remote *r;
    uint32_t rkeys[WSYNC_VERBS_MAX_NICS];
    char host[64], why[160];
    unsigned port = 0, rn = 0;
    wsync_result res;
    wsync__rerr_reset(err);
    if (!v || !d || !out) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "open_remote arguments");
    *out = NULL;
    if ((res = wsync__vb_parse_desc(d, host, sizeof host, &port, &rn, rkeys, err)) != WSYNC_OK) return res;
    r = (struct wsync_fabric_remote *)wsync__ralloc(&v->t.b.a, sizeof *r);
    if (r) r->ext = wsync__ralloc(&v->t.b.a, sizeof(wsync__vrem));
    if (!r || !r->ext) {
        wsync__rfree(&v->t.b.a, r);
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "open_remote");
    }
    r->backend = WSYNC_FABRIC_VERBS;
    r->region = wsync__rget32(d->bytes + 4);
    r->key = wsync__rget64(d->bytes + 8);
    r->addr = d->addr;
    r->len = d->len;
    snprintf(r->peer, sizeof r->peer, "%s:%u", host, port);
    r->fd = wsync__tcp_connect(host, port, v->t.connect_timeout_ms, why, sizeof why);
    if (r->fd < 0) {
        res = wsync__rfail(err, WSYNC_ERR_IO, "verbs fabric: %s: %s", r->peer, why);
        goto fail;
    }
    wsync__rset_timeouts(r->fd, v->t.b.timeout_ms);
    if ((res = wsync__vb_handshake(v, r, rn, rkeys, err)) != WSYNC_OK) goto fail;
    r->next = v->t.b.remotes;
    v->t.b.remotes = r;
    *out = r;
    return WSYNC_OK;
fail:
    wsync__vrem_free(v, r);
    if (r->fd >= 0) close(r->fd);
    wsync__rfree(&v->t.b.a, r);
    return res;
}

/* ---- the sender: posting and polling ------------------------------------ */

static wsync_result wsync__vb_broken(struct wsync_fabric_remote *r, wsync_error *err, const char *msg)
{
    return wsync__rbreak(r, err, "%s", msg);
}

/* One poll of lane l's CQ: the completions' count, or -1 when one of
   them failed. An error completion breaks the remote: RC moved the queue
   pair to the error state, and every request after it is flushed. */
static int wsync__vb_reap(wsync__vb *v, struct wsync_fabric_remote *r, wsync__vlane *l, wsync_error *err)
{
    struct ibv_wc wc[16];
    char msg[300];
    int k = v->ops.poll_cq(l->cq, 16, wc), i;
    if (k < 0) {
        snprintf(msg, sizeof msg, "ibv_poll_cq(%s) failed (%d)", l->nic->name, k);
        wsync__vb_broken(r, err, msg);
        return -1;
    }
    for (i = 0; i < k; i++) {
        v->st.completions++;
        if (wc[i].status != IBV_WC_SUCCESS) {
            snprintf(msg, sizeof msg, "a write on %s completed with %s (status %d, vendor error 0x%x)", l->nic->name,
                     wsync__vwc_name((int)wc[i].status), (int)wc[i].status, (unsigned)wc[i].vendor_err);
            wsync__vb_broken(r, err, msg);
            return -1;
        }
        if (wc[i].wr_id > l->done && wc[i].wr_id <= l->posted) l->done = wc[i].wr_id;
    }
    return k;
}

/* Polls lane l until `target` requests are known finished. */
static wsync_result wsync__vb_poll(wsync__vb *v, struct wsync_fabric_remote *r, wsync__vlane *l, uint64_t target,
                                   int64_t deadline, wsync_error *err)
{
    unsigned idle = 0;
    char msg[300];
    while (l->done < target) {
        int k = wsync__vb_reap(v, r, l, err);
        if (k < 0) return WSYNC_ERR_IO;
        if (k > 0) {
            idle = 0;
            continue;
        }
        if (wsync__rnow_ms() > deadline) {
            snprintf(msg, sizeof msg, "no completion from %s within %u ms (%llu requests outstanding)", l->nic->name,
                     v->t.b.timeout_ms, (unsigned long long)(l->posted - l->done));
            return wsync__vb_broken(r, err, msg);
        }
        if (++idle > 64) {
            struct timespec ts;
            ts.tv_sec = 0;
            ts.tv_nsec = 20000;
            nanosleep(&ts, NULL);
        }
    }
    return WSYNC_OK;
}

/* Posts one request. Every signal_every-th asks for a completion, and so
   does the one that fills the queue, so that a full queue always has a
   completion coming; a full queue (by count, or ENOMEM from the provider)
   is polled until it has room. */
static wsync_result wsync__vb_post(wsync__vb *v, struct wsync_fabric_remote *r, wsync__vlane *l,
                                   struct ibv_send_wr *wr, int force_sig, wsync_error *err)
{
    int64_t deadline = wsync__rnow_ms() + v->t.b.timeout_ms;
    char msg[200];
    for (;;) {
        struct ibv_send_wr *bad = NULL;
        wsync_result res;
        int sig, rc, rc2;
        if (l->posted - l->done >= v->sq_depth) {
            v->st.sq_full_waits++;
            res = wsync__vb_poll(v, r, l, l->posted - v->sq_depth + 1, deadline, err);
            if (res != WSYNC_OK) return res;
        }
        sig = force_sig || l->since_sig + 1 >= v->signal_every || l->posted + 1 - l->done >= v->sq_depth;
        wr->wr_id = l->posted + 1;
        wr->send_flags = sig ? IBV_SEND_SIGNALED : 0;
        rc = v->ops.post_send(l->qp, wr, &bad);
        if (rc == 0) {
            l->posted++;
            if (sig) {
                l->since_sig = 0;
                l->last_sig = l->posted;
                v->st.signaled++;
            } else {
                l->since_sig++;
            }
            l->nic->wrs++;
            l->nic->bytes += wr->num_sge ? wr->sg_list[0].length : 0;
            return WSYNC_OK;
        }
        if (rc != ENOMEM) {
            /* an error completion moved the queue pair out of RTS: that is the reason to report */
            while ((rc2 = wsync__vb_reap(v, r, l, err)) > 0) {
            }
            if (rc2 < 0) return WSYNC_ERR_IO;
            snprintf(msg, sizeof msg, "ibv_post_send(%s): %s", l->nic->name, strerror(rc));
            return wsync__vb_broken(r, err, msg);
        }
        /* fuller than counted (the provider's own limit): completions make room */
        v->st.enomem_retries++;
        if (l->last_sig > l->done) {
            if ((res = wsync__vb_poll(v, r, l, l->done + 1, deadline, err)) != WSYNC_OK) return res;
        } else if (wsync__rnow_ms() > deadline) {
            snprintf(msg, sizeof msg, "ibv_post_send(%s): the send queue stayed full (ENOMEM) for %u ms", l->nic->name,
                     v->t.b.timeout_ms);
            return wsync__vb_broken(r, err, msg);
        } else {
            struct timespec ts;
            ts.tv_sec = 0;
            ts.tv_nsec = 50000;
            nanosleep(&ts, NULL);
        }
    }
}

/* len bytes on one lane, in requests of at most the lane's max_msg; the
   last carries the immediate when there is one (len 0: one empty one). */
static wsync_result wsync__vb_put(wsync__vb *v, const struct wsync_fabric_mr *src, uint64_t src_off,
                                  struct wsync_fabric_remote *r, wsync__vlane *l, uint64_t dst_off, uint64_t len,
                                  int with_imm, uint32_t imm, wsync_error *err)
{
    const wsync__vmr *x = (const wsync__vmr *)src->ext;
    wsync_result res;
    do {
        struct ibv_sge sge;
        struct ibv_send_wr wr;
        uint64_t n = len < l->max_msg ? len : l->max_msg;
        int last = n == len;
        memset(&wr, 0, sizeof wr);
        sge.addr = (uint64_t)(uintptr_t)(src->addr + src_off);
        sge.length = (uint32_t)n;
        sge.lkey = x->mr[l->nic_i]->lkey;
        wr.sg_list = &sge;
        wr.num_sge = n ? 1 : 0;
        wr.opcode = last && with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        if (last && with_imm) wr.imm_data = htonl(imm);
        wr.wr.rdma.remote_addr = r->addr + dst_off;
        wr.wr.rdma.rkey = l->rkey;
        if ((res = wsync__vb_post(v, r, l, &wr, 0, err)) != WSYNC_OK) return res;
        if (last && with_imm) v->st.imms++;
        src_off += n;
        dst_off += n;
        len -= n;
    } while (len);
    return WSYNC_OK;
}

/* Waits until every request posted on l finished; when the last ones
   asked for no completion, an empty write that does goes after them. */
static wsync_result wsync__vb_drain(wsync__vb *v, struct wsync_fabric_remote *r, wsync__vlane *l, wsync_error *err)
{
    wsync_result res;
    if (l->done == l->posted) return WSYNC_OK;
    if (l->last_sig < l->posted) {
        struct ibv_send_wr wr;
        memset(&wr, 0, sizeof wr);
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.num_sge = 0;
        wr.wr.rdma.remote_addr = r->addr;
        wr.wr.rdma.rkey = l->rkey;
        if ((res = wsync__vb_post(v, r, l, &wr, 1, err)) != WSYNC_OK) return res;
    }
    return wsync__vb_poll(v, r, l, l->posted, wsync__rnow_ms() + v->t.b.timeout_ms, err);
}

/* A write: one lane when short (round-robin), else split across every
   lane on 4 KiB boundaries. An immediate goes on lane 0 after the other
   lanes drained: RC orders requests within a queue pair only, and the
   immediate must come after every byte written to the remote so far. */
static wsync_result wsync__vb_send(wsync__vb *v, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                   uint64_t dst_off, uint64_t len, int with_imm, uint32_t imm, wsync_error *err)
{
    wsync__vrem *x;
    wsync_result res;
    uint64_t piece;
    unsigned i, n;
    wsync__rerr_reset(err);
    if ((res = wsync__rcheck_write(v ? &v->t.b : NULL, src, src_off, dst, dst_off, len, err)) != WSYNC_OK) return res;
    x = (wsync__vrem *)dst->ext;
    if (wsync__rpeer_gone(dst->fd))
        return wsync__vb_broken(dst, err, "the receiver closed the control connection (exited, or deregistered the region)");
    if (len == 0 && !with_imm) return WSYNC_OK;
    n = x->n;
    if (n == 1 || len / n < v->split_min) {
        wsync__vlane *l = with_imm ? &x->lane[0] : &x->lane[x->rr++ % n];
        for (i = 1; with_imm && i < n; i++)
            if ((res = wsync__vb_drain(v, dst, &x->lane[i], err)) != WSYNC_OK) return res;
        return wsync__vb_put(v, src, src_off, dst, l, dst_off, len, with_imm, imm, err);
    }
    piece = (len / n) & ~(uint64_t)4095;
    for (i = 0; i < n; i++) {
        uint64_t off = piece * i, cnt = i + 1 == n ? len - off : piece;
        res = wsync__vb_put(v, src, src_off + off, dst, &x->lane[i], dst_off + off, cnt, 0, 0, err);
        if (res != WSYNC_OK) return res;
    }
    if (!with_imm) return WSYNC_OK;
    for (i = 1; i < n; i++)
        if ((res = wsync__vb_drain(v, dst, &x->lane[i], err)) != WSYNC_OK) return res;
    return wsync__vb_put(v, src, src_off, dst, &x->lane[0], dst_off, 0, 1, imm, err);
}

static wsync_result wsync__vb_write(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                    uint64_t dst_off, uint64_t len, wsync_error *err)
{
    return wsync__vb_send((wsync__vb *)user, src, src_off, dst, dst_off, len, 0, 0, err);
}

static wsync_result wsync__vb_write_imm(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                        uint64_t dst_off, uint64_t len, uint32_t imm, wsync_error *err)
{
    return wsync__vb_send((wsync__vb *)user, src, src_off, dst, dst_off, len, 1, imm, err);
}

/* Every lane of every remote drained; the first broken remote reported. */
static wsync_result wsync__vb_flush(void *user, wsync_error *err)
{
    wsync__vb *v = (wsync__vb *)user;
    struct wsync_fabric_remote *r;
    unsigned i;
    wsync__rerr_reset(err);
    if (!v) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "flush arguments");
    for (r = v->t.b.remotes; r; r = r->next) {
        wsync__vrem *x = (wsync__vrem *)r->ext;
        if (r->broken) continue;
        if (wsync__rpeer_gone(r->fd)) {
            wsync__vb_broken(r, NULL, "the receiver closed the control connection (exited, or deregistered the region)");
            continue;
        }
        for (i = 0; i < x->n; i++)
            if (wsync__vb_drain(v, r, &x->lane[i], NULL) != WSYNC_OK) break;
    }
    for (r = v->t.b.remotes; r; r = r->next)
        if (r->broken)
            return wsync__rfail(err, WSYNC_ERR_IO, "flush: %s region %u: %s", r->peer, (unsigned)r->region, r->why);
    return WSYNC_OK;
}

/* ---- open and close ------------------------------------------------------ */

static void wsync__vb_close(void *user)
{
    wsync__vb *v = (wsync__vb *)user;
    wsync_allocator a;
    unsigned i;
    if (!v) return;
    a = v->t.b.a;
    wsync__rsrv_stop(&v->t.b); /* the connection threads destroy their queue pairs */
    while (v->t.b.remotes) wsync__vb_close_remote(v, v->t.b.remotes);
    while (v->t.b.regions) wsync__vb_dereg(v, v->t.b.regions);
    while (v->t.b.sources) wsync__vb_dereg(v, v->t.b.sources);
    wsync__rbase_close(&v->t.b);
    for (i = 0; i < v->n_nics; i++) wsync__vnic_close(v, &v->nic[i]);
    wsync__rfree(&a, v);
}

static wsync_result wsync__vb_check_ops(const wsync_verbs_ops *o, wsync_error *err)
{
    if (!o->get_device_list || !o->free_device_list || !o->get_device_name || !o->open_device || !o->close_device ||
        !o->query_device || !o->query_port || !o->query_gid || !o->alloc_pd || !o->dealloc_pd || !o->reg_mr ||
        !o->dereg_mr || !o->create_cq || !o->destroy_cq || !o->create_qp || !o->modify_qp || !o->destroy_qp ||
        !o->post_send || !o->post_recv || !o->poll_cq)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs fabric: options.ops misses a function");
    return WSYNC_OK;
}

static unsigned wsync__vclamp(unsigned v, unsigned dflt, unsigned lo, unsigned hi)
{
    if (!v) v = dflt;
    return v < lo ? lo : v > hi ? hi : v;
}

static void wsync__vb_settings(wsync__vb *v, const wsync_fabric_verbs_options *o)
{
    const char *adv;
    v->t.b.serve = wsync__vb_serve;
    v->t.b.timeout_ms = o->timeout_ms ? o->timeout_ms : 10000;
    v->t.b.max_conns = 256;
    v->t.b.send_only = o->send_only;
    snprintf(v->t.bind_host, sizeof v->t.bind_host, "%s", o->bind_host);
    adv = o->advertise_host && *o->advertise_host ? o->advertise_host : NULL;
    if (!adv && strcmp(o->bind_host, "0.0.0.0") != 0 && strcmp(o->bind_host, "::") != 0) adv = o->bind_host;
    if (adv) snprintf(v->t.adv_host, sizeof v->t.adv_host, "%s", adv);
    else if (gethostname(v->t.adv_host, sizeof v->t.adv_host - 1) != 0 || !v->t.adv_host[0])
        snprintf(v->t.adv_host, sizeof v->t.adv_host, "%s", "127.0.0.1");
    v->t.port = o->port;
    v->t.connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : 5000;
    v->t.sockbuf = 256u << 10;
    v->t.chunk = 4u << 20;
    v->sq_depth = wsync__vclamp(o->sq_depth, 256, 2, 1u << 15);
    v->signal_every = wsync__vclamp(o->signal_every, v->sq_depth / 4, 1, v->sq_depth);
    v->rq_depth = wsync__vclamp(o->rq_depth, 256, 1, 1u << 15);
    v->max_wr = wsync__vclamp(o->max_wr_bytes, 1u << 30, 4096, 1u << 30);
    v->split_min = wsync__vclamp(o->split_min, 256u << 10, 4096, UINT32_MAX);
    v->instance = wsync__rrandom64();
}

WSYNC_DEF wsync_result wsync_fabric_verbs_open(const wsync_fabric_verbs_options *opt, wsync_fabric *out,
                                               wsync_error *err)
{
    wsync_fabric_verbs_options o;
    wsync__vb *v;
    wsync_result r;
    wsync__rerr_reset(err);
    if (!out) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs_open arguments");
    memset(out, 0, sizeof *out);
    if (opt) o = *opt;
    else memset(&o, 0, sizeof o);
    if (!o.bind_host || !*o.bind_host) o.bind_host = "127.0.0.1";
    if (strlen(o.bind_host) >= 256 || (o.advertise_host && strlen(o.advertise_host) >= 64) || o.port > 65535)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs fabric: host name too long or bad port");
    v = (wsync__vb *)wsync__ralloc(&o.allocator, sizeof *v);
    if (!v) return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "verbs_open");
    if (o.ops) v->ops = *o.ops;
    r = o.ops ? wsync__vb_check_ops(&v->ops, err) : wsync__vops_default(&v->ops, err);
    if (r == WSYNC_OK) r = wsync__rbase_init(&v->t.b, WSYNC_FABRIC_VERBS, &o.allocator, err);
    if (r != WSYNC_OK) {
        wsync__rfree(&o.allocator, v);
        return r;
    }
    wsync__vb_settings(v, &o);
    if (!v->t.adv_host[0] || strlen(v->t.adv_host) > 63) {
        wsync__vb_close(v);
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs fabric: advertised host too long");
    }
    if ((r = wsync__vnic_open_all(v, o.devices, o.use_gid_index, o.gid_index, err)) != WSYNC_OK) {
        wsync__vb_close(v);
        return r;
    }
    out->user = v;
    out->backend = WSYNC_FABRIC_VERBS;
    out->reg = wsync__vb_reg;
    out->dereg = wsync__vb_dereg;
    out->open_remote = wsync__vb_open_remote;
    out->close_remote = wsync__vb_close_remote;
    out->write = wsync__vb_write;
    out->write_imm = wsync__vb_write_imm;
    out->recv_imm = wsync__rrecv_imm;
    out->flush = wsync__vb_flush;
    out->close = wsync__vb_close;
    return WSYNC_OK;
}

WSYNC_DEF unsigned wsync_fabric_verbs_port(const wsync_fabric *f)
{
    const wsync__vb *v;
    if (!f || f->backend != WSYNC_FABRIC_VERBS || !f->user) return 0;
    v = (const wsync__vb *)f->user;
    return v->t.b.started ? v->t.port : 0;
}

WSYNC_DEF int wsync_fabric_verbs_stats_get(const wsync_fabric *f, wsync_fabric_verbs_stats *out)
{
    const wsync__vb *v;
    unsigned i;
    if (!f || f->backend != WSYNC_FABRIC_VERBS || !f->user || !out) return 0;
    v = (const wsync__vb *)f->user;
    *out = v->st;
    out->n_nics = v->n_nics;
    for (i = 0; i < v->n_nics; i++) {
        snprintf(out->nic[i].name, sizeof out->nic[i].name, "%s", v->nic[i].name);
        out->nic[i].ethernet = v->nic[i].ethernet;
        out->nic[i].bytes = v->nic[i].bytes;
        out->nic[i].wrs = v->nic[i].wrs;
    }
    return 1;
}

#else /* !WSYNC__HAVE_VERBS */

WSYNC_DEF wsync_result wsync_fabric_verbs_open(const wsync_fabric_verbs_options *opt, wsync_fabric *out,
                                               wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    wsync__rerr_reset(err);
    return wsync__rfail(err, WSYNC_ERR_UNSUPPORTED, "%s",
                        "the verbs fabric: built without rdma-core's headers (<infiniband/verbs.h>; Debian: "
                        "libibverbs-dev), or with WSYNC_RDMA_NO_VERBS");
}
WSYNC_DEF unsigned wsync_fabric_verbs_port(const wsync_fabric *f)
{
    (void)f;
    return 0;
}
WSYNC_DEF int wsync_fabric_verbs_stats_get(const wsync_fabric *f, wsync_fabric_verbs_stats *out)
{
    (void)f;
    (void)out;
    return 0;
}

#endif /* WSYNC__HAVE_VERBS */

#endif /* WSYNC__RDMA_OK */

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_RDMA_IMPLEMENTATION */
