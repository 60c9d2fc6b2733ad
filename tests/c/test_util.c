/* test_util.c -- strict number parsing, memory units, glob matching, and the
 * socket tuning in anet (congestion control for same-host peers,
 * TCP_NOTSENT_LOWAT). */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
        CHECK(!match("a[", "ab"));
        /* An unterminated set ends with the pattern, as in Redis. */
        CHECK(match("k[0-1", "k1"));
        CHECK(!match("k[0-1", "k2"));
        CHECK(!match("k[0-1", "k1x"));
        CHECK(match("h[^", "hx"));
        CHECK(!match("h[^", "h"));
        CHECK(match("h[^a", "hb"));
        CHECK(!match("h[^a", "ha"));
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
    TEST("same-host peers: loopback or our own address") {
        CHECK(anetPeerIsLocal("127.0.0.1", "127.0.0.1"));
        CHECK(anetPeerIsLocal("::1", "::1"));
        CHECK(anetPeerIsLocal("10.1.2.3", "10.1.2.3"));
        CHECK(!anetPeerIsLocal("10.1.2.4", "10.1.2.3"));
        CHECK(!anetPeerIsLocal("192.168.0.1", "127.0.0.1"));
    }
    TEST("congestion control: set, read back, and refuse what the kernel lacks") {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(fd >= 0);
        char name[64], err[ANET_ERR_LEN] = "";
        /* Reno is built in and allowed to every process. */
        CHECK_EQ(anetSetCongestion(err, fd, "reno"), ANET_OK);
        CHECK_EQ(anetGetCongestion(fd, name, sizeof(name)), ANET_OK);
        CHECK(strcmp(name, "reno") == 0);
        CHECK_EQ(anetSetCongestion(err, fd, "no-such-cc"), ANET_ERR);
        CHECK(strstr(err, "no-such-cc") != NULL);
        CHECK_EQ(anetGetCongestion(fd, name, sizeof(name)), ANET_OK);
        CHECK(strcmp(name, "reno") == 0); /* a refusal changes nothing */
        close(fd);
        CHECK_EQ(anetCongestionAvailable(NULL, "reno"), ANET_OK);
        CHECK_EQ(anetCongestionAvailable(err, "no-such-cc"), ANET_ERR);
    }
    TEST("MC_TCP_CONGESTION=system keeps the system default") {
        /* In a child: the choice is made once per process, and this process
         * has not made it yet. */
        pid_t pid = fork();
        if (pid == 0) {
            setenv("MC_TCP_CONGESTION", "system", 1);
            _exit(anetLocalCongestion() == NULL ? 0 : 1);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    TEST("same-host connections get a window-only algorithm when the default paces") {
        char def[64] = "";
        int probe = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(probe >= 0 && anetGetCongestion(probe, def, sizeof(def)) == ANET_OK);
        close(probe);
        const char *local = anetLocalCongestion();
        if (strncmp(def, "bbr", 3) == 0) {
            CHECK(local != NULL && (strcmp(local, "cubic") == 0 || strcmp(local, "reno") == 0));
        } else {
            CHECK(local == NULL);
        }
        /* A real loopback pair: both ends tuned, as the library does. */
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t salen = sizeof(sa);
        int lfd = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 1) == 0 &&
              getsockname(lfd, (struct sockaddr *)&sa, &salen) == 0);
        int cfd = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(cfd >= 0 && connect(cfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
        int afd = accept(lfd, NULL, NULL);
        CHECK(afd >= 0);
        CHECK_EQ(anetTuneLocalCongestion(cfd), local != NULL);
        CHECK_EQ(anetTuneLocalCongestion(afd), local != NULL);
        char got[64];
        CHECK(anetGetCongestion(cfd, got, sizeof(got)) == ANET_OK && strcmp(got, local ? local : def) == 0);
        CHECK(anetGetCongestion(afd, got, sizeof(got)) == ANET_OK && strcmp(got, local ? local : def) == 0);
        /* A unix socket is not TCP: nothing to tune, nothing breaks. */
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        CHECK_EQ(anetTuneLocalCongestion(sv[0]), 0);
        close(sv[0]);
        close(sv[1]);
        close(cfd);
        close(afd);
        close(lfd);
    }
    TEST("TCP_NOTSENT_LOWAT is set as asked") {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(fd >= 0);
        CHECK_EQ(anetSetNotSentLowat(NULL, fd, 16384), ANET_OK);
        int v = 0;
        socklen_t vl = sizeof(v);
        CHECK(getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &vl) == 0);
        CHECK_EQ(v, 16384);
        close(fd);
    }
    return testReport();
}
