/*
 * coord_int.h: what the parts of coordd's HTTP binding share. Not for
 * programs: they use coord.h.
 *
 * The state machines (kvstore, registry, barriers) know nothing of HTTP;
 * this layer parses requests, calls them under co->mu, parks what must
 * wait, and answers. Every locked section ends with coord_unlock, which
 * acts on what the state machines reported (a failed task fails barriers
 * and wakes error pollers; a new epoch clears the run's keys), then lets
 * the lock go and sends the answers given under it.
 */
#ifndef MUSTER_COORD_INT_H
#define MUSTER_COORD_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "barrier.h"
#include "buf.h"
#include "commit.h"
#include "coord.h"
#include "http_server.h"
#include "journal.h"
#include "kvstore.h"
#include "park.h"
#include "registry.h"
#include "route.h"
#include "timer.h"

/* A task's own secret, chosen by its agent and sent with each of its
 * requests; GET /v1/tasks never shows it. */
#define COORD_SECRET_HEADER "X-Muster-Task-Secret"
#define COORD_SECRET_MAX 128

struct coord {
	pthread_mutex_t mu;
	struct park *park;
	struct kvstore *kv;
	struct park_index *getters;  /* key -> parked gets */
	struct park_index *watchers; /* prefix -> parked watches */
	struct registry *reg;
	const struct reg_view *rv; /* the registry's counters */
	struct barriers *bars;
	int64_t shutdown_timeout; /* 0: no shutdown barrier */
	struct timer scan;        /* the heartbeat scan */
	struct timer bar_timer;   /* the earliest barrier deadline */
	struct park_list error_waiters;
	struct park_list all_waiters;
	struct park_list epoch_waiters;
	struct park_list *rejoin; /* per task: barrier waits held up
					 * until its agent registers again */
	struct reg_event *events; /* reported, not yet acted on */
	size_t nevents, capevents;
	/* The pump's hooks, set by coord_open: what acts on one task event
	 * (coord_tasks_react), and what runs once none is left (the barrier
	 * timer re-armed, the journal settled). */
	void (*react)(struct coord *co, const struct reg_event *ev);
	void (*settled)(struct coord *co);
	atomic_int closing;
	/*
	 * What coordd could have heard: the server (once started), per task
	 * the worker that read its last heartbeat, and the time the whole
	 * process stood still (its heartbeat scan ran late) in all and as
	 * of each task's last heartbeat.
	 */
	struct http_server *_Atomic srv;
	struct coord_heard {
		struct http_attn attn;
		int64_t stalled;
	} * heard;
	int64_t stalled;
	/* Per task: the secret its current registration was made with. */
	struct coord_secret {
		char v[COORD_SECRET_MAX + 1];
		size_t len; /* 0: none */
	} * secret;
	int authenticated; /* coordd has a token: tasks need secrets */
	/* The state directory (NULL: none); see coord_journal.c. */
	struct commit *commit;
	int jlive;           /* changes are journaled (replay is over) */
	int jfresh;          /* replay has seen no key-value state yet */
	int ctl_dirty;       /* the tasks may differ from ctl_last */
	struct buf ctl_last; /* the last 'T' record */
	struct buf jrec;     /* the record being made */
	char jerr[256];
	/* Per task: the shutdown barrier's answer, once it went through. */
	struct coord_said {
		int set;
		enum status st;
		char *msg;
	} * shutdown_said;
};

/*
 * The parts, lowest first; each calls only those above it in this list.
 *
 * coord_core.c: the lock, the pump, parking and common answers.
 */
void coord_lock(struct coord *co);
/* Runs the pump (the hooks, until no event is left), then lets go. */
void coord_unlock(struct coord *co);
int coord_closing(struct coord *co);
/* The registry's observer: queues ev for the pump. */
void coord_task_event(const struct reg_event *ev, void *arg);
/*
 * Whether req comes from t's current registration: it carries the secret
 * t registered with (if t registered with one), or, with optional, none
 * at all (an operator's reset or cancel). Replies UNAUTHENTICATED if not.
 */
int coord_task_proven(struct coord *co, struct http_req *req,
    const struct reg_task *t, int optional);
/* While the state directory cannot be written: refuses req, 1. */
int coord_refuse(struct coord *co, struct http_req *req);
/*
 * Answers everyone on l alike: with obj (its reference taken) when st is
 * ST_OK, else with the error st and msg. The reply is built once.
 */
void coord_answer_all(struct park_list *l, enum status st, const char *msg,
    json_t *obj);
/* UNAVAILABLE with Retry-After: what every request gets while closing. */
void coord_reply_closing(struct http_req *req);
/* Parks req on l; replies RESOURCE_EXHAUSTED itself when it cannot. */
struct parked *coord_park(struct coord *co, struct http_req *req,
    struct park_list *l, int64_t wait, park_fn expire, const char *key,
    size_t klen);

/*
 * coord_journal.c: the state directory. coord_journal_open reads it back
 * (before serving) and journals every change after; coord_journal_settle,
 * at the end of each locked section, writes the tasks' state when it
 * changed and compacts; coord_journal_barrier records an ended barrier.
 */
enum status coord_journal_open(struct coord *co, const char *dir,
    enum journal_fsync mode, size_t max_bytes, char *err, size_t errlen);
/* The same over etcd (--store): the replica stands by until elected. */
enum status coord_store_open(struct coord *co, const struct store_config *sc,
    char *err, size_t errlen);
void coord_journal_settle(struct coord *co);
void coord_journal_barrier(struct coord *co, const struct barrier *b);

/* coord_kv.c: keys and watches. */
void coord_kv_route(struct coord *co, struct http_req *req, const char *rest);
void coord_watch_route(struct coord *co, struct http_req *req,
    const char *rest);
void coord_kv_observe(const struct kv_event *ev, void *arg);

/* coord_barriers.c */
void coord_barrier_route(struct http_req *req, const struct route_match *m,
    void *arg);
/* The observer of the barriers: answers everyone waiting at b. */
void coord_barrier_ended(struct barrier *b, void *arg);
void coord_barrier_timer(struct timer *t);
/* Re-arms the barrier timer at the earliest deadline. */
void coord_barriers_arm(struct coord *co);
/* Parks req at b until it ends or wait passes. */
void coord_barrier_park(struct coord *co, struct http_req *req,
    struct barrier *b, int64_t wait, int64_t now);
/* The same for w, parked already for something else. */
void coord_barrier_move(struct coord *co, struct parked *w, struct barrier *b,
    int64_t wait, int64_t now);
/* Task t registered: decide the barrier waits held up for it. */
void coord_barriers_rejoined(struct coord *co, struct reg_task *t);
void coord_barriers_drain_rejoins(struct coord *co);
/* Answers req as barrier b ended (or with the verdict st, msg). */
void coord_barrier_reply(struct http_req *req, const char *id, enum status st,
    const char *msg);

/* coord_tasks.c: the registry's routes. */
void coord_tasks_status_route(struct http_req *req, const struct route_match *m,
    void *arg);
/* GET /v1/barriers: the barriers in flight. */
void coord_barriers_status_route(struct http_req *req,
    const struct route_match *m, void *arg);
/* /v1/tasks/JOB/INDEX[/VERB]: the op says which. */
void coord_task_route(struct http_req *req, const struct route_match *m,
    void *arg);
extern const struct task_op coord_task_get, coord_task_register,
    coord_task_heartbeat, coord_task_error, coord_task_wait_all,
    coord_task_shutdown, coord_task_reset;
void coord_errors_route(struct coord *co, struct http_req *req);
void coord_epoch_route(struct coord *co, struct http_req *req);
/* Acts on one event the registry reported. */
void coord_tasks_react(struct coord *co, const struct reg_event *ev);
void coord_tasks_shutdown(struct coord *co);
void coord_tasks_scan(struct timer *t);

#endif
