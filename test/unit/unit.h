/*
 * unit.h: a small TAP test harness for the library. Each test is a function;
 * CHECK records a failure and goes on, so one run shows every broken case.
 */
#ifndef MUSTER_UNIT_H
#define MUSTER_UNIT_H

#include <stdio.h>

extern int unit_failed;

#define CHECK(cond)                                                     \
	do {                                                            \
		if (!(cond)) {                                          \
			printf("# %s:%d: CHECK(%s) failed\n", __FILE__, \
			    __LINE__, #cond);                           \
			unit_failed = 1;                                \
		}                                                       \
	} while (0)

struct unit_test {
	const char *name;
	void (*fn)(void);
};

#define UNIT_TESTS(group) const struct unit_test group[]

extern const struct unit_test status_tests[], duration_tests[], text_tests[],
    buf_tests[], strmap_tests[], kvstore_tests[], timer_tests[], cli_tests[],
    span_tests[], http_tests[], task_tests[], notice_tests[], syncpoint_tests[],
    state_tests[], dataset_tests[], dsjournal_tests[], journal_tests[],
    crc32c_tests[], cqjournal_tests[], datapos_tests[], client_tests[],
    pump_tests[];

#endif
