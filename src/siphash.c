/* siphash.c -- SipHash, written from the definition in Aumasson and
 * Bernstein, "SipHash: a fast short-input PRF" (2012).
 *
 * Why SipHash: dict keys come from clients. With a weak or unkeyed hash an
 * attacker can send keys that all land in one bucket and turn every lookup
 * into a list walk (hash flooding). SipHash is a keyed PRF, so with a random
 * per-process key the bucket of a key cannot be predicted from outside.
 *
 * The algorithm, as the paper defines it for SipHash-c-d:
 *   - state v0..v3 is the 128-bit key k0||k1 xored with the four constants
 *     spelling "somepseudorandomlygeneratedbytes";
 *   - the message is cut into little-endian 64-bit words; the last word holds
 *     the 0..7 leftover bytes and, in its top byte, the length mod 256;
 *   - each word m is absorbed as v3 ^= m, c SipRounds, v0 ^= m;
 *   - finalisation is v2 ^= 0xff, d SipRounds, output v0^v1^v2^v3.
 *
 * The dict uses c=1, d=2 (SipHash-1-2): still keyed and unpredictable, and
 * about twice as fast on the short keys a keyspace holds. SipHash-2-4 is
 * provided too; the unit test checks it against the paper's vectors, which
 * also exercises every line shared with 1-2.
 *
 * Words are assembled byte by byte: the input has no alignment guarantee,
 * and compilers turn the shifts into one load on little-endian machines.
 */
#include <stdint.h>
#include <stddef.h>

#include "dict.h"

#define ROTL64(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND(v0, v1, v2, v3) do {                              \
    v0 += v1; v1 = ROTL64(v1, 13); v1 ^= v0; v0 = ROTL64(v0, 32);  \
    v2 += v3; v3 = ROTL64(v3, 16); v3 ^= v2;                       \
    v0 += v3; v3 = ROTL64(v3, 21); v3 ^= v0;                       \
    v2 += v1; v1 = ROTL64(v1, 17); v1 ^= v2; v2 = ROTL64(v2, 32);  \
} while (0)

static inline uint64_t load64le(const uint8_t *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) |
           ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24) |
           ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) |
           ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

/* ASCII-only lower case: hashing must not depend on the locale, or two
 * processes (or one process after setlocale) would disagree. */
static inline uint8_t lower(uint8_t c) {
    return (c >= 'A' && c <= 'Z') ? (uint8_t)(c + ('a' - 'A')) : c;
}

static inline uint64_t load64le_nocase(const uint8_t *p) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--) w = (w << 8) | lower(p[i]);
    return w;
}

/* One body for every variant; `crounds`, `drounds` and `nocase` are
 * constants at each call site, so the compiler emits a specialised copy. */
static inline uint64_t siphashGeneric(const uint8_t *in, size_t len,
                                      const uint8_t k[16], int crounds,
                                      int drounds, int nocase) {
    uint64_t k0 = load64le(k), k1 = load64le(k + 8);
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL;   /* "somepseu" */
    uint64_t v1 = k1 ^ 0x646f72616e646f6dULL;   /* "dorandom" */
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL;   /* "lygenera" */
    uint64_t v3 = k1 ^ 0x7465646279746573ULL;   /* "tedbytes" */
    const uint8_t *end = in + (len & ~(size_t)7);
    uint64_t m;

    for (; in != end; in += 8) {
        m = nocase ? load64le_nocase(in) : load64le(in);
        v3 ^= m;
        for (int i = 0; i < crounds; i++) SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }

    /* Last word: leftover bytes in the low end, length mod 256 on top. */
    m = (uint64_t)len << 56;
    for (int i = (int)(len & 7) - 1; i >= 0; i--) {
        uint8_t c = nocase ? lower(in[i]) : in[i];
        m |= (uint64_t)c << (8 * i);
    }
    v3 ^= m;
    for (int i = 0; i < crounds; i++) SIPROUND(v0, v1, v2, v3);
    v0 ^= m;

    v2 ^= 0xff;
    for (int i = 0; i < drounds; i++) SIPROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t siphash(const uint8_t *in, size_t len, const uint8_t k[16]) {
    return siphashGeneric(in, len, k, 1, 2, 0);
}

uint64_t siphash_nocase(const uint8_t *in, size_t len, const uint8_t k[16]) {
    return siphashGeneric(in, len, k, 1, 2, 1);
}

uint64_t siphash24(const uint8_t *in, size_t len, const uint8_t k[16]) {
    return siphashGeneric(in, len, k, 2, 4, 0);
}
