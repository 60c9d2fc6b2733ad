/* test_crc.c -- CRC16 (cluster slots) and CRC64 (DUMP payloads).
 *
 * The slot function must agree with every Redis Cluster client, so it is
 * checked against published check values and Redis's documented examples;
 * the table-driven CRC64 (sliced by 8) and the carry-less fold of long
 * buffers against a bit-at-a-time reference written from the polynomial,
 * at every length and split. */
#include <stdint.h>
#include <string.h>

#include "crc.h"
#include "testhelp.h"

static uint64_t crc64Ref(uint64_t crc, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0x95ac9329ac4bc9b5ULL : crc >> 1;
    }
    return crc;
}

static uint16_t crc16Ref(const unsigned char *b, size_t n) {
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(b[i] << 8);
        for (int k = 0; k < 8; k++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int main(void) {
    unsigned char buf[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x = x * 1103515245 + 12345;
        buf[i] = (unsigned char)(x >> 16);
    }
    TEST("crc16: the XMODEM check value") {
        CHECK_EQ(crc16("123456789", 9), 0x31c3);
        CHECK_EQ(crc16("", 0), 0);
    }
    TEST("crc16: equals the bitwise reference at every length") {
        for (size_t n = 0; n < 300; n++) CHECK_EQ(crc16((const char *)buf + n, n), crc16Ref(buf + n, n));
    }
    TEST("crc64: Redis's check value (Jones)") {
        CHECK_EQ(crc64(0, (const unsigned char *)"123456789", 9), 0xe9c6d914c4b8d9caULL);
    }
    TEST("crc64: sliced by 8 equals the bitwise reference at every length, offset and seed") {
        for (size_t n = 0; n < 200; n++)
            for (size_t off = 0; off < 9; off++) CHECK_EQ(crc64(n, buf + off, n), crc64Ref(n, buf + off, n));
        CHECK_EQ(crc64(0, buf, sizeof(buf)), crc64Ref(0, buf, sizeof(buf)));
    }
    TEST("crc64: the carry-less fold (long buffers) equals the sliced loop and the reference at every length, offset and seed") {
        /* Lengths across the fold's threshold (256), its 64-byte main
         * loop, its 16-byte tail loop and the bytes left after it. */
        int bad = 0;
        for (size_t n = 200; n < 1200 && bad < 5; n++)
            for (size_t off = 0; off < 17; off += 3) {
                uint64_t seed = n * 0x9e3779b97f4a7c15ULL;
                uint64_t want = crc64Sliced8(seed, buf + off, n);
                if (crc64(seed, buf + off, n) != want) bad++;
                if (n % 97 == 0 && crc64Ref(seed, buf + off, n) != want) bad++;
            }
        CHECK_EQ(bad, 0);
        CHECK_EQ(crc64(0, buf, sizeof(buf)), crc64Ref(0, buf, sizeof(buf)));
        CHECK_EQ(crc64(7, buf + 1, sizeof(buf) - 1), crc64Ref(7, buf + 1, sizeof(buf) - 1));
    }
    TEST("crc64: pieces chain to the whole") {
        for (size_t cut = 0; cut <= 100; cut += 7)
            CHECK_EQ(crc64(crc64(0, buf, cut), buf + cut, 1000 - cut), crc64(0, buf, 1000));
    }
    TEST("keyHashSlot: Redis's examples and hash tags") {
        CHECK_EQ(keyHashSlot("foo", 3), 12182);
        CHECK_EQ(keyHashSlot("123456789", 9), 0x31c3 & 16383);
        /* Only the tag is hashed: these share a slot, the tag's. */
        CHECK_EQ(keyHashSlot("{user1000}.following", 20), keyHashSlot("user1000", 8));
        CHECK_EQ(keyHashSlot("{user1000}.followers", 20), keyHashSlot("user1000", 8));
        /* The first { and the next }: "foo{{bar}}zap" hashes "{bar". */
        CHECK_EQ(keyHashSlot("foo{{bar}}zap", 13), keyHashSlot("{bar", 4));
        CHECK_EQ(keyHashSlot("foo{bar}{zap}", 13), keyHashSlot("bar", 3));
        /* An empty tag or no closing brace: the whole key. */
        CHECK_EQ(keyHashSlot("foo{}{bar}", 10), crc16("foo{}{bar}", 10) & 16383);
        CHECK_EQ(keyHashSlot("foo{bar", 7), crc16("foo{bar", 7) & 16383);
        CHECK_EQ(keyHashSlot("", 0), 0);
        for (size_t n = 0; n < 64; n++) CHECK(keyHashSlot((const char *)buf, n) < 16384);
    }
    return testReport();
}
