/* wsync_rdma.h - the direct path: one-sided writes into inference memory. SKELETON.

OVERVIEW
========
This companion header will hold wsync's direct path inside a cluster: a
static transfer schedule computed once and replayed every step, a pipelined
executor under a memory watermark, the controller protocol, and fabric
backends: ibverbs RC RDMA WRITE (rdma-core), a one-host backend
(process_vm_writev or shared memory) and TCP.

STATUS
======
Nothing is implemented yet: the fabric interface it builds on arrives in
wsync.h with that work. Including this header today declares only the
version check below; it needs no rdma-core. No RDMA hardware was used to
write or test any of wsync.

USAGE (when it lands)
=====================
    #define WSYNC_IMPLEMENTATION
    #include "wsync.h"
    #define WSYNC_RDMA_IMPLEMENTATION
    #include "wsync_rdma.h"      (link with -libverbs for the verbs backend)

LICENSE
=======
MIT, as wsync.h.
*/
#ifndef WSYNC_RDMA_H
#define WSYNC_RDMA_H

#include "wsync.h"

#define WSYNC_RDMA_AVAILABLE 0 /* 1 once the backends are implemented */

#ifdef __cplusplus
extern "C" {
#endif

#define WSYNC_RDMA_REQUIRES_VERSION 100

#if WSYNC_VERSION_NUMBER < WSYNC_RDMA_REQUIRES_VERSION
#error "wsync_rdma.h needs a newer wsync.h"
#endif

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_RDMA_H */
