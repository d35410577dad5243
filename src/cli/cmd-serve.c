/* SPDX-License-Identifier: MIT */
/* nbrun serve: its options and help, then the server (src/serve) started, run and stopped. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "path.h"
#include "cli.h"
#include "mcp.h"
#include "serve.h"

static volatile sig_atomic_t serve_stopping;

static void serve_on_signal(int sig)
{
	serve_stopping = 1;
}

static void serve_help(void)
{
	printf("Usage: nbrun serve [OPTIONS]\n"
	       "\n"
	       "Answer an HTTP API that runs code like 'nbrun run', each run in its own fresh\n"
	       "locked-down container, until SIGTERM or SIGINT (which cancel running runs,\n"
	       "remove their containers and exit 0).\n"
	       "\n"
	       "  POST /v1/runs                 {\"code\": ...} or {\"notebook\": {...}, \"parameters\": {...}},\n"
	       "                                \"files\": [{\"path\", \"content_base64\"}], \"env\": {}, \"timeout\": \"60s\"\n"
	       "                                -> the result document, images and files with a url and,\n"
	       "                                when small, content_base64\n"
	       "  GET  /v1/runs/ID[/notebook|/images/NAME|/files/PATH]   a kept run's outputs\n"
	       "  GET  /v1/health               no token needed, no secrets\n"
	       "  GET  /metrics                 Prometheus text\n"
	       "  POST /mcp                     the MCP server of 'nbrun mcp' (Streamable HTTP)\n"
	       "  POST /v1/sessions             {\"timeout_idle\": \"10m\", \"env\": {}, \"files\": [...]} -> {\"id\"}\n"
	       "  POST /v1/sessions/ID/execute  {\"code\", \"timeout\"}: state kept between executes\n"
	       "  PUT|GET /v1/sessions/ID/files/PATH, GET .../files, GET .../notebook,\n"
	       "  POST .../interrupt, POST .../restart, DELETE /v1/sessions/ID, GET /v1/sessions\n"
	       "'Accept: application/x-ndjson' on runs and executes streams one JSON event a\n"
	       "line as it happens, the result document last.\n"
	       "Every request but health needs 'Authorization: Bearer TOKEN'.\n"
	       "\n"
	       "Server:\n"
	       "  --listen HOST:PORT    TCP address (default 127.0.0.1:%d; port 0 picks one)\n"
	       "  --socket PATH         a unix socket instead (mode 0660, removed on exit)\n"
	       "  --token-file FILE     the bearer token (first line; each further line is another\n"
	       "                        tenant's token: a session is seen only by the token\n"
	       "                        that opened it); without it a random token\n"
	       "                        is written to STATE/token (0600), and only loopback\n"
	       "                        addresses and unix sockets are allowed\n"
	       "  --state-dir DIR       runs and token (default $NBRUN_STATE_DIR, /var/lib/nbrun as\n"
	       "                        root, else $XDG_STATE_HOME/nbrun or ~/.local/state/nbrun)\n"
	       "  --max-runs N          runs executing at once; more get 503 (default 2 x cores)\n"
	       "  --keep N              finished runs kept under STATE/runs (default %d)\n"
	       "  --retention DURATION  how long a finished run is kept (default 1h)\n"
	       "  --pool N              warm Python sandboxes kept started, kernel up and numpy,\n"
	       "                        pandas and matplotlib imported; each serves one run and\n"
	       "                        is then destroyed. A run with other limits or an env is\n"
	       "                        cold. 0: every run cold (default 2)\n"
	       "  --pool LANG=N         also N warm sandboxes of another language (its kernel up;\n"
	       "                        repeatable, e.g. --pool r=1 --pool bash=1); at most 64 in\n"
	       "                        all\n"
	       "  --max-sessions N      sessions open at once; more get 503 (default %d)\n"
	       "  --session-idle DUR    a session unused this long is closed (default 10m)\n"
	       "  --session-lifetime DUR  the most a session lives (default 1h)\n"
	       "  --conn-timeout DUR    a connection that sends or reads nothing this long is\n"
	       "                        closed (slow or stalled clients; default %ds)\n"
	       "  --max-connections N   connections at once, more are refused (default %d)\n"
	       "  --max-connections-per-ip N  connections at once from one client address\n"
	       "                        (default %d)\n"
	       "  --auth-failures N     wrong or missing tokens from one client address (an IPv6\n"
	       "                        /64; on a unix socket, one user id) in a minute before\n"
	       "                        it gets 429 with Retry-After until the minute ends, even\n"
	       "                        with the right token (default %d)\n"
	       "  --allow-origin ORIGIN a browser page of this origin (scheme://host[:port]) may\n"
	       "                        call /mcp (repeatable); a request with another Origin\n"
	       "                        gets 403, one with none is served\n"
	       "Cluster (a session lives on one node; its id names the node, NODE~ID, and a\n"
	       "call for another node's session is forwarded to that node):\n"
	       "  --node NAME           this server's node name (default: the host name;\n"
	       "                        1 to 63 of A-Z a-z 0-9 . _ -; without peers a host\n"
	       "                        name that is not one is cut to its first label)\n"
	       "  --peer NAME=URL       another node, URL http://HOST:PORT (repeatable)\n"
	       "  --peers-dns HOST:PORT every address HOST resolves to is a node, named by its\n"
	       "                        GET /v1/health (Swarm: tasks.SERVICE:PORT)\n"
	       "                        Calls go only to these nodes; an id naming another is\n"
	       "                        404. A node that does not answer: 502, kind node_gone;\n"
	       "                        one whose reply broke off: 502, kind forward\n"
	       "  -h, --help            this text\n"
	       "Run defaults and limits (a request may lower the timeout, not raise it; -e\n"
	       "variables go to every run, a request's env wins on the same name; --allow-net\n"
	       "is the ceiling of a request's \"allow_net\", and a request without it has no\n"
	       "network):\n"
	       "%s"
	       "\n"
	       "Limits: request body 64 MiB (413 beyond); request line and headers 32 KiB (431);\n"
	       "images and files inlined as base64 when each is at most 1 MiB and all inlined at\n"
	       "most 8 MiB (always reachable by url).\n"
	       "\n"
	       "Exit codes: 0 stopped by a signal, 2 usage, 4 no engine (one line says why),\n"
	       "5 cannot listen or write the state.\n",
	       WIRE_DEFAULT_PORT, SERVE_DEFAULT_KEEP, SERVE_DEFAULT_MAX_SESSIONS, SERVE_CONN_TIMEOUT_S,
	       SERVE_CONN_LIMIT, SERVE_CONN_PER_IP, SERVE_AUTH_FAILURES, cli_run_options_help);
}

int cmd_serve(int argc, char **argv)
{
	enum {
		OPT_LISTEN = CLI_OPT_FIRST_LOCAL, OPT_SOCKET, OPT_TOKEN_FILE, OPT_POOL, OPT_STATE_DIR,
		OPT_MAX_RUNS, OPT_KEEP, OPT_RETENTION, OPT_MAX_SESSIONS, OPT_SESSION_IDLE,
		OPT_SESSION_LIFE, OPT_CONN_TIMEOUT, OPT_MAX_CONNS, OPT_MAX_CONNS_IP, OPT_AUTH_FAILURES,
	};
	/* The cluster's options. */
	enum { OPT_NODE = CLI_OPT_FIRST_LOCAL + 64, OPT_PEER, OPT_PEERS_DNS, OPT_ALLOW_ORIGIN };
	static const struct option longopts[] = {
		{ "node", required_argument, NULL, OPT_NODE },
		{ "peer", required_argument, NULL, OPT_PEER },
		{ "peers-dns", required_argument, NULL, OPT_PEERS_DNS },
		{ "allow-origin", required_argument, NULL, OPT_ALLOW_ORIGIN },
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
		{ "pool", required_argument, NULL, OPT_POOL },
		{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
		{ "max-runs", required_argument, NULL, OPT_MAX_RUNS },
		{ "keep", required_argument, NULL, OPT_KEEP },
		{ "retention", required_argument, NULL, OPT_RETENTION },
		{ "max-sessions", required_argument, NULL, OPT_MAX_SESSIONS },
		{ "session-idle", required_argument, NULL, OPT_SESSION_IDLE },
		{ "session-lifetime", required_argument, NULL, OPT_SESSION_LIFE },
		{ "conn-timeout", required_argument, NULL, OPT_CONN_TIMEOUT },
		{ "max-connections", required_argument, NULL, OPT_MAX_CONNS },
		{ "max-connections-per-ip", required_argument, NULL, OPT_MAX_CONNS_IP },
		{ "auth-failures", required_argument, NULL, OPT_AUTH_FAILURES },
		{ "help", no_argument, NULL, 'h' },
		CLI_RUN_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct cli_run_args args;
	struct serve *s;
	struct serve_pool_args pool_args;
	const char *listen_spec = NULL, *sock_path = NULL, *token_file = NULL;
	const char *node = NULL;
	char *state_dir = NULL, default_listen[32];
	struct sigaction sa;
	int64_t n;
	int c, rc, fd = -1, ret = CLI_EXIT_USAGE;
	bool socket_made = false;

	serve_pool_args_init(&pool_args, 2);
	if (cli_run_args_init(&args, argc) < 0) {
		cli_error("out of memory");
		return CLI_EXIT_FAILED;
	}
	if (!(s = serve_new(&serve_stopping))) {
		cli_error("out of memory");
		cli_run_args_free(&args);
		return CLI_EXIT_FAILED;
	}
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "f:e:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_LISTEN: listen_spec = optarg; break;
		case OPT_SOCKET: sock_path = optarg; break;
		case OPT_TOKEN_FILE: token_file = optarg; break;
		case OPT_STATE_DIR:
			free(state_dir);
			state_dir = strdup(optarg);
			break;
		case OPT_POOL:
			if (serve_pool_arg(&pool_args, optarg, "serve") < 0)
				goto out;
			break;
		case OPT_MAX_RUNS:
			if (units_parse_count(&n, optarg) < 0 || n > 4096) {
				cli_usage_error("serve", "--max-runs: '%s' is not a whole number from 1 to 4096", optarg);
				goto out;
			}
			s->max_runs = (unsigned int)n;
			break;
		case OPT_KEEP:
			if (units_parse_count(&n, optarg) < 0 || n > 1000000) {
				cli_usage_error("serve", "--keep: '%s' is not a whole number from 1 to 1000000", optarg);
				goto out;
			}
			s->keep_runs = (unsigned int)n;
			break;
		case OPT_RETENTION:
			if (units_parse_duration(&s->retention_ms, optarg) < 0) {
				cli_usage_error("serve", "--retention: '%s' is not a positive duration", optarg);
				goto out;
			}
			break;
		case OPT_MAX_SESSIONS:
			if (!strcmp(optarg, "0"))
				n = 0;
			else if (units_parse_count(&n, optarg) < 0 || n > 4096) {
				cli_usage_error("serve", "--max-sessions: '%s' is not a whole number from 0 to 4096", optarg);
				goto out;
			}
			s->max_sessions = (unsigned int)n;
			break;
		case OPT_SESSION_IDLE:
		case OPT_SESSION_LIFE:
			if (units_parse_duration(c == OPT_SESSION_IDLE ? &s->session_idle_ms : &s->session_life_ms,
					       optarg) < 0) {
				cli_usage_error("serve", "--%s: '%s' is not a positive duration",
						c == OPT_SESSION_IDLE ? "session-idle" : "session-lifetime", optarg);
				goto out;
			}
			break;
		case OPT_CONN_TIMEOUT: {
			uint64_t ms;
			if (units_parse_duration(&ms, optarg) < 0 || ms < 1000 || ms > 24 * 3600 * 1000ULL) {
				cli_usage_error("serve", "--conn-timeout: '%s' is not a duration from 1s to 24h",
						optarg);
				goto out;
			}
			s->conn_timeout_s = (unsigned int)(ms / 1000);
			break;
		}
		case OPT_MAX_CONNS:
		case OPT_MAX_CONNS_IP:
		case OPT_AUTH_FAILURES:
			if (units_parse_count(&n, optarg) < 0 || n > 65536) {
				cli_usage_error("serve", "--%s: '%s' is not a whole number from 1 to 65536",
						c == OPT_MAX_CONNS ? "max-connections"
						: c == OPT_MAX_CONNS_IP ? "max-connections-per-ip"
									: "auth-failures",
						optarg);
				goto out;
			}
			if (c == OPT_MAX_CONNS)
				s->max_conns = (unsigned int)n;
			else if (c == OPT_MAX_CONNS_IP)
				s->max_conns_per_ip = (unsigned int)n;
			else
				s->auth_failures = (unsigned int)n;
			break;
		case OPT_NODE:
			node = optarg;
			break;
		case OPT_PEER:
			if (serve_peer_add(s, optarg) < 0)
				goto out;
			break;
		case OPT_ALLOW_ORIGIN:
			if (serve_allow_origin(s, optarg, "serve") < 0)
				goto out;
			break;
		case OPT_PEERS_DNS:
			if (serve_peers_dns(s, optarg) < 0)
				goto out;
			break;
		case 'h':
			serve_help();
			ret = CLI_EXIT_OK;
			goto out;
		case 'f':
			cli_usage_error("serve", "-f makes no sense for serve: each request sends its own files");
			goto out;
		default:
			rc = c == '?' ? 1 : cli_run_option(&args, c, optarg, "serve");
			if (rc == 1)
				cli_bad_option("serve", argv);
			if (rc)
				goto out;
		}
	}
	if (optind < argc) {
		cli_usage_error("serve", "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	if (listen_spec && sock_path) {
		cli_usage_error("serve", "give --listen or --socket, not both");
		goto out;
	}
	if (cli_run_args_finish(&args, "serve"))
		goto out;
	if (serve_node_init(s, node) < 0)
		goto out;
	if (s->session_idle_ms > s->session_life_ms)
		s->session_idle_ms = s->session_life_ms;
	/* --allow-net is the ceiling of what requests may allow, not a run's own. */
	if (serve_run_options(s, &args.opts, "serve") < 0)
		goto out;
	if (token_file && serve_read_token(s, token_file) < 0)
		goto out;
	if (serve_check_engine() < 0) {
		ret = CLI_EXIT_ENGINE;
		goto out;
	}
	/* The image's languages, which requests and --pool may name. */
	if (serve_languages_init(s, "serve") < 0) {
		cli_error("out of memory");
		ret = CLI_EXIT_FAILED;
		goto out;
	}
	if (serve_pool_check(&pool_args, s, "serve") < 0)
		goto out;
	/* Usage first (nothing made), then the state directory. */
	if (sock_path) {
		fd = serve_listen_unix(sock_path);
		socket_made = fd >= 0;
	} else {
		snprintf(default_listen, sizeof(default_listen), "127.0.0.1:%d", WIRE_DEFAULT_PORT);
		fd = serve_listen_tcp(listen_spec ? listen_spec : default_listen, token_file != NULL);
	}
	if (fd < 0) {
		ret = fd == -2 ? CLI_EXIT_USAGE : CLI_EXIT_FAILED;
		goto out;
	}
	ret = CLI_EXIT_FAILED;
	if (!state_dir && !(state_dir = wire_default_state_dir())) {
		cli_error("no state directory: set --state-dir, NBRUN_STATE_DIR or HOME");
		goto out;
	}
	if (serve_open_state(s, state_dir) < 0 || (!token_file && serve_make_token(s) < 0))
		goto out;
	serve_janitor(s, true);
	if (s->pool_size && serve_start_pool(s, &pool_args) < 0) {
		ret = CLI_EXIT_ENGINE;
		goto out;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = serve_on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);

	rc = serve_http_main(s, fd, socket_made ? sock_path : NULL);
	fd = -1;
	socket_made = false;
	if (rc == SERVE_STUCK) {
		fflush(stderr);
		_exit(CLI_EXIT_FAILED);
	}
	ret = rc < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
out:
	if (fd >= 0)
		close(fd);
	if (socket_made)
		unlink(sock_path);
	serve_peers_free(s);
	serve_free(s);
	free(state_dir);
	cli_run_args_free(&args);
	return ret;
}
