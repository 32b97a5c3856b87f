/* wsync: the command-line tool. A thin layer over the public API of wsync.h:
   anything it does, a C program can do with the header alone.

   Exit codes: 0 success, 1 the input or the operation failed (reason on
   stderr), 2 usage error. */
#define _GNU_SOURCE 1 /* fork, pipe, sigaction, fsync under -std=c99; process_vm_writev for wsync_rdma.h */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_GEN_IMPLEMENTATION
#include "wsync_gen.h"
/* URL stores (http://, https://, s3://) need libcurl: the Makefile defines
   WSYNC_CLI_HTTP=1 and links -lcurl when its development files are there;
   without them the tool still builds and says so when given a URL. */
#if !defined(WSYNC_CLI_HTTP) || !WSYNC_CLI_HTTP
#define WSYNC_HTTP_NO_CURL
#endif
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"
/* The direct path (push-demo, plan): fabrics, executor, controller, planner. */
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2

static const char *usage_text =
    "usage: wsync <command> [options]\n"
    "\n"
    "commands:\n"
    "  inspect FILE [--json]   validate a safetensors file and list its tensors\n"
    "                          and metadata (exit 0 valid, 1 invalid, 2 usage)\n"
    "  diff OLD NEW -o DELTA [--encoding packed|packed-max|trl-v1|trl-v3] [--step N]\n"
    "       [--base-step N] [--threads T] [--range-coder]\n"
    "                          write the sparse delta OLD -> NEW\n"
    "  apply BASE DELTA -o OUT  patch BASE with DELTA (any encoding) into OUT\n"
    "  verify A B              exit 0 when every tensor is bit-identical, else 1\n"
    "                          with the first differences listed\n"
    "\n"
    "  publish --store DIR --step N MODEL [--encoding E] [--anchor-every K]\n"
    "       [--retain R] [--prefix P] [--threads T]\n"
    "                          publish MODEL as step N of the chain in DIR (trainer)\n"
    "  pull --store DIR MODEL [--step N] [--prefix P] [--threads T]\n"
    "                          bring the local file MODEL to the newest (or given)\n"
    "                          step of the chain, replacing it atomically\n"
    "  follow --store DIR MODEL [--interval S] [--max-steps N] [--until-step N]\n"
    "       [--prefix P] [--threads T]\n"
    "                          pull each time the chain moves, until stopped\n"
    "  log --store DIR [--prefix P] [--json]\n"
    "                          list the chain: HEAD, anchors, deltas\n"
    "                          (--store DIR: a directory, or the URL of an HTTP\n"
    "                          bucket: http://host:port/prefix, https://..., or\n"
    "                          s3://bucket/prefix with AWS_ENDPOINT_URL, AWS_REGION,\n"
    "                          AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)\n"
    "  gen --model M --step N -o FILE\n"
    "                          a training-like bf16 model at step N (for tests)\n"
    "  demo [--model tiny|qwen3-0.6b|qwen2.5-7b] [--steps N] [--bucket DIR]\n"
    "                          the main job: a trainer process publishing deltas\n"
    "                          and an inference process following bit-exactly\n"
    "  push-demo [--backend cma|shm|tcp] [--trainers T] [--inference I] [--reshard]\n"
    "       [--fp8] [--mesh-groups] [--kill ROLE:R@S] [--bench]\n"
    "                          the direct path with real processes: a controller,\n"
    "                          trainers writing into inference ranks' memory, every\n"
    "                          byte checked (wsync push-demo --help)\n"
    "  plan --model M --trainers T --inference I [--replicas R] [--nics-per-rank K]\n"
    "       [--nic-gbps G] [--dtype fp8|bf16] [--json]\n"
    "                          the direct path's schedule for a model and its\n"
    "                          simulated transfer time (wsync plan --help)\n"
    "  version                 print the library version\n"
    "\n"
    "options:\n"
    "  -h, --help              this text (also: wsync <command> --help)\n"
    "  --version               same as 'wsync version'\n";

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "wsync: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see 'wsync --help')\n");
    return EXIT_USAGE;
}

/* JSON string with the escapes RFC 8259 requires; bytes are valid UTF-8
   already (the reader checked), so they pass through. */
static void json_string(FILE *out, const char *s, size_t n)
{
    size_t i;
    fputc('"', out);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c == '\r') fputs("\\r", out);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

/* Names for a terminal: control bytes shown as '?'. */
static void plain_string(FILE *out, const char *s, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        fputc(c < 0x20 || c == 0x7F ? '?' : c, out);
    }
}

static void print_shape(FILE *out, const wsync_st_tensor *t)
{
    uint32_t d;
    fputc('[', out);
    for (d = 0; d < t->rank; d++) fprintf(out, "%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
    fputc(']', out);
}

static void inspect_json(FILE *out, const wsync_st_file *st)
{
    size_t i;
    fputs("{\"metadata\": ", out);
    if (st->metadata_kind != WSYNC_ST_METADATA_OBJECT) {
        fputs("null", out);
    } else {
        fputc('{', out);
        for (i = 0; i < st->n_metadata; i++) {
            if (i) fputs(", ", out);
            json_string(out, st->metadata[i].key, st->metadata[i].key_len);
            fputs(": ", out);
            json_string(out, st->metadata[i].value, st->metadata[i].value_len);
        }
        fputc('}', out);
    }
    fputs(", \"tensors\": [", out);
    for (i = 0; i < st->n_tensors; i++) {
        const wsync_st_tensor *t = &st->tensors[i];
        if (i) fputs(", ", out);
        fputs("{\"name\": ", out);
        json_string(out, t->name, t->name_len);
        fprintf(out, ", \"dtype\": \"%s\", \"shape\": ", wsync_dtype_name(t->dtype));
        print_shape(out, t);
        fprintf(out, ", \"data_offsets\": [%llu, %llu]}", (unsigned long long)t->begin,
                (unsigned long long)t->end);
    }
    fputs("]}\n", out);
}

static void inspect_text(FILE *out, const char *path, const wsync_st_file *st)
{
    size_t i;
    fprintf(out, "%s: valid safetensors, %llu bytes: 8 + %llu header + %llu data, %zu tensor%s\n", path,
            (unsigned long long)st->size, (unsigned long long)st->header_len,
            (unsigned long long)st->data_len, st->n_tensors, st->n_tensors == 1 ? "" : "s");
    if (st->metadata_kind == WSYNC_ST_METADATA_NULL) fputs("metadata: null\n", out);
    else if (st->metadata_kind == WSYNC_ST_METADATA_ABSENT) fputs("metadata: none\n", out);
    else {
        fprintf(out, "metadata: %zu entr%s\n", st->n_metadata, st->n_metadata == 1 ? "y" : "ies");
        for (i = 0; i < st->n_metadata; i++) {
            fputs("  ", out);
            plain_string(out, st->metadata[i].key, st->metadata[i].key_len);
            fputs(" = ", out);
            plain_string(out, st->metadata[i].value, st->metadata[i].value_len);
            fputc('\n', out);
        }
    }
    for (i = 0; i < st->n_tensors; i++) {
        const wsync_st_tensor *t = &st->tensors[i];
        fputs("  ", out);
        plain_string(out, t->name, t->name_len);
        fprintf(out, "  %s ", wsync_dtype_name(t->dtype));
        print_shape(out, t);
        fprintf(out, "  bytes [%llu, %llu)\n", (unsigned long long)t->begin, (unsigned long long)t->end);
    }
}

static int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0, i;
    wsync_mapped map;
    wsync_st_file st;
    wsync_error err;
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs("usage: wsync inspect FILE [--json]\n"
                  "Validates FILE as safetensors (strictly: see README, 'The reader's rules') and\n"
                  "lists its tensors in file-offset order and its metadata. --json prints one\n"
                  "object: {\"metadata\": {...} or null, \"tensors\": [{\"name\", \"dtype\",\n"
                  "\"shape\", \"data_offsets\"}...]}. Exit 0 valid, 1 invalid, 2 usage error.\n",
                  stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != 0) return usage_error("inspect: unknown option '%s'", argv[i]);
        else if (path) return usage_error("inspect: one file at a time ('%s' is extra)", argv[i]);
        else path = argv[i];
    }
    if (!path) return usage_error("inspect: %s", "missing FILE");
    if (wsync_file_map(path, &map, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: %s\n", path, err.message);
        return 1;
    }
    if (wsync_st_parse(map.bytes, map.size, NULL, &st, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: invalid safetensors (%s): %s\n", path, wsync_result_name(err.code),
                err.message);
        wsync_file_unmap(&map);
        return 1;
    }
    if (json) inspect_json(stdout, &st);
    else inspect_text(stdout, path, &st);
    wsync_st_free(&st);
    wsync_file_unmap(&map);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "wsync: cannot write the output\n");
        return 1;
    }
    return 0;
}


/* ---- loading and saving whole files ---- */

typedef struct loaded {
    const char *path;
    wsync_mapped map;
    wsync_st_file st;
    wsync_tensor *t;   /* one per safetensors tensor, data into the mapping */
} loaded;

static int load_file(const char *path, loaded *L)
{
    wsync_error err;
    size_t i;
    memset(L, 0, sizeof *L);
    L->path = path;
    if (wsync_file_map(path, &L->map, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: %s\n", path, err.message);
        return 0;
    }
    if (wsync_st_parse(L->map.bytes, L->map.size, NULL, &L->st, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: invalid safetensors (%s): %s\n", path, wsync_result_name(err.code), err.message);
        wsync_file_unmap(&L->map);
        return 0;
    }
    /* the tensors become wsync_tensors, named by C strings */
    if (wsync_st_check_names(&L->st, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: %s: %s\n", path, wsync_result_name(err.code), err.message);
        wsync_st_free(&L->st);
        wsync_file_unmap(&L->map);
        return 0;
    }
    L->t = (wsync_tensor *)calloc(L->st.n_tensors + 1, sizeof *L->t);
    if (!L->t) {
        fprintf(stderr, "wsync: out of memory\n");
        return 0;
    }
    for (i = 0; i < L->st.n_tensors; i++) {
        const wsync_st_tensor *s = &L->st.tensors[i];
        L->t[i].name = s->name;
        L->t[i].dtype = s->dtype;
        L->t[i].rank = s->rank;
        L->t[i].shape = s->shape;
        L->t[i].data = (void *)s->data; /* read-only unless the caller copied the file */
        L->t[i].nbytes = s->end - s->begin;
    }
    return 1;
}

static void unload_file(loaded *L)
{
    free(L->t);
    wsync_st_free(&L->st);
    wsync_file_unmap(&L->map);
}

static int file_sink(void *user, const void *bytes, size_t len)
{
    return fwrite(bytes, 1, len, (FILE *)user) == len ? 0 : -1;
}

/* A temporary file next to `path` that this process made: `path` + mark
   (+ pid + ".", when pid > 0) + a random suffix, created with O_EXCL and
   O_NOFOLLOW, so that nothing already at the name (a file another run is
   writing, a planted symbolic link) is ever opened; a taken name is tried
   again with another suffix. The fd, or -1 with errno set. */
static int temp_create(char *buf, size_t cap, const char *path, const char *mark, long pid, mode_t mode)
{
    static uint64_t counter;
    int tries, n, fd;
    for (tries = 0; tries < 64; tries++) {
        struct timespec ts;
        uint64_t x;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec << 32 ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 20;
        x += ++counter * 0x9E3779B97F4A7C15ull;
        x = (x ^ x >> 30) * 0xBF58476D1CE4E5B9ull; /* splitmix64's finalizer: every input bit moves the suffix */
        x = (x ^ x >> 27) * 0x94D049BB133111EBull;
        x ^= x >> 31;
        if (pid > 0) n = snprintf(buf, cap, "%s%s%ld.%012llx", path, mark, pid, (unsigned long long)(x >> 16));
        else n = snprintf(buf, cap, "%s%s%012llx", path, mark, (unsigned long long)(x >> 16));
        if (n <= 0 || (size_t)n >= cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        fd = open(buf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

/* Writes through a temporary file of its own (temp_create), fsyncs it and
   renames it over `path`, so a reader never sees half a file and two runs
   writing one path each leave it whole. */
typedef struct out_file {
    char tmp[4096];
    const char *path;
    FILE *f;
} out_file;

static int out_open(out_file *o, const char *path)
{
    int fd;
    o->path = path;
    o->f = NULL;
    if ((fd = temp_create(o->tmp, sizeof o->tmp, path, ".tmp.", 0, 0666)) < 0 || !(o->f = fdopen(fd, "wb"))) {
        fprintf(stderr, "wsync: cannot create a temporary file for %s: %s\n", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            remove(o->tmp);
        }
        return 0;
    }
    return 1;
}

static int out_commit(out_file *o, int ok)
{
    if (fflush(o->f) != 0 || ferror(o->f) || fsync(fileno(o->f)) != 0) ok = 0;
    if (fclose(o->f) != 0) ok = 0;
    if (ok && rename(o->tmp, o->path) != 0) {
        fprintf(stderr, "wsync: cannot rename %s to %s: %s\n", o->tmp, o->path, strerror(errno));
        ok = 0;
    }
    if (!ok) remove(o->tmp);
    return ok;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-') return 0;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == 0;
}

/* Pairs NEW's tensors with OLD's by name; both files must hold the same set. */
static int pair_tensors(loaded *old, loaded *nw, wsync_tensor **base_out)
{
    size_t i;
    wsync_tensor *base;
    if (old->st.n_tensors != nw->st.n_tensors) {
        fprintf(stderr, "wsync: %s has %zu tensors, %s has %zu\n", old->path, old->st.n_tensors, nw->path,
                nw->st.n_tensors);
        return 0;
    }
    base = (wsync_tensor *)calloc(nw->st.n_tensors + 1, sizeof *base);
    if (!base) return 0;
    for (i = 0; i < nw->st.n_tensors; i++) {
        const wsync_st_tensor *o = wsync_st_find_n(&old->st, nw->t[i].name, nw->st.tensors[i].name_len);
        if (!o) {
            fprintf(stderr, "wsync: tensor '%s' is in %s but not in %s\n", nw->t[i].name, nw->path, old->path);
            free(base);
            return 0;
        }
        base[i] = old->t[o - old->st.tensors];
    }
    *base_out = base;
    return 1;
}

static int cmd_diff(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL}, *out = NULL;
    int np = 0, i, ok;
    loaded a, b;
    wsync_tensor *base = NULL;
    wsync_delta_options o;
    wsync_delta_stats st;
    wsync_error err;
    out_file of;
    memset(&o, 0, sizeof o);
    o.encoding = WSYNC_ENCODING_PACKED;
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs("usage: wsync diff OLD NEW -o DELTA [--encoding packed|packed-max|trl-v1|trl-v3]\n"
                  "                  [--step N] [--base-step N] [--threads T] [--range-coder]\n"
                  "Writes the elements that differ bitwise between OLD and NEW (safetensors files\n"
                  "with the same tensors) as a sparse delta, and prints what it holds.\n"
                  "packed (default) is wsync's fast compact format, packed-max its smallest;\n"
                  "trl-v1 and trl-v3 are TRL's. --threads encodes tensors in parallel (same output).\n"
                  "--range-coder (packed-max only) writes the older range coder, for readers that\n"
                  "predate the class-Rice coder; larger and slower to apply.\n", stdout);
            return 0;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[++i];
        else if (strcmp(argv[i], "--encoding") == 0 && i + 1 < argc) {
            o.encoding = wsync_encoding_from_name(argv[++i]);
            if (!o.encoding) return usage_error("diff: unknown encoding '%s'", argv[i]);
        } else if (strcmp(argv[i], "--step") == 0 && i + 1 < argc) {
            if (!parse_u64(argv[++i], &o.step)) return usage_error("diff: bad --step '%s'", argv[i]);
        } else if (strcmp(argv[i], "--base-step") == 0 && i + 1 < argc) {
            if (!parse_u64(argv[++i], &o.base_step)) return usage_error("diff: bad --base-step '%s'", argv[i]);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            uint64_t t;
            if (!parse_u64(argv[++i], &t) || t < 1 || t > 16) return usage_error("diff: --threads takes 1..16, not '%s'", argv[i]);
            o.threads = (unsigned)t;
        } else if (strcmp(argv[i], "--range-coder") == 0) o.flags |= WSYNC_DELTA_RANGE_CODER;
        else if (argv[i][0] == '-' && argv[i][1]) return usage_error("diff: unknown or incomplete option '%s'", argv[i]);
        else if (np < 2) paths[np++] = argv[i];
        else return usage_error("diff: unexpected argument '%s'", argv[i]);
    }
    if (np < 2 || !out) return usage_error("diff: %s", "needs OLD NEW -o DELTA");
    if ((o.flags & WSYNC_DELTA_RANGE_CODER) && o.encoding != WSYNC_ENCODING_PACKED_MAX)
        return usage_error("diff: %s", "--range-coder is for --encoding packed-max");
    if (!load_file(paths[0], &a)) return 1;
    if (!load_file(paths[1], &b)) {
        unload_file(&a);
        return 1;
    }
    ok = pair_tensors(&a, &b, &base) && out_open(&of, out);
    if (ok) {
        ok = wsync_delta_encode(base, b.t, b.st.n_tensors, &o, file_sink, of.f, &st, &err) == WSYNC_OK;
        if (!ok) fprintf(stderr, "wsync: diff: %s\n", err.message);
        ok = out_commit(&of, ok);
    }
    if (ok) {
        printf("%s: %s delta, %llu of %llu elements changed (%.4f%%) in %llu of %llu tensors\n", out,
               wsync_encoding_name(st.encoding), (unsigned long long)st.changed, (unsigned long long)st.elements,
               st.elements ? 100.0 * (double)st.changed / (double)st.elements : 0.0,
               (unsigned long long)st.changed_tensors, (unsigned long long)st.tensors);
        printf("delta bytes: %llu (%.3f bytes per changed element; dense NEW is %llu bytes)\n",
               (unsigned long long)st.bytes, st.changed ? (double)st.bytes / (double)st.changed : 0.0,
               (unsigned long long)b.map.size);
    }
    free(base);
    unload_file(&a);
    unload_file(&b);
    return ok ? 0 : 1;
}

static int cmd_apply(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL}, *out = NULL;
    int np = 0, i, ok = 0;
    loaded base, delta;
    wsync_delta_options o;
    memset(&o, 0, sizeof o);
    uint8_t *copy = NULL;
    wsync_st_file st;
    wsync_tensor *t = NULL;
    wsync_delta_stats ds;
    wsync_error err;
    out_file of;
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs("usage: wsync apply BASE DELTA -o OUT [--threads T]\n"
                  "Patches a copy of BASE with DELTA (packed, trl-v1 or trl-v3, detected) and writes\n"
                  "it to OUT atomically. The delta is checked in full first: a wrong base, a\n"
                  "corrupt or truncated delta is an error and OUT is not written.\n", stdout);
            return 0;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            uint64_t t;
            if (!parse_u64(argv[++i], &t) || t < 1 || t > 16) return usage_error("apply: --threads takes 1..16, not '%s'", argv[i]);
            o.threads = (unsigned)t;
        } else if (argv[i][0] == '-' && argv[i][1]) return usage_error("apply: unknown or incomplete option '%s'", argv[i]);
        else if (np < 2) paths[np++] = argv[i];
        else return usage_error("apply: unexpected argument '%s'", argv[i]);
    }
    if (np < 2 || !out) return usage_error("apply: %s", "needs BASE DELTA -o OUT");
    if (!load_file(paths[0], &base)) return 1;
    memset(&delta, 0, sizeof delta);
    if (wsync_file_map(paths[1], &delta.map, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: %s\n", paths[1], err.message);
        unload_file(&base);
        return 1;
    }
    /* Patch a private copy of BASE, then write it out whole. */
    copy = (uint8_t *)malloc(base.map.size ? (size_t)base.map.size : 1);
    memset(&st, 0, sizeof st);
    if (!copy) fprintf(stderr, "wsync: out of memory\n");
    else {
        memcpy(copy, base.map.bytes, (size_t)base.map.size);
        if (wsync_st_parse(copy, base.map.size, NULL, &st, &err) == WSYNC_OK &&
            (t = (wsync_tensor *)calloc(st.n_tensors + 1, sizeof *t)) != NULL) {
            for (i = 0; i < (int)st.n_tensors; i++) {
                t[i] = base.t[i];
                t[i].data = (void *)st.tensors[i].data;
            }
            if (wsync_delta_apply(delta.map.bytes, delta.map.size, t, st.n_tensors, &o, &ds, &err) != WSYNC_OK)
                fprintf(stderr, "wsync: apply %s: %s: %s\n", paths[1], wsync_result_name(err.code), err.message);
            else if (out_open(&of, out)) {
                ok = fwrite(copy, 1, (size_t)base.map.size, of.f) == (size_t)base.map.size;
                ok = out_commit(&of, ok);
            }
        }
    }
    if (ok)
        printf("%s: applied %s delta (%llu changed elements in %llu tensors%s)\n", out,
               wsync_encoding_name(ds.encoding), (unsigned long long)ds.changed,
               (unsigned long long)ds.changed_tensors,
               ds.encoding == WSYNC_ENCODING_PACKED ? ", base and result digests verified" : "");
    free(t);
    wsync_st_free(&st);
    free(copy);
    wsync_file_unmap(&delta.map);
    unload_file(&base);
    return ok ? 0 : 1;
}

static void print_elem(const wsync_tensor *t, uint64_t k)
{
    const uint8_t *p = (const uint8_t *)t->data;
    unsigned w = wsync_dtype_bits(t->dtype) / 8, b;
    printf("0x");
    for (b = w; b-- > 0;) printf("%02x", p[k * w + b]);
    if (t->dtype == WSYNC_DTYPE_BF16) {
        uint16_t v;
        memcpy(&v, p + 2 * k, 2);
        printf(" (%g)", (double)wsync_bf16_to_f32(v));
    } else if (t->dtype == WSYNC_DTYPE_F32) {
        float v;
        memcpy(&v, p + 4 * k, 4);
        printf(" (%g)", (double)v);
    } else if (t->dtype == WSYNC_DTYPE_F16) {
        uint16_t v;
        memcpy(&v, p + 2 * k, 2);
        printf(" (%g)", (double)wsync_f16_to_f32(v));
    }
}

static int cmd_verify(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL};
    int np = 0, i, same = 1, shown = 0;
    size_t k;
    loaded a, b;
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs("usage: wsync verify A B\n"
                  "Exit 0 when A and B hold the same tensors (names, dtypes, shapes) with\n"
                  "bit-identical data; else 1, listing the first differences.\n", stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) return usage_error("verify: unknown option '%s'", argv[i]);
        else if (np < 2) paths[np++] = argv[i];
        else return usage_error("verify: unexpected argument '%s'", argv[i]);
    }
    if (np < 2) return usage_error("verify: %s", "needs A B");
    if (!load_file(paths[0], &a)) return 1;
    if (!load_file(paths[1], &b)) {
        unload_file(&a);
        return 1;
    }
    for (k = 0; k < a.st.n_tensors; k++) {
        const wsync_tensor *x = &a.t[k];
        const wsync_st_tensor *ys = wsync_st_find_n(&b.st, x->name, a.st.tensors[k].name_len);
        const wsync_tensor *y = ys ? &b.t[ys - b.st.tensors] : NULL;
        uint32_t d;
        int shape_same;
        if (!y) {
            if (shown++ < 20) printf("only in %s: %s\n", a.path, x->name);
            same = 0;
            continue;
        }
        shape_same = x->dtype == y->dtype && x->rank == y->rank;
        for (d = 0; shape_same && d < x->rank; d++) shape_same = x->shape[d] == y->shape[d];
        if (!shape_same) {
            if (shown++ < 20) printf("%s: dtype or shape differ (%s vs %s)\n", x->name, wsync_dtype_name(x->dtype),
                                     wsync_dtype_name(y->dtype));
            same = 0;
            continue;
        }
        if (x->nbytes && memcmp(x->data, y->data, (size_t)x->nbytes) != 0) {
            unsigned w = wsync_dtype_bits(x->dtype) >= 8 ? wsync_dtype_bits(x->dtype) / 8 : 1;
            uint64_t e, n = x->nbytes / w, count = 0;
            same = 0;
            for (e = 0; e < n; e++) {
                if (memcmp((const uint8_t *)x->data + e * w, (const uint8_t *)y->data + e * w, w) == 0) continue;
                if (count++ < 3 && shown < 20) {
                    shown++;
                    printf("%s[%llu]: ", x->name, (unsigned long long)e);
                    print_elem(x, e);
                    printf(" vs ");
                    print_elem(y, e);
                    printf("\n");
                }
            }
            printf("%s: %llu of %llu elements differ\n", x->name, (unsigned long long)count, (unsigned long long)n);
        }
    }
    for (k = 0; k < b.st.n_tensors; k++)
        if (!wsync_st_find_n(&a.st, b.t[k].name, b.st.tensors[k].name_len)) {
            if (shown++ < 20) printf("only in %s: %s\n", b.path, b.t[k].name);
            same = 0;
        }
    if (same) printf("identical: %zu tensors\n", a.st.n_tensors);
    unload_file(&a);
    unload_file(&b);
    return same ? 0 : 1;
}

/* ======================================================================
   The chain: publish, pull, follow, log (and gen, demo below)
   ====================================================================== */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* system-wide: comparable across processes */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A signal cuts the sleep short, so that loops see their stop flag at once. */
static void sleep_s(double s)
{
    struct timespec ts;
    if (!(s > 0)) return;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

/* Decimal units, as object stores and network links count. */
static const char *human_bytes(char *buf, size_t cap, uint64_t b)
{
    if (b < 1000) snprintf(buf, cap, "%llu B", (unsigned long long)b);
    else if (b < 1000000) snprintf(buf, cap, "%.1f kB", (double)b / 1e3);
    else if (b < 1000000000) snprintf(buf, cap, "%.1f MB", (double)b / 1e6);
    else snprintf(buf, cap, "%.2f GB", (double)b / 1e9);
    return buf;
}

static double percent(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* "wsync: CMD: WHAT: WSYNC_ERR_X: message"; returns 1 (the exit status). */
static int chain_fail(const char *cmd, const wsync_error *err, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "wsync: %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": %s: %s\n", wsync_result_name(err->code),
            err->message[0] ? err->message : wsync_result_str(err->code));
    return 1;
}

/* An error found by the tool itself, reported like the library's. */
static int tool_fail(const char *cmd, wsync_result code, const char *what, const char *fmt, ...)
{
    wsync_error err;
    va_list ap;
    memset(&err, 0, sizeof err);
    err.code = code;
    va_start(ap, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, ap);
    va_end(ap);
    return chain_fail(cmd, &err, "%s", what);
}

static int is_help(const char *a)
{
    return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

/* argv[*i] is option `name` with a value after it: *val gets the value. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    if (strcmp(argv[*i], name) != 0 || *i + 1 >= argc) return 0;
    *val = argv[++*i];
    return 1;
}

/* What every chain command takes: the store and how to read the chain. */
typedef struct chain_cli {
    const char *store;
    wsync_chain_options co;
} chain_cli;

/* Consumes --store, --prefix or --threads at argv[*i]: 1 when it was one,
   0 when not, -1 after a usage error (printed). */
static int chain_opt(const char *cmd, int argc, char **argv, int *i, chain_cli *c)
{
    const char *v;
    uint64_t t;
    if (opt_value(argc, argv, i, "--store", &v)) c->store = v;
    else if (opt_value(argc, argv, i, "--prefix", &v)) {
        char *p = argv[*i];
        size_t n = strlen(p);
        while (n > 0 && p[n - 1] == '/') p[--n] = 0; /* "p/" means "p": keys are "p/HEAD" */
        c->co.prefix = p;
    } else if (opt_value(argc, argv, i, "--threads", &v)) {
        if (!parse_u64(v, &t) || t < 1 || t > 16) return usage_error("%s: --threads takes 1..16, not '%s'", cmd, v), -1;
        c->co.threads = (unsigned)t;
    } else return 0;
    return 1;
}

static int parse_step(const char *s, uint64_t *out)
{
    return parse_u64(s, out) && *out <= WSYNC_STEP_MAX;
}

/* Readers pass must_exist: the directory store creates a missing root, and a
   mistyped --store should say so rather than read an empty chain. A store
   given as http:// or https:// is an HTTP bucket, s3://bucket/prefix an S3
   one (wsync_http.h). */
static int open_dir_store(const char *cmd, const char *dir, int must_exist, wsync_store *s)
{
    wsync_error err;
    struct stat sb;
    if (strncmp(dir, "http://", 7) == 0 || strncmp(dir, "https://", 8) == 0) {
        if (wsync_store_http_open(dir, NULL, s, &err) == WSYNC_OK) return 1;
        chain_fail(cmd, &err, "store %s", dir);
        return 0;
    }
    if (strncmp(dir, "s3://", 5) == 0) {
        /* endpoint, region and keys from AWS_ENDPOINT_URL, AWS_REGION,
           AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN */
        if (wsync_store_s3_open(dir, NULL, s, &err) == WSYNC_OK) return 1;
        chain_fail(cmd, &err, "store %s", dir);
        return 0;
    }
    if (must_exist && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        return tool_fail(cmd, WSYNC_ERR_NOT_FOUND, "store", "%s is not a directory", dir), 0;
    if (wsync_store_dir_open(dir, NULL, s, &err) == WSYNC_OK) return 1;
    chain_fail(cmd, &err, "store %s", dir);
    return 0;
}

/* The store key of a chain entry: entries name keys without the prefix. */
static int chain_key(char *buf, size_t cap, const char *prefix, const char *key)
{
    int n = prefix && *prefix ? snprintf(buf, cap, "%s/%s", prefix, key) : snprintf(buf, cap, "%s", key);
    return n > 0 && (size_t)n < cap;
}

static const char *kind_name(wsync_chain_kind k)
{
    return k == WSYNC_CHAIN_ANCHOR ? "anchor" : k == WSYNC_CHAIN_DELTA ? "delta" : "?";
}

/* ---- a model in memory, as one safetensors image ---- */

/* The local file's bytes in a private buffer: the subscriber patches the
   tensors' data in place (through `t`, views into buf), and saving writes
   the tensors back out with a new step. */
typedef struct image {
    uint8_t *buf;
    uint64_t size;
    wsync_st_file st;
    wsync_tensor *t;   /* st.n_tensors views into buf */
    int has_step;      /* the step the data hold, as the file claims it */
    uint64_t step;
} image;

static void image_free(image *im)
{
    free(im->t);
    wsync_st_free(&im->st);
    free(im->buf);
    memset(im, 0, sizeof *im);
}

/* Parses buf (filled by the caller) and builds the views. */
static int image_parse(const char *cmd, const char *what, image *im)
{
    wsync_error err;
    size_t i;
    if (wsync_st_parse(im->buf, im->size, NULL, &im->st, &err) != WSYNC_OK)
        return chain_fail(cmd, &err, "%s: invalid safetensors", what), 0;
    if (wsync_st_check_names(&im->st, &err) != WSYNC_OK) /* the views are named by C strings */
        return chain_fail(cmd, &err, "%s", what), 0;
    im->t = (wsync_tensor *)calloc(im->st.n_tensors + 1, sizeof *im->t);
    if (!im->t) return tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, what, "%zu tensor views", im->st.n_tensors), 0;
    for (i = 0; i < im->st.n_tensors; i++) {
        const wsync_st_tensor *s = &im->st.tensors[i];
        im->t[i].name = s->name;
        im->t[i].dtype = s->dtype;
        im->t[i].rank = s->rank;
        im->t[i].shape = s->shape;
        im->t[i].data = im->buf + (s->data - im->buf); /* our buffer: writable */
        im->t[i].nbytes = s->end - s->begin;
    }
    return 1;
}

/* The file at `path`, copied into memory; its __metadata__ "step" (when
   present) says which step it holds. */
static int image_from_file(const char *cmd, const char *path, image *im)
{
    wsync_mapped map;
    wsync_error err;
    const char *step;
    memset(im, 0, sizeof *im);
    if (wsync_file_map(path, &map, &err) != WSYNC_OK) return chain_fail(cmd, &err, "%s", path), 0;
    im->size = map.size;
    im->buf = map.size <= (uint64_t)SIZE_MAX - 1 ? (uint8_t *)malloc((size_t)map.size + 1) : NULL;
    if (!im->buf) {
        wsync_file_unmap(&map);
        tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, path, "a copy of its %llu bytes", (unsigned long long)im->size);
        return 0;
    }
    memcpy(im->buf, map.bytes, (size_t)map.size);
    wsync_file_unmap(&map);
    if (!image_parse(cmd, path, im)) {
        image_free(im);
        return 0;
    }
    if ((step = wsync_st_metadata_get(&im->st, "step")) != NULL) {
        if (!parse_step(step, &im->step)) {
            tool_fail(cmd, WSYNC_ERR_INVALID_METADATA, path, "__metadata__ \"step\" is '%.40s', not a step number",
                      step);
            image_free(im);
            return 0;
        }
        im->has_step = 1;
    }
    return 1;
}

/* A model with the layout of the anchor the subscriber will start from (the
   chain's newest at or before `limit`), data zeroed. Only the anchor's
   header is read (two ranged gets): the subscriber fetches the rest. */
static int image_from_anchor(const char *cmd, const wsync_store *s, const wsync_chain_options *co, uint64_t limit,
                             image *im)
{
    wsync_chain_info info;
    wsync_error err;
    wsync_buffer b;
    uint8_t len8[8];
    uint64_t hlen = 0, size = 0, anchor = 0;
    char key[1200];
    size_t i;
    int found = 0, k;
    memset(im, 0, sizeof *im);
    if (wsync_chain_read(s, co, &info, &err) != WSYNC_OK) return chain_fail(cmd, &err, "reading the chain"), 0;
    if (limit == WSYNC_STEP_LATEST) limit = info.head_step;
    for (i = 0; i < info.n_entries; i++) /* ascending by step: the last match is the newest */
        if (info.entries[i].kind == WSYNC_CHAIN_ANCHOR && info.entries[i].step <= limit) {
            found = chain_key(key, sizeof key, co->prefix, info.entries[i].key);
            anchor = info.entries[i].step;
        }
    wsync_chain_info_free(&info);
    if (!found)
        return tool_fail(cmd, WSYNC_ERR_NO_PATH, "no local file to start from",
                         "the chain has no anchor at or before step %llu to take the tensors' layout from",
                         (unsigned long long)limit), 0;
    b.bytes = len8, b.cap = 8, b.len = 0;
    if (s->get(s->user, key, 0, 8, wsync_buffer_sink, &b, &size, &err) != WSYNC_OK)
        return chain_fail(cmd, &err, "reading the header of %s", key), 0;
    for (k = 7; k >= 0; k--) hlen = hlen << 8 | len8[k];
    if (hlen > WSYNC_ST_MAX_HEADER_SIZE || hlen > size - 8 || size > (uint64_t)SIZE_MAX - 1)
        return tool_fail(cmd, WSYNC_ERR_INVALID_HEADER, key, "header length %llu does not fit the object's %llu bytes",
                         (unsigned long long)hlen, (unsigned long long)size), 0;
    im->size = size;
    if (!(im->buf = (uint8_t *)calloc((size_t)size + 1, 1)))
        return tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, key, "%llu bytes for the model (anchor %llu)",
                         (unsigned long long)size, (unsigned long long)anchor), 0;
    memcpy(im->buf, len8, 8);
    b.bytes = im->buf + 8, b.cap = (size_t)hlen, b.len = 0;
    if (s->get(s->user, key, 8, hlen, wsync_buffer_sink, &b, NULL, &err) != WSYNC_OK) {
        image_free(im);
        return chain_fail(cmd, &err, "reading the header of %s", key), 0;
    }
    if (!image_parse(cmd, key, im)) {
        image_free(im);
        return 0;
    }
    return 1;
}

/* The directory holding `path` and the name in it. */
static void split_path(const char *path, char *dir, size_t cap, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, cap, ".");
        *base = path;
    } else {
        size_t n = (size_t)(slash - path);
        if (n == 0) n = 1; /* "/x": the root */
        snprintf(dir, cap, "%.*s", (int)n, path);
        *base = slash + 1;
    }
}

/* A rename is durable once the directory is synced. */
static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY), ok;
    if (fd < 0) return 0;
    ok = fsync(fd) == 0 || errno == EINVAL; /* some filesystems cannot sync a directory */
    close(fd);
    return ok;
}

/* Temporary files of writers that were killed claim nothing (the path is
   only ever replaced by a rename), but they take space: remove those whose
   process is gone (named `path` + WSYNC_STORE_TMP_MARK + pid, then "." and a
   suffix, or nothing after the pid as earlier versions wrote them). */
static void remove_stale_temps(const char *path)
{
    char dir[4096], full[8192];
    const char *base;
    size_t blen, mlen = strlen(WSYNC_STORE_TMP_MARK);
    DIR *d;
    struct dirent *e;
    split_path(path, dir, sizeof dir, &base);
    blen = strlen(base);
    if (!(d = opendir(dir))) return;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name, *p;
        char *end;
        long pid;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, WSYNC_STORE_TMP_MARK, mlen) != 0) continue;
        p = n + blen + mlen;
        errno = 0;
        pid = strtol(p, &end, 10);
        if (!*p || (*end && *end != '.') || errno || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to judge) */
        if (snprintf(full, sizeof full, "%s/%s", dir, n) < (int)sizeof full) unlink(full);
    }
    closedir(d);
}

/* Writes the image as a plain safetensors file claiming `step`: a temporary
   file of its own in the same directory (temp_create, with this process's
   pid for remove_stale_temps), fsync, rename over `path`, fsync of the
   directory. Whatever happens meanwhile (kill -9, a crash), `path` holds the
   old file or the new one, whole. Metadata: the image's, "step" set, an
   anchor's "wsync" mark dropped. */
static int image_save(const char *cmd, const image *im, const char *path, uint64_t step)
{
    size_t i, n = im->st.n_tensors, nm = 0;
    wsync_st_tensor_desc *d = (wsync_st_tensor_desc *)calloc(n + 1, sizeof *d);
    wsync_st_kv *meta = (wsync_st_kv *)calloc(im->st.n_metadata + 1, sizeof *meta);
    char tmp[4200], dir[4096], stepbuf[32];
    const char *base;
    wsync_error err;
    FILE *f = NULL;
    int fd, ok = 0;
    tmp[0] = 0;
    if (!d || !meta) {
        tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, path, "%s", "tensor list");
        goto done;
    }
    for (i = 0; i < n; i++) {
        d[i].name = im->t[i].name;
        d[i].name_len = im->st.tensors[i].name_len;
        d[i].dtype = im->t[i].dtype;
        d[i].rank = im->t[i].rank;
        d[i].shape = im->t[i].shape;
        d[i].data = im->t[i].data;
        d[i].nbytes = im->t[i].nbytes;
    }
    for (i = 0; i < im->st.n_metadata; i++) { /* an anchor's "wsync": "anchor" would be a lie here */
        const char *k = im->st.metadata[i].key;
        if (strcmp(k, "step") != 0 && strcmp(k, "wsync") != 0) meta[nm++] = im->st.metadata[i];
    }
    snprintf(stepbuf, sizeof stepbuf, "%llu", (unsigned long long)step);
    meta[nm].key = "step", meta[nm].key_len = 0, meta[nm].value = stepbuf, meta[nm].value_len = 0;
    nm++;
    if ((fd = temp_create(tmp, sizeof tmp, path, WSYNC_STORE_TMP_MARK, (long)getpid(), 0644)) < 0 ||
        !(f = fdopen(fd, "wb"))) {
        tool_fail(cmd, WSYNC_ERR_IO, path, "cannot create a temporary file: %s", strerror(errno));
        if (fd >= 0) close(fd);
        else tmp[0] = 0; /* nothing of ours to remove */
        goto done;
    }
    if (wsync_st_write(d, n, meta, nm, file_sink, f, NULL, &err) != WSYNC_OK) {
        chain_fail(cmd, &err, "writing %s", tmp);
        fclose(f);
        goto done;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        tool_fail(cmd, WSYNC_ERR_IO, tmp, "cannot write: %s", strerror(errno));
        fclose(f);
        goto done;
    }
    if (fclose(f) != 0) {
        tool_fail(cmd, WSYNC_ERR_IO, tmp, "cannot close: %s", strerror(errno));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        tool_fail(cmd, WSYNC_ERR_IO, tmp, "cannot rename to %s: %s", path, strerror(errno));
        goto done;
    }
    split_path(path, dir, sizeof dir, &base);
    if (!fsync_dir(dir))
        fprintf(stderr, "wsync: %s: warning: cannot fsync directory %s: %s\n", cmd, dir, strerror(errno));
    ok = 1;
done:
    if (!ok && tmp[0]) unlink(tmp);
    free(d);
    free(meta);
    return ok;
}

/* ---- publish ---- */

/* "step 7: delta from 6, 21512 of 1313152 elements changed (1.6382%), 35.3 kB
   vs 2.6 MB full, 6.8 ms" (an anchor step says "anchor 2.6 MB" first) */
static void print_publish(const wsync_publish_stats *ps, uint64_t full, double secs)
{
    char b1[32], b2[32];
    printf("step %llu: ", (unsigned long long)ps->step);
    if (ps->wrote_anchor)
        printf("anchor %s%s", human_bytes(b1, sizeof b1, ps->anchor_bytes), ps->wrote_delta ? " + " : "");
    if (ps->wrote_delta)
        printf("delta from %llu, %llu of %llu elements changed (%.4f%%), %s vs %s full",
               (unsigned long long)ps->base_step, (unsigned long long)ps->changed, (unsigned long long)ps->elements,
               percent(ps->changed, ps->elements), human_bytes(b1, sizeof b1, ps->delta_bytes),
               human_bytes(b2, sizeof b2, full));
    printf(", %.1f ms", 1e3 * secs);
    if (ps->deleted)
        printf(" (retention removed %llu object%s)", (unsigned long long)ps->deleted, ps->deleted == 1 ? "" : "s");
    printf("\n");
    if (ps->retention_failed)
        fprintf(stderr, "wsync: publish: warning: retention could not delete %llu object%s (a failed delete, or a "
                "store that cannot delete); HEAD still names them and the next publish tries again\n",
                (unsigned long long)ps->retention_failed, ps->retention_failed == 1 ? "" : "s");
}

static int cmd_publish(int argc, char **argv)
{
    const char *path = NULL, *v;
    chain_cli c;
    uint64_t step = 0, x, full = 0;
    int have_step = 0, i, rc = 1, k;
    loaded L;
    wsync_store store;
    wsync_publisher *pub = NULL;
    wsync_publish_stats ps;
    wsync_error err;
    double t0;
    size_t j;
    memset(&c, 0, sizeof c);
    for (i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs("usage: wsync publish --store DIR --step N MODEL [--encoding packed|packed-max|trl-v1|trl-v3]\n"
                  "                     [--anchor-every K] [--retain R] [--prefix P] [--threads T]\n"
                  "                     [--new-chain]\n"
                  "Publishes the safetensors file MODEL as step N of the chain in the store DIR (a\n"
                  "directory, http://..., https://... or s3://bucket/prefix): a sparse delta\n"
                  "against the last published step, or an anchor (a full snapshot: the first\n"
                  "step, every K steps (default 20), when the tensors change\n"
                  "or when a delta would be over half the full size); then HEAD; then retention\n"
                  "removes what is older than the last R steps (default 2K) and the newest anchor.\n"
                  "The publisher's state is the store, so successive runs form one chain. N must be\n"
                  "above HEAD's step; without --step, MODEL's __metadata__ \"step\" is used.\n"
                  "Retention deletes only objects an earlier HEAD of this chain named. Over a HEAD\n"
                  "that fails its check, or objects without HEAD (a foreign or damaged chain),\n"
                  "publish refuses; --new-chain starts a new chain there instead: it keeps every\n"
                  "object already there (remove them by hand if you want them gone) and takes only\n"
                  "a step N above the newest one present.\n"
                  "F32 tensors are published as BF16. Exit 0 published, 1 failed, 2 usage error.\n",
                  stdout);
            return 0;
        } else if ((k = chain_opt("publish", argc, argv, &i, &c)) != 0) {
            if (k < 0) return EXIT_USAGE;
        } else if (opt_value(argc, argv, &i, "--step", &v)) {
            if (!parse_step(v, &step)) return usage_error("publish: bad --step '%s'", v);
            have_step = 1;
        } else if (opt_value(argc, argv, &i, "--encoding", &v)) {
            if (!(c.co.encoding = wsync_encoding_from_name(v))) return usage_error("publish: unknown encoding '%s'", v);
        } else if (opt_value(argc, argv, &i, "--anchor-every", &v)) {
            if (!parse_u64(v, &x) || x < 1 || x > 1000000)
                return usage_error("publish: --anchor-every takes 1..1000000, not '%s'", v);
            c.co.anchor_every = (uint32_t)x;
        } else if (opt_value(argc, argv, &i, "--retain", &v)) {
            if (!parse_u64(v, &x) || x < 1 || x > 1000000)
                return usage_error("publish: --retain takes 1..1000000, not '%s'", v);
            c.co.retain = (uint32_t)x;
        } else if (strcmp(argv[i], "--new-chain") == 0) {
            c.co.flags |= WSYNC_CHAIN_NEW_CHAIN;
        } else if (argv[i][0] == '-' && argv[i][1])
            return usage_error("publish: unknown or incomplete option '%s'", argv[i]);
        else if (path) return usage_error("publish: one MODEL at a time ('%s' is extra)", argv[i]);
        else path = argv[i];
    }
    if (!c.store || !path) return usage_error("publish: %s", "needs --store DIR and MODEL");
    if (!load_file(path, &L)) return 1;
    if (!have_step) {
        const char *s = wsync_st_metadata_get(&L.st, "step");
        if (!s || !parse_step(s, &step)) {
            unload_file(&L);
            return usage_error("publish: %s has no __metadata__ \"step\": give --step N", path);
        }
    }
    if (!open_dir_store("publish", c.store, 0, &store)) {
        unload_file(&L);
        return 1;
    }
    for (j = 0; j < L.st.n_tensors; j++) /* what a dense copy of the published model weighs */
        full += L.t[j].dtype == WSYNC_DTYPE_F32 ? L.t[j].nbytes / 2 : L.t[j].nbytes;
    t0 = now_s();
    if (wsync_publisher_open(&store, &c.co, &pub, &err) != WSYNC_OK)
        chain_fail("publish", &err, "opening the chain in %s", c.store);
    else if (wsync_publish(pub, step, L.t, L.st.n_tensors, &ps, &err) != WSYNC_OK)
        chain_fail("publish", &err, "step %llu of %s to %s", (unsigned long long)step, path, c.store);
    else {
        print_publish(&ps, full, now_s() - t0);
        rc = 0;
    }
    wsync_publisher_close(pub);
    wsync_store_close(&store);
    unload_file(&L);
    return rc;
}

/* ---- pull and follow: a local file kept at a step of the chain ---- */

typedef struct puller {
    const char *cmd, *path;
    wsync_store store;
    int store_open;
    wsync_chain_options co;
    image im;
    wsync_subscriber *sub;
    int warned_unchecked;  /* said once: the chain has no HEAD to check against */
    int refused;           /* refused_step was not saved, and said so */
    uint64_t refused_step;
} puller;

static void puller_close(puller *p)
{
    wsync_subscriber_close(p->sub);
    image_free(&p->im);
    if (p->store_open) wsync_store_close(&p->store);
    p->sub = NULL;
    p->store_open = 0;
}

/* Loads the local file (or, when there is none, the layout of the anchor
   the chain will start from) and opens a subscriber over it. Every sync ends
   with the model's state digest checked against HEAD's: a file that did not
   hold the step it claimed is never saved as holding the next one. */
static int puller_open(puller *p, uint64_t limit)
{
    wsync_error err;
    struct stat sb;
    p->co.flags |= WSYNC_CHAIN_VERIFY_STATE;
    remove_stale_temps(p->path);
    if (stat(p->path, &sb) == 0 || errno != ENOENT) {
        if (!image_from_file(p->cmd, p->path, &p->im)) return 0;
    } else if (!image_from_anchor(p->cmd, &p->store, &p->co, limit, &p->im)) return 0;
    if (wsync_subscriber_open(&p->store, p->im.t, p->im.st.n_tensors, &p->co, &p->sub, &err) != WSYNC_OK)
        return chain_fail(p->cmd, &err, "opening a subscriber for %s", p->path), 0;
    if (p->im.has_step) wsync_subscriber_set_step(p->sub, p->im.step);
    return 1;
}

enum { PULL_OK, PULL_SYNC_FAILED, PULL_SAVE_FAILED };
enum { STATE_MATCH, STATE_MISMATCH, STATE_UNKNOWN };

/* Whether the model in memory is `step` as HEAD records it. checked: the
   sync already compared its state digest with HEAD's (WSYNC_CHAIN_VERIFY_STATE),
   so only whether HEAD has one for the step is asked; otherwise it is
   computed here. UNKNOWN: no HEAD (a listed chain), or HEAD no longer names
   the step. */
static int puller_state(puller *p, uint64_t step, int checked)
{
    wsync_chain_info info;
    wsync_error err;
    uint64_t want = 0, have = 0;
    int known = 0;
    size_t i;
    if (wsync_chain_read(&p->store, &p->co, &info, &err) != WSYNC_OK) return STATE_UNKNOWN;
    for (i = 0; info.has_head && i < info.n_entries; i++)
        if (info.entries[i].step == step && info.entries[i].has_digests) {
            want = info.entries[i].state;
            known = 1;
        }
    wsync_chain_info_free(&info);
    if (!known) return STATE_UNKNOWN;
    if (checked) return STATE_MATCH;
    if (wsync_state_digest(p->im.t, p->im.st.n_tensors, p->co.threads, &have, &err) != WSYNC_OK) return STATE_UNKNOWN;
    return have == want ? STATE_MATCH : STATE_MISMATCH;
}

/* The model in memory holds no known step: a new subscriber over it, which
   starts from an anchor at its next sync. */
static int puller_forget(puller *p)
{
    wsync_error err;
    wsync_subscriber_close(p->sub);
    p->sub = NULL;
    if (wsync_subscriber_open(&p->store, p->im.t, p->im.st.n_tensors, &p->co, &p->sub, &err) != WSYNC_OK)
        return chain_fail(p->cmd, &err, "opening a subscriber for %s", p->path), 0;
    return 1;
}

/* Whether the step a sync reached may be saved. A successful sync checked
   the model against HEAD's state digest; after a failed one the last step
   reached is checked here, since the sync checks only at its target: a file
   that did not hold the step it claimed, brought forward by deltas that
   cannot tell (trl), reaches a wrong step. Without HEAD nothing can be
   checked: a successful sync is saved with a warning, a failed one is not.
   Each refusal is said once per step (a follower retries). */
static int puller_may_save(puller *p, uint64_t now, int sync_ok)
{
    int state = puller_state(p, now, sync_ok);
    if (state == STATE_MATCH) return 1;
    if (state == STATE_UNKNOWN && sync_ok) {
        if (!p->warned_unchecked)
            fprintf(stderr, "wsync: %s: warning: the chain has no HEAD, so step %llu is saved to %s unchecked\n",
                    p->cmd, (unsigned long long)now, p->path);
        p->warned_unchecked = 1;
        return 1;
    }
    if (state == STATE_MISMATCH) {
        fprintf(stderr, "wsync: %s: %s: the model at step %llu, the last step reached, does not match HEAD's state "
                "digest (the file did not hold the step it claims); %s left as it was\n",
                p->cmd, p->path, (unsigned long long)now, p->path);
        if (!puller_forget(p)) return -1;
    } else if (!p->refused || p->refused_step != now)
        fprintf(stderr, "wsync: %s: %s: step %llu, the last step reached, cannot be checked (the chain has no "
                "state digest for it); %s left as it was\n", p->cmd, p->path, (unsigned long long)now, p->path);
    p->refused = 1;
    p->refused_step = now;
    return 0;
}

/* One sync, then the file: rewritten whenever the model in memory differs
   from it (another step, or the same step rebuilt because the file's bytes
   were not that step's), and only with a step puller_may_save allows. After
   a failed sync that is the last published step reached, consistent (never a
   mixture). */
static int puller_sync(puller *p, uint64_t step, wsync_sync_stats *st, double *secs, int *saved, wsync_error *err)
{
    uint64_t now;
    unsigned applied;
    double t0 = now_s();
    wsync_result r;
    int may;
    memset(st, 0, sizeof *st);
    r = wsync_subscriber_sync(p->sub, step, st, err);
    applied = st->anchors + st->deltas;
    if (r != WSYNC_OK && p->im.has_step && !wsync_subscriber_step(p->sub, &now)) {
        /* HEAD's state digest disagreed with the result: the file did not
           hold the step it claims (deltas without base digests cannot tell).
           The subscriber now knows no step; once more, from an anchor. */
        wsync_sync_stats first = *st;
        fprintf(stderr, "wsync: %s: %s: %s; starting again from an anchor\n", p->cmd, p->path, err->message);
        r = wsync_subscriber_sync(p->sub, step, st, err);
        st->bytes_fetched += first.bytes_fetched;
        st->rejected += first.rejected;
        st->anchors += first.anchors;
        st->deltas += first.deltas;
        applied = st->anchors + st->deltas;
    }
    *secs = now_s() - t0;
    *saved = 0;
    if (wsync_subscriber_step(p->sub, &now) && (applied || !p->im.has_step || now != p->im.step)) {
        if ((may = puller_may_save(p, now, r == WSYNC_OK)) < 0) return PULL_SAVE_FAILED;
        if (!may) return PULL_SYNC_FAILED;
        if (!image_save(p->cmd, &p->im, p->path, now)) return PULL_SAVE_FAILED;
        p->im.has_step = 1;
        p->im.step = now;
        p->refused = 0;
        *saved = 1;
    }
    return r == WSYNC_OK ? PULL_OK : PULL_SYNC_FAILED;
}

static void print_sync(const wsync_sync_stats *st, int had, uint64_t from, uint64_t to, double secs)
{
    char b[32];
    if (had) printf("step %llu -> %llu", (unsigned long long)from, (unsigned long long)to);
    else printf("no step -> %llu", (unsigned long long)to);
    printf(" (%s), %s fetched, %.1f ms", st->path[0] ? st->path : "?", human_bytes(b, sizeof b, st->bytes_fetched),
           1e3 * secs);
    if (st->rejected) printf(", %u object%s rejected and routed around", st->rejected, st->rejected == 1 ? "" : "s");
}

static int cmd_pull(int argc, char **argv)
{
    const char *v;
    puller p;
    uint64_t step = WSYNC_STEP_LATEST, from;
    int i, k, had, saved, status;
    wsync_sync_stats st;
    wsync_error err;
    double secs;
    chain_cli c;
    memset(&p, 0, sizeof p);
    memset(&c, 0, sizeof c);
    p.cmd = "pull";
    for (i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs("usage: wsync pull --store DIR MODEL [--step N] [--prefix P] [--threads T]\n"
                  "Brings the local safetensors file MODEL to the newest step of the chain in DIR\n"
                  "(or to step N) along the cheapest path of deltas and anchors, every object checked\n"
                  "against HEAD's digests. MODEL's __metadata__ \"step\" says where it is; a missing\n"
                  "MODEL is created from an anchor. The file is replaced atomically (temporary file,\n"
                  "fsync, rename): it always holds one whole published step and says which, and\n"
                  "is saved only when the model's state digest matches HEAD's for that step (a file\n"
                  "whose bytes are not the step it claims is rebuilt from an anchor). When the sync\n"
                  "fails part way, MODEL is left at the last step reached if that step checks, else\n"
                  "as it was, and the exit status is 1. Exit 0 up to date, 1 failed (reason on\n"
                  "stderr), 2 usage error.\n",
                  stdout);
            return 0;
        } else if ((k = chain_opt("pull", argc, argv, &i, &c)) != 0) {
            if (k < 0) return EXIT_USAGE;
        } else if (opt_value(argc, argv, &i, "--step", &v)) {
            if (!parse_step(v, &step)) return usage_error("pull: bad --step '%s'", v);
        } else if (argv[i][0] == '-' && argv[i][1])
            return usage_error("pull: unknown or incomplete option '%s'", argv[i]);
        else if (p.path) return usage_error("pull: one MODEL at a time ('%s' is extra)", argv[i]);
        else p.path = argv[i];
    }
    if (!c.store || !p.path) return usage_error("pull: %s", "needs --store DIR and MODEL");
    p.co = c.co;
    if (!open_dir_store("pull", c.store, 1, &p.store)) return 1;
    p.store_open = 1;
    if (!puller_open(&p, step)) {
        puller_close(&p);
        return 1;
    }
    had = p.im.has_step;
    from = p.im.step;
    status = puller_sync(&p, step, &st, &secs, &saved, &err);
    if (status == PULL_SYNC_FAILED) {
        char target[40];
        if (step == WSYNC_STEP_LATEST) snprintf(target, sizeof target, "HEAD");
        else snprintf(target, sizeof target, "step %llu", (unsigned long long)step);
        chain_fail("pull", &err, "%s: sync to %s of %s", p.path, target, c.store);
        if (saved) fprintf(stderr, "wsync: pull: %s now holds step %llu, the last step reached\n", p.path,
                           (unsigned long long)p.im.step);
    } else if (status == PULL_OK) {
        printf("%s: ", p.path);
        if (saved) print_sync(&st, had, from, p.im.step, secs);
        else printf("at step %llu already (HEAD %llu), %.1f ms", (unsigned long long)p.im.step,
                    (unsigned long long)st.head_step, 1e3 * secs);
        printf("\n");
    }
    puller_close(&p);
    return status == PULL_OK ? 0 : 1;
}

static volatile sig_atomic_t stop_requested = 0;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* SIGINT/SIGTERM end `follow` between two pulls (never inside a file write);
   no SA_RESTART, so a sleep ends at once. */
static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* HEAD's step: 1 when the chain has one, 0 when it is empty or unreadable
   (printed once per distinct message: a follower outlives bad moments). */
static int poll_head(puller *p, uint64_t *head, char *last_msg, size_t cap)
{
    wsync_chain_info info;
    wsync_error err;
    wsync_result r = wsync_chain_read(&p->store, &p->co, &info, &err);
    if (r == WSYNC_OK) {
        *head = info.head_step;
        wsync_chain_info_free(&info);
        last_msg[0] = 0;
        return 1;
    }
    if (r != WSYNC_ERR_NOT_FOUND && strcmp(last_msg, err.message) != 0) {
        chain_fail(p->cmd, &err, "reading the chain");
        snprintf(last_msg, cap, "%s", err.message);
    }
    return 0;
}

typedef struct follow_opts {
    const char *store;
    double interval;       /* seconds between checks of HEAD */
    uint64_t max_steps;    /* stop after this many updates (0: no limit) */
    int has_until;
    uint64_t until;        /* stop once the file holds this step or a later one */
} follow_opts;

typedef struct follow_state {
    int opened;            /* the puller holds the model */
    int checked;           /* one sync has checked the file against HEAD */
    uint64_t updates;
    uint64_t failed_head;  /* HEAD step whose failure was reported (once) */
} follow_state;

static int follow_done(const puller *p, const follow_opts *o, const follow_state *f)
{
    if (o->has_until && p->im.has_step && p->im.step >= o->until) return 1;
    return o->max_steps && f->updates >= o->max_steps;
}

/* Pulls to HEAD: 1 when the file was updated, 0 when not (a failed sync is
   reported once per HEAD and retried at the next check), -1 when the file
   could not be written. */
static int follow_pull(puller *p, uint64_t head, follow_state *f)
{
    wsync_sync_stats st;
    wsync_error err;
    double secs;
    uint64_t from = p->im.step;
    int had = p->im.has_step, saved, status;
    status = puller_sync(p, WSYNC_STEP_LATEST, &st, &secs, &saved, &err);
    if (saved) {
        f->updates++;
        print_sync(&st, had, from, p->im.step, secs);
        printf(", %s written\n", p->path);
        fflush(stdout);
    }
    if (status == PULL_SAVE_FAILED) return -1;
    if (status == PULL_SYNC_FAILED && head != f->failed_head) {
        chain_fail(p->cmd, &err, "%s: sync to HEAD %llu", p->path, (unsigned long long)head);
        f->failed_head = head;
    }
    return saved;
}

static int follow_loop(puller *p, const follow_opts *o)
{
    follow_state f;
    uint64_t head = 0;
    char last_msg[384] = "";
    int rc = 0, k;
    memset(&f, 0, sizeof f);
    f.failed_head = UINT64_MAX;
    while (!stop_requested) {
        if (!poll_head(p, &head, last_msg, sizeof last_msg)) { /* no chain yet, or unreadable for now */
            sleep_s(o->interval);
            continue;
        }
        if (!f.opened) { /* the chain exists: now the file, or its anchor, gives the layout */
            if (!(f.opened = puller_open(p, WSYNC_STEP_LATEST))) return 1;
            printf("%s: following %s", p->path, o->store);
            if (p->im.has_step) printf(" from step %llu", (unsigned long long)p->im.step);
            printf("\n");
            fflush(stdout);
        }
        if (follow_done(p, o, &f)) break;
        /* the first sync also checks a file that claims HEAD's step: its
           bytes may not be that step's, and nothing else would look */
        if (!f.checked || !p->im.has_step || head != p->im.step) {
            f.checked = 1;
            if ((k = follow_pull(p, head, &f)) < 0) {
                rc = 1;
                break;
            }
            if (follow_done(p, o, &f)) break;
            if (k > 0) continue; /* updated: HEAD may have moved on meanwhile */
        }
        sleep_s(o->interval);
    }
    if (stop_requested) printf("%s: stopped by a signal%s\n", p->path, p->im.has_step ? "" : " (no step pulled)");
    if (p->im.has_step)
        printf("%s: at step %llu after %llu update%s\n", p->path, (unsigned long long)p->im.step,
               (unsigned long long)f.updates, f.updates == 1 ? "" : "s");
    return rc;
}

static int cmd_follow(int argc, char **argv)
{
    const char *v;
    puller p;
    chain_cli c;
    follow_opts o;
    int i, k, rc;
    memset(&p, 0, sizeof p);
    memset(&c, 0, sizeof c);
    memset(&o, 0, sizeof o);
    o.interval = 1.0;
    p.cmd = "follow";
    for (i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs("usage: wsync follow --store DIR MODEL [--interval S] [--max-steps N] [--until-step N]\n"
                  "                    [--prefix P] [--threads T]\n"
                  "Keeps the local file MODEL at the newest step of the chain in DIR: checks HEAD every\n"
                  "S seconds (default 1.0; fractions allowed) and, when it moved, pulls the new\n"
                  "objects into the copy held in memory and replaces MODEL atomically, printing one\n"
                  "line per update. Stops after N updates (--max-steps), once step N is reached\n"
                  "(--until-step), or on SIGINT/SIGTERM (exit 0). A failed sync is reported and\n"
                  "retried at the next check; MODEL stays at the last step reached that checks\n"
                  "against HEAD's state digest (wsync pull --help). The first check syncs even when\n"
                  "MODEL claims HEAD's step, so a damaged file is repaired.\n",
                  stdout);
            return 0;
        } else if ((k = chain_opt("follow", argc, argv, &i, &c)) != 0) {
            if (k < 0) return EXIT_USAGE;
        } else if (opt_value(argc, argv, &i, "--interval", &v)) {
            char *end;
            errno = 0;
            o.interval = strtod(v, &end);
            if (!*v || *end || errno || !(o.interval > 0 && o.interval <= 86400))
                return usage_error("follow: --interval takes seconds above 0 (e.g. 0.5), not '%s'", v);
        } else if (opt_value(argc, argv, &i, "--max-steps", &v)) {
            if (!parse_u64(v, &o.max_steps) || o.max_steps < 1) return usage_error("follow: bad --max-steps '%s'", v);
        } else if (opt_value(argc, argv, &i, "--until-step", &v)) {
            if (!parse_step(v, &o.until)) return usage_error("follow: bad --until-step '%s'", v);
            o.has_until = 1;
        } else if (argv[i][0] == '-' && argv[i][1])
            return usage_error("follow: unknown or incomplete option '%s'", argv[i]);
        else if (p.path) return usage_error("follow: one MODEL at a time ('%s' is extra)", argv[i]);
        else p.path = argv[i];
    }
    if (!c.store || !p.path) return usage_error("follow: %s", "needs --store DIR and MODEL");
    p.co = c.co;
    o.store = c.store;
    catch_stop_signals();
    if (!open_dir_store("follow", c.store, 0, &p.store)) return 1;
    p.store_open = 1;
    rc = follow_loop(&p, &o);
    puller_close(&p);
    return rc;
}

/* ---- log ---- */

static void json_hex(FILE *out, int known, uint64_t v)
{
    if (known) fprintf(out, "\"%016llx\"", (unsigned long long)v);
    else fputs("null", out);
}

static void log_json(const chain_cli *c, const wsync_chain_info *in)
{
    size_t i;
    fputs("{\"store\": ", stdout);
    json_string(stdout, c->store, strlen(c->store));
    fputs(", \"prefix\": ", stdout);
    if (c->co.prefix && *c->co.prefix) json_string(stdout, c->co.prefix, strlen(c->co.prefix));
    else fputs("null", stdout);
    printf(", \"source\": \"%s\", \"head_step\": %llu, \"anchor_step\": %llu, \"head_state\": ",
           in->has_head ? "HEAD" : "listing", (unsigned long long)in->head_step, (unsigned long long)in->anchor_step);
    json_hex(stdout, in->has_head, in->head_state);
    fputs(", \"encoding\": ", stdout);
    if (in->encoding) printf("\"%s\"", wsync_encoding_name(in->encoding));
    else fputs("null", stdout);
    fputs(", \"entries\": [", stdout);
    for (i = 0; i < in->n_entries; i++) {
        const wsync_chain_entry *e = &in->entries[i];
        printf("%s{\"kind\": \"%s\", \"step\": %llu, \"base\": %llu, \"bytes\": %llu, \"digest\": ", i ? ", " : "",
               kind_name(e->kind), (unsigned long long)e->step, (unsigned long long)e->base,
               (unsigned long long)e->bytes);
        json_hex(stdout, e->has_digests, e->digest);
        fputs(", \"state\": ", stdout);
        json_hex(stdout, e->has_digests, e->state);
        fputs(", \"key\": ", stdout);
        json_string(stdout, e->key, strlen(e->key));
        fputs("}", stdout);
    }
    fputs("]}\n", stdout);
}

static void log_text(const chain_cli *c, const wsync_chain_info *in)
{
    size_t i;
    printf("%s%s%s: chain read from %s, head step %llu, newest anchor %llu", c->store,
           c->co.prefix && *c->co.prefix ? " prefix " : "", c->co.prefix ? c->co.prefix : "",
           in->has_head ? "HEAD" : "a listing (no HEAD)", (unsigned long long)in->head_step,
           (unsigned long long)in->anchor_step);
    if (in->encoding) printf(", %s deltas", wsync_encoding_name(in->encoding));
    if (in->has_head) printf(", state %016llx", (unsigned long long)in->head_state);
    printf("\n%-6s  %15s  %15s  %12s  %-16s  %s\n", "kind", "step", "base", "bytes", "digest", "key");
    for (i = 0; i < in->n_entries; i++) {
        const wsync_chain_entry *e = &in->entries[i];
        char hex[20];
        if (e->has_digests) snprintf(hex, sizeof hex, "%016llx", (unsigned long long)e->digest);
        else snprintf(hex, sizeof hex, "-");
        printf("%-6s  %15llu  %15llu  %12llu  %-16s  %s\n", kind_name(e->kind), (unsigned long long)e->step,
               (unsigned long long)e->base, (unsigned long long)e->bytes, hex, e->key);
    }
}

static int cmd_log(int argc, char **argv)
{
    chain_cli c;
    int i, k, json = 0, rc = 0;
    wsync_store store;
    wsync_chain_info info;
    wsync_error err;
    memset(&c, 0, sizeof c);
    for (i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs("usage: wsync log --store DIR [--prefix P] [--json]\n"
                  "Lists the chain in the directory store DIR: read from HEAD (or, in a bucket without\n"
                  "one, from a listing of anchors/ and deltas/), the head step, then one row per\n"
                  "object: kind, step, base step, bytes, digest of its bytes (from HEAD), key.\n"
                  "--json prints one object: {\"store\", \"prefix\", \"source\": \"HEAD\"|\"listing\",\n"
                  "\"head_step\", \"anchor_step\", \"head_state\", \"encoding\", \"entries\": [{\"kind\",\n"
                  "\"step\", \"base\", \"bytes\", \"digest\", \"state\", \"key\"}...]}, digests as 16 hex\n"
                  "digits or null. Exit 0 listed, 1 empty or unreadable chain, 2 usage error.\n",
                  stdout);
            return 0;
        } else if ((k = chain_opt("log", argc, argv, &i, &c)) != 0) {
            if (k < 0) return EXIT_USAGE;
        } else if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (argv[i][0] == '-' && argv[i][1]) return usage_error("log: unknown or incomplete option '%s'", argv[i]);
        else return usage_error("log: unexpected argument '%s'", argv[i]);
    }
    if (!c.store) return usage_error("log: %s", "needs --store DIR");
    if (!open_dir_store("log", c.store, 1, &store)) return 1;
    if (wsync_chain_read(&store, &c.co, &info, &err) != WSYNC_OK)
        rc = chain_fail("log", &err, "reading the chain in %s", c.store);
    else {
        if (json) log_json(&c, &info);
        else log_text(&c, &info);
        wsync_chain_info_free(&info);
    }
    wsync_store_close(&store);
    return rc;
}

/* ---- gen: a training-like model at a step, for tests and experiments ---- */

static int usage_models(const char *cmd, const char *name)
{
    size_t i;
    fprintf(stderr, "wsync: %s: unknown model '%s'; known:", cmd, name);
    for (i = 0; wsync_gen_model_name(i); i++) fprintf(stderr, " %s", wsync_gen_model_name(i));
    fprintf(stderr, "\n(see 'wsync %s --help')\n", cmd);
    return EXIT_USAGE;
}

static int cmd_gen(int argc, char **argv)
{
    const char *model = "tiny", *out = NULL, *v;
    uint64_t step = 0, vocab = 0, t, s;
    int i;
    char name[64];
    wsync_gen_model m;
    wsync_gen_config cfg;
    wsync_gen g;
    wsync_error err;
    wsync_result r;
    out_file of;
    wsync_gen_config_default(&cfg);
    cfg.mode = WSYNC_GEN_LIGHT;
    for (i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs("usage: wsync gen --model tiny|qwen3-0.6b|qwen2.5-7b --step N -o FILE\n"
                  "                 [--mode light|adamw] [--vocab V] [--threads T]\n"
                  "Writes the bf16 weights of a synthetic training run (examples/wsync_gen.h: AdamW-\n"
                  "like steps at lr 1e-6, about 1.6% of elements changing per step) at step N as a\n"
                  "safetensors file with __metadata__ {\"model\", \"step\"}. The same arguments give the\n"
                  "same bits on every run. --vocab resizes the embeddings (a bigger or smaller model);\n"
                  "--mode light (default) is the cheaper steady-state optimizer. For tests and demos.\n",
                  stdout);
            return 0;
        } else if (opt_value(argc, argv, &i, "--model", &v)) model = v;
        else if (opt_value(argc, argv, &i, "-o", &v)) out = v;
        else if (opt_value(argc, argv, &i, "--step", &v)) {
            if (!parse_u64(v, &step) || step > 100000) return usage_error("gen: --step takes 0..100000, not '%s'", v);
        } else if (opt_value(argc, argv, &i, "--vocab", &v)) {
            if (!parse_u64(v, &vocab) || vocab < 1 || vocab > 10000000) return usage_error("gen: bad --vocab '%s'", v);
        } else if (opt_value(argc, argv, &i, "--threads", &v)) {
            if (!parse_u64(v, &t) || t < 1 || t > 16) return usage_error("gen: --threads takes 1..16, not '%s'", v);
            cfg.threads = (unsigned)t;
        } else if (opt_value(argc, argv, &i, "--mode", &v)) {
            if (strcmp(v, "light") == 0) cfg.mode = WSYNC_GEN_LIGHT;
            else if (strcmp(v, "adamw") == 0) cfg.mode = WSYNC_GEN_ADAMW;
            else return usage_error("gen: --mode takes light or adamw, not '%s'", v);
        } else if (argv[i][0] == '-' && argv[i][1])
            return usage_error("gen: unknown or incomplete option '%s'", argv[i]);
        else return usage_error("gen: unexpected argument '%s'", argv[i]);
    }
    if (!out) return usage_error("gen: %s", "needs -o FILE");
    if (wsync_gen_model_lookup(model, &m) != WSYNC_OK) return usage_models("gen", model);
    if (vocab) {
        snprintf(name, sizeof name, "%s-vocab%llu", model, (unsigned long long)vocab);
        m.name = name;
        m.vocab_size = vocab;
        if ((r = wsync_gen_model_finish(&m)) != WSYNC_OK) {
            fprintf(stderr, "wsync: gen: model %s: %s\n", name, wsync_result_name(r));
            return 1;
        }
    }
    if ((r = wsync_gen_init(&g, &m, &cfg)) != WSYNC_OK) {
        fprintf(stderr, "wsync: gen: model %s: %s (%s)\n", m.name, wsync_result_name(r), wsync_result_str(r));
        return 1;
    }
    for (s = 0; s < step; s++) wsync_gen_step(&g);
    r = WSYNC_ERR_IO;
    if (out_open(&of, out)) {
        r = wsync_gen_write(&g, file_sink, of.f, &err);
        if (r != WSYNC_OK) chain_fail("gen", &err, "writing %s", out);
        if (!out_commit(&of, r == WSYNC_OK)) r = WSYNC_ERR_IO;
    }
    wsync_gen_free(&g);
    return r == WSYNC_OK ? 0 : 1;
}

/* ---- demo: a trainer and an inference follower, two processes ----

   The parent forks a trainer (wsync_gen's synthetic training + a publisher)
   and a follower (its own copy of the weights + a subscriber) over one
   directory store. They run in lockstep, so that every step is measured on
   its own: the trainer publishes step s and waits for the follower's ack
   before training step s+1. Both report to the parent through pipes; the
   parent compares their state digests (bit-exact check) and prints. Times
   are CLOCK_MONOTONIC, comparable across the processes. */

typedef struct demo_opts {
    const char *bucket;
    wsync_gen_model model;
    uint64_t steps;
    wsync_encoding encoding;
    unsigned threads;
    pid_t parent;
} demo_opts;

typedef struct trainer_report {
    uint64_t step;
    int wrote_anchor, wrote_delta;
    double work_s;                    /* init (step 0) or the training step */
    double publish_start, publish_end;
    uint64_t elements, changed, delta_bytes, anchor_bytes, full_bytes;
    uint64_t digest;                  /* the trainer's own state digest */
    uint64_t published_state;         /* what the publisher says it published */
} trainer_report;

typedef struct follower_report {
    uint64_t step;
    double sync_start, sync_end;
    uint64_t bytes_fetched;
    unsigned rejected;
    uint64_t digest;
    char path[160];
} follower_report;

static int write_full(int fd, const void *p, size_t n)
{
    const char *c = (const char *)p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        c += k, n -= (size_t)k;
    }
    return 1;
}

/* 0 at end of file: the writer is gone. */
static int read_full(int fd, void *p, size_t n)
{
    char *c = (char *)p;
    while (n) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        c += k, n -= (size_t)k;
    }
    return 1;
}

static void demo_chain_options(const demo_opts *o, wsync_chain_options *co)
{
    memset(co, 0, sizeof *co);
    co->encoding = o->encoding;
    co->threads = o->threads;
}

/* The trainer: init at step 0, publish (an anchor), then train + publish
   each step. Its digest is taken before publishing: same weights, and the
   follower's timings do not compete with it for the CPUs. */
static int demo_trainer(const demo_opts *o, int report_fd, int ack_fd)
{
    const char *who = "demo: trainer";
    wsync_gen_config cfg;
    wsync_gen g;
    wsync_tensor *t;
    wsync_store store;
    wsync_publisher *pub;
    wsync_chain_options co;
    wsync_publish_stats ps;
    wsync_error err;
    wsync_result r;
    size_t i, n = o->model.n_tensors;
    uint64_t s, full = 0, ack;
    double t0 = now_s(), init_s;
    wsync_gen_config_default(&cfg);
    cfg.mode = WSYNC_GEN_LIGHT;
    cfg.threads = o->threads;
    if ((r = wsync_gen_init(&g, &o->model, &cfg)) != WSYNC_OK) {
        return tool_fail(who, r, "generating the model", "%s: %s", o->model.name, wsync_result_str(r));
    }
    init_s = now_s() - t0;
    if (!(t = (wsync_tensor *)calloc(n, sizeof *t)))
        return tool_fail(who, WSYNC_ERR_OUT_OF_MEMORY, "views", "%zu tensors", n);
    for (i = 0; i < n; i++) { /* views of the generator's bf16 images, updated in place by each step */
        const wsync_gen_tensor_info *ti = &g.tensors[i].info;
        t[i].name = ti->name, t[i].dtype = WSYNC_DTYPE_BF16, t[i].rank = ti->rank, t[i].shape = ti->shape;
        t[i].data = g.bf16[i], t[i].nbytes = ti->nelem * 2;
        full += t[i].nbytes;
    }
    demo_chain_options(o, &co);
    if (!open_dir_store(who, o->bucket, 1, &store)) return 1;
    if (wsync_publisher_open(&store, &co, &pub, &err) != WSYNC_OK)
        return chain_fail(who, &err, "opening a publisher on %s", o->bucket);
    for (s = 0; s <= o->steps; s++) {
        trainer_report rep;
        memset(&rep, 0, sizeof rep);
        rep.step = s;
        rep.work_s = init_s;
        if (s > 0) {
            t0 = now_s();
            wsync_gen_step(&g);
            rep.work_s = now_s() - t0;
        }
        if (wsync_state_digest(t, n, o->threads, &rep.digest, &err) != WSYNC_OK)
            return chain_fail(who, &err, "state digest at step %llu", (unsigned long long)s);
        rep.publish_start = now_s();
        if (wsync_publish(pub, s, t, n, &ps, &err) != WSYNC_OK)
            return chain_fail(who, &err, "publishing step %llu", (unsigned long long)s);
        rep.publish_end = now_s();
        rep.wrote_anchor = ps.wrote_anchor, rep.wrote_delta = ps.wrote_delta;
        rep.elements = ps.elements, rep.changed = ps.changed;
        rep.delta_bytes = ps.delta_bytes, rep.anchor_bytes = ps.anchor_bytes, rep.full_bytes = full;
        rep.published_state = ps.state;
        if (!write_full(report_fd, &rep, sizeof rep)) {
            fprintf(stderr, "wsync: %s: the parent is gone\n", who);
            return 1;
        }
        if (!read_full(ack_fd, &ack, sizeof ack) || ack != s) {
            fprintf(stderr, "wsync: %s: no ack from the follower for step %llu\n", who, (unsigned long long)s);
            return 1;
        }
    }
    wsync_publisher_close(pub);
    wsync_store_close(&store);
    wsync_gen_free(&g);
    free(t);
    return 0;
}

/* Waits for HEAD to reach `step` (a cheap read of a small object every
   5 ms); gives up when the parent is gone. */
static int demo_wait_head(const wsync_store *store, const wsync_chain_options *co, uint64_t step, pid_t parent)
{
    for (;;) {
        wsync_chain_info info;
        int reached = 0;
        if (wsync_chain_read(store, co, &info, NULL) == WSYNC_OK) {
            reached = info.head_step >= step;
            wsync_chain_info_free(&info);
        }
        if (reached) return 1;
        if (getppid() != parent) return 0;
        sleep_s(0.005);
    }
}

/* The follower: its own weights (layout from the first anchor, zeroed until
   the subscriber loads it), synced to each step as soon as HEAD names it. */
static int demo_follower(const demo_opts *o, int report_fd, int ack_fd)
{
    const char *who = "demo: follower";
    wsync_store store;
    wsync_chain_options co;
    wsync_subscriber *sub;
    wsync_sync_stats st;
    wsync_error err;
    image im;
    uint64_t s;
    demo_chain_options(o, &co);
    if (!open_dir_store(who, o->bucket, 1, &store)) return 1;
    if (!demo_wait_head(&store, &co, 0, o->parent)) return 1;
    if (!image_from_anchor(who, &store, &co, WSYNC_STEP_LATEST, &im)) return 1;
    if (wsync_subscriber_open(&store, im.t, im.st.n_tensors, &co, &sub, &err) != WSYNC_OK)
        return chain_fail(who, &err, "opening a subscriber on %s", o->bucket);
    for (s = 0; s <= o->steps; s++) {
        follower_report rep;
        memset(&rep, 0, sizeof rep);
        rep.step = s;
        if (!demo_wait_head(&store, &co, s, o->parent)) return 1;
        rep.sync_start = now_s();
        if (wsync_subscriber_sync(sub, s, &st, &err) != WSYNC_OK)
            return chain_fail(who, &err, "syncing to step %llu", (unsigned long long)s);
        rep.sync_end = now_s();
        rep.bytes_fetched = st.bytes_fetched;
        rep.rejected = st.rejected;
        snprintf(rep.path, sizeof rep.path, "%s", st.path);
        if (wsync_state_digest(im.t, im.st.n_tensors, o->threads, &rep.digest, &err) != WSYNC_OK)
            return chain_fail(who, &err, "state digest at step %llu", (unsigned long long)s);
        if (!write_full(report_fd, &rep, sizeof rep) || !write_full(ack_fd, &s, sizeof s)) {
            fprintf(stderr, "wsync: %s: the parent or the trainer is gone\n", who);
            return 1;
        }
    }
    wsync_subscriber_close(sub);
    image_free(&im);
    wsync_store_close(&store);
    return 0;
}

/* Removes a file or a directory tree (ENOENT is fine). */
static int remove_tree(const char *path)
{
    struct stat sb;
    DIR *d;
    struct dirent *e;
    char sub[4096];
    int ok = 1;
    if (lstat(path, &sb) != 0) return errno == ENOENT;
    if (!S_ISDIR(sb.st_mode)) return unlink(path) == 0;
    if (!(d = opendir(path))) return 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub) ok = 0;
        else ok &= remove_tree(sub);
    }
    closedir(d);
    return rmdir(path) == 0 && ok;
}

/* A fresh chain in the bucket: the old chain's objects go, nothing else. */
static int demo_prepare_bucket(const char *bucket)
{
    static const char *const parts[] = {"anchors", "deltas", "HEAD"};
    char p[4096];
    size_t i;
    if (mkdir(bucket, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "wsync: demo: cannot create %s: %s\n", bucket, strerror(errno));
        return 0;
    }
    for (i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", bucket, parts[i]);
        if (!remove_tree(p)) {
            fprintf(stderr, "wsync: demo: cannot remove %s: %s\n", p, strerror(errno));
            return 0;
        }
    }
    return 1;
}

/* A child that stopped reporting: say how it ended, stop the other one. */
static int demo_child_gone(const char *who, pid_t pid, pid_t other, uint64_t step)
{
    int status = 0;
    kill(other, SIGTERM);
    waitpid(pid, &status, 0);
    waitpid(other, NULL, 0);
    if (WIFEXITED(status))
        fprintf(stderr, "wsync: demo: the %s exited with status %d before reporting step %llu\n", who,
                WEXITSTATUS(status), (unsigned long long)step);
    else if (WIFSIGNALED(status))
        fprintf(stderr, "wsync: demo: the %s was killed by signal %d (%s) before reporting step %llu%s\n", who,
                WTERMSIG(status), strsignal(WTERMSIG(status)), (unsigned long long)step,
                WTERMSIG(status) == SIGKILL ? " (out of memory?)" : "");
    return 1;
}

typedef struct demo_row {
    trainer_report t;
    follower_report f;
    int exact;
} demo_row;

static void demo_progress(const demo_row *r)
{
    char b[32];
    const trainer_report *t = &r->t;
    const follower_report *f = &r->f;
    printf("step %llu: %s %.2f s, published ", (unsigned long long)t->step, t->step ? "trained" : "initialised",
           t->work_s);
    if (t->wrote_delta)
        printf("delta %s (%.2f%% changed)%s", human_bytes(b, sizeof b, t->delta_bytes),
               percent(t->changed, t->elements), t->wrote_anchor ? " + anchor" : "");
    else printf("anchor %s", human_bytes(b, sizeof b, t->anchor_bytes));
    printf(" in %.0f ms; follower pulled %s (%s) in %.0f ms, latency %.0f ms: %s\n",
           1e3 * (t->publish_end - t->publish_start), human_bytes(b, sizeof b, f->bytes_fetched), f->path,
           1e3 * (f->sync_end - f->sync_start), 1e3 * (f->sync_end - t->publish_start),
           r->exact ? "bit-exact" : "MISMATCH");
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void demo_table(const demo_row *rows, uint64_t n, double wall)
{
    uint64_t i, deltas = 0, delta_bytes = 0, exact = 0;
    double *lat = (double *)calloc(n + 1, sizeof *lat);
    size_t nlat = 0;
    printf("\n%5s  %7s  %-6s  %9s  %9s  %9s  %10s  %10s  %10s  %s\n", "step", "train s", "kind", "changed %",
           "delta MB", "full MB", "publish ms", "pull+apply", "latency ms", "check");
    for (i = 0; i < n; i++) {
        const trainer_report *t = &rows[i].t;
        const follower_report *f = &rows[i].f;
        char changed[16], dmb[16];
        double latency = 1e3 * (f->sync_end - t->publish_start);
        if (t->wrote_delta) {
            snprintf(changed, sizeof changed, "%.3f", percent(t->changed, t->elements));
            snprintf(dmb, sizeof dmb, "%.2f", (double)t->delta_bytes / 1e6);
            deltas++, delta_bytes += t->delta_bytes;
            if (lat) lat[nlat++] = latency;
        } else snprintf(changed, sizeof changed, "-"), snprintf(dmb, sizeof dmb, "-");
        exact += (uint64_t)rows[i].exact;
        printf("%5llu  %7.2f  %-6s  %9s  %9s  %9.1f  %10.0f  %10.0f  %10.0f  %s\n", (unsigned long long)t->step,
               t->work_s, t->wrote_delta ? (t->wrote_anchor ? "both" : "delta") : "anchor", changed, dmb,
               (double)(t->wrote_anchor ? t->anchor_bytes : t->full_bytes) / 1e6,
               1e3 * (t->publish_end - t->publish_start), 1e3 * (f->sync_end - f->sync_start), latency,
               rows[i].exact ? "bit-exact" : "MISMATCH");
    }
    printf("\n%llu of %llu steps bit-exact (trainer and follower state digests equal)\n", (unsigned long long)exact,
           (unsigned long long)n);
    if (deltas && lat) {
        qsort(lat, nlat, sizeof *lat, cmp_double);
        printf("deltas: %.2f MB per step on average, %.2f%% of the full %.1f MB; publish-to-applied latency median "
               "%.0f ms, max %.0f ms\n",
               (double)delta_bytes / 1e6 / (double)deltas,
               percent(delta_bytes / deltas, rows[0].t.full_bytes), (double)rows[0].t.full_bytes / 1e6,
               lat[nlat / 2], lat[nlat - 1]);
    }
    printf("wall time %.1f s (training and model generation included; latencies exclude them)\n", wall);
    free(lat);
}

/* Reads both reports of each step and checks them; 0 when a child is gone. */
static int demo_collect(int tr_fd, int fo_fd, pid_t trainer, pid_t follower, demo_row *rows, uint64_t steps,
                        int *mismatches)
{
    uint64_t s;
    for (s = 0; s <= steps; s++) {
        demo_row *r = &rows[s];
        if (!read_full(tr_fd, &r->t, sizeof r->t)) return demo_child_gone("trainer", trainer, follower, s), 0;
        if (!read_full(fo_fd, &r->f, sizeof r->f)) return demo_child_gone("follower", follower, trainer, s), 0;
        /* the follower's weights, the trainer's, and what the publisher says it published */
        r->exact = r->t.step == s && r->f.step == s && r->t.digest == r->f.digest &&
                   r->t.digest == r->t.published_state;
        if (!r->exact) {
            (*mismatches)++;
            fprintf(stderr, "wsync: demo: step %llu: trainer state %016llx, published %016llx, follower %016llx\n",
                    (unsigned long long)s, (unsigned long long)r->t.digest, (unsigned long long)r->t.published_state,
                    (unsigned long long)r->f.digest);
        }
        demo_progress(r);
    }
    return 1;
}

static int demo_run(demo_opts *o)
{
    int tr[2], fo[2], ack[2], mismatches = 0, ok, status, rc = 0;
    pid_t trainer, follower = -1;
    demo_row *rows;
    double t0 = now_s();
    if (!(rows = (demo_row *)calloc((size_t)o->steps + 1, sizeof *rows))) {
        fprintf(stderr, "wsync: demo: out of memory\n");
        return 1;
    }
    if (pipe(tr) != 0 || pipe(fo) != 0 || pipe(ack) != 0) {
        fprintf(stderr, "wsync: demo: pipe: %s\n", strerror(errno));
        return 1;
    }
    o->parent = getpid();
    fflush(NULL); /* nothing buffered may be printed twice by the children */
    if ((trainer = fork()) == 0) {
        close(tr[0]), close(fo[0]), close(fo[1]), close(ack[1]);
        rc = demo_trainer(o, tr[1], ack[0]);
        fflush(NULL);
        _exit(rc);
    }
    if (trainer > 0 && (follower = fork()) == 0) {
        close(tr[0]), close(tr[1]), close(fo[0]), close(ack[0]);
        rc = demo_follower(o, fo[1], ack[1]);
        fflush(NULL);
        _exit(rc);
    }
    if (trainer < 0 || follower < 0) {
        fprintf(stderr, "wsync: demo: fork: %s\n", strerror(errno));
        if (trainer > 0) kill(trainer, SIGTERM), waitpid(trainer, NULL, 0);
        return 1;
    }
    /* only the children write to the pipes: their ends close here, so that a
       dead child reads as end of file */
    close(tr[1]), close(fo[1]), close(ack[0]), close(ack[1]);
    ok = demo_collect(tr[0], fo[0], trainer, follower, rows, o->steps, &mismatches);
    close(tr[0]), close(fo[0]);
    if (!ok) {
        free(rows);
        return 1;
    }
    if (waitpid(trainer, &status, 0) != trainer || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "wsync: demo: the trainer did not exit cleanly (status 0x%x)\n", (unsigned)status);
        rc = 1;
    }
    if (waitpid(follower, &status, 0) != follower || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "wsync: demo: the follower did not exit cleanly (status 0x%x)\n", (unsigned)status);
        rc = 1;
    }
    demo_table(rows, o->steps + 1, now_s() - t0);
    if (mismatches) {
        fprintf(stderr, "wsync: demo: %d step%s MISMATCH\n", mismatches, mismatches == 1 ? "" : "s");
        rc = 1;
    }
    free(rows);
    return rc;
}

static int cmd_demo(int argc, char **argv)
{
    const char *model = "qwen3-0.6b", *v;
    demo_opts o;
    uint64_t x;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int i;
    memset(&o, 0, sizeof o);
    o.bucket = "./demo-bucket";
    o.steps = 10;
    o.encoding = WSYNC_ENCODING_PACKED;
    o.threads = ncpu < 2 ? 2u : ncpu > 4 ? 4u : (unsigned)ncpu;
    for (i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs("usage: wsync demo [--model tiny|qwen3-0.6b|qwen2.5-7b] [--steps N] [--bucket DIR]\n"
                  "                  [--encoding packed|packed-max|trl-v1|trl-v3] [--threads T]\n"
                  "The main job, with two real processes: a trainer (a synthetic AdamW-like run of\n"
                  "the model, default qwen3-0.6b in bf16) publishes step 0 as an anchor and each of N\n"
                  "training steps (default 10) as a sparse delta to a directory store (DIR, default\n"
                  "./demo-bucket; its old chain is removed first); an inference follower, with its\n"
                  "own copy of the weights, applies each step as soon as HEAD names it. They run in\n"
                  "lockstep so each step is timed alone: publish, pull+apply, and publish-to-applied\n"
                  "latency (training excluded). Every step is checked bit-exact: trainer and follower\n"
                  "state digests must be equal. Exit 0 when all are, 1 otherwise.\n",
                  stdout);
            return 0;
        } else if (opt_value(argc, argv, &i, "--model", &v)) model = v;
        else if (opt_value(argc, argv, &i, "--bucket", &v)) o.bucket = v;
        else if (opt_value(argc, argv, &i, "--steps", &v)) {
            if (!parse_u64(v, &x) || x < 1 || x > 100000)
                return usage_error("demo: --steps takes 1..100000, not '%s'", v);
            o.steps = x;
        } else if (opt_value(argc, argv, &i, "--encoding", &v)) {
            if (!(o.encoding = wsync_encoding_from_name(v))) return usage_error("demo: unknown encoding '%s'", v);
        } else if (opt_value(argc, argv, &i, "--threads", &v)) {
            if (!parse_u64(v, &x) || x < 1 || x > 16) return usage_error("demo: --threads takes 1..16, not '%s'", v);
            o.threads = (unsigned)x;
        } else if (argv[i][0] == '-' && argv[i][1])
            return usage_error("demo: unknown or incomplete option '%s'", argv[i]);
        else return usage_error("demo: unexpected argument '%s'", argv[i]);
    }
    if (wsync_gen_model_lookup(model, &o.model) != WSYNC_OK) return usage_models("demo", model);
    if (!demo_prepare_bucket(o.bucket)) return 1;
    printf("wsync demo: %s, %llu bf16 parameters (%.1f MB); step 0 and %llu training steps\n", o.model.name,
           (unsigned long long)o.model.n_params, (double)o.model.n_params * 2 / 1e6, (unsigned long long)o.steps);
    printf("trainer and follower processes, directory store %s (fsync), %s deltas, %u threads each\n\n", o.bucket,
           wsync_encoding_name(o.encoding), o.threads);
    return demo_run(&o);
}

#include "wsync_push.h"
#include "wsync_plan.h"

int main(int argc, char **argv)
{
    const char *cmd;
    if (argc < 2) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("wsync %s\n", WSYNC_VERSION_STRING);
        return 0;
    }
    if (strcmp(cmd, "inspect") == 0) return cmd_inspect(argc - 2, argv + 2);
    if (strcmp(cmd, "demo") == 0) return cmd_demo(argc - 2, argv + 2);
    if (strcmp(cmd, "diff") == 0) return cmd_diff(argc - 2, argv + 2);
    if (strcmp(cmd, "apply") == 0) return cmd_apply(argc - 2, argv + 2);
    if (strcmp(cmd, "verify") == 0) return cmd_verify(argc - 2, argv + 2);
    if (strcmp(cmd, "publish") == 0) return cmd_publish(argc - 2, argv + 2);
    if (strcmp(cmd, "pull") == 0) return cmd_pull(argc - 2, argv + 2);
    if (strcmp(cmd, "follow") == 0) return cmd_follow(argc - 2, argv + 2);
    if (strcmp(cmd, "log") == 0) return cmd_log(argc - 2, argv + 2);
    if (strcmp(cmd, "gen") == 0) return cmd_gen(argc - 2, argv + 2);
    if (strcmp(cmd, "push-demo") == 0) return cmd_push_demo(argc - 2, argv + 2);
    if (strcmp(cmd, "plan") == 0) return cmd_plan(argc - 2, argv + 2);
    return usage_error("unknown command '%s'", cmd);
}
