/* fuzz_propfind.c - fuzz harness for wsync_http_propfind_parse
   (wsync_http.h), the parser of a WebDAV server's PROPFIND (Depth: 1)
   multistatus answer, which the HTTP store's list reads from Apache
   mod_dav, nginx's dav-ext module, rclone and other WebDAV servers.
   Whoever runs the server, or sits between it and us, chooses these bytes.

   The parser is compiled with WSYNC_HTTP_NO_CURL (it does not use libcurl),
   so this file links without -lcurl, like fuzz_listing.c.

   Build and run (from the repository root):

     libFuzzer (clang):   make build/fuzz/fuzz_propfind
                          mkdir -p build/fuzz/work_propfind
                          build/fuzz/fuzz_propfind -dict=fuzz/propfind.dict \
                              build/fuzz/work_propfind fuzz/corpus/propfind fuzz/data/propfind
     Replay without a fuzzer (any C99 compiler; `make test` does this):
                          make build/replay_propfind build/san/replay_propfind
                          build/san/replay_propfind fuzz/corpus/propfind fuzz/data/propfind

   Seeds (fuzz/corpus/propfind/): `apache_ok_*` and `nginx_dav_ext_ok_*` are
   answers captured from Apache 2.4 mod_dav and nginx 1.22 with dav-ext
   (the store's request: resourcetype and getcontentlength; `*_allprop`: an
   empty PROPFIND body); `hand_*` are written by hand (other prefixes,
   default namespaces, absolute URLs, entities) and `hand_bad_*` each break
   one rule.

   What one input goes through (copied into an exactly sized buffer, so a
   read past the end is ASan's):
     1. Every callback: path non-NULL, NUL-terminated at path_len, path_len
        in [1, input size], no NUL inside, starting with '/', no "." or
        ".." segment, no '?' or '#' unless the input has a '%' (a file
        named "a#b" is the href "a%23b", and the store percent-encodes it
        again in every URL it builds); is_dir 0 or 1; size below 2^63; a
        collection without a length has size 0.
     2. Failure: WSYNC_ERR_IO (the only code for a readable input), err.code
        the same, a nonempty NUL-terminated message that says "byte", an
        offset inside the input (<= size).
     3. The same parse with a NULL wsync_error: the same result and the
        same callbacks.
     4. Success: no more callbacks than "response" in the input (a local
        name); when the input has no '&' and no '%', every path is found in
        the input, in the order reported; fn returning nonzero at the first
        and at the last entry stops the calls there (WSYNC_OK). A comment
        appended, and (for an input without a byte-order mark and not
        starting with "<?") an XML declaration prepended, change nothing.
   Any violation prints what failed and calls abort(). */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_HTTP_NO_CURL
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fz_input_has_pct;

/* Failing loudly (fz_fail, FZ_CHECK), the input's hash, fz_xmalloc; what
   the callbacks saw (fz_seen), fz_memmem, fz_count */
#include "fuzz_common.h"

static int fz_fn(void *user, const char *path, size_t len, int is_dir, uint64_t size)
{
    size_t i, seg;
    FZ_CHECK(path != NULL);
    FZ_CHECK(len >= 1 && len <= fz_input_size);
    FZ_CHECK(path[len] == 0);
    FZ_CHECK(memchr(path, 0, len) == NULL);
    FZ_CHECK(path[0] == '/');
    if (!fz_input_has_pct) FZ_CHECK(memchr(path, '?', len) == NULL && memchr(path, '#', len) == NULL);
    for (seg = 1, i = 1; i <= len; i++)
        if (i == len || path[i] == '/') {
            size_t sl = i - seg;
            FZ_CHECK(!(sl == 1 && path[seg] == '.'));
            FZ_CHECK(!(sl == 2 && path[seg] == '.' && path[seg + 1] == '.'));
            seg = i + 1;
        }
    FZ_CHECK(is_dir == 0 || is_dir == 1);
    FZ_CHECK(size <= UINT64_C(0x7FFFFFFFFFFFFFFF));
    return fz_seen_add((fz_seen *)user, path, len, is_dir, size);
}

static wsync_result fz_parse(const uint8_t *buf, size_t size, fz_seen *s, int with_err, wsync_error *err)
{
    wsync_result r;
    memset(err, 0xA5, sizeof *err); /* must be reset on entry */
    r = wsync_http_propfind_parse(buf, size, fz_fn, s, with_err ? err : NULL);
    if (r != WSYNC_OK && with_err) fz_check_listing_error(err, r, WSYNC_ERR_IO, size);
    if (r == WSYNC_OK && with_err) FZ_CHECK(err->code == WSYNC_OK);
    return r;
}

static void fz_variant(const char *pre, const uint8_t *buf, size_t size, const char *post, wsync_result want_r,
                       const fz_seen *want)
{
    size_t pl = strlen(pre), ql = strlen(post), n = pl + size + ql, saved = fz_input_size;
    uint8_t *v = (uint8_t *)malloc(n ? n : 1);
    fz_seen s;
    wsync_error err;
    wsync_result r;
    FZ_CHECK(v != NULL);
    memcpy(v, pre, pl);
    if (size) memcpy(v + pl, buf, size);
    memcpy(v + pl + size, post, ql);
    fz_input_size = n;
    fz_seen_init(&s, SIZE_MAX);
    r = fz_parse(v, n, &s, 1, &err);
    if (r != want_r) fprintf(stderr, "variant: %s\n", err.message);
    FZ_CHECK(r == want_r);
    fz_seen_same(want, &s, 1);
    fz_seen_free(&s);
    free(v);
    fz_input_size = saved;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = NULL;
    fz_seen a, b;
    wsync_error err, err2;
    wsync_result r, r2;
    fz_input_size = size;
    fz_input_hash = fz_fnv1a(data, size);
    fz_input_has_pct = size && memchr(data, '%', size) != NULL;
    fz_stage = "parse";
    if (size) {
        buf = (uint8_t *)malloc(size);
        FZ_CHECK(buf != NULL);
        memcpy(buf, data, size);
    }
    fz_seen_init(&a, SIZE_MAX);
    r = fz_parse(buf, size, &a, 1, &err);
    fz_seen_init(&b, SIZE_MAX);
    r2 = fz_parse(buf, size, &b, 0, &err2);
    FZ_CHECK(r == r2);
    fz_seen_same(&a, &b, 1);
    fz_seen_free(&b);
    if (r == WSYNC_OK) {
        size_t k;
        FZ_CHECK(a.n <= fz_count(buf, size, "response"));
        if (!memchr(buf, '&', size) && !memchr(buf, '%', size)) {
            const uint8_t *at = buf;
            for (k = 0; k < a.n; k++) {
                const uint8_t *hit = fz_memmem(at, size - (size_t)(at - buf), a.e[k].name, a.e[k].len);
                if (!hit) fz_fail(__LINE__, "a path not found in the input in the order reported");
                at = hit; /* the next may be in the same href (an absolute URL's path) no earlier */
            }
        }
        for (k = 0; k < 2 && a.n; k++) {
            size_t pick = k ? a.n - 1 : 0, saved = a.n;
            if (k && pick == 0) break;
            fz_seen_init(&b, pick);
            fz_stage = "stop";
            FZ_CHECK(fz_parse(buf, size, &b, 1, &err2) == WSYNC_OK);
            FZ_CHECK(b.n == pick + 1);
            a.n = b.n;
            fz_seen_same(&a, &b, 1);
            a.n = saved;
            fz_seen_free(&b);
        }
        fz_stage = "a comment appended";
        fz_variant("", buf, size, "\n<!-- appended -->\n", r, &a);
        if (!(size >= 3 && buf[0] == 0xEF && buf[1] == 0xBB && buf[2] == 0xBF) &&
            !(size >= 2 && buf[0] == '<' && buf[1] == '?')) {
            fz_stage = "a declaration prepended";
            fz_variant("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n", buf, size, "", r, &a);
        }
    }
    fz_seen_free(&a);
    free(buf);
    return 0;
}
