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
#include "mcp.h"
#include "result-schema.h"
#include "text.h"

/* Bounds of the text summary a model reads (the structured result has the rest). */
#define SUMMARY_STDOUT 8000
#define SUMMARY_STDERR 2000
#define SUMMARY_VALUE 2000
#define SUMMARY_VALUES 5
#define SUMMARY_TRACEBACK 6000
#define SUMMARY_LISTED 50
#define SUMMARY_MAX (64u << 10)
/* Chart and table descriptions: lines, text of a label, axes or series named, columns named. */
#define SUMMARY_DESCS 10
#define SUMMARY_DESC_TEXT 80
#define SUMMARY_DESC_ITEMS 4
#define SUMMARY_DESC_COLUMNS 20

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

static const char *const run_python_keys[] = { "code", "files", "timeout_s", NULL };
static const char *const run_code_keys[] = { "code", "language", "files", "timeout_s", NULL };
static const char *const run_notebook_keys[] = { "notebook", "parameters", "files", "timeout_s",
						 NULL };
static const char *const open_keys[] = { "language", "files", NULL };
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
 * Wrong arguments: since 2025-11-25 a tool execution error the model can
 * read and correct (SEP-1303); before, -32602.
 */
json_t *mcp_tool_arg_error(struct mcp_call_ctx *cc, int *code, char *msg, size_t msglen,
			      const char *text)
{
	if (mcp_version_since(cc->version, "2025-11-25"))
		return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text,
				 "isError", 1);
	*code = MCP_INVALID_PARAMS;
	snprintf(msg, msglen, "%s", text);
	return NULL;
}

/* Check the arguments against the tool's keys and types; builds the POST /v1/runs body. */
static json_t *tool_body(const struct tool *t, json_t *args, char *why, size_t whylen)
{
	json_t *body = json_object(), *v;
	const char *key;

	if (!body) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	json_object_foreach(args, key, v) {
		size_t i;
		for (i = 0; t->keys[i] && strcmp(t->keys[i], key); i++)
			;
		if (!t->keys[i]) {
			snprintf(why, whylen, "%s: unknown argument '%.64s'", t->name, key);
			goto bad;
		}
	}
	if (t->kind == TOOL_RUN_PYTHON || t->kind == TOOL_RUN_CODE) {
		v = json_object_get(args, "code");
		if (!json_is_string(v)) {
			snprintf(why, whylen, "%s: 'code' must be a string of %s source", t->name,
				 t->kind == TOOL_RUN_PYTHON ? "Python" : "the language's");
			goto bad;
		}
		json_object_set(body, "code", v);
	}
	if (t->kind == TOOL_RUN_CODE) {
		/* The server's check of a run's language names the languages it has. */
		v = json_object_get(args, "language");
		if (!json_is_string(v)) {
			snprintf(why, whylen, "run_code: 'language' must be a string, one of the enum");
			goto bad;
		}
		json_object_set(body, "language", v);
	} else if (t->kind == TOOL_RUN_NOTEBOOK) {
		v = json_object_get(args, "notebook");
		if (json_is_string(v))
			v = json_loads(json_string_value(v), 0, NULL);
		else
			json_incref(v);
		if (!json_is_object(v)) {
			json_decref(v);
			snprintf(why, whylen, "run_notebook: 'notebook' must be an nbformat 4 JSON object");
			goto bad;
		}
		json_object_set_new(body, "notebook", v);
		v = json_object_get(args, "parameters");
		if (v && !json_is_object(v)) {
			snprintf(why, whylen, "run_notebook: 'parameters' must be an object of name: value");
			goto bad;
		}
		if (v)
			json_object_set(body, "parameters", v);
	}
	v = json_object_get(args, "files");
	if (v && !json_is_array(v)) {
		snprintf(why, whylen, "%s: 'files' must be a list of {path, content_base64}", t->name);
		goto bad;
	}
	if (v)
		json_object_set(body, "files", v);
	v = json_object_get(args, "timeout_s");
	if (v) {
		char dur[32];
		double secs = json_number_value(v);
		if (!json_is_number(v) || !(secs > 0) || secs > 1e7) {
			snprintf(why, whylen, "%s: 'timeout_s' must be a positive number of seconds", t->name);
			goto bad;
		}
		snprintf(dur, sizeof(dur), "%.0fms", secs * 1000 < 1 ? 1 : secs * 1000);
		json_object_set_new(body, "timeout", json_string(dur));
	}
	return body;
bad:
	json_decref(body);
	return NULL;
}

/* ---- results --------------------------------------------------------------------------- */

const char *mcp_mime_of(const char *name)
{
	static const char *const map[][2] = {
		{ ".csv", "text/csv" },          { ".tsv", "text/tab-separated-values" },
		{ ".txt", "text/plain" },        { ".log", "text/plain" },
		{ ".md", "text/markdown" },      { ".html", "text/html" },
		{ ".json", "application/json" }, { ".xml", "application/xml" },
		{ ".py", "text/x-python" },      { ".ipynb", "application/x-ipynb+json" },
		{ ".png", "image/png" },         { ".jpg", "image/jpeg" },
		{ ".jpeg", "image/jpeg" },       { ".gif", "image/gif" },
		{ ".webp", "image/webp" },       { ".svg", "image/svg+xml" },
		{ ".pdf", "application/pdf" },   { ".parquet", "application/vnd.apache.parquet" },
		{ ".xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" },
		{ ".zip", "application/zip" },
	};
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcasecmp(dot, map[i][0]))
			return map[i][1];
	return "application/octet-stream";
}

static bool mime_textual(const char *mime)
{
	return !strncmp(mime, "text/", 5) || !strcmp(mime, "application/json") ||
	       !strcmp(mime, "application/xml") || !strcmp(mime, "image/svg+xml") ||
	       !strcmp(mime, "application/x-ipynb+json");
}

/* The bytes of a regular file below dirfd when it is at most max bytes; NULL otherwise. */
static char *read_below(int dirfd, const char *rel, size_t max, size_t *len)
{
	struct buf b = BUF_INIT(max);
	char chunk[65536];
	int fd = serve_open_below(dirfd, rel);
	ssize_t n;
	char *out = NULL;

	if (fd < 0)
		return NULL;
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || buf_append(&b, chunk, (size_t)n) < 0)
			goto out;
	}
	*len = b.len;
	out = buf_steal(&b);
out:
	close(fd);
	buf_free(&b);
	return out;
}

static char *resource_uri(const char *run_id, const char *rel)
{
	char *enc = wire_url_path(rel), *uri = NULL;

	if (enc && asprintf(&uri, "nbrun://runs/%s/%s", run_id, enc) < 0)
		uri = NULL;
	free(enc);
	return uri;
}

/* {uri, mimeType, text|blob}: text when the type is textual and the bytes are UTF-8. */
static json_t *resource_contents(const char *uri, const char *mime, const char *data, size_t len)
{
	char *b64;
	json_t *r;

	if (mime_textual(mime) && text_utf8_valid(data, len) && !memchr(data, '\0', len))
		return json_pack("{s:s, s:s, s:s%}", "uri", uri, "mimeType", mime, "text", data, len);
	b64 = wire_base64((const unsigned char *)data, len);
	if (!b64)
		return NULL;
	r = json_pack("{s:s, s:s, s:s}", "uri", uri, "mimeType", mime, "blob", b64);
	free(b64);
	return r;
}


/* A file or a non-raster image: embedded when small, else a link for resources/read. */
void mcp_add_resource(json_t *content, const struct mcp_call_ctx *cc, int run_fd,
			 const char *run_id, const char *rel, const char *name, const char *mime,
			 json_int_t bytes, struct mcp_budget *b)
{
	char *uri = resource_uri(run_id, rel), *data = NULL, *note = NULL;
	size_t len = 0;

	if (!uri)
		return;
	if (bytes >= 0 && (uint64_t)bytes <= MCP_EMBED_ONE && (size_t)bytes <= b->embed &&
	    (data = read_below(run_fd, rel, MCP_EMBED_ONE, &len))) {
		json_t *r = resource_contents(uri, mime, data, len);
		if (r) {
			json_array_append_new(content, json_pack("{s:s, s:o}", "type", "resource",
								  "resource", r));
			b->embed -= len;
			goto out;
		}
	}
	if (mcp_version_since(cc->version, "2025-06-18")) {
		json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:s, s:I}", "type",
							  "resource_link", "uri", uri, "name", name,
							  "mimeType", mime, "size", bytes));
	} else if (asprintf(&note, "%s (%lld bytes) is too large to embed: resources/read %s",
			    name, (long long)bytes, uri) >= 0) {
		json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", note));
	}
out:
	free(note);
	free(data);
	free(uri);
}

static void add_image(json_t *content, const struct mcp_call_ctx *cc, int run_fd,
		      const char *run_id, json_t *img, struct mcp_budget *b)
{
	const char *path = json_string_value(json_object_get(img, "path"));
	const char *mime = json_string_value(json_object_get(img, "mime"));
	json_int_t bytes = json_integer_value(json_object_get(img, "bytes"));
	char *data = NULL, *b64 = NULL;
	size_t len = 0;

	if (!path || !mime)
		return;
	/* Raster images are image blocks; SVG and PDF go as resources. */
	if (strcmp(mime, "image/png") && strcmp(mime, "image/jpeg") && strcmp(mime, "image/gif")) {
		mcp_add_resource(content, cc, run_fd, run_id, path, path, mime, bytes, b);
		return;
	}
	if (bytes >= 0 && (uint64_t)bytes <= MCP_IMAGE_ONE && (size_t)bytes <= b->images &&
	    (data = read_below(run_fd, path, MCP_IMAGE_ONE, &len)) &&
	    (b64 = wire_base64((const unsigned char *)data, len))) {
		json_array_append_new(content, json_pack("{s:s, s:s, s:s}", "type", "image", "data",
							  b64, "mimeType", mime));
		b->images -= len;
	} else {
		mcp_add_resource(content, cc, run_fd, run_id, path, path, mime, bytes, b);
	}
	free(b64);
	free(data);
}

static void summary_add(struct buf *b, const char *label, const char *s, size_t max)
{
	size_t n = 0;
	bool cut = false;
	char *t;

	if (!s || !*s)
		return;
	t = text_truncate(s, strlen(s), max, &n, &cut);
	if (!t)
		return;
	buf_printf(b, "%s%s", b->len ? "\n" : "", label);
	buf_append(b, t, n);
	if (n && t[n - 1] != '\n')
		buf_puts(b, "\n");
	free(t);
}

/*
 * Text from a chart or table description (made in the sandbox): at most max
 * bytes, on one line (controls become spaces), cut on a UTF-8 boundary.
 */
static void summary_text(struct buf *b, const json_t *v, size_t max)
{
	const char *s = json_string_value(v);
	size_t n;

	if (!s)
		return;
	n = strnlen(s, max + 1);
	if (n > max) {
		n = max;
		while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	}
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		buf_append(b, (unsigned char)c < 0x20 || c == 0x7f ? " " : &c, 1);
	}
	if (n < strlen(s))
		buf_puts(b, "...");
}

/* "line 'Title' x='t', y='v', 2 series (a, b)" for one axes of a chart description. */
static void summary_axes(struct buf *b, const json_t *ax)
{
	const json_t *series = json_object_get(ax, "series"), *s;
	json_int_t n = json_integer_value(json_object_get(ax, "n_series"));
	size_t i, named = 0;

	summary_text(b, json_object_get(ax, "kind"), 16);
	if (json_string_length(json_object_get(ax, "title"))) {
		buf_puts(b, " '");
		summary_text(b, json_object_get(ax, "title"), SUMMARY_DESC_TEXT);
		buf_puts(b, "'");
	}
	if (json_is_string(json_object_get(ax, "x_label"))) {
		buf_puts(b, " x='");
		summary_text(b, json_object_get(ax, "x_label"), SUMMARY_DESC_TEXT);
		buf_puts(b, "',");
	}
	if (json_is_string(json_object_get(ax, "y_label"))) {
		buf_puts(b, " y='");
		summary_text(b, json_object_get(ax, "y_label"), SUMMARY_DESC_TEXT);
		buf_puts(b, "',");
	}
	if (n < (json_int_t)json_array_size(series))
		n = (json_int_t)json_array_size(series);
	buf_printf(b, " %lld series", (long long)n);
	json_array_foreach(series, i, s) {
		if (!json_is_string(json_object_get(s, "label")) || named == SUMMARY_DESC_ITEMS)
			continue;
		buf_puts(b, named++ ? ", " : " (");
		summary_text(b, json_object_get(s, "label"), SUMMARY_DESC_TEXT);
	}
	if (named)
		buf_puts(b, ")");
}

static void summary_chart(struct buf *b, const json_t *c, json_int_t cell)
{
	const json_t *axes = json_object_get(c, "axes"), *ax;
	size_t i;

	buf_printf(b, "chart (cell %lld): ", (long long)cell);
	if (json_array_size(axes) == 1) {
		summary_axes(b, json_array_get(axes, 0));
	} else {
		summary_text(b, json_object_get(c, "kind"), 16);
		if (json_is_string(json_object_get(c, "title"))) {
			buf_puts(b, " '");
			summary_text(b, json_object_get(c, "title"), SUMMARY_DESC_TEXT);
			buf_puts(b, "'");
		}
		buf_printf(b, ", %zu axes", json_array_size(axes));
		json_array_foreach(axes, i, ax) {
			if (i == SUMMARY_DESC_ITEMS) {
				buf_puts(b, "; ...");
				break;
			}
			buf_puts(b, i ? "; " : ": ");
			summary_axes(b, ax);
		}
	}
	buf_puts(b, json_is_true(json_object_get(c, "truncated")) ? ", points sampled\n" : "\n");
}

/* "table (cell 2): 100×3, columns a, b, c" */
static void summary_table(struct buf *b, const json_t *t, json_int_t cell)
{
	const json_t *shape = json_object_get(t, "shape"), *col;
	size_t i;

	buf_printf(b, "table (cell %lld): %lld×%lld, columns ", (long long)cell,
		   (long long)json_integer_value(json_array_get(shape, 0)),
		   (long long)json_integer_value(json_array_get(shape, 1)));
	json_array_foreach(json_object_get(t, "columns"), i, col) {
		if (i == SUMMARY_DESC_COLUMNS) {
			buf_puts(b, ", ...");
			break;
		}
		if (i)
			buf_puts(b, ", ");
		summary_text(b, col, SUMMARY_DESC_TEXT);
	}
	buf_puts(b, "\n");
}

/*
 * One line per chart and table description among the outputs (the runtime's
 * application/vnd.nbrun.chart+json and table+json), so that a model without
 * eyes knows what a figure shows; a description kept only as text (larger
 * than --max-output) is not read. A figure shown twice in a cell (as the
 * value and by the inline backend) is listed once.
 */
static void summary_descriptions(struct buf *b, const json_t *doc)
{
	const json_t *o, *prev = NULL;
	size_t i, listed = 0, more = 0;
	json_int_t prev_cell = -1;

	json_array_foreach(json_object_get(doc, "outputs"), i, o) {
		const json_t *data = json_object_get(o, "data");
		const json_t *chart = json_object_get(data, "application/vnd.nbrun.chart+json");
		const json_t *table = json_object_get(data, "application/vnd.nbrun.table+json");
		const json_t *d = json_is_object(chart) ? chart : json_is_object(table) ? table : NULL;
		json_int_t cell = json_integer_value(json_object_get(o, "cell"));

		if (!d || (prev && cell == prev_cell && json_equal(d, prev)))
			continue;
		prev = d;
		prev_cell = cell;
		if (listed == SUMMARY_DESCS) {
			more++;
			continue;
		}
		if (!listed++ && b->len)
			buf_puts(b, "\n");
		if (d == chart)
			summary_chart(b, chart, cell);
		else
			summary_table(b, table, cell);
	}
	if (more)
		buf_printf(b, "... and %zu more charts and tables\n", more);
}

/* The concise text a model reads first: stdout, values, the error, what came back. */
static char *summary_of(const json_t *doc)
{
	struct buf b = BUF_INIT(SUMMARY_MAX);
	const char *status = json_string_value(json_object_get(doc, "status"));
	json_t *e, *err = json_object_get(doc, "error");
	size_t i, n;

	summary_add(&b, "stdout:\n", json_string_value(json_object_get(doc, "stdout")), SUMMARY_STDOUT);
	summary_add(&b, "stderr:\n", json_string_value(json_object_get(doc, "stderr")), SUMMARY_STDERR);
	n = json_array_size(json_object_get(doc, "results"));
	json_array_foreach(json_object_get(doc, "results"), i, e)
		if (i + SUMMARY_VALUES >= n)
			summary_add(&b, "result:\n", json_string_value(json_object_get(e, "text")),
				    SUMMARY_VALUE);
	summary_descriptions(&b, doc);
	if (json_is_object(err)) {
		buf_printf(&b, "%serror: %s: %s\n", b.len ? "\n" : "",
			   json_string_value(json_object_get(err, "name")) ?: "",
			   json_string_value(json_object_get(err, "value")) ?: "");
		summary_add(&b, "traceback:\n", json_string_value(json_object_get(err, "traceback")),
			    SUMMARY_TRACEBACK);
	}
	if (status && strcmp(status, "ok") && strcmp(status, "error"))
		buf_printf(&b, "%srun ended: %s: %s\n", b.len ? "\n" : "", status,
			   json_string_value(json_object_get(doc, "message")) ?: "");
	n = json_array_size(json_object_get(doc, "images"));
	if (n)
		buf_printf(&b, "%simages: %zu (in the content that follows)\n", b.len ? "\n" : "", n);
	n = json_array_size(json_object_get(doc, "files"));
	if (n)
		buf_printf(&b, "%sfiles written under /mnt/data:\n", b.len ? "\n" : "");
	json_array_foreach(json_object_get(doc, "files"), i, e) {
		const char *p = json_string_value(json_object_get(e, "path"));
		if (i == SUMMARY_LISTED) {
			buf_printf(&b, "  ... and %zu more\n", n - i);
			break;
		}
		buf_printf(&b, "  /mnt/data/%s (%lld bytes)\n", p && !strncmp(p, "files/", 6) ? p + 6 : "?",
			   (long long)json_integer_value(json_object_get(e, "bytes")));
	}
	json_array_foreach(json_object_get(doc, "skipped"), i, e) {
		if (i == 10)
			break;
		buf_printf(&b, "not exported: %.200s (%.200s)\n",
			   json_string_value(json_object_get(e, "path")) ?: "?",
			   json_string_value(json_object_get(e, "reason")) ?: "?");
	}
	if (!b.len)
		buf_puts(&b, "(the code ran and printed nothing)\n");
	return buf_steal(&b);
}

/* The result document less what only the HTTP API means (url, content_base64). */
static void strip_refs(json_t *doc)
{
	static const char *const lists[] = { "images", "files" };
	json_t *e;
	size_t i;

	for (size_t l = 0; l < 2; l++)
		json_array_foreach(json_object_get(doc, lists[l]), i, e) {
			json_object_del(e, "url");
			json_object_del(e, "content_base64");
		}
}

json_t *mcp_result_of(const struct mcp_call_ctx *cc, json_t *doc, const char *dir_id)
{
	struct mcp_budget b = { MCP_IMAGE_ALL, MCP_EMBED_ALL };
	const char *run_id = dir_id ? dir_id : json_string_value(json_object_get(doc, "run_id"));
	const char *status = json_string_value(json_object_get(doc, "status"));
	json_t *content = json_array(), *e, *out = NULL;
	char *summary = summary_of(doc);
	int run_fd = -1;
	size_t i;

	if (!content || !summary || !run_id || !wire_run_id_valid(run_id))
		goto out;
	json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", summary));
	run_fd = openat(cc->s->runs_fd, run_id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (run_fd >= 0) {
		json_array_foreach(json_object_get(doc, "images"), i, e)
			add_image(content, cc, run_fd, run_id, e, &b);
		json_array_foreach(json_object_get(doc, "files"), i, e) {
			const char *p = json_string_value(json_object_get(e, "path"));
			if (p && !strncmp(p, "files/", 6))
				mcp_add_resource(content, cc, run_fd, run_id, p, p + 6, mcp_mime_of(p),
					     json_integer_value(json_object_get(e, "bytes")), &b);
		}
	}
	strip_refs(doc);
	out = json_pack("{s:O, s:b}", "content", content, "isError", !status || strcmp(status, "ok"));
	if (out && mcp_version_since(cc->version, "2025-06-18"))
		json_object_set(out, "structuredContent", doc);
out:
	if (run_fd >= 0)
		close(run_fd);
	json_decref(content);
	free(summary);
	return out;
}

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
	json_t *args = json_object_get(params, "arguments"), *body = NULL, *out = NULL;
	struct serve_reply reply = { 0, NULL, 0 };
	struct serve_request req;
	const struct tool *t = NULL;
	const char *key;
	json_t *v;
	char why[512], tmp_root[4096], *text = NULL;

	for (size_t i = 0; name && i < N_TOOLS; i++)
		if (!strcmp(tools[i].name, name) && tool_offered(&tools[i], cc->s))
			t = &tools[i];
	if (t && t->kind >= TOOL_SESSION_OPEN) {
		json_object_foreach(args, key, v) {
			size_t i;
			for (i = 0; t->keys[i] && strcmp(t->keys[i], key); i++)
				;
			if (json_is_object(args) && !t->keys[i]) {
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
	if (!args)
		args = json_object();
	else
		json_incref(args);
	body = args ? tool_body(t, args, why, sizeof(why)) : NULL;
	json_decref(args);
	if (!body)
		return mcp_tool_arg_error(cc, code, msg, msglen, why);
	text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text) {
		snprintf(msg, msglen, "out of memory");
		return NULL;
	}
	snprintf(tmp_root, sizeof(tmp_root), "%s/tmp", cc->s->state_dir);
	if (serve_request_parse(&req, &reply, cc->s, text, strlen(text), tmp_root) < 0) {
		free(text);
		snprintf(why, sizeof(why), "%s: %s", t->name,
			 json_string_value(json_object_get(reply.body, "error")) ?: "bad arguments");
		if (reply.status == 400)
			out = mcp_tool_arg_error(cc, code, msg, msglen, why);
		else
			snprintf(msg, msglen, "%s", why);
		json_decref(reply.body);
		return out;
	}
	free(text);
	req.cancel = cc->cancel;
	req.progress = on_phase;
	req.payload = cc;
	serve_owner_hex(req.owner, cc->s, cc->tenant); /* its resources are its tenant's only */
	serve_api_run(&reply, cc->s, &req);
	serve_request_free(&req);
	if (*cc->cancel) {
		serve_info("nbrun: mcp: %s cancelled: its run stopped and its sandbox is removed",
			t->name);
		*code = 0;
	} else if (reply.status == 200) {
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
	data = read_below(run_fd, rel, MCP_RESOURCE_MAX, &len);
	close(run_fd);
	if (!data) {
		snprintf(msg, msglen, "resource missing or larger than %u MiB: %.200s",
			 MCP_RESOURCE_MAX >> 20, uri);
		return NULL;
	}
	r = resource_contents(uri, mcp_mime_of(rel), data, len);
	free(data);
	if (r)
		out = json_pack("{s:[o]}", "contents", r);
	if (!out) {
		*code = MCP_INTERNAL_ERROR;
		snprintf(msg, msglen, "out of memory");
	}
	return out;
}
