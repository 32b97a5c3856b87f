/* layouts.h - push-demo's layouts, shared by layouts.c (which builds them)
   and cmd_push.c (whose ranks join with them). Part of the command-line
   tool (cli.h). */
#ifndef WSYNC_LAYOUTS_H
#define WSYNC_LAYOUTS_H

#include "cli.h"

/* A rank's parts: slices of the model's tensors, each placed at an offset
   of the rank's one region. */
typedef struct push_layout {
    size_t n;                  /* parts */
    wsync_ctl_tensor *t;       /* this rank's entries, as it joins with them */
    char (*names)[WSYNC_GEN_NAME_MAX];
    char (*dst)[WSYNC_GEN_NAME_MAX + 16]; /* the name a part lands under (fused) */
    uint32_t *k;               /* the model tensor each part comes from */
    uint64_t bytes;            /* region size */
} push_layout;

void push_layout_free(push_layout *l);
/* A tensor's columns (1 for a vector). */
uint64_t push_cols(const wsync_ctl_tensor *t);
/* Columns of a part (a row shard or a whole tensor: all of them). */
uint64_t push_part_cols(const wsync_ctl_tensor *t);
/* Rank `rank` of a role's layout (trainer: 1 for a trainer, 0 for an
   inference rank): what it joins with. 1 built; 0 not. */
int push_rank_layout(const wsync_gen_model *m, const cli_push_layout *o, int trainer, unsigned rank,
                     push_layout *l);

#endif /* WSYNC_LAYOUTS_H */
