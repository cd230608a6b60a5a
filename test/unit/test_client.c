/*
 * The client modules dispatchctl is glue over: the names of closure
 * states, split lists, a closure's exit code, and the operands of verbs.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "closurestate.h"
#include "dispatch_opts.h"
#include "dispatch_show.h"
#include "splitlist.h"
#include "status.h"
#include "unit.h"

static void
closure_state_names(void)
{
	CHECK(closure_states_parse("NOT_READY") ==
	    (CLOSURE_QUEUED | CLOSURE_RUNNING));
	CHECK(closure_states_parse("not_ready") ==
	    (CLOSURE_QUEUED | CLOSURE_RUNNING));
	CHECK(closure_states_parse("READY") == CLOSURE_READY);
	CHECK(closure_states_parse("Ready") == CLOSURE_READY);
	CHECK(closure_states_parse("queued") == CLOSURE_QUEUED);
	CHECK(closure_states_parse("RUNNING") == CLOSURE_RUNNING);
	CHECK(closure_states_parse("aborted") == CLOSURE_ABORTED);
	CHECK(closure_states_parse("CANCELLED") == CLOSURE_CANCELLED);
	CHECK(closure_states_parse("canceled") == 0);
	CHECK(closure_states_parse("") == 0);
	CHECK(closure_states_parse("READY&queue=x") == 0);
}

/* f, a memory stream over *mem, closed: what was written to it, NUL-ended,
 * the caller's to free. */
static char *
written(FILE *f, char **mem)
{
	fclose(f);
	return *mem;
}

static void
split_list_names(void)
{
	char dir[] = "/tmp/muster-unit-XXXXXX", cwd[PATH_MAX],
	     want[PATH_MAX * 2];
	char err[256], *mem = NULL, *out;
	char *globs[] = {"./d/*.txt", "d/a.txt"};
	size_t len;
	FILE *f;

	CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	CHECK(mkdtemp(dir) != NULL && chdir(dir) == 0);
	CHECK(mkdir("d", 0700) == 0);
	fclose(fopen("d/b.txt", "w"));
	fclose(fopen("d/a.txt", "w"));
	f = open_memstream(&mem, &len);
	CHECK(splitlist_files(f, 2, globs, err, sizeof(err)) == ST_OK);
	out = written(f, &mem);
	snprintf(want, sizeof(want), "%s/d/a.txt\n%s/d/b.txt\n", dir, dir);
	CHECK(strcmp(out, want) == 0);
	free(out);

	/* Byte ranges name the file absolute too, and cover it. */
	f = fopen("big", "w");
	for (int i = 0; i < 100; i++)
		fprintf(f, "line %d\n", i);
	fclose(f);
	f = open_memstream(&mem, &len);
	CHECK(splitlist_bytes(f, "big", 300, err, sizeof(err)) == ST_OK);
	out = written(f, &mem);
	snprintf(want, sizeof(want), " %s/big", dir);
	CHECK(strncmp(out, "0 ", 2) == 0);
	for (char *line = strtok(out, "\n"); line != NULL;
	     line = strtok(NULL, "\n"))
		CHECK(strlen(line) > strlen(want) &&
		    strcmp(line + strlen(line) - strlen(want), want) == 0);
	free(out);

	f = open_memstream(&mem, &len);
	globs[0] = "d/*.none";
	CHECK(splitlist_files(f, 1, globs, err, sizeof(err)) ==
	    ST_INVALID_ARGUMENT);
	CHECK(strstr(err, "matches no file") != NULL);
	free(written(f, &mem));

	f = open_memstream(&mem, &len);
	CHECK(splitlist_range(f, 0, 10, 4, err, sizeof(err)) == ST_OK);
	out = written(f, &mem);
	CHECK(strcmp(out, "0 4\n4 8\n8 10\n") == 0);
	free(out);

	/* A newline in the directory's name would cut every line in two. */
	CHECK(mkdir("n\nl", 0700) == 0 && chdir("n\nl") == 0);
	f = fopen("f", "w");
	fputs("x\n", f);
	fclose(f);
	f = open_memstream(&mem, &len);
	globs[0] = "f";
	CHECK(splitlist_files(f, 1, globs, err, sizeof(err)) ==
	    ST_INVALID_ARGUMENT);
	CHECK(splitlist_bytes(f, "f", 300, err, sizeof(err)) ==
	    ST_INVALID_ARGUMENT);
	CHECK(strstr(err, "newline") != NULL);
	out = written(f, &mem);
	CHECK(strcmp(out, "") == 0);
	free(out);
	unlink("f");
	CHECK(chdir("..") == 0 && rmdir("n\nl") == 0);

	unlink("d/a.txt");
	unlink("d/b.txt");
	unlink("big");
	rmdir("d");
	CHECK(chdir(cwd) == 0 && rmdir(dir) == 0);
}

static void
closure_exit_codes(void)
{
	static const struct {
		const char *json;
		int code;
	} cases[] = {
	    {"{\"state\":\"READY\",\"exit\":0}", 0},
	    {"{\"state\":\"READY\",\"exit\":7}", 7},
	    /* Exit 0 with a message: the worker could not run it. */
	    {"{\"state\":\"READY\",\"exit\":0,\"message\":\"spawn\"}", 10},
	    {"{\"state\":\"READY\",\"signal\":9}", 137},
	    {"{\"state\":\"CANCELLED\"}", 8},
	    {"{\"state\":\"ABORTED\",\"exit\":3}", 7},
	    {"{\"state\":\"READY\"}", 10},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *c = json_loads(cases[i].json, 0, NULL);
		int code = dispatch_show_code(c);
		if (code != cases[i].code)
			printf("# %s: %d, not %d\n", cases[i].json, code,
			    cases[i].code);
		CHECK(code == cases[i].code);
		json_decref(c);
	}
}

static void
verb_operands(void)
{
	char *ids[] = {"cancel", "1", "18446744073709551615", NULL};
	char *range[] = {"range", "0", "10", "3", NULL};
	char *bytes[] = {"bytes", "f", "64k", NULL};
	int64_t a, e, s;
	size_t size;

	CHECK(dispatch_opts_id("42") == 42);
	CHECK(dispatch_opts_id("0") == 0);
	CHECK(dispatch_opts_id("042") == 0);
	CHECK(dispatch_opts_id("-1") == 0);
	CHECK(dispatch_opts_id("4x") == 0);
	CHECK(dispatch_opts_id("18446744073709551616") == 0);
	CHECK(dispatch_opts_ids(1, 3, ids) == 0);
	CHECK(dispatch_opts_range(4, range, &a, &e, &s) == 0 && a == 0 &&
	    e == 10 && s == 3);
	CHECK(dispatch_opts_range(3, range, &a, &e, &s) == 0 && s == 1);
	CHECK(dispatch_opts_bytes(3, bytes, &size) == 0 && size == 65536);
	/* Mistakes are usage errors (said on stderr). */
	fflush(stderr);
	{
		int save = dup(2), null = open("/dev/null", 1);
		char *bad[] = {"cancel", "x", NULL};
		char *back[] = {"range", "5", "4", NULL};
		dup2(null, 2);
		CHECK(dispatch_opts_ids(1, 2, bad) == 2);
		CHECK(dispatch_opts_ids(1, 1, bad) == 2);
		CHECK(dispatch_opts_range(3, back, &a, &e, &s) == 2);
		bytes[2] = "0";
		CHECK(dispatch_opts_bytes(3, bytes, &size) == 2);
		fflush(stderr);
		dup2(save, 2);
		close(save);
		close(null);
	}
}

UNIT_TESTS(client_tests) = {
    {"closure_state_names", closure_state_names},
    {"split_list_names", split_list_names},
    {"closure_exit_codes", closure_exit_codes},
    {"verb_operands", verb_operands},
    {NULL, NULL},
};
