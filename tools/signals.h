/* signals.h — how the tools stop on SIGINT, SIGTERM and SIGHUP.
 *
 * The first signal cancels the reader and loaders a command registered
 * (their blocked reads wake at once and their next call returns
 * WDS_ERR_CANCELLED) and sets a flag the command's loops check; the
 * command then stops its pipe: commands (closing its handles), removes its
 * temporary files, says on stderr what it finished, and exits with
 * 128 + the signal (130 for SIGINT, 143 for SIGTERM). A command that has
 * registered nothing and not asked to defer is simply ended by the signal
 * (nothing of its own to clean up). A second signal always ends the
 * process at once. pipe: commands never outlive the process, whatever ends
 * it: see shards/source.c (the warden). */
#ifndef WDS_TOOLS_SIGNALS_H
#define WDS_TOOLS_SIGNALS_H

#include "wds/loader.h"
#include "wds/reader.h"

/* Installs the handlers (once per process). */
void tool_signals_install(void);

/* The token the first signal sets (async-signal-safe), for work that has no
 * handle to register, such as an s3:// listing (tool_expand_specs); NULL
 * before tool_signals_install. */
const struct wds__cancel *tool_signals_cancel(void);

/* The handles a signal cancels; slot 0..3 for loaders. Forget a handle
 * (NULL) before closing it: that waits for a handler using it to finish. */
void tool_signals_reader(wds_reader *r);
void tool_signals_loader(int slot, wds_loader *l);

/* 1: the command checks tool_signal_caught() itself, so a signal only sets
 * the flag even when no handle is registered. */
void tool_signals_defer(int on);

/* The signal caught (0 if none). */
int tool_signal_caught(void);

/* 128 + the signal caught. */
int tool_signal_status(void);

/* "SIGINT", "SIGTERM", ... */
const char *tool_signal_name(void);

/* Prints "wds CMD: interrupted by SIGINT; " and what follows (what was
 * finished) on stderr, and returns tool_signal_status(). */
int tool_interrupted(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
