/* multi.c -- MULTI, EXEC, DISCARD, WATCH, UNWATCH.
 *
 * Redis 7's transactions, on a server where nothing runs concurrently with
 * a command: between MULTI and EXEC a client's commands are checked (name,
 * arity, authentication, cluster routing, a large argument refused before
 * its bytes came) and queued, each answered +QUEUED; EXEC runs the queue
 * in one go, so no other client's command can come between two of them.
 * That is all the isolation there is, and all Redis gives: there is no
 * rollback. A command that fails while running (a wrong option, -OOM)
 * leaves its error in EXEC's array and the others still run. A command
 * refused while queueing (unknown, wrong arity, MOVED...) flags the
 * transaction instead, and EXEC discards it all with -EXECABORT, which is
 * what lets a client that pipelines MULTI ... EXEC without reading the
 * replies know that nothing ran.
 *
 * The queue owns the arguments: a queued command's argv (and, for a value
 * read straight into the pool, its object in argobj) is taken from the
 * client as it is, with no copy of the bytes, and put back in the client's
 * argv slots while EXEC runs it. So a large SET inside MULTI still crosses
 * memory once; its extent is reserved at queue time and published (or
 * freed, on DISCARD) later, invisible to readers in between.
 *
 * The queue is bounded like a request still arriving: its heap (the
 * queued arguments, their sds headers and slots; values held in the pool
 * are the pool's to bound) may not pass client-query-buffer-limit. A
 * transaction is one request delivered in pieces, and without a bound a
 * client that sent MULTI and then SETs forever grew the server by its
 * whole input (found probing: 200k queued 1 KB PINGs held 220 MB). The
 * command that would pass the limit is refused, the queue is freed at
 * once and the transaction doomed (EXECABORT), so what a pipelining client
 * sends after it costs nothing.
 *
 * What runs at once inside MULTI instead of being queued: EXEC, DISCARD,
 * MULTI (an error: no nesting), WATCH (an error: the keys must be chosen
 * before the transaction starts), QUIT and RESET, as in Redis. What is
 * refused (CMD_NO_MULTI in the command table; -ERR Command not allowed
 * inside a transaction, and the transaction is flagged): commands that
 * cannot complete inside EXEC because their reply comes later or through
 * another channel --
 *   - the CLUSTER subcommands that change the topology: they wait for
 *     etcd's commit (a blocked client), and EXEC must finish in one call;
 *   - SHM.ATTACH: its file descriptor rides on the write that carries its
 *     reply, which inside EXEC is the whole array: the client could not
 *     tell which reply it belongs to;
 *   - SHUTDOWN, as in Redis: the process would end halfway through EXEC.
 * A command that would subscribe the connection to a stream (SUBSCRIBE,
 * when pub/sub comes) gets the same flag. MONITOR inside EXEC is refused
 * when it runs, as Redis does (CLIENT_IN_EXEC). MIGRATE is allowed: it is
 * synchronous here as in Redis, so it completes inside EXEC. A big
 * SEG.WRITE payload is not written in place while queued (t_data.c): the
 * write would happen before EXEC, or despite a DISCARD.
 *
 * WATCH is optimistic locking. server.watched_keys maps each watched key
 * to the list of WATCHes on it (one per client), and each client keeps an
 * array of its own, so both "who watches k" and "forget mine" are cheap.
 * The store layer calls signalModifiedKey on every change of a key (write,
 * delete, expiry, eviction, a TTL set or removed, a segment's objects
 * reaped) and signalFlushedDb before FLUSHALL; those mark the watchers
 * CLIENT_DIRTY_CAS and EXEC replies a nil array. Hooking the store rather
 * than the commands means a new command that writes through storeSet or
 * storeDelete is covered without knowing WATCH exists. PIN, UNPIN and
 * LEASE change neither a value nor its TTL and do not count. While no
 * client WATCHes (server.watching == 0) a key write costs one branch.
 *
 * Expiry follows Redis 7.0: a watched key that expires before EXEC fails
 * the transaction even if nothing deleted it yet (EXEC checks); a key that
 * was already expired when it was WATCHed does not, since its deletion
 * changes nothing a reader could see.
 */
#include "multi.h"

#include <string.h>

#include "acl.h"
#include "store.h"
#include "zmalloc.h"

/* One client's WATCH of one key. The key string is the dict's (the entry
 * lives while any WATCH of it does); the per-key list is doubly linked so
 * a client forgets its WATCH in O(1). */
typedef struct watchedKey {
    sds key;
    client *c;
    int expired;  /* the key was already logically expired at WATCH time */
    struct watchedKey *prev, *next;
} watchedKey;

static void wkKeyDestructor(void *key) { sdsfree(key); }
static dictType watchedKeysType = {dictSdsHash, dictSdsEqual, wkKeyDestructor, NULL};

void multiInit(void) { server.watched_keys = dictCreate(&watchedKeysType); }

/* ---- queueing ------------------------------------------------------------ */

int multiRunsNow(const serverCommand *cmd) {
    return cmd->proc == execCommand || cmd->proc == discardCommand || cmd->proc == multiCommand ||
           cmd->proc == watchCommand || cmd->proc == quitCommand || cmd->proc == resetCommand;
}

static void freeMultiCmd(multiCmd *mc) {
    for (int j = 0; j < mc->argc; j++) {
        sdsfree(mc->argv[j]);
        if (mc->argobj && mc->argobj[j]) storeObjDecrRef(mc->argobj[j]);
    }
    zfree(mc->argv);
    zfree(mc->argobj);
    zfree(mc->arglen);
}

static void freeMultiState(client *c) {
    for (int i = 0; i < c->mstate.count; i++) freeMultiCmd(&c->mstate.cmds[i]);
    zfree(c->mstate.cmds);
    memset(&c->mstate, 0, sizeof(c->mstate));
}

/* What queueing c's command adds to the heap: its arguments' bytes, less
 * those read into the pool, plus an sds header and a slot each. */
static size_t queuedCost(const client *c) {
    size_t n = c->argv_bytes;
    for (int j = 0; c->argobj && j < c->argc; j++)
        if (c->argobj[j]) n -= c->arglen[j];
    return n + (sizeof(sds) + 16) * (size_t)c->argc + sizeof(multiCmd);
}

int multiQueueOverLimit(client *c) {
    if (c->flags & (CLIENT_DIRTY_CAS | CLIENT_DIRTY_EXEC)) return 0; /* nothing more is kept anyway */
    if ((long long)(c->mstate.bytes + queuedCost(c)) <= server.client_max_querybuf_len) return 0;
    serverLog(LL_VERBOSE, "Transaction of client id=%llu addr=%s discarded: %d queued commands (%zu bytes) "
                          "reached client-query-buffer-limit",
              (unsigned long long)c->id, c->addr, c->mstate.count, c->mstate.bytes);
    freeMultiState(c);
    server.stat_client_state_limited++;
    return 1;
}

void queueMultiCommand(client *c) {
    /* An aborted transaction only waits for its EXEC: keeping what a
     * pipelining client still sends would be memory for nothing. */
    if (c->flags & (CLIENT_DIRTY_CAS | CLIENT_DIRTY_EXEC)) return;
    multiState *ms = &c->mstate;
    ms->bytes += queuedCost(c); /* before the objects move to the queue */
    if (ms->count == ms->cap) {
        ms->cap = ms->cap ? ms->cap * 2 : 4;
        ms->cmds = zrealloc(ms->cmds, sizeof(multiCmd) * (size_t)ms->cap);
    }
    multiCmd *mc = &ms->cmds[ms->count++];
    mc->cmd = c->cmd;
    mc->argc = c->argc;
    mc->argv = zmalloc(sizeof(sds) * (size_t)c->argc);
    memcpy(mc->argv, c->argv, sizeof(sds) * (size_t)c->argc);
    mc->argobj = NULL;
    mc->arglen = NULL;
    /* Arguments read in place: their objects move to the queue, the
     * client's slots are cleared so the next request starts clean. */
    for (int j = 0; c->argobj && j < c->argc; j++) {
        if (c->argobj[j] == NULL) continue;
        if (mc->argobj == NULL) {
            mc->argobj = zcalloc(sizeof(storeObj *) * (size_t)c->argc);
            mc->arglen = zcalloc(sizeof(size_t) * (size_t)c->argc);
        }
        mc->argobj[j] = c->argobj[j];
        mc->arglen[j] = c->arglen[j];
        c->argobj[j] = NULL;
    }
    c->argc = 0; /* the strings are the queue's now: resetClient must not free them */
}

void flagTransaction(client *c) {
    if (c->flags & CLIENT_MULTI) c->flags |= CLIENT_DIRTY_EXEC;
}

void discardTransaction(client *c) {
    freeMultiState(c);
    c->flags &= ~(CLIENT_MULTI | CLIENT_DIRTY_CAS | CLIENT_DIRTY_EXEC);
    unwatchAllKeys(c);
}

/* EXEC refused by processCommand (wrong arity, a cluster error...): as in
 * Redis the transaction is over either way, and the reply says why. */
void execCommandAbort(client *c, const char *err) {
    discardTransaction(c);
    if (err[0] == '-') err++;
    if (!strncmp(err, "ERR ", 4)) err += 4;
    addReplyErrorFormat(c, "-EXECABORT Transaction discarded because of: %s", err);
}

/* ---- the commands -------------------------------------------------------- */

void multiCommand(client *c) {
    if (c->flags & CLIENT_MULTI) {
        addReplyError(c, "ERR MULTI calls can not be nested");
        return;
    }
    c->flags |= CLIENT_MULTI;
    addReplyOk(c);
}

void discardCommand(client *c) {
    if (!(c->flags & CLIENT_MULTI)) {
        addReplyError(c, "ERR DISCARD without MULTI");
        return;
    }
    discardTransaction(c);
    addReplyOk(c);
}

static int isWatchedKeyExpired(client *c);

void execCommand(client *c) {
    if (!(c->flags & CLIENT_MULTI)) {
        addReplyError(c, "ERR EXEC without MULTI");
        return;
    }
    /* A watched key whose TTL ran out is a change even if no lookup or
     * the active cycle has deleted it yet. */
    if (c->nwatched && !(c->flags & CLIENT_DIRTY_CAS) && isWatchedKeyExpired(c)) c->flags |= CLIENT_DIRTY_CAS;
    if (c->flags & (CLIENT_DIRTY_CAS | CLIENT_DIRTY_EXEC)) {
        if (c->flags & CLIENT_DIRTY_EXEC)
            addReplyError(c, "-EXECABORT Transaction discarded because of previous errors.");
        else
            addReplyNullArray(c);
        discardTransaction(c);
        return;
    }
    /* From here the transaction runs whatever happens: our own WATCHes
     * are done with (our commands must not dirty us), and the queue is
     * taken out of the client, so a command in it sees a client that is
     * not in MULTI. */
    unwatchAllKeys(c);
    multiState ms = c->mstate;
    memset(&c->mstate, 0, sizeof(c->mstate));
    c->flags &= ~CLIENT_MULTI;
    c->flags |= CLIENT_IN_EXEC;
    sds *orig_argv = c->argv;
    storeObj **orig_argobj = c->argobj;
    size_t *orig_arglen = c->arglen;
    int orig_argc = c->argc;
    serverCommand *orig_cmd = c->cmd;
    addReplyArrayLen(c, ms.count);
    for (int i = 0; i < ms.count; i++) {
        multiCmd *mc = &ms.cmds[i];
        c->argv = mc->argv;
        c->argc = mc->argc;
        c->argobj = mc->argobj;
        c->arglen = mc->arglen;
        c->cmd = mc->cmd;
        /* The user's rules may have changed since the command was queued
         * (ACL SETUSER from another connection): checked again, as Redis does. */
        int keypos, acl = aclCheckCommand(c, &keypos);
        if (acl != ACL_OK) {
            sds err = aclDenialError(c, acl, keypos);
            c->cmd->rejected_calls++;
            addReplyError(c, err);
            sdsfree(err);
            freeMultiCmd(mc);
            continue;
        }
        call(c);
        serverAssert(!(c->flags & CLIENT_BLOCKED)); /* CMD_NO_MULTI keeps blocking commands out */
        /* A command adopts the objects it keeps (SET: argobj[i] = NULL);
         * the rest are dropped with the strings. */
        freeMultiCmd(mc);
    }
    zfree(ms.cmds);
    c->argv = orig_argv;
    c->argobj = orig_argobj;
    c->arglen = orig_arglen;
    c->argc = orig_argc;
    c->cmd = orig_cmd;
    c->flags &= ~(CLIENT_IN_EXEC | CLIENT_DIRTY_CAS | CLIENT_DIRTY_EXEC);
}

/* ---- WATCH --------------------------------------------------------------- */

/* Is key among this client's WATCHes? A few are compared one by one; past
 * WATCH_SCAN_MAX the client gets an index of its own (key -> its WATCH),
 * built once and kept until UNWATCH, so a WATCH of n keys is O(n), not
 * O(n^2) (DEBUG VISITS watched-keys). */
#define WATCH_SCAN_MAX 16
static dictType clientWatchedType = {dictSdsHash, dictSdsEqual, NULL, NULL}; /* keys: server.watched_keys' */

static int watchingKey(client *c, sds key) {
    if (c->watched_index) {
        serverVisit(VISITS_WATCHED, 1);
        return dictFind(c->watched_index, key) != NULL;
    }
    for (int i = 0; i < c->nwatched; i++) {
        serverVisit(VISITS_WATCHED, 1);
        if (sdslen(c->watched[i]->key) == sdslen(key) && !memcmp(c->watched[i]->key, key, sdslen(key)))
            return 1;
    }
    return 0;
}

static void watchIndexAdd(client *c, watchedKey *wk) {
    if (c->watched_index) {
        dictAdd(c->watched_index, wk->key, wk);
    } else if (c->nwatched > WATCH_SCAN_MAX) {
        c->watched_index = dictCreate(&clientWatchedType);
        for (int i = 0; i < c->nwatched; i++) {
            serverVisit(VISITS_WATCHED, 1);
            dictAdd(c->watched_index, c->watched[i]->key, c->watched[i]);
        }
    }
}

static void watchForKey(client *c, sds key) {
    if (watchingKey(c, key)) return; /* already watched */
    watchedKey *wk = zmalloc(sizeof(*wk));
    dictEntry *existing;
    dictEntry *de = dictAddRaw(server.watched_keys, key, &existing);
    if (de) {
        de->key = sdsdup(key);
        de->val = NULL;
    } else {
        de = existing;
    }
    wk->key = de->key;
    wk->c = c;
    wk->expired = storeKeyIsExpired(key);
    wk->prev = NULL;
    wk->next = de->val;
    if (wk->next) wk->next->prev = wk;
    de->val = wk;
    if (c->nwatched == c->watched_cap) {
        c->watched_cap = c->watched_cap ? c->watched_cap * 2 : 4;
        c->watched = zrealloc(c->watched, sizeof(watchedKey *) * (size_t)c->watched_cap);
    }
    c->watched[c->nwatched++] = wk;
    watchIndexAdd(c, wk);
    server.watching++;
}

void unwatchAllKeys(client *c) {
    if (c->watched_index) {
        dictRelease(c->watched_index); /* before the keys it borrows go */
        c->watched_index = NULL;
    }
    for (int i = 0; i < c->nwatched; i++) {
        watchedKey *wk = c->watched[i];
        if (wk->next) wk->next->prev = wk->prev;
        if (wk->prev) {
            wk->prev->next = wk->next;
        } else {
            dictEntry *de = dictFind(server.watched_keys, wk->key);
            serverAssert(de != NULL && de->val == wk);
            if (wk->next) de->val = wk->next;
            else dictDelete(server.watched_keys, wk->key); /* frees the key string */
        }
        zfree(wk);
        server.watching--;
    }
    c->nwatched = 0;
    /* Keep a small array for the next WATCH; give back one grown big. */
    if (c->watched_cap > 64) {
        zfree(c->watched);
        c->watched = NULL;
        c->watched_cap = 0;
    }
}

static int isWatchedKeyExpired(client *c) {
    for (int i = 0; i < c->nwatched; i++)
        if (!c->watched[i]->expired && storeKeyIsExpired(c->watched[i]->key)) return 1;
    return 0;
}

/* Called after the change, so a deleted key is already gone. */
void touchWatchedKey(sds key) {
    dictEntry *de = dictFind(server.watched_keys, key);
    if (de == NULL) return;
    for (watchedKey *wk = de->val; wk; wk = wk->next) {
        if (wk->expired && !storeKeyPresent(key)) {
            /* Already expired when watched, now deleted: nobody could
             * read it before, nobody can now. From here on it is an
             * ordinary missing key. */
            wk->expired = 0;
            continue;
        }
        wk->c->flags |= CLIENT_DIRTY_CAS;
    }
}

/* Called before the keys go. A watched key that does not exist stays as
 * it was (missing), so its WATCH holds, as in Redis. */
void touchAllWatchedKeys(void) {
    dictIterator *it = dictGetSafeIterator(server.watched_keys);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        if (!storeKeyPresent(de->key)) continue;
        for (watchedKey *wk = de->val; wk; wk = wk->next) {
            if (wk->expired) {
                wk->expired = 0;
                continue;
            }
            wk->c->flags |= CLIENT_DIRTY_CAS;
        }
    }
    dictReleaseIterator(it);
}

/* A connection's WATCHes are held until EXEC, DISCARD or UNWATCH, each a
 * copy of its key (or a share of one) in the heap, and WATCH may be sent
 * again and again: client-max-watched-keys bounds them, so one connection
 * cannot grow the server by WATCHing without end (found probing: 200k
 * WATCHed keys held 75 MB, and nothing stopped at that). A WATCH that
 * would pass it watches nothing; keys it already watches do not count
 * again. */
static int watchOverLimit(client *c) {
    if (server.client_max_watched_keys == 0) return 0;
    long long n = c->nwatched;
    for (int j = 1; j < c->argc && n <= server.client_max_watched_keys; j++)
        if (!watchingKey(c, c->argv[j])) n++;
    return n > server.client_max_watched_keys;
}

void watchCommand(client *c) {
    if (c->flags & CLIENT_MULTI) {
        addReplyError(c, "ERR WATCH inside MULTI is not allowed");
        return;
    }
    /* Already doomed: more WATCHes could not make EXEC fail harder. */
    if (!(c->flags & CLIENT_DIRTY_CAS)) {
        if (watchOverLimit(c)) {
            server.stat_client_state_limited++;
            addReplyErrorFormat(c, "-LIMIT this connection would WATCH more than client-max-watched-keys (%lld) "
                                   "keys: UNWATCH (or EXEC, DISCARD) first",
                                server.client_max_watched_keys);
            return;
        }
        for (int j = 1; j < c->argc; j++) watchForKey(c, c->argv[j]);
    }
    addReplyOk(c);
}

void unwatchCommand(client *c) {
    unwatchAllKeys(c);
    c->flags &= ~CLIENT_DIRTY_CAS;
    addReplyOk(c);
}

/* ---- keys changed in this iteration (multi.h) ------------------------------- */

/* A list, not a set: a set's insert and its emptying every iteration cost
 * more than the rare duplicate, which is written twice with the same,
 * current state (correct, since each record is the key's state when
 * written). The common duplicate, one key changed by a pipeline in a row
 * (INCR counter), is caught by comparing with the last one. */
static struct {
    sds *keys;
    size_t n, cap;
    unsigned long gen; /* bumped at each reset: cursors of an older list start over */
} changed;

void changedKeyAdd(sds key) {
    if (changed.n && sdslen(changed.keys[changed.n - 1]) == sdslen(key) &&
        memcmp(changed.keys[changed.n - 1], key, sdslen(key)) == 0)
        return;
    if (changed.n == changed.cap) {
        changed.cap = changed.cap ? changed.cap * 2 : 64;
        changed.keys = zrealloc(changed.keys, changed.cap * sizeof(sds));
    }
    changed.keys[changed.n++] = sdsdup(key);
}

sds *changedKeysNext(changedCursor *cur, size_t *from, size_t *to) {
    if (cur->gen != changed.gen) {
        cur->gen = changed.gen;
        cur->done = 0;
    }
    *from = cur->done;
    *to = changed.n;
    cur->done = changed.n;
    return changed.keys;
}

int changedKeysPending(const changedCursor *cur) {
    return cur->gen != changed.gen ? changed.n > 0 : changed.n > cur->done;
}

void changedKeysReset(void) {
    if (changed.n == 0) return;
    for (size_t i = 0; i < changed.n; i++) sdsfree(changed.keys[i]);
    changed.n = 0;
    changed.gen++;
    /* A burst (a REMOVE.ALL) does not keep its list for good. */
    if (changed.cap > 4096) {
        zfree(changed.keys);
        changed.keys = NULL;
        changed.cap = 0;
    }
}
