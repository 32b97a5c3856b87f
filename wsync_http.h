/* wsync_http.h - the wsync bucket over HTTP and S3 (libcurl). SKELETON.

OVERVIEW
========
This companion header will hold object stores for wsync's delta chain:
plain HTTP (PUT/GET/HEAD/DELETE against WebDAV-style servers such as nginx's
dav module) and S3-compatible stores (SigV4 through libcurl), with parallel
ranged downloads, retries with backoff, and resumable transfers.

STATUS
======
Nothing is implemented yet: the store interface it builds on arrives with
the delta chain in wsync.h. Including this header today declares only the
version check below; it needs neither libcurl nor any other library.

USAGE (when it lands)
=====================
    #define WSYNC_IMPLEMENTATION
    #include "wsync.h"
    #define WSYNC_HTTP_IMPLEMENTATION
    #include "wsync_http.h"      (link with -lcurl)

LICENSE
=======
MIT, as wsync.h.
*/
#ifndef WSYNC_HTTP_H
#define WSYNC_HTTP_H

#include "wsync.h"

#define WSYNC_HTTP_AVAILABLE 0 /* 1 once the stores are implemented */

#ifdef __cplusplus
extern "C" {
#endif

/* The wsync.h version this header was written against. */
#define WSYNC_HTTP_REQUIRES_VERSION 100

#if WSYNC_VERSION_NUMBER < WSYNC_HTTP_REQUIRES_VERSION
#error "wsync_http.h needs a newer wsync.h"
#endif

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_HTTP_H */
