/*
 * test_datapos.c: positions (load, add, merge) and the reader of a
 * positioned stream, fed by a pipe.
 */
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datapos.h"
#include "datawire.h"
#include "unit.h"

#define FP "0123456789abcdef"

static json_t *
pos(const char *text)
{
	json_t *j = json_loads(text, 0, NULL);

	CHECK(j != NULL);
	return j;
}

/* A position's "next" and open list, compact, is want; j is freed. */
static int
json_shape_is(json_t *j, const char *want)
{
	json_t *o = json_pack("{s:O,s:O}", "next", json_object_get(j, "next"),
	    "open", json_object_get(j, "open"));
	char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	int ok = s != NULL && strcmp(s, want) == 0;

	if (!ok)
		printf("# got  %s\n# want %s\n", s != NULL ? s : "NULL", want);
	free(s);
	json_decref(o);
	json_decref(j);
	return ok;
}

static int
shape_is(const struct datapos *p, const char *want)
{
	return json_shape_is(datapos_json(p), want);
}

static void
add_and_complete(void)
{
	struct datapos *p = datapos_new();
	char err[256];
	json_t *j = pos("{\"dataset\":\"" FP "\",\"repeat\":1,\"seed\":0,"
	                "\"next\":0,\"open\":[]}");

	CHECK(datapos_load(p, j, err, sizeof(err)) == 0);
	/* Seq 2 first: 0 and 1 open with nothing delivered. */
	CHECK(datapos_add(p, 2, 0, 3, -1, err, sizeof(err)) == 0);
	CHECK(shape_is(p,
	    "{\"next\":3,\"open\":[{\"seq\":0,\"skip\":[]},"
	    "{\"seq\":1,\"skip\":[]},{\"seq\":2,\"skip\":[[0,3]]}]}"));
	/* Its end: whole, gone from the list. */
	CHECK(datapos_add(p, 2, 3, 5, 5, err, sizeof(err)) == 0);
	CHECK(datapos_add(p, 0, 4, 6, -1, err, sizeof(err)) == 0);
	CHECK(datapos_add(p, 0, 0, 2, -1, err, sizeof(err)) == 0);
	CHECK(datapos_add(p, 0, 2, 4, -1, err, sizeof(err)) == 0);
	CHECK(shape_is(p,
	    "{\"next\":3,\"open\":[{\"seq\":0,\"skip\":[[0,6]]},"
	    "{\"seq\":1,\"skip\":[]}]}"));
	/* An empty split's end. */
	CHECK(datapos_add(p, 1, 0, 0, 0, err, sizeof(err)) == 0);
	CHECK(datapos_add(p, 0, 6, 6, 6, err, sizeof(err)) == 0);
	CHECK(shape_is(p, "{\"next\":3,\"open\":[]}"));
	/* A seq far beyond is refused, not allocated. */
	CHECK(datapos_add(p, 1u << 30, 0, 1, -1, err, sizeof(err)) < 0);
	json_decref(j);
	datapos_free(p);
}

static void
bad_positions(void)
{
	static const char *const bad[] = {
	    "[]",
	    "{\"dataset\":\"xyz\",\"repeat\":1,\"seed\":0,\"next\":0}",
	    "{\"dataset\":\"" FP "\",\"repeat\":-1,\"seed\":0,\"next\":0}",
	    "{\"dataset\":\"" FP "\",\"repeat\":1,\"seed\":0,\"next\":2,"
	    "\"open\":[{\"seq\":2}]}",
	    "{\"dataset\":\"" FP "\",\"repeat\":1,\"seed\":0,\"next\":2,"
	    "\"open\":[{\"seq\":1},{\"seq\":1}]}",
	    "{\"dataset\":\"" FP "\",\"repeat\":1,\"seed\":0,\"next\":2,"
	    "\"open\":[{\"seq\":1,\"skip\":[[3,1]]}]}",
	    "{\"dataset\":\"" FP "\",\"mode\":\"off\",\"repeat\":1,\"seed\":0,"
	    "\"next\":0}",
	    NULL,
	};
	struct datapos *p = datapos_new();
	char err[256];

	for (int i = 0; bad[i] != NULL; i++) {
		json_t *j = json_loads(bad[i], 0, NULL);
		err[0] = '\0';
		CHECK(datapos_load(p, j, err, sizeof(err)) < 0);
		CHECK(err[0] != '\0');
		CHECK(!datapos_loaded(p));
		json_decref(j);
	}
	datapos_free(p);
}

static void
merge_is_a_union(void)
{
	struct datapos *p = datapos_new();
	char err[256];
	/* A read seqs 0 (whole), 1 [0,4) and 3 [0,2); B read 1 [4,10) and
	 * its end, 2 whole and 4 [0,1). */
	json_t *a =
	    pos("{\"dataset\":\"" FP "\",\"repeat\":2,\"seed\":7,"
	        "\"next\":4,\"open\":[{\"seq\":1,\"skip\":[[0,4]]},"
	        "{\"seq\":2,\"skip\":[]},{\"seq\":3,\"skip\":[[0,2]]}]}");
	json_t *b =
	    pos("{\"dataset\":\"" FP "\",\"repeat\":2,\"seed\":7,"
	        "\"next\":5,\"open\":[{\"seq\":0,\"skip\":[]},"
	        "{\"seq\":1,\"skip\":[[4,10]],\"total\":10},"
	        "{\"seq\":3,\"skip\":[]},{\"seq\":4,\"skip\":[[0,1]]}]}");
	json_t *other = pos("{\"dataset\":\"" FP "\",\"repeat\":2,\"seed\":8,"
	                    "\"next\":0}");

	CHECK(datapos_merge(p, a, err, sizeof(err)) == 0);
	CHECK(datapos_merge(p, b, err, sizeof(err)) == 0);
	CHECK(shape_is(p,
	    "{\"next\":5,\"open\":[{\"seq\":3,\"skip\":[[0,2]]},"
	    "{\"seq\":4,\"skip\":[[0,1]]}]}"));
	/* In the other order, the same. */
	datapos_free(p);
	p = datapos_new();
	CHECK(datapos_merge(p, b, err, sizeof(err)) == 0);
	CHECK(datapos_merge(p, a, err, sizeof(err)) == 0);
	CHECK(shape_is(p,
	    "{\"next\":5,\"open\":[{\"seq\":3,\"skip\":[[0,2]]},"
	    "{\"seq\":4,\"skip\":[[0,1]]}]}"));
	/* Another job's position is refused, and changes nothing. */
	CHECK(datapos_merge(p, other, err, sizeof(err)) < 0);
	CHECK(strstr(err, "different jobs") != NULL);
	CHECK(shape_is(p,
	    "{\"next\":5,\"open\":[{\"seq\":3,\"skip\":[[0,2]]},"
	    "{\"seq\":4,\"skip\":[[0,1]]}]}"));
	json_decref(a);
	json_decref(b);
	json_decref(other);
	datapos_free(p);
}

static void
put_record(FILE *f, uint32_t type, uint64_t seq, uint64_t first, uint32_t count,
    uint32_t flags, const char *payload, size_t len)
{
	struct chunk_hdr h = {htole32(CHUNK_MAGIC), htole32(type), htole64(seq),
	    htole64(first), htole32(count), htole32((uint32_t)len),
	    htole32(flags), 0};

	fwrite(&h, sizeof(h), 1, f);
	fwrite(payload, 1, len, f);
}

/* A stream of three records into a pipe; the reader's elements and
 * positions, whole and cut at each byte. */
static void
reader_counts_elements(void)
{
	static const char start[] =
	    "{\"framing\":\"lines\",\"start\":{\"dataset\":\"" FP
	    "\",\"repeat\":1,\"seed\":0,\"next\":1,\"open\":[{\"seq\":0,"
	    "\"skip\":[[0,1]]}]}}";
	char *stream = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&stream, &len);

	put_record(f, CHUNK_STATE, 0, 0, 0, 0, start, strlen(start));
	put_record(f, CHUNK_DATA, 0, 1, 2, CHUNK_SPLIT_END, "b\nc\n", 4);
	put_record(f, CHUNK_DATA, 2, 0, 1, 0, "x\n", 2);
	put_record(f, CHUNK_DATA, 1, 0, 0, CHUNK_SPLIT_END, "", 0);
	put_record(f, CHUNK_END, 0, 0, 0, 0, "", 0);
	fclose(f);

	for (size_t cut = len; cut + 1 > 0; cut--) {
		int fds[2];
		CHECK(pipe(fds) == 0);
		CHECK(write(fds[1], stream, cut) == (ssize_t)cut);
		close(fds[1]);
		struct datapos_reader *r = datapos_reader_new(fds[0]);
		const char *e;
		size_t n;
		char got[64] = "";
		int rc;
		while ((rc = datapos_next(r, &e, &n)) == 1) {
			strncat(got, e, n);
			if (cut == len && strcmp(got, "b") == 0)
				CHECK(json_shape_is(datapos_reader_position(r),
				    "{\"next\":1,\"open\":[{\"seq\":0,"
				    "\"skip\":[[0,2]]}]}"));
		}
		if (cut == len) {
			CHECK(rc == 0);
			CHECK(strcmp(got, "bcx") == 0);
			CHECK(strcmp(datapos_reader_framing(r), "lines") == 0);
			CHECK(json_shape_is(datapos_reader_position(r),
			    "{\"next\":3,\"open\":[{\"seq\":2,\"skip\":"
			    "[[0,1]]}]}"));
		} else {
			/* Cut short: an error, never a quiet end. */
			CHECK(rc == -1);
			CHECK(datapos_reader_error(r)[0] != '\0');
		}
		datapos_reader_free(r);
		close(fds[0]);
	}
	free(stream);
}

/* Seqs held open are bounded: a gap too wide, and open seqs too many,
 * each say which. */
static void
open_seqs_are_bounded(void)
{
	struct datapos *p = datapos_new();
	char err[256];
	json_t *j = pos("{\"dataset\":\"" FP "\",\"repeat\":0,\"seed\":0,"
	                "\"next\":0,\"open\":[]}");

	CHECK(datapos_load(p, j, err, sizeof(err)) == 0);
	CHECK(datapos_add(p, DATAPOS_OPEN_MAX, 0, 1, -1, err, sizeof(err)) < 0);
	CHECK(strstr(err, "too far beyond") != NULL);
	CHECK(datapos_add(p, DATAPOS_OPEN_MAX / 2, 0, 1, -1, err,
	          sizeof(err)) == 0);
	CHECK(datapos_add(p, DATAPOS_OPEN_MAX + 10, 0, 1, -1, err,
	          sizeof(err)) < 0);
	CHECK(strstr(err, "splits open") != NULL);
	json_decref(j);
	datapos_free(p);
}

UNIT_TESTS(datapos_tests) = {
    {"positions: delivered ranges close seqs; seqs skipped stay open",
        add_and_complete},
    {"positions: malformed ones are refused with a reason", bad_positions},
    {"positions: open seqs are bounded, and the refusal says which bound",
        open_seqs_are_bounded},
    {"positions of a job's consumers merge into their union", merge_is_a_union},
    {"a positioned stream: its elements, and an error when cut short",
        reader_counts_elements},
    {NULL, NULL},
};
