/*
 * datapos.c: positions in a dynamic job (their arithmetic: load, add,
 * merge, print) and the reader of a positioned stream.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datapos.h"
#include "datawire.h"
#include "errbuf.h"
#include "span.h"
#include "splitorder.h"
#include "vec.h"

/* A seq below next not delivered whole. */
struct seqpos {
	uint64_t seq;
	int64_t total;  /* elements in the split; -1 unknown */
	struct span *r; /* delivered: sorted, disjoint, none empty */
	size_t nr, capr;
};

struct datapos {
	int loaded;
	char fp[17];
	uint64_t repeat, seed, next;
	struct seqpos *open; /* sorted by seq */
	size_t nopen, capopen;
};

struct datapos *
datapos_new(void)
{
	return calloc(1, sizeof(struct datapos));
}

static void
open_clear(struct datapos *p)
{
	for (size_t i = 0; i < p->nopen; i++)
		free(p->open[i].r);
	p->nopen = 0;
}

void
datapos_free(struct datapos *p)
{
	if (p == NULL)
		return;
	open_clear(p);
	free(p->open);
	free(p);
}

/* The open seq's index in p, or where it would go (*found 0). */
static size_t
open_find(const struct datapos *p, uint64_t seq, int *found)
{
	size_t lo = 0, hi = p->nopen;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (p->open[mid].seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < p->nopen && p->open[lo].seq == seq;
	return lo;
}

static void
open_drop(struct datapos *p, size_t i)
{
	free(p->open[i].r);
	memmove(p->open + i, p->open + i + 1,
	    (p->nopen - i - 1) * sizeof(*p->open));
	p->nopen--;
}

/* Positions */

static int
json_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* One entry of a position's open list into s (a fresh seqpos). */
static int
load_open(json_t *o, size_t i, struct seqpos *s, char *err, size_t errlen)
{
	json_t *skip = json_object_get(o, "skip"), *t, *r;
	size_t k;

	s->total = -1;
	if (json_u64(json_object_get(o, "seq"), &s->seq) < 0)
		return errbuf_say(err, errlen, "open[%zu]: no seq", i);
	t = json_object_get(o, "total");
	if (t != NULL && !json_is_null(t)) {
		if (!json_is_integer(t) || json_integer_value(t) < 0)
			return errbuf_say(err, errlen,
			    "open[%zu]: total must be a count", i);
		s->total = json_integer_value(t);
	}
	if (skip != NULL && !json_is_array(skip))
		return errbuf_say(err, errlen, "open[%zu]: skip must be a list",
		    i);
	json_array_foreach(skip, k, r) {
		uint64_t a, b;
		if (!json_is_array(r) || json_array_size(r) != 2 ||
		    json_u64(json_array_get(r, 0), &a) < 0 ||
		    json_u64(json_array_get(r, 1), &b) < 0 || b < a)
			return errbuf_say(err, errlen,
			    "open[%zu].skip[%zu] must be [first, end]", i, k);
		if (span_add(&s->r, &s->nr, &s->capr, a, b) < 0)
			return errbuf_say(err, errlen, "out of memory");
	}
	return 0;
}

static int
seq_cmp(const void *x, const void *y)
{
	const struct seqpos *a = x, *b = y;

	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

int
datapos_load(struct datapos *p, json_t *json, char *err, size_t errlen)
{
	json_t *open = json_object_get(json, "open"), *o;
	json_t *ver = json_object_get(json, "version");
	const char *fp = json_string_value(json_object_get(json, "dataset"));
	const char *mode = json_string_value(json_object_get(json, "mode"));
	size_t i, n = 0;

	open_clear(p);
	p->loaded = 0;
	if (!json_is_object(json))
		return errbuf_say(err, errlen, "a position is a JSON object");
	if (ver != NULL && json_integer_value(ver) != DATAPOS_VERSION)
		return errbuf_say(err, errlen,
		    "version %" JSON_INTEGER_FORMAT " is not %d",
		    json_integer_value(ver), DATAPOS_VERSION);
	if (fp == NULL || strlen(fp) != 16 ||
	    strspn(fp, "0123456789abcdef") != 16)
		return errbuf_say(err, errlen,
		    "dataset must be a dataset's fingerprint (16 hex digits)");
	if (mode != NULL && strcmp(mode, "dynamic") != 0)
		return errbuf_say(err, errlen,
		    "mode %s: only dynamic jobs have a position", mode);
	if (json_u64(json_object_get(json, "repeat"), &p->repeat) < 0 ||
	    json_u64(json_object_get(json, "seed"), &p->seed) < 0 ||
	    json_u64(json_object_get(json, "next"), &p->next) < 0)
		return errbuf_say(err, errlen,
		    "repeat, seed and next must be counts");
	if (open != NULL && !json_is_array(open))
		return errbuf_say(err, errlen, "open must be a list");
	if (json_array_size(open) > DATAPOS_OPEN_MAX)
		return errbuf_say(err, errlen, "open holds more than %u seqs",
		    DATAPOS_OPEN_MAX);
	memcpy(p->fp, fp, sizeof(p->fp));
	if (vec_grow(&p->open, &p->capopen, json_array_size(open),
	        sizeof(*p->open)) < 0)
		return errbuf_say(err, errlen, "out of memory");
	json_array_foreach(open, i, o) {
		struct seqpos *s = &p->open[n];
		memset(s, 0, sizeof(*s));
		if (load_open(o, i, s, err, errlen) < 0) {
			free(s->r);
			open_clear(p);
			return -1;
		}
		if (s->seq >= p->next) {
			free(s->r);
			open_clear(p);
			return errbuf_say(err, errlen,
			    "open[%zu]: seq %" PRIu64 " is not below next", i,
			    s->seq);
		}
		if (span_whole(s->r, s->nr, s->total))
			free(s->r);
		else
			p->nopen = ++n;
	}
	if (p->nopen > 1)
		qsort(p->open, p->nopen, sizeof(*p->open), seq_cmp);
	for (i = 1; i < p->nopen; i++)
		if (p->open[i].seq == p->open[i - 1].seq) {
			uint64_t seq = p->open[i].seq;
			open_clear(p);
			return errbuf_say(err, errlen,
			    "seq %" PRIu64 " is open twice", seq);
		}
	p->loaded = 1;
	return 0;
}

int
datapos_add(struct datapos *p, uint64_t seq, uint64_t first, uint64_t end,
    int64_t total, char *err, size_t errlen)
{
	struct seqpos *s;
	size_t i;
	int found;

	/* As JSON carries them: signed 64-bit numbers. */
	if (seq > INT64_MAX || end > INT64_MAX || first > end)
		return errbuf_say(err, errlen,
		    "seq %" PRIu64 ", elements %" PRIu64 " to %" PRIu64
		    ": out of range",
		    seq, first, end);
	if (seq >= p->next) {
		/* The seqs between were leased to others, or are not read
		 * yet: open, with nothing delivered. */
		if (seq - p->next >= DATAPOS_OPEN_MAX)
			return errbuf_say(err, errlen,
			    "seq %" PRIu64 " is too far beyond %" PRIu64, seq,
			    p->next);
		if (p->nopen + (seq - p->next) >= DATAPOS_OPEN_MAX)
			return errbuf_say(err, errlen,
			    "the position would hold more than %u splits open "
			    "(each split shared with other consumers of the "
			    "job stays open in this one's position)",
			    DATAPOS_OPEN_MAX);
		if (vec_grow(&p->open, &p->capopen,
		        p->nopen + (size_t)(seq - p->next) + 1,
		        sizeof(*p->open)) < 0)
			return errbuf_say(err, errlen, "out of memory");
		for (; p->next <= seq; p->next++)
			p->open[p->nopen++] =
			    (struct seqpos){.seq = p->next, .total = -1};
	}
	i = open_find(p, seq, &found);
	if (!found)
		return 0; /* delivered whole before */
	s = &p->open[i];
	if (total >= 0)
		s->total = total;
	if (span_add(&s->r, &s->nr, &s->capr, first, end) < 0)
		return errbuf_say(err, errlen, "out of memory");
	if (span_whole(s->r, s->nr, s->total))
		open_drop(p, i);
	return 0;
}

/* Whether p holds seq as delivered whole. */
static int
whole_in(const struct datapos *p, uint64_t seq)
{
	int found;

	open_find(p, seq, &found);
	return seq < p->next && !found;
}

/* Folds q's ranges for s->seq (if q holds it open) into s. */
static int
fold(struct seqpos *s, const struct datapos *q)
{
	int found;
	size_t i = open_find(q, s->seq, &found);

	if (!found)
		return 0;
	if (s->total < 0)
		s->total = q->open[i].total;
	for (size_t k = 0; k < q->open[i].nr; k++)
		if (span_add(&s->r, &s->nr, &s->capr, q->open[i].r[k].a,
		        q->open[i].r[k].b) < 0)
			return -1;
	return 0;
}

int
datapos_merge(struct datapos *p, json_t *json, char *err, size_t errlen)
{
	struct datapos *q = datapos_new(), tmp;
	struct seqpos *v = NULL;
	size_t n = 0, cap = 0;
	int rc = -1;

	if (q == NULL)
		return errbuf_say(err, errlen, "out of memory");
	if (datapos_load(q, json, err, errlen) < 0)
		goto out;
	if (!p->loaded) {
		tmp = *p;
		*p = *q;
		*q = tmp;
		rc = 0;
		goto out;
	}
	if (strcmp(p->fp, q->fp) != 0 || p->seed != q->seed ||
	    p->repeat != q->repeat) {
		errbuf_say(err, errlen,
		    "positions of different jobs: dataset %s, seed %" PRIu64
		    ", repeat %" PRIu64 " and dataset %s, seed %" PRIu64
		    ", repeat %" PRIu64,
		    p->fp, p->seed, p->repeat, q->fp, q->seed, q->repeat);
		goto out;
	}
	/* A seq delivered whole by either is; one open in both gets the
	 * union of their ranges; one open in one and not reached by the
	 * other keeps its ranges. */
	for (int side = 0; side < 2; side++) {
		const struct datapos *a = side == 0 ? p : q;
		const struct datapos *b = side == 0 ? q : p;
		for (size_t i = 0; i < a->nopen; i++) {
			struct seqpos *s;
			int found;
			if (whole_in(b, a->open[i].seq))
				continue;
			open_find(b, a->open[i].seq, &found);
			if (side == 1 && found)
				continue; /* merged on the first side */
			if (vec_grow(&v, &cap, n + 1, sizeof(*v)) < 0) {
				errbuf_say(err, errlen, "out of memory");
				goto out;
			}
			s = &v[n++];
			*s =
			    (struct seqpos){.seq = a->open[i].seq, .total = -1};
			if (fold(s, a) < 0 || (found && fold(s, b) < 0)) {
				errbuf_say(err, errlen, "out of memory");
				goto out;
			}
			if (span_whole(s->r, s->nr, s->total))
				free(v[--n].r);
		}
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), seq_cmp);
	open_clear(p);
	free(p->open);
	p->open = v;
	p->nopen = n;
	p->capopen = cap;
	v = NULL;
	n = 0;
	if (q->next > p->next)
		p->next = q->next;
	rc = 0;
out:
	for (size_t i = 0; i < n; i++)
		free(v[i].r);
	free(v);
	datapos_free(q);
	return rc;
}

int
datapos_loaded(const struct datapos *p)
{
	return p->loaded;
}

json_t *
datapos_json(const struct datapos *p)
{
	json_t *open = json_array(), *o, *skip;

	if (open == NULL)
		return NULL;
	for (size_t i = 0; i < p->nopen; i++) {
		const struct seqpos *s = &p->open[i];
		skip = json_array();
		for (size_t k = 0; k < s->nr; k++)
			json_array_append_new(skip,
			    json_pack("[I,I]", (json_int_t)s->r[k].a,
			        (json_int_t)s->r[k].b));
		o = json_pack("{s:I,s:o}", "seq", (json_int_t)s->seq, "skip",
		    skip);
		if (o != NULL && s->total >= 0)
			json_object_set_new(o, "total",
			    json_integer((json_int_t)s->total));
		json_array_append_new(open, o);
	}
	return json_pack("{s:i,s:s,s:s,s:I,s:I,s:I,s:I,s:o}", "version",
	    DATAPOS_VERSION, "dataset", p->fp, "mode", "dynamic", "repeat",
	    (json_int_t)p->repeat, "seed", (json_int_t)p->seed, "next",
	    (json_int_t)p->next, "done", (json_int_t)(p->next - p->nopen),
	    "open", open);
}

/* The positioned stream's reader */

#define READ_MIN (64u << 10)
/* A record's payload is at most a chunk's: a 32-bit length. */

struct datapos_reader {
	int fd;
	struct datapos *pos;
	enum framing framing;
	int started; /* the start record was read */
	int ended;   /* the end record was read */
	int broken;  /* an error: every later call fails */
	char *buf;
	size_t cap, off, len; /* unread bytes: buf[off, len) */
	/* The data record being handed out, element by element. */
	struct chunk_hdr h;
	const char *p;
	size_t left;
	uint32_t k; /* its elements handed out */
	int inchunk;
	char err[512];
};

struct datapos_reader *
datapos_reader_new(int fd)
{
	struct datapos_reader *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	if ((r->pos = datapos_new()) == NULL) {
		free(r);
		return NULL;
	}
	r->fd = fd;
	return r;
}

void
datapos_reader_free(struct datapos_reader *r)
{
	if (r == NULL)
		return;
	datapos_free(r->pos);
	free(r->buf);
	free(r);
}

const char *
datapos_reader_error(const struct datapos_reader *r)
{
	return r->err;
}

const char *
datapos_reader_framing(const struct datapos_reader *r)
{
	return r->started ? framing_name(r->framing) : "";
}

json_t *
datapos_reader_position(struct datapos_reader *r)
{
	return r->started ? datapos_json(r->pos) : NULL;
}

static int rfail(struct datapos_reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
rfail(struct datapos_reader *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
	r->broken = 1;
	return -1;
}

/*
 * Until want unread bytes are buffered: 1; 0 at the end of the input
 * with fewer; -1 on a read error. Moves what is unread to the front
 * first: nothing handed out points into the buffer any more.
 */
static int
fill(struct datapos_reader *r, size_t want)
{
	if (r->off > 0) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	while (r->len < want) {
		/* Room as the bytes come, not as a header says: a bad one
		 * must not allocate gigabytes. */
		size_t room = r->len > READ_MIN ? r->len : READ_MIN;
		ssize_t n;
		if (r->cap - r->len < READ_MIN / 4 &&
		    vec_grow(&r->buf, &r->cap, r->len + room, 1) < 0)
			return rfail(r,
			    "out of memory for a record of %zu "
			    "bytes",
			    want);
		n = read(r->fd, r->buf + r->len, r->cap - r->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return rfail(r, "reading the stream: %s",
			    strerror(errno));
		if (n == 0)
			return 0;
		r->len += (size_t)n;
	}
	return 1;
}

/* The start record's payload: the framing and the start position. */
static int
take_state(struct datapos_reader *r, const char *p, size_t len)
{
	json_error_t je;
	json_t *o = json_loadb(p, len, 0, &je);
	const char *f = json_string_value(json_object_get(o, "framing"));
	char err[256];
	int rc;

	if (o == NULL)
		return rfail(r, "the start record is not JSON: %s", je.text);
	if (f == NULL || framing_parse(f, &r->framing) < 0) {
		json_decref(o);
		return rfail(r, "the start record names no framing");
	}
	rc =
	    datapos_load(r->pos, json_object_get(o, "start"), err, sizeof(err));
	json_decref(o);
	if (rc < 0)
		return rfail(r, "the start position: %s", err);
	r->started = 1;
	return 0;
}

/* Reads the next record: 1 a data record to hand out, 0 the end,
 * -1 an error. */
static int
next_record(struct datapos_reader *r)
{
	struct chunk_hdr h;
	const char *p;
	int rc;

	for (;;) {
		if ((rc = fill(r, sizeof(h))) <= 0)
			return rc < 0 ?
			    -1 :
			    r->len == 0 ?
			    rfail(r,
			        "the stream ends before the end "
			        "of the data: the reader stopped "
			        "early") :
			    rfail(r, "the stream ends inside a record");
		memcpy(&h, r->buf + r->off, sizeof(h));
		h.magic = le32toh(h.magic);
		h.type = le32toh(h.type);
		h.seq = le64toh(h.seq);
		h.first = le64toh(h.first);
		h.count = le32toh(h.count);
		h.len = le32toh(h.len);
		h.flags = le32toh(h.flags);
		if (h.magic != CHUNK_MAGIC)
			return rfail(r,
			    "not a positioned stream (dispatchctl "
			    "read --positions)");
		if ((rc = fill(r, sizeof(h) + h.len)) <= 0)
			return rc < 0 ?
			    -1 :
			    rfail(r, "the stream ends inside a record");
		p = r->buf + r->off + sizeof(h);
		r->off += sizeof(h) + h.len;
		if (h.type != CHUNK_STATE && !r->started)
			return rfail(r,
			    "the stream does not begin with its "
			    "start record");
		switch (h.type) {
		case CHUNK_STATE:
			if (r->started)
				return rfail(r, "a second start record");
			if (take_state(r, p, h.len) < 0)
				return -1;
			continue;
		case CHUNK_END: r->ended = 1; return 0;
		case CHUNK_ERROR:
			return strnlen(p, h.len) > 0 ?
			    rfail(r, "%.*s", (int)strnlen(p, h.len), p) :
			    rfail(r, "the read failed");
		case CHUNK_DATA:
			r->h = h;
			r->p = p;
			r->left = h.len;
			r->k = 0;
			r->inchunk = 1;
			return 1;
		default:
			return rfail(r, "a record of unknown type %" PRIu32,
			    h.type);
		}
	}
}

/* The next element of the data record into *elem and *len (its framing
 * taken off); -1 when the record is malformed. */
static int
cut(struct datapos_reader *r, const char **elem, size_t *len)
{
	size_t n;
	uint32_t be;

	if (r->framing == FRAME_LEN32) {
		if (r->left < 4)
			return -1;
		memcpy(&be, r->p, 4);
		n = be32toh(be);
		if (n > r->left - 4)
			return -1;
		*elem = r->p + 4;
		*len = n;
		n += 4;
	} else {
		const char *e = memchr(r->p,
		    r->framing == FRAME_LINES ? '\n' : '\0', r->left);
		if (e == NULL)
			return -1;
		*elem = r->p;
		*len = (size_t)(e - r->p);
		n = *len + 1;
	}
	r->p += n;
	r->left -= n;
	return 0;
}

int
datapos_next(struct datapos_reader *r, const char **elem, size_t *len)
{
	char err[256];
	int rc;

	if (r->broken)
		return -1;
	if (r->ended)
		return 0;
	for (;;) {
		if (r->inchunk && r->k < r->h.count) {
			int64_t total = -1;
			uint64_t e = r->h.first + r->k;
			if (cut(r, elem, len) < 0)
				return rfail(r,
				    "seq %" PRIu64 ": element %" PRIu64
				    " is not whole in its record",
				    r->h.seq, e);
			if (++r->k == r->h.count &&
			    (r->h.flags & CHUNK_SPLIT_END))
				total = (int64_t)(r->h.first + r->h.count);
			if (datapos_add(r->pos, r->h.seq, e, e + 1, total, err,
			        sizeof(err)) < 0)
				return rfail(r, "%s", err);
			return 1;
		}
		if (r->inchunk) {
			r->inchunk = 0;
			if (r->left != 0)
				return rfail(r,
				    "seq %" PRIu64 ": bytes beyond its %" PRIu32
				    " elements",
				    r->h.seq, r->h.count);
			/* An empty split's end, or one after its elements. */
			if (r->h.count == 0 && (r->h.flags & CHUNK_SPLIT_END) &&
			    datapos_add(r->pos, r->h.seq, r->h.first,
			        r->h.first, (int64_t)r->h.first, err,
			        sizeof(err)) < 0)
				return rfail(r, "%s", err);
		}
		if ((rc = next_record(r)) <= 0)
			return rc;
	}
}
