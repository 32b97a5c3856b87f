/* wsync_delta_apply's promise: a delta is checked in full (container,
   ranges, base and result digests) before anything is written, so one it
   refuses leaves every target as it was, byte for byte. Each apply here is
   preceded by a copy of all the targets and, when it fails, followed by a
   comparison with that copy; one that succeeds on a packed delta with its
   digests checked must have produced the trainer's tensors.

   The deltas: blocks larger than the tensors, block sizes declared anew (up
   to WSYNC_DELTA_MAX_BLOCK_LOG2 and past it), counts and block tables that
   disagree with the blocks, blocks exchanged, wrong digests, targets that
   are not the base, a missing or reshaped target, every single-byte flip of
   a valid delta in each encoding, and each allocation failing in turn; one
   thread and four throughout. Only "refused or not" is checked, never which
   error a decoder gives, except for the digests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(WSYNC_NO_THREADS) && (defined(__unix__) || defined(__APPLE__))
#include <pthread.h>
#define AA_THREADS 1
#else
#define AA_THREADS 0
#endif

#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#define AA_SKIP_BOTH (WSYNC_DELTA_SKIP_BASE_DIGEST | WSYNC_DELTA_SKIP_RESULT_DIGEST)

static void aa_die(const char *what)
{
    fprintf(stderr, "test_apply_atomic: %s\n", what);
    exit(2);
}

static void *aa_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) aa_die("out of memory");
    return p;
}

/* ---- the model: four tensors the delta names and one it does not ---- */

#define AA_N 5
#define AA_NAMED 4 /* the first four are encoded; "z" is only a target */

typedef struct aa_spec {
    const char *name;
    wsync_dtype dtype;
    unsigned w;
    uint32_t rank;
    uint64_t shape[2];
} aa_spec;

static const aa_spec aa_specs[AA_N] = {
    {"a", WSYNC_DTYPE_BF16, 2, 1, {500, 0}},  /* changes throughout */
    {"b", WSYNC_DTYPE_F32, 4, 2, {10, 25}},   /* changes throughout, some far off */
    {"c", WSYNC_DTYPE_F16, 2, 1, {100, 0}},   /* unchanged */
    {"d", WSYNC_DTYPE_BF16, 2, 1, {1500, 0}}, /* changes in its first 64 elements only */
    {"z", WSYNC_DTYPE_BF16, 2, 1, {64, 0}},   /* not in the delta */
};

/* Three images of the five tensors side by side (base, next, work) and a
   copy of work taken before each apply. */
typedef struct aa_model {
    uint8_t *base, *next, *work, *saved;
    size_t off[AA_N], total;
    wsync_tensor tb[AA_N], tn[AA_N], tw[AA_N];
    const wsync_allocator *alloc; /* for aa_apply; NULL: malloc */
} aa_model;

static uint64_t aa_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static void aa_put(uint8_t *p, unsigned w, uint64_t v)
{
    unsigned i;
    for (i = 0; i < w; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t aa_get(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    unsigned i;
    for (i = w; i > 0; i--) v = v << 8 | p[i - 1];
    return v;
}

static void aa_view(wsync_tensor *t, const aa_spec *sp, uint8_t *data, uint64_t nelem)
{
    memset(t, 0, sizeof *t);
    t->name = sp->name;
    t->dtype = sp->dtype;
    t->rank = sp->rank;
    t->shape = sp->shape;
    t->data = data;
    t->nbytes = nelem * sp->w;
}

static void aa_model_init(aa_model *m)
{
    uint64_t s = 11;
    size_t i, k;
    memset(m, 0, sizeof *m);
    for (i = 0; i < AA_N; i++) {
        m->off[i] = m->total;
        m->total += (size_t)(aa_specs[i].shape[0] * (aa_specs[i].rank == 2 ? aa_specs[i].shape[1] : 1)) *
                    aa_specs[i].w;
    }
    m->base = (uint8_t *)aa_xmalloc(m->total);
    m->next = (uint8_t *)aa_xmalloc(m->total);
    m->work = (uint8_t *)aa_xmalloc(m->total);
    m->saved = (uint8_t *)aa_xmalloc(m->total);
    for (i = 0; i < AA_N; i++) {
        const aa_spec *sp = &aa_specs[i];
        size_t nelem = (size_t)(sp->shape[0] * (sp->rank == 2 ? sp->shape[1] : 1));
        uint8_t *b = m->base + m->off[i], *n = m->next + m->off[i];
        for (k = 0; k < nelem; k++) {
            uint64_t r = aa_rand(&s), v, x;
            /* values near 1, as weights are */
            v = sp->dtype == WSYNC_DTYPE_F32 ? 0x3F000000u | (r & 0xFFFFFu)
                : sp->dtype == WSYNC_DTYPE_F16 ? 0x3800u + (r & 0x3FFu) : 0x3F00u + (r & 0xFFu);
            x = v;
            if (i == 0 || i == 1 || (i == 3 && k < 64)) {
                uint64_t q = aa_rand(&s);
                if (q % (i == 3 ? 4 : 16) == 0) {
                    if (q % 7 == 0) /* now and then far off: sign and exponent */
                        x = v ^ (sp->w == 4 ? 0xC1000000u : 0xC100u);
                    else
                        x = v ^ ((q >> 8) % 7 + 1);
                }
            }
            aa_put(b + k * sp->w, sp->w, v);
            aa_put(n + k * sp->w, sp->w, x);
        }
        aa_view(&m->tb[i], sp, b, nelem);
        aa_view(&m->tn[i], sp, n, nelem);
        aa_view(&m->tw[i], sp, m->work + m->off[i], nelem);
    }
}

static void aa_model_free(aa_model *m)
{
    free(m->base);
    free(m->next);
    free(m->work);
    free(m->saved);
}

static void aa_reset(aa_model *m) { memcpy(m->work, m->base, m->total); }

static int aa_is_next(const aa_model *m) { return memcmp(m->work, m->next, m->total) == 0; }

/* ---- encodings, deltas, applies ---- */

typedef struct aa_enc {
    const char *name;
    wsync_encoding enc;
    unsigned flags;
} aa_enc;

static const aa_enc aa_encs[] = {
    {"packed", WSYNC_ENCODING_PACKED, 0},
    {"packed-max", WSYNC_ENCODING_PACKED_MAX, 0},
    {"packed-max [range coder]", WSYNC_ENCODING_PACKED_MAX, WSYNC_DELTA_RANGE_CODER},
    {"trl-v1", WSYNC_ENCODING_TRL_V1, 0},
    {"trl-v3", WSYNC_ENCODING_TRL_V3, 0},
};
#define AA_N_ENCS (sizeof aa_encs / sizeof aa_encs[0])
#define AA_N_PACKED 3 /* the first three carry digests */

typedef struct aa_bytes {
    uint8_t *p;
    size_t len;
} aa_bytes;

static int aa_sink(void *user, const void *p, size_t n)
{
    aa_bytes *b = (aa_bytes *)user;
    uint8_t *q = (uint8_t *)realloc(b->p, b->len + n + 1);
    if (!q) return -1;
    memcpy(q + b->len, p, n);
    b->p = q;
    b->len += n;
    return 0;
}

static aa_bytes aa_encode(const aa_model *m, const aa_enc *e, unsigned block_log2)
{
    wsync_delta_options o;
    wsync_error err;
    aa_bytes d;
    memset(&o, 0, sizeof o);
    memset(&d, 0, sizeof d);
    o.encoding = e->enc;
    o.flags = e->flags;
    o.block_log2 = block_log2;
    o.base_step = 6;
    o.step = 7;
    if (wsync_delta_encode(m->tb, m->tn, AA_NAMED, &o, aa_sink, &d, NULL, &err) != WSYNC_OK) aa_die(err.message);
    return d;
}

static aa_bytes aa_dup(const aa_bytes *d)
{
    aa_bytes c;
    c.len = d->len;
    c.p = (uint8_t *)aa_xmalloc(d->len);
    memcpy(c.p, d->p, d->len);
    return c;
}

/* Applies d to the n first targets as they stand; when it fails, every
   target (all five, named or not) must be as it was. */
static wsync_result aa_apply_n(aa_model *m, const aa_bytes *d, size_t n, unsigned threads, unsigned flags,
                               const wsync_allocator *a, const char *what)
{
    wsync_delta_options o;
    wsync_error err;
    wsync_result r;
    size_t i;
    memset(&o, 0, sizeof o);
    if (a) o.allocator = *a;
    o.threads = threads;
    o.flags = flags;
    memcpy(m->saved, m->work, m->total);
    r = wsync_delta_apply(d->p, d->len, m->tw, n, &o, NULL, &err);
    if (r != WSYNC_OK)
        for (i = 0; i < AA_N; i++)
            CHECK_MSG(memcmp(m->work + m->off[i], m->saved + m->off[i], (size_t)m->tw[i].nbytes) == 0,
                      "%s: '%s' changed by an apply that failed (%s)", what, m->tw[i].name, err.message);
    return r;
}

static wsync_result aa_apply(aa_model *m, const aa_bytes *d, unsigned threads, unsigned flags, const char *what)
{
    return aa_apply_n(m, d, AA_N, threads, flags, m->alloc, what);
}

/* A packed stream's layout in a delta: the stream at d->p + at, `size`
   bytes; its block table at + fixed, nblocks entries. */
typedef struct aa_stream {
    size_t at, size, fixed;
    unsigned rank, block_log2;
    uint64_t nelem, changed, nblocks;
} aa_stream;

static aa_stream aa_find(const aa_bytes *d, const char *name)
{
    wsync_st_file f;
    const wsync_st_tensor *t;
    aa_stream s;
    const uint8_t *p;
    unsigned i;
    memset(&s, 0, sizeof s);
    if (wsync_st_parse(d->p, d->len, NULL, &f, NULL) != WSYNC_OK) aa_die("cannot parse own delta");
    if (!(t = wsync_st_find(&f, name))) aa_die("no such stream");
    s.at = (size_t)(t->data - d->p);
    s.size = (size_t)(t->end - t->begin);
    wsync_st_free(&f);
    p = d->p + s.at;
    s.rank = p[6];
    s.block_log2 = p[7];
    s.fixed = 8 + 8 * (size_t)s.rank + 24 + (p[4] == 1 ? 0 : 8); /* packed-max's coders add their rule */
    s.nelem = 1;
    for (i = 0; i < s.rank; i++) s.nelem *= aa_get(p + 8 + 8 * i, 8);
    s.changed = aa_get(p + 8 + 8 * s.rank, 8);
    s.nblocks = s.changed ? (s.nelem + ((uint64_t)1 << s.block_log2) - 1) >> s.block_log2 : 0;
    return s;
}

/* d with the stream of one tensor replaced by s[0..len), written anew. */
static aa_bytes aa_replace(const aa_bytes *d, const char *name, const uint8_t *s, size_t len)
{
    wsync_st_file f;
    wsync_st_tensor_desc td[AA_N];
    uint64_t shape = len;
    aa_bytes out;
    size_t i;
    memset(&out, 0, sizeof out);
    if (wsync_st_parse(d->p, d->len, NULL, &f, NULL) != WSYNC_OK || f.n_tensors > AA_N) aa_die("cannot parse");
    for (i = 0; i < f.n_tensors; i++) {
        const wsync_st_tensor *t = &f.tensors[i];
        int mine = strcmp(t->name, name) == 0;
        memset(&td[i], 0, sizeof td[i]);
        td[i].name = t->name;
        td[i].name_len = t->name_len;
        td[i].dtype = t->dtype;
        td[i].rank = t->rank;
        td[i].shape = mine ? &shape : t->shape;
        td[i].data = mine ? (const void *)s : (const void *)t->data;
        td[i].nbytes = mine ? len : t->end - t->begin;
    }
    if (wsync_st_write(td, f.n_tensors, f.metadata, f.n_metadata, aa_sink, &out, NULL, NULL) != WSYNC_OK)
        aa_die("cannot write");
    wsync_st_free(&f);
    return out;
}

static const unsigned aa_threads[2] = {1, 4};

/* ---- valid deltas, blocks up to larger than every tensor ---- */

static void test_valid(aa_model *m)
{
    static const unsigned logs[3] = {6, 13, 20};
    char name[200];
    size_t e, l, t, f;
    for (e = 0; e < AA_N_ENCS; e++)
        for (l = 0; l < (e < AA_N_PACKED ? 3u : 1u); l++) {
            aa_bytes d = aa_encode(m, &aa_encs[e], logs[l]);
            snprintf(name, sizeof name, "%s, blocks of 2^%u (2^20: larger than every tensor): applies, 1 and 4 threads",
                     aa_encs[e].name, logs[l]);
            TEST_BEGIN(name);
            for (t = 0; t < 2; t++)
                for (f = 0; f < 2; f++) {
                    wsync_result r;
                    aa_reset(m);
                    r = aa_apply(m, &d, aa_threads[t], f ? AA_SKIP_BOTH : 0, name);
                    CHECK_EQ_INT(r, WSYNC_OK);
                    CHECK(aa_is_next(m));
                }
            TEST_END();
            free(d.p);
        }
}

/* ---- block sizes declared anew ---- */

/* Every stream's block_log2 rewritten, its table left as it is: refused,
   or (where the table still fits) the right result. */
static void test_redeclared(aa_model *m)
{
    static const unsigned bad[3] = {0, 5, 255};
    static const char *streams[4] = {"a", "b", "c", "d"};
    char name[200];
    size_t e, s, t;
    unsigned b;
    for (e = 0; e < AA_N_PACKED; e++) {
        aa_bytes d = aa_encode(m, &aa_encs[e], 6);
        snprintf(name, sizeof name, "%s: each stream declaring blocks of 2^0, 2^5..2^27, 2^255 over a table for 2^6",
                 aa_encs[e].name);
        TEST_BEGIN(name);
        for (s = 0; s < 4; s++) {
            aa_stream st = aa_find(&d, streams[s]);
            for (b = 0; b < 3 + 22; b++) {
                unsigned log2 = b < 3 ? bad[b] : b + 3; /* then 6..27 */
                aa_bytes c;
                if (log2 == st.block_log2) continue;
                c = aa_dup(&d);
                c.p[st.at + 7] = (uint8_t)log2;
                for (t = 0; t < 2; t++) {
                    wsync_result r;
                    aa_reset(m);
                    r = aa_apply(m, &c, aa_threads[t], 0, name);
                    if (log2 < 6 || log2 > WSYNC_DELTA_MAX_BLOCK_LOG2)
                        CHECK_MSG(r != WSYNC_OK, "'%s' at 2^%u applied", streams[s], log2);
                    else if (r == WSYNC_OK)
                        CHECK_MSG(aa_is_next(m), "'%s' at 2^%u applied, wrongly", streams[s], log2);
                }
                free(c.p);
            }
        }
        TEST_END();
        free(d.p);
    }
}

/* "d" changes only in its first block of 2^6: declared anew as blocks of
   2^7..2^20 with a table of as many entries, the first block's bytes in the
   first and the others empty, it is a valid delta with the same changes.
   (test_limits' 2^24 variant of this, on a 2^22-element tensor, applied
   the same way before WSYNC_DELTA_MAX_BLOCK_LOG2: every field checks out.) */
static void test_first_block_grown(aa_model *m)
{
    char name[200];
    size_t e, t;
    unsigned log2;
    for (e = 0; e < AA_N_PACKED; e++) {
        aa_bytes d = aa_encode(m, &aa_encs[e], 6);
        aa_stream st = aa_find(&d, "d");
        const uint8_t *p = d.p + st.at;
        uint32_t b0 = (uint32_t)aa_get(p + st.fixed, 4);
        size_t k;
        for (k = 1; k < st.nblocks; k++)
            if (aa_get(p + st.fixed + 4 * k, 4)) aa_die("'d' changes past its first block");
        snprintf(name, sizeof name, "%s: 'd' with its one block of changes declared as 2^7..2^20: the same delta, applies",
                 aa_encs[e].name);
        TEST_BEGIN(name);
        for (log2 = 7; log2 <= WSYNC_DELTA_MAX_BLOCK_LOG2; log2++) {
            uint64_t nb = (st.nelem + ((uint64_t)1 << log2) - 1) >> log2;
            size_t len = st.fixed + 4 * (size_t)nb + b0;
            uint8_t *s = (uint8_t *)aa_xmalloc(len);
            aa_bytes c;
            memcpy(s, p, st.fixed);
            s[7] = (uint8_t)log2;
            memset(s + st.fixed, 0, 4 * (size_t)nb);
            aa_put(s + st.fixed, 4, b0);
            memcpy(s + st.fixed + 4 * nb, p + st.fixed + 4 * st.nblocks, b0);
            c = aa_replace(&d, "d", s, len);
            for (t = 0; t < 2; t++) {
                wsync_result r;
                aa_reset(m);
                r = aa_apply(m, &c, aa_threads[t], 0, name);
                CHECK_MSG(r == WSYNC_OK, "2^%u refused", log2);
                if (r == WSYNC_OK) CHECK_MSG(aa_is_next(m), "2^%u applied, wrongly", log2);
            }
            free(c.p);
            free(s);
        }
        TEST_END();
        free(d.p);
    }
}

/* ---- counts, tables and blocks that disagree ---- */

static void test_inconsistent(aa_model *m)
{
    static const char *streams[3] = {"a", "b", "d"};
    static const uint64_t counts[5] = {1, (uint64_t)-1, 0, (uint64_t)1 << 32, 0};
    char name[200];
    size_t e, s, t, k, f;
    for (e = 0; e < AA_N_PACKED; e++)
        for (t = 0; t < 2; t++)
            for (f = 0; f < 2; f++) {
                unsigned flags = f ? AA_SKIP_BOTH : 0;
                aa_bytes d = aa_encode(m, &aa_encs[e], 6);
                snprintf(name, sizeof name,
                         "%s, %u thread(s)%s: counts off, bytes moved between blocks, blocks exchanged: refused "
                         "untouched",
                         aa_encs[e].name, aa_threads[t], f ? ", digests skipped" : "");
                TEST_BEGIN(name);
                for (s = 0; s < 3; s++) {
                    aa_stream st = aa_find(&d, streams[s]);
                    size_t cat = st.at + 8 + 8 * st.rank, tab = st.at + st.fixed;
                    /* the header's count: one more, one less, none, 2^32 more, all ones */
                    for (k = 0; k < 5; k++) {
                        aa_bytes c = aa_dup(&d);
                        uint64_t v = k == 2 ? 0 : k == 4 ? ~(uint64_t)0 : st.changed + counts[k];
                        aa_put(c.p + cat, 8, v);
                        aa_reset(m);
                        CHECK_MSG(aa_apply(m, &c, aa_threads[t], flags, name) != WSYNC_OK, "'%s' count %llu applied",
                                  streams[s], (unsigned long long)v);
                        free(c.p);
                    }
                    /* a byte of block k moved to block k + 1 and back: the total stays */
                    for (k = 0; k + 1 < st.nblocks; k++) {
                        int dir;
                        for (dir = -1; dir <= 1; dir += 2) {
                            aa_bytes c = aa_dup(&d);
                            uint64_t x = aa_get(c.p + tab + 4 * k, 4), y = aa_get(c.p + tab + 4 * k + 4, 4);
                            aa_put(c.p + tab + 4 * k, 4, (x + (uint64_t)dir) & 0xFFFFFFFFu);
                            aa_put(c.p + tab + 4 * k + 4, 4, (y - (uint64_t)dir) & 0xFFFFFFFFu);
                            aa_reset(m);
                            CHECK_MSG(aa_apply(m, &c, aa_threads[t], flags, name) != WSYNC_OK,
                                      "'%s' table entries %lu and %lu moved by %d applied", streams[s],
                                      (unsigned long)k, (unsigned long)k + 1, dir);
                            free(c.p);
                        }
                    }
                }
                /* two blocks of "a" with changes exchanged, table and bytes:
                   each block checks out, but in the other's place */
                {
                    aa_stream st = aa_find(&d, "a");
                    size_t tab = st.at + st.fixed, data = tab + 4 * (size_t)st.nblocks, o0 = 0;
                    uint64_t i, j;
                    for (i = 0; i + 1 < st.nblocks; i++) {
                        uint64_t si = aa_get(d.p + tab + 4 * i, 4), sj = aa_get(d.p + tab + 4 * i + 4, 4);
                        wsync_result r;
                        aa_bytes c;
                        j = i + 1;
                        if (si && sj) {
                            c = aa_dup(&d);
                            aa_put(c.p + tab + 4 * i, 4, sj);
                            aa_put(c.p + tab + 4 * j, 4, si);
                            memcpy(c.p + data + o0, d.p + data + o0 + si, (size_t)sj);
                            memcpy(c.p + data + o0 + sj, d.p + data + o0, (size_t)si);
                            aa_reset(m);
                            r = aa_apply(m, &c, aa_threads[t], flags, name);
                            if (!f) CHECK_MSG(r != WSYNC_OK, "'a' blocks %lu and %lu exchanged applied", (unsigned long)i,
                                              (unsigned long)j);
                            free(c.p);
                        }
                        o0 += (size_t)si;
                    }
                }
                TEST_END();
                free(d.p);
            }
}

/* ---- wrong digests, targets that are not the base ---- */

static void test_wrong_base(aa_model *m)
{
    static const char *streams[4] = {"a", "b", "c", "d"};
    char name[200];
    size_t e, s, t, k;
    for (e = 0; e < AA_N_PACKED; e++)
        for (t = 0; t < 2; t++) {
            aa_bytes d = aa_encode(m, &aa_encs[e], 6);
            snprintf(name, sizeof name, "%s, %u thread(s): a wrong base or result digest, a target not the base: refused "
                     "untouched", aa_encs[e].name, aa_threads[t]);
            TEST_BEGIN(name);
            for (s = 0; s < 4; s++) {
                aa_stream st = aa_find(&d, streams[s]);
                size_t i = (size_t)(st.nelem - 1) * aa_specs[s].w, changed_at = 0;
                size_t at[3];
                for (k = 0; k < 2; k++) { /* base digest, result digest */
                    aa_bytes c = aa_dup(&d);
                    wsync_result r;
                    c.p[st.at + 16 + 8 * st.rank + 8 * k + 3] ^= 0x20;
                    aa_reset(m);
                    r = aa_apply(m, &c, aa_threads[t], 0, name);
                    CHECK_MSG(r == WSYNC_ERR_DIGEST_MISMATCH, "'%s' digest %lu: %d", streams[s], (unsigned long)k,
                              (int)r);
                    if (k == 1 && st.changed) { /* the result digest still counts without the base's (an
                                                   unchanged tensor is then left alone unread) */
                        aa_reset(m);
                        r = aa_apply(m, &c, aa_threads[t], WSYNC_DELTA_SKIP_BASE_DIGEST, name);
                        CHECK_MSG(r == WSYNC_ERR_DIGEST_MISMATCH, "'%s' result digest, base skipped: %d",
                                  streams[s], (int)r);
                    }
                    free(c.p);
                }
                /* the target differs from the base in one element: the first,
                   the first changed one, the last */
                while (changed_at < i &&
                       !memcmp(m->base + m->off[s] + changed_at, m->next + m->off[s] + changed_at, aa_specs[s].w))
                    changed_at += aa_specs[s].w;
                at[0] = 0;
                at[1] = changed_at;
                at[2] = i;
                for (k = 0; k < 3; k++) {
                    wsync_result r;
                    aa_reset(m);
                    m->work[m->off[s] + at[k]] ^= 0x01;
                    CHECK_MSG(aa_apply(m, &d, aa_threads[t], 0, name) == WSYNC_ERR_DIGEST_MISMATCH,
                              "'%s' off at byte %lu", streams[s], (unsigned long)at[k]);
                    aa_reset(m);
                    m->work[m->off[s] + at[k]] ^= 0x40;
                    r = aa_apply(m, &d, aa_threads[t], WSYNC_DELTA_SKIP_BASE_DIGEST, name);
                    /* packed-max carries new values: overwriting the one
                       element that was off may give the right result; an
                       unchanged tensor is left as it is */
                    if (r == WSYNC_OK) {
                        if (!st.changed) m->work[m->off[s] + at[k]] ^= 0x40;
                        CHECK_MSG(aa_is_next(m), "'%s' applied over a wrong base, wrongly", streams[s]);
                    }
                }
            }
            TEST_END();
            free(d.p);
        }
}

/* A delta naming a tensor the targets lack, or one of another shape. */
static void test_targets(aa_model *m)
{
    static const uint64_t narrow[1] = {1499};
    char name[200];
    size_t e, t;
    for (e = 0; e < AA_N_ENCS; e++) {
        aa_bytes d = aa_encode(m, &aa_encs[e], 6);
        wsync_tensor keep;
        snprintf(name, sizeof name, "%s: a target missing%s: refused untouched", aa_encs[e].name,
                 e < AA_N_PACKED ? " or of another shape" : "");
        TEST_BEGIN(name);
        for (t = 0; t < 2; t++) {
            aa_reset(m);
            CHECK(aa_apply_n(m, &d, 3, aa_threads[t], 0, NULL, name) != WSYNC_OK); /* a, b, c: no d */
            if (e >= AA_N_PACKED) continue; /* trl files carry no shapes */
            keep = m->tw[3];
            m->tw[3].shape = narrow; /* one element short of the delta's */
            m->tw[3].nbytes = 1499 * 2;
            aa_reset(m);
            CHECK(aa_apply(m, &d, aa_threads[t], 0, name) != WSYNC_OK);
            m->tw[3] = keep;
        }
        TEST_END();
        free(d.p);
    }
}

/* ---- every single-byte flip of a valid delta ---- */

/* Every `stride`-th byte from `from` on flipped, one bit (1 << i % 8)
   and, where `all_bits`, all eight; returns how many were refused. */
static unsigned long aa_flip_run(aa_model *m, const aa_bytes *d, size_t from, size_t stride, int all_bits,
                                 unsigned threads, unsigned flags, int digests, const char *what)
{
    aa_bytes c = aa_dup(d);
    unsigned long refused = 0;
    size_t i, k;
    for (i = from; i < d->len; i += stride)
        for (k = 0; k < (all_bits ? 2u : 1u); k++) {
            uint8_t mask = k ? 0xFF : (uint8_t)(1u << (i & 7));
            wsync_result r;
            c.p[i] ^= mask;
            aa_reset(m);
            r = aa_apply(m, &c, threads, flags, what);
            if (r != WSYNC_OK) refused++;
            else if (digests)
                CHECK_MSG(aa_is_next(m), "byte %lu ^ 0x%02x applied, wrongly", (unsigned long)i, mask);
            c.p[i] ^= mask;
        }
    free(c.p);
    return refused;
}

/* One thread: every byte, one bit and all bits; digests skipped (packed):
   the data section; four threads: every third byte of the data section,
   one bit (3 and 8 coprime: each bit in turn). Through a
   wsync_pool, as a subscriber applies, which also spares the sanitizers a
   fresh 1 MiB of digest scratch per thread and apply. */
static void test_flips(aa_model *m)
{
    char name[200];
    size_t e, run;
    wsync_pool *pool = wsync_pool_new((size_t)16 << 20, NULL);
    wsync_allocator pa;
    if (!pool) aa_die("out of memory");
    pa = wsync_pool_allocator(pool);
    m->alloc = &pa;
    for (e = 0; e < AA_N_ENCS; e++) {
        aa_bytes d = aa_encode(m, &aa_encs[e], 6);
        size_t data = 8 + (size_t)aa_get(d.p, 8);
        int packed = e < AA_N_PACKED;
        for (run = 0; run < 3; run++) {
            unsigned threads = run == 2 ? 4 : 1, flags = run == 1 ? AA_SKIP_BOTH : 0;
            size_t from = run ? data : 0;
            if (run == 1 && !packed) continue;
            snprintf(name, sizeof name, "%s, %u thread(s)%s: %s flipped (%s): refused untouched%s",
                     aa_encs[e].name, threads, flags ? ", digests skipped" : "",
                     run == 2 ? "every third byte of the data section" : run ? "each byte of the data section"
                                                                         : "each byte of the whole delta",
                     run == 2 ? "one bit" : "one bit, all bits",
                     packed && !flags ? ", or the right result" : "");
            TEST_BEGIN(name);
            CHECK(aa_flip_run(m, &d, from, run == 2 ? 3 : 1, run != 2, threads, flags, packed && !flags, name) > 0);
            TEST_END();
        }
        free(d.p);
    }
    m->alloc = NULL;
    wsync_pool_free(pool);
}

/* ---- each allocation failing in turn ---- */

typedef struct aa_failing {
    unsigned long calls, fail_at;
#if AA_THREADS
    pthread_mutex_t mu;
#endif
} aa_failing;

static void *aa_failing_alloc(void *user, size_t n)
{
    aa_failing *a = (aa_failing *)user;
    unsigned long call;
#if AA_THREADS
    pthread_mutex_lock(&a->mu);
#endif
    call = ++a->calls;
#if AA_THREADS
    pthread_mutex_unlock(&a->mu);
#endif
    return call == a->fail_at ? NULL : malloc(n ? n : 1);
}

static void aa_failing_free(void *user, void *p)
{
    (void)user;
    free(p);
}

static void test_alloc_failures(aa_model *m)
{
    char name[200];
    size_t e, t;
    aa_failing fa;
    wsync_allocator a;
#if AA_THREADS
    pthread_mutex_init(&fa.mu, NULL);
#endif
    a.alloc = aa_failing_alloc;
    a.free = aa_failing_free;
    a.user = &fa;
    for (e = 0; e < AA_N_ENCS; e++)
        for (t = 0; t < 2; t++) {
            aa_bytes d = aa_encode(m, &aa_encs[e], 6);
            wsync_result r = WSYNC_ERR_OUT_OF_MEMORY;
            snprintf(name, sizeof name, "%s, %u thread(s): each allocation failing in turn: refused untouched",
                     aa_encs[e].name, aa_threads[t]);
            TEST_BEGIN(name);
            for (fa.fail_at = 1; fa.fail_at < 1000 && r != WSYNC_OK; fa.fail_at++) {
                fa.calls = 0;
                aa_reset(m);
                r = aa_apply_n(m, &d, AA_N, aa_threads[t], 0, &a, name);
            }
            CHECK_EQ_INT(r, WSYNC_OK);
            CHECK(aa_is_next(m));
            TEST_END();
            free(d.p);
        }
#if AA_THREADS
    pthread_mutex_destroy(&fa.mu);
#endif
}

int main(void)
{
    aa_model m;
    aa_model_init(&m);
    test_valid(&m);
    test_redeclared(&m);
    test_first_block_grown(&m);
    test_inconsistent(&m);
    test_wrong_base(&m);
    test_targets(&m);
    test_flips(&m);
    test_alloc_failures(&m);
    aa_model_free(&m);
    return check_summary();
}
