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

#include <stddef.h>
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

/*
 * The one codec of chunk headers: h (host order) into out in wire order
 * (sizeof(struct chunk_hdr) bytes, pad zero), which a worker's data
 * server writes; and the next chunk of a reply's body from *off, which a
 * consumer reads from its worker's bytes, fuzzed: its header in host
 * order and its payload, 1; 0 at the end of the body; -1 when the body is
 * malformed (a short header, another magic, a type a reply does not
 * carry, a payload past the end). Pure: nothing allocated or kept.
 */
void dw_chunk_put(const struct chunk_hdr *h, struct chunk_hdr *out);
int dw_chunk_next(const char *body, size_t len, size_t *off,
    struct chunk_hdr *h, const char **payload);
/*
 * The same for a header alone: wire's sizeof(struct chunk_hdr) bytes,
 * with rest bytes of the body after them, into h (host order): 0, or -1
 * when malformed. For a consumer that moves payloads without reading them
 * (dataread_stage.c).
 */
int dw_chunk_head(const char *wire, size_t rest, struct chunk_hdr *h);

/*
 * What a consumer asks a worker's data server for: the one codec of the
 * request line's path and query, which the consumer writes
 * (dw_request_path) and the server reads (dw_request_parse) from a
 * stranger's bytes, fuzzed.
 *
 *   GET /v1/tasks/T/elements[?max=BYTES][&wait=MS][&consumer_id=ID&request=N]
 *       chunks of task T, up to max bytes (0: nothing; acknowledges the
 *       last reply only), waiting up to wait for the first (a bare number
 *       is milliseconds, else a duration such as "2s"); a consumer that
 *       names itself numbers its requests, and the worker holds a reply
 *       for consumer ID until a request numbered above N (dataserve.h)
 *   GET /v1/tasks/T/giveback?consumer_id=ID&request=N
 *       the reply to consumer ID's request N goes back to the task, for
 *       another consumer: this one did not write it, and leaves
 *   GET /v1/tasks/T/rounds/R?consumer=C[&wait=MS]    round R of a
 *       round-robin task, consumer C's element
 *   GET /healthz
 *
 * A consumer's ID is 1 to DW_CONSUMER_ID_MAX letters, digits, '-' or '_';
 * N rises from 1 or above. Once ID has left (max=0, or giveback), its
 * requests numbered up to where it left take nothing.
 */
enum dw_kind { DW_HEALTH, DW_ELEMENTS, DW_GIVEBACK, DW_ROUND };

#define DW_CONSUMER_ID_MAX 64

struct dw_request {
	enum dw_kind kind;
	uint64_t task;
	uint64_t round;  /* DW_ROUND */
	long consumer;   /* DW_ROUND; -1: absent or not a number */
	int has_max;     /* DW_ELEMENTS: max= was given, */
	size_t max;      /* as this many bytes */
	int has_wait;    /* wait= was given, */
	int64_t wait_ms; /* as this many milliseconds (>= 0) */
	/* DW_ELEMENTS (DW_GIVEBACK always): consumer_id= and request= were
	 * given, as these. */
	int has_id;
	char consumer_id[DW_CONSUMER_ID_MAX + 1];
	uint64_t request;
};

/* r's path and query into out: 0, or -1 when size is too small. */
int dw_request_path(const struct dw_request *r, char *out, size_t size);

enum {
	DW_OK = 0,
	DW_NO_SUCH = -1,  /* the path names nothing served here */
	DW_BAD_MAX = -2,  /* max= is not a number of bytes */
	DW_BAD_WAIT = -3, /* wait= is neither milliseconds nor a duration */
	DW_BAD_ID = -4    /* consumer_id= or request= is malformed, or one
	                   * comes without the other */
};

/* Reads path and query (as io/http1 splits them) into r: DW_OK, or why
 * not. Pure: no allocation, nothing kept. */
int dw_request_parse(const char *path, const char *query, struct dw_request *r);

#endif
