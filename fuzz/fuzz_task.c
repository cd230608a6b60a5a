/* Task names, cluster specs and incarnations. */
#include <inttypes.h>

#include "fuzz.h"
#include "task.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size), buf[128], err[256], inc_s[17];
	struct task_name t, t2;
	struct cluster_spec c;
	uint64_t inc, inc2;
	size_t total = 0;

	if (task_parse(s, &t) == 0) {
		FUZZ_CHECK(t.index >= 0);
		FUZZ_CHECK(t.job[0] != '\0');
		FUZZ_CHECK(memchr(t.job, '\0', sizeof(t.job)) != NULL);
		/* Its canonical form names the same task. */
		task_format(&t, buf, sizeof(buf));
		FUZZ_CHECK(task_parse(buf, &t2) == 0);
		FUZZ_CHECK(strcmp(t.job, t2.job) == 0 && t.index == t2.index);
	}
	if (task_parse_cluster(s, &c, err, sizeof(err)) == 0) {
		FUZZ_CHECK(c.njobs >= 1 && c.njobs <= 32);
		for (size_t i = 0; i < c.njobs; i++) {
			FUZZ_CHECK(c.jobs[i].count >= 1);
			FUZZ_CHECK(c.jobs[i].name[0] != '\0');
			for (size_t j = 0; j < i; j++)
				FUZZ_CHECK(strcmp(c.jobs[i].name,
				               c.jobs[j].name) != 0);
			total += (size_t)c.jobs[i].count;
		}
		FUZZ_CHECK(total == c.ntasks);
	} else {
		FUZZ_CHECK(err[0] != '\0');
	}
	if (task_parse_incarnation(s, &inc) == 0) {
		task_format_incarnation(inc, inc_s);
		FUZZ_CHECK(task_parse_incarnation(inc_s, &inc2) == 0);
		FUZZ_CHECK(inc == inc2);
	}
	free(s);
	return 0;
}
