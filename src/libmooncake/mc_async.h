/* mc_async.h -- what mooncake.c and mc_async.c (the background worker of
 * the non-blocking batches) share. Internal: not installed, and hidden in
 * the shared library like everything not in mooncake.h. */
#ifndef MC_ASYNC_H
#define MC_ASYNC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake.h"

struct mcAsync;

/* Implemented in mooncake.c. */

/* A new handle to the same server as c, as the same ACL user, with c's
 * timeouts, transport, streams, lease-release setting and registered
 * buffers. c's lock is held only while they are copied, not while the
 * clone connects. NULL with the reason in err. */
mc_client *mcClone(mc_client *c, char *err, size_t errlen);
/* Copies c's settings (timeouts, transport, streams, lease release) to the
 * clone again, after a setter changed them. */
void mcCloneSync(mc_client *clone, mc_client *c);
/* The handle's worker, NULL until the first submit (owned by mc_async.c). */
_Atomic(struct mcAsync *) *mcAsyncSlot(mc_client *c);
/* mc_last_error's text, set under the handle's lock. */
void mcSetError(mc_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* NULL, or inherited across fork(): no call may use it (mooncake.c, "Fork"). */
int mcClientBad(mc_client *c);
/* Through mc_close's gate (mooncake.c, "Threads"): a submit is a call on
 * the handle, so mc_close waits for it, and refuses it once closing
 * (MC_ERR_INVALID with this thread's error set). */
int mcEnter(mc_client *c);
void mcLeave(mc_client *c);
/* The handle's serial, and this thread's error text for the handle of
 * that serial: an op's reason, given to the thread that waited for it. */
uint64_t mcSerial(const mc_client *c);
void mcThreadErrSet(uint64_t serial, const char *text);

/* Implemented in mc_async.c; each does nothing for a handle without a
 * worker. */

/* mc_close: runs what is queued to its end, joins the worker, closes the
 * clone. */
void mcAsyncStop(mc_client *c);
/* mc_close of a handle inherited across fork(): the worker is the
 * parent's thread, not here; frees this process's copy of its state and
 * closes the clone the same way (its queued ops are their callers' to
 * free). */
void mcAsyncForget(mc_client *c);
/* mc_register/mc_unregister succeeded on c: the same on the clone. */
void mcAsyncRegister(mc_client *c, void *addr, size_t len, int mem);
void mcAsyncUnregister(mc_client *c, void *addr);
/* A setter changed c: the worker copies the settings before its next op. */
void mcAsyncSettingsChanged(mc_client *c);

#endif
