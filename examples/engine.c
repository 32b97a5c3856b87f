/* engine.c - a minimal inference engine that follows trainer.c's store,
   patching its own weight buffers in place between batches.

   A background thread (wsync_subscriber_start) polls the store's HEAD,
   fetches and checks the objects leading to the newest step, and touches
   nothing of the weights; between two batches the engine applies what is
   ready (wsync_subscriber_apply_ready), so a batch never sees a half-updated
   model. The prefetch's failures are read from wsync_subscriber_prefetch_status
   without stopping it.

   build:  cc -std=c99 -O2 -I.. engine.c -o engine -pthread
   usage:  engine STORE_DIR STEP [TIMEOUT_S]
           serves until its weights hold STEP or a later step, then prints
           "engine: reached step S, state D" (D: wsync_state_digest of its
           own buffers, to compare with the trainer's line for step S) and
           exits 0; exits 1 after TIMEOUT_S seconds (default 60) without. */
#define _POSIX_C_SOURCE 200809L /* nanosleep, clock_gettime under -std=c99 */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The engine's model: the same names, dtypes and shapes as the trainer's. */
#define N_TENSORS 3
static const char *const names[N_TENSORS] = {"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight",
                                             "model.norm.weight"};
static const uint32_t ranks[N_TENSORS] = {2, 2, 1};
static const uint64_t shapes[N_TENSORS][2] = {{512, 64}, {256, 64}, {64, 0}};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Stands in for the engine's real work: 10 ms on the weights as they are. */
static void serve_a_batch(void)
{
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    wsync_tensor weights[N_TENSORS];
    void *bufs[N_TENSORS] = {NULL, NULL, NULL};
    wsync_store store;
    wsync_subscriber *sub = NULL;
    wsync_chain_options o;
    wsync_sync_stats st;
    wsync_prefetch_status ps;
    wsync_error err;
    unsigned long long target, timeout = 60, step = 0;
    uint64_t have, next;
    double seen = 0, t0;
    int rc = 1, serving = 0;
    unsigned applied;
    unsigned k;
    char *end;

    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: engine STORE_DIR STEP [TIMEOUT_S]\n");
        return 2;
    }
    target = strtoull(argv[2], &end, 10);
    if (*end || (argc == 4 && (timeout = strtoull(argv[3], &end, 10), *end || timeout == 0))) {
        fprintf(stderr, "engine: STEP is a step number, TIMEOUT_S a positive number of seconds\n");
        return 2;
    }

    /* The engine's own buffers; the first apply fills them from an anchor. */
    for (k = 0; k < N_TENSORS; k++) {
        uint64_t n = shapes[k][0] * (ranks[k] == 2 ? shapes[k][1] : 1);
        if (!(bufs[k] = calloc((size_t)n, 2)) ||
            wsync_tensor_dense(&weights[k], names[k], WSYNC_DTYPE_BF16, ranks[k], shapes[k], bufs[k], &err) !=
                WSYNC_OK) {
            fprintf(stderr, "engine: %s: cannot set up its buffer\n", names[k]);
            goto out;
        }
    }

    memset(&o, 0, sizeof o);
    o.flags = WSYNC_CHAIN_VERIFY_STATE; /* also digest the whole model after each apply, against HEAD */
    if (wsync_store_dir_open(argv[1], NULL, &store, &err) != WSYNC_OK) {
        fprintf(stderr, "engine: %s: %s\n", argv[1], err.message);
        goto out;
    }
    if (wsync_subscriber_open(&store, weights, N_TENSORS, &o, &sub, &err) != WSYNC_OK ||
        wsync_subscriber_start(sub, 20 /* ms between polls of HEAD */, &err) != WSYNC_OK) {
        fprintf(stderr, "engine: %s (%s)\n", err.message, wsync_result_name(err.code));
        goto close;
    }

    t0 = now();
    for (;;) {
        serve_a_batch();

        /* Between batches: apply what the prefetch has fetched and checked.
           A failure leaves the weights at the step they held, never a mix. */
        applied = 0;
        if (wsync_subscriber_ready(sub, &next)) {
            if (wsync_subscriber_apply_ready(sub, &st, &err) != WSYNC_OK)
                fprintf(stderr, "engine: %s (%s)\n", err.message, wsync_result_name(err.code));
            else
                applied = st.anchors + st.deltas; /* 0: dropped, planned from a step no longer held */
        }

        /* caught_up: the weights hold HEAD's step. A failure the prefetch
           met (a bad object, a torn HEAD) stays readable here, and the
           prefetch keeps polling regardless. */
        wsync_subscriber_prefetch_status(sub, &ps);
        if (applied)
            printf("engine: serving step %llu (%s, %llu bytes fetched; %s %llu)\n", (unsigned long long)st.step,
                   st.path, (unsigned long long)st.bytes_fetched,
                   ps.caught_up ? "caught up with HEAD at step" : "HEAD already at step",
                   (unsigned long long)ps.head_step);
        if (ps.last_error_time > seen) {
            seen = ps.last_error_time;
            fprintf(stderr, "engine: prefetch: %s (%s)\n", ps.last_error.message, wsync_result_name(ps.last_result));
        }

        if ((serving = wsync_subscriber_step(sub, &have)) != 0 && (step = have) >= target) break;
        if (now() - t0 > (double)timeout) {
            fprintf(stderr, "engine: no step %llu after %llu s: ", target, timeout);
            if (serving) fprintf(stderr, "serving step %llu, ", step);
            else fprintf(stderr, "nothing served yet, ");
            if (ps.head_known) fprintf(stderr, "HEAD at step %llu\n", (unsigned long long)ps.head_step);
            else fprintf(stderr, "no chain found in the store\n");
            goto close;
        }
    }

    if (wsync_state_digest(weights, N_TENSORS, 1, &have, &err) != WSYNC_OK) {
        fprintf(stderr, "engine: state digest: %s\n", err.message);
        goto close;
    }
    printf("engine: reached step %llu, state %016llx\n", step, (unsigned long long)have);
    rc = 0;
close:
    wsync_subscriber_close(sub); /* stops the prefetch thread */
    wsync_store_close(&store);
out:
    for (k = 0; k < N_TENSORS; k++) free(bufs[k]);
    return rc;
}
