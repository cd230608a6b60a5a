#include <string.h>

#include "text.h"

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int
text_base64_encode(struct buf *out, const void *p, size_t n)
{
	const unsigned char *s = p;
	char *d;
	size_t i;

	if (buf_reserve(out, (n + 2) / 3 * 4) < 0)
		return -1;
	d = out->data + out->len;
	for (i = 0; i + 2 < n; i += 3) {
		*d++ = b64[s[i] >> 2];
		*d++ = b64[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
		*d++ = b64[((s[i + 1] & 15) << 2) | (s[i + 2] >> 6)];
		*d++ = b64[s[i + 2] & 63];
	}
	if (i < n) {
		*d++ = b64[s[i] >> 2];
		if (i + 1 < n) {
			*d++ = b64[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
			*d++ = b64[(s[i + 1] & 15) << 2];
		} else {
			*d++ = b64[(s[i] & 3) << 4];
			*d++ = '=';
		}
		*d++ = '=';
	}
	out->len = (size_t)(d - out->data);
	out->data[out->len] = '\0';
	return 0;
}

json_t *
text_base64_json(const void *p, size_t n)
{
	struct buf b = {0};
	json_t *s;

	if (text_base64_encode(&b, p, n) < 0)
		return NULL;
	s = json_stringn(b.data != NULL ? b.data : "", b.len);
	buf_free(&b);
	return s;
}

static int
b64val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

int
text_base64_decode(struct buf *out, const char *s, size_t n)
{
	unsigned acc = 0;
	int bits = 0;
	size_t i, pad = 0;

	if (buf_reserve(out, n / 4 * 3 + 3) < 0)
		return -1;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		int v;

		if (c == '=') {
			pad++;
			continue;
		}
		if (pad > 0 || (v = b64val(c)) < 0)
			return -1;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out->data[out->len++] = (char)((acc >> bits) & 0xff);
		}
	}
	if (pad > 2 || bits >= 6)
		return -1;
	out->data[out->len] = '\0';
	return 0;
}

int
text_url_encode(struct buf *out, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || strchr("-._~/", c) != NULL) {
			if (c == '\0' || buf_append(out, &s[i], 1) < 0)
				return -1;
		} else {
			char e[3] = {'%', hex[c >> 4], hex[c & 15]};
			if (buf_append(out, e, 3) < 0)
				return -1;
		}
	}
	return 0;
}

static int
hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int
text_url_decode(struct buf *out, const char *s, size_t n, int form)
{
	if (buf_reserve(out, n) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '%') {
			int hi, lo;
			if (i + 2 >= n)
				return -1;
			hi = hexval((unsigned char)s[i + 1]);
			lo = hexval((unsigned char)s[i + 2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				return -1;
			c = (char)(hi * 16 + lo);
			i += 2;
		} else if (c == '+' && form) {
			c = ' ';
		}
		out->data[out->len++] = c;
	}
	out->data[out->len] = '\0';
	return 0;
}

int
text_utf8_valid(const void *p, size_t n)
{
	const unsigned char *s = p;
	size_t i = 0;

	while (i < n) {
		unsigned c = s[i];
		unsigned cp;
		size_t len;

		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			len = 2;
			cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			len = 3;
			cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			len = 4;
			cp = c & 0x07;
		} else {
			return 0;
		}
		if (i + len > n)
			return 0;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
		    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		i += len;
	}
	return 1;
}

int
text_printable(const void *p, size_t n)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return text_utf8_valid(p, n);
}

int
text_name(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') &&
		    !(ch >= '0' && ch <= '9') && strchr("_-.:", ch) == NULL)
			return 0;
	}
	return 1;
}
