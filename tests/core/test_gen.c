/* test_gen.c - the training-like generator (tool/wsync_gen.h): shapes of
   the published models, determinism, and that its bf16 steps look like real
   AdamW training at an RL learning rate. Uses the `tiny` model only, so it
   stays fast under sanitizers. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#define WSYNC_GEN_IMPLEMENTATION
#include "tool/wsync_gen.h"
#include "check.h"

#include <math.h>

/* ---------------------------------------------------------------------- */

static wsync_gen_model tg_model(const char *name)
{
    wsync_gen_model m;
    memset(&m, 0, sizeof m);
    if (wsync_gen_model_lookup(name, &m) != WSYNC_OK) {
        printf("model %s missing\n", name);
        exit(1);
    }
    return m;
}

static void tg_expect_tensor(const wsync_gen_model *m, const char *name, wsync_gen_kind kind,
                             uint32_t rank, uint64_t d0, uint64_t d1)
{
    size_t idx = 0;
    wsync_gen_tensor_info ti;
    wsync_result r = wsync_gen_model_find(m, name, &idx);
    CHECK_MSG(r == WSYNC_OK, "%s not found in %s", name, m->name);
    if (r != WSYNC_OK) return;
    CHECK(wsync_gen_model_tensor(m, idx, &ti) == WSYNC_OK);
    CHECK_EQ_STR(ti.name, name);
    CHECK_EQ_INT(ti.index, idx);
    CHECK_MSG(ti.kind == kind, "%s: kind %d, expected %d", name, (int)ti.kind, (int)kind);
    CHECK_EQ_INT(ti.rank, rank);
    CHECK_EQ_U64(ti.shape[0], d0);
    if (rank == 2) CHECK_EQ_U64(ti.shape[1], d1);
    CHECK_EQ_U64(ti.nelem, rank == 2 ? d0 * d1 : d0);
}

static void tg_expect_absent(const wsync_gen_model *m, const char *name)
{
    CHECK_MSG(wsync_gen_model_find(m, name, NULL) == WSYNC_ERR_NOT_FOUND, "%s should not exist in %s",
              name, m->name);
}

/* Sum of shapes, names unique, every tensor of the right kind. */
static uint64_t tg_count_and_check(const wsync_gen_model *m, uint64_t *embedding)
{
    size_t i, j;
    uint64_t total = 0;
    wsync_gen_tensor_info *all = (wsync_gen_tensor_info *)malloc(m->n_tensors * sizeof *all);
    *embedding = 0;
    if (!all) return 0;
    for (i = 0; i < m->n_tensors; i++) {
        CHECK(wsync_gen_model_tensor(m, i, &all[i]) == WSYNC_OK);
        total += all[i].nelem;
        if (all[i].shape[0] == m->vocab_size && all[i].rank == 2) *embedding += all[i].nelem;
        CHECK(all[i].rank == 1 || all[i].rank == 2);
        CHECK((all[i].kind == WSYNC_GEN_KIND_NORM || all[i].kind == WSYNC_GEN_KIND_BIAS) ==
              (all[i].rank == 1));
        CHECK(strncmp(all[i].name, "model.", 6) == 0 || strcmp(all[i].name, "lm_head.weight") == 0);
    }
    for (i = 0; i < m->n_tensors; i++)
        for (j = i + 1; j < m->n_tensors; j++)
            CHECK_MSG(strcmp(all[i].name, all[j].name) != 0, "duplicate %s", all[i].name);
    CHECK(wsync_gen_model_tensor(m, m->n_tensors, &all[0]) == WSYNC_ERR_INVALID_ARGUMENT);
    free(all);
    return total;
}

static void test_models(void)
{
    wsync_gen_model m;
    uint64_t emb;
    size_t i;

    TEST_BEGIN("gen: model list and lookup");
    CHECK_EQ_INT(wsync_gen_model_count(), 3);
    for (i = 0; i < wsync_gen_model_count(); i++) {
        CHECK(wsync_gen_model_name(i) != NULL);
        CHECK(wsync_gen_model_lookup(wsync_gen_model_name(i), &m) == WSYNC_OK);
        CHECK_EQ_STR(m.name, wsync_gen_model_name(i));
    }
    CHECK(wsync_gen_model_name(wsync_gen_model_count()) == NULL);
    CHECK(wsync_gen_model_lookup("qwen3-0.6B-nope", &m) == WSYNC_ERR_NOT_FOUND);
    CHECK(wsync_gen_model_lookup(NULL, &m) == WSYNC_ERR_INVALID_ARGUMENT);
    memset(&m, 0, sizeof m);
    CHECK(wsync_gen_model_finish(&m) == WSYNC_ERR_INVALID_ARGUMENT);
    /* a model by hand: Qwen2.5-0.5B's published shape, 494 M parameters */
    m.name = "qwen2.5-0.5b";
    m.vocab_size = 151936;
    m.hidden_size = 896;
    m.num_layers = 24;
    m.intermediate_size = 4864;
    m.num_heads = 14;
    m.num_kv_heads = 2;
    m.head_dim = 64;
    m.qkv_bias = 1;
    m.tied = 1;
    CHECK(wsync_gen_model_finish(&m) == WSYNC_OK);
    CHECK_EQ_U64(m.n_params, 494032768u);
    CHECK_EQ_INT(m.n_tensors, 2 + 24 * 12);
    m.head_dim = (uint64_t)1 << 40;
    CHECK(wsync_gen_model_finish(&m) == WSYNC_ERR_INVALID_ARGUMENT);
    TEST_END();

    /* MODELS.md; published: 0.6 B parameters, 0.44 B non-embedding */
    TEST_BEGIN("gen: qwen3-0.6b shapes and parameter count");
    m = tg_model("qwen3-0.6b");
    CHECK_EQ_INT(m.n_tensors, 1 + 28 * 11 + 1);
    CHECK_EQ_U64(m.n_params, 596049920u);
    CHECK_EQ_U64(tg_count_and_check(&m, &emb), m.n_params);
    CHECK_EQ_U64(emb, 151936u * 1024u); /* tied: one embedding */
    CHECK_EQ_U64(m.n_params - emb, 440467456u);
    tg_expect_tensor(&m, "model.embed_tokens.weight", WSYNC_GEN_KIND_EMBEDDING, 2, 151936, 1024);
    tg_expect_tensor(&m, "model.layers.0.self_attn.q_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 2048, 1024);
    tg_expect_tensor(&m, "model.layers.0.self_attn.k_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 1024, 1024);
    tg_expect_tensor(&m, "model.layers.0.self_attn.v_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 1024, 1024);
    tg_expect_tensor(&m, "model.layers.0.self_attn.o_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 1024, 2048);
    tg_expect_tensor(&m, "model.layers.0.self_attn.q_norm.weight", WSYNC_GEN_KIND_NORM, 1, 128, 0);
    tg_expect_tensor(&m, "model.layers.0.self_attn.k_norm.weight", WSYNC_GEN_KIND_NORM, 1, 128, 0);
    tg_expect_tensor(&m, "model.layers.13.mlp.gate_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 3072, 1024);
    tg_expect_tensor(&m, "model.layers.13.mlp.up_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 3072, 1024);
    tg_expect_tensor(&m, "model.layers.13.mlp.down_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 1024, 3072);
    tg_expect_tensor(&m, "model.layers.27.input_layernorm.weight", WSYNC_GEN_KIND_NORM, 1, 1024, 0);
    tg_expect_tensor(&m, "model.layers.27.post_attention_layernorm.weight", WSYNC_GEN_KIND_NORM, 1, 1024, 0);
    tg_expect_tensor(&m, "model.norm.weight", WSYNC_GEN_KIND_NORM, 1, 1024, 0);
    tg_expect_absent(&m, "lm_head.weight");
    tg_expect_absent(&m, "model.layers.0.self_attn.q_proj.bias");
    tg_expect_absent(&m, "model.layers.28.input_layernorm.weight");
    {
        wsync_gen_tensor_info ti;
        CHECK(wsync_gen_model_tensor(&m, 0, &ti) == WSYNC_OK);
        CHECK_EQ_INT(ti.sparse_rows, 0); /* tied: lm_head's gradient reaches every row */
    }
    TEST_END();

    /* published: 7.61 B parameters, 6.53 B non-embedding */
    TEST_BEGIN("gen: qwen2.5-7b shapes and parameter count");
    m = tg_model("qwen2.5-7b");
    CHECK_EQ_INT(m.n_tensors, 1 + 28 * 12 + 2);
    CHECK_EQ_U64(m.n_params, 7615616512ull);
    CHECK_EQ_U64(tg_count_and_check(&m, &emb), m.n_params);
    CHECK_EQ_U64(emb, 2ull * 152064u * 3584u);
    CHECK_EQ_U64(m.n_params - emb, 6525621760ull);
    tg_expect_tensor(&m, "model.embed_tokens.weight", WSYNC_GEN_KIND_EMBEDDING, 2, 152064, 3584);
    tg_expect_tensor(&m, "lm_head.weight", WSYNC_GEN_KIND_MATRIX, 2, 152064, 3584);
    tg_expect_tensor(&m, "model.layers.0.self_attn.q_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 3584, 3584);
    tg_expect_tensor(&m, "model.layers.0.self_attn.q_proj.bias", WSYNC_GEN_KIND_BIAS, 1, 3584, 0);
    tg_expect_tensor(&m, "model.layers.0.self_attn.k_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 512, 3584);
    tg_expect_tensor(&m, "model.layers.0.self_attn.k_proj.bias", WSYNC_GEN_KIND_BIAS, 1, 512, 0);
    tg_expect_tensor(&m, "model.layers.0.self_attn.v_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 512, 3584);
    tg_expect_tensor(&m, "model.layers.0.self_attn.v_proj.bias", WSYNC_GEN_KIND_BIAS, 1, 512, 0);
    tg_expect_tensor(&m, "model.layers.27.self_attn.o_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 3584, 3584);
    tg_expect_tensor(&m, "model.layers.27.mlp.gate_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 18944, 3584);
    tg_expect_tensor(&m, "model.layers.27.mlp.up_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 18944, 3584);
    tg_expect_tensor(&m, "model.layers.27.mlp.down_proj.weight", WSYNC_GEN_KIND_MATRIX, 2, 3584, 18944);
    tg_expect_tensor(&m, "model.layers.5.input_layernorm.weight", WSYNC_GEN_KIND_NORM, 1, 3584, 0);
    tg_expect_tensor(&m, "model.layers.5.post_attention_layernorm.weight", WSYNC_GEN_KIND_NORM, 1, 3584, 0);
    tg_expect_tensor(&m, "model.norm.weight", WSYNC_GEN_KIND_NORM, 1, 3584, 0);
    tg_expect_absent(&m, "model.layers.0.self_attn.q_norm.weight");
    {
        wsync_gen_tensor_info ti;
        CHECK(wsync_gen_model_tensor(&m, 0, &ti) == WSYNC_OK);
        CHECK_EQ_INT(ti.sparse_rows, 1);
        /* named_parameters() order: the last is lm_head, the one before model.norm */
        CHECK(wsync_gen_model_tensor(&m, m.n_tensors - 1, &ti) == WSYNC_OK);
        CHECK_EQ_STR(ti.name, "lm_head.weight");
        CHECK(wsync_gen_model_tensor(&m, 1, &ti) == WSYNC_OK);
        CHECK_EQ_STR(ti.name, "model.layers.0.self_attn.q_proj.weight");
        CHECK(wsync_gen_model_tensor(&m, 2, &ti) == WSYNC_OK);
        CHECK_EQ_STR(ti.name, "model.layers.0.self_attn.q_proj.bias");
    }
    TEST_END();

    TEST_BEGIN("gen: tiny is small and has every kind");
    m = tg_model("tiny");
    CHECK(m.n_params >= 1000000u && m.n_params <= 2000000u);
    CHECK_EQ_U64(tg_count_and_check(&m, &emb), m.n_params);
    tg_expect_tensor(&m, "model.layers.3.self_attn.k_proj.bias", WSYNC_GEN_KIND_BIAS, 1, 64, 0);
    tg_expect_tensor(&m, "model.layers.3.self_attn.k_norm.weight", WSYNC_GEN_KIND_NORM, 1, 32, 0);
    tg_expect_tensor(&m, "lm_head.weight", WSYNC_GEN_KIND_MATRIX, 2, 2048, 128);
    TEST_END();
}

/* ---------------------------------------------------------------------- */

static void test_rng(void)
{
    wsync_gen_rng a, b;
    int i, same = 1;
    double s1 = 0, s2 = 0, s4 = 0;
    long tail3 = 0;
    const int n = 400000;

    TEST_BEGIN("gen: rng is seedable and deterministic");
    wsync_gen_rng_seed(&a, 42);
    wsync_gen_rng_seed(&b, 42);
    for (i = 0; i < 1000; i++) same &= wsync_gen_rng_next(&a) == wsync_gen_rng_next(&b);
    CHECK(same);
    wsync_gen_rng_seed(&b, 43);
    CHECK(wsync_gen_rng_next(&a) != wsync_gen_rng_next(&b));
    CHECK(wsync_gen_hash(1, 0) != wsync_gen_hash(1, 1));
    CHECK(wsync_gen_hash(1, 0) != wsync_gen_hash(2, 0));
    for (i = 0; i < 1000; i++) {
        float u = wsync_gen_rng_uniform(&a);
        if (!(u > 0.0f && u < 1.0f)) same = 0;
    }
    CHECK(same);
    TEST_END();

    TEST_BEGIN("gen: normal samples have the moments of N(0,1)");
    for (i = 0; i < n; i++) {
        double x = wsync_gen_normal_bits(wsync_gen_hash(7, (uint64_t)i));
        s1 += x;
        s2 += x * x;
        s4 += x * x * x * x;
        tail3 += fabs(x) > 3.0;
    }
    s1 /= n, s2 /= n, s4 /= n;
    CHECK_MSG(fabs(s1) < 0.01, "mean %g", s1);
    CHECK_MSG(fabs(s2 - 1.0) < 0.01, "variance %g", s2);
    CHECK_MSG(fabs(s4 / (s2 * s2) - 3.0) < 0.06, "kurtosis %g", s4 / (s2 * s2));
    CHECK_MSG(fabs((double)tail3 / n - 0.0026998) < 0.0004, "P(|x|>3) %g", (double)tail3 / n);
    s1 = s2 = 0;
    for (i = 0; i < 100000; i++) {
        double x = wsync_gen_rng_normal(&a);
        s1 += x;
        s2 += x * x;
    }
    CHECK(fabs(s1 / 100000) < 0.02 && fabs(s2 / 100000 - 1.0) < 0.02);
    TEST_END();
}

/* ---------------------------------------------------------------------- */

static int tg_images_equal(const wsync_gen *a, const wsync_gen *b)
{
    size_t i;
    for (i = 0; i < a->model.n_tensors; i++)
        if (memcmp(a->bf16[i], b->bf16[i], (size_t)a->tensors[i].count * 2) != 0) return 0;
    return 1;
}

static int tg_masters_equal(const wsync_gen *a, const wsync_gen *b)
{
    size_t i;
    for (i = 0; i < a->model.n_tensors; i++)
        if (memcmp(a->tensors[i].master, b->tensors[i].master, (size_t)a->tensors[i].count * 4) != 0)
            return 0;
    return 1;
}

static void test_determinism(void)
{
    wsync_gen_model m = tg_model("tiny");
    wsync_gen_config c;
    wsync_gen a, b;
    int s;

    TEST_BEGIN("gen: same seed, same bytes; another seed, other bytes");
    wsync_gen_config_default(&c);
    c.seed = 11;
    CHECK(wsync_gen_init(&a, &m, &c) == WSYNC_OK);
    CHECK(wsync_gen_init(&b, &m, &c) == WSYNC_OK);
    CHECK(tg_images_equal(&a, &b));
    for (s = 0; s < 3; s++) {
        wsync_gen_step(&a);
        wsync_gen_step(&b);
    }
    CHECK_EQ_INT(a.step, 3);
    CHECK(tg_images_equal(&a, &b) && tg_masters_equal(&a, &b));
    wsync_gen_free(&b);
    c.seed = 12;
    CHECK(wsync_gen_init(&b, &m, &c) == WSYNC_OK);
    for (s = 0; s < 3; s++) wsync_gen_step(&b);
    {
        size_t i, differ = 0;
        for (i = 0; i < m.n_tensors; i++)
            differ += memcmp(a.bf16[i], b.bf16[i], (size_t)a.tensors[i].count * 2) != 0;
        CHECK_EQ_INT(differ, m.n_tensors); /* every tensor, norms included */
    }
    wsync_gen_free(&b);
    TEST_END();

    TEST_BEGIN("gen: the thread count does not change the output");
    c.seed = 11;
    c.threads = 3;
    CHECK(wsync_gen_init(&b, &m, &c) == WSYNC_OK);
    for (s = 0; s < 3; s++) wsync_gen_step(&b);
    CHECK(tg_images_equal(&a, &b) && tg_masters_equal(&a, &b));
    wsync_gen_free(&b);
    TEST_END();

    TEST_BEGIN("gen: a slice holds exactly the whole tensor's elements");
    {
        /* the embedding (2048 x 128): a slice starting mid-row; lm_head whole */
        size_t idx[2] = {0, m.n_tensors - 1};
        uint64_t begin[2] = {100003, 0}, count[2] = {70001, 0};
        int k;
        c.threads = 1;
        for (k = 0; k < 2; k++) {
            wsync_gen_tensor t;
            uint64_t n;
            uint16_t *img;
            CHECK(wsync_gen_tensor_init(&t, &m, idx[k], begin[k], count[k], &c, NULL) == WSYNC_OK);
            n = t.count;
            CHECK_EQ_U64(n, count[k] ? count[k] : t.info.nelem);
            img = (uint16_t *)malloc((size_t)n * 2);
            for (s = 0; s < 3; s++) wsync_gen_tensor_step(&t, s == 2 ? img : NULL);
            CHECK_EQ_U64(t.step, 3);
            CHECK(memcmp(img, a.bf16[idx[k]] + begin[k], (size_t)n * 2) == 0);
            CHECK(memcmp(t.master, a.tensors[idx[k]].master + begin[k], (size_t)n * 4) == 0);
            wsync_gen_tensor_image(&t, img);
            CHECK(memcmp(img, a.bf16[idx[k]] + begin[k], (size_t)n * 2) == 0);
            free(img);
            wsync_gen_tensor_free(&t);
        }
    }
    TEST_END();

    TEST_BEGIN("gen: bad arguments are refused");
    {
        wsync_gen_tensor t;
        wsync_gen_tensor_info ti;
        CHECK(wsync_gen_model_tensor(&m, 0, &ti) == WSYNC_OK);
        CHECK(wsync_gen_tensor_init(&t, &m, m.n_tensors, 0, 0, &c, NULL) == WSYNC_ERR_INVALID_ARGUMENT);
        CHECK(t.master == NULL);
        CHECK(wsync_gen_tensor_init(&t, &m, 0, ti.nelem + 1, 0, &c, NULL) == WSYNC_ERR_INVALID_ARGUMENT);
        CHECK(wsync_gen_tensor_init(&t, &m, 0, 10, ti.nelem, &c, NULL) == WSYNC_ERR_INVALID_ARGUMENT);
        CHECK(wsync_gen_tensor_init(&t, NULL, 0, 0, 0, &c, NULL) == WSYNC_ERR_INVALID_ARGUMENT);
        {
            wsync_gen_config bad;
            wsync_gen bg;
            wsync_gen_config_default(&bad);
            bad.beta2 = 1.0;
            CHECK(wsync_gen_tensor_init(&t, &m, 0, 0, 0, &bad, NULL) == WSYNC_ERR_INVALID_ARGUMENT);
            CHECK(wsync_gen_init(&bg, &m, &bad) == WSYNC_ERR_INVALID_ARGUMENT);
            CHECK(bg.tensors == NULL);
            wsync_gen_config_default(&bad);
            bad.grad_scale = 0;
            CHECK(wsync_gen_tensor_init(&t, &m, 0, 0, 0, &bad, NULL) == WSYNC_ERR_INVALID_ARGUMENT);
            wsync_gen_config_default(&bad);
            bad.mode = (wsync_gen_mode)7;
            CHECK(wsync_gen_tensor_init(&t, &m, 0, 0, 0, &bad, NULL) == WSYNC_ERR_INVALID_ARGUMENT);
        }
        /* NULL config: the defaults */
        CHECK(wsync_gen_tensor_init(&t, &m, 0, 0, 16, NULL, NULL) == WSYNC_OK);
        CHECK(t.cfg.lr == 1e-6 && t.m != NULL);
        wsync_gen_tensor_free(&t);
        wsync_gen_tensor_free(&t); /* harmless twice */
    }
    TEST_END();

    wsync_gen_free(&a);
}

/* ---------------------------------------------------------------------- */

static int tg_cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return a < b ? -1 : a > b;
}

static void test_init_distribution(void)
{
    wsync_gen_model m = tg_model("tiny");
    wsync_gen g;
    size_t i;
    uint64_t k, nm = 0, nn = 0, nb = 0, big = 0;
    float *mat, *bias;
    double norm_sum = 0, norm_far = 0;

    TEST_BEGIN("gen: initial weights look pretrained");
    CHECK(wsync_gen_init(&g, &m, NULL) == WSYNC_OK);
    mat = (float *)malloc((size_t)m.n_params * 4);
    bias = (float *)malloc((size_t)m.n_params * 4);
    for (i = 0; i < m.n_tensors; i++) {
        const wsync_gen_tensor *t = &g.tensors[i];
        for (k = 0; k < t->count; k++) {
            float w = t->master[k];
            /* the image is the round-to-nearest-even cast of the master */
            if (g.bf16[i][k] != wsync_f32_to_bf16(w)) big = UINT64_MAX;
            if (t->info.kind == WSYNC_GEN_KIND_NORM) {
                norm_sum += w;
                norm_far += fabs(w - 1.0) > 0.25;
                nn++;
            } else if (t->info.kind == WSYNC_GEN_KIND_BIAS) {
                bias[nb++] = fabsf(w);
            } else {
                mat[nm++] = fabsf(w);
                big += fabsf(w) > 0.1f;
            }
        }
    }
    CHECK_MSG(big != UINT64_MAX, "an image is not the cast of its master");
    qsort(mat, (size_t)nm, 4, tg_cmp_float);
    qsort(bias, (size_t)nb, 4, tg_cmp_float);
    CHECK_MSG(mat[nm / 2] > 0.018f && mat[nm / 2] < 0.022f, "median |w| %g", mat[nm / 2]);
    /* some heavy tail: N(0, 0.03) alone has P(|w| > 0.1) ~ 8e-4 */
    CHECK_MSG((double)big / (double)nm > 9e-4 && (double)big / (double)nm < 5e-3, "P(|w|>0.1) %g",
              (double)big / (double)nm);
    CHECK_MSG(mat[nm - 1] < 2.0f, "max |w| %g", mat[nm - 1]);
    CHECK_MSG(fabs(norm_sum / (double)nn - 1.0) < 0.02, "mean norm weight %g", norm_sum / (double)nn);
    CHECK_MSG(norm_far / (double)nn < 0.01, "norm weights far from 1: %g", norm_far / (double)nn);
    CHECK_MSG(bias[nb / 2] > 0.004f && bias[nb / 2] < 0.01f, "median |bias| %g", bias[nb / 2]);
    free(mat);
    free(bias);
    wsync_gen_free(&g);
    TEST_END();
}

/* ---------------------------------------------------------------------- */

/* Runs `steps` steps of tiny, statistics of every step (st[0]: 0 -> 1). */
static void tg_run(const wsync_gen_config *c, int steps, wsync_gen_stats *st, wsync_gen_stats *norms)
{
    wsync_gen_model m = tg_model("tiny");
    wsync_gen g;
    uint16_t **prev;
    size_t i;
    int s;
    memset(st, 0, (size_t)steps * sizeof *st);
    if (norms) memset(norms, 0, sizeof *norms);
    if (wsync_gen_init(&g, &m, c) != WSYNC_OK) return;
    prev = (uint16_t **)malloc(m.n_tensors * sizeof *prev);
    for (i = 0; i < m.n_tensors; i++) prev[i] = (uint16_t *)malloc((size_t)g.tensors[i].count * 2);
    for (s = 0; s < steps; s++) {
        for (i = 0; i < m.n_tensors; i++) memcpy(prev[i], g.bf16[i], (size_t)g.tensors[i].count * 2);
        wsync_gen_step(&g);
        for (i = 0; i < m.n_tensors; i++) {
            wsync_gen_stats_add(&st[s], prev[i], g.bf16[i], (size_t)g.tensors[i].count);
            if (norms && g.tensors[i].info.kind == WSYNC_GEN_KIND_NORM)
                wsync_gen_stats_add(norms, prev[i], g.bf16[i], (size_t)g.tensors[i].count);
        }
    }
    for (i = 0; i < m.n_tensors; i++) free(prev[i]);
    free(prev);
    wsync_gen_free(&g);
}

static double tg_frac(const wsync_gen_stats *s)
{
    return s->total ? (double)s->changed / (double)s->total : 0.0;
}

/* Change rate for |w| in [2^e, 2^(e+1)). */
static double tg_rate(const wsync_gen_stats *s, int e)
{
    int f = e + 127;
    return s->exp_total[f] ? (double)s->exp_changed[f] / (double)s->exp_total[f] : -1.0;
}

static void test_steps(void)
{
    enum { STEPS = 8 };
    wsync_gen_stats st[STEPS], lt[STEPS], norms;
    wsync_gen_config c;
    int s, e;

    wsync_gen_config_default(&c);
    tg_run(&c, STEPS, st, &norms);

    TEST_BEGIN("gen: per-step change fraction is realistic");
    for (s = 0; s < STEPS; s++)
        if (check__is_verbose())
            printf("     step %d: %.3f%% changed, +-1 %.3f\n", s + 1, 100 * tg_frac(&st[s]),
                   (double)st[s].step1 / (double)st[s].changed);
    /* AdamW's cold start: the first step moves every element by lr */
    CHECK_MSG(tg_frac(&st[0]) > 1.3 * tg_frac(&st[STEPS - 1]), "step 1 %g, step %d %g", tg_frac(&st[0]),
              STEPS, tg_frac(&st[STEPS - 1]));
    for (s = 1; s < STEPS; s++) CHECK(tg_frac(&st[s]) <= tg_frac(&st[s - 1]) * 1.02);
    /* after warm-up: DESIGN.md says > 98% identical; 1-3% for qwen shapes */
    for (s = 4; s < STEPS; s++)
        CHECK_MSG(tg_frac(&st[s]) > 0.01 && tg_frac(&st[s]) < 0.03, "step %d: %g", s + 1, tg_frac(&st[s]));
    TEST_END();

    TEST_BEGIN("gen: changes are mostly one bf16 step");
    for (s = 0; s < STEPS; s++) {
        double c1 = (double)st[s].step1 / (double)st[s].changed;
        double c2 = (double)st[s].step2 / (double)st[s].changed;
        CHECK_MSG(c1 > 0.8 && c1 < 0.95, "step %d: +-1 share %g", s + 1, c1);
        CHECK_MSG(c2 < 0.1, "step %d: +-2 share %g", s + 1, c2);
    }
    TEST_END();

    TEST_BEGIN("gen: small weights change more often than large ones");
    for (s = 0; s < STEPS; s += STEPS - 1) {
        /* the bf16 spacing doubles with each exponent: the rate about halves */
        for (e = -11; e <= -5; e++) {
            double lo = tg_rate(&st[s], e), hi = tg_rate(&st[s], e + 1);
            CHECK_MSG(lo > 0 && hi >= 0 && lo > 1.4 * hi && lo < 2.8 * hi,
                      "step %d: rate(2^%d) %g vs rate(2^%d) %g", s + 1, e, lo, e + 1, hi);
        }
        CHECK(tg_rate(&st[s], -16) > 0.9);
    }
    TEST_END();

    TEST_BEGIN("gen: norm weights stay near 1 and rarely change");
    CHECK_MSG(tg_frac(&norms) < 0.002, "norms: %g changed", tg_frac(&norms));
    CHECK(norms.exp_total[127] + norms.exp_total[126] + norms.exp_total[128] > norms.total * 99 / 100);
    TEST_END();

    TEST_BEGIN("gen: light mode has AdamW's steady-state statistics");
    c.mode = WSYNC_GEN_LIGHT;
    tg_run(&c, 3, lt, NULL);
    for (s = 0; s < 3; s++) {
        double r = tg_frac(&lt[s]) / tg_frac(&st[STEPS - 1]);
        CHECK_MSG(r > 0.85 && r < 1.25, "light step %d: %g vs adamw step %d: %g", s + 1, tg_frac(&lt[s]),
                  STEPS, tg_frac(&st[STEPS - 1]));
    }
    TEST_END();

    TEST_BEGIN("gen: warm start skips AdamW's cold start");
    c.mode = WSYNC_GEN_ADAMW;
    c.warm_start = 1;
    tg_run(&c, 2, lt, NULL);
    for (s = 0; s < 2; s++) {
        double r = tg_frac(&lt[s]) / tg_frac(&st[STEPS - 1]);
        CHECK_MSG(r > 0.8 && r < 1.25, "warm step %d: %g vs step %d: %g", s + 1, tg_frac(&lt[s]), STEPS,
                  tg_frac(&st[STEPS - 1]));
    }
    TEST_END();

    TEST_BEGIN("gen: the learning rate scales the change rate");
    c.warm_start = 0;
    c.lr = 1e-5;
    tg_run(&c, 1, lt, NULL);
    CHECK_MSG(tg_frac(&lt[0]) > 4 * tg_frac(&st[0]), "lr 1e-5: %g, lr 1e-6: %g", tg_frac(&lt[0]),
              tg_frac(&st[0]));
    TEST_END();
}

/* AdamW's first step moves every element by lr * |g| / (|g| + eps): lr where
   the gradient is well above eps. */
static void test_adamw_first_step(void)
{
    wsync_gen_model m = tg_model("tiny");
    wsync_gen_tensor t;
    float *w0;
    uint64_t k, off = 0, off_v = 0;
    size_t idx = 1; /* model.layers.0.self_attn.q_proj.weight */

    TEST_BEGIN("gen: AdamW's first step is lr * g / (|g| + eps)");
    CHECK(wsync_gen_tensor_init(&t, &m, idx, 0, 0, NULL, NULL) == WSYNC_OK);
    w0 = (float *)malloc((size_t)t.count * 4);
    memcpy(w0, t.master, (size_t)t.count * 4);
    wsync_gen_tensor_step(&t, NULL);
    for (k = 0; k < t.count; k++) {
        double d = fabs((double)t.master[k] - (double)w0[k]);
        double g = fabs((double)t.m[k]) / 0.1; /* m = (1 - beta1) g */
        double want = 1e-6 * g / (g + 1e-8);   /* lr * |g| / (|g| + eps) */
        if (fabs(d - want) > 1e-6 * 1e-3 + 1e-7 * fabs(w0[k])) off++;
        /* the moments: m = 0.1 g, v = 0.001 g^2 */
        if (fabsf(t.v[k] - 0.1f * t.m[k] * t.m[k]) > 1e-5f * t.v[k]) off_v++;
    }
    CHECK_MSG(off == 0, "%llu elements moved by other than lr", (unsigned long long)off);
    CHECK_MSG(off_v == 0, "%llu elements with v != 0.1 m^2", (unsigned long long)off_v);
    free(w0);
    wsync_gen_tensor_free(&t);
    TEST_END();

    TEST_BEGIN("gen: light mode keeps no moments");
    {
        wsync_gen_config c;
        wsync_gen_config_default(&c);
        c.mode = WSYNC_GEN_LIGHT;
        CHECK(wsync_gen_tensor_init(&t, &m, idx, 0, 0, &c, NULL) == WSYNC_OK);
        CHECK(t.m == NULL && t.v == NULL && t.master != NULL);
        CHECK_EQ_U64(wsync_gen_state_bytes(WSYNC_GEN_LIGHT, 10), 40);
        CHECK_EQ_U64(wsync_gen_state_bytes(WSYNC_GEN_ADAMW, 10), 120);
        wsync_gen_tensor_free(&t);
    }
    TEST_END();
}

/* Rows of an untied input embedding get a gradient only when their token is
   in the batch; low token ids are frequent. */
static void test_sparse_rows(void)
{
    wsync_gen_model m = tg_model("tiny");
    wsync_gen_config c;
    wsync_gen_tensor t;
    uint16_t *a, *b;
    uint64_t r, k, cols, head = 0, tail = 0, n_tail = 0;

    TEST_BEGIN("gen: untied embedding rows move only when their token is in the batch");
    wsync_gen_config_default(&c);
    c.embed_batch_tokens = 512;
    c.lr = 1e-5;
    CHECK(wsync_gen_tensor_init(&t, &m, 0, 0, 0, &c, NULL) == WSYNC_OK);
    CHECK_EQ_INT(t.info.sparse_rows, 1);
    cols = t.info.shape[1];
    a = (uint16_t *)malloc((size_t)t.count * 2);
    b = (uint16_t *)malloc((size_t)t.count * 2);
    wsync_gen_tensor_image(&t, a);
    wsync_gen_tensor_step(&t, b);
    for (r = 0; r < t.info.shape[0]; r++) {
        uint64_t changed = 0;
        for (k = 0; k < cols; k++) changed += a[r * cols + k] != b[r * cols + k];
        if (r < 16) head += changed > 0;
        if (r >= 1024) {
            tail += changed > 0;
            n_tail++;
        }
    }
    CHECK_MSG(head >= 14, "%llu of the 16 most frequent rows moved", (unsigned long long)head);
    CHECK_MSG(tail * 10 < n_tail, "%llu of %llu rare rows moved", (unsigned long long)tail,
              (unsigned long long)n_tail);
    CHECK(tail > 0);
    free(a);
    free(b);
    wsync_gen_tensor_free(&t);
    TEST_END();
}

/* ---------------------------------------------------------------------- */

static void test_stats_and_write(void)
{
    wsync_gen_model m = tg_model("tiny");
    wsync_gen g;
    wsync_st_file f;
    wsync_error err;
    uint8_t *buf;
    size_t i, cap = 4u << 20;
    wsync_buffer wb;

    TEST_BEGIN("gen: ordered bf16 integers");
    CHECK_EQ_INT(wsync_gen_bf16_ordered(0x0000), 0x8000);
    CHECK_EQ_INT(wsync_gen_bf16_ordered(0x8000), 0x7FFF);
    CHECK_EQ_INT(wsync_gen_bf16_ordered(0x0001), 0x8001);
    CHECK_EQ_INT(wsync_gen_bf16_ordered(0x8001), 0x7FFE);
    {
        int ok = 1;
        float x;
        for (x = -3.0f; x < 3.0f; x += 0.01f) {
            uint16_t h0 = wsync_f32_to_bf16(x), h1 = wsync_f32_to_bf16(x + 0.01f);
            if (wsync_bf16_to_f32(h0) < wsync_bf16_to_f32(h1) &&
                !(wsync_gen_bf16_ordered(h0) < wsync_gen_bf16_ordered(h1)))
                ok = 0;
        }
        CHECK(ok);
    }
    {
        uint16_t base[4] = {0x3C00, 0x3C00, 0x0000, 0x3F80};
        uint16_t next[4] = {0x3C01, 0x3BFE, 0x8000, 0x3F80};
        wsync_gen_stats s;
        memset(&s, 0, sizeof s);
        wsync_gen_stats_add(&s, base, next, 4);
        CHECK_EQ_U64(s.total, 4);
        CHECK_EQ_U64(s.changed, 3);
        CHECK_EQ_U64(s.step1, 2); /* +1, and +0 -> -0 */
        CHECK_EQ_U64(s.step2, 1);
        CHECK_EQ_U64(s.exp_changed[0x78], 2);
        CHECK_EQ_U64(s.exp_total[0x7F], 1);
    }
    TEST_END();

    TEST_BEGIN("gen: the model as a safetensors file");
    CHECK(wsync_gen_init(&g, &m, NULL) == WSYNC_OK);
    wsync_gen_step(&g);
    buf = (uint8_t *)malloc(cap);
    wb.bytes = buf;
    wb.cap = cap;
    wb.len = 0;
    CHECK(wsync_gen_write(&g, wsync_buffer_sink, &wb, &err) == WSYNC_OK);
    CHECK(wsync_st_parse(buf, wb.len, NULL, &f, &err) == WSYNC_OK);
    CHECK_EQ_INT(f.n_tensors, m.n_tensors);
    CHECK(wsync_st_metadata_get(&f, "step") && strcmp(wsync_st_metadata_get(&f, "step"), "1") == 0);
    CHECK(wsync_st_metadata_get(&f, "model") && strcmp(wsync_st_metadata_get(&f, "model"), "tiny") == 0);
    for (i = 0; i < m.n_tensors; i++) {
        const wsync_st_tensor *t = wsync_st_find(&f, g.tensors[i].info.name);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK(t->dtype == WSYNC_DTYPE_BF16);
        CHECK_EQ_INT(t->rank, g.tensors[i].info.rank);
        CHECK_EQ_U64(t->shape[0], g.tensors[i].info.shape[0]);
        CHECK_EQ_U64(t->nelem, g.tensors[i].info.nelem);
        CHECK(memcmp(t->data, g.bf16[i], (size_t)t->nelem * 2) == 0);
    }
    wsync_st_free(&f);
    free(buf);
    wsync_gen_free(&g);
    TEST_END();
}

int main(void)
{
    test_models();
    test_rng();
    test_determinism();
    test_init_distribution();
    test_steps();
    test_adamw_first_step();
    test_sparse_rows();
    test_stats_and_write();
    return check_summary();
}
