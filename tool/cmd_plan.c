/* cmd_plan.c - wsync plan: the direct path's static schedule for a model's
   real tensor list, and its simulated transfer time. Part of the
   command-line tool (cli.h); a thin layer over wsync_rdma.h: layout, build,
   stats, simulate. */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *plan_usage =
    "usage: wsync plan --model kimi-k2|qwen3-0.6b|qwen2.5-7b --trainers T --inference I\n"
    "       [--replicas R] [--nics-per-rank K] [--nic-gbps G] [--dtype fp8|bf16]\n"
    "       [--shards-only] [--one-group] [--task-us U] [--watermark-mb M] [--pace G|off] [--json]\n"
    "       [--density D] [--fp8-bytes F] [--fp8-scales F] [--mem-gbps G] [--dense-above F]\n"
    "       [--staging F] [--verify-all] [--diff-ratio R] [--pack-ratio R] [--scatter-ratio R]\n"
    "       [--verify-ratio R] [--quant-ratio R]\n"
    "       [--cpus N] [--nic-senders N] [--copy-gbps G] [--recv-gbps G|free] [--barrier-us U]\n"
    "\n"
    "Plans the per-step transfers from T trainer ranks (bf16, FSDP row shards;\n"
    "any rank of the mesh can all-gather a tensor) to R inference replicas of\n"
    "I/R ranks each (tensor parallel as vLLM, routed experts whole on rank\n"
    "e mod I/R), and simulates them at G Gb/s per NIC (K NICs per rank).\n"
    "Prints planning time, tasks, bytes per sending and receiving NIC, imbalance\n"
    "(busiest over mean), the bound (busiest NIC's bytes over its rate) and the\n"
    "predicted time (a replay of the schedule: mesh-group barriers, per-task\n"
    "start-up, gather/quantize stages, FIFO NICs; the senders paced, and also\n"
    "first come, first served).\n"
    "  --dtype          fp8: projections and experts in fp8 e4m3 with 128x128 block\n"
    "                   scales (default for kimi-k2); bf16 (default otherwise)\n"
    "  --shards-only    trainers send only rows they hold (no all-gather)\n"
    "  --one-group      experts in the same mesh group as the rest (no barrier)\n"
    "  --task-us        per-task start-up in the simulation [5]\n"
    "  --watermark-mb   temporary memory per trainer rank in the simulation [none]\n"
    "  --pace           the executor's pacing (wsync_controller_options.pace_gbps): no\n"
    "                   sender starts a task before its planned start read at G Gb/s\n"
    "                   [--nic-gbps]; off: senders start each task as soon as they can\n"
    "                   and receivers serve them first come, first served\n"
    "A sparse step of the same plan is predicted beside the dense one (the pairs, regions\n"
    "and staging as planned; each region's changes packed, written into the receiver's\n"
    "staging, scattered and verified there; the phases one after another, each rate a\n"
    "ratio of --mem-gbps measured by bench/bench_sparse.c; the time by phase, and the\n"
    "phase that bounds it):\n"
    "  --density        bf16 elements changed per step [0.0161, measured on the generator's\n"
    "                   qwen3-0.6b]\n"
    "  --fp8-bytes      fp8 bytes moved per step, in tiles whose scale held [0.0013]\n"
    "  --fp8-scales     fp8 tiles whose scale moved (sent whole) [0.00015]\n"
    "  --mem-gbps       a rank's memcpy rate, Gb/s [the preparations' copy rate, 13/8 of\n"
    "                   --nic-gbps]\n"
    "  --dense-above    a region goes dense when its sparse bytes exceed this fraction\n"
    "                   of its dense bytes [where the rates break even]\n"
    "  --staging        staging per receiving NIC, a fraction of its dense bytes [no limit]\n"
    "  --verify-all     receivers digest every byte, not only what the step wrote\n";

static const char *plan_usage_more =
    "  --diff-ratio, --pack-ratio, --scatter-ratio, --verify-ratio, --quant-ratio\n"
    "                   a phase's rate over --mem-gbps [bench/bench_sparse.c's, the library's\n"
    "                   WSYNC_PLAN_SPARSE_*]; bench_sparse --ranks measures them as the ranks\n"
    "                   run them\n"
    "One host (the constants push-demo --bench measures; bench/bench_sim_check.sh passes them):\n"
    "  --cpus           the cores every rank shares: each phase takes at least all ranks'\n"
    "                   work over them [0: a core per rank]\n"
    "  --nic-senders    with --cpus, how many senders wrote at once when --nic-gbps was\n"
    "                   measured [0]\n"
    "  --copy-gbps      a core's copy rate (gather, fuse) [13/8 of --nic-gbps]\n"
    "  --recv-gbps      a receiving NIC's rate; free: receivers are no resource (CMA, SHM)\n"
    "                   [--nic-gbps]\n"
    "  --barrier-us     a barrier's cost (a control round trip) [50]\n"
    "\n"
    "usage: wsync plan --demo MODEL --trainers T --inference I [--layout shard|replica]\n"
    "       [--reshard] [--fp8 [--block B]] [--mesh-groups] [--json]\n"
    "The plan `wsync push-demo` runs for the same model (tiny, ...) and options: push-demo's\n"
    "layouts as its ranks join with them, planned as its controller plans them; push-demo\n"
    "prints the same plan digest. The simulation's and the sparse step's flags above apply.\n";

static int plan_parse_double(const char *s, double *out)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || v > 1e9) return 0;
    *out = v;
    return 1;
}

/* A fraction in [0, 1]: 0 is a density of its own (nothing changed), kept
   apart from the option's default (0 in the library) as a tiny positive. */
static int plan_parse_frac(const char *s, double *out)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > 1) return 0;
    *out = v > 0 ? v : -1; /* the library reads a negative density as 0 */
    return 1;
}

/* The sparse step's prediction beside the dense one (text). */
static void plan_sparse_print(const wsync_plan_sparse_options *o, const wsync_plan_sparse_result *s, double dense)
{
    uint32_t k;
    printf("  sparse step            %.4f s (%.3fx the dense step) at %.4g%% of bf16 elements changed, %.4g%% of fp8 "
           "bytes and %.4g%% of fp8 scales moved; bound by %s\n",
           s->seconds, dense > 0 ? s->seconds / dense : 0, 100.0 * (o->bf16 > 0 ? o->bf16 : o->bf16 < 0 ? 0 : WSYNC_PLAN_SPARSE_BF16),
           100.0 * (o->fp8_bytes > 0 ? o->fp8_bytes : o->fp8_bytes < 0 ? 0 : WSYNC_PLAN_SPARSE_FP8_BYTES),
           100.0 * (o->fp8_scales > 0 ? o->fp8_scales : o->fp8_scales < 0 ? 0 : WSYNC_PLAN_SPARSE_FP8_SCALES),
           wsync_plan_phase_name(s->bound));
    printf("    by phase            ");
    for (k = 0; k < WSYNC_PLAN_PHASES; k++) printf("%s %s %.4f s", k ? "," : "", wsync_plan_phase_name(k), s->phase[k]);
    printf("\n    bytes                %.3f GB written (%.4f%% of the dense step's), %llu regions sparse, %llu dense "
           "(sparse bytes over %.2f%% of dense), staging up to %.3f MB on a receiving NIC\n",
           (double)s->wire_bytes / 1e9, s->dense_bytes ? 100.0 * (double)s->wire_bytes / (double)s->dense_bytes : 0,
           (unsigned long long)s->sparse_tasks, (unsigned long long)s->dense_tasks, 100.0 * s->dense_above,
           (double)s->staging_max / 1e6);
    printf("    dense with a base    %.4f s (a dense step of a run with sparse steps: %.4f s more, each sender's copy of "
           "what it sent)\n",
           dense + s->base_seconds, s->base_seconds);
}

static void plan_sparse_json(const wsync_plan_sparse_result *s)
{
    uint32_t k;
    printf("\"sparse_seconds\": %.6f, \"sparse_bound\": \"%s\", \"sparse_phases\": {", s->seconds,
           wsync_plan_phase_name(s->bound));
    for (k = 0; k < WSYNC_PLAN_PHASES; k++) printf("%s\"%s\": %.6f", k ? ", " : "", wsync_plan_phase_name(k), s->phase[k]);
    printf("}, \"sparse_base_seconds\": %.6f", s->base_seconds);
    printf(", \"sparse_wire_bytes\": %llu, \"sparse_tasks\": %llu, \"sparse_dense_tasks\": %llu, "
           "\"sparse_dense_above\": %.6f, \"sparse_staging_max\": %llu, ",
           (unsigned long long)s->wire_bytes, (unsigned long long)s->sparse_tasks, (unsigned long long)s->dense_tasks,
           s->dense_above, (unsigned long long)s->staging_max);
}

static void plan_gb(const char *label, uint64_t max, double mean, uint64_t min)
{
    printf("  %-22s max %10.3f GB  mean %10.3f GB  min %10.3f GB\n", label, (double)max / 1e9, mean / 1e9,
           (double)min / 1e9);
}

int cmd_plan(int argc, char **argv)
{
    const char *model = NULL, *dtype = NULL, *demo = NULL, *v;
    cli_push_layout dl;
    wsync_gen_model gm;
    wsync_plan_model m;
    wsync_plan_layout_options lo;
    wsync_plan_options po;
    wsync_plan_sim_options so;
    wsync_plan_layout lay;
    wsync_plan *plan = NULL;
    wsync_plan_stats st;
    wsync_plan_sim_result sr;
    wsync_plan_sparse_options spo;
    wsync_plan_sparse_result spr;
    wsync_error err;
    uint64_t x;
    double gbps = 400, t0, t1, t2, t3, imb, pace = -1, unpaced = 0;
    int i, json = 0;
    memset(&lo, 0, sizeof lo);
    memset(&po, 0, sizeof po);
    memset(&so, 0, sizeof so);
    memset(&dl, 0, sizeof dl);
    memset(&spo, 0, sizeof spo);
    dl.block = 128;
    lo.replicas = 1;
    po.nics_per_rank = 1;
    for (i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(plan_usage, stdout);
            fputs(plan_usage_more, stdout);
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--model", &v)) model = v;
        else if (cli_opt_value(argc, argv, &i, "--trainers", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > WSYNC_PLAN_MAX_RANKS)
                return cli_usage_error("plan: --trainers takes 1..%u, not '%s'", WSYNC_PLAN_MAX_RANKS, v);
            lo.n_trainers = (uint32_t)x;
        } else if (cli_opt_value(argc, argv, &i, "--inference", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > WSYNC_PLAN_MAX_RANKS)
                return cli_usage_error("plan: --inference takes 1..%u, not '%s'", WSYNC_PLAN_MAX_RANKS, v);
            lo.n_inference = (uint32_t)x;
        } else if (cli_opt_value(argc, argv, &i, "--replicas", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > WSYNC_PLAN_MAX_RANKS)
                return cli_usage_error("plan: --replicas takes 1..%u, not '%s'", WSYNC_PLAN_MAX_RANKS, v);
            lo.replicas = (uint32_t)x;
        } else if (cli_opt_value(argc, argv, &i, "--nics-per-rank", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > WSYNC_PLAN_MAX_NICS)
                return cli_usage_error("plan: --nics-per-rank takes 1..%u, not '%s'", WSYNC_PLAN_MAX_NICS, v);
            po.nics_per_rank = (uint32_t)x;
        } else if (cli_opt_value(argc, argv, &i, "--nic-gbps", &v)) {
            if (!plan_parse_double(v, &gbps))
                return cli_usage_error("plan: --nic-gbps takes a positive number, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--task-us", &v)) {
            if (strcmp(v, "0") == 0) so.task_us = -1;
            else if (!plan_parse_double(v, &so.task_us))
                return cli_usage_error("plan: --task-us takes a number >= 0, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--watermark-mb", &v)) {
            if (!cli_parse_u64(v, &x) || x < 1 || x > (1ull << 40))
                return cli_usage_error("plan: --watermark-mb takes 1..2^40, not '%s'", v);
            so.watermark = x << 20;
        } else if (cli_opt_value(argc, argv, &i, "--pace", &v)) {
            if (strcmp(v, "off") == 0) pace = 0;
            else if (!plan_parse_double(v, &pace))
                return cli_usage_error("plan: --pace takes a positive number of Gb/s or off, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--density", &v)) {
            if (!plan_parse_frac(v, &spo.bf16)) return cli_usage_error("plan: --density takes 0..1, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--fp8-bytes", &v)) {
            if (!plan_parse_frac(v, &spo.fp8_bytes)) return cli_usage_error("plan: --fp8-bytes takes 0..1, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--fp8-scales", &v)) {
            if (!plan_parse_frac(v, &spo.fp8_scales))
                return cli_usage_error("plan: --fp8-scales takes 0..1, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--mem-gbps", &v)) {
            if (!plan_parse_double(v, &spo.mem_gbps))
                return cli_usage_error("plan: --mem-gbps takes a positive number, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--dense-above", &v)) {
            if (!plan_parse_frac(v, &spo.dense_above) || spo.dense_above < 0)
                return cli_usage_error("plan: --dense-above takes a fraction above 0 up to 1, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--staging", &v)) {
            if (!plan_parse_frac(v, &spo.staging) || spo.staging < 0)
                return cli_usage_error("plan: --staging takes a fraction above 0 up to 1, not '%s'", v);
        } else if (strcmp(argv[i], "--verify-all") == 0) spo.verify_all = 1;
        else if (cli_opt_value(argc, argv, &i, "--diff-ratio", &v) || cli_opt_value(argc, argv, &i, "--pack-ratio", &v) ||
                 cli_opt_value(argc, argv, &i, "--scatter-ratio", &v) ||
                 cli_opt_value(argc, argv, &i, "--verify-ratio", &v) || cli_opt_value(argc, argv, &i, "--quant-ratio", &v)) {
            const char *name = argv[i - 1];
            double *dst = !strcmp(name, "--diff-ratio")      ? &spo.diff
                          : !strcmp(name, "--pack-ratio")    ? &spo.pack
                          : !strcmp(name, "--scatter-ratio") ? &spo.scatter
                          : !strcmp(name, "--verify-ratio")  ? &spo.verify
                                                             : &spo.quant;
            if (!plan_parse_double(v, dst)) return cli_usage_error("plan: %s takes a positive number, not '%s'", name, v);
        } else if (cli_opt_value(argc, argv, &i, "--cpus", &v)) {
            if (!plan_parse_double(v, &so.cpus)) return cli_usage_error("plan: --cpus takes a positive number, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--nic-senders", &v)) {
            if (!plan_parse_double(v, &so.nic_senders))
                return cli_usage_error("plan: --nic-senders takes a positive number, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--copy-gbps", &v)) {
            if (!plan_parse_double(v, &so.copy_gbps))
                return cli_usage_error("plan: --copy-gbps takes a positive number, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--recv-gbps", &v)) {
            if (strcmp(v, "free") == 0) so.recv_gbps = -1;
            else if (!plan_parse_double(v, &so.recv_gbps))
                return cli_usage_error("plan: --recv-gbps takes a positive number or free, not '%s'", v);
        } else if (cli_opt_value(argc, argv, &i, "--barrier-us", &v)) {
            if (strcmp(v, "0") == 0) so.barrier_us = -1;
            else if (!plan_parse_double(v, &so.barrier_us))
                return cli_usage_error("plan: --barrier-us takes a number >= 0, not '%s'", v);
        }
        else if (cli_opt_value(argc, argv, &i, "--dtype", &v)) {
            if (strcmp(v, "fp8") && strcmp(v, "bf16"))
                return cli_usage_error("plan: --dtype takes fp8 or bf16, not '%s'", v);
            dtype = v;
        } else if (cli_opt_value(argc, argv, &i, "--demo", &v)) demo = v;
        else if (cli_opt_value(argc, argv, &i, "--layout", &v)) {
            if (strcmp(v, "shard") && strcmp(v, "replica"))
                return cli_usage_error("plan: --layout takes shard or replica, not '%s'", v);
            dl.replica = strcmp(v, "replica") == 0;
        } else if (cli_opt_value(argc, argv, &i, "--block", &v)) {
            if (!cli_parse_u64(v, &x) || x > 4096) return cli_usage_error("plan: --block takes 0..4096, not '%s'", v);
            dl.block = (unsigned)x;
        } else if (strcmp(argv[i], "--reshard") == 0) dl.reshard = 1;
        else if (strcmp(argv[i], "--fp8") == 0) dl.fp8 = dl.reshard = 1;
        else if (strcmp(argv[i], "--mesh-groups") == 0) dl.mesh_groups = 1;
        else if (strcmp(argv[i], "--shards-only") == 0) lo.shards_only = 1;
        else if (strcmp(argv[i], "--one-group") == 0) lo.one_group = 1;
        else if (strcmp(argv[i], "--json") == 0) json = 1;
        else return cli_usage_error("plan: unknown option or missing value '%s'", argv[i]);
    }
    if (demo) {
        if (!lo.n_trainers || !lo.n_inference)
            return cli_usage_error("%s", "plan: --trainers and --inference are required");
        if (wsync_gen_model_lookup(demo, &gm) != WSYNC_OK) return cli_usage_models("plan --demo", demo);
        dl.trainers = lo.n_trainers;
        dl.inference = lo.n_inference;
        t0 = cli_now_s();
        if (cli_push_plan(&gm, &dl, &plan, &err) != WSYNC_OK) {
            fprintf(stderr, "wsync: plan: %s\n", err.message);
            return 1;
        }
        t1 = cli_now_s();
        so.nic_gbps = gbps;
        so.pace_gbps = pace > 0 ? pace : 0; /* push-demo paces only when asked */
        if (wsync_plan_simulate(plan, &so, &sr, &err) != WSYNC_OK) {
            fprintf(stderr, "wsync: plan: simulate: %s\n", err.message);
            wsync_plan_free(plan);
            return 1;
        }
        if (wsync_plan_sparse_simulate(plan, &so, &spo, &spr, &err) != WSYNC_OK) {
            fprintf(stderr, "wsync: plan: sparse: %s\n", err.message);
            wsync_plan_free(plan);
            return 1;
        }
        wsync_plan_stats_get(plan, &st);
        if (json) {
            printf("{\"demo\": \"%s\", \"trainers\": %u, \"inference\": %u, \"plan_seconds\": %.6f, \"tasks\": %llu, "
                   "\"preparations\": %llu, \"groups\": %u, \"bytes\": %llu, \"fetches\": %llu, \"fetch_bytes\": %llu, "
                   "\"predicted_seconds\": %.6f, \"fetch_seconds\": %.6f, ",
                   gm.name, dl.trainers, dl.inference, t1 - t0, (unsigned long long)st.tasks,
                   (unsigned long long)st.preps, plan->n_groups, (unsigned long long)st.bytes,
                   (unsigned long long)st.fetches, (unsigned long long)st.fetch_bytes, sr.seconds, sr.fetch_seconds);
            plan_sparse_json(&spr);
            printf("\"digest\": \"%016llx\"}\n", (unsigned long long)wsync_plan_digest(plan));
        } else {
            printf("wsync plan: push-demo's %s, %u trainers (%s) -> %u inference ranks (%s%s), %u mesh group%s\n"
                   "  tasks                  %llu (%llu of them fp8 scales), %llu preparations, %.3f MB per step\n"
                   "  imbalance              %.4f sending, %.4f receiving (busiest over mean)\n",
                   gm.name, dl.trainers, dl.replica ? "each the whole model" : "row shards", dl.inference,
                   dl.reshard ? "tensor-parallel slices" : "each the whole model", dl.fp8 ? ", fp8" : "",
                   plan->n_groups, plan->n_groups == 1 ? "" : "s", (unsigned long long)st.tasks,
                   (unsigned long long)st.scale_tasks, (unsigned long long)st.preps, (double)st.bytes / 1e6,
                   st.imbalance_send, st.imbalance_recv);
            if (st.fetches)
                printf("  gather phases          %llu fetches, %.3f MB between trainers, %.6f s with their barriers\n",
                       (unsigned long long)st.fetches, (double)st.fetch_bytes / 1e6, sr.fetch_seconds);
            printf("  predicted              %.6f s at %g Gb/s per NIC (the target's constants)\n", sr.seconds, gbps);
            plan_sparse_print(&spo, &spr, sr.seconds);
            printf("  plan digest            %016llx\n", (unsigned long long)wsync_plan_digest(plan));
        }
        wsync_plan_free(plan);
        return 0;
    }
    if (!model) return cli_usage_error("%s", "plan: --model is required");
    if (!lo.n_trainers || !lo.n_inference)
        return cli_usage_error("%s", "plan: --trainers and --inference are required");
    if (lo.n_inference % lo.replicas)
        return cli_usage_error("plan: --inference %u does not split into --replicas %u", lo.n_inference, lo.replicas);
    if (wsync_plan_model_lookup(model, &m, &err) != WSYNC_OK) return cli_usage_error("%s", err.message);
    lo.fp8 = dtype ? strcmp(dtype, "fp8") == 0 : m.served_fp8;
    so.nic_gbps = gbps;
    po.task_cost_bytes = (uint64_t)((so.task_us > 0 ? so.task_us : so.task_us < 0 ? 0 : 5) * 1e-6 * gbps * 1e9 / 8);
    if (po.task_cost_bytes == 0) po.task_cost_bytes = 1;

    t0 = cli_now_s();
    if (wsync_plan_layout_model(&m, &lo, &lay, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: plan: %s\n", err.message);
        return 1;
    }
    t1 = cli_now_s();
    if (wsync_plan_build(&lay.input, &po, &plan, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: plan: %s\n", err.message);
        wsync_plan_layout_free(&lay);
        return 1;
    }
    t2 = cli_now_s();
    so.pace_gbps = 0; /* first come, first served, for the record */
    if (wsync_plan_simulate(plan, &so, &sr, &err) == WSYNC_OK) unpaced = sr.seconds;
    so.pace_gbps = pace < 0 ? gbps : pace;
    if (wsync_plan_simulate(plan, &so, &sr, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: plan: simulate: %s\n", err.message);
        wsync_plan_free(plan);
        wsync_plan_layout_free(&lay);
        return 1;
    }
    t3 = cli_now_s();
    if (wsync_plan_sparse_simulate(plan, &so, &spo, &spr, &err) != WSYNC_OK) {
        fprintf(stderr, "wsync: plan: sparse: %s\n", err.message);
        wsync_plan_free(plan);
        wsync_plan_layout_free(&lay);
        return 1;
    }
    wsync_plan_stats_get(plan, &st);
    imb = st.imbalance_send > st.imbalance_recv ? st.imbalance_send : st.imbalance_recv;
    if (json) {
        printf("{\"model\": \"%s\", \"params\": %llu, \"tensors\": %llu, \"trainers\": %u, \"inference\": %u, "
               "\"replicas\": %u, \"nics_per_rank\": %u, \"nic_gbps\": %.6g, \"dtype\": \"%s\", ",
               m.name, (unsigned long long)wsync_plan_model_params(&m),
               (unsigned long long)wsync_plan_model_tensors(&m), lo.n_trainers, lo.n_inference, lo.replicas,
               po.nics_per_rank, gbps, lo.fp8 ? "fp8" : "bf16");
        printf("\"plan_seconds\": %.6f, \"layout_seconds\": %.6f, \"build_seconds\": %.6f, \"simulate_seconds\": %.6f, ",
               t2 - t0, t1 - t0, t2 - t1, t3 - t2);
        printf("\"tasks\": %llu, \"scale_tasks\": %llu, \"preparations\": %llu, \"groups\": %u, \"bytes\": %llu, ",
               (unsigned long long)st.tasks, (unsigned long long)st.scale_tasks, (unsigned long long)st.preps,
               plan->n_groups, (unsigned long long)st.bytes);
        printf("\"send_bytes\": {\"max\": %llu, \"mean\": %.1f, \"min\": %llu}, "
               "\"recv_bytes\": {\"max\": %llu, \"mean\": %.1f, \"min\": %llu}, ",
               (unsigned long long)st.send_max, st.send_mean, (unsigned long long)st.send_min,
               (unsigned long long)st.recv_max, st.recv_mean, (unsigned long long)st.recv_min);
        printf("\"imbalance\": %.6f, \"imbalance_send\": %.6f, \"imbalance_recv\": %.6f, ", imb, st.imbalance_send,
               st.imbalance_recv);
        printf("\"pace_gbps\": %.6g, \"unpaced_seconds\": %.6f, ", so.pace_gbps, unpaced);
        printf("\"fetches\": %llu, \"fetch_bytes\": %llu, \"fetch_seconds\": %.6f, ", (unsigned long long)st.fetches,
               (unsigned long long)st.fetch_bytes, sr.fetch_seconds);
        plan_sparse_json(&spr);
        printf("\"bound_seconds\": %.6f, \"predicted_seconds\": %.6f, \"predicted_over_bound\": %.6f, "
               "\"prep_max_seconds\": %.6f, \"peak_temp_bytes\": %llu, \"max_prep_temp_bytes\": %llu, "
               "\"digest\": \"%016llx\"}\n",
               sr.bound_seconds, sr.seconds, sr.bound_seconds > 0 ? sr.seconds / sr.bound_seconds : 0,
               sr.prep_max_seconds, (unsigned long long)sr.peak_temp, (unsigned long long)st.temp_max,
               (unsigned long long)wsync_plan_digest(plan));
    } else {
        unsigned g;
        printf("wsync plan: %s (%.3f T parameters, %llu tensors), %u trainers -> %u replica%s x %u inference ranks, "
               "%s, %u NIC%s per rank at %g Gb/s\n",
               m.name, (double)wsync_plan_model_params(&m) / 1e12, (unsigned long long)wsync_plan_model_tensors(&m),
               lo.n_trainers, lo.replicas, lo.replicas == 1 ? "" : "s", lo.n_inference / lo.replicas,
               lo.fp8 ? "fp8 e4m3 (128x128 block scales)" : "bf16", po.nics_per_rank,
               po.nics_per_rank == 1 ? "" : "s", gbps);
        printf("  planning               %.3f s (layout %.3f s, schedule %.3f s); simulation %.3f s\n", t2 - t0,
               t1 - t0, t2 - t1, t3 - t2);
        printf("  tasks                  %llu (%llu of them fp8 scales), %llu preparations, %u mesh group%s\n",
               (unsigned long long)st.tasks, (unsigned long long)st.scale_tasks, (unsigned long long)st.preps,
               plan->n_groups, plan->n_groups == 1 ? "" : "s");
        printf("  bytes                  %.3f TB on the wire per step\n", (double)st.bytes / 1e12);
        if (st.fetches)
            printf("  gather phases          %llu fetches, %.3f GB between trainers (the rows of fp8 tiles across "
                   "shard boundaries), %.4f s with their barriers\n",
                   (unsigned long long)st.fetches, (double)st.fetch_bytes / 1e9, sr.fetch_seconds);
        plan_gb("per sending NIC", st.send_max, st.send_mean, st.send_min);
        plan_gb("per receiving NIC", st.recv_max, st.recv_mean, st.recv_min);
        printf("  imbalance              %.4f sending, %.4f receiving (busiest over mean)\n", st.imbalance_send,
               st.imbalance_recv);
        printf("  bound                  %.4f s (busiest NIC's bytes at line rate)\n", sr.bound_seconds);
        printf("  predicted              %.4f s (%.3fx the bound)", sr.seconds,
               sr.bound_seconds > 0 ? sr.seconds / sr.bound_seconds : 0);
        for (g = 0; g < sr.n_groups && g < WSYNC_PLAN_SIM_GROUPS; g++)
            printf("%s group %u %.4f s", g ? "," : ";", g, sr.group_seconds[g]);
        if (so.pace_gbps > 0)
            printf("\n  pacing                 senders keep the planned starts at %g Gb/s; first come, first "
                   "served instead: %.4f s (%.3fx the bound)",
                   so.pace_gbps, unpaced, sr.bound_seconds > 0 ? unpaced / sr.bound_seconds : 0);
        else printf("\n  pacing                 off: senders start tasks as soon as they can, receivers serve "
                    "them first come, first served");
        printf("\n  preparation            busiest stage %.4f s; peak temporary memory %.3f GB on a rank "
               "(largest single preparation %.1f MB)\n",
               sr.prep_max_seconds, (double)sr.peak_temp / 1e9, (double)st.temp_max / 1e6);
        plan_sparse_print(&spo, &spr, sr.seconds);
    }
    wsync_plan_free(plan);
    wsync_plan_layout_free(&lay);
    return 0;
}
