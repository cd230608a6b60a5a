/*
 * closureq_int.h: what the files of the closure queue share. They are in
 * layers, lowest first; each uses only those above it in this list:
 *
 *	closureq_obj.c    the objects, their lists and lookups
 *	closureq_apply.c  the changes, as applying a record makes them
 *	closureq_codec.c  reading bytes, every field checked; a closure's
 *	                  spec, which records and snapshots hold alike
 *	closureq_snap.c   snapshots, and the records of version 1
 *	closureq_rec.c    the records: one encoder and decoder each, and
 *	                  cq_commit, which applies a record as replay does
 *	closureq.c        the operations: check, decide, commit a record
 *
 * One mutator: an operation never changes the state itself. It makes a
 * record of what it decided and commits it, and committing applies the
 * record's bytes with the function cq_apply applies them with, before the
 * journal is handed them; so a replay, or a second process fed the same
 * records, holds the same state.
 */
#ifndef MUSTER_CLOSUREQ_INT_H
#define MUSTER_CLOSUREQ_INT_H

#include <stdarg.h>

#include "buf.h"
#include "closureq.h"
#include "rec.h"

struct cq {
	struct cq_config cfg;
	struct cq_view v;
	struct cq_closure **byid;  /* index id; NULL once forgotten */
	uint64_t nid;              /* the next closure's id */
	size_t nbyid, capid;       /* byid's entries, room */
	struct cq_pending pending; /* closures any worker may run */
	struct strmap *queues;     /* name -> struct cq_queue */
	struct strmap *workers;    /* name -> struct cq_worker */
	struct strmap *resources;  /* name -> its JSON, as svc wrote it */
	int64_t last_end;
	int64_t no_worker_since;
	cq_observer_fn observe;
	void *arg;
	cq_journal_fn jfn;
	void *jarg;
	int replaying; /* cq_restore, cq_apply: no events */
	struct buf jbuf;
};

#define CQ_ID_MAX ((uint64_t)1 << 40)
#define CQ_ID_STEP ((uint64_t)1 << 20) /* ids one record may add */
#define CQ_TAKE_MAX 65536              /* closures one take may start */

/* closureq_obj.c */
void cq_emit(struct cq *cq, enum cq_event_type type, struct cq_closure *c,
    struct cq_queue *q, struct cq_worker *w);
void cq_pend_push(struct cq_pending *l, struct cq_closure *c, int front);
void cq_pend_unlink(struct cq_closure *c);
void cq_run_unlink(struct cq_closure *c);
void cq_run_push(struct cq_worker *w, struct cq_closure *c);
void cq_result_clear(struct cq *cq, struct cq_result *r);
void cq_closure_free(struct cq *cq, struct cq_closure *c);
void cq_resource_state_free(void *v);
/* A queue by name, made when create is set; no record. */
struct cq_queue *cq_queue_get(struct cq *cq, const char *name, int create);
/* A worker by name, made when create is set (NULL when memory ran out). */
struct cq_worker *cq_worker_get(struct cq *cq, const char *name, int create);
/* Where a pending closure waits: its worker's pinned list, or everyone's. */
struct cq_pending *cq_pending_for(struct cq *cq, struct cq_closure *c);
/* Makes byid[id] an entry (NULL until set). */
int cq_byid_grow(struct cq *cq, uint64_t id);
void cq_live_changed(struct cq *cq, int delta, int64_t now);
/* Whether w may take c now: c is queued for any worker or for w, and
 * its queue holds no error. */
int cq_may_take(const struct cq_closure *c, const struct cq_worker *w);

/* closureq_apply.c: each keeps the counters, lists and events in step. */
void cq_end(struct cq *cq, struct cq_closure *c, enum cq_state st, int64_t now);
void cq_fail(struct cq *cq, struct cq_closure *c);
void cq_put_back(struct cq *cq, struct cq_closure *c, int front, int64_t now);
void cq_start(struct cq *cq, struct cq_worker *w, struct cq_closure *c);
/* Ends c, queued or running, CANCELLED; a running one's worker is told. */
void cq_cancel_now(struct cq *cq, struct cq_closure *c, int64_t now);
/* Cancels every closure of q, queued or running, naming its error. */
void cq_cancel_queue(struct cq *cq, struct cq_queue *q, int64_t now);
/* Takes w's closures off it: each back to the queue or, past the limit
 * of deaths, ABORTED. */
void cq_worker_down(struct cq *cq, struct cq_worker *w, const char *why,
    int death, long max_deaths, int64_t now);
/* Ends running c's attempt with res (its strings taken over), aborted
 * (back to the queue at once), or as a retry its codes allow. */
void cq_attempt_end(struct cq *cq, struct cq_closure *c, int aborted,
    struct cq_result *res, int64_t now);
/* Drops ended closure c and its value. */
void cq_drop(struct cq *cq, struct cq_closure *c);
/* Puts closure c, new, in byid and in its queue's keys (its id is taken:
 * the next id is past it). -1 when memory runs out, with nothing done. */
int cq_closure_index(struct cq *cq, struct cq_closure *c);

/* closureq_codec.c: bytes in place, every field checked as it is read. */
struct dec {
	struct rec_in in;
	const unsigned char *start;
	char *err;
	size_t errlen;
	int misfit; /* the record decodes but does not fit the state */
	int nomem;  /* memory ran out applying it */
};

struct sview {
	const char *p;
	size_t n;
	int set; /* 0: NULL */
};

enum { SPAN_BYTES, SPAN_TEXT, SPAN_NAME };

void cq_dec_init(struct dec *d, const void *p, size_t len, char *err,
    size_t errlen);
int cq_dbad(struct dec *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int cq_dcheck(struct dec *d);
int cq_get_u(struct dec *d, uint64_t *v);
int cq_get_max(struct dec *d, uint64_t *v, uint64_t max, const char *what);
int cq_get_int(struct dec *d, int64_t *v, int64_t min, int64_t max,
    const char *what);
int cq_get_long(struct dec *d, long *v, long min, long max, const char *what);
int cq_get_ulong(struct dec *d, unsigned long *v);
int cq_get_flag(struct dec *d, int *v);
int cq_get_span(struct dec *d, struct sview *s, int kind, int need,
    const char *what);
/* A count of items of at least one byte each. */
int cq_get_count(struct dec *d, uint64_t *n, uint64_t max, const char *what);
/* A name span (checked) as a C string in nm. */
const char *cq_sview_name(const struct sview *s, char nm[CQ_NAME_MAX + 1]);
char *cq_sview_dup(const struct sview *s, int *nomem);
int cq_dec_nomem(struct dec *d);

/* A closure's spec as records hold it: queue spec on key, n x need,
 * n x retry code, max_retries. */
struct jspec {
	struct sview queue, spec, on, key;
	uint64_t nneeds;
	struct dec needs; /* where the needs begin */
	size_t nretry;
	int retry[CQ_MAX_RETRY_CODES];
	long max_retries;
};
void cq_enc_spec(struct rec_out *e, const struct cq_closure *c,
    const char *queue);
int cq_dec_spec(struct dec *d, struct jspec *x);
/* A new closure, id, of x: not indexed, in no list; NULL when id is in
 * use or memory runs out (d says why). */
struct cq_closure *cq_spec_closure(struct cq *cq, const struct jspec *x,
    uint64_t id, struct dec *d);

/* closureq_snap.c */
/* Applies a record of version 1: what each object it names now is. */
int cq_apply_v1(struct cq *cq, const void *rec, size_t len, int64_t now,
    char *err, size_t errlen);

/* closureq_rec.c: each makes its record and commits it: 0, or -1 with msg
 * (memory ran out; nothing changed). */
int cq_commit_enqueue(struct cq *cq, const struct cq_closure *c,
    const struct cq_queue *q, uint64_t id, int64_t now, char *msg,
    size_t msglen);
int cq_commit_take(struct cq *cq, const struct cq_worker *w,
    struct cq_closure *const *cs, size_t n, int64_t now);
int cq_commit_report(struct cq *cq, const struct cq_worker *w,
    const struct cq_closure *c, int aborted, const struct cq_result *res,
    int64_t now, char *msg, size_t msglen);
int cq_commit_cancel(struct cq *cq, const struct cq_closure *c, int64_t now);
int cq_commit_forget(struct cq *cq, const struct cq_closure *c);
int cq_commit_take_error(struct cq *cq, const struct cq_queue *q, int64_t now);
int cq_commit_queue(struct cq *cq, const char *name);
int cq_commit_down(struct cq *cq, const struct cq_worker *w, int death,
    const char *why, int64_t now);
int cq_commit_register(struct cq *cq, const char *name, uint64_t inc,
    long slots, int64_t now, char *msg, size_t msglen);
int cq_commit_stops_taken(struct cq *cq, const struct cq_worker *w);
int cq_commit_resource_state(struct cq *cq, const struct cq_worker *w,
    const char *name, int state, const char *message);
int cq_commit_resource(struct cq *cq, const char *name, const char *json,
    char *msg, size_t msglen);

#endif
