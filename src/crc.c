/* crc.c -- CRC16/XMODEM for cluster slots, CRC64/Jones for DUMP payloads.
 *
 * Tables are computed once from the polynomial (a few microseconds) rather
 * than carried as 2 KiB of literals: the polynomial is the specification
 * and the code shows it. Initialisation is idempotent and thread-safe
 * (pthread_once), since libmooncake and the server both hash keys.
 */
#include "crc.h"

#include <pthread.h>
#include <string.h>

/* crc16tab[k][b]: byte b followed by k zero bytes, for 4 bytes a step:
 * the slot of every keyed command is hashed on the hot path. */
static uint16_t crc16tab[4][256];
/* crc64tab[k][b]: the CRC of byte b followed by k zero bytes, so eight
 * bytes are folded with eight lookups and no dependency between them
 * ("slicing by 8"): ~4x the byte-at-a-time speed, which MIGRATE of large
 * values pays twice (source and target). */
static uint64_t crc64tab[8][256];
static pthread_once_t crcOnce = PTHREAD_ONCE_INIT;

static void crcInitTables(void) {
    for (unsigned i = 0; i < 256; i++) {
        /* CRC16/XMODEM: MSB first. */
        uint16_t c = (uint16_t)(i << 8);
        for (int b = 0; b < 8; b++) c = (uint16_t)((c & 0x8000) ? (c << 1) ^ 0x1021 : (c << 1));
        crc16tab[0][i] = c;
        /* CRC64/Jones: reflected, LSB first. */
        uint64_t d = i;
        for (int b = 0; b < 8; b++) d = (d & 1) ? (d >> 1) ^ 0x95ac9329ac4bc9b5ULL : (d >> 1);
        crc64tab[0][i] = d;
    }
    for (unsigned i = 0; i < 256; i++)
        for (int k = 1; k < 4; k++)
            crc16tab[k][i] = (uint16_t)((crc16tab[k - 1][i] << 8) ^ crc16tab[0][crc16tab[k - 1][i] >> 8]);
    for (unsigned i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            crc64tab[k][i] = (crc64tab[k - 1][i] >> 8) ^ crc64tab[0][crc64tab[k - 1][i] & 0xff];
}

uint16_t crc16(const char *buf, size_t len) {
    pthread_once(&crcOnce, crcInitTables);
    const unsigned char *p = (const unsigned char *)buf;
    uint16_t crc = 0;
    while (len >= 4) {
        crc = (uint16_t)(crc16tab[3][(crc >> 8) ^ p[0]] ^ crc16tab[2][(crc & 0xff) ^ p[1]] ^ crc16tab[1][p[2]] ^
                         crc16tab[0][p[3]]);
        p += 4;
        len -= 4;
    }
    while (len--) crc = (uint16_t)((crc << 8) ^ crc16tab[0][((crc >> 8) ^ *p++) & 0xff]);
    return crc;
}

uint64_t crc64(uint64_t crc, const unsigned char *buf, size_t len) {
    pthread_once(&crcOnce, crcInitTables);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, buf, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        crc ^= w;
        crc = crc64tab[7][crc & 0xff] ^ crc64tab[6][(crc >> 8) & 0xff] ^ crc64tab[5][(crc >> 16) & 0xff] ^
              crc64tab[4][(crc >> 24) & 0xff] ^ crc64tab[3][(crc >> 32) & 0xff] ^
              crc64tab[2][(crc >> 40) & 0xff] ^ crc64tab[1][(crc >> 48) & 0xff] ^ crc64tab[0][crc >> 56];
        buf += 8;
        len -= 8;
    }
    for (size_t i = 0; i < len; i++) crc = crc64tab[0][(crc ^ buf[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

unsigned int keyHashSlot(const char *key, size_t keylen) {
    size_t s, e;
    for (s = 0; s < keylen; s++)
        if (key[s] == '{') break;
    if (s == keylen) return crc16(key, keylen) & (CLUSTER_SLOTS - 1);
    for (e = s + 1; e < keylen; e++)
        if (key[e] == '}') break;
    /* No closing brace, or "{}": the whole key is hashed. */
    if (e == keylen || e == s + 1) return crc16(key, keylen) & (CLUSTER_SLOTS - 1);
    return crc16(key + s + 1, e - s - 1) & (CLUSTER_SLOTS - 1);
}
