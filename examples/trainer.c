/* trainer.c - a minimal trainer that publishes every step into a directory
   store, for engine.c (or `wsync follow`) to follow.

   The model is made up: three BF16 tensors whose training nudges about 2% of
   the elements by one bf16 ulp each step and leaves the rest bit-identical,
   the way adjacent RL steps differ. It is deterministic (step s holds the
   same bits in every run), so what a follower serves can be checked against
   the state digest printed here for that step.

   build:  cc -std=c99 -O2 -I.. trainer.c -o trainer -pthread
   usage:  trainer STORE_DIR STEPS [SLEEP_MS]
           publishes steps 1..STEPS into a new store (a store that already
           holds a chain is refused at step 1: steps must follow HEAD's),
           sleeping SLEEP_MS after each; one line per step on stdout. */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c99 */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_TENSORS 3
static const char *const names[N_TENSORS] = {"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight",
                                             "model.norm.weight"};
static const uint32_t ranks[N_TENSORS] = {2, 2, 1};
static const uint64_t shapes[N_TENSORS][2] = {{512, 64}, {256, 64}, {64, 0}};

/* splitmix64: the model's only source of randomness. */
static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Step 0: magnitudes in [0.01, 0.1) with random signs, far from zero so a
   few ulps of drift never cross it. */
static void init_tensor(uint16_t *w, uint64_t n, unsigned k)
{
    uint64_t i;
    for (i = 0; i < n; i++) {
        uint64_t h = mix((uint64_t)k << 40 | i);
        float f = 0.01f + 0.09f * (float)(h >> 40) / 16777216.0f;
        w[i] = wsync_f32_to_bf16(h & 1 ? -f : f);
    }
}

/* One "optimizer step": about 2% of the elements move one ulp up or down. */
static void train_step(uint16_t *w, uint64_t n, unsigned k, uint64_t step)
{
    uint64_t i;
    for (i = 0; i < n; i++) {
        uint64_t h = mix(step << 44 ^ (uint64_t)k << 40 ^ i ^ 0x5eedull << 48);
        if (h % 1000 < 20) w[i] = (uint16_t)(h >> 32 & 1 ? w[i] + 1 : w[i] - 1);
    }
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static int fail(const char *what, const wsync_error *err)
{
    fprintf(stderr, "trainer: %s: %s (%s)\n", what, err->message, wsync_result_name(err->code));
    return 1;
}

int main(int argc, char **argv)
{
    wsync_tensor model[N_TENSORS];
    uint16_t *bits[N_TENSORS] = {NULL, NULL, NULL};
    wsync_store store;
    wsync_publisher *pub = NULL;
    wsync_chain_options o;
    wsync_publish_stats ps;
    wsync_error err;
    unsigned long steps, pause = 0, k;
    uint64_t step;
    int rc = 1;
    char *end;

    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: trainer STORE_DIR STEPS [SLEEP_MS]\n");
        return 2;
    }
    steps = strtoul(argv[2], &end, 10);
    if (*end || steps == 0 || (argc == 4 && (pause = strtoul(argv[3], &end, 10), *end))) {
        fprintf(stderr, "trainer: STEPS is a positive number, SLEEP_MS a number of milliseconds\n");
        return 2;
    }

    /* The trainer's own memory, described for wsync (nothing is copied). */
    for (k = 0; k < N_TENSORS; k++) {
        uint64_t n = shapes[k][0] * (ranks[k] == 2 ? shapes[k][1] : 1);
        if (!(bits[k] = (uint16_t *)malloc(n * sizeof(uint16_t)))) {
            fprintf(stderr, "trainer: out of memory\n");
            goto out;
        }
        init_tensor(bits[k], n, (unsigned)k);
        if (wsync_tensor_dense(&model[k], names[k], WSYNC_DTYPE_BF16, ranks[k], shapes[k], bits[k], &err) !=
            WSYNC_OK) {
            rc = fail(names[k], &err);
            goto out;
        }
    }

    memset(&o, 0, sizeof o); /* defaults: packed deltas, an anchor every 20 steps, keep 40 */
    if (wsync_store_dir_open(argv[1], NULL, &store, &err) != WSYNC_OK) {
        rc = fail(argv[1], &err);
        goto out;
    }
    if (wsync_publisher_open(&store, &o, &pub, &err) != WSYNC_OK) {
        rc = fail("opening the publisher", &err);
        goto close_store;
    }

    for (step = 1; step <= steps; step++) {
        for (k = 0; k < N_TENSORS; k++) train_step(bits[k], model[k].nbytes / 2, (unsigned)k, step);
        if (wsync_publish(pub, step, model, N_TENSORS, &ps, &err) != WSYNC_OK) {
            rc = fail("publish", &err);
            goto close_pub;
        }
        /* the first step is an anchor (a full copy), and so is every 20th after it */
        printf("trainer: step %llu ", (unsigned long long)ps.step);
        if (ps.wrote_delta)
            printf("delta from %llu, %llu of %llu elements changed%s", (unsigned long long)ps.base_step,
                   (unsigned long long)ps.changed, (unsigned long long)ps.elements,
                   ps.wrote_anchor ? ", and an anchor" : "");
        else
            printf("anchor, %llu elements", (unsigned long long)ps.elements);
        printf(", %llu bytes, state %016llx, %.1f ms\n", (unsigned long long)(ps.delta_bytes + ps.anchor_bytes),
               (unsigned long long)ps.state, (ps.encode_seconds + ps.put_seconds) * 1e3);
        fflush(stdout);
        if (pause) sleep_ms((unsigned)pause);
    }
    rc = 0;
close_pub:
    wsync_publisher_close(pub);
close_store:
    wsync_store_close(&store);
out:
    for (k = 0; k < N_TENSORS; k++) free(bits[k]);
    return rc;
}
