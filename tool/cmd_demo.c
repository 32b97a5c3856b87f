/* cmd_demo.c - wsync demo: the main job, a trainer and an inference
   follower process over one directory store. */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- demo: a trainer and an inference follower, two processes ----

   The parent forks a trainer (wsync_gen's synthetic training + a publisher)
   and a follower (its own copy of the weights + a subscriber) over one
   directory store. They run in lockstep, so that every step is measured on
   its own: the trainer publishes step s and waits for the follower's ack
   before training step s+1. Both report to the parent through pipes; the
   parent compares their state digests (bit-exact check) and prints. Times
   are CLOCK_MONOTONIC, comparable across the processes.

   The follower is a mirror subscriber (wsync_mirror_*), as for an engine
   whose weights live in GPU memory: the mirror (host memory) is synced, then
   the engine takes the changes (wsync_mirror_take) with a callback that
   copies each chunk into a staging buffer, as an engine would copy it to the
   device; that take is the engine's pause. The staged chunks are then
   scattered into the engine's own copy of the weights (the device's part),
   whose digest is the one checked against the trainer's. */

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
    uint64_t digest;                  /* the engine's copy, after the take */
    uint64_t mirror_digest;           /* the mirror's digest of the state it handed */
    int has_mirror_digest;
    double pause_s;                   /* the take: the engine's pause */
    double scatter_s;                 /* the staged chunks scattered afterwards */
    uint64_t handed_bytes, whole_tensors;
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
    double t0 = cli_now_s(), init_s;
    wsync_gen_config_default(&cfg);
    cfg.mode = WSYNC_GEN_LIGHT;
    cfg.threads = o->threads;
    if ((r = wsync_gen_init(&g, &o->model, &cfg)) != WSYNC_OK) {
        return cli_tool_fail(who, r, "generating the model", "%s: %s", o->model.name, wsync_result_str(r));
    }
    init_s = cli_now_s() - t0;
    if (!(t = (wsync_tensor *)calloc(n, sizeof *t)))
        return cli_tool_fail(who, WSYNC_ERR_OUT_OF_MEMORY, "views", "%zu tensors", n);
    for (i = 0; i < n; i++) { /* views of the generator's bf16 images, updated in place by each step */
        const wsync_gen_tensor_info *ti = &g.tensors[i].info;
        t[i].name = ti->name, t[i].dtype = WSYNC_DTYPE_BF16, t[i].rank = ti->rank, t[i].shape = ti->shape;
        t[i].data = g.bf16[i], t[i].nbytes = ti->nelem * 2;
        full += t[i].nbytes;
    }
    demo_chain_options(o, &co);
    if (!cli_open_dir_store(who, o->bucket, 0, &store)) return 1;
    if (wsync_publisher_open(&store, &co, &pub, &err) != WSYNC_OK)
        return cli_chain_fail(who, &err, "opening a publisher on %s", o->bucket);
    for (s = 0; s <= o->steps; s++) {
        trainer_report rep;
        memset(&rep, 0, sizeof rep);
        rep.step = s;
        rep.work_s = init_s;
        if (s > 0) {
            t0 = cli_now_s();
            wsync_gen_step(&g);
            rep.work_s = cli_now_s() - t0;
        }
        if (wsync_state_digest(t, n, o->threads, &rep.digest, &err) != WSYNC_OK)
            return cli_chain_fail(who, &err, "state digest at step %llu", (unsigned long long)s);
        rep.publish_start = cli_now_s();
        if (wsync_publish(pub, s, t, n, &ps, &err) != WSYNC_OK)
            return cli_chain_fail(who, &err, "publishing step %llu", (unsigned long long)s);
        rep.publish_end = cli_now_s();
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
        cli_sleep_s(0.005);
    }
}

/* The engine stand-in: its own copy of the weights (t, as wsync tensors
   for the digest) and a staging buffer that a take's chunks are copied into
   (entries: tensor index, count, positions, values), scattered after the
   take. */
typedef struct demo_engine {
    wsync_tensor *t;
    size_t n;
    uint8_t *stage;
    size_t len, cap;
} demo_engine;

/* The take's callback: a whole tensor straight into the engine's copy (one
   upload), a chunk appended to the staging buffer. */
static int demo_engine_copy(void *user, const wsync_changes *c)
{
    demo_engine *E = (demo_engine *)user;
    size_t need;
    uint64_t h[2];
    if (c->index >= E->n) return 1;
    if (c->whole) {
        memcpy(E->t[c->index].data, c->values, (size_t)E->t[c->index].nbytes);
        return 0;
    }
    need = 16 + (size_t)c->count * (8 + c->width);
    if (need > E->cap - E->len) {
        size_t cap = E->cap ? E->cap : (size_t)1 << 24;
        uint8_t *p;
        while (cap - E->len < need) cap *= 2;
        if (!(p = (uint8_t *)realloc(E->stage, cap))) return 2;
        E->stage = p, E->cap = cap;
    }
    h[0] = c->index, h[1] = c->count;
    memcpy(E->stage + E->len, h, 16);
    memcpy(E->stage + E->len + 16, c->positions, (size_t)c->count * 8);
    memcpy(E->stage + E->len + 16 + (size_t)c->count * 8, c->values, (size_t)c->count * c->width);
    E->len += need;
    return 0;
}

/* The device's part: the staged chunks scattered into the engine's copy. */
static void demo_engine_scatter(demo_engine *E)
{
    size_t off = 0;
    while (off < E->len) {
        uint64_t h[2], k;
        const uint8_t *pos, *val;
        uint8_t *dst;
        unsigned w;
        memcpy(h, E->stage + off, 16);
        w = wsync_dtype_bits(E->t[h[0]].dtype) / 8;
        pos = E->stage + off + 16;
        val = pos + h[1] * 8;
        dst = (uint8_t *)E->t[h[0]].data;
        for (k = 0; k < h[1]; k++) {
            uint64_t p;
            memcpy(&p, pos + k * 8, 8);
            memcpy(dst + p * w, val + k * w, w);
        }
        off += 16 + (size_t)h[1] * (8 + w);
    }
    E->len = 0;
}

/* The follower: a mirror (layout from the first anchor, zeroed until the
   subscriber loads it), synced to each step as soon as HEAD names it, and
   an engine that takes the changes after each sync. */
static int demo_follower(const demo_opts *o, int report_fd, int ack_fd)
{
    const char *who = "demo: follower";
    wsync_store store;
    wsync_chain_options co;
    wsync_mirror_options mo;
    wsync_mirror *mir;
    wsync_sync_stats st;
    wsync_mirror_stats ms;
    wsync_error err;
    demo_engine E;
    cli_image im;
    uint64_t s;
    size_t i;
    demo_chain_options(o, &co);
    if (!cli_open_dir_store(who, o->bucket, 1, &store)) return 1;
    if (!demo_wait_head(&store, &co, 0, o->parent)) return 1;
    if (!cli_image_from_anchor(who, &store, &co, WSYNC_STEP_LATEST, &im)) return 1;
    memset(&mo, 0, sizeof mo);
    mo.chain = co;
    if (wsync_mirror_open(&store, im.t, im.st.n_tensors, &mo, &mir, &err) != WSYNC_OK)
        return cli_chain_fail(who, &err, "opening a mirror on %s", o->bucket);
    memset(&E, 0, sizeof E);
    E.n = im.st.n_tensors;
    if (!(E.t = (wsync_tensor *)calloc(E.n + 1, sizeof *E.t)))
        return cli_tool_fail(who, WSYNC_ERR_OUT_OF_MEMORY, "the engine's copy", "%zu tensors", E.n);
    for (i = 0; i < E.n; i++) {
        E.t[i] = im.t[i];
        if (!(E.t[i].data = calloc(1, (size_t)im.t[i].nbytes + 1)))
            return cli_tool_fail(who, WSYNC_ERR_OUT_OF_MEMORY, "the engine's copy", "%s", im.t[i].name);
        E.cap += (size_t)im.t[i].nbytes / 8;
    }
    /* the staging area, allocated and touched once as an engine's device
       buffer would be (an eighth of the model: 0.16 bytes an element hold
       1.6% of changes at 10 bytes each); it grows if a step needs more */
    E.cap += (size_t)1 << 20;
    if (!(E.stage = (uint8_t *)malloc(E.cap)))
        return cli_tool_fail(who, WSYNC_ERR_OUT_OF_MEMORY, "the engine's staging buffer", "%zu bytes", E.cap);
    memset(E.stage, 0, E.cap);
    for (s = 0; s <= o->steps; s++) {
        follower_report rep;
        double t0;
        memset(&rep, 0, sizeof rep);
        rep.step = s;
        if (!demo_wait_head(&store, &co, s, o->parent)) return 1;
        rep.sync_start = cli_now_s();
        if (wsync_mirror_sync(mir, s, &st, &err) != WSYNC_OK)
            return cli_chain_fail(who, &err, "syncing the mirror to step %llu", (unsigned long long)s);
        rep.sync_end = cli_now_s();
        rep.bytes_fetched = st.bytes_fetched;
        rep.rejected = st.rejected;
        snprintf(rep.path, sizeof rep.path, "%s", st.path);
        if (wsync_mirror_take(mir, demo_engine_copy, &E, &ms, &err) != WSYNC_OK)
            return cli_chain_fail(who, &err, "the engine's take at step %llu", (unsigned long long)s);
        rep.pause_s = ms.pause_seconds;
        rep.handed_bytes = ms.bytes;
        rep.whole_tensors = ms.whole_tensors;
        t0 = cli_now_s();
        demo_engine_scatter(&E);
        rep.scatter_s = cli_now_s() - t0;
        rep.has_mirror_digest = wsync_mirror_state_digest(mir, &rep.mirror_digest);
        if (wsync_state_digest(E.t, E.n, o->threads, &rep.digest, &err) != WSYNC_OK)
            return cli_chain_fail(who, &err, "state digest at step %llu", (unsigned long long)s);
        if (!write_full(report_fd, &rep, sizeof rep) || !write_full(ack_fd, &s, sizeof s)) {
            fprintf(stderr, "wsync: %s: the parent or the trainer is gone\n", who);
            return 1;
        }
    }
    wsync_mirror_close(mir);
    for (i = 0; i < E.n; i++) free(E.t[i].data);
    free(E.t);
    free(E.stage);
    cli_image_free(&im);
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
        printf("delta %s (%.2f%% changed)%s", cli_human_bytes(b, sizeof b, t->delta_bytes),
               cli_percent(t->changed, t->elements), t->wrote_anchor ? " + anchor" : "");
    else printf("anchor %s", cli_human_bytes(b, sizeof b, t->anchor_bytes));
    printf(" in %.0f ms; follower pulled %s (%s) in %.0f ms, latency %.0f ms; engine pause %.1f ms: %s\n",
           1e3 * (t->publish_end - t->publish_start), cli_human_bytes(b, sizeof b, f->bytes_fetched), f->path,
           1e3 * (f->sync_end - f->sync_start), 1e3 * (f->sync_end - t->publish_start), 1e3 * f->pause_s,
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
    double *lat = (double *)calloc(n + 1, sizeof *lat), *pause = (double *)calloc(n + 1, sizeof *pause);
    double *apply = (double *)calloc(n + 1, sizeof *apply), *ratio = (double *)calloc(n + 1, sizeof *ratio);
    size_t nlat = 0;
    printf("\n%5s  %7s  %-6s  %9s  %9s  %9s  %10s  %10s  %10s  %-9s  %8s\n", "step", "train s", "kind",
           "changed %", "delta MB", "full MB", "publish ms", "pull+apply", "latency ms", "check", "pause ms");
    for (i = 0; i < n; i++) {
        const trainer_report *t = &rows[i].t;
        const follower_report *f = &rows[i].f;
        char changed[16], dmb[16];
        double latency = 1e3 * (f->sync_end - t->publish_start);
        if (t->wrote_delta) {
            snprintf(changed, sizeof changed, "%.3f", cli_percent(t->changed, t->elements));
            snprintf(dmb, sizeof dmb, "%.2f", (double)t->delta_bytes / 1e6);
            deltas++, delta_bytes += t->delta_bytes;
            if (lat && pause && apply && ratio) {
                pause[nlat] = f->pause_s;
                apply[nlat] = f->sync_end - f->sync_start;
                ratio[nlat] = apply[nlat] > 0 ? f->pause_s / apply[nlat] : 0;
                lat[nlat++] = latency;
            }
        } else snprintf(changed, sizeof changed, "-"), snprintf(dmb, sizeof dmb, "-");
        exact += (uint64_t)rows[i].exact;
        printf("%5llu  %7.2f  %-6s  %9s  %9s  %9.1f  %10.0f  %10.0f  %10.0f  %-9s  %8.2f\n",
               (unsigned long long)t->step, t->work_s, t->wrote_delta ? (t->wrote_anchor ? "both" : "delta") : "anchor",
               changed, dmb, (double)(t->wrote_anchor ? t->anchor_bytes : t->full_bytes) / 1e6,
               1e3 * (t->publish_end - t->publish_start), 1e3 * (f->sync_end - f->sync_start), latency,
               rows[i].exact ? "bit-exact" : "MISMATCH", 1e3 * f->pause_s);
    }
    printf("\n%llu of %llu steps bit-exact (state digests equal: the trainer's, the mirror's, the engine's)\n",
           (unsigned long long)exact, (unsigned long long)n);
    if (deltas && lat) {
        qsort(lat, nlat, sizeof *lat, cmp_double);
        printf("deltas: %.2f MB per step on average, %.2f%% of the full %.1f MB; publish-to-applied latency median "
               "%.0f ms, max %.0f ms\n",
               (double)delta_bytes / 1e6 / (double)deltas,
               cli_percent(delta_bytes / deltas, rows[0].t.full_bytes), (double)rows[0].t.full_bytes / 1e6,
               lat[nlat / 2], lat[nlat - 1]);
        qsort(pause, nlat, sizeof *pause, cmp_double);
        qsort(apply, nlat, sizeof *apply, cmp_double);
        qsort(ratio, nlat, sizeof *ratio, cmp_double);
        printf("engine pause (the mirror's take, chunks copied to a staging buffer as to a device): median %.1f ms "
               "a delta step, %.3fx the follower's full pull+apply (median %.0f ms; median of the ratios %.3f)\n",
               pause[nlat / 2] * 1e3, apply[nlat / 2] > 0 ? pause[nlat / 2] / apply[nlat / 2] : 0,
               apply[nlat / 2] * 1e3, ratio[nlat / 2]);
    }
    printf("wall time %.1f s (training and model generation included; latencies exclude them)\n", wall);
    free(lat);
    free(pause);
    free(apply);
    free(ratio);
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
                   r->t.digest == r->t.published_state && r->f.has_mirror_digest &&
                   r->f.mirror_digest == r->t.digest;
        if (!r->exact) {
            (*mismatches)++;
            fprintf(stderr,
                    "wsync: demo: step %llu: trainer state %016llx, published %016llx, engine %016llx, mirror %016llx%s\n",
                    (unsigned long long)s, (unsigned long long)r->t.digest, (unsigned long long)r->t.published_state,
                    (unsigned long long)r->f.digest, (unsigned long long)r->f.mirror_digest,
                    r->f.has_mirror_digest ? "" : " (none)");
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
    double t0 = cli_now_s();
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
    demo_table(rows, o->steps + 1, cli_now_s() - t0);
    if (mismatches) {
        fprintf(stderr, "wsync: demo: %d step%s MISMATCH\n", mismatches, mismatches == 1 ? "" : "s");
        rc = 1;
    }
    free(rows);
    return rc;
}

int cmd_demo(int argc, char **argv)
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
        if (cli_is_help(argv[i])) {
            fputs("usage: wsync demo [--model tiny|qwen3-0.6b|qwen2.5-7b] [--steps N] [--bucket DIR]\n"
                  "                  [--encoding packed|packed-max|trl-v1|trl-v3] [--threads T]\n"
                  "The main job, with two real processes: a trainer (a synthetic AdamW-like run of\n"
                  "the model, default qwen3-0.6b in bf16) publishes step 0 as an anchor and each of N\n"
                  "training steps (default 10) as a sparse delta to a directory store (DIR, default\n"
                  "./demo-bucket; its old chain is removed first); an inference follower, a mirror\n"
                  "subscriber (a host copy of the weights), applies each step as soon as HEAD names\n"
                  "it, then its engine (a second copy, standing in for GPU memory) takes the changes:\n"
                  "the take, which copies them to a staging buffer, is the engine's pause. They run in\n"
                  "lockstep so each step is timed alone: publish, pull+apply, publish-to-applied\n"
                  "latency (training excluded) and the pause. Every step is checked bit-exact: the\n"
                  "trainer's state digest must equal the engine's and the mirror's. Exit 0 when all\n"
                  "are, 1 otherwise.\n",
                  stdout);
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--model", &v)) model = v;
        else if (cli_opt_value(argc, argv, &i, "--bucket", &v)) o.bucket = v;
        else if (cli_opt_value(argc, argv, &i, "--steps", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > 100000)
                return cli_usage_error("demo: --steps takes 1..100000, not '%s'", v);
            o.steps = x;
        } else if (cli_opt_value(argc, argv, &i, "--encoding", &v)) {
            if (!(o.encoding = wsync_encoding_from_name(v))) return cli_usage_error("demo: unknown encoding '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--threads", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > 16)
                return cli_usage_error("demo: --threads takes 1..16, not '%s'", v);
            o.threads = (unsigned)x;
        } else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("demo: unknown or incomplete option '%s'", argv[i]);
        else return cli_usage_error("demo: unexpected argument '%s'", argv[i]);
    }
    if (wsync_gen_model_lookup(model, &o.model) != WSYNC_OK) return cli_usage_models("demo", model);
    if (!demo_prepare_bucket(o.bucket)) return 1;
    printf("wsync demo: %s, %llu bf16 parameters (%.1f MB); step 0 and %llu training steps\n", o.model.name,
           (unsigned long long)o.model.n_params, (double)o.model.n_params * 2 / 1e6, (unsigned long long)o.steps);
    printf("trainer and follower processes, directory store %s (fsync), %s deltas, %u threads each\n\n", o.bucket,
           wsync_encoding_name(o.encoding), o.threads);
    return demo_run(&o);
}
