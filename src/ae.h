/* ae.h -- a minimal event loop: readiness events on fds plus timers.
 *
 * See ae.c for the design. The API mirrors the shape people know from
 * Redis: file events keyed by fd in a flat array, timers that return the
 * number of milliseconds until they should fire again (or AE_NOMORE).
 */
#ifndef AE_H
#define AE_H

#include <stdint.h>

#define AE_OK 0
#define AE_ERR -1

#define AE_NONE 0
#define AE_READABLE 1
#define AE_WRITABLE 2

#define AE_FILE_EVENTS (1 << 0)
#define AE_TIME_EVENTS (1 << 1)
#define AE_ALL_EVENTS (AE_FILE_EVENTS | AE_TIME_EVENTS)
#define AE_DONT_WAIT (1 << 2)
#define AE_CALL_BEFORE_SLEEP (1 << 3)

#define AE_NOMORE -1
#define AE_DELETED_EVENT_ID -1

struct aeEventLoop;

typedef void aeFileProc(struct aeEventLoop *el, int fd, void *clientData, int mask);
typedef int aeTimeProc(struct aeEventLoop *el, long long id, void *clientData);
typedef void aeEventFinalizerProc(struct aeEventLoop *el, void *clientData);
typedef void aeBeforeSleepProc(struct aeEventLoop *el);

typedef struct aeFileEvent {
    int mask;
    aeFileProc *rfileProc;
    aeFileProc *wfileProc;
    void *clientData;
} aeFileEvent;

typedef struct aeTimeEvent {
    long long id;
    long long when_us;            /* monotonic microseconds */
    aeTimeProc *timeProc;
    aeEventFinalizerProc *finalizerProc;
    void *clientData;
    struct aeTimeEvent *prev, *next;
    int refcount;                 /* > 0 while its proc runs: do not free */
} aeTimeEvent;

typedef struct aeFiredEvent {
    int fd;
    int mask;
} aeFiredEvent;

typedef struct aeEventLoop {
    int maxfd;
    int setsize;
    long long timeEventNextId;
    aeFileEvent *events;
    aeFiredEvent *fired;
    aeTimeEvent *timeEventHead;
    int stop;
    int epfd;
    void *apidata;                /* struct epoll_event array */
    aeBeforeSleepProc *beforesleep;
    aeBeforeSleepProc *aftersleep;
    long long busy_poll_us;       /* see aeSetBusyPoll */
    long long poll_until_us;      /* poll, don't sleep, until then (monotonic) */
    int spin_misses;              /* polling windows in a row that ended with no event */
    int spin_backoff;             /* windows now skipped after a run of misses: 2^backoff */
    int spin_skip;                /* windows still to skip (sleep at once) */
    long long spin_wasted_us, spin_caught; /* stats: polling that found nothing; events it caught */
    int spin_off;                 /* the owner judged spinning not to pay now: aeSetBusyPollActive */
} aeEventLoop;

aeEventLoop *aeCreateEventLoop(int setsize);
void aeDeleteEventLoop(aeEventLoop *eventLoop);
void aeStop(aeEventLoop *eventLoop);
/* Poll without sleeping for up to us microseconds after handling events (0: off). */
void aeSetBusyPoll(aeEventLoop *eventLoop, long long us);
/* Whether the windows busy-poll-us allows open at all (default 1); the
 * owner decides (server.c's busy-poll governor). */
void aeSetBusyPollActive(aeEventLoop *eventLoop, int active);
int aeCreateFileEvent(aeEventLoop *eventLoop, int fd, int mask, aeFileProc *proc, void *clientData);
void aeDeleteFileEvent(aeEventLoop *eventLoop, int fd, int mask);
int aeGetFileEvents(aeEventLoop *eventLoop, int fd);
long long aeCreateTimeEvent(aeEventLoop *eventLoop, long long milliseconds, aeTimeProc *proc,
                            void *clientData, aeEventFinalizerProc *finalizerProc);
int aeDeleteTimeEvent(aeEventLoop *eventLoop, long long id);
int aeProcessEvents(aeEventLoop *eventLoop, int flags);
void aeMain(aeEventLoop *eventLoop);
void aeSetBeforeSleepProc(aeEventLoop *eventLoop, aeBeforeSleepProc *beforesleep);
void aeSetAfterSleepProc(aeEventLoop *eventLoop, aeBeforeSleepProc *aftersleep);
int aeGetSetSize(aeEventLoop *eventLoop);
int aeResizeSetSize(aeEventLoop *eventLoop, int setsize);
long long aeMonotonicUs(void);

#endif
