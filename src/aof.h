/* aof.h -- the append-only log: persistence of the keyspace and the store's
 * objects. See aof.c for the design, aofformat.c for the files. */
#ifndef AOF_H
#define AOF_H

#include "aofformat.h"
#include "dump.h"
#include "sds.h"

struct client;

enum { AOF_FSYNC_NO = 0, AOF_FSYNC_ALWAYS, AOF_FSYNC_EVERYSEC };

/* Non-zero while the log is being written: the key hooks cost one load
 * when it is off. */
extern int aofOn;
extern int aofDebugWriteErrno; /* DEBUG AOF-WRITE-ERROR (tests): 0 = writes work */
/* DEBUG AOF-REWRITE-DELAY (tests): ms the rewrite child waits before it
 * copies each large value, so a test can change the pool meanwhile. */
extern int aofDebugRewriteDelayMs;
/* DEBUG AOF-FSYNC-ERROR (tests): the everysec thread's fsyncs fail with it. */
extern int aofDebugFsyncErrno;

/* Appends key's state as one record (RESTORE, PLACED or DEL): replication.c
 * sends replicas the records the log keeps. */
sds aofCatKeyState(sds s, sds key);
/* The same record with a large value (256 KiB or more, in the pool) left
 * where it lies: s gets the record up to the value, ref says what follows
 * -- the value's bytes (ref->value, ref->vlen, inside ref->obj), then what
 * aofCatValueTail appends. ref->value NULL: the record is whole in s. The
 * replication stream sends the value by reference (networking.c). */
typedef struct aofValueRef {
    struct storeObj *obj;
    const char *value;
    size_t vlen;
    unsigned char trailer[DUMP_TRAILER_LEN];
    int deferred;          /* the trailer is not computed: crc_seed is the checksum of all before the value */
    uint64_t crc_seed;
    int checked;           /* a log record (format 2): its check follows, from check_seed */
    uint64_t check_seed;
} aofValueRef;
sds aofCatKeyStateRef(sds s, sds key, aofValueRef *ref);
sds aofCatValueTail(sds s, const aofValueRef *ref);
/* As aofCatKeyStateRef, for key's object o (expire: its TTL, -1 none)
 * found by a scan of the keyspace, and a large value's checksum left to
 * aofWriteValueTail (ref->deferred): the value is not read now. */
sds aofCatObjStateDeferred(sds s, sds key, struct storeObj *o, long long expire, aofValueRef *ref);
/* What follows a deferred value in its record: AOF_VALUE_TAIL_LEN bytes
 * (its trailer, with the checksum computed now, and the record's end). */
void aofWriteValueTail(char *dst, uint64_t crc_seed, const char *value, size_t vlen);
/* Every client segment with an identity as a SEGMENT record (detached ones
 * too): what a PLACED record may name. The rewrite's and a full sync's. */
sds aofCatSegments(sds s);
/* A promoted replica's client segments and the objects it holds there
 * (detached.c), into the log: as a replica it logged none of them, and a
 * restart before their hosts remount must find them. */
void aofLogHeld(void);
struct storeObj;
/* Whether o, held only in client segments, has a PLACED record to give
 * (its segments proved their memory with an identity). */
int aofObjectPlaced(struct storeObj *o);
/* Every key went (FLUSHALL). */
void aofFlushedAll(void);
/* Whether this start found a log to load (appendonly yes and a manifest
 * listing files): a node without one has none of the data it acknowledged
 * before (cluster_sync.c holds such a primary back). */
int aofStartedFromLog(void);
struct segment;
/* A client segment mounted with an IDENTITY (or re-attached), and one
 * that went: the log keeps them so that a restarted server can re-attach
 * their objects (detached.c). No-ops for segments without an identity. */
void aofSegmentMounted(struct segment *s);
void aofSegmentGone(struct segment *s);

/* Start-up: with appendonly yes, load the log (refusing a damaged one, see
 * aof.c) and open it for appending. Exits the process on a refusal, with
 * the reason in the log. */
void aofLoadAtStart(void);
/* beforeSleep: write what changed, fsync as appendfsync says. */
void aofBeforeSleep(void);
/* serverCron: background fsync, the rewrite child, automatic rewrites. */
void aofCron(void);
/* SHUTDOWN: everything written and synced, no child left. */
int aofShutdown(int force); /* C_ERR: acknowledged writes the log cannot take (force: exit anyway) */
/* A write the server must refuse (the log cannot be written): its error. */
const char *aofWriteRefusal(void);

/* CONFIG SET appendonly yes|no (config.c's hook). */
int aofApplyConfig(const char **err);
sds aofInfo(sds s); /* INFO persistence's aof_* fields */
size_t aofBufferLength(void); /* MEMORY STATS aof.buffer */
int aofLoading(void);

void bgrewriteaofCommand(struct client *c);

#endif
