/* signals.c — SIGINT, SIGTERM and SIGHUP in the tools (see signals.h). */
#include "signals.h"

#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "shards/cancel.h"

#define NLOADERS 4

/* Atomic, not volatile sig_atomic_t: other threads read it too. */
static atomic_int caught;
static _Atomic(wds_reader *) reader;
static _Atomic(wds_loader *) loaders[NLOADERS];
static atomic_int defer;
static atomic_int in_handler; /* handlers running: a handle being forgotten
                                 is freed only once none may touch it */
static wds__cancel token;     /* tool_signals_cancel() */
static atomic_int token_ready;

static void on_signal(int sig) {
  if (atomic_load(&caught)) { /* the second: end now */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  atomic_store(&caught, sig);
  if (atomic_load(&token_ready))
    wds__cancel_set(&token); /* async-signal-safe */
  atomic_fetch_add(&in_handler, 1);
  int any = atomic_load(&defer);
  wds_reader *r = atomic_load(&reader);
  if (r) {
    wds_reader_cancel(r); /* async-signal-safe */
    any = 1;
  }
  for (int i = 0; i < NLOADERS; i++) {
    wds_loader *l = atomic_load(&loaders[i]);
    if (l) {
      wds_loader_cancel(l); /* async-signal-safe */
      any = 1;
    }
  }
  atomic_fetch_sub(&in_handler, 1);
  if (!any) { /* nobody will look at the flag: end as the default would */
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

void tool_signals_install(void) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  if (!atomic_load(&token_ready)) {
    wds__cancel_init(&token); /* works without its eventfd too */
    atomic_store(&token_ready, 1);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    sigaddset(&sa.sa_mask, sigs[i]); /* one handler at a time */
  /* SA_RESTART: stdio writes and waits are not broken by EINTR; the handles'
   * blocked reads are woken by their cancel, not by the signal. */
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
    struct sigaction old;
    /* A signal ignored by whoever started us (nohup) stays ignored. */
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
      continue;
    sigaction(sigs[i], &sa, NULL);
  }
}

static void quiesce(void) {
  while (atomic_load(&in_handler) > 0) {
  }
}

void tool_signals_reader(wds_reader *r) {
  atomic_store(&reader, r);
  if (!r)
    quiesce();
}

void tool_signals_loader(int slot, wds_loader *l) {
  if (slot >= 0 && slot < NLOADERS)
    atomic_store(&loaders[slot], l);
  if (!l)
    quiesce();
}

const struct wds__cancel *tool_signals_cancel(void) {
  return atomic_load(&token_ready) ? &token : NULL;
}

void tool_signals_defer(int on) { atomic_store(&defer, on); }

int tool_signal_caught(void) { return atomic_load(&caught); }

int tool_signal_status(void) { return 128 + atomic_load(&caught); }

const char *tool_signal_name(void) {
  switch (atomic_load(&caught)) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  default:
    return "a signal";
  }
}

int tool_interrupted(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "wds %s: interrupted by %s; ", cmd, tool_signal_name());
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return tool_signal_status();
}
