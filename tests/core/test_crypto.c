/* The hashes and signatures behind signed chains (wsync.h, >>crypto):
   - SHA-256 and SHA-512 on the FIPS 180-4 / NIST examples (the empty
     message, "abc", the 448-bit and 896-bit messages, a million 'a'),
     BLAKE2b (512 and 256-bit output) on the same messages, each also fed
     in pieces of every split and with final called twice;
   - Ed25519: RFC 8032 section 7.1 tests 1, 2 and 3 (keys from seeds, the
     signatures byte for byte, verified), and TEST 1024's key with messages
     of 63 to 1023 bytes signed by an independent implementation (Python's
     cryptography package, the signatures pasted below);
   - refusals: a flipped bit anywhere in the signature, a flipped message
     bit, S + L in place of S (S >= L, the malleable twin), another key, a
     public key or R that is no curve point, a non-canonical encoding, keys
     and R of small order; a secret key whose public half is wrong signs
     as the seed's key;
   - HMAC-SHA256 on RFC 4231's cases, wsync_ct_equal, wsync_random_bytes. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void unhex(const char *s, uint8_t *out, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned v = 0;
        sscanf(s + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

static int eq_hex(const uint8_t *got, const char *want)
{
    uint8_t w[128];
    size_t n = strlen(want) / 2;
    unhex(want, w, n);
    return memcmp(got, w, n) == 0;
}

typedef struct hash_case {
    const char *name;
    const char *sha256, *sha512, *b2b512, *b2b256;
} hash_case;

static const char *g_msg448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
static const char *g_msg896 =
    "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";

static const hash_case g_hash[5] = {
    {"empty", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a"
     "81a538327af927da3e",
     "786a02f742015903c6c6fd852552d272912f4740e15847618a86e217f71f5419d25e1031afee585313896444934eb04b903a685b1448b75"
     "5d56f701afe9be2ce",
     "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8"},
    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
     "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce8"
     "0e2a9ac94fa54ca49f",
     "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925"
     "ab92386edd4009923",
     "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319"},
    {"448 bits", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
     "204a8fc6dda82f0a0ced7beb8e08a41657c16ef468b228a8279be331a703c33596fd15c13b1b07f9aa1d3bea57789ca031ad85c7a71dd7"
     "0354ec631238ca3445",
     "7285ff3e8bd768d69be62b3bf18765a325917fa9744ac2f582a20850bc2b1141ed1b3e4528595acc90772bdf2d37dc8a47130b44f33a02e"
     "8730e5ad8e166e888",
     "5f7a93da9c5621583f22e49e8e91a40cbba37536622235a380f434b9f68e49c4"},
    {"896 bits", "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
     "8e959b75dae313da8cf4f72814fc143f8f7779c6eb9f7fa17299aeadb6889018501d289e4900f7e4331b99dec4b5433ac7d329eeb6dd26"
     "545e96e55b874be909",
     "ce741ac5930fe346811175c5227bb7bfcd47f42612fae46c0809514f9e0e3a11ee1773287147cdeaeedff50709aa716341fe65240f4ad67"
     "77d6bfaf9726e5e52",
     "90a0bcf5e5a67ac1578c2754617994cfc248109275a809a0721feebd1e918738"},
    {"a million 'a'", "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
     "e718483d0ce769644e2e42c7bc15b4638e1f98b13b2044285632a803afa973ebde0ff244877ea60a4cb0432ce577c31beb009c5c2c49aa"
     "2e4eadb217ad8cc09b",
     "98fb3efb7206fd19ebf69b6f312cf7b64e3b94dbe1a17107913975a793f177e1d077609d7fba363cbba00d05f7aa4e4fa8715d6428104c0"
     "a75643b0ff3fd3eaf",
     "0741850f36cba4259628355d1073e24ddb9ca0e1bfac36fd39ae5dc2101e23a4"},
};

static const uint8_t *hash_msg(int i, size_t *len, uint8_t *million)
{
    switch (i) {
    case 0: *len = 0; return (const uint8_t *)"";
    case 1: *len = 3; return (const uint8_t *)"abc";
    case 2: *len = strlen(g_msg448); return (const uint8_t *)g_msg448;
    case 3: *len = strlen(g_msg896); return (const uint8_t *)g_msg896;
    default: *len = 1000000; return million;
    }
}

static void test_hash_vectors(uint8_t *million)
{
    int i;
    for (i = 0; i < 5; i++) {
        size_t len;
        const uint8_t *m = hash_msg(i, &len, million);
        uint8_t o[64];
        char name[64];
        snprintf(name, sizeof name, "hash vectors: %s", g_hash[i].name);
        TEST_BEGIN(name);
        wsync_sha256(m, len, o);
        CHECK_MSG(eq_hex(o, g_hash[i].sha256), "SHA-256 of %s", g_hash[i].name);
        wsync_sha512(m, len, o);
        CHECK_MSG(eq_hex(o, g_hash[i].sha512), "SHA-512 of %s", g_hash[i].name);
        wsync_blake2b(m, len, o, 64);
        CHECK_MSG(eq_hex(o, g_hash[i].b2b512), "BLAKE2b-512 of %s", g_hash[i].name);
        wsync_blake2b(m, len, o, 32);
        CHECK_MSG(eq_hex(o, g_hash[i].b2b256), "BLAKE2b-256 of %s", g_hash[i].name);
        TEST_END();
    }
}

/* Every split of a 300-byte message into two pieces, and a million 'a'
   fed 1 to 200 bytes at a time, give the one-call result; final twice
   gives the same. */
static void test_hash_pieces(uint8_t *million)
{
    uint8_t m[300], one[3][64], got[64], again[64];
    size_t i, cut;
    int bad[3] = {0, 0, 0};
    TEST_BEGIN("hashes in pieces: every split, odd chunks, final twice");
    for (i = 0; i < sizeof m; i++) m[i] = (uint8_t)(i * 131 + 7);
    wsync_sha256(m, sizeof m, one[0]);
    wsync_sha512(m, sizeof m, one[1]);
    wsync_blake2b(m, sizeof m, one[2], 64);
    for (cut = 0; cut <= sizeof m; cut++) {
        wsync_sha256_state a;
        wsync_sha512_state b;
        wsync_blake2b_state c;
        wsync_sha256_init(&a);
        wsync_sha256_update(&a, m, cut);
        wsync_sha256_update(&a, m + cut, sizeof m - cut);
        wsync_sha256_final(&a, got);
        wsync_sha256_final(&a, again);
        bad[0] += memcmp(got, one[0], 32) != 0 || memcmp(again, one[0], 32) != 0;
        wsync_sha512_init(&b);
        wsync_sha512_update(&b, m, cut);
        wsync_sha512_update(&b, m + cut, sizeof m - cut);
        wsync_sha512_final(&b, got);
        wsync_sha512_final(&b, again);
        bad[1] += memcmp(got, one[1], 64) != 0 || memcmp(again, one[1], 64) != 0;
        wsync_blake2b_init(&c, 64);
        wsync_blake2b_update(&c, m, cut);
        wsync_blake2b_update(&c, m + cut, sizeof m - cut);
        wsync_blake2b_final(&c, got);
        wsync_blake2b_final(&c, again);
        bad[2] += memcmp(got, one[2], 64) != 0 || memcmp(again, one[2], 64) != 0;
    }
    CHECK_EQ_INT(bad[0], 0);
    CHECK_EQ_INT(bad[1], 0);
    CHECK_EQ_INT(bad[2], 0);
    {
        wsync_sha256_state a;
        wsync_sha512_state b;
        wsync_blake2b_state c;
        size_t off = 0, step = 1;
        wsync_sha256_init(&a);
        wsync_sha512_init(&b);
        wsync_blake2b_init(&c, 32);
        while (off < 1000000) {
            size_t k = 1000000 - off < step ? 1000000 - off : step;
            wsync_sha256_update(&a, million + off, k);
            wsync_sha512_update(&b, million + off, k);
            wsync_blake2b_update(&c, million + off, k);
            off += k;
            step = step % 200 + 1;
        }
        wsync_sha256_final(&a, got);
        CHECK(eq_hex(got, g_hash[4].sha256));
        wsync_sha512_final(&b, got);
        CHECK(eq_hex(got, g_hash[4].sha512));
        wsync_blake2b_final(&c, got);
        CHECK(eq_hex(got, g_hash[4].b2b256));
    }
    TEST_END();
}

/* Every path BLAKE2b has here (portable, AVX2) on the vectors and on every
   length 0..700 of one message, against each other. */
static void test_blake2b_paths(uint8_t *million)
{
    static const wsync_impl impls[3] = {WSYNC_IMPL_AUTO, WSYNC_IMPL_SCALAR, WSYNC_IMPL_AVX2};
    uint8_t m[700], ref[64], got[64];
    int i, k, bad = 0, paths = 0;
    size_t n;
    TEST_BEGIN("BLAKE2b: every path on the vectors and on 701 lengths, equal");
    for (n = 0; n < sizeof m; n++) m[n] = (uint8_t)(n * 89 + 3);
    for (k = 0; k < 3; k++) {
        int ok = 0;
        wsync_blake2b_using(impls[k], "abc", 3, got, 64, &ok);
        if (!ok) continue;
        paths++;
        CHECK_MSG(eq_hex(got, g_hash[1].b2b512), "%s", wsync_impl_name(impls[k]));
        wsync_blake2b_using(impls[k], million, 1000000, got, 32, &ok);
        CHECK_MSG(eq_hex(got, g_hash[4].b2b256), "%s", wsync_impl_name(impls[k]));
        for (n = 0; n <= sizeof m; n++) {
            wsync_blake2b_using(WSYNC_IMPL_SCALAR, m, n, ref, 64, &ok);
            wsync_blake2b_using(impls[k], m, n, got, 64, &ok);
            bad += memcmp(ref, got, 64) != 0;
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(paths >= 2);
    for (i = 0; i < 1; i++) {
        int ok = 1;
        wsync_blake2b_using(WSYNC_IMPL_NEON, m, 10, got, 32, &ok);
        CHECK_EQ_INT(ok, 0); /* a path BLAKE2b does not have */
    }
    TEST_END();
}

typedef struct ed_case {
    const char *name, *seed, *pub, *msg, *sig;
} ed_case;

/* RFC 8032 section 7.1, tests 1 to 3. */
static const ed_case g_rfc[3] = {
    {"RFC 8032 test 1 (empty message)", "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24"
     "655141438e7a100b"},
    {"RFC 8032 test 2 (one byte)", "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aee"
     "b00d291612bb0c00"},
    {"RFC 8032 test 3 (two bytes)", "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28d"
     "c027beceea1ec40a"},
};

/* TEST 1024's key (RFC 8032 7.1) over messages m[i] = 7i + 3 (mod 256) of
   n bytes, signed by Python's cryptography 48.0 (OpenSSL): lengths around
   SHA-512's 128-byte blocks (the hash also takes R and A, 64 bytes). */
static const char *g_t1024_seed = "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5";
static const char *g_t1024_pub = "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e";
static const struct {
    size_t n;
    const char *sig;
} g_ext[8] = {
    {1023, "fbb5917a6059e4d3fd7ffed86740a66431a36225b2f27ac89fc662e625ac4e406c1b1b1830afd61f89bca731059963c2d48bacf6b1a"
           "5868ddbdde90cecc59409"},
    {63, "af7934a34f2323bc1a99771fb6a44dabff89b924072dfc0a7f01fe92ae283819025924de789c8f1caddb5e8e086bda93799ce7f7c1565"
         "c0e9f8723fc9c19b403"},
    {64, "41b20763b3aa25bad944584759d2ee9592d82da6b236fcac571fc60598a3c0a01f12d22e2de53684ae9b63276fdd5d8797179662cde6a"
         "63cb7b4c79472ee630f"},
    {65, "d51ce73786a9367d8c97e07b13c9aba353d48d880f235dabddebbf29011f1d649a323e79d1050fb79db49b2c94fec7a6c4d02fdc5f82b"
         "69a5ed5679b01510108"},
    {127, "56bb48f5c0751618b47fe15e371ac642edfebeca702c097d40ca97b673518d2756c9bd2128cdc5d310a86c84f2576b4f025451656ac7"
          "9d5709c7ba7171ea7e01"},
    {128, "f252ba619cee9594c95a0d14a0125221a35aeade4d2b8fd4348230665ab703a7a41866e4cb7f471888790b20c73edbc6029cd6f6212f"
          "a1f86981025c4d0e2204"},
    {129, "03639d54d4d4244bb826f77e356ffcae629af28eba4a3b51616061b163705f03bd74a7fc63bab89813afad6c172165b0f1fcf79a0ad0"
          "b6682d8f8e9a98ee850b"},
    {200, "2bd8b1e2f3422cabd04c077fae87f984845b79361db573b0a63ac26c01dfa81d288804c911578af1b29c4401edb38e7a6c00902729a4"
          "7d2ac92854bdccd5650e"},
};

static void test_ed_rfc(void)
{
    int i;
    for (i = 0; i < 3; i++) {
        uint8_t seed[32], pub[32], sec[64], msg[2], sig[64];
        size_t ml = strlen(g_rfc[i].msg) / 2;
        TEST_BEGIN(g_rfc[i].name);
        unhex(g_rfc[i].seed, seed, 32);
        unhex(g_rfc[i].msg, msg, ml);
        wsync_ed25519_keypair(seed, pub, sec);
        CHECK_MSG(eq_hex(pub, g_rfc[i].pub), "public key of %s", g_rfc[i].name);
        CHECK(memcmp(sec, seed, 32) == 0 && memcmp(sec + 32, pub, 32) == 0);
        wsync_ed25519_sign(sec, msg, ml, sig);
        CHECK_MSG(eq_hex(sig, g_rfc[i].sig), "signature of %s", g_rfc[i].name);
        CHECK_EQ_INT(wsync_ed25519_verify(pub, msg, ml, sig), 1);
        TEST_END();
    }
}

static void ext_msg(uint8_t *m, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) m[i] = (uint8_t)((i * 7 + 3) & 0xff);
}

static void test_ed_ext(void)
{
    uint8_t seed[32], pub[32], sec[64], sig[64], m[1023];
    int i;
    TEST_BEGIN("Ed25519: TEST 1024's key, 63 to 1023 bytes, against another implementation");
    unhex(g_t1024_seed, seed, 32);
    wsync_ed25519_keypair(seed, pub, sec);
    CHECK(eq_hex(pub, g_t1024_pub));
    for (i = 0; i < 8; i++) {
        ext_msg(m, g_ext[i].n);
        wsync_ed25519_sign(sec, m, g_ext[i].n, sig);
        CHECK_MSG(eq_hex(sig, g_ext[i].sig), "signature of %u bytes", (unsigned)g_ext[i].n);
        CHECK_MSG(wsync_ed25519_verify(pub, m, g_ext[i].n, sig) == 1, "%u bytes", (unsigned)g_ext[i].n);
    }
    TEST_END();
}

/* s = s + L (32 bytes little-endian; s + L < 2^256 for s < L). */
static void add_l(uint8_t s[32])
{
    static const uint8_t l[32] = {0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7,
                                  0xa2, 0xde, 0xf9, 0xde, 0x14, 0,    0,    0,    0,    0,    0,
                                  0,    0,    0,    0,    0,    0,    0,    0,    0,    0x10};
    unsigned c = 0;
    int i;
    for (i = 0; i < 32; i++) {
        c += (unsigned)s[i] + l[i];
        s[i] = (uint8_t)c;
        c >>= 8;
    }
}

static void test_ed_refusals(void)
{
    uint8_t seed[32], pub[32], sec[64], sig[64], bad[64], key[32], m[200], other[32], osec[64];
    int bit, flips = 0;
    size_t i;
    unhex(g_t1024_seed, seed, 32);
    wsync_ed25519_keypair(seed, pub, sec);
    ext_msg(m, sizeof m);
    wsync_ed25519_sign(sec, m, sizeof m, sig);

    TEST_BEGIN("Ed25519 refuses: every flipped signature bit");
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, sig), 1);
    for (bit = 0; bit < 512; bit++) {
        memcpy(bad, sig, 64);
        bad[bit >> 3] ^= (uint8_t)(1u << (bit & 7));
        flips += wsync_ed25519_verify(pub, m, sizeof m, bad);
    }
    CHECK_EQ_INT(flips, 0);
    TEST_END();

    TEST_BEGIN("Ed25519 refuses: a flipped message bit, a shorter message");
    for (flips = 0, bit = 0; bit < 64; bit++) {
        m[(bit * 29) % sizeof m] ^= (uint8_t)(1u << (bit & 7));
        flips += wsync_ed25519_verify(pub, m, sizeof m, sig);
        m[(bit * 29) % sizeof m] ^= (uint8_t)(1u << (bit & 7));
    }
    CHECK_EQ_INT(flips, 0);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m - 1, sig), 0);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, sig), 1);
    TEST_END();

    TEST_BEGIN("Ed25519 refuses: S + L in place of S (S >= L), S = L");
    memcpy(bad, sig, 64);
    add_l(bad + 32);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, bad), 0);
    memset(bad + 32, 0, 32);
    add_l(bad + 32);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, bad), 0);
    memset(bad + 32, 0xff, 32);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, bad), 0);
    TEST_END();

    TEST_BEGIN("Ed25519 refuses: another key, and a signature of another key");
    unhex(g_rfc[0].seed, key, 32);
    wsync_ed25519_keypair(key, other, osec);
    CHECK_EQ_INT(wsync_ed25519_verify(other, m, sizeof m, sig), 0);
    wsync_ed25519_sign(osec, m, sizeof m, bad);
    CHECK_EQ_INT(wsync_ed25519_verify(other, m, sizeof m, bad), 1);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, bad), 0);
    TEST_END();

    TEST_BEGIN("Ed25519 refuses: keys and R that are no point, not canonical, of small order");
    /* y = 2: (y^2 - 1)/(d y^2 + 1) is not a square, no x */
    memset(key, 0, 32);
    key[0] = 2;
    CHECK_EQ_INT(wsync_ed25519_verify(key, m, sizeof m, sig), 0);
    memcpy(bad, sig, 64);
    memcpy(bad, key, 32);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, bad), 0);
    /* the identity (0, 1), of order 1; (0, -1) of order 2 */
    memset(key, 0, 32);
    key[0] = 1;
    CHECK_EQ_INT(wsync_ed25519_verify(key, m, sizeof m, sig), 0);
    memcpy(bad, sig, 64);
    memcpy(bad, key, 32);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, bad), 0);
    memset(key, 0xff, 32);
    key[0] = 0xec;
    key[31] = 0x7f; /* p - 1 */
    CHECK_EQ_INT(wsync_ed25519_verify(key, m, sizeof m, sig), 0);
    /* y = 1 written as p + 1 (not canonical), and x = 0 with its sign bit set */
    memset(key, 0xff, 32);
    key[0] = 0xee;
    key[31] = 0x7f;
    CHECK_EQ_INT(wsync_ed25519_verify(key, m, sizeof m, sig), 0);
    memset(key, 0, 32);
    key[0] = 1;
    key[31] = 0x80;
    CHECK_EQ_INT(wsync_ed25519_verify(key, m, sizeof m, sig), 0);
    /* the real key with its sign bit flipped: another point, not the signer */
    memcpy(key, pub, 32);
    key[31] ^= 0x80;
    CHECK_EQ_INT(wsync_ed25519_verify(key, m, sizeof m, sig), 0);
    /* NULL arguments */
    CHECK_EQ_INT(wsync_ed25519_verify(NULL, m, sizeof m, sig), 0);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, NULL, 3, sig), 0);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, NULL), 0);
    TEST_END();

    TEST_BEGIN("Ed25519: a secret key with a wrong public half signs as its seed's key");
    memcpy(osec, sec, 64);
    osec[40] ^= 0x55;
    wsync_ed25519_sign(osec, m, sizeof m, bad);
    CHECK(memcmp(bad, sig, 64) == 0);
    CHECK_EQ_INT(wsync_ed25519_verify(pub, m, sizeof m, bad), 1);
    TEST_END();

    TEST_BEGIN("Ed25519: 32 seeds, each signing and verifying its own");
    for (flips = 0, i = 0; i < 32; i++) {
        size_t k;
        for (k = 0; k < 32; k++) seed[k] = (uint8_t)(i * 37 + k * 11 + 1);
        wsync_ed25519_keypair(seed, pub, sec);
        wsync_ed25519_sign(sec, m, i * 5, sig);
        flips += wsync_ed25519_verify(pub, m, i * 5, sig) != 1;
        flips += wsync_ed25519_verify(pub, m, i * 5 + 1, sig) != 0;
    }
    CHECK_EQ_INT(flips, 0);
    TEST_END();
}

/* HMAC-SHA256: RFC 4231 test cases 1, 2, 3 and 6 (a 131-byte key, hashed
   first), whole and in pieces of every split; wsync_ct_equal on equal and
   one-bit-different buffers; wsync_random_bytes fills (two draws differ). */
static void test_hmac(void)
{
    static const struct { const char *key_hex; size_t key_len; uint8_t key_fill; const char *msg; size_t msg_len; uint8_t msg_fill; const char *mac; } v[] = {
        {NULL, 20, 0x0b, "Hi There", 8, 0, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"4a656665", 4, 0, "what do ya want for nothing?", 28, 0, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {NULL, 20, 0xaa, NULL, 50, 0xdd, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {NULL, 131, 0xaa, "Test Using Larger Than Block-Size Key - Hash Key First", 54, 0, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
    };
    size_t i, cut;
    TEST_BEGIN("hmac_sha256_rfc4231");
    for (i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint8_t key[131], msg[64], want[32], got[32];
        if (v[i].key_hex) unhex(v[i].key_hex, key, v[i].key_len);
        else memset(key, v[i].key_fill, v[i].key_len);
        if (v[i].msg) memcpy(msg, v[i].msg, v[i].msg_len);
        else memset(msg, v[i].msg_fill, v[i].msg_len);
        unhex(v[i].mac, want, 32);
        wsync_hmac_sha256(key, v[i].key_len, msg, v[i].msg_len, got);
        CHECK(memcmp(got, want, 32) == 0);
        for (cut = 0; cut <= v[i].msg_len; cut++) {
            wsync_hmac_sha256_state s;
            wsync_hmac_sha256_init(&s, key, v[i].key_len);
            wsync_hmac_sha256_update(&s, msg, cut);
            wsync_hmac_sha256_update(&s, msg + cut, v[i].msg_len - cut);
            wsync_hmac_sha256_final(&s, got);
            CHECK(memcmp(got, want, 32) == 0);
            wsync_hmac_sha256_final(&s, got); /* final leaves the state as it was */
            CHECK(memcmp(got, want, 32) == 0);
        }
    }
    TEST_END();
    TEST_BEGIN("ct_equal_and_random");
    {
        uint8_t a[48], b[48], c[48];
        size_t bit;
        CHECK_EQ_INT(wsync_random_bytes(a, sizeof a), WSYNC_OK);
        CHECK_EQ_INT(wsync_random_bytes(c, sizeof c), WSYNC_OK);
        CHECK(memcmp(a, c, sizeof a) != 0);
        memcpy(b, a, sizeof a);
        CHECK_EQ_INT(wsync_ct_equal(a, b, sizeof a), 1);
        CHECK_EQ_INT(wsync_ct_equal(a, b, 0), 1);
        for (bit = 0; bit < 8 * sizeof a; bit += 13) {
            b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            CHECK_EQ_INT(wsync_ct_equal(a, b, sizeof a), 0);
            b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
    }
    TEST_END();
}

int main(void)
{
    uint8_t *million = (uint8_t *)malloc(1000000);
    if (!million) return 1;
    memset(million, 'a', 1000000);
    test_hash_vectors(million);
    test_hash_pieces(million);
    test_blake2b_paths(million);
    test_ed_rfc();
    test_ed_ext();
    test_ed_refusals();
    test_hmac();
    free(million);
    return check_summary();
}
