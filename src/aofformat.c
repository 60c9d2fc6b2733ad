/* aofformat.c -- the append-only log's records and manifest.
 *
 * The log says what each key *is* after a change, never which command made
 * the change. The server's commands are not deterministic where it matters
 * here: PUT.START picks segments and offsets at random, a large SET lands in
 * whatever extent is free, eviction and expiry depend on the clock. Replaying
 * commands would rebuild a different store. So every record is one of three
 * statements of state, in the RESP a Redis AOF uses (a log is still readable
 * with `cat`, and a record is a command the server itself accepts):
 *
 *     RESTORE <key> <expire-ms> <payload> ABSTTL REPLACE
 *         the key holds this value; expire-ms is absolute unix time, 0 none.
 *         The payload is DUMP's (dump.h): value bytes, store metadata (pins,
 *         checksum, creation time) and a CRC64 trailer, so a flipped bit in
 *         a value is caught at load, not served.
 *     DEL <key>
 *         the key is gone (deleted, expired, evicted, its segment went).
 *     FLUSHALL
 *         every key is gone.
 *     SEGMENT <payload>
 *         a segment a client process hosts, as its MOUNT described it, with
 *         the hash of the identity it proved the memory by (aofSegment).
 *     SEGMENT.GONE <id>
 *         that segment was unmounted or its owner died.
 *     MULTI ... EXEC   (format 2)
 *         the records between are one event loop iteration's: a load
 *         applies all of them or, when the file ends before EXEC, none.
 *     PLACED <key> <expire-ms> <payload>
 *         the key is a store object whose bytes live in client segments:
 *         its metadata and, per replica, segment id and offset (aofPlaced).
 *         The bytes are the host's; a restarted server re-attaches the
 *         object only once the host mounts the same memory again
 *         (detached.c).
 *
 * The last three are not commands anyone may send: a PLACED from a client
 * would point an object at memory of another's choosing, so only the
 * loader reads them. Their payloads end in DUMP's trailer (version and
 * CRC64), so damage is caught as in a RESTORE's.
 *
 * Only these, each with its exact arity: anything else is corruption. A
 * file is a sequence of records; replaying them in order, base first and
 * then each increment, gives the dataset.
 *
 * Format 2 checks every byte. In format 1 only payloads carried a CRC64:
 * a flipped bit in a key or an expiry loaded as another key or expiry,
 * and one in a length could turn the rest of a file into a "cut tail".
 * So a file of format 2 starts with the record AOF.FORMAT 2 and each of
 * its records ends in one more part, a check: the CRC64 of the record's
 * bytes before it, hex, except a RESTORE payload's body -- its own
 * trailer's CRC64 covers that, and the trailer is inside what the check
 * covers, so a large value is not read twice to write or load it. A file
 * without the header is of format 1 and loads as before (the server then
 * rewrites the log), rather than refusing an upgrade's files; a header of
 * another format is refused by name. The replication stream keeps format
 * 1: a replica of the previous build reads it, and the link has its own
 * checks (TCP's, and the payload CRC64 the replica verifies).
 *
 * Reading tells three endings apart, because they call for different
 * actions: the bytes end between records (a whole log), the bytes end
 * inside a record (a tail cut by a crash mid-write: the server may cut it
 * off and go on, as Redis's aof-load-truncated), or the bytes are not a
 * record (damage in the middle: refuse, never skip, since what follows
 * could be read as something it is not). The reader is our own small,
 * strict parser rather than resp.c's incremental one: it needs the offset
 * where each record starts and a verdict at the end of the bytes, and it
 * never has to wait for more.
 *
 * The manifest names the files, in Redis 7's multi-part form:
 *
 *     file appendonly.aof.3.base.aof seq 3 type b
 *     file appendonly.aof.5.incr.aof seq 5 type i
 *
 * Names are checked before anything opens them (no '/', no leading dot, a
 * bounded length), so a damaged manifest cannot point the server outside
 * its directory.
 */
#include "aofformat.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "crc.h"
#include "dump.h"
#include "util.h"

/* ---- reading records ------------------------------------------------------ */

#define AOF_MAX_ARGS 7 /* RESTORE's six, and format 2's check */
#define AOF_FIELD_MAX 1024 /* a segment's names, endpoints, a checksum */
#define AOF_HEADER_MAX 32 /* "*6\r\n" or "$<20 digits>\r\n" */

/* One "<c><number>\r\n" line at buf[*pos..len). 1: parsed; 0: the bytes end
 * first; -1: not such a line. */
static int readHeader(const char *buf, size_t len, size_t *pos, char c, long long *n) {
    size_t p = *pos;
    if (p >= len) return 0;
    if (buf[p] != c) return -1;
    size_t avail = len - p, scan = avail < AOF_HEADER_MAX ? avail : AOF_HEADER_MAX;
    const char *cr = memchr(buf + p, '\r', scan);
    if (cr == NULL) return avail < AOF_HEADER_MAX ? 0 : -1;
    size_t linelen = (size_t)(cr - (buf + p));
    if (p + linelen + 1 >= len) return 0; /* the LF is not here */
    if (cr[1] != '\n') return -1;
    if (linelen < 2 || !string2ll(buf + p + 1, linelen - 1, n)) return -1;
    *pos = p + linelen + 2;
    return 1;
}

static int verdict(int rc, char *why, size_t whylen, const char *what) {
    snprintf(why, whylen, "%s", what);
    return rc;
}

static sds catBulk(sds s, const char *p, size_t len);

/* ---- the payloads of SEGMENT and PLACED ------------------------------------ */

static void le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t rd64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static sds cat64(sds s, uint64_t v) {
    unsigned char b[8];
    le64(b, v);
    return sdscatlen(s, (const char *)b, 8);
}

static sds cat32(sds s, uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    return sdscatlen(s, (const char *)b, 4);
}

#define AOF_STR_ABSENT 0xFFFFFFFFu

static sds catStr(sds s, aofStr v) {
    if (v.p == NULL) return cat32(s, AOF_STR_ABSENT);
    s = cat32(s, (uint32_t)v.len);
    return sdscatlen(s, v.p, v.len);
}

/* The trailer DUMP's payloads end with (version, CRC64 of all before it). */
static sds catTrailer(sds body) {
    unsigned char t[DUMP_TRAILER_LEN];
    dumpWriteTrailer(crc64(0, (const unsigned char *)body, sdslen(body)), t);
    return sdscatlen(body, (const char *)t, DUMP_TRAILER_LEN);
}

/* A cursor over a payload's body: every read checks what is left. */
typedef struct rd {
    const unsigned char *p;
    size_t left;
} rd;

static int rdU8(rd *r, unsigned *v) {
    if (r->left < 1) return 0;
    *v = r->p[0];
    r->p++;
    r->left--;
    return 1;
}

static int rdU64(rd *r, uint64_t *v) {
    if (r->left < 8) return 0;
    *v = rd64(r->p);
    r->p += 8;
    r->left -= 8;
    return 1;
}

/* A string of at most max bytes; absent allowed only if optional. */
static int rdStr(rd *r, aofStr *v, size_t max, int optional) {
    if (r->left < 4) return 0;
    uint32_t n = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    r->p += 4;
    r->left -= 4;
    if (n == AOF_STR_ABSENT) {
        v->p = NULL;
        v->len = 0;
        return optional;
    }
    if (n > max || n > r->left) return 0;
    v->p = (const char *)r->p;
    v->len = n;
    r->p += n;
    r->left -= n;
    return 1;
}

/* The body of a payload whose trailer holds, or 0. */
static int payloadBody(const char *p, size_t len, rd *r) {
    const unsigned char *u = (const unsigned char *)p;
    if (len < DUMP_TRAILER_LEN) return 0;
    size_t body = len - DUMP_TRAILER_LEN;
    if ((u[body] | u[body + 1] << 8) != DUMP_VERSION) return 0;
    if (crc64(0, u, body + 2) != rd64(u + body + 2)) return 0;
    r->p = u;
    r->left = body;
    return 1;
}

#define AOF_PAYLOAD_FORMAT 1

sds aofCatSegment(sds s, const aofSegment *g) {
    sds b = sdsempty();
    b = sdscatlen(b, "\x01", 1);
    b = cat64(b, g->id);
    b = cat64(b, g->size);
    b = cat64(b, g->base);
    unsigned char tier = (unsigned char)g->tier, same = g->same_host ? 1 : 0;
    b = sdscatlen(b, (const char *)&tier, 1);
    b = sdscatlen(b, (const char *)&same, 1);
    b = cat64(b, (uint64_t)g->mounted_ms);
    b = catStr(b, g->name);
    b = catStr(b, g->owner);
    b = catStr(b, g->tenant);
    b = catStr(b, g->host);
    b = catStr(b, g->rkey);
    b = catStr(b, g->identity);
    b = catStr(b, g->peer_ip);
    unsigned char ne = (unsigned char)g->nendpoints;
    b = sdscatlen(b, (const char *)&ne, 1);
    for (int i = 0; i < g->nendpoints; i++) b = catStr(b, g->endpoints[i]);
    b = catTrailer(b);
    s = sdscatlen(s, "*2\r\n$7\r\nSEGMENT\r\n", sizeof("*2\r\n$7\r\nSEGMENT\r\n") - 1);
    s = catBulk(s, b, sdslen(b));
    sdsfree(b);
    return s;
}

static int parseSegment(const char *p, size_t len, aofSegment *g) {
    rd r;
    unsigned v, tier, same, ne;
    uint64_t ms;
    memset(g, 0, sizeof(*g));
    if (!payloadBody(p, len, &r) || !rdU8(&r, &v) || v != AOF_PAYLOAD_FORMAT) return 0;
    if (!rdU64(&r, &g->id) || !rdU64(&r, &g->size) || !rdU64(&r, &g->base) || !rdU8(&r, &tier) ||
        !rdU8(&r, &same) || !rdU64(&r, &ms))
        return 0;
    if (g->id < 2 || g->size == 0 || tier > 2 || same > 1 || ms > (uint64_t)LLONG_MAX) return 0;
    g->tier = (int)tier;
    g->same_host = (int)same;
    g->mounted_ms = (long long)ms;
    if (!rdStr(&r, &g->name, 256, 0) || g->name.len == 0 || !rdStr(&r, &g->owner, 256, 0) || g->owner.len == 0 ||
        !rdStr(&r, &g->tenant, 256, 1) || !rdStr(&r, &g->host, 256, 1) || !rdStr(&r, &g->rkey, 256, 1) ||
        !rdStr(&r, &g->identity, 128, 0) || g->identity.len == 0 || !rdStr(&r, &g->peer_ip, 256, 1) || !rdU8(&r, &ne) || ne > AOF_SEG_MAX_ENDPOINTS)
        return 0;
    g->nendpoints = (int)ne;
    for (int i = 0; i < g->nendpoints; i++)
        if (!rdStr(&r, &g->endpoints[i], AOF_FIELD_MAX, 0)) return 0;
    return r.left == 0;
}

sds aofCatSegmentGone(sds s, uint64_t id) {
    char num[32];
    int nl = ll2string(num, sizeof(num), (long long)id);
    s = sdscatlen(s, "*2\r\n$12\r\nSEGMENT.GONE\r\n", sizeof("*2\r\n$12\r\nSEGMENT.GONE\r\n") - 1);
    return catBulk(s, num, (size_t)nl);
}

sds aofCatPlaced(sds s, const char *key, size_t keylen, long long expire_ms, const aofPlaced *pl) {
    sds b = sdsempty();
    unsigned char hdr[2] = {AOF_PAYLOAD_FORMAT, (unsigned char)pl->flags};
    b = sdscatlen(b, (const char *)hdr, 2);
    b = cat64(b, (uint64_t)pl->created_ms);
    b = cat64(b, (uint64_t)pl->softpin_until_ms);
    if (pl->flags & DUMP_F_CHECKSUM) b = catStr(b, pl->checksum);
    b = cat64(b, pl->value_len);
    unsigned char nr = (unsigned char)pl->nreplicas;
    b = sdscatlen(b, (const char *)&nr, 1);
    for (int i = 0; i < pl->nreplicas; i++) {
        b = cat64(b, pl->segid[i]);
        b = cat64(b, pl->offset[i]);
    }
    b = catTrailer(b);
    char num[32];
    int nl = ll2string(num, sizeof(num), expire_ms > 0 ? expire_ms : 0);
    s = sdscatlen(s, "*4\r\n$6\r\nPLACED\r\n", sizeof("*4\r\n$6\r\nPLACED\r\n") - 1);
    s = catBulk(s, key, keylen);
    s = catBulk(s, num, (size_t)nl);
    s = catBulk(s, b, sdslen(b));
    sdsfree(b);
    return s;
}

static int parsePlaced(const char *p, size_t len, aofPlaced *pl) {
    rd r;
    unsigned v, flags, nr;
    uint64_t created, softpin;
    memset(pl, 0, sizeof(*pl));
    if (!payloadBody(p, len, &r) || !rdU8(&r, &v) || v != AOF_PAYLOAD_FORMAT || !rdU8(&r, &flags) ||
        (flags & ~(unsigned)DUMP_F_KNOWN) || !rdU64(&r, &created) || !rdU64(&r, &softpin))
        return 0;
    if (created > (uint64_t)LLONG_MAX || softpin > (uint64_t)LLONG_MAX) return 0;
    pl->flags = flags;
    pl->created_ms = (long long)created;
    pl->softpin_until_ms = (long long)softpin;
    if ((flags & DUMP_F_CHECKSUM) && !rdStr(&r, &pl->checksum, AOF_FIELD_MAX, 0)) return 0;
    if (!rdU64(&r, &pl->value_len) || pl->value_len == 0 || !rdU8(&r, &nr) || nr < 1 ||
        nr > AOF_PLACED_MAX_REPLICAS)
        return 0;
    pl->nreplicas = (int)nr;
    for (int i = 0; i < pl->nreplicas; i++) {
        if (!rdU64(&r, &pl->segid[i]) || !rdU64(&r, &pl->offset[i])) return 0;
        if (pl->segid[i] < 2 || pl->offset[i] > UINT64_MAX - pl->value_len) return 0;
    }
    return r.left == 0;
}

/* A record's check (format 2): 16 hex digits, the CRC64 of the record's
 * bytes before it -- except a RESTORE payload's body (its value and
 * metadata), which its own trailer's CRC64 covers: the trailer is inside
 * what the check covers, so the check vouches for every byte of the record
 * without reading a large value twice. */
#define AOF_CHECK_HEX 16

static int readCheck(const char *p, size_t len, uint64_t *crc) {
    if (len != AOF_CHECK_HEX) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        v = v << 4 | (uint64_t)d;
    }
    *crc = v;
    return 1;
}

static int parseRecord(const char *buf, size_t len, size_t off, size_t max_record, int version, aofRecord *rec,
                       size_t *next, char *why, size_t whylen) {
    const char *argv[AOF_MAX_ARGS];
    size_t argl[AOF_MAX_ARGS], hdr[AOF_MAX_ARGS];
    long long argc, n;
    size_t pos = off;
    memset(rec, 0, sizeof(*rec));
    if (off >= len) return AOF_REC_END;
    int r = readHeader(buf, len, &pos, '*', &argc);
    if (r == 0) return verdict(AOF_REC_TRUNCATED, why, whylen, "the file ends inside a record's header");
    if (r < 0) return verdict(AOF_REC_CORRUPT, why, whylen, "expected a record ('*<count>')");
    if (argc < 1 || argc > AOF_MAX_ARGS - (version < 2)) return verdict(AOF_REC_CORRUPT, why, whylen, "a record has too many parts");
    for (long long j = 0; j < argc; j++) {
        hdr[j] = pos;
        r = readHeader(buf, len, &pos, '$', &n);
        if (r == 0) return verdict(AOF_REC_TRUNCATED, why, whylen, "the file ends inside a record");
        if (r < 0 || n < 0) return verdict(AOF_REC_CORRUPT, why, whylen, "expected a part ('$<length>')");
        if ((unsigned long long)n > max_record) return verdict(AOF_REC_CORRUPT, why, whylen, "a part is too long");
        if (len - pos < (size_t)n + 2) {
            return verdict(AOF_REC_TRUNCATED, why, whylen, "the file ends inside a record");
        }
        if (buf[pos + (size_t)n] != '\r' || buf[pos + (size_t)n + 1] != '\n')
            return verdict(AOF_REC_CORRUPT, why, whylen, "a part does not end with CRLF");
        argv[j] = buf + pos;
        argl[j] = (size_t)n;
        pos += (size_t)n + 2;
    }
#define IS(i, s) (argl[i] == sizeof(s) - 1 && !strncasecmp(argv[i], s, sizeof(s) - 1))
    if (version >= 2) {
        /* The check first: until it holds, no field of the record is
         * believed (a scan for records after a cut relies on that). */
        uint64_t want, got;
        if (argc < 2 || !readCheck(argv[argc - 1], argl[argc - 1], &want))
            return verdict(AOF_REC_CORRUPT, why, whylen, "a record without its check");
        const unsigned char *u = (const unsigned char *)buf;
        size_t end = hdr[argc - 1]; /* where the check's "$16\r\n" starts */
        if (argc == 7 && IS(0, "RESTORE") && argl[3] >= DUMP_TRAILER_LEN) {
            size_t body = (size_t)(argv[3] - buf), trailer = body + argl[3] - DUMP_TRAILER_LEN;
            got = crc64(crc64(0, u + off, body - off), u + trailer, end - trailer);
        } else {
            got = crc64(0, u + off, end - off);
        }
        if (got != want)
            return verdict(AOF_REC_CORRUPT, why, whylen,
                           "a record fails its check (a damaged command, key, expiry or length)");
        argc--;
    }
    if (argc == 6 && IS(0, "RESTORE") && IS(4, "ABSTTL") && IS(5, "REPLACE")) {
        long long exp;
        if (argl[1] == 0) return verdict(AOF_REC_CORRUPT, why, whylen, "RESTORE of an empty key");
        if (!string2ll(argv[2], argl[2], &exp) || exp < 0)
            return verdict(AOF_REC_CORRUPT, why, whylen, "RESTORE with a bad expiry");
        if (dumpParse(argv[3], argl[3], &rec->dump) != DUMP_OK)
            return verdict(AOF_REC_CORRUPT, why, whylen, "RESTORE payload fails its checksum or format");
        rec->type = AOF_REC_RESTORE;
        rec->key = argv[1];
        rec->keylen = argl[1];
        rec->expire_ms = exp;
        rec->payload = argv[3];
        rec->payload_len = argl[3];
    } else if (argc == 2 && IS(0, "DEL")) {
        if (argl[1] == 0) return verdict(AOF_REC_CORRUPT, why, whylen, "DEL of an empty key");
        rec->type = AOF_REC_DEL;
        rec->key = argv[1];
        rec->keylen = argl[1];
    } else if (argc == 1 && version >= 2 && IS(0, "MULTI")) {
        rec->type = AOF_REC_MULTI;
    } else if (argc == 1 && version >= 2 && IS(0, "EXEC")) {
        rec->type = AOF_REC_EXEC;
    } else if (argc == 1 && IS(0, "FLUSHALL")) {
        rec->type = AOF_REC_FLUSHALL;
    } else if (argc == 2 && IS(0, "SEGMENT")) {
        if (!parseSegment(argv[1], argl[1], &rec->seg))
            return verdict(AOF_REC_CORRUPT, why, whylen, "SEGMENT payload fails its checksum or format");
        rec->type = AOF_REC_SEGMENT;
    } else if (argc == 2 && IS(0, "SEGMENT.GONE")) {
        long long id;
        if (!string2ll(argv[1], argl[1], &id) || id < 2)
            return verdict(AOF_REC_CORRUPT, why, whylen, "SEGMENT.GONE with a bad id");
        rec->type = AOF_REC_SEGMENT_GONE;
        rec->segid = (uint64_t)id;
    } else if (argc == 4 && IS(0, "PLACED")) {
        long long exp;
        if (argl[1] == 0) return verdict(AOF_REC_CORRUPT, why, whylen, "PLACED of an empty key");
        if (!string2ll(argv[2], argl[2], &exp) || exp < 0)
            return verdict(AOF_REC_CORRUPT, why, whylen, "PLACED with a bad expiry");
        if (!parsePlaced(argv[3], argl[3], &rec->placed))
            return verdict(AOF_REC_CORRUPT, why, whylen, "PLACED payload fails its checksum or format");
        rec->type = AOF_REC_PLACED;
        rec->key = argv[1];
        rec->keylen = argl[1];
        rec->expire_ms = exp;
    } else {
        return verdict(AOF_REC_CORRUPT, why, whylen,
                       "not a record (RESTORE, DEL, FLUSHALL, SEGMENT, SEGMENT.GONE or PLACED with their arity)");
    }
#undef IS
    *next = pos;
    return AOF_REC_OK;
}

int aofNextRecord(const char *buf, size_t len, size_t off, size_t max_record, aofRecord *rec, size_t *next,
                  char *why, size_t whylen) {
    return parseRecord(buf, len, off, max_record, 1, rec, next, why, whylen);
}

/* Whether a whole, checked record starts anywhere in buf[from..len). A
 * record whose declared lengths run to the end of the file reads as a cut
 * tail; if checked records follow it, the lengths are damage, and cutting
 * there would drop what those records hold. Only format 2 can tell: a
 * check that holds by chance is one in 2^64. */
static int checkedRecordFrom(const char *buf, size_t len, size_t from, size_t max_record) {
    while (from < len) {
        const char *star = memchr(buf + from, '*', len - from);
        if (star == NULL) return 0;
        size_t p = (size_t)(star - buf), next;
        aofRecord r;
        char why[8];
        if (parseRecord(buf, len, p, max_record, 2, &r, &next, why, sizeof(why)) == AOF_REC_OK) return 1;
        from = p + 1;
    }
    return 0;
}

int aofNextLogRecord(const char *buf, size_t len, size_t off, size_t max_record, int version, aofRecord *rec,
                     size_t *next, char *why, size_t whylen) {
    int rc = parseRecord(buf, len, off, max_record, version, rec, next, why, whylen);
    if (rc == AOF_REC_TRUNCATED && version >= 2 && checkedRecordFrom(buf, len, off + 1, max_record))
        return verdict(AOF_REC_CORRUPT, why, whylen,
                       "a record's lengths run past whole records after it (damage, not a cut tail)");
    return rc;
}

int aofFileFormat(const char *buf, size_t len, int *version, size_t *start, char *why, size_t whylen) {
    static const char head[] = "*2\r\n$10\r\nAOF.FORMAT\r\n";
    size_t hl = sizeof(head) - 1;
    *version = AOF_FORMAT_VERSION;
    *start = 0;
    if (len == 0) return AOF_REC_OK;
    if (len >= AOF_FILE_HEADER_LEN && !memcmp(buf, AOF_FILE_HEADER, AOF_FILE_HEADER_LEN)) {
        *start = AOF_FILE_HEADER_LEN;
        return AOF_REC_OK;
    }
    if (len < AOF_FILE_HEADER_LEN && !memcmp(buf, AOF_FILE_HEADER, len))
        return verdict(AOF_REC_TRUNCATED, why, whylen, "the file ends inside its format header");
    if (len >= hl && !memcmp(buf, head, hl)) {
        /* Our header naming another version: a newer build wrote it. */
        size_t pos = hl;
        long long n, v;
        if (readHeader(buf, len, &pos, '$', &n) == 1 && n > 0 && n <= 20 && len - pos >= (size_t)n &&
            string2ll(buf + pos, (size_t)n, &v))
            snprintf(why, whylen, "the file is in format %lld; this build reads formats 1 and %d", v,
                     AOF_FORMAT_VERSION);
        else
            snprintf(why, whylen, "a damaged format header");
        return AOF_REC_CORRUPT;
    }
    /* No header: written by a build before format 2 (its records carry no
     * check of their keys and expiries, only of their values). */
    *version = 1;
    return AOF_REC_OK;
}

int aofReadRestoreHead(const char *buf, size_t len, aofRestoreHead *h, char *why, size_t whylen) {
    size_t pos = 0;
    long long argc, n;
    memset(h, 0, sizeof(*h));
    int r = readHeader(buf, len, &pos, '*', &argc);
    if (r == 0) return verdict(AOF_REC_TRUNCATED, why, whylen, "the bytes end inside a record's header");
    if (r < 0 || argc != 6) return AOF_REC_OTHER;
    /* The command, key and expiry: whole; then the payload's header. */
    const char *argv[3];
    size_t argl[3];
    for (int j = 0; j < 3; j++) {
        r = readHeader(buf, len, &pos, '$', &n);
        if (r == 0) return verdict(AOF_REC_TRUNCATED, why, whylen, "the bytes end inside a record");
        if (r < 0 || n < 0) return AOF_REC_OTHER; /* aofNextRecord says why */
        if (len - pos < (size_t)n + 2) return verdict(AOF_REC_TRUNCATED, why, whylen, "the bytes end inside a record");
        if (buf[pos + (size_t)n] != '\r' || buf[pos + (size_t)n + 1] != '\n') return AOF_REC_OTHER;
        argv[j] = buf + pos;
        argl[j] = (size_t)n;
        pos += (size_t)n + 2;
    }
    if (argl[0] != 7 || strncasecmp(argv[0], "RESTORE", 7)) return AOF_REC_OTHER;
    if (argl[1] == 0) return verdict(AOF_REC_CORRUPT, why, whylen, "RESTORE of an empty key");
    if (!string2ll(argv[2], argl[2], &h->expire_ms) || h->expire_ms < 0)
        return verdict(AOF_REC_CORRUPT, why, whylen, "RESTORE with a bad expiry");
    r = readHeader(buf, len, &pos, '$', &n);
    if (r == 0) return verdict(AOF_REC_TRUNCATED, why, whylen, "the bytes end inside a record");
    if (r < 0 || n < 0) return verdict(AOF_REC_CORRUPT, why, whylen, "expected a part ('$<length>')");
    int d = dumpParsePrefix(buf + pos, len - pos, &h->dump, &h->prefix_len);
    if (d == DUMP_MORE) return verdict(AOF_REC_TRUNCATED, why, whylen, "the bytes end inside a payload's prefix");
    /* The payload is exactly prefix, value and trailer (dumpParse's rule). */
    if (d != DUMP_OK || (uint64_t)n < h->prefix_len + DUMP_TRAILER_LEN ||
        (uint64_t)n - h->prefix_len - DUMP_TRAILER_LEN != h->dump.value_len)
        return verdict(AOF_REC_CORRUPT, why, whylen, "RESTORE payload fails its checksum or format");
    h->key = argv[1];
    h->keylen = argl[1];
    h->head_len = pos + h->prefix_len;
    if (h->dump.value_len > SIZE_MAX - h->head_len - AOF_VALUE_TAIL_LEN)
        return verdict(AOF_REC_CORRUPT, why, whylen, "a part is too long");
    h->total_len = h->head_len + (size_t)h->dump.value_len + AOF_VALUE_TAIL_LEN;
    return AOF_REC_OK;
}

int aofCheckRestoreTail(const char *buf, size_t len, uint64_t body_crc, char *why, size_t whylen) {
    if (len < AOF_VALUE_TAIL_LEN) return verdict(AOF_REC_TRUNCATED, why, whylen, "the bytes end inside a record");
    if (dumpTrailerCheck(body_crc, (const unsigned char *)buf) != DUMP_OK)
        return verdict(AOF_REC_CORRUPT, why, whylen, "RESTORE payload fails its checksum or format");
    if (strncasecmp(buf + DUMP_TRAILER_LEN, AOF_RESTORE_TAIL, AOF_RESTORE_TAIL_LEN))
        return verdict(AOF_REC_CORRUPT, why, whylen,
                       "not a record (RESTORE, DEL, FLUSHALL, SEGMENT, SEGMENT.GONE or PLACED with their arity)");
    return AOF_REC_OK;
}

/* Counts the records that set a key (RESTORE, PLACED) by their headers
 * alone: no payload is read or checked, so a loader can size its tables
 * before replaying (aofNextRecord checks everything then). Stops at the
 * first bytes that are not a whole record. */
size_t aofSkimKeyRecords(const char *buf, size_t len) {
    size_t pos = 0, n = 0;
    for (;;) {
        long long argc, plen;
        if (readHeader(buf, len, &pos, '*', &argc) != 1 || argc < 1 || argc > AOF_MAX_ARGS) return n;
        int sets = 0;
        for (long long j = 0; j < argc; j++) {
            if (readHeader(buf, len, &pos, '$', &plen) != 1 || plen < 0 || len - pos < (size_t)plen + 2) return n;
            if (j == 0) sets = (plen == 7 && !strncasecmp(buf + pos, "RESTORE", 7)) ||
                               (plen == 6 && !strncasecmp(buf + pos, "PLACED", 6));
            pos += (size_t)plen + 2;
        }
        n += (size_t)sets;
    }
}

/* ---- writing records ------------------------------------------------------ */

/* "<c><n>\r\n" without printf: the log writes one or two per record on
 * the server's hot path. */
static sds catHeader(sds s, char c, long long n) {
    char buf[32];
    buf[0] = c;
    int len = ll2string(buf + 1, sizeof(buf) - 3, n);
    buf[1 + len] = '\r';
    buf[2 + len] = '\n';
    return sdscatlen(s, buf, (size_t)len + 3);
}

static sds catBulk(sds s, const char *p, size_t len) {
    s = catHeader(s, '$', (long long)len);
    s = sdscatlen(s, p, len);
    return sdscatlen(s, "\r\n", 2);
}

sds aofCatDel(sds s, const char *key, size_t keylen) {
    s = sdscatlen(s, "*2\r\n$3\r\nDEL\r\n", 13);
    return catBulk(s, key, keylen);
}

sds aofCatFlushall(sds s) { return sdscatlen(s, "*1\r\n$8\r\nFLUSHALL\r\n", 18); }

sds aofCatRestoreHead(sds s, const char *key, size_t keylen, long long expire_ms, size_t payload_len) {
    char num[32];
    int nl = ll2string(num, sizeof(num), expire_ms > 0 ? expire_ms : 0);
    s = sdscatlen(s, "*6\r\n$7\r\nRESTORE\r\n", 17);
    s = catBulk(s, key, keylen);
    s = catBulk(s, num, (size_t)nl);
    return catHeader(s, '$', (long long)payload_len);
}

sds aofCatRestoreTail(sds s) { return sdscatlen(s, AOF_RESTORE_TAIL, AOF_RESTORE_TAIL_LEN); }

/* ---- format 2: the checks ----------------------------------------------- */

sds aofCatFileHeader(sds s) { return sdscatlen(s, AOF_FILE_HEADER, AOF_FILE_HEADER_LEN); }

/* The two group records never change, check included: made once, then
 * copied (a loop iteration with more than one record writes both). */
const char *aofGroupRecord(int begin, size_t *len) {
    static sds rec[2];
    if (rec[begin] == NULL) {
        sds s = begin ? sdsnewlen("*2\r\n$5\r\nMULTI\r\n", 15) : sdsnewlen("*2\r\n$4\r\nEXEC\r\n", 14);
        rec[begin] = aofCatCheck(s, crc64(0, (const unsigned char *)s, sdslen(s)));
    }
    *len = sdslen(rec[begin]);
    return rec[begin];
}

sds aofCatGroup(sds s, int begin) {
    size_t len;
    const char *rec = aofGroupRecord(begin, &len);
    return sdscatlen(s, rec, len);
}

sds aofCatCheck(sds s, uint64_t crc) {
    /* Two digits a byte from a table: every record pays for this, and a
     * digit at a time was a fifth of a small record's format-2 cost. */
    static const char hex2[] =
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f"
        "303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
        "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f"
        "909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
        "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef"
        "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
    char b[5 + AOF_CHECK_HEX + 2] = "$16\r\n";
    for (int i = 0; i < 8; i++) memcpy(b + 5 + 2 * i, hex2 + 2 * ((crc >> (56 - 8 * i)) & 0xff), 2);
    b[5 + AOF_CHECK_HEX] = '\r';
    b[6 + AOF_CHECK_HEX] = '\n';
    return sdscatlen(s, b, sizeof(b));
}

/* Every record the writer makes has 1 to 6 parts: its count is one digit,
 * and one more part keeps it one digit. */
static void countUp(sds s, size_t start) { s[start + 1]++; }

uint64_t aofRestoreHeadChecked(sds s, size_t start) {
    countUp(s, start);
    return crc64(0, (const unsigned char *)s + start, sdslen(s) - start);
}

sds aofCatRestoreEnd(sds s, const unsigned char *trailer, int checked, uint64_t head_crc) {
    size_t from = sdslen(s);
    s = sdscatlen(s, (const char *)trailer, DUMP_TRAILER_LEN);
    s = aofCatRestoreTail(s);
    if (!checked) return s;
    return aofCatCheck(s, crc64(head_crc, (const unsigned char *)s + from, sdslen(s) - from));
}

sds aofCheckRecord(sds s, size_t start) {
    countUp(s, start);
    return aofCatCheck(s, crc64(0, (const unsigned char *)s + start, sdslen(s) - start));
}

sds aofCheckRecords(sds s, size_t from) {
    size_t len = sdslen(s);
    if (from >= len) return s;
    sds in = sdsnewlen(s + from, len - from);
    sdssetlen(s, from);
    s[from] = '\0';
    size_t off = 0, next;
    aofRecord rec;
    char why[8];
    while (parseRecord(in, sdslen(in), off, SIZE_MAX, 1, &rec, &next, why, sizeof(why)) == AOF_REC_OK) {
        size_t start = sdslen(s);
        s = sdscatlen(s, in + off, next - off);
        countUp(s, start);
        const unsigned char *u = (const unsigned char *)s;
        uint64_t crc;
        if (rec.type == AOF_REC_RESTORE) {
            size_t body = start + (size_t)(rec.payload - (in + off));
            size_t trailer = body + rec.payload_len - DUMP_TRAILER_LEN;
            crc = crc64(crc64(0, u + start, body - start), u + trailer, sdslen(s) - trailer);
        } else {
            crc = crc64(0, u + start, sdslen(s) - start);
        }
        s = aofCatCheck(s, crc);
        off = next;
    }
    /* Not a record: kept as it is, for the reader to refuse (never dropped). */
    if (off < sdslen(in)) s = sdscatlen(s, in + off, sdslen(in) - off);
    sdsfree(in);
    return s;
}

/* ---- the manifest ------------------------------------------------------- */

static int nameOk(const char *p, size_t len) {
    if (len == 0 || len > AOF_FILE_NAME_MAX || p[0] == '.') return 0;
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

int aofManifestParse(const char *text, size_t len, aofManifest *m, char *why, size_t whylen) {
    m->nfiles = 0;
    size_t pos = 0;
    int line = 0;
    long long last_incr = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
        const char *l = text + pos;
        pos += ll + (nl ? 1 : 0);
        line++;
        if (ll == 0 || l[0] == '#') continue;
        if (m->nfiles == AOF_MANIFEST_MAX_FILES) {
            snprintf(why, whylen, "line %d: more than %d files", line, AOF_MANIFEST_MAX_FILES);
            return -1;
        }
        /* file <name> seq <n> type <b|i|h> */
        char name[AOF_FILE_NAME_MAX + 2], type[4];
        long long seq;
        char copy[512];
        if (ll >= sizeof(copy)) {
            snprintf(why, whylen, "line %d: too long", line);
            return -1;
        }
        memcpy(copy, l, ll);
        copy[ll] = '\0';
        int used = 0;
        if (sscanf(copy, "file %256s seq %lld type %3s%n", name, &seq, type, &used) != 3 || (size_t)used != ll ||
            !nameOk(name, strlen(name)) || seq < 1 || strlen(type) != 1 ||
            (type[0] != 'b' && type[0] != 'i' && type[0] != 'h')) {
            snprintf(why, whylen, "line %d: expected 'file <name> seq <n> type b|i|h'", line);
            return -1;
        }
        if (type[0] == 'b' && m->nfiles > 0) {
            snprintf(why, whylen, "line %d: a base file comes first", line);
            return -1;
        }
        if (type[0] == 'i') {
            if (seq <= last_incr) {
                snprintf(why, whylen, "line %d: increments must have increasing seq", line);
                return -1;
            }
            last_incr = seq;
        }
        for (int j = 0; j < m->nfiles; j++) {
            if (!strcmp(m->files[j].name, name)) {
                snprintf(why, whylen, "line %d: %s is listed twice", line, name);
                return -1;
            }
        }
        aofManifestFile *f = &m->files[m->nfiles++];
        memcpy(f->name, name, strlen(name) + 1);
        f->seq = seq;
        f->type = type[0];
    }
    return 0;
}

sds aofManifestFormat(const aofManifest *m) {
    sds s = sdsempty();
    for (int j = 0; j < m->nfiles; j++)
        s = sdscatprintf(s, "file %s seq %lld type %c\n", m->files[j].name, m->files[j].seq, m->files[j].type);
    return s;
}
