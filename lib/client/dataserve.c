/*
 * dataserve.c: a worker's data server: the task table that heartbeat
 * replies set, and the server's start and stop. Its files, each using
 * only those listed before it (dataserve_int.h holds what they share):
 *   dataserve_feed.c    threads; a feed (a task served), its blocks,
 *                       chunks and rounds
 *   dataserve_hold.c    what consumers hold: acknowledged, given back
 *   dataserve_reader.c  the reader process, its output framed into chunks
 *   dataserve_splits.c  a task's thread: splits fetched, or leased
 *   dataserve_server.c  the HTTP server that hands the chunks to consumers
 *   dataserve_report.c  acknowledged ranges reported to dispatchd
 *   dataserve.c         the table, start and stop
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dataserve_int.h"
#include "log.h"
#include "parse.h"

#define CONN_RESERVE 256 /* descriptors kept for closures and readers */
#define CONN_MIN 16
#define CONN_MAX 4096

/* The table. */

static int
listed(json_t *tasks, uint64_t id)
{
	json_t *o;
	size_t i;

	json_array_foreach(tasks, i, o)
		if ((uint64_t)dataserve_int_field(o, "id", 0) == id)
			return 1;
	return 0;
}

void
dataserve_tasks(struct dataserve *ds, json_t *tasks)
{
	struct feed *gone = NULL, **pp, *t;
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
		uint64_t id = (uint64_t)dataserve_int_field(o, "id", 0);
		for (t = ds->tasks; t != NULL && t->id != id; t = t->next)
			;
		if (t != NULL || id == 0 ||
		    (t = dataserve_feed_new(ds, o)) == NULL)
			continue;
		atomic_fetch_add(&t->refs, 1);
		if (dataserve_thread_start(ds, dataserve_feed_main, t) < 0) {
			log_info("task %" PRIu64 ": cannot start a thread", id);
			t->refs = 1;
			dataserve_feed_unref(t);
			continue;
		}
		t->next = ds->tasks;
		ds->tasks = t;
	}
	pthread_mutex_unlock(&ds->mu);
	while ((t = gone) != NULL) {
		gone = t->next;
		dataserve_feed_drop(t);
	}
}

/* Takes every task out of the table and drops them. */
static void
drop_all(struct dataserve *ds)
{
	struct feed *t, *next;

	pthread_mutex_lock(&ds->mu);
	t = ds->tasks;
	ds->tasks = NULL;
	pthread_mutex_unlock(&ds->mu);
	for (; t != NULL; t = next) {
		next = t->next;
		dataserve_feed_drop(t);
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
	dataserve_cond_init(&ds->report);
	ds->report_cancel[0] = ds->report_cancel[1] = -1;
	if (ds->dispatcher == NULL || ds->worker == NULL ||
	    pipe2(ds->report_cancel, O_CLOEXEC) < 0 ||
	    pthread_create(&ds->report_th, NULL, dataserve_report_main, ds) !=
	        0) {
		snprintf(err, errlen, "cannot start: %s", strerror(errno));
		goto fail;
	}
	if (pthread_create(&ds->accept_th, NULL, dataserve_accept_main, ds) !=
	    0) {
		snprintf(err, errlen, "cannot start: %s", strerror(errno));
		dataserve_report_stop(ds);
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
	dataserve_report_stop(ds);
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
