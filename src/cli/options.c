/* SPDX-License-Identifier: MIT */
/* Parsing of sizes, durations and counts, and the mapping to exit codes. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "netrule.h"

int cli_open_input(const char *path, const char *cmd)
{
	struct stat st;
	const char *what = NULL;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		cli_usage_error(cmd, "cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0)
		what = strerror(errno);
	else if (S_ISDIR(st.st_mode))
		what = "a directory";
	else if (S_ISFIFO(st.st_mode))
		what = "a FIFO";
	else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
		what = "a device";
	else if (!S_ISREG(st.st_mode))
		what = "not a regular file";
	if (what) {
		close(fd);
		cli_usage_error(cmd, "%s: %s; give a regular file (or - for standard input)", path, what);
		return -1;
	}
	/* a regular file never blocks: reads go on as usual */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
}

int cli_check_source(const char *text, size_t len, const char *name, const char *cmd)
{
	const char *nul = memchr(text, '\0', len);
	size_t line = 1;

	if (!nul)
		return 0;
	for (const char *p = text; p < nul; p++)
		line += *p == '\n';
	return cli_usage_error(cmd, "%s: a NUL byte at line %zu (byte %zu); source code cannot hold one",
			       strcmp(name, "-") ? name : "standard input", line, (size_t)(nul - text));
}

const char cli_run_options_help[] =
	"Input:\n"
	"  -f, --file PATH       upload a file or directory to /mnt/data/<name> (repeatable;\n"
	"                        symlinks inside a directory are refused, not followed)\n"
	"  -e, --env KEY=VALUE   set a variable in the sandbox (repeatable; nothing else leaks in)\n"
	"Limits:\n"
	"  --timeout DURATION    wall clock for the whole run (default 60s; 500ms, 2m, 1h)\n"
	"  --cell-timeout DUR    one cell (default: the timeout less 4 s)\n"
	"  --memory SIZE         memory, no extra swap (default 1G; K, M, G suffixes)\n"
	"  --cpus N              CPUs, fractions allowed (default 1)\n"
	"  --pids N              processes and threads (default 256)\n"
	"  --disk SIZE           size of /mnt/data (default 512M)\n"
	"  --network MODE        none (default) or bridge\n"
	"  --image NAME          runtime image (default jupyter-runtime:<version>)\n"
	"  --runtime NAME        the engine's OCI runtime, e.g. runsc (gVisor, network none only);\n"
	"                        checked to be in use before any code runs (default: the engine's)\n"
	"  --max-output BYTES    text kept per stream for a model, head and tail (default 20000)\n"
	"Network (docs/network.md):\n"
	"  --allow-net HOST      let the code reach HOST through nbrun's egress proxy and nothing\n"
	"                        else (repeatable): example.org, *.example.org, an address;\n"
	"                        :PORT for one port, else 80 and 443. Loopback, private,\n"
	"                        link-local and metadata addresses stay refused unless listed\n"
	"                        as addresses. The sandbox itself still has no network\n"
	"  --net-bytes SIZE      bytes its connections may carry in all, then cut (default 256M)\n"
	"  --ca-certs FILE       PEM bundle the sandbox's clients trust instead of the image's\n"
	"Errors:\n"
	"  --allow-errors        go on after a cell raises (nbconvert --allow-errors); by default\n"
	"                        execution stops at the first cell that raises, as papermill\n"
	"                        and Jupyter's Run All do, and the later cells stay unexecuted\n";

int cli_run_args_init(struct cli_run_args *a, int argc)
{
	memset(a, 0, sizeof(*a));
	nbrun_run_options_init(&a->opts, NBRUN_RUN_OPTIONS_VERSION);
	a->files = calloc((size_t)argc + 1, sizeof(*a->files));
	a->env = calloc((size_t)argc + 1, sizeof(*a->env));
	a->allow_net = calloc((size_t)argc + 1, sizeof(*a->allow_net));
	return a->files && a->env && a->allow_net ? 0 : -1;
}

void cli_run_args_free(struct cli_run_args *a)
{
	free(a->files);
	free(a->env);
	free(a->allow_net);
}

const char *cli_server_sets(int opt)
{
	switch (opt) {
	case CLI_OPT_CELL_TIMEOUT: return "--cell-timeout";
	case CLI_OPT_MEMORY: return "--memory";
	case CLI_OPT_CPUS: return "--cpus";
	case CLI_OPT_PIDS: return "--pids";
	case CLI_OPT_DISK: return "--disk";
	case CLI_OPT_NETWORK: return "--network";
	case CLI_OPT_IMAGE: return "--image";
	case CLI_OPT_RUNTIME: return "--runtime";
	case CLI_OPT_MAX_OUTPUT: return "--max-output";
	case CLI_OPT_ALLOW_ERRORS: return "--allow-errors";
	case CLI_OPT_NET_BYTES: return "--net-bytes";
	case CLI_OPT_CA_CERTS: return "--ca-certs";
	}
	return NULL;
}

int cli_run_option(struct cli_run_args *a, int opt, const char *arg, const char *cmd)
{
	struct nbrun_run_options *o = &a->opts;
	uint64_t u;

	switch (opt) {
	case 'f':
		a->files[a->nfiles++] = arg;
		return 0;
	case 'e':
		if (!strchr(arg, '=') || arg[0] == '=')
			return cli_usage_error(cmd, "--env wants KEY=VALUE, not '%s'", arg);
		a->env[a->nenv++] = arg;
		return 0;
	case CLI_OPT_TIMEOUT:
		if (units_parse_duration(&o->timeout_ms, arg) < 0)
			return cli_usage_error(cmd, "--timeout: '%s' is not a positive duration", arg);
		return 0;
	case CLI_OPT_CELL_TIMEOUT:
		if (units_parse_duration(&o->cell_timeout_ms, arg) < 0)
			return cli_usage_error(cmd, "--cell-timeout: '%s' is not a positive duration", arg);
		return 0;
	case CLI_OPT_MEMORY:
		if (units_parse_size(&o->memory_bytes, arg) < 0)
			return cli_usage_error(cmd, "--memory: '%s' is not a positive size", arg);
		return 0;
	case CLI_OPT_DISK:
		if (units_parse_size(&o->disk_bytes, arg) < 0)
			return cli_usage_error(cmd, "--disk: '%s' is not a positive size", arg);
		return 0;
	case CLI_OPT_CPUS:
		if (units_parse_cpus(&o->nano_cpus, arg) < 0)
			return cli_usage_error(cmd, "--cpus: '%s' is not a positive number", arg);
		return 0;
	case CLI_OPT_PIDS:
		if (units_parse_count(&o->pids, arg) < 0)
			return cli_usage_error(cmd, "--pids: '%s' is not a positive whole number", arg);
		return 0;
	case CLI_OPT_NETWORK:
		if (strcmp(arg, "none") && strcmp(arg, "bridge"))
			return cli_usage_error(cmd, "--network: '%s' is not none or bridge", arg);
		o->network = arg;
		return 0;
	case CLI_OPT_IMAGE:
		o->image = arg;
		return 0;
	case CLI_OPT_RUNTIME:
		if (!*arg || strlen(arg) > 64 ||
		    strspn(arg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(arg))
			return cli_usage_error(cmd, "--runtime: '%.64s' is not a runtime name", arg);
		o->runtime = arg;
		return 0;
	case CLI_OPT_MAX_OUTPUT:
		if (units_parse_size(&u, arg) < 0)
			return cli_usage_error(cmd, "--max-output: '%s' is not a positive size", arg);
		o->limits.max_output = (size_t)u;
		return 0;
	case CLI_OPT_ALLOW_ERRORS:
		o->allow_errors = 1;
		return 0;
	case CLI_OPT_ALLOW_NET: {
		struct netrule r;
		char why[256];
		if (netrule_parse(&r, arg, why, sizeof(why)) < 0)
			return cli_usage_error(cmd, "--allow-net: %s", why);
		if (a->nallow_net >= NETRULE_MAX)
			return cli_usage_error(cmd, "--allow-net: at most %d hosts", NETRULE_MAX);
		a->allow_net[a->nallow_net++] = arg;
		return 0;
	}
	case CLI_OPT_NET_BYTES:
		if (units_parse_size(&o->net_bytes, arg) < 0)
			return cli_usage_error(cmd, "--net-bytes: '%s' is not a positive size", arg);
		return 0;
	case CLI_OPT_CA_CERTS:
		o->ca_certs = arg;
		return 0;
	}
	return 1;
}

int cli_run_args_finish(struct cli_run_args *a, const char *cmd)
{
	if (a->opts.cell_timeout_ms > a->opts.timeout_ms)
		return cli_usage_error(cmd, "--cell-timeout cannot exceed --timeout");
	if (a->opts.memory_bytes < (64ULL << 20))
		return cli_usage_error(cmd, "--memory must be at least 64M");
	if (a->opts.disk_bytes < (1ULL << 20))
		return cli_usage_error(cmd, "--disk must be at least 1M");
	if (a->opts.runtime && !strcmp(a->opts.runtime, "runsc") && strcmp(a->opts.network, "none"))
		return cli_usage_error(cmd, "--runtime runsc runs with --network none only");
	if (a->nallow_net && strcmp(a->opts.network, "none"))
		return cli_usage_error(cmd, "--allow-net takes --network none (the default): bridge is everything already");
	if ((a->opts.ca_certs || a->opts.net_bytes) && !a->nallow_net)
		return cli_usage_error(cmd, "--%s is for --allow-net: give the hosts too",
				       a->opts.ca_certs ? "ca-certs" : "net-bytes");
	/* Two -f with one base name: the second would silently replace the first. */
	for (size_t i = 0; i < a->nfiles; i++)
		for (size_t k = 0; k < i; k++) {
			const char *x = a->files[i], *y = a->files[k];
			size_t nx = strlen(x), ny = strlen(y);
			while (nx > 1 && x[nx - 1] == '/')
				nx--;
			while (ny > 1 && y[ny - 1] == '/')
				ny--;
			const char *bx = memrchr(x, '/', nx), *by = memrchr(y, '/', ny);
			bx = bx && nx > 1 ? bx + 1 : x;
			by = by && ny > 1 ? by + 1 : y;
			if (nx - (size_t)(bx - x) == ny - (size_t)(by - y) && !memcmp(bx, by, ny - (size_t)(by - y)))
				return cli_usage_error(cmd, "-f %s and -f %s would both be /mnt/data/%.*s", y, x,
						       (int)(ny - (size_t)(by - y)), by);
		}
	a->opts.files = a->files;
	a->opts.file_count = a->nfiles;
	a->opts.env = a->env;
	a->opts.env_count = a->nenv;
	a->opts.allow_net = a->allow_net;
	a->opts.allow_net_count = a->nallow_net;
	return 0;
}
