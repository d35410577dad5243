/* SPDX-License-Identifier: MIT */
/* The sockets the HTTP door listens on: TCP (loopback unless a token guards
 * it) and unix. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <unistd.h>

#include "serve.h"

static bool serve_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

/* HOST:PORT or [V6]:PORT. Returns a listening socket, -1 (error printed) or -2 (usage). */
int serve_listen_tcp(const char *spec, bool have_token)
{
	struct addrinfo hints, *res = NULL;
	char host[256], buf[INET6_ADDRSTRLEN + 8];
	const char *port, *colon;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = -1, one = 1, rc;

	colon = strrchr(spec, ':');
	if (!colon || colon == spec || !colon[1] || (size_t)(colon - spec) >= sizeof(host)) {
		serve_usage_err("serve", "--listen wants HOST:PORT, not '%s'", spec);
		return -2;
	}
	port = colon + 1;
	if (spec[0] == '[' && colon[-1] == ']')
		snprintf(host, sizeof(host), "%.*s", (int)(colon - spec - 2), spec + 1);
	else
		snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0) {
		serve_usage_err("serve", "--listen %s: %s", spec, gai_strerror(rc));
		return -2;
	}
	if (!have_token && !serve_loopback(res->ai_addr)) {
		freeaddrinfo(res);
		serve_usage_err("serve", "refusing to listen on %s, which is not a loopback address, "
					 "without --token-file", spec);
		return -2;
	}
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 128) < 0) {
		serve_err("cannot listen on %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		const void *a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
							 : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
		unsigned int p = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
							       : ((struct sockaddr_in *)&ss)->sin_port);
		inet_ntop(ss.ss_family, a, buf, sizeof(buf));
		fprintf(stderr, ss.ss_family == AF_INET6 ? "nbrun: serve: listening on http://[%s]:%u\n"
							 : "nbrun: serve: listening on http://%s:%u\n",
			buf, p);
	}
	return fd;
}

int serve_listen_unix(const char *path)
{
	struct sockaddr_un sun;
	struct stat st;
	mode_t old;
	int fd, probe, rc;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sun.sun_path)) {
		serve_usage_err("serve", "--socket %s: path longer than %zu bytes", path,
				sizeof(sun.sun_path) - 1);
		return -2;
	}
	memcpy(sun.sun_path, path, strlen(path));
	if (lstat(path, &st) == 0) {
		/* A socket nobody listens on is what a killed server left: take it over. */
		probe = S_ISSOCK(st.st_mode) ? socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
		rc = probe >= 0 ? connect(probe, (struct sockaddr *)&sun, sizeof(sun)) : 0;
		if (probe >= 0 && rc < 0 && errno == ECONNREFUSED) {
			unlink(path);
		} else {
			serve_err("%s exists%s", path, S_ISSOCK(st.st_mode) ? " and a server answers on it" : "");
			if (probe >= 0)
				close(probe);
			return -1;
		}
		close(probe);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	old = umask(0117);
	rc = fd >= 0 ? bind(fd, (struct sockaddr *)&sun, sizeof(sun)) : -1;
	umask(old);
	if (rc < 0 || listen(fd, 128) < 0) {
		serve_err("cannot listen on %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	fprintf(stderr, "nbrun: serve: listening on unix:%s\n", path);
	return fd;
}
