/* mc_tcp.h -- libmooncake's TCP data plane: SEG.WRITE/SEG.READ over one
 * connection, or a large transfer striped over several (see mc_tcp.c). */
#ifndef MC_TCP_H
#define MC_TCP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mc_conn.h"

#define MC_TCP_SLICE_MIN (256 * 1024) /* no stream carries less than this */
#define MC_TCP_MAX_STREAMS 16

/* Queues the SEG.WRITE or SEG.READ of len bytes at seg:off. The caller's
 * memory is iov[0..iovcnt) (one entry: a contiguous buffer); a write sends
 * its first len bytes, a read fills its first len bytes. */
void mcTcpAppend(mcConn *conn, uint64_t seg, uint64_t off, uint64_t len, const struct iovec *iov, int iovcnt,
                 int write);
/* The reply to mcTcpAppend: 1 if the transfer worked. *r gets an error
 * reply to report (the caller frees it), NULL on an I/O failure. */
int mcTcpReadReply(mcConn *conn, const struct iovec *iov, int iovcnt, uint64_t len, int write, mcReply **r);

/* One transfer of a batch. */
typedef struct {
    mcConn *conn;
    uint64_t seg, off, len;
    const struct iovec *iov;     /* the caller's memory (len bytes of it move) */
    int iovcnt;
    size_t item;                 /* the caller's index */
    int ok;                      /* set by mcTcpBatch */
} mcTcpItem;

#define MC_TCP_VEC_MAX (64 * 1024)        /* values this small may share a command */
#define MC_TCP_VEC_RANGES 1024            /* ranges per SEG.WRITEV/SEG.READV */
#define MC_TCP_VEC_BYTES (4 * 1024 * 1024) /* payload per SEG.WRITEV/SEG.READV */

/* Sends every transfer (runs of small ones to the same connection and
 * segment as one SEG.WRITEV/SEG.READV), flushes each connection once, then
 * reads the replies: items[i].ok says which worked. *err gets the last error
 * reply, if any (the caller frees it). */
void mcTcpBatch(mcTcpItem *items, size_t n, int write, mcReply **err);

/* Worker threads, each with its own connections, that carry the slices of
 * one striped transfer in parallel with the caller's thread. */
typedef struct mcTcpPool mcTcpPool;

mcTcpPool *mcTcpPoolCreate(int nworkers, const char *user, const char *password);
void mcTcpPoolFree(mcTcpPool *p);
/* In a child forked from the pool's process: frees this process's copy and
 * closes the workers' connections (close only); the worker threads are the
 * parent's and are not joined. NULL is a no-op. */
void mcTcpPoolForget(mcTcpPool *p);
int mcTcpPoolWorkers(const mcTcpPool *p);

/* What failed in a striped transfer: the server's error reply (caller
 * frees) or, when that is NULL, the I/O error in err. */
typedef struct {
    mcReply *reply;
    int timed_out;               /* the I/O timeout ran out (not worth a retry) */
    int auth;                    /* the host refused the token (-WRONGTOKEN, -NOAUTH): ask for it again */
    char err[512];
} mcTcpFailure;

/* Moves len bytes at seg:off, to or from the first len bytes of iov[0..
 * iovcnt), in up to streams slices of the byte range (each stream sending
 * or filling the part of the buffers its slice covers): the first over own
 * (the caller's connection to uri), the others over the workers' own
 * connections to uri, all at once. Returns 1 if every slice worked, else 0
 * with the first failure in *f. streams must not exceed workers + 1. */
int mcTcpStriped(mcTcpPool *p, mcConn *own, const char *uri, const char *token, int streams, int connect_ms,
                 int io_ms, uint64_t seg, uint64_t off, uint64_t len, const struct iovec *iov, int iovcnt, int write,
                 mcTcpFailure *f);

/* How many streams a transfer of len bytes uses when up to want are allowed. */
int mcTcpStreamCount(uint64_t len, int want);
/* The default number of streams: one per online CPU, at most 4. */
int mcTcpDefaultStreams(void);

#endif
