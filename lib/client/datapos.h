/*
 * datapos.h: a consumer's position in a dynamic job, and the positioned
 * stream that carries it to the consumer (`dispatchctl read --positions`).
 *
 * A position is what `dispatchctl checkpoint` prints and `read
 * --from-state` resumes from: the dataset's fingerprint, the job's seed
 * and repeat, next (no element of a seq from next on was delivered) and
 * the seqs below next that were not delivered whole, each with the ranges
 * of its elements that were ("skip") and, once known, its element count
 * ("total"). Every other seq below next was delivered whole.
 *
 * Delivered means written to a pipe, for dispatchd; a program on the
 * other end may die with elements unread. A position the program keeps
 * itself, element by element, is what it consumed: the positioned stream
 * gives it one. It is a run of records, each a chunk header (datawire.h,
 * little-endian) and its payload:
 *
 *   CHUNK_STATE  first, once: {"framing": F, "start": POSITION}, where the
 *                read began (the job's start, for a job shared by name)
 *   CHUNK_DATA   elements first .. first+count-1 of split seq, whole, in
 *                the dataset's framing; CHUNK_SPLIT_END: the split has
 *                first+count elements
 *   CHUNK_END    last: the data ended. A stream without it was cut short.
 *
 * Readers of it (datapos_reader here; python/muster_data.py) count the
 * elements they hand out into the start position, so that the position
 * after any element resumes exactly after it. The positions of several
 * consumers of one job started at one position merge into the position of
 * the whole job (datapos_merge): their union.
 */
#ifndef MUSTER_DATAPOS_H
#define MUSTER_DATAPOS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define DATAPOS_VERSION 1
/* The most seqs a position may hold open, and the widest gap a stream
 * may open at once: a bound on what bad input can make us allocate. A
 * consumer of a job read by several keeps open in its own position every
 * split it shared with the others (their positions merged close them):
 * an endless job (repeat 0) read that way reaches the bound in time. */
#define DATAPOS_OPEN_MAX (1u << 20)

struct datapos;

struct datapos *datapos_new(void);
void datapos_free(struct datapos *p);

/*
 * Sets p to the position in json (replacing what it held), checked:
 * 0, or -1 with err saying what is wrong with it.
 */
int datapos_load(struct datapos *p, json_t *json, char *err, size_t errlen);
/*
 * Adds the position in json to p (loaded, or empty: then it is a load):
 * the union of what each delivered. Both must be of the same dataset,
 * seed and repeat. 0, or -1 with err.
 */
int datapos_merge(struct datapos *p, json_t *json, char *err, size_t errlen);
/*
 * Elements [first, end) of seq were delivered; total: the split's element
 * count, or -1 when unknown. 0, or -1 (out of memory, or a seq far beyond
 * next) with err.
 */
int datapos_add(struct datapos *p, uint64_t seq, uint64_t first, uint64_t end,
    int64_t total, char *err, size_t errlen);
/* Whether p holds a position (a load or merge succeeded). */
int datapos_loaded(const struct datapos *p);
/* The position as JSON (NULL: out of memory). */
json_t *datapos_json(const struct datapos *p);

/*
 * A reader of a positioned stream on fd (blocking reads; not closed by
 * it). Elements come out one by one, without their framing: a line
 * without its newline, a NUL-terminated element without its NUL, a len32
 * element without its length.
 */
struct datapos_reader;

struct datapos_reader *datapos_reader_new(int fd);
void datapos_reader_free(struct datapos_reader *r);
/*
 * The next element into *elem (valid until the next call) and *len: 1; 0
 * at the end of the data; -1 when the stream is cut short, malformed or
 * unreadable (datapos_reader_error says which).
 */
int datapos_next(struct datapos_reader *r, const char **elem, size_t *len);
/* The position after the last element returned (NULL: no start read
 * yet, or out of memory). */
json_t *datapos_reader_position(struct datapos_reader *r);
/* The dataset's framing: "lines", "nul" or "len32" ("" before the
 * stream's start). */
const char *datapos_reader_framing(const struct datapos_reader *r);
const char *datapos_reader_error(const struct datapos_reader *r);

#endif
