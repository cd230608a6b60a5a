/*
 * dataserve_int.h: what the files of a worker's data server share: the
 * server, its tasks, their blocks, chunks and rounds, a connection, and a
 * reader thread's state, with what each file offers the files above it
 * (each with the dataserve_ prefix). Not for programs: they use
 * dataserve.h.
 *
 * Memory: a reader's stdout is read straight into a block (256 KiB, or
 * one element if larger) and its elements are counted in place; a chunk
 * is a run of kept elements in a block, and a reply goes out with
 * sendmsg from the blocks, so we copy no bytes but those of an element
 * cut by the end of a block. A block no chunk is held in any more is
 * filled again; a task's blocks count against its buffer, and while they
 * fill it the reader thread stops reading, so that the reader blocks on
 * its pipe.
 */
#ifndef MUSTER_DATASERVE_INT_H
#define MUSTER_DATASERVE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "buf.h"
#include "dataserve.h"
#include "datawire.h"
#include "dispatch_client.h"
#include "shardmode.h"
#include "splitorder.h"
#include "tls.h"

#define BLOCK_SIZE (256u << 10) /* a block; the largest chunk */
#define SPARE_CAP (4u << 20)    /* the largest block kept to be filled again */
#define REQ_MAX 8192
/*
 * A connection must send each request within request_ms (REQUEST_MS by
 * default) of the last reply (or of its start), unless it holds elements
 * not yet acknowledged: those go to another consumer once their own is
 * gone, so an idle one that holds some is kept (a consumer whose own
 * reader is slow to read what it wrote may pause for minutes). A consumer
 * that names itself is gone once no connection of its has been open for
 * request_ms: it had as long to come back as to send a request. A reply
 * that cannot be sent for SEND_MS is given up. TCP keepalive finds a
 * consumer's host that died.
 */
#define REQUEST_MS 60000
#define SEND_MS 60000

enum tstate { T_RUNNING, T_FINISHED, T_FAILED };

struct block {
	size_t cap;
	int refs;           /* chunks in it, and the reader while it fills it */
	struct block *next; /* among the spares */
	char data[];
};

/* A run of whole elements of one split (or a header alone). */
struct chunk {
	struct chunk *next;
	struct chunk_hdr h; /* in host order */
	const char *p;
	struct block *blk; /* NULL: no payload */
};

/* Elements [first, end) of split seq were acknowledged by a consumer;
 * total: the split's element count, once its end was among them, or -1. */
struct acked {
	uint64_t seq, first, end;
	int64_t total;
};

/* Round R of a round-robin task: element c goes to consumer c. */
struct round {
	uint64_t r;
	struct round *next;
	long have, taken;
	int done; /* every consumer took its element */
	struct chunk **el;
	unsigned char *took;
};

/*
 * What a consumer that names itself (consumer_id=, datawire.h) holds of a
 * task: the chunks of its last reply, held for the consumer rather than
 * for the connection they went out on. A request numbered above req
 * acknowledges them, on whatever connection; req again (the reply was
 * lost with its connection) gets them again. Once no connection of the
 * consumer's has been open for request_ms it is gone, and they go back
 * to the task's queue for another; the hold stays, empty, until room is
 * needed. One whose consumer said it leaves keeps the number of the
 * request that said so: a request of the consumer's numbered up to it,
 * sent before on a connection the consumer has cut and read only now,
 * must take nothing, since no one would read its reply.
 */
struct hold {
	struct hold *next;
	char id[DW_CONSUMER_ID_MAX + 1];
	uint64_t req;         /* the last request answered */
	struct chunk *chunks; /* its reply's */
	size_t n;
	uint64_t conn; /* the connection that asked last (its serial); 0:
	                * closed since */
	int64_t away;  /* when it closed (ms) */
	uint64_t left; /* the consumer left with this request; 0: it did not */
};

/*
 * A feed: one data task (dispatchd's ds_task, /v1/tasks/T on the wire) as
 * this worker serves it: its reader's output cut into chunks, queued for
 * the task's consumers. A coordd task is another thing, and a consumer's
 * side of a data task is dataread's source.
 */
struct feed {
	struct dataserve *ds;
	atomic_int refs; /* the table, the reader thread, requests */
	uint64_t id;
	char *job, *dataset, *reader;
	char inc[17];
	int64_t hb_timeout;
	enum shard_mode mode;
	enum framing framing;
	int reader_skips;
	uint64_t repeat, seed;
	long shard_index, shard_count, consumers;
	size_t buffer, block;
	char bad[256];   /* why the task object cannot be read */
	char secret[33]; /* the job's, asked of consumers; "": none */
	int cancel[2];   /* readable once the task is dropped */
	struct feed *next;

	pthread_mutex_t mu;
	pthread_cond_t more; /* chunks, an end, fewer held, or the drop */
	pthread_cond_t room; /* a block freed, or the drop */
	int dropped;
	enum tstate state;
	char *error;
	pid_t pid; /* the reader running, 0 */
	struct chunk *head, *tail;
	size_t held; /* chunks out with consumers, not acknowledged */
	size_t mem;  /* bytes in blocks, spares too */
	struct block *spare;
	int reading;         /* the reader thread runs: spares are of use */
	struct acked *acked; /* not yet reported (DYNAMIC) */
	size_t nacked, capacked;
	struct round *rounds, **rounds_end;
	int64_t *asked; /* round robin: the last round each consumer asked */
	struct hold *holds; /* of consumers that name themselves */
	long nholds;
};

struct conn {
	struct dataserve *ds;
	int fd;
	struct tls *tls; /* HTTPS: the session; NULL: plain */
	struct conn *next;
	uint64_t serial;    /* from 1, by which a hold names it */
	struct feed *ht;    /* the task of the held chunks */
	struct chunk *held; /* the last reply's chunks, for a consumer that
	                     * does not name itself */
	size_t nheld;
	int named;      /* asked for a consumer that names itself */
	int named_held; /* its last reply is held for such a consumer */
	char in[REQ_MAX];
	size_t inlen;
};

struct dataserve {
	struct dataserve_config c;
	char *dispatcher, *worker;
	char addr[300];
	int lfd;
	long max_conns, nconns;
	int64_t request_ms;
	struct tls_server *tls; /* HTTPS; NULL: plain */
	unsigned long refused;  /* connections over max_conns */
	uint64_t conn_serial;   /* the last connection's */
	pthread_t accept_th;
	pthread_mutex_t mu;
	pthread_cond_t idle; /* the last thread ended */
	int threads;         /* reader and connection threads */
	int stopping;
	char inc[17];
	int64_t hb_timeout;
	struct feed *tasks;
	struct conn *conns;
	pthread_t report_th;
	pthread_cond_t report; /* stopping */
	int report_cancel[2];  /* readable once stopping */
};

/* The reader thread's state: the block it fills and the split it reads. */
struct skip {
	uint64_t a, b;
};

struct rd {
	struct feed *t;
	struct dispatch_client *dc;
	struct block *blk;
	size_t cstart; /* the open chunk: [cstart, s) */
	size_t s;      /* where the pending element begins */
	size_t fill;   /* bytes read into the block */
	size_t seen;   /* bytes of the pending element searched for its end */
	uint64_t seq, e, first; /* the split; the next element; the chunk's */
	uint32_t count;         /* elements in the open chunk */
	uint64_t ee;            /* elements of the epoch so far (DATA) */
	uint64_t lease_id;      /* of the next lease request (from 1) */
	uint64_t resume;        /* elements before it were served already: a
	                  * reader killed while reading the split wrote them */
	struct skip *skip;      /* ranges to drop, sorted */
	size_t nskip, sk;
	struct buf tail; /* the reader's stderr, its last bytes */
	size_t bsize;    /* new blocks' size: grows with the elements */
	const char *why; /* the reading cannot go on: out of memory, say */
};

struct split {
	const char *text;
	uint64_t index, epoch, seq;
	json_t *skip; /* ranges already delivered (DYNAMIC) */
};

/*
 * The files, lowest first; each calls only those above it in this list.
 *
 * dataserve_feed.c: threads, a feed's blocks, chunks, queue and rounds,
 * and tasks made, found and dropped.
 */
/* Starts fn(arg) detached, counted so that dataserve_stop can wait for
 * it; ds->mu held. */
int dataserve_thread_start(struct dataserve *ds, void *(*fn)(void *),
    void *arg);
/* A thread so started ends. */
void dataserve_thread_done(struct dataserve *ds);
/* A condition variable on the monotonic clock, and a wait on one until
 * the time until (duration_now_ms). */
void dataserve_cond_init(pthread_cond_t *cv);
void dataserve_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
    int64_t until);
/* Blocks, chunks, the queue and rounds: under the task's lock. */
void dataserve_block_put(struct feed *t, struct block *b);
void dataserve_spares_free(struct feed *t);
void dataserve_chunks_free(struct feed *t, struct chunk *c);
void dataserve_queue_push(struct feed *t, struct chunk *c);
struct chunk *dataserve_queue_pop(struct feed *t);
struct chunk *dataserve_queue_take_one(struct feed *t);
void dataserve_round_free(struct feed *t, struct round *r);
/* A task from its object in a heartbeat reply; one of the table, held
 * (NULL: none); a hold let go; the table's hold let go, its reader
 * stopped. */
struct feed *dataserve_feed_new(struct dataserve *ds, json_t *o);
struct feed *dataserve_feed_get(struct dataserve *ds, uint64_t id);
void dataserve_feed_unref(struct feed *t);
void dataserve_feed_drop(struct feed *t);
/* Field name of o as an integer, or def. */
json_int_t dataserve_int_field(json_t *o, const char *name, json_int_t def);
/* s made fit for a JSON string. */
void dataserve_make_utf8(char *s);

/* dataserve_hold.c: what consumers hold of a task, under its lock. */
/* The chunks of list acknowledged: their ranges noted for dispatchd
 * (DYNAMIC), the chunks freed; or put back at the front of the queue, for
 * the next consumer that asks (freed if the task was dropped). */
void dataserve_chunks_ack(struct feed *t, struct chunk *list);
void dataserve_chunks_give_back(struct feed *t, struct chunk *list);
/* A reply's chunks, held by a connection or a consumer (*list, *n of
 * them), acknowledged or given back, t->held counted down, and the holder
 * left with none. */
void dataserve_hold_release(struct feed *t, struct chunk **list, size_t *n,
    int acked);
/* Copies of the chunks of list, each holding its block, for a reply that
 * goes out while another connection may let go of them; *ok 0 when out
 * of memory. */
struct chunk *dataserve_chunks_copy(const struct chunk *list, int *ok);
/* Consumer id's hold, or NULL; a new one, at most max a task (NULL when
 * there is no room); a hold forgotten, its chunks given back. */
struct hold *dataserve_hold_find(struct feed *t, const char *id);
struct hold *dataserve_hold_add(struct feed *t, const char *id, long max);
void dataserve_hold_forget(struct feed *t, struct hold *h);
/* h is asked for on connection conn, whose hold of t it is now (another
 * it had is away from now); conn closed: its holds are away from now. */
void dataserve_hold_claim(struct feed *t, struct hold *h, uint64_t conn,
    int64_t now);
void dataserve_holds_away(struct feed *t, uint64_t conn, int64_t now);
/* Gives back the chunks of the holds away for bound ms or more, their
 * consumers gone; the time the next one will be (INT64_MAX: none). */
int64_t dataserve_holds_expire(struct feed *t, int64_t now, int64_t bound);

/* dataserve_reader.c: the reader process on a split, the framing of its
 * output into chunks, and a task's end told to dispatchd. */
/* The task fails with msg, or finishes; told to dispatchd if report. */
void dataserve_feed_fail(struct rd *rd, char *msg, int report);
void dataserve_feed_finish(struct rd *rd, int report);
/* Waits ms, or less if the task is dropped. */
void dataserve_rd_nap(struct rd *rd, int ms);
/* Reads split sp whole: 0, or -1 when the task stopped. */
int dataserve_read_split(struct rd *rd, const struct split *sp);

/* dataserve_splits.c: a task's thread, over the splits its mode gives it
 * (fetched) or that it leases (DYNAMIC). */
void *dataserve_feed_main(void *arg);

/* dataserve_server.c: the HTTP server, a thread per connection. */
void *dataserve_accept_main(void *arg);

/* dataserve_report.c: the thread that reports acknowledged ranges. */
void *dataserve_report_main(void *arg);
/* Sets ds stopping and waits for the thread. */
void dataserve_report_stop(struct dataserve *ds);

/* dataserve.c, over them all: the task table, start and stop. */

#endif
