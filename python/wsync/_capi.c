/* _capi.c: the C side of wsync's Python binding, built as build/libwsync.so
   by `make python`, or into the package as wsync/libwsync.so by
   `pip install ./python` (python/setup.py).

   wsync.h's structs are large and change between versions; Python must
   never mirror them. This file compiles the headers (every wsync_ function
   static: the library exports only what is below) and exports a small, flat
   API of its own, made for ctypes: opaque handles, fixed-width integers,
   pointers, C strings, one callback type (wspy_changes_fn), and plain
   structs of 64-bit fields declared here (wspy_error and the stats), whose
   sizes Python checks at load time through wspy_sizeof. wspy_abi_version changes whenever any of it does.

   Tensors cross as parallel arrays: names (C strings), dtypes (wsync_dtype
   numbers), ranks, the shapes of all tensors concatenated, and data
   pointers. Nothing here keeps global mutable state: two threads may use two
   handles at once; one handle belongs to one thread at a time (the
   subscriber's ready/step/status and the mirror's steps, digest and status
   excepted, as in wsync.h). Every entry point
   checks its pointers and sizes and reports through wspy_error; none aborts
   on bad input. */
#define _POSIX_C_SOURCE 200809L
#define WSYNC_STATIC
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
/* URL stores need libcurl: the Makefile defines WSPY_HTTP=1 and links
   -lcurl when its development files are there. */
#if !defined(WSPY_HTTP) || !WSPY_HTTP
#define WSYNC_HTTP_NO_CURL
#endif
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__) || defined(__clang__)
#define WSPY_API __attribute__((visibility("default")))
#else
#define WSPY_API
#endif

/* Bump on any change to a signature or struct below. */
#define WSPY_ABI_VERSION 7

typedef struct wspy_error {
    int64_t code;          /* wsync_result; 0 ok */
    uint64_t offset;       /* byte offset in the input; UINT64_MAX if none */
    char tensor[128];
    char message[512];
} wspy_error;

typedef struct wspy_publish_stats {
    uint64_t step, wrote_anchor, wrote_delta, base_step;
    uint64_t elements, changed, delta_bytes, anchor_bytes;
    uint64_t deleted, retention_failed, state;
    double encode_seconds, put_seconds;
    double seconds;        /* wall time of wsync_publish itself, timed here */
} wspy_publish_stats;

typedef struct wspy_sync_stats {
    uint64_t had_step, from_step, step, head_step, verified;
    uint64_t anchors, deltas, rejected, bytes_fetched;
    double seconds;        /* wall time of the sync (or apply_ready) itself */
    char path[160];
} wspy_sync_stats;

typedef struct wspy_delta_stats {
    uint64_t encoding, has_steps, base_step, step, has_base;
    uint64_t tensors, changed_tensors, elements, changed, bytes;
    double seconds;        /* wall time of the encode or apply itself */
} wspy_delta_stats;

typedef struct wspy_prefetch_status {
    uint64_t running, polls, head_known, head_step, ready, ready_step;
    uint64_t caught_up, refused, interval_ms;
    double last_error_time;
    wspy_error last_error; /* code 0: no failure */
} wspy_prefetch_status;

/* One chunk of a tensor's changes (wsync_changes, flattened): tensor index
   (the order given to wspy_mirror_open), whole (1: values are all of the
   tensor's bytes, positions NULL, count its elements), count, positions
   (count ascending uint64 flat element positions), values (count * width
   bytes), width (bytes per element), last (the tensor's last chunk). The
   pointers are valid only during the call. A nonzero return stops the take
   with WSYNC_ERR_SINK (wsync_mirror_take: the next take hands again). */
typedef int32_t (*wspy_changes_fn)(void *user, uint64_t index, int32_t whole, uint64_t count,
                                   const uint64_t *positions, const void *values, uint32_t width, int32_t last);

typedef struct wspy_mirror_stats {
    uint64_t had_step, from_step, has_step, step, handed, busy;
    uint64_t steps, tensors, whole_tensors, positions, bytes, chunks, record_bytes;
    uint64_t anchors, deltas, bytes_fetched; /* what the mirror applied since the last take, fetched */
    double pause_seconds;  /* time inside wsync_mirror_take, callback included */
    double wait_seconds;   /* of which waiting for an apply to finish */
} wspy_mirror_stats;

/* An engine map's take (wsync_engine_stats): the mirror's take, then what
   this rank's parameters received. */
typedef struct wspy_engine_stats {
    wspy_mirror_stats mirror;
    uint64_t params, positions, bytes, calls;
} wspy_engine_stats;

/* One parameter's changes (wsync_param_changes, flattened): the parameter's
   index (the order given to wspy_engine_open), count, positions (ascending
   uint64 flat positions in the parameter), values (count * width bytes).
   Valid only during the call; nonzero stops the take (WSYNC_ERR_SINK).
   Each take that hands changes ends with the end call (index UINT64_MAX,
   count 0, positions and values NULL: WSYNC_ENGINE_END_CALL, which
   wspy_engine_open always sets) before the engine's step is recorded: a
   sink that deferred its writes does them there, and refuses the whole
   take (handed again at the next one) with a nonzero return. */
typedef int32_t (*wspy_param_fn)(void *user, uint64_t index, uint64_t count, const uint64_t *positions,
                                 const void *values, uint32_t width);

/* A staged parameter's changes in the binding's staging buffer (one per
   parameter per take): index, then byte offsets of its count positions
   (int64, ascending) and of its values (count * width bytes, at an 8-byte
   boundary). */
typedef struct wspy_seg {
    uint64_t index, positions, values, count;
} wspy_seg;

/* The binding's staging for wspy_engine_take: *buf (*cap bytes) holds
   *used bytes, the segs' parameters. Called (need > 0) when a parameter's
   need bytes do not fit: the binding uploads and scatters the segs and
   sets *used 0, or keeps them (a larger buffer with the first *used bytes
   copied), and leaves room for need bytes in *buf and *cap, or, for more
   than its limit, an empty buffer of the limit's size: the take then
   stages that parameter in pieces, a segment each (and a scatter each);
   and (need 0) at the take's end: uploads and scatters the segs. Nonzero
   refuses the take (WSYNC_ERR_SINK; the next take hands it again, whole). */
typedef int32_t (*wspy_stage_fn)(void *user, const wspy_seg *segs, uint64_t nseg, uint64_t need, uint8_t **buf,
                                 uint64_t *cap, uint64_t *used);

/* A chain's HEAD (wsync_chain_info): has_head 0 when the chain was read from
   a listing (no HEAD: no state digest). */
typedef struct wspy_head {
    uint64_t has_head, head_step, head_state, anchor_step;
} wspy_head;

/* One sync of a model directory (wsync_dir_sync_stats, flattened): the
   subscriber's sync, then the version: had_step/from_step (PATH's before),
   has_step/step (PATH's now), switched (a new version written and PATH
   switched to it), unchecked (switched with no HEAD to check it),
   write_failed (the step was reached and writing its version failed),
   relayout/relayout_step (rebuilt from that anchor's tensors), version (the
   name PATH links to, beside it; "" none). */
typedef struct wspy_dir_stats {
    uint64_t had_step, from_step, has_step, step, switched, unchecked, write_failed, relayout, relayout_step;
    uint64_t head_step, verified, anchors, deltas, rejected, bytes_fetched;
    double seconds;        /* wall time of the sync itself, writing included */
    double write_seconds;  /* of which writing the version */
    char version[256];
} wspy_dir_stats;

/* What wspy_publish_dir read from the directory (wsync_dir_checkpoint):
   its shards, tensors, carried files and tensor bytes, whether it claims a
   step (and which), whether an include pattern matched WSYNC_DIR_STEP_FILE
   (skipped, never published). */
typedef struct wspy_dir_info {
    uint64_t shards, tensors, files, bytes, has_step, step, skipped_step_file;
} wspy_dir_info;

/* ---- small helpers ---- */

static double wspy__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void wspy__copy(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, src, n);
    dst[n] = 0;
}

static void wspy__from(wspy_error *out, const wsync_error *e)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    out->code = (int64_t)e->code;
    out->offset = e->offset;
    wspy__copy(out->tensor, sizeof out->tensor, e->tensor);
    wspy__copy(out->message, sizeof out->message, e->message);
}

static void wspy__reset(wspy_error *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    out->offset = UINT64_MAX;
}

/* Fails with `code` and a formatted message (no tensor, no offset). */
static int32_t wspy__fail(wspy_error *out, wsync_result code, const char *fmt, ...)
{
    va_list ap;
    if (out) {
        memset(out, 0, sizeof *out);
        out->code = (int64_t)code;
        out->offset = UINT64_MAX;
        va_start(ap, fmt);
        vsnprintf(out->message, sizeof out->message, fmt, ap);
        va_end(ap);
    }
    return (int32_t)code;
}

static int32_t wspy__ret(wsync_result r, const wsync_error *e, wspy_error *out)
{
    if (r != WSYNC_OK) wspy__from(out, e);
    else wspy__reset(out);
    return (int32_t)r;
}

/* 0 for a step the library takes: at most WSYNC_STEP_MAX, or, with latest,
   WSYNC_STEP_LATEST (HEAD's); else the failure. */
static int32_t wspy__check_step(uint64_t step, int latest, wspy_error *err)
{
    if (step <= WSYNC_STEP_MAX || (latest && step == WSYNC_STEP_LATEST)) return 0;
    return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "step above %llu", (unsigned long long)WSYNC_STEP_MAX);
}

/* ---- tensors as parallel arrays ---- */

typedef struct wspy__tset {
    wsync_tensor *t;
    size_t n;
    void *block;           /* copies of names and shapes (when owned) */
} wspy__tset;

static void wspy__tset_free(wspy__tset *s)
{
    free(s->t);
    free(s->block);
    memset(s, 0, sizeof *s);
}

/* Builds n wsync_tensors. With own, names and shapes are copied (they must
   outlive a subscriber); else they point into the caller's arrays. */
static int32_t wspy__tset_make(wspy__tset *s, size_t n, const char *const *names, const int32_t *dtypes,
                               const uint32_t *ranks, const uint64_t *shapes, void *const *datas, int own,
                               wspy_error *out)
{
    size_t i, dims = 0, bytes = 0, at = 0;
    uint64_t *shape_copy = NULL;
    char *name_copy = NULL;
    wsync_error e;
    memset(s, 0, sizeof *s);
    if (n && (!names || !dtypes || !ranks || !datas))
        return wspy__fail(out, WSYNC_ERR_INVALID_ARGUMENT, "tensor arrays missing");
    if (n > (SIZE_MAX / sizeof(wsync_tensor)) - 1)
        return wspy__fail(out, WSYNC_ERR_OVERFLOW, "%zu tensors", n);
    for (i = 0; i < n; i++) {
        if (!names[i]) return wspy__fail(out, WSYNC_ERR_INVALID_ARGUMENT, "tensor %zu has no name", i);
        if (ranks[i] > WSYNC_ST_DEFAULT_MAX_RANK)
            return wspy__fail(out, WSYNC_ERR_RANK_TOO_LARGE, "tensor '%.100s': rank %u", names[i],
                              (unsigned)ranks[i]);
        dims += ranks[i];
        if (own) bytes += strlen(names[i]) + 1;
    }
    if (dims && !shapes) return wspy__fail(out, WSYNC_ERR_INVALID_ARGUMENT, "tensor shapes missing");
    s->t = (wsync_tensor *)calloc(n ? n : 1, sizeof *s->t);
    if (!s->t) return wspy__fail(out, WSYNC_ERR_OUT_OF_MEMORY, "%zu tensors", n);
    if (own) {
        s->block = malloc(dims * sizeof(uint64_t) + bytes + 1);
        if (!s->block) {
            wspy__tset_free(s);
            return wspy__fail(out, WSYNC_ERR_OUT_OF_MEMORY, "tensor names");
        }
        shape_copy = (uint64_t *)s->block;
        if (dims) memcpy(shape_copy, shapes, dims * sizeof(uint64_t));
        name_copy = (char *)(shape_copy + dims);
    }
    s->n = n;
    for (i = 0; i < n; i++) {
        const char *name = names[i];
        const uint64_t *shape = ranks[i] ? (own ? shape_copy : shapes) + at : NULL;
        wsync_result r;
        if (own) {
            size_t len = strlen(names[i]) + 1;
            memcpy(name_copy, names[i], len);
            name = name_copy;
            name_copy += len;
        }
        r = wsync_tensor_dense(&s->t[i], name, (wsync_dtype)dtypes[i], ranks[i], shape, datas[i], &e);
        if (r != WSYNC_OK) {
            wspy__tset_free(s);
            return wspy__ret(r, &e, out);
        }
        at += ranks[i];
    }
    return 0;
}

/* ---- version, names ---- */

WSPY_API int32_t wspy_abi_version(void) { return WSPY_ABI_VERSION; }
WSPY_API const char *wspy_version(void) { return WSYNC_VERSION_STRING; }
WSPY_API int32_t wspy_has_http(void)
{
#if defined(WSPY_HTTP) && WSPY_HTTP
    return 1;
#else
    return 0;
#endif
}

/* Sizes of the structs above, for the binding's check: 0 error,
   1 publish stats, 2 sync stats, 3 delta stats, 4 prefetch status,
   5 mirror stats, 6 head, 7 engine stats, 8 directory sync stats,
   9 directory publish info, 10 an engine take's staged segment. */
WSPY_API uint64_t wspy_sizeof(int32_t what)
{
    switch (what) {
    case 0: return sizeof(wspy_error);
    case 1: return sizeof(wspy_publish_stats);
    case 2: return sizeof(wspy_sync_stats);
    case 3: return sizeof(wspy_delta_stats);
    case 4: return sizeof(wspy_prefetch_status);
    case 5: return sizeof(wspy_mirror_stats);
    case 6: return sizeof(wspy_head);
    case 7: return sizeof(wspy_engine_stats);
    case 8: return sizeof(wspy_dir_stats);
    case 9: return sizeof(wspy_dir_info);
    case 10: return sizeof(wspy_seg);
    default: return 0;
    }
}

/* ---- stores' flags (the binding's own) ---- */

#define WSPY_STORE_MUST_EXIST 1u /* a reader's directory store: never created (WSYNC_STORE_NO_CREATE) */
#define WSPY_STORE_NO_FSYNC 2u   /* directory store: skip fsync (tests) */
#define WSPY_STORE_INSECURE 4u   /* https: do not verify certificates (tests) */

/* The flags and limits the binding passes or checks, by name, so that
   Python reads them from the library it loaded instead of copying them:
   1 and *value set, 0 for a name not here. */
WSPY_API int32_t wspy_constant(const char *name, uint64_t *value)
{
#define WSPY__K(k) {#k, (uint64_t)(k)}
    static const struct {
        const char *name;
        uint64_t value;
    } k[] = {
        WSPY__K(WSYNC_CHAIN_VERIFY_STATE), WSPY__K(WSYNC_CHAIN_KEEP_F32), WSPY__K(WSYNC_CHAIN_NEW_CHAIN),
        WSPY__K(WSYNC_CHAIN_PARTIAL), WSPY__K(WSYNC_CHAIN_FOLLOW_RESTART),
        WSPY__K(WSYNC_DELTA_SKIP_BASE_DIGEST), WSPY__K(WSYNC_DELTA_SKIP_RESULT_DIGEST),
        WSPY__K(WSYNC_DELTA_RANGE_CODER), WSPY__K(WSYNC_DELTA_MAX_BLOCK_LOG2),
        WSPY__K(WSYNC_STEP_MAX), WSPY__K(WSYNC_STEP_LATEST),
        WSPY__K(WSPY_STORE_MUST_EXIST), WSPY__K(WSPY_STORE_NO_FSYNC), WSPY__K(WSPY_STORE_INSECURE),
        WSPY__K(WSYNC_ENCODING_PACKED), WSPY__K(WSYNC_ENCODING_TRL_V3), WSPY__K(WSYNC_DTYPE_COUNT),
        WSPY__K(WSYNC_RESULT_COUNT), WSPY__K(WSYNC_ST_DEFAULT_MAX_RANK),
        WSPY__K(WSYNC_ED25519_SEED_SIZE), WSPY__K(WSYNC_ED25519_PUBLIC_SIZE),
        WSPY__K(WSYNC_ED25519_SECRET_SIZE), WSPY__K(WSYNC_CHAIN_ID_SIZE),
    };
#undef WSPY__K
    size_t i;
    if (!name || !value) return 0;
    for (i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(k[i].name, name) == 0) {
            *value = k[i].value;
            return 1;
        }
    return 0;
}

/* "WSYNC_ERR_CORRUPT"; "WSYNC_ERR_UNKNOWN" for a code out of range. */
WSPY_API const char *wspy_result_name(int64_t code)
{
    if (code < 0 || code >= (int64_t)WSYNC_RESULT_COUNT) return "WSYNC_ERR_UNKNOWN";
    return wsync_result_name((wsync_result)code);
}

WSPY_API const char *wspy_result_str(int64_t code)
{
    if (code < 0 || code >= (int64_t)WSYNC_RESULT_COUNT) return "unknown result";
    return wsync_result_str((wsync_result)code);
}

WSPY_API const char *wspy_dtype_name(int32_t dtype)
{
    if (dtype <= 0 || dtype >= (int32_t)WSYNC_DTYPE_COUNT) return "INVALID";
    return wsync_dtype_name((wsync_dtype)dtype);
}

/* 0 when unknown. */
WSPY_API int32_t wspy_dtype_from_name(const char *name)
{
    return name ? (int32_t)wsync_dtype_from_name(name, strlen(name)) : 0;
}

WSPY_API uint32_t wspy_dtype_bits(int32_t dtype)
{
    if (dtype <= 0 || dtype >= (int32_t)WSYNC_DTYPE_COUNT) return 0;
    return wsync_dtype_bits((wsync_dtype)dtype);
}

/* 0 when unknown. */
WSPY_API int32_t wspy_encoding_from_name(const char *name)
{
    return name ? (int32_t)wsync_encoding_from_name(name) : 0;
}

WSPY_API const char *wspy_encoding_name(int32_t e)
{
    if (e < (int32_t)WSYNC_ENCODING_PACKED || e > (int32_t)WSYNC_ENCODING_TRL_V3) return "";
    return wsync_encoding_name((wsync_encoding)e);
}

/* Frees what wspy_delta_encode returned. */
WSPY_API void wspy_free(void *p) { free(p); }

/* ---- digests and the bitwise diff ---- */

WSPY_API uint64_t wspy_digest(const void *bytes, uint64_t len)
{
    if (!bytes && len) return 0;
    if (len > (uint64_t)SIZE_MAX) return 0;
    return wsync_digest(bytes, (size_t)len);
}

/* Positions (ascending) where n elements of `width` bytes differ, into pos
   (room for n). Returns the count, or UINT64_MAX for a bad argument (width
   not 1, 2, 4 or 8; n above 2^32; a NULL buffer). */
WSPY_API uint64_t wspy_diff_positions(const void *a, const void *b, uint64_t n, uint32_t width, uint32_t *pos)
{
    if (width != 1 && width != 2 && width != 4 && width != 8) return UINT64_MAX;
    if (n > ((uint64_t)1 << 32) || n > (uint64_t)SIZE_MAX) return UINT64_MAX;
    if (n && (!a || !b || !pos)) return UINT64_MAX;
    return (uint64_t)wsync_diff(a, b, (size_t)n, width, pos);
}

WSPY_API int32_t wspy_state_digest(uint64_t n, const char *const *names, const int32_t *dtypes,
                                   const uint32_t *ranks, const uint64_t *shapes, void *const *datas,
                                   uint32_t threads, uint64_t *out, wspy_error *err)
{
    wspy__tset s;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output");
    if ((rc = wspy__tset_make(&s, (size_t)n, names, dtypes, ranks, shapes, datas, 0, err)) != 0) return rc;
    r = wsync_state_digest(s.t, s.n, threads, out, &e);
    wspy__tset_free(&s);
    return wspy__ret(r, &e, err);
}

/* ---- signing keys (wsync.h: "Signed chains") ---- */

/* sec (64 bytes) from `len` bytes of key: a 32-byte seed (its key pair
   made here) or a 64-byte secret key (the seed, then its public key, as
   wsync_ed25519_keypair makes it), whose second half must be the public
   key of its first: halves that disagree are a damaged or mixed-up key. */
WSPY_API int32_t wspy_sign_key(const uint8_t *key, uint64_t len, uint8_t *sec, wspy_error *err)
{
    uint8_t pub[WSYNC_ED25519_PUBLIC_SIZE];
    if (!key || !sec) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "sign_key: no key");
    if (len == WSYNC_ED25519_SEED_SIZE) {
        wsync_ed25519_keypair(key, pub, sec);
    } else if (len == WSYNC_ED25519_SECRET_SIZE) {
        wsync_ed25519_keypair(key, pub, NULL);
        if (memcmp(pub, key + WSYNC_ED25519_SEED_SIZE, sizeof pub) != 0)
            return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT,
                              "sign_key: its last 32 bytes are not the public key of its first 32 (a "
                              "64-byte secret key is the seed, then its public key)");
        memcpy(sec, key, WSYNC_ED25519_SECRET_SIZE);
    } else {
        return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT,
                          "sign_key: %llu bytes; a 64-byte secret key or a 32-byte seed",
                          (unsigned long long)len);
    }
    wspy__reset(err);
    return 0;
}

/* The public key (32 bytes) of a secret key (64, as wspy_sign_key gives it). */
WSPY_API void wspy_public_key(const uint8_t *sec, uint8_t *pub)
{
    if (sec && pub) wsync_ed25519_keypair(sec, pub, NULL);
}

/* Key files (wsync.h: wsync_keygen, wsync_key_read_secret,
   wsync_key_read_public): NAME.key (mode 0600) and NAME.pub, never
   replaced; a secret key file others may read is refused. */
WSPY_API int32_t wspy_keygen(const char *name, wspy_error *err)
{
    wsync_error e;
    if (!name || !*name) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "keygen: no name");
    return wspy__ret(wsync_keygen(name, &e), &e, err);
}

WSPY_API int32_t wspy_key_read_secret(const char *path, uint8_t *sec, wspy_error *err)
{
    wsync_error e;
    if (!path || !*path || !sec) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "sign_key: no path");
    return wspy__ret(wsync_key_read_secret(path, sec, &e), &e, err);
}

WSPY_API int32_t wspy_key_read_public(const char *path, uint8_t *pub, wspy_error *err)
{
    wsync_error e;
    if (!path || !*path || !pub) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "verify_key: no path");
    return wspy__ret(wsync_key_read_public(path, pub, &e), &e, err);
}

/* ---- stores ---- */

/* A directory, http(s)://host[:port]/prefix, or s3://bucket/prefix (with
   AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
   AWS_SESSION_TOKEN from the environment), opened by wsync_store_open_url
   as the CLI opens it. A reader's directory store is never created: opening
   a missing root succeeds and every call is WSYNC_ERR_NO_STORE until it
   exists (an engine may start before its trainer). */
static int32_t wspy__store_open(const char *spec, uint32_t flags, wsync_store *out, wspy_error *err)
{
    wsync_store_url_options o;
    wsync_error e;
    wsync_result r;
    memset(out, 0, sizeof *out);
    if (!spec || !*spec) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no store given");
    memset(&o, 0, sizeof o);
    if (flags & WSPY_STORE_MUST_EXIST) o.flags |= WSYNC_STORE_NO_CREATE;
    o.no_fsync = (flags & WSPY_STORE_NO_FSYNC) ? 1 : 0;
    o.http.insecure = (flags & WSPY_STORE_INSECURE) ? 1 : 0;
    r = wsync_store_open_url(spec, &o, out, &e);
    if (r != WSYNC_OK) memset(out, 0, sizeof *out);
    return wspy__ret(r, &e, err);
}

/* sign_key (64 bytes) and verify_key (32) may be NULL; wsync copies them at open. */
static void wspy__chain_opt(wsync_chain_options *o, const char *prefix, int32_t encoding, uint32_t anchor_every,
                            double anchor_fraction, uint32_t retain, uint32_t threads, uint32_t flags,
                            const uint8_t *sign_key, const uint8_t *verify_key)
{
    memset(o, 0, sizeof *o);
    o->sign_key = sign_key;
    o->verify_key = verify_key;
    o->prefix = prefix;
    o->encoding = (wsync_encoding)encoding;
    o->anchor_every = anchor_every;
    o->anchor_fraction = anchor_fraction;
    o->retain = retain;
    o->threads = threads;
    o->flags = flags;
}

/* What every handle that opens a store does first: its own copy of prefix
   (NULL when none or empty: the handle's options point at it) and the
   store opened. 0, or the error with nothing left (*prefix_out NULL). */
static int32_t wspy__prefix_store(const char *store, uint32_t store_flags, const char *prefix, char **prefix_out,
                                  wsync_store *st, wspy_error *err)
{
    int32_t rc;
    *prefix_out = NULL;
    if (prefix && *prefix) {
        size_t len = strlen(prefix) + 1;
        if (!(*prefix_out = (char *)malloc(len))) return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "prefix");
        memcpy(*prefix_out, prefix, len);
    }
    if ((rc = wspy__store_open(store, store_flags, st, err)) != 0) {
        free(*prefix_out);
        *prefix_out = NULL;
    }
    return rc;
}

/* ---- publisher ---- */

typedef struct wspy_publisher {
    wsync_store store;
    wsync_publisher *p;
    char *prefix;          /* for wspy_publisher_head_state */
} wspy_publisher;

WSPY_API void wspy_publisher_close(wspy_publisher *h)
{
    if (!h) return;
    if (h->p) wsync_publisher_close(h->p);
    wsync_store_close(&h->store);
    free(h->prefix);
    free(h);
}

/* flags: WSYNC_CHAIN_* (2 keep F32, 4 new chain); encoding 0: packed;
   sign_key: NULL, or the 64-byte secret key that signs every HEAD. */
WSPY_API int32_t wspy_publisher_open(const char *store, uint32_t store_flags, const char *prefix, int32_t encoding,
                                     uint32_t anchor_every, double anchor_fraction, uint32_t retain,
                                     uint32_t threads, uint32_t flags, const uint8_t *sign_key, wspy_publisher **out,
                                     wspy_error *err)
{
    wspy_publisher *h;
    wsync_chain_options o;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output handle");
    *out = NULL;
    if (encoding < 0 || encoding > (int32_t)WSYNC_ENCODING_TRL_V3)
        return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "encoding %d", (int)encoding);
    if (!(anchor_fraction >= 0.0 && anchor_fraction <= 1e9))
        return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "anchor_fraction out of range");
    h = (wspy_publisher *)calloc(1, sizeof *h);
    if (!h) return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "publisher");
    if ((rc = wspy__prefix_store(store, store_flags, prefix, &h->prefix, &h->store, err)) != 0) {
        free(h);
        return rc;
    }
    wspy__chain_opt(&o, h->prefix, encoding, anchor_every, anchor_fraction, retain, threads, flags, sign_key, NULL);
    r = wsync_publisher_open(&h->store, &o, &h->p, &e);
    if (r != WSYNC_OK) {
        h->p = NULL;
        wspy_publisher_close(h);
        return wspy__ret(r, &e, err);
    }
    *out = h;
    return wspy__ret(r, &e, err);
}

static void wspy__pub_stats(wspy_publish_stats *out, const wsync_publish_stats *st, double seconds)
{
    if (!out) return;
    out->seconds = seconds;
    out->step = st->step;
    out->wrote_anchor = (uint64_t)st->wrote_anchor;
    out->wrote_delta = (uint64_t)st->wrote_delta;
    out->base_step = st->base_step;
    out->elements = st->elements;
    out->changed = st->changed;
    out->delta_bytes = st->delta_bytes;
    out->anchor_bytes = st->anchor_bytes;
    out->deleted = st->deleted;
    out->retention_failed = st->retention_failed;
    out->state = st->state;
    out->encode_seconds = st->encode_seconds;
    out->put_seconds = st->put_seconds;
}

WSPY_API int32_t wspy_publish(wspy_publisher *h, uint64_t step, uint64_t n, const char *const *names,
                              const int32_t *dtypes, const uint32_t *ranks, const uint64_t *shapes,
                              void *const *datas, wspy_publish_stats *stats, wspy_error *err)
{
    wspy__tset s;
    wsync_publish_stats st;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    double t0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!h || !h->p) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "publisher is closed");
    if ((rc = wspy__check_step(step, 0, err)) != 0) return rc;
    if ((rc = wspy__tset_make(&s, (size_t)n, names, dtypes, ranks, shapes, datas, 0, err)) != 0) return rc;
    memset(&st, 0, sizeof st);
    t0 = wspy__now();
    r = wsync_publish(h->p, step, s.t, s.n, &st, &e);
    wspy__pub_stats(stats, &st, wspy__now() - t0);
    wspy__tset_free(&s);
    return wspy__ret(r, &e, err);
}

/* 1 and *step when the chain has a HEAD step; 0 otherwise (or closed). */
WSPY_API int32_t wspy_publisher_head(const wspy_publisher *h, uint64_t *step)
{
    uint64_t s = 0;
    if (!h || !h->p) return 0;
    if (!wsync_publisher_head(h->p, &s)) return 0;
    if (step) *step = s;
    return 1;
}

/* HEAD of the chain under prefix in an open store (wsync_chain_read);
   verify_key: NULL, or the public key HEAD must be signed by. */
static int32_t wspy__head(const wsync_store *store, const char *prefix, const uint8_t *verify_key, wspy_head *out,
                          wspy_error *err)
{
    wsync_chain_options o;
    wsync_chain_info c;
    wsync_error e;
    wsync_result r;
    wspy__chain_opt(&o, prefix, 0, 0, 0.0, 0, 0, 0, NULL, verify_key);
    memset(&c, 0, sizeof c);
    r = wsync_chain_read(store, &o, &c, &e);
    if (r != WSYNC_OK) return wspy__ret(r, &e, err);
    out->has_head = (uint64_t)(c.has_head != 0);
    out->head_step = c.head_step;
    out->head_state = c.head_state;
    out->anchor_step = c.anchor_step;
    wsync_chain_info_free(&c);
    wspy__reset(err);
    return 0;
}

/* The publisher's chain's HEAD, read from its store now. */
WSPY_API int32_t wspy_publisher_head_state(wspy_publisher *h, wspy_head *out, wspy_error *err)
{
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output");
    memset(out, 0, sizeof *out);
    if (!h || !h->p) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "publisher is closed");
    return wspy__head(&h->store, h->prefix, NULL, out, err);
}

/* A store's HEAD (store_flags: as wspy_publisher_open's; a reader's);
   verify_key: NULL, or the 32-byte public key HEAD must be signed by. */
WSPY_API int32_t wspy_chain_head(const char *store, uint32_t store_flags, const char *prefix,
                                 const uint8_t *verify_key, wspy_head *out, wspy_error *err)
{
    wsync_store st;
    int32_t rc;
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output");
    memset(out, 0, sizeof *out);
    if ((rc = wspy__store_open(store, store_flags, &st, err)) != 0) return rc;
    rc = wspy__head(&st, prefix, verify_key, out, err);
    wsync_store_close(&st);
    return rc;
}

/* ---- subscriber ---- */

typedef struct wspy_subscriber {
    wsync_store store;
    wsync_subscriber *s;
    wspy__tset targets;    /* names and shapes copied; data stay the caller's */
    char *prefix;
} wspy_subscriber;

WSPY_API void wspy_subscriber_close(wspy_subscriber *h)
{
    if (!h) return;
    if (h->s) wsync_subscriber_close(h->s);
    wsync_store_close(&h->store);
    wspy__tset_free(&h->targets);
    free(h->prefix);
    free(h);
}

/* The targets' memory stays the caller's and must outlive the handle.
   flags: WSYNC_CHAIN_* (verify state, partial, follow restart); verify_key:
   NULL, or the publisher's 32-byte public key (a signed chain). */
WSPY_API int32_t wspy_subscriber_open(const char *store, uint32_t store_flags, const char *prefix,
                                      uint32_t threads, uint32_t flags, const uint8_t *verify_key, uint64_t n,
                                      const char *const *names,
                                      const int32_t *dtypes, const uint32_t *ranks, const uint64_t *shapes,
                                      void *const *datas, wspy_subscriber **out, wspy_error *err)
{
    wspy_subscriber *h;
    wsync_chain_options o;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output handle");
    *out = NULL;
    h = (wspy_subscriber *)calloc(1, sizeof *h);
    if (!h) return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "subscriber");
    if ((rc = wspy__tset_make(&h->targets, (size_t)n, names, dtypes, ranks, shapes, datas, 1, err)) != 0) {
        free(h);
        return rc;
    }
    if ((rc = wspy__prefix_store(store, store_flags, prefix, &h->prefix, &h->store, err)) != 0) {
        wspy__tset_free(&h->targets);
        free(h);
        return rc;
    }
    wspy__chain_opt(&o, h->prefix, 0, 0, 0.0, 0, threads, flags, NULL, verify_key);
    r = wsync_subscriber_open(&h->store, h->targets.t, h->targets.n, &o, &h->s, &e);
    if (r != WSYNC_OK) {
        h->s = NULL;
        wspy_subscriber_close(h);
        return wspy__ret(r, &e, err);
    }
    *out = h;
    return wspy__ret(r, &e, err);
}

static void wspy__sync_stats(wspy_sync_stats *out, const wsync_sync_stats *st, double seconds)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    out->had_step = (uint64_t)st->had_step;
    out->from_step = st->from_step;
    out->step = st->step;
    out->head_step = st->head_step;
    out->verified = (uint64_t)st->verified;
    out->anchors = st->anchors;
    out->deltas = st->deltas;
    out->rejected = st->rejected;
    out->bytes_fetched = st->bytes_fetched;
    out->seconds = seconds;
    wspy__copy(out->path, sizeof out->path, st->path);
}

/* step UINT64_MAX: HEAD's. */
WSPY_API int32_t wspy_subscriber_sync(wspy_subscriber *h, uint64_t step, wspy_sync_stats *stats,
                                      wspy_error *err)
{
    wsync_sync_stats st;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    double t0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!h || !h->s) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "subscriber is closed");
    if ((rc = wspy__check_step(step, 1, err)) != 0) return rc;
    memset(&st, 0, sizeof st);
    t0 = wspy__now();
    r = wsync_subscriber_sync(h->s, step, &st, &e);
    wspy__sync_stats(stats, &st, wspy__now() - t0);
    return wspy__ret(r, &e, err);
}

WSPY_API int32_t wspy_subscriber_step(const wspy_subscriber *h, uint64_t *step)
{
    uint64_t s = 0;
    if (!h || !h->s) return 0;
    if (!wsync_subscriber_step(h->s, &s)) return 0;
    if (step) *step = s;
    return 1;
}

WSPY_API int32_t wspy_subscriber_set_step(wspy_subscriber *h, uint64_t step, wspy_error *err)
{
    int32_t rc;
    if (!h || !h->s) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "subscriber is closed");
    if ((rc = wspy__check_step(step, 0, err)) != 0) return rc;
    wsync_subscriber_set_step(h->s, step);
    wspy__reset(err);
    return 0;
}

WSPY_API int32_t wspy_subscriber_start(wspy_subscriber *h, uint32_t interval_ms, wspy_error *err)
{
    wsync_error e;
    wsync_result r;
    if (!h || !h->s) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "subscriber is closed");
    r = wsync_subscriber_start(h->s, interval_ms, &e);
    return wspy__ret(r, &e, err);
}

WSPY_API int32_t wspy_subscriber_ready(wspy_subscriber *h, uint64_t *step)
{
    uint64_t s = 0;
    if (!h || !h->s) return 0;
    if (!wsync_subscriber_ready(h->s, &s)) return 0;
    if (step) *step = s;
    return 1;
}

WSPY_API int32_t wspy_subscriber_apply_ready(wspy_subscriber *h, wspy_sync_stats *stats, wspy_error *err)
{
    wsync_sync_stats st;
    wsync_error e;
    wsync_result r;
    double t0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!h || !h->s) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "subscriber is closed");
    memset(&st, 0, sizeof st);
    t0 = wspy__now();
    r = wsync_subscriber_apply_ready(h->s, &st, &e);
    wspy__sync_stats(stats, &st, wspy__now() - t0);
    return wspy__ret(r, &e, err);
}

/* The prefetch status of s, a handle's subscriber (NULL: the handle, named
   by what, is closed). */
static int32_t wspy__prefetch_status(wsync_subscriber *s, const char *what, wspy_prefetch_status *out,
                                     wspy_error *err)
{
    wsync_prefetch_status st;
    wsync_result r;
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output");
    memset(out, 0, sizeof *out);
    out->last_error.offset = UINT64_MAX;
    if (!s) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s is closed", what);
    memset(&st, 0, sizeof st);
    r = wsync_subscriber_prefetch_status(s, &st);
    if (r != WSYNC_OK) return wspy__fail(err, r, "prefetch status");
    out->running = (uint64_t)st.running;
    out->polls = st.polls;
    out->head_known = (uint64_t)st.head_known;
    out->head_step = st.head_step;
    out->ready = (uint64_t)st.ready;
    out->ready_step = st.ready_step;
    out->caught_up = (uint64_t)st.caught_up;
    out->refused = st.refused;
    out->interval_ms = st.interval_ms;
    out->last_error_time = st.last_error_time;
    if (st.last_result != WSYNC_OK) {
        wspy__from(&out->last_error, &st.last_error);
        out->last_error.code = (int64_t)st.last_result;
    }
    wspy__reset(err);
    return 0;
}

WSPY_API int32_t wspy_subscriber_status(wspy_subscriber *h, wspy_prefetch_status *out, wspy_error *err)
{
    return wspy__prefetch_status(h ? h->s : NULL, "subscriber", out, err);
}

WSPY_API void wspy_subscriber_stop(wspy_subscriber *h)
{
    if (h && h->s) wsync_subscriber_stop(h->s);
}

/* ---- the mirror subscriber (wsync.h >>mirror) ----

   For engines whose tensors the CPU cannot write (CUDA): the shim owns a
   host copy of the model (one zeroed block, each tensor 64-byte aligned),
   wsync's mirror keeps it at the chain's newest verified step in the
   background (or in wspy_mirror_sync), and wspy_mirror_take hands the
   engine, through a flat callback, every change since its last take. */

typedef struct wspy_mirror {
    wsync_store store;
    wsync_mirror *m;
    wspy__tset targets;    /* names and shapes copied; data in block */
    void *block;           /* the host copy */
    char *prefix;
} wspy_mirror;

static void wspy__mirror_free(wspy_mirror *h)
{
    if (!h) return;
    if (h->m) wsync_mirror_close(h->m);
    wsync_store_close(&h->store);
    wspy__tset_free(&h->targets);
    free(h->block);
    free(h->prefix);
    free(h);
}

/* What both ways of opening a mirror do first: the prefix kept, the store
   opened, the options filled; h freed on failure. */
static int32_t wspy__mirror_begin(wspy_mirror *h, const char *store, uint32_t store_flags, const char *prefix,
                                  uint32_t threads, uint32_t flags, const uint8_t *verify_key, uint32_t interval_ms,
                                  uint32_t chunk, wsync_mirror_options *o, wspy_error *err)
{
    int32_t rc;
    if ((rc = wspy__prefix_store(store, store_flags, prefix, &h->prefix, &h->store, err)) != 0) {
        wspy__mirror_free(h);
        return rc;
    }
    memset(o, 0, sizeof *o);
    wspy__chain_opt(&o->chain, h->prefix, 0, 0, 0.0, 0, threads, flags, NULL, verify_key);
    o->interval_ms = interval_ms;
    o->chunk = chunk;
    return 0;
}

/* n == 0: the mirror takes its tensors and allocates its host copy from
   the chain's newest anchor (wsync_mirror_open with no tensors); wspy_mirror_tensor
   lists them. */
static int32_t wspy__mirror_from_anchor(wspy_mirror *h, const char *store, uint32_t store_flags, const char *prefix,
                                        uint32_t threads, uint32_t flags, const uint8_t *verify_key,
                                        uint32_t interval_ms, uint32_t chunk, wspy_mirror **out, wspy_error *err)
{
    wsync_mirror_options o;
    wsync_error e;
    wsync_result r;
    const wsync_tensor *t;
    size_t n = 0, i, dims = 0;
    int32_t rc;
    const char **names;
    int32_t *dtypes;
    uint32_t *ranks;
    uint64_t *shapes;
    void **datas;
    if ((rc = wspy__mirror_begin(h, store, store_flags, prefix, threads, flags, verify_key, interval_ms, chunk, &o,
                                 err)) != 0)
        return rc;
    if ((r = wsync_mirror_open(&h->store, NULL, 0, &o, &h->m, &e)) != WSYNC_OK) {
        h->m = NULL;
        wspy__mirror_free(h);
        return wspy__ret(r, &e, err);
    }
    t = wsync_mirror_tensors(h->m, &n);
    for (i = 0; i < n; i++) dims += t[i].rank;
    names = (const char **)malloc((n + 1) * sizeof *names);
    dtypes = (int32_t *)malloc((n + 1) * sizeof *dtypes);
    ranks = (uint32_t *)malloc((n + 1) * sizeof *ranks);
    shapes = (uint64_t *)malloc((dims + 1) * sizeof *shapes);
    datas = (void **)malloc((n + 1) * sizeof *datas);
    rc = 0;
    if (!names || !dtypes || !ranks || !shapes || !datas) {
        rc = wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "mirror tensors");
    } else {
        dims = 0;
        for (i = 0; i < n; i++) {
            names[i] = t[i].name;
            dtypes[i] = (int32_t)t[i].dtype;
            ranks[i] = t[i].rank;
            if (t[i].rank) memcpy(shapes + dims, t[i].shape, t[i].rank * sizeof *shapes);
            dims += t[i].rank;
            datas[i] = t[i].data;
        }
        rc = wspy__tset_make(&h->targets, n, names, dtypes, ranks, shapes, datas, 1, err);
    }
    free(names);
    free(dtypes);
    free(ranks);
    free(shapes);
    free(datas);
    if (rc != 0) {
        wspy__mirror_free(h);
        return rc;
    }
    *out = h;
    return 0;
}

/* n tensors (names, dtypes, ranks, shapes: as wspy_subscriber_open; no
   data: the shim allocates the host copy, zeroed; n 0: see above). flags: WSYNC_CHAIN_*
   (the mirror always verifies state digests); verify_key: as
   wspy_subscriber_open's. interval_ms: the background's HEAD poll (0: 1000);
   chunk: positions per take callback (0: 65536). */
WSPY_API int32_t wspy_mirror_open(const char *store, uint32_t store_flags, const char *prefix, uint32_t threads,
                                  uint32_t flags, const uint8_t *verify_key, uint32_t interval_ms, uint32_t chunk,
                                  uint64_t n,
                                  const char *const *names, const int32_t *dtypes, const uint32_t *ranks,
                                  const uint64_t *shapes, wspy_mirror **out, wspy_error *err)
{
    static uint8_t placeholder[64];
    wspy_mirror *h;
    wsync_mirror_options o;
    wsync_error e;
    wsync_result r;
    void **datas = NULL;
    uint64_t total = 0;
    size_t i;
    int32_t rc;
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output handle");
    *out = NULL;
    if (n > (uint64_t)(SIZE_MAX / sizeof(void *)) - 1) return wspy__fail(err, WSYNC_ERR_OVERFLOW, "tensors");
    h = (wspy_mirror *)calloc(1, sizeof *h);
    datas = (void **)malloc(((size_t)n + 1) * sizeof(void *));
    if (!h || !datas) {
        free(h);
        free(datas);
        return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "mirror");
    }
    if (!n) { /* the layout of the chain's newest anchor (an engine map's checkpoint) */
        free(datas);
        return wspy__mirror_from_anchor(h, store, store_flags, prefix, threads, flags, verify_key, interval_ms,
                                        chunk, out, err);
    }
    for (i = 0; i < (size_t)n; i++) datas[i] = placeholder; /* sizes first, memory below */
    rc = wspy__tset_make(&h->targets, (size_t)n, names, dtypes, ranks, shapes, datas, 1, err);
    free(datas);
    if (rc != 0) {
        free(h);
        return rc;
    }
    for (i = 0; i < h->targets.n; i++) {
        uint64_t sz = ((uint64_t)h->targets.t[i].nbytes + 63) & ~(uint64_t)63;
        if (sz < h->targets.t[i].nbytes || total + sz < total) {
            wspy__mirror_free(h);
            return wspy__fail(err, WSYNC_ERR_OVERFLOW, "the model's size overflows");
        }
        total += sz;
    }
    if (total > (uint64_t)SIZE_MAX - 64 || !(h->block = calloc(1, (size_t)total + 64))) {
        wspy__mirror_free(h);
        return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "the mirror's host copy (%llu bytes)",
                          (unsigned long long)total);
    }
    {
        uint8_t *p = (uint8_t *)(((uintptr_t)h->block + 63) & ~(uintptr_t)63);
        for (i = 0; i < h->targets.n; i++) {
            h->targets.t[i].data = h->targets.t[i].nbytes ? (void *)p : NULL;
            p += ((size_t)h->targets.t[i].nbytes + 63) & ~(size_t)63;
        }
    }
    if ((rc = wspy__mirror_begin(h, store, store_flags, prefix, threads, flags, verify_key, interval_ms, chunk, &o,
                                 err)) != 0)
        return rc;
    r = wsync_mirror_open(&h->store, h->targets.t, h->targets.n, &o, &h->m, &e);
    if (r != WSYNC_OK) {
        h->m = NULL;
        wspy__mirror_free(h);
        return wspy__ret(r, &e, err);
    }
    *out = h;
    return wspy__ret(r, &e, err);
}

/* The host copy of tensor i: its address and bytes (0 when out of range). */
WSPY_API int32_t wspy_mirror_data(const wspy_mirror *h, uint64_t i, void **data, uint64_t *nbytes)
{
    if (!h || !h->m || i >= (uint64_t)h->targets.n || !data || !nbytes) return (int32_t)WSYNC_ERR_INVALID_ARGUMENT;
    *data = h->targets.t[i].data;
    *nbytes = (uint64_t)h->targets.t[i].nbytes;
    return 0;
}

/* Starts the background; interval_ms (0: the one given to wspy_mirror_open)
   is the HEAD poll's: the mirror's subscriber is started with it first
   (wsync_mirror_start then finds it running). */
WSPY_API int32_t wspy_mirror_start(wspy_mirror *h, uint32_t interval_ms, wspy_error *err)
{
    wsync_error e;
    wsync_result r;
    if (!h || !h->m) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "mirror is closed");
    if (interval_ms) {
        wsync_subscriber *sub = wsync_mirror_subscriber(h->m);
        wsync_prefetch_status ps;
        memset(&ps, 0, sizeof ps);
        if (sub && wsync_subscriber_prefetch_status(sub, &ps) == WSYNC_OK && !ps.running &&
            (r = wsync_subscriber_start(sub, interval_ms, &e)) != WSYNC_OK)
            return wspy__ret(r, &e, err);
    }
    r = wsync_mirror_start(h->m, &e);
    return wspy__ret(r, &e, err);
}

WSPY_API void wspy_mirror_stop(wspy_mirror *h)
{
    if (h && h->m) wsync_mirror_stop(h->m);
}

/* Moves the mirror (not the engine) to step (UINT64_MAX: HEAD's). */
WSPY_API int32_t wspy_mirror_sync(wspy_mirror *h, uint64_t step, wspy_sync_stats *stats, wspy_error *err)
{
    wsync_sync_stats st;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    double t0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!h || !h->m) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "mirror is closed");
    if ((rc = wspy__check_step(step, 1, err)) != 0) return rc;
    memset(&st, 0, sizeof st);
    t0 = wspy__now();
    r = wsync_mirror_sync(h->m, step, &st, &e);
    wspy__sync_stats(stats, &st, wspy__now() - t0);
    return wspy__ret(r, &e, err);
}

/* The mirror AND the engine hold step (the caller copied the engine's
   tensors into the host copy first: wspy_mirror_data). */
WSPY_API int32_t wspy_mirror_set_step(wspy_mirror *h, uint64_t step, wspy_error *err)
{
    wsync_error e;
    wsync_result r;
    int32_t rc;
    if (!h || !h->m) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "mirror is closed");
    if ((rc = wspy__check_step(step, 0, err)) != 0) return rc;
    r = wsync_mirror_set_step(h->m, step, &e);
    return wspy__ret(r, &e, err);
}

typedef struct wspy__take {
    wspy_changes_fn fn;
    void *user;
} wspy__take;

static int wspy__take_cb(void *user, const wsync_changes *c)
{
    const wspy__take *t = (const wspy__take *)user;
    int32_t rc = t->fn(t->user, (uint64_t)c->index, (int32_t)(c->whole != 0), c->count, c->positions, c->values,
                       (uint32_t)c->width, (int32_t)(c->last != 0));
    return rc ? (int)(rc > 0 ? rc : 1) : 0;
}

static void wspy__mirror_stats(wspy_mirror_stats *stats, const wsync_mirror_stats *stp);

/* wsync_mirror_take through fn (see wspy_changes_fn). */
WSPY_API int32_t wspy_mirror_take(wspy_mirror *h, wspy_changes_fn fn, void *user, wspy_mirror_stats *stats,
                                  wspy_error *err)
{
    wsync_mirror_stats st;
    wspy__take t;
    wsync_error e;
    wsync_result r;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!h || !h->m) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "mirror is closed");
    if (!fn) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no callback");
    t.fn = fn;
    t.user = user;
    memset(&st, 0, sizeof st);
    r = wsync_mirror_take(h->m, wspy__take_cb, &t, &st, &e);
    wspy__mirror_stats(stats, &st);
    return wspy__ret(r, &e, err);
}

static void wspy__mirror_stats(wspy_mirror_stats *stats, const wsync_mirror_stats *stp)
{
    wsync_mirror_stats st = *stp;
    if (stats) {
        stats->had_step = (uint64_t)st.had_step;
        stats->from_step = st.from_step;
        stats->has_step = (uint64_t)st.has_step;
        stats->step = st.step;
        stats->handed = (uint64_t)st.handed;
        stats->busy = (uint64_t)st.busy;
        stats->steps = st.steps;
        stats->tensors = st.tensors;
        stats->whole_tensors = st.whole_tensors;
        stats->positions = st.positions;
        stats->bytes = st.bytes;
        stats->chunks = st.chunks;
        stats->record_bytes = st.record_bytes;
#ifdef WSYNC_CHAIN_PARTIAL /* the wsync.h of issue 38, whose mirror stats say what was fetched */
        stats->anchors = st.anchors;
        stats->deltas = st.deltas;
        stats->bytes_fetched = st.bytes_fetched;
#endif
        stats->pause_seconds = st.pause_seconds;
        stats->wait_seconds = st.wait_seconds;
    }
}

/* which 0: the engine's step (its last take's); 1: the mirror's verified
   step. 1 and *step when there is one. */
WSPY_API int32_t wspy_mirror_step(wspy_mirror *h, int32_t which, uint64_t *step)
{
    uint64_t s = 0;
    int has;
    if (!h || !h->m) return 0;
    has = which ? wsync_mirror_step(h->m, &s) : wsync_mirror_engine_step(h->m, &s);
    if (has && step) *step = s;
    return has ? 1 : 0;
}

WSPY_API int32_t wspy_mirror_engine_step(wspy_mirror *h, uint64_t *step) { return wspy_mirror_step(h, 0, step); }

/* 1 and *digest: the state digest of what the engine was handed. */
WSPY_API int32_t wspy_mirror_state_digest(wspy_mirror *h, uint64_t *digest)
{
    uint64_t d = 0;
    if (!h || !h->m) return 0;
    if (!wsync_mirror_state_digest(h->m, &d)) return 0;
    if (digest) *digest = d;
    return 1;
}

WSPY_API int32_t wspy_mirror_status(wspy_mirror *h, wspy_prefetch_status *out, wspy_error *err)
{
    return wspy__prefetch_status(h ? wsync_mirror_subscriber(h->m) : NULL, "mirror", out, err);
}

WSPY_API void wspy_mirror_close(wspy_mirror *h)
{
    wspy__mirror_free(h);
}

/* The mirror's tensor i: name, dtype, rank, shape (up to 8 dims). 0, or
   nonzero when out of range. */
WSPY_API int32_t wspy_mirror_tensor(const wspy_mirror *h, uint64_t i, const char **name, int32_t *dtype,
                                    uint32_t *rank, uint64_t *shape8)
{
    const wsync_tensor *t;
    if (!h || !h->m || i >= (uint64_t)h->targets.n) return (int32_t)WSYNC_ERR_INVALID_ARGUMENT;
    t = &h->targets.t[i];
    if (t->rank > 8) return (int32_t)WSYNC_ERR_RANK_TOO_LARGE;
    *name = t->name;
    *dtype = (int32_t)t->dtype;
    *rank = t->rank;
    if (t->rank) memcpy(shape8, t->shape, t->rank * sizeof *shape8);
    return 0;
}

WSPY_API uint64_t wspy_mirror_count(const wspy_mirror *h) { return h && h->m ? (uint64_t)h->targets.n : 0; }

/* ---- the engine map (wsync.h >>engine-map) ----

   n parameters: names, dtypes, ranks, shapes (flattened), dims, pads,
   n_pieces (0: the checkpoint tensor of the parameter's name), and all
   parameters' pieces in order: tensors, starts, lengths; datas: each
   parameter's host memory (CPU targets) or NULL (datas NULL: none).
   Everything but the memory is copied; the map is checked against the
   mirror's tensors here. flags: WSYNC_MAP_SHARD. The mirror must outlive
   it. */
typedef struct wspy_engine {
    wsync_engine *e;
    wsync_map_param *p;
    wsync_map_piece *pc;
    wspy__tset names;      /* the parameters' names and shapes, copied */
    char **pnames;         /* the pieces' tensor names, copied */
    size_t npc;
    void **datas;          /* the parameters' host memory, NULL where none */
    wspy_seg *segs;        /* a take's staged parameters (kept across takes) */
    size_t segcap;
} wspy_engine;

WSPY_API void wspy_engine_close(wspy_engine *g)
{
    size_t i;
    if (!g) return;
    wsync_engine_close(g->e);
    for (i = 0; i < g->npc; i++) free(g->pnames ? g->pnames[i] : NULL);
    free(g->pnames);
    free(g->datas);
    free(g->segs);
    free(g->pc);
    free(g->p);
    wspy__tset_free(&g->names);
    free(g);
}

WSPY_API int32_t wspy_engine_open(wspy_mirror *h, uint64_t n, const char *const *names, const int32_t *dtypes,
                                  const uint32_t *ranks, const uint64_t *shapes, const uint32_t *dims,
                                  const uint64_t *pads, const uint64_t *n_pieces, const char *const *piece_tensors,
                                  const uint64_t *piece_starts, const uint64_t *piece_lengths,
                                  void *const *param_datas, uint32_t flags, wspy_engine **out, wspy_error *err)
{
    static uint8_t placeholder[8];
    wspy_engine *g;
    void **datas;
    wsync_error e;
    wsync_result r;
    size_t i, k, at = 0;
    int32_t rc;
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output handle");
    *out = NULL;
    if (!h || !h->m) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "mirror is closed");
    if (n > (uint64_t)(SIZE_MAX / sizeof(wsync_map_param)) - 1 || (n && (!dims || !pads || !n_pieces)))
        return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "engine map arrays");
    for (i = 0; i < (size_t)n; i++) {
        if (n_pieces[i] > (uint64_t)(SIZE_MAX / sizeof(wsync_map_piece)) - at - 1)
            return wspy__fail(err, WSYNC_ERR_OVERFLOW, "pieces");
        at += (size_t)n_pieces[i];
    }
    if (at && (!piece_tensors || !piece_starts || !piece_lengths))
        return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "engine map pieces");
    g = (wspy_engine *)calloc(1, sizeof *g);
    datas = (void **)malloc(((size_t)n + 1) * sizeof *datas);
    if (!g || !datas) {
        free(g);
        free(datas);
        return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "engine map");
    }
    for (i = 0; i < (size_t)n; i++) datas[i] = placeholder;
    rc = wspy__tset_make(&g->names, (size_t)n, names, dtypes, ranks, shapes, datas, 1, err);
    free(datas);
    if (rc != 0) {
        free(g);
        return rc;
    }
    g->npc = at;
    g->p = (wsync_map_param *)calloc((size_t)n + 1, sizeof *g->p);
    g->pc = (wsync_map_piece *)calloc(at + 1, sizeof *g->pc);
    g->pnames = (char **)calloc(at + 1, sizeof *g->pnames);
    g->datas = (void **)calloc((size_t)n + 1, sizeof *g->datas);
    if (!g->p || !g->pc || !g->pnames || !g->datas) {
        wspy_engine_close(g);
        return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "engine map");
    }
    for (k = 0; k < at; k++) {
        size_t len = piece_tensors[k] ? strlen(piece_tensors[k]) + 1 : 0;
        if (!len || !(g->pnames[k] = (char *)malloc(len))) {
            wspy_engine_close(g);
            return len ? wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "engine map")
                       : wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "piece %zu has no tensor name", k);
        }
        memcpy(g->pnames[k], piece_tensors[k], len);
        g->pc[k].tensor = g->pnames[k];
        g->pc[k].start = piece_starts[k];
        g->pc[k].length = piece_lengths[k];
    }
    for (i = 0, at = 0; i < (size_t)n; i++) {
        wsync_map_param *q = &g->p[i];
        q->name = g->names.t[i].name;
        q->dtype = g->names.t[i].dtype;
        q->rank = g->names.t[i].rank;
        q->shape = g->names.t[i].shape;
        q->dim = dims[i];
        q->pad = pads[i];
        q->n_pieces = (size_t)n_pieces[i];
        q->pieces = q->n_pieces ? g->pc + at : NULL;
        at += q->n_pieces;
        g->datas[i] = param_datas ? param_datas[i] : NULL;
    }
    r = wsync_engine_open(h->m, g->p, (size_t)n, flags | WSYNC_ENGINE_END_CALL | WSYNC_ENGINE_MERGE, &g->e, &e);
    if (r != WSYNC_OK) {
        g->e = NULL;
        wspy_engine_close(g);
        return wspy__ret(r, &e, err);
    }
    *out = g;
    return 0;
}

typedef struct wspy__ptake {
    wspy_engine *g;
    wspy_param_fn fn;
    void *user;
    const uint8_t *staged; /* per parameter: 1, its changes into the staging */
    wspy_stage_fn sfn;
    uint8_t *buf;
    uint64_t cap, used, nseg;
    size_t split;          /* the parameter staged in pieces (larger than the buffer), else SIZE_MAX */
    int32_t stage_rc;      /* the staging's refusal */
    const char *why;       /* what failed here, in C */
} wspy__ptake;

static int wspy__ptake_stage(wspy__ptake *t, uint64_t need)
{
    int32_t rc = t->sfn(t->user, t->g->segs, t->nseg, need, &t->buf, &t->cap, &t->used);
    if (rc) return (int)(t->stage_rc = rc > 0 ? rc : 1);
    if (!t->used) t->nseg = 0;
    if (!t->buf) t->cap = 0;
    return 0;
}

/* The next segment: count changes of width bytes at the buffer's end (room checked). */
static const wspy_seg *wspy__ptake_seg(wspy__ptake *t, size_t index, uint64_t count, unsigned width)
{
    wspy_seg *sg;
    if (t->nseg == t->g->segcap) {
        size_t cap = t->g->segcap ? 2 * t->g->segcap : 64;
        wspy_seg *x = (wspy_seg *)realloc(t->g->segs, cap * sizeof *x);
        if (!x) {
            t->why = "out of memory for the staging's segments";
            return NULL;
        }
        t->g->segs = x;
        t->g->segcap = cap;
    }
    sg = &t->g->segs[t->nseg++];
    sg->index = (uint64_t)index;
    sg->positions = t->used;
    sg->values = t->used + count * 8;
    sg->count = count;
    t->used += count * 8 + ((count * width + 7) & ~(uint64_t)7);
    return sg;
}

/* WSYNC_ENGINE_MERGE's reserve: a staged parameter's merged changes go
   straight into the binding's buffer (positions, then values at an 8-byte
   boundary), a segment each. */
static int wspy__ptake_reserve(void *user, size_t index, uint64_t count, unsigned width, uint64_t **positions,
                               void **values)
{
    wspy__ptake *t = (wspy__ptake *)user;
    uint64_t need, vb;
    const wspy_seg *sg;
    int rc;
    if (!t->staged || !t->staged[index]) return 0; /* to fn, from the engine's memory */
    vb = count * width;
    if (count > UINT64_MAX / 16 || (need = count * 8 + ((vb + 7) & ~(uint64_t)7)) > UINT64_MAX - t->used) {
        t->why = "a parameter's changes overflow the staging's size";
        return 1;
    }
    if (t->used + need > t->cap && (rc = wspy__ptake_stage(t, need)) != 0) return rc;
    if (t->used + need > t->cap) { /* larger than the buffer: the call stages it in pieces */
        t->split = index;
        return 0;
    }
    if (!(sg = wspy__ptake_seg(t, index, count, width))) return 1;
    *positions = (uint64_t *)(void *)(t->buf + sg->positions);
    *values = t->buf + sg->values;
    return 0;
}

/* A parameter larger than the staging buffer, from the engine's memory:
   as many segments as it takes, the buffer uploaded between them. */
static int wspy__ptake_pieces(wspy__ptake *t, const wsync_param_changes *c)
{
    uint64_t at = 0, w = c->width, k;
    const wspy_seg *sg;
    int rc;
    t->split = SIZE_MAX;
    while (at < c->count) {
        k = t->cap - t->used > 8 + w + 7 ? (t->cap - t->used - 7) / (8 + w) : 0;
        if (!k) {
            if ((rc = wspy__ptake_stage(t, (c->count - at) * (8 + w) + 7)) != 0) return rc;
            k = t->cap - t->used > 8 + w + 7 ? (t->cap - t->used - 7) / (8 + w) : 0;
            if (!k) {
                t->why = "the staging buffer has no room for one change";
                return 1;
            }
        }
        if (k > c->count - at) k = c->count - at;
        if (!(sg = wspy__ptake_seg(t, c->index, k, c->width))) return 1;
        memcpy(t->buf + sg->positions, c->positions + at, (size_t)k * 8);
        memcpy(t->buf + sg->values, (const uint8_t *)c->values + at * w, (size_t)(k * w));
        at += k;
    }
    return 0;
}

static int wspy__ptake_cb(void *user, const wsync_param_changes *c)
{
    wspy__ptake *t = (wspy__ptake *)user;
    int32_t rc;
    if (c->param && t->staged && t->staged[c->index]) /* written by the reserve, or too large for it */
        return t->split == c->index ? wspy__ptake_pieces(t, c) : 0;
    if (!c->param && t->nseg && wspy__ptake_stage(t, 0) != 0) return (int)t->stage_rc; /* the end: upload */
    rc = t->fn(t->user, c->param ? (uint64_t)c->index : UINT64_MAX, c->count, c->positions, c->values,
               (uint32_t)c->width);
    return rc ? (int)(rc > 0 ? rc : 1) : 0;
}

/* wsync_engine_take through fn (see wspy_param_fn), one call per
   parameter (WSYNC_ENGINE_MERGE). scatter 1: parameters with host memory
   are written here in C (fn gets the others); 0: fn gets every
   parameter's changes. staged (n bytes, or NULL), with scatter 1: the
   parameters whose changes the take writes into the binding's staging
   buffer itself (buf, cap bytes; sfn grows and flushes it, see
   wspy_stage_fn) instead of calling fn; sfn's last call comes at the
   take's end call, before fn's. */
WSPY_API int32_t wspy_engine_take(wspy_engine *g, wspy_param_fn fn, int32_t scatter, void *user,
                                  const uint8_t *staged, wspy_stage_fn sfn, uint8_t *buf, uint64_t cap,
                                  wspy_engine_stats *stats, wspy_error *err)
{
    wsync_engine_stats st;
    wspy__ptake t;
    wsync_error e;
    wsync_result r;
    size_t i;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!g || !g->e) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "engine map is closed");
    if (!fn || (staged && (!scatter || !sfn))) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no callback");
    memset(&t, 0, sizeof t);
    t.g = g;
    t.fn = fn;
    t.user = user;
    t.staged = staged;
    t.sfn = sfn;
    t.buf = buf;
    t.cap = buf ? cap : 0;
    t.split = SIZE_MAX;
    for (i = 0; i < g->names.n; i++) g->p[i].data = scatter ? g->datas[i] : NULL;
    wsync_engine_reserve(g->e, staged ? wspy__ptake_reserve : NULL, &t);
    memset(&st, 0, sizeof st);
    r = wsync_engine_take(g->e, wspy__ptake_cb, &t, &st, &e);
    wsync_engine_reserve(g->e, NULL, NULL);
    if (stats) {
        wspy__mirror_stats(&stats->mirror, &st.mirror);
        stats->params = st.params;
        stats->positions = st.positions;
        stats->bytes = st.bytes;
        stats->calls = st.calls;
    }
    if (r == WSYNC_ERR_SINK && t.why)
        return wspy__fail(err, WSYNC_ERR_SINK, "the take's staging: %s: the engine has no step, and the next take "
                          "hands every tensor of this one again, whole", t.why);
    return wspy__ret(r, &e, err);
}

/* ---- a signed chain's identity (wsync_subscriber_chain_id) ----

   _chain_id: 1 and id (16 bytes) set once a HEAD passed verification, else
   0. _set_chain_id pins the chain followed (16 bytes) or, with NULL,
   forgets it, so that the next HEAD that passes is followed (a chain the
   same trainer started anew). A mirror's are its subscriber's. */

WSPY_API int32_t wspy_subscriber_chain_id(const wspy_subscriber *h, uint8_t *id)
{
    return h && h->s && id ? (int32_t)(wsync_subscriber_chain_id(h->s, id) != 0) : 0;
}

WSPY_API int32_t wspy_subscriber_set_chain_id(wspy_subscriber *h, const uint8_t *id)
{
    if (!h || !h->s) return (int32_t)WSYNC_ERR_INVALID_ARGUMENT;
    wsync_subscriber_set_chain_id(h->s, id);
    return 0;
}

WSPY_API int32_t wspy_mirror_chain_id(wspy_mirror *h, uint8_t *id)
{
    wsync_subscriber *s = h && h->m && id ? wsync_mirror_subscriber(h->m) : NULL;
    return s ? (int32_t)(wsync_subscriber_chain_id(s, id) != 0) : 0;
}

WSPY_API int32_t wspy_mirror_set_chain_id(wspy_mirror *h, const uint8_t *id)
{
    wsync_subscriber *s = h && h->m ? wsync_mirror_subscriber(h->m) : NULL;
    if (!s) return (int32_t)WSYNC_ERR_INVALID_ARGUMENT;
    wsync_subscriber_set_chain_id(s, id);
    return 0;
}

/* ---- deltas ---- */

typedef struct wspy__grow {
    uint8_t *bytes;
    size_t len, cap;
} wspy__grow;

static int wspy__grow_sink(void *user, const void *bytes, size_t len)
{
    wspy__grow *g = (wspy__grow *)user;
    if (len > SIZE_MAX - g->len) return 1;
    if (g->len + len > g->cap) {
        size_t cap = g->cap ? g->cap : 65536;
        uint8_t *nb;
        while (cap < g->len + len) {
            if (cap > SIZE_MAX / 2) return 1;
            cap *= 2;
        }
        nb = (uint8_t *)realloc(g->bytes, cap);
        if (!nb) return 1;
        g->bytes = nb;
        g->cap = cap;
    }
    if (len) memcpy(g->bytes + g->len, bytes, len);
    g->len += len;
    return 0;
}

static void wspy__delta_stats(wspy_delta_stats *out, const wsync_delta_stats *st, double seconds)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    out->encoding = (uint64_t)st->encoding;
    out->has_steps = (uint64_t)st->has_steps;
    out->base_step = st->base_step;
    out->step = st->step;
    out->has_base = (uint64_t)st->has_base;
    out->tensors = st->tensors;
    out->changed_tensors = st->changed_tensors;
    out->elements = st->elements;
    out->changed = st->changed;
    out->bytes = st->bytes;
    out->seconds = seconds;
}

/* A delta base -> next (same names, dtypes, shapes) into a buffer from
   malloc (*out, *out_len; free with wspy_free). flags: WSYNC_DELTA_*. */
WSPY_API int32_t wspy_delta_encode(uint64_t n, const char *const *names, const int32_t *dtypes,
                                   const uint32_t *ranks, const uint64_t *shapes, void *const *base_datas,
                                   void *const *next_datas, int32_t encoding, uint64_t base_step, uint64_t step,
                                   uint32_t block_log2, uint32_t threads, uint32_t flags, uint8_t **out,
                                   uint64_t *out_len, wspy_delta_stats *stats, wspy_error *err)
{
    wspy__tset b, x;
    wsync_delta_options o;
    wsync_delta_stats st;
    wspy__grow g;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    double t0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!out || !out_len) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output");
    *out = NULL;
    *out_len = 0;
    if (encoding < 0 || encoding > (int32_t)WSYNC_ENCODING_TRL_V3)
        return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "encoding %d", (int)encoding);
    if ((rc = wspy__tset_make(&b, (size_t)n, names, dtypes, ranks, shapes, base_datas, 0, err)) != 0) return rc;
    if ((rc = wspy__tset_make(&x, (size_t)n, names, dtypes, ranks, shapes, next_datas, 0, err)) != 0) {
        wspy__tset_free(&b);
        return rc;
    }
    memset(&o, 0, sizeof o);
    o.encoding = (wsync_encoding)encoding;
    o.base_step = base_step;
    o.step = step;
    o.block_log2 = block_log2;
    o.threads = threads;
    o.flags = flags & ~WSYNC_DELTA_UPDATE_BASE; /* base is read-only here */
    memset(&st, 0, sizeof st);
    memset(&g, 0, sizeof g);
    t0 = wspy__now();
    r = wsync_delta_encode(b.t, x.t, b.n, &o, wspy__grow_sink, &g, &st, &e);
    wspy__delta_stats(stats, &st, wspy__now() - t0);
    wspy__tset_free(&b);
    wspy__tset_free(&x);
    if (r != WSYNC_OK) {
        free(g.bytes);
        return wspy__ret(r, &e, err);
    }
    *out = g.bytes;
    *out_len = g.len;
    return wspy__ret(r, &e, err);
}

/* The delta's bytes: (bytes, size), or the file at path when path is not
   NULL (mapped for the call). */
static int32_t wspy__input(const void *bytes, uint64_t size, const char *path, wsync_mapped *map,
                           const uint8_t **p, uint64_t *n, wspy_error *err)
{
    memset(map, 0, sizeof *map);
    if (path) {
        wsync_error e;
        wsync_result r = wsync_file_map(path, map, &e);
        if (r != WSYNC_OK) return wspy__ret(r, &e, err);
        *p = map->bytes;
        *n = map->size;
        return 0;
    }
    if (!bytes && size) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no bytes");
    *p = (const uint8_t *)(bytes ? bytes : "");
    *n = size;
    return 0;
}

WSPY_API int32_t wspy_delta_apply(const void *delta, uint64_t size, const char *path, uint64_t n,
                                  const char *const *names, const int32_t *dtypes, const uint32_t *ranks,
                                  const uint64_t *shapes, void *const *datas, uint32_t threads, uint32_t flags,
                                  wspy_delta_stats *stats, wspy_error *err)
{
    wspy__tset s;
    wsync_delta_options o;
    wsync_delta_stats st;
    wsync_mapped map;
    const uint8_t *p;
    uint64_t len;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    double t0;
    if (stats) memset(stats, 0, sizeof *stats);
    if ((rc = wspy__tset_make(&s, (size_t)n, names, dtypes, ranks, shapes, datas, 0, err)) != 0) return rc;
    if ((rc = wspy__input(delta, size, path, &map, &p, &len, err)) != 0) {
        wspy__tset_free(&s);
        return rc;
    }
    memset(&o, 0, sizeof o);
    o.threads = threads;
    o.flags = flags & (WSYNC_DELTA_SKIP_BASE_DIGEST | WSYNC_DELTA_SKIP_RESULT_DIGEST);
    memset(&st, 0, sizeof st);
    t0 = wspy__now();
    r = wsync_delta_apply(p, len, s.t, s.n, &o, &st, &e);
    wspy__delta_stats(stats, &st, wspy__now() - t0);
    if (path) wsync_file_unmap(&map);
    wspy__tset_free(&s);
    return wspy__ret(r, &e, err);
}

WSPY_API int32_t wspy_delta_info(const void *delta, uint64_t size, const char *path, wspy_delta_stats *stats,
                                 wspy_error *err)
{
    wsync_delta_stats st;
    wsync_mapped map;
    const uint8_t *p;
    uint64_t len;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    if (stats) memset(stats, 0, sizeof *stats);
    if ((rc = wspy__input(delta, size, path, &map, &p, &len, err)) != 0) return rc;
    memset(&st, 0, sizeof st);
    r = wsync_delta_info(p, len, &st, &e);
    wspy__delta_stats(stats, &st, 0.0);
    if (path) wsync_file_unmap(&map);
    return wspy__ret(r, &e, err);
}

/* ---- safetensors files ---- */

typedef struct wspy_st {
    wsync_mapped map;      /* when opened from a path */
    int mapped;
    wsync_st_file f;
} wspy_st;

/* Parses (bytes, size), which must outlive the handle, or the file at path
   (mapped until wspy_st_close). */
WSPY_API int32_t wspy_st_open(const void *bytes, uint64_t size, const char *path, wspy_st **out, wspy_error *err)
{
    wspy_st *h;
    const uint8_t *p;
    uint64_t len;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output handle");
    *out = NULL;
    h = (wspy_st *)calloc(1, sizeof *h);
    if (!h) return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "safetensors handle");
    if ((rc = wspy__input(bytes, size, path, &h->map, &p, &len, err)) != 0) {
        free(h);
        return rc;
    }
    h->mapped = path != NULL;
    r = wsync_st_parse(p, len, NULL, &h->f, &e);
    if (r != WSYNC_OK) {
        if (h->mapped) wsync_file_unmap(&h->map);
        free(h);
        return wspy__ret(r, &e, err);
    }
    *out = h;
    return wspy__ret(r, &e, err);
}

WSPY_API uint64_t wspy_st_count(const wspy_st *h) { return h ? (uint64_t)h->f.n_tensors : 0; }
WSPY_API uint64_t wspy_st_meta_count(const wspy_st *h) { return h ? (uint64_t)h->f.n_metadata : 0; }
/* Byte offset of the data section in the file (8 + header length). */
WSPY_API uint64_t wspy_st_data_offset(const wspy_st *h) { return h ? 8 + h->f.header_len : 0; }

/* Tensor i (in data-offset order): 0, or WSYNC_ERR_INVALID_ARGUMENT when i
   is out of range. begin/end are relative to the data section. */
WSPY_API int32_t wspy_st_tensor(const wspy_st *h, uint64_t i, const char **name, uint64_t *name_len,
                                int32_t *dtype, uint32_t *rank, const uint64_t **shape, uint64_t *begin,
                                uint64_t *end)
{
    const wsync_st_tensor *t;
    if (!h || i >= (uint64_t)h->f.n_tensors || !name || !name_len || !dtype || !rank || !shape || !begin || !end)
        return (int32_t)WSYNC_ERR_INVALID_ARGUMENT;
    t = &h->f.tensors[i];
    *name = t->name;
    *name_len = t->name_len;
    *dtype = (int32_t)t->dtype;
    *rank = t->rank;
    *shape = t->shape;
    *begin = t->begin;
    *end = t->end;
    return 0;
}

WSPY_API int32_t wspy_st_meta(const wspy_st *h, uint64_t i, const char **key, uint64_t *key_len, const char **value,
                              uint64_t *value_len)
{
    const wsync_st_kv *kv;
    if (!h || i >= (uint64_t)h->f.n_metadata || !key || !key_len || !value || !value_len)
        return (int32_t)WSYNC_ERR_INVALID_ARGUMENT;
    kv = &h->f.metadata[i];
    *key = kv->key;
    *key_len = kv->key_len;
    *value = kv->value;
    *value_len = kv->value_len;
    return 0;
}

WSPY_API void wspy_st_close(wspy_st *h)
{
    if (!h) return;
    wsync_st_free(&h->f);
    if (h->mapped) wsync_file_unmap(&h->map);
    free(h);
}

/* ---- model directories (wsync.h >>dir) ----

   A Hugging Face checkpoint directory published as a step (wsync_dir_read,
   then wsync_dir_publish) and followed into versions beside a link PATH
   (wsync_dir_follower, wsync_dir_pull): the library does the work (the
   lock, complete versions only, one atomic switch, pruning); here only the
   arguments and the stats are flattened. */

/* 0: WSYNC_DIR_INDEX, 1: WSYNC_DIR_STEP_FILE; "" otherwise. */
WSPY_API const char *wspy_dir_name(int32_t which)
{
    switch (which) {
    case 0: return WSYNC_DIR_INDEX;
    case 1: return WSYNC_DIR_STEP_FILE;
    default: return "";
    }
}

static void wspy__dir_stats(wspy_dir_stats *out, const wsync_dir_sync_stats *st, double seconds)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    out->had_step = (uint64_t)(st->had_step != 0);
    out->from_step = st->from_step;
    out->has_step = (uint64_t)(st->has_step != 0);
    out->step = st->step;
    out->switched = (uint64_t)(st->switched != 0);
    out->unchecked = (uint64_t)(st->unchecked != 0);
    out->write_failed = (uint64_t)(st->write_failed != 0);
    out->relayout = (uint64_t)(st->relayout != 0);
    out->relayout_step = st->relayout_step;
    out->head_step = st->sync.head_step;
    out->verified = (uint64_t)(st->sync.verified != 0);
    out->anchors = st->sync.anchors;
    out->deltas = st->sync.deltas;
    out->rejected = st->sync.rejected;
    out->bytes_fetched = st->sync.bytes_fetched;
    out->seconds = seconds;
    out->write_seconds = st->write_s;
    wspy__copy(out->version, sizeof out->version, st->version);
}

/* Reads the checkpoint directory `dir` (include: n_include fnmatch patterns
   of file names carried besides the usual ones) and publishes it as `step`
   (UINT64_MAX: the step the directory claims; a directory that claims none
   fails, naming it). unmatched: NULL, or n_include bytes set to 1 where a
   pattern matched no file; info: NULL, or what was read (filled once the
   read succeeded, even when the publish then fails). */
WSPY_API int32_t wspy_publish_dir(wspy_publisher *h, uint64_t step, const char *dir, uint64_t n_include,
                                  const char *const *include, uint8_t *unmatched, wspy_dir_info *info,
                                  wspy_publish_stats *stats, wspy_error *err)
{
    wsync_dir_checkpoint c;
    wsync_publish_stats st;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    uint64_t k;
    double t0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (info) memset(info, 0, sizeof *info);
    if (unmatched && n_include) memset(unmatched, 0, (size_t)n_include);
    if (!h || !h->p) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "publisher is closed");
    if (!dir || !*dir) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "publish_dir: no directory given");
    if ((rc = wspy__check_step(step, 1, err)) != 0) return rc;
    if (n_include && !include) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "include patterns missing");
    if (n_include > (uint64_t)SIZE_MAX) return wspy__fail(err, WSYNC_ERR_OVERFLOW, "include patterns");
    for (k = 0; k < n_include; k++)
        if (!include[k]) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "include pattern %llu is NULL",
                                           (unsigned long long)k);
    memset(&c, 0, sizeof c);
    t0 = wspy__now();
    r = wsync_dir_read(dir, include, (size_t)n_include, &c, &e);
    if (r != WSYNC_OK) return wspy__ret(r, &e, err);
    if (info) {
        info->shards = c.n_shards;
        info->tensors = c.n_tensors;
        info->files = c.n_files;
        info->bytes = c.bytes;
        info->has_step = (uint64_t)(c.has_step != 0);
        info->step = c.step;
        info->skipped_step_file = (uint64_t)(c.skipped_step_file != 0);
    }
    if (unmatched)
        for (k = 0; k < n_include; k++) unmatched[k] = c.unmatched ? c.unmatched[k] : 0;
    if (step == WSYNC_STEP_LATEST && !c.has_step) {
        wsync_dir_checkpoint_free(&c);
        return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT,
                          "publish_dir: the shards of %.300s do not all claim one __metadata__ \"step\" (and it "
                          "holds no %s saying one): give the step", dir, WSYNC_DIR_STEP_FILE);
    }
    memset(&st, 0, sizeof st);
    r = wsync_dir_publish(h->p, step, &c, &st, &e);
    wspy__pub_stats(stats, &st, wspy__now() - t0);
    wsync_dir_checkpoint_free(&c);
    return wspy__ret(r, &e, err);
}

typedef struct wspy_dir_follower {
    wsync_store store;
    wsync_chain_options opt; /* the follower keeps pointers to it, its prefix and key */
    wsync_dir_follower *f;
    char *prefix;
    uint8_t verify_key[WSYNC_ED25519_PUBLIC_SIZE];
} wspy_dir_follower;

static void wspy__dir_follower_free(wspy_dir_follower *h)
{
    if (!h) return;
    if (h->f) wsync_dir_follower_close(h->f);
    wsync_store_close(&h->store);
    free(h->prefix);
    memset(h->verify_key, 0, sizeof h->verify_key);
    free(h);
}

/* Opens a store (store_flags as wspy_publisher_open's; a reader's) and
   options for a directory follower into h; h freed on failure. flags:
   WSYNC_CHAIN_FOLLOW_RESTART, WSYNC_CHAIN_NEW_CHAIN (with a verify key: the
   chain a version records is not pinned); verify_key NULL or 32 bytes. */
static int32_t wspy__dir_begin(wspy_dir_follower *h, const char *store, uint32_t store_flags, const char *prefix,
                               uint32_t threads, uint32_t flags, const uint8_t *verify_key, wspy_error *err)
{
    int32_t rc;
    if ((rc = wspy__prefix_store(store, store_flags, prefix, &h->prefix, &h->store, err)) != 0) {
        free(h);
        return rc;
    }
    if (verify_key) memcpy(h->verify_key, verify_key, sizeof h->verify_key);
    wspy__chain_opt(&h->opt, h->prefix, 0, 0, 0.0, 0, threads, flags, NULL, verify_key ? h->verify_key : NULL);
    return 0;
}

/* A follower of the directory `path` (a link wsync keeps, or nothing yet). */
WSPY_API int32_t wspy_dir_follower_open(const char *store, uint32_t store_flags, const char *prefix,
                                        uint32_t threads, uint32_t flags, const uint8_t *verify_key,
                                        const char *path, wspy_dir_follower **out, wspy_error *err)
{
    wspy_dir_follower *h;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    if (!out) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no output handle");
    *out = NULL;
    if (!path || !*path) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no path given");
    if (!(h = (wspy_dir_follower *)calloc(1, sizeof *h)))
        return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "directory follower");
    if ((rc = wspy__dir_begin(h, store, store_flags, prefix, threads, flags, verify_key, err)) != 0) return rc;
    r = wsync_dir_follower_open(&h->store, &h->opt, path, &h->f, &e);
    if (r != WSYNC_OK) {
        h->f = NULL;
        wspy__dir_follower_free(h);
        return wspy__ret(r, &e, err);
    }
    *out = h;
    return wspy__ret(r, &e, err);
}

/* One sync to `step` (UINT64_MAX: HEAD's). */
WSPY_API int32_t wspy_dir_follower_sync(wspy_dir_follower *h, uint64_t step, wspy_dir_stats *stats,
                                        wspy_error *err)
{
    wsync_dir_sync_stats st;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    double t0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!h || !h->f) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "directory follower is closed");
    if ((rc = wspy__check_step(step, 1, err)) != 0) return rc;
    memset(&st, 0, sizeof st);
    t0 = wspy__now();
    r = wsync_dir_follower_sync(h->f, step, &st, &e);
    wspy__dir_stats(stats, &st, wspy__now() - t0);
    return wspy__ret(r, &e, err);
}

/* 1 and *step when the follower holds a version. */
WSPY_API int32_t wspy_dir_follower_step(const wspy_dir_follower *h, uint64_t *step)
{
    uint64_t s = 0;
    if (!h || !h->f) return 0;
    if (!wsync_dir_follower_step(h->f, &s)) return 0;
    if (step) *step = s;
    return 1;
}

WSPY_API void wspy_dir_follower_close(wspy_dir_follower *h)
{
    wspy__dir_follower_free(h);
}

/* One sync of `path` to `step` (UINT64_MAX: HEAD's): open, sync, close. */
WSPY_API int32_t wspy_dir_pull(const char *store, uint32_t store_flags, const char *prefix, uint32_t threads,
                               uint32_t flags, const uint8_t *verify_key, const char *path, uint64_t step,
                               wspy_dir_stats *stats, wspy_error *err)
{
    wspy_dir_follower *h;
    wsync_dir_sync_stats st;
    wsync_error e;
    wsync_result r;
    int32_t rc;
    double t0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!path || !*path) return wspy__fail(err, WSYNC_ERR_INVALID_ARGUMENT, "no path given");
    if ((rc = wspy__check_step(step, 1, err)) != 0) return rc;
    if (!(h = (wspy_dir_follower *)calloc(1, sizeof *h)))
        return wspy__fail(err, WSYNC_ERR_OUT_OF_MEMORY, "directory pull");
    if ((rc = wspy__dir_begin(h, store, store_flags, prefix, threads, flags, verify_key, err)) != 0) return rc;
    memset(&st, 0, sizeof st);
    t0 = wspy__now();
    r = wsync_dir_pull(&h->store, &h->opt, path, step, &st, &e);
    wspy__dir_stats(stats, &st, wspy__now() - t0);
    wspy__dir_follower_free(h);
    return wspy__ret(r, &e, err);
}
