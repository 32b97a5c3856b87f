/* cli.c - the helpers the wsync tool's commands share (declared in cli.h). */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- arguments and errors ---- */

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "wsync: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see 'wsync --help')\n");
    return EXIT_USAGE;
}

int cli_usage_models(const char *cmd, const char *name)
{
    size_t i;
    fprintf(stderr, "wsync: %s: unknown model '%s'; known:", cmd, name);
    for (i = 0; wsync_gen_model_name(i); i++) fprintf(stderr, " %s", wsync_gen_model_name(i));
    fprintf(stderr, "\n(see 'wsync %s --help')\n", cmd);
    return EXIT_USAGE;
}

/* Where cli_chain_fail's lines go while a caller captures them (a follower
   that says a repeated failure at its own pace): the last line, kept. */
static char *capture_buf;
static size_t capture_cap;
static wsync_result capture_code;
static wsync_result last_code;

wsync_result cli_fail_last(void)
{
    return last_code;
}

void cli_fail_capture(char *buf, size_t cap)
{
    capture_buf = cap ? buf : NULL;
    capture_cap = cap;
    capture_code = WSYNC_OK;
    if (capture_buf) capture_buf[0] = 0;
}

wsync_result cli_fail_captured(void)
{
    return capture_code;
}

/* "wsync: CMD: WHAT: WSYNC_ERR_X: message"; returns 1 (the exit status). */
int cli_chain_fail(const char *cmd, const wsync_error *err, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    what[0] = 0;
    if (fmt) {
        va_start(ap, fmt);
        vsnprintf(what, sizeof what - 2, fmt, ap);
        va_end(ap);
        strcat(what, ": ");
    }
    last_code = err->code;
    if (capture_buf) {
        snprintf(capture_buf, capture_cap, "wsync: %s: %s%s: %s", cmd, what, wsync_result_name(err->code),
                 err->message[0] ? err->message : wsync_result_str(err->code));
        capture_code = err->code;
        return 1;
    }
    fprintf(stderr, "wsync: %s: %s%s: %s\n", cmd, what, wsync_result_name(err->code),
            err->message[0] ? err->message : wsync_result_str(err->code));
    return 1;
}

int cli_exit_for(wsync_result code)
{
    switch (code) {
    case WSYNC_OK: return 0;
    case WSYNC_ERR_NO_STORE: return EXIT_NO_STORE;
    case WSYNC_ERR_NOT_FOUND: return EXIT_EMPTY_CHAIN;
    case WSYNC_ERR_LAYOUT: return EXIT_LAYOUT;
    case WSYNC_ERR_SIGNATURE: return EXIT_SIGNATURE;
    default: return 1;
    }
}

/* An error found by the tool itself, reported like the library's. */
int cli_tool_fail(const char *cmd, wsync_result code, const char *what, const char *fmt, ...)
{
    wsync_error err;
    va_list ap;
    memset(&err, 0, sizeof err);
    err.code = code;
    va_start(ap, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, ap);
    va_end(ap);
    return cli_chain_fail(cmd, &err, "%s", what);
}

int cli_is_help(const char *a)
{
    return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

/* argv[*i] is option `name` with a value after it: *val gets the value. */
int cli_opt_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    if (strcmp(argv[*i], name) != 0 || *i + 1 >= argc) return 0;
    *val = argv[++*i];
    return 1;
}

int cli_parse_chain_id(const char *s, size_t n, uint8_t id[WSYNC_CHAIN_ID_SIZE])
{
    size_t i;
    if (!s || n != 2 * WSYNC_CHAIN_ID_SIZE) return 0;
    for (i = 0; i < n; i++) {
        char c = s[i];
        unsigned v = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;
        if (v > 15) return 0;
        if (i % 2 == 0) id[i / 2] = (uint8_t)(v << 4);
        else id[i / 2] |= (uint8_t)v;
    }
    return 1;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-') return 0;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == 0;
}

/* ---- output ---- */

/* JSON string with the escapes RFC 8259 requires; bytes are valid UTF-8
   already (the reader checked), so they pass through. */
void cli_json_string(FILE *out, const char *s, size_t n)
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

double cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* system-wide: comparable across processes */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A signal cuts the sleep short, so that loops see their stop flag at once. */
void cli_sleep_s(double s)
{
    struct timespec ts;
    if (!(s > 0)) return;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

/* Decimal units, as object stores and network links count. */
const char *cli_human_bytes(char *buf, size_t cap, uint64_t b)
{
    if (b < 1000) snprintf(buf, cap, "%llu B", (unsigned long long)b);
    else if (b < 1000000) snprintf(buf, cap, "%.1f kB", (double)b / 1e3);
    else if (b < 1000000000) snprintf(buf, cap, "%.1f MB", (double)b / 1e6);
    else snprintf(buf, cap, "%.2f GB", (double)b / 1e9);
    return buf;
}

double cli_percent(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* ---- loading and saving whole files ---- */

/* The first n bytes as a C string literal when they are text, else in hex. */
static void quote_bytes(char *buf, size_t cap, const uint8_t *b, size_t n)
{
    size_t i, at = 0, text = 1;
    for (i = 0; i < n; i++)
        if (!(b[i] >= 0x20 && b[i] < 0x7f) && b[i] != '\n' && b[i] != '\r' && b[i] != '\t') text = 0;
    if (cap) buf[0] = 0;
    for (i = 0; i < n && at + 8 < cap; i++) {
        if (!text) at += (size_t)snprintf(buf + at, cap - at, "%s%02x", i ? " " : "", b[i]);
        else if (b[i] == '\n') at += (size_t)snprintf(buf + at, cap - at, "\\n");
        else if (b[i] == '\r') at += (size_t)snprintf(buf + at, cap - at, "\\r");
        else if (b[i] == '\t') at += (size_t)snprintf(buf + at, cap - at, "\\t");
        else if (b[i] == '"' || b[i] == '\\') at += (size_t)snprintf(buf + at, cap - at, "\\%c", b[i]);
        else buf[at++] = (char)b[i], buf[at] = 0;
    }
    if (text && at + 3 < cap) {
        memmove(buf + 1, buf, at + 1);
        buf[0] = '"';
        buf[at + 1] = '"';
        buf[at + 2] = 0;
    }
}

/* Why wsync_st_parse refused b: when the bytes do not look like safetensors
   at all (the 8-byte header length does not fit the file, or the header is
   not a JSON object), that, with what the first bytes are; else the
   library's message. */
const char *cli_st_why(const uint8_t *b, uint64_t size, const wsync_error *err, char *buf, size_t cap)
{
    char q[64];
    uint64_t hlen = 0, i = 8;
    int k;
    if (size < 8) {
        quote_bytes(q, sizeof q, b, (size_t)size);
        snprintf(buf, cap, "not a safetensors file: it is %llu byte%s%s%s, shorter than the 8-byte header length "
                 "a safetensors file starts with", (unsigned long long)size, size == 1 ? "" : "s",
                 size ? ", " : "", size ? q : "");
        return buf;
    }
    for (k = 7; k >= 0; k--) hlen = hlen << 8 | b[k];
    quote_bytes(q, sizeof q, b, 8);
    if (hlen > WSYNC_ST_MAX_HEADER_SIZE) {
        snprintf(buf, cap, "does not look like a safetensors file: its first 8 bytes (%s) read as a header length "
                 "of %llu bytes while the file is %llu bytes (a safetensors file starts with its header's length, "
                 "8 bytes little-endian, at most %llu)", q, (unsigned long long)hlen, (unsigned long long)size,
                 (unsigned long long)WSYNC_ST_MAX_HEADER_SIZE);
        return buf;
    }
    if (hlen > size - 8) { /* the library's words, and what they may mean */
        snprintf(buf, cap, "%s (a truncated file, or not a safetensors file: its first 8 bytes are %s)",
                 err->message, q);
        return buf;
    }
    while (i < 8 + hlen && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) i++;
    if (i < 8 + hlen && b[i] != '{') {
        quote_bytes(q, sizeof q, b + i, (size_t)(8 + hlen - i < 8 ? 8 + hlen - i : 8));
        snprintf(buf, cap, "does not look like a safetensors file: the %llu-byte header after the length does "
                 "not start with '{' but with %s (%s)", (unsigned long long)hlen, q, err->message);
        return buf;
    }
    return err->message[0] ? err->message : wsync_result_str(err->code);
}

int cli_load_file(const char *path, cli_loaded *L)
{
    wsync_error err;
    char why[1024];
    size_t i;
    memset(L, 0, sizeof *L);
    L->path = path;
    if (wsync_file_map(path, &L->map, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: %s\n", path, err.message);
        return 0;
    }
    if (wsync_st_parse(L->map.bytes, L->map.size, NULL, &L->st, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: %s: invalid safetensors (%s): %s\n", path, wsync_result_name(err.code),
                cli_st_why(L->map.bytes, L->map.size, &err, why, sizeof why));
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

void cli_unload_file(cli_loaded *L)
{
    free(L->t);
    wsync_st_free(&L->st);
    wsync_file_unmap(&L->map);
}

int cli_file_sink(void *user, const void *bytes, size_t len)
{
    return fwrite(bytes, 1, len, (FILE *)user) == len ? 0 : -1;
}

/* A temporary file next to `path` that this process made: `path` + mark
   (+ pid + ".", when pid > 0) + a random suffix, created with O_EXCL and
   O_NOFOLLOW, so that nothing already at the name (a file another run is
   writing, a planted symbolic link) is ever opened; a taken name is tried
   again with another suffix. The fd, or -1 with errno set. */
int cli_temp_create(char *buf, size_t cap, const char *path, const char *mark, long pid, mode_t mode)
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

int cli_out_open(cli_out_file *o, const char *path)
{
    int fd;
    o->path = path;
    o->f = NULL;
    if ((fd = cli_temp_create(o->tmp, sizeof o->tmp, path, ".tmp.", 0, 0666)) < 0 || !(o->f = fdopen(fd, "wb"))) {
        fprintf(stderr, "wsync: cannot create a temporary file for %s: %s\n", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            remove(o->tmp);
        }
        return 0;
    }
    return 1;
}

int cli_out_commit(cli_out_file *o, int ok)
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

/* ---- paths ---- */

/* The directory holding `path` and the name in it. */
void cli_split_path(const char *path, char *dir, size_t cap, const char **base)
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
int cli_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY), ok;
    if (fd < 0) return 0;
    ok = fsync(fd) == 0 || errno == EINVAL; /* some filesystems cannot sync a directory */
    close(fd);
    return ok;
}

/* The store key of a chain entry: entries name keys without the prefix. */
int cli_chain_key(char *buf, size_t cap, const char *prefix, const char *key)
{
    int n = prefix && *prefix ? snprintf(buf, cap, "%s/%s", prefix, key) : snprintf(buf, cap, "%s", key);
    return n > 0 && (size_t)n < cap;
}

/* ---- stores ---- */

/* Readers pass must_exist: the directory store then never creates its root
   (WSYNC_STORE_NO_CREATE), so that a mistyped --store says so
   (WSYNC_ERR_NO_STORE) rather than reads an empty chain; only publish
   creates a store. A store
   given as http:// or https:// is an HTTP bucket, s3://bucket/prefix an S3
   one (wsync_http.h). */
cli_store_opts cli_store;

/* BYTES, or with a K, M or G suffix (powers of 1024). */
static int parse_bytes(const char *v, uint64_t *out)
{
    char num[32];
    size_t n = strlen(v);
    unsigned shift = 0;
    uint64_t x;
    if (n == 0 || n >= sizeof num) return 0;
    memcpy(num, v, n + 1);
    switch (num[n - 1]) {
    case 'K': case 'k': shift = 10; break;
    case 'M': case 'm': shift = 20; break;
    case 'G': case 'g': shift = 30; break;
    default: break;
    }
    if (shift) num[--n] = 0;
    if (!cli_parse_u64(num, &x) || x == 0 || x > (UINT64_MAX >> shift)) return 0;
    *out = x << shift;
    return 1;
}

int cli_store_opt(const char *cmd, int argc, char **argv, int *i)
{
    const char *v;
    uint64_t x;
    if (cli_opt_value(argc, argv, i, "--listing", &v)) {
        if (strcmp(v, "auto") == 0) cli_store.listing = WSYNC_HTTP_LISTING_AUTO;
        else if (strcmp(v, "json") == 0) cli_store.listing = WSYNC_HTTP_LISTING_JSON;
        else if (strcmp(v, "propfind") == 0) cli_store.listing = WSYNC_HTTP_LISTING_PROPFIND;
        else return cli_usage_error("%s: --listing takes auto, json or propfind, not '%s'", cmd, v), -1;
    } else if (cli_opt_value(argc, argv, i, "--s3-part-size", &v)) {
        if (!parse_bytes(v, &x) || x < ((uint64_t)5 << 20))
            return cli_usage_error("%s: --s3-part-size takes bytes (K, M, G allowed), at least 5M (S3's "
                                   "smallest part), not '%s'", cmd, v), -1;
        cli_store.s3_part_size = x;
    } else if (cli_opt_value(argc, argv, i, "--s3-multipart-threshold", &v)) {
        if (!parse_bytes(v, &x))
            return cli_usage_error("%s: --s3-multipart-threshold takes bytes (K, M, G allowed), not '%s'", cmd, v),
                   -1;
        cli_store.s3_multipart_threshold = x;
    } else return 0;
    return 1;
}

int cli_open_dir_store(const char *cmd, const char *dir, int must_exist, wsync_store *s)
{
    /* the library's opener (wsync_store_open_url), as the Python binding's:
       s3:// takes endpoint, region and keys from AWS_ENDPOINT_URL, AWS_REGION,
       AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN */
    wsync_store_url_options o;
    wsync_error err;
    memset(&o, 0, sizeof o);
    if (must_exist) o.flags |= WSYNC_STORE_NO_CREATE; /* a reader: a missing store is WSYNC_ERR_NO_STORE */
    o.http.listing = cli_store.listing;
    o.s3.multipart_part_size = cli_store.s3_part_size; /* 0: WSYNC_S3_PART_SIZE, else 16 MiB */
    o.s3.multipart_threshold = cli_store.s3_multipart_threshold;
    if (wsync_store_open_url(dir, &o, s, &err) == WSYNC_OK) return 1;
    cli_chain_fail(cmd, &err, "store %s", dir);
    return 0;
}

/* "ftp://host/x" is no directory anyone meant (and publish would make one
   named "ftp:"): a scheme wsync does not know is a usage error, unless a
   directory of that name exists. */
int cli_store_check(const char *cmd, const char *store)
{
    const char *p = store;
    struct stat sb;
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return 0;
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '+' ||
           *p == '-' || *p == '.')
        p++;
    if (strncmp(p, "://", 3) != 0) return 0;
    if (!strncmp(store, "http://", 7) || !strncmp(store, "https://", 8) || !strncmp(store, "s3://", 5)) return 0;
    if (stat(store, &sb) == 0 && S_ISDIR(sb.st_mode)) return 0;
    return cli_usage_error("%s: --store '%s': unknown scheme '%.*s://'; a store is a directory, http://host[:port]/"
                           "prefix, https://... or s3://bucket/prefix", cmd, store, (int)(p - store), store);
}
