#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "cli.h"
#include "duration.h"
#include "parse.h"
#include "span.h"
#include "status.h"
#include "strmap.h"
#include "text.h"
#include "unit.h"

static void
status_round_trip(void)
{
	for (int i = 0; i < ST_COUNT; i++) {
		CHECK((int)status_from_name(status_name((enum status)i)) == i);
		CHECK(status_exit((enum status)i) == i);
	}
	CHECK(status_from_name("NO_SUCH") == ST_INTERNAL);
	CHECK(status_from_name(NULL) == ST_INTERNAL);
}

static void
status_table(void)
{
	/* The exit codes and HTTP codes are the documented table. */
	CHECK(status_exit(ST_OK) == 0);
	CHECK(status_exit(ST_NOT_FOUND) == 1);
	CHECK(status_exit(ST_USAGE) == 2);
	CHECK(status_exit(ST_DEADLINE_EXCEEDED) == 4);
	CHECK(status_exit(ST_CANCELLED) == 8);
	CHECK(status_exit(ST_RESOURCE_EXHAUSTED) == 12);
	CHECK(status_http(ST_NOT_FOUND) == 404);
	CHECK(status_http(ST_DEADLINE_EXCEEDED) == 504);
	CHECK(status_http(ST_FAILED_PRECONDITION) == 412);
	CHECK(status_http(ST_CANCELLED) == 499);
	CHECK(status_http(ST_RESOURCE_EXHAUSTED) == 413);
	CHECK(status_from_http(404) == ST_NOT_FOUND);
	CHECK(status_from_http(503) == ST_UNAVAILABLE);
	CHECK(status_from_http(429) == ST_RESOURCE_EXHAUSTED);
	CHECK(status_from_http(418) == ST_INTERNAL);
}

UNIT_TESTS(status_tests) = {
    {"status: names and exit codes round-trip", status_round_trip},
    {"status: the documented table", status_table},
    {NULL, NULL},
};

static void
duration_parsing(void)
{
	int64_t ms = -1;

	CHECK(duration_parse("500ms", &ms) == 0 && ms == 500);
	CHECK(duration_parse("30s", &ms) == 0 && ms == 30000);
	CHECK(duration_parse("5m", &ms) == 0 && ms == 300000);
	CHECK(duration_parse("1h", &ms) == 0 && ms == 3600000);
	CHECK(duration_parse("1h30m", &ms) == 0 && ms == 5400000);
	CHECK(duration_parse("1.5s", &ms) == 0 && ms == 1500);
	CHECK(duration_parse("2", &ms) == 0 && ms == 2000);
	CHECK(duration_parse("0", &ms) == 0 && ms == 0);
	CHECK(duration_parse("1500us", &ms) == 0 && ms == 2);
	CHECK(duration_parse("", &ms) < 0);
	CHECK(duration_parse("s", &ms) < 0);
	CHECK(duration_parse("5x", &ms) < 0);
	CHECK(duration_parse("-1s", &ms) < 0);
	CHECK(duration_parse("1s 2s", &ms) < 0);
	CHECK(duration_parse(NULL, &ms) < 0);
	CHECK(duration_parse("99999999999999999h", &ms) < 0);
}

static void
duration_formatting(void)
{
	char b[32];

	CHECK(strcmp(duration_format(0, b, sizeof(b)), "0s") == 0);
	CHECK(strcmp(duration_format(250, b, sizeof(b)), "250ms") == 0);
	CHECK(strcmp(duration_format(5400000, b, sizeof(b)), "1h30m") == 0);
	CHECK(strcmp(duration_format(61500, b, sizeof(b)), "1m1s500ms") == 0);
}

static void
duration_clock(void)
{
	int64_t a = duration_now_ms(), b = duration_now_ms();

	CHECK(a > 0 && b >= a);
}

UNIT_TESTS(duration_tests) = {
    {"duration: parses units, sums and bare seconds", duration_parsing},
    {"duration: formats the shortest exact form", duration_formatting},
    {"duration: monotonic clock", duration_clock},
    {NULL, NULL},
};

static void
base64_round_trip(void)
{
	unsigned char all[256];
	struct buf e = {0}, d = {0};

	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	for (size_t n = 0; n <= 256; n += 1) {
		buf_reset(&e);
		buf_reset(&d);
		CHECK(text_base64_encode(&e, all, n) == 0);
		CHECK(e.len == (n + 2) / 3 * 4);
		CHECK(text_base64_decode(&d, e.data != NULL ? e.data : "",
		          e.len) == 0);
		CHECK(d.len == n && (n == 0 || memcmp(d.data, all, n) == 0));
	}
	buf_reset(&e);
	text_base64_encode(&e, "hello", 5);
	CHECK(strcmp(e.data, "aGVsbG8=") == 0);
	buf_reset(&d);
	CHECK(text_base64_decode(&d, "a$b=", 4) < 0);
	buf_reset(&d);
	CHECK(text_base64_decode(&d, "aGV=sbG8", 8) < 0);
	buf_free(&e);
	buf_free(&d);
}

static void
url_codec(void)
{
	struct buf b = {0};

	CHECK(text_url_encode(&b, "a b/c?d%", 8) == 0);
	CHECK(strcmp(b.data, "a%20b/c%3Fd%25") == 0);
	buf_reset(&b);
	CHECK(text_url_decode(&b, "a%20b%2Fc+d", 11, 0) == 0);
	CHECK(strcmp(b.data, "a b/c+d") == 0);
	buf_reset(&b);
	CHECK(text_url_decode(&b, "a+b", 3, 1) == 0);
	CHECK(strcmp(b.data, "a b") == 0);
	buf_reset(&b);
	CHECK(text_url_decode(&b, "a%00b", 5, 0) < 0);
	buf_reset(&b);
	CHECK(text_url_decode(&b, "a%2", 3, 0) < 0);
	buf_reset(&b);
	CHECK(text_url_decode(&b, "a%zz", 4, 0) < 0);
	buf_free(&b);
}

static void
utf8_validation(void)
{
	CHECK(text_utf8_valid("plain", 5));
	CHECK(text_utf8_valid("\xc3\xa9t\xc3\xa9", 6));
	CHECK(text_utf8_valid("\xf0\x9f\x98\x80", 4));
	CHECK(!text_utf8_valid("\xff", 1));
	CHECK(!text_utf8_valid("\xc3", 1));
	CHECK(!text_utf8_valid("\xc0\xaf", 2));         /* overlong */
	CHECK(!text_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
	CHECK(!text_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	CHECK(text_printable("a b", 3));
	CHECK(!text_printable("a\nb", 3));
	CHECK(!text_printable("a\x7f", 2));
}

UNIT_TESTS(text_tests) = {
    {"text: base64 round-trips every length", base64_round_trip},
    {"text: percent-encoding and its errors", url_codec},
    {"text: UTF-8 validation", utf8_validation},
    {NULL, NULL},
};

static void
buf_growth(void)
{
	struct buf b = {0};
	size_t n;
	char *p;

	for (int i = 0; i < 1000; i++)
		CHECK(buf_printf(&b, "%d,", i) == 0);
	CHECK(strncmp(b.data, "0,1,2,", 6) == 0);
	CHECK(b.data[b.len] == '\0');
	p = buf_take(&b, &n);
	CHECK(p != NULL && n > 1000 && b.data == NULL && b.len == 0);
	free(p);
	p = buf_take(&b, &n);
	CHECK(p != NULL && n == 0 && p[0] == '\0');
	free(p);
}

UNIT_TESTS(buf_tests) = {
    {"buf: grows, stays terminated, hands over", buf_growth},
    {NULL, NULL},
};

static void
count_one(const char *k, size_t kl, void *v, void *arg)
{
	(void)k;
	(void)kl;
	(void)v;
	(*(int *)arg)++;
}

static void
strmap_basics(void)
{
	struct strmap *m = strmap_new();
	char key[32];
	int n = 0, x = 1, y = 2;

	CHECK(strmap_get(m, "a", 1) == NULL);
	CHECK(strmap_put(m, "a", 1, &x) == 0);
	CHECK(strmap_get(m, "a", 1) == &x);
	CHECK(strmap_put(m, "a", 1, &y) == 0);
	CHECK(strmap_get(m, "a", 1) == &y && strmap_count(m) == 1);
	/* Keys are bytes: an embedded NUL is part of the key. */
	CHECK(strmap_put(m, "a\0b", 3, &x) == 0);
	CHECK(strmap_get(m, "a\0b", 3) == &x && strmap_count(m) == 2);
	for (int i = 0; i < 10000; i++) {
		int len = snprintf(key, sizeof(key), "k%d", i);
		CHECK(strmap_put(m, key, (size_t)len, &x) == 0);
	}
	CHECK(strmap_count(m) == 10002);
	strmap_each(m, count_one, &n);
	CHECK(n == 10002);
	CHECK(strmap_del(m, "k500", 4) == &x);
	CHECK(strmap_del(m, "k500", 4) == NULL);
	CHECK(strmap_get(m, "k501", 4) == &x);
	CHECK(strmap_count(m) == 10001);
	strmap_free(m, NULL);
}

UNIT_TESTS(strmap_tests) = {
    {"strmap: put, replace, delete, grow", strmap_basics},
    {NULL, NULL},
};

static void
cli_sizes_and_addresses(void)
{
	size_t n;
	char host[64];
	int port;

	long v = 0;

	CHECK(parse_long("64", 1, 64, &v) == 0 && v == 64);
	CHECK(parse_long("65", 1, 64, &v) < 0 && v == 64);
	CHECK(parse_long("0", 1, 64, &v) < 0);
	CHECK(parse_long("", 1, 64, &v) < 0);
	CHECK(parse_long("3x", 1, 64, &v) < 0);
	CHECK(parse_long("99999999999999999999", 1, 64, &v) < 0);
	CHECK(parse_size("1048576", &n) == 0 && n == 1048576);
	CHECK(parse_size("64K", &n) == 0 && n == 65536);
	CHECK(parse_size("16M", &n) == 0 && n == 16u << 20);
	CHECK(parse_size("1GiB", &n) == 0 && n == 1u << 30);
	CHECK(parse_size("", &n) < 0);
	CHECK(parse_size("12Q", &n) < 0);
	CHECK(parse_size("-1", &n) < 0);
	CHECK(parse_listen("127.0.0.1:7700", host, sizeof(host), &port) == 0 &&
	    strcmp(host, "127.0.0.1") == 0 && port == 7700);
	CHECK(parse_listen("[::1]:0", host, sizeof(host), &port) == 0 &&
	    strcmp(host, "::1") == 0 && port == 0);
	CHECK(parse_listen("127.0.0.1", host, sizeof(host), &port) < 0);
	CHECK(parse_listen("127.0.0.1:99999", host, sizeof(host), &port) < 0);
	CHECK(parse_listen(":80", host, sizeof(host), &port) < 0);
	setenv(CLI_COORD_ENV, "10.0.0.1:1", 1);
	CHECK(strcmp(cli_coord_addr(NULL), "10.0.0.1:1") == 0);
	CHECK(strcmp(cli_coord_addr("x:2"), "x:2") == 0);
	unsetenv(CLI_COORD_ENV);
	CHECK(strcmp(cli_coord_addr(NULL), CLI_COORD_DEFAULT) == 0);
}

/* cli_flushed(f, rc) with stderr sent to /dev/null. */
static int
flushed_quietly(FILE *f, int rc)
{
	int save = dup(2), null = open("/dev/null", O_WRONLY);

	fflush(stderr);
	dup2(null, 2);
	rc = cli_flushed(f, rc);
	fflush(stderr);
	dup2(save, 2);
	close(save);
	close(null);
	return rc;
}

/*
 * Output lost is a failed run. A pipe that does not wait refuses a write
 * once full; stdio drops what that write held, and once the pipe has
 * drained, the flush of what came after succeeds.
 */
static void
cli_output_lost(void)
{
	static char block[4096], sink[65536];
	int p[2];
	FILE *f;

	memset(block, 'x', sizeof(block));
	CHECK(pipe(p) == 0);
	CHECK(fcntl(p[0], F_SETFL, O_NONBLOCK) == 0 &&
	    fcntl(p[1], F_SETFL, O_NONBLOCK) == 0);
	CHECK((f = fdopen(p[1], "w")) != NULL);
	CHECK(fputs("taken\n", f) >= 0 && flushed_quietly(f, 0) == 0);
	for (int i = 0; i < 4096 && !ferror(f); i++)
		fwrite(block, 1, sizeof(block), f);
	CHECK(ferror(f));
	while (read(p[0], sink, sizeof(sink)) > 0)
		;
	CHECK(fputs("after\n", f) >= 0);
	CHECK(flushed_quietly(f, 0) == status_exit(ST_INTERNAL));
	/* A run that failed already keeps its own code. */
	CHECK(flushed_quietly(f, 3) == 3);
	fclose(f);
	close(p[0]);

	CHECK((f = fopen("/dev/full", "w")) != NULL);
	CHECK(fputs("x\n", f) >= 0);
	CHECK(flushed_quietly(f, 0) == status_exit(ST_INTERNAL));
	fclose(f);
}

/* Spans: added in any order, merged when they touch, whole once they
 * cover [0, total). */
static void
span_arithmetic(void)
{
	struct span *v = NULL;
	size_t n = 0, cap = 0;

	CHECK(!span_whole(v, n, -1) && span_whole(v, n, 0) &&
	    !span_whole(v, n, 3));
	CHECK(span_add(&v, &n, &cap, 5, 5) == 0 && n == 0);
	CHECK(span_add(&v, &n, &cap, 10, 12) == 0 && n == 1);
	CHECK(span_add(&v, &n, &cap, 2, 4) == 0 && n == 2 && v[0].a == 2);
	CHECK(span_add(&v, &n, &cap, 12, 14) == 0 && n == 2 && v[1].b == 14);
	CHECK(span_add(&v, &n, &cap, 20, 21) == 0 && n == 3);
	/* Touching the first and overlapping the next two: one span. */
	CHECK(span_add(&v, &n, &cap, 4, 20) == 0 && n == 1 && v[0].a == 2 &&
	    v[0].b == 21);
	CHECK(!span_whole(v, n, 21));
	CHECK(span_add(&v, &n, &cap, 0, 3) == 0 && n == 1 && v[0].a == 0);
	CHECK(span_whole(v, n, 21) && span_whole(v, n, 20) &&
	    !span_whole(v, n, 22) && !span_whole(v, n, -1));
	for (uint64_t i = 100; i < 200; i += 2)
		CHECK(span_add(&v, &n, &cap, i, i + 1) == 0);
	CHECK(n == 51 && cap >= n);
	free(v);
}

UNIT_TESTS(span_tests) = {
    {"span: delivered ranges merged, whole once covered", span_arithmetic},
    {NULL, NULL},
};

UNIT_TESTS(cli_tests) = {
    {"cli: numbers, sizes, listen addresses, coordd address",
        cli_sizes_and_addresses},
    {"cli: output lost fails the run, though the last flush worked",
        cli_output_lost},
    {NULL, NULL},
};
