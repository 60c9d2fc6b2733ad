/* fuzz_mchost.c -- libFuzzer target for a hosted segment's request parser
 * (src/libmooncake/mc_host.c): what a process that contributes memory reads
 * from its peers, who may be anyone able to connect to it.
 *
 * mc_host.c is included whole so that serveOne, the function each of the
 * host's connection threads loops on, is reachable without threads or a
 * listener. A host is set up once: 768 bytes of memory in two slices (ids
 * 1 and 2; tokens of 32 'a', 40 'b', and 'c' x 32 as slice 2's previous
 * one), the password "fuzz-password", a memfd for SHM.ATTACH, and a small
 * cap on buffered SEG.WRITEV payload so that the refusal is reached. Each
 * input is written into one end of a unix socketpair, that end is shut for
 * writing, and serveOne runs on the other end until it ends the connection,
 * the replies (and any descriptor SHM.ATTACH sends) drained in between.
 *
 * What must hold besides memory safety:
 *  - nothing outside the slices is ever written: the memory sits between
 *    guard bytes, and slice memory starts zeroed;
 *  - a connection that was never admitted (no AUTH or SEG.AUTH accepted:
 *    admitted_any still 0 at the end) changed no byte of any slice;
 *  - every byte of SEG.WRITEV buffering reserved against the host's cap
 *    is given back when the request ends, refused or not.
 */
#include "../../src/libmooncake/mc_host.c"

#include <sys/mman.h>

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) __builtin_trap(); \
    } while (0)

#define GUARD 64
#define MEM 768

static char arena[GUARD + MEM + GUARD];
static mcHost host;
static hostSlice slices[2];

static void setToken(char *dst, int ch, size_t len) {
    memset(dst, ch, len);
    dst[len] = '\0';
}

static void hostInit(void) {
    host.mem = arena + GUARD;
    host.size = MEM;
    host.memfd = memfd_create("fuzz-mchost", MFD_CLOEXEC);
    if (host.memfd >= 0 && ftruncate(host.memfd, MEM) != 0) abort();
    host.password = "fuzz-password";
    host.nslices = 2;
    host.slices = slices;
    slices[0] = (hostSlice){.id = 1, .off = 0, .size = 256, .gen = 1};
    setToken(slices[0].tok, 'a', 32);
    slices[1] = (hostSlice){.id = 2, .off = 256, .size = 512, .gen = 2, .oldgen = 3};
    setToken(slices[1].tok, 'b', 40);
    setToken(slices[1].oldtok, 'c', 32);
    host.tcp_fd = host.unix_fd = -1;
    host.max_conns = 1;
    host.max_buffered = 128 * 1024;
    /* The input is all written and the socket shut before serveOne runs,
     * so no read ever waits; these only have to leave time to read it. */
    host.preauth_ms = host.idle_ms = host.request_ms = 10000;
    pthread_mutex_init(&host.lock, NULL);
}

/* Reads whatever the host has replied so far; closes descriptors it sent. */
static void drain(int fd) {
    char buf[65536];
    for (;;) {
        char cbuf[CMSG_SPACE(4 * sizeof(int))];
        struct iovec iov = {buf, sizeof(buf)};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        ssize_t r = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); r >= 0 && cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
            int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < n; i++) {
                int got;
                memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                close(got);
            }
        }
        if (r <= 0) return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        hostInit();
        ready = 1;
    }
    memset(arena, 0x5a, sizeof(arena));
    memset(host.mem, 0, MEM);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
    size_t off = 0;
    while (off < size) { /* at most -max_len bytes: they fit in the buffer */
        ssize_t w = write(sv[1], data + off, size - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    shutdown(sv[1], SHUT_WR);

    uint32_t admit[2] = {0, 0};
    hostConn *c = calloc(1, sizeof(*c));
    FUZZ_CHECK(c != NULL);
    c->h = &host;
    c->fd = sv[0];
    c->is_unix = 1;
    c->admit = admit;
    c->preauth_until = monoMs() + host.preauth_ms;
    for (int n = 0; n < 100000 && serveOne(c) == 0; n++) drain(sv[1]);
    drain(sv[1]);

    for (size_t g = 0; g < GUARD; g++)
        FUZZ_CHECK(arena[g] == 0x5a && arena[GUARD + MEM + g] == 0x5a);
    if (!c->admitted_any)
        for (size_t i = 0; i < MEM; i++) FUZZ_CHECK(host.mem[i] == 0);
    FUZZ_CHECK(__atomic_load_n(&host.buffered, __ATOMIC_RELAXED) == 0);
    free(c);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
