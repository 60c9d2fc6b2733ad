/* mc_conn.h -- libmooncake's blocking RESP connection (see mc_conn.c). */
#ifndef MC_CONN_H
#define MC_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum { MCR_STATUS = 1, MCR_ERROR, MCR_INT, MCR_BULK, MCR_NIL, MCR_ARRAY };

typedef struct mcReply {
    int type;
    long long integer;       /* MCR_INT */
    char *str;               /* STATUS, ERROR, BULK: NUL-terminated */
    size_t len;
    size_t elements;         /* MCR_ARRAY (a RESP3 map comes flattened) */
    struct mcReply **element;
} mcReply;

#define MC_CONN_MAX_IOV 64

#define MC_CONN_ADMITTED 8

typedef struct mcConn {
    int fd;
    int is_unix;
    char uri[300];
    int io_timeout_ms;
    int spin_us;             /* poll this long for a reply before sleeping in read */
    /* Input. */
    char *rbuf;
    size_t rcap, rlen, rpos;
    int recv_fd;             /* last fd received by SCM_RIGHTS, -1 if none */
    /* Output: small parts are copied into obuf, large ones referenced. */
    char *obuf;
    size_t ocap, olen;
    struct { size_t obuf_off; const void *ptr; size_t len; } refs[MC_CONN_MAX_IOV];
    int nrefs;
    int discard;             /* replies still to come for commands sent without waiting */
    long long reply_until_us; /* the reply being read waits no longer (0: no I/O timeout) */
    size_t reply_got;        /* its bytes since the budget was last renewed */
    int broken;              /* an I/O error or protocol error: don't reuse */
    int timed_out;           /* ... and it was the I/O timeout */
    int garbled;             /* ... and it was a protocol error: the peer is no Mooncake server */
    int local_unpaced;       /* TCP to this host, not paced (anetTuneLocalCongestion) */
    /* Segments this connection presented a token for (mcConnAdmit): a
     * few, oldest replaced first -- a data connection serves one host. */
    uint64_t admitted[MC_CONN_ADMITTED];
    int nadmitted, admitted_next;
    char err[256];
} mcConn;

/* uri: tcp://host:port, unix:///path or host:port. NULL with err on failure. */
mcConn *mcConnOpen(const char *uri, int connect_timeout_ms, int io_timeout_ms, char *err, size_t errlen);
void mcConnClose(mcConn *c);
/* The I/O timeout of a connection already open (mc_set_timeouts): from
 * its next wait on. Nothing happens when it is the one it has. */
void mcConnSetTimeout(mcConn *c, int io_timeout_ms);
/* AUTH user password, or AUTH password without a user (NULL/empty), or
 * nothing when neither is given. MC_OK, MC_ERR_AUTH or MC_ERR_IO. */
int mcConnAuth(mcConn *c, const char *user, const char *password);
/* SEG.AUTH seg token to a segment host, once per connection and segment:
 * the capability the server hands out (SEGMENT.TOKEN) that admits this
 * connection to the segment. NULL or empty token: nothing to present.
 * MC_OK, MC_ERR_AUTH (c->err holds the refusal: -WRONGTOKEN when it is
 * not, or no longer, the segment's) or MC_ERR_IO. */
int mcConnAdmit(mcConn *c, uint64_t seg, const char *token);
/* The host said -NOAUTH (a remount rotated the token): present it again. */
void mcConnForgetAdmissions(mcConn *c);

/* Queue one command; arguments of 16 KiB or more are sent from the
 * caller's memory, which must stay valid until mcConnFlush. */
void mcConnAppend(mcConn *c, int argc, const char **argv, const size_t *lens);
/* The same piece by piece: the header of a command of argc arguments, then
 * each argument -- one whose bytes lie in several buffers (the payload of
 * a scatter-gather SEG.WRITE) with mcConnAppendArgV, which sends the first
 * len bytes of iov[0..iovcnt) as one argument; the same rule on 16 KiB
 * applies to each piece. */
void mcConnAppendHeader(mcConn *c, int argc);
void mcConnAppendArg(mcConn *c, const void *p, size_t len);
void mcConnAppendArgV(mcConn *c, const struct iovec *iov, int iovcnt, size_t len);
/* Whether the peer has closed the connection (EOF or an error waiting on
 * the socket), asked without blocking and without reading: for state a
 * connection holds across calls (a put session), which must not be used
 * once the server has given it back. Marks it broken when so. */
int mcConnPeerClosed(mcConn *c);
int mcConnFlush(mcConn *c);                  /* MC_OK or MC_ERR_IO */
/* The next reply (caller frees with mcReplyFree); NULL on I/O or protocol error. */
mcReply *mcConnRead(mcConn *c);
/* The next reply as a bulk read straight into dst (cap bytes): returns its
 * length, or -1 with *err_reply set for an error/nil/other reply (caller
 * frees it), or MC_ERR_IO/MC_ERR_PROTOCOL/MC_ERR_TOO_SMALL (the connection
 * is then broken). */
long long mcConnReadBulkInto(mcConn *c, void *dst, size_t cap, mcReply **err_reply);
/* The same into iov[0..iovcnt) in order (their sum is the capacity): the
 * bytes are read into the buffers with readv-style calls, not staged. */
long long mcConnReadBulkIntoV(mcConn *c, const struct iovec *iov, int iovcnt, mcReply **err_reply);
/* The header of an array reply: its length, or -1 with *err_reply set to
 * whatever came instead (an error, say), or MC_ERR_* on I/O failure. The
 * elements follow (mcConnReadBulkInto each). */
long long mcConnReadArrayLen(mcConn *c, mcReply **err_reply);
/* Queue one command whose reply nobody waits for (LEASE.RELEASE after a
 * get): it is read and dropped before the next reply is read. */
void mcConnAppendNoReply(mcConn *c, int argc, const char **argv, const size_t *lens);
/* One command and its reply. */
mcReply *mcConnCommand(mcConn *c, int argc, const char **argv, const size_t *lens);
void mcReplyFree(mcReply *r);

/* The sub-list of iov[0..iovcnt) covering bytes [off, off+len) of their
 * concatenation, written to out (at most outcap entries, zero-length ones
 * dropped): its entry count. */
int mcIovCut(const struct iovec *iov, int iovcnt, uint64_t off, uint64_t len, struct iovec *out, int outcap);

/* Integer helpers on replies. */
int mcReplyIsError(const mcReply *r, const char *code); /* error starting with code */
long long mcReplyInt(const mcReply *r, int *ok);        /* INT, or BULK/STATUS holding one */

#endif
