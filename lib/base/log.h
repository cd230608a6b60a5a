/*
 * log.h: the one way programs and the library report to people. Lines go to
 * stderr as "prog: message"; debug lines only with -v.
 */
#ifndef MUSTER_LOG_H
#define MUSTER_LOG_H

void log_init(const char *prog, int verbose);
const char *log_prog(void);
int log_verbose(void);

void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
