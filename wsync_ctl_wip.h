/* Work in progress: the controller section of wsync_rdma.h, kept apart while
   the verbs backend is written there; merged into wsync_rdma.h when both are
   done. Include after wsync_rdma.h. */
#ifndef WSYNC_CTL_WIP_H
#define WSYNC_CTL_WIP_H

#include "wsync_rdma.h"
#include "wsync_exec_wip.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the controller protocol ------------------------------------------

   One controller, T trainer ranks and I inference ranks, over TCP. Every
   message is a 12-byte header, "WSC" + version byte, type (u16, then u16
   zero), payload length (u32, at most WSYNC_CTL_MAX_PAYLOAD), then the
   payload, all little-endian:

     JOIN    rank -> ctl   role u32, rank u32, n_regions u32, n_tensors u32,
                           regions (n x WSYNC_FABRIC_DESC_WIRE bytes),
                           tensors (name_len u16, name, dtype u32, ndim u32,
                           shape u64 x ndim, row_begin u64, row_count u64,
                           region u32, offset u64, col_begin u64, col_count u64,
                           to_dtype u32, block u32, scale_offset u64)
     ASSIGN  ctl -> rank   role u32, rank u32, n_trainers u32, n_inference u32,
                           n_targets u32, n_transfers u32, targets (rank u32,
                           region u32, descriptor), transfers (src_region u32,
                           target u32, src_offset u64, dst_offset u64, len u64,
                           rows u64, src_stride u64, prep u32, block u32,
                           scale_offset u64)
     GO      ctl -> trainer        step u64: write your transfers now
     DONE    trainer -> ctl        step u64, status u32, text_len u16, text
     COMMIT  ctl -> inference      step u64: every byte of the step is in place
     ACK     inference -> ctl      step u64, status u32, text_len u16, text
     ABORT   ctl -> all            step u64, status u32, text_len u16, text
     BYE     ctl -> all            (empty)
     ERROR   either way            step u64, status u32, text_len u16, text

   A rank's tensors: rows [row_begin, row_begin + row_count) along dim 0 of
   a tensor of the given full shape (a scalar is one row; the dims after the
   first are flattened into columns), and of those columns [col_begin,
   col_begin + col_count) (col_count 0: all), stored contiguously, row-major,
   from `offset` in its region `region`. Trainers hold row shards (all
   columns). An inference rank's entry may ask for a column slice (a
   tensor-parallel split of the input dimension) and for fp8 e4m3 (to_dtype,
   from bf16) with block x block tile scales (block 0: one scale) as f32 at
   scale_offset; several entries laid out back to back make a fused tensor
   (qkv_proj from q_proj, k_proj, v_proj). The controller maps every
   inference rank's rows to trainer ranks holding the same rows of the same
   tensor (name, dtype and shape equal), taking where several hold them the
   one with the fewest bytes assigned so far (an fp8 entry comes whole from
   one trainer: a tile's scale needs all of it), and tells each trainer what
   to write where (ASSIGN). A transfer writes `len` bytes at dst_offset: rows
   rows of len / rows bytes each, read from src_offset with src_stride bytes
   between rows; with prep FP8 each row is len / rows bf16 elements read and
   e4m3 bytes written, and the tile scales go to scale_offset. A step: GO to every trainer, a
   DONE from each (after its writes and a flush), COMMIT to every inference
   rank, an ACK from each (after its on_commit callback); only then does
   the step count. Any failure (a DONE or ACK with an error, a peer gone, a
   timeout) aborts the step: inference ranks get ABORT and keep their
   version word at the last committed step; the bytes of an aborted step
   are partly written (this path writes into live memory) until a later
   step commits. */

#define WSYNC_CTL_VERSION 1u
#define WSYNC_CTL_HEADER 12u
#define WSYNC_CTL_MAX_PAYLOAD (16u << 20)
#define WSYNC_CTL_NAME_MAX 255u
#define WSYNC_CTL_DIMS_MAX 8u
#define WSYNC_CTL_TEXT_MAX 255u
#define WSYNC_CTL_MAX_RANKS 65536u

typedef enum wsync_ctl_type {
    WSYNC_CTL_JOIN = 1,
    WSYNC_CTL_ASSIGN = 2,
    WSYNC_CTL_GO = 3,
    WSYNC_CTL_DONE = 4,
    WSYNC_CTL_COMMIT = 5,
    WSYNC_CTL_ACK = 6,
    WSYNC_CTL_ABORT = 7,
    WSYNC_CTL_BYE = 8,
    WSYNC_CTL_ERROR = 9
} wsync_ctl_type;

typedef enum wsync_ctl_role {
    WSYNC_CTL_TRAINER = 1,
    WSYNC_CTL_INFERENCE = 2
} wsync_ctl_role;

typedef struct wsync_ctl_tensor {
    const char *name;          /* 1..WSYNC_CTL_NAME_MAX bytes, no NUL inside */
    uint32_t dtype;            /* wsync_dtype, whole bytes per element */
    uint32_t ndim;             /* 0..WSYNC_CTL_DIMS_MAX */
    uint64_t shape[WSYNC_CTL_DIMS_MAX]; /* the whole tensor's shape */
    uint64_t row_begin, row_count;      /* the rows held (all: 0, shape[0]) */
    uint32_t region;           /* index into the rank's regions */
    uint64_t offset;           /* byte offset of row row_begin in that region */
    uint64_t col_begin, col_count;      /* the columns held (col_count 0: all) */
    uint32_t to_dtype;         /* inference: the dtype wanted (0: dtype; F8_E4M3 from BF16) */
    uint32_t block;            /* fp8: tile size of the scales (0: one scale) */
    uint64_t scale_offset;     /* fp8: where the f32 scales start in the region */
} wsync_ctl_tensor;

/* An inference rank's region a trainer writes into. */
typedef struct wsync_ctl_target {
    uint32_t rank, region;
    wsync_fabric_desc desc;
} wsync_ctl_target;

#define WSYNC_CTL_PREP_NONE 0u
#define WSYNC_CTL_PREP_FP8 1u  /* bf16 rows -> e4m3 with tile scales */

/* One write: len bytes to targets[target] at dst_offset, made of `rows`
   rows read from the trainer's region src_region at src_offset, src_stride
   bytes apart (rows 1: len contiguous bytes). */
typedef struct wsync_ctl_transfer {
    uint32_t src_region, target;
    uint64_t src_offset, dst_offset, len;
    uint64_t rows, src_stride;
    uint32_t prep, block;      /* WSYNC_CTL_PREP_*; fp8 tile size */
    uint64_t scale_offset;     /* fp8: the target's offset for the scales */
} wsync_ctl_transfer;

/* A decoded message; the arrays belong to it (wsync_ctl_msg_free). To
   encode, fill the fields the type uses; the rest are ignored. */
typedef struct wsync_ctl_msg {
    uint32_t type;                          /* wsync_ctl_type */
    uint32_t role, rank;                    /* JOIN, ASSIGN */
    uint32_t n_trainers, n_inference;       /* ASSIGN */
    uint64_t step;                          /* GO DONE COMMIT ACK ABORT ERROR */
    uint32_t status;                        /* DONE ACK ABORT ERROR: a wsync_result */
    char text[WSYNC_CTL_TEXT_MAX + 1];      /* DONE ACK ABORT ERROR */
    uint32_t n_regions;                     /* JOIN */
    wsync_fabric_desc *regions;
    uint32_t n_tensors;                     /* JOIN */
    wsync_ctl_tensor *tensors;
    uint32_t n_targets;                     /* ASSIGN */
    wsync_ctl_target *targets;
    uint32_t n_transfers;                   /* ASSIGN */
    wsync_ctl_transfer *transfers;
    void *storage_;                         /* decode's one allocation */
    wsync_allocator alloc_;
} wsync_ctl_msg;

/* Encodes header and payload into out[0, cap). *len gets the size needed;
   WSYNC_ERR_LIMIT when cap is smaller (out may be NULL to ask). Checks what
   decode checks about the fields it writes. */
WSYNC_DEF wsync_result wsync_ctl_encode(const wsync_ctl_msg *m, uint8_t *out, size_t cap, size_t *len,
                                        wsync_error *err);
/* Checks a header: magic, version, type, length cap. */
WSYNC_DEF wsync_result wsync_ctl_header(const uint8_t *h, size_t len, uint32_t *type, uint32_t *payload_len,
                                        wsync_error *err);
/* Decodes and checks a payload of the given type completely: counts
   against the bytes present before anything is allocated, every length,
   dtype, shape, row range and region bound (a JOIN's tensor must lie inside
   its region's length), every descriptor, and that nothing trails. */
WSYNC_DEF wsync_result wsync_ctl_decode(uint32_t type, const uint8_t *payload, size_t len,
                                        const wsync_allocator *a, wsync_ctl_msg *out, wsync_error *err);
/* A whole frame (header + payload, exactly). */
WSYNC_DEF wsync_result wsync_ctl_decode_frame(const uint8_t *buf, size_t len, const wsync_allocator *a,
                                              wsync_ctl_msg *out, wsync_error *err);
WSYNC_DEF void wsync_ctl_msg_free(wsync_ctl_msg *m);
/* A rank's tensor entry as stored: bytes of one row (its columns, in
   to_dtype) and of all its rows; checks dtypes, the row and column ranges
   and overflow. */
WSYNC_DEF wsync_result wsync_ctl_tensor_bytes(const wsync_ctl_tensor *t, uint64_t *row_bytes, uint64_t *bytes,
                                              wsync_error *err);

/* ---- the controller ---- */

typedef struct wsync_controller wsync_controller;

typedef struct wsync_controller_options {
    wsync_allocator allocator;
    const char *bind_host;          /* [127.0.0.1] */
    unsigned port;                  /* [0: ephemeral] */
    unsigned n_trainers, n_inference; /* required, each at least 1 */
    unsigned join_timeout_ms;       /* [30000] until every rank joined */
    unsigned step_timeout_ms;       /* [30000] GO to the last DONE, COMMIT to the last ACK */
} wsync_controller_options;

/* What the plan asks of the ranks. */
typedef struct wsync_controller_plan {
    uint64_t transfers, bytes;      /* all trainers together, per step */
    uint64_t max_trainer_bytes, min_trainer_bytes;
    uint64_t max_inference_bytes;
} wsync_controller_plan;

/* Listens (bind_host, port). */
WSYNC_DEF wsync_result wsync_controller_open(const wsync_controller_options *opt, wsync_controller **out,
                                             wsync_error *err);
WSYNC_DEF unsigned wsync_controller_port(const wsync_controller *c);
/* Waits for every rank's JOIN (a JOIN that is malformed, out of range or
   a duplicate gets ERROR and is dropped; the wait goes on), plans, and
   sends each rank its ASSIGN. A plan that cannot cover every inference
   rank's rows fails with the tensor and rows named, and every rank gets
   ERROR. */
WSYNC_DEF wsync_result wsync_controller_accept(wsync_controller *c, wsync_error *err);
WSYNC_DEF void wsync_controller_plan_get(const wsync_controller *c, wsync_controller_plan *out);
/* One step: go, then finish. Steps increase. */
WSYNC_DEF wsync_result wsync_controller_step(wsync_controller *c, uint64_t step, wsync_error *err);
/* GO to every trainer. */
WSYNC_DEF wsync_result wsync_controller_go(wsync_controller *c, uint64_t step, wsync_error *err);
/* Every DONE, then COMMIT and every ACK; on any failure ABORT to every
   inference rank and the reason in err (which rank, what). */
WSYNC_DEF wsync_result wsync_controller_finish(wsync_controller *c, uint64_t step, wsync_error *err);
/* The last finished step's times in seconds: GO sent to the last DONE
   (the writes), and COMMIT sent to the last ACK (the receivers' callbacks). */
WSYNC_DEF void wsync_controller_step_times(const wsync_controller *c, double *transfer_s, double *commit_s);
/* BYE to every rank still there, and closes. */
WSYNC_DEF void wsync_controller_close(wsync_controller *c);

/* ---- a rank ---- */

typedef struct wsync_rank wsync_rank;

typedef struct wsync_rank_options {
    wsync_allocator allocator;
    const char *host;               /* the controller [127.0.0.1] */
    unsigned port;                  /* required */
    uint32_t role, rank;            /* wsync_ctl_role; rank from 0 within the role */
    const wsync_ctl_tensor *tensors;
    uint32_t n_tensors;
    wsync_fabric *fabric;           /* trainers write through it; regions registered on it */
    wsync_fabric_mr *const *mrs;    /* the rank's regions, registered */
    const wsync_fabric_desc *descs; /* their descriptors, as reg returned them */
    uint32_t n_regions;
    unsigned timeout_ms;            /* [30000] connect and the wait for ASSIGN; trainers: GO */
    uint64_t staging_bytes;         /* trainers: [64 MiB, or the largest prepared transfer] the
                                       executor's staging arena (the memory watermark) for
                                       transfers that gather or quantize */
    /* Inference: called in the rank's thread at COMMIT, before the version
       word moves; an error result (with err filled) refuses the step. */
    wsync_result (*on_commit)(void *user, uint64_t step, wsync_error *err);
    /* Inference: called at ABORT. */
    void (*on_abort)(void *user, uint64_t step, const char *why);
    void *user;
} wsync_rank_options;

/* Connects, sends JOIN, waits for ASSIGN; a trainer opens its targets on
   the fabric; an inference rank starts its thread (COMMIT, ABORT, BYE). */
WSYNC_DEF wsync_result wsync_rank_join(const wsync_rank_options *opt, wsync_rank **out, wsync_error *err);
/* Trainer: the next GO's step; *bye = 1 (and WSYNC_OK) when the controller
   said BYE. WSYNC_ERR_LIMIT after timeout_ms (negative: no limit). */
WSYNC_DEF wsync_result wsync_rank_wait_go(wsync_rank *r, uint64_t *step, int *bye, int timeout_ms,
                                          wsync_error *err);
/* Trainer: every assigned write, then a flush. */
WSYNC_DEF wsync_result wsync_rank_push(wsync_rank *r, wsync_error *err);
/* Trainer: assigned writes [first, first + count) (wsync_rank_transfers),
   and a flush when flush is 1: to start with the tensors that are ready. */
WSYNC_DEF wsync_result wsync_rank_push_some(wsync_rank *r, uint32_t first, uint32_t count, int flush,
                                            wsync_error *err);
/* Trainer: DONE for the step with result (and the message in why, if any). */
WSYNC_DEF wsync_result wsync_rank_done(wsync_rank *r, uint64_t step, wsync_result result, const char *why,
                                       wsync_error *err);
/* Trainer: what the last push did (executor statistics). */
WSYNC_DEF void wsync_rank_push_stats(const wsync_rank *r, wsync_exec_stats *out);
/* Trainer: the assigned writes. */
WSYNC_DEF const wsync_ctl_transfer *wsync_rank_transfers(const wsync_rank *r, uint32_t *n);
/* Inference: the last committed step (0 before the first), read with
   acquire ordering; the word itself, for polling without a call. */
WSYNC_DEF uint64_t wsync_rank_version(const wsync_rank *r);
WSYNC_DEF const volatile uint64_t *wsync_rank_version_word(const wsync_rank *r);
/* Inference: waits until the version is at least step (WSYNC_OK), the
   controller aborted a step at or above it or said BYE (WSYNC_ERR_NO_PATH
   is not used: WSYNC_ERR_IO with the reason), or timeout_ms passed
   (WSYNC_ERR_LIMIT). */
WSYNC_DEF wsync_result wsync_rank_wait_version(wsync_rank *r, uint64_t step, int timeout_ms, wsync_error *err);
/* Inference: 1 once the controller said BYE or went away; *why then. */
WSYNC_DEF int wsync_rank_ended(wsync_rank *r, char *why, size_t cap);
WSYNC_DEF void wsync_rank_close(wsync_rank *r);

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_CTL_WIP_H */

/* ---------------------------------------------------------------------
   Implementation
   --------------------------------------------------------------------- */
#if defined(WSYNC_RDMA_IMPLEMENTATION) && !defined(WSYNC__CTL_IMPLEMENTED)
#define WSYNC__CTL_IMPLEMENTED

#ifdef __cplusplus
extern "C" {
#endif

#define WSYNC__CTL_MAGIC 0x00435357u /* "WSC" then the version byte */
#define WSYNC__CTL_MAX_TENSORS (1u << 22)
#define WSYNC__CTL_MAX_REGIONS 4096u
#define WSYNC__CTL_MAX_TRANSFERS (1u << 24)
#define WSYNC__CTL_TENSOR_TAIL 60u /* a JOIN tensor's bytes after its shape */
#define WSYNC__CTL_XFER 64u        /* an ASSIGN transfer's bytes */

/* ---- codec (no sockets: builds everywhere) ---- */

typedef struct wsync__cr {
    const uint8_t *p;
    size_t left;
    size_t at;                 /* offset of p in the payload */
} wsync__cr;

static int wsync__cin(uint64_t off, uint64_t len, uint64_t size)
{
    return len <= size && off <= size - len;
}
static void *wsync__calloc(const wsync_allocator *a, size_t n)
{
    void *p;
    if (n == 0) n = 1;
    p = a->alloc ? a->alloc(a->user, n) : WSYNC_MALLOC(n);
    if (p) memset(p, 0, n);
    return p;
}
static void wsync__cfree(const wsync_allocator *a, void *p)
{
    if (!p) return;
    if (a->free) a->free(a->user, p);
    else WSYNC_FREE(p);
}

static uint32_t wsync__cget32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t wsync__cget64(const uint8_t *p)
{
    return (uint64_t)wsync__cget32(p) | (uint64_t)wsync__cget32(p + 4) << 32;
}
static void wsync__cput16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void wsync__cput32(uint8_t *p, uint32_t v)
{
    wsync__cput16(p, v);
    wsync__cput16(p + 2, v >> 16);
}
static void wsync__cput64(uint8_t *p, uint64_t v)
{
    wsync__cput32(p, (uint32_t)v);
    wsync__cput32(p + 4, (uint32_t)(v >> 32));
}

static wsync_result wsync__cshort(wsync__cr *c, wsync_error *err, const char *what)
{
    return wsync__rfail(err, WSYNC_ERR_TRUNCATED, "control message: %s at payload byte %llu: truncated", what,
                        (unsigned long long)(c->at));
}

static int wsync__ctake(wsync__cr *c, size_t n, const uint8_t **out)
{
    if (n > c->left) return 0;
    *out = c->p;
    c->p += n;
    c->left -= n;
    c->at += n;
    return 1;
}

#define WSYNC__CR32(c, v, what)                                                          \
    do {                                                                                 \
        const uint8_t *q_;                                                               \
        if (!wsync__ctake((c), 4, &q_)) return wsync__cshort((c), err, (what));          \
        (v) = wsync__cget32(q_);                                                         \
    } while (0)
#define WSYNC__CR64(c, v, what)                                                          \
    do {                                                                                 \
        const uint8_t *q_;                                                               \
        if (!wsync__ctake((c), 8, &q_)) return wsync__cshort((c), err, (what));          \
        (v) = wsync__cget64(q_);                                                         \
    } while (0)

static wsync_result wsync__cbad(wsync_error *err, wsync_result code, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static wsync_result wsync__cbad(wsync_error *err, wsync_result code, const char *fmt, ...)
{
    va_list ap;
    char buf[320];
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return wsync__rfail(err, code, "control message: %s", buf);
}

WSYNC_DEF wsync_result wsync_ctl_tensor_bytes(const wsync_ctl_tensor *t, uint64_t *row_bytes, uint64_t *bytes,
                                              wsync_error *err)
{
    unsigned bits, i;
    uint64_t rb, rows, cols, esz;
    if (!t) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "tensor is NULL");
    if (t->dtype == 0 || t->dtype >= (uint32_t)WSYNC_DTYPE_COUNT)
        return wsync__rfail(err, WSYNC_ERR_UNKNOWN_DTYPE, "tensor '%s': dtype %u unknown",
                            t->name ? t->name : "", (unsigned)t->dtype);
    bits = wsync_dtype_bits((wsync_dtype)t->dtype);
    if (bits == 0 || bits % 8 != 0)
        return wsync__rfail(err, WSYNC_ERR_UNSUPPORTED, "tensor '%s': %s has no whole bytes per element",
                            t->name ? t->name : "", wsync_dtype_name((wsync_dtype)t->dtype));
    if (t->ndim > WSYNC_CTL_DIMS_MAX)
        return wsync__rfail(err, WSYNC_ERR_RANK_TOO_LARGE, "tensor '%s': %u dimensions (at most %u)",
                            t->name ? t->name : "", (unsigned)t->ndim, WSYNC_CTL_DIMS_MAX);
    if (t->to_dtype && t->to_dtype != t->dtype &&
        !(t->to_dtype == WSYNC_DTYPE_F8_E4M3 && t->dtype == WSYNC_DTYPE_BF16))
        return wsync__rfail(err, WSYNC_ERR_UNSUPPORTED, "tensor '%s': no conversion from dtype %u to %u (only BF16 to F8_E4M3)",
                            t->name ? t->name : "", (unsigned)t->dtype, (unsigned)t->to_dtype);
    cols = 1;
    for (i = 1; i < t->ndim; i++) {
        if (t->shape[i] && cols > UINT64_MAX / t->shape[i])
            return wsync__rfail(err, WSYNC_ERR_OVERFLOW, "tensor '%s': shape overflows", t->name ? t->name : "");
        cols *= t->shape[i];
    }
    rows = t->ndim ? t->shape[0] : 1;
    if (t->row_begin > rows || t->row_count > rows - t->row_begin)
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "tensor '%s': rows %llu + %llu outside its %llu rows",
                            t->name ? t->name : "", (unsigned long long)t->row_begin,
                            (unsigned long long)t->row_count, (unsigned long long)rows);
    if (t->col_begin > cols || t->col_count > cols - t->col_begin || (t->col_count == 0 && t->col_begin))
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "tensor '%s': columns %llu + %llu outside its %llu",
                            t->name ? t->name : "", (unsigned long long)t->col_begin,
                            (unsigned long long)t->col_count, (unsigned long long)cols);
    esz = t->to_dtype == WSYNC_DTYPE_F8_E4M3 ? 1 : bits / 8;
    rb = t->col_count ? t->col_count : cols;
    if (rb > UINT64_MAX / 8 || (rows && rb * 8 > UINT64_MAX / rows))
        return wsync__rfail(err, WSYNC_ERR_OVERFLOW, "tensor '%s': size overflows", t->name ? t->name : "");
    rb *= esz;
    if (row_bytes) *row_bytes = rb;
    if (bytes) *bytes = rb * t->row_count;
    return WSYNC_OK;
}

static size_t wsync__ctl_text_len(const char *s)
{
    size_t n = 0;
    while (n < WSYNC_CTL_TEXT_MAX && s[n]) n++;
    return n;
}

/* A descriptor as decode would read it back (encode writes every field). */
static wsync_result wsync__ctl_desc_ok(const wsync_fabric_desc *d, const char *what, uint32_t i, wsync_error *err)
{
    uint8_t w[WSYNC_FABRIC_DESC_WIRE];
    wsync_fabric_desc back;
    wsync_result r;
    if (d->n_bytes > WSYNC_FABRIC_DESC_MAX)
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS, "%s %u: %u backend bytes", what, (unsigned)i,
                           (unsigned)d->n_bytes);
    wsync_fabric_desc_encode(d, w);
    if ((r = wsync_fabric_desc_decode(w, sizeof w, &back, err)) != WSYNC_OK) {
        char why[300];
        snprintf(why, sizeof why, "%.250s", err ? err->message : "");
        return wsync__cbad(err, r, "%s %u: %s", what, (unsigned)i, why);
    }
    return WSYNC_OK;
}

/* An entry converted to fp8 (to_dtype equal to dtype: as stored). */
static int wsync__ctl_fp8(const wsync_ctl_tensor *t)
{
    return t->to_dtype == WSYNC_DTYPE_F8_E4M3 && t->dtype == WSYNC_DTYPE_BF16;
}

/* A JOIN entry: its bytes (and an fp8 entry's scales) inside its region. */
static wsync_result wsync__ctl_tensor_ok(const wsync_ctl_tensor *t, const wsync_fabric_desc *regions,
                                         uint32_t n_regions, wsync_error *err)
{
    uint64_t bytes = 0, rb = 0, ns;
    wsync_result r;
    if ((r = wsync_ctl_tensor_bytes(t, &rb, &bytes, err)) != WSYNC_OK) {
        char why[300];
        snprintf(why, sizeof why, "%.250s", err ? err->message : "");
        return wsync__cbad(err, r, "JOIN: %s", why);
    }
    if (t->region >= n_regions)
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS, "JOIN: tensor '%s': region %u of %u", t->name,
                           (unsigned)t->region, (unsigned)n_regions);
    if (!wsync__cin(t->offset, bytes, regions[t->region].len))
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS,
                           "JOIN: tensor '%s': %llu bytes at %llu outside region %u (%llu bytes)", t->name,
                           (unsigned long long)bytes, (unsigned long long)t->offset, (unsigned)t->region,
                           (unsigned long long)regions[t->region].len);
    if (!wsync__ctl_fp8(t)) return WSYNC_OK;
    ns = wsync_quantize_scale_count(t->row_count, rb, t->block); /* rb: one byte per fp8 column */
    if (ns > UINT64_MAX / 4 || !wsync__cin(t->scale_offset, ns * 4, regions[t->region].len))
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS, "JOIN: tensor '%s': %llu scales at %llu outside region %u",
                           t->name, (unsigned long long)ns, (unsigned long long)t->scale_offset, (unsigned)t->region);
    return WSYNC_OK;
}

/* An ASSIGN transfer: its rows, preparation and destination (the source is
   checked by the trainer, against its own regions). */
static wsync_result wsync__ctl_transfer_ok(const wsync_ctl_transfer *x, uint32_t i, const wsync_ctl_target *targets,
                                           uint32_t n_targets, wsync_error *err)
{
    uint64_t row_out, row_src, tlen, ns;
    if (x->target >= n_targets)
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: transfer %u: target %u of %u", (unsigned)i,
                           (unsigned)x->target, (unsigned)n_targets);
    tlen = targets[x->target].desc.len;
    if (x->len == 0 || !wsync__cin(x->dst_offset, x->len, tlen))
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS,
                           "ASSIGN: transfer %u: %llu bytes at %llu outside the target's %llu", (unsigned)i,
                           (unsigned long long)x->len, (unsigned long long)x->dst_offset, (unsigned long long)tlen);
    if (x->rows == 0 || x->len % x->rows != 0)
        return wsync__cbad(err, WSYNC_ERR_INVALID_HEADER, "ASSIGN: transfer %u: %llu bytes in %llu rows", (unsigned)i,
                           (unsigned long long)x->len, (unsigned long long)x->rows);
    if (x->prep != WSYNC_CTL_PREP_NONE && x->prep != WSYNC_CTL_PREP_FP8)
        return wsync__cbad(err, WSYNC_ERR_UNSUPPORTED, "ASSIGN: transfer %u: preparation %u", (unsigned)i,
                           (unsigned)x->prep);
    row_out = x->len / x->rows;
    if (x->prep == WSYNC_CTL_PREP_FP8 && row_out > UINT64_MAX / 2)
        return wsync__cbad(err, WSYNC_ERR_OVERFLOW, "ASSIGN: transfer %u: row size", (unsigned)i);
    row_src = x->prep == WSYNC_CTL_PREP_FP8 ? row_out * 2 : row_out;
    if (x->rows > 1 && (x->src_stride < row_src || x->rows - 1 > (UINT64_MAX - row_src) / x->src_stride))
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS,
                           "ASSIGN: transfer %u: %llu rows of %llu bytes with a stride of %llu", (unsigned)i,
                           (unsigned long long)x->rows, (unsigned long long)row_src,
                           (unsigned long long)x->src_stride);
    if (x->prep != WSYNC_CTL_PREP_FP8) return WSYNC_OK;
    ns = wsync_quantize_scale_count(x->rows, row_out, x->block);
    if (ns > UINT64_MAX / 4 || !wsync__cin(x->scale_offset, ns * 4, tlen))
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: transfer %u: %llu scales at %llu outside the target",
                           (unsigned)i, (unsigned long long)ns, (unsigned long long)x->scale_offset);
    return WSYNC_OK;
}

/* What decode checks about a JOIN's or an ASSIGN's fields, for encode. */
static wsync_result wsync__ctl_check(const wsync_ctl_msg *m, wsync_error *err)
{
    uint32_t i, lim;
    wsync_result r;
    if (m->role != WSYNC_CTL_TRAINER && m->role != WSYNC_CTL_INFERENCE)
        return wsync__cbad(err, WSYNC_ERR_INVALID_ARGUMENT, "role %u", (unsigned)m->role);
    if (m->type == WSYNC_CTL_JOIN) {
        if (m->rank >= WSYNC_CTL_MAX_RANKS)
            return wsync__cbad(err, WSYNC_ERR_LIMIT, "JOIN: rank %u above the limit", (unsigned)m->rank);
        for (i = 0; i < m->n_regions; i++)
            if ((r = wsync__ctl_desc_ok(&m->regions[i], "JOIN: region", i, err)) != WSYNC_OK) return r;
        for (i = 0; i < m->n_tensors; i++)
            if ((r = wsync__ctl_tensor_ok(&m->tensors[i], m->regions, m->n_regions, err)) != WSYNC_OK) return r;
        return WSYNC_OK;
    }
    if (m->n_trainers == 0 || m->n_inference == 0 || m->n_trainers > WSYNC_CTL_MAX_RANKS ||
        m->n_inference > WSYNC_CTL_MAX_RANKS)
        return wsync__cbad(err, WSYNC_ERR_LIMIT, "ASSIGN: %u trainers, %u inference ranks", (unsigned)m->n_trainers,
                           (unsigned)m->n_inference);
    lim = m->role == WSYNC_CTL_TRAINER ? m->n_trainers : m->n_inference;
    if (m->rank >= lim)
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: rank %u outside its role's %u", (unsigned)m->rank,
                           (unsigned)lim);
    for (i = 0; i < m->n_targets; i++) {
        if (m->targets[i].rank >= m->n_inference)
            return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: target %u names inference rank %u of %u",
                               (unsigned)i, (unsigned)m->targets[i].rank, (unsigned)m->n_inference);
        if ((r = wsync__ctl_desc_ok(&m->targets[i].desc, "ASSIGN: target", i, err)) != WSYNC_OK) return r;
    }
    for (i = 0; i < m->n_transfers; i++)
        if ((r = wsync__ctl_transfer_ok(&m->transfers[i], i, m->targets, m->n_targets, err)) != WSYNC_OK) return r;
    return WSYNC_OK;
}

/* Payload bytes of m; 0 and err on a field encode refuses. */
static wsync_result wsync__ctl_size(const wsync_ctl_msg *m, size_t *out, wsync_error *err)
{
    size_t n = 0, i, k;
    switch (m->type) {
    case WSYNC_CTL_JOIN:
        if (m->n_regions > WSYNC__CTL_MAX_REGIONS || m->n_tensors > WSYNC__CTL_MAX_TENSORS)
            return wsync__cbad(err, WSYNC_ERR_LIMIT, "JOIN with %u regions and %u tensors is above the limits",
                               (unsigned)m->n_regions, (unsigned)m->n_tensors);
        if ((m->n_regions && !m->regions) || (m->n_tensors && !m->tensors))
            return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "JOIN: NULL regions or tensors");
        n = 16 + (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE;
        for (i = 0; i < m->n_tensors; i++) {
            const wsync_ctl_tensor *t = &m->tensors[i];
            k = t->name ? strlen(t->name) : 0;
            if (k == 0 || k > WSYNC_CTL_NAME_MAX)
                return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "JOIN: tensor %zu: name of %zu bytes", i, k);
            if (t->ndim > WSYNC_CTL_DIMS_MAX)
                return wsync__rfail(err, WSYNC_ERR_RANK_TOO_LARGE, "JOIN: tensor '%s': %u dimensions", t->name,
                                    (unsigned)t->ndim);
            n += 2 + k + 4 + 4 + 8 * (size_t)t->ndim + WSYNC__CTL_TENSOR_TAIL;
        }
        break;
    case WSYNC_CTL_ASSIGN:
        if (m->n_targets > WSYNC__CTL_MAX_TRANSFERS || m->n_transfers > WSYNC__CTL_MAX_TRANSFERS)
            return wsync__cbad(err, WSYNC_ERR_LIMIT, "ASSIGN with %u targets and %u transfers is above the limits",
                               (unsigned)m->n_targets, (unsigned)m->n_transfers);
        if ((m->n_targets && !m->targets) || (m->n_transfers && !m->transfers))
            return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "ASSIGN: NULL targets or transfers");
        n = 24 + (size_t)m->n_targets * (8 + WSYNC_FABRIC_DESC_WIRE) + (size_t)m->n_transfers * WSYNC__CTL_XFER;
        break;
    case WSYNC_CTL_GO:
    case WSYNC_CTL_COMMIT: n = 8; break;
    case WSYNC_CTL_DONE:
    case WSYNC_CTL_ACK:
    case WSYNC_CTL_ABORT:
    case WSYNC_CTL_ERROR: n = 14 + wsync__ctl_text_len(m->text); break;
    case WSYNC_CTL_BYE: n = 0; break;
    default: return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "encode: message type %u", (unsigned)m->type);
    }
    if (n > WSYNC_CTL_MAX_PAYLOAD)
        return wsync__cbad(err, WSYNC_ERR_LIMIT, "payload of %zu bytes is above the limit of %u", n,
                           WSYNC_CTL_MAX_PAYLOAD);
    if (m->type == WSYNC_CTL_JOIN || m->type == WSYNC_CTL_ASSIGN) {
        wsync_result r = wsync__ctl_check(m, err);
        if (r != WSYNC_OK) return r;
    }
    *out = n;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_ctl_encode(const wsync_ctl_msg *m, uint8_t *out, size_t cap, size_t *len,
                                        wsync_error *err)
{
    size_t pl = 0, i, k;
    uint8_t *p;
    wsync_result r;
    wsync__rerr_reset(err);
    if (!m || !len) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "encode arguments");
    *len = 0;
    if ((r = wsync__ctl_size(m, &pl, err)) != WSYNC_OK) return r;
    *len = WSYNC_CTL_HEADER + pl;
    if (!out || cap < *len)
        return wsync__rfail(err, WSYNC_ERR_LIMIT, "encode: %zu bytes needed, %zu given", *len, cap);
    p = out;
    wsync__cput32(p, WSYNC__CTL_MAGIC | WSYNC_CTL_VERSION << 24);
    wsync__cput16(p + 4, m->type);
    wsync__cput16(p + 6, 0);
    wsync__cput32(p + 8, (uint32_t)pl);
    p += WSYNC_CTL_HEADER;
    switch (m->type) {
    case WSYNC_CTL_JOIN:
        wsync__cput32(p, m->role);
        wsync__cput32(p + 4, m->rank);
        wsync__cput32(p + 8, m->n_regions);
        wsync__cput32(p + 12, m->n_tensors);
        p += 16;
        for (i = 0; i < m->n_regions; i++, p += WSYNC_FABRIC_DESC_WIRE) wsync_fabric_desc_encode(&m->regions[i], p);
        for (i = 0; i < m->n_tensors; i++) {
            const wsync_ctl_tensor *t = &m->tensors[i];
            k = strlen(t->name);
            wsync__cput16(p, (uint32_t)k);
            memcpy(p + 2, t->name, k);
            p += 2 + k;
            wsync__cput32(p, t->dtype);
            wsync__cput32(p + 4, t->ndim);
            p += 8;
            for (k = 0; k < t->ndim; k++, p += 8) wsync__cput64(p, t->shape[k]);
            wsync__cput64(p, t->row_begin);
            wsync__cput64(p + 8, t->row_count);
            wsync__cput32(p + 16, t->region);
            wsync__cput64(p + 20, t->offset);
            wsync__cput64(p + 28, t->col_begin);
            wsync__cput64(p + 36, t->col_count);
            wsync__cput32(p + 44, t->to_dtype);
            wsync__cput32(p + 48, t->block);
            wsync__cput64(p + 52, t->scale_offset);
            p += WSYNC__CTL_TENSOR_TAIL;
        }
        break;
    case WSYNC_CTL_ASSIGN:
        wsync__cput32(p, m->role);
        wsync__cput32(p + 4, m->rank);
        wsync__cput32(p + 8, m->n_trainers);
        wsync__cput32(p + 12, m->n_inference);
        wsync__cput32(p + 16, m->n_targets);
        wsync__cput32(p + 20, m->n_transfers);
        p += 24;
        for (i = 0; i < m->n_targets; i++) {
            wsync__cput32(p, m->targets[i].rank);
            wsync__cput32(p + 4, m->targets[i].region);
            wsync_fabric_desc_encode(&m->targets[i].desc, p + 8);
            p += 8 + WSYNC_FABRIC_DESC_WIRE;
        }
        for (i = 0; i < m->n_transfers; i++, p += WSYNC__CTL_XFER) {
            const wsync_ctl_transfer *x = &m->transfers[i];
            wsync__cput32(p, x->src_region);
            wsync__cput32(p + 4, x->target);
            wsync__cput64(p + 8, x->src_offset);
            wsync__cput64(p + 16, x->dst_offset);
            wsync__cput64(p + 24, x->len);
            wsync__cput64(p + 32, x->rows);
            wsync__cput64(p + 40, x->src_stride);
            wsync__cput32(p + 48, x->prep);
            wsync__cput32(p + 52, x->block);
            wsync__cput64(p + 56, x->scale_offset);
        }
        break;
    case WSYNC_CTL_GO:
    case WSYNC_CTL_COMMIT: wsync__cput64(p, m->step); break;
    case WSYNC_CTL_DONE:
    case WSYNC_CTL_ACK:
    case WSYNC_CTL_ABORT:
    case WSYNC_CTL_ERROR:
        k = wsync__ctl_text_len(m->text);
        wsync__cput64(p, m->step);
        wsync__cput32(p + 8, m->status);
        wsync__cput16(p + 12, (uint32_t)k);
        memcpy(p + 14, m->text, k);
        break;
    default: break;
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_ctl_header(const uint8_t *h, size_t len, uint32_t *type, uint32_t *payload_len,
                                        wsync_error *err)
{
    uint32_t magic, t, pl;
    wsync__rerr_reset(err);
    if (!h || len < WSYNC_CTL_HEADER)
        return wsync__cbad(err, WSYNC_ERR_TRUNCATED, "header of %zu bytes (%u needed)", len, WSYNC_CTL_HEADER);
    magic = wsync__cget32(h);
    if ((magic & 0xFFFFFFu) != WSYNC__CTL_MAGIC)
        return wsync__cbad(err, WSYNC_ERR_INVALID_HEADER, "%s", "bad magic (not a wsync control message)");
    if (magic >> 24 != WSYNC_CTL_VERSION)
        return wsync__cbad(err, WSYNC_ERR_UNSUPPORTED, "protocol version %u (this build speaks %u)",
                           (unsigned)(magic >> 24), WSYNC_CTL_VERSION);
    t = (uint32_t)h[4] | (uint32_t)h[5] << 8;
    if (t < WSYNC_CTL_JOIN || t > WSYNC_CTL_ERROR || h[6] || h[7])
        return wsync__cbad(err, WSYNC_ERR_INVALID_HEADER, "unknown message type %u", (unsigned)wsync__cget32(h + 4));
    pl = wsync__cget32(h + 8);
    if (pl > WSYNC_CTL_MAX_PAYLOAD)
        return wsync__cbad(err, WSYNC_ERR_LIMIT, "payload of %u bytes is above the limit of %u", (unsigned)pl,
                           WSYNC_CTL_MAX_PAYLOAD);
    if (type) *type = t;
    if (payload_len) *payload_len = pl;
    return WSYNC_OK;
}

WSYNC_DEF void wsync_ctl_msg_free(wsync_ctl_msg *m)
{
    if (!m) return;
    if (m->storage_) wsync__cfree(&m->alloc_, m->storage_);
    memset(m, 0, sizeof *m);
}

static wsync_result wsync__ctl_text(wsync__cr *c, wsync_ctl_msg *m, wsync_error *err)
{
    const uint8_t *q;
    size_t k;
    WSYNC__CR64(c, m->step, "step");
    WSYNC__CR32(c, m->status, "status");
    if (!wsync__ctake(c, 2, &q)) return wsync__cshort(c, err, "text length");
    k = (size_t)q[0] | (size_t)q[1] << 8;
    if (k > WSYNC_CTL_TEXT_MAX)
        return wsync__cbad(err, WSYNC_ERR_LIMIT, "text of %zu bytes (at most %u)", k, WSYNC_CTL_TEXT_MAX);
    if (!wsync__ctake(c, k, &q)) return wsync__cshort(c, err, "text");
    if (memchr(q, 0, k)) return wsync__cbad(err, WSYNC_ERR_INVALID_HEADER, "%s", "text holds a NUL byte");
    memcpy(m->text, q, k);
    m->text[k] = 0;
    return WSYNC_OK;
}

/* Counts what a JOIN holds, with the bytes its names need, walking it
   once before anything is allocated. */
static wsync_result wsync__ctl_join_count(wsync__cr c, uint32_t nt, size_t *names, wsync_error *err)
{
    uint32_t i, nd;
    const uint8_t *q;
    size_t k;
    *names = 0;
    for (i = 0; i < nt; i++) {
        if (!wsync__ctake(&c, 2, &q)) return wsync__cshort(&c, err, "tensor name length");
        k = (size_t)q[0] | (size_t)q[1] << 8;
        if (k == 0 || k > WSYNC_CTL_NAME_MAX)
            return wsync__cbad(err, WSYNC_ERR_LIMIT, "tensor %u: name of %zu bytes (1 to %u)", (unsigned)i, k,
                               WSYNC_CTL_NAME_MAX);
        if (!wsync__ctake(&c, k + 4, &q)) return wsync__cshort(&c, err, "tensor name");
        *names += k + 1;
        if (!wsync__ctake(&c, 4, &q)) return wsync__cshort(&c, err, "tensor ndim");
        nd = wsync__cget32(q);
        if (nd > WSYNC_CTL_DIMS_MAX)
            return wsync__cbad(err, WSYNC_ERR_RANK_TOO_LARGE, "tensor %u: %u dimensions (at most %u)", (unsigned)i,
                               (unsigned)nd, WSYNC_CTL_DIMS_MAX);
        if (!wsync__ctake(&c, 8 * (size_t)nd + WSYNC__CTL_TENSOR_TAIL, &q)) return wsync__cshort(&c, err, "tensor shape and place");
    }
    if (c.left)
        return wsync__cbad(err, WSYNC_ERR_TRAILING_BYTES, "%zu bytes after the last tensor", c.left);
    return WSYNC_OK;
}

static wsync_result wsync__ctl_alloc(wsync_ctl_msg *m, size_t n, wsync_error *err)
{
    m->storage_ = wsync__calloc(&m->alloc_, n);
    if (!m->storage_) return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "control message: %zu bytes", n);
    return WSYNC_OK;
}

static size_t wsync__ctl_align(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static wsync_result wsync__ctl_join(wsync__cr *c, wsync_ctl_msg *m, wsync_error *err)
{
    uint32_t i, k;
    size_t names = 0, ra, ta;
    char *np;
    wsync_result r;
    WSYNC__CR32(c, m->role, "role");
    WSYNC__CR32(c, m->rank, "rank");
    WSYNC__CR32(c, m->n_regions, "region count");
    WSYNC__CR32(c, m->n_tensors, "tensor count");
    if (m->role != WSYNC_CTL_TRAINER && m->role != WSYNC_CTL_INFERENCE)
        return wsync__cbad(err, WSYNC_ERR_INVALID_HEADER, "JOIN: role %u (1 trainer, 2 inference)", (unsigned)m->role);
    if (m->rank >= WSYNC_CTL_MAX_RANKS)
        return wsync__cbad(err, WSYNC_ERR_LIMIT, "JOIN: rank %u above the limit", (unsigned)m->rank);
    if (m->n_regions > WSYNC__CTL_MAX_REGIONS || m->n_tensors > WSYNC__CTL_MAX_TENSORS)
        return wsync__cbad(err, WSYNC_ERR_LIMIT, "JOIN: %u regions, %u tensors: above the limits",
                           (unsigned)m->n_regions, (unsigned)m->n_tensors);
    /* every count is checked against the bytes it needs before allocating */
    if ((size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE > c->left) return wsync__cshort(c, err, "regions");
    if ((size_t)m->n_tensors * (10 + WSYNC__CTL_TENSOR_TAIL) > c->left - (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE)
        return wsync__cshort(c, err, "tensors");
    {
        wsync__cr t = *c;
        t.p += (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE;
        t.left -= (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE;
        t.at += (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE;
        if ((r = wsync__ctl_join_count(t, m->n_tensors, &names, err)) != WSYNC_OK) return r;
    }
    ra = wsync__ctl_align((size_t)m->n_regions * sizeof(wsync_fabric_desc));
    ta = wsync__ctl_align((size_t)m->n_tensors * sizeof(wsync_ctl_tensor));
    if ((r = wsync__ctl_alloc(m, ra + ta + names, err)) != WSYNC_OK) return r;
    m->regions = m->n_regions ? (wsync_fabric_desc *)m->storage_ : NULL;
    m->tensors = m->n_tensors ? (wsync_ctl_tensor *)((uint8_t *)m->storage_ + ra) : NULL;
    np = (char *)m->storage_ + ra + ta;
    for (i = 0; i < m->n_regions; i++) {
        const uint8_t *q = NULL;
        if (!wsync__ctake(c, WSYNC_FABRIC_DESC_WIRE, &q)) return wsync__cshort(c, err, "region");
        if ((r = wsync_fabric_desc_decode(q, WSYNC_FABRIC_DESC_WIRE, &m->regions[i], err)) != WSYNC_OK) {
            char why[300];
            snprintf(why, sizeof why, "%.250s", err ? err->message : "");
            return wsync__cbad(err, r, "JOIN: region %u: %s", (unsigned)i, why);
        }
    }
    for (i = 0; i < m->n_tensors; i++) {
        wsync_ctl_tensor *t = &m->tensors[i];
        const uint8_t *q = NULL;
        size_t nl;
        if (!wsync__ctake(c, 2, &q)) return wsync__cshort(c, err, "tensor name length");
        nl = (size_t)q[0] | (size_t)q[1] << 8;
        if (!wsync__ctake(c, nl, &q)) return wsync__cshort(c, err, "tensor name");
        if (memchr(q, 0, nl)) return wsync__cbad(err, WSYNC_ERR_INVALID_HEADER, "JOIN: tensor %u: NUL in its name", i);
        memcpy(np, q, nl);
        np[nl] = 0;
        t->name = np;
        np += nl + 1;
        WSYNC__CR32(c, t->dtype, "dtype");
        WSYNC__CR32(c, t->ndim, "ndim");
        for (k = 0; k < t->ndim; k++) WSYNC__CR64(c, t->shape[k], "shape");
        WSYNC__CR64(c, t->row_begin, "row_begin");
        WSYNC__CR64(c, t->row_count, "row_count");
        WSYNC__CR32(c, t->region, "region");
        WSYNC__CR64(c, t->offset, "offset");
        WSYNC__CR64(c, t->col_begin, "col_begin");
        WSYNC__CR64(c, t->col_count, "col_count");
        WSYNC__CR32(c, t->to_dtype, "to_dtype");
        WSYNC__CR32(c, t->block, "block");
        WSYNC__CR64(c, t->scale_offset, "scale_offset");
        if ((r = wsync__ctl_tensor_ok(t, m->regions, m->n_regions, err)) != WSYNC_OK) return r;
    }
    return WSYNC_OK;
}

static wsync_result wsync__ctl_assign(wsync__cr *c, wsync_ctl_msg *m, wsync_error *err)
{
    uint32_t i;
    size_t ga, need;
    wsync_result r;
    WSYNC__CR32(c, m->role, "role");
    WSYNC__CR32(c, m->rank, "rank");
    WSYNC__CR32(c, m->n_trainers, "trainer count");
    WSYNC__CR32(c, m->n_inference, "inference count");
    WSYNC__CR32(c, m->n_targets, "target count");
    WSYNC__CR32(c, m->n_transfers, "transfer count");
    if (m->role != WSYNC_CTL_TRAINER && m->role != WSYNC_CTL_INFERENCE)
        return wsync__cbad(err, WSYNC_ERR_INVALID_HEADER, "ASSIGN: role %u", (unsigned)m->role);
    if (m->n_trainers == 0 || m->n_inference == 0 || m->n_trainers > WSYNC_CTL_MAX_RANKS ||
        m->n_inference > WSYNC_CTL_MAX_RANKS)
        return wsync__cbad(err, WSYNC_ERR_LIMIT, "ASSIGN: %u trainers, %u inference ranks",
                           (unsigned)m->n_trainers, (unsigned)m->n_inference);
    if (m->rank >= (m->role == WSYNC_CTL_TRAINER ? m->n_trainers : m->n_inference))
        return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: rank %u outside its role's %u", (unsigned)m->rank,
                           (unsigned)(m->role == WSYNC_CTL_TRAINER ? m->n_trainers : m->n_inference));
    if (m->n_targets > WSYNC__CTL_MAX_TRANSFERS || m->n_transfers > WSYNC__CTL_MAX_TRANSFERS)
        return wsync__cbad(err, WSYNC_ERR_LIMIT, "%s", "ASSIGN: counts above the limits");
    need = (size_t)m->n_targets * (8 + WSYNC_FABRIC_DESC_WIRE) + (size_t)m->n_transfers * WSYNC__CTL_XFER;
    if (need > c->left) return wsync__cshort(c, err, "targets and transfers");
    if (need < c->left)
        return wsync__cbad(err, WSYNC_ERR_TRAILING_BYTES, "ASSIGN: %zu bytes after the last transfer", c->left - need);
    ga = wsync__ctl_align((size_t)m->n_targets * sizeof(wsync_ctl_target));
    if ((r = wsync__ctl_alloc(m, ga + (size_t)m->n_transfers * sizeof(wsync_ctl_transfer), err)) != WSYNC_OK)
        return r;
    m->targets = m->n_targets ? (wsync_ctl_target *)m->storage_ : NULL;
    m->transfers = m->n_transfers ? (wsync_ctl_transfer *)((uint8_t *)m->storage_ + ga) : NULL;
    for (i = 0; i < m->n_targets; i++) {
        wsync_ctl_target *g = &m->targets[i];
        const uint8_t *q = NULL;
        WSYNC__CR32(c, g->rank, "target rank");
        WSYNC__CR32(c, g->region, "target region");
        if (g->rank >= m->n_inference)
            return wsync__cbad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: target %u names inference rank %u of %u",
                               (unsigned)i, (unsigned)g->rank, (unsigned)m->n_inference);
        if (!wsync__ctake(c, WSYNC_FABRIC_DESC_WIRE, &q)) return wsync__cshort(c, err, "target descriptor");
        if ((r = wsync_fabric_desc_decode(q, WSYNC_FABRIC_DESC_WIRE, &g->desc, err)) != WSYNC_OK) {
            char why[300];
            snprintf(why, sizeof why, "%.250s", err ? err->message : "");
            return wsync__cbad(err, r, "ASSIGN: target %u: %s", (unsigned)i, why);
        }
    }
    for (i = 0; i < m->n_transfers; i++) {
        wsync_ctl_transfer *x = &m->transfers[i];
        WSYNC__CR32(c, x->src_region, "src_region");
        WSYNC__CR32(c, x->target, "target");
        WSYNC__CR64(c, x->src_offset, "src_offset");
        WSYNC__CR64(c, x->dst_offset, "dst_offset");
        WSYNC__CR64(c, x->len, "len");
        WSYNC__CR64(c, x->rows, "rows");
        WSYNC__CR64(c, x->src_stride, "src_stride");
        WSYNC__CR32(c, x->prep, "prep");
        WSYNC__CR32(c, x->block, "block");
        WSYNC__CR64(c, x->scale_offset, "scale_offset");
        if ((r = wsync__ctl_transfer_ok(x, i, m->targets, m->n_targets, err)) != WSYNC_OK) return r;
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_ctl_decode(uint32_t type, const uint8_t *payload, size_t len,
                                        const wsync_allocator *a, wsync_ctl_msg *out, wsync_error *err)
{
    wsync__cr c;
    wsync_result r = WSYNC_OK;
    wsync__rerr_reset(err);
    if (!out || (!payload && len)) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "decode arguments");
    memset(out, 0, sizeof *out);
    if (a) out->alloc_ = *a;
    out->type = type;
    if (len > WSYNC_CTL_MAX_PAYLOAD)
        return wsync__cbad(err, WSYNC_ERR_LIMIT, "payload of %zu bytes is above the limit", len);
    c.p = payload;
    c.left = len;
    c.at = 0;
    switch (type) {
    case WSYNC_CTL_JOIN: r = wsync__ctl_join(&c, out, err); break;
    case WSYNC_CTL_ASSIGN: r = wsync__ctl_assign(&c, out, err); break;
    case WSYNC_CTL_GO:
    case WSYNC_CTL_COMMIT: {
        const uint8_t *q;
        if (!wsync__ctake(&c, 8, &q)) r = wsync__cshort(&c, err, "step");
        else out->step = wsync__cget64(q);
        break;
    }
    case WSYNC_CTL_DONE:
    case WSYNC_CTL_ACK:
    case WSYNC_CTL_ABORT:
    case WSYNC_CTL_ERROR: r = wsync__ctl_text(&c, out, err); break;
    case WSYNC_CTL_BYE: break;
    default: r = wsync__cbad(err, WSYNC_ERR_INVALID_HEADER, "unknown message type %u", (unsigned)type);
    }
    if (r == WSYNC_OK && c.left)
        r = wsync__cbad(err, WSYNC_ERR_TRAILING_BYTES, "%zu bytes after the message", c.left);
    if (r != WSYNC_OK) {
        wsync_allocator keep = out->alloc_;
        wsync_ctl_msg_free(out);
        out->alloc_ = keep;
        out->type = type;
    }
    return r;
}

WSYNC_DEF wsync_result wsync_ctl_decode_frame(const uint8_t *buf, size_t len, const wsync_allocator *a,
                                              wsync_ctl_msg *out, wsync_error *err)
{
    uint32_t type = 0, pl = 0;
    wsync_result r;
    if (out) memset(out, 0, sizeof *out);
    if ((r = wsync_ctl_header(buf, len, &type, &pl, err)) != WSYNC_OK) return r;
    if (pl != len - WSYNC_CTL_HEADER)
        return wsync__cbad(err, pl > len - WSYNC_CTL_HEADER ? WSYNC_ERR_TRUNCATED : WSYNC_ERR_TRAILING_BYTES,
                           "the header says %u payload bytes, %zu follow", (unsigned)pl, len - WSYNC_CTL_HEADER);
    return wsync_ctl_decode(type, buf + WSYNC_CTL_HEADER, pl, a, out, err);
}

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_RDMA_IMPLEMENTATION (codec) */

/* ---------------------------------------------------------------------
   Controller and ranks (sockets, threads)
   --------------------------------------------------------------------- */
#if defined(WSYNC_RDMA_IMPLEMENTATION) && !defined(WSYNC__CTL_NET_IMPLEMENTED)
#define WSYNC__CTL_NET_IMPLEMENTED

#ifdef __cplusplus
extern "C" {
#endif

#if WSYNC__RDMA_OK

static const char *wsync__ctl_type_name(uint32_t t)
{
    static const char *const names[] = {"?", "JOIN", "ASSIGN", "GO", "DONE", "COMMIT", "ACK", "ABORT", "BYE", "ERROR"};
    return t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static void wsync__ctl_peer_name(int fd, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    snprintf(out, cap, "%s", "?");
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 &&
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        snprintf(out, cap, "%.40s:%.10s", host, serv);
}

static void wsync__ctl_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static wsync_result wsync__ctl_send(int fd, const wsync_ctl_msg *m, const wsync_allocator *a, const char *to,
                                    wsync_error *err)
{
    uint8_t small[1024], *buf = small;
    size_t len = 0;
    wsync_result r;
    wsync_ctl_encode(m, NULL, 0, &len, NULL);
    if (len == 0) return wsync_ctl_encode(m, NULL, 0, &len, err); /* the reason */
    if (len > sizeof small && !(buf = (uint8_t *)wsync__calloc(a, len)))
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s for %s: %zu bytes", wsync__ctl_type_name(m->type), to,
                            len);
    if ((r = wsync_ctl_encode(m, buf, len, &len, err)) == WSYNC_OK && wsync__rsend_all(fd, buf, len, 0) != 0)
        r = wsync__rfail(err, WSYNC_ERR_IO, "sending %s to %s: %s", wsync__ctl_type_name(m->type), to,
                         strerror(errno));
    if (buf != small) wsync__cfree(a, buf);
    return r;
}

static wsync_result wsync__ctl_send_text(int fd, uint32_t type, uint64_t step, wsync_result status, const char *text,
                                         const char *to, wsync_error *err)
{
    wsync_ctl_msg m;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.step = step;
    m.status = (uint32_t)status;
    if (text) snprintf(m.text, sizeof m.text, "%.255s", text);
    return wsync__ctl_send(fd, &m, NULL, to, err);
}

/* One message within timeout_ms of waiting for each piece (idle: the wait
   for its first byte is unbounded). *closed = 1 when the peer closed the
   connection cleanly between messages. Timeout: WSYNC_ERR_LIMIT. */
static wsync_result wsync__ctl_recv(int fd, int timeout_ms, int idle, const wsync_allocator *a, wsync_ctl_msg *m,
                                    const char *from, int *closed, wsync_error *err)
{
    uint8_t h[WSYNC_CTL_HEADER], *buf = NULL;
    uint32_t type = 0, pl = 0;
    int rc;
    wsync_result r;
    *closed = 0;
    memset(m, 0, sizeof *m);
    rc = wsync__rrecv_full(fd, h, sizeof h, timeout_ms, idle);
    if (rc == 0) {
        *closed = 1;
        return wsync__rfail(err, WSYNC_ERR_IO, "%s closed the connection", from);
    }
    if (rc < 0 && errno == ETIMEDOUT)
        return wsync__rfail(err, WSYNC_ERR_LIMIT, "no message from %s within %d ms", from, timeout_ms);
    if (rc < 0) return wsync__rfail(err, WSYNC_ERR_IO, "reading from %s: %s", from, strerror(errno));
    if ((r = wsync_ctl_header(h, sizeof h, &type, &pl, err)) != WSYNC_OK) {
        char why[320];
        snprintf(why, sizeof why, "%.250s", err ? err->message : "");
        return wsync__rfail(err, r, "from %s: %s", from, why);
    }
    if (pl && !(buf = (uint8_t *)wsync__calloc(a, pl)))
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "a %u-byte message from %s", (unsigned)pl, from);
    if (pl && (rc = wsync__rrecv_full(fd, buf, pl, timeout_ms < 0 ? 10000 : timeout_ms, 0)) != 1) {
        wsync__cfree(a, buf);
        return wsync__rfail(err, WSYNC_ERR_IO, "%s: %s cut short", from, wsync__ctl_type_name(type));
    }
    r = wsync_ctl_decode(type, buf, pl, a, m, err);
    wsync__cfree(a, buf);
    if (r != WSYNC_OK) {
        char why[320];
        snprintf(why, sizeof why, "%.250s", err ? err->message : "");
        return wsync__rfail(err, r, "from %s: %s", from, why);
    }
    return WSYNC_OK;
}

/* ---- the controller ---- */

typedef struct wsync__cmember {
    int fd, gone;
    char name[48];             /* "trainer rank 3" */
    char peer[64];
    wsync_ctl_msg join;
    wsync_ctl_target *targets; /* trainers: the plan */
    uint32_t n_targets, cap_targets;
    wsync_ctl_transfer *xfers;
    uint32_t n_xfers, cap_xfers;
    uint64_t bytes;
} wsync__cmember;

struct wsync_controller {
    wsync_allocator a;
    int lfd;
    unsigned port, nt, ni, join_ms, step_ms;
    wsync__cmember *m;         /* nt trainers, then ni inference ranks */
    int accepted, in_step;
    uint64_t last_step, go_step;
    wsync_controller_plan plan;
    double t_go, t_done, t_ack;
};

static double wsync__ctl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

WSYNC_DEF void wsync_controller_step_times(const wsync_controller *c, double *transfer_s, double *commit_s)
{
    if (transfer_s) *transfer_s = c ? c->t_done - c->t_go : 0;
    if (commit_s) *commit_s = c ? c->t_ack - c->t_done : 0;
}

WSYNC_DEF wsync_result wsync_controller_open(const wsync_controller_options *opt, wsync_controller **out,
                                             wsync_error *err)
{
    wsync_controller *c;
    wsync_allocator a;
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    const char *host;
    unsigned i;
    int gai, e = 0, one = 1;
    wsync__rerr_reset(err);
    if (out) *out = NULL;
    if (!opt || !out) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "controller: options and out");
    if (opt->n_trainers == 0 || opt->n_inference == 0 || opt->n_trainers > WSYNC_CTL_MAX_RANKS ||
        opt->n_inference > WSYNC_CTL_MAX_RANKS)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "controller: %u trainers and %u inference ranks",
                            opt->n_trainers, opt->n_inference);
    a = opt->allocator;
    c = (wsync_controller *)wsync__calloc(&a, sizeof *c);
    if (!c) return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "controller");
    c->a = a;
    c->lfd = -1;
    c->nt = opt->n_trainers;
    c->ni = opt->n_inference;
    c->join_ms = opt->join_timeout_ms ? opt->join_timeout_ms : 30000;
    c->step_ms = opt->step_timeout_ms ? opt->step_timeout_ms : 30000;
    c->m = (wsync__cmember *)wsync__calloc(&a, (size_t)(c->nt + c->ni) * sizeof *c->m);
    if (!c->m) {
        wsync__cfree(&a, c);
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "controller members");
    }
    for (i = 0; i < c->nt + c->ni; i++) {
        c->m[i].fd = -1;
        snprintf(c->m[i].name, sizeof c->m[i].name, "%s rank %u", i < c->nt ? "trainer" : "inference",
                 i < c->nt ? i : i - c->nt);
    }
    host = opt->bind_host ? opt->bind_host : "127.0.0.1";
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(ps, sizeof ps, "%u", opt->port);
    if ((gai = getaddrinfo(host, ps, &hints, &res)) != 0) {
        wsync_controller_close(c);
        return wsync__rfail(err, WSYNC_ERR_IO, "controller: cannot resolve '%s': %s", host, gai_strerror(gai));
    }
    for (ai = res; ai; ai = ai->ai_next) {
        c->lfd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (c->lfd < 0) {
            e = errno;
            continue;
        }
        setsockopt(c->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(c->lfd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(c->lfd, 256) == 0) break;
        e = errno;
        close(c->lfd);
        c->lfd = -1;
    }
    freeaddrinfo(res);
    if (c->lfd < 0) {
        wsync_controller_close(c);
        return wsync__rfail(err, WSYNC_ERR_IO, "controller: cannot listen on %s port %u: %s", host, opt->port,
                            strerror(e));
    }
    {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(c->lfd, (struct sockaddr *)&ss, &sl) == 0)
            c->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
    }
    *out = c;
    return WSYNC_OK;
}

WSYNC_DEF unsigned wsync_controller_port(const wsync_controller *c)
{
    return c ? c->port : 0;
}

WSYNC_DEF void wsync_controller_plan_get(const wsync_controller *c, wsync_controller_plan *out)
{
    if (!out) return;
    if (c) *out = c->plan;
    else memset(out, 0, sizeof *out);
}

/* The names of the ranks that have not joined, for a timeout's message. */
static void wsync__ctl_missing(const wsync_controller *c, char *out, size_t cap)
{
    unsigned i, n = 0;
    size_t at = 0;
    out[0] = 0;
    for (i = 0; i < c->nt + c->ni && at + 1 < cap; i++) {
        if (c->m[i].fd >= 0) continue;
        if (n++ == 8) {
            snprintf(out + at, cap - at, ", ...");
            break;
        }
        at += (size_t)snprintf(out + at, cap - at, "%s%s", n > 1 ? ", " : "", c->m[i].name);
        if (at >= cap) break;
    }
}

/* Takes one connection's JOIN into its slot, or answers ERROR and drops it. */
static void wsync__ctl_take_join(wsync_controller *c, int fd, int timeout_ms)
{
    wsync_ctl_msg msg;
    wsync_error e;
    char peer[64], why[320];
    int closed = 0;
    unsigned slot, limit;
    wsync__ctl_peer_name(fd, peer, sizeof peer);
    wsync__ctl_nodelay(fd);
    wsync__rset_timeouts(fd, c->step_ms);
    if (wsync__ctl_recv(fd, timeout_ms, 0, &c->a, &msg, peer, &closed, &e) != WSYNC_OK) {
        if (!closed) wsync__ctl_send_text(fd, WSYNC_CTL_ERROR, 0, e.code, e.message, peer, NULL);
        close(fd);
        return;
    }
    if (msg.type != WSYNC_CTL_JOIN) {
        snprintf(why, sizeof why, "expected JOIN, got %s", wsync__ctl_type_name(msg.type));
        goto refuse;
    }
    limit = msg.role == WSYNC_CTL_TRAINER ? c->nt : c->ni;
    if (msg.rank >= limit) {
        snprintf(why, sizeof why, "%s rank %u: this controller waits for %u %s ranks (0 to %u)",
                 msg.role == WSYNC_CTL_TRAINER ? "trainer" : "inference", (unsigned)msg.rank, limit,
                 msg.role == WSYNC_CTL_TRAINER ? "trainer" : "inference", limit - 1);
        goto refuse;
    }
    slot = msg.role == WSYNC_CTL_TRAINER ? msg.rank : c->nt + msg.rank;
    if (c->m[slot].fd >= 0) {
        snprintf(why, sizeof why, "%s already joined (from %s)", c->m[slot].name, c->m[slot].peer);
        goto refuse;
    }
    c->m[slot].fd = fd;
    c->m[slot].join = msg;
    snprintf(c->m[slot].peer, sizeof c->m[slot].peer, "%s", peer);
    return;
refuse:
    wsync__ctl_send_text(fd, WSYNC_CTL_ERROR, 0, WSYNC_ERR_INVALID_ARGUMENT, why, peer, NULL);
    wsync_ctl_msg_free(&msg);
    close(fd);
}

typedef struct wsync__ctl_ref {
    const char *name;
    uint32_t member, tensor;
} wsync__ctl_ref;

static int wsync__ctl_ref_cmp(const void *x, const void *y)
{
    const wsync__ctl_ref *a = (const wsync__ctl_ref *)x, *b = (const wsync__ctl_ref *)y;
    int k = strcmp(a->name, b->name);
    if (k) return k;
    if (a->member != b->member) return a->member < b->member ? -1 : 1;
    return a->tensor < b->tensor ? -1 : a->tensor > b->tensor;
}

static int wsync__ctl_grow(const wsync_allocator *a, void **arr, uint32_t *cap, uint32_t n, size_t elem)
{
    uint32_t nc;
    void *p;
    if (n < *cap) return 1;
    if (*cap >= WSYNC__CTL_MAX_TRANSFERS) return 0;
    nc = *cap ? *cap * 2 : 64;
    if (!(p = wsync__calloc(a, (size_t)nc * elem))) return 0;
    if (*arr) memcpy(p, *arr, (size_t)n * elem);
    wsync__cfree(a, *arr);
    *arr = p;
    *cap = nc;
    return 1;
}

/* Elements per row of an entry's full tensor (the dims after the first). */
static uint64_t wsync__ctl_cols(const wsync_ctl_tensor *t)
{
    uint64_t cols = 1;
    uint32_t i;
    for (i = 1; i < t->ndim; i++) cols *= t->shape[i]; /* checked at decode */
    return cols;
}

/* Adds rows [r0, r1) of inference entry `it` (member mi), from trainer
   entry `tt` (member h), to h's plan: contiguous when the entry wants
   every column in the trainer's dtype (merged with the previous write when
   both sides continue it), else rows with a stride (a column slice), or
   all its rows at once with fp8 preparation. */
static wsync_result wsync__ctl_add(wsync_controller *c, wsync__cmember *h, const wsync_ctl_tensor *tt, uint32_t mi,
                                   const wsync_ctl_tensor *it, uint64_t r0, uint64_t r1, wsync_error *err)
{
    const wsync__cmember *in = &c->m[mi];
    uint32_t g, irank = mi - c->nt;
    uint64_t esz = wsync_dtype_bits((wsync_dtype)tt->dtype) / 8, cols = wsync__ctl_cols(tt), cc, dst_row;
    int fp8 = wsync__ctl_fp8(it);
    wsync_ctl_transfer x, *last;
    if (r1 <= r0) return WSYNC_OK;
    for (g = 0; g < h->n_targets; g++)
        if (h->targets[g].rank == irank && h->targets[g].region == it->region) break;
    if (g == h->n_targets) {
        if (!wsync__ctl_grow(&c->a, (void **)&h->targets, &h->cap_targets, h->n_targets, sizeof *h->targets))
            return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: targets of %s", h->name);
        h->targets[g].rank = irank;
        h->targets[g].region = it->region;
        h->targets[g].desc = in->join.regions[it->region];
        h->n_targets++;
    }
    cc = it->col_count ? it->col_count : cols;
    dst_row = cc * (fp8 ? 1 : esz);
    memset(&x, 0, sizeof x);
    x.src_region = tt->region;
    x.target = g;
    x.src_offset = tt->offset + (r0 - tt->row_begin) * cols * esz + it->col_begin * esz;
    x.dst_offset = it->offset + (r0 - it->row_begin) * dst_row;
    x.rows = r1 - r0;
    x.src_stride = cols * esz;
    x.len = x.rows * dst_row;
    if (fp8) {
        x.prep = WSYNC_CTL_PREP_FP8;
        x.block = it->block;
        x.scale_offset = it->scale_offset;
    } else if (cc == cols) {
        x.rows = 1;
        x.src_stride = 0;
    }
    if (x.len == 0) return WSYNC_OK;
    last = h->n_xfers ? &h->xfers[h->n_xfers - 1] : NULL;
    if (last && x.rows == 1 && last->rows == 1 && !x.prep && !last->prep && last->target == x.target &&
        last->src_region == x.src_region && last->src_offset + last->len == x.src_offset &&
        last->dst_offset + last->len == x.dst_offset) {
        last->len += x.len;
    } else {
        if (!wsync__ctl_grow(&c->a, (void **)&h->xfers, &h->cap_xfers, h->n_xfers, sizeof *h->xfers))
            return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: transfers of %s", h->name);
        h->xfers[h->n_xfers++] = x;
    }
    h->bytes += x.len + (fp8 ? 4 * wsync_quantize_scale_count(x.rows, cc, x.block) : 0);
    return WSYNC_OK;
}

static int wsync__ctl_same_shape(const wsync_ctl_tensor *a, const wsync_ctl_tensor *b)
{
    uint32_t k;
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k]) return 0;
    return 1;
}

/* An fp8 entry comes from one trainer holding all its rows (a tile's scale
   needs every element of the tile): the least loaded of those. */
static wsync_result wsync__ctl_cover_whole(wsync_controller *c, uint32_t mi, const wsync_ctl_tensor *it,
                                           const wsync__ctl_ref *refs, size_t lo, size_t hi, wsync_error *err)
{
    size_t k, best = hi;
    uint64_t end = it->row_begin + it->row_count;
    for (k = lo; k < hi; k++) {
        const wsync_ctl_tensor *tt = &c->m[refs[k].member].join.tensors[refs[k].tensor];
        if (tt->row_begin > it->row_begin || tt->row_begin + tt->row_count < end) continue;
        if (best == hi || c->m[refs[k].member].bytes < c->m[refs[best].member].bytes) best = k;
    }
    if (best == hi)
        return wsync__rfail(err, WSYNC_ERR_NOT_FOUND,
                            "plan: tensor '%s': %s wants rows %llu to %llu in fp8, and no trainer holds all of them "
                            "(a tile's scale needs every element of the tile at one sender)",
                            it->name, c->m[mi].name, (unsigned long long)it->row_begin, (unsigned long long)end - 1);
    return wsync__ctl_add(c, &c->m[refs[best].member], &c->m[refs[best].member].join.tensors[refs[best].tensor], mi,
                          it, it->row_begin, end, err);
}

/* Maps one inference entry's rows onto the trainers holding them
   (refs[lo, hi): the trainer entries of that name). */
static wsync_result wsync__ctl_cover(wsync_controller *c, uint32_t mi, const wsync_ctl_tensor *it,
                                     const wsync__ctl_ref *refs, size_t lo, size_t hi, wsync_error *err)
{
    uint64_t cur, end;
    size_t k;
    wsync_result r;
    for (k = lo; k < hi; k++) {
        const wsync_ctl_tensor *tt = &c->m[refs[k].member].join.tensors[refs[k].tensor];
        if (!wsync__ctl_same_shape(tt, it))
            return wsync__rfail(err, WSYNC_ERR_SIZE_MISMATCH,
                                "plan: tensor '%s': %s holds %s of %u dimensions, %s wants %s of %u", it->name,
                                c->m[refs[k].member].name, wsync_dtype_name((wsync_dtype)tt->dtype),
                                (unsigned)tt->ndim, c->m[mi].name, wsync_dtype_name((wsync_dtype)it->dtype),
                                (unsigned)it->ndim);
        if ((tt->col_count && tt->col_count != wsync__ctl_cols(tt)) || (tt->to_dtype && tt->to_dtype != tt->dtype))
            return wsync__rfail(err, WSYNC_ERR_UNSUPPORTED,
                                "plan: tensor '%s': %s holds a column slice or another dtype (trainers hold row "
                                "shards of every column, as stored)", it->name, c->m[refs[k].member].name);
    }
    if (wsync__ctl_fp8(it)) return wsync__ctl_cover_whole(c, mi, it, refs, lo, hi, err);
    cur = it->row_begin;
    end = it->row_begin + it->row_count;
    while (cur < end) {
        uint64_t next = end;
        size_t best = hi;
        for (k = lo; k < hi; k++) {
            const wsync_ctl_tensor *tt = &c->m[refs[k].member].join.tensors[refs[k].tensor];
            uint64_t b = tt->row_begin, e = tt->row_begin + tt->row_count;
            if (b > cur) {
                if (b < next) next = b;
                continue;
            }
            if (e <= cur) continue;
            if (e < next) next = e;
            if (best == hi || c->m[refs[k].member].bytes < c->m[refs[best].member].bytes) best = k;
        }
        if (best == hi)
            return wsync__rfail(err, WSYNC_ERR_NOT_FOUND, "plan: tensor '%s': rows %llu to %llu (of %s) are held by no trainer",
                                it->name, (unsigned long long)cur, (unsigned long long)next - 1, c->m[mi].name);
        r = wsync__ctl_add(c, &c->m[refs[best].member], &c->m[refs[best].member].join.tensors[refs[best].tensor], mi,
                           it, cur, next, err);
        if (r != WSYNC_OK) return r;
        cur = next;
    }
    return WSYNC_OK;
}

static wsync_result wsync__ctl_plan(wsync_controller *c, wsync_error *err)
{
    size_t n = 0, k, i;
    uint32_t mi, t;
    wsync__ctl_ref *refs, key;
    wsync_result r = WSYNC_OK;
    for (mi = 0; mi < c->nt; mi++) n += c->m[mi].join.n_tensors;
    refs = (wsync__ctl_ref *)wsync__calloc(&c->a, (n ? n : 1) * sizeof *refs);
    if (!refs) return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: index");
    for (k = 0, mi = 0; mi < c->nt; mi++)
        for (t = 0; t < c->m[mi].join.n_tensors; t++, k++) {
            refs[k].name = c->m[mi].join.tensors[t].name;
            refs[k].member = mi;
            refs[k].tensor = t;
        }
    qsort(refs, n, sizeof *refs, wsync__ctl_ref_cmp);
    for (k = 1; k < n; k++)
        if (refs[k].member == refs[k - 1].member && strcmp(refs[k].name, refs[k - 1].name) == 0) {
            r = wsync__rfail(err, WSYNC_ERR_DUPLICATE_KEY, "plan: %s holds tensor '%s' twice",
                             c->m[refs[k].member].name, refs[k].name);
            goto out;
        }
    for (mi = c->nt; mi < c->nt + c->ni && r == WSYNC_OK; mi++) {
        const wsync_ctl_msg *j = &c->m[mi].join;
        for (t = 0; t < j->n_tensors && r == WSYNC_OK; t++) {
            size_t lo = 0, hi = n, m;
            key.name = j->tensors[t].name;
            key.member = 0;
            key.tensor = 0;
            while (lo < hi) { /* the first entry of that name */
                m = lo + (hi - lo) / 2;
                if (strcmp(refs[m].name, key.name) < 0) lo = m + 1;
                else hi = m;
            }
            for (hi = lo; hi < n && strcmp(refs[hi].name, key.name) == 0; hi++) {
            }
            for (i = 0; i < t; i++) /* a name twice in one inference rank */
                if (strcmp(j->tensors[i].name, key.name) == 0) break;
            if (i < t)
                r = wsync__rfail(err, WSYNC_ERR_DUPLICATE_KEY, "plan: %s holds tensor '%s' twice", c->m[mi].name,
                                 key.name);
            else if (lo == hi)
                r = wsync__rfail(err, WSYNC_ERR_NOT_FOUND, "plan: %s needs tensor '%s', which no trainer holds",
                                 c->m[mi].name, key.name);
            else
                r = wsync__ctl_cover(c, mi, &j->tensors[t], refs, lo, hi, err);
        }
    }
out:
    wsync__cfree(&c->a, refs);
    return r;
}

static void wsync__ctl_plan_stats(wsync_controller *c)
{
    unsigned i;
    wsync_controller_plan *p = &c->plan;
    memset(p, 0, sizeof *p);
    p->min_trainer_bytes = UINT64_MAX;
    for (i = 0; i < c->nt; i++) {
        p->transfers += c->m[i].n_xfers;
        p->bytes += c->m[i].bytes;
        if (c->m[i].bytes > p->max_trainer_bytes) p->max_trainer_bytes = c->m[i].bytes;
        if (c->m[i].bytes < p->min_trainer_bytes) p->min_trainer_bytes = c->m[i].bytes;
    }
    for (i = c->nt; i < c->nt + c->ni; i++) {
        uint64_t b = 0, rb = 0, tb;
        uint32_t t;
        for (t = 0; t < c->m[i].join.n_tensors; t++) {
            const wsync_ctl_tensor *it = &c->m[i].join.tensors[t];
            if (wsync_ctl_tensor_bytes(it, &rb, &tb, NULL) != WSYNC_OK) continue;
            b += tb;
            if (wsync__ctl_fp8(it)) b += 4 * wsync_quantize_scale_count(it->row_count, rb, it->block);
        }
        if (b > p->max_inference_bytes) p->max_inference_bytes = b;
    }
}

static void wsync__ctl_fail_all(wsync_controller *c, const wsync_error *e)
{
    unsigned i;
    for (i = 0; i < c->nt + c->ni; i++)
        if (c->m[i].fd >= 0 && !c->m[i].gone)
            wsync__ctl_send_text(c->m[i].fd, WSYNC_CTL_ERROR, 0, e->code, e->message, c->m[i].name, NULL);
}

#define WSYNC__CTL_PENDING 64
#define WSYNC__CTL_JOIN_PIECE_MS 1000

WSYNC_DEF wsync_result wsync_controller_accept(wsync_controller *c, wsync_error *err)
{
    int64_t deadline;
    int pend[WSYNC__CTL_PENDING];
    unsigned i, joined = 0, np = 0;
    wsync_error local;
    wsync_result r;
    if (!err) err = &local;
    wsync__rerr_reset(err);
    if (!c || c->accepted) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "accept: once per controller");
    deadline = wsync__rnow_ms() + c->join_ms;
    for (;;) {
        /* connections accepted but silent so far wait here, polled with the
           listener, so that one that never speaks holds up nobody; a JOIN is
           read once its first bytes are in, each later piece within
           WSYNC__CTL_JOIN_PIECE_MS */
        struct pollfd pf[1 + WSYNC__CTL_PENDING];
        int64_t left;
        int fd, pr;
        unsigned k;
        for (joined = 0, i = 0; i < c->nt + c->ni; i++) joined += c->m[i].fd >= 0;
        if (joined == c->nt + c->ni) break;
        left = deadline - wsync__rnow_ms();
        if (left <= 0) {
            char missing[256];
            wsync__ctl_missing(c, missing, sizeof missing);
            r = wsync__rfail(err, WSYNC_ERR_LIMIT, "controller: %u of %u ranks joined within %u ms; missing: %s",
                             joined, c->nt + c->ni, c->join_ms, missing);
            wsync__ctl_fail_all(c, err);
            for (k = 0; k < np; k++) close(pend[k]);
            return r;
        }
        pf[0].fd = c->lfd;
        pf[0].events = POLLIN;
        pf[0].revents = 0;
        for (k = 0; k < np; k++) {
            pf[1 + k].fd = pend[k];
            pf[1 + k].events = POLLIN;
            pf[1 + k].revents = 0;
        }
        pr = poll(pf, 1 + np, (int)left);
        if (pr <= 0) continue;
        for (k = np; k-- > 0;) {
            if (!pf[1 + k].revents) continue;
            fd = pend[k];
            pend[k] = pend[--np]; /* entries above k are done with */
            left = deadline - wsync__rnow_ms();
            wsync__ctl_take_join(c, fd, left > WSYNC__CTL_JOIN_PIECE_MS ? WSYNC__CTL_JOIN_PIECE_MS
                                                                        : left > 0 ? (int)left : 1);
        }
        if (!(pf[0].revents & POLLIN)) continue;
        fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        if (np == WSYNC__CTL_PENDING) { /* the oldest silent one goes */
            close(pend[0]);
            pend[0] = pend[--np];
        }
        pend[np++] = fd;
    }
    for (i = 0; i < np; i++) close(pend[i]);
    if ((r = wsync__ctl_plan(c, err)) != WSYNC_OK) {
        wsync__ctl_fail_all(c, err);
        return r;
    }
    wsync__ctl_plan_stats(c);
    for (i = 0; i < c->nt + c->ni; i++) {
        wsync__cmember *m = &c->m[i];
        wsync_ctl_msg a;
        memset(&a, 0, sizeof a);
        a.type = WSYNC_CTL_ASSIGN;
        a.role = i < c->nt ? WSYNC_CTL_TRAINER : WSYNC_CTL_INFERENCE;
        a.rank = i < c->nt ? i : i - c->nt;
        a.n_trainers = c->nt;
        a.n_inference = c->ni;
        a.n_targets = m->n_targets;
        a.targets = m->targets;
        a.n_transfers = m->n_xfers;
        a.transfers = m->xfers;
        if ((r = wsync__ctl_send(m->fd, &a, &c->a, m->name, err)) != WSYNC_OK) {
            m->gone = 1;
            return r;
        }
    }
    c->accepted = 1;
    return WSYNC_OK;
}

static wsync_result wsync__ctl_gone(wsync_controller *c, wsync_error *err)
{
    unsigned i;
    for (i = 0; i < c->nt + c->ni; i++)
        if (c->m[i].gone)
            return wsync__rfail(err, WSYNC_ERR_IO, "%s is gone (a failed step lost it); the group must be restarted",
                                c->m[i].name);
    return WSYNC_OK;
}

static void wsync__ctl_abort(wsync_controller *c, uint64_t step, const wsync_error *why)
{
    unsigned i;
    c->in_step = 0;
    for (i = c->nt; i < c->nt + c->ni; i++)
        if (!c->m[i].gone &&
            wsync__ctl_send_text(c->m[i].fd, WSYNC_CTL_ABORT, step, why->code, why->message, c->m[i].name, NULL) !=
                WSYNC_OK)
            c->m[i].gone = 1;
}

WSYNC_DEF wsync_result wsync_controller_go(wsync_controller *c, uint64_t step, wsync_error *err)
{
    unsigned i;
    wsync_ctl_msg g;
    wsync_error local;
    wsync_result r;
    if (!err) err = &local;
    wsync__rerr_reset(err);
    if (!c || !c->accepted) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "go: accept first");
    if (step <= c->last_step || step <= c->go_step) /* an aborted step's number is not reused */
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "go: step %llu after step %llu (steps increase, from 1)",
                            (unsigned long long)step,
                            (unsigned long long)(c->go_step > c->last_step ? c->go_step : c->last_step));
    if ((r = wsync__ctl_gone(c, err)) != WSYNC_OK) return r;
    memset(&g, 0, sizeof g);
    g.type = WSYNC_CTL_GO;
    g.step = step;
    c->go_step = step;
    c->in_step = 1;
    c->t_go = wsync__ctl_now();
    for (i = 0; i < c->nt; i++)
        if ((r = wsync__ctl_send(c->m[i].fd, &g, &c->a, c->m[i].name, err)) != WSYNC_OK) {
            c->m[i].gone = 1;
            wsync__ctl_abort(c, step, err);
            return r;
        }
    return WSYNC_OK;
}

/* Collects one answer of `type` for `step` from members [from, to); stale
   answers for earlier steps are skipped. */
static wsync_result wsync__ctl_collect(wsync_controller *c, unsigned from, unsigned to, uint32_t type, uint64_t step,
                                       wsync_error *err)
{
    unsigned i, waiting = to - from;
    unsigned char *got;
    int64_t deadline = wsync__rnow_ms() + c->step_ms;
    wsync_result r = WSYNC_OK;
    struct pollfd *pf;
    got = (unsigned char *)wsync__calloc(&c->a, to - from);
    pf = (struct pollfd *)wsync__calloc(&c->a, (to - from) * sizeof *pf);
    if (!got || !pf) {
        wsync__cfree(&c->a, got);
        wsync__cfree(&c->a, pf);
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "step: poll set");
    }
    while (waiting && r == WSYNC_OK) {
        int64_t left = deadline - wsync__rnow_ms();
        int pr;
        if (left <= 0) {
            for (i = from; i < to && got[i - from]; i++) {
            }
            r = wsync__rfail(err, WSYNC_ERR_LIMIT, "step %llu: %s sent no %s within %u ms", (unsigned long long)step,
                             c->m[i].name, wsync__ctl_type_name(type), c->step_ms);
            break;
        }
        for (i = from; i < to; i++) {
            pf[i - from].fd = got[i - from] ? -1 : c->m[i].fd;
            pf[i - from].events = POLLIN;
            pf[i - from].revents = 0;
        }
        pr = poll(pf, to - from, (int)left);
        if (pr < 0 && errno != EINTR) {
            r = wsync__rfail(err, WSYNC_ERR_IO, "step: poll: %s", strerror(errno));
            break;
        }
        for (i = from; pr > 0 && i < to && r == WSYNC_OK; i++) {
            wsync_ctl_msg m;
            int closed = 0;
            wsync_error e;
            if (!pf[i - from].revents) continue;
            if (wsync__ctl_recv(c->m[i].fd, 2000, 0, &c->a, &m, c->m[i].name, &closed, &e) != WSYNC_OK) {
                c->m[i].gone = 1;
                r = wsync__rfail(err, WSYNC_ERR_IO, "step %llu: %s went away: %s", (unsigned long long)step,
                                 c->m[i].name, e.message);
                break;
            }
            if (m.type == type && m.step < step) { /* an answer to an aborted step */
            } else if (m.type != type || m.step != step) {
                r = wsync__rfail(err, WSYNC_ERR_IO, "step %llu: %s sent %s for step %llu (%s)",
                                 (unsigned long long)step, c->m[i].name, wsync__ctl_type_name(m.type),
                                 (unsigned long long)m.step, m.text);
            } else if (m.status != WSYNC_OK) {
                r = wsync__rfail(err, m.status < 256 ? (wsync_result)m.status : WSYNC_ERR_IO,
                                 "step %llu: %s failed: %s", (unsigned long long)step, c->m[i].name, m.text);
            } else {
                got[i - from] = 1;
                waiting--;
            }
            wsync_ctl_msg_free(&m);
        }
    }
    wsync__cfree(&c->a, got);
    wsync__cfree(&c->a, pf);
    return r;
}

WSYNC_DEF wsync_result wsync_controller_finish(wsync_controller *c, uint64_t step, wsync_error *err)
{
    unsigned i;
    wsync_ctl_msg g;
    wsync_error local;
    wsync_result r;
    if (!err) err = &local;
    wsync__rerr_reset(err);
    if (!c || !c->in_step || step != c->go_step)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "finish: step %llu was not started with go",
                            (unsigned long long)step);
    if ((r = wsync__ctl_collect(c, 0, c->nt, WSYNC_CTL_DONE, step, err)) != WSYNC_OK) {
        wsync__ctl_abort(c, step, err);
        return r;
    }
    c->t_done = wsync__ctl_now();
    memset(&g, 0, sizeof g);
    g.type = WSYNC_CTL_COMMIT;
    g.step = step;
    for (i = c->nt; i < c->nt + c->ni; i++)
        if ((r = wsync__ctl_send(c->m[i].fd, &g, &c->a, c->m[i].name, err)) != WSYNC_OK) {
            c->m[i].gone = 1;
            wsync__ctl_abort(c, step, err);
            return r;
        }
    if ((r = wsync__ctl_collect(c, c->nt, c->nt + c->ni, WSYNC_CTL_ACK, step, err)) != WSYNC_OK) {
        wsync__ctl_abort(c, step, err);
        return r;
    }
    c->t_ack = wsync__ctl_now();
    c->in_step = 0;
    c->last_step = step;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_controller_step(wsync_controller *c, uint64_t step, wsync_error *err)
{
    wsync_result r = wsync_controller_go(c, step, err);
    return r != WSYNC_OK ? r : wsync_controller_finish(c, step, err);
}

WSYNC_DEF void wsync_controller_close(wsync_controller *c)
{
    unsigned i;
    wsync_ctl_msg bye;
    if (!c) return;
    memset(&bye, 0, sizeof bye);
    bye.type = WSYNC_CTL_BYE;
    for (i = 0; c->m && i < c->nt + c->ni; i++) {
        wsync__cmember *m = &c->m[i];
        if (m->fd >= 0) {
            if (!m->gone) wsync__ctl_send(m->fd, &bye, &c->a, m->name, NULL);
            close(m->fd);
        }
        wsync_ctl_msg_free(&m->join);
        wsync__cfree(&c->a, m->targets);
        wsync__cfree(&c->a, m->xfers);
    }
    if (c->lfd >= 0) close(c->lfd);
    wsync__cfree(&c->a, c->m);
    wsync__cfree(&c->a, c);
}

/* ---- a rank ---- */

struct wsync_rank {
    wsync_allocator a;
    int fd;
    uint32_t role, rank;
    char me[48];
    unsigned timeout_ms;
    wsync_ctl_msg assign;
    wsync_fabric *f;
    wsync_fabric_mr **mrs;
    uint64_t *mr_len;
    uint8_t **mr_addr;         /* where each region is here (for preparation) */
    uint32_t n_regions;
    wsync_fabric_remote **rem; /* per target */
    /* trainers: transfers that gather or quantize go through the executor */
    wsync_exec_task *tasks;    /* one per transfer */
    uint8_t *staging;
    uint64_t staging_len, staging_want;
    wsync_fabric_mr *staging_mr;
    wsync_exec_stats stats;
    /* inference */
    wsync_result (*on_commit)(void *user, uint64_t step, wsync_error *err);
    void (*on_abort)(void *user, uint64_t step, const char *why);
    void *user;
    pthread_t th;
    int th_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    volatile uint64_t version;
    uint64_t aborted;
    int ended;
    char why[320];
};

static void wsync__rank_end(wsync_rank *r, const char *why)
{
    pthread_mutex_lock(&r->mu);
    if (!r->ended) snprintf(r->why, sizeof r->why, "%s", why);
    r->ended = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void *wsync__rank_main(void *p)
{
    wsync_rank *r = (wsync_rank *)p;
    for (;;) {
        wsync_ctl_msg m;
        wsync_error e;
        int closed = 0;
        if (wsync__ctl_recv(r->fd, 10000, 1, &r->a, &m, "the controller", &closed, &e) != WSYNC_OK) {
            wsync__rank_end(r, closed ? "the controller went away (connection closed)" : e.message);
            break;
        }
        if (m.type == WSYNC_CTL_COMMIT) {
            wsync_result res = WSYNC_OK;
            wsync__rerr_reset(&e);
            if (m.step <= r->version) {
                res = wsync__rfail(&e, WSYNC_ERR_INVALID_ARGUMENT, "COMMIT for step %llu at version %llu",
                                   (unsigned long long)m.step, (unsigned long long)r->version);
            } else if (r->on_commit) {
                res = r->on_commit(r->user, m.step, &e);
                if (res != WSYNC_OK && !e.message[0]) snprintf(e.message, sizeof e.message, "%s", wsync_result_str(res));
            }
            if (res == WSYNC_OK) {
                pthread_mutex_lock(&r->mu);
                __atomic_store_n(&r->version, m.step, __ATOMIC_RELEASE);
                pthread_cond_broadcast(&r->cv);
                pthread_mutex_unlock(&r->mu);
            }
            if (wsync__ctl_send_text(r->fd, WSYNC_CTL_ACK, m.step, res, res == WSYNC_OK ? "" : e.message,
                                     "the controller", &e) != WSYNC_OK) {
                wsync__rank_end(r, e.message);
                break;
            }
        } else if (m.type == WSYNC_CTL_ABORT) {
            if (r->on_abort) r->on_abort(r->user, m.step, m.text);
            pthread_mutex_lock(&r->mu);
            if (m.step > r->aborted) r->aborted = m.step;
            snprintf(r->why, sizeof r->why, "step %llu aborted: %s", (unsigned long long)m.step, m.text);
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        } else {
            char why[320];
            if (m.type == WSYNC_CTL_BYE) snprintf(why, sizeof why, "%s", "the controller said BYE");
            else if (m.type == WSYNC_CTL_ERROR) snprintf(why, sizeof why, "the controller: %s", m.text);
            else snprintf(why, sizeof why, "unexpected %s from the controller", wsync__ctl_type_name(m.type));
            wsync_ctl_msg_free(&m);
            wsync__rank_end(r, why);
            break;
        }
        wsync_ctl_msg_free(&m);
    }
    return NULL;
}

static wsync_result wsync__rank_check(const wsync_rank_options *o, wsync_error *err)
{
    uint32_t i;
    if (!o->port) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: the controller's port");
    if (o->role != WSYNC_CTL_TRAINER && o->role != WSYNC_CTL_INFERENCE)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "rank: role %u", (unsigned)o->role);
    if (o->n_regions && (!o->mrs || !o->descs))
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: regions without mrs or descriptors");
    if (o->n_tensors && !o->tensors)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: tensors is NULL");
    if (o->role == WSYNC_CTL_TRAINER && !o->fabric)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: a trainer needs a fabric");
    for (i = 0; i < o->n_regions; i++)
        if (!o->mrs[i]) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "rank: region %u not registered", i);
    return WSYNC_OK;
}

/* A trainer checks its ASSIGN against its own regions, then opens every
   target on its fabric. */
/* A transfer's source bytes: from src_offset to the end of its last row. */
static uint64_t wsync__rank_extent(const wsync_ctl_transfer *x)
{
    uint64_t row_src = x->len / x->rows * (x->prep == WSYNC_CTL_PREP_FP8 ? 2 : 1);
    return (x->rows - 1) * x->src_stride + row_src; /* bounded at decode */
}

/* Staging bytes a transfer needs: its prepared rows (8-byte multiples, so
   every task's place in the ring stays aligned), and fp8 scales after them. */
static uint64_t wsync__rank_tmp(const wsync_ctl_transfer *x, uint64_t *scales_at)
{
    uint64_t data = (x->len + 7) & ~(uint64_t)7, ns;
    *scales_at = data;
    if (x->prep == WSYNC_CTL_PREP_FP8) {
        ns = wsync_quantize_scale_count(x->rows, x->len / x->rows, x->block);
        return data + ((ns * 4 + 7) & ~(uint64_t)7);
    }
    return x->rows > 1 ? data : 0;
}

/* The executor's tasks, and a staging arena registered on the fabric when
   any transfer gathers or quantizes. */
static wsync_result wsync__rank_staging(wsync_rank *r, wsync_error *err)
{
    uint32_t i, n = r->assign.n_transfers;
    uint64_t most = 0, at;
    wsync_fabric_desc d;
    if (n && !(r->tasks = (wsync_exec_task *)wsync__calloc(&r->a, (size_t)n * sizeof *r->tasks)))
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "rank: tasks");
    for (i = 0; i < n; i++) {
        r->tasks[i].tmp_bytes = wsync__rank_tmp(&r->assign.transfers[i], &at);
        r->tasks[i].user = &r->assign.transfers[i];
        if (r->tasks[i].tmp_bytes > most) most = r->tasks[i].tmp_bytes;
    }
    if (most == 0) return WSYNC_OK;
    r->staging_len = r->staging_want > most ? r->staging_want : most;
    if ((uint64_t)(size_t)r->staging_len != r->staging_len ||
        !(r->staging = (uint8_t *)wsync__calloc(&r->a, (size_t)r->staging_len)))
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: %llu staging bytes", r->me,
                            (unsigned long long)r->staging_len);
    return r->f->reg(r->f->user, r->staging, r->staging_len, WSYNC_MEM_HOST, &r->staging_mr, &d, err);
}

static wsync_result wsync__rank_targets(wsync_rank *r, wsync_error *err)
{
    uint32_t i;
    wsync_result res;
    for (i = 0; i < r->assign.n_transfers; i++) {
        const wsync_ctl_transfer *x = &r->assign.transfers[i];
        uint64_t ext = wsync__rank_extent(x);
        if (x->src_region >= r->n_regions || !wsync__cin(x->src_offset, ext, r->mr_len[x->src_region]))
            return wsync__rfail(err, WSYNC_ERR_OUT_OF_BOUNDS,
                                "%s: ASSIGN transfer %u reads %llu bytes at %llu of region %u, outside this rank's regions",
                                r->me, (unsigned)i, (unsigned long long)ext, (unsigned long long)x->src_offset,
                                (unsigned)x->src_region);
        if (x->prep == WSYNC_CTL_PREP_FP8 && ((uintptr_t)(r->mr_addr[x->src_region] + x->src_offset) % 2 ||
                                              (x->rows > 1 && x->src_stride % 2)))
            return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s: ASSIGN transfer %u: bf16 rows not 2-byte aligned",
                                r->me, (unsigned)i);
    }
    if ((res = wsync__rank_staging(r, err)) != WSYNC_OK) return res;
    if (r->assign.n_targets &&
        !(r->rem = (wsync_fabric_remote **)wsync__calloc(&r->a, r->assign.n_targets * sizeof *r->rem)))
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "rank: remotes");
    for (i = 0; i < r->assign.n_targets; i++) {
        const wsync_ctl_target *g = &r->assign.targets[i];
        if ((res = r->f->open_remote(r->f->user, &g->desc, &r->rem[i], err)) != WSYNC_OK) {
            char why[320];
            snprintf(why, sizeof why, "%.250s", err ? err->message : "");
            return wsync__rfail(err, res, "%s: opening inference rank %u region %u: %s", r->me, (unsigned)g->rank,
                                (unsigned)g->region, why);
        }
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_rank_join(const wsync_rank_options *opt, wsync_rank **out, wsync_error *err)
{
    wsync_rank *r;
    wsync_ctl_msg j, m;
    wsync_error local;
    wsync_result res;
    char why[256];
    uint32_t i;
    int closed = 0;
    if (!err) err = &local;
    wsync__rerr_reset(err);
    if (out) *out = NULL;
    if (!opt || !out) return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: options and out");
    if ((res = wsync__rank_check(opt, err)) != WSYNC_OK) return res;
    r = (wsync_rank *)wsync__calloc(&opt->allocator, sizeof *r);
    if (!r) return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "rank");
    r->a = opt->allocator;
    r->fd = -1;
    r->role = opt->role;
    r->rank = opt->rank;
    r->f = opt->fabric;
    r->timeout_ms = opt->timeout_ms ? opt->timeout_ms : 30000;
    r->staging_want = opt->staging_bytes ? opt->staging_bytes : (64ull << 20);
    r->on_commit = opt->on_commit;
    r->on_abort = opt->on_abort;
    r->user = opt->user;
    snprintf(r->me, sizeof r->me, "%s rank %u", r->role == WSYNC_CTL_TRAINER ? "trainer" : "inference",
             (unsigned)r->rank);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->n_regions = opt->n_regions;
    if (r->n_regions) {
        r->mrs = (wsync_fabric_mr **)wsync__calloc(&r->a, r->n_regions * sizeof *r->mrs);
        r->mr_len = (uint64_t *)wsync__calloc(&r->a, r->n_regions * sizeof *r->mr_len);
        r->mr_addr = (uint8_t **)wsync__calloc(&r->a, r->n_regions * sizeof *r->mr_addr);
        if (!r->mrs || !r->mr_len || !r->mr_addr) {
            wsync_rank_close(r);
            return wsync__rfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "rank: regions");
        }
        for (i = 0; i < r->n_regions; i++) {
            r->mrs[i] = opt->mrs[i];
            r->mr_len[i] = opt->descs[i].len;
            r->mr_addr[i] = (uint8_t *)(uintptr_t)opt->descs[i].addr;
        }
    }
    r->fd = wsync__tcp_connect(opt->host ? opt->host : "127.0.0.1", opt->port, r->timeout_ms, why, sizeof why);
    if (r->fd < 0) {
        wsync_rank_close(r);
        return wsync__rfail(err, WSYNC_ERR_IO, "%s: the controller at %s port %u: %s", r->me,
                            opt->host ? opt->host : "127.0.0.1", opt->port, why);
    }
    wsync__ctl_nodelay(r->fd);
    wsync__rset_timeouts(r->fd, r->timeout_ms);
    memset(&j, 0, sizeof j);
    j.type = WSYNC_CTL_JOIN;
    j.role = r->role;
    j.rank = r->rank;
    j.n_regions = opt->n_regions;
    j.regions = (wsync_fabric_desc *)opt->descs;
    j.n_tensors = opt->n_tensors;
    j.tensors = (wsync_ctl_tensor *)opt->tensors;
    if ((res = wsync__ctl_send(r->fd, &j, &r->a, "the controller", err)) != WSYNC_OK ||
        (res = wsync__ctl_recv(r->fd, (int)r->timeout_ms, 0, &r->a, &m, "the controller", &closed, err)) != WSYNC_OK) {
        wsync_rank_close(r);
        return res;
    }
    if (m.type != WSYNC_CTL_ASSIGN || m.role != r->role || m.rank != r->rank) {
        res = m.type == WSYNC_CTL_ERROR && m.status && m.status < 256 ? (wsync_result)m.status : WSYNC_ERR_IO;
        if (m.type == WSYNC_CTL_ERROR) wsync__rfail(err, res, "%s: the controller refused: %s", r->me, m.text);
        else wsync__rfail(err, res, "%s: expected ASSIGN, got %s", r->me, wsync__ctl_type_name(m.type));
        wsync_ctl_msg_free(&m);
        wsync_rank_close(r);
        return res;
    }
    r->assign = m;
    if (r->role == WSYNC_CTL_TRAINER) {
        if ((res = wsync__rank_targets(r, err)) != WSYNC_OK) {
            wsync_rank_close(r);
            return res;
        }
    } else {
        if (pthread_create(&r->th, NULL, wsync__rank_main, r) != 0) {
            wsync_rank_close(r);
            return wsync__rfail(err, WSYNC_ERR_IO, "%s", "rank: pthread_create");
        }
        r->th_on = 1;
    }
    *out = r;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_rank_wait_go(wsync_rank *r, uint64_t *step, int *bye, int timeout_ms, wsync_error *err)
{
    wsync_ctl_msg m;
    int closed = 0;
    wsync_result res;
    wsync__rerr_reset(err);
    if (!r || !step || !bye || r->role != WSYNC_CTL_TRAINER)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "wait_go: a trainer's rank");
    *bye = 0;
    if ((res = wsync__ctl_recv(r->fd, timeout_ms < 0 ? 10000 : timeout_ms, timeout_ms < 0, &r->a, &m,
                               "the controller", &closed, err)) != WSYNC_OK)
        return res;
    res = WSYNC_OK;
    if (m.type == WSYNC_CTL_GO) *step = m.step;
    else if (m.type == WSYNC_CTL_BYE) *bye = 1;
    else if (m.type == WSYNC_CTL_ERROR) res = wsync__rfail(err, WSYNC_ERR_IO, "the controller: %s", m.text);
    else res = wsync__rfail(err, WSYNC_ERR_IO, "unexpected %s from the controller", wsync__ctl_type_name(m.type));
    wsync_ctl_msg_free(&m);
    return res;
}

static wsync_result wsync__rank_wfail(wsync_rank *r, const wsync_ctl_transfer *x, wsync_result res, wsync_error *err)
{
    char why[320];
    snprintf(why, sizeof why, "%.250s", err->message);
    return wsync__rfail(err, res, "%s: writing %llu bytes to inference rank %u: %s", r->me, (unsigned long long)x->len,
                        (unsigned)r->assign.targets[x->target].rank, why);
}

/* Executor stage: gather a strided slice, or quantize it to fp8, into staging. */
static wsync_result wsync__rank_prepare(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t tmp_off,
                                        wsync_error *err)
{
    wsync_rank *r = (wsync_rank *)user;
    const wsync_ctl_transfer *x = (const wsync_ctl_transfer *)t->user;
    const uint8_t *src = r->mr_addr[x->src_region] + x->src_offset;
    uint64_t row = x->len / x->rows, i, scales_at;
    (void)tmp_off;
    if (!t->tmp_bytes) return WSYNC_OK; /* written straight from the source */
    if (x->prep == WSYNC_CTL_PREP_FP8) {
        wsync__rank_tmp(x, &scales_at);
        return wsync_quantize_e4m3((const uint16_t *)(const void *)src, x->rows, row,
                                   x->rows > 1 ? x->src_stride / 2 : row, x->block, tmp,
                                   (float *)(void *)(tmp + scales_at), err);
    }
    for (i = 0; i < x->rows; i++) memcpy(tmp + i * row, src + i * x->src_stride, (size_t)row);
    return WSYNC_OK;
}

/* Executor stage: the one-sided writes (fp8: the codes, then the scales). */
static wsync_result wsync__rank_write(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t tmp_off,
                                      wsync_error *err)
{
    wsync_rank *r = (wsync_rank *)user;
    const wsync_ctl_transfer *x = (const wsync_ctl_transfer *)t->user;
    wsync_fabric_remote *dst = r->rem[x->target];
    wsync_result res;
    uint64_t scales_at, tmp_bytes;
    (void)tmp;
    if (!t->tmp_bytes) {
        res = r->f->write(r->f->user, r->mrs[x->src_region], x->src_offset, dst, x->dst_offset, x->len, err);
        return res == WSYNC_OK ? res : wsync__rank_wfail(r, x, res, err);
    }
    tmp_bytes = wsync__rank_tmp(x, &scales_at);
    res = r->f->write(r->f->user, r->staging_mr, tmp_off, dst, x->dst_offset, x->len, err);
    if (res == WSYNC_OK && x->prep == WSYNC_CTL_PREP_FP8)
        res = r->f->write(r->f->user, r->staging_mr, tmp_off + scales_at, dst, x->scale_offset,
                          4 * wsync_quantize_scale_count(x->rows, x->len / x->rows, x->block), err);
    /* the staging bytes are reused once this returns: a backend that reads
       them later (RDMA) must be done with them first */
    if (res == WSYNC_OK && r->f->backend == WSYNC_FABRIC_VERBS) res = r->f->flush(r->f->user, err);
    (void)tmp_bytes;
    return res == WSYNC_OK ? res : wsync__rank_wfail(r, x, res, err);
}

WSYNC_DEF wsync_result wsync_rank_push_some(wsync_rank *r, uint32_t first, uint32_t count, int flush,
                                            wsync_error *err)
{
    wsync_exec_options eo;
    wsync_result res;
    wsync_error local;
    char why[320];
    if (!err) err = &local;
    wsync__rerr_reset(err);
    if (!r || r->role != WSYNC_CTL_TRAINER)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "push: a trainer's rank");
    if (first > r->assign.n_transfers || count > r->assign.n_transfers - first)
        return wsync__rfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "push: transfers %u + %u of %u", (unsigned)first,
                            (unsigned)count, (unsigned)r->assign.n_transfers);
    memset(&eo, 0, sizeof eo);
    eo.allocator = r->a;
    eo.staging = r->staging;
    eo.staging_len = r->staging_len;
    eo.n_stages = 2;
    eo.stages[0] = wsync__rank_prepare;
    eo.stages[1] = wsync__rank_write;
    eo.stage_names[0] = "prepare";
    eo.stage_names[1] = "write";
    eo.user = r;
    if (count && (res = wsync_exec_run(&eo, r->tasks + first, count, &r->stats, err)) != WSYNC_OK) return res;
    if (flush && (res = r->f->flush(r->f->user, err)) != WSYNC_OK) {
        snprintf(why, sizeof why, "%.250s", err->message);
        return wsync__rfail(err, res, "%s: %s", r->me, why);
    }
    return WSYNC_OK;
}

WSYNC_DEF void wsync_rank_push_stats(const wsync_rank *r, wsync_exec_stats *out)
{
    if (!out) return;
    if (r) *out = r->stats;
    else memset(out, 0, sizeof *out);
}

WSYNC_DEF wsync_result wsync_rank_push(wsync_rank *r, wsync_error *err)
{
    return wsync_rank_push_some(r, 0, r ? r->assign.n_transfers : 0, 1, err);
}

WSYNC_DEF wsync_result wsync_rank_done(wsync_rank *r, uint64_t step, wsync_result result, const char *why,
                                       wsync_error *err)
{
    wsync__rerr_reset(err);
    if (!r || r->role != WSYNC_CTL_TRAINER)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "done: a trainer's rank");
    return wsync__ctl_send_text(r->fd, WSYNC_CTL_DONE, step, result, why, "the controller", err);
}

WSYNC_DEF const wsync_ctl_transfer *wsync_rank_transfers(const wsync_rank *r, uint32_t *n)
{
    if (n) *n = r ? r->assign.n_transfers : 0;
    return r ? r->assign.transfers : NULL;
}

WSYNC_DEF uint64_t wsync_rank_version(const wsync_rank *r)
{
    return r ? __atomic_load_n(&r->version, __ATOMIC_ACQUIRE) : 0;
}

WSYNC_DEF const volatile uint64_t *wsync_rank_version_word(const wsync_rank *r)
{
    return r ? &r->version : NULL;
}

WSYNC_DEF wsync_result wsync_rank_wait_version(wsync_rank *r, uint64_t step, int timeout_ms, wsync_error *err)
{
    struct timespec until;
    wsync_result res = WSYNC_OK;
    wsync__rerr_reset(err);
    if (!r || r->role != WSYNC_CTL_INFERENCE)
        return wsync__rfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "wait_version: an inference rank");
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms > 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->version >= step) break;
        if (r->aborted >= step) {
            res = wsync__rfail(err, WSYNC_ERR_IO, "%s: %s", r->me, r->why);
            break;
        }
        if (r->ended) {
            res = wsync__rfail(err, WSYNC_ERR_IO, "%s at version %llu: %s", r->me, (unsigned long long)r->version,
                               r->why);
            break;
        }
        if (timeout_ms == 0 ||
            (timeout_ms > 0 && pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT)) {
            res = wsync__rfail(err, WSYNC_ERR_LIMIT, "%s: still at version %llu after %d ms", r->me,
                               (unsigned long long)r->version, timeout_ms);
            break;
        }
        if (timeout_ms < 0) pthread_cond_wait(&r->cv, &r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return res;
}

WSYNC_DEF int wsync_rank_ended(wsync_rank *r, char *why, size_t cap)
{
    int e;
    if (!r) return 1;
    pthread_mutex_lock(&r->mu);
    e = r->ended;
    if (e && why && cap) {
        size_t k = strlen(r->why);
        if (k >= cap) k = cap - 1;
        memcpy(why, r->why, k);
        why[k] = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return e;
}

WSYNC_DEF void wsync_rank_close(wsync_rank *r)
{
    uint32_t i;
    if (!r) return;
    if (r->fd >= 0) shutdown(r->fd, SHUT_RDWR); /* wakes the thread */
    if (r->th_on) pthread_join(r->th, NULL);
    if (r->fd >= 0) close(r->fd);
    for (i = 0; r->rem && i < r->assign.n_targets; i++)
        if (r->rem[i]) r->f->close_remote(r->f->user, r->rem[i]);
    wsync__cfree(&r->a, r->rem);
    if (r->staging_mr) r->f->dereg(r->f->user, r->staging_mr);
    wsync__cfree(&r->a, r->staging);
    wsync__cfree(&r->a, r->tasks);
    wsync__cfree(&r->a, r->mr_addr);
    wsync_ctl_msg_free(&r->assign);
    wsync__cfree(&r->a, r->mrs);
    wsync__cfree(&r->a, r->mr_len);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    wsync__cfree(&r->a, r);
}

#else /* !WSYNC__RDMA_OK */

WSYNC_DEF wsync_result wsync_controller_open(const wsync_controller_options *opt, wsync_controller **out,
                                             wsync_error *err)
{
    (void)opt;
    if (out) *out = NULL;
    return wsync__rno(err, "the controller");
}
WSYNC_DEF unsigned wsync_controller_port(const wsync_controller *c)
{
    (void)c;
    return 0;
}
WSYNC_DEF wsync_result wsync_controller_accept(wsync_controller *c, wsync_error *err)
{
    (void)c;
    return wsync__rno(err, "the controller");
}
WSYNC_DEF void wsync_controller_plan_get(const wsync_controller *c, wsync_controller_plan *out)
{
    (void)c;
    if (out) memset(out, 0, sizeof *out);
}
WSYNC_DEF wsync_result wsync_controller_step(wsync_controller *c, uint64_t step, wsync_error *err)
{
    (void)c;
    (void)step;
    return wsync__rno(err, "the controller");
}
WSYNC_DEF wsync_result wsync_controller_go(wsync_controller *c, uint64_t step, wsync_error *err)
{
    (void)c;
    (void)step;
    return wsync__rno(err, "the controller");
}
WSYNC_DEF wsync_result wsync_controller_finish(wsync_controller *c, uint64_t step, wsync_error *err)
{
    (void)c;
    (void)step;
    return wsync__rno(err, "the controller");
}
WSYNC_DEF void wsync_controller_step_times(const wsync_controller *c, double *transfer_s, double *commit_s)
{
    (void)c;
    if (transfer_s) *transfer_s = 0;
    if (commit_s) *commit_s = 0;
}
WSYNC_DEF void wsync_controller_close(wsync_controller *c)
{
    (void)c;
}
WSYNC_DEF wsync_result wsync_rank_join(const wsync_rank_options *opt, wsync_rank **out, wsync_error *err)
{
    (void)opt;
    if (out) *out = NULL;
    return wsync__rno(err, "a rank");
}
WSYNC_DEF wsync_result wsync_rank_wait_go(wsync_rank *r, uint64_t *step, int *bye, int timeout_ms, wsync_error *err)
{
    (void)r;
    (void)step;
    (void)bye;
    (void)timeout_ms;
    return wsync__rno(err, "a rank");
}
WSYNC_DEF wsync_result wsync_rank_push(wsync_rank *r, wsync_error *err)
{
    (void)r;
    return wsync__rno(err, "a rank");
}
WSYNC_DEF wsync_result wsync_rank_push_some(wsync_rank *r, uint32_t first, uint32_t count, int flush,
                                            wsync_error *err)
{
    (void)r;
    (void)first;
    (void)count;
    (void)flush;
    return wsync__rno(err, "a rank");
}
WSYNC_DEF wsync_result wsync_rank_done(wsync_rank *r, uint64_t step, wsync_result result, const char *why,
                                       wsync_error *err)
{
    (void)r;
    (void)step;
    (void)result;
    (void)why;
    return wsync__rno(err, "a rank");
}
WSYNC_DEF const wsync_ctl_transfer *wsync_rank_transfers(const wsync_rank *r, uint32_t *n)
{
    (void)r;
    if (n) *n = 0;
    return NULL;
}
WSYNC_DEF void wsync_rank_push_stats(const wsync_rank *r, wsync_exec_stats *out)
{
    (void)r;
    if (out) memset(out, 0, sizeof *out);
}
WSYNC_DEF uint64_t wsync_rank_version(const wsync_rank *r)
{
    (void)r;
    return 0;
}
WSYNC_DEF const volatile uint64_t *wsync_rank_version_word(const wsync_rank *r)
{
    (void)r;
    return NULL;
}
WSYNC_DEF wsync_result wsync_rank_wait_version(wsync_rank *r, uint64_t step, int timeout_ms, wsync_error *err)
{
    (void)r;
    (void)step;
    (void)timeout_ms;
    return wsync__rno(err, "a rank");
}
WSYNC_DEF int wsync_rank_ended(wsync_rank *r, char *why, size_t cap)
{
    (void)r;
    if (why && cap) snprintf(why, cap, "%s", "not built with the controller");
    return 1;
}
WSYNC_DEF void wsync_rank_close(wsync_rank *r)
{
    (void)r;
}

#endif /* WSYNC__RDMA_OK */

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_RDMA_IMPLEMENTATION (controller) */
