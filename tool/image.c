/* image.c - the wsync tool's model in memory, as one safetensors image
   (cli_image, cli.h): what the chain commands (cmd_chain.c) and the model
   directories (dir.c) both build and free. */
#define _GNU_SOURCE 1 /* see cli.h */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_image_free(cli_image *im)
{
    free(im->t);
    wsync_st_free(&im->st);
    free(im->buf);
    memset(im, 0, sizeof *im);
}

/* Parses buf (filled by the caller) and builds the views. */
int cli_image_parse(const char *cmd, const char *what, cli_image *im)
{
    wsync_error err;
    size_t i;
    if (wsync_st_parse(im->buf, im->size, NULL, &im->st, &err) != WSYNC_OK) {
        char why[1024];
        const char *w = cli_st_why(im->buf, im->size, &err, why, sizeof why);
        if (w != err.message) snprintf(err.message, sizeof err.message, "%s", w);
        return cli_chain_fail(cmd, &err, "%s: invalid safetensors", what), 0;
    }
    if (wsync_st_check_names(&im->st, &err) != WSYNC_OK) /* the views are named by C strings */
        return cli_chain_fail(cmd, &err, "%s", what), 0;
    im->t = (wsync_tensor *)calloc(im->st.n_tensors + 1, sizeof *im->t);
    if (!im->t) return cli_tool_fail(cmd, WSYNC_ERR_OUT_OF_MEMORY, what, "%zu tensor views", im->st.n_tensors), 0;
    for (i = 0; i < im->st.n_tensors; i++) {
        const wsync_st_tensor *s = &im->st.tensors[i];
        im->t[i].name = s->name;
        im->t[i].dtype = s->dtype;
        im->t[i].rank = s->rank;
        im->t[i].shape = s->shape;
        im->t[i].data = im->buf + (s->data - im->buf); /* our buffer: writable */
        im->t[i].nbytes = s->end - s->begin;
    }
    return 1;
}
