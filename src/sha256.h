/* sha256.h -- SHA-256 (FIPS 180-4), for ACL password hashes.
 *
 * A small library of its own, knowing nothing of the server: the ACL code
 * stores SHA-256(password) instead of the password (ACL LIST and ACL SAVE
 * print #<hex>, as Redis does), and tests/c/test_sha256.c checks it against
 * the standard's vectors. Incremental (init/update/final) so a message may
 * arrive in pieces; one-shot sha256() for the common case. */
#ifndef SHA256_H
#define SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32
#define SHA256_HEX_LEN 64

typedef struct sha256Ctx {
    uint32_t h[8];
    uint64_t bits;          /* message length so far */
    unsigned char buf[64];  /* a partial block */
    size_t buflen;
} sha256Ctx;

void sha256Init(sha256Ctx *ctx);
void sha256Update(sha256Ctx *ctx, const void *data, size_t len);
void sha256Final(sha256Ctx *ctx, unsigned char out[SHA256_DIGEST_LEN]);
void sha256(const void *data, size_t len, unsigned char out[SHA256_DIGEST_LEN]);
/* Lower-case hex of a digest; hex gets SHA256_HEX_LEN + 1 bytes (NUL-terminated). */
void sha256Hex(const unsigned char digest[SHA256_DIGEST_LEN], char hex[SHA256_HEX_LEN + 1]);

#endif
