/* tenantquota.h -- tenant-maxmemory: each tenant's values bounded, its own
 * evicted first (design: tenantquota.c). */
#ifndef TENANTQUOTA_H
#define TENANTQUOTA_H

#include <stdint.h>

#include "acl.h"
#include "sds.h"

struct client;

#define TENANT_QUOTA_OOM_ERR                                                                          \
    "-OOM this user's values would pass tenant-maxmemory, and evicting its own values cannot make room " \
    "(pinned, held, leased or pending ones are not evicted)"
#define TENANT_QUOTA_NOSPACE_ERR                                                                          \
    "-NOSPACE this user's objects would pass tenant-maxmemory, and evicting its own values cannot make room " \
    "(pinned, held, leased or pending ones are not evicted)"

/* Before c adds a value of len bytes under key (put: a PUT.START, whose
 * old version stays until PUT.END; else a SET form, whose old value goes):
 * C_OK when c's user is no bounded tenant or the value fits its bound,
 * having evicted its own values as needed; C_ERR with *err when it cannot. */
int tenantQuotaMakeRoom(struct client *c, sds key, uint64_t len, int put, const char **err);
/* Before any other write command of c: a tenant past its bound evicts its
 * own values until under it, else C_ERR with *err. */
int tenantQuotaBeforeCommand(struct client *c, const char **err);
/* INFO tenants: the bound, the counters, and a line per tenant that
 * `asking` may see (NULL: the server's view, every tenant). */
sds tenantQuotaInfo(sds s, const user *asking);
void tenantQuotaResetStats(void); /* CONFIG RESETSTAT */

#endif
