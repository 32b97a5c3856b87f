/* The headers' implementations for the test programs, each configuration
   compiled once (Makefile: IMPL_NAMES) and linked into every test program
   and fuzz replay driver that takes it (tests/impl_of.sh says which); the
   program itself is then compiled with WSYNC__IMPLEMENTED (and the
   companions' WSYNC__HTTP_IMPLEMENTED, WSYNC__RDMA_IMPLEMENTED), so its own
   "#define WSYNC_IMPLEMENTATION" emits nothing twice.
   IMPL_HTTP: wsync_http.h's implementation (with WSYNC_HTTP_NO_CURL: its
   build without libcurl); IMPL_RDMA: wsync_rdma.h's; neither: wsync.h's.
   The companions use only wsync.h's public API (tests/core/test_headers.sh
   links them that way), so each is an object of its own. POSIX.1-2008, as
   most tests declare it (wsync_rdma.h asks for _GNU_SOURCE itself). */
#if defined(IMPL_RDMA)
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#elif defined(IMPL_HTTP)
#define _POSIX_C_SOURCE 200809L
#define WSYNC_HTTP_IMPLEMENTATION
#include "wsync_http.h"
#else
#define _POSIX_C_SOURCE 200809L
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#endif
