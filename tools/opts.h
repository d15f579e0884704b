/* opts.h — the option grammar every tool shares (`wds <cmd>`, wds-train).
 *
 * Long options are spelled in full: getopt_long would take an unambiguous
 * prefix (`--epoch` for `--epochs`), and with two commands where the
 * prefix is itself an option (`wds batches --epoch`) a typo silently means
 * something else. tool_getopt accepts exact names only.
 *
 * A usage error is one line on stderr naming the problem and the help to
 * read, and exit status 2:
 *   wds batches: unknown option '--epoc' (did you mean '--epoch' or
 *   '--epochs'? options are spelled in full); see 'wds batches --help'
 * PROG is the command as the user typed it: "wds batches", "wds-train".
 *
 * Dependency-free (libc only): wds-train links it as well as wds. */
#ifndef WDS_TOOLS_OPTS_H
#define WDS_TOOLS_OPTS_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

/* What tool_getopt returns after printing a usage error. */
#define TOOL_OPT_BAD '?'

/* getopt_long(argc, argv, shortopts, longopts, NULL) (shortopts without a
 * leading ':' or '+'), but a long option must be spelled exactly as in
 * longopts, and every mistake (an unknown, abbreviated or ambiguous option,
 * a missing value, a value given to a flag) is printed as a usage error,
 * after which it returns TOOL_OPT_BAD: the caller returns 2. Returns the
 * option's value, or -1 after the last option. Call it with optind = 1 the
 * first time (as getopt_long). */
int tool_getopt(const char *prog, int argc, char **argv, const char *shortopts,
                const struct option *longopts);

/* Prints "PROG: MESSAGE; see 'PROG --help'" on stderr; returns 2. */
int tool_usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parse a decimal option value (digits only); return 0 on success, -1 for
 * anything else (signs, blanks, junk, overflow). */
int tool_parse_u64(const char *s, uint64_t *out);
int tool_parse_size(const char *s, size_t *out);

#endif
