/* resp.h -- RESP request parser (server side) shared by the server, the
 * segment listener of libmooncake and the fuzz target. See resp.c. */
#ifndef RESP_H
#define RESP_H

#include <stddef.h>

#define RESP_INLINE_MAX (64 * 1024)   /* longest inline request or header line */
#define RESP_UNAUTH_MBULK_MAX 10      /* before AUTH: at most this many args */
#define RESP_UNAUTH_BULK_MAX 16384    /* before AUTH: at most this long an arg */

enum {
    RESP_MORE = 0,   /* need more bytes; `used` may still be > 0 */
    RESP_ARRAY,      /* a multibulk command starts: tok.n arguments follow */
    RESP_ARG,        /* one argument: tok.ptr/tok.len point into the buffer */
    RESP_BIGARG,     /* header of an argument of tok.n bytes >= big_arg: the caller
                      * reads the n bytes plus CRLF itself, then calls
                      * respReqBigArgDone() */
    RESP_INLINE,     /* a whole inline line (without CR LF) in tok.ptr/tok.len */
    RESP_ERR         /* protocol error, tok.err is Redis's wording; the
                      * connection must be closed after replying */
};

typedef struct respReqParser {
    /* Limits: set by the owner, may change between calls. */
    long long max_bulk_len;   /* proto-max-bulk-len */
    long long big_arg;        /* args at least this long come as RESP_BIGARG */
    int unauthenticated;      /* apply the RESP_UNAUTH_* limits */
    /* State. */
    int in_array;             /* inside a multibulk request */
    long long args_left;      /* arguments still expected */
    long long bulk_len;       /* -1 = expecting a '$' header */
    int in_bigarg;            /* waiting for respReqBigArgDone */
    char errbuf[48];          /* errors that quote input live here, not in a static */
} respReqParser;

typedef struct respTok {
    int type;
    long long n;
    const char *ptr;
    size_t len;
    const char *err;
} respTok;

void respReqInit(respReqParser *p, long long max_bulk_len, long long big_arg);
void respReqReset(respReqParser *p);
int respReqNext(respReqParser *p, const char *buf, size_t len, size_t *used, respTok *tok);
void respReqBigArgDone(respReqParser *p);

#endif
