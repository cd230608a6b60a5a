#include "preempt.h"
#include "coord_call.h"
#include "duration.h"
#include "log.h"
#include "parse.h"
#include "text.h"
#include "wallclock.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum status
preempt_publish(struct coord_client *cc, int64_t *death_ms, int64_t deadline)
{
	char when[48];
	struct buf cur = {0};
	enum status st;

	wall_format(*death_ms, when, sizeof(when));
	st = coord_kv_put(cc, PREEMPT_NOTICE_KEY, when, strlen(when),
	    COORD_PUT_INSERT, deadline, NULL);
	if (st != ST_ALREADY_EXISTS)
		return st;
	/* Another task was first: its death time stands. */
	st = coord_kv_get(cc, PREEMPT_NOTICE_KEY, 0, deadline, &cur, NULL);
	if (st == ST_OK &&
	    wall_parse_rfc3339(cur.data != NULL ? cur.data : "", death_ms) < 0)
		st = ST_OK;
	buf_free(&cur);
	return st;
}

/* What the tasks posted: the largest step, and who posted what. */
struct steps {
	int64_t max;
	int with;    /* tasks that had reached a step */
	int without; /* tasks that had not reached any yet */
};

/* Reads every task's posted step from the counter directory. */
static enum status
read_steps(struct coord_client *cc, int64_t deadline, struct steps *sp)
{
	json_t *reply, *e;
	struct buf v = {0};
	enum status st;
	size_t i;

	memset(sp, 0, sizeof(*sp));
	if ((st = coord_kv_dir(cc, PREEMPT_COUNTER_DIR, deadline, &reply)) !=
	    ST_OK)
		return st;
	json_array_foreach(json_object_get(reply, "entries"), i, e) {
		json_t *val = json_object_get(e, "value");
		int64_t step;

		buf_reset(&v);
		if (!json_is_string(val) ||
		    text_base64_decode(&v, json_string_value(val),
		        json_string_length(val)) < 0 ||
		    parse_int64(v.data != NULL ? v.data : "", &step) < 0) {
			st = coord_fail(cc, ST_FAILED_PRECONDITION,
			    "step counter %s is not a number",
			    json_string_value(json_object_get(e, "key")));
			break;
		}
		if (step < 0) {
			sp->without++;
			continue;
		}
		if (sp->with == 0 || step > sp->max)
			sp->max = step;
		sp->with++;
	}
	buf_free(&v);
	json_decref(reply);
	return st;
}

/*
 * The step this task's command has reached, waiting (until the wall
 * clock says until_ms) for it to reach its first: a command that is still
 * starting (importing, loading a checkpoint) has no step yet, and must not
 * count as being at step 0, or a resumed job would agree on a step every
 * task is already past.
 */
static int64_t
first_step(struct sync_page *page, int64_t step, int64_t until_ms,
    int cancel_fd)
{
	if (step >= 0)
		return step;
	log_info("the command has reported no step yet: waiting for its "
	         "first");
	while ((step = atomic_load(&page->step)) < 0 &&
	    wall_now_ms() < until_ms && nap(cancel_fd, 10) == 0)
		;
	return step;
}

/*
 * Whether coordd holds a task of the job in error now: a failure trumps
 * the notice, so no sync point may be agreed while one is. ST_OK when
 * none; ST_INTERNAL naming the task when one is; the call's error when
 * coordd could not say.
 */
static enum status
none_failed(struct coord_client *cc, int64_t deadline, char *why, size_t whylen)
{
	json_t *errors, *e;
	enum status st = coord_errors_now(cc, deadline, &errors);

	if (st != ST_OK) {
		snprintf(why, whylen, "asking for the tasks in error: %.900s",
		    coord_client_error(cc));
		return st;
	}
	if ((e = json_array_get(errors, 0)) != NULL) {
		struct coord_task_error te;
		coord_task_error(e, &te);
		snprintf(why, whylen, "task %s is in error: %s: %.700s",
		    te.task, te.code, te.message);
		st = ST_INTERNAL;
	}
	json_decref(errors);
	return st;
}

/*
 * The sync step, written once: the first task to reach a decision writes
 * its own (mine), and every task reads that one value. Tasks that read the
 * counters at other times (one stalled, one whose counter was written
 * again by a restarted incarnation) would otherwise take other maxima. A
 * write whose outcome is unknown (the connection broke after it was sent)
 * is sent again: finding the key then is finding one's own, or another's.
 */
static enum status
agree(struct coord_client *cc, int cancel_fd, int64_t mine, int64_t deadline,
    int64_t *agreed, char *why, size_t whylen)
{
	struct buf cur = {0};
	char num[32];
	enum status st;

	snprintf(num, sizeof(num), "%" PRId64, mine);
	for (;;) {
		st = coord_kv_put(cc, PREEMPT_SYNC_KEY, num, strlen(num),
		    COORD_PUT_INSERT, deadline, NULL);
		if (st == ST_OK) {
			*agreed = mine;
			return ST_OK;
		}
		if (st != ST_UNAVAILABLE || duration_now_ms() >= deadline ||
		    nap(cancel_fd, 50) < 0)
			break;
	}
	if (st != ST_ALREADY_EXISTS) {
		snprintf(why, whylen, "writing the sync step %s: %.900s", num,
		    coord_client_error(cc));
		return st;
	}
	st = coord_kv_get(cc, PREEMPT_SYNC_KEY, 0, deadline, &cur, NULL);
	if (st == ST_OK &&
	    (parse_int64(cur.data != NULL ? cur.data : "", agreed) < 0 ||
	        *agreed < 0)) {
		snprintf(why, whylen, "%s holds %.40s, not a step",
		    PREEMPT_SYNC_KEY, cur.data != NULL ? cur.data : "");
		st = ST_FAILED_PRECONDITION;
	} else if (st != ST_OK) {
		snprintf(why, whylen, "reading the sync step: %.900s",
		    coord_client_error(cc));
	}
	buf_free(&cur);
	return st;
}

enum status
preempt_sync(struct coord_client *cc, const struct coord_agent *a,
    struct sync_page *page, int64_t barrier_timeout_ms,
    int64_t first_step_until_ms, int cancel_fd, int64_t *sync_step)
{
	char key[256], num[32], why[1000];
	json_t *everyone = json_string("all");
	struct steps sp;
	int64_t step, deadline;
	enum status st;

	/* Steps stop here until the answer is known (or the protocol fails). */
	step = first_step(page, sync_page_freeze(page), first_step_until_ms,
	    cancel_fd);
	deadline = duration_now_ms() + barrier_timeout_ms + 10000;
	snprintf(key, sizeof(key), "%s/%s", PREEMPT_COUNTER_DIR, a->task);
	snprintf(num, sizeof(num), "%" PRId64, step >= 0 ? step : -1);
	st = coord_kv_put(cc, key, num, strlen(num), COORD_PUT_OVERWRITE,
	    deadline, NULL);
	if (st != ST_OK) {
		snprintf(why, sizeof(why), "posting step %s: %.900s", num,
		    coord_client_error(cc));
		goto fail;
	}
	/*
	 * Every task of the cluster is a member, whatever its state when the
	 * first arrives: one in error fails the barrier at once, one still
	 * registering is waited for. A barrier of the tasks connected then
	 * would pass without a task in error, and agree without it.
	 */
	st = coord_barrier_wait(cc, a, PREEMPT_BARRIER, barrier_timeout_ms,
	    everyone, deadline, 0, NULL, NULL);
	if (st != ST_OK) {
		snprintf(why, sizeof(why), "barrier %s: %.900s",
		    PREEMPT_BARRIER, coord_client_error(cc));
		goto fail;
	}
	if ((st = read_steps(cc, deadline, &sp)) != ST_OK) {
		snprintf(why, sizeof(why), "reading the steps: %.900s",
		    coord_client_error(cc));
		goto fail;
	}
	/* A task may have failed since the barrier passed. */
	if ((st = none_failed(cc, deadline, why, sizeof(why))) != ST_OK)
		goto fail;
	/* A sync point is one every task of the job agreed on: a task in
	 * error, or gone, voids it (a failure trumps a notice). */
	if (a->world > 0 && sp.with + sp.without < a->world) {
		st = ST_FAILED_PRECONDITION;
		snprintf(why, sizeof(why),
		    "only %d of the %ld tasks took part "
		    "(the others failed or left): no sync point every task "
		    "agreed on",
		    sp.with + sp.without, a->world);
		goto fail;
	}
	if (sp.with == 0) {
		st = ST_FAILED_PRECONDITION;
		snprintf(why, sizeof(why),
		    "no task had reached a step before "
		    "the death time drew near: no sync point");
		goto fail;
	}
	if ((st = agree(cc, cancel_fd, sp.max + 1, deadline, sync_step, why,
	         sizeof(why))) != ST_OK)
		goto fail;
	json_decref(everyone);
	atomic_store(&page->sync_step, *sync_step);
	sync_page_set(page, SYNC_KNOWN);
	if (*sync_step == sp.max + 1)
		log_info("sync point: step %" PRId64 " (the furthest of %d "
		         "tasks was at %" PRId64 "%s)",
		    *sync_step, sp.with + sp.without, sp.max,
		    sp.without > 0 ? "; some had reached no step yet" : "");
	else
		log_info("sync point: step %" PRId64 ", as first agreed (the "
		         "counters read here, later, gave step %" PRId64 ")",
		    *sync_step, sp.max + 1);
	if (step > *sync_step ||
	    (step < 0 && atomic_load(&page->step) > *sync_step))
		log_info("this task is past the sync point: its checkpoint "
		         "will not be at step %" PRId64,
		    *sync_step);
	/* Who knows the step, for people, status pages and benchmarks. */
	snprintf(key, sizeof(key), "%s/%s", PREEMPT_SYNCED_DIR, a->task);
	snprintf(num, sizeof(num), "%" PRId64, *sync_step);
	if (coord_kv_put(cc, key, num, strlen(num), COORD_PUT_OVERWRITE,
	        deadline, NULL) != ST_OK)
		log_info("could not record that this task knows the sync "
		         "step: %s",
		    coord_client_error(cc));
	return ST_OK;
fail:
	json_decref(everyone);
	if (st != ST_CANCELLED)
		log_info("preemption sync failed: %s", why);
	/* Nobody may wait for us at a barrier we will not reach. */
	coord_barrier_cancel(cc, a, PREEMPT_BARRIER, duration_now_ms() + 2000);
	sync_page_set(page, SYNC_FAILED);
	coord_fail(cc, st, "%s", why);
	return st;
}

void *
preempt_watcher(void *arg)
{
	struct preempt_watch *pw = arg;
	struct session *s = pw->s;
	struct coord_client *cc = session_client(s);
	struct buf val = {0};
	int64_t death = 0, sync_step = -1, start;
	char when[48], d[32];
	enum status st;

	if (cc == NULL)
		return NULL;
	for (;;) {
		st = coord_kv_get(cc, PREEMPT_NOTICE_KEY, 1, HTTP_NO_DEADLINE,
		    &val, NULL);
		if (st == ST_OK || st == ST_CANCELLED)
			break;
		if (nap(cancel_fd(&s->cancel), 1000) < 0) {
			st = ST_CANCELLED;
			break;
		}
	}
	if (st == ST_CANCELLED)
		goto out;
	if (wall_parse_rfc3339(val.data != NULL ? val.data : "", &death) < 0) {
		log_info("preemption notice %s is not an RFC 3339 time; taking "
		         "the death time as now + %s",
		    val.data,
		    duration_format(pw->notice_grace_ms, d, sizeof(d)));
		death = wall_now_ms() + pw->notice_grace_ms;
	}
	atomic_store(&pw->page->death_ms, death);
	sync_page_set(pw->page, SYNC_NOTICE);
	session_post(s->q, SESSION_DEATH, s->gen, ST_OK, death, "death time %s",
	    wall_format(death, when, sizeof(when)));
	/* Not too early: only within the window before the death time. */
	start = death - pw->window_ms;
	if (start > wall_now_ms())
		log_info("the sync protocol starts in %s, %s before the death "
		         "time",
		    duration_format(start - wall_now_ms(), d, sizeof(d)),
		    duration_format(pw->window_ms, when, sizeof(when)));
	/* Nor before every task is there: the barrier is everyone's. */
	while (start > wall_now_ms() || !atomic_load(&s->ready)) {
		int64_t left = start - wall_now_ms();
		if (nap(cancel_fd(&s->cancel),
		        !atomic_load(&s->ready) ? 100 :
		            left < 60000        ? left :
		                                  60000) < 0)
			goto out;
	}
	/* A command with no step yet is waited for, up to a little before
	 * it must be stopped. */
	st = preempt_sync(cc, &s->a, pw->page, pw->barrier_timeout_ms,
	    death - pw->grace_ms - 1000, cancel_fd(&s->cancel), &sync_step);
	if (st != ST_CANCELLED)
		session_post(s->q, SESSION_SYNCED, s->gen, st, sync_step, "%s",
		    st == ST_OK ? "synced" : coord_client_error(cc));
out:
	buf_free(&val);
	coord_client_free(cc);
	return NULL;
}
