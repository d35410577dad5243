/* SPDX-License-Identifier: MIT */
/* MIME types and the file name extensions that go with them, in one table. */
#ifndef NBRUN_MIME_H
#define NBRUN_MIME_H

/* The type of a file by the extension of its name, in any case;
 * "application/octet-stream" when the name has none the table knows. */
const char *mime_of_name(const char *name);

/* The extension (without its dot) a file of this type is named with, or
 * NULL for a type the table lacks. */
const char *mime_extension(const char *mime);

#endif
