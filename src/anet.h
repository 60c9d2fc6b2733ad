/* anet.h -- thin socket helpers that report errors as text. */
#ifndef ANET_H
#define ANET_H

#include <stddef.h>

#define ANET_OK 0
#define ANET_ERR -1
#define ANET_ERR_LEN 256

int anetTcpServer(char *err, int port, const char *bindaddr, int backlog);
int anetUnixServer(char *err, const char *path, unsigned int perm, int backlog);
int anetTcpAccept(char *err, int serversock, char *ip, size_t ip_len, int *port);
int anetUnixAccept(char *err, int serversock);
int anetTcpConnect(char *err, const char *addr, int port);
int anetUnixConnect(char *err, const char *path);
int anetNonBlock(char *err, int fd);
int anetBlock(char *err, int fd);
int anetCloexec(int fd);
int anetEnableTcpNoDelay(char *err, int fd);
int anetKeepAlive(char *err, int fd, int interval);
int anetSetSendBuffer(char *err, int fd, int buffsize);
int anetFdToString(int fd, char *ip, size_t ip_len, int *port, int remote);
int anetFormatAddr(char *buf, size_t buf_len, const char *ip, int port);
int anetIsLoopback(const char *ip);

#include <sys/types.h>
struct iovec;
ssize_t anetSendWithFd(int sock, struct iovec *iov, int iovcnt, int fd);
/* Every byte of iov on a blocking socket: sendmsg with MSG_NOSIGNAL (a
 * vanished peer must not raise SIGPIPE), partial writes resumed, EINTR
 * retried. 0, or -1 with errno (EAGAIN: the socket's send timeout). iov is
 * consumed. */
int anetSendAll(int sock, struct iovec *iov, int iovcnt);

#endif
