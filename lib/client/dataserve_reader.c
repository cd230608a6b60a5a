/*
 * dataserve_reader.c: a task's reader process on one split, and the
 * framing of its output into chunks of whole elements, queued for the
 * server; the task's end (finished, or failed and why) told to dispatchd.
 * A task's thread (dataserve_splits.c) calls it for each split.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dataserve_int.h"
#include "log.h"
#include "proc.h"
#include "pump.h"

extern char **environ;

#define ROOM_MIN (16u << 10) /* the smallest read worth making */
#define PIPE_SIZE (1 << 20)  /* fewer, larger reads from a fast reader */

/* Calls to dispatchd. */

/* Tells dispatchd the task finished or failed, until it is heard (or
 * the task is dropped). */
static void
task_report(struct rd *rd, const char *state, const char *message)
{
	struct feed *t = rd->t;
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
void
dataserve_feed_fail(struct rd *rd, char *msg, int report)
{
	struct feed *t = rd->t;

	dataserve_make_utf8(msg);
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

void
dataserve_feed_finish(struct rd *rd, int report)
{
	struct feed *t = rd->t;

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
void
dataserve_rd_nap(struct rd *rd, int ms)
{
	struct pollfd pf = {rd->t->cancel[0], POLLIN, 0};

	poll(&pf, 1, ms);
}

/* Framing: the reader's output into chunks. */

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
spare_take(struct feed *t, size_t size)
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
rounds_starved(const struct feed *t)
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
	struct feed *t = rd->t;
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
		dataserve_block_put(t, b);
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
	struct feed *t = rd->t;

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
	struct feed *t = rd->t;
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
	dataserve_queue_push(t, c);
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

/* The reader's stderr: its tail is kept for a message (the pump keeps
 * it), its lines logged with -v. */
static void
log_line(void *arg, const char *s, size_t n)
{
	struct rd *rd = arg;

	log_debug("task %" PRIu64 " reader: %.*s", rd->t->id, (int)n, s);
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
	struct feed *t = rd->t;
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

/* Starts the reader on sp, its stdout and stderr pumped by p; its pid, or
 * -1 with why in msg. */
static pid_t
reader_spawn(struct rd *rd, const struct split *sp, uint64_t skip0,
    struct pump *p, char *msg, size_t msglen)
{
	struct feed *t = rd->t;
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
	pump_init(p, op[0], ep[0], &rd->tail);
	return pid;
}

/*
 * Reads the reader's stdout into chunks, and has p keep its stderr, until
 * both close. 0, or -1 when the task is dropped or the reading cannot go
 * on.
 */
static int
rd_pump(struct rd *rd, struct pump *p)
{
	int cancel = pump_watch(p, rd->t->cancel[0], POLLIN);
	size_t n;

	if (log_verbose()) {
		p->line = log_line;
		p->arg = rd;
	}
	while (!pump_done(p)) {
		if (pump_open(p, PUMP_OUT) && rd_room(rd) < 0)
			return -1;
		if (pump_wait(p, 0) < 0 || pump_ready(p, cancel) != 0)
			return -1;
		if (pump_ready(p, PUMP_OUT) != 0 &&
		    (n = pump_read(p, rd->blk->data + rd->fill,
		         rd->blk->cap - rd->fill)) > 0) {
			rd->fill += n;
			rd_scan(rd);
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
reader_wait(struct feed *t, pid_t pid)
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
	dataserve_feed_fail(rd, msg, 1);
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
		dataserve_feed_fail(rd, msg, 1);
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
int
dataserve_read_split(struct rd *rd, const struct split *sp)
{
	struct feed *t = rd->t;
	char msg[512];
	uint64_t skip0, ee0 = rd->ee;
	int status, rc, tries = 0;
	struct pump p;
	pid_t pid;

	if (rd_skips(rd, sp->skip, &skip0) < 0) {
		snprintf(msg, sizeof(msg), "bad skip ranges for seq %" PRIu64,
		    sp->seq);
		dataserve_feed_fail(rd, msg, 1);
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
	if ((pid = reader_spawn(rd, sp, skip0, &p, msg, sizeof(msg))) < 0) {
		buf_append(&rd->tail, msg, strlen(msg));
		reader_failed(rd, sp, 127 << 8);
		return -1;
	}
	rc = rd_pump(rd, &p);
	pump_close(&p);
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
		dataserve_feed_fail(rd, msg, 1);
		return -1;
	}
	return rc;
}
