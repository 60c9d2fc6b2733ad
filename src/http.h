/* http.h -- the HTTP endpoints inference engines poll (/health,
 * /get_all_segments, /query_key). The design is described at the top of
 * http.c; the formats are in docs/PROTOCOL.md, "HTTP endpoints". */
#ifndef HTTP_H
#define HTTP_H

#include <stddef.h>

/* Start-up, after the event loop exists: listens as http-port/http-bind
 * say (nothing when http-port is 0). C_ERR with the reason in err. */
int httpInit(char *err, size_t errlen);
/* CONFIG SET of an http-* directive: makes the listener match the
 * configuration, or changes nothing and says why. */
int httpApplyConfig(const char **err);
/* SHUTDOWN: stops listening and closes the HTTP connections. */
void httpShutdown(void);
/* INFO. */
int httpListeningPort(void);      /* 0: not listening */
int httpListenFd(void);           /* -1: not listening (a forked child closes it) */
long long httpConnectedClients(void);

#endif
