/*
 * http_server_gate.c: replies held until the journal has the changes they
 * may tell of (http_server_config.gate), and turned into errors when it
 * could not write them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <microhttpd.h>

#include "http_server_int.h"

_Thread_local struct http_req *http_running_req;

void
http_note_write(uint64_t seq)
{
	struct http_req *req = http_running_req;

	if (req == NULL)
		return;
	if (seq == 0)
		req->gate_err = errno != 0 ? errno : EIO;
	else
		req->wrote = 1;
}

/* Replaces req's reply with the error its failed change calls for. */
static void
reply_not_durable(struct http_req *req)
{
	int e = req->gate_err;
	int full = e == ENOSPC || e == EDQUOT || e == EFBIG;

	if (req->shared != NULL) {
		http_shared_release(req->shared);
		req->shared = NULL;
	}
	if (req->resp != NULL) {
		MHD_destroy_response(req->resp);
		req->resp = NULL;
	}
	if (e == ENOLINK) {
		/* A replica's, over etcd (store.h). */
		http_set_header(req, "Retry-After", "1");
		http_reply_error(req, ST_UNAVAILABLE,
		    "the change could not be written to etcd: its outcome is "
		    "unknown (this replica lost its leadership, or etcd its "
		    "quorum)");
		return;
	}
	http_reply_error(req, full ? ST_RESOURCE_EXHAUSTED : ST_INTERNAL,
	    "the change could not be written to the state directory (%s): "
	    "its outcome is unknown, and changes are refused until it can "
	    "be written again",
	    strerror(e));
}

/*
 * Whether req's reply must wait for the journal: it then waits on
 * srv->gated, its connection suspended, for http_server_durable.
 */
static int
gate_holds(struct http_req *req)
{
	struct http_server *srv = req->srv;
	uint64_t seq;
	int held = 0;

	if (srv->cfg.gate == NULL)
		return 0;
	if (req->gate_seq != 0 || req->gate_err != 0) {
		/* Released: or refused at once. */
		if (req->gate_err != 0 && (req->wrote || req->gate_seq == 0))
			reply_not_durable(req);
		return 0;
	}
	if ((seq = srv->cfg.gate(srv->cfg.gate_arg)) == 0 ||
	    seq <= atomic_load(&srv->durable_seen))
		return 0;
	if (srv->cfg.gate_flush != NULL)
		srv->cfg.gate_flush(srv->cfg.gate_arg, seq);
	pthread_mutex_lock(&srv->gmu);
	if (seq > srv->durable) {
		if (seq <= srv->failed) {
			req->gate_err = srv->failed_err;
		} else {
			req->gate_seq = seq;
			req->gate_next = srv->gated;
			srv->gated = req;
			held = 1;
		}
	}
	pthread_mutex_unlock(&srv->gmu);
	if (held)
		MHD_suspend_connection(req->conn);
	else if (req->gate_err != 0 && req->wrote)
		reply_not_durable(req);
	return held;
}

void
http_server_durable(struct http_server *srv, uint64_t seq, int err)
{
	struct http_req **pp, *req, *go = NULL;

	pthread_mutex_lock(&srv->gmu);
	if (err == 0) {
		if (seq > srv->durable) {
			srv->durable = seq;
			atomic_store(&srv->durable_seen, seq);
		}
	} else if (seq > srv->failed) {
		srv->failed = seq;
		srv->failed_err = err;
	}
	for (pp = &srv->gated; (req = *pp) != NULL;) {
		if (req->gate_seq <= seq) {
			*pp = req->gate_next;
			if (err != 0)
				req->gate_err = err;
			req->gate_next = go;
			go = req;
		} else {
			pp = &req->gate_next;
		}
	}
	pthread_mutex_unlock(&srv->gmu);
	while ((req = go) != NULL) {
		go = req->gate_next;
		MHD_resume_connection(req->conn);
	}
}

enum MHD_Result
http_send_reply(struct http_req *req)
{
	enum MHD_Result ret;

	if (gate_holds(req))
		return MHD_YES;
	if (req->shared != NULL) {
		ret = MHD_queue_response(req->conn, req->shared->code,
		    req->shared->mhd);
		http_shared_release(req->shared);
		req->shared = NULL;
		return ret;
	}
	ret = MHD_queue_response(req->conn, req->code, req->resp);
	MHD_destroy_response(req->resp);
	req->resp = NULL;
	return ret;
}
