/* make_chain_head_seeds.c - writes the seed corpus of fuzz_chain_head.c and
   its hand-made regression inputs.

   usage (from the repository root):
     cc -std=c99 -O2 -I. -o build/make_chain_head_seeds fuzz/make_chain_head_seeds.c -lm -lpthread
     build/make_chain_head_seeds fuzz/corpus/chain_head [fuzz/data/chain_head]

   Into the corpus directory:
     seed_ok_*    HEADs from wsync_chain_head_format: one anchor; anchors and
                  deltas; gaps between steps and deltas over several steps;
                  steps up to WSYNC_STEP_MAX and sizes up to UINT64_MAX;
                  each encoding and none; and hand-written texts the
                  formatter cannot produce, each with its "check" recomputed:
                  unknown keys (top level and in entries, any JSON value),
                  keys in another order (deltas before anchors), other
                  whitespace, an unknown encoding name
     seed_bad_*   the same truncated, with a bit flipped, with a wrong
                  digest; and hand-written texts, digest recomputed, that
                  break one rule each (a missing or repeated key, "check"
                  not last, an anchor with a base, a delta whose base is not
                  before it, steps above the limit, repeated or descending
                  in a list, no anchor,
                  HEAD's step or anchor not the newest, numbers with a sign,
                  fraction or leading zero, escapes where the reader takes
                  plain strings, bytes after the object, not an object)
   Into the data directory, when given (edge_*): the limits on both sides:
   unknown values nested exactly as deep as the reader skips and one level
   more, encoding names of 15 and 16 characters, the largest u64 and one
   more, WSYNC_STEP_MAX and one more, whitespace around "check" and the
   object.
   The output is deterministic: rerunning it rewrites identical files. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_written;

static void die(const char *what)
{
    fprintf(stderr, "make_chain_head_seeds: %s\n", what);
    exit(1);
}

/* Writes DIR/NAME.json, after checking that the parser takes the *_ok_*
   texts and refuses the *_bad_* ones (so every seed is what it says). */
static void write_file(const char *dir, const char *name, const char *p, size_t n)
{
    char path[1024];
    FILE *f;
    wsync_chain_info c;
    wsync_error err;
    wsync_result r;
    int want_ok = strstr(name, "_ok_") != NULL;
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    f = fopen(path, "wb");
    if (!f) die(path);
    if (n && fwrite(p, 1, n, f) != n) die(path);
    if (fclose(f) != 0) die(path);
    n_written++;
    r = wsync_chain_head_parse(n ? p : NULL, n, NULL, &c, &err);
    if ((r == WSYNC_OK) != want_ok) {
        fprintf(stderr, "make_chain_head_seeds: %s: %s\n", path, r == WSYNC_OK ? "accepted" : err.message);
        die("a seed is not what its name says");
    }
    if (r == WSYNC_OK) wsync_chain_info_free(&c);
}

/* ---- text helpers ---- */

typedef struct text {
    char *p;
    size_t len;
} text;

static text text_dup(const char *p, size_t len)
{
    text t;
    t.p = (char *)malloc(len + 1);
    if (!t.p) die("out of memory");
    memcpy(t.p, p, len);
    t.p[len] = 0;
    t.len = len;
    return t;
}

/* t with `ins` inserted at byte `at` */
static text text_insert(text t, size_t at, const char *ins)
{
    size_t il = strlen(ins);
    text o;
    o.p = (char *)malloc(t.len + il + 1);
    if (!o.p) die("out of memory");
    memcpy(o.p, t.p, at);
    memcpy(o.p + at, ins, il);
    memcpy(o.p + at + il, t.p + at, t.len - at + 1);
    o.len = t.len + il;
    return o;
}

/* offset of the last occurrence of s in t */
static size_t text_rfind(text t, const char *s)
{
    size_t sl = strlen(s), i;
    for (i = t.len - sl + 1; i-- > 0;)
        if (memcmp(t.p + i, s, sl) == 0) return i;
    die("text_rfind: not found");
    return 0;
}

/* Recomputes the "check" digest: wsync_digest of every byte before the last
   "check" key's opening quote, 16 lowercase hex digits in its value. */
static void recheck(text t)
{
    static const char hexd[] = "0123456789abcdef";
    size_t at = text_rfind(t, "\"check\""), v;
    uint64_t d = wsync_digest(t.p, at);
    int k;
    v = at + 7;
    while (t.p[v] != '"') v++; /* the value's opening quote, after ':' */
    v++;
    for (k = 15; k >= 0; k--, d >>= 4) t.p[v + (size_t)k] = hexd[d & 15];
}

/* body + "check":"<digest of body>" + tail (which closes the object) */
static text with_check(const char *body, const char *tail)
{
    size_t bl = strlen(body);
    char buf[16384];
    text t;
    if (bl + 64 + strlen(tail) > sizeof buf) die("with_check: too long");
    snprintf(buf, sizeof buf, "%s\"check\":\"0000000000000000\"%s", body, tail);
    t = text_dup(buf, strlen(buf));
    recheck(t);
    return t;
}

/* ---- chains through wsync_chain_head_format ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* anchors[na] and deltas[nd] as (step, base) pairs; the newest step and the
   newest anchor are worked out; sizes and digests are pseudo-random. */
static text chain_text(const uint64_t *anchors, size_t na, const uint64_t (*deltas)[2], size_t nd,
                       wsync_encoding enc, int extreme)
{
    wsync_chain_info c;
    wsync_error err;
    char *t;
    size_t len, i;
    text out;
    memset(&c, 0, sizeof c);
    c.entries = (wsync_chain_entry *)calloc(na + nd, sizeof *c.entries);
    if (!c.entries) die("out of memory");
    for (i = 0; i < na + nd; i++) {
        wsync_chain_entry *e = &c.entries[i];
        e->kind = i < na ? WSYNC_CHAIN_ANCHOR : WSYNC_CHAIN_DELTA;
        e->step = i < na ? anchors[i] : deltas[i - na][0];
        e->base = i < na ? anchors[i] : deltas[i - na][1];
        e->bytes = extreme ? UINT64_MAX - i : 1000 + rnd() % 100000000u;
        e->has_digests = 1;
        e->digest = extreme ? (i ? UINT64_MAX : 0) : rnd();
        e->state = extreme ? UINT64_MAX - i : rnd();
        if (e->step > c.head_step) c.head_step = e->step;
        if (i < na) c.anchor_step = e->step;
    }
    c.n_entries = na + nd;
    c.has_head = 1;
    c.head_state = extreme ? UINT64_MAX : rnd();
    c.encoding = enc;
    if (wsync_chain_head_format(&c, &t, &len, &err) != WSYNC_OK) die(err.message);
    out = text_dup(t, len);
    free(t);
    free(c.entries);
    return out;
}

static void ok_and_broken(const char *dir, const char *name, text t, int broken)
{
    char nm[256];
    text b;
    snprintf(nm, sizeof nm, "seed_ok_%s", name);
    write_file(dir, nm, t.p, t.len);
    if (!broken) return;
    /* truncated: half, and without the closing brace */
    snprintf(nm, sizeof nm, "seed_bad_%s_truncated_half", name);
    write_file(dir, nm, t.p, t.len / 2);
    snprintf(nm, sizeof nm, "seed_bad_%s_truncated_brace", name);
    write_file(dir, nm, t.p, t.len - 2);
    /* one bit flipped in the middle (the digest no longer matches) */
    b = text_dup(t.p, t.len);
    b.p[b.len / 2] ^= 0x04;
    snprintf(nm, sizeof nm, "seed_bad_%s_flipped", name);
    write_file(dir, nm, b.p, b.len);
    free(b.p);
    /* the digest one off */
    b = text_dup(t.p, t.len);
    b.p[text_rfind(b, "\"}") - 1] ^= 0x01;
    snprintf(nm, sizeof nm, "seed_bad_%s_check", name);
    write_file(dir, nm, b.p, b.len);
    free(b.p);
}

static void formatted_seeds(const char *dir)
{
    static const uint64_t a1[] = {0};
    static const uint64_t a2[] = {0, 20};
    static const uint64_t d2[][2] = {{1, 0}, {2, 1}, {3, 2}, {21, 20}, {22, 21}, {23, 22}};
    static const uint64_t a3[] = {100, 200};
    static const uint64_t d3[][2] = {{101, 100}, {105, 101}, {110, 105}, {150, 100}, {201, 200}, {299, 201}};
    static const uint64_t a4[] = {WSYNC_STEP_MAX - 10};
    static const uint64_t d4[][2] = {{WSYNC_STEP_MAX - 5, WSYNC_STEP_MAX - 10}, {WSYNC_STEP_MAX, WSYNC_STEP_MAX - 5}};
    static const uint64_t a5[] = {40, 50};
    static const uint64_t d5[][2] = {{30, 0}, {41, 40}, {45, 41}, {49, 45}};
    static const uint64_t a6[] = {123456789};
    static const uint64_t d6[][2] = {{123456790, 3}, {1234567890123ull, 123456790}};
    text t;

    t = chain_text(a1, 1, NULL, 0, (wsync_encoding)0, 0);
    ok_and_broken(dir, "one_anchor", t, 1);
    free(t.p);
    t = chain_text(a1, 1, NULL, 0, WSYNC_ENCODING_PACKED, 1);
    ok_and_broken(dir, "one_anchor_extreme", t, 0);
    free(t.p);
    t = chain_text(a2, 2, d2, 6, WSYNC_ENCODING_PACKED, 0);
    ok_and_broken(dir, "anchors_deltas", t, 1);
    free(t.p);
    t = chain_text(a3, 2, d3, 6, WSYNC_ENCODING_TRL_V1, 0);
    ok_and_broken(dir, "gaps", t, 0);
    free(t.p);
    t = chain_text(a4, 1, d4, 2, WSYNC_ENCODING_TRL_V3, 1);
    ok_and_broken(dir, "step_max", t, 1);
    free(t.p);
    /* the newest anchor is HEAD's step; a delta older than every anchor */
    t = chain_text(a5, 2, d5, 4, WSYNC_ENCODING_PACKED_MAX, 0);
    ok_and_broken(dir, "anchor_is_head", t, 0);
    free(t.p);
    t = chain_text(a6, 1, d6, 2, (wsync_encoding)0, 0);
    ok_and_broken(dir, "big_steps", t, 0);
    free(t.p);
}

/* ---- hand-written texts ---- */

#define H_TOP(step, anchor) "{\"format\":\"wsync-chain\",\"version\":1,\"step\":" step ",\"anchor\":" anchor ",\"state\":\"00000000000000a5\""
#define H_A(step) "{\"step\":" step ",\"bytes\":702,\"digest\":\"0123456789abcdef\",\"state\":\"fedcba9876543210\"}"
#define H_D(step, base) "{\"step\":" step ",\"base\":" base ",\"bytes\":99,\"digest\":\"00000000deadbeef\",\"state\":\"0000000000000001\"}"
#define H_OK H_TOP("3", "2") ",\"anchors\":[" H_A("2") "],\"deltas\":[" H_D("3", "2") "],"

static void hand(const char *dir, const char *name, const char *body, const char *tail)
{
    text t = with_check(body, tail);
    write_file(dir, name, t.p, t.len);
    free(t.p);
}

static void handwritten_seeds(const char *dir)
{
    text t, u;
    size_t at;

    /* accepted */
    hand(dir, "seed_ok_minimal", H_OK, "}");
    hand(dir, "seed_ok_unknown_top_keys",
         H_TOP("3", "2") ",\"writer\":\"trainer-7\",\"anchors\":[" H_A("2") "],\"deltas\":[" H_D("3", "2")
                         "],\n\"x-extra\":{\"a\":[1,-2.5e+3,0.125,true,false,null,\"s\\u00e9\\n\\\"q\\\"\"],\"b\":{},\"c\":[]},"
                         "\"x-num\":-0,",
         "}");
    hand(dir, "seed_ok_unknown_entry_keys",
         H_TOP("3", "2") ",\"anchors\":[{\"note\":\"first\",\"step\":2,\"bytes\":702,\"digest\":\"0123456789abcdef\","
                         "\"state\":\"fedcba9876543210\",\"x\":{\"k\":[1,{\"z\":null}]}}],\"deltas\":[{\"step\":3,\"base\":2,"
                         "\"bytes\":99,\"digest\":\"00000000deadbeef\",\"state\":\"0000000000000001\",\"t\":1e-3}],",
         "}");
    hand(dir, "seed_ok_reordered",
         " \r\n\t{ \"deltas\" : [ " H_D("6", "5") " ,\t" H_D("7", "5") " ] ,\r\n \"anchors\" : [ " H_A("1") " , " H_A("5")
         " ] , \"state\" : \"0000000000000000\" , \"anchor\" : 5 , \"encoding\" : \"trl-v3\" , \"step\" : 7 , "
         "\"version\" : 1 , \"format\" : \"wsync-chain\" ,\n\t ",
         "} \n\t");
    hand(dir, "seed_ok_unknown_encoding", H_TOP("3", "2") ",\"encoding\":\"zstd-v9\",\"anchors\":[" H_A("2") "],\"deltas\":["
         H_D("3", "2") "],", "}");
    hand(dir, "seed_ok_utf8_in_unknown", H_OK "\"comment\":\"\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\",", "}");
    hand(dir, "seed_ok_empty_deltas", H_TOP("9", "9") ",\"anchors\":[" H_A("9") "],\"deltas\":[],", "}");

    /* the formatter's text with an unknown key before "check" and one in an
       entry: what a later version might write */
    {
        static const uint64_t a[] = {10};
        static const uint64_t d[][2] = {{11, 10}, {12, 11}};
        t = chain_text(a, 1, d, 2, WSYNC_ENCODING_PACKED, 0);
        at = text_rfind(t, "\"check\"");
        u = text_insert(t, at, "\"retention\":{\"retain\":40,\"anchor_every\":20},\n");
        free(t.p);
        at = text_rfind(u, "\n{") + 2;
        t = text_insert(u, at, "\"encoding\":\"packed\",\"elements\":[596049920,1203],");
        free(u.p);
        recheck(t);
        write_file(dir, "seed_ok_formatted_plus_unknown", t.p, t.len);
        free(t.p);
    }

    /* rejected, digest right: one rule broken each */
    hand(dir, "seed_bad_check_not_last", H_OK, ",\"x\":1}");
    hand(dir, "seed_bad_missing_anchors", H_TOP("3", "3") ",\"deltas\":[" H_D("3", "2") "],", "}");
    hand(dir, "seed_bad_duplicate_step_key", H_TOP("3", "2") ",\"step\":3,\"anchors\":[" H_A("2") "],\"deltas\":["
         H_D("3", "2") "],", "}");
    hand(dir, "seed_bad_duplicate_deltas", H_OK "\"deltas\":[],", "}");
    hand(dir, "seed_bad_anchor_with_base", H_TOP("2", "2") ",\"anchors\":[{\"step\":2,\"base\":2,\"bytes\":1,"
         "\"digest\":\"0123456789abcdef\",\"state\":\"fedcba9876543210\"}],\"deltas\":[],", "}");
    hand(dir, "seed_bad_delta_base_is_step", H_TOP("3", "2") ",\"anchors\":[" H_A("2") "],\"deltas\":[" H_D("3", "3")
         "],", "}");
    hand(dir, "seed_bad_same_step_twice", H_TOP("3", "2") ",\"anchors\":[" H_A("2") "],\"deltas\":[" H_D("3", "2") ","
         H_D("3", "1") "],", "}");
    hand(dir, "seed_bad_deltas_descending", H_TOP("3", "1") ",\"anchors\":[" H_A("1") "],\"deltas\":[" H_D("3", "2") ","
         H_D("2", "1") "],", "}");
    hand(dir, "seed_bad_anchors_descending", H_TOP("2", "2") ",\"anchors\":[" H_A("2") "," H_A("1") "],\"deltas\":[],", "}");
    hand(dir, "seed_bad_no_anchor", H_TOP("3", "2") ",\"anchors\":[],\"deltas\":[" H_D("3", "2") "],", "}");
    hand(dir, "seed_bad_head_not_newest", H_TOP("4", "2") ",\"anchors\":[" H_A("2") "],\"deltas\":[" H_D("3", "2")
         "],", "}");
    hand(dir, "seed_bad_anchor_not_newest", H_TOP("3", "1") ",\"anchors\":[" H_A("1") "," H_A("2") "],\"deltas\":["
         H_D("3", "2") "],", "}");
    hand(dir, "seed_bad_step_over_max", H_TOP("1000000000000000", "1000000000000000") ",\"anchors\":["
         H_A("1000000000000000") "],\"deltas\":[],", "}");
    hand(dir, "seed_bad_leading_zero", H_TOP("3", "02") ",\"anchors\":[" H_A("2") "],\"deltas\":[" H_D("3", "2") "],", "}");
    hand(dir, "seed_bad_float_step", H_TOP("3.0", "2") ",\"anchors\":[" H_A("2") "],\"deltas\":[" H_D("3", "2") "],", "}");
    hand(dir, "seed_bad_negative_base", H_TOP("3", "2") ",\"anchors\":[" H_A("2") "],\"deltas\":[" H_D("3", "-2") "],", "}");
    hand(dir, "seed_bad_escaped_key", H_TOP("3", "2") ",\"anchors\":[" H_A("2") "],\"delt\\u0061s\":[" H_D("3", "2")
         "],", "}");
    hand(dir, "seed_bad_uppercase_digest", H_TOP("2", "2") ",\"anchors\":[{\"step\":2,\"bytes\":1,"
         "\"digest\":\"0123456789ABCDEF\",\"state\":\"fedcba9876543210\"}],\"deltas\":[],", "}");
    hand(dir, "seed_bad_version_2", "{\"format\":\"wsync-chain\",\"version\":2,\"step\":2,\"anchor\":2,"
         "\"state\":\"00000000000000a5\",\"anchors\":[" H_A("2") "],\"deltas\":[],", "}");
    hand(dir, "seed_bad_entry_not_object", H_TOP("2", "2") ",\"anchors\":[" H_A("2") ",2],\"deltas\":[],", "}");
    hand(dir, "seed_bad_bytes_after", H_OK, "}{}");
    write_file(dir, "seed_bad_empty_object", "{}", 2);
    write_file(dir, "seed_bad_empty", "", 0);
    write_file(dir, "seed_bad_array", "[1,2]", 5);
}

/* ---- edges, for the data directory ---- */

static void nested(char *o, size_t cap, const char *prefix, unsigned levels, const char *suffix)
{
    size_t k = 0;
    unsigned i;
    k += (size_t)snprintf(o + k, cap - k, "%s", prefix);
    for (i = 0; i + 1 < levels; i++) o[k++] = '[';
    o[k++] = '0';
    for (i = 0; i + 1 < levels; i++) o[k++] = ']';
    snprintf(o + k, cap - k, "%s", suffix);
}

static void edge_seeds(const char *dir)
{
    char body[4096];
    /* an unknown top-level value of 16 levels (the reader's limit) and 17 */
    nested(body, sizeof body, H_OK "\"deep\":", 16, ",");
    hand(dir, "edge_ok_top_unknown_depth_16", body, "}");
    nested(body, sizeof body, H_OK "\"deep\":", 17, ",");
    hand(dir, "edge_bad_top_unknown_depth_17", body, "}");
    /* in an entry, whose values are one level down: 15 and 16 */
    nested(body, sizeof body, H_TOP("2", "2") ",\"anchors\":[{\"deep\":", 15,
           ",\"step\":2,\"bytes\":1,\"digest\":\"0123456789abcdef\",\"state\":\"fedcba9876543210\"}],\"deltas\":[],");
    hand(dir, "edge_ok_entry_unknown_depth_15", body, "}");
    nested(body, sizeof body, H_TOP("2", "2") ",\"anchors\":[{\"deep\":", 16,
           ",\"step\":2,\"bytes\":1,\"digest\":\"0123456789abcdef\",\"state\":\"fedcba9876543210\"}],\"deltas\":[],");
    hand(dir, "edge_bad_entry_unknown_depth_16", body, "}");
    /* encoding names: 15 characters are read (unknown: 0), 16 are refused */
    hand(dir, "edge_ok_encoding_15_chars", H_OK "\"encoding\":\"abcdefghijklmno\",", "}");
    hand(dir, "edge_bad_encoding_16_chars", H_OK "\"encoding\":\"abcdefghijklmnop\",", "}");
    /* the largest u64 in bytes, and one more there and in HEAD's step */
    hand(dir, "edge_ok_bytes_u64_max", H_TOP("3", "2") ",\"anchors\":[" H_A("2")
         "],\"deltas\":[{\"step\":3,\"base\":2,\"bytes\":18446744073709551615,\"digest\":\"ffffffffffffffff\","
         "\"state\":\"0000000000000000\"}],", "}");
    hand(dir, "edge_bad_step_u64_overflow", H_TOP("18446744073709551616", "2") ",\"anchors\":[" H_A("2") "],\"deltas\":["
         H_D("3", "2") "],", "}");
    hand(dir, "edge_bad_bytes_u64_overflow", H_TOP("3", "2") ",\"anchors\":[" H_A("2")
         "],\"deltas\":[{\"step\":3,\"base\":2,\"bytes\":18446744073709551616,\"digest\":\"ffffffffffffffff\","
         "\"state\":\"0000000000000000\"}],", "}");
    /* WSYNC_STEP_MAX, and one more */
    hand(dir, "edge_ok_step_max", H_TOP("999999999999999", "999999999999999") ",\"anchors\":[" H_A("999999999999999")
         "],\"deltas\":[],", "}");
    hand(dir, "edge_bad_delta_step_over_max", H_TOP("1000000000000000", "2") ",\"anchors\":[" H_A("2")
         "],\"deltas\":[" H_D("1000000000000000", "2") "],", "}");
    /* whitespace before "check" is covered by the digest; around the object is fine */
    hand(dir, "edge_ok_ws_before_check", "\n " H_OK " \t\r\n ", "} \r\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s CORPUS_DIR [DATA_DIR]\n", argv[0]);
        return 2;
    }
    formatted_seeds(argv[1]);
    handwritten_seeds(argv[1]);
    if (argc == 3) edge_seeds(argv[2]);
    printf("make_chain_head_seeds: wrote %d files\n", n_written);
    return 0;
}
