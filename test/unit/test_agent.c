#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "notice.h"
#include "sync_server.h"
#include "syncpoint.h"
#include "task.h"
#include "unit.h"
#include "wallclock.h"

static void
task_names(void)
{
	struct task_name t;
	char buf[96];

	CHECK(task_parse("worker:3", &t) == 0 && strcmp(t.job, "worker") == 0 &&
	    t.index == 3);
	CHECK(task_parse("/job:chief/task:0", &t) == 0 &&
	    strcmp(t.job, "chief") == 0 && t.index == 0);
	CHECK(task_parse("/job:ps/replica:0/task:12", &t) == 0 &&
	    strcmp(t.job, "ps") == 0 && t.index == 12);
	CHECK(strcmp(task_format(&t, buf, sizeof(buf)), "ps:12") == 0);
	CHECK(task_parse("worker", &t) < 0);
	CHECK(task_parse("worker:", &t) < 0);
	CHECK(task_parse(":1", &t) < 0);
	CHECK(task_parse("worker:-1", &t) < 0);
	CHECK(task_parse("worker:1x", &t) < 0);
	CHECK(task_parse("wor ker:1", &t) < 0);
	CHECK(task_parse("/job:w/task:", &t) < 0);
	CHECK(task_parse(NULL, &t) < 0);
	/* Split already, as a URL's segments are: the same checks. */
	CHECK(task_parse_parts("worker", 6, "007", &t) == 0 &&
	    strcmp(t.job, "worker") == 0 && t.index == 7);
	CHECK(task_parse_parts("a:b", 3, "1", &t) < 0);
	CHECK(task_parse_parts("w", 1, "1:2", &t) < 0);
	CHECK(task_parse_parts("w", 1, "-1", &t) < 0);
	CHECK(task_parse_parts("w", 0, "1", &t) < 0);
	CHECK(
	    task_parse_parts(
	        "wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww",
	        64, "1", &t) < 0);
}

/* task_format writes what snprintf "%s:%ld" would, cut the same way. */
static void
task_format_as_snprintf(void)
{
	static const long idx[] = {0, 7, 10, 99, 1000000000L, -1, -42};
	struct task_name t = {0};
	char got[80], want[80];
	int same = 1;

	for (size_t j = 0; j < 2; j++) {
		memset(t.job, 0, sizeof(t.job));
		memset(t.job, 'w', j == 0 ? 6 : sizeof(t.job) - 1);
		for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++) {
			t.index = idx[i];
			for (size_t size = 1; size <= sizeof(got); size++) {
				memset(got, 'x', sizeof(got));
				snprintf(want, size, "%s:%ld", t.job, t.index);
				task_format(&t, got, size);
				same &= strcmp(got, want) == 0;
			}
		}
	}
	CHECK(same);
}

static void
cluster_specs(void)
{
	struct cluster_spec c;
	char err[256];

	CHECK(task_parse_cluster("chief=1,worker=8", &c, err, 256) == 0);
	CHECK(c.njobs == 2 && c.ntasks == 9 && c.jobs[1].count == 8);
	CHECK(task_parse_cluster("worker=0", &c, err, 256) < 0);
	CHECK(task_parse_cluster("worker=2,worker=3", &c, err, 256) < 0);
	CHECK(task_parse_cluster("worker=2,", &c, err, 256) < 0);
	CHECK(task_parse_cluster("worker", &c, err, 256) < 0);
	CHECK(task_parse_cluster("", &c, err, 256) < 0);
	CHECK(task_parse_cluster("w=1x", &c, err, 256) < 0);
}

static void
incarnations(void)
{
	char buf[17];
	uint64_t a = task_new_incarnation(), b = task_new_incarnation(), v;

	CHECK(a != 0 && b != 0 && a != b);
	CHECK(
	    task_parse_incarnation(task_format_incarnation(a, buf), &v) == 0 &&
	    v == a);
	CHECK(strlen(buf) == 16);
	CHECK(task_parse_incarnation("a1", &v) == 0 && v == 0xa1);
	CHECK(task_parse_incarnation("", &v) < 0);
	CHECK(task_parse_incarnation("xyz", &v) < 0);
	CHECK(task_parse_incarnation("11112222333344445", &v) < 0);
}

UNIT_TESTS(task_tests) = {
    {"task: names in both spellings", task_names},
    {"task: a name formatted as snprintf would", task_format_as_snprintf},
    {"task: cluster specs", cluster_specs},
    {"task: incarnations", incarnations},
    {NULL, NULL},
};

static void
wall_times(void)
{
	int64_t ms;
	char buf[48];

	CHECK(wall_parse_rfc3339("2026-11-21T10:00:00Z", &ms) == 0 &&
	    ms == 1795255200000LL);
	CHECK(wall_parse_rfc3339("2026-11-21T11:00:00+01:00", &ms) == 0 &&
	    ms == 1795255200000LL);
	CHECK(wall_parse_rfc3339("2026-11-21T10:00:00.25Z", &ms) == 0 &&
	    ms == 1795255200250LL);
	CHECK(strcmp(wall_format(1795255200250LL, buf, sizeof(buf)),
	          "2026-11-21T10:00:00.250Z") == 0);
	CHECK(strcmp(wall_format(1795255200000LL, buf, sizeof(buf)),
	          "2026-11-21T10:00:00Z") == 0);
	/* Before 1970, and years of fewer than four digits (found by
	 * fuzz_dates): the form still reads back. */
	CHECK(strcmp(wall_format(-500, buf, sizeof(buf)),
	          "1969-12-31T23:59:59.500Z") == 0);
	CHECK(wall_parse_rfc3339("0016-02-29T23:59:60Z", &ms) == 0);
	CHECK(strcmp(wall_format(ms, buf, sizeof(buf)),
	          "0016-03-01T00:00:00Z") == 0);
	CHECK(wall_parse_rfc3339("2026-11-21 10:00:00", &ms) < 0);
	CHECK(wall_parse_rfc3339("2026-13-21T10:00:00Z", &ms) < 0);
	CHECK(wall_parse_rfc3339("tomorrow", &ms) < 0);
	CHECK(wall_parse_http_date("Sat, 21 Nov 2026 10:00:00 GMT", &ms) == 0 &&
	    ms == 1795255200000LL);
	CHECK(wall_parse_http_date("2026-11-21T10:00:00Z", &ms) < 0);
	CHECK(wall_now_ms() > 1700000000000LL);
}

static void
notice_specs(void)
{
	struct notice_source s;
	char err[256];

	CHECK(notice_parse("sigterm", NULL, &s, err, 256) == 0 &&
	    s.kind == NOTICE_SIGNAL && s.signo == 15);
	CHECK(notice_parse("signal:USR1", NULL, &s, err, 256) == 0 &&
	    s.signo == 10);
	CHECK(notice_parse("signal:SIGUSR2", NULL, &s, err, 256) == 0 &&
	    s.signo == 12);
	CHECK(notice_parse("signal:NOPE", NULL, &s, err, 256) < 0);
	CHECK(notice_parse("file:/tmp/x", NULL, &s, err, 256) == 0 &&
	    strcmp(s.path, "/tmp/x") == 0);
	CHECK(notice_parse("file:", NULL, &s, err, 256) < 0);
	CHECK(notice_parse("gce", NULL, &s, err, 256) == 0 &&
	    strcmp(s.addr, "metadata.google.internal") == 0);
	notice_free(&s);
	CHECK(notice_parse("aws", "http://127.0.0.1:8080/base/", &s, err,
	          256) == 0 &&
	    strcmp(s.addr, "127.0.0.1:8080") == 0 &&
	    strcmp(s.prefix, "/base") == 0);
	notice_free(&s);
	CHECK(notice_parse("azure", "ftp://x", &s, err, 256) < 0);
	CHECK(notice_parse("bogus", NULL, &s, err, 256) < 0);
}

static void
notice_file(void)
{
	struct notice_source s;
	char err[256], path[] = "/tmp/muster-unit-notice.XXXXXX", spec[64];
	int64_t death = 0;
	int fd = mkstemp(path);
	FILE *f;

	close(fd);
	unlink(path);
	snprintf(spec, sizeof(spec), "file:%s", path);
	CHECK(notice_parse(spec, NULL, &s, err, 256) == 0);
	CHECK(notice_check(&s, 30000, &death, err, 256) == 0);
	f = fopen(path, "w");
	fputs("2026-11-21T10:00:00Z\n", f);
	fclose(f);
	CHECK(notice_check(&s, 30000, &death, err, 256) == 1 &&
	    death == 1795255200000LL);
	/* The same file is one notice, not one per look. */
	CHECK(notice_check(&s, 30000, &death, err, 256) == 0);
	unlink(path);
}

UNIT_TESTS(notice_tests) = {
    {"wallclock: RFC 3339 and HTTP dates", wall_times},
    {"notice: source specs", notice_specs},
    {"notice: a file notice, once", notice_file},
    {NULL, NULL},
};

static struct sync_page *served;
static atomic_int frozen_read;

static void *
protocol(void *arg)
{
	struct timespec ts = {0, 50 * 1000000};
	int64_t *seen = arg;

	/* Freeze, as the protocol does, then decide after a while. */
	*seen = sync_page_freeze(served);
	atomic_store(&frozen_read, 1);
	nanosleep(&ts, NULL);
	atomic_store(&served->sync_step, *seen + 1);
	sync_page_set(served, SYNC_KNOWN);
	return NULL;
}

static void
syncpoint_page(void)
{
	char err[256];
	struct sync_server *s = sync_server_new(err, sizeof(err));
	struct syncpoint_status st;
	struct syncpoint *sp;
	int64_t seen = -1;
	pthread_t th;

	CHECK(s != NULL);
	if (s == NULL)
		return;
	CHECK(sync_server_start(s) == 0);
	served = sync_server_page(s);
	unsetenv(SYNCPOINT_ENV);
	CHECK(syncpoint_open(err, sizeof(err)) == NULL);
	CHECK(strstr(err, "not running under preemptwatch") != NULL);
	setenv(SYNCPOINT_ENV, sync_server_path(s), 1);
	sp = syncpoint_open(err, sizeof(err));
	CHECK(sp != NULL);
	if (sp == NULL)
		return;
	CHECK(syncpoint_reached(sp, 1) == 0);
	CHECK(syncpoint_reached(sp, 2) == 0);
	CHECK(atomic_load(&served->step) == 2);
	syncpoint_status(sp, &st);
	CHECK(st.state == SYNC_IDLE && st.step == 2 && st.sync_step == -1);
	CHECK(syncpoint_wait_notice(sp, 50, &st) == 0);
	atomic_store(&served->death_ms, 1795255200000LL);
	sync_page_set(served, SYNC_NOTICE);
	CHECK(syncpoint_wait_notice(sp, 50, &st) == 1 &&
	    st.death_ms == 1795255200000LL);
	/* A step taken while frozen waits for the answer. */
	pthread_create(&th, NULL, protocol, &seen);
	while (!atomic_load(&frozen_read))
		;
	CHECK(syncpoint_reached(sp, 3) == 1); /* seen 2, sync step 3 */
	pthread_join(th, NULL);
	CHECK(seen == 2);
	CHECK(atomic_load(&served->reached) == 1);
	/* Past the sync step: told so, and the first answer stays. */
	CHECK(syncpoint_reached(sp, 4) == SYNCPOINT_PAST);
	CHECK(atomic_load(&served->reached) == SYNCPOINT_YES);
	sync_page_reset(served);
	syncpoint_status(sp, &st);
	CHECK(st.state == SYNC_IDLE && st.step == -1);
	syncpoint_close(sp);
	sync_server_free(s);
	unsetenv(SYNCPOINT_ENV);
}

UNIT_TESTS(syncpoint_tests) = {
    {"syncpoint: the shared page and a frozen step", syncpoint_page},
    {NULL, NULL},
};
