/* mc_async.c -- non-blocking batches: mc_batch_put_async, mc_batch_get_async
 * and the mc_op they return (mooncake.h).
 *
 * An inference engine saves the KV blocks of a prefill while it decodes;
 * the save must never sit on its time to first token. So a submit copies
 * what it was given and returns, and the batch runs later on a thread of
 * the library's:
 *
 *  - One worker thread per handle, started by the first submit. It owns a
 *    handle of its own, a clone (mcClone in mooncake.c: same address, ACL
 *    user, password, timeouts, transport, streams, lease-release setting
 *    and registered buffers), opened by the worker before its first op.
 *    Handles are serialised by one lock (mooncake.c), so a batch run on
 *    the caller's handle would stall every synchronous call behind it; on
 *    the clone, gets and puts on the handle go on meanwhile, on connections
 *    of their own. The clone is made lazily: a handle that never submits
 *    costs nothing, and a submit never waits for a connect.
 *  - One worker, one FIFO queue (mutex + condvar): ops run one at a time in
 *    submission order, so a put followed by a get of the same keys reads
 *    what the put wrote, and a batch still overlaps its own transfers
 *    (mc_batch_putv/getv pipeline them). More parallelism would need more
 *    clones and would give up the ordering; the engine that wants it opens
 *    more handles.
 *  - The op copies the items, their iovec arrays, the keys and the put
 *    options (the caller's arrays may be on its stack); the buffers the
 *    iovecs point at are the caller's and must stay put until the op is
 *    done -- copying them would be the very cost the batch avoids.
 *  - Completion is told three ways, all thread-safe: a done flag
 *    (mc_op_done, mc_op_wait(0)), a condvar (mc_op_wait with a timeout) and
 *    an eventfd that becomes readable (mc_op_fd, for event loops). The
 *    worker writes the eventfd, then sets the flag, both under the op's
 *    mutex; a reader that finds the flag unset looks again under the mutex
 *    (opDone). So an op whose fd is readable is done for every call, and a
 *    done op's fd is readable; and mc_op_free, which takes the mutex once
 *    done, never frees an op the worker still touches.
 *  - Registered buffers (RDMA memory regions, CUDA device pointers) belong
 *    to a handle, and an RDMA registration to its own protection domain,
 *    so the clone registers them itself: mcClone copies the list, and
 *    mc_register/mc_unregister on the handle are forwarded to the clone
 *    once it exists (mcAsyncRegister). reg_lock orders the two: it is held
 *    while the clone is made, so a registration either is in the copy or
 *    is forwarded after; registering twice is harmless (a covered range is
 *    left as it is). A forwarded call waits for the batch the worker is
 *    running (the clone's lock): registration is set-up work, and after it
 *    returns both handles agree. Settings instead are only flagged
 *    (mcAsyncSettingsChanged) and copied before the next op: a setter never
 *    waits for a batch.
 *  - mc_close stops the worker after the queue is empty: queued ops run to
 *    their end (each bounded by the I/O timeout), not dropped, since a
 *    dropped put is a cache block silently lost. Once mc_close has stopped
 *    the worker, ops that fail with MC_ERR_IO make the rest of the queue
 *    fail at once with MC_ERR_IO rather than time out one by one. Finished
 *    ops hold no reference to the handle, so they stay valid to wait on and
 *    read until mc_op_free, after mc_close too.
 *  - Fork: a child inherits the handle but not its worker. Each op records
 *    the process's fork generation (mc_fork.h); in another process every
 *    call on it fails at once (MC_ERR_INVALID, NULL) instead of waiting
 *    for a worker that is not there, mc_op_free frees the child's copy
 *    without waiting, and closing the handle there frees the worker's
 *    state without joining it (mcAsyncForget). A submit on an inherited
 *    handle returns NULL.
 *  - Errors: a submit that cannot be queued (NULL items, a NULL key with a
 *    length, no memory, no eventfd, no thread) returns NULL with
 *    mc_last_error set. n == 0 gives an op that is done at once with 0,
 *    like mc_batch_put. A bad iovcnt or iov is not copied and is the
 *    batch's to report, as mc_batch_putv/getv report it synchronously. A
 *    worker that cannot connect finishes the op with MC_ERR_IO in every
 *    slot and tries again at the next op. The reason, and the clone's
 *    reason for a batch that fails as a whole, travel in the op: the
 *    thread whose mc_op_wait or mc_op_results finds it failed gets it as
 *    its mc_last_error of the handle (the text is per thread, mooncake.c
 *    "Threads"; the worker's own would be seen by no one).
 *  - mc_close on another thread: a submit goes through the handle's gate
 *    (mcEnter), so mc_close waits for a submit in progress before it stops
 *    the worker, and a submit after it began fails with MC_ERR_INVALID --
 *    never a worker started on a handle being freed.
 */
#include "mc_async.h"
#include "mc_fork.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct mc_op {
    pthread_mutex_t lock;        /* with cond: completion, for mc_op_wait and mc_op_free */
    pthread_cond_t cond;
    atomic_int done;             /* set last, under lock, after rc, results and the eventfd */
    int efd;                     /* eventfd, written once when done */
    int put;
    int rc;                      /* the batch's return value */
    size_t n;
    mc_kvv *items;               /* copies, keys and iovecs in mem */
    mc_put_opts opts;
    int has_opts;
    long long *results;
    int *put_results;            /* mc_batch_putv's, copied to results */
    void *mem;                   /* one block: items, iovecs, results, keys, prefer */
    unsigned fork_gen;           /* the process that made it (mc_fork.h) */
    uint64_t owner;              /* its handle's serial: whose error slot err goes to */
    char err[512];               /* why it failed, or its last item that did ("": none did), set before done */
    struct mc_op *next;          /* in the queue */
};

typedef struct mcAsync {
    mc_client *owner;
    mc_client *clone;            /* NULL until connected; written by the worker under reg_lock */
    pthread_t thread;
    pthread_mutex_t lock;        /* the queue and stop */
    pthread_cond_t cond;
    mc_op *head, *tail;
    int stop;
    pthread_mutex_t reg_lock;    /* making the clone vs forwarding registrations */
    atomic_int dirty;            /* a setter ran: copy the settings before the next op */
} mcAsync;

/* Guards making a handle's worker (two threads submitting at once). */
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- ops ------------------------------------------------------------------ */

static void opDestroy(mc_op *op) {
    if (op == NULL) return;
    if (op->efd >= 0) close(op->efd);
    pthread_mutex_destroy(&op->lock);
    pthread_cond_destroy(&op->cond);
    free(op->mem);
    free(op);
}

/* Publishes the outcome. After the unlock the op may be freed by its owner:
 * nothing here touches it again. The eventfd first: see opDone. */
static void opFinish(mc_op *op, int rc) {
    uint64_t one = 1;
    pthread_mutex_lock(&op->lock);
    op->rc = rc;
    if (write(op->efd, &one, sizeof(one)) != (ssize_t)sizeof(one)) {
        /* Cannot happen: written once, far from the counter's limit. */
    }
    atomic_store_explicit(&op->done, 1, memory_order_release);
    pthread_cond_broadcast(&op->cond);
    pthread_mutex_unlock(&op->lock);
}

/* Finished? Without the lock when the flag says so; else under it, which
 * waits out an opFinish that has written the eventfd but not yet set the
 * flag (a poller woken by the fd must find the op done). */
static int opDone(mc_op *op) {
    if (atomic_load_explicit(&op->done, memory_order_acquire)) return 1;
    pthread_mutex_lock(&op->lock);
    int done = atomic_load_explicit(&op->done, memory_order_relaxed);
    pthread_mutex_unlock(&op->lock);
    return done;
}

static void opFailAll(mc_op *op, int code) {
    for (size_t i = 0; i < op->n; i++) op->results[i] = code;
    opFinish(op, code);
}

/* The op with its own copies of items, iovecs, keys and options; NULL with
 * the reason in err. */
static mc_op *opNew(int put, size_t n, const mc_kvv *items, const mc_put_opts *opts, char *err, size_t errlen) {
    mc_op *op = NULL;
    size_t niov = 0, keybytes = 0, preflen = 0;
    pthread_condattr_t ca;

    if (n && items == NULL) {
        snprintf(err, errlen, "async batch: no items");
        return NULL;
    }
    if (n > SIZE_MAX / (sizeof(mc_kvv) + sizeof(long long) + sizeof(int))) goto toobig;
    for (size_t i = 0; i < n; i++) {
        if (items[i].key == NULL && items[i].keylen) {
            snprintf(err, errlen, "async batch: item %zu has a NULL key", i);
            return NULL;
        }
        if (items[i].keylen > SIZE_MAX / 2 - keybytes) goto toobig;
        keybytes += items[i].keylen;
        /* Only a valid array is copied; any other is the batch's to refuse. */
        if (items[i].iov && items[i].iovcnt >= 1 && items[i].iovcnt <= MC_MAX_IOV) niov += (size_t)items[i].iovcnt;
    }
    if (niov > SIZE_MAX / 4 / sizeof(struct iovec)) goto toobig;
    if (put && opts && opts->prefer) preflen = strlen(opts->prefer) + 1;
    size_t total = n * sizeof(mc_kvv) + niov * sizeof(struct iovec) + n * sizeof(long long) + n * sizeof(int) +
                   keybytes + preflen;
    if (total < keybytes) goto toobig;

    op = calloc(1, sizeof(*op));
    if (op == NULL) goto nomem;
    op->efd = -1;
    op->fork_gen = mcForkGenNow();
    pthread_mutex_init(&op->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&op->cond, &ca);
    pthread_condattr_destroy(&ca);
    op->put = put;
    op->n = n;
    op->mem = malloc(total ? total : 1);
    if (op->mem == NULL) goto nomem;
    op->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (op->efd < 0) {
        snprintf(err, errlen, "async batch: eventfd: %s", strerror(errno));
        goto err;
    }

    /* Laid out widest alignment first: mc_kvv, iovec, long long, int, bytes. */
    char *p = op->mem;
    op->items = (mc_kvv *)p;
    p += n * sizeof(mc_kvv);
    struct iovec *iov = (struct iovec *)p;
    p += niov * sizeof(struct iovec);
    op->results = (long long *)p;
    p += n * sizeof(long long);
    op->put_results = (int *)p;
    p += n * sizeof(int);
    for (size_t i = 0; i < n; i++) {
        mc_kvv *it = &op->items[i];
        it->keylen = items[i].keylen;
        it->key = p;
        if (it->keylen) memcpy(p, items[i].key, it->keylen);
        p += it->keylen;
        it->iovcnt = items[i].iovcnt;
        it->iov = NULL;
        if (items[i].iov && it->iovcnt >= 1 && it->iovcnt <= MC_MAX_IOV) {
            memcpy(iov, items[i].iov, (size_t)it->iovcnt * sizeof(struct iovec));
            it->iov = iov;
            iov += it->iovcnt;
        }
        op->results[i] = MC_ERR_IO;
        op->put_results[i] = MC_ERR_IO;
    }
    if (put && opts) {
        op->opts = *opts;
        op->has_opts = 1;
        if (preflen) {
            memcpy(p, opts->prefer, preflen);
            op->opts.prefer = p;
        }
    }
    return op;

toobig:
    snprintf(err, errlen, "async batch: too large");
    return NULL;
nomem:
    snprintf(err, errlen, "async batch: out of memory");
err:
    opDestroy(op);
    return NULL;
}

/* ---- the worker ------------------------------------------------------------- */

/* The clone, made now if it is not yet; NULL when it cannot connect (the
 * reason is then the op's). */
static mc_client *workerClone(mcAsync *a, mc_op *op) {
    if (a->clone) return a->clone;
    char err[256] = "";
    pthread_mutex_lock(&a->reg_lock);
    a->clone = mcClone(a->owner, err, sizeof(err));
    pthread_mutex_unlock(&a->reg_lock);
    if (a->clone == NULL) snprintf(op->err, sizeof(op->err), "async batch: cannot connect: %s", err);
    else atomic_store(&a->dirty, 0); /* the clone has the settings of now */
    return a->clone;
}

/* Runs op on the clone and finishes it: the batch's return value (the op
 * itself may be freed by its owner as soon as it is finished). */
static int workerRun(mcAsync *a, mc_op *op) {
    mc_client *k = workerClone(a, op);
    if (k == NULL) {
        opFailAll(op, MC_ERR_IO);
        return MC_ERR_IO;
    }
    if (atomic_exchange(&a->dirty, 0)) mcCloneSync(k, a->owner);
    int rc;
    if (op->put) {
        rc = mc_batch_putv(k, op->n, op->items, op->has_opts ? &op->opts : NULL, op->put_results);
        for (size_t i = 0; i < op->n; i++) op->results[i] = op->put_results[i];
    } else {
        rc = mc_batch_getv(k, op->n, op->items, op->results);
    }
    if (rc < 0) {
        snprintf(op->err, sizeof(op->err), "async batch: %s", mc_last_error(k));
    } else {
        /* Items failed alone: why the last of them did, which is what a
         * synchronous batch leaves in mc_last_error. Without it an engine
         * had a code per item and nothing to log ("I/O error"). */
        size_t failed = 0; /* a put's EXISTS is counted a success, as the batch counts it */
        for (size_t i = 0; i < op->n; i++) failed += op->results[i] < 0 && !(op->put && op->results[i] == MC_ERR_EXISTS);
        const char *why = failed ? mc_last_error(k) : "";
        if (why[0]) snprintf(op->err, sizeof(op->err), "%s", why);
    }
    opFinish(op, rc);
    return rc;
}

static void *workerMain(void *arg) {
    mcAsync *a = arg;
    int dead = 0; /* closing, and the server is gone: the rest fail at once */
    for (;;) {
        pthread_mutex_lock(&a->lock);
        while (a->head == NULL && !a->stop) pthread_cond_wait(&a->cond, &a->lock);
        mc_op *op = a->head;
        if (op) {
            a->head = op->next;
            if (a->head == NULL) a->tail = NULL;
        }
        pthread_mutex_unlock(&a->lock);
        if (op == NULL) break; /* stopped, and nothing is queued */
        if (dead) {
            opFailAll(op, MC_ERR_IO);
            continue;
        }
        if (workerRun(a, op) == MC_ERR_IO) {
            pthread_mutex_lock(&a->lock);
            dead = a->stop;
            pthread_mutex_unlock(&a->lock);
        }
    }
    return NULL;
}

/* The handle's worker, started if create and there is none yet. */
static mcAsync *asyncOf(mc_client *c, int create, char *err, size_t errlen) {
    _Atomic(mcAsync *) *slot = mcAsyncSlot(c);
    mcAsync *a = atomic_load(slot);
    if (a || !create) return a;
    pthread_mutex_lock(&create_lock);
    a = atomic_load(slot);
    if (a) goto out;
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        snprintf(err, errlen, "async batch: out of memory");
        goto out;
    }
    a->owner = c;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    pthread_mutex_init(&a->reg_lock, NULL);
    int e = pthread_create(&a->thread, NULL, workerMain, a);
    if (e != 0) {
        snprintf(err, errlen, "async batch: cannot start the worker: %s", strerror(e));
        pthread_mutex_destroy(&a->lock);
        pthread_cond_destroy(&a->cond);
        pthread_mutex_destroy(&a->reg_lock);
        free(a);
        a = NULL;
        goto out;
    }
    atomic_store(slot, a);
out:
    pthread_mutex_unlock(&create_lock);
    return a;
}

/* ---- hooks called by mooncake.c (mc_async.h) ---------------------------------- */

void mcAsyncStop(mc_client *c) {
    _Atomic(mcAsync *) *slot = mcAsyncSlot(c);
    pthread_mutex_lock(&create_lock);
    mcAsync *a = atomic_exchange(slot, NULL);
    pthread_mutex_unlock(&create_lock);
    if (a == NULL) return;
    pthread_mutex_lock(&a->lock);
    a->stop = 1;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    mc_close(a->clone);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->reg_lock);
    free(a);
}

void mcAsyncForget(mc_client *c) {
    mcAsync *a = atomic_exchange(mcAsyncSlot(c), NULL);
    if (a == NULL) return;
    mc_close(a->clone); /* inherited too: closed the same way */
    free(a);
}

void mcAsyncRegister(mc_client *c, void *addr, size_t len, int mem) {
    mcAsync *a = asyncOf(c, 0, NULL, 0);
    if (a == NULL) return;
    pthread_mutex_lock(&a->reg_lock);
    if (a->clone) mc_register(a->clone, addr, len, mem);
    pthread_mutex_unlock(&a->reg_lock);
}

void mcAsyncUnregister(mc_client *c, void *addr) {
    mcAsync *a = asyncOf(c, 0, NULL, 0);
    if (a == NULL) return;
    pthread_mutex_lock(&a->reg_lock);
    if (a->clone) mc_unregister(a->clone, addr);
    pthread_mutex_unlock(&a->reg_lock);
}

void mcAsyncSettingsChanged(mc_client *c) {
    mcAsync *a = asyncOf(c, 0, NULL, 0);
    if (a) atomic_store(&a->dirty, 1);
}

/* ---- the API ------------------------------------------------------------------ */

static mc_op *submit(mc_client *c, int put, size_t n, const mc_kvv *items, const mc_put_opts *opts) {
    char err[256] = "";
    if (mcClientBad(c)) return NULL; /* inherited: mc_last_error says so */
    if (mcEnter(c) != MC_OK) return NULL; /* mc_close has begun: mc_last_error says so */
    mc_op *op = opNew(put, n, items, opts, err, sizeof(err));
    if (op == NULL) goto err;
    op->owner = mcSerial(c);
    if (n == 0) { /* nothing to do: done now, as mc_batch_put answers 0 */
        opFinish(op, 0);
        mcLeave(c);
        return op;
    }
    mcAsync *a = asyncOf(c, 1, err, sizeof(err));
    if (a == NULL) goto err;
    pthread_mutex_lock(&a->lock);
    if (a->tail) a->tail->next = op;
    else a->head = op;
    a->tail = op;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
    mcLeave(c);
    return op;
err:
    opDestroy(op);
    mcSetError(c, "%s", err);
    mcLeave(c);
    return NULL;
}

mc_op *mc_batch_put_async(mc_client *c, size_t n, const mc_kvv *items, const mc_put_opts *opts) {
    return submit(c, 1, n, items, opts);
}

mc_op *mc_batch_get_async(mc_client *c, size_t n, const mc_kvv *items) { return submit(c, 0, n, items, NULL); }

/* NULL, or inherited across fork(): its worker is not in this process. */
static int opBad(const mc_op *op) { return op == NULL || mcInherited(op->fork_gen); }

/* A finished op that failed: its reason becomes the calling thread's
 * mc_last_error of the handle (see the top, "Errors"). */
static void opTellErr(const mc_op *op) {
    if (op->err[0]) mcThreadErrSet(op->owner, op->err);
}

int mc_op_done(mc_op *op) {
    if (opBad(op)) return MC_ERR_INVALID;
    return opDone(op);
}

int mc_op_wait(mc_op *op, int timeout_ms) {
    if (opBad(op)) return MC_ERR_INVALID;
    if (timeout_ms == 0 || atomic_load_explicit(&op->done, memory_order_acquire)) {
        if (!opDone(op)) return MC_ERR_PENDING;
        opTellErr(op);
        return op->rc;
    }
    struct timespec until;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&op->lock);
    while (!atomic_load_explicit(&op->done, memory_order_acquire)) {
        if (timeout_ms < 0) pthread_cond_wait(&op->cond, &op->lock);
        else if (pthread_cond_timedwait(&op->cond, &op->lock, &until) == ETIMEDOUT) break;
    }
    int rc = atomic_load_explicit(&op->done, memory_order_acquire) ? op->rc : MC_ERR_PENDING;
    pthread_mutex_unlock(&op->lock);
    if (rc != MC_ERR_PENDING) opTellErr(op);
    return rc;
}

const long long *mc_op_results(mc_op *op) {
    if (opBad(op) || !opDone(op)) return NULL;
    opTellErr(op);
    return op->results;
}

int mc_op_fd(mc_op *op) { return opBad(op) ? MC_ERR_INVALID : op->efd; }

const char *mc_op_error(mc_op *op) {
    if (opBad(op)) return NULL;
    return opDone(op) ? op->err : "";
}

void mc_op_free(mc_op *op) {
    if (op == NULL) return;
    if (mcInherited(op->fork_gen)) { /* the child's copy: no worker will finish it, its lock may be held */
        if (op->efd >= 0) close(op->efd);
        free(op->mem);
        free(op);
        return;
    }
    /* Waiting under the lock: the worker's last touch of the op is its
     * unlock in opFinish. */
    pthread_mutex_lock(&op->lock);
    while (!atomic_load_explicit(&op->done, memory_order_acquire)) pthread_cond_wait(&op->cond, &op->lock);
    pthread_mutex_unlock(&op->lock);
    opDestroy(op);
}
