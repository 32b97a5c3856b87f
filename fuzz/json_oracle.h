/* json_oracle.h - the fuzzers' own JSON, written apart from wsync.h's
   tokenizer so that the two can disagree: a strict RFC 8259 recognizer and
   a string decoder (fz_json_string_to). Shared by fuzz_st_parse.c (the safetensors header),
   fuzz_chain_head.c (HEAD) and fuzz_listing.c (nginx's JSON listing);
   each harness says how strict its reader is with the flags. Include after the C headers (everything is static). */
#ifndef WSYNC_FUZZ_JSON_ORACLE_H
#define WSYNC_FUZZ_JSON_ORACLE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__GNUC__) || defined(__clang__)
#define FZJ_UNUSED __attribute__((unused))
#else
#define FZJ_UNUSED
#endif

#define FZ_JSON_UTF8 1u  /* strings must be valid UTF-8 (RFC 8259 8.1) */
#define FZ_JSON_PAIRS 2u /* a \u surrogate escape must be one of a pair */

FZJ_UNUSED static size_t fz_ws(const uint8_t *p, size_t n, size_t i)
{
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) i++;
    return i;
}

FZJ_UNUSED static int fz_is_digit(const uint8_t *p, size_t n, size_t i)
{
    return i < n && p[i] >= '0' && p[i] <= '9';
}

FZJ_UNUSED static int fz_hex4(const uint8_t *s, uint32_t *out)
{
    uint32_t v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        uint8_t c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* Length of one UTF-8 sequence at p[0] (RFC 3629: no overlongs, no
   surrogates, <= U+10FFFF), 0 if invalid. */
FZJ_UNUSED static size_t fz_utf8_seq(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    size_t need, k;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1, cp = c & 0x1Fu, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, cp = c & 0x0Fu, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, cp = c & 0x07u, min = 0x10000;
    else return 0;
    if (need >= n) return 0;
    for (k = 1; k <= need; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return need + 1;
}

/* The string at p[i] == '"': the index after its closing quote, 0 if it is
   not a valid string or (when want is not NULL) does not decode to exactly
   want[0..len). With out (and want NULL): its bytes decoded into out (room
   for the string's raw length; NUL-terminated) and their count in *out_len. */
FZJ_UNUSED static size_t fz_json_string_to(const uint8_t *p, size_t n, size_t i, unsigned flags, const char *want,
                                           size_t len, char *out, size_t *out_len)
{
    size_t o = 0;
    if (i >= n || p[i] != '"') return 0;
    i++;
    for (;;) {
        uint8_t c, enc[4];
        size_t k, nb = 1;
        uint32_t cp;
        if (i >= n) return 0;
        c = p[i];
        if (c == '"') break;
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (n - i < 2) return 0;
            switch (p[i + 1]) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = 8; break;
            case 'f': cp = 12; break;
            case 'n': cp = 10; break;
            case 'r': cp = 13; break;
            case 't': cp = 9; break;
            case 'u':
                if (n - i < 6 || !fz_hex4(p + i + 2, &cp)) return 0;
                if ((flags & FZ_JSON_PAIRS) && cp >= 0xDC00 && cp <= 0xDFFF) return 0;
                if ((flags & FZ_JSON_PAIRS) && cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (n - i < 12 || p[i + 6] != '\\' || p[i + 7] != 'u' || !fz_hex4(p + i + 8, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return 0;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
                i += 4;
                break;
            default:
                return 0;
            }
            i += 2;
            if (cp < 0x80) enc[0] = (uint8_t)cp;
            else if (cp < 0x800) {
                enc[0] = (uint8_t)(0xC0 | (cp >> 6));
                enc[1] = (uint8_t)(0x80 | (cp & 0x3F));
                nb = 2;
            } else if (cp < 0x10000) {
                enc[0] = (uint8_t)(0xE0 | (cp >> 12));
                enc[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                enc[2] = (uint8_t)(0x80 | (cp & 0x3F));
                nb = 3;
            } else {
                enc[0] = (uint8_t)(0xF0 | (cp >> 18));
                enc[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
                enc[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                enc[3] = (uint8_t)(0x80 | (cp & 0x3F));
                nb = 4;
            }
        } else if (c >= 0x80 && (flags & FZ_JSON_UTF8)) {
            nb = fz_utf8_seq(p + i, n - i);
            if (!nb) return 0;
            for (k = 0; k < nb; k++) enc[k] = p[i + k];
            i += nb;
        } else {
            enc[0] = c;
            i++;
        }
        for (k = 0; k < nb; k++, o++) {
            if (want && (o >= len || (uint8_t)want[o] != enc[k])) return 0;
            if (out) out[o] = (char)enc[k];
        }
    }
    if (out) {
        out[o] = 0;
        *out_len = o;
    }
    return (!want || o == len) ? i + 1 : 0;
}

FZJ_UNUSED static size_t fz_json_string(const uint8_t *p, size_t n, size_t i, unsigned flags, const char *want,
                                        size_t len)
{
    return fz_json_string_to(p, n, i, flags, want, len, NULL, NULL);
}

/* The value at p[i] (no whitespace before it), `depth` its level, none
   deeper than max_depth: the index after it, 0 if invalid. */
FZJ_UNUSED static size_t fz_json_value(const uint8_t *p, size_t n, size_t i, unsigned depth, unsigned max_depth,
                                       unsigned flags)
{
    if (i >= n || depth > max_depth) return 0;
    if (p[i] == '"') return fz_json_string(p, n, i, flags, NULL, 0);
    if (p[i] == '{' || p[i] == '[') {
        int obj = p[i] == '{';
        uint8_t close = obj ? '}' : ']';
        i = fz_ws(p, n, i + 1);
        if (i < n && p[i] == close) return i + 1;
        for (;;) {
            if (obj) {
                i = fz_json_string(p, n, i, flags, NULL, 0);
                if (!i) return 0;
                i = fz_ws(p, n, i);
                if (i >= n || p[i] != ':') return 0;
                i = fz_ws(p, n, i + 1);
            }
            i = fz_json_value(p, n, i, depth + 1, max_depth, flags);
            if (!i) return 0;
            i = fz_ws(p, n, i);
            if (i < n && p[i] == ',') {
                i = fz_ws(p, n, i + 1);
                continue;
            }
            if (i < n && p[i] == close) return i + 1;
            return 0;
        }
    }
    if (n - i >= 4 && memcmp(p + i, "true", 4) == 0) return i + 4;
    if (n - i >= 5 && memcmp(p + i, "false", 5) == 0) return i + 5;
    if (n - i >= 4 && memcmp(p + i, "null", 4) == 0) return i + 4;
    if (p[i] == '-') i++;
    if (!fz_is_digit(p, n, i)) return 0;
    if (p[i] == '0') i++;
    else
        while (fz_is_digit(p, n, i)) i++;
    if (i < n && p[i] == '.') {
        i++;
        if (!fz_is_digit(p, n, i)) return 0;
        while (fz_is_digit(p, n, i)) i++;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-')) i++;
        if (!fz_is_digit(p, n, i)) return 0;
        while (fz_is_digit(p, n, i)) i++;
    }
    return i;
}

/* A JSON text: one value with whitespace around it and nothing else; with
   open set, the value must start with that byte ('{': an object). */
FZJ_UNUSED static int fz_json_text_ok(const uint8_t *p, size_t n, int open, unsigned max_depth, unsigned flags)
{
    size_t i = fz_ws(p, n, 0);
    if (i >= n || (open && p[i] != open)) return 0;
    i = fz_json_value(p, n, i, 0, max_depth, flags);
    return i != 0 && fz_ws(p, n, i) == n;
}

#endif
