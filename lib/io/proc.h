/*
 * proc.h: the child processes a supervisor runs (a training command, a
 * closure): spawned in a process group of their own so that a signal
 * reaches all they start, watched by a guard that outlives the supervisor,
 * stopped with TERM, a grace period, then KILL, and reaped.
 */
#ifndef MUSTER_PROC_H
#define MUSTER_PROC_H

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

struct proc_spec {
	char *const *argv;                  /* argv[0] is looked up in PATH */
	char *const *env;                   /* NULL: the supervisor's own */
	const sigset_t *unblock;            /* signals the supervisor blocked */
	int parent_death_signal;            /* sent if the supervisor dies; 0 */
	int stdin_fd, stdout_fd, stderr_fd; /* -1: inherited */
	const char *dir;                    /* working directory; NULL: ours */
};

/*
 * Starts spec in a new process group (its pid). A command that cannot be
 * run at all (not found, not executable) is told apart from one that ran
 * and failed: a close-on-exec pipe carries exec's errno back, and then -1
 * is returned with *exec_errno set and the reason in err. -1 with
 * *exec_errno 0 is a failed fork.
 */
pid_t proc_spawn(const struct proc_spec *spec, int *exec_errno, char *err,
    size_t errlen);

/*
 * An environment: base with each "NAME=value" of set in place of NAME's
 * own entry, or added. The array (freed by the caller) points into both.
 */
char **proc_env(char *const *base, char *const *set);

/*
 * Whether "NAME=value" is one of muster's own credentials, which a
 * command run for someone else (a closure, a dataset's reader, a resource's
 * build) must not inherit from the program that starts it: the token file
 * (MUSTER_TOKEN_FILE), any other MUSTER_ variable that names a token or a
 * secret (MUSTER_TASK_SECRET), and the TLS client's certificate and key
 * (MUSTER_TLS_CERT_FILE, MUSTER_TLS_KEY_FILE). MUSTER_TLS_CA_FILE, which
 * only says whom to trust, is not one.
 */
int proc_env_credential(const char *entry);

/*
 * proc_env for such a command: base without muster's credentials, with
 * set in place (set may give one back on purpose).
 */
char **proc_env_child(char *const *base, char *const *set);

/* The exit status a shell gives a command it could not run. */
int proc_exec_status(int exec_errno);

/*
 * Reaps every child that has ended (as process 1 of a container, orphans
 * are ours to reap too); 1 and its wait status in *status when pid is
 * among them.
 */
int proc_reap(pid_t pid, int *status);

/* "exited with status 3", "killed by SIGKILL"; and 3 or 128+9. */
char *proc_status_text(int status, char *buf, size_t size);
int proc_status_code(int status);

/*
 * sig (TERM, usually) now, KILL after the grace period: call
 * proc_stop_tick whenever proc_stop_next's time comes.
 */
struct proc_stop {
	pid_t group;
	int64_t kill_at; /* monotonic ms; 0: not stopping */
	int killed;      /* its KILL has gone to the group */
};

void proc_stop_begin(struct proc_stop *s, pid_t group, int sig,
    int64_t grace_ms, int64_t now);
/* Sends KILL when the grace is over; 1 when it did. */
int proc_stop_tick(struct proc_stop *s, int64_t now);
/* When proc_stop_tick wants to run next; 0 when it does not. */
int64_t proc_stop_next(const struct proc_stop *s);
void proc_stop_clear(struct proc_stop *s);

/*
 * A guard stops a process group once its supervisor can no longer: when
 * the group's leader has ended (the rest may live on), when the supervisor
 * dies (kill -9: its end of a pipe closes), or, with stall_ms set, when the
 * supervisor is frozen (SIGSTOP, a hang) and has not ticked for stall_ms.
 * It sends sig (TERM, usually), waits up to the grace period, then KILL.
 */
struct proc_guard {
	_Atomic int fd; /* our end of the pipe; -1: none */
};

/*
 * What a guard says before it stops the group because the supervisor is
 * gone: bytes to send to an address (an HTTP request telling the cluster
 * whose agent was lost), one message for a supervisor that died, one for
 * one that froze. Sent with a short timeout, and only system calls: the
 * guard is a fork of a threaded process.
 */
struct proc_note {
	struct sockaddr_storage addr;
	socklen_t addrlen; /* 0: nothing to send */
	char died[1536];
	size_t died_len;
	char frozen[1536];
	size_t frozen_len;
};

int proc_guard_start(struct proc_guard *g, pid_t group, int sig,
    int64_t grace_ms, int64_t stall_ms, const struct proc_note *note);
/* The supervisor is alive: call more often than stall_ms (any thread). */
void proc_guard_tick(struct proc_guard *g);
/* The leader has ended: stop what is left of the group, then exit. */
void proc_guard_dismiss(struct proc_guard *g);
/* Lets go of the guard, once no thread ticks it any more. */
void proc_guard_close(struct proc_guard *g);

#endif
