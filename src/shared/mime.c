/* SPDX-License-Identifier: MIT */
/* MIME types by file name extension, and back. */
#include <string.h>
#include <strings.h>

#include "mime.h"

/* A type with more than one extension has its usual one first: that is the one files get. */
static const struct {
	const char *ext;
	const char *mime;
} mime_table[] = {
	{ "csv", "text/csv" },
	{ "tsv", "text/tab-separated-values" },
	{ "txt", "text/plain" },
	{ "log", "text/plain" },
	{ "md", "text/markdown" },
	{ "html", "text/html" },
	{ "json", "application/json" },
	{ "xml", "application/xml" },
	{ "py", "text/x-python" },
	{ "ipynb", "application/x-ipynb+json" },
	{ "png", "image/png" },
	{ "jpg", "image/jpeg" },
	{ "jpeg", "image/jpeg" },
	{ "gif", "image/gif" },
	{ "webp", "image/webp" },
	{ "svg", "image/svg+xml" },
	{ "pdf", "application/pdf" },
	{ "parquet", "application/vnd.apache.parquet" },
	{ "xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" },
	{ "zip", "application/zip" },
};

const char *mime_of_name(const char *name)
{
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < sizeof(mime_table) / sizeof(mime_table[0]); i++)
		if (!strcasecmp(dot + 1, mime_table[i].ext))
			return mime_table[i].mime;
	return "application/octet-stream";
}

const char *mime_extension(const char *mime)
{
	for (size_t i = 0; i < sizeof(mime_table) / sizeof(mime_table[0]); i++)
		if (!strcmp(mime, mime_table[i].mime))
			return mime_table[i].ext;
	return NULL;
}
