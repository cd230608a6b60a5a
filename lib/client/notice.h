/*
 * notice.h: where a preemption notice comes from. A source is written as
 * preemptwatch's --notice takes it:
 *
 *   sigterm, signal:NAME    the signal itself (handled by the program)
 *   file:PATH               PATH appearing; an RFC 3339 time in it is the
 *                           death time
 *   gce                     metadata instance/preempted (TRUE) and
 *                           instance/maintenance-event
 *                           (TERMINATE_ON_HOST_MAINTENANCE)
 *   aws                     IMDSv2 token, then spot/instance-action
 *   azure                   scheduledevents: Preempt or Terminate events
 *
 * Polled sources are checked with notice_check; an unreachable or confused
 * metadata server is an error to log, never a notice.
 */
#ifndef MUSTER_NOTICE_H
#define MUSTER_NOTICE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum notice_kind {
	NOTICE_SIGNAL,
	NOTICE_FILE,
	NOTICE_GCE,
	NOTICE_AWS,
	NOTICE_AZURE
};

struct http_client;

struct notice_source {
	enum notice_kind kind;
	char spec[300];
	int signo;      /* NOTICE_SIGNAL */
	char path[256]; /* NOTICE_FILE */
	ino_t ino;      /* the file last taken as a notice */
	int64_t mtime_ns;
	char prefix[256]; /* metadata: path before the API's */
	char addr[280];   /* metadata: HOST:PORT */
	struct http_client *http;
	char token[512]; /* AWS IMDSv2 */
	int64_t token_at;
	int fired; /* cloud notices are taken once */
};

/* A signal's number from its name ("TERM", "SIGTERM"); -1 if unknown. */
int notice_signal_number(const char *name);

/* Parses spec; base is the metadata URL for cloud sources (NULL: theirs). */
int notice_parse(const char *spec, const char *base, struct notice_source *src,
    char *err, size_t errlen);

/*
 * One look at a polled source. 1: a notice, with the death time (Unix ms)
 * in *death_ms (now + grace_ms when the source gives none); 0: none; -1:
 * the source could not be read (err says why).
 */
int notice_check(struct notice_source *src, int64_t grace_ms, int64_t *death_ms,
    char *err, size_t errlen);

void notice_free(struct notice_source *src);

/*
 * The signals among the n sources (the program handles them): each is
 * appended to sigs, which has room for n more, and is_signal[signo] set
 * (65 entries). 1 when some source must be polled, by a notice_watcher
 * thread; 0 when all are signals.
 */
int notice_signals(const struct notice_source *src, size_t n, int *sigs,
    size_t *nsigs, int *is_signal);

struct evq;

/* What the polling thread needs. */
struct notice_watch {
	struct notice_source *src;
	size_t n;
	int64_t grace_ms;
	int64_t interval_ms;
	struct evq *q;
};

/*
 * Polls the file and cloud sources every interval, for the life of the
 * process (arg: struct notice_watch), posting SESSION_NOTICE with the
 * death time; a source that cannot be read is logged once per distinct
 * error, and tried again.
 */
void *notice_watcher(void *arg);

#endif
