/* layouts.c - push-demo's layouts: the parts each rank of the direct path
   joins with (trainers' FSDP2 row shards or whole tensors; inference ranks'
   whole model or tensor-parallel slices, fused, fp8), and the plan the
   controller builds from them (cli_push_plan, cli.h), which `wsync plan
   --demo` prints. Part of the command-line tool (cli.h, layouts.h). */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"
#include "layouts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void push_layout_free(push_layout *l)
{
    free(l->t);
    free(l->names);
    free(l->dst);
    free(l->k);
    memset(l, 0, sizeof *l);
}

static int push_layout_alloc(push_layout *l, size_t n)
{
    memset(l, 0, sizeof *l);
    l->n = 0;
    l->t = (wsync_ctl_tensor *)calloc(n ? n : 1, sizeof *l->t);
    l->names = (char(*)[WSYNC_GEN_NAME_MAX])calloc(n ? n : 1, sizeof *l->names);
    l->dst = (char(*)[WSYNC_GEN_NAME_MAX + 16])calloc(n ? n : 1, sizeof *l->dst);
    l->k = (uint32_t *)calloc(n ? n : 1, sizeof *l->k);
    return l->t && l->names && l->dst && l->k;
}

uint64_t push_cols(const wsync_ctl_tensor *t)
{
    return t->ndim > 1 ? t->shape[1] : 1;
}

/* Columns of a part (a row shard or a whole tensor: all of them). */
uint64_t push_part_cols(const wsync_ctl_tensor *t)
{
    return t->col_count ? t->col_count : push_cols(t);
}

static uint64_t push_part_bytes(const wsync_ctl_tensor *t)
{
    return t->row_count * push_part_cols(t) * (t->to_dtype == WSYNC_DTYPE_F8_E4M3 ? 1 : 2);
}

/* Appends part: rows [rb, rb + rc) and columns [cb, cb + cc) of model
   tensor k (cc 0: all), landing under `dst`. */
static int push_part_add(push_layout *l, const wsync_gen_model *m, size_t k, uint64_t rb, uint64_t rc, uint64_t cb,
                         uint64_t cc, const char *dst)
{
    wsync_gen_tensor_info ti;
    wsync_ctl_tensor *t = &l->t[l->n];
    if (wsync_gen_model_tensor(m, k, &ti) != WSYNC_OK) return 0;
    memcpy(l->names[l->n], ti.name, sizeof l->names[l->n]);
    snprintf(l->dst[l->n], sizeof l->dst[l->n], "%s", dst ? dst : ti.name);
    l->k[l->n] = (uint32_t)k;
    t->name = l->names[l->n];
    t->dtype = WSYNC_DTYPE_BF16;
    t->ndim = ti.rank;
    t->shape[0] = ti.shape[0];
    t->shape[1] = ti.rank > 1 ? ti.shape[1] : 0;
    t->row_begin = rb;
    t->row_count = rc;
    t->col_begin = cb;
    t->col_count = cc;
    t->region = 0;
    l->n++;
    return 1;
}

/* Offsets: parts one after another, a new destination name at a 64-byte
   boundary (parts under one fused name stay contiguous), fp8 tile scales
   after all the data. */
static void push_layout_place(push_layout *l)
{
    uint64_t at = 0;
    size_t i;
    for (i = 0; i < l->n; i++) {
        if (i == 0 || strcmp(l->dst[i], l->dst[i - 1]) != 0) at = (at + 63) & ~(uint64_t)63;
        l->t[i].offset = at;
        at += push_part_bytes(&l->t[i]);
    }
    for (i = 0; i < l->n; i++) {
        wsync_ctl_tensor *t = &l->t[i];
        if (t->to_dtype != WSYNC_DTYPE_F8_E4M3) continue;
        at = (at + 63) & ~(uint64_t)63;
        t->scale_offset = at;
        at += 4 * wsync_quantize_scale_count(t->row_count, push_part_cols(t), t->block);
    }
    l->bytes = at ? at : 64;
}

/* Whole tensors (of = 0) or trainer `rank`'s row shard of each of `of`
   as FSDP2 shards (torch.chunk: ceil(rows / of) rows per rank, the last
   ranks fewer or none; a rank with none leaves the tensor out); with
   groups, the MLP weights in mesh group 1. */
static int push_layout_make(const wsync_gen_model *m, unsigned rank, unsigned of, int groups, push_layout *l)
{
    size_t i;
    if (!push_layout_alloc(l, m->n_tensors)) return 0;
    for (i = 0; i < m->n_tensors; i++) {
        wsync_gen_tensor_info ti;
        uint64_t rows, rb, chunk;
        if (wsync_gen_model_tensor(m, i, &ti) != WSYNC_OK) return 0;
        rows = ti.shape[0];
        chunk = of ? (rows + of - 1) / of : rows;
        rb = of ? chunk * rank : 0;
        if (rb >= rows) continue;
        if (!push_part_add(l, m, i, rb, rows - rb < chunk ? rows - rb : chunk, 0, 0, NULL)) return 0;
        if (groups && strstr(ti.name, ".mlp.")) l->t[l->n - 1].group = 1;
    }
    push_layout_place(l);
    return 1;
}

/* Fused projections, as vLLM loads them: the first name is the fused one. */
static const char *const push_fused[][4] = {
    {"self_attn.qkv_proj.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
    {"self_attn.qkv_proj.bias", "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"},
    {"mlp.gate_up_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", NULL},
};

static int push_ends(const char *s, const char *suffix, size_t *prefix)
{
    size_t n = strlen(s), k = strlen(suffix);
    if (k > n || strcmp(s + n - k, suffix) != 0) return 0;
    *prefix = n - k;
    return 1;
}

/* Inference rank i of I under tensor parallelism: q/k/v and gate/up split
   by rows (output features) and fused; o_proj and down_proj split by
   columns (input features); embeddings and lm_head by rows (vocabulary);
   the rest (norms) whole. With fp8 the projection weights arrive as e4m3
   with tile scales; embeddings, biases and norms stay bf16. */
static int push_layout_tp(const wsync_gen_model *m, unsigned i, unsigned I, int fp8, unsigned block, push_layout *l)
{
    size_t k, n = m->n_tensors;
    unsigned char *done = (unsigned char *)calloc(n ? n : 1, 1);
    int ok = done && push_layout_alloc(l, n);
    for (k = 0; ok && k < n; k++) {
        wsync_gen_tensor_info ti;
        size_t g, j, pre = 0, kj;
        uint64_t rows, cols;
        if (done[k] || wsync_gen_model_tensor(m, k, &ti) != WSYNC_OK) continue;
        for (g = 0; g < sizeof push_fused / sizeof push_fused[0]; g++)
            for (j = 1; j < 4 && push_fused[g][j]; j++)
                if (push_ends(ti.name, push_fused[g][j], &pre)) goto fused;
        rows = ti.shape[0];
        cols = ti.rank > 1 ? ti.shape[1] : 1;
        if (ti.rank > 1 && (strstr(ti.name, "o_proj.weight") || strstr(ti.name, "down_proj.weight"))) {
            ok = push_part_add(l, m, k, 0, rows, cols * i / I, cols * (i + 1) / I - cols * i / I, NULL);
            if (ok && fp8) l->t[l->n - 1].to_dtype = WSYNC_DTYPE_F8_E4M3, l->t[l->n - 1].block = block;
        } else if (strstr(ti.name, "embed_tokens.weight") || strstr(ti.name, "lm_head.weight")) {
            ok = push_part_add(l, m, k, rows * i / I, rows * (i + 1) / I - rows * i / I, 0, 0, NULL);
        } else {
            ok = push_part_add(l, m, k, 0, rows, 0, 0, NULL);
        }
        done[k] = 1;
        continue;
    fused:
        for (j = 1; ok && j < 4 && push_fused[g][j]; j++) {
            char full[WSYNC_GEN_NAME_MAX + 16], fname[WSYNC_GEN_NAME_MAX + 16];
            wsync_gen_tensor_info tj;
            snprintf(full, sizeof full, "%.*s%s", (int)pre, ti.name, push_fused[g][j]);
            snprintf(fname, sizeof fname, "%.*s%s", (int)pre, ti.name, push_fused[g][0]);
            if (wsync_gen_model_find(m, full, &kj) != WSYNC_OK || done[kj]) continue;
            if (wsync_gen_model_tensor(m, kj, &tj) != WSYNC_OK) return 0;
            rows = tj.shape[0];
            ok = push_part_add(l, m, kj, rows * i / I, rows * (i + 1) / I - rows * i / I, 0, 0, fname);
            if (ok && fp8 && tj.rank > 1) l->t[l->n - 1].to_dtype = WSYNC_DTYPE_F8_E4M3, l->t[l->n - 1].block = block;
            done[kj] = 1;
        }
    }
    free(done);
    if (ok) push_layout_place(l);
    return ok;
}

/* Rank `rank` of a role's layout: what it joins with. */
int push_rank_layout(const wsync_gen_model *m, const cli_push_layout *o, int trainer, unsigned rank,
                     push_layout *l)
{
    if (trainer) return push_layout_make(m, rank, o->replica ? 0 : o->trainers, o->mesh_groups, l);
    return o->reshard ? push_layout_tp(m, rank, o->inference, o->fp8, o->block, l) : push_layout_make(m, 0, 0, 0, l);
}

wsync_result cli_push_plan(const wsync_gen_model *m, const cli_push_layout *o, wsync_plan **out, wsync_error *err)
{
    unsigned n = o->trainers + o->inference, i;
    push_layout *ls = (push_layout *)calloc(n ? n : 1, sizeof *ls);
    const wsync_ctl_tensor **tl = (const wsync_ctl_tensor **)calloc(n ? n : 1, sizeof *tl);
    uint32_t *nl = (uint32_t *)calloc(n ? n : 1, sizeof *nl);
    wsync_ctl_plan_input pi;
    wsync_plan_options po;
    wsync_result r = WSYNC_ERR_OUT_OF_MEMORY;
    *out = NULL;
    memset(&pi, 0, sizeof pi);
    if (!ls || !tl || !nl) goto oom;
    for (i = 0; i < n; i++) {
        if (!push_rank_layout(m, o, i < o->trainers, i < o->trainers ? i : i - o->trainers, &ls[i])) goto oom;
        tl[i] = ls[i].t;
        nl[i] = (uint32_t)ls[i].n;
    }
    /* the controller's planner options: push-demo gives it none */
    memset(&po, 0, sizeof po);
    po.nics_per_rank = 1;
    if ((r = wsync_ctl_plan_input_build(tl, nl, o->trainers, o->inference, NULL, &pi, err)) == WSYNC_OK)
        r = wsync_plan_build(&pi.input, &po, out, err);
    goto done;
oom:
    err->code = r;
    snprintf(err->message, sizeof err->message, "%s", "out of memory");
done:
    wsync_ctl_plan_input_free(&pi);
    for (i = 0; ls && i < n; i++) push_layout_free(&ls[i]);
    free(ls);
    free(tl);
    free(nl);
    return r;
}
