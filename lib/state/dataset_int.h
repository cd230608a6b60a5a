/*
 * dataset_int.h: what the files of the datasets' state machine share: the
 * state itself, the journal's record types, and the functions one file
 * calls in another (each with the ds_ prefix). For lib/state/dataset*.c
 * only.
 */
#ifndef MUSTER_DATASET_INT_H
#define MUSTER_DATASET_INT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "dataset.h"
#include "rec.h"

/* Open seqs of a job: open addressing, linear probing, no deletes left
 * behind (backward shift). */
struct lease_map {
	struct ds_lease **slot;
	size_t cap, count; /* cap a power of two */
};

struct ds {
	struct ds_config cfg;
	ds_observer_fn fn;
	void *arg;
	struct ds_dataset *datasets;
	struct ds_job *jobs;
	struct ds_worker *workers;
	uint64_t next_dataset, next_job, next_task, next_client;
	unsigned long leases, releases, collected;
	ds_journal_fn jfn;
	void *jarg;
	struct buf jbuf; /* the record being made */
	int replaying;   /* in ds_apply: no events */
};

/* The longest removal record: its type and two varints. */
#define GONE_MAX 32

/* The journal's records (see "Journal" below). */
enum {
	R_COUNTERS = 1,
	R_DATASET,
	R_DSNAME,
	R_WORKER,
	R_JOB,
	R_JOB_GONE,
	R_TASK,
	R_TASK_GONE,
	R_CLIENT,
	R_CLIENT_GONE,
	R_GRANT,
	R_OPEN,
	R_LEASE,
	R_DONE,
	R_END, /* a snapshot's last: how many records came before */
	R_JOB2 /* R_JOB and its iteration, retirement, start, secret, run,
	        * kept: the one written now (R_JOB is still read) */
};

/*
 * Journal. Each record is a varint type and its fields (rec.h), and says
 * the new state of one thing: a dataset, worker, job, task or client in
 * whole (applied by creating or overwriting it), a lease's delivered
 * ranges, or that a lease, task, client or job is gone. Two records are
 * moves rather than states, so that position is never copied whole: a
 * grant (the seqs a task was given, as runs: each one is the job's next
 * seq or waits in its queue) and a task's end (its leases go to the front
 * of the queue, as task_settle does). A snapshot is a version, the
 * records that make the state from nothing, each after its length, and
 * an end that counts them.
 */

#define DS_SNAP_VERSION 1
#define DS_NAME_MAX 4096
#define DS_TEXT_MAX SIZE_MAX /* bounded by the record itself */

/* dataset_lease.c */
struct ds_lease *ds_map_get(struct lease_map *m, uint64_t seq);
int ds_map_reserve(struct lease_map *m, size_t n);
int ds_map_put(struct lease_map *m, struct ds_lease *l);
void ds_map_del(struct lease_map *m, uint64_t seq);
void ds_list_push(struct ds_lease_list *l, struct ds_lease *x, int front);
void ds_list_unlink(struct ds_lease_list *l, struct ds_lease *x);
void ds_lease_free(struct ds_lease *l);

/* dataset_obj.c */
int ds_is_static(enum shard_mode m);
void ds_emit(struct ds *ds, enum ds_event_type type, const char *worker,
    uint64_t job);
uint64_t ds_fnv(uint64_t h, const void *p, size_t n);
uint64_t ds_fp_head(const char *reader, enum framing framing, int skips);
void ds_dataset_free(struct ds_dataset *d);
void ds_tasks_changed(struct ds *ds, struct ds_worker *w);
long ds_static_index(struct ds *ds, const char *name);
void ds_task_free(struct ds_task *t);
void ds_task_release_leases(struct ds *ds, struct ds_task *t);
void ds_client_unlink(struct ds_job *j, struct ds_client *c);
void ds_job_free(struct ds_job *j);
struct ds_task *ds_job_task(struct ds_job *j, uint64_t id);

/* dataset_journal.c: the encoders (a snapshot's records too), and the
 * changes made: each ds_put_* makes the record of a thing as it is to be
 * (a new one, or a copy of one, changed) and commits it. */
void ds_enc_dataset(struct rec_out *o, const struct ds_dataset *d);
void ds_enc_worker(struct rec_out *o, const struct ds_worker *w);
void ds_enc_job(struct rec_out *o, const struct ds_job *j);
void ds_enc_task(struct rec_out *o, const struct ds_task *t);
void ds_enc_client(struct rec_out *o, const struct ds_client *c);
void ds_enc_ranges(struct rec_out *o, const struct ds_lease *l);
void ds_enc_open(struct rec_out *o, const struct ds_job *j,
    const struct ds_lease *l);
void ds_rec_begin(struct rec_out *o, struct buf *b, int type);
int ds_commit(struct ds *ds, struct rec_out *o, int64_t now, char *msg,
    size_t msglen);
int ds_put_dataset(struct ds *ds, uint64_t id, const struct ds_dataset_def *def,
    const char *fp);
int ds_put_dsname(struct ds *ds, const struct ds_dataset *d, const char *name);
int ds_put_worker(struct ds *ds, const char *name, uint64_t inc,
    const char *address, const char *host, int live);
int ds_put_job(struct ds *ds, const struct ds_job *x, int64_t now);
int ds_put_open(struct ds *ds, const struct ds_job *j,
    const struct ds_lease *l);
int ds_put_task(struct ds *ds, const struct ds_task *x);
int ds_put_client(struct ds *ds, const struct ds_client *x, int64_t now);
void ds_gone(struct ds *ds, int type, uint64_t a, uint64_t b, int64_t now);
int ds_ended_badly(const struct rec_in *in);

/* dataset_grant.c */
void ds_task_make(struct ds *ds, struct ds_job *j, struct ds_worker *w,
    int pending);
void ds_job_finish(struct ds *ds, struct ds_job *j);
void ds_job_check_done(struct ds *ds, struct ds_job *j);
enum status ds_deliveries(struct ds *ds, struct ds_job *j,
    const struct ds_delivery *v, size_t n, char *msg, size_t msglen);

/* dataset_job.c */
int ds_job_keeps(const struct ds_job *j);
void ds_job_keep(struct ds *ds, struct ds_job *j);
void ds_job_collect(struct ds *ds, struct ds_job *j);

#endif
