/*
 * task.h: task names and cluster specs. A task is JOB:INDEX ("worker:3");
 * TensorFlow's "/job:worker/task:3" (with or without "/replica:0") is
 * accepted too. A cluster spec lists the jobs: "chief=1,worker=8".
 */
#ifndef MUSTER_TASK_H
#define MUSTER_TASK_H

#include <stddef.h>
#include <stdint.h>

#define TASK_JOB_MAX 64

struct task_name {
	char job[TASK_JOB_MAX];
	long index;
};

/* 0, or -1 when s is not a task name. */
int task_parse(const char *s, struct task_name *t);
/* The same for a name already split: job[0..jlen) and index, as the
 * segments of a URL come (.../tasks/JOB/INDEX). */
int task_parse_parts(const char *job, size_t jlen, const char *index,
    struct task_name *t);
/* "job:index" into buf. */
char *task_format(const struct task_name *t, char *buf, size_t size);

struct cluster_spec {
	size_t njobs;
	struct {
		char name[TASK_JOB_MAX];
		long count;
	} jobs[32];
	size_t ntasks;
};

/* Parses "JOB=N[,JOB=N...]"; -1 (with a message in err) when malformed. */
int task_parse_cluster(const char *s, struct cluster_spec *c, char *err,
    size_t errlen);

/* Incarnations travel as 16 hex digits. */
uint64_t task_new_incarnation(void);
int task_parse_incarnation(const char *s, uint64_t *inc);
char *task_format_incarnation(uint64_t inc, char buf[17]);

#endif
