/* cmd_chain.c - the wsync tool's chain commands: publish, pull, follow, log.
   A local file is kept at a step of the chain in a store; the model it
   holds is a cli_image (cli.h). */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What every chain command takes: the store and how to read the chain;
   a signed chain's key (publish: --sign-key, else WSYNC_SIGN_KEY; the
   readers: --verify-key, else WSYNC_VERIFY_KEY), read by chain_keys. */
typedef struct chain_cli {
    const char *store;
    wsync_chain_options co;
    const char *sign_path, *verify_path;
    uint8_t sec[64], pub[32];
} chain_cli;

/* The key files named by the options or the environment, read into c and
   set in c->co: 0 when done (or none named); 1 after saying why (a missing
   or unreadable file, a secret key others may read, the wrong half). */
static int chain_keys(const char *cmd, chain_cli *c)
{
    wsync_error err;
    const char *env = NULL;
    if (!strcmp(cmd, "publish")) {
        if (!c->sign_path && (env = getenv("WSYNC_SIGN_KEY")) != NULL && *env) c->sign_path = env;
        if (!c->sign_path) return 0;
        if (wsync_key_read_secret(c->sign_path, c->sec, &err) != WSYNC_OK)
            return cli_chain_fail(cmd, &err, "the sign key %s%s", c->sign_path,
                                  c->sign_path == env ? " (WSYNC_SIGN_KEY)" : "");
        c->co.sign_key = c->sec;
        return 0;
    }
    if (!c->verify_path && (env = getenv("WSYNC_VERIFY_KEY")) != NULL && *env) c->verify_path = env;
    if (!c->verify_path) return 0;
    if (wsync_key_read_public(c->verify_path, c->pub, &err) != WSYNC_OK)
        return cli_chain_fail(cmd, &err, "the verify key %s%s", c->verify_path,
                              c->verify_path == env ? " (WSYNC_VERIFY_KEY)" : "");
    c->co.verify_key = c->pub;
    return 0;
}

/* The secret key leaves memory with the command (the library copied it). */
static void chain_keys_wipe(chain_cli *c)
{
    volatile uint8_t *v = c->sec;
    size_t i;
    for (i = 0; i < sizeof c->sec; i++) v[i] = 0;
}

/* Consumes --store, --prefix, --threads, --spool-dir (pull and follow) or a
   URL store's option (cli_store_opt) at argv[*i]: 1 when it was one,
   0 when not, -1 after a usage error (printed). */
static int chain_opt(const char *cmd, int argc, char **argv, int *i, chain_cli *c)
{
    const char *v;
    uint64_t t;
    if (cli_opt_value(argc, argv, i, "--store", &v)) c->store = v;
    else if (cli_opt_value(argc, argv, i, "--prefix", &v)) {
        char *p = argv[*i];
        size_t n = strlen(p);
        while (n > 0 && p[n - 1] == '/') p[--n] = 0; /* "p/" means "p": keys are "p/HEAD" */
        c->co.prefix = p;
    } else if (cli_opt_value(argc, argv, i, "--threads", &v)) {
        if (!cli_parse_u64(v, &t) || t < 1 || t > 16)
            return cli_usage_error("%s: --threads takes 1..16, not '%s'", cmd, v), -1;
        c->co.threads = (unsigned)t;
    } else if ((!strcmp(cmd, "pull") || !strcmp(cmd, "follow")) &&
               cli_opt_value(argc, argv, i, "--spool-dir", &v)) {
        struct stat sb;
        if (!*v || stat(v, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return cli_usage_error("%s: --spool-dir takes an existing directory, not '%s'", cmd, v), -1;
        c->co.spool_dir = v;
    } else if (!strcmp(cmd, "publish") && cli_opt_value(argc, argv, i, "--sign-key", &v)) {
        c->sign_path = v;
    } else if (strcmp(cmd, "publish") != 0 && cli_opt_value(argc, argv, i, "--verify-key", &v)) {
        c->verify_path = v;
    } else return cli_store_opt(cmd, argc, argv, i);
    return 1;
}

static int parse_step(const char *s, uint64_t *out)
{
    return cli_parse_u64(s, out) && *out <= WSYNC_STEP_MAX;
}

static const char *kind_name(wsync_chain_kind k)
{
    return k == WSYNC_CHAIN_ANCHOR ? "anchor" : k == WSYNC_CHAIN_DELTA ? "delta" : "?";
}

/* ---- a model in memory, as one safetensors image ---- */

/* The file at `path`, read into memory; its __metadata__ "step" (when
   present) says which step it holds. Read, not mapped and copied: a mapped
   file's pages count in the process's resident memory next to the copy
   (twice the model's size at the peak); read, they stay the kernel's page
   cache. */
static int image_from_file(const char *cmd, const char *path, cli_image *im)
{
    struct stat sb;
    const char *step;
    uint64_t got = 0;
    int fd;
    memset(im, 0, sizeof *im);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return cli_tool_fail(cmd, WSYNC_ERR_IO, path, "cannot open it: %s", strerror(errno)), 0;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return cli_tool_fail(cmd, WSYNC_ERR_IO, path, "%s", "not a regular file"), 0;
    }
    im->size = (uint64_t)sb.st_size;
    im->buf = im->size <= (uint64_t)SIZE_MAX - 1 ? (uint8_t *)malloc((size_t)im->size + 1) : NULL;
    if (!im->buf) {
        close(fd);
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, path, "a copy of its %llu bytes", (unsigned long long)im->size);
        memset(im, 0, sizeof *im);
        return 0;
    }
    while (got < im->size) {
        size_t want = im->size - got > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)(im->size - got);
        ssize_t n = read(fd, im->buf + got, want);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            cli_tool_fail(cmd, WSYNC_ERR_IO, path, "read %llu of its %llu bytes: %s", (unsigned long long)got,
                          (unsigned long long)im->size, n < 0 ? strerror(errno) : "it became shorter");
            close(fd);
            free(im->buf);
            memset(im, 0, sizeof *im);
            return 0;
        }
        got += (uint64_t)n;
    }
    close(fd);
    if (!cli_image_parse(cmd, path, im)) {
        cli_image_free(im);
        return 0;
    }
    if ((step = wsync_st_metadata_get(&im->st, "step")) != NULL) {
        if (!parse_step(step, &im->step)) {
            cli_tool_fail(cmd, WSYNC_ERR_INVALID_METADATA, path, "__metadata__ \"step\" is '%.40s', not a step number",
                          step);
            cli_image_free(im);
            return 0;
        }
        im->has_step = 1;
    }
    if ((step = wsync_st_metadata_get(&im->st, CLI_CHAIN_META)) != NULL)
        im->has_chain = cli_parse_chain_id(step, strlen(step), im->chain);
    return 1;
}

/* A model with the layout of the anchor the subscriber will start from (the
   chain's newest at or before `limit`), data zeroed. Only the anchor's
   header is read (two ranged gets; a directory's anchor: two per shard,
   cli_dir_anchor_image; the anchor's step into *anchor_step when not
   NULL): the subscriber fetches the rest. */
static int image_from_anchor(const char *cmd, const wsync_store *s, const wsync_chain_options *co, uint64_t limit,
                             cli_image *im, uint64_t *anchor_step)
{
    wsync_chain_info info;
    wsync_error err;
    wsync_buffer b;
    uint8_t len8[8];
    uint64_t hlen = 0, size = 0, anchor = 0;
    char key[1200];
    size_t i, at = 0;
    int found = 0, k;
    memset(im, 0, sizeof *im);
    if (wsync_chain_read(s, co, &info, &err) != WSYNC_OK) return cli_chain_fail(cmd, &err, "reading the chain"), 0;
    if (limit == WSYNC_STEP_LATEST) limit = info.head_step;
    for (i = 0; i < info.n_entries; i++) /* ascending by step: the last match is the newest */
        if (info.entries[i].kind == WSYNC_CHAIN_ANCHOR && info.entries[i].step <= limit) {
            found = cli_chain_key(key, sizeof key, co->prefix, info.entries[i].key);
            anchor = info.entries[i].step;
            at = i;
        }
    if (found && anchor_step) *anchor_step = anchor;
    if (found && info.entries[at].n_files) {
        k = cli_dir_anchor_image(cmd, s, co, &info.entries[at], im);
        wsync_chain_info_free(&info);
        return k;
    }
    if (found && info.entries[at].key[0] && info.entries[at].key[strlen(info.entries[at].key) - 1] == '/') {
        /* a directory anchor known from a listing alone */
        wsync_chain_info_free(&info);
        return cli_tool_fail(cmd, WSYNC_ERR_NOT_FOUND, key,
                             "a model directory's anchor, and only HEAD names its files; the store shows no HEAD "
                             "(a publisher still writing its first step, or HEAD lost): retry once HEAD is written"), 0;
    }
    wsync_chain_info_free(&info);
    if (!found)
        return cli_tool_fail(cmd, WSYNC_ERR_NO_PATH, "no local file to start from",
                             "the chain has no anchor at or before step %llu to take the tensors' layout from",
                             (unsigned long long)limit), 0;
    b.bytes = len8, b.cap = 8, b.len = 0;
    if (s->get(s->user, key, 0, 8, wsync_buffer_sink, &b, &size, &err) != WSYNC_OK)
        return cli_chain_fail(cmd, &err, "reading the header of %s", key), 0;
    for (k = 7; k >= 0; k--) hlen = hlen << 8 | len8[k];
    if (hlen > WSYNC_ST_MAX_HEADER_SIZE || hlen > size - 8 || size > (uint64_t)SIZE_MAX - 1)
        return cli_tool_fail(cmd, WSYNC_ERR_INVALID_HEADER, key,
                             "header length %llu does not fit the object's %llu bytes", (unsigned long long)hlen,
                             (unsigned long long)size), 0;
    im->size = size;
    if (!(im->buf = (uint8_t *)calloc((size_t)size + 1, 1)))
        return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, key, "%llu bytes for the model (anchor %llu)",
                             (unsigned long long)size, (unsigned long long)anchor), 0;
    memcpy(im->buf, len8, 8);
    b.bytes = im->buf + 8, b.cap = (size_t)hlen, b.len = 0;
    if (s->get(s->user, key, 8, hlen, wsync_buffer_sink, &b, NULL, &err) != WSYNC_OK) {
        cli_image_free(im);
        return cli_chain_fail(cmd, &err, "reading the header of %s", key), 0;
    }
    if (!cli_image_parse(cmd, key, im)) {
        cli_image_free(im);
        return 0;
    }
    return 1;
}

int cli_image_from_anchor(const char *cmd, const wsync_store *s, const wsync_chain_options *co, uint64_t limit,
                          cli_image *im)
{
    return image_from_anchor(cmd, s, co, limit, im, NULL);
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
    cli_split_path(path, dir, sizeof dir, &base);
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
   file of its own in the same directory (cli_temp_create, with this process's
   pid for remove_stale_temps), fsync, rename over `path`, fsync of the
   directory. Whatever happens meanwhile (kill -9, a crash), `path` holds the
   old file or the new one, whole. Metadata: the image's, "step" set, an
   anchor's "wsync" mark dropped, CLI_CHAIN_META the chain's identity when
   the image knows it (a pull given --verify-key), else dropped. */
static int image_save(const char *cmd, const cli_image *im, const char *path, uint64_t step)
{
    size_t i, n = im->st.n_tensors, nm = 0;
    wsync_st_tensor_desc *d = (wsync_st_tensor_desc *)calloc(n + 1, sizeof *d);
    wsync_st_kv *meta = (wsync_st_kv *)calloc(im->st.n_metadata + 2, sizeof *meta);
    char tmp[4200], dir[4096], stepbuf[32], idbuf[2 * WSYNC_CHAIN_ID_SIZE + 1];
    const char *base;
    wsync_error err;
    FILE *f = NULL;
    int fd, ok = 0;
    tmp[0] = 0;
    if (!d || !meta) {
        cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, path, "%s", "tensor list");
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
        if (strcmp(k, "step") != 0 && strcmp(k, "wsync") != 0 && strcmp(k, CLI_CHAIN_META) != 0)
            meta[nm++] = im->st.metadata[i];
    }
    snprintf(stepbuf, sizeof stepbuf, "%llu", (unsigned long long)step);
    meta[nm].key = "step", meta[nm].key_len = 0, meta[nm].value = stepbuf, meta[nm].value_len = 0;
    nm++;
    if (im->has_chain) {
        for (i = 0; i < WSYNC_CHAIN_ID_SIZE; i++) snprintf(idbuf + 2 * i, 3, "%02x", im->chain[i]);
        meta[nm].key = CLI_CHAIN_META, meta[nm].key_len = 0, meta[nm].value = idbuf, meta[nm].value_len = 0;
        nm++;
    }
    if ((fd = cli_temp_create(tmp, sizeof tmp, path, WSYNC_STORE_TMP_MARK, (long)getpid(), 0644)) < 0 ||
        !(f = fdopen(fd, "wb"))) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, path, "cannot create a temporary file: %s", strerror(errno));
        if (fd >= 0) close(fd);
        else tmp[0] = 0; /* nothing of ours to remove */
        goto done;
    }
    if (wsync_st_write(d, n, meta, nm, cli_file_sink, f, NULL, &err) != WSYNC_OK) {
        cli_chain_fail(cmd, &err, "writing %s", tmp);
        fclose(f);
        goto done;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, tmp, "cannot write: %s", strerror(errno));
        fclose(f);
        goto done;
    }
    if (fclose(f) != 0) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, tmp, "cannot close: %s", strerror(errno));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        cli_tool_fail(cmd, WSYNC_ERR_IO, tmp, "cannot rename to %s: %s", path, strerror(errno));
        goto done;
    }
    cli_split_path(path, dir, sizeof dir, &base);
    if (!cli_fsync_dir(dir))
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
static void print_publish(const wsync_publish_stats *ps, uint64_t full, double secs, size_t shards, size_t files,
                          int sig)
{
    char b1[32], b2[32];
    printf("step %llu: ", (unsigned long long)ps->step);
    if (ps->wrote_anchor) {
        printf("anchor %s", cli_human_bytes(b1, sizeof b1, ps->anchor_bytes));
        if (shards)
            printf(" (%zu shard%s, %zu file%s)", shards, shards == 1 ? "" : "s", files, files == 1 ? "" : "s");
        printf("%s", ps->wrote_delta ? " + " : "");
    }
    if (ps->wrote_delta)
        printf("delta from %llu, %llu of %llu elements changed (%.4f%%), %s vs %s full",
               (unsigned long long)ps->base_step, (unsigned long long)ps->changed, (unsigned long long)ps->elements,
               cli_percent(ps->changed, ps->elements), cli_human_bytes(b1, sizeof b1, ps->delta_bytes),
               cli_human_bytes(b2, sizeof b2, full));
    printf(", %s%.1f ms", sig ? "HEAD signed, " : "", 1e3 * secs);
    if (ps->deleted)
        printf(" (retention removed %llu object%s)", (unsigned long long)ps->deleted, ps->deleted == 1 ? "" : "s");
    printf("\n");
    if (ps->retention_failed)
        fprintf(stderr, "wsync: publish: warning: retention could not delete %llu object%s (a failed delete, or a "
                "store that cannot delete); HEAD still names them and the next publish tries again\n",
                (unsigned long long)ps->retention_failed, ps->retention_failed == 1 ? "" : "s");
}

int cmd_publish(int argc, char **argv)
{
    const char *path = NULL, *v;
    chain_cli c;
    uint64_t step = 0, x, full = 0;
    int have_step = 0, i, rc = 1, k, is_dir = 0;
    cli_loaded L;
    wsync_dir_checkpoint D;
    const wsync_tensor *t;
    size_t n, n_include = 0;
    char **include;
    struct stat sb;
    wsync_store store;
    wsync_publisher *pub = NULL;
    wsync_publish_stats ps;
    wsync_error err;
    double t0;
    size_t j;
    memset(&c, 0, sizeof c);
    memset(&err, 0, sizeof err);
    if (!(include = (char **)calloc((size_t)argc + 1, sizeof *include)))
        return cli_tool_fail("publish", WSYNC_ERR_OUT_OF_MEMORY, "arguments", "%d", argc);
    for (i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs("usage: wsync publish --store DIR --step N MODEL [--encoding packed|packed-max|trl-v1|trl-v3]\n"
                  "                     [--anchor-every K] [--retain R] [--prefix P] [--threads T]\n"
                  "                     [--new-chain] [--keep-f32] [--include PATTERN]...\n"
                  "                     [--sign-key NAME.key]\n"
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
                  "MODEL may be a Hugging Face checkpoint directory: its shards are the files\n"
                  "model.safetensors.index.json names (its weight_map must name exactly the shards'\n"
                  "tensors, each with its shard; any other *.safetensors there is refused), or\n"
                  "without the index every *.safetensors in it. Deltas cover all tensors (shards in\n"
                  "name order, each in its file's order); anchors keep the layout: one object per\n"
                  "shard under anchors/step_NNNNNN/, plus the files that exist of config.json\n"
                  "generation_config.json tokenizer.json tokenizer_config.json\n"
                  "special_tokens_map.json vocab.json vocab.txt merges.txt tokenizer.model\n"
                  "added_tokens.json chat_template.jinja chat_template.json preprocessor_config.json,\n"
                  "the index, and the files --include PATTERN matches (fnmatch; repeatable), byte\n"
                  "for byte. Everything is checked before anything is written: every shard\n"
                  "parses, no tensor is in two shards, names are plain file names ([A-Za-z0-9._-],\n"
                  "no '/' or '..'); a failure names the file and the rule. Without --step, the\n"
                  "step all shards' __metadata__ claim, else the step its wsync-step.json says (a\n"
                  "version pull wrote, relayed).\n"
                  "F32 tensors are published as BF16 (--keep-f32: as F32).\n"
                  "--sign-key NAME.key (wsync keygen NAME; default: the file WSYNC_SIGN_KEY names)\n"
                  "signs each HEAD with Ed25519: HEAD then names the BLAKE2b-256 of every object (each\n"
                  "file of a directory's anchor) and the chain's identity, and followers given\n"
                  "--verify-key NAME.pub refuse anything else. The key file must not be readable by\n"
                  "others (mode 0600, as keygen writes it). A chain that another key or no key signed\n"
                  "is refused, and so is a signed chain without --sign-key; --new-chain starts a new\n"
                  "chain there (how an unsigned chain becomes a signed one).\n"
                  "Exit 0 published, 1 failed or refused, 2 usage error, 6 refused for its signature\n"
                  "(WSYNC_ERR_SIGNATURE: the chain there is not signed by this key, or is signed and\n"
                  "no key was given).\n"
                  CLI_STORE_HELP,
                  stdout);
            free(include);
            return 0;
        } else if ((k = chain_opt("publish", argc, argv, &i, &c)) != 0) {
            if (k < 0) goto usage;
        } else if (cli_opt_value(argc, argv, &i, "--step", &v)) {
            if (!parse_step(v, &step)) {
                cli_usage_error("publish: bad --step '%s'", v);
                goto usage;
            }
            have_step = 1;
        } else if (cli_opt_value(argc, argv, &i, "--encoding", &v)) {
            if (!(c.co.encoding = wsync_encoding_from_name(v))) {
                cli_usage_error("publish: unknown encoding '%s'", v);
                goto usage;
            }
        } else if (cli_opt_value(argc, argv, &i, "--anchor-every", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > 1000000) {
                cli_usage_error("publish: --anchor-every takes 1..1000000, not '%s'", v);
                goto usage;
            }
            c.co.anchor_every = (uint32_t)x;
        } else if (cli_opt_value(argc, argv, &i, "--retain", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > 1000000) {
                cli_usage_error("publish: --retain takes 1..1000000, not '%s'", v);
                goto usage;
            }
            c.co.retain = (uint32_t)x;
        } else if (cli_opt_value(argc, argv, &i, "--include", &v)) {
            if (!*v || strchr(v, '/')) {
                cli_usage_error("publish: --include takes a pattern for file names in MODEL (no '/'), not '%s'", v);
                goto usage;
            }
            include[n_include++] = argv[i];
        } else if (strcmp(argv[i], "--new-chain") == 0) {
            c.co.flags |= WSYNC_CHAIN_NEW_CHAIN;
        } else if (strcmp(argv[i], "--keep-f32") == 0) {
            c.co.flags |= WSYNC_CHAIN_KEEP_F32;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_usage_error("publish: unknown or incomplete option '%s'", argv[i]);
            goto usage;
        } else if (path) {
            cli_usage_error("publish: one MODEL at a time ('%s' is extra)", argv[i]);
            goto usage;
        } else path = argv[i];
    }
    if (!c.store || !path) {
        cli_usage_error("publish: %s", "needs --store DIR and MODEL");
        goto usage;
    }
    if (cli_store_check("publish", c.store) != 0) goto usage;
    if (chain_keys("publish", &c) != 0) {
        free(include);
        return 1;
    }
    is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (n_include && !is_dir) {
        cli_usage_error("publish: --include is for a MODEL that is a directory ('%s' is not)", path);
        goto usage;
    }
    if (is_dir) {
        if (!cli_dir_load("publish", path, include, n_include, &D)) {
            free(include);
            return 1;
        }
        t = D.tensors;
        n = D.n_tensors;
        if (!have_step && !D.has_step) {
            wsync_dir_checkpoint_free(&D);
            cli_usage_error("publish: the shards of %s do not all claim one __metadata__ \"step\" (and it holds no "
                            "%s that says one): give --step N", path, WSYNC_DIR_STEP_FILE);
            goto usage;
        }
        if (!have_step) step = D.step;
    } else {
        if (!cli_load_file(path, &L)) {
            free(include);
            return 1;
        }
        t = L.t;
        n = L.st.n_tensors;
        if (!have_step) {
            const char *s = wsync_st_metadata_get(&L.st, "step");
            if (!s || !parse_step(s, &step)) {
                cli_unload_file(&L);
                cli_usage_error("publish: %s has no __metadata__ \"step\": give --step N", path);
                goto usage;
            }
        }
    }
    free(include);
    include = NULL;
    if (!cli_open_dir_store("publish", c.store, 0, &store)) {
        if (is_dir) wsync_dir_checkpoint_free(&D);
        else cli_unload_file(&L);
        return 1;
    }
    for (j = 0; j < n; j++) /* what a dense copy of the published model weighs */
        full += t[j].dtype == WSYNC_DTYPE_F32 && !(c.co.flags & WSYNC_CHAIN_KEEP_F32) ? t[j].nbytes / 2 : t[j].nbytes;
    t0 = cli_now_s();
    if (wsync_publisher_open(&store, &c.co, &pub, &err) != WSYNC_OK)
        cli_chain_fail("publish", &err, "opening the chain in %s", c.store);
    else if (is_dir ? wsync_dir_publish(pub, step, &D, &ps, &err) != WSYNC_OK
                    : wsync_publish(pub, step, t, n, &ps, &err) != WSYNC_OK)
        cli_chain_fail("publish", &err, "step %llu of %s to %s", (unsigned long long)step, path, c.store);
    else {
        wsync_http_stats hs;
        print_publish(&ps, full, cli_now_s() - t0, is_dir ? D.n_shards : 0, is_dir ? D.n_files : 0,
                      c.co.sign_key != NULL);
        if (wsync_store_http_stats(&store, &hs) && hs.smaller_parts)
            fprintf(stderr, "wsync: publish: warning: the server refused %llu upload%s as too large (HTTP 413) and "
                    "took %s in smaller parts; --s3-part-size or WSYNC_S3_PART_SIZE sets the part size from the "
                    "start\n", (unsigned long long)hs.smaller_parts, hs.smaller_parts == 1 ? "" : "s",
                    hs.smaller_parts == 1 ? "it" : "them");
        rc = 0;
    }
    if (rc && err.code == WSYNC_ERR_SIGNATURE) rc = EXIT_SIGNATURE;
    wsync_publisher_close(pub);
    wsync_store_close(&store);
    chain_keys_wipe(&c);
    if (is_dir) wsync_dir_checkpoint_free(&D);
    else cli_unload_file(&L);
    return rc;
usage:
    free(include);
    return EXIT_USAGE;
}

/* ---- pull and follow: a local file kept at a step of the chain ---- */

typedef struct puller {
    const char *cmd, *path;
    wsync_store store;
    int store_open;
    wsync_chain_options co;
    cli_image im;
    int dir;               /* path is a directory: a link to versions beside it, kept by
                              the library's follower (df; im then holds only the step) */
    wsync_dir_follower *df;
    double save_s;         /* how long the last version took to write */
    wsync_subscriber *sub;
    int warned_unchecked;  /* said once: the chain has no HEAD to check against */
    int refused;           /* refused_step was not saved, and said so */
    uint64_t refused_step;
    uint64_t retries_seen; /* an HTTP or S3 store's retried requests, printed so far */
    int owned;             /* the model in memory is this chain's: a sync reached a step of it here */
    int layout_refused;    /* the last sync failed on WSYNC_ERR_LAYOUT and MODEL is not this chain's */
    int new_chain;         /* --new-chain: the chain MODEL records is not pinned */
    int has_chain;         /* with a verify key: the signed chain followed (MODEL's record, */
    uint8_t chain[WSYNC_CHAIN_ID_SIZE]; /* or the first HEAD that passed) */
    int sig_refused;       /* the last read or sync was refused by the verify key */
} puller;

/* A failure the verify key caused: a HEAD refused, or an object whose
   BLAKE2b-256 is not the signed HEAD's. */
static int refused_by_key(const puller *p, wsync_result code)
{
    return code == WSYNC_ERR_SIGNATURE || (p->co.verify_key && code == WSYNC_ERR_DIGEST_MISMATCH);
}

/* The chain a subscriber has seen pass (kept across subscribers), and the
   chain pinned in a new one: a HEAD another chain's, signed by the same
   key, is refused even by a pull that starts from MODEL on disk. */
static void puller_learn(puller *p)
{
    uint8_t id[WSYNC_CHAIN_ID_SIZE];
    if (p->sub && p->co.verify_key && wsync_subscriber_chain_id(p->sub, id)) {
        memcpy(p->chain, id, sizeof id);
        p->has_chain = 1;
    }
}

static void puller_pin(puller *p)
{
    if (p->sub && p->co.verify_key && p->has_chain) wsync_subscriber_set_chain_id(p->sub, p->chain);
}

/* ", N requests retried" when a URL store retried requests since the last
   line said so: retries that succeed are otherwise silent. */
static void print_retries(puller *p)
{
    wsync_http_stats hs;
    if (!wsync_store_http_stats(&p->store, &hs) || hs.retries <= p->retries_seen) return;
    printf(", %llu request%s retried", (unsigned long long)(hs.retries - p->retries_seen),
           hs.retries - p->retries_seen == 1 ? "" : "s");
    p->retries_seen = hs.retries;
}

static void puller_close(puller *p)
{
    wsync_subscriber_close(p->sub);
    cli_image_free(&p->im);
    wsync_dir_follower_close(p->df);
    if (p->store_open) wsync_store_close(&p->store);
    p->sub = NULL;
    p->df = NULL;
    p->store_open = 0;
}

/* Loads the local file (or, when there is none, the layout of the anchor
   the chain will start from) and opens a subscriber over it. Every sync ends
   with the model's state digest checked against HEAD's: a file that did not
   hold the step it claimed is never saved as holding the next one. */
/* 1 opened; 0 failed (printed); -1 failed reading the store's anchor for a
   MODEL that does not exist yet (printed; a follower tries again later). */
static int puller_open(puller *p, uint64_t limit)
{
    wsync_error err;
    struct stat sb;
    int is_dir = 0;
    p->dir = 0; /* decided again at each try (a follower's first ones may find no chain yet) */
    p->co.flags |= WSYNC_CHAIN_VERIFY_STATE;
    remove_stale_temps(p->path);
    if (wsync_dir_target(p->path, &p->store, &p->co, limit, &is_dir, &err) != WSYNC_OK) {
        if (is_dir < 0) return cli_chain_fail(p->cmd, &err, NULL), 0; /* a path a pull leaves alone */
        return cli_chain_fail(p->cmd, &err, "reading the chain"), -1;
    }
    if (is_dir) { /* the library's follower: the version linked, or the anchor's layout at the first sync */
        wsync_chain_options co = p->co;
        p->dir = 1;
        if (p->new_chain) co.flags |= WSYNC_CHAIN_NEW_CHAIN;
        if (wsync_dir_follower_open(&p->store, &co, p->path, &p->df, &err) != WSYNC_OK)
            return cli_chain_fail(p->cmd, &err, NULL), 0;
        p->im.has_step = wsync_dir_follower_step(p->df, &p->im.step);
        return 1;
    }
    if (stat(p->path, &sb) == 0 || errno != ENOENT) {
        if (!image_from_file(p->cmd, p->path, &p->im)) return 0;
    } else if (!cli_image_from_anchor(p->cmd, &p->store, &p->co, limit, &p->im)) return -1;
    if (wsync_subscriber_open(&p->store, p->im.t, p->im.st.n_tensors, &p->co, &p->sub, &err) != WSYNC_OK)
        return cli_chain_fail(p->cmd, &err, "opening a subscriber for %s", p->path), 0;
    if (p->im.has_step) wsync_subscriber_set_step(p->sub, p->im.step);
    if (p->im.has_chain && !p->new_chain && !p->has_chain) {
        memcpy(p->chain, p->im.chain, sizeof p->chain);
        p->has_chain = 1;
    }
    puller_pin(p);
    return 1;
}

/* "out/model/" is "out/model": a directory's link is named without the
   slash (the root stays "/"). */
static void strip_slashes(char **argv, int argc, const char **path)
{
    int i;
    for (i = 0; i < argc; i++)
        if (argv[i] == *path) {
            size_t n = strlen(argv[i]);
            while (n > 1 && argv[i][n - 1] == '/') argv[i][--n] = 0;
        }
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
    puller_learn(p);
    wsync_subscriber_close(p->sub);
    p->sub = NULL;
    if (wsync_subscriber_open(&p->store, p->im.t, p->im.st.n_tensors, &p->co, &p->sub, &err) != WSYNC_OK)
        return cli_chain_fail(p->cmd, &err, "opening a subscriber for %s", p->path), 0;
    puller_pin(p);
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

/* The same tensors (names, dtypes, shapes), in any order. */
static int same_layout(const cli_image *a, const cli_image *b)
{
    size_t i;
    if (a->st.n_tensors != b->st.n_tensors) return 0;
    for (i = 0; i < a->st.n_tensors; i++) {
        const wsync_st_tensor *x = &a->st.tensors[i], *y = wsync_st_find_n(&b->st, x->name, x->name_len);
        if (!y || y->dtype != x->dtype || y->rank != x->rank ||
            (x->rank && memcmp(x->shape, y->shape, x->rank * sizeof *x->shape) != 0))
            return 0;
    }
    return 1;
}

/* Whether the model in memory, whose tensors are not the chain's now, was
   this chain's: a sync reached a step here, or the step MODEL claims is in
   the chain with the state digest of MODEL's bytes, or the chain's anchor
   at or before that step has MODEL's tensors. A file of another model
   shows none of these. */
static int puller_from_chain(puller *p)
{
    wsync_chain_info info;
    wsync_error err;
    uint64_t want = 0, have = 0;
    int known = 0, anchor = 0, same = 0;
    size_t i;
    if (p->owned) return 1;
    if (!p->im.has_step || wsync_chain_read(&p->store, &p->co, &info, &err) != WSYNC_OK) return 0;
    for (i = 0; i < info.n_entries; i++) {
        const wsync_chain_entry *e = &info.entries[i];
        if (e->step == p->im.step && e->has_digests) want = e->state, known = 1;
        if (e->kind == WSYNC_CHAIN_ANCHOR && e->step <= p->im.step) anchor = 1;
    }
    wsync_chain_info_free(&info);
    if (known && wsync_state_digest(p->im.t, p->im.st.n_tensors, p->co.threads, &have, &err) == WSYNC_OK &&
        have == want)
        return 1;
    if (anchor) {
        cli_image old;
        char quiet[512];
        cli_fail_capture(quiet, sizeof quiet); /* a store that fails here: no evidence, and the sync says why */
        if (image_from_anchor(p->cmd, &p->store, &p->co, p->im.step, &old, NULL)) {
            same = same_layout(&old, &p->im);
            cli_image_free(&old);
        }
        cli_fail_capture(NULL, 0);
    }
    return same;
}

/* The line a captured failure printed ("wsync: CMD: what: CODE: message")
   as an error: its code, the text after "wsync: CMD: ". */
static void captured_to_err(const puller *p, const char *line, wsync_result code, const char *what, wsync_error *err)
{
    size_t n = strlen("wsync: ") + strlen(p->cmd) + 2;
    const char *rest = strlen(line) > n ? line + n : line;
    size_t at, cap = sizeof err->message;
    memset(err, 0, sizeof *err);
    err->code = code != WSYNC_OK ? code : WSYNC_ERR_IO;
    at = (size_t)snprintf(err->message, cap, "%s: ", what);
    if (at < cap - 1) {
        size_t len = strlen(rest) < cap - 1 - at ? strlen(rest) : cap - 1 - at;
        memcpy(err->message + at, rest, len);
        err->message[at + len] = 0;
    }
}

/* The sync failed on WSYNC_ERR_LAYOUT: the chain's tensors are not the
   model's. Either the publisher changed them (a vocabulary resized: an
   anchor with new shapes), and MODEL, which pull and follow own, is rebuilt
   from the chain's anchor at or before `step` with its tensors (a new
   subscriber, no step held: the next sync takes the anchor); or MODEL is
   another model, and it is left alone (layout_refused). 1 rebuilt; 0 not
   (err says why). */
static int puller_relayout(puller *p, uint64_t step, wsync_error *err)
{
    cli_image im;
    uint64_t anchor = 0;
    wsync_subscriber *sub = NULL;
    char line[600];
    wsync_result code;
    if (!puller_from_chain(p)) {
        p->layout_refused = 1;
        return 0;
    }
    cli_fail_capture(line, sizeof line);
    if (!image_from_anchor(p->cmd, &p->store, &p->co, step, &im, &anchor)) {
        code = cli_fail_captured();
        cli_fail_capture(NULL, 0);
        captured_to_err(p, line, code, "the chain's tensors changed, and its anchor could not be read", err);
        return 0;
    }
    cli_fail_capture(NULL, 0);
    fprintf(stderr, "wsync: %s: %s: the chain's tensors changed (%s: %s); %s is rebuilt with the tensors of "
            "anchor %llu (%zu tensors, %zu before)\n", p->cmd, p->path, wsync_result_name(err->code), err->message,
            p->path, (unsigned long long)anchor, im.st.n_tensors, p->im.st.n_tensors);
    if (wsync_subscriber_open(&p->store, im.t, im.st.n_tensors, &p->co, &sub, err) != WSYNC_OK) {
        cli_image_free(&im);
        return 0;
    }
    puller_learn(p);
    wsync_subscriber_close(p->sub);
    cli_image_free(&p->im);
    p->sub = sub;
    puller_pin(p);
    p->im = im;
    p->owned = 1;
    return 1;
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
    double t0 = cli_now_s();
    wsync_result r;
    int may;
    memset(st, 0, sizeof *st);
    p->layout_refused = 0;
    if (p->dir) { /* the library's follower does the same for a directory, under its lock */
        wsync_dir_sync_stats ds;
        r = wsync_dir_follower_sync(p->df, step, &ds, err);
        *st = ds.sync;
        *secs = cli_now_s() - t0 - ds.write_s;
        *saved = ds.switched;
        p->save_s = ds.write_s;
        p->im.has_step = ds.has_step;
        p->im.step = ds.step;
        p->layout_refused = r == WSYNC_ERR_LAYOUT;
        if (ds.relayout)
            fprintf(stderr, "wsync: %s: %s: the chain's tensors changed; %s is rebuilt with the tensors of anchor "
                    "%llu\n", p->cmd, p->path, p->path, (unsigned long long)ds.relayout_step);
        if (ds.switched && ds.unchecked && !p->warned_unchecked) {
            fprintf(stderr, "wsync: %s: warning: the chain has no HEAD, so step %llu is saved to %s unchecked\n",
                    p->cmd, (unsigned long long)ds.step, p->path);
            p->warned_unchecked = 1;
        }
        if (ds.write_failed) return cli_chain_fail(p->cmd, err, NULL), PULL_SAVE_FAILED;
        if (r == WSYNC_OK) p->owned = 1;
        return r == WSYNC_OK ? PULL_OK : PULL_SYNC_FAILED;
    }
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
    if (r == WSYNC_ERR_LAYOUT && puller_relayout(p, step, err)) {
        wsync_sync_stats first = *st;
        r = wsync_subscriber_sync(p->sub, step, st, err);
        st->bytes_fetched += first.bytes_fetched;
        st->rejected += first.rejected;
        applied = st->anchors + st->deltas;
    }
    *secs = cli_now_s() - t0;
    *saved = 0;
    if (wsync_subscriber_step(p->sub, &now) && (applied || !p->im.has_step || now != p->im.step)) {
        if ((may = puller_may_save(p, now, r == WSYNC_OK)) < 0) return PULL_SAVE_FAILED;
        if (!may) return PULL_SYNC_FAILED;
        double t1 = cli_now_s();
        puller_learn(p); /* the chain the step came from, recorded with it (a verify key's only) */
        p->im.has_chain = p->co.verify_key && p->has_chain;
        if (p->im.has_chain) memcpy(p->im.chain, p->chain, sizeof p->chain);
        if (!image_save(p->cmd, &p->im, p->path, now))
            return PULL_SAVE_FAILED;
        p->save_s = cli_now_s() - t1;
        p->im.has_step = 1;
        p->im.step = now;
        p->refused = 0;
        *saved = 1;
    }
    if (r == WSYNC_OK) p->owned = 1;
    return r == WSYNC_OK ? PULL_OK : PULL_SYNC_FAILED;
}

/* A directory's version: ", DIR -> VERSION written in N ms". */
static void print_version(const puller *p)
{
    char target[4096];
    ssize_t n;
    if (!p->dir || (n = readlink(p->path, target, sizeof target - 1)) <= 0) return;
    target[n] = 0;
    printf(", %s -> %s written in %.1f ms", p->path, target, 1e3 * p->save_s);
}

static void print_sync(const wsync_sync_stats *st, int had, uint64_t from, uint64_t to, double secs)
{
    char b[32];
    if (had) printf("step %llu -> %llu", (unsigned long long)from, (unsigned long long)to);
    else printf("no step -> %llu", (unsigned long long)to);
    printf(" (%s), %s fetched, %.1f ms", st->path[0] ? st->path : "?", cli_human_bytes(b, sizeof b, st->bytes_fetched),
           1e3 * secs);
    if (st->rejected) printf(", %u object%s rejected and routed around", st->rejected, st->rejected == 1 ? "" : "s");
}

/* Before anything else, a reader asks whether there is a chain to read:
   0 when there is; else the exit status (cli_exit_for) after saying why. */
static int chain_ready(const char *cmd, const wsync_store *s, const wsync_chain_options *co, const char *store)
{
    wsync_chain_info info;
    wsync_error err;
    if (wsync_chain_read(s, co, &info, &err) == WSYNC_OK) {
        wsync_chain_info_free(&info);
        return 0;
    }
    cli_chain_fail(cmd, &err, "reading the chain in %s", store);
    return cli_exit_for(err.code);
}

/* HEAD below the step MODEL holds (WSYNC_ERR_STALE_HEAD): MODEL holds a
   newer published step, and keeps it. */
static void warn_stale_head(const puller *p, const char *store, uint64_t head, const char *going_on)
{
    fprintf(stderr, "wsync: %s: warning: HEAD in %s names step %llu, older than step %llu that %s holds (a stale "
            "copy of HEAD: a cache, a replica, a restored backup; or a chain restarted at a lower step); %s kept at "
            "step %llu%s (--follow-restart follows a restarted chain%s)\n", p->cmd, store, (unsigned long long)head,
            (unsigned long long)p->im.step, p->path, p->path, (unsigned long long)p->im.step, going_on,
            strcmp(p->cmd, "pull") == 0 ? "; --step N takes step N" : "");
}

/* The sync refused MODEL: its tensors are not the chain's, and nothing shows
   it was this chain's (puller_from_chain). */
static void say_layout_refused(const puller *p)
{
    fprintf(stderr, "wsync: %s: %s holds other tensors than the chain's, and nothing shows it came from this chain "
            "(%s); it is left as it was: remove it, or give another path, to take the chain's model\n", p->cmd,
            p->path, p->im.has_step ? "the step it claims is not in the chain with its state, and no anchor at or "
            "before it has its tensors" : "it claims no step");
}

/* What a refusal by the verify key means for MODEL (said after the error). */
static void say_refused_by_key(const puller *p, const wsync_error *err)
{
    if (!refused_by_key(p, err->code)) return;
    fprintf(stderr, "wsync: %s: %s refused by the verify key: %s %s%s\n", p->cmd,
            err->code == WSYNC_ERR_SIGNATURE ? "HEAD" : "an object", p->path,
            p->im.has_step ? "kept at the step it holds" : "not written", err->code == WSYNC_ERR_SIGNATURE &&
            strstr(err->message, "another chain") ? " (MODEL records the chain it came from; --new-chain takes "
            "the chain the key signed now, e.g. after publish --new-chain)" : "");
}

/* --verify-key's help, the same for pull and follow. */
#define VERIFY_KEY_HELP                                                                                   \
    "--verify-key NAME.pub (default: the file WSYNC_VERIFY_KEY names): the chain must be\n"              \
    "signed by that key (publish --sign-key): a HEAD unsigned, signed by another key,\n"                 \
    "altered after signing, or of another chain than the one MODEL came from (recorded in\n"             \
    "MODEL: __metadata__ \"wsync_chain\", a directory's wsync-step.json \"chain\") is\n"                 \
    "refused (WSYNC_ERR_SIGNATURE, the rule named), and so is an object whose BLAKE2b-256\n"             \
    "differs from HEAD's (WSYNC_ERR_DIGEST_MISMATCH, another path tried first); MODEL is\n"              \
    "kept as it was, exit 6. --new-chain takes a new chain signed by the key (the\n"                     \
    "trainer ran publish --new-chain).\n"

int cmd_pull(int argc, char **argv)
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
        if (cli_is_help(argv[i])) {
            fputs("usage: wsync pull --store DIR MODEL [--step N] [--follow-restart] [--prefix P] [--threads T]\n"
                  "                  [--spool-dir D] [--verify-key NAME.pub] [--new-chain]\n"
                  "Brings the local safetensors file MODEL to the newest step of the chain in DIR\n"
                  "(or to step N) along the cheapest path of deltas and anchors, every object checked\n"
                  "against HEAD's digests. MODEL's __metadata__ \"step\" says where it is; a missing\n"
                  "MODEL is created from an anchor. The file is replaced atomically (temporary file,\n"
                  "fsync, rename): it always holds one whole published step and says which, and\n"
                  "is saved only when the model's state digest matches HEAD's for that step (a file\n"
                  "whose bytes are not the step it claims is rebuilt from an anchor). When the sync\n"
                  "fails part way, MODEL is left at the last step reached if that step checks, else\n"
                  "as it was, and the exit status is 1.\n"
                  "MODEL is a directory (a Hugging Face checkpoint an engine loads) when it is a link\n"
                  "wsync made, or when it does not exist, does not end in .safetensors and the chain's\n"
                  "newest anchor is a directory's (wsync publish of a directory). Each step is then\n"
                  "built beside it as MODEL.step_NNNNNN: the anchor's shards (__metadata__ \"step\"),\n"
                  "its config and tokenizer files (checked against HEAD's digests) and wsync-step.json\n"
                  "({\"step\": N, \"state\": \"<hex>\"}), all fsynced; then the symbolic link MODEL is\n"
                  "switched to it by one rename, so a reader that resolves the link once (realpath)\n"
                  "and loads from there sees one whole step. The previous version is kept (files that\n"
                  "did not change are hard links to its), older ones and what a killed run left are\n"
                  "removed. A directory wsync did not make is refused. Runs on one MODEL take turns\n"
                  "(an flock on .MODEL.wsync-lock beside it, left there), and a dangling link to a\n"
                  "version is rebuilt from the chain's anchor, never replaced by a file. A step with no\n"
                  "anchor at or before it in HEAD (retention) takes the previous version's files.\n"
                  "An anchor that arrives while MODEL already holds a step is written to a spool file\n"
                  "(unlinked as soon as it is open; the anchor's size on disk) and copied into the\n"
                  "model only once its digest checks, so that a bad anchor leaves MODEL as it was\n"
                  "without a second copy of the model in memory: --spool-dir D puts it in D (default\n"
                  "$TMPDIR, else /tmp). A MODEL that holds no step takes an anchor as it arrives.\n"
                  "Never backwards unless asked: when HEAD names a step older than the one MODEL holds\n"
                  "(a stale copy of HEAD, or a chain restarted at a lower step), MODEL is kept, a\n"
                  "warning says both steps, and the exit status is 0; --step N takes step N, and\n"
                  "--follow-restart follows HEAD down (a restarted chain: the store wiped and a new run\n"
                  "published), from its anchor.\n"
                  "When the chain's tensors change (an anchor with new shapes, e.g. a vocabulary\n"
                  "resized), MODEL is rebuilt with the anchor's tensors, provided it was this chain's:\n"
                  "the step it claims is in the chain with its state digest, or the anchor at or\n"
                  "before that step has its tensors. A MODEL of another model is left alone (exit 5).\n"
                  "DIR is never created (exit 3 when it does not exist).\n",
                  stdout);
            fputs(VERIFY_KEY_HELP
                  CLI_EXIT_HELP
                  CLI_STORE_HELP,
                  stdout);
            return 0;
        } else if ((k = chain_opt("pull", argc, argv, &i, &c)) != 0) {
            if (k < 0) return EXIT_USAGE;
        } else if (cli_opt_value(argc, argv, &i, "--step", &v)) {
            if (!parse_step(v, &step)) return cli_usage_error("pull: bad --step '%s'", v);
        } else if (strcmp(argv[i], "--follow-restart") == 0) {
            c.co.flags |= WSYNC_CHAIN_FOLLOW_RESTART;
        } else if (strcmp(argv[i], "--new-chain") == 0) {
            p.new_chain = 1;
        } else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("pull: unknown or incomplete option '%s'", argv[i]);
        else if (p.path) return cli_usage_error("pull: one MODEL at a time ('%s' is extra)", argv[i]);
        else p.path = argv[i];
    }
    if (!c.store || !p.path) return cli_usage_error("pull: %s", "needs --store DIR and MODEL");
    if ((k = cli_store_check("pull", c.store)) != 0) return k;
    if (chain_keys("pull", &c) != 0) return 1;
    strip_slashes(argv, argc, &p.path);
    p.co = c.co;
    if (!cli_open_dir_store("pull", c.store, 1, &p.store)) return 1;
    p.store_open = 1;
    if ((k = chain_ready("pull", &p.store, &p.co, c.store)) != 0) {
        puller_close(&p);
        return k;
    }
    if (puller_open(&p, step) != 1) {
        puller_close(&p);
        return 1;
    }
    had = p.im.has_step;
    from = p.im.step;
    status = puller_sync(&p, step, &st, &secs, &saved, &err);
    if (status == PULL_SYNC_FAILED && err.code == WSYNC_ERR_STALE_HEAD && !saved && p.im.has_step) {
        warn_stale_head(&p, c.store, st.head_step, "");
        status = PULL_OK;
        saved = -1;
    }
    if (status == PULL_SYNC_FAILED) {
        char target[40];
        if (step == WSYNC_STEP_LATEST) snprintf(target, sizeof target, "HEAD");
        else snprintf(target, sizeof target, "step %llu", (unsigned long long)step);
        cli_chain_fail("pull", &err, "%s: sync to %s of %s", p.path, target, c.store);
        if (p.layout_refused) say_layout_refused(&p);
        say_refused_by_key(&p, &err);
        if (saved) fprintf(stderr, "wsync: pull: %s now holds step %llu, the last step reached\n", p.path,
                           (unsigned long long)p.im.step);
    } else if (status == PULL_OK) {
        printf("%s: ", p.path);
        if (saved > 0) {
            print_sync(&st, had, from, p.im.step, secs);
            print_version(&p);
        } else if (saved < 0)
            printf("kept at step %llu (HEAD %llu is older), %.1f ms", (unsigned long long)p.im.step,
                   (unsigned long long)st.head_step, 1e3 * secs);
        else printf("at step %llu already (HEAD %llu), %.1f ms", (unsigned long long)p.im.step,
                    (unsigned long long)st.head_step, 1e3 * secs);
        print_retries(&p);
        printf("\n");
    }
    k = p.layout_refused ? EXIT_LAYOUT
        : refused_by_key(&p, status == PULL_SYNC_FAILED ? err.code : status == PULL_SAVE_FAILED ? cli_fail_last()
                                                                                             : WSYNC_OK)
        ? EXIT_SIGNATURE : 1;
    puller_close(&p);
    return status == PULL_OK ? 0 : k;
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

typedef struct follow_opts {
    const char *store;
    double interval;       /* seconds between checks of HEAD */
    uint64_t max_steps;    /* stop after this many updates (0: no limit) */
    int has_until;
    uint64_t until;        /* stop once the file holds this step or a later one */
    const char *on_update; /* a shell command run after each update, or NULL */
    int wait;              /* --wait: a store that does not exist yet is waited for */
} follow_opts;

/* ---- a follower never waits in silence ---- */

/* What a follower is waiting out: no store yet, an empty chain, a chain or
   an anchor it cannot read, a sync that fails. Said at once when it is new
   (another kind, code or HEAD), then again 10 s later and every 30 s after,
   with how long it has lasted, the tries, and the last error: never silent
   for long, never a line per poll. */
enum { WAIT_STORE = 1, WAIT_CHAIN, WAIT_ANCHOR, WAIT_SYNC };
typedef struct waiting {
    int kind;              /* WAIT_*; 0: nothing waited out */
    wsync_result code;
    uint64_t key;          /* WAIT_SYNC: the HEAD step synced to */
    double since, said_at;
    unsigned tries, said;
    char what[256];
} waiting;

/* A failure's text without "wsync: CMD: " (the line cli_chain_fail prints). */
static const char *after_cmd(const char *cmd, const char *line)
{
    size_t n = strlen(cmd);
    if (strncmp(line, "wsync: ", 7) == 0 && strncmp(line + 7, cmd, n) == 0 && strncmp(line + 7 + n, ": ", 2) == 0)
        return line + 9 + n;
    return line;
}

static void wait_note(const puller *p, const follow_opts *o, waiting *w, int kind, uint64_t key, wsync_result code,
                      const char *what, const char *line)
{
    double now = cli_now_s();
    const char *why = after_cmd(p->cmd, line);
    if (w->kind != kind || w->code != code || w->key != key) {
        memset(w, 0, sizeof *w);
        w->kind = kind;
        w->code = code;
        w->key = key;
        w->since = now;
    }
    snprintf(w->what, sizeof w->what, "%s", what);
    w->tries++;
    if (!w->said)
        fprintf(stderr, "wsync: %s: %s (trying again every %g s): %s\n", p->cmd, what, o->interval, why);
    else if (now - w->said_at >= (w->said < 2 ? 10.0 : 30.0))
        fprintf(stderr, "wsync: %s: still %s after %.0f s (%u tries); the last error: %s\n", p->cmd, what,
                now - w->since, w->tries, why);
    else return;
    fflush(stderr);
    w->said++;
    w->said_at = now;
}

/* The wait is over: said when it was an error said before (a store or
   anchor unreadable); an empty chain or a missing store ends with the
   "following" line, a failed sync with its update line. */
static void wait_over(const puller *p, waiting *w, int kind)
{
    if (w->kind != kind) return;
    if (w->said && w->code != WSYNC_ERR_NOT_FOUND && w->code != WSYNC_ERR_NO_STORE && kind != WAIT_SYNC)
        fprintf(stderr, "wsync: %s: no longer %s: it worked after %.1f s (%u tr%s)\n", p->cmd, w->what,
                cli_now_s() - w->since, w->tries, w->tries == 1 ? "y" : "ies");
    memset(w, 0, sizeof *w);
}

/* HEAD's step: 1 when the chain has one; 0 when there is no store, no chain
   or no reading it yet (waited out, wait_note). */
static int poll_head(puller *p, const follow_opts *o, waiting *w, uint64_t *head)
{
    wsync_chain_info info;
    wsync_error err;
    char what[256], line[640];
    wsync_result r = wsync_chain_read(&p->store, &p->co, &info, &err);
    if (r == WSYNC_OK) {
        *head = info.head_step;
        wsync_chain_info_free(&info);
        wait_over(p, w, WAIT_STORE);
        wait_over(p, w, WAIT_CHAIN);
        p->sig_refused = 0;
        return 1;
    }
    p->sig_refused = refused_by_key(p, r);
    if (p->sig_refused)
        snprintf(what, sizeof what, "refusing the chain in %s (--verify-key), %s kept", o->store, p->path);
    else if (r == WSYNC_ERR_NO_STORE) snprintf(what, sizeof what, "waiting for the store %s to appear", o->store);
    else if (r == WSYNC_ERR_NOT_FOUND)
        snprintf(what, sizeof what, "waiting for a first step to be published in %s", o->store);
    else snprintf(what, sizeof what, "waiting for the chain in %s to be readable", o->store);
    snprintf(line, sizeof line, "reading the chain: %s: %s", wsync_result_name(err.code),
             err.message[0] ? err.message : wsync_result_str(err.code));
    wait_note(p, o, w, r == WSYNC_ERR_NO_STORE ? WAIT_STORE : WAIT_CHAIN, 0, r, what, line);
    return 0;
}

typedef struct follow_state {
    int opened;            /* the puller holds the model */
    int checked;           /* one sync has checked the file against HEAD */
    uint64_t updates;
    waiting w;             /* what is being waited out */
    int stale;             /* a stale HEAD was warned about: stale_head below stale_held, */
    uint64_t stale_head, stale_held;
    double stale_said;     /* at this time; */
    int stale_over;        /* and HEAD was back at the step held or above since */
} follow_state;

static int follow_done(const puller *p, const follow_opts *o, const follow_state *f)
{
    if (o->has_until && p->im.has_step && p->im.step >= o->until) return 1;
    return o->max_steps && f->updates >= o->max_steps;
}

/* Runs o->on_update through /bin/sh after an update, with WSYNC_STEP (the
   step MODEL now holds) and WSYNC_MODEL (MODEL's path as given) in its
   environment, and waits for it: the next update starts only after it
   ends. A command that fails or dies is reported; following goes on. */
static void run_on_update(const puller *p, const follow_opts *o)
{
    char step[24];
    pid_t pid;
    int status;
    if (!o->on_update) return;
    snprintf(step, sizeof step, "%llu", (unsigned long long)p->im.step);
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "follow: --on-update: cannot start the command: %s\n", strerror(errno));
        return;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (setenv("WSYNC_STEP", step, 1) != 0 || setenv("WSYNC_MODEL", p->path, 1) != 0) _exit(127);
        execl("/bin/sh", "sh", "-c", o->on_update, (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "follow: --on-update: waiting for the command: %s\n", strerror(errno));
            return;
        }
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        fprintf(stderr, "follow: --on-update command exited with status %d after step %s\n", WEXITSTATUS(status),
                step);
    else if (WIFSIGNALED(status))
        fprintf(stderr, "follow: --on-update command was killed by signal %d after step %s\n", WTERMSIG(status),
                step);
}

/* Pulls to HEAD: 1 when the file was updated, 0 when not (a failed sync is
   waited out: said when new, then at a slow pace, and retried at the next
   check; a stale HEAD is warned about once per situation and MODEL kept),
   -1 when the file could not be written, -2 when MODEL is not this chain's
   model (WSYNC_ERR_LAYOUT, said). A directory's sync holds its lock
   (wsync_dir_follower_sync). */
static int follow_pull(puller *p, const follow_opts *o, uint64_t head, follow_state *f)
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
        print_retries(p);
        if (p->dir) {
            print_version(p);
            printf("\n");
        } else printf(", %s written\n", p->path);
        fflush(stdout);
        run_on_update(p, o);
    }
    if (status == PULL_SAVE_FAILED) return -1;
    if (status == PULL_SYNC_FAILED && err.code == WSYNC_ERR_STALE_HEAD && !saved && p->im.has_step) {
        /* said once per situation (HEAD's step and the step held); the same
           one again after HEAD was back, at most every 30 s (a HEAD that
           flips between a stale copy and the newest at every poll) */
        if (!f->stale || f->stale_head != st.head_step || f->stale_held != p->im.step ||
            (f->stale_over && cli_now_s() - f->stale_said >= 30.0)) {
            warn_stale_head(p, o->store, st.head_step, "; following goes on");
            f->stale_said = cli_now_s();
        }
        f->stale = 1;
        f->stale_over = 0;
        f->stale_head = st.head_step;
        f->stale_held = p->im.step;
        wait_over(p, &f->w, WAIT_SYNC);
        return 0;
    }
    if (status == PULL_SYNC_FAILED && p->layout_refused) {
        cli_chain_fail(p->cmd, &err, "%s: sync to HEAD %llu", p->path, (unsigned long long)head);
        say_layout_refused(p);
        return -2;
    }
    p->sig_refused = status == PULL_SYNC_FAILED && refused_by_key(p, err.code);
    if (status == PULL_SYNC_FAILED) {
        char what[300], line[640];
        if (p->sig_refused)
            snprintf(what, sizeof what, "refusing HEAD %llu (--verify-key), %s kept; retrying", (unsigned long long)head,
                     p->path);
        else snprintf(what, sizeof what, "retrying the sync to HEAD %llu", (unsigned long long)head);
        snprintf(line, sizeof line, "%s: sync to HEAD %llu: %s: %s", p->path, (unsigned long long)head,
                 wsync_result_name(err.code), err.message[0] ? err.message : wsync_result_str(err.code));
        wait_note(p, o, &f->w, WAIT_SYNC, head, err.code, what, line);
    } else {
        wait_over(p, &f->w, WAIT_SYNC);
        if (saved) f->stale = 0; /* another step held: another situation */
    }
    return saved;
}

/* Between polls: a follower that sleeps as long as a poll apart (the HTTP
   store's idle_close_ms, 500 ms) first lets its kept connections go, so
   that many followers do not hold the workers of a process-per-connection
   server (Apache prefork) while they sleep; faster polls keep them. */
static void follow_sleep(puller *p, const follow_opts *o)
{
    if (p->store_open && o->interval >= 0.5) wsync_store_http_idle(&p->store);
    cli_sleep_s(o->interval);
}

static int follow_loop(puller *p, const follow_opts *o)
{
    follow_state f;
    uint64_t head = 0;
    int rc = 0, k;
    memset(&f, 0, sizeof f);
    while (!stop_requested) {
        if (!poll_head(p, o, &f.w, &head)) { /* no store or chain yet, or unreadable for now */
            follow_sleep(p, o);
            continue;
        }
        if (!f.opened) { /* the chain exists: now the file, or its anchor, gives the layout */
            char line[640];
            wsync_result code;
            int k2;
            cli_fail_capture(line, sizeof line);
            k2 = puller_open(p, WSYNC_STEP_LATEST);
            code = cli_fail_captured();
            cli_fail_capture(NULL, 0);
            if (k2 == 0) {
                if (code != WSYNC_OK) fprintf(stderr, "%s\n", line);
                return 1;
            }
            if (k2 < 0) { /* the store failed: try again at the next check */
                char what[256];
                snprintf(what, sizeof what, "waiting for the chain's anchor in %s to be readable", o->store);
                wait_note(p, o, &f.w, WAIT_ANCHOR, 0, code, what, code != WSYNC_OK ? line : "no reason given");
                follow_sleep(p, o);
                continue;
            }
            wait_over(p, &f.w, WAIT_ANCHOR);
            f.opened = 1;
            printf("%s: following %s", p->path, o->store);
            if (p->im.has_step) printf(" from step %llu", (unsigned long long)p->im.step);
            printf("\n");
            fflush(stdout);
        }
        if (follow_done(p, o, &f)) break;
        if (f.stale && p->im.has_step && head >= p->im.step) f.stale_over = 1;
        /* the first sync also checks a file that claims HEAD's step: its
           bytes may not be that step's, and nothing else would look */
        if (!f.checked || !p->im.has_step || head != p->im.step) {
            f.checked = 1;
            if ((k = follow_pull(p, o, head, &f)) < 0) {
                rc = k == -2 ? EXIT_LAYOUT : 1;
                break;
            }
            if (follow_done(p, o, &f)) break;
            if (k > 0) continue; /* updated: HEAD may have moved on meanwhile */
        }
        follow_sleep(p, o);
    }
    if (stop_requested) printf("%s: stopped by a signal%s\n", p->path, p->im.has_step ? "" : " (no step pulled)");
    if (p->im.has_step)
        printf("%s: at step %llu after %llu update%s\n", p->path, (unsigned long long)p->im.step,
               (unsigned long long)f.updates, f.updates == 1 ? "" : "s");
    if (rc == 0 && p->sig_refused) {
        fprintf(stderr, "wsync: %s: stopped while the chain in %s was refused by the verify key; %s kept as it "
                "was\n", p->cmd, o->store, p->path);
        rc = EXIT_SIGNATURE;
    }
    return rc;
}

int cmd_follow(int argc, char **argv)
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
        if (cli_is_help(argv[i])) {
            fputs("usage: wsync follow --store DIR MODEL [--interval S] [--max-steps N] [--until-step N]\n"
                  "                    [--on-update CMD] [--wait] [--follow-restart] [--prefix P] [--threads T]\n"
                  "                    [--spool-dir D] [--verify-key NAME.pub] [--new-chain]\n"
                  "Keeps the local file MODEL at the newest step of the chain in DIR: checks HEAD every\n"
                  "S seconds (default 1.0; fractions allowed) and, when it moved, pulls the new\n"
                  "objects into the copy held in memory and replaces MODEL atomically, printing one\n"
                  "line per update. Stops after N updates (--max-steps), once step N is reached\n"
                  "(--until-step), or on SIGINT/SIGTERM (exit 0). A failed sync is reported and\n"
                  "retried at the next check; MODEL stays at the last step reached that checks\n"
                  "against HEAD's state digest (wsync pull --help). The first check syncs even when\n"
                  "MODEL claims HEAD's step, so a damaged file is repaired. --on-update CMD runs CMD\n"
                  "through /bin/sh after each update, with WSYNC_STEP (the step MODEL now holds) and\n"
                  "WSYNC_MODEL (MODEL's path as given) in its environment, and waits for it before the\n"
                  "next check (e.g. to tell an engine to reload MODEL); a failing CMD is reported.\n"
                  "MODEL may be a directory, kept as wsync pull does (wsync pull --help): a symbolic\n"
                  "link switched atomically to MODEL.step_NNNNNN at each update (the previous version\n"
                  "kept), WSYNC_MODEL its path, so an engine reloads the directory from disk.\n"
                  "--spool-dir D: where an anchor is spooled while it is checked (wsync pull --help).\n"
                  "A directory DIR that does not exist is an error (exit 3), as for pull; --wait waits\n"
                  "for it to appear (a follower started before its trainer). An empty chain is waited\n"
                  "for. Whatever is waited out (no store, no step yet, a store it cannot reach, an\n"
                  "anchor or a sync that fails) is said on stderr at once, again 10 s later and every\n"
                  "30 s after, with the last error. A HEAD older than the step MODEL holds is warned\n"
                  "about once (per HEAD and step held) and MODEL is kept; --follow-restart follows it\n"
                  "down instead (a restarted chain), from its anchor. When the chain's tensors change\n"
                  "(an anchor with new shapes), MODEL is rebuilt with the anchor's tensors (wsync pull\n"
                  "--help); a MODEL of another model stops the follower (exit 5).\n",
                  stdout);
            fputs(VERIFY_KEY_HELP
                  "A follower keeps MODEL and keeps checking while its chain is refused (the trainer's\n"
                  "next signed HEAD is taken), says so at once and then at the slow pace above, and\n"
                  "exits 6 when it stops while still refusing.\n"
                  CLI_EXIT_HELP
                  CLI_STORE_HELP,
                  stdout);
            return 0;
        } else if ((k = chain_opt("follow", argc, argv, &i, &c)) != 0) {
            if (k < 0) return EXIT_USAGE;
        } else if (cli_opt_value(argc, argv, &i, "--interval", &v)) {
            char *end;
            errno = 0;
            o.interval = strtod(v, &end);
            if (!*v || *end || errno || !(o.interval > 0 && o.interval <= 86400))
                return cli_usage_error("follow: --interval takes seconds above 0 (e.g. 0.5), not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--max-steps", &v)) {
            if (!cli_parse_u64(v, &o.max_steps) || o.max_steps < 1)
                return cli_usage_error("follow: bad --max-steps '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--on-update", &v)) {
            if (!*v) return cli_usage_error("follow: %s", "--on-update takes a command");
            o.on_update = v;
        } else if (cli_opt_value(argc, argv, &i, "--until-step", &v)) {
            if (!parse_step(v, &o.until)) return cli_usage_error("follow: bad --until-step '%s'", v);
            o.has_until = 1;
        } else if (strcmp(argv[i], "--wait") == 0) {
            o.wait = 1;
        } else if (strcmp(argv[i], "--follow-restart") == 0) {
            c.co.flags |= WSYNC_CHAIN_FOLLOW_RESTART;
        } else if (strcmp(argv[i], "--new-chain") == 0) {
            p.new_chain = 1;
        } else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("follow: unknown or incomplete option '%s'", argv[i]);
        else if (p.path) return cli_usage_error("follow: one MODEL at a time ('%s' is extra)", argv[i]);
        else p.path = argv[i];
    }
    if (!c.store || !p.path) return cli_usage_error("follow: %s", "needs --store DIR and MODEL");
    if ((k = cli_store_check("follow", c.store)) != 0) return k;
    if (chain_keys("follow", &c) != 0) return 1;
    strip_slashes(argv, argc, &p.path);
    p.co = c.co;
    o.store = c.store;
    catch_stop_signals();
    if (!cli_open_dir_store("follow", c.store, 1, &p.store)) return 1;
    p.store_open = 1;
    if (!o.wait) { /* a store that is not there is a mistake, as for pull, unless waited for */
        wsync_chain_info info;
        wsync_error err;
        if (wsync_chain_read(&p.store, &p.co, &info, &err) == WSYNC_OK) wsync_chain_info_free(&info);
        else if (err.code == WSYNC_ERR_NO_STORE) {
            cli_chain_fail("follow", &err, "reading the chain in %s", c.store);
            fprintf(stderr, "wsync: follow: (--wait waits for the store to appear)\n");
            puller_close(&p);
            return EXIT_NO_STORE;
        }
    }
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

static void hex_or_null(FILE *out, int known, const uint8_t *b, size_t n)
{
    size_t i;
    if (!known) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (i = 0; i < n; i++) fprintf(out, "%02x", b[i]);
    fputc('"', out);
}

static void log_json(const chain_cli *c, const wsync_chain_info *in)
{
    size_t i, j;
    fputs("{\"store\": ", stdout);
    cli_json_string(stdout, c->store, strlen(c->store));
    fputs(", \"prefix\": ", stdout);
    if (c->co.prefix && *c->co.prefix) cli_json_string(stdout, c->co.prefix, strlen(c->co.prefix));
    else fputs("null", stdout);
    printf(", \"source\": \"%s\", \"head_step\": %llu, \"anchor_step\": %llu, \"head_state\": ",
           in->has_head ? "HEAD" : "listing", (unsigned long long)in->head_step, (unsigned long long)in->anchor_step);
    json_hex(stdout, in->has_head, in->head_state);
    fputs(", \"signer\": ", stdout);
    hex_or_null(stdout, in->has_sig, in->signer, sizeof in->signer);
    fputs(", \"chain_id\": ", stdout);
    hex_or_null(stdout, in->has_id, in->id, sizeof in->id);
    printf(", \"verified\": %s", c->co.verify_key ? "true" : "false");
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
        cli_json_string(stdout, e->key, strlen(e->key));
        fputs(", \"encoding\": ", stdout);
        if (e->encoding && wsync_encoding_name(e->encoding)) printf("\"%s\"", wsync_encoding_name(e->encoding));
        else fputs("null", stdout);
        fputs(", \"files\": [", stdout);
        for (j = 0; j < e->n_files; j++) {
            const wsync_chain_file *f = &e->files[j];
            fputs(j ? ", {\"name\": " : "{\"name\": ", stdout);
            cli_json_string(stdout, f->name, strlen(f->name));
            printf(", \"kind\": \"%s\", \"bytes\": %llu, \"digest\": \"%016llx\", \"tensors\": %llu}",
                   f->tensors ? "shard" : "file", (unsigned long long)f->bytes, (unsigned long long)f->digest,
                   (unsigned long long)f->tensors);
        }
        fputs("]}", stdout);
    }
    fputs("]}\n", stdout);
}

static void log_text(const chain_cli *c, const wsync_chain_info *in)
{
    size_t i, j;
    printf("%s%s%s: chain read from %s, head step %llu, newest anchor %llu", c->store,
           c->co.prefix && *c->co.prefix ? " prefix " : "", c->co.prefix ? c->co.prefix : "",
           in->has_head ? "HEAD" : "a listing (no HEAD)", (unsigned long long)in->head_step,
           (unsigned long long)in->anchor_step);
    if (in->encoding) printf(", publishing %s deltas", wsync_encoding_name(in->encoding));
    if (in->has_head) printf(", state %016llx", (unsigned long long)in->head_state);
    if (in->has_sig) {
        size_t b;
        printf(", signed by ");
        for (b = 0; b < sizeof in->signer; b++) printf("%02x", in->signer[b]);
        printf(" (%s), chain ", c->co.verify_key ? "verified with the key given" : "not checked: no --verify-key");
        for (b = 0; b < sizeof in->id; b++) printf("%02x", in->id[b]);
    } else if (in->has_head) printf(", unsigned");
    printf("\n%-6s  %15s  %15s  %12s  %-16s  %-31s  %s\n", "kind", "step", "base", "bytes", "digest", "key",
           "encoding");
    for (i = 0; i < in->n_entries; i++) {
        const wsync_chain_entry *e = &in->entries[i];
        char hex[20];
        /* a delta's encoding as HEAD records it; "-" where it does not (an
           older HEAD, a listing): the object's own metadata says */
        const char *enc = e->encoding && wsync_encoding_name(e->encoding) ? wsync_encoding_name(e->encoding) : "-";
        if (e->has_digests) snprintf(hex, sizeof hex, "%016llx", (unsigned long long)e->digest);
        else snprintf(hex, sizeof hex, "-");
        printf("%-6s  %15llu  %15llu  %12llu  %-16s  ", kind_name(e->kind), (unsigned long long)e->step,
               (unsigned long long)e->base, (unsigned long long)e->bytes, hex);
        if (e->kind == WSYNC_CHAIN_DELTA) printf("%-31s  %s\n", e->key, enc);
        else printf("%s%s\n", e->key, e->n_files ? " (a directory:)" : "");
        for (j = 0; j < e->n_files; j++) { /* a directory's anchor: its objects under the key */
            const wsync_chain_file *f = &e->files[j];
            printf("%-6s  %15s  %15s  %12llu  %016llx  %s", "", f->tensors ? "shard" : "file", "",
                   (unsigned long long)f->bytes, (unsigned long long)f->digest, f->name);
            if (f->tensors) printf(" (%llu tensor%s)", (unsigned long long)f->tensors, f->tensors == 1 ? "" : "s");
            printf("\n");
        }
    }
}

int cmd_log(int argc, char **argv)
{
    chain_cli c;
    int i, k, json = 0, rc = 0;
    wsync_store store;
    wsync_chain_info info;
    wsync_error err;
    memset(&c, 0, sizeof c);
    for (i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs("usage: wsync log --store DIR [--prefix P] [--json] [--verify-key NAME.pub]\n"
                  "Lists the chain in the directory store DIR: read from HEAD (or, in a bucket without\n"
                  "one, from a listing of anchors/ and deltas/), the head step, then one row per\n"
                  "object: kind, step, base step, bytes, digest of its bytes (from HEAD), key, and\n"
                  "for a delta its encoding as HEAD records it (\"-\": not recorded). A directory's\n"
                  "anchor (wsync publish of a directory) is followed by one row per object under its\n"
                  "key: shard (with its tensor count) or file, bytes, digest, name.\n"
                  "--json prints one object: {\"store\", \"prefix\", \"source\": \"HEAD\"|\"listing\",\n"
                  "\"head_step\", \"anchor_step\", \"head_state\", \"encoding\", \"entries\": [{\"kind\",\n"
                  "\"step\", \"base\", \"bytes\", \"digest\", \"state\", \"key\", \"encoding\", \"files\":\n"
                  "[{\"name\", \"kind\": \"shard\"|\"file\", \"bytes\", \"digest\", \"tensors\"}...]}...]} (files:\n"
                  "a directory's anchor's objects, else []), digests as 16 hex digits or null, a delta's\n"
                  "encoding null where not recorded. A signed HEAD's signer (the public key, hex) and\n"
                  "chain identity are printed (\"signer\", \"chain_id\": hex or null); --verify-key\n"
                  "NAME.pub (default: the file WSYNC_VERIFY_KEY names) lists the chain only when HEAD\n"
                  "is signed by that key (\"verified\": true), else refuses it (exit 6). DIR is never\n"
                  "created. Exit 0 listed, 1 unreadable chain, 2 usage error, 3 no store there\n"
                  "(WSYNC_ERR_NO_STORE), 4 an empty chain (WSYNC_ERR_NOT_FOUND: nothing published yet),\n"
                  "6 HEAD refused by --verify-key (WSYNC_ERR_SIGNATURE, the rule named).\n"
                  CLI_STORE_HELP,
                  stdout);
            return 0;
        } else if ((k = chain_opt("log", argc, argv, &i, &c)) != 0) {
            if (k < 0) return EXIT_USAGE;
        } else if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("log: unknown or incomplete option '%s'", argv[i]);
        else return cli_usage_error("log: unexpected argument '%s'", argv[i]);
    }
    if (!c.store) return cli_usage_error("log: %s", "needs --store DIR");
    if ((k = cli_store_check("log", c.store)) != 0) return k;
    if (chain_keys("log", &c) != 0) return 1;
    if (!cli_open_dir_store("log", c.store, 1, &store)) return 1;
    if (wsync_chain_read(&store, &c.co, &info, &err) != WSYNC_OK) {
        cli_chain_fail("log", &err, "reading the chain in %s", c.store);
        rc = cli_exit_for(err.code);
    } else {
        if (json) log_json(&c, &info);
        else log_text(&c, &info);
        wsync_chain_info_free(&info);
    }
    wsync_store_close(&store);
    return rc;
}

/* ---- keygen ---- */

int cmd_keygen(int argc, char **argv)
{
    const char *name = NULL;
    wsync_error err;
    int i;
    for (i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs("usage: wsync keygen NAME\n"
                  "Writes an Ed25519 key pair for signed chains: NAME.key, the secret key (mode 0600:\n"
                  "publish refuses a key file that others may read), and NAME.pub, the public key to\n"
                  "hand to followers; one line of hex each. An existing file is never replaced.\n"
                  "  wsync publish --sign-key NAME.key ...   signs each HEAD (or WSYNC_SIGN_KEY=NAME.key)\n"
                  "  wsync pull|follow|log --verify-key NAME.pub ...\n"
                  "                                          refuses a chain the key did not sign\n"
                  "                                          (or WSYNC_VERIFY_KEY=NAME.pub)\n"
                  "Exit 0 written, 1 failed (a file already there, a directory not writable), 2 usage\n"
                  "error.\n",
                  stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("keygen: unknown option '%s'", argv[i]);
        else if (name) return cli_usage_error("keygen: one NAME ('%s' is extra)", argv[i]);
        else name = argv[i];
    }
    if (!name || !*name) return cli_usage_error("keygen: %s", "needs NAME (writes NAME.key and NAME.pub)");
    if (wsync_keygen(name, &err) != WSYNC_OK) return cli_chain_fail("keygen", &err, "%s", name);
    printf("%s.pub\n", name);
    fprintf(stderr, "wsync: keygen: wrote %s.key (secret, mode 0600) and %s.pub: publish --sign-key %s.key signs, "
            "followers check with pull/follow --verify-key %s.pub\n", name, name, name, name);
    return 0;
}
