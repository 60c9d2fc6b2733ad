/* test_aofformat.c -- the append-only log's records of format 2 (src/aofformat.c):
 * every byte of a record is vouched for, so damage anywhere in a file is
 * refused or, at its end, cut at a record's start -- never read as another
 * key, value or expiry. Format 1 had a CRC64 over each value only: a
 * flipped bit in a key or an expiry loaded as a different key or expiry.
 *
 * The log is built with the writer functions aof.c uses, in the pieces it
 * uses them (a RESTORE's head, body and end separately, as a large value
 * goes from the pool), then every bit of every byte is flipped in turn and
 * the file read as the server reads it (aofFileFormat, aofNextLogRecord).
 * Exhaustive and deterministic: a few thousand reads of a small file. */
#include <stdint.h>
#include <string.h>

#include "aofformat.h"
#include "crc.h"
#include "dump.h"
#include "sds.h"
#include "testhelp.h"

#define MAX_RECORD SIZE_MAX /* as the server loads */
#define MAX_RECS 16

/* A RESTORE of a string as aof.c's catObjState writes a checked one. */
static sds catRestore(sds s, const char *key, long long expire, const char *val, int checked) {
    dumpInfo d = {.type = DUMP_TYPE_STRING, .value = val, .value_len = strlen(val)};
    size_t plen = dumpPrefixLen(&d), vlen = strlen(val), start = sdslen(s);
    s = aofCatRestoreHead(s, key, strlen(key), expire, plen + vlen + DUMP_TRAILER_LEN);
    uint64_t head = checked ? aofRestoreHeadChecked(s, start) : 0;
    unsigned char prefix[64], trailer[DUMP_TRAILER_LEN];
    dumpWritePrefix(&d, prefix);
    s = sdscatlen(s, prefix, plen);
    s = sdscatlen(s, val, vlen);
    dumpWriteTrailer(crc64(crc64(0, prefix, plen), (const unsigned char *)val, vlen), trailer);
    return aofCatRestoreEnd(s, trailer, checked, head);
}

/* The segment and the placed object the logs below hold. */
static aofSegment sampleSegment(void) {
    aofSegment g = {.id = 7, .size = 1 << 20, .base = 4096, .tier = 1, .mounted_ms = 1000};
    g.name = (aofStr){"seg", 3};
    g.owner = (aofStr){"host-a", 6};
    g.identity = (aofStr){"id-1", 4};
    g.nendpoints = 1;
    g.endpoints[0] = (aofStr){"10.0.0.1:1", 10};
    return g;
}

static const aofPlaced samplePlaced = {.created_ms = 5, .value_len = 100, .nreplicas = 1, .segid = {7}, .offset = {64}};

/* One of every record, in format 2 (with its header, and a MULTI ... EXEC
 * group) or format 1. */
static sds buildLog(int checked) {
    sds s = checked ? aofCatFileHeader(sdsempty()) : sdsempty();
    s = catRestore(s, "alpha", 1795578924271LL, "value-one", checked);
    s = catRestore(s, "beta", 0, "v2", checked);
    size_t from = sdslen(s);
    s = aofCatDel(s, "alpha", 5);
    aofSegment g = sampleSegment();
    s = aofCatSegment(s, &g);
    s = aofCatPlaced(s, "gamma", 5, 1795578924999LL, &samplePlaced);
    s = aofCatSegmentGone(s, 7);
    s = aofCatFlushall(s);
    if (checked) s = aofCheckRecords(s, from);
    if (checked) s = aofCatGroup(s, 1); /* one loop iteration's records: MULTI ... EXEC */
    s = catRestore(s, "delta", 42, "last", checked);
    if (checked) s = aofCatGroup(s, 0);
    return s;
}

typedef struct {
    size_t off, next;
} span;

static char lastWhy[128]; /* what the last readLog stopped on */

/* Reads buf as the server loads a file: the spans of the records taken,
 * and the verdict where it stopped (*stop). */
static int readLog(const char *buf, size_t len, span *recs, int *n, size_t *stop, int *version) {
    size_t off;
    char why[128] = "";
    *n = 0;
    int rc = aofFileFormat(buf, len, version, &off, why, sizeof(why));
    aofRecord rec;
    size_t next;
    while (rc == AOF_REC_OK &&
           (rc = aofNextLogRecord(buf, len, off, MAX_RECORD, *version, &rec, &next, why, sizeof(why))) == AOF_REC_OK) {
        if (*n < MAX_RECS) recs[*n] = (span){off, next};
        (*n)++;
        off = next;
    }
    *stop = off;
    memcpy(lastWhy, why, sizeof(why));
    return rc;
}

int main(void) {
    span orig[MAX_RECS];
    int norig, version;
    size_t stop;

    TEST("aofformat: a format 2 log reads back whole, every field") {
        sds s = buildLog(1);
        CHECK(memcmp(s, AOF_FILE_HEADER, AOF_FILE_HEADER_LEN) == 0);
        CHECK_EQ(readLog(s, sdslen(s), orig, &norig, &stop, &version), AOF_REC_END);
        if (norig != 8) printf("    stopped after %d records: %s\n", norig, lastWhy);
        CHECK_EQ(version, 2);
        CHECK_EQ(norig, 10);
        aofRecord r;
        size_t next;
        char why[128];
        CHECK_EQ(aofNextLogRecord(s, sdslen(s), orig[0].off, MAX_RECORD, 2, &r, &next, why, sizeof(why)), AOF_REC_OK);
        CHECK(r.type == AOF_REC_RESTORE && r.keylen == 5 && !memcmp(r.key, "alpha", 5));
        CHECK(r.expire_ms == 1795578924271LL && r.dump.value_len == 9 && !memcmp(r.dump.value, "value-one", 9));
        CHECK_EQ(aofNextLogRecord(s, sdslen(s), orig[4].off, MAX_RECORD, 2, &r, &next, why, sizeof(why)), AOF_REC_OK);
        CHECK(r.type == AOF_REC_PLACED && r.expire_ms == 1795578924999LL && r.placed.offset[0] == 64);
        /* A format 1 reader (the replication stream's) refuses the checks. */
        CHECK_EQ(aofNextRecord(s, sdslen(s), orig[0].off, MAX_RECORD, &r, &next, why, sizeof(why)), AOF_REC_CORRUPT);
        sdsfree(s);
    }

    TEST("aofformat: every bit flipped anywhere is refused, or cut at a record's start at the end") {
        sds s = buildLog(1);
        size_t len = sdslen(s);
        CHECK_EQ(readLog(s, len, orig, &norig, &stop, &version), AOF_REC_END);
        int corrupt = 0, truncated = 0;
        for (size_t at = 0; at < len; at++) {
            for (int bit = 0; bit < 8; bit++) {
                s[at] ^= (char)(1 << bit);
                span got[MAX_RECS];
                int n;
                int rc = readLog(s, len, got, &n, &stop, &version);
                /* No record that holds the damaged byte is taken, and the
                 * records taken are the originals, in order. */
                int ok = rc == AOF_REC_CORRUPT || rc == AOF_REC_TRUNCATED;
                for (int i = 0; i < n && ok; i++)
                    ok = i < norig && got[i].off == orig[i].off && got[i].next == orig[i].next &&
                         !(at >= got[i].off && at < got[i].next);
                /* A cut is at a record's start (or the file's). */
                if (ok && rc == AOF_REC_TRUNCATED) ok = stop == (n ? got[n - 1].next : 0) && stop <= at;
                if (!ok) {
                    printf("    byte %zu bit %d: result %d after %d records, stop %zu\n", at, bit, rc, n, stop);
                    CHECK(ok);
                    at = len;
                    break;
                }
                corrupt += rc == AOF_REC_CORRUPT;
                truncated += rc == AOF_REC_TRUNCATED;
                s[at] ^= (char)(1 << bit);
            }
        }
        CHECK(corrupt > 0);
        /* Only damage to the last record's lengths can read as a cut tail. */
        CHECK(truncated < (int)(len - orig[norig - 1].off) * 8);
        sdsfree(s);
    }

    TEST("aofformat: every cut of a format 2 log is a clean end or a cut tail, never damage") {
        sds s = buildLog(1);
        for (size_t cut = 0; cut < sdslen(s); cut++) {
            span got[MAX_RECS];
            int n;
            int rc = readLog(s, cut, got, &n, &stop, &version);
            if (!(rc == AOF_REC_END || rc == AOF_REC_TRUNCATED) || (rc == AOF_REC_END && stop != cut && cut)) {
                printf("    cut at %zu: result %d (%s)\n", cut, rc, lastWhy);
                CHECK(0);
                break;
            }
        }
        sdsfree(s);
    }

    TEST("aofformat: a length damaged to run past the end is damage when whole records follow") {
        /* beta's key length, 4, made 2^60: the file ends "inside" it. */
        sds s = buildLog(1);
        char *p = memmem(s, sdslen(s), "$4\r\nbeta", 8);
        CHECK(p != NULL);
        sds bad = sdsnewlen(s, (size_t)(p - s));
        bad = sdscat(bad, "$1152921504606846976");
        bad = sdscatlen(bad, p + 2, sdslen(s) - (size_t)(p + 2 - s));
        span got[MAX_RECS];
        int n;
        CHECK_EQ(readLog(bad, sdslen(bad), got, &n, &stop, &version), AOF_REC_CORRUPT);
        CHECK_EQ(n, 1);
        /* The same as the last record: a cut tail, cut where it starts. */
        sds tail = sdsnewlen(s, orig[norig - 1].off);
        tail = sdscat(tail, "*7\r\n$7\r\nRESTORE\r\n$1152921504606846976\r\nde");
        CHECK_EQ(readLog(tail, sdslen(tail), got, &n, &stop, &version), AOF_REC_TRUNCATED);
        CHECK_EQ(stop, orig[norig - 1].off);
        sdsfree(tail);
        sdsfree(bad);
        sdsfree(s);
    }

    TEST("aofformat: format 1 files (no header) still read; another version's header is refused, named") {
        sds s = buildLog(0);
        span got[MAX_RECS];
        int n;
        CHECK_EQ(readLog(s, sdslen(s), got, &n, &stop, &version), AOF_REC_END);
        CHECK_EQ(version, 1);
        CHECK_EQ(n, 8);
        sdsfree(s);
        const char v3[] = "*2\r\n$10\r\nAOF.FORMAT\r\n$1\r\n3\r\n";
        char why[128];
        size_t start;
        CHECK_EQ(aofFileFormat(v3, sizeof(v3) - 1, &version, &start, why, sizeof(why)), AOF_REC_CORRUPT);
        CHECK(strstr(why, "format 3") != NULL);
        /* A header cut short is a cut tail at 0; zeros are damage. */
        CHECK_EQ(aofFileFormat(AOF_FILE_HEADER, 7, &version, &start, why, sizeof(why)), AOF_REC_TRUNCATED);
        char zeros[64] = {0};
        CHECK_EQ(readLog(zeros, sizeof(zeros), got, &n, &stop, &version), AOF_REC_CORRUPT);
        CHECK_EQ(n, 0);
    }

    TEST("aofformat: why format 2: in format 1 a flipped bit in a key or an expiry loads as another") {
        sds s = buildLog(0);
        span got[MAX_RECS];
        int n;
        char *k = memmem(s, sdslen(s), "alpha", 5);
        CHECK(k != NULL);
        k[0] ^= 1; /* "alpha" becomes "`lpha" */
        CHECK_EQ(readLog(s, sdslen(s), got, &n, &stop, &version), AOF_REC_END);
        CHECK_EQ(n, 8);
        k[0] ^= 1;
        char *e = memmem(s, sdslen(s), "1795578924271", 13);
        CHECK(e != NULL);
        e[12] ^= 2; /* ...271 becomes ...273 */
        CHECK_EQ(readLog(s, sdslen(s), got, &n, &stop, &version), AOF_REC_END);
        sdsfree(s);
    }

    TEST("aofformat: aofCheckRecords turns each writer record into a checked one, and only those") {
        sds s = aofCatFileHeader(sdsempty());
        size_t from = sdslen(s);
        s = aofCatDel(s, "k", 1);
        s = catRestore(s, "r", 0, "x", 0);
        s = aofCheckRecords(s, from);
        span got[MAX_RECS];
        int n;
        CHECK_EQ(readLog(s, sdslen(s), got, &n, &stop, &version), AOF_REC_END);
        CHECK_EQ(n, 2);
        sdsfree(s);
    }
    TEST("aofformat: aofCheckRecord (one record, in place) writes what aofCheckRecords does") {
        aofSegment g = sampleSegment();
        for (int kind = 0; kind < 5; kind++) {
            sds one = sdsnew("head"), many = sdsnew("head");
            sds *both[2] = {&one, &many};
            for (int b = 0; b < 2; b++) {
                sds x = *both[b];
                if (kind == 0) x = aofCatDel(x, "k", 1);
                if (kind == 1) x = aofCatFlushall(x);
                if (kind == 2) x = aofCatSegment(x, &g);
                if (kind == 3) x = aofCatSegmentGone(x, 7);
                if (kind == 4) x = aofCatPlaced(x, "p", 1, 0, &samplePlaced);
                *both[b] = b == 0 ? aofCheckRecord(x, 4) : aofCheckRecords(x, 4);
            }
            CHECK(sdslen(one) > 4 + 23); /* a check was added */
            CHECK_EQ(sdslen(one), sdslen(many));
            CHECK(memcmp(one, many, sdslen(one)) == 0);
            sdsfree(one);
            sdsfree(many);
        }
    }
    return testReport();
}
