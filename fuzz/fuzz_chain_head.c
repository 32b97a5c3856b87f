/* fuzz_chain_head.c - fuzz harness for wsync_chain_head_parse and
   wsync_chain_head_format (the delta chain's HEAD: a small JSON object in
   the store that anyone with write access to the bucket, or a bit flip, can
   make say anything).

   Build and run (from the repository root):

     libFuzzer (clang):   make build/fuzz/fuzz_chain_head
                          mkdir -p build/fuzz/work_chain_head
                          build/fuzz/fuzz_chain_head -dict=fuzz/chain_head.dict \
                              build/fuzz/work_chain_head fuzz/corpus/chain_head
       (`make fuzz FUZZ_SECONDS=300` runs it after the other harnesses)
     AFL++ (its libFuzzer-compatible driver comes with -fsanitize=fuzzer):
                          AFL_USE_ASAN=1 AFL_USE_UBSAN=1 afl-clang-fast -g -O1 \
                              -fsanitize=fuzzer -I. -o build/afl_chain_head \
                              fuzz/fuzz_chain_head.c
                          afl-fuzz -i fuzz/corpus/chain_head -o build/afl_out \
                              -x fuzz/chain_head.dict -- build/afl_chain_head
     Replay without a fuzzer (any C99 compiler; `make test` does this):
                          make build/replay_chain_head build/san/replay_chain_head
                          build/san/replay_chain_head fuzz/corpus/chain_head fuzz/data/chain_head
     Seeds: make_chain_head_seeds.c (see fuzz/README.md).

   What one input goes through (as it is; again with its "check" digest
   recomputed when it has a "check" key whose digest is wrong, so that
   mutations reach the rules behind the digest instead of dying at it; and
   again when it is JSON the reference reads to the end with a directory
   anchor, with each such anchor's "bytes" and "digest" rewritten to its
   files' sum and digest of digests and then "check" recomputed, so that
   mutations of the files reach the rules behind those two and an accepted
   chain):
     1. It is copied into a malloc'd buffer of exactly its size (ASan sees a
        read past the end; an empty input is passed as NULL, 0) and parsed
        with a counting allocator that also refuses any single allocation out
        of proportion to the input. The same parse with the default
        allocator and a NULL wsync_error must give the same result.
     2. Two oracles in this file, independent of the library's reader:
          - a strict RFC 8259 recognizer (one value, whitespace around it,
            strings valid UTF-8 with FZ_CHECK_UTF8): the parser must never
            accept anything that is not JSON;
          - a reference reading of HEAD's rules over valid JSON (required
            keys, types, no duplicate known keys, "check" last and equal to
            wsync_digest of every byte before its key's opening quote,
            unsigned integers without sign, fraction or exponent, plain
            strings where the reader wants them, unknown values nested no
            deeper than the reader skips, and the chain's rules: an anchor,
            each list strictly ascending by step as written, steps <=
            WSYNC_STEP_MAX, delta base < step, HEAD's step and anchor the
            newest ones; "version" 1 or 2, and HEAD version 2's directory
            anchors: an anchor's "files" (in a delta an unknown key), a
            nonempty array of at most WSYNC_CHAIN_FILES_MAX objects
            {"name","bytes","digest"} and "tensors" >= 1 for a shard (0 is
            refused, absent is a plain file), no key twice, unknown keys
            skipped, files only in a version 2 HEAD; names 1 to
            WSYNC_CHAIN_FILE_NAME_MAX - 1 bytes of [A-Za-z0-9._-] not
            starting with '.', unique in the anchor; the first file a shard,
            shards before plain files; the files' bytes adding up to the
            entry's bytes and the entry's digest wsync_digest of the files'
            digests, 8 bytes little-endian each, in order). The parser must
            accept exactly what it accepts, with the same values: the
            entries, and each anchor's files (name, bytes, digest, tensors,
            the step it belongs to, the entry's n_files, info's n_files).
     3. Failure: the result is WSYNC_ERR_BAD_HEAD (WSYNC_ERR_OUT_OF_MEMORY
        only when an allocation was made to fail), the wsync_error says the
        same code with a nonempty message and an offset inside the input,
        `out` is zeroed, nothing leaked.
     4. Success: the invariants of an accepted chain: has_head, at least one
        entry, anchors first then deltas, each strictly ascending by step,
        anchor base == step, delta base < step, steps <= WSYNC_STEP_MAX,
        has_digests, head_step the newest step, anchor_step the newest
        anchor's, every key "anchors/step_%06llu.safetensors" or
        "deltas/...", or "anchors/step_%06llu/" for an anchor with files.
        Files: only anchors have them (others NULL); each anchor's
        `files` points into c->files, the anchors' runs one after another
        in order and together all n_files of them (c->files NULL exactly
        when there are none); each name NUL-terminated; and the files'
        rules above hold. The first, middle and last allocation made to
        fail in turn must each give WSYNC_ERR_OUT_OF_MEMORY, a zeroed `out`
        (files included) and no leak.
     5. Round trip: wsync_chain_head_format of the parsed chain is JSON that
        both oracles accept, says "version":2 exactly when an anchor has
        files (else 1), parses back to exactly the same fields (files
        included), and formatting that gives identical bytes (the text is
        canonical). Formatting with its allocation failing gives
        WSYNC_ERR_OUT_OF_MEMORY and no text.
   Before the first input, an anchor of WSYNC_CHAIN_FILES_MAX files and one
   of a file more go through the same steps (fz_files_max_once).
   Any violation prints what failed and calls abort(), the fuzzer's signal.

   Compile-time switches (the first three default to 1; -DFZ_xxx=0 turns one off):
     FZ_CHECK_UTF8   an accepted text's strings must be valid UTF-8
                     (RFC 8259 8.1; no overlongs, no surrogates); 0 lets
                     other bytes through (a text that is not UTF-8 is then
                     neither required to be accepted nor to be refused)
     FZ_REFERENCE    the reference reading of HEAD's rules (step 2)
     FZ_FIX_CHECK    the second pass with the "check" digest recomputed
     FZ_FIX_FILES    the third pass with each directory anchor's bytes and
                     digest recomputed from its files (and "check" then)
     FZ_ALLOC_RATIO  no single allocation larger than this many times the
                     input size plus 4 KiB (entries are 144 bytes for at
                     least 75 bytes of text, files 160 bytes for at least
                     51, doubled when they grow) */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FZ_CHECK_UTF8
#define FZ_CHECK_UTF8 1
#endif
#ifndef FZ_REFERENCE
#define FZ_REFERENCE 1
#endif
#ifndef FZ_FIX_CHECK
#define FZ_FIX_CHECK 1
#endif
#ifndef FZ_FIX_FILES
#define FZ_FIX_FILES 1
#endif
#ifndef FZ_ALLOC_RATIO
#define FZ_ALLOC_RATIO 8u
#endif
#define FZ_ALLOC_SLACK 4096u

/* What the reader documents (wsync.h): entries at most 10^6, text at most
   (10^6 + 16) * 256 bytes, unknown values skipped to a depth of 16 counted
   from the top-level object's values (1) or an entry's values (2). */
#define FZ_MAX_ENTRIES 1000000u
#define FZ_MAX_TEXT (((size_t)FZ_MAX_ENTRIES + 16) * 256)
#define FZ_SKIP_DEPTH 16u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Failing loudly (fz_fail, FZ_CHECK), the input's hash, the counting allocator */
#include "fuzz_common.h"

/* ---------------------------------------------------------------------
   Oracle 1: a strict RFC 8259 recognizer
   --------------------------------------------------------------------- */

#define FZ_JSON_MAX_DEPTH 512 /* deeper counts as "not JSON" (the reader stops at 16) */

/* fz_ws, fz_is_digit, fz_json_string, fz_json_value, fz_json_text_ok */
#include "json_oracle.h"

/* ---------------------------------------------------------------------
   Oracle 2: HEAD's rules, read independently over text that is valid JSON
   --------------------------------------------------------------------- */

typedef struct fz_ref {
    int ok;             /* the rules accept the text */
    const char *why;    /* the first rule it breaks */
    uint64_t head_step, anchor_step, head_state, check;
    wsync_encoding encoding;
    size_t check_at;    /* offset of the "check" key's opening quote */
    uint64_t version;   /* "version": 1 or 2 */
    wsync_chain_entry *e; /* anchors then deltas once read; a directory anchor's
                           files point into f */
    size_t *ef;         /* ef[i]: the index in f of e[i]'s first file (n_files > 0) */
    size_t n, cap;
    wsync_chain_file *f; /* every anchor's files, in the order written */
    size_t nf, fcap;
    int parsed;         /* the top-level object was read to its end */
    struct fz_fix_span { /* where each directory anchor's bytes and digest are, in text order */
        size_t bytes_at, bytes_end, digest_at, ffirst, n_files;
    } *fix;
    size_t nfix, fixcap;
} fz_ref;

static void fz_ref_free(fz_ref *r)
{
    free(r->e);
    free(r->ef);
    free(r->f);
    free(r->fix);
    memset(r, 0, sizeof *r);
}

static int fz_ref_bad(fz_ref *r, const char *why)
{
    r->ok = 0;
    r->why = why;
    return 0;
}

/* A string the reader takes as it is: no escape, nothing above 0x7F (it is
   valid JSON, so no control character either). s/len: its contents. */
static int fz_plain_string(const uint8_t *p, size_t n, size_t *i, const uint8_t **s, size_t *len)
{
    size_t b, e, k;
    if (*i >= n || p[*i] != '"') return 0;
    e = fz_json_string(p, n, *i, 0, NULL, 0);
    FZ_CHECK(e != 0); /* valid JSON */
    b = *i + 1;
    for (k = b; k < e - 1; k++)
        if (p[k] == '\\' || p[k] >= 0x80) return 0;
    *s = p + b;
    *len = e - 1 - b;
    *i = e;
    return 1;
}

static int fz_str_is(const uint8_t *s, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

/* An unsigned decimal integer, no sign, fraction or exponent, within u64. */
static int fz_ref_u64(const uint8_t *p, size_t n, size_t *i, uint64_t *v)
{
    size_t k = *i, e = fz_json_value(p, n, *i, 0, FZ_JSON_MAX_DEPTH, 0);
    uint64_t x = 0;
    FZ_CHECK(e != 0);
    if (p[k] < '0' || p[k] > '9') return 0;
    for (; k < e; k++) {
        unsigned d;
        if (p[k] < '0' || p[k] > '9') return 0;
        d = (unsigned)(p[k] - '0');
        if (x > (UINT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *v = x;
    *i = e;
    return 1;
}

/* A plain string of exactly 16 lowercase hex digits. */
static int fz_ref_hex64(const uint8_t *p, size_t n, size_t *i, uint64_t *v)
{
    const uint8_t *s;
    size_t len, k;
    uint64_t x = 0;
    if (!fz_plain_string(p, n, i, &s, &len) || len != 16) return 0;
    for (k = 0; k < 16; k++) {
        uint8_t c = s[k];
        if (c >= '0' && c <= '9') x = x << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f') x = x << 4 | (uint64_t)(c - 'a' + 10);
        else return 0;
    }
    *v = x;
    return 1;
}

/* Skips a value the reader does not know: 0 if the reader cannot skip it
   (an object key that is not a plain string, or a value at a depth beyond
   FZ_SKIP_DEPTH; the value itself is at `depth`). */
static int fz_ref_skip(const uint8_t *p, size_t n, size_t *i, unsigned depth)
{
    size_t k = *i;
    if (depth > FZ_SKIP_DEPTH) return 0;
    if (p[k] == '{' || p[k] == '[') {
        int obj = p[k] == '{';
        uint8_t close = obj ? '}' : ']';
        k = fz_ws(p, n, k + 1);
        if (p[k] == close) {
            *i = k + 1;
            return 1;
        }
        for (;;) {
            if (obj) {
                const uint8_t *s;
                size_t len;
                if (!fz_plain_string(p, n, &k, &s, &len)) return 0;
                k = fz_ws(p, n, k) + 1; /* ':' */
                k = fz_ws(p, n, k);
            }
            if (!fz_ref_skip(p, n, &k, depth + 1)) return 0;
            k = fz_ws(p, n, k);
            if (p[k] == close) break;
            k = fz_ws(p, n, k + 1); /* ',' */
        }
        *i = k + 1;
        return 1;
    }
    *i = fz_json_value(p, n, k, 0, FZ_JSON_MAX_DEPTH, 0);
    FZ_CHECK(*i != 0);
    return 1;
}

/* An encoding's name: a plain string under 16 characters; names the
   library does not know read as 0. */
static int fz_ref_encoding(const uint8_t *p, size_t n, size_t *i, wsync_encoding *enc)
{
    const uint8_t *v;
    size_t vl;
    if (!fz_plain_string(p, n, i, &v, &vl) || vl >= 16) return 0;
    *enc = fz_str_is(v, vl, "packed")       ? WSYNC_ENCODING_PACKED
           : fz_str_is(v, vl, "packed-max") ? WSYNC_ENCODING_PACKED_MAX
           : fz_str_is(v, vl, "trl-v1")     ? WSYNC_ENCODING_TRL_V1
           : fz_str_is(v, vl, "trl-v3")     ? WSYNC_ENCODING_TRL_V3
                                            : (wsync_encoding)0;
    return 1;
}

/* A directory anchor's file name (wsync.h, wsync_chain_file): 1 to
   WSYNC_CHAIN_FILE_NAME_MAX - 1 bytes of [A-Za-z0-9._-], the first not '.'
   (so no "", ".", "..", ".hidden", "a/b" or "../x"). */
static int fz_name_ok(const uint8_t *s, size_t len)
{
    size_t k;
    if (len == 0 || len >= WSYNC_CHAIN_FILE_NAME_MAX || s[0] == '.') return 0;
    for (k = 0; k < len; k++) {
        uint8_t c = s[k];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

/* wsync_digest of the files' digests, each as 8 bytes little-endian, in order. */
static uint64_t fz_files_digest(const wsync_chain_file *f, size_t nf)
{
    uint8_t *b = (uint8_t *)malloc(nf * 8 + 1);
    uint64_t d;
    size_t i;
    unsigned k;
    FZ_CHECK(b != NULL);
    for (i = 0; i < nf; i++)
        for (k = 0; k < 8; k++) b[i * 8 + k] = (uint8_t)(f[i].digest >> (8 * k));
    d = wsync_digest(b, nf * 8);
    free(b);
    return d;
}

/* The rules of a directory anchor's files (HEAD version 2), or NULL when e's
   nf files f (already read, each with its name NUL-terminated) keep them:
   an anchor, 1 to WSYNC_CHAIN_FILES_MAX files, the first a shard (tensors
   >= 1), shards before plain files, valid names unique in the anchor, each
   file's step the anchor's, their bytes adding up (without overflow) to the
   entry's and the entry's digest wsync_digest of their digests. */
static int fz_cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *fz_files_rule(const wsync_chain_entry *e, const wsync_chain_file *f, size_t nf)
{
    size_t i;
    uint64_t total = 0;
    const char **names;
    int twice = 0;
    if (e->kind != WSYNC_CHAIN_ANCHOR) return "files in a delta";
    if (nf == 0 || nf > WSYNC_CHAIN_FILES_MAX) return "no files, or more than WSYNC_CHAIN_FILES_MAX";
    if (f[0].tensors == 0) return "the first file is not a shard";
    for (i = 0; i < nf; i++) {
        size_t len = strlen(f[i].name);
        if (!fz_name_ok((const uint8_t *)f[i].name, len)) return "a file name that is not allowed";
        if (f[i].step != e->step) return "a file's step is not its anchor's";
        if (i && f[i].tensors && !f[i - 1].tensors) return "a shard after a plain file";
        if (f[i].bytes > UINT64_MAX - total) return "the files' bytes overflow";
        total += f[i].bytes;
    }
    /* unique: sorted, no two neighbours equal (n log n: 4096 files are allowed) */
    names = (const char **)malloc(nf * sizeof *names);
    FZ_CHECK(names != NULL);
    for (i = 0; i < nf; i++) names[i] = f[i].name;
    qsort(names, nf, sizeof *names, fz_cmp_name);
    for (i = 1; i < nf; i++)
        if (strcmp(names[i - 1], names[i]) == 0) twice = 1;
    free(names);
    if (twice) return "a file name twice in an anchor";
    if (total != e->bytes) return "the files' bytes do not add up to the anchor's";
    if (fz_files_digest(f, nf) != e->digest) return "the anchor's digest is not that of its files' digests";
    return NULL;
}

/* A plain string of exactly 2n lowercase hex digits (signed HEADs' "id",
   "signer", "sig", "blake2b"), into out. */
static int fz_ref_hexbytes(const uint8_t *p, size_t n, size_t *i, uint8_t *out, size_t bytes)
{
    const uint8_t *s;
    size_t len, k;
    if (!fz_plain_string(p, n, i, &s, &len) || len != 2 * bytes) return 0;
    for (k = 0; k < len; k++) {
        unsigned d;
        if (s[k] >= '0' && s[k] <= '9') d = (unsigned)(s[k] - '0');
        else if (s[k] >= 'a' && s[k] <= 'f') d = (unsigned)(s[k] - 'a' + 10);
        else return 0;
        if (k & 1) out[k / 2] = (uint8_t)(out[k / 2] | d);
        else out[k / 2] = (uint8_t)(d << 4);
    }
    return 1;
}

/* An anchor's "files" at p[*i]: [{"name":S,"bytes":N,"digest":"H",
   "tensors":K}, ...], appended to r->f; *count: how many. Unknown keys in a
   file are skipped, their values at depth 4 (top 1, entry 2, the array's
   objects 3). */
static int fz_ref_files(fz_ref *r, const uint8_t *p, size_t n, size_t *i, size_t *count)
{
    size_t k = *i;
    *count = 0;
    if (p[k] != '[') return fz_ref_bad(r, "\"files\" not an array");
    k = fz_ws(p, n, k + 1);
    if (p[k] == ']') return fz_ref_bad(r, "\"files\" empty");
    for (;;) {
        wsync_chain_file f;
        unsigned seen = 0;
        memset(&f, 0, sizeof f);
        if (p[k] != '{') return fz_ref_bad(r, "a file is not an object");
        k = fz_ws(p, n, k + 1);
        if (p[k] != '}')
            for (;;) {
                const uint8_t *s, *v;
                size_t len, vl;
                unsigned bit = 0;
                int ok;
                if (!fz_plain_string(p, n, &k, &s, &len)) return fz_ref_bad(r, "file key not plain");
                k = fz_ws(p, n, fz_ws(p, n, k) + 1);
                if (fz_str_is(s, len, "name")) {
                    bit = 1;
                    ok = fz_plain_string(p, n, &k, &v, &vl) && fz_name_ok(v, vl);
                    if (ok) memcpy(f.name, v, vl);
                } else if (fz_str_is(s, len, "bytes")) {
                    bit = 2, ok = fz_ref_u64(p, n, &k, &f.bytes);
                } else if (fz_str_is(s, len, "digest")) {
                    bit = 4, ok = fz_ref_hex64(p, n, &k, &f.digest);
                } else if (fz_str_is(s, len, "tensors")) {
                    bit = 8, ok = fz_ref_u64(p, n, &k, &f.tensors) && f.tensors != 0; /* absent: 0 */
                } else if (fz_str_is(s, len, "blake2b")) {
                    bit = 16, ok = f.has_hash = fz_ref_hexbytes(p, n, &k, f.hash, sizeof f.hash);
                } else {
                    ok = fz_ref_skip(p, n, &k, 4);
                }
                if (!ok) return fz_ref_bad(r, "bad value in a file (or a bad name, or \"tensors\":0)");
                if (seen & bit) return fz_ref_bad(r, "duplicate key in a file");
                seen |= bit;
                k = fz_ws(p, n, k);
                if (p[k] == '}') break;
                k = fz_ws(p, n, k + 1);
            }
        k++; /* '}' */
        if ((seen & 7u) != 7u) return fz_ref_bad(r, "a file without name, bytes or digest");
        if (*count == WSYNC_CHAIN_FILES_MAX) return fz_ref_bad(r, "more than WSYNC_CHAIN_FILES_MAX files");
        if (r->nf == r->fcap) {
            size_t nc = r->fcap ? r->fcap * 2 : 16;
            wsync_chain_file *nfp = (wsync_chain_file *)realloc(r->f, nc * sizeof *nfp);
            FZ_CHECK(nfp != NULL);
            r->f = nfp;
            r->fcap = nc;
        }
        r->f[r->nf++] = f;
        ++*count;
        k = fz_ws(p, n, k);
        if (p[k] == ']') break;
        k = fz_ws(p, n, k + 1);
    }
    *i = k + 1;
    return 1;
}

static int fz_ref_entries(fz_ref *r, const uint8_t *p, size_t n, size_t *i, wsync_chain_kind kind)
{
    size_t k = *i, first = r->n;
    if (p[k] != '[') return fz_ref_bad(r, "anchors/deltas not an array");
    k = fz_ws(p, n, k + 1);
    if (p[k] == ']') {
        *i = k + 1;
        return 1;
    }
    for (;;) {
        wsync_chain_entry e;
        unsigned seen = 0;
        size_t ffirst = r->nf, fk, bytes_at = 0, bytes_end = 0, digest_at = 0;
        memset(&e, 0, sizeof e);
        e.kind = kind;
        e.has_digests = 1;
        if (p[k] != '{') return fz_ref_bad(r, "an entry is not an object");
        k = fz_ws(p, n, k + 1);
        if (p[k] != '}')
            for (;;) {
                const uint8_t *s;
                size_t len;
                unsigned bit = 0;
                int ok;
                if (!fz_plain_string(p, n, &k, &s, &len)) return fz_ref_bad(r, "entry key not plain");
                k = fz_ws(p, n, fz_ws(p, n, k) + 1);
                if (fz_str_is(s, len, "step")) bit = 1, ok = fz_ref_u64(p, n, &k, &e.step);
                else if (fz_str_is(s, len, "base")) bit = 2, ok = fz_ref_u64(p, n, &k, &e.base);
                else if (fz_str_is(s, len, "bytes"))
                    bytes_at = k, bit = 4, ok = fz_ref_u64(p, n, &k, &e.bytes), bytes_end = k;
                else if (fz_str_is(s, len, "digest")) digest_at = k, bit = 8, ok = fz_ref_hex64(p, n, &k, &e.digest);
                else if (fz_str_is(s, len, "state")) bit = 16, ok = fz_ref_hex64(p, n, &k, &e.state);
                else if (kind == WSYNC_CHAIN_DELTA && fz_str_is(s, len, "encoding"))
                    bit = 32, ok = fz_ref_encoding(p, n, &k, &e.encoding); /* deltas only */
                else if (fz_str_is(s, len, "blake2b"))
                    bit = 128, ok = e.has_hash = fz_ref_hexbytes(p, n, &k, e.hash, sizeof e.hash);
                else if (kind == WSYNC_CHAIN_ANCHOR && fz_str_is(s, len, "files")) { /* anchors only */
                    if (seen & 64u) return fz_ref_bad(r, "\"files\" twice in an entry");
                    bit = 64, ok = fz_ref_files(r, p, n, &k, &e.n_files);
                    if (!ok) return 0;
                } else ok = fz_ref_skip(p, n, &k, 2);
                if (!ok) return fz_ref_bad(r, "bad value in an entry");
                if (seen & bit) return fz_ref_bad(r, "duplicate key in an entry");
                seen |= bit;
                k = fz_ws(p, n, k);
                if (p[k] == '}') break;
                k = fz_ws(p, n, k + 1);
            }
        k++; /* '}' */
        if ((seen & 29u) != 29u) return fz_ref_bad(r, "an entry without step, bytes, digest or state");
        if (kind == WSYNC_CHAIN_DELTA && !(seen & 2u)) return fz_ref_bad(r, "a delta without base");
        if (kind == WSYNC_CHAIN_ANCHOR && (seen & 2u)) return fz_ref_bad(r, "an anchor with a base");
        if (kind == WSYNC_CHAIN_ANCHOR) e.base = e.step;
        if (e.step > WSYNC_STEP_MAX) return fz_ref_bad(r, "step above WSYNC_STEP_MAX");
        if (r->n > first && r->e[r->n - 1].step >= e.step)
            return fz_ref_bad(r, "a list not strictly ascending by step as written");
        if (e.n_files)
            snprintf(e.key, sizeof e.key, "anchors/step_%06llu/", (unsigned long long)e.step);
        else
            snprintf(e.key, sizeof e.key, "%s/step_%06llu.safetensors",
                     kind == WSYNC_CHAIN_ANCHOR ? "anchors" : "deltas", (unsigned long long)e.step);
        for (fk = ffirst; fk < ffirst + e.n_files; fk++) r->f[fk].step = e.step;
        if (e.n_files) {
            if (r->nfix == r->fixcap) {
                size_t nc = r->fixcap ? r->fixcap * 2 : 8;
                struct fz_fix_span *nx = (struct fz_fix_span *)realloc(r->fix, nc * sizeof *nx);
                FZ_CHECK(nx != NULL);
                r->fix = nx;
                r->fixcap = nc;
            }
            r->fix[r->nfix].bytes_at = bytes_at;
            r->fix[r->nfix].bytes_end = bytes_end;
            r->fix[r->nfix].digest_at = digest_at;
            r->fix[r->nfix].ffirst = ffirst;
            r->fix[r->nfix].n_files = e.n_files;
            r->nfix++;
        }
        if (r->n == r->cap) {
            size_t nc = r->cap ? r->cap * 2 : 16;
            wsync_chain_entry *ne = (wsync_chain_entry *)realloc(r->e, nc * sizeof *ne);
            size_t *nef;
            FZ_CHECK(ne != NULL);
            r->e = ne;
            nef = (size_t *)realloc(r->ef, nc * sizeof *nef);
            FZ_CHECK(nef != NULL);
            r->ef = nef;
            r->cap = nc;
        }
        r->ef[r->n] = ffirst;
        r->e[r->n++] = e;
        k = fz_ws(p, n, k);
        if (p[k] == ']') break;
        k = fz_ws(p, n, k + 1);
    }
    *i = k + 1;
    return 1;
}

static int fz_entry_before(const wsync_chain_entry *a, const wsync_chain_entry *b)
{
    return a->kind != b->kind ? a->kind == WSYNC_CHAIN_ANCHOR : a->step < b->step;
}

/* Reads p[0..n), valid JSON, by HEAD's rules into r (r->ok says the verdict). */
static void fz_ref_read(const uint8_t *p, size_t n, fz_ref *r)
{
    static const char *const req[] = {"format", "version", "step", "anchor", "state", "anchors", "deltas", "check"};
    size_t i, j;
    unsigned seen = 0;
    uint64_t top = 0, top_anchor = 0;
    int any_anchor = 0;

    memset(r, 0, sizeof *r);
    r->ok = 1;
    if (n > FZ_MAX_TEXT) {
        fz_ref_bad(r, "text too large");
        return;
    }
    i = fz_ws(p, n, 0);
    if (p[i] != '{') {
        fz_ref_bad(r, "not an object");
        return;
    }
    i = fz_ws(p, n, i + 1);
    if (p[i] == '}') {
        fz_ref_bad(r, "empty object");
        return;
    }
    for (;;) {
        const uint8_t *s, *v;
        size_t len, vl, at = i;
        unsigned bit = 0;
        int ok = 1;
        if (seen & 128u) {
            fz_ref_bad(r, "a key after \"check\"");
            return;
        }
        if (!fz_plain_string(p, n, &i, &s, &len)) {
            fz_ref_bad(r, "a key that is not a plain string");
            return;
        }
        if ((seen & 2048u) && !fz_str_is(s, len, "check")) {
            fz_ref_bad(r, "a key other than \"check\" after \"sig\"");
            return;
        }
        i = fz_ws(p, n, fz_ws(p, n, i) + 1);
        if (fz_str_is(s, len, "id")) {
            uint8_t b[16];
            bit = 512;
            ok = fz_ref_hexbytes(p, n, &i, b, sizeof b);
        } else if (fz_str_is(s, len, "signer")) {
            uint8_t b[32];
            bit = 1024;
            ok = fz_ref_hexbytes(p, n, &i, b, sizeof b);
        } else if (fz_str_is(s, len, "sig")) {
            uint8_t b[64];
            bit = 2048;
            ok = fz_ref_hexbytes(p, n, &i, b, sizeof b);
        } else if (fz_str_is(s, len, "format")) {
            bit = 1;
            ok = fz_plain_string(p, n, &i, &v, &vl) && fz_str_is(v, vl, "wsync-chain");
        } else if (fz_str_is(s, len, "version")) {
            bit = 2;
            ok = fz_ref_u64(p, n, &i, &r->version) && (r->version == 1 || r->version == 2);
        } else if (fz_str_is(s, len, "step")) {
            bit = 4;
            ok = fz_ref_u64(p, n, &i, &r->head_step);
        } else if (fz_str_is(s, len, "anchor")) {
            bit = 8;
            ok = fz_ref_u64(p, n, &i, &r->anchor_step);
        } else if (fz_str_is(s, len, "state")) {
            bit = 16;
            ok = fz_ref_hex64(p, n, &i, &r->head_state);
        } else if (fz_str_is(s, len, "anchors") || fz_str_is(s, len, "deltas")) {
            int d = s[0] == 'd';
            bit = d ? 64u : 32u;
            if (seen & bit) {
                fz_ref_bad(r, "anchors or deltas twice");
                return;
            }
            if (!fz_ref_entries(r, p, n, &i, d ? WSYNC_CHAIN_DELTA : WSYNC_CHAIN_ANCHOR)) return;
        } else if (fz_str_is(s, len, "check")) {
            bit = 128;
            r->check_at = at;
            ok = fz_ref_hex64(p, n, &i, &r->check);
        } else if (fz_str_is(s, len, "encoding")) {
            bit = 256;
            ok = fz_plain_string(p, n, &i, &v, &vl) && vl < 16;
            if (ok) {
                r->encoding = fz_str_is(v, vl, "packed")       ? WSYNC_ENCODING_PACKED
                              : fz_str_is(v, vl, "packed-max") ? WSYNC_ENCODING_PACKED_MAX
                              : fz_str_is(v, vl, "trl-v1")     ? WSYNC_ENCODING_TRL_V1
                              : fz_str_is(v, vl, "trl-v3")     ? WSYNC_ENCODING_TRL_V3
                                                               : (wsync_encoding)0;
            }
        } else {
            ok = fz_ref_skip(p, n, &i, 1);
        }
        if (!ok) {
            fz_ref_bad(r, "a bad value for a known key, or an unknown value the reader cannot skip");
            return;
        }
        if (seen & bit) {
            fz_ref_bad(r, "a known key twice");
            return;
        }
        seen |= bit;
        i = fz_ws(p, n, i);
        if (p[i] == '}') break;
        i = fz_ws(p, n, i + 1);
    }
    r->parsed = 1;
    for (j = 0; j < sizeof req / sizeof *req; j++)
        if (!(seen & (1u << j))) {
            fz_ref_bad(r, "a required key is missing");
            return;
        }
    if (wsync_digest(p, r->check_at) != r->check) {
        fz_ref_bad(r, "\"check\" is not the digest of the bytes before it");
        return;
    }
    if (r->nf && r->version != 2) {
        fz_ref_bad(r, "\"files\" in a version 1 HEAD");
        return;
    }
    /* signed HEADs: "signer" and "sig" together, with "id"; every object
       (each file of a directory's anchor) names its "blake2b" */
    if (((seen & 1024u) != 0) != ((seen & 2048u) != 0) || ((seen & 2048u) && !(seen & 512u))) {
        fz_ref_bad(r, "\"signer\", \"id\" and \"sig\": one without the others");
        return;
    }
    if (seen & 2048u) {
        for (i = 0; i < r->n; i++)
            if (!r->e[i].n_files && !r->e[i].has_hash) {
                fz_ref_bad(r, "a signed HEAD with an object without \"blake2b\"");
                return;
            }
        for (i = 0; i < r->nf; i++)
            if (!r->f[i].has_hash) {
                fz_ref_bad(r, "a signed HEAD with a file without \"blake2b\"");
                return;
            }
    }
    /* the chain: anchors first (the lists may come in either order; each is
       ascending already), then its rules */
    for (i = 1; i < r->n; i++) {
        wsync_chain_entry e = r->e[i];
        size_t ef = r->ef[i];
        for (j = i; j > 0 && fz_entry_before(&e, &r->e[j - 1]); j--) r->e[j] = r->e[j - 1], r->ef[j] = r->ef[j - 1];
        r->e[j] = e;
        r->ef[j] = ef;
    }
    /* each directory anchor's files, where they were read (f no longer grows) */
    for (i = 0; i < r->n; i++) r->e[i].files = r->e[i].n_files ? r->f + r->ef[i] : NULL;
    if (r->n == 0 || r->n > FZ_MAX_ENTRIES) {
        fz_ref_bad(r, "no entries, or too many");
        return;
    }
    for (i = 0; i < r->n; i++) {
        const wsync_chain_entry *e = &r->e[i];
        if (i && e->kind == r->e[i - 1].kind && e->step == r->e[i - 1].step) {
            fz_ref_bad(r, "a step twice");
            return;
        }
        if (e->kind == WSYNC_CHAIN_DELTA && e->base >= e->step) {
            fz_ref_bad(r, "a delta whose base is not before its step");
            return;
        }
        if (e->n_files) {
            const char *why = fz_files_rule(e, e->files, e->n_files);
            if (why) {
                fz_ref_bad(r, why);
                return;
            }
        }
        if (e->step > top) top = e->step;
        if (e->kind == WSYNC_CHAIN_ANCHOR) any_anchor = 1, top_anchor = e->step;
    }
    if (!any_anchor) fz_ref_bad(r, "no anchor");
    else if (top != r->head_step) fz_ref_bad(r, "\"step\" is not the newest step");
    else if (top_anchor != r->anchor_step) fz_ref_bad(r, "\"anchor\" is not the newest anchor");
}

/* ---------------------------------------------------------------------
   Checks on the library's results
   --------------------------------------------------------------------- */

static void fz_check_zeroed(const wsync_chain_info *c)
{
    FZ_CHECK(c->has_head == 0 && c->head_step == 0 && c->anchor_step == 0 && c->head_state == 0);
    FZ_CHECK(c->encoding == (wsync_encoding)0);
    FZ_CHECK(c->entries == NULL && c->n_entries == 0);
    FZ_CHECK(c->files == NULL && c->n_files == 0);
    FZ_CHECK(c->allocator.alloc == NULL && c->allocator.free == NULL && c->allocator.user == NULL);
}

/* What every accepted chain must satisfy. */
static void fz_check_info(const wsync_chain_info *c)
{
    size_t i, k = 0;
    uint64_t top = 0, top_anchor = 0;
    FZ_CHECK(c->has_head == 1);
    FZ_CHECK(c->n_entries >= 1 && c->n_entries <= FZ_MAX_ENTRIES);
    FZ_CHECK(c->entries != NULL);
    FZ_CHECK(c->entries[0].kind == WSYNC_CHAIN_ANCHOR);
    FZ_CHECK(c->encoding == (wsync_encoding)0 ||
             (c->encoding >= WSYNC_ENCODING_PACKED && c->encoding <= WSYNC_ENCODING_TRL_V3));
    for (i = 0; i < c->n_entries; i++) {
        const wsync_chain_entry *e = &c->entries[i];
        char want[64];
        FZ_CHECK(e->kind == WSYNC_CHAIN_ANCHOR || e->kind == WSYNC_CHAIN_DELTA);
        if (i) {
            const wsync_chain_entry *q = &c->entries[i - 1];
            FZ_CHECK(!(q->kind == WSYNC_CHAIN_DELTA && e->kind == WSYNC_CHAIN_ANCHOR)); /* anchors first */
            FZ_CHECK(q->kind != e->kind || q->step < e->step);                         /* strictly ascending */
        }
        FZ_CHECK(e->step <= WSYNC_STEP_MAX);
        if (e->kind == WSYNC_CHAIN_ANCHOR) {
            FZ_CHECK(e->base == e->step);
            top_anchor = e->step;
        } else {
            FZ_CHECK(e->base < e->step);
        }
        FZ_CHECK(e->has_digests == 1);
        FZ_CHECK(e->encoding == (wsync_encoding)0 ||
                 (e->kind == WSYNC_CHAIN_DELTA && e->encoding >= WSYNC_ENCODING_PACKED &&
                  e->encoding <= WSYNC_ENCODING_TRL_V3));
        FZ_CHECK(memchr(e->key, 0, sizeof e->key) != NULL);
        if (e->n_files)
            snprintf(want, sizeof want, "anchors/step_%06llu/", (unsigned long long)e->step);
        else
            snprintf(want, sizeof want, "%s/step_%06llu.safetensors",
                     e->kind == WSYNC_CHAIN_ANCHOR ? "anchors" : "deltas", (unsigned long long)e->step);
        FZ_CHECK(strcmp(e->key, want) == 0);
        /* a directory anchor's files: the next run of c->files, in the
           anchors' order, each NUL-terminated and keeping the rules */
        if (e->n_files) {
            size_t j;
            const char *why;
            FZ_CHECK(e->kind == WSYNC_CHAIN_ANCHOR);
            FZ_CHECK(c->files != NULL && e->n_files <= c->n_files - k);
            FZ_CHECK(e->files == c->files + k);
            for (j = 0; j < e->n_files; j++)
                FZ_CHECK(memchr(e->files[j].name, 0, sizeof e->files[j].name) != NULL);
            why = fz_files_rule(e, e->files, e->n_files);
            if (why) fprintf(stderr, "anchor %llu: %s\n", (unsigned long long)e->step, why);
            FZ_CHECK(why == NULL);
            k += e->n_files;
        } else {
            FZ_CHECK(e->files == NULL);
        }
        if (e->step > top) top = e->step;
    }
    FZ_CHECK(k == c->n_files); /* every file belongs to an anchor */
    FZ_CHECK((c->files == NULL) == (c->n_files == 0));
    FZ_CHECK(c->head_step == top);
    FZ_CHECK(c->anchor_step == top_anchor);
    FZ_CHECK(c->anchor_step <= c->head_step);
}

static void fz_check_same_entry(const wsync_chain_entry *a, const wsync_chain_entry *b)
{
    FZ_CHECK(a->kind == b->kind);
    FZ_CHECK(a->step == b->step);
    FZ_CHECK(a->base == b->base);
    FZ_CHECK(a->bytes == b->bytes);
    FZ_CHECK(a->has_digests == b->has_digests);
    FZ_CHECK(a->digest == b->digest);
    FZ_CHECK(a->state == b->state);
    FZ_CHECK(strcmp(a->key, b->key) == 0);
    FZ_CHECK(a->encoding == b->encoding);
    FZ_CHECK(a->n_files == b->n_files);
    if (a->n_files) {
        size_t j;
        FZ_CHECK(a->files != NULL && b->files != NULL);
        for (j = 0; j < a->n_files; j++) {
            const wsync_chain_file *x = &a->files[j], *y = &b->files[j];
            FZ_CHECK(memchr(x->name, 0, sizeof x->name) != NULL && memchr(y->name, 0, sizeof y->name) != NULL);
            FZ_CHECK(strcmp(x->name, y->name) == 0);
            FZ_CHECK(x->bytes == y->bytes);
            FZ_CHECK(x->digest == y->digest);
            FZ_CHECK(x->tensors == y->tensors);
            FZ_CHECK(x->step == y->step);
        }
    }
}

static void fz_check_same(const wsync_chain_info *a, const wsync_chain_info *b)
{
    size_t i;
    FZ_CHECK(a->has_head == b->has_head);
    FZ_CHECK(a->head_step == b->head_step);
    FZ_CHECK(a->anchor_step == b->anchor_step);
    FZ_CHECK(a->head_state == b->head_state);
    FZ_CHECK(a->encoding == b->encoding);
    FZ_CHECK(a->n_entries == b->n_entries);
    FZ_CHECK(a->n_files == b->n_files);
    for (i = 0; i < a->n_entries; i++) fz_check_same_entry(&a->entries[i], &b->entries[i]);
}

/* The library's reading agrees with the reference's. */
static void fz_check_ref(const wsync_chain_info *c, const fz_ref *r)
{
    size_t i;
    FZ_CHECK(r->ok);
    FZ_CHECK(c->head_step == r->head_step);
    FZ_CHECK(c->anchor_step == r->anchor_step);
    FZ_CHECK(c->head_state == r->head_state);
    FZ_CHECK(c->encoding == r->encoding);
    FZ_CHECK(c->n_entries == r->n);
    FZ_CHECK(c->n_files == r->nf);
    for (i = 0; i < c->n_entries; i++) fz_check_same_entry(&c->entries[i], &r->e[i]);
}

/* ---------------------------------------------------------------------
   Steps
   --------------------------------------------------------------------- */

/* Step 4: the first, middle and last allocation of a parse that made n. */
static void fz_parse_alloc_failures(const uint8_t *buf, size_t size, size_t n_calls)
{
    size_t picks[3], k;
    picks[0] = 0;
    picks[1] = n_calls / 2;
    picks[2] = n_calls - 1;
    for (k = 0; k < 3; k++) {
        fz_heap heap;
        wsync_allocator a;
        wsync_chain_info c;
        wsync_error err;
        wsync_result r;
        if (k > 0 && picks[k] == picks[k - 1]) continue;
        a = fz_allocator(&heap, picks[k]);
        memset(&c, 0xA5, sizeof c);
        memset(&err, 0xA5, sizeof err);
        r = wsync_chain_head_parse(buf, size, &a, &c, &err);
        if (r != WSYNC_ERR_OUT_OF_MEMORY)
            fprintf(stderr, "allocation %lu of %lu failed; the parse returned %s: %s\n", (unsigned long)picks[k],
                    (unsigned long)n_calls, wsync_result_name(r), r == WSYNC_OK ? "" : err.message);
        FZ_CHECK(r == WSYNC_ERR_OUT_OF_MEMORY);
        FZ_CHECK(heap.failed == 1);
        fz_check_error(&err, r, size);
        fz_check_zeroed(&c);
        FZ_CHECK(heap.live == 0);
    }
}

/* Step 5: format, parse back, format again. */
static void fz_roundtrip(const wsync_chain_info *c)
{
    fz_heap heap, heap2;
    wsync_chain_info f, back;
    wsync_error err;
    wsync_result r;
    char *text = NULL, *text2 = NULL;
    size_t len = 0, len2 = 0;

    /* the text comes from the info's allocator: ours, counted */
    f = *c;
    f.allocator = fz_allocator(&heap, SIZE_MAX);
    memset(&err, 0xA5, sizeof err);
    r = wsync_chain_head_format(&f, &text, &len, &err);
    if (r != WSYNC_OK) fprintf(stderr, "format of a parsed chain: %s\n", err.message);
    FZ_CHECK(r == WSYNC_OK);
    FZ_CHECK(err.code == WSYNC_OK);
    FZ_CHECK(text != NULL && len > 0);
    FZ_CHECK(heap.live == 1);
    FZ_CHECK(fz_json_text_ok((const uint8_t *)text, len, 0, FZ_JSON_MAX_DEPTH, FZ_JSON_UTF8));
    {
        /* version 2 exactly when an anchor has files */
        char want[64];
        int wl = snprintf(want, sizeof want, "{\"format\":\"wsync-chain\",\"version\":%d,", c->n_files ? 2 : 1);
        FZ_CHECK(len > (size_t)wl && memcmp(text, want, (size_t)wl) == 0);
    }
    if (FZ_REFERENCE) {
        fz_ref ref;
        fz_ref_read((const uint8_t *)text, len, &ref);
        if (!ref.ok) fprintf(stderr, "reference on the formatted text: %s\n", ref.why);
        fz_check_ref(c, &ref);
        FZ_CHECK(ref.version == (c->n_files ? 2u : 1u));
        fz_ref_free(&ref);
    }

    /* parse back: the same fields */
    memset(&back, 0xA5, sizeof back);
    r = wsync_chain_head_parse(text, len, NULL, &back, &err);
    if (r != WSYNC_OK) fprintf(stderr, "re-parse of the formatted text: %s\n", err.message);
    FZ_CHECK(r == WSYNC_OK);
    fz_check_info(&back);
    fz_check_same(c, &back);

    /* format again: the same bytes */
    back.allocator = fz_allocator(&heap2, SIZE_MAX);
    r = wsync_chain_head_format(&back, &text2, &len2, NULL);
    FZ_CHECK(r == WSYNC_OK);
    FZ_CHECK(len2 == len && memcmp(text2, text, len) == 0);
    fz_free(&heap2, text2);
    FZ_CHECK(heap2.live == 0);
    back.allocator.alloc = NULL; /* it was parsed with the default allocator */
    back.allocator.free = NULL;
    back.allocator.user = NULL;
    wsync_chain_info_free(&back);
    fz_check_zeroed(&back);

    fz_free(&heap, text);
    FZ_CHECK(heap.live == 0);

    /* its one allocation failing */
    f.allocator = fz_allocator(&heap, 0);
    text = (char *)&heap; /* must be reset */
    len = 12345;
    memset(&err, 0xA5, sizeof err);
    r = wsync_chain_head_format(&f, &text, &len, &err);
    FZ_CHECK(r == WSYNC_ERR_OUT_OF_MEMORY);
    fz_check_error(&err, r, SIZE_MAX);
    FZ_CHECK(text == NULL && len == 0);
    FZ_CHECK(heap.failed == 1 && heap.live == 0);
}

/* Steps 1-5 for one text. */
static void fz_run(const uint8_t *data, size_t size)
{
    uint8_t *buf = NULL;
    fz_heap heap;
    wsync_allocator a;
    wsync_chain_info c, c2;
    wsync_error err;
    wsync_result r, r2;
    int json, json_utf8, json_ok;
    fz_ref ref;

    fz_input_size = size;
    fz_input_hash = fz_fnv1a(data, size);

    /* exactly sized, so the first byte past the end is a redzone */
    if (size) {
        buf = (uint8_t *)malloc(size);
        FZ_CHECK(buf != NULL);
        memcpy(buf, data, size);
    }
    json = fz_json_text_ok(buf, size, 0, FZ_JSON_MAX_DEPTH, 0);
    json_utf8 = json && fz_json_text_ok(buf, size, 0, FZ_JSON_MAX_DEPTH, FZ_JSON_UTF8);
    json_ok = FZ_CHECK_UTF8 ? json_utf8 : json; /* what an accepted text must be */
    memset(&ref, 0, sizeof ref); /* ref.ok == 0: no verdict */
    if (FZ_REFERENCE && json) fz_ref_read(buf, size, &ref);

    a = fz_allocator(&heap, SIZE_MAX);
    memset(&err, 0xA5, sizeof err); /* must be reset on entry */
    memset(&c, 0xA5, sizeof c);     /* must be zeroed on failure */
    r = wsync_chain_head_parse(buf, size, &a, &c, &err);

    /* the default allocator and no wsync_error: the same answer */
    memset(&c2, 0x5A, sizeof c2);
    r2 = wsync_chain_head_parse(buf, size, NULL, &c2, NULL);
    FZ_CHECK(r2 == r);
    if (r2 == WSYNC_OK) {
        fz_check_same(&c, &c2);
        FZ_CHECK(c2.allocator.alloc == NULL && c2.allocator.free == NULL);
        wsync_chain_info_free(&c2);
    } else {
        fz_check_zeroed(&c2);
    }

    if (r != WSYNC_OK) {
        if (r != WSYNC_ERR_BAD_HEAD)
            fprintf(stderr, "unexpected parse result %d (%s): %s\n", (int)r, wsync_result_name(r), err.message);
        FZ_CHECK(r == WSYNC_ERR_BAD_HEAD); /* no allocation was made to fail */
        fz_check_error(&err, r, size);
        fz_check_zeroed(&c);
        FZ_CHECK(heap.live == 0);
        if (FZ_REFERENCE && json_utf8 && ref.ok) {
            fprintf(stderr, "the parser rejected a HEAD its rules accept: %s\n", err.message);
            fz_fail(__LINE__, "a valid HEAD rejected");
        }
    } else {
        size_t n_calls = heap.calls;
        FZ_CHECK(err.code == WSYNC_OK);
        if (!json_ok) fz_fail(__LINE__, "the parser accepted text that is not JSON (RFC 8259)");
        if (FZ_REFERENCE) {
            if (!ref.ok) {
                fprintf(stderr, "accepted, but the reference says: %s\n", ref.why);
                fz_fail(__LINE__, "the parser accepted a HEAD its rules reject");
            }
            fz_check_ref(&c, &ref);
        }
        fz_check_info(&c);
        FZ_CHECK(c.allocator.alloc == fz_alloc && c.allocator.user == &heap);
        FZ_CHECK(heap.live >= 1);
        FZ_CHECK(n_calls >= 1);
        fz_parse_alloc_failures(buf, size, n_calls);
        fz_roundtrip(&c);
        wsync_chain_info_free(&c);
        fz_check_zeroed(&c);
        FZ_CHECK(heap.live == 0);
    }
    fz_ref_free(&ref);
    free(buf);
}

/* A copy of the input with its "check" digest recomputed, or NULL when it
   has no "check":"<16 bytes>" or the digest there is already right. The
   last occurrence of the key counts (it must be the last key). */
static uint8_t *fz_fix_check(const uint8_t *data, size_t size)
{
    static const char key[] = "\"check\"";
    static const char hexd[] = "0123456789abcdef";
    size_t at, i, k;
    uint64_t d;
    uint8_t *copy;
    if (size < sizeof key - 1) return NULL;
    for (at = size - (sizeof key - 1) + 1; at-- > 0;)
        if (memcmp(data + at, key, sizeof key - 1) == 0) break;
    if (at == (size_t)-1) return NULL;
    i = fz_ws(data, size, at + sizeof key - 1);
    if (i >= size || data[i] != ':') return NULL;
    i = fz_ws(data, size, i + 1);
    if (i >= size || data[i] != '"' || size - i < 18) return NULL;
    i++;
    d = wsync_digest(data, at);
    copy = (uint8_t *)malloc(size);
    FZ_CHECK(copy != NULL);
    memcpy(copy, data, size);
    for (k = 16; k-- > 0; d >>= 4) copy[i + k] = (uint8_t)hexd[d & 15];
    if (memcmp(copy, data, size) == 0) {
        free(copy);
        return NULL;
    }
    return copy;
}

/* A copy of the input (valid JSON, read by the reference to the end of its
   object) with each directory anchor's "bytes" and "digest" rewritten to
   its files' sum and digest of digests, so that mutations of the files get
   past those two to the rules behind them (and to an accepted chain);
   NULL when it has no directory anchor, the files' sizes overflow, or
   nothing changes. *out_n: its size ("check" is fixed after, by the
   caller). */
static uint8_t *fz_fix_files(const uint8_t *data, size_t size, size_t *out_n)
{
    static const char hexd[] = "0123456789abcdef";
    fz_ref r;
    uint8_t *o = NULL;
    size_t i, on = 0, from = 0, cap;
    *out_n = 0;
    if (!fz_json_text_ok(data, size, 0, FZ_JSON_MAX_DEPTH, 0)) return NULL;
    fz_ref_read(data, size, &r);
    if (!r.parsed || r.nfix == 0) {
        fz_ref_free(&r);
        return NULL;
    }
    cap = size + r.nfix * 24 + 1;
    o = (uint8_t *)malloc(cap);
    FZ_CHECK(o != NULL);
    for (i = 0; i < r.nfix; i++) {
        const struct fz_fix_span *x = &r.fix[i];
        const wsync_chain_file *f = r.f + x->ffirst;
        uint64_t total = 0, d = fz_files_digest(f, x->n_files);
        char num[24];
        size_t j, nl, at[2], end[2], first;
        const char *put[2];
        size_t putn[2];
        char hex[16];
        unsigned k;
        for (j = 0; j < x->n_files; j++) {
            if (f[j].bytes > UINT64_MAX - total) {
                free(o);
                fz_ref_free(&r);
                return NULL;
            }
            total += f[j].bytes;
        }
        nl = (size_t)snprintf(num, sizeof num, "%llu", (unsigned long long)total);
        for (k = 16; k-- > 0; d >>= 4) hex[k] = hexd[d & 15];
        /* the two values in text order: the number, and the digest's 16 digits after its quote */
        first = x->bytes_at < x->digest_at ? 0 : 1;
        at[first] = x->bytes_at, end[first] = x->bytes_end, put[first] = num, putn[first] = nl;
        at[1 - first] = x->digest_at + 1, end[1 - first] = x->digest_at + 17, put[1 - first] = hex,
                   putn[1 - first] = 16;
        for (k = 0; k < 2; k++) {
            FZ_CHECK(at[k] >= from && end[k] <= size && at[k] < end[k]);
            memcpy(o + on, data + from, at[k] - from);
            on += at[k] - from;
            memcpy(o + on, put[k], putn[k]);
            on += putn[k];
            from = end[k];
        }
    }
    memcpy(o + on, data + from, size - from);
    on += size - from;
    FZ_CHECK(on < cap);
    fz_ref_free(&r);
    if (on == size && memcmp(o, data, size) == 0) {
        free(o);
        return NULL;
    }
    *out_n = on;
    return o;
}

/* Once per process, before the first input: an anchor of
   WSYNC_CHAIN_FILES_MAX files (accepted) and of one more (refused), run
   through fz_run like any input. Made here rather than kept as inputs:
   about 210 KB each, they would raise libFuzzer's -max_len (the largest
   input it is given) from a few KB to that, and its speed tenfold down. */
static void fz_files_max_once(void)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    static int done;
    size_t k, i;
    if (done) return;
    done = 1;
    for (k = 0; k < 2; k++) {
        size_t nf = WSYNC_CHAIN_FILES_MAX + k, cap = nf * 64 + 1024, o = 0;
        char *b = (char *)malloc(cap);
        wsync_chain_file *f = (wsync_chain_file *)calloc(nf, sizeof *f);
        uint64_t d;
        unsigned j;
        FZ_CHECK(b != NULL && f != NULL);
        o += (size_t)snprintf(b + o, cap - o,
                              "{\"format\":\"wsync-chain\",\"version\":2,\"step\":2,\"anchor\":2,"
                              "\"state\":\"00000000000000a5\",\"anchors\":[{\"step\":2,\"bytes\":0,"
                              "\"digest\":\"%016llx\",\"state\":\"fedcba9876543210\",\"files\":[",
                              (unsigned long long)fz_files_digest(f, nf));
        for (i = 0; i < nf; i++) /* names "AA".."--", then "AA0" */
            o += (size_t)snprintf(b + o, cap - o,
                                  "%s{\"name\":\"%c%c%s\",\"bytes\":0,\"digest\":\"0000000000000000\"%s}",
                                  i ? "," : "", al[i / 64 % 64], al[i % 64], i >= 4096 ? "0" : "",
                                  i ? "" : ",\"tensors\":1");
        o += (size_t)snprintf(b + o, cap - o, "]}],\"deltas\":[],");
        d = wsync_digest(b, o);
        o += (size_t)snprintf(b + o, cap - o, "\"check\":\"");
        for (j = 16; j-- > 0;) b[o + j] = "0123456789abcdef"[(d >> (4 * (15 - j))) & 15];
        o += 16;
        o += (size_t)snprintf(b + o, cap - o, "\"}\n");
        FZ_CHECK(o < cap);
        {
            wsync_chain_info c;
            wsync_result r = wsync_chain_head_parse(b, o, NULL, &c, NULL);
            fz_input_size = o;
            fz_input_hash = fz_fnv1a((const uint8_t *)b, o);
            if ((r == WSYNC_OK) != (k == 0))
                fz_fail(__LINE__, "WSYNC_CHAIN_FILES_MAX files not accepted, or one more not refused");
            if (r == WSYNC_OK) {
                FZ_CHECK(c.n_files == WSYNC_CHAIN_FILES_MAX);
                wsync_chain_info_free(&c);
            }
        }
        fz_run((const uint8_t *)b, o);
        free(b);
        free(f);
    }
}

/* ---------------------------------------------------------------------
   Entry point
   --------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *fixed;
    fz_files_max_once();
    fz_stage = NULL;
    fz_run(data, size);
    fixed = FZ_FIX_CHECK ? fz_fix_check(data, size) : NULL;
    if (fixed) {
        fz_stage = "with its \"check\" digest recomputed";
        fz_run(fixed, size);
        fz_stage = NULL;
        free(fixed);
    }
    if (FZ_FIX_FILES && FZ_REFERENCE) {
        size_t fn = 0;
        uint8_t *ff = fz_fix_files(data, size, &fn), *fc;
        if (ff) {
            fc = fz_fix_check(ff, fn);
            fz_stage = "with its directory anchors' bytes and digests and its \"check\" recomputed";
            fz_run(fc ? fc : ff, fn);
            fz_stage = NULL;
            free(fc);
            free(ff);
        }
    }
    return 0;
}
