/* wsync: the command-line tool. A thin layer over the public API of wsync.h:
   anything it does, a C program can do with the header alone.

   Exit codes: 0 success, 1 the input or the operation failed (reason on
   stderr), 2 usage error. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_USAGE 2

static const char *usage_text =
    "usage: wsync <command> [options]\n"
    "\n"
    "commands:\n"
    "  inspect FILE [--json]   validate a safetensors file and list its tensors\n"
    "                          and metadata (exit 0 valid, 1 invalid, 2 usage)\n"
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

static int cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    puts("wsync demo: the main job (a trainer publishing sparse bf16 deltas to a\n"
         "bucket each step and an inference process following bit-exactly) arrives\n"
         "with the delta and chain work. What exists today: the safetensors codec\n"
         "and conversions; try 'wsync inspect FILE'.");
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
    return usage_error("unknown command '%s'", cmd);
}
