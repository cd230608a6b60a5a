/*
 * coord_int.h: what the parts of the coordination service share. Not for
 * programs: they use coord.h.
 */
#ifndef MUSTER_COORD_INT_H
#define MUSTER_COORD_INT_H

#include <pthread.h>
#include <stdint.h>

#include "coord.h"
#include "http_server.h"
#include "kvstore.h"
#include "strmap.h"
#include "timer.h"

struct waiter;

/* A list of parked requests waiting for the same thing. */
struct waitlist {
	struct waiter *head;
	size_t count;
};

/*
 * One parked request. It is on exactly one waitlist and armed on the timers
 * until it is answered; whoever answers it unlinks it first, under co->mu.
 */
struct waiter {
	struct timer timer;             /* first: timer_fire casts back */
	struct coord *co;
	struct http_req *req;
	struct waitlist *list;
	struct waiter *prev, *next;
	void (*expire)(struct waiter *w);
	int64_t since;
	void *obj;                      /* what it waits on, if not key */
	size_t klen;
	char key[];
};

enum task_state { TASK_DISCONNECTED, TASK_CONNECTED, TASK_ERROR };

struct task {
	char *name;                     /* "worker:3" */
	enum task_state state;
	int recoverable;
	uint64_t incarnation;
	int64_t last_heartbeat;         /* monotonic ms */
	enum status err;                /* the error while in TASK_ERROR, */
	char *errmsg;                   /* and after, as the last error */
	int err_reported;               /* reported by the task itself */
	int err_active;                 /* an error of this epoch, not reset */
	long left_epoch;                /* epoch + 1 it last left, 0 never */
	long err_epoch;                 /* the epoch of its last error */
};

enum barrier_state { BARRIER_PENDING, BARRIER_PASSED, BARRIER_FAILED };

struct barrier {
	struct timer timer;             /* first: the deadline */
	struct coord *co;
	char *id;
	enum barrier_state state;
	enum status result;
	char *message;
	unsigned char *at;              /* per task: 0 no, 1 member, 2 arrived */
	size_t members, arrived;
	int explicit_set;
	int shutdown;                   /* the shutdown barrier */
	struct barrier *prev, *next;    /* on the pending list */
	struct waitlist waiters;
};

struct cluster {
	struct task *tasks;
	size_t ntasks;
	struct strmap *byname;          /* "job:index" -> struct task */
	size_t nconnected;
	int64_t hb_timeout, register_timeout, shutdown_timeout;
	uint64_t service_incarnation;
	long epoch;
	struct timer scan;
	struct waitlist error_waiters;
	struct waitlist all_waiters;
	struct waitlist epoch_waiters;
	int used;                       /* a task registered this epoch */
	int64_t all_deadline;           /* wait-for-all deadline, 0: unset */
	struct strmap *barriers;        /* id -> struct barrier */
	struct barrier *pending;
	struct barrier *shutdown;
	struct task *failed;            /* one that failed this epoch */
};

struct coord {
	pthread_mutex_t mu;
	struct timers *timers;
	struct http_server *srv;
	struct kvstore *kv;
	struct strmap *getters;         /* key -> struct waitlist */
	struct waitlist watchers;
	struct cluster cl;
	volatile int closing;           /* written under mu, read anywhere */
};

/* Parks req on list until answered or timeout_ms passes (then expire). */
struct waiter *waiter_park(struct coord *co, struct http_req *req,
    struct waitlist *list, int64_t timeout_ms,
    void (*expire)(struct waiter *w), const char *key, size_t klen);
/* Takes w off its list and timer; the caller then answers w->req. */
void waiter_unlink(struct waiter *w);
void waiter_free(struct waiter *w);

#define COORD_MAX_WAIT_MS (366LL * 24 * 3600 * 1000)

/* Parses a duration query argument; def when absent. -1 (and a reply)
 * when malformed. */
int coord_arg_duration(struct http_req *req, const char *name, int64_t def,
    int64_t *ms);

/*
 * Answers everyone on l alike: with obj (its reference taken) when st is
 * ST_OK, else with the error st and msg. The reply is built once.
 */
void coord_answer_all(struct waitlist *l, enum status st, const char *msg,
    json_t *obj);

/* UNAVAILABLE with Retry-After: what every request gets while closing. */
void coord_reply_closing(struct http_req *req);

/* The key routes, from coord_kv.c. */
void coord_kv_route(struct coord *co, struct http_req *req, const char *rest);
void coord_watch_route(struct coord *co, struct http_req *req,
    const char *rest);
void coord_kv_observe(const struct kv_event *ev, void *arg);

/* The cluster routes and state, from coord_cluster.c. */
int coord_cluster_init(struct coord *co, const struct coord_config *cfg,
    char *err, size_t errlen);
void coord_cluster_free(struct coord *co);
void coord_cluster_shutdown(struct coord *co);
/* Starts a new epoch when no task is connected any more. */
void coord_cluster_settle(struct coord *co);
void coord_tasks_route(struct coord *co, struct http_req *req,
    const char *rest);
void coord_errors_route(struct coord *co, struct http_req *req);
void coord_epoch_route(struct coord *co, struct http_req *req);
struct task *coord_task(struct coord *co, const char *name);
void coord_task_disconnect(struct coord *co, struct task *t);
void coord_task_set_error(struct coord *co, struct task *t, enum status st,
    const char *msg, int reported, int propagate);
json_t *coord_status_json(struct coord *co);

/* Barriers, from coord_barrier.c. */
void coord_barriers_route(struct coord *co, struct http_req *req,
    const char *rest);
void coord_barrier_arrive(struct coord *co, struct http_req *req,
    struct barrier *b, struct task *t, int64_t wait);
struct barrier *coord_barrier_new(struct coord *co, const char *id,
    int64_t timeout_ms);
void coord_barrier_complete(struct barrier *b, enum status st,
    const char *msg);
void coord_barriers_task_failed(struct coord *co, struct task *t);
void coord_barriers_free(struct coord *co);
void coord_barriers_shutdown(struct coord *co);
json_t *coord_barriers_json(struct coord *co);
/* The names of the members of b that have (arrived) or not arrived. */
char *coord_barrier_names(struct coord *co, const struct barrier *b,
    int arrived, size_t max);

#endif
