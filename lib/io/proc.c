#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
#include "proc.h"

extern char **environ;

/*
 * The child side of proc_spawn, on its own stack while the parent waits
 * (CLONE_VFORK): it shares the parent's memory until exec, so it only
 * makes system calls, and leaves exec's errno in a->err when exec fails.
 */
struct spawn_arg {
	const struct proc_spec *spec;
	pid_t parent;
	sigset_t mask; /* the parent's signal mask */
	volatile int err;
};

static int
child(void *arg)
{
	struct spawn_arg *a = arg;
	const struct proc_spec *s = a->spec;
	sigset_t mask = a->mask; /* a is the parent's: change a copy */
	struct sigaction sa;

	/* Its own process group, so signals reach all it starts. */
	setpgid(0, 0);
	if (s->parent_death_signal != 0) {
		prctl(PR_SET_PDEATHSIG, s->parent_death_signal);
		if (getppid() != a->parent) /* it died before prctl */
			_exit(128 + s->parent_death_signal);
	}
	/* The parent's handlers are no use here (every signal is blocked
	 * until this point); what it ignores, the command gets as default
	 * for the usual ones. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction old;
		if (sig == SIGKILL || sig == SIGSTOP ||
		    sigaction(sig, NULL, &old) < 0)
			continue;
		if (old.sa_handler != SIG_DFL &&
		    (old.sa_handler != SIG_IGN || sig == SIGPIPE ||
		        sig == SIGINT || sig == SIGTERM || sig == SIGHUP))
			sigaction(sig, &sa, NULL);
	}
	/* What the supervisor blocked is the command's to have. */
	if (s->unblock != NULL)
		for (int sig = 1; sig < NSIG; sig++)
			if (sigismember(s->unblock, sig) == 1)
				sigdelset(&mask, sig);
	sigprocmask(SIG_SETMASK, &mask, NULL);
	if ((s->stdin_fd >= 0 && dup2(s->stdin_fd, 0) < 0) ||
	    (s->stdout_fd >= 0 && dup2(s->stdout_fd, 1) < 0) ||
	    (s->stderr_fd >= 0 && dup2(s->stderr_fd, 2) < 0) ||
	    (s->dir != NULL && chdir(s->dir) < 0))
		goto fail;
	execvpe(s->argv[0], s->argv, s->env != NULL ? s->env : environ);
fail:
	a->err = errno;
	_exit(proc_exec_status(errno));
}

/* Whether the name of entry (up to '=') holds word. */
static int
name_has(const char *entry, size_t namelen, const char *word)
{
	size_t wl = strlen(word);

	for (size_t i = 0; i + wl <= namelen; i++)
		if (memcmp(entry + i, word, wl) == 0)
			return 1;
	return 0;
}

int
proc_env_credential(const char *entry)
{
	size_t n = strcspn(entry, "=");

	if (n < 7 || memcmp(entry, "MUSTER_", 7) != 0)
		return 0;
	return name_has(entry, n, "TOKEN") || name_has(entry, n, "SECRET") ||
	    (n == 20 && memcmp(entry, "MUSTER_TLS_CERT_FILE", n) == 0) ||
	    (n == 19 && memcmp(entry, "MUSTER_TLS_KEY_FILE", n) == 0);
}

static char **
env_build(char *const *base, char *const *set, int scrub)
{
	size_t n = 0, m = 0, k = 0;
	char **env;

	while (base[n] != NULL)
		n++;
	while (set[m] != NULL)
		m++;
	if ((env = calloc(n + m + 1, sizeof(*env))) == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		int replaced = scrub && proc_env_credential(base[i]);
		for (size_t j = 0; j < m && !replaced; j++) {
			size_t len = strcspn(set[j], "=") + 1;
			replaced = strncmp(base[i], set[j], len) == 0;
		}
		if (!replaced)
			env[k++] = base[i];
	}
	for (size_t j = 0; j < m; j++)
		env[k++] = set[j];
	env[k] = NULL;
	return env;
}

char **
proc_env(char *const *base, char *const *set)
{
	return env_build(base, set, 0);
}

char **
proc_env_child(char *const *base, char *const *set)
{
	return env_build(base, set, 1);
}

int
proc_exec_status(int exec_errno)
{
	return exec_errno == ENOENT ? 127 : 126;
}

/*
 * The stack a spawned child runs on until exec: one per thread that
 * spawns, kept for its next child and unmapped when the thread ends. An
 * unmap per child would cost every other CPU this process ran on a TLB
 * flush.
 */
#define SPAWN_STACK (64 * 1024)
static pthread_key_t stack_key;
static pthread_once_t stack_once = PTHREAD_ONCE_INIT;

static void
stack_free(void *p)
{
	munmap(p, SPAWN_STACK);
}

static void
stack_key_make(void)
{
	if (pthread_key_create(&stack_key, stack_free) != 0)
		stack_key = (pthread_key_t)-1;
}

static char *
spawn_stack(void)
{
	char *st;

	pthread_once(&stack_once, stack_key_make);
	if (stack_key != (pthread_key_t)-1 &&
	    (st = pthread_getspecific(stack_key)) != NULL)
		return st;
	st = mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (st == MAP_FAILED)
		return NULL;
	if (stack_key == (pthread_key_t)-1 ||
	    pthread_setspecific(stack_key, st) != 0) {
		munmap(st, SPAWN_STACK);
		return NULL;
	}
	return st;
}

pid_t
proc_spawn(const struct proc_spec *spec, int *exec_errno, char *err,
    size_t errlen)
{
	/* Like posix_spawn: the child runs on a stack of its own in our
	 * memory, and we wait until it has exec'd or failed to (no copy of
	 * our page tables, as fork would make). */
	char *stack = spawn_stack();
	struct spawn_arg a = {spec, getpid(), {{0}}, 0};
	sigset_t all;
	pid_t pid;
	int e;

	*exec_errno = 0;
	if (stack == NULL) {
		snprintf(err, errlen, "a stack for the child: %s",
		    strerror(errno != 0 ? errno : ENOMEM));
		return -1;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &a.mask);
	pid = clone(child, stack + SPAWN_STACK,
	    CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
	e = errno;
	pthread_sigmask(SIG_SETMASK, &a.mask, NULL);
	if (pid < 0) {
		snprintf(err, errlen, "clone: %s", strerror(e));
		return -1;
	}
	/* Both sides set the group: whichever runs first, it is there. */
	setpgid(pid, pid);
	if (a.err != 0) {
		/* exec failed: nothing ran, nothing to stop. */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		*exec_errno = a.err;
		snprintf(err, errlen, "cannot run %s: %s", spec->argv[0],
		    strerror(a.err));
		return -1;
	}
	return pid;
}

int
proc_reap(pid_t pid, int *status)
{
	int found = 0, st;
	pid_t p;

	while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
		if (p == pid && pid > 0) {
			*status = st;
			found = 1;
		}
	}
	return found;
}

char *
proc_status_text(int status, char *buf, size_t size)
{
	if (WIFEXITED(status)) {
		snprintf(buf, size, "exited with status %d",
		    WEXITSTATUS(status));
	} else {
		const char *name = sigabbrev_np(WTERMSIG(status));
		snprintf(buf, size, "killed by SIG%s",
		    name != NULL ? name : "?");
	}
	return buf;
}

int
proc_status_code(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void
proc_stop_begin(struct proc_stop *s, pid_t group, int sig, int64_t grace_ms,
    int64_t now)
{
	s->group = group;
	s->killed = 0;
	kill(-group, sig);
	s->kill_at = now + (grace_ms > 0 ? grace_ms : 0);
	if (s->kill_at == 0)
		s->kill_at = 1;
}

int
proc_stop_tick(struct proc_stop *s, int64_t now)
{
	if (s->kill_at == 0 || now < s->kill_at)
		return 0;
	s->kill_at = 0;
	s->killed = 1;
	kill(-s->group, SIGKILL);
	return 1;
}

int64_t
proc_stop_next(const struct proc_stop *s)
{
	return s->kill_at;
}

void
proc_stop_clear(struct proc_stop *s)
{
	s->kill_at = 0;
	s->killed = 0;
}

/* Sends one note, giving up after a second at each step. */
static void
send_note(const struct proc_note *note, const char *msg, size_t len)
{
	struct pollfd p = {.events = POLLOUT};
	char sink[512];
	int fd;

	if (note == NULL || note->addrlen == 0 || len == 0)
		return;
	fd = socket(note->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return;
	p.fd = fd;
	if ((connect(fd, (const struct sockaddr *)&note->addr, note->addrlen) ==
	            0 ||
	        errno == EINPROGRESS) &&
	    poll(&p, 1, 1000) == 1 && write(fd, msg, len) == (ssize_t)len) {
		/* The reply, so the request is read before we close. */
		p.events = POLLIN;
		if (poll(&p, 1, 1000) == 1)
			(void)!read(fd, sink, sizeof(sink));
	}
	close(fd);
}

/* The guard itself: never returns. */
static void
guard(int in, pid_t group, int sig, int64_t grace_ms, int64_t stall_ms,
    const struct proc_note *note)
{
	struct pollfd p = {.fd = in, .events = POLLIN};
	struct timespec tick = {0, 100 * 1000000};
	int64_t until;
	char c;

	setsid();
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	for (;;) {
		int n = poll(&p, 1, stall_ms > 0 ? (int)stall_ms : -1);
		ssize_t r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0) {
			/* The supervisor is frozen. */
			send_note(note, note != NULL ? note->frozen : NULL,
			    note != NULL ? note->frozen_len : 0);
			break;
		}
		while ((r = read(in, &c, 1)) < 0 && errno == EINTR)
			;
		if (r <= 0) {
			/* It died: the pipe's other end closed. */
			send_note(note, note != NULL ? note->died : NULL,
			    note != NULL ? note->died_len : 0);
			break;
		}
		if (c != 't')
			break; /* dismissed */
	}
	if (kill(-group, sig) == 0) {
		/* Until the group is gone, or the grace is over. */
		until = duration_now_ms() + grace_ms;
		while (duration_now_ms() < until && kill(-group, 0) == 0)
			nanosleep(&tick, NULL);
		kill(-group, SIGKILL);
	}
	_exit(0);
}

int
proc_guard_start(struct proc_guard *g, pid_t group, int sig, int64_t grace_ms,
    int64_t stall_ms, const struct proc_note *note)
{
	int fds[2];
	pid_t mid;

	atomic_store(&g->fd, -1);
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	if ((mid = fork()) == 0) {
		if (fork() != 0)
			_exit(0); /* the guard goes on, under init */
		dup2(fds[0], 0);
		close_range(1, ~0U, 0);
		guard(0, group, sig, grace_ms, stall_ms, note);
	}
	close(fds[0]);
	if (mid < 0) {
		close(fds[1]);
		return -1;
	}
	while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
		;
	/* A tick the guard has not read yet is as good as a lost one. */
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	atomic_store(&g->fd, fds[1]);
	return 0;
}

void
proc_guard_tick(struct proc_guard *g)
{
	int fd = atomic_load(&g->fd);

	if (fd >= 0)
		(void)!write(fd, "t", 1);
}

void
proc_guard_dismiss(struct proc_guard *g)
{
	int fd = atomic_load(&g->fd);

	/* The guard reads no more after this; later ticks go nowhere. */
	if (fd >= 0)
		(void)!write(fd, "x", 1);
}

void
proc_guard_close(struct proc_guard *g)
{
	int fd = atomic_exchange(&g->fd, -1);

	if (fd >= 0)
		close(fd);
}
