#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
#include "http1.h"
#include "http_client.h"
#include "http_server.h"
#include "proc.h"
#include "timer.h"
#include "unit.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

struct tick {
	struct timer t;
	int fired;
	int64_t when;
	int order;
};

static int fire_seq;

static void
on_fire(struct timer *t)
{
	struct tick *k = (struct tick *)t;

	k->fired++;
	k->when = duration_now_ms();
	k->order = ++fire_seq;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

static void
timers_fire_in_order(void)
{
	struct timers *ts = timers_new(&mu);
	struct tick a = {.t.fire = on_fire}, b = {.t.fire = on_fire},
	            c = {.t.fire = on_fire};
	int64_t start = duration_now_ms();

	CHECK(timers_start(ts) == 0);
	pthread_mutex_lock(&mu);
	fire_seq = 0;
	timers_add(ts, &a.t, start + 60);
	timers_add(ts, &b.t, start + 20);
	timers_add(ts, &c.t, start + 40);
	timers_cancel(ts, &c.t);
	timers_cancel(ts, &c.t); /* twice is harmless */
	CHECK(timers_count(ts) == 2);
	pthread_mutex_unlock(&mu);
	sleep_ms(150);
	pthread_mutex_lock(&mu);
	CHECK(a.fired == 1 && b.fired == 1 && c.fired == 0);
	CHECK(b.order == 1 && a.order == 2);
	CHECK(b.when >= start + 20 && a.when >= start + 60);
	CHECK(timers_count(ts) == 0);
	pthread_mutex_unlock(&mu);
	timers_free(ts);
}

static void
timers_heap_stress(void)
{
	struct timers *ts = timers_new(&mu);
	enum { N = 2000 };
	struct tick *k = calloc(N, sizeof(*k));
	unsigned seed = 7;

	/* Not started: exercise the heap alone, then cancel everything. */
	pthread_mutex_lock(&mu);
	for (int i = 0; i < N; i++) {
		k[i].t.fire = on_fire;
		CHECK(timers_add(ts, &k[i].t, rand_r(&seed) % 100000) == 0);
	}
	for (int i = 0; i < N; i += 2)
		timers_cancel(ts, &k[i].t);
	for (int i = 1; i < N; i += 4) /* re-arm moves */
		timers_add(ts, &k[i].t, rand_r(&seed) % 100000);
	CHECK(timers_count(ts) == N / 2);
	for (int i = 0; i < N; i++)
		timers_cancel(ts, &k[i].t);
	CHECK(timers_count(ts) == 0);
	pthread_mutex_unlock(&mu);
	timers_free(ts);
	free(k);
}

UNIT_TESTS(timer_tests) = {
    {"timer: fires in deadline order, cancel works", timers_fire_in_order},
    {"timer: heap stays consistent under add/cancel", timers_heap_stress},
    {NULL, NULL},
};

/* A test server: /echo replies at once, /park parks until /wake. */
static struct http_req *parked[64];
static int nparked;

static void
handler(struct http_req *req, void *arg)
{
	const char *path = http_req_path(req);
	size_t len;
	const char *body = http_req_body(req, &len);

	(void)arg;
	if (strcmp(path, "/echo") == 0) {
		const char *q = http_req_arg(req, "q");
		if (q != NULL)
			http_reply(req, 200, "text/plain", q, strlen(q));
		else
			http_reply(req, 200, "text/plain", body, len);
	} else if (strcmp(path, "/park") == 0) {
		pthread_mutex_lock(&mu);
		parked[nparked++] = req;
		http_park(req);
		pthread_mutex_unlock(&mu);
	} else if (strcmp(path, "/wake") == 0) {
		pthread_mutex_lock(&mu);
		for (int i = 0; i < nparked; i++)
			http_reply(parked[i], 200, "text/plain", "woken", 5);
		nparked = 0;
		pthread_mutex_unlock(&mu);
		http_reply(req, 200, "text/plain", "ok", 2);
	} else if (strcmp(path, "/closing") == 0) {
		http_set_header(req, "Retry-After", "1");
		http_reply_error(req, ST_UNAVAILABLE, "closing");
	} else {
		http_reply_error(req, ST_NOT_FOUND, "no %s", path);
	}
}

static struct http_server *
serve(int port)
{
	struct http_server_config cfg = {
	    .host = "127.0.0.1",
	    .port = port,
	    .threads = 2,
	    .max_body = 1024,
	    .handler = handler,
	};
	char err[256];

	return http_server_start(&cfg, err, sizeof(err));
}

static void
http_round_trip(void)
{
	struct http_server *srv = serve(0);
	struct http_client *c;
	struct http_resp r;
	char addr[64], err[256];
	char big[2048];

	CHECK(srv != NULL);
	if (srv == NULL)
		return;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", http_server_port(srv));
	c = http_client_new(addr, 1, err, sizeof(err));
	CHECK(c != NULL);
	CHECK(http_client_do(c, "POST", "/echo", "hi", 2, NULL,
	          HTTP_NO_DEADLINE, 1, &r, err, sizeof(err)) == ST_OK);
	CHECK(r.code == 200 && r.body.len == 2 &&
	    memcmp(r.body.data, "hi", 2) == 0);
	http_resp_free(&r);
	CHECK(http_client_do(c, "GET", "/echo?q=a%20b", NULL, 0, NULL,
	          HTTP_NO_DEADLINE, 1, &r, err, sizeof(err)) == ST_OK);
	CHECK(r.body.len == 3 && memcmp(r.body.data, "a b", 3) == 0);
	http_resp_free(&r);
	CHECK(http_client_do(c, "GET", "/nope", NULL, 0, NULL, HTTP_NO_DEADLINE,
	          1, &r, err, sizeof(err)) == ST_NOT_FOUND);
	CHECK(r.code == 404 && strcmp(err, "no /nope") == 0);
	http_resp_free(&r);
	memset(big, 'x', sizeof(big));
	CHECK(http_client_do(c, "POST", "/echo", big, sizeof(big), NULL,
	          HTTP_NO_DEADLINE, 1, &r, err,
	          sizeof(err)) == ST_RESOURCE_EXHAUSTED);
	http_resp_free(&r);
	/* Still serving after the refusal. */
	CHECK(http_client_do(c, "POST", "/echo", "ok", 2, NULL,
	          HTTP_NO_DEADLINE, 1, &r, err, sizeof(err)) == ST_OK);
	http_resp_free(&r);
	http_client_free(c);
	http_server_stop(srv);
}

struct parker {
	char addr[64];
	enum status st;
	char body[16];
};

static void *
park_one(void *arg)
{
	struct parker *p = arg;
	char err[256];
	struct http_client *c = http_client_new(p->addr, 1, err, sizeof(err));
	struct http_resp r;

	p->st = http_client_do(c, "GET", "/park", NULL, 0, NULL,
	    duration_now_ms() + 5000, 1, &r, err, sizeof(err));
	snprintf(p->body, sizeof(p->body), "%s",
	    r.body.data != NULL ? r.body.data : "");
	http_resp_free(&r);
	http_client_free(c);
	return NULL;
}

static void
http_parked_requests(void)
{
	struct http_server *srv = serve(0);
	struct parker p[8];
	pthread_t th[8];
	struct http_client *c;
	struct http_resp r;
	char err[256];
	int64_t until;

	if (srv == NULL) {
		CHECK(srv != NULL);
		return;
	}
	nparked = 0;
	for (int i = 0; i < 8; i++) {
		snprintf(p[i].addr, sizeof(p[i].addr), "127.0.0.1:%d",
		    http_server_port(srv));
		pthread_create(&th[i], NULL, park_one, &p[i]);
	}
	until = duration_now_ms() + 3000;
	while (http_server_parked(srv) < 8 && duration_now_ms() < until)
		sleep_ms(5);
	CHECK(http_server_parked(srv) == 8);
	c = http_client_new(p[0].addr, 1, err, sizeof(err));
	CHECK(http_client_do(c, "GET", "/wake", NULL, 0, NULL, HTTP_NO_DEADLINE,
	          1, &r, err, sizeof(err)) == ST_OK);
	http_resp_free(&r);
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		CHECK(p[i].st == ST_OK && strcmp(p[i].body, "woken") == 0);
	}
	CHECK(http_server_parked(srv) == 0);
	http_client_free(c);
	http_server_stop(srv);
}

static void
http_client_waits_for_server(void)
{
	struct http_server *srv = serve(0);
	struct http_client *c;
	struct http_resp r;
	char addr[64], err[256];
	int port;
	int64_t start;

	if (srv == NULL) {
		CHECK(srv != NULL);
		return;
	}
	port = http_server_port(srv);
	http_server_stop(srv);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	c = http_client_new(addr, 1, err, sizeof(err));
	/* Nobody listens: retries until the deadline, then UNAVAILABLE. */
	start = duration_now_ms();
	CHECK(http_client_do(c, "GET", "/echo", NULL, 0, NULL, start + 300, 1,
	          &r, err, sizeof(err)) == ST_UNAVAILABLE);
	CHECK(duration_now_ms() - start >= 250);
	http_resp_free(&r);
	http_client_free(c);
}

/*
 * A server of raw bytes, for what libmicrohttpd would never send: it
 * reads requests one at a time and answers each as its mode says.
 */
enum raw_mode {
	RAW_CUT_SECOND,  /* the second request on the first connection: no
	                   reply, the connection closed */
	RAW_CLOSE_IDLE,  /* each connection closed after its first reply */
	RAW_TWO_REPLIES, /* a second reply ("no") with the first request's */
	/* A stream (200, chunked), until the client leaves: */
	RAW_HUGE_CHUNK, /* a chunk of 1 GiB */
	RAW_LONG_SIZE,  /* a chunk size line without end */
	RAW_SILENT,     /* nothing after the head */
};

struct raw {
	enum raw_mode mode;
	int lfd;
	char addr[64];
	pthread_t t;
	pthread_mutex_t mu;
	int requests; /* read whole */
};

/* Reads one request from fd, its head and its Content-Length body: 0, or
 * -1 when fd closes first. */
static int
raw_request(int fd)
{
	char b[4096];
	size_t got = 0;

	for (;;) {
		const char *end, *cl;
		ssize_t r;

		b[got] = '\0';
		if ((end = strstr(b, "\r\n\r\n")) != NULL) {
			cl = strcasestr(b, "Content-Length: ");
			if (got >= (size_t)(end + 4 - b) +
			        (cl != NULL ? strtoul(cl + 16, NULL, 10) : 0))
				return 0;
		}
		if (got == sizeof(b) - 1 ||
		    (r = read(fd, b + got, sizeof(b) - 1 - got)) <= 0)
			return -1;
		got += (size_t)r;
	}
}

/* Sends a stream of mode's to fd until the client leaves. */
static void
raw_stream(int fd, enum raw_mode mode)
{
	static const char head[] =
	    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
	char b[4096];

	memset(b, mode == RAW_LONG_SIZE ? '0' : 'x', sizeof(b));
	if (send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL) < 0 ||
	    (mode == RAW_HUGE_CHUNK &&
	        send(fd, "40000000\r\n", 10, MSG_NOSIGNAL) < 0))
		return;
	if (mode == RAW_SILENT)
		while (read(fd, b, sizeof(b)) > 0)
			;
	else
		while (send(fd, b, sizeof(b), MSG_NOSIGNAL) > 0)
			;
}

static void *
raw_main(void *arg)
{
	static const char ok[] =
	    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	static const char two[] =
	    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno";
	struct raw *s = arg;
	int fd, conns = 0;

	while ((fd = accept(s->lfd, NULL, NULL)) >= 0) {
		conns++;
		while (raw_request(fd) == 0) {
			const char *reply;
			int n;

			pthread_mutex_lock(&s->mu);
			n = ++s->requests;
			pthread_mutex_unlock(&s->mu);
			if (s->mode >= RAW_HUGE_CHUNK) {
				raw_stream(fd, s->mode);
				break;
			}
			if (s->mode == RAW_CUT_SECOND && conns == 1 && n == 2)
				break;
			reply = s->mode == RAW_TWO_REPLIES && n == 1 ? two : ok;
			if (send(fd, reply, strlen(reply), MSG_NOSIGNAL) < 0 ||
			    s->mode == RAW_CLOSE_IDLE)
				break;
		}
		close(fd);
	}
	return NULL;
}

static int
raw_start(struct raw *s, enum raw_mode mode)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);

	memset(s, 0, sizeof(*s));
	s->mode = mode;
	pthread_mutex_init(&s->mu, NULL);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if ((s->lfd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(s->lfd, 8) < 0 ||
	    getsockname(s->lfd, (struct sockaddr *)&sa, &len) < 0)
		return -1;
	snprintf(s->addr, sizeof(s->addr), "127.0.0.1:%d", ntohs(sa.sin_port));
	return pthread_create(&s->t, NULL, raw_main, s) == 0 ? 0 : -1;
}

/* The requests s read; s stopped. */
static int
raw_stop(struct raw *s)
{
	shutdown(s->lfd, SHUT_RDWR);
	pthread_join(s->t, NULL);
	close(s->lfd);
	pthread_mutex_destroy(&s->mu);
	return s->requests;
}

/*
 * A client of one attempt (a cluster's, which tries another member itself)
 * must know whether a change may have been made: one whose kept-alive
 * connection died after it went out fails, never sent again; one whose
 * connection the server had closed while idle goes on a new one.
 */
static void
http_client_sends_a_change_once(void)
{
	struct http_client *c;
	struct http_resp r;
	struct raw s;
	char err[256];

	signal(SIGPIPE, SIG_IGN);
	if (raw_start(&s, RAW_CUT_SECOND) < 0) {
		CHECK(0);
		return;
	}
	c = http_client_new(s.addr, 1, err, sizeof(err));
	http_client_set_retry(c, 0);
	CHECK(http_client_do(c, "POST", "/put", "1", 1, NULL,
	          duration_now_ms() + 5000, 0, &r, err, sizeof(err)) == ST_OK);
	http_resp_free(&r);
	CHECK(http_client_do(c, "POST", "/put", "2", 1, NULL,
	          duration_now_ms() + 5000, 0, &r, err,
	          sizeof(err)) == ST_UNAVAILABLE);
	CHECK(r.unsent == 0);
	http_resp_free(&r);
	http_client_free(c);
	CHECK(raw_stop(&s) == 2);

	if (raw_start(&s, RAW_CLOSE_IDLE) < 0) {
		CHECK(0);
		return;
	}
	c = http_client_new(s.addr, 1, err, sizeof(err));
	http_client_set_retry(c, 0);
	for (int i = 0; i < 3; i++) {
		CHECK(http_client_do(c, "POST", "/put", "1", 1, NULL,
		          duration_now_ms() + 5000, 0, &r, err,
		          sizeof(err)) == ST_OK);
		http_resp_free(&r);
		sleep_ms(50); /* the server's close arrives */
	}
	http_client_free(c);
	CHECK(raw_stop(&s) == 3);
}

/*
 * A server that sends more than the reply (a second one, say) leaves no
 * reply for the next request to take: each gets its own, on a new
 * connection.
 */
static void
http_client_takes_only_its_reply(void)
{
	struct http_client *c;
	struct http_resp r;
	struct raw s;
	char err[256];

	signal(SIGPIPE, SIG_IGN);
	if (raw_start(&s, RAW_TWO_REPLIES) < 0) {
		CHECK(0);
		return;
	}
	c = http_client_new(s.addr, 1, err, sizeof(err));
	for (int i = 0; i < 2; i++) {
		CHECK(http_client_do(c, "GET", "/x", NULL, 0, NULL,
		          duration_now_ms() + 5000, 1, &r, err,
		          sizeof(err)) == ST_OK);
		CHECK(r.body.len == 2 && memcmp(r.body.data, "ok", 2) == 0);
		http_resp_free(&r);
	}
	http_client_free(c);
	CHECK(raw_stop(&s) == 2);
}

/* A stream's reader that wants 8 MiB, noting its largest piece. */
struct taken {
	size_t total, most;
};

static int
take_8m(void *arg, const char *p, size_t n)
{
	struct taken *t = arg;

	(void)p;
	t->total += n;
	if (n > t->most)
		t->most = n;
	return t->total >= (8u << 20);
}

/* A stream's reader that takes its time over each piece (the server's
 * bytes wait for it), and has enough once 3 s have passed. */
static int
take_3s(void *arg, const char *p, size_t n)
{
	(void)p;
	(void)n;
	sleep_ms(1);
	return duration_now_ms() - *(int64_t *)arg > 3000;
}

/*
 * What a hostile server sends a stream's reader is bounded: a chunk of any
 * size comes in pieces, a stream without end ends at its deadline, a chunk
 * size line longer than a head is a bad chunk, and a stream silent for its
 * limit is cut.
 */
static void
http_client_stream_bounds(void)
{
	struct http_client *c;
	struct http_resp r;
	struct taken t = {0, 0};
	struct raw s;
	char err[256];
	int64_t t0;

	signal(SIGPIPE, SIG_IGN);
	if (raw_start(&s, RAW_HUGE_CHUNK) < 0) {
		CHECK(0);
		return;
	}
	c = http_client_new(s.addr, 1, err, sizeof(err));
	CHECK(http_client_stream(c, "POST", "/watch", "{}", 2, NULL,
	          duration_now_ms() + 10000, 0, take_8m, &t, &r, err,
	          sizeof(err)) == ST_OK);
	CHECK(t.total >= (8u << 20) && t.most <= (64u << 10));
	http_resp_free(&r);
	/* A stream whose bytes never stop still ends at its deadline. */
	t0 = duration_now_ms();
	CHECK(
	    http_client_stream(c, "POST", "/watch", "{}", 2, NULL, t0 + 300, 0,
	        take_3s, &t0, &r, err, sizeof(err)) == ST_DEADLINE_EXCEEDED);
	CHECK(duration_now_ms() - t0 < 2000);
	http_resp_free(&r);
	http_client_free(c);
	raw_stop(&s);

	if (raw_start(&s, RAW_LONG_SIZE) < 0) {
		CHECK(0);
		return;
	}
	c = http_client_new(s.addr, 1, err, sizeof(err));
	CHECK(http_client_do(c, "GET", "/x", NULL, 0, NULL,
	          duration_now_ms() + 10000, 1, &r, err,
	          sizeof(err)) == ST_UNAVAILABLE);
	CHECK(strstr(err, "sent a bad chunk") != NULL);
	http_resp_free(&r);
	http_client_free(c);
	raw_stop(&s);

	if (raw_start(&s, RAW_SILENT) < 0) {
		CHECK(0);
		return;
	}
	c = http_client_new(s.addr, 1, err, sizeof(err));
	t0 = duration_now_ms();
	CHECK(http_client_stream(c, "POST", "/watch", "{}", 2, NULL, t0 + 10000,
	          200, take_8m, &t, &r, err,
	          sizeof(err)) == ST_DEADLINE_EXCEEDED);
	CHECK(strstr(err, "sent nothing for 200 ms") != NULL);
	CHECK(duration_now_ms() - t0 < 2000);
	http_resp_free(&r);
	http_client_free(c);
	raw_stop(&s);
}

static void
http_client_addresses(void)
{
	char err[256];
	struct http_client *c;

	c = http_client_new("127.0.0.1:80", 1, err, sizeof(err));
	CHECK(c != NULL && strcmp(http_client_addr(c), "127.0.0.1:80") == 0);
	http_client_free(c);
	c = http_client_new("localhost", 7700, err, sizeof(err));
	CHECK(c != NULL && strcmp(http_client_addr(c), "localhost:7700") == 0);
	http_client_free(c);
	c = http_client_new("[::1]:9", 1, err, sizeof(err));
	CHECK(c != NULL && strcmp(http_client_addr(c), "[::1]:9") == 0);
	http_client_free(c);
	CHECK(http_client_new("a:b:c", 1, err, sizeof(err)) == NULL);
	CHECK(http_client_new("host:0", 1, err, sizeof(err)) == NULL);
	CHECK(http_client_new("host:x", 1, err, sizeof(err)) == NULL);
	CHECK(http_client_new("", 1, err, sizeof(err)) == NULL);
}

static void
proc_env_scrubs_credentials(void)
{
	char *base[] = {"PATH=/bin", "MUSTER_TOKEN_FILE=/t", "MUSTER_TOKEN=x",
	    "MUSTER_TASK_SECRET=s", "MUSTER_TLS_CERT_FILE=/c",
	    "MUSTER_TLS_KEY_FILE=/k", "MUSTER_TLS_CA_FILE=/ca",
	    "MUSTER_DISPATCHER=d", "MY_TOKEN=mine", "MUSTER_X=TOKEN", NULL};
	char *set[] = {"MUSTER_CLOSURE_ID=7", "MUSTER_TOKEN_FILE=/given", NULL};
	char **env = proc_env_child(base, set);
	const char *want[] = {"PATH=/bin", "MUSTER_TLS_CA_FILE=/ca",
	    "MUSTER_DISPATCHER=d", "MY_TOKEN=mine", "MUSTER_X=TOKEN",
	    "MUSTER_CLOSURE_ID=7", "MUSTER_TOKEN_FILE=/given"};
	size_t n = 0;

	CHECK(proc_env_credential("MUSTER_TOKEN_FILE=/t"));
	CHECK(proc_env_credential("MUSTER_WORKER_TOKEN=1"));
	CHECK(!proc_env_credential("MUSTER_TLS_CA_FILE=/ca"));
	CHECK(!proc_env_credential("MUSTER_TLS_KEY_FILE_X=1"));
	CHECK(!proc_env_credential("TOKEN=1"));
	CHECK(env != NULL);
	while (env != NULL && env[n] != NULL)
		n++;
	CHECK(n == sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; env != NULL && i < n && i < 7; i++)
		CHECK(strcmp(env[i], want[i]) == 0);
	free(env);
	/* proc_env itself keeps them: a training command needs them. */
	env = proc_env(base, set);
	n = 0;
	while (env != NULL && env[n] != NULL)
		n++;
	CHECK(n == 11);
	free(env);
}

/* The heads peers send, and those they must not get through. */
static void
http1_heads(void)
{
	char req[] = "GET /v1/tasks/7/elements?max=10&wait=5 HTTP/1.1\r\n"
	             "Host: h\r\nauthorization:   bearer  s3cret \t\r\n"
	             "Connection: Keep-Alive\r\n\r\nnext";
	char req10[] = "GET /healthz HTTP/1.0\r\nContent-Length: 12\r\n\r\n";
	char close11[] = "GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
	char chunked[] =
	    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
	char badlen[] = "GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n";
	const char *bad[] = {"GET  / HTTP/1.1\r\n\r\n", "GET /\r\n\r\n",
	    " / HTTP/1.1\r\n\r\n", "GET / FTP/1\r\n\r\n",
	    "G(T / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1 x\r\n\r\n"};
	const char *reply =
	    "HTTP/1.1 404 Not Found\r\nContent-Length: 17\r\n"
	    "Transfer-Encoding: Chunked\r\nConnection: close\r\n"
	    "X-Muster-Revision: 42\r\n\r\n";
	struct http1_request r;
	struct http1_reply rp;
	size_t n, len = http1_head_len(req, strlen(req));
	const char *v;

	CHECK(len == strlen(req) - 4);
	CHECK(http1_head_len(req, len - 1) == 0);
	CHECK(http1_parse_request(req, len, &r) == HTTP1_OK);
	CHECK(strcmp(r.method, "GET") == 0);
	CHECK(strcmp(r.path, "/v1/tasks/7/elements") == 0);
	CHECK(strcmp(r.query, "max=10&wait=5") == 0);
	CHECK(r.auth != NULL && r.auth_len == 6 &&
	    memcmp(r.auth, "s3cret", 6) == 0);
	CHECK(r.keep == 1 && r.length == 0);
	CHECK(http1_parse_request(req10, strlen(req10), &r) == HTTP1_OK);
	CHECK(r.keep == 0 && r.length == 12 && r.query[0] == '\0');
	CHECK(r.auth == NULL);
	CHECK(http1_parse_request(close11, strlen(close11), &r) == HTTP1_OK);
	CHECK(r.keep == 0);
	CHECK(
	    http1_parse_request(chunked, strlen(chunked), &r) == HTTP1_CHUNKED);
	CHECK(http1_parse_request(badlen, strlen(badlen), &r) ==
	    HTTP1_BAD_LENGTH);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char copy[64];
		snprintf(copy, sizeof(copy), "%s", bad[i]);
		CHECK(http1_parse_request(copy, strlen(copy), &r) ==
		    HTTP1_MALFORMED);
	}

	CHECK(http1_parse_reply(reply, strlen(reply), &rp) == 0);
	CHECK(rp.code == 404 && rp.length == 17 && rp.chunked && rp.close);
	v = http1_header(reply, strlen(reply), "x-muster-revision", &n);
	CHECK(v != NULL && n == 2 && memcmp(v, "42", 2) == 0);
	CHECK(http1_header(reply, strlen(reply), "X-Muster", &n) == NULL);
	/* The first line is no header; nothing after the blank line is. */
	CHECK(http1_header(reply, strlen(reply), "HTTP/1.1 404 Not Found",
	          &n) == NULL);
	CHECK(http1_header("HTTP/1.1 200 OK\r\n\r\nA: b\r\n", 25, "A", &n) ==
	    NULL);
	CHECK(http1_parse_reply("HTTP/1.1 200 OK\r\n\r\n", 19, &rp) == 0 &&
	    rp.length == -1 && !rp.close && !rp.chunked);
	CHECK(http1_parse_reply("HTTP/1.1 200\r\n\r\n", 16, &rp) == 0);
	CHECK(http1_parse_reply("HTTP/2 200 OK\r\n\r\n", 17, &rp) < 0);
	CHECK(http1_parse_reply("HTTP/1.1 20 OK\r\n\r\n", 18, &rp) < 0);
	CHECK(http1_parse_reply("HTTP/1.1 2000 OK\r\n\r\n", 20, &rp) < 0);
	CHECK(http1_parse_reply("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
	          39, &rp) < 0);
	CHECK(http1_parse_reply("HTTP/1.1 200 OK\r\nContent-Length: "
	                        "99999999999999999999\r\n\r\n",
	          57, &rp) < 0);
}

UNIT_TESTS(http_tests) = {
    {"http: request, reply, errors, body limit", http_round_trip},
    {"http: parked requests are answered from another thread",
        http_parked_requests},
    {"http: client retries until its deadline", http_client_waits_for_server},
    {"http: client addresses", http_client_addresses},
    {"http: a client of one attempt sends a change once",
        http_client_sends_a_change_once},
    {"http: a reply is taken by its request alone",
        http_client_takes_only_its_reply},
    {"http: a stream's bytes and silence are bounded",
        http_client_stream_bounds},
    {"http1: request and reply heads, and those refused", http1_heads},
    {"proc: a command run for someone else gets no credential of ours",
        proc_env_scrubs_credentials},
    {NULL, NULL},
};
