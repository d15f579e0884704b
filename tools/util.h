/* util.h — helpers shared by the wds subcommands, and the stdout checks
 * wds-train links too (tool_stdout_init_prog). */
#ifndef WDS_TOOLS_UTIL_H
#define WDS_TOOLS_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "opts.h"
#include "wds/spec.h"

int tool_cmd_expand(int argc, char **argv);
int tool_cmd_ls(int argc, char **argv);
int tool_cmd_bench(int argc, char **argv);
int tool_cmd_synth(int argc, char **argv);
int tool_cmd_batches(int argc, char **argv);
int tool_cmd_write(int argc, char **argv);
int tool_cmd_index(int argc, char **argv);
int tool_cmd_verify(int argc, char **argv);
int tool_cmd_cat(int argc, char **argv);

/* --allow-pipe-from-files: pipe: commands read from @FILE lists and indexes
 * are run (wds/spec.h); every command that reads specs takes it. */
extern int tool_allow_pipe_from_files;
#define TOOL_OPT_ALLOW_PIPE 900
#define TOOL_ALLOW_PIPE_OPTION                                                 \
  { "allow-pipe-from-files", no_argument, 0, TOOL_OPT_ALLOW_PIPE }
#define TOOL_ALLOW_PIPE_HELP                                                   \
  "  --allow-pipe-from-files  run the pipe: commands read from @FILE lists\n"  \
  "                 and indexes (refused by default: such files may come\n"    \
  "                 from anywhere)\n"

/* Expands every SPEC argument in turn into one list (pipe: commands from
 * @FILEs refused unless tool_allow_pipe_from_files). An s3:// listing obeys
 * the command's read_timeout_ms and retries (as a config's: 0 = default,
 * retries < 0 none), as its shard reads do, and a signal (signals.h)
 * cancels it. On error prints "wds CMD: message" and returns 1; cancelled
 * by a signal, prints "wds CMD: interrupted by SIG...; nothing was read" and
 * returns tool_signal_status(). */
int tool_expand_specs(const char *cmd, char **specs, int nspecs,
                      size_t max_urls, int read_timeout_ms, int retries,
                      wds_url_list *out);

/* fprintf(stderr, ...) for a message that quotes untrusted text (a file
 * or class folder name, a manifest value): the message is written with its
 * control characters and bytes that are not UTF-8 as \xHH (base/text.h),
 * but for a final newline. */
void tool_eprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic seconds. */
double tool_now(void);

/* ---- stdout ----
 * A command's results go to stdout, and output that cannot be written is an
 * error, as in coreutils: "wds CMD: cannot write the output: REASON" on
 * stderr and exit status 1 (`> /dev/full`, a full disk, `ulimit -f`, a
 * closed descriptor). A reader that goes away (`| head`) ends the process
 * by SIGPIPE, quietly, as it does coreutils; where SIGPIPE is ignored
 * (inherited), EPIPE is a write error like any other. */

/* Called first by every command: registers (once) an exit handler that
 * flushes and closes stdout and, if writing it failed at any time, prints
 * the message (unless already printed) and ends the process with status 1
 * whatever the command returned. */
void tool_stdout_init(const char *cmd);

/* 0 while writing stdout has not failed; -1 once it has (printing the
 * message, once). Call it right after writing (its errno is the write's),
 * in loops that print per item, to stop early. */
int tool_stdout_check(void);

/* Flushes stdout, then as tool_stdout_check(). */
int tool_stdout_flush(void);

/* As tool_stdout_init, for a program whose messages start "PROG: "
 * (wds-train) rather than "wds CMD: ". */
void tool_stdout_init_prog(const char *prog);

/* The program already said why it fails (a run that failed writing its
 * log): the exit handler still exits 1 on a failed stdout, silently. */
void tool_stdout_said(void);

#endif
