/* test_util.c -- strict number parsing, memory units, glob matching. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "anet.h"
#include "testhelp.h"
#include "util.h"

static int ll(const char *s, long long *v) { return string2ll(s, strlen(s), v); }
static int match(const char *p, const char *s) { return stringmatchlen(p, strlen(p), s, strlen(s), 0); }

int main(void) {
    long long v;
    TEST("string2ll accepts canonical integers only") {
        CHECK(ll("0", &v) && v == 0);
        CHECK(ll("-1", &v) && v == -1);
        CHECK(ll("9223372036854775807", &v) && v == LLONG_MAX);
        CHECK(ll("-9223372036854775808", &v) && v == LLONG_MIN);
        CHECK(!ll("9223372036854775808", &v));
        CHECK(!ll("-9223372036854775809", &v));
        CHECK(!ll("", &v));
        CHECK(!ll("-", &v));
        CHECK(!ll("-0", &v));
        CHECK(!ll("01", &v));
        CHECK(!ll("+1", &v));
        CHECK(!ll(" 1", &v));
        CHECK(!ll("1 ", &v));
        CHECK(!ll("0x10", &v));
        CHECK(!ll("99999999999999999999999", &v));
    }
    TEST("ll2string round-trips through string2ll") {
        char buf[32];
        long long vals[] = {0, 1, -1, 9, 10, 99, 100, 101, 12345, -98765, LLONG_MAX, LLONG_MIN, 1000000000000LL};
        for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
            int n = ll2string(buf, sizeof(buf), vals[i]);
            char ref[32];
            snprintf(ref, sizeof(ref), "%lld", vals[i]);
            CHECK_EQ(n, (long long)strlen(ref));
            CHECK(strcmp(buf, ref) == 0);
            CHECK(ll(buf, &v) && v == vals[i]);
        }
        CHECK_EQ(ll2string(buf, 3, 12345), 0);
        CHECK_EQ(ll2string(buf, 3, 12), 2);
    }
    TEST("memtoll units") {
        int err;
        CHECK_EQ(memtoll("1gb", &err), 1073741824LL);
        CHECK_EQ(err, 0);
        CHECK_EQ(memtoll("1k", &err), 1000);
        CHECK_EQ(memtoll("16MB", &err), 16LL * 1024 * 1024);
        CHECK_EQ(memtoll("4096", &err), 4096);
        memtoll("12xb", &err);
        CHECK_EQ(err, 1);
        memtoll("gb", &err);
        CHECK_EQ(err, 1);
        memtoll("99999999999tb", &err);
        CHECK_EQ(err, 1);
    }
    TEST("glob matching") {
        CHECK(match("*", "anything"));
        CHECK(match("k*", "key"));
        CHECK(!match("k*", "ey"));
        CHECK(match("h?llo", "hello"));
        CHECK(match("h[ae]llo", "hallo"));
        CHECK(!match("h[ae]llo", "hillo"));
        CHECK(match("h[^e]llo", "hallo"));
        CHECK(!match("h[^e]llo", "hello"));
        CHECK(match("h[a-b]llo", "hbllo"));
        CHECK(match("h\\*llo", "h*llo"));
        CHECK(!match("h\\*llo", "hallo"));
        CHECK(!match("a[", "a"));
        CHECK(match("*a*b*c*", "xxaxxbxxcxx"));
        CHECK(!match("*a*b*c*d", "xxaxxbxxcxx"));
    }
    TEST("glob matching stays fast on hostile patterns") {
        char s[2000];
        memset(s, 'a', sizeof(s) - 1);
        s[sizeof(s) - 1] = '\0';
        CHECK(!match("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", s));
    }
    TEST("protected mode: only loopback and unix-socket peers count as local") {
        CHECK(anetIsLoopback("127.0.0.1"));
        CHECK(anetIsLoopback("127.3.4.5"));
        CHECK(anetIsLoopback("::1"));
        CHECK(anetIsLoopback("::ffff:127.0.0.1"));
        CHECK(anetIsLoopback("/unixsocket"));
        CHECK(!anetIsLoopback("10.0.0.1"));
        CHECK(!anetIsLoopback("128.0.0.1"));
        CHECK(!anetIsLoopback("::2"));
        CHECK(!anetIsLoopback("::ffff:10.0.0.1"));
        CHECK(!anetIsLoopback("1270.0.0.1"));
    }
    return testReport();
}
