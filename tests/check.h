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

/* The condition's text is passed apart so that the CHECK_EQ_* forms can
   print the expressions they were given while evaluating each just once: a
   call with side effects (an apply, an encode) is made once, pass or fail. */
#define CHECK__REPORT(ok, text, ...)                                            \
    do {                                                                        \
        if (!(ok)) {                                                            \
            if (check__case_failures < 10) {                                    \
                printf("  %s:%d: [%s] check failed: %s: ", __FILE__, __LINE__, \
                       check__case, text);                                      \
                printf(__VA_ARGS__);                                            \
                printf("\n");                                                   \
            }                                                                   \
            check__case_failures++;                                             \
        }                                                                       \
    } while (0)

#define CHECK_MSG(cond, ...) CHECK__REPORT(cond, #cond, __VA_ARGS__)
#define CHECK(cond) CHECK_MSG(cond, "%s", "")
#define CHECK_EQ_INT(a, b)                                                      \
    do {                                                                        \
        long long check__a = (long long)(a), check__b = (long long)(b);         \
        CHECK__REPORT(check__a == check__b, #a " == " #b, "%lld != %lld",       \
                      check__a, check__b);                                      \
    } while (0)
#define CHECK_EQ_U64(a, b)                                                      \
    do {                                                                        \
        unsigned long long check__a = (unsigned long long)(a),                  \
                           check__b = (unsigned long long)(b);                  \
        CHECK__REPORT(check__a == check__b, #a " == " #b, "0x%llx != 0x%llx",   \
                      check__a, check__b);                                      \
    } while (0)
#define CHECK_EQ_STR(a, b)                                                      \
    do {                                                                        \
        const char *check__a = (a), *check__b = (b);                            \
        CHECK__REPORT(strcmp(check__a, check__b) == 0, #a " == " #b,            \
                      "\"%s\" != \"%s\"", check__a, check__b);                  \
    } while (0)

static int check_summary(void)
{
    printf("summary: %d passed, %d failed\n", check__passed, check__failed);
    return check__failed ? 1 : 0;
}

#endif
