/* SPDX-License-Identifier: MIT */
/* The exit codes a run or an error ends with (docs/cli.md has the table). */
#include "cli.h"

int cli_exit_for_status(enum nbrun_status st)
{
	switch (st) {
	case NBRUN_STATUS_OK: return CLI_EXIT_OK;
	case NBRUN_STATUS_ERROR: return CLI_EXIT_RAISED;
	case NBRUN_STATUS_TIMEOUT:
	case NBRUN_STATUS_OOM: return CLI_EXIT_LIMIT;
	case NBRUN_STATUS_FAILED: return CLI_EXIT_FAILED;
	}
	return CLI_EXIT_FAILED;
}

int cli_exit_for_error(int err)
{
	switch (err) {
	case NBRUN_EINVAL: return CLI_EXIT_USAGE;
	case NBRUN_EENGINE:
	case NBRUN_ENOIMAGE: return CLI_EXIT_ENGINE;
	case NBRUN_ECANCELLED: return CLI_EXIT_INTERRUPTED;
	default: return CLI_EXIT_FAILED;
	}
}
