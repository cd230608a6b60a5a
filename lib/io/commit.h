/*
 * commit.h: a daemon's journal and its HTTP server together. Changes are
 * appended under the daemon's lock (commit_append); the server holds
 * every reply until the changes made before it are durable (the gate),
 * and a request whose change could not be written gets an error instead
 * of its reply. Replies to many clients wait for one fsync together.
 */
#ifndef MUSTER_COMMIT_H
#define MUSTER_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "http_server.h"
#include "journal.h"

struct commit;

/* Takes j, replayed already, and becomes its durable callback. */
struct commit *commit_new(struct journal *j, const char *daemon);

/*
 * Appends a record: under the daemon's lock, in the order of the changes.
 * Tells the running request (http_note_write) what it made, or that the
 * journal refused it. The sequence number, or 0.
 */
uint64_t commit_append(struct commit *c, const void *p, size_t len);

/* For daemon_service.gate: the newest change appended. */
uint64_t commit_gate(void *c);

/* For daemon_service.gate_flush: journal_write_now. */
void commit_flush(struct commit *c, uint64_t seq);

/* The server whose replies wait; before it serves. */
void commit_attach(struct commit *c, struct http_server *srv);

/*
 * Whether changes are refused now (the journal cannot write): replies so
 * to req (RESOURCE_EXHAUSTED for a full disk, else INTERNAL) and returns
 * 1; else 0. For a daemon's changes, before it makes them.
 */
int commit_refuse(struct commit *c, struct http_req *req);

/*
 * Shutting down, before the server stops: waits for what is appended to
 * be durable, then lets every reply go without waiting.
 */
void commit_detach(struct commit *c);

/* The journal (for compaction and sizes). */
struct journal *commit_journal(struct commit *c);

/* Closes the journal (writing what is left): 0, or -1. */
int commit_free(struct commit *c);

#endif
