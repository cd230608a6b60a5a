#include <stdio.h>
#include <string.h>

#include "unit.h"

int unit_failed;

static const struct unit_test *groups[] = {
    dataset_tests,
    datapos_tests,
    dsjournal_tests,
    journal_tests,
    crc32c_tests,
    status_tests,
    duration_tests,
    text_tests,
    buf_tests,
    strmap_tests,
    kvstore_tests,
    timer_tests,
    cli_tests,
    span_tests,
    http_tests,
    task_tests,
    notice_tests,
    syncpoint_tests,
    state_tests,
    cqjournal_tests,
    client_tests,
    pump_tests,
};

int
main(int argc, char **argv)
{
	int n = 0, failed = 0, total = 0;

	for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++)
		for (const struct unit_test *t = groups[g]; t->name != NULL;
		     t++)
			total++;
	printf("1..%d\n", total);
	for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
		for (const struct unit_test *t = groups[g]; t->name != NULL;
		     t++) {
			if (argc > 1 && strstr(t->name, argv[1]) == NULL) {
				printf("ok %d - %s # skip not selected\n", ++n,
				    t->name);
				continue;
			}
			unit_failed = 0;
			t->fn();
			printf("%sok %d - %s\n", unit_failed ? "not " : "", ++n,
			    t->name);
			fflush(stdout);
			failed += unit_failed;
		}
	}
	return failed != 0;
}
