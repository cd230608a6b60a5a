#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/gnutls.h>

#include "tls.h"

/* The library as Debian's libgnutls30 installs it. */
#define GNUTLS_SONAME "libgnutls.so.30"

/* The calls we make, looked up by name when TLS is first asked for. */
#define GNUTLS_CALLS(X)                                 \
	X(gnutls_certificate_allocate_credentials)      \
	X(gnutls_certificate_free_credentials)          \
	X(gnutls_certificate_set_x509_system_trust)     \
	X(gnutls_certificate_set_x509_trust_file)       \
	X(gnutls_certificate_set_x509_key_file)         \
	X(gnutls_certificate_verification_status_print) \
	X(gnutls_credentials_set)                       \
	X(gnutls_deinit)                                \
	X(gnutls_error_is_fatal)                        \
	X(gnutls_handshake)                             \
	X(gnutls_init)                                  \
	X(gnutls_record_check_pending)                  \
	X(gnutls_record_get_direction)                  \
	X(gnutls_record_recv)                           \
	X(gnutls_record_send)                           \
	X(gnutls_server_name_set)                       \
	X(gnutls_session_get_verify_cert_status)        \
	X(gnutls_session_set_verify_cert)               \
	X(gnutls_set_default_priority)                  \
	X(gnutls_strerror)                              \
	X(gnutls_transport_set_int2)

static struct {
#define X(f) __typeof__(&f) f;
	GNUTLS_CALLS(X)
#undef X
	gnutls_free_function *free; /* a variable, not a function */
} g;

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int inited; /* 1: ready; -1: failed (init_err says why) */
static char init_err[512];
static gnutls_certificate_credentials_t cred;

struct tls {
	gnutls_session_t s;
};

struct tls_cred {
	gnutls_certificate_credentials_t c;
};

static int
load_once(char *err, size_t errlen)
{
	void *h = dlopen(GNUTLS_SONAME, RTLD_NOW | RTLD_LOCAL);

	if (h == NULL) {
		snprintf(err, errlen,
		    "https:// needs GnuTLS (%s), which cannot be loaded: %s "
		    "(install it with: apt-get install libgnutls30)",
		    GNUTLS_SONAME, dlerror());
		return -1;
	}
#define X(f)                                                             \
	if ((*(void **)&g.f = dlsym(h, #f)) == NULL) {                   \
		snprintf(err, errlen, "%s lacks %s", GNUTLS_SONAME, #f); \
		return -1;                                               \
	}
	GNUTLS_CALLS(X)
#undef X
	if ((g.free = dlsym(h, "gnutls_free")) == NULL) {
		snprintf(err, errlen, "%s lacks gnutls_free", GNUTLS_SONAME);
		return -1;
	}
	return 0;
}

/* GnuTLS, loaded once for the process: 0, or -1 with err. */
static int
load(char *err, size_t errlen)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static int loaded; /* 1 ready, -1 failed (why) */
	static char why[512];
	int rc;

	pthread_mutex_lock(&mu);
	if (loaded == 0)
		loaded = load_once(why, sizeof(why)) == 0 ? 1 : -1;
	rc = loaded;
	pthread_mutex_unlock(&mu);
	if (rc < 0)
		snprintf(err, errlen, "%s", why);
	return rc < 0 ? -1 : 0;
}

/* What a message calls each file of a set of credentials. */
struct cred_names {
	const char *ca, *cert, *key;
};

static const struct cred_names env_names = {"MUSTER_TLS_CA_FILE",
    "MUSTER_TLS_CERT_FILE", "MUSTER_TLS_KEY_FILE"};
static const struct cred_names own_names = {"the CA file",
    "the certificate file", "the key file"};

/*
 * Credentials into *c: whom we trust (ca, or the system's trust store),
 * and who we are if asked (cert and key, or neither).
 */
static int
set_credentials(gnutls_certificate_credentials_t *c, const char *ca,
    const char *cert, const char *key, const struct cred_names *n, char *err,
    size_t errlen)
{
	int rc;

	if ((rc = g.gnutls_certificate_allocate_credentials(c)) < 0) {
		snprintf(err, errlen, "TLS: %s", g.gnutls_strerror(rc));
		return -1;
	}
	if (ca != NULL && *ca != '\0') {
		rc = g.gnutls_certificate_set_x509_trust_file(*c, ca,
		    GNUTLS_X509_FMT_PEM);
		if (rc <= 0) {
			snprintf(err, errlen, "%s %s: %s", n->ca, ca,
			    rc == 0 ? "holds no certificate" :
			              g.gnutls_strerror(rc));
			return -1;
		}
	} else if ((rc = g.gnutls_certificate_set_x509_system_trust(*c)) < 0) {
		snprintf(err, errlen,
		    "TLS: cannot load the system's trust store (%s); set %s",
		    g.gnutls_strerror(rc), n->ca);
		return -1;
	}
	if ((cert != NULL && *cert != '\0') != (key != NULL && *key != '\0')) {
		snprintf(err, errlen, "%s and %s go together", n->cert, n->key);
		return -1;
	}
	if (cert != NULL && *cert != '\0' &&
	    (rc = g.gnutls_certificate_set_x509_key_file(*c, cert, key,
	         GNUTLS_X509_FMT_PEM)) < 0) {
		snprintf(err, errlen, "%s %s, %s %s: %s", n->cert, cert, n->key,
		    key, g.gnutls_strerror(rc));
		return -1;
	}
	return 0;
}

/* The credentials the environment names, for every client of the process. */
static int
load_credentials(char *err, size_t errlen)
{
	return set_credentials(&cred, getenv("MUSTER_TLS_CA_FILE"),
	    getenv("MUSTER_TLS_CERT_FILE"), getenv("MUSTER_TLS_KEY_FILE"),
	    &env_names, err, errlen);
}

int
tls_client_init(char *err, size_t errlen)
{
	int rc;

	pthread_mutex_lock(&init_mu);
	if (inited == 0) {
		inited = load(init_err, sizeof(init_err)) == 0 &&
		        load_credentials(init_err, sizeof(init_err)) == 0 ?
		    1 :
		    -1;
	}
	rc = inited;
	pthread_mutex_unlock(&init_mu);
	if (rc < 0) {
		snprintf(err, errlen, "%s", init_err);
		return -1;
	}
	return 0;
}

/* Whether host is an IP address (no server name indication then). */
static int
numeric(const char *host)
{
	unsigned char a[16];

	return inet_pton(AF_INET, host, a) == 1 ||
	    inet_pton(AF_INET6, host, a) == 1;
}

/* A session on fd, either end (GNUTLS_CLIENT or GNUTLS_SERVER), with the
 * default priorities and the certificates c; NULL, err says why. */
static struct tls *
session_new(unsigned flags, gnutls_certificate_credentials_t c, int fd,
    char *err, size_t errlen)
{
	struct tls *t = calloc(1, sizeof(*t));
	int rc;

	if (t == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if ((rc = g.gnutls_init(&t->s, flags | GNUTLS_NONBLOCK)) < 0) {
		snprintf(err, errlen, "TLS: %s", g.gnutls_strerror(rc));
		free(t);
		return NULL;
	}
	if ((rc = g.gnutls_set_default_priority(t->s)) < 0 ||
	    (rc = g.gnutls_credentials_set(t->s, GNUTLS_CRD_CERTIFICATE, c)) <
	        0) {
		snprintf(err, errlen, "TLS: %s", g.gnutls_strerror(rc));
		tls_free(t);
		return NULL;
	}
	g.gnutls_transport_set_int2(t->s, fd, fd);
	return t;
}

/* A client session on fd to host, trusting and showing c. */
static struct tls *
client_new(gnutls_certificate_credentials_t c, int fd, const char *host,
    char *err, size_t errlen)
{
	struct tls *t;
	int rc;

	if ((t = session_new(GNUTLS_CLIENT, c, fd, err, errlen)) == NULL)
		return NULL;
	if (!numeric(host) &&
	    (rc = g.gnutls_server_name_set(t->s, GNUTLS_NAME_DNS, host,
	         strlen(host))) < 0) {
		snprintf(err, errlen, "TLS: %s", g.gnutls_strerror(rc));
		tls_free(t);
		return NULL;
	}
	/* The certificate must be trusted and name host. */
	g.gnutls_session_set_verify_cert(t->s, host, 0);
	return t;
}

struct tls *
tls_new(int fd, const char *host, char *err, size_t errlen)
{
	if (tls_client_init(err, errlen) < 0)
		return NULL;
	return client_new(cred, fd, host, err, errlen);
}

struct tls *
tls_new_cred(int fd, const char *host, const struct tls_cred *cr, char *err,
    size_t errlen)
{
	return client_new(cr->c, fd, host, err, errlen);
}

struct tls_cred *
tls_cred_new(const char *ca, const char *cert, const char *key, char *err,
    size_t errlen)
{
	struct tls_cred *cr;

	if (load(err, errlen) < 0)
		return NULL;
	if ((cr = calloc(1, sizeof(*cr))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (set_credentials(&cr->c, ca, cert, key, &own_names, err, errlen) <
	    0) {
		tls_cred_free(cr);
		return NULL;
	}
	return cr;
}

void
tls_cred_free(struct tls_cred *cr)
{
	if (cr == NULL)
		return;
	if (cr->c != NULL)
		g.gnutls_certificate_free_credentials(cr->c);
	free(cr);
}

static int
want(struct tls *t)
{
	return g.gnutls_record_get_direction(t->s) ? TLS_WANT_WRITE :
	                                             TLS_WANT_READ;
}

int
tls_handshake(struct tls *t, char *err, size_t errlen)
{
	for (;;) {
		int rc = g.gnutls_handshake(t->s);
		gnutls_datum_t why = {NULL, 0};

		if (rc == GNUTLS_E_SUCCESS)
			return 0;
		if (rc == GNUTLS_E_INTERRUPTED)
			continue;
		if (rc == GNUTLS_E_AGAIN)
			return want(t);
		if (!g.gnutls_error_is_fatal(rc))
			continue;
		if (rc == GNUTLS_E_PREMATURE_TERMINATION ||
		    rc == GNUTLS_E_PUSH_ERROR || rc == GNUTLS_E_PULL_ERROR) {
			snprintf(err, errlen, "TLS handshake failed: %s",
			    g.gnutls_strerror(rc));
			return TLS_LOST;
		}
		if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR &&
		    g.gnutls_certificate_verification_status_print(
		        g.gnutls_session_get_verify_cert_status(t->s),
		        GNUTLS_CRT_X509, &why, 0) == 0) {
			snprintf(err, errlen,
			    "the server's certificate is not trusted: %s",
			    (const char *)why.data);
			(*g.free)(why.data);
		} else {
			snprintf(err, errlen, "TLS handshake failed: %s",
			    g.gnutls_strerror(rc));
		}
		return -1;
	}
}

ssize_t
tls_send(struct tls *t, const void *p, size_t n)
{
	for (;;) {
		ssize_t w = g.gnutls_record_send(t->s, p, n);

		if (w >= 0)
			return w;
		if (w == GNUTLS_E_INTERRUPTED)
			continue;
		if (w == GNUTLS_E_AGAIN)
			return want(t);
		errno = EPIPE;
		return -1;
	}
}

ssize_t
tls_recv(struct tls *t, void *p, size_t n)
{
	for (;;) {
		ssize_t r = g.gnutls_record_recv(t->s, p, n);

		if (r >= 0)
			return r;
		if (r == GNUTLS_E_INTERRUPTED)
			continue;
		if (r == GNUTLS_E_AGAIN)
			return want(t);
		/*
		 * A peer that closes without a close_notify ends the stream
		 * as far as HTTP is concerned: the reply's framing says
		 * whether anything was lost.
		 */
		if (r == GNUTLS_E_PREMATURE_TERMINATION)
			return 0;
		errno = ECONNRESET;
		return -1;
	}
}

void
tls_free(struct tls *t)
{
	if (t == NULL)
		return;
	g.gnutls_deinit(t->s);
	free(t);
}

size_t
tls_pending(struct tls *t)
{
	return g.gnutls_record_check_pending(t->s);
}

struct tls_server {
	gnutls_certificate_credentials_t cred;
};

struct tls_server *
tls_server_new(const char *cert, const char *key, char *err, size_t errlen)
{
	struct tls_server *srv;
	int rc;

	if (load(err, errlen) < 0)
		return NULL;
	if ((srv = calloc(1, sizeof(*srv))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if ((rc = g.gnutls_certificate_allocate_credentials(&srv->cred)) < 0) {
		snprintf(err, errlen, "TLS: %s", g.gnutls_strerror(rc));
		free(srv);
		return NULL;
	}
	if ((rc = g.gnutls_certificate_set_x509_key_file(srv->cred, cert, key,
	         GNUTLS_X509_FMT_PEM)) < 0) {
		snprintf(err, errlen, "--tls-cert %s, --tls-key %s: %s", cert,
		    key, g.gnutls_strerror(rc));
		tls_server_free(srv);
		return NULL;
	}
	return srv;
}

void
tls_server_free(struct tls_server *srv)
{
	if (srv == NULL)
		return;
	g.gnutls_certificate_free_credentials(srv->cred);
	free(srv);
}

struct tls *
tls_accept(struct tls_server *srv, int fd, char *err, size_t errlen)
{
	return session_new(GNUTLS_SERVER, srv->cred, fd, err, errlen);
}
