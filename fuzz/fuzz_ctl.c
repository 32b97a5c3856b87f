/* fuzz_ctl.c - fuzz harness for the controller protocol's codec
   (wsync_rdma.h: wsync_ctl_header, wsync_ctl_decode_frame,
   wsync_ctl_encode). Every message a controller or a rank reads comes off
   a TCP socket that anyone on the network can connect to, so the decoder
   treats its input as hostile.

   Build and run (from the repository root):

     libFuzzer (clang):   make build/fuzz/fuzz_ctl
                          mkdir -p build/fuzz/work_ctl
                          build/fuzz/fuzz_ctl -dict=fuzz/ctl.dict build/fuzz/work_ctl \
                              fuzz/corpus/ctl fuzz/data/ctl
     Replay without a fuzzer (any C99 compiler; `make test` does this):
                          make build/replay_ctl build/san/replay_ctl
                          build/san/replay_ctl fuzz/corpus/ctl fuzz/data/ctl
     Seeds: make_ctl_seeds.c (see fuzz/README.md).

   What one input goes through (twice when its header's payload length is
   not the number of bytes after it: as it is, and with the length set to
   that number, so that mutations reach the payload's rules instead of
   dying at the length):
     1. It is copied into a malloc'd buffer of exactly its size (ASan sees a
        read past the end) and decoded as a frame with a counting allocator
        that also refuses any single allocation out of proportion to the
        input (more than 4 times its size plus 4 KiB). The same decode with
        the default allocator and a NULL wsync_error must give the same
        result.
     2. wsync_ctl_header on its first 12 bytes must agree: a header it
        refuses makes the frame refused with the same code; an accepted one
        gives the type decoded and a payload length that, when the frame is
        accepted, is the size less 12.
     3. Failure: a nonzero code, the wsync_error says the same code with a
        nonempty message, `out` holds no storage, nothing leaked.
     4. Success (the oracle): wsync_ctl_encode of the decoded message gives
        back the input byte for byte (the wire form is canonical); encoding
        into one byte less says WSYNC_ERR_LIMIT and the size needed;
        decoding the re-encoded bytes gives the same fields; a JOIN's
        tensors have names of 1..255 bytes without NUL, whole-byte dtypes,
        rows inside their shape and bytes inside their region; an ASSIGN's
        transfers are nonempty and inside their targets. A JOIN or ASSIGN
        decoded with an allocator that always fails gives
        WSYNC_ERR_OUT_OF_MEMORY and no storage, as does a DONE with bits;
        a DONE's bits are present exactly when counted (none for
        WSYNC_CTL_NAMED_ALL), nothing set past the count. Freeing leaves nothing live.
   Any violation prints what failed and calls abort(), the fuzzer's signal. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t fz_size;
static int fz_fixed; /* 1 while running the copy with the length fixed */

static void fz_fail(int line, const char *what)
{
    fprintf(stderr, "fuzz_ctl.c:%d: invariant violated: %s (input: %lu bytes%s)\n", line, what,
            (unsigned long)fz_size, fz_fixed ? ", with its payload length fixed" : "");
    fflush(stderr);
    abort();
}
#define FZ_CHECK(c, what)                                                                                       \
    do {                                                                                                         \
        if (!(c)) fz_fail(__LINE__, what);                                                                       \
    } while (0)

typedef struct fz_heap {
    size_t live, limit;
    int fail_all;
} fz_heap;

static void *fz_alloc(void *user, size_t n)
{
    fz_heap *h = (fz_heap *)user;
    size_t *p;
    if (h->fail_all) return NULL;
    if (n > h->limit) {
        fprintf(stderr, "fuzz_ctl.c: allocation of %lu bytes for a %lu-byte input\n", (unsigned long)n,
                (unsigned long)fz_size);
        fz_fail(__LINE__, "allocation out of proportion to the input");
    }
    p = (size_t *)malloc(n + 16);
    if (!p) return NULL;
    p[0] = n;
    h->live += n;
    return (unsigned char *)p + 16;
}

static void fz_free(void *user, void *q)
{
    fz_heap *h = (fz_heap *)user;
    size_t *p;
    if (!q) return;
    p = (size_t *)((unsigned char *)q - 16);
    h->live -= p[0];
    free(p);
}

static int fz_desc_eq(const wsync_fabric_desc *a, const wsync_fabric_desc *b)
{
    return a->backend == b->backend && a->kind == b->kind && a->version == b->version && a->flags == b->flags &&
           a->addr == b->addr && a->len == b->len && a->n_bytes == b->n_bytes &&
           memcmp(a->bytes, b->bytes, a->n_bytes) == 0;
}

/* 1 when every field the type carries is equal */
static int fz_same(const wsync_ctl_msg *a, const wsync_ctl_msg *b)
{
    uint32_t i, k;
    if (a->type != b->type) return 0;
    switch (a->type) {
    case WSYNC_CTL_JOIN:
        if (a->role != b->role || a->rank != b->rank || a->n_regions != b->n_regions || a->n_tensors != b->n_tensors)
            return 0;
        for (i = 0; i < a->n_regions; i++)
            if (!fz_desc_eq(&a->regions[i], &b->regions[i])) return 0;
        for (i = 0; i < a->n_tensors; i++) {
            const wsync_ctl_tensor *x = &a->tensors[i], *y = &b->tensors[i];
            if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim ||
                x->row_begin != y->row_begin || x->row_count != y->row_count || x->region != y->region ||
                x->offset != y->offset || x->col_begin != y->col_begin || x->col_count != y->col_count ||
                x->to_dtype != y->to_dtype || x->block != y->block || x->scale_offset != y->scale_offset ||
                x->group != y->group)
                return 0;
            for (k = 0; k < WSYNC_CTL_DIMS_MAX; k++)
                if (x->shape[k] != y->shape[k]) return 0;
        }
        return 1;
    case WSYNC_CTL_ASSIGN:
        if (a->role != b->role || a->rank != b->rank || a->n_trainers != b->n_trainers ||
            a->n_inference != b->n_inference || a->n_targets != b->n_targets || a->n_transfers != b->n_transfers ||
            a->n_groups != b->n_groups)
            return 0;
        for (i = 0; i < a->n_targets; i++)
            if (a->targets[i].rank != b->targets[i].rank || a->targets[i].region != b->targets[i].region ||
                !fz_desc_eq(&a->targets[i].desc, &b->targets[i].desc))
                return 0;
        for (i = 0; i < a->n_transfers; i++) {
            const wsync_ctl_transfer *x = &a->transfers[i], *y = &b->transfers[i];
            if (x->src_region != y->src_region || x->target != y->target || x->src_offset != y->src_offset ||
                x->dst_offset != y->dst_offset || x->len != y->len || x->rows != y->rows ||
                x->src_stride != y->src_stride || x->prep != y->prep || x->block != y->block ||
                x->scale_offset != y->scale_offset || x->group != y->group || x->start_us != y->start_us)
                return 0;
        }
        return 1;
    case WSYNC_CTL_GO:
    case WSYNC_CTL_COMMIT: return a->step == b->step;
    case WSYNC_CTL_DONE:
        if (a->n_named != b->n_named || a->n_ran != b->n_ran || a->runs != b->runs) return 0;
        if (a->n_named != WSYNC_CTL_NAMED_ALL && a->n_named &&
            memcmp(a->named, b->named, ((size_t)a->n_named + 7) / 8) != 0)
            return 0;
        if (a->n_ran && memcmp(a->ran, b->ran, ((size_t)a->n_ran + 7) / 8) != 0) return 0;
        return a->step == b->step && a->status == b->status && strcmp(a->text, b->text) == 0;
    case WSYNC_CTL_ACK:
    case WSYNC_CTL_ABORT:
    case WSYNC_CTL_ERROR: return a->step == b->step && a->status == b->status && strcmp(a->text, b->text) == 0;
    case WSYNC_CTL_BYE: return 1;
    case WSYNC_CTL_BARRIER:
    case WSYNC_CTL_RELEASE: return a->step == b->step && a->group == b->group;
    case WSYNC_CTL_HELLO:
        return a->role == b->role && a->rank == b->rank && memcmp(a->nonce, b->nonce, WSYNC_CTL_NONCE) == 0;
    case WSYNC_CTL_CHALLENGE:
        return memcmp(a->nonce, b->nonce, WSYNC_CTL_NONCE) == 0 && memcmp(a->mac, b->mac, WSYNC_CTL_MAC) == 0;
    case WSYNC_CTL_PROOF: return memcmp(a->mac, b->mac, WSYNC_CTL_MAC) == 0;
    case WSYNC_CTL_OPEN:
        if (a->step != b->step || a->n_senders != b->n_senders) return 0;
        for (i = 0; i < a->n_senders; i++)
            if (a->senders[i] != b->senders[i]) return 0;
        return 1;
    default: return 0;
    }
}

/* the rules an accepted message holds, read from its fields */
static void fz_rules(const wsync_ctl_msg *m)
{
    uint32_t i;
    if (m->type == WSYNC_CTL_JOIN) {
        FZ_CHECK(m->role == WSYNC_CTL_TRAINER || m->role == WSYNC_CTL_INFERENCE, "JOIN role");
        FZ_CHECK(m->rank < WSYNC_CTL_MAX_RANKS, "JOIN rank");
        FZ_CHECK(!m->n_regions == !m->regions && !m->n_tensors == !m->tensors, "JOIN arrays");
        for (i = 0; i < m->n_regions; i++)
            FZ_CHECK(m->regions[i].len && m->regions[i].n_bytes <= WSYNC_FABRIC_DESC_MAX, "JOIN region");
        for (i = 0; i < m->n_tensors; i++) {
            const wsync_ctl_tensor *t = &m->tensors[i];
            size_t nl = strlen(t->name);
            uint64_t rows = t->ndim ? t->shape[0] : 1, rb = 0, bytes = 0;
            unsigned bits;
            FZ_CHECK(nl >= 1 && nl <= WSYNC_CTL_NAME_MAX, "JOIN name length");
            FZ_CHECK(t->dtype > 0 && t->dtype < WSYNC_DTYPE_COUNT, "JOIN dtype");
            bits = wsync_dtype_bits((wsync_dtype)t->dtype);
            FZ_CHECK(bits && bits % 8 == 0, "JOIN whole-byte dtype");
            FZ_CHECK(t->ndim <= WSYNC_CTL_DIMS_MAX, "JOIN ndim");
            FZ_CHECK(t->row_begin <= rows && t->row_count <= rows - t->row_begin, "JOIN rows inside the shape");
            FZ_CHECK(wsync_ctl_tensor_bytes(t, &rb, &bytes, NULL) == WSYNC_OK, "JOIN tensor bytes");
            FZ_CHECK(t->region < m->n_regions, "JOIN region index");
            FZ_CHECK(bytes <= m->regions[t->region].len && t->offset <= m->regions[t->region].len - bytes,
                     "JOIN tensor inside its region");
        }
    } else if (m->type == WSYNC_CTL_ASSIGN) {
        FZ_CHECK(m->role == WSYNC_CTL_TRAINER || m->role == WSYNC_CTL_INFERENCE, "ASSIGN role");
        FZ_CHECK(m->n_trainers && m->n_inference, "ASSIGN counts");
        FZ_CHECK(m->rank < (m->role == WSYNC_CTL_TRAINER ? m->n_trainers : m->n_inference), "ASSIGN rank");
        /* an inference rank, or n_inference + t: trainer t's gather inbox */
        for (i = 0; i < m->n_targets; i++)
            FZ_CHECK((uint64_t)m->targets[i].rank < (uint64_t)m->n_inference + m->n_trainers, "ASSIGN target rank");
        for (i = 0; i < m->n_transfers; i++) {
            const wsync_ctl_transfer *x = &m->transfers[i];
            uint64_t cap;
            FZ_CHECK(x->target < m->n_targets, "ASSIGN transfer target");
            FZ_CHECK(!i || x->group != m->transfers[i - 1].group || x->start_us >= m->transfers[i - 1].start_us,
                     "ASSIGN planned starts ascend within a group");
            cap = m->targets[x->target].desc.len;
            FZ_CHECK(x->len > 0 && x->len <= cap && x->dst_offset <= cap - x->len, "ASSIGN transfer inside");
        }
    } else if (m->type == WSYNC_CTL_OPEN) {
        for (i = 0; i < m->n_senders; i++)
            FZ_CHECK(m->senders[i] < WSYNC_CTL_MAX_RANKS && (!i || m->senders[i] > m->senders[i - 1]),
                     "OPEN senders ascending ranks");
    } else if (m->type == WSYNC_CTL_HELLO) {
        FZ_CHECK((m->role == WSYNC_CTL_TRAINER || m->role == WSYNC_CTL_INFERENCE) && m->rank < WSYNC_CTL_MAX_RANKS,
                 "HELLO role and rank");
    } else if (m->type >= WSYNC_CTL_DONE && m->type <= WSYNC_CTL_ERROR && m->type != WSYNC_CTL_COMMIT &&
               m->type != WSYNC_CTL_BYE) {
        FZ_CHECK(strlen(m->text) <= WSYNC_CTL_TEXT_MAX, "text length");
    }
    if (m->type == WSYNC_CTL_DONE) {
        uint32_t nn = m->n_named;
        FZ_CHECK(nn == WSYNC_CTL_NAMED_ALL ? m->named == NULL : !nn == !m->named, "DONE tensor bits");
        FZ_CHECK(!m->n_ran == !m->ran, "DONE transfer bits");
        FZ_CHECK(nn == WSYNC_CTL_NAMED_ALL || nn % 8 == 0 || !(m->named[nn / 8] >> (nn % 8)),
                 "DONE tensor bits past the count");
        FZ_CHECK(m->n_ran % 8 == 0 || !(m->ran[m->n_ran / 8] >> (m->n_ran % 8)), "DONE transfer bits past the count");
    }
}

static void fz_one(const uint8_t *in, size_t size)
{
    uint8_t *buf = (uint8_t *)malloc(size ? size : 1), *again = NULL;
    fz_heap h;
    wsync_allocator a;
    wsync_ctl_msg m, m2, m3;
    wsync_error e, e2;
    wsync_result r, r2, rh;
    uint32_t type = 0, pl = 0;
    size_t len = 0;
    if (!buf) return;
    memcpy(buf, in, size);
    memset(&h, 0, sizeof h);
    h.limit = 4 * size + 4096;
    memset(&a, 0, sizeof a);
    a.alloc = fz_alloc;
    a.free = fz_free;
    a.user = &h;
    memset(&e, 0, sizeof e);
    r = wsync_ctl_decode_frame(size ? buf : NULL, size, &a, &m, &e);
    /* the same with malloc and no wsync_error */
    r2 = wsync_ctl_decode_frame(size ? buf : NULL, size, NULL, &m2, NULL);
    FZ_CHECK(r == r2, "the default allocator and a NULL error give another result");
    if (r2 == WSYNC_OK) {
        FZ_CHECK(fz_same(&m, &m2), "the default allocator decodes other fields");
        wsync_ctl_msg_free(&m2);
    }
    /* the header alone */
    rh = wsync_ctl_header(size ? buf : NULL, size, &type, &pl, &e2);
    if (rh != WSYNC_OK) {
        FZ_CHECK(r == rh, "the header is refused but the frame got another result");
        FZ_CHECK(e2.code == rh && e2.message[0], "header error not reported");
    } else {
        FZ_CHECK(type >= WSYNC_CTL_JOIN && type <= WSYNC_CTL_OPEN && pl <= WSYNC_CTL_MAX_PAYLOAD, "header fields");
        FZ_CHECK(buf[0] == 'W' && buf[1] == 'S' && buf[2] == 'C' && buf[3] == WSYNC_CTL_VERSION, "header magic");
        if (r == WSYNC_OK) FZ_CHECK(pl == size - WSYNC_CTL_HEADER && type == m.type, "header and frame disagree");
    }
    if (r != WSYNC_OK) {
        FZ_CHECK(e.code == r && e.message[0], "rejection not reported");
        FZ_CHECK(m.storage_ == NULL && m.tensors == NULL && m.regions == NULL && m.targets == NULL &&
                     m.transfers == NULL && m.named == NULL && m.ran == NULL && m.senders == NULL,
                 "a rejection left storage");
        FZ_CHECK(h.live == 0, "a rejection leaked");
        free(buf);
        return;
    }
    fz_rules(&m);
    /* the oracle: the wire form is canonical */
    FZ_CHECK(wsync_ctl_encode(&m, NULL, 0, &len, &e) == WSYNC_ERR_LIMIT && len == size, "encode's size");
    if (size) {
        size_t len2 = 0;
        FZ_CHECK(wsync_ctl_encode(&m, buf, size - 1, &len2, &e) == WSYNC_ERR_LIMIT && len2 == size,
                 "encode into one byte less");
    }
    again = (uint8_t *)malloc(size ? size : 1);
    if (!again) abort();
    memset(&e, 0, sizeof e);
    if (wsync_ctl_encode(&m, again, size, &len, &e) != WSYNC_OK) {
        fprintf(stderr, "encode: %s\n", e.message);
        fz_fail(__LINE__, "an accepted message does not encode");
    }
    FZ_CHECK(len == size && memcmp(again, in, size) == 0, "re-encoding gives other bytes");
    FZ_CHECK(wsync_ctl_decode_frame(again, len, &a, &m3, &e) == WSYNC_OK, "the re-encoded bytes do not decode");
    FZ_CHECK(fz_same(&m, &m3), "decoding the re-encoded bytes gives other fields");
    wsync_ctl_msg_free(&m3);
    /* the one allocation failing */
    if (m.type == WSYNC_CTL_JOIN || m.type == WSYNC_CTL_ASSIGN || (m.type == WSYNC_CTL_DONE && m.storage_)) {
        h.fail_all = 1;
        FZ_CHECK(wsync_ctl_decode_frame(again, len, &a, &m3, &e) == WSYNC_ERR_OUT_OF_MEMORY && m3.storage_ == NULL,
                 "a failed allocation is not WSYNC_ERR_OUT_OF_MEMORY");
        h.fail_all = 0;
    }
    wsync_ctl_msg_free(&m);
    FZ_CHECK(m.storage_ == NULL, "free left storage");
    FZ_CHECK(h.live == 0, "leak after free");
    free(again);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_size = size;
    fz_fixed = 0;
    fz_one(data, size);
    if (size >= WSYNC_CTL_HEADER && size - WSYNC_CTL_HEADER <= WSYNC_CTL_MAX_PAYLOAD) {
        uint32_t pl = (uint32_t)(size - WSYNC_CTL_HEADER);
        if (data[8] != (uint8_t)pl || data[9] != (uint8_t)(pl >> 8) || data[10] != (uint8_t)(pl >> 16) ||
            data[11] != (uint8_t)(pl >> 24)) {
            uint8_t *fix = (uint8_t *)malloc(size);
            if (!fix) return 0;
            memcpy(fix, data, size);
            fix[8] = (uint8_t)pl;
            fix[9] = (uint8_t)(pl >> 8);
            fix[10] = (uint8_t)(pl >> 16);
            fix[11] = (uint8_t)(pl >> 24);
            fz_fixed = 1;
            fz_one(fix, size);
            free(fix);
        }
    }
    return 0;
}
