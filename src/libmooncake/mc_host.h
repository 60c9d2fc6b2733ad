/* mc_host.h -- serving a segment this process hosts (see mc_host.c). */
#ifndef MC_HOST_H
#define MC_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct mcHost mcHost;

#define MC_HOST_MAX_SLICES 1024

/* Serves [mem, mem+size) on a TCP listener at bindip (any free port) and a
 * unix socket; memfd (or -1) is what SHM.ATTACH hands out. The memory is
 * served as nslices segments, slice i being [off[i], off[i]+len[i]) (one
 * slice of the whole memory when nslices is 0; a cluster mounts one slice
 * per primary): a request names a slice by its segment id and its offsets
 * count from the slice's start. A connection reaches a slice once it has
 * presented the slice's token (mcHostSetSegmentToken) or, when password is
 * set, AUTHed with it and with user (NULL: "default"; AUTH <password> alone
 * means default), the credentials the host itself uses. The TCP listener takes a
 * free port in [port_min, port_max] (0, 0: one the kernel picks). NULL with
 * err on failure. */
mcHost *mcHostStart(void *mem, size_t size, int memfd, int nslices, const size_t *off, const size_t *len,
                    const char *bindip, int port_min, int port_max, const char *user, const char *password,
                    char *err, size_t errlen);
/* Closes the listeners and every connection, and waits for their threads:
 * after it returns nothing touches the memory. NULL is a no-op. */
void mcHostStop(mcHost *h);
/* In a child forked from the hosting process: frees this process's copy
 * of h and closes its descriptors (close only: no shutdown(), which would
 * end the parent's connections too; no wake-up written, no thread joined
 * -- they are the parent's). The parent's listeners and connections go on.
 * NULL is a no-op. */
void mcHostForget(mcHost *h);
/* The segment id slice i was mounted under (0: none, refused). The MOUNT
 * was answered: the token it proposed is now the only one slice i takes. */
void mcHostSetSegmentId(mcHost *h, int slice, uint64_t id);
/* The token slice i admits peers by (SEG.AUTH id token), set before the
 * MOUNT that proposes it (TOKEN); the previous one stays good until
 * mcHostSetSegmentId. 32..128 characters; -1 if not. */
int mcHostSetSegmentToken(mcHost *h, int slice, const char *token);
/* Caps: connections (threads) at once, and SEG.WRITEV payload buffered
 * across them; 0 keeps a cap as it is (defaults 512 and 256 MiB). */
void mcHostSetLimits(mcHost *h, int max_conns, size_t max_buffered);
int mcHostConnections(mcHost *h);  /* live connections now */
/* tcp://ip:port and unix://@name (abstract); returns how many were written. */
int mcHostEndpoints(mcHost *h, char (*eps)[300], int max);
/* Numeric form of a socket address, IPv6 without brackets. */
void mcHostAddrString(const struct sockaddr_storage *sa, char *buf, size_t len);

#endif
