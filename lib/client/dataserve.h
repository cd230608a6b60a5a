/*
 * dataserve.h: a worker's data tasks. dispatchd hands a worker one task
 * per job it takes part in (the heartbeat reply lists them all, every
 * time); for each, a thread runs the dataset's reader over the splits the
 * job's mode gives this worker (or leases them, in DYNAMIC jobs), cuts
 * the reader's output into chunks of whole elements (datawire.h) and
 * buffers them, and consumers fetch them over HTTP from a small server of
 * our own, a thread per connection, as many as max_conns: a request for a
 * task's elements shows the job's secret (Authorization: Bearer), which
 * dispatchd gives the worker and the job's consumers only; a connection
 * slow to send a request, or idle without elements held, is closed.
 *
 * Elements a consumer fetched stay held until its next request
 * acknowledges them. A consumer that names itself (datawire.h) holds them
 * itself, across its connections: a request it sends again when a reply
 * was lost with its connection gets the same reply, and once none of its
 * connections has been open for request_ms it is gone, and they go back
 * to the front of the queue. Otherwise its connection holds them, and
 * they go back when it closes. So a consumer's death loses nothing, and a
 * broken connection delivers nothing twice.
 */
#ifndef MUSTER_DATASERVE_H
#define MUSTER_DATASERVE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct dataserve_config {
	const char *listen;      /* HOST:PORT to serve on; port 0: any */
	const char *host;        /* advertised when HOST is 0.0.0.0 or :: */
	const char *dispatcher;  /* dispatchd's address */
	const char *worker;      /* this worker's name */
	size_t buffer;           /* bytes buffered per task, at most */
	long lease;              /* DYNAMIC splits leased ahead, 1 to 1024 */
	const sigset_t *unblock; /* signals the readers get unblocked */
	/* Connections served at once; 0: from the limit on open files
	 * (dataserve_max_conns). */
	long max_conns;
	int64_t request_ms; /* to send a request in; 0: 60 s */
	/* Runs again of a reader killed by a signal, per split. */
	long reader_retries;
	/* HTTPS with this certificate chain and key (PEM files); NULL:
	 * plain HTTP. The address registered is then https://HOST:PORT. */
	const char *tls_cert, *tls_key;
};

/*
 * The connections a data server serves at once by default: what the limit
 * on open files leaves once a reserve for the worker's own descriptors
 * (closures' and readers' pipes, its calls to dispatchd) is set aside, from
 * 16 to 4096 (a thread each).
 */
long dataserve_max_conns(void);

/* Listens (at once, so that the address can be advertised); NULL and why
 * in err when it cannot. */
struct dataserve *dataserve_start(const struct dataserve_config *c, char *err,
    size_t errlen);
/* Where it listens, HOST:PORT with the real port. */
const char *dataserve_address(const struct dataserve *ds);
/*
 * A new registration: every task goes (their readers stopped, their
 * buffers freed), and later ones report as incarnation inc. A lease
 * request waits up to half of hb_timeout_ms, as dispatchd allows.
 */
void dataserve_incarnation(struct dataserve *ds, const char *inc,
    int64_t hb_timeout_ms);
/* The task list of a heartbeat reply: new tasks start, missing ones go. */
void dataserve_tasks(struct dataserve *ds, json_t *tasks);
/* Stops every reader and connection, and frees ds. */
void dataserve_stop(struct dataserve *ds);

#endif
