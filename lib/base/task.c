#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "task.h"

static int
job_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static int
set_job(struct task_name *t, const char *s, size_t n)
{
	if (n == 0 || n >= sizeof(t->job))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!job_char(s[i]))
			return -1;
	memcpy(t->job, s, n);
	t->job[n] = '\0';
	return 0;
}

static int
parse_index(const char *s, long *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	*v = strtol(s, &end, 10);
	return *end != '\0' || errno != 0 || *v > 1000000000L ? -1 : 0;
}

int
task_parse(const char *s, struct task_name *t)
{
	const char *colon, *task;

	if (s == NULL)
		return -1;
	if (strncmp(s, "/job:", 5) == 0) {
		const char *job = s + 5, *slash = strchr(job, '/');
		if (slash == NULL || set_job(t, job, (size_t)(slash - job)) < 0)
			return -1;
		task = slash;
		if (strncmp(task, "/replica:", 9) == 0) {
			const char *r = task + 9;
			while (*r >= '0' && *r <= '9')
				r++;
			if (r == task + 9)
				return -1;
			task = r;
		}
		if (strncmp(task, "/task:", 6) != 0)
			return -1;
		return parse_index(task + 6, &t->index);
	}
	colon = strchr(s, ':');
	return colon == NULL ?
	    -1 :
	    task_parse_parts(s, (size_t)(colon - s), colon + 1, t);
}

int
task_parse_parts(const char *job, size_t jlen, const char *index,
    struct task_name *t)
{
	if (set_job(t, job, jlen) < 0)
		return -1;
	return parse_index(index, &t->index);
}

/* Appends n bytes of p to buf[*len..size-1), cut as snprintf cuts. */
static void
put(char *buf, size_t size, size_t *len, const char *p, size_t n)
{
	if (n > size - 1 - *len)
		n = size - 1 - *len;
	memcpy(buf + *len, p, n);
	*len += n;
}

/*
 * "job:index", cut to size as snprintf would cut it. Every heartbeat
 * names its task: snprintf showed in the heartbeat's profile.
 */
char *
task_format(const struct task_name *t, char *buf, size_t size)
{
	char digits[24], *d = digits + sizeof(digits);
	unsigned long v = t->index < 0 ? 0 - (unsigned long)t->index :
	                                 (unsigned long)t->index;
	size_t len = 0;

	if (size == 0)
		return buf;
	do
		*--d = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	if (t->index < 0)
		*--d = '-';
	put(buf, size, &len, t->job, strnlen(t->job, sizeof(t->job)));
	put(buf, size, &len, ":", 1);
	put(buf, size, &len, d, (size_t)(digits + sizeof(digits) - d));
	buf[len] = '\0';
	return buf;
}

int
task_parse_cluster(const char *s, struct cluster_spec *c, char *err,
    size_t errlen)
{
	const char *p = s;

	memset(c, 0, sizeof(*c));
	while (*p != '\0') {
		const char *eq = strchr(p, '='), *comma;
		struct task_name t;
		char *end;
		long n;

		if (eq == NULL || set_job(&t, p, (size_t)(eq - p)) < 0) {
			snprintf(err, errlen,
			    "bad job in cluster spec %s "
			    "(want JOB=N[,JOB=N...])",
			    s);
			return -1;
		}
		errno = 0;
		n = strtol(eq + 1, &end, 10);
		if (end == eq + 1 || (*end != ',' && *end != '\0') ||
		    errno != 0 || n < 1 || n > 1000000) {
			snprintf(err, errlen,
			    "bad task count for job %s in cluster spec %s",
			    t.job, s);
			return -1;
		}
		for (size_t i = 0; i < c->njobs; i++) {
			if (strcmp(c->jobs[i].name, t.job) == 0) {
				snprintf(err, errlen,
				    "job %s given twice in cluster spec",
				    t.job);
				return -1;
			}
		}
		if (c->njobs == sizeof(c->jobs) / sizeof(c->jobs[0])) {
			snprintf(err, errlen, "too many jobs in cluster spec");
			return -1;
		}
		memcpy(c->jobs[c->njobs].name, t.job, sizeof(t.job));
		c->jobs[c->njobs++].count = n;
		c->ntasks += (size_t)n;
		comma = end;
		p = *comma == ',' ? comma + 1 : comma;
		if (*comma == ',' && *p == '\0') {
			snprintf(err, errlen, "trailing comma in cluster spec");
			return -1;
		}
	}
	if (c->njobs == 0) {
		snprintf(err, errlen, "empty cluster spec");
		return -1;
	}
	return 0;
}

uint64_t
task_new_incarnation(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^
		    ((uint64_t)getpid() << 16);
	}
	return v != 0 ? v : 1;
}

int
task_parse_incarnation(const char *s, uint64_t *inc)
{
	char *end;

	if (s == NULL || *s == '\0' || strlen(s) > 16)
		return -1;
	for (const char *p = s; *p != '\0'; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
		        (*p >= 'A' && *p <= 'F')))
			return -1;
	errno = 0;
	*inc = strtoull(s, &end, 16);
	return errno != 0 || *end != '\0' ? -1 : 0;
}

char *
task_format_incarnation(uint64_t inc, char buf[17])
{
	snprintf(buf, 17, "%016" PRIx64, inc);
	return buf;
}
