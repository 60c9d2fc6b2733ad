/* testhelp.h -- the smallest unit-test harness that can fail loudly.
 *
 * Each C unit test is its own program: it runs a list of TEST() blocks and
 * ends with the line "N passed, N failed" that tests/runtest sums up. A test
 * fails when any CHECK inside it fails; the first failing CHECK prints the
 * file, line and expression so a red run explains itself without a debugger.
 *
 * Usage:
 *     TEST("alloc: exhaustion") {
 *         CHECK(allocAlloc(a, 1, &off) == ALLOC_NONE);
 *         CHECK_EQ(stats.used, 0);
 *     }
 *     return testReport();
 */
#ifndef TESTHELP_H
#define TESTHELP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The counters. A program built from one file keeps them to itself; one
 * built from several (test_mooncake.c and its test_mooncake_*.c) defines
 * TEST_SHARED_STATE in every file and defines them once, in the file with
 * main(), so that every file counts into the same set. */
#ifdef TEST_SHARED_STATE
extern int test_passed, test_failed, test_cur_failed;
extern const char *test_cur_name;
#else
static int test_passed, test_failed, test_cur_failed;
static const char *test_cur_name;
#endif

static inline void testEnd(void) {
    if (test_cur_name == NULL) return;
    if (test_cur_failed) test_failed++;
    else test_passed++;
    printf("[%s] %s\n", test_cur_failed ? "err" : "ok", test_cur_name);
    test_cur_name = NULL;
}

/* A for-loop that runs its body once, closing the previous test first. */
#define TEST(name) \
    for (int _t_once = (testEnd(), test_cur_name = (name), test_cur_failed = 0, 1); \
         _t_once; _t_once = 0, testEnd())

#define CHECK(cond) do { \
    if (!(cond)) { \
        fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        test_cur_failed = 1; \
    } \
} while (0)

#define CHECK_EQ(a, b) do { \
    long long _a = (long long)(a), _b = (long long)(b); \
    if (_a != _b) { \
        fprintf(stderr, "  %s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", \
                __FILE__, __LINE__, #a, _a, #b, _b); \
        test_cur_failed = 1; \
    } \
} while (0)

/* A fresh directory $TMPDIR/<prefix>.XXXXXX (or under /tmp) into buf; 0,
 * or -1 with buf "". Every temporary file of a test goes under one of
 * these, and the runner points TMPDIR at a directory of its own that must
 * be empty when the run ends: a test that forgets its files fails there
 * instead of littering /tmp. A TMPDIR over 60 bytes is not used, so a unix
 * socket inside still fits sun_path's 108. */
static inline int testMkdtemp(char *buf, size_t len, const char *prefix) {
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0' || strlen(tmp) > 60) tmp = "/tmp";
    if ((size_t)snprintf(buf, len, "%s/%s.XXXXXX", tmp, prefix) >= len || !mkdtemp(buf)) {
        buf[0] = '\0';
        return -1;
    }
    return 0;
}

static inline int testReport(void) {
    testEnd();
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
