/*
 * crc32c.h: CRC-32C (Castagnoli), the checksum of iSCSI, ext4 and most
 * on-disk logs, chosen for its better error detection on short records.
 */
#ifndef MUSTER_CRC32C_H
#define MUSTER_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * The CRC of p[0..n) continuing from crc: start with 0, and
 * crc32c(crc32c(0, a, na), b, nb) is the CRC of a followed by b.
 */
uint32_t crc32c(uint32_t crc, const void *p, size_t n);

#endif
