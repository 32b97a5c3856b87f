/* Work in progress: the planner section of wsync_rdma.h (the static
   schedule of the direct path and its simulation), kept apart while other
   sections are written there; merged into wsync_rdma.h later. It needs
   wsync.h only: pure computation, no sockets, no threads, no global state.

PLANNER
=======
A weight update on the direct path is the same set of writes every step,
so it is planned once. Input (wsync_plan_input):

    sources  what trainers hold: every tensor as a rows x cols matrix (a
             vector is n x 1), bf16, row-sharded over the ranks of its mesh
             the way FSDP2 shards (torch.chunk: ceil(rows/count) rows per
             rank, the last ranks fewer or none);
    meshes   a range of trainer ranks, the mesh group it runs in (groups
             run one after another with a barrier between them: a mesh's
             collectives must not interleave with another's), and whether
             any rank of the mesh can reconstruct a whole tensor
             (gather = 1: the sender all-gathers the rows it needs first);
    units    what inference ranks need: one buffer assembled from 1..n
             source slices ("pieces", concatenated by rows, equal column
             counts: qkv_proj from q,k,v slices, w13 from gate and up) in a
             target dtype (bf16, or fp8 e4m3 with f32 scales per 128x128
             block of the assembled matrix), written identically to 1..n
             destinations (inference rank, region, byte offset; the scales
             to their own region and offset).

Output (wsync_plan): preparations and tasks. A preparation is what one
trainer rank does before sending (gather the pieces, fuse them, quantize),
producing one buffer: data then scales. A task is one write of (part of)
that buffer to one inference rank, on one NIC of each side. Tasks are
ordered per trainer rank (plan->tasks[rank_first[r] .. rank_first[r+1])),
mesh group first; a rank executes its tasks in that order per NIC.

How the planner chooses:
  - gather meshes: each unit's destinations are cut into chunks so that no
    chunk is a large part of a rank's share (a replicated tensor needed by
    128 ranks is prepared by several senders); chunks are taken largest
    first and each goes to the rank of the mesh whose bytes in this mesh
    group are fewest so far (ties: lower rank), which balances every group
    and so the whole;
  - row-shard meshes (gather = 0): a unit is cut at the holders' shard
    boundaries (for fp8 at 128-row block boundaries, where the first row's
    holder gathers the rest of the block) and each holder sends its rows;
    a column slice is strided in a row shard, so it is packed (GATHER);
  - NICs: each task takes, of the sender's K NICs and of the receiver's K
    NICs, the one with the fewest bytes in this group (then overall);
  - order: tasks into each receiver NIC are interleaved round-robin over
    sender NICs, the senders rotated per receiver (receiver d starts with
    sender d*S/D), which gives every task a virtual start time at its
    receiver; each sender sends in the order of those times, so at any
    moment the senders are spread over the receivers instead of queueing at
    the same one.
The result is a pure function of the input and options (no clocks, no
addresses, no hash order): wsync_plan_digest is equal run to run.

SIMULATOR
=========
wsync_plan_simulate replays a plan, not bytes over bandwidth: per mesh
group (a barrier between groups), each trainer rank's preparation engine
runs its preparations in order (gather and fuse at copy_gbps, quantize at
quant_gbps, both on the source bytes) while holding their temporary bytes
(under an optional watermark), and each task starts when its preparation
is done, its sender NIC is free (tasks of a NIC in plan order) and its
receiver NIC is free (served first come, first served), then occupies
both for task_us plus len at the line rate. So a schedule that sends
everything to one receiver first, or a rank with more bytes than the
others, predicts slower than the bound.

Constants (wsync_plan_sim_options, zero meaning default):
  nic_gbps    400 (per NIC, each direction);
  copy_gbps   nic_gbps * 13/8: the ratio of memcpy (13 GB/s) to one
              process_vm_writev of the same bytes (8 GB/s) measured on the
              development machine, i.e. a preparation copy is that much
              faster than the wire, as a GPU's device copy is next to its NIC;
  quant_gbps  copy_gbps: on a GPU, bf16 -> fp8 with block amax is a
              memory-bound elementwise kernel like a copy (this machine's
              scalar CPU conversion is compute-bound and would say nothing
              about the deployment);
  task_us     5: posting a write, its completion, and the per-task queue
              hand-offs of the executor (a small process_vm_writev costs
              1-2 us here; an RDMA WRITE's post and poll about as much);
  barrier_us  50: a barrier among a few hundred ranks over the control
              network (a round trip of a TCP message to the controller).
*/
#ifndef WSYNC_PLAN_WIP_H
#define WSYNC_PLAN_WIP_H

#include "wsync.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Preparation flags (wsync_plan_prep.flags). */
#define WSYNC_PLAN_GATHER 1u /* assemble rows from the mesh's shards, or pack a strided column slice */
#define WSYNC_PLAN_FUSE 2u   /* several pieces concatenated into one buffer */
#define WSYNC_PLAN_QUANT 4u  /* bf16 -> fp8 e4m3 with f32 scales per 128x128 block */
/* Task flag: this write carries the preparation's scales (from src_offset = out_bytes). */
#define WSYNC_PLAN_SCALES 8u

#define WSYNC_PLAN_BLOCK 128u      /* fp8 scale block: 128 x 128 elements */
#define WSYNC_PLAN_MAX_NICS 64u
#define WSYNC_PLAN_MAX_RANKS 1048576u
#define WSYNC_PLAN_MAX_GROUPS 64u

/* ---- input ---- */

typedef struct wsync_plan_source {
    uint64_t rows, cols;   /* the whole tensor as a matrix (a vector: n x 1) */
    uint32_t dtype;        /* wsync_dtype as trainers hold it (BF16) */
    uint32_t mesh;         /* index into meshes: the ranks that shard it */
} wsync_plan_source;

typedef struct wsync_plan_mesh {
    uint32_t first, count; /* trainer ranks [first, first + count) */
    uint32_t group;        /* mesh group: groups run in increasing order */
    uint32_t gather;       /* 1: any rank of the mesh can reconstruct a tensor */
} wsync_plan_mesh;

/* Rows [row0, row0 + rows) and columns [col0, col0 + cols) of a source. */
typedef struct wsync_plan_piece {
    uint32_t source;
    uint64_t row0, rows, col0, cols;
} wsync_plan_piece;

typedef struct wsync_plan_dest {
    uint32_t rank, region;         /* inference rank, its region */
    uint64_t offset;               /* byte offset of the unit's buffer there */
    uint32_t scale_region;         /* fp8 units: where the scales go */
    uint64_t scale_offset;
} wsync_plan_dest;

typedef struct wsync_plan_unit {
    uint64_t first_piece, n_pieces; /* into pieces, concatenated by rows */
    uint64_t first_dest, n_dests;   /* into dests */
    uint32_t dtype;                 /* target: BF16 (as the source) or F8_E4M3 */
} wsync_plan_unit;

typedef struct wsync_plan_input {
    uint32_t n_trainers, n_inference;
    const wsync_plan_source *sources;
    uint64_t n_sources;
    const wsync_plan_mesh *meshes;
    uint32_t n_meshes;
    const wsync_plan_piece *pieces;
    uint64_t n_pieces;
    const wsync_plan_dest *dests;
    uint64_t n_dests;
    const wsync_plan_unit *units;
    uint64_t n_units;
} wsync_plan_input;

typedef struct wsync_plan_options {
    wsync_allocator allocator;
    uint32_t nics_per_rank;      /* [1] on every trainer and inference rank */
    uint64_t max_tasks;          /* [1 << 26] refuse plans with more */
    uint32_t chunks_per_rank;    /* [8] gather meshes: a unit's destinations are cut so that a
                                    chunk is at most 1/chunks_per_rank of a rank's mean share */
    uint64_t task_cost_bytes;    /* [250000] a task's start-up counted as this many bytes when
                                    ordering (5 us at 400 Gb/s) */
    double prep_speed;           /* [13/8] a preparation stage's rate over the line rate, when
                                    ordering (the simulator's default copy_gbps / nic_gbps) */
} wsync_plan_options;

/* ---- output ---- */

typedef struct wsync_plan_prep {
    uint32_t rank, group;        /* the trainer rank that prepares and sends it */
    uint32_t flags;              /* WSYNC_PLAN_GATHER | FUSE | QUANT, or 0: sent from the shard */
    uint32_t dtype;              /* of the buffer */
    uint64_t unit;               /* the input unit */
    uint64_t out_row0, rows, cols; /* rows [out_row0, out_row0 + rows) of the unit's matrix */
    uint64_t first_piece, n_pieces; /* into plan->pieces: exactly those rows */
    uint64_t src_bytes;          /* source bytes read */
    uint64_t out_bytes, scale_bytes; /* the buffer: data, then scales */
    uint64_t temp_bytes;         /* memory the preparation holds until its last task is sent */
    uint64_t n_tasks;
} wsync_plan_prep;

typedef struct wsync_plan_task {
    uint32_t prep, group;
    uint32_t src_rank, src_nic;  /* nic: 0..nics_per_rank-1 of that rank */
    uint32_t dst_rank, dst_nic;
    uint32_t region, flags;      /* flags: WSYNC_PLAN_SCALES or 0 */
    uint64_t src_offset;         /* in the preparation's buffer (or the shard when flags are 0) */
    uint64_t dst_offset, len;
} wsync_plan_task;

typedef struct wsync_plan {
    wsync_allocator allocator;
    uint32_t n_trainers, n_inference, nics_per_rank, n_groups;
    wsync_plan_prep *preps;
    uint64_t n_preps;
    wsync_plan_piece *pieces;
    uint64_t n_pieces;
    wsync_plan_task *tasks;      /* ordered: by trainer rank, then group, then send order */
    uint64_t n_tasks;
    uint64_t *rank_first;        /* n_trainers + 1 */
    uint64_t *send_bytes;        /* per trainer NIC: rank * nics_per_rank + nic */
    uint64_t *recv_bytes;        /* per inference NIC */
} wsync_plan;

typedef struct wsync_plan_stats {
    uint64_t tasks, preps, scale_tasks, bytes;
    uint64_t send_max, send_min, recv_max, recv_min;
    double send_mean, recv_mean;
    double imbalance_send, imbalance_recv; /* busiest NIC over the mean */
    uint64_t temp_max;           /* the largest single preparation's temporary bytes */
} wsync_plan_stats;

/* Plans. Checks the input completely first (ranges, slices inside their
   sources, equal column counts in a unit, pieces of one unit in meshes of
   one group, dtypes, overflow); WSYNC_ERR_LIMIT above max_tasks. */
WSYNC_DEF wsync_result wsync_plan_build(const wsync_plan_input *in, const wsync_plan_options *opt, wsync_plan **out,
                                        wsync_error *err);
WSYNC_DEF void wsync_plan_free(wsync_plan *p);
WSYNC_DEF void wsync_plan_stats_get(const wsync_plan *p, wsync_plan_stats *s);
/* wsync_digest of the plan serialized field by field, little-endian: equal
   plans, equal digests, on any platform. */
WSYNC_DEF uint64_t wsync_plan_digest(const wsync_plan *p);
/* Recomputes send_bytes/recv_bytes and rank_first from the tasks (after a
   caller reordered or edited them); fails if tasks are not grouped by rank. */
WSYNC_DEF wsync_result wsync_plan_reindex(wsync_plan *p, wsync_error *err);

/* ---- simulation ---- */

#define WSYNC_PLAN_SIM_GROUPS 8u

typedef struct wsync_plan_sim_options {
    wsync_allocator allocator;
    double nic_gbps;    /* [400] */
    double copy_gbps;   /* [nic_gbps * 13 / 8] gather, fuse */
    double quant_gbps;  /* [copy_gbps] */
    double task_us;     /* [5] (negative: 0) */
    double barrier_us;  /* [50] (negative: 0) */
    uint64_t watermark; /* [0: none] temporary bytes per trainer rank */
} wsync_plan_sim_options;

typedef struct wsync_plan_sim_result {
    double seconds;          /* predicted: from the first group's start to the last write's end */
    double bound_seconds;    /* bytes of the busiest NIC (either side) over its line rate */
    double prep_max_seconds; /* the busiest preparation stage's busy time (gather or quantize, any rank) */
    double group_seconds[WSYNC_PLAN_SIM_GROUPS]; /* the first groups' durations */
    uint32_t n_groups;
    uint64_t peak_temp;      /* the most temporary bytes any rank held */
    uint64_t watermark_overruns; /* preparations started over the watermark to avoid a deadlock */
    uint64_t events;
} wsync_plan_sim_result;

WSYNC_DEF wsync_result wsync_plan_simulate(const wsync_plan *p, const wsync_plan_sim_options *opt,
                                           wsync_plan_sim_result *out, wsync_error *err);

/* ---- model layouts ---- */

/* A model's shape (public configuration values, shared/design/MODELS.md). */
typedef struct wsync_plan_model {
    const char *name;
    uint32_t arch;              /* WSYNC_PLAN_ARCH_* */
    uint64_t vocab, hidden, layers, inter, heads, kv_heads, head_dim;
    uint32_t qk_norm, qkv_bias, tied;
    uint64_t dense_layers, experts, shared_experts, moe_inter; /* MoE (arch MLA) */
    uint64_t q_lora, kv_lora, qk_nope, qk_rope, v_head;         /* MLA */
    uint32_t served_fp8;        /* served in fp8 e4m3 with block scales */
} wsync_plan_model;

#define WSYNC_PLAN_ARCH_QWEN 1u /* Qwen2/Qwen3: GQA attention, SwiGLU MLP */
#define WSYNC_PLAN_ARCH_MLA 2u  /* DeepSeek-V3 / Kimi-K2: latent attention, MoE */

typedef struct wsync_plan_tensor_info {
    char name[96];              /* Hugging Face name */
    uint64_t rows, cols;        /* cols 1 for a vector */
    uint32_t ndim;
    uint32_t kind;              /* internal kind id */
    uint32_t layer, expert;     /* UINT32_MAX when not applicable */
} wsync_plan_tensor_info;

/* "qwen3-0.6b", "qwen2.5-7b", "kimi-k2"; WSYNC_ERR_NOT_FOUND otherwise. */
WSYNC_DEF wsync_result wsync_plan_model_lookup(const char *name, wsync_plan_model *out, wsync_error *err);
WSYNC_DEF uint64_t wsync_plan_model_tensors(const wsync_plan_model *m);
WSYNC_DEF wsync_result wsync_plan_model_tensor(const wsync_plan_model *m, uint64_t index,
                                               wsync_plan_tensor_info *out, wsync_error *err);
WSYNC_DEF uint64_t wsync_plan_model_params(const wsync_plan_model *m);

/* How a model is trained and served (see wsync_plan_layout_model). */
typedef struct wsync_plan_layout_options {
    wsync_allocator allocator;
    uint32_t n_trainers, n_inference;
    uint32_t replicas;          /* [1] inference replicas of n_inference / replicas ranks */
    uint32_t fp8;               /* 1: projection and expert weights in fp8 e4m3 (block scales) */
    uint32_t shards_only;       /* 1: trainers send only rows they hold (no all-gather) */
    uint32_t one_group;         /* 1: experts in the same mesh group as the rest */
} wsync_plan_layout_options;

/* The planner's input for a model, as vLLM lays it out:
     trainers   every tensor bf16, row-sharded over all trainers; mesh 0
                (group 0) holds the non-expert tensors, mesh 1 (group 1,
                unless one_group) the routed experts;
     inference  per replica of P ranks, tensor parallel: q/k/v, gate/up,
                q_b, kv_b, embed_tokens, lm_head split by rows (output
                dim), o_proj and down_proj by columns (input dim); a split
                is d-way with d the largest divisor of P that divides the
                tensor's units (heads, or 128-row/column blocks in fp8, or
                rows), ranks sharing a slice when d < P (as vLLM replicates
                KV heads); fused qkv_proj (q,k,v), gate_up_proj (gate, up),
                MLA fused_qkv_a_proj (q_a_proj, kv_a_proj_with_mqa,
                replicated); routed experts whole, expert e on rank
                e mod P at slot e / P of the layer's experts.w13_weight
                (gate then up) and experts.w2_weight; norms, router and
                biases replicated; fp8 for projections and experts,
                embeddings, norms and router bf16.
   Each inference rank has region 0 (weights, tensors in model order,
   256-byte aligned) and region 1 (fp8 scales). The arrays belong to out
   (wsync_plan_layout_free). */
typedef struct wsync_plan_layout {
    wsync_plan_input input;
    wsync_allocator allocator;
    uint64_t *region_bytes;     /* per inference rank: region 0, region 1 */
    void *storage_[5];
} wsync_plan_layout;

WSYNC_DEF wsync_result wsync_plan_layout_model(const wsync_plan_model *m, const wsync_plan_layout_options *opt,
                                               wsync_plan_layout *out, wsync_error *err);
WSYNC_DEF void wsync_plan_layout_free(wsync_plan_layout *l);

#ifdef __cplusplus
}
#endif

#endif /* WSYNC_PLAN_WIP_H */

/* ====================================================================== */

#if defined(WSYNC_RDMA_IMPLEMENTATION) && !defined(WSYNC__PLAN_IMPLEMENTED)
#define WSYNC__PLAN_IMPLEMENTED

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static wsync_result wsync__plfail(wsync_error *err, wsync_result code, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static wsync_result wsync__plfail(wsync_error *err, wsync_result code, const char *fmt, ...)
{
    va_list ap;
    if (!err) return code;
    err->code = code;
    err->offset = UINT64_MAX;
    err->tensor[0] = 0;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

static void wsync__plreset(wsync_error *err)
{
    if (!err) return;
    err->code = WSYNC_OK;
    err->offset = UINT64_MAX;
    err->tensor[0] = 0;
    err->message[0] = 0;
}

/* Zeroed memory; n * size overflow-checked. */
static void *wsync__plalloc(const wsync_allocator *a, uint64_t n, size_t size)
{
    uint64_t bytes;
    void *p;
    if (!wsync_mul_u64(n ? n : 1, size, &bytes) || bytes > (uint64_t)SIZE_MAX) return NULL;
#ifdef WSYNC_MALLOC
    p = a->alloc ? a->alloc(a->user, (size_t)bytes) : WSYNC_MALLOC((size_t)bytes);
#else
    p = a->alloc ? a->alloc(a->user, (size_t)bytes) : malloc((size_t)bytes);
#endif
    if (p) memset(p, 0, (size_t)bytes);
    return p;
}

static void wsync__plfree(const wsync_allocator *a, void *p)
{
    if (!p) return;
    if (a->free) a->free(a->user, p);
    else
#ifdef WSYNC_FREE
        WSYNC_FREE(p);
#else
        free(p);
#endif
}

/* Grows *arr to hold at least n + 1 elements (doubling). */
static int wsync__plgrow(const wsync_allocator *a, void **arr, uint64_t *cap, uint64_t n, size_t size)
{
    uint64_t nc;
    void *q;
    if (n < *cap) return 1;
    nc = *cap ? *cap * 2 : 64;
    if (nc <= n) nc = n + 1;
    q = wsync__plalloc(a, nc, size);
    if (!q) return 0;
    if (*arr) memcpy(q, *arr, (size_t)(*cap * size));
    wsync__plfree(a, *arr);
    *arr = q;
    *cap = nc;
    return 1;
}

static uint64_t wsync__pldiv_up(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

/* Stable LSD radix sort of idx by key (key[i] belongs to idx[i]), 8 bits a
   pass; a pass whose bytes are all equal is skipped. tidx/tkey: scratch. */
static void wsync__plrsort(uint32_t *idx, uint32_t *key, uint32_t *tidx, uint32_t *tkey, uint64_t n)
{
    unsigned shift;
    uint64_t i;
    for (shift = 0; shift < 32; shift += 8) {
        uint64_t cnt[256], pos = 0;
        unsigned b;
        memset(cnt, 0, sizeof cnt);
        for (i = 0; i < n; i++) cnt[(key[i] >> shift) & 255u]++;
        for (b = 0; b < 256; b++)
            if (cnt[b] == n) break;
        if (b < 256) continue;
        for (b = 0; b < 256; b++) {
            uint64_t c = cnt[b];
            cnt[b] = pos;
            pos += c;
        }
        for (i = 0; i < n; i++) {
            uint64_t d = cnt[(key[i] >> shift) & 255u]++;
            tidx[d] = idx[i];
            tkey[d] = key[i];
        }
        memcpy(idx, tidx, (size_t)n * sizeof *idx);
        memcpy(key, tkey, (size_t)n * sizeof *key);
    }
}

/* ---- models ---------------------------------------------------------- */

enum {
    WSYNC__PLK_EMBED, WSYNC__PLK_NORM, WSYNC__PLK_LM_HEAD,
    WSYNC__PLK_IN_NORM, WSYNC__PLK_POST_NORM,
    WSYNC__PLK_Q, WSYNC__PLK_K, WSYNC__PLK_V, WSYNC__PLK_Q_BIAS, WSYNC__PLK_K_BIAS, WSYNC__PLK_V_BIAS,
    WSYNC__PLK_O, WSYNC__PLK_Q_NORM, WSYNC__PLK_K_NORM,
    WSYNC__PLK_GATE, WSYNC__PLK_UP, WSYNC__PLK_DOWN,
    WSYNC__PLK_Q_A, WSYNC__PLK_Q_A_NORM, WSYNC__PLK_Q_B, WSYNC__PLK_KV_A, WSYNC__PLK_KV_A_NORM, WSYNC__PLK_KV_B,
    WSYNC__PLK_MLA_O,
    WSYNC__PLK_ROUTER, WSYNC__PLK_ROUTER_BIAS, WSYNC__PLK_SH_GATE, WSYNC__PLK_SH_UP, WSYNC__PLK_SH_DOWN,
    WSYNC__PLK_EX_GATE, WSYNC__PLK_EX_UP, WSYNC__PLK_EX_DOWN,
    WSYNC__PLK_COUNT
};

static const char *const wsync__plk_name[WSYNC__PLK_COUNT] = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
    "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight", "self_attn.kv_b_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate.weight", "mlp.gate.e_score_correction_bias", "mlp.shared_experts.gate_proj.weight",
    "mlp.shared_experts.up_proj.weight", "mlp.shared_experts.down_proj.weight",
    "gate_proj.weight", "up_proj.weight", "down_proj.weight"};

static const wsync_plan_model wsync__pl_models[] = {
    /* name, arch, vocab, hidden, layers, inter, heads, kv_heads, head_dim, qk_norm, qkv_bias, tied,
       dense_layers, experts, shared, moe_inter, q_lora, kv_lora, qk_nope, qk_rope, v_head, fp8 */
    {"qwen3-0.6b", WSYNC_PLAN_ARCH_QWEN, 151936, 1024, 28, 3072, 16, 8, 128, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"qwen2.5-7b", WSYNC_PLAN_ARCH_QWEN, 152064, 3584, 28, 18944, 28, 4, 128, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"kimi-k2", WSYNC_PLAN_ARCH_MLA, 163840, 7168, 61, 18432, 64, 64, 0, 0, 0, 0, 1, 384, 1, 2048, 1536, 512, 128,
     64, 128, 1},
};

WSYNC_DEF wsync_result wsync_plan_model_lookup(const char *name, wsync_plan_model *out, wsync_error *err)
{
    size_t i;
    wsync__plreset(err);
    if (!name || !out) return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan model: NULL argument");
    for (i = 0; i < sizeof wsync__pl_models / sizeof wsync__pl_models[0]; i++)
        if (strcmp(wsync__pl_models[i].name, name) == 0) {
            *out = wsync__pl_models[i];
            return WSYNC_OK;
        }
    return wsync__plfail(err, WSYNC_ERR_NOT_FOUND, "plan model '%.100s': not one of qwen3-0.6b, qwen2.5-7b, kimi-k2",
                         name);
}

static int wsync__pl_moe_layer(const wsync_plan_model *m, uint64_t l)
{
    return m->arch == WSYNC_PLAN_ARCH_MLA && m->experts > 0 && l >= m->dense_layers;
}

/* The fixed (non-routed-expert) tensor kinds of a layer, in checkpoint order. */
static unsigned wsync__pl_layer_kinds(const wsync_plan_model *m, uint64_t l, unsigned *k)
{
    unsigned n = 0;
    k[n++] = WSYNC__PLK_IN_NORM;
    if (m->arch == WSYNC_PLAN_ARCH_QWEN) {
        k[n++] = WSYNC__PLK_Q;
        if (m->qkv_bias) k[n++] = WSYNC__PLK_Q_BIAS;
        k[n++] = WSYNC__PLK_K;
        if (m->qkv_bias) k[n++] = WSYNC__PLK_K_BIAS;
        k[n++] = WSYNC__PLK_V;
        if (m->qkv_bias) k[n++] = WSYNC__PLK_V_BIAS;
        k[n++] = WSYNC__PLK_O;
        if (m->qk_norm) {
            k[n++] = WSYNC__PLK_Q_NORM;
            k[n++] = WSYNC__PLK_K_NORM;
        }
    } else {
        k[n++] = WSYNC__PLK_Q_A;
        k[n++] = WSYNC__PLK_Q_A_NORM;
        k[n++] = WSYNC__PLK_Q_B;
        k[n++] = WSYNC__PLK_KV_A;
        k[n++] = WSYNC__PLK_KV_A_NORM;
        k[n++] = WSYNC__PLK_KV_B;
        k[n++] = WSYNC__PLK_MLA_O;
    }
    k[n++] = WSYNC__PLK_POST_NORM;
    if (wsync__pl_moe_layer(m, l)) {
        k[n++] = WSYNC__PLK_ROUTER;
        k[n++] = WSYNC__PLK_ROUTER_BIAS;
        if (m->shared_experts) {
            k[n++] = WSYNC__PLK_SH_GATE;
            k[n++] = WSYNC__PLK_SH_UP;
            k[n++] = WSYNC__PLK_SH_DOWN;
        }
    } else {
        k[n++] = WSYNC__PLK_GATE;
        k[n++] = WSYNC__PLK_UP;
        k[n++] = WSYNC__PLK_DOWN;
    }
    return n;
}

static uint64_t wsync__pl_layer_tensors(const wsync_plan_model *m, uint64_t l)
{
    unsigned k[32];
    return wsync__pl_layer_kinds(m, l, k) + (wsync__pl_moe_layer(m, l) ? 3 * m->experts : 0);
}

/* Index of a layer's first tensor (the embedding is tensor 0): the first
   nd layers have the dense layer's count of tensors, the rest the MoE's. */
static uint64_t wsync__pl_layer_base(const wsync_plan_model *m, uint64_t l)
{
    uint64_t nd = m->layers, cd, cm;
    if (m->arch == WSYNC_PLAN_ARCH_MLA && m->experts > 0) nd = m->dense_layers < m->layers ? m->dense_layers : m->layers;
    cd = nd > 0 ? wsync__pl_layer_tensors(m, 0) : 0;
    cm = nd < m->layers ? wsync__pl_layer_tensors(m, nd) : 0;
    return 1 + (l < nd ? l : nd) * cd + (l > nd ? (l - nd) * cm : 0);
}

static void wsync__pl_shape(const wsync_plan_model *m, unsigned kind, uint64_t *rows, uint64_t *cols)
{
    uint64_t h = m->hidden, q = m->heads * m->head_dim, kv = m->kv_heads * m->head_dim, r = h, c = 1;
    uint64_t sh = m->moe_inter * (m->shared_experts ? m->shared_experts : 1);
    switch (kind) {
    case WSYNC__PLK_EMBED: case WSYNC__PLK_LM_HEAD: r = m->vocab; c = h; break;
    case WSYNC__PLK_NORM: case WSYNC__PLK_IN_NORM: case WSYNC__PLK_POST_NORM: r = h; break;
    case WSYNC__PLK_Q: r = q; c = h; break;
    case WSYNC__PLK_K: case WSYNC__PLK_V: r = kv; c = h; break;
    case WSYNC__PLK_Q_BIAS: r = q; break;
    case WSYNC__PLK_K_BIAS: case WSYNC__PLK_V_BIAS: r = kv; break;
    case WSYNC__PLK_O: r = h; c = q; break;
    case WSYNC__PLK_Q_NORM: case WSYNC__PLK_K_NORM: r = m->head_dim; break;
    case WSYNC__PLK_GATE: case WSYNC__PLK_UP: r = m->inter; c = h; break;
    case WSYNC__PLK_DOWN: r = h; c = m->inter; break;
    case WSYNC__PLK_Q_A: r = m->q_lora; c = h; break;
    case WSYNC__PLK_Q_A_NORM: r = m->q_lora; break;
    case WSYNC__PLK_Q_B: r = m->heads * (m->qk_nope + m->qk_rope); c = m->q_lora; break;
    case WSYNC__PLK_KV_A: r = m->kv_lora + m->qk_rope; c = h; break;
    case WSYNC__PLK_KV_A_NORM: r = m->kv_lora; break;
    case WSYNC__PLK_KV_B: r = m->heads * (m->qk_nope + m->v_head); c = m->kv_lora; break;
    case WSYNC__PLK_MLA_O: r = h; c = m->heads * m->v_head; break;
    case WSYNC__PLK_ROUTER: r = m->experts; c = h; break;
    case WSYNC__PLK_ROUTER_BIAS: r = m->experts; break;
    case WSYNC__PLK_SH_GATE: case WSYNC__PLK_SH_UP: r = sh; c = h; break;
    case WSYNC__PLK_SH_DOWN: r = h; c = sh; break;
    case WSYNC__PLK_EX_GATE: case WSYNC__PLK_EX_UP: r = m->moe_inter; c = h; break;
    case WSYNC__PLK_EX_DOWN: r = h; c = m->moe_inter; break;
    default: break;
    }
    *rows = r;
    *cols = c;
}

WSYNC_DEF uint64_t wsync_plan_model_tensors(const wsync_plan_model *m)
{
    return wsync__pl_layer_base(m, m->layers) + 1 + (m->tied ? 0 : 1);
}

/* kind, layer and expert of tensor `index` (index < wsync_plan_model_tensors). */
static void wsync__pl_locate(const wsync_plan_model *m, uint64_t index, unsigned *kind, uint64_t *layer,
                             uint64_t *expert)
{
    uint64_t end = wsync__pl_layer_base(m, m->layers), lo = 0, hi = m->layers, l, off;
    unsigned k[32], n;
    *layer = UINT64_MAX;
    *expert = UINT64_MAX;
    if (index == 0) {
        *kind = WSYNC__PLK_EMBED;
        return;
    }
    if (index >= end) {
        *kind = index == end ? WSYNC__PLK_NORM : WSYNC__PLK_LM_HEAD;
        return;
    }
    while (hi - lo > 1) { /* the last layer whose base <= index */
        uint64_t mid = lo + (hi - lo) / 2;
        if (wsync__pl_layer_base(m, mid) <= index) lo = mid;
        else hi = mid;
    }
    l = lo;
    off = index - wsync__pl_layer_base(m, l);
    n = wsync__pl_layer_kinds(m, l, k);
    *layer = l;
    if (off < n) {
        *kind = k[off];
        return;
    }
    off -= n;
    *expert = off / 3;
    *kind = WSYNC__PLK_EX_GATE + (unsigned)(off % 3);
}

WSYNC_DEF wsync_result wsync_plan_model_tensor(const wsync_plan_model *m, uint64_t index,
                                               wsync_plan_tensor_info *out, wsync_error *err)
{
    unsigned kind;
    uint64_t layer, expert;
    wsync__plreset(err);
    if (!m || !out) return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan model tensor: NULL argument");
    if (index >= wsync_plan_model_tensors(m))
        return wsync__plfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan model %.60s: tensor %llu of %llu", m->name,
                             (unsigned long long)index, (unsigned long long)wsync_plan_model_tensors(m));
    wsync__pl_locate(m, index, &kind, &layer, &expert);
    memset(out, 0, sizeof *out);
    wsync__pl_shape(m, kind, &out->rows, &out->cols);
    out->ndim = out->cols == 1 ? 1 : 2;
    out->kind = kind;
    out->layer = layer == UINT64_MAX ? UINT32_MAX : (uint32_t)layer;
    out->expert = expert == UINT64_MAX ? UINT32_MAX : (uint32_t)expert;
    if (layer == UINT64_MAX) snprintf(out->name, sizeof out->name, "%.60s", wsync__plk_name[kind]);
    else if (expert == UINT64_MAX)
        snprintf(out->name, sizeof out->name, "model.layers.%u.%.60s", (unsigned)layer, wsync__plk_name[kind]);
    else
        snprintf(out->name, sizeof out->name, "model.layers.%u.mlp.experts.%u.%.30s", (unsigned)layer,
                 (unsigned)expert, wsync__plk_name[kind]);
    return WSYNC_OK;
}

WSYNC_DEF uint64_t wsync_plan_model_params(const wsync_plan_model *m)
{
    uint64_t total = 0, l, r, c;
    unsigned k[32], n, i;
    wsync__pl_shape(m, WSYNC__PLK_EMBED, &r, &c);
    total += r * c * (m->tied ? 1 : 2);
    wsync__pl_shape(m, WSYNC__PLK_NORM, &r, &c);
    total += r * c;
    for (l = 0; l < m->layers; l++) {
        n = wsync__pl_layer_kinds(m, l, k);
        for (i = 0; i < n; i++) {
            wsync__pl_shape(m, k[i], &r, &c);
            total += r * c;
        }
        if (wsync__pl_moe_layer(m, l))
            for (i = WSYNC__PLK_EX_GATE; i <= WSYNC__PLK_EX_DOWN; i++) {
                wsync__pl_shape(m, i, &r, &c);
                total += r * c * m->experts;
            }
    }
    return total;
}

/* ---- model layouts ---------------------------------------------------- */

typedef struct wsync__pl_lay {
    const wsync_plan_model *m;
    wsync_allocator a;
    uint32_t P, R, fp8;
    wsync_plan_source *src;
    uint64_t n_src;
    wsync_plan_piece *pieces;
    uint64_t n_pieces, cap_pieces;
    wsync_plan_dest *dests;
    uint64_t n_dests, cap_dests;
    wsync_plan_unit *units;
    uint64_t n_units, cap_units;
    uint64_t *cur;   /* per inference rank: next free byte of region 0, of region 1 */
} wsync__pl_lay;

/* One part of a (possibly fused) destination tensor: a source tensor, how
   many ways it is split, and along which dimension. */
typedef struct wsync__pl_part {
    uint64_t src, ways;
} wsync__pl_part;

/* Largest divisor of P that divides n (n = 0: 1). */
static uint64_t wsync__pl_ways(uint64_t P, uint64_t n)
{
    uint64_t d;
    for (d = P; d > 1; d--)
        if (P % d == 0 && n % d == 0) return d;
    return 1;
}

static uint64_t wsync__pl_gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Split ways of rows (or columns) n that come in `unit`-sized groups (heads),
   also whole 128-blocks when quantized. */
static uint64_t wsync__pl_split(const wsync__pl_lay *L, uint64_t n, uint64_t unit, int quant)
{
    uint64_t u = unit ? unit : 1;
    if (quant) u = u / wsync__pl_gcd(u, WSYNC_PLAN_BLOCK) * WSYNC_PLAN_BLOCK;
    if (n % u) return 1;
    return wsync__pl_ways(L->P, n / u);
}

static uint64_t wsync__pl_align(uint64_t x) { return (x + 255u) & ~(uint64_t)255u; }

/* Appends a unit whose pieces are already appended from first_piece; its
   destinations: local rank p of every replica, at that rank's cursors. */
static wsync_result wsync__pl_unit(wsync__pl_lay *L, uint64_t first_piece, uint32_t dtype, uint64_t p_lo,
                                   uint64_t p_hi, wsync_error *err)
{
    wsync_plan_unit *u;
    uint64_t rows = 0, cols = L->pieces[first_piece].cols, i, p, j, out, scales = 0;
    for (i = first_piece; i < L->n_pieces; i++) rows += L->pieces[i].rows;
    out = rows * cols * (dtype == WSYNC_DTYPE_F8_E4M3 ? 1u : 2u);
    if (dtype == WSYNC_DTYPE_F8_E4M3)
        scales = wsync__pldiv_up(rows, WSYNC_PLAN_BLOCK) * wsync__pldiv_up(cols, WSYNC_PLAN_BLOCK) * 4u;
    if (!wsync__plgrow(&L->a, (void **)&L->units, &L->cap_units, L->n_units, sizeof *L->units))
        return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: units");
    u = &L->units[L->n_units++];
    u->first_piece = first_piece;
    u->n_pieces = L->n_pieces - first_piece;
    u->first_dest = L->n_dests;
    u->dtype = dtype;
    for (p = p_lo; p < p_hi; p++)
        for (j = 0; j < L->R; j++) {
            uint64_t rank = j * L->P + p;
            wsync_plan_dest *d;
            if (!wsync__plgrow(&L->a, (void **)&L->dests, &L->cap_dests, L->n_dests, sizeof *L->dests))
                return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: destinations");
            d = &L->dests[L->n_dests++];
            d->rank = (uint32_t)rank;
            d->region = 0;
            d->offset = L->cur[2 * rank];
            d->scale_region = 1;
            d->scale_offset = L->cur[2 * rank + 1];
            L->cur[2 * rank] += wsync__pl_align(out);
            L->cur[2 * rank + 1] += wsync__pl_align(scales);
        }
    u->n_dests = L->n_dests - u->first_dest;
    return WSYNC_OK;
}

static wsync_result wsync__pl_piece(wsync__pl_lay *L, uint64_t src, uint64_t r0, uint64_t nr, uint64_t c0,
                                    uint64_t nc, wsync_error *err)
{
    wsync_plan_piece *pc;
    if (!wsync__plgrow(&L->a, (void **)&L->pieces, &L->cap_pieces, L->n_pieces, sizeof *L->pieces))
        return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: pieces");
    pc = &L->pieces[L->n_pieces++];
    pc->source = (uint32_t)src;
    pc->row0 = r0;
    pc->rows = nr;
    pc->col0 = c0;
    pc->cols = nc;
    return WSYNC_OK;
}

/* A destination tensor made of parts, each split parts[i].ways ways by rows
   (col = 0: the slices concatenated) or one part by columns (col = 1):
   local rank p takes slice p / (P / ways) of each part. Ranks with the same
   slices share one unit. */
static wsync_result wsync__pl_emit(wsync__pl_lay *L, const wsync__pl_part *parts, unsigned n, int col,
                                   uint32_t dtype, wsync_error *err)
{
    uint64_t p, lo = 0;
    unsigned i;
    wsync_result r;
    for (p = 0; p <= L->P; p++) {
        int same = p > 0 && p < L->P;
        for (i = 0; i < n && same; i++) {
            uint64_t g = L->P / parts[i].ways;
            same = p / g == (p - 1) / g;
        }
        if (same) continue;
        if (p > 0) { /* local ranks [lo, p) share their slices */
            uint64_t first = L->n_pieces;
            for (i = 0; i < n; i++) {
                const wsync_plan_source *s = &L->src[parts[i].src];
                uint64_t k = lo / (L->P / parts[i].ways);
                if (col)
                    r = wsync__pl_piece(L, parts[i].src, 0, s->rows, k * (s->cols / parts[i].ways),
                                        s->cols / parts[i].ways, err);
                else
                    r = wsync__pl_piece(L, parts[i].src, k * (s->rows / parts[i].ways), s->rows / parts[i].ways, 0,
                                        s->cols, err);
                if (r != WSYNC_OK) return r;
            }
            if ((r = wsync__pl_unit(L, first, dtype, lo, p, err)) != WSYNC_OK) return r;
        }
        lo = p;
    }
    return WSYNC_OK;
}

static wsync_result wsync__pl_emit1(wsync__pl_lay *L, uint64_t src, uint64_t ways, int col, uint32_t dtype,
                                    wsync_error *err)
{
    wsync__pl_part part;
    part.src = src;
    part.ways = ways;
    return wsync__pl_emit(L, &part, 1, col, dtype, err);
}

/* Routed experts of layer l: whole, expert e on local rank e % P at slot e / P. */
static wsync_result wsync__pl_experts(wsync__pl_lay *L, uint64_t l, uint64_t base, uint32_t dtype, wsync_error *err)
{
    const wsync_plan_model *m = L->m;
    uint64_t e, j, p, E = m->experts, I = (uint64_t)L->P * L->R;
    uint64_t eb = dtype == WSYNC_DTYPE_F8_E4M3 ? 1 : 2;
    uint64_t w13 = 2 * m->moe_inter * m->hidden * eb, w2 = m->hidden * m->moe_inter * eb, s13 = 0, s2 = 0;
    uint64_t *b = L->cur + 2 * I; /* scratch after the cursors: 4 per rank */
    wsync_result r;
    (void)l;
    if (dtype == WSYNC_DTYPE_F8_E4M3) {
        s13 = wsync__pldiv_up(2 * m->moe_inter, WSYNC_PLAN_BLOCK) * wsync__pldiv_up(m->hidden, WSYNC_PLAN_BLOCK) * 4;
        s2 = wsync__pldiv_up(m->hidden, WSYNC_PLAN_BLOCK) * wsync__pldiv_up(m->moe_inter, WSYNC_PLAN_BLOCK) * 4;
    }
    for (j = 0; j < I; j++) { /* experts.w13_weight, w2_weight and their scales, each rank */
        uint64_t local = E / L->P + (j % L->P < E % L->P);
        b[4 * j] = L->cur[2 * j];
        L->cur[2 * j] += wsync__pl_align(local * w13);
        b[4 * j + 1] = L->cur[2 * j];
        L->cur[2 * j] += wsync__pl_align(local * w2);
        b[4 * j + 2] = L->cur[2 * j + 1];
        L->cur[2 * j + 1] += wsync__pl_align(local * s13);
        b[4 * j + 3] = L->cur[2 * j + 1];
        L->cur[2 * j + 1] += wsync__pl_align(local * s2);
    }
    for (e = 0; e < E; e++) {
        uint64_t src = base + 3 * e, slot = e / L->P, w;
        p = e % L->P;
        for (w = 0; w < 2; w++) {
            wsync_plan_unit *u;
            uint64_t first = L->n_pieces;
            if (w == 0) {
                if ((r = wsync__pl_piece(L, src, 0, m->moe_inter, 0, m->hidden, err)) != WSYNC_OK) return r;
                if ((r = wsync__pl_piece(L, src + 1, 0, m->moe_inter, 0, m->hidden, err)) != WSYNC_OK) return r;
            } else if ((r = wsync__pl_piece(L, src + 2, 0, m->hidden, 0, m->moe_inter, err)) != WSYNC_OK)
                return r;
            if (!wsync__plgrow(&L->a, (void **)&L->units, &L->cap_units, L->n_units, sizeof *L->units))
                return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: units");
            u = &L->units[L->n_units++];
            u->first_piece = first;
            u->n_pieces = L->n_pieces - first;
            u->first_dest = L->n_dests;
            u->n_dests = L->R;
            u->dtype = dtype;
            for (j = 0; j < L->R; j++) {
                uint64_t rank = j * L->P + p;
                wsync_plan_dest *d;
                if (!wsync__plgrow(&L->a, (void **)&L->dests, &L->cap_dests, L->n_dests, sizeof *L->dests))
                    return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: destinations");
                d = &L->dests[L->n_dests++];
                d->rank = (uint32_t)rank;
                d->region = 0;
                d->offset = b[4 * rank + w] + slot * (w == 0 ? w13 : w2);
                d->scale_region = 1;
                d->scale_offset = b[4 * rank + 2 + w] + slot * (w == 0 ? s13 : s2);
            }
        }
    }
    return WSYNC_OK;
}

/* The units of layer l (sources from index base). */
static wsync_result wsync__pl_layer(wsync__pl_lay *L, uint64_t l, wsync_error *err)
{
    const wsync_plan_model *m = L->m;
    uint64_t base = wsync__pl_layer_base(m, l), at[WSYNC__PLK_COUNT];
    unsigned k[32], n, i;
    uint32_t wq = L->fp8 ? WSYNC_DTYPE_F8_E4M3 : WSYNC_DTYPE_BF16, bf = WSYNC_DTYPE_BF16;
    int q8 = L->fp8 != 0;
    wsync__pl_part parts[3];
    wsync_result r;
    for (i = 0; i < WSYNC__PLK_COUNT; i++) at[i] = UINT64_MAX;
    n = wsync__pl_layer_kinds(m, l, k);
    for (i = 0; i < n; i++) at[k[i]] = base + i;
#define WSYNC__PL_TRY(x)                                                                                      \
    do {                                                                                                       \
        if ((r = (x)) != WSYNC_OK) return r;                                                                   \
    } while (0)
    WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_IN_NORM], 1, 0, bf, err));
    if (m->arch == WSYNC_PLAN_ARCH_QWEN) {
        uint64_t wq_ = wsync__pl_split(L, m->heads * m->head_dim, m->head_dim, q8);
        uint64_t wkv = wsync__pl_split(L, m->kv_heads * m->head_dim, m->head_dim, q8);
        parts[0].src = at[WSYNC__PLK_Q];
        parts[0].ways = wq_;
        parts[1].src = at[WSYNC__PLK_K];
        parts[1].ways = wkv;
        parts[2].src = at[WSYNC__PLK_V];
        parts[2].ways = wkv;
        WSYNC__PL_TRY(wsync__pl_emit(L, parts, 3, 0, wq, err)); /* qkv_proj */
        if (m->qkv_bias) {
            parts[0].src = at[WSYNC__PLK_Q_BIAS];
            parts[1].src = at[WSYNC__PLK_K_BIAS];
            parts[2].src = at[WSYNC__PLK_V_BIAS];
            WSYNC__PL_TRY(wsync__pl_emit(L, parts, 3, 0, bf, err)); /* qkv_proj.bias */
        }
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_O], wsync__pl_split(L, m->heads * m->head_dim, m->head_dim, q8),
                                      1, wq, err));
        if (m->qk_norm) {
            WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_Q_NORM], 1, 0, bf, err));
            WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_K_NORM], 1, 0, bf, err));
        }
    } else {
        parts[0].src = at[WSYNC__PLK_Q_A];
        parts[0].ways = 1;
        parts[1].src = at[WSYNC__PLK_KV_A];
        parts[1].ways = 1;
        WSYNC__PL_TRY(wsync__pl_emit(L, parts, 2, 0, wq, err)); /* fused_qkv_a_proj, replicated */
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_Q_A_NORM], 1, 0, bf, err));
        WSYNC__PL_TRY(wsync__pl_emit1(
            L, at[WSYNC__PLK_Q_B],
            wsync__pl_split(L, m->heads * (m->qk_nope + m->qk_rope), m->qk_nope + m->qk_rope, q8), 0, wq, err));
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_KV_A_NORM], 1, 0, bf, err));
        WSYNC__PL_TRY(wsync__pl_emit1(
            L, at[WSYNC__PLK_KV_B], wsync__pl_split(L, m->heads * (m->qk_nope + m->v_head), m->qk_nope + m->v_head, q8),
            0, wq, err));
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_MLA_O], wsync__pl_split(L, m->heads * m->v_head, m->v_head, q8),
                                      1, wq, err));
    }
    WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_POST_NORM], 1, 0, bf, err));
    if (wsync__pl_moe_layer(m, l)) {
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_ROUTER], 1, 0, bf, err));
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_ROUTER_BIAS], 1, 0, bf, err));
        if (m->shared_experts) {
            uint64_t sh = m->moe_inter * m->shared_experts, w = wsync__pl_split(L, sh, 1, q8);
            parts[0].src = at[WSYNC__PLK_SH_GATE];
            parts[0].ways = w;
            parts[1].src = at[WSYNC__PLK_SH_UP];
            parts[1].ways = w;
            WSYNC__PL_TRY(wsync__pl_emit(L, parts, 2, 0, wq, err)); /* shared_experts.gate_up_proj */
            WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_SH_DOWN], w, 1, wq, err));
        }
        WSYNC__PL_TRY(wsync__pl_experts(L, l, base + n, wq, err));
    } else {
        uint64_t w = wsync__pl_split(L, m->inter, 1, q8);
        parts[0].src = at[WSYNC__PLK_GATE];
        parts[0].ways = w;
        parts[1].src = at[WSYNC__PLK_UP];
        parts[1].ways = w;
        WSYNC__PL_TRY(wsync__pl_emit(L, parts, 2, 0, wq, err)); /* gate_up_proj */
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_DOWN], w, 1, wq, err));
    }
    return WSYNC_OK;
}

static void wsync__pl_lay_release(wsync__pl_lay *L)
{
    wsync__plfree(&L->a, L->src);
    wsync__plfree(&L->a, L->pieces);
    wsync__plfree(&L->a, L->dests);
    wsync__plfree(&L->a, L->units);
    wsync__plfree(&L->a, L->cur);
}

WSYNC_DEF wsync_result wsync_plan_layout_model(const wsync_plan_model *m, const wsync_plan_layout_options *opt,
                                               wsync_plan_layout *out, wsync_error *err)
{
    wsync__pl_lay L;
    wsync_plan_mesh *meshes;
    uint64_t i, l, n, end, I;
    uint32_t R;
    wsync_result r = WSYNC_OK;
    wsync__plreset(err);
    if (!m || !opt || !out) return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan layout: NULL argument");
    memset(out, 0, sizeof *out);
    R = opt->replicas ? opt->replicas : 1;
    if (opt->n_trainers == 0 || opt->n_inference == 0 || opt->n_trainers > WSYNC_PLAN_MAX_RANKS ||
        opt->n_inference > WSYNC_PLAN_MAX_RANKS)
        return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "plan layout: %u trainers, %u inference ranks (1 to %u each)",
                             opt->n_trainers, opt->n_inference, WSYNC_PLAN_MAX_RANKS);
    if (opt->n_inference % R)
        return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT,
                             "plan layout: %u inference ranks do not split into %u replicas", opt->n_inference, R);
    if (m->arch != WSYNC_PLAN_ARCH_QWEN && m->arch != WSYNC_PLAN_ARCH_MLA)
        return wsync__plfail(err, WSYNC_ERR_UNSUPPORTED, "plan layout: model %.60s: unknown architecture", m->name);
    memset(&L, 0, sizeof L);
    L.m = m;
    L.a = opt->allocator;
    L.R = R;
    L.P = opt->n_inference / R;
    L.fp8 = opt->fp8;
    I = opt->n_inference;
    n = wsync_plan_model_tensors(m);
    L.n_src = n;
    L.src = (wsync_plan_source *)wsync__plalloc(&L.a, n, sizeof *L.src);
    L.cur = (uint64_t *)wsync__plalloc(&L.a, 6 * I, sizeof *L.cur);
    meshes = (wsync_plan_mesh *)wsync__plalloc(&L.a, 2, sizeof *meshes);
    if (!L.src || !L.cur || !meshes) {
        r = wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: sources");
        goto fail;
    }
    for (i = 0; i < 2; i++) {
        meshes[i].first = 0;
        meshes[i].count = opt->n_trainers;
        meshes[i].group = opt->one_group ? 0 : (uint32_t)i;
        meshes[i].gather = opt->shards_only ? 0 : 1;
    }
    /* sources, one per model tensor, in model order */
    for (l = 0; l < m->layers; l++) {
        uint64_t b = wsync__pl_layer_base(m, l), e = wsync__pl_layer_base(m, l + 1), nf;
        unsigned k[32];
        nf = wsync__pl_layer_kinds(m, l, k);
        for (i = b; i < e; i++) {
            unsigned kind = i - b < nf ? k[i - b] : WSYNC__PLK_EX_GATE + (unsigned)((i - b - nf) % 3);
            wsync__pl_shape(m, kind, &L.src[i].rows, &L.src[i].cols);
            L.src[i].dtype = WSYNC_DTYPE_BF16;
            L.src[i].mesh = i - b < nf ? 0 : 1;
        }
    }
    end = wsync__pl_layer_base(m, m->layers);
    for (i = 0; i < n; i++)
        if (i == 0 || i >= end) {
            wsync__pl_shape(m, i == 0 ? WSYNC__PLK_EMBED : i == end ? WSYNC__PLK_NORM : WSYNC__PLK_LM_HEAD,
                            &L.src[i].rows, &L.src[i].cols);
            L.src[i].dtype = WSYNC_DTYPE_BF16;
        }
    /* units: the embedding, the layers, the final norm, lm_head (or the tied embedding) */
    if ((r = wsync__pl_emit1(&L, 0, wsync__pl_ways(L.P, m->vocab), 0, WSYNC_DTYPE_BF16, err)) != WSYNC_OK) goto fail;
    for (l = 0; l < m->layers; l++)
        if ((r = wsync__pl_layer(&L, l, err)) != WSYNC_OK) goto fail;
    if ((r = wsync__pl_emit1(&L, end, 1, 0, WSYNC_DTYPE_BF16, err)) != WSYNC_OK) goto fail;
    if (!m->tied &&
        (r = wsync__pl_emit1(&L, end + 1, wsync__pl_ways(L.P, m->vocab), 0, WSYNC_DTYPE_BF16, err)) != WSYNC_OK)
        goto fail;
    out->allocator = L.a;
    out->input.n_trainers = opt->n_trainers;
    out->input.n_inference = opt->n_inference;
    out->input.sources = L.src;
    out->input.n_sources = L.n_src;
    out->input.meshes = meshes;
    out->input.n_meshes = m->arch == WSYNC_PLAN_ARCH_MLA && m->experts ? 2 : 1;
    out->input.pieces = L.pieces;
    out->input.n_pieces = L.n_pieces;
    out->input.dests = L.dests;
    out->input.n_dests = L.n_dests;
    out->input.units = L.units;
    out->input.n_units = L.n_units;
    out->region_bytes = L.cur;
    out->storage_[0] = L.src;
    out->storage_[1] = meshes;
    out->storage_[2] = L.pieces;
    out->storage_[3] = L.dests;
    out->storage_[4] = L.units;
    return WSYNC_OK;
fail:
    wsync__plfree(&L.a, meshes);
    wsync__pl_lay_release(&L);
    memset(out, 0, sizeof *out);
    return r;
}

WSYNC_DEF void wsync_plan_layout_free(wsync_plan_layout *l)
{
    unsigned i;
    if (!l) return;
    for (i = 0; i < 5; i++) wsync__plfree(&l->allocator, l->storage_[i]);
    wsync__plfree(&l->allocator, l->region_bytes);
    memset(l, 0, sizeof *l);
}

/* ---- planner ---------------------------------------------------------- */

typedef struct wsync__pl_heap_item {
    uint64_t load;
    uint32_t rank;
} wsync__pl_heap_item;

/* Min-heap of (load, rank), ties to the lower rank: deterministic. */
typedef struct wsync__pl_heap {
    wsync__pl_heap_item *v;
    uint64_t n;
} wsync__pl_heap;

static int wsync__pl_hless(const wsync__pl_heap_item *a, const wsync__pl_heap_item *b)
{
    return a->load < b->load || (a->load == b->load && a->rank < b->rank);
}

static void wsync__pl_hpush(wsync__pl_heap *h, uint64_t load, uint32_t rank)
{
    uint64_t i = h->n++;
    wsync__pl_heap_item x;
    x.load = load;
    x.rank = rank;
    while (i > 0) {
        uint64_t p = (i - 1) / 2;
        if (!wsync__pl_hless(&x, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
}

static wsync__pl_heap_item wsync__pl_hpop(wsync__pl_heap *h)
{
    wsync__pl_heap_item top = h->v[0], x = h->v[--h->n];
    uint64_t i = 0;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && wsync__pl_hless(&h->v[c + 1], &h->v[c])) c++;
        if (!wsync__pl_hless(&h->v[c], &x)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = x;
    return top;
}

/* Per-unit facts computed once. */
typedef struct wsync__pl_uinfo {
    uint64_t rows, cols, eb;      /* output rows, columns, bytes per output element */
    uint64_t out_bytes, scale_bytes, dest_bytes; /* whole unit; dest_bytes = out + scales */
    uint32_t mesh, group;
} wsync__pl_uinfo;

/* Min-heap of (time, id) for the ordering pass; ties to the lower id. */
typedef struct wsync__pl_th {
    double t;
    uint32_t id;
} wsync__pl_th;

typedef struct wsync__pl_range {
    uint64_t lo, hi;
} wsync__pl_range;

typedef struct wsync__pl_b {
    const wsync_plan_input *in;
    const wsync_plan_options *o;
    wsync_plan *p;
    wsync__pl_uinfo *ui;
    uint64_t cap_preps, cap_pieces;
    uint64_t *gload;           /* per trainer rank: bytes in the current group */
    uint64_t *sg, *rg;         /* per NIC: bytes in the current group */
    wsync__pl_range *pd;       /* per preparation: its destinations [lo, hi) of the input's */
    uint64_t cap_pd;
    double speed;              /* preparation stage rate over line rate (ordering pass) */
    /* the ordering pass's state */
    double *rfree, *rrem, *gfree, *qfree, *ready;
    uint64_t *eng, n_eng;      /* per preparation: when it joined its rank's engines */
    uint64_t *run_lo, *run_hi, *srun, *nact;
    uint32_t *act;
    wsync__pl_th *heap;
} wsync__pl_b;

static wsync_result wsync__pl_check(const wsync_plan_input *in, wsync__pl_uinfo *ui, uint32_t *n_groups,
                                    wsync_error *err)
{
    uint64_t i, k;
    uint32_t g = 0;
    if (in->n_trainers == 0 || in->n_inference == 0 || in->n_trainers > WSYNC_PLAN_MAX_RANKS ||
        in->n_inference > WSYNC_PLAN_MAX_RANKS)
        return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "plan: %u trainers, %u inference ranks (1 to %u each)",
                             in->n_trainers, in->n_inference, WSYNC_PLAN_MAX_RANKS);
    if ((in->n_sources && !in->sources) || (in->n_meshes && !in->meshes) || (in->n_pieces && !in->pieces) ||
        (in->n_dests && !in->dests) || (in->n_units && !in->units))
        return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan: an array is NULL with a nonzero count");
    if (in->n_units >= UINT32_MAX || in->n_sources >= UINT32_MAX)
        return wsync__plfail(err, WSYNC_ERR_LIMIT, "%s", "plan: more than 2^32 units or sources");
    for (i = 0; i < in->n_meshes; i++) {
        const wsync_plan_mesh *m = &in->meshes[i];
        if (m->count == 0 || m->first >= in->n_trainers || m->count > in->n_trainers - m->first)
            return wsync__plfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan: mesh %llu: ranks %u+%u outside %u trainers",
                                 (unsigned long long)i, m->first, m->count, in->n_trainers);
        if (m->group >= WSYNC_PLAN_MAX_GROUPS)
            return wsync__plfail(err, WSYNC_ERR_LIMIT, "plan: mesh %llu: group %u (at most %u groups)",
                                 (unsigned long long)i, m->group, WSYNC_PLAN_MAX_GROUPS);
        if (m->group + 1 > g) g = m->group + 1;
    }
    for (i = 0; i < in->n_sources; i++) {
        const wsync_plan_source *s = &in->sources[i];
        uint64_t b;
        if (s->mesh >= in->n_meshes)
            return wsync__plfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan: source %llu: mesh %u of %u",
                                 (unsigned long long)i, s->mesh, in->n_meshes);
        if (s->dtype != WSYNC_DTYPE_BF16)
            return wsync__plfail(err, WSYNC_ERR_UNSUPPORTED, "plan: source %llu: dtype %s (trainers hold bf16)",
                                 (unsigned long long)i, wsync_dtype_name((wsync_dtype)s->dtype));
        if (s->rows == 0 || s->cols == 0 || !wsync_mul_u64(s->rows, s->cols, &b) || !wsync_mul_u64(b, 2, &b))
            return wsync__plfail(err, WSYNC_ERR_OVERFLOW, "plan: source %llu: %llu x %llu", (unsigned long long)i,
                                 (unsigned long long)s->rows, (unsigned long long)s->cols);
    }
    for (i = 0; i < in->n_pieces; i++) {
        const wsync_plan_piece *pc = &in->pieces[i];
        const wsync_plan_source *s;
        if (pc->source >= in->n_sources)
            return wsync__plfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan: piece %llu: source %u of %llu",
                                 (unsigned long long)i, pc->source, (unsigned long long)in->n_sources);
        s = &in->sources[pc->source];
        if (pc->rows == 0 || pc->cols == 0 || pc->rows > s->rows || pc->row0 > s->rows - pc->rows ||
            pc->cols > s->cols || pc->col0 > s->cols - pc->cols)
            return wsync__plfail(err, WSYNC_ERR_OUT_OF_BOUNDS,
                                 "plan: piece %llu: rows %llu+%llu, columns %llu+%llu outside source %u (%llu x %llu)",
                                 (unsigned long long)i, (unsigned long long)pc->row0, (unsigned long long)pc->rows,
                                 (unsigned long long)pc->col0, (unsigned long long)pc->cols, pc->source,
                                 (unsigned long long)s->rows, (unsigned long long)s->cols);
    }
    for (i = 0; i < in->n_dests; i++)
        if (in->dests[i].rank >= in->n_inference)
            return wsync__plfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan: destination %llu: rank %u of %u",
                                 (unsigned long long)i, in->dests[i].rank, in->n_inference);
    for (i = 0; i < in->n_units; i++) {
        const wsync_plan_unit *u = &in->units[i];
        wsync__pl_uinfo *x = &ui[i];
        uint64_t rows = 0, b;
        if (u->n_pieces == 0 || u->first_piece >= in->n_pieces || u->n_pieces > in->n_pieces - u->first_piece ||
            u->n_dests == 0 || u->first_dest >= in->n_dests || u->n_dests > in->n_dests - u->first_dest)
            return wsync__plfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan: unit %llu: pieces or destinations out of range",
                                 (unsigned long long)i);
        if (u->dtype != WSYNC_DTYPE_BF16 && u->dtype != WSYNC_DTYPE_F8_E4M3)
            return wsync__plfail(err, WSYNC_ERR_UNSUPPORTED, "plan: unit %llu: target dtype %s (BF16 or F8_E4M3)",
                                 (unsigned long long)i, wsync_dtype_name((wsync_dtype)u->dtype));
        x->cols = in->pieces[u->first_piece].cols;
        x->mesh = in->sources[in->pieces[u->first_piece].source].mesh;
        x->group = in->meshes[x->mesh].group;
        for (k = u->first_piece; k < u->first_piece + u->n_pieces; k++) {
            const wsync_plan_piece *pc = &in->pieces[k];
            if (pc->cols != x->cols)
                return wsync__plfail(err, WSYNC_ERR_SIZE_MISMATCH, "plan: unit %llu: pieces of %llu and %llu columns",
                                     (unsigned long long)i, (unsigned long long)x->cols, (unsigned long long)pc->cols);
            if (in->sources[pc->source].mesh != x->mesh)
                return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "plan: unit %llu: pieces from different meshes",
                                     (unsigned long long)i);
            if (!wsync_add_u64(rows, pc->rows, &rows))
                return wsync__plfail(err, WSYNC_ERR_OVERFLOW, "plan: unit %llu: rows", (unsigned long long)i);
        }
        x->rows = rows;
        x->eb = u->dtype == WSYNC_DTYPE_F8_E4M3 ? 1 : 2;
        if (!wsync_mul_u64(rows, x->cols, &b) || !wsync_mul_u64(b, x->eb, &x->out_bytes))
            return wsync__plfail(err, WSYNC_ERR_OVERFLOW, "plan: unit %llu: size", (unsigned long long)i);
        x->scale_bytes = 0;
        if (u->dtype == WSYNC_DTYPE_F8_E4M3 &&
            !wsync_mul_u64(wsync__pldiv_up(rows, WSYNC_PLAN_BLOCK), wsync__pldiv_up(x->cols, WSYNC_PLAN_BLOCK) * 4,
                           &x->scale_bytes))
            return wsync__plfail(err, WSYNC_ERR_OVERFLOW, "plan: unit %llu: scales", (unsigned long long)i);
        if (!wsync_add_u64(x->out_bytes, x->scale_bytes, &x->dest_bytes) ||
            !wsync_mul_u64(x->dest_bytes, u->n_dests, &b))
            return wsync__plfail(err, WSYNC_ERR_OVERFLOW, "plan: unit %llu: bytes", (unsigned long long)i);
    }
    *n_groups = g ? g : 1;
    return WSYNC_OK;
}

/* Holder of row `row` of a source: FSDP2's torch.chunk layout. */
static uint32_t wsync__pl_holder(const wsync_plan_input *in, const wsync_plan_source *s, uint64_t row,
                                 uint64_t *shard_end)
{
    const wsync_plan_mesh *m = &in->meshes[s->mesh];
    uint64_t chunk = wsync__pldiv_up(s->rows, m->count), h = row / chunk;
    if (shard_end) *shard_end = (h + 1) * chunk < s->rows ? (h + 1) * chunk : s->rows;
    return m->first + (uint32_t)h;
}

/* Appends a preparation of rows [r0, r1) of unit u, with its pieces, and
   destinations [d_lo, d_hi) of the unit. rank: the sender, or UINT32_MAX
   to choose later. */
static wsync_result wsync__pl_add_prep(wsync__pl_b *B, uint64_t u, uint64_t r0, uint64_t r1, uint64_t d_lo,
                                       uint64_t d_hi, uint32_t rank, wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    const wsync_plan_unit *un = &in->units[u];
    const wsync__pl_uinfo *x = &B->ui[u];
    wsync_plan *p = B->p;
    wsync_plan_prep *pr;
    uint64_t k, o = 0;
    if (!wsync__plgrow(&p->allocator, (void **)&p->preps, &B->cap_preps, p->n_preps, sizeof *p->preps) ||
        !wsync__plgrow(&p->allocator, (void **)&B->pd, &B->cap_pd, p->n_preps, sizeof *B->pd))
        return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: preparations");
    pr = &p->preps[p->n_preps];
    memset(pr, 0, sizeof *pr);
    pr->rank = rank;
    pr->group = x->group;
    pr->dtype = un->dtype;
    pr->unit = u;
    pr->out_row0 = r0;
    pr->rows = r1 - r0;
    pr->cols = x->cols;
    pr->first_piece = p->n_pieces;
    for (k = un->first_piece; k < un->first_piece + un->n_pieces; k++) {
        const wsync_plan_piece *pc = &in->pieces[k];
        uint64_t a = r0 > o ? r0 : o, b = r1 < o + pc->rows ? r1 : o + pc->rows;
        if (a < b) {
            wsync_plan_piece *np;
            if (!wsync__plgrow(&p->allocator, (void **)&p->pieces, &B->cap_pieces, p->n_pieces, sizeof *p->pieces))
                return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: pieces");
            np = &p->pieces[p->n_pieces++];
            *np = *pc;
            np->row0 = pc->row0 + (a - o);
            np->rows = b - a;
        }
        o += pc->rows;
    }
    pr->n_pieces = p->n_pieces - pr->first_piece;
    pr->src_bytes = pr->rows * pr->cols * 2;
    pr->out_bytes = pr->rows * pr->cols * x->eb;
    if (un->dtype == WSYNC_DTYPE_F8_E4M3) {
        pr->flags |= WSYNC_PLAN_QUANT;
        pr->scale_bytes = wsync__pldiv_up(pr->rows, WSYNC_PLAN_BLOCK) * wsync__pldiv_up(pr->cols, WSYNC_PLAN_BLOCK) * 4;
    }
    if (pr->n_pieces > 1) pr->flags |= WSYNC_PLAN_FUSE;
    pr->n_tasks = (d_hi - d_lo) * (pr->scale_bytes ? 2 : 1);
    B->pd[p->n_preps].lo = d_lo;
    B->pd[p->n_preps].hi = d_hi;
    p->n_preps++;
    return WSYNC_OK;
}

/* Whether `rank` holds every row of the preparation's pieces, whole width. */
static int wsync__pl_holds(const wsync__pl_b *B, const wsync_plan_prep *pr, uint32_t rank)
{
    uint64_t k;
    for (k = pr->first_piece; k < pr->first_piece + pr->n_pieces; k++) {
        const wsync_plan_piece *pc = &B->p->pieces[k];
        const wsync_plan_source *s = &B->in->sources[pc->source];
        uint64_t end;
        if (pc->cols != s->cols) return 0;
        if (wsync__pl_holder(B->in, s, pc->row0, &end) != rank || pc->row0 + pc->rows > end) return 0;
    }
    return 1;
}

static void wsync__pl_set_temp(wsync_plan_prep *pr)
{
    pr->temp_bytes = 0;
    if (pr->flags & (WSYNC_PLAN_GATHER | WSYNC_PLAN_FUSE)) pr->temp_bytes += pr->src_bytes;
    if (pr->flags & WSYNC_PLAN_QUANT) pr->temp_bytes += pr->out_bytes + pr->scale_bytes;
}

/* Row-shard meshes: cut unit u where the holder changes (fp8: at block
   boundaries), each range sent by the holder of its first row. */
static wsync_result wsync__pl_cut_shards(wsync__pl_b *B, uint64_t u, wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    const wsync_plan_unit *un = &in->units[u];
    const wsync__pl_uinfo *x = &B->ui[u];
    uint64_t cur = 0;
    wsync_result r;
    while (cur < x->rows) {
        uint64_t k, o = 0, e = x->rows, send;
        const wsync_plan_piece *pc = NULL;
        uint32_t h;
        wsync_plan_prep *pr;
        for (k = un->first_piece; k < un->first_piece + un->n_pieces; k++) {
            pc = &in->pieces[k];
            if (cur < o + pc->rows) break;
            o += pc->rows;
        }
        h = wsync__pl_holder(in, &in->sources[pc->source], pc->row0 + (cur - o), &send);
        e = o + (send - pc->row0);
        if (e > o + pc->rows) e = o + pc->rows;
        if (un->dtype == WSYNC_DTYPE_F8_E4M3 && e < x->rows) {
            e = e / WSYNC_PLAN_BLOCK * WSYNC_PLAN_BLOCK;
            if (e <= cur) e = cur + WSYNC_PLAN_BLOCK;
            if (e > x->rows) e = x->rows;
        }
        if ((r = wsync__pl_add_prep(B, u, cur, e, un->first_dest, un->first_dest + un->n_dests, h, err)) != WSYNC_OK)
            return r;
        pr = &B->p->preps[B->p->n_preps - 1];
        if (!wsync__pl_holds(B, pr, h)) pr->flags |= WSYNC_PLAN_GATHER;
        wsync__pl_set_temp(pr);
        cur = e;
    }
    return WSYNC_OK;
}

/* The receiver's (or sender's) least loaded NIC in this group, then overall. */
static uint32_t wsync__pl_nic(const uint64_t *g, const uint64_t *tot, uint64_t rank, uint32_t K)
{
    uint32_t best = 0, k;
    for (k = 1; k < K; k++) {
        uint64_t a = rank * K + k, b = rank * K + best;
        if (g[a] < g[b] || (g[a] == g[b] && tot[a] < tot[b])) best = k;
    }
    return best;
}

/* Bytes a preparation puts on the wire, a task's start-up counted as bytes. */
static uint64_t wsync__pl_wire(const wsync__pl_b *B, uint64_t i)
{
    const wsync_plan_prep *pr = &B->p->preps[i];
    return (pr->out_bytes + pr->scale_bytes + (pr->scale_bytes ? 2 : 1) * B->o->task_cost_bytes) *
           (B->pd[i].hi - B->pd[i].lo);
}

static wsync_result wsync__pl_assign(wsync__pl_b *B, uint64_t p_lo, uint64_t p_hi, wsync__pl_heap *heaps,
                                     wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    wsync_plan *p = B->p;
    uint64_t n = p_hi - p_lo, i, m;
    uint32_t *idx, *key, *tidx, *tkey;
    (void)err;
    if (n == 0) return WSYNC_OK;
    idx = (uint32_t *)wsync__plalloc(&p->allocator, 4 * n, sizeof *idx);
    if (!idx) return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: sort");
    key = idx + n;
    tidx = key + n;
    tkey = tidx + n;
    /* largest first: by wire bytes descending, low 32 bits then high (stable:
       ties keep input order) */
    for (i = 0; i < n; i++) {
        idx[i] = (uint32_t)i;
        key[i] = ~(uint32_t)(wsync__pl_wire(B, p_lo + i) & 0xFFFFFFFFu);
    }
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = ~(uint32_t)(wsync__pl_wire(B, p_lo + idx[i]) >> 32);
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) {
        wsync_plan_prep *pr = &p->preps[p_lo + idx[i]];
        uint64_t w = wsync__pl_wire(B, p_lo + idx[i]);
        wsync__pl_heap *h;
        wsync__pl_heap_item it;
        if (pr->rank != UINT32_MAX) { /* fixed sender (row shards) */
            B->gload[pr->rank] += w;
            continue;
        }
        m = in->sources[p->pieces[pr->first_piece].source].mesh;
        h = &heaps[m];
        for (;;) { /* lazily drop entries made stale by another mesh sharing the rank */
            it = wsync__pl_hpop(h);
            if (it.load == B->gload[it.rank]) break;
            wsync__pl_hpush(h, B->gload[it.rank], it.rank);
        }
        pr->rank = it.rank;
        B->gload[it.rank] += w;
        wsync__pl_hpush(h, B->gload[it.rank], it.rank);
        if (!wsync__pl_holds(B, pr, it.rank)) pr->flags |= WSYNC_PLAN_GATHER;
        wsync__pl_set_temp(pr);
    }
    wsync__plfree(&p->allocator, idx);
    return WSYNC_OK;
}

/* Tasks of preparations [p_lo, p_hi) (one group), NICs chosen, appended
   to p->tasks in creation order. */
static void wsync__pl_tasks(wsync__pl_b *B, uint64_t p_lo, uint64_t p_hi)
{
    const wsync_plan_input *in = B->in;
    wsync_plan *p = B->p;
    uint32_t K = p->nics_per_rank;
    uint64_t i, d;
    for (i = p_lo; i < p_hi; i++) {
        const wsync_plan_prep *pr = &p->preps[i];
        const wsync__pl_uinfo *x = &B->ui[pr->unit];
        for (d = B->pd[i].lo; d < B->pd[i].hi; d++) {
            const wsync_plan_dest *ds = &in->dests[d];
            uint32_t sn = wsync__pl_nic(B->sg, p->send_bytes, pr->rank, K);
            uint32_t rn = wsync__pl_nic(B->rg, p->recv_bytes, ds->rank, K);
            uint64_t s = (uint64_t)pr->rank * K + sn, r = (uint64_t)ds->rank * K + rn;
            wsync_plan_task *t = &p->tasks[p->n_tasks++];
            memset(t, 0, sizeof *t);
            t->prep = (uint32_t)i;
            t->group = pr->group;
            t->src_rank = pr->rank;
            t->src_nic = sn;
            t->dst_rank = ds->rank;
            t->dst_nic = rn;
            t->region = ds->region;
            t->src_offset = 0;
            t->dst_offset = ds->offset + pr->out_row0 * x->cols * x->eb;
            t->len = pr->out_bytes;
            B->sg[s] += t->len;
            B->rg[r] += t->len;
            p->send_bytes[s] += t->len;
            p->recv_bytes[r] += t->len;
            if (pr->scale_bytes) {
                wsync_plan_task *c = &p->tasks[p->n_tasks++];
                *c = *t;
                c->flags = WSYNC_PLAN_SCALES;
                c->region = ds->scale_region;
                c->src_offset = pr->out_bytes;
                c->dst_offset = ds->scale_offset + pr->out_row0 / WSYNC_PLAN_BLOCK *
                                                       wsync__pldiv_up(x->cols, WSYNC_PLAN_BLOCK) * 4;
                c->len = pr->scale_bytes;
                B->sg[s] += c->len;
                B->rg[r] += c->len;
                p->send_bytes[s] += c->len;
                p->recv_bytes[r] += c->len;
            }
        }
    }
}

static int wsync__pl_thless(const wsync__pl_th *a, const wsync__pl_th *b)
{
    return a->t < b->t || (a->t == b->t && a->id < b->id);
}

static void wsync__pl_thpush(wsync__pl_th *h, uint64_t *n, double t, uint32_t id)
{
    uint64_t i = (*n)++;
    wsync__pl_th x;
    x.t = t;
    x.id = id;
    while (i > 0) {
        uint64_t q = (i - 1) / 2;
        if (!wsync__pl_thless(&x, &h[q])) break;
        h[i] = h[q];
        i = q;
    }
    h[i] = x;
}

static wsync__pl_th wsync__pl_thpop(wsync__pl_th *h, uint64_t *n)
{
    wsync__pl_th top = h[0], x = h[--(*n)];
    uint64_t i = 0;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && wsync__pl_thless(&h[c + 1], &h[c])) c++;
        if (!wsync__pl_thless(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

/* When preparation q would be ready if its rank's engines took it next:
   gather/fuse then quantize, two pipelined stages that run ahead of the
   sends in the order preparations are first needed (as the simulator
   replays them). Times in bytes at line rate. */
static double wsync__pl_ready(const wsync__pl_b *B, const double *gfree, const double *qfree, const double *ready,
                              uint32_t q)
{
    const wsync_plan_prep *pr = &B->p->preps[q];
    double g = 0, u = 0, ge;
    if (ready[q] >= 0) return ready[q];
    if (pr->flags & (WSYNC_PLAN_GATHER | WSYNC_PLAN_FUSE)) g = (double)pr->src_bytes / B->speed;
    if (pr->flags & WSYNC_PLAN_QUANT) u = (double)pr->src_bytes / B->speed;
    ge = gfree[pr->rank] + g;
    return u > 0 ? (ge > qfree[pr->rank] ? ge : qfree[pr->rank]) + u : ge;
}

/* Orders tasks [t_lo, t_hi) (one group) by a list-scheduling pass of the
   simulator's model in bytes-at-line-rate time: whenever a sender NIC is
   free it takes, of its remaining tasks (the first of each receiver NIC,
   in creation order), the one that can start earliest (its receiver NIC
   free, its preparation done), ties to the receiver with the most bytes
   still to come (the receivers are the critical resources), then the
   lower NIC. v[] gets each task's start, the order's key. A FIFO replay
   then finds no head-of-line blocking the pass did not already see. */
static wsync_result wsync__pl_order(wsync__pl_b *B, uint64_t t_lo, uint64_t t_hi, uint64_t *v, uint32_t *scratch,
                                    wsync_error *err)
{
    wsync_plan *p = B->p;
    uint32_t K = p->nics_per_rank;
    uint64_t S = (uint64_t)p->n_trainers * K, D = (uint64_t)p->n_inference * K, n = 0, i, nh = 0, nruns = 0;
    uint32_t *idx = scratch, *key, *tidx, *tkey;
    double cost = (double)B->o->task_cost_bytes;
    double *rfree = B->rfree, *rrem = B->rrem, *gfree = B->gfree, *qfree = B->qfree, *ready = B->ready;
    uint64_t *rs = B->run_lo, *re = B->run_hi, *srun = B->srun; /* runs; per sender NIC: its runs */
    uint32_t *act = B->act;                 /* per sender NIC: active runs, compacted */
    uint64_t *nact = B->nact;
    wsync__pl_th *heap = B->heap;
    for (i = t_lo; i < t_hi; i++)
        if (!(p->tasks[i].flags & WSYNC_PLAN_SCALES)) idx[n++] = (uint32_t)(i - t_lo);
    key = idx + n;
    tidx = key + n;
    tkey = tidx + n;
#define WSYNC__PL_T(j) (&p->tasks[t_lo + (j)])
#define WSYNC__PL_SN(t) ((uint64_t)(t)->src_rank * K + (t)->src_nic)
#define WSYNC__PL_RN(t) ((uint64_t)(t)->dst_rank * K + (t)->dst_nic)
#define WSYNC__PL_LEN(j) ((double)WSYNC__PL_T(j)->len + cost + \
                          (t_lo + (j) + 1 < t_hi && (WSYNC__PL_T((j) + 1)->flags & WSYNC_PLAN_SCALES) \
                               ? (double)WSYNC__PL_T((j) + 1)->len + cost : 0.0))
    (void)err;
    for (i = 0; i < n; i++) key[i] = (uint32_t)WSYNC__PL_RN(WSYNC__PL_T(idx[i]));
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = (uint32_t)WSYNC__PL_SN(WSYNC__PL_T(idx[i]));
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < D; i++) {
        rfree[i] = 0;
        rrem[i] = 0;
    }
    for (i = 0; i < p->n_trainers; i++) gfree[i] = qfree[i] = 0;
    for (i = 0; i < S; i++) nact[i] = 0;
    /* runs of equal (sender NIC, receiver NIC); srun[s] = its first run */
    for (i = 0; i < n; i++) {
        const wsync_plan_task *t = WSYNC__PL_T(idx[i]);
        rrem[WSYNC__PL_RN(t)] += WSYNC__PL_LEN(idx[i]);
        ready[t->prep] = -1;
        if (i == 0 || WSYNC__PL_SN(WSYNC__PL_T(idx[i - 1])) != WSYNC__PL_SN(t) ||
            WSYNC__PL_RN(WSYNC__PL_T(idx[i - 1])) != WSYNC__PL_RN(t)) {
            uint64_t sn = WSYNC__PL_SN(t);
            if (nact[sn] == 0) srun[sn] = nruns;
            rs[nruns] = i;
            re[nruns] = i + 1;
            act[nruns] = (uint32_t)nruns;
            nact[sn]++;
            nruns++;
        } else
            re[nruns - 1] = i + 1;
    }
    for (i = 0; i < S; i++)
        if (nact[i]) wsync__pl_thpush(heap, &nh, 0, (uint32_t)i);
    while (nh > 0) {
        wsync__pl_th h = wsync__pl_thpop(heap, &nh);
        uint64_t sn = h.id, k, best = UINT64_MAX, j;
        double bstart = 0, brem = 0, end;
        const wsync_plan_task *t;
        for (k = 0; k < nact[sn]; k++) {
            uint64_t run = act[srun[sn] + k];
            const wsync_plan_task *c = WSYNC__PL_T(idx[rs[run]]);
            uint64_t rn = WSYNC__PL_RN(c);
            double st = h.t, rd = wsync__pl_ready(B, gfree, qfree, ready, c->prep);
            if (rfree[rn] > st) st = rfree[rn];
            if (rd > st) st = rd;
            if (best == UINT64_MAX || st < bstart ||
                (st == bstart && (rrem[rn] > brem ||
                                  (rrem[rn] == brem && rn < WSYNC__PL_RN(WSYNC__PL_T(idx[rs[act[srun[sn] + best]]])))))) {
                best = k;
                bstart = st;
                brem = rrem[rn];
            }
        }
        {
            uint64_t run = act[srun[sn] + best];
            j = idx[rs[run]];
            t = WSYNC__PL_T(j);
            if (ready[t->prep] < 0) { /* the preparation joins its rank's engines now */
                const wsync_plan_prep *pr = &p->preps[t->prep];
                double g = (pr->flags & (WSYNC_PLAN_GATHER | WSYNC_PLAN_FUSE)) ? (double)pr->src_bytes / B->speed : 0;
                double u = (pr->flags & WSYNC_PLAN_QUANT) ? (double)pr->src_bytes / B->speed : 0;
                double ge = gfree[pr->rank] + g;
                ready[t->prep] = u > 0 ? (ge > qfree[pr->rank] ? ge : qfree[pr->rank]) + u : ge;
                gfree[pr->rank] = ge;
                if (u > 0) qfree[pr->rank] = ready[t->prep];
                B->eng[t->prep] = B->n_eng++;
            }
            if (ready[t->prep] > h.t && ready[t->prep] > rfree[WSYNC__PL_RN(t)]) {
                /* waiting for the preparation: reserving the receiver now would
                   leave it a gap that a first-come-first-served receiver fills
                   with someone else's write; decide again once it is ready */
                wsync__pl_thpush(heap, &nh, ready[t->prep], (uint32_t)sn);
                continue;
            }
            end = bstart + WSYNC__PL_LEN(j);
            rfree[WSYNC__PL_RN(t)] = end;
            rrem[WSYNC__PL_RN(t)] -= WSYNC__PL_LEN(j);
            v[t_lo + j] = (uint64_t)bstart;
            if (t_lo + j + 1 < t_hi && (WSYNC__PL_T(j + 1)->flags & WSYNC_PLAN_SCALES))
                v[t_lo + j + 1] = (uint64_t)bstart; /* the scales right after their data */
            if (++rs[run] == re[run]) { /* run done: drop it from the sender's active list */
                act[srun[sn] + best] = act[srun[sn] + nact[sn] - 1];
                nact[sn]--;
            }
        }
        if (nact[sn]) wsync__pl_thpush(heap, &nh, end, (uint32_t)sn);
    }
#undef WSYNC__PL_T
#undef WSYNC__PL_SN
#undef WSYNC__PL_RN
#undef WSYNC__PL_LEN
    return WSYNC_OK;
}

/* Final order: by rank, group, virtual time, creation (stable radix passes). */
static wsync_result wsync__pl_sort_all(wsync_plan *p, const uint64_t *v, wsync_error *err)
{
    uint64_t n = p->n_tasks, i;
    uint32_t *idx, *key, *tidx, *tkey;
    wsync_plan_task *nt;
    idx = (uint32_t *)wsync__plalloc(&p->allocator, 4 * n, sizeof *idx);
    nt = (wsync_plan_task *)wsync__plalloc(&p->allocator, n, sizeof *nt);
    if (!idx || !nt) {
        wsync__plfree(&p->allocator, idx);
        wsync__plfree(&p->allocator, nt);
        return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: ordering");
    }
    key = idx + n;
    tidx = key + n;
    tkey = tidx + n;
    for (i = 0; i < n; i++) {
        idx[i] = (uint32_t)i;
        key[i] = (uint32_t)(v[i] & 0xFFFFFFFFu);
    }
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = (uint32_t)(v[idx[i]] >> 32);
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = p->tasks[idx[i]].group;
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = p->tasks[idx[i]].src_rank;
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) nt[i] = p->tasks[idx[i]];
    wsync__plfree(&p->allocator, p->tasks);
    p->tasks = nt;
    wsync__plfree(&p->allocator, idx);
    return WSYNC_OK;
}

/* Preparations in the order they join their rank's engines (the ordering
   pass's), so that a rank prepares in increasing index order. */
static wsync_result wsync__pl_sort_preps(wsync_plan *p, const uint64_t *eng, wsync_error *err)
{
    uint64_t n = p->n_preps, i;
    uint32_t *idx, *key, *tidx, *tkey;
    wsync_plan_prep *np;
    idx = (uint32_t *)wsync__plalloc(&p->allocator, 4 * n, sizeof *idx);
    np = (wsync_plan_prep *)wsync__plalloc(&p->allocator, n, sizeof *np);
    if (!idx || !np) {
        wsync__plfree(&p->allocator, idx);
        wsync__plfree(&p->allocator, np);
        return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: ordering preparations");
    }
    key = idx + n;
    tidx = key + n;
    tkey = tidx + n;
    for (i = 0; i < n; i++) {
        idx[i] = (uint32_t)i;
        key[i] = (uint32_t)(eng[i] & 0xFFFFFFFFu);
    }
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = (uint32_t)(eng[idx[i]] >> 32);
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) {
        np[i] = p->preps[idx[i]];
        tkey[idx[i]] = (uint32_t)i; /* old index -> new */
    }
    for (i = 0; i < p->n_tasks; i++) p->tasks[i].prep = tkey[p->tasks[i].prep];
    wsync__plfree(&p->allocator, p->preps);
    p->preps = np;
    wsync__plfree(&p->allocator, idx);
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_plan_reindex(wsync_plan *p, wsync_error *err)
{
    uint64_t i, K;
    wsync__plreset(err);
    if (!p) return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan reindex: NULL plan");
    K = p->nics_per_rank;
    memset(p->send_bytes, 0, (size_t)(p->n_trainers * K) * sizeof *p->send_bytes);
    memset(p->recv_bytes, 0, (size_t)(p->n_inference * K) * sizeof *p->recv_bytes);
    memset(p->rank_first, 0, (size_t)(p->n_trainers + 1) * sizeof *p->rank_first);
    for (i = 0; i < p->n_tasks; i++) {
        const wsync_plan_task *t = &p->tasks[i];
        if (t->src_rank >= p->n_trainers || t->dst_rank >= p->n_inference || t->src_nic >= K || t->dst_nic >= K ||
            t->prep >= p->n_preps)
            return wsync__plfail(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan reindex: task %llu out of range",
                                 (unsigned long long)i);
        if (i > 0 && t->src_rank < p->tasks[i - 1].src_rank)
            return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "plan reindex: task %llu: ranks not in order",
                                 (unsigned long long)i);
        p->send_bytes[t->src_rank * K + t->src_nic] += t->len;
        p->recv_bytes[t->dst_rank * K + t->dst_nic] += t->len;
        p->rank_first[t->src_rank + 1]++;
    }
    for (i = 0; i < p->n_trainers; i++) p->rank_first[i + 1] += p->rank_first[i];
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_plan_build(const wsync_plan_input *in, const wsync_plan_options *opt, wsync_plan **out,
                                        wsync_error *err)
{
    wsync_plan_options o;
    wsync__pl_b B;
    wsync_plan *p = NULL;
    wsync__pl_heap *heaps = NULL;
    uint64_t *v = NULL, i, g, total_tasks = 0, t_lo;
    uint32_t *scratch = NULL, n_groups = 1;
    wsync_result r;
    wsync__plreset(err);
    if (!in || !out) return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan: NULL argument");
    *out = NULL;
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (!o.nics_per_rank) o.nics_per_rank = 1;
    if (!o.max_tasks) o.max_tasks = (uint64_t)1 << 26;
    if (!o.chunks_per_rank) o.chunks_per_rank = 8;
    if (!o.task_cost_bytes) o.task_cost_bytes = 250000;
    if (!(o.prep_speed > 0)) o.prep_speed = 13.0 / 8.0;
    if (o.nics_per_rank > WSYNC_PLAN_MAX_NICS)
        return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "plan: %u NICs per rank (at most %u)", o.nics_per_rank,
                             WSYNC_PLAN_MAX_NICS);
    if (o.max_tasks >= UINT32_MAX) o.max_tasks = UINT32_MAX - 1; /* task indices are 32-bit in the sorts */
    memset(&B, 0, sizeof B);
    B.in = in;
    B.o = &o;
    B.speed = o.prep_speed;
    p = (wsync_plan *)wsync__plalloc(&o.allocator, 1, sizeof *p);
    if (!p) return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan");
    p->allocator = o.allocator;
    B.p = p;
    p->nics_per_rank = o.nics_per_rank;
    p->n_trainers = in->n_trainers;
    p->n_inference = in->n_inference;
    B.ui = (wsync__pl_uinfo *)wsync__plalloc(&o.allocator, in->n_units, sizeof *B.ui);
    if (!B.ui) {
        r = wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: units");
        goto fail;
    }
    if ((r = wsync__pl_check(in, B.ui, &n_groups, err)) != WSYNC_OK) goto fail;
    p->n_groups = n_groups;
    B.gload = (uint64_t *)wsync__plalloc(&o.allocator, in->n_trainers, sizeof *B.gload);
    B.sg = (uint64_t *)wsync__plalloc(&o.allocator, (uint64_t)in->n_trainers * o.nics_per_rank, sizeof *B.sg);
    B.rg = (uint64_t *)wsync__plalloc(&o.allocator, (uint64_t)in->n_inference * o.nics_per_rank, sizeof *B.rg);
    p->send_bytes = (uint64_t *)wsync__plalloc(&o.allocator, (uint64_t)in->n_trainers * o.nics_per_rank, 8);
    p->recv_bytes = (uint64_t *)wsync__plalloc(&o.allocator, (uint64_t)in->n_inference * o.nics_per_rank, 8);
    p->rank_first = (uint64_t *)wsync__plalloc(&o.allocator, (uint64_t)in->n_trainers + 1, 8);
    heaps = (wsync__pl_heap *)wsync__plalloc(&o.allocator, in->n_meshes, sizeof *heaps);
    if (!B.gload || !B.sg || !B.rg || !p->send_bytes || !p->recv_bytes || !p->rank_first || !heaps) {
        r = wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: loads");
        goto fail;
    }
    for (i = 0; i < in->n_meshes; i++) {
        heaps[i].v = (wsync__pl_heap_item *)wsync__plalloc(&o.allocator, (uint64_t)in->meshes[i].count + 1,
                                                           sizeof *heaps[i].v);
        if (!heaps[i].v) {
            r = wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: heaps");
            goto fail;
        }
    }
    /* preparations and their senders, group by group */
    for (g = 0; g < n_groups; g++) {
        uint64_t p_lo = p->n_preps, gbytes = 0, u;
        memset(B.gload, 0, (size_t)in->n_trainers * sizeof *B.gload);
        for (u = 0; u < in->n_units; u++)
            if (B.ui[u].group == g) gbytes += B.ui[u].dest_bytes * in->units[u].n_dests;
        for (u = 0; u < in->n_units; u++) {
            const wsync_plan_unit *un = &in->units[u];
            const wsync__pl_uinfo *x = &B.ui[u];
            const wsync_plan_mesh *m = &in->meshes[x->mesh];
            if (x->group != g) continue;
            if (!m->gather) {
                if ((r = wsync__pl_cut_shards(&B, u, err)) != WSYNC_OK) goto fail;
            } else {
                /* chunks of destinations, each at most a fraction of a rank's share */
                uint64_t target = gbytes / ((uint64_t)m->count * o.chunks_per_rank), per, nch, c, d0;
                per = x->dest_bytes ? target / x->dest_bytes : un->n_dests;
                if (per < 1) per = 1;
                nch = wsync__pldiv_up(un->n_dests, per);
                if (nch > m->count) nch = m->count;
                for (c = 0, d0 = 0; c < nch; c++) {
                    uint64_t d1 = un->n_dests * (c + 1) / nch;
                    r = wsync__pl_add_prep(&B, u, 0, x->rows, un->first_dest + d0, un->first_dest + d1, UINT32_MAX,
                                           err);
                    if (r != WSYNC_OK) goto fail;
                    d0 = d1;
                }
            }
        }
        for (i = 0; i < in->n_meshes; i++) {
            uint32_t k;
            heaps[i].n = 0;
            for (k = 0; k < in->meshes[i].count; k++) wsync__pl_hpush(&heaps[i], 0, in->meshes[i].first + k);
        }
        if ((r = wsync__pl_assign(&B, p_lo, p->n_preps, heaps, err)) != WSYNC_OK) goto fail;
    }
    for (i = 0; i < p->n_preps; i++) {
        total_tasks += p->preps[i].n_tasks;
        if (total_tasks > o.max_tasks) {
            r = wsync__plfail(err, WSYNC_ERR_LIMIT, "plan: more than %llu tasks (%llu preparations so far)",
                              (unsigned long long)o.max_tasks, (unsigned long long)i + 1);
            goto fail;
        }
    }
    if (p->n_preps >= UINT32_MAX) {
        r = wsync__plfail(err, WSYNC_ERR_LIMIT, "%s", "plan: more than 2^32 preparations");
        goto fail;
    }
    p->tasks = (wsync_plan_task *)wsync__plalloc(&o.allocator, total_tasks, sizeof *p->tasks);
    v = (uint64_t *)wsync__plalloc(&o.allocator, total_tasks, sizeof *v);
    scratch = (uint32_t *)wsync__plalloc(&o.allocator, 5 * total_tasks + 1, sizeof *scratch);
    {
        uint64_t NS = (uint64_t)in->n_trainers * o.nics_per_rank, NR = (uint64_t)in->n_inference * o.nics_per_rank;
        B.rfree = (double *)wsync__plalloc(&o.allocator, 2 * NR, sizeof(double));
        B.gfree = (double *)wsync__plalloc(&o.allocator, 2 * (uint64_t)in->n_trainers, sizeof(double));
        B.ready = (double *)wsync__plalloc(&o.allocator, p->n_preps, sizeof(double));
        B.eng = (uint64_t *)wsync__plalloc(&o.allocator, p->n_preps, 8);
        B.run_lo = (uint64_t *)wsync__plalloc(&o.allocator, 2 * total_tasks + 2 * NS, 8);
        B.act = (uint32_t *)wsync__plalloc(&o.allocator, total_tasks, 4);
        B.heap = (wsync__pl_th *)wsync__plalloc(&o.allocator, NS, sizeof *B.heap);
        if (B.rfree) B.rrem = B.rfree + NR;
        if (B.gfree) B.qfree = B.gfree + in->n_trainers;
        if (B.run_lo) {
            B.run_hi = B.run_lo + total_tasks;
            B.srun = B.run_hi + total_tasks;
            B.nact = B.srun + NS;
        }
    }
    if (!p->tasks || !v || !scratch || !B.rfree || !B.gfree || !B.ready || !B.eng || !B.run_lo || !B.act || !B.heap) {
        r = wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: %llu tasks", (unsigned long long)total_tasks);
        goto fail;
    }
    /* tasks group by group (preps are in group order), NICs balanced per group */
    for (i = 0, g = 0; g < n_groups; g++) {
        uint64_t j = i;
        memset(B.sg, 0, (size_t)in->n_trainers * o.nics_per_rank * sizeof *B.sg);
        memset(B.rg, 0, (size_t)in->n_inference * o.nics_per_rank * sizeof *B.rg);
        while (j < p->n_preps && p->preps[j].group == g) j++;
        t_lo = p->n_tasks;
        wsync__pl_tasks(&B, i, j);
        if ((r = wsync__pl_order(&B, t_lo, p->n_tasks, v, scratch, err)) != WSYNC_OK) goto fail;
        i = j;
    }
    if ((r = wsync__pl_sort_all(p, v, err)) != WSYNC_OK) goto fail;
    if ((r = wsync__pl_sort_preps(p, B.eng, err)) != WSYNC_OK) goto fail;
    if ((r = wsync_plan_reindex(p, err)) != WSYNC_OK) goto fail;
    r = WSYNC_OK;
    *out = p;
    p = NULL;
fail:
    if (heaps)
        for (i = 0; i < in->n_meshes; i++) wsync__plfree(&o.allocator, heaps[i].v);
    wsync__plfree(&o.allocator, heaps);
    wsync__plfree(&o.allocator, B.ui);
    wsync__plfree(&o.allocator, B.gload);
    wsync__plfree(&o.allocator, B.sg);
    wsync__plfree(&o.allocator, B.rg);
    wsync__plfree(&o.allocator, B.pd);
    wsync__plfree(&o.allocator, B.rfree);
    wsync__plfree(&o.allocator, B.gfree);
    wsync__plfree(&o.allocator, B.ready);
    wsync__plfree(&o.allocator, B.eng);
    wsync__plfree(&o.allocator, B.run_lo);
    wsync__plfree(&o.allocator, B.act);
    wsync__plfree(&o.allocator, B.heap);
    wsync__plfree(&o.allocator, v);
    wsync__plfree(&o.allocator, scratch);
    if (p) wsync_plan_free(p);
    return r;
}

WSYNC_DEF void wsync_plan_free(wsync_plan *p)
{
    wsync_allocator a;
    if (!p) return;
    a = p->allocator;
    wsync__plfree(&a, p->preps);
    wsync__plfree(&a, p->pieces);
    wsync__plfree(&a, p->tasks);
    wsync__plfree(&a, p->rank_first);
    wsync__plfree(&a, p->send_bytes);
    wsync__plfree(&a, p->recv_bytes);
    wsync__plfree(&a, p);
}

WSYNC_DEF void wsync_plan_stats_get(const wsync_plan *p, wsync_plan_stats *s)
{
    uint64_t i, ns, nr, sum;
    memset(s, 0, sizeof *s);
    if (!p) return;
    s->tasks = p->n_tasks;
    s->preps = p->n_preps;
    for (i = 0; i < p->n_tasks; i++)
        if (p->tasks[i].flags & WSYNC_PLAN_SCALES) s->scale_tasks++;
    for (i = 0; i < p->n_preps; i++)
        if (p->preps[i].temp_bytes > s->temp_max) s->temp_max = p->preps[i].temp_bytes;
    ns = (uint64_t)p->n_trainers * p->nics_per_rank;
    nr = (uint64_t)p->n_inference * p->nics_per_rank;
    s->send_min = s->recv_min = UINT64_MAX;
    for (i = 0, sum = 0; i < ns; i++) {
        sum += p->send_bytes[i];
        if (p->send_bytes[i] > s->send_max) s->send_max = p->send_bytes[i];
        if (p->send_bytes[i] < s->send_min) s->send_min = p->send_bytes[i];
    }
    s->bytes = sum;
    s->send_mean = ns ? (double)sum / (double)ns : 0;
    for (i = 0, sum = 0; i < nr; i++) {
        sum += p->recv_bytes[i];
        if (p->recv_bytes[i] > s->recv_max) s->recv_max = p->recv_bytes[i];
        if (p->recv_bytes[i] < s->recv_min) s->recv_min = p->recv_bytes[i];
    }
    s->recv_mean = nr ? (double)sum / (double)nr : 0;
    s->imbalance_send = s->send_mean > 0 ? (double)s->send_max / s->send_mean : 1;
    s->imbalance_recv = s->recv_mean > 0 ? (double)s->recv_max / s->recv_mean : 1;
}

static void wsync__pl_d64(wsync_digest_state *d, uint64_t x)
{
    uint8_t b[8];
    unsigned i;
    for (i = 0; i < 8; i++) b[i] = (uint8_t)(x >> (8 * i));
    wsync_digest_update(d, b, 8);
}

WSYNC_DEF uint64_t wsync_plan_digest(const wsync_plan *p)
{
    wsync_digest_state d;
    uint64_t i;
    memset(&d, 0, sizeof d); /* the unused tail of its buffer, for gcc's flow analysis */
    wsync_digest_init(&d);
    if (!p) return wsync_digest_final(&d);
    wsync__pl_d64(&d, p->n_trainers);
    wsync__pl_d64(&d, p->n_inference);
    wsync__pl_d64(&d, p->nics_per_rank);
    wsync__pl_d64(&d, p->n_groups);
    for (i = 0; i < p->n_preps; i++) {
        const wsync_plan_prep *x = &p->preps[i];
        wsync__pl_d64(&d, x->rank);
        wsync__pl_d64(&d, x->group);
        wsync__pl_d64(&d, x->flags);
        wsync__pl_d64(&d, x->dtype);
        wsync__pl_d64(&d, x->unit);
        wsync__pl_d64(&d, x->out_row0);
        wsync__pl_d64(&d, x->rows);
        wsync__pl_d64(&d, x->cols);
        wsync__pl_d64(&d, x->first_piece);
        wsync__pl_d64(&d, x->n_pieces);
        wsync__pl_d64(&d, x->src_bytes);
        wsync__pl_d64(&d, x->out_bytes);
        wsync__pl_d64(&d, x->scale_bytes);
        wsync__pl_d64(&d, x->temp_bytes);
        wsync__pl_d64(&d, x->n_tasks);
    }
    for (i = 0; i < p->n_pieces; i++) {
        const wsync_plan_piece *x = &p->pieces[i];
        wsync__pl_d64(&d, x->source);
        wsync__pl_d64(&d, x->row0);
        wsync__pl_d64(&d, x->rows);
        wsync__pl_d64(&d, x->col0);
        wsync__pl_d64(&d, x->cols);
    }
    for (i = 0; i < p->n_tasks; i++) {
        const wsync_plan_task *x = &p->tasks[i];
        wsync__pl_d64(&d, (uint64_t)x->prep | (uint64_t)x->group << 32);
        wsync__pl_d64(&d, (uint64_t)x->src_rank | (uint64_t)x->src_nic << 32);
        wsync__pl_d64(&d, (uint64_t)x->dst_rank | (uint64_t)x->dst_nic << 32);
        wsync__pl_d64(&d, (uint64_t)x->region | (uint64_t)x->flags << 32);
        wsync__pl_d64(&d, x->src_offset);
        wsync__pl_d64(&d, x->dst_offset);
        wsync__pl_d64(&d, x->len);
    }
    return wsync_digest_final(&d);
}

/* ---- simulator -------------------------------------------------------- */

enum { WSYNC__PLE_SEND = 1, WSYNC__PLE_DONE = 2, WSYNC__PLE_PREP = 3, WSYNC__PLE_GFREE = 4 };

typedef struct wsync__pl_ev {
    double t, w;          /* time; tie: since when the sender waits (first come, first served) */
    uint64_t seq;         /* last tie: insertion order, so the replay is deterministic */
    uint32_t type;
    uint32_t id;
} wsync__pl_ev;

typedef struct wsync__pl_sim {
    const wsync_plan *p;
    wsync_allocator a;
    double rate, copy, quant, task_s;
    uint64_t wm;
    wsync__pl_ev *ev;
    uint64_t nev, capev, seq;
    /* per sender NIC */
    uint64_t *nic_first, *nic_next, *nic_end; /* into order[] */
    uint32_t *order;                          /* task indices of the group by sender NIC */
    double *sfree, *swait;
    uint8_t *pending;
    /* per receiver NIC */
    double *rfree;
    /* per rank */
    uint64_t *prep_first, *prep_next, *prep_end; /* into porder[] */
    uint32_t *porder;
    double *pfree, *pbusy, *qfree, *qbusy; /* gather engine, quantize engine */
    uint64_t *live;
    /* per preparation */
    uint8_t *ready;
    double *rtime;        /* when it became ready */
    uint64_t *left;
    double end;
    wsync_plan_sim_result *res;
} wsync__pl_sim;

static int wsync__pl_evless(const wsync__pl_ev *a, const wsync__pl_ev *b)
{
    if (a->t != b->t) return a->t < b->t;
    if (a->w != b->w) return a->w < b->w;
    return a->seq < b->seq;
}

static int wsync__pl_evpush(wsync__pl_sim *S, double t, double w, uint32_t type, uint32_t id)
{
    uint64_t i;
    wsync__pl_ev x;
    if (!wsync__plgrow(&S->a, (void **)&S->ev, &S->capev, S->nev, sizeof *S->ev)) return 0;
    x.t = t;
    x.w = w;
    x.seq = S->seq++;
    x.type = type;
    x.id = id;
    i = S->nev++;
    while (i > 0) {
        uint64_t q = (i - 1) / 2;
        if (!wsync__pl_evless(&x, &S->ev[q])) break;
        S->ev[i] = S->ev[q];
        i = q;
    }
    S->ev[i] = x;
    return 1;
}

static wsync__pl_ev wsync__pl_evpop(wsync__pl_sim *S)
{
    wsync__pl_ev top = S->ev[0], x = S->ev[--S->nev];
    uint64_t i = 0;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= S->nev) break;
        if (c + 1 < S->nev && wsync__pl_evless(&S->ev[c + 1], &S->ev[c])) c++;
        if (!wsync__pl_evless(&S->ev[c], &x)) break;
        S->ev[i] = S->ev[c];
        i = c;
    }
    if (S->nev) S->ev[i] = x;
    return top;
}

/* Starts the rank's next preparations while its gather engine is idle and
   the watermark allows (force: one, over the watermark). Gather/fuse and
   quantize are two pipelined stages: a preparation leaves the first for the
   second, which takes preparations in the same order. */
static int wsync__pl_try_prep(wsync__pl_sim *S, uint32_t r, double t, int force)
{
    while (S->pfree[r] <= t && S->prep_next[r] < S->prep_end[r]) {
        uint32_t q = S->porder[S->prep_next[r]];
        const wsync_plan_prep *pr = &S->p->preps[q];
        double g = 0, u = 0, ge, rd;
        if (!force && S->wm && S->live[r] > 0 && S->live[r] + pr->temp_bytes > S->wm) return 1;
        if (force) S->res->watermark_overruns++;
        force = 0;
        if (pr->flags & (WSYNC_PLAN_GATHER | WSYNC_PLAN_FUSE)) g = (double)pr->src_bytes / S->copy;
        if (pr->flags & WSYNC_PLAN_QUANT) u = (double)pr->src_bytes / S->quant;
        ge = t + g;
        rd = ge;
        if (u > 0) {
            rd = (ge > S->qfree[r] ? ge : S->qfree[r]) + u;
            S->qfree[r] = rd;
        }
        S->pfree[r] = ge;
        S->pbusy[r] += g;
        S->qbusy[r] += u;
        S->live[r] += pr->temp_bytes;
        if (S->live[r] > S->res->peak_temp) S->res->peak_temp = S->live[r];
        S->prep_next[r]++;
        if (!wsync__pl_evpush(S, rd, 0, WSYNC__PLE_PREP, q)) return 0;
        if (ge > t) return wsync__pl_evpush(S, ge, 0, WSYNC__PLE_GFREE, r);
    }
    return 1;
}

static int wsync__pl_try_send(wsync__pl_sim *S, uint64_t sn, double t)
{
    const wsync_plan *p = S->p;
    const wsync_plan_task *tk;
    uint64_t rn;
    double d;
    if (S->sfree[sn] > t || S->pending[sn] || S->nic_next[sn] == S->nic_end[sn]) return 1;
    tk = &p->tasks[S->order[S->nic_next[sn]]];
    if (!S->ready[tk->prep]) return 1;
    rn = (uint64_t)tk->dst_rank * p->nics_per_rank + tk->dst_nic;
    if (S->rfree[rn] > t) {
        /* in line from when both the NIC and the preparation were ready */
        double w = S->swait[sn] > S->rtime[tk->prep] ? S->swait[sn] : S->rtime[tk->prep];
        S->pending[sn] = 1;
        return wsync__pl_evpush(S, S->rfree[rn], w, WSYNC__PLE_SEND, (uint32_t)sn);
    }
    d = S->task_s + (double)tk->len / S->rate;
    S->sfree[sn] = S->rfree[rn] = t + d;
    S->swait[sn] = t + d;
    S->nic_next[sn]++;
    return wsync__pl_evpush(S, t + d, 0, WSYNC__PLE_DONE, S->order[S->nic_next[sn] - 1]);
}

/* One mesh group from time t0; S->end gets its last write's end. */
static wsync_result wsync__pl_sim_group(wsync__pl_sim *S, uint32_t g, double t0, wsync_error *err)
{
    const wsync_plan *p = S->p;
    uint32_t K = p->nics_per_rank, r;
    uint64_t NS = (uint64_t)p->n_trainers * K, NR = (uint64_t)p->n_inference * K, i, n = 0, left = 0;
    /* sender NIC lists, in plan order */
    for (i = 0; i < NS; i++) S->nic_first[i] = 0;
    for (i = 0; i < p->n_tasks; i++)
        if (p->tasks[i].group == g) S->nic_first[(uint64_t)p->tasks[i].src_rank * K + p->tasks[i].src_nic]++;
    for (i = 0; i < NS; i++) {
        uint64_t c = S->nic_first[i];
        S->nic_first[i] = n;
        S->nic_next[i] = n;
        n += c;
        S->nic_end[i] = n;
    }
    for (i = 0; i < p->n_tasks; i++)
        if (p->tasks[i].group == g) {
            uint64_t sn = (uint64_t)p->tasks[i].src_rank * K + p->tasks[i].src_nic;
            S->order[S->nic_next[sn]++] = (uint32_t)i;
            left++;
        }
    /* preparations of each rank, in the order of their first task */
    for (r = 0; r < p->n_trainers; r++) S->prep_first[r] = 0;
    for (i = 0; i < p->n_preps; i++) {
        S->ready[i] = 0;
        S->left[i] = 0;
        if (p->preps[i].group == g) S->prep_first[p->preps[i].rank]++;
    }
    for (r = 0, n = 0; r < p->n_trainers; r++) {
        uint64_t c = S->prep_first[r];
        S->prep_first[r] = n;
        S->prep_next[r] = n;
        n += c;
        S->prep_end[r] = n;
    }
    for (i = 0; i < p->n_tasks; i++)
        if (p->tasks[i].group == g) S->left[p->tasks[i].prep]++;
    for (i = 0; i < p->n_preps; i++) /* a rank prepares in index order */
        if (p->preps[i].group == g && S->left[i] > 0) S->porder[S->prep_next[p->preps[i].rank]++] = (uint32_t)i;
    for (r = 0; r < p->n_trainers; r++) {
        S->prep_end[r] = S->prep_next[r]; /* a preparation without tasks is never run */
        S->prep_next[r] = S->prep_first[r];
        S->pfree[r] = t0;
        S->qfree[r] = t0;
        S->live[r] = 0;
    }
    for (i = 0; i < NS; i++) {
        S->nic_next[i] = S->nic_first[i];
        S->sfree[i] = t0;
        S->swait[i] = t0;
        S->pending[i] = 0;
    }
    for (i = 0; i < NR; i++) S->rfree[i] = t0;
    S->end = t0;
    S->nev = 0;
    for (r = 0; r < p->n_trainers; r++)
        if (!wsync__pl_try_prep(S, r, t0, 0)) goto oom;
    while (left > 0) {
        wsync__pl_ev e;
        if (S->nev == 0) { /* the watermark holds every rank: start one preparation anyway */
            int moved = 0;
            for (r = 0; r < p->n_trainers && !moved; r++)
                if (S->pfree[r] <= S->end && S->prep_next[r] < S->prep_end[r]) {
                    if (!wsync__pl_try_prep(S, r, S->end, 1)) goto oom;
                    moved = 1;
                }
            if (!moved)
                return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT,
                                     "plan simulate: group %u: %llu tasks can never run (a task before its "
                                     "preparation's turn?)",
                                     g, (unsigned long long)left);
            continue;
        }
        e = wsync__pl_evpop(S);
        S->res->events++;
        if (e.type == WSYNC__PLE_SEND) {
            S->pending[e.id] = 0;
            if (!wsync__pl_try_send(S, e.id, e.t)) goto oom;
        } else if (e.type == WSYNC__PLE_GFREE) {
            if (!wsync__pl_try_prep(S, e.id, e.t, 0)) goto oom;
        } else if (e.type == WSYNC__PLE_PREP) {
            const wsync_plan_prep *pr = &p->preps[e.id];
            uint32_t k;
            S->ready[e.id] = 1;
            S->rtime[e.id] = e.t;
            for (k = 0; k < K; k++)
                if (!wsync__pl_try_send(S, (uint64_t)pr->rank * K + k, e.t)) goto oom;
            if (!wsync__pl_try_prep(S, pr->rank, e.t, 0)) goto oom;
        } else {
            const wsync_plan_task *tk = &p->tasks[e.id];
            const wsync_plan_prep *pr = &p->preps[tk->prep];
            left--;
            if (e.t > S->end) S->end = e.t;
            if (--S->left[tk->prep] == 0) {
                S->live[pr->rank] -= pr->temp_bytes;
                if (!wsync__pl_try_prep(S, pr->rank, e.t, 0)) goto oom;
            }
            if (!wsync__pl_try_send(S, (uint64_t)tk->src_rank * K + tk->src_nic, e.t)) goto oom;
        }
    }
    return WSYNC_OK;
oom:
    return wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan simulate: events");
}

WSYNC_DEF wsync_result wsync_plan_simulate(const wsync_plan *p, const wsync_plan_sim_options *opt,
                                           wsync_plan_sim_result *out, wsync_error *err)
{
    wsync_plan_sim_options o;
    wsync__pl_sim S;
    wsync_plan_stats st;
    uint64_t NS, NR, i;
    uint32_t g;
    double t = 0, barrier;
    wsync_result r = WSYNC_OK;
    wsync__plreset(err);
    if (!p || !out) return wsync__plfail(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan simulate: NULL argument");
    memset(out, 0, sizeof *out);
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (!(o.nic_gbps > 0)) o.nic_gbps = 400;
    if (!(o.copy_gbps > 0)) o.copy_gbps = o.nic_gbps * 13.0 / 8.0;
    if (!(o.quant_gbps > 0)) o.quant_gbps = o.copy_gbps;
    if (o.task_us == 0) o.task_us = 5;
    if (o.task_us < 0) o.task_us = 0;
    if (o.barrier_us == 0) o.barrier_us = 50;
    if (o.barrier_us < 0) o.barrier_us = 0;
    memset(&S, 0, sizeof S);
    S.p = p;
    S.a = o.allocator;
    S.rate = o.nic_gbps * 1e9 / 8;
    S.copy = o.copy_gbps * 1e9 / 8;
    S.quant = o.quant_gbps * 1e9 / 8;
    S.task_s = o.task_us * 1e-6;
    S.wm = o.watermark;
    S.res = out;
    barrier = o.barrier_us * 1e-6;
    NS = (uint64_t)p->n_trainers * p->nics_per_rank;
    NR = (uint64_t)p->n_inference * p->nics_per_rank;
    S.nic_first = (uint64_t *)wsync__plalloc(&S.a, 3 * NS, 8);
    S.order = (uint32_t *)wsync__plalloc(&S.a, p->n_tasks, 4);
    S.sfree = (double *)wsync__plalloc(&S.a, 2 * NS, sizeof(double));
    S.pending = (uint8_t *)wsync__plalloc(&S.a, NS, 1);
    S.rfree = (double *)wsync__plalloc(&S.a, NR, sizeof(double));
    S.prep_first = (uint64_t *)wsync__plalloc(&S.a, 4 * (uint64_t)p->n_trainers, 8);
    S.porder = (uint32_t *)wsync__plalloc(&S.a, p->n_preps, 4);
    S.pfree = (double *)wsync__plalloc(&S.a, 4 * (uint64_t)p->n_trainers, sizeof(double));
    S.ready = (uint8_t *)wsync__plalloc(&S.a, p->n_preps, 1);
    S.left = (uint64_t *)wsync__plalloc(&S.a, p->n_preps, 8);
    S.rtime = (double *)wsync__plalloc(&S.a, p->n_preps, sizeof(double));
    if (!S.nic_first || !S.order || !S.sfree || !S.pending || !S.rfree || !S.prep_first || !S.porder || !S.pfree ||
        !S.ready || !S.left || !S.rtime) {
        r = wsync__plfail(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan simulate: state");
        goto out;
    }
    S.nic_next = S.nic_first + NS;
    S.nic_end = S.nic_next + NS;
    S.swait = S.sfree + NS;
    S.prep_next = S.prep_first + p->n_trainers;
    S.prep_end = S.prep_next + p->n_trainers;
    S.live = S.prep_end + p->n_trainers;
    S.pbusy = S.pfree + p->n_trainers;
    S.qfree = S.pbusy + p->n_trainers;
    S.qbusy = S.qfree + p->n_trainers;
    for (g = 0; g < p->n_groups; g++) {
        double t0 = t;
        if ((r = wsync__pl_sim_group(&S, g, t0, err)) != WSYNC_OK) goto out;
        t = S.end;
        if (g < WSYNC_PLAN_SIM_GROUPS) out->group_seconds[g] = S.end - t0;
        if (g + 1 < p->n_groups) t += barrier;
    }
    out->n_groups = p->n_groups;
    out->seconds = t;
    for (i = 0; i < p->n_trainers; i++) {
        if (S.pbusy[i] > out->prep_max_seconds) out->prep_max_seconds = S.pbusy[i];
        if (S.qbusy[i] > out->prep_max_seconds) out->prep_max_seconds = S.qbusy[i];
    }
    wsync_plan_stats_get(p, &st);
    out->bound_seconds = (double)(st.send_max > st.recv_max ? st.send_max : st.recv_max) / S.rate;
out:
    wsync__plfree(&S.a, S.ev);
    wsync__plfree(&S.a, S.nic_first);
    wsync__plfree(&S.a, S.order);
    wsync__plfree(&S.a, S.sfree);
    wsync__plfree(&S.a, S.pending);
    wsync__plfree(&S.a, S.rfree);
    wsync__plfree(&S.a, S.prep_first);
    wsync__plfree(&S.a, S.porder);
    wsync__plfree(&S.a, S.pfree);
    wsync__plfree(&S.a, S.ready);
    wsync__plfree(&S.a, S.left);
    wsync__plfree(&S.a, S.rtime);
    return r;
}

#ifdef __cplusplus
}
#endif

#endif /* WSYNC_RDMA_IMPLEMENTATION (planner) */
