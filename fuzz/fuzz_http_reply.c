/*
 * The HTTP client's reply reader: a server on loopback answers each
 * request with the input's bytes and closes; the client must end with a
 * status and a bounded body, never crash or hang past its deadline.
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
	http_resp_free(&resp);
	http_client_free(c);
	return 0;
}
