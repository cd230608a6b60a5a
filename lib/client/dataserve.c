/*
 * dataserve.c: the worker's data tasks: the task table, a reader thread
 * per task, the framing of a reader's output into chunks, and the HTTP
 * server that hands the chunks to consumers.
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
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "dataserve.h"
#include "datawire.h"
#include "dispatch_client.h"
#include "duration.h"
#include "http1.h"
#include "iov.h"
#include "log.h"
#include "parse.h"
#include "proc.h"
#include "shardmode.h"
#include "splitorder.h"
#include "text.h"
#include "tls.h"
#include "token.h"
#include "vec.h"

extern char **environ;

#define BLOCK_SIZE (256u << 10) /* a block; the largest chunk */
#define ROOM_MIN (16u << 10)    /* the smallest read worth making */
#define PIPE_SIZE (1 << 20)     /* fewer, larger reads from a fast reader */
#define ERR_TAIL 4096
#define REPLY_DEFAULT (1u << 20)
#define REPLY_MAX (64u << 20)
#define REPLY_CHUNKS 4096
#define WAIT_DEFAULT 1000
#define WAIT_MAX 60000
#define REQ_MAX 8192
/*
 * A connection must send each request within request_ms (REQUEST_MS by
 * default) of the last reply (or of its start), unless it holds elements
 * not yet acknowledged: those
 * go back to the job if it closes, to another consumer, so an idle one
 * that holds some is kept (a consumer whose own reader is slow to read
 * what it wrote may pause for minutes). A reply that cannot be sent for
 * SEND_MS is given up. TCP keepalive finds a consumer's host that died.
 */
#define REQUEST_MS 60000
#define SEND_MS 60000
#define CONN_RESERVE 256 /* descriptors kept for closures and readers */
#define CONN_MIN 16
#define CONN_MAX 4096
#define BODY_MAX 65536
#define SPARE_CAP (4u << 20) /* the largest block kept to be filled again */
#define REPORT_MS 250        /* between reports of acknowledged ranges */

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

struct task {
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
	struct task *next;

	pthread_mutex_t mu;
	pthread_cond_t more; /* chunks, an end, fewer held, or the drop */
	pthread_cond_t room; /* a block freed, or the drop */
	int dropped;
	enum tstate state;
	char *error;
	pid_t pid; /* the reader running, 0 */
	struct chunk *head, *tail;
	size_t held; /* chunks out with connections, not acknowledged */
	size_t mem;  /* bytes in blocks, spares too */
	struct block *spare;
	int reading;         /* the reader thread runs: spares are of use */
	struct acked *acked; /* not yet reported (DYNAMIC) */
	size_t nacked, capacked;
	struct round *rounds, **rounds_end;
	int64_t *asked; /* round robin: the last round each consumer asked */
};

struct conn {
	struct dataserve *ds;
	int fd;
	struct tls *tls; /* HTTPS: the session; NULL: plain */
	struct conn *next;
	struct task *ht;    /* the task of the held chunks */
	struct chunk *held; /* the last reply's chunks */
	size_t nheld;
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
	pthread_t accept_th;
	pthread_mutex_t mu;
	pthread_cond_t idle; /* the last thread ended */
	int threads;         /* reader and connection threads */
	int stopping;
	char inc[17];
	int64_t hb_timeout;
	struct task *tasks;
	struct conn *conns;
	pthread_t report_th;
	pthread_cond_t report; /* stopping */
	int report_cancel[2];  /* readable once stopping */
};

/* Threads, counted so that dataserve_stop can wait for them. */

/* Starts fn(arg) detached; ds->mu held. */
static int
thread_start(struct dataserve *ds, void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;
	pthread_t th;
	int rc;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if ((rc = pthread_create(&th, &a, fn, arg)) == 0)
		ds->threads++;
	pthread_attr_destroy(&a);
	return rc == 0 ? 0 : -1;
}

static void
thread_done(struct dataserve *ds)
{
	pthread_mutex_lock(&ds->mu);
	if (--ds->threads == 0)
		pthread_cond_broadcast(&ds->idle);
	pthread_mutex_unlock(&ds->mu);
}

static void
cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}

/* Waits on cv until the monotonic time until (duration_now_ms). */
static void
cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until)
{
	struct timespec ts = {until / 1000, (long)(until % 1000) * 1000000};

	pthread_cond_timedwait(cv, mu, &ts);
}

static struct block *
block_new(size_t cap)
{
	struct block *b = malloc(sizeof(*b) + cap);

	if (b != NULL) {
		b->cap = cap;
		b->refs = 1;
	}
	return b;
}

static struct block *
block_grow(struct block *b, size_t cap)
{
	struct block *nb = realloc(b, sizeof(*b) + cap);

	if (nb != NULL)
		nb->cap = cap;
	return nb;
}

/* Blocks and chunks: under the task's lock. */

/*
 * A block no chunk points into is kept as a spare while the reader runs,
 * for it to fill again: the task's memory grows to its buffer once, and
 * stays there. Memory fresh from the system costs a page fault per page
 * on its first read, more than the read itself.
 */
static void
block_put(struct task *t, struct block *b)
{
	if (b == NULL)
		return;
	/* The reader waits for a block to be freed, or for its own to be
	 * left to it alone. */
	pthread_cond_signal(&t->room);
	if (--b->refs > 0)
		return;
	if (t->reading && !t->dropped && b->cap <= SPARE_CAP) {
		b->next = t->spare;
		t->spare = b;
	} else {
		t->mem -= b->cap;
		free(b);
	}
}

/* Frees the spares. */
static void
spares_free(struct task *t)
{
	while (t->spare != NULL) {
		struct block *b = t->spare;
		t->spare = b->next;
		t->mem -= b->cap;
		free(b);
	}
}

static void
chunks_free(struct task *t, struct chunk *c)
{
	while (c != NULL) {
		struct chunk *next = c->next;
		block_put(t, c->blk);
		free(c);
		c = next;
	}
}

static void
queue_push(struct task *t, struct chunk *c)
{
	c->next = NULL;
	if (t->tail != NULL)
		t->tail->next = c;
	else
		t->head = c;
	t->tail = c;
}

static struct chunk *
queue_pop(struct task *t)
{
	struct chunk *c = t->head;

	if (c != NULL && (t->head = c->next) == NULL)
		t->tail = NULL;
	return c;
}

/* The length of the first element of a chunk's payload. */
static size_t
first_len(enum framing f, const char *p, size_t len)
{
	const char *e;
	uint32_t be;

	if (f == FRAME_LEN32) {
		memcpy(&be, p, 4);
		return 4 + (size_t)ntohl(be);
	}
	e = memchr(p, f == FRAME_LINES ? '\n' : '\0', len);
	return e != NULL ? (size_t)(e - p) + 1 : len;
}

/* The queue's next element, as a chunk of its own; NULL when none. */
static struct chunk *
queue_take_one(struct task *t)
{
	struct chunk *c, *one;
	size_t len;

	while ((c = t->head) != NULL && c->h.count == 0) {
		queue_pop(t);
		c->next = NULL;
		chunks_free(t, c);
	}
	if (c == NULL)
		return NULL;
	if (c->h.count == 1) {
		queue_pop(t);
		c->next = NULL;
		return c;
	}
	if ((one = malloc(sizeof(*one))) == NULL)
		return NULL;
	len = first_len(t->framing, c->p, c->h.len);
	*one = *c;
	one->next = NULL;
	one->h.count = 1;
	one->h.len = (uint32_t)len;
	one->h.flags = 0;
	c->blk->refs++;
	c->p += len;
	c->h.len -= (uint32_t)len;
	c->h.first++;
	c->h.count--;
	return one;
}

static void
round_free(struct task *t, struct round *r)
{
	struct round **pp;

	for (pp = &t->rounds; *pp != r; pp = &(*pp)->next)
		;
	if ((*pp = r->next) == NULL)
		t->rounds_end = pp;
	for (long i = 0; i < r->have; i++)
		chunks_free(t, r->el[i]);
	free(r->el);
	free(r->took);
	free(r);
}

/* Tasks. */

static void
task_unref(struct task *t)
{
	if (atomic_fetch_sub(&t->refs, 1) != 1)
		return;
	chunks_free(t, t->head);
	while (t->rounds != NULL)
		round_free(t, t->rounds);
	free(t->asked);
	spares_free(t);
	close(t->cancel[0]);
	close(t->cancel[1]);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->more);
	pthread_cond_destroy(&t->room);
	free(t->job);
	free(t->dataset);
	free(t->reader);
	free(t->error);
	free(t->acked);
	free(t);
}

/* Stops t's reader and lets go of the table's hold on it. */
static void
task_drop(struct task *t)
{
	char c = 1;

	log_debug("task %" PRIu64 ": dropped", t->id);
	pthread_mutex_lock(&t->mu);
	t->dropped = 1;
	if (t->pid > 0)
		kill(-t->pid, SIGKILL);
	pthread_cond_broadcast(&t->more);
	pthread_cond_broadcast(&t->room);
	pthread_mutex_unlock(&t->mu);
	(void)!write(t->cancel[1], &c, 1);
	task_unref(t);
}

/* Task t of the table, held (task_unref), or NULL. */
static struct task *
task_get(struct dataserve *ds, uint64_t id)
{
	struct task *t;

	pthread_mutex_lock(&ds->mu);
	for (t = ds->tasks; t != NULL && t->id != id; t = t->next)
		;
	if (t != NULL)
		atomic_fetch_add(&t->refs, 1);
	pthread_mutex_unlock(&ds->mu);
	return t;
}

/* An id given as a string or a number, as text. */
static char *
id_text(json_t *v)
{
	char *s = NULL;

	if (json_is_string(v))
		return strdup(json_string_value(v));
	if (json_is_integer(v) &&
	    asprintf(&s, "%" JSON_INTEGER_FORMAT, json_integer_value(v)) < 0)
		return NULL;
	return s;
}

static json_int_t
int_field(json_t *o, const char *name, json_int_t def)
{
	json_t *v = json_object_get(o, name);

	return json_is_integer(v) ? json_integer_value(v) : def;
}

/* Why task object o cannot be read goes to t->bad. */
static void
task_check(struct task *t, json_t *o)
{
	const char *mode = json_string_value(json_object_get(o, "mode"));
	const char *framing = json_string_value(json_object_get(o, "framing"));

	/* file_or_data is resolved by dispatchd: a task has file or data. */
	if (shard_mode_parse(mode, &t->mode) < 0 ||
	    t->mode == SHARD_FILE_OR_DATA)
		snprintf(t->bad, sizeof(t->bad), "mode %.64s is not served",
		    mode != NULL ? mode : "(none)");
	else if (*t->reader == '\0')
		snprintf(t->bad, sizeof(t->bad), "the task has no reader");
	else if (framing != NULL && framing_parse(framing, &t->framing) < 0)
		snprintf(t->bad, sizeof(t->bad), "framing %.64s is unknown",
		    framing);
	else if (*t->dataset == '\0' && t->mode != SHARD_DYNAMIC)
		snprintf(t->bad, sizeof(t->bad), "the task has no dataset");
	else if (t->shard_count < 1 || t->shard_index < 0 ||
	    t->shard_index >= t->shard_count)
		snprintf(t->bad, sizeof(t->bad), "shard %ld of %ld",
		    t->shard_index, t->shard_count);
	else if (t->consumers < 0 || t->consumers > 65536)
		snprintf(t->bad, sizeof(t->bad), "%ld consumers", t->consumers);
}

/* A task from its object in a heartbeat reply. One that cannot be read
 * keeps why, for its thread to report. */
static struct task *
task_new(struct dataserve *ds, json_t *o)
{
	const char *reader = json_string_value(json_object_get(o, "reader"));
	struct task *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	if (pipe2(t->cancel, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(t);
		return NULL;
	}
	t->ds = ds;
	atomic_init(&t->refs, 1);
	t->id = (uint64_t)int_field(o, "id", 0);
	t->job = id_text(json_object_get(o, "job"));
	t->dataset = id_text(json_object_get(o, "dataset"));
	t->reader = strdup(reader != NULL ? reader : "");
	memcpy(t->inc, ds->inc, sizeof(t->inc));
	t->hb_timeout = ds->hb_timeout;
	t->reader_skips = json_is_true(json_object_get(o, "reader_skips"));
	snprintf(t->secret, sizeof(t->secret), "%s",
	    json_string_value(json_object_get(o, "secret")) != NULL ?
	        json_string_value(json_object_get(o, "secret")) :
	        "");
	t->repeat = (uint64_t)int_field(o, "repeat", 1);
	t->seed = (uint64_t)int_field(o, "seed", 0);
	t->shard_index = (long)int_field(o, "shard_index", 0);
	t->shard_count = (long)int_field(o, "shard_count", 1);
	t->consumers = (long)int_field(o, "consumers", 0);
	t->buffer = ds->c.buffer;
	t->block = ds->c.buffer < BLOCK_SIZE ? ds->c.buffer : BLOCK_SIZE;
	t->framing = FRAME_LINES;
	if (t->job == NULL)
		t->job = strdup("");
	if (t->dataset == NULL)
		t->dataset = strdup("");
	if (t->job == NULL || t->dataset == NULL || t->reader == NULL) {
		close(t->cancel[0]);
		close(t->cancel[1]);
		free(t->job);
		free(t->dataset);
		free(t->reader);
		free(t);
		return NULL;
	}
	task_check(t, o);
	pthread_mutex_init(&t->mu, NULL);
	cond_init(&t->more);
	cond_init(&t->room);
	t->rounds_end = &t->rounds;
	if (t->consumers > 0 && t->bad[0] == '\0') {
		/* Without it the task cannot be read: it fails, saying so. */
		t->asked = malloc((size_t)t->consumers * sizeof(*t->asked));
		if (t->asked == NULL)
			snprintf(t->bad, sizeof(t->bad), "out of memory");
		for (long i = 0; t->asked != NULL && i < t->consumers; i++)
			t->asked[i] = -1;
	}
	t->reading = 1;
	return t;
}

/* The reader thread's state: the block it fills and the split it reads. */
struct skip {
	uint64_t a, b;
};

struct rd {
	struct task *t;
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
	size_t logged;   /* of tail, copied to our log (-v) */
	size_t bsize;    /* new blocks' size: grows with the elements */
	const char *why; /* the reading cannot go on: out of memory, say */
};

struct split {
	const char *text;
	uint64_t index, epoch, seq;
	json_t *skip; /* ranges already delivered (DYNAMIC) */
};

/* Calls to dispatchd. */

/* Text fit for a JSON string: stderr may be any bytes. */
static void
make_utf8(char *s)
{
	if (text_utf8_valid(s, strlen(s)))
		return;
	for (; *s != '\0'; s++)
		if ((unsigned char)*s >= 0x80)
			*s = '?';
}

/* Tells dispatchd the task finished or failed, until it is heard (or
 * the task is dropped). */
static void
task_report(struct rd *rd, const char *state, const char *message)
{
	struct task *t = rd->t;
	json_t *body = json_pack("{s:s}", "state", state);
	enum status st;

	if (message != NULL)
		json_object_set_new(body, "message", json_string(message));
	st = dc_task_report(rd->dc, t->ds->worker, t->inc, t->id, body,
	    HTTP_NO_DEADLINE);
	json_decref(body);
	if (st != ST_OK && st != ST_CANCELLED)
		log_info("task %" PRIu64 ": cannot report it %s: %s", t->id,
		    state, dispatch_client_error(rd->dc));
}

/* The task ends with an error, which consumers get after what is
 * buffered; reported to dispatchd unless it is dispatchd's own. */
static void
task_fail(struct rd *rd, char *msg, int report)
{
	struct task *t = rd->t;

	make_utf8(msg);
	log_info("task %" PRIu64 " of job %s failed: %s", t->id, t->job, msg);
	pthread_mutex_lock(&t->mu);
	if (t->state == T_RUNNING) {
		t->state = T_FAILED;
		t->error = strdup(msg);
	}
	pthread_cond_broadcast(&t->more);
	pthread_mutex_unlock(&t->mu);
	if (report)
		task_report(rd, "failed", msg);
}

static void
task_finish(struct rd *rd, int report)
{
	struct task *t = rd->t;

	log_debug("task %" PRIu64 " of job %s: read to the end", t->id, t->job);
	pthread_mutex_lock(&t->mu);
	if (t->state == T_RUNNING)
		t->state = T_FINISHED;
	pthread_cond_broadcast(&t->more);
	pthread_mutex_unlock(&t->mu);
	if (report)
		task_report(rd, "finished", NULL);
}

/* Waits ms, or less if the task is dropped. */
static void
rd_nap(struct rd *rd, int ms)
{
	struct pollfd pf = {rd->t->cancel[0], POLLIN, 0};

	poll(&pf, 1, ms);
}

/* Framing: the reader's output into chunks. */

/* The size of the pending element when its header says it (len32). */
static size_t
pending_size(const struct rd *rd)
{
	uint32_t be;

	if (rd->t->framing != FRAME_LEN32 || rd->fill - rd->s < 4)
		return 0;
	memcpy(&be, rd->blk->data + rd->s, 4);
	return 4 + (size_t)ntohl(be);
}

/* A spare of at least size bytes, taken from the list; NULL when none. */
static struct block *
spare_take(struct task *t, size_t size)
{
	struct block **pp, *b;

	for (pp = &t->spare; *pp != NULL; pp = &(*pp)->next)
		if ((*pp)->cap >= size) {
			b = *pp;
			*pp = b->next;
			b->refs = 1;
			return b;
		}
	return NULL;
}

/*
 * Round robin: whether every consumer waits for the newest round, which is
 * not full, with nothing queued to fill it. Its first elements may hold
 * the whole buffer (a block is freed only when all its elements are), and
 * no more can be read: a block beyond the buffer is given then. No
 * consumer is ahead, so this is the round's own elements, no more. Under
 * t's lock.
 */
static int
rounds_starved(const struct task *t)
{
	const struct round *last = NULL;

	if (t->consumers == 0 || t->asked == NULL || t->head != NULL)
		return 0;
	for (const struct round *r = t->rounds; r != NULL; r = r->next)
		last = r;
	if (last == NULL || last->have >= t->consumers)
		return 0;
	for (long i = 0; i < t->consumers; i++)
		if (t->asked[i] != (int64_t)last->r)
			return 0;
	return 1;
}

/*
 * Makes room in the block for a read of at least ROOM_MIN, and for the
 * whole pending element when its size is known: the block is used again
 * from its start once no chunk points into it, grown while nothing but
 * the pending element is in it, or else replaced by a spare or a new one
 * (the pending bytes move along). Waits while the task's buffer is full,
 * except for a block that would be its only one: one element may be
 * larger than the buffer, though not than a chunk's 32-bit length, nor
 * a round-robin task's rounds_starved. 0, or -1 when the task is dropped
 * or the reading cannot go on.
 */
static int
rd_room(struct rd *rd)
{
	struct task *t = rd->t;
	struct block *b = rd->blk, *nb = NULL;
	size_t pend = b != NULL ? rd->fill - rd->s : 0;
	size_t need = pend + ROOM_MIN, size, add = 0;
	enum { REUSE, GROW, SPARE, FRESH } how;

	if (pending_size(rd) > need)
		need = pending_size(rd);
	if (b != NULL && b->cap - rd->s >= need)
		return 0;
	if (need > UINT32_MAX) {
		rd->why = "an element is larger than 4 GiB";
		return -1;
	}
	if (need > rd->bsize && need <= SPARE_CAP)
		rd->bsize = need;
	size = need > rd->bsize ? need : rd->bsize;
	pthread_mutex_lock(&t->mu);
	for (;;) {
		if (t->dropped) {
			pthread_mutex_unlock(&t->mu);
			return -1;
		}
		if (b != NULL && b->refs == 1) {
			how = b->cap >= need ? REUSE : GROW;
			add = how == GROW ? size - b->cap : 0;
			if (how == REUSE || t->mem + add <= t->buffer ||
			    t->mem == b->cap)
				break;
		} else if ((nb = spare_take(t, size)) != NULL) {
			how = SPARE;
			break;
		} else if (t->mem + size <= t->buffer || t->mem == 0 ||
		    rounds_starved(t)) {
			how = FRESH;
			add = size;
			break;
		}
		/* Spares too small for this element make room. */
		if (t->spare != NULL) {
			struct block *sb = t->spare;
			t->spare = sb->next;
			t->mem -= sb->cap;
			free(sb);
			continue;
		}
		pthread_cond_wait(&t->room, &t->mu);
	}
	t->mem += add;
	pthread_mutex_unlock(&t->mu);
	switch (how) {
	case REUSE: memmove(b->data, b->data + rd->s, pend); break;
	case GROW:
		/* Nothing but the pending element is in it. */
		memmove(b->data, b->data + rd->s, pend);
		if ((nb = block_grow(b, size)) != NULL)
			rd->blk = nb;
		break;
	case FRESH:
		nb = block_new(size);
		/* FALLTHROUGH */
	case SPARE:
		if (nb == NULL)
			break;
		if (pend > 0)
			memcpy(nb->data, b->data + rd->s, pend);
		pthread_mutex_lock(&t->mu);
		block_put(t, b);
		pthread_mutex_unlock(&t->mu);
		rd->blk = nb;
		break;
	}
	if (how != REUSE && nb == NULL) {
		pthread_mutex_lock(&t->mu);
		t->mem -= add;
		pthread_mutex_unlock(&t->mu);
		rd->why = "out of memory";
		return -1;
	}
	rd->cstart = rd->s = 0;
	rd->fill = pend;
	return 0;
}

/* The end of the pending element, or 0 while it is not all there. */
static size_t
elem_end(struct rd *rd)
{
	const char *d = rd->blk->data, *p;
	size_t n;

	if (rd->t->framing == FRAME_LEN32) {
		n = pending_size(rd);
		return n != 0 && rd->fill - rd->s >= n ? rd->s + n : 0;
	}
	p = memchr(d + rd->s + rd->seen,
	    rd->t->framing == FRAME_LINES ? '\n' : 0,
	    rd->fill - rd->s - rd->seen);
	if (p == NULL) {
		rd->seen = rd->fill - rd->s;
		return 0;
	}
	return (size_t)(p - d) + 1;
}

/* Whether element rd->e is served: not delivered already, and in this
 * worker's shard (DATA). */
static int
elem_kept(struct rd *rd)
{
	struct task *t = rd->t;

	if (rd->e < rd->resume)
		return 0;
	while (rd->sk < rd->nskip && rd->skip[rd->sk].b <= rd->e)
		rd->sk++;
	if (rd->sk < rd->nskip && rd->skip[rd->sk].a <= rd->e)
		return 0;
	return t->mode != SHARD_DATA ||
	    rd->ee % (uint64_t)t->shard_count == (uint64_t)t->shard_index;
}

/* Queues the open chunk (with flags, even when empty). */
static void
rd_publish(struct rd *rd, uint32_t flags)
{
	struct task *t = rd->t;
	struct chunk *c;

	if (rd->count == 0 && flags == 0)
		return;
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		rd->why = "out of memory";
		return;
	}
	c->h.magic = CHUNK_MAGIC;
	c->h.type = CHUNK_DATA;
	c->h.seq = rd->seq;
	c->h.first = rd->count > 0 ? rd->first : rd->e;
	c->h.count = rd->count;
	c->h.len = (uint32_t)(rd->s - rd->cstart);
	c->h.flags = flags;
	pthread_mutex_lock(&t->mu);
	if (c->h.len > 0) {
		c->p = rd->blk->data + rd->cstart;
		c->blk = rd->blk;
		c->blk->refs++;
	}
	queue_push(t, c);
	pthread_cond_broadcast(&t->more);
	pthread_mutex_unlock(&t->mu);
	rd->count = 0;
	rd->cstart = rd->s;
}

/*
 * Takes the element that ends at end into the open chunk, or drops it:
 * a chunk never spans a dropped element (its elements are consecutive),
 * and holds up to BLOCK_SIZE bytes unless one element is larger.
 */
static void
rd_element(struct rd *rd, size_t end)
{
	if (!elem_kept(rd)) {
		rd_publish(rd, 0);
		rd->cstart = end;
	} else {
		if (rd->count > 0 && end - rd->cstart > BLOCK_SIZE)
			rd_publish(rd, 0);
		if (rd->count++ == 0)
			rd->first = rd->e;
	}
	rd->s = end;
	rd->seen = 0;
	rd->e++;
	rd->ee++;
}

/* The elements read so far into chunks, queued at once: a slow reader's
 * elements reach consumers without waiting for a chunk to fill. */
static void
rd_scan(struct rd *rd)
{
	size_t end;

	while ((end = elem_end(rd)) != 0)
		rd_element(rd, end);
	rd_publish(rd, 0);
}

/* The split's last chunk carries CHUNK_SPLIT_END and makes first+count
 * the split's element count, so it is empty when the last elements were
 * dropped. */
static void
rd_split_end(struct rd *rd)
{
	if (rd->count > 0 && rd->first + rd->count != rd->e)
		rd_publish(rd, 0);
	rd_publish(rd, CHUNK_SPLIT_END);
}

/* The reader's stderr: its tail kept for a message, its lines logged
 * with -v. */
static void
tail_add(struct rd *rd, const char *p, size_t n)
{
	struct buf *b = &rd->tail;
	char *nl;

	buf_append(b, p, n);
	while (log_verbose() && b->data != NULL &&
	    (nl = memchr(b->data + rd->logged, '\n', b->len - rd->logged)) !=
	        NULL) {
		log_debug("task %" PRIu64 " reader: %.*s", rd->t->id,
		    (int)(nl - b->data - rd->logged), b->data + rd->logged);
		rd->logged = (size_t)(nl - b->data) + 1;
	}
	if (b->len > 2 * ERR_TAIL) {
		size_t cut = b->len - ERR_TAIL;
		memmove(b->data, b->data + cut, ERR_TAIL);
		b->len = ERR_TAIL;
		rd->logged = rd->logged > cut ? rd->logged - cut : 0;
	}
}

static void
tail_last_line(const struct rd *rd, char *out, size_t size)
{
	const char *d = rd->tail.data != NULL ? rd->tail.data : "";
	size_t end = rd->tail.len, start;

	while (end > 0 && (d[end - 1] == '\n' || d[end - 1] == '\r'))
		end--;
	for (start = end; start > 0 && d[start - 1] != '\n'; start--)
		;
	snprintf(out, size, "%.*s", (int)(end - start), d + start);
}

/* Readers. */

/* What a reader finds in its environment, "NAME=value" each. */
static int
reader_vars(struct rd *rd, const struct split *sp, uint64_t skip0,
    char *set[12])
{
	struct task *t = rd->t;
	int bad = 0;

	memset(set, 0, 12 * sizeof(char *));
	bad |= asprintf(&set[0], "MUSTER_SPLIT=%s", sp->text) < 0;
	bad |= asprintf(&set[1], "MUSTER_SPLIT_INDEX=%" PRIu64, sp->index) < 0;
	bad |= asprintf(&set[2], "MUSTER_SPLIT_SKIP=%" PRIu64, skip0) < 0;
	bad |= asprintf(&set[3], "MUSTER_EPOCH=%" PRIu64, sp->epoch) < 0;
	bad |= asprintf(&set[4], "MUSTER_SEQ=%" PRIu64, sp->seq) < 0;
	bad |= asprintf(&set[5], "MUSTER_DATASET=%s", t->dataset) < 0;
	bad |= asprintf(&set[6], "MUSTER_JOB=%s", t->job) < 0;
	bad |= asprintf(&set[7], "MUSTER_TASK=%" PRIu64, t->id) < 0;
	bad |= asprintf(&set[8], "MUSTER_WORKER=%s", t->ds->worker) < 0;
	bad |= asprintf(&set[9], "MUSTER_SHARD_INDEX=%ld", t->shard_index) < 0;
	bad |= asprintf(&set[10], "MUSTER_SHARD_COUNT=%ld", t->shard_count) < 0;
	return bad ? -1 : 0;
}

static void
free_vars(char *set[12])
{
	for (int i = 0; i < 12; i++)
		free(set[i]);
}

/* Starts the reader on sp, stdout and stderr to pipes (*out, *err);
 * its pid, or -1 with why in msg. */
static pid_t
reader_spawn(struct rd *rd, const struct split *sp, uint64_t skip0, int *out,
    int *err, char *msg, size_t msglen)
{
	struct task *t = rd->t;
	char *argv[] = {"/bin/sh", "-c", t->reader, NULL}, *set[12], **env;
	int op[2] = {-1, -1}, ep[2] = {-1, -1}, null = -1, e;
	pid_t pid = -1;

	snprintf(msg, msglen, "%s", strerror(ENOMEM));
	if (reader_vars(rd, sp, skip0, set) < 0 ||
	    (env = proc_env_child(environ, set)) == NULL) {
		free_vars(set);
		return -1;
	}
	if (pipe2(op, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0 ||
	    (null = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(msg, msglen, "%s", strerror(errno));
	} else {
		struct proc_spec spec = {argv, env, rd->t->ds->c.unblock,
		    SIGKILL, null, op[1], ep[1], NULL};
		(void)fcntl(op[0], F_SETPIPE_SZ, PIPE_SIZE);
		pid = proc_spawn(&spec, &e, msg, msglen);
	}
	free(env);
	free_vars(set);
	if (op[1] >= 0)
		close(op[1]);
	if (ep[1] >= 0)
		close(ep[1]);
	if (null >= 0)
		close(null);
	if (pid < 0) {
		if (op[0] >= 0)
			close(op[0]);
		if (ep[0] >= 0)
			close(ep[0]);
		return -1;
	}
	pthread_mutex_lock(&t->mu);
	/* Dropped while it started: nothing else will stop it. */
	if (t->dropped)
		kill(-pid, SIGKILL);
	t->pid = pid;
	pthread_mutex_unlock(&t->mu);
	*out = op[0];
	*err = ep[0];
	return pid;
}

/*
 * Reads the reader's stdout into chunks and its stderr into the tail
 * until both close. 0, or -1 when the task is dropped or the reading
 * cannot go on.
 */
static int
rd_pump(struct rd *rd, int out, int err)
{
	struct pollfd pf[3] = {{out, POLLIN, 0}, {err, POLLIN, 0},
	    {rd->t->cancel[0], POLLIN, 0}};
	char b[4096];
	ssize_t n;

	while (pf[0].fd >= 0 || pf[1].fd >= 0) {
		if (pf[0].fd >= 0 && rd_room(rd) < 0)
			return -1;
		if (poll(pf, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (pf[2].revents != 0)
			return -1;
		if (pf[1].revents != 0) {
			if ((n = read(err, b, sizeof(b))) > 0)
				tail_add(rd, b, (size_t)n);
			else if (n == 0 || errno != EINTR)
				pf[1].fd = -1;
		}
		if (pf[0].revents != 0) {
			n = read(out, rd->blk->data + rd->fill,
			    rd->blk->cap - rd->fill);
			if (n > 0) {
				rd->fill += (size_t)n;
				rd_scan(rd);
			} else if (n == 0 || errno != EINTR) {
				pf[0].fd = -1;
			}
		}
		if (rd->why != NULL)
			return -1;
	}
	return 0;
}

/* Waits for the reader to end; the rest of its process group goes with
 * it (stopped before the leader is reaped, so that its id is not
 * reused meanwhile). */
static int
reader_wait(struct task *t, pid_t pid)
{
	siginfo_t si;
	int status = 0;

	while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 &&
	    errno == EINTR)
		;
	pthread_mutex_lock(&t->mu);
	t->pid = 0;
	pthread_mutex_unlock(&t->mu);
	kill(-pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

/*
 * The split's skip ranges, sorted and merged by dispatchd: *skip0 is the
 * end of the first when it begins at 0 (a reader that skips starts
 * there); the worker drops the rest, and that one too unless the reader
 * skips.
 */
static int
rd_skips(struct rd *rd, json_t *ranges, uint64_t *skip0)
{
	size_t i, n = json_array_size(ranges);
	json_t *r;

	*skip0 = 0;
	rd->nskip = rd->sk = 0;
	if (n == 0)
		return 0;
	free(rd->skip);
	if ((rd->skip = calloc(n, sizeof(*rd->skip))) == NULL)
		return -1;
	json_array_foreach(ranges, i, r) {
		json_t *a = json_array_get(r, 0), *b = json_array_get(r, 1);
		if (!json_is_integer(a) || !json_is_integer(b) ||
		    json_integer_value(a) < 0 ||
		    json_integer_value(b) < json_integer_value(a))
			return -1;
		rd->skip[rd->nskip].a = (uint64_t)json_integer_value(a);
		rd->skip[rd->nskip].b = (uint64_t)json_integer_value(b);
		if (i == 0 && rd->skip[0].a == 0) {
			*skip0 = rd->skip[0].b;
			if (rd->t->reader_skips)
				continue;
		}
		rd->nskip++;
	}
	return 0;
}

/* The reader failed: the task fails, with its message. */
static void
reader_failed(struct rd *rd, const struct split *sp, int status)
{
	char how[64], last[600], *msg;

	tail_last_line(rd, last, sizeof(last));
	if (asprintf(&msg, "reader %s on split '%s' (index %" PRIu64 ")%s%s",
	        proc_status_text(status, how, sizeof(how)), sp->text, sp->index,
	        last[0] != '\0' ? ": " : "", last) < 0)
		return;
	task_fail(rd, msg, 1);
	free(msg);
}

/* The reader's output has ended: the last element is completed, or
 * the output was cut inside one (len32). 0, or -1 with the task failed. */
static int
rd_last_element(struct rd *rd, const struct split *sp)
{
	char *msg;

	if (rd->fill == rd->s)
		return 0;
	if (rd->t->framing != FRAME_LEN32) {
		/* rd_room left room for it before the read that saw EOF. */
		rd->blk->data[rd->fill++] =
		    rd->t->framing == FRAME_LINES ? '\n' : '\0';
		rd_scan(rd);
		return 0;
	}
	if (asprintf(&msg,
	        "reader output on split '%s' (index %" PRIu64
	        ") ends inside a len32 element",
	        sp->text, sp->index) >= 0) {
		task_fail(rd, msg, 1);
		free(msg);
	}
	return -1;
}

/*
 * Whether a reader's status says a signal killed it (an OOM kill, say):
 * killed itself, or a shell that ran it saying so (128 + the signal).
 */
static int
killed(int status)
{
	return WIFSIGNALED(status) ||
	    (WIFEXITED(status) && WEXITSTATUS(status) > 128 &&
	        WEXITSTATUS(status) < 128 + 32);
}

/*
 * A reader killed by a signal is run again on its split, up to
 * reader_retries times: the elements it wrote are served already, so the
 * next one's are dropped up to there (or it starts there, if it skips),
 * and what it was writing when it died goes.
 */
static int
rd_again(struct rd *rd, const struct split *sp, int status, int tries)
{
	char how[64];

	if (!killed(status) || tries >= rd->t->ds->c.reader_retries)
		return 0;
	log_info("task %" PRIu64 ": reader %s on split '%s' (index %" PRIu64
	         "): reading it again from element %" PRIu64 " (%d of %ld)",
	    rd->t->id, proc_status_text(status, how, sizeof(how)), sp->text,
	    sp->index, rd->e, tries + 1, rd->t->ds->c.reader_retries);
	rd->resume = rd->e;
	if (rd->blk != NULL)
		rd->fill = rd->s;
	rd->cstart = rd->s;
	rd->seen = 0;
	rd->count = 0;
	return 1;
}

/* Reads split sp whole: 0, or -1 when the task stopped (dropped, or
 * failed). */
static int
read_split(struct rd *rd, const struct split *sp)
{
	struct task *t = rd->t;
	char msg[512];
	uint64_t skip0, ee0 = rd->ee;
	int out, err, status, rc, tries = 0;
	pid_t pid;

	if (rd_skips(rd, sp->skip, &skip0) < 0) {
		snprintf(msg, sizeof(msg), "bad skip ranges for seq %" PRIu64,
		    sp->seq);
		task_fail(rd, msg, 1);
		return -1;
	}
	rd->seq = sp->seq;
	rd->resume = 0;
again:
	rd->sk = 0;
	if (t->reader_skips && rd->resume > skip0)
		skip0 = rd->resume;
	rd->e = t->reader_skips ? skip0 : 0;
	rd->ee = ee0 + rd->e;
	rd->count = 0;
	buf_reset(&rd->tail);
	rd->logged = 0;
	if ((pid = reader_spawn(rd, sp, skip0, &out, &err, msg, sizeof(msg))) <
	    0) {
		tail_add(rd, msg, strlen(msg));
		reader_failed(rd, sp, 127 << 8);
		return -1;
	}
	rc = rd_pump(rd, out, err);
	close(out);
	close(err);
	if (rc < 0)
		kill(-pid, SIGKILL);
	status = reader_wait(t, pid);
	if (rc == 0 && rd->why == NULL) {
		if (status != 0 && rd_again(rd, sp, status, tries++))
			goto again;
		if (status != 0) {
			reader_failed(rd, sp, status);
			return -1;
		}
		if (rd_last_element(rd, sp) < 0)
			return -1;
		rd_split_end(rd);
	}
	if (rd->why != NULL) {
		snprintf(msg, sizeof(msg),
		    "split '%.200s' (index %" PRIu64 "): %s", sp->text,
		    sp->index, rd->why);
		task_fail(rd, msg, 1);
		return -1;
	}
	return rc;
}

/* The static modes: the splits this worker's mode gives it, epoch after
 * epoch. */

/* The dataset's splits, one per line, cut in place in text; *n of them. */
static char **
fetch_splits(struct rd *rd, struct buf *text, size_t *n)
{
	struct task *t = rd->t;
	char **v = NULL, *p, *msg;
	enum status st;

	st = dc_splits(rd->dc, t->dataset, HTTP_NO_DEADLINE, text);
	if (st == ST_CANCELLED)
		return NULL;
	*n = 0;
	for (p = text->data; st == ST_OK && p != NULL && *p != '\0'; (*n)++)
		if ((p = strchr(p, '\n')) != NULL)
			p++;
	if (st == ST_OK && *n > 0 && (v = calloc(*n, sizeof(*v))) != NULL) {
		p = text->data;
		for (size_t i = 0; i < *n; i++) {
			v[i] = p;
			if ((p = strchr(p, '\n')) != NULL)
				*p++ = '\0';
		}
		return v;
	}
	if (asprintf(&msg, "cannot read the splits of dataset %s: %s",
	        t->dataset,
	        st != ST_OK ? dispatch_client_error(rd->dc) :
	            *n == 0 ? "there are none" :
	                      strerror(ENOMEM)) >= 0) {
		task_fail(rd, msg, 1);
		free(msg);
	}
	return NULL;
}

static void
run_static(struct rd *rd)
{
	struct task *t = rd->t;
	struct buf text = {0};
	uint32_t *order = NULL;
	char **splits;
	size_t n;

	if ((splits = fetch_splits(rd, &text, &n)) == NULL)
		goto out;
	if ((order = calloc(n, sizeof(*order))) == NULL) {
		char msg[] = "out of memory";
		task_fail(rd, msg, 1);
		goto out;
	}
	for (uint64_t ep = 0; t->repeat == 0 || ep < t->repeat; ep++) {
		size_t nread = 0;
		split_order(t->seed, ep, order, n);
		rd->ee = 0;
		for (size_t p = 0; p < n; p++) {
			struct split sp = {splits[order[p]], order[p], ep,
			    ep * n + p, NULL};
			if (t->mode == SHARD_FILE &&
			    p % (size_t)t->shard_count !=
			        (size_t)t->shard_index)
				continue;
			if (read_split(rd, &sp) < 0)
				goto out;
			nread++;
		}
		/* A shard without a split would repeat nothing for ever. */
		if (nread == 0)
			break;
	}
	task_finish(rd, 1);
out:
	free(order);
	free(splits);
	buf_free(&text);
}

/* DYNAMIC: splits leased from dispatchd, --lease of them ahead. */

/* Leases more splits into waiting; *end once the job is finished. 0, or
 * -1 when the task is to stop. */
static int
lease(struct rd *rd, json_t *waiting, int *end)
{
	struct task *t = rd->t;
	struct dataserve *ds = t->ds;
	size_t have = json_array_size(waiting);
	int64_t hb = t->hb_timeout, wait = have > 0 ? 0 : hb / 2;
	char *msg;
	enum status st;
	json_t *reply;

	/* A request whose reply is lost is sent again with the same id
	 * (below): dispatchd answers it with the same splits. */
	st = dc_lease(rd->dc, ds->worker, t->inc, t->id,
	    (long)((size_t)ds->c.lease - have), rd->lease_id, wait,
	    duration_now_ms() + hb + 5000, &reply);
	if (st == ST_OK) {
		json_t *v;
		size_t i;
		json_array_foreach(json_object_get(reply, "splits"), i, v)
			json_array_append(waiting, v);
		*end = json_is_true(json_object_get(reply, "end"));
		rd->lease_id++;
		json_decref(reply);
		return 0;
	}
	switch (st) {
	case ST_CANCELLED: return -1;
	case ST_FAILED_PRECONDITION:
		/* The job failed: dispatchd knows; consumers learn it after
		 * what is buffered. */
		if (asprintf(&msg, "%s", dispatch_client_error(rd->dc)) >= 0) {
			task_fail(rd, msg, 0);
			free(msg);
		}
		return -1;
	case ST_NOT_FOUND:
	case ST_ABORTED:
		/* No longer this worker's: it leaves the task list soon. */
		log_debug("task %" PRIu64 ": %s", t->id,
		    dispatch_client_error(rd->dc));
		return -1;
	default:
		log_debug("task %" PRIu64 ": leasing splits: %s", t->id,
		    dispatch_client_error(rd->dc));
		rd_nap(rd, 1000);
		return 0;
	}
}

/* A leased split's object as a split. */
static int
split_of(json_t *o, struct split *sp)
{
	json_t *seq = json_object_get(o, "seq");
	json_t *text = json_object_get(o, "split");

	if (!json_is_integer(seq) || !json_is_string(text))
		return -1;
	sp->text = json_string_value(text);
	sp->seq = (uint64_t)json_integer_value(seq);
	sp->index = (uint64_t)int_field(o, "index", 0);
	sp->epoch = (uint64_t)int_field(o, "epoch", 0);
	sp->skip = json_object_get(o, "skip");
	return 0;
}

static void
run_dynamic(struct rd *rd)
{
	struct task *t = rd->t;
	size_t low = ((size_t)t->ds->c.lease + 1) / 2;
	json_t *waiting = json_array(), *o;
	struct split sp;
	int end = 0, rc;

	for (;;) {
		if (!end && json_array_size(waiting) < low) {
			size_t had = json_array_size(waiting);
			int64_t start = duration_now_ms();
			if (lease(rd, waiting, &end) < 0)
				break;
			/* An empty answer to a long poll at once: do not spin
			 * on a dispatchd that does not wait. */
			if (had == 0 && json_array_size(waiting) == 0 && !end &&
			    duration_now_ms() - start < 100)
				rd_nap(rd, 100);
		}
		if (json_array_size(waiting) == 0) {
			if (end) {
				task_finish(rd, 0);
				break;
			}
			continue;
		}
		o = json_incref(json_array_get(waiting, 0));
		json_array_remove(waiting, 0);
		if (split_of(o, &sp) < 0) {
			char msg[] =
			    "dispatchd leased a split without seq or text";
			task_fail(rd, msg, 1);
			json_decref(o);
			break;
		}
		rc = read_split(rd, &sp);
		json_decref(o);
		if (rc < 0)
			break;
	}
	json_decref(waiting);
}

static void *
task_main(void *arg)
{
	struct task *t = arg;
	struct dataserve *ds = t->ds;
	struct rd rd = {.t = t, .bsize = t->block, .lease_id = 1};
	char err[512];

	log_debug("task %" PRIu64 " of job %s: %s, dataset %s", t->id, t->job,
	    t->bad[0] == '\0' ? shard_mode_name(t->mode) : "?", t->dataset);
	if ((rd.dc = dispatch_client_new(ds->dispatcher, err, sizeof(err))) ==
	    NULL) {
		task_fail(&rd, err, 0);
		goto out;
	}
	dispatch_client_set_cancel(rd.dc, t->cancel[0]);
	if (t->bad[0] != '\0')
		task_fail(&rd, t->bad, 1);
	else if (t->mode == SHARD_DYNAMIC)
		run_dynamic(&rd);
	else
		run_static(&rd);
out:
	pthread_mutex_lock(&t->mu);
	t->reading = 0;
	spares_free(t);
	block_put(t, rd.blk);
	pthread_mutex_unlock(&t->mu);
	dispatch_client_free(rd.dc);
	free(rd.skip);
	buf_free(&rd.tail);
	task_unref(t);
	thread_done(ds);
	return NULL;
}

/* The HTTP server: a thread per connection, GET only. */

struct req {
	struct http1_request h; /* method, path, query, token, keep */
	size_t len;             /* of the request, body included */
};

static const char *
reason(int code)
{
	switch (code) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 412: return "Precondition Failed";
	case 413: return "Payload Too Large";
	case 429: return "Too Many Requests";
	default: return "Error";
	}
}

/* Writes all of iov (changing it); 0, or -1 when the peer is gone. */
static int
send_iov(struct conn *c, struct iovec *iov, size_t n)
{
	int fd = c->fd;

	/* HTTPS: each buffer in turn, into the session's records. */
	for (size_t i = 0; c->tls != NULL && i < n; i++) {
		const char *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;
		while (left > 0) {
			ssize_t w = tls_send(c->tls, p, left);
			if (w <= 0)
				return -1; /* gone, or SEND_MS passed */
			p += w;
			left -= (size_t)w;
		}
	}
	if (c->tls != NULL)
		return 0;
	while (n > 0) {
		struct msghdr m = {0};
		ssize_t w;
		m.msg_iov = iov;
		m.msg_iovlen = n < IOV_MAX ? n : IOV_MAX;
		if ((w = sendmsg(fd, &m, MSG_NOSIGNAL)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		n = iov_advance(&iov, n, (size_t)w);
	}
	return 0;
}

static int
send_simple(struct conn *c, int code, const char *ctype, const char *body,
    size_t len, int keep)
{
	char head[256];
	struct iovec iov[2];
	int n = snprintf(head, sizeof(head),
	    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n",
	    code, reason(code), ctype, len,
	    keep ? "" : "Connection: close\r\n");

	iov[0] = (struct iovec){head, (size_t)n};
	iov[1] = (struct iovec){(void *)body, len};
	return send_iov(c, iov, len > 0 ? 2 : 1);
}

static int
send_error(struct conn *c, enum status st, int keep, const char *fmt, ...)
{
	char msg[512], *s;
	va_list ap;
	json_t *o;
	int rc;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	make_utf8(msg);
	o = json_pack("{s:{s:s,s:s}}", "error", "code", status_name(st),
	    "message", msg);
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	rc = send_simple(c, status_http(st), "application/json",
	    s != NULL ? s : "{}", s != NULL ? strlen(s) : 2, keep);
	free(s);
	return rc;
}

static void
wire_hdr(const struct chunk_hdr *h, struct chunk_hdr *w)
{
	w->magic = htole32(h->magic);
	w->type = htole32(h->type);
	w->seq = htole64(h->seq);
	w->first = htole64(h->first);
	w->count = htole32(h->count);
	w->len = htole32(h->len);
	w->flags = htole32(h->flags);
	w->pad = 0;
}

/* A 200 reply of the chunks of list (none: an empty body), written from
 * where they lie. */
static int
send_chunks(struct conn *c, const struct chunk *list, int keep)
{
	size_t n = 0, body = 0, k = 1, i = 0;
	const struct chunk *p;
	struct chunk_hdr *wire;
	struct iovec *iov;
	char head[256];
	int rc = -1;

	for (p = list; p != NULL; p = p->next) {
		n++;
		body += sizeof(struct chunk_hdr) + p->h.len;
	}
	iov = malloc((2 * n + 1) * sizeof(*iov));
	wire = malloc((n > 0 ? n : 1) * sizeof(*wire));
	if (iov != NULL && wire != NULL) {
		iov[0].iov_base = head;
		iov[0].iov_len = (size_t)snprintf(head, sizeof(head),
		    "HTTP/1.1 200 OK\r\nContent-Type: "
		    "application/x-muster-chunks\r\nContent-Length: %zu\r\n%s\r\n",
		    body, keep ? "" : "Connection: close\r\n");
		for (p = list; p != NULL; p = p->next, i++) {
			wire_hdr(&p->h, &wire[i]);
			iov[k++] = (struct iovec){&wire[i], sizeof(wire[i])};
			if (p->h.len > 0)
				iov[k++] =
				    (struct iovec){(void *)p->p, p->h.len};
		}
		rc = send_iov(c, iov, k);
	}
	free(iov);
	free(wire);
	return rc;
}

/* CHUNK_END, or CHUNK_ERROR with the task's message. */
static int
send_end(struct conn *c, const char *error, int keep)
{
	struct chunk end = {0};

	end.h.magic = CHUNK_MAGIC;
	end.h.type = error != NULL ? CHUNK_ERROR : CHUNK_END;
	if (error != NULL) {
		end.p = error;
		end.h.len = (uint32_t)strlen(error);
	}
	return send_chunks(c, &end, keep);
}

/*
 * Notes chunks as acknowledged, for dispatchd: what a consumer delivered
 * counts even if it dies before it says so. A range that follows the
 * last one extends it. Under t's lock.
 */
static void
acked_add(struct task *t, const struct chunk *list)
{
	for (const struct chunk *c = list; c != NULL; c = c->next) {
		struct acked *a =
		    t->nacked > 0 ? &t->acked[t->nacked - 1] : NULL;
		int64_t total = c->h.flags & CHUNK_SPLIT_END ?
		    (int64_t)(c->h.first + c->h.count) :
		    -1;
		if (a != NULL && a->seq == c->h.seq && a->end == c->h.first) {
			a->end += c->h.count;
			a->total = total;
			continue;
		}
		/* Out of memory: the consumer's own report still counts. */
		if (vec_grow(&t->acked, &t->capacked, t->nacked + 1,
		        sizeof(*t->acked)) < 0)
			return;
		t->acked[t->nacked++] = (struct acked){c->h.seq, c->h.first,
		    c->h.first + c->h.count, total};
	}
}

/* The last reply's chunks: acknowledged (freed), or put back at the
 * front of their task's queue when the connection closes. */
static void
conn_release(struct conn *c, int acked)
{
	struct task *t = c->ht;
	struct chunk *last;

	if (t == NULL)
		return;
	pthread_mutex_lock(&t->mu);
	if (acked && t->mode == SHARD_DYNAMIC)
		acked_add(t, c->held);
	if (acked || t->dropped) {
		chunks_free(t, c->held);
	} else {
		for (last = c->held; last->next != NULL; last = last->next)
			;
		if ((last->next = t->head) == NULL)
			t->tail = last;
		t->head = c->held;
	}
	t->held -= c->nheld;
	pthread_cond_broadcast(&t->more);
	pthread_mutex_unlock(&t->mu);
	c->held = NULL;
	c->nheld = 0;
	c->ht = NULL;
	task_unref(t);
}

/* Takes chunks from t's queue for a reply, up to max payload bytes (one
 * at least); they are held until acknowledged. Under t's lock. */
static void
take_chunks(struct conn *c, struct task *t, size_t max)
{
	struct chunk **tail = &c->held;
	size_t total = 0;

	while (t->head != NULL && c->nheld < REPLY_CHUNKS &&
	    (c->nheld == 0 || total + t->head->h.len <= max)) {
		struct chunk *ch = queue_pop(t);
		total += ch->h.len;
		ch->next = NULL;
		*tail = ch;
		tail = &ch->next;
		c->nheld++;
	}
	t->held += c->nheld;
}

/* t has ended (called holding t->mu): 1, and *error its failure. */
static int
ended(struct task *t, char **error)
{
	*error = t->error != NULL ? strdup(t->error) : NULL;
	return 1;
}

/*
 * The reply to a wait on task id: it is not served any more (gone), it
 * ended (with error, which this frees), or chunks (NULL: none in time).
 */
static int
send_outcome(struct conn *c, uint64_t id, int gone, int end, char *error,
    struct chunk *chunks, int keep)
{
	int rc;

	if (gone)
		rc = send_error(c, ST_NOT_FOUND, keep,
		    "task %" PRIu64 " is not served here any more", id);
	else if (end)
		rc = send_end(c, error, keep);
	else
		rc = send_chunks(c, chunks, keep);
	free(error);
	return rc;
}

/*
 * Whether the request shows t's job's secret: only the job's consumers,
 * to whom dispatchd gave it, may take (and acknowledge) its elements.
 */
static int
allowed(const struct task *t, const struct req *r)
{
	return t->secret[0] == '\0' ||
	    (r->h.auth != NULL &&
	        token_equal(r->h.auth, r->h.auth_len, t->secret,
	            strlen(t->secret)));
}

static int
send_unauthorized(struct conn *c, uint64_t id, int keep)
{
	return send_error(c, ST_UNAUTHENTICATED, keep,
	    "task %" PRIu64 ": the request does not show its job's secret "
	    "(Authorization: Bearer), which dispatchd gives the job's "
	    "consumers",
	    id);
}

/* How long a request may wait: its wait=, or def, and WAIT_MAX at most. */
static int64_t
wait_of(const struct dw_request *w, int64_t def)
{
	int64_t ms = w->has_wait ? w->wait_ms : def;

	return ms < WAIT_MAX ? ms : WAIT_MAX;
}

/* GET /v1/tasks/T/elements?max=BYTES&wait=MS; max=0 acknowledges the
 * last reply and asks for nothing, for a consumer about to close. */
static int
serve_elements(struct conn *c, const struct dw_request *w, const struct req *r)
{
	uint64_t id = w->task;
	int keep = r->h.keep;
	size_t max = w->has_max ? w->max : REPLY_DEFAULT;
	int64_t wait = wait_of(w, WAIT_DEFAULT), until;
	struct task *t;
	char *error = NULL;
	int rc, end = 0, gone = 0;

	if (max > REPLY_MAX)
		max = REPLY_MAX;
	/* Only who took the held chunks may acknowledge them. */
	if (c->ht != NULL && !allowed(c->ht, r))
		return send_unauthorized(c, id, keep);
	conn_release(c, 1);
	if (max == 0)
		return send_chunks(c, NULL, keep);
	if ((t = task_get(c->ds, id)) == NULL)
		return send_error(c, ST_NOT_FOUND, keep,
		    "task %" PRIu64 " is not served here", id);
	if (!allowed(t, r)) {
		task_unref(t);
		return send_unauthorized(c, id, keep);
	}
	if (t->consumers > 0) {
		task_unref(t);
		return send_error(c, ST_FAILED_PRECONDITION, keep,
		    "task %" PRIu64 " is read round-robin, by rounds", id);
	}
	until = duration_now_ms() + wait;
	pthread_mutex_lock(&t->mu);
	for (;;) {
		if (t->dropped) {
			gone = 1;
			break;
		}
		if (t->head != NULL) {
			take_chunks(c, t, max);
			break;
		}
		/* The end only once nothing is held either: held chunks
		 * come back if their connection closes. */
		if (t->state != T_RUNNING && t->held == 0) {
			end = ended(t, &error);
			break;
		}
		if (duration_now_ms() >= until)
			break;
		cond_wait_until(&t->more, &t->mu, until);
	}
	pthread_mutex_unlock(&t->mu);
	rc = send_outcome(c, id, gone, end, error, c->held, keep);
	if (c->held != NULL)
		c->ht = t;
	else
		task_unref(t);
	return rc;
}

static struct round *
round_find(struct task *t, uint64_t r)
{
	struct round *rd;

	for (rd = t->rounds; rd != NULL && rd->r != r; rd = rd->next)
		;
	return rd;
}

/* Round r, as it is first asked for: its elements are the next ones
 * rounds_fill finds. NULL when out of memory. */
static struct round *
round_add(struct task *t, uint64_t r)
{
	struct round *rd;

	if ((rd = calloc(1, sizeof(*rd))) == NULL ||
	    (rd->el = calloc((size_t)t->consumers, sizeof(*rd->el))) == NULL ||
	    (rd->took = calloc((size_t)t->consumers, 1)) == NULL) {
		if (rd != NULL)
			free(rd->el);
		free(rd);
		return NULL;
	}
	rd->r = r;
	*t->rounds_end = rd;
	t->rounds_end = &rd->next;
	return rd;
}

/*
 * Consumer who asks for round r. A round every consumer took is kept
 * until each has asked for a later one: one whose reply was lost asks
 * again, and must get the same element, not the next round's. Then it
 * goes, and with it its hold on the buffer, which the reader needs to go
 * on (rounds kept longer than that filled a small buffer and stopped the
 * reading for good).
 */
static void
rounds_asked(struct task *t, long who, int64_t r)
{
	int64_t low = INT64_MAX;

	if (r > t->asked[who])
		t->asked[who] = r;
	for (long i = 0; i < t->consumers; i++)
		if (t->asked[i] < low)
			low = t->asked[i];
	for (struct round *p = t->rounds, *next; p != NULL; p = next) {
		next = p->next;
		if (p->done && (int64_t)p->r < low)
			round_free(t, p);
	}
	/* The reader may be waiting for what rounds_starved tells. */
	pthread_cond_signal(&t->room);
}

/* Rounds take the queue's elements in the order they were asked for. */
static void
rounds_fill(struct task *t)
{
	for (struct round *r = t->rounds; r != NULL; r = r->next)
		while (r->have < t->consumers) {
			struct chunk *one = queue_take_one(t);
			if (one == NULL)
				return;
			r->el[r->have++] = one;
		}
}

/* GET /v1/tasks/T/rounds/R?consumer=C */
static int
serve_round(struct conn *c, const struct dw_request *w, const struct req *req)
{
	uint64_t id = w->task, r = w->round;
	int keep = req->h.keep;
	struct chunk one = {0};
	struct round *rd = NULL;
	struct task *t;
	int64_t wait = wait_of(w, WAIT_MAX), until;
	char *error = NULL;
	long who = w->consumer;
	int rc, end = 0, gone = 0;

	conn_release(c, 1);
	if ((t = task_get(c->ds, id)) == NULL)
		return send_error(c, ST_NOT_FOUND, keep,
		    "task %" PRIu64 " is not served here", id);
	if (!allowed(t, req)) {
		task_unref(t);
		return send_unauthorized(c, id, keep);
	}
	if (t->consumers == 0 || t->asked == NULL || who < 0 ||
	    who >= t->consumers) {
		rc = t->consumers == 0 || t->asked == NULL ?
		    send_error(c, ST_FAILED_PRECONDITION, keep,
		        "task %" PRIu64 " is not read round-robin", id) :
		    send_error(c, ST_INVALID_ARGUMENT, keep,
		        "consumer must be 0 to %ld", t->consumers - 1);
		task_unref(t);
		return rc;
	}
	until = duration_now_ms() + wait;
	pthread_mutex_lock(&t->mu);
	if ((int64_t)r < t->asked[who] && round_find(t, r) == NULL) {
		pthread_mutex_unlock(&t->mu);
		task_unref(t);
		return send_error(c, ST_FAILED_PRECONDITION, keep,
		    "round %" PRIu64 " is over for consumer %ld", r, who);
	}
	rounds_asked(t, who, (int64_t)r);
	for (;;) {
		if (t->dropped) {
			gone = 1;
			break;
		}
		/* A task that has ended makes no new rounds. */
		if (rd == NULL && (rd = round_find(t, r)) == NULL &&
		    (t->state == T_RUNNING || t->head != NULL))
			rd = round_add(t, r);
		rounds_fill(t);
		if (rd != NULL && rd->have == t->consumers) {
			one = *rd->el[who];
			one.next = NULL;
			one.blk->refs++;
			if (!rd->took[who]) {
				rd->took[who] = 1;
				rd->taken++;
			}
			rd->done = rd->taken == t->consumers;
			break;
		}
		/* The task ended before the round filled: every consumer
		 * sees the end at the same round. */
		if (t->state != T_RUNNING && t->head == NULL) {
			end = ended(t, &error);
			break;
		}
		if (duration_now_ms() >= until)
			break;
		cond_wait_until(&t->more, &t->mu, until);
	}
	pthread_mutex_unlock(&t->mu);
	rc = send_outcome(c, id, gone, end, error,
	    one.blk != NULL ? &one : NULL, keep);
	if (one.blk != NULL) {
		pthread_mutex_lock(&t->mu);
		block_put(t, one.blk);
		pthread_mutex_unlock(&t->mu);
	}
	task_unref(t);
	return rc;
}

/* Routes one request; 0, or -1 when the connection is to close. */
static int
route(struct conn *c, struct req *r)
{
	struct dw_request w;

	if (strcmp(r->h.method, "GET") != 0)
		return send_error(c, ST_INVALID_ARGUMENT, r->h.keep,
		    "%s: only GET is served here", r->h.method);
	switch (dw_request_parse(r->h.path, r->h.query, &w)) {
	case DW_OK: break;
	case DW_BAD_MAX:
		return send_error(c, ST_INVALID_ARGUMENT, r->h.keep,
		    "max is not a number of bytes: %s", r->h.query);
	case DW_BAD_WAIT:
		return send_error(c, ST_INVALID_ARGUMENT, r->h.keep,
		    "wait is not a number of milliseconds: %s", r->h.query);
	default:
		return send_error(c, ST_NOT_FOUND, r->h.keep,
		    "no such resource");
	}
	switch (w.kind) {
	case DW_HEALTH:
		return send_simple(c, 200, "text/plain", "ok\n", 3, r->h.keep);
	case DW_ELEMENTS: return serve_elements(c, &w, r);
	case DW_ROUND: return serve_round(c, &w, r);
	}
	return send_error(c, ST_NOT_FOUND, r->h.keep, "no such resource");
}

/*
 * Reads one request's head (and skips its body): 0, or -1 when the
 * connection is to close (the peer left, or the request cannot be
 * served: then after saying why).
 */
/*
 * Receives into p what comes before the request's deadline (none while
 * the connection holds elements, see REQUEST_MS): bytes received, or -1
 * when the peer left, the deadline passed or the server stops.
 */
static ssize_t
recv_by(struct conn *c, void *p, size_t n, int64_t deadline)
{
	for (;;) {
		struct pollfd pf = {c->fd, POLLIN, 0};
		int64_t left = deadline - duration_now_ms();
		ssize_t got;
		if (c->held == NULL && left <= 0)
			return -1;
		/* What the session holds already, poll(2) does not see. */
		if (c->tls != NULL && tls_pending(c->tls) > 0) {
			got = tls_recv(c->tls, p, n);
			return got > 0 ? got : -1;
		}
		if (poll(&pf, 1, c->held != NULL ? -1 : (int)left) < 0 &&
		    errno != EINTR)
			return -1;
		if (pf.revents == 0)
			continue;
		if (c->tls != NULL) {
			/* A record comes whole within the socket's timeout. */
			got = tls_recv(c->tls, p, n);
			return got > 0 ? got : -1;
		}
		got = recv(c->fd, p, n, MSG_DONTWAIT);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		return got > 0 ? got : -1;
	}
}

static int
read_request(struct conn *c, struct req *r)
{
	int64_t deadline = duration_now_ms() + c->ds->request_ms;
	size_t head, left;
	ssize_t n;

	while ((head = http1_head_len(c->in, c->inlen)) == 0) {
		if (c->inlen == sizeof(c->in) - 1) {
			send_error(c, ST_RESOURCE_EXHAUSTED, 0,
			    "request head larger than %d bytes", REQ_MAX);
			return -1;
		}
		n = recv_by(c, c->in + c->inlen, sizeof(c->in) - 1 - c->inlen,
		    deadline);
		if (n < 0)
			return -1;
		c->inlen += (size_t)n;
	}
	switch (http1_parse_request(c->in, head, &r->h)) {
	case HTTP1_OK: break;
	case HTTP1_CHUNKED:
		send_error(c, ST_INVALID_ARGUMENT, 0,
		    "a request body in chunks is not read here");
		return -1;
	case HTTP1_BAD_LENGTH:
		send_error(c, ST_RESOURCE_EXHAUSTED, 0,
		    "a request body of at most %d bytes", BODY_MAX);
		return -1;
	default: return -1;
	}
	if (r->h.length > BODY_MAX) {
		send_error(c, ST_RESOURCE_EXHAUSTED, 0,
		    "a request body of at most %d bytes", BODY_MAX);
		return -1;
	}
	r->len = head + (size_t)r->h.length;
	if (c->inlen >= r->len)
		return 0;
	/* A GET has no use for a body: skip it, to find the next request. */
	left = r->len - c->inlen;
	r->len = c->inlen;
	while (left > 0) {
		char skip[4096];
		n = recv_by(c, skip, left < sizeof(skip) ? left : sizeof(skip),
		    deadline);
		if (n < 0)
			return -1;
		left -= (size_t)n;
	}
	return 0;
}

static void *
conn_main(void *arg)
{
	struct conn *c = arg;
	struct dataserve *ds = c->ds;
	struct conn **pp;
	struct req r;
	char err[256] = "the TLS handshake did not end in time";

	if (ds->tls != NULL &&
	    ((c->tls = tls_accept(ds->tls, c->fd, err, sizeof(err))) == NULL ||
	        tls_handshake(c->tls, err, sizeof(err)) != 0)) {
		/* A client that does not speak TLS, or not to us. */
		log_debug("data server: %s", err);
	} else {
		while (read_request(c, &r) == 0) {
			int rc = route(c, &r);
			memmove(c->in, c->in + r.len, c->inlen - r.len);
			c->inlen -= r.len;
			if (rc < 0 || !r.h.keep)
				break;
		}
	}
	conn_release(c, 0);
	pthread_mutex_lock(&ds->mu);
	for (pp = &ds->conns; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	ds->nconns--;
	pthread_mutex_unlock(&ds->mu);
	tls_free(c->tls);
	close(c->fd);
	free(c);
	thread_done(ds);
	return NULL;
}

/* A consumer's host that dies without closing its connection is found
 * out by TCP keepalive, so that the chunks it held go back. */
static void
conn_options(int fd, int64_t recv_ms)
{
	int one = 1, idle = 30, intvl = 10, cnt = 3;
	struct timeval tv = {SEND_MS / 1000, 0};
	struct timeval rv = {recv_ms / 1000, (recv_ms % 1000) * 1000};

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	/* Reads wait in poll(2); this bounds a TLS handshake or record that
	 * stops half-way. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rv, sizeof(rv));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static void *
accept_main(void *arg)
{
	struct dataserve *ds = arg;

	for (;;) {
		int fd = accept4(ds->lfd, NULL, NULL, SOCK_CLOEXEC);
		struct conn *c;
		if (fd < 0) {
			pthread_mutex_lock(&ds->mu);
			int stop = ds->stopping;
			pthread_mutex_unlock(&ds->mu);
			if (stop)
				break;
			/* Out of descriptors: let connections end. */
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM)
				poll(NULL, 0, 100);
			continue;
		}
		pthread_mutex_lock(&ds->mu);
		if (ds->nconns >= ds->max_conns) {
			/* Said at once, without a thread: it goes away. */
			static const char busy[] =
			    "HTTP/1.1 503 Service Unavailable\r\n"
			    "Content-Type: application/json\r\n"
			    "Content-Length: 76\r\nConnection: close\r\n\r\n"
			    "{\"error\":{\"code\":\"UNAVAILABLE\",\"message\":"
			    "\"too many connections; try again\"}}";
			if (ds->refused++ % 1000 == 0)
				log_info("data server: %ld connections, the "
				         "most it serves: refusing more (%lu "
				         "so far)",
				    ds->nconns, ds->refused);
			pthread_mutex_unlock(&ds->mu);
			/* Plain HTTP only: a TLS client gets a close. */
			if (ds->tls == NULL)
				(void)!send(fd, busy, sizeof(busy) - 1,
				    MSG_DONTWAIT | MSG_NOSIGNAL);
			close(fd);
			continue;
		}
		pthread_mutex_unlock(&ds->mu);
		conn_options(fd, ds->request_ms);
		if ((c = calloc(1, sizeof(*c))) == NULL) {
			close(fd);
			continue;
		}
		c->ds = ds;
		c->fd = fd;
		pthread_mutex_lock(&ds->mu);
		c->next = ds->conns;
		ds->conns = c;
		ds->nconns++;
		if (ds->stopping || thread_start(ds, conn_main, c) < 0) {
			ds->conns = c->next;
			ds->nconns--;
			close(fd);
			free(c);
		}
		pthread_mutex_unlock(&ds->mu);
	}
	return NULL;
}

/* Reports of acknowledged ranges. */

/* Ranges a report could not deliver, to be sent again. Under t's lock. */
static void
acked_put_back(struct task *t, const struct acked *v, size_t n)
{
	if (vec_grow(&t->acked, &t->capacked, t->nacked + n,
	        sizeof(*t->acked)) < 0)
		return;
	memcpy(t->acked + t->nacked, v, n * sizeof(*v));
	t->nacked += n;
}

/* Sends t's acknowledged ranges; those a dispatchd that cannot be reached
 * did not get are sent again. */
static void
report_acked(struct task *t, struct dispatch_client *dc)
{
	json_t *list = json_array(), *body;
	struct acked *v;
	enum status st;
	size_t n;

	pthread_mutex_lock(&t->mu);
	v = t->acked;
	n = t->nacked;
	t->acked = NULL;
	t->nacked = t->capacked = 0;
	pthread_mutex_unlock(&t->mu);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list,
		    json_pack("[I,I,I,I]", (json_int_t)v[i].seq,
		        (json_int_t)v[i].first, (json_int_t)v[i].end,
		        (json_int_t)v[i].total));
	body = json_pack("{s:o}", "delivered", list);
	st = dc_task_report(dc, t->ds->worker, t->inc, t->id, body,
	    duration_now_ms() + 5000);
	json_decref(body);
	if (st == ST_UNAVAILABLE || st == ST_DEADLINE_EXCEEDED) {
		pthread_mutex_lock(&t->mu);
		acked_put_back(t, v, n);
		pthread_mutex_unlock(&t->mu);
	} else if (st != ST_OK && st != ST_CANCELLED) {
		log_debug("task %" PRIu64 ": reporting what consumers took: %s",
		    t->id, dispatch_client_error(dc));
	}
	free(v);
}

/* The tasks with ranges to report, held; *n of them. Under ds->mu. */
static struct task **
tasks_acked(struct dataserve *ds, size_t *n)
{
	struct task **v = NULL;
	size_t cap = 0;

	*n = 0;
	for (struct task *t = ds->tasks; t != NULL; t = t->next) {
		pthread_mutex_lock(&t->mu);
		int some = t->nacked > 0;
		pthread_mutex_unlock(&t->mu);
		if (!some)
			continue;
		if (vec_grow(&v, &cap, *n + 1, sizeof(*v)) < 0)
			break;
		atomic_fetch_add(&t->refs, 1);
		v[(*n)++] = t;
	}
	return v;
}

static void *
report_main(void *arg)
{
	struct dataserve *ds = arg;
	struct dispatch_client *dc;
	char err[512];

	if ((dc = dispatch_client_new(ds->dispatcher, err, sizeof(err))) ==
	    NULL) {
		log_info("cannot report what consumers took: %s", err);
		return NULL;
	}
	dispatch_client_set_cancel(dc, ds->report_cancel[0]);
	pthread_mutex_lock(&ds->mu);
	while (!ds->stopping) {
		struct task **v;
		size_t n;
		cond_wait_until(&ds->report, &ds->mu,
		    duration_now_ms() + REPORT_MS);
		v = tasks_acked(ds, &n);
		pthread_mutex_unlock(&ds->mu);
		for (size_t i = 0; i < n; i++) {
			report_acked(v[i], dc);
			task_unref(v[i]);
		}
		free(v);
		pthread_mutex_lock(&ds->mu);
	}
	pthread_mutex_unlock(&ds->mu);
	dispatch_client_free(dc);
	return NULL;
}

/* Sets ds stopping: no more tasks, connections or reports. */
static void
report_stop(struct dataserve *ds)
{
	char c = 1;

	pthread_mutex_lock(&ds->mu);
	ds->stopping = 1;
	pthread_cond_broadcast(&ds->report);
	pthread_mutex_unlock(&ds->mu);
	(void)!write(ds->report_cancel[1], &c, 1);
	pthread_join(ds->report_th, NULL);
}

/* The table. */

static int
listed(json_t *tasks, uint64_t id)
{
	json_t *o;
	size_t i;

	json_array_foreach(tasks, i, o)
		if ((uint64_t)int_field(o, "id", 0) == id)
			return 1;
	return 0;
}

void
dataserve_tasks(struct dataserve *ds, json_t *tasks)
{
	struct task *gone = NULL, **pp, *t;
	json_t *o;
	size_t i;

	pthread_mutex_lock(&ds->mu);
	if (ds->stopping) {
		pthread_mutex_unlock(&ds->mu);
		return;
	}
	for (pp = &ds->tasks; (t = *pp) != NULL;) {
		if (listed(tasks, t->id)) {
			pp = &t->next;
			continue;
		}
		*pp = t->next;
		t->next = gone;
		gone = t;
	}
	json_array_foreach(tasks, i, o) {
		uint64_t id = (uint64_t)int_field(o, "id", 0);
		for (t = ds->tasks; t != NULL && t->id != id; t = t->next)
			;
		if (t != NULL || id == 0 || (t = task_new(ds, o)) == NULL)
			continue;
		atomic_fetch_add(&t->refs, 1);
		if (thread_start(ds, task_main, t) < 0) {
			log_info("task %" PRIu64 ": cannot start a thread", id);
			t->refs = 1;
			task_unref(t);
			continue;
		}
		t->next = ds->tasks;
		ds->tasks = t;
	}
	pthread_mutex_unlock(&ds->mu);
	while ((t = gone) != NULL) {
		gone = t->next;
		task_drop(t);
	}
}

/* Takes every task out of the table and drops them. */
static void
drop_all(struct dataserve *ds)
{
	struct task *t, *next;

	pthread_mutex_lock(&ds->mu);
	t = ds->tasks;
	ds->tasks = NULL;
	pthread_mutex_unlock(&ds->mu);
	for (; t != NULL; t = next) {
		next = t->next;
		task_drop(t);
	}
}

void
dataserve_incarnation(struct dataserve *ds, const char *inc,
    int64_t hb_timeout_ms)
{
	drop_all(ds);
	pthread_mutex_lock(&ds->mu);
	snprintf(ds->inc, sizeof(ds->inc), "%s", inc);
	ds->hb_timeout = hb_timeout_ms > 0 ? hb_timeout_ms : 10000;
	pthread_mutex_unlock(&ds->mu);
}

long
dataserve_max_conns(void)
{
	struct rlimit rl;
	long n = CONN_MAX;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		n = (long)rl.rlim_cur - CONN_RESERVE;
	return n < CONN_MIN ? CONN_MIN : n > CONN_MAX ? CONN_MAX : n;
}

const char *
dataserve_address(const struct dataserve *ds)
{
	return ds->addr;
}

/* The listening socket, bound; its port in *port. */
static int
listen_on(const char *host, int *port, char *err, size_t errlen)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	socklen_t len;
	int fd, one = 1;

	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)*port);
		len = sizeof(*s4);
	} else {
		inet_pton(AF_INET6, host, &s6->sin6_addr);
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)*port);
		len = sizeof(*s6);
	}
	if ((fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(ss.ss_family == AF_INET ? s4->sin_port : s6->sin6_port);
	return fd;
}

struct dataserve *
dataserve_start(const struct dataserve_config *c, char *err, size_t errlen)
{
	struct dataserve *ds = calloc(1, sizeof(*ds));
	char host[128], why[256];
	int port;

	if (ds == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	ds->c = *c;
	ds->hb_timeout = 10000;
	ds->lfd = -1;
	ds->report_cancel[0] = ds->report_cancel[1] = -1;
	ds->max_conns = c->max_conns > 0 ? c->max_conns : dataserve_max_conns();
	ds->request_ms = c->request_ms > 0 ? c->request_ms : REQUEST_MS;
	if (parse_listen(c->listen, host, sizeof(host), &port) < 0) {
		snprintf(err, errlen, "%s is not HOST:PORT", c->listen);
		goto fail;
	}
	if ((ds->lfd = listen_on(host, &port, why, sizeof(why))) < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", c->listen,
		    why);
		goto fail;
	}
	if (c->tls_cert != NULL &&
	    (ds->tls = tls_server_new(c->tls_cert, c->tls_key, err, errlen)) ==
	        NULL)
		goto fail;
	/* Every address: consumers elsewhere reach us by our name. */
	if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)
		snprintf(host, sizeof(host), "%s", c->host);
	snprintf(ds->addr, sizeof(ds->addr),
	    strchr(host, ':') != NULL ? "%s[%s]:%d" : "%s%s:%d",
	    ds->tls != NULL ? "https://" : "", host, port);
	ds->dispatcher = strdup(c->dispatcher);
	ds->worker = strdup(c->worker);
	pthread_mutex_init(&ds->mu, NULL);
	pthread_cond_init(&ds->idle, NULL);
	cond_init(&ds->report);
	ds->report_cancel[0] = ds->report_cancel[1] = -1;
	if (ds->dispatcher == NULL || ds->worker == NULL ||
	    pipe2(ds->report_cancel, O_CLOEXEC) < 0 ||
	    pthread_create(&ds->report_th, NULL, report_main, ds) != 0) {
		snprintf(err, errlen, "cannot start: %s", strerror(errno));
		goto fail;
	}
	if (pthread_create(&ds->accept_th, NULL, accept_main, ds) != 0) {
		snprintf(err, errlen, "cannot start: %s", strerror(errno));
		report_stop(ds);
		goto fail;
	}
	return ds;
fail:
	if (ds->lfd >= 0)
		close(ds->lfd);
	if (ds->report_cancel[0] >= 0) {
		close(ds->report_cancel[0]);
		close(ds->report_cancel[1]);
	}
	tls_server_free(ds->tls);
	free(ds->dispatcher);
	free(ds->worker);
	free(ds);
	return NULL;
}

void
dataserve_stop(struct dataserve *ds)
{
	if (ds == NULL)
		return;
	pthread_mutex_lock(&ds->mu);
	ds->stopping = 1;
	for (struct conn *c = ds->conns; c != NULL; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&ds->mu);
	report_stop(ds);
	shutdown(ds->lfd, SHUT_RDWR);
	pthread_join(ds->accept_th, NULL);
	close(ds->lfd);
	close(ds->report_cancel[0]);
	close(ds->report_cancel[1]);
	drop_all(ds);
	pthread_mutex_lock(&ds->mu);
	while (ds->threads > 0)
		pthread_cond_wait(&ds->idle, &ds->mu);
	pthread_mutex_unlock(&ds->mu);
	pthread_mutex_destroy(&ds->mu);
	pthread_cond_destroy(&ds->idle);
	pthread_cond_destroy(&ds->report);
	free(ds->dispatcher);
	tls_server_free(ds->tls);
	free(ds->worker);
	free(ds);
}
