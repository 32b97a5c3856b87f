/* dir.c - model directories (a Hugging Face checkpoint: shards, the index,
   config and tokenizer files), declared in cli.h: the tool's side of
   wsync.h's >>dir section, which reads and checks a directory
   (wsync_dir_read), publishes it (wsync_dir_publish) and keeps one at a
   step as versions beside a link (wsync_dir_follower, which pull and follow
   use for a directory). Here: the library's errors and warnings said the
   tool's way. */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_dir_load(const char *cmd, const char *dir, char *const *include, size_t n_include, wsync_dir_checkpoint *c)
{
    wsync_error err;
    size_t k;
    if (wsync_dir_read(dir, (const char *const *)include, n_include, c, &err) != WSYNC_OK)
        return cli_chain_fail(cmd, &err, NULL), 0;
    if (c->skipped_step_file)
        fprintf(stderr, "wsync: %s: %s/%s is not published: the name is wsync's own (pull and follow write it into "
                "each version they make, saying its step)\n", cmd, dir, WSYNC_DIR_STEP_FILE);
    for (k = 0; k < n_include; k++)
        if (c->unmatched[k])
            fprintf(stderr, "wsync: %s: warning: --include '%s' matches no file in %s\n", cmd, include[k], dir);
    return 1;
}

int cli_dir_anchor_image(const char *cmd, const wsync_store *s, const wsync_chain_options *co,
                         const wsync_chain_entry *e, cli_image *im)
{
    wsync_error err;
    memset(im, 0, sizeof *im);
    if (wsync_dir_anchor_image(s, co, e, &im->buf, &im->size, &err) != WSYNC_OK)
        return cli_chain_fail(cmd, &err, "the tensors of anchor %llu", (unsigned long long)e->step), 0;
    if (!cli_image_parse(cmd, e->key, im)) {
        cli_image_free(im);
        return 0;
    }
    return 1;
}
