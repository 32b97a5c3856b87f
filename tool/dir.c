/* dir.c - model directories (a Hugging Face checkpoint: shards, the index,
   config and tokenizer files), declared in cli.h:
     - the index and the step file read as a JSON tree (cli_json), its
       strings and numbers by wsync.h's wsync_json_string and _number;
     - cli_dir_load: a directory read and validated for `wsync publish`;
     - pull's and follow's directory mode: the model held as one image (as
       for a file), each new step written as a version beside the link
       (DIR.step_NNNNNN) and the link DIR switched to it in one rename. */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ======================================================================
   JSON: the tree of a small file (objects, arrays, literals); strings and
   numbers are wsync.h's tokens, as the library reads them
   ====================================================================== */

typedef struct jparse {
    const unsigned char *s;
    size_t n, i;
    char *why;
    size_t cap;
} jparse;

static int jfail(jparse *p, const char *fmt, ...)
{
    va_list ap;
    int k;
    if (!p->why || !p->cap) return 0;
    k = snprintf(p->why, p->cap, "byte %zu: ", p->i);
    if (k < 0 || (size_t)k >= p->cap) return 0;
    va_start(ap, fmt);
    vsnprintf(p->why + k, p->cap - (size_t)k, fmt, ap);
    va_end(ap);
    return 0;
}

static void jws(jparse *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int is_digit(unsigned c)
{
    return c >= '0' && c <= '9';
}

/* A failure of wsync_json_string or _number: p->i the byte it names. */
static int jlib_fail(jparse *p, const wsync_error *err)
{
    const char *m = err->message, *c;
    if (err->offset != UINT64_MAX && err->offset <= p->n) p->i = (size_t)err->offset;
    if (strncmp(m, "at byte ", 8) == 0 && (c = strstr(m, ": ")) != NULL) m = c + 2; /* jfail says where */
    return jfail(p, "%s", m);
}

/* The string whose opening quote is at p->i, decoded into a new buffer by
   wsync_json_string (the library's rules: escapes, surrogate pairs, UTF-8). */
static int jstring(jparse *p, char **out, size_t *len)
{
    wsync_error err;
    size_t at = p->i, k = 0;
    char *o;
    *out = NULL;
    if (wsync_json_string((const char *)p->s, p->n, &at, NULL, 0, &k, &err) != WSYNC_OK) return jlib_fail(p, &err);
    if (!(o = (char *)malloc(k + 1))) return jfail(p, "out of memory");
    at = p->i;
    if (wsync_json_string((const char *)p->s, p->n, &at, o, k, &k, &err) != WSYNC_OK) {
        free(o);
        return jlib_fail(p, &err);
    }
    p->i = at;
    o[k] = 0;
    *out = o;
    *len = k;
    return 1;
}

/* A number at p->i, as RFC 8259 writes them (wsync_json_number): kept as its text. */
static int jnumber(jparse *p, cli_json *j)
{
    wsync_error err;
    size_t start = p->i, at = p->i;
    if (wsync_json_number((const char *)p->s, p->n, &at, &err) != WSYNC_OK) return jlib_fail(p, &err);
    p->i = at;
    if (!(j->str = (char *)malloc(p->i - start + 1))) return jfail(p, "out of memory");
    memcpy(j->str, p->s + start, p->i - start);
    j->str[p->i - start] = 0;
    j->len = p->i - start;
    return 1;
}

static int member_cmp(const void *a, const void *b)
{
    const cli_json *x = *(const cli_json *const *)a, *y = *(const cli_json *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c) return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

/* An object's keys, each at most once (sorted copies of the members). */
static int jkeys_unique(jparse *p, const cli_json *obj, size_t at)
{
    const cli_json **v, *m;
    size_t i = 0;
    if (obj->n < 2) return 1;
    if (!(v = (const cli_json **)malloc(obj->n * sizeof *v))) return jfail(p, "out of memory");
    for (m = obj->child; m; m = m->next) v[i++] = m;
    qsort(v, obj->n, sizeof *v, member_cmp);
    for (i = 1; i < obj->n; i++)
        if (member_cmp(&v[i - 1], &v[i]) == 0) {
            p->i = at;
            jfail(p, "the object here names the key '%.*s' twice", (int)(v[i]->key_len > 200 ? 200 : v[i]->key_len),
                  v[i]->key);
            free(v);
            return 0;
        }
    free(v);
    return 1;
}

/* A value at p->i into a new node; *out is set whenever a node was made,
   so that the caller frees what a failure leaves. */
static int jvalue(jparse *p, unsigned depth, cli_json **out)
{
    cli_json *j, *last = NULL;
    unsigned c;
    size_t at;
    *out = NULL;
    jws(p);
    if (p->i >= p->n) return jfail(p, "a value is missing");
    if (!(j = (cli_json *)calloc(1, sizeof *j))) return jfail(p, "out of memory");
    *out = j;
    c = p->s[p->i];
    at = p->i;
    if (c == '{' || c == '[') {
        int obj = c == '{';
        if (depth + 1 > CLI_JSON_MAX_DEPTH) return jfail(p, "nested deeper than %d levels", CLI_JSON_MAX_DEPTH);
        j->kind = obj ? CLI_JSON_OBJECT : CLI_JSON_ARRAY;
        p->i++;
        jws(p);
        if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
            p->i++;
            return 1;
        }
        for (;;) {
            cli_json *m = NULL;
            char *key = NULL;
            size_t klen = 0;
            int ok;
            jws(p);
            if (obj) {
                if (p->i >= p->n || p->s[p->i] != '"') return jfail(p, "an object's member needs a name (a string)");
                if (!jstring(p, &key, &klen)) return 0;
                jws(p);
                if (p->i >= p->n || p->s[p->i] != ':') {
                    free(key);
                    return jfail(p, "':' expected after a member's name");
                }
                p->i++;
            }
            ok = jvalue(p, depth + 1, &m);
            if (!m) {
                free(key);
                return 0;
            }
            m->key = key;
            m->key_len = klen;
            if (last) last->next = m;
            else j->child = m;
            last = m;
            j->n++;
            if (!ok) return 0;
            jws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
                p->i++;
                break;
            }
            return jfail(p, obj ? "',' or '}' expected" : "',' or ']' expected");
        }
        return obj ? jkeys_unique(p, j, at) : 1;
    }
    if (c == '"') {
        j->kind = CLI_JSON_STRING;
        return jstring(p, &j->str, &j->len);
    }
    if (c == '-' || is_digit(c)) {
        j->kind = CLI_JSON_NUMBER;
        return jnumber(p, j);
    }
    if (p->n - p->i >= 4 && memcmp(p->s + p->i, "true", 4) == 0) {
        j->kind = CLI_JSON_TRUE;
        p->i += 4;
        return 1;
    }
    if (p->n - p->i >= 5 && memcmp(p->s + p->i, "false", 5) == 0) {
        j->kind = CLI_JSON_FALSE;
        p->i += 5;
        return 1;
    }
    if (p->n - p->i >= 4 && memcmp(p->s + p->i, "null", 4) == 0) {
        j->kind = CLI_JSON_NULL;
        p->i += 4;
        return 1;
    }
    return jfail(p, "unexpected character '%c'", c >= 0x20 && c < 0x7F ? (char)c : '?');
}

int cli_json_parse(const char *text, size_t len, cli_json **out, char *why, size_t cap)
{
    jparse p;
    cli_json *root = NULL;
    int ok;
    *out = NULL;
    if (why && cap) why[0] = 0;
    if (len > CLI_JSON_MAX_SIZE) {
        if (why) snprintf(why, cap, "%zu bytes, above the limit of %zu", len, CLI_JSON_MAX_SIZE);
        return 0;
    }
    p.s = (const unsigned char *)text;
    p.n = len;
    p.i = 0;
    p.why = why;
    p.cap = cap;
    ok = jvalue(&p, 0, &root);
    if (ok) {
        jws(&p);
        if (p.i != p.n) ok = jfail(&p, "something follows the value");
    }
    if (!ok) {
        cli_json_free(root);
        return 0;
    }
    *out = root;
    return 1;
}

void cli_json_free(cli_json *j)
{
    while (j) {
        cli_json *next = j->next;
        cli_json_free(j->child); /* depth is bounded by CLI_JSON_MAX_DEPTH */
        free(j->key);
        free(j->str);
        free(j);
        j = next;
    }
}

const cli_json *cli_json_member(const cli_json *obj, const char *key)
{
    const cli_json *m;
    size_t n = strlen(key);
    if (!obj || obj->kind != CLI_JSON_OBJECT) return NULL;
    for (m = obj->child; m; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0) return m;
    return NULL;
}

int cli_json_u64(const cli_json *j, uint64_t *out)
{
    size_t i;
    uint64_t v = 0;
    if (!j || j->kind != CLI_JSON_NUMBER || !j->len) return 0;
    for (i = 0; i < j->len; i++) {
        unsigned d = (unsigned char)j->str[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* ======================================================================
   Names and files
   ====================================================================== */

/* The small files a checkpoint carries besides its shards: every one of
   these that the directory holds travels with each anchor (cmd_publish's
   --help lists them). */
static const char *const dir_plain_files[] = {
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja",
    "chat_template.json", "preprocessor_config.json", NULL};

/* A carried file is at most this big (tokenizers are tens of MB). */
#define DIR_FILE_MAX ((uint64_t)1 << 30)

typedef struct name_list {
    char **v;
    size_t n, cap;
} name_list;

static int names_push(name_list *l, const char *s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = (char **)realloc(l->v, cap * sizeof *v);
        if (!v) return 0;
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s))) return 0;
    l->n++;
    return 1;
}

static void names_free(name_list *l)
{
    size_t i;
    for (i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_sort(name_list *l)
{
    if (l->n > 1) qsort(l->v, l->n, sizeof *l->v, str_cmp);
}

/* Sorted, each name once: n log n for any number of names (sorting after
   each new name, as the first version did, took 12-16 s for an index of
   20,000 shard names). */
static void names_sort_unique(name_list *l)
{
    size_t i, k = 0;
    names_sort(l);
    for (i = 0; i < l->n; i++) {
        if (k && strcmp(l->v[k - 1], l->v[i]) == 0) free(l->v[i]);
        else l->v[k++] = l->v[i];
    }
    l->n = k;
}

static int names_has(const name_list *l, const char *s)
{
    return l->n && bsearch(&s, l->v, l->n, sizeof *l->v, str_cmp) != NULL;
}

/* dir/name into buf: 1, or 0 when it does not fit. */
static int join(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return n > 0 && (size_t)n < cap;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The regular files in `dir` (links followed: a Hugging Face cache links
   its snapshots' files to blobs), names not starting with '.', sorted.
   1 listed; 0 with errno set. */
static int list_files(const char *dir, name_list *out)
{
    DIR *d;
    struct dirent *e;
    char full[8192];
    memset(out, 0, sizeof *out);
    if (!(d = opendir(dir))) return 0;
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (e->d_name[0] == '.') continue;
        if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= (int)sizeof full) continue;
        if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (!names_push(out, e->d_name)) {
            closedir(d);
            names_free(out);
            errno = ENOMEM;
            return 0;
        }
    }
    closedir(d);
    names_sort(out);
    return 1;
}

/* A file that must be one of the directory's own (an index's shard, a
   carried file): a name, not a path, by the chain's rules for an anchor's
   objects. WSYNC_OK, or the rule it breaks in err. */
static wsync_result file_name_rule(const char *name, size_t len, wsync_error *err)
{
    memset(err, 0, sizeof *err);
    if (memchr(name, 0, len) != NULL) err->code = WSYNC_ERR_INVALID_ARGUMENT,
        snprintf(err->message, sizeof err->message, "a file name holding U+0000");
    else if (strchr(name, '/') != NULL) err->code = WSYNC_ERR_INVALID_ARGUMENT,
        snprintf(err->message, sizeof err->message, "'%.200s' is a path: files must be in the directory itself "
                 "(no '/')", name);
    else if (strstr(name, "..") != NULL) err->code = WSYNC_ERR_INVALID_ARGUMENT,
        snprintf(err->message, sizeof err->message, "'%.200s' holds '..'", name);
    else return wsync_chain_file_name_check(name, err);
    return err->code;
}

/* ======================================================================
   Publish: a checkpoint directory read and validated
   ====================================================================== */

typedef struct tensor_ref {
    const char *name;
    size_t shard;
} tensor_ref;

static int ref_cmp(const void *a, const void *b)
{
    return strcmp(((const tensor_ref *)a)->name, ((const tensor_ref *)b)->name);
}

void cli_dir_unload(cli_dir_model *m)
{
    size_t i;
    for (i = 0; i < m->n_shards; i++) {
        if (m->shards && m->shards[i].path) cli_unload_file(&m->shards[i]);
        if (m->shard_paths) free(m->shard_paths[i]);
    }
    for (i = 0; i < m->n_files; i++) {
        if (m->file_maps) wsync_file_unmap(&m->file_maps[i]);
        if (m->file_names) free(m->file_names[i]);
    }
    free(m->shards);
    free(m->shard_paths);
    free(m->layout);
    free(m->t);
    free(m->files);
    free(m->file_maps);
    free(m->file_names);
    memset(m, 0, sizeof *m);
}

/* The index's weight_map, checked for its own rules; its shard names (each
   once, sorted) into `shards`. */
static int read_index(const char *cmd, const char *ipath, const name_list *entries, cli_json **root,
                      const cli_json **wm, name_list *shards)
{
    wsync_mapped map;
    wsync_error err;
    char why[300];
    const cli_json *meta, *m;
    uint64_t u;
    size_t i;
    *root = NULL;
    if (wsync_file_map(ipath, &map, &err) != WSYNC_OK) return cli_chain_fail(cmd, &err, "%s", ipath), 0;
    if (map.size > CLI_JSON_MAX_SIZE) {
        wsync_file_unmap(&map);
        return cli_tool_fail(cmd, WSYNC_ERR_LIMIT, ipath, "the index is %llu bytes, above the %zu a reader takes",
                             (unsigned long long)map.size, CLI_JSON_MAX_SIZE), 0;
    }
    if (!cli_json_parse((const char *)map.bytes, (size_t)map.size, root, why, sizeof why)) {
        wsync_file_unmap(&map);
        return cli_tool_fail(cmd, WSYNC_ERR_INVALID_JSON, ipath, "not valid JSON: %s", why), 0;
    }
    wsync_file_unmap(&map);
    if ((*root)->kind != CLI_JSON_OBJECT)
        return cli_tool_fail(cmd, WSYNC_ERR_INVALID_JSON, ipath, "%s", "the index must be a JSON object"), 0;
    if ((meta = cli_json_member(*root, "metadata")) != NULL) {
        const cli_json *ts = cli_json_member(meta, "total_size");
        if (meta->kind != CLI_JSON_OBJECT)
            return cli_tool_fail(cmd, WSYNC_ERR_INVALID_JSON, ipath, "%s", "\"metadata\" must be an object"), 0;
        if (ts && !cli_json_u64(ts, &u))
            return cli_tool_fail(cmd, WSYNC_ERR_INVALID_JSON, ipath, "%s",
                                 "\"metadata\".\"total_size\" must be a whole number of bytes"), 0;
    }
    if (!(*wm = cli_json_member(*root, "weight_map")) || (*wm)->kind != CLI_JSON_OBJECT)
        return cli_tool_fail(cmd, WSYNC_ERR_INVALID_JSON, ipath, "%s",
                             "the index needs \"weight_map\", an object from tensor name to shard file"), 0;
    if (!(*wm)->n) return cli_tool_fail(cmd, WSYNC_ERR_INVALID_JSON, ipath, "%s", "\"weight_map\" names no tensor"), 0;
    memset(shards, 0, sizeof *shards);
    for (m = (*wm)->child; m; m = m->next) {
        if (memchr(m->key, 0, m->key_len) != NULL)
            return cli_tool_fail(cmd, WSYNC_ERR_UNSUPPORTED, ipath,
                                 "\"weight_map\" names a tensor '%s' whose name holds U+0000", m->key), 0;
        if (m->kind != CLI_JSON_STRING)
            return cli_tool_fail(cmd, WSYNC_ERR_INVALID_JSON, ipath,
                                 "\"weight_map\" maps tensor '%.200s' to something other than a file name", m->key), 0;
        if (file_name_rule(m->str, m->len, &err) != WSYNC_OK)
            return cli_tool_fail(cmd, err.code, ipath, "\"weight_map\" maps tensor '%.150s' to a file name the "
                                 "directory cannot hold: %s", m->key, err.message), 0;
        if (!ends_with(m->str, ".safetensors"))
            return cli_tool_fail(cmd, WSYNC_ERR_UNSUPPORTED, ipath, "\"weight_map\" maps tensor '%.150s' to '%.150s', "
                                 "not a .safetensors file", m->key, m->str), 0;
        if (!names_push(shards, m->str)) /* each tensor's; made distinct below */
            return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, ipath, "%s", "shard names"), 0;
    }
    names_sort_unique(shards);
    for (i = 0; i < shards->n; i++)
        if (!names_has(entries, shards->v[i]))
            return cli_tool_fail(cmd, WSYNC_ERR_NOT_FOUND, ipath, "the index names the shard '%s', which is not a "
                                 "file in the directory (a missing shard)", shards->v[i]), 0;
    return 1;
}

/* The small files carried with each anchor: the documented ones present,
   the index, and what --include matches (not shards). Sorted by name. */
static int carried_files(const char *cmd, const char *dir, const name_list *entries, const name_list *shards,
                         int has_index, char *const *include, size_t n_include, name_list *out)
{
    size_t i, k;
    int oom = 0, skipped_step_file = 0;
    memset(out, 0, sizeof *out);
    for (i = 0; dir_plain_files[i]; i++)
        if (names_has(entries, dir_plain_files[i])) oom |= !names_push(out, dir_plain_files[i]);
    if (has_index) oom |= !names_push(out, CLI_DIR_INDEX);
    names_sort(out);
    for (k = 0; k < n_include; k++) {
        int matched = 0;
        for (i = 0; i < entries->n; i++) {
            const char *nm = entries->v[i];
            if (fnmatch(include[k], nm, 0) != 0) continue;
            matched = 1;
            if (names_has(shards, nm)) continue;
            if (strcmp(nm, CLI_DIR_STEP_FILE) == 0) { /* reserved: each pulled version's own */
                if (!skipped_step_file)
                    fprintf(stderr, "wsync: %s: %s/%s is not published: the name is wsync's own (pull and follow "
                            "write it into each version they make, saying its step)\n", cmd, dir, nm);
                skipped_step_file = 1;
                continue;
            }
            oom |= !names_push(out, nm);
        }
        if (!matched)
            fprintf(stderr, "wsync: %s: warning: --include '%s' matches no file in %s\n", cmd, include[k], dir);
    }
    names_sort_unique(out);
    if (oom) {
        names_free(out);
        return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, dir, "%s", "file names"), 0;
    }
    return 1;
}

int cli_dir_load(const char *cmd, const char *dir, char *const *include, size_t n_include, cli_dir_model *m)
{
    name_list entries, shards, files;
    cli_json *root = NULL;
    const cli_json *wm = NULL;
    tensor_ref *refs = NULL;
    unsigned char *seen = NULL;
    char ipath[8192], full[8192];
    wsync_error err;
    size_t i, k, at;
    int has_index, ok = 0;
    memset(m, 0, sizeof *m);
    memset(&shards, 0, sizeof shards);
    memset(&files, 0, sizeof files);
    if (!list_files(dir, &entries))
        return cli_tool_fail(cmd, WSYNC_ERR_IO, dir, "cannot list the directory: %s", strerror(errno)), 0;
    has_index = names_has(&entries, CLI_DIR_INDEX);
    snprintf(ipath, sizeof ipath, "%s/%s", dir, CLI_DIR_INDEX);
    /* the shards: the index's files, or every *.safetensors */
    if (has_index) {
        if (!read_index(cmd, ipath, &entries, &root, &wm, &shards)) goto done;
        for (i = 0; i < entries.n; i++)
            if (ends_with(entries.v[i], ".safetensors") && !names_has(&shards, entries.v[i])) {
                snprintf(full, sizeof full, "%s/%s", dir, entries.v[i]);
                cli_tool_fail(cmd, WSYNC_ERR_UNSUPPORTED, full, "a .safetensors file that %s does not name (with an "
                              "index, the shards are exactly the files it names)", CLI_DIR_INDEX);
                goto done;
            }
    } else {
        for (i = 0; i < entries.n; i++)
            if (ends_with(entries.v[i], ".safetensors") && !names_push(&shards, entries.v[i])) {
                cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, dir, "%s", "shard names");
                goto done;
            }
        if (!shards.n) {
            cli_tool_fail(cmd, WSYNC_ERR_NOT_FOUND, dir, "%s", "no *.safetensors file: a model directory holds its "
                          "shards (model.safetensors, or model-00001-of-0000N.safetensors with the index)");
            goto done;
        }
    }
    for (i = 0; i < shards.n; i++) {
        snprintf(full, sizeof full, "%s/%s", dir, shards.v[i]);
        if (file_name_rule(shards.v[i], strlen(shards.v[i]), &err) != WSYNC_OK) {
            cli_tool_fail(cmd, err.code, full, "a shard's name: %s", err.message);
            goto done;
        }
    }
    /* every shard parses, names every tensor by a C string, holds one at least */
    m->shards = (cli_loaded *)calloc(shards.n, sizeof *m->shards);
    m->shard_paths = (char **)calloc(shards.n, sizeof *m->shard_paths);
    m->layout = (wsync_anchor_shard *)calloc(shards.n, sizeof *m->layout);
    if (!m->shards || !m->shard_paths || !m->layout) {
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, dir, "%s", "shards");
        goto done;
    }
    m->n_shards = shards.n;
    for (i = 0; i < shards.n; i++) {
        snprintf(full, sizeof full, "%s/%s", dir, shards.v[i]);
        if (!(m->shard_paths[i] = strdup(full))) {
            cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, full, "%s", "its path");
            goto done;
        }
        if (!cli_load_file(m->shard_paths[i], &m->shards[i])) {
            memset(&m->shards[i], 0, sizeof m->shards[i]);
            fprintf(stderr, "wsync: %s: %s: a shard that does not parse or cannot be published (above); nothing "
                    "published\n", cmd, full);
            goto done;
        }
        if (!m->shards[i].st.n_tensors) {
            cli_tool_fail(cmd, WSYNC_ERR_UNSUPPORTED, full, "%s", "a shard holding no tensor");
            goto done;
        }
        m->layout[i].name = strrchr(m->shard_paths[i], '/') + 1; /* a shard's name holds no '/' */
        m->layout[i].first = m->n_tensors;
        m->layout[i].count = m->shards[i].st.n_tensors;
        m->layout[i].metadata = m->shards[i].st.metadata; /* the trainer's keys, in order, into the anchor */
        m->layout[i].n_metadata = m->shards[i].st.n_metadata;
        m->n_tensors += m->shards[i].st.n_tensors;
    }
    /* no tensor in two shards */
    refs = (tensor_ref *)calloc(m->n_tensors + 1, sizeof *refs);
    m->t = (wsync_tensor *)calloc(m->n_tensors + 1, sizeof *m->t);
    if (!refs || !m->t) {
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, dir, "%zu tensors", m->n_tensors);
        goto done;
    }
    for (i = 0, at = 0; i < m->n_shards; i++)
        for (k = 0; k < m->shards[i].st.n_tensors; k++, at++) {
            m->t[at] = m->shards[i].t[k];
            m->bytes += m->t[at].nbytes;
            refs[at].name = m->t[at].name;
            refs[at].shard = i;
        }
    qsort(refs, m->n_tensors, sizeof *refs, ref_cmp);
    for (i = 1; i < m->n_tensors; i++)
        if (strcmp(refs[i - 1].name, refs[i].name) == 0) {
            size_t a = refs[i - 1].shard < refs[i].shard ? refs[i - 1].shard : refs[i].shard;
            size_t b = refs[i - 1].shard < refs[i].shard ? refs[i].shard : refs[i - 1].shard;
            cli_tool_fail(cmd, WSYNC_ERR_DUPLICATE_KEY, m->shard_paths[b], "tensor '%.200s' is in two shards, %s and "
                          "%s (a tensor lives in one shard)", refs[i].name, m->layout[a].name, m->layout[b].name);
            goto done;
        }
    /* the index names exactly the shards' tensors, each with its shard */
    if (has_index) {
        const cli_json *e;
        if (!(seen = (unsigned char *)calloc(m->n_tensors + 1, 1))) {
            cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, ipath, "%s", "tensor list");
            goto done;
        }
        for (e = wm->child; e; e = e->next) {
            tensor_ref key, *hit;
            key.name = e->key;
            key.shard = 0;
            hit = (tensor_ref *)bsearch(&key, refs, m->n_tensors, sizeof *refs, ref_cmp);
            if (!hit) {
                cli_tool_fail(cmd, WSYNC_ERR_NOT_FOUND, ipath, "the index names tensor '%.200s' (in %.100s), which "
                              "no shard holds", e->key, e->str);
                goto done;
            }
            if (strcmp(m->layout[hit->shard].name, e->str) != 0) {
                cli_tool_fail(cmd, WSYNC_ERR_INVALID_METADATA, ipath, "the index maps tensor '%.200s' to %.100s, but "
                              "%.100s holds it", e->key, e->str, m->layout[hit->shard].name);
                goto done;
            }
            seen[hit - refs] = 1;
        }
        for (i = 0; i < m->n_tensors; i++)
            if (!seen[i]) {
                cli_tool_fail(cmd, WSYNC_ERR_NOT_FOUND, ipath, "the index does not name tensor '%.200s', which %s "
                              "holds (it must name every tensor)", refs[i].name, m->layout[refs[i].shard].name);
                goto done;
            }
    }
    /* the files carried with every anchor */
    if (!carried_files(cmd, dir, &entries, &shards, has_index, include, n_include, &files)) goto done;
    if (m->n_shards + files.n > WSYNC_CHAIN_FILES_MAX) {
        cli_tool_fail(cmd, WSYNC_ERR_LIMIT, dir, "%zu shards and %zu files, above the %d objects an anchor holds",
                      m->n_shards, files.n, WSYNC_CHAIN_FILES_MAX);
        goto done;
    }
    m->files = (wsync_anchor_file *)calloc(files.n + 1, sizeof *m->files);
    m->file_maps = (wsync_mapped *)calloc(files.n + 1, sizeof *m->file_maps);
    m->file_names = (char **)calloc(files.n + 1, sizeof *m->file_names);
    if (!m->files || !m->file_maps || !m->file_names) {
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, dir, "%s", "files");
        goto done;
    }
    for (i = 0; i < files.n; i++) {
        snprintf(full, sizeof full, "%s/%s", dir, files.v[i]);
        if (file_name_rule(files.v[i], strlen(files.v[i]), &err) != WSYNC_OK) {
            cli_tool_fail(cmd, err.code, full, "a carried file's name: %s", err.message);
            goto done;
        }
        if (wsync_file_map(full, &m->file_maps[i], &err) != WSYNC_OK) {
            cli_chain_fail(cmd, &err, "%s", full);
            goto done;
        }
        m->file_names[i] = files.v[i];
        files.v[i] = NULL;
        m->n_files = i + 1;
        if (m->file_maps[i].size > DIR_FILE_MAX) {
            cli_tool_fail(cmd, WSYNC_ERR_LIMIT, full, "%llu bytes, above the %llu a carried file may have",
                          (unsigned long long)m->file_maps[i].size, (unsigned long long)DIR_FILE_MAX);
            goto done;
        }
        m->files[i].name = m->file_names[i];
        m->files[i].data = m->file_maps[i].bytes;
        m->files[i].size = m->file_maps[i].size;
    }
    ok = 1;
done:
    if (!ok) cli_dir_unload(m);
    cli_json_free(root);
    free(refs);
    free(seen);
    names_free(&entries);
    names_free(&shards);
    names_free(&files);
    return ok;
}

/* ======================================================================
   Pull and follow: a directory kept at a step
   ====================================================================== */

void cli_dir_layout_free(cli_dir_layout *lay)
{
    size_t i;
    for (i = 0; i < lay->n_shards; i++) {
        free(lay->shards[i].idx);
        free(lay->shards[i].meta);
    }
    free(lay->shards);
    memset(lay, 0, sizeof *lay);
}

/* Shard sh's metadata: st's keys in order, up to an anchor's "wsync" (the
   publisher's own from there on). 0 when out of memory. */
static int shard_meta(cli_dir_shard *sh, const wsync_st_file *st)
{
    size_t j, m = 0, strings = 0;
    char *at;
    while (m < st->n_metadata &&
           !(st->metadata[m].key_len == 5 && memcmp(st->metadata[m].key, "wsync", 5) == 0))
        strings += st->metadata[m].key_len + st->metadata[m].value_len + 2, m++;
    sh->has_meta = 1;
    sh->n_meta = 0;
    if (!(sh->meta = (wsync_st_kv *)malloc(m * sizeof *sh->meta + strings + 1))) return 0;
    at = (char *)(sh->meta + m);
    for (j = 0; j < m; j++) {
        const wsync_st_kv *kv = &st->metadata[j];
        wsync_st_kv *o = &sh->meta[j];
        memcpy(at, kv->key, kv->key_len), at[kv->key_len] = 0, o->key = at, o->key_len = kv->key_len;
        at += kv->key_len + 1;
        memcpy(at, kv->value, kv->value_len), at[kv->value_len] = 0, o->value = at, o->value_len = kv->value_len;
        at += kv->value_len + 1;
    }
    sh->n_meta = m;
    return 1;
}

/* A layout of n shards, shard k holding counts[k] consecutive tensors,
   its metadata sts[k]'s (sts NULL: none kept). */
static int layout_runs(cli_dir_layout *lay, size_t n, char (*names)[WSYNC_CHAIN_FILE_NAME_MAX], const size_t *counts,
                       const wsync_st_file *sts)
{
    size_t k, j, at = 0;
    memset(lay, 0, sizeof *lay);
    if (!(lay->shards = (cli_dir_shard *)calloc(n + 1, sizeof *lay->shards))) return 0;
    lay->n_shards = n;
    for (k = 0; k < n; k++) {
        memcpy(lay->shards[k].name, names[k], sizeof names[k]);
        if (!(lay->shards[k].idx = (size_t *)malloc((counts[k] + 1) * sizeof(size_t)))) {
            cli_dir_layout_free(lay);
            return 0;
        }
        for (j = 0; j < counts[k]; j++) lay->shards[k].idx[j] = at++;
        lay->shards[k].n = counts[k];
        if (sts && !shard_meta(&lay->shards[k], &sts[k])) {
            cli_dir_layout_free(lay);
            return 0;
        }
    }
    return 1;
}

/* A zeroed image holding the tensors d (data not read), in that order. */
static int image_build(const char *cmd, const char *what, const wsync_st_tensor_desc *d, size_t n, cli_image *im)
{
    wsync_st_writer w;
    wsync_buffer b;
    wsync_error err;
    uint64_t size;
    memset(im, 0, sizeof *im);
    if (wsync_st_write_size(d, n, NULL, 0, &size, &err) != WSYNC_OK)
        return cli_chain_fail(cmd, &err, "%s: the model's tensors", what), 0;
    if (size > (uint64_t)SIZE_MAX - 1 || !(im->buf = (uint8_t *)calloc((size_t)size + 1, 1)))
        return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, what, "%llu bytes for the model",
                             (unsigned long long)size), 0;
    im->size = size;
    b.bytes = im->buf, b.cap = (size_t)size, b.len = 0;
    if (wsync_st_writer_begin(&w, d, n, NULL, 0, wsync_buffer_sink, &b, NULL, &err) != WSYNC_OK) {
        cli_image_free(im);
        return cli_chain_fail(cmd, &err, "%s: the model's header", what), 0;
    }
    if (!cli_image_parse(cmd, what, im)) {
        cli_image_free(im);
        return 0;
    }
    return 1;
}

/* The descriptions of a parsed file's tensors, appended at d + *at. */
static void descs_of(const wsync_st_file *st, wsync_st_tensor_desc *d, size_t *at)
{
    size_t j;
    for (j = 0; j < st->n_tensors; j++, (*at)++) {
        const wsync_st_tensor *t = &st->tensors[j];
        d[*at].name = t->name;
        d[*at].name_len = t->name_len;
        d[*at].dtype = t->dtype;
        d[*at].rank = t->rank;
        d[*at].shape = t->shape;
        d[*at].data = NULL;
        d[*at].nbytes = t->end - t->begin;
    }
}

/* The key of an anchor's object: prefix / entry key ("anchors/step_N/") + name. */
static int file_key(char *buf, size_t cap, const wsync_chain_options *co, const wsync_chain_entry *e,
                    const char *name)
{
    char rel[512];
    int n = snprintf(rel, sizeof rel, "%s%s", e->key, name);
    return n > 0 && (size_t)n < sizeof rel && cli_chain_key(buf, cap, co->prefix, rel);
}

/* The header of the object `key` (expected `bytes` long) parsed into st
   by wsync_st_parse_header: two ranged gets, the 8-byte length and the
   header, never the data (st keeps names and shapes; no data views). */
static int fetch_header(const char *cmd, const wsync_store *s, const char *key, uint64_t bytes, wsync_st_file *st)
{
    wsync_error err;
    wsync_buffer b;
    uint8_t *buf;
    uint64_t need = 0, size = 0;
    wsync_result r;
    memset(st, 0, sizeof *st);
    if (!(buf = (uint8_t *)malloc(8))) return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, key, "%s", "8 bytes"), 0;
    b.bytes = buf, b.cap = 8, b.len = 0;
    if (s->get(s->user, key, 0, 8, wsync_buffer_sink, &b, &size, &err) != WSYNC_OK) {
        free(buf);
        return cli_chain_fail(cmd, &err, "reading the header of %s", key), 0;
    }
    if (size != bytes) {
        free(buf);
        return cli_tool_fail(cmd, WSYNC_ERR_SIZE_MISMATCH, key, "the object is %llu bytes, HEAD says %llu",
                             (unsigned long long)size, (unsigned long long)bytes), 0;
    }
    r = wsync_st_parse_header(buf, b.len, size, NULL, st, &need, &err);
    if (r == WSYNC_ERR_TRUNCATED && need > 8 && need <= size && need <= (uint64_t)SIZE_MAX - 1) {
        uint8_t *more = (uint8_t *)realloc(buf, (size_t)need);
        if (!more) {
            free(buf);
            return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, key, "%llu bytes", (unsigned long long)need), 0;
        }
        buf = more;
        b.bytes = buf + 8, b.cap = (size_t)need - 8, b.len = 0;
        if (s->get(s->user, key, 8, need - 8, wsync_buffer_sink, &b, NULL, &err) != WSYNC_OK) {
            free(buf);
            return cli_chain_fail(cmd, &err, "reading the header of %s", key), 0;
        }
        r = wsync_st_parse_header(buf, 8 + b.len, size, NULL, st, &need, &err);
    }
    free(buf);
    if (r != WSYNC_OK) {
        memset(st, 0, sizeof *st);
        return cli_chain_fail(cmd, &err, "%s: invalid safetensors", key), 0;
    }
    if (wsync_st_check_names(st, &err) != WSYNC_OK) {
        wsync_st_free(st);
        return cli_chain_fail(cmd, &err, "%s", key), 0;
    }
    return 1;
}

/* The headers of a directory anchor's shards (files with tensors). */
static int fetch_shard_headers(const char *cmd, const wsync_store *s, const wsync_chain_options *co,
                               const wsync_chain_entry *e, wsync_st_file **sts, size_t *n_shards, size_t *n_tensors)
{
    char key[1400];
    size_t i, ns = 0;
    *sts = (wsync_st_file *)calloc(e->n_files + 1, sizeof **sts);
    *n_tensors = 0;
    if (!*sts) return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, e->key, "%s", "shard headers"), 0;
    for (i = 0; i < e->n_files; i++) {
        const wsync_chain_file *f = &e->files[i];
        if (!f->tensors) continue;
        if (!file_key(key, sizeof key, co, e, f->name)) {
            cli_tool_fail(cmd, WSYNC_ERR_LIMIT, f->name, "%s", "the key is too long");
            break;
        }
        if (!fetch_header(cmd, s, key, f->bytes, &(*sts)[ns])) break;
        ns++;
        if ((*sts)[ns - 1].n_tensors != f->tensors) {
            cli_tool_fail(cmd, WSYNC_ERR_INVALID_HEADER, key, "the shard holds %zu tensors, HEAD says %llu",
                          (*sts)[ns - 1].n_tensors, (unsigned long long)f->tensors);
            break;
        }
        *n_tensors += (*sts)[ns - 1].n_tensors;
    }
    *n_shards = ns;
    if (i < e->n_files) {
        for (i = 0; i < ns; i++) wsync_st_free(&(*sts)[i]);
        free(*sts);
        *sts = NULL;
        return 0;
    }
    return 1;
}

int cli_dir_image_from_entry(const char *cmd, const wsync_store *s, const wsync_chain_options *co,
                             const wsync_chain_entry *e, cli_image *im, cli_dir_layout *lay)
{
    wsync_st_file *sts = NULL;
    wsync_st_tensor_desc *d = NULL;
    char (*names)[WSYNC_CHAIN_FILE_NAME_MAX] = NULL;
    size_t *counts = NULL, ns = 0, nt = 0, i, at = 0, k = 0;
    int ok = 0;
    memset(im, 0, sizeof *im);
    if (!fetch_shard_headers(cmd, s, co, e, &sts, &ns, &nt)) return 0;
    d = (wsync_st_tensor_desc *)calloc(nt + 1, sizeof *d);
    names = (char (*)[WSYNC_CHAIN_FILE_NAME_MAX])calloc(ns + 1, sizeof *names);
    counts = (size_t *)calloc(ns + 1, sizeof *counts);
    if (!d || !names || !counts) {
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, e->key, "%zu tensors", nt);
        goto done;
    }
    for (i = 0; i < ns; i++) descs_of(&sts[i], d, &at);
    for (i = 0; i < e->n_files; i++)
        if (e->files[i].tensors) {
            memcpy(names[k], e->files[i].name, sizeof names[k]);
            counts[k] = sts[k].n_tensors;
            k++;
        }
    if (!image_build(cmd, e->key, d, nt, im)) goto done;
    if (lay) {
        if (!layout_runs(lay, ns, names, counts, sts)) {
            cli_image_free(im);
            cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, e->key, "%s", "layout");
            goto done;
        }
        lay->from_anchor = 1;
        lay->anchor_step = e->step;
    }
    ok = 1;
done:
    for (i = 0; i < ns; i++) wsync_st_free(&sts[i]);
    free(sts);
    free(d);
    free(names);
    free(counts);
    return ok;
}

/* The layout of anchor e's shards over an image that holds their tensors
   (matched by name): a new anchor may group them otherwise. */
static int layout_from_entry(const char *cmd, const wsync_store *s, const wsync_chain_options *co,
                             const wsync_chain_entry *e, const cli_image *im, cli_dir_layout *lay)
{
    wsync_st_file *sts = NULL;
    unsigned char *used = NULL;
    size_t ns = 0, nt = 0, i, j, k = 0;
    int ok = 0;
    memset(lay, 0, sizeof *lay);
    if (!fetch_shard_headers(cmd, s, co, e, &sts, &ns, &nt)) return 0;
    if (nt != im->st.n_tensors) {
        cli_tool_fail(cmd, WSYNC_ERR_INVALID_HEADER, e->key, "the anchor's shards hold %zu tensors, the model %zu",
                      nt, im->st.n_tensors);
        goto done;
    }
    used = (unsigned char *)calloc(nt + 1, 1);
    lay->shards = (cli_dir_shard *)calloc(ns + 1, sizeof *lay->shards);
    if (!used || !lay->shards) {
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, e->key, "%s", "layout");
        goto done;
    }
    lay->n_shards = ns;
    for (i = 0; i < e->n_files; i++) {
        cli_dir_shard *sh;
        if (!e->files[i].tensors) continue;
        sh = &lay->shards[k];
        memcpy(sh->name, e->files[i].name, sizeof sh->name);
        if (!(sh->idx = (size_t *)malloc((sts[k].n_tensors + 1) * sizeof(size_t)))) {
            cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, e->key, "%s", "layout");
            goto done;
        }
        if (!shard_meta(sh, &sts[k])) {
            cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, e->key, "%s", "layout");
            goto done;
        }
        for (j = 0; j < sts[k].n_tensors; j++) {
            const wsync_st_tensor *t = &sts[k].tensors[j], *mine = wsync_st_find(&im->st, t->name);
            size_t at;
            if (!mine || mine->dtype != t->dtype || mine->rank != t->rank ||
                (t->rank && memcmp(mine->shape, t->shape, t->rank * sizeof *t->shape) != 0) ||
                used[at = (size_t)(mine - im->st.tensors)]) {
                cli_tool_fail(cmd, WSYNC_ERR_INVALID_HEADER, e->files[i].name, "tensor '%.200s' of the anchor's "
                              "shard is not one of the model's (or not with its dtype and shape)", t->name);
                goto done;
            }
            used[at] = 1;
            sh->idx[sh->n++] = at;
        }
        k++;
    }
    lay->from_anchor = 1;
    lay->anchor_step = e->step;
    ok = 1;
done:
    if (!ok) cli_dir_layout_free(lay);
    for (i = 0; i < ns; i++) wsync_st_free(&sts[i]);
    free(sts);
    free(used);
    return ok;
}

static int version_suffix(const char *s, const char **end);

static int has_step_file(const char *dir)
{
    char full[8192];
    struct stat sb;
    if (snprintf(full, sizeof full, "%s/%s", dir, CLI_DIR_STEP_FILE) >= (int)sizeof full) return 0;
    return stat(full, &sb) == 0 && S_ISREG(sb.st_mode);
}

int cli_dir_target(const char *cmd, const char *path, const wsync_store *s, const wsync_chain_options *co,
                   uint64_t limit)
{
    struct stat lsb, sb;
    wsync_chain_info info;
    wsync_error err;
    size_t i;
    int dir = 0;
    if (lstat(path, &lsb) == 0) {
        if (S_ISLNK(lsb.st_mode) && stat(path, &sb) != 0) { /* dangling: a version of ours gone, or not ours */
            char target[4096], parent[4096];
            const char *base, *rest;
            ssize_t n = readlink(path, target, sizeof target - 1);
            size_t blen;
            cli_split_path(path, parent, sizeof parent, &base);
            blen = strlen(base);
            if (n > 0) target[n] = 0;
            if (n > 0 && strncmp(target, base, blen) == 0 && strncmp(target + blen, ".step_", 6) == 0 &&
                version_suffix(target + blen + 6, &rest) && !*rest)
                return CLI_TARGET_DIR; /* rebuilt from the chain's anchor, the link switched to it */
            cli_tool_fail(cmd, WSYNC_ERR_UNSUPPORTED, path, "a symbolic link to '%s', which does not exist and is "
                          "not a version wsync made beside it; it is left alone (remove it, or give another path)",
                          n > 0 ? target : "?");
            return -1;
        }
        if (S_ISLNK(lsb.st_mode) && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            if (has_step_file(path)) return CLI_TARGET_DIR;
            cli_tool_fail(cmd, WSYNC_ERR_UNSUPPORTED, path, "a link to a directory wsync did not make (it holds no "
                          "%s); give a path that does not exist yet (wsync makes it a link to a version "
                          "beside it)", CLI_DIR_STEP_FILE);
            return -1;
        }
        if (S_ISDIR(lsb.st_mode)) {
            cli_tool_fail(cmd, WSYNC_ERR_UNSUPPORTED, path, "a directory: wsync keeps a model directory as a "
                          "symbolic link it switches from version to version (%s -> %s.step_N), and does not "
                          "write into a directory of yours; give a path that does not exist yet", path, path);
            return -1;
        }
        return CLI_TARGET_FILE;
    }
    if (errno != ENOENT || ends_with(path, ".safetensors")) return CLI_TARGET_FILE;
    if (wsync_chain_read(s, co, &info, &err) != WSYNC_OK) {
        cli_chain_fail(cmd, &err, "reading the chain");
        return -2;
    }
    if (limit == WSYNC_STEP_LATEST) limit = info.head_step;
    for (i = 0; i < info.n_entries; i++) /* ascending by step: the last match is the newest */
        if (info.entries[i].kind == WSYNC_CHAIN_ANCHOR && info.entries[i].step <= limit)
            dir = info.entries[i].n_files > 0;
    wsync_chain_info_free(&info);
    return dir ? CLI_TARGET_DIR : CLI_TARGET_FILE;
}

/* The step a version claims (its CLI_DIR_STEP_FILE), and the signed chain
   it came from when it says ("chain": 32 hex digits; im->has_chain). */
static int read_step_file(const char *cmd, const char *dir, uint64_t *step, cli_image *im, uint64_t *state)
{
    char full[8192], why[300];
    wsync_mapped map;
    wsync_error err;
    cli_json *root = NULL;
    int ok;
    snprintf(full, sizeof full, "%s/%s", dir, CLI_DIR_STEP_FILE);
    if (wsync_file_map(full, &map, &err) != WSYNC_OK) return cli_chain_fail(cmd, &err, "%s", full), 0;
    if (map.size > 4096) ok = 0, snprintf(why, sizeof why, "%llu bytes", (unsigned long long)map.size);
    else ok = cli_json_parse((const char *)map.bytes, (size_t)map.size, &root, why, sizeof why);
    wsync_file_unmap(&map);
    if (ok) {
        const cli_json *id = cli_json_member(root, "chain");
        ok = cli_json_u64(cli_json_member(root, "step"), step) && *step <= WSYNC_STEP_MAX;
        snprintf(why, sizeof why, "%s", "no \"step\" that is a step number");
        if (ok && id && !(id->kind == CLI_JSON_STRING && cli_parse_chain_id(id->str, id->len, im->chain)))
            ok = 0, snprintf(why, sizeof why, "%s", "\"chain\" is not 32 hex digits");
        im->has_chain = ok && id;
        if (ok && state) { /* "state": 16 hex digits (0 when absent) */
            const cli_json *st = cli_json_member(root, "state");
            char *end;
            *state = st && st->kind == CLI_JSON_STRING && st->len == 16 ? strtoull(st->str, &end, 16) : 0;
        }
    }
    cli_json_free(root);
    if (!ok) return cli_tool_fail(cmd, WSYNC_ERR_INVALID_METADATA, full, "not a step file: %s", why), 0;
    return 1;
}

int cli_dir_image_from_link(const char *cmd, const char *path, cli_image *im, cli_dir_layout *lay)
{
    name_list entries, shards;
    wsync_mapped *maps = NULL;
    wsync_st_file *sts = NULL;
    wsync_st_tensor_desc *d = NULL;
    char (*names)[WSYNC_CHAIN_FILE_NAME_MAX] = NULL;
    size_t *counts = NULL, i, j, at = 0, nt = 0, n_open = 0;
    char full[8192];
    wsync_error err;
    uint64_t step;
    int ok = 0;
    memset(im, 0, sizeof *im);
    memset(lay, 0, sizeof *lay);
    memset(&shards, 0, sizeof shards);
    if (!read_step_file(cmd, path, &step, im, NULL)) return 0;
    if (!list_files(path, &entries))
        return cli_tool_fail(cmd, WSYNC_ERR_IO, path, "cannot list the directory: %s", strerror(errno)), 0;
    for (i = 0; i < entries.n; i++)
        if (ends_with(entries.v[i], ".safetensors") && strlen(entries.v[i]) < WSYNC_CHAIN_FILE_NAME_MAX &&
            !names_push(&shards, entries.v[i])) {
            cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, path, "%s", "names");
            goto done;
        }
    if (!shards.n) {
        cli_tool_fail(cmd, WSYNC_ERR_NOT_FOUND, path, "%s", "the version holds no *.safetensors shard");
        goto done;
    }
    maps = (wsync_mapped *)calloc(shards.n, sizeof *maps);
    sts = (wsync_st_file *)calloc(shards.n, sizeof *sts);
    names = (char (*)[WSYNC_CHAIN_FILE_NAME_MAX])calloc(shards.n, sizeof *names);
    counts = (size_t *)calloc(shards.n, sizeof *counts);
    if (!maps || !sts || !names || !counts) {
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, path, "%s", "shards");
        goto done;
    }
    for (i = 0; i < shards.n; i++) {
        snprintf(full, sizeof full, "%s/%s", path, shards.v[i]);
        if (wsync_file_map(full, &maps[i], &err) != WSYNC_OK) {
            cli_chain_fail(cmd, &err, "%s", full);
            goto done;
        }
        if (wsync_st_parse(maps[i].bytes, maps[i].size, NULL, &sts[i], &err) != WSYNC_OK) {
            wsync_file_unmap(&maps[i]);
            cli_chain_fail(cmd, &err, "%s: invalid safetensors", full);
            goto done;
        }
        n_open = i + 1;
        if (wsync_st_check_names(&sts[i], &err) != WSYNC_OK) {
            cli_chain_fail(cmd, &err, "%s", full);
            goto done;
        }
        memcpy(names[i], shards.v[i], strlen(shards.v[i]) + 1);
        counts[i] = sts[i].n_tensors;
        nt += sts[i].n_tensors;
    }
    if (!(d = (wsync_st_tensor_desc *)calloc(nt + 1, sizeof *d))) {
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, path, "%zu tensors", nt);
        goto done;
    }
    for (i = 0; i < shards.n; i++) descs_of(&sts[i], d, &at);
    if (!image_build(cmd, path, d, nt, im)) goto done;
    if (!layout_runs(lay, shards.n, names, counts, sts)) {
        cli_image_free(im);
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, path, "%s", "layout");
        goto done;
    }
    /* the data, shard by shard: each mapping let go once copied */
    for (i = 0, at = 0; i < shards.n; i++) {
        for (j = 0; j < sts[i].n_tensors; j++, at++)
            if (im->t[at].nbytes) memcpy(im->t[at].data, sts[i].tensors[j].data, (size_t)im->t[at].nbytes);
        wsync_st_free(&sts[i]);
        wsync_file_unmap(&maps[i]);
    }
    n_open = 0;
    {
        ssize_t rl = readlink(path, lay->linked, sizeof lay->linked - 1);
        lay->linked[rl > 0 ? rl : 0] = 0;
    }
    im->has_step = 1;
    im->step = step;
    ok = 1;
done:
    if (!ok) im->has_chain = 0;
    for (i = 0; i < n_open; i++) {
        wsync_st_free(&sts[i]);
        wsync_file_unmap(&maps[i]);
    }
    free(maps);
    free(sts);
    free(d);
    free(names);
    free(counts);
    names_free(&entries);
    names_free(&shards);
    return ok;
}

/* ---- versions on disk ---- */

/* Removes a directory of plain files (a version, or one being built): its
   entries, never following a link or entering a subdirectory, then itself. */
static int remove_tree(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), ok = 1;
    DIR *d;
    struct dirent *e;
    if (fd < 0) return 0;
    if (!(d = fdopendir(fd))) {
        close(fd);
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (unlinkat(fd, e->d_name, 0) != 0) ok = 0;
    }
    closedir(d);
    return rmdir(path) == 0 && ok;
}

/* s is digits (at least one), then optionally "." and digits: the rest of
   a version's name after "BASE.step_". */
static int version_suffix(const char *s, const char **end)
{
    const char *p = s;
    while (is_digit((unsigned char)*p)) p++;
    if (p == s) return 0;
    if (*p == '.' && is_digit((unsigned char)p[1])) {
        p++;
        while (is_digit((unsigned char)*p)) p++;
    }
    *end = p;
    return 1;
}

/* A pid in s ending the string: > 0, not ours, and gone. */
static int dead_pid(const char *s)
{
    char *end;
    long pid;
    if (!is_digit((unsigned char)*s)) return 0;
    errno = 0;
    pid = strtol(s, &end, 10);
    if (*end || errno || pid <= 0 || pid == (long)getpid()) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* An old version is first renamed to a temporary of ours (BASE.step_N.tmp.
   PID), then removed: a run killed half way through leaves a temporary of a
   dead process, which the next run removes (cli_dir_remove_stale), not a
   version without its step file that no run would recognize as ours. */
static void remove_version(const char *full)
{
    char tmp[8300];
    struct stat sb;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", full, (long)getpid()) >= (int)sizeof tmp) return;
    if (lstat(tmp, &sb) == 0) remove_tree(tmp);
    if (rename(full, tmp) != 0) return;
    if (getenv("WSYNC_TEST_DIE_IN_REMOVAL")) { /* tests: a run killed with the removal half done */
        char step_file[8400];
        snprintf(step_file, sizeof step_file, "%s/%s", tmp, CLI_DIR_STEP_FILE);
        unlink(step_file);
        raise(SIGKILL);
    }
    remove_tree(tmp);
}

/* The versions beside `path` other than `keep1` and `keep2` (names in the
   parent), that wsync made, are removed (after a switch, and at any run's
   start: prune_versions). */
static void remove_old_versions(const char *parent, const char *base, const char *keep1, const char *keep2)
{
    char full[8192];
    size_t blen = strlen(base);
    DIR *d;
    struct dirent *e;
    char linked[4096] = "";
    ssize_t rl;
    /* the version the link names now is never removed, whatever the caller
       thought it was (runs on one directory hold cli_dir_lock; this holds
       without it too) */
    if (snprintf(full, sizeof full, "%s/%s", parent, base) < (int)sizeof full &&
        (rl = readlink(full, linked, sizeof linked - 1)) > 0)
        linked[rl] = 0;
    if (!(d = opendir(parent))) return;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name, *rest;
        struct stat sb;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".step_", 6) != 0 ||
            !version_suffix(n + blen + 6, &rest) || *rest || strcmp(n, keep1) == 0 || (keep2 && strcmp(n, keep2) == 0) ||
            strcmp(n, linked) == 0)
            continue;
        if (snprintf(full, sizeof full, "%s/%s", parent, n) >= (int)sizeof full) continue;
        if (lstat(full, &sb) == 0 && S_ISDIR(sb.st_mode) && has_step_file(full)) remove_version(full);
    }
    closedir(d);
}

/* A version's name after "BASE.step_": its step and its ".K" (0 without). */
static void version_number(const char *s, unsigned long long *step, unsigned long long *k)
{
    char *end;
    *step = strtoull(s, &end, 10);
    *k = *end == '.' ? strtoull(end + 1, NULL, 10) : 0;
}

/* When its step file was written: when the version was built. */
static int version_time(const char *dir, struct timespec *t)
{
    char full[8192];
    struct stat sb;
    if (snprintf(full, sizeof full, "%s/%s", dir, CLI_DIR_STEP_FILE) >= (int)sizeof full) return 0;
    if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    *t = sb.st_mtim;
    return 1;
}

static int time_cmp(const struct timespec *a, const struct timespec *b)
{
    if (a->tv_sec != b->tv_sec) return a->tv_sec < b->tv_sec ? -1 : 1;
    return a->tv_nsec < b->tv_nsec ? -1 : a->tv_nsec > b->tv_nsec;
}

/* Any run, updating or not: the versions beside `path` are pruned to the
   one it links to and the previous one, as cli_dir_save leaves them after a
   switch, so what a run killed before its removal left does not stay. A
   version is only linked right after it is built, so one built after the
   linked one was never linked (a run killed between its rename and the
   switch) and is removed; of the others the last built is the previous one
   (ties: a step not after the linked one's, then the higher step). Nothing
   is removed when `path` does not link to a version of ours beside it. */
static void prune_versions(const char *path, const char *parent, const char *base)
{
    char full[8192], cur[256] = "", prev[256] = "";
    size_t blen = strlen(base);
    struct stat lsb, sb;
    struct timespec cur_t, prev_t = {0, 0}, t;
    unsigned long long cur_step = 0, prev_step = 0, prev_k = 0, st, k;
    DIR *d;
    struct dirent *e;
    if (stat(path, &lsb) != 0 || !S_ISDIR(lsb.st_mode) || !version_time(path, &cur_t) || !(d = opendir(parent))) return;
    while ((e = readdir(d)) != NULL) { /* the linked version's name */
        const char *n = e->d_name, *rest;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".step_", 6) != 0 ||
            !version_suffix(n + blen + 6, &rest) || *rest || strlen(n) >= sizeof cur ||
            snprintf(full, sizeof full, "%s/%s", parent, n) >= (int)sizeof full)
            continue;
        if (lstat(full, &sb) == 0 && S_ISDIR(sb.st_mode) && sb.st_dev == lsb.st_dev && sb.st_ino == lsb.st_ino) {
            snprintf(cur, sizeof cur, "%s", n);
            version_number(n + blen + 6, &cur_step, &k);
        }
    }
    if (!cur[0]) {
        closedir(d);
        return;
    }
    rewinddir(d);
    while ((e = readdir(d)) != NULL) { /* the previous one */
        const char *n = e->d_name, *rest;
        int better;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".step_", 6) != 0 ||
            !version_suffix(n + blen + 6, &rest) || *rest || strlen(n) >= sizeof prev || strcmp(n, cur) == 0 ||
            snprintf(full, sizeof full, "%s/%s", parent, n) >= (int)sizeof full)
            continue;
        if (lstat(full, &sb) != 0 || !S_ISDIR(sb.st_mode) || !version_time(full, &t) || time_cmp(&t, &cur_t) > 0)
            continue;
        version_number(n + blen + 6, &st, &k);
        if (!prev[0] || time_cmp(&t, &prev_t) != 0) better = !prev[0] || time_cmp(&t, &prev_t) > 0;
        else if ((st <= cur_step) != (prev_step <= cur_step)) better = st <= cur_step;
        else better = st != prev_step ? st > prev_step : k > prev_k;
        if (better) {
            snprintf(prev, sizeof prev, "%s", n);
            prev_t = t;
            prev_step = st;
            prev_k = k;
        }
    }
    closedir(d);
    remove_old_versions(parent, base, cur, prev[0] ? prev : NULL);
}

void cli_dir_remove_stale(const char *path)
{
    char parent[4096], full[8192];
    const char *base;
    size_t blen;
    DIR *d;
    struct dirent *e;
    cli_split_path(path, parent, sizeof parent, &base);
    blen = strlen(base);
    if (!blen || !(d = opendir(parent))) return;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name, *rest;
        struct stat sb;
        if (strncmp(n, base, blen) != 0) continue;
        n += blen;
        if (snprintf(full, sizeof full, "%s/%s", parent, e->d_name) >= (int)sizeof full) continue;
        if (strncmp(n, ".link.tmp.", 10) == 0 && dead_pid(n + 10)) {
            if (lstat(full, &sb) == 0 && S_ISLNK(sb.st_mode)) unlink(full);
        } else if (strncmp(n, ".step_", 6) == 0 && version_suffix(n + 6, &rest) && strncmp(rest, ".tmp.", 5) == 0 &&
                   dead_pid(rest + 5)) {
            if (lstat(full, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(full);
        }
    }
    closedir(d);
    prune_versions(path, parent, base);
}

/* Writes `len` bytes to dir/name (a new file), fsynced. */
static int write_new_file(const char *cmd, const char *dir, const char *name, const void *bytes, size_t len)
{
    char full[8192];
    int fd, ok;
    size_t off = 0;
    if (!join(full, sizeof full, dir, name)) return cli_tool_fail(cmd, WSYNC_ERR_LIMIT, dir, "%s", "path too long"), 0;
    if ((fd = open(full, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)) < 0)
        return cli_tool_fail(cmd, WSYNC_ERR_IO, full, "cannot create: %s", strerror(errno)), 0;
    while (off < len) {
        ssize_t w = write(fd, (const uint8_t *)bytes + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    ok = off == len && fsync(fd) == 0;
    if (!ok) cli_tool_fail(cmd, WSYNC_ERR_IO, full, "cannot write: %s", strerror(errno));
    if (close(fd) != 0 && ok) ok = 0, cli_tool_fail(cmd, WSYNC_ERR_IO, full, "cannot close: %s", strerror(errno));
    return ok;
}

/* One shard of the version: its tensors in the layout's order, and
   __metadata__ the trainer's keys in their order, "step" the pulled step:
   in its place where the trainer wrote one (the shard is then the
   trainer's byte for byte, when canonical), else last, because every
   pulled shard claims its step (a reader checks that the shards it loads
   are of one step; a relay publishes at it). A shard with none (a chain
   of single-file anchors) "format": "pt" and "step". */
static int write_shard(const char *cmd, const char *dir, const cli_dir_shard *sh, const cli_image *im, uint64_t step)
{
    wsync_st_tensor_desc *d = (wsync_st_tensor_desc *)calloc(sh->n + 1, sizeof *d);
    wsync_st_kv two[2], *meta = two;
    size_t n_meta = 2;
    char full[8192], stepbuf[32];
    wsync_error err;
    FILE *f = NULL;
    size_t j;
    int fd, ok = 0;
    if (!join(full, sizeof full, dir, sh->name)) {
        free(d);
        return cli_tool_fail(cmd, WSYNC_ERR_LIMIT, dir, "%s", "path too long"), 0;
    }
    if (!d) return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, full, "%s", "tensor list"), 0;
    for (j = 0; j < sh->n; j++) {
        size_t i = sh->idx[j];
        d[j].name = im->t[i].name;
        d[j].name_len = im->st.tensors[i].name_len;
        d[j].dtype = im->t[i].dtype;
        d[j].rank = im->t[i].rank;
        d[j].shape = im->t[i].shape;
        d[j].data = im->t[i].data;
        d[j].nbytes = im->t[i].nbytes;
    }
    snprintf(stepbuf, sizeof stepbuf, "%llu", (unsigned long long)step);
    memset(two, 0, sizeof two);
    two[0].key = "format", two[0].value = "pt";
    two[1].key = "step", two[1].value = stepbuf;
    if (sh->has_meta && sh->n_meta) {
        int stepped = 0;
        if (!(meta = (wsync_st_kv *)malloc((sh->n_meta + 1) * sizeof *meta))) {
            free(d);
            return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, full, "%s", "metadata"), 0;
        }
        memcpy(meta, sh->meta, sh->n_meta * sizeof *meta);
        for (j = 0, n_meta = sh->n_meta; j < n_meta; j++)
            if (meta[j].key_len == 4 && memcmp(meta[j].key, "step", 4) == 0)
                meta[j].value = stepbuf, meta[j].value_len = strlen(stepbuf), stepped = 1;
        if (!stepped) meta[n_meta++] = two[1];
    }
    if ((fd = open(full, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)) < 0 || !(f = fdopen(fd, "wb"))) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, full, "cannot create: %s", strerror(errno));
        if (fd >= 0) close(fd);
        if (meta != two) free(meta);
        free(d);
        return 0;
    }
    if (wsync_st_write(d, sh->n, meta, n_meta, cli_file_sink, f, NULL, &err) != WSYNC_OK)
        cli_chain_fail(cmd, &err, "writing %s", full);
    else if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        cli_tool_fail(cmd, WSYNC_ERR_IO, full, "cannot write: %s", strerror(errno));
    else ok = 1;
    if (fclose(f) != 0 && ok) ok = 0, cli_tool_fail(cmd, WSYNC_ERR_IO, full, "cannot close: %s", strerror(errno));
    if (meta != two) free(meta);
    free(d);
    return ok;
}

/* Whether bytes are file f as HEAD names it: its size and wsync64 digest,
   and with a verify key its BLAKE2b-256 (a signed HEAD names every file's).
   0 with why. */
static int file_matches(const wsync_chain_options *co, const wsync_chain_file *f, const uint8_t *bytes, uint64_t size,
                        const char **why)
{
    if (size != f->bytes) return *why = "its size is not HEAD's", 0;
    if (wsync_digest(bytes, (size_t)size) != f->digest)
        return *why = "its bytes do not match HEAD's digest (a damaged or replaced object)", 0;
    if (co->verify_key) {
        uint8_t h[WSYNC_CHAIN_HASH_SIZE];
        if (!f->has_hash) return *why = "the signed HEAD names no BLAKE2b-256 for it", 0;
        wsync_blake2b(bytes, (size_t)size, h, sizeof h);
        if (memcmp(h, f->hash, sizeof h) != 0)
            return *why = "its BLAKE2b-256 is not the one the signed HEAD names (a replaced object)", 0;
    }
    return 1;
}

/* A plain file of anchor e: a hard link to the previous version's file
   when that one has the same size and digest (and hash, file_matches), else
   fetched from the store and checked the same way. */
static int put_plain_file(const char *cmd, const wsync_store *s, const wsync_chain_options *co,
                          const wsync_chain_entry *e, const wsync_chain_file *f, const char *prev, const char *dir)
{
    char key[1400], old[8192], full[8192];
    wsync_error err;
    uint8_t *bytes = NULL;
    uint64_t size = 0;
    int ok;
    if (!join(full, sizeof full, dir, f->name))
        return cli_tool_fail(cmd, WSYNC_ERR_LIMIT, dir, "%s", "path too long"), 0;
    if (prev && join(old, sizeof old, prev, f->name)) {
        wsync_mapped map;
        struct stat sb;
        if (lstat(old, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == f->bytes &&
            wsync_file_map(old, &map, &err) == WSYNC_OK) {
            const char *why;
            int same = file_matches(co, f, map.bytes, map.size, &why);
            wsync_file_unmap(&map);
            if (same && link(old, full) == 0) return 1;
        }
    }
    if (!file_key(key, sizeof key, co, e, f->name))
        return cli_tool_fail(cmd, WSYNC_ERR_LIMIT, f->name, "%s", "the key is too long"), 0;
    if (wsync_store_get_capped(s, key, f->bytes, WSYNC_STORE_GET_EXACT, NULL, &bytes, &size, &err) != WSYNC_OK)
        return cli_chain_fail(cmd, &err, "fetching %s", key), 0;
    if (size != f->bytes) {
        free(bytes);
        return cli_tool_fail(cmd, WSYNC_ERR_SIZE_MISMATCH, key, "%llu bytes, HEAD says %llu",
                             (unsigned long long)size, (unsigned long long)f->bytes), 0;
    }
    {
        const char *why;
        if (!file_matches(co, f, bytes, size, &why)) {
            free(bytes);
            return cli_tool_fail(cmd, WSYNC_ERR_DIGEST_MISMATCH, key, "%s", why), 0;
        }
    }
    ok = write_new_file(cmd, dir, f->name, bytes, (size_t)size);
    free(bytes);
    return ok;
}

/* The plain files of the version `prev` links to (every regular file but
   the shards and CLI_DIR_STEP_FILE) into dir, hard links (copies where a
   link cannot be made): a step with no anchor at or before it in HEAD
   (retention dropped it) keeps the files of the step it came from. 1 done
   (*n: how many); 0 after saying why. */
static int carry_prev_files(const char *cmd, const char *prev, const char *dir, size_t *n)
{
    name_list entries;
    char old[8192], full[8192];
    size_t i;
    *n = 0;
    if (!list_files(prev, &entries))
        return cli_tool_fail(cmd, WSYNC_ERR_IO, prev, "cannot list the previous version: %s", strerror(errno)), 0;
    for (i = 0; i < entries.n; i++) {
        const char *nm = entries.v[i];
        struct stat sb;
        wsync_mapped map;
        wsync_error err;
        int ok;
        if (ends_with(nm, ".safetensors") || strcmp(nm, CLI_DIR_STEP_FILE) == 0) continue;
        if (!join(old, sizeof old, prev, nm) || !join(full, sizeof full, dir, nm) || lstat(old, &sb) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        if (link(old, full) == 0) {
            (*n)++;
            continue;
        }
        if (wsync_file_map(old, &map, &err) != WSYNC_OK) {
            names_free(&entries);
            return cli_chain_fail(cmd, &err, "%s", old), 0;
        }
        ok = write_new_file(cmd, dir, nm, map.bytes, (size_t)map.size);
        wsync_file_unmap(&map);
        if (!ok) {
            names_free(&entries);
            return 0;
        }
        (*n)++;
    }
    names_free(&entries);
    return 1;
}

int cli_dir_save(const char *cmd, const wsync_store *s, const wsync_chain_options *co, const cli_image *im,
                 cli_dir_layout *lay, const char *path, uint64_t step)
{
    wsync_chain_info info;
    const wsync_chain_entry *an = NULL;
    wsync_error err;
    char parent[4096], prevname[4096], finalname[4096], final[4096], tmp[4096], linktmp[4096], text[192];
    const char *base;
    struct stat sb;
    uint64_t state = 0;
    int known = 0, ok = 0, have_prev = 0, built = 0, n;
    unsigned u;
    size_t i;
    ssize_t rl;
    if (wsync_chain_read(s, co, &info, &err) != WSYNC_OK)
        return cli_chain_fail(cmd, &err, "reading the chain for the version's files"), 0;
    for (i = 0; i < info.n_entries; i++) {
        const wsync_chain_entry *e = &info.entries[i];
        if (e->kind == WSYNC_CHAIN_ANCHOR && e->step <= step) an = e;
        if (e->step == step && e->has_digests) state = e->state, known = 1;
    }
    if (!known && wsync_state_digest(im->t, im->st.n_tensors, co->threads, &state, &err) != WSYNC_OK) {
        wsync_chain_info_free(&info);
        return cli_chain_fail(cmd, &err, "the state digest of step %llu", (unsigned long long)step), 0;
    }
    /* the shards as the anchor lays them out (its headers read again when
       the anchor is not the one the layout came from) */
    if (an && an->n_files && (!lay->from_anchor || lay->anchor_step != an->step)) {
        cli_dir_layout fresh;
        if (!layout_from_entry(cmd, s, co, an, im, &fresh)) {
            wsync_chain_info_free(&info);
            return 0;
        }
        memcpy(fresh.linked, lay->linked, sizeof fresh.linked);
        cli_dir_layout_free(lay);
        *lay = fresh;
    } else if (!lay->n_shards) { /* a chain of single-file anchors: one shard */
        char one[1][WSYNC_CHAIN_FILE_NAME_MAX];
        size_t count = im->st.n_tensors;
        snprintf(one[0], sizeof one[0], "model.safetensors");
        if (!layout_runs(lay, 1, one, &count, NULL)) {
            wsync_chain_info_free(&info);
            return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, path, "%s", "layout"), 0;
        }
    }
    cli_split_path(path, parent, sizeof parent, &base);
    { /* another run switched the link, since this one read it, to this
           very step (runs take turns, cli_dir_lock): nothing to write. The
           link this run read is rebuilt (a damaged version repaired). */
        cli_image quiet;
        uint64_t have_step = 0, have_state = 0;
        char line[600], now[512];
        ssize_t rl = readlink(path, now, sizeof now - 1);
        memset(&quiet, 0, sizeof quiet);
        now[rl > 0 ? rl : 0] = 0;
        cli_fail_capture(line, sizeof line);
        n = rl > 0 && strcmp(now, lay->linked) != 0 && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && has_step_file(path) &&
            read_step_file(cmd, path, &have_step, &quiet, &have_state) && have_step == step && have_state == state &&
            quiet.has_chain == im->has_chain &&
            (!im->has_chain || memcmp(quiet.chain, im->chain, sizeof quiet.chain) == 0);
        cli_fail_capture(NULL, 0);
        if (n) {
            memcpy(lay->linked, now, sizeof now);
            wsync_chain_info_free(&info);
            return 1;
        }
    }
    prevname[0] = 0;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) && (rl = readlink(path, prevname, sizeof prevname - 1)) > 0) {
        prevname[rl] = 0;
        have_prev = 1;
        if (strchr(prevname, '/')) prevname[0] = 0; /* not a name beside it: not one of ours to keep by name */
    }
    /* the version's name: BASE.step_NNNNNN, or BASE.step_NNNNNN.K when that
       is taken (the same step rebuilt, or an older version a reader may
       still be reading): nothing is removed before the switch */
    for (u = 0;; u++) {
        if (u == 0) n = snprintf(finalname, sizeof finalname, "%s.step_%06llu", base, (unsigned long long)step);
        else n = snprintf(finalname, sizeof finalname, "%s.step_%06llu.%u", base, (unsigned long long)step, u);
        if (n <= 0 || (size_t)n >= sizeof finalname) {
            wsync_chain_info_free(&info);
            return cli_tool_fail(cmd, WSYNC_ERR_LIMIT, path, "%s", "the name is too long"), 0;
        }
        if (strcmp(finalname, prevname) != 0 && join(final, sizeof final, parent, finalname) &&
            lstat(final, &sb) != 0 && errno == ENOENT)
            break;
        if (u >= 1000) {
            wsync_chain_info_free(&info);
            return cli_tool_fail(cmd, WSYNC_ERR_IO, final, "%s", "and 1000 names after it are taken"), 0;
        }
    }
    if (!join(final, sizeof final, parent, finalname) ||
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", final, (long)getpid()) >= (int)sizeof tmp ||
        snprintf(linktmp, sizeof linktmp, "%s/%s.link.tmp.%ld", parent, base, (long)getpid()) >= (int)sizeof linktmp) {
        wsync_chain_info_free(&info);
        return cli_tool_fail(cmd, WSYNC_ERR_LIMIT, path, "%s", "the name is too long"), 0;
    }
    if (lstat(tmp, &sb) == 0) remove_tree(tmp); /* a run of ours, or of a dead process with our pid */
    if (mkdir(tmp, 0755) != 0) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, tmp, "cannot create: %s", strerror(errno));
        goto done;
    }
    built = 1;
    for (i = 0; i < lay->n_shards; i++)
        if (!write_shard(cmd, tmp, &lay->shards[i], im, step)) goto done;
    for (i = 0; an && i < an->n_files; i++) /* a CLI_DIR_STEP_FILE an older publish carried: not the anchor's to give */
        if (!an->files[i].tensors && strcmp(an->files[i].name, CLI_DIR_STEP_FILE) != 0 &&
            !put_plain_file(cmd, s, co, an, &an->files[i], have_prev ? path : NULL, tmp))
            goto done;
    if (!an) { /* no anchor at or before the step in HEAD now (retention dropped it, or a publisher raced) */
        size_t carried = 0;
        struct stat psb;
        if (have_prev && stat(path, &psb) == 0 && S_ISDIR(psb.st_mode)) {
            if (!carry_prev_files(cmd, path, tmp, &carried)) goto done;
        } else if (lay->from_anchor) { /* a directory's: its files are nowhere to take from */
            cli_tool_fail(cmd, WSYNC_ERR_NOT_FOUND, path, "HEAD names no anchor at or before step %llu any more (the "
                          "anchor %llu the sync started from is gone: retention, or a publisher meanwhile) and there "
                          "is no previous version to take the directory's files from; %s left as it was, try again",
                          (unsigned long long)step, (unsigned long long)lay->anchor_step, path);
            goto done;
        }
    }
    n = snprintf(text, sizeof text, "{\"step\":%llu,\"state\":\"%016llx\"", (unsigned long long)step,
                 (unsigned long long)state);
    if (im->has_chain) { /* the signed chain the step came from (a pull given --verify-key) */
        n += snprintf(text + n, sizeof text - (size_t)n, ",\"chain\":\"");
        for (i = 0; i < WSYNC_CHAIN_ID_SIZE; i++) n += snprintf(text + n, sizeof text - (size_t)n, "%02x", im->chain[i]);
        n += snprintf(text + n, sizeof text - (size_t)n, "\"");
    }
    n += snprintf(text + n, sizeof text - (size_t)n, "}\n");
    if (!write_new_file(cmd, tmp, CLI_DIR_STEP_FILE, text, (size_t)n)) goto done;
    if (!cli_fsync_dir(tmp)) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, tmp, "cannot fsync: %s", strerror(errno));
        goto done;
    }
    if (rename(tmp, final) != 0) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, tmp, "cannot rename to %s: %s", final, strerror(errno));
        goto done;
    }
    built = 2;
    if (!cli_fsync_dir(parent))
        fprintf(stderr, "wsync: %s: warning: cannot fsync directory %s: %s\n", cmd, parent, strerror(errno));
    /* the switch: a new link renamed over the old one */
    unlink(linktmp);
    if (symlink(finalname, linktmp) != 0) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, linktmp, "cannot create the link: %s", strerror(errno));
        goto done;
    }
    if (rename(linktmp, path) != 0) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, linktmp, "cannot rename over %s: %s", path, strerror(errno));
        unlink(linktmp);
        goto done;
    }
    if (!cli_fsync_dir(parent))
        fprintf(stderr, "wsync: %s: warning: cannot fsync directory %s: %s\n", cmd, parent, strerror(errno));
    ok = 1;
    if (strlen(finalname) < sizeof lay->linked) memcpy(lay->linked, finalname, strlen(finalname) + 1);
    else lay->linked[0] = 0;
    remove_old_versions(parent, base, finalname, prevname[0] ? prevname : NULL);
done:
    if (!ok && built == 1) remove_tree(tmp);
    if (!ok && built == 2) remove_version(final);
    wsync_chain_info_free(&info);
    return ok;
}

/* ---- runs on one directory, one at a time ---- */

int cli_dir_lock(const char *cmd, const char *path)
{
    char parent[4096], lock[8192];
    const char *base;
    int fd;
    cli_split_path(path, parent, sizeof parent, &base);
    if (snprintf(lock, sizeof lock, "%s/.%s.wsync-lock", parent, base) >= (int)sizeof lock)
        return cli_tool_fail(cmd, WSYNC_ERR_LIMIT, path, "%s", "the lock's name is too long"), -1;
    if ((fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644)) < 0)
        return cli_tool_fail(cmd, WSYNC_ERR_IO, lock, "cannot open the lock: %s", strerror(errno)), -1;
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue; /* a follower's stop signal: it stops after this run */
        cli_tool_fail(cmd, WSYNC_ERR_IO, lock, "cannot lock: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

void cli_dir_unlock(int fd)
{
    if (fd >= 0) close(fd); /* the lock goes with the descriptor */
}
