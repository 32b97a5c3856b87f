/* cli.h - what the wsync tool's files share: the headers, the exit status
   of a usage error, the helpers (cli_*, defined in cli.c unless said) and
   the commands (cmd_*, one file each or per group).

   The tool is the .c files of this folder, built as one program:
     main.c       usage, --help, --version, dispatch to the commands
     cli.c        the shared helpers declared below
     cmd_delta.c  inspect, diff, apply, verify, gen
     cmd_chain.c  publish, pull, follow, log, keygen
     image.c      a model in memory as one safetensors image (cli_image),
                  built by cmd_chain.c and dir.c
     dir.c        model directories (a Hugging Face checkpoint): the tool's
                  side of wsync.h's >>dir (wsync_dir_read, _publish, the
                  follower pull and follow use for a directory)
     cmd_demo.c   demo (a trainer and a follower process)
     cmd_push.c   push-demo (the direct path with real processes)
     layouts.c    push-demo's ranks' layouts and the plan its controller
                  builds from them (layouts.h), shared with plan
     cmd_plan.c   plan (the direct path's schedule, simulated)
     impl.c       the headers' implementations, and nothing else

   Every file defines _GNU_SOURCE before its first #include (fork, pipe,
   sigaction, fsync under -std=c99; process_vm_writev for wsync_rdma.h). */
#ifndef WSYNC_CLI_H
#define WSYNC_CLI_H

#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before the first #include (see cli.h)"
#endif

/* URL stores (http://, https://, s3://) need libcurl: the Makefile defines
   WSYNC_CLI_HTTP=1 and links -lcurl when its development files are there;
   without them the tool still builds and says so when given a URL. */
#if !defined(WSYNC_CLI_HTTP) || !WSYNC_CLI_HTTP
#ifndef WSYNC_HTTP_NO_CURL
#define WSYNC_HTTP_NO_CURL
#endif
#endif

#include "wsync.h"
#include "wsync_gen.h"
#include "wsync_http.h"
/* The direct path (push-demo, plan): fabrics, executor, controller, planner. */
#include "wsync_rdma.h"

#include <stdio.h>
#include <sys/types.h>

#define EXIT_USAGE 2
/* The chain's readers (pull, follow, log) tell the three ways there is
   nothing to read apart (main.c's usage text lists them). */
#define EXIT_NO_STORE 3    /* WSYNC_ERR_NO_STORE: no store there (a directory that does not exist) */
#define EXIT_EMPTY_CHAIN 4 /* WSYNC_ERR_NOT_FOUND from reading the chain: the store exists, nothing published */
#define EXIT_LAYOUT 5      /* WSYNC_ERR_LAYOUT: the local model is not the chain's (names, dtypes, shapes) */
#define EXIT_SIGNATURE 6   /* WSYNC_ERR_SIGNATURE: a signed chain's check failed (--verify-key; publish
                              --sign-key over a chain its key did not sign), or with --verify-key an
                              object whose BLAKE2b-256 differs from HEAD's (WSYNC_ERR_DIGEST_MISMATCH) */
/* The exit status for a code from wsync_chain_read or a refused layout: the
   four above, else 1 (0 for WSYNC_OK). */
int cli_exit_for(wsync_result code);
/* The exit status text for the commands' --help. */
#define CLI_EXIT_HELP                                                                                    \
    "Exit 0 done, 1 failed (the reason on stderr), 2 usage error, 3 no store there\n"                    \
    "(WSYNC_ERR_NO_STORE: a directory store that does not exist; nothing is created), 4 an empty\n"   \
    "chain (WSYNC_ERR_NOT_FOUND: the store exists, nothing is published yet), 5 the local model\n"    \
    "does not match the chain (WSYNC_ERR_LAYOUT: tensor names, dtypes or shapes), 6 refused by\n"       \
    "--verify-key (WSYNC_ERR_SIGNATURE: HEAD unsigned, signed by another key, altered after signing\n"  \
    "or another chain's; or WSYNC_ERR_DIGEST_MISMATCH: an object whose BLAKE2b-256 differs from\n"      \
    "HEAD's), MODEL kept as it was.\n"

/* ---- the commands: each takes the arguments after its name and returns
   the exit status (0 success, 1 failed, 2 usage error) ---- */

int cmd_inspect(int argc, char **argv);   /* cmd_delta.c */
int cmd_diff(int argc, char **argv);      /* cmd_delta.c */
int cmd_apply(int argc, char **argv);     /* cmd_delta.c */
int cmd_verify(int argc, char **argv);    /* cmd_delta.c */
int cmd_gen(int argc, char **argv);       /* cmd_delta.c */
int cmd_publish(int argc, char **argv);   /* cmd_chain.c */
int cmd_pull(int argc, char **argv);      /* cmd_chain.c */
int cmd_follow(int argc, char **argv);    /* cmd_chain.c */
int cmd_log(int argc, char **argv);       /* cmd_chain.c */
int cmd_keygen(int argc, char **argv);    /* cmd_chain.c */
int cmd_demo(int argc, char **argv);      /* cmd_demo.c */
int cmd_push_demo(int argc, char **argv); /* cmd_push.c */
int cmd_plan(int argc, char **argv);      /* cmd_plan.c */

/* ---- the direct path: push-demo's layouts (layouts.c; the ranks' parts in
   layouts.h), shared with `wsync plan --demo` ---- */

typedef struct cli_push_layout {
    unsigned trainers, inference, block;  /* block: fp8 tile */
    int replica, reshard, fp8, mesh_groups;
} cli_push_layout;
/* The plan push-demo's controller builds for a model and layout (the ranks'
   entries as they join, wsync_ctl_plan_input_build, wsync_plan_build with
   the controller's options): `wsync plan --demo` prints it (layouts.c). */
wsync_result cli_push_plan(const wsync_gen_model *m, const cli_push_layout *o, wsync_plan **out, wsync_error *err);

/* ---- arguments and errors ---- */

/* "wsync: " + the message + a pointer to --help on stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...);
/* An unknown --model for `cmd`, with the known ones; returns EXIT_USAGE. */
int cli_usage_models(const char *cmd, const char *name);
/* "wsync: CMD: WHAT: WSYNC_ERR_X: message"; returns 1 (the exit status).
   fmt NULL: "wsync: CMD: WSYNC_ERR_X: message" (a message that names its
   file itself, as the library's model-directory errors do). */
int cli_chain_fail(const char *cmd, const wsync_error *err, const char *fmt, ...);
/* Until called again with NULL, cli_chain_fail (and cli_tool_fail) keep
   their line (without the newline) in buf instead of printing it, the last
   one only: a follower says a failure that repeats at its own pace.
   cli_fail_captured: the code of that line (WSYNC_OK: none). */
void cli_fail_capture(char *buf, size_t cap);
wsync_result cli_fail_captured(void);
/* The code of the last failure cli_chain_fail or cli_tool_fail reported
   (captured or printed). */
wsync_result cli_fail_last(void);
/* An error found by the tool itself, reported like the library's. */
int cli_tool_fail(const char *cmd, wsync_result code, const char *what, const char *fmt, ...);
int cli_is_help(const char *a);
/* argv[*i] is option `name` with a value after it: *val gets the value. */
int cli_opt_value(int argc, char **argv, int *i, const char *name, const char **val);
/* A decimal number, no sign: 1 when s is one that fits. */
int cli_parse_u64(const char *s, uint64_t *out);

/* ---- output ---- */

/* JSON string with the escapes RFC 8259 requires. */
void cli_json_string(FILE *out, const char *s, size_t n);
/* Decimal units, as object stores and network links count. */
const char *cli_human_bytes(char *buf, size_t cap, uint64_t b);
double cli_percent(uint64_t part, uint64_t whole);
/* CLOCK_MONOTONIC seconds: system-wide, comparable across processes. */
double cli_now_s(void);
/* A signal cuts the sleep short, so that loops see their stop flag at once. */
void cli_sleep_s(double s);

/* ---- files ---- */

/* A safetensors file mapped, parsed and viewed as wsync_tensors. */
typedef struct cli_loaded {
    const char *path;
    wsync_mapped map;
    wsync_st_file st;
    wsync_tensor *t;   /* one per safetensors tensor, data into the mapping */
} cli_loaded;

/* 1 when loaded; 0 after saying why on stderr. */
int cli_load_file(const char *path, cli_loaded *L);
/* Why wsync_st_parse refused the size bytes at b with err: a file that does
   not look like safetensors at all says so and what its first bytes are
   (buf, cap bytes); else err's message. */
const char *cli_st_why(const uint8_t *b, uint64_t size, const wsync_error *err, char *buf, size_t cap);
void cli_unload_file(cli_loaded *L);
/* A wsync_sink_fn writing to the FILE * in `user`. */
int cli_file_sink(void *user, const void *bytes, size_t len);
/* A new temporary file next to `path` (path + mark [+ pid + "."] + a random
   suffix, O_EXCL | O_NOFOLLOW); the fd, or -1 with errno set. */
int cli_temp_create(char *buf, size_t cap, const char *path, const char *mark, long pid, mode_t mode);

/* Writes through a temporary file of its own (cli_temp_create), fsyncs it and
   renames it over `path`, so a reader never sees half a file and two runs
   writing one path each leave it whole. */
typedef struct cli_out_file {
    char tmp[4096];
    const char *path;
    FILE *f;
} cli_out_file;

int cli_out_open(cli_out_file *o, const char *path);
/* Flushes, fsyncs and closes; renames over the path when ok, else removes. */
int cli_out_commit(cli_out_file *o, int ok);

/* ---- paths ---- */

/* The directory holding `path` and the name in it. */
void cli_split_path(const char *path, char *dir, size_t cap, const char **base);
/* A rename is durable once the directory is synced: 1 synced (or a
   filesystem that cannot sync a directory), 0 not. */
int cli_fsync_dir(const char *dir);
/* The store key of a chain entry (entries name keys without the prefix). */
int cli_chain_key(char *buf, size_t cap, const char *prefix, const char *key);

/* ---- stores and models ---- */

/* The store named by `dir`: a directory, http://, https:// or s3://...
   Readers pass must_exist (WSYNC_STORE_NO_CREATE: a missing directory
   store opens, and its calls fail with WSYNC_ERR_NO_STORE). 1 when open; 0
   after saying why. */
/* How URL stores are opened (--listing, --s3-part-size,
   --s3-multipart-threshold of the chain commands); zero: the library's
   defaults and environment. */
typedef struct cli_store_opts {
    wsync_http_listing listing;
    uint64_t s3_part_size, s3_multipart_threshold;
} cli_store_opts;
extern cli_store_opts cli_store;
/* The chain commands' --help about those options. */
#define CLI_STORE_HELP                                                                                  \
    "URL stores: --listing auto|json|propfind says how an http(s) store lists a directory\n"          \
    "(WebDAV PROPFIND, nginx's JSON autoindex, or PROPFIND first and JSON when the server\n"         \
    "does not answer it: auto, the default); --s3-part-size N and --s3-multipart-threshold N\n"      \
    "(bytes; K, M, G allowed) set an S3 store's upload part size and largest single PUT\n"          \
    "(default WSYNC_S3_PART_SIZE and WSYNC_S3_MULTIPART_THRESHOLD, else 16M and 64M).\n"
/* The chain commands' store options at argv[*i]: 1 consumed, 0 not one of
   them, -1 after a usage error (printed). */
int cli_store_opt(const char *cmd, int argc, char **argv, int *i);
int cli_open_dir_store(const char *cmd, const char *dir, int must_exist, wsync_store *s);
/* --store with a scheme wsync does not know (ftp://...): the usage error
   (printed, EXIT_USAGE); 0 when the store is one wsync can open. */
int cli_store_check(const char *cmd, const char *store);

/* The local file's bytes in a private buffer: the subscriber patches the
   tensors' data in place (through `t`, views into buf), and saving writes
   the tensors back out with a new step. */
typedef struct cli_image {
    uint8_t *buf;
    uint64_t size;
    wsync_st_file st;
    wsync_tensor *t;   /* st.n_tensors views into buf */
    int has_step;      /* the step the data hold, as the file claims it */
    uint64_t step;
    int has_chain;     /* the identity of the signed chain the step came from (a file's
                          __metadata__ CLI_CHAIN_META, a directory's WSYNC_DIR_STEP_FILE
                          "chain"), written only by a pull given --verify-key */
    uint8_t chain[WSYNC_CHAIN_ID_SIZE];
} cli_image;
#define CLI_CHAIN_META "wsync_chain"
/* 32 hex digits into id: 1 when s is exactly that. */
int cli_parse_chain_id(const char *s, size_t n, uint8_t id[WSYNC_CHAIN_ID_SIZE]);

void cli_image_free(cli_image *im);  /* image.c */
/* Parses im->buf (im->size bytes, filled by the caller) and builds the
   views; 0 after saying why (image.c). */
int cli_image_parse(const char *cmd, const char *what, cli_image *im);
/* A model with the layout of the chain's newest anchor at or before `limit`,
   data zeroed (cmd_chain.c). */
int cli_image_from_anchor(const char *cmd, const wsync_store *s, const wsync_chain_options *co, uint64_t limit,
                          cli_image *im);

/* ---- model directories (dir.c; the library's >>dir section does the work) ---- */

/* wsync_dir_read of `dir` with the --include patterns: 1 read; 0 after
   saying why (the library's error, naming the file and the rule). Warns
   about a pattern that matched nothing and a WSYNC_DIR_STEP_FILE not
   published. */
int cli_dir_load(const char *cmd, const char *dir, char *const *include, size_t n_include, wsync_dir_checkpoint *c);
/* A directory anchor's tensors as one image, data zeroed
   (wsync_dir_anchor_image): 1 built; 0 after saying why. */
int cli_dir_anchor_image(const char *cmd, const wsync_store *s, const wsync_chain_options *co,
                         const wsync_chain_entry *e, cli_image *im);

#endif /* WSYNC_CLI_H */
