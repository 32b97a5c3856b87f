/* Safetensors reader and writer: the real corpus, every malformed class with
   its exact result code, accepted edge cases, truncation at every byte, the
   streaming writer, and allocation failure at every step. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <dirent.h>
#include <stdio.h>
#include <time.h>

/* ---------------------------------------------------------------------
   Helpers
   --------------------------------------------------------------------- */

/* A counting allocator that can be told to fail its k-th allocation. */
typedef struct counting {
    long live;     /* allocations not yet freed */
    long count;    /* allocations attempted */
    long fail_at;  /* 1-based attempt that returns NULL; 0: never */
} counting;

static void *counting_alloc(void *user, size_t size)
{
    counting *c = (counting *)user;
    void *p;
    c->count++;
    if (c->fail_at && c->count == c->fail_at) return NULL;
    p = malloc(size);
    if (p) c->live++;
    return p;
}

static void counting_free(void *user, void *p)
{
    counting *c = (counting *)user;
    if (p) c->live--;
    free(p);
}

static wsync_allocator counting_allocator(counting *c)
{
    wsync_allocator a;
    a.alloc = counting_alloc;
    a.free = counting_free;
    a.user = c;
    return a;
}

/* counting_allocator over c reset, failing its fail_at-th allocation (0: never). */
static wsync_allocator counting_fresh(counting *c, long fail_at)
{
    memset(c, 0, sizeof *c);
    c->fail_at = fail_at;
    return counting_allocator(c);
}

static void put_le64(uint8_t *p, uint64_t v)
{
    int i;
    for (i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A heap file: 8-byte LE header length, the header bytes, `dlen` data bytes
   (a fixed pattern). Its allocation is exactly `size` bytes so ASan sees any
   read past the end. */
typedef struct blob {
    uint8_t *p;
    size_t size;
} blob;

static uint8_t data_byte(size_t i)
{
    return (uint8_t)(i * 7 + 1);
}

static blob mkfile_n(const char *hdr, size_t hlen, size_t dlen)
{
    blob b;
    size_t i;
    b.size = 8 + hlen + dlen;
    b.p = (uint8_t *)malloc(b.size ? b.size : 1);
    if (!b.p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    put_le64(b.p, (uint64_t)hlen);
    if (hlen) memcpy(b.p + 8, hdr, hlen);
    for (i = 0; i < dlen; i++) b.p[8 + hlen + i] = data_byte(i);
    return b;
}

static blob mkfile(const char *hdr, size_t dlen)
{
    return mkfile_n(hdr, strlen(hdr), dlen);
}

static void blob_free(blob *b)
{
    free(b->p);
    b->p = NULL;
    b->size = 0;
}

static int all_zero(const void *p, size_t n)
{
    const uint8_t *s = (const uint8_t *)p;
    size_t i;
    for (i = 0; i < n; i++)
        if (s[i]) return 0;
    return 1;
}

/* Parses; on failure checks the error contract (code, message, zeroed
   output). On success the file is freed unless `keep` is given. */
static counting g_alloc; /* every parse_ex goes through it; kept files too */

static wsync_result parse_ex(const void *bytes, uint64_t size, const wsync_st_options *opt,
                             wsync_st_file *keep, wsync_error *err_out)
{
    wsync_st_file f;
    wsync_error err;
    wsync_result r;
    wsync_st_options o;
    long live = g_alloc.live;
    if (opt) o = *opt;
    else memset(&o, 0, sizeof o);
    o.allocator = counting_allocator(&g_alloc);
    memset(&f, 0x5A, sizeof f);
    r = wsync_st_parse(bytes, size, &o, &f, &err);
    if (r != WSYNC_OK) {
        CHECK_EQ_INT(err.code, r);
        CHECK_MSG(err.offset == UINT64_MAX || err.offset <= size, "offset %llu beyond %llu",
                  (unsigned long long)err.offset, (unsigned long long)size);
        CHECK_MSG(err.message[0] != 0, "%s: empty message", wsync_result_name(r));
        CHECK(f.tensors == NULL);
        CHECK(f.block == NULL);
        CHECK(f.n_tensors == 0);
        CHECK(all_zero(&f, sizeof f));
    } else {
        CHECK_EQ_INT(err.code, WSYNC_OK);
        if (keep) *keep = f;
        else wsync_st_free(&f);
    }
    if (!(r == WSYNC_OK && keep))
        CHECK_MSG(g_alloc.live == live, "%ld allocations leaked (%s)", g_alloc.live - live,
                  wsync_result_name(r));
    if (err_out) *err_out = err;
    return r;
}

static wsync_result parse_blob(const blob *b)
{
    return parse_ex(b->p, b->size, NULL, NULL, NULL);
}

/* The code for a header (a C string) followed by dlen data bytes. */
static wsync_result parse_hdr(const char *hdr, size_t dlen)
{
    blob b = mkfile(hdr, dlen);
    wsync_result r = parse_blob(&b);
    blob_free(&b);
    return r;
}

#define CHECK_CODE(got, want)                                                         \
    do {                                                                              \
        wsync_result got_ = (got), want_ = (want);                                    \
        CHECK_MSG(got_ == want_, "got %s, want %s", wsync_result_name(got_),          \
                  wsync_result_name(want_));                                          \
    } while (0)

/* A growable byte buffer used as a sink. */
typedef struct dynbuf {
    uint8_t *p;
    size_t len, cap;
    long calls;
    long fail_at; /* 1-based sink call that fails; 0: never */
} dynbuf;

static int dynbuf_sink(void *user, const void *bytes, size_t len)
{
    dynbuf *d = (dynbuf *)user;
    d->calls++;
    if (d->fail_at && d->calls == d->fail_at) return -7;
    if (d->len + len > d->cap) {
        size_t cap = d->cap ? d->cap : 256;
        uint8_t *np;
        while (cap < d->len + len) cap *= 2;
        np = (uint8_t *)realloc(d->p, cap);
        if (!np) return -1;
        d->p = np;
        d->cap = cap;
    }
    if (len) memcpy(d->p + d->len, bytes, len);
    d->len += len;
    return 0;
}

static void dynbuf_free(dynbuf *d)
{
    free(d->p);
    memset(d, 0, sizeof *d);
}

/* Descriptions for every tensor of a parsed file, in data-offset order. */
static wsync_st_tensor_desc *descs_of(const wsync_st_file *f, int with_data)
{
    wsync_st_tensor_desc *d =
        (wsync_st_tensor_desc *)calloc(f->n_tensors ? f->n_tensors : 1, sizeof *d);
    size_t i;
    if (!d) exit(2);
    for (i = 0; i < f->n_tensors; i++) {
        const wsync_st_tensor *t = &f->tensors[i];
        d[i].name = t->name;
        d[i].name_len = t->name_len;
        d[i].dtype = t->dtype;
        d[i].rank = t->rank;
        d[i].shape = t->shape;
        d[i].data = with_data ? (const void *)t->data : NULL;
        d[i].nbytes = t->end - t->begin;
    }
    return d;
}

static const wsync_st_kv no_kv[1] = {{"", 0, "", 0}};

/* The metadata argument for rewriting `f`: NULL unless it has an object. */
static const wsync_st_kv *meta_of(const wsync_st_file *f)
{
    if (f->metadata_kind != WSYNC_ST_METADATA_OBJECT) return NULL;
    return f->n_metadata ? f->metadata : no_kv;
}

/* Same tensors (names, dtypes, shapes, offsets, bytes) and metadata. */
static void check_same(const wsync_st_file *a, const wsync_st_file *b, const char *what)
{
    size_t i;
    CHECK_MSG(a->n_tensors == b->n_tensors, "%s: %zu vs %zu tensors", what, a->n_tensors,
              b->n_tensors);
    if (a->n_tensors != b->n_tensors) return;
    for (i = 0; i < a->n_tensors; i++) {
        const wsync_st_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        CHECK_MSG(x->name_len == y->name_len && memcmp(x->name, y->name, x->name_len) == 0,
                  "%s: tensor %zu name '%s' vs '%s'", what, i, x->name, y->name);
        CHECK_MSG(x->dtype == y->dtype, "%s: %s dtype", what, x->name);
        CHECK_MSG(x->rank == y->rank && (x->rank == 0 || memcmp(x->shape, y->shape,
                                                                x->rank * sizeof *x->shape) == 0),
                  "%s: %s shape", what, x->name);
        CHECK_MSG(x->nelem == y->nelem, "%s: %s nelem", what, x->name);
        CHECK_MSG(x->begin == y->begin && x->end == y->end, "%s: %s offsets", what, x->name);
        CHECK_MSG(x->end - x->begin == 0 ||
                      memcmp(x->data, y->data, (size_t)(x->end - x->begin)) == 0,
                  "%s: %s bytes", what, x->name);
    }
    CHECK_MSG(b->metadata_kind == (a->metadata_kind == WSYNC_ST_METADATA_OBJECT
                                       ? WSYNC_ST_METADATA_OBJECT
                                       : WSYNC_ST_METADATA_ABSENT),
              "%s: metadata kind %d -> %d", what, (int)a->metadata_kind, (int)b->metadata_kind);
    CHECK_MSG(a->n_metadata == b->n_metadata, "%s: %zu vs %zu metadata", what, a->n_metadata,
              b->n_metadata);
    if (a->n_metadata != b->n_metadata) return;
    for (i = 0; i < a->n_metadata; i++) {
        const wsync_st_kv *x = &a->metadata[i], *y = &b->metadata[i];
        CHECK_MSG(x->key_len == y->key_len && memcmp(x->key, y->key, x->key_len) == 0 &&
                      x->value_len == y->value_len &&
                      memcmp(x->value, y->value, x->value_len) == 0,
                  "%s: metadata %zu", what, i);
    }
}

/* Writes `f` again with wsync_st_write and checks the output: the size
   wsync_st_write_size promised, a space-padded header that is a multiple of
   8, and a parse identical to `f`. The written bytes go to *out if given. */
static void check_rewrite(const wsync_st_file *f, const char *what, dynbuf *out)
{
    wsync_st_tensor_desc *d = descs_of(f, 1);
    const wsync_st_kv *meta = meta_of(f);
    dynbuf buf;
    wsync_error err;
    wsync_result r;
    uint64_t want = 0, n;
    wsync_st_file g;
    memset(&buf, 0, sizeof buf);
    r = wsync_st_write_size(d, f->n_tensors, meta, f->n_metadata, &want, &err);
    CHECK_MSG(r == WSYNC_OK, "%s: write_size %s %s", what, wsync_result_name(r), err.message);
    {
        wsync_st_write_options wo;
        counting c;
        memset(&wo, 0, sizeof wo);
        wo.allocator = counting_fresh(&c, 0);
        r = wsync_st_write(d, f->n_tensors, meta, f->n_metadata, dynbuf_sink, &buf, &wo, &err);
        CHECK_MSG(r == WSYNC_OK, "%s: write %s %s", what, wsync_result_name(r), err.message);
        CHECK_MSG(c.live == 0 && c.count >= 1, "%s: writer leaked %ld", what, c.live);
    }
    if (r == WSYNC_OK) {
        CHECK_MSG(buf.len == want, "%s: wrote %zu, write_size said %llu", what, buf.len,
                  (unsigned long long)want);
        CHECK(buf.len >= 8);
        n = buf.len >= 8 ? (buf.p[0] | (uint64_t)buf.p[1] << 8 | (uint64_t)buf.p[2] << 16 |
                            (uint64_t)buf.p[3] << 24 | (uint64_t)buf.p[4] << 32)
                         : 0;
        CHECK_MSG(n % 8 == 0, "%s: header length %llu not a multiple of 8", what,
                  (unsigned long long)n);
        if (n >= 1 && 8 + n <= buf.len) {
            size_t k = (size_t)(8 + n);
            while (k > 8 && buf.p[k - 1] == ' ') k--;
            CHECK_MSG(buf.p[k - 1] == '}', "%s: header not '}' then spaces", what);
            CHECK_MSG(8 + n - k < 8, "%s: %llu padding bytes", what,
                      (unsigned long long)(8 + n - k));
        }
        r = parse_ex(buf.p, buf.len, NULL, &g, &err);
        CHECK_MSG(r == WSYNC_OK, "%s: reparse %s %s", what, wsync_result_name(r), err.message);
        if (r == WSYNC_OK) {
            wsync_st_tensor_desc *d2 = descs_of(&g, 1);
            dynbuf again;
            check_same(f, &g, what);
            /* writing the rewritten file again gives the same bytes */
            memset(&again, 0, sizeof again);
            r = wsync_st_write(d2, g.n_tensors, meta_of(&g), g.n_metadata, dynbuf_sink, &again, NULL, &err);
            CHECK_MSG(r == WSYNC_OK && again.len == buf.len && memcmp(again.p, buf.p, buf.len) == 0,
                      "%s: second rewrite differs", what);
            dynbuf_free(&again);
            free(d2);
            wsync_st_free(&g);
        }
    }
    free(d);
    if (out) *out = buf;
    else dynbuf_free(&buf);
}

/* Every strict prefix of `bytes` is rejected, each copied to an exact-size
   allocation so a read past the end is caught under ASan. */
static void check_prefixes(const uint8_t *bytes, size_t size, size_t from, size_t to, size_t step,
                           const char *what)
{
    size_t len;
    int bad = 0;
    for (len = from; len < to && len < size; len += step) {
        uint8_t *p = (uint8_t *)malloc(len ? len : 1);
        wsync_result r;
        if (!p) exit(2);
        memcpy(p, bytes, len);
        r = parse_ex(p, len, NULL, NULL, NULL);
        free(p);
        if (r == WSYNC_OK && bad++ < 3) CHECK_MSG(0, "%s: prefix of %zu bytes parsed", what, len);
    }
}

/* The header cut at every byte before its closing brace, the length field
   rewritten to match, no data: always rejected (incomplete JSON). */
static void check_header_cuts(const uint8_t *bytes, size_t size, const char *what)
{
    uint64_t n;
    size_t close, k;
    int bad = 0;
    if (size < 8) return;
    n = bytes[0] | (uint64_t)bytes[1] << 8 | (uint64_t)bytes[2] << 16 | (uint64_t)bytes[3] << 24;
    if (n > size - 8) return;
    close = (size_t)n;
    while (close > 0 && bytes[8 + close - 1] != '}') close--;
    for (k = 0; k < close; k++) {
        blob b = mkfile_n((const char *)bytes + 8, k, 0);
        wsync_result r = parse_blob(&b);
        blob_free(&b);
        if (r == WSYNC_OK && bad++ < 3) CHECK_MSG(0, "%s: header cut at %zu parsed", what, k);
    }
}

/* ---------------------------------------------------------------------
   1. The corpus
   --------------------------------------------------------------------- */

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted file names in `dir` (every regular entry not starting with '.'). */
static size_t list_dir(const char *dir, char ***names)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = 0, cap = 0;
    char **v = NULL;
    *names = NULL;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            v = (char **)realloc(v, cap * sizeof *v);
            if (!v) exit(2);
        }
        v[n] = (char *)malloc(strlen(e->d_name) + 1);
        if (!v[n]) exit(2);
        strcpy(v[n], e->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(v, n, sizeof *v, cmp_str);
    *names = v;
    return n;
}

static void free_names(char **v, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) free(v[i]);
    free(v);
}

#define CORPUS_DIR "tests/fixtures/corpus/safetensors"
#define INVALID_DIR "tests/fixtures/corpus/safetensors-invalid"
#define SMALL_FILE 20000

static void test_corpus_valid(void)
{
    char **names;
    size_t n = list_dir(CORPUS_DIR, &names), i;
    char path[512], title[600];

    TEST_BEGIN("corpus: tests/fixtures/corpus/safetensors is present and not empty");
    CHECK_MSG(n >= 20, "%zu files", n);
    TEST_END();

    for (i = 0; i < n; i++) {
        wsync_mapped map;
        wsync_st_file f;
        wsync_error err;
        wsync_result r;
        snprintf(path, sizeof path, "%s/%s", CORPUS_DIR, names[i]);
        snprintf(title, sizeof title, "corpus parses and round-trips: %s", names[i]);
        TEST_BEGIN(title);
        CHECK(has_suffix(names[i], ".safetensors"));
        r = wsync_file_map(path, &map, &err);
        CHECK_MSG(r == WSYNC_OK, "map: %s", err.message);
        if (r != WSYNC_OK) {
            TEST_END();
            continue;
        }
        r = parse_ex(map.bytes, map.size, NULL, &f, &err);
        CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
        if (r == WSYNC_OK) {
            size_t k;
            uint64_t expect = 0;
            CHECK(f.bytes == map.bytes && f.size == map.size);
            CHECK(f.data == map.bytes + 8 + f.header_len);
            CHECK_EQ_U64(f.data_len, map.size - 8 - f.header_len);
            for (k = 0; k < f.n_tensors; k++) {
                const wsync_st_tensor *t = &f.tensors[k];
                uint64_t nb = 0;
                CHECK_EQ_U64(t->begin, expect);
                expect = t->end;
                CHECK(t->data == map.bytes + 8 + f.header_len + t->begin);
                CHECK(t->name[t->name_len] == 0);
                CHECK_EQ_INT(wsync_dtype_nbytes(t->dtype, t->nelem, &nb), WSYNC_OK);
                CHECK_EQ_U64(nb, t->end - t->begin);
                CHECK(wsync_st_find_n(&f, t->name, t->name_len) == t);
            }
            CHECK_EQ_U64(expect, f.data_len);
            check_rewrite(&f, names[i], NULL);
            /* allocation failure at every step */
            for (k = 1; k < 20; k++) {
                counting c;
                wsync_st_options opt;
                wsync_st_file g;
                memset(&opt, 0, sizeof opt);
                opt.allocator = counting_fresh(&c, (long)k);
                r = wsync_st_parse(map.bytes, map.size, &opt, &g, &err);
                if (r == WSYNC_OK) {
                    wsync_st_free(&g);
                    CHECK_EQ_INT(c.live, 0);
                    break;
                }
                CHECK_CODE(r, WSYNC_ERR_OUT_OF_MEMORY);
                CHECK_EQ_INT(c.live, 0);
            }
            CHECK(k > 1 && k < 20);
            wsync_st_free(&f);
        }
        wsync_file_unmap(&map);
        TEST_END();
    }
    free_names(names, n);
}

/* Truncation at every byte for small corpus files; the header and a sample
   of the data section for larger ones. */
static void test_corpus_prefixes(void)
{
    char **names;
    size_t n = list_dir(CORPUS_DIR, &names), i;
    char path[512], title[600];
    for (i = 0; i < n; i++) {
        wsync_mapped map;
        wsync_error err;
        snprintf(path, sizeof path, "%s/%s", CORPUS_DIR, names[i]);
        snprintf(title, sizeof title, "corpus prefixes are all rejected: %s", names[i]);
        TEST_BEGIN(title);
        if (wsync_file_map(path, &map, &err) != WSYNC_OK) {
            CHECK_MSG(0, "map: %s", err.message);
            TEST_END();
            continue;
        }
        if (map.size < SMALL_FILE) {
            check_prefixes(map.bytes, (size_t)map.size, 0, (size_t)map.size, 1, names[i]);
        } else {
            uint64_t hn = map.bytes[0] | (uint64_t)map.bytes[1] << 8 | (uint64_t)map.bytes[2] << 16;
            size_t hdr_end = (size_t)(8 + hn + 16), step = (size_t)(map.size / 97) | 1;
            check_prefixes(map.bytes, (size_t)map.size, 0, hdr_end, 1, names[i]);
            check_prefixes(map.bytes, (size_t)map.size, hdr_end, (size_t)map.size, step, names[i]);
            check_prefixes(map.bytes, (size_t)map.size, (size_t)map.size - 1, (size_t)map.size, 1,
                           names[i]);
        }
        check_header_cuts(map.bytes, (size_t)map.size, names[i]);
        wsync_file_unmap(&map);
        TEST_END();
    }
    free_names(names, n);
}

static void test_corpus_invalid(void)
{
    static const struct {
        const char *pattern;
        wsync_result code;
    } known[] = {
        {"duplicate_keys", WSYNC_ERR_DUPLICATE_KEY},
        {"header_size_too_big", WSYNC_ERR_TRUNCATED}, /* header length 255, 16-byte file */
        {"zero_len_file", WSYNC_ERR_TRUNCATED},
        {"abuse_attempt_1", WSYNC_ERR_TRUNCATED}, /* header length 1000, 88-byte file */
    };
    char **names;
    size_t n = list_dir(INVALID_DIR, &names), i, k;
    char path[512], title[600];
    int matched[sizeof known / sizeof known[0]];
    memset(matched, 0, sizeof matched);
    for (i = 0; i < n; i++) {
        wsync_mapped map;
        wsync_error err;
        wsync_result r;
        snprintf(path, sizeof path, "%s/%s", INVALID_DIR, names[i]);
        snprintf(title, sizeof title, "invalid corpus file is rejected: %s", names[i]);
        TEST_BEGIN(title);
        r = wsync_file_map(path, &map, &err);
        CHECK_MSG(r == WSYNC_OK, "map: %s", err.message);
        if (r == WSYNC_OK) {
            r = parse_ex(map.bytes, map.size, NULL, NULL, &err);
            CHECK_MSG(r != WSYNC_OK, "%s", "accepted");
            for (k = 0; k < sizeof known / sizeof known[0]; k++) {
                if (strstr(names[i], known[k].pattern)) {
                    matched[k] = 1;
                    CHECK_CODE(r, known[k].code);
                    if (known[k].code == WSYNC_ERR_DUPLICATE_KEY) CHECK_EQ_STR(err.tensor, "key01");
                }
            }
            wsync_file_unmap(&map);
        }
        TEST_END();
    }
    TEST_BEGIN("invalid corpus: every known file is present");
    for (k = 0; k < sizeof known / sizeof known[0]; k++)
        CHECK_MSG(matched[k], "no file matching %s", known[k].pattern);
    TEST_END();
    free_names(names, n);
}

/* ---------------------------------------------------------------------
   2. Malformed inputs, one exact code each
   --------------------------------------------------------------------- */

/* A one-tensor header body: T("x") etc. build the common prefix. */
#define ENTRY(dtype, shape, offs) "{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}"
#define ONE(dtype, shape, offs) "{\"t\":" ENTRY(dtype, shape, offs) "}"

typedef struct bad_case {
    const char *name;
    const char *hdr;
    size_t dlen;
    wsync_result code;
} bad_case;

static const bad_case bad_cases[] = {
    /* UTF-8 */
    {"utf8: overlong 2-byte NUL in a key", "{\"\xC0\x80\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_UTF8},
    {"utf8: overlong 2-byte '/' (C1 AF)", "{\"a\xC1\xAF\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_UTF8},
    {"utf8: overlong 3-byte (E0 80 AF)", "{\"\xE0\x80\xAF\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_UTF8},
    {"utf8: overlong 4-byte (F0 80 80 AF)", "{\"\xF0\x80\x80\xAF\":" ENTRY("U8", "[1]", "[0,1]") "}",
     1, WSYNC_ERR_INVALID_UTF8},
    {"utf8: surrogate U+D800 encoded (ED A0 80)", "{\"\xED\xA0\x80\":" ENTRY("U8", "[1]", "[0,1]") "}",
     1, WSYNC_ERR_INVALID_UTF8},
    {"utf8: surrogate U+DFFF encoded (ED BF BF)", "{\"\xED\xBF\xBF\":" ENTRY("U8", "[1]", "[0,1]") "}",
     1, WSYNC_ERR_INVALID_UTF8},
    {"utf8: above U+10FFFF (F4 90 80 80)", "{\"\xF4\x90\x80\x80\":" ENTRY("U8", "[1]", "[0,1]") "}",
     1, WSYNC_ERR_INVALID_UTF8},
    {"utf8: F5 lead byte", "{\"\xF5\x80\x80\x80\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_UTF8},
    {"utf8: FF byte", "{\"\xFF\":" ENTRY("U8", "[1]", "[0,1]") "}", 1, WSYNC_ERR_INVALID_UTF8},
    {"utf8: truncated 3-byte sequence in a key", "{\"\xE2\x82\":" ENTRY("U8", "[1]", "[0,1]") "}",
     1, WSYNC_ERR_INVALID_UTF8},
    {"utf8: truncated sequence at the end of the header",
     "{\"t\":" ENTRY("U8", "[1]", "[0,1]") "} \xE2\x82", 1, WSYNC_ERR_INVALID_UTF8},
    {"utf8: stray continuation byte", "{\"a\x80\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_UTF8},
    {"utf8: invalid in a metadata value",
     "{\"__metadata__\":{\"k\":\"v\xC3\"},\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_UTF8},
    {"utf8: invalid in a metadata key",
     "{\"__metadata__\":{\"\xED\xA0\x80\":\"v\"},\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_UTF8},
    {"utf8: invalid in a dtype string", ONE("F3\xFF", "[1]", "[0,4]"), 4, WSYNC_ERR_INVALID_UTF8},
    {"utf8: invalid inside JSON that is also invalid", "{\xC0\x80", 0, WSYNC_ERR_INVALID_UTF8},

    /* JSON syntax */
    {"json: empty header", "", 0, WSYNC_ERR_INVALID_JSON},
    {"json: header of spaces only", "        ", 0, WSYNC_ERR_INVALID_JSON},
    {"json: lone '{'", "{", 0, WSYNC_ERR_INVALID_JSON},
    {"json: unterminated key", "{\"t", 0, WSYNC_ERR_INVALID_JSON},
    {"json: missing ':'", "{\"t\" " ENTRY("U8", "[1]", "[0,1]") "}", 1, WSYNC_ERR_INVALID_JSON},
    {"json: missing ',' between tensors",
     "{\"a\":" ENTRY("U8", "[1]", "[0,1]") " \"b\":" ENTRY("U8", "[1]", "[1,2]") "}", 2,
     WSYNC_ERR_INVALID_JSON},
    {"json: missing closing brace", "{\"t\":" ENTRY("U8", "[1]", "[0,1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: unquoted key", "{t:" ENTRY("U8", "[1]", "[0,1]") "}", 1, WSYNC_ERR_INVALID_JSON},
    {"json: single-quoted key", "{'t':" ENTRY("U8", "[1]", "[0,1]") "}", 1, WSYNC_ERR_INVALID_JSON},
    {"json: trailing comma at top level", "{\"t\":" ENTRY("U8", "[1]", "[0,1]") ",}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: trailing comma in a tensor entry",
     "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],}}", 1, WSYNC_ERR_INVALID_JSON},
    {"json: trailing comma in metadata",
     "{\"__metadata__\":{\"k\":\"v\",},\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: trailing comma in an unknown field",
     "{\"t\":{\"x\":[1,2,],\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: leading comma at top level", "{,\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: double comma", "{\"a\":" ENTRY("U8", "[1]", "[0,1]") ",,\"b\":" ENTRY("U8", "[1]", "[1,2]") "}",
     2, WSYNC_ERR_INVALID_JSON},
    {"json: raw control character (0x01) in a key", "{\"a\x01\":" ENTRY("U8", "[1]", "[0,1]") "}",
     1, WSYNC_ERR_INVALID_JSON},
    {"json: raw 0x1F in a key", "{\"a\x1f\":" ENTRY("U8", "[1]", "[0,1]") "}", 1, WSYNC_ERR_INVALID_JSON},
    {"json: raw 0x1F in a metadata value",
     "{\"__metadata__\":{\"k\":\"\x1f\"},\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1, WSYNC_ERR_INVALID_JSON},
    {"json: raw tab in a key", "{\"a\tb\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: raw newline in a metadata value",
     "{\"__metadata__\":{\"k\":\"a\nb\"},\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: bad escape \\x", "{\"a\\x41\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: bad escape \\a", "{\"a\\a\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: bad escape \\' ", "{\"a\\'\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: short \\u escape", "{\"a\\u12\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: non-hex \\u escape", "{\"a\\u12G4\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: lone high surrogate \\uD800", "{\"a\\uD800\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: lone high surrogate at the end of a string", "{\"\\udbff\":" ENTRY("U8", "[1]", "[0,1]") "}",
     1, WSYNC_ERR_INVALID_JSON},
    {"json: lone low surrogate \\uDC00", "{\"a\\uDC00\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: high surrogate followed by a non-surrogate escape",
     "{\"a\\uD800\\u0041\":" ENTRY("U8", "[1]", "[0,1]") "}", 1, WSYNC_ERR_INVALID_JSON},
    {"json: two high surrogates", "{\"a\\uD800\\uD800\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: lone surrogate in a metadata value",
     "{\"__metadata__\":{\"k\":\"\\ud800\"},\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: leading zero in shape", ONE("U8", "[01]", "[0,1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: leading zero in an unknown field",
     "{\"t\":{\"x\":007,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: bare minus in shape", ONE("U8", "[-]", "[0,1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: fraction without digits", ONE("U8", "[1.]", "[0,1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: exponent without digits", ONE("U8", "[1e]", "[0,1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: plus sign in an unknown field",
     "{\"t\":{\"x\":+1,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: hex number in an unknown field",
     "{\"t\":{\"x\":0x10,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: misspelled literal in an unknown field",
     "{\"t\":{\"x\":tru,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: NaN in an unknown field",
     "{\"t\":{\"x\":NaN,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: unclosed array in an unknown field",
     "{\"t\":{\"x\":[1,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: missing ',' in shape", ONE("U8", "[1 1]", "[0,1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: second object after the header", "{\"t\":" ENTRY("U8", "[1]", "[0,1]") "}{}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: garbage after the header", "{\"t\":" ENTRY("U8", "[1]", "[0,1]") "} x", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: control byte after the header", "{\"t\":" ENTRY("U8", "[1]", "[0,1]") "}\x01", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: comment after the header", "{\"t\":" ENTRY("U8", "[1]", "[0,1]") "}//", 1,
     WSYNC_ERR_INVALID_JSON},

    /* a syntax error where a typed value is expected is still bad JSON */
    {"json: garbage where a tensor entry is expected", "{\"t\":x}", 0, WSYNC_ERR_INVALID_JSON},
    {"json: garbage at top level", "hello", 0, WSYNC_ERR_INVALID_JSON},
    {"json: misspelled null at top level", "nul", 0, WSYNC_ERR_INVALID_JSON},
    {"json: unquoted dtype", "{\"t\":{\"dtype\":U8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: trailing comma in shape", ONE("U8", "[1,]", "[0,1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: leading comma in shape", ONE("U8", "[,1]", "[0,1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: trailing comma in data_offsets", ONE("U8", "[1]", "[0,1,]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: missing ',' in data_offsets", ONE("U8", "[1]", "[0 1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: leading zero in data_offsets begin", ONE("U8", "[1]", "[00,1]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: leading zero in data_offsets end", ONE("U8", "[1]", "[0,01]"), 1, WSYNC_ERR_INVALID_JSON},
    {"json: unclosed data_offsets", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1}}", 1,
     WSYNC_ERR_INVALID_JSON},
    {"json: garbage as __metadata__", "{\"__metadata__\":x}", 0, WSYNC_ERR_INVALID_JSON},
    {"json: unquoted metadata value", "{\"__metadata__\":{\"k\":v}}", 0, WSYNC_ERR_INVALID_JSON},

    /* duplicate keys */
    {"dup: two tensors with the same name",
     "{\"a\":" ENTRY("U8", "[1]", "[0,1]") ",\"a\":" ENTRY("U8", "[1]", "[1,2]") "}", 2,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: same name, one spelled with \\u0061",
     "{\"a\":" ENTRY("U8", "[1]", "[0,1]") ",\"\\u0061\":" ENTRY("U8", "[1]", "[1,2]") "}", 2,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: names with \\u00e9 and raw UTF-8 e-acute",
     "{\"\\u00e9\":" ENTRY("U8", "[1]", "[0,1]") ",\"\xC3\xA9\":" ENTRY("U8", "[1]", "[1,2]") "}", 2,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: dtype twice in one entry",
     "{\"t\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: shape twice in one entry",
     "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: data_offsets twice in one entry",
     "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: dtype twice, once escaped as d\\u0074ype",
     "{\"t\":{\"dtype\":\"U8\",\"d\\u0074ype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: metadata key twice",
     "{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"},\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: metadata key twice, once escaped",
     "{\"__metadata__\":{\"k\":\"1\",\"\\u006b\":\"2\"},\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: two tensors with the empty name",
     "{\"\":" ENTRY("U8", "[1]", "[0,1]") ",\"\":" ENTRY("U8", "[1]", "[1,2]") "}", 2,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: names equal after decoding a surrogate pair",
     "{\"\\ud83d\\ude00\":" ENTRY("U8", "[1]", "[0,1]") ",\"\xF0\x9F\x98\x80\":" ENTRY("U8", "[1]", "[1,2]") "}",
     2, WSYNC_ERR_DUPLICATE_KEY},
    {"dup: names equal with \\u0000 inside",
     "{\"a\\u0000\":" ENTRY("U8", "[1]", "[0,1]") ",\"a\\u0000\":" ENTRY("U8", "[1]", "[1,2]") "}", 2,
     WSYNC_ERR_DUPLICATE_KEY},
    {"dup: two __metadata__", "{\"__metadata__\":{},\"t\":" ENTRY("U8", "[1]", "[0,1]") ",\"__metadata__\":{}}",
     1, WSYNC_ERR_DUPLICATE_KEY},
    {"dup: two __metadata__, one null, one escaped",
     "{\"__metadata__\":null,\"\\u005f_metadata__\":null}", 0, WSYNC_ERR_DUPLICATE_KEY},

    /* schema */
    {"schema: top level is an array", "[]", 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: top level is a number", "5", 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: top level is a string", "\"x\"", 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: top level is null", "null", 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: tensor entry is a number", "{\"t\":5}", 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: tensor entry is an array", "{\"t\":[]}", 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: tensor entry is a string", "{\"t\":\"F32\"}", 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: tensor entry is null", "{\"t\":null}", 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: tensor entry is empty", "{\"t\":{}}", 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: missing dtype", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_HEADER},
    {"schema: missing shape", "{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_HEADER},
    {"schema: missing data_offsets", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1,
     WSYNC_ERR_INVALID_HEADER},
    {"schema: dtype is a number", "{\"t\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_HEADER},
    {"schema: dtype is null", "{\"t\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     WSYNC_ERR_INVALID_HEADER},
    {"schema: dtype is an array", "{\"t\":{\"dtype\":[\"U8\"],\"shape\":[1],\"data_offsets\":[0,1]}}",
     1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape is a number", ONE("U8", "1", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape is an object", ONE("U8", "{}", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape is null", ONE("U8", "null", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry is a string", ONE("U8", "[\"1\"]", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry is an array", ONE("U8", "[[1]]", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry is true", ONE("U8", "[true]", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry is null", ONE("U8", "[null]", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry is a float 1.0", ONE("U8", "[1.0]", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry is 1e0", ONE("U8", "[1e0]", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry is 1E+3", ONE("U8", "[1E+3]", "[0,1000]"), 1000, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry is negative", ONE("U8", "[-1]", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry is -0", ONE("U8", "[-0]", "[0,0]"), 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets is a number", ONE("U8", "[1]", "1"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets is an object", ONE("U8", "[1]", "{}"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets is empty", ONE("U8", "[1]", "[]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets has one integer", ONE("U8", "[1]", "[1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets has three integers", ONE("U8", "[1]", "[0,1,1]"), 1,
     WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets holds strings", ONE("U8", "[1]", "[\"0\",\"1\"]"), 1,
     WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets holds a float", ONE("U8", "[1]", "[0,1.0]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets holds 1e3", ONE("U8", "[1000]", "[0,1e3]"), 1000,
     WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets holds a negative number", ONE("U8", "[1]", "[-1,0]"), 1,
     WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets holds -0", ONE("U8", "[0]", "[-0,0]"), 0, WSYNC_ERR_INVALID_HEADER},
    {"schema: data_offsets holds null", ONE("U8", "[1]", "[null,1]"), 1, WSYNC_ERR_INVALID_HEADER},

    /* metadata */
    {"metadata: a number", "{\"__metadata__\":5}", 0, WSYNC_ERR_INVALID_METADATA},
    {"metadata: a string", "{\"__metadata__\":\"x\"}", 0, WSYNC_ERR_INVALID_METADATA},
    {"metadata: an array", "{\"__metadata__\":[]}", 0, WSYNC_ERR_INVALID_METADATA},
    {"metadata: true", "{\"__metadata__\":true}", 0, WSYNC_ERR_INVALID_METADATA},
    {"metadata: a number value", "{\"__metadata__\":{\"k\":1}}", 0, WSYNC_ERR_INVALID_METADATA},
    {"metadata: a null value", "{\"__metadata__\":{\"k\":null}}", 0, WSYNC_ERR_INVALID_METADATA},
    {"metadata: an object value", "{\"__metadata__\":{\"k\":{}}}", 0, WSYNC_ERR_INVALID_METADATA},
    {"metadata: an array value", "{\"__metadata__\":{\"k\":[\"v\"]}}", 0, WSYNC_ERR_INVALID_METADATA},
    {"metadata: shaped like a tensor entry", "{\"__metadata__\":" ENTRY("U8", "[1]", "[0,1]") "}", 1,
     WSYNC_ERR_INVALID_METADATA},
    {"metadata: a boolean value after a good one", "{\"__metadata__\":{\"a\":\"b\",\"k\":false}}", 0,
     WSYNC_ERR_INVALID_METADATA},

    /* dtypes */
    {"dtype: lowercase bf16", ONE("bf16", "[1]", "[0,2]"), 2, WSYNC_ERR_UNKNOWN_DTYPE},
    {"dtype: empty string", ONE("", "[1]", "[0,1]"), 1, WSYNC_ERR_UNKNOWN_DTYPE},
    {"dtype: trailing space", ONE("F32 ", "[1]", "[0,4]"), 4, WSYNC_ERR_UNKNOWN_DTYPE},
    {"dtype: trailing NUL escape", ONE("F32\\u0000", "[1]", "[0,4]"), 4, WSYNC_ERR_UNKNOWN_DTYPE},
    {"dtype: FLOAT32", ONE("FLOAT32", "[1]", "[0,4]"), 4, WSYNC_ERR_UNKNOWN_DTYPE},
    {"dtype: INVALID", ONE("INVALID", "[1]", "[0,4]"), 4, WSYNC_ERR_UNKNOWN_DTYPE},
    {"dtype: C128", ONE("C128", "[1]", "[0,16]"), 16, WSYNC_ERR_UNKNOWN_DTYPE},
    {"dtype: a valid name with a 16-byte-long prefix", ONE("F8_E4M3F8_E4M3F8", "[1]", "[0,1]"), 1,
     WSYNC_ERR_UNKNOWN_DTYPE},
    {"dtype: a very long name", ONE("F32F32F32F32F32F32F32F32F32F32F32F32F32F32", "[1]", "[0,4]"), 4,
     WSYNC_ERR_UNKNOWN_DTYPE},

    /* rank */
    {"rank: 65 dimensions",
     ONE("U8",
         "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
         "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]",
         "[0,1]"),
     1, WSYNC_ERR_RANK_TOO_LARGE},

    /* overflow */
    {"overflow: shape entry 2^64", ONE("U8", "[18446744073709551616]", "[0,1]"), 1,
     WSYNC_ERR_OVERFLOW},
    {"overflow: shape entry 10^20", ONE("U8", "[100000000000000000000]", "[0,1]"), 1,
     WSYNC_ERR_OVERFLOW},
    {"overflow: data_offsets end 2^64", ONE("U8", "[1]", "[0,18446744073709551616]"), 1,
     WSYNC_ERR_OVERFLOW},
    {"overflow: data_offsets begin 2^64+1", ONE("U8", "[0]", "[18446744073709551617,0]"), 0,
     WSYNC_ERR_OVERFLOW},
    {"overflow: shape product [2^32,2^32] (wraps to 0)", ONE("U8", "[4294967296,4294967296]", "[0,0]"),
     0, WSYNC_ERR_OVERFLOW},
    {"overflow: shape product [2^16 x4, 2]", ONE("U8", "[65536,65536,65536,65536,2]", "[0,0]"), 0,
     WSYNC_ERR_OVERFLOW},
    {"overflow: byte size 2^61 F64 elements (wraps to 0)", ONE("F64", "[2305843009213693952]", "[0,0]"),
     0, WSYNC_ERR_OVERFLOW},
    {"overflow: byte size 2^63 I16 elements", ONE("I16", "[9223372036854775808]", "[0,0]"), 0,
     WSYNC_ERR_OVERFLOW},

    {"overflow: shape entry 18446744073709551620", ONE("U8", "[18446744073709551620]", "[0,1]"), 1,
     WSYNC_ERR_OVERFLOW},
    {"overflow: shape entry of 21 digits", ONE("U8", "[184467440737095516150]", "[0,1]"), 1,
     WSYNC_ERR_OVERFLOW},
    {"schema: shape entry above 2^64 with a fraction is a float",
     ONE("U8", "[99999999999999999999.5]", "[0,1]"), 1, WSYNC_ERR_INVALID_HEADER},
    {"schema: shape entry with a huge exponent is a float", ONE("U8", "[1e99999999999999999999]", "[0,1]"),
     1, WSYNC_ERR_INVALID_HEADER},
    {"schema: huge negative shape entry", ONE("U8", "[-99999999999999999999]", "[0,1]"), 1,
     WSYNC_ERR_INVALID_HEADER},

    /* sizes */
    {"size: F32 [2] spanning 4 bytes", ONE("F32", "[2]", "[0,4]"), 4, WSYNC_ERR_SIZE_MISMATCH},
    {"size: F32 [1] spanning 8 bytes", ONE("F32", "[1]", "[0,8]"), 8, WSYNC_ERR_SIZE_MISMATCH},
    {"size: scalar F64 spanning 0 bytes", ONE("F64", "[]", "[0,0]"), 0, WSYNC_ERR_SIZE_MISMATCH},
    {"size: F4 [3] (12 bits)", ONE("F4", "[3]", "[0,2]"), 2, WSYNC_ERR_SIZE_MISMATCH},
    {"size: F4 scalar (4 bits)", ONE("F4", "[]", "[0,1]"), 1, WSYNC_ERR_SIZE_MISMATCH},
    {"size: F6_E2M3 [1] (6 bits)", ONE("F6_E2M3", "[1]", "[0,1]"), 1, WSYNC_ERR_SIZE_MISMATCH},
    {"size: F6_E3M2 [2] (12 bits)", ONE("F6_E3M2", "[2]", "[0,2]"), 2, WSYNC_ERR_SIZE_MISMATCH},
    {"size: F6_E3M2 [4] spanning 4 bytes", ONE("F6_E3M2", "[4]", "[0,4]"), 4, WSYNC_ERR_SIZE_MISMATCH},
    {"size: begin near 2^64, 3 bytes for an F32",
     ONE("F32", "[]", "[18446744073709551612,18446744073709551615]"), 4, WSYNC_ERR_SIZE_MISMATCH},

    /* offsets */
    {"offsets: reversed", ONE("U8", "[0]", "[4,0]"), 4, WSYNC_ERR_INVALID_OFFSETS},
    {"offsets: reversed with matching span size", ONE("U8", "[4]", "[8,4]"), 8,
     WSYNC_ERR_INVALID_OFFSETS},
    {"offsets: begin near 2^64 and end 4 (begin+len wraps)",
     ONE("U8", "[4]", "[18446744073709551612,4]"), 4, WSYNC_ERR_INVALID_OFFSETS},
    {"offsets: first tensor does not start at 0", ONE("U8", "[4]", "[4,8]"), 8,
     WSYNC_ERR_INVALID_OFFSETS},
    {"offsets: hole between tensors",
     "{\"a\":" ENTRY("U8", "[4]", "[0,4]") ",\"b\":" ENTRY("U8", "[4]", "[8,12]") "}", 12,
     WSYNC_ERR_INVALID_OFFSETS},
    {"offsets: overlapping tensors",
     "{\"a\":" ENTRY("U8", "[8]", "[0,8]") ",\"b\":" ENTRY("U8", "[8]", "[4,12]") "}", 12,
     WSYNC_ERR_INVALID_OFFSETS},
    {"offsets: two tensors on the same bytes",
     "{\"a\":" ENTRY("U8", "[4]", "[0,4]") ",\"b\":" ENTRY("U8", "[4]", "[0,4]") "}", 4,
     WSYNC_ERR_INVALID_OFFSETS},
    {"offsets: zero-size tensor inside another",
     "{\"a\":" ENTRY("U8", "[4]", "[0,4]") ",\"b\":" ENTRY("U8", "[0]", "[2,2]") "}", 4,
     WSYNC_ERR_INVALID_OFFSETS},

    /* bounds */
    {"bounds: end past the data", ONE("U8", "[8]", "[0,8]"), 4, WSYNC_ERR_OUT_OF_BOUNDS},
    {"bounds: no data at all", ONE("F32", "[]", "[0,4]"), 0, WSYNC_ERR_OUT_OF_BOUNDS},
    {"bounds: begin near 2^64, 3 U8 bytes",
     ONE("U8", "[3]", "[18446744073709551612,18446744073709551615]"), 16, WSYNC_ERR_OUT_OF_BOUNDS},
    {"bounds: 18446744073709551615 elements parse exactly",
     ONE("U8", "[18446744073709551615]", "[0,18446744073709551615]"), 16, WSYNC_ERR_OUT_OF_BOUNDS},
    {"bounds: zero-size tensor past the end", ONE("U8", "[0]", "[5,5]"), 4, WSYNC_ERR_OUT_OF_BOUNDS},

    /* trailing bytes */
    {"trailing: one byte after the last tensor", ONE("U8", "[4]", "[0,4]"), 5,
     WSYNC_ERR_TRAILING_BYTES},
    {"trailing: data with no tensors", "{}", 4, WSYNC_ERR_TRAILING_BYTES},
    {"trailing: data after only zero-size tensors", ONE("U8", "[0]", "[0,0]"), 1,
     WSYNC_ERR_TRAILING_BYTES},
    {"trailing: data with only metadata", "{\"__metadata__\":{\"a\":\"b\"}}", 8,
     WSYNC_ERR_TRAILING_BYTES},
};

static void test_bad_table(void)
{
    size_t i;
    char title[256];
    for (i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        snprintf(title, sizeof title, "reject %s -> %s", c->name, wsync_result_name(c->code));
        TEST_BEGIN(title);
        CHECK_CODE(parse_hdr(c->hdr, c->dlen), c->code);
        TEST_END();
    }
}

/* Tensor-level failures found after the JSON is read name the tensor and
   point at its key. */
static void test_error_detail(void)
{
    static const struct {
        const char *name;
        const char *hdr;
        size_t dlen;
        wsync_result code;
        const char *tensor; /* expected err.tensor */
        const char *key;    /* the key text whose '"' err.offset must point at */
    } cases[] = {
        {"size mismatch", "{\"a\":" ENTRY("U8", "[1]", "[0,1]") ",\"bad\":" ENTRY("F32", "[2]", "[1,5]") "}",
         5, WSYNC_ERR_SIZE_MISMATCH, "bad", "\"bad\""},
        {"shape product overflow", "{\"a\":" ENTRY("U8", "[1]", "[0,1]") ",\"big\":" ENTRY("U8", "[4294967296,4294967296]", "[1,1]") "}",
         1, WSYNC_ERR_OVERFLOW, "big", "\"big\""},
        {"byte size overflow", "{\"w\":" ENTRY("F64", "[2305843009213693952]", "[0,0]") "}", 0,
         WSYNC_ERR_OVERFLOW, "w", "\"w\""},
        {"reversed offsets", "{\"x\":" ENTRY("U8", "[0]", "[4,0]") "}", 4, WSYNC_ERR_INVALID_OFFSETS, "x",
         "\"x\""},
        {"hole", "{\"a\":" ENTRY("U8", "[4]", "[0,4]") ",  \"hole\":" ENTRY("U8", "[4]", "[8,12]") "}", 12,
         WSYNC_ERR_INVALID_OFFSETS, "hole", "\"hole\""},
        {"out of bounds", "{ \"far\":" ENTRY("U8", "[8]", "[0,8]") "}", 4, WSYNC_ERR_OUT_OF_BOUNDS, "far",
         "\"far\""},
        {"sub-byte size", "{\"q\":" ENTRY("F4", "[3]", "[0,2]") "}", 2, WSYNC_ERR_SIZE_MISMATCH, "q", "\"q\""},
        {"duplicate name", "{\"d\":" ENTRY("U8", "[1]", "[0,1]") ",\"d\":" ENTRY("U8", "[1]", "[1,2]") "}", 2,
         WSYNC_ERR_DUPLICATE_KEY, "d", NULL},
        {"escaped name", "{\"n\\u00e9\":" ENTRY("F32", "[2]", "[0,4]") "}", 4, WSYNC_ERR_SIZE_MISMATCH,
         "n\xC3\xA9", "\"n\\u00e9\""},
    };
    size_t i;
    char title[256];
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        blob b = mkfile(cases[i].hdr, cases[i].dlen);
        wsync_error err;
        wsync_result r;
        snprintf(title, sizeof title, "error detail names the tensor and its key offset: %s",
                 cases[i].name);
        TEST_BEGIN(title);
        r = parse_ex(b.p, b.size, NULL, NULL, &err);
        CHECK_CODE(r, cases[i].code);
        CHECK_EQ_STR(err.tensor, cases[i].tensor);
        CHECK_MSG(strstr(err.message, cases[i].tensor) != NULL, "%s", err.message);
        if (cases[i].key) {
            const char *k = strstr(cases[i].hdr, cases[i].key);
            CHECK_EQ_U64(err.offset, 8 + (uint64_t)(k - cases[i].hdr));
        } else {
            /* either occurrence of the duplicated key */
            const char *k1 = strstr(cases[i].hdr, "\"d\""), *k2 = strstr(k1 + 1, "\"d\"");
            CHECK_MSG(err.offset == 8 + (uint64_t)(k1 - cases[i].hdr) ||
                          err.offset == 8 + (uint64_t)(k2 - cases[i].hdr),
                      "offset %llu", (unsigned long long)err.offset);
        }
        blob_free(&b);
        TEST_END();
    }
}

/* Failures inside a tensor entry, found while reading the JSON, are also
   tensor-level: they name the tensor. */
static void test_error_detail_schema(void)
{
    static const struct {
        const char *name;
        const char *hdr;
        wsync_result code;
    } cases[] = {
        {"unknown dtype", "{\"a\":" ENTRY("U8", "[1]", "[0,1]") ",\"tname\":" ENTRY("bf16", "[1]", "[1,3]") "}",
         WSYNC_ERR_UNKNOWN_DTYPE},
        {"missing shape", "{\"tname\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", WSYNC_ERR_INVALID_HEADER},
        {"float in shape", "{\"tname\":" ENTRY("U8", "[1.5]", "[0,1]") "}", WSYNC_ERR_INVALID_HEADER},
        {"shape entry above 2^64-1", "{\"tname\":" ENTRY("U8", "[18446744073709551616]", "[0,1]") "}",
         WSYNC_ERR_OVERFLOW},
    };
    size_t i;
    char title[256];
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        blob b = mkfile(cases[i].hdr, 3);
        wsync_error err;
        wsync_result r;
        const char *k = strstr(cases[i].hdr, "\"tname\"");
        snprintf(title, sizeof title, "error detail names the tensor for a schema error: %s",
                 cases[i].name);
        TEST_BEGIN(title);
        r = parse_ex(b.p, b.size, NULL, NULL, &err);
        CHECK_CODE(r, cases[i].code);
        CHECK_EQ_STR(err.tensor, "tname");
        /* the key's offset, or a position inside the tensor's entry */
        CHECK_MSG(err.offset >= 8 + (uint64_t)(k - cases[i].hdr) &&
                      err.offset < 8 + (uint64_t)strlen(cases[i].hdr),
                  "offset %llu", (unsigned long long)err.offset);
        blob_free(&b);
        TEST_END();
    }
}

static void test_header_length(void)
{
    uint8_t buf[64];
    size_t n;
    wsync_st_options opt;
    wsync_error err;
    blob b;

    for (n = 0; n < 8; n++) {
        char title[64];
        snprintf(title, sizeof title, "length: %zu-byte input -> TRUNCATED", n);
        TEST_BEGIN(title);
        memset(buf, 0, sizeof buf);
        CHECK_CODE(parse_ex(n ? buf : NULL, n, NULL, NULL, &err), WSYNC_ERR_TRUNCATED);
        { /* exact-size allocation */
            uint8_t *p = (uint8_t *)malloc(n ? n : 1);
            memset(p, 0, n ? n : 1);
            CHECK_CODE(parse_ex(p, n, NULL, NULL, NULL), WSYNC_ERR_TRUNCATED);
            free(p);
        }
        TEST_END();
    }

    TEST_BEGIN("length: header length 2^64-1 -> HEADER_TOO_LARGE");
    memset(buf, 0xFF, 8);
    memcpy(buf + 8, "{}", 2);
    CHECK_CODE(parse_ex(buf, 10, NULL, NULL, &err), WSYNC_ERR_HEADER_TOO_LARGE);
    TEST_END();

    TEST_BEGIN("length: header length 2^63 -> HEADER_TOO_LARGE");
    put_le64(buf, (uint64_t)1 << 63);
    CHECK_CODE(parse_ex(buf, 10, NULL, NULL, NULL), WSYNC_ERR_HEADER_TOO_LARGE);
    TEST_END();

    TEST_BEGIN("length: header length 100000001 -> HEADER_TOO_LARGE (before the file size)");
    put_le64(buf, 100000001u);
    CHECK_CODE(parse_ex(buf, 10, NULL, NULL, NULL), WSYNC_ERR_HEADER_TOO_LARGE);
    CHECK_CODE(parse_ex(buf, 8, NULL, NULL, NULL), WSYNC_ERR_HEADER_TOO_LARGE);
    TEST_END();

    TEST_BEGIN("length: header length 100000000 in a small file -> TRUNCATED");
    put_le64(buf, 100000000u);
    CHECK_CODE(parse_ex(buf, 10, NULL, NULL, NULL), WSYNC_ERR_TRUNCATED);
    TEST_END();

    TEST_BEGIN("length: header one byte longer than the file -> TRUNCATED");
    b = mkfile("{}", 0);
    put_le64(b.p, 3);
    CHECK_CODE(parse_blob(&b), WSYNC_ERR_TRUNCATED);
    blob_free(&b);
    TEST_END();

    TEST_BEGIN("length: header length 255 in a 16-byte file -> TRUNCATED");
    memset(buf, 0, sizeof buf);
    buf[0] = 0xFF;
    CHECK_CODE(parse_ex(buf, 16, NULL, NULL, NULL), WSYNC_ERR_TRUNCATED);
    TEST_END();

    TEST_BEGIN("length: opt max_header_size is enforced");
    b = mkfile("{\"t\":" ENTRY("U8", "[1]", "[0,1]") "}", 1);
    memset(&opt, 0, sizeof opt);
    opt.max_header_size = b.size - 9 - 1;
    CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_ERR_HEADER_TOO_LARGE);
    opt.max_header_size = b.size - 9;
    CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_OK);
    blob_free(&b);
    TEST_END();

    TEST_BEGIN("length: opt max_header_size above the ceiling keeps the ceiling");
    memset(&opt, 0, sizeof opt);
    opt.max_header_size = (uint64_t)1 << 40;
    put_le64(buf, 100000001u);
    CHECK_CODE(parse_ex(buf, 10, &opt, NULL, NULL), WSYNC_ERR_HEADER_TOO_LARGE);
    TEST_END();

    TEST_BEGIN("length: a header of exactly 100000000 bytes is accepted");
    {
        size_t n = WSYNC_ST_MAX_HEADER_SIZE;
        char *h = (char *)malloc(n);
        if (!h) exit(2);
        memset(h, ' ', n);
        memcpy(h, "{\"__metadata__\":{\"k\":\"v\"}}", 26);
        b = mkfile_n(h, n, 0);
        free(h);
        CHECK_CODE(parse_blob(&b), WSYNC_OK);
        put_le64(b.p, n + 1); /* one more than the cap, and than the file */
        CHECK_CODE(parse_blob(&b), WSYNC_ERR_HEADER_TOO_LARGE);
        blob_free(&b);
    }
    TEST_END();

    TEST_BEGIN("length: 8-byte file with header length 0 -> INVALID_JSON (empty header)");
    memset(buf, 0, sizeof buf);
    CHECK_CODE(parse_ex(buf, 8, NULL, NULL, NULL), WSYNC_ERR_INVALID_JSON);
    TEST_END();
}

static void test_bad_special(void)
{
    static const char nul_pad[] = "{\"t\":" ENTRY("U8", "[1]", "[0,1]") "}\0\0\0";
    static const char nul_in[] = "{\"t\":\0" ENTRY("U8", "[1]", "[0,1]") "}";
    static const char nul_key[] = "{\"a\0b\":" ENTRY("U8", "[1]", "[0,1]") "}";
    blob b;
    wsync_st_file f;
    wsync_error err;

    TEST_BEGIN("json: header padded with NUL bytes -> INVALID_JSON");
    b = mkfile_n(nul_pad, sizeof nul_pad - 1, 1);
    CHECK_CODE(parse_blob(&b), WSYNC_ERR_INVALID_JSON);
    blob_free(&b);
    TEST_END();

    TEST_BEGIN("json: NUL byte between tokens -> INVALID_JSON");
    b = mkfile_n(nul_in, sizeof nul_in - 1, 1);
    CHECK_CODE(parse_blob(&b), WSYNC_ERR_INVALID_JSON);
    blob_free(&b);
    TEST_END();

    TEST_BEGIN("json: raw NUL byte in a key -> INVALID_JSON");
    b = mkfile_n(nul_key, sizeof nul_key - 1, 1);
    CHECK_CODE(parse_blob(&b), WSYNC_ERR_INVALID_JSON);
    blob_free(&b);
    TEST_END();

    TEST_BEGIN("json: form feed before '{' is not whitespace");
    CHECK(parse_hdr("\f{}", 0) != WSYNC_OK);
    TEST_END();

    TEST_BEGIN("json: vertical tab after '}' is not whitespace -> INVALID_JSON");
    CHECK_CODE(parse_hdr("{}\v", 0), WSYNC_ERR_INVALID_JSON);
    TEST_END();

    TEST_BEGIN("json: non-breaking space (U+00A0) after '}' -> INVALID_JSON");
    CHECK_CODE(parse_hdr("{}\xC2\xA0", 0), WSYNC_ERR_INVALID_JSON);
    TEST_END();

    TEST_BEGIN("json: byte-order mark before '{' is rejected");
    CHECK(parse_hdr("\xEF\xBB\xBF{}", 0) != WSYNC_OK);
    TEST_END();

    TEST_BEGIN("api: NULL error pointer, NULL output, NULL bytes");
    b = mkfile("{}", 0);
    CHECK_CODE(wsync_st_parse(b.p, b.size, NULL, &f, NULL), WSYNC_OK);
    wsync_st_free(&f);
    CHECK_CODE(wsync_st_parse(b.p, 3, NULL, &f, NULL), WSYNC_ERR_TRUNCATED);
    CHECK_CODE(wsync_st_parse(b.p, b.size, NULL, NULL, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(err.code, WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(wsync_st_parse(NULL, 10, NULL, &f, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK(f.tensors == NULL);
    wsync_st_free(NULL);
    blob_free(&b);
    TEST_END();
}

/* Builds {"t":{"x":<depth brackets of kind open/close>,"dtype":...}}. */
static char *nested_header(size_t depth, int objects)
{
    const char *pre = "{\"t\":{\"x\":", *post = ",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    size_t open = objects ? 5 : 1; /* {"a": or [ */
    size_t n = strlen(pre) + depth * (open + 1) + 2 + strlen(post) + 1, i, o = 0;
    char *s = (char *)malloc(n);
    if (!s) exit(2);
    memcpy(s, pre, strlen(pre));
    o = strlen(pre);
    for (i = 0; i < depth; i++) {
        memcpy(s + o, objects ? "{\"a\":" : "[", open);
        o += open;
    }
    s[o++] = '1';
    for (i = 0; i < depth; i++) s[o++] = objects ? '}' : ']';
    memcpy(s + o, post, strlen(post));
    o += strlen(post);
    s[o] = 0;
    return s;
}

static void test_nesting(void)
{
    static const struct {
        size_t depth;
        int objects;
        uint32_t max_depth;
        wsync_result code;
    } cases[] = {
        {1, 0, 0, WSYNC_OK},
        {32, 0, 0, WSYNC_OK},
        {50, 1, 0, WSYNC_OK},
        {100, 0, 0, WSYNC_ERR_NESTING_TOO_DEEP},
        {100, 1, 0, WSYNC_ERR_NESTING_TOO_DEEP},
        {1000000, 0, 0, WSYNC_ERR_NESTING_TOO_DEEP},
        {200000, 1, 0, WSYNC_ERR_NESTING_TOO_DEEP},
        {2, 0, 8, WSYNC_OK},
        {20, 0, 8, WSYNC_ERR_NESTING_TOO_DEEP},
        {20, 1, 8, WSYNC_ERR_NESTING_TOO_DEEP},
        {100, 0, 200, WSYNC_OK},
    };
    size_t i;
    char title[160];
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *h = nested_header(cases[i].depth, cases[i].objects);
        blob b = mkfile(h, 1);
        wsync_st_options opt;
        memset(&opt, 0, sizeof opt);
        opt.max_depth = cases[i].max_depth;
        snprintf(title, sizeof title, "nesting: %zu nested %s in an unknown field, max_depth %u -> %s",
                 cases[i].depth, cases[i].objects ? "objects" : "arrays", (unsigned)cases[i].max_depth,
                 wsync_result_name(cases[i].code));
        TEST_BEGIN(title);
        CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), cases[i].code);
        TEST_END();
        blob_free(&b);
        free(h);
    }

    TEST_BEGIN("nesting: opt max_depth UINT32_MAX keeps schema errors as they are");
    {
        wsync_st_options opt;
        blob b = mkfile(ONE("bf16", "[1]", "[0,2]"), 2);
        memset(&opt, 0, sizeof opt);
        opt.max_depth = UINT32_MAX;
        CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_ERR_UNKNOWN_DTYPE);
        opt.max_depth = UINT32_MAX - 2;
        CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_ERR_UNKNOWN_DTYPE);
        opt.max_depth = 1000;
        CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_ERR_UNKNOWN_DTYPE);
        blob_free(&b);
        b = mkfile(ONE("U8", "[1]", "[0,1]"), 1);
        opt.max_depth = UINT32_MAX;
        CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_OK);
        blob_free(&b);
    }
    TEST_END();

    TEST_BEGIN("nesting: a schema error before deep valid nesting within the limit stays a schema error");
    {
        char *h = nested_header(60, 0);
        char *h2 = (char *)malloc(strlen(h) + 64);
        blob b;
        /* {"a":5,"t":{"x":[[...60...]],...}} : the first entry is not an object */
        strcpy(h2, "{\"a\":5,");
        strcat(h2, h + 1);
        b = mkfile(h2, 1);
        CHECK_CODE(parse_blob(&b), WSYNC_ERR_INVALID_HEADER);
        blob_free(&b);
        free(h);
        free(h2);
    }
    TEST_END();

    TEST_BEGIN("nesting: unclosed deep nesting is rejected");
    {
        size_t n = 300000, k;
        char *h = (char *)malloc(n + 16);
        blob b;
        strcpy(h, "{\"t\":{\"x\":");
        k = strlen(h);
        memset(h + k, '[', n - k);
        h[n] = 0;
        b = mkfile(h, 0);
        CHECK(parse_blob(&b) != WSYNC_OK);
        blob_free(&b);
        free(h);
    }
    TEST_END();
}

static void test_limits(void)
{
    wsync_st_options opt;
    blob b;
    memset(&opt, 0, sizeof opt);

    TEST_BEGIN("rank: 64 dimensions are accepted by default");
    CHECK_CODE(parse_hdr(ONE("U8",
                             "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
                             "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,2]",
                             "[0,2]"),
                         2),
               WSYNC_OK);
    TEST_END();

    TEST_BEGIN("rank: opt max_rank 2 rejects rank 3 -> RANK_TOO_LARGE");
    b = mkfile(ONE("U8", "[1,1,1]", "[0,1]"), 1);
    opt.max_rank = 2;
    CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_ERR_RANK_TOO_LARGE);
    blob_free(&b);
    b = mkfile(ONE("U8", "[1,1]", "[0,1]"), 1);
    CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_OK);
    blob_free(&b);
    opt.max_rank = 0;
    TEST_END();

    TEST_BEGIN("rank: 100000 dimensions -> RANK_TOO_LARGE");
    {
        size_t n = 100000, i, o;
        char *h = (char *)malloc(2 * n + 128);
        strcpy(h, "{\"t\":{\"dtype\":\"U8\",\"shape\":[");
        o = strlen(h);
        for (i = 0; i < n; i++) {
            h[o++] = '1';
            h[o++] = ',';
        }
        h[o - 1] = 0;
        strcat(h, "],\"data_offsets\":[0,1]}}");
        CHECK_CODE(parse_hdr(h, 1), WSYNC_ERR_RANK_TOO_LARGE);
        free(h);
    }
    TEST_END();

    TEST_BEGIN("limit: opt max_tensors -> LIMIT");
    b = mkfile("{\"a\":" ENTRY("U8", "[1]", "[0,1]") ",\"b\":" ENTRY("U8", "[1]", "[1,2]") ",\"c\":" ENTRY(
                   "U8", "[1]", "[2,3]") "}",
               3);
    opt.max_tensors = 2;
    CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_ERR_LIMIT);
    opt.max_tensors = 3;
    CHECK_CODE(parse_ex(b.p, b.size, &opt, NULL, NULL), WSYNC_OK);
    blob_free(&b);
    TEST_END();
}

/* ---------------------------------------------------------------------
   3. Accepted edge cases
   --------------------------------------------------------------------- */

/* Parses a header that must be accepted; the caller frees *f. */
static int accept(const char *hdr, size_t hlen, size_t dlen, blob *b, wsync_st_file *f)
{
    wsync_error err;
    wsync_result r;
    *b = mkfile_n(hdr, hlen, dlen);
    r = parse_ex(b->p, b->size, NULL, f, &err);
    CHECK_MSG(r == WSYNC_OK, "%s: %s", wsync_result_name(r), err.message);
    if (r != WSYNC_OK) {
        blob_free(b);
        return 0;
    }
    return 1;
}

static void done(blob *b, wsync_st_file *f)
{
    wsync_st_free(f);
    blob_free(b);
}

static int name_is(const wsync_st_tensor *t, const char *s, size_t n)
{
    return t && t->name_len == n && memcmp(t->name, s, n) == 0 && t->name[n] == 0;
}

static void test_accept_basic(void)
{
    blob b;
    wsync_st_file f;
    static const char *const empties[] = {"{}", "{}      ", "  {  }  ", "\t\r\n {}\n\r\t "};
    size_t i;

    for (i = 0; i < sizeof empties / sizeof empties[0]; i++) {
        char title[96];
        snprintf(title, sizeof title, "accept: empty header variant %zu (no tensors)", i);
        TEST_BEGIN(title);
        if (accept(empties[i], strlen(empties[i]), 0, &b, &f)) {
            CHECK_EQ_INT(f.n_tensors, 0);
            CHECK_EQ_INT(f.metadata_kind, WSYNC_ST_METADATA_ABSENT);
            CHECK(f.metadata == NULL && f.n_metadata == 0);
            CHECK(wsync_st_find(&f, "x") == NULL);
            CHECK(wsync_st_metadata_get(&f, "x") == NULL);
            CHECK_EQ_U64(f.data_len, 0);
            done(&b, &f);
        }
        TEST_END();
    }

    TEST_BEGIN("accept: scalar (shape [])");
    if (accept(ONE("F32", "[]", "[0,4]"), strlen(ONE("F32", "[]", "[0,4]")), 4, &b, &f)) {
        CHECK_EQ_INT(f.n_tensors, 1);
        CHECK_EQ_INT(f.tensors[0].rank, 0);
        CHECK(f.tensors[0].shape == NULL);
        CHECK_EQ_U64(f.tensors[0].nelem, 1);
        CHECK_EQ_INT(f.tensors[0].dtype, WSYNC_DTYPE_F32);
        done(&b, &f);
    }
    TEST_END();

    TEST_BEGIN("accept: zero-element tensors sharing an offset");
    {
        static const char h[] = "{\"z1\":" ENTRY("U8", "[0]", "[0,0]") ",\"z2\":" ENTRY("F32", "[0,3]", "[0,0]")
            ",\"a\":" ENTRY("U8", "[2]", "[0,2]") ",\"z3\":" ENTRY("F64", "[5,0]", "[2,2]")
            ",\"z4\":" ENTRY("I16", "[0]", "[2,2]") "}";
        if (accept(h, sizeof h - 1, 2, &b, &f)) {
            const wsync_st_tensor *t;
            CHECK_EQ_INT(f.n_tensors, 5);
            CHECK_EQ_U64(f.tensors[0].begin, 0);
            CHECK_EQ_U64(f.tensors[4].end, 2);
            for (i = 1; i < f.n_tensors; i++) CHECK(f.tensors[i - 1].begin <= f.tensors[i].begin);
            t = wsync_st_find(&f, "z2");
            CHECK(t && t->nelem == 0 && t->rank == 2 && t->shape[1] == 3);
            t = wsync_st_find(&f, "a");
            CHECK(t && t->data == b.p + 8 + f.header_len && t->begin == 0 && t->end == 2);
            t = wsync_st_find(&f, "z3");
            CHECK(t && t->begin == 2 && t->end == 2 && t->nelem == 0);
            done(&b, &f);
        }
    }
    TEST_END();

    TEST_BEGIN("accept: zero in the first dimension stops the product before it overflows");
    CHECK_CODE(parse_hdr(ONE("U8", "[0,4294967296,4294967296]", "[0,0]"), 0), WSYNC_OK);
    TEST_END();

    TEST_BEGIN("accept: keys in any order relative to offsets");
    {
        static const char h[] = "{\"c\":" ENTRY("U8", "[4]", "[8,12]") ",\"a\":" ENTRY("U8", "[4]", "[4,8]")
            ",\"b\":" ENTRY("U8", "[4]", "[0,4]") "}";
        if (accept(h, sizeof h - 1, 12, &b, &f)) {
            CHECK_EQ_INT(f.n_tensors, 3);
            CHECK(name_is(&f.tensors[0], "b", 1));
            CHECK(name_is(&f.tensors[1], "a", 1));
            CHECK(name_is(&f.tensors[2], "c", 1));
            for (i = 0; i < 3; i++) {
                CHECK(f.tensors[i].data == b.p + 8 + f.header_len + 4 * i);
                CHECK(f.tensors[i].data[0] == data_byte(4 * i));
            }
            CHECK_EQ_U64(f.tensors[0].key_offset, 8 + (uint64_t)(strstr(h, "\"b\"") - h));
            CHECK_EQ_U64(f.tensors[2].key_offset, 8 + 0 + 1);
            CHECK(wsync_st_find(&f, "c") == &f.tensors[2]);
            CHECK(wsync_st_find(&f, "a") == &f.tensors[1]);
            CHECK(wsync_st_find(&f, "d") == NULL);
            CHECK(wsync_st_find(&f, "") == NULL);
            CHECK(wsync_st_find(&f, NULL) == NULL);
            done(&b, &f);
        }
    }
    TEST_END();

    TEST_BEGIN("accept: fields in any order, unknown fields, whitespace everywhere");
    {
        static const char h[] = " \t\r\n{ \"t\" :\n{ \"data_offsets\" : [ 0 , 4 ] ,\t\"extra\" : 1 ,"
                                " \"shape\" : [ 2 , 1 ] , \"dtype\" : \"I16\" , \"more\" : { } } }\r\n\t  ";
        if (accept(h, sizeof h - 1, 4, &b, &f)) {
            CHECK_EQ_INT(f.n_tensors, 1);
            CHECK_EQ_INT(f.tensors[0].dtype, WSYNC_DTYPE_I16);
            CHECK(f.tensors[0].rank == 2 && f.tensors[0].shape[0] == 2 && f.tensors[0].shape[1] == 1);
            done(&b, &f);
        }
    }
    TEST_END();

    TEST_BEGIN("accept: header padded with spaces to a multiple of 8");
    {
        char h[128];
        size_t n;
        strcpy(h, ONE("U8", "[3]", "[0,3]"));
        n = strlen(h);
        while ((n + 8) % 8 || n == strlen(ONE("U8", "[3]", "[0,3]"))) h[n++] = ' ';
        h[n] = 0;
        if (accept(h, n, 3, &b, &f)) {
            CHECK_EQ_U64(f.header_len % 8, 0);
            CHECK(f.tensors[0].data == b.p + 8 + n);
            done(&b, &f);
        }
    }
    TEST_END();

    TEST_BEGIN("accept: 18446744073709551615 and other values inside unknown fields");
    {
        static const char h[] = "{\"t\":{\"big\":18446744073709551615,\"bigger\":99999999999999999999999,"
                                "\"neg\":-0,\"f\":-1.5e-3,\"e\":2E+10,\"o\":{\"k\":[true,false,null,\"s\\u00e9\\\"\",{}]},"
                                "\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"after\":[[[]]]}}";
        CHECK_CODE(parse_hdr(h, 1), WSYNC_OK);
    }
    TEST_END();

    TEST_BEGIN("data_offsets [2^64-1, 2^64-1] parse exactly (span 0 for U8 [1] -> SIZE_MISMATCH)");
    {
        blob bb = mkfile(ONE("U8", "[1]", "[18446744073709551615,18446744073709551615]"), 0);
        wsync_error err;
        CHECK_CODE(parse_ex(bb.p, bb.size, NULL, NULL, &err), WSYNC_ERR_SIZE_MISMATCH);
        CHECK_MSG(strstr(err.message, "18446744073709551615") || strstr(err.message, "span 0"), "%s",
                  err.message);
        blob_free(&bb);
    }
    TEST_END();

    TEST_BEGIN("accept: escaped field names and dtype are compared decoded");
    {
        static const char h[] = "{\"t\":{\"d\\u0074ype\":\"\\u0046\\u0033\\u0032\",\"sh\\u0061pe\":[1],"
                                "\"data\\u005foffsets\":[0,4]}}";
        if (accept(h, sizeof h - 1, 4, &b, &f)) {
            CHECK_EQ_INT(f.tensors[0].dtype, WSYNC_DTYPE_F32);
            done(&b, &f);
        }
    }
    TEST_END();
}

static void test_accept_misaligned(void)
{
    blob b;
    wsync_st_file f;
    char h[160];
    size_t n;
    double want[3] = {3.25, -1e300, 0.1}, got;
    TEST_BEGIN("accept: misaligned data (F64 read via memcpy)");
    strcpy(h, "{\"x\":" ENTRY("U8", "[1]", "[0,1]") ",\"d\":" ENTRY("F64", "[3]", "[1,25]") "}");
    n = strlen(h);
    if (n % 2 == 0) h[n++] = ' '; /* 8 + n odd: the data section starts at an odd offset */
    h[n] = 0;
    b = mkfile_n(h, n, 25);
    memcpy(b.p + 8 + n + 1, want, sizeof want);
    if (parse_ex(b.p, b.size, NULL, &f, NULL) == WSYNC_OK) {
        const wsync_st_tensor *t = wsync_st_find(&f, "d");
        CHECK(t != NULL);
        if (t) {
            CHECK(((uintptr_t)t->data) % 2 == 0); /* 8 + odd + 1 */
            CHECK(t->data == b.p + 8 + n + 1);
            for (n = 0; n < 3; n++) {
                memcpy(&got, t->data + 8 * n, 8);
                CHECK(got == want[n]);
            }
        }
        t = wsync_st_find(&f, "x");
        CHECK(t && ((uintptr_t)t->data) % 2 == 1);
        wsync_st_free(&f);
    }
    blob_free(&b);
    TEST_END();
}

static void test_accept_dtypes(void)
{
    static const struct {
        const char *name;
        wsync_dtype dtype;
        const char *shape;
        uint64_t nelem, nbytes;
    } dt[] = {
        {"BOOL", WSYNC_DTYPE_BOOL, "[3]", 3, 3},          {"U8", WSYNC_DTYPE_U8, "[3]", 3, 3},
        {"I8", WSYNC_DTYPE_I8, "[3]", 3, 3},              {"F8_E4M3", WSYNC_DTYPE_F8_E4M3, "[3]", 3, 3},
        {"F8_E5M2", WSYNC_DTYPE_F8_E5M2, "[3]", 3, 3},    {"F8_E8M0", WSYNC_DTYPE_F8_E8M0, "[3]", 3, 3},
        {"I16", WSYNC_DTYPE_I16, "[3]", 3, 6},            {"U16", WSYNC_DTYPE_U16, "[3]", 3, 6},
        {"F16", WSYNC_DTYPE_F16, "[3]", 3, 6},            {"BF16", WSYNC_DTYPE_BF16, "[3]", 3, 6},
        {"I32", WSYNC_DTYPE_I32, "[3]", 3, 12},           {"U32", WSYNC_DTYPE_U32, "[3]", 3, 12},
        {"F32", WSYNC_DTYPE_F32, "[3]", 3, 12},           {"F64", WSYNC_DTYPE_F64, "[3]", 3, 24},
        {"I64", WSYNC_DTYPE_I64, "[3]", 3, 24},           {"U64", WSYNC_DTYPE_U64, "[3]", 3, 24},
        {"C64", WSYNC_DTYPE_C64, "[3]", 3, 24},           {"F4", WSYNC_DTYPE_F4, "[2]", 2, 1},
        {"F6_E2M3", WSYNC_DTYPE_F6_E2M3, "[4]", 4, 3},    {"F6_E3M2", WSYNC_DTYPE_F6_E3M2, "[4]", 4, 3},
    };
    size_t i, n = sizeof dt / sizeof dt[0];
    char h[4096], title[96];
    size_t o = 0;
    uint64_t off = 0;
    blob b;
    wsync_st_file f;

    for (i = 0; i < n; i++) {
        char one[256];
        snprintf(title, sizeof title, "accept: dtype %s %s (%llu bytes)", dt[i].name, dt[i].shape,
                 (unsigned long long)dt[i].nbytes);
        TEST_BEGIN(title);
        snprintf(one, sizeof one, "{\"t\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[0,%llu]}}",
                 dt[i].name, dt[i].shape, (unsigned long long)dt[i].nbytes);
        if (accept(one, strlen(one), (size_t)dt[i].nbytes, &b, &f)) {
            CHECK_EQ_INT(f.tensors[0].dtype, dt[i].dtype);
            CHECK_EQ_U64(f.tensors[0].nelem, dt[i].nelem);
            CHECK_EQ_U64(f.tensors[0].end, dt[i].nbytes);
            check_rewrite(&f, dt[i].name, NULL);
            done(&b, &f);
        }
        TEST_END();
    }

    TEST_BEGIN("accept: all 20 dtypes in one file; its rewrite, prefixes and header cuts");
    CHECK_EQ_INT(n, WSYNC_DTYPE_COUNT - 1);
    o += (size_t)snprintf(h + o, sizeof h - o, "{");
    for (i = 0; i < n; i++) {
        o += (size_t)snprintf(h + o, sizeof h - o,
                              "%s\"%s_t\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%llu,%llu]}",
                              i ? "," : "", dt[n - 1 - i].name, dt[n - 1 - i].name, dt[n - 1 - i].shape,
                              (unsigned long long)off, (unsigned long long)(off + dt[n - 1 - i].nbytes));
        off += dt[n - 1 - i].nbytes;
    }
    o += (size_t)snprintf(h + o, sizeof h - o, "}");
    if (accept(h, o, (size_t)off, &b, &f)) {
        CHECK_EQ_INT(f.n_tensors, n);
        for (i = 0; i < n; i++) {
            char nm[32];
            const wsync_st_tensor *t;
            snprintf(nm, sizeof nm, "%s_t", dt[i].name);
            t = wsync_st_find(&f, nm);
            CHECK_MSG(t && t->dtype == dt[i].dtype && t->end - t->begin == dt[i].nbytes, "%s", nm);
        }
        check_rewrite(&f, "all dtypes", NULL);
        check_prefixes(b.p, b.size, 0, b.size, 1, "all dtypes");
        check_header_cuts(b.p, b.size, "all dtypes");
        done(&b, &f);
    }
    TEST_END();
}

static void test_accept_names_metadata(void)
{
    blob b;
    wsync_st_file f;
    TEST_BEGIN("accept: names are decoded (escapes, \\u00e9, surrogate pairs, \\u0000), lengths exact");
    {
        static const char h[] =
            "{\"a\\nb\":" ENTRY("U8", "[1]", "[0,1]") ",\"caf\\u00e9\":" ENTRY("U8", "[1]", "[1,2]")
            ",\"\\ud83d\\ude00\":" ENTRY("U8", "[1]", "[2,3]") ",\"x\\u0000y\":" ENTRY("U8", "[1]", "[3,4]")
            ",\"q\\\"\\\\\\/\\b\\f\\r\\t\":" ENTRY("U8", "[1]", "[4,5]") ",\"\":" ENTRY("U8", "[1]", "[5,6]")
            ",\"raw \xC3\xA9\xF0\x9F\x98\x80\x7F\":" ENTRY("U8", "[1]", "[6,7]")
            ",\"\\uD83D\\uDE00\\u00E9\":" ENTRY("U8", "[1]", "[7,8]") "}";
        if (accept(h, sizeof h - 1, 8, &b, &f)) {
            CHECK_EQ_INT(f.n_tensors, 8);
            CHECK(name_is(&f.tensors[0], "a\nb", 3));
            CHECK(name_is(&f.tensors[1], "caf\xC3\xA9", 5));
            CHECK(name_is(&f.tensors[2], "\xF0\x9F\x98\x80", 4));
            CHECK(name_is(&f.tensors[3], "x\0y", 3));
            CHECK(name_is(&f.tensors[4], "q\"\\/\b\f\r\t", 8));
            CHECK(name_is(&f.tensors[5], "", 0));
            CHECK(name_is(&f.tensors[6], "raw \xC3\xA9\xF0\x9F\x98\x80\x7F", 11));
            CHECK(name_is(&f.tensors[7], "\xF0\x9F\x98\x80\xC3\xA9", 6));
            CHECK(wsync_st_find(&f, "caf\xC3\xA9") == &f.tensors[1]);
            CHECK(wsync_st_find_n(&f, "x\0y", 3) == &f.tensors[3]);
            CHECK(wsync_st_find(&f, "x") == NULL);
            CHECK(wsync_st_find_n(&f, "x\0", 2) == NULL);
            CHECK(wsync_st_find_n(&f, "", 0) == &f.tensors[5]);
            CHECK(wsync_st_find(&f, "") == &f.tensors[5]);
            CHECK(wsync_st_find_n(&f, "a\nbc", 3) == &f.tensors[0]);
            check_rewrite(&f, "decoded names", NULL);
            done(&b, &f);
        }
    }
    TEST_END();

    TEST_BEGIN("accept: \"__metadata__\": null");
    if (accept("{\"__metadata__\":null}", 21, 0, &b, &f)) {
        CHECK_EQ_INT(f.metadata_kind, WSYNC_ST_METADATA_NULL);
        CHECK(f.metadata == NULL && f.n_metadata == 0);
        CHECK(wsync_st_metadata_get(&f, "format") == NULL);
        done(&b, &f);
    }
    TEST_END();

    TEST_BEGIN("accept: \"__metadata__\": null between tensors, with whitespace");
    {
        static const char h[] = "{\"a\":" ENTRY("U8", "[1]", "[0,1]") ", \"__metadata__\" : null ,\"b\":" ENTRY(
            "U8", "[1]", "[1,2]") "}";
        if (accept(h, sizeof h - 1, 2, &b, &f)) {
            CHECK_EQ_INT(f.metadata_kind, WSYNC_ST_METADATA_NULL);
            CHECK_EQ_INT(f.n_tensors, 2);
            CHECK(wsync_st_find(&f, "__metadata__") == NULL);
            done(&b, &f);
        }
    }
    TEST_END();

    TEST_BEGIN("accept: empty metadata object");
    if (accept("{\"__metadata__\":{}}", 19, 0, &b, &f)) {
        CHECK_EQ_INT(f.metadata_kind, WSYNC_ST_METADATA_OBJECT);
        CHECK_EQ_INT(f.n_metadata, 0);
        check_rewrite(&f, "empty metadata", NULL);
        done(&b, &f);
    }
    TEST_END();

    TEST_BEGIN("accept: metadata in header order, decoded, with lookups");
    {
        static const char h[] = "{\"t\":" ENTRY("U8", "[1]", "[0,1]") ",\"__metadata__\":{\"z\":\"last\",\"a\":\"\","
                                "\"m\\u00e9\":\"v\\n\\u0000w\",\"format\":\"pt\"}}";
        if (accept(h, sizeof h - 1, 1, &b, &f)) {
            CHECK_EQ_INT(f.metadata_kind, WSYNC_ST_METADATA_OBJECT);
            CHECK_EQ_INT(f.n_metadata, 4);
            if (f.n_metadata == 4) {
                CHECK(f.metadata[0].key_len == 1 && strcmp(f.metadata[0].key, "z") == 0);
                CHECK(f.metadata[0].value_len == 4 && strcmp(f.metadata[0].value, "last") == 0);
                CHECK(f.metadata[1].key_len == 1 && f.metadata[1].value_len == 0 && f.metadata[1].value[0] == 0);
                CHECK(f.metadata[2].key_len == 3 && memcmp(f.metadata[2].key, "m\xC3\xA9", 4) == 0);
                CHECK(f.metadata[2].value_len == 4 && memcmp(f.metadata[2].value, "v\n\0w", 5) == 0);
                CHECK(f.metadata[3].key_len == 6 && strcmp(f.metadata[3].value, "pt") == 0);
            }
            CHECK(wsync_st_metadata_get(&f, "format") && strcmp(wsync_st_metadata_get(&f, "format"), "pt") == 0);
            CHECK(wsync_st_metadata_get(&f, "a") && wsync_st_metadata_get(&f, "a")[0] == 0);
            CHECK(wsync_st_metadata_get(&f, "m\xC3\xA9") != NULL);
            CHECK(wsync_st_metadata_get(&f, "missing") == NULL);
            CHECK(wsync_st_metadata_get(&f, NULL) == NULL);
            CHECK(wsync_st_find(&f, "format") == NULL);
            check_rewrite(&f, "metadata", NULL);
            done(&b, &f);
        }
    }
    TEST_END();

    TEST_BEGIN("accept: __metadata__ spelled with an escape is the metadata");
    {
        static const char h[] = "{\"\\u005f_metadata__\":{\"k\":\"v\"}}";
        if (accept(h, sizeof h - 1, 0, &b, &f)) {
            CHECK_EQ_INT(f.metadata_kind, WSYNC_ST_METADATA_OBJECT);
            CHECK_EQ_INT(f.n_tensors, 0);
            done(&b, &f);
        }
    }
    TEST_END();
}

static void test_accept_utf8_boundaries(void)
{
    blob b;
    wsync_st_file f;
    TEST_BEGIN("accept: UTF-8 boundary code points (U+0080, U+07FF, U+D7FF, U+E000, U+FFFF, U+10000, U+10FFFF)");
    {
        static const char h[] = "{\"\xC2\x80\xDF\xBF\":" ENTRY("U8", "[1]", "[0,1]")
            ",\"\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF\":" ENTRY("U8", "[1]", "[1,2]")
            ",\"\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\":" ENTRY("U8", "[1]", "[2,3]")
            ",\"\\u0080\\u07ff\\ud7ff\\ue000\\uffff\\ud800\\udc00\\udbff\\udfff\":" ENTRY("U8", "[1]", "[3,4]")
            ",\"a\":" ENTRY("U8", "[1]", "[4,5]") ",\"a\\u0000\":" ENTRY("U8", "[1]", "[5,6]") "}";
        if (accept(h, sizeof h - 1, 6, &b, &f)) {
            CHECK_EQ_INT(f.n_tensors, 6);
            CHECK(name_is(&f.tensors[3], "\xC2\x80\xDF\xBF\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF",
                          21));
            CHECK(wsync_st_find_n(&f, "a", 1) == &f.tensors[4]);
            CHECK(wsync_st_find_n(&f, "a\0", 2) == &f.tensors[5]);
            done(&b, &f);
        }
    }
    TEST_END();

    TEST_BEGIN("utf8: the error offset points at the bad byte");
    {
        static const char h[] = "{\"ab\x80\":" ENTRY("U8", "[1]", "[0,1]") "}";
        wsync_error err;
        blob bb = mkfile(h, 1);
        CHECK_CODE(parse_ex(bb.p, bb.size, NULL, NULL, &err), WSYNC_ERR_INVALID_UTF8);
        CHECK_EQ_U64(err.offset, 8 + 4);
        blob_free(&bb);
    }
    TEST_END();
}

/* 100k tensors, keys in a scrambled order relative to their offsets. */
static void test_accept_many(void)
{
    size_t n = 100000, i, o = 0, cap = n * 96 + 16;
    char *h = (char *)malloc(cap);
    blob b;
    wsync_st_file f;
    TEST_BEGIN("accept: a 100k-tensor header");
    if (!h) exit(2);
    h[o++] = '{';
    for (i = 0; i < n; i++) {
        size_t k = (i * 7919) % n; /* 7919 is prime: a permutation */
        o += (size_t)snprintf(h + o, cap - o,
                              "%s\"layer.%zu.weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", k, k, k + 1);
    }
    h[o++] = '}';
    if (accept(h, o, n, &b, &f)) {
        int ok = 1;
        CHECK_EQ_INT(f.n_tensors, n);
        for (i = 0; i < n && ok; i++) {
            char nm[48];
            const wsync_st_tensor *t;
            snprintf(nm, sizeof nm, "layer.%zu.weight", i);
            t = wsync_st_find(&f, nm);
            ok = t == &f.tensors[i] && t->begin == i && t->data[0] == data_byte(i);
        }
        CHECK_MSG(ok, "tensor %zu", i - 1);
        check_rewrite(&f, "100k tensors", NULL);
        done(&b, &f);
    }
    free(h);
    TEST_END();
}

/* ---------------------------------------------------------------------
   4. The writer
   --------------------------------------------------------------------- */

static uint64_t le64_at(const uint8_t *p)
{
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Writes in one call; checks write_size and parses the result into *f
   (the caller frees f and buf). */
static wsync_result write_parse(const wsync_st_tensor_desc *d, size_t n, const wsync_st_kv *meta, size_t nm,
                                dynbuf *buf, wsync_st_file *f)
{
    wsync_error err;
    wsync_result r;
    uint64_t want = 0;
    memset(buf, 0, sizeof *buf);
    r = wsync_st_write_size(d, n, meta, nm, &want, &err);
    CHECK_MSG(r == WSYNC_OK, "write_size: %s %s", wsync_result_name(r), err.message);
    r = wsync_st_write(d, n, meta, nm, dynbuf_sink, buf, NULL, &err);
    CHECK_MSG(r == WSYNC_OK, "write: %s %s", wsync_result_name(r), err.message);
    if (r != WSYNC_OK) return r;
    CHECK_MSG(buf->len == want, "wrote %zu, write_size %llu", buf->len, (unsigned long long)want);
    CHECK(buf->len >= 8 && le64_at(buf->p) % 8 == 0);
    r = parse_ex(buf->p, buf->len, NULL, f, &err);
    CHECK_MSG(r == WSYNC_OK, "reparse: %s %s", wsync_result_name(r), err.message);
    return r;
}

static void test_writer_padding(void)
{
    static const uint8_t bytes[4] = {1, 2, 3, 4};
    char name[40];
    size_t len;
    TEST_BEGIN("writer: header padded with spaces to a multiple of 8 for every name length 1..32");
    for (len = 1; len <= 32; len++) {
        uint64_t shape[1] = {4};
        wsync_st_tensor_desc d;
        dynbuf buf;
        wsync_st_file f;
        memset(&d, 0, sizeof d);
        memset(name, 'n', len);
        name[len] = 0;
        d.name = name;
        d.dtype = WSYNC_DTYPE_U8;
        d.rank = 1;
        d.shape = shape;
        d.data = bytes;
        d.nbytes = 4;
        if (write_parse(&d, 1, NULL, 0, &buf, &f) == WSYNC_OK) {
            uint64_t n = le64_at(buf.p);
            size_t k = (size_t)(8 + n);
            CHECK_EQ_U64(n % 8, 0);
            while (k > 8 && buf.p[k - 1] == ' ') k--;
            CHECK(buf.p[8] == '{' && buf.p[k - 1] == '}' && 8 + n - k < 8);
            CHECK(buf.len == 8 + n + 4 && memcmp(buf.p + 8 + n, bytes, 4) == 0);
            CHECK(f.n_tensors == 1 && name_is(&f.tensors[0], name, len));
            CHECK_EQ_INT(f.metadata_kind, WSYNC_ST_METADATA_ABSENT);
            wsync_st_free(&f);
        }
        dynbuf_free(&buf);
    }
    TEST_END();

    TEST_BEGIN("writer: no tensors, no metadata -> {} padded to 8");
    {
        dynbuf buf;
        wsync_st_file f;
        if (write_parse(NULL, 0, NULL, 0, &buf, &f) == WSYNC_OK) {
            CHECK_EQ_INT(buf.len, 16);
            CHECK(memcmp(buf.p + 8, "{}      ", 8) == 0);
            CHECK_EQ_INT(f.n_tensors, 0);
            wsync_st_free(&f);
        }
        dynbuf_free(&buf);
    }
    TEST_END();

    TEST_BEGIN("writer: a non-NULL metadata pointer with 0 entries writes {}");
    {
        dynbuf buf;
        wsync_st_file f;
        if (write_parse(NULL, 0, no_kv, 0, &buf, &f) == WSYNC_OK) {
            CHECK_EQ_INT(f.metadata_kind, WSYNC_ST_METADATA_OBJECT);
            CHECK_EQ_INT(f.n_metadata, 0);
            wsync_st_free(&f);
        }
        dynbuf_free(&buf);
    }
    TEST_END();
}

/* Names and metadata that need escaping, sub-byte and zero-size tensors. */
static const char *const esc_names[] = {
    "q\"uote", "back\\slash", "nl\n", "tab\t", "ctl\x01\x1f", "del\x7f", "caf\xC3\xA9",
    "\xF0\x9F\x98\x80", "sl/ash", "a\0b", "", "__metadata", "__metadata___", "\\u0041",
};
static const size_t esc_lens[] = {6, 10, 3, 4, 5, 4, 5, 4, 6, 3, 0, 10, 13, 6};

typedef struct gen_file {
    wsync_st_tensor_desc d[16];
    uint64_t shapes[16][2];
    uint8_t data[512];
    wsync_st_kv meta[4];
    size_t n, nm;
} gen_file;

static void gen_escaped(gen_file *g)
{
    size_t i, off = 0;
    memset(g, 0, sizeof *g);
    for (i = 0; i < sizeof g->data; i++) g->data[i] = (uint8_t)(i * 13 + 5);
    g->n = sizeof esc_names / sizeof esc_names[0];
    for (i = 0; i < g->n; i++) {
        wsync_st_tensor_desc *d = &g->d[i];
        d->name = esc_names[i];
        d->name_len = esc_lens[i];
        switch (i % 4) {
        case 0: /* F4 [2, 3]: 3 bytes */
            d->dtype = WSYNC_DTYPE_F4;
            g->shapes[i][0] = 2;
            g->shapes[i][1] = 3;
            d->rank = 2;
            d->nbytes = 3;
            break;
        case 1: /* zero-size */
            d->dtype = WSYNC_DTYPE_F32;
            g->shapes[i][0] = 0;
            d->rank = 1;
            d->nbytes = 0;
            break;
        case 2: /* scalar */
            d->dtype = WSYNC_DTYPE_BF16;
            d->rank = 0;
            d->nbytes = 2;
            break;
        default:
            d->dtype = WSYNC_DTYPE_F6_E3M2;
            g->shapes[i][0] = 4;
            g->shapes[i][1] = 2;
            d->rank = 2;
            d->nbytes = 6;
        }
        d->shape = d->rank ? g->shapes[i] : NULL;
        d->data = g->data + off;
        off += (size_t)d->nbytes;
    }
    g->nm = 4;
    g->meta[0].key = "format";
    g->meta[0].value = "pt";
    g->meta[1].key = "q\"\\\n\x01";
    g->meta[1].value = "caf\xC3\xA9 \xF0\x9F\x98\x80";
    g->meta[2].key = "nul";
    g->meta[2].value = "a\0b";
    g->meta[2].value_len = 3;
    g->meta[3].key = "empty";
    g->meta[3].value = "";
}

/* gen_escaped's file, written into out (zeroed first): the write's result. */
static wsync_result gen_escaped_file(gen_file *g, dynbuf *out)
{
    wsync_error err;
    gen_escaped(g);
    memset(out, 0, sizeof *out);
    return wsync_st_write(g->d, g->n, g->meta, g->nm, dynbuf_sink, out, NULL, &err);
}

static void test_writer_escaping(void)
{
    gen_file g;
    dynbuf buf;
    wsync_st_file f;
    size_t i;
    gen_escaped(&g);
    TEST_BEGIN("writer: names and metadata needing JSON escaping round-trip");
    if (write_parse(g.d, g.n, g.meta, g.nm, &buf, &f) == WSYNC_OK) {
        CHECK_EQ_INT(f.n_tensors, g.n);
        for (i = 0; i < g.n && i < f.n_tensors; i++) {
            const wsync_st_tensor *t = &f.tensors[i];
            CHECK_MSG(name_is(t, g.d[i].name, g.d[i].name_len), "tensor %zu", i);
            CHECK(wsync_st_find_n(&f, g.d[i].name, g.d[i].name_len) == t);
            CHECK_EQ_INT(t->dtype, g.d[i].dtype);
            CHECK_EQ_INT(t->rank, g.d[i].rank);
            CHECK(t->rank == 0 || memcmp(t->shape, g.d[i].shape, t->rank * 8) == 0);
            CHECK_EQ_U64(t->end - t->begin, g.d[i].nbytes);
            CHECK(g.d[i].nbytes == 0 || memcmp(t->data, g.d[i].data, (size_t)g.d[i].nbytes) == 0);
        }
        CHECK_EQ_INT(f.metadata_kind, WSYNC_ST_METADATA_OBJECT);
        CHECK_EQ_INT(f.n_metadata, 4);
        for (i = 0; i < 4 && i < f.n_metadata; i++) {
            size_t vl = g.meta[i].value_len ? g.meta[i].value_len : strlen(g.meta[i].value);
            CHECK_MSG(strcmp(f.metadata[i].key, g.meta[i].key) == 0 && f.metadata[i].value_len == vl &&
                          memcmp(f.metadata[i].value, g.meta[i].value, vl) == 0,
                      "metadata %zu", i);
        }
        CHECK(wsync_st_metadata_get(&f, "format") && strcmp(wsync_st_metadata_get(&f, "format"), "pt") == 0);
        /* the header is plain JSON: no raw control bytes */
        for (i = 8; i < 8 + f.header_len; i++)
            if (buf.p[i] < 0x20) break;
        CHECK_MSG(i == 8 + f.header_len, "raw control byte 0x%02x at %zu", buf.p[i], i);
        check_rewrite(&f, "escaped", NULL);
        wsync_st_free(&f);
    }
    dynbuf_free(&buf);
    TEST_END();
}

static void test_writer_streaming(void)
{
    static const size_t chunks[] = {1, 2, 3, 5, 7, 0, 11, 13, 64, 1, 97};
    gen_file g;
    dynbuf one, st;
    wsync_st_writer w;
    wsync_error err;
    wsync_result r;
    wsync_st_tensor_desc d[16];
    size_t i, total = 0, pos = 0, ci = 0;
    gen_escaped(&g);
    for (i = 0; i < g.n; i++) total += (size_t)g.d[i].nbytes;
    memcpy(d, g.d, sizeof d);
    for (i = 0; i < g.n; i++) d[i].data = NULL; /* streamed later */

    TEST_BEGIN("writer: streaming begin/data/end in odd chunk sizes equals the one-call output");
    memset(&one, 0, sizeof one);
    memset(&st, 0, sizeof st);
    CHECK_CODE(wsync_st_write(g.d, g.n, g.meta, g.nm, dynbuf_sink, &one, NULL, &err), WSYNC_OK);
    r = wsync_st_writer_begin(&w, d, g.n, g.meta, g.nm, dynbuf_sink, &st, NULL, &err);
    CHECK_CODE(r, WSYNC_OK);
    if (r == WSYNC_OK) {
        CHECK_EQ_U64(w.data_len, total);
        CHECK_EQ_U64(w.header_len % 8, 0);
        CHECK_EQ_INT(st.len, 8 + w.header_len);
        while (pos < total) {
            size_t c = chunks[ci++ % (sizeof chunks / sizeof chunks[0])];
            if (c > total - pos) c = total - pos;
            CHECK_CODE(wsync_st_writer_data(&w, g.data + pos, c, &err), WSYNC_OK);
            pos += c;
        }
        CHECK_CODE(wsync_st_writer_data(&w, NULL, 0, &err), WSYNC_OK);
        CHECK_CODE(wsync_st_writer_end(&w, &err), WSYNC_OK);
        CHECK_EQ_INT(st.len, one.len);
        CHECK(st.len == one.len && memcmp(st.p, one.p, one.len) == 0);
    }
    TEST_END();

    TEST_BEGIN("writer: streaming too much data -> INVALID_ARGUMENT, then the writer stays failed");
    st.len = 0;
    r = wsync_st_writer_begin(&w, d, g.n, g.meta, g.nm, dynbuf_sink, &st, NULL, &err);
    CHECK_CODE(r, WSYNC_OK);
    if (r == WSYNC_OK) {
        CHECK_CODE(wsync_st_writer_data(&w, g.data, total - 1, &err), WSYNC_OK);
        CHECK_CODE(wsync_st_writer_data(&w, g.data, 2, &err), WSYNC_ERR_INVALID_ARGUMENT);
        CHECK_CODE(err.code, WSYNC_ERR_INVALID_ARGUMENT);
        CHECK(err.message[0] != 0);
        CHECK_CODE(wsync_st_writer_data(&w, g.data, 1, &err), WSYNC_ERR_INVALID_ARGUMENT);
        CHECK_CODE(wsync_st_writer_end(&w, &err), WSYNC_ERR_INVALID_ARGUMENT);
    }
    TEST_END();

    TEST_BEGIN("writer: streaming one byte past the end after exactly enough -> INVALID_ARGUMENT");
    st.len = 0;
    r = wsync_st_writer_begin(&w, d, g.n, g.meta, g.nm, dynbuf_sink, &st, NULL, &err);
    if (r == WSYNC_OK) {
        CHECK_CODE(wsync_st_writer_data(&w, g.data, total, &err), WSYNC_OK);
        CHECK_CODE(wsync_st_writer_data(&w, g.data, 1, &err), WSYNC_ERR_INVALID_ARGUMENT);
        CHECK_CODE(wsync_st_writer_end(&w, &err), WSYNC_ERR_INVALID_ARGUMENT);
    } else {
        CHECK(0);
    }
    TEST_END();

    TEST_BEGIN("writer: streaming too little data -> INVALID_ARGUMENT at end");
    st.len = 0;
    r = wsync_st_writer_begin(&w, d, g.n, g.meta, g.nm, dynbuf_sink, &st, NULL, &err);
    if (r == WSYNC_OK) {
        CHECK_CODE(wsync_st_writer_data(&w, g.data, total - 1, &err), WSYNC_OK);
        CHECK_CODE(wsync_st_writer_end(&w, &err), WSYNC_ERR_INVALID_ARGUMENT);
        CHECK(err.message[0] != 0);
        CHECK_CODE(wsync_st_writer_end(&w, &err), WSYNC_ERR_INVALID_ARGUMENT);
    } else {
        CHECK(0);
    }
    st.len = 0;
    r = wsync_st_writer_begin(&w, d, g.n, g.meta, g.nm, dynbuf_sink, &st, NULL, &err);
    if (r == WSYNC_OK) CHECK_CODE(wsync_st_writer_end(&w, &err), WSYNC_ERR_INVALID_ARGUMENT);
    TEST_END();

    TEST_BEGIN("writer: wsync_st_write with NULL data and nonzero nbytes -> INVALID_ARGUMENT");
    st.len = 0;
    st.calls = 0;
    CHECK_CODE(wsync_st_write(d, g.n, NULL, 0, dynbuf_sink, &st, NULL, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(st.calls, 0);
    TEST_END();

    TEST_BEGIN("writer: NULL sink or writer -> INVALID_ARGUMENT");
    CHECK_CODE(wsync_st_write(g.d, g.n, NULL, 0, NULL, NULL, NULL, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(wsync_st_writer_begin(NULL, g.d, g.n, NULL, 0, dynbuf_sink, &st, NULL, &err),
               WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(wsync_st_writer_data(NULL, g.data, 1, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(wsync_st_writer_end(NULL, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(wsync_st_write_size(g.d, g.n, NULL, 0, NULL, &err), WSYNC_ERR_INVALID_ARGUMENT);
    TEST_END();

    dynbuf_free(&one);
    dynbuf_free(&st);
}

static void test_writer_sinks(void)
{
    gen_file g;
    dynbuf ref, buf;
    wsync_error err;
    wsync_result r;
    long k, calls;
    gen_escaped_file(&g, &ref);
    calls = ref.calls;

    TEST_BEGIN("writer: a sink failing at every call k -> SINK");
    CHECK(calls >= 2);
    for (k = 1; k <= calls; k++) {
        memset(&buf, 0, sizeof buf);
        buf.fail_at = k;
        r = wsync_st_write(g.d, g.n, g.meta, g.nm, dynbuf_sink, &buf, NULL, &err);
        CHECK_MSG(r == WSYNC_ERR_SINK, "call %ld: %s", k, wsync_result_name(r));
        CHECK(err.code == WSYNC_ERR_SINK && err.message[0] != 0);
        CHECK_MSG(buf.calls == k, "sink called %ld times after failing at %ld", buf.calls, k);
        dynbuf_free(&buf);
    }
    TEST_END();

    TEST_BEGIN("writer: a sink failing in streaming data -> SINK, then the writer stays failed");
    {
        wsync_st_writer w;
        memset(&buf, 0, sizeof buf);
        buf.fail_at = 2;
        r = wsync_st_writer_begin(&w, g.d, g.n, g.meta, g.nm, dynbuf_sink, &buf, NULL, &err);
        CHECK_CODE(r, WSYNC_OK);
        if (r == WSYNC_OK) {
            CHECK_CODE(wsync_st_writer_data(&w, g.data, 4, &err), WSYNC_ERR_SINK);
            CHECK_CODE(wsync_st_writer_data(&w, g.data, 4, &err), WSYNC_ERR_INVALID_ARGUMENT);
            CHECK_CODE(wsync_st_writer_end(&w, &err), WSYNC_ERR_INVALID_ARGUMENT);
        }
        dynbuf_free(&buf);
    }
    TEST_END();

    TEST_BEGIN("writer: wsync_buffer_sink fills an exact buffer and fails one byte short");
    {
        wsync_buffer wb;
        uint64_t size = 0;
        uint8_t *p;
        CHECK_CODE(wsync_st_write_size(g.d, g.n, g.meta, g.nm, &size, &err), WSYNC_OK);
        CHECK_EQ_U64(size, ref.len);
        p = (uint8_t *)malloc((size_t)size);
        wb.bytes = p;
        wb.cap = (size_t)size;
        wb.len = 0;
        CHECK_CODE(wsync_st_write(g.d, g.n, g.meta, g.nm, wsync_buffer_sink, &wb, NULL, &err), WSYNC_OK);
        CHECK(wb.len == size && memcmp(p, ref.p, ref.len) == 0);
        wb.cap = (size_t)size - 1;
        wb.len = 0;
        CHECK_CODE(wsync_st_write(g.d, g.n, g.meta, g.nm, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_SINK);
        wb.cap = 8;
        wb.len = 0;
        CHECK_CODE(wsync_st_write(g.d, g.n, g.meta, g.nm, wsync_buffer_sink, &wb, NULL, &err), WSYNC_ERR_SINK);
        CHECK_EQ_INT(wb.len, 0);
        free(p);
    }
    TEST_END();
    dynbuf_free(&ref);
}

/* The writer refuses what the reader would reject, before anything reaches
   the sink. */
static void test_writer_refuses(void)
{
    static const uint64_t s4[1] = {4}, s3[1] = {3}, s2[2] = {4294967296u, 4294967296u};
    static const uint64_t s65[65] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4};
    static const uint8_t bytes[8] = {0};
    static const struct {
        const char *what;
        const char *name1;
        size_t len1;
        const char *name2; /* NULL: one tensor */
        size_t len2;
        wsync_dtype dtype;
        uint32_t rank;
        const uint64_t *shape;
        uint64_t nbytes;
        int meta; /* 1: duplicate metadata keys, 2: invalid UTF-8 metadata value, 3: key */
        wsync_result code; /* WSYNC_RESULT_COUNT: any failure */
    } cases[] = {
        {"duplicate names", "w", 0, "w", 0, WSYNC_DTYPE_U8, 1, s4, 4, 0, WSYNC_ERR_DUPLICATE_KEY},
        {"duplicate names by name_len", "ab", 1, "a", 0, WSYNC_DTYPE_U8, 1, s4, 4, 0, WSYNC_ERR_DUPLICATE_KEY},
        {"duplicate names holding NUL", "a\0b", 3, "a\0b", 3, WSYNC_DTYPE_U8, 1, s4, 4, 0,
         WSYNC_ERR_DUPLICATE_KEY},
        {"__metadata__ as a name", "__metadata__", 0, NULL, 0, WSYNC_DTYPE_U8, 1, s4, 4, 0, WSYNC_RESULT_COUNT},
        {"invalid UTF-8 name (FF)", "w\xFF", 0, NULL, 0, WSYNC_DTYPE_U8, 1, s4, 4, 0, WSYNC_ERR_INVALID_UTF8},
        {"invalid UTF-8 name (encoded surrogate)", "\xED\xA0\x80", 0, NULL, 0, WSYNC_DTYPE_U8, 1, s4, 4, 0,
         WSYNC_ERR_INVALID_UTF8},
        {"invalid UTF-8 name (overlong NUL)", "\xC0\x80", 0, NULL, 0, WSYNC_DTYPE_U8, 1, s4, 4, 0,
         WSYNC_ERR_INVALID_UTF8},
        {"invalid UTF-8 name (truncated by name_len)", "\xC3\xA9", 1, NULL, 0, WSYNC_DTYPE_U8, 1, s4, 4, 0,
         WSYNC_ERR_INVALID_UTF8},
        {"nbytes too small", "w", 0, NULL, 0, WSYNC_DTYPE_F32, 1, s4, 8, 0, WSYNC_ERR_SIZE_MISMATCH},
        {"nbytes too large", "w", 0, NULL, 0, WSYNC_DTYPE_U8, 1, s4, 5, 0, WSYNC_ERR_SIZE_MISMATCH},
        {"nbytes for a scalar", "w", 0, NULL, 0, WSYNC_DTYPE_F64, 0, NULL, 4, 0, WSYNC_ERR_SIZE_MISMATCH},
        {"F4 [3] (12 bits)", "w", 0, NULL, 0, WSYNC_DTYPE_F4, 1, s3, 2, 0, WSYNC_ERR_SIZE_MISMATCH},
        {"unknown dtype 0", "w", 0, NULL, 0, WSYNC_DTYPE_INVALID, 1, s4, 4, 0, WSYNC_ERR_UNKNOWN_DTYPE},
        {"unknown dtype COUNT", "w", 0, NULL, 0, WSYNC_DTYPE_COUNT, 1, s4, 4, 0, WSYNC_ERR_UNKNOWN_DTYPE},
        {"rank 65", "w", 0, NULL, 0, WSYNC_DTYPE_U8, 65, s65, 4, 0, WSYNC_ERR_RANK_TOO_LARGE},
        {"shape product overflow", "w", 0, NULL, 0, WSYNC_DTYPE_U8, 2, s2, 0, 0, WSYNC_ERR_OVERFLOW},
        {"duplicate metadata keys", "w", 0, NULL, 0, WSYNC_DTYPE_U8, 1, s4, 4, 1, WSYNC_ERR_DUPLICATE_KEY},
        {"invalid UTF-8 metadata value", "w", 0, NULL, 0, WSYNC_DTYPE_U8, 1, s4, 4, 2, WSYNC_ERR_INVALID_UTF8},
        {"invalid UTF-8 metadata key", "w", 0, NULL, 0, WSYNC_DTYPE_U8, 1, s4, 4, 3, WSYNC_ERR_INVALID_UTF8},
    };
    size_t i;
    char title[160];
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wsync_st_tensor_desc d[2];
        wsync_st_kv kv[2];
        dynbuf buf;
        wsync_st_writer w;
        wsync_error err;
        wsync_result r;
        uint64_t size = 0;
        size_t n = cases[i].name2 ? 2 : 1;
        snprintf(title, sizeof title, "writer refuses %s -> %s", cases[i].what,
                 cases[i].code == WSYNC_RESULT_COUNT ? "an error" : wsync_result_name(cases[i].code));
        TEST_BEGIN(title);
        memset(d, 0, sizeof d);
        memset(kv, 0, sizeof kv);
        memset(&buf, 0, sizeof buf);
        d[0].name = cases[i].name1;
        d[0].name_len = cases[i].len1;
        d[0].dtype = cases[i].dtype;
        d[0].rank = cases[i].rank;
        d[0].shape = cases[i].shape;
        d[0].data = bytes;
        d[0].nbytes = cases[i].nbytes;
        d[1] = d[0];
        d[1].name = cases[i].name2;
        d[1].name_len = cases[i].len2;
        kv[0].key = "k";
        kv[0].value = "v";
        kv[1].key = cases[i].meta == 1 ? "k" : cases[i].meta == 3 ? "k\xC3" : "j";
        kv[1].value = cases[i].meta == 2 ? "\xF4\x90\x80\x80" : "v";
        r = wsync_st_write(d, n, kv, 2, dynbuf_sink, &buf, NULL, &err);
        if (cases[i].code == WSYNC_RESULT_COUNT) CHECK_MSG(r != WSYNC_OK, "%s", "accepted");
        else CHECK_CODE(r, cases[i].code);
        CHECK(err.code == r && err.message[0] != 0);
        CHECK_MSG(buf.calls == 0, "the sink was called %ld times", buf.calls);
        r = wsync_st_write_size(d, n, kv, 2, &size, &err);
        if (cases[i].code == WSYNC_RESULT_COUNT) CHECK(r != WSYNC_OK);
        else CHECK_CODE(r, cases[i].code);
        r = wsync_st_writer_begin(&w, d, n, kv, 2, dynbuf_sink, &buf, NULL, &err);
        if (cases[i].code == WSYNC_RESULT_COUNT) CHECK(r != WSYNC_OK);
        else CHECK_CODE(r, cases[i].code);
        CHECK(buf.calls == 0);
        CHECK_CODE(wsync_st_writer_data(&w, bytes, 1, &err), WSYNC_ERR_INVALID_ARGUMENT);
        CHECK_CODE(wsync_st_writer_end(&w, &err), WSYNC_ERR_INVALID_ARGUMENT);
        dynbuf_free(&buf);
        TEST_END();
    }
}

static void test_writer_args(void)
{
    static const uint64_t big[1] = {(uint64_t)1 << 63}, max[1] = {UINT64_MAX};
    static const uint8_t bytes[4] = {0};
    wsync_st_tensor_desc d[2];
    wsync_st_kv kv[1];
    dynbuf buf;
    wsync_error err;
    uint64_t size = 0;
    memset(d, 0, sizeof d);
    memset(kv, 0, sizeof kv);
    memset(&buf, 0, sizeof buf);

    TEST_BEGIN("writer: total data size overflowing 64 bits -> OVERFLOW");
    d[0].name = "a";
    d[0].dtype = WSYNC_DTYPE_U8;
    d[0].rank = 1;
    d[0].shape = big;
    d[0].nbytes = (uint64_t)1 << 63;
    d[1] = d[0];
    d[1].name = "b";
    CHECK_CODE(wsync_st_write_size(d, 2, NULL, 0, &size, &err), WSYNC_ERR_OVERFLOW);
    d[0].shape = max;
    d[0].nbytes = UINT64_MAX;
    CHECK_CODE(wsync_st_write_size(d, 1, NULL, 0, &size, &err), WSYNC_ERR_OVERFLOW);
    TEST_END();

    TEST_BEGIN("writer: missing tensors, metadata, names or shapes are refused");
    d[0].shape = NULL;
    d[0].rank = 1;
    d[0].nbytes = 4;
    d[0].data = bytes;
    CHECK(wsync_st_write(d, 1, NULL, 0, dynbuf_sink, &buf, NULL, &err) != WSYNC_OK);
    d[0].shape = big;
    d[0].name = NULL;
    CHECK_CODE(wsync_st_write_size(d, 1, NULL, 0, &size, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(wsync_st_write_size(NULL, 1, NULL, 0, &size, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(wsync_st_write_size(NULL, 0, NULL, 1, &size, &err), WSYNC_ERR_INVALID_ARGUMENT);
    kv[0].key = "k";
    CHECK_CODE(wsync_st_write_size(NULL, 0, kv, 1, &size, &err), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(buf.calls, 0);
    TEST_END();

    TEST_BEGIN("writer: a header above 100000000 bytes -> HEADER_TOO_LARGE");
    {
        size_t n = WSYNC_ST_MAX_HEADER_SIZE;
        char *name = (char *)malloc(n + 1);
        static const uint64_t one[1] = {1};
        if (!name) exit(2);
        memset(name, 'x', n);
        name[n] = 0;
        d[0].name = name;
        d[0].name_len = n;
        d[0].dtype = WSYNC_DTYPE_U8;
        d[0].rank = 1;
        d[0].shape = one;
        d[0].nbytes = 1;
        d[0].data = bytes;
        CHECK_CODE(wsync_st_write_size(d, 1, NULL, 0, &size, &err), WSYNC_ERR_HEADER_TOO_LARGE);
        CHECK_CODE(wsync_st_write(d, 1, NULL, 0, dynbuf_sink, &buf, NULL, &err), WSYNC_ERR_HEADER_TOO_LARGE);
        CHECK_EQ_INT(buf.calls, 0);
        free(name);
    }
    TEST_END();
    dynbuf_free(&buf);
}

/* Every file the writer produces is valid, and each strict prefix of it, and
   each cut of its header, is rejected. */
static void test_generated_prefixes(void)
{
    gen_file g;
    dynbuf buf;
    TEST_BEGIN("truncation: every prefix of a generated file with escapes and metadata is rejected");
    CHECK_CODE(gen_escaped_file(&g, &buf), WSYNC_OK);
    check_prefixes(buf.p, buf.len, 0, buf.len, 1, "generated");
    check_header_cuts(buf.p, buf.len, "generated");
    dynbuf_free(&buf);
    TEST_END();

    TEST_BEGIN("truncation: every prefix of a hand-written header with whitespace and unknown fields");
    {
        static const char h[] = " \n{\"__metadata__\" : {\"k\":\"v\\u00e9\"}, \"t\\u0041\":{\"x\":[1,{\"y\":null}],"
                                "\"dtype\":\"F32\",\"shape\":[ 2 ],\"data_offsets\":[0,8], \"z\":-1.5e+3},"
                                "\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[8,9]}}   ";
        blob b = mkfile(h, 9);
        CHECK_CODE(parse_blob(&b), WSYNC_OK);
        check_prefixes(b.p, b.size, 0, b.size, 1, "hand-written");
        check_header_cuts(b.p, b.size, "hand-written");
        blob_free(&b);
    }
    TEST_END();
}

/* ---------------------------------------------------------------------
   5. Allocation: no leaks, and failure at every allocation
   --------------------------------------------------------------------- */

static void test_alloc_parse(void)
{
    gen_file g;
    dynbuf buf;
    wsync_error err;
    long k;
    gen_escaped_file(&g, &buf);

    TEST_BEGIN("alloc: parse with a counting allocator frees everything");
    {
        counting c;
        wsync_st_options opt;
        wsync_st_file f;
        memset(&opt, 0, sizeof opt);
        opt.allocator = counting_fresh(&c, 0);
        CHECK_CODE(wsync_st_parse(buf.p, buf.len, &opt, &f, &err), WSYNC_OK);
        CHECK(c.count >= 1 && c.live >= 1);
        wsync_st_free(&f);
        CHECK_EQ_INT(c.live, 0);
        CHECK(f.tensors == NULL && f.block == NULL);
        wsync_st_free(&f); /* freeing twice is harmless after the reset */
        CHECK_EQ_INT(c.live, 0);
    }
    TEST_END();

    TEST_BEGIN("alloc: parse failing at every allocation k -> OUT_OF_MEMORY, no leak");
    for (k = 1; k < 100; k++) {
        counting c;
        wsync_st_options opt;
        wsync_st_file f;
        wsync_result r;
        memset(&opt, 0, sizeof opt);
        opt.allocator = counting_fresh(&c, k);
        memset(&f, 0x5A, sizeof f);
        r = wsync_st_parse(buf.p, buf.len, &opt, &f, &err);
        if (r == WSYNC_OK) {
            CHECK(k > 1); /* at least one allocation was failed first */
            CHECK(c.count == k - 1);
            wsync_st_free(&f);
            CHECK_EQ_INT(c.live, 0);
            break;
        }
        CHECK_MSG(r == WSYNC_ERR_OUT_OF_MEMORY, "k=%ld: %s", k, wsync_result_name(r));
        CHECK(err.code == r && err.message[0] != 0);
        CHECK_MSG(c.live == 0, "k=%ld: %ld leaked", k, c.live);
        CHECK(all_zero(&f, sizeof f));
    }
    CHECK(k < 100);
    TEST_END();
    dynbuf_free(&buf);
}

static void test_alloc_write(void)
{
    gen_file g;
    dynbuf ref;
    wsync_error err;
    long k;
    int which;
    gen_escaped_file(&g, &ref);

    TEST_BEGIN("alloc: write with a counting allocator frees everything");
    {
        counting c;
        wsync_st_write_options opt;
        dynbuf buf;
        memset(&opt, 0, sizeof opt);
        memset(&buf, 0, sizeof buf);
        opt.allocator = counting_fresh(&c, 0);
        CHECK_CODE(wsync_st_write(g.d, g.n, g.meta, g.nm, dynbuf_sink, &buf, &opt, &err), WSYNC_OK);
        CHECK(c.count >= 1);
        CHECK_EQ_INT(c.live, 0);
        CHECK(buf.len == ref.len && memcmp(buf.p, ref.p, ref.len) == 0);
        dynbuf_free(&buf);
    }
    TEST_END();

    for (which = 0; which < 2; which++) {
        TEST_BEGIN(which ? "alloc: writer_begin failing at every allocation k -> OUT_OF_MEMORY, no leak, nothing written"
                         : "alloc: write failing at every allocation k -> OUT_OF_MEMORY, no leak, nothing written");
        for (k = 1; k < 100; k++) {
            counting c;
            wsync_st_write_options opt;
            wsync_st_writer w;
            dynbuf buf;
            wsync_result r;
            memset(&opt, 0, sizeof opt);
            memset(&buf, 0, sizeof buf);
            opt.allocator = counting_fresh(&c, k);
            if (which) {
                r = wsync_st_writer_begin(&w, g.d, g.n, g.meta, g.nm, dynbuf_sink, &buf, &opt, &err);
                if (r == WSYNC_OK) {
                    size_t i;
                    for (i = 0; i < g.n; i++)
                        if (g.d[i].nbytes) wsync_st_writer_data(&w, g.d[i].data, (size_t)g.d[i].nbytes, &err);
                    r = wsync_st_writer_end(&w, &err);
                }
            } else {
                r = wsync_st_write(g.d, g.n, g.meta, g.nm, dynbuf_sink, &buf, &opt, &err);
            }
            if (r == WSYNC_OK) {
                CHECK(k > 1);
                CHECK_EQ_INT(c.live, 0);
                CHECK(buf.len == ref.len && memcmp(buf.p, ref.p, ref.len) == 0);
                dynbuf_free(&buf);
                break;
            }
            CHECK_MSG(r == WSYNC_ERR_OUT_OF_MEMORY, "k=%ld: %s", k, wsync_result_name(r));
            CHECK(err.code == r && err.message[0] != 0);
            CHECK_MSG(c.live == 0, "k=%ld: %ld leaked", k, c.live);
            CHECK_MSG(buf.calls == 0, "k=%ld: sink called", k);
            dynbuf_free(&buf);
        }
        CHECK(k < 100);
        TEST_END();
    }

    TEST_BEGIN("alloc: a refused write frees what it allocated");
    {
        counting c;
        wsync_st_write_options opt;
        wsync_st_tensor_desc d[3];
        dynbuf buf;
        memset(&opt, 0, sizeof opt);
        memset(&buf, 0, sizeof buf);
        opt.allocator = counting_fresh(&c, 0);
        memcpy(d, g.d, sizeof d);
        d[2].name = d[0].name;
        d[2].name_len = d[0].name_len;
        CHECK_CODE(wsync_st_write(d, 3, g.meta, g.nm, dynbuf_sink, &buf, &opt, &err), WSYNC_ERR_DUPLICATE_KEY);
        CHECK_EQ_INT(c.live, 0);
        dynbuf_free(&buf);
    }
    TEST_END();
    dynbuf_free(&ref);
}

/* ---------------------------------------------------------------------
   wsync_st_parse_header: the header from a prefix of the file
   --------------------------------------------------------------------- */

/* A heap copy of bytes[0..len) of exactly len bytes (ASan sees a read past). */
static uint8_t *prefix_copy(const uint8_t *bytes, size_t len)
{
    uint8_t *p = (uint8_t *)malloc(len ? len : 1);
    if (!p) exit(2);
    if (len) memcpy(p, bytes, len);
    return p;
}

/* parse_header's contract on a short prefix: TRUNCATED, *need the bytes
   it needs (above len), the offset len, out zeroed and nothing left live. */
static uint64_t header_need(const uint8_t *bytes, size_t len, uint64_t size, const char *what)
{
    uint8_t *p = prefix_copy(bytes, len);
    wsync_st_file g;
    wsync_st_options o;
    wsync_error e;
    wsync_result r;
    uint64_t need = 12345;
    long live = g_alloc.live;
    memset(&o, 0, sizeof o);
    o.allocator = counting_allocator(&g_alloc);
    memset(&g, 0x5A, sizeof g);
    r = wsync_st_parse_header(p, len, size, &o, &g, &need, &e);
    if (r == WSYNC_ERR_TRUNCATED && need) {
        CHECK_MSG(need > len, "%s: need %llu at %zu", what, (unsigned long long)need, len);
        CHECK_EQ_U64(e.offset, (uint64_t)len);
        CHECK_MSG(strstr(e.message, "header") != NULL, "%s", e.message);
    } else {
        CHECK_EQ_U64(need, 0);
        if (r == WSYNC_OK) wsync_st_free(&g);
    }
    if (r != WSYNC_OK) CHECK(all_zero(&g, sizeof g));
    CHECK_EQ_INT(g_alloc.live, live);
    free(p);
    return r == WSYNC_ERR_TRUNCATED ? need : 0;
}

/* A file read as a program that has only its first bytes would: 8, then
   what it needs. The answer must be wsync_st_parse's on the whole file (the
   code and offset; on success the same tensors and metadata, without data). */
static void check_parse_header(const uint8_t *bytes, size_t size, const char *what)
{
    wsync_st_file f, g;
    wsync_error e0, e;
    wsync_result r0, r;
    uint64_t need = 0, hn = size >= 8 ? wsync__load_le64(bytes) : 0, cut;
    size_t len = size < 8 ? size : 8, steps = 0, k;
    uint8_t *p = NULL;
    memset(&f, 0, sizeof f);
    r0 = wsync_st_parse(bytes, size, NULL, &f, &e0);
    for (;;) {
        free(p);
        p = prefix_copy(bytes, len);
        memset(&g, 0x5A, sizeof g);
        r = wsync_st_parse_header(p, len, size, NULL, &g, &need, &e);
        if (r != WSYNC_ERR_TRUNCATED || !need) break;
        CHECK_MSG(need == 8 + hn && len == 8, "%s: need %llu at %zu", what, (unsigned long long)need, len);
        if (need > size || ++steps > 1) break;
        len = (size_t)need;
    }
    CHECK_MSG(r == r0, "%s: %s, the whole file %s", what, wsync_result_name(r), wsync_result_name(r0));
    if (r != WSYNC_OK) {
        CHECK_EQ_INT(e.code, r);
        CHECK_EQ_U64(e.offset, e0.offset);
        CHECK(all_zero(&g, sizeof g));
    } else if (r0 == WSYNC_OK) {
        CHECK(g.bytes == p);
        CHECK(len == size ? g.data == p + 8 + g.header_len : g.data == NULL);
        CHECK_EQ_U64(g.header_len, f.header_len);
        CHECK_EQ_U64(g.data_len, f.data_len);
        CHECK_EQ_U64(g.size, f.size);
        CHECK_EQ_U64(g.n_tensors, f.n_tensors);
        CHECK_EQ_INT(g.metadata_kind, f.metadata_kind);
        CHECK_EQ_U64(g.n_metadata, f.n_metadata);
        for (k = 0; k < g.n_tensors && k < f.n_tensors; k++) {
            const wsync_st_tensor *a = &g.tensors[k], *b = &f.tensors[k];
            CHECK(a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0);
            CHECK(a->dtype == b->dtype && a->rank == b->rank && a->nelem == b->nelem);
            CHECK(a->rank == 0 || memcmp(a->shape, b->shape, a->rank * sizeof *a->shape) == 0);
            CHECK(a->begin == b->begin && a->end == b->end && a->key_offset == b->key_offset);
            CHECK(len == size ? a->data == g.data + a->begin : a->data == NULL);
            CHECK(wsync_st_find_n(&g, a->name, a->name_len) == a);
        }
        for (k = 0; k < g.n_metadata && k < f.n_metadata; k++)
            CHECK(g.metadata[k].key_len == f.metadata[k].key_len && g.metadata[k].value_len == f.metadata[k].value_len &&
                  strcmp(g.metadata[k].key, f.metadata[k].key) == 0 &&
                  strcmp(g.metadata[k].value, f.metadata[k].value) == 0);
        wsync_st_free(&g);
    }
    if (r0 == WSYNC_OK) wsync_st_free(&f);
    free(p);
    /* every shorter prefix (the first 600 cuts, then a sample): short while
       the header is not all there, then the answer above */
    cut = size >= 8 && hn <= size - 8 ? 8 + hn : 8;
    for (len = 0; len < size; len += len < 600 ? 1 : len / 7) {
        need = header_need(bytes, len, size, what);
        if (len < 8) CHECK_MSG(need == (size < 8 ? 0 : 8), "%s at %zu: need %llu", what, len, (unsigned long long)need);
        else if (len < cut) CHECK_MSG(need == cut, "%s at %zu: need %llu", what, len, (unsigned long long)need);
        else CHECK_MSG(need == 0, "%s at %zu: need %llu", what, len, (unsigned long long)need);
    }
}

static void test_parse_header_files(void)
{
    static const char *dirs[] = {CORPUS_DIR, INVALID_DIR, "fuzz/corpus/st_parse", "fuzz/data/st_parse"};
    char path[512], title[600];
    size_t d, i, total = 0;
    for (d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        char **names;
        size_t n = list_dir(dirs[d], &names);
        snprintf(title, sizeof title, "st_parse_header: a prefix, then what it needs, answers as the whole file: %s",
                 dirs[d]);
        TEST_BEGIN(title);
        for (i = 0; i < n; i++) {
            wsync_mapped map;
            wsync_error err;
            snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
            if (wsync_file_map(path, &map, &err) != WSYNC_OK) continue; /* a folder (README) */
            check_parse_header(map.bytes, (size_t)map.size, names[i]);
            wsync_file_unmap(&map);
            total++;
        }
        TEST_END();
        free_names(names, n);
    }
    TEST_BEGIN("st_parse_header: the files were there");
    CHECK_MSG(total >= 100, "%zu files", total);
    TEST_END();
}

static void test_parse_header_cases(void)
{
    const char *hdr = "{\"__metadata__\":{\"k\":\"v\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    blob b = mkfile(hdr, 8), bad = mkfile(hdr, 7); /* a byte short of its data */
    size_t hl = strlen(hdr);
    wsync_st_file g;
    wsync_st_options o;
    wsync_error e;
    uint64_t need;
    long k;

    TEST_BEGIN("st_parse_header: 8 bytes, then the header: the tensors without data");
    CHECK_CODE(wsync_st_parse_header(b.p, 8, b.size, NULL, &g, &need, &e), WSYNC_ERR_TRUNCATED);
    CHECK_EQ_U64(need, 8 + hl);
    CHECK_EQ_U64(e.offset, 8);
    CHECK_CODE(wsync_st_parse_header(b.p, 8 + hl, b.size, NULL, &g, &need, &e), WSYNC_OK);
    CHECK_EQ_U64(need, 0);
    CHECK_EQ_U64(g.n_tensors, 1);
    CHECK(g.data == NULL && g.tensors[0].data == NULL && g.tensors[0].end == 8);
    CHECK_EQ_STR(wsync_st_metadata_get(&g, "k"), "v");
    wsync_st_free(&g);
    /* need may be NULL: the code alone */
    CHECK_CODE(wsync_st_parse_header(b.p, 3, b.size, NULL, &g, NULL, &e), WSYNC_ERR_TRUNCATED);
    CHECK_EQ_U64(e.offset, 3);
    TEST_END();

    TEST_BEGIN("st_parse_header: data offsets are checked against the file's size");
    CHECK_CODE(wsync_st_parse_header(bad.p, 8 + hl, bad.size, NULL, &g, &need, &e),
               parse_ex(bad.p, bad.size, NULL, NULL, NULL));
    CHECK(need == 0 && e.code != WSYNC_OK && e.message[0]);
    /* the same header in a file 1 byte longer: then it fits */
    CHECK_CODE(wsync_st_parse_header(bad.p, 8 + hl, bad.size + 1, NULL, &g, &need, &e), WSYNC_OK);
    wsync_st_free(&g);
    TEST_END();

    TEST_BEGIN("st_parse_header: limits from the options, said at 8 bytes");
    memset(&o, 0, sizeof o);
    o.max_header_size = hl - 1;
    CHECK_CODE(wsync_st_parse_header(b.p, 8, b.size, &o, &g, &need, &e), WSYNC_ERR_HEADER_TOO_LARGE);
    CHECK_EQ_U64(need, 0);
    o.max_header_size = hl;
    CHECK_CODE(wsync_st_parse_header(b.p, 8, b.size, &o, &g, &need, &e), WSYNC_ERR_TRUNCATED);
    CHECK_EQ_U64(need, 8 + hl);
    TEST_END();

    TEST_BEGIN("st_parse_header: arguments");
    CHECK_CODE(wsync_st_parse_header(b.p, 8, b.size, NULL, NULL, &need, &e), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(wsync_st_parse_header(NULL, 8, b.size, NULL, &g, &need, &e), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_CODE(wsync_st_parse_header(b.p, b.size, b.size - 1, NULL, &g, &need, &e), WSYNC_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(e.message, "wsync_st_parse_header") != NULL, "%s", e.message);
    CHECK(all_zero(&g, sizeof g));
    CHECK_CODE(wsync_st_parse_header(NULL, 0, 5, NULL, &g, &need, &e), WSYNC_ERR_TRUNCATED);
    CHECK_EQ_U64(need, 0); /* 5 bytes can never hold a safetensors file */
    CHECK_CODE(wsync_st_parse_header(NULL, 0, 0, NULL, &g, &need, &e), WSYNC_ERR_TRUNCATED);
    CHECK_CODE(wsync_st_parse_header(NULL, 0, 100, NULL, &g, &need, NULL), WSYNC_ERR_TRUNCATED);
    CHECK_EQ_U64(need, 8);
    TEST_END();

    TEST_BEGIN("st_parse_header: allocation failure at every step frees everything");
    for (k = 1; k < 20; k++) {
        counting c;
        wsync_result r;
        memset(&o, 0, sizeof o);
        o.allocator = counting_fresh(&c, k);
        r = wsync_st_parse_header(b.p, 8 + hl, b.size, &o, &g, &need, &e);
        if (r == WSYNC_OK) {
            wsync_st_free(&g);
            CHECK_EQ_INT(c.live, 0);
            break;
        }
        CHECK_CODE(r, WSYNC_ERR_OUT_OF_MEMORY);
        CHECK_EQ_INT(c.live, 0);
    }
    CHECK(k > 1 && k < 20);
    TEST_END();
    blob_free(&b);
    blob_free(&bad);
}

/* wsync_error_set, what companions and callers' stores fill errors with. */
static void test_error_set(void)
{
    wsync_error e;
    char longer[600];
    TEST_BEGIN("wsync_error_set: code, no offset or tensor, the message formatted and cleaned");
    memset(&e, 0x5A, sizeof e);
    CHECK_CODE(wsync_error_set(&e, WSYNC_ERR_IO, "cannot read '%s': %d \033]0;x\a", "k", 5), WSYNC_ERR_IO);
    CHECK_CODE(e.code, WSYNC_ERR_IO);
    CHECK_EQ_U64(e.offset, UINT64_MAX);
    CHECK_EQ_STR(e.tensor, "");
    CHECK_EQ_STR(e.message, "cannot read 'k': 5 ?]0;x?");
    CHECK_CODE(wsync_error_set(&e, WSYNC_ERR_IO, "%s", "http://user:secret@host/x"), WSYNC_ERR_IO);
    CHECK_EQ_STR(e.message, "http://***@host/x");
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    CHECK_CODE(wsync_error_set(&e, WSYNC_ERR_LIMIT, "%s", longer), WSYNC_ERR_LIMIT);
    CHECK_EQ_U64(strlen(e.message), sizeof e.message - 1);
    CHECK_CODE(wsync_error_set(&e, WSYNC_OK, NULL), WSYNC_OK);
    CHECK(e.code == WSYNC_OK && e.offset == UINT64_MAX && e.message[0] == 0 && e.tensor[0] == 0);
    CHECK_CODE(wsync_error_set(NULL, WSYNC_ERR_CORRUPT, "%s", "x"), WSYNC_ERR_CORRUPT);
    TEST_END();
}

/* wsync_json_string and wsync_json_number: the tokenizer's strings and
   numbers, as a program's own JSON reader calls them. */
static void test_json_tokens(void)
{
    const char *t = "  \"a\\u00e9\\ud83d\\ude00\\n\xc3\xa9\" 12.5e-3,";
    char out[32];
    size_t pos = 2, n = 99;
    wsync_error e;
    TEST_BEGIN("wsync_json_string: escapes, a surrogate pair and UTF-8 decoded, pos past the quote");
    CHECK_CODE(wsync_json_string(t, strlen(t), &pos, out, sizeof out, &n, &e), WSYNC_OK);
    CHECK_EQ_U64(n, 10);
    CHECK(memcmp(out, "a\xc3\xa9\xf0\x9f\x98\x80\n\xc3\xa9", 10) == 0);
    CHECK_EQ_U64(pos, strchr(t + 3, '"') - t + 1);
    pos = 2;
    CHECK_CODE(wsync_json_string(t, strlen(t), &pos, NULL, 0, &n, &e), WSYNC_OK); /* measured only */
    CHECK_EQ_U64(n, 10);
    pos = 2;
    memset(out, '#', sizeof out);
    CHECK_CODE(wsync_json_string(t, strlen(t), &pos, out, 3, &n, &e), WSYNC_OK);
    CHECK(n == 10 && memcmp(out, "a\xc3\xa9#", 4) == 0);
    TEST_END();

    TEST_BEGIN("wsync_json_number: RFC 8259's numbers, pos past them");
    pos = strchr(t + 3, '"') - t + 2;
    CHECK_CODE(wsync_json_number(t, strlen(t), &pos, &e), WSYNC_OK);
    CHECK_EQ_INT(t[pos], ',');
    TEST_END();

    TEST_BEGIN("wsync_json_string and _number refuse what is not JSON, naming the byte, pos kept");
    {
        static const struct {
            const char *text;
            size_t at;
            const char *why;
        } bad[] = {
            {"\"ab", 3, "unterminated"},           {"\"a\x01\"", 2, "control"},
            {"\"\\ud800x\"", 1, "surrogate"},      {"\"\\udc00\"", 1, "surrogate"},
            {"\"\\u12g4\"", 1, "\\u"},             {"\"\\q\"", 1, "escape"},
            {"\"\xc3(\"", 1, "UTF-8"},             {"\"\xed\xa0\x80\"", 1, "UTF-8"},
            {"x", 0, "string"},
        };
        size_t k;
        for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            pos = 0;
            CHECK_CODE(wsync_json_string(bad[k].text, strlen(bad[k].text), &pos, out, sizeof out, &n, &e),
                       WSYNC_ERR_INVALID_JSON);
            CHECK_MSG(e.offset == bad[k].at && strstr(e.message, bad[k].why), "%zu: %s", k, e.message);
            CHECK_EQ_U64(pos, 0);
        }
        {
            static const char *nums[] = {"-", "01x", "1.", "1e", "+1", ".5", ""};
            for (k = 0; k < sizeof nums / sizeof nums[0]; k++) {
                wsync_result r;
                pos = 0;
                r = wsync_json_number(nums[k], strlen(nums[k]), &pos, &e);
                if (k == 1) { /* "0", then '1': the number is "0" */
                    CHECK_CODE(r, WSYNC_OK);
                    CHECK_EQ_U64(pos, 1);
                } else {
                    CHECK_CODE(r, WSYNC_ERR_INVALID_JSON);
                    CHECK_EQ_U64(pos, 0);
                }
            }
        }
        pos = 5;
        CHECK_CODE(wsync_json_number("1", 1, &pos, &e), WSYNC_ERR_INVALID_ARGUMENT);
        CHECK_CODE(wsync_json_string(NULL, 1, &pos, NULL, 0, NULL, &e), WSYNC_ERR_INVALID_ARGUMENT);
    }
    TEST_END();
}

static void test_no_leaks(void)
{
    TEST_BEGIN("alloc: every parse in this program freed what it allocated");
    CHECK_MSG(g_alloc.live == 0, "%ld allocations live", g_alloc.live);
    CHECK(g_alloc.count > 0);
    TEST_END();
}

/* ---------------------------------------------------------------------
   main
   --------------------------------------------------------------------- */

int main(void)
{
    clock_t t0 = clock();
    test_corpus_valid();
    test_corpus_invalid();
    test_corpus_prefixes();
    test_bad_table();
    test_error_detail();
    test_error_detail_schema();
    test_header_length();
    test_bad_special();
    test_nesting();
    test_limits();
    test_accept_basic();
    test_accept_misaligned();
    test_accept_dtypes();
    test_accept_names_metadata();
    test_accept_utf8_boundaries();
    test_accept_many();
    test_writer_padding();
    test_writer_escaping();
    test_writer_streaming();
    test_writer_sinks();
    test_writer_refuses();
    test_writer_args();
    test_generated_prefixes();
    test_alloc_parse();
    test_alloc_write();
    test_parse_header_files();
    test_parse_header_cases();
    test_error_set();
    test_json_tokens();
    test_no_leaks();
    if (check__is_verbose())
        printf("cpu time %.2f s\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
    return check_summary();
}
