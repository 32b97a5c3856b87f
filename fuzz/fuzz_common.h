/* fuzz_common.h - what the harnesses share: failing loudly (fz_fail,
   FZ_CHECK) with the input's size and hash in the report, a malloc that
   fails loudly (fz_xmalloc), the check of a failed call's wsync_error
   (fz_check_error), and a counting allocator that can be made to
   fail on request (fz_allocator). Include after wsync.h; everything is
   static. A report names the file and line of the check that failed.

   Defined before the include, where the harness uses the allocator:
     FZ_ALLOC_RATIO, FZ_ALLOC_SLACK
                     the counting allocator refuses, as a violation, any
                     single allocation larger than FZ_ALLOC_RATIO times the
                     input size plus FZ_ALLOC_SLACK bytes (default 8 and
                     4096; a harness that uses it sets its own) */
#ifndef WSYNC_FUZZ_COMMON_H
#define WSYNC_FUZZ_COMMON_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GNUC__) || defined(__clang__)
#define FZ_UNUSED __attribute__((unused))
#else
#define FZ_UNUSED
#endif

#ifndef FZ_ALLOC_RATIO
#define FZ_ALLOC_RATIO 8u
#endif
#ifndef FZ_ALLOC_SLACK
#define FZ_ALLOC_SLACK 4096u
#endif

/* ---------------------------------------------------------------------
   Failing loudly
   --------------------------------------------------------------------- */

static size_t fz_input_size;   /* the input being run, for the reports */
static uint32_t fz_input_hash; /* its fz_fnv1a */
static const char *fz_stage;   /* what is being run, said in the report when set */

static void fz_fail_at(const char *file, int line, const char *what)
{
    int staged = fz_stage && *fz_stage;
    fprintf(stderr, "%s:%d: invariant violated%s%s%s: %s (input: %lu bytes, fnv1a %08lx)\n", file, line,
            staged ? " (" : "", staged ? fz_stage : "", staged ? ")" : "", what, (unsigned long)fz_input_size,
            (unsigned long)fz_input_hash);
    fflush(stderr);
    abort();
}

/* fz_fail(__LINE__, what): a violation at that line of the file it is written in. */
#define fz_fail(line, what) fz_fail_at(__FILE__, line, what)

#define FZ_CHECK(cond)                                                          \
    do {                                                                        \
        if (!(cond)) fz_fail(__LINE__, #cond);                                  \
    } while (0)

FZ_UNUSED static uint32_t fz_fnv1a(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

FZ_UNUSED static void *fz_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    FZ_CHECK(p != NULL);
    return p;
}

/* A failed call filled `err` to match what it returned: the same code, a
   nonempty NUL-terminated message, a NUL-terminated tensor name, an offset
   inside the input (input_size; UINT64_MAX: any) or none (UINT64_MAX); and
   the code has a name and a description. */
FZ_UNUSED static void fz_check_error(const wsync_error *err, wsync_result r, uint64_t input_size)
{
    const char *str = wsync_result_str(r), *name = wsync_result_name(r);
    FZ_CHECK(r > WSYNC_OK && r < WSYNC_RESULT_COUNT);
    FZ_CHECK(err->code == r);
    FZ_CHECK(memchr(err->message, 0, sizeof err->message) != NULL);
    FZ_CHECK(err->message[0] != '\0');
    FZ_CHECK(memchr(err->tensor, 0, sizeof err->tensor) != NULL);
    FZ_CHECK(err->offset == UINT64_MAX || err->offset <= input_size);
    FZ_CHECK(str != NULL && str[0] != '\0');
    FZ_CHECK(name != NULL && strncmp(name, "WSYNC_", 6) == 0);
}

/* ---------------------------------------------------------------------
   A counting allocator that can fail on request
   --------------------------------------------------------------------- */

typedef struct fz_heap {
    size_t live;      /* blocks handed out and not yet freed */
    size_t calls;     /* alloc calls so far */
    size_t fail_at;   /* the alloc call (0-based) that returns NULL; SIZE_MAX never */
    size_t failed;    /* allocations refused so far */
    size_t max_block; /* largest single request allowed */
} fz_heap;

FZ_UNUSED static void *fz_alloc(void *user, size_t size)
{
    fz_heap *h = (fz_heap *)user;
    void *p;
    size_t call = h->calls++;
    if (size > h->max_block) {
        fprintf(stderr, "allocation of %lu bytes for a %lu-byte input\n", (unsigned long)size,
                (unsigned long)fz_input_size);
        fz_fail(__LINE__, "allocation size out of proportion to the input");
    }
    if (call == h->fail_at) {
        h->failed++;
        return NULL;
    }
    p = fz_xmalloc(size);
    h->live++;
    return p;
}

FZ_UNUSED static void fz_free(void *user, void *ptr)
{
    fz_heap *h = (fz_heap *)user;
    if (!ptr) return;
    FZ_CHECK(h->live > 0);
    h->live--;
    free(ptr);
}

/* h reset (nothing live, no call yet) and an allocator over it whose call
   number fail_at (0-based; SIZE_MAX: none) returns NULL. */
FZ_UNUSED static wsync_allocator fz_allocator(fz_heap *h, size_t fail_at)
{
    wsync_allocator a;
    h->live = 0;
    h->calls = 0;
    h->failed = 0;
    h->fail_at = fail_at;
    h->max_block = fz_input_size * (size_t)FZ_ALLOC_RATIO + (size_t)FZ_ALLOC_SLACK;
    a.alloc = fz_alloc;
    a.free = fz_free;
    a.user = h;
    return a;
}


/* ---------------------------------------------------------------------
   What a listing parser's callbacks saw (fuzz_listing.c, fuzz_propfind.c)
   --------------------------------------------------------------------- */

typedef struct fz_ent {
    char *name; /* NUL-terminated copy */
    size_t len;
    int is_dir;
    uint64_t size;
} fz_ent;

typedef struct fz_seen {
    fz_ent *e;
    size_t n, cap;
    size_t stop_at; /* the callback (0-based) that returns nonzero; SIZE_MAX never */
    size_t calls;
} fz_seen;

FZ_UNUSED static void fz_seen_init(fz_seen *s, size_t stop_at)
{
    memset(s, 0, sizeof *s);
    s->stop_at = stop_at;
}

FZ_UNUSED static void fz_seen_free(fz_seen *s)
{
    size_t i;
    for (i = 0; i < s->n; i++) free(s->e[i].name);
    free(s->e);
    memset(s, 0, sizeof *s);
}

/* Records one callback (no call may come after a stop); nonzero, the
   callback's answer, at the one numbered stop_at. */
FZ_UNUSED static int fz_seen_add(fz_seen *s, const char *name, size_t len, int is_dir, uint64_t size)
{
    fz_ent *e;
    FZ_CHECK(s->stop_at == SIZE_MAX || s->calls <= s->stop_at);
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 16;
        fz_ent *ne = (fz_ent *)realloc(s->e, ncap * sizeof *ne);
        FZ_CHECK(ne != NULL);
        s->e = ne;
        s->cap = ncap;
    }
    e = &s->e[s->n++];
    e->name = (char *)fz_xmalloc(len + 1);
    memcpy(e->name, name, len);
    e->name[len] = 0;
    e->len = len;
    e->is_dir = is_dir;
    e->size = size;
    return s->calls++ == s->stop_at;
}

/* The same entries in the same order (sizes compared for directories too
   when cmp_dir_size). */
FZ_UNUSED static void fz_seen_same(const fz_seen *a, const fz_seen *b, int cmp_dir_size)
{
    size_t i;
    FZ_CHECK(a->n == b->n);
    for (i = 0; i < a->n; i++) {
        FZ_CHECK(a->e[i].len == b->e[i].len);
        FZ_CHECK(memcmp(a->e[i].name, b->e[i].name, a->e[i].len) == 0);
        FZ_CHECK(a->e[i].is_dir == b->e[i].is_dir);
        if (cmp_dir_size || !a->e[i].is_dir) FZ_CHECK(a->e[i].size == b->e[i].size);
    }
}

/* A listing parser's failure: fz_check_error's rules, the code the one
   wanted, and an offset that says where, in a message that says "byte". */
FZ_UNUSED static void fz_check_listing_error(const wsync_error *err, wsync_result r, wsync_result want,
                                             size_t input_size)
{
    FZ_CHECK(r == want);
    fz_check_error(err, r, input_size);
    FZ_CHECK(err->offset != UINT64_MAX);
    FZ_CHECK(strstr(err->message, "byte") != NULL);
}

/* The first place needle[0..nn) stands in h[0..hn), NULL if none. */
FZ_UNUSED static const uint8_t *fz_memmem(const uint8_t *h, size_t hn, const void *needle, size_t nn)
{
    size_t i;
    if (nn == 0) return h;
    if (hn < nn) return NULL;
    for (i = 0; i + nn <= hn; i++)
        if (h[i] == *(const uint8_t *)needle && memcmp(h + i, needle, nn) == 0) return h + i;
    return NULL;
}

/* How many times lit stands in p[0..n), overlaps counted. */
FZ_UNUSED static size_t fz_count(const uint8_t *p, size_t n, const char *lit)
{
    size_t c = 0, l = strlen(lit), i;
    for (i = 0; i + l <= n; i++)
        if (p[i] == (uint8_t)lit[0] && memcmp(p + i, lit, l) == 0) c++;
    return c;
}

#endif
