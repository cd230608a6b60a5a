/*
 * The HTTP client's reply reader: a server on loopback answers each
 * request with the input's bytes and closes; the client must end with a
 * status and a bounded body, never crash or hang past its deadline. The
 * same reply read as a stream (http_client_stream) hands its reader the
 * bytes of the body the whole read took, no more and no less.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "duration.h"
#include "fuzz.h"
#include "http_client.h"

#define MAX_REPLY 65536

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* A copy of the input: the server may still be writing an old one when
 * the client has given up on it and libFuzzer has freed it. */
static uint8_t *reply;
static size_t reply_len;
static int lfd = -1;
static char addr[64];

static void *
serve(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		char in[4096];
		size_t got = 0;

		if (fd < 0)
			continue;
		/* The request, up to its blank line. */
		while (got < sizeof(in) - 1) {
			ssize_t r = read(fd, in + got, sizeof(in) - 1 - got);
			if (r <= 0)
				break;
			got += (size_t)r;
			in[got] = '\0';
			if (strstr(in, "\r\n\r\n") != NULL)
				break;
		}
		pthread_mutex_lock(&mu);
		for (size_t off = 0; off < reply_len;) {
			ssize_t w = write(fd, reply + off, reply_len - off);
			if (w <= 0)
				break;
			off += (size_t)w;
		}
		pthread_mutex_unlock(&mu);
		close(fd);
	}
	return NULL;
}

static void
start(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	pthread_t t;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	FUZZ_CHECK(lfd >= 0);
	FUZZ_CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	FUZZ_CHECK(listen(lfd, 16) == 0);
	FUZZ_CHECK(getsockname(lfd, (struct sockaddr *)&sa, &len) == 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
	FUZZ_CHECK(pthread_create(&t, NULL, serve, NULL) == 0);
	pthread_detach(t);
}

/* A stream's bytes, kept for comparison with the whole reply's body. */
static int
take(void *arg, const char *p, size_t n)
{
	FUZZ_CHECK(n > 0);
	FUZZ_CHECK(buf_append(arg, p, n) == 0);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_client *c;
	struct http_resp resp;
	char err[512];
	enum status st;
	int64_t t0;

	if (lfd < 0)
		start();
	pthread_mutex_lock(&mu);
	free(reply);
	reply = malloc(size + 1);
	FUZZ_CHECK(reply != NULL);
	memcpy(reply, data, size);
	reply_len = size;
	pthread_mutex_unlock(&mu);
	c = http_client_new(addr, 80, err, sizeof(err));
	FUZZ_CHECK(c != NULL);
	http_client_set_max_reply(c, MAX_REPLY);
	t0 = duration_now_ms();
	st = http_client_do(c, "GET", "/x", NULL, 0, NULL, t0 + 2000, 0, &resp,
	    err, sizeof(err));
	FUZZ_CHECK(duration_now_ms() - t0 < 10000);
	FUZZ_CHECK(resp.body.len <= MAX_REPLY);
	if (st == ST_OK)
		FUZZ_CHECK(resp.code >= 200 && resp.code < 300);
	else
		FUZZ_CHECK(err[0] != '\0');

	{
		struct http_resp sresp;
		struct buf got = {0};
		enum status sst;

		t0 = duration_now_ms();
		sst = http_client_stream(c, "POST", "/x", "{}", 2, NULL,
		    t0 + 2000, 0, take, &got, &sresp, err, sizeof(err));
		FUZZ_CHECK(duration_now_ms() - t0 < 10000);
		FUZZ_CHECK(sresp.body.len <= MAX_REPLY);
		/* The reader never has enough: a stream can only end. */
		FUZZ_CHECK(sst != ST_OK && err[0] != '\0');
		if (st == ST_OK)
			FUZZ_CHECK(sst == ST_UNAVAILABLE &&
			    got.len == resp.body.len &&
			    (got.len == 0 ||
			        memcmp(got.data, resp.body.data, got.len) ==
			            0));
		buf_free(&got);
		http_resp_free(&sresp);
	}
	http_resp_free(&resp);
	http_client_free(c);
	return 0;
}
