/* fuzz_sparse.c - fuzz harness for the sparse step's staging slots
   (wsync_rdma.h >>sparse: wsync_sparse_validate, wsync_sparse_scatter).
   A receiver reads its staging area after other processes wrote it
   one-sided (any bug or attacker among the writers decides its bytes), so
   the validator treats a slot as hostile: nothing it accepts may make the
   scatter write outside a region.

   Build and run (from the repository root):

     libFuzzer (clang):   make build/fuzz/fuzz_sparse
                          mkdir -p build/fuzz/work_sparse
                          build/fuzz/fuzz_sparse -dict=fuzz/sparse.dict build/fuzz/work_sparse \
                              fuzz/corpus/sparse fuzz/data/sparse
     Replay without a fuzzer (any C99 compiler; `make test` does this):
                          make build/replay_sparse build/san/replay_sparse
                          build/san/replay_sparse fuzz/corpus/sparse fuzz/data/sparse
     Seeds: this file built with -DFUZZ_SPARSE_SEEDS is a program that
     writes them:
                          cc -std=c99 -I. -DFUZZ_SPARSE_SEEDS -o build/make_sparse_seeds \
                              fuzz/fuzz_sparse.c -lm -lpthread
                          build/make_sparse_seeds fuzz/corpus/sparse

   An input is 16 bytes of setting, then the slot:
     byte 0   regions: 1 + (byte % 4)
     byte 1   the staging region (byte % regions): its length is 0 (no
              section may name it)
     bytes 2-4 the step expected, the receiver's version (base), the sender
     bytes 8-15 each region's length in bytes (u16, little-endian)
   The slot is copied into a buffer of exactly its size (ASan sees a read
   past it) and validated twice: as it is, and with its header's byte count
   and digest made right for the bytes present (so that mutations reach
   the sections' rules instead of dying at the digest). Each time:
     - a refusal has WSYNC_ERR_CORRUPT and a message naming the sender,
       the step and the byte offset, inside the slot;
     - an accepted slot: its info is within the slot (bytes, sections,
       changes no more than the bytes allow), and scattering it into
       regions allocated at exactly their lengths, each with a guard word
       on both sides checked after, writes nothing outside them; a second
       validation gives the same result (nothing depends on state).
   Any violation prints what failed and calls abort(), the fuzzer's signal. */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_SETTING 16u
#define FZ_GUARD 16u

static size_t fz_size;
static int fz_fixed;

static void fz_fail(int line, const char *what)
{
    fprintf(stderr, "fuzz_sparse.c:%d: invariant violated: %s (input: %lu bytes%s)\n", line, what,
            (unsigned long)fz_size, fz_fixed ? ", with its digest made right" : "");
    fflush(stderr);
    abort();
}
#define FZ_CHECK(c, what)                                                                                       \
    do {                                                                                                         \
        if (!(c)) fz_fail(__LINE__, what);                                                                       \
    } while (0)

static void fz_put64(uint8_t *p, uint64_t v)
{
    unsigned i;
    for (i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void fz_run(const uint8_t *set, const uint8_t *slot_in, size_t n)
{
    uint64_t lens[4];
    uint8_t *regs[4], *mem[4];
    uint32_t nr = 1u + set[0] % 4, st = set[1] % nr, i;
    wsync_sparse_expect x;
    wsync_sparse_info info, again;
    wsync_error err;
    wsync_result r;
    uint8_t *slot = (uint8_t *)malloc(n ? n : 1);
    char want[80];
    if (!slot) return;
    memcpy(slot, slot_in, n);
    for (i = 0; i < nr; i++) lens[i] = i == st ? 0 : (uint64_t)set[8 + 2 * i] | (uint64_t)set[9 + 2 * i] << 8;
    memset(&x, 0, sizeof x);
    x.step = set[2];
    x.base = set[3];
    x.sender = set[4];
    x.n_regions = nr;
    x.region_len = lens;
    r = wsync_sparse_validate(slot, n, &x, &info, &err);
    if (r != WSYNC_OK) {
        unsigned long long at = 0;
        const char *b;
        FZ_CHECK(r == WSYNC_ERR_CORRUPT && err.code == r, "a refusal is WSYNC_ERR_CORRUPT, said in err");
        snprintf(want, sizeof want, "staging slot of trainer %u for step %u, byte ", (unsigned)set[4], (unsigned)set[2]);
        FZ_CHECK(strncmp(err.message, want, strlen(want)) == 0, "the refusal names the sender, the step, the byte");
        b = err.message + strlen(want);
        while (*b >= '0' && *b <= '9') at = at * 10 + (unsigned long long)(*b++ - '0');
        FZ_CHECK(*b == ':' && (at < n || n < WSYNC_SPARSE_HEADER), "the byte named is inside the slot");
        free(slot);
        return;
    }
    FZ_CHECK(err.code == WSYNC_OK, "success leaves err clear");
    FZ_CHECK(info.bytes >= WSYNC_SPARSE_HEADER && info.bytes <= n, "the slot's bytes are within it");
    FZ_CHECK(info.changes <= (info.bytes - WSYNC_SPARSE_HEADER) / 4, "no more changes than bytes allow");
    FZ_CHECK((info.sections == 0) == (info.changes == 0), "sections hold changes");
    for (i = 0; i < nr; i++) {
        mem[i] = (uint8_t *)malloc((size_t)lens[i] + 2 * FZ_GUARD);
        FZ_CHECK(mem[i] != NULL, "memory for the regions");
        memset(mem[i], 0xa5, (size_t)lens[i] + 2 * FZ_GUARD);
        regs[i] = i == st ? NULL : mem[i] + FZ_GUARD;
    }
    wsync_sparse_scatter(slot, regs);
    for (i = 0; i < nr; i++) {
        uint32_t k;
        for (k = 0; k < FZ_GUARD; k++) {
            FZ_CHECK(mem[i][k] == 0xa5, "a write before a region");
            FZ_CHECK(mem[i][FZ_GUARD + lens[i] + k] == 0xa5, "a write after a region");
        }
        free(mem[i]);
    }
    FZ_CHECK(wsync_sparse_validate(slot, n, &x, &again, NULL) == WSYNC_OK && again.bytes == info.bytes &&
                 again.changes == info.changes,
             "validation is a function of the bytes");
    free(slot);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_size = size;
    if (size < FZ_SETTING) return 0;
    fz_fixed = 0;
    fz_run(data, data + FZ_SETTING, size - FZ_SETTING);
    if (size - FZ_SETTING >= WSYNC_SPARSE_HEADER) {
        size_t n = size - FZ_SETTING;
        uint8_t *fixed = (uint8_t *)malloc(n);
        if (!fixed) return 0;
        memcpy(fixed, data + FZ_SETTING, n);
        fz_put64(fixed + 32, n - WSYNC_SPARSE_HEADER);
        fz_put64(fixed + 40, wsync_digest(fixed + WSYNC_SPARSE_HEADER, n - WSYNC_SPARSE_HEADER));
        fz_fixed = 1;
        fz_run(data, fixed, n);
        free(fixed);
    }
    return 0;
}

#ifdef FUZZ_SPARSE_SEEDS
/* The seeds: valid slots of every element size, an empty one, and slots
   that end right at a limit (the last element of a region, a slot full). */
static void seed_write(const char *dir, const char *name, const uint8_t *set, const uint8_t *slot, uint64_t n)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, "wb"))) {
        perror(path);
        exit(1);
    }
    fwrite(set, 1, FZ_SETTING, f);
    fwrite(slot, 1, (size_t)n, f);
    fclose(f);
}

static void seed_setting(uint8_t *set, unsigned nr, unsigned st, unsigned step, unsigned base, unsigned sender,
                         const unsigned *lens)
{
    unsigned i;
    memset(set, 0, FZ_SETTING);
    set[0] = (uint8_t)(nr - 1);
    set[1] = (uint8_t)st;
    set[2] = (uint8_t)step;
    set[3] = (uint8_t)base;
    set[4] = (uint8_t)sender;
    for (i = 0; i < nr; i++) {
        set[8 + 2 * i] = (uint8_t)lens[i];
        set[9 + 2 * i] = (uint8_t)(lens[i] >> 8);
    }
}

int main(int argc, char **argv)
{
    static uint8_t slot[4096];
    uint8_t set[FZ_SETTING];
    unsigned lens[4] = {0, 1024, 600, 64}, k;
    wsync_sparse_writer w;
    uint32_t *pp;
    uint8_t *vv;
    uint64_t n;
    if (argc != 2) {
        fprintf(stderr, "usage: make_sparse_seeds DIR\n");
        return 2;
    }
    seed_setting(set, 4, 0, 9, 8, 2, lens);
    wsync_sparse_begin(&w, slot, sizeof slot, 9, 8, 2);
    n = wsync_sparse_finish(&w);
    seed_write(argv[1], "seed_ok_empty.bin", set, slot, n);

    wsync_sparse_begin(&w, slot, sizeof slot, 9, 8, 2);
    wsync_sparse_section(&w, 1, 2, 100, 5, &pp, &vv, NULL); /* bf16 */
    for (k = 0; k < 5; k++) pp[k] = k * 7, vv[2 * k] = (uint8_t)k, vv[2 * k + 1] = 0x3f;
    wsync_sparse_section(&w, 2, 4, 0, 3, &pp, &vv, NULL); /* f32 */
    pp[0] = 0, pp[1] = 1, pp[2] = 149;                     /* the last element of region 2 */
    memset(vv, 0x41, 12);
    wsync_sparse_section(&w, 3, 1, 60, 4, &pp, &vv, NULL); /* bytes, to the region's end */
    for (k = 0; k < 4; k++) pp[k] = k, vv[k] = (uint8_t)(0xe0 + k);
    wsync_sparse_section(&w, 3, 8, 0, 1, &pp, &vv, NULL);
    pp[0] = 7;
    memset(vv, 0x77, 8);
    n = wsync_sparse_finish(&w);
    seed_write(argv[1], "seed_ok_sections.bin", set, slot, n);
    seed_write(argv[1], "seed_ok_slack.bin", set, slot, n + 64); /* a slot larger than what it holds */

    wsync_sparse_begin(&w, slot, 256, 9, 8, 2); /* a slot full to its last byte */
    wsync_sparse_section(&w, 1, 2, 0, 26, &pp, &vv, NULL);
    for (k = 0; k < 26; k++) pp[k] = 3 * k, vv[2 * k] = (uint8_t)k, vv[2 * k + 1] = 1;
    n = wsync_sparse_finish(&w);
    seed_write(argv[1], "seed_ok_full.bin", set, slot, n);
    fprintf(stderr, "full slot: %llu bytes\n", (unsigned long long)n);
    return 0;
}
#endif
