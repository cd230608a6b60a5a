/*
 * dataread_int.h: what the files of a job's consumer (dataread.h) share:
 * the reader and its tasks, a connection to a worker and its replies, and
 * what each file offers the files above it (each with the dataread_
 * prefix). Not for programs: they use dataread.h.
 */
#ifndef MUSTER_DATAREAD_INT_H
#define MUSTER_DATAREAD_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include <jansson.h>

#include "dataread.h"
#include "datawire.h"
#include "dispatch_client.h"
#include "status.h"
#include "tls.h"

/* At the end of a read: how long its last report and the release of its
 * job client may take. */
#define FAREWELL_MS 2000
/* What a reply may take beyond the wait asked for before its worker
 * counts as hung. */
#define IO_GRACE_MS 30000
/* Pauses between attempts to read from a task that cannot be read now. */
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 500

/* Elements [first, end) of split seq were written; total -1: unknown. */
struct range {
	int64_t seq, first, end, total;
};

struct ranges {
	struct range *v;
	size_t n, cap;
};

/* A data chunk of a reply, as much as telling it again takes. */
struct chunk_id {
	uint64_t seq, first;
	uint32_t count, flags;
	int dup; /* sent again after a reconnection: already written */
};

/*
 * A task's stage: pipes that hold a reply's data payloads, moved into them
 * from the worker's socket and out of them to the output by splice(2),
 * never through user space. Made as needed, up to STAGE_PIPES; each takes
 * what its pipe buffers hold (the kernel's own pieces of the stream, one
 * per buffer), and what none can take goes through memory.
 */
#define STAGE_PIPES 8

struct stage {
	int fd[STAGE_PIPES][2];
	size_t held[STAGE_PIPES]; /* bytes in each */
	int n;                    /* pipes made */
	int fill;                 /* the one being filled */
	int drain;                /* the one being emptied */
	int null;                 /* /dev/null, for payloads dropped */
	int off;                  /* splice refused: memory only */
	int *budget; /* descriptors the reader's stages may still take */
};

/*
 * A piece of a reply received through a stage: bytes of the task's
 * buffer at off, or the next len bytes of its stage. A chunk is its
 * header's piece (its wire bytes, in memory), then its payload's.
 */
struct piece {
	size_t off, len;
	size_t chunk;         /* its chunk, an index in the reply */
	unsigned char staged; /* in the stage, not the buffer */
	unsigned char head;   /* the chunk's header */
};

enum step {
	STEP_AGAIN, /* read on */
	STEP_RETRY, /* cannot read now: pause and try again */
	STEP_END,   /* the task has no more elements */
	STEP_FAIL   /* the read ends: r->fail or r->closed says why */
};

struct reader;

/*
 * A source: one data task (dispatchd's ds_task) as this consumer reads
 * it, a thread asking the task's worker (whose side is dataserve's feed)
 * for its elements.
 */
struct source {
	struct source *next;
	struct reader *r;
	int64_t id;
	char addr[280];
	pthread_t thread;
	/* Under r->mu: */
	int fd;      /* the connection, for shutdown(2); -1 */
	int io;      /* a request on it: a stop cuts it short */
	int cut;     /* the stop shut the connection down */
	int listed;  /* in the last heartbeat's list */
	int stop;    /* stop reading: the task left the list */
	int running; /* its thread has not ended */
	/* The task's thread only: */
	uint64_t mark; /* r->recorded after the last reply's deliveries */
	char *buf;     /* the last reply */
	size_t cap;
	struct iovec *iov; /* its payloads */
	size_t niov, capiov;
	struct chunk_id *cur, *prev; /* its chunks, the previous reply's */
	size_t ncur, capcur, nprev, capprev;
	struct chunk_id *again; /* written, and perhaps to be sent again */
	size_t nagain, capagain;
	uint64_t req;       /* the next request's number (datawire.h), above all
	                * those of the reader's sources before */
	struct stage stage; /* plain connections, an output splice takes */
	struct piece *pc;   /* the last reply's pieces, when staged */
	size_t npc, cappc;
	int unwritten; /* the last reply could not be written */
	int asked;     /* request req was sent and no reply came: the
	                * worker may hold one for us */
};

/* A task of a round-robin job as the last heartbeat listed it. */
struct rr_task {
	int64_t id, start;
	char addr[280];
};

/* A connection to a worker: its socket, and its TLS session for an
 * https:// address (NULL: plain). */
struct wconn {
	int fd;
	struct tls *tls;
};

/* A round-robin reader's kept-alive connection to one task. */
struct rr_conn {
	int64_t id;
	struct wconn wc;
};

struct reader {
	const struct dataread_opts *o;
	struct dispatch_client *dc;
	int64_t job, client;
	int dynamic;
	int wake[2]; /* a byte written: heartbeat soon */
	pthread_mutex_t out_mu;
	pthread_mutex_t mu; /* what follows */
	pthread_cond_t cv;  /* a stop, a report, a new list or block */
	struct ranges pend; /* delivered, not yet reported */
	int64_t *lost;      /* tasks to report lost */
	size_t nlost, caplost;
	int split_end; /* pend holds a split's total */
	/* Marks of what was recorded, and of what dispatchd has heard of. */
	uint64_t recorded, reported;
	struct source *tasks;
	uint64_t sources; /* started: each numbers its requests apart */
	int finished;     /* the job, as the last heartbeat said */
	int stopping;     /* the read ends: every thread stops */
	int told;         /* the read's last report was made, or given up */
	enum status fail;
	char failmsg[1024];
	int closed;             /* the output's reader went away */
	int out_splice;         /* the output takes splice(2): a pipe or a
	                         * file (atomic: cleared when refused) */
	int stage_fds;          /* what the stages may still take (atomic) */
	char secret[33];        /* the job's: workers ask it of its consumers */
	char id[33];            /* ours, made once, by which workers hold our
	                   * replies for us across connections */
	uint64_t written;       /* elements written (atomic: out_mu may be held
	                   * long by a writer blocked on the output) */
	uint64_t written_bytes; /* bytes written, framing too (atomic) */
	/* Of a DYNAMIC job, as the last heartbeat said; -1: not known. */
	int64_t splits, splits_done;
	json_t *start;    /* the job's start position (DYNAMIC) */
	char framing[16]; /* the dataset's */
	/* Round robin: */
	struct rr_task *rr;
	size_t nrr, caprr;
	int64_t round; /* rounds below it have begun */
	int64_t block; /* block_round, -1: none */
	int rr_done;
	int rr_fd; /* the connection being read, for shutdown(2); -1 */
	pthread_t rr_thread;
	int rr_started;
};

/* A worker's reply, its body inside the reader's buffer. */
struct reply {
	long code;
	const char *body;
	size_t len;
	int close; /* the worker closes the connection after it */
};

/*
 * The files, lowest first; each calls only those above it in this list.
 */
/* dataread_stage.c: a task's stage (struct stage). */
/* The descriptors the stages of one read may hold in all: a quarter of
 * what the process may open, so that a read of many tasks never runs out
 * of descriptors for its connections (a stage without is memory only). */
int dataread_stage_budget(void);
/* A stage empty, taking its pipes from *budget. */
void dataread_stage_init(struct stage *st, int *budget);
/* Drops what st holds: its pipes are closed, made again as needed. */
void dataread_stage_reset(struct stage *st);
/* After a reply: st empty is used again from its first pipe; not empty
 * (a reply cut short), it is reset. */
void dataread_stage_done(struct stage *st);
void dataread_stage_free(struct stage *st);
/*
 * Moves up to n bytes from the socket fd into st: the count, which is
 * less than n when st cannot take more (the rest goes through memory), 0
 * included; -1 when the connection broke or timed out (errno).
 */
ssize_t dataread_stage_fill(struct stage *st, int fd, size_t n);
/*
 * Moves the next n bytes of st to out, or drops them when out is -1,
 * adding what it wrote to *wrote: 0, or -1 with errno (EPIPE: out's
 * reader went away). EINVAL from out (a file opened to append, say)
 * clears *splice_ok and the bytes go through memory instead.
 */
int dataread_stage_out(struct stage *st, int out, size_t n, int *splice_ok,
    uint64_t *wrote);

/*
 * dataread_conn.c: a connection to a worker, a request on it, and its
 * replies (their chunks are datawire.h's dw_chunk_next).
 */
/* 0; -1 when addr cannot be reached now; -2 when TLS failed (err). */
int dataread_conn_open(const char *addr, int64_t io_ms, struct wconn *wc,
    char *err, size_t errlen);
void dataread_conn_close(struct wconn *wc);
int dataread_send_get(struct wconn *wc, const char *path, const char *addr,
    const char *secret);
int dataread_recv_reply(struct wconn *wc, char **buf, size_t *cap, size_t want,
    struct reply *rp);
/*
 * The same, moving the data payloads of its chunks into st rather than
 * *buf, which gets the head, the chunks' headers, the other payloads and
 * what st could not take; the reply's pieces, in order, into *pc, its
 * body NULL (a reply other than 200 is read whole into *buf, its body
 * there, as dataread_recv_reply reads it). 0; -1 as dataread_recv_reply;
 * -2 when its chunks do not parse. On failure st holds nothing.
 */
int dataread_recv_staged(struct wconn *wc, char **buf, size_t *cap,
    struct stage *st, struct piece **pc, size_t *npc, size_t *cappc,
    struct reply *rp);
const char *dataread_reply_message(const struct reply *rp);

/* dataread_core.c: what every thread of the read shares: its failure,
 * pokes to the heartbeat loop, what the heartbeats report, the output. */
/* Stops the read with st and its message (the first failure wins). */
void dataread_fail_locked(struct reader *r, enum status st, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));
/* The same, taking r->mu. */
void dataread_fail(struct reader *r, enum status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A reply of task's worker (at addr) whose chunks do not parse: the read
 * fails with INTERNAL. STEP_FAIL. */
enum step dataread_malformed(struct reader *r, int64_t task, const char *addr);
/* Asks the heartbeat loop to look around now. */
void dataread_poke(struct reader *r);
void dataread_note_range_locked(struct reader *r, const struct range *g);
void dataread_note_lost_locked(struct reader *r, int64_t id);
int dataread_write_out(struct reader *r, struct iovec *iov, size_t n);
int dataread_write_staged(struct reader *r, struct stage *st, size_t n,
    int keep);
int dataread_write_record(struct reader *r, uint32_t type, const char *payload,
    size_t len);
int dataread_write_start(struct reader *r);

/* dataread_source.c: a task's thread, reading its elements from its
 * worker; started and stopped under r->mu. */
struct source *dataread_source_start_locked(struct reader *r, int64_t id,
    const char *addr);
void dataread_source_stop_locked(struct source *t);

/* dataread_rr.c: the thread that reads a round-robin job's rounds. */
void *dataread_rr_main(void *arg);

/* dataread_job.c: the job client: the job opened, heartbeats that report
 * deliveries and take in the task list, the release. */
enum status dataread_job_open(struct reader *r, char *err, size_t errlen);
enum status dataread_heartbeat(struct reader *r, int64_t deadline, char *err,
    size_t errlen);
/* At the end: what was delivered and lost reported before deadline,
 * unless the client is gone already (st NOT_FOUND), and then r->told; the
 * same, and the job client released. */
void dataread_report_last(struct reader *r, enum status st, int64_t deadline);
void dataread_farewell(struct reader *r, enum status st, int64_t deadline);

/* dataread.c, over them all: the heartbeat loop, the end of the read. */

#endif
