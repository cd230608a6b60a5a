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
	size_t klen;
	char key[];
};

struct coord {
	pthread_mutex_t mu;
	struct timers *timers;
	struct http_server *srv;
	struct kvstore *kv;
	struct strmap *getters;         /* key -> struct waitlist */
	struct waitlist watchers;
	volatile int closing;           /* written under mu, read anywhere */
};

/* Parks req on list until answered or timeout_ms passes (then expire). */
struct waiter *waiter_park(struct coord *co, struct http_req *req,
    struct waitlist *list, int64_t timeout_ms,
    void (*expire)(struct waiter *w), const char *key, size_t klen);
/* Takes w off its list and timer; the caller then answers w->req. */
void waiter_unlink(struct waiter *w);
void waiter_free(struct waiter *w);

/* Parses a duration query argument; def when absent. -1 (and a reply)
 * when malformed. */
int coord_arg_duration(struct http_req *req, const char *name, int64_t def,
    int64_t *ms);

/* UNAVAILABLE with Retry-After: what every request gets while closing. */
void coord_reply_closing(struct http_req *req);

/* The key routes, from coord_kv.c. */
void coord_kv_route(struct coord *co, struct http_req *req, const char *rest);
void coord_watch_route(struct coord *co, struct http_req *req,
    const char *rest);
void coord_kv_observe(const struct kv_event *ev, void *arg);

#endif
