/* SPDX-License-Identifier: MIT */
/*
 * The Docker sandbox backend: a bounded tmpfs volume and a hardened
 * container (no capabilities, seccomp, no-new-privileges, read-only root,
 * no network, bounded memory, CPU, processes and files), reached through
 * the Engine API, and removed with its volumes whatever happened.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "egress.h"
#include "nbrun-private.h"
#include "text.h"

#define DSB_UID 1000
#define DSB_GID 1000
#define DSB_TMPFS_SIZE "256m"
#define DSB_CLEANUP_TIMEOUT_MS 20000L
/* How long removals the engine could not take are tried again (an engine restarting). */
#define DSB_CLEANUP_RETRY_MS 15000
/*
 * How long a removal the engine answers 409 to (the container is still being
 * started or killed) is tried again: the engine is there and busy with it.
 * Under runsc with --cpus 0.01 a start went on for a minute after nbrun had
 * given up on it, and the volume was left behind, still in use.
 */
#define DSB_CLEANUP_BUSY_MS 180000

struct dsb {
	struct nbrun__docker *docker;
	char container[64];     /* name, set once created */
	char vol_data[64];
	bool have_container, have_vol_data;
	char *runtime;          /* the OCI runtime asked for at create, checked at start */
	/* The way out of a sandbox with an allow-list (egress-docker.c). */
	struct nbrun__egress egress;
	bool egress_on;
	uint64_t net_bytes;
};

/* The backend of sb, its engine handle speaking for the thread using sb now. */
static struct dsb *dsb_of(struct nbrun__sandbox *sb)
{
	struct dsb *b = sb->backend;

	nbrun__docker_set_ctx(b->docker, sb->ctx);
	nbrun__docker_set_cancel(b->docker, sb->cancel);
	return b;
}

static int dsb_status(struct nbrun__sandbox *sb, int status, const char *what)
{
	char engine[sizeof(sb->ctx->errmsg)];

	if (status < 0)
		return status;
	if (status >= 400) {
		/* The engine's message is on the context: copy it before it is replaced. */
		snprintf(engine, sizeof(engine), "%s", nbrun_ctx_errmsg(sb->ctx));
		return nbrun__err(sb->ctx, NBRUN_EENGINE, "%s: %s", what, engine);
	}
	return 0;
}

static int dsb_open(struct nbrun__sandbox *sb)
{
	struct dsb *b = calloc(1, sizeof(*b));
	int rc;

	if (!b)
		return nbrun__err(sb->ctx, NBRUN_ENOMEM, "out of memory");
	rc = nbrun__docker_new(&b->docker, sb->ctx);
	if (rc < 0) {
		free(b);
		return rc;
	}
	snprintf(b->vol_data, sizeof(b->vol_data), "nbrun-%s-data", sb->id);
	sb->backend = b;
	return 0;
}

static void dsb_free(struct nbrun__sandbox *sb)
{
	struct dsb *b = sb->backend;

	nbrun__docker_free(b->docker);
	free(b->runtime);
	free(b);
	sb->backend = NULL;
}

static void dsb_gc(struct nbrun__sandbox *sb)
{
	struct dsb *b = dsb_of(sb);

	nbrun__gc_orphans(b->docker, sb->ctx);
}

static int dsb_resolve_image(struct nbrun__sandbox *sb, const char *want)
{
	struct dsb *b = dsb_of(sb);
	char path[512];
	int status;

	free(sb->image);
	if (want) {
		sb->image = strdup(want); /* its name was checked with the other options */
	} else if (asprintf(&sb->image, "%s:%s", NBRUN_DEFAULT_IMAGE, NBRUN_VERSION) < 0) {
		sb->image = NULL;
	}
	if (!sb->image)
		return nbrun__err(sb->ctx, NBRUN_ENOMEM, "out of memory");
	for (int attempt = 0; attempt < 2; attempt++) {
		snprintf(path, sizeof(path), "/images/%s/json", sb->image);
		status = nbrun__docker_json(b->docker, "GET", path, NULL, NULL, 0);
		if (status < 0)
			return status;
		if (status == 200)
			return 0;
		if (status != 404)
			return dsb_status(sb, status, "cannot inspect the image");
		if (want || attempt)
			break;
		free(sb->image);
		if (asprintf(&sb->image, "%s:latest", NBRUN_DEFAULT_IMAGE) < 0) {
			sb->image = NULL;
			return nbrun__err(sb->ctx, NBRUN_ENOMEM, "out of memory");
		}
	}
	return nbrun__err(sb->ctx, NBRUN_ENOIMAGE,
			  "image %s is not on the engine: build it with scripts/setup", sb->image);
}

static json_t *dsb_labels(const struct nbrun__sandbox *sb)
{
	char pid[32], created[32], host[256] = "", pidns[64];

	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	snprintf(created, sizeof(created), "%lld", (long long)time(NULL));
	gethostname(host, sizeof(host) - 1);
	nbrun__pidns(pidns, sizeof(pidns));
	return json_pack("{s:s, s:s, s:s, s:s, s:s}", NBRUN_LABEL, sb->id, "nbrun.pid", pid, "nbrun.host",
			 host, "nbrun.pidns", pidns, "nbrun.created", created);
}

static int dsb_create_volume(struct nbrun__sandbox *sb, const char *name, uint64_t bytes,
			     bool *have)
{
	struct dsb *b = sb->backend;
	char opt[128];
	json_t *body;
	int status;

	/* tmpfs volumes: bounded, in memory, gone with the volume; and unlike a
	 * plain Tmpfs mount the archive API sees them. */
	snprintf(opt, sizeof(opt), "size=%llu,uid=%d,gid=%d,mode=0755", (unsigned long long)bytes,
		 DSB_UID, DSB_GID);
	body = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:o}", "Name", name, "Driver", "local",
			 "DriverOpts", "type", "tmpfs", "device", "tmpfs", "o", opt, "Labels",
			 dsb_labels(sb));
	if (!body)
		return nbrun__err(sb->ctx, NBRUN_ENOMEM, "out of memory");
	/* Removed at the end even when the reply is lost after the engine acted. */
	*have = true;
	status = nbrun__docker_json(b->docker, "POST", "/volumes/create", body, NULL, 0);
	json_decref(body);
	if (status >= 400)
		*have = false;
	return dsb_status(sb, status, "cannot create a volume");
}

/*
 * The seccomp profile: everything a Python data stack needs is allowed, and
 * what a sandbox has no business doing is refused with EPERM, ptrace and
 * cross-process memory access included (the engine's default profile allows
 * ptrace between the container's own processes). Namespace creation is
 * refused in unshare, setns and clone; clone3 answers ENOSYS so that libc
 * falls back to clone, where the flags can be inspected. mknod and mknodat
 * may make FIFOs (export skips them) and files, not devices: without
 * CAP_MKNOD the host's kernel refuses those anyway, but gVisor's makes the
 * node (which opens nothing there, ENXIO), so the rule says so for both.
 * Under gVisor (runsc
 * --oci-seccomp) the profile is applied by gVisor's own kernel, which answers
 * EPERM for an errno rule whatever its errnoRet: the clone3 rule is left out
 * there, or no thread could start (namespaces are gVisor's own there).
 */
static char *dsb_seccomp_option(bool gvisor)
{
	static const char *const denied[] = {
		"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
		"mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
		"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
		"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
		"init_module", "finit_module", "delete_module", "create_module", "kexec_load",
		"kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl",
		"name_to_handle_at", "open_by_handle_at", "lookup_dcookie", "settimeofday",
		"clock_settime", "clock_adjtime", "adjtimex", "stime", "iopl", "ioperm", "uselib",
		"sysfs", "_sysctl", "ustat", "nfsservctl", "vm86", "vm86old", "personality",
		"syslog", "vhangup", "get_kernel_syms", "query_module",
	};
	/* S_IFCHR, S_IFBLK: mode & S_IFMT (0170000), mknod's argument 1, mknodat's 2 */
	static const json_int_t dev_types[] = { 0020000, 0060000 };
	/* CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET */
	static const json_int_t ns_flags[] = { 0x00020000, 0x02000000, 0x04000000, 0x08000000,
					       0x10000000, 0x20000000, 0x40000000 };
	json_t *names = json_array(), *rules, *profile;
	char *text, *opt = NULL;

	for (size_t i = 0; names && i < sizeof(denied) / sizeof(denied[0]); i++)
		json_array_append_new(names, json_string(denied[i]));
	rules = json_pack("[{s:o, s:s, s:i}]", "names", names, "action", "SCMP_ACT_ERRNO", "errnoRet", 1);
	if (rules && !gvisor)
		json_array_append_new(rules, json_pack("{s:[s], s:s, s:i}", "names", "clone3", "action",
						       "SCMP_ACT_ERRNO", "errnoRet", 38));
	for (size_t i = 0; rules && i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++)
		json_array_append_new(rules, json_pack("{s:[s], s:s, s:i, s:[{s:i, s:I, s:I, s:s}]}",
						       "names", "clone", "action", "SCMP_ACT_ERRNO",
						       "errnoRet", 1, "args", "index", 0, "value",
						       ns_flags[i], "valueTwo", ns_flags[i], "op",
						       "SCMP_CMP_MASKED_EQ"));
	for (size_t i = 0; rules && i < 2 * sizeof(dev_types) / sizeof(dev_types[0]); i++)
		json_array_append_new(rules, json_pack("{s:[s], s:s, s:i, s:[{s:i, s:I, s:I, s:s}]}",
						       "names", i % 2 ? "mknodat" : "mknod", "action",
						       "SCMP_ACT_ERRNO", "errnoRet", 1, "args", "index",
						       i % 2 ? 2 : 1, "value", (json_int_t)0170000, "valueTwo",
						       dev_types[i / 2], "op", "SCMP_CMP_MASKED_EQ"));
	profile = rules ? json_pack("{s:s, s:o}", "defaultAction", "SCMP_ACT_ALLOW", "syscalls", rules)
			: NULL;
	text = profile ? json_dumps(profile, JSON_COMPACT) : NULL;
	if (text && asprintf(&opt, "seccomp=%s", text) < 0)
		opt = NULL;
	free(text);
	json_decref(profile);
	return opt;
}

/*
 * Under gVisor the engine's pids limit counts the host threads of gVisor's
 * kernel (the Sentry, its ptrace stubs, its Go runtime: 60-100 at start and
 * 4-5 for each task of the sandbox), not the sandbox's own tasks: at
 * --pids 64 no kernel could even start, and a fork bomb that reached it took
 * the whole sandbox down without a result. There --pids is RLIMIT_NPROC,
 * which gVisor's kernel applies to its own tasks of a uid (fork and clone
 * fail with EAGAIN, as under the cgroup), and the host's limit is a backstop
 * sized for the Sentry at that many tasks.
 */
#define DSB_GVISOR_HOST_TASKS(pids) (((pids) + 64) * 8)

static int dsb_gvisor_pids(json_t *spec, int64_t pids)
{
	json_t *host = json_object_get(spec, "HostConfig");
	json_t *ulimits = json_object_get(host, "Ulimits");

	if (pids > INT64_MAX / 8 - 64)
		pids = INT64_MAX / 8 - 64;
	if (json_object_set_new(host, "PidsLimit", json_integer(DSB_GVISOR_HOST_TASKS(pids))) < 0 ||
	    json_array_append_new(ulimits, json_pack("{s:s, s:I, s:I}", "Name", "nproc", "Soft",
						     (json_int_t)pids, "Hard", (json_int_t)pids)) < 0)
		return -1;
	return 0;
}

/*
 * The agent and the engine's init run as uid 0 with no capability but those
 * needed to start the kernel as uid 1000 (which then has none, an empty
 * bounding set and no_new_privs): a uid 1000 process cannot open, signal or
 * trace them, so the user's code can neither write into the channel nor read
 * it (environments/jupyter/PROTOCOL.md).
 */
static json_t *dsb_container_spec(struct nbrun__sandbox *sb, const struct nbrun__sandbox_spec *o)
{
	struct dsb *b = sb->backend;
	char *seccomp = dsb_seccomp_option(o->runtime && !strcmp(o->runtime, "runsc"));
	json_t *env, *spec;

	if (!seccomp)
		return NULL;
	env = json_array();
	for (size_t i = 0; env && i < o->env_count; i++)
		json_array_append_new(env, json_string(o->env[i]));
	if (env && o->preload)
		json_array_append_new(env, json_sprintf("NBRUN_PRELOAD=%s", o->preload));
	/* The kernel's clients go through the agent to the relay (egress.py). */
	if (env && o->egress_policy) {
		static const char *const proxies[] = { "HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
						       "https_proxy" };
		static const char *const cas[] = { "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
						   "PIP_CERT", "NODE_EXTRA_CA_CERTS" };
		for (size_t i = 0; i < sizeof(proxies) / sizeof(proxies[0]); i++)
			json_array_append_new(env, json_sprintf("%s=%s", proxies[i], NBRUN_EGRESS_PROXY_URL));
		json_array_append_new(env, json_string("NO_PROXY=localhost,127.0.0.1,::1"));
		json_array_append_new(env, json_string("no_proxy=localhost,127.0.0.1,::1"));
		for (size_t i = 0; o->ca_certs && i < sizeof(cas) / sizeof(cas[0]); i++)
			json_array_append_new(env, json_sprintf("%s=%s/ca.pem", cas[i], NBRUN_EGRESS_SOCKET_DIR));
		json_array_append_new(env, json_string("NBRUN_EGRESS=1"));
	}
	/* Last, so that no -e entry of the same name counts. */
	if (env && o->kernel)
		json_array_append_new(env, json_sprintf("NBRUN_KERNEL=%s", o->kernel));
	spec = json_pack(
		"{s:s, s:[s], s:o, s:s, s:s, s:o, s:b, s:b, s:b, s:b, s:b, s:b, s:b,"
		" s:{s:s, s:[s], s:[s,s,s], s:[s,s], s:I, s:I, s:I, s:I, s:b, s:b, s:{s:s},"
		"    s:{s:s}, s:[{s:s, s:s, s:s}], s:b, s:[{s:s, s:I, s:I}, {s:s, s:I, s:I}], s:s}}",
		"Image", sb->image, "Cmd", "/opt/nbrun/nbrun-agent", "Env", env, "User", "0:0",
		"WorkingDir", "/mnt/data", "Labels", dsb_labels(sb), "NetworkDisabled", !o->network,
		"AttachStdin", 1, "AttachStdout", 1, "AttachStderr", 1, "OpenStdin", 1, "StdinOnce", 1,
		"Tty", 0, "HostConfig", "NetworkMode", o->network ? "bridge" : "none", "CapDrop", "ALL",
		"CapAdd", "SETUID", "SETGID", "SETPCAP", "SecurityOpt", "no-new-privileges", seccomp,
		"PidsLimit", (json_int_t)o->pids, "Memory", (json_int_t)o->memory_bytes, "MemorySwap",
		(json_int_t)o->memory_bytes, "NanoCpus", (json_int_t)o->nano_cpus, "Init", 1,
		"ReadonlyRootfs", 1, "Tmpfs", "/tmp", "rw,nosuid,nodev,size=" DSB_TMPFS_SIZE ",mode=1777",
		/* Everything the agent says goes through the attach stream: the
		 * engine need not copy it into a log too. */
		"LogConfig", "Type", "none", "Mounts", "Type", "volume", "Source", b->vol_data,
		"Target", "/mnt/data", "AutoRemove", 0, "Ulimits", "Name", "nofile", "Soft",
		(json_int_t)4096, "Hard", (json_int_t)4096,
		/* No core dumps: a hard 0 the code cannot raise (a kernel's core
		 * would otherwise land in /mnt/data and be exported). */
		"Name", "core", "Soft", (json_int_t)0, "Hard", (json_int_t)0, "IpcMode", "private");
	free(seccomp);
	if (spec && o->egress_policy &&
	    json_array_append_new(json_object_get(json_object_get(spec, "HostConfig"), "Mounts"),
				  json_pack("{s:s, s:s, s:s}", "Type", "volume", "Source", b->egress.volume,
					    "Target", NBRUN_EGRESS_SOCKET_DIR)) < 0) {
		json_decref(spec);
		return NULL;
	}
	if (spec && o->runtime && !strcmp(o->runtime, "runsc") && dsb_gvisor_pids(spec, o->pids) < 0) {
		json_decref(spec);
		spec = NULL;
	}
	return spec;
}

/*
 * An image lists its kernels in the label nbrun.kernels ("python3 ir ...");
 * one without the label has python3 only. Needs sb->image (resolve_image).
 */
static int dsb_image_kernels(struct nbrun__sandbox *sb, char **out)
{
	struct dsb *b = dsb_of(sb);
	char path[512];
	json_t *reply = NULL;
	const char *list;
	int status;

	*out = NULL;
	snprintf(path, sizeof(path), "/images/%s/json", sb->image);
	status = nbrun__docker_json(b->docker, "GET", path, NULL, &reply, 0);
	if (status < 0)
		return status;
	if (status != 200) {
		json_decref(reply);
		return dsb_status(sb, status, "cannot inspect the image");
	}
	list = json_string_value(json_object_get(
		json_object_get(json_object_get(reply, "Config"), "Labels"), "nbrun.kernels"));
	*out = strdup(list ? list : "python3");
	json_decref(reply);
	return *out ? 0 : nbrun__err(sb->ctx, NBRUN_ENOMEM, "out of memory");
}

/* The engine lists its runtimes in /info: a name it lacks is a usage error. */
static int dsb_check_runtime(struct nbrun__sandbox *sb, const char *runtime)
{
	struct dsb *b = dsb_of(sb);
	json_t *info = NULL, *runtimes, *v;
	const char *name;
	char list[256] = "";
	size_t off = 0;
	int status;

	status = nbrun__docker_json(b->docker, "GET", "/info", NULL, &info, 0);
	if (status < 0)
		return status;
	if (status != 200) {
		json_decref(info);
		return dsb_status(sb, 500, "cannot ask the engine for its runtimes");
	}
	runtimes = json_object_get(info, "Runtimes");
	if (json_object_get(runtimes, runtime)) {
		json_decref(info);
		return 0;
	}
	json_object_foreach(runtimes, name, v) {
		int n = snprintf(list + off, sizeof(list) - off, "%s%.64s", off ? ", " : "", name);
		if (n < 0 || (size_t)n >= sizeof(list) - off)
			break;
		off += (size_t)n;
	}
	status = nbrun__err(sb->ctx, NBRUN_EINVAL,
			    "runtime '%s' is not registered with the Docker engine (its runtimes: %s)%s",
			    runtime, off ? list : "none listed",
			    strcmp(runtime, "runsc") ? "" : "; scripts/setup registers runsc");
	json_decref(info);
	return status;
}

static int dsb_create(struct nbrun__sandbox *sb, const struct nbrun__sandbox_spec *spec)
{
	struct dsb *b = dsb_of(sb);
	char path[128];
	json_t *body;
	int rc, status;

	rc = dsb_resolve_image(sb, spec->image);
	if (rc == 0 && spec->kernel)
		rc = nbrun__sandbox_check_kernel(sb, spec->kernel);
	if (rc < 0)
		return rc;
	rc = dsb_create_volume(sb, b->vol_data, spec->disk_bytes, &b->have_vol_data);
	if (rc < 0)
		return rc;
	if (spec->egress_policy) {
		json_t *labels = dsb_labels(sb);
		b->egress_on = true;
		b->net_bytes = spec->net_bytes;
		rc = labels ? nbrun__egress_setup(&b->egress, b->docker, sb->ctx, sb->id, labels, spec)
			    : nbrun__err(sb->ctx, NBRUN_ENOMEM, "out of memory");
		json_decref(labels);
		if (rc < 0)
			return rc;
	}
	body = dsb_container_spec(sb, spec);
	free(b->runtime);
	b->runtime = spec->runtime ? strdup(spec->runtime) : NULL;
	if (body && spec->runtime &&
	    (!b->runtime || json_object_set_new(json_object_get(body, "HostConfig"), "Runtime",
						json_string(spec->runtime)) < 0)) {
		json_decref(body);
		body = NULL;
	}
	if (!body)
		return nbrun__err(sb->ctx, NBRUN_ENOMEM, "out of memory");
	snprintf(path, sizeof(path), "/containers/create?name=nbrun-%s", sb->id);
	snprintf(b->container, sizeof(b->container), "nbrun-%s", sb->id);
	b->have_container = true;
	status = nbrun__docker_json(b->docker, "POST", path, body, NULL, 0);
	json_decref(body);
	if (status >= 400)
		b->have_container = false;
	/* The engine says "Unknown runtime specified": say which it has. */
	if (status >= 400 && status < 500 && spec->runtime) {
		rc = dsb_check_runtime(sb, spec->runtime);
		if (rc < 0)
			return rc;
	}
	return dsb_status(sb, status, "cannot create the container");
}

/*
 * The kernel of a gVisor sandbox reports this fixed version in /proc/version
 * (gVisor's pkg/sentry/kernel/version.go); a host's kernel does not.
 */
#define DSB_GVISOR_VERSION "#1 SMP Sun Jan 10 15:06:54 PST 2016"
#define DSB_VERSION_MAX 512
/*
 * How long the engine may take to run that one process: runsc starts it
 * through the sandbox's gofer and Sentry, which took over 20 s on the 2-core
 * machine at load 15-20 (the run then failed as if the engine were down).
 */
#define DSB_EXEC_TIMEOUT_MS 120000L

/* The stdout of an exec's stream (8-byte frame headers), at most max - 1 bytes. */
/* The stdout of an exec's stream, at most max - 1 bytes and a NUL. */
static void dsb_stream_stdout(char *out, size_t max, const struct buf *raw)
{
	struct buf text = BUF_INIT(max - 1);

	nbrun__docker_stdout(&text, raw);
	snprintf(out, max, "%.*s", (int)text.len, text.data ? text.data : "");
	buf_free(&text);
}

static int dsb_state(struct nbrun__sandbox *sb, struct nbrun__sandbox_state *out);

/* What /proc/version says inside the started sandbox, read by a process of its own. */
static int dsb_exec_version(struct nbrun__sandbox *sb, char *out, size_t max)
{
	struct dsb *b = sb->backend;
	static const char start[] = "{\"Detach\":false,\"Tty\":false}";
	struct buf raw = BUF_INIT(64 * 1024);
	char path[160];
	const char *id;
	json_t *body, *reply = NULL;
	int status;

	body = json_pack("{s:[s,s], s:b, s:b, s:s}", "Cmd", "/bin/cat", "/proc/version",
			 "AttachStdout", 1, "AttachStderr", 1, "User", "1000:1000");
	if (!body)
		return nbrun__err(sb->ctx, NBRUN_ENOMEM, "out of memory");
	snprintf(path, sizeof(path), "/containers/%s/exec", b->container);
	status = nbrun__docker_json(b->docker, "POST", path, body, &reply, 0);
	json_decref(body);
	id = json_string_value(json_object_get(reply, "Id"));
	if (status >= 0 && status < 400 && (!id || strlen(id) > 80 ||
					    strspn(id, "0123456789abcdef") != strlen(id)))
		status = nbrun__err(sb->ctx, NBRUN_EENGINE, "the engine's exec reply has no id");
	if (status >= 400)
		status = dsb_status(sb, status, "cannot check the sandbox's kernel");
	if (status >= 0) {
		snprintf(path, sizeof(path), "/exec/%s/start", id);
		status = nbrun__docker_request(b->docker, "POST", path, "application/json", start,
					       strlen(start), &raw, DSB_EXEC_TIMEOUT_MS);
		if (status >= 400)
			status = nbrun__err(sb->ctx, NBRUN_EENGINE,
					    "cannot check the sandbox's kernel: exec start: HTTP %d", status);
	}
	json_decref(reply);
	if (status >= 0)
		dsb_stream_stdout(out, max, &raw);
	buf_free(&raw);
	return status < 0 ? status : 0;
}

/*
 * A runtime asked for must be the one the sandbox runs under: the engine
 * must report it for the container, and under runsc the sandbox's own kernel
 * must be gVisor's and not the host's, which neither a runsc entry that
 * points at another runtime nor a runtime that ignores its arguments can
 * fake. Checked before the sandbox gets any code.
 */
static int dsb_verify_runtime(struct nbrun__sandbox *sb)
{
	struct dsb *b = sb->backend;
	char path[128], version[DSB_VERSION_MAX], host[DSB_VERSION_MAX] = "";
	struct nbrun__sandbox_state st;
	const char *used;
	json_t *j = NULL;
	FILE *f;
	int status;

	snprintf(path, sizeof(path), "/containers/%s/json", b->container);
	status = nbrun__docker_json(b->docker, "GET", path, NULL, &j, 0);
	if (status != 200) {
		json_decref(j);
		return dsb_status(sb, status < 0 ? status : 500, "cannot inspect the container");
	}
	used = json_string_value(json_object_get(json_object_get(j, "HostConfig"), "Runtime"));
	if (!used || strcmp(used, b->runtime)) {
		status = nbrun__err(sb->ctx, NBRUN_EENGINE,
				    "runtime %s was asked for but the engine runs the sandbox under '%.64s'",
				    b->runtime, used ? used : "(none)");
		json_decref(j);
		return status;
	}
	json_decref(j);
	if (strcmp(b->runtime, "runsc"))
		return 0;
	status = dsb_exec_version(sb, version, sizeof(version));
	if (status < 0)
		return status;
	version[strcspn(version, "\r\n")] = '\0';
	/* A sandbox that ended at once is not a kernel that lied: say why it ended. */
	if (!strstr(version, DSB_GVISOR_VERSION) && dsb_state(sb, &st) == 0 && !st.running)
		return nbrun__err(sb->ctx, NBRUN_EENGINE,
				  "the sandbox ended as it started (exit %d), before its runtime could be checked: %.200s",
				  st.exit_code, sb->conn ? sb->conn->err_tail : "");
	f = fopen("/proc/version", "re");
	if (f) {
		if (!fgets(host, sizeof(host), f))
			host[0] = '\0';
		fclose(f);
		host[strcspn(host, "\r\n")] = '\0';
	}
	if (!strstr(version, DSB_GVISOR_VERSION) || !strcmp(version, host))
		return nbrun__err(sb->ctx, NBRUN_EENGINE,
				  "runtime runsc was asked for but the sandbox's kernel is not gVisor's "
				  "(/proc/version: '%.120s'): check the engine's runsc entry (scripts/setup)",
				  version);
	return 0;
}

/* Attached before it starts, so that nothing the agent says is missed. */
static int dsb_start(struct nbrun__sandbox *sb)
{
	struct dsb *b = dsb_of(sb);
	char path[128];
	int rc;

	if (!sb->conn) {
		rc = nbrun__docker_attach(b->docker, b->container, &sb->conn);
		if (rc < 0)
			return rc;
		nbrun__chan_init(&sb->ch, sb->conn, sb->ctx, sb->cancel);
	}
	snprintf(path, sizeof(path), "/containers/%s/start", b->container);
	rc = dsb_status(sb, nbrun__docker_json(b->docker, "POST", path, NULL, NULL, 0),
			"cannot start the container");
	if (rc == 0 && b->runtime)
		rc = dsb_verify_runtime(sb);
	return rc;
}

static int dsb_put_archive(struct nbrun__sandbox *sb, const char *dest, const void *data,
			   size_t len)
{
	struct dsb *b = dsb_of(sb);
	char path[256];
	struct buf reply = BUF_INIT(64 * 1024);
	int status;

	snprintf(path, sizeof(path), "/containers/%s/archive?path=%s", b->container, dest);
	status = nbrun__docker_request(b->docker, "PUT", path, "application/x-tar", data, len, &reply,
				       120000);
	if (status >= 400) {
		json_t *j = json_loadb(reply.data ? reply.data : "", reply.len, 0, NULL);
		nbrun__err(sb->ctx, NBRUN_EENGINE, "upload to %s failed: HTTP %d: %.200s", dest, status,
			   json_string_value(json_object_get(j, "message")) ?: "");
		json_decref(j);
		status = NBRUN_EENGINE;
	}
	buf_free(&reply);
	return status < 0 ? status : 0;
}

static int dsb_get_archive(struct nbrun__sandbox *sb, const char *src, int fd, uint64_t max,
			   bool *cut)
{
	struct dsb *b = dsb_of(sb);
	char path[256];
	int rc;

	*cut = false;
	snprintf(path, sizeof(path), "/containers/%s/archive?path=%s", b->container, src);
	rc = nbrun__docker_download(b->docker, path, fd, max, 120000);
	if (rc < 0)
		return rc;
	*cut = rc == 1;
	return 0;
}

static int dsb_state(struct nbrun__sandbox *sb, struct nbrun__sandbox_state *out)
{
	struct dsb *b = dsb_of(sb);
	char path[128];
	json_t *j = NULL, *state;
	int status;

	snprintf(path, sizeof(path), "/containers/%s/json", b->container);
	status = nbrun__docker_json(b->docker, "GET", path, NULL, &j, 0);
	if (status != 200) {
		json_decref(j);
		return dsb_status(sb, status < 0 ? status : 500, "cannot inspect the container");
	}
	state = json_object_get(j, "State");
	out->oom = json_is_true(json_object_get(state, "OOMKilled"));
	out->exit_code = (int)json_integer_value(json_object_get(state, "ExitCode"));
	out->running = json_is_true(json_object_get(state, "Running"));
	json_decref(j);
	return 0;
}

/*
 * A removal the engine could not take (unreachable, 5xx) is tried again until
 * deadline, one it answers 409 to (the container is still being started or
 * killed) until busy_deadline: an engine restarting under a run comes back
 * within seconds, and a removal given up at once would leave the volume
 * behind until this process has exited and a later gc sees it. True when
 * the object is gone (or was never made).
 */
static bool dsb_delete(struct dsb *b, const char *kind, const char *name, const char *query,
		       bool *have, uint64_t deadline, uint64_t busy_deadline)
{
	char path[160];
	long pause_ms = 250;
	struct timespec ts;
	int status;

	if (!*have)
		return true;
	snprintf(path, sizeof(path), "/%s/%s?%s", kind, name, query);
	for (;;) {
		status = nbrun__docker_json(b->docker, "DELETE", path, NULL, NULL, DSB_CLEANUP_TIMEOUT_MS);
		if ((status >= 200 && status < 300) || status == 404 ||
		    (status >= 0 && status < 500 && status != 409) ||
		    clock_mono_ms() + (uint64_t)pause_ms >= (status == 409 ? busy_deadline : deadline))
			break;
		ts.tv_sec = pause_ms / 1000;
		ts.tv_nsec = (pause_ms % 1000) * 1000000L;
		nanosleep(&ts, NULL);
		if (pause_ms < 2000)
			pause_ms *= 2;
	}
	*have = false;
	return (status >= 200 && status < 300) || status == 404;
}

/*
 * What the run ended with stays its message: a removal's own error (a volume
 * still in use, an engine gone) must not replace why the run stopped.
 */
static void dsb_destroy(struct nbrun__sandbox *sb)
{
	struct dsb *b = dsb_of(sb);
	/* One budget for both removals: an engine that stays away costs 15 s, not 40. */
	uint64_t now = clock_mono_ms();
	uint64_t deadline = now + DSB_CLEANUP_RETRY_MS, busy = now + DSB_CLEANUP_BUSY_MS;
	char msg[sizeof(sb->ctx->errmsg)];

	if (sb->ctx)
		memcpy(msg, sb->ctx->errmsg, sizeof(msg));
	/* Removal runs even after a cancel: lift the flag for these requests.
	 * Closing the channel first ends the agent (its stdin closes). */
	nbrun__docker_set_cancel(b->docker, NULL);
	if (sb->conn) {
		sb->conn->close(sb->conn);
		sb->conn = NULL;
	}
	/* The volume waits out a busy engine only when its container went: a
	 * container left behind keeps it in use however long it is tried. */
	if (!dsb_delete(b, "containers", b->container, "force=1&v=1", &b->have_container, deadline, busy))
		busy = deadline;
	dsb_delete(b, "volumes", b->vol_data, "force=1", &b->have_vol_data, deadline, busy);
	if (b->egress_on)
		nbrun__egress_teardown(&b->egress, b->docker, sb->ctx);
	if (sb->ctx)
		memcpy(sb->ctx->errmsg, msg, sizeof(msg));
}

static json_t *dsb_net_report(struct nbrun__sandbox *sb)
{
	struct dsb *b = dsb_of(sb);
	char msg[sizeof(sb->ctx->errmsg)];
	json_t *report;

	if (!b->egress_on)
		return NULL;
	/* What the run ended with stays its message, whatever the report's requests say. */
	memcpy(msg, sb->ctx->errmsg, sizeof(msg));
	report = nbrun__egress_report(&b->egress, b->docker, b->net_bytes);
	memcpy(sb->ctx->errmsg, msg, sizeof(msg));
	return report;
}

const struct nbrun__sandbox_ops nbrun__sandbox_docker = {
	.version = NBRUN__SANDBOX_OPS_VERSION,
	.name = "docker",
	.open = dsb_open,
	.gc = dsb_gc,
	.resolve_image = dsb_resolve_image,
	.check_runtime = dsb_check_runtime,
	.image_kernels = dsb_image_kernels,
	.net_report = dsb_net_report,
	.create = dsb_create,
	.start = dsb_start,
	.put_archive = dsb_put_archive,
	.get_archive = dsb_get_archive,
	.state = dsb_state,
	.destroy = dsb_destroy,
	.free = dsb_free,
};
