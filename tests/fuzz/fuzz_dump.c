/* fuzz_dump.c -- libFuzzer target for the DUMP payload parser (src/dump.c).
 *
 * RESTORE hands dumpParse whatever a client sent, so the parser must never
 * read outside the payload, whatever its lengths claim, and must accept
 * exactly the payloads the encoder makes. Random bytes almost never carry
 * a valid CRC, which would leave the structural checks behind it unfuzzed;
 * so the first input byte chooses the mode:
 *
 *   bit 0 clear  the rest is the payload as RESTORE would get it
 *   bit 0 set    the rest is a *body*, sealed here with a correct version
 *                and CRC64 (dumpWriteTrailer) before parsing: every input
 *                then reaches the structural checks
 *
 * The payload is copied into a buffer of exactly its size, so AddressSanitizer
 * sees any read past its end. Checked on every input:
 *   - the result is DUMP_OK or one of the two errors, and a sealed body is
 *     never refused for its version or CRC;
 *   - on DUMP_OK, the value and the checksum lie inside the body, the value
 *     ends where the trailer starts, and re-encoding what was parsed
 *     (dumpCreate) gives back the very same bytes: the format has one
 *     encoding per value, so a payload the parser accepts is one the
 *     encoder could have made.
 * A broken invariant is __builtin_trap(), reported by libFuzzer as a crash
 * with the input saved.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crc.h"
#include "dump.h"
#include "sds.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int seal = data[0] & 1;
    data++;
    size--;
    size_t len = seal ? size + DUMP_TRAILER_LEN : size;
    char *buf = malloc(len ? len : 1);
    if (buf == NULL) return 0;
    if (size) memcpy(buf, data, size);
    if (seal) dumpWriteTrailer(crc64(0, (const unsigned char *)buf, size), (unsigned char *)buf + size);

    dumpInfo d;
    int rc = dumpParse(buf, len, &d);
    FUZZ_CHECK(rc == DUMP_OK || rc == DUMP_ERR_CHECKSUM || rc == DUMP_ERR_FORMAT);
    if (seal) FUZZ_CHECK(rc != DUMP_ERR_CHECKSUM);
    if (rc == DUMP_OK) {
        const char *body_end = buf + len - DUMP_TRAILER_LEN;
        FUZZ_CHECK(d.type == DUMP_TYPE_STRING || d.type == DUMP_TYPE_OBJECT);
        FUZZ_CHECK(d.value >= buf && d.value <= body_end);
        FUZZ_CHECK(d.value_len == (uint64_t)(body_end - d.value));
        if (d.flags & DUMP_F_CHECKSUM) {
            FUZZ_CHECK(d.checksum >= buf && d.checksum <= d.value);
            FUZZ_CHECK(d.checksum_len <= (size_t)(d.value - d.checksum));
        }
        FUZZ_CHECK(dumpPrefixLen(&d) == (size_t)(d.value - buf));
        sds again = dumpCreate(&d);
        FUZZ_CHECK(sdslen(again) == len && memcmp(again, buf, len) == 0);
        sdsfree(again);
    }
    free(buf);
    return 0;
}
