/* cmd_delta.c - the wsync tool's commands on files: inspect, diff, apply,
   verify, and gen (a training-like model at a step). */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- inspect ---- */

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
            cli_json_string(out, st->metadata[i].key, st->metadata[i].key_len);
            fputs(": ", out);
            cli_json_string(out, st->metadata[i].value, st->metadata[i].value_len);
        }
        fputc('}', out);
    }
    fputs(", \"tensors\": [", out);
    for (i = 0; i < st->n_tensors; i++) {
        const wsync_st_tensor *t = &st->tensors[i];
        if (i) fputs(", ", out);
        fputs("{\"name\": ", out);
        cli_json_string(out, t->name, t->name_len);
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

int cmd_inspect(int argc, char **argv)
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
        } else if (argv[i][0] == '-' && argv[i][1] != 0)
            return cli_usage_error("inspect: unknown option '%s'", argv[i]);
        else if (path) return cli_usage_error("inspect: one file at a time ('%s' is extra)", argv[i]);
        else path = argv[i];
    }
    if (!path) return cli_usage_error("inspect: %s", "missing FILE");
    if (wsync_file_map(path, &map, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: %s\n", path, err.message);
        return 1;
    }
    if (wsync_st_parse(map.bytes, map.size, NULL, &st, &err) != WSYNC_OK) {
        char why[1024];
        fprintf(stderr, "wsync: %s: invalid safetensors (%s): %s\n", path, wsync_result_name(err.code),
                cli_st_why(map.bytes, map.size, &err, why, sizeof why));
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

/* ---- diff, apply, verify ---- */

/* Pairs NEW's tensors with OLD's by name; both files must hold the same set. */
static int pair_tensors(cli_loaded *old, cli_loaded *nw, wsync_tensor **base_out)
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

int cmd_diff(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL}, *out = NULL;
    int np = 0, i, ok;
    cli_loaded a, b;
    wsync_tensor *base = NULL;
    wsync_delta_options o;
    wsync_delta_stats st;
    wsync_error err;
    cli_out_file of;
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
            if (!o.encoding) return cli_usage_error("diff: unknown encoding '%s'", argv[i]);
        } else if (strcmp(argv[i], "--step") == 0 && i + 1 < argc) {
            if (!cli_parse_u64(argv[++i], &o.step)) return cli_usage_error("diff: bad --step '%s'", argv[i]);
        } else if (strcmp(argv[i], "--base-step") == 0 && i + 1 < argc) {
            if (!cli_parse_u64(argv[++i], &o.base_step)) return cli_usage_error("diff: bad --base-step '%s'", argv[i]);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            uint64_t t;
            if (!cli_parse_u64(argv[++i], &t) || t < 1 || t > 16)
                return cli_usage_error("diff: --threads takes 1..16, not '%s'", argv[i]);
            o.threads = (unsigned)t;
        } else if (strcmp(argv[i], "--range-coder") == 0) o.flags |= WSYNC_DELTA_RANGE_CODER;
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("diff: unknown or incomplete option '%s'", argv[i]);
        else if (np < 2) paths[np++] = argv[i];
        else return cli_usage_error("diff: unexpected argument '%s'", argv[i]);
    }
    if (np < 2 || !out) return cli_usage_error("diff: %s", "needs OLD NEW -o DELTA");
    if ((o.flags & WSYNC_DELTA_RANGE_CODER) && o.encoding != WSYNC_ENCODING_PACKED_MAX)
        return cli_usage_error("diff: %s", "--range-coder is for --encoding packed-max");
    if (!cli_load_file(paths[0], &a)) return 1;
    if (!cli_load_file(paths[1], &b)) {
        cli_unload_file(&a);
        return 1;
    }
    ok = pair_tensors(&a, &b, &base) && cli_out_open(&of, out);
    if (ok) {
        ok = wsync_delta_encode(base, b.t, b.st.n_tensors, &o, cli_file_sink, of.f, &st, &err) == WSYNC_OK;
        if (!ok) fprintf(stderr, "wsync: diff: %s\n", err.message);
        ok = cli_out_commit(&of, ok);
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
    cli_unload_file(&a);
    cli_unload_file(&b);
    return ok ? 0 : 1;
}

int cmd_apply(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL}, *out = NULL;
    int np = 0, i, ok = 0;
    cli_loaded base, delta;
    wsync_delta_options o;
    memset(&o, 0, sizeof o);
    uint8_t *copy = NULL;
    wsync_st_file st;
    wsync_tensor *t = NULL;
    wsync_delta_stats ds;
    wsync_error err;
    cli_out_file of;
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
            if (!cli_parse_u64(argv[++i], &t) || t < 1 || t > 16)
                return cli_usage_error("apply: --threads takes 1..16, not '%s'", argv[i]);
            o.threads = (unsigned)t;
        } else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("apply: unknown or incomplete option '%s'", argv[i]);
        else if (np < 2) paths[np++] = argv[i];
        else return cli_usage_error("apply: unexpected argument '%s'", argv[i]);
    }
    if (np < 2 || !out) return cli_usage_error("apply: %s", "needs BASE DELTA -o OUT");
    if (!cli_load_file(paths[0], &base)) return 1;
    memset(&delta, 0, sizeof delta);
    if (wsync_file_map(paths[1], &delta.map, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: %s\n", paths[1], err.message);
        cli_unload_file(&base);
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
            else if (cli_out_open(&of, out)) {
                ok = fwrite(copy, 1, (size_t)base.map.size, of.f) == (size_t)base.map.size;
                ok = cli_out_commit(&of, ok);
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
    cli_unload_file(&base);
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

int cmd_verify(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL};
    int np = 0, i, same = 1, shown = 0;
    size_t k;
    cli_loaded a, b;
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs("usage: wsync verify A B\n"
                  "Exit 0 when A and B hold the same tensors (names, dtypes, shapes) with\n"
                  "bit-identical data; else 1, listing the first differences.\n", stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("verify: unknown option '%s'", argv[i]);
        else if (np < 2) paths[np++] = argv[i];
        else return cli_usage_error("verify: unexpected argument '%s'", argv[i]);
    }
    if (np < 2) return cli_usage_error("verify: %s", "needs A B");
    if (!cli_load_file(paths[0], &a)) return 1;
    if (!cli_load_file(paths[1], &b)) {
        cli_unload_file(&a);
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
    cli_unload_file(&a);
    cli_unload_file(&b);
    return same ? 0 : 1;
}

/* ---- gen: a training-like model at a step, for tests and experiments ---- */

/* ---- gen --shards: a Hugging Face checkpoint directory, one tensor slice
   at a time (bounded memory: qwen2.5-7b's 15 GB in about 100 MB) ---- */

#define GEN_SLICE (UINT64_C(1) << 24) /* elements per slice */

/* One tensor, a slice at a time, at `step`, into the shard's writer. */
static wsync_result gen_tensor_stream(const wsync_gen_model *m, size_t i, uint64_t step, const wsync_gen_config *cfg,
                                      uint16_t *img, wsync_st_writer *w, wsync_error *err)
{
    wsync_gen_tensor_info ti;
    uint64_t b, s;
    wsync_result r = wsync_gen_model_tensor(m, i, &ti);
    for (b = 0; r == WSYNC_OK && b < ti.nelem; b += GEN_SLICE) {
        uint64_t n = ti.nelem - b < GEN_SLICE ? ti.nelem - b : GEN_SLICE;
        wsync_gen_tensor t;
        if ((r = wsync_gen_tensor_init(&t, m, i, b, n, cfg, step == 0 ? img : NULL)) != WSYNC_OK) break;
        for (s = 1; s <= step; s++) wsync_gen_tensor_step(&t, s == step ? img : NULL);
        wsync_gen_tensor_free(&t);
        r = wsync_st_writer_data(w, img, (size_t)n * 2, err);
    }
    return r;
}

static int gen_write_text(const char *dir, const char *name, const char *text, size_t len)
{
    char full[8192];
    cli_out_file of;
    int ok;
    if (snprintf(full, sizeof full, "%s/%s", dir, name) >= (int)sizeof full) return 0;
    if (!cli_out_open(&of, full)) return 0;
    ok = fwrite(text, 1, len, of.f) == len;
    return cli_out_commit(&of, ok) && ok;
}

/* config.json of the shape, as transformers writes a Qwen2/Qwen3 config
   (the fields an engine reads to build the model). */
static int gen_write_config(const char *dir, const wsync_gen_model *m)
{
    char text[2048];
    int n = snprintf(text, sizeof text,
                     "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n  \"hidden_size\": %llu,\n"
                     "  \"intermediate_size\": %llu,\n  \"num_hidden_layers\": %llu,\n"
                     "  \"num_attention_heads\": %llu,\n  \"num_key_value_heads\": %llu,\n  \"head_dim\": %llu,\n"
                     "  \"vocab_size\": %llu,\n  \"tie_word_embeddings\": %s,\n  \"attention_bias\": %s,\n"
                     "  \"rms_norm_eps\": 1e-06,\n"
                     "  \"torch_dtype\": \"bfloat16\",\n  \"wsync_gen_model\": \"%s\"\n}\n",
                     m->qk_norm ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM", m->qk_norm ? "qwen3" : "qwen2",
                     (unsigned long long)m->hidden_size, (unsigned long long)m->intermediate_size,
                     (unsigned long long)m->num_layers, (unsigned long long)m->num_heads,
                     (unsigned long long)m->num_kv_heads, (unsigned long long)m->head_dim,
                     (unsigned long long)m->vocab_size, m->tied ? "true" : "false", m->qkv_bias ? "true" : "false", m->name);
    return n > 0 && (size_t)n < sizeof text && gen_write_text(dir, "config.json", text, (size_t)n);
}

static int gen_name_cmp(const void *a, const void *b)
{
    return strcmp(((const wsync_gen_tensor_info *)a)->name, ((const wsync_gen_tensor_info *)b)->name);
}

/* The index: weight_map sorted by name, metadata.total_size (the tensors'
   bytes), as transformers' save_pretrained writes it. */
static int gen_write_index(const char *dir, const wsync_gen_tensor_info *ti, const unsigned *shard_of, size_t n,
                           unsigned shards, uint64_t total)
{
    wsync_gen_tensor_info *sorted = (wsync_gen_tensor_info *)malloc(n * sizeof *sorted);
    size_t cap = 256 + n * (WSYNC_GEN_NAME_MAX + 64), len = 0, i;
    char *text = (char *)malloc(cap);
    int ok = 0;
    if (!sorted || !text) goto out;
    for (i = 0; i < n; i++) {
        sorted[i] = ti[i];
        sorted[i].index = shard_of[i]; /* carried through the sort */
    }
    qsort(sorted, n, sizeof *sorted, gen_name_cmp);
    len += (size_t)snprintf(text + len, cap - len, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n"
                                                   "  \"weight_map\": {\n", (unsigned long long)total);
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "    \"%s\": \"model-%05u-of-%05u.safetensors\"%s\n",
                                sorted[i].name, (unsigned)sorted[i].index + 1, shards, i + 1 < n ? "," : "");
    len += (size_t)snprintf(text + len, cap - len, "  }\n}\n");
    ok = len < cap && gen_write_text(dir, "model.safetensors.index.json", text, len);
out:
    free(sorted);
    free(text);
    return ok;
}

/* `shards` safetensors files (model-0000k-of-0000K.safetensors, or
   model.safetensors when 1) holding the tensors in model order, split where
   the bytes so far pass k/K of the total, plus the index (K > 1) and
   config.json; each shard's __metadata__ is {"format": "pt", "model", "step"}. */
static int gen_dir(const wsync_gen_model *m, uint64_t step, const wsync_gen_config *cfg, unsigned shards,
                   const char *dir)
{
    size_t n = m->n_tensors, i, first;
    wsync_gen_tensor_info *ti = (wsync_gen_tensor_info *)calloc(n, sizeof *ti);
    unsigned *shard_of = (unsigned *)calloc(n, sizeof *shard_of);
    uint64_t (*shape)[2] = (uint64_t(*)[2])calloc(n, sizeof *shape);
    wsync_st_tensor_desc *desc = (wsync_st_tensor_desc *)calloc(n, sizeof *desc);
    uint16_t *img = (uint16_t *)malloc((size_t)GEN_SLICE * 2);
    uint64_t total = 0, sofar = 0;
    char stepbuf[32], path[8192], shard_name[64];
    wsync_st_kv meta[3];
    unsigned k;
    int ok = 0;
    wsync_error err;
    if (!ti || !shard_of || !shape || !desc || !img) {
        fprintf(stderr, "wsync: gen: %s\n", "out of memory");
        goto out;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "wsync: gen: cannot create %s: %s\n", dir, strerror(errno));
        goto out;
    }
    for (i = 0; i < n; i++) {
        wsync_gen_model_tensor(m, i, &ti[i]);
        total += ti[i].nelem * 2;
    }
    if (shards > n) shards = (unsigned)n;
    for (i = 0, k = 0; i < n; i++) {
        shard_of[i] = k;
        sofar += ti[i].nelem * 2;
        if (k + 1 < shards && sofar * shards >= total * (k + 1) && n - i - 1 >= shards - k - 1) k++;
    }
    snprintf(stepbuf, sizeof stepbuf, "%llu", (unsigned long long)step);
    memset(meta, 0, sizeof meta);
    meta[0].key = "format", meta[0].value = "pt";
    meta[1].key = "model", meta[1].value = m->name;
    meta[2].key = "step", meta[2].value = stepbuf;
    for (first = 0, k = 0; k < shards; k++) {
        size_t last = first, j;
        cli_out_file of;
        wsync_st_writer w;
        wsync_result r;
        while (last < n && shard_of[last] == k) last++;
        for (j = first; j < last; j++) {
            shape[j][0] = ti[j].shape[0];
            shape[j][1] = ti[j].shape[1];
            desc[j].name = ti[j].name;
            desc[j].dtype = WSYNC_DTYPE_BF16;
            desc[j].rank = ti[j].rank;
            desc[j].shape = shape[j];
            desc[j].nbytes = ti[j].nelem * 2;
        }
        if (shards == 1) snprintf(shard_name, sizeof shard_name, "model.safetensors");
        else snprintf(shard_name, sizeof shard_name, "model-%05u-of-%05u.safetensors", k + 1, shards);
        snprintf(path, sizeof path, "%s/%s", dir, shard_name);
        if (!cli_out_open(&of, path)) goto out;
        r = wsync_st_writer_begin(&w, desc + first, last - first, meta, 3, cli_file_sink, of.f, NULL, &err);
        for (j = first; r == WSYNC_OK && j < last; j++) r = gen_tensor_stream(m, j, step, cfg, img, &w, &err);
        if (r == WSYNC_OK) r = wsync_st_writer_end(&w, &err);
        if (r != WSYNC_OK) cli_chain_fail("gen", &err, "writing %s", path);
        if (!cli_out_commit(&of, r == WSYNC_OK) || r != WSYNC_OK) goto out;
        first = last;
    }
    if (shards > 1 && !gen_write_index(dir, ti, shard_of, n, shards, total)) {
        fprintf(stderr, "wsync: gen: cannot write %s/model.safetensors.index.json\n", dir);
        goto out;
    }
    if (!gen_write_config(dir, m)) {
        fprintf(stderr, "wsync: gen: cannot write %s/config.json\n", dir);
        goto out;
    }
    ok = 1;
out:
    free(ti);
    free(shard_of);
    free(shape);
    free(desc);
    free(img);
    return ok;
}

int cmd_gen(int argc, char **argv)
{
    const char *model = "tiny", *out = NULL, *v;
    uint64_t step = 0, vocab = 0, t, s, shards = 0;
    int i;
    char name[64];
    wsync_gen_model m;
    wsync_gen_config cfg;
    wsync_gen g;
    wsync_error err;
    wsync_result r;
    cli_out_file of;
    wsync_gen_config_default(&cfg);
    cfg.mode = WSYNC_GEN_LIGHT;
    for (i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs("usage: wsync gen --model tiny|qwen3-0.6b|qwen2.5-7b --step N -o FILE\n"
                  "                 [--mode light|adamw] [--vocab V] [--threads T] [--shards K]\n"
                  "Writes the bf16 weights of a synthetic training run (tool/wsync_gen.h: AdamW-\n"
                  "like steps at lr 1e-6, about 1.6% of elements changing per step) at step N as a\n"
                  "safetensors file with __metadata__ {\"model\", \"step\"}. The same arguments give the\n"
                  "same bits on every run. --vocab resizes the embeddings (a bigger or smaller model);\n"
                  "--mode light (default) is the cheaper steady-state optimizer. For tests and demos.\n"
                  "--shards K: -o names a directory that becomes a Hugging Face checkpoint: K shards\n"
                  "(model-0000k-of-0000K.safetensors, or model.safetensors for 1), the index and\n"
                  "config.json, the same bits as the single file, written one slice of a tensor at\n"
                  "a time (qwen2.5-7b's 15 GB in about 100 MB of memory in light mode).\n",
                  stdout);
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--model", &v)) model = v;
        else if (cli_opt_value(argc, argv, &i, "-o", &v)) out = v;
        else if (cli_opt_value(argc, argv, &i, "--step", &v)) {
            if (!cli_parse_u64(v, &step) || step > 100000)
                return cli_usage_error("gen: --step takes 0..100000, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--vocab", &v)) {
            if (!cli_parse_u64(v, &vocab) || vocab < 1 || vocab > 10000000)
                return cli_usage_error("gen: bad --vocab '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--threads", &v)) {
            if (!cli_parse_u64(v, &t) || t < 1 || t > 16)
                return cli_usage_error("gen: --threads takes 1..16, not '%s'", v);
            cfg.threads = (unsigned)t;
        } else if (cli_opt_value(argc, argv, &i, "--shards", &v)) {
            if (!cli_parse_u64(v, &shards) || shards < 1 || shards > 99999)
                return cli_usage_error("gen: --shards takes 1..99999, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--mode", &v)) {
            if (strcmp(v, "light") == 0) cfg.mode = WSYNC_GEN_LIGHT;
            else if (strcmp(v, "adamw") == 0) cfg.mode = WSYNC_GEN_ADAMW;
            else return cli_usage_error("gen: --mode takes light or adamw, not '%s'", v);
        } else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("gen: unknown or incomplete option '%s'", argv[i]);
        else return cli_usage_error("gen: unexpected argument '%s'", argv[i]);
    }
    if (!out) return cli_usage_error("gen: %s", "needs -o FILE");
    if (wsync_gen_model_lookup(model, &m) != WSYNC_OK) return cli_usage_models("gen", model);
    if (vocab) {
        snprintf(name, sizeof name, "%s-vocab%llu", model, (unsigned long long)vocab);
        m.name = name;
        m.vocab_size = vocab;
        if ((r = wsync_gen_model_finish(&m)) != WSYNC_OK) {
            fprintf(stderr, "wsync: gen: model %s: %s\n", name, wsync_result_name(r));
            return 1;
        }
    }
    if (shards) {
        return gen_dir(&m, step, &cfg, (unsigned)shards, out) ? 0 : 1;
    }
    if ((r = wsync_gen_init(&g, &m, &cfg)) != WSYNC_OK) {
        fprintf(stderr, "wsync: gen: model %s: %s (%s)\n", m.name, wsync_result_name(r), wsync_result_str(r));
        return 1;
    }
    for (s = 0; s < step; s++) wsync_gen_step(&g);
    r = WSYNC_ERR_IO;
    if (cli_out_open(&of, out)) {
        r = wsync_gen_write(&g, cli_file_sink, of.f, &err);
        if (r != WSYNC_OK) cli_chain_fail("gen", &err, "writing %s", out);
        if (!cli_out_commit(&of, r == WSYNC_OK)) r = WSYNC_ERR_IO;
    }
    wsync_gen_free(&g);
    return r == WSYNC_OK ? 0 : 1;
}
