/* wsync: the command-line tool. A thin layer over the public API of wsync.h:
   anything it does, a C program can do with the header alone.

   Exit codes: 0 success, 1 the input or the operation failed (reason on
   stderr), 2 usage error. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_USAGE 2

static const char *usage_text =
    "usage: wsync <command> [options]\n"
    "\n"
    "commands:\n"
    "  inspect FILE [--json]   validate a safetensors file and list its tensors\n"
    "                          and metadata (exit 0 valid, 1 invalid, 2 usage)\n"
    "  diff OLD NEW -o DELTA [--encoding packed|packed-max|trl-v1|trl-v3] [--step N]\n"
    "       [--base-step N] [--threads T]\n"
    "                          write the sparse delta OLD -> NEW\n"
    "  apply BASE DELTA -o OUT  patch BASE with DELTA (any encoding) into OUT\n"
    "  verify A B              exit 0 when every tensor is bit-identical, else 1\n"
    "                          with the first differences listed\n"
    "  demo                    the main job: a trainer publishing deltas and an\n"
    "                          inference follower (arrives with the chain work)\n"
    "  version                 print the library version\n"
    "\n"
    "options:\n"
    "  -h, --help              this text (also: wsync <command> --help)\n"
    "  --version               same as 'wsync version'\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "wsync: ");
    fprintf(stderr, fmt, arg);
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

/* Writes through a temporary file and renames it over `path`, so a reader
   never sees half a file. */
typedef struct out_file {
    char tmp[4096];
    const char *path;
    FILE *f;
} out_file;

static int out_open(out_file *o, const char *path)
{
    o->path = path;
    if (snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)time(NULL)) >= (int)sizeof o->tmp) {
        fprintf(stderr, "wsync: output path too long\n");
        return 0;
    }
    o->f = fopen(o->tmp, "wb");
    if (!o->f) {
        fprintf(stderr, "wsync: cannot create %s: %s\n", o->tmp, strerror(errno));
        return 0;
    }
    return 1;
}

static int out_commit(out_file *o, int ok)
{
    if (fflush(o->f) != 0 || ferror(o->f)) ok = 0;
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
                  "                  [--step N] [--base-step N] [--threads T]\n"
                  "Writes the elements that differ bitwise between OLD and NEW (safetensors files\n"
                  "with the same tensors) as a sparse delta, and prints what it holds.\n"
                  "packed (default) is wsync's fast compact format, packed-max its smallest;\n"
                  "trl-v1 and trl-v3 are TRL's. --threads encodes tensors in parallel (same output).\n", stdout);
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
        } else if (argv[i][0] == '-' && argv[i][1]) return usage_error("diff: unknown or incomplete option '%s'", argv[i]);
        else if (np < 2) paths[np++] = argv[i];
        else return usage_error("diff: unexpected argument '%s'", argv[i]);
    }
    if (np < 2 || !out) return usage_error("diff: %s", "needs OLD NEW -o DELTA");
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

static int cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    puts("wsync demo: the main job (a trainer publishing sparse bf16 deltas to a\n"
         "bucket each step and an inference process following bit-exactly) arrives\n"
         "with the delta chain. What exists today: the safetensors codec, the four\n"
         "delta encodings and the stores; try 'wsync diff OLD NEW -o DELTA', then\n"
         "'wsync apply OLD DELTA -o OUT' and 'wsync verify OUT NEW' (real AdamW steps\n"
         "are in tests/corpus/trajectory).");
    return 0;
}

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
    return usage_error("unknown command '%s'", cmd);
}
