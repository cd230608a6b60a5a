/*
 * datawire.h: how a worker's elements travel to a consumer. A reply of
 * GET /v1/tasks/T/elements (or .../rounds/R) is a run of chunks, each a
 * fixed header and its payload. Header fields are little-endian.
 *
 * A data chunk holds elements first .. first+count-1 of one split, whole,
 * in the dataset's framing, exactly as the reader wrote them (a last line
 * without its newline gets one). With CHUNK_SPLIT_END set, the split ends
 * with this chunk and has first+count elements in all (count may be 0).
 * In DYNAMIC jobs seq is the split's sequence number in the job, and
 * consumers report the ranges they delivered; in other modes seq and
 * first are for information only.
 */
#ifndef MUSTER_DATAWIRE_H
#define MUSTER_DATAWIRE_H

#include <stdint.h>

#define CHUNK_MAGIC 0x314b434dU /* "MCK1" */

enum chunk_type {
	CHUNK_DATA = 1,
	CHUNK_END = 2,   /* the task has no more elements, ever */
	CHUNK_ERROR = 3, /* the payload is a message: the task failed */
	CHUNK_STATE = 4  /* a positioned stream's start (datapos.h) */
};

#define CHUNK_SPLIT_END 1U

struct chunk_hdr {
	uint32_t magic;
	uint32_t type;
	uint64_t seq;
	uint64_t first;
	uint32_t count;
	uint32_t len; /* payload bytes after the header */
	uint32_t flags;
	uint32_t pad;
};

_Static_assert(sizeof(struct chunk_hdr) == 40, "chunk header is 40 bytes");

#endif
