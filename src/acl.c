/* acl.c -- users, permissions, and tenancy (ACL, as Redis 7 has it).
 *
 * Users. A user has a name, a state (on/off), passwords, the commands it may
 * run and the keys it may touch. `default` always exists: connections start
 * as default, and are authenticated at once when default is on and nopass
 * (no requirepass), so a server nobody configured behaves as before. The
 * rules are Redis 7's (ACL SETUSER alice on >pw ~tenantA:* +@all -@dangerous)
 * so an ACL file or a client written for Redis works here unchanged; the
 * reference is docs/PROTOCOL.md "ACL". Selectors -- Redis 7's "(...)" second
 * sets of permissions -- are not supported: they are refused, not ignored.
 *
 * Users stay where they are. A client points at its user; SETUSER applies
 * the rules to a copy first and, only if every rule is valid, moves the
 * result into the existing struct, so a refused SETUSER changes nothing and
 * a connected client sees the new permissions at its next command without
 * any pointer changing. Only DELUSER and ACL LOAD remove users; they close
 * the connections of the users they remove (a connection must never run as
 * a user that no longer exists).
 *
 * Passwords are kept as SHA-256 digests (sha256.c), never in the clear: ACL
 * LIST, GETUSER and the ACL file show #<hex>. A password is all its bytes,
 * a zero byte included. AUTH hashes what it is given and compares it with
 * every stored digest without stopping at a match or a difference, so the
 * time taken says nothing about which password, or which bytes, matched.
 *
 * Commands. Every command and subcommand gets an id at start-up (aclInit),
 * and a user holds a bitmap over the ids, so the check is one bit test. The
 * rules that built the bitmap are kept as they were said (cmdrules, each
 * rule replacing an earlier one about the same command or category, as
 * Redis 7.2 prints them), because the bitmap alone cannot say "+@all -keys".
 * Categories are derived from the command table as Redis derives them --
 * write -> @write, readonly -> @read, admin -> @admin and @dangerous, fast
 * -> @fast or else @slow, the group (generic -> @keyspace, string ->
 * @string, connection -> @connection, store and data -> @store) -- plus the
 * short list of commands Redis marks @dangerous (aclExtraCategories below).
 *
 * Keys. A pattern grants read (%R~), write (%W~) or both (~). Read-only
 * commands need read on every key they name, write commands write (SET ...
 * GET both). The keys are found by the code cluster routing and COMMAND
 * GETKEYS use (clusterCommandKeys), so the three can never disagree about
 * which arguments are keys. The default user has allkeys and allcommands,
 * and processCommand pays one flag test for it.
 *
 * Tenancy. A user without allkeys is "restricted", a tenant: key patterns
 * keep it inside its prefix (~tenantA:*), and because the store and the data
 * plane reach bytes by other routes than keys, they apply the patterns
 * there too (the case in point is vLLM's cache_salt, CVE-2025-46570: one
 * tenant probing whether another's prompt prefixes are cached):
 *  - PUT.*, GET.REPLICAS, LEASE, REMOVE, OBJECT.INFO, BATCH.* are keyed
 *    commands and checked like any other.
 *  - SEG.READ/SEG.WRITE and their vector forms name (segment, offset), not a
 *    key. Each range is mapped to its object (t_data.c), and the object's key
 *    -- recorded when its put started, in the object's extension -- must be
 *    readable (SEG.READ: a complete object) or writable (SEG.WRITE: a
 *    pending one) by the user. An object with no recorded key (a SET value)
 *    is refused: GET reads those. A refused range gets the error free space
 *    gets, so a tenant cannot map where the others' objects sit.
 *  - SHM.ATTACH hands over the memory file of the whole pool, after which no
 *    check is possible: a restricted user is refused it.
 *  - Segments: a segment mounted by a restricted user belongs to it (its
 *    tenant). Tenant segments hold only their tenant's objects (the hosting
 *    process can read all of its memory); a restricted user sees (SEGMENTS,
 *    SEGMENT.INFO), unmounts and places puts in only its own segments and
 *    shared ones (the pool, segments mounted by unrestricted users). A
 *    segment records its tenant's name, not a pointer: it outlives a
 *    DELUSER, and a user made again under that name is the same tenant.
 *    Names are per tenant (aclLookupSegment): another tenant's name is free,
 *    and so are owner names (owner.c). A shared segment shows a tenant its
 *    capacity, not its occupancy (aclUserSeesSegmentUsage): how full the
 *    pool is says how much the others store.
 *  - Tenants are invisible to each other. Everything that lists, counts or
 *    reports -- KEYS, SCAN, RANDOMKEY, DBSIZE, CLUSTER GETKEYSINSLOT,
 *    PUBSUB, keyspace notifications and store events, segment lookups,
 *    CLIENT LIST/KILL, MONITOR, SLOWLOG -- asks the functions under "what a
 *    tenant may see" below, the one place that draws the line. What a
 *    tenant counts or draws (DBSIZE, RANDOMKEY) comes from an index of its
 *    own keys by its patterns' prefixes (tenantkeys.c), never a walk of the
 *    others' keys, and the flush event reaches it without the server's
 *    key count. Redis shows
 *    a restricted user all of those; the promise here is isolation. INFO,
 *    LATENCY and CONFIG stay the server's view (@dangerous / @admin).
 *
 * Connections per tenant. Each user counts the connections authenticated
 * as it (nclients): every change of a connection's user -- creation, AUTH,
 * RESET, DELUSER's close, the close itself -- goes through
 * aclClientCountAs, so the count is exact and a check is O(1). AUTH past
 * tenant-maxclients for a restricted user is refused after the password
 * matched (who lacks it learns nothing), and SETUSER and ACL LOAD, which
 * move a new copy of the rules into the user, keep its count.
 *
 * ACL LOG keeps the last acllog-max-len refusals -- commands, keys, failed
 * AUTHs, data-plane ranges -- in acllog.c; the checks here only append.
 *
 * The aclfile directive names a file of `user <name> <rules...>` lines,
 * loaded at start-up (a bad line stops the start, naming the line), again
 * by ACL LOAD (all or nothing), and written by ACL SAVE in ACL LIST's
 * format. requirepass is the default user's password: CONFIG SET
 * requirepass x is ACL SETUSER default resetpass >x; an aclfile that defines
 * default overrides it.
 */
#include "acl.h"
#include "acllog.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cluster.h"
#include "segment.h"
#include "server.h"
#include "tenantkeys.h"
#include "util.h"
#include "zmalloc.h"

user *DefaultUser;

static user **Users;  /* sorted by name */
static int NumUsers;
static int NumCommandIds;
static serverCommand **CommandById;

#define BITMAP_WORDS ((NumCommandIds + 63) / 64)

/* ---- categories ----------------------------------------------------------- */

/* In Redis's order (ACL CAT lists them so), then ours. Categories with no
 * command here (@hash, @stream, ...) exist so that rules written for Redis
 * parse. */
static const struct {
    const char *name;
    uint64_t flag;
} aclCategories[] = {
    {"keyspace", ACL_CAT_KEYSPACE},   {"read", ACL_CAT_READ},
    {"write", ACL_CAT_WRITE},         {"set", ACL_CAT_SET},
    {"sortedset", ACL_CAT_SORTEDSET}, {"list", ACL_CAT_LIST},
    {"hash", ACL_CAT_HASH},           {"string", ACL_CAT_STRING},
    {"bitmap", ACL_CAT_BITMAP},       {"hyperloglog", ACL_CAT_HYPERLOGLOG},
    {"geo", ACL_CAT_GEO},             {"stream", ACL_CAT_STREAM},
    {"pubsub", ACL_CAT_PUBSUB},       {"admin", ACL_CAT_ADMIN},
    {"fast", ACL_CAT_FAST},           {"slow", ACL_CAT_SLOW},
    {"blocking", ACL_CAT_BLOCKING},   {"dangerous", ACL_CAT_DANGEROUS},
    {"connection", ACL_CAT_CONNECTION}, {"transaction", ACL_CAT_TRANSACTION},
    {"scripting", ACL_CAT_SCRIPTING}, {"store", ACL_CAT_STORE},
    {NULL, 0}};

/* What the flags and the group do not say. Redis marks these @dangerous
 * (they wipe, move or expose the whole keyspace, or the server's state);
 * ours: REMOVE.ALL is FLUSHALL for objects, SHM.ATTACH hands out the whole
 * pool. A subcommand inherits its container's row. */
static const struct {
    const char *name;
    uint64_t cats;
} aclExtraCategories[] = {
    {"flushall", ACL_CAT_KEYSPACE | ACL_CAT_DANGEROUS},
    {"flushdb", ACL_CAT_KEYSPACE | ACL_CAT_DANGEROUS},
    {"dbsize", ACL_CAT_KEYSPACE},
    {"swapdb", ACL_CAT_KEYSPACE | ACL_CAT_DANGEROUS},
    {"lastsave", ACL_CAT_ADMIN | ACL_CAT_DANGEROUS},
    {"keys", ACL_CAT_DANGEROUS},
    {"migrate", ACL_CAT_DANGEROUS},
    {"restore", ACL_CAT_DANGEROUS},
    {"restore-asking", ACL_CAT_KEYSPACE | ACL_CAT_DANGEROUS},
    {"info", ACL_CAT_DANGEROUS},
    {"command", ACL_CAT_CONNECTION},
    {"asking", ACL_CAT_CONNECTION},
    {"readonly", ACL_CAT_CONNECTION},
    {"readwrite", ACL_CAT_CONNECTION},
    {"remove.all", ACL_CAT_DANGEROUS},
    {"shm.attach", ACL_CAT_DANGEROUS},
    {NULL, 0}};

static uint64_t categoryByName(const char *name) {
    for (int i = 0; aclCategories[i].name; i++)
        if (!strcasecmp(aclCategories[i].name, name)) return aclCategories[i].flag;
    return 0;
}

static uint64_t extraCategories(const char *name) {
    for (int i = 0; aclExtraCategories[i].name; i++)
        if (!strcmp(aclExtraCategories[i].name, name)) return aclExtraCategories[i].cats;
    return 0;
}

static uint64_t categoriesOf(serverCommand *cmd) {
    uint64_t cats = 0;
    /* A container (OBJECT, PUBSUB, CLIENT, SLOWLOG ...) declares no category
     * in Redis: its subcommands carry them, and ACL CAT <category> lists the
     * subcommands only. Its own id is @slow, as Redis's containers are (COMMAND,
     * which runs bare, keeps its row below). */
    if (cmd->subcommands) return ACL_CAT_SLOW | extraCategories(cmd->fullname);
    /* The one help subcommand Redis leaves out of its group's category. */
    if (!strcmp(cmd->fullname, "pubsub|help")) return ACL_CAT_SLOW;
    /* WAIT is of Redis's generic group but its category is @connection. */
    if (!strcmp(cmd->fullname, "wait")) return ACL_CAT_SLOW | ACL_CAT_CONNECTION;
    if (cmd->flags & CMD_WRITE) cats |= ACL_CAT_WRITE;
    if (cmd->flags & CMD_READONLY) cats |= ACL_CAT_READ;
    if (cmd->flags & CMD_ADMIN) cats |= ACL_CAT_ADMIN | ACL_CAT_DANGEROUS;
    if (cmd->flags & CMD_FAST) cats |= ACL_CAT_FAST;
    const char *group = cmd->group ? cmd->group : cmd->parent ? cmd->parent->group : "";
    /* Redis's groups name its categories: rules such as +@transaction or
     * -@pubsub written for Redis must reach the same commands here. */
    if (!strcmp(group, "generic")) cats |= ACL_CAT_KEYSPACE;
    else if (!strcmp(group, "string")) cats |= ACL_CAT_STRING;
    else if (!strcmp(group, "bitmap")) cats |= ACL_CAT_BITMAP;
    else if (!strcmp(group, "pubsub")) cats |= ACL_CAT_PUBSUB;
    else if (!strcmp(group, "transactions")) cats |= ACL_CAT_TRANSACTION;
    else if (!strcmp(group, "connection")) cats |= ACL_CAT_CONNECTION;
    else if (!strcmp(group, "store") || !strcmp(group, "data")) cats |= ACL_CAT_STORE;
    cats |= extraCategories(cmd->parent ? cmd->parent->fullname : cmd->fullname);
    if (!(cats & ACL_CAT_FAST)) cats |= ACL_CAT_SLOW;
    return cats;
}

/* For COMMAND INFO (element 7) and COMMAND LIST FILTERBY ACLCAT. */
int aclCategoryCount(uint64_t cats) { return __builtin_popcountll(cats); }
const char *aclCategoryName(int i, uint64_t *flag) {
    if (aclCategories[i].name == NULL) return NULL;
    *flag = aclCategories[i].flag;
    return aclCategories[i].name;
}
uint64_t aclCategoryFlag(const char *name) { return categoryByName(name); }

/* ---- users ---------------------------------------------------------------- */

static inline int bitGet(const user *u, int id) { return (u->allowed[id / 64] >> (id % 64)) & 1; }
static inline void bitSet(user *u, int id, int on) {
    if (on) u->allowed[id / 64] |= 1ULL << (id % 64);
    else u->allowed[id / 64] &= ~(1ULL << (id % 64));
}

/* USER_ALLCOMMANDS says whether every bit is set, so the hot path need not look. */
static void updateAllCommands(user *u) {
    int all = 1;
    for (int id = 0; id < NumCommandIds && all; id++) all = bitGet(u, id);
    if (all) u->flags |= USER_ALLCOMMANDS;
    else u->flags &= ~USER_ALLCOMMANDS;
}

static user *userNew(const char *name, size_t len) {
    user *u = zcalloc(sizeof(*u));
    u->name = sdsnewlen(name, len);
    u->allowed = zcalloc(sizeof(uint64_t) * (size_t)BITMAP_WORDS);
    u->cmdrules = sdsnew("-@all");
    return u; /* off, no password, no command, no key, no channel */
}

static void userFreeContents(user *u) {
    zfree(u->passwords);
    zfree(u->allowed);
    sdsfree(u->cmdrules);
    for (int i = 0; i < u->nkeys; i++) sdsfree(u->keys[i].pattern);
    zfree(u->keys);
    for (int i = 0; i < u->nchannels; i++) sdsfree(u->channels[i]);
    zfree(u->channels);
}

static void userFree(user *u) {
    userFreeContents(u);
    sdsfree(u->name);
    zfree(u);
}

static user *userDup(const user *src) {
    user *u = zcalloc(sizeof(*u));
    u->name = sdsdup(src->name);
    u->flags = src->flags;
    u->npasswords = src->npasswords;
    if (src->npasswords) {
        u->passwords = zmalloc(SHA256_DIGEST_LEN * (size_t)src->npasswords);
        memcpy(u->passwords, src->passwords, SHA256_DIGEST_LEN * (size_t)src->npasswords);
    }
    u->allowed = zmalloc(sizeof(uint64_t) * (size_t)BITMAP_WORDS);
    memcpy(u->allowed, src->allowed, sizeof(uint64_t) * (size_t)BITMAP_WORDS);
    u->cmdrules = sdsdup(src->cmdrules);
    u->nkeys = src->nkeys;
    u->keys = src->nkeys ? zmalloc(sizeof(aclKeyPattern) * (size_t)src->nkeys) : NULL;
    for (int i = 0; i < src->nkeys; i++) {
        u->keys[i].pattern = sdsdup(src->keys[i].pattern);
        u->keys[i].perm = src->keys[i].perm;
    }
    u->nchannels = src->nchannels;
    u->channels = src->nchannels ? zmalloc(sizeof(sds) * (size_t)src->nchannels) : NULL;
    for (int i = 0; i < src->nchannels; i++) u->channels[i] = sdsdup(src->channels[i]);
    return u;
}

/* dst takes src's permissions (dst keeps its address, name and connection
 * count: its connections stay); src is freed. */
static void userMoveInto(user *dst, user *src) {
    userFreeContents(dst);
    sds name = dst->name;
    unsigned long nclients = dst->nclients;
    *dst = *src;
    dst->name = name;
    dst->nclients = nclients;
    sdsfree(src->name);
    zfree(src);
}

static int userIndex(const char *name, size_t len, int *found) {
    int lo = 0, hi = NumUsers;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        size_t ml = sdslen(Users[mid]->name);
        int cmp = memcmp(Users[mid]->name, name, ml < len ? ml : len);
        if (cmp == 0) cmp = ml < len ? -1 : ml > len;
        if (cmp == 0) {
            *found = 1;
            return mid;
        }
        if (cmp < 0) lo = mid + 1;
        else hi = mid;
    }
    *found = 0;
    return lo;
}

static user *lookupUser(const char *name, size_t len) {
    int found, i = userIndex(name, len, &found);
    return found ? Users[i] : NULL;
}

static void userInsert(user *u) {
    int found, i = userIndex(u->name, sdslen(u->name), &found);
    serverAssert(!found);
    Users = zrealloc(Users, sizeof(user *) * (size_t)(NumUsers + 1));
    memmove(Users + i + 1, Users + i, sizeof(user *) * (size_t)(NumUsers - i));
    Users[i] = u;
    NumUsers++;
}

static void userRemove(user *u) {
    int found, i = userIndex(u->name, sdslen(u->name), &found);
    serverAssert(found && Users[i] == u);
    memmove(Users + i, Users + i + 1, sizeof(user *) * (size_t)(NumUsers - i - 1));
    NumUsers--;
}

/* Redis's rule: a name is any bytes but spaces and NUL (ACL LIST and the
 * file separate words with spaces). */
static int validUserName(const char *name, size_t len) {
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++)
        if (name[i] == '\0' || isspace((unsigned char)name[i])) return 0;
    return 1;
}

/* Patterns are written into ACL LIST and the file as words. */
static int validPattern(const char *p, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)p[i] <= ' ' || p[i] == 127) return 0;
    return 1;
}

/* ---- rules ---------------------------------------------------------------- */

#define ERR_SYNTAX "Syntax error"
#define ERR_UNKNOWN "Unknown command or category name in ACL"
#define ERR_NOPASS "The password you are trying to remove from the user does not exist"
#define ERR_HASH "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
#define ERR_AFTER_ALL                                                                                        \
    "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. " \
    "Try 'resetkeys' to start with an empty list of patterns"

static int findPassword(const user *u, const unsigned char *digest) {
    for (int i = 0; i < u->npasswords; i++)
        if (!memcmp(u->passwords[i], digest, SHA256_DIGEST_LEN)) return i;
    return -1;
}

static void addPassword(user *u, const unsigned char *digest) {
    u->flags &= ~USER_NOPASS;
    if (findPassword(u, digest) >= 0) return;
    u->passwords = zrealloc(u->passwords, SHA256_DIGEST_LEN * (size_t)(u->npasswords + 1));
    memcpy(u->passwords[u->npasswords++], digest, SHA256_DIGEST_LEN);
}

static int removePassword(user *u, const unsigned char *digest) {
    int i = findPassword(u, digest);
    if (i < 0) return C_ERR;
    memmove(u->passwords + i, u->passwords + i + 1, SHA256_DIGEST_LEN * (size_t)(u->npasswords - i - 1));
    u->npasswords--;
    return C_OK;
}

static void resetPasswords(user *u) {
    zfree(u->passwords);
    u->passwords = NULL;
    u->npasswords = 0;
}

static int hexDigest(const char *hex, size_t len, unsigned char *out) {
    if (len != SHA256_HEX_LEN) return C_ERR;
    for (size_t i = 0; i < len; i++) {
        char ch = hex[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return C_ERR;
    }
    for (int i = 0; i < SHA256_DIGEST_LEN; i++) {
        int hi = isdigit((unsigned char)hex[2 * i]) ? hex[2 * i] - '0' : hex[2 * i] - 'a' + 10;
        int lo = isdigit((unsigned char)hex[2 * i + 1]) ? hex[2 * i + 1] - '0' : hex[2 * i + 1] - 'a' + 10;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return C_OK;
}

static void resetKeys(user *u) {
    for (int i = 0; i < u->nkeys; i++) sdsfree(u->keys[i].pattern);
    zfree(u->keys);
    u->keys = NULL;
    u->nkeys = 0;
    u->flags &= ~USER_ALLKEYS;
}

static void addKeyPattern(user *u, const char *p, size_t len, int perm) {
    /* The same pattern again widens its permissions rather than repeating. */
    for (int i = 0; i < u->nkeys; i++)
        if (sdslen(u->keys[i].pattern) == len && !memcmp(u->keys[i].pattern, p, len)) {
            u->keys[i].perm |= perm;
            return;
        }
    u->keys = zrealloc(u->keys, sizeof(aclKeyPattern) * (size_t)(u->nkeys + 1));
    u->keys[u->nkeys].pattern = sdsnewlen(p, len);
    u->keys[u->nkeys].perm = perm;
    u->nkeys++;
}

static void resetChannels(user *u) {
    for (int i = 0; i < u->nchannels; i++) sdsfree(u->channels[i]);
    zfree(u->channels);
    u->channels = NULL;
    u->nchannels = 0;
    u->flags &= ~USER_ALLCHANNELS;
}

/* cmdrules keeps one rule per command or category: the new one replaces an
 * earlier one about the same thing (whatever its sign), which changes
 * nothing about the result -- the later rule sets or clears every bit the
 * earlier one touched -- and keeps ACL LIST short. */
static void appendCommandRule(user *u, char sign, const char *target) {
    int argc;
    sds *argv = sdssplitlen(u->cmdrules, sdslen(u->cmdrules), " ", 1, &argc);
    sds rules = sdsempty();
    for (int i = 0; i < argc; i++) {
        if (sdslen(argv[i]) == 0) continue;
        if (i > 0 && !strcmp(argv[i] + 1, target)) continue; /* the first is +@all/-@all: kept */
        if (sdslen(rules)) rules = sdscatlen(rules, " ", 1);
        rules = sdscatsds(rules, argv[i]);
    }
    sdsfreesplitres(argv, argc);
    rules = sdscatprintf(rules, " %c%s", sign, target);
    sdsfree(u->cmdrules);
    u->cmdrules = rules;
}

static void setAllCommands(user *u, int on) {
    memset(u->allowed, on ? 0xff : 0, sizeof(uint64_t) * (size_t)BITMAP_WORDS);
    if (on && NumCommandIds % 64) u->allowed[BITMAP_WORDS - 1] = (1ULL << (NumCommandIds % 64)) - 1;
    sdsfree(u->cmdrules);
    u->cmdrules = sdsnew(on ? "+@all" : "-@all");
}

static void setCommandBits(user *u, serverCommand *cmd, int on) {
    bitSet(u, cmd->id, on);
    for (serverCommand *sub = cmd->subcommands; sub && sub->name; sub++) bitSet(u, sub->id, on);
}

/* One rule. C_OK, or C_ERR with *err saying why (u is then half-changed:
 * the caller works on a copy). */
static int applyRule(user *u, const char *op, size_t len, const char **err) {
    *err = ERR_SYNTAX;
    /* An empty rule changes nothing, as in Redis (a script that joins an
     * empty list of rules must not fail the others). */
    if (len == 0) return C_OK;
#define IS(word) (len == strlen(word) && !strncasecmp(op, word, len))
    if (IS("on")) {
        u->flags |= USER_ON;
    } else if (IS("off")) {
        u->flags &= ~USER_ON;
    } else if (IS("nopass")) {
        u->flags |= USER_NOPASS;
        resetPasswords(u);
    } else if (IS("resetpass")) {
        u->flags &= ~USER_NOPASS;
        resetPasswords(u);
    } else if (IS("allkeys") || (len == 2 && op[0] == '~' && op[1] == '*')) {
        resetKeys(u);
        u->flags |= USER_ALLKEYS;
    } else if (IS("resetkeys")) {
        resetKeys(u);
    } else if (IS("allchannels") || (len == 2 && op[0] == '&' && op[1] == '*')) {
        resetChannels(u);
        u->flags |= USER_ALLCHANNELS;
    } else if (IS("resetchannels")) {
        resetChannels(u);
    } else if (IS("allcommands") || IS("+@all")) {
        setAllCommands(u, 1);
    } else if (IS("nocommands") || IS("-@all")) {
        setAllCommands(u, 0);
    } else if (IS("sanitize-payload")) {
        u->flags = (u->flags & ~USER_SKIP_SANITIZE) | USER_SANITIZE;
    } else if (IS("skip-sanitize-payload")) {
        u->flags = (u->flags & ~USER_SANITIZE) | USER_SKIP_SANITIZE;
    } else if (IS("reset")) {
        resetPasswords(u);
        resetKeys(u);
        resetChannels(u);
        setAllCommands(u, 0);
        u->flags = USER_SANITIZE; /* off, no nopass */
    } else if (op[0] == '>' || op[0] == '<') {
        unsigned char digest[SHA256_DIGEST_LEN];
        sha256(op + 1, len - 1, digest);
        if (op[0] == '>') {
            addPassword(u, digest);
        } else if (removePassword(u, digest) != C_OK) {
            *err = ERR_NOPASS;
            return C_ERR;
        }
    } else if (op[0] == '#' || op[0] == '!') {
        unsigned char digest[SHA256_DIGEST_LEN];
        if (hexDigest(op + 1, len - 1, digest) != C_OK) {
            *err = ERR_HASH;
            return C_ERR;
        }
        if (op[0] == '#') {
            addPassword(u, digest);
        } else if (removePassword(u, digest) != C_OK) {
            *err = ERR_NOPASS;
            return C_ERR;
        }
    } else if (op[0] == '~' || op[0] == '%') {
        int perm = ACL_READ | ACL_WRITE;
        size_t start = 1;
        /* Before the pattern is parsed, as Redis: after allkeys even a
         * malformed %... is refused for coming after it. */
        if (u->flags & USER_ALLKEYS) {
            *err = ERR_AFTER_ALL;
            return C_ERR;
        }
        if (op[0] == '%') {
            perm = 0;
            for (start = 1; start < len && op[start] != '~'; start++) {
                if (toupper((unsigned char)op[start]) == 'R') perm |= ACL_READ;
                else if (toupper((unsigned char)op[start]) == 'W') perm |= ACL_WRITE;
                else return C_ERR;
            }
            if (perm == 0 || start == len) return C_ERR;
            start++;
        }
        if (!validPattern(op + start, len - start)) return C_ERR;
        if (perm == (ACL_READ | ACL_WRITE) && len - start == 1 && op[start] == '*') {
            resetKeys(u); /* %RW~* is ~*: allkeys, so not a tenant */
            u->flags |= USER_ALLKEYS;
        } else {
            addKeyPattern(u, op + start, len - start, perm);
        }
    } else if (op[0] == '&') {
        if (u->flags & USER_ALLCHANNELS) {
            *err = "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not "
                   "have any effect. Try 'resetchannels' to start with an empty list of channels";
            return C_ERR;
        }
        if (!validPattern(op + 1, len - 1)) return C_ERR;
        /* A pattern the user already has is not listed twice (Redis). */
        for (int i = 0; i < u->nchannels; i++)
            if (sdslen(u->channels[i]) == len - 1 && !memcmp(u->channels[i], op + 1, len - 1)) return C_OK;
        u->channels = zrealloc(u->channels, sizeof(sds) * (size_t)(u->nchannels + 1));
        u->channels[u->nchannels++] = sdsnewlen(op + 1, len - 1);
    } else if (op[0] == '(' || IS("clearselectors")) {
        *err = "Selectors are not supported by this server";
        return C_ERR;
    } else if (op[0] == '+' || op[0] == '-') {
        int on = op[0] == '+';
        sds name = sdsnewlen(op + 1, len - 1);
        sdstolower(name);
        if (name[0] == '@') {
            uint64_t cat = categoryByName(name + 1);
            if (cat == 0 || strlen(name) != sdslen(name)) {
                sdsfree(name);
                *err = ERR_UNKNOWN;
                return C_ERR;
            }
            for (int id = 0; id < NumCommandIds; id++)
                if (CommandById[id]->acl_categories & cat) bitSet(u, id, on);
        } else {
            serverCommand *cmd = strlen(name) == sdslen(name) ? lookupCommandByName(name) : NULL;
            if (cmd == NULL) {
                /* "+get|", "+config|": a known command and nothing after
                 * the bar is a syntax error in Redis 7.0, not an unknown
                 * name (it is one for "-get|": removal takes full names). */
                size_t bar = strcspn(name, "|");
                serverCommand *base = NULL;
                if (on && bar + 1 == sdslen(name) && bar > 0) {
                    sds head = sdsnewlen(name, bar);
                    base = lookupCommandByName(head);
                    sdsfree(head);
                }
                sdsfree(name);
                *err = base ? ERR_SYNTAX : ERR_UNKNOWN;
                return C_ERR;
            }
            setCommandBits(u, cmd, on);
        }
        appendCommandRule(u, op[0], name);
        sdsfree(name);
    } else {
        return C_ERR;
    }
#undef IS
    updateAllCommands(u);
    return C_OK;
}

/* All the rules or none: applied to a copy that replaces u only if every
 * rule was valid. *errop gets the index of the refused rule. */
static int applyRules(user *u, sds *ops, int nops, int *errop, const char **err) {
    user *tmp = userDup(u);
    for (int i = 0; i < nops; i++) {
        if (applyRule(tmp, ops[i], sdslen(ops[i]), err) != C_OK) {
            *errop = i;
            userFree(tmp);
            return C_ERR;
        }
    }
    userMoveInto(u, tmp);
    return C_OK;
}

/* One word of a user's line, prefix (a rule's sigil) and all. A name or a
 * pattern may hold a quote, and sdssplitargs -- the ACL file's reader --
 * starts a quoted string at a quote anywhere in a word, so such a word is
 * written quoted, or the file ACL SAVE writes would not load back (found
 * by fuzzing: ACL SETUSER "'" then ACL SAVE made the server refuse its own
 * aclfile at the next start). Other words stay as they are, as Redis
 * shows them. */
static sds catWord(sds s, const char *prefix, const char *w, size_t len) {
    s = sdscatlen(s, " ", 1);
    if (memchr(w, '"', len) == NULL && memchr(w, '\'', len) == NULL) {
        s = sdscat(s, prefix);
        return sdscatlen(s, w, len);
    }
    sds word = sdscatlen(sdsnew(prefix), w, len);
    s = sdscatrepr(s, word, sdslen(word));
    sdsfree(word);
    return s;
}

/* The user as ACL LIST shows it and the ACL file stores it; reading the
 * line back (ACL LOAD) gives the same user. */
static sds describeUser(sds s, const user *u) {
    s = catWord(sdscat(s, "user"), "", u->name, sdslen(u->name));
    s = sdscat(s, (u->flags & USER_ON) ? " on" : " off");
    if (u->flags & USER_NOPASS) s = sdscat(s, " nopass");
    if (u->flags & USER_SANITIZE) s = sdscat(s, " sanitize-payload");
    if (u->flags & USER_SKIP_SANITIZE) s = sdscat(s, " skip-sanitize-payload");
    for (int i = 0; i < u->npasswords; i++) {
        char hex[SHA256_HEX_LEN + 1];
        sha256Hex(u->passwords[i], hex);
        s = sdscatprintf(s, " #%s", hex);
    }
    if (u->flags & USER_ALLKEYS) s = sdscat(s, " ~*");
    for (int i = 0; i < u->nkeys; i++) {
        int perm = u->keys[i].perm;
        const char *p = perm == (ACL_READ | ACL_WRITE) ? "~" : perm == ACL_READ ? "%R~" : "%W~";
        s = catWord(s, p, u->keys[i].pattern, sdslen(u->keys[i].pattern));
    }
    if (u->flags & USER_ALLCHANNELS) s = sdscat(s, " &*");
    else s = sdscat(s, " resetchannels");
    for (int i = 0; i < u->nchannels; i++) s = catWord(s, "&", u->channels[i], sdslen(u->channels[i]));
    s = sdscat(s, " ");
    return sdscatsds(s, u->cmdrules);
}

static sds describeKeys(const user *u) {
    sds s = sdsnew((u->flags & USER_ALLKEYS) ? "~*" : "");
    for (int i = 0; i < u->nkeys; i++) {
        int perm = u->keys[i].perm;
        if (sdslen(s)) s = sdscat(s, " ");
        s = sdscat(s, perm == (ACL_READ | ACL_WRITE) ? "~" : perm == ACL_READ ? "%R~" : "%W~");
        s = sdscatsds(s, u->keys[i].pattern);
    }
    return s;
}

static sds describeChannels(const user *u) {
    sds s = sdsnew((u->flags & USER_ALLCHANNELS) ? "&*" : "");
    for (int i = 0; i < u->nchannels; i++) {
        if (sdslen(s)) s = sdscat(s, " ");
        s = sdscat(s, "&");
        s = sdscatsds(s, u->channels[i]);
    }
    return s;
}

/* ---- start-up and the default user --------------------------------------- */

static int applyRulesStrict(user *u, const char *rules) {
    int argc;
    sds *argv = sdssplitargs(rules, &argc);
    int errop;
    const char *err;
    int rc = applyRules(u, argv, argc, &errop, &err);
    sdsfreesplitres(argv, argc);
    return rc;
}

void aclInit(void) {
    int n = 0;
    for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
        cmd->id = n++;
        for (serverCommand *sub = cmd->subcommands; sub && sub->name; sub++) sub->id = n++;
    }
    NumCommandIds = n;
    CommandById = zmalloc(sizeof(serverCommand *) * (size_t)n);
    for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
        CommandById[cmd->id] = cmd;
        cmd->acl_categories = categoriesOf(cmd);
        for (serverCommand *sub = cmd->subcommands; sub && sub->name; sub++) {
            CommandById[sub->id] = sub;
            sub->acl_categories = categoriesOf(sub);
        }
    }
    DefaultUser = userNew("default", 7);
    serverAssert(applyRulesStrict(DefaultUser, "on nopass ~* &* +@all") == C_OK);
    userInsert(DefaultUser);
}

/* Applied in place: these rules cannot fail. */
void aclUpdateDefaultUserPassword(sds password) {
    const char *err;
    applyRule(DefaultUser, "resetpass", 9, &err);
    if (password && sdslen(password)) {
        sds op = sdscatsds(sdsnew(">"), password);
        applyRule(DefaultUser, op, sdslen(op), &err);
        sdsfree(op);
    } else {
        applyRule(DefaultUser, "nopass", 6, &err);
    }
}

struct aclPasswordsCopy {
    int nopass;
    int npasswords;
    unsigned char (*passwords)[SHA256_DIGEST_LEN];
};

aclPasswordsCopy *aclDefaultUserPasswordsCopy(void) {
    aclPasswordsCopy *copy = zcalloc(sizeof(*copy));
    copy->nopass = !!(DefaultUser->flags & USER_NOPASS);
    copy->npasswords = DefaultUser->npasswords;
    if (copy->npasswords) {
        size_t len = SHA256_DIGEST_LEN * (size_t)copy->npasswords;
        copy->passwords = zmalloc(len);
        memcpy(copy->passwords, DefaultUser->passwords, len);
    }
    return copy;
}

void aclDefaultUserPasswordsRestore(aclPasswordsCopy *copy) {
    resetPasswords(DefaultUser);
    DefaultUser->passwords = copy->passwords;
    DefaultUser->npasswords = copy->npasswords;
    if (copy->nopass) DefaultUser->flags |= USER_NOPASS;
    else DefaultUser->flags &= ~USER_NOPASS;
    zfree(copy);
}

void aclDefaultUserPasswordsFree(aclPasswordsCopy *copy) {
    if (copy == NULL) return;
    zfree(copy->passwords);
    zfree(copy);
}

int aclUserOpensWithoutAuth(const user *u) { return (u->flags & (USER_ON | USER_NOPASS)) == (USER_ON | USER_NOPASS); }

int aclDefaultUserHasPassword(void) { return !(DefaultUser->flags & USER_NOPASS); }

user **aclUsers(int *n) {
    *n = NumUsers;
    return Users;
}

int aclUserExists(sds name) { return lookupUser(name, sdslen(name)) != NULL; }

/* ---- authentication ------------------------------------------------------- */

/* Whether pass opens u (NULL: a name nobody has). Every stored digest is
 * compared, each in constant time, and the results are OR-ed: no early
 * exit on the first match or the first differing byte. And a refusal
 * costs the same whoever was named: the password is hashed, and compared
 * with one digest, for a name nobody has, a user that is off or one
 * without passwords too. Returning before the hash, as this once did
 * (and as Redis does), answered an unknown name a SHA-256 sooner than a
 * known one, so a tenant could list the others' user names by timing
 * AUTH. (A user with several passwords costs a comparison more for each;
 * those are 32-byte XORs, far under the hash.) */
static const unsigned char noDigest[SHA256_DIGEST_LEN]; /* no input hashes to it */

static int passwordMatches(const user *u, const char *pass, size_t len) {
    unsigned char digest[SHA256_DIGEST_LEN];
    sha256(pass, len, digest);
    int usable = u != NULL && (u->flags & USER_ON);
    if (usable && (u->flags & USER_NOPASS)) return 1;
    int n = usable ? u->npasswords : 0, match = 0;
    for (int i = 0; i < (n ? n : 1); i++) {
        const unsigned char *stored = n ? u->passwords[i] : noDigest;
        unsigned char diff = 0;
        for (int j = 0; j < SHA256_DIGEST_LEN; j++) diff |= (unsigned char)(digest[j] ^ stored[j]);
        match |= diff == 0;
        server.visits[VISITS_AUTH_DIGESTS]++;
    }
    return usable && n && match;
}

user *aclCheckPassword(const char *name, size_t nlen, const char *pass, size_t plen) {
    user *u = lookupUser(name, nlen);
    return passwordMatches(u, pass, plen) ? u : NULL;
}

void aclClientCountAs(client *c, user *u) {
    if (c->counted_user) c->counted_user->nclients--;
    c->counted_user = u;
    if (u) u->nclients++;
}

/* The recount of the connection counts (DEBUG TENANT-CHECK, beside
 * tenantKeysCheck): each user's nclients against the connections counted
 * as it, and each connection counted as the user it runs as (a count
 * kept for another user would be undone against the wrong one). */
sds *aclCheckClientCounts(sds *out, size_t *n) {
    for (int i = 0; i < NumUsers; i++) {
        unsigned long seen = 0;
        for (client *cl = server.clients_head; cl; cl = cl->next) seen += cl->counted_user == Users[i];
        if (seen == Users[i]->nclients) continue;
        out = zrealloc(out, sizeof(sds) * (*n + 1));
        out[(*n)++] = sdscatprintf(sdsempty(), "user '%s': nclients %lu, %lu connections counted as it",
                                   Users[i]->name, Users[i]->nclients, seen);
    }
    for (client *cl = server.clients_head; cl; cl = cl->next) {
        if (cl->counted_user == cl->user) continue;
        out = zrealloc(out, sizeof(sds) * (*n + 1));
        out[(*n)++] = sdscatprintf(sdsempty(), "client id=%llu: runs as '%s', counted as '%s'",
                                   (unsigned long long)cl->id, cl->user ? cl->user->name : "(none)",
                                   cl->counted_user ? cl->counted_user->name : "(none)");
    }
    return out;
}

int aclAuthenticate(client *c, sds name, sds pass) {
    user *u = name ? lookupUser(name, sdslen(name)) : DefaultUser;
    if (passwordMatches(u, pass, sdslen(pass))) {
        /* tenant-maxclients: after the password, so only who holds it
         * learns the user is full; AUTH again as the same user adds none. */
        if (server.tenant_maxclients && aclUserRestricted(u) && c->counted_user != u &&
            u->nclients >= (unsigned long)server.tenant_maxclients) {
            server.stat_tenant_rejected_conn++;
            serverLog(LL_VERBOSE, "Refused AUTH as %s: the user has tenant-maxclients (%lld) connections", u->name,
                      server.tenant_maxclients);
            return ACL_AUTH_TOO_MANY;
        }
        c->user = u;
        c->authenticated = 1;
        aclClientCountAs(c, u);
        return C_OK;
    }
    const char *un = name ? name : "default";
    size_t ulen = name ? sdslen(name) : 7;
    /* The object is the command as sent (AUTH, auth, HELLO), as in Redis. */
    aclLogAdd(c, ACL_DENIED_AUTH, c->argv[0], sdslen(c->argv[0]), un, ulen);
    return C_ERR;
}

/* ---- checks --------------------------------------------------------------- */

int aclUserCanRun(const user *u, const serverCommand *cmd) {
    return (u->flags & USER_ALLCOMMANDS) || (cmd->flags & CMD_NOAUTH) || bitGet(u, cmd->id);
}

int aclUserCanAccessKey(const user *u, const char *key, size_t keylen, int perm) {
    if (u->flags & USER_ALLKEYS) return 1;
    for (int i = 0; i < u->nkeys; i++) {
        const aclKeyPattern *p = &u->keys[i];
        if ((p->perm & perm) != perm) continue;
        if (stringmatchlen(p->pattern, sdslen(p->pattern), key, keylen, 0)) return 1;
    }
    return 0;
}

/* What a command needs of its i-th key: its key flags' (commands.c,
 * keyPermOf), as Redis 7 asks of its key specs. SET ... GET reads the old
 * value too. */
static int keyPermNeeded(const serverCommand *cmd, sds *argv, int argc, int i) {
    int perm = cmd->key_perm[i > 0];
    if (cmd->proc == setCommand)
        for (int j = 3; j < argc; j++)
            if (!strcasecmp(argv[j], "get")) perm |= ACL_READ;
    return perm;
}

/* Channels, as Redis 7: a channel (SUBSCRIBE, SSUBSCRIBE, PUBLISH,
 * SPUBLISH) must match one of the user's &patterns; a pattern PSUBSCRIBE
 * asks for must be one of them literally, since it stands for every
 * channel it matches. Leaving (the UNSUBSCRIBEs) and PUBSUB's counts are
 * not checked. *pos: the argument refused. */
static int channelAllowed(const user *u, sds ch, int literal) {
    if (u->flags & USER_ALLCHANNELS) return 1;
    for (int i = 0; i < u->nchannels; i++) {
        sds p = u->channels[i];
        if (literal ? sdslen(p) == sdslen(ch) && !memcmp(p, ch, sdslen(ch))
                    : stringmatchlen(p, sdslen(p), ch, sdslen(ch), 0))
            return 1;
    }
    return 0;
}

/* The channels the server speaks on about keys: keyspace notifications
 * and store events. A message there is believed to come from the server
 * (a router drops its index entry on __store@0__:remove), so a tenant,
 * granted them to listen to its own keys' events, may not publish there:
 * it could forge events about another tenant's keys. */
int aclServerEventChannel(const char *name, size_t len) {
    static const char *const prefixes[] = {"__keyspace@", "__keyevent@", "__store@"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i]);
        if (len >= n && !memcmp(name, prefixes[i], n)) return 1;
    }
    return 0;
}

static int serverEventChannel(sds ch) { return aclServerEventChannel(ch, sdslen(ch)); }

static int checkChannels(const user *u, serverCommand *cmd, sds *argv, int argc, int *pos) {
    int first = 1, last;
    if (cmd->proc == publishCommand || cmd->proc == spublishCommand) {
        last = 1;
        if (aclUserRestricted(u) && argc > 1 && serverEventChannel(argv[1])) {
            *pos = 1;
            return ACL_DENIED_CHANNEL;
        }
    } else if (cmd->proc == subscribeCommand || cmd->proc == ssubscribeCommand || cmd->proc == psubscribeCommand)
        last = argc - 1;
    else return ACL_OK;
    for (int j = first; j <= last && j < argc; j++) {
        if (!channelAllowed(u, argv[j], cmd->proc == psubscribeCommand)) {
            *pos = j;
            return ACL_DENIED_CHANNEL;
        }
    }
    return ACL_OK;
}

static int checkUser(const user *u, serverCommand *cmd, sds *argv, int argc, int *keypos) {
    if (!aclUserCanRun(u, cmd)) return ACL_DENIED_CMD;
    /* Shard channels sit where keys would (cluster routing): channels, not keys. */
    if (cmd->flags & CMD_PUBSUB) return checkChannels(u, cmd, argv, argc, keypos);
    if (u->flags & USER_ALLKEYS) return ACL_OK;
    if (!(cmd->flags & CMD_MOVABLEKEYS) && cmd->firstkey == 0 && cmd->proc != migrateCommand) return ACL_OK;
    int stackkeys[32];
    int *keys = argc <= 32 ? stackkeys : zmalloc(sizeof(int) * (size_t)argc);
    int n = clusterCommandKeys(cmd, argv, argc, keys, argc);
    int rc = ACL_OK;
    for (int i = 0; i < n; i++) {
        if (!aclUserCanAccessKey(u, argv[keys[i]], sdslen(argv[keys[i]]), keyPermNeeded(cmd, argv, argc, i))) {
            *keypos = keys[i];
            rc = ACL_DENIED_KEY;
            break;
        }
    }
    if (keys != stackkeys) zfree(keys);
    return rc;
}

int aclCheckCommand(client *c, int *keypos) {
    const user *u = c->user;
    const int all = USER_ALLCOMMANDS | USER_ALLKEYS | USER_ALLCHANNELS;
    if ((u->flags & all) == all) return ACL_OK;
    return checkUser(u, c->cmd, c->argv, c->argc, keypos);
}

sds aclDenialError(client *c, int reason, int keypos) {
    c->lastcmd = c->cmd; /* the entry's client-info names the refused command, as Redis's */
    sds object = reason == ACL_DENIED_CMD ? c->cmd->fullname : c->argv[keypos];
    aclLogAdd(c, reason, object, sdslen(object), c->user->name, sdslen(c->user->name));
    if (c->flags & CLIENT_IN_EXEC) {
        /* Allowed when queued, refused now: the user's rules changed in
         * between. Redis's words, and the log entry's context is multi. */
        return sdscatprintf(sdsempty(),
                            "-NOPERM ACLs rules changed between the moment the transaction was accumulated and the "
                            "EXEC call. This command is no longer allowed for the following reason: %s",
                            reason == ACL_DENIED_CMD   ? "no permission to execute the command or subcommand"
                            : reason == ACL_DENIED_KEY ? "no permission to touch the specified keys"
                                                       : "no permission to access one of the channels used as arguments");
    }
    if (reason == ACL_DENIED_CMD)
        return sdscatprintf(sdsempty(), "-NOPERM User %s has no permissions to run the '%s' command", c->user->name,
                            c->cmd->fullname);
    return sdsnew(reason == ACL_DENIED_CHANNEL ? "-NOPERM No permissions to access a channel"
                                               : "-NOPERM No permissions to access a key");
}

const char *aclSegmentTenantFor(const client *c) { return aclUserRestricted(c->user) ? c->user->name : NULL; }

/* ---- what a tenant may see ------------------------------------------------ */

/* The one owner of "may this user see X": every command that lists or
 * reports keys, channels, segments or events asks here, so a new command
 * cannot draw the line somewhere else. A user with allkeys sees everything
 * (Redis's view); a tenant sees what it could access itself. */

int aclUserSeesKey(const user *u, const char *key, size_t len) {
    return !aclUserRestricted(u) || aclUserCanAccessKey(u, key, len, 0);
}

/* Another user's connections, what they ran and what they were refused
 * (CLIENT LIST and KILL, MONITOR, SLOWLOG, ACL LOG) are the server's view:
 * a tenant sees its own user's. */
int aclUserSeesUser(const user *u, const char *name, size_t len) {
    return !aclUserRestricted(u) || (sdslen(u->name) == len && !memcmp(u->name, name, len));
}

int aclUserSeesClient(const user *u, const client *t) {
    return !aclUserRestricted(u) || t->user == u;
}

/* A channel (or a pattern subscribed to, compared as a name) is seen by a
 * tenant that could subscribe to it; a keyspace channel names a key,
 * which the tenant must see too (__keyspace@0__:tenantB:k says that
 * tenantB:k exists to anyone granted __keyspace@0__:*). */
int aclUserSeesChannel(const user *u, const char *name, size_t len) {
    if (!aclUserRestricted(u)) return 1;
    if (!(u->flags & USER_ALLCHANNELS)) {
        int ok = 0;
        for (int i = 0; i < u->nchannels && !ok; i++)
            ok = stringmatchlen(u->channels[i], sdslen(u->channels[i]), name, len, 0);
        if (!ok) return 0;
    }
    static const char ks[] = "__keyspace@";
    if (len > sizeof(ks) - 1 && !memcmp(name, ks, sizeof(ks) - 1)) {
        const char *sep = memchr(name, ':', len);
        if (sep == NULL) return 1;
        size_t off = (size_t)(sep + 1 - name);
        return aclUserSeesKey(u, name + off, len - off);
    }
    return 1;
}

/* Who listens on a channel a tenant may name. An ordinary channel two
 * users may both subscribe to is shared between them by their rules: its
 * subscribers are seen by both, as PUBLISH's reply counts them to either.
 * The server's event channels are another matter: every tenant granted
 * __keyevent@0__:* hears only its own keys' events there, so the name is
 * shared but the channel is not, and who else listens is another user's
 * connection (aclUserSeesClient): a tenant sees its own user's only. */
int aclUserSeesSubscriber(const user *u, const char *channel, size_t len, const client *sub) {
    if (!aclUserRestricted(u) || !aclServerEventChannel(channel, len)) return 1;
    return aclUserSeesClient(u, sub);
}

int aclUserSeesSegment(const user *u, const segment *s) {
    if (!aclUserRestricted(u) || s->tenant == NULL) return 1;
    return !strcmp(s->tenant, u->name);
}

int aclSegmentVisible(const client *c, const segment *s) { return aclUserSeesSegment(c->user, s); }

/* Where a tenant's bytes may live, and so which segment's token it may hold:
 * the server's own pool (the server moves and checks every byte there) and
 * its own segments. A shared segment hosted by a client process is served by
 * that host to any token holder, range by range, so its token would open the
 * other users' objects to the tenant: a tenant neither gets it nor is placed
 * there. One rule for placement.c and SEGMENT.TOKEN. */
int aclTenantMayHostIn(const char *tenant, const segment *s) {
    return tenant == NULL || s->mem != NULL || (s->tenant != NULL && !strcmp(s->tenant, tenant));
}

/* How full a shared segment (the pool, one a server user mounted) is says
 * how much the other tenants store there: a tenant sees its capacity, not
 * its occupancy. Its own segments hold only its own objects. */
int aclUserSeesSegmentUsage(const user *u, const segment *s) {
    return !aclUserRestricted(u) || (s->tenant != NULL && !strcmp(s->tenant, u->name));
}

/* Segment names are per tenant: a tenant's segment is found by its name
 * only by its tenant (and the server's users), so two tenants may each
 * mount "cache0", and a tenant naming another's segment -- MOUNT, UNMOUNT,
 * SEGMENT.INFO, PREFER -- finds what it would find for a name nobody has.
 * Names a tenant can see (its own, the shared ones) stay unique for it.
 * A user with allkeys sees every segment: where two tenants chose the same
 * name it gets the first (by slot) and names the other by its id. */
segment *aclLookupSegment(const client *c, const char *name_or_id) {
    for (segment *s = segmentNamed(name_or_id); s; s = s->name_next) {
        serverVisit(VISITS_SEGMENTS, 1);
        if (aclSegmentVisible(c, s)) return s;
    }
    if (*name_or_id < '0' || *name_or_id > '9') return NULL;
    char *end;
    errno = 0;
    unsigned long long id = strtoull(name_or_id, &end, 10);
    if (*end != '\0' || errno != 0) return NULL;
    segment *s = segmentLookupId(id);
    return s && aclSegmentVisible(c, s) ? s : NULL;
}

/* ---- clients of removed users -------------------------------------------- */

/* The connections of a user that is going away are closed: the current one
 * after its reply, the others at the next beforeSleep. Until then they are
 * pointed at default, unauthenticated, so nothing reads a freed user. */
static void killClientsOfUser(user *u) {
    for (client *cl = server.clients_head; cl; cl = cl->next) {
        if (cl->user != u) continue;
        cl->user = DefaultUser;
        cl->authenticated = 0;
        aclClientCountAs(cl, DefaultUser); /* before u is freed */
        if (cl == server.current_client) cl->flags |= CLIENT_CLOSE_AFTER_REPLY;
        else freeClientAsync(cl);
    }
}

static void deleteUser(user *u) {
    killClientsOfUser(u);
    userRemove(u);
    userFree(u);
}

/* ---- the ACL file --------------------------------------------------------- */

/* Parses the file into a new set of users: C_OK, or C_ERR with every
 * problem found in err (file:line: what). Nothing changes either way. */
static int parseAclFile(const char *path, user ***out, int *nout, sds *err) {
    FILE *fp = fopen(path, "r");
    if (fp == NULL) {
        *err = sdscatprintf(sdsempty(), "Error loading ACLs, opening file '%s': %s", path, strerror(errno));
        return C_ERR;
    }
    sds content = readFileSds(fp);
    fclose(fp);
    int nlines;
    sds *lines = sdssplitlen(content, sdslen(content), "\n", 1, &nlines);
    sdsfree(content);
    user **users = NULL;
    int nusers = 0;
    sds errors = sdsempty();
    for (int i = 0; i < nlines; i++) {
        sdstrim(lines[i], " \t\r");
        if (lines[i][0] == '\0' || lines[i][0] == '#') continue;
        int argc;
        sds *argv = sdssplitargs(lines[i], &argc);
        if (argv == NULL) {
            errors = sdscatprintf(errors, "%s:%d: unbalanced quotes in acl line. ", path, i + 1);
            continue;
        }
        if (argc < 2 || strcmp(argv[0], "user")) {
            errors = sdscatprintf(errors, "%s:%d: line should start with user keyword. ", path, i + 1);
        } else if (!validUserName(argv[1], sdslen(argv[1]))) {
            errors = sdscatprintf(errors, "%s:%d: invalid user name. ", path, i + 1);
        } else {
            int dup = 0;
            for (int k = 0; k < nusers; k++)
                if (sdslen(users[k]->name) == sdslen(argv[1]) && !memcmp(users[k]->name, argv[1], sdslen(argv[1])))
                    dup = 1;
            if (dup) {
                errors = sdscatprintf(errors, "%s:%d: duplicate user '%s' found. ", path, i + 1, argv[1]);
            } else {
                user *u = userNew(argv[1], sdslen(argv[1]));
                int errop;
                const char *why;
                if (applyRules(u, argv + 2, argc - 2, &errop, &why) != C_OK) {
                    errors = sdscatprintf(errors, "%s:%d: Error in user declaration '%s', rule '%s': %s. ", path,
                                          i + 1, argv[1], argv[2 + errop], why);
                    userFree(u);
                } else {
                    users = zrealloc(users, sizeof(user *) * (size_t)(nusers + 1));
                    users[nusers++] = u;
                }
            }
        }
        sdsfreesplitres(argv, argc);
    }
    sdsfreesplitres(lines, nlines);
    if (sdslen(errors)) {
        for (int k = 0; k < nusers; k++) userFree(users[k]);
        zfree(users);
        sdstrim(errors, " ");
        *err = errors;
        return C_ERR;
    }
    sdsfree(errors);
    *out = users;
    *nout = nusers;
    return C_OK;
}

/* Replaces the users with the file's: users that stay keep their struct (and
 * their connections), the others are deleted (closing theirs). A file
 * without `user default` leaves default as it is (requirepass included). */
static int loadAclFile(const char *path, sds *err) {
    user **users;
    int nusers;
    if (parseAclFile(path, &users, &nusers, err) != C_OK) return C_ERR;
    for (int i = NumUsers - 1; i >= 0; i--) {
        user *u = Users[i];
        if (u == DefaultUser) continue;
        int keep = 0;
        for (int k = 0; k < nusers && !keep; k++)
            keep = sdslen(users[k]->name) == sdslen(u->name) && !memcmp(users[k]->name, u->name, sdslen(u->name));
        if (!keep) deleteUser(u);
    }
    for (int k = 0; k < nusers; k++) {
        user *existing = lookupUser(users[k]->name, sdslen(users[k]->name));
        if (existing) userMoveInto(existing, users[k]);
        else userInsert(users[k]);
    }
    zfree(users);
    return C_OK;
}

int aclLoadConfiguredFile(char *err, size_t errlen) {
    if (server.acl_filename == NULL || server.acl_filename[0] == '\0') return C_OK;
    sds why = NULL;
    if (loadAclFile(server.acl_filename, &why) != C_OK) {
        snprintf(err, errlen, "%s", why);
        sdsfree(why);
        return C_ERR;
    }
    tenantKeysRebuild(Users, NumUsers);
    return C_OK;
}

static int saveAclFile(const char *path, sds *err) {
    sds out = sdsempty();
    for (int i = 0; i < NumUsers; i++) {
        out = describeUser(out, Users[i]);
        out = sdscatlen(out, "\n", 1);
    }
    int rc = C_OK;
    if (writeFileAtomic(path, out, sdslen(out)) == -1) {
        *err = sdscatprintf(sdsempty(), "Error saving ACLs to '%s': %s", path, strerror(errno));
        rc = C_ERR;
    }
    sdsfree(out);
    return rc;
}

/* ---- ACL ------------------------------------------------------------------ */

static void aclSetUserCommand(client *c) {
    sds name = c->argv[2];
    /* Redis 7.0 creates a user named "": refused here (PROTOCOL.md), and
     * said so -- it used to get the spaces-or-NUL text, which "" breaks
     * neither rule of. The other refusals keep Redis's text to the letter. */
    if (sdslen(name) == 0) {
        addReplyError(c, "ERR Usernames can't be empty");
        return;
    }
    if (!validUserName(name, sdslen(name))) {
        addReplyError(c, "ERR Usernames can't contain spaces or null characters");
        return;
    }
    user *u = lookupUser(name, sdslen(name));
    int created = u == NULL;
    if (created) u = userNew(name, sdslen(name));
    int errop;
    const char *err;
    if (applyRules(u, c->argv + 3, c->argc - 3, &errop, &err) != C_OK) {
        addReplyErrorFormat(c, "ERR Error in ACL SETUSER modifier '%s': %s", c->argv[3 + errop], err);
        if (created) userFree(u);
        return;
    }
    if (created) userInsert(u);
    addReplyOk(c);
}

/* The user named, if c may see it: a tenant sees only its own (another's
 * patterns say its prefix, its password digests can be attacked offline,
 * the default user's is requirepass's), and any other name is as one
 * nobody has. ACL GETUSER, DRYRUN, LIST and USERS ask. */
static user *lookupUserSeen(const client *c, const char *name, size_t len) {
    user *u = lookupUser(name, len);
    return u && aclUserSeesUser(c->user, u->name, sdslen(u->name)) ? u : NULL;
}

static void aclGetUserCommand(client *c) {
    user *u = lookupUserSeen(c, c->argv[2], sdslen(c->argv[2]));
    if (u == NULL) {
        addReplyNull(c);
        return;
    }
    addReplyMapLen(c, 6);
    addReplyBulkCString(c, "flags");
    int nflags = 1 + !!(u->flags & USER_NOPASS) + !!(u->flags & USER_SANITIZE) + !!(u->flags & USER_SKIP_SANITIZE);
    addReplySetLen(c, nflags);
    addReplyBulkCString(c, (u->flags & USER_ON) ? "on" : "off");
    if (u->flags & USER_NOPASS) addReplyBulkCString(c, "nopass");
    if (u->flags & USER_SANITIZE) addReplyBulkCString(c, "sanitize-payload");
    if (u->flags & USER_SKIP_SANITIZE) addReplyBulkCString(c, "skip-sanitize-payload");
    addReplyBulkCString(c, "passwords");
    addReplyArrayLen(c, u->npasswords);
    for (int i = 0; i < u->npasswords; i++) {
        char hex[SHA256_HEX_LEN + 1];
        sha256Hex(u->passwords[i], hex);
        addReplyBulkCString(c, hex);
    }
    addReplyBulkCString(c, "commands");
    addReplyBulk(c, u->cmdrules, sdslen(u->cmdrules));
    addReplyBulkCString(c, "keys");
    addReplyBulkSds(c, describeKeys(u));
    addReplyBulkCString(c, "channels");
    addReplyBulkSds(c, describeChannels(u));
    addReplyBulkCString(c, "selectors");
    addReplyArrayLen(c, 0);
}

static void aclDelUserCommand(client *c) {
    long long deleted = 0;
    for (int j = 2; j < c->argc; j++)
        if (!strcmp(c->argv[j], "default") && sdslen(c->argv[j]) == 7) {
            addReplyError(c, "ERR The 'default' user cannot be removed");
            return;
        }
    for (int j = 2; j < c->argc; j++) {
        user *u = lookupUser(c->argv[j], sdslen(c->argv[j]));
        if (u == NULL) continue;
        deleteUser(u);
        deleted++;
    }
    addReplyLongLong(c, deleted);
}

static void aclCatCommand(client *c) {
    if (c->argc == 2) {
        long long n = 0;
        while (aclCategories[n].name) n++;
        addReplyArrayLen(c, n);
        for (int i = 0; aclCategories[i].name; i++) addReplyBulkCString(c, aclCategories[i].name);
        return;
    }
    uint64_t cat = categoryByName(c->argv[2]);
    if (cat == 0) {
        addReplyErrorFormat(c, "ERR Unknown category '%.128s'", c->argv[2]);
        return;
    }
    long long n = 0;
    for (int id = 0; id < NumCommandIds; id++)
        if (CommandById[id]->acl_categories & cat) n++;
    addReplyArrayLen(c, n);
    for (int id = 0; id < NumCommandIds; id++)
        if (CommandById[id]->acl_categories & cat) addReplyBulkCString(c, CommandById[id]->fullname);
}

static void aclDryRunCommand(client *c) {
    user *u = lookupUserSeen(c, c->argv[2], sdslen(c->argv[2]));
    if (u == NULL) {
        addReplyErrorFormat(c, "ERR User '%.128s' not found", c->argv[2]);
        return;
    }
    sds *argv = c->argv + 3;
    int argc = c->argc - 3;
    serverCommand *cmd = lookupCommand(argv, argc);
    if (cmd == NULL) {
        addReplyErrorFormat(c, "ERR Command '%.128s' not found", argv[0]);
        return;
    }
    if ((cmd->arity > 0 && cmd->arity != argc) || argc < -cmd->arity) {
        addReplyErrorFormat(c, "ERR wrong number of arguments for '%s' command", cmd->fullname);
        return;
    }
    int keypos = 0;
    int rc = checkUser(u, cmd, argv, argc, &keypos);
    if (rc == ACL_OK) {
        addReplyOk(c);
    } else if (rc == ACL_DENIED_CMD) {
        addReplyBulkSds(c, sdscatprintf(sdsempty(), "User %s has no permissions to run the '%s' command", u->name,
                                        cmd->fullname));
    } else {
        sds msg = sdscatprintf(sdsempty(), "User %s has no permissions to access the '", u->name);
        msg = sdscatsds(msg, argv[keypos]);
        addReplyBulkSds(c, sdscat(msg, rc == ACL_DENIED_CHANNEL ? "' channel" : "' key"));
    }
}

static void aclGenPassCommand(client *c) {
    long long bits = 256;
    if (c->argc == 3 && getLongLongFromObjectOrReply(c, c->argv[2], &bits, NULL) != C_OK) return;
    if (c->argc > 3 || bits <= 0 || bits > 4096) {
        addReplyError(c, "ERR ACL GENPASS argument must be the number of bits for the output password, a positive "
                         "number up to 4096");
        return;
    }
    size_t chars = (size_t)(bits + 3) / 4; /* one hex digit per 4 bits, rounded up */
    char buf[1024 + 1];
    getRandomHexChars(buf, chars);
    addReplyBulk(c, buf, chars);
}

void aclCommand(client *c) {
    const char *sub = c->argv[1];
    if (!strcasecmp(sub, "help") && c->argc == 2) {
        static const char *help[] = {
            "CAT [<category>]", "    List all commands that belong to <category>, or all command categories",
            "    when no category is specified.",
            "DELUSER <username> [<username> ...]", "    Delete a list of users.",
            "DRYRUN <username> <command> [<arg> ...]",
            "    Returns whether the user can execute the given command without executing the command.",
            "GETUSER <username>", "    Get the user's details.",
            "GENPASS [<bits>]", "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST", "    Show users details in config file format.",
            "LOAD", "    Reload users from the ACL file.",
            "LOG [<count> | RESET]", "    Show the ACL log entries.",
            "SAVE", "    Save the current config to the ACL file.",
            "SETUSER <username> <attribute> [<attribute> ...]",
            "    Create or modify a user with the specified attributes.",
            "USERS", "    List all the registered usernames.",
            "WHOAMI", "    Return the current connection username.",
            NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "setuser") && c->argc >= 3) {
        aclSetUserCommand(c);
    } else if (!strcasecmp(sub, "getuser") && c->argc == 3) {
        aclGetUserCommand(c);
    } else if (!strcasecmp(sub, "deluser") && c->argc >= 3) {
        aclDelUserCommand(c);
    } else if ((!strcasecmp(sub, "users") || !strcasecmp(sub, "list")) && c->argc == 2) {
        int list = !strcasecmp(sub, "list");
        if (aclUserRestricted(c->user)) {
            addReplyArrayLen(c, 1);
            if (list) addReplyBulkSds(c, describeUser(sdsempty(), c->user));
            else addReplyBulk(c, c->user->name, sdslen(c->user->name));
            return;
        }
        addReplyArrayLen(c, NumUsers);
        for (int i = 0; i < NumUsers; i++) {
            if (list) addReplyBulkSds(c, describeUser(sdsempty(), Users[i]));
            else addReplyBulk(c, Users[i]->name, sdslen(Users[i]->name));
        }
    } else if (!strcasecmp(sub, "whoami") && c->argc == 2) {
        addReplyBulk(c, c->user->name, sdslen(c->user->name));
    } else if (!strcasecmp(sub, "cat") && c->argc <= 3) {
        aclCatCommand(c);
    } else if (!strcasecmp(sub, "log")) {
        aclLogCommand(c);
    } else if (!strcasecmp(sub, "genpass")) {
        aclGenPassCommand(c);
    } else if (!strcasecmp(sub, "dryrun") && c->argc >= 4) {
        aclDryRunCommand(c);
    } else if ((!strcasecmp(sub, "load") || !strcasecmp(sub, "save")) && c->argc == 2) {
        if (server.acl_filename == NULL || server.acl_filename[0] == '\0') {
            addReplyError(c, "ERR This server is not configured to use an ACL file: set the aclfile directive "
                             "(mooncake.conf) and restart");
            return;
        }
        sds err = NULL;
        int load = !strcasecmp(sub, "load");
        if ((load ? loadAclFile(server.acl_filename, &err) : saveAclFile(server.acl_filename, &err)) == C_OK) {
            addReplyOk(c);
        } else {
            serverLog(LL_WARNING, "ACL %s failed: %s", load ? "LOAD" : "SAVE", err);
            addReplyErrorFormat(c, "ERR %s", err);
            sdsfree(err);
        }
    } else {
        addReplySubcommandSyntaxError(c);
    }
    /* SETUSER, DELUSER and LOAD may change the tenants' prefixes. */
    if (!strcasecmp(sub, "setuser") || !strcasecmp(sub, "deluser") || !strcasecmp(sub, "load"))
        tenantKeysRebuild(Users, NumUsers);
}
