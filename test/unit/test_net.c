#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
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

UNIT_TESTS(http_tests) = {
    {"http: request, reply, errors, body limit", http_round_trip},
    {"http: parked requests are answered from another thread",
        http_parked_requests},
    {"http: client retries until its deadline", http_client_waits_for_server},
    {"http: client addresses", http_client_addresses},
    {"proc: a command run for someone else gets no credential of ours",
        proc_env_scrubs_credentials},
    {NULL, NULL},
};
