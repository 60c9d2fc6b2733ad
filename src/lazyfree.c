/* lazyfree.c -- freeing detached dicts in slices from the event loop
 * (FLUSHALL ASYNC).
 *
 * FLUSHALL ASYNC empties the keyspace at once and frees what it held in
 * slices from the event loop: the dicts are detached whole (new, empty
 * ones take their place, so DBSIZE is 0 and writes work at once) and
 * dictReleaseSteps frees them a bounded number of entries at a time: a
 * timer runs a slice of LAZYFREE_SLICE_US and comes back 1 ms later, so a
 * client waits at most about a slice behind it and an idle server frees at
 * about half its single-threaded speed; and any allocation that finds no
 * room frees what it needs first (storeLazyFreeMakeRoom), before it would
 * evict or refuse. (A quarter of each 100 ms cron tick, tried first,
 * stalled clients for 28 ms at a time.)
 *
 * Not a thread, as Redis's lazyfree is: freeing a value here gives its
 * extent back to the segment's allocator and touches leases, the deferred
 * list and the zeroing queue, none of them thread-safe, and a thread would
 * have to lock them on every hot-path allocation. Freed in order by the
 * loop, an object's extent is reused only after its last reference goes
 * (a reader's reply slice, a lease: storeObjDecrRef), exactly as after a
 * DEL.
 *
 * A file of its own: it knows dicts, the event loop and the clock, not the
 * store's tables; store.c hands it the dicts it detached (the keyspace's
 * entries counted, for INFO lazyfree_pending_objects) and builds the new
 * ones.
 */
#include "lazyfree.h"

#include <string.h>

#include "server.h"
#include "util.h"
#include "zerofree.h"
#include "zmalloc.h"

static struct {
    dict **dicts;              /* detached, being freed: the first one first */
    int *keyspace;             /* per dict: a keyspace, whose entries `pending` counts */
    size_t n, cap;
    unsigned long cursor;      /* in dicts[0] */
    unsigned long long pending; /* entries of keyspaces not yet freed */
} lazy;

#define LAZYFREE_SLICE 1024    /* entries per step between clock reads */
#define LAZYFREE_SLICE_US 1000 /* per timer run */

static long long lazyTimer = -1;

static void lazyFreeTake(dict *d, int keyspace) {
    if (dictSize(d) == 0) {
        dictRelease(d);
        return;
    }
    if (lazy.n == lazy.cap) {
        lazy.cap = lazy.cap ? lazy.cap * 2 : 4;
        lazy.dicts = zrealloc(lazy.dicts, sizeof(dict *) * lazy.cap);
        lazy.keyspace = zrealloc(lazy.keyspace, sizeof(int) * lazy.cap);
    }
    if (keyspace) lazy.pending += dictSize(d);
    lazy.keyspace[lazy.n] = keyspace;
    lazy.dicts[lazy.n++] = d;
}

void storeLazyFreeTake(dict *d) { lazyFreeTake(d, 0); }
void storeLazyFreeTakeKeyspace(dict *d) { lazyFreeTake(d, 1); }

/* One slice: 1 while more is left. */
static int lazyFreeStep(void) {
    if (lazy.n == 0) return 0;
    dict *d = lazy.dicts[0];
    unsigned long before = lazy.keyspace[0] ? dictSize(d) : 0;
    int done = dictReleaseSteps(d, &lazy.cursor, LAZYFREE_SLICE);
    unsigned long after = done ? 0 : (lazy.keyspace[0] ? dictSize(d) : 0);
    lazy.pending -= before - after;
    if (done) {
        memmove(lazy.dicts, lazy.dicts + 1, sizeof(dict *) * (lazy.n - 1));
        memmove(lazy.keyspace, lazy.keyspace + 1, sizeof(int) * (lazy.n - 1));
        lazy.n--;
        lazy.cursor = 0;
    }
    return lazy.n > 0;
}

void storeLazyFreeCron(long long budget_us) {
    if (lazy.n == 0) return;
    long long start = monoUs();
    while (lazyFreeStep() && monoUs() - start < budget_us)
        ;
}

static int lazyFreeTimerProc(aeEventLoop *el, long long id, void *data) {
    (void)el, (void)id, (void)data;
    storeLazyFreeCron(LAZYFREE_SLICE_US);
    if (lazy.n) return 1;
    lazyTimer = -1;
    return AE_NOMORE;
}

int storeLazyFreeMakeRoom(void) {
    if (lazy.n == 0) return 0;
    for (int i = 0; i < 64 && lazyFreeStep(); i++)
        ;
    zerofreeMakeRoom(); /* what was freed may be waiting to be zeroed */
    return 1;
}

unsigned long long storeLazyFreePending(void) { return lazy.pending; }

void storeLazyFreeStart(void) {
    if (lazy.n && lazyTimer == -1 && server.el)
        lazyTimer = aeCreateTimeEvent(server.el, 0, lazyFreeTimerProc, NULL, NULL);
}
