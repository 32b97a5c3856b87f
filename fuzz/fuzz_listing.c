/* fuzz_listing.c - fuzz harness for the two parsers of listings that a
   server sends back (wsync_http.h): wsync_http_listing_parse (nginx's
   `autoindex_format json` directory listing) and wsync_s3_listing_parse (an
   S3 ListObjectsV2 XML page). Whoever runs the server, or sits between it
   and us, chooses these bytes, so the harness treats them as hostile.

   Both parsers run on every input (no selector byte): a seed is a plain
   listing file, JSON or XML, exactly as a server sends it. They are cheap,
   and an input that is one kind is a rejection test for the other.

   The parsers are compiled with WSYNC_HTTP_NO_CURL: they do not use libcurl,
   so this file links without -lcurl (the Makefile's replay and libFuzzer
   rules work as they are).

   Build and run (from the repository root):

     libFuzzer (clang):   make build/fuzz/fuzz_listing
                          mkdir -p build/fuzz/work_listing
                          build/fuzz/fuzz_listing -dict=fuzz/listing.dict \
                              build/fuzz/work_listing fuzz/corpus/listing fuzz/data/listing
     Replay without a fuzzer (any C99 compiler; `make test` does this):
                          make build/replay_listing build/san/replay_listing
                          build/san/replay_listing fuzz/corpus/listing fuzz/data/listing

   What one input goes through. It is copied into a malloc'd buffer of
   exactly its size (ASan sees a read past the end; an empty input is passed
   as NULL, 0). The parsers allocate with malloc (they take no allocator), so
   leaks are LeakSanitizer's to find (libFuzzer's -detect_leaks, the
   sanitized replay at exit); allocation failures cannot be injected.

   nginx (wsync_http_listing_parse):
     1. Every callback: name non-NULL, NUL-terminated at name_len, name_len
        in [1, input size], no NUL and no '/' in it, not "." or "..",
        is_dir 0 or 1, a file's size below 2^63.
     2. Failure: WSYNC_ERR_INVALID_JSON (the only code for a readable
        input), err.code the same, a nonempty NUL-terminated message, an
        offset inside the input (<= size; never UINT64_MAX for a syntax
        error). The same parse with a NULL wsync_error gives the same result
        and the same callbacks.
     3. Two oracles: a strict RFC 8259 recognizer (fuzz/json_oracle.h, shared
        with the other JSON fuzzers; strings may
        hold any byte >= 0x20: the parser does not check UTF-8 and does not
        promise to), since an accepted listing must be JSON; and a reference
        reading of the documented shape over valid JSON: one array of
        objects with scalar values only; "name" and "type" strings, "size" a
        plain integer in [0, 2^63) (no sign, fraction or exponent), none of
        the three twice; member names compared after unescaping, exactly
        (with their length); no lone surrogate escape in any string; every
        entry has name and type; the name is not empty, ".", "..", and holds
        no '/' or NUL; a "file" has a size; only "file" and "directory"
        entries are reported (exact strings), in order. The parser must
        accept exactly what it accepts, with the same callbacks (the size of
        a directory is not compared: the doc gives "size only for files").
     4. Success: the callbacks stop where fn says so: fn returning nonzero at
        the first and at the last entry gives WSYNC_OK with no call after.

   S3 (wsync_s3_listing_parse):
     1. Every callback: key non-NUL, NUL-terminated at key_len, key_len in
        [1, input size], no NUL inside, size below 2^63.
     2. The token buffer has canary bytes after token_cap: they must stay;
        the token is NUL-terminated inside token_cap. Run with token_cap =
        size + 1 (always enough) with and without a wsync_error (same
        result, same callbacks, same truncated and token), and with the
        1024 bytes the store uses (success there means the same success;
        a success with the big buffer whose token needs 1024 bytes or more
        must fail there).
     3. Failure: WSYNC_ERR_IO, err.code the same, a nonempty message that
        says "byte", an offset inside the input (<= size, not UINT64_MAX).
     4. Success: *truncated is 0 or 1 and a truncated page has a nonempty
        token; keys come in the order given: when the input has no '&' (so
        no entity), the keys are found in the input in order, each followed
        by "</Key", and a nonempty token is found followed by
        "</NextContinuationToken"; no more keys than "<Contents" in the
        input; the callbacks stop where fn says so (as for nginx). Two
        things XML allows must not change the answer: a comment appended at
        the end, and (for an input without a byte-order mark and not
        starting with "<?") an XML declaration prepended.
   Any violation prints what failed and calls abort(), the fuzzer's signal.

   Compile-time switches:
     FZ_REFERENCE   (default 1) the nginx reference reading (step 3's second
                    oracle); -DFZ_REFERENCE=0 keeps only the recognizer
     FZ_EXACT_TYPE  (default 1) the reference compares "type" with its
                    length, as it does member names; 0 compares up to a NUL
                    the way the parser did before 1de0d9b (strcmp), to fuzz
                    past that bug (fuzz/data/listing/bug_type_nul_*) on an
                    older tree */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_HTTP_NO_CURL
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_oracle.h"

#ifndef FZ_REFERENCE
#define FZ_REFERENCE 1
#endif
#ifndef FZ_EXACT_TYPE
#define FZ_EXACT_TYPE 1
#endif

#define FZ_SIZE_LIMIT UINT64_C(0x7FFFFFFFFFFFFFFF) /* sizes are below 2^63: at most this */
#define FZ_STORE_TOKEN_CAP 1024u                   /* wsync__s3_list's token buffer */
#define FZ_CANARY 16u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Failing loudly (fz_fail, FZ_CHECK), the input's hash, fz_xmalloc; what
   the callbacks saw (fz_seen), fz_memmem, fz_count */
#include "fuzz_common.h"

static int fz_nginx_fn(void *user, const char *name, size_t name_len, int is_dir, uint64_t size)
{
    FZ_CHECK(name != NULL);
    FZ_CHECK(name_len >= 1 && name_len <= fz_input_size);
    FZ_CHECK(name[name_len] == 0);
    FZ_CHECK(memchr(name, 0, name_len) == NULL);
    FZ_CHECK(memchr(name, '/', name_len) == NULL);
    FZ_CHECK(strcmp(name, ".") != 0 && strcmp(name, "..") != 0);
    FZ_CHECK(is_dir == 0 || is_dir == 1);
    if (!is_dir) FZ_CHECK(size <= FZ_SIZE_LIMIT);
    return fz_seen_add((fz_seen *)user, name, name_len, is_dir, size);
}

static int fz_s3_fn(void *user, const char *key, size_t key_len, uint64_t size)
{
    FZ_CHECK(key != NULL);
    FZ_CHECK(key_len >= 1 && key_len <= fz_input_size);
    FZ_CHECK(key[key_len] == 0);
    FZ_CHECK(memchr(key, 0, key_len) == NULL);
    FZ_CHECK(size <= FZ_SIZE_LIMIT);
    return fz_seen_add((fz_seen *)user, key, key_len, 0, size);
}

/* ---------------------------------------------------------------------
   Oracle: a strict RFC 8259 recognizer (any byte >= 0x20 inside strings)
   --------------------------------------------------------------------- */

#define FZ_JSON_MAX_DEPTH 512

/* The recognizer is fuzz/json_oracle.h's (with no UTF-8 or surrogate-pair
   rule: the listing's reader takes any byte >= 0x20 in a string and
   refuses a lone surrogate only where it decodes a name, below). */

/* ---------------------------------------------------------------------
   Oracle: the listing's documented shape, read over valid JSON
   --------------------------------------------------------------------- */

/* Decodes the (valid) string at p[*i] into out (room for its raw length
   plus 1) with json_oracle.h's decoder; 0 when it holds a lone surrogate
   escape, which the parser refuses (FZ_JSON_PAIRS). */
static int fz_ref_string(const uint8_t *p, size_t n, size_t *i, char *out, size_t *len)
{
    size_t e;
    FZ_CHECK(fz_json_string(p, n, *i, 0, NULL, 0) != 0);
    e = fz_json_string_to(p, n, *i, FZ_JSON_PAIRS, NULL, 0, out, len);
    if (!e) return 0;
    *i = e;
    return 1;
}

static int fz_bytes_are(const char *s, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

/* 1 and the entries that fn should see when the shape is right, else 0. */
static int fz_ref_nginx(const uint8_t *p, size_t n, fz_seen *out)
{
    char *str = (char *)fz_xmalloc(n + 1), *name = (char *)fz_xmalloc(n + 1);
    size_t i = fz_ws(p, n, 0), slen, name_len = 0;
    int ok = 0;
    if (i >= n || p[i] != '[') goto done;
    i = fz_ws(p, n, i + 1);
    if (p[i] == ']') {
        ok = 1;
        goto done;
    }
    for (;;) {
        int have_name = 0, have_type = 0, have_size = 0, is_dir = 0, is_file = 0;
        uint64_t size = 0;
        if (p[i] != '{') goto done;
        i = fz_ws(p, n, i + 1);
        if (p[i] == '}') goto done; /* an entry without a name */
        for (;;) {
            int field;
            if (!fz_ref_string(p, n, &i, str, &slen)) goto done;
            field = fz_bytes_are(str, slen, "name") ? 1 : fz_bytes_are(str, slen, "type") ? 2
                  : fz_bytes_are(str, slen, "size") ? 3 : 0;
            i = fz_ws(p, n, i);
            i = fz_ws(p, n, i + 1); /* ':' */
            if (p[i] == '"') {
                if (!fz_ref_string(p, n, &i, str, &slen)) goto done;
                if (field == 1) {
                    if (have_name) goto done;
                    have_name = 1;
                    memcpy(name, str, slen + 1);
                    name_len = slen;
                } else if (field == 2) {
                    if (have_type) goto done;
                    have_type = 1;
                    if (!FZ_EXACT_TYPE) slen = strlen(str);
                    is_dir = fz_bytes_are(str, slen, "directory");
                    is_file = fz_bytes_are(str, slen, "file");
                } else if (field == 3) {
                    goto done;
                }
            } else if (p[i] == '{' || p[i] == '[') {
                goto done; /* nested values are refused */
            } else if (p[i] == 't' || p[i] == 'f' || p[i] == 'n') {
                if (field) goto done;
                i = fz_json_value(p, n, i, 0, FZ_JSON_MAX_DEPTH, 0);
            } else {
                size_t e = fz_json_value(p, n, i, 0, FZ_JSON_MAX_DEPTH, 0), k;
                int plain = 1;
                uint64_t v = 0;
                FZ_CHECK(e != 0);
                for (k = i; k < e; k++) {
                    unsigned d = (unsigned)(p[k] - '0');
                    if (d > 9) plain = 0;
                    else if (plain && v > (FZ_SIZE_LIMIT - d) / 10) plain = 0;
                    else if (plain) v = v * 10 + d;
                }
                if (field == 3) {
                    if (have_size || !plain) goto done;
                    have_size = 1;
                    size = v;
                } else if (field) {
                    goto done;
                }
                i = e;
            }
            i = fz_ws(p, n, i);
            if (p[i] == ',') {
                i = fz_ws(p, n, i + 1);
                continue;
            }
            i = fz_ws(p, n, i + 1); /* '}' */
            break;
        }
        if (!have_name || !have_type) goto done;
        if (name_len == 0 || memchr(name, 0, name_len) || memchr(name, '/', name_len) ||
            fz_bytes_are(name, name_len, ".") || fz_bytes_are(name, name_len, ".."))
            goto done;
        if (is_file && !have_size) goto done;
        if (is_dir || is_file) fz_seen_add(out, name, name_len, is_dir, size);
        if (p[i] == ',') {
            i = fz_ws(p, n, i + 1);
            continue;
        }
        break; /* ']' */
    }
    ok = 1;
done:
    free(str);
    free(name);
    return ok;
}

/* ---------------------------------------------------------------------
   nginx
   --------------------------------------------------------------------- */

static void fz_nginx(const uint8_t *buf, size_t size)
{
    fz_seen a, b;
    wsync_error err;
    wsync_result r, r2;
    int json;

    fz_stage = "nginx";
    fz_seen_init(&a, SIZE_MAX);
    memset(&err, 0xA5, sizeof err); /* must be reset on entry */
    r = wsync_http_listing_parse(buf, size, fz_nginx_fn, &a, &err);

    fz_seen_init(&b, SIZE_MAX);
    r2 = wsync_http_listing_parse(buf, size, fz_nginx_fn, &b, NULL);
    FZ_CHECK(r2 == r);
    fz_seen_same(&a, &b, 1);
    fz_seen_free(&b);

    json = fz_json_text_ok(buf, size, 0, FZ_JSON_MAX_DEPTH, 0);
    if (r != WSYNC_OK) {
        if (r != WSYNC_ERR_INVALID_JSON)
            fprintf(stderr, "unexpected result %s: %s\n", wsync_result_name(r), err.message);
        fz_check_listing_error(&err, r, WSYNC_ERR_INVALID_JSON, size);
        if (FZ_REFERENCE && json) {
            fz_seen_init(&b, SIZE_MAX);
            if (fz_ref_nginx(buf, size, &b)) {
                fprintf(stderr, "the parser refused a listing of the documented shape: %s\n", err.message);
                fz_fail(__LINE__, "a valid listing refused");
            }
            fz_seen_free(&b);
        }
    } else {
        FZ_CHECK(err.code == WSYNC_OK);
        if (!json) fz_fail(__LINE__, "the parser accepted text that is not JSON (RFC 8259)");
        if (FZ_REFERENCE) {
            fz_seen_init(&b, SIZE_MAX);
            if (!fz_ref_nginx(buf, size, &b)) fz_fail(__LINE__, "the parser accepted a listing of another shape");
            fz_seen_same(&a, &b, 0);
            fz_seen_free(&b);
        }
        /* fn stopping at the first and at the last entry */
        if (a.n) {
            size_t picks[2], k, saved = a.n;
            picks[0] = 0;
            picks[1] = a.n - 1;
            for (k = 0; k < 2; k++) {
                if (k && picks[1] == picks[0]) break;
                fz_seen_init(&b, picks[k]);
                r2 = wsync_http_listing_parse(buf, size, fz_nginx_fn, &b, &err);
                FZ_CHECK(r2 == WSYNC_OK);
                FZ_CHECK(b.n == picks[k] + 1);
                a.n = b.n; /* compare the prefix */
                fz_seen_same(&a, &b, 1);
                a.n = saved;
                fz_seen_free(&b);
            }
        }
    }
    fz_seen_free(&a);
}

/* ---------------------------------------------------------------------
   S3
   --------------------------------------------------------------------- */

typedef struct fz_s3_out {
    wsync_result r;
    int truncated;
    char *token; /* cap + FZ_CANARY bytes */
    size_t cap;
    fz_seen seen;
    wsync_error err;
} fz_s3_out;

static void fz_s3_run(const uint8_t *buf, size_t size, size_t cap, size_t stop_at, int with_err, fz_s3_out *o)
{
    size_t k;
    o->cap = cap;
    o->token = (char *)fz_xmalloc(cap + FZ_CANARY);
    memset(o->token, 0xA5, cap + FZ_CANARY);
    o->truncated = 0x5A5A;
    memset(&o->err, 0xA5, sizeof o->err);
    fz_seen_init(&o->seen, stop_at);
    o->r = wsync_s3_listing_parse(buf, size, fz_s3_fn, &o->seen, &o->truncated, o->token, cap,
                                  with_err ? &o->err : NULL);
    for (k = cap; k < cap + FZ_CANARY; k++) FZ_CHECK((unsigned char)o->token[k] == 0xA5);
    FZ_CHECK(memchr(o->token, 0, cap) != NULL);
    if (o->r == WSYNC_OK && stop_at == SIZE_MAX) { /* a stop leaves the rest unread */
        FZ_CHECK(o->truncated == 0 || o->truncated == 1);
        FZ_CHECK(!o->truncated || o->token[0] != 0);
    }
}

static void fz_s3_free(fz_s3_out *o)
{
    free(o->token);
    fz_seen_free(&o->seen);
}

static void fz_s3_same(const fz_s3_out *a, const fz_s3_out *b)
{
    FZ_CHECK(a->r == b->r);
    if (a->r != WSYNC_OK) return;
    fz_seen_same(&a->seen, &b->seen, 1);
    FZ_CHECK(a->truncated == b->truncated);
    FZ_CHECK(strcmp(a->token, b->token) == 0);
}

/* The parse of a variant (a comment appended, a declaration prepended):
   the same answer as the input's. */
static void fz_s3_variant(const uint8_t *pre, size_t pre_n, const uint8_t *buf, size_t size, const uint8_t *post,
                          size_t post_n, const fz_s3_out *want)
{
    size_t n = pre_n + size + post_n;
    uint8_t *v = (uint8_t *)fz_xmalloc(n);
    fz_s3_out o;
    size_t saved = fz_input_size;
    if (pre_n) memcpy(v, pre, pre_n);
    if (size) memcpy(v + pre_n, buf, size);
    if (post_n) memcpy(v + pre_n + size, post, post_n);
    fz_input_size = n;
    fz_s3_run(v, n, size + 1, SIZE_MAX, 1, &o);
    if (o.r != WSYNC_OK) fprintf(stderr, "variant refused: %s\n", o.err.message);
    fz_s3_same(want, &o);
    fz_s3_free(&o);
    fz_input_size = saved;
    free(v);
}

static void fz_s3(const uint8_t *buf, size_t size)
{
    fz_s3_out a, b;

    fz_stage = "s3";
    fz_s3_run(buf, size, size + 1, SIZE_MAX, 1, &a);
    fz_s3_run(buf, size, size + 1, SIZE_MAX, 0, &b);
    fz_s3_same(&a, &b);
    fz_s3_free(&b);

    /* the store's 1024-byte token buffer */
    fz_s3_run(buf, size, FZ_STORE_TOKEN_CAP, SIZE_MAX, 1, &b);
    if (b.r == WSYNC_OK) fz_s3_same(&a, &b);
    else fz_check_listing_error(&b.err, b.r, WSYNC_ERR_IO, size);
    if (a.r == WSYNC_OK && strlen(a.token) >= FZ_STORE_TOKEN_CAP) FZ_CHECK(b.r != WSYNC_OK);
    if (b.r == WSYNC_OK) FZ_CHECK(a.r == WSYNC_OK);
    fz_s3_free(&b);

    if (a.r != WSYNC_OK) {
        if (a.r != WSYNC_ERR_IO) fprintf(stderr, "unexpected result %s: %s\n", wsync_result_name(a.r), a.err.message);
        fz_check_listing_error(&a.err, a.r, WSYNC_ERR_IO, size);
    } else {
        size_t k;
        FZ_CHECK(a.err.code == WSYNC_OK);
        FZ_CHECK(a.seen.n <= fz_count(buf, size, "<Contents"));
        if (a.truncated) FZ_CHECK(fz_count(buf, size, "IsTruncated") >= 2);
        if (!memchr(buf, '&', size)) {
            /* no entity: every key is its raw text, found in order */
            size_t at = 0;
            for (k = 0; k < a.seen.n; k++) {
                const fz_ent *e = &a.seen.e[k];
                const uint8_t *hit;
                for (;;) {
                    hit = (const uint8_t *)fz_memmem(buf + at, size - at, e->name, e->len);
                    if (!hit) break;
                    at = (size_t)(hit - buf) + 1;
                    if (hit > buf && hit[-1] == '>' && (size_t)(hit - buf) + e->len + 5 <= size &&
                        memcmp(hit + e->len, "</Key", 5) == 0)
                        break;
                }
                if (!hit) fz_fail(__LINE__, "a key not found in the input in the order reported");
                at = (size_t)(hit - buf) + e->len;
            }
            if (a.token[0]) {
                size_t tl = strlen(a.token);
                const uint8_t *hit;
                at = 0;
                for (;;) {
                    hit = (const uint8_t *)fz_memmem(buf + at, size - at, a.token, tl);
                    if (!hit) break;
                    at = (size_t)(hit - buf) + 1;
                    if ((size_t)(hit - buf) + tl + 23 <= size && memcmp(hit + tl, "</NextContinuationToken", 23) == 0)
                        break;
                }
                if (!hit) fz_fail(__LINE__, "the token is not in the input");
            }
        }
        /* fn stopping at the first and at the last key */
        if (a.seen.n) {
            size_t picks[2];
            picks[0] = 0;
            picks[1] = a.seen.n - 1;
            for (k = 0; k < 2; k++) {
                size_t saved = a.seen.n;
                if (k && picks[1] == picks[0]) break;
                fz_s3_run(buf, size, size + 1, picks[k], 1, &b);
                FZ_CHECK(b.r == WSYNC_OK);
                FZ_CHECK(b.seen.n == picks[k] + 1);
                a.seen.n = b.seen.n;
                fz_seen_same(&a.seen, &b.seen, 1);
                a.seen.n = saved;
                fz_s3_free(&b);
            }
        }
        /* what XML allows around the root */
        {
            static const char comment[] = "\n<!-- appended -->\n";
            static const char decl[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
            fz_stage = "s3, a comment appended";
            fz_s3_variant(NULL, 0, buf, size, (const uint8_t *)comment, sizeof comment - 1, &a);
            if (!(size >= 3 && buf[0] == 0xEF && buf[1] == 0xBB && buf[2] == 0xBF) &&
                !(size >= 2 && buf[0] == '<' && buf[1] == '?')) {
                fz_stage = "s3, a declaration prepended";
                fz_s3_variant((const uint8_t *)decl, sizeof decl - 1, buf, size, NULL, 0, &a);
            }
            fz_stage = "s3";
        }
    }
    fz_s3_free(&a);
}

/* ---------------------------------------------------------------------
   Entry point
   --------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = NULL;
    fz_input_size = size;
    fz_input_hash = fz_fnv1a(data, size);
    /* exactly sized, so the first byte past the end is a redzone */
    if (size) {
        buf = (uint8_t *)fz_xmalloc(size);
        memcpy(buf, data, size);
    }
    fz_nginx(buf, size);
    fz_s3(buf, size);
    free(buf);
    return 0;
}
