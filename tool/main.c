/* wsync: the command-line tool. A thin layer over the public API of wsync.h:
   anything it does, a C program can do with the header alone. The commands
   are in the other files of this folder (cli.h lists them).

   Exit codes: 0 success, 1 the input or the operation failed (reason on
   stderr), 2 usage error; the chain's readers (pull, follow, log) also 3
   no store, 4 an empty chain, 5 a model that is not the chain's, 6 a
   signed chain refused (cli.h, EXIT_NO_STORE and after). */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char *usage_text =
    "usage: wsync <command> [options]\n"
    "\n"
    "commands:\n"
    "  inspect FILE [--json]   validate a safetensors file and list its tensors\n"
    "                          and metadata (exit 0 valid, 1 invalid, 2 usage)\n"
    "  diff OLD NEW -o DELTA [--encoding packed|packed-max|trl-v1|trl-v3] [--step N]\n"
    "       [--base-step N] [--threads T] [--range-coder]\n"
    "                          write the sparse delta OLD -> NEW\n"
    "  apply BASE DELTA -o OUT  patch BASE with DELTA (any encoding) into OUT\n"
    "  verify A B              exit 0 when every tensor is bit-identical, else 1\n"
    "                          with the first differences listed\n"
    "\n"
    "  publish --store DIR --step N MODEL [--encoding E] [--anchor-every K]\n"
    "       [--retain R] [--prefix P] [--threads T] [--include PATTERN]\n"
    "       [--sign-key NAME.key]\n"
    "                          publish MODEL (a safetensors file, or a checkpoint\n"
    "                          directory: shards, index, config) as step N of the\n"
    "                          chain in DIR (trainer)\n"
    "  pull --store DIR MODEL [--step N] [--follow-restart] [--prefix P] [--threads T]\n"
    "       [--verify-key NAME.pub] [--new-chain]\n"
    "                          bring the local file MODEL to the newest (or given)\n"
    "                          step of the chain, replacing it atomically (a\n"
    "                          directory: a link switched to a new version)\n"
    "  follow --store DIR MODEL [--interval S] [--max-steps N] [--until-step N]\n"
    "       [--wait] [--follow-restart] [--prefix P] [--threads T]\n"
    "       [--verify-key NAME.pub] [--new-chain]\n"
    "                          pull each time the chain moves, until stopped\n"
    "                          (--wait: for a store that does not exist yet)\n"
    "  log --store DIR [--prefix P] [--json] [--verify-key NAME.pub]\n"
    "                          list the chain: HEAD, anchors, deltas\n"
    "                          (--store DIR: a directory, or the URL of an HTTP\n"
    "                          bucket: http://host:port/prefix, https://..., or\n"
    "                          s3://bucket/prefix with AWS_ENDPOINT_URL, AWS_REGION,\n"
    "                          AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)\n"
    "  keygen NAME             write a key pair for signed chains: NAME.key (secret,\n"
    "                          mode 0600) for publish --sign-key, NAME.pub for\n"
    "                          pull, follow and log --verify-key\n"
    "                          (WSYNC_SIGN_KEY, WSYNC_VERIFY_KEY: the same from the\n"
    "                          environment)\n"
    "  gen --model M --step N -o FILE [--shards K]\n"
    "                          a training-like bf16 model at step N (for tests);\n"
    "                          --shards: FILE is a checkpoint directory of K shards\n"
    ;
static const char *usage_text2 =
    "  demo [--model tiny|qwen3-0.6b|qwen2.5-7b] [--steps N] [--bucket DIR]\n"
    "                          the main job: a trainer process publishing deltas\n"
    "                          and an inference process following bit-exactly\n"
    "  push-demo [--backend cma|shm|tcp] [--trainers T] [--inference I] [--reshard]\n"
    "       [--fp8] [--mesh-groups] [--kill ROLE:R@S] [--bench]\n"
    "                          the direct path with real processes: a controller,\n"
    "                          trainers writing into inference ranks' memory, every\n"
    "                          byte checked (wsync push-demo --help)\n"
    "  plan --model M --trainers T --inference I [--replicas R] [--nics-per-rank K]\n"
    "       [--nic-gbps G] [--dtype fp8|bf16] [--json]\n"
    "                          the direct path's schedule for a model and its\n"
    "                          simulated transfer time (wsync plan --help)\n"
    "  version                 print the library version\n"
    "\n"
    "options:\n"
    "  -h, --help              this text (also: wsync <command> --help)\n"
    "  --version               same as 'wsync version'\n"
    "\n"
    "exit status:\n"
    "  0  done\n"
    "  1  failed: the input or the operation (the reason on stderr)\n"
    "  2  usage error\n"
    "  3  pull, follow, log: no store there (WSYNC_ERR_NO_STORE: a directory store\n"
    "     that does not exist; readers never create one)\n"
    "  4  pull, log: an empty chain (WSYNC_ERR_NOT_FOUND: the store exists, nothing\n"
    "     is published yet; follow waits for a first step)\n"
    "  5  pull, follow: the local model does not match the chain (WSYNC_ERR_LAYOUT:\n"
    "     tensor names, dtypes or shapes) and is not the chain's to rebuild\n"
    "  6  pull, follow, log with --verify-key: the chain is refused (WSYNC_ERR_SIGNATURE:\n"
    "     HEAD unsigned, signed by another key, altered after signing, or another\n"
    "     chain's; WSYNC_ERR_DIGEST_MISMATCH: an object whose BLAKE2b-256 differs from\n"
    "     HEAD's); MODEL kept as it was. publish: --sign-key over a chain its key did\n"
    "     not sign, or no key over a signed chain\n";

int main(int argc, char **argv)
{
    const char *cmd;
    if (argc < 2) {
        fputs(usage_text, stderr);
        fputs(usage_text2, stderr);
        return EXIT_USAGE;
    }
    cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        fputs(usage_text2, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("wsync %s\n", WSYNC_VERSION_STRING);
        return 0;
    }
    if (strcmp(cmd, "inspect") == 0) return cmd_inspect(argc - 2, argv + 2);
    if (strcmp(cmd, "demo") == 0) return cmd_demo(argc - 2, argv + 2);
    if (strcmp(cmd, "diff") == 0) return cmd_diff(argc - 2, argv + 2);
    if (strcmp(cmd, "apply") == 0) return cmd_apply(argc - 2, argv + 2);
    if (strcmp(cmd, "verify") == 0) return cmd_verify(argc - 2, argv + 2);
    if (strcmp(cmd, "publish") == 0) return cmd_publish(argc - 2, argv + 2);
    if (strcmp(cmd, "pull") == 0) return cmd_pull(argc - 2, argv + 2);
    if (strcmp(cmd, "follow") == 0) return cmd_follow(argc - 2, argv + 2);
    if (strcmp(cmd, "log") == 0) return cmd_log(argc - 2, argv + 2);
    if (strcmp(cmd, "keygen") == 0) return cmd_keygen(argc - 2, argv + 2);
    if (strcmp(cmd, "gen") == 0) return cmd_gen(argc - 2, argv + 2);
    if (strcmp(cmd, "push-demo") == 0) return cmd_push_demo(argc - 2, argv + 2);
    if (strcmp(cmd, "plan") == 0) return cmd_plan(argc - 2, argv + 2);
    return cli_usage_error("unknown command '%s'", cmd);
}
