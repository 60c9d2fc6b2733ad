/* test_sds.c -- unit tests for sds.c.
 *
 * sds is both a building block (every reply and key passes through it) and
 * an input parser (sdssplitargs reads untrusted inline commands and config
 * files), so besides the behaviour of each function the tests check the
 * edges: binary content, strings aliasing themselves, the 4 GiB limit, and
 * sdssplitargs against malformed lines, a round trip through sdscatrepr and
 * a small random fuzz (run under ASAN, any out-of-bounds read shows up).
 */
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sds.h"
#include "testhelp.h"

/* Content equals the len bytes at p, and the terminator is in place. */
static int sdsIs(const sds s, const char *p, size_t len) {
    return sdslen(s) == len && memcmp(s, p, len) == 0 && s[len] == '\0';
}
#define SDS_IS(s, lit) sdsIs((s), (lit), sizeof(lit) - 1)

/* Run fn in a child; 1 if the child died of SIGABRT (the sds panic). */
static int abortsInChild(void (*fn)(void)) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
        if (freopen("/dev/null", "w", stderr) == NULL) _exit(2);
        fn();
        _exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return 0;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void growPast4G(void) {
    sds s = sdsnew("x");
    s = sdsMakeRoomFor(s, (size_t)UINT32_MAX);
    sdsfree(s);
}

static void newPast4G(void) {
    sds s = sdsnewlen(NULL, (size_t)UINT32_MAX + 1);
    sdsfree(s);
}

static void incrPastAlloc(void) {
    sds s = sdsnew("abc");
    sdsIncrLen(s, (ssize_t)sdsavail(s) + 1);
}

static void decrBelowZero(void) {
    sds s = sdsnew("abc");
    sdsIncrLen(s, -4);
}

static void setlenPastAlloc(void) {
    sds s = sdsnew("abc");
    sdssetlen(s, sdsalloc(s) + 1);
}

/* Split and check against the expected args (NULL-terminated list with
 * explicit lengths to allow NUL bytes). */
typedef struct { const char *p; size_t len; } arg;
#define A(lit) {(lit), sizeof(lit) - 1}

static int splitIs(const char *line, const arg *want, int nwant) {
    int argc = -1;
    sds *v = sdssplitargs(line, &argc);
    if (v == NULL) return 0;
    int ok = argc == nwant;
    for (int i = 0; ok && i < argc; i++) ok = sdsIs(v[i], want[i].p, want[i].len);
    sdsfreesplitres(v, argc);
    return ok;
}

static int splitFails(const char *line) {
    int argc = -1;
    sds *v = sdssplitargs(line, &argc);
    if (v != NULL) {
        sdsfreesplitres(v, argc);
        return 0;
    }
    return argc == 0;
}

int main(void) {
    TEST("sds: create, length, free") {
        sds s = sdsnew("foo");
        CHECK(SDS_IS(s, "foo"));
        CHECK_EQ(sdsavail(s), 0);
        CHECK_EQ(sdsalloc(s), 3);
        sdsfree(s);

        s = sdsnewlen("a\0b", 3);
        CHECK(SDS_IS(s, "a\0b"));
        CHECK_EQ(strlen(s), 1);     /* still a C string up to the NUL */
        sdsfree(s);

        s = sdsnewlen(NULL, 5);
        CHECK(sdsIs(s, "\0\0\0\0\0", 5));
        sdsfree(s);

        s = sdsnew(NULL);
        CHECK(SDS_IS(s, ""));
        sdsfree(s);
        s = sdsempty();
        CHECK(SDS_IS(s, ""));
        sdsfree(s);
        s = sdsnewlen(NULL, 0);
        CHECK(SDS_IS(s, ""));
        sdsfree(s);
        sdsfree(NULL);

        s = sdsnew("original");
        sds d = sdsdup(s);
        d[0] = 'O';
        CHECK(SDS_IS(s, "original"));
        CHECK(SDS_IS(d, "Original"));
        sdsfree(s);
        sdsfree(d);
    }

    TEST("sds: fromlonglong") {
        sds s = sdsfromlonglong(0);
        CHECK(SDS_IS(s, "0"));
        sdsfree(s);
        s = sdsfromlonglong(-1);
        CHECK(SDS_IS(s, "-1"));
        sdsfree(s);
        s = sdsfromlonglong(LLONG_MIN);
        CHECK(SDS_IS(s, "-9223372036854775808"));
        sdsfree(s);
        s = sdsfromlonglong(LLONG_MAX);
        CHECK(SDS_IS(s, "9223372036854775807"));
        sdsfree(s);
    }

    TEST("sds: MakeRoomFor grows greedily, IncrLen commits") {
        sds s = sdsnew("abc");
        s = sdsMakeRoomFor(s, 10);
        CHECK_EQ(sdsalloc(s), 26);          /* (3 + 10) * 2 */
        CHECK(SDS_IS(s, "abc"));
        sds same = sdsMakeRoomFor(s, 20);   /* already room: untouched */
        CHECK(same == s);
        CHECK_EQ(sdsalloc(s), 26);
        memcpy(s + 3, "defg", 4);
        sdsIncrLen(s, 4);
        CHECK(SDS_IS(s, "abcdefg"));
        sdsIncrLen(s, -2);
        CHECK(SDS_IS(s, "abcde"));
        sdsIncrLen(s, -5);
        CHECK(SDS_IS(s, ""));
        sdsIncrLen(s, 0);
        CHECK(SDS_IS(s, ""));
        CHECK_EQ(sdsAllocSize(s), sizeof(struct sdshdr) + 26 + 1);
        sdsfree(s);

        /* Above 1 MiB growth is linear. */
        s = sdsnewlen(NULL, 2 * 1024 * 1024);
        s = sdsMakeRoomFor(s, 1);
        CHECK_EQ(sdsalloc(s), 3 * 1024 * 1024 + 1);
        sdsfree(s);

        /* Amortised appends: 100k one-byte appends, few reallocations. */
        s = sdsempty();
        int reallocs = 0;
        for (int i = 0; i < 100000; i++) {
            char *before = s;
            size_t alloc = sdsalloc(s);
            s = sdscatlen(s, "x", 1);
            if (sdsalloc(s) != alloc || s != before) reallocs++;
        }
        CHECK_EQ(sdslen(s), 100000);
        CHECK(reallocs < 25);
        s = sdsRemoveFreeSpace(s);
        CHECK_EQ(sdsavail(s), 0);
        CHECK_EQ(sdsalloc(s), 100000);
        CHECK(s[0] == 'x' && s[99999] == 'x' && s[100000] == '\0');
        sdsfree(s);
    }

    TEST("sds: setlen, updatelen, clear") {
        sds s = sdsnew("hello world");
        sdssetlen(s, 5);
        CHECK(SDS_IS(s, "hello"));
        sdssetlen(s, 11);           /* bytes are still there */
        CHECK(SDS_IS(s, "hello\0world"));
        s[5] = ' ';
        CHECK(SDS_IS(s, "hello world"));
        s[3] = '\0';
        sdsupdatelen(s);
        CHECK(SDS_IS(s, "hel"));
        CHECK_EQ(sdsavail(s), 8);
        sdsclear(s);
        CHECK(SDS_IS(s, ""));
        CHECK_EQ(sdsavail(s), 11);
        sdsfree(s);
    }

    TEST("sds: limits and misuse abort") {
        CHECK(abortsInChild(growPast4G));
        CHECK(abortsInChild(newPast4G));
        CHECK(abortsInChild(incrPastAlloc));
        CHECK(abortsInChild(decrBelowZero));
        CHECK(abortsInChild(setlenPastAlloc));
    }

    TEST("sds: cat, catsds, cpy, including self-aliasing") {
        sds s = sdsempty();
        s = sdscat(s, "foo");
        s = sdscatlen(s, "b\0r", 3);
        CHECK(SDS_IS(s, "foob\0r"));
        sds t = sdsnew("-x");
        s = sdscatsds(s, t);
        CHECK(SDS_IS(s, "foob\0r-x"));
        s = sdscatlen(s, "", 0);
        CHECK(SDS_IS(s, "foob\0r-x"));
        sdsfree(t);

        /* Append to itself, repeatedly, forcing reallocation each time. */
        s = sdsRemoveFreeSpace(s);
        s = sdscatsds(s, s);
        CHECK(SDS_IS(s, "foob\0r-xfoob\0r-x"));
        s = sdsRemoveFreeSpace(s);
        s = sdscatlen(s, s + 1, 3);
        CHECK(SDS_IS(s, "foob\0r-xfoob\0r-xoob"));

        s = sdscpy(s, "a");
        CHECK(SDS_IS(s, "a"));
        s = sdscpylen(s, "0123456789012345678901234567890123456789", 40);
        CHECK(SDS_IS(s, "0123456789012345678901234567890123456789"));
        s = sdscpylen(s, s + 30, 10);    /* overlapping, shrinking */
        CHECK(SDS_IS(s, "0123456789"));
        s = sdsRemoveFreeSpace(s);
        s = sdscpylen(s, s + 2, 8);
        CHECK(SDS_IS(s, "23456789"));
        s = sdscpylen(s, "", 0);
        CHECK(SDS_IS(s, ""));
        sdsfree(s);
    }

    TEST("sds: catprintf") {
        sds s = sdsnew("n=");
        s = sdscatprintf(s, "%d %s %c", 42, "str", 'z');
        CHECK(SDS_IS(s, "n=42 str z"));
        s = sdscatprintf(s, "%s", "");
        CHECK(SDS_IS(s, "n=42 str z"));
        /* Longer than the internal stack buffer. */
        char big[5000];
        memset(big, 'q', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        sds l = sdscatprintf(sdsempty(), "<%s>", big);
        CHECK_EQ(sdslen(l), 5001);
        CHECK(l[0] == '<' && l[1] == 'q' && l[4999] == 'q' && l[5000] == '>' && l[5001] == '\0');
        sdsfree(l);
        /* s as its own argument. */
        s = sdsRemoveFreeSpace(s);
        s = sdscatprintf(s, "|%s|", s);
        CHECK(SDS_IS(s, "n=42 str z|n=42 str z|"));
        sdsfree(s);
    }

    TEST("sds: catrepr escapes like redis-cli") {
        sds s = sdscatrepr(sdsempty(), "a\n\r\t\a\b\"\\\x00\x01\x7f\xff~ ", 14);
        CHECK(strcmp(s, "\"a\\n\\r\\t\\a\\b\\\"\\\\\\x00\\x01\\x7f\\xff~ \"") == 0);
        sdsfree(s);
        s = sdscatrepr(sdsnew("x="), "", 0);
        CHECK(SDS_IS(s, "x=\"\""));
        sdsfree(s);
    }

    TEST("sds: range") {
        struct { const char *in; ssize_t a, b; const char *out; } cases[] = {
            {"ciao", 1, 1, "i"},     {"ciao", 1, -1, "iao"},   {"ciao", -2, -1, "ao"},
            {"ciao", 2, 1, ""},      {"ciao", 1, 100, "iao"},  {"ciao", 100, 100, ""},
            {"ciao", 0, 0, "c"},     {"ciao", -100, -1, "ciao"}, {"ciao", 0, -100, "c"},
            {"ciao", 4, 10, ""},     {"ciao", 3, 3, "o"},      {"ciao", -1, -1, "o"},
            {"ciao", -100, -100, "c"}, {"", 0, -1, ""},        {"", 5, 10, ""},
        };
        int ok = 1;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            sds s = sdsnew(cases[i].in);
            sdsrange(s, cases[i].a, cases[i].b);
            if (!sdsIs(s, cases[i].out, strlen(cases[i].out))) {
                fprintf(stderr, "  range(%s, %zd, %zd) = '%s'\n", cases[i].in,
                        cases[i].a, cases[i].b, s);
                ok = 0;
            }
            sdsfree(s);
        }
        CHECK(ok);
        sds s = sdsnewlen("a\0bc\0", 5);
        sdsrange(s, 1, -2);
        CHECK(SDS_IS(s, "\0bc"));
        sdsfree(s);
    }

    TEST("sds: trim") {
        sds s = sdsnew("xxciaoyyy");
        sdstrim(s, "xy");
        CHECK(SDS_IS(s, "ciao"));
        sdstrim(s, "");
        CHECK(SDS_IS(s, "ciao"));
        sdstrim(s, "oc");
        CHECK(SDS_IS(s, "ia"));
        sdstrim(s, "ai");
        CHECK(SDS_IS(s, ""));
        sdstrim(s, "ai");
        CHECK(SDS_IS(s, ""));
        sdsfree(s);
        s = sdsnew("  \t hello world \n");
        sdstrim(s, " \t\n");
        CHECK(SDS_IS(s, "hello world"));
        sdsfree(s);
        /* NUL bytes are content, never in the set. */
        s = sdsnewlen("\0aa\0", 4);
        sdstrim(s, "a");
        CHECK(SDS_IS(s, "\0aa\0"));
        sdsfree(s);
    }

    TEST("sds: cmp, tolower, toupper") {
        sds a = sdsnew("foo"), b = sdsnew("foa"), c = sdsnew("fo"), d = sdsnew("foo");
        CHECK(sdscmp(a, b) > 0);
        CHECK(sdscmp(b, a) < 0);
        CHECK(sdscmp(a, c) > 0);
        CHECK(sdscmp(c, a) < 0);
        CHECK(sdscmp(a, d) == 0);
        sds e = sdsnewlen("fo\0", 3);
        CHECK(sdscmp(e, c) > 0);            /* longer with equal prefix */
        sds f = sdsnewlen("\xff", 1), g = sdsnewlen("\x01", 1);
        CHECK(sdscmp(f, g) > 0);            /* bytes compare unsigned */
        sds m = sdsnewlen("MiXeD 123 \xc3\x89\0Z", 15);
        sdstolower(m);
        CHECK(sdsIs(m, "mixed 123 \xc3\x89\0z", 15));
        sdstoupper(m);
        CHECK(sdsIs(m, "MIXED 123 \xc3\x89\0Z", 15));
        sdsfree(a); sdsfree(b); sdsfree(c); sdsfree(d);
        sdsfree(e); sdsfree(f); sdsfree(g); sdsfree(m);
    }

    TEST("sds: splitlen") {
        int n = -1;
        sds *v = sdssplitlen("a,b,,c", 6, ",", 1, &n);
        CHECK_EQ(n, 4);
        if (n == 4) {
            CHECK(SDS_IS(v[0], "a"));
            CHECK(SDS_IS(v[1], "b"));
            CHECK(SDS_IS(v[2], ""));
            CHECK(SDS_IS(v[3], "c"));
        }
        sdsfreesplitres(v, n);

        v = sdssplitlen("--a--b--", 8, "--", 2, &n);
        CHECK_EQ(n, 4);
        if (n == 4) {
            CHECK(SDS_IS(v[0], ""));
            CHECK(SDS_IS(v[1], "a"));
            CHECK(SDS_IS(v[2], "b"));
            CHECK(SDS_IS(v[3], ""));
        }
        sdsfreesplitres(v, n);

        v = sdssplitlen("a\0b\0c", 5, "\0", 1, &n);
        CHECK_EQ(n, 3);
        sdsfreesplitres(v, n);

        v = sdssplitlen("abc", 3, "abcd", 4, &n);   /* sep longer than input */
        CHECK_EQ(n, 1);
        if (n == 1) CHECK(SDS_IS(v[0], "abc"));
        sdsfreesplitres(v, n);

        v = sdssplitlen("aaa", 3, "aa", 2, &n);     /* non-overlapping */
        CHECK_EQ(n, 2);
        if (n == 2) { CHECK(SDS_IS(v[0], "")); CHECK(SDS_IS(v[1], "a")); }
        sdsfreesplitres(v, n);

        v = sdssplitlen("", 0, ",", 1, &n);
        CHECK(v != NULL);
        CHECK_EQ(n, 0);
        sdsfreesplitres(v, n);

        n = 7;
        CHECK(sdssplitlen("abc", 3, "", 0, &n) == NULL);
        CHECK_EQ(n, 0);
        sdsfreesplitres(NULL, 0);
    }

    TEST("sds: splitargs, valid lines") {
        arg w1[] = {A("set"), A("key"), A("value")};
        CHECK(splitIs("set key value", w1, 3));
        CHECK(splitIs("  \t set   key\tvalue  \r\n", w1, 3));
        CHECK(splitIs("", NULL, 0));
        CHECK(splitIs("   \t\n ", NULL, 0));
        arg w2[] = {A("set"), A("hello world"), A("x")};
        CHECK(splitIs("set \"hello world\" x", w2, 3));
        CHECK(splitIs("set 'hello world' x", w2, 3));
        arg w3[] = {A("AJ\0z")};
        CHECK(splitIs("\"\\x41\\x4a\\x00z\"", w3, 1));
        arg w3b[] = {A("\xff\xab")};
        CHECK(splitIs("\"\\xff\\xAB\"", w3b, 1));
        arg w4[] = {A("\n\r\t\b\a\\\"q")};
        CHECK(splitIs("\"\\n\\r\\t\\b\\a\\\\\\\"\\q\"", w4, 1));
        arg w5[] = {A("it's")};
        CHECK(splitIs("'it\\'s'", w5, 1));
        arg w6[] = {A("a\\nb\"c")};                  /* single quotes: literal */
        CHECK(splitIs("'a\\nb\"c'", w6, 1));
        arg w7[] = {A("")};
        CHECK(splitIs("\"\"", w7, 1));
        CHECK(splitIs("''", w7, 1));
        arg w8[] = {A(""), A(""), A("x")};
        CHECK(splitIs("'' \"\" x", w8, 3));
        arg w9[] = {A("foobar baz"), A("q")};
        CHECK(splitIs("foo\"bar baz\" q", w9, 2));  /* bare prefix joins */
        arg w10[] = {A("xZZ")};
        CHECK(splitIs("\"\\xZZ\"", w10, 1));         /* not hex: plain escape */
        arg w11[] = {A("x4")};
        CHECK(splitIs("\"\\x4\"", w11, 1));
        arg w12[] = {A("ab"), A("cd")};
        CHECK(splitIs("a\"b\" c'd'", w12, 2));
        arg w13[] = {A("x"), A("y")};
        CHECK(splitIs("\"x\"\t'y'\n", w13, 2));
    }

    TEST("sds: splitargs, malformed lines") {
        CHECK(splitFails("\"foo"));
        CHECK(splitFails("'foo"));
        CHECK(splitFails("set \"foo"));
        CHECK(splitFails("\"foo\"bar"));
        CHECK(splitFails("'foo'bar"));
        CHECK(splitFails("\"foo\\\""));          /* escaped quote: still open */
        CHECK(splitFails("'foo\\'"));
        CHECK(splitFails("\"abc\\"));            /* backslash at the very end */
        CHECK(splitFails("\"\\x4"));             /* truncated \x escape */
        CHECK(splitFails("\"\\x"));
        CHECK(splitFails("\"\\"));
        CHECK(splitFails("\""));
        CHECK(splitFails("'"));
        CHECK(splitFails("a b \"c\"d e"));
        CHECK(splitFails("\"\"\"\""));
        CHECK(splitFails(NULL));
    }

    TEST("sds: splitargs, very long line and many args") {
        size_t big = 1 << 20;
        char *line = malloc(big + 16);
        memset(line, 'k', big);
        strcpy(line + big, " \"end\"  ");
        int argc = 0;
        sds *v = sdssplitargs(line, &argc);
        CHECK(v != NULL && argc == 2);
        if (v && argc == 2) {
            CHECK_EQ(sdslen(v[0]), big);
            CHECK(SDS_IS(v[1], "end"));
        }
        sdsfreesplitres(v, argc);

        /* 200k one-letter args. */
        for (size_t i = 0; i < 400000; i += 2) { line[i] = 'a'; line[i + 1] = ' '; }
        line[400000] = '\0';
        v = sdssplitargs(line, &argc);
        CHECK(v != NULL);
        CHECK_EQ(argc, 200000);
        sdsfreesplitres(v, argc);

        /* A long quoted argument left open. */
        line[0] = '"';
        memset(line + 1, 'z', big);
        line[big + 1] = '\0';
        CHECK(splitFails(line));
        free(line);
    }

    TEST("sds: splitargs parses what catrepr prints (round trip)") {
        srand(7);
        int ok = 1;
        for (int round = 0; round < 2000 && ok; round++) {
            int nargs = 1 + rand() % 6;
            sds want[6];
            sds line = sdsempty();
            for (int i = 0; i < nargs; i++) {
                size_t len = (size_t)(rand() % 20);
                want[i] = sdsnewlen(NULL, len);
                for (size_t j = 0; j < len; j++) want[i][j] = (char)(rand() % 256);
                if (i) line = sdscat(line, rand() % 2 ? " " : " \t ");
                line = sdscatrepr(line, want[i], len);
            }
            int argc = 0;
            sds *v = sdssplitargs(line, &argc);
            if (v == NULL || argc != nargs) ok = 0;
            for (int i = 0; ok && i < argc; i++)
                if (sdscmp(v[i], want[i]) != 0) ok = 0;
            if (!ok) fprintf(stderr, "  round trip failed on: %s\n", line);
            if (v) sdsfreesplitres(v, argc);
            for (int i = 0; i < nargs; i++) sdsfree(want[i]);
            sdsfree(line);
        }
        CHECK(ok);
    }

    TEST("sds: splitargs fuzz with quote-heavy random lines") {
        /* Correctness here is "no crash, no out-of-bounds read (ASAN),
         * consistent results": a parse either fails with argc 0 or
         * yields argc valid strings. */
        static const char alphabet[] = " \t\"'\\xaF0\n";
        srand(11);
        int ok = 1;
        long parsed = 0, failed = 0;
        for (int round = 0; round < 300000; round++) {
            char line[48];
            int len = rand() % 40;
            for (int i = 0; i < len; i++) line[i] = alphabet[rand() % (sizeof(alphabet) - 1)];
            line[len] = '\0';
            /* Exact-size heap copy: ASAN flags any read past the NUL. */
            char *heap = malloc((size_t)len + 1);
            memcpy(heap, line, (size_t)len + 1);
            int argc = -1;
            sds *v = sdssplitargs(heap, &argc);
            if (v) {
                parsed++;
                if (argc < 0 || argc > len) ok = 0;
                for (int i = 0; i < argc; i++) if (sdslen(v[i]) > (size_t)len) ok = 0;
                sdsfreesplitres(v, argc);
            } else {
                failed++;
                if (argc != 0) ok = 0;
            }
            free(heap);
        }
        CHECK(ok);
        CHECK(parsed > 1000 && failed > 1000);     /* both paths exercised */
    }

    return testReport();
}
