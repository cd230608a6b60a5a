/*
 * tls.h: TLS for the HTTP client, with GnuTLS loaded only when an address
 * asks for it (https://). A plain client never maps the library: GnuTLS
 * and what it pulls in cost milliseconds per process, more than a whole
 * kvctl call.
 *
 * What a client trusts and shows comes from the environment:
 *   MUSTER_TLS_CA_FILE    PEM certificates that sign the server's (default:
 *                         the system's trust store)
 *   MUSTER_TLS_CERT_FILE  the client's own certificate chain, PEM, for a
 *   MUSTER_TLS_KEY_FILE   daemon that asks for one (--tls-client-ca)
 * The server's certificate must name the host of the address (DNS name or
 * IP address in its subjectAltName).
 *
 * The calls never block on a non-blocking socket: each returns
 * TLS_WANT_READ or TLS_WANT_WRITE when the socket must become ready first,
 * and the caller polls (on a blocking one with a timeout, they say so when
 * it passes).
 */
#ifndef MUSTER_TLS_H
#define MUSTER_TLS_H

#include <stddef.h>
#include <sys/types.h>

#define TLS_WANT_READ (-2)
#define TLS_WANT_WRITE (-3)
#define TLS_LOST (-4) /* the connection broke: worth another try */

struct tls;

/*
 * Loads GnuTLS and the credentials the environment names, once per
 * process; 0, or -1 with err saying why (missing library, bad file).
 */
int tls_client_init(char *err, size_t errlen);
/* A session on connected socket fd, to host. NULL (err) on failure. */
struct tls *tls_new(int fd, const char *host, char *err, size_t errlen);
/*
 * Credentials of a client's own rather than the environment's, for a peer
 * with a CA of its own (an etcd cluster): whom it trusts (ca, PEM; NULL:
 * the system's trust store) and who it is (cert and key, PEM, or neither).
 * GnuTLS is loaded as for tls_client_init. NULL with err saying why.
 */
struct tls_cred;
struct tls_cred *tls_cred_new(const char *ca, const char *cert, const char *key,
    char *err, size_t errlen);
void tls_cred_free(struct tls_cred *cr);
/* tls_new with cr's credentials. */
struct tls *tls_new_cred(int fd, const char *host, const struct tls_cred *cr,
    char *err, size_t errlen);
/* 0 once the handshake is done, TLS_WANT_*, TLS_LOST or -1 (err: why). */
int tls_handshake(struct tls *t, char *err, size_t errlen);
/* Bytes sent, TLS_WANT_*, or -1. */
ssize_t tls_send(struct tls *t, const void *p, size_t n);
/* Bytes read, 0 at the end of the stream, TLS_WANT_*, or -1. */
ssize_t tls_recv(struct tls *t, void *p, size_t n);
/* Frees the session; the socket stays the caller's to close. */
void tls_free(struct tls *t);
/* Bytes received and decrypted, not yet read: poll(2) will not see them. */
size_t tls_pending(struct tls *t);

/*
 * The server side, for a server of our own (a worker's data server): its
 * certificate chain and key, PEM files, loaded with GnuTLS as above. NULL
 * with err saying why (a missing library, a bad or mismatched file).
 */
struct tls_server;
struct tls_server *tls_server_new(const char *cert, const char *key, char *err,
    size_t errlen);
void tls_server_free(struct tls_server *srv);
/* A server session on accepted socket fd; tls_handshake then. NULL (err)
 * on failure. */
struct tls *tls_accept(struct tls_server *srv, int fd, char *err,
    size_t errlen);

#endif
