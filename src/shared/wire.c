/* SPDX-License-Identifier: MIT */
/* The wire vocabulary of nbrun serve, shared by the server and its clients:
 * ids, names, URL paths, base64, where the state lives. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <b64/cdecode.h>
#include <b64/cencode.h>

#include "buf.h"
#include "text.h"
#include "wire.h"

bool wire_run_id_valid(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)id[i]) || isupper((unsigned char)id[i]))
			return false;
	return true;
}

bool wire_name_controls(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f ||
		    ((unsigned char)p[i] == 0xc2 && i + 1 < n && (unsigned char)p[i + 1] >= 0x80 &&
		     (unsigned char)p[i + 1] <= 0x9f))
			return true;
	return false;
}

bool wire_name_safe(const char *name, size_t len)
{
	if (len == 0 || len > 255 || (len == 1 && name[0] == '.') ||
	    (len == 2 && name[0] == '.' && name[1] == '.'))
		return false;
	if (memchr(name, '/', len) || memchr(name, '\\', len) || wire_name_controls(name, len))
		return false;
	return text_utf8_valid(name, len);
}

int wire_random_hex(char *out, size_t n)
{
	unsigned char raw[64];
	ssize_t got;

	if (n > sizeof(raw))
		return -EINVAL;
	got = getrandom(raw, n, 0);
	if (got < 0)
		return -errno;
	if ((size_t)got != n)
		return -EIO;
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	out[2 * n] = '\0';
	return 0;
}

char *wire_url_path(const char *path)
{
	static const char hex[] = "0123456789ABCDEF";
	struct buf b = BUF_INIT(4 * 4096);

	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		char esc[3] = { '%', hex[*p >> 4], hex[*p & 15] };
		int rc = isalnum(*p) || strchr("/-._~", *p) ? buf_append(&b, p, 1)
							    : buf_append(&b, esc, 3);
		if (rc < 0) {
			buf_free(&b);
			return NULL;
		}
	}
	return buf_steal(&b);
}

char *wire_base64(const unsigned char *p, size_t n)
{
	base64_encodestate st;
	char *out, *w;
	size_t len;

	if (n > (256u << 20))
		return NULL;
	out = malloc(n / 3 * 4 + n / 54 + 16);
	if (!out)
		return NULL;
	base64_init_encodestate(&st);
	len = (size_t)base64_encode_block((const char *)p, (int)n, out, &st);
	len += (size_t)base64_encode_blockend(out + len, &st);
	/* libb64 breaks lines every 72 characters: JSON wants one string. */
	w = out;
	for (size_t i = 0; i < len; i++)
		if (out[i] != '\n')
			*w++ = out[i];
	*w = '\0';
	return out;
}

/* Standard alphabet, padded, nothing else; libb64 would skip what it does not know. */
bool wire_base64_valid(const char *s, size_t len)
{
	size_t pad = 0;

	if (len % 4)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '=') {
			pad++;
			continue;
		}
		if (pad || !(isalnum(c) || c == '+' || c == '/'))
			return false;
	}
	return pad <= 2;
}

char *wire_base64_decode(const char *s, size_t len, size_t *n)
{
	base64_decodestate st;
	char *out;

	*n = 0;
	if (len > INT_MAX)
		return NULL;
	/* libb64 writes at most 3 bytes per 4 characters, and one partial byte. */
	out = malloc(len / 4 * 3 + 4);
	if (!out)
		return NULL;
	base64_init_decodestate(&st);
	*n = (size_t)base64_decode_block(s, (int)len, out, &st);
	out[*n] = '\0';
	return out;
}

bool wire_session_id_valid(const char *id)
{
	const char *tilde = strchr(id, '~');

	return tilde && wire_node_valid(id, (size_t)(tilde - id)) && wire_run_id_valid(tilde + 1) &&
	       strlen(tilde + 1) < 16;
}

bool wire_node_valid(const char *name, size_t len)
{
	if (len == 0 || len > WIRE_NODE_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

char *wire_default_state_dir(void)
{
	const char *e = getenv("NBRUN_STATE_DIR");
	char *dir = NULL;

	if (e && *e)
		return strdup(e);
	if (geteuid() == 0)
		return strdup("/var/lib/nbrun");
	e = getenv("XDG_STATE_HOME");
	if (e && *e == '/') {
		if (asprintf(&dir, "%s/nbrun", e) < 0)
			dir = NULL;
		return dir;
	}
	e = getenv("HOME");
	if (!e || !*e)
		return NULL;
	if (asprintf(&dir, "%s/.local/state/nbrun", e) < 0)
		dir = NULL;
	return dir;
}
