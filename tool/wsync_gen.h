/* wsync_gen.h - training-like bf16 weights for tests, benchmarks and demos.

OVERVIEW
========
wsync's delta codecs must be measured on data that behaves like an RL
trainer's weights: fp32 master weights updated by AdamW at a small learning
rate, cast to bf16 (round to nearest even) after every step. Real checkpoints
cannot be downloaded here, so this header generates them:

  - model shapes with Hugging Face tensor names: `tiny` (1.3 M parameters,
    4 layers with both q/k norms and q/k/v biases, untied lm_head, so that
    fast tests see every kind of tensor), `qwen3-0.6b` and `qwen2.5-7b`
    (shared/design/MODELS.md), or any Qwen2/Qwen3-style shape by hand;
  - "pretrained-like" fp32 masters: matrices and embeddings ~N(0, s) with
    the median |w| at 0.02, a per-row scale and a few outliers; RMSNorm
    weights 1 + N(0, 0.05); biases N(0, 0.01) with a heavier tail;
  - AdamW steps (betas 0.9/0.999, eps 1e-8, decoupled weight decay 0.01 on
    matrices and embeddings only, lr 1e-6 by default) on synthetic gradients
    g = s_T * (a_T * p + z_t): a per-tensor scale s_T, a persistent
    per-element direction p (fixed for the run) weighted by a per-tensor
    signal-to-noise a_T, and fresh noise z_t every step. Rows of an untied
    input embedding only get a gradient when their token is in the batch
    (a Zipf draw over token ids, fresh every step), as in real training;
  - the bf16 image of every step: wsync_f32_to_bf16_n over the masters.

Everything is a pure function of (seed, tensor index, element index, step):
every random number is a hash of those (a counter-based generator), so the
output is the same for any thread count and any slicing of a tensor, and a
benchmark can hold one slice of one tensor at a time.

It is a single header in the stb style: declarations always, the code only
in the one file that defines WSYNC_GEN_IMPLEMENTATION. It needs wsync.h, and
wsync.h's implementation (WSYNC_IMPLEMENTATION) in some translation unit of
the program; this header never defines it.

    #define WSYNC_IMPLEMENTATION
    #include "wsync.h"
    #define WSYNC_GEN_IMPLEMENTATION
    #include "wsync_gen.h"

QUICK START
===========
The whole model (masters, moments and images in memory):

    wsync_gen_model m;
    wsync_gen_config cfg;
    wsync_gen g;
    wsync_gen_model_lookup("qwen3-0.6b", &m);
    wsync_gen_config_default(&cfg);
    cfg.threads = 2;
    wsync_gen_init(&g, &m, &cfg);            // step 0: g.bf16[i] is tensor i
    wsync_gen_step(&g);                      // step 1, images updated in place
    wsync_gen_write(&g, sink, user, &err);   // as a bf16 safetensors file
    wsync_gen_free(&g);

One tensor (or a slice of it) at a time, in bounded memory; e.g. the images
at steps k and k+1 of every tensor, for a delta benchmark:

    for (i = 0; i < m.n_tensors; i++) {
        wsync_gen_tensor t;
        wsync_gen_tensor_init(&t, &m, i, 0, 0, &cfg, NULL);  // whole tensor
        for (s = 1; s < k; s++) wsync_gen_tensor_step(&t, NULL);
        wsync_gen_tensor_step(&t, img_k);                    // t.count elements
        wsync_gen_tensor_step(&t, img_k1);
        ... diff img_k -> img_k1 ...
        wsync_gen_tensor_free(&t);
    }

MODES AND MEMORY
================
WSYNC_GEN_ADAMW (default) keeps fp32 master, m and v: 12 bytes per
parameter, plus 2 per parameter for each bf16 image the caller keeps
(wsync_gen: one image, 14 bytes per parameter; qwen3-0.6b: 8.3 GB).

WSYNC_GEN_LIGHT keeps only the fp32 master (4 bytes per parameter; 6 with
wsync_gen's image, 3.6 GB for qwen3-0.6b). The moments are replaced by their
steady state: the update is
    u = lr * (a*p + sigma_m*z_t) / sqrt((a*p)^2 + 1),
    sigma_m = sqrt((1 - beta1) / (1 + beta1)),
which is Adam's m/sqrt(v) after warm-up for g = a*p + z (m's noise has the
variance of an EMA of unit noise, v tends to E[g^2] = (a*p)^2 + 1). Its
per-step distribution matches AdamW's after warm-up (measured: 1.61% of
qwen3-0.6b changes per step in both); what it lacks is the step-to-step
correlation of m's noise, the cold start (AdamW's first step moves every
element by lr*|g|/(|g|+eps), about lr), and momentum on embedding rows that
get no gradient (LIGHT moves them by 0). A step is cheaper: no m and v to
read, update and write.

`warm_start` (AdamW) starts m and v at that steady state instead of zero and
drops the bias correction, so step 1 already has post-warm-up statistics.

Memory is bounded by slicing: wsync_gen_tensor_init takes an element range,
and a slice produces exactly the elements the whole tensor would. For
qwen2.5-7b, slices of 2^24 elements need 200 MB of AdamW state.

SPEED
=====
Per element and step: two normal samples (a hash of the element index and
a ziggurat), the AdamW arithmetic in fp32 and the cast, so the cost is
linear in the elements and a full-size model's step takes seconds of CPU
(BENCHMARKS.md has the figures). cfg.threads > 1 runs on POSIX threads (build
with -lpthread; define WSYNC_GEN_NO_THREADS to compile without them),
splitting work into blocks of 2^18 elements. The first touch of fresh memory
(init) can cost as much again in page faults.

CALIBRATION
===========
With the defaults (AdamW from fresh moments, lr 1e-6), qwen3-0.6b changes
3.1% of its bf16 elements at step 1, 2.3% at step 2, 1.9% at step 4, 1.7% at
step 8, tending to the steady state of 1.6% (DESIGN.md: more than 98%
identical); qwen2.5-7b 1.5% (its untied input embedding 0.24%: only rows of
tokens in the batch move). About 89% of changes are one bf16 step (+-1 in
ordered-integer space), 4.5% two, 6% more (weights so small that lr spans
several bf16 steps). The change rate halves with each doubling of |w|: it is
about |u| / spacing(w), the bf16 spacing being 2^(e-7) for |w| in
[2^e, 2^(e+1)). At the real AdamW trajectory's settings (fresh moments,
lr 2e-6; shared/corpus/trajectory) the per-exponent change rates of `tiny`
match the trajectory's within 6% for every |w| from 2^-13 to 2^-4, at each
of its four steps (bench/gen_stats.c prints both); `signal` 0.8 is the value
that matches the trajectory's decay from step 1 to step 4. At lr 1e-6 decoupled
weight decay is below fp32 resolution (as in PyTorch, where 1 - lr*wd rounds
to 1.0f).

Results are identical across runs, thread counts, slicings, compilers and
optimisation levels (gcc, clang, C and C++, -O0 to -O3 -march=native: no FMA
contraction here, see below; not under clang's -ffp-contract=fast or
-ffast-math); across platforms they match unless a libm's logf/expf differ
in the last bit (used for the ~1% of normal samples on the ziggurat's slow
path).
*/
#ifndef WSYNC_GEN_H
#define WSYNC_GEN_H

#include "wsync.h"

#ifndef WSYNC_GEN_DEF
#ifdef WSYNC_GEN_STATIC
#define WSYNC_GEN_DEF static
#else
#define WSYNC_GEN_DEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
   Model shapes
   ====================================================================== */

#define WSYNC_GEN_NAME_MAX 96

typedef enum wsync_gen_kind {
    WSYNC_GEN_KIND_MATRIX = 0,    /* 2-D projection (and an untied lm_head) */
    WSYNC_GEN_KIND_EMBEDDING = 1, /* model.embed_tokens.weight */
    WSYNC_GEN_KIND_NORM = 2,      /* RMSNorm weight */
    WSYNC_GEN_KIND_BIAS = 3       /* q/k/v projection bias */
} wsync_gen_kind;

/* A decoder-only transformer in the Qwen2/Qwen3 layout. */
typedef struct wsync_gen_model {
    const char *name;
    uint64_t vocab_size;
    uint64_t hidden_size;
    uint64_t num_layers;
    uint64_t intermediate_size;
    uint64_t num_heads;
    uint64_t num_kv_heads;
    uint64_t head_dim;
    int qk_norm;        /* q_norm and k_norm per layer (Qwen3) */
    int qkv_bias;       /* q/k/v projection biases (Qwen2.5) */
    int tied;           /* tie_word_embeddings: no lm_head.weight */
    size_t n_tensors;   /* filled by wsync_gen_model_lookup / _finish */
    uint64_t n_params;
} wsync_gen_model;

typedef struct wsync_gen_tensor_info {
    char name[WSYNC_GEN_NAME_MAX]; /* Hugging Face name */
    size_t index;                  /* position in the model, 0-based */
    wsync_gen_kind kind;
    uint32_t rank;                 /* 1 or 2 */
    uint64_t shape[2];             /* [out, in] for matrices, [n] for vectors */
    uint64_t nelem;
    int sparse_rows;               /* rows get a gradient only when their token is in the batch */
} wsync_gen_tensor_info;

/* Known models, for --help: i from 0 while the result is not NULL. */
WSYNC_GEN_DEF size_t wsync_gen_model_count(void);
WSYNC_GEN_DEF const char *wsync_gen_model_name(size_t i);
/* By name ("tiny", "qwen3-0.6b", "qwen2.5-7b"): WSYNC_OK or WSYNC_ERR_NOT_FOUND. */
WSYNC_GEN_DEF wsync_result wsync_gen_model_lookup(const char *name, wsync_gen_model *out);
/* For a model filled in by hand: checks it and sets n_tensors and n_params. */
WSYNC_GEN_DEF wsync_result wsync_gen_model_finish(wsync_gen_model *m);
/* Tensor i (0 <= i < n_tensors), in named_parameters() order. */
WSYNC_GEN_DEF wsync_result wsync_gen_model_tensor(const wsync_gen_model *m, size_t i,
                                                  wsync_gen_tensor_info *out);
/* Index of the tensor called `name`, or WSYNC_ERR_NOT_FOUND. */
WSYNC_GEN_DEF wsync_result wsync_gen_model_find(const wsync_gen_model *m, const char *name,
                                                size_t *index);

/* ======================================================================
   Random numbers (no global state)
   ====================================================================== */

/* A sequential generator: xoshiro256** seeded through splitmix64. */
typedef struct wsync_gen_rng {
    uint64_t s[4];
} wsync_gen_rng;

WSYNC_GEN_DEF void wsync_gen_rng_seed(wsync_gen_rng *r, uint64_t seed);
WSYNC_GEN_DEF uint64_t wsync_gen_rng_next(wsync_gen_rng *r);
WSYNC_GEN_DEF float wsync_gen_rng_uniform(wsync_gen_rng *r); /* (0, 1) */
WSYNC_GEN_DEF float wsync_gen_rng_normal(wsync_gen_rng *r);  /* N(0, 1) */

/* Counter-based: 64 random bits for element `i` of the stream `key`
   (splitmix64's output at position i), and the splitmix64 mixer itself. */
WSYNC_GEN_DEF uint64_t wsync_gen_mix64(uint64_t x);
WSYNC_GEN_DEF uint64_t wsync_gen_hash(uint64_t key, uint64_t i);
/* N(0, 1) from 64 random bits (a 128-layer ziggurat; the ~1% of samples on
   its slow path draw more bits from a generator seeded with `bits`). */
WSYNC_GEN_DEF float wsync_gen_normal_bits(uint64_t bits);

/* ======================================================================
   Generator
   ====================================================================== */

typedef enum wsync_gen_mode {
    WSYNC_GEN_ADAMW = 0, /* fp32 master + AdamW moments, 12 bytes per parameter */
    WSYNC_GEN_LIGHT = 1  /* fp32 master only, steady-state stateless update */
} wsync_gen_mode;

typedef struct wsync_gen_config {
    uint64_t seed;
    wsync_gen_mode mode;
    double lr;                 /* 1e-6 (RL: 1e-6 .. 1e-5) */
    double beta1, beta2, eps;  /* 0.9, 0.999, 1e-8 */
    double weight_decay;       /* 0.01, matrices and embeddings only */
    double signal;             /* median a_T, persistent gradient vs per-step noise: 0.8 */
    double grad_scale;         /* median s_T, gradient rms per element: 1e-5 */
    double init_median;        /* median |w| of matrices and embeddings: 0.02 */
    double embed_batch_tokens; /* untied input embedding: tokens per batch, Zipf over
                                  token ids (low ids frequent); 0: every row, every step.
                                  65536 */
    int warm_start;            /* AdamW: moments start at steady state, no bias correction */
    unsigned threads;          /* 0 or 1: the calling thread only */
    wsync_allocator allocator;
} wsync_gen_config;

/* The defaults above. A NULL config pointer anywhere means these. */
WSYNC_GEN_DEF void wsync_gen_config_default(wsync_gen_config *c);

/* The state of elements [begin, begin + count) of one tensor. */
typedef struct wsync_gen_tensor {
    wsync_gen_tensor_info info;
    uint64_t begin, count;
    uint64_t step;        /* optimizer steps taken; 0 after init */
    float *master;        /* count fp32 master weights */
    float *m, *v;         /* count each, AdamW only (NULL in LIGHT mode) */
    /* private */
    wsync_gen_config cfg;
    uint64_t key;         /* stream key of (seed, tensor index) */
    float grad_scale;     /* s_T */
    float signal;         /* a_T */
    uint64_t cols;        /* row length (1-D tensors: nelem) */
    uint64_t rows;
    double zipf_h;        /* normaliser of the token distribution */
} wsync_gen_tensor;

/* Bytes of state for `count` elements in `mode` (images not included). */
WSYNC_GEN_DEF uint64_t wsync_gen_state_bytes(wsync_gen_mode mode, uint64_t count);

/* Initialise the slice [begin, begin + count) of tensor `index` (count 0:
   to the end of the tensor) at step 0; writes its bf16 image to `bf16` when
   not NULL (count elements). Fails with INVALID_ARGUMENT for a bad index,
   range or configuration (a beta not in [0, 1), a non-positive scale, an
   allocator with only one of its functions), OUT_OF_MEMORY. On failure *t
   holds nothing to free. */
WSYNC_GEN_DEF wsync_result wsync_gen_tensor_init(wsync_gen_tensor *t, const wsync_gen_model *m,
                                                 size_t index, uint64_t begin, uint64_t count,
                                                 const wsync_gen_config *cfg, uint16_t *bf16);
/* One optimizer step; writes the new bf16 image when `bf16` is not NULL. */
WSYNC_GEN_DEF void wsync_gen_tensor_step(wsync_gen_tensor *t, uint16_t *bf16);
/* The current bf16 image (the cast of the masters). */
WSYNC_GEN_DEF void wsync_gen_tensor_image(const wsync_gen_tensor *t, uint16_t *bf16);
WSYNC_GEN_DEF void wsync_gen_tensor_free(wsync_gen_tensor *t);

/* The whole model. */
typedef struct wsync_gen {
    wsync_gen_model model;
    wsync_gen_config cfg;
    uint64_t step;
    wsync_gen_tensor *tensors; /* model.n_tensors */
    uint16_t **bf16;           /* bf16[i]: tensor i's image at `step` */
} wsync_gen;

WSYNC_GEN_DEF wsync_result wsync_gen_init(wsync_gen *g, const wsync_gen_model *m,
                                          const wsync_gen_config *cfg);
WSYNC_GEN_DEF void wsync_gen_step(wsync_gen *g);
WSYNC_GEN_DEF void wsync_gen_free(wsync_gen *g);
/* The current images as one safetensors file (BF16, model order, metadata
   {"step": "<n>", "model": "<name>"}), through wsync_st_write. */
WSYNC_GEN_DEF wsync_result wsync_gen_write(const wsync_gen *g, wsync_sink_fn sink, void *user,
                                           wsync_error *err);

/* ======================================================================
   Statistics of a step (base -> next), for tests and calibration
   ====================================================================== */

typedef struct wsync_gen_stats {
    uint64_t total, changed;
    uint64_t step1, step2, step_more; /* changed elements by |ordered-integer step| */
    uint64_t exp_total[256];          /* by the base's bf16 exponent field */
    uint64_t exp_changed[256];        /* (|w| in [2^(e-127), 2^(e-126))) */
} wsync_gen_stats;

/* bf16 bits -> an integer that orders like the values (-0 and +0 adjacent). */
WSYNC_GEN_DEF uint16_t wsync_gen_bf16_ordered(uint16_t h);
/* Adds n elements (the stats start zeroed: memset or = {0}). */
WSYNC_GEN_DEF void wsync_gen_stats_add(wsync_gen_stats *s, const uint16_t *base,
                                       const uint16_t *next, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_GEN_H */

/* ======================================================================
   ======================================================================
   IMPLEMENTATION
   ======================================================================
   ====================================================================== */
#ifdef WSYNC_GEN_IMPLEMENTATION
#ifndef WSYNC_GEN__IMPLEMENTED
#define WSYNC_GEN__IMPLEMENTED

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(WSYNC_GEN_NO_THREADS) && (defined(__unix__) || defined(__APPLE__))
#include <pthread.h>
#define WSYNC_GEN__THREADS 1
#else
#define WSYNC_GEN__THREADS 0
#endif

/* The generator never fuses a*b+c into an FMA, so that every build computes
   the same bits: clang contracts within an expression unless the STDC pragma
   says no (at the top of each kernel); gcc contracts in C++ and GNU C modes
   when the target has FMA, unless fp-contract is off (for this
   implementation only: pushed here, popped at its end). */
#if defined(__clang__)
#define WSYNC_GEN__NO_FMA _Pragma("STDC FP_CONTRACT OFF")
#else
#define WSYNC_GEN__NO_FMA
#endif
#if defined(__GNUC__) && !defined(__clang__) && !defined(__INTEL_COMPILER)
#define WSYNC_GEN__GCC_OPTIONS 1
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

/* ---------------------------------------------------------------------
   Model shapes
   --------------------------------------------------------------------- */

/* name, vocab, hidden, layers, intermediate, heads, kv heads, head_dim,
   qk_norm, qkv_bias, tied */
static const wsync_gen_model wsync__gen_models[] = {
    {"tiny", 2048, 128, 4, 384, 4, 2, 32, 1, 1, 0, 0, 0},
    {"qwen3-0.6b", 151936, 1024, 28, 3072, 16, 8, 128, 1, 0, 1, 0, 0},
    {"qwen2.5-7b", 152064, 3584, 28, 18944, 28, 4, 128, 0, 1, 0, 0, 0},
};
#define WSYNC_GEN__N_MODELS (sizeof wsync__gen_models / sizeof wsync__gen_models[0])

WSYNC_GEN_DEF size_t wsync_gen_model_count(void)
{
    return WSYNC_GEN__N_MODELS;
}

WSYNC_GEN_DEF const char *wsync_gen_model_name(size_t i)
{
    return i < WSYNC_GEN__N_MODELS ? wsync__gen_models[i].name : NULL;
}

/* Per-layer slots in named_parameters() order; some depend on flags. */
enum {
    WSYNC_GEN__Q, WSYNC_GEN__QB, WSYNC_GEN__K, WSYNC_GEN__KB, WSYNC_GEN__V, WSYNC_GEN__VB,
    WSYNC_GEN__O, WSYNC_GEN__QN, WSYNC_GEN__KN, WSYNC_GEN__GATE, WSYNC_GEN__UP,
    WSYNC_GEN__DOWN, WSYNC_GEN__LN1, WSYNC_GEN__LN2, WSYNC_GEN__NSLOTS
};

static int wsync__gen_slot_present(const wsync_gen_model *m, int slot)
{
    if (slot == WSYNC_GEN__QB || slot == WSYNC_GEN__KB || slot == WSYNC_GEN__VB) return m->qkv_bias != 0;
    if (slot == WSYNC_GEN__QN || slot == WSYNC_GEN__KN) return m->qk_norm != 0;
    return 1;
}

static size_t wsync__gen_per_layer(const wsync_gen_model *m)
{
    size_t n = 0;
    int s;
    for (s = 0; s < WSYNC_GEN__NSLOTS; s++) n += (size_t)wsync__gen_slot_present(m, s);
    return n;
}

static void wsync__gen_set(wsync_gen_tensor_info *o, wsync_gen_kind kind, uint64_t a, uint64_t b)
{
    o->kind = kind;
    o->rank = b ? 2u : 1u;
    o->shape[0] = a;
    o->shape[1] = b;
    o->nelem = b ? a * b : a;
}

WSYNC_GEN_DEF wsync_result wsync_gen_model_tensor(const wsync_gen_model *m, size_t i,
                                                  wsync_gen_tensor_info *o)
{
    size_t per, layer, k;
    int slot;
    uint64_t h, q, kv, in;
    if (!m || !o || i >= m->n_tensors) return WSYNC_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->index = i;
    h = m->hidden_size;
    q = m->num_heads * m->head_dim;
    kv = m->num_kv_heads * m->head_dim;
    in = m->intermediate_size;
    per = wsync__gen_per_layer(m);
    if (i == 0) {
        snprintf(o->name, sizeof o->name, "model.embed_tokens.weight");
        wsync__gen_set(o, WSYNC_GEN_KIND_EMBEDDING, m->vocab_size, h);
        o->sparse_rows = !m->tied;
        return WSYNC_OK;
    }
    if (i == 1 + per * m->num_layers) {
        snprintf(o->name, sizeof o->name, "model.norm.weight");
        wsync__gen_set(o, WSYNC_GEN_KIND_NORM, h, 0);
        return WSYNC_OK;
    }
    if (i == 2 + per * m->num_layers) {
        snprintf(o->name, sizeof o->name, "lm_head.weight");
        wsync__gen_set(o, WSYNC_GEN_KIND_MATRIX, m->vocab_size, h);
        return WSYNC_OK;
    }
    layer = (i - 1) / per;
    k = (i - 1) % per;
    for (slot = 0; slot < WSYNC_GEN__NSLOTS; slot++) {
        if (!wsync__gen_slot_present(m, slot)) continue;
        if (k-- == 0) break;
    }
#define WSYNC_GEN__NAME(s) snprintf(o->name, sizeof o->name, "model.layers.%lu.%s", (unsigned long)layer, s)
    switch (slot) {
    case WSYNC_GEN__Q: WSYNC_GEN__NAME("self_attn.q_proj.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_MATRIX, q, h); break;
    case WSYNC_GEN__QB: WSYNC_GEN__NAME("self_attn.q_proj.bias"); wsync__gen_set(o, WSYNC_GEN_KIND_BIAS, q, 0); break;
    case WSYNC_GEN__K: WSYNC_GEN__NAME("self_attn.k_proj.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_MATRIX, kv, h); break;
    case WSYNC_GEN__KB: WSYNC_GEN__NAME("self_attn.k_proj.bias"); wsync__gen_set(o, WSYNC_GEN_KIND_BIAS, kv, 0); break;
    case WSYNC_GEN__V: WSYNC_GEN__NAME("self_attn.v_proj.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_MATRIX, kv, h); break;
    case WSYNC_GEN__VB: WSYNC_GEN__NAME("self_attn.v_proj.bias"); wsync__gen_set(o, WSYNC_GEN_KIND_BIAS, kv, 0); break;
    case WSYNC_GEN__O: WSYNC_GEN__NAME("self_attn.o_proj.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_MATRIX, h, q); break;
    case WSYNC_GEN__QN: WSYNC_GEN__NAME("self_attn.q_norm.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_NORM, m->head_dim, 0); break;
    case WSYNC_GEN__KN: WSYNC_GEN__NAME("self_attn.k_norm.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_NORM, m->head_dim, 0); break;
    case WSYNC_GEN__GATE: WSYNC_GEN__NAME("mlp.gate_proj.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_MATRIX, in, h); break;
    case WSYNC_GEN__UP: WSYNC_GEN__NAME("mlp.up_proj.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_MATRIX, in, h); break;
    case WSYNC_GEN__DOWN: WSYNC_GEN__NAME("mlp.down_proj.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_MATRIX, h, in); break;
    case WSYNC_GEN__LN1: WSYNC_GEN__NAME("input_layernorm.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_NORM, h, 0); break;
    default: WSYNC_GEN__NAME("post_attention_layernorm.weight"); wsync__gen_set(o, WSYNC_GEN_KIND_NORM, h, 0); break;
    }
#undef WSYNC_GEN__NAME
    return WSYNC_OK;
}

WSYNC_GEN_DEF wsync_result wsync_gen_model_finish(wsync_gen_model *m)
{
    const uint64_t dim_max = (uint64_t)1 << 31, lim = (uint64_t)1 << 40;
    size_t i;
    uint64_t total = 0;
    if (!m) return WSYNC_ERR_INVALID_ARGUMENT;
    /* every dimension below 2^31 (so products of two cannot overflow), every
       tensor below 2^40 elements */
    if (m->vocab_size == 0 || m->hidden_size == 0 || m->num_layers == 0 ||
        m->intermediate_size == 0 || m->num_heads == 0 || m->num_kv_heads == 0 ||
        m->head_dim == 0 || m->vocab_size > dim_max || m->hidden_size > dim_max ||
        m->num_layers > 100000 || m->intermediate_size > dim_max || m->num_heads > dim_max ||
        m->num_kv_heads > dim_max || m->head_dim > dim_max ||
        m->num_heads * m->head_dim > dim_max || m->num_kv_heads * m->head_dim > dim_max)
        return WSYNC_ERR_INVALID_ARGUMENT;
    m->n_tensors = 2 + (size_t)m->num_layers * wsync__gen_per_layer(m) + (m->tied ? 0 : 1);
    for (i = 0; i < m->n_tensors; i++) {
        wsync_gen_tensor_info ti;
        wsync_gen_model_tensor(m, i, &ti);
        if (ti.nelem > lim) return WSYNC_ERR_OVERFLOW;
        total += ti.nelem;
    }
    m->n_params = total;
    return WSYNC_OK;
}

WSYNC_GEN_DEF wsync_result wsync_gen_model_lookup(const char *name, wsync_gen_model *out)
{
    size_t i;
    if (!name || !out) return WSYNC_ERR_INVALID_ARGUMENT;
    for (i = 0; i < WSYNC_GEN__N_MODELS; i++) {
        if (strcmp(name, wsync__gen_models[i].name) == 0) {
            *out = wsync__gen_models[i];
            return wsync_gen_model_finish(out);
        }
    }
    return WSYNC_ERR_NOT_FOUND;
}

WSYNC_GEN_DEF wsync_result wsync_gen_model_find(const wsync_gen_model *m, const char *name,
                                                size_t *index)
{
    size_t i;
    if (!m || !name) return WSYNC_ERR_INVALID_ARGUMENT;
    for (i = 0; i < m->n_tensors; i++) {
        wsync_gen_tensor_info ti;
        wsync_gen_model_tensor(m, i, &ti);
        if (strcmp(ti.name, name) == 0) {
            if (index) *index = i;
            return WSYNC_OK;
        }
    }
    return WSYNC_ERR_NOT_FOUND;
}

/* ---------------------------------------------------------------------
   Random numbers
   --------------------------------------------------------------------- */

#define WSYNC_GEN__GAMMA 0x9E3779B97F4A7C15ull

WSYNC_GEN_DEF uint64_t wsync_gen_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

WSYNC_GEN_DEF uint64_t wsync_gen_hash(uint64_t key, uint64_t i)
{
    return wsync_gen_mix64(key + (i + 1) * WSYNC_GEN__GAMMA);
}

/* Marsaglia and Tsang's ziggurat (2000), 128 layers, r = 3.442619855899;
   tables computed in double and rounded once, so every platform has the
   same values. */
static const uint32_t wsync__gen_zig_k[128] = {
    1991057938u, 0u, 1611602771u, 1826899878u, 1918584482u, 1969227037u,
    2001281515u, 2023368125u, 2039498179u, 2051788381u, 2061460127u, 2069267110u,
    2075699398u, 2081089314u, 2085670119u, 2089610331u, 2093034710u, 2096037586u,
    2098691595u, 2101053571u, 2103168620u, 2105072996u, 2106796166u, 2108362327u,
    2109791536u, 2111100552u, 2112303493u, 2113412330u, 2114437283u, 2115387130u,
    2116269447u, 2117090813u, 2117856962u, 2118572919u, 2119243101u, 2119871411u,
    2120461303u, 2121015852u, 2121537798u, 2122029592u, 2122493434u, 2122931299u,
    2123344971u, 2123736059u, 2124106020u, 2124456175u, 2124787725u, 2125101763u,
    2125399283u, 2125681194u, 2125948325u, 2126201433u, 2126441213u, 2126668298u,
    2126883268u, 2127086657u, 2127278949u, 2127460589u, 2127631985u, 2127793506u,
    2127945490u, 2128088244u, 2128222044u, 2128347141u, 2128463758u, 2128572095u,
    2128672327u, 2128764606u, 2128849065u, 2128925811u, 2128994934u, 2129056501u,
    2129110560u, 2129157136u, 2129196237u, 2129227847u, 2129251929u, 2129268426u,
    2129277255u, 2129278312u, 2129271467u, 2129256561u, 2129233410u, 2129201800u,
    2129161480u, 2129112170u, 2129053545u, 2128985244u, 2128906855u, 2128817916u,
    2128717911u, 2128606255u, 2128482298u, 2128345305u, 2128194452u, 2128028813u,
    2127847342u, 2127648860u, 2127432031u, 2127195339u, 2126937058u, 2126655214u,
    2126347546u, 2126011445u, 2125643893u, 2125241376u, 2124799783u, 2124314271u,
    2123779094u, 2123187386u, 2122530867u, 2121799464u, 2120980787u, 2120059418u,
    2119015917u, 2117825402u, 2116455471u, 2114863093u, 2112989789u, 2110753906u,
    2108037662u, 2104664315u, 2100355223u, 2094642347u, 2086670106u, 2074676188u,
    2054300022u, 2010539237u
};
static const float wsync__gen_zig_w[128] = {
    1.729040466e-09f, 1.268092853e-10f, 1.689751811e-10f, 1.986268788e-10f,
    2.223243117e-10f, 2.424493661e-10f, 2.601613092e-10f, 2.761198770e-10f,
    2.907396268e-10f, 3.042996966e-10f, 3.169979557e-10f, 3.289802042e-10f,
    3.403573812e-10f, 3.512160285e-10f, 3.616250910e-10f, 3.716405794e-10f,
    3.813085681e-10f, 3.906675816e-10f, 3.997501219e-10f, 4.085840000e-10f,
    4.171930856e-10f, 4.255982233e-10f, 4.338175930e-10f, 4.418672095e-10f,
    4.497613115e-10f, 4.575125834e-10f, 4.651324048e-10f, 4.726310454e-10f,
    4.800177478e-10f, 4.873009773e-10f, 4.944885057e-10f, 5.015873272e-10f,
    5.086040478e-10f, 5.155446070e-10f, 5.224146671e-10f, 5.292193350e-10f,
    5.359634958e-10f, 5.426517014e-10f, 5.492881705e-10f, 5.558769556e-10f,
    5.624218868e-10f, 5.689264615e-10f, 5.753941212e-10f, 5.818281967e-10f,
    5.882316856e-10f, 5.946076964e-10f, 6.009590048e-10f, 6.072883862e-10f,
    6.135985053e-10f, 6.198920266e-10f, 6.261713370e-10f, 6.324390456e-10f,
    6.386973728e-10f, 6.449488166e-10f, 6.511955974e-10f, 6.574400468e-10f,
    6.636843297e-10f, 6.699307220e-10f, 6.761814442e-10f, 6.824387166e-10f,
    6.887046489e-10f, 6.949815168e-10f, 7.012714853e-10f, 7.075767749e-10f,
    7.138996616e-10f, 7.202424213e-10f, 7.266072743e-10f, 7.329966079e-10f,
    7.394128088e-10f, 7.458582640e-10f, 7.523354717e-10f, 7.588469852e-10f,
    7.653954137e-10f, 7.719834771e-10f, 7.786139511e-10f, 7.852897221e-10f,
    7.920137879e-10f, 7.987892015e-10f, 8.056192380e-10f, 8.125072837e-10f,
    8.194568912e-10f, 8.264716689e-10f, 8.335555579e-10f, 8.407127217e-10f,
    8.479473235e-10f, 8.552640263e-10f, 8.626675485e-10f, 8.701631637e-10f,
    8.777562011e-10f, 8.854524336e-10f, 8.932581896e-10f, 9.011799640e-10f,
    9.092249731e-10f, 9.174008220e-10f, 9.257158373e-10f, 9.341788454e-10f,
    9.427997272e-10f, 9.515889188e-10f, 9.605578555e-10f, 9.697193049e-10f,
    9.790869226e-10f, 9.886760299e-10f, 9.985036131e-10f, 1.008588213e-09f,
    1.018950924e-09f, 1.029615060e-09f, 1.040606934e-09f, 1.051956633e-09f,
    1.063698019e-09f, 1.075870171e-09f, 1.088518276e-09f, 1.101694735e-09f,
    1.115461057e-09f, 1.129890181e-09f, 1.145069595e-09f, 1.161105212e-09f,
    1.178127595e-09f, 1.196299504e-09f, 1.215828660e-09f, 1.236985625e-09f,
    1.260132332e-09f, 1.285769713e-09f, 1.314620190e-09f, 1.347783996e-09f,
    1.387063575e-09f, 1.435740304e-09f, 1.500865876e-09f, 1.603094768e-09f
};
static const float wsync__gen_zig_f[128] = {
    1.000000000e+00f, 9.635996819e-01f, 9.362826943e-01f, 9.130436182e-01f,
    8.922816515e-01f, 8.732430339e-01f, 8.555005789e-01f, 8.387836218e-01f,
    8.229072094e-01f, 8.077383041e-01f, 7.931770086e-01f, 7.791460752e-01f,
    7.655841708e-01f, 7.524415851e-01f, 7.396772504e-01f, 7.272568941e-01f,
    7.151514888e-01f, 7.033361197e-01f, 6.917891502e-01f, 6.804918647e-01f,
    6.694276929e-01f, 6.585819721e-01f, 6.479418278e-01f, 6.374954581e-01f,
    6.272324920e-01f, 6.171433926e-01f, 6.072195172e-01f, 5.974531770e-01f,
    5.878370404e-01f, 5.783646703e-01f, 5.690299869e-01f, 5.598273873e-01f,
    5.507518053e-01f, 5.417983532e-01f, 5.329626799e-01f, 5.242405534e-01f,
    5.156282187e-01f, 5.071220398e-01f, 4.987186491e-01f, 4.904148281e-01f,
    4.822076559e-01f, 4.740943015e-01f, 4.660721421e-01f, 4.581387043e-01f,
    4.502916336e-01f, 4.425287247e-01f, 4.348478317e-01f, 4.272469878e-01f,
    4.197243452e-01f, 4.122780263e-01f, 4.049064219e-01f, 3.976078629e-01f,
    3.903807998e-01f, 3.832238019e-01f, 3.761354685e-01f, 3.691144586e-01f,
    3.621594906e-01f, 3.552693725e-01f, 3.484429717e-01f, 3.416791558e-01f,
    3.349768519e-01f, 3.283351064e-01f, 3.217529058e-01f, 3.152293861e-01f,
    3.087636232e-01f, 3.023548424e-01f, 2.960021496e-01f, 2.897048593e-01f,
    2.834621966e-01f, 2.772735059e-01f, 2.711380720e-01f, 2.650552988e-01f,
    2.590245605e-01f, 2.530452907e-01f, 2.471169531e-01f, 2.412389964e-01f,
    2.354109436e-01f, 2.296323180e-01f, 2.239027023e-01f, 2.182216495e-01f,
    2.125887722e-01f, 2.070037127e-01f, 2.014661133e-01f, 1.959756464e-01f,
    1.905320436e-01f, 1.851349920e-01f, 1.797842681e-01f, 1.744796336e-01f,
    1.692208946e-01f, 1.640078574e-01f, 1.588403732e-01f, 1.537183076e-01f,
    1.486415714e-01f, 1.436100751e-01f, 1.386237741e-01f, 1.336826533e-01f,
    1.287867129e-01f, 1.239359826e-01f, 1.191305444e-01f, 1.143705100e-01f,
    1.096560210e-01f, 1.049872562e-01f, 1.003644392e-01f, 9.578784555e-02f,
    9.125780314e-02f, 8.677466959e-02f, 8.233889937e-02f, 7.795098424e-02f,
    7.361150533e-02f, 6.932111830e-02f, 6.508058310e-02f, 6.089077145e-02f,
    5.675266311e-02f, 5.266740173e-02f, 4.863629490e-02f, 4.466086254e-02f,
    4.074286669e-02f, 3.688438982e-02f, 3.308788687e-02f, 2.935631759e-02f,
    2.569329180e-02f, 2.210330404e-02f, 1.859210245e-02f, 1.516729780e-02f,
    1.183947828e-02f, 8.624484763e-03f, 5.548994988e-03f, 2.669629175e-03f
};
#define WSYNC_GEN__ZIG_R 3.442619855899f

static float wsync__gen_uniform_bits(uint64_t u)
{
    return ((float)(uint32_t)(u >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

/* The ziggurat's slow path: the wedges and the tail (about 1.2% of calls). */
static float wsync__gen_normal_slow(uint64_t u)
{
    WSYNC_GEN__NO_FMA
    uint64_t s = u;
    for (;;) {
        uint32_t iz = (uint32_t)(u & 127u);
        int32_t hz = (int32_t)(uint32_t)(u >> 32);
        uint32_t ahz = hz < 0 ? (uint32_t)0 - (uint32_t)hz : (uint32_t)hz;
        float x = (float)hz * wsync__gen_zig_w[iz];
        if (ahz < wsync__gen_zig_k[iz]) return x;
        if (iz == 0) { /* the tail beyond r */
            float y;
            do {
                s += WSYNC_GEN__GAMMA;
                x = -logf(wsync__gen_uniform_bits(wsync_gen_mix64(s))) * (1.0f / WSYNC_GEN__ZIG_R);
                s += WSYNC_GEN__GAMMA;
                y = -logf(wsync__gen_uniform_bits(wsync_gen_mix64(s)));
            } while (y + y < x * x);
            return hz > 0 ? WSYNC_GEN__ZIG_R + x : -WSYNC_GEN__ZIG_R - x;
        }
        s += WSYNC_GEN__GAMMA;
        if (wsync__gen_zig_f[iz] + wsync__gen_uniform_bits(wsync_gen_mix64(s)) *
                                       (wsync__gen_zig_f[iz - 1] - wsync__gen_zig_f[iz]) <
            expf(-0.5f * x * x))
            return x;
        s += WSYNC_GEN__GAMMA;
        u = wsync_gen_mix64(s);
    }
}

/* The fast path, small enough to inline into the element loops: the layer
   index from the low 7 bits, a signed 32-bit value from the high half. */
static float wsync__gen_normal(uint64_t u)
{
    WSYNC_GEN__NO_FMA
    uint32_t iz = (uint32_t)(u & 127u);
    int32_t hz = (int32_t)(uint32_t)(u >> 32);
    uint32_t ahz = hz < 0 ? (uint32_t)0 - (uint32_t)hz : (uint32_t)hz;
    if (ahz < wsync__gen_zig_k[iz]) return (float)hz * wsync__gen_zig_w[iz];
    return wsync__gen_normal_slow(u);
}

/* splitmix64 at position i of stream `key`, inlinable */
static uint64_t wsync__gen_hash(uint64_t key, uint64_t i)
{
    uint64_t z = key + (i + 1) * WSYNC_GEN__GAMMA;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

WSYNC_GEN_DEF float wsync_gen_normal_bits(uint64_t u)
{
    return wsync__gen_normal(u);
}

static uint64_t wsync__gen_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

WSYNC_GEN_DEF void wsync_gen_rng_seed(wsync_gen_rng *r, uint64_t seed)
{
    int i;
    for (i = 0; i < 4; i++) r->s[i] = wsync_gen_hash(seed, (uint64_t)i);
}

WSYNC_GEN_DEF uint64_t wsync_gen_rng_next(wsync_gen_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = wsync__gen_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = wsync__gen_rotl(s[3], 45);
    return result;
}

WSYNC_GEN_DEF float wsync_gen_rng_uniform(wsync_gen_rng *r)
{
    return wsync__gen_uniform_bits(wsync_gen_rng_next(r));
}

WSYNC_GEN_DEF float wsync_gen_rng_normal(wsync_gen_rng *r)
{
    return wsync_gen_normal_bits(wsync_gen_rng_next(r));
}

/* ---------------------------------------------------------------------
   Streams: every random quantity is hash(key(seed, tensor, purpose, step), i)
   --------------------------------------------------------------------- */

enum {
    WSYNC_GEN__S_TENSOR = 1, /* per-tensor constants */
    WSYNC_GEN__S_INIT,       /* initial weight, per element */
    WSYNC_GEN__S_ROWSCALE,   /* initial per-row scale */
    WSYNC_GEN__S_OUTLIER,    /* initial outliers, per element */
    WSYNC_GEN__S_PERSIST,    /* persistent gradient direction p, per element */
    WSYNC_GEN__S_NOISE,      /* fresh gradient noise z_t, per element and step */
    WSYNC_GEN__S_ROWS        /* embedding rows in the batch, per row and step */
};

static uint64_t wsync__gen_key(uint64_t tensor_key, unsigned purpose, uint64_t step)
{
    return wsync_gen_mix64(tensor_key ^ wsync_gen_mix64(((uint64_t)purpose << 56) ^ step ^
                                                        0x5D1F3A8C2B4E6F70ull));
}

WSYNC_GEN_DEF void wsync_gen_config_default(wsync_gen_config *c)
{
    memset(c, 0, sizeof *c);
    c->seed = 1;
    c->mode = WSYNC_GEN_ADAMW;
    c->lr = 1e-6;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = 0.01;
    c->signal = 0.8;
    c->grad_scale = 1e-5;
    c->init_median = 0.02;
    c->embed_batch_tokens = 65536;
    c->warm_start = 0;
    c->threads = 1;
}

WSYNC_GEN_DEF uint64_t wsync_gen_state_bytes(wsync_gen_mode mode, uint64_t count)
{
    return count * (mode == WSYNC_GEN_LIGHT ? 4u : 12u);
}

static void *wsync__gen_alloc(const wsync_allocator *a, size_t n)
{
    if (a->alloc) return a->alloc(a->user, n);
    return malloc(n);
}

static void wsync__gen_free(const wsync_allocator *a, void *p)
{
    if (!p) return;
    if (a->free) a->free(a->user, p);
    else free(p);
}

/* ---------------------------------------------------------------------
   The element kernels. They run on [lo, hi) of a slice (slice-relative
   indices); everything depends on the global element index only.
   --------------------------------------------------------------------- */

#define WSYNC_GEN__OP_INIT 0
#define WSYNC_GEN__OP_STEP 1

/* Per-step constants of one slice. */
typedef struct wsync__gen_job {
    wsync_gen_tensor *t;
    uint16_t *out;
    int op;
    uint64_t k_init, k_rowscale, k_outlier, k_persist, k_noise, k_noise0, k_rows;
    float sigma_m;     /* steady-state noise of Adam's m, for LIGHT and warm start */
    float step_size;   /* lr / (1 - beta1^t) */
    float inv_bc2;     /* 1 / sqrt(1 - beta2^t) */
    float decay;       /* 1 - lr * wd (or 1) */
} wsync__gen_job;

/* Probability that token id `row` occurs in a batch of B tokens under the
   Zipf law f(r) = 1 / ((r + 10) H). */
static float wsync__gen_row_prob(const wsync_gen_tensor *t, uint64_t row)
{
    double f = 1.0 / (((double)row + 10.0) * t->zipf_h);
    return (float)(1.0 - exp(-t->cfg.embed_batch_tokens * f));
}

static int wsync__gen_row_active(const wsync__gen_job *j, uint64_t row)
{
    const wsync_gen_tensor *t = j->t;
    if (!t->info.sparse_rows || t->cfg.embed_batch_tokens <= 0) return 1;
    return wsync__gen_uniform_bits(wsync__gen_hash(j->k_rows, row)) < wsync__gen_row_prob(t, row);
}

static void wsync__gen_run_init(const wsync__gen_job *j, uint64_t lo, uint64_t hi)
{
    WSYNC_GEN__NO_FMA
    wsync_gen_tensor *t = j->t;
    const wsync_gen_config *c = &t->cfg;
    uint64_t i, e = t->begin + lo;
    uint64_t row = e / t->cols, col = e % t->cols;
    float rs = 1.0f;
    int kind = (int)t->info.kind;
    float sigma = (float)(c->init_median / 0.6744897501960817);
    if (kind == WSYNC_GEN_KIND_MATRIX || kind == WSYNC_GEN_KIND_EMBEDDING)
        rs = expf(0.2f * wsync__gen_normal(wsync__gen_hash(j->k_rowscale, row)));
    for (i = lo; i < hi; i++, e++) {
        float z = wsync__gen_normal(wsync__gen_hash(j->k_init, e));
        uint64_t o = wsync__gen_hash(j->k_outlier, e);
        float w;
        if (kind == WSYNC_GEN_KIND_NORM) {
            w = 1.0f + 0.05f * z;
            if ((o >> 54) == 0) w *= 2.0f; /* 1 in 1024: a larger gain */
        } else if (kind == WSYNC_GEN_KIND_BIAS) {
            w = 0.01f * z;
            if ((o >> 57) == 0) w *= 8.0f; /* 1 in 128 */
        } else {
            w = sigma * rs * z;
            /* 1 in 1024 elements: an outlier 3-8x larger */
            if ((o >> 54) == 0) w *= 3.0f + 5.0f * wsync__gen_uniform_bits(o << 10);
        }
        t->master[i] = w;
        if (t->m) {
            if (c->warm_start) {
                float p = t->signal * wsync__gen_normal(wsync__gen_hash(j->k_persist, e));
                float z0 = wsync__gen_normal(wsync__gen_hash(j->k_noise0, e));
                t->m[i] = t->grad_scale * (p + j->sigma_m * z0);
                t->v[i] = t->grad_scale * t->grad_scale * (p * p + 1.0f);
            } else {
                t->m[i] = 0.0f;
                t->v[i] = 0.0f;
            }
        }
        if (++col == t->cols) {
            col = 0;
            row++;
            if (kind == WSYNC_GEN_KIND_MATRIX || kind == WSYNC_GEN_KIND_EMBEDDING)
                rs = expf(0.2f * wsync__gen_normal(wsync__gen_hash(j->k_rowscale, row)));
        }
    }
}

static void wsync__gen_run_step(const wsync__gen_job *j, uint64_t lo, uint64_t hi)
{
    WSYNC_GEN__NO_FMA
    wsync_gen_tensor *t = j->t;
    const float a = t->signal, s = t->grad_scale;
    const float b1 = (float)t->cfg.beta1, b2 = (float)t->cfg.beta2, eps = (float)t->cfg.eps;
    const float omb1 = (float)(1.0 - t->cfg.beta1), omb2 = (float)(1.0 - t->cfg.beta2);
    const float lr = (float)t->cfg.lr, sm = j->sigma_m, decay = j->decay;
    const float step_size = j->step_size, inv_bc2 = j->inv_bc2;
    float *w = t->master, *m = t->m, *v = t->v;
    uint64_t i, e = t->begin + lo;
    uint64_t row = e / t->cols, col = e % t->cols;
    int active = wsync__gen_row_active(j, row);
    for (i = lo; i < hi; i++, e++) {
        float p = a * wsync__gen_normal(wsync__gen_hash(j->k_persist, e));
        float z = wsync__gen_normal(wsync__gen_hash(j->k_noise, e));
        if (m) {
            float g = active ? s * (p + z) : 0.0f;
            float mi = b1 * m[i] + omb1 * g;
            float vi = b2 * v[i] + omb2 * g * g;
            m[i] = mi;
            v[i] = vi;
            w[i] = w[i] * decay - step_size * mi / (sqrtf(vi) * inv_bc2 + eps);
        } else if (active) {
            w[i] = w[i] * decay - lr * (p + sm * z) / sqrtf(p * p + 1.0f);
        } else {
            w[i] = w[i] * decay;
        }
        if (++col == t->cols) {
            col = 0;
            row++;
            active = wsync__gen_row_active(j, row);
        }
    }
}

static void wsync__gen_run(const wsync__gen_job *j, uint64_t lo, uint64_t hi)
{
    if (j->op == WSYNC_GEN__OP_INIT) wsync__gen_run_init(j, lo, hi);
    else if (j->op == WSYNC_GEN__OP_STEP) wsync__gen_run_step(j, lo, hi);
    if (j->out) wsync_f32_to_bf16_n(j->t->master + lo, j->out + lo, (size_t)(hi - lo));
}

/* Fills a job for slice t; for OP_STEP, advances t->step first. */
static void wsync__gen_prepare(wsync__gen_job *j, wsync_gen_tensor *t, uint16_t *out, int op)
{
    const wsync_gen_config *c = &t->cfg;
    int decays = t->info.kind == WSYNC_GEN_KIND_MATRIX || t->info.kind == WSYNC_GEN_KIND_EMBEDDING;
    memset(j, 0, sizeof *j);
    j->t = t;
    j->out = out;
    j->op = op;
    if (op == WSYNC_GEN__OP_STEP) t->step++;
    j->k_init = wsync__gen_key(t->key, WSYNC_GEN__S_INIT, 0);
    j->k_rowscale = wsync__gen_key(t->key, WSYNC_GEN__S_ROWSCALE, 0);
    j->k_outlier = wsync__gen_key(t->key, WSYNC_GEN__S_OUTLIER, 0);
    j->k_persist = wsync__gen_key(t->key, WSYNC_GEN__S_PERSIST, 0);
    j->k_noise0 = wsync__gen_key(t->key, WSYNC_GEN__S_NOISE, 0);
    j->k_noise = wsync__gen_key(t->key, WSYNC_GEN__S_NOISE, t->step);
    j->k_rows = wsync__gen_key(t->key, WSYNC_GEN__S_ROWS, t->step);
    j->sigma_m = (float)sqrt((1.0 - c->beta1) / (1.0 + c->beta1));
    if (c->mode == WSYNC_GEN_ADAMW && !c->warm_start && t->step > 0) {
        j->step_size = (float)(c->lr / (1.0 - pow(c->beta1, (double)t->step)));
        j->inv_bc2 = (float)(1.0 / sqrt(1.0 - pow(c->beta2, (double)t->step)));
    } else {
        j->step_size = (float)c->lr;
        j->inv_bc2 = 1.0f;
    }
    j->decay = decays ? (float)(1.0 - c->lr * c->weight_decay) : 1.0f;
}

/* ---------------------------------------------------------------------
   Running jobs: blocks of 2^18 elements, on the caller's thread or a pool
   --------------------------------------------------------------------- */

#define WSYNC_GEN__BLOCK ((uint64_t)1 << 18)

typedef struct wsync__gen_pool {
    const wsync__gen_job *jobs;
    size_t n_jobs;
    size_t job;      /* cursor: next block is jobs[job] from offset `at` */
    uint64_t at;
#if WSYNC_GEN__THREADS
    pthread_mutex_t mu;
#endif
} wsync__gen_pool;

/* Next block, or 0 when done. The caller holds the lock when threaded. */
static int wsync__gen_take(wsync__gen_pool *p, size_t *job, uint64_t *lo, uint64_t *hi)
{
    while (p->job < p->n_jobs && p->at >= p->jobs[p->job].t->count) {
        p->job++;
        p->at = 0;
    }
    if (p->job >= p->n_jobs) return 0;
    *job = p->job;
    *lo = p->at;
    *hi = p->at + WSYNC_GEN__BLOCK < p->jobs[p->job].t->count ? p->at + WSYNC_GEN__BLOCK
                                                              : p->jobs[p->job].t->count;
    p->at = *hi;
    return 1;
}

#if WSYNC_GEN__THREADS
static void *wsync__gen_worker(void *arg)
{
    wsync__gen_pool *p = (wsync__gen_pool *)arg;
    for (;;) {
        size_t job;
        uint64_t lo, hi;
        int got;
        pthread_mutex_lock(&p->mu);
        got = wsync__gen_take(p, &job, &lo, &hi);
        pthread_mutex_unlock(&p->mu);
        if (!got) return NULL;
        wsync__gen_run(&p->jobs[job], lo, hi);
    }
}
#endif

static void wsync__gen_execute(const wsync__gen_job *jobs, size_t n_jobs, unsigned threads)
{
    wsync__gen_pool p;
    size_t job;
    uint64_t lo, hi;
    memset(&p, 0, sizeof p);
    p.jobs = jobs;
    p.n_jobs = n_jobs;
#if WSYNC_GEN__THREADS
    uint64_t blocks = 0;
    for (job = 0; job < n_jobs; job++)
        blocks += (jobs[job].t->count + WSYNC_GEN__BLOCK - 1) / WSYNC_GEN__BLOCK;
    if (threads > 64) threads = 64;
    if (blocks < threads) threads = (unsigned)blocks; /* no thread without a block */
    if (threads > 1) {
        pthread_t tid[64];
        unsigned n = threads, k, started = 0;
        if (pthread_mutex_init(&p.mu, NULL) == 0) {
            for (k = 1; k < n; k++) {
                if (pthread_create(&tid[started], NULL, wsync__gen_worker, &p) != 0) break;
                started++;
            }
            wsync__gen_worker(&p); /* the caller works too */
            for (k = 0; k < started; k++) pthread_join(tid[k], NULL);
            pthread_mutex_destroy(&p.mu);
            return;
        }
    }
#else
    (void)threads;
#endif
    while (wsync__gen_take(&p, &job, &lo, &hi)) wsync__gen_run(&jobs[job], lo, hi);
}

/* ---------------------------------------------------------------------
   Tensors
   --------------------------------------------------------------------- */

static wsync_result wsync__gen_tensor_setup(wsync_gen_tensor *t, const wsync_gen_model *m,
                                            size_t index, uint64_t begin, uint64_t count,
                                            const wsync_gen_config *cfg)
{
    wsync_gen_config def;
    size_t bytes, n;
    uint64_t tk;
    wsync_result r;
    memset(t, 0, sizeof *t);
    if (!m) return WSYNC_ERR_INVALID_ARGUMENT;
    if (!cfg) {
        wsync_gen_config_default(&def);
        cfg = &def;
    }
    if ((cfg->mode != WSYNC_GEN_ADAMW && cfg->mode != WSYNC_GEN_LIGHT) || !(cfg->lr >= 0) ||
        !(cfg->lr < 1) || !(cfg->beta1 >= 0) || !(cfg->beta1 < 1) || !(cfg->beta2 >= 0) ||
        !(cfg->beta2 < 1) || !(cfg->eps >= 0) || !(cfg->eps < 1) || !(cfg->weight_decay >= 0) ||
        !(cfg->weight_decay < 1e6) || !(cfg->signal >= 0) || !(cfg->signal < 1e6) ||
        !(cfg->grad_scale > 0) || !(cfg->grad_scale < 1e6) || !(cfg->init_median > 0) ||
        !(cfg->init_median < 1e6) || !(cfg->embed_batch_tokens >= 0) ||
        !(cfg->embed_batch_tokens < 1e18) || (!cfg->allocator.alloc != !cfg->allocator.free))
        return WSYNC_ERR_INVALID_ARGUMENT;
    r = wsync_gen_model_tensor(m, index, &t->info);
    if (r != WSYNC_OK) return r;
    if (begin > t->info.nelem) return WSYNC_ERR_INVALID_ARGUMENT;
    if (count == 0) count = t->info.nelem - begin;
    if (count > t->info.nelem - begin) return WSYNC_ERR_INVALID_ARGUMENT;
    t->cfg = *cfg;
    t->begin = begin;
    t->count = count;
    t->cols = t->info.rank == 2 ? t->info.shape[1] : t->info.nelem;
    t->rows = t->info.rank == 2 ? t->info.shape[0] : 1;
    t->zipf_h = log(((double)t->rows + 10.0) / 10.0) + 1.0 / 20.0; /* ~sum 1/(r+10) */
    t->key = wsync_gen_mix64(wsync_gen_mix64(cfg->seed ^ 0x77736E63ull) ^ (uint64_t)index);
    /* per-tensor gradient scale and signal-to-noise: log-normal around the medians */
    tk = wsync__gen_key(t->key, WSYNC_GEN__S_TENSOR, 0);
    t->grad_scale = (float)(cfg->grad_scale * exp(0.5 * wsync__gen_normal(wsync__gen_hash(tk, 0))));
    t->signal = (float)(cfg->signal * exp(0.3 * wsync__gen_normal(wsync__gen_hash(tk, 1))));
    n = cfg->mode == WSYNC_GEN_LIGHT ? 1 : 3;
    if (count > (uint64_t)(size_t)-1 || !wsync_mul_size((size_t)count, 4 * n, &bytes))
        return WSYNC_ERR_OVERFLOW;
    t->master = (float *)wsync__gen_alloc(&t->cfg.allocator, bytes ? bytes : 1);
    if (!t->master) {
        memset(t, 0, sizeof *t);
        return WSYNC_ERR_OUT_OF_MEMORY;
    }
    if (n == 3) {
        t->m = t->master + count;
        t->v = t->m + count;
    }
    return WSYNC_OK;
}

WSYNC_GEN_DEF wsync_result wsync_gen_tensor_init(wsync_gen_tensor *t, const wsync_gen_model *m,
                                                 size_t index, uint64_t begin, uint64_t count,
                                                 const wsync_gen_config *cfg, uint16_t *bf16)
{
    wsync__gen_job j;
    wsync_result r;
    if (!t) return WSYNC_ERR_INVALID_ARGUMENT;
    r = wsync__gen_tensor_setup(t, m, index, begin, count, cfg);
    if (r != WSYNC_OK) return r;
    wsync__gen_prepare(&j, t, bf16, WSYNC_GEN__OP_INIT);
    wsync__gen_execute(&j, 1, t->cfg.threads);
    return WSYNC_OK;
}

WSYNC_GEN_DEF void wsync_gen_tensor_step(wsync_gen_tensor *t, uint16_t *bf16)
{
    wsync__gen_job j;
    wsync__gen_prepare(&j, t, bf16, WSYNC_GEN__OP_STEP);
    wsync__gen_execute(&j, 1, t->cfg.threads);
}

WSYNC_GEN_DEF void wsync_gen_tensor_image(const wsync_gen_tensor *t, uint16_t *bf16)
{
    wsync_f32_to_bf16_n(t->master, bf16, (size_t)t->count);
}

WSYNC_GEN_DEF void wsync_gen_tensor_free(wsync_gen_tensor *t)
{
    if (!t) return;
    wsync__gen_free(&t->cfg.allocator, t->master);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------------
   The whole model
   --------------------------------------------------------------------- */

WSYNC_GEN_DEF void wsync_gen_free(wsync_gen *g)
{
    size_t i;
    wsync_allocator a;
    if (!g) return;
    a = g->cfg.allocator;
    if (g->tensors) {
        for (i = 0; i < g->model.n_tensors; i++) wsync_gen_tensor_free(&g->tensors[i]);
    }
    if (g->bf16) {
        for (i = 0; i < g->model.n_tensors; i++) wsync__gen_free(&a, g->bf16[i]);
    }
    wsync__gen_free(&a, g->tensors);
    wsync__gen_free(&a, g->bf16);
    memset(g, 0, sizeof *g);
}

static wsync_result wsync__gen_all(wsync_gen *g, int op)
{
    size_t i, n = g->model.n_tensors;
    wsync__gen_job *jobs = (wsync__gen_job *)wsync__gen_alloc(&g->cfg.allocator, n * sizeof *jobs);
    if (!jobs) return WSYNC_ERR_OUT_OF_MEMORY;
    for (i = 0; i < n; i++) wsync__gen_prepare(&jobs[i], &g->tensors[i], g->bf16[i], op);
    wsync__gen_execute(jobs, n, g->cfg.threads);
    wsync__gen_free(&g->cfg.allocator, jobs);
    return WSYNC_OK;
}

WSYNC_GEN_DEF wsync_result wsync_gen_init(wsync_gen *g, const wsync_gen_model *m,
                                          const wsync_gen_config *cfg)
{
    size_t i, n;
    wsync_result r;
    if (!g || !m) return WSYNC_ERR_INVALID_ARGUMENT;
    memset(g, 0, sizeof *g);
    g->model = *m;
    if (cfg) g->cfg = *cfg;
    else wsync_gen_config_default(&g->cfg);
    n = m->n_tensors;
    if (n == 0) return WSYNC_ERR_INVALID_ARGUMENT;
    g->tensors = (wsync_gen_tensor *)wsync__gen_alloc(&g->cfg.allocator, n * sizeof *g->tensors);
    g->bf16 = (uint16_t **)wsync__gen_alloc(&g->cfg.allocator, n * sizeof *g->bf16);
    if (!g->tensors || !g->bf16) {
        wsync_gen_free(g);
        return WSYNC_ERR_OUT_OF_MEMORY;
    }
    memset(g->tensors, 0, n * sizeof *g->tensors);
    memset(g->bf16, 0, n * sizeof *g->bf16);
    for (i = 0; i < n; i++) {
        r = wsync__gen_tensor_setup(&g->tensors[i], m, i, 0, 0, &g->cfg);
        if (r == WSYNC_OK) {
            size_t bytes;
            if (!wsync_mul_size((size_t)g->tensors[i].count, 2, &bytes)) r = WSYNC_ERR_OVERFLOW;
            else if (!(g->bf16[i] = (uint16_t *)wsync__gen_alloc(&g->cfg.allocator, bytes)))
                r = WSYNC_ERR_OUT_OF_MEMORY;
        }
        if (r != WSYNC_OK) {
            wsync_gen_free(g);
            return r;
        }
    }
    r = wsync__gen_all(g, WSYNC_GEN__OP_INIT);
    if (r != WSYNC_OK) wsync_gen_free(g);
    return r;
}

WSYNC_GEN_DEF void wsync_gen_step(wsync_gen *g)
{
    if (wsync__gen_all(g, WSYNC_GEN__OP_STEP) != WSYNC_OK) {
        /* no memory for the job list: one tensor at a time */
        size_t i;
        for (i = 0; i < g->model.n_tensors; i++) wsync_gen_tensor_step(&g->tensors[i], g->bf16[i]);
    }
    g->step++;
}

WSYNC_GEN_DEF wsync_result wsync_gen_write(const wsync_gen *g, wsync_sink_fn sink, void *user,
                                           wsync_error *err)
{
    size_t i, n;
    wsync_st_tensor_desc *d;
    wsync_st_kv meta[2];
    char step[32];
    wsync_result r;
    if (!g || !sink) return WSYNC_ERR_INVALID_ARGUMENT;
    n = g->model.n_tensors;
    d = (wsync_st_tensor_desc *)wsync__gen_alloc(&g->cfg.allocator, n * sizeof *d);
    if (!d) return WSYNC_ERR_OUT_OF_MEMORY;
    memset(d, 0, n * sizeof *d);
    for (i = 0; i < n; i++) {
        const wsync_gen_tensor_info *ti = &g->tensors[i].info;
        d[i].name = ti->name;
        d[i].dtype = WSYNC_DTYPE_BF16;
        d[i].rank = ti->rank;
        d[i].shape = ti->shape;
        d[i].data = g->bf16[i];
        d[i].nbytes = ti->nelem * 2;
    }
    snprintf(step, sizeof step, "%llu", (unsigned long long)g->step);
    memset(meta, 0, sizeof meta);
    meta[0].key = "model";
    meta[0].value = g->model.name ? g->model.name : "custom";
    meta[1].key = "step";
    meta[1].value = step;
    r = wsync_st_write(d, n, meta, 2, sink, user, NULL, err);
    wsync__gen_free(&g->cfg.allocator, d);
    return r;
}

/* ---------------------------------------------------------------------
   Statistics
   --------------------------------------------------------------------- */

WSYNC_GEN_DEF uint16_t wsync_gen_bf16_ordered(uint16_t h)
{
    return (uint16_t)((h & 0x8000u) ? (0xFFFFu ^ h) : (h | 0x8000u));
}

WSYNC_GEN_DEF void wsync_gen_stats_add(wsync_gen_stats *s, const uint16_t *base,
                                       const uint16_t *next, size_t n)
{
    size_t i;
    s->total += n;
    for (i = 0; i < n; i++) {
        unsigned e = (base[i] >> 7) & 0xFFu;
        s->exp_total[e]++;
        if (base[i] != next[i]) {
            int d = (int)wsync_gen_bf16_ordered(next[i]) - (int)wsync_gen_bf16_ordered(base[i]);
            if (d < 0) d = -d;
            s->changed++;
            s->exp_changed[e]++;
            if (d == 1) s->step1++;
            else if (d == 2) s->step2++;
            else s->step_more++;
        }
    }
}

#ifdef WSYNC_GEN__GCC_OPTIONS
#pragma GCC pop_options
#endif
#endif /* WSYNC_GEN__IMPLEMENTED */
#endif /* WSYNC_GEN_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the wsync authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
*/
