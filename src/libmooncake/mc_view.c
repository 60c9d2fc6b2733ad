/* mc_view.c -- zero-copy views: an object's bytes where they lie.
 *
 * Mooncake's get_buffer hands the engine a buffer it reads (LMCache copies
 * each chunk out of it into its own memory object). Made by copying the
 * object into the handle's memory first, that is two copies of every byte
 * where a get into the engine's buffer is one: about half the rate, on
 * machines where copies are what a load costs. A view is the other way: on
 * the same host, the object already is in memory this process maps (the
 * segment's shared mapping, mc_shm.c), so the view is that range of it.
 *
 * What keeps the bytes valid is a hold (HOLD.REPLICAS, docs/PROTOCOL.md):
 * a read grant without a deadline, on the handle's connection, that keeps
 * the version's space from reuse and eviction until HOLD.RELEASE or until
 * the connection closes (then lease-ttl more). What keeps the memory mapped
 * is a reference on the mapping, so a view outlives its handle safely: its
 * address never becomes a fault, and its bytes stay the object's as long
 * as the hold stands.
 *
 * Releasing. A view is released from whatever thread drops it (Python's
 * garbage collector), while its handle may be idle, in a call on another
 * thread, or closed. Idle (its lock free: trylock, never a wait, so no
 * lock order to keep with the handle's calls), the HOLD.RELEASE is put on
 * the hold's connection at once, ahead of whatever the handle sends next,
 * and goes out with that (its reply not waited for): the server sees the
 * release before the handle's next request, so a get() made through a view
 * holds nothing for the calls after it. Not written by itself: a write per
 * release woke the server once per handle freed, 23 us each on this VM,
 * 30% of LMCache's load (16 handles per call). An idle handle's released
 * holds therefore stand until its next request or its close. Busy, the key
 * is queued under the queue's own small lock and the handle sends it at
 * its next view call. A
 * release after the handle closed is dropped: the connection's close ended
 * its holds. The queue is shared by the handle and its views, refcounted:
 * the last of them frees it. Bounded: at most one entry per view released
 * while the handle was busy, and the server holds at most 4096 per
 * connection.
 *
 * Fork. A child inherits the views with the handle, but their holds are
 * the parent's, on the parent's connection: the child cannot know how long
 * they stand. So a view records the process's fork generation (mc_fork.h)
 * and in another process gives no data (NULL, size 0); releasing it there
 * drops the child's mapping reference and its memory only -- nothing is
 * queued or put on the parent's connection, and the queue's lock (which a
 * thread of the parent may have held at the fork) is not taken: in the
 * child every reference to an inherited queue is dropped this way (its
 * handle makes no views there), so an atomic count is enough.
 */
#include "mc_view.h"
#include "mc_fork.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct mc_view {
    mcViewQueue *q;
    mcShm *shm;
    const char *data;
    uint64_t size;
    int node;
    unsigned gen;
    unsigned fork_gen; /* the process that made it */
    size_t keylen;
    char key[]; /* the hold's key, for its HOLD.RELEASE */
};

typedef struct mcViewRelease {
    int node;
    unsigned gen;
    size_t keylen;
    struct mcViewRelease *next;
    char key[];
} mcViewRelease;

struct mcViewQueue {
    pthread_mutex_t lock;
    int refs;   /* the handle's (while open) and one per live view */
    int open;   /* the handle has not closed: owner is valid */
    mcViewRelease *head, *tail;
    void *owner;
    pthread_mutex_t *owner_lock;
    mcViewSendFn *send;
};

static void queueUnref(mcViewQueue *q) {
    pthread_mutex_lock(&q->lock);
    int last = --q->refs == 0;
    pthread_mutex_unlock(&q->lock);
    if (!last) return;
    while (q->head) {
        mcViewRelease *r = q->head;
        q->head = r->next;
        free(r);
    }
    pthread_mutex_destroy(&q->lock);
    free(q);
}

/* queueUnref in a child forked from the queue's process (see the top). */
static void queueForget(mcViewQueue *q) {
    if (__atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    while (q->head) {
        mcViewRelease *r = q->head;
        q->head = r->next;
        free(r);
    }
    free(q);
}

void mcViewQueueForget(mcViewQueue *q) {
    if (q) queueForget(q);
}

mcViewQueue *mcViewQueueNew(void *owner, pthread_mutex_t *owner_lock, mcViewSendFn *send) {
    mcViewQueue *q = calloc(1, sizeof(*q));
    if (q == NULL) return NULL;
    pthread_mutex_init(&q->lock, NULL);
    q->refs = 1;
    q->open = 1;
    q->owner = owner;
    q->owner_lock = owner_lock;
    q->send = send;
    return q;
}

void mcViewQueueClose(mcViewQueue *q) {
    if (q == NULL) return;
    pthread_mutex_lock(&q->lock);
    q->open = 0;
    pthread_mutex_unlock(&q->lock);
    queueUnref(q);
}

void mcViewQueueDrain(mcViewQueue *q) {
    pthread_mutex_lock(&q->lock);
    mcViewRelease *r = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->lock);
    while (r) {
        mcViewRelease *next = r->next;
        q->send(q->owner, r->node, r->gen, r->key, r->keylen);
        free(r);
        r = next;
    }
}

mc_view *mcViewNew(mcViewQueue *q, mcShm *m, const char *data, uint64_t size, int node, unsigned gen, const void *key,
                   size_t keylen) {
    mc_view *v = malloc(sizeof(*v) + keylen);
    if (v == NULL) return NULL;
    v->q = q;
    v->shm = m;
    v->data = data;
    v->size = size;
    v->node = node;
    v->gen = gen;
    v->fork_gen = mcForkGenNow();
    v->keylen = keylen;
    memcpy(v->key, key, keylen);
    mcShmRetain(m);
    pthread_mutex_lock(&q->lock);
    q->refs++;
    pthread_mutex_unlock(&q->lock);
    return v;
}

static int viewBad(const mc_view *v) { return v == NULL || mcInherited(v->fork_gen); }

const void *mc_view_data(const mc_view *v) { return viewBad(v) ? NULL : v->data; }
uint64_t mc_view_size(const mc_view *v) { return viewBad(v) ? 0 : v->size; }

void mc_view_release(mc_view *v) {
    if (v == NULL) return;
    if (mcInherited(v->fork_gen)) { /* the child's copy (see the top): nothing queued or sent */
        mcViewQueue *q = v->q;
        mcShmRelease(v->shm);
        free(v);
        queueForget(q);
        return;
    }
    mcViewQueue *q = v->q;
    pthread_mutex_lock(&q->lock);
    if (q->open && pthread_mutex_trylock(q->owner_lock) == 0) { /* idle: onto its connection now */
        q->send(q->owner, v->node, v->gen, v->key, v->keylen);
        pthread_mutex_unlock(q->owner_lock);
    } else if (q->open) {
        /* A failed allocation only leaves the hold to the connection's close. */
        mcViewRelease *r = malloc(sizeof(*r) + v->keylen);
        if (r) {
            r->node = v->node;
            r->gen = v->gen;
            r->keylen = v->keylen;
            r->next = NULL;
            memcpy(r->key, v->key, v->keylen);
            if (q->tail) q->tail->next = r;
            else q->head = r;
            q->tail = r;
        }
    }
    pthread_mutex_unlock(&q->lock);
    mcShmRelease(v->shm);
    free(v);
    queueUnref(q);
}
