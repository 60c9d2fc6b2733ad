/* fuzz_relay.c -- libFuzzer target for relay.c's reader of a segment
 * host's replies (rrParse and the reads that feed it): what the server
 * reads when GET and its family fetch a value held in a segment a client
 * process hosts.
 *
 * The host is another process, maybe hostile, so every byte it sends is
 * input. The reader is a small state machine (the SEG.AUTH answer, the
 * "$<len>" header, the body read straight into the value's buffer, its
 * CRLF), but its outcomes reach into the whole server -- the connection
 * goes back to the idle set or is closed, a failed endpoint moves the read
 * to the next one, a finished read wakes its client -- so relay.c is
 * included here and runs inside the server, linked whole as fuzz_repl
 * links it (set up once, as main would, with the defaults).
 *
 * One read is made by hand, as rrStart would make it, but with endpoints
 * chosen here instead of a segment's: 1 to 3 of them, all at one address,
 * each with or without a token to log in with (SEG.AUTH), asking for a
 * value of the length the input picks. A connection to that address waits
 * in the idle set, one end of a socketpair; the other end is the host,
 * which "sends" the rest of the input in pieces of the size it picks,
 * each followed by the read handler, and then closes. The address itself
 * is a unix path that does not exist, so an attempt that needs a fresh
 * connection (a kept one that failed before any reply is retried once on
 * a fresh one) fails at once: the read goes to its next endpoint, which
 * takes the kept connection again if it went back to the idle set in step.
 * Input:
 *
 *   byte 0   bits 0-1: endpoints - 1 (3 means 1); bits 2-4: which have a
 *            token; bit 5: the kept connection already logged in with the
 *            token (no SEG.AUTH on it)
 *   byte 1-2 the value's length less 1, little-endian, modulo 6000 (longer
 *            than the reader's 4 KiB buffer is possible; relayWant answers
 *            a length of 0 without reading)
 *   byte 3   the piece size (0: all at once)
 *   rest     what the host sends
 *
 * Checked, besides ASan/UBSan and leaks: the read ends (done, never still
 * running once the host has closed); it ends with exactly one of the
 * bytes, of the length asked, or a -REMOTE error; the client's memory
 * account holds exactly the bytes kept; nothing stays in flight. And the
 * one that decides whether a later read gets its own reply: a connection
 * that goes back to the idle set is in step with its host -- the bytes it
 * read are exactly the replies to the requests it sent, framed as the
 * host frames them (inStep: SEG.AUTH gets one line, SEG.READ a line or a
 * whole bulk), never a reply's head without its body. Whether the bytes
 * served are the right ones is not checked: the host holds the value, so
 * any bytes it sends are its to send.
 */
#include "../../src/relay.c"

#include <sys/ioctl.h>
#include <sys/socket.h>

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) __builtin_trap(); \
    } while (0)

int mooncakeServerMain(int argc, char **argv);

#define NOWHERE "unix:///nonexistent/fuzz-relay"
#define TOKEN "fuzztoken"

static int ready;

static void setUp(void) {
    char *vargv[] = {"mooncake-server", "--version", NULL};
    mooncakeServerMain(2, vargv);
    char *cargv[] = {"--loglevel", "warning", "--logfile", "/dev/null"};
    char err[512];
    if (loadServerConfig(NULL, (int)(sizeof(cargv) / sizeof(cargv[0])), cargv, err, sizeof(err)) != C_OK) {
        fprintf(stderr, "fuzz_relay set-up: %s\n", err);
        __builtin_trap();
    }
    server.el = aeCreateEventLoop(1024);
    FUZZ_CHECK(server.el != NULL);
    ready = 1;
}

/* What the server sent the host: kept whole, to count the requests. */
static char sent[65536];
static size_t nsent;

static void drain(int fd) {
    ssize_t n;
    while (nsent < sizeof(sent) && (n = read(fd, sent + nsent, sizeof(sent) - nsent)) > 0) nsent += (size_t)n;
    FUZZ_CHECK(nsent < sizeof(sent));
}

/* The reference framing of the host's replies, request by request, as the
 * reader must take them: SEG.AUTH is answered by one line; SEG.READ by a
 * line, or "$<n>" and n bytes and CRLF. Returns 1 if the first `consumed`
 * bytes of the stream are exactly the replies to every request sent. */
static int inStep(const uint8_t *host, size_t consumed) {
    size_t pos = 0;
    const char *p = sent, *end = sent + nsent;
    for (;;) {
        const char *a = memmem(p, (size_t)(end - p), "SEG.AUTH", 8);
        const char *r = memmem(p, (size_t)(end - p), "SEG.READ", 8);
        if (a == NULL && r == NULL) break;
        int is_read = a == NULL || (r != NULL && r < a);
        p = (is_read ? r : a) + 8;
        if (pos >= consumed) return 0;
        const uint8_t *nl = memchr(host + pos, '\n', consumed - pos);
        if (nl == NULL) return 0;
        size_t linelen = (size_t)(nl - (host + pos)) + 1;
        long long blen;
        int bulk = is_read && host[pos] == '$' && linelen >= 4 && nl[-1] == '\r' &&
                   string2ll((const char *)host + pos + 1, linelen - 3, &blen) && blen >= 0;
        pos += linelen;
        if (bulk) pos += (size_t)blen + 2;
        if (pos > consumed) return 0;
    }
    return pos == consumed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ready) setUp();
    if (size < 4) return 0;
    int nt = 1 + (data[0] & 3) % 3;
    int credmask = (data[0] >> 2) & 7;
    int logged_in = (data[0] >> 5) & 1;
    uint64_t len = 1 + (uint64_t)(data[1] | (data[2] << 8)) % 6000; /* 0 is never read */
    size_t piece = data[3] ? data[3] : 65536;
    const uint8_t *host = data + 4;
    size_t hostlen = size - 4;

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == -1) return 0;

    client *c = zcalloc(sizeof(client));
    c->id = 1;
    relayClient *rc = c->relay = zcalloc(sizeof(relayClient));
    relayRead *r = zcalloc(sizeof(*r));
    r->c = c;
    r->len = len;
    r->timeout_ms = 1000;
    r->timer = -1;
    rc->pending = 1;
    rc->running = 1;
    rc->r = zmalloc(sizeof(relayRead *));
    rc->r[0] = r;
    rc->n = rc->cap = rc->nextq = 1; /* started */
    server.remote_get_inflight++;
    r->state = RR_RUNNING;
    r->why = sdsempty();
    r->out = sdsempty();
    r->rbuf = zmalloc(RELAY_RBUF);
    r->t = zcalloc(sizeof(relayTarget) * 3);
    r->nt = nt;
    for (int i = 0; i < nt; i++) {
        r->t[i].segid = (uint64_t)i + 1;
        r->t[i].offset = 4096 * (uint64_t)i;
        r->t[i].uri = sdsnew(NOWHERE);
        r->t[i].addr = sdsnew(NOWHERE);
        r->t[i].cred = (credmask >> i) & 1 ? sdsnew(TOKEN) : NULL;
    }
    relayConn *kept = zcalloc(sizeof(relayConn));
    kept->addr = sdsnew(NOWHERE);
    kept->fd = sv[0];
    kept->auth = logged_in ? sdsnew(TOKEN) : NULL;
    idlePut(kept);

    nsent = 0;
    rrNextAttempt(r); /* takes the kept connection */
    int host_closed = 0;
    size_t fed = 0;
    int steps = 0;
    while (r->state == RR_RUNNING) {
        FUZZ_CHECK(++steps < 100000);
        FUZZ_CHECK(r->conn != NULL);
        if (r->phase == PH_CONNECTING || r->phase == PH_SENDING) {
            rrWritable(r);
            drain(sv[1]);
            continue;
        }
        if (fed < hostlen) {
            size_t n = hostlen - fed < piece ? hostlen - fed : piece;
            ssize_t w = write(sv[1], host + fed, n);
            FUZZ_CHECK(w > 0);
            fed += (size_t)w;
        } else if (!host_closed) {
            shutdown(sv[1], SHUT_WR);
            host_closed = 1;
        }
        rrReadable(r);
    }

    /* The outcome. */
    FUZZ_CHECK(r->state == RR_DONE && r->conn == NULL && r->rbuf == NULL && r->t == NULL);
    FUZZ_CHECK((r->bytes == NULL) != (r->err == NULL));
    FUZZ_CHECK(rc->pending == 0 && rc->running == 0 && server.remote_get_inflight == 0);
    if (r->bytes) {
        FUZZ_CHECK(sdslen(r->bytes) == len);
        FUZZ_CHECK(rc->mem == sdsAllocSize(r->bytes));
    } else {
        FUZZ_CHECK(rc->mem == 0 && strncmp(r->err, "-REMOTE ", 8) == 0);
    }
    /* A connection kept for the next read is in step with its host: what
     * it read is exactly the replies to what it sent. */
    FUZZ_CHECK(nidle <= 1);
    if (nidle == 1) {
        int unread = 0;
        FUZZ_CHECK(idleConns[0]->fd == sv[0] && ioctl(sv[0], FIONREAD, &unread) == 0);
        drain(sv[1]);
        FUZZ_CHECK(inStep(host, fed - (size_t)unread));
    }
    for (int i = 0; i < nidle; i++) connClose(idleConns[i]);
    nidle = 0;
    close(sv[1]);
    sdsfree(r->bytes);
    sdsfree(r->err);
    zfree(r);
    zfree(rc->r);
    zfree(rc);
    zfree(c);
    return 0;
}
