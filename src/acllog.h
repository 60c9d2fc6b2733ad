/* acllog.h -- ACL LOG, the record of refusals (design: acllog.c). The
 * public refusal hooks (aclLogDenial and its forms) are declared in acl.h,
 * beside the checks that call them. */
#ifndef ACLLOG_H
#define ACLLOG_H

#include <stddef.h>

struct client;

/* A refusal by c's check: reason ACL_DENIED_*, object what was refused,
 * username the user it was refused to (at AUTH: the name tried). */
void aclLogAdd(struct client *c, int reason, const char *object, size_t objlen, const char *username, size_t ulen);
/* ACL LOG [count | RESET]: c's view of the log (a tenant: its own). */
void aclLogCommand(struct client *c);

#endif
