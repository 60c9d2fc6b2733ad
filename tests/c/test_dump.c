/* test_dump.c -- the DUMP payload (src/dump.c): the exact bytes the encoder
 * lays out (dump.h documents them, and tests/unit/migrate.tcl builds them by
 * hand too), the pieces MIGRATE sends agreeing with the whole, and the
 * parser refusing every damaged or malformed payload with the right error:
 * each byte flipped, each length truncated, and structurally bad bodies
 * sealed with a valid CRC so the checks behind the CRC are reached. */
#include <stdint.h>
#include <string.h>

#include "crc.h"
#include "dump.h"
#include "sds.h"
#include "testhelp.h"

/* body + trailer, as a payload. */
static sds seal(const void *body, size_t len) {
    sds s = sdsnewlen(NULL, len + DUMP_TRAILER_LEN);
    memcpy(s, body, len);
    dumpWriteTrailer(crc64(0, (const unsigned char *)s, len), (unsigned char *)s + len);
    return s;
}

static int parse(sds p, dumpInfo *d) { return dumpParse(p, sdslen(p), d); }

int main(void) {
    dumpInfo d;
    TEST("dump: CRC64 is Jones, as Redis's") {
        CHECK(crc64(0, (const unsigned char *)"123456789", 9) == 0xe9c6d914c4b8d9caULL);
    }

    TEST("dump: a STRING payload's exact bytes") {
        dumpInfo in = {.type = DUMP_TYPE_STRING, .value = "bar", .value_len = 3};
        sds p = dumpCreate(&in);
        const unsigned char body[] = {0, 3, 0, 0, 0, 0, 0, 0, 0, 'b', 'a', 'r'};
        CHECK_EQ(sdslen(p), sizeof(body) + 10);
        CHECK(memcmp(p, body, sizeof(body)) == 0);
        CHECK((unsigned char)p[12] == 0x4D && (unsigned char)p[13] == 0x43); /* "MC" */
        uint64_t crc = 0;
        for (int i = 7; i >= 0; i--) crc = (crc << 8) | (unsigned char)p[14 + i];
        CHECK(crc == crc64(0, (const unsigned char *)p, 14));
        CHECK_EQ(parse(p, &d), DUMP_OK);
        CHECK_EQ(d.type, DUMP_TYPE_STRING);
        CHECK_EQ(d.value_len, 3);
        CHECK(d.value == p + 9);
        sdsfree(p);
    }

    TEST("dump: an OBJECT payload round-trips every field") {
        dumpInfo in = {.type = DUMP_TYPE_OBJECT, .flags = DUMP_F_HARDPIN | DUMP_F_CHECKSUM,
                       .created_ms = 1795578924271LL, .softpin_ms = 60000, .checksum = "crc32c:1a2b",
                       .checksum_len = 11, .value = "\0\r\nx", .value_len = 4};
        sds p = dumpCreate(&in);
        CHECK_EQ(sdslen(p), dumpPrefixLen(&in) + 4 + DUMP_TRAILER_LEN);
        CHECK_EQ(dumpPrefixLen(&in), 1 + 1 + 8 + 8 + 4 + 11 + 8);
        CHECK_EQ(parse(p, &d), DUMP_OK);
        CHECK_EQ(d.type, DUMP_TYPE_OBJECT);
        CHECK_EQ(d.flags, DUMP_F_HARDPIN | DUMP_F_CHECKSUM);
        CHECK_EQ(d.created_ms, 1795578924271LL);
        CHECK_EQ(d.softpin_ms, 60000);
        CHECK(d.checksum_len == 11 && memcmp(d.checksum, "crc32c:1a2b", 11) == 0);
        CHECK(d.value_len == 4 && memcmp(d.value, "\0\r\nx", 4) == 0);
        sdsfree(p);
        /* Without a checksum the field is absent, not empty. */
        dumpInfo nock = {.type = DUMP_TYPE_OBJECT, .flags = 0, .value = "v", .value_len = 1};
        CHECK_EQ(dumpPrefixLen(&nock), 1 + 1 + 8 + 8 + 8);
        p = dumpCreate(&nock);
        CHECK_EQ(parse(p, &d), DUMP_OK);
        CHECK(d.checksum == NULL && d.checksum_len == 0);
        sdsfree(p);
        /* An empty checksum is kept as one. */
        dumpInfo empty = {.type = DUMP_TYPE_OBJECT, .flags = DUMP_F_CHECKSUM, .checksum = "", .value = "", .value_len = 0};
        p = dumpCreate(&empty);
        CHECK_EQ(parse(p, &d), DUMP_OK);
        CHECK(d.flags == DUMP_F_CHECKSUM && d.checksum_len == 0 && d.value_len == 0);
        sdsfree(p);
    }

    TEST("dump: prefix + value + trailer in pieces equals the whole") {
        char value[5000];
        for (size_t i = 0; i < sizeof(value); i++) value[i] = (char)(i * 31);
        dumpInfo in = {.type = DUMP_TYPE_OBJECT, .flags = DUMP_F_CHECKSUM, .checksum = "abc", .checksum_len = 3,
                       .value = value, .value_len = sizeof(value)};
        sds whole = dumpCreate(&in);
        unsigned char prefix[64], trailer[DUMP_TRAILER_LEN];
        size_t plen = dumpPrefixLen(&in);
        dumpWritePrefix(&in, prefix);
        uint64_t crc = crc64(crc64(0, prefix, plen), (const unsigned char *)value, sizeof(value));
        dumpWriteTrailer(crc, trailer);
        CHECK(memcmp(whole, prefix, plen) == 0);
        CHECK(memcmp(whole + plen, value, sizeof(value)) == 0);
        CHECK(memcmp(whole + plen + sizeof(value), trailer, sizeof(trailer)) == 0);
        sdsfree(whole);
    }

    TEST("dump: any flipped byte or truncation is a checksum error") {
        dumpInfo in = {.type = DUMP_TYPE_OBJECT, .flags = DUMP_F_CHECKSUM | DUMP_F_HARDPIN, .checksum = "ck",
                       .checksum_len = 2, .created_ms = 5, .value = "hello world", .value_len = 11};
        sds p = dumpCreate(&in);
        int bad = 0;
        for (size_t i = 0; i < sdslen(p); i++) {
            for (int bit = 0; bit < 8; bit++) {
                p[i] ^= (char)(1 << bit);
                if (parse(p, &d) != DUMP_ERR_CHECKSUM) bad++;
                p[i] ^= (char)(1 << bit);
            }
        }
        CHECK_EQ(bad, 0);
        for (size_t n = 0; n < sdslen(p); n++)
            if (dumpParse(p, n, &d) != DUMP_ERR_CHECKSUM) bad++;
        CHECK_EQ(bad, 0);
        CHECK_EQ(parse(p, &d), DUMP_OK);
        sdsfree(p);
    }

    TEST("dump: another version is refused as a checksum error") {
        sds p = seal("\0\0\0\0\0\0\0\0\0", 9);
        CHECK_EQ(parse(p, &d), DUMP_OK);
        p[9] = 11; /* an RDB version, CRC recomputed */
        p[10] = 0;
        uint64_t crc = crc64(0, (const unsigned char *)p, 11);
        for (int i = 0; i < 8; i++) p[11 + i] = (char)(crc >> (8 * i));
        CHECK_EQ(parse(p, &d), DUMP_ERR_CHECKSUM);
        sdsfree(p);
    }

    TEST("dump: bad bodies with a valid CRC are bad data format") {
        struct {
            const char *what;
            const char *body;
            size_t len;
        } cases[] = {
            {"empty body", "", 0},
            {"type only", "\0", 1},
            {"unknown type", "\7\0\0\0\0\0\0\0\0", 9},
            {"length short", "\0\3\0\0\0\0\0\0", 8},
            {"length past the end", "\0\4\0\0\0\0\0\0\0abc", 12},
            {"length short of the end", "\0\2\0\0\0\0\0\0\0abc", 12},
            {"length 2^64-1", "\0\377\377\377\377\377\377\377\377abc", 12},
            {"object truncated", "\1\0\0\0\0\0\0\0\0\0", 10},
            {"unknown flag", "\1\4\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 26},
            {"negative created", "\1\0\0\0\0\0\0\0\0\200\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 26},
            {"negative pin", "\1\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\200\0\0\0\0\0\0\0\0", 26},
            {"checksum length missing", "\1\2\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 19},
            {"checksum past the end", "\1\2\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\377\377\377\377x", 23},
            {"checksum eats the length", "\1\2\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\4\0\0\0abcd\0\0\0", 29},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            sds p = seal(cases[i].body, cases[i].len);
            int rc = parse(p, &d);
            if (rc != DUMP_ERR_FORMAT) {
                fprintf(stderr, "  case '%s': %d\n", cases[i].what, rc);
                CHECK(rc == DUMP_ERR_FORMAT);
            }
            sdsfree(p);
        }
    }
    return testReport();
}
