/* impl.c - the one file of the wsync tool that compiles the headers'
   implementations (wsync.h, wsync_gen.h, wsync_http.h, wsync_rdma.h); the
   others include cli.h for their declarations only. */
#define _GNU_SOURCE 1 /* see cli.h */
#define WSYNC_IMPLEMENTATION
#define WSYNC_GEN_IMPLEMENTATION
#define WSYNC_HTTP_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "cli.h"
