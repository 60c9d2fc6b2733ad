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
#include "benchprogress.h"
#include "mooncake.h"

#define BENCH_RBUF_SIZE (64 * 1024)          /* per-connection read buffer */
#define BENCH_BIG_PAYLOAD (64 * 1024)        /* payload rest read straight into the sink */
#define BENCH_KEY_DIGITS 12                  /* key:<size>:NNNNNNNNNNNN */
#define BENCH_PATTERN_PERIOD (1u << 20)      /* the pattern repeats every 1 MiB */
#define BENCH_HDR_MAX 192                    /* one pre-built request/key header */
#define BENCH_SINK_DEFAULT (4u << 20)        /* a thread's sink, unless --sink */
#define BENCH_MAX_EVENTS 64
#define BENCH_MAX_REPORTED 5                 /* verification failures printed per test */
#define BENCH_MAX_DEPTH 8                    /* nested arrays in one reply */
#define BENCH_SEGMENT_SIZE "1gb"             /* each --segments placeholder */
/* Sizing without -n (see the top of the file). */
#define BENCH_DEFAULT_REQUESTS 100000LL      /* redis-benchmark's; tests that move no values */
#define BENCH_MIN_REQUESTS 32LL              /* enough to be more than a warm-up */
#define BENCH_TEST_BYTES (1ULL << 30)        /* values moved per test */
#define BENCH_DEFAULT_CLIENTS 50
#define BENCH_INFLIGHT_BYTES (256ULL << 20)  /* values in flight at once (clients x request) */
#define BENCH_DEFAULT_MAX_TIME 10.0          /* seconds per test */

/* ---- configuration --------------------------------------------------------- */

static struct benchConfig {
    const char *host;
    int port;
    const char *unixsock;
    const char *auth;
    int clients;              /* 0 until parsed: -c, or planned (planClients) */
    int libclients;           /* library rows: -c, or 1 (see parseOptions) */
    long long requests;       /* -n; 0: sized per test (planRequests) */
    size_t *sizes;
    int nsizes;
    unsigned tests;           /* bit i: workloads[i] selected */
    int pipeline;
    int threads;
    long long keyspace;       /* -r; 0: one key (or one batch of keys) per client */
    int batch;                /* keys per MSET/MGET */
    int check;
    int csv;
    int quiet;
    double duration;          /* seconds; 0: run -n requests */
    double maxtime;           /* --max-time: cap per test in seconds, 0: none; -1: not given */
    int progress;             /* live progress line: 1 on, 0 off, -1: on a terminal */
    long long warmup;
    size_t sink;              /* a thread's sink for big payloads */
    int sequential;           /* -r keys in order: request i names key i mod keyspace */
    int replicas;             /* REPLICAS n of PUT.START / BATCH.PUT.START; 0: server default */
    int segments;             /* placeholder segments mounted before the tests */
    const char *libtests[16]; /* libmooncake rows and baselines (benchlib.c), in -t order */
    int nlibtests;
    int transport;            /* --transport for the library rows */
    int streams;              /* --streams for the library rows */
    int iov;                  /* --iov: buffers per mcputv/mcgetv call */
    size_t span;              /* --span: library rows' distinct bytes per client, 0: one batch */
} config = {
    .host = "127.0.0.1", .port = 6379, .pipeline = 1, .threads = 1, .batch = 16,
    .sink = BENCH_SINK_DEFAULT, .maxtime = -1, .progress = -1,
};

/* ---- the workload table ------------------------------------------------------ */

#define WL_SIZED (1 << 0)   /* runs once per -d size (keys are per size) */
#define WL_WRITE (1 << 1)   /* sends a value per key */
#define WL_READ (1 << 2)    /* receives a value per key */
#define WL_BATCH (1 << 3)   /* names --batch keys, the reply is an array */
#define WL_SIZEARG (1 << 4) /* each key is followed by the size as an argument, then the
                               put options (REPLICAS, REPLACE) end the command */
#define WL_NUMKEYS (1 << 5) /* a batch command whose first argument is the key count */
#define WL_PERKEY (1 << 6)  /* one op per key, not per command */
#define WL_REPLICAS (1 << 7) /* replies [lease, size, checksum, replica...] or nil per key */
#define WL_STORE (1 << 8)   /* a mooncake-server store command (metadata mode) */

typedef struct workload {
    const char *name;       /* as given to -t */
    const char *label;      /* as printed */
    const char *cmd;        /* the RESP command */
    const char *cmd2;       /* a second command on the same keys ending the op, or NULL */
    int keys;               /* keys per command: 0, 1, or (WL_BATCH) --batch */
    int flags;
} workload;

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
    return (w->flags & WL_BATCH) ? config.batch : w->keys;
}

/* Value bytes one request of w moves at size vlen; 0 for those that move
 * none (PING, and the store rows, whose -d is only an argument). */
static uint64_t workloadBytes(const workload *w, size_t vlen) {
    if (!(w->flags & (WL_WRITE | WL_READ))) return 0;
    return (uint64_t)vlen * (uint64_t)workloadKeys(w);
}

/* Keys per call of a library row (benchlib.c): --batch for the batch rows. */
static int libBatch(const char *name) {
    return !strcasecmp(name, "mcbput") || !strcasecmp(name, "mcbget") ? config.batch : 1;
}

static int libBaseline(const char *name) {
    return !strncasecmp(name, "memcpy", 6) || !strcasecmp(name, "rawtcp");
}

/* Requests of one test that moves reqbytes of values per request: -n if
 * given, else what moves BENCH_TEST_BYTES, within [BENCH_MIN_REQUESTS,
 * BENCH_DEFAULT_REQUESTS] (a 16 MiB test: 64 requests, 64 B: 100000). */
static long long planRequests(uint64_t reqbytes) {
    if (config.requests) return config.requests;
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
    for (int s = 0; s < config.nsizes; s++) {
        for (int i = 0; i < NWORKLOADS; i++) {
            if (!(config.tests & (1u << i))) continue;
            uint64_t b = workloadBytes(&workloads[i], config.sizes[s]);
            if (b > most) most = b;
        }
    }
    most *= (uint64_t)config.pipeline;
    if (most == 0 || BENCH_INFLIGHT_BYTES / most >= BENCH_DEFAULT_CLIENTS) return BENCH_DEFAULT_CLIENTS;
    return BENCH_INFLIGHT_BYTES / most ? (int)(BENCH_INFLIGHT_BYTES / most) : 1;
}

/* "SET 16MiB", "PING": a test as the progress line and the report name it. */
static void testName(char *buf, size_t len, const char *label, size_t vlen, int sized);

/* ---- shared state of a test ---------------------------------------------------- */

static unsigned char *pattern;       /* BENCH_PATTERN_PERIOD bytes */
static int value_iovs;               /* most iovecs one value needs */
static const char crlf[2] = {'\r', '\n'};

/* The test being run: set by the main thread before a phase starts, read
 * only while threads run. */
static struct benchTest {
    const workload *w;
    size_t vlen;             /* value size (0 for unsized tests) */
    int nkeys;               /* keys per command */
    int record;              /* phase is measured (not warm-up) */
    long long limit;         /* requests in this phase (LLONG_MAX with --duration) */
    uint64_t deadline;       /* ns, monotonic; 0 without --duration */
    _Atomic long long issued;
} test;

struct benchThread;

/* A key's part of a request. Two-command ops name their key twice: a
 * single-key pair (PUT.START+PUT.END) is one header holding both commands,
 * with the key digits at `digits` and `digits2`; a batch pair keeps the
 * key's argument of the second command right after the first part
 * (buf[len, len + len2)), to go out as its own iovec. */
typedef struct khdr {
    uint16_t len;            /* bytes of buf that go out for the (first) command */
    uint16_t len2;           /* bytes after them for the second command of a batch pair */
    uint16_t digits;         /* offset of the 12 key digits in buf */
    uint16_t digits2;        /* offset of their second copy; 0: none */
    char buf[BENCH_HDR_MAX];
} khdr;

/* Reply parser states. */
enum { RS_LINE, RS_PAYLOAD, RS_CRLF };

typedef struct conn {
    int fd;
    int id;                  /* 0..clients-1 */
    struct benchThread *t;
    /* Requests of the current batch. */
    int nslots;              /* requests in flight (<= pipeline) */
    uint64_t *keys;          /* [pipeline * maxkeys] key numbers */
    khdr *hdrs;              /* [pipeline * maxkeys] pre-built headers */
    char prefix[64];         /* "*<argc>\r\n$<n>\r\nCMD\r\n[numkeys]" of batch commands */
    int prefixlen;
    char prefix2[64];        /* the same for the second command of a batch pair */
    int prefix2len;
    char suffix[64];         /* put options after a batch's key/size pairs */
    int suffixlen;
    struct iovec *iov;       /* the batch being written */
    int iovcnt, iovpos;
    int wantwrite;           /* EPOLLOUT armed */
    int idle;                /* no more requests in this phase */
    uint64_t sent_ns;        /* clock when the batch was sent */
    uint64_t batches;        /* batches sent so far */
    /* Reply parser. */
    char *rbuf;
    size_t rpos, rlen;
    int rstate;
    int rslot;               /* reply of slot rslot is being parsed */
    int rcmd;                /* ... of its command rcmd (0, or 1 for the second of a pair) */
    int depth;               /* arrays open in the current reply */
    long long left[BENCH_MAX_DEPTH]; /* elements still to come in each open array */
    long long idx[BENCH_MAX_DEPTH];  /* index of the element being parsed in each */
    size_t bulk_len, bulk_off;
    int bulk_bad;            /* this bulk already failed verification */
} conn;

typedef struct benchThread {
    int id;
    pthread_t tid;
    int epfd;
    conn **conns;
    int nconns;
    int active;              /* connections with requests still to come */
    uint64_t rng;
    uint64_t now;            /* clock of the latest read, 0: not taken yet */
    uint64_t last_ns;        /* latest reply */
    unsigned char *sink;     /* where big payloads are read to (see connRead) */
    size_t sinkcap;
    benchStats st;
    /* Requests completed in this phase, for the progress thread: written
     * only by this thread (a plain store, no locked instruction). */
    _Atomic uint64_t done;
} benchThread;

static benchThread *threads;
static conn *conns;
static _Atomic int badvals_reported;

/* ---- small helpers --------------------------------------------------------------- */

static void benchFatal(const char *fmt, ...) {
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

static uint64_t nowNs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t xorshift64(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Where the value of key k (of the current size) starts in the pattern. */
static inline size_t keyShift(uint64_t k) {
    return (size_t)(splitmix64(k ^ ((uint64_t)test.vlen * 0x9e3779b97f4a7c15ULL)) %
                    BENCH_PATTERN_PERIOD);
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

static void putDigits(char *p, uint64_t k) {
    for (int i = BENCH_KEY_DIGITS - 1; i >= 0; i--) {
        p[i] = (char)('0' + k % 10);
        k /= 10;
    }
}

/* ---- connecting ---------------------------------------------------------------------- */

static int connectOne(char *err, size_t errlen) {
    int fd = -1;
    if (config.unixsock) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(config.unixsock) >= sizeof(sa.sun_path)) {
            snprintf(err, errlen, "unix socket path too long");
            return -1;
        }
        strcpy(sa.sun_path, config.unixsock);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd == -1 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
            snprintf(err, errlen, "%s: %s", config.unixsock, strerror(errno));
            if (fd != -1) close(fd);
            return -1;
        }
    } else {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
        char port[16];
        snprintf(port, sizeof(port), "%d", config.port);
        int rv = getaddrinfo(config.host, port, &hints, &res);
        if (rv != 0) {
            snprintf(err, errlen, "%s: %s", config.host, gai_strerror(rv));
            return -1;
        }
        snprintf(err, errlen, "%s:%d: no address", config.host, config.port);
        for (ai = res; ai; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd == -1) continue;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
            snprintf(err, errlen, "%s:%d: %s", config.host, config.port, strerror(errno));
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
    if (config.auth) {
        /* Blocking, once per connection, before the measured loop. */
        char req[1024], rep[512];
        size_t pl = strlen(config.auth);
        int n = snprintf(req, sizeof(req), "*2\r\n$4\r\nAUTH\r\n$%zu\r\n%s\r\n", pl, config.auth);
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

/* ---- building requests ---------------------------------------------------------------- */

/* "$<len>\r\n<s>\r\n" at p; returns its length. */
static int putArg(char *p, const char *s) {
    return sprintf(p, "$%zu\r\n%s\r\n", strlen(s), s);
}

/* The put options every PUT.START / BATCH.PUT.START carries, as RESP
 * arguments: [REPLICAS n] REPLACE (so a run may write its keys again).
 * Returns the length; *argc gets how many arguments they are. */
static int putOptions(char *p, int *argc) {
    char *q = p;
    *argc = 1;
    if (config.replicas) {
        char n[16];
        snprintf(n, sizeof(n), "%d", config.replicas);
        q += putArg(q, "REPLICAS");
        q += putArg(q, n);
        *argc += 2;
    }
    q += putArg(q, "REPLACE");
    return (int)(q - p);
}

/* Formats the headers of every slot and key of connection c for the test
 * about to run. The key digits are filled in for the fixed keyspace and
 * rewritten per request with -r. */
static void connPrepare(conn *c) {
    const workload *w = test.w;
    int nk = test.nkeys;
    int batchcmd = (w->flags & WL_BATCH) != 0;
    int sizearg = (w->flags & WL_SIZEARG) != 0;
    char opts[64], sizestr[24];
    int optargc = 0, optlen = 0;
    if (sizearg) optlen = putOptions(opts, &optargc);
    snprintf(sizestr, sizeof(sizestr), "%zu", test.vlen);
    int argc = 1 + nk * ((w->flags & (WL_WRITE | WL_SIZEARG)) ? 2 : 1) +
               ((w->flags & WL_NUMKEYS) ? 1 : 0) + optargc;
    c->prefixlen = snprintf(c->prefix, sizeof(c->prefix), "*%d\r\n$%zu\r\n%s\r\n", argc,
                            strlen(w->cmd), w->cmd);
    if (w->flags & WL_NUMKEYS) {
        char n[16];
        snprintf(n, sizeof(n), "%d", nk);
        c->prefixlen += putArg(c->prefix + c->prefixlen, n);
    }
    c->prefix2len = 0;
    if (w->cmd2)
        c->prefix2len = snprintf(c->prefix2, sizeof(c->prefix2), "*%d\r\n$%zu\r\n%s\r\n",
                                 1 + nk, strlen(w->cmd2), w->cmd2);
    c->suffixlen = 0;
    if (batchcmd && sizearg) {
        memcpy(c->suffix, opts, (size_t)optlen);
        c->suffixlen = optlen;
    }
    char keyprefix[32];
    int kplen = snprintf(keyprefix, sizeof(keyprefix), "key:%zu:", test.vlen);
    size_t klen = (size_t)kplen + BENCH_KEY_DIGITS;
    for (int s = 0; s < config.pipeline; s++) {
        for (int i = 0; i < nk; i++) {
            khdr *h = &c->hdrs[s * nk + i];
            char *p = h->buf;
            /* A single-key command carries its prefix in its only header,
             * so SET is 3 iovecs and GET is 1. */
            if (!batchcmd) {
                memcpy(p, c->prefix, (size_t)c->prefixlen);
                p += c->prefixlen;
            }
            p += sprintf(p, "$%zu\r\n%s", klen, keyprefix);
            h->digits = (uint16_t)(p - h->buf);
            p += BENCH_KEY_DIGITS;
            p += sprintf(p, "\r\n");
            if (w->flags & WL_WRITE) p += sprintf(p, "$%zu\r\n", test.vlen);
            if (sizearg) p += putArg(p, sizestr);
            if (sizearg && !batchcmd) {
                memcpy(p, opts, (size_t)optlen);
                p += optlen;
            }
            h->len = (uint16_t)(p - h->buf);
            h->len2 = 0;
            h->digits2 = 0;
            if (w->cmd2) {
                /* The second command: whole (single key, same iovec) or
                 * just this key's argument (batch, its own iovec). */
                char *q = p;
                if (!batchcmd) {
                    memcpy(p, c->prefix2, (size_t)c->prefix2len);
                    p += c->prefix2len;
                }
                p += sprintf(p, "$%zu\r\n%s", klen, keyprefix);
                h->digits2 = (uint16_t)(p - h->buf);
                p += BENCH_KEY_DIGITS;
                p += sprintf(p, "\r\n");
                if (batchcmd) h->len2 = (uint16_t)(p - q);
                else h->len = (uint16_t)(p - h->buf);
            }
            if ((size_t)(p - h->buf) > sizeof(h->buf)) benchFatal("request header overflow");
            uint64_t k = batchcmd ? (uint64_t)c->id * (uint64_t)nk + (uint64_t)i : (uint64_t)c->id;
            c->keys[s * nk + i] = k;
            putDigits(h->buf + h->digits, k);
            if (h->digits2) putDigits(h->buf + h->digits2, k);
        }
    }
}

/* The value of a key whose pattern starts at `shift`, as iovecs over the
 * pattern buffer: a window to the end of the period, then whole periods,
 * then the rest. The same megabyte is sent again and again, so the
 * source of every write stays in the CPU cache. Returns the count. */
static int valueIov(struct iovec *iov, size_t shift, size_t vlen) {
    int n = 0;
    while (vlen > 0) {
        size_t take = BENCH_PATTERN_PERIOD - shift;
        if (take > vlen) take = vlen;
        iov[n].iov_base = pattern + shift;
        iov[n++].iov_len = take;
        vlen -= take;
        shift = 0;
    }
    return n;
}

static void connWrite(conn *c);

/* Claims up to `pipeline` requests, builds their iovecs and starts writing.
 * Returns 0 when the phase has nothing left for this connection. */
static int connIssue(conn *c) {
    benchThread *t = c->t;
    uint64_t now = nowNs();
    if (test.deadline && now >= test.deadline) return 0;
    long long want = config.pipeline;
    long long first = atomic_fetch_add(&test.issued, want);
    if (first >= test.limit) return 0;
    if (first + want > test.limit) want = test.limit - first;

    const workload *w = test.w;
    int nk = test.nkeys;
    struct iovec *iov = c->iov;
    int n = 0;
    for (int s = 0; s < want; s++) {
        if (nk == 0) {   /* PING */
            iov[n].iov_base = c->prefix;
            iov[n++].iov_len = (size_t)c->prefixlen;
            continue;
        }
        int batchcmd = (w->flags & WL_BATCH) != 0;
        if (batchcmd) {
            iov[n].iov_base = c->prefix;
            iov[n++].iov_len = (size_t)c->prefixlen;
        }
        for (int i = 0; i < nk; i++) {
            khdr *h = &c->hdrs[s * nk + i];
            if (config.keyspace) {
                uint64_t k;
                if (config.sequential)
                    k = ((uint64_t)(first + s) * (uint64_t)nk + (uint64_t)i) % (uint64_t)config.keyspace;
                else
                    k = xorshift64(&t->rng) % (uint64_t)config.keyspace;
                c->keys[s * nk + i] = k;
                putDigits(h->buf + h->digits, k);
                if (h->digits2) putDigits(h->buf + h->digits2, k);
            }
            iov[n].iov_base = h->buf;
            iov[n++].iov_len = h->len;
            if (w->flags & WL_WRITE) {
                n += valueIov(iov + n, keyShift(c->keys[s * nk + i]), test.vlen);
                iov[n].iov_base = (void *)crlf;
                iov[n++].iov_len = 2;
            }
        }
        if (batchcmd && c->suffixlen) {
            iov[n].iov_base = c->suffix;
            iov[n++].iov_len = (size_t)c->suffixlen;
        }
        if (batchcmd && w->cmd2) {
            iov[n].iov_base = c->prefix2;
            iov[n++].iov_len = (size_t)c->prefix2len;
            for (int i = 0; i < nk; i++) {
                khdr *h = &c->hdrs[s * nk + i];
                iov[n].iov_base = h->buf + h->len;
                iov[n++].iov_len = h->len2;
            }
        }
    }
    c->nslots = (int)want;
    c->iovcnt = n;
    c->iovpos = 0;
    c->rslot = 0;
    c->rcmd = 0;
    c->depth = 0;
    c->sent_ns = now;
    c->batches++;
    connWrite(c);
    return 1;
}

static void connSetWrite(conn *c, int on) {
    if (c->wantwrite == on) return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(c->t->epfd, EPOLL_CTL_MOD, c->fd, &ev) == -1)
        benchFatal("epoll_ctl: %s", strerror(errno));
    c->wantwrite = on;
}

static void connWrite(conn *c) {
    while (c->iovpos < c->iovcnt) {
        int cnt = c->iovcnt - c->iovpos;
        if (cnt > IOV_MAX) cnt = IOV_MAX;
        ssize_t n = writev(c->fd, c->iov + c->iovpos, cnt);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                connSetWrite(c, 1);
                return;
            }
            benchFatal("connection %d: write: %s", c->id, strerror(errno));
        }
        size_t left = (size_t)n;
        while (left > 0) {
            struct iovec *v = &c->iov[c->iovpos];
            if (left >= v->iov_len) {
                left -= v->iov_len;
                c->iovpos++;
            } else {
                v->iov_base = (char *)v->iov_base + left;
                v->iov_len -= left;
                left = 0;
            }
        }
    }
    connSetWrite(c, 0);
}

/* ---- consuming replies ----------------------------------------------------------------- */

static void reportBadValue(conn *c, uint64_t key, const char *fmt, ...) {
    c->t->st.badvals++;
    if (atomic_fetch_add(&badvals_reported, 1) >= BENCH_MAX_REPORTED) return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "mooncake-benchmark: %s key:%zu:%0*llu: %s\n", test.w->label, test.vlen,
            BENCH_KEY_DIGITS, (unsigned long long)key, msg);
}

/* The level of a reply at which one key's result lies: the reply itself
 * for single-key commands, its elements for batch commands. */
static inline int keyDepth(void) {
    return (test.w->flags & WL_BATCH) ? 1 : 0;
}

static inline uint64_t currentKey(conn *c) {
    long long i = (test.w->flags & WL_BATCH) && c->depth > 0 ? c->idx[0] : 0;
    if (i >= test.nkeys) i = test.nkeys - 1;
    return c->keys[c->rslot * test.nkeys + i];
}

/* n payload bytes of the current bulk at p: verify (with --check), count. */
static void payloadConsume(conn *c, const unsigned char *p, size_t n) {
    if (!c->bulk_bad) {   /* a value to verify (see connParse) */
        uint64_t k = currentKey(c);
        size_t done = 0, pos = (keyShift(k) + c->bulk_off) % BENCH_PATTERN_PERIOD;
        while (done < n) {
            size_t take = BENCH_PATTERN_PERIOD - pos;
            if (take > n - done) take = n - done;
            const unsigned char *got = p + done, *want = pattern + pos;
            if (memcmp(got, want, take) != 0) {
                size_t i = 0;
                while (got[i] == want[i]) i++;
                reportBadValue(c, k, "byte %zu is 0x%02x, expected 0x%02x",
                               c->bulk_off + done + i, got[i], want[i]);
                c->bulk_bad = 1;
                break;
            }
            done += take;
            pos = 0;
        }
    }
    c->bulk_off += n;
}

/* One reply (or array element) is complete. */
static void connElementDone(conn *c) {
    /* Close the arrays this element completes. */
    while (c->depth > 0) {
        int d = c->depth - 1;
        c->idx[d]++;
        if (--c->left[d] > 0) return;
        c->depth--;
    }
    /* A whole reply is in; an op of two commands waits for the second. */
    if (test.w->cmd2 && c->rcmd == 0) {
        c->rcmd = 1;
        return;
    }
    c->rcmd = 0;
    /* The op of slot rslot is complete. */
    benchThread *t = c->t;
    atomic_store_explicit(&t->done, atomic_load_explicit(&t->done, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (t->now == 0) t->now = nowNs();
    if (test.record) {
        histRecord(&t->st.lat, t->now - c->sent_ns);
        t->st.ops += (test.w->flags & WL_PERKEY) ? (uint64_t)test.nkeys : 1;
        if (test.w->flags & WL_WRITE) t->st.bytes += (uint64_t)test.nkeys * test.vlen;
    }
    t->last_ns = t->now;
    if (++c->rslot < c->nslots) return;
    if (c->iovpos < c->iovcnt)
        benchFatal("connection %d: all replies arrived before the requests were sent", c->id);
    if (!connIssue(c)) {
        c->idle = 1;
        c->nslots = 0;
        t->active--;
    }
}

static void connErrorReply(conn *c, const char *line, size_t len) {
    benchStats *st = &c->t->st;
    if (test.record) st->errors++;
    if (st->firsterr[0] == '\0') {
        if (len >= sizeof(st->firsterr)) len = sizeof(st->firsterr) - 1;
        memcpy(st->firsterr, line, len);
        st->firsterr[len] = '\0';
    }
}

/* A nil reply or element: a miss where it stands for a key (a nil inside a
 * key's result, like GET.REPLICAS's checksum, is just a value). */
static void connNil(conn *c) {
    if (c->depth == keyDepth()) {
        if (test.record) c->t->st.misses++;
        if (config.check && (test.w->flags & (WL_READ | WL_REPLICAS)) && !config.keyspace)
            reportBadValue(c, currentKey(c), "missing (nil reply)");
    }
    connElementDone(c);
}

static long long parseLen(conn *c, const char *p, const char *end) {
    long long v = 0;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p == end) benchFatal("connection %d: protocol error: empty length", c->id);
    for (; p < end; p++) {
        if (*p < '0' || *p > '9' || v > (LLONG_MAX - 9) / 10)
            benchFatal("connection %d: protocol error: bad length", c->id);
        v = v * 10 + (*p - '0');
    }
    return neg ? -v : v;
}

/* Parses whatever complete replies (and payload parts) the read buffer
 * holds, consuming them in place. */
static void connParse(conn *c) {
    while (c->rpos < c->rlen) {
        if (c->nslots == 0 || c->rslot >= c->nslots)
            benchFatal("connection %d: unexpected data from the server", c->id);
        if (c->rstate == RS_PAYLOAD) {
            size_t avail = c->rlen - c->rpos;
            size_t take = c->bulk_len - c->bulk_off;
            if (take > avail) take = avail;
            payloadConsume(c, (unsigned char *)c->rbuf + c->rpos, take);
            c->rpos += take;
            if (c->bulk_off < c->bulk_len) return;
            c->rstate = RS_CRLF;
            continue;
        }
        if (c->rstate == RS_CRLF) {
            if (c->rlen - c->rpos < 2) return;
            if (c->rbuf[c->rpos] != '\r' || c->rbuf[c->rpos + 1] != '\n')
                benchFatal("connection %d: protocol error: bulk not ended by CRLF", c->id);
            c->rpos += 2;
            c->rstate = RS_LINE;
            connElementDone(c);
            continue;
        }
        char *line = c->rbuf + c->rpos;
        char *nl = memchr(line, '\n', c->rlen - c->rpos);
        if (!nl) {
            if (c->rpos == 0 && c->rlen == BENCH_RBUF_SIZE)
                benchFatal("connection %d: protocol error: reply line too long", c->id);
            return;
        }
        char *end = (nl > line && nl[-1] == '\r') ? nl - 1 : nl;
        c->rpos = (size_t)(nl + 1 - c->rbuf);
        int kd = keyDepth();
        switch (line[0]) {
        case ':':
            /* With --check, GET.REPLICAS must report the size PUT.START gave. */
            if (config.check && (test.w->flags & WL_REPLICAS) && c->depth == kd + 1 &&
                c->idx[kd] == 1) {
                long long v = parseLen(c, line + 1, end);
                if (v != (long long)test.vlen)
                    reportBadValue(c, currentKey(c), "size %lld, expected %zu", v, test.vlen);
            }
            connElementDone(c);
            break;
        case '+':
        case ',':
        case '#':
        case '(':
            connElementDone(c);
            break;
        case '-':
            connErrorReply(c, line + 1, (size_t)(end - line - 1));
            connElementDone(c);
            break;
        case '_':
            connNil(c);
            break;
        case '$': {
            long long n = parseLen(c, line + 1, end);
            if (n < 0) {
                connNil(c);
                break;
            }
            int value = (test.w->flags & WL_READ) && c->depth == kd;
            c->bulk_len = (size_t)n;
            c->bulk_off = 0;
            /* bulk_bad set: nothing to verify (not a value, or no --check). */
            c->bulk_bad = !(value && config.check && test.vlen);
            if (value && test.record) c->t->st.bytes += (uint64_t)n;
            if (!c->bulk_bad && c->bulk_len != test.vlen) {
                reportBadValue(c, currentKey(c), "length %zu, expected %zu", c->bulk_len, test.vlen);
                c->bulk_bad = 1;
            }
            c->rstate = n > 0 ? RS_PAYLOAD : RS_CRLF;
            break;
        }
        case '*':
        case '~':
        case '%': {
            long long n = parseLen(c, line + 1, end);
            if (n < 0) {
                connNil(c);
                break;
            }
            if (line[0] == '%') n *= 2;
            if (c->depth == 0 && (test.w->flags & WL_BATCH) && n != test.nkeys)
                benchFatal("connection %d: %s returned %lld elements, expected %d", c->id,
                           c->rcmd ? test.w->cmd2 : test.w->cmd, n, test.nkeys);
            if (config.check && (test.w->flags & WL_REPLICAS) && c->depth == kd && n < 4)
                reportBadValue(c, currentKey(c), "%lld elements, expected lease, size, checksum "
                               "and at least one replica", n);
            if (n == 0) {
                connElementDone(c);
                break;
            }
            if (c->depth == BENCH_MAX_DEPTH)
                benchFatal("connection %d: protocol error: arrays nested too deep", c->id);
            c->left[c->depth] = n;
            c->idx[c->depth] = 0;
            c->depth++;
            break;
        }
        default:
            benchFatal("connection %d: protocol error: unexpected byte 0x%02x", c->id,
                       (unsigned char)line[0]);
        }
    }
}

static void connClosed(conn *c, ssize_t n) {
    benchStats *st = &c->t->st;
    if (n == 0)
        benchFatal("connection %d: server closed the connection during %s%s%s", c->id,
                   test.w->label, st->firsterr[0] ? ", last error: " : "", st->firsterr);
    benchFatal("connection %d: read: %s", c->id, strerror(errno));
}

static void connRead(conn *c) {
    for (;;) {
        ssize_t n;
        size_t asked;
        if (c->rstate == RS_PAYLOAD && c->rpos == c->rlen &&
            c->bulk_len - c->bulk_off >= BENCH_BIG_PAYLOAD && c->t->sinkcap) {
            /* The rest of a big payload: straight into the sink, and the
             * bytes after it (CRLF, next header) into the read buffer.
             * Payload is verified (or dropped) right after the read that
             * brought it, so the thread's sink is free again when this
             * returns, and one sink serves all its connections. */
            benchThread *t = c->t;
            size_t n0 = c->bulk_len - c->bulk_off;
            if (n0 > t->sinkcap) n0 = t->sinkcap;
            struct iovec iov[2] = {{t->sink, n0}, {c->rbuf, BENCH_RBUF_SIZE}};
            c->rpos = c->rlen = 0;
            asked = n0 + BENCH_RBUF_SIZE;
            n = readv(c->fd, iov, 2);
            if (n <= 0) goto noread;
            size_t k = (size_t)n < n0 ? (size_t)n : n0;
            payloadConsume(c, t->sink, k);
            c->rlen = (size_t)n - k;
            if (c->bulk_off == c->bulk_len) c->rstate = RS_CRLF;
        } else {
            if (c->rpos == c->rlen) {
                c->rpos = c->rlen = 0;
            } else if (c->rlen == BENCH_RBUF_SIZE) {
                /* Only a partial reply line (or CRLF) is left: payload is
                 * always consumed in place, so this moves a few bytes. */
                memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
                c->rlen -= c->rpos;
                c->rpos = 0;
            }
            asked = BENCH_RBUF_SIZE - c->rlen;
            n = read(c->fd, c->rbuf + c->rlen, asked);
            if (n <= 0) goto noread;
            c->rlen += (size_t)n;
        }
        c->t->now = 0;
        uint64_t batches = c->batches;
        connParse(c);
        /* Back to epoll once a new batch went out (its replies cannot be
         * there yet), the connection is done, or the socket looks drained
         * (a short read: trying again would most likely cost an EAGAIN). */
        if (c->idle || c->batches != batches || (size_t)n < asked) return;
        continue;
    noread:
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        connClosed(c, n);
    }
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
        if (connIssue(c)) t->active++;
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
            if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) connRead(c);
            if ((ev[i].events & EPOLLOUT) && c->wantwrite) connWrite(c);
        }
    }
    return NULL;
}

/* Requests completed so far in the running phase (progress thread). */
static uint64_t phaseDone(void *arg) {
    (void)arg;
    uint64_t n = 0;
    for (int i = 0; i < config.threads; i++)
        n += atomic_load_explicit(&threads[i].done, memory_order_relaxed);
    return n;
}

/* When a phase that started at `start` stops issuing: the end of
 * --duration (timed phases), or the --max-time cap, whichever is sooner;
 * 0 for neither. */
static uint64_t phaseDeadline(uint64_t start, int timed) {
    uint64_t dl = timed ? start + (uint64_t)(config.duration * 1e9) : 0;
    if (config.maxtime > 0) {
        uint64_t cap = start + (uint64_t)(config.maxtime * 1e9);
        if (!dl || cap < dl) dl = cap;
    }
    return dl;
}

/* Runs one phase of the current test on all threads; returns its length in ns. */
static uint64_t runPhase(long long requests, int record) {
    int timed = config.duration > 0 && record;
    test.record = record;
    test.limit = timed ? LLONG_MAX : requests;
    atomic_store(&test.issued, 0);
    for (int i = 0; i < config.threads; i++) {
        benchThread *t = &threads[i];
        histReset(&t->st.lat);
        t->st.ops = t->st.bytes = t->st.errors = t->st.misses = t->st.badvals = 0;
        t->st.firsterr[0] = '\0';
        t->last_ns = 0;
        atomic_store(&t->done, 0);
    }
    for (int i = 0; i < config.clients; i++) connPrepare(&conns[i]);
    atomic_store(&badvals_reported, 0);
    char name[80], label[96];
    testName(name, sizeof(name), test.w->label, test.vlen, (test.w->flags & WL_SIZED) != 0);
    snprintf(label, sizeof(label), "%s%s", name, record ? "" : " warm-up");
    uint64_t start = nowNs();
    test.deadline = phaseDeadline(start, timed);
    progressStart(label, timed ? -1 : test.limit, start, test.deadline, phaseDone, NULL);
    if (config.threads == 1) {
        threadMain(&threads[0]);
    } else {
        for (int i = 0; i < config.threads; i++)
            if (pthread_create(&threads[i].tid, NULL, threadMain, &threads[i]) != 0)
                benchFatal("pthread_create failed");
        for (int i = 0; i < config.threads; i++) pthread_join(threads[i].tid, NULL);
    }
    progressStop();
    uint64_t end = start;
    for (int i = 0; i < config.threads; i++)
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
    if (config.check && (sum->errors || sum->badvals)) failed = 1;

    if (config.csv) {
        printf("\"%s\",\"%s\",%zu,%llu,%.3f,%.2f,%.4f,%.3f,%.3f,%.3f,%.3f,%llu,%llu,%llu\n",
               label, size, vlen, (unsigned long long)sum->ops, secs, ops, gbs, p50, p99, p999,
               max, (unsigned long long)sum->errors, (unsigned long long)sum->misses,
               (unsigned long long)sum->badvals);
    } else if (config.quiet) {
        strcat(name, ":");
        printf("%-13s %12.2f ops/s %8.3f GB/s  p50 %.3f p99 %.3f p99.9 %.3f max %.3f ms", name,
               ops, gbs, p50, p99, p999, max);
        if (sum->errors) printf("  errors %llu", (unsigned long long)sum->errors);
        if (sum->misses) printf("  nil %llu", (unsigned long long)sum->misses);
        if (sum->badvals) printf("  BAD %llu", (unsigned long long)sum->badvals);
        if (sum->capped) printf("  (max-time %g s)", config.maxtime);
        if (sum->first_ns) printf("  first %.3f ms", sum->first_ns / 1e6);
        printf("\n");
    } else {
        printf("====== %s ======\n", name);
        printf("  %llu %s\n", (unsigned long long)sum->ops, desc);
        printf("  elapsed: %.3f s\n", secs);
        if (sum->capped)
            printf("  stopped by --max-time %g s after %llu requests (-n or --max-time 0: run them all)\n",
                   config.maxtime, (unsigned long long)sum->requests);
        printf("  throughput: %.2f ops/s, %.3f GB/s\n", ops, gbs);
        printf("  latency (ms): p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", p50, p99, p999, max);
        if (sum->first_ns)
            printf("  first call of a fresh handle (not in the figures above): %.3f ms\n", sum->first_ns / 1e6);
        printf("  errors: %llu", (unsigned long long)sum->errors);
        if (sum->misses) printf(", nil replies: %llu", (unsigned long long)sum->misses);
        if (config.check) printf(", verification failures: %llu", (unsigned long long)sum->badvals);
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
    sum.capped = test.limit != LLONG_MAX && sum.requests < (uint64_t)test.limit;
    for (int i = 0; i < config.threads; i++) {
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
    if (config.keyspace)
        snprintf(ks, sizeof(ks), "%s keys in [0,%lld)", config.sequential ? "sequential" : "random",
                 config.keyspace);
    else if (test.nkeys == 0) snprintf(ks, sizeof(ks), "no keys");
    else snprintf(ks, sizeof(ks), "%s per client", (w->flags & WL_BATCH) ? "keys" : "one key");
    int n = snprintf(desc, sizeof(desc), "%s, %d clients, pipeline %d, %d thread%s, %s",
                     (w->flags & WL_PERKEY) ? "keys" : w->cmd2 ? "command pairs" : "requests",
                     config.clients, config.pipeline, config.threads, config.threads == 1 ? "" : "s", ks);
    if (w->flags & WL_BATCH) n += snprintf(desc + n, sizeof(desc) - (size_t)n, ", %d keys per command", config.batch);
    if ((w->flags & WL_SIZEARG) && config.replicas)
        snprintf(desc + n, sizeof(desc) - (size_t)n, ", %d replicas", config.replicas);
    printRow(w->label, vlen, (w->flags & WL_SIZED) != 0, &sum, elapsed / 1e9, desc);
}

/* A libmooncake row or a baseline (benchlib.c). */
static void runLibTest(const char *name, size_t vlen) {
    static const char *tnames[] = {"auto", "shm", "tcp", "rdma"};
    char uri[300], label[64], desc[256], progresslabel[80];
    benchLibConfig lc = {.uri = uri, .auth = config.auth, .clients = config.libclients,
                         .requests = planRequests((uint64_t)vlen * (uint64_t)libBatch(name)),
                         .duration = config.duration, .maxtime = config.maxtime,
                         .transport = config.transport, .streams = config.streams, .batch = config.batch,
                         .iov = config.iov, .span = config.span,
                         .replicas = config.replicas, .check = config.check, .label = progresslabel,
                         .warmup = config.warmup};
    if (config.unixsock) snprintf(uri, sizeof(uri), "unix://%s", config.unixsock);
    else snprintf(uri, sizeof(uri), strchr(config.host, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", config.host, config.port);
    int baseline = libBaseline(name);
    int batch = !strcasecmp(name, "mcbput") || !strcasecmp(name, "mcbget");
    if (baseline) snprintf(label, sizeof(label), "%s", benchLibLabel(name));
    else if (config.streams > 0)
        snprintf(label, sizeof(label), "%s %s x%d", benchLibLabel(name), tnames[config.transport], config.streams);
    else snprintf(label, sizeof(label), "%s %s", benchLibLabel(name), tnames[config.transport]);
    if (!strcasecmp(name, "mcputv") || !strcasecmp(name, "mcgetv")) {
        size_t l = strlen(label);
        snprintf(label + l, sizeof(label) - l, " iov%d", config.iov > 0 ? config.iov : 1);
    }
    testName(progresslabel, sizeof(progresslabel), label, vlen, 1);
    if (baseline) snprintf(desc, sizeof(desc), "copies, one thread (baseline)");
    else snprintf(desc, sizeof(desc), "%s, %d client threads (one handle each), transport %s%s",
                  batch ? "keys" : "calls", config.libclients, tnames[config.transport],
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
    test.w = w;
    test.vlen = vlen;
    test.nkeys = workloadKeys(w);
    if (config.warmup > 0) runPhase(config.warmup, 0);
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
    config.nsizes = 0;
    free(config.sizes);
    config.sizes = benchAlloc(sizeof(size_t) * (strlen(arg) + 1));
    for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (parseSize(tok, &config.sizes[config.nsizes]) == -1)
            benchFatal("invalid size '%s' in -d", tok);
        config.nsizes++;
    }
    free(s);
    if (config.nsizes == 0) benchFatal("-d needs at least one size");
}

static void parseTests(const char *arg) {
    char *s = strdup(arg), *save = NULL;
    if (!s) benchFatal("out of memory");
    config.tests = 0;
    for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int i;
        for (i = 0; i < NWORKLOADS; i++)
            if (strcasecmp(tok, workloads[i].name) == 0) break;
        if (i == NWORKLOADS && benchLibLabel(tok)) {
            if (config.nlibtests == 16) benchFatal("too many tests");
            config.libtests[config.nlibtests++] = strdup(tok);
            continue;
        }
        if (i == NWORKLOADS) benchFatal("unknown test '%s' (known: " WORKLOAD_NAMES "," LIB_NAMES ")", tok);
        config.tests |= 1u << i;
    }
    free(s);
    if (!config.tests && !config.nlibtests) benchFatal("-t needs at least one test");
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
        if (!strcmp(o, "-q")) { config.quiet = 1; continue; }
        if (!strcmp(o, "--check")) { config.check = 1; continue; }
        if (!strcmp(o, "--csv")) { config.csv = 1; continue; }
        if (!strcmp(o, "--sequential")) { config.sequential = 1; continue; }
        if (!strcmp(o, "--progress")) { config.progress = 1; continue; }
        if (!strcmp(o, "--no-progress")) { config.progress = 0; continue; }
        if (last) {
            fprintf(stderr, "mooncake-benchmark: option %s needs a value (or is unknown)\n\n", o);
            usage(1);
        }
        const char *v = argv[++i];
        if (!strcmp(o, "-h")) config.host = v;
        else if (!strcmp(o, "-p")) config.port = (int)argNum(o, v, 1, 65535);
        else if (!strcmp(o, "-s")) config.unixsock = v;
        else if (!strcmp(o, "-a")) config.auth = v;
        else if (!strcmp(o, "-c")) config.clients = (int)argNum(o, v, 1, 100000);
        else if (!strcmp(o, "-n")) config.requests = argNum(o, v, 1, LLONG_MAX / 4);
        else if (!strcmp(o, "-d")) parseSizes(v);
        else if (!strcmp(o, "-t")) parseTests(v);
        else if (!strcmp(o, "-P")) config.pipeline = (int)argNum(o, v, 1, 100000);
        else if (!strcmp(o, "-r")) config.keyspace = argNum(o, v, 1, 999999999999LL);
        else if (!strcmp(o, "--threads")) config.threads = (int)argNum(o, v, 1, 1024);
        else if (!strcmp(o, "--batch")) config.batch = (int)argNum(o, v, 1, 100000);
        else if (!strcmp(o, "--warmup")) config.warmup = argNum(o, v, 0, LLONG_MAX / 4);
        else if (!strcmp(o, "--replicas")) config.replicas = (int)argNum(o, v, 1, 64);
        else if (!strcmp(o, "--segments")) config.segments = (int)argNum(o, v, 0, 100000);
        else if (!strcmp(o, "--streams")) config.streams = (int)argNum(o, v, 1, 16);
        else if (!strcmp(o, "--iov")) config.iov = (int)argNum(o, v, 1, 1024);
        else if (!strcmp(o, "--transport")) {
            if (!strcasecmp(v, "auto")) config.transport = MC_TRANSPORT_AUTO;
            else if (!strcasecmp(v, "shm")) config.transport = MC_TRANSPORT_SHM;
            else if (!strcasecmp(v, "tcp")) config.transport = MC_TRANSPORT_TCP;
            else if (!strcasecmp(v, "rdma")) config.transport = MC_TRANSPORT_RDMA;
            else benchFatal("invalid value for --transport: '%s' (auto, shm, tcp or rdma)", v);
        }
        else if (!strcmp(o, "--duration")) {
            char *end;
            config.duration = strtod(v, &end);
            if (*end || !(config.duration > 0) || config.duration > 1e6)
                benchFatal("invalid value for --duration: '%s'", v);
        } else if (!strcmp(o, "--max-time")) {
            char *end;
            config.maxtime = strtod(v, &end);
            if (end == v || *end || !(config.maxtime >= 0) || config.maxtime > 1e6)
                benchFatal("invalid value for --max-time: '%s'", v);
        } else if (!strcmp(o, "--span")) {
            if (parseSize(v, &config.span) == -1) benchFatal("invalid value for --span: '%s'", v);
        } else if (!strcmp(o, "--sink")) {
            if (parseSize(v, &config.sink) == -1 || config.sink < BENCH_BIG_PAYLOAD)
                benchFatal("invalid value for --sink: '%s' (at least 64k)", v);
        } else {
            fprintf(stderr, "mooncake-benchmark: unknown option %s\n\n", o);
            usage(1);
        }
    }
    if (!config.sizes) parseSizes("64");
    if (!config.tests && !config.nlibtests) parseTests("set,get");
    /* Library rows default to one client, like the baselines they are
     * compared with: each client is a thread with its own handle (the
     * handles of the process share one mapping of each segment, mc_shm.c). */
    config.libclients = config.clients ? config.clients : 1;
    if (!config.clients) config.clients = planClients();
    if (config.maxtime < 0)
        config.maxtime = config.requests || config.duration > 0 ? 0 : BENCH_DEFAULT_MAX_TIME;
    if (config.progress < 0) config.progress = isatty(STDOUT_FILENO) && !config.csv;
    if (config.threads > config.clients) config.threads = config.clients;
    if (!config.keyspace && (long long)config.clients * config.batch > 999999999999LL)
        benchFatal("too many keys");
    if (config.sequential && !config.keyspace) benchFatal("--sequential needs -r");
}

static void setup(void) {
    size_t maxsize = 0, maxread = 0;
    int maxkeys = 1;
    for (int s = 0; s < config.nsizes; s++)
        if (config.sizes[s] > maxsize) maxsize = config.sizes[s];
    for (int i = 0; i < NWORKLOADS; i++) {
        if (!(config.tests & (1u << i))) continue;
        int nk = workloadKeys(&workloads[i]);
        if (nk > maxkeys) maxkeys = nk;
        if (workloads[i].flags & WL_READ) maxread = maxsize;
    }

    /* The value pattern: one pseudo-random period, written here so it is
     * faulted in before the first request. */
    pattern = benchMapPrefaulted(BENCH_PATTERN_PERIOD);
    uint64_t x = 0x6d6f6f6e63616b65ULL;   /* "mooncake" */
    for (size_t i = 0; i < BENCH_PATTERN_PERIOD; i += 8) {
        uint64_t r = splitmix64(x++);
        memcpy(pattern + i, &r, 8);
    }
    value_iovs = (int)(maxsize / BENCH_PATTERN_PERIOD) + 2;

    /* A sink per thread for payloads read back, only if some are big. */
    size_t sinkcap = 0;
    if (maxread >= BENCH_BIG_PAYLOAD) sinkcap = maxread < config.sink ? maxread : config.sink;

    threads = benchAlloc(sizeof(benchThread) * (size_t)config.threads);
    for (int i = 0; i < config.threads; i++) {
        benchThread *t = &threads[i];
        t->id = i;
        t->rng = splitmix64((uint64_t)i + 1) | 1;
        t->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (t->epfd == -1) benchFatal("epoll_create1: %s", strerror(errno));
        t->conns = benchAlloc(sizeof(conn *) * (size_t)(config.clients / config.threads + 1));
        t->sinkcap = sinkcap;
        if (sinkcap) t->sink = benchMapPrefaulted(sinkcap);
    }

    conns = benchAlloc(sizeof(conn) * (size_t)config.clients);
    size_t slots = (size_t)config.pipeline * (size_t)maxkeys;
    for (int i = 0; i < config.clients; i++) {
        conn *c = &conns[i];
        char err[256];
        c->id = i;
        c->fd = connectOne(err, sizeof(err));
        if (c->fd == -1) benchFatal("could not connect: %s", err);
        c->t = &threads[i % config.threads];
        c->t->conns[c->t->nconns++] = c;
        c->keys = benchAlloc(sizeof(uint64_t) * slots);
        c->hdrs = benchAlloc(sizeof(khdr) * slots);
        /* Per request: prefix, then per key header + value + CRLF, or for
         * a batch pair: prefix, headers, options, prefix2, second parts. */
        c->iov = benchAlloc(sizeof(struct iovec) * (size_t)config.pipeline *
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
        n += (size_t)putArg(req + n, argv[i]);
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
    if (config.segments <= 0) return;
    char err[256];
    admin_fd = connectOne(err, sizeof(err));
    if (admin_fd == -1) benchFatal("could not connect for --segments: %s", err);
    int flags = fcntl(admin_fd, F_GETFL);
    if (flags == -1 || fcntl(admin_fd, F_SETFL, flags & ~O_NONBLOCK) == -1)
        benchFatal("fcntl: %s", strerror(errno));
    for (int i = 0; i < config.segments; i++) {
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
    if (!config.quiet && !config.csv)
        printf("mounted %d segments of %s (bench-seg-0..%d on %d hosts)\n", config.segments,
               BENCH_SEGMENT_SIZE, config.segments - 1, (config.segments + 1) / 2);
}

static void segmentsUnmount(void) {
    if (admin_fd == -1) return;
    long long dropped = 0;
    for (int i = 0; i < config.segments; i++) {
        char name[48], rep[512];
        snprintf(name, sizeof(name), "bench-seg-%d", i);
        const char *argv[] = {"UNMOUNT", name};
        char type = adminCommand(rep, sizeof(rep), 2, argv);
        if (type == ':') dropped += atoll(rep);
        else fprintf(stderr, "mooncake-benchmark: UNMOUNT %s: %c%s\n", name, type, rep);
    }
    if (!config.quiet && !config.csv)
        printf("unmounted %d segments (%lld replicas dropped)\n", config.segments, dropped);
    close(admin_fd);
    admin_fd = -1;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    parseOptions(argc, argv);
    progressInit(stdout, config.progress);
    if (config.tests) {
        setup();
        segmentsMount();
    }
    if (config.csv)
        printf("\"test\",\"size\",\"bytes\",\"requests\",\"seconds\",\"ops_per_sec\",\"gb_per_sec\","
               "\"p50_ms\",\"p99_ms\",\"p999_ms\",\"max_ms\",\"errors\",\"nil\",\"bad_values\"\n");
    for (int i = 0; i < NWORKLOADS; i++)
        if ((config.tests & (1u << i)) && !(workloads[i].flags & WL_SIZED)) runTest(&workloads[i], 0);
    for (int s = 0; s < config.nsizes; s++) {
        for (int i = 0; i < NWORKLOADS; i++)
            if ((config.tests & (1u << i)) && (workloads[i].flags & WL_SIZED))
                runTest(&workloads[i], config.sizes[s]);
        for (int i = 0; i < config.nlibtests; i++) runLibTest(config.libtests[i], config.sizes[s]);
    }
    if (config.tests) segmentsUnmount();
    return failed;
}
