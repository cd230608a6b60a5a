/*
 * text.h: the encodings bytes go through on their way between the shell and
 * coordd: base64 (values inside JSON), percent-encoding (keys inside URLs),
 * and UTF-8 validation (keys must be text).
 */
#ifndef MUSTER_TEXT_H
#define MUSTER_TEXT_H

#include <stddef.h>

#include <jansson.h>

#include "buf.h"

/* Appends the standard base64 form of p to out. */
int text_base64_encode(struct buf *out, const void *p, size_t n);

/* A JSON string holding the base64 of p; NULL on ENOMEM. */
json_t *text_base64_json(const void *p, size_t n);

/* Appends the bytes of base64 text s to out; -1 when s is not base64. */
int text_base64_decode(struct buf *out, const char *s, size_t n);

/* Appends s with every byte outside [A-Za-z0-9-._~/] percent-encoded. */
int text_url_encode(struct buf *out, const char *s, size_t n);

/*
 * Appends the percent-decoding of s (and '+' as space when form is set).
 * Returns -1 on a malformed escape or an escaped NUL byte.
 */
int text_url_decode(struct buf *out, const char *s, size_t n, int form);

/* 1 when p holds well-formed UTF-8 (no overlongs, no surrogates). */
int text_utf8_valid(const void *p, size_t n);

/* 1 when p is UTF-8 text fit to print on one line: no control bytes. */
int text_printable(const void *p, size_t n);

/*
 * 1 when s is a name as dispatchd takes them for queues, workers and
 * resources: 1 to max bytes of ASCII letters, digits and "_-.:", which a
 * URL path carries as they are.
 */
int text_name(const char *s, size_t max);

#endif
