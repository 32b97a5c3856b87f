/* Base layer: results, error detail, dtypes, checked sizes, file mapping. */
#define WSYNC_IMPLEMENTATION
#include "wsync.h"
#include "check.h"

#include <stdio.h>

static void test_results(void)
{
    int r;
    TEST_BEGIN("every result code has a distinct name and a description");
    for (r = 0; r < WSYNC_RESULT_COUNT; r++) {
        int s;
        CHECK(strcmp(wsync_result_str((wsync_result)r), "unknown result") != 0);
        CHECK(strncmp(wsync_result_name((wsync_result)r), "WSYNC_", 6) == 0);
        for (s = 0; s < r; s++)
            CHECK(strcmp(wsync_result_name((wsync_result)r), wsync_result_name((wsync_result)s)) != 0);
    }
    CHECK_EQ_STR(wsync_result_name(WSYNC_OK), "WSYNC_OK");
    CHECK_EQ_STR(wsync_result_name(WSYNC_ERR_TRUNCATED), "WSYNC_ERR_TRUNCATED");
    CHECK_EQ_STR(wsync_result_str((wsync_result)9999), "unknown result");
    CHECK_EQ_INT(WSYNC_OK, 0);
    TEST_END();
}

static void test_error_detail(void)
{
    /* A size mismatch names the tensor, the byte offset of its key and the rule. */
    static const char hdr[] = "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}";
    uint8_t buf[256];
    wsync_st_file f;
    wsync_error err;
    size_t n = sizeof hdr - 1;
    memset(buf, 0, sizeof buf);
    buf[0] = (uint8_t)n;
    memcpy(buf + 8, hdr, n);
    TEST_BEGIN("error detail names tensor, offset and rule");
    CHECK_EQ_INT(wsync_st_parse(buf, 8 + n + 4, NULL, &f, &err), WSYNC_ERR_SIZE_MISMATCH);
    CHECK_EQ_INT(err.code, WSYNC_ERR_SIZE_MISMATCH);
    CHECK_EQ_STR(err.tensor, "weight");
    CHECK_EQ_U64(err.offset, 9); /* the '"' opening "weight" */
    CHECK_MSG(strstr(err.message, "weight") && strstr(err.message, "byte 9") &&
                  strstr(err.message, "8 bytes") && strstr(err.message, "span 4"),
              "%s", err.message);
    CHECK(f.tensors == NULL && f.n_tensors == 0);
    TEST_END();

    TEST_BEGIN("a NULL error pointer is allowed");
    CHECK_EQ_INT(wsync_st_parse(buf, 3, NULL, &f, NULL), WSYNC_ERR_TRUNCATED);
    TEST_END();

    TEST_BEGIN("error detail is reset on success");
    err.code = WSYNC_ERR_IO;
    buf[0] = 2;
    memcpy(buf + 8, "{}", 2);
    CHECK_EQ_INT(wsync_st_parse(buf, 10, NULL, &f, &err), WSYNC_OK);
    CHECK_EQ_INT(err.code, WSYNC_OK);
    wsync_st_free(&f);
    TEST_END();
}

/* When a header has two problems, the root cause is reported. */
static void test_error_precedence(void)
{
    static const char dup[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                              "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    static const char meta[] = "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"},"
                               "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    static const char syntax[] = "{\"a\":{\"dtype\":\"XX\",\"shape\":[1],\"data_offsets\":[0,1]},}";
    uint8_t buf[512];
    wsync_st_file f;
    wsync_error err;
    size_t n;
    TEST_BEGIN("a duplicate name is reported before the overlap it makes");
    memset(buf, 0, sizeof buf);
    n = sizeof dup - 1;
    buf[0] = (uint8_t)n;
    memcpy(buf + 8, dup, n);
    CHECK_EQ_INT(wsync_st_parse(buf, 8 + n + 4, NULL, &f, &err), WSYNC_ERR_DUPLICATE_KEY);
    CHECK_EQ_STR(err.tensor, "a");
    TEST_END();

    TEST_BEGIN("a duplicate metadata key is reported before trailing bytes");
    memset(buf, 0, sizeof buf);
    n = sizeof meta - 1;
    buf[0] = (uint8_t)n;
    memcpy(buf + 8, meta, n);
    CHECK_EQ_INT(wsync_st_parse(buf, 8 + n + 2, NULL, &f, &err), WSYNC_ERR_DUPLICATE_KEY);
    TEST_END();

    TEST_BEGIN("a syntax error anywhere wins over an earlier schema error");
    memset(buf, 0, sizeof buf);
    n = sizeof syntax - 1;
    buf[0] = (uint8_t)n;
    memcpy(buf + 8, syntax, n);
    CHECK_EQ_INT(wsync_st_parse(buf, 8 + n + 1, NULL, &f, &err), WSYNC_ERR_INVALID_JSON);
    TEST_END();
}

static void test_dtypes(void)
{
    static const struct {
        const char *name;
        unsigned bits;
    } want[] = {{"BOOL", 8},    {"U8", 8},       {"I8", 8},       {"F8_E4M3", 8}, {"F8_E5M2", 8},
                {"F8_E8M0", 8}, {"I16", 16},     {"U16", 16},     {"F16", 16},    {"BF16", 16},
                {"I32", 32},    {"U32", 32},     {"F32", 32},     {"F64", 64},    {"I64", 64},
                {"U64", 64},    {"C64", 64},     {"F4", 4},       {"F6_E2M3", 6}, {"F6_E3M2", 6}};
    size_t i;
    uint64_t nb;
    TEST_BEGIN("all 20 safetensors dtypes: name, bits, lookup");
    CHECK_EQ_INT(sizeof want / sizeof want[0], WSYNC_DTYPE_COUNT - 1);
    for (i = 0; i < sizeof want / sizeof want[0]; i++) {
        wsync_dtype t = wsync_dtype_from_name(want[i].name, strlen(want[i].name));
        CHECK_MSG(t != WSYNC_DTYPE_INVALID, "%s", want[i].name);
        CHECK_EQ_STR(wsync_dtype_name(t), want[i].name);
        CHECK_EQ_INT(wsync_dtype_bits(t), want[i].bits);
    }
    TEST_END();

    TEST_BEGIN("dtype lookup is exact and case-sensitive");
    CHECK_EQ_INT(wsync_dtype_from_name("bf16", 4), WSYNC_DTYPE_INVALID);
    CHECK_EQ_INT(wsync_dtype_from_name("BF16 ", 5), WSYNC_DTYPE_INVALID);
    CHECK_EQ_INT(wsync_dtype_from_name("BF1", 3), WSYNC_DTYPE_INVALID);
    CHECK_EQ_INT(wsync_dtype_from_name("BF16", 4), WSYNC_DTYPE_BF16);
    CHECK_EQ_INT(wsync_dtype_from_name("F8_E4M3FN", 9), WSYNC_DTYPE_INVALID);
    CHECK_EQ_INT(wsync_dtype_from_name(NULL, 0), WSYNC_DTYPE_INVALID);
    CHECK_EQ_STR(wsync_dtype_name((wsync_dtype)999), "INVALID");
    CHECK_EQ_INT(wsync_dtype_bits(WSYNC_DTYPE_INVALID), 0);
    TEST_END();

    TEST_BEGIN("dtype byte sizes, sub-byte rules and overflow");
    CHECK_EQ_INT(wsync_dtype_nbytes(WSYNC_DTYPE_BF16, 3, &nb), WSYNC_OK);
    CHECK_EQ_U64(nb, 6);
    CHECK_EQ_INT(wsync_dtype_nbytes(WSYNC_DTYPE_F4, 2, &nb), WSYNC_OK);
    CHECK_EQ_U64(nb, 1);
    CHECK_EQ_INT(wsync_dtype_nbytes(WSYNC_DTYPE_F4, 3, &nb), WSYNC_ERR_SIZE_MISMATCH);
    CHECK_EQ_INT(wsync_dtype_nbytes(WSYNC_DTYPE_F6_E2M3, 4, &nb), WSYNC_OK);
    CHECK_EQ_U64(nb, 3);
    CHECK_EQ_INT(wsync_dtype_nbytes(WSYNC_DTYPE_F6_E3M2, 2, &nb), WSYNC_ERR_SIZE_MISMATCH);
    CHECK_EQ_INT(wsync_dtype_nbytes(WSYNC_DTYPE_F64, UINT64_MAX / 8 + 1, &nb), WSYNC_ERR_OVERFLOW);
    CHECK_EQ_INT(wsync_dtype_nbytes(WSYNC_DTYPE_F64, UINT64_MAX / 8, &nb), WSYNC_OK);
    CHECK_EQ_INT(wsync_dtype_nbytes(WSYNC_DTYPE_F4, UINT64_MAX / 2, &nb), WSYNC_ERR_OVERFLOW);
    CHECK_EQ_INT(wsync_dtype_nbytes(WSYNC_DTYPE_INVALID, 1, &nb), WSYNC_ERR_UNKNOWN_DTYPE);
    TEST_END();
}

static void test_checked(void)
{
    uint64_t r = 7;
    size_t s = 7;
    TEST_BEGIN("checked 64-bit arithmetic");
    CHECK(wsync_mul_u64(0, UINT64_MAX, &r) && r == 0);
    CHECK(wsync_mul_u64(UINT64_MAX, 1, &r) && r == UINT64_MAX);
    CHECK(wsync_mul_u64(4294967296ull, 4294967295ull, &r) && r == 18446744069414584320ull);
    r = 7;
    CHECK(!wsync_mul_u64(4294967296ull, 4294967296ull, &r) && r == 7); /* would wrap to 0 */
    CHECK(!wsync_mul_u64(UINT64_MAX / 3 + 1, 3, &r));
    CHECK(wsync_add_u64(UINT64_MAX - 1, 1, &r) && r == UINT64_MAX);
    CHECK(!wsync_add_u64(UINT64_MAX, 1, &r));
    CHECK(!wsync_add_u64(1, UINT64_MAX, &r));
    TEST_END();

    TEST_BEGIN("checked size_t arithmetic");
    CHECK(wsync_mul_size(SIZE_MAX, 1, &s) && s == SIZE_MAX);
    CHECK(!wsync_mul_size(SIZE_MAX / 2 + 1, 2, &s));
    CHECK(!wsync_add_size(SIZE_MAX, 1, &s));
    CHECK(wsync_add_size(SIZE_MAX - 5, 5, &s) && s == SIZE_MAX);
    TEST_END();
}

static void test_file_map(void)
{
    const char *path = "build/test_base_map.tmp";
    wsync_mapped m;
    wsync_error err;
    FILE *f;
    TEST_BEGIN("map a regular file");
    f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs("hello wsync", f);
        fclose(f);
    }
    CHECK_EQ_INT(wsync_file_map(path, &m, &err), WSYNC_OK);
    CHECK_EQ_U64(m.size, 11);
    CHECK(m.bytes && memcmp(m.bytes, "hello wsync", 11) == 0);
    wsync_file_unmap(&m);
    CHECK(m.bytes != NULL && m.size == 0);
    TEST_END();

    TEST_BEGIN("map an empty file");
    f = fopen(path, "wb");
    if (f) fclose(f);
    CHECK_EQ_INT(wsync_file_map(path, &m, &err), WSYNC_OK);
    CHECK(m.bytes != NULL);
    CHECK_EQ_U64(m.size, 0);
    CHECK_EQ_INT(wsync_st_parse(m.bytes, m.size, NULL, NULL, &err), WSYNC_ERR_INVALID_ARGUMENT);
    wsync_file_unmap(&m);
    remove(path);
    TEST_END();

    TEST_BEGIN("map a missing file or a directory fails with IO and the path");
    CHECK_EQ_INT(wsync_file_map("build/does/not/exist", &m, &err), WSYNC_ERR_IO);
    CHECK(strstr(err.message, "build/does/not/exist") != NULL);
    CHECK_EQ_INT(wsync_file_map("tests", &m, &err), WSYNC_ERR_IO);
    CHECK_EQ_INT(wsync_file_map(NULL, &m, &err), WSYNC_ERR_INVALID_ARGUMENT);
    wsync_file_unmap(NULL);
    TEST_END();
}

static void test_version(void)
{
    TEST_BEGIN("version macros agree");
    {
        char buf[32];
        snprintf(buf, sizeof buf, "%d.%d.%d", WSYNC_VERSION_MAJOR, WSYNC_VERSION_MINOR,
                 WSYNC_VERSION_PATCH);
        CHECK_EQ_STR(buf, WSYNC_VERSION_STRING);
        CHECK_EQ_INT(WSYNC_VERSION_NUMBER,
                     WSYNC_VERSION_MAJOR * 10000 + WSYNC_VERSION_MINOR * 100 + WSYNC_VERSION_PATCH);
    }
    TEST_END();
}

int main(void)
{
    test_results();
    test_error_detail();
    test_error_precedence();
    test_dtypes();
    test_checked();
    test_file_map();
    test_version();
    return check_summary();
}
