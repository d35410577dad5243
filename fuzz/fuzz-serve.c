/* SPDX-License-Identifier: MIT */
/* The server state shared by fuzz-http and fuzz-mcp (fuzz-serve.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz-serve.h"
#include "mcp.h"

static volatile sig_atomic_t fuzz_stopping;
/* The server, with nbrun serve's defaults (serve_new) and a state of its own. */
static struct serve *fuzz_s;

void fuzz_check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz invariant broken: %s\n", what);
		abort();
	}
}

static int fuzz_put(int dirfd, const char *name, const char *text)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t n = strlen(text);
	int rc;

	if (fd < 0)
		return -1;
	rc = write(fd, text, n) == (ssize_t)n ? 0 : -1;
	close(fd);
	return rc;
}

/* A finished run as serve_run keeps it: result.json, the notebook, an image and files. */
static int fuzz_fixture(int runs_fd)
{
	static const char result[] =
		"{\"run_id\": \"" FUZZ_FIXTURE_RUN "\", \"status\": \"ok\", \"language\": \"python\","
		" \"duration_ms\": 12, \"notebook\": \"notebook.ipynb\","
		" \"cells\": [{\"index\": 0, \"status\": \"ok\", \"execution_count\": 1,"
		" \"outputs\": [{\"type\": \"stream\", \"name\": \"stdout\", \"text\": \"hi\\n\"},"
		" {\"type\": \"display_data\", \"images\": [\"images/cell1-1.png\"]}]}],"
		" \"stdout\": \"hi\\n\", \"stderr\": \"\", \"error\": null,"
		" \"images\": [{\"path\": \"images/cell1-1.png\", \"mime\": \"image/png\", \"bytes\": 8},"
		" {\"path\": \"images/../../x.png\", \"mime\": \"image/png\", \"bytes\": 1}],"
		" \"files\": [{\"path\": \"files/out.csv\", \"bytes\": 6},"
		" {\"path\": \"files/sub dir/r\\u00e9sum\\u00e9.txt\", \"bytes\": 3},"
		" {\"path\": \"files/missing.bin\", \"bytes\": 99}]}";
	static const char notebook[] =
		"{\"nbformat\": 4, \"nbformat_minor\": 5, \"metadata\": {}, \"cells\": [{\"id\": \"a1\","
		" \"cell_type\": \"code\", \"source\": \"print('hi')\", \"metadata\": {},"
		" \"execution_count\": 1, \"outputs\": [{\"output_type\": \"stream\", \"name\": \"stdout\","
		" \"text\": \"hi\\n\"}]}]}";
	int fd = -1, sub = -1, rc = -1;

	if (mkdirat(runs_fd, FUZZ_FIXTURE_RUN, 0700) < 0 ||
	    (fd = openat(runs_fd, FUZZ_FIXTURE_RUN, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    fuzz_put(fd, "result.json", result) < 0 || fuzz_put(fd, "notebook.ipynb", notebook) < 0 ||
	    mkdirat(fd, "images", 0700) < 0 || mkdirat(fd, "files", 0700) < 0 ||
	    (sub = openat(fd, "images", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    fuzz_put(sub, "cell1-1.png", "\x89PNG\r\n\x1a\n") < 0)
		goto out;
	close(sub);
	if ((sub = openat(fd, "files", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    fuzz_put(sub, "out.csv", "a,b\n1\n") < 0 || mkdirat(sub, "sub dir", 0700) < 0 ||
	    symlinkat("/etc/passwd", sub, "passwd") < 0 || symlinkat("..", sub, "up") < 0)
		goto out;
	close(sub);
	if ((sub = openat(fd, "files/sub dir", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    fuzz_put(sub, "r\xc3\xa9sum\xc3\xa9.txt", "ok\n") < 0)
		goto out;
	rc = 0;
out:
	if (sub >= 0)
		close(sub);
	if (fd >= 0)
		close(fd);
	return rc;
}

static void fuzz_serve_exit(void)
{
	if (!fuzz_s)
		return;
	fuzz_stopping = 1;
	mcp_server_free(fuzz_s->mcp);
	serve_free(fuzz_s); /* its temporary state directory with it */
	fuzz_s = NULL;
}

struct serve *fuzz_serve(void)
{
	struct serve *s;

	if (fuzz_s)
		return fuzz_s;
	/* Never the machine's engine: every engine call fails as with dockerd down. */
	setenv("DOCKER_HOST", "unix:///nonexistent/nbrun-fuzz-no-engine.sock", 1);
	s = serve_new(&fuzz_stopping);
	if (!s)
		goto fail;
	s->max_runs = 4;
	s->max_sessions = 4;
	/* Wrong tokens never rate-limited, so that an input is answered the same
	 * whatever ran before it. */
	s->auth_failures = UINT_MAX;
	snprintf(s->token, sizeof(s->token), "fuzz-token-0123456789abcdef");
	if (mcp_open_state(s, NULL) < 0 || fuzz_fixture(s->runs_fd) < 0 ||
	    serve_sessions_start(s) < 0 || !(s->mcp = mcp_server_new(s)))
		goto fail;
	fuzz_s = s;
	atexit(fuzz_serve_exit);
	return s;
fail:
	fprintf(stderr, "fuzz: cannot set up the server state: %s\n", strerror(errno));
	serve_free(s);
	return NULL;
}

/* Empty a directory below dirfd, keeping the entry named keep (NULL: none). */
static void fuzz_empty(int dirfd, const char *keep)
{
	DIR *d;
	struct dirent *e;
	int fd = dup(dirfd);

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && (!keep || strcmp(e->d_name, keep)))
			serve_rm_tree(dirfd, e->d_name);
	closedir(d);
}

void fuzz_serve_clean(struct serve *s)
{
	int fd = open(s->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int tmp;

	fuzz_empty(s->runs_fd, FUZZ_FIXTURE_RUN);
	if (fd < 0)
		return;
	tmp = openat(fd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (tmp >= 0) {
		fuzz_empty(tmp, NULL);
		close(tmp);
	}
	close(fd);
}
