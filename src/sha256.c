/* sha256.c -- SHA-256 as FIPS 180-4 describes it.
 *
 * Written out plainly rather than unrolled: the ACL hashes a password once
 * per SETUSER and once per AUTH, so a few hundred nanoseconds either way
 * are invisible, and a plain transcription of the standard is easy to check
 * line by line against it. Big-endian word loads and stores are done byte
 * by byte, so the code is the same on any host and needs no alignment. */
#include "sha256.h"

#include <string.h>

/* The first 32 bits of the fractional parts of the cube roots of the first
 * 64 primes (FIPS 180-4 §4.2.2). */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress(uint32_t h[8], const unsigned char block[64]) {
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 | (uint32_t)block[4 * t + 2] << 8 |
               (uint32_t)block[4 * t + 3];
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + S1 + ch + K[t] + w[t];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

void sha256Init(sha256Ctx *ctx) {
    /* The first 32 bits of the fractional parts of the square roots of the
     * first 8 primes (§5.3.3). */
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(ctx->h, H0, sizeof(H0));
    ctx->bits = 0;
    ctx->buflen = 0;
}

void sha256Update(sha256Ctx *ctx, const void *data, size_t len) {
    const unsigned char *p = data;
    ctx->bits += (uint64_t)len * 8;
    if (ctx->buflen) {
        size_t take = 64 - ctx->buflen < len ? 64 - ctx->buflen : len;
        memcpy(ctx->buf + ctx->buflen, p, take);
        ctx->buflen += take;
        p += take;
        len -= take;
        if (ctx->buflen < 64) return;
        compress(ctx->h, ctx->buf);
        ctx->buflen = 0;
    }
    for (; len >= 64; p += 64, len -= 64) compress(ctx->h, p);
    memcpy(ctx->buf, p, len);
    ctx->buflen = len;
}

void sha256Final(sha256Ctx *ctx, unsigned char out[SHA256_DIGEST_LEN]) {
    /* Padding (§5.1.1): a 1 bit, zeros up to 56 mod 64, the bit length. */
    uint64_t bits = ctx->bits;
    unsigned char pad[72] = {0x80};
    size_t padlen = ctx->buflen < 56 ? 56 - ctx->buflen : 120 - ctx->buflen;
    for (int i = 0; i < 8; i++) pad[padlen + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
    sha256Update(ctx, pad, padlen + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(ctx->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(ctx->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(ctx->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)ctx->h[i];
    }
    memset(ctx, 0, sizeof(*ctx)); /* the state held the password's bytes */
}

void sha256(const void *data, size_t len, unsigned char out[SHA256_DIGEST_LEN]) {
    sha256Ctx ctx;
    sha256Init(&ctx);
    sha256Update(&ctx, data, len);
    sha256Final(&ctx, out);
}

void sha256Hex(const unsigned char digest[SHA256_DIGEST_LEN], char hex[SHA256_HEX_LEN + 1]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < SHA256_DIGEST_LEN; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[SHA256_HEX_LEN] = '\0';
}
