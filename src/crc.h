/* crc.h -- the checksums that Redis-compatible wire formats fix.
 *
 * CRC16 (XMODEM: poly 0x1021, init 0) is what Redis Cluster hashes keys
 * with, so our slot for a key is the slot every cluster client computes.
 * CRC64 (Jones: reflected poly 0xad93d23594c935a9, init 0) guards DUMP
 * payloads, as in Redis. Both are table-driven (CRC64 of long buffers:
 * carry-less multiplies where the CPU has them); the tables and constants
 * are built on first use from the polynomial, not pasted.
 */
#ifndef CRC_H
#define CRC_H

#include <stddef.h>
#include <stdint.h>

uint16_t crc16(const char *buf, size_t len);
uint64_t crc64(uint64_t crc, const unsigned char *buf, size_t len);
/* The portable sliced-by-8 loop alone (crc64 folds long buffers with
 * carry-less multiplies where the CPU has them); for tests and benchmarks. */
uint64_t crc64Sliced8(uint64_t crc, const unsigned char *buf, size_t len);

/* Redis Cluster's slot of a key: CRC16 of the hash tag (the bytes between
 * the first '{' and the next '}' when that is non-empty) or the whole key. */
#define CLUSTER_SLOTS 16384
unsigned int keyHashSlot(const char *key, size_t keylen);

#endif
