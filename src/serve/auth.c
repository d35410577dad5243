/* SPDX-License-Identifier: MIT */
/* Tokens and tenants: the token file (one token a line, each line after the
 * first a tenant) or a token made for this server. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "path.h"
#include "serve.h"

/* A token: at least 16 characters, no spaces or control characters. */
static bool serve_token_ok(const char *t, size_t n)
{
	if (n < 16 || n > WIRE_TOKEN_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] == 0x7f)
			return false;
	return true;
}

/*
 * The lines after the first token: one tenant each (blank lines and lines
 * starting with '#' skipped). rest is what was read past the first line;
 * the file goes on in f.
 */
static int serve_read_tenants(struct serve *s, FILE *f, const char *path, const char *rest)
{
	char *all = NULL, *line, *save = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&all, &len);
	char chunk[4096];
	size_t got;
	int rc = 0;

	if (!m)
		return -1;
	fputs(rest, m);
	while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0 && len < (1u << 20))
		fwrite(chunk, 1, got, m);
	fclose(m);
	for (line = strtok_r(all, "\r\n", &save); line && rc == 0; line = strtok_r(NULL, "\r\n", &save)) {
		size_t n = strlen(line);
		char **t;
		while (n && (line[n - 1] == ' ' || line[n - 1] == '\t'))
			line[--n] = '\0';
		if (!n || line[0] == '#')
			continue;
		if (!serve_token_ok(line, n) || s->n_tenant_tokens >= 1024) {
			serve_err("a tenant token in %s is shorter than 16 characters, has spaces or "
				  "control characters, or is one too many (1024)", path);
			rc = -1;
			break;
		}
		t = realloc(s->tenant_tokens, (s->n_tenant_tokens + 1) * sizeof(*t));
		if (!t || !(t[s->n_tenant_tokens] = strdup(line))) {
			if (t)
				s->tenant_tokens = t;
			rc = -1;
			break;
		}
		s->tenant_tokens = t;
		s->n_tenant_tokens++;
	}
	free(all);
	return rc;
}

int serve_read_token(struct serve *s, const char *path)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f) {
		serve_err("cannot read the token file %s: %s", path, strerror(errno));
		return -1;
	}
	n = fread(s->token, 1, WIRE_TOKEN_MAX, f);
	s->token[n] = '\0';
	if (serve_read_tenants(s, f, path, s->token + strcspn(s->token, "\r\n")) < 0) {
		fclose(f);
		return -1;
	}
	fclose(f);
	s->token[strcspn(s->token, "\r\n")] = '\0';
	n = strlen(s->token);
	while (n && (s->token[n - 1] == ' ' || s->token[n - 1] == '\t'))
		s->token[--n] = '\0';
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s->token[i] <= 0x20 || (unsigned char)s->token[i] == 0x7f) {
			serve_err("the token in %s has spaces or control characters", path);
			return -1;
		}
	if (n < 16) {
		serve_err("the token in %s is shorter than 16 characters", path);
		return -1;
	}
	return 0;
}

/* 32 random bytes as hex, written 0600 to STATE/token (temp file + rename). */
int serve_make_token(struct serve *s)
{
	char *path = NULL, line[sizeof(s->token) + 1];
	int rc = wire_random_hex(s->token, 32);

	if (rc < 0) {
		serve_err("cannot get random bytes for the token: %s", strerror(-rc));
		return -1;
	}
	if (asprintf(&path, "%s/token", s->state_dir) < 0) {
		serve_err("out of memory");
		return -1;
	}
	snprintf(line, sizeof(line), "%s\n", s->token);
	rc = fd_write_file_atomic(AT_FDCWD, path, line, strlen(line), 0600);
	if (rc < 0)
		serve_err("cannot write the token to %s: %s", path, strerror(-rc));
	else
		fprintf(stderr, "nbrun: serve: token written to %s (send 'Authorization: Bearer TOKEN')\n",
			path);
	free(path);
	return rc < 0 ? -1 : 0;
}
