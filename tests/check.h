/* check.h - the smallest test harness that still says what failed.

   TEST_BEGIN("name"); ... CHECK(cond); CHECK_EQ_INT(a, b); ... TEST_END();
   A case passes when no CHECK inside it failed. main() returns
   check_summary(), which prints "summary: P passed, F failed" (tests/run.sh
   adds these up) and returns nonzero on any failure. */
#ifndef WSYNC_TESTS_CHECK_H
#define WSYNC_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check__passed, check__failed, check__case_failures;
static const char *check__case = "(none)";
static int check__verbose = -1;

static int check__is_verbose(void)
{
    if (check__verbose < 0) {
        const char *v = getenv("CHECK_VERBOSE");
        check__verbose = v && *v && *v != '0';
    }
    return check__verbose;
}

#define TEST_BEGIN(name) (check__case = (name), check__case_failures = 0)
#define TEST_END()                                                              \
    do {                                                                        \
        if (check__case_failures == 0) {                                        \
            check__passed++;                                                    \
            if (check__is_verbose()) printf("ok   %s\n", check__case);         \
        } else {                                                                \
            check__failed++;                                                    \
            printf("FAIL %s\n", check__case);                                   \
        }                                                                       \
    } while (0)

#define CHECK_MSG(cond, ...)                                                    \
    do {                                                                        \
        if (!(cond)) {                                                          \
            if (check__case_failures < 10) {                                    \
                printf("  %s:%d: [%s] check failed: %s: ", __FILE__, __LINE__, \
                       check__case, #cond);                                     \
                printf(__VA_ARGS__);                                            \
                printf("\n");                                                   \
            }                                                                   \
            check__case_failures++;                                             \
        }                                                                       \
    } while (0)

#define CHECK(cond) CHECK_MSG(cond, "%s", "")
#define CHECK_EQ_INT(a, b)                                                      \
    CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), \
              (long long)(b))
#define CHECK_EQ_U64(a, b)                                                      \
    CHECK_MSG((unsigned long long)(a) == (unsigned long long)(b),               \
              "0x%llx != 0x%llx", (unsigned long long)(a), (unsigned long long)(b))
#define CHECK_EQ_STR(a, b)                                                      \
    CHECK_MSG(strcmp((a), (b)) == 0, "\"%s\" != \"%s\"", (a), (b))

static int check_summary(void)
{
    printf("summary: %d passed, %d failed\n", check__passed, check__failed);
    return check__failed ? 1 : 0;
}

#endif
