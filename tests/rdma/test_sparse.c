/* The sparse step's staging slots (wsync_rdma.h >>sparse): a slot packed
   from a real diff scatters into a copy of the old image and gives the new
   one byte for byte; every hostile slot (bad header, stale step, wrong
   sender or base, a torn digest, a region it may not name, positions out
   of order or outside the region, counts over the slot, padding or
   trailing bytes) is refused with the sender and the byte offset named,
   and the receiver's memory is not touched. Then the whole path with a
   controller, two trainers and an inference rank over TCP: the first step
   dense, the next sparse with nothing in live memory before COMMIT, a slot
   altered in staging fails the step with nothing written and the version
   kept, and the step after that goes dense (the ABORT reached the
   trainers), then sparse again. The same with an fp8 receiver (e4m3, 32 x
   32 tiles): a tile with nothing moved sends nothing (nor one whose bf16
   change e4m3 hides), one with a byte moved under the same scale sends
   that byte, one whose amax moved sends the whole tile and its scale; the
   receiver holds exactly what wsync_quantize_e4m3 of the data gives after
   every step; an e4m3 section altered in staging is refused before any
   write. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"

#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint32_t sp_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t sp_get64(const uint8_t *p)
{
    return sp_get32(p) | (uint64_t)sp_get32(p + 4) << 32;
}
static void sp_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}
static void sp_put64(uint8_t *p, uint64_t v)
{
    sp_put32(p, (uint32_t)v);
    sp_put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t sp_rng = 0x1234567ull;
static uint64_t sp_next(void)
{
    sp_rng ^= sp_rng << 13;
    sp_rng ^= sp_rng >> 7;
    sp_rng ^= sp_rng << 17;
    return sp_rng;
}

/* Packs the changes between old and cur (n bf16 elements) into one section
   per run of at most `run` elements: what a trainer does for a transfer. */
static uint64_t sp_pack(uint8_t *slot, uint64_t cap, const uint16_t *old, const uint16_t *cur, uint64_t n,
                        uint64_t run, uint32_t region, uint64_t step, uint64_t base, wsync_error *err,
                        wsync_result *res)
{
    wsync_sparse_writer w;
    uint32_t *pos = (uint32_t *)malloc((size_t)(run + 1) * 4);
    uint64_t at;
    *res = WSYNC_OK;
    wsync_sparse_begin(&w, slot, cap, step, base, 3);
    for (at = 0; at < n; at += run) {
        uint64_t m = n - at < run ? n - at : run, k, c = wsync_diff(old + at, cur + at, (size_t)m, 2, pos);
        uint32_t *pp;
        uint8_t *vv;
        if (c == 0) continue;
        if ((*res = wsync_sparse_section(&w, region, 2, at, c, &pp, &vv, err)) != WSYNC_OK) break;
        for (k = 0; k < c; k++) {
            pp[k] = pos[k];
            memcpy(vv + 2 * k, cur + at + pos[k], 2);
        }
    }
    free(pos);
    return *res == WSYNC_OK ? wsync_sparse_finish(&w) : 0;
}

static void sp_expect(wsync_sparse_expect *x, const uint64_t *lens, uint32_t n, uint64_t step, uint64_t base)
{
    memset(x, 0, sizeof *x);
    x->step = step;
    x->base = base;
    x->sender = 3;
    x->n_regions = n;
    x->region_len = lens;
}

static void sp_refused(const uint8_t *slot, uint64_t cap, const wsync_sparse_expect *x, const char *what,
                       const char *at);
static void sp_redigest(uint8_t *slot);

static void test_round_trip(void)
{
    enum { N = 1 << 16 };
    uint16_t *old = (uint16_t *)malloc(N * 2), *cur = (uint16_t *)malloc(N * 2), *recv = (uint16_t *)malloc(N * 2);
    uint64_t cap = 1 << 20, bytes, i, lens[2] = {0, N * 2};
    uint8_t *slot = (uint8_t *)calloc(1, (size_t)cap);
    uint8_t *regs[2];
    wsync_sparse_expect x;
    wsync_sparse_info info;
    wsync_error err;
    wsync_result res;
    uint64_t changed = 0;
    TEST_BEGIN("pack, validate, scatter: the new image byte for byte");
    for (i = 0; i < N; i++) old[i] = (uint16_t)sp_next();
    memcpy(cur, old, N * 2);
    for (i = 0; i < N; i++)
        if (sp_next() % 1000 < 16) { /* 1.6% */
            cur[i] ^= (uint16_t)(1 + sp_next() % 0xFFFF);
            changed++;
        }
    cur[0] ^= 1; /* the first and last elements too */
    cur[N - 1] ^= 0x8000;
    memcpy(recv, old, N * 2);
    bytes = sp_pack(slot, cap, old, cur, N, 4096, 1, 7, 6, &err, &res);
    CHECK_EQ_INT(res, WSYNC_OK);
    sp_expect(&x, lens, 2, 7, 6);
    CHECK_EQ_INT(wsync_sparse_validate(slot, cap, &x, &info, &err), WSYNC_OK);
    CHECK_MSG(err.code == WSYNC_OK, "%s", err.message);
    CHECK_EQ_INT(info.bytes, bytes);
    CHECK_EQ_INT(info.sections, 16);
    CHECK(info.changes >= changed && info.changes <= changed + 2);
    CHECK(bytes < N * 2 / 4); /* 6 bytes a change at 1.6%: a tenth of the dense bytes */
    regs[0] = NULL;
    regs[1] = (uint8_t *)recv;
    wsync_sparse_scatter(slot, regs);
    CHECK(memcmp(recv, cur, N * 2) == 0);
    /* validation needs only the slot's own bytes: a slot exactly that long passes */
    CHECK_EQ_INT(wsync_sparse_validate(slot, bytes + (64 - bytes % 64) % 64, &x, NULL, &err), WSYNC_OK);
    TEST_END();

    TEST_BEGIN("a slot with no changes: header only, base 0, validates against any base");
    bytes = sp_pack(slot, cap, old, old, N, 4096, 1, 8, 7, &err, &res);
    CHECK_EQ_INT(bytes, WSYNC_SPARSE_HEADER);
    sp_expect(&x, lens, 2, 8, 3);
    CHECK_EQ_INT(wsync_sparse_validate(slot, cap, &x, &info, &err), WSYNC_OK);
    CHECK_EQ_INT(info.sections, 0);
    TEST_END();

    TEST_BEGIN("overflow: a section that does not fit is refused by the writer, nothing reserved");
    {
        wsync_sparse_writer w;
        uint32_t *pp;
        uint8_t *vv;
        wsync_sparse_begin(&w, slot, 256, 1, 0, 3);
        CHECK_EQ_INT(wsync_sparse_section(&w, 1, 2, 0, 100, &pp, &vv, &err), WSYNC_ERR_LIMIT);
        CHECK_EQ_INT(w.used, WSYNC_SPARSE_HEADER);
        CHECK_EQ_INT(wsync_sparse_section(&w, 1, 2, 0, 10, &pp, &vv, &err), WSYNC_OK);
        CHECK_EQ_INT(w.used, WSYNC_SPARSE_HEADER + wsync_sparse_section_bytes(2, 10));
        CHECK_EQ_INT(wsync_sparse_section(&w, 1, 3, 0, 10, &pp, &vv, &err), WSYNC_ERR_INVALID_ARGUMENT);
        CHECK_EQ_INT(wsync_sparse_section(&w, 1, 2, 0, 0, &pp, &vv, &err), WSYNC_ERR_INVALID_ARGUMENT);
    }
    TEST_END();

    TEST_BEGIN("fp8 sections: e4m3 bytes (elem 1) and tile scales (elem 4) scatter; past the region refused");
    {
        wsync_sparse_writer w;
        uint32_t *pp;
        uint8_t *vv, mem[1024 + 64], want[1024 + 64], *regs[2];
        uint64_t lens2[2] = {0, 1024 + 64}; /* 1024 e4m3 bytes, then 16 scales */
        float f = 0.5f;
        memset(mem, 0x11, sizeof mem);
        memcpy(want, mem, sizeof mem);
        wsync_sparse_begin(&w, slot, cap, 9, 8, 3);
        CHECK_EQ_INT(wsync_sparse_section(&w, 1, 1, 100, 3, &pp, &vv, &err), WSYNC_OK);
        pp[0] = 0, pp[1] = 1, pp[2] = 923; /* bytes 100, 101 and 1023: the last e4m3 byte */
        vv[0] = 0x7e, vv[1] = 0x80, vv[2] = 0x01;
        want[100] = 0x7e, want[101] = 0x80, want[1023] = 0x01;
        CHECK_EQ_INT(wsync_sparse_section(&w, 1, 4, 1024 / 4, 1, &pp, &vv, &err), WSYNC_OK);
        pp[0] = 15; /* the last scale */
        memcpy(vv, &f, 4);
        memcpy(want + 1024 + 60, &f, 4);
        wsync_sparse_finish(&w);
        sp_expect(&x, lens2, 2, 9, 8);
        CHECK_EQ_INT(wsync_sparse_validate(slot, cap, &x, &info, &err), WSYNC_OK);
        CHECK_EQ_INT(info.changes, 4);
        regs[0] = NULL;
        regs[1] = mem;
        wsync_sparse_scatter(slot, regs);
        CHECK(memcmp(mem, want, sizeof mem) == 0);
        sp_put32(slot + 64 + wsync_sparse_section_bytes(1, 3) + 32, 16); /* a scale past the region */
        sp_redigest(slot);
        sp_refused(slot, cap, &x, "element 272 outside region 1 (272 elements)", NULL);
        sp_put32(slot + 64 + wsync_sparse_section_bytes(1, 3) + 32, 15);
        sp_put32(slot + 64 + 32 + 8, 988); /* an e4m3 byte past the region: 100 + 988 */
        sp_redigest(slot);
        sp_refused(slot, cap, &x, "element 1088 outside region 1 (1088 elements)", NULL);
    }
    TEST_END();

    TEST_BEGIN("slot sizes");
    CHECK_EQ_INT(wsync_sparse_slot_bytes(1 << 20, 4), 1 << 18);
    CHECK_EQ_INT(wsync_sparse_slot_bytes(1000, 3), 320);
    CHECK_EQ_INT(wsync_sparse_slot_bytes(100, 4), 0);
    CHECK_EQ_INT(wsync_sparse_slot_bytes(100, 0), 0);
    TEST_END();
    free(old);
    free(cur);
    free(recv);
    free(slot);
}

/* One hostile slot: refused with code, the message naming the sender and
   `what`, and the region untouched. */
static void sp_refused(const uint8_t *slot, uint64_t cap, const wsync_sparse_expect *x, const char *what,
                       const char *at)
{
    wsync_error err;
    wsync_result r = wsync_sparse_validate(slot, cap, x, NULL, &err);
    CHECK_MSG(r == WSYNC_ERR_CORRUPT, "%s: result %d", what, (int)r);
    CHECK_MSG(strstr(err.message, "trainer 3") != NULL, "%s: %s", what, err.message);
    CHECK_MSG(strstr(err.message, what) != NULL, "wanted '%s' in: %s", what, err.message);
    if (at) CHECK_MSG(strstr(err.message, at) != NULL, "wanted '%s' in: %s", at, err.message);
}

/* Rewrites the header's digest after a change to the sections. */
static void sp_redigest(uint8_t *slot)
{
    uint64_t bytes = sp_get64(slot + 32);
    sp_put64(slot + 40, wsync_digest(slot + WSYNC_SPARSE_HEADER, (size_t)bytes));
}

static void test_hostile(void)
{
    enum { N = 4096 };
    uint16_t old[N], cur[N];
    uint64_t cap = 1 << 16, bytes, i, lens[2] = {0, N * 2};
    uint8_t *slot = (uint8_t *)calloc(1, (size_t)cap), *good = (uint8_t *)calloc(1, (size_t)cap);
    wsync_sparse_expect x;
    wsync_error err;
    wsync_result res;
    for (i = 0; i < N; i++) old[i] = cur[i] = (uint16_t)i;
    for (i = 0; i < N; i += 37) cur[i] ^= 0x5a5a;
    bytes = sp_pack(good, cap, old, cur, N, 1024, 1, 5, 4, &err, &res);
    sp_expect(&x, lens, 2, 5, 4);

    TEST_BEGIN("hostile: the header");
    CHECK_EQ_INT(wsync_sparse_validate(good, cap, &x, NULL, &err), WSYNC_OK);
    memcpy(slot, good, cap);
    slot[0] ^= 1;
    sp_refused(slot, cap, &x, "no slot header", "byte 0");
    memset(slot, 0, cap); /* a slot nobody wrote */
    sp_refused(slot, cap, &x, "no slot header", "byte 0");
    memcpy(slot, good, cap);
    slot[4] = 2;
    sp_refused(slot, cap, &x, "version 2", "byte 4");
    x.step = 6; /* last step's slot, read at the next commit */
    sp_refused(good, cap, &x, "stale", "byte 8");
    x.step = 5;
    x.sender = 2;
    CHECK_EQ_INT(wsync_sparse_validate(good, cap, &x, NULL, &err), WSYNC_ERR_CORRUPT);
    CHECK(strstr(err.message, "names sender 3") != NULL);
    x.sender = 3;
    x.base = 3; /* the receiver did not commit the step the changes are against */
    sp_refused(good, cap, &x, "changes against step 4, but this rank holds step 3", "byte 16");
    x.base = 4;
    memcpy(slot, good, cap);
    slot[50] = 1;
    sp_refused(slot, cap, &x, "reserved bytes not zero", "byte 48");
    memcpy(slot, good, cap);
    slot[bytes - 1] ^= 0x40; /* a torn write: the last value byte */
    sp_refused(slot, cap, &x, "digest", "byte 40");
    sp_refused(good, 128, &x, "over the slot", "byte 32"); /* the slot is smaller than the header says */
    sp_refused(good, 32, &x, "holds no header", "byte 0");
    TEST_END();

    TEST_BEGIN("hostile: sections (each with its digest made right)");
    memcpy(slot, good, cap);
    sp_put32(slot + 64, 0); /* the staging region itself */
    sp_redigest(slot);
    sp_refused(slot, cap, &x, "region 0, not one", "byte 64");
    memcpy(slot, good, cap);
    sp_put32(slot + 64, 9);
    sp_redigest(slot);
    sp_refused(slot, cap, &x, "region 9", "byte 64");
    memcpy(slot, good, cap);
    sp_put32(slot + 68, 3);
    sp_redigest(slot);
    sp_refused(slot, cap, &x, "elements of 3 bytes", "byte 68");
    memcpy(slot, good, cap);
    sp_put64(slot + 72, N); /* origin past the region */
    sp_refused((sp_redigest(slot), slot), cap, &x, "origin element 4096 outside region 1", "byte 72");
    memcpy(slot, good, cap);
    sp_put64(slot + 72, N - 10); /* origin inside, positions run past the end */
    sp_redigest(slot);
    sp_refused(slot, cap, &x, "outside region 1", NULL);
    memcpy(slot, good, cap);
    sp_put32(slot + 96 + 4, 0); /* the second position below the first */
    sp_redigest(slot);
    sp_refused(slot, cap, &x, "not ascending", "byte 100");
    memcpy(slot, good, cap);
    sp_put32(slot + 96 + 4, sp_get32(slot + 96)); /* a repeat */
    sp_redigest(slot);
    sp_refused(slot, cap, &x, "not ascending", "byte 100");
    memcpy(slot, good, cap);
    sp_put64(slot + 80, 1u << 30); /* a count over the slot */
    sp_redigest(slot);
    sp_refused(slot, cap, &x, "over the watermark", "byte 80");
    memcpy(slot, good, cap);
    sp_put64(slot + 80, 0);
    sp_redigest(slot);
    sp_refused(slot, cap, &x, "0 changes", "byte 80");
    memcpy(slot, good, cap);
    slot[88] = 1;
    sp_redigest(slot);
    sp_refused(slot, cap, &x, "reserved bytes not zero", "byte 88");
    memcpy(slot, good, cap);
    sp_put32(slot + 28, sp_get32(slot + 28) + 1); /* one section more than there is */
    sp_refused(slot, cap, &x, "5 sections, but section 4 would start", "byte 28");
    memcpy(slot, good, cap);
    sp_put32(slot + 28, sp_get32(slot + 28) - 1); /* bytes left after the last */
    sp_refused(slot, cap, &x, "after the last section", NULL);
    memcpy(slot, good, cap);
    sp_put32(slot + 28, 0); /* sections dropped, base kept */
    sp_refused(slot, cap, &x, "without sections", "byte 16");
    TEST_END();

    TEST_BEGIN("hostile: padding after odd counts is checked");
    {
        wsync_sparse_writer w;
        uint32_t *pp;
        uint8_t *vv;
        uint64_t b;
        wsync_sparse_begin(&w, slot, cap, 5, 4, 3);
        CHECK_EQ_INT(wsync_sparse_section(&w, 1, 2, 10, 3, &pp, &vv, &err), WSYNC_OK);
        pp[0] = 0, pp[1] = 5, pp[2] = 9;
        memset(vv, 0xab, 6);
        b = wsync_sparse_finish(&w);
        CHECK_EQ_INT(b, 64 + 32 + 16 + 8);
        CHECK_EQ_INT(wsync_sparse_validate(slot, cap, &x, NULL, &err), WSYNC_OK);
        slot[64 + 32 + 12] = 1; /* the positions' pad */
        sp_redigest(slot);
        sp_refused(slot, cap, &x, "padding not zero", "byte 64");
        slot[64 + 32 + 12] = 0;
        slot[64 + 32 + 16 + 7] = 1; /* the values' pad */
        sp_redigest(slot);
        sp_refused(slot, cap, &x, "padding not zero", "byte 64");
    }
    TEST_END();

    TEST_BEGIN("random corruption never validates into a write outside the region");
    {
        unsigned t, accepted = 0;
        uint8_t *mem = (uint8_t *)malloc(N * 2 + 64), *regs[2];
        regs[0] = NULL;
        regs[1] = mem;
        for (t = 0; t < 20000; t++) {
            uint64_t at = sp_next() % bytes;
            memcpy(slot, good, (size_t)bytes);
            slot[at] ^= (uint8_t)(1 + sp_next() % 255);
            if (at >= 64 && sp_next() % 2) sp_redigest(slot); /* half past the digest */
            memset(mem + N * 2, 0xcd, 64);
            if (wsync_sparse_validate(slot, cap, &x, NULL, &err) == WSYNC_OK) {
                accepted++;
                wsync_sparse_scatter(slot, regs);
            } else
                CHECK_MSG(strstr(err.message, "staging slot of trainer 3 for step 5, byte ") != NULL, "%s",
                          err.message);
            for (i = 0; i < 64; i++) CHECK(mem[N * 2 + i] == 0xcd);
        }
        CHECK(accepted > 0); /* a changed value byte with its digest made right is a valid slot */
        free(mem);
    }
    TEST_END();
    free(slot);
    free(good);
}

/* ---- the path through the controller ---- */

#define E_ROWS 512u
#define E_COLS 64u
#define E_N (E_ROWS * E_COLS)
#define E_STG (64u << 10) /* the receiver's staging: 32 KiB a trainer */
#define E_BLOCK 32u       /* fp8: 32 x 32 tiles, 16 rows of 2; each trainer's 256 rows hold 16 whole tiles */
#define E_TILES ((E_ROWS / E_BLOCK) * (E_COLS / E_BLOCK))
#define E_LIVE (E_N * 2)  /* the receiver's region 0: bf16, or fp8 bytes then the tiles' scales */

#define E_TMAX 3u
static uint16_t e_data[E_N];    /* the step's tensor, as the trainers hold it */
static uint16_t e_before[E_N];  /* the previous step's */
static int e_fp8;               /* the inference rank takes the tensor as fp8 e4m3 */
static uint32_t e_ntr = 2;      /* trainers; trainer k holds rows [e_row0[k], e_row0[k + 1]) */
static uint32_t e_row0[E_TMAX + 1] = {0, E_ROWS / 2, E_ROWS};
static int e_inbox;             /* trainers declare a gather inbox (region 1): fp8 tiles across their shards */
static uint64_t e_stg = E_STG;  /* the receiver's staging bytes */
static int e_fail;              /* the receiver's next on_commit fails */

/* What the receiver's region 0 holds after a dense step of data: the
   bf16 bytes, or (fp8) wsync_quantize_e4m3's bytes and scales. */
static void e_expect(const uint16_t *data, uint8_t *out)
{
    wsync_error e;
    memset(out, 0, E_LIVE);
    if (!e_fp8) memcpy(out, data, E_N * 2);
    else wsync_quantize_e4m3(data, E_ROWS, E_COLS, E_COLS, E_BLOCK, out, (float *)(void *)(out + E_N), &e);
}

typedef struct e_rank {
    uint32_t role, rank;
    wsync_fabric f;
    wsync_fabric_mr *mr[2];
    wsync_fabric_desc desc[2];
    uint8_t *mem[2];
    uint64_t len[2];
    wsync_ctl_tensor t[2];
    uint32_t nt;
    wsync_rank *r;
    wsync_result res;
    wsync_error err;
    pthread_t th;
    int th_on;
    volatile uint64_t pushed;    /* trainers: the last step pushed */
    wsync_sparse_stats st;       /* and its figures */
    volatile int done;
    unsigned port;
} e_rank;

static void e_sleep_ms(int ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static wsync_result e_on_commit(void *user, uint64_t step, wsync_error *err)
{
    e_rank *r = (e_rank *)user;
    static uint8_t want[E_LIVE];
    if (e_fail) {
        e_fail = 0;
        return wsync_error_set(err, WSYNC_ERR_DIGEST_MISMATCH, "step %llu: failed on purpose",
                               (unsigned long long)step);
    }
    e_expect(e_data, want);
    if (memcmp(r->mem[0], want, (size_t)r->len[0]) != 0) /* the verification: every byte, as a dense step writes them */
        return wsync_error_set(err, WSYNC_ERR_DIGEST_MISMATCH, "step %llu: not the trainers' data",
                               (unsigned long long)step);
    return WSYNC_OK;
}

static int e_setup(e_rank *r, uint32_t role, uint32_t rank)
{
    wsync_fabric_tcp_options o;
    wsync_error e;
    uint32_t i;
    memset(r, 0, sizeof *r);
    r->role = role;
    r->rank = rank;
    r->t[0].name = "w";
    r->t[0].dtype = WSYNC_DTYPE_BF16;
    r->t[0].ndim = 2;
    r->t[0].shape[0] = E_ROWS;
    r->t[0].shape[1] = E_COLS;
    r->t[0].row_begin = role == WSYNC_CTL_TRAINER ? e_row0[rank] : 0;
    r->t[0].row_count = role == WSYNC_CTL_TRAINER ? e_row0[rank + 1] - e_row0[rank] : E_ROWS;
    r->nt = 1;
    r->len[0] = (uint64_t)r->t[0].row_count * E_COLS * 2;
    if (role == WSYNC_CTL_INFERENCE && e_fp8) { /* e4m3 bytes, then a scale a tile */
        r->t[0].to_dtype = WSYNC_DTYPE_F8_E4M3;
        r->t[0].block = E_BLOCK;
        r->t[0].scale_offset = E_N;
        r->len[0] = E_N + 4 * E_TILES;
    }
    if (role == WSYNC_CTL_TRAINER && e_inbox) { /* room for every row: more than the plan needs */
        r->t[1].name = WSYNC_CTL_INBOX;
        r->t[1].dtype = WSYNC_DTYPE_U8;
        r->t[1].ndim = 1;
        r->t[1].shape[0] = r->t[1].row_count = E_N * 2;
        r->t[1].region = 1;
        r->nt = 2;
        r->len[1] = E_N * 2;
    }
    if (role == WSYNC_CTL_INFERENCE) { /* and its staging */
        r->t[1].name = WSYNC_CTL_STAGING;
        r->t[1].dtype = WSYNC_DTYPE_U8;
        r->t[1].ndim = 1;
        r->t[1].shape[0] = r->t[1].row_count = e_stg;
        r->t[1].region = 1;
        r->nt = 2;
        r->len[1] = e_stg;
    }
    memset(&o, 0, sizeof o);
    o.send_only = role == WSYNC_CTL_TRAINER && !e_inbox; /* an inbox takes the other trainers' writes */
    o.sender_id = rank;
    o.timeout_ms = 3000;
    if (wsync_fabric_tcp_open(&o, &r->f, &e) != WSYNC_OK) {
        printf("  fabric: %s\n", e.message);
        return 0;
    }
    for (i = 0; i < r->nt; i++)
        if (!(r->mem[i] = (uint8_t *)calloc(1, (size_t)r->len[i])) ||
            r->f.reg(r->f.user, r->mem[i], r->len[i], WSYNC_MEM_HOST, &r->mr[i], &r->desc[i], &e) != WSYNC_OK) {
            printf("  reg: %s\n", e.message);
            return 0;
        }
    return 1;
}

static wsync_result e_join(e_rank *r)
{
    wsync_rank_options o;
    memset(&o, 0, sizeof o);
    o.port = r->port;
    o.role = r->role;
    o.rank = r->rank;
    o.tensors = r->t;
    o.n_tensors = r->nt;
    o.fabric = &r->f;
    o.mrs = r->mr;
    o.descs = r->desc;
    o.n_regions = r->nt;
    o.timeout_ms = 5000;
    o.on_commit = e_on_commit;
    o.user = r;
    o.sparse = 1;
    o.sparse_max = e_fp8 ? 1.0 : 0; /* fp8: a region with a rescaled tile (5 bytes a byte) still sparse */
    return wsync_rank_join(&o, &r->r, &r->err);
}

static void *e_trainer(void *p)
{
    e_rank *r = (e_rank *)p;
    wsync_error e;
    if ((r->res = e_join(r)) != WSYNC_OK) {
        r->done = 1;
        return NULL;
    }
    for (;;) {
        uint64_t step = 0;
        int bye = 0;
        wsync_result res;
        if (wsync_rank_wait_go(r->r, &step, &bye, -1, &e) != WSYNC_OK || bye) break;
        memcpy(r->mem[0], e_data + (size_t)e_row0[r->rank] * E_COLS, (size_t)r->len[0]); /* its rows */
        res = wsync_rank_push(r->r, &e);
        wsync_rank_sparse_stats(r->r, &r->st);
        r->pushed = step;
        if (wsync_rank_done(r->r, step, res, res == WSYNC_OK ? "" : e.message, &e) != WSYNC_OK) break;
    }
    r->done = 1;
    return NULL;
}

static void *e_inference(void *p)
{
    e_rank *r = (e_rank *)p;
    r->res = e_join(r);
    r->done = 1;
    return NULL;
}

static void *e_accept(void *p)
{
    wsync_error e;
    return (void *)(intptr_t)wsync_controller_accept((wsync_controller *)p, &e);
}

static void e_free(e_rank *r)
{
    uint32_t i;
    if (r->th_on) pthread_join(r->th, NULL);
    wsync_rank_close(r->r);
    for (i = 0; i < 2; i++) {
        if (r->mr[i]) r->f.dereg(r->f.user, r->mr[i]);
        free(r->mem[i]);
    }
    if (r->f.close) wsync_fabric_close(&r->f);
}

/* The next step's data: about 1% of the elements changed. */
static void e_next(void)
{
    uint32_t i;
    memcpy(e_before, e_data, sizeof e_data);
    for (i = 0; i < E_N; i++)
        if (sp_next() % 100 == 0) e_data[i] = (uint16_t)(e_data[i] + 1 + sp_next() % 1000);
}

/* Whether every trainer pushed step s. */
static int e_pushed(const e_rank *t, uint64_t s)
{
    uint32_t i;
    for (i = 0; i < e_ntr; i++)
        if (t[i].pushed != s) return 0;
    return 1;
}

/* GO, every trainer pushed, then (when the receiver's live memory must be
   untouched so far) the check, then finish. */
static wsync_result e_step(wsync_controller *c, e_rank *t, e_rank *in, uint64_t s, int untouched, int corrupt,
                           wsync_error *err)
{
    int k;
    wsync_result r = wsync_controller_go(c, s, err);
    if (r != WSYNC_OK) return r;
    if (e_inbox) { /* the gather's barrier goes through finish: the trainers cannot push before it */
        CHECK(!untouched && !corrupt);
        r = wsync_controller_finish(c, s, err);
        for (k = 0; k < 5000 && !e_pushed(t, s); k++) e_sleep_ms(1);
        CHECK_MSG(e_pushed(t, s), "step %llu: the trainers pushed", (unsigned long long)s);
        return r;
    }
    for (k = 0; k < 5000 && !e_pushed(t, s); k++) e_sleep_ms(1);
    CHECK_MSG(e_pushed(t, s), "step %llu: the trainers pushed", (unsigned long long)s);
    if (untouched) {
        static uint8_t was[E_LIVE];
        e_expect(e_before, was);
        CHECK_MSG(memcmp(in->mem[0], was, (size_t)in->len[0]) == 0, "step %llu: nothing in live memory before COMMIT",
                  (unsigned long long)s);
    }
    if (corrupt) in->mem[1][WSYNC_SPARSE_HEADER + 40] ^= 0x10; /* trainer 0's first section, a position byte */
    return wsync_controller_finish(c, s, err);
}

static void test_controller_path(void)
{
    wsync_controller_options co;
    wsync_controller *c = NULL;
    e_rank t[2], in;
    pthread_t acc;
    void *acc_res = NULL;
    wsync_error err;
    uint32_t i;
    int ok;
    TEST_BEGIN("controller: dense, sparse (nothing live before COMMIT), a bad slot refused, dense, sparse");
    for (i = 0; i < E_N; i++) e_data[i] = (uint16_t)sp_next();
    memset(&co, 0, sizeof co);
    co.n_trainers = 2;
    co.n_inference = 1;
    co.join_timeout_ms = 10000;
    co.step_timeout_ms = 5000;
    ok = wsync_controller_open(&co, &c, &err) == WSYNC_OK;
    CHECK_MSG(ok, "%s", err.message);
    ok = ok && e_setup(&t[0], WSYNC_CTL_TRAINER, 0) && e_setup(&t[1], WSYNC_CTL_TRAINER, 1) &&
         e_setup(&in, WSYNC_CTL_INFERENCE, 0);
    CHECK(ok);
    if (ok) {
        t[0].port = t[1].port = in.port = wsync_controller_port(c);
        ok = pthread_create(&acc, NULL, e_accept, c) == 0;
        t[0].th_on = pthread_create(&t[0].th, NULL, e_trainer, &t[0]) == 0;
        t[1].th_on = pthread_create(&t[1].th, NULL, e_trainer, &t[1]) == 0;
        in.th_on = pthread_create(&in.th, NULL, e_inference, &in) == 0;
        if (ok) pthread_join(acc, &acc_res);
        ok = ok && (wsync_result)(intptr_t)acc_res == WSYNC_OK;
        CHECK_MSG(ok, "accept: %s / %s / %s", t[0].err.message, t[1].err.message, in.err.message);
    }
    if (ok) {
        /* 1: dense (no base yet) */
        memcpy(e_before, e_data, sizeof e_data);
        CHECK_EQ_INT(e_step(c, t, &in, 1, 0, 0, &err), WSYNC_OK);
        CHECK_EQ_INT(t[0].st.regions_sparse, 0);
        CHECK_EQ_INT(t[0].st.regions_dense, 1);
        CHECK_EQ_INT(t[0].st.dense_bytes, E_N);
        CHECK_EQ_INT(wsync_rank_version(in.r), 1);
        /* 2: sparse: staging only until COMMIT, then the tensor exact */
        e_next();
        CHECK_EQ_INT(e_step(c, t, &in, 2, 1, 0, &err), WSYNC_OK);
        CHECK_MSG(err.code == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(t[0].st.regions_sparse, 1);
        CHECK_EQ_INT(t[1].st.regions_sparse, 1);
        CHECK_EQ_INT(t[0].st.dense_bytes, 0);
        CHECK(t[0].st.changes > 0 && t[1].st.changes > 0);
        CHECK(t[0].st.staged_bytes < E_N / 4);
        CHECK_EQ_INT(wsync_rank_version(in.r), 2);
        CHECK(memcmp(in.mem[0], e_data, sizeof e_data) == 0);
        {
            wsync_sparse_stats is;
            wsync_rank_sparse_stats(in.r, &is);
            CHECK_EQ_INT(is.step, 2);
            CHECK_EQ_INT(is.scattered, t[0].st.changes + t[1].st.changes);
        }
        /* 3: trainer 0's slot altered in staging after its write: refused by
           the receiver before any write, the version kept */
        e_next();
        CHECK_EQ_INT(e_step(c, t, &in, 3, 1, 1, &err), WSYNC_ERR_CORRUPT);
        CHECK_MSG(strstr(err.message, "staging slot of trainer 0 for step 3") != NULL &&
                      strstr(err.message, "digest") != NULL,
                  "%s", err.message);
        CHECK_EQ_INT(wsync_rank_version(in.r), 2);
        CHECK(memcmp(in.mem[0], e_before, sizeof e_before) == 0);
        /* 4: the trainers saw the ABORT: dense, and exact */
        memcpy(e_before, e_data, sizeof e_data); /* step 3's data, never committed */
        e_next();
        CHECK_EQ_INT(e_step(c, t, &in, 4, 0, 0, &err), WSYNC_OK);
        CHECK_EQ_INT(t[0].st.regions_sparse, 0);
        CHECK_EQ_INT(t[1].st.regions_dense, 1);
        CHECK_EQ_INT(wsync_rank_version(in.r), 4);
        /* 5: sparse again */
        e_next();
        CHECK_EQ_INT(e_step(c, t, &in, 5, 1, 0, &err), WSYNC_OK);
        CHECK_EQ_INT(t[0].st.regions_sparse, 1);
        CHECK_EQ_INT(wsync_rank_version(in.r), 5);
        CHECK(memcmp(in.mem[0], e_data, sizeof e_data) == 0);
    }
    wsync_controller_close(c);
    e_free(&t[0]);
    e_free(&t[1]);
    e_free(&in);
    TEST_END();
}

/* ---- fp8 receivers: the same path, the inference rank taking e4m3 ---- */

static uint16_t e_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

#define E_AT(r, c) e_data[(size_t)(r) * E_COLS + (c)]

/* The last tile (rows 480-511, columns 32-63) is all zeros (scale 1)
   until step 8. */
#define E_ZERO(i) ((i) / E_COLS >= E_ROWS - E_BLOCK && (i) % E_COLS >= E_BLOCK)

/* Values in (-1, 1), each tile's first element 4: its amax (scale 4 / 448). */
static void e_fp8_data(void)
{
    uint32_t i, tr, tc;
    for (i = 0; i < E_N; i++) e_data[i] = e_bf16((float)((int)(sp_next() % 1999) - 999) / 1000.0f);
    for (tr = 0; tr < E_ROWS; tr += E_BLOCK)
        for (tc = 0; tc < E_COLS; tc += E_BLOCK) E_AT(tr, tc) = e_bf16(4.0f);
    for (i = 0; i < E_N; i++)
        if (E_ZERO(i)) e_data[i] = 0;
}

/* A random step: about 1% of the elements to new values in (-1, 1), and
   an eighth of the tiles' amax moved (their first element to 2, 4 or 8). */
static void e_fp8_next(void)
{
    uint32_t i;
    memcpy(e_before, e_data, sizeof e_data);
    for (i = 0; i < E_N; i++) {
        if (E_ZERO(i)) continue;
        if ((i / E_COLS) % E_BLOCK == 0 && (i % E_COLS) % E_BLOCK == 0) {
            if (sp_next() % 8 == 0) e_data[i] = e_bf16((float)(2u << (sp_next() % 3)));
        } else if (sp_next() % 100 == 0)
            e_data[i] = e_bf16((float)((int)(sp_next() % 1999) - 999) / 1000.0f);
    }
}

/* One element to +-1.5: below every amax (2 at least), and a byte that
   moves (e4m3 of 1.5 / scale is none of what (-1, 1) gives). */
static void e_fp8_poke(uint32_t r, uint32_t c)
{
    E_AT(r, c) = E_AT(r, c) == e_bf16(1.5f) ? e_bf16(-1.5f) : e_bf16(1.5f);
}

/* Trainer 0's slot in the receiver's staging: its first section of e4m3
   bytes gets a last position past region 0, the digest made right again. */
static int e_fp8_corrupt(e_rank *in)
{
    uint8_t *slot = in->mem[1];
    uint32_t n = sp_get32(slot + 28), i;
    uint64_t at = WSYNC_SPARSE_HEADER;
    for (i = 0; i < n; i++) {
        uint32_t elem = sp_get32(slot + at + 4);
        uint64_t count = sp_get64(slot + at + 16);
        if (elem == 1) {
            sp_put32(slot + at + WSYNC_SPARSE_SECTION + 4 * (count - 1), 0xFFFFFFF0u);
            sp_redigest(slot);
            return 1;
        }
        at += wsync_sparse_section_bytes(elem, count);
    }
    return 0;
}

static void test_fp8_path(void)
{
    wsync_controller_options co;
    wsync_controller *c = NULL;
    e_rank t[2], in;
    pthread_t acc;
    void *acc_res = NULL;
    wsync_error err;
    uint64_t s;
    int ok;
    TEST_BEGIN("fp8 receiver: per tile nothing, the moved bytes, or the whole tile and its scale; exact every step");
    e_fp8 = 1;
    e_fp8_data();
    E_AT(2, 33) = e_bf16(1.0f); /* tile (0, 1): 1 / (4 / 448) = 112, exact in e4m3 */
    memset(&co, 0, sizeof co);
    co.n_trainers = 2;
    co.n_inference = 1;
    co.join_timeout_ms = 10000;
    co.step_timeout_ms = 5000;
    ok = wsync_controller_open(&co, &c, &err) == WSYNC_OK;
    CHECK_MSG(ok, "%s", err.message);
    ok = ok && e_setup(&t[0], WSYNC_CTL_TRAINER, 0) && e_setup(&t[1], WSYNC_CTL_TRAINER, 1) &&
         e_setup(&in, WSYNC_CTL_INFERENCE, 0);
    CHECK(ok);
    if (ok) {
        t[0].port = t[1].port = in.port = wsync_controller_port(c);
        ok = pthread_create(&acc, NULL, e_accept, c) == 0;
        t[0].th_on = pthread_create(&t[0].th, NULL, e_trainer, &t[0]) == 0;
        t[1].th_on = pthread_create(&t[1].th, NULL, e_trainer, &t[1]) == 0;
        in.th_on = pthread_create(&in.th, NULL, e_inference, &in) == 0;
        if (ok) pthread_join(acc, &acc_res);
        ok = ok && (wsync_result)(intptr_t)acc_res == WSYNC_OK;
        CHECK_MSG(ok, "accept: %s / %s / %s", t[0].err.message, t[1].err.message, in.err.message);
    }
    if (ok) {
        uint64_t moved = 0, rescaled = 0, sparse = 0;
        /* 1: dense (no base yet) */
        memcpy(e_before, e_data, sizeof e_data);
        CHECK_EQ_INT(e_step(c, t, &in, 1, 0, 0, &err), WSYNC_OK);
        CHECK_MSG(err.code == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(t[0].st.regions_dense, 1);
        CHECK_EQ_INT(t[0].st.fp8_gathered, 0);
        /* 2: in trainer 0's rows, tile (0, 0) a byte moved under the same
           scale, tile (0, 1) a bf16 change e4m3 hides, tile (1, 0) its amax
           doubled; every other tile, and all of trainer 1's, unchanged */
        memcpy(e_before, e_data, sizeof e_data);
        E_AT(1, 1) = e_bf16(3.0f);
        E_AT(2, 33) = e_bf16(1.0078125f); /* 112.875: still 112 */
        E_AT(32, 0) = e_bf16(8.0f);
        CHECK_EQ_INT(e_step(c, t, &in, 2, 1, 0, &err), WSYNC_OK);
        CHECK_MSG(err.code == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(t[0].st.regions_sparse, 1);
        CHECK_EQ_INT(t[0].st.fp8_tiles, E_TILES / 2);
        CHECK_EQ_INT(t[0].st.fp8_tiles_moved, 1);
        CHECK_EQ_INT(t[0].st.fp8_tiles_rescaled, 1);
        CHECK_EQ_INT(t[0].st.fp8_moved, 1 + E_BLOCK * E_BLOCK); /* the byte, and the rescaled tile whole */
        CHECK_EQ_INT(t[0].st.changes, 1 + E_BLOCK * E_BLOCK + 1);
        CHECK_EQ_INT(t[0].st.staged_bytes, WSYNC_SPARSE_HEADER + wsync_sparse_section_bytes(1, 1 + E_BLOCK * E_BLOCK) +
                                               wsync_sparse_section_bytes(4, 1));
        CHECK_EQ_INT(t[0].st.dense_bytes, 0);
        CHECK_EQ_INT(t[1].st.regions_sparse, 1); /* nothing moved: the header only */
        CHECK_EQ_INT(t[1].st.fp8_tiles, E_TILES / 2);
        CHECK_EQ_INT(t[1].st.fp8_moved, 0);
        CHECK_EQ_INT(t[1].st.changes, 0);
        CHECK_EQ_INT(t[1].st.staged_bytes, WSYNC_SPARSE_HEADER);
        CHECK_EQ_INT(wsync_rank_version(in.r), 2);
        {
            wsync_sparse_stats is;
            wsync_rank_sparse_stats(in.r, &is);
            CHECK_EQ_INT(is.scattered, 1 + E_BLOCK * E_BLOCK + 1);
        }
        /* 3-5: random steps, each exact (the receiver checks every byte and
           scale against wsync_quantize_e4m3 of the data) */
        for (s = 3; s <= 5; s++) {
            e_fp8_next();
            CHECK_EQ_INT(e_step(c, t, &in, s, 1, 0, &err), WSYNC_OK);
            CHECK_MSG(err.code == WSYNC_OK, "step %llu: %s", (unsigned long long)s, err.message);
            CHECK_EQ_INT(wsync_rank_version(in.r), s);
            moved += t[0].st.fp8_tiles_moved + t[1].st.fp8_tiles_moved;
            rescaled += t[0].st.fp8_tiles_rescaled + t[1].st.fp8_tiles_rescaled;
            sparse += t[0].st.regions_sparse + t[1].st.regions_sparse;
        }
        CHECK_MSG(moved > 0 && rescaled > 0 && sparse > 0, "moved %llu, rescaled %llu, sparse %llu",
                  (unsigned long long)moved, (unsigned long long)rescaled, (unsigned long long)sparse);
        /* 6: a byte moved in each trainer's rows; trainer 0's e4m3 section
           altered in staging (a position past the region, the digest made
           right): refused before any write, trainer 1's slot not scattered
           either, the version kept */
        memcpy(e_before, e_data, sizeof e_data);
        e_fp8_poke(5, 5);
        e_fp8_poke(300, 7);
        {
            int k;
            wsync_result r = wsync_controller_go(c, 6, &err);
            CHECK_EQ_INT(r, WSYNC_OK);
            for (k = 0; k < 5000 && (t[0].pushed != 6 || t[1].pushed != 6); k++) e_sleep_ms(1);
            CHECK_EQ_INT(t[0].st.regions_sparse, 1);
            CHECK_EQ_INT(t[1].st.fp8_moved, 1);
            CHECK(e_fp8_corrupt(&in));
            CHECK_EQ_INT(wsync_controller_finish(c, 6, &err), WSYNC_ERR_CORRUPT);
            CHECK_MSG(strstr(err.message, "staging slot of trainer 0 for step 6") != NULL &&
                          strstr(err.message, "outside region 0") != NULL,
                      "%s", err.message);
        }
        CHECK_EQ_INT(wsync_rank_version(in.r), 5);
        {
            static uint8_t was[E_LIVE];
            e_expect(e_before, was);
            CHECK(memcmp(in.mem[0], was, (size_t)in.len[0]) == 0);
        }
        /* 7: the trainers saw the ABORT: dense, exact */
        memcpy(e_before, e_data, sizeof e_data);
        e_fp8_poke(6, 6);
        CHECK_EQ_INT(e_step(c, t, &in, 7, 0, 0, &err), WSYNC_OK);
        CHECK_EQ_INT(t[0].st.regions_dense, 1);
        CHECK_EQ_INT(t[1].st.regions_dense, 1);
        /* 8: sparse again from the copy the dense step kept, exact; in
           trainer 1's rows a value above its tile's amax (not the amax's
           holder) and the first value in the tile of zeros: both rescaled */
        memcpy(e_before, e_data, sizeof e_data);
        e_fp8_poke(7, 40);
        e_fp8_poke(400, 50);
        E_AT(450, 3) = e_bf16(16.0f); /* every amax is 8 at most */
        E_AT(490, 40) = e_bf16(0.5f); /* e4m3 0x30 under the zero tile's scale 1: no saturation */
        CHECK_EQ_INT(e_step(c, t, &in, 8, 1, 0, &err), WSYNC_OK);
        CHECK_EQ_INT(t[0].st.regions_sparse, 1);
        CHECK_EQ_INT(t[1].st.regions_sparse, 1);
        CHECK_EQ_INT(t[0].st.fp8_moved, 1);
        CHECK_EQ_INT(t[1].st.fp8_tiles_rescaled, 2);
        CHECK_EQ_INT(t[1].st.fp8_moved, 1 + 2 * E_BLOCK * E_BLOCK);
        CHECK_EQ_INT(wsync_rank_version(in.r), 8);
    }
    wsync_controller_close(c);
    e_free(&t[0]);
    e_free(&t[1]);
    e_free(&in);
    e_fp8 = 0;
    TEST_END();
}

/* ---- fp8 from row shards: tiles across shards gathered, then sparse ---- */

/* Opens the controller and joins e_ntr trainers and one inference rank. */
static int e_start(wsync_controller **c, e_rank *t, e_rank *in)
{
    wsync_controller_options co;
    wsync_error err;
    pthread_t acc;
    void *acc_res = NULL;
    uint32_t i;
    int ok;
    memset(&co, 0, sizeof co);
    co.n_trainers = e_ntr;
    co.n_inference = 1;
    co.join_timeout_ms = 10000;
    co.step_timeout_ms = 5000;
    ok = wsync_controller_open(&co, c, &err) == WSYNC_OK;
    CHECK_MSG(ok, "%s", err.message);
    for (i = 0; ok && i < e_ntr; i++) ok = e_setup(&t[i], WSYNC_CTL_TRAINER, i);
    ok = ok && e_setup(in, WSYNC_CTL_INFERENCE, 0);
    CHECK(ok);
    if (!ok) return 0;
    for (i = 0; i < e_ntr; i++) t[i].port = wsync_controller_port(*c);
    in->port = wsync_controller_port(*c);
    ok = pthread_create(&acc, NULL, e_accept, *c) == 0;
    for (i = 0; i < e_ntr; i++) t[i].th_on = pthread_create(&t[i].th, NULL, e_trainer, &t[i]) == 0;
    in->th_on = pthread_create(&in->th, NULL, e_inference, in) == 0;
    if (ok) pthread_join(acc, &acc_res);
    ok = ok && (wsync_result)(intptr_t)acc_res == WSYNC_OK;
    CHECK_MSG(ok, "accept: %s / %s / %s / %s", t[0].err.message, t[1].err.message, t[2].err.message,
              in->err.message);
    return ok;
}

/* A trainer's writes of bf16 rows into the gather inboxes (dense every
   step: the receiver takes only fp8). */
static uint64_t e_gather_bytes(const e_rank *t)
{
    uint32_t n, j;
    uint64_t b = 0;
    const wsync_ctl_transfer *x = wsync_rank_transfers(t->r, &n);
    for (j = 0; j < n; j++)
        if (x[j].prep == WSYNC_CTL_PREP_NONE) b += x[j].len;
    return b;
}

/* One rescaled tile in a 32 x 32 transfer's sections: its bytes and its scale. */
#define E_RESCALED (wsync_sparse_section_bytes(1, E_BLOCK * E_BLOCK) + wsync_sparse_section_bytes(4, 1))

/* Three trainers hold torch.chunk row shards (171, 171, 170 rows) that cut
   tiles; the planner cuts the tensor at 128 rows: trainer 0 quantizes rows
   0-127 from its own memory and 128-255 from its gather inbox (its rows
   and trainer 1's), trainer 1 rows 256-383 from its inbox (its rows and
   trainer 2's), trainer 2 rows 384-511 from its own memory. The
   gathered transfers go sparse like the rest, per tile the same rule; a
   slot too small for them sends them dense; a failed step's next goes
   dense, and the one after sparse again from the copy it kept. */
static void test_fp8_gather(void)
{
    wsync_controller *c = NULL;
    e_rank t[E_TMAX], in;
    wsync_sparse_stats is;
    wsync_error err;
    uint64_t s, gsparse = 0, moved = 0, rescaled = 0, slot;
    uint32_t i;
    int ok;
    TEST_BEGIN("fp8 from row shards: the gathered tiles sparse too (per tile the same rule), exact every step");
    e_fp8 = 1;
    e_inbox = 1;
    e_ntr = 3;
    e_row0[1] = 171, e_row0[2] = 342, e_row0[3] = E_ROWS;
    /* a slot of 6 KiB a trainer: a rescaled tile and a little more */
    e_stg = 3 * 6144;
    slot = wsync_sparse_slot_bytes(e_stg, 3);
    CHECK_EQ_INT(slot, 6144);
    e_fp8_data();
    E_AT(2, 33) = e_bf16(1.0f);
    memset(t, 0, sizeof t);
    ok = e_start(&c, t, &in);
    if (ok) {
        /* 1: dense; the gathered transfers too */
        memcpy(e_before, e_data, sizeof e_data);
        CHECK_EQ_INT(e_step(c, t, &in, 1, 0, 0, &err), WSYNC_OK);
        CHECK_MSG(err.code == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(t[0].st.fp8_gathered, 1);
        CHECK_EQ_INT(t[0].st.fp8_gathered_sparse, 0);
        CHECK_EQ_INT(t[1].st.fp8_gathered, 1);
        CHECK_EQ_INT(t[2].st.fp8_gathered, 0);
        CHECK_EQ_INT(t[0].st.dense_bytes, e_gather_bytes(&t[0]) + 2 * 128 * E_COLS);
        /* 2: in the rows trainer 0 gathers, a byte moved under the same
           scale (row 200: trainer 1's); in those trainer 1 gathers, a tile's
           amax doubled (row 350: trainer 2's); in trainer 0's own, a bf16
           change e4m3 hides; nothing else */
        memcpy(e_before, e_data, sizeof e_data);
        E_AT(200, 1) = e_bf16(3.0f);
        E_AT(350, 40) = e_bf16(8.0f);
        E_AT(2, 33) = e_bf16(1.0078125f);
        CHECK_EQ_INT(e_step(c, t, &in, 2, 0, 0, &err), WSYNC_OK);
        CHECK_MSG(err.code == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(wsync_rank_version(in.r), 2);
        for (i = 0; i < 3; i++) {
            CHECK_EQ_INT(t[i].st.dense_bytes, e_gather_bytes(&t[i]));
            CHECK_EQ_INT(t[i].st.regions_dense, 0);
            CHECK_EQ_INT(t[i].st.fp8_gathered, 0);
            CHECK_EQ_INT(t[i].st.fp8_gathered_sparse, i < 2);
        }
        CHECK_EQ_INT(t[0].st.fp8_tiles, E_TILES / 2);
        CHECK_EQ_INT(t[0].st.fp8_tiles_moved, 1);
        CHECK_EQ_INT(t[0].st.fp8_tiles_rescaled, 0);
        CHECK_EQ_INT(t[0].st.fp8_moved, 1);
        CHECK_EQ_INT(t[0].st.changes, 1);
        CHECK_EQ_INT(t[0].st.staged_bytes, WSYNC_SPARSE_HEADER + wsync_sparse_section_bytes(1, 1));
        CHECK_EQ_INT(t[1].st.fp8_tiles, E_TILES / 4);
        CHECK_EQ_INT(t[1].st.fp8_tiles_moved, 0);
        CHECK_EQ_INT(t[1].st.fp8_tiles_rescaled, 1);
        CHECK_EQ_INT(t[1].st.fp8_moved, E_BLOCK * E_BLOCK);
        CHECK_EQ_INT(t[1].st.changes, E_BLOCK * E_BLOCK + 1);
        CHECK_EQ_INT(t[1].st.staged_bytes, WSYNC_SPARSE_HEADER + E_RESCALED);
        CHECK_EQ_INT(t[2].st.fp8_tiles, E_TILES / 4);
        CHECK_EQ_INT(t[2].st.changes, 0);
        CHECK_EQ_INT(t[2].st.staged_bytes, WSYNC_SPARSE_HEADER);
        wsync_rank_sparse_stats(in.r, &is);
        CHECK_EQ_INT(is.scattered, 1 + E_BLOCK * E_BLOCK + 1);
        /* 3-6: random steps, each exact (the receiver checks every byte and scale) */
        for (s = 3; s <= 6; s++) {
            e_fp8_next();
            CHECK_EQ_INT(e_step(c, t, &in, s, 0, 0, &err), WSYNC_OK);
            CHECK_MSG(err.code == WSYNC_OK, "step %llu: %s", (unsigned long long)s, err.message);
            CHECK_EQ_INT(wsync_rank_version(in.r), s);
            for (i = 0; i < 3; i++) {
                gsparse += t[i].st.fp8_gathered_sparse;
                moved += t[i].st.fp8_tiles_moved;
                rescaled += t[i].st.fp8_tiles_rescaled;
            }
        }
        CHECK_MSG(gsparse > 0 && moved > 0 && rescaled > 0, "gathered sparse %llu, moved %llu, rescaled %llu",
                  (unsigned long long)gsparse, (unsigned long long)moved, (unsigned long long)rescaled);
        /* 7: trainer 0's own rows a rescaled tile (in its slot first), its
           gathered rows another: no room left, those go dense (overflow) */
        memcpy(e_before, e_data, sizeof e_data);
        E_AT(64, 0) = E_AT(64, 0) == e_bf16(16.0f) ? e_bf16(32.0f) : e_bf16(16.0f);
        E_AT(224, 32) = E_AT(224, 32) == e_bf16(16.0f) ? e_bf16(32.0f) : e_bf16(16.0f);
        CHECK_EQ_INT(e_step(c, t, &in, 7, 0, 0, &err), WSYNC_OK);
        CHECK_MSG(err.code == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(t[0].st.fp8_tiles_rescaled, 2);
        CHECK_EQ_INT(t[0].st.regions_overflow, 1);
        CHECK_EQ_INT(t[0].st.fp8_gathered, 1);
        CHECK_EQ_INT(t[0].st.fp8_gathered_sparse, 0);
        CHECK_EQ_INT(t[0].st.dense_bytes, e_gather_bytes(&t[0]) + 128 * E_COLS);
        CHECK_EQ_INT(t[0].st.staged_bytes, WSYNC_SPARSE_HEADER + E_RESCALED);
        CHECK_EQ_INT(wsync_rank_version(in.r), 7);
        /* 8: sparse, but the receiver's check fails: the step aborts */
        e_fp8_next();
        e_fail = 1;
        CHECK_EQ_INT(e_step(c, t, &in, 8, 0, 0, &err), WSYNC_ERR_DIGEST_MISMATCH);
        CHECK_EQ_INT(wsync_rank_version(in.r), 7);
        /* 9: the trainers saw the ABORT: dense, the gathered too, exact */
        e_fp8_next();
        CHECK_EQ_INT(e_step(c, t, &in, 9, 0, 0, &err), WSYNC_OK);
        CHECK_MSG(err.code == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(t[0].st.regions_sparse, 0);
        CHECK_EQ_INT(t[0].st.fp8_gathered, 1);
        CHECK_EQ_INT(t[1].st.fp8_gathered, 1);
        CHECK_EQ_INT(t[0].st.dense_bytes, e_gather_bytes(&t[0]) + 2 * 128 * E_COLS);
        CHECK_EQ_INT(wsync_rank_version(in.r), 9);
        /* 10: sparse again from the copies the dense step kept: one byte in
           each gathered part, exact */
        memcpy(e_before, e_data, sizeof e_data);
        e_fp8_poke(130, 3);
        e_fp8_poke(300, 9);
        CHECK_EQ_INT(e_step(c, t, &in, 10, 0, 0, &err), WSYNC_OK);
        CHECK_MSG(err.code == WSYNC_OK, "%s", err.message);
        CHECK_EQ_INT(t[0].st.fp8_gathered_sparse, 1);
        CHECK_EQ_INT(t[0].st.fp8_moved, 1);
        CHECK_EQ_INT(t[0].st.dense_bytes, e_gather_bytes(&t[0]));
        CHECK_EQ_INT(t[1].st.fp8_gathered_sparse, 1);
        CHECK_EQ_INT(t[1].st.fp8_moved, 1);
        CHECK_EQ_INT(t[1].st.staged_bytes, WSYNC_SPARSE_HEADER + wsync_sparse_section_bytes(1, 1));
        CHECK_EQ_INT(wsync_rank_version(in.r), 10);
    }
    wsync_controller_close(c);
    for (i = 0; i < e_ntr; i++) e_free(&t[i]);
    e_free(&in);
    e_fp8 = 0;
    e_inbox = 0;
    e_ntr = 2;
    e_row0[1] = E_ROWS / 2, e_row0[2] = E_ROWS;
    e_stg = E_STG;
    TEST_END();
}

int main(void)
{
    test_round_trip();
    test_hostile();
    test_controller_path();
    test_fp8_path();
    test_fp8_gather();
    return check_summary();
}
