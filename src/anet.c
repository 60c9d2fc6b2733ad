/* anet.c -- socket helpers.
 *
 * Every helper writes a human-readable reason into `err` (ANET_ERR_LEN
 * bytes) so the caller can log exactly why a bind or accept failed instead
 * of a bare errno. Listening sockets are IPv4 or IPv6 depending on the
 * address string; an IPv6 listener is IPV6_V6ONLY so "127.0.0.1 ::1" binds
 * both without a conflict.
 */
#include "anet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static void anetSetError(char *err, const char *fmt, ...) {
    if (!err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, ANET_ERR_LEN, fmt, ap);
    va_end(ap);
}

static int anetSetBlock(char *err, int fd, int non_block) {
    int flags = fcntl(fd, F_GETFL);
    if (flags == -1) {
        anetSetError(err, "fcntl(F_GETFL): %s", strerror(errno));
        return ANET_ERR;
    }
    int nf = non_block ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
    if (nf != flags && fcntl(fd, F_SETFL, nf) == -1) {
        anetSetError(err, "fcntl(F_SETFL,O_NONBLOCK): %s", strerror(errno));
        return ANET_ERR;
    }
    return ANET_OK;
}

int anetNonBlock(char *err, int fd) { return anetSetBlock(err, fd, 1); }
int anetBlock(char *err, int fd) { return anetSetBlock(err, fd, 0); }

int anetCloexec(int fd) {
    int flags = fcntl(fd, F_GETFD);
    if (flags == -1) return ANET_ERR;
    if (flags & FD_CLOEXEC) return ANET_OK;
    return fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == -1 ? ANET_ERR : ANET_OK;
}

int anetEnableTcpNoDelay(char *err, int fd) {
    int yes = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes)) == -1) {
        anetSetError(err, "setsockopt TCP_NODELAY: %s", strerror(errno));
        return ANET_ERR;
    }
    return ANET_OK;
}

int anetSetSendBuffer(char *err, int fd, int buffsize) {
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffsize, sizeof(buffsize)) == -1) {
        anetSetError(err, "setsockopt SO_SNDBUF: %s", strerror(errno));
        return ANET_ERR;
    }
    return ANET_OK;
}

/* Caps the bytes a socket holds that TCP has not yet sent. A large reply
 * then leaves the server as the window opens, written by the server, instead
 * of queueing in the kernel to be transmitted later from whichever context
 * delivers the peer's ACK: on loopback that is the reading client's own
 * recv(), so an unbounded queue bills the server's transmit work to the
 * client (measured: redis-benchmark GET of 1 MiB and 4 MiB values, client
 * bound, 1.2-1.5x faster with 16 KiB). */
int anetSetNotSentLowat(char *err, int fd, int bytes) {
    if (setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &bytes, sizeof(bytes)) == -1) {
        anetSetError(err, "setsockopt TCP_NOTSENT_LOWAT: %s", strerror(errno));
        return ANET_ERR;
    }
    return ANET_OK;
}

/* Probes start after `interval` idle seconds, then every interval/3, and
 * the peer is declared dead after three misses: a dead peer is noticed in
 * about twice the interval, as in Redis. */
int anetKeepAlive(char *err, int fd, int interval) {
    int val = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &val, sizeof(val)) == -1) {
        anetSetError(err, "setsockopt SO_KEEPALIVE: %s", strerror(errno));
        return ANET_ERR;
    }
    val = interval;
    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &val, sizeof(val)) < 0) goto err;
    val = interval / 3;
    if (val == 0) val = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &val, sizeof(val)) < 0) goto err;
    val = 3;
    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &val, sizeof(val)) < 0) goto err;
    return ANET_OK;
err:
    anetSetError(err, "setsockopt keepalive timers: %s", strerror(errno));
    return ANET_ERR;
}

/* The addresses a listener on bindaddr:portstr binds: "*" (NULL too) any,
 * "::*" any IPv6, else a numeric address, never a name to resolve. */
static int bindAddrInfo(char *err, const char *bindaddr, const char *portstr, struct addrinfo **out) {
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
    if (bindaddr && !strcmp(bindaddr, "*")) bindaddr = NULL;
    if (bindaddr && !strcmp(bindaddr, "::*")) {
        bindaddr = NULL;
        hints.ai_family = AF_INET6;
    }
    int rv = getaddrinfo(bindaddr, portstr, &hints, out);
    if (rv != 0) {
        anetSetError(err, "%s: %s", bindaddr ? bindaddr : "*", gai_strerror(rv));
        return ANET_ERR;
    }
    return ANET_OK;
}

/* Whether anetTcpServer would take bindaddr as an address, without
 * binding: a setting can be refused when it is set, not when a listener is
 * first wanted. ANET_ERR with err set if not. */
int anetTcpBindAddrValid(char *err, const char *bindaddr) {
    struct addrinfo *servinfo = NULL;
    if (bindAddrInfo(err, bindaddr, "0", &servinfo) != ANET_OK) return ANET_ERR;
    freeaddrinfo(servinfo);
    return ANET_OK;
}

int anetTcpServer(char *err, int port, const char *bindaddr, int backlog) {
    char portstr[8];
    struct addrinfo *servinfo = NULL, *p;
    int s = -1;
    snprintf(portstr, sizeof(portstr), "%d", port);
    if (bindAddrInfo(err, bindaddr, portstr, &servinfo) != ANET_OK) return ANET_ERR;
    if (bindaddr && (!strcmp(bindaddr, "*") || !strcmp(bindaddr, "::*"))) bindaddr = NULL; /* for the messages */
    for (p = servinfo; p != NULL; p = p->ai_next) {
        s = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
        if (s == -1) continue;
        int yes = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        if (p->ai_family == AF_INET6) setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &yes, sizeof(yes));
        if (bind(s, p->ai_addr, p->ai_addrlen) == -1) {
            anetSetError(err, "bind %s:%d: %s", bindaddr ? bindaddr : "*", port, strerror(errno));
            close(s);
            s = -1;
            continue;
        }
        if (listen(s, backlog) == -1) {
            anetSetError(err, "listen: %s", strerror(errno));
            close(s);
            s = -1;
            continue;
        }
        break;
    }
    if (p == NULL && s == -1 && err && err[0] == '\0')
        anetSetError(err, "unable to bind socket on %s:%d", bindaddr ? bindaddr : "*", port);
    freeaddrinfo(servinfo);
    return s == -1 ? ANET_ERR : s;
}

/* Make path free for bind(). A socket left by a server that died is removed;
 * a path where a server still answers is refused (removing it would cut that
 * server off from new clients without a word), and so is anything that is not
 * a socket (a mistyped --unixsocket must not delete a file). */
static int anetUnixClaimPath(char *err, const char *path, const struct sockaddr_un *sa) {
    struct stat st;
    if (lstat(path, &st) == -1) {
        if (errno == ENOENT) return ANET_OK;
        anetSetError(err, "unix socket %s: %s", path, strerror(errno));
        return ANET_ERR;
    }
    if (!S_ISSOCK(st.st_mode)) {
        anetSetError(err, "unix socket %s: the path exists and is not a socket; not removing it", path);
        return ANET_ERR;
    }
    int probe = socket(AF_LOCAL, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe == -1) {
        anetSetError(err, "socket: %s", strerror(errno));
        return ANET_ERR;
    }
    int rc = connect(probe, (const struct sockaddr *)sa, sizeof(*sa));
    int connect_errno = errno;
    close(probe);
    if (rc == 0 || connect_errno == EAGAIN) {
        anetSetError(err, "unix socket %s: another server is listening there (give this one its own "
                     "--unixsocket, or --unixsocket \"\" for none)", path);
        return ANET_ERR;
    }
    if (unlink(path) == -1 && errno != ENOENT) {
        anetSetError(err, "unix socket %s: stale socket cannot be removed: %s", path, strerror(errno));
        return ANET_ERR;
    }
    return ANET_OK;
}

int anetUnixServer(char *err, const char *path, unsigned int perm, int backlog) {
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        anetSetError(err, "unix socket path too long (%zu), must be under %zu", strlen(path),
                     sizeof(sa.sun_path));
        return ANET_ERR;
    }
    int s = socket(AF_LOCAL, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s == -1) {
        anetSetError(err, "socket: %s", strerror(errno));
        return ANET_ERR;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_LOCAL;
    strcpy(sa.sun_path, path);
    if (anetUnixClaimPath(err, path, &sa) == ANET_ERR) goto err;
    /* Create the socket with its final permissions: a chmod after bind would
     * leave a window in which anyone the umask allows could connect (and a
     * unix-socket client can SHM.ATTACH the pool). umask is process-wide, but
     * listeners are opened at start-up, before any thread creates files. */
    mode_t old_umask = perm ? umask((mode_t)(~perm & 0777)) : 0;
    int rc = bind(s, (struct sockaddr *)&sa, sizeof(sa));
    int bind_errno = errno;
    if (perm) umask(old_umask);
    if (rc == -1) {
        anetSetError(err, "bind %s: %s", path, strerror(bind_errno));
        goto err;
    }
    if (listen(s, backlog) == -1) {
        anetSetError(err, "listen: %s", strerror(errno));
        goto err;
    }
    if (perm && chmod(path, perm) == -1) {
        anetSetError(err, "chmod %s: %s", path, strerror(errno));
        unlink(path);
        goto err;
    }
    return s;
err:
    close(s);
    return ANET_ERR;
}

static int anetGenericAccept(char *err, int s, struct sockaddr *sa, socklen_t *len) {
    int fd;
    do {
        fd = accept4(s, sa, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } while (fd == -1 && errno == EINTR);
    if (fd == -1) {
        anetSetError(err, "accept: %s", strerror(errno));
        return ANET_ERR;
    }
    return fd;
}

int anetTcpAccept(char *err, int s, char *ip, size_t ip_len, int *port) {
    struct sockaddr_storage sa;
    socklen_t salen = sizeof(sa);
    int fd = anetGenericAccept(err, s, (struct sockaddr *)&sa, &salen);
    if (fd == ANET_ERR) return ANET_ERR;
    if (sa.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&sa;
        if (ip) inet_ntop(AF_INET, &a->sin_addr, ip, (socklen_t)ip_len);
        if (port) *port = ntohs(a->sin_port);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;
        if (ip) inet_ntop(AF_INET6, &a->sin6_addr, ip, (socklen_t)ip_len);
        if (port) *port = ntohs(a->sin6_port);
    }
    return fd;
}

int anetUnixAccept(char *err, int s) {
    struct sockaddr_un sa;
    socklen_t salen = sizeof(sa);
    return anetGenericAccept(err, s, (struct sockaddr *)&sa, &salen);
}

int anetTcpConnect(char *err, const char *addr, int port) {
    char portstr[8];
    struct addrinfo hints, *servinfo, *p;
    int s = -1, rv;
    snprintf(portstr, sizeof(portstr), "%d", port);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if ((rv = getaddrinfo(addr, portstr, &hints, &servinfo)) != 0) {
        anetSetError(err, "%s: %s", addr, gai_strerror(rv));
        return ANET_ERR;
    }
    for (p = servinfo; p != NULL; p = p->ai_next) {
        s = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
        if (s == -1) continue;
        if (connect(s, p->ai_addr, p->ai_addrlen) == -1) {
            anetSetError(err, "connect %s:%d: %s", addr, port, strerror(errno));
            close(s);
            s = -1;
            continue;
        }
        break;
    }
    freeaddrinfo(servinfo);
    return s == -1 ? ANET_ERR : s;
}

/* An abstract name is the bytes after a leading NUL, exactly as many as the
 * address length says (no terminator: "x" and "x\0" are two names), so the
 * length is computed, never sizeof(sa). A path gets its NUL terminator. */
int anetUnixAddress(struct sockaddr_un *sa, unsigned int *len, const char *path) {
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(sa->sun_path)) return ANET_ERR;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_LOCAL;
    memcpy(sa->sun_path, path, n);
    if (path[0] == '@') {
        if (n == 1) return ANET_ERR;
        sa->sun_path[0] = '\0';
        *len = (unsigned int)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        *len = (unsigned int)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    return ANET_OK;
}

int anetUnixConnect(char *err, const char *path) {
    struct sockaddr_un sa;
    unsigned int salen;
    if (anetUnixAddress(&sa, &salen, path) != ANET_OK) {
        anetSetError(err, "bad unix socket name (empty or too long): %s", path);
        return ANET_ERR;
    }
    int s = socket(AF_LOCAL, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s == -1) {
        anetSetError(err, "socket: %s", strerror(errno));
        return ANET_ERR;
    }
    if (connect(s, (struct sockaddr *)&sa, salen) == -1) {
        anetSetError(err, "connect %s: %s", path, strerror(errno));
        close(s);
        return ANET_ERR;
    }
    return s;
}

/* Unix sockets report ip "/unixsocket" and port 0, like Redis's CLIENT LIST. */
int anetFdToString(int fd, char *ip, size_t ip_len, int *port, int remote) {
    struct sockaddr_storage sa;
    socklen_t salen = sizeof(sa);
    int r = remote ? getpeername(fd, (struct sockaddr *)&sa, &salen)
                   : getsockname(fd, (struct sockaddr *)&sa, &salen);
    if (r == -1) goto error;
    if (sa.ss_family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)&sa;
        if (ip && !inet_ntop(AF_INET, &s->sin_addr, ip, (socklen_t)ip_len)) goto error;
        if (port) *port = ntohs(s->sin_port);
    } else if (sa.ss_family == AF_INET6) {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&sa;
        if (ip && !inet_ntop(AF_INET6, &s->sin6_addr, ip, (socklen_t)ip_len)) goto error;
        if (port) *port = ntohs(s->sin6_port);
    } else if (sa.ss_family == AF_UNIX) {
        if (ip) snprintf(ip, ip_len, "/unixsocket");
        if (port) *port = 0;
    } else {
        goto error;
    }
    return 0;
error:
    if (ip && ip_len) snprintf(ip, ip_len, "?");
    if (port) *port = 0;
    return -1;
}

int anetFormatAddr(char *buf, size_t buf_len, const char *ip, int port) {
    return snprintf(buf, buf_len, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
}

int anetIsLoopback(const char *ip) {
    return !strncmp(ip, "127.", 4) || !strcmp(ip, "::1") || !strncmp(ip, "::ffff:127.", 11) ||
           !strcmp(ip, "/unixsocket");
}

/* ---- congestion control for same-host peers --------------------------------
 *
 * A TCP connection between two processes of one host never leaves the
 * loopback device: there is no link to share and nothing to lose, so
 * congestion control has nothing to do. But BBR (a common system default)
 * paces every flow with a per-socket hrtimer, and on this path the pacing is
 * the cost: measured here, a 1 MiB GET written from the pool moves at 3.5
 * GB/s under BBR and 8.1 GB/s under CUBIC or Reno, the server's CPU being
 * busy in both cases. So same-host connections are switched to a window-only
 * algorithm when the default paces; everything else keeps the system's
 * choice, which is the administrator's to make. */

int anetSetCongestion(char *err, int fd, const char *algo) {
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, algo, (socklen_t)strlen(algo)) == -1) {
        anetSetError(err, "setsockopt TCP_CONGESTION %s: %s", algo, strerror(errno));
        return ANET_ERR;
    }
    return ANET_OK;
}

int anetGetCongestion(int fd, char *buf, size_t len) {
    char name[64] = {0}; /* TCP_CA_NAME_MAX is 16 */
    socklen_t sl = sizeof(name) - 1;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &sl) == -1) return ANET_ERR;
    snprintf(buf, len, "%s", name);
    return ANET_OK;
}

int anetCongestionAvailable(char *err, const char *algo) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1) {
        anetSetError(err, "socket: %s", strerror(errno));
        return ANET_ERR;
    }
    int rc = anetSetCongestion(err, fd, algo);
    close(fd);
    return rc;
}

/* Of the algorithms Linux ships, only BBR (bbr, bbr2, bbr3) asks for pacing. */
static int congestionPaces(const char *name) { return strncmp(name, "bbr", 3) == 0; }

static char local_cc[16];
static pthread_once_t local_cc_once = PTHREAD_ONCE_INIT;

static void resolveLocalCongestion(void) {
    const char *env = getenv("MC_TCP_CONGESTION");
    if (env && !strcmp(env, "system")) return;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1) return;
    char def[64];
    if (anetGetCongestion(fd, def, sizeof(def)) == ANET_OK && congestionPaces(def)) {
        /* CUBIC needs CAP_NET_ADMIN unless the administrator allowed it;
         * Reno is always allowed. Either is fine on loopback. */
        static const char *const prefer[] = {"cubic", "reno"};
        for (size_t i = 0; i < sizeof(prefer) / sizeof(prefer[0]); i++) {
            if (anetSetCongestion(NULL, fd, prefer[i]) == ANET_OK) {
                snprintf(local_cc, sizeof(local_cc), "%s", prefer[i]);
                break;
            }
        }
    }
    close(fd);
}

const char *anetLocalCongestion(void) {
    pthread_once(&local_cc_once, resolveLocalCongestion);
    return local_cc[0] ? local_cc : NULL;
}

int anetPeerIsLocal(const char *peer_ip, const char *local_ip) {
    return anetIsLoopback(peer_ip) || !strcmp(peer_ip, local_ip);
}

int anetTuneLocalCongestion(int fd) {
    char peer[64], local[64], now[64];
    if (anetFdToString(fd, peer, sizeof(peer), NULL, 1) == -1 ||
        anetFdToString(fd, local, sizeof(local), NULL, 0) == -1 || !strcmp(peer, "/unixsocket") ||
        !anetPeerIsLocal(peer, local))
        return 0;
    const char *cc = anetLocalCongestion();
    if (cc) anetSetCongestion(NULL, fd, cc);
    return anetGetCongestion(fd, now, sizeof(now)) == ANET_OK && !congestionPaces(now);
}

/* sendmsg of iov with one fd attached by SCM_RIGHTS: the receiver gets the
 * fd with the first of these bytes it reads. Used by SHM.ATTACH in the
 * server and in libmooncake's segment host. */
ssize_t anetSendWithFd(int sock, struct iovec *iov, int iovcnt, int fd) {
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    memset(&u, 0, sizeof(u));
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)iovcnt;
    msg.msg_control = u.buf;
    msg.msg_controllen = sizeof(u.buf);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t w;
    do w = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    return w;
}

/* Drops the first n bytes of an iovec array after a short write. */
void anetIovAdvance(struct iovec **iov, int *iovcnt, size_t n) {
    while (*iovcnt > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*iovcnt)--;
    }
    if (*iovcnt > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

int anetSendAll(int sock, struct iovec *iov, int iovcnt) {
    while (iovcnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(iovcnt > IOV_MAX ? IOV_MAX : iovcnt)};
        ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EPIPE;
            return -1;
        }
        anetIovAdvance(&iov, &iovcnt, (size_t)w);
    }
    return 0;
}
