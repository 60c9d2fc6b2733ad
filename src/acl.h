/* acl.h -- users, their permissions, and the checks every command passes.
 * The design is described at the top of acl.c. */
#ifndef ACL_H
#define ACL_H

#include <stddef.h>
#include <stdint.h>

#include "sds.h"
#include "sha256.h"

struct client;
struct serverCommand;
struct segment;

/* User flags. */
#define USER_ON (1 << 0)           /* may authenticate */
#define USER_NOPASS (1 << 1)       /* any password authenticates */
#define USER_ALLKEYS (1 << 2)      /* ~* or allkeys: every key, read and write */
#define USER_ALLCHANNELS (1 << 3)  /* &* (kept for Redis ACL files; no Pub/Sub here) */
#define USER_SANITIZE (1 << 4)     /* sanitize-payload (kept for Redis ACL files) */
#define USER_SKIP_SANITIZE (1 << 5)
#define USER_ALLCOMMANDS (1 << 6)  /* every bit of the command bitmap is set */

/* Key permissions of a pattern, and what a command needs of its keys. */
#define ACL_READ (1 << 0)
#define ACL_WRITE (1 << 1)

/* Why a check failed (ACL LOG "reason"). */
enum { ACL_OK = 0, ACL_DENIED_CMD, ACL_DENIED_KEY, ACL_DENIED_AUTH, ACL_DENIED_CHANNEL };

/* Categories: bits of serverCommand.acl_categories, named in acl.c. */
#define ACL_CAT_KEYSPACE (1ULL << 0)
#define ACL_CAT_READ (1ULL << 1)
#define ACL_CAT_WRITE (1ULL << 2)
#define ACL_CAT_SET (1ULL << 3)
#define ACL_CAT_SORTEDSET (1ULL << 4)
#define ACL_CAT_LIST (1ULL << 5)
#define ACL_CAT_HASH (1ULL << 6)
#define ACL_CAT_STRING (1ULL << 7)
#define ACL_CAT_BITMAP (1ULL << 8)
#define ACL_CAT_HYPERLOGLOG (1ULL << 9)
#define ACL_CAT_GEO (1ULL << 10)
#define ACL_CAT_STREAM (1ULL << 11)
#define ACL_CAT_PUBSUB (1ULL << 12)
#define ACL_CAT_ADMIN (1ULL << 13)
#define ACL_CAT_FAST (1ULL << 14)
#define ACL_CAT_SLOW (1ULL << 15)
#define ACL_CAT_BLOCKING (1ULL << 16)
#define ACL_CAT_DANGEROUS (1ULL << 17)
#define ACL_CAT_CONNECTION (1ULL << 18)
#define ACL_CAT_TRANSACTION (1ULL << 19)
#define ACL_CAT_SCRIPTING (1ULL << 20)
#define ACL_CAT_STORE (1ULL << 21)

typedef struct aclKeyPattern {
    sds pattern;
    int perm;               /* ACL_READ | ACL_WRITE */
} aclKeyPattern;

typedef struct user {
    sds name;
    int flags;                                  /* USER_* */
    unsigned char (*passwords)[SHA256_DIGEST_LEN]; /* SHA-256 of each password */
    int npasswords;
    uint64_t *allowed;                          /* one bit per command id */
    sds cmdrules;                               /* "+@all -keys": how it was said */
    aclKeyPattern *keys;
    int nkeys;
    sds *channels;                              /* &patterns, kept for ACL files */
    int nchannels;
    unsigned long nclients;                     /* connections authenticated as it (tenant-maxclients) */
} user;

extern user *DefaultUser;

/* Start-up: the default user (on, nopass, every command and key) and the
 * categories of every command. After populateCommandTable, before the
 * configuration (requirepass applies to the default user). */
void aclInit(void);
/* The aclfile directive, at start-up: 0, or -1 with the reason in err. */
int aclLoadConfiguredFile(char *err, size_t errlen);
/* CONFIG SET requirepass: `ACL SETUSER default resetpass >pass` (or nopass). */
void aclUpdateDefaultUserPassword(sds password);
/* The default user's passwords and nopass as they are, for CONFIG SET to
 * put back when it refuses: requirepass's old value cannot say them (ACL
 * SETUSER default >a >b leaves requirepass ""). Restore frees the copy. */
typedef struct aclPasswordsCopy aclPasswordsCopy;
aclPasswordsCopy *aclDefaultUserPasswordsCopy(void);
void aclDefaultUserPasswordsRestore(aclPasswordsCopy *copy);
void aclDefaultUserPasswordsFree(aclPasswordsCopy *copy);

/* A connection's user: authenticated at once if the user is on and nopass. */
int aclUserOpensWithoutAuth(const user *u);
int aclDefaultUserHasPassword(void);  /* protected mode asks */
int aclUserExists(sds name);         /* CLIENT KILL USER */
/* AUTH and HELLO AUTH: name NULL means "default". C_OK (c->user set), C_ERR
 * after logging the failure in ACL LOG, or ACL_AUTH_TOO_MANY (below: the
 * password was right, the tenant is at tenant-maxclients; c unchanged). */
int aclAuthenticate(struct client *c, sds name, sds pass);
/* The same check without a connection (HTTP Basic auth, http.c): the user
 * if it exists, is on and the password is one of its own; NULL otherwise.
 * Nothing is logged: the caller logs with aclLogDenialFrom. */
user *aclCheckPassword(const char *name, size_t nlen, const char *pass, size_t plen);

/* The check processCommand makes: ACL_OK, or ACL_DENIED_* with *keypos the
 * argv index of the refused key. The default user (every command, every key)
 * costs one flag test. */
int aclCheckCommand(struct client *c, int *keypos);
/* Logs a failed aclCheckCommand and returns its -NOPERM error for the
 * caller to reply with (processCommand's rejectCommand, EXEC's loop); the
 * caller frees it. */
sds aclDenialError(struct client *c, int reason, int keypos);
/* Whether the user may run cmd at all (bigarg placement asks first). */
int aclUserCanRun(const user *u, const struct serverCommand *cmd);
/* A user restricted by key patterns (no allkeys): the store and the data
 * plane apply tenancy rules to it (acl.c, "Tenancy"). */
static inline int aclUserRestricted(const user *u) { return !(u->flags & USER_ALLKEYS); }
/* Whether u may access key with perm (ACL_READ, ACL_WRITE, both, or 0 for
 * any pattern that matches). */
int aclUserCanAccessKey(const user *u, const char *key, size_t keylen, int perm);
/* A refusal made outside processCommand (SHM.ATTACH; the data plane's,
 * below) goes to ACL LOG too: reason ACL_DENIED_KEY or ACL_DENIED_CMD,
 * object the key (NULL: "(no key)") or the command. Replies nothing. */
void aclLogDenial(struct client *c, int reason, const char *object, size_t len);
/* The same, for the server's users only: the refusing tenant does not read
 * it in its own ACL LOG. The data plane's range refusals name the key of
 * the object found at the offset, which the tenant did not give and must
 * not learn (nor that an object is there at all). */
void aclLogDenialServerOnly(struct client *c, int reason, const char *object, size_t len);
/* The same for a refusal that has no RESP connection (HTTP): cinfo is the
 * entry's client-info, written by the caller. Counted in INFO as well. */
void aclLogDenialFrom(int reason, const char *object, size_t len, const char *username, size_t ulen,
                      const char *cinfo);
/* The tenant a segment belongs to: its mounting user when that user was
 * restricted (NULL: shared). Whether c may see / unmount / place into s. */
const char *aclSegmentTenantFor(const struct client *c); /* NULL: not restricted */
int aclSegmentVisible(const struct client *c, const struct segment *s);
int aclTenantMayHostIn(const char *tenant, const struct segment *s); /* tenant NULL: a server user */
int aclUserSeesSegment(const user *u, const struct segment *s); /* the same, by user */
/* Whether u sees how full s is (used, objects, free): not a shared one's
 * (acl.c); SEGMENTS, SEGMENT.INFO and INFO segments then report it empty. */
int aclUserSeesSegmentUsage(const user *u, const struct segment *s);
/* The segment c names (a name, else a decimal id) among those it may see:
 * segment names are per tenant (acl.c). NULL: none, or not c's to see. */
struct segment *aclLookupSegment(const struct client *c, const char *name_or_id);
/* Whether u may learn that a key, a channel (or subscribed pattern) exists:
 * always for a user with allkeys, else only what it could access itself
 * (acl.c, "what a tenant may see"). Lists, counts and events ask these. */
int aclUserSeesKey(const user *u, const char *key, size_t len);
int aclUserSeesChannel(const user *u, const char *name, size_t len);
int aclServerEventChannel(const char *name, size_t len);
int aclUserSeesSubscriber(const user *u, const char *channel, size_t len, const struct client *sub);
/* Whether u may see the connections of user `name` (SLOWLOG entries, CLIENT
 * KILL USER), or the connection t (CLIENT LIST/KILL, MONITOR lines). */
int aclUserSeesUser(const user *u, const char *name, size_t len);
int aclUserSeesClient(const user *u, const struct client *t);

/* Categories by index, for COMMAND INFO; by name (0: unknown). */
int aclCategoryCount(uint64_t cats);
const char *aclCategoryName(int i, uint64_t *flag); /* NULL past the last */
uint64_t aclCategoryFlag(const char *name);
void aclApplyLogMaxLen(void); /* CONFIG SET acllog-max-len: trim */

void aclCommand(struct client *c);
/* c now counts as a connection of u (NULL: of nobody, as it closes):
 * every change of a connection's user goes through here, so each user's
 * nclients is exact (tenant-maxclients). */
void aclClientCountAs(struct client *c, user *u);
/* DEBUG TENANT-CHECK: a line appended to out per user whose count differs
 * from its connections, and per connection counted as another user. */
sds *aclCheckClientCounts(sds *out, size_t *n);
/* What aclAuthenticate answers when the password was right but the user,
 * a tenant, has tenant-maxclients connections already. */
#define ACL_AUTH_TOO_MANY (-2)
#define ACL_ERR_TENANT_MAXCLIENTS                                                                   \
    "-ERR max number of clients reached for this user (tenant-maxclients): close one of its "     \
    "connections first"
/* Every user, sorted by name; valid until the next change of the users. */
user **aclUsers(int *n);

#define ACL_ERR_SHM_ATTACH                                                                       \
    "-NOPERM SHM.ATTACH maps the whole segment, so it needs a user with allkeys: a user "       \
    "restricted by key patterns moves bytes with SEG.READ/SEG.WRITE, which are checked per object"

#endif
