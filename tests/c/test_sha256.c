/* test_sha256.c -- SHA-256 against the standard's vectors.
 *
 * The FIPS 180-2 / NIST CAVS examples (empty, "abc", the two-block 448-bit
 * message, a million 'a's), lengths around the padding boundary (55, 56,
 * 63, 64 bytes: one or two final blocks) checked against python's hashlib
 * values, and every split of a message fed in pieces, which must equal the
 * one-shot digest. A password with a zero byte hashes all its bytes. */
#include <string.h>

#include "sha256.h"
#include "testhelp.h"

static const char *hexOf(const void *data, size_t len) {
    static char hex[SHA256_HEX_LEN + 1];
    unsigned char d[SHA256_DIGEST_LEN];
    sha256(data, len, d);
    sha256Hex(d, hex);
    return hex;
}

int main(void) {
    TEST("sha256: FIPS 180-2 examples") {
        CHECK(!strcmp(hexOf("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
        CHECK(!strcmp(hexOf("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
        const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        CHECK(!strcmp(hexOf(m, strlen(m)), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
        const char *m2 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
        CHECK(!strcmp(hexOf(m2, strlen(m2)), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));
    }
    TEST("sha256: a million 'a's, fed in uneven pieces") {
        static char a[1000];
        memset(a, 'a', sizeof(a));
        sha256Ctx ctx;
        sha256Init(&ctx);
        for (int i = 0; i < 1000; i++) sha256Update(&ctx, a, 1000);
        unsigned char d[SHA256_DIGEST_LEN];
        char hex[SHA256_HEX_LEN + 1];
        sha256Final(&ctx, d);
        sha256Hex(d, hex);
        CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    }
    TEST("sha256: lengths at the padding boundary (one or two final blocks)") {
        static char a[64];
        memset(a, 'a', sizeof(a));
        CHECK(!strcmp(hexOf(a, 55), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"));
        CHECK(!strcmp(hexOf(a, 56), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"));
        CHECK(!strcmp(hexOf(a, 63), "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"));
        CHECK(!strcmp(hexOf(a, 64), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"));
    }
    TEST("sha256: every split of a message equals the one-shot digest") {
        char msg[200];
        for (size_t i = 0; i < sizeof(msg); i++) msg[i] = (char)(i * 7 + 3);
        unsigned char whole[SHA256_DIGEST_LEN], parts[SHA256_DIGEST_LEN];
        sha256(msg, sizeof(msg), whole);
        for (size_t cut = 0; cut <= sizeof(msg); cut++) {
            sha256Ctx ctx;
            sha256Init(&ctx);
            sha256Update(&ctx, msg, cut);
            sha256Update(&ctx, msg + cut, sizeof(msg) - cut);
            sha256Final(&ctx, parts);
            CHECK(memcmp(whole, parts, sizeof(whole)) == 0);
        }
    }
    TEST("sha256: a zero byte is part of the message") {
        CHECK(!strcmp(hexOf("ab\0cd", 5), "1bd95cf6379b94fd3b6ceb1390b70b822c76442c4bfb8273b941e09d8dfd9b56"));
        char first[SHA256_HEX_LEN + 1];
        strcpy(first, hexOf("ab\0cd", 5)); /* hexOf's buffer is reused */
        CHECK(strcmp(first, hexOf("ab", 2)) != 0);
    }
    return testReport();
}
