/* fuzz_st_parse.c - fuzz harness for wsync_st_parse and the safetensors writer.

   Build and run (from the repository root):

     libFuzzer (clang):   make fuzz FUZZ_SECONDS=300
       or by hand:        clang -g -O1 -fsanitize=fuzzer,address,undefined \
                              -fno-sanitize-recover=all -I. \
                              -o build/fuzz/fuzz_st_parse fuzz/fuzz_st_parse.c
                          build/fuzz/fuzz_st_parse -dict=fuzz/st_parse.dict \
                              build/fuzz/work_st_parse fuzz/corpus/st_parse
     AFL++ (its libFuzzer-compatible driver comes with -fsanitize=fuzzer):
                          AFL_USE_ASAN=1 AFL_USE_UBSAN=1 afl-clang-fast -g -O1 \
                              -fsanitize=fuzzer -I. -o build/afl_st_parse \
                              fuzz/fuzz_st_parse.c
                          afl-fuzz -i fuzz/corpus/st_parse -o build/afl_out \
                              -x fuzz/st_parse.dict -- build/afl_st_parse
     Replay without a fuzzer (any C99 compiler; `make test` does this):
                          make build/replay_st_parse build/san/replay_st_parse
                          build/san/replay_st_parse fuzz/corpus/st_parse fuzz/data/st_parse

   What one input goes through:
     1. It is copied into a malloc'd buffer of exactly its size, so ASan
        reports any read past the end, and parsed with a counting allocator.
     2. Failure: the result is a parser error code, the wsync_error says the
        same code with a nonempty message, `out` is zeroed, nothing leaked.
     3. Success: every tensor's bytes are read (ASan checks the views), and the
        invariants of an accepted file are checked: offset order, contiguous
        data with no hole, views inside the input, nelem = product of shape,
        byte size = nelem * dtype bits / 8, find() returns each tensor,
        metadata lookups agree. Two independent oracles in this file: a
        strict RFC 8259 recognizer (the header must be JSON, UTF-8, with
        nothing but whitespace around the object) and a JSON string decoder
        (each tensor's name must be what the key at key_offset decodes to).
     4. The first, middle and last allocation of that successful parse are
        made to fail in turn: the parse must then return
        WSYNC_ERR_OUT_OF_MEMORY and free what it had (same for the writer's
        first and last allocation in step 6).
     5. The same input under tighter limits (rank, tensors, depth, header
        size) must either give the same file or fail with a limit error that
        the file really exceeds.
     6. The file is written back with wsync_st_write into a buffer of exactly
        wsync_st_write_size bytes, parsed again, and compared: names, dtypes,
        shapes, bytes and metadata. The streaming writer with the data in
        odd-sized chunks must produce the same bytes; a short stream, a short
        buffer and a failing sink must all fail cleanly.
   Any violation prints what failed and calls abort(), the fuzzer's signal.

   Compile-time switches (the first two default to 1; -DFZ_xxx=0 turns one off):
     FZ_STRICT_LAYOUT  accepted files have data offsets from 0 with no hole,
                       and the last tensor ends exactly at the end of the file
     FZ_CHECK_UTF8     decoded names and metadata are valid UTF-8 (strict: no
                       surrogates, no overlong forms)
     FZ_ALLOC_RATIO    no single allocation larger than this many times the
                       input size plus 1 MiB (a parser that counts first and
                       then allocates exactly never comes near) */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FZ_STRICT_LAYOUT
#define FZ_STRICT_LAYOUT 1
#endif
#ifndef FZ_CHECK_UTF8
#define FZ_CHECK_UTF8 1
#endif
#ifndef FZ_ALLOC_RATIO
#define FZ_ALLOC_RATIO 64u
#endif
#define FZ_ALLOC_SLACK ((size_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Failing loudly (fz_fail, FZ_CHECK), the input's hash, the counting allocator */
#include "fuzz_common.h"

static volatile uint8_t fz_sink_byte; /* keeps the reads of tensor bytes */

/* ---------------------------------------------------------------------
   Small independent helpers (not the library's, so they check it)
   --------------------------------------------------------------------- */

static uint64_t fz_le64(const uint8_t *p)
{
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static unsigned fz_bits(wsync_dtype t)
{
    switch (t) {
    case WSYNC_DTYPE_BOOL: case WSYNC_DTYPE_U8: case WSYNC_DTYPE_I8:
    case WSYNC_DTYPE_F8_E4M3: case WSYNC_DTYPE_F8_E5M2: case WSYNC_DTYPE_F8_E8M0:
        return 8;
    case WSYNC_DTYPE_I16: case WSYNC_DTYPE_U16: case WSYNC_DTYPE_F16: case WSYNC_DTYPE_BF16:
        return 16;
    case WSYNC_DTYPE_I32: case WSYNC_DTYPE_U32: case WSYNC_DTYPE_F32:
        return 32;
    case WSYNC_DTYPE_F64: case WSYNC_DTYPE_I64: case WSYNC_DTYPE_U64: case WSYNC_DTYPE_C64:
        return 64;
    case WSYNC_DTYPE_F4:
        return 4;
    case WSYNC_DTYPE_F6_E2M3: case WSYNC_DTYPE_F6_E3M2:
        return 6;
    default:
        return 0;
    }
}

static int fz_mul(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static int fz_has_nul(const char *s, size_t n)
{
    return n > 0 && memchr(s, 0, n) != NULL;
}

/* The fuzzers' own JSON (fz_json_string, a decoder; fz_json_text_ok, a
   strict RFC 8259 recognizer), with this reader's strictness: \u
   surrogates paired (the header's UTF-8 is checked whole, fz_utf8_ok). */
#include "json_oracle.h"

/* Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF),
   sequence by sequence with json_oracle.h's fz_utf8_seq. NUL is valid UTF-8. */
static int fz_utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0, k;
    while (i < n) {
        if (!(k = fz_utf8_seq(s + i, n - i))) return 0;
        i += k;
    }
    return 1;
}

/* The whole header: one object, whitespace around it, nothing else. */
static int fz_json_header_ok(const uint8_t *p, uint64_t n)
{
    return fz_json_text_ok(p, (size_t)n, '{', 1000, FZ_JSON_PAIRS);
}

/* Deepest JSON nesting of [ and { in a header that parsed (top object = 1). */
static unsigned fz_json_depth(const uint8_t *p, uint64_t n)
{
    unsigned depth = 0, max = 0;
    int in_str = 0;
    uint64_t i;
    for (i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > max) max = depth;
        } else if (c == '}' || c == ']') {
            if (depth) depth--;
        }
    }
    return max;
}

/* ---------------------------------------------------------------------
   Checks on results
   --------------------------------------------------------------------- */

/* The codes a parse of untrusted bytes may fail with (OUT_OF_MEMORY only
   when an allocation was made to fail). */
static int fz_is_parse_error(wsync_result r)
{
    switch (r) {
    case WSYNC_ERR_TRUNCATED: case WSYNC_ERR_HEADER_TOO_LARGE: case WSYNC_ERR_INVALID_UTF8:
    case WSYNC_ERR_INVALID_JSON: case WSYNC_ERR_NESTING_TOO_DEEP: case WSYNC_ERR_DUPLICATE_KEY:
    case WSYNC_ERR_INVALID_HEADER: case WSYNC_ERR_INVALID_METADATA: case WSYNC_ERR_UNKNOWN_DTYPE:
    case WSYNC_ERR_RANK_TOO_LARGE: case WSYNC_ERR_OVERFLOW: case WSYNC_ERR_SIZE_MISMATCH:
    case WSYNC_ERR_INVALID_OFFSETS: case WSYNC_ERR_OUT_OF_BOUNDS: case WSYNC_ERR_TRAILING_BYTES:
    case WSYNC_ERR_LIMIT:
        return 1;
    default:
        return 0;
    }
}

static void fz_check_zeroed(const wsync_st_file *f)
{
    FZ_CHECK(f->bytes == NULL && f->size == 0 && f->header_len == 0);
    FZ_CHECK(f->data == NULL && f->data_len == 0);
    FZ_CHECK(f->tensors == NULL && f->n_tensors == 0);
    FZ_CHECK(f->metadata == NULL && f->n_metadata == 0);
    FZ_CHECK(f->metadata_kind == WSYNC_ST_METADATA_ABSENT);
    FZ_CHECK(f->by_name == NULL && f->block == NULL);
}

/* Everything that must hold for a file the parser accepted, plus a read of
   every byte it points at. */
static unsigned fz_json_depth(const uint8_t *p, uint64_t n);

static void fz_check_file(const wsync_st_file *f, const uint8_t *buf, uint64_t size,
                          uint64_t max_header, uint32_t max_rank, uint32_t max_depth)
{
    uint64_t pos = 0;
    size_t i;
    uint8_t acc = 0;

    FZ_CHECK(f->bytes == buf);
    FZ_CHECK(f->size == size);
    FZ_CHECK(size >= 8);
    FZ_CHECK(f->header_len == fz_le64(buf));
    FZ_CHECK(f->header_len <= size - 8);
    FZ_CHECK(f->header_len <= max_header);
    FZ_CHECK(f->header_len >= 2); /* "{}" at least */
    FZ_CHECK(f->data == buf + 8 + f->header_len);
    FZ_CHECK(f->data_len == size - 8 - f->header_len);
    FZ_CHECK(f->n_tensors == 0 || f->tensors != NULL);
    FZ_CHECK(fz_json_header_ok(buf + 8, f->header_len));
    FZ_CHECK(fz_utf8_ok(buf + 8, (size_t)f->header_len));
    /* the top object and a tensor entry may or may not count toward the limit */
    FZ_CHECK(fz_json_depth(buf + 8, f->header_len) <= max_depth + 2);

    for (i = 0; i < f->n_tensors; i++) {
        const wsync_st_tensor *t = &f->tensors[i];
        uint64_t nelem = 1, nbytes = 0, lib_nbytes = 0, bits;
        uint32_t d;
        unsigned b = fz_bits(t->dtype);

        /* the name: terminated, sized, findable */
        FZ_CHECK(t->name != NULL);
        FZ_CHECK(t->name[t->name_len] == '\0');
        FZ_CHECK(fz_has_nul(t->name, t->name_len) || strlen(t->name) == t->name_len);
        FZ_CHECK(!(t->name_len == 12 && memcmp(t->name, "__metadata__", 12) == 0));
#if FZ_CHECK_UTF8
        FZ_CHECK(fz_utf8_ok((const uint8_t *)t->name, t->name_len));
#endif
        FZ_CHECK(wsync_st_find_n(f, t->name, t->name_len) == t);
        if (!fz_has_nul(t->name, t->name_len)) FZ_CHECK(wsync_st_find(f, t->name) == t);
        if (t->name_len > 0) {
            const wsync_st_tensor *p = wsync_st_find_n(f, t->name, t->name_len - 1);
            FZ_CHECK(p == NULL ||
                     (p->name_len == t->name_len - 1 &&
                      memcmp(p->name, t->name, p->name_len) == 0));
        }
        FZ_CHECK(t->key_offset >= 8 && t->key_offset < 8 + f->header_len);
        /* the name is what the key at key_offset says, decoded independently */
        FZ_CHECK(fz_json_string(buf + t->key_offset, (size_t)(8 + f->header_len - t->key_offset), 0, FZ_JSON_PAIRS,
                                t->name, t->name_len) != 0);

        /* dtype, shape, element count, byte size */
        FZ_CHECK(t->dtype > WSYNC_DTYPE_INVALID && t->dtype < WSYNC_DTYPE_COUNT);
        FZ_CHECK(b != 0);
        FZ_CHECK(wsync_dtype_bits(t->dtype) == b);
        {
            const char *dn = wsync_dtype_name(t->dtype);
            FZ_CHECK(dn != NULL && wsync_dtype_from_name(dn, strlen(dn)) == t->dtype);
        }
        FZ_CHECK(t->rank <= max_rank);
        FZ_CHECK((t->rank == 0) == (t->shape == NULL));
        for (d = 0; d < t->rank; d++) FZ_CHECK(fz_mul(nelem, t->shape[d], &nelem));
        FZ_CHECK(t->nelem == nelem);
        FZ_CHECK(fz_mul(nelem, b, &bits));
        FZ_CHECK(bits % 8 == 0);
        nbytes = bits / 8;
        FZ_CHECK(wsync_dtype_nbytes(t->dtype, nelem, &lib_nbytes) == WSYNC_OK);
        FZ_CHECK(lib_nbytes == nbytes);

        /* offsets: ordered, contiguous, inside the data section */
        FZ_CHECK(t->begin <= t->end);
        FZ_CHECK(t->end - t->begin == nbytes);
        FZ_CHECK(t->end <= f->data_len);
        FZ_CHECK(t->begin >= pos);
#if FZ_STRICT_LAYOUT
        FZ_CHECK(t->begin == pos);
#endif
        pos = t->end;
        FZ_CHECK(t->data == f->data + t->begin);
        FZ_CHECK(t->data >= buf && (uint64_t)(t->data - buf) <= size);
        FZ_CHECK(nbytes <= size - (uint64_t)(t->data - buf));

        /* touch the view: ASan reports any byte outside the input */
        {
            uint64_t k;
            for (k = 0; k < nbytes; k++) acc ^= t->data[k];
            for (k = 0; k < t->name_len; k++) acc ^= (uint8_t)t->name[k];
            for (d = 0; d < t->rank; d++) acc ^= (uint8_t)t->shape[d];
        }
    }
#if FZ_STRICT_LAYOUT
    FZ_CHECK(pos == f->data_len);
#endif
    FZ_CHECK(wsync_st_find_n(f, "__metadata__", 12) == NULL);

    /* metadata */
    FZ_CHECK(f->metadata_kind == WSYNC_ST_METADATA_ABSENT ||
             f->metadata_kind == WSYNC_ST_METADATA_NULL ||
             f->metadata_kind == WSYNC_ST_METADATA_OBJECT);
    if (f->metadata_kind != WSYNC_ST_METADATA_OBJECT) FZ_CHECK(f->n_metadata == 0);
    FZ_CHECK(f->n_metadata == 0 || f->metadata != NULL);
    for (i = 0; i < f->n_metadata; i++) {
        const wsync_st_kv *kv = &f->metadata[i];
        size_t j;
        FZ_CHECK(kv->key != NULL && kv->value != NULL);
        FZ_CHECK(kv->key[kv->key_len] == '\0' && kv->value[kv->value_len] == '\0');
#if FZ_CHECK_UTF8
        FZ_CHECK(fz_utf8_ok((const uint8_t *)kv->key, kv->key_len));
        FZ_CHECK(fz_utf8_ok((const uint8_t *)kv->value, kv->value_len));
#endif
        for (j = 0; j < i; j++) /* duplicate keys are refused */
            FZ_CHECK(!(f->metadata[j].key_len == kv->key_len &&
                       memcmp(f->metadata[j].key, kv->key, kv->key_len) == 0));
        if (!fz_has_nul(kv->key, kv->key_len)) {
            const char *v = wsync_st_metadata_get(f, kv->key);
            FZ_CHECK(v != NULL);
            FZ_CHECK(memcmp(v, kv->value, kv->value_len) == 0 && v[kv->value_len] == '\0');
        }
        for (j = 0; j < kv->key_len; j++) acc ^= (uint8_t)kv->key[j];
        for (j = 0; j < kv->value_len; j++) acc ^= (uint8_t)kv->value[j];
    }
    if (f->n_metadata == 0) FZ_CHECK(wsync_st_metadata_get(f, "format") == NULL);
    fz_sink_byte = acc;
}

static const wsync_st_kv *fz_find_kv(const wsync_st_file *f, const char *key, size_t len)
{
    size_t i;
    for (i = 0; i < f->n_metadata; i++)
        if (f->metadata[i].key_len == len && memcmp(f->metadata[i].key, key, len) == 0)
            return &f->metadata[i];
    return NULL;
}

/* Same tensors and metadata. same_input: both parses read the same bytes, so
   everything down to offsets and order must match too. */
static void fz_check_same(const wsync_st_file *a, const wsync_st_file *b, int same_input)
{
    size_t i;
    FZ_CHECK(a->n_tensors == b->n_tensors);
    FZ_CHECK(a->n_metadata == b->n_metadata);
    if (a->n_metadata > 0) FZ_CHECK(b->metadata_kind == WSYNC_ST_METADATA_OBJECT);
    if (same_input) {
        FZ_CHECK(a->metadata_kind == b->metadata_kind);
        FZ_CHECK(a->header_len == b->header_len && a->data_len == b->data_len);
    }
    for (i = 0; i < a->n_tensors; i++) {
        const wsync_st_tensor *ta = &a->tensors[i];
        const wsync_st_tensor *tb =
            same_input ? &b->tensors[i] : wsync_st_find_n(b, ta->name, ta->name_len);
        FZ_CHECK(tb != NULL);
        FZ_CHECK(ta->name_len == tb->name_len && memcmp(ta->name, tb->name, ta->name_len) == 0);
        FZ_CHECK(ta->dtype == tb->dtype);
        FZ_CHECK(ta->rank == tb->rank);
        FZ_CHECK(ta->rank == 0 || memcmp(ta->shape, tb->shape, ta->rank * sizeof *ta->shape) == 0);
        FZ_CHECK(ta->nelem == tb->nelem);
        FZ_CHECK(ta->end - ta->begin == tb->end - tb->begin);
        /* only empty tensors may move (ties at one offset can order either way) */
        if (same_input || ta->end != ta->begin)
            FZ_CHECK(ta->begin == tb->begin && ta->end == tb->end);
        if (same_input) FZ_CHECK(ta->key_offset == tb->key_offset);
        FZ_CHECK(memcmp(ta->data, tb->data, (size_t)(ta->end - ta->begin)) == 0);
    }
    for (i = 0; i < a->n_metadata; i++) {
        const wsync_st_kv *ka = &a->metadata[i];
        const wsync_st_kv *kb = same_input ? &b->metadata[i] : fz_find_kv(b, ka->key, ka->key_len);
        FZ_CHECK(kb != NULL);
        FZ_CHECK(ka->key_len == kb->key_len && memcmp(ka->key, kb->key, ka->key_len) == 0);
        FZ_CHECK(ka->value_len == kb->value_len &&
                 memcmp(ka->value, kb->value, ka->value_len) == 0);
    }
}

/* ---------------------------------------------------------------------
   Steps
   --------------------------------------------------------------------- */

/* Step 4: fail allocation number k of a parse that succeeded with n calls. */
static void fz_parse_alloc_failures(const uint8_t *buf, size_t size, size_t n_calls)
{
    size_t picks[3], k;
    picks[0] = 0;
    picks[1] = n_calls / 2;
    picks[2] = n_calls - 1;
    for (k = 0; k < 3; k++) {
        fz_heap heap;
        wsync_st_options opt;
        wsync_st_file st;
        wsync_error err;
        wsync_result r;
        if (k > 0 && picks[k] == picks[k - 1]) continue;
        memset(&opt, 0, sizeof opt);
        opt.allocator = fz_allocator(&heap, picks[k]);
        r = wsync_st_parse(buf, size, &opt, &st, &err);
        FZ_CHECK(r == WSYNC_ERR_OUT_OF_MEMORY);
        fz_check_error(&err, r, size);
        fz_check_zeroed(&st);
        FZ_CHECK(heap.live == 0);
    }
}

/* Step 5: tighter limits either change nothing or fail for a reason. */
static void fz_parse_limits(const uint8_t *buf, size_t size, const wsync_st_file *full)
{
    uint32_t h = fz_input_hash;
    wsync_st_options opt;
    wsync_st_file st;
    wsync_result r;
    fz_heap heap;
    size_t i;
    uint32_t max_rank_seen = 0;
    unsigned depth;

    memset(&opt, 0, sizeof opt);
    opt.allocator = fz_allocator(&heap, SIZE_MAX);
    opt.max_rank = 1 + h % 5u;
    opt.max_tensors = 1 + (h >> 4) % 8u;
    opt.max_depth = 2 + (h >> 8) % 6u;
    opt.max_header_size = ((h >> 12) & 1u) ? 0 : 16 + (h >> 13) % 1024u;

    r = wsync_st_parse(buf, size, &opt, &st, NULL); /* NULL err must be fine */
    if (!full) { /* rejected with the default limits: tighter ones reject too */
        FZ_CHECK(r != WSYNC_OK);
        FZ_CHECK(fz_is_parse_error(r));
        fz_check_zeroed(&st);
        FZ_CHECK(heap.live == 0);
        return;
    }
    for (i = 0; i < full->n_tensors; i++)
        if (full->tensors[i].rank > max_rank_seen) max_rank_seen = full->tensors[i].rank;
    depth = fz_json_depth(full->bytes + 8, full->header_len);
    if (r == WSYNC_OK) {
        fz_check_file(&st, buf, size,
                      opt.max_header_size ? opt.max_header_size : WSYNC_ST_MAX_HEADER_SIZE,
                      opt.max_rank, opt.max_depth);
        FZ_CHECK(st.n_tensors <= opt.max_tensors);
        FZ_CHECK(max_rank_seen <= opt.max_rank);
        fz_check_same(full, &st, 1);
        wsync_st_free(&st);
    } else {
        fz_check_zeroed(&st);
        switch (r) {
        case WSYNC_ERR_RANK_TOO_LARGE: FZ_CHECK(max_rank_seen > opt.max_rank); break;
        case WSYNC_ERR_LIMIT: FZ_CHECK(full->n_tensors > opt.max_tensors); break;
        case WSYNC_ERR_NESTING_TOO_DEEP: FZ_CHECK(depth >= opt.max_depth); break;
        case WSYNC_ERR_HEADER_TOO_LARGE:
            FZ_CHECK(opt.max_header_size != 0 && full->header_len > opt.max_header_size);
            break;
        default: fz_fail(__LINE__, "a limit failure with a non-limit code");
        }
    }
    FZ_CHECK(heap.live == 0);
}

typedef struct fz_failing_sink {
    size_t budget; /* bytes accepted before it fails */
    size_t got;
} fz_failing_sink;

static int fz_failing_sink_fn(void *user, const void *bytes, size_t len)
{
    fz_failing_sink *s = (fz_failing_sink *)user;
    (void)bytes;
    if (len > s->budget - s->got) return -1;
    s->got += len;
    return 0;
}

/* Step 6: write the parsed file back and read it again. */
static void fz_roundtrip(const wsync_st_file *st)
{
    wsync_st_tensor_desc *desc;
    wsync_st_kv *kv;
    wsync_error err;
    wsync_result r;
    wsync_st_write_options wopt;
    fz_heap heap;
    uint64_t total = 0;
    uint8_t *out;
    wsync_buffer buf;
    wsync_st_file back;
    size_t i, n_writer_allocs, meta;
    const wsync_st_kv *kvp;
    int has_empty = 0;

    /* The parser checked the header as UTF-8 and pairs surrogate escapes, so
       every decoded name and value is valid UTF-8 and the writer must take
       the file as it is (names holding NUL bytes go with name_len). */
    for (i = 0; i < st->n_tensors; i++)
        if (st->tensors[i].end == st->tensors[i].begin) has_empty = 1;
    meta = st->metadata_kind == WSYNC_ST_METADATA_OBJECT ? st->n_metadata : 0;
    desc = (wsync_st_tensor_desc *)malloc((st->n_tensors ? st->n_tensors : 1) * sizeof *desc);
    kv = (wsync_st_kv *)malloc((st->n_metadata ? st->n_metadata : 1) * sizeof *kv);
    FZ_CHECK(desc != NULL && kv != NULL);
    for (i = 0; i < st->n_tensors; i++) {
        const wsync_st_tensor *t = &st->tensors[i];
        desc[i].name = t->name;
        desc[i].dtype = t->dtype;
        desc[i].rank = t->rank;
        desc[i].shape = t->shape;
        desc[i].data = t->data;
        desc[i].nbytes = t->end - t->begin;
        desc[i].name_len = t->name_len;
    }
    for (i = 0; i < st->n_metadata; i++) kv[i] = st->metadata[i];
    /* NULL writes no __metadata__, non-NULL with 0 entries writes {} */
    kvp = st->metadata_kind == WSYNC_ST_METADATA_OBJECT ? kv : NULL;

    memset(&err, 0x5A, sizeof err);
    r = wsync_st_write_size(desc, st->n_tensors, kvp, meta, &total, &err);
    if (r != WSYNC_OK) {
        fprintf(stderr, "wsync_st_write_size refused a parsed file: %s\n", err.message);
        fz_check_error(&err, r, UINT64_MAX);
        fz_fail(__LINE__, "the writer refused a file the parser accepted");
    }
    FZ_CHECK(err.code == WSYNC_OK);
    FZ_CHECK(total >= 8 && total - 8 >= st->data_len);
    FZ_CHECK(total <= (uint64_t)st->size * 16 + 4096);

    out = (uint8_t *)malloc((size_t)total);
    FZ_CHECK(out != NULL);
    buf.bytes = out;
    buf.cap = (size_t)total;
    buf.len = 0;
    wopt.allocator = fz_allocator(&heap, SIZE_MAX);
    r = wsync_st_write(desc, st->n_tensors, kvp, meta, wsync_buffer_sink, &buf, &wopt,
                       &err);
    FZ_CHECK(heap.live == 0);
    n_writer_allocs = heap.calls;
    if (r != WSYNC_OK) { /* write_size said yes, so write must too */
        fz_check_error(&err, r, UINT64_MAX);
        fz_fail(__LINE__, "wsync_st_write failed where wsync_st_write_size succeeded");
    }
    FZ_CHECK(buf.len == total);
    FZ_CHECK(fz_le64(out) % 8 == 0);
    FZ_CHECK(fz_le64(out) == total - 8 - st->data_len);

    /* read it back */
    r = wsync_st_parse(out, total, NULL, &back, &err);
    if (r != WSYNC_OK) fprintf(stderr, "re-parse of written file: %s\n", err.message);
    FZ_CHECK(r == WSYNC_OK);
    fz_check_file(&back, out, total, WSYNC_ST_MAX_HEADER_SIZE, WSYNC_ST_DEFAULT_MAX_RANK,
                  WSYNC_ST_DEFAULT_MAX_DEPTH);
    fz_check_same(st, &back, 0);
    FZ_CHECK(back.metadata_kind == (st->metadata_kind == WSYNC_ST_METADATA_OBJECT
                                        ? WSYNC_ST_METADATA_OBJECT
                                        : WSYNC_ST_METADATA_ABSENT));

    /* writing the copy gives the same bytes (when no empty tensor can swap places) */
    if (!has_empty) {
        wsync_st_tensor_desc *d2 =
            (wsync_st_tensor_desc *)malloc((back.n_tensors ? back.n_tensors : 1) * sizeof *d2);
        uint8_t *out2 = (uint8_t *)malloc((size_t)total);
        wsync_buffer b2;
        FZ_CHECK(d2 != NULL && out2 != NULL);
        for (i = 0; i < back.n_tensors; i++) {
            const wsync_st_tensor *t = &back.tensors[i];
            d2[i].name = t->name;
            d2[i].dtype = t->dtype;
            d2[i].rank = t->rank;
            d2[i].shape = t->shape;
            d2[i].data = t->data;
            d2[i].nbytes = t->end - t->begin;
            d2[i].name_len = t->name_len;
        }
        b2.bytes = out2;
        b2.cap = (size_t)total;
        b2.len = 0;
        r = wsync_st_write(d2, back.n_tensors,
                           back.metadata_kind == WSYNC_ST_METADATA_OBJECT
                               ? (back.metadata ? back.metadata : kv)
                               : NULL,
                           back.n_metadata, wsync_buffer_sink, &b2, NULL, NULL);
        FZ_CHECK(r == WSYNC_OK);
        FZ_CHECK(b2.len == total && memcmp(out2, out, (size_t)total) == 0);
        free(d2);
        free(out2);
    }
    wsync_st_free(&back);

    /* the streaming writer, data in odd chunks, gives the same bytes */
    {
        wsync_st_writer w;
        uint8_t *out3 = (uint8_t *)malloc((size_t)total);
        wsync_buffer b3;
        uint64_t sent = 0;
        uint32_t h = fz_input_hash;
        FZ_CHECK(out3 != NULL);
        for (i = 0; i < st->n_tensors; i++) desc[i].data = NULL;
        b3.bytes = out3;
        b3.cap = (size_t)total;
        b3.len = 0;
        r = wsync_st_writer_begin(&w, desc, st->n_tensors, kvp, meta, wsync_buffer_sink,
                                  &b3, NULL, &err);
        FZ_CHECK(r == WSYNC_OK);
        FZ_CHECK(w.data_len == st->data_len && w.header_len == fz_le64(out));
        while (sent < st->data_len) {
            uint64_t chunk = 1 + (h % 13u);
            h = h * 1103515245u + 12345u;
            if (chunk > st->data_len - sent) chunk = st->data_len - sent;
            r = wsync_st_writer_data(&w, st->data + sent, (size_t)chunk, &err);
            FZ_CHECK(r == WSYNC_OK);
            sent += chunk;
        }
        r = wsync_st_writer_data(&w, st->data, 0, &err);
        FZ_CHECK(r == WSYNC_OK);
        r = wsync_st_writer_end(&w, &err);
        FZ_CHECK(r == WSYNC_OK);
        FZ_CHECK(b3.len == total && memcmp(out3, out, (size_t)total) == 0);

        /* one byte short: end() must say so */
        if (st->data_len > 0) {
            b3.len = 0;
            r = wsync_st_writer_begin(&w, desc, st->n_tensors, kvp, meta,
                                      wsync_buffer_sink, &b3, NULL, &err);
            FZ_CHECK(r == WSYNC_OK);
            r = wsync_st_writer_data(&w, st->data, (size_t)(st->data_len - 1), &err);
            FZ_CHECK(r == WSYNC_OK);
            memset(&err, 0, sizeof err);
            r = wsync_st_writer_end(&w, &err);
            FZ_CHECK(r != WSYNC_OK);
            fz_check_error(&err, r, UINT64_MAX);
        }
        for (i = 0; i < st->n_tensors; i++) desc[i].data = st->tensors[i].data;
        free(out3);
    }

    /* a buffer one byte short, and a sink that gives up halfway, both fail */
    {
        fz_failing_sink fs;
        buf.len = 0;
        buf.cap = (size_t)total - 1;
        r = wsync_st_write(desc, st->n_tensors, kvp, meta, wsync_buffer_sink, &buf, NULL,
                           &err);
        FZ_CHECK(r == WSYNC_ERR_SINK);
        fz_check_error(&err, r, UINT64_MAX);
        fs.budget = (size_t)(total / 2);
        fs.got = 0;
        r = wsync_st_write(desc, st->n_tensors, kvp, meta, fz_failing_sink_fn, &fs,
                           NULL, &err);
        FZ_CHECK(r == WSYNC_ERR_SINK);
        fz_check_error(&err, r, UINT64_MAX);
    }

    /* each writer allocation failing in turn (first and last) */
    for (i = 0; i < 2 && n_writer_allocs > 0; i++) {
        size_t k = i == 0 ? 0 : n_writer_allocs - 1;
        if (i == 1 && k == 0) break;
        buf.len = 0;
        buf.cap = (size_t)total;
        wopt.allocator = fz_allocator(&heap, k);
        r = wsync_st_write(desc, st->n_tensors, kvp, meta, wsync_buffer_sink, &buf,
                           &wopt, &err);
        FZ_CHECK(r == WSYNC_ERR_OUT_OF_MEMORY);
        fz_check_error(&err, r, UINT64_MAX);
        FZ_CHECK(heap.live == 0);
    }
    free(out);
    free(desc);
    free(kv);
}

/* ---------------------------------------------------------------------
   Entry point
   --------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t empty_input[1];
    uint8_t *buf;
    wsync_st_options opt;
    wsync_st_file st;
    wsync_error err;
    wsync_result r;
    fz_heap heap;

    fz_input_size = size;
    fz_input_hash = fz_fnv1a(data, size);

    /* exactly sized, so the first byte past the end is a redzone */
    buf = (uint8_t *)malloc(size);
    if (!buf && size == 0) buf = empty_input;
    FZ_CHECK(buf != NULL);
    if (size) memcpy(buf, data, size);

    memset(&opt, 0, sizeof opt);
    opt.allocator = fz_allocator(&heap, SIZE_MAX);
    memset(&err, 0xA5, sizeof err); /* must be reset on entry */
    memset(&st, 0xA5, sizeof st);   /* must be zeroed on failure */

    r = wsync_st_parse(buf, size, &opt, &st, &err);
    if (r != WSYNC_OK) {
        if (!fz_is_parse_error(r))
            fprintf(stderr, "unexpected parse result %d (%s): %s\n", (int)r,
                    wsync_result_name(r), err.message);
        FZ_CHECK(fz_is_parse_error(r));
        fz_check_error(&err, r, size);
        fz_check_zeroed(&st);
        FZ_CHECK(heap.live == 0);
        fz_parse_limits(buf, size, NULL);
    } else {
        size_t n_calls = heap.calls;
        FZ_CHECK(err.code == WSYNC_OK);
        fz_check_file(&st, buf, size, WSYNC_ST_MAX_HEADER_SIZE, WSYNC_ST_DEFAULT_MAX_RANK,
                      WSYNC_ST_DEFAULT_MAX_DEPTH);
        if (n_calls > 0) fz_parse_alloc_failures(buf, size, n_calls);
        fz_parse_limits(buf, size, &st);
        fz_roundtrip(&st);
        wsync_st_free(&st);
        FZ_CHECK(heap.live == 0);
    }
    if (buf != empty_input) free(buf);
    return 0;
}
