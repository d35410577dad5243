/* SPDX-License-Identifier: MIT */
/* The MCP server's tools (run_python, run_notebook) and resources/read of the files runs wrote. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "mcp-session-tools.h"
#include "mcp-tools.h"
#include "mime.h"
#include "result-schema.h"
#include "text.h"

/*
 * The tool table: the one source of what the tools are called, what they
 * say to a model and what arguments they take. tools/list serves it, and
 * `nbrun mcp --print-tools=FORMAT` prints the same as OpenAI and Anthropic
 * tool definitions (schemas/tools.*.json, checked against it by a test).
 */

#define RUN_PYTHON_DESC                                                                         \
	"Run Python 3 code in a fresh, locked-down Jupyter sandbox and get back everything it "  \
	"produced: printed output, the value of the last expression, the error with its "        \
	"traceback, every chart or displayed image (as an image), and every file the code "      \
	"wrote under /mnt/data/. numpy, pandas and matplotlib are installed; there is no "       \
	"network. Each call starts from a clean sandbox, so nothing (variables, files) persists " \
	"between calls: do the whole job in one call. Files given in `files` are placed in "     \
	"/mnt/data/ before the code runs. A line `# %%` splits the code into cells; an error in " \
	"one cell keeps the outputs of the cells before it. To return a table or data, write "   \
	"it to a file under /mnt/data/ (e.g. df.to_csv('/mnt/data/out.csv')). Call "             \
	"plt.show() or leave the figure as the last expression to get a chart back."

#define RUN_CODE_DESC                                                                           \
	"Run code in another language than Python (for Python use run_python) in a fresh, "      \
	"locked-down Jupyter sandbox, in that language's own kernel, and get back what it "      \
	"produced: printed output, the last value, the error with its traceback, charts as "     \
	"images and every file the code wrote under /mnt/data/. No network; nothing persists "   \
	"between calls. Files given in `files` are placed in /mnt/data/ first. A line `# %%` "    \
	"(`// %%` in JavaScript and TypeScript) splits the code into cells. Languages here: "

#define RUN_NOTEBOOK_DESC                                                                       \
	"Execute a Jupyter notebook (nbformat 4 JSON) top to bottom in a fresh, locked-down "    \
	"sandbox, papermill style: each entry of `parameters` (name -> JSON value) is assigned " \
	"in a new cell placed after the cell tagged \"parameters\" (or first). The notebook's "  \
	"kernelspec names its language. Returns what run_python returns: a text summary, every " \
	"image, every file written under /mnt/data/, and the structured result of all cells."

#define SESSION_OPEN_DESC                                                                       \
	"Open a stateful session: one locked-down sandbox whose kernel keeps variables, "        \
	"imports and the files in /mnt/data/ across session_execute calls (unlike run_python, "  \
	"where every call starts clean). Returns its session_id. Close it with session_close "   \
	"when done; an idle session is closed after 30 minutes."

#define SESSION_EXECUTE_DESC                                                                    \
	"Run code in an open session's kernel, in the language the session was opened with: "    \
	"variables and files from earlier calls are still there. Returns what run_python "       \
	"returns (text summary, images, files the code created or changed under /mnt/data/, "    \
	"the structured result)."

/* What a model should know of each language's kernel, for run_code's description. */
static const char *const language_notes[][2] = {
	{ "python", "python (Python 3 with numpy, pandas, matplotlib, seaborn, scikit-learn, "
		    "statsmodels, plotly)" },
	{ "r", "r (R 4.2 with ggplot2 and dplyr; plots come back as PNG)" },
	{ "javascript", "javascript (Node 18, its standard library; tslab.display shows html, "
			"svg or png)" },
	{ "typescript", "typescript (TypeScript 5 on Node 18, as javascript; type errors are "
			"reported before the cell runs)" },
	{ "bash", "bash (bash 5.2 and the usual command-line tools; a cell fails when its last "
		  "command fails)" },
};

enum tool_kind {
	TOOL_RUN_PYTHON,
	TOOL_RUN_CODE,
	TOOL_RUN_NOTEBOOK,
	TOOL_SESSION_OPEN,
	TOOL_SESSION_EXECUTE,
	TOOL_SESSION_UPLOAD,
	TOOL_SESSION_DOWNLOAD,
	TOOL_SESSION_CLOSE,
};

struct tool {
	const char *name;
	const char *title;
	const char *description;
	enum tool_kind kind;
	const char *const *keys;   /* allowed argument names, NULL-terminated */
	const char *const *needed; /* required ones */
	bool result_doc;           /* structuredContent is the result document (outputSchema) */
	bool read_only;            /* changes nothing outside its answer */
};

/* allow_net is offered only by a server with --allow-net (tool_key_offered). */
static const char *const run_python_keys[] = { "code", "files", "timeout_s", "allow_net", NULL };
static const char *const run_code_keys[] = { "code", "language", "files", "timeout_s", "allow_net",
					     NULL };
static const char *const run_notebook_keys[] = { "notebook", "parameters", "files", "timeout_s",
						 "allow_net", NULL };
static const char *const open_keys[] = { "language", "files", "allow_net", NULL };
static const char *const execute_keys[] = { "session_id", "code", "timeout_s", NULL };
static const char *const upload_keys[] = { "session_id", "files", NULL };
static const char *const download_keys[] = { "session_id", "path", NULL };
static const char *const close_keys[] = { "session_id", NULL };
static const char *const need_code[] = { "code", NULL };
static const char *const need_code_language[] = { "code", "language", NULL };
static const char *const need_notebook[] = { "notebook", NULL };
static const char *const need_none[] = { NULL };
static const char *const need_session_code[] = { "session_id", "code", NULL };
static const char *const need_session_files[] = { "session_id", "files", NULL };
static const char *const need_session_path[] = { "session_id", "path", NULL };
static const char *const need_session[] = { "session_id", NULL };

static const struct tool tools[] = {
	{ "run_python", "Run Python code", RUN_PYTHON_DESC, TOOL_RUN_PYTHON, run_python_keys,
	  need_code, true, false },
	{ "run_code", "Run code in another language", RUN_CODE_DESC, TOOL_RUN_CODE, run_code_keys,
	  need_code_language, true, false },
	{ "run_notebook", "Run a Jupyter notebook", RUN_NOTEBOOK_DESC, TOOL_RUN_NOTEBOOK,
	  run_notebook_keys, need_notebook, true, false },
	{ "session_open", "Open a stateful session", SESSION_OPEN_DESC, TOOL_SESSION_OPEN, open_keys,
	  need_none, false, false },
	{ "session_execute", "Run code in a session", SESSION_EXECUTE_DESC, TOOL_SESSION_EXECUTE,
	  execute_keys, need_session_code, false, false },
	{ "session_upload", "Upload files to a session", "Write files into an open session's /mnt/data/.",
	  TOOL_SESSION_UPLOAD, upload_keys, need_session_files, false, false },
	{ "session_download", "Download a file from a session",
	  "Get a file from an open session's /mnt/data/ (embedded when small, else a resource link "
	  "to read with resources/read).",
	  TOOL_SESSION_DOWNLOAD, download_keys, need_session_path, false, true },
	{ "session_close", "Close a session",
	  "Close a session: its sandbox, kernel and files are destroyed.", TOOL_SESSION_CLOSE,
	  close_keys, need_session, false, false },
};
#define N_TOOLS (sizeof(tools) / sizeof(tools[0]))

/* True when the server runs some language besides Python (run_code has something to offer). */
static bool tools_polyglot(const struct serve *s)
{
	return s->languages && strchr(s->languages, ' ');
}

static bool tool_offered(const struct tool *t, const struct serve *s)
{
	return t->kind != TOOL_RUN_CODE || tools_polyglot(s);
}

/* key is one of t's arguments on this server. */
static bool tool_key_offered(const struct tool *t, const struct serve *s, const char *key)
{
	size_t i;

	for (i = 0; t->keys[i] && strcmp(t->keys[i], key); i++)
		;
	return t->keys[i] && (strcmp(key, "allow_net") || s->n_net_ceiling);
}

/* {"type": "array", ...} of hosts, naming what this server allows. */
static json_t *allow_net_schema(const struct serve *s)
{
	struct buf b = BUF_INIT(64 * 1024);
	char rule[300], *desc;
	json_t *out;

	buf_puts(&b, "Hosts the code may reach over HTTP(S) through nbrun's egress proxy, and "
		     "nothing else: names (example.org), *.example.org for the names below it, "
		     "with :PORT for one port (else 80 and 443). They must lie within what this "
		     "server allows: ");
	for (size_t i = 0; i < s->n_net_ceiling; i++)
		buf_printf(&b, "%s%s", i ? ", " : "",
			   netrule_format(&s->net_ceiling[i], rule, sizeof(rule)));
	buf_puts(&b, ". Without it the code has no network.");
	desc = buf_steal(&b);
	out = json_pack("{s:s, s:{s:s}, s:i, s:s}", "type", "array", "items", "type", "string",
			"maxItems", NETRULE_MAX, "description", desc ? desc : "");
	free(desc);
	return out;
}

/* The result document's JSON Schema, as outputSchema (its $schema and $id left out: the MCP default dialect is 2020-12). */
static json_t *tool_output_schema(void)
{
	json_t *schema = json_loadb((const char *)result_schema_json, sizeof(result_schema_json), 0,
				    NULL);

	if (schema) {
		json_object_del(schema, "$schema");
		json_object_del(schema, "$id");
	}
	return schema;
}

/* {"type": "string", "enum": [the server's languages], ...}; python left out for run_code. */
static json_t *language_schema(const struct serve *s, bool with_python, const char *description)
{
	json_t *names = json_array();
	char *all = strdup(s->languages ? s->languages : "python"), *save = NULL;

	for (char *w = all ? strtok_r(all, " ", &save) : NULL; w; w = strtok_r(NULL, " ", &save))
		if (with_python || strcmp(w, "python"))
			json_array_append_new(names, json_string(w));
	free(all);
	return json_pack("{s:s, s:o, s:s}", "type", "string", "enum", names, "description",
			 description);
}

static json_t *files_schema(const char *path_description)
{
	return json_pack("{s:s, s:i, s:s, s:{s:s, s:b, s:[s, s], s:{s:{s:s, s:s}, s:{s:s, s:s}}}}",
			 "type", "array", "maxItems", 1000, "description",
			 "Input files, each written to /mnt/data/<path> before the code runs.",
			 "items", "type", "object", "additionalProperties", 0, "required", "path",
			 "content_base64", "properties", "path", "type", "string", "description",
			 path_description, "content_base64", "type", "string", "description",
			 "The file's bytes in standard base64");
}

static json_t *timeout_schema(const struct serve *s)
{
	return json_pack("{s:s, s:i, s:I, s:s}", "type", "number", "exclusiveMinimum", 0, "maximum",
			 (json_int_t)(s->opts.timeout_ms / 1000), "description",
			 "Wall-clock limit in seconds (default and maximum: the server's)");
}

static json_t *session_id_schema(void)
{
	return json_pack("{s:s, s:s}", "type", "string", "description", "The id session_open returned");
}

static json_t *code_schema(const char *description)
{
	return json_pack("{s:s, s:s}", "type", "string", "description", description);
}

static json_t *tool_input_schema(const struct tool *t, const struct serve *s)
{
	json_t *props = json_object(), *need = json_array();

	if (!props || !need)
		goto fail;
	for (const char *const *k = t->keys; *k; k++) {
		json_t *p = NULL;
		if (!strcmp(*k, "code"))
			p = code_schema(t->kind == TOOL_RUN_PYTHON ? "The Python source to run"
					: t->kind == TOOL_RUN_CODE ? "The source to run, in `language`"
								   : "The source to run, in the session's language");
		else if (!strcmp(*k, "language"))
			p = language_schema(s, t->kind != TOOL_RUN_CODE,
					    t->kind == TOOL_RUN_CODE
						    ? "The language of `code`"
						    : "The session's language (default python); every "
						      "session_execute runs in it");
		else if (!strcmp(*k, "files"))
			p = files_schema(t->kind == TOOL_RUN_PYTHON || t->kind == TOOL_RUN_CODE ||
						 t->kind == TOOL_RUN_NOTEBOOK
					 ? "A plain file name (no '/'), e.g. data.csv"
					 : "Path below /mnt/data, e.g. data.csv or in/data.csv");
		else if (!strcmp(*k, "timeout_s"))
			p = timeout_schema(s);
		else if (!strcmp(*k, "notebook"))
			p = json_pack("{s:[s, s], s:s}", "type", "object", "string", "description",
				      "The notebook: an nbformat 4 JSON object (or its text)");
		else if (!strcmp(*k, "parameters"))
			p = json_pack("{s:s, s:s}", "type", "object", "description",
				      "Values assigned in a cell after the one tagged \"parameters\"");
		else if (!strcmp(*k, "session_id"))
			p = session_id_schema();
		else if (!strcmp(*k, "path"))
			p = json_pack("{s:s, s:s}", "type", "string", "description",
				      "The file's path below /mnt/data, e.g. out/chart.png");
		else if (!strcmp(*k, "allow_net")) {
			if (!tool_key_offered(t, s, *k))
				continue;
			p = allow_net_schema(s);
		}
		if (!p || json_object_set_new(props, *k, p) < 0)
			goto fail;
	}
	for (const char *const *k = t->needed; *k; k++)
		json_array_append_new(need, json_string(*k));
	/* An empty "required" is not allowed by every validator: left out then. */
	if (!json_array_size(need)) {
		json_decref(need);
		return json_pack("{s:s, s:o, s:b}", "type", "object", "properties", props,
				 "additionalProperties", 0);
	}
	return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required",
			 need, "additionalProperties", 0);
fail:
	json_decref(props);
	json_decref(need);
	return NULL;
}

static char *tool_description(const struct tool *t, const struct serve *s)
{
	struct buf b = BUF_INIT(8192);
	bool first = true;

	buf_puts(&b, t->description);
	if (t->kind == TOOL_RUN_CODE) {
		for (size_t i = 0; i < sizeof(language_notes) / sizeof(language_notes[0]); i++) {
			if (!strcmp(language_notes[i][0], "python") ||
			    !serve_language(s, language_notes[i][0], NULL, 0))
				continue;
			buf_printf(&b, "%s%s", first ? "" : "; ", language_notes[i][1]);
			first = false;
		}
		buf_puts(&b, ".");
	} else if (t->kind == TOOL_SESSION_OPEN && tools_polyglot(s)) {
		buf_puts(&b, " `language` chooses the kernel (default python).");
	}
	return buf_steal(&b);
}

/* One tool as MCP describes it to a client of that version. */
static json_t *tool_entry(const struct tool *t, const struct serve *s, const char *version)
{
	char *desc = tool_description(t, s);
	json_t *e = desc ? json_pack("{s:s, s:s, s:o}", "name", t->name, "description", desc,
				     "inputSchema", tool_input_schema(t, s))
			 : NULL;

	free(desc);
	if (!e)
		return NULL;
	if (mcp_version_since(version, "2025-03-26"))
		json_object_set_new(e, "annotations",
				    json_pack("{s:s, s:b, s:b, s:b, s:b}", "title", t->title,
					      "readOnlyHint", t->read_only, "destructiveHint",
					      t->kind == TOOL_SESSION_CLOSE, "idempotentHint", 0,
					      "openWorldHint", 0));
	if (mcp_version_since(version, "2025-06-18")) {
		json_object_set_new(e, "title", json_string(t->title));
		if (t->result_doc)
			json_object_set_new(e, "outputSchema", tool_output_schema());
	}
	return e;
}

json_t *mcp_tools_list(const struct serve *s, const char *version)
{
	json_t *list = json_array(), *out = json_pack("{s:o}", "tools", list);

	if (!out)
		return NULL;
	for (size_t i = 0; i < N_TOOLS; i++) {
		json_t *e;
		if (!tool_offered(&tools[i], s))
			continue;
		e = tool_entry(&tools[i], s, version);
		if (!e || json_array_append_new(list, e) < 0) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

json_t *mcp_tools_export(const struct serve *s, const char *format)
{
	json_t *mcp = mcp_tools_list(s, MCP_LATEST_VERSION), *out, *t;
	size_t i;

	if (!mcp || !strcmp(format, "mcp"))
		return mcp;
	out = !strcmp(format, "arguments") ? json_object() : json_array();
	json_array_foreach(json_object_get(mcp, "tools"), i, t) {
		json_t *name = json_object_get(t, "name"), *desc = json_object_get(t, "description");
		json_t *in = json_object_get(t, "inputSchema"), *e = NULL;

		if (!strcmp(format, "openai"))
			e = json_pack("{s:s, s:{s:O, s:O, s:O}}", "type", "function", "function", "name",
				      name, "description", desc, "parameters", in);
		else if (!strcmp(format, "anthropic"))
			e = json_pack("{s:O, s:O, s:O}", "name", name, "description", desc,
				      "input_schema", in);
		else if (!strcmp(format, "arguments")) {
			e = json_deep_copy(in);
			if (e) {
				/* A document of its own: dialect and title first. */
				json_t *doc = json_pack("{s:s, s:O, s:O}", "$schema",
							"https://json-schema.org/draft/2020-12/schema",
							"title", name, "description", desc);
				json_object_update(doc, e);
				json_decref(e);
				e = doc;
			}
			if (!e || json_object_set_new(out, json_string_value(name), e) < 0)
				goto fail;
			continue;
		}
		if (!e || json_array_append_new(out, e) < 0)
			goto fail;
	}
	json_decref(mcp);
	return out;
fail:
	json_decref(mcp);
	json_decref(out);
	return NULL;
}
/* ---- arguments ------------------------------------------------------------------------- */

/*
 * Check the arguments against the tool's keys and types and fill a: what
 * it points to is args' (a notebook given as text is parsed into *owned).
 * 0, or -1 with the reason in why.
 */
static int tool_args(struct serve_run_args *a, json_t **owned, const struct tool *t, json_t *args,
		     const struct serve *s, char *why, size_t whylen)
{
	const char *key;
	json_t *v;

	memset(a, 0, sizeof(*a));
	*owned = NULL;
	json_object_foreach(args, key, v) {
		if (!tool_key_offered(t, s, key)) {
			snprintf(why, whylen, "%s: unknown argument '%.64s'", t->name, key);
			return -1;
		}
	}
	if (t->kind == TOOL_RUN_PYTHON || t->kind == TOOL_RUN_CODE) {
		a->code = json_string_value(json_object_get(args, "code"));
		if (!a->code) {
			snprintf(why, whylen, "%s: 'code' must be a string of %s source", t->name,
				 t->kind == TOOL_RUN_PYTHON ? "Python" : "the language's");
			return -1;
		}
	}
	if (t->kind == TOOL_RUN_CODE) {
		/* The server's check of a run's language names the languages it has. */
		a->language = json_string_value(json_object_get(args, "language"));
		if (!a->language) {
			snprintf(why, whylen, "run_code: 'language' must be a string, one of the enum");
			return -1;
		}
	} else if (t->kind == TOOL_RUN_NOTEBOOK) {
		v = json_object_get(args, "notebook");
		if (json_is_string(v))
			v = *owned = json_loads(json_string_value(v), 0, NULL);
		if (!json_is_object(v)) {
			snprintf(why, whylen, "run_notebook: 'notebook' must be an nbformat 4 JSON object");
			return -1;
		}
		a->notebook = v;
		a->parameters = json_object_get(args, "parameters");
		if (a->parameters && !json_is_object(a->parameters)) {
			snprintf(why, whylen, "run_notebook: 'parameters' must be an object of name: value");
			return -1;
		}
	}
	a->allow_net = json_object_get(args, "allow_net");
	a->files = json_object_get(args, "files");
	if (a->files && !json_is_array(a->files)) {
		snprintf(why, whylen, "%s: 'files' must be a list of {path, content_base64}", t->name);
		return -1;
	}
	v = json_object_get(args, "timeout_s");
	if (v) {
		double secs = json_number_value(v);
		if (!json_is_number(v) || !(secs > 0) || secs > 1e7) {
			snprintf(why, whylen, "%s: 'timeout_s' must be a positive number of seconds", t->name);
			return -1;
		}
		a->timeout_ms = secs * 1000 < 1 ? 1 : (uint64_t)(secs * 1000 + 0.5);
	}
	return 0;
}

/* ---- results --------------------------------------------------------------------------- */


static void on_phase(enum nbrun_phase phase, void *payload)
{
	static const char *const names[] = { "connecting to the engine", "creating the sandbox",
					     "uploading files", "executing", "collecting outputs",
					     "reading the results", "cleaning up" };
	struct mcp_call_ctx *cc = payload;
	json_t *n;
	char *text;

	if (!cc->notify || !cc->progress_token || (unsigned int)phase >= sizeof(names) / sizeof(names[0]))
		return;
	n = json_pack("{s:s, s:s, s:{s:O, s:i, s:s}}", "jsonrpc", "2.0", "method",
		      "notifications/progress", "params", "progressToken", cc->progress_token,
		      "progress", (int)++cc->progress, "message", names[phase]);
	text = n ? json_dumps(n, JSON_COMPACT) : NULL;
	if (text)
		cc->notify(text, cc->payload);
	free(text);
	json_decref(n);
}

json_t *mcp_tools_call(struct mcp_call_ctx *cc, json_t *params, int *code, char *msg, size_t msglen)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments"), *out = NULL, *owned = NULL, *v;
	struct serve_reply reply = SERVE_REPLY_INIT;
	struct serve_run_args a;
	struct serve_request req;
	const struct tool *t = NULL;
	const char *key;
	char why[512], tmp_root[4096];
	int rc;

	for (size_t i = 0; name && i < N_TOOLS; i++)
		if (!strcmp(tools[i].name, name) && tool_offered(&tools[i], cc->s))
			t = &tools[i];
	if (t && t->kind >= TOOL_SESSION_OPEN) {
		json_object_foreach(args, key, v) {
			if (json_is_object(args) && !tool_key_offered(t, cc->s, key)) {
				snprintf(why, sizeof(why), "%s: unknown argument '%.64s'", t->name, key);
				return mcp_tool_arg_error(cc, code, msg, msglen, why);
			}
		}
		return mcp_session_tool(cc, name, args, code, msg, msglen);
	}
	if (!t) {
		*code = MCP_INVALID_PARAMS;
		snprintf(msg, msglen, "unknown tool: %.128s", name ? name : "(params.name is not a string)");
		return NULL;
	}
	if (args && !json_is_object(args)) {
		*code = MCP_INVALID_PARAMS;
		snprintf(msg, msglen, "params.arguments must be an object");
		return NULL;
	}
	snprintf(tmp_root, sizeof(tmp_root), "%s/tmp", cc->s->state_dir);
	if (tool_args(&a, &owned, t, args, cc->s, why, sizeof(why)) < 0) {
		json_decref(owned);
		return mcp_tool_arg_error(cc, code, msg, msglen, why);
	}
	rc = serve_request_init(&req, &reply, cc->s, &a, tmp_root);
	json_decref(owned);
	if (rc < 0) {
		snprintf(why, sizeof(why), "%s: %s", t->name,
			 json_string_value(json_object_get(reply.body, "error")) ?: "bad arguments");
		if (serve_kind_jsonrpc(reply.kind) == MCP_INVALID_PARAMS)
			out = mcp_tool_arg_error(cc, code, msg, msglen, why);
		else
			snprintf(msg, msglen, "%s", why);
		json_decref(reply.body);
		return out;
	}
	req.cancel = cc->cancel;
	req.progress = on_phase;
	req.payload = cc;
	serve_owner_hex(req.owner, cc->s, cc->tenant); /* its resources are its tenant's only */
	serve_run(&reply, cc->s, &req);
	serve_request_free(&req);
	if (*cc->cancel) {
		serve_info("nbrun: mcp: %s cancelled: its run stopped and its sandbox is removed",
			t->name);
		*code = 0;
	} else if (reply.kind == SERVE_OK) {
		out = mcp_result_of(cc, reply.body, NULL);
		if (!out)
			snprintf(msg, msglen, "out of memory");
	} else {
		/* No run (engine down, server busy or stopping): the model can say so or retry. */
		snprintf(why, sizeof(why), "nbrun could not run it: %s",
			 json_string_value(json_object_get(reply.body, "error")) ?: "unknown error");
		out = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", why,
				"isError", 1);
	}
	json_decref(reply.body);
	return out;
}

/* ---- resources ---------------------------------------------------------------------- */

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
		: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decode; a %00 or a bad escape fails. */
static int url_decode(char *out, size_t outlen, const char *in)
{
	size_t n = 0;

	for (; *in; in++) {
		int c = (unsigned char)*in;
		if (c == '%') {
			int hi = hexval(in[1]), lo = hi >= 0 ? hexval(in[2]) : -1;
			if (lo < 0 || (hi | lo) == 0)
				return -1;
			c = hi * 16 + lo;
			in += 2;
		}
		if (n + 1 >= outlen)
			return -1;
		out[n++] = (char)c;
	}
	out[n] = '\0';
	return 0;
}

json_t *mcp_resources_read(struct mcp_call_ctx *cc, json_t *params, int *code, char *msg,
			   size_t msglen)
{
	const char *uri = json_string_value(json_object_get(params, "uri")), *p;
	char id[80], rel[4096], owner[65], *data = NULL;
	json_t *r, *out = NULL;
	size_t n, len = 0;
	int run_fd = -1;

	if (!uri) {
		*code = MCP_INVALID_PARAMS;
		snprintf(msg, msglen, "resources/read: params.uri must be a string");
		return NULL;
	}
	*code = MCP_RESOURCE_NOT_FOUND;
	snprintf(msg, msglen, "resource not found (runs are kept for a while, then removed): %.200s", uri);
	if (strncmp(uri, "nbrun://runs/", 13))
		return NULL;
	p = uri + 13;
	n = strcspn(p, "/");
	if (n == 0 || n >= sizeof(id) || !p[n])
		return NULL;
	memcpy(id, p, n);
	id[n] = '\0';
	if (!wire_run_id_valid(id) || url_decode(rel, sizeof(rel), p + n + 1) < 0 ||
	    (strncmp(rel, "files/", 6) && strncmp(rel, "images/", 7)))
		return NULL;
	/* Another tenant's run is as missing as one that never was. */
	serve_owner_hex(owner, cc->s, cc->tenant);
	run_fd = serve_open_run(cc->s, id, owner);
	if (run_fd < 0)
		return NULL;
	data = serve_read_below(run_fd, rel, MCP_RESOURCE_MAX, &len);
	close(run_fd);
	if (!data) {
		snprintf(msg, msglen, "resource missing or larger than %u MiB: %.200s",
			 MCP_RESOURCE_MAX >> 20, uri);
		return NULL;
	}
	r = mcp_resource_contents(uri, mime_of_name(rel), data, len);
	free(data);
	if (r)
		out = json_pack("{s:[o]}", "contents", r);
	if (!out) {
		*code = MCP_INTERNAL_ERROR;
		snprintf(msg, msglen, "out of memory");
	}
	return out;
}
