/*
 * dsjson.c: dispatchd's data side in JSON (dsjson.h): requests read into
 * dataset.h's structs, each checked for its shape in the order the state
 * machine's own checks follow, and replies written from its state.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dsjson.h"

static enum status
nomem(char *msg, size_t msglen)
{
	snprintf(msg, msglen, "out of memory");
	return ST_RESOURCE_EXHAUSTED;
}

/* Datasets. */

enum status
dsjson_dataset_register(struct ds *ds, json_t *def, struct ds_dataset **out,
    int *created, char *msg, size_t msglen)
{
	json_t *splits = json_object_get(def, "splits"), *v;
	const char *fr = json_string_value(json_object_get(def, "framing"));
	struct ds_dataset_def d = {
	    .reader = json_string_value(json_object_get(def, "reader")),
	    .framing = FRAME_LINES,
	    .reader_skips = json_is_true(json_object_get(def, "reader_skips")),
	    .name = json_string_value(json_object_get(def, "name")),
	};
	const char **sv;
	enum status st;
	size_t i;

	*created = 0;
	if (!json_is_array(splits) || json_array_size(splits) == 0) {
		snprintf(msg, msglen, "splits must be a list of one or more");
		return ST_INVALID_ARGUMENT;
	}
	if (json_array_size(splits) > UINT32_MAX) {
		snprintf(msg, msglen, "too many splits");
		return ST_RESOURCE_EXHAUSTED;
	}
	if (d.reader == NULL || *d.reader == '\0') {
		snprintf(msg, msglen, "a dataset needs a reader command");
		return ST_INVALID_ARGUMENT;
	}
	if (fr != NULL && framing_parse(fr, &d.framing) < 0) {
		snprintf(msg, msglen, "framing %s is not lines, nul or len32",
		    fr);
		return ST_INVALID_ARGUMENT;
	}
	if (d.name != NULL && !ds_name_ok(d.name)) {
		snprintf(msg, msglen,
		    "dataset name %s: 1 to 128 of A-Z a-z 0-9 - _ ., not all "
		    "digits",
		    d.name);
		return ST_INVALID_ARGUMENT;
	}
	if ((sv = calloc(json_array_size(splits), sizeof(*sv))) == NULL)
		return nomem(msg, msglen);
	json_array_foreach(splits, i, v) {
		const char *s = json_string_value(v);
		size_t n = json_is_string(v) ? json_string_length(v) : 0;
		if (s == NULL || n == 0 || n > DS_SPLIT_MAX ||
		    memchr(s, '\n', n) != NULL || strlen(s) != n) {
			free(sv);
			snprintf(msg, msglen,
			    "split %zu: a split is a string of 1 to %d bytes "
			    "with no newline or NUL",
			    i, DS_SPLIT_MAX);
			return ST_INVALID_ARGUMENT;
		}
		sv[i] = s;
	}
	d.splits = sv;
	d.nsplits = json_array_size(splits);
	st = ds_dataset_register(ds, &d, out, created, msg, msglen);
	free(sv);
	return st;
}

json_t *
dsjson_dataset(const struct ds_dataset *d)
{
	char id[24];

	snprintf(id, sizeof(id), "%" PRIu64, d->id);
	return json_pack("{s:s,s:o,s:I,s:s,s:s,s:b,s:s}", "id", id, "name",
	    d->name != NULL ? json_string(d->name) : json_null(), "splits",
	    (json_int_t)d->nsplits, "reader", d->reader, "framing",
	    framing_name(d->framing), "reader_skips", d->reader_skips,
	    "fingerprint", d->fp);
}

json_t *
dsjson_datasets(const struct ds *ds)
{
	json_t *a = json_array();

	for (const struct ds_dataset *d = ds_datasets(ds); d != NULL;
	     d = d->next)
		json_array_insert_new(a, 0, dsjson_dataset(d));
	return json_pack("{s:o}", "datasets", a);
}

/* Jobs. */

static int
json_long(json_t *o, const char *key, long def, long min, long max, long *v,
    char *msg, size_t msglen)
{
	json_t *x = json_object_get(o, key);

	*v = def;
	if (x == NULL || json_is_null(x))
		return 0;
	if (!json_is_integer(x) || json_integer_value(x) < min ||
	    json_integer_value(x) > max) {
		snprintf(msg, msglen, "%s must be a number from %ld to %ld",
		    key, min, max);
		return -1;
	}
	*v = (long)json_integer_value(x);
	return 0;
}

/* A position (ds_position) and the memory that holds it. */
struct pos {
	struct ds_position p;
	struct ds_open_seq *open;
	struct span *skip;
	char *text;
};

static void
pos_free(struct pos *x)
{
	free(x->open);
	free(x->skip);
	free(x->text);
}

/*
 * from_state st as a position: what it gave badly is marked, not refused,
 * since only the job's checks, in their turn, say whether it matters. Its
 * open seqs stop at the first with a bad range: the checks stop there at
 * the latest. -1: memory ran out.
 */
static int
pos_read(json_t *st, struct pos *x)
{
	json_t *open = json_object_get(st, "open");
	json_t *next = json_object_get(st, "next"), *o, *r;
	size_t i, k, nskip = 0;

	memset(x, 0, sizeof(*x));
	/* The same for the same position whoever wrote it: joins compare
	 * it. NULL (not an object or a list, or out of memory): the job
	 * says so when it needs it. */
	x->p.text = x->text = json_dumps(st, JSON_COMPACT | JSON_SORT_KEYS);
	x->p.dataset = json_string_value(json_object_get(st, "dataset"));
	x->p.seed = json_integer_value(json_object_get(st, "seed"));
	x->p.repeat = json_integer_value(json_object_get(st, "repeat"));
	x->p.next = json_is_integer(next) && json_integer_value(next) >= 0 ?
	    json_integer_value(next) :
	    -1;
	x->p.open_bad = open != NULL && !json_is_array(open);
	json_array_foreach(open, i, o)
		nskip += json_array_size(json_object_get(o, "skip"));
	if ((x->open = calloc(json_array_size(open) + 1, sizeof(*x->open))) ==
	        NULL ||
	    (x->skip = calloc(nskip + 1, sizeof(*x->skip))) == NULL)
		return -1;
	x->p.open = x->open;
	nskip = 0;
	json_array_foreach(open, i, o) {
		json_t *seq = json_object_get(o, "seq");
		struct ds_open_seq *s = &x->open[x->p.nopen++];
		s->seq = json_is_integer(seq) && json_integer_value(seq) >= 0 ?
		    json_integer_value(seq) :
		    -1;
		s->skip = x->skip + nskip;
		json_array_foreach(json_object_get(o, "skip"), k, r) {
			json_t *a = json_array_get(r, 0),
			       *b = json_array_get(r, 1);
			if (!json_is_integer(a) || !json_is_integer(b) ||
			    json_integer_value(a) < 0 ||
			    json_integer_value(b) < json_integer_value(a)) {
				s->skip_bad = 1;
				break;
			}
			x->skip[nskip++] =
			    (struct span){(uint64_t)json_integer_value(a),
			        (uint64_t)json_integer_value(b)};
			s->nskip++;
		}
		if (s->skip_bad)
			break;
	}
	return 0;
}

enum status
dsjson_job_open(struct ds *ds, json_t *req, int64_t now, struct ds_job **job,
    struct ds_client **client, int *created, char *msg, size_t msglen)
{
	json_t *jd = json_object_get(req, "dataset");
	json_t *st = json_object_get(req, "from_state");
	const char *mname = json_string_value(json_object_get(req, "mode"));
	struct ds_job_req r = {
	    .mode = SHARD_DYNAMIC,
	    .name = json_string_value(json_object_get(req, "name")),
	    .run = json_string_value(json_object_get(req, "run")),
	};
	struct pos pos;
	enum status s;
	char key[32];
	long seed;

	*created = 0;
	if (json_is_integer(jd))
		snprintf(key, sizeof(key), "%" JSON_INTEGER_FORMAT,
		    json_integer_value(jd));
	else if (json_is_string(jd))
		snprintf(key, sizeof(key), "%.31s", json_string_value(jd));
	else {
		snprintf(msg, msglen, "a job needs a dataset");
		return ST_INVALID_ARGUMENT;
	}
	if ((r.dataset = ds_dataset_find(ds, key)) == NULL) {
		snprintf(msg, msglen, "no dataset %s", key);
		return ST_NOT_FOUND;
	}
	if (mname != NULL && shard_mode_parse(mname, &r.mode) < 0) {
		snprintf(msg, msglen,
		    "mode %s is not off, dynamic, file, data, file_or_data or "
		    "hint",
		    mname);
		return ST_INVALID_ARGUMENT;
	}
	if (json_long(req, "repeat", 1, 0, 1L << 30, &r.repeat, msg, msglen) <
	        0 ||
	    json_long(req, "consumers", 0, 0, 4096, &r.consumers, msg, msglen) <
	        0 ||
	    json_long(req, "consumer_index", 0, 0, 4095, &r.index, msg,
	        msglen) < 0 ||
	    json_long(req, "seed", 0, 0, INT64_MAX, &seed, msg, msglen) < 0)
		return ST_INVALID_ARGUMENT;
	r.seed = (uint64_t)seed;
	if (r.name != NULL && !ds_name_ok(r.name)) {
		snprintf(msg, msglen,
		    "job name %s: 1 to 128 of A-Z a-z 0-9 - _ ., not all digits",
		    r.name);
		return ST_INVALID_ARGUMENT;
	}
	if (json_object_get(req, "run") != NULL &&
	    (r.run == NULL || !ds_run_ok(r.run) || r.name == NULL)) {
		snprintf(msg, msglen,
		    "run: 1 to 128 of A-Z a-z 0-9 - _ ., with a job name");
		return ST_INVALID_ARGUMENT;
	}
	if (r.consumers > 0 && (r.name == NULL || r.mode == SHARD_DYNAMIC)) {
		snprintf(msg, msglen,
		    "round-robin reads (consumers) need a job name and a mode "
		    "other than dynamic");
		return ST_INVALID_ARGUMENT;
	}
	if (r.consumers > 0 && r.index >= r.consumers) {
		snprintf(msg, msglen, "consumer_index %ld is not below %ld",
		    r.index, r.consumers);
		return ST_INVALID_ARGUMENT;
	}
	if (st != NULL && json_is_null(st))
		st = NULL;
	if (st != NULL && pos_read(st, &pos) < 0) {
		pos_free(&pos);
		return nomem(msg, msglen);
	}
	r.from = st != NULL ? &pos.p : NULL;
	s = ds_job_open(ds, &r, now, job, client, created, msg, msglen);
	if (st != NULL)
		pos_free(&pos);
	return s;
}

static const char *
task_state_name(const struct ds_task *t)
{
	return t->state == DS_TASK_RUNNING ?
	    (t->pending ? "pending" : "running") :
	    t->state == DS_TASK_FINISHED ? "finished" :
	                                   "failed";
}

json_t *
dsjson_job(const struct ds_job *j)
{
	json_t *tasks = json_array();

	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		json_array_append_new(tasks,
		    json_pack("{s:I,s:s,s:s,s:I}", "id", (json_int_t)t->id,
		        "worker", t->w->name, "state", task_state_name(t),
		        "leased", (json_int_t)t->leases.count));
	return json_pack("{s:I,s:o,s:I,s:b,s:b,s:o,s:I,s:s,s:I,s:I,s:o,s:I,s:b,"
	                 "s:o,s:I,s:o,s:I,s:o,s:o,s:I}",
	    "id", (json_int_t)j->id, "name",
	    j->name != NULL ? json_string(j->name) : json_null(), "iteration",
	    (json_int_t)j->iteration, "retired", j->retired, "kept", j->kept,
	    "run", j->run != NULL ? json_string(j->run) : json_null(),
	    "dataset", (json_int_t)j->ds->id, "mode", shard_mode_name(j->mode),
	    "repeat", (json_int_t)j->repeat, "seed", (json_int_t)j->seed,
	    "consumers",
	    j->consumers > 0 ? json_integer(j->consumers) : json_null(),
	    "clients", (json_int_t)j->nclients, "finished", j->finished,
	    "error", j->error != NULL ? json_string(j->error) : json_null(),
	    "splits", (json_int_t)j->ds->nsplits, "done",
	    j->eff == SHARD_DYNAMIC ? json_integer((json_int_t)j->done) :
	                              json_null(),
	    "leased", (json_int_t)ds_job_leased(j), "next",
	    j->eff == SHARD_DYNAMIC ? json_integer((json_int_t)j->next) :
	                              json_null(),
	    "tasks", tasks, "elements", (json_int_t)j->elements);
}

json_t *
dsjson_jobs(const struct ds *ds)
{
	json_t *a = json_array();

	for (const struct ds_job *j = ds_jobs(ds); j != NULL; j = j->link)
		json_array_insert_new(a, 0, dsjson_job(j));
	return json_pack("{s:o}", "jobs", a);
}

json_t *
dsjson_job_start(const struct ds_job *j)
{
	if (j->eff != SHARD_DYNAMIC)
		return NULL;
	if (j->start != NULL)
		return json_loads(j->start, 0, NULL);
	return json_pack("{s:i,s:s,s:s,s:I,s:I,s:i,s:i,s:[]}", "version", 1,
	    "dataset", j->ds->fp, "mode", "dynamic", "repeat",
	    (json_int_t)j->repeat, "seed", (json_int_t)j->seed, "next", 0,
	    "done", 0, "open");
}

static json_t *
ranges_json(const struct ds_lease *l)
{
	json_t *a = json_array();

	for (size_t i = 0; i < l->nr; i++)
		json_array_append_new(a,
		    json_pack("[I,I]", (json_int_t)l->r[i].a,
		        (json_int_t)l->r[i].b));
	return a;
}

enum status
dsjson_checkpoint(const struct ds_job *j, json_t **out, char *msg,
    size_t msglen)
{
	const struct ds_lease **v;
	json_t *open = NULL;
	size_t n;

	if (j->eff != SHARD_DYNAMIC) {
		snprintf(msg, msglen,
		    "job %" PRIu64 " reads in mode %s: only dynamic jobs have "
		    "a position to resume from",
		    j->id, shard_mode_name(j->mode));
		return ST_FAILED_PRECONDITION;
	}
	if ((v = ds_job_open_leases(j, &n)) == NULL ||
	    (open = json_array()) == NULL) {
		free(v);
		return nomem(msg, msglen);
	}
	for (size_t i = 0; i < n; i++)
		json_array_append_new(open,
		    json_pack("{s:I,s:o}", "seq", (json_int_t)v[i]->seq, "skip",
		        ranges_json(v[i])));
	free(v);
	*out = json_pack("{s:i,s:s,s:s,s:I,s:I,s:I,s:I,s:o}", "version", 1,
	    "dataset", j->ds->fp, "mode", shard_mode_name(j->mode), "repeat",
	    (json_int_t)j->repeat, "seed", (json_int_t)j->seed, "next",
	    (json_int_t)j->next, "done", (json_int_t)j->done, "open", open);
	return *out != NULL ? ST_OK : ST_RESOURCE_EXHAUSTED;
}

/* Deliveries and heartbeats. */

/*
 * list's deliveries ([seq, first, end, total] each) into *v (the
 * caller's to free), up to the first that is not one: *cut is set then.
 * -1: memory ran out.
 */
static int
deliveries(json_t *list, struct ds_delivery **v, size_t *n, int *cut)
{
	json_t *x;
	size_t i;

	*n = 0;
	*cut = 0;
	if ((*v = calloc(json_array_size(list) + 1, sizeof(**v))) == NULL)
		return -1;
	json_array_foreach(list, i, x) {
		json_t *s = json_array_get(x, 0), *a = json_array_get(x, 1);
		json_t *b = json_array_get(x, 2), *t = json_array_get(x, 3);
		if (!json_is_integer(s) || !json_is_integer(a) ||
		    !json_is_integer(b) || json_integer_value(s) < 0 ||
		    json_integer_value(a) < 0 ||
		    json_integer_value(b) < json_integer_value(a)) {
			*cut = 1;
			break;
		}
		(*v)[(*n)++] =
		    (struct ds_delivery){(uint64_t)json_integer_value(s),
		        (uint64_t)json_integer_value(a),
		        (uint64_t)json_integer_value(b),
		        json_is_integer(t) ? json_integer_value(t) : -1};
	}
	return 0;
}

static enum status
delivered_bad(size_t i, char *msg, size_t msglen)
{
	snprintf(msg, msglen, "delivered[%zu] must be [seq, first, end, total]",
	    i);
	return ST_INVALID_ARGUMENT;
}

enum status
dsjson_task_delivered(struct ds *ds, struct ds_task *t, json_t *list, char *msg,
    size_t msglen)
{
	struct ds_delivery *v;
	enum status st;
	size_t n;
	int cut;

	if (deliveries(list, &v, &n, &cut) < 0)
		return nomem(msg, msglen);
	st = ds_task_delivered(ds, t, v, n, msg, msglen);
	if (st == ST_OK && cut)
		st = delivered_bad(n, msg, msglen);
	free(v);
	return st;
}

/* The answer to a heartbeat of a client of j. */
static enum status
beat_reply(const struct ds_job *j, json_t **reply)
{
	json_t *tasks = json_array();

	for (const struct ds_task *t = j->tasks; t != NULL; t = t->next) {
		if (!ds_task_listed(t))
			continue;
		json_array_append_new(tasks,
		    json_pack("{s:I,s:s,s:s,s:s,s:I,s:s}", "id",
		        (json_int_t)t->id, "worker", t->w->name, "address",
		        t->w->address, "host", t->w->host, "starting_round",
		        (json_int_t)t->start_round, "state",
		        task_state_name(t)));
	}
	*reply = json_pack("{s:o,s:b,s:o,s:o,s:I,s:o}", "tasks", tasks,
	    "finished", j->finished, "error",
	    j->error != NULL ? json_string(j->error) : json_null(),
	    "block_round",
	    j->rr_target >= 0 ? json_integer(j->rr_target) : json_null(),
	    "splits", (json_int_t)j->ds->nsplits, "splits_done",
	    j->eff == SHARD_DYNAMIC ? json_integer((json_int_t)j->done) :
	                              json_null());
	return *reply != NULL ? ST_OK : ST_RESOURCE_EXHAUSTED;
}

enum status
dsjson_client_beat(struct ds *ds, struct ds_client *c, json_t *body,
    int64_t now, json_t **reply, char *msg, size_t msglen)
{
	json_t *lost = json_object_get(body, "lost"), *v;
	json_t *r = json_object_get(body, "round");
	json_t *b = json_object_get(body, "blocked_round");
	struct ds_beat beat = {
	    .has_round = json_is_integer(r),
	    .round = json_integer_value(r),
	    .blocked = json_is_integer(b) ? json_integer_value(b) : -1,
	};
	struct ds_delivery *dv = NULL;
	uint64_t *lv = NULL;
	enum status st;
	size_t i;

	if (deliveries(json_object_get(body, "delivered"), &dv,
	        &beat.ndelivered, &beat.cut) < 0 ||
	    (lv = calloc(json_array_size(lost) + 1, sizeof(*lv))) == NULL) {
		free(dv);
		return nomem(msg, msglen);
	}
	beat.delivered = dv;
	json_array_foreach(lost, i, v)
		if (json_is_integer(v))
			lv[beat.nlost++] = (uint64_t)json_integer_value(v);
	beat.lost = lv;
	st = ds_client_beat(ds, c, &beat, now, msg, msglen);
	if (st == ST_INVALID_ARGUMENT && beat.cut)
		st = delivered_bad(beat.ndelivered, msg, msglen);
	else if (st == ST_OK)
		st = beat_reply(c->job, reply);
	/* What its reader wrote so far, for the job's count of elements. */
	if (st == ST_OK &&
	    json_is_integer(v = json_object_get(body, "written")) &&
	    json_integer_value(v) >= 0 &&
	    (uint64_t)json_integer_value(v) > c->written) {
		c->job->elements +=
		    (uint64_t)json_integer_value(v) - c->written;
		c->written = (uint64_t)json_integer_value(v);
	}
	free(dv);
	free(lv);
	return st;
}

/* A worker's tasks and leases. */

json_t *
dsjson_worker_tasks(struct ds *ds, const char *name)
{
	const struct ds_worker *w = ds_worker_find(ds, name);
	json_t *a = json_array();

	if (w == NULL || !w->live)
		return a;
	for (const struct ds_job *j = ds_jobs(ds); j != NULL; j = j->link)
		for (struct ds_task *t = j->tasks; t != NULL; t = t->next) {
			char id[24];
			if (t->state == DS_TASK_FAILED || t->w != w ||
			    t->inc != w->inc)
				continue;
			snprintf(id, sizeof(id), "%" PRIu64, j->ds->id);
			json_array_append_new(a,
			    json_pack("{s:I,s:I,s:s,s:s,s:s,s:s,s:b,s:I,s:I,"
			              "s:I,s:I,s:I,s:I,s:s}",
			        "id", (json_int_t)t->id, "job",
			        (json_int_t)j->id, "dataset", id, "mode",
			        shard_mode_name(j->eff), "reader",
			        j->ds->reader, "framing",
			        framing_name(j->ds->framing), "reader_skips",
			        j->ds->reader_skips, "repeat",
			        (json_int_t)j->repeat, "seed",
			        (json_int_t)j->seed, "splits",
			        (json_int_t)j->ds->nsplits, "shard_index",
			        (json_int_t)t->shard, "shard_count",
			        (json_int_t)(j->shards > 0 ? j->shards : 1),
			        "consumers", (json_int_t)j->consumers, "secret",
			        j->secret));
		}
	return a;
}

/* s as a JSON string, quoted, onto b. */
static void
json_quote(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const char *run = s;

	buf_append(b, "\"", 1);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		buf_append(b, run, (size_t)(s - run));
		if (c == '"' || c == '\\') {
			e[1] = (char)c;
			buf_append(b, e, 2);
		} else {
			buf_append(b, e, 6);
		}
		run = s + 1;
	}
	buf_append(b, run, (size_t)(s - run));
	buf_append(b, "\"", 1);
}

/* One leased seq's object onto out. */
static void
lease_json(struct ds_job *j, const struct ds_lease *l, int first,
    struct buf *out)
{
	uint32_t index = ds_split_index(j, l->seq);

	buf_printf(out,
	    "%s{\"seq\":%" PRIu64 ",\"index\":%" PRIu32 ",\"epoch\":%" PRIu64
	    ",\"split\":",
	    first ? "" : ",", l->seq, index, l->seq / j->ds->nsplits);
	json_quote(out, j->ds->splits[index]);
	buf_puts(out, ",\"skip\":[");
	for (size_t i = 0; i < l->nr; i++)
		buf_printf(out, "%s[%" PRIu64 ",%" PRIu64 "]", i > 0 ? "," : "",
		    l->r[i].a, l->r[i].b);
	buf_puts(out, "]}");
}

enum status
dsjson_lease(struct ds *ds, struct ds_task *t, long want, uint64_t id,
    int *later, struct buf *out, char *msg, size_t msglen)
{
	struct ds_leased l;
	enum status st = ds_lease(ds, t, want, id, &l, msg, msglen);

	*later = l.later;
	if (st != ST_OK || l.later)
		return st;
	buf_puts(out, "{\"splits\":[");
	for (size_t i = 0; i < l.n; i++)
		lease_json(t->job, l.v[i], i == 0, out);
	buf_printf(out, "],\"end\":%s}", l.end ? "true" : "false");
	return ST_OK;
}
