/* ae.c -- epoll event loop with timers.
 *
 * One thread, one loop: the server never blocks except in epoll_wait, so
 * every command is atomic with respect to every other without locks. That
 * is what makes the metadata state machine (pending/complete objects,
 * leases, owners) simple to reason about.
 *
 * File events live in an array indexed by fd (setsize = maxclients plus
 * reserve), so lookup is a load, not a search. Timers are an unsorted
 * doubly linked list: a server has a handful of them (the cron, a few
 * one-shots), and a list walk of five nodes per iteration is cheaper than
 * keeping a heap. Timers use the monotonic clock so a wall-clock jump (NTP)
 * cannot stall or storm the cron.
 *
 * A timer may delete itself or others from within its callback: deletion
 * only marks the id AE_DELETED_EVENT_ID and the node is unlinked on the
 * next pass when nobody is running it (refcount).
 *
 * Busy polling (aeSetBusyPoll): after an iteration that handled events,
 * the loop polls epoll without blocking for up to busy_poll_us before it
 * sleeps. On a VM a sleeping thread's wake-up costs 10-20 us, which is half
 * of a loopback round trip; a data-plane client that answers PUT.START with
 * a memcpy and then PUT.END arrives inside that window and finds the loop
 * awake. An idle server never spins (the window opens only after I/O
 * events), timers still run on time, and beforesleep still runs once per
 * iteration.
 *
 * The spin only pays when the next request comes within the window. When
 * traffic is sparse (a request every few hundred microseconds: KV-cache
 * saves and loads between an engine's steps) every window ends empty and
 * the spin is pure waste -- CPU the inference engine on the same host
 * needs. So the loop backs off: after AE_SPIN_MISS_LIMIT empty windows in
 * a row it skips the next 1, 2, 4 ... 256 windows (sleeping at once), and
 * an event that arrives while a skipped window would still have been open
 * (or one a spin catches) ends the back-off. Steady traffic keeps the
 * spin; sparse traffic pays at most one window in 256.
 *
 * Whether to spin at all is the owner's call (aeSetBusyPollActive): the
 * loop sees one process, but whether a spin pays depends on the host --
 * a spinning loop holds a core that another process (another node, an
 * engine, the client itself) may be waiting for. server.c's busy-poll
 * governor decides from the host's load, once a second; while it says
 * no, no window opens and the loop sleeps at once, as with busy-poll-us 0.
 */
#include "ae.h"
#include "zmalloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

long long aeMonotonicUs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

aeEventLoop *aeCreateEventLoop(int setsize) {
    aeEventLoop *el = zcalloc(sizeof(*el));
    el->events = zcalloc(sizeof(aeFileEvent) * (size_t)setsize);
    el->fired = zcalloc(sizeof(aeFiredEvent) * (size_t)setsize);
    el->apidata = zcalloc(sizeof(struct epoll_event) * (size_t)setsize);
    el->setsize = setsize;
    el->maxfd = -1;
    el->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (el->epfd == -1) {
        aeDeleteEventLoop(el);
        return NULL;
    }
    return el;
}

int aeGetSetSize(aeEventLoop *el) { return el->setsize; }

#define AE_SPIN_MISS_LIMIT 4
#define AE_SPIN_MAX_BACKOFF 8

void aeSetBusyPoll(aeEventLoop *el, long long us) {
    el->busy_poll_us = us > 0 ? us : 0;
    el->poll_until_us = 0; /* a window opened under the old setting ends */
    el->spin_misses = el->spin_backoff = el->spin_skip = 0;
}

void aeSetBusyPollActive(aeEventLoop *el, int active) {
    if (el->spin_off == !active) return;
    el->spin_off = !active;
    el->poll_until_us = 0;
    el->spin_misses = el->spin_backoff = el->spin_skip = 0;
}

/* A window ended: did an event come inside it? */
static void spinOutcome(aeEventLoop *el, int caught) {
    if (caught) {
        el->spin_misses = el->spin_backoff = el->spin_skip = 0;
        return;
    }
    if (++el->spin_misses < AE_SPIN_MISS_LIMIT) return;
    el->spin_misses = 0;
    el->spin_skip = 1 << el->spin_backoff;
    if (el->spin_backoff < AE_SPIN_MAX_BACKOFF) el->spin_backoff++;
}

/* Refused when an fd at or above the new size is still registered, so a
 * CONFIG SET maxclients can never orphan a live connection's events. */
int aeResizeSetSize(aeEventLoop *el, int setsize) {
    if (setsize == el->setsize) return AE_OK;
    if (el->maxfd >= setsize) return AE_ERR;
    el->events = zrealloc(el->events, sizeof(aeFileEvent) * (size_t)setsize);
    el->fired = zrealloc(el->fired, sizeof(aeFiredEvent) * (size_t)setsize);
    el->apidata = zrealloc(el->apidata, sizeof(struct epoll_event) * (size_t)setsize);
    for (int i = el->setsize; i < setsize; i++) el->events[i].mask = AE_NONE;
    el->setsize = setsize;
    return AE_OK;
}

void aeDeleteEventLoop(aeEventLoop *el) {
    if (el->epfd != -1) close(el->epfd);
    aeTimeEvent *te = el->timeEventHead;
    while (te) {
        aeTimeEvent *next = te->next;
        zfree(te);
        te = next;
    }
    zfree(el->events);
    zfree(el->fired);
    zfree(el->apidata);
    zfree(el);
}

void aeStop(aeEventLoop *el) { el->stop = 1; }

int aeCreateFileEvent(aeEventLoop *el, int fd, int mask, aeFileProc *proc, void *clientData) {
    if (fd < 0 || fd >= el->setsize) {
        errno = ERANGE;
        return AE_ERR;
    }
    aeFileEvent *fe = &el->events[fd];
    struct epoll_event ee = {0};
    int op = fe->mask == AE_NONE ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    int newmask = fe->mask | mask;
    if (newmask & AE_READABLE) ee.events |= EPOLLIN;
    if (newmask & AE_WRITABLE) ee.events |= EPOLLOUT;
    ee.data.fd = fd;
    if (epoll_ctl(el->epfd, op, fd, &ee) == -1) return AE_ERR;
    fe->mask = newmask;
    if (mask & AE_READABLE) fe->rfileProc = proc;
    if (mask & AE_WRITABLE) fe->wfileProc = proc;
    fe->clientData = clientData;
    if (fd > el->maxfd) el->maxfd = fd;
    return AE_OK;
}

void aeDeleteFileEvent(aeEventLoop *el, int fd, int mask) {
    if (fd < 0 || fd >= el->setsize) return;
    aeFileEvent *fe = &el->events[fd];
    if (fe->mask == AE_NONE) return;
    int newmask = fe->mask & ~mask;
    struct epoll_event ee = {0};
    if (newmask & AE_READABLE) ee.events |= EPOLLIN;
    if (newmask & AE_WRITABLE) ee.events |= EPOLLOUT;
    ee.data.fd = fd;
    /* Failure here means the fd is already closed; the kernel dropped it. */
    (void)epoll_ctl(el->epfd, newmask == AE_NONE ? EPOLL_CTL_DEL : EPOLL_CTL_MOD, fd, &ee);
    fe->mask = newmask;
    if (fd == el->maxfd && fe->mask == AE_NONE) {
        int j;
        for (j = el->maxfd - 1; j >= 0; j--)
            if (el->events[j].mask != AE_NONE) break;
        el->maxfd = j;
    }
}

int aeGetFileEvents(aeEventLoop *el, int fd) {
    if (fd < 0 || fd >= el->setsize) return 0;
    return el->events[fd].mask;
}

long long aeCreateTimeEvent(aeEventLoop *el, long long milliseconds, aeTimeProc *proc,
                            void *clientData, aeEventFinalizerProc *finalizerProc) {
    aeTimeEvent *te = zcalloc(sizeof(*te));
    te->id = el->timeEventNextId++;
    te->when_us = aeMonotonicUs() + milliseconds * 1000;
    te->timeProc = proc;
    te->finalizerProc = finalizerProc;
    te->clientData = clientData;
    te->next = el->timeEventHead;
    if (te->next) te->next->prev = te;
    el->timeEventHead = te;
    return te->id;
}

int aeDeleteTimeEvent(aeEventLoop *el, long long id) {
    for (aeTimeEvent *te = el->timeEventHead; te; te = te->next) {
        if (te->id == id) {
            te->id = AE_DELETED_EVENT_ID;
            return AE_OK;
        }
    }
    return AE_ERR;
}

/* Microseconds until the nearest timer, or -1 when there is none. */
static long long usUntilEarliestTimer(aeEventLoop *el) {
    long long earliest = -1;
    for (aeTimeEvent *te = el->timeEventHead; te; te = te->next)
        if (te->id != AE_DELETED_EVENT_ID && (earliest == -1 || te->when_us < earliest))
            earliest = te->when_us;
    if (earliest == -1) return -1;
    long long now = aeMonotonicUs();
    return earliest > now ? earliest - now : 0;
}

static int processTimeEvents(aeEventLoop *el) {
    int processed = 0;
    /* Timers created by callbacks during this pass wait for the next one,
     * so a timer re-arming itself at 0 ms cannot starve file events. */
    long long maxId = el->timeEventNextId - 1;
    long long now = aeMonotonicUs();
    aeTimeEvent *te = el->timeEventHead;
    while (te) {
        aeTimeEvent *next = te->next;
        if (te->id == AE_DELETED_EVENT_ID) {
            if (te->refcount == 0) {
                if (te->prev) te->prev->next = te->next;
                else el->timeEventHead = te->next;
                if (te->next) te->next->prev = te->prev;
                if (te->finalizerProc) te->finalizerProc(el, te->clientData);
                zfree(te);
            }
            te = next;
            continue;
        }
        if (te->id > maxId) {
            te = next;
            continue;
        }
        if (te->when_us <= now) {
            te->refcount++;
            int retval = te->timeProc(el, te->id, te->clientData);
            te->refcount--;
            processed++;
            now = aeMonotonicUs();
            if (retval != AE_NOMORE) te->when_us = now + (long long)retval * 1000;
            else te->id = AE_DELETED_EVENT_ID;
        }
        te = next;
    }
    return processed;
}

int aeProcessEvents(aeEventLoop *el, int flags) {
    int processed = 0;
    if (!(flags & AE_TIME_EVENTS) && !(flags & AE_FILE_EVENTS)) return 0;

    int timeout_ms = -1;
    if (flags & AE_DONT_WAIT) {
        timeout_ms = 0;
    } else if (flags & AE_TIME_EVENTS) {
        long long us = usUntilEarliestTimer(el);
        if (us >= 0) timeout_ms = (int)((us + 999) / 1000);
    }
    if (el->beforesleep && (flags & AE_CALL_BEFORE_SLEEP)) el->beforesleep(el);

    struct epoll_event *events = el->apidata;
    int numevents = 0;
    long long start = el->busy_poll_us > 0 && !el->spin_off && timeout_ms != 0 ? aeMonotonicUs() : 0;
    int skipped = 0; /* a window was open but backed off: see the top */
    if (start && start < el->poll_until_us && el->spin_skip > 0) {
        el->spin_skip--;
        skipped = 1;
    } else if (start && start < el->poll_until_us) {
        long long until = el->poll_until_us;
        if (timeout_ms > 0 && until > start + (long long)timeout_ms * 1000) until = start + (long long)timeout_ms * 1000;
        while ((numevents = epoll_wait(el->epfd, events, el->setsize, 0)) == 0 && aeMonotonicUs() < until) {
        }
        if (numevents > 0) {
            el->spin_caught++;
        } else {
            el->spin_wasted_us += until - start;
        }
        /* Only a window that ran its course counts (not one cut short by a timer). */
        if (numevents > 0 || until == el->poll_until_us) spinOutcome(el, numevents > 0);
        if (numevents == 0 && timeout_ms > 0) {
            long long left_us = start + (long long)timeout_ms * 1000 - aeMonotonicUs();
            timeout_ms = left_us > 0 ? (int)((left_us + 999) / 1000) : 0;
        }
    }
    if (numevents == 0) {
        numevents = epoll_wait(el->epfd, events, el->setsize, timeout_ms);
        /* Slept through a skipped window and woke inside it: the spin would have paid. */
        if (skipped && numevents > 0 && aeMonotonicUs() < el->poll_until_us) spinOutcome(el, 1);
    }
    if (el->aftersleep && (flags & AE_CALL_BEFORE_SLEEP)) el->aftersleep(el);
    for (int j = 0; j < numevents; j++) {
        int mask = 0;
        struct epoll_event *e = events + j;
        if (e->events & EPOLLIN) mask |= AE_READABLE;
        if (e->events & EPOLLOUT) mask |= AE_WRITABLE;
        /* Errors and hangups are reported as both so whichever handler is
         * installed notices the failed read or write and cleans up. */
        if (e->events & (EPOLLERR | EPOLLHUP)) mask |= AE_READABLE | AE_WRITABLE;
        el->fired[j].fd = e->data.fd;
        el->fired[j].mask = mask;
    }
    for (int j = 0; j < numevents; j++) {
        int fd = el->fired[j].fd;
        int mask = el->fired[j].mask;
        aeFileEvent *fe = &el->events[fd];
        int fired = 0;
        /* Read first so a reply produced by this read can go out in the
         * same iteration's write callback. */
        if (fe->mask & mask & AE_READABLE) {
            fe->rfileProc(el, fd, fe->clientData, mask);
            fired++;
            fe = &el->events[fd]; /* the callback may have resized the array */
        }
        if (fe->mask & mask & AE_WRITABLE) {
            if (!fired || fe->wfileProc != fe->rfileProc) fe->wfileProc(el, fd, fe->clientData, mask);
        }
        processed++;
    }
    /* The polling window runs from the end of the last iteration that had
     * I/O, across timer-only iterations (a cron tick must not close it). */
    if (numevents > 0 && el->busy_poll_us > 0 && !el->spin_off) el->poll_until_us = aeMonotonicUs() + el->busy_poll_us;
    if (flags & AE_TIME_EVENTS) processed += processTimeEvents(el);
    return processed;
}

void aeMain(aeEventLoop *el) {
    el->stop = 0;
    while (!el->stop) aeProcessEvents(el, AE_ALL_EVENTS | AE_CALL_BEFORE_SLEEP);
}

void aeSetBeforeSleepProc(aeEventLoop *el, aeBeforeSleepProc *p) { el->beforesleep = p; }
void aeSetAfterSleepProc(aeEventLoop *el, aeBeforeSleepProc *p) { el->aftersleep = p; }
