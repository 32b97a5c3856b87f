/* The sparse step's staging slots (wsync_rdma.h >>sparse): a slot packed
   from a real diff scatters into a copy of the old image and gives the new
   one byte for byte; every hostile slot (bad header, stale step, wrong
   sender or base, a torn digest, a region it may not name, positions out
   of order or outside the region, counts over the slot, padding or
   trailing bytes) is refused with the sender and the byte offset named,
   and the receiver's memory is not touched. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"

#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
    test_round_trip();
    test_hostile();
    return check_summary();
}
