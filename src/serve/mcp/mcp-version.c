/* SPDX-License-Identifier: MIT */
/* The protocol revisions nbrun speaks, and what each allows. */
#include <string.h>

#include "mcp-call.h"

/* Newest first; the first is what a client asking for an unknown revision gets. */
static const char *const mcp_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05",
					    "2024-10-07", NULL };

bool mcp_version_known(const char *v)
{
	for (size_t i = 0; v && mcp_versions[i]; i++)
		if (!strcmp(v, mcp_versions[i]))
			return true;
	return false;
}

bool mcp_version_since(const char *v, const char *since)
{
	return strcmp(v ? v : mcp_versions[0], since) >= 0; /* ISO dates compare as text */
}

/* JSON-RPC batches are in revision 2025-03-26 (and allowed by the JSON-RPC of the ones before); 2025-06-18 removed them. */
bool mcp_version_batches(const char *v)
{
	return v && !mcp_version_since(v, "2025-06-18");
}

const char *mcp_version_negotiate(const char *asked)
{
	for (size_t i = 0; asked && mcp_versions[i]; i++)
		if (!strcmp(asked, mcp_versions[i]))
			return mcp_versions[i];
	return mcp_versions[0];
}
