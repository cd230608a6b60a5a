#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "commit.h"
#include "log.h"
#include "store.h"

#define COMPACT_DEFAULT_BYTES (64u << 20)

struct commit {
	struct journal *j;          /* a state directory's, or */
	struct store *s;            /* etcd's */
	size_t max_bytes;           /* compact past this */
	uint64_t count, next_check; /* records appended; when to look */
	const char *daemon;
	_Atomic uint64_t last; /* the newest record appended */
	pthread_mutex_t mu;    /* guards srv */
	struct http_server *srv;
	int detached;
	int failing;      /* told of a failure, not yet of a success (mu) */
	char fatal[512];  /* a store's records cannot be applied: why */
	uint64_t durable; /* the newest durable record (mu) */
};

static void
durable(uint64_t seq, int err, void *arg)
{
	struct commit *c = arg;

	pthread_mutex_lock(&c->mu);
	/* A store logs its own failures (store.c). */
	if (c->s == NULL && err != 0 && !c->failing)
		log_info("the state directory cannot be written: %s; changes "
		         "are refused until it can",
		    strerror(err));
	else if (c->s == NULL && err == 0 && c->failing)
		log_info("the state directory is written again");
	c->failing = err != 0;
	if (err == 0 && seq > c->durable)
		c->durable = seq;
	if (c->srv != NULL && !c->detached)
		http_server_durable(c->srv, seq, err);
	pthread_mutex_unlock(&c->mu);
}

struct commit *
commit_open(const char *dir, enum journal_fsync mode, size_t max_bytes,
    const char *daemon,
    int (*snapshot_fn)(const void *p, size_t len, void *arg),
    int (*record_fn)(uint64_t seq, const void *p, size_t len, void *arg),
    void *arg, const char *cause, enum status *st, char *err, size_t errlen)
{
	struct journal *j = journal_open(dir, mode, err, errlen);
	struct commit *c;
	char e[512];

	if (j == NULL) {
		*st =
		    errno == EWOULDBLOCK ? ST_FAILED_PRECONDITION : ST_INTERNAL;
		return NULL;
	}
	if (journal_replay(j, snapshot_fn, record_fn, arg, e, sizeof(e)) < 0) {
		if (cause != NULL && cause[0] != '\0')
			snprintf(err, errlen, "%s: %s", e, cause);
		else
			snprintf(err, errlen, "%s", e);
		journal_close(j);
		*st = ST_INTERNAL;
		return NULL;
	}
	if (journal_note(j)[0] != '\0')
		log_info("%s", journal_note(j));
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		journal_close(j);
		snprintf(err, errlen, "out of memory");
		*st = ST_RESOURCE_EXHAUSTED;
		return NULL;
	}
	c->j = j;
	c->daemon = daemon;
	c->max_bytes = max_bytes > 0 ? max_bytes : COMPACT_DEFAULT_BYTES;
	pthread_mutex_init(&c->mu, NULL);
	journal_set_durable(j, durable, c);
	*st = ST_OK;
	return c;
}

void
commit_compact(struct commit *c, int (*write_fn)(struct buf *out, void *arg),
    void *arg)
{
	uint64_t jb, sb;

	if (c->s != NULL) {
		store_compact(c->s, write_fn, arg);
		return;
	}
	if (c->count < c->next_check)
		return;
	/* The sizes take the journal's lock: look now and then. */
	c->next_check = c->count + (c->max_bytes < (1u << 20) ? 16 : 4096);
	journal_size(c->j, &jb, &sb);
	if (jb > c->max_bytes && jb > 2 * sb &&
	    journal_compact(c->j, write_fn, arg) < 0)
		log_info("compaction not started: %s", strerror(errno));
}

uint64_t
commit_append(struct commit *c, const void *p, size_t len)
{
	uint64_t seq = c->s != NULL ? store_append(c->s, p, len) :
	                              journal_append(c->j, p, len);

	if (seq != 0) {
		atomic_store(&c->last, seq);
		c->count++;
	}
	http_note_write(seq);
	return seq;
}

uint64_t
commit_gate(void *arg)
{
	struct commit *c = arg;

	return c->s != NULL ? store_last(c->s) : atomic_load(&c->last);
}

void
commit_flush(void *arg, uint64_t seq)
{
	struct commit *c = arg;

	if (c->j != NULL)
		journal_write_now(c->j, seq);
}

void
commit_attach(struct commit *c, struct http_server *srv)
{
	pthread_mutex_lock(&c->mu);
	c->srv = srv;
	/* What became durable before the server was there. */
	if (c->durable > 0)
		http_server_durable(srv, c->durable, 0);
	pthread_mutex_unlock(&c->mu);
}

int
commit_refuse(struct commit *c, struct http_req *req)
{
	char why[256];
	int e;

	if (c->s != NULL) {
		if (store_error(c->s, why, sizeof(why)) == NULL)
			return 0;
		http_set_header(req, "Retry-After", "1");
		http_reply_error(req, ST_UNAVAILABLE,
		    "%s refuses changes while etcd cannot be written: %s",
		    c->daemon, why);
		return 1;
	}
	if (journal_error(c->j, why, sizeof(why)) == NULL)
		return 0;
	/* journal_error leaves errno as the failure's. */
	e = errno;
	http_set_header(req, "Retry-After", "1");
	http_reply_error(req,
	    e == ENOSPC || e == EDQUOT || e == EFBIG ? ST_RESOURCE_EXHAUSTED :
	                                               ST_INTERNAL,
	    "%s refuses changes while its state directory cannot be "
	    "written: %s",
	    c->daemon, why);
	return 1;
}

void
commit_detach(struct commit *c)
{
	uint64_t last = atomic_load(&c->last);

	if (c->s != NULL) {
		if (store_flush(c->s, 3000) < 0)
			log_info("changes before shutdown could not be written "
			         "to etcd");
	} else if (last != 0 && journal_wait(c->j, last) < 0) {
		log_info("changes before shutdown could not be made durable: "
		         "%m");
	}
	pthread_mutex_lock(&c->mu);
	c->detached = 1;
	if (c->srv != NULL)
		http_server_durable(c->srv, UINT64_MAX, 0);
	pthread_mutex_unlock(&c->mu);
}

void
commit_free(struct commit *c)
{
	if (c == NULL)
		return;
	if (c->s != NULL)
		store_close(c->s);
	else if (journal_close(c->j) < 0)
		log_info("some changes could not be written to the state "
		         "directory before exit");
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* The store's restart: the daemon starts again as a standby (daemon.c
 * takes SIGUSR2 so). */
static void
restart(const char *why, void *arg)
{
	(void)arg;
	log_info("%s; stepping down", why);
	kill(getpid(), SIGUSR2);
}

/* The store's fatal: the daemon stops, as on SIGTERM, and then exits with
 * INTERNAL (commit_fatal). */
static void
fatal(const char *why, void *arg)
{
	struct commit *c = arg;

	pthread_mutex_lock(&c->mu);
	snprintf(c->fatal, sizeof(c->fatal), "%s", why);
	pthread_mutex_unlock(&c->mu);
	kill(getpid(), SIGTERM);
}

const char *
commit_fatal(struct commit *c)
{
	const char *r;

	pthread_mutex_lock(&c->mu);
	r = c->fatal[0] != '\0' ? c->fatal : NULL;
	pthread_mutex_unlock(&c->mu);
	return r;
}

struct commit *
commit_open_store(const struct store_config *sc, const char *daemon,
    int (*snapshot_fn)(const void *p, size_t len, void *arg),
    int (*record_fn)(uint64_t seq, const void *p, size_t len, void *arg),
    void (*lock)(void *arg), void (*unlock)(void *arg),
    void (*elected)(void *arg), void *arg, const char *cause, char *err,
    size_t errlen)
{
	struct commit *c = calloc(1, sizeof(*c));
	struct store_hooks h = {.arg = arg,
	    .lock = lock,
	    .unlock = unlock,
	    .snapshot = snapshot_fn,
	    .record = record_fn,
	    .elected = elected,
	    .durable = durable,
	    .restart = restart,
	    .fatal = fatal,
	    .cause = cause};

	if (c == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->daemon = daemon;
	pthread_mutex_init(&c->mu, NULL);
	/* The store tells the commit, which tells the server. */
	h.durable_arg = c;
	if ((c->s = store_open(sc, &h, err, errlen)) == NULL) {
		pthread_mutex_destroy(&c->mu);
		free(c);
		return NULL;
	}
	return c;
}

void
commit_campaign(struct commit *c, const char *address)
{
	if (c->s != NULL)
		store_campaign(c->s, address);
}

int
commit_leads(struct commit *c, char *leader, size_t len)
{
	return c->s == NULL || store_leads(c->s, leader, len);
}

int
commit_journal_info(struct commit *c, uint64_t *journal, uint64_t *snapshot,
    char *why, size_t whylen)
{
	if (c->j == NULL)
		return -1;
	journal_size(c->j, journal, snapshot);
	if (journal_error(c->j, why, whylen) == NULL && whylen > 0)
		why[0] = '\0';
	return 0;
}

int
commit_replicated(const struct commit *c)
{
	return c->s != NULL;
}

int
commit_status(struct commit *c, struct buf *out, char *err, size_t errlen)
{
	return store_status(c->s, out, err, errlen);
}
