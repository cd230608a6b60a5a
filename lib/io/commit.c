#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "commit.h"
#include "log.h"

struct commit {
	struct journal *j;
	const char *daemon;
	_Atomic uint64_t last; /* the newest record appended */
	pthread_mutex_t mu;    /* guards srv */
	struct http_server *srv;
	int detached;
	int failing;      /* told of a failure, not yet of a success (mu) */
	uint64_t durable; /* the newest durable record (mu) */
};

static void
durable(uint64_t seq, int err, void *arg)
{
	struct commit *c = arg;

	pthread_mutex_lock(&c->mu);
	if (err != 0 && !c->failing)
		log_info("%s: the state directory cannot be written: %s; "
		         "changes are refused until it can",
		    c->daemon, strerror(err));
	else if (err == 0 && c->failing)
		log_info("%s: the state directory is written again", c->daemon);
	c->failing = err != 0;
	if (err == 0 && seq > c->durable)
		c->durable = seq;
	if (c->srv != NULL && !c->detached)
		http_server_durable(c->srv, seq, err);
	pthread_mutex_unlock(&c->mu);
}

struct commit *
commit_new(struct journal *j, const char *daemon)
{
	struct commit *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->j = j;
	c->daemon = daemon;
	pthread_mutex_init(&c->mu, NULL);
	journal_set_durable(j, durable, c);
	return c;
}

uint64_t
commit_append(struct commit *c, const void *p, size_t len)
{
	uint64_t seq = journal_append(c->j, p, len);

	if (seq != 0)
		atomic_store(&c->last, seq);
	http_note_write(seq);
	return seq;
}

uint64_t
commit_gate(void *arg)
{
	struct commit *c = arg;

	return atomic_load(&c->last);
}

void
commit_flush(struct commit *c, uint64_t seq)
{
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

	if (last != 0 && journal_wait(c->j, last) < 0)
		log_info("%s: changes before shutdown could not be made "
		         "durable: %m",
		    c->daemon);
	pthread_mutex_lock(&c->mu);
	c->detached = 1;
	if (c->srv != NULL)
		http_server_durable(c->srv, UINT64_MAX, 0);
	pthread_mutex_unlock(&c->mu);
}

struct journal *
commit_journal(struct commit *c)
{
	return c->j;
}

int
commit_free(struct commit *c)
{
	int rc;

	if (c == NULL)
		return 0;
	rc = journal_close(c->j);
	pthread_mutex_destroy(&c->mu);
	free(c);
	return rc;
}
