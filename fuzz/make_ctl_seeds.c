/* make_ctl_seeds.c - writes the seeds of fuzz_ctl.c: valid frames of every
   message type (seed_ok_*) into the first directory, and edge inputs
   (edge_*) into the second. Deterministic; each seed_ok_* is checked to
   decode and each edge_bad_* to be refused as it is written.

     cc -std=c99 -O2 -I. -o build/make_ctl_seeds fuzz/make_ctl_seeds.c -lm -lpthread
     build/make_ctl_seeds fuzz/corpus/ctl fuzz/data/ctl */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void put(const char *dir, const char *name, const uint8_t *b, size_t n, int want_ok)
{
    char path[512];
    FILE *f;
    wsync_ctl_msg m;
    wsync_error e;
    wsync_result r = wsync_ctl_decode_frame(b, n, NULL, &m, &e);
    if (r == WSYNC_OK) wsync_ctl_msg_free(&m);
    if ((r == WSYNC_OK) != want_ok) {
        fprintf(stderr, "%s: %s (%s)\n", name, want_ok ? "refused" : "accepted", r ? e.message : "");
        failures++;
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, "wb")) || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static size_t enc(const wsync_ctl_msg *m, uint8_t *b, size_t cap)
{
    size_t len = 0;
    wsync_error e;
    if (wsync_ctl_encode(m, b, cap, &len, &e) != WSYNC_OK) {
        fprintf(stderr, "encode: %s\n", e.message);
        exit(1);
    }
    return len;
}

static wsync_fabric_desc desc(uint64_t addr, uint64_t len, uint32_t nb)
{
    wsync_fabric_desc d;
    uint32_t i;
    memset(&d, 0, sizeof d);
    d.backend = WSYNC_FABRIC_TCP;
    d.version = 1;
    d.addr = addr;
    d.len = len;
    d.n_bytes = nb;
    for (i = 0; i < nb; i++) d.bytes[i] = (uint8_t)(i * 13 + 5);
    return d;
}

static void tensor(wsync_ctl_tensor *t, const char *name, uint32_t dtype, uint32_t ndim, const uint64_t *shape,
                   uint64_t rb, uint64_t rc, uint32_t region, uint64_t off)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, ndim * sizeof *shape);
    t->row_begin = rb;
    t->row_count = rc;
    t->region = region;
    t->offset = off;
}

int main(int argc, char **argv)
{
    static uint8_t b[1 << 16];
    static char name255[256];
    const char *corpus, *data;
    wsync_ctl_msg m;
    wsync_fabric_desc regs[3];
    wsync_ctl_tensor ts[4];
    wsync_ctl_target tg[2];
    wsync_ctl_transfer xf[4];
    uint64_t s2b[2] = {256, 128}, s2[2] = {64, 32}, s1[1] = {100}, s8[8] = {2, 1, 3, 1, 2, 1, 1, 2}, s3[3] = {10, 3, 5};
    size_t n;
    unsigned t;
    if (argc != 3) {
        fprintf(stderr, "usage: make_ctl_seeds CORPUS_DIR DATA_DIR\n");
        return 2;
    }
    corpus = argv[1];
    data = argv[2];
    memset(name255, 'n', 255);

    /* JOIN: a trainer with two regions and tensors of 0, 1, 2, 3 dimensions */
    regs[0] = desc(0x10000, 8192, 24);
    regs[1] = desc(0x7f0000000000ull, 1u << 20, 0);
    tensor(&ts[0], "scale", WSYNC_DTYPE_F64, 0, NULL, 0, 1, 0, 0);
    tensor(&ts[1], "bias", WSYNC_DTYPE_F32, 1, s1, 10, 50, 0, 8);
    tensor(&ts[2], "embed", WSYNC_DTYPE_BF16, 2, s2, 32, 32, 1, 4096);
    tensor(&ts[3], "mlp.w", WSYNC_DTYPE_U8, 3, s3, 0, 10, 1, 0);
    memset(&m, 0, sizeof m);
    m.type = WSYNC_CTL_JOIN;
    m.role = WSYNC_CTL_TRAINER;
    m.rank = 1;
    m.n_regions = 2;
    m.regions = regs;
    m.n_tensors = 4;
    m.tensors = ts;
    n = enc(&m, b, sizeof b);
    put(corpus, "seed_ok_join_trainer.bin", b, n, 1);
    /* truncated JOINs: cut inside a tensor, and the header saying so */
    put(data, "edge_bad_join_truncated.bin", b, n - 5, 0);
    b[8] = (uint8_t)(n - 5 - 12);
    b[9] = (uint8_t)((n - 5 - 12) >> 8);
    put(data, "edge_bad_join_truncated_honest_header.bin", b, n - 5, 0);
    /* JOIN: an inference rank, one region, one 8-dimension tensor with a 255-byte name */
    tensor(&ts[0], name255, WSYNC_DTYPE_I16, 8, s8, 0, 2, 0, 8192 - 48);
    m.role = WSYNC_CTL_INFERENCE;
    m.rank = 0;
    m.n_regions = 1;
    m.n_tensors = 1;
    n = enc(&m, b, sizeof b);
    put(corpus, "seed_ok_join_inference.bin", b, n, 1);
    /* the same with the tensor one byte past its region (its offset is the
       8 bytes before the 36 of columns, conversion, scales and group) */
    b[n - 44] += 1;
    put(data, "edge_bad_join_tensor_past_region.bin", b, n, 0);
    /* JOIN: an inference rank's column slice of a bf16 matrix, wanted in
       fp8 with 128 x 128 tile scales */
    regs[2] = desc(0x40000, 65536, 24);
    tensor(&ts[1], "model.layers.0.self_attn.o_proj.weight", WSYNC_DTYPE_BF16, 2, s2b, 0, 256, 0, 0);
    ts[1].col_begin = 64;
    ts[1].col_count = 64;
    ts[1].to_dtype = WSYNC_DTYPE_F8_E4M3;
    ts[1].block = 128;
    ts[1].scale_offset = 32768;
    m.n_regions = 1;
    m.regions = &regs[2];
    m.n_tensors = 1;
    m.tensors = &ts[1];
    n = enc(&m, b, sizeof b);
    put(corpus, "seed_ok_join_fp8_slice.bin", b, n, 1);
    m.regions = regs;
    m.tensors = ts;
    m.n_regions = 0;
    m.n_tensors = 0;
    n = enc(&m, b, sizeof b);
    put(corpus, "seed_ok_join_empty.bin", b, n, 1);
    /* n_tensors 2^22 - 1 in a 16-byte payload */
    b[24] = 0xff, b[25] = 0xff, b[26] = 0x3f;
    put(data, "edge_bad_join_count_far_above.bin", b, n, 0);

    /* ASSIGN: a trainer with two targets and three transfers */
    memset(tg, 0, sizeof tg);
    tg[0].rank = 0;
    tg[0].desc = desc(0x20000, 4096, 30);
    tg[1].rank = 1;
    tg[1].region = 2;
    tg[1].desc = desc(0x1000, 100, 0);
    memset(xf, 0, sizeof xf);
    xf[0].target = 0, xf[0].len = 4096, xf[0].rows = 1;
    xf[1].src_region = 1, xf[1].target = 1, xf[1].src_offset = 12345, xf[1].dst_offset = 99, xf[1].len = 1;
    xf[1].rows = 1;
    /* four rows of 25 bytes, 64 apart in the source (a column slice) */
    xf[2].target = 1, xf[2].src_offset = 7, xf[2].len = 100, xf[2].rows = 4, xf[2].src_stride = 64;
    /* 8 rows of 16 bf16 quantized to fp8 with 4 x 4 tiles: 8 scales */
    xf[3].target = 0, xf[3].len = 128, xf[3].rows = 8, xf[3].src_stride = 64, xf[3].prep = WSYNC_CTL_PREP_FP8;
    xf[3].block = 4, xf[3].scale_offset = 1024, xf[3].group = 1;
    xf[1].start_us = 250, xf[2].start_us = 1250; /* paced: planned starts in group 0 */
    memset(&m, 0, sizeof m);
    m.type = WSYNC_CTL_ASSIGN;
    m.n_groups = 2;
    m.role = WSYNC_CTL_TRAINER;
    m.rank = 2;
    m.n_trainers = 3;
    m.n_inference = 2;
    m.n_targets = 2;
    m.targets = tg;
    m.n_transfers = 4;
    m.transfers = xf;
    n = enc(&m, b, sizeof b);
    put(corpus, "seed_ok_assign_trainer.bin", b, n, 1);
    put(data, "edge_bad_assign_truncated.bin", b, n - 1, 0);
    /* the last transfer at the end of its target (dst_offset 4096, the 8
       bytes 16 into the last 72-byte transfer) */
    b[n - 56] = 0;
    b[n - 55] = 0x10;
    put(data, "edge_bad_assign_transfer_past_target.bin", b, n, 0);
    m.role = WSYNC_CTL_INFERENCE;
    m.rank = 1;
    m.n_targets = 0;
    m.n_transfers = 0;
    n = enc(&m, b, sizeof b);
    put(corpus, "seed_ok_assign_inference.bin", b, n, 1);

    /* the small ones */
    for (t = WSYNC_CTL_GO; t <= WSYNC_CTL_RELEASE; t++) {
        static const char *names[] = {"", "", "", "go", "done", "commit", "ack", "abort", "bye", "error", "barrier",
                                      "release"};
        char file[64];
        memset(&m, 0, sizeof m);
        m.type = t;
        m.step = 1000 + t;
        m.group = t >= WSYNC_CTL_BARRIER ? 1 : 0;
        m.status = t == WSYNC_CTL_ERROR ? (uint32_t)WSYNC_ERR_INVALID_ARGUMENT : 0;
        if (t == WSYNC_CTL_ABORT || t == WSYNC_CTL_ERROR) snprintf(m.text, sizeof m.text, "step 3: trainer rank 1 went away");
        n = enc(&m, b, sizeof b);
        snprintf(file, sizeof file, "seed_ok_%s.bin", names[t]);
        put(corpus, file, b, n, 1);
    }
    /* a text of 255 bytes, and of 256 */
    memset(&m, 0, sizeof m);
    m.type = WSYNC_CTL_DONE;
    m.step = 7;
    memset(m.text, 't', WSYNC_CTL_TEXT_MAX);
    n = enc(&m, b, sizeof b);
    put(data, "edge_ok_text_255.bin", b, n, 1);
    b[8] += 1;
    b[12 + 12] = 0, b[12 + 13] = 1; /* text_len 256 */
    b[n] = 't';
    put(data, "edge_bad_text_256.bin", b, n + 1, 0);
    /* DONE's report of a subset: 10 tensors, 2 named; 13 transfers, 5 run */
    {
        static uint8_t named[2] = {0x05, 0x00}, ran[2] = {0x1b, 0x10};
        memset(&m, 0, sizeof m);
        m.type = WSYNC_CTL_DONE;
        m.step = 9;
        m.n_named = 10;
        m.named = named;
        m.n_ran = 13;
        m.runs = 5;
        m.ran = ran;
        n = enc(&m, b, sizeof b);
        put(corpus, "seed_ok_done_subset.bin", b, n, 1);
        b[n - 1] = 0x30; /* transfer bit 13 of 13 */
        put(data, "edge_bad_done_bit_past_count.bin", b, n, 0);
        m.n_named = WSYNC_CTL_NAMED_ALL;
        m.named = NULL;
        n = enc(&m, b, sizeof b);
        put(corpus, "seed_ok_done_all.bin", b, n, 1);
    }
    /* the handshake (version 4): HELLO, CHALLENGE, PROOF; a HELLO of an
       unknown role, and one cut short */
    memset(&m, 0, sizeof m);
    m.type = WSYNC_CTL_HELLO;
    m.role = WSYNC_CTL_INFERENCE;
    m.rank = 3;
    for (t = 0; t < WSYNC_CTL_NONCE; t++) m.nonce[t] = (uint8_t)(t * 7 + 1);
    n = enc(&m, b, sizeof b);
    put(corpus, "seed_ok_hello.bin", b, n, 1);
    put(data, "edge_bad_hello_truncated.bin", b, n - 1, 0);
    b[12] = 3; /* role 3 */
    put(data, "edge_bad_hello_role.bin", b, n, 0);
    m.type = WSYNC_CTL_CHALLENGE;
    for (t = 0; t < WSYNC_CTL_MAC; t++) m.mac[t] = (uint8_t)(t * 11 + 2);
    n = enc(&m, b, sizeof b);
    put(corpus, "seed_ok_challenge.bin", b, n, 1);
    m.type = WSYNC_CTL_PROOF;
    n = enc(&m, b, sizeof b);
    put(corpus, "seed_ok_proof.bin", b, n, 1);
    b[8] += 1; /* a byte after the proof */
    b[n] = 0;
    put(data, "edge_bad_proof_trailing.bin", b, n + 1, 0);
    /* OPEN: a step's writers; one out of order */
    {
        static uint32_t senders[3] = {0, 2, 7};
        memset(&m, 0, sizeof m);
        m.type = WSYNC_CTL_OPEN;
        m.step = 12;
        m.n_senders = 3;
        m.senders = senders;
        n = enc(&m, b, sizeof b);
        put(corpus, "seed_ok_open.bin", b, n, 1);
        b[n - 4] = 1; /* 7 -> 1, after 2 */
        put(data, "edge_bad_open_unordered.bin", b, n, 0);
    }
    return failures ? 1 : 0;
}
