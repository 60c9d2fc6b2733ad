/* utils/bench/multi-bench.c -- throughput of MULTI/EXEC transactions, which
 * redis-benchmark cannot drive (it repeats one command).
 *
 *   cc -O2 -o /tmp/multi-bench utils/bench/multi-bench.c
 *   /tmp/multi-bench PORT CLIENTS OPS [PIPELINE] [tx|watch|set]
 *
 * One op is "MULTI; SET key <64 bytes>; EXEC" (tx, the default), "WATCH
 * key; MULTI; SET; EXEC" (watch) or a plain SET (set), each connection
 * with its own key, written as one request the way redis-py's pipeline()
 * sends a transaction. Each connection keeps PIPELINE ops in flight, like
 * redis-benchmark -P; one thread, epoll. Every reply is checked against
 * the expected bytes (+OK +QUEUED *1 +OK), so an error stops the run.
 * Works against mooncake-server and redis-server alike; on a shared
 * machine run the two in turn, several times, and compare medians.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct { int fd; long long need, got; char *req; size_t reqlen; } conn;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int port = atoi(argv[1]), nc = atoi(argv[2]);
    long long ops = atoll(argv[3]);
    int pipe = argc > 4 ? atoi(argv[4]) : 1;
    const char *mode = argc > 5 ? argv[5] : "tx";
    char val[65];
    memset(val, 'x', 64);
    val[64] = 0;
    int ep = epoll_create1(0);
    conn *cs = calloc(nc, sizeof(conn));
    const char *reply;
    if (!strcmp(mode, "set")) reply = "+OK\r\n";
    else if (!strcmp(mode, "watch")) reply = "+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n";
    else reply = "+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n";
    size_t rlen = strlen(reply);
    long long issued = 0, done = 0;
    for (int i = 0; i < nc; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) { perror("connect"); return 1; }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        char key[32];
        int kl = snprintf(key, sizeof(key), "mb:%06d", i);
        char one_tx[512];
        int n;
        if (!strcmp(mode, "set"))
            n = snprintf(one_tx, sizeof(one_tx), "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$64\r\n%s\r\n", kl, key, val);
        else if (!strcmp(mode, "watch"))
            n = snprintf(one_tx, sizeof(one_tx),
                         "*2\r\n$5\r\nWATCH\r\n$%d\r\n%s\r\n*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$64\r\n%s\r\n*1\r\n$4\r\nEXEC\r\n",
                         kl, key, kl, key, val);
        else
            n = snprintf(one_tx, sizeof(one_tx),
                         "*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$64\r\n%s\r\n*1\r\n$4\r\nEXEC\r\n", kl,
                         key, val);
        cs[i].req = malloc((size_t)n * pipe);
        for (int p = 0; p < pipe; p++) memcpy(cs[i].req + (size_t)p * n, one_tx, n);
        cs[i].reqlen = (size_t)n * pipe;
        cs[i].fd = fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    double t0 = now();
    for (int i = 0; i < nc && issued < ops; i++) {
        if (write(cs[i].fd, cs[i].req, cs[i].reqlen) != (ssize_t)cs[i].reqlen) { perror("write"); return 1; }
        cs[i].need = (long long)rlen * pipe;
        cs[i].got = 0;
        issued += pipe;
    }
    static char buf[1 << 16];
    struct epoll_event evs[256];
    while (done < issued) {
        int n = epoll_wait(ep, evs, 256, 5000);
        if (n <= 0) { fprintf(stderr, "timeout\n"); return 1; }
        for (int e = 0; e < n; e++) {
            conn *c = evs[e].data.ptr;
            ssize_t r = read(c->fd, buf, sizeof(buf));
            if (r <= 0) { fprintf(stderr, "read error\n"); return 1; }
            if (c->got == 0 && memcmp(buf, reply, r < (ssize_t)rlen ? (size_t)r : rlen)) {
                fprintf(stderr, "unexpected reply: %.*s\n", (int)(r > 80 ? 80 : r), buf);
                return 1;
            }
            c->got += r;
            if (c->got < c->need) continue;
            done += pipe;
            if (issued < ops) {
                if (write(c->fd, c->req, c->reqlen) != (ssize_t)c->reqlen) { perror("write"); return 1; }
                c->got = 0;
                issued += pipe;
            }
        }
    }
    double dt = now() - t0;
    printf("%s: %.0f ops/sec (%lld ops, %d clients, -P %d, %.2f s)\n", mode, done / dt, done, nc, pipe, dt);
    return 0;
}
