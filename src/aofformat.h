/* aofformat.h -- the append-only log's files, read and checked: records and
 * the manifest. Pure (no server globals), so the server's loader (aof.c),
 * the repair tool (mooncake-check-aof) and the fuzz target read them with
 * the same code. See aofformat.c for the format and why it is shaped so. */
#ifndef AOFFORMAT_H
#define AOFFORMAT_H

#include <stddef.h>

#include "dump.h"
#include "sds.h"

/* ---- records ------------------------------------------------------------ */

enum {
    AOF_REC_RESTORE = 1, /* the key now holds the payload's value (and expiry) */
    AOF_REC_DEL,         /* the key is gone */
    AOF_REC_FLUSHALL,    /* every key is gone */
    AOF_REC_SEGMENT,     /* a client segment whose objects may be re-attached (aofSegment) */
    AOF_REC_SEGMENT_GONE,/* that segment went: objects there are gone */
    AOF_REC_PLACED,      /* the key is an object whose bytes live in client segments (aofPlaced) */
    AOF_REC_MULTI,       /* format 2: the records up to EXEC are one event loop iteration's: all or none */
    AOF_REC_EXEC
};

/* A string field of a record's payload: p NULL when absent. Points into
 * the buffer read. */
typedef struct aofStr {
    const char *p;
    size_t len;
} aofStr;

/* SEGMENT's payload: what a MOUNT said of a client segment, and the hash of
 * the identity its host proved the memory by (t_segment.c). */
#define AOF_SEG_MAX_ENDPOINTS 16
typedef struct aofSegment {
    uint64_t id, size, base;
    int tier;
    int same_host;             /* mounted from the server's machine (owner.c's probes) */
    long long mounted_ms;
    aofStr name, owner, tenant, host, rkey, identity, peer_ip;
    int nendpoints;
    aofStr endpoints[AOF_SEG_MAX_ENDPOINTS];
} aofSegment;

/* PLACED's payload: a store object's metadata and where its replicas lie
 * (segment id and offset each; the size is value_len). */
#define AOF_PLACED_MAX_REPLICAS 8
typedef struct aofPlaced {
    unsigned flags;            /* DUMP_F_HARDPIN, DUMP_F_CHECKSUM */
    long long created_ms;      /* the put's start, unix ms */
    long long softpin_until_ms;/* unix ms, 0: none */
    aofStr checksum;           /* DUMP_F_CHECKSUM */
    uint64_t value_len;
    int nreplicas;
    uint64_t segid[AOF_PLACED_MAX_REPLICAS], offset[AOF_PLACED_MAX_REPLICAS];
} aofPlaced;

/* aofNextRecord results. */
#define AOF_REC_OK 0
#define AOF_REC_END 1       /* no bytes left: the file ends between records */
#define AOF_REC_TRUNCATED 2 /* the file ends inside a record (a cut tail) */
#define AOF_REC_CORRUPT 3   /* bytes that are no record (a damaged file) */

typedef struct aofRecord {
    int type;               /* AOF_REC_* */
    const char *key;        /* RESTORE, DEL: points into the buffer */
    size_t keylen;
    long long expire_ms;    /* RESTORE: absolute unix ms, 0 = none */
    const char *payload;    /* RESTORE: a DUMP payload whose CRC64 was checked */
    size_t payload_len;
    dumpInfo dump;          /* RESTORE: the payload parsed (pointers into it): a
                             * second dumpParse would checksum it again */
    uint64_t segid;         /* SEGMENT_GONE */
    aofSegment seg;         /* SEGMENT, checked */
    aofPlaced placed;       /* PLACED (with key and expire_ms), checked */
} aofRecord;

/* Reads the record at buf[off..len). AOF_REC_OK: *rec is filled and *next
 * is the offset after it. AOF_REC_TRUNCATED / AOF_REC_CORRUPT: why says
 * what was found at off. Safe on arbitrary bytes; a record is never longer
 * than max_record (the caller's bound on one value). */
int aofNextRecord(const char *buf, size_t len, size_t off, size_t max_record, aofRecord *rec, size_t *next,
                  char *why, size_t whylen);

/* What aofCatRestoreTail appends. */
#define AOF_RESTORE_TAIL "\r\n$6\r\nABSTTL\r\n$7\r\nREPLACE\r\n"
#define AOF_RESTORE_TAIL_LEN (sizeof(AOF_RESTORE_TAIL) - 1)

/* A RESTORE record read in two pieces, for a reader that puts a large value
 * elsewhere than after its head (a replica reads it straight into the
 * pool, replication_replica.c): the head, up to the value's first byte,
 * then -- once the value is in place -- the AOF_VALUE_TAIL_LEN bytes after
 * it. Together they check what aofNextRecord checks of the record. */
#define AOF_REC_OTHER 4 /* aofReadRestoreHead: the record is not a RESTORE */
typedef struct aofRestoreHead {
    const char *key;        /* points into the buffer read */
    size_t keylen;
    long long expire_ms;    /* absolute unix ms, 0 = none */
    dumpInfo dump;          /* the payload's fields before the value (value NULL) */
    size_t head_len;        /* bytes from the record's start to the value */
    size_t prefix_len;      /* of them, the payload's (its CRC64 runs from there) */
    size_t total_len;       /* the whole record: head, value, AOF_VALUE_TAIL_LEN */
} aofRestoreHead;
int aofReadRestoreHead(const char *buf, size_t len, aofRestoreHead *h, char *why, size_t whylen);
/* The bytes after the value: the payload's trailer (version and CRC64;
 * body_crc is the CRC64 of the prefix and the value) and ABSTTL REPLACE. */
#define AOF_VALUE_TAIL_LEN (DUMP_TRAILER_LEN + AOF_RESTORE_TAIL_LEN)
int aofCheckRestoreTail(const char *buf, size_t len, uint64_t body_crc, char *why, size_t whylen);

/* ---- format 2: every record checked ---------------------------------------
 *
 * A log file of format 2 starts with AOF_FILE_HEADER, and each record has
 * one more part, last: its check (aofformat.c says what it covers). A file
 * without the header is of format 1, as builds before wrote it: read as
 * then, with no check of keys and expiries. The replication stream's
 * records stay of format 1 (a replica of an older build reads them). */
#define AOF_FORMAT_VERSION 2
#define AOF_FILE_HEADER "*2\r\n$10\r\nAOF.FORMAT\r\n$1\r\n2\r\n"
#define AOF_FILE_HEADER_LEN (sizeof(AOF_FILE_HEADER) - 1)

/* The file's format from its first bytes: *version, and *start, where its
 * records begin. AOF_REC_OK; AOF_REC_TRUNCATED (it ends inside the header);
 * AOF_REC_CORRUPT (a header of another version, or a damaged one: why). */
int aofFileFormat(const char *buf, size_t len, int *version, size_t *start, char *why, size_t whylen);
/* aofNextRecord for a file of that format. Under format 2 a record cut by
 * the end of the file is AOF_REC_TRUNCATED only when no checked record
 * follows its start: a length damaged to run past the end is corruption. */
int aofNextLogRecord(const char *buf, size_t len, size_t off, size_t max_record, int version, aofRecord *rec,
                     size_t *next, char *why, size_t whylen);

/* Writing format 2. aofCheckRecords turns the whole records in s[from..)
 * (as aofCat* wrote them) into checked ones. A RESTORE written in pieces:
 * aofRestoreHeadChecked after aofCatRestoreHead (it counts the check in
 * and returns the CRC64 so far), then, after the payload's body,
 * aofCatRestoreEnd with the payload's trailer (checked 0: format 1). */
sds aofCatFileHeader(sds s);
sds aofCatCheck(sds s, uint64_t crc);
sds aofCheckRecords(sds s, size_t from);
/* The one record just written at s[start..) checked in place: no parse, no copy (the
 * writer's single records -- DEL, PLACED, FLUSHALL, SEGMENT, SEGMENT.GONE). */
sds aofCheckRecord(sds s, size_t start);
/* MULTI (begin) or EXEC, checked: around the records of one event loop
 * iteration, which a load applies all or none of (aof.c). */
sds aofCatGroup(sds s, int begin);
const char *aofGroupRecord(int begin, size_t *len); /* MULTI (begin) or EXEC, checked */
uint64_t aofRestoreHeadChecked(sds s, size_t start);
sds aofCatRestoreEnd(sds s, const unsigned char *trailer, int checked, uint64_t head_crc);

/* Records that set a key, counted from their headers only (sizing). */
size_t aofSkimKeyRecords(const char *buf, size_t len);

/* Appends one record, in the RESP the server writes, to s. The RESTORE form
 * is written in three pieces so a large value goes from where it lies:
 * head (command, key, expiry, the payload's length), the payload bytes
 * (dumpWritePrefix + value + dumpWriteTrailer), then the tail. */
sds aofCatDel(sds s, const char *key, size_t keylen);
sds aofCatFlushall(sds s);
sds aofCatRestoreHead(sds s, const char *key, size_t keylen, long long expire_ms, size_t payload_len);
sds aofCatRestoreTail(sds s);
sds aofCatSegment(sds s, const aofSegment *g);
sds aofCatSegmentGone(sds s, uint64_t id);
sds aofCatPlaced(sds s, const char *key, size_t keylen, long long expire_ms, const aofPlaced *p);

/* ---- the manifest -------------------------------------------------------- */

/* Which files make up the log, in order: at most one base (the dataset at
 * a rewrite), then the increments written since. */
#define AOF_MANIFEST_MAX_FILES 1024
#define AOF_FILE_NAME_MAX 255

typedef struct aofManifestFile {
    char name[AOF_FILE_NAME_MAX + 1];
    long long seq;
    char type; /* 'b' base, 'i' increment, 'h' history (to delete) */
} aofManifestFile;

typedef struct aofManifest {
    aofManifestFile files[AOF_MANIFEST_MAX_FILES];
    int nfiles;
} aofManifest;

/* Parses a manifest's text; on error why says which line and what. The
 * names are checked (no path separators, no dot files), the sequence
 * numbers positive and, per type, increasing; at most one base, first. */
int aofManifestParse(const char *text, size_t len, aofManifest *m, char *why, size_t whylen);
sds aofManifestFormat(const aofManifest *m);

#endif
