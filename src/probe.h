/* probe.h -- is anything still serving at a RESP endpoint? See probe.c. */
#ifndef PROBE_H
#define PROBE_H

#include <stddef.h>
#include <sys/socket.h>

struct aeEventLoop;

typedef enum {
    PROBE_ALIVE = 1, /* something answered: the serving process lives */
    PROBE_GONE,      /* refused, no such socket, or closed without a word */
    PROBE_UNDECIDED  /* no answer in time, unreachable, or no resources */
} probeOutcome;

/* Called once, from the event loop, never from inside probeStart. detail
 * says why, for a log line (valid during the call only). */
typedef void probeDoneProc(probeOutcome outcome, const char *detail, void *privdata);

/* What kind of address an endpoint names, found without resolving a name
 * (a probe must never block the loop on DNS). */
enum {
    PROBE_URI_NONE = 0,     /* not probeable: unknown scheme, a host name, bad syntax */
    PROBE_URI_UNIX,         /* unix:///path or unix://@abstract */
    PROBE_URI_TCP,          /* tcp://ip:port, a numeric address */
    PROBE_URI_TCP_LOOPBACK, /* tcp://127.x.x.x:port, [::1], localhost */
    PROBE_URI_TCP_ANY       /* tcp://0.0.0.0:port, [::]: "wherever you reached me" */
};
int probeUriKind(const char *uri);
/* The port of a tcp:// uri probeUriKind accepts, else -1. */
int probeUriPort(const char *uri);
/* The same, and the address itself (relay.c connects to it without a
 * resolver call either). */
int probeUriAddress(const char *uri, struct sockaddr_storage *sa, socklen_t *salen);
/* Whether a tcp:// endpoint with a numeric address names ip (numeric, as
 * anetFdToString gives it; IPv4 matches its IPv4-mapped IPv6 form). */
int probeUriAddrIs(const char *uri, const char *ip);

typedef struct probe probe;

/* Connects to uri after delay_ms, sends PING and waits up to timeout_ms for
 * any reply. NULL (err says why) when uri cannot be probed. */
probe *probeStart(struct aeEventLoop *el, const char *uri, long long delay_ms, long long timeout_ms,
                  probeDoneProc *done, void *privdata, char *err, size_t errlen);
/* Stops a probe in flight; its done proc is not called. */
void probeCancel(probe *p);

#endif
