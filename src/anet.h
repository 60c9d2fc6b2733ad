/* anet.h -- thin socket helpers that report errors as text. */
#ifndef ANET_H
#define ANET_H

#include <stddef.h>

#define ANET_OK 0
#define ANET_ERR -1
#define ANET_ERR_LEN 256

int anetTcpServer(char *err, int port, const char *bindaddr, int backlog);
int anetTcpBindAddrValid(char *err, const char *bindaddr);
int anetUnixServer(char *err, const char *path, unsigned int perm, int backlog);
int anetTcpAccept(char *err, int serversock, char *ip, size_t ip_len, int *port);
int anetUnixAccept(char *err, int serversock);
int anetTcpConnect(char *err, const char *addr, int port);
int anetUnixConnect(char *err, const char *path);
/* The address of a unix socket named path: a file system path, or "@name"
 * for Linux's abstract namespace (a socket with no file, gone with the last
 * descriptor; libmooncake's hosted segments use one). *len is the length to
 * pass to bind/connect. ANET_ERR if the name does not fit. */
struct sockaddr_un;
int anetUnixAddress(struct sockaddr_un *sa, unsigned int *len, const char *path);
int anetNonBlock(char *err, int fd);
int anetBlock(char *err, int fd);
int anetCloexec(int fd);
int anetEnableTcpNoDelay(char *err, int fd);
int anetKeepAlive(char *err, int fd, int interval);
int anetSetSendBuffer(char *err, int fd, int buffsize);
int anetSetNotSentLowat(char *err, int fd, int bytes);
int anetFdToString(int fd, char *ip, size_t ip_len, int *port, int remote);
int anetFormatAddr(char *buf, size_t buf_len, const char *ip, int port);
int anetIsLoopback(const char *ip);

/* Congestion control (see anet.c for why same-host peers get their own). */
int anetSetCongestion(char *err, int fd, const char *algo);
int anetGetCongestion(int fd, char *buf, size_t len);
/* ANET_OK when this process may set algo on a socket (a probe socket). */
int anetCongestionAvailable(char *err, const char *algo);
/* The window-only algorithm for same-host peers when the system default
 * paces (BBR), else NULL. Resolved once per process; MC_TCP_CONGESTION=system
 * in the environment keeps the default everywhere. */
const char *anetLocalCongestion(void);
/* A peer on this host: a loopback address, or our own address. */
int anetPeerIsLocal(const char *peer_ip, const char *local_ip);
/* anetLocalCongestion() on fd when its peer is on this host. 1 when the
 * peer is on this host and the socket is (now) unpaced, else 0. */
int anetTuneLocalCongestion(int fd);

#include <sys/types.h>
struct iovec;
ssize_t anetSendWithFd(int sock, struct iovec *iov, int iovcnt, int fd);
/* Every byte of iov on a blocking socket: sendmsg with MSG_NOSIGNAL (a
 * vanished peer must not raise SIGPIPE), partial writes resumed, EINTR
 * retried. 0, or -1 with errno (EAGAIN: the socket's send timeout). iov is
 * consumed. */
int anetSendAll(int sock, struct iovec *iov, int iovcnt);
void anetIovAdvance(struct iovec **iov, int *iovcnt, size_t n);

#endif
