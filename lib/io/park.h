/*
 * park.h: parked requests, the shape of redis's blocked.c. A blocking call
 * (a get that waits for its key, a barrier, a watch, a fetch) is parked: it
 * holds no thread, sits on a list with a deadline, and is answered either
 * by whoever wakes its list or, at the deadline, by its expire function.
 *
 * One struct park serves one daemon and is guarded by the daemon's own
 * lock (the mutex given to park_new): every call below is made with that
 * lock held, except park_new, park_free and park_unlock. Answers given
 * under the lock are only recorded; the connections are resumed, and the
 * replies that were deferred are built, by park_unlock once the lock is
 * free. So a put that releases 10,000 getters holds the lock for the time
 * it takes to unlink them, not to send 10,000 replies.
 */
#ifndef MUSTER_PARK_H
#define MUSTER_PARK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "http_server.h"
#include "timer.h"

struct park;
struct parked;
struct park_index;

/* A list of parked requests waiting for the same thing. */
struct park_list {
	struct parked *head;
	size_t count;
	struct park_index *index; /* the index that owns it, if any */
	int busy;                 /* being walked: do not free */
	size_t klen;
	char *key;
};

typedef void (*park_fn)(struct parked *w);

/* One parked request. Fields after req are the caller's to use. */
struct parked {
	struct timer timer; /* first: the deadline */
	struct park *park;
	struct park_list *list;
	struct parked *prev, *next; /* on list */
	struct parked *out;         /* on the answered list */
	park_fn expire;             /* answers at the deadline */
	park_fn build;              /* answers after the lock, if set */
	park_fn drop;               /* frees ctx when the client left */
	struct http_req *req;
	void *obj; /* what it waits on */
	void *ctx; /* for build */
	int64_t since;
	int64_t limit;
	size_t klen;
	char key[];
};

/*
 * The longest a request may wait, by default: a client that wants longer
 * asks again (ours poll for 30 s at a time). A long poll whose client
 * vanished without a word (a host that went down) holds its socket no
 * longer. PARK_MAX_WAIT_MS bounds what may be set.
 */
#define PARK_WAIT_DEFAULT_MS (10LL * 60 * 1000)
#define PARK_MAX_WAIT_MS (24LL * 3600 * 1000)

/*
 * A request's wait (query argument name, a duration; def when absent),
 * capped at PARK_MAX_WAIT_MS: 0, or -1 after replying INVALID_ARGUMENT.
 */
int park_wait_arg(struct http_req *req, const char *name, int64_t def,
    int64_t *ms);

struct park *park_new(pthread_mutex_t *mu, char *err, size_t errlen);
/* Stops its timers; every parked request must have been answered. */
void park_free(struct park *p);
/* Releases the lock, then resumes what was answered under it. */
void park_unlock(struct park *p);
/*
 * req's client went away (the server's gone callback): takes the lock,
 * and if req is still parked takes it off its list, calls its drop
 * function and answers it (the answer goes nowhere); then lets the lock
 * go the way park_set_unlock says, so that the daemon acts on what the
 * drop function changed.
 */
void park_gone(struct park *p, struct http_req *req);
/*
 * How the timer thread and park_gone let the lock go: unlock(arg) must
 * end with park_unlock. For a daemon that acts on what its deadlines or
 * a departed client changed before it lets go. Default: park_unlock.
 */
void park_set_unlock(struct park *p, void (*unlock)(void *arg), void *arg);
/* Caps every wait at max_ms (0: PARK_WAIT_DEFAULT_MS). Before use. */
void park_set_max_wait(struct park *p, int64_t max_ms);
/* The timers, for the daemon's own deadlines (same lock). */
struct timers *park_timers(struct park *p);
/* Requests parked now. */
size_t park_count(const struct park *p);

/*
 * Parks req on l until answered, or until timeout_ms passes: then expire
 * runs (under the lock) and must reply to w->req. key is copied into the
 * parked request. NULL on ENOMEM (req is then still the caller's).
 */
struct parked *park_add(struct park *p, struct http_req *req,
    struct park_list *l, int64_t timeout_ms, park_fn expire, const char *key,
    size_t klen);

/*
 * Takes w off its list and its deadline; the caller replies to w->req at
 * once (the reply goes out after the lock). w stays readable until then.
 */
void park_take(struct parked *w);
/* The same, but the reply is built after the lock by build(w). */
void park_take_later(struct parked *w, park_fn build);
/*
 * Moves w, still parked, to list l with a new deadline timeout_ms from now
 * and a new expire function: a request that waited for one thing now
 * waits for another. 0; -1 only if the timers ran out of memory, and w is
 * then on no list: answer it with park_take.
 */
int park_move(struct parked *w, struct park_list *l, int64_t timeout_ms,
    park_fn expire);
/* Answers everyone on l with one shared reply (sh stays the caller's). */
void park_answer_all(struct park_list *l, struct http_shared *sh);

/*
 * Lists by key, made on first use and freed when they empty: getters by
 * key, watchers by prefix.
 */
struct park_index *park_index_new(void);
void park_index_free(struct park_index *ix);
/* The list for key, made if missing; NULL on ENOMEM. */
struct park_list *park_index_list(struct park_index *ix, const char *key,
    size_t klen);
/* The list for key if anyone waits there, else NULL. */
struct park_list *park_index_find(const struct park_index *ix, const char *key,
    size_t klen);
/* Lists of the index in use; call fn on each (fn may empty a list). */
void park_index_each(struct park_index *ix,
    void (*fn)(struct park_list *l, void *arg), void *arg);
size_t park_index_waiting(const struct park_index *ix);

/* Marks l as being walked, and frees it afterwards if it went empty. */
void park_list_hold(struct park_list *l);
void park_list_release(struct park_list *l);
/* Frees l if it belongs to an index, is empty and is not being walked. */
void park_list_prune(struct park_list *l);

#endif
