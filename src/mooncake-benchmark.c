/* mooncake-benchmark.c -- a load generator that costs less than the server
 * it measures.
 *
 * Why another benchmark. redis-benchmark hands every reply to hiredis,
 * which reads it 16 KiB at a time into a growing buffer and copies it into
 * a reply object, and it waits for the next loop iteration to send the
 * next request. On a small machine where client and server share the CPU
 * it measures itself: at 16 MiB values it reports a tenth of what the
 * server delivers, and even at 64 bytes (P=1) about half. This tool speaks
 * the same RESP to any Redis-compatible server (Redis itself,
 * mooncake-server) and is built so that the bytes of a value cross user
 * space zero times per request:
 *
 *  - Requests are pre-built. When a test starts, every connection formats,
 *    for each pipeline slot and key, the RESP text around the value
 *    ("*3 $3 SET $<klen> key:<size>:<12 digits> $<vlen>") into a small
 *    header buffer. With a random keyspace (-r) only the 12 key digits are
 *    rewritten per request. The value is never formatted or copied: a
 *    request leaves with writev(header, value, "\r\n") where the value is
 *    a window into ONE shared, pre-faulted pattern buffer; a pipeline of P
 *    requests is one writev (megabytes per call for big values).
 *
 *  - Values are deterministic: byte j of the value of key k is
 *    pattern[(shift(k) + j) mod 1 MiB], pattern being 1 MiB of
 *    pseudo-random bytes and shift(k) a hash of (k, size). A value longer
 *    than the rest of the period is several iovecs over the same megabyte,
 *    so even a 64 MiB SET reads its source from the CPU cache, and the
 *    client needs no per-key buffer. GET --check verifies a reply with
 *    memcmp against the same buffer, without having stored anything. Two
 *    keys share a pattern only if their shifts collide (1 in 2^20).
 *
 *  - Replies are parsed incrementally in a per-connection 64 KiB read
 *    buffer and consumed where they lie: nothing is assembled or copied.
 *    Once a bulk payload has at least BENCH_BIG_PAYLOAD bytes still to
 *    come and the read buffer is drained, the socket is read with
 *    readv(sink, rest of the value; readbuf): up to --sink (4 MiB) per
 *    call straight into the thread's sink, the trailing CRLF and the next
 *    reply's header landing in the read buffer in the same call. --check
 *    verifies each chunk right after the read that brought it, while it
 *    is still in cache; so the sink never has to hold a whole value, one
 *    per thread serves all its connections, and it stays cache-resident
 *    (a value-sized sink per connection cost about a third more client
 *    CPU per GB at 16 MiB: every byte then goes to DRAM and back).
 *
 *  - Sockets are non-blocking, TCP_NODELAY, one epoll loop per --threads
 *    thread over its share of the connections. A request batch is written
 *    as soon as it is built (EPOLLOUT is armed only when the socket is
 *    full), so a request costs one writev and one read at P=1.
 *
 *  - Latency: one clock_gettime per batch sent and at most one per read
 *    call that completes replies; every reply in the batch records
 *    (arrival - send) in the thread's log-linear histogram (benchhist.c).
 *
 * Structure. A test is a row of the workload table: a command, how many
 * keys it names, whether it carries values out (SET, MSET) or in (GET,
 * MGET), and whether it runs once per -d size. Requests are handed out to
 * connections from one atomic counter per phase (or until a deadline with
 * --duration), like redis-benchmark's requests_issued. The libmooncake
 * transports (shm/rdma/tcp data plane) will be further rows whose requests
 * are issued by another engine; the table, the phase runner, the
 * statistics and the report are shared.
 *
 * Metadata mode. The store rows (putpair, getrep, batchput, batchget) drive
 * mooncake-server's two-phase put and replica lookup through the same
 * engine: no bytes move, the -d size is only an argument. An "op" of a row
 * may be two commands (PUT.START then PUT.END of the same keys, on the same
 * connection, in one writev); its latency runs from the send to the reply
 * of its last command. Batch rows count one op per key. Their replies nest
 * (a list of per-key results, each a list of replicas), so the parser keeps
 * a small stack of open arrays and counts error and nil elements at the
 * level of a key's result. --segments mounts placeholder segments (metadata
 * only: they are never written) over one extra connection that stays open,
 * so their owner stays alive, for as long as the tests run.
 *
 * Sizing. redis-benchmark's 100,000 requests and 50 clients are made for
 * 64-byte values; at 16 MiB they are 1.6 TB and 800 MiB in flight, and the
 * README's first example ran for a quarter of an hour. So without -n a test
 * is sized by what it moves: BENCH_TEST_BYTES of values (1 GiB, a second or
 * so on a laptop), at least BENCH_MIN_REQUESTS and at most the classic
 * 100,000 requests, with a cap of --max-time seconds per test as a last
 * guard against a slow server; an explicit -n means what it always meant,
 * exactly that many requests and no cap unless --max-time. Tests that move
 * no values (PING, the store rows) keep 100,000. Without -c, the RESP tests
 * keep at most BENCH_INFLIGHT_BYTES of values in flight (fewer than 50
 * clients for values over 5 MiB), and the library rows run one client.
 *
 * Progress. On a terminal (or with --progress) a line shows the running
 * test's requests done, rate, elapsed time and ETA, rewritten in place
 * about 4 times a second by benchprogress.c's thread and erased before the
 * result; the engines only keep a counter it can read (benchThread.done,
 * benchlib.c's lib_done). Not on a terminal, nothing but results is written.
 *
 * Files. This one is the tool: options, set-up, the phases and their
 * threads, the report and --segments. benchconn.c is the RESP engine of
 * the bullets above, one connection's requests built and written and its
 * replies consumed in place; benchmark.h holds what both read (the
 * configuration, the test being run, the conn and thread structs).
 * benchlib.c (the libmooncake rows), benchhist.c (latency histograms) and
 * benchprogress.c (the progress line) are modules of their own.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "anet.h"
#include "benchhist.h"
#include "benchlib.h"
#include "benchmark.h"
#include "benchprogress.h"
#include "mooncake.h"

#define BENCH_SEGMENT_SIZE "1gb"             /* each --segments placeholder */
/* Sizing without -n (see the top of the file). */
#define BENCH_DEFAULT_REQUESTS 100000LL      /* redis-benchmark's; tests that move no values */
#define BENCH_MIN_REQUESTS 32LL              /* enough to be more than a warm-up */
#define BENCH_TEST_BYTES (1ULL << 30)        /* values moved per test */
#define BENCH_DEFAULT_CLIENTS 50
#define BENCH_INFLIGHT_BYTES (256ULL << 20)  /* values in flight at once (clients x request) */
#define BENCH_DEFAULT_MAX_TIME 10.0          /* seconds per test */

/* ---- configuration --------------------------------------------------------- */

/* What -t, -c, -n and the rest set (struct benchConfig: benchmark.h). */
struct benchConfig benchCfg = {
    .host = "127.0.0.1", .port = 6379, .pipeline = 1, .threads = 1, .batch = 16,
    .sink = BENCH_SINK_DEFAULT, .maxtime = -1, .progress = -1,
};

/* ---- the workload table ------------------------------------------------------ */

/* The WL_ flags and the workload type: benchmark.h. */

/* Order matters: tests run in this order whatever the order of -t, so that
 * SET (MSET, PUT pairs) has written the keys that GET (MGET, GET.REPLICAS)
 * then reads. */
static const workload workloads[] = {
    {"ping", "PING", "PING", NULL, 0, 0},
    {"set", "SET", "SET", NULL, 1, WL_SIZED | WL_WRITE},
    {"get", "GET", "GET", NULL, 1, WL_SIZED | WL_READ},
    {"mset", "MSET", "MSET", NULL, 0, WL_SIZED | WL_WRITE | WL_BATCH},
    {"mget", "MGET", "MGET", NULL, 0, WL_SIZED | WL_READ | WL_BATCH},
    {"putpair", "PUT.START+END", "PUT.START", "PUT.END", 1, WL_SIZED | WL_SIZEARG | WL_STORE},
    {"getrep", "GET.REPLICAS", "GET.REPLICAS", NULL, 1, WL_SIZED | WL_REPLICAS | WL_STORE},
    {"batchput", "BATCH.PUT", "BATCH.PUT.START", "BATCH.PUT.END", 0,
     WL_SIZED | WL_BATCH | WL_SIZEARG | WL_NUMKEYS | WL_PERKEY | WL_STORE},
    {"batchget", "BATCH.GET.REPLICAS", "BATCH.GET.REPLICAS", NULL, 0,
     WL_SIZED | WL_BATCH | WL_REPLICAS | WL_PERKEY | WL_STORE},
};
#define WORKLOAD_NAMES "ping,set,get,mset,mget,putpair,getrep,batchput,batchget"
#define LIB_NAMES "memcpy,memcpyhot,rawtcp,mcput,mcget,mcbput,mcbget,mcputv,mcgetv"
#define NWORKLOADS ((int)(sizeof(workloads) / sizeof(workloads[0])))

static int workloadKeys(const workload *w) {
    return (w->flags & WL_BATCH) ? benchCfg.batch : w->keys;
}

/* Value bytes one request of w moves at size vlen; 0 for those that move
 * none (PING, and the store rows, whose -d is only an argument). */
static uint64_t workloadBytes(const workload *w, size_t vlen) {
    if (!(w->flags & (WL_WRITE | WL_READ))) return 0;
    return (uint64_t)vlen * (uint64_t)workloadKeys(w);
}

/* Keys per call of a library row (benchlib.c): --batch for the batch rows. */
static int libBatch(const char *name) {
    return !strcasecmp(name, "mcbput") || !strcasecmp(name, "mcbget") ? benchCfg.batch : 1;
}

static int libBaseline(const char *name) {
    return !strncasecmp(name, "memcpy", 6) || !strcasecmp(name, "rawtcp");
}

/* Requests of one test that moves reqbytes of values per request: -n if
 * given, else what moves BENCH_TEST_BYTES, within [BENCH_MIN_REQUESTS,
 * BENCH_DEFAULT_REQUESTS] (a 16 MiB test: 64 requests, 64 B: 100000). */
static long long planRequests(uint64_t reqbytes) {
    if (benchCfg.requests) return benchCfg.requests;
    if (reqbytes == 0) return BENCH_DEFAULT_REQUESTS;
    uint64_t n = BENCH_TEST_BYTES / reqbytes;
    if (n < (uint64_t)BENCH_MIN_REQUESTS) return BENCH_MIN_REQUESTS;
    if (n > (uint64_t)BENCH_DEFAULT_REQUESTS) return BENCH_DEFAULT_REQUESTS;
    return (long long)n;
}

/* RESP connections when -c is not given: 50, but no more than keep
 * BENCH_INFLIGHT_BYTES of values in flight in the largest test of the run
 * (the connections are opened once for all tests): 16 at 16 MiB, 4 at 64
 * MiB. Memory, not speed, is the point: the server's pool must hold every
 * client's key and every value in flight. */
static int planClients(void) {
    uint64_t most = 0;
    for (int s = 0; s < benchCfg.nsizes; s++) {
        for (int i = 0; i < NWORKLOADS; i++) {
            if (!(benchCfg.tests & (1u << i))) continue;
            uint64_t b = workloadBytes(&workloads[i], benchCfg.sizes[s]);
            if (b > most) most = b;
        }
    }
    most *= (uint64_t)benchCfg.pipeline;
    if (most == 0 || BENCH_INFLIGHT_BYTES / most >= BENCH_DEFAULT_CLIENTS) return BENCH_DEFAULT_CLIENTS;
    return BENCH_INFLIGHT_BYTES / most ? (int)(BENCH_INFLIGHT_BYTES / most) : 1;
}

/* "SET 16MiB", "PING": a test as the progress line and the report name it. */
static void testName(char *buf, size_t len, const char *label, size_t vlen, int sized);

/* ---- shared state of a test ---------------------------------------------------- */

unsigned char *benchPattern;
static int value_iovs;               /* most iovecs one value needs */
const char benchCrlf[2] = {'\r', '\n'};

/* The test being run (struct benchTest, and what a connection and a thread
 * hold: benchmark.h). */
struct benchTest benchCur;

static benchThread *threads;
static conn *conns;
_Atomic int benchBadvalsReported;

/* ---- small helpers --------------------------------------------------------------- */

void benchFatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mooncake-benchmark: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void *benchAlloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) benchFatal("out of memory (%zu bytes)", n);
    return p;
}


/* Anonymous memory, asked for as huge pages (fewer TLB misses when the
 * kernel copies megabytes at a time) and faulted in now, not mid-run. */
static void *benchMapPrefaulted(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) benchFatal("mmap %zu bytes: %s", n, strerror(errno));
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE);
#endif
    memset(p, 0, n);
    return p;
}

/* "64", "4k", "64kb", "1m", "16mb", "1g": binary units. */
static int parseSize(const char *s, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned long long mul = 1;
    if (*end) {
        switch (*end | 0x20) {
        case 'b': mul = 1; break;
        case 'k': mul = 1ULL << 10; break;
        case 'm': mul = 1ULL << 20; break;
        case 'g': mul = 1ULL << 30; break;
        default: return -1;
        }
        end++;
        if (mul > 1 && (*end | 0x20) == 'b') end++;
        if (*end) return -1;
    }
    if (v == 0 || v > (1ULL << 40) / mul) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

static void formatSize(char *buf, size_t len, size_t v) {
    if (v >= (1u << 30) && v % (1u << 30) == 0) snprintf(buf, len, "%zuGiB", v >> 30);
    else if (v >= (1u << 20) && v % (1u << 20) == 0) snprintf(buf, len, "%zuMiB", v >> 20);
    else if (v >= (1u << 10) && v % (1u << 10) == 0) snprintf(buf, len, "%zuKiB", v >> 10);
    else snprintf(buf, len, "%zuB", v);
}

/* ---- connecting ---------------------------------------------------------------------- */

static int connectOne(char *err, size_t errlen) {
    int fd = -1;
    if (benchCfg.unixsock) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(benchCfg.unixsock) >= sizeof(sa.sun_path)) {
            snprintf(err, errlen, "unix socket path too long");
            return -1;
        }
        strcpy(sa.sun_path, benchCfg.unixsock);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd == -1 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
            snprintf(err, errlen, "%s: %s", benchCfg.unixsock, strerror(errno));
            if (fd != -1) close(fd);
            return -1;
        }
    } else {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
        char port[16];
        snprintf(port, sizeof(port), "%d", benchCfg.port);
        int rv = getaddrinfo(benchCfg.host, port, &hints, &res);
        if (rv != 0) {
            snprintf(err, errlen, "%s: %s", benchCfg.host, gai_strerror(rv));
            return -1;
        }
        snprintf(err, errlen, "%s:%d: no address", benchCfg.host, benchCfg.port);
        for (ai = res; ai; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd == -1) continue;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
            snprintf(err, errlen, "%s:%d: %s", benchCfg.host, benchCfg.port, strerror(errno));
            close(fd);
            fd = -1;
        }
        freeaddrinfo(res);
        if (fd == -1) return -1;
        anetEnableTcpNoDelay(NULL, fd);
        /* A same-host server gets requests from an unpaced socket, as the
         * library sends them (anet.c): the client's pacing would otherwise
         * be most of a large SET's cost, equally against any server. */
        anetTuneLocalCongestion(fd);
    }
    if (benchCfg.auth) {
        /* Blocking, once per connection, before the measured loop. */
        char req[1024], rep[512];
        size_t pl = strlen(benchCfg.auth);
        int n = snprintf(req, sizeof(req), "*2\r\n$4\r\nAUTH\r\n$%zu\r\n%s\r\n", pl, benchCfg.auth);
        if (n < 0 || (size_t)n >= sizeof(req) || write(fd, req, (size_t)n) != n) {
            snprintf(err, errlen, "AUTH: cannot send");
            close(fd);
            return -1;
        }
        size_t got = 0;
        while (got < sizeof(rep) - 1 && (got == 0 || rep[got - 1] != '\n')) {
            ssize_t r = read(fd, rep + got, sizeof(rep) - 1 - got);
            if (r <= 0) break;
            got += (size_t)r;
        }
        rep[got] = '\0';
        if (got == 0 || rep[0] != '+') {
            rep[strcspn(rep, "\r\n")] = '\0';
            snprintf(err, errlen, "AUTH failed: %.200s", got ? rep : "connection closed");
            close(fd);
            return -1;
        }
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags == -1 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1) {
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- phases --------------------------------------------------------------------------- */

static void *threadMain(void *arg) {
    benchThread *t = arg;
    t->active = 0;
    for (int i = 0; i < t->nconns; i++) {
        conn *c = t->conns[i];
        c->idle = 0;
        c->nslots = 0;
        c->rstate = RS_LINE;
        if (benchConnIssue(c)) t->active++;
        else c->idle = 1;
    }
    struct epoll_event ev[BENCH_MAX_EVENTS];
    while (t->active > 0) {
        int n = epoll_wait(t->epfd, ev, BENCH_MAX_EVENTS, 1000);
        if (n < 0) {
            if (errno == EINTR) continue;
            benchFatal("epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            conn *c = ev[i].data.ptr;
            if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) benchConnRead(c);
            if ((ev[i].events & EPOLLOUT) && c->wantwrite) benchConnWrite(c);
        }
    }
    return NULL;
}

/* Requests completed so far in the running phase (progress thread). */
static uint64_t phaseDone(void *arg) {
    (void)arg;
    uint64_t n = 0;
    for (int i = 0; i < benchCfg.threads; i++)
        n += atomic_load_explicit(&threads[i].done, memory_order_relaxed);
    return n;
}

/* When a phase that started at `start` stops issuing: the end of
 * --duration (timed phases), or the --max-time cap, whichever is sooner;
 * 0 for neither. */
static uint64_t phaseDeadline(uint64_t start, int timed) {
    uint64_t dl = timed ? start + (uint64_t)(benchCfg.duration * 1e9) : 0;
    if (benchCfg.maxtime > 0) {
        uint64_t cap = start + (uint64_t)(benchCfg.maxtime * 1e9);
        if (!dl || cap < dl) dl = cap;
    }
    return dl;
}

/* Runs one phase of the current test on all threads; returns its length in ns. */
static uint64_t runPhase(long long requests, int record) {
    int timed = benchCfg.duration > 0 && record;
    benchCur.record = record;
    benchCur.limit = timed ? LLONG_MAX : requests;
    atomic_store(&benchCur.issued, 0);
    for (int i = 0; i < benchCfg.threads; i++) {
        benchThread *t = &threads[i];
        histReset(&t->st.lat);
        t->st.ops = t->st.bytes = t->st.errors = t->st.misses = t->st.badvals = 0;
        t->st.firsterr[0] = '\0';
        t->last_ns = 0;
        atomic_store(&t->done, 0);
    }
    for (int i = 0; i < benchCfg.clients; i++) benchConnPrepare(&conns[i]);
    atomic_store(&benchBadvalsReported, 0);
    char name[80], label[96];
    testName(name, sizeof(name), benchCur.w->label, benchCur.vlen, (benchCur.w->flags & WL_SIZED) != 0);
    snprintf(label, sizeof(label), "%s%s", name, record ? "" : " warm-up");
    uint64_t start = nowNs();
    benchCur.deadline = phaseDeadline(start, timed);
    progressStart(label, timed ? -1 : benchCur.limit, start, benchCur.deadline, phaseDone, NULL);
    if (benchCfg.threads == 1) {
        threadMain(&threads[0]);
    } else {
        for (int i = 0; i < benchCfg.threads; i++)
            if (pthread_create(&threads[i].tid, NULL, threadMain, &threads[i]) != 0)
                benchFatal("pthread_create failed");
        for (int i = 0; i < benchCfg.threads; i++) pthread_join(threads[i].tid, NULL);
    }
    progressStop();
    uint64_t end = start;
    for (int i = 0; i < benchCfg.threads; i++)
        if (threads[i].last_ns > end) end = threads[i].last_ns;
    return end - start;
}

/* ---- reporting -------------------------------------------------------------------------- */

static int failed;

static void testName(char *buf, size_t len, const char *label, size_t vlen, int sized) {
    char size[32] = "";
    if (sized) formatSize(size, sizeof(size), vlen);
    snprintf(buf, len, "%s%s%s", label, size[0] ? " " : "", size);
}

/* One row of output, whichever engine measured it; desc is the detail
 * line of the long format (what ran, with how many clients). */
static void printRow(const char *label, size_t vlen, int sized, benchStats *sum, double secs, const char *desc) {
    if (secs <= 0) secs = 1e-9;
    double ops = sum->ops / secs, gbs = sum->bytes / secs / 1e9;
    double p50 = histPercentile(&sum->lat, 50) / 1e6, p99 = histPercentile(&sum->lat, 99) / 1e6;
    double p999 = histPercentile(&sum->lat, 99.9) / 1e6, max = sum->lat.max / 1e6;
    char size[32] = "", name[80];
    if (sized) formatSize(size, sizeof(size), vlen);
    testName(name, sizeof(name) - 1, label, vlen, sized);   /* room for the ':' of -q */
    if (benchCfg.check && (sum->errors || sum->badvals)) failed = 1;

    if (benchCfg.csv) {
        printf("\"%s\",\"%s\",%zu,%llu,%.3f,%.2f,%.4f,%.3f,%.3f,%.3f,%.3f,%llu,%llu,%llu\n",
               label, size, vlen, (unsigned long long)sum->ops, secs, ops, gbs, p50, p99, p999,
               max, (unsigned long long)sum->errors, (unsigned long long)sum->misses,
               (unsigned long long)sum->badvals);
    } else if (benchCfg.quiet) {
        strcat(name, ":");
        printf("%-13s %12.2f ops/s %8.3f GB/s  p50 %.3f p99 %.3f p99.9 %.3f max %.3f ms", name,
               ops, gbs, p50, p99, p999, max);
        if (sum->errors) printf("  errors %llu", (unsigned long long)sum->errors);
        if (sum->misses) printf("  nil %llu", (unsigned long long)sum->misses);
        if (sum->badvals) printf("  BAD %llu", (unsigned long long)sum->badvals);
        if (sum->capped) printf("  (max-time %g s)", benchCfg.maxtime);
        if (sum->first_ns) printf("  first %.3f ms", sum->first_ns / 1e6);
        printf("\n");
    } else {
        printf("====== %s ======\n", name);
        printf("  %llu %s\n", (unsigned long long)sum->ops, desc);
        printf("  elapsed: %.3f s\n", secs);
        if (sum->capped)
            printf("  stopped by --max-time %g s after %llu requests (-n or --max-time 0: run them all)\n",
                   benchCfg.maxtime, (unsigned long long)sum->requests);
        printf("  throughput: %.2f ops/s, %.3f GB/s\n", ops, gbs);
        printf("  latency (ms): p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", p50, p99, p999, max);
        if (sum->first_ns)
            printf("  first call of a fresh handle (not in the figures above): %.3f ms\n", sum->first_ns / 1e6);
        printf("  errors: %llu", (unsigned long long)sum->errors);
        if (sum->misses) printf(", nil replies: %llu", (unsigned long long)sum->misses);
        if (benchCfg.check) printf(", verification failures: %llu", (unsigned long long)sum->badvals);
        printf("\n");
    }
    if (sum->firsterr[0]) fprintf(stderr, "  first error (%s): %s\n", label, sum->firsterr);
    fflush(stdout);
}

static void report(const workload *w, size_t vlen, uint64_t elapsed) {
    static benchStats sum;
    histReset(&sum.lat);
    sum.ops = sum.bytes = sum.errors = sum.misses = sum.badvals = 0;
    sum.firsterr[0] = '\0';
    sum.requests = phaseDone(NULL);
    sum.capped = benchCur.limit != LLONG_MAX && sum.requests < (uint64_t)benchCur.limit;
    for (int i = 0; i < benchCfg.threads; i++) {
        benchStats *st = &threads[i].st;
        histMerge(&sum.lat, &st->lat);
        sum.ops += st->ops;
        sum.bytes += st->bytes;
        sum.errors += st->errors;
        sum.misses += st->misses;
        sum.badvals += st->badvals;
        if (!sum.firsterr[0] && st->firsterr[0]) snprintf(sum.firsterr, sizeof(sum.firsterr), "-%.250s", st->firsterr);
    }
    char ks[64], desc[512];
    if (benchCfg.keyspace)
        snprintf(ks, sizeof(ks), "%s keys in [0,%lld)", benchCfg.sequential ? "sequential" : "random",
                 benchCfg.keyspace);
    else if (benchCur.nkeys == 0) snprintf(ks, sizeof(ks), "no keys");
    else snprintf(ks, sizeof(ks), "%s per client", (w->flags & WL_BATCH) ? "keys" : "one key");
    int n = snprintf(desc, sizeof(desc), "%s, %d clients, pipeline %d, %d thread%s, %s",
                     (w->flags & WL_PERKEY) ? "keys" : w->cmd2 ? "command pairs" : "requests",
                     benchCfg.clients, benchCfg.pipeline, benchCfg.threads, benchCfg.threads == 1 ? "" : "s", ks);
    if (w->flags & WL_BATCH) n += snprintf(desc + n, sizeof(desc) - (size_t)n, ", %d keys per command", benchCfg.batch);
    if ((w->flags & WL_SIZEARG) && benchCfg.replicas)
        snprintf(desc + n, sizeof(desc) - (size_t)n, ", %d replicas", benchCfg.replicas);
    printRow(w->label, vlen, (w->flags & WL_SIZED) != 0, &sum, elapsed / 1e9, desc);
}

/* A libmooncake row or a baseline (benchlib.c). */
static void runLibTest(const char *name, size_t vlen) {
    static const char *tnames[] = {"auto", "shm", "tcp", "rdma"};
    char uri[300], label[64], desc[256], progresslabel[80];
    benchLibConfig lc = {.uri = uri, .auth = benchCfg.auth, .clients = benchCfg.libclients,
                         .requests = planRequests((uint64_t)vlen * (uint64_t)libBatch(name)),
                         .duration = benchCfg.duration, .maxtime = benchCfg.maxtime,
                         .transport = benchCfg.transport, .streams = benchCfg.streams, .batch = benchCfg.batch,
                         .iov = benchCfg.iov, .span = benchCfg.span,
                         .replicas = benchCfg.replicas, .check = benchCfg.check, .label = progresslabel,
                         .warmup = benchCfg.warmup};
    if (benchCfg.unixsock) snprintf(uri, sizeof(uri), "unix://%s", benchCfg.unixsock);
    else snprintf(uri, sizeof(uri), strchr(benchCfg.host, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", benchCfg.host, benchCfg.port);
    int baseline = libBaseline(name);
    int batch = !strcasecmp(name, "mcbput") || !strcasecmp(name, "mcbget");
    if (baseline) snprintf(label, sizeof(label), "%s", benchLibLabel(name));
    else if (benchCfg.streams > 0)
        snprintf(label, sizeof(label), "%s %s x%d", benchLibLabel(name), tnames[benchCfg.transport], benchCfg.streams);
    else snprintf(label, sizeof(label), "%s %s", benchLibLabel(name), tnames[benchCfg.transport]);
    if (!strcasecmp(name, "mcputv") || !strcasecmp(name, "mcgetv")) {
        size_t l = strlen(label);
        snprintf(label + l, sizeof(label) - l, " iov%d", benchCfg.iov > 0 ? benchCfg.iov : 1);
    }
    testName(progresslabel, sizeof(progresslabel), label, vlen, 1);
    if (baseline) snprintf(desc, sizeof(desc), "copies, one thread (baseline)");
    else snprintf(desc, sizeof(desc), "%s, %d client threads (one handle each), transport %s%s",
                  batch ? "keys" : "calls", benchCfg.libclients, tnames[benchCfg.transport],
                  batch ? ", batched" : "");
    static benchStats st;
    double secs;
    if (benchLibRun(name, vlen, &lc, &st, &secs) != 0) {
        failed = 1;
        return;
    }
    printRow(label, vlen, 1, &st, secs, desc);
}

static void runTest(const workload *w, size_t vlen) {
    benchCur.w = w;
    benchCur.vlen = vlen;
    benchCur.nkeys = workloadKeys(w);
    if (benchCfg.warmup > 0) runPhase(benchCfg.warmup, 0);
    uint64_t elapsed = runPhase(planRequests(workloadBytes(w, vlen)), 1);
    report(w, vlen, elapsed);
}

/* ---- set-up ------------------------------------------------------------------------------ */

static void usage(int code) {
    FILE *f = code ? stderr : stdout;
    fprintf(f,
"Usage: mooncake-benchmark [options]\n"
"\n"
"Load generator for any RESP server (mooncake-server, redis-server): pre-built\n"
"requests, values sent from one shared buffer with writev and received without\n"
"user-space copies, so that large values measure the server, not the client.\n"
"\n"
" -h <host>          server host (default 127.0.0.1)\n"
" -p <port>          server port (default 6379)\n"
" -s <socket>        server unix socket (overrides host and port)\n"
" -a <password>      AUTH with this password on every connection\n"
" -c <clients>       parallel connections (default 50, fewer when values are\n"
"                    large: at most 256 MiB of values in flight, 16 clients\n"
"                    at 16m, 4 at 64m; library rows: 1)\n"
" -n <requests>      requests per test, exactly (default: sized per test to\n"
"                    move 1 GiB of values, 32 to 100000 requests: 16m -> 64,\n"
"                    1m -> 1024, 8k and smaller -> 100000; tests that move no\n"
"                    values, ping and the store tests, 100000)\n"
" -d <sizes>         value sizes, comma separated, binary units:\n"
"                    64,4k,64k,1m,4m,16m,64m (default 64)\n"
" -t <tests>         comma separated: ping,set,get,mset,mget, and the store\n"
"                    (metadata) tests putpair,getrep,batchput,batchget\n"
"                    (default set,get); they always run in that order, once per\n"
"                    size (ping once)\n"
" -P <pipeline>      requests per connection in flight (default 1)\n"
" -r <keyspace>      random keys key:<size>:NNNNNNNNNNNN in [0,keyspace)\n"
"                    (default: one key per client, --batch keys per client for\n"
"                    batch tests)\n"
" -q                 quiet: one line per test\n"
" --threads <n>      client threads, each an epoll loop over its connections (default 1)\n"
" --batch <n>        keys per MSET/MGET/BATCH.* command (default 16)\n"
" --sequential       with -r: request i names key i mod keyspace (batch: keys\n"
"                    i*batch..), counted over all clients; so -n N -r N writes\n"
"                    every key once\n"
" --check            verify every byte of every GET/MGET reply against the\n"
"                    pattern SET wrote; exit 1 on any mismatch or error reply\n"
" --csv              CSV output\n"
" --duration <s>     run each test for s seconds instead of -n requests\n"
" --max-time <s>     stop issuing a test's requests after s seconds and report\n"
"                    what ran (default 10 without -n or --duration, else\n"
"                    none; 0: none)\n"
" --progress         show the running test's progress (requests done, rate,\n"
"                    elapsed, ETA), rewritten in place with '\\r' about 4\n"
"                    times a second and erased before its result (default: on\n"
"                    when stdout is a terminal, without --csv)\n"
" --no-progress      never show it\n"
" --warmup <n>       n unmeasured requests before each test (library rows: n\n"
"                    calls per client, the first call among them)\n"
" --sink <size>      per-thread buffer that large values are read into, at most\n"
"                    this much per read() (default 4m; larger values pass\n"
"                    through it in pieces, each verified right after its read)\n"
" --transport <t>    library rows: auto, shm, tcp or rdma (default auto)\n"
" --streams <n>      library rows: tcp connections one transfer may use at\n"
"                    once, 1..16 (mc_set_streams; default: the library's,\n"
"                    1 to a same-host peer, else one per CPU up to 4)\n"
" --iov <n>          mcputv/mcgetv: buffers each value is split into, 1..1024\n"
"                    (default 1)\n"
" --span <size>      library rows: each client cycles through this many bytes\n"
"                    of distinct keys and buffers, a batch per call (default:\n"
"                    the same batch every call, cache-warm); an engine's\n"
"                    working set: a put row writes each key once per span, a\n"
"                    get row after it reads them in turn\n"
" --help             this text\n"
" --version          print the version (the top-level VERSION file's)\n"
"\n"
"Store (metadata) tests, mooncake-server only. No value bytes move; -d is the\n"
"size PUT.START reserves, and keys are reserved with REPLACE, so runs may repeat:\n"
"  putpair    PUT.START key size [REPLICAS r] REPLACE, then PUT.END key on the\n"
"             same connection; the pair is one op (-P N: N pairs, 2N commands)\n"
"  getrep     GET.REPLICAS key (a nil reply counts as nil)\n"
"  batchput   BATCH.PUT.START n k1 size .. kn size [REPLICAS r] REPLACE, then\n"
"             BATCH.PUT.END k1 .. kn; one op per key\n"
"  batchget   BATCH.GET.REPLICAS k1 .. kn; one op per key\n"
"-n, --warmup and the sizing count requests (a batch command or a PUT pair is\n"
"one; the sizing counts --batch values per batch command). With -r,\n"
"two keys of one batch may collide (an -EXISTS element): --sequential avoids it.\n"
" --replicas <r>     REPLICAS r on PUT.START/BATCH.PUT.START (default: the\n"
"                    server's default-replicas)\n"
" --segments <n>     before the tests, MOUNT n placeholder segments of " BENCH_SEGMENT_SIZE " each\n"
"                    (bench-seg-<i>, OWNER mooncake-benchmark, HOST bench-host-<i/2>)\n"
"                    over an extra connection kept open while the tests run,\n"
"                    and UNMOUNT them at the end. Only works against\n"
"                    mooncake-server; the segments are metadata only (the\n"
"                    store tests never write them)\n"
"\n"
"libmooncake rows (each client a thread with its own handle, one call at a time,\n"
"one client unless -c; -n counts calls, a batch call of --batch keys counts once\n"
"but reports per key; without -n they are sized like the RESP tests, by the\n"
"values a call moves):\n"
"  mcput mcget      mc_put / mc_get of -d bytes through --transport\n"
"  mcbput mcbget    mc_batch_put / mc_batch_get of --batch keys\n"
"  mcputv mcgetv    mc_put_fromv / mc_get_intov of -d bytes in --iov equal\n"
"                   buffers (default 1) of one registered value buffer\n"
"  memcpy rawtcp    baselines in the same run: one-thread memcpy into a 512 MiB\n"
"                   arena (memcpyhot: between two cached buffers), and one\n"
"                   loopback TCP stream written 4 MiB per call\n"
"\n"
"Output per test and size: ops/s, GB/s (value bytes, 10^9), latency percentiles\n"
"p50/p99/p99.9/max in ms (2 significant digits), error replies (the first is\n"
"printed). Error and nil elements inside batch replies are counted one per key.\n"
"Exit status 1 if a connection fails, or with --check if any error reply or\n"
"verification failure was seen (for getrep/batchget --check verifies the size\n"
"and that at least one replica is listed).\n");
    exit(code);
}

static long long argNum(const char *opt, const char *v, long long min, long long max) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < min || n > max)
        benchFatal("invalid value for %s: '%s' (expected %lld..%lld)", opt, v, min, max);
    return n;
}

static void parseSizes(const char *arg) {
    char *s = strdup(arg), *save = NULL;
    if (!s) benchFatal("out of memory");
    benchCfg.nsizes = 0;
    free(benchCfg.sizes);
    benchCfg.sizes = benchAlloc(sizeof(size_t) * (strlen(arg) + 1));
    for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (parseSize(tok, &benchCfg.sizes[benchCfg.nsizes]) == -1)
            benchFatal("invalid size '%s' in -d", tok);
        benchCfg.nsizes++;
    }
    free(s);
    if (benchCfg.nsizes == 0) benchFatal("-d needs at least one size");
}

static void parseTests(const char *arg) {
    char *s = strdup(arg), *save = NULL;
    if (!s) benchFatal("out of memory");
    benchCfg.tests = 0;
    for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int i;
        for (i = 0; i < NWORKLOADS; i++)
            if (strcasecmp(tok, workloads[i].name) == 0) break;
        if (i == NWORKLOADS && benchLibLabel(tok)) {
            if (benchCfg.nlibtests == 16) benchFatal("too many tests");
            benchCfg.libtests[benchCfg.nlibtests++] = strdup(tok);
            continue;
        }
        if (i == NWORKLOADS) benchFatal("unknown test '%s' (known: " WORKLOAD_NAMES "," LIB_NAMES ")", tok);
        benchCfg.tests |= 1u << i;
    }
    free(s);
    if (!benchCfg.tests && !benchCfg.nlibtests) benchFatal("-t needs at least one test");
}

static void parseOptions(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        int last = i == argc - 1;
        if (!strcmp(o, "--help")) usage(0);
        if (!strcmp(o, "--version")) {
            printf("mooncake-benchmark %s\n", MOONCAKE_VERSION);
            exit(0);
        }
        if (!strcmp(o, "-q")) { benchCfg.quiet = 1; continue; }
        if (!strcmp(o, "--check")) { benchCfg.check = 1; continue; }
        if (!strcmp(o, "--csv")) { benchCfg.csv = 1; continue; }
        if (!strcmp(o, "--sequential")) { benchCfg.sequential = 1; continue; }
        if (!strcmp(o, "--progress")) { benchCfg.progress = 1; continue; }
        if (!strcmp(o, "--no-progress")) { benchCfg.progress = 0; continue; }
        /* Every option below takes a value. An unknown one is named as unknown
         * wherever it stands: checking for a value first called a last
         * `--bogus` "needs a value (or is unknown)", and let a known option
         * given last pass for a typo. */
        static const char *const valued[] = {"-h", "-p", "-s", "-a", "-c", "-n", "-d", "-t", "-P", "-r",
            "--threads", "--batch", "--warmup", "--replicas", "--segments", "--streams", "--iov",
            "--transport", "--duration", "--max-time", "--span", "--sink", NULL};
        int known = 0;
        for (int k = 0; valued[k] && !known; k++) known = !strcmp(o, valued[k]);
        if (!known) {
            fprintf(stderr, "mooncake-benchmark: unknown option %s\n\n", o);
            usage(1);
        }
        if (last) {
            fprintf(stderr, "mooncake-benchmark: option %s needs a value\n\n", o);
            usage(1);
        }
        const char *v = argv[++i];
        if (!strcmp(o, "-h")) benchCfg.host = v;
        else if (!strcmp(o, "-p")) benchCfg.port = (int)argNum(o, v, 1, 65535);
        else if (!strcmp(o, "-s")) benchCfg.unixsock = v;
        else if (!strcmp(o, "-a")) benchCfg.auth = v;
        else if (!strcmp(o, "-c")) benchCfg.clients = (int)argNum(o, v, 1, 100000);
        else if (!strcmp(o, "-n")) benchCfg.requests = argNum(o, v, 1, LLONG_MAX / 4);
        else if (!strcmp(o, "-d")) parseSizes(v);
        else if (!strcmp(o, "-t")) parseTests(v);
        else if (!strcmp(o, "-P")) benchCfg.pipeline = (int)argNum(o, v, 1, 100000);
        else if (!strcmp(o, "-r")) benchCfg.keyspace = argNum(o, v, 1, 999999999999LL);
        else if (!strcmp(o, "--threads")) benchCfg.threads = (int)argNum(o, v, 1, 1024);
        else if (!strcmp(o, "--batch")) benchCfg.batch = (int)argNum(o, v, 1, 100000);
        else if (!strcmp(o, "--warmup")) benchCfg.warmup = argNum(o, v, 0, LLONG_MAX / 4);
        else if (!strcmp(o, "--replicas")) benchCfg.replicas = (int)argNum(o, v, 1, 64);
        else if (!strcmp(o, "--segments")) benchCfg.segments = (int)argNum(o, v, 0, 100000);
        else if (!strcmp(o, "--streams")) benchCfg.streams = (int)argNum(o, v, 1, 16);
        else if (!strcmp(o, "--iov")) benchCfg.iov = (int)argNum(o, v, 1, 1024);
        else if (!strcmp(o, "--transport")) {
            if (!strcasecmp(v, "auto")) benchCfg.transport = MC_TRANSPORT_AUTO;
            else if (!strcasecmp(v, "shm")) benchCfg.transport = MC_TRANSPORT_SHM;
            else if (!strcasecmp(v, "tcp")) benchCfg.transport = MC_TRANSPORT_TCP;
            else if (!strcasecmp(v, "rdma")) benchCfg.transport = MC_TRANSPORT_RDMA;
            else benchFatal("invalid value for --transport: '%s' (auto, shm, tcp or rdma)", v);
        }
        else if (!strcmp(o, "--duration")) {
            char *end;
            benchCfg.duration = strtod(v, &end);
            if (*end || !(benchCfg.duration > 0) || benchCfg.duration > 1e6)
                benchFatal("invalid value for --duration: '%s'", v);
        } else if (!strcmp(o, "--max-time")) {
            char *end;
            benchCfg.maxtime = strtod(v, &end);
            if (end == v || *end || !(benchCfg.maxtime >= 0) || benchCfg.maxtime > 1e6)
                benchFatal("invalid value for --max-time: '%s'", v);
        } else if (!strcmp(o, "--span")) {
            if (parseSize(v, &benchCfg.span) == -1) benchFatal("invalid value for --span: '%s'", v);
        } else if (!strcmp(o, "--sink")) {
            if (parseSize(v, &benchCfg.sink) == -1 || benchCfg.sink < BENCH_BIG_PAYLOAD)
                benchFatal("invalid value for --sink: '%s' (at least 64k)", v);
        }
    }
    if (!benchCfg.sizes) parseSizes("64");
    if (!benchCfg.tests && !benchCfg.nlibtests) parseTests("set,get");
    /* Library rows default to one client, like the baselines they are
     * compared with: each client is a thread with its own handle (the
     * handles of the process share one mapping of each segment, mc_shm.c). */
    benchCfg.libclients = benchCfg.clients ? benchCfg.clients : 1;
    if (!benchCfg.clients) benchCfg.clients = planClients();
    if (benchCfg.maxtime < 0)
        benchCfg.maxtime = benchCfg.requests || benchCfg.duration > 0 ? 0 : BENCH_DEFAULT_MAX_TIME;
    if (benchCfg.progress < 0) benchCfg.progress = isatty(STDOUT_FILENO) && !benchCfg.csv;
    if (benchCfg.threads > benchCfg.clients) benchCfg.threads = benchCfg.clients;
    if (!benchCfg.keyspace && (long long)benchCfg.clients * benchCfg.batch > 999999999999LL)
        benchFatal("too many keys");
    if (benchCfg.sequential && !benchCfg.keyspace) benchFatal("--sequential needs -r");
}

static void setup(void) {
    size_t maxsize = 0, maxread = 0;
    int maxkeys = 1;
    for (int s = 0; s < benchCfg.nsizes; s++)
        if (benchCfg.sizes[s] > maxsize) maxsize = benchCfg.sizes[s];
    for (int i = 0; i < NWORKLOADS; i++) {
        if (!(benchCfg.tests & (1u << i))) continue;
        int nk = workloadKeys(&workloads[i]);
        if (nk > maxkeys) maxkeys = nk;
        if (workloads[i].flags & WL_READ) maxread = maxsize;
    }

    /* The value pattern: one pseudo-random period, written here so it is
     * faulted in before the first request. */
    benchPattern = benchMapPrefaulted(BENCH_PATTERN_PERIOD);
    uint64_t x = 0x6d6f6f6e63616b65ULL;   /* "mooncake" */
    for (size_t i = 0; i < BENCH_PATTERN_PERIOD; i += 8) {
        uint64_t r = splitmix64(x++);
        memcpy(benchPattern + i, &r, 8);
    }
    value_iovs = (int)(maxsize / BENCH_PATTERN_PERIOD) + 2;

    /* A sink per thread for payloads read back, only if some are big. */
    size_t sinkcap = 0;
    if (maxread >= BENCH_BIG_PAYLOAD) sinkcap = maxread < benchCfg.sink ? maxread : benchCfg.sink;

    threads = benchAlloc(sizeof(benchThread) * (size_t)benchCfg.threads);
    for (int i = 0; i < benchCfg.threads; i++) {
        benchThread *t = &threads[i];
        t->id = i;
        t->rng = splitmix64((uint64_t)i + 1) | 1;
        t->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (t->epfd == -1) benchFatal("epoll_create1: %s", strerror(errno));
        t->conns = benchAlloc(sizeof(conn *) * (size_t)(benchCfg.clients / benchCfg.threads + 1));
        t->sinkcap = sinkcap;
        if (sinkcap) t->sink = benchMapPrefaulted(sinkcap);
    }

    conns = benchAlloc(sizeof(conn) * (size_t)benchCfg.clients);
    size_t slots = (size_t)benchCfg.pipeline * (size_t)maxkeys;
    for (int i = 0; i < benchCfg.clients; i++) {
        conn *c = &conns[i];
        char err[256];
        c->id = i;
        c->fd = connectOne(err, sizeof(err));
        if (c->fd == -1) benchFatal("could not connect: %s", err);
        c->t = &threads[i % benchCfg.threads];
        c->t->conns[c->t->nconns++] = c;
        c->keys = benchAlloc(sizeof(uint64_t) * slots);
        c->hdrs = benchAlloc(sizeof(khdr) * slots);
        /* Per request: prefix, then per key header + value + CRLF, or for
         * a batch pair: prefix, headers, options, prefix2, second parts. */
        c->iov = benchAlloc(sizeof(struct iovec) * (size_t)benchCfg.pipeline *
                            (4 + (2 + (size_t)value_iovs) * (size_t)maxkeys));
        c->rbuf = benchAlloc(BENCH_RBUF_SIZE);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(c->t->epfd, EPOLL_CTL_ADD, c->fd, &ev) == -1)
            benchFatal("epoll_ctl: %s", strerror(errno));
    }
}

/* ---- --segments: placeholder segments -------------------------------------------------------- */

static int admin_fd = -1;           /* the connection that mounted them, open until exit */

/* Sends one command over the blocking admin connection and reads its
 * reply, which must be one line (+, -, :): MOUNT and UNMOUNT answer so.
 * The line, without its type byte and CRLF, goes to rep. Returns the type
 * byte. */
static char adminCommand(char *rep, size_t replen, int argc, const char **argv) {
    char req[1024];
    size_t n = (size_t)snprintf(req, sizeof(req), "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        if (n + strlen(argv[i]) + 32 > sizeof(req)) benchFatal("admin command too long");
        n += (size_t)benchPutArg(req + n, argv[i]);
    }
    for (size_t off = 0; off < n;) {
        ssize_t w = write(admin_fd, req + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) benchFatal("%s: write: %s", argv[0], strerror(errno));
        off += (size_t)w;
    }
    char line[1024];
    size_t got = 0;
    while (got == 0 || line[got - 1] != '\n') {
        if (got == sizeof(line) - 1) benchFatal("%s: reply line too long", argv[0]);
        ssize_t r = read(admin_fd, line + got, 1);   /* one line, a few times per run */
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) benchFatal("%s: %s", argv[0], r == 0 ? "server closed the connection" : strerror(errno));
        got += (size_t)r;
    }
    line[got] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    size_t len = strlen(line + 1);
    if (len >= replen) len = replen - 1;
    memcpy(rep, line + 1, len);
    rep[len] = '\0';
    return line[0];
}

/* MOUNTs --segments placeholder segments over a connection of their own,
 * kept open until exit: an owner lives while a connection that mounted for
 * it is open, so the segments last as long as the run without HEARTBEATs.
 * HOST cycles over about n/2 names (two segments per host), so placement
 * that spreads replicas over distinct hosts has choices to make. */
static void segmentsMount(void) {
    if (benchCfg.segments <= 0) return;
    char err[256];
    admin_fd = connectOne(err, sizeof(err));
    if (admin_fd == -1) benchFatal("could not connect for --segments: %s", err);
    int flags = fcntl(admin_fd, F_GETFL);
    if (flags == -1 || fcntl(admin_fd, F_SETFL, flags & ~O_NONBLOCK) == -1)
        benchFatal("fcntl: %s", strerror(errno));
    for (int i = 0; i < benchCfg.segments; i++) {
        char name[48], host[48], rep[512];
        snprintf(name, sizeof(name), "bench-seg-%d", i);
        snprintf(host, sizeof(host), "bench-host-%d", i / 2);
        const char *argv[] = {"MOUNT", name, BENCH_SEGMENT_SIZE, "OWNER", "mooncake-benchmark",
                              "HOST", host};
        char type = adminCommand(rep, sizeof(rep), 7, argv);
        if (type != ':')
            benchFatal("MOUNT %s failed: %c%s (--segments only works against mooncake-server)",
                       name, type, rep);
    }
    if (!benchCfg.quiet && !benchCfg.csv)
        printf("mounted %d segments of %s (bench-seg-0..%d on %d hosts)\n", benchCfg.segments,
               BENCH_SEGMENT_SIZE, benchCfg.segments - 1, (benchCfg.segments + 1) / 2);
}

static void segmentsUnmount(void) {
    if (admin_fd == -1) return;
    long long dropped = 0;
    for (int i = 0; i < benchCfg.segments; i++) {
        char name[48], rep[512];
        snprintf(name, sizeof(name), "bench-seg-%d", i);
        const char *argv[] = {"UNMOUNT", name};
        char type = adminCommand(rep, sizeof(rep), 2, argv);
        if (type == ':') dropped += atoll(rep);
        else fprintf(stderr, "mooncake-benchmark: UNMOUNT %s: %c%s\n", name, type, rep);
    }
    if (!benchCfg.quiet && !benchCfg.csv)
        printf("unmounted %d segments (%lld replicas dropped)\n", benchCfg.segments, dropped);
    close(admin_fd);
    admin_fd = -1;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    parseOptions(argc, argv);
    progressInit(stdout, benchCfg.progress);
    if (benchCfg.tests) {
        setup();
        segmentsMount();
    }
    if (benchCfg.csv)
        printf("\"test\",\"size\",\"bytes\",\"requests\",\"seconds\",\"ops_per_sec\",\"gb_per_sec\","
               "\"p50_ms\",\"p99_ms\",\"p999_ms\",\"max_ms\",\"errors\",\"nil\",\"bad_values\"\n");
    for (int i = 0; i < NWORKLOADS; i++)
        if ((benchCfg.tests & (1u << i)) && !(workloads[i].flags & WL_SIZED)) runTest(&workloads[i], 0);
    for (int s = 0; s < benchCfg.nsizes; s++) {
        for (int i = 0; i < NWORKLOADS; i++)
            if ((benchCfg.tests & (1u << i)) && (workloads[i].flags & WL_SIZED))
                runTest(&workloads[i], benchCfg.sizes[s]);
        for (int i = 0; i < benchCfg.nlibtests; i++) runLibTest(benchCfg.libtests[i], benchCfg.sizes[s]);
    }
    if (benchCfg.tests) segmentsUnmount();
    return failed;
}
