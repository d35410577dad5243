/* SPDX-License-Identifier: MIT */
/* STUB: nbrun parse. */
#include "cli.h"

int cmd_parse(int argc, char **argv)
{
	return cli_usage_error("parse", "not implemented");
}
