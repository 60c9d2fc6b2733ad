/* benchmark.h -- what the files of mooncake-benchmark share:
 * mooncake-benchmark.c (options, set-up, phases, the report) and
 * benchconn.c (a RESP connection's requests and replies).
 *
 * One tool cut along its sections, not a library: the configuration, the
 * test being run and the connection and thread structs are read by both
 * files, so they are declared here with the helpers both call; what one
 * file calls of the other is prefixed bench, everything else is static to
 * its file. The hot helpers (the clock, the key hash and digits) are
 * static inline here, as they were inlined when the tool was one file.
 * (benchlib.c, benchhist.c and benchprogress.c are modules of their own,
 * with their own headers.)
 */
#ifndef BENCHMARK_H
#define BENCHMARK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>

#include "benchhist.h"

#define BENCH_RBUF_SIZE (64 * 1024)          /* per-connection read buffer */
#define BENCH_BIG_PAYLOAD (64 * 1024)        /* payload rest read straight into the sink */
#define BENCH_KEY_DIGITS 12                  /* key:<size>:NNNNNNNNNNNN */
#define BENCH_PATTERN_PERIOD (1u << 20)      /* the pattern repeats every 1 MiB */
#define BENCH_HDR_MAX 192                    /* one pre-built request/key header */
#define BENCH_SINK_DEFAULT (4u << 20)        /* a thread's sink, unless --sink */
#define BENCH_MAX_EVENTS 64
#define BENCH_MAX_REPORTED 5                 /* verification failures printed per test */
#define BENCH_MAX_DEPTH 8                    /* nested arrays in one reply */

/* ---- configuration (mooncake-benchmark.c: parseOptions) ------------------ */

struct benchConfig {
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
};

extern struct benchConfig benchCfg;

/* ---- the workload table (its rows: mooncake-benchmark.c) ----------------- */

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

/* ---- shared state of a test ---------------------------------------------- */

extern unsigned char *benchPattern;       /* BENCH_PATTERN_PERIOD bytes */
extern const char benchCrlf[2];
extern _Atomic int benchBadvalsReported;   /* verification failures printed in this test */

/* The test being run: set by the main thread before a phase starts, read
 * only while threads run. */
struct benchTest {
    const workload *w;
    size_t vlen;             /* value size (0 for unsized tests) */
    int nkeys;               /* keys per command */
    int record;              /* phase is measured (not warm-up) */
    long long limit;         /* requests in this phase (LLONG_MAX with --duration) */
    uint64_t deadline;       /* ns, monotonic; 0 without --duration */
    _Atomic long long issued;
};

extern struct benchTest benchCur;

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
    unsigned char *sink;     /* where big payloads are read to (see benchConnRead) */
    size_t sinkcap;
    benchStats st;
    /* Requests completed in this phase, for the progress thread: written
     * only by this thread (a plain store, no locked instruction). */
    _Atomic uint64_t done;
} benchThread;

/* ---- small helpers (mooncake-benchmark.c) -------------------------------- */

void benchFatal(const char *fmt, ...);

static inline uint64_t nowNs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static inline uint64_t xorshift64(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Where the value of key k (of the current size) starts in the pattern. */
static inline size_t keyShift(uint64_t k) {
    return (size_t)(splitmix64(k ^ ((uint64_t)benchCur.vlen * 0x9e3779b97f4a7c15ULL)) %
                    BENCH_PATTERN_PERIOD);
}

static inline void putDigits(char *p, uint64_t k) {
    for (int i = BENCH_KEY_DIGITS - 1; i >= 0; i--) {
        p[i] = (char)('0' + k % 10);
        k /= 10;
    }
}

/* ---- a connection's traffic (benchconn.c) -------------------------------- */

/* Pre-builds every request header of c for the test about to run. */
void benchConnPrepare(conn *c);
/* Claims and sends c's next batch; 0 when the phase has none left for it. */
int benchConnIssue(conn *c);
/* Writes what is left of c's batch (EPOLLOUT, or right after building it). */
void benchConnWrite(conn *c);
/* Reads and consumes c's replies, issuing the next batch as one completes. */
void benchConnRead(conn *c);
/* "$<len>\r\n<s>\r\n" at p; returns its length. */
int benchPutArg(char *p, const char *s);

#endif
