/* dump.c -- the DUMP/RESTORE payload (layout in dump.h).
 *
 * Why our own body and not RDB. A value here is one byte string plus, for
 * objects made by PUT.START/PUT.END, a little metadata that has to survive
 * a move between servers (the writer's checksum, pins, the creation time);
 * RDB has no place for that, and no client parses DUMP output: redis-cli
 * and MIGRATE pass it through to RESTORE untouched. The trailer is Redis's
 * (2-byte version, CRC64/Jones over everything before it), so damage in
 * transit is caught by the same test, and the version is chosen so that a
 * real Redis refuses our payloads instead of misreading them (dump.h).
 *
 * Why in pieces. MIGRATE sends values of tens of MiB; copying one into a
 * heap buffer just to frame it costs as much as sending it. So the encoder
 * exposes the prefix (type and metadata, a few dozen bytes) and the
 * trailer separately, the caller sends the value from segment memory in
 * between, and the CRC is chained over the pieces: CRC64 is a running
 * function, crc64(crc64(0, a), b) == crc64(0, a b).
 *
 * Why the parser is strict. RESTORE's payload comes off the wire, from
 * anyone who can connect. The CRC is checked first (cheap insurance against
 * accidents, not an authenticator: anyone can compute one), then every
 * length and count is checked against the bytes that remain before it is
 * used, and the value must end exactly where the body ends: trailing bytes,
 * unknown types and unknown flag bits are all "Bad data format". Refusing
 * unknown flags is deliberate: a newer server's payload whose metadata this
 * one does not understand is refused rather than restored without it.
 * Nothing is allocated while parsing, so a refusal has nothing to undo.
 */
#include "dump.h"

#include <string.h>

#include "crc.h"

#define OBJ_FIXED (1 + 1 + 8 + 8) /* type, flags, created, soft pin */

static void put16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

size_t dumpPrefixLen(const dumpInfo *d) {
    if (d->type == DUMP_TYPE_STRING) return 1 + 8;
    size_t n = OBJ_FIXED + 8;
    if (d->flags & DUMP_F_CHECKSUM) n += 4 + d->checksum_len;
    return n;
}

void dumpWritePrefix(const dumpInfo *d, unsigned char *dst) {
    unsigned char *p = dst;
    *p++ = (unsigned char)d->type;
    if (d->type == DUMP_TYPE_OBJECT) {
        *p++ = (unsigned char)d->flags;
        put64(p, (uint64_t)d->created_ms);
        put64(p + 8, (uint64_t)d->softpin_ms);
        p += 16;
        if (d->flags & DUMP_F_CHECKSUM) {
            put32(p, (uint32_t)d->checksum_len);
            if (d->checksum_len) memcpy(p + 4, d->checksum, d->checksum_len);
            p += 4 + d->checksum_len;
        }
    }
    put64(p, d->value_len);
}

void dumpWriteTrailer(uint64_t body_crc, unsigned char *dst) {
    put16(dst, DUMP_VERSION);
    put64(dst + 2, crc64(body_crc, dst, 2));
}

sds dumpCreate(const dumpInfo *d) {
    size_t plen = dumpPrefixLen(d);
    sds s = sdsnewlen(NULL, plen + d->value_len + DUMP_TRAILER_LEN);
    unsigned char *p = (unsigned char *)s;
    dumpWritePrefix(d, p);
    if (d->value_len) memcpy(p + plen, d->value, d->value_len);
    dumpWriteTrailer(crc64(0, p, plen + d->value_len), p + plen + d->value_len);
    return s;
}

/* The body's fields before the value, at p[0..avail): DUMP_OK with d filled
 * (d->value NULL) and *prefix_len the bytes they take; DUMP_MORE if avail
 * ends inside them; DUMP_ERR_FORMAT if they are no body. Shared by
 * dumpParse and by a reader that has the prefix long before the value (a
 * replica reading a large value straight into the pool). */
int dumpParsePrefix(const char *payload, size_t avail, dumpInfo *d, size_t *prefix_len) {
    const unsigned char *p = (const unsigned char *)payload;
    size_t left = avail;
    memset(d, 0, sizeof(*d));
    if (left < 1) return DUMP_MORE;
    d->type = *p++;
    left--;
    if (d->type == DUMP_TYPE_OBJECT) {
        if (left < OBJ_FIXED - 1) return DUMP_MORE;
        d->flags = *p;
        d->created_ms = (long long)get64(p + 1);
        d->softpin_ms = (long long)get64(p + 9);
        p += OBJ_FIXED - 1;
        left -= OBJ_FIXED - 1;
        if (d->flags & ~(unsigned)DUMP_F_KNOWN) return DUMP_ERR_FORMAT;
        if (d->created_ms < 0 || d->softpin_ms < 0) return DUMP_ERR_FORMAT;
        if (d->flags & DUMP_F_CHECKSUM) {
            if (left < 4) return DUMP_MORE;
            uint32_t clen = get32(p);
            p += 4;
            left -= 4;
            if (clen > left) return DUMP_MORE;
            d->checksum = (const char *)p;
            d->checksum_len = clen;
            p += clen;
            left -= clen;
        }
    } else if (d->type != DUMP_TYPE_STRING) {
        return DUMP_ERR_FORMAT;
    }
    if (left < 8) return DUMP_MORE;
    d->value_len = get64(p);
    *prefix_len = avail - left + 8;
    return DUMP_OK;
}

int dumpParse(const char *payload, size_t len, dumpInfo *d) {
    const unsigned char *p = (const unsigned char *)payload;
    if (len < DUMP_TRAILER_LEN) return DUMP_ERR_CHECKSUM;
    size_t body = len - DUMP_TRAILER_LEN;
    if (get16(p + body) != DUMP_VERSION) return DUMP_ERR_CHECKSUM;
    if (crc64(0, p, body + 2) != get64(p + body + 2)) return DUMP_ERR_CHECKSUM;
    /* The CRC holds: a prefix that runs past the body is bad format. */
    size_t plen;
    if (dumpParsePrefix(payload, body, d, &plen) != DUMP_OK) return DUMP_ERR_FORMAT;
    /* Exactly the rest: neither more than is there nor trailing bytes. */
    if (d->value_len != (uint64_t)(body - plen)) return DUMP_ERR_FORMAT;
    d->value = payload + plen;
    return DUMP_OK;
}

int dumpTrailerCheck(uint64_t body_crc, const unsigned char *trailer) {
    if (get16(trailer) != DUMP_VERSION) return DUMP_ERR_CHECKSUM;
    return crc64(body_crc, trailer, 2) == get64(trailer + 2) ? DUMP_OK : DUMP_ERR_CHECKSUM;
}
