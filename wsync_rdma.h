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

Still to come (issue 6): the ibverbs backend (RC RDMA WRITE), the
controller protocol, the schedule and the pipeline. Nothing in wsync has
run on an RDMA NIC.

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
Linux (both backends), POSIX threads. The implementation needs glibc's
GNU declarations (process_vm_writev, memfd_create, accept4): this header
defines _GNU_SOURCE itself when WSYNC_RDMA_IMPLEMENTATION is defined before
the first #include of the translation unit; otherwise define _GNU_SOURCE
there yourself. Without them (or off Linux, or with WSYNC_NO_THREADS) the
open functions fail with WSYNC_ERR_UNSUPPORTED and say why. No rdma-core
is needed. Senders should not rely on SIGPIPE being ignored: every send
uses MSG_NOSIGNAL.

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

#define WSYNC_RDMA_AVAILABLE 0 /* the ibverbs backend: 1 once it is implemented */

#ifdef __cplusplus
extern "C" {
#endif

#define WSYNC_RDMA_REQUIRES_VERSION 100

#if WSYNC_VERSION_NUMBER < WSYNC_RDMA_REQUIRES_VERSION
#error "wsync_rdma.h needs a newer wsync.h"
#endif

/* Backend ids (wsync_fabric.backend and wsync_fabric_desc.backend). */
#define WSYNC_FABRIC_VERBS 1u /* reserved: ibverbs RC (to come) */
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

/* 1 and *out filled when f is a TCP or one-host fabric; 0 otherwise. */
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
static void wsync__rdereg(void *user, wsync_fabric_mr *m)
{
    wsync__rbase *b = (wsync__rbase *)user;
    struct wsync_fabric_mr **pp;
    wsync__rconn *c;
    if (!b || !m) return;
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
    if (!f || !f->user || (f->backend != WSYNC_FABRIC_TCP && f->backend != WSYNC_FABRIC_HOST)) return NULL;
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

#endif /* WSYNC__RDMA_OK */

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_RDMA_IMPLEMENTATION */
