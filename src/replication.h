/* replication.h -- a primary's records streamed to its replicas in cluster
 * mode, acknowledged writes (cluster-replica-ack) and failover's data side.
 * See replication.c for the design. */
#ifndef REPLICATION_H
#define REPLICATION_H

#include "sds.h"

struct client;

/* Non-zero on a primary that has (or may get) replicas: the key hooks cost
 * one load when it is off. */
extern int replOn;

void replWriterSeen(void);     /* the current command changed a key (multi.h's signal): its replies wait
                                * for the replicas under cluster-replica-ack */
void replFlushedAll(void);     /* every key went */
/* The stream's buffer of this iteration, for a record that is no key's
 * state (a client segment's SEGMENT, SEGMENT.GONE: aof.c); NULL when
 * nothing is streamed (no replica, or this node is one). */
sds *replRecordBuf(void);
void replBeforeSleep(void);    /* records to the replicas; held replies released */
void replCron(void);           /* the replica's link, acks, timeouts, failover */
void replClusterChanged(void); /* the topology was rebuilt: my role may differ */
void replAliveLapsed(void);    /* our alive key left etcd: a replica's data is not proven complete */
void replPeerLapsed(const char *id); /* a node's alive key left etcd: a link to it as our replica goes */
void replClientGone(struct client *c);
int replClientHeld(struct client *c); /* its replies wait for replicas' acks */
/* NULL, or why a write must be refused here: a replica (READONLY), a fenced
 * primary, or a planned failover pausing writes. */
const char *replWriteRefusal(struct client *c);
long long replOffset(void);
sds replInfo(sds s);           /* INFO replication */
size_t replBacklogMemory(void); /* MEMORY STATS replication.backlog */
/* A cluster replica (a standby): 1 with its link streaming, 2 catching up; leader gets the
 * primary's "host:port". 0 for a primary or a standalone server. (http.c's /health) */
int replStandby(char *leader, size_t len);
void replResizeBacklog(void);  /* CONFIG SET repl-backlog-size */
int replClientIsReplica(struct client *c); /* a replica's link (CLIENT LIST/KILL TYPE replica) */
unsigned long long replLinkBehind(struct client *c); /* queued past its snapshot: the replica class's measure */
const char *replLinkNodeId(struct client *c);
void replFailoverDone(const char *kind, const char *old_primary, int automatic, const char *err);

void psyncCommand(struct client *c);
void replconfCommand(struct client *c);
void replFailoverCommand(struct client *c); /* CLUSTER FAILOVER */

#endif
