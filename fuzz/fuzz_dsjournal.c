/*
 * The datasets' journal on bad data. The first byte picks: 0, the rest is
 * a snapshot for ds_restore; else the rest is records (each a byte of
 * length and its bytes) for ds_apply over a small state of one dataset,
 * two workers, a dynamic job with a client and leased seqs. Either way
 * nothing crashes; a refusal says why; what loads snapshots to bytes that
 * load again to the same bytes; and the state goes on working: leases,
 * deliveries, heartbeats, a worker's death and collection.
 */
#include <inttypes.h>

#include "buf.h"
#include "dataset.h"
#include "dsjson.h"
#include "fuzz.h"

/* Whether the last dsjson_lease found nothing to lease yet. */
static int later;

static char *static_workers[] = {"w:0", "w:1"};

static void
on_event(const struct ds_event *ev, void *arg)
{
	(void)ev;
	(void)arg;
}

static struct ds *
fresh(void)
{
	struct ds_config cfg = {.client_timeout_ms = 1000,
	    .gc_timeout_ms = 2000,
	    .static_workers = static_workers,
	    .nstatic = 2};
	struct ds *ds = ds_new(&cfg, on_event, NULL);

	FUZZ_CHECK(ds != NULL);
	return ds;
}

static void
base(struct ds *ds)
{
	json_t *def = json_pack("{s:[s,s,s,s],s:s}", "splits", "a", "b", "c",
	    "d", "reader", "cat");
	json_t *req =
	    json_pack("{s:i,s:s,s:i}", "dataset", 1, "name", "j", "seed", 5);
	struct ds_dataset *d;
	struct ds_job *j;
	struct ds_client *c;
	struct buf b = {0};
	char msg[256];
	int created;

	FUZZ_CHECK(dsjson_dataset_register(ds, def, &d, &created, msg,
	               sizeof(msg)) == ST_OK);
	ds_worker_up(ds, "w:0", 1, "127.0.0.1:1", "h");
	ds_worker_up(ds, "w:9", 1, "127.0.0.1:2", "h");
	FUZZ_CHECK(dsjson_job_open(ds, req, 0, &j, &c, &created, msg,
	               sizeof(msg)) == ST_OK);
	FUZZ_CHECK(dsjson_lease(ds, j->tasks, 2, 1, &later, &b, msg,
	               sizeof(msg)) == ST_OK);
	buf_free(&b);
	json_decref(def);
	json_decref(req);
}

/* Everything a daemon does, on whatever loaded. */
static void
exercise(struct ds *ds)
{
	struct ds_view v;
	char msg[256];

	for (uint64_t id = 1; id <= 8; id++) {
		char key[24];
		struct ds_job *j;
		snprintf(key, sizeof(key), "%" PRIu64, id);
		if ((j = ds_job_find(ds, key)) == NULL)
			continue;
		json_decref(dsjson_job(j));
		for (struct ds_task *t = j->tasks; t != NULL; t = t->next) {
			struct buf b = {0};
			json_t *l = json_pack("[[i,i,i,i],[i,i,i,i]]", 0, 0, 3,
			    3, 1, 0, 1, -1);
			dsjson_lease(ds, t, 3, 1, &later, &b, msg, sizeof(msg));
			dsjson_lease(ds, t, 3, 1, &later, &b, msg, sizeof(msg));
			dsjson_task_delivered(ds, t, l, msg, sizeof(msg));
			json_decref(l);
			buf_free(&b);
		}
		for (struct ds_client *c = j->clients; c != NULL; c = c->next) {
			json_t *body = json_pack("{s:[i,i],s:i,s:i}", "lost", 1,
			    2, "round", 3, "blocked_round", 4);
			json_t *reply = NULL;
			dsjson_client_beat(ds, c, body, 10, &reply, msg,
			    sizeof(msg));
			json_decref(reply);
			json_decref(body);
		}
	}
	json_decref(dsjson_datasets(ds));
	json_decref(dsjson_jobs(ds));
	json_decref(dsjson_worker_tasks(ds, "w:0"));
	ds_worker_forget(ds, "w:0");
	ds_worker_forget(ds, "w:9");
	ds_worker_up(ds, "w:1", 7, "127.0.0.1:3", "h");
	ds_scan(ds, 1500);
	ds_scan(ds, 5000);
	ds_view(ds, &v);
	/* Collected, or kept (named dynamic jobs not over): without tasks. */
	FUZZ_CHECK(v.clients == 0 && v.tasks == 0);
}

/* What loaded snapshots to bytes that load to the same bytes. */
static void
round_trip(struct ds *ds)
{
	struct buf a = {0}, b = {0};
	struct ds *again = fresh();
	char err[256];

	FUZZ_CHECK(ds_snapshot(ds, &a) == 0);
	FUZZ_CHECK(ds_restore(again, a.data, a.len, 0, err, sizeof(err)) == 0);
	FUZZ_CHECK(ds_snapshot(again, &b) == 0);
	FUZZ_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
	buf_free(&a);
	buf_free(&b);
	ds_free(again);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ds *ds = fresh();
	char err[256];

	if (size == 0) {
		ds_free(ds);
		return 0;
	}
	err[0] = '\0';
	if (data[0] == 0) {
		if (ds_restore(ds, data + 1, size - 1, 0, err, sizeof(err)) <
		    0) {
			FUZZ_CHECK(err[0] != '\0');
			ds_free(ds);
			return 0;
		}
	} else {
		base(ds);
		for (size_t i = 1; i < size;) {
			size_t n = data[i++];
			if (n > size - i)
				n = size - i;
			if (ds_apply(ds, data + i, n, 0, err, sizeof(err)) < 0)
				FUZZ_CHECK(err[0] != '\0');
			i += n;
		}
	}
	/* A state made of records may not be whole (a job's count of
	 * done seqs, say): only a snapshot's own check says. */
	if (data[0] == 0)
		round_trip(ds);
	exercise(ds);
	ds_free(ds);
	return 0;
}
