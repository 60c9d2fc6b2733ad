/* dump.h -- the DUMP/RESTORE payload: encoding and checked parsing.
 *
 * A payload is
 *
 *     <body> <format version: 2 bytes LE> <CRC64/Jones of body+version: 8 bytes LE>
 *
 * the trailer Redis uses, so a payload damaged in transit is refused by
 * the same test. The body is our own (nobody parses it but RESTORE):
 *
 *     STRING   u8 type=0, u64 LE value length, value bytes
 *     OBJECT   u8 type=1, u8 flags, i64 LE created ms, i64 LE soft pin ms left,
 *              [u32 LE checksum length, checksum bytes  -- if DUMP_F_CHECKSUM]
 *              u64 LE value length, value bytes
 *
 * See dump.c for why it is shaped so. No server globals here: the parser is
 * fuzzed (tests/fuzz/fuzz_dump.c) and unit-tested on its own.
 */
#ifndef DUMP_H
#define DUMP_H

#include <stddef.h>
#include <stdint.h>

#include "sds.h"

/* Bytes 'M' 'C' on the wire: above every RDB version a Redis or Valkey
 * accepts, so our payload given to one of them is refused as "version or
 * checksum are wrong" instead of being misread as an RDB string. */
#define DUMP_VERSION 0x434D
#define DUMP_TRAILER_LEN 10

enum { DUMP_TYPE_STRING = 0, DUMP_TYPE_OBJECT = 1 };
#define DUMP_F_HARDPIN (1 << 0)
#define DUMP_F_CHECKSUM (1 << 1)
#define DUMP_F_KNOWN (DUMP_F_HARDPIN | DUMP_F_CHECKSUM)

/* dumpParse results, with the error texts Redis gives for each. */
#define DUMP_OK 0
#define DUMP_ERR_CHECKSUM -1 /* too short, other version, or CRC mismatch */
#define DUMP_ERR_FORMAT -2   /* the CRC holds but the body does not parse */
#define DUMP_ERR_CHECKSUM_MSG "ERR DUMP payload version or checksum are wrong"
#define DUMP_ERR_FORMAT_MSG "ERR Bad data format"

/* What a payload says about one value. Encoding reads every field except
 * `value`; parsing fills all of them, pointers into the payload. */
typedef struct dumpInfo {
    int type;               /* DUMP_TYPE_* */
    unsigned flags;         /* DUMP_F_*, OBJECT only */
    long long created_ms;   /* OBJECT: the put's start, 0 unknown */
    long long softpin_ms;   /* OBJECT: soft pin time left, 0 none */
    const char *checksum;   /* DUMP_F_CHECKSUM: the PUT.END checksum */
    size_t checksum_len;
    const char *value;
    uint64_t value_len;
} dumpInfo;

/* Encoding in pieces, so a large value can be sent from where it lies:
 * prefix (everything before the value), the value, then the trailer made
 * from the CRC64 of prefix and value (crc64(crc64(0, prefix), value)). */
size_t dumpPrefixLen(const dumpInfo *d);
void dumpWritePrefix(const dumpInfo *d, unsigned char *dst); /* dumpPrefixLen(d) bytes */
void dumpWriteTrailer(uint64_t body_crc, unsigned char *dst); /* DUMP_TRAILER_LEN bytes */
/* The whole payload, d->value copied: for small values and tests. */
sds dumpCreate(const dumpInfo *d);

/* Checks version, CRC and structure of len bytes at p; on DUMP_OK fills d
 * (d->value and d->checksum point into p). Any other result leaves d
 * unspecified. Safe on arbitrary bytes. */
int dumpParse(const char *p, size_t len, dumpInfo *d);

/* In pieces, for a payload whose value is read elsewhere (the replica's
 * in-place reads): the fields before the value -- DUMP_MORE while avail
 * ends inside them -- and then the trailer, given the CRC64 of everything
 * before it (prefix and value). */
#define DUMP_MORE 1
int dumpParsePrefix(const char *p, size_t avail, dumpInfo *d, size_t *prefix_len);
int dumpTrailerCheck(uint64_t body_crc, const unsigned char *trailer);

#endif
