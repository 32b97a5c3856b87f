/* wsync_http.h v0.3.0 - wsync's stores over HTTP (WebDAV) and S3, on libcurl - MIT license */
/*
OVERVIEW
========
A wsync_store (see "Store" in wsync.h) over plain HTTP, for WebDAV-style
servers such as nginx with its dav module or Apache with mod_dav: put is an
HTTP PUT of the whole object, get a GET (with a Range for byte ranges),
head a HEAD, del a DELETE, and list reads each directory with a WebDAV
PROPFIND (Depth: 1) or as the server's JSON directory listing (nginx
`autoindex_format json`), recursing into directories (see LISTING). The
delta chain (wsync_publisher, wsync_subscriber) runs over it unchanged.

Transfers reuse connections, except that a request coming long after the
store's previous one (idle_close_ms, 500 ms: a follower's poll) closes its
connection when done, and wsync_store_http_idle closes the kept ones before
a long sleep: a server with a process per connection (Apache prefork)
gives each open connection a worker until its KeepAliveTimeout, and
followers that held theirs between polls starved publishes (with 20
followers and MaxRequestWorkers 16, a publish waited 5 s to over 60 s;
tests/http/servers/apache_fanout.sh measures it). Transfers retry with
exponential backoff (honouring Retry-After) on connection errors,
timeouts, 408, 429 and 5xx, resume a
download cut short from the byte where it stopped, give up on a transfer
slower than a floor for too long, and fetch large objects as parallel
ranged GETs. Those reach the sink in order: the part next in order streams
straight from curl's buffer to the sink as it arrives, the parts after it
wait in one buffer per connection (parallel x part_size bytes, 64 MiB by
default) until their turn. The store keeps those buffers for its next
download (when they total at most 128 MiB) and frees them at close. A 401 or 403 fails at once, named as an
authentication error. The S3 store (wsync_store_s3_open: SigV4,
ListObjectsV2, multipart uploads) runs on the same transfer layer.

QUICK START
===========
    #define WSYNC_IMPLEMENTATION
    #include "wsync.h"
    #define WSYNC_HTTP_IMPLEMENTATION
    #include "wsync_http.h"          (link with -lcurl)

    wsync_store s;
    wsync_error err;
    if (wsync_store_http_open("http://10.0.0.5:8080/run7", NULL, &s, &err) != WSYNC_OK)
        fprintf(stderr, "%s\n", err.message);
    ... wsync_publisher_open(&s, ...) or wsync_subscriber_open(&s, ...) ...
    wsync_store_close(&s);

WHAT THE SERVER MUST DO
=======================
For nginx (nginx-light in Debian has the dav module):

    location / {
        root /srv/bucket;
        dav_methods PUT DELETE MKCOL;
        create_full_put_path on;       # else wsync creates parents with MKCOL
        client_max_body_size 0;        # anchors are the model's full size
        client_body_temp_path /srv/bucket-tmp;   # same filesystem as root
        autoindex on;
        autoindex_format json;
    }

nginx receives a PUT body into a temporary file and renames it over the
target: that rename is what makes put atomic (keep client_body_temp_path on
the root's filesystem, or it copies). Do not enable open_file_cache for
the bucket: HEAD is polled. nginx's autoindex hides names that start with
'.', so such keys are stored but not listed. ETags are used only to notice
an object replaced between the pieces of one download, compared weakly
(Apache's is W/"..." for a second after a write, then strong), and only a
strong one goes in If-Range; the chain never trusts them (nginx's ETag is
mtime-size): HEAD's step number decides. A 416 without Content-Range and
a HEAD without Content-Length (Apache's, for an empty file) are sized by a
GET of byte 0.

LISTING
=======
wsync_http_options.listing picks how a directory is read:
  WSYNC_HTTP_LISTING_PROPFIND  PROPFIND with Depth: 1, asking for
        resourcetype and getcontentlength: the standard WebDAV listing
        (RFC 4918) that Apache mod_dav (`Dav On`), nginx with the dav-ext
        module (Debian: libnginx-mod-http-dav-ext; `dav_ext_methods
        PROPFIND;`), rclone and most WebDAV servers answer with a 207.
  WSYNC_HTTP_LISTING_JSON  a GET of the directory, read as nginx's JSON
        autoindex (plain nginx has no PROPFIND).
  WSYNC_HTTP_LISTING_AUTO (the default)  PROPFIND first: a 207 is read as
        the listing (a 207 that does not parse is an error, not a reason to
        try JSON), a 404 is a missing directory, a 401 an authentication
        error; any other answer (405 from plain nginx, 501, 403, 400, a
        200 that is not a multistatus) falls back to the JSON GET, and when
        that fails too the error says what PROPFIND answered. The first
        method that works is kept for the store's life, so plain nginx pays
        for one extra request. PROPFIND first because a 207 is unambiguous,
        while a GET of a collection is ambiguous: Apache answers it 404 (as
        if it were missing) and others an HTML index.
Only a listing that positively lists nothing is empty. A folder answered
404 (by either method) is read as missing only when one of its parents,
read the same way, nearest first, lists without it (or lists it as a
file), or is there but refuses to be listed with a 403 (the server tells
folders there from missing ones: nginx without autoindex). A parent that
lists it as a folder, 404s up to the server's root (Apache's GET), or any
other failure makes the listing unavailable: WSYNC_ERR_UNSUPPORTED, and a
publisher over a store without HEAD then refuses rather than take an
unknown state for an empty chain. A folder's GET answered 403 where
PROPFIND is not offered or the JSON listing was asked for (nginx's dav
module alone; nginx dav-ext without autoindex) is such a server offering
no listing, said so with how to enable one, not an authentication error. A folder that is missing costs one
listing per parent read.
The multistatus is read by wsync_http_propfind_parse (strict: see it);
the hrefs must be the collection asked for, which is skipped, or its
direct children, by path (an absolute URL's scheme and authority are
ignored), compared after percent-decoding; anything else is refused
(WSYNC_ERR_IO naming the href), as is a name ending in '/' that is not a
collection. The answer is read up to 64 MiB, like a JSON listing.

REDIRECTS
=========
GET and HEAD follow 301, 302, 303, 307 and 308 (up to 5 hops; the Hugging
Face gateway answers GET with a 302 to its CDN), except nginx's 301 to
"key/", which means the key is a directory (WSYNC_ERR_NOT_FOUND). A large
download's parts all go to where the redirect led. PUT and DELETE are not
redirected. Once a redirect leaves the store's origin (scheme, host or
port), requests are no longer signed (S3), and the extra headers named
Authorization, Cookie, Proxy-Authorization or x-amz-security-token are
left out (the rest are sent); they stay left out for the rest of that
request, even if a later hop comes back.

TLS
===
https:// is verified (peer and host name) unless `insecure` is set. The
CA bundle is the option `ca_file`, else the file named by the environment
variable WSYNC_CA_BUNDLE, else (S3 stores) AWS_CA_BUNDLE, else libcurl's
default (the system's); the path is copied at open. A certificate that does
not verify fails at once (not retried) with WSYNC_ERR_IO and a message that
says "TLS", the certificate problem and where to give the CA.

LIMITS
======
What a server sends is read no further than what was asked for: a
subscriber's object up to the size HEAD (or the listing) gives it, HEAD up
to WSYNC_CHAIN_HEAD_MAX_SIZE (16 MiB), a directory listing up to 64 MiB,
an S3 listing page up to 8 MiB. A body that goes past (a server ignoring
the range, a 206 longer than its Content-Range) is cut off as it arrives,
and the error names the object and the sizes (WSYNC_ERR_LIMIT; a 206 too
long is WSYNC_ERR_IO).

ERRORS
======
Every failure names the method, the URL and the HTTP status (or curl's
error) and the number of attempts. 404 is WSYNC_ERR_NOT_FOUND, a range
past the end WSYNC_ERR_OUT_OF_BOUNDS, a failing sink WSYNC_ERR_SINK, a
listing that is not the expected JSON WSYNC_ERR_INVALID_JSON, a PROPFIND
answer that is not a valid multistatus WSYNC_ERR_IO, and every other
transfer failure WSYNC_ERR_IO, 401/403 WSYNC_ERR_AUTH. S3's error code is
in the message: a 404 with NoSuchBucket (PUT into a bucket that does not
exist, too) is WSYNC_ERR_NO_STORE saying "no such bucket", so that a
reader tells a bucket that is not there from one with nothing published
(WSYNC_ERR_NOT_FOUND).

S3 REQUEST BODIES
=================
Objects above multipart_threshold (64 MiB) go up as multipart uploads in
parts of multipart_part_size (16 MiB); both can also come from the
environment (WSYNC_S3_MULTIPART_THRESHOLD, WSYNC_S3_PART_SIZE: bytes, or
with K, M, G). Some S3 servers take smaller bodies (fauxqs: 11 MiB). A
part or a single PUT answered HTTP 413 is sent again in parts half as
large, down to S3's 5 MiB minimum, and later uploads through the store
keep below the smallest size refused (wsync_http_stats.smaller_parts
counts such uploads). Past the minimum the upload fails (and is aborted),
naming the part, its size, the server's answer and the options.

COMPILE-TIME OPTIONS
====================
    WSYNC_HTTP_IMPLEMENTATION  emit the implementation in this translation unit
    WSYNC_HTTP_NO_CURL         build without libcurl: wsync_store_http_open
                               then fails with WSYNC_ERR_UNSUPPORTED and says
                               so (WSYNC_HTTP_AVAILABLE is 0). Define it in
                               every translation unit or in none.
    WSYNC_NO_THREADS           (from wsync.h) no mutex: one thread per store
    WSYNC_STATIC               (from wsync.h) these functions static too: both
                               implementations then go in the same file

REVISIONS
=========
    0.3.0  WebDAV listings by PROPFIND (wsync_http_options.listing: auto,
           json, propfind; wsync_http_propfind_parse), Apache mod_dav and
           nginx dav-ext; put makes the store's own path with MKCOL after a
           409; S3: a 413 answered with smaller parts (down to 5 MiB), part
           size and threshold from WSYNC_S3_PART_SIZE and
           WSYNC_S3_MULTIPART_THRESHOLD, wsync_http_stats.smaller_parts, and
           S3's error code in a 404's message (NoSuchBucket on PUT)
    0.2.0  downloads read no further than asked (wsync_store_get_capped): a
           206 longer than its range is cut off as it arrives, an S3 listing
           page is capped at 8 MiB and a directory listing at 64 MiB;
           WSYNC_STATIC builds warning-free
    0.1.0  the first release: the HTTP store (PUT, ranged and parallel GET,
           JSON directory listings, retries and resumes) and the S3 store
           (SigV4, ListObjectsV2, multipart uploads)

LICENSE
=======
MIT, as wsync.h.

CONTENTS
========
Every section's code carries a tag: search for it and the first hit is
its declarations, the second its implementation. A tag marked * has code
only in the implementation (one hit). tests/core/test_toc.sh checks this list.

    >>http          the HTTP store: options, wsync_store_http_open
    >>http-listing  the nginx JSON directory listing parser
    >>propfind      the WebDAV PROPFIND (multistatus) parser
    >>s3            the S3 store: options, wsync_store_s3_open
    >>s3-sig        SigV4 encoding and the ListObjectsV2 parser
    >>store-url     wsync_store_open_url: a directory, http(s):// or s3:// from one string
    >>transfer    * the transfer layer: a request, its response, retries
    >>get-parallel * large downloads as parallel ranged GETs
    >>s3-list     * S3 list: ListObjectsV2, page after page
    >>xml         * the XML tokenizer and the walk under both XML readers (S3 listings, PROPFIND)

Private names are wsync__; the short sub-prefixes mean:
    wsync__http_  wsync__s3_    the HTTP store, the S3 store
    wsync__h*_                  the transfer layer: hstream_ (a streamed
                                GET), hpart_ (a part of a parallel GET),
                                hfail_ / herr_ (failures), hcase_ / hcmp_ /
                                hcopy_ (header names and values), his_
                                (tests on responses)
    wsync__hjp_  wsync__hlist_  the listing's JSON reader; a listing's
                                entries and the keys kept (HTTP and S3)
    wsync__xml_  wsync__dav_    the XML tokenizer (S3 listings, PROPFIND),
                                PROPFIND's status lines; wsync__href_path an
                                href's path
    wsync__xr_                  the walk both XML readers loop on: their
                                elements as rules, values decoded, refusals
    wsync__s3body_              an S3 request body being built
*/
#ifndef WSYNC_HTTP_H
#define WSYNC_HTTP_H

#include "wsync.h"
#ifdef WSYNC_NO_CHAIN
#error "wsync_http.h needs wsync.h's runtime (the store interface): build without WSYNC_NO_CHAIN"
#endif

/* 1 when the stores are implemented with libcurl in this build. */
#ifdef WSYNC_HTTP_NO_CURL
#define WSYNC_HTTP_AVAILABLE 0
#else
#define WSYNC_HTTP_AVAILABLE 1
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The wsync.h version this header was written against. */
#define WSYNC_HTTP_REQUIRES_VERSION 100

#if WSYNC_VERSION_NUMBER < WSYNC_HTTP_REQUIRES_VERSION
#error "wsync_http.h needs a newer wsync.h"
#endif

/* ---- HTTP >>http ---- */

/* How the HTTP store lists a directory (wsync_http_options.listing). */
typedef enum wsync_http_listing {
    WSYNC_HTTP_LISTING_AUTO = 0,   /* PROPFIND first; the JSON autoindex when the server does not answer
                                      PROPFIND with 207; the first that works is kept for the store's life */
    WSYNC_HTTP_LISTING_JSON = 1,   /* GET of the directory: nginx's `autoindex_format json` only */
    WSYNC_HTTP_LISTING_PROPFIND = 2 /* WebDAV PROPFIND, Depth: 1 (Apache mod_dav, nginx dav-ext, rclone) */
} wsync_http_listing;

/* All zero (or a NULL pointer) means the defaults in brackets. */
typedef struct wsync_http_options {
    wsync_allocator allocator;
    unsigned connect_timeout_ms;   /* [10000] to establish a connection */
    unsigned low_speed_bytes;      /* [1024] a transfer slower than this many bytes/s ... */
    unsigned low_speed_seconds;    /* [30] ... for this long is abandoned (and retried) */
    unsigned timeout_ms;           /* [0: none] a whole request, any size */
    unsigned max_attempts;         /* [5] tries per request (1: no retry) */
    unsigned backoff_ms;           /* [200] wait before the first retry, doubled each time */
    unsigned max_backoff_ms;       /* [10000] longest wait, Retry-After included */
    unsigned parallel;             /* [4] connections for a large download (1: serial) */
    uint64_t parallel_threshold;   /* [64 MiB] downloads above this go parallel */
    uint64_t part_size;            /* [16 MiB] bytes per ranged GET of a parallel download */
    int insecure;                  /* 1: do not verify TLS certificates (tests only) */
    const char *ca_file;           /* [WSYNC_CA_BUNDLE, else (S3) AWS_CA_BUNDLE, else the system's]
                                      PEM bundle of the CAs to trust; copied at open */
    const char *const *headers;    /* extra request headers ("Authorization: Bearer x"),
                                      NULL-terminated; copied at open; credentials among
                                      them are not sent past a redirect to another origin */
    int verbose;                   /* curl's trace on stderr */
    wsync_http_listing listing;    /* [AUTO] how list reads a directory (HTTP stores; S3 ignores it) */
    unsigned idle_close_ms;        /* [500] a request that comes at least this long after the store's
                                      previous one ended (a poll) closes its connection when done, so that
                                      a follower holds no idle connection between polls (each holds a worker
                                      of a process-per-connection server, Apache prefork, until its
                                      KeepAliveTimeout); requests closer together reuse it. UINT_MAX: never */
} wsync_http_options;

/* Counters since the store was opened. */
typedef struct wsync_http_stats {
    uint64_t requests;             /* HTTP requests sent (attempts, MKCOLs and parts included) */
    uint64_t retries;              /* attempts after a failed one */
    uint64_t resumed;              /* downloads continued from where a cut left them */
    uint64_t parallel_gets;        /* downloads done as parallel ranged GETs */
    uint64_t bytes_down, bytes_up; /* bodies */
    uint64_t smaller_parts;        /* S3: uploads sent again in smaller parts after an HTTP 413 */
} wsync_http_stats;

/* A store over http://host[:port][/prefix] or https://...; objects are the
   URLs under it (key "deltas/step_000041.safetensors" is
   <url>/deltas/step_000041.safetensors, percent-encoded). Userinfo in the
   URL (http://user:pass@host/...) is sent as basic authentication. Nothing
   is sent at open. The store may be used from several threads at once. */
WSYNC_DEF wsync_result wsync_store_http_open(const char *url, const wsync_http_options *opt, wsync_store *out,
                                             wsync_error *err);
/* 1 and *out filled when s is an HTTP store; 0 otherwise. */
WSYNC_DEF int wsync_store_http_stats(const wsync_store *s, wsync_http_stats *out);
/* Closes the connections an HTTP or S3 store keeps open between requests
   (those of its idle handles and of its parallel downloads; a transfer in
   progress in another thread keeps its own), so that a caller about to
   sleep holds none; the next request connects again. Returns how many
   handles were let go; 0 for a store of another kind. */
WSYNC_DEF unsigned wsync_store_http_idle(const wsync_store *s);

/* ---- the directory listing parser >>http-listing ---- */

/* The JSON directory listing parser that list uses, exposed for tests and
   fuzzing: calls fn for every entry of an nginx autoindex JSON array (name
   decoded, not NUL-free-checked beyond the rules: no NUL, no '/', not "."
   or ".."; size only for files). Unknown fields are skipped; anything that
   is not that shape is WSYNC_ERR_INVALID_JSON with the byte offset. fn
   returns 0 to go on. */
typedef int (*wsync_http_entry_fn)(void *user, const char *name, size_t name_len, int is_dir, uint64_t size);
WSYNC_DEF wsync_result wsync_http_listing_parse(const void *json, size_t len, wsync_http_entry_fn fn, void *user,
                                                wsync_error *err);

/* ---- the WebDAV PROPFIND listing parser >>propfind ---- */

/* The PROPFIND (RFC 4918, Depth: 1) answer parser that list uses, exposed
   for tests and fuzzing: fn gets, for every <response> with a propstat whose
   status is 200, its <href>'s path and what its props say. Elements are
   matched on their local name (D:href, lp1:getcontentlength, a default
   namespace: all the same): multistatus > response > href, propstat >
   prop > resourcetype > collection, getcontentlength, and status.
   The path: an href that is an absolute URL (http:// or https://) loses its
   scheme and authority; it must then start with '/' (a relative or "//"
   reference is refused); it is percent-decoded strictly (a '%' not followed
   by two hex digits, a decoded NUL, a raw '?', '#' or control byte, a "."
   or ".." segment are refused). is_dir: the resourcetype holds a
   <collection/>; size: <getcontentlength>, an integer in [0, 2^63), which a
   non-collection must have (0 for a collection without one). A <response>
   needs one <href> and either <propstat>s, each with a <status>, or a
   <status> alone (then it is not reported); two lengths are refused.
   The XML rules are wsync_s3_listing_parse's (one tokenizer reads both):
   no DOCTYPE or CDATA, only the five predefined entities and numeric
   references, nesting at most 16, tags matched. A refusal is WSYNC_ERR_IO
   with the byte offset. fn returns 0 to go on. */
typedef int (*wsync_http_href_fn)(void *user, const char *path, size_t path_len, int is_dir, uint64_t size);
WSYNC_DEF wsync_result wsync_http_propfind_parse(const void *xml, size_t len, wsync_http_href_fn fn, void *user,
                                                 wsync_error *err);

/* ---- S3 >>s3 ----
   An S3-compatible bucket (AWS S3, the Hugging Face buckets S3 gateway,
   MinIO, Ceph) as a store: path-style requests signed with SigV4 by
   libcurl. All zero (or NULL) means the defaults in brackets. */
typedef struct wsync_s3_options {
    wsync_http_options http;       /* transfers: timeouts, retries, parallel downloads, TLS */
    const char *endpoint;          /* [AWS_ENDPOINT_URL, else https://s3.<region>.amazonaws.com] */
    const char *region;            /* [AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1] */
    const char *access_key_id;     /* [AWS_ACCESS_KEY_ID] */
    const char *secret_access_key; /* [AWS_SECRET_ACCESS_KEY] */
    const char *session_token;     /* [AWS_SESSION_TOKEN] sent as x-amz-security-token */
    uint64_t multipart_threshold;  /* [WSYNC_S3_MULTIPART_THRESHOLD, else 64 MiB] objects above this go up
                                      in parts */
    uint64_t multipart_part_size;  /* [WSYNC_S3_PART_SIZE, else 16 MiB] bytes per part, at least 5 MiB
                                      (S3's minimum part); a server that answers a part or a single PUT
                                      with HTTP 413 gets it again in parts half as large, down to 5 MiB
                                      (the store then keeps to below that size) */
} wsync_s3_options;

/* A store over s3://bucket[/prefix]: key "HEAD" is object "prefix/HEAD" of
   the bucket, at <endpoint>/<bucket>/<prefix>/HEAD (path style). Nothing is
   sent at open; credentials missing from both the options and the
   environment are WSYNC_ERR_INVALID_ARGUMENT. wsync_store_http_stats works
   on it. */
WSYNC_DEF wsync_result wsync_store_s3_open(const char *url, const wsync_s3_options *opt, wsync_store *out,
                                           wsync_error *err);

/* ---- S3 pieces without libcurl: SigV4 encoding, the listing parser >>s3-sig ---- */

/* SigV4's URI encoding of n bytes into out (cap bytes, NUL-terminated):
   A-Z a-z 0-9 - . _ ~ kept, '/' kept when keep_slash (object paths), every
   other byte %XX in upper case. Returns the length, or (size_t)-1 when out
   is too small. */
WSYNC_DEF size_t wsync_s3_uri_encode(const char *s, size_t n, int keep_slash, char *out, size_t cap);
/* SigV4's canonical query string of n name/value pairs (a NULL value is
   empty): each side encoded as above ('/' too), sorted by encoded name then
   value, "name=value" joined with '&' (the '=' is there for empty values).
   libcurl 7.88 signs the query as it is sent, so wsync sends this form.
   Returns the length, or (size_t)-1 when out is too small or n > 16. */
WSYNC_DEF size_t wsync_s3_query(const char *const *names, const char *const *values, size_t n, char *out,
                                size_t cap);

/* The ListObjectsV2 response parser that list uses, exposed for tests and
   fuzzing: fn gets every <Contents>'s <Key> (entities decoded; no NUL) and
   <Size>; *truncated gets <IsTruncated>, token (cap bytes) the
   <NextContinuationToken> ("" if none). DOCTYPE, CDATA, unknown entities,
   mismatched tags and nesting past 16 are refused: WSYNC_ERR_IO with the
   byte offset. fn returns 0 to go on. */
typedef int (*wsync_s3_key_fn)(void *user, const char *key, size_t key_len, uint64_t size);
WSYNC_DEF wsync_result wsync_s3_listing_parse(const void *xml, size_t len, wsync_s3_key_fn fn, void *user,
                                              int *truncated, char *token, size_t token_cap, wsync_error *err);

/* ---- a store named by a string >>store-url ----
   What a command line or a config file gives: a directory, an HTTP bucket
   or an S3 one, with every option of the three in one struct. All zero (or
   a NULL pointer) means each kind's defaults. */
typedef struct wsync_store_url_options {
    wsync_allocator allocator;  /* every kind's (http.allocator and s3.http.allocator are not read) */
    unsigned flags;             /* WSYNC_STORE_NO_CREATE: a reader's directory store never creates its root
                                   (a missing one is WSYNC_ERR_NO_STORE at each call: wsync.h's "Store") */
    int no_fsync;               /* directory stores: skip fsync (tests, tmpfs); put stays atomic */
    wsync_http_options http;    /* http(s):// and s3://: timeouts, retries, parallel downloads, part_size,
                                   TLS (insecure, ca_file), headers, verbose; listing (http(s):// only) */
    wsync_s3_options s3;        /* s3:// only: endpoint, region, keys and token, multipart_threshold and
                                   multipart_part_size, each [the environment's: wsync_store_s3_open];
                                   s3.http is not read (the field http above is) */
} wsync_store_url_options;

/* Opens the store `url` names:
     http://host[:port][/prefix], https://...  wsync_store_http_open (scheme in any case)
     s3://bucket[/prefix]                      wsync_store_s3_open (credentials, endpoint and region from
                                               the options, else AWS_* in the environment)
     anything else                             a directory: wsync_store_dir_open
   A string that starts with another scheme ("ftp://", "file://") is
   WSYNC_ERR_UNSUPPORTED naming it and the kinds wsync knows, unless a
   directory of that name exists (then it is that directory); "" and NULL
   are WSYNC_ERR_INVALID_ARGUMENT. A URL's userinfo never appears in a
   message. Without libcurl (WSYNC_HTTP_NO_CURL) directories still open. */
WSYNC_DEF wsync_result wsync_store_open_url(const char *url, const wsync_store_url_options *opt, wsync_store *out,
                                            wsync_error *err);

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_HTTP_H */

/* ======================================================================
   IMPLEMENTATION
   ====================================================================== */
#if defined(WSYNC_HTTP_IMPLEMENTATION) && !defined(WSYNC__HTTP_IMPLEMENTED)
#define WSYNC__HTTP_IMPLEMENTED

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/stat.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

static void wsync__herr_reset(wsync_error *err)
{
    if (!err) return;
    err->code = WSYNC_OK;
    err->offset = UINT64_MAX;
    err->tensor[0] = 0;
    err->message[0] = 0;
}

/* ---------------------------------------------------------------------
   The listing parser (no libcurl: it is tested and fuzzed on its own)  >>http-listing
   --------------------------------------------------------------------- */

typedef struct wsync__hjp {
    const unsigned char *p;
    size_t n, i;
    char *str;    /* decoded string (capacity n + 1: a decoded string is never longer) */
} wsync__hjp;

static void wsync__hjp_ws(wsync__hjp *j)
{
    while (j->i < j->n && (j->p[j->i] == ' ' || j->p[j->i] == '\t' || j->p[j->i] == '\n' || j->p[j->i] == '\r'))
        j->i++;
}

static int wsync__hjp_hex4(wsync__hjp *j, unsigned *out)
{
    unsigned v = 0, k;
    if (j->n - j->i < 4) return 0;
    for (k = 0; k < 4; k++) {
        unsigned char c = j->p[j->i + k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    j->i += 4;
    *out = v;
    return 1;
}

/* A string at j->i (the opening quote) decoded into j->str; *len its length. */
static int wsync__hjp_string(wsync__hjp *j, size_t *len)
{
    size_t o = 0;
    if (j->i >= j->n || j->p[j->i] != '"') return 0;
    j->i++;
    while (j->i < j->n) {
        unsigned char c = j->p[j->i++];
        if (c == '"') {
            j->str[o] = 0;
            *len = o;
            return 1;
        }
        if (c < 0x20) return 0;
        if (c != '\\') {
            j->str[o++] = (char)c;
            continue;
        }
        if (j->i >= j->n) return 0;
        c = j->p[j->i++];
        switch (c) {
        case '"': case '\\': case '/': j->str[o++] = (char)c; break;
        case 'b': j->str[o++] = '\b'; break;
        case 'f': j->str[o++] = '\f'; break;
        case 'n': j->str[o++] = '\n'; break;
        case 'r': j->str[o++] = '\r'; break;
        case 't': j->str[o++] = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (!wsync__hjp_hex4(j, &u)) return 0;
            if (u >= 0xDC00 && u <= 0xDFFF) return 0;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (j->n - j->i < 2 || j->p[j->i] != '\\' || j->p[j->i + 1] != 'u') return 0;
                j->i += 2;
                if (!wsync__hjp_hex4(j, &lo) || lo < 0xDC00 || lo > 0xDFFF) return 0;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            /* 6 escaped bytes (12 for a pair) become at most 4: o stays below i */
            if (u < 0x80) j->str[o++] = (char)u;
            else if (u < 0x800) {
                j->str[o++] = (char)(0xC0 | (u >> 6));
                j->str[o++] = (char)(0x80 | (u & 0x3F));
            } else if (u < 0x10000) {
                j->str[o++] = (char)(0xE0 | (u >> 12));
                j->str[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
                j->str[o++] = (char)(0x80 | (u & 0x3F));
            } else {
                j->str[o++] = (char)(0xF0 | (u >> 18));
                j->str[o++] = (char)(0x80 | ((u >> 12) & 0x3F));
                j->str[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
                j->str[o++] = (char)(0x80 | (u & 0x3F));
            }
            break;
        }
        default: return 0;
        }
    }
    return 0;
}

/* A JSON number (RFC 8259 grammar); *u gets it when it is a plain
   non-negative integer below 2^63, else *is_uint is 0. */
static int wsync__hjp_number(wsync__hjp *j, uint64_t *u, int *is_uint)
{
    size_t start = j->i;
    uint64_t v = 0;
    int ok = 1;
    if (j->i < j->n && j->p[j->i] == '-') {
        j->i++;
        ok = 0;
    }
    if (j->i >= j->n || j->p[j->i] < '0' || j->p[j->i] > '9') return 0;
    if (j->p[j->i] == '0') j->i++;
    else
        while (j->i < j->n && j->p[j->i] >= '0' && j->p[j->i] <= '9') {
            unsigned d = (unsigned)(j->p[j->i++] - '0');
            if (v > (UINT64_C(0x7FFFFFFFFFFFFFFF) - d) / 10) ok = 0;
            else v = v * 10 + d;
        }
    if (j->i < j->n && j->p[j->i] == '.') {
        ok = 0;
        j->i++;
        if (j->i >= j->n || j->p[j->i] < '0' || j->p[j->i] > '9') return 0;
        while (j->i < j->n && j->p[j->i] >= '0' && j->p[j->i] <= '9') j->i++;
    }
    if (j->i < j->n && (j->p[j->i] == 'e' || j->p[j->i] == 'E')) {
        ok = 0;
        j->i++;
        if (j->i < j->n && (j->p[j->i] == '+' || j->p[j->i] == '-')) j->i++;
        if (j->i >= j->n || j->p[j->i] < '0' || j->p[j->i] > '9') return 0;
        while (j->i < j->n && j->p[j->i] >= '0' && j->p[j->i] <= '9') j->i++;
    }
    (void)start;
    *u = v;
    *is_uint = ok;
    return 1;
}

static int wsync__hjp_lit(wsync__hjp *j, const char *lit)
{
    size_t k = strlen(lit);
    if (j->n - j->i < k || memcmp(j->p + j->i, lit, k) != 0) return 0;
    j->i += k;
    return 1;
}

/* After a value in an array or object: white space, then ',' (taken;
   returns 1, another value follows) or `end` (taken; returns 0, the last);
   anything else returns -1 with j->i on it. */
static int wsync__hjp_next(wsync__hjp *j, unsigned char end)
{
    wsync__hjp_ws(j);
    if (j->i < j->n && j->p[j->i] == ',') {
        j->i++;
        return 1;
    }
    if (j->i < j->n && j->p[j->i] == end) {
        j->i++;
        return 0;
    }
    return -1;
}

#define WSYNC__HJP_BAD(why)                                                                           \
    do {                                                                                             \
        r = wsync_error_set(err, WSYNC_ERR_INVALID_JSON, "directory listing at byte %lu: %s",          \
                         (unsigned long)j.i, why);                                                   \
        if (err) err->offset = (uint64_t)j.i;                                                        \
        goto done;                                                                                   \
    } while (0)

WSYNC_DEF wsync_result wsync_http_listing_parse(const void *json, size_t len, wsync_http_entry_fn fn, void *user,
                                                wsync_error *err)
{
    wsync__hjp j;
    wsync_result r = WSYNC_OK;
    char *name = NULL;
    wsync__herr_reset(err);
    if ((!json && len) || !fn) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "listing arguments");
    if (len > (size_t)-1 / 2 - 2) return wsync_error_set(err, WSYNC_ERR_LIMIT, "%s", "listing too large");
    memset(&j, 0, sizeof j);
    j.p = (const unsigned char *)json;
    j.n = len;
    j.str = (char *)malloc(len + 1);
    name = (char *)malloc(len + 1);
    if (!j.str || !name) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "listing parser");
        goto done;
    }
    wsync__hjp_ws(&j);
    if (j.i >= j.n || j.p[j.i] != '[') WSYNC__HJP_BAD("expected '['");
    j.i++;
    wsync__hjp_ws(&j);
    if (j.i < j.n && j.p[j.i] == ']') {
        j.i++;
    } else {
        for (;;) {
            size_t name_len = 0, slen;
            int have_name = 0, have_type = 0, have_size = 0, is_dir = 0, is_file = 0, more;
            uint64_t size = 0;
            wsync__hjp_ws(&j);
            if (j.i >= j.n || j.p[j.i] != '{') WSYNC__HJP_BAD("expected an object");
            j.i++;
            wsync__hjp_ws(&j);
            if (j.i < j.n && j.p[j.i] == '}') WSYNC__HJP_BAD("an entry without a name");
            for (;;) {
                int field; /* 1 name, 2 type, 3 size, 0 other */
                wsync__hjp_ws(&j);
                if (!wsync__hjp_string(&j, &slen)) WSYNC__HJP_BAD("expected a field name");
                field = strcmp(j.str, "name") == 0 ? 1 : strcmp(j.str, "type") == 0 ? 2
                      : strcmp(j.str, "size") == 0 ? 3 : 0;
                if (slen != strlen(j.str)) field = 0;
                wsync__hjp_ws(&j);
                if (j.i >= j.n || j.p[j.i] != ':') WSYNC__HJP_BAD("expected ':'");
                j.i++;
                wsync__hjp_ws(&j);
                if (j.i >= j.n) WSYNC__HJP_BAD("expected a value");
                if (j.p[j.i] == '"') {
                    if (!wsync__hjp_string(&j, &slen)) WSYNC__HJP_BAD("bad string");
                    if (field == 1) {
                        if (have_name) WSYNC__HJP_BAD("duplicate \"name\"");
                        have_name = 1;
                        memcpy(name, j.str, slen + 1);
                        name_len = slen;
                    } else if (field == 2) {
                        if (have_type) WSYNC__HJP_BAD("duplicate \"type\"");
                        have_type = 1;
                        is_dir = slen == 9 && memcmp(j.str, "directory", 9) == 0;
                        is_file = slen == 4 && memcmp(j.str, "file", 4) == 0;
                    } else if (field == 3) {
                        WSYNC__HJP_BAD("\"size\" is not a number");
                    }
                } else if (j.p[j.i] == '-' || (j.p[j.i] >= '0' && j.p[j.i] <= '9')) {
                    uint64_t v;
                    int is_uint;
                    if (!wsync__hjp_number(&j, &v, &is_uint)) WSYNC__HJP_BAD("bad number");
                    if (field == 3) {
                        if (have_size) WSYNC__HJP_BAD("duplicate \"size\"");
                        if (!is_uint) WSYNC__HJP_BAD("\"size\" is not an integer in [0, 2^63)");
                        have_size = 1;
                        size = v;
                    } else if (field) {
                        WSYNC__HJP_BAD("\"name\" or \"type\" is not a string");
                    }
                } else if (!field && (wsync__hjp_lit(&j, "true") || wsync__hjp_lit(&j, "false") ||
                                      wsync__hjp_lit(&j, "null"))) {
                    /* a field we do not use */
                } else {
                    WSYNC__HJP_BAD("unexpected value (nested values are refused)");
                }
                more = wsync__hjp_next(&j, '}');
                if (more < 0) WSYNC__HJP_BAD("expected ',' or '}'");
                if (!more) break;
            }
            if (!have_name || !have_type) WSYNC__HJP_BAD("an entry without \"name\" or \"type\"");
            if (name_len == 0 || memchr(name, 0, name_len) || memchr(name, '/', name_len) ||
                strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                WSYNC__HJP_BAD("an entry name that is empty, '.', '..' or holds '/' or NUL");
            if (is_file && !have_size) WSYNC__HJP_BAD("a file without \"size\"");
            if ((is_dir || is_file) && fn(user, name, name_len, is_dir, size) != 0) goto done;
            more = wsync__hjp_next(&j, ']');
            if (more < 0) WSYNC__HJP_BAD("expected ',' or ']'");
            if (!more) break;
        }
    }
    wsync__hjp_ws(&j);
    if (j.i != j.n) WSYNC__HJP_BAD("bytes after the listing");
done:
    free(j.str);
    free(name);
    return r;
}
#undef WSYNC__HJP_BAD

/* ---------------------------------------------------------------------
   The XML tokenizer that both XML readers use (no libcurl)  >>xml
   S3's ListObjectsV2 pages and WebDAV's PROPFIND answers go through one
   set of rules: no DOCTYPE or CDATA, only the five predefined entities
   and numeric references (decoded by wsync__xml_text), processing
   instructions only before the root, one root, tags matched, nesting at
   most 16. The walk over it (wsync__xr_) takes each reader's shape as
   rules and hands it the values it asked for.
   --------------------------------------------------------------------- */

/* Decodes XML text p[0..n) (entities and numeric references) into out,
   which has room for n + 1 bytes (decoding never grows the text). Returns
   the length, or (size_t)-1 on a bad or unknown entity, a NUL, a '<'. */
static size_t wsync__xml_text(const unsigned char *p, size_t n, char *out, size_t *bad_at)
{
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c == 0 || c == '<') {
            *bad_at = i;
            return (size_t)-1;
        }
        if (c != '&') {
            out[o++] = (char)c;
            i++;
            continue;
        }
        {
            const unsigned char *semi = (const unsigned char *)memchr(p + i, ';', n - i < 12 ? n - i : 12);
            size_t el;
            unsigned long u = 0;
            if (!semi) {
                *bad_at = i;
                return (size_t)-1;
            }
            el = (size_t)(semi - (p + i)) + 1; /* "&...;" */
            if (el == 5 && memcmp(p + i, "&amp;", 5) == 0) out[o++] = '&';
            else if (el == 4 && memcmp(p + i, "&lt;", 4) == 0) out[o++] = '<';
            else if (el == 4 && memcmp(p + i, "&gt;", 4) == 0) out[o++] = '>';
            else if (el == 6 && memcmp(p + i, "&quot;", 6) == 0) out[o++] = '"';
            else if (el == 6 && memcmp(p + i, "&apos;", 6) == 0) out[o++] = '\'';
            else if (el >= 4 && p[i + 1] == '#') {
                size_t k = i + 2, digits = 0;
                int hexa = p[k] == 'x';
                if (hexa) k++;
                for (; p + k < semi; k++, digits++) {
                    unsigned d;
                    unsigned char ch = p[k];
                    if (ch >= '0' && ch <= '9') d = (unsigned)(ch - '0');
                    else if (hexa && ch >= 'a' && ch <= 'f') d = (unsigned)(ch - 'a' + 10);
                    else if (hexa && ch >= 'A' && ch <= 'F') d = (unsigned)(ch - 'A' + 10);
                    else {
                        *bad_at = k;
                        return (size_t)-1;
                    }
                    u = u * (hexa ? 16u : 10u) + d;
                    if (u > 0x10FFFF) {
                        *bad_at = i;
                        return (size_t)-1;
                    }
                }
                if (!digits || u == 0 || (u >= 0xD800 && u <= 0xDFFF)) {
                    *bad_at = i;
                    return (size_t)-1;
                }
                /* "&#N;" is at least 4 bytes: the UTF-8 form never outgrows it */
                if (u < 0x80) out[o++] = (char)u;
                else if (u < 0x800) {
                    out[o++] = (char)(0xC0 | (u >> 6));
                    out[o++] = (char)(0x80 | (u & 0x3F));
                } else if (u < 0x10000) {
                    out[o++] = (char)(0xE0 | (u >> 12));
                    out[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
                    out[o++] = (char)(0x80 | (u & 0x3F));
                } else {
                    out[o++] = (char)(0xF0 | (u >> 18));
                    out[o++] = (char)(0x80 | ((u >> 12) & 0x3F));
                    out[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
                    out[o++] = (char)(0x80 | (u & 0x3F));
                }
            } else {
                *bad_at = i;
                return (size_t)-1;
            }
            i += el;
        }
    }
    out[o] = 0;
    return o;
}

static int wsync__xml_is_name(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == ':' ||
           c == '-' || c == '.' || c >= 0x80;
}

static int wsync__xml_name_is(const unsigned char *p, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(p, lit, n) == 0;
}

#define WSYNC__XML_DEPTH 16

enum { WSYNC__X_EOF, WSYNC__X_OPEN, WSYNC__X_CLOSE, WSYNC__X_TEXT, WSYNC__X_COMMENT, WSYNC__X_ERR };

typedef struct wsync__xml {
    const unsigned char *p;
    size_t n, i;
    const unsigned char *st_name[WSYNC__XML_DEPTH]; /* the open elements' qualified names */
    size_t st_len[WSYNC__XML_DEPTH];
    size_t depth;
    int seen_root, pending_close;
    /* the event */
    size_t at;                 /* where it starts */
    size_t name_at, name_len;  /* OPEN, CLOSE: the qualified name ("D:href") */
    size_t local_at, local_len;/* OPEN, CLOSE: the local name (after the last ':') */
    size_t text_at, text_len;  /* TEXT: raw bytes, entities not decoded */
    const char *why;           /* ERR */
} wsync__xml;

static int wsync__xml_err(wsync__xml *x, size_t at, const char *why)
{
    x->at = at;
    x->why = why;
    return WSYNC__X_ERR;
}

static void wsync__xml_local(wsync__xml *x, size_t ns, size_t ne)
{
    size_t k = ne;
    x->name_at = ns;
    x->name_len = ne - ns;
    while (k > ns && x->p[k - 1] != ':') k--;
    x->local_at = k;
    x->local_len = ne - k;
}

/* The next event. Whitespace outside the root is skipped; an element closed
   with "/>" gives OPEN then CLOSE. PIs only before the root. After OPEN,
   x->depth counts the element (the root is 1); after CLOSE it is one less
   (the element's index: the root's is 0). Text between two tags is one TEXT
   event; a reader refuses what it does not expect inside a value (an
   element, a comment). */
static int wsync__xml_next(wsync__xml *x)
{
    const unsigned char *p = x->p;
    size_t n = x->n;
    if (x->pending_close) {
        x->pending_close = 0;
        x->depth--;
        wsync__xml_local(x, (size_t)(x->st_name[x->depth] - p), (size_t)(x->st_name[x->depth] - p) + x->st_len[x->depth]);
        return WSYNC__X_CLOSE;
    }
    if (x->i == 0 && n >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF) x->i = 3;
    for (;;) {
        size_t i = x->i;
        x->at = i;
        if (i >= n) {
            if (!x->seen_root || x->depth) return wsync__xml_err(x, n, "the document ends inside an element (or has no root)");
            return WSYNC__X_EOF;
        }
        if (p[i] != '<') {
            const unsigned char *lt = (const unsigned char *)memchr(p + i, '<', n - i);
            size_t end = lt ? (size_t)(lt - p) : n, k;
            x->i = end;
            if (x->depth == 0) {
                for (k = i; k < end; k++)
                    if (p[k] != ' ' && p[k] != '\t' && p[k] != '\r' && p[k] != '\n')
                        return wsync__xml_err(x, k, "text outside the root element");
                continue;
            }
            x->text_at = i;
            x->text_len = end - i;
            return WSYNC__X_TEXT;
        }
        if (n - i >= 2 && p[i + 1] == '?') {
            const unsigned char *q = p + i + 2;
            size_t left = n - i - 2;
            while (left >= 2 && !(q[0] == '?' && q[1] == '>')) q++, left--;
            if (left < 2) return wsync__xml_err(x, i, "an unterminated <?...?>");
            if (x->depth || x->seen_root) return wsync__xml_err(x, i, "a processing instruction after the root began");
            x->i = (size_t)(q - p) + 2;
            continue;
        }
        if (n - i >= 4 && memcmp(p + i, "<!--", 4) == 0) {
            const unsigned char *q = p + i + 4;
            size_t left = n - i - 4;
            while (left >= 3 && memcmp(q, "-->", 3) != 0) q++, left--;
            if (left < 3) return wsync__xml_err(x, i, "an unterminated comment");
            x->i = (size_t)(q - p) + 3;
            return WSYNC__X_COMMENT;
        }
        if (n - i >= 2 && p[i + 1] == '!') return wsync__xml_err(x, i, "DOCTYPE and CDATA are refused");
        if (n - i >= 2 && p[i + 1] == '/') {
            size_t ns = i + 2, ne = ns;
            while (ne < n && wsync__xml_is_name(p[ne])) ne++;
            if (x->depth == 0 || ne - ns != x->st_len[x->depth - 1] ||
                memcmp(p + ns, x->st_name[x->depth - 1], ne - ns) != 0)
                return wsync__xml_err(x, i, "a closing tag that does not match the open one");
            while (ne < n && (p[ne] == ' ' || p[ne] == '\t' || p[ne] == '\r' || p[ne] == '\n')) ne++;
            if (ne >= n || p[ne] != '>') return wsync__xml_err(x, ne, "expected '>'");
            x->depth--;
            x->i = ne + 1;
            wsync__xml_local(x, ns, ns + x->st_len[x->depth]);
            return WSYNC__X_CLOSE;
        }
        {
            size_t ns = i + 1, ne = ns, k;
            char quote = 0;
            while (ne < n && wsync__xml_is_name(p[ne])) ne++;
            if (ne == ns) return wsync__xml_err(x, i, "a '<' that starts no tag");
            if (p[ne - 1] == ':' || p[ns] == ':') return wsync__xml_err(x, ns, "a tag name with an empty prefix or local part");
            for (k = ne; k < n; k++) {
                if (quote) {
                    if (p[k] == (unsigned char)quote) quote = 0;
                } else if (p[k] == '"' || p[k] == '\'') quote = (char)p[k];
                else if (p[k] == '<') return wsync__xml_err(x, k, "a '<' inside a tag");
                else if (p[k] == '>') break;
            }
            if (k >= n) return wsync__xml_err(x, i, "an unterminated tag");
            if (ne < k && p[ne] != ' ' && p[ne] != '\t' && p[ne] != '\r' && p[ne] != '\n' && p[ne] != '/')
                return wsync__xml_err(x, ne, "a bad character in a tag name");
            if (x->depth == 0 && x->seen_root) return wsync__xml_err(x, i, "a second root element");
            if (x->depth >= WSYNC__XML_DEPTH) return wsync__xml_err(x, ns, "elements nested deeper than 16");
            x->seen_root = 1;
            x->st_name[x->depth] = p + ns;
            x->st_len[x->depth] = ne - ns;
            x->depth++;
            x->pending_close = p[k - 1] == '/' && k - 1 >= ne;
            x->i = k + 1;
            wsync__xml_local(x, ns, ne);
            return WSYNC__X_OPEN;
        }
    }
}

/* The walk both readers loop on. A reader describes its document as rules:
   an element named so under a parent of a kind is of this kind (the root's
   parent is WSYNC__XR_TOP; an element no rule names, and all below it, is
   kind 0 and skipped), and a leaf's text is a value. The walk refuses
   what a value must not hold (an element, a comment, text in two pieces)
   and gives the reader the elements it named as they open and close, and
   each value decoded (entities) when its leaf closes. Errors read
   "<what> at byte N: why", WSYNC_ERR_IO, with the offset. */

#define WSYNC__XR_TOP 255

typedef struct wsync__xr_rule {
    unsigned char parent, kind;
    unsigned char leaf;    /* 1: its text is a value (WSYNC__XR_VALUE) */
    const char *name;
} wsync__xr_rule;

typedef struct wsync__xr_format {
    const char *what;      /* the document in messages: "S3 listing" */
    const char *not_root;  /* the refusal of another root: "the root is not <ListBucketResult>" */
    int local;             /* 1: names matched on their local part (D:href, href: the same); 0: whole */
    const wsync__xr_rule *rules;
    size_t n_rules;
} wsync__xr_format;

enum { WSYNC__XR_EOF, WSYNC__XR_OPEN, WSYNC__XR_CLOSE, WSYNC__XR_VALUE, WSYNC__XR_ERR };

typedef struct wsync__xr {
    wsync__xml x;
    const wsync__xr_format *f;
    unsigned char kind[WSYNC__XML_DEPTH]; /* the open elements' kinds */
    /* the event: OPEN, CLOSE, VALUE: the element's kind; VALUE: its value */
    int ev_kind;
    char *text;            /* the value decoded, NUL-terminated (room for the whole input) */
    char *keep;            /* the reader's own copy of a value (a key, a path): room for the input + 2 */
    size_t text_len;
    size_t value_at;       /* where the value starts (an empty one: the tag that ends it) */
    /* the leaf being read */
    int leaf, pieces;
    size_t raw_len;
    /* ERR */
    size_t at;
    const char *why;
} wsync__xr;

static int wsync__xr_err(wsync__xr *w, size_t at, const char *why)
{
    w->at = at;
    w->why = why;
    return WSYNC__XR_ERR;
}

static int wsync__xr_next(wsync__xr *w)
{
    wsync__xml *x = &w->x;
    for (;;) {
        int ev = wsync__xml_next(x);
        if (ev == WSYNC__X_EOF) return WSYNC__XR_EOF;
        if (ev == WSYNC__X_ERR) return wsync__xr_err(w, x->at, x->why);
        if (ev == WSYNC__X_COMMENT) {
            if (w->leaf) return wsync__xr_err(w, x->at, "a comment inside a value");
            continue;
        }
        if (ev == WSYNC__X_TEXT) {
            if (w->leaf) {
                if (w->pieces++) return wsync__xr_err(w, x->at, "a value in pieces");
                w->value_at = x->text_at;
                w->raw_len = x->text_len;
            }
            continue;
        }
        if (ev == WSYNC__X_OPEN) {
            size_t d = x->depth - 1, k;
            const unsigned char *nm = x->p + (w->f->local ? x->local_at : x->name_at);
            size_t nl = w->f->local ? x->local_len : x->name_len;
            int parent = d ? w->kind[d - 1] : WSYNC__XR_TOP;
            if (w->leaf) return wsync__xr_err(w, x->at, "an element inside a value");
            w->ev_kind = 0;
            for (k = 0; k < w->f->n_rules; k++) {
                const wsync__xr_rule *ru = &w->f->rules[k];
                if (ru->parent == parent && wsync__xml_name_is(nm, nl, ru->name)) {
                    w->ev_kind = ru->kind;
                    if (ru->leaf) {
                        w->leaf = ru->kind;
                        w->pieces = 0;
                        w->raw_len = 0;
                    }
                    break;
                }
            }
            if (parent == WSYNC__XR_TOP && !w->ev_kind) return wsync__xr_err(w, x->at, w->f->not_root);
            w->kind[d] = (unsigned char)w->ev_kind;
            if (w->ev_kind) return WSYNC__XR_OPEN;
            continue;
        }
        /* WSYNC__X_CLOSE: x->depth is now this element's level */
        w->ev_kind = w->kind[x->depth];
        if (!w->ev_kind) continue;
        if (!w->leaf) return WSYNC__XR_CLOSE;
        {
            size_t bad = 0;
            if (!w->pieces) w->value_at = x->at;
            w->text_len = wsync__xml_text(x->p + w->value_at, w->raw_len, w->text, &bad);
            if (w->text_len == (size_t)-1)
                return wsync__xr_err(w, w->value_at + bad, "a bad character or entity in a value");
            w->leaf = 0;
            return WSYNC__XR_VALUE;
        }
    }
}

/* Readies w over xml[0..len) (the reader has checked its arguments); whatever
   it returns, wsync__xr_end frees what it took. */
static wsync_result wsync__xr_begin(wsync__xr *w, const wsync__xr_format *f, const void *xml, size_t len,
                                    wsync_error *err)
{
    memset(w, 0, sizeof *w);
    w->f = f;
    if (len > ((size_t)-1) / 2 - 2) return wsync_error_set(err, WSYNC_ERR_LIMIT, "%s too large", f->what);
    w->x.p = (const unsigned char *)xml;
    w->x.n = len;
    w->text = (char *)malloc(len + 1);
    w->keep = (char *)malloc(len + 2);
    if (!w->text || !w->keep) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s parser", f->what);
    return WSYNC_OK;
}

static void wsync__xr_end(wsync__xr *w)
{
    free(w->text);
    free(w->keep);
}

/* The refusal of the document at byte at. */
static wsync_result wsync__xr_bad(const wsync__xr *w, wsync_error *err, size_t at, const char *why)
{
    wsync_result r = wsync_error_set(err, WSYNC_ERR_IO, "%s at byte %lu: %s", w->f->what, (unsigned long)at, why);
    if (err) err->offset = (uint64_t)at;
    return r;
}

/* s[0..n) as an integer in [0, 2^63): 1 and *out, or 0. */
static int wsync__xr_u63(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t k;
    if (n == 0 || n > 19) return 0;
    for (k = 0; k < n; k++) {
        unsigned d = (unsigned)((unsigned char)s[k] - '0');
        if (d > 9 || v > (UINT64_C(0x7FFFFFFFFFFFFFFF) - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* In a reader with wsync__xr w, wsync_result r and a done: label. */
#define WSYNC__XR_BAD(at, why)                   \
    do {                                         \
        r = wsync__xr_bad(&w, err, (at), (why)); \
        goto done;                               \
    } while (0)

/* ---------------------------------------------------------------------
   S3 pieces without libcurl: SigV4 encoding, the ListObjectsV2 parser  >>s3-sig
   --------------------------------------------------------------------- */

WSYNC_DEF size_t wsync_s3_uri_encode(const char *s, size_t n, int keep_slash, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i, o = 0;
    if (!out || cap == 0 || (!s && n)) return (size_t)-1;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                   c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
        if (cap - o < (keep ? 2u : 4u)) return (size_t)-1;
        if (keep) out[o++] = (char)c;
        else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = 0;
    return o;
}

WSYNC_DEF size_t wsync_s3_query(const char *const *names, const char *const *values, size_t n, char *out,
                                size_t cap)
{
    char *enc[32];
    size_t order[16], i, j, o = 0, total = 0;
    size_t result = (size_t)-1;
    if (!out || cap == 0 || n > 16 || (n && !names)) return (size_t)-1;
    memset(enc, 0, sizeof enc);
    for (i = 0; i < n; i++) {
        const char *v = values && values[i] ? values[i] : "";
        size_t nl, vl;
        if (!names[i]) goto done;
        nl = strlen(names[i]);
        vl = strlen(v);
        if (nl > ((size_t)-1) / 4 - 1 || vl > ((size_t)-1) / 4 - 1) goto done;
        enc[2 * i] = (char *)malloc(3 * nl + 1);
        enc[2 * i + 1] = (char *)malloc(3 * vl + 1);
        if (!enc[2 * i] || !enc[2 * i + 1]) goto done;
        wsync_s3_uri_encode(names[i], nl, 0, enc[2 * i], 3 * nl + 1);
        wsync_s3_uri_encode(v, vl, 0, enc[2 * i + 1], 3 * vl + 1);
        order[i] = i;
    }
    /* a handful of pairs: insertion sort by name, then value */
    for (i = 1; i < n; i++)
        for (j = i; j > 0; j--) {
            size_t a = order[j - 1], b = order[j], t;
            int c = strcmp(enc[2 * a], enc[2 * b]);
            if (c < 0 || (c == 0 && strcmp(enc[2 * a + 1], enc[2 * b + 1]) <= 0)) break;
            t = order[j - 1];
            order[j - 1] = order[j];
            order[j] = t;
        }
    for (i = 0; i < n; i++) {
        size_t nl = strlen(enc[2 * order[i]]), vl = strlen(enc[2 * order[i] + 1]);
        if (nl + vl + 2 > cap - o) goto done; /* '=' and '&' or the NUL */
        if (i) out[o++] = '&';
        memcpy(out + o, enc[2 * order[i]], nl);
        o += nl;
        out[o++] = '=';
        memcpy(out + o, enc[2 * order[i] + 1], vl);
        o += vl;
    }
    out[o] = 0;
    total = o;
    result = total;
done:
    for (i = 0; i < 2 * n; i++) free(enc[i]);
    if (result == (size_t)-1) out[0] = 0;
    return result;
}

enum { WSYNC__S3K_RESULT = 1, WSYNC__S3K_CONTENTS, WSYNC__S3K_KEY, WSYNC__S3K_SIZE, WSYNC__S3K_TRUNC, WSYNC__S3K_TOKEN };

static const wsync__xr_rule wsync__s3_listing_rules[] = {
    {WSYNC__XR_TOP, WSYNC__S3K_RESULT, 0, "ListBucketResult"},
    {WSYNC__S3K_RESULT, WSYNC__S3K_CONTENTS, 0, "Contents"},
    {WSYNC__S3K_RESULT, WSYNC__S3K_TRUNC, 1, "IsTruncated"},
    {WSYNC__S3K_RESULT, WSYNC__S3K_TOKEN, 1, "NextContinuationToken"},
    {WSYNC__S3K_CONTENTS, WSYNC__S3K_KEY, 1, "Key"},
    {WSYNC__S3K_CONTENTS, WSYNC__S3K_SIZE, 1, "Size"}};

static const wsync__xr_format wsync__s3_listing_format = {
    "S3 listing", "the root is not <ListBucketResult>", 0, wsync__s3_listing_rules,
    sizeof wsync__s3_listing_rules / sizeof wsync__s3_listing_rules[0]};

/* ListBucketResult > Contents > Key, Size; ListBucketResult > IsTruncated,
   NextContinuationToken: names compared whole (S3 sends no prefixes), the
   rest skipped. */
WSYNC_DEF wsync_result wsync_s3_listing_parse(const void *xml, size_t len, wsync_s3_key_fn fn, void *user,
                                              int *truncated, char *token, size_t token_cap, wsync_error *err)
{
    wsync__xr w;
    wsync_result r;
    size_t key_len = 0;
    int have_key = 0, have_size = 0, have_trunc = 0;
    uint64_t size = 0;
    wsync__herr_reset(err);
    if ((!xml && len) || !fn || !truncated || !token || token_cap == 0)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "listing arguments");
    *truncated = 0;
    token[0] = 0;
    if ((r = wsync__xr_begin(&w, &wsync__s3_listing_format, xml, len, err)) != WSYNC_OK) goto done;
    for (;;) {
        int ev = wsync__xr_next(&w);
        const char *text = w.text;
        size_t tl = w.text_len;
        if (ev == WSYNC__XR_EOF) break;
        if (ev == WSYNC__XR_ERR) WSYNC__XR_BAD(w.at, w.why);
        if (ev == WSYNC__XR_OPEN) {
            if (w.ev_kind == WSYNC__S3K_CONTENTS) have_key = have_size = 0;
        } else if (ev == WSYNC__XR_CLOSE) {
            if (w.ev_kind != WSYNC__S3K_CONTENTS) continue;
            if (!have_key || !have_size) WSYNC__XR_BAD(w.x.at, "a <Contents> without <Key> or <Size>");
            if (fn(user, w.keep, key_len, size) != 0) goto done;
        } else if (w.ev_kind == WSYNC__S3K_KEY) {
            if (have_key) WSYNC__XR_BAD(w.value_at, "two <Key> in one <Contents>");
            if (tl == 0 || memchr(text, 0, tl)) WSYNC__XR_BAD(w.value_at, "an empty <Key>");
            memcpy(w.keep, text, tl + 1);
            key_len = tl;
            have_key = 1;
        } else if (w.ev_kind == WSYNC__S3K_SIZE) {
            if (have_size) WSYNC__XR_BAD(w.value_at, "two <Size> in one <Contents>");
            if (!wsync__xr_u63(text, tl, &size)) WSYNC__XR_BAD(w.value_at, "<Size> is not an integer in [0, 2^63)");
            have_size = 1;
        } else if (w.ev_kind == WSYNC__S3K_TRUNC) {
            if (have_trunc) WSYNC__XR_BAD(w.value_at, "two <IsTruncated>");
            if (strcmp(text, "true") == 0) *truncated = 1;
            else if (strcmp(text, "false") == 0) *truncated = 0;
            else WSYNC__XR_BAD(w.value_at, "<IsTruncated> is neither true nor false");
            have_trunc = 1;
        } else { /* NextContinuationToken */
            if (tl >= token_cap || memchr(text, 0, tl)) WSYNC__XR_BAD(w.value_at, "<NextContinuationToken> too long");
            memcpy(token, text, tl + 1);
        }
    }
    if (*truncated && !token[0]) WSYNC__XR_BAD(len, "<IsTruncated>true without a <NextContinuationToken>");
done:
    wsync__xr_end(&w);
    return r;
}

/* ---------------------------------------------------------------------
   The WebDAV PROPFIND answer parser (no libcurl)  >>propfind
   The multistatus shape over the XML tokenizer above.
   --------------------------------------------------------------------- */

static int wsync__hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* An href (or a URL of ours) reduced to its path and percent-decoded into
   out (room for n + 1 bytes: decoding never grows it); the path starts
   with '/', has no NUL, no "." or ".." segment. Returns its length, or
   (size_t)-1 with *why and *bad_at (offset in s). */
static size_t wsync__href_path(const char *s, size_t n, char *out, const char **why, size_t *bad_at)
{
    size_t i = 0, o = 0, seg, k;
    static const char scheme[] = "https://";
    for (k = 0; k < 8 && k < n && ((unsigned char)s[k] | 0x20) == (unsigned char)scheme[k]; k++) {}
    if (k == 8) i = 8;
    else if (k == 4 && n >= 7 && memcmp(s + 4, "://", 3) == 0) i = 7;
    if (i) {
        size_t a = i;
        while (i < n && s[i] != '/') {
            if (s[i] == '?' || s[i] == '#' || (unsigned char)s[i] <= 0x20 || s[i] == 0x7F) {
                *why = "a bad byte in the href's host";
                *bad_at = i;
                return (size_t)-1;
            }
            i++;
        }
        if (i == a) {
            *why = "an href URL without a host";
            *bad_at = i;
            return (size_t)-1;
        }
        if (i == n) { /* "http://host": the root */
            out[0] = '/';
            out[1] = 0;
            return 1;
        }
    } else if (i >= n || s[i] != '/' || (n - i >= 2 && s[i + 1] == '/')) {
        *why = "an href that is neither an absolute URL nor an absolute path";
        *bad_at = i;
        return (size_t)-1;
    }
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            int hi = i + 2 < n ? wsync__hex_digit((unsigned char)s[i + 1]) : -1;
            int lo = hi >= 0 ? wsync__hex_digit((unsigned char)s[i + 2]) : -1;
            if (lo < 0) {
                *why = "a '%' in an href not followed by two hex digits";
                *bad_at = i;
                return (size_t)-1;
            }
            c = (unsigned char)(hi * 16 + lo);
            if (c == 0) {
                *why = "an href with an encoded NUL (%00)";
                *bad_at = i;
                return (size_t)-1;
            }
            i += 2;
        } else if (c <= 0x20 || c == 0x7F || c == '?' || c == '#') {
            *why = "a space, control byte, '?' or '#' in an href";
            *bad_at = i;
            return (size_t)-1;
        }
        out[o++] = (char)c;
    }
    out[o] = 0;
    /* no "." or ".." segment, decoded (an encoded "%2e%2e" is one too) */
    for (seg = 1, i = 1; i <= o; i++) {
        if (i == o || out[i] == '/') {
            size_t sl = i - seg;
            if ((sl == 1 && out[seg] == '.') || (sl == 2 && out[seg] == '.' && out[seg + 1] == '.')) {
                *why = "an href with a \".\" or \"..\" segment";
                *bad_at = 0;
                return (size_t)-1;
            }
            seg = i + 1;
        }
    }
    return o;
}

/* "HTTP/1.1 200 OK" -> 200; 0 when it is not a status line. */
static int wsync__dav_status(const char *s, size_t n)
{
    size_t i = 0;
    int code = 0, k;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
    while (n > i && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) n--;
    if (n - i < 5 || memcmp(s + i, "HTTP/", 5) != 0) return 0;
    i += 5;
    if (i >= n || s[i] < '0' || s[i] > '9') return 0;
    while (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) i++;
    if (i >= n || s[i] != ' ') return 0;
    while (i < n && s[i] == ' ') i++;
    for (k = 0; k < 3; k++, i++) {
        if (i >= n || s[i] < '0' || s[i] > '9') return 0;
        code = code * 10 + (s[i] - '0');
    }
    if (i < n && s[i] != ' ') return 0;
    for (; i < n; i++)
        if ((unsigned char)s[i] < 0x20 && s[i] != '\t') return 0;
    return code >= 100 ? code : 0;
}

enum {
    WSYNC__DK_MS = 1, WSYNC__DK_RESP, WSYNC__DK_HREF, WSYNC__DK_PROPSTAT, WSYNC__DK_RSTATUS, WSYNC__DK_PROP,
    WSYNC__DK_PSTATUS, WSYNC__DK_RTYPE, WSYNC__DK_LEN, WSYNC__DK_COLL
};

static const wsync__xr_rule wsync__dav_rules[] = {
    {WSYNC__XR_TOP, WSYNC__DK_MS, 0, "multistatus"},
    {WSYNC__DK_MS, WSYNC__DK_RESP, 0, "response"},
    {WSYNC__DK_RESP, WSYNC__DK_HREF, 1, "href"},
    {WSYNC__DK_RESP, WSYNC__DK_PROPSTAT, 0, "propstat"},
    {WSYNC__DK_RESP, WSYNC__DK_RSTATUS, 1, "status"},
    {WSYNC__DK_PROPSTAT, WSYNC__DK_PROP, 0, "prop"},
    {WSYNC__DK_PROPSTAT, WSYNC__DK_PSTATUS, 1, "status"},
    {WSYNC__DK_PROP, WSYNC__DK_RTYPE, 0, "resourcetype"},
    {WSYNC__DK_PROP, WSYNC__DK_LEN, 1, "getcontentlength"},
    {WSYNC__DK_RTYPE, WSYNC__DK_COLL, 0, "collection"}};

static const wsync__xr_format wsync__dav_format = {"PROPFIND answer", "the root is not <multistatus>", 1,
                                                   wsync__dav_rules, sizeof wsync__dav_rules / sizeof wsync__dav_rules[0]};

WSYNC_DEF wsync_result wsync_http_propfind_parse(const void *xml, size_t len, wsync_http_href_fn fn, void *user,
                                                 wsync_error *err)
{
    wsync__xr w;
    wsync_result r;
    size_t path_len = 0;
    /* the response being read */
    int have_href = 0, n_propstat = 0, rstatus = 0, ok = 0, is_dir = 0, have_len = 0;
    uint64_t size = 0;
    /* the propstat being read */
    int ps_coll = 0, ps_have_len = 0, ps_len_ok = 0, ps_status = 0;
    uint64_t ps_len = 0;
    size_t ps_len_at = 0;
    wsync__herr_reset(err);
    if ((!xml && len) || !fn) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "PROPFIND parser arguments");
    if ((r = wsync__xr_begin(&w, &wsync__dav_format, xml, len, err)) != WSYNC_OK) goto done;
    for (;;) {
        int ev = wsync__xr_next(&w);
        if (ev == WSYNC__XR_EOF) break;
        if (ev == WSYNC__XR_ERR) WSYNC__XR_BAD(w.at, w.why);
        if (ev == WSYNC__XR_OPEN) {
            switch (w.ev_kind) {
            case WSYNC__DK_RESP:
                have_href = n_propstat = rstatus = ok = is_dir = have_len = 0;
                size = 0;
                break;
            case WSYNC__DK_HREF:
                if (have_href) WSYNC__XR_BAD(w.x.at, "two <href> in one <response>");
                break;
            case WSYNC__DK_PROPSTAT:
                ps_coll = ps_have_len = ps_len_ok = ps_status = 0;
                ps_len = 0;
                break;
            case WSYNC__DK_RSTATUS:
                if (rstatus) WSYNC__XR_BAD(w.x.at, "two <status> in one <response>");
                break;
            case WSYNC__DK_PSTATUS:
                if (ps_status) WSYNC__XR_BAD(w.x.at, "two <status> in one <propstat>");
                break;
            case WSYNC__DK_LEN:
                if (ps_have_len) WSYNC__XR_BAD(w.x.at, "two <getcontentlength> in one <propstat>");
                break;
            case WSYNC__DK_COLL:
                ps_coll = 1;
                break;
            default:
                break;
            }
        } else if (ev == WSYNC__XR_VALUE) { /* href, a status, getcontentlength: spaces around them do not count */
            const char *text = w.text;
            size_t a = 0, b = w.text_len;
            while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r' || text[a] == '\n')) a++;
            while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r' || text[b - 1] == '\n')) b--;
            if (w.ev_kind == WSYNC__DK_HREF) {
                const char *why = "";
                size_t bad = 0;
                path_len = wsync__href_path(text + a, b - a, w.keep, &why, &bad);
                if (path_len == (size_t)-1) WSYNC__XR_BAD(w.value_at, why);
                have_href = 1;
            } else if (w.ev_kind == WSYNC__DK_LEN) {
                /* checked when the propstat's status says it counts (a 404
                   propstat carries an empty <getcontentlength/>) */
                ps_have_len = 1;
                ps_len_at = w.value_at;
                ps_len_ok = wsync__xr_u63(text + a, b - a, &ps_len);
            } else {
                int code = wsync__dav_status(text + a, b - a);
                if (!code) WSYNC__XR_BAD(w.value_at, "a <status> that is not \"HTTP/1.1 NNN ...\"");
                if (w.ev_kind == WSYNC__DK_RSTATUS) rstatus = code;
                else ps_status = code;
            }
        } else if (w.ev_kind == WSYNC__DK_PROPSTAT) { /* the closes */
            if (!ps_status) WSYNC__XR_BAD(w.x.at, "a <propstat> without <status>");
            n_propstat++;
            if (ps_status == 200) {
                ok = 1;
                is_dir |= ps_coll;
                if (ps_have_len) {
                    if (!ps_len_ok) WSYNC__XR_BAD(ps_len_at, "<getcontentlength> is not an integer in [0, 2^63)");
                    if (have_len) WSYNC__XR_BAD(w.x.at, "two <getcontentlength> in one <response>");
                    have_len = 1;
                    size = ps_len;
                }
            }
        } else if (w.ev_kind == WSYNC__DK_RESP) {
            if (!have_href) WSYNC__XR_BAD(w.x.at, "a <response> without <href>");
            if (n_propstat && rstatus) WSYNC__XR_BAD(w.x.at, "a <response> with both <propstat> and <status>");
            if (!n_propstat && !rstatus) WSYNC__XR_BAD(w.x.at, "a <response> without <propstat> or <status>");
            if (!ok) continue;
            if (!is_dir && !have_len) WSYNC__XR_BAD(w.x.at, "a <response> for a file without <getcontentlength>");
            if (fn(user, w.keep, path_len, is_dir, is_dir && !have_len ? 0 : size) != 0) goto done;
        }
    }
done:
    wsync__xr_end(&w);
    return r;
}
#undef WSYNC__XR_BAD

/* ---------------------------------------------------------------------
   A store named by a string (both builds: directories need no libcurl)  >>store-url
   --------------------------------------------------------------------- */

/* 1 when s starts with "name://" (name case-insensitive). */
static int wsync__hscheme_is(const char *s, const char *name)
{
    size_t n = strlen(name), i;
    for (i = 0; i < n; i++)
        if (((unsigned char)s[i] | 0x20) != (unsigned char)name[i]) return 0;
    return strncmp(s + n, "://", 3) == 0;
}

/* The length of s's scheme when it starts with one followed by "://"
   (RFC 3986: a letter, then letters, digits, '+', '-', '.'); else 0. */
static size_t wsync__hscheme_len(const char *s)
{
    size_t i = 0;
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return 0;
    while ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
           s[i] == '+' || s[i] == '-' || s[i] == '.')
        i++;
    return strncmp(s + i, "://", 3) == 0 ? i : 0;
}

WSYNC_DEF wsync_result wsync_store_open_url(const char *url, const wsync_store_url_options *opt, wsync_store *out,
                                            wsync_error *err)
{
    wsync_store_url_options o;
    size_t scheme;
    wsync__herr_reset(err);
    if (out) memset(out, 0, sizeof *out);
    if (!out || !url || !url[0])
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s",
                            "no store given: a directory, http(s)://host[:port]/prefix or s3://bucket/prefix");
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (wsync__hscheme_is(url, "http") || wsync__hscheme_is(url, "https")) {
        o.http.allocator = o.allocator;
        return wsync_store_http_open(url, &o.http, out, err);
    }
    if (wsync__hscheme_is(url, "s3")) {
        o.s3.http = o.http;
        o.s3.http.allocator = o.allocator;
        return wsync_store_s3_open(url, &o.s3, out, err);
    }
    scheme = wsync__hscheme_len(url);
    if (scheme) {
#if defined(__unix__) || defined(__APPLE__)
        struct stat sb;
        if (!(stat(url, &sb) == 0 && S_ISDIR(sb.st_mode)))
#endif
            return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                "store '%s': unknown scheme '%.*s://'; a store is a directory, "
                                "http://host[:port]/prefix, https://... or s3://bucket/prefix",
                                url, (int)(scheme < 32 ? scheme : 32), url);
    }
    {
        wsync_store_options so;
        memset(&so, 0, sizeof so);
        so.allocator = o.allocator;
        so.no_fsync = o.no_fsync;
        so.flags = o.flags;
        return wsync_store_dir_open(url, &so, out, err);
    }
}

#ifdef WSYNC_HTTP_NO_CURL

WSYNC_DEF wsync_result wsync_store_http_open(const char *url, const wsync_http_options *opt, wsync_store *out,
                                             wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                        "cannot open '%s': built without libcurl: install libcurl4-openssl-dev and rebuild",
                        url ? url : "(null)");
}

WSYNC_DEF wsync_result wsync_store_s3_open(const char *url, const wsync_s3_options *opt, wsync_store *out,
                                           wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                        "cannot open '%s': built without libcurl: install libcurl4-openssl-dev and rebuild",
                        url ? url : "(null)");
}

WSYNC_DEF int wsync_store_http_stats(const wsync_store *s, wsync_http_stats *out)
{
    (void)s;
    if (out) memset(out, 0, sizeof *out);
    return 0;
}

WSYNC_DEF unsigned wsync_store_http_idle(const wsync_store *s)
{
    (void)s;
    return 0;
}

#else /* libcurl */

#if defined(__has_include)
#if !__has_include(<curl/curl.h>)
#error "wsync_http.h needs libcurl's headers (Debian: apt-get install libcurl4-openssl-dev), or define WSYNC_HTTP_NO_CURL"
#endif
#endif
#include <curl/curl.h>
#include <sys/select.h>
#include <sys/time.h>

#if !defined(WSYNC_NO_THREADS) && (defined(__unix__) || defined(__APPLE__))
#define WSYNC__HTTP_THREADS 1
#include <pthread.h>
#else
#define WSYNC__HTTP_THREADS 0
#endif

static void *wsync__halloc(const wsync_allocator *a, size_t n)
{
    if (n == 0) n = 1;
    return a && a->alloc ? a->alloc(a->user, n) : malloc(n);
}

static void wsync__hfree(const wsync_allocator *a, void *p)
{
    if (!p) return;
    if (a && a->free) a->free(a->user, p);
    else free(p);
}

#define WSYNC__HTTP_POOL_MAX 16
#define WSYNC__HTTP_LIST_MAX ((size_t)64 << 20)  /* one directory listing's body (~500,000 names) */
#define WSYNC__S3_PAGE_MAX ((size_t)8 << 20)     /* one ListObjectsV2 page (1000 keys: ~1.5 MB at most) */
#define WSYNC__HTTP_LIST_KEYS 10000000u           /* keys in one listing */
#define WSYNC__HTTP_LIST_DEPTH 64
#define WSYNC__HTTP_ERRBODY 1024                  /* bytes of an error body kept (S3's XML errors) */
#define WSYNC__HTTP_REDIRECTS 5                   /* redirects followed (S3 stores) */
#define WSYNC__HTTP_KEEP_BUFS ((uint64_t)128 << 20) /* part buffers kept up to this much */

typedef struct wsync__http {
    wsync_allocator a;
    char *base;            /* scheme://authority/prefix, no trailing '/' */
    size_t base_len;
    wsync_http_options o;  /* defaults filled in; o.headers not used after open */
    struct curl_slist *headers;
    CURL *pool[WSYNC__HTTP_POOL_MAX];
    unsigned n_pool;
    CURLM *multi;          /* kept for connection reuse between parallel downloads */
    int multi_busy;        /* a download holds multi and the part buffers below */
    uint8_t *pbuf[16];     /* part buffers kept between parallel downloads (their pages
                              stay mapped: a fresh buffer's page faults are not paid again) */
    size_t pbuf_size;
    wsync_http_stats st;
    uint64_t rng;
    /* S3 (NULL/0 for plain HTTP): SigV4 through libcurl, a key prefix inside
       the bucket, redirects followed, multipart uploads */
    char *sigv4;           /* "aws:amz:REGION:s3" */
    char *userpwd;         /* "KEY:SECRET" */
    struct curl_slist *sign_headers; /* x-amz-content-sha256, x-amz-security-token */
    char *kprefix;         /* "prefix/" or "" */
    size_t kprefix_len;
    int follow;
    char *ca_file;         /* a copy of the CA bundle's path (NULL: the system's) */
    uint64_t mp_threshold, mp_part;
    uint64_t put_limit;    /* S3: the smallest request body answered 413 (0: none yet) */
    int listing_seen;      /* listing AUTO: the method that worked (0: not known yet) */
    double last_end;       /* when the last request ended (wsync__hnow; 0: none yet) */
#if WSYNC__HTTP_THREADS
    pthread_mutex_t mu;
#endif
} wsync__http;

#if WSYNC__HTTP_THREADS
#define WSYNC__HLOCK(h) pthread_mutex_lock(&(h)->mu)
#define WSYNC__HUNLOCK(h) pthread_mutex_unlock(&(h)->mu)
#else
#define WSYNC__HLOCK(h) ((void)0)
#define WSYNC__HUNLOCK(h) ((void)0)
#endif

static double wsync__hnow(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static void wsync__hsleep_ms(unsigned ms)
{
    struct timeval tv;
    tv.tv_sec = (long)(ms / 1000);
    tv.tv_usec = (long)(ms % 1000) * 1000;
    select(0, NULL, NULL, NULL, &tv);
}

static void wsync__hcount(wsync__http *h, uint64_t *field, uint64_t n)
{
    WSYNC__HLOCK(h);
    *field += n;
    WSYNC__HUNLOCK(h);
}

/* ---- handles: a pool of easy handles, each keeping its connections ---- */

static CURL *wsync__hacquire(wsync__http *h)
{
    CURL *c = NULL;
    WSYNC__HLOCK(h);
    if (h->n_pool) c = h->pool[--h->n_pool];
    WSYNC__HUNLOCK(h);
    return c ? c : curl_easy_init();
}

static void wsync__hrelease(wsync__http *h, CURL *c)
{
    if (!c) return;
    WSYNC__HLOCK(h);
    if (h->n_pool < WSYNC__HTTP_POOL_MAX) {
        h->pool[h->n_pool++] = c;
        c = NULL;
    }
    WSYNC__HUNLOCK(h);
    if (c) curl_easy_cleanup(c);
}

/* ---- the transfer layer: one request, its response, retries >>transfer ----
   Written so that the S3 store can reuse it: a request is a method, a URL,
   extra headers (signing), an optional body and range, and a body callback. */

struct wsync__hresp;

typedef struct wsync__hreq {
    const char *method;            /* GET PUT HEAD DELETE MKCOL */
    const char *url;
    const char *what;              /* the key, for messages */
    unsigned attempts;             /* 0: the store's max_attempts */
    const struct curl_slist *extra;/* more headers (the caller owns them) */
    const uint8_t *body;           /* PUT */
    size_t body_len;
    int has_range;
    uint64_t range_lo, range_hi;   /* inclusive; range_hi UINT64_MAX: open-ended */
    const char *if_range;          /* an ETag for If-Range */
    int nosign;                    /* a redirect led to another origin: not signed (S3), and no
                                      Authorization or Cookie from the extra headers */
    /* 2xx bodies go here; returning nonzero stops the transfer (then
       resp.stopped is set, and it is not an error of the transfer) */
    int (*on_body)(void *user, const void *p, size_t n);
    void *on_body_user;
    /* called at the end of a final response's headers; nonzero stops it */
    int (*on_headers)(void *user, struct wsync__hresp *rs);
    void *on_headers_user;
} wsync__hreq;

typedef struct wsync__hresp {
    long status;
    CURLcode cc;
    char curl_msg[CURL_ERROR_SIZE];
    int has_length;
    uint64_t length;               /* Content-Length */
    int has_cr;                    /* Content-Range: bytes lo-hi/total or bytes * /total */
    int cr_star;                   /* "bytes * /total" (416) */
    uint64_t cr_lo, cr_hi;
    int cr_total_known;
    uint64_t cr_total;
    long retry_after_ms;           /* -1: none */
    char etag[128];
    char location[2048];
    char errbody[WSYNC__HTTP_ERRBODY + 1];
    size_t errbody_len;
    uint64_t body_bytes;           /* 2xx body bytes given to on_body */
    int stopped;                   /* on_body or on_headers stopped it */
    int headers_done;
    const wsync__hreq *rq;         /* private */
    size_t up_pos;                 /* private: upload cursor */
} wsync__hresp;

static int wsync__hcase_prefix(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit), i;
    if (n < k) return 0;
    for (i = 0; i < k; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != lit[i]) return 0;
    }
    return 1;
}

/* Decimal digits at *p (below end), at most 2^63-1. */
static int wsync__hdigits(const char **p, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    const char *s = *p;
    if (s >= end || *s < '0' || *s > '9') return 0;
    while (s < end && *s >= '0' && *s <= '9') {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_C(0x7FFFFFFFFFFFFFFF) - d) / 10) return 0;
        v = v * 10 + d;
        s++;
    }
    *p = s;
    *out = v;
    return 1;
}

static void wsync__hparse_cr(wsync__hresp *rs, const char *v, const char *end)
{
    uint64_t lo, hi, total;
    rs->has_cr = 0;
    if (!wsync__hcase_prefix(v, (size_t)(end - v), "bytes ")) return;
    v += 6;
    while (v < end && *v == ' ') v++;
    if (v < end && *v == '*') {
        v++;
        if (v >= end || *v != '/') return;
        v++;
        if (!wsync__hdigits(&v, end, &total)) return;
        rs->has_cr = 1;
        rs->cr_star = 1;
        rs->cr_total_known = 1;
        rs->cr_total = total;
        return;
    }
    if (!wsync__hdigits(&v, end, &lo) || v >= end || *v != '-') return;
    v++;
    if (!wsync__hdigits(&v, end, &hi) || v >= end || *v != '/' || hi < lo) return;
    v++;
    rs->cr_total_known = 0;
    if (v < end && *v == '*') v++;
    else if (wsync__hdigits(&v, end, &total)) {
        /* "bytes 0-0/0" is s3rver's answer for an empty object: the size is
           still right (0), and no byte of the body is used */
        if (hi >= total && !(lo == 0 && hi == 0 && total == 0)) return;
        rs->cr_total_known = 1;
        rs->cr_total = total;
    } else return;
    rs->has_cr = 1;
    rs->cr_star = 0;
    rs->cr_lo = lo;
    rs->cr_hi = hi;
}

static void wsync__hcopy_value(char *dst, size_t cap, const char *v, const char *end)
{
    size_t n = (size_t)(end - v);
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

/* Two ETags name the same version, compared weakly (RFC 9110 8.8.3.2):
   Apache marks a file's ETag weak (W/"...") for the first second after it
   was written and strong after, for the same bytes. */
static int wsync__hetag_same(const char *a, const char *b)
{
    if (a[0] == 'W' && a[1] == '/') a += 2;
    if (b[0] == 'W' && b[1] == '/') b += 2;
    return strcmp(a, b) == 0;
}

/* An ETag If-Range may carry: a strong one only (RFC 9110 13.1.5; with a
   weak one the server sends the whole object, a 200 where a part was
   asked for). */
static const char *wsync__hif_range(const char *etag)
{
    return etag[0] && !(etag[0] == 'W' && etag[1] == '/') ? etag : NULL;
}

static size_t wsync__hheader_cb(char *buf, size_t size, size_t n, void *user)
{
    wsync__hresp *rs = (wsync__hresp *)user;
    size_t len = size * n;
    const char *end = buf + len, *colon, *v;
    while (end > buf && (end[-1] == '\r' || end[-1] == '\n')) end--;
    if (wsync__hcase_prefix(buf, (size_t)(end - buf), "http/")) {
        /* a new response (after 100 Continue, or a retry inside curl) */
        const char *sp = (const char *)memchr(buf, ' ', (size_t)(end - buf));
        uint64_t st = 0;
        rs->status = 0;
        if (sp) {
            sp++;
            if (wsync__hdigits(&sp, end, &st) && st < 1000) rs->status = (long)st;
        }
        rs->has_length = rs->has_cr = rs->cr_star = rs->cr_total_known = 0;
        rs->retry_after_ms = -1;
        rs->etag[0] = rs->location[0] = 0;
        rs->headers_done = 0;
        return len;
    }
    if (end == buf) { /* the blank line: headers complete */
        if (rs->status >= 200 && !rs->headers_done) {
            rs->headers_done = 1;
            if (rs->rq->on_headers && rs->rq->on_headers(rs->rq->on_headers_user, rs) != 0) {
                rs->stopped = 1;
                return 0;
            }
        }
        return len;
    }
    colon = (const char *)memchr(buf, ':', (size_t)(end - buf));
    if (!colon) return len;
    v = colon + 1;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    if (wsync__hcase_prefix(buf, (size_t)(colon - buf), "content-length") && colon - buf == 14) {
        const char *p = v;
        uint64_t x;
        if (wsync__hdigits(&p, end, &x) && p == end) {
            rs->has_length = 1;
            rs->length = x;
        }
    } else if (wsync__hcase_prefix(buf, (size_t)(colon - buf), "content-range") && colon - buf == 13) {
        wsync__hparse_cr(rs, v, end);
    } else if (wsync__hcase_prefix(buf, (size_t)(colon - buf), "etag") && colon - buf == 4) {
        wsync__hcopy_value(rs->etag, sizeof rs->etag, v, end);
    } else if (wsync__hcase_prefix(buf, (size_t)(colon - buf), "location") && colon - buf == 8) {
        wsync__hcopy_value(rs->location, sizeof rs->location, v, end);
    } else if (wsync__hcase_prefix(buf, (size_t)(colon - buf), "retry-after") && colon - buf == 11) {
        const char *p = v;
        uint64_t secs;
        if (wsync__hdigits(&p, end, &secs)) {
            rs->retry_after_ms = secs > 86400 ? 86400000L : (long)secs * 1000;
        } else {
            char date[64];
            time_t when;
            wsync__hcopy_value(date, sizeof date, v, end);
            when = curl_getdate(date, NULL);
            if (when != (time_t)-1) {
                double d = (double)when - wsync__hnow();
                rs->retry_after_ms = d <= 0 ? 0 : d > 86400 ? 86400000L : (long)(d * 1000);
            }
        }
    }
    return len;
}

static size_t wsync__hwrite_cb(char *p, size_t size, size_t n, void *user)
{
    wsync__hresp *rs = (wsync__hresp *)user;
    size_t len = size * n;
    if (rs->status < 200 || rs->status >= 300) {
        size_t room = WSYNC__HTTP_ERRBODY - rs->errbody_len;
        if (len < room) room = len;
        memcpy(rs->errbody + rs->errbody_len, p, room);
        rs->errbody_len += room;
        rs->errbody[rs->errbody_len] = 0;
        return len;
    }
    if (!rs->rq->on_body) return len;
    if (rs->rq->on_body(rs->rq->on_body_user, p, len) != 0) {
        rs->stopped = 1;
        return 0; /* curl: CURLE_WRITE_ERROR */
    }
    rs->body_bytes += len;
    return len;
}

static size_t wsync__hread_cb(char *buf, size_t size, size_t n, void *user)
{
    wsync__hresp *rs = (wsync__hresp *)user;
    size_t room = size * n, left = rs->rq->body_len - rs->up_pos;
    if (room > left) room = left;
    if (room) memcpy(buf, rs->rq->body + rs->up_pos, room);
    rs->up_pos += room;
    return room;
}

/* curl asks to rewind an upload (a redirect, or an auth round): start over. */
static int wsync__hseek_cb(void *user, curl_off_t off, int origin)
{
    wsync__hresp *rs = (wsync__hresp *)user;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > rs->rq->body_len) return CURL_SEEKFUNC_FAIL;
    rs->up_pos = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

/* A header that carries credentials: not sent to another origin. */
static int wsync__hcred_header(const char *h)
{
    size_t n = strlen(h);
    return wsync__hcase_prefix(h, n, "authorization:") || wsync__hcase_prefix(h, n, "cookie:") ||
           wsync__hcase_prefix(h, n, "proxy-authorization:") || wsync__hcase_prefix(h, n, "x-amz-security-token:");
}

/* Configures c for rq (after a reset: options do not leak between requests,
   connections stay). `hl` receives the header list to free afterwards. */
static int wsync__hsetup(wsync__http *h, CURL *c, const wsync__hreq *rq, wsync__hresp *rs, struct curl_slist **hl)
{
    struct curl_slist *l = NULL, *t;
    const struct curl_slist *e;
    char range[96];
    int ok = 1;
    memset(rs, 0, sizeof *rs);
    rs->retry_after_ms = -1;
    rs->rq = rq;
    *hl = NULL;
    curl_easy_reset(c);
    {
        /* a poll (long after the last request): its connection is not kept
           open through the caller's next sleep */
        double last;
        WSYNC__HLOCK(h);
        last = h->last_end;
        WSYNC__HUNLOCK(h);
        if (last > 0 && h->o.idle_close_ms != UINT_MAX && (wsync__hnow() - last) * 1000.0 >= (double)h->o.idle_close_ms)
            curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
    }
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, rs->curl_msg);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)h->o.connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, (long)h->o.low_speed_bytes);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)h->o.low_speed_seconds);
    if (h->o.timeout_ms) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)h->o.timeout_ms);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, wsync__hheader_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, rs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, wsync__hwrite_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, rs);
    if (h->o.insecure) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (h->ca_file) curl_easy_setopt(c, CURLOPT_CAINFO, h->ca_file);
    if (h->o.verbose) curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
    if (strcmp(rq->method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (strcmp(rq->method, "PUT") == 0 || rq->body) {
        if (strcmp(rq->method, "PUT") != 0) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, rq->method);
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, wsync__hread_cb);
        curl_easy_setopt(c, CURLOPT_READDATA, rs);
        curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, wsync__hseek_cb);
        curl_easy_setopt(c, CURLOPT_SEEKDATA, rs);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->body_len);
        curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
    } else if (strcmp(rq->method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, rq->method);
    }
    for (e = h->headers; e && ok; e = e->next) {
        /* credentials stay with the store's origin (as libcurl does for its
           own redirects since 7.83, which wsync does not use) */
        if (rq->nosign && wsync__hcred_header(e->data)) continue;
        if ((t = curl_slist_append(l, e->data)) != NULL) l = t;
        else ok = 0;
    }
    if (h->sigv4 && !rq->nosign) {
        /* libcurl 7.88 signs every header it is given and leaves out
           x-amz-content-sha256 (sign_headers has it); an emptied "Expect:"
           would be signed too, so Expect stays and its wait is short */
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, h->sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, h->userpwd);
        for (e = h->sign_headers; e && ok; e = e->next)
            if ((t = curl_slist_append(l, e->data)) != NULL) l = t;
            else ok = 0;
    }
    if (h->sigv4) curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
    for (e = rq->extra; e && ok; e = e->next)
        if ((t = curl_slist_append(l, e->data)) != NULL) l = t;
        else ok = 0;
    if (ok && rq->has_range) {
        if (rq->range_hi == UINT64_MAX)
            snprintf(range, sizeof range, "Range: bytes=%llu-", (unsigned long long)rq->range_lo);
        else
            snprintf(range, sizeof range, "Range: bytes=%llu-%llu", (unsigned long long)rq->range_lo,
                     (unsigned long long)rq->range_hi);
        if ((t = curl_slist_append(l, range)) != NULL) l = t;
        else ok = 0;
    }
    if (ok && rq->if_range && rq->if_range[0]) {
        char ir[160];
        snprintf(ir, sizeof ir, "If-Range: %s", rq->if_range);
        if ((t = curl_slist_append(l, ir)) != NULL) l = t;
        else ok = 0;
    }
    if (l) curl_easy_setopt(c, CURLOPT_HTTPHEADER, l);
    *hl = l;
    return ok;
}

/* After a transfer: curl's result and the status, counted. */
static void wsync__hfinish(wsync__http *h, CURL *c, const wsync__hreq *rq, wsync__hresp *rs, CURLcode cc)
{
    long code = 0;
    rs->cc = cc;
    if (curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code) rs->status = code;
    if (!rs->curl_msg[0] && cc != CURLE_OK) snprintf(rs->curl_msg, sizeof rs->curl_msg, "%s", curl_easy_strerror(cc));
    WSYNC__HLOCK(h);
    h->last_end = wsync__hnow();
    h->st.requests++;
    h->st.bytes_down += rs->body_bytes;
    if (rq->body && rs->status) h->st.bytes_up += rs->up_pos;
    WSYNC__HUNLOCK(h);
}

static void wsync__hperform(wsync__http *h, CURL *c, const wsync__hreq *rq, wsync__hresp *rs)
{
    struct curl_slist *hl = NULL;
    CURLcode cc;
    if (!wsync__hsetup(h, c, rq, rs, &hl)) {
        rs->cc = CURLE_OUT_OF_MEMORY;
        snprintf(rs->curl_msg, sizeof rs->curl_msg, "%s", "out of memory for request headers");
        curl_slist_free_all(hl);
        return;
    }
    cc = curl_easy_perform(c);
    wsync__hfinish(h, c, rq, rs, cc);
    curl_slist_free_all(hl);
}

/* A transient failure: worth another attempt. */
static int wsync__hretryable(const wsync__hresp *rs)
{
    if (rs->stopped) return 0;
    if (rs->cc != CURLE_OK) {
        switch (rs->cc) {
        case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_RESOLVE_PROXY:
        case CURLE_OPERATION_TIMEDOUT: case CURLE_RECV_ERROR: case CURLE_SEND_ERROR: case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE: case CURLE_SSL_CONNECT_ERROR: case CURLE_HTTP2: case CURLE_HTTP2_STREAM:
        case CURLE_WEIRD_SERVER_REPLY:
            return 1;
        default:
            return 0;
        }
    }
    return rs->status == 408 || rs->status == 429 || (rs->status >= 500 && rs->status <= 599 &&
                                                      rs->status != 501 && rs->status != 505);
}

/* Waits before attempt `attempt` (2, 3, ...): backoff doubling with jitter,
   at least what Retry-After asked, never more than max_backoff_ms. */
static void wsync__hbackoff(wsync__http *h, unsigned attempt, const wsync__hresp *rs)
{
    uint64_t ms = h->o.backoff_ms, x;
    unsigned k;
    for (k = 2; k < attempt && ms < h->o.max_backoff_ms; k++) ms *= 2;
    WSYNC__HLOCK(h);
    h->rng ^= h->rng << 13;
    h->rng ^= h->rng >> 7;
    h->rng ^= h->rng << 17;
    x = h->rng;
    h->st.retries++;
    WSYNC__HUNLOCK(h);
    ms += ms ? x % (ms / 4 + 1) : 0; /* up to 25% more, so clients do not retry in step */
    if (rs->retry_after_ms >= 0 && (uint64_t)rs->retry_after_ms > ms) ms = (uint64_t)rs->retry_after_ms;
    if (ms > h->o.max_backoff_ms) ms = h->o.max_backoff_ms;
    wsync__hsleep_ms((unsigned)ms);
}

/* The text of the first <name>...</name> in an S3 response body (an
   <Error>'s Code and Message, an UploadId), entities decoded; 0 if absent. */
static int wsync__s3_field(const char *body, size_t len, const char *name, char *out, size_t cap)
{
    char open_tag[40], close_tag[40];
    const char *a, *b, *end = body + len;
    size_t ol, cl, bad, n;
    char *tmp;
    ol = (size_t)snprintf(open_tag, sizeof open_tag, "<%s>", name);
    cl = (size_t)snprintf(close_tag, sizeof close_tag, "</%s>", name);
    out[0] = 0;
    for (a = body; a && (size_t)(end - a) >= ol; a++) {
        a = (const char *)memchr(a, '<', (size_t)(end - a));
        if (!a || (size_t)(end - a) < ol) return 0;
        if (memcmp(a, open_tag, ol) == 0) break;
    }
    if (!a || (size_t)(end - a) < ol) return 0;
    a += ol;
    for (b = a; (size_t)(end - b) >= cl; b++)
        if (memcmp(b, close_tag, cl) == 0) break;
    if ((size_t)(end - b) < cl) return 0;
    n = (size_t)(b - a);
    if (!(tmp = (char *)malloc(n + 1))) return 0;
    n = wsync__xml_text((const unsigned char *)a, n, tmp, &bad);
    if (n != (size_t)-1 && n < cap) memcpy(out, tmp, n + 1);
    free(tmp);
    return n != (size_t)-1 && n < cap;
}

/* The server's answer, for a message: S3's <Code> and <Message>, else the
   first printable bytes of the body, else "no body". */
static void wsync__s3_answer(const wsync__hresp *rs, char *out, size_t cap)
{
    char code[96], msg[120];
    size_t i, o = 0;
    if (wsync__s3_field(rs->errbody, rs->errbody_len, "Code", code, sizeof code)) {
        if (!wsync__s3_field(rs->errbody, rs->errbody_len, "Message", msg, sizeof msg)) msg[0] = 0;
        snprintf(out, cap, "S3 %s%s%s", code, msg[0] ? ": " : "", msg);
        return;
    }
    {
        /* an HTML page: its <title> says it */
        const char *t = NULL, *e = rs->errbody + rs->errbody_len, *q;
        for (q = rs->errbody; q + 7 <= e; q++)
            if (memcmp(q, "<title>", 7) == 0) {
                t = q + 7;
                break;
            }
        for (q = t; q && q + 8 <= e; q++)
            if (memcmp(q, "</title>", 8) == 0) break;
        if (t && q && q + 8 <= e && q > t && (size_t)(q - t) < cap && q - t < 100) {
            for (i = 0; i < (size_t)(q - t); i++) {
                unsigned char ch = (unsigned char)t[i];
                out[i] = ch >= 0x20 && ch < 0x7F ? (char)ch : ' ';
            }
            out[i] = 0;
            return;
        }
    }
    for (i = 0; i < rs->errbody_len && o + 1 < cap && o < 100; i++) {
        unsigned char ch = (unsigned char)rs->errbody[i];
        if (ch == '<') { /* an HTML page: its text only */
            const char *gt = (const char *)memchr(rs->errbody + i, '>', rs->errbody_len - i);
            if (!gt) break;
            i = (size_t)(gt - rs->errbody);
            if (o && out[o - 1] != ' ') out[o++] = ' ';
            continue;
        }
        if (ch < 0x20 || ch >= 0x7F) ch = ' ';
        if (ch == ' ' && (o == 0 || out[o - 1] == ' ')) continue;
        out[o++] = (char)ch;
    }
    while (o && out[o - 1] == ' ') o--;
    out[o] = 0;
    if (!o) snprintf(out, cap, "%s", "no body");
}

/* "PUT http://...: HTTP 503 (body...) after 5 attempts" into err. */
static wsync_result wsync__hfail_resp(wsync__http *h, wsync_error *err, const wsync__hreq *rq,
                                      const wsync__hresp *rs, unsigned attempts)
{
    char body[WSYNC__HTTP_ERRBODY + 8];
    size_t i, o = 0;
    for (i = 0; i < rs->errbody_len && i < 200 && o + 1 < sizeof body; i++) {
        unsigned char ch = (unsigned char)rs->errbody[i];
        body[o++] = ch >= 0x20 && ch < 0x7F ? (char)ch : ' ';
    }
    body[o] = 0;
    if (h && h->sigv4 && rs->cc == CURLE_OK) {
        /* S3 says why in XML: <Error><Code>SignatureDoesNotMatch</Code><Message>... */
        char code[96], msg[200];
        if (rs->status == 404 && wsync__s3_field(rs->errbody, rs->errbody_len, "Code", code, sizeof code) &&
            strcmp(code, "NoSuchKey") != 0) {
            /* NoSuchBucket, NoSuchUpload: the code says what is missing (a
               bucket that does not exist is no store, not an empty one) */
            if (!wsync__s3_field(rs->errbody, rs->errbody_len, "Message", msg, sizeof msg)) msg[0] = 0;
            return wsync_error_set(err, strcmp(code, "NoSuchBucket") == 0 ? WSYNC_ERR_NO_STORE : WSYNC_ERR_NOT_FOUND, "%s %s: HTTP 404: S3 %s: %s%s", rq->method, rq->url, code,
                                msg, strcmp(code, "NoSuchBucket") == 0 ? " (no such bucket: create it first)" : "");
        }
        if (rs->status != 404 && rs->status != 413 &&
            wsync__s3_field(rs->errbody, rs->errbody_len, "Code", code, sizeof code)) {
            int auth = rs->status == 401 || rs->status == 403 || strcmp(code, "SignatureDoesNotMatch") == 0 ||
                       strcmp(code, "InvalidAccessKeyId") == 0 || strcmp(code, "AccessDenied") == 0 ||
                       strcmp(code, "ExpiredToken") == 0 || strcmp(code, "InvalidToken") == 0;
            if (!wsync__s3_field(rs->errbody, rs->errbody_len, "Message", msg, sizeof msg)) msg[0] = 0;
            if (auth)
                return wsync_error_set(err, WSYNC_ERR_AUTH,
                                    "authentication failed: %s %s: HTTP %ld: S3 %s: %s (check the keys, the "
                                    "region and the clock; not retried)",
                                    rq->method, rq->url, rs->status, code, msg);
            return wsync_error_set(err, WSYNC_ERR_IO, "%s %s: HTTP %ld: S3 %s: %s (after %u attempt%s)", rq->method,
                                rq->url, rs->status, code, msg, attempts, attempts == 1 ? "" : "s");
        }
    }
    if (rs->cc == CURLE_PEER_FAILED_VERIFICATION || rs->cc == CURLE_SSL_CACERT_BADFILE)
        return wsync_error_set(err, WSYNC_ERR_IO,
                            "%s %s: TLS: %s (curl error %d; the server's certificate is not trusted: give its CA "
                            "bundle as ca_file or in WSYNC_CA_BUNDLE%s; not retried)",
                            rq->method, rq->url, rs->curl_msg, (int)rs->cc, h && h->sigv4 ? " or AWS_CA_BUNDLE" : "");
    if (rs->cc != CURLE_OK && rs->status)
        return wsync_error_set(err, WSYNC_ERR_IO, "%s %s: %s (curl error %d, HTTP %ld) after %u attempt%s", rq->method,
                            rq->url, rs->curl_msg, (int)rs->cc, rs->status, attempts, attempts == 1 ? "" : "s");
    if (rs->cc != CURLE_OK)
        return wsync_error_set(err, WSYNC_ERR_IO, "%s %s: %s (curl error %d) after %u attempt%s", rq->method, rq->url,
                            rs->curl_msg, (int)rs->cc, attempts, attempts == 1 ? "" : "s");
    if (rs->status == 404)
        return wsync_error_set(err, WSYNC_ERR_NOT_FOUND, "no object '%s' (HTTP 404 from %s %s)", rq->what, rq->method,
                            rq->url);
    if (rs->status == 401 || rs->status == 403)
        return wsync_error_set(err, WSYNC_ERR_AUTH,
                            "authentication failed: HTTP %ld from %s %s (check the credentials or the server's "
                            "permissions; not retried)",
                            rs->status, rq->method, rq->url);
    if (rs->status == 405 && (strcmp(rq->method, "PUT") == 0 || strcmp(rq->method, "DELETE") == 0))
        return wsync_error_set(err, WSYNC_ERR_IO,
                            "HTTP 405 from %s %s: the server does not accept %s (nginx: dav_methods PUT DELETE MKCOL)",
                            rq->method, rq->url, rq->method);
    if (rs->status == 413 && h && h->sigv4) {
        char ans[240];
        wsync__s3_answer(rs, ans, sizeof ans);
        return wsync_error_set(err, WSYNC_ERR_IO, "HTTP 413 from %s %s (%s): the request body (%lu bytes) is above the "
                            "server's limit", rq->method, rq->url, ans, (unsigned long)rq->body_len);
    }
    if (rs->status == 413)
        return wsync_error_set(err, WSYNC_ERR_IO,
                            "HTTP 413 from %s %s: the object (%lu bytes) is above the server's limit (nginx: "
                            "client_max_body_size 0)",
                            rq->method, rq->url, (unsigned long)rq->body_len);
    return wsync_error_set(err, WSYNC_ERR_IO, "%s %s: HTTP %ld%s%s after %u attempt%s", rq->method, rq->url, rs->status,
                        body[0] ? ": " : "", body, attempts, attempts == 1 ? "" : "s");
}

/* One request with retries; the final response in rs. `reset` runs before
   each attempt (a body collector starts over). WSYNC_OK means a response
   arrived (any status); transfer failures that outlast the attempts and
   non-retryable curl errors are WSYNC_ERR_IO. */
static wsync_result wsync__hrequest(wsync__http *h, const wsync__hreq *rq, wsync__hresp *rs,
                                    void (*reset)(void *), void *reset_user, wsync_error *err)
{
    CURL *c = wsync__hacquire(h);
    unsigned attempt;
    if (!c) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s %s: no curl handle", rq->method, rq->url);
    for (attempt = 1;; attempt++) {
        if (reset) reset(reset_user);
        wsync__hperform(h, c, rq, rs);
        if (!wsync__hretryable(rs) || attempt >= (rq->attempts ? rq->attempts : h->o.max_attempts)) break;
        wsync__hbackoff(h, attempt + 1, rs);
    }
    wsync__hrelease(h, c);
    if (rs->cc != CURLE_OK && !rs->stopped) return wsync__hfail_resp(h, err, rq, rs, attempt);
    if (wsync__hretryable(rs)) return wsync__hfail_resp(h, err, rq, rs, attempt);
    return WSYNC_OK;
}

/* ---- the HTTP store >>http: URLs ---- */

/* base + "/" + key percent-encoded (unreserved and '/' kept); NULL on OOM. */
static char *wsync__hurl(const wsync__http *h, const char *key, int trailing_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t kl = strlen(key), pl = h->kprefix_len, i, o;
    char *u;
    if (kl > ((size_t)-1 - h->base_len - 8) / 3 - pl) return NULL;
    u = (char *)wsync__halloc(&h->a, h->base_len + 1 + 3 * (pl + kl) + 2);
    if (!u) return NULL;
    memcpy(u, h->base, h->base_len);
    o = h->base_len;
    u[o++] = '/';
    for (i = 0; i < pl + kl; i++) {
        /* the same encoding as SigV4's canonical URI: the path is signed as sent */
        unsigned char c = (unsigned char)(i < pl ? h->kprefix[i] : key[i - pl]);
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
            c == '_' || c == '~' || c == '/') {
            u[o++] = (char)c;
        } else {
            u[o++] = '%';
            u[o++] = hex[c >> 4];
            u[o++] = hex[c & 15];
        }
    }
    if (trailing_slash && (o == 0 || u[o - 1] != '/')) u[o++] = '/';
    u[o] = 0;
    return u;
}

/* A key that names a directory: nginx redirects to the URL with a '/'. */
static int wsync__his_dir_redirect(const wsync__hresp *rs)
{
    size_t n = strlen(rs->location);
    return (rs->status == 301 || rs->status == 302) && n && rs->location[n - 1] == '/';
}

/* A redirect to follow (GET and HEAD: the Hugging Face gateway answers GET
   with a 302 to its CDN); not nginx's answer for a directory. */
static int wsync__hredirect(const wsync__http *h, const wsync__hresp *rs)
{
    return h->follow && rs->cc == CURLE_OK && rs->location[0] && !wsync__his_dir_redirect(rs) &&
           (rs->status == 301 || rs->status == 302 || rs->status == 303 || rs->status == 307 || rs->status == 308);
}

/* Location resolved against from, in h's allocator; *nosign set when it
   leaves from's scheme, host or port: the signature (made for our host
   with our keys) is not sent elsewhere. NULL when it is not a URL. */
static char *wsync__hresolve(wsync__http *h, const char *from, const char *location, int *nosign)
{
    CURLU *u = curl_url();
    char *s1 = NULL, *h1 = NULL, *p1 = NULL, *s2 = NULL, *h2 = NULL, *p2 = NULL, *full = NULL, *out = NULL;
    if (!u) return NULL;
    if (curl_url_set(u, CURLUPART_URL, from, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &s1, 0) == CURLUE_OK && curl_url_get(u, CURLUPART_HOST, &h1, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &p1, CURLU_DEFAULT_PORT) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_URL, location, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &s2, 0) == CURLUE_OK && curl_url_get(u, CURLUPART_HOST, &h2, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &p2, CURLU_DEFAULT_PORT) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_URL, &full, 0) == CURLUE_OK &&
        (wsync__hcase_prefix(full, strlen(full), "http://") || wsync__hcase_prefix(full, strlen(full), "https://"))) {
        size_t n = strlen(full), k;
        int same = strlen(s1) == strlen(s2) && strlen(h1) == strlen(h2) && strcmp(p1, p2) == 0;
        for (k = 0; same && s1[k]; k++) same = (s1[k] | 0x20) == (s2[k] | 0x20);
        for (k = 0; same && h1[k]; k++) same = (h1[k] | 0x20) == (h2[k] | 0x20);
        if (!same) *nosign = 1;
        if ((out = (char *)wsync__halloc(&h->a, n + 1)) != NULL) memcpy(out, full, n + 1);
    }
    curl_free(s1);
    curl_free(h1);
    curl_free(p1);
    curl_free(s2);
    curl_free(h2);
    curl_free(p2);
    curl_free(full);
    curl_url_cleanup(u);
    return out;
}

/* ---- put ---- */

/* MKCOL every collection above the key (after a 409: the server does not
   create parents itself). Existing ones answer 405; both are fine. */
static wsync_result wsync__hmkcols(wsync__http *h, const char *key, wsync_error *err)
{
    char *url = wsync__hurl(h, key, 0), *p;
    size_t path_at;
    wsync_result r = WSYNC_OK;
    if (!url) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "URL");
    p = strstr(url, "://");
    p = p ? strchr(p + 3, '/') : NULL;
    path_at = p ? (size_t)(p - url) + 1 : strlen(url);
    for (p = url + path_at; *p && r == WSYNC_OK; p++) {
        wsync__hreq rq;
        wsync__hresp rs;
        char save;
        if (*p != '/') continue;
        save = p[1];
        p[1] = 0;
        memset(&rq, 0, sizeof rq);
        rq.method = "MKCOL";
        rq.url = url;
        rq.what = key;
        r = wsync__hrequest(h, &rq, &rs, NULL, NULL, err);
        if (r == WSYNC_OK && rs.status != 201 && rs.status != 405 && rs.status != 200 && rs.status != 204)
            r = wsync__hfail_resp(h, err, &rq, &rs, 1);
        p[1] = save;
    }
    wsync__hfree(&h->a, url);
    return r;
}

static wsync_result wsync__http_put(void *user, const char *key, const void *bytes, size_t len, wsync_error *err)
{
    wsync__http *h = (wsync__http *)user;
    wsync__hreq rq;
    wsync__hresp rs;
    wsync_result r;
    char *url;
    int round;
    wsync__herr_reset(err);
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!bytes && len) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "no bytes");
    if (!(url = wsync__hurl(h, key, 0))) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "URL");
    memset(&rq, 0, sizeof rq);
    rq.method = "PUT";
    rq.url = url;
    rq.what = key;
    rq.body = (const uint8_t *)(bytes ? bytes : "");
    rq.body_len = len;
    /* a first attempt alone: a missing parent collection is a 409 (or a
       500, from nginx without create_full_put_path; a 404, from rclone's
       serve webdav), answered with MKCOLs */
    for (round = 0; round < 2; round++) {
        rq.attempts = round == 0 ? 1 : 0;
        r = wsync__hrequest(h, &rq, &rs, NULL, NULL, err);
        if (r != WSYNC_OK && !(round == 0 && wsync__hretryable(&rs))) break;
        if (r == WSYNC_OK && rs.status >= 200 && rs.status < 300) break;
        if (round == 0 && (r != WSYNC_OK || wsync__hretryable(&rs) || rs.status == 409 ||
                           (rs.status == 404 && !h->sigv4))) {
            /* 409: a parent is missing, the store's own path too for a
               key without '/' (Apache's answer) */
            if (rs.cc == CURLE_OK && (rs.status == 409 || (rs.status == 404 && !h->sigv4) ||
                                      (rs.status == 500 && strchr(key, '/'))) &&
                (r = wsync__hmkcols(h, key, err)) != WSYNC_OK)
                break;
            wsync__hbackoff(h, 2, &rs);
            continue;
        }
        r = wsync__hfail_resp(h, err, &rq, &rs, round + 1);
        break;
    }
    wsync__hfree(&h->a, url);
    return r;
}

/* ---- head, del ---- */

static int wsync__hsize_headers(void *user, wsync__hresp *rs)
{
    (void)user;
    return rs->status == 200 || rs->status == 206; /* the headers say it: no body wanted */
}

/* An object's size from a GET of its first byte, where an answer did not
   say it: Apache answers a HEAD of an empty file without a Content-Length,
   and a 416 without a Content-Range. A 416 to bytes=0-0 is an empty
   object. */
static wsync_result wsync__hsize_probe(wsync__http *h, const char *url, int nosign, const char *key, uint64_t *size,
                                       wsync_error *err)
{
    wsync__hreq rq;
    wsync__hresp rs;
    wsync_result r;
    memset(&rq, 0, sizeof rq);
    rq.method = "GET";
    rq.url = url;
    rq.nosign = nosign;
    rq.what = key;
    rq.has_range = 1;
    rq.range_lo = rq.range_hi = 0;
    rq.on_headers = wsync__hsize_headers;
    r = wsync__hrequest(h, &rq, &rs, NULL, NULL, err);
    if (r != WSYNC_OK) return r;
    if (rs.status == 206 && rs.has_cr && rs.cr_total_known) *size = rs.cr_total;
    else if (rs.status == 416) *size = rs.has_cr && rs.cr_star ? rs.cr_total : 0;
    else if (rs.status == 200 && rs.has_length) *size = rs.length;
    else if (rs.status == 200 || rs.status == 206)
        return wsync_error_set(err, WSYNC_ERR_IO, "GET %s (bytes 0-0): HTTP %ld without the object's size", url,
                            rs.status);
    else return wsync__hfail_resp(h, err, &rq, &rs, 1);
    return WSYNC_OK;
}

static wsync_result wsync__http_head(void *user, const char *key, uint64_t *size, wsync_error *err)
{
    wsync__http *h = (wsync__http *)user;
    wsync__hreq rq;
    wsync__hresp rs;
    wsync_result r;
    char *url, *redir = NULL;
    unsigned hops;
    wsync__herr_reset(err);
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!(url = wsync__hurl(h, key, 0))) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "URL");
    memset(&rq, 0, sizeof rq);
    rq.method = "HEAD";
    rq.url = url;
    rq.what = key;
    r = wsync__hrequest(h, &rq, &rs, NULL, NULL, err);
    for (hops = 0; r == WSYNC_OK && wsync__hredirect(h, &rs) && hops < WSYNC__HTTP_REDIRECTS; hops++) {
        char *next = wsync__hresolve(h, rq.url, rs.location, &rq.nosign);
        if (!next) {
            r = wsync_error_set(err, WSYNC_ERR_IO, "HEAD %s: HTTP %ld to a location that is not a URL", rq.url,
                             rs.status);
            break;
        }
        if (redir) wsync__hfree(&h->a, redir);
        rq.url = redir = next;
        r = wsync__hrequest(h, &rq, &rs, NULL, NULL, err);
    }
    if (r == WSYNC_OK) {
        if (rs.status == 200 && rs.has_length) {
            if (size) *size = rs.length;
        } else if (rs.status == 200) {
            uint64_t sz = 0;
            r = wsync__hsize_probe(h, rq.url, rq.nosign, key, &sz, err);
            if (r == WSYNC_OK && size) *size = sz;
        } else if (wsync__his_dir_redirect(&rs)) {
            r = wsync_error_set(err, WSYNC_ERR_NOT_FOUND, "no object '%s' (HTTP %ld from HEAD %s: a directory)", key,
                             rs.status, url);
        } else {
            r = wsync__hfail_resp(h, err, &rq, &rs, 1);
        }
    }
    wsync__hfree(&h->a, redir);
    wsync__hfree(&h->a, url);
    return r;
}

static wsync_result wsync__http_del(void *user, const char *key, wsync_error *err)
{
    wsync__http *h = (wsync__http *)user;
    wsync__hreq rq;
    wsync__hresp rs;
    wsync_result r;
    char *url;
    wsync__herr_reset(err);
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!(url = wsync__hurl(h, key, 0))) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "URL");
    memset(&rq, 0, sizeof rq);
    rq.method = "DELETE";
    rq.url = url;
    rq.what = key;
    r = wsync__hrequest(h, &rq, &rs, NULL, NULL, err);
    if (r == WSYNC_OK && !(rs.status >= 200 && rs.status < 300)) r = wsync__hfail_resp(h, err, &rq, &rs, 1);
    wsync__hfree(&h->a, url);
    return r;
}

/* ---- get: one stream, resumed after a cut ---- */

/* What a stream learned about the object. */
typedef struct wsync__hinfo {
    int have_total;
    uint64_t total;
    uint64_t pos;             /* absolute offset after the last byte sunk */
    int ranges_ok;            /* the server answered the range with a 206 */
    uint64_t demand_hi;       /* a strict range's last byte (UINT64_MAX: none) */
    char etag[128];
    char *url;                /* where a redirect led (h's allocator; NULL: none) */
    int nosign;               /* ... to another host: not signed */
} wsync__hinfo;

typedef struct wsync__hstream {
    const char *key;
    uint64_t lo, hi;          /* wanted bytes, inclusive; hi UINT64_MAX: to the end */
    int strict;               /* hi is demanded (past the end: OUT_OF_BOUNDS), else a cap */
    uint64_t pos;             /* next absolute offset the sink wants */
    uint64_t skip_to;         /* a 200 answer: absolute offset of its next byte */
    int whole;                /* this attempt's answer is the whole object (200) */
    int first;                /* no response checked yet */
    int done;                 /* got everything wanted (a 200 stopped early) */
    int sink_rc;
    int fail;                 /* on_headers refused: see code/msg */
    wsync_result code;
    char msg[256];
    wsync_sink_fn sink;
    void *sink_user;
    wsync__hinfo *info;
} wsync__hstream;

static int wsync__hstream_refuse(wsync__hstream *s, wsync_result code, const char *msg)
{
    s->fail = 1;
    s->code = code;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    return 1;
}

static int wsync__hstream_headers(void *user, wsync__hresp *rs)
{
    wsync__hstream *s = (wsync__hstream *)user;
    wsync__hinfo *in = s->info;
    uint64_t total;
    char m[256];
    s->whole = 0;
    if (rs->status == 206) {
        if (!rs->has_cr || rs->cr_star || rs->cr_lo != s->pos || (s->hi != UINT64_MAX && rs->cr_hi > s->hi))
            return wsync__hstream_refuse(s, WSYNC_ERR_IO, "HTTP 206 with a Content-Range other than the one asked for");
        if (!rs->cr_total_known)
            return wsync__hstream_refuse(s, WSYNC_ERR_IO, "HTTP 206 without the object's size in Content-Range");
        total = rs->cr_total;
        if (s->first) in->ranges_ok = 1;
    } else if (rs->status == 200) {
        if (!rs->has_length) return wsync__hstream_refuse(s, WSYNC_ERR_IO, "HTTP 200 without a Content-Length");
        total = rs->length;
        s->whole = 1;
        s->skip_to = 0;
        if (!s->strict) s->hi = UINT64_MAX; /* ranges ignored: take it all now */
    } else {
        return 0; /* an error status: judged after the transfer */
    }
    if (s->lo > total || (s->strict && s->hi != UINT64_MAX && s->hi >= total) ||
        (in->demand_hi != UINT64_MAX && in->demand_hi >= total)) {
        snprintf(m, sizeof m, "bytes [%llu, %llu] run past the end of '%s' (%llu bytes)", (unsigned long long)s->lo,
                 (unsigned long long)s->hi, s->key, (unsigned long long)total);
        return wsync__hstream_refuse(s, WSYNC_ERR_OUT_OF_BOUNDS, m);
    }
    if (s->hi != UINT64_MAX && s->hi >= total) s->hi = total ? total - 1 : 0; /* a cap past the end */
    if (!s->first) {
        /* a resumed download: the same object, or nothing */
        if (total != in->total || (in->etag[0] && rs->etag[0] && !wsync__hetag_same(in->etag, rs->etag))) {
            snprintf(m, sizeof m, "'%s' was replaced while it was being downloaded", s->key);
            return wsync__hstream_refuse(s, WSYNC_ERR_IO, m);
        }
    } else {
        s->first = 0;
        in->have_total = 1;
        in->total = total;
        snprintf(in->etag, sizeof in->etag, "%s", rs->etag);
    }
    if (rs->status == 206 && total == 0) {
        /* an empty object answered "bytes 0-0/0" with a byte promised and
           never sent (s3rver): nothing to read, so do not wait for it */
        s->done = 1;
        return 1;
    }
    return 0;
}

/* The absolute end (exclusive) of what this stream wants. */
static uint64_t wsync__hstream_end(const wsync__hstream *s)
{
    if (s->hi != UINT64_MAX) return s->info->have_total && s->info->total == 0 ? 0 : s->hi + 1;
    return s->info->have_total ? s->info->total : UINT64_MAX;
}

static int wsync__hstream_body(void *user, const void *p, size_t n)
{
    wsync__hstream *s = (wsync__hstream *)user;
    const uint8_t *b = (const uint8_t *)p;
    uint64_t end = wsync__hstream_end(s);
    if (s->whole) {
        /* the whole object: skip to pos, stop after hi */
        uint64_t at = s->skip_to;
        s->skip_to += n;
        if (at + n <= s->pos) return 0;
        if (at < s->pos) {
            b += s->pos - at;
            n -= (size_t)(s->pos - at);
        }
    }
    if (!s->whole && (s->pos >= end || n > end - s->pos)) {
        /* a 206 longer than its range: cut off here, not read to its end */
        char m[256];
        snprintf(m, sizeof m, "HTTP 206 sent more than bytes [%llu, %llu] of '%s'", (unsigned long long)s->lo,
                 (unsigned long long)(end - 1), s->key);
        return wsync__hstream_refuse(s, WSYNC_ERR_IO, m);
    }
    if (s->pos >= end) n = 0;
    else if (n > end - s->pos) n = (size_t)(end - s->pos);
    if (n && (s->sink_rc = s->sink(s->sink_user, b, n)) != 0) return 1;
    s->pos += n;
    if (s->pos == end && s->whole && s->skip_to < s->info->total) {
        s->done = 1;
        return 1; /* the rest of a 200 is not wanted */
    }
    return 0;
}

/* Streams bytes [lo, hi] (hi UINT64_MAX: to the end; strict 0: hi is only a
   cap) of url into the sink, resuming by range after a cut. */
static wsync_result wsync__hstream_run(wsync__http *h, const char *url, const char *key, uint64_t lo, uint64_t hi,
                                       int strict, int open_first, wsync_sink_fn sink, void *sink_user,
                                       wsync__hinfo *info, wsync_error *err)
{
    wsync__hstream s;
    wsync__hreq rq;
    wsync__hresp rs;
    CURL *c = wsync__hacquire(h);
    unsigned attempt = 0, stalls = 0, redirects = 0;
    wsync_result r = WSYNC_OK;
    if (!c) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "GET %s: no curl handle", url);
    memset(&s, 0, sizeof s);
    s.key = key;
    s.lo = lo;
    s.hi = hi;
    s.strict = strict;
    s.pos = lo;
    s.first = !info->have_total;
    s.sink = sink;
    s.sink_user = sink_user;
    s.info = info;
    if (info->have_total && s.hi != UINT64_MAX && s.hi >= info->total && !strict)
        s.hi = info->total ? info->total - 1 : 0;
    memset(&rq, 0, sizeof rq);
    rq.method = "GET";
    rq.url = info->url ? info->url : url;
    rq.nosign = info->nosign;
    rq.what = key;
    rq.on_body = wsync__hstream_body;
    rq.on_body_user = &s;
    rq.on_headers = wsync__hstream_headers;
    rq.on_headers_user = &s;
    for (;;) {
        uint64_t before = s.pos, want_end;
        attempt++;
        /* the first request of a whole-object download goes without a range */
        rq.has_range = !(open_first && s.first && s.pos == 0 && s.hi == UINT64_MAX);
        rq.range_lo = s.pos;
        rq.range_hi = s.hi;
        rq.if_range = !s.first ? wsync__hif_range(info->etag) : NULL;
        s.done = 0;
        wsync__hperform(h, c, &rq, &rs);
        if (wsync__hredirect(h, &rs) && redirects < WSYNC__HTTP_REDIRECTS) {
            char *next = wsync__hresolve(h, rq.url, rs.location, &info->nosign);
            if (!next) {
                r = wsync_error_set(err, WSYNC_ERR_IO, "GET %s: HTTP %ld to a location that is not a URL", rq.url,
                                 rs.status);
                break;
            }
            wsync__hfree(&h->a, info->url);
            rq.url = info->url = next;
            rq.nosign = info->nosign;
            redirects++;
            attempt--;
            continue;
        }
        if (s.fail) {
            r = wsync_error_set(err, s.code, "GET %s: %s", url, s.msg);
            break;
        }
        if (s.sink_rc) {
            r = wsync_error_set(err, WSYNC_ERR_SINK, "the sink failed (%d) reading '%s' from %s", s.sink_rc, key, url);
            break;
        }
        if (rs.status == 416 && rs.cc == CURLE_OK) {
            /* nothing at or after pos: fine only for an open range at the very end */
            uint64_t sz = rs.has_cr && rs.cr_star ? rs.cr_total : UINT64_MAX;
            char actual[32];
            if (sz == UINT64_MAX && h->sigv4 &&
                wsync__s3_field(rs.errbody, rs.errbody_len, "ActualObjectSize", actual, sizeof actual)) {
                /* S3 says the size in its InvalidRange error, not in Content-Range */
                const char *q = actual;
                uint64_t v;
                if (wsync__hdigits(&q, actual + strlen(actual), &v) && !*q) sz = v;
            }
            if (sz == UINT64_MAX && !h->sigv4 && (hi == UINT64_MAX || !strict)) {
                /* no Content-Range (Apache): an open range at the very end is fine */
                wsync_error perr;
                uint64_t v = 0;
                if (wsync__hsize_probe(h, rq.url, rq.nosign, key, &v, &perr) == WSYNC_OK) sz = v;
            }
            if (sz != UINT64_MAX && !info->have_total) {
                info->have_total = 1;
                info->total = sz;
            }
            if (sz != UINT64_MAX && s.pos == sz && (hi == UINT64_MAX || !strict)) break;
            r = wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS,
                             "offset %llu is past the end of '%s' (%llu bytes; HTTP 416 from GET %s)",
                             (unsigned long long)s.pos, key, (unsigned long long)(sz == UINT64_MAX ? 0 : sz), url);
            break;
        }
        want_end = wsync__hstream_end(&s);
        if (s.done || (rs.cc == CURLE_OK && (rs.status == 200 || rs.status == 206))) {
            if (s.pos == want_end) break;
            /* fewer bytes than announced without an error: a cut; go on below */
        } else if (rs.cc == CURLE_OK && (rs.status < 200 || rs.status >= 300) && !wsync__hretryable(&rs)) {
            if (wsync__his_dir_redirect(&rs))
                r = wsync_error_set(err, WSYNC_ERR_NOT_FOUND, "no object '%s' (HTTP %ld from GET %s: a directory)",
                                 key, rs.status, url);
            else r = wsync__hfail_resp(h, err, &rq, &rs, attempt);
            break;
        } else if (rs.cc != CURLE_OK && !wsync__hretryable(&rs)) {
            r = wsync__hfail_resp(h, err, &rq, &rs, attempt);
            break;
        }
        /* again, from where the sink is */
        if (s.pos > before && rs.cc != CURLE_OPERATION_TIMEDOUT) {
            /* progress resets the count, except from a server too slow to keep */
            stalls = 0;
            wsync__hcount(h, &h->st.resumed, 1);
        } else stalls++;
        if (stalls >= h->o.max_attempts || attempt >= 4 * h->o.max_attempts) {
            if (rs.cc == CURLE_OK && (rs.status == 200 || rs.status == 206))
                r = wsync_error_set(err, WSYNC_ERR_IO, "GET %s: the body ended early (at byte %llu) after %u attempts",
                                 url, (unsigned long long)s.pos, attempt);
            else r = wsync__hfail_resp(h, err, &rq, &rs, attempt);
            break;
        }
        wsync__hbackoff(h, stalls + 1, &rs);
    }
    wsync__hrelease(h, c);
    info->pos = s.pos;
    return r;
}

/* ---- get: large downloads as parallel ranged GETs >>get-parallel ----
   Parts go to the sink in order. The part next in order is "live": its
   bytes go from curl's buffer straight to the sink as they arrive; the
   others land in their slot's buffer, which is handed to the sink when the
   part becomes live (and the part streams on from there). A part cut short
   resumes from the byte it reached, live or not. */

typedef struct wsync__hpart {
    CURL *c;
    struct curl_slist *hl;
    wsync__hreq rq;
    wsync__hresp rs;
    uint64_t lo, hi;       /* inclusive */
    uint8_t *buf;          /* bytes received while the part was not yet live */
    uint64_t got;          /* bytes received, buffered or sunk */
    int live;              /* next in order: got bytes have all been sunk, more go straight through */
    unsigned attempts;
    int state;             /* 0 idle, 1 running, 2 waiting to retry, 3 all received */
    double retry_at;
    size_t index;          /* part number */
    const char *expect_etag;
    uint64_t expect_total;
    int nosign;
    int bad;               /* the response was not the range asked for */
    int sink_rc;           /* the sink failed on a live part */
    wsync_sink_fn sink;
    void *sink_user;
} wsync__hpart;

static int wsync__hpart_headers(void *user, wsync__hresp *rs)
{
    wsync__hpart *p = (wsync__hpart *)user;
    if (rs->status < 200 || rs->status >= 300) return 0;
    if (rs->status != 206 || !rs->has_cr || rs->cr_star || rs->cr_lo != p->lo + p->got || rs->cr_hi != p->hi ||
        !rs->cr_total_known || rs->cr_total != p->expect_total ||
        (p->expect_etag[0] && rs->etag[0] && !wsync__hetag_same(p->expect_etag, rs->etag))) {
        p->bad = 1;
        return 1;
    }
    return 0;
}

static int wsync__hpart_body(void *user, const void *b, size_t n)
{
    wsync__hpart *p = (wsync__hpart *)user;
    if (n > p->hi - p->lo + 1 - p->got) {
        p->bad = 1;
        return 1;
    }
    if (p->live) {
        if ((p->sink_rc = p->sink(p->sink_user, b, n)) != 0) return 1;
    } else {
        memcpy(p->buf + p->got, b, n);
    }
    p->got += n;
    return 0;
}

static int wsync__hpart_start(wsync__http *h, CURLM *m, wsync__hpart *p, const char *url, const char *key)
{
    memset(&p->rq, 0, sizeof p->rq);
    p->rq.method = "GET";
    p->rq.url = url;
    p->rq.nosign = p->nosign;
    p->rq.what = key;
    p->rq.has_range = 1;
    p->rq.range_lo = p->lo + p->got;
    p->rq.range_hi = p->hi;
    p->rq.if_range = wsync__hif_range(p->expect_etag);
    p->rq.on_body = wsync__hpart_body;
    p->rq.on_body_user = p;
    p->rq.on_headers = wsync__hpart_headers;
    p->rq.on_headers_user = p;
    if (!wsync__hsetup(h, p->c, &p->rq, &p->rs, &p->hl)) return 0;
    p->bad = 0;
    p->attempts++;
    p->state = 1;
    return curl_multi_add_handle(m, p->c) == CURLM_OK;
}

/* A finished transfer of part p: received whole, to be retried, or failed. */
static wsync_result wsync__hpart_done(wsync__http *h, wsync__hpart *p, CURLcode cc, const char *url,
                                      const char *key, wsync_error *err)
{
    wsync__hfinish(h, p->c, &p->rq, &p->rs, cc);
    if (p->sink_rc)
        return wsync_error_set(err, WSYNC_ERR_SINK, "the sink failed (%d) reading '%s' from %s", p->sink_rc, key, url);
    if (p->bad)
        return wsync_error_set(err, WSYNC_ERR_IO,
                            "GET %s: part %llu-%llu: HTTP %ld with the wrong range or size, or '%s' was replaced "
                            "while it was being downloaded",
                            url, (unsigned long long)p->lo, (unsigned long long)p->hi, p->rs.status, key);
    if (p->rs.cc == CURLE_OK && p->rs.status == 206 && p->got == p->hi - p->lo + 1) {
        p->state = 3;
    } else if ((wsync__hretryable(&p->rs) || (p->rs.cc == CURLE_OK && p->rs.status == 206)) &&
               p->attempts < h->o.max_attempts) {
        /* cut short or transient: resume this part from the byte it reached */
        uint64_t ms = h->o.backoff_ms;
        unsigned k;
        for (k = 1; k < p->attempts && ms < h->o.max_backoff_ms; k++) ms *= 2;
        if (p->rs.retry_after_ms >= 0 && (uint64_t)p->rs.retry_after_ms > ms) ms = (uint64_t)p->rs.retry_after_ms;
        if (ms > h->o.max_backoff_ms) ms = h->o.max_backoff_ms;
        p->state = 2;
        p->retry_at = wsync__hnow() + (double)ms / 1000.0;
        if (p->got) wsync__hcount(h, &h->st.resumed, 1);
    } else {
        return wsync__hfail_resp(h, err, &p->rq, &p->rs, p->attempts);
    }
    return WSYNC_OK;
}

/* Bytes [lo, end) of url, known to be `total` long and served in ranges, in
   parts of part_size over `parallel` connections, to the sink in order. */
static wsync_result wsync__hparallel(wsync__http *h, const char *url, int nosign, const char *key, uint64_t lo,
                                     uint64_t end, uint64_t total, const char *etag, wsync_sink_fn sink,
                                     void *sink_user, wsync_error *err)
{
    wsync__hpart parts[16];
    unsigned n_slots = h->o.parallel > 16 ? 16 : h->o.parallel, i;
    uint64_t psize = h->o.part_size, n_parts = (end - lo + psize - 1) / psize, next_part = 0, next_sink = 0;
    CURLM *m = NULL;
    int own_multi = 0, keep;
    wsync_result r = WSYNC_OK;
    memset(parts, 0, sizeof parts);
    WSYNC__HLOCK(h);
    if (h->multi && !h->multi_busy) {
        m = h->multi;
        h->multi_busy = 1;
    }
    WSYNC__HUNLOCK(h);
    /* the holder of the store's multi handle also takes its kept buffers */
    keep = m && (uint64_t)n_slots * psize <= WSYNC__HTTP_KEEP_BUFS;
    if (m && h->pbuf_size != (size_t)psize) {
        for (i = 0; i < 16; i++) {
            wsync__hfree(&h->a, h->pbuf[i]);
            h->pbuf[i] = NULL;
        }
        h->pbuf_size = (size_t)psize;
    }
    if (!m) {
        m = curl_multi_init();
        own_multi = 1;
    }
    if (!m) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "GET %s: no curl multi handle", url);
    if (n_slots > n_parts) n_slots = (unsigned)n_parts;
    for (i = 0; i < n_slots; i++) {
        parts[i].c = wsync__hacquire(h);
        if (m == h->multi && h->pbuf[i]) {
            parts[i].buf = h->pbuf[i];
            h->pbuf[i] = NULL;
        } else parts[i].buf = (uint8_t *)wsync__halloc(&h->a, (size_t)psize);
        parts[i].expect_etag = etag;
        parts[i].expect_total = total;
        parts[i].nosign = nosign;
        parts[i].sink = sink;
        parts[i].sink_user = sink_user;
        if (!parts[i].c || !parts[i].buf) {
            r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "GET %s: %u parts of %llu bytes", url, n_slots,
                             (unsigned long long)psize);
            goto done;
        }
    }
    wsync__hcount(h, &h->st.parallel_gets, 1);
    while (r == WSYNC_OK && next_sink < n_parts) {
        int running = 0, left, freed = 0;
        CURLMsg *msg;
        double now = wsync__hnow();
        /* start idle slots on new parts, and parts whose retry time came */
        for (i = 0; i < n_slots && r == WSYNC_OK; i++) {
            wsync__hpart *p = &parts[i];
            if (p->state == 0 && next_part < n_parts) {
                p->index = (size_t)next_part;
                p->lo = lo + next_part * psize;
                p->hi = p->lo + psize - 1 < end - 1 ? p->lo + psize - 1 : end - 1;
                p->got = 0;
                p->live = next_part == next_sink;
                p->attempts = 0;
                next_part++;
                if (!wsync__hpart_start(h, m, p, url, key))
                    r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "GET %s: cannot start a part", url);
            } else if (p->state == 2 && now >= p->retry_at) {
                curl_slist_free_all(p->hl);
                p->hl = NULL;
                wsync__hcount(h, &h->st.retries, 1);
                if (!wsync__hpart_start(h, m, p, url, key))
                    r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "GET %s: cannot restart a part", url);
            }
        }
        if (r != WSYNC_OK) break;
        curl_multi_perform(m, &running);
        while (r == WSYNC_OK && (msg = curl_multi_info_read(m, &left)) != NULL) {
            wsync__hpart *p = NULL;
            if (msg->msg != CURLMSG_DONE) continue;
            for (i = 0; i < n_slots; i++)
                if (parts[i].c == msg->easy_handle && parts[i].state == 1) p = &parts[i];
            if (!p) continue;
            curl_multi_remove_handle(m, p->c);
            p->state = 0; /* not in the multi handle any more; set again below */
            r = wsync__hpart_done(h, p, msg->data.result, url, key, err);
        }
        /* the part next in order: what it buffered goes to the sink, and it
           streams from here on; one received whole frees its slot */
        for (;;) {
            wsync__hpart *p = NULL;
            int rc;
            for (i = 0; i < n_slots; i++)
                if (parts[i].state != 0 && parts[i].index == next_sink) p = &parts[i];
            if (!p || r != WSYNC_OK) break;
            if (!p->live) {
                if (p->got && (rc = sink(sink_user, p->buf, (size_t)p->got)) != 0) {
                    r = wsync_error_set(err, WSYNC_ERR_SINK, "the sink failed (%d) reading '%s' from %s", rc, key, url);
                    break;
                }
                p->live = 1;
            }
            if (p->state != 3) break;
            curl_slist_free_all(p->hl);
            p->hl = NULL;
            p->state = 0;
            p->live = 0;
            next_sink++;
            freed = 1;
        }
        /* a freed slot starts its next part at once; else wait for sockets */
        if (r == WSYNC_OK && next_sink < n_parts && !(freed && next_part < n_parts))
            curl_multi_poll(m, NULL, 0, running ? 100 : 10, NULL);
    }
done:
    for (i = 0; i < n_slots; i++) {
        if (parts[i].state == 1) curl_multi_remove_handle(m, parts[i].c);
        curl_slist_free_all(parts[i].hl);
        if (parts[i].c) {
            if (r == WSYNC_OK) wsync__hrelease(h, parts[i].c);
            else curl_easy_cleanup(parts[i].c); /* may sit in an aborted transfer */
        }
        if (keep && !own_multi && parts[i].buf) h->pbuf[i] = parts[i].buf;
        else wsync__hfree(&h->a, parts[i].buf);
    }
    if (own_multi) curl_multi_cleanup(m);
    else {
        WSYNC__HLOCK(h);
        h->multi_busy = 0;
        WSYNC__HUNLOCK(h);
    }
    return r;
}

/* A download: a plain stream, or (large, and the server serves ranges)
   one part first to learn the size, then the rest in parallel. */
static wsync_result wsync__http_get(void *user, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                                    void *sink_user, uint64_t *size, wsync_error *err)
{
    wsync__http *h = (wsync__http *)user;
    wsync__hinfo info;
    wsync_result r;
    char *url;
    uint64_t total = 0, hi;
    int may_parallel;
    wsync__herr_reset(err);
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!sink) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "no sink");
    if (len == 0) {
        /* nothing to transfer: the size decides */
        if ((r = wsync__http_head(user, key, &total, err)) != WSYNC_OK) return r;
        if (size) *size = total;
        if (offset > total)
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "offset %llu is past the end of '%s' (%llu bytes)",
                                (unsigned long long)offset, key, (unsigned long long)total);
        return WSYNC_OK;
    }
    if (len != UINT64_MAX && len - 1 > UINT64_MAX - 1 - offset)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "a range of '%s' past 2^64", key);
    hi = len == UINT64_MAX ? UINT64_MAX : offset + len - 1;
    if (!(url = wsync__hurl(h, key, 0))) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "URL");
    memset(&info, 0, sizeof info);
    info.demand_hi = hi;
    may_parallel = h->o.parallel > 1 && (hi == UINT64_MAX || hi - offset + 1 > h->o.parallel_threshold) &&
                   h->o.part_size < UINT64_MAX - offset;
    if (!may_parallel) {
        r = wsync__hstream_run(h, url, key, offset, hi, 1, 1, sink, sink_user, &info, err);
    } else {
        /* a strict range is checked against the size before any byte is sunk */
        uint64_t first_hi = offset + h->o.part_size - 1, end;
        if (hi != UINT64_MAX && first_hi > hi) first_hi = hi;
        r = wsync__hstream_run(h, url, key, offset, first_hi, 0, 0, sink, sink_user, &info, err);
        end = hi == UINT64_MAX ? info.total : hi + 1;
        if (r == WSYNC_OK && info.have_total && info.pos < end) {
            if (info.ranges_ok && end - offset > h->o.parallel_threshold)
                r = wsync__hparallel(h, info.url ? info.url : url, info.nosign, key, info.pos, end, info.total,
                                     info.etag, sink, sink_user, err);
            else
                r = wsync__hstream_run(h, url, key, info.pos, end - 1, 1, 0, sink, sink_user, &info, err);
        }
    }
    if (r == WSYNC_OK && size && info.have_total) *size = info.total;
    else if (size && info.have_total && r == WSYNC_ERR_OUT_OF_BOUNDS) *size = info.total;
    wsync__hfree(&h->a, info.url);
    wsync__hfree(&h->a, url);
    return r;
}

/* ---- list: JSON directory listings, walked from the prefix's directory ---- */

typedef struct wsync__hkey {
    char *key;
    uint64_t size;
} wsync__hkey;

typedef struct wsync__hlist {
    wsync__http *h;
    const char *prefix;
    size_t plen;
    wsync__hkey *keys;
    size_t n, cap;
    char **dirs;           /* directories still to read (relative, ending in '/') */
    size_t n_dirs, cap_dirs;
    const char *dir;       /* the directory being parsed */
    int oom, too_many;
    /* confirming a 404 (wsync__hlist_missing): a parent is read for this
       name only; probe_found 1 when listed as a directory, 2 as a file */
    const char *probe;
    size_t probe_len;
    int probe_found;
    /* PROPFIND: the decoded path of the collection asked for, ending in '/' */
    char *dpath;
    size_t dpath_len;
    int bad;
    char bad_msg[384];
    /* the body of one listing */
    char *body;
    size_t body_len, body_cap;
    size_t body_max;       /* 0: WSYNC__HTTP_LIST_MAX */
    int body_big;
} wsync__hlist;

static int wsync__hgrow(const wsync_allocator *a, void **p, size_t *cap, size_t n, size_t elem)
{
    size_t nc;
    void *np;
    if (n < *cap) return 1;
    nc = *cap ? *cap * 2 : 64;
    if (nc > ((size_t)-1) / elem) return 0;
    if (!(np = wsync__halloc(a, nc * elem))) return 0;
    if (*p && n) memcpy(np, *p, n * elem);
    wsync__hfree(a, *p);
    *p = np;
    *cap = nc;
    return 1;
}

static char *wsync__hjoin(const wsync_allocator *a, const char *dir, const char *name, size_t nlen, int slash)
{
    size_t dl = strlen(dir);
    char *k = (char *)wsync__halloc(a, dl + nlen + 2);
    if (!k) return NULL;
    memcpy(k, dir, dl);
    memcpy(k + dl, name, nlen);
    if (slash) k[dl + nlen++] = '/';
    k[dl + nlen] = 0;
    return k;
}

static int wsync__hcmp_key(const void *a, const void *b)
{
    return strcmp(((const wsync__hkey *)a)->key, ((const wsync__hkey *)b)->key);
}

static void wsync__hlist_init(wsync__hlist *l, wsync__http *h, const char *prefix)
{
    memset(l, 0, sizeof *l);
    l->h = h;
    l->prefix = prefix ? prefix : "";
    l->plen = strlen(l->prefix);
}

/* Both stores' listings: keeps the key k (allocated; kept or freed) of an
   object when it was asked for (under the prefix) and is a key (not a
   temporary name, no control byte); up to WSYNC__HTTP_LIST_KEYS of them.
   0: go on; 1: stop (l->oom, l->too_many). */
static int wsync__hlist_keep(wsync__hlist *l, char *k, uint64_t size)
{
    const wsync_allocator *a = &l->h->a;
    if (strncmp(k, l->prefix, l->plen) != 0 || wsync_store_key_check(k, NULL) != WSYNC_OK) {
        wsync__hfree(a, k);
        return 0;
    }
    if (l->n >= WSYNC__HTTP_LIST_KEYS) {
        wsync__hfree(a, k);
        l->too_many = 1;
        return 1;
    }
    if (!wsync__hgrow(a, (void **)&l->keys, &l->cap, l->n, sizeof *l->keys)) {
        wsync__hfree(a, k);
        l->oom = 1;
        return 1;
    }
    l->keys[l->n].key = k;
    l->keys[l->n].size = size;
    l->n++;
    return 0;
}

/* After a listing page or directory was read: what stopped its answer or
   its entries (memory, an answer over the cap, too many keys), as an error
   naming url; WSYNC_OK when nothing did. */
static wsync_result wsync__hlist_stopped(const wsync__hlist *l, const char *url, wsync_error *err)
{
    if (l->oom) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "listing %s", url);
    if (l->body_big)
        return wsync_error_set(err, WSYNC_ERR_LIMIT, "listing %s: an answer over %lu bytes", url,
                               (unsigned long)(l->body_max ? l->body_max : WSYNC__HTTP_LIST_MAX));
    if (l->too_many) return wsync_error_set(err, WSYNC_ERR_LIMIT, "listing %s: over %u keys", url, WSYNC__HTTP_LIST_KEYS);
    return WSYNC_OK;
}

/* The end of a listing: when r is WSYNC_OK, the keys to fn in byte order
   (S3 lists in UTF-8 byte order already, some servers do not; directories
   come in any order); then all that l holds is freed. Returns r. */
static wsync_result wsync__hlist_finish(wsync__hlist *l, wsync_result r, wsync_key_fn fn, void *fn_user)
{
    const wsync_allocator *a = &l->h->a;
    size_t i;
    if (r == WSYNC_OK) {
        if (l->n) qsort(l->keys, l->n, sizeof *l->keys, wsync__hcmp_key);
        for (i = 0; i < l->n; i++)
            if (fn(fn_user, l->keys[i].key, l->keys[i].size) != 0) break;
    }
    for (i = 0; i < l->n_dirs; i++) wsync__hfree(a, l->dirs[i]);
    for (i = 0; i < l->n; i++) wsync__hfree(a, l->keys[i].key);
    wsync__hfree(a, l->dirs);
    wsync__hfree(a, l->keys);
    wsync__hfree(a, l->body);
    wsync__hfree(a, l->dpath);
    return r;
}

static int wsync__hlist_entry(void *user, const char *name, size_t nlen, int is_dir, uint64_t size)
{
    wsync__hlist *l = (wsync__hlist *)user;
    const wsync_allocator *a = &l->h->a;
    char *k;
    size_t kl;
    if (l->oom || l->too_many) return 1;
    if (l->probe) {
        if (nlen == l->probe_len && memcmp(name, l->probe, nlen) == 0) l->probe_found = is_dir ? 1 : 2;
        return 0;
    }
    if (!(k = wsync__hjoin(a, l->dir, name, nlen, is_dir))) {
        l->oom = 1;
        return 1;
    }
    kl = strlen(k);
    if (kl != strlen(l->dir) + nlen + (is_dir ? 1u : 0u) || kl > 1024) { /* NUL inside, or too long */
        wsync__hfree(a, k);
        return 0;
    }
    if (is_dir) {
        /* only directories that can hold keys with the prefix */
        size_t m = kl < l->plen ? kl : l->plen;
        if (strncmp(k, l->prefix, m) != 0) {
            wsync__hfree(a, k);
            return 0;
        }
        if (!wsync__hgrow(a, (void **)&l->dirs, &l->cap_dirs, l->n_dirs, sizeof *l->dirs)) {
            wsync__hfree(a, k);
            l->oom = 1;
            return 1;
        }
        l->dirs[l->n_dirs++] = k;
        return 0;
    }
    return wsync__hlist_keep(l, k, size);
}

static int wsync__hlist_body(void *user, const void *p, size_t n)
{
    wsync__hlist *l = (wsync__hlist *)user;
    if (n > (l->body_max ? l->body_max : WSYNC__HTTP_LIST_MAX) - l->body_len) {
        l->body_big = 1;
        return 1;
    }
    if (l->body_len + n > l->body_cap) {
        size_t nc = l->body_cap ? l->body_cap : 4096;
        char *nb;
        while (nc < l->body_len + n) nc *= 2;
        if (!(nb = (char *)wsync__halloc(&l->h->a, nc))) {
            l->oom = 1;
            return 1;
        }
        if (l->body_len) memcpy(nb, l->body, l->body_len);
        wsync__hfree(&l->h->a, l->body);
        l->body = nb;
        l->body_cap = nc;
    }
    memcpy(l->body + l->body_len, p, n);
    l->body_len += n;
    return 0;
}

static void wsync__hlist_reset(void *user)
{
    wsync__hlist *l = (wsync__hlist *)user;
    l->body_len = 0;
    l->body_big = 0;
}

/* A PROPFIND answer's entry: the collection itself is skipped, a direct
   child becomes a name of the directory, anything else is refused. */
static int wsync__hlist_href(void *user, const char *path, size_t plen, int is_dir, uint64_t size)
{
    wsync__hlist *l = (wsync__hlist *)user;
    const char *name;
    size_t nl;
    if (l->oom || l->too_many || l->bad) return 1;
    if ((plen == l->dpath_len && memcmp(path, l->dpath, plen) == 0) ||
        (plen + 1 == l->dpath_len && memcmp(path, l->dpath, plen) == 0))
        return 0; /* the collection asked for */
    if (plen <= l->dpath_len || memcmp(path, l->dpath, l->dpath_len) != 0) {
        snprintf(l->bad_msg, sizeof l->bad_msg, "an href '%.120s' outside the collection '%.120s' that was asked for",
                 path, l->dpath);
        l->bad = 1;
        return 1;
    }
    name = path + l->dpath_len;
    nl = plen - l->dpath_len;
    if (name[nl - 1] == '/') {
        if (!is_dir) {
            snprintf(l->bad_msg, sizeof l->bad_msg, "an href '%.200s' ending in '/' that is not a collection", path);
            l->bad = 1;
            return 1;
        }
        nl--;
    }
    if (nl == 0 || memchr(name, '/', nl)) {
        snprintf(l->bad_msg, sizeof l->bad_msg, "an href '%.200s' that is not a direct child of '%.120s' (Depth: 1)",
                 path, l->dpath);
        l->bad = 1;
        return 1;
    }
    return wsync__hlist_entry(l, name, nl, is_dir, size);
}

#define WSYNC__HLIST_PROPFIND_BODY                                                                                   \
    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:propfind xmlns:D=\"DAV:\"><D:prop><D:resourcetype/>"             \
    "<D:getcontentlength/></D:prop></D:propfind>\n"

/* PROPFIND, Depth: 1. *answered: 1 when the server answered it as a WebDAV
   server does (207, or 404 for a missing collection); 0 with *status when
   it did not (auto mode then tries the JSON listing), and r is WSYNC_OK. */
static wsync_result wsync__hlist_propfind(wsync__hlist *l, const char *url, const char *dir, int explicit_,
                                          int *answered, long *status, wsync_error *err)
{
    wsync__http *h = l->h;
    wsync__hreq rq;
    wsync__hresp rs;
    wsync_result r;
    struct curl_slist *hd = NULL, *t;
    const char *p, *why = "";
    size_t bad = 0, ul;
    *answered = 0;
    *status = 0;
    /* the collection's path as the server will write it in its hrefs, decoded */
    p = strstr(url, "://");
    p = p ? strchr(p + 3, '/') : NULL;
    if (!p) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "listing %s: no path in the URL", url);
    ul = strlen(p);
    wsync__hfree(&h->a, l->dpath);
    if (!(l->dpath = (char *)wsync__halloc(&h->a, ul + 2))) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "listing %s", url);
    l->dpath_len = wsync__href_path(p, ul, l->dpath, &why, &bad);
    if (l->dpath_len == (size_t)-1)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "listing %s: the store's URL: %s", url, why);
    if (l->dpath[l->dpath_len - 1] != '/') {
        l->dpath[l->dpath_len++] = '/';
        l->dpath[l->dpath_len] = 0;
    }
    if (!(t = curl_slist_append(hd, "Depth: 1"))) goto oom;
    hd = t;
    if (!(t = curl_slist_append(hd, "Content-Type: application/xml; charset=utf-8"))) goto oom;
    hd = t;
    memset(&rq, 0, sizeof rq);
    rq.method = "PROPFIND";
    rq.url = url;
    rq.what = dir[0] ? dir : "(the root)";
    rq.extra = hd;
    rq.body = (const uint8_t *)WSYNC__HLIST_PROPFIND_BODY;
    rq.body_len = sizeof WSYNC__HLIST_PROPFIND_BODY - 1;
    rq.on_body = wsync__hlist_body;
    rq.on_body_user = l;
    r = wsync__hrequest(h, &rq, &rs, wsync__hlist_reset, l, err);
    curl_slist_free_all(hd);
    if (r != WSYNC_OK) return r;
    *status = rs.status;
    if (rs.stopped) return wsync__hlist_stopped(l, url, err);
    if (rs.status == 404) {
        *answered = 1;
        return WSYNC_OK;
    }
    if (rs.status == 207) {
        wsync_error perr;
        *answered = 1;
        l->dir = dir;
        r = wsync_http_propfind_parse(l->body, l->body_len, wsync__hlist_href, l, &perr);
        if (r != WSYNC_OK) {
            r = wsync_error_set(err, r, "PROPFIND %s (HTTP 207): %s", url, perr.message);
            if (err) err->offset = perr.offset;
        } else if (l->bad) r = wsync_error_set(err, WSYNC_ERR_IO, "PROPFIND %s (HTTP 207): %s", url, l->bad_msg);
        else r = wsync__hlist_stopped(l, url, err);
        return r;
    }
    if (!explicit_ && rs.status != 401) return WSYNC_OK; /* not a WebDAV listing: auto tries JSON */
    *answered = 1;
    if (rs.status == 405 || rs.status == 501 || rs.status == 400 || (rs.status >= 200 && rs.status < 300))
        return wsync_error_set(err, WSYNC_ERR_IO,
                            "PROPFIND %s: HTTP %ld: the server does not list collections with PROPFIND (Apache: "
                            "`Dav On`; nginx: the dav-ext module's `dav_ext_methods PROPFIND`; or list with nginx's "
                            "JSON autoindex: listing json)",
                            url, rs.status);
    return wsync__hfail_resp(h, err, &rq, &rs, 1);
oom:
    curl_slist_free_all(hd);
    return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "listing %s", url);
}

/* Reads one directory's listing (url: the folder's URL, ending in '/';
   dir: its keys' prefix). The method: the option, or (auto) PROPFIND
   first, then the JSON autoindex when the server did not answer PROPFIND;
   the first that works is kept. A 404 lists nothing and sets *missing (not
   yet known to be empty: wsync__hlist_missing decides). probe: the folder
   is a parent read to confirm a 404, and a refusal to list it that shows
   it exists (a GET answered 403 where no other listing is offered) sets
   *unlisted instead of failing, and the method that worked is not kept. */
static wsync_result wsync__hlist_dir(wsync__hlist *l, const char *url, const char *dir, int probe, int *missing,
                                     int *unlisted, wsync_error *err)
{
    wsync__http *h = l->h;
    wsync__hreq rq;
    wsync__hresp rs;
    wsync_result r;
    int method, answered = 0;
    long pf_status = 0;
    *missing = 0;
    *unlisted = 0;
    WSYNC__HLOCK(h);
    method = h->o.listing != WSYNC_HTTP_LISTING_AUTO ? (int)h->o.listing : h->listing_seen;
    WSYNC__HUNLOCK(h);
    if (method != WSYNC_HTTP_LISTING_JSON) {
        r = wsync__hlist_propfind(l, url, dir, method == WSYNC_HTTP_LISTING_PROPFIND, &answered, &pf_status, err);
        if (r == WSYNC_OK && answered && pf_status == 207 && method == 0 && !probe) {
            WSYNC__HLOCK(h);
            h->listing_seen = WSYNC_HTTP_LISTING_PROPFIND;
            WSYNC__HUNLOCK(h);
        }
        if (r == WSYNC_OK && answered && pf_status == 404) *missing = 1;
        if (r != WSYNC_OK || answered) return r;
    }
    memset(&rq, 0, sizeof rq);
    rq.method = "GET";
    rq.url = url;
    rq.what = dir[0] ? dir : "(the root)";
    rq.on_body = wsync__hlist_body;
    rq.on_body_user = l;
    r = wsync__hrequest(h, &rq, &rs, wsync__hlist_reset, l, err);
    if (r == WSYNC_OK && rs.stopped) {
        r = wsync__hlist_stopped(l, url, err);
    } else if (r == WSYNC_OK && rs.status == 404) {
        *missing = 1;
    } else if (r == WSYNC_OK && rs.status == 200) {
        wsync_error perr;
        l->dir = dir;
        r = wsync_http_listing_parse(l->body, l->body_len, wsync__hlist_entry, l, &perr);
        if (r != WSYNC_OK) {
            if (pf_status)
                r = wsync_error_set(err, r,
                                 "listing %s: PROPFIND answered HTTP %ld, not 207, and GET's answer is not nginx's "
                                 "JSON listing: %s (the server must answer PROPFIND (Apache mod_dav, nginx dav-ext) "
                                 "or have `autoindex on; autoindex_format json;`)",
                                 url, pf_status, perr.message);
            else
                r = wsync_error_set(err, r, "GET %s (HTTP 200): %s (is `autoindex on; autoindex_format json;` set?)",
                                 url, perr.message);
            if (err) err->offset = perr.offset;
        } else if ((r = wsync__hlist_stopped(l, url, err)) == WSYNC_OK && method == 0 && !probe) { /* a parent outside the store may be served otherwise */
            WSYNC__HLOCK(h);
            h->listing_seen = WSYNC_HTTP_LISTING_JSON;
            WSYNC__HUNLOCK(h);
        }
    } else if (r == WSYNC_OK && probe && rs.status == 403 &&
               (!pf_status || pf_status == 405 || pf_status == 501 || pf_status == 400)) {
        *unlisted = 1; /* there, and not listed: a server that tells folders there (403) from missing (404) */
    } else if (r == WSYNC_OK && pf_status && (pf_status == 405 || pf_status == 501 || pf_status == 400) &&
               (rs.status == 401 || rs.status == 403 || rs.status == 405)) {
        /* PROPFIND not offered and the folder not served: a server without
           listings (nginx's dav module alone), not a credentials problem */
        r = wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                         "listing %s: the server offers no listing (PROPFIND answered HTTP %ld, a GET of the folder "
                         "HTTP %ld). A chain with HEAD needs none (wsync's publisher writes one); to read a bucket "
                         "without HEAD, enable listings: nginx's dav-ext module (`dav_ext_methods PROPFIND "
                         "OPTIONS;`) or `autoindex on; autoindex_format json;`, Apache `Dav On`",
                         url, pf_status, rs.status);
    } else if (r == WSYNC_OK && !pf_status && rs.status == 403) {
        /* the JSON listing asked for, and the folder not served: no
           autoindex there (nginx with dav-ext alone), not credentials */
        r = wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                         "listing %s: the listing is unavailable: the server offers no JSON listing (a GET of the "
                         "folder answered HTTP 403). nginx lists folders as JSON with `autoindex on; "
                         "autoindex_format json;`; a server that answers PROPFIND (nginx dav-ext, Apache, rclone) "
                         "lists with listing propfind or auto. A chain with HEAD needs no listing",
                         url);
    } else if (r == WSYNC_OK) {
        r = wsync__hfail_resp(h, err, &rq, &rs, 1);
        if (pf_status && err) {
            char m[sizeof err->message];
            snprintf(m, sizeof m, "%s", err->message);
            wsync_error_set(err, r, "listing: PROPFIND %s answered HTTP %ld, not 207, and then %s", url, pf_status, m);
        }
    }
    return r;
}

/* A folder answered 404: empty only when that is known. Its parents are
   read, nearest first, for the name below them: a parent that lists the
   name as a file or not at all, or that is there but refuses to be listed
   (a 403, where the folder asked for got a 404: the server tells them
   apart), makes the folder missing, so it lists nothing. A parent that
   lists it as a folder (a server that answers 404 for folders it has:
   Apache's GET), 404s all the way up to the server's root, or a parent
   that fails otherwise: the listing is unavailable, and never read as an
   empty chain (a publisher would write over what is there). */
static wsync_result wsync__hlist_missing(wsync__hlist *l, const char *url, wsync_error *err)
{
    wsync__http *h = l->h;
    wsync_result r = WSYNC_OK;
    const char *q = strstr(url, "://");
    size_t root, end, start;
    char *u = NULL, *name = NULL;
    int missing = 0, unlisted = 0;
    q = q ? strchr(q + 3, '/') : NULL;
    if (!q) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "listing %s: no path in the URL", url);
    root = (size_t)(q - url);
    end = strlen(url) - 1; /* the folder's trailing '/' */
    if (!(u = (char *)wsync__halloc(&h->a, end + 2)) || !(name = (char *)wsync__halloc(&h->a, end + 2))) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "listing %s", url);
        goto done;
    }
    memcpy(u, url, end + 2);
    while (end > root) {
        const char *why = "";
        size_t bad = 0, nl;
        char saved;
        for (start = end; start > root && u[start - 1] != '/'; start--) {}
        start--; /* the '/' before the name */
        nl = wsync__href_path(u + start, end - start, name, &why, &bad);
        if (nl != (size_t)-1 && (nl < 2 || memchr(name + 1, '/', nl - 1))) why = "an empty segment or an encoded '/'";
        if (nl == (size_t)-1 || nl < 2 || memchr(name + 1, '/', nl - 1)) {
            r = wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "listing %s: the URL's path: %s", url, why);
            goto done;
        }
        saved = u[start + 1];
        u[start + 1] = 0; /* the parent, with its '/' */
        l->probe = name + 1;
        l->probe_len = nl - 1;
        l->probe_found = 0;
        r = wsync__hlist_dir(l, u, "", 1, &missing, &unlisted, err);
        l->probe = NULL;
        u[start + 1] = saved;
        if (r != WSYNC_OK) {
            if (err) {
                char m[sizeof err->message];
                snprintf(m, sizeof m, "%s", err->message);
                wsync_error_set(err, r, "listing %s: HTTP 404, and its parent could not be read to tell a missing "
                             "folder from one the server does not list: %s", url, m);
            }
            goto done;
        }
        if (!missing) {
            if (l->probe_found == 1)
                r = wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                 "listing %s: the server answers HTTP 404 for a folder that is there (its parent "
                                 "lists '%s'): the listing is unavailable (Apache answers a folder's GET with 404: "
                                 "list it with PROPFIND, listing auto or propfind)", url, name + 1);
            goto done; /* not there: an empty listing */
        }
        if (unlisted) goto done;
        end = start;
    }
    r = wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                     "listing %s: the listing is unavailable: HTTP 404 for it and for every folder above it up to "
                     "the server's root, so a missing folder cannot be told from one the server does not list "
                     "(Apache answers a folder's GET with 404: list with PROPFIND, listing auto or propfind; nginx: "
                     "`autoindex on; autoindex_format json;`)",
                     url);
done:
    l->probe = NULL;
    wsync__hfree(&h->a, u);
    wsync__hfree(&h->a, name);
    return r;
}

static wsync_result wsync__http_list(void *user, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    wsync__http *h = (wsync__http *)user;
    wsync__hlist l;
    wsync_result r = WSYNC_OK;
    const char *slash;
    size_t depth_guard = 0;
    char *start;
    wsync__herr_reset(err);
    if (!fn) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "no callback");
    wsync__hlist_init(&l, h, prefix);
    /* start in the deepest directory the prefix names whole */
    slash = strrchr(l.prefix, '/');
    start = wsync__hjoin(&h->a, "", l.prefix, slash ? (size_t)(slash - l.prefix) + 1 : 0, 0);
    if (!start) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "listing");
    l.dirs = (char **)wsync__halloc(&h->a, 64 * sizeof *l.dirs);
    if (!l.dirs) {
        wsync__hfree(&h->a, start);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "listing");
    }
    l.cap_dirs = 64;
    l.dirs[l.n_dirs++] = start;
    while (r == WSYNC_OK && l.n_dirs) {
        char *dir = l.dirs[--l.n_dirs];
        size_t segs = 0;
        const char *q;
        for (q = dir; *q; q++) segs += *q == '/';
        if (segs > WSYNC__HTTP_LIST_DEPTH || ++depth_guard > WSYNC__HTTP_LIST_KEYS) {
            r = wsync_error_set(err, WSYNC_ERR_LIMIT, "listing: directories nested deeper than %d or too many",
                             WSYNC__HTTP_LIST_DEPTH);
        } else {
            char *url = wsync__hurl(h, dir, 1);
            int missing = 0, unlisted = 0;
            if (!url) r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "URL");
            else {
                if (!dir[0]) url[h->base_len + 1] = 0; /* the root: base + "/" */
                r = wsync__hlist_dir(&l, url, dir, 0, &missing, &unlisted, err);
                if (r == WSYNC_OK && missing) r = wsync__hlist_missing(&l, url, err);
                wsync__hfree(&h->a, url);
            }
        }
        wsync__hfree(&h->a, dir);
    }
    return wsync__hlist_finish(&l, r, fn, fn_user);
}

/* ---- open, close ---- */

static void wsync__http_close(void *user)
{
    wsync__http *h = (wsync__http *)user;
    wsync_allocator a;
    unsigned i;
    if (!h) return;
    for (i = 0; i < h->n_pool; i++) curl_easy_cleanup(h->pool[i]);
    if (h->multi) curl_multi_cleanup(h->multi);
    for (i = 0; i < 16; i++) wsync__hfree(&h->a, h->pbuf[i]);
    curl_slist_free_all(h->headers);
    curl_slist_free_all(h->sign_headers);
#if WSYNC__HTTP_THREADS
    pthread_mutex_destroy(&h->mu);
#endif
    a = h->a;
    wsync__hfree(&a, h->sigv4);
    if (h->userpwd) { /* the secret: wiped before it goes back */
        volatile char *v = h->userpwd;
        while (*v) *v++ = 0;
    }
    wsync__hfree(&a, h->userpwd);
    wsync__hfree(&a, h->kprefix);
    wsync__hfree(&a, h->ca_file);
    wsync__hfree(&a, h->base);
    wsync__hfree(&a, h);
    curl_global_cleanup();
}

static int wsync__hcase_eq_prefix(const char *s, const char *lit)
{
    return wsync__hcase_prefix(s, strlen(s), lit);
}

WSYNC_DEF wsync_result wsync_store_http_open(const char *url, const wsync_http_options *opt, wsync_store *out,
                                             wsync_error *err)
{
    wsync__http *h;
    wsync_allocator a;
    size_t n, i, host_at;
    const char *const *hd;
    wsync__herr_reset(err);
    if (!out || !url) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "an http:// or https:// URL is needed");
    memset(out, 0, sizeof *out);
    if (wsync__hcase_eq_prefix(url, "http://")) host_at = 7;
    else if (wsync__hcase_eq_prefix(url, "https://")) host_at = 8;
    else return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "'%s' is not an http:// or https:// URL", url);
    n = strlen(url);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c <= 0x20 || c == 0x7F || c == '?' || c == '#' || c == '\\')
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "store URL '%s' has a space, a control byte, '?', '#' or '\\'", url);
    }
    while (n > host_at && url[n - 1] == '/') n--;
    if (n == host_at || url[host_at] == '/')
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "store URL '%s' has no host", url);
    if (opt && (opt->listing < WSYNC_HTTP_LISTING_AUTO || opt->listing > WSYNC_HTTP_LISTING_PROPFIND))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "store %s: listing %d is not auto (0), json (1) or propfind (2)",
                            url, (int)opt->listing);
    memset(&a, 0, sizeof a);
    if (opt) a = opt->allocator;
    h = (wsync__http *)wsync__halloc(&a, sizeof *h);
    if (!h) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "HTTP store");
    memset(h, 0, sizeof *h);
    h->a = a;
    if (opt) h->o = *opt;
    h->o.headers = NULL;
    if (!h->o.connect_timeout_ms) h->o.connect_timeout_ms = 10000;
    if (!h->o.low_speed_bytes) h->o.low_speed_bytes = 1024;
    if (!h->o.low_speed_seconds) h->o.low_speed_seconds = 30;
    if (!h->o.max_attempts) h->o.max_attempts = 5;
    if (!h->o.backoff_ms) h->o.backoff_ms = 200;
    if (!h->o.max_backoff_ms) h->o.max_backoff_ms = 10000;
    if (!h->o.parallel) h->o.parallel = 4;
    if (h->o.parallel > 16) h->o.parallel = 16;
    if (!h->o.idle_close_ms) h->o.idle_close_ms = 500;
    if (!h->o.parallel_threshold) h->o.parallel_threshold = (uint64_t)64 << 20;
    if (!h->o.part_size) h->o.part_size = (uint64_t)16 << 20;
    if (h->o.part_size > ((uint64_t)1 << 30)) h->o.part_size = (uint64_t)1 << 30;
    h->rng = (uint64_t)(size_t)h ^ (uint64_t)(wsync__hnow() * 1e6) ^ UINT64_C(0x9E3779B97F4A7C15);
    if (!h->rng) h->rng = 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        wsync__hfree(&a, h);
        return wsync_error_set(err, WSYNC_ERR_IO, "%s", "curl_global_init failed");
    }
#if WSYNC__HTTP_THREADS
    pthread_mutex_init(&h->mu, NULL);
#endif
    h->base = (char *)wsync__halloc(&a, n + 1);
    h->multi = curl_multi_init();
    if (!h->base || !h->multi) goto oom;
    h->follow = 1;
    {
        /* the option, else WSYNC_CA_BUNDLE; copied (the caller's string or
           the environment may change after open) */
        const char *ca = opt && opt->ca_file && opt->ca_file[0] ? opt->ca_file : getenv("WSYNC_CA_BUNDLE");
        h->o.ca_file = NULL;
        if (ca && ca[0]) {
            size_t cl = strlen(ca);
            if (!(h->ca_file = (char *)wsync__halloc(&a, cl + 1))) goto oom;
            memcpy(h->ca_file, ca, cl + 1);
        }
    }
    memcpy(h->base, url, n);
    h->base[n] = 0;
    h->base_len = n;
    for (hd = opt ? opt->headers : NULL; hd && *hd; hd++) {
        struct curl_slist *t = curl_slist_append(h->headers, *hd);
        if (!t) goto oom;
        h->headers = t;
    }
    out->user = h;
    out->put = wsync__http_put;
    out->get = wsync__http_get;
    out->head = wsync__http_head;
    out->list = wsync__http_list;
    out->del = wsync__http_del;
    out->close = wsync__http_close;
    return WSYNC_OK;
oom:
    wsync__http_close(h);
    return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "HTTP store");
}

/* ---- S3: the same transfer layer, signed; its own put, list and del >>s3 ---- */

/* A small response body (multipart replies), kept whole. */
typedef struct wsync__s3body {
    char p[16384];
    size_t n;
    int big;
} wsync__s3body;

static int wsync__s3body_add(void *user, const void *p, size_t n)
{
    wsync__s3body *b = (wsync__s3body *)user;
    if (n > sizeof b->p - 1 - b->n) {
        b->big = 1;
        return 1;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static void wsync__s3body_reset(void *user)
{
    wsync__s3body *b = (wsync__s3body *)user;
    b->n = 0;
    b->big = 0;
    b->p[0] = 0;
}

/* url + "?" + the canonical query of the pairs; NULL on OOM. */
static char *wsync__s3_url_q(wsync__http *h, const char *url, const char *const *names, const char *const *values,
                             size_t n)
{
    size_t ul = strlen(url), cap = 64, i, ql;
    char *u;
    for (i = 0; i < n; i++) cap += 3 * (strlen(names[i]) + strlen(values[i] ? values[i] : "")) + 2;
    if (!(u = (char *)wsync__halloc(&h->a, ul + 1 + cap))) return NULL;
    memcpy(u, url, ul);
    u[ul] = '?';
    ql = wsync_s3_query(names, values, n, u + ul + 1, cap);
    if (ql == (size_t)-1) {
        wsync__hfree(&h->a, u);
        return NULL;
    }
    return u;
}

/* One signed request whose answer must be 2xx; the attempts counted for
   the message. */
static wsync_result wsync__s3_call(wsync__http *h, wsync__hreq *rq, wsync__hresp *rs, wsync__s3body *b,
                                   wsync_error *err)
{
    wsync_result r;
    if (b) {
        rq->on_body = wsync__s3body_add;
        rq->on_body_user = b;
    }
    r = wsync__hrequest(h, rq, rs, b ? wsync__s3body_reset : NULL, b, err);
    if (r != WSYNC_OK) return r;
    if (rs->status >= 200 && rs->status < 300 && !rs->stopped) return WSYNC_OK;
    if (rs->stopped) return wsync_error_set(err, WSYNC_ERR_LIMIT, "%s %s: a reply over %lu bytes", rq->method, rq->url,
                                         (unsigned long)sizeof b->p);
    return wsync__hfail_resp(h, err, rq, rs, wsync__hretryable(rs) ? h->o.max_attempts : 1);
}

#define WSYNC__S3_MIN_PART ((uint64_t)5 << 20) /* S3's smallest part (but the last) */
#define WSYNC__S3_MAX_PARTS 10000u

/* Half of part, in whole MiB, not below S3's minimum. */
static uint64_t wsync__s3_half(uint64_t part)
{
    uint64_t half = (part / 2) & ~(((uint64_t)1 << 20) - 1);
    return half < WSYNC__S3_MIN_PART ? WSYNC__S3_MIN_PART : half;
}

/* A body of `size` bytes was answered 413: later uploads keep below it. */
static void wsync__s3_note_limit(wsync__http *h, uint64_t size)
{
    WSYNC__HLOCK(h);
    if (!h->put_limit || size < h->put_limit) h->put_limit = size;
    WSYNC__HUNLOCK(h);
}

/* CreateMultipartUpload, UploadPart for each part, CompleteMultipartUpload
   with the parts' ETags; AbortMultipartUpload when any of it fails (S3
   keeps, and bills, the parts of an upload never completed). A part
   answered 413 is sent again, with the rest, in parts half as large (down
   to S3's 5 MiB); part numbers go on from there (S3 allows parts of any
   size but the smallest for the last). */
static wsync_result wsync__s3_multipart(wsync__http *h, const char *key, const uint8_t *bytes, size_t len,
                                        wsync_error *err)
{
    static const char *n_create[] = {"uploads"}, *n_part[] = {"partNumber", "uploadId"}, *n_done[] = {"uploadId"};
    const char *v[2];
    wsync__s3body *b = NULL;
    wsync__hreq rq;
    wsync__hresp rs;
    wsync_result r = WSYNC_OK;
    char *url = NULL, *u = NULL, *xml = NULL, upload_id[1024], num[24];
    char(*etags)[128] = NULL;
    uint64_t part, lo = 0, limit;
    size_t i, xl = 0, xcap, n_parts = 0, cap_etags = 0;
    int shrunk = 0;
    upload_id[0] = 0;
    WSYNC__HLOCK(h);
    part = h->mp_part;
    limit = h->put_limit;
    WSYNC__HUNLOCK(h);
    /* below a limit learned from an earlier 413 */
    while (limit && part >= limit && part > WSYNC__S3_MIN_PART) part = wsync__s3_half(part);
    if ((uint64_t)len / part >= WSYNC__S3_MAX_PARTS)
        part = ((uint64_t)len / (WSYNC__S3_MAX_PARTS - 1) + ((uint64_t)1 << 20)) & ~(((uint64_t)1 << 20) - 1);
    url = wsync__hurl(h, key, 0);
    b = (wsync__s3body *)wsync__halloc(&h->a, sizeof *b);
    if (!url || !b) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "multipart upload of '%s'", key);
        goto done;
    }
    /* create */
    v[0] = NULL;
    if (!(u = wsync__s3_url_q(h, url, n_create, v, 1))) goto oom;
    memset(&rq, 0, sizeof rq);
    rq.method = "POST";
    rq.url = u;
    rq.what = key;
    rq.body = (const uint8_t *)"";
    if ((r = wsync__s3_call(h, &rq, &rs, b, err)) != WSYNC_OK) goto done;
    if (!wsync__s3_field(b->p, b->n, "UploadId", upload_id, sizeof upload_id) || !upload_id[0]) {
        r = wsync_error_set(err, WSYNC_ERR_IO, "POST %s: HTTP %ld without an <UploadId>", u, rs.status);
        goto done;
    }
    /* the parts, in order */
    while (lo < (uint64_t)len && r == WSYNC_OK) {
        uint64_t n = (uint64_t)len - lo < part ? (uint64_t)len - lo : part;
        if (n_parts >= WSYNC__S3_MAX_PARTS) {
            r = wsync_error_set(err, WSYNC_ERR_LIMIT, "multipart upload of '%s' (%llu bytes): over %u parts of %llu bytes",
                             key, (unsigned long long)len, WSYNC__S3_MAX_PARTS, (unsigned long long)part);
            break;
        }
        if (!wsync__hgrow(&h->a, (void **)&etags, &cap_etags, n_parts, sizeof *etags)) goto oom;
        snprintf(num, sizeof num, "%lu", (unsigned long)(n_parts + 1));
        v[0] = num;
        v[1] = upload_id;
        wsync__hfree(&h->a, u);
        if (!(u = wsync__s3_url_q(h, url, n_part, v, 2))) goto oom;
        memset(&rq, 0, sizeof rq);
        rq.method = "PUT";
        rq.url = u;
        rq.what = key;
        rq.body = bytes + lo;
        rq.body_len = (size_t)n;
        r = wsync__s3_call(h, &rq, &rs, NULL, err);
        if (r != WSYNC_OK && rs.status == 413) {
            char ans[240];
            uint64_t smaller = part;
            wsync__s3_answer(&rs, ans, sizeof ans);
            wsync__s3_note_limit(h, n);
            while (smaller >= n && smaller > WSYNC__S3_MIN_PART) smaller = wsync__s3_half(smaller);
            if (smaller < n && n_parts + ((uint64_t)len - lo + smaller - 1) / smaller <= WSYNC__S3_MAX_PARTS) {
                part = smaller;
                r = WSYNC_OK;
                if (!shrunk++) wsync__hcount(h, &h->st.smaller_parts, 1);
                continue; /* the same part number, smaller */
            }
            r = wsync_error_set(err, WSYNC_ERR_IO,
                             "upload of '%s' (%llu bytes): part %lu (%llu bytes, from byte %llu): HTTP 413 (%s): the "
                             "server takes no request body this large and S3's parts are at least 5 MiB: raise its "
                             "body limit (multipart_part_size or WSYNC_S3_PART_SIZE sets the part size, "
                             "multipart_threshold or WSYNC_S3_MULTIPART_THRESHOLD the largest single PUT); PUT %s",
                             key, (unsigned long long)len, (unsigned long)(n_parts + 1), (unsigned long long)n,
                             (unsigned long long)lo, ans, u);
            break;
        }
        if (r != WSYNC_OK) break;
        if (!rs.etag[0]) r = wsync_error_set(err, WSYNC_ERR_IO, "PUT %s: HTTP %ld without an ETag", u, rs.status);
        else memcpy(etags[n_parts], rs.etag, sizeof etags[n_parts]);
        n_parts++;
        lo += n;
    }
    if (r != WSYNC_OK) goto abort;
    /* complete: the ETags XML-escaped (they carry quotes) */
    xcap = 128 + n_parts * (64 + 6 * 128);
    if (!(xml = (char *)wsync__halloc(&h->a, xcap))) goto oom;
    xl = (size_t)snprintf(xml, xcap, "%s", "<CompleteMultipartUpload>");
    for (i = 0; i < n_parts; i++) {
        const char *e;
        xl += (size_t)snprintf(xml + xl, xcap - xl, "<Part><PartNumber>%lu</PartNumber><ETag>", (unsigned long)(i + 1));
        for (e = etags[i]; *e; e++) {
            const char *ent = *e == '"' ? "&quot;" : *e == '&' ? "&amp;" : *e == '<' ? "&lt;" : *e == '>' ? "&gt;" : NULL;
            if (ent) xl += (size_t)snprintf(xml + xl, xcap - xl, "%s", ent);
            else xml[xl++] = *e;
        }
        xl += (size_t)snprintf(xml + xl, xcap - xl, "%s", "</ETag></Part>");
    }
    xl += (size_t)snprintf(xml + xl, xcap - xl, "%s", "</CompleteMultipartUpload>");
    v[0] = upload_id;
    wsync__hfree(&h->a, u);
    if (!(u = wsync__s3_url_q(h, url, n_done, v, 1))) goto oom;
    memset(&rq, 0, sizeof rq);
    rq.method = "POST";
    rq.url = u;
    rq.what = key;
    rq.body = (const uint8_t *)xml;
    rq.body_len = xl;
    if ((r = wsync__s3_call(h, &rq, &rs, b, err)) == WSYNC_OK) {
        /* S3 may answer 200 and still fail, with an <Error> in the body */
        char code[96], msg[200];
        if (wsync__s3_field(b->p, b->n, "Code", code, sizeof code)) {
            if (!wsync__s3_field(b->p, b->n, "Message", msg, sizeof msg)) msg[0] = 0;
            r = wsync_error_set(err, WSYNC_ERR_IO, "POST %s: S3 %s: %s", u, code, msg);
        }
    }
    if (r == WSYNC_OK) goto done;
abort:
    {
        wsync__hresp rs2;
        v[0] = upload_id;
        wsync__hfree(&h->a, u);
        if ((u = wsync__s3_url_q(h, url, n_done, v, 1)) != NULL) {
            memset(&rq, 0, sizeof rq);
            rq.method = "DELETE";
            rq.url = u;
            rq.what = key;
            rq.attempts = 2;
            (void)wsync__hrequest(h, &rq, &rs2, NULL, NULL, NULL);
        }
    }
    goto done;
oom:
    r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "multipart upload of '%s'", key);
    if (upload_id[0]) goto abort;
done:
    wsync__hfree(&h->a, u);
    wsync__hfree(&h->a, url);
    wsync__hfree(&h->a, b);
    wsync__hfree(&h->a, etags);
    wsync__hfree(&h->a, xml);
    return r;
}

/* One PUT replaces the object whole (S3 writes are atomic per object);
   above the threshold, a multipart upload (also atomic: the object appears
   at CompleteMultipartUpload). A single PUT answered 413 goes again as a
   multipart upload in smaller parts, and so do later objects that large. */
static wsync_result wsync__s3_put(void *user, const char *key, const void *bytes, size_t len, wsync_error *err)
{
    wsync__http *h = (wsync__http *)user;
    wsync__hreq rq;
    wsync__hresp rs;
    wsync_result r;
    uint64_t limit;
    char *url;
    wsync__herr_reset(err);
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!bytes && len) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "no bytes");
    WSYNC__HLOCK(h);
    limit = h->put_limit;
    WSYNC__HUNLOCK(h);
    if ((uint64_t)len > h->mp_threshold || (limit && (uint64_t)len >= limit && (uint64_t)len > WSYNC__S3_MIN_PART))
        return wsync__s3_multipart(h, key, (const uint8_t *)bytes, len, err);
    if (!(url = wsync__hurl(h, key, 0))) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "URL");
    memset(&rq, 0, sizeof rq);
    rq.method = "PUT";
    rq.url = url;
    rq.what = key;
    rq.body = (const uint8_t *)(bytes ? bytes : "");
    rq.body_len = len;
    r = wsync__s3_call(h, &rq, &rs, NULL, err);
    if (r != WSYNC_OK && rs.status == 413) {
        char ans[240];
        wsync__s3_answer(&rs, ans, sizeof ans);
        wsync__s3_note_limit(h, len);
        if ((uint64_t)len > WSYNC__S3_MIN_PART) {
            wsync__hcount(h, &h->st.smaller_parts, 1);
            r = wsync__s3_multipart(h, key, (const uint8_t *)bytes, len, err);
        } else {
            r = wsync_error_set(err, WSYNC_ERR_IO,
                             "upload of '%s': one PUT of %lu bytes: HTTP 413 (%s): the server takes no request body "
                             "this large, and 5 MiB or less cannot be split into parts (S3's minimum part): raise "
                             "its body limit; PUT %s",
                             key, (unsigned long)len, ans, url);
        }
    }
    wsync__hfree(&h->a, url);
    return r;
}

/* S3 answers DELETE of a missing key with 204: a HEAD first keeps the
   store's contract (NOT_FOUND). */
static wsync_result wsync__s3_del(void *user, const char *key, wsync_error *err)
{
    wsync__http *h = (wsync__http *)user;
    wsync__hreq rq;
    wsync__hresp rs;
    wsync_result r;
    char *url;
    if ((r = wsync__http_head(user, key, NULL, err)) != WSYNC_OK) return r;
    if (!(url = wsync__hurl(h, key, 0))) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "URL");
    memset(&rq, 0, sizeof rq);
    rq.method = "DELETE";
    rq.url = url;
    rq.what = key;
    r = wsync__s3_call(h, &rq, &rs, NULL, err);
    wsync__hfree(&h->a, url);
    return r;
}

/* ---- S3 list: ListObjectsV2, page after page >>s3-list ---- */

/* An S3 key: the store's prefix stripped, then kept as a directory's file is. */
static int wsync__s3_list_entry(void *user, const char *key, size_t key_len, uint64_t size)
{
    wsync__hlist *l = (wsync__hlist *)user;
    wsync__http *h = l->h;
    char *k;
    if (key_len != strlen(key) || key_len < h->kprefix_len || memcmp(key, h->kprefix, h->kprefix_len) != 0) return 0;
    if (strncmp(key + h->kprefix_len, l->prefix, l->plen) != 0) return 0; /* not asked for: not copied */
    if (!(k = wsync__hjoin(&h->a, "", key + h->kprefix_len, key_len - h->kprefix_len, 0))) {
        l->oom = 1;
        return 1;
    }
    return wsync__hlist_keep(l, k, size);
}

static wsync_result wsync__s3_list(void *user, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    static const char *names[] = {"list-type", "prefix", "continuation-token"};
    wsync__http *h = (wsync__http *)user;
    wsync__hlist l;
    wsync_result r = WSYNC_OK;
    char token[1024], prev[1024], *full = NULL, *url = NULL;
    const char *v[3];
    size_t pages = 0;
    wsync__herr_reset(err);
    if (!fn) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "no callback");
    wsync__hlist_init(&l, h, prefix);
    l.body_max = WSYNC__S3_PAGE_MAX;
    if (!(full = wsync__hjoin(&h->a, h->kprefix, l.prefix, l.plen, 0)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "listing");
    token[0] = 0;
    do {
        wsync__hreq rq;
        wsync__hresp rs;
        wsync_error perr;
        int truncated = 0;
        v[0] = "2";
        v[1] = full;
        v[2] = token;
        wsync__hfree(&h->a, url);
        if (!(url = wsync__s3_url_q(h, h->base, names, v, token[0] ? 3 : 2))) {
            r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "listing");
            break;
        }
        memset(&rq, 0, sizeof rq);
        rq.method = "GET";
        rq.url = url;
        rq.what = "(the bucket listing)";
        rq.on_body = wsync__hlist_body;
        rq.on_body_user = &l;
        r = wsync__hrequest(h, &rq, &rs, wsync__hlist_reset, &l, err);
        if (r != WSYNC_OK) break;
        if (rs.stopped) {
            r = wsync__hlist_stopped(&l, url, err);
            break;
        }
        if (rs.status == 404) {
            r = wsync_error_set(err, WSYNC_ERR_NO_STORE, "GET %s: HTTP 404: no such bucket", url);
            break;
        }
        if (rs.status != 200) {
            r = wsync__hfail_resp(h, err, &rq, &rs, 1);
            break;
        }
        memcpy(prev, token, sizeof prev);
        r = wsync_s3_listing_parse(l.body, l.body_len, wsync__s3_list_entry, &l, &truncated, token, sizeof token,
                                   &perr);
        if (r != WSYNC_OK) {
            r = wsync_error_set(err, r, "GET %s (HTTP 200): %s", url, perr.message);
            if (err) err->offset = perr.offset;
            break;
        }
        if ((r = wsync__hlist_stopped(&l, url, err)) != WSYNC_OK) break;
        if (truncated && strcmp(prev, token) == 0)
            r = wsync_error_set(err, WSYNC_ERR_IO, "GET %s: the same continuation token twice", url);
        else if (!truncated) token[0] = 0;
        else if (++pages > WSYNC__HTTP_LIST_KEYS / 1000)
            r = wsync_error_set(err, WSYNC_ERR_LIMIT, "listing: over %u pages", WSYNC__HTTP_LIST_KEYS / 1000);
    } while (r == WSYNC_OK && token[0]);
    wsync__hfree(&h->a, url);
    wsync__hfree(&h->a, full);
    return wsync__hlist_finish(&l, r, fn, fn_user);
}

/* ---- S3 open ---- */

static const char *wsync__s3_pick(const char *opt, const char *name, const char *name2)
{
    const char *e;
    if (opt && *opt) return opt;
    if ((e = getenv(name)) != NULL && *e) return e;
    if (name2 && (e = getenv(name2)) != NULL && *e) return e;
    return NULL;
}

/* A size from the environment: digits, then nothing (bytes) or K, M, G
   (KiB, MiB, GiB; "KiB", "MB" and the like too). 0 when unset; -1 when
   it is not a size. */
static int wsync__s3_env_size(const char *name, uint64_t *out)
{
    const char *e = getenv(name), *q;
    uint64_t v = 0, mul = 1;
    *out = 0;
    if (!e || !*e) return 0;
    for (q = e; *q >= '0' && *q <= '9'; q++) {
        if (v > (UINT64_C(1) << 40)) return -1;
        v = v * 10 + (uint64_t)(*q - '0');
    }
    if (q == e) return -1;
    if (*q == 'k' || *q == 'K') mul = (uint64_t)1 << 10;
    else if (*q == 'm' || *q == 'M') mul = (uint64_t)1 << 20;
    else if (*q == 'g' || *q == 'G') mul = (uint64_t)1 << 30;
    if (mul != 1) {
        q++;
        if (*q == 'i') q++;
        if (*q == 'B') q++;
    } else if (*q == 'B') q++;
    if (*q || v == 0) return -1;
    *out = v * mul;
    return 1;
}

static char *wsync__s3_dup(const wsync_allocator *a, const char *s)
{
    size_t n = strlen(s);
    char *d = (char *)wsync__halloc(a, n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

WSYNC_DEF wsync_result wsync_store_s3_open(const char *url, const wsync_s3_options *opt, wsync_store *out,
                                           wsync_error *err)
{
    const char *region, *endpoint, *key_id, *secret, *token, *bucket, *slash, *e;
    char *base = NULL, def_endpoint[128], hdr[2200];
    size_t blen, plen, i, elen;
    wsync__http *h;
    wsync_allocator a;
    wsync_result r;
    wsync_error kerr;
    struct curl_slist *t;
    wsync__herr_reset(err);
    if (!out || !url) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "an s3://bucket/prefix URL is needed");
    memset(out, 0, sizeof *out);
    if (!wsync__hcase_eq_prefix(url, "s3://"))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "'%s' is not an s3://bucket/prefix URL", url);
    bucket = url + 5;
    slash = strchr(bucket, '/');
    blen = slash ? (size_t)(slash - bucket) : strlen(bucket);
    if (blen == 0 || blen > 255)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "store URL '%s' has no bucket", url);
    for (i = 0; i < blen; i++) {
        char c = bucket[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
              c == '_'))
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "bucket name in '%s' has a byte other than letters, digits, '-', '.', '_'", url);
    }
    /* the prefix: trimmed of '/', a valid key itself */
    e = slash ? slash : bucket + blen;
    while (*e == '/') e++;
    plen = strlen(e);
    while (plen && e[plen - 1] == '/') plen--;
    if (plen) {
        char tmp[1100];
        if (plen > 1000) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "store URL '%s': prefix too long", url);
        memcpy(tmp, e, plen);
        tmp[plen] = 0;
        if (wsync_store_key_check(tmp, &kerr) != WSYNC_OK)
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "store URL '%s': prefix: %s", url, kerr.message);
    }
    region = wsync__s3_pick(opt ? opt->region : NULL, "AWS_REGION", "AWS_DEFAULT_REGION");
    if (!region) region = "us-east-1";
    for (i = 0; region[i]; i++)
        if (!((region[i] >= 'a' && region[i] <= 'z') || (region[i] >= '0' && region[i] <= '9') || region[i] == '-') ||
            i > 40)
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "region '%s' is not like us-east-1", region);
    endpoint = wsync__s3_pick(opt ? opt->endpoint : NULL, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
    if (!endpoint) {
        snprintf(def_endpoint, sizeof def_endpoint, "https://s3.%s.amazonaws.com", region);
        endpoint = def_endpoint;
    }
    key_id = wsync__s3_pick(opt ? opt->access_key_id : NULL, "AWS_ACCESS_KEY_ID", NULL);
    secret = wsync__s3_pick(opt ? opt->secret_access_key : NULL, "AWS_SECRET_ACCESS_KEY", NULL);
    token = wsync__s3_pick(opt ? opt->session_token : NULL, "AWS_SESSION_TOKEN", NULL);
    if (!key_id || !secret)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                            "store %s: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", url);
    if (strchr(key_id, ':') || strlen(key_id) > 256 || strlen(secret) > 256 || (token && strlen(token) > 2048))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "store %s: a malformed access key, secret or token", url);
    for (e = token; e && *e; e++)
        if ((unsigned char)*e < 0x20 || *e == 0x7F)
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "store %s: a control byte in the session token", url);
    /* the bucket's URL: endpoint/bucket; the transfer layer checks the rest */
    elen = strlen(endpoint);
    while (elen && endpoint[elen - 1] == '/') elen--;
    memset(&a, 0, sizeof a);
    if (opt) a = opt->http.allocator;
    if (!(base = (char *)wsync__halloc(&a, elen + blen + 2)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "S3 store");
    memcpy(base, endpoint, elen);
    base[elen] = '/';
    memcpy(base + elen + 1, bucket, blen);
    base[elen + 1 + blen] = 0;
    r = wsync_store_http_open(base, opt ? &opt->http : NULL, out, err);
    wsync__hfree(&a, base);
    if (r != WSYNC_OK) {
        if (err) {
            char m[sizeof err->message];
            snprintf(m, sizeof m, "%s", err->message);
            wsync_error_set(err, r, "S3 endpoint '%.*s': %s", (int)elen, endpoint, m);
        }
        return r;
    }
    h = (wsync__http *)out->user;
    h->follow = 1;
    if (!h->ca_file) {
        /* the AWS tools' variable, after wsync's own */
        const char *ca = getenv("AWS_CA_BUNDLE");
        if (ca && ca[0] && !(h->ca_file = wsync__s3_dup(&h->a, ca))) goto oom;
    }
    {
        /* the options, else WSYNC_S3_MULTIPART_THRESHOLD and WSYNC_S3_PART_SIZE, else 64 and 16 MiB */
        uint64_t env_threshold, env_part;
        if (wsync__s3_env_size("WSYNC_S3_MULTIPART_THRESHOLD", &env_threshold) < 0 ||
            wsync__s3_env_size("WSYNC_S3_PART_SIZE", &env_part) < 0) {
            wsync__http_close(h);
            memset(out, 0, sizeof *out);
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "store %s: WSYNC_S3_MULTIPART_THRESHOLD or WSYNC_S3_PART_SIZE is not a size (bytes, "
                                "or a number with K, M or G: 8M)", url);
        }
        h->mp_threshold = opt && opt->multipart_threshold ? opt->multipart_threshold
                          : env_threshold                 ? env_threshold
                                                          : (uint64_t)64 << 20;
        h->mp_part = opt && opt->multipart_part_size ? opt->multipart_part_size
                     : env_part                      ? env_part
                                                     : (uint64_t)16 << 20;
    }
    if (h->mp_part < ((uint64_t)5 << 20)) h->mp_part = (uint64_t)5 << 20;
    if (h->mp_part > ((uint64_t)5 << 30)) h->mp_part = (uint64_t)5 << 30;
    snprintf(hdr, sizeof hdr, "aws:amz:%s:s3", region);
    h->sigv4 = wsync__s3_dup(&h->a, hdr);
    h->kprefix = (char *)wsync__halloc(&h->a, plen + 2);
    h->userpwd = (char *)wsync__halloc(&h->a, strlen(key_id) + strlen(secret) + 2);
    if (!h->sigv4 || !h->kprefix || !h->userpwd) goto oom;
    {
        const char *ps = slash ? slash : bucket + blen;
        while (*ps == '/') ps++;
        memcpy(h->kprefix, ps, plen);
        if (plen) h->kprefix[plen++] = '/';
        h->kprefix[plen] = 0;
        h->kprefix_len = plen;
    }
    snprintf(h->userpwd, strlen(key_id) + strlen(secret) + 2, "%s:%s", key_id, secret);
    if (!(t = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD"))) goto oom;
    h->sign_headers = t;
    if (token) {
        snprintf(hdr, sizeof hdr, "x-amz-security-token: %s", token);
        if (!(t = curl_slist_append(h->sign_headers, hdr))) goto oom;
        h->sign_headers = t;
    }
    out->put = wsync__s3_put;
    out->list = wsync__s3_list;
    out->del = wsync__s3_del;
    return WSYNC_OK;
oom:
    wsync__http_close(h);
    memset(out, 0, sizeof *out);
    return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "S3 store");
}

WSYNC_DEF int wsync_store_http_stats(const wsync_store *s, wsync_http_stats *out)
{
    wsync__http *h;
    if (out) memset(out, 0, sizeof *out);
    if (!s || (s->put != wsync__http_put && s->put != wsync__s3_put) || !s->user) return 0;
    h = (wsync__http *)s->user;
    WSYNC__HLOCK(h);
    if (out) *out = h->st;
    WSYNC__HUNLOCK(h);
    return 1;
}

WSYNC_DEF unsigned wsync_store_http_idle(const wsync_store *s)
{
    wsync__http *h;
    CURL *idle[WSYNC__HTTP_POOL_MAX];
    CURLM *m = NULL;
    unsigned n, i;
    if (!s || (s->put != wsync__http_put && s->put != wsync__s3_put) || !s->user) return 0;
    h = (wsync__http *)s->user;
    WSYNC__HLOCK(h);
    n = h->n_pool;
    for (i = 0; i < n; i++) idle[i] = h->pool[i];
    h->n_pool = 0;
    if (h->multi && !h->multi_busy) {
        m = h->multi;
        h->multi_busy = 1; /* no download takes it while it is replaced */
    }
    WSYNC__HUNLOCK(h);
    for (i = 0; i < n; i++) curl_easy_cleanup(idle[i]);
    if (m) {
        curl_multi_cleanup(m);
        m = curl_multi_init(); /* NULL: downloads make their own */
        WSYNC__HLOCK(h);
        h->multi = m;
        h->multi_busy = 0;
        WSYNC__HUNLOCK(h);
        n++;
    }
    return n;
}

#endif /* libcurl */

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_HTTP_IMPLEMENTATION */
