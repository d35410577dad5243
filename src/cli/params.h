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
 * A YAML document read as papermill reads -y and -b (PyYAML's SafeLoader
 * without timestamps, YAML 1.1 scalars: yes/no/on/off booleans, 0x, 0b,
 * octal and base-60 integers of any size, .inf and .nan): the mapping it
 * holds, or NULL with a one-line reason in err. JSON is YAML.
 */
json_t *params_yaml_load(const char *text, size_t len, char *err, size_t errlen);

/*
 * Parameters in papermill's order of precedence, whatever the order on the
 * command line: -b documents, then -y, then -p, then -r (a later layer
 * wins, and within a layer the later option).
 */
struct params {
	json_t *base64; /* -b */
	json_t *yaml; /* -y */
	json_t *typed; /* -p */
	json_t *raw;  /* -r */
};

int params_init(struct params *p);
void params_free(struct params *p);
/* The merged object (a new reference), or NULL when out of memory. */
json_t *params_final(const struct params *p);

#endif
