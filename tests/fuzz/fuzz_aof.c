/* fuzz_aof.c -- libFuzzer target for the append-only log's reader
 * (src/aofformat.c): records and the manifest, as the server loads them at
 * start and mooncake-check-aof checks them.
 *
 * The files come off disk, where a crash or a bad disk can leave anything,
 * so the reader must never read outside the file whatever its lengths
 * claim, and must tell a clean end, a cut tail and damage apart. The first
 * input byte chooses the mode:
 *
 *   0 mod 3  by (byte / 3) % 4:
 *            0  the rest is a log file, of the format its header says:
 *               records are read until the end, a cut or damage
 *            1  the same, of records of format 1 sealed first as the log
 *               writes format 2 (sealLog): a mutated record of format 2
 *               almost never carries a right check, which would leave
 *               what the reader does behind the checks unfuzzed
 *            2  the body of a SEGMENT payload, 3 of a PLACED one, sealed
 *               with their trailer (version, CRC64) for the same reason,
 *               in a record: one that reads must be written back by
 *               aofCatSegment / aofCatPlaced as the very same bytes
 *   1 mod 3  the rest is a manifest
 *   2 mod 3  the rest is a body of records written by the writer (aofCat*)
 *            around the input's bytes, then read back: every record the
 *            writer makes must read back as itself, in format 1 and as
 *            the log's format 2; and in format 2 a flipped bit is never
 *            taken as part of a record; and the records the log writes
 *            one at a time (aofCheckRecord; a RESTORE checked in pieces,
 *            aofRestoreHeadChecked and aofCatRestoreEnd, as aof.c writes a
 *            large value) are the very bytes aofCheckRecords makes
 *
 * The bytes are copied into a buffer of exactly their size, so AddressSanitizer
 * sees any read past the end. Checked on every input:
 *   - each result is one of the four, the offsets only move forward and stay
 *     inside the buffer, and a record's key and payload lie inside it;
 *   - a prefix of a valid log that ends inside a record reads as TRUNCATED
 *     there, never as damage (what lets the server cut a crash's tail);
 *   - a manifest that parses formats back to text that parses to the same;
 *   - aofSkimKeyRecords (the load's sizing) counts, in a log that reads to
 *     its end, exactly the records that set a key (RESTORE, PLACED).
 * A broken invariant is __builtin_trap(), reported by libFuzzer as a crash.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aofformat.h"
#include "crc.h"
#include "dump.h"
#include "sds.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)
#define MAX_RECORD (1 << 20)

static int inside(const char *buf, size_t len, const char *p, size_t n) {
    return n == 0 || (p >= buf && p + n <= buf + len);
}

/* Reads buf to its end; returns the last result and where it stopped. */
/* A RESTORE aofNextRecord took, read again as a replica reads a large
 * value (aofReadRestoreHead, the value elsewhere, aofCheckRestoreTail):
 * the two readings must agree on every field and on where the record ends;
 * and the head alone, cut anywhere, is never taken as a whole head. */
static void inPieces(const char *p, size_t len, const aofRecord *rec) {
    aofRestoreHead h;
    char why[128];
    FUZZ_CHECK(aofReadRestoreHead(p, len, &h, why, sizeof(why)) == AOF_REC_OK);
    FUZZ_CHECK(h.total_len == len && h.keylen == rec->keylen && h.key == rec->key);
    FUZZ_CHECK(h.expire_ms == rec->expire_ms && h.dump.type == rec->dump.type && h.dump.flags == rec->dump.flags);
    FUZZ_CHECK(h.dump.value_len == rec->dump.value_len && p + h.head_len == rec->dump.value);
    FUZZ_CHECK(h.dump.checksum_len == rec->dump.checksum_len && h.dump.checksum == rec->dump.checksum);
    uint64_t crc = crc64(0, (const unsigned char *)p + h.head_len - h.prefix_len, h.prefix_len);
    crc = crc64(crc, (const unsigned char *)rec->dump.value, (size_t)rec->dump.value_len);
    size_t tail = h.head_len + (size_t)h.dump.value_len;
    FUZZ_CHECK(aofCheckRestoreTail(p + tail, len - tail, crc, why, sizeof(why)) == AOF_REC_OK);
    FUZZ_CHECK(aofCheckRestoreTail(p + tail, len - tail - 1, crc, why, sizeof(why)) == AOF_REC_TRUNCATED);
    FUZZ_CHECK(aofCheckRestoreTail(p + tail, len - tail, crc ^ 1, why, sizeof(why)) == AOF_REC_CORRUPT);
    size_t cut = h.head_len ? (size_t)(rec->expire_ms + (long long)h.dump.value_len) % h.head_len : 0;
    FUZZ_CHECK(aofReadRestoreHead(p, cut, &h, why, sizeof(why)) == AOF_REC_TRUNCATED);
}

static char lastWhy[128]; /* what the last readAll stopped on */
static size_t lastKeyRecords; /* RESTORE and PLACED records the last readAll took */

/* logfile: buf is a whole log file, of the format its header says (the
 * server's loading); else records of format 1 (the replication stream's). */
static int readAll(const char *buf, size_t len, int logfile, size_t *stop, int *nrec) {
    size_t off = 0, next;
    aofRecord rec;
    char why[128] = "";
    int rc = AOF_REC_OK, version = 1;
    *nrec = 0;
    lastKeyRecords = 0;
    if (logfile) {
        rc = aofFileFormat(buf, len, &version, &off, why, sizeof(why));
        FUZZ_CHECK(off <= len && (version == 1 || version == AOF_FORMAT_VERSION));
        FUZZ_CHECK(rc != AOF_REC_TRUNCATED || off == 0);
    }
    while (rc == AOF_REC_OK &&
           (rc = aofNextLogRecord(buf, len, off, MAX_RECORD, version, &rec, &next, why, sizeof(why))) == AOF_REC_OK) {
        FUZZ_CHECK(next > off && next <= len);
        FUZZ_CHECK(rec.type >= AOF_REC_RESTORE && rec.type <= (version == 1 ? AOF_REC_PLACED : AOF_REC_EXEC));
        FUZZ_CHECK(inside(buf, len, rec.key, rec.keylen));
        FUZZ_CHECK(inside(buf, len, rec.payload, rec.payload_len));
        if (rec.type == AOF_REC_RESTORE && version == 1) inPieces(buf + off, next - off, &rec);
        if (rec.type == AOF_REC_SEGMENT) {
            const aofSegment *g = &rec.seg;
            FUZZ_CHECK(g->id >= 2 && g->nendpoints <= AOF_SEG_MAX_ENDPOINTS && g->name.len && g->identity.len);
            const aofStr *f[] = {&g->name, &g->owner, &g->tenant, &g->host, &g->rkey, &g->identity, &g->peer_ip};
            for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) FUZZ_CHECK(inside(buf, len, f[i]->p, f[i]->len));
            for (int i = 0; i < g->nendpoints; i++) FUZZ_CHECK(inside(buf, len, g->endpoints[i].p, g->endpoints[i].len));
        } else if (rec.type == AOF_REC_PLACED) {
            const aofPlaced *pl = &rec.placed;
            FUZZ_CHECK(pl->nreplicas >= 1 && pl->nreplicas <= AOF_PLACED_MAX_REPLICAS && pl->value_len > 0);
            FUZZ_CHECK(inside(buf, len, pl->checksum.p, pl->checksum.len));
            for (int i = 0; i < pl->nreplicas; i++)
                FUZZ_CHECK(pl->segid[i] >= 2 && pl->offset[i] <= UINT64_MAX - pl->value_len);
        }
        if (rec.type == AOF_REC_RESTORE || rec.type == AOF_REC_PLACED) lastKeyRecords++;
        off = next;
        (*nrec)++;
    }
    FUZZ_CHECK(rc == AOF_REC_END || rc == AOF_REC_TRUNCATED || rc == AOF_REC_CORRUPT);
    FUZZ_CHECK(rc != AOF_REC_END || off == len);
    *stop = off;
    memcpy(lastWhy, why, sizeof(why));
    return rc;
}

/* p[0..n) as the log writes format 2: the header, then every record of
 * format 1 checked (aofCheckRecords), and a MULTI or EXEC spelled as in
 * format 1 replaced by the checked one (aofGroupRecord), so that groups are
 * fuzzed too. Bytes that are no record stay as they are. */
static sds sealLog(const char *p, size_t n) {
    static const char multi[] = "*1\r\n$5\r\nMULTI\r\n", exec[] = "*1\r\n$4\r\nEXEC\r\n";
    sds s = aofCatFileHeader(sdsempty());
    while (n) {
        const char *m = memmem(p, n, multi, sizeof(multi) - 1), *e = memmem(p, n, exec, sizeof(exec) - 1);
        const char *g = m && (!e || m < e) ? m : e;
        size_t chunk = g ? (size_t)(g - p) : n, from = sdslen(s);
        s = aofCheckRecords(sdscatlen(s, p, chunk), from);
        if (g == NULL) break;
        size_t glen;
        const char *rec = aofGroupRecord(g == m, &glen);
        s = sdscatlen(s, rec, glen);
        size_t skip = chunk + (g == m ? sizeof(multi) : sizeof(exec)) - 1;
        p += skip;
        n -= skip;
    }
    return s;
}

/* A SEGMENT (placed 0) or PLACED record around body[0..n), sealed. */
static void fuzzPayload(const char *body, size_t n, int placed) {
    unsigned char trailer[DUMP_TRAILER_LEN];
    dumpWriteTrailer(crc64(0, (const unsigned char *)body, n), trailer);
    sds s = sdsnew(placed ? "*4\r\n$6\r\nPLACED\r\n$1\r\nk\r\n$2\r\n42\r\n" : "*2\r\n$7\r\nSEGMENT\r\n");
    s = sdscatprintf(s, "$%zu\r\n", n + DUMP_TRAILER_LEN);
    s = sdscatlen(s, body, n);
    s = sdscatlen(s, trailer, DUMP_TRAILER_LEN);
    s = sdscatlen(s, "\r\n", 2);
    size_t len = sdslen(s), stop;
    char *buf = malloc(len);
    memcpy(buf, s, len);
    sdsfree(s);
    int nrec;
    if (readAll(buf, len, 0, &stop, &nrec) == AOF_REC_END) {
        aofRecord rec;
        size_t next;
        char why[128];
        FUZZ_CHECK(nrec == 1 && aofNextRecord(buf, len, 0, MAX_RECORD, &rec, &next, why, sizeof(why)) == AOF_REC_OK);
        sds again = placed ? aofCatPlaced(sdsempty(), "k", 1, 42, &rec.placed) : aofCatSegment(sdsempty(), &rec.seg);
        FUZZ_CHECK(sdslen(again) == len && !memcmp(again, buf, len));
        sdsfree(again);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int mode = data[0] % 3, how = (data[0] / 3) % 4;
    data++;
    size--;
    if (mode == 0 && how >= 2) {
        fuzzPayload((const char *)data, size, how == 3);
    } else if (mode == 0) {
        sds file = sdsnewlen(data, size);
        if (how == 1) {
            sds sealed = sealLog(file, sdslen(file));
            sdsfree(file);
            file = sealed;
        }
        size_t len = sdslen(file);
        char *buf = malloc(len ? len : 1);
        if (len) memcpy(buf, file, len);
        sdsfree(file);
        size_t stop;
        int n;
        if (readAll(buf, len, 1, &stop, &n) == AOF_REC_END)
            FUZZ_CHECK(aofSkimKeyRecords(buf, len) == lastKeyRecords);
        free(buf);
    } else if (mode == 1) {
        char *buf = malloc(size ? size : 1);
        if (size) memcpy(buf, data, size);
        static aofManifest m, m2;
        char why[160];
        if (aofManifestParse(buf, size, &m, why, sizeof(why)) == 0) {
            sds text = aofManifestFormat(&m);
            FUZZ_CHECK(aofManifestParse(text, sdslen(text), &m2, why, sizeof(why)) == 0);
            FUZZ_CHECK(m2.nfiles == m.nfiles);
            for (int j = 0; j < m.nfiles; j++) {
                FUZZ_CHECK(!strcmp(m.files[j].name, m2.files[j].name));
                FUZZ_CHECK(m.files[j].seq == m2.files[j].seq && m.files[j].type == m2.files[j].type);
            }
            sdsfree(text);
        }
        free(buf);
    } else {
        /* key = first half (at least a byte), value = the rest; three records. */
        size_t klen = size / 2 ? size / 2 : 1;
        if (size < 1) return 0;
        const char *key = (const char *)data;
        const char *val = (const char *)data + klen;
        size_t vlen = size - klen;
        dumpInfo d = {.type = DUMP_TYPE_STRING, .value = val, .value_len = vlen};
        unsigned char prefix[64], trailer[DUMP_TRAILER_LEN];
        size_t plen = dumpPrefixLen(&d);
        dumpWritePrefix(&d, prefix);
        dumpWriteTrailer(crc64(crc64(0, prefix, plen), (const unsigned char *)val, vlen), trailer);
        sds s = sdsempty();
        s = aofCatRestoreHead(s, key, klen, (long long)size * 1000, plen + vlen + DUMP_TRAILER_LEN);
        s = sdscatlen(s, prefix, plen);
        s = sdscatlen(s, val, vlen);
        s = sdscatlen(s, trailer, DUMP_TRAILER_LEN);
        s = aofCatRestoreTail(s);
        s = aofCatDel(s, key, klen);
        s = aofCatFlushall(s);
        /* A client segment and an object placed there, named by the input. */
        size_t nlen = klen > 256 ? 256 : klen;
        aofSegment g = {.id = 2 + size, .size = 1 + (uint64_t)size * 4096, .tier = (int)(size % 3),
                        .same_host = (int)(size & 1), .mounted_ms = (long long)size};
        g.name = (aofStr){key, nlen};
        g.owner = (aofStr){key, nlen};
        g.identity = (aofStr){key, klen > 128 ? 128 : klen};
        g.host = (aofStr){val, vlen > 256 ? 256 : vlen};
        g.nendpoints = (int)(size % (AOF_SEG_MAX_ENDPOINTS + 1));
        for (int i = 0; i < g.nendpoints; i++) g.endpoints[i] = (aofStr){val, vlen > 1024 ? 1024 : vlen};
        s = aofCatSegment(s, &g);
        aofPlaced pl = {.flags = DUMP_F_CHECKSUM | (size & 1 ? DUMP_F_HARDPIN : 0), .created_ms = (long long)size,
                        .value_len = 1 + size, .nreplicas = 1 + (int)(size % AOF_PLACED_MAX_REPLICAS)};
        pl.checksum = (aofStr){val, vlen > 1024 ? 1024 : vlen};
        for (int i = 0; i < pl.nreplicas; i++) {
            pl.segid[i] = g.id + (uint64_t)i;
            pl.offset[i] = (uint64_t)i * 4096;
        }
        s = aofCatPlaced(s, key, klen, (long long)size, &pl);
        s = aofCatSegmentGone(s, g.id);
        size_t len = sdslen(s);
        char *buf = malloc(len);
        memcpy(buf, s, len);
        size_t stop;
        int n;
        FUZZ_CHECK(readAll(buf, len, 0, &stop, &n) == AOF_REC_END && n == 6);
        {
            /* What was written reads back field for field. */
            aofRecord r2;
            size_t off2 = 0, nx;
            char w2[128];
            for (int i = 0; i < 3; i++) {
                FUZZ_CHECK(aofNextRecord(buf, len, off2, MAX_RECORD, &r2, &nx, w2, sizeof(w2)) == AOF_REC_OK);
                off2 = nx;
            }
            FUZZ_CHECK(aofNextRecord(buf, len, off2, MAX_RECORD, &r2, &nx, w2, sizeof(w2)) == AOF_REC_OK);
            FUZZ_CHECK(r2.type == AOF_REC_SEGMENT && r2.seg.id == g.id && r2.seg.size == g.size &&
                       r2.seg.tier == g.tier && r2.seg.same_host == g.same_host && r2.seg.nendpoints == g.nendpoints &&
                       r2.seg.name.len == nlen && !memcmp(r2.seg.name.p, key, nlen) && r2.seg.tenant.p == NULL);
            off2 = nx;
            FUZZ_CHECK(aofNextRecord(buf, len, off2, MAX_RECORD, &r2, &nx, w2, sizeof(w2)) == AOF_REC_OK);
            FUZZ_CHECK(r2.type == AOF_REC_PLACED && r2.placed.nreplicas == pl.nreplicas &&
                       r2.placed.value_len == pl.value_len && r2.placed.flags == pl.flags &&
                       !memcmp(r2.placed.offset, pl.offset, sizeof(pl.offset)) && r2.expire_ms == (long long)size);
            off2 = nx;
            FUZZ_CHECK(aofNextRecord(buf, len, off2, MAX_RECORD, &r2, &nx, w2, sizeof(w2)) == AOF_REC_OK);
            FUZZ_CHECK(r2.type == AOF_REC_SEGMENT_GONE && r2.segid == g.id);
        }
        aofRecord rec;
        size_t next;
        char why[128];
        FUZZ_CHECK(aofNextRecord(buf, len, 0, MAX_RECORD, &rec, &next, why, sizeof(why)) == AOF_REC_OK);
        FUZZ_CHECK(rec.type == AOF_REC_RESTORE && rec.keylen == klen && !memcmp(rec.key, key, klen));
        FUZZ_CHECK(rec.expire_ms == (long long)size * 1000);
        /* Every cut inside the log reads as a cut tail, never as damage. */
        size_t cut = (size_t)data[0] % len;
        int r = readAll(buf, cut, 0, &stop, &n);
        FUZZ_CHECK(r == AOF_REC_END || r == AOF_REC_TRUNCATED);
        free(buf);
        /* The same records as the log writes them (format 2): they read
         * back, every cut is a clean end or a cut tail, and a bit flipped
         * anywhere is never taken inside a record. */
        sds v2 = aofCheckRecords(sdscatlen(aofCatFileHeader(sdsempty()), s, sdslen(s)), AOF_FILE_HEADER_LEN);
        {
            sds w = aofCatFileHeader(sdsempty());
            size_t start = sdslen(w);
            w = aofCatRestoreHead(w, key, klen, (long long)size * 1000, plen + vlen + DUMP_TRAILER_LEN);
            uint64_t head_crc = aofRestoreHeadChecked(w, start);
            w = sdscatlen(w, prefix, plen);
            w = sdscatlen(w, val, vlen);
            w = aofCatRestoreEnd(w, trailer, 1, head_crc);
            start = sdslen(w);
            w = aofCheckRecord(aofCatDel(w, key, klen), start);
            start = sdslen(w);
            w = aofCheckRecord(aofCatFlushall(w), start);
            start = sdslen(w);
            w = aofCheckRecord(aofCatSegment(w, &g), start);
            start = sdslen(w);
            w = aofCheckRecord(aofCatPlaced(w, key, klen, (long long)size, &pl), start);
            start = sdslen(w);
            w = aofCheckRecord(aofCatSegmentGone(w, g.id), start);
            FUZZ_CHECK(sdslen(w) == sdslen(v2) && !memcmp(w, v2, sdslen(w)));
            sdsfree(w);
        }
        v2 = aofCatGroup(aofCatGroup(v2, 1), 0); /* an (empty) MULTI ... EXEC group */
        len = sdslen(v2);
        buf = malloc(len);
        memcpy(buf, v2, len);
        FUZZ_CHECK(readAll(buf, len, 1, &stop, &n) == AOF_REC_END && n == 8);
        cut = (size_t)data[0] * 131 % len;
        r = readAll(buf, cut, 1, &stop, &n);
        /* Or damage, when the cut record's bytes hold a whole checked
         * record (a value that is itself a log record): the reader cannot
         * tell that from a damaged length, and refuses -- the safe side. */
        FUZZ_CHECK(r == AOF_REC_END || r == AOF_REC_TRUNCATED ||
                   (r == AOF_REC_CORRUPT && strstr(lastWhy, "run past whole records")));
        size_t at = (size_t)(size * 7919 + data[size - 1]) % len;
        buf[at] ^= (char)(1 << (data[0] % 8));
        r = readAll(buf, len, 1, &stop, &n);
        FUZZ_CHECK(r == AOF_REC_CORRUPT || (r == AOF_REC_TRUNCATED && stop <= at));
        FUZZ_CHECK(r != AOF_REC_CORRUPT || stop <= at);
        free(buf);
        sdsfree(v2);
        sdsfree(s);
    }
    return 0;
}
