/* SPDX-License-Identifier: MIT */
/* nbrun serve's life once it is configured: its doors opened, the janitor, and the stop. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "mcp.h"
#include "serve.h"

/* How long a stop waits for cancelled runs to clean up before giving up on them. */
#define SERVE_STOP_WAIT_MS 20000
#define SERVE_JANITOR_MS 10000

int serve_http_main(struct serve *s, int listen_fd, const char *sock_path)
{
	struct serve_http *http = NULL;
	uint64_t last_janitor;
	int ret = -1;

	if (serve_sessions_start(s) < 0)
		goto out;
	s->mcp = mcp_server_new(s);
	if (!s->mcp) {
		serve_err("out of memory");
		goto out;
	}
	http = serve_http_start(s, listen_fd);
	listen_fd = -1;
	if (!http)
		goto out;
	serve_info("nbrun: serve: state in %s; %u runs at once; pool of %u warm sandboxes; "
		   "languages: %s", s->state_dir, s->max_runs, s->pool_size, s->languages);
	last_janitor = clock_mono_ms();
	while (!*s->stopping) {
		struct timespec ts = { 0, 200 * 1000000L };
		nanosleep(&ts, NULL);
		if (clock_mono_ms() - last_janitor >= SERVE_JANITOR_MS) {
			serve_janitor(s, false);
			last_janitor = clock_mono_ms();
		}
	}
	serve_info("nbrun: serve: stopping: no new connections, cancelling %u running runs",
		   s->runs_active);
	serve_http_quiesce(http);
	mcp_server_cancel_all(s->mcp);
	serve_sessions_interrupt_all(s);
	if (sock_path) {
		unlink(sock_path);
		sock_path = NULL;
	}
	/*
	 * *s->stopping is every run's cancel flag: the library removes their
	 * containers. Their requests get their 503 before the connections close.
	 */
	serve_wait_idle(s, SERVE_STOP_WAIT_MS);
	if (s->runs_active) {
		/* Their threads are still in the library: nothing they use may be freed. */
		serve_err("%u runs did not stop within %d s; exiting without them (nbrun gc removes "
			  "what they leave)", s->runs_active, SERVE_STOP_WAIT_MS / 1000);
		return SERVE_STUCK;
	}
	ret = 0;
out:
	serve_http_stop(http);
	mcp_server_free(s->mcp);
	s->mcp = NULL;
	/* Every session's sandbox is removed before the server exits. */
	serve_sessions_stop(s);
	if (listen_fd >= 0)
		close(listen_fd);
	if (sock_path)
		unlink(sock_path);
	return ret;
}
