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
 *
 * Only these, each with its exact arity: anything else is corruption. A
 * file is a sequence of records; replaying them in order, base first and
 * then each increment, gives the dataset.
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

#include "dump.h"
#include "util.h"

/* ---- reading records ------------------------------------------------------ */

#define AOF_MAX_ARGS 6
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

int aofNextRecord(const char *buf, size_t len, size_t off, size_t max_record, aofRecord *rec, size_t *next,
                  char *why, size_t whylen) {
    const char *argv[AOF_MAX_ARGS];
    size_t argl[AOF_MAX_ARGS];
    long long argc, n;
    size_t pos = off;
    memset(rec, 0, sizeof(*rec));
    if (off >= len) return AOF_REC_END;
    int r = readHeader(buf, len, &pos, '*', &argc);
    if (r == 0) return verdict(AOF_REC_TRUNCATED, why, whylen, "the file ends inside a record's header");
    if (r < 0) return verdict(AOF_REC_CORRUPT, why, whylen, "expected a record ('*<count>')");
    if (argc < 1 || argc > AOF_MAX_ARGS) return verdict(AOF_REC_CORRUPT, why, whylen, "a record has 1 to 6 parts");
    for (long long j = 0; j < argc; j++) {
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
    if (argc == 6 && IS(0, "RESTORE") && IS(4, "ABSTTL") && IS(5, "REPLACE")) {
        long long exp;
        if (argl[1] == 0) return verdict(AOF_REC_CORRUPT, why, whylen, "RESTORE of an empty key");
        if (!string2ll(argv[2], argl[2], &exp) || exp < 0)
            return verdict(AOF_REC_CORRUPT, why, whylen, "RESTORE with a bad expiry");
        dumpInfo d;
        if (dumpParse(argv[3], argl[3], &d) != DUMP_OK)
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
    } else if (argc == 1 && IS(0, "FLUSHALL")) {
        rec->type = AOF_REC_FLUSHALL;
    } else {
        return verdict(AOF_REC_CORRUPT, why, whylen, "not a record (RESTORE, DEL or FLUSHALL with their arity)");
    }
#undef IS
    *next = pos;
    return AOF_REC_OK;
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

sds aofCatRestoreTail(sds s) { return sdscatlen(s, "\r\n$6\r\nABSTTL\r\n$7\r\nREPLACE\r\n", 27); }

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
