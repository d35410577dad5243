/* SPDX-License-Identifier: MIT */
/* Notebook parameters from the command line, by papermill's rules. */
#ifndef NBRUN_CLI_PARAMS_H
#define NBRUN_CLI_PARAMS_H

#include <stdbool.h>

#include <jansson.h>

/*
 * papermill's -p typing: "True", "False" and "None" as themselves, then what
 * Python's int() accepts (an integer of any size, kept exact), then what
 * float() accepts (inf and nan included), else the text as a string.
 * Values JSON cannot hold are jsonx markers (jsonx.h). NULL when value is
 * not UTF-8 (it cannot be represented) or out of memory.
 */
json_t *params_resolve_type(const char *value);

/* A name papermill's Python translator can assign to: an ASCII identifier, not a keyword. */
bool params_name_ok(const char *name);

/*
 * Parameters in papermill's order of precedence, whatever the order on the
 * command line: -y documents, then -p, then -r (a later layer wins, and
 * within a layer the later option).
 */
struct params {
	json_t *yaml; /* -y */
	json_t *typed; /* -p */
	json_t *raw;  /* -r */
};

int params_init(struct params *p);
void params_free(struct params *p);
/* The merged object (a new reference), or NULL when out of memory. */
json_t *params_final(const struct params *p);

#endif
