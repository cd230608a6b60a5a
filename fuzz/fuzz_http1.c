/*
 * The HTTP/1.1 head reader (http1.h), which a data server runs on a
 * stranger's bytes and every client on a server's: any bytes parse or
 * are refused, never a crash or a read beyond the head; what it gives
 * lies within the head and says what the head says.
 */
#include <ctype.h>

#include "fuzz.h"
#include "http1.h"

/* p[0..n) lies within head[0..len) and holds no line break. */
static void
inside(const char *head, size_t len, const char *p, size_t n)
{
	FUZZ_CHECK(p >= head && p + n <= head + len);
	FUZZ_CHECK(memchr(p, '\n', n) == NULL && memchr(p, '\r', n) == NULL);
	FUZZ_CHECK(n == 0 || (p[0] != ' ' && p[n - 1] != ' '));
}

static void
headers(const char *head, size_t len)
{
	static const char *names[] = {"Content-Length", "Connection",
	    "Authorization", "Transfer-Encoding", "Host", "X"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		size_t n;
		const char *v = http1_header(head, len, names[i], &n);
		if (v != NULL)
			inside(head, len, v, n);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly size bytes: ASan sees a read beyond it. */
	char *head = malloc(size ? size : 1);
	size_t len = http1_head_len((const char *)data, size);
	struct http1_reply rp;
	struct http1_request rq;

	if (head == NULL)
		abort();
	FUZZ_CHECK(len == 0 ||
	    (len >= 4 && len <= size &&
	        memcmp(data + len - 4, "\r\n\r\n", 4) == 0));
	/* What came, as a whole head when it has its end, else as it is. */
	if (len == 0)
		len = size;
	memcpy(head, data, len);
	headers(head, len);
	if (http1_parse_reply(head, len, &rp) == 0) {
		FUZZ_CHECK(rp.code >= 100 && rp.code <= 999);
		FUZZ_CHECK(rp.length >= -1);
		FUZZ_CHECK(memcmp(head, "HTTP/1.", 7) == 0);
	}
	switch (http1_parse_request(head, len, &rq)) {
	case HTTP1_OK:
		FUZZ_CHECK(rq.length >= 0);
		/* fall through */
	case HTTP1_CHUNKED:
	case HTTP1_BAD_LENGTH:
		FUZZ_CHECK(rq.method[0] != '\0' && rq.path[0] != '\0');
		inside(head, len, rq.method, strlen(rq.method));
		inside(head, len, rq.path, strlen(rq.path));
		FUZZ_CHECK(strchr(rq.path, '?') == NULL);
		FUZZ_CHECK(rq.query[0] == '\0' ||
		    (rq.query > rq.path && rq.query < head + len));
		if (rq.auth != NULL)
			inside(head, len, rq.auth, rq.auth_len);
		FUZZ_CHECK(rq.keep == 0 || rq.keep == 1);
		break;
	case HTTP1_MALFORMED: break;
	default: FUZZ_CHECK(!"a verdict of its own");
	}
	free(head);
	return 0;
}
