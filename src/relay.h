/* relay.h -- reading a value held only in a client-hosted segment from its
 * host, without blocking the event loop. See relay.c. */
#ifndef RELAY_H
#define RELAY_H

#include <stddef.h>
#include <stdint.h>

struct client;
struct storeObj;

#define RELAY_IDLE_MAX 16 /* connections to segment hosts kept for reuse */

/* Asks for bytes [off, off+len) of o for the command c is running. 0: the
 * outcome is known (o is in the pool, or the bytes or the error are here
 * from an earlier run of this command): relayBytes gives it. 1: a read was
 * started or queued; once every value the command needs is asked for, the
 * caller calls relayBlockIfPending and returns without replying or
 * changing anything. timeout_ms bounds each endpoint's read without
 * progress. */
int relayWant(struct client *c, struct storeObj *o, uint64_t off, uint64_t len, long long timeout_ms);

/* Blocks c if any read it asked for is still going: the command then runs
 * again from its arguments once they are all done (and finds their bytes
 * or errors). 1 if c is now blocked. */
int relayBlockIfPending(struct client *c);

/* The bytes relayWant answered 0 for, valid until the command ends; NULL
 * and c sent the error if the read failed or was refused. */
const char *relayBytes(struct client *c, struct storeObj *o, uint64_t off, uint64_t len);

/* The three for one value: the bytes, or NULL when c was sent the error
 * or is now blocked (either way the caller returns at once). */
const char *relayFetch(struct client *c, struct storeObj *o, uint64_t off, uint64_t len, long long timeout_ms);

/* The command is over (resetClient) or the client is going (freeClient):
 * its reads are cancelled and what they hold is freed. */
void relayClientReset(struct client *c);
/* What c's relayed reads hold, for its memory usage. */
size_t relayClientMemory(struct client *c);

/* beforeSleep: runs again the commands whose reads are all done. */
void relayBeforeSleep(void);
/* serverCron: closes connections to segment hosts idle for 10 s. */
void relayCron(void);

#endif
