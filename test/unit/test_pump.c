#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "duration.h"
#include "proc.h"
#include "pump.h"
#include "respawn.h"
#include "unit.h"

/* A child of "sh -c script" with its stdout and stderr on the pump's
 * pipes and its stdin on *in (a pipe's write end), or /dev/null. */
static pid_t
spawn(const char *script, struct pump *p, struct buf *tail, int *in)
{
	char *argv[] = {"/bin/sh", "-c", (char *)script, NULL}, err[256];
	int ip[2] = {-1, -1}, op[2], ep[2], e;
	struct proc_spec spec = {argv, NULL, NULL, 0, -1, -1, -1, NULL};
	pid_t pid;

	if (in != NULL ? pipe2(ip, O_CLOEXEC) < 0 :
	                 (ip[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	if (pipe2(op, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0)
		return -1;
	spec.stdin_fd = ip[0];
	spec.stdout_fd = op[1];
	spec.stderr_fd = ep[1];
	pid = proc_spawn(&spec, &e, err, sizeof(err));
	close(ip[0]);
	close(op[1]);
	close(ep[1]);
	pump_init(p, op[0], ep[0], tail);
	p->pid = pid;
	if (in != NULL)
		*in = ip[1];
	return pid;
}

/* Pumps until the child is done; its stdout in out. */
static void
pump_all(struct pump *p, struct buf *out)
{
	char b[1024];
	size_t n;

	while (!pump_done(p)) {
		CHECK(pump_wait(p, 0) == 0);
		if ((n = pump_read(p, b, sizeof(b))) > 0)
			buf_append(out, b, n);
	}
	pump_close(p);
}

static void
pump_output_and_status(void)
{
	struct buf out = {0}, tail = {0};
	struct pump p;

	CHECK(spawn("printf out; printf err >&2; printf more; exit 3", &p,
	          &tail, NULL) > 0);
	pump_all(&p, &out);
	CHECK(out.len == 7 && memcmp(out.data, "outmore", 7) == 0);
	CHECK(tail.len == 3 && memcmp(tail.data, "err", 3) == 0);
	CHECK(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 3);
	CHECK(!pump_open(&p, PUMP_OUT) && !pump_open(&p, PUMP_ERR));
	buf_free(&out);
	buf_free(&tail);
}

/* More than a pipe holds, both ways: the feed must not block the pump. */
static void
pump_feeds_stdin(void)
{
	size_t len = 300000;
	char *data = malloc(len);
	struct buf out = {0};
	struct pump p;
	int in;

	for (size_t i = 0; data != NULL && i < len; i++)
		data[i] = (char)('a' + i % 26);
	CHECK(data != NULL && spawn("cat", &p, NULL, &in) > 0);
	pump_feed(&p, in, data, len);
	pump_all(&p, &out);
	CHECK(out.len == len && memcmp(out.data, data, len) == 0);
	CHECK(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0);
	buf_free(&out);
	free(data);
}

static int lines;
static size_t line_bytes;

static void
count_line(void *arg, const char *s, size_t n)
{
	(void)arg;
	(void)s;
	lines++;
	line_bytes += n;
}

/* Only the last of stderr is kept, though every line is handed on. */
static void
pump_keeps_the_tail(void)
{
	struct buf out = {0}, tail = {0};
	struct pump p;

	lines = 0;
	line_bytes = 0;
	/* 2000 lines of 9 bytes and their newlines, then "end". */
	CHECK(spawn("i=1000; while [ $i -lt 3000 ]; do echo line:$i >&2; "
	            "i=$((i+1)); done; printf end >&2",
	          &p, &tail, NULL) > 0);
	p.line = count_line;
	pump_all(&p, &out);
	CHECK(lines == 2000 && line_bytes == 2000 * 9);
	CHECK(tail.len >= PUMP_TAIL && tail.len <= 2 * PUMP_TAIL);
	CHECK(tail.len >= 13 &&
	    memcmp(tail.data + tail.len - 13, "line:2999\nend", 13) == 0);
	buf_reset(&tail);
	for (int i = 0; i < 2 * PUMP_TAIL; i++)
		pump_tail_add(&tail, i == 2 * PUMP_TAIL - 1 ? "z" : "y", 1);
	CHECK(tail.len == 2 * PUMP_TAIL && tail.data[tail.len - 1] == 'z');
	pump_tail_add(&tail, "zz", 2);
	CHECK(tail.len == PUMP_TAIL &&
	    memcmp(tail.data + PUMP_TAIL - 3, "zzz", 3) == 0);
	buf_free(&out);
	buf_free(&tail);
}

/* The caller's descriptors and deadline, and a stop's KILL, wake it. */
static void
pump_wakes_for_the_caller(void)
{
	struct proc_stop stop = {0};
	struct buf out = {0};
	struct pump p;
	int fds[2], w;
	int64_t t0;

	CHECK(pipe2(fds, O_CLOEXEC) == 0);
	/* A child that ignores TERM, and keeps its pipes open. */
	CHECK(spawn("trap '' TERM; while :; do sleep 0.05; done", &p, NULL,
	          NULL) > 0);
	p.stop = &stop;
	w = pump_watch(&p, fds[0], POLLIN);
	CHECK(w >= 0);
	t0 = duration_now_ms();
	CHECK(pump_wait(&p, t0 + 50) == 0);
	CHECK(duration_now_ms() - t0 >= 50 && pump_ready(&p, w) == 0);
	CHECK(write(fds[1], "x", 1) == 1);
	CHECK(pump_wait(&p, 0) == 0 && (pump_ready(&p, w) & POLLIN));
	CHECK(pump_ready(&p, -1) == 0);
	t0 = duration_now_ms();
	proc_stop_begin(&stop, p.pid, SIGTERM, 100, t0);
	while (!pump_done(&p)) {
		char b[64];
		CHECK(pump_wait(&p, t0 + 10000) == 0);
		proc_stop_tick(&stop, duration_now_ms());
		(void)pump_read(&p, b, sizeof(b));
		CHECK(duration_now_ms() - t0 < 5000);
		if (duration_now_ms() - t0 >= 5000)
			break;
	}
	CHECK(duration_now_ms() - t0 >= 100);
	CHECK(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGKILL);
	pump_close(&p);
	for (int i = 0; i < PUMP_WATCH_MAX - 1; i++)
		CHECK(pump_watch(&p, fds[0], POLLIN) >= 0);
	CHECK(pump_watch(&p, fds[0], POLLIN) == -1);
	close(fds[0]);
	close(fds[1]);
	buf_free(&out);
}

/*
 * A killed child is done once it has ended, though a process it started
 * in a session of its own (out of the KILL's reach) holds its pipes: what
 * they held then is read, and nothing after it is waited for.
 */
static void
pump_lets_go_of_a_killed_child(void)
{
	struct proc_stop stop = {0};
	struct buf out = {0}, tail = {0};
	struct pump p;
	int64_t t0;
	long held = 0;

	/* The child puts 4096 bytes in its stdout pipe before it starts the
	 * escaped process, which says its pid on stderr; then it fills the
	 * pipe, which nothing reads yet. However late the child runs, the
	 * pipe holds those bytes by the time the pid is read. */
	CHECK(spawn("head -c 4096 /dev/zero; "
	            "setsid sh -c 'echo $$ >&2; exec sleep 30' & "
	            "exec head -c 300000 /dev/zero",
	          &p, &tail, NULL) > 0);
	p.stop = &stop;
	t0 = duration_now_ms();
	while (memchr(tail.data != NULL ? tail.data : "", '\n', tail.len) ==
	        NULL &&
	    duration_now_ms() - t0 < 5000)
		CHECK(pump_wait(&p, duration_now_ms() + 50) == 0);
	CHECK(tail.len > 0);
	held = tail.len > 0 ? strtol(tail.data, NULL, 10) : 0;
	t0 = duration_now_ms();
	proc_stop_begin(&stop, p.pid, SIGTERM, 100, t0);
	while (!pump_done(&p)) {
		char b[4096];
		size_t n;
		CHECK(pump_wait(&p, t0 + 10000) == 0);
		proc_stop_tick(&stop, duration_now_ms());
		if ((n = pump_read(&p, b, sizeof(b))) > 0)
			buf_append(&out, b, n);
		CHECK(duration_now_ms() - t0 < 5000);
		if (duration_now_ms() - t0 >= 5000)
			break;
	}
	pump_close(&p);
	CHECK(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGTERM);
	/* What its stdout pipe held when it ended. */
	CHECK(out.len >= 4096 && out.len < 300000);
	if (held > 1)
		kill((pid_t)held, SIGKILL);
	buf_free(&out);
	buf_free(&tail);
}

/* The pause before a child is started again. */
/* The pages this process has mapped (/proc/self/statm's first field). */
static long
mapped_pages(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long n = -1;

	if (f == NULL)
		return -1;
	if (fscanf(f, "%ld", &n) != 1)
		n = -1;
	fclose(f);
	return n;
}

/* A thread that spawns `exit 7` twice on the stack it keeps, and reaps. */
static void *
spawn_twice(void *arg)
{
	int *ok = arg;

	for (int i = 0; i < 2; i++) {
		char *argv[] = {"/bin/sh", "-c", "exit 7", NULL}, err[256];
		struct proc_spec spec = {argv, NULL, NULL, 0, -1, -1, -1, NULL};
		int e, st = 0;
		pid_t pid = proc_spawn(&spec, &e, err, sizeof(err));

		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 7)
			return NULL;
	}
	*ok = 1;
	return NULL;
}

static void
spawn_stacks_go_with_their_threads(void)
{
	int ok[8] = {0};
	long before, after, page = sysconf(_SC_PAGESIZE);
	pthread_t t[8];

	/* One round first: the allocator's arenas for threads are made. */
	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, spawn_twice, &ok[i]) == 0);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	before = mapped_pages();
	/* 8 threads at once, each spawning on its own stack, 5 times over;
	 * what they kept is unmapped as they end. */
	for (int round = 0; round < 5; round++) {
		memset(ok, 0, sizeof(ok));
		for (int i = 0; i < 8; i++)
			CHECK(pthread_create(&t[i], NULL, spawn_twice,
			          &ok[i]) == 0);
		for (int i = 0; i < 8; i++) {
			pthread_join(t[i], NULL);
			CHECK(ok[i] == 1);
		}
	}
	after = mapped_pages();
	CHECK(before > 0);
	/* 40 stacks kept would be 2.5 MiB more; allow two. */
	CHECK((after - before) * page < 2 * 64 * 1024 + 1);
}

static void
respawn_pauses(void)
{
	struct respawn_config c = {"w", NULL, 0, 100, 10000, 10000};

	CHECK(respawn_backoff(&c, 0, 50) == 100);        /* the first death */
	CHECK(respawn_backoff(&c, 100, 50) == 200);      /* soon again */
	CHECK(respawn_backoff(&c, 6400, 9999) == 10000); /* at most max */
	CHECK(respawn_backoff(&c, 10000, 1) == 10000);
	CHECK(respawn_backoff(&c, 10000, 10000) == 100); /* lived long */
	c.backoff_min_ms = 0;
	CHECK(respawn_backoff(&c, 0, 1) == 0);
	CHECK(respawn_backoff(&c, 1, 1) == 2);
}

UNIT_TESTS(pump_tests) = {
    {"pump: a child's stdout, the tail of its stderr, its end",
        pump_output_and_status},
    {"pump: stdin fed while stdout is read", pump_feeds_stdin},
    {"pump: stderr's lines handed on, its last bytes kept",
        pump_keeps_the_tail},
    {"pump: woken by the caller's fds, deadline and a stop's KILL",
        pump_wakes_for_the_caller},
    {"pump: a killed child's pipes held by a process it let escape",
        pump_lets_go_of_a_killed_child},
    {"proc: a spawning thread's child stack is its own, and goes with it",
        spawn_stacks_go_with_their_threads},
    {"respawn: the pause doubles for a child that keeps dying, and starts "
     "over after a long life",
        respawn_pauses},
    {NULL, NULL},
};
