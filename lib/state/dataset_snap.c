/*
 * dataset_snap.c: the datasets' whole state as a snapshot (the records that
 * would make it, in rec.h's varints), and its restore.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dataset_int.h"
#include "errbuf.h"
#include "rec.h"

static void
snap_end(struct rec_out *o, const struct rec_out *r)
{
	o->err |= r->err;
	rec_put_u(o, r->b->len);
	rec_put_bytes(o, r->b->data, r->b->len);
}

/* The items of a list linked through next at offset off, last first. */
static void **
reversed(void *head, size_t off, size_t *n)
{
	void **v;
	size_t k = 0;

	for (char *p = head; p != NULL; p = *(char **)(p + off))
		k++;
	if ((v = malloc((k + 1) * sizeof(*v))) == NULL)
		return NULL;
	*n = k;
	for (char *p = head; p != NULL; p = *(char **)(p + off))
		v[--k] = p;
	return v;
}

static void
snap_job(struct rec_out *o, struct buf *tmp, const struct ds_job *j)
{
	struct rec_out r;
	void **cv;
	size_t n;

	ds_rec_begin(&r, tmp, R_JOB2);
	ds_enc_job(&r, j);
	snap_end(o, &r);
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next) {
		ds_rec_begin(&r, tmp, R_TASK);
		ds_enc_task(&r, t);
		snap_end(o, &r);
	}
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		for (struct ds_lease *l = t->leases.head; l != NULL;
		     l = l->next) {
			ds_rec_begin(&r, tmp, R_OPEN);
			ds_enc_open(&r, j, l);
			snap_end(o, &r);
		}
	for (struct ds_lease *l = j->queue.head; l != NULL; l = l->next) {
		ds_rec_begin(&r, tmp, R_OPEN);
		ds_enc_open(&r, j, l);
		snap_end(o, &r);
	}
	if ((cv = reversed(j->clients, offsetof(struct ds_client, next), &n)) ==
	    NULL) {
		o->err = 1;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		ds_rec_begin(&r, tmp, R_CLIENT);
		ds_enc_client(&r, cv[i]);
		snap_end(o, &r);
	}
	free(cv);
}

int
ds_snapshot(struct ds *ds, struct buf *out)
{
	struct rec_out o = {out, 0}, r;
	struct buf tmp = {0};
	void **wv, **dv, **jv;
	size_t nw, nd, nj, nrec;

	wv = reversed(ds->workers, offsetof(struct ds_worker, next), &nw);
	dv = reversed(ds->datasets, offsetof(struct ds_dataset, next), &nd);
	jv = reversed(ds->jobs, offsetof(struct ds_job, link), &nj);
	if (wv == NULL || dv == NULL || jv == NULL) {
		o.err = 1;
		goto done;
	}
	rec_put_u(&o, DS_SNAP_VERSION);
	ds_rec_begin(&r, &tmp, R_COUNTERS);
	rec_put_u(&r, ds->next_dataset);
	rec_put_u(&r, ds->next_job);
	rec_put_u(&r, ds->next_task);
	rec_put_u(&r, ds->next_client);
	rec_put_u(&r, ds->leases);
	rec_put_u(&r, ds->releases);
	rec_put_u(&r, ds->collected);
	snap_end(&o, &r);
	for (size_t i = 0; i < nw; i++) {
		ds_rec_begin(&r, &tmp, R_WORKER);
		ds_enc_worker(&r, wv[i]);
		snap_end(&o, &r);
	}
	for (size_t i = 0; i < nd; i++) {
		ds_rec_begin(&r, &tmp, R_DATASET);
		ds_enc_dataset(&r, dv[i]);
		snap_end(&o, &r);
	}
	for (size_t i = 0; i < nj && !o.err; i++)
		snap_job(&o, &tmp, jv[i]);
	/* Cut short at a record's end, it would load: say where it ends. */
	nrec = 1 + nw + nd;
	for (size_t i = 0; i < nj; i++) {
		const struct ds_job *j = jv[i];
		nrec += 1 + j->nclients + j->leases->count;
		for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
			nrec++;
	}
	ds_rec_begin(&r, &tmp, R_END);
	rec_put_u(&r, nrec);
	snap_end(&o, &r);
done:
	free(wv);
	free(dv);
	free(jv);
	buf_free(&tmp);
	return o.err ? -1 : 0;
}

int
ds_restore(struct ds *ds, const void *p, size_t len, int64_t now, char *err,
    size_t errlen)
{
	struct rec_in in;
	uint64_t version;
	size_t n = 0;
	char e[256];

	if (ds->datasets != NULL || ds->jobs != NULL || ds->workers != NULL)
		return errbuf_say(err, errlen,
		    "a snapshot loads into an empty state");
	rec_in_init(&in, p, len);
	if ((version = rec_get_u(&in)) != DS_SNAP_VERSION || in.err)
		return errbuf_say(err, errlen,
		    "snapshot: version %" PRIu64 ", not %d", version,
		    DS_SNAP_VERSION);
	for (;;) {
		uint64_t rlen = rec_get_u(&in);
		const void *rec = rlen <= rec_left(&in) ?
		    rec_get_bytes(&in, (size_t)rlen) :
		    NULL;
		struct rec_in r;
		if (rec == NULL)
			return errbuf_say(err, errlen,
			    "snapshot: cut short at record %zu", n);
		rec_in_init(&r, rec, (size_t)rlen);
		if (rec_get_u(&r) == R_END) {
			if (rec_get_u(&r) != n || ds_ended_badly(&r) ||
			    rec_left(&in) != 0)
				return errbuf_say(err, errlen,
				    "snapshot: its end does not match its %zu "
				    "records",
				    n);
			break;
		}
		if (ds_apply(ds, rec, (size_t)rlen, now, e, sizeof(e)) < 0)
			return errbuf_say(err, errlen,
			    "snapshot: record %zu: %s", n, e);
		n++;
	}
	for (struct ds_dataset *d = ds->datasets; d != NULL; d = d->next)
		if (d->id > ds->next_dataset)
			return errbuf_say(err, errlen,
			    "snapshot: dataset %" PRIu64 " above its counter",
			    d->id);
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link) {
		if (j->eff == SHARD_DYNAMIC &&
		    j->done + j->leases->count != j->next)
			return errbuf_say(err, errlen,
			    "snapshot: job %" PRIu64 " has %" PRIu64
			    " seqs done and %zu open, but %" PRIu64
			    " leased in all",
			    j->id, j->done, j->leases->count, j->next);
		/* Ids are never given twice. */
		if (j->id > ds->next_job)
			return errbuf_say(err, errlen,
			    "snapshot: job %" PRIu64 " above its counter",
			    j->id);
		for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
			if (t->id > ds->next_task)
				return errbuf_say(err, errlen,
				    "snapshot: task %" PRIu64
				    " above its counter",
				    t->id);
		for (struct ds_client *c = j->clients; c != NULL; c = c->next)
			if (c->id > ds->next_client)
				return errbuf_say(err, errlen,
				    "snapshot: client %" PRIu64
				    " above its counter",
				    c->id);
	}
	return 0;
}
