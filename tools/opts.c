/* opts.c — exact long option names and one-line usage errors (opts.h). */
#include "opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/size.h"

int tool_usage_error(const char *prog, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s: ", prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "; see '%s --help'\n", prog);
  return 2;
}

/* The long option named by text (no leading "--"; up to '=' or the end)
 * exactly, or NULL. */
static const struct option *exact(const struct option *longopts,
                                  const char *text, size_t n) {
  for (const struct option *o = longopts; o && o->name; o++)
    if (strlen(o->name) == n && memcmp(o->name, text, n) == 0)
      return o;
  return NULL;
}

/* The options text is a prefix of, for "did you mean". */
static void suggest(const struct option *longopts, const char *text, size_t n,
                    char *out, size_t cap) {
  size_t used = 0, count = 0;
  out[0] = '\0';
  for (const struct option *o = longopts; o && o->name; o++) {
    if (strncmp(o->name, text, n) != 0)
      continue;
    int w = snprintf(out + used, cap - used, "%s'--%s'", count ? " or " : "",
                     o->name);
    if (w < 0 || (size_t)w >= cap - used) {
      out[used] = '\0';
      return;
    }
    used += (size_t)w;
    count++;
  }
}

/* A long option argument ("--name" or "--name=value"): checks the name is
 * exact. Returns 0, or TOOL_OPT_BAD after printing the error. */
static int check_long(const char *prog, const struct option *longopts,
                      const char *arg) {
  const char *name = arg + 2, *eq = strchr(name, '=');
  size_t n = eq ? (size_t)(eq - name) : strlen(name);
  const struct option *o = exact(longopts, name, n);
  if (o) {
    if (eq && o->has_arg == no_argument)
      return tool_usage_error(prog, "option '--%s' takes no value ('%s')",
                              o->name, arg),
             TOOL_OPT_BAD;
    return 0;
  }
  char near[256];
  suggest(longopts, name, n, near, sizeof near);
  if (near[0])
    tool_usage_error(prog,
                     "unknown option '--%.*s' (did you mean %s? options are "
                     "spelled in full)",
                     (int)n, name, near);
  else
    tool_usage_error(prog, "unknown option '--%.*s'", (int)n, name);
  return TOOL_OPT_BAD;
}

int tool_getopt(const char *prog, int argc, char **argv, const char *shortopts,
                const struct option *longopts) {
  /* ':' first: a missing value is ':' rather than '?', so it can be told
   * from an unknown option. */
  char spec[128];
  snprintf(spec, sizeof spec, ":%s", shortopts ? shortopts : "");
  opterr = 0;
  /* GNU getopt moves non-options past the options as it goes; the next
   * option to parse is the first argument at or after optind that starts
   * with '-'. Check a long one before getopt_long can take a prefix of it.
   * ("--" ends the options; "-" alone is an operand.) */
  int posix = getenv("POSIXLY_CORRECT") != NULL;
  for (int i = optind; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0)
      break;
    if (a[0] != '-' || a[1] == '\0') {
      if (posix) /* the first operand ends the options there */
        break;
      continue;
    }
    if (a[1] == '-' && check_long(prog, longopts, a) != 0)
      return TOOL_OPT_BAD;
    break;
  }
  int prev = optind;
  int c = getopt_long(argc, argv, spec, longopts, NULL);
  if (c == ':' || c == '?') {
    /* The offending argument: the last one getopt consumed (a short option
     * inside a cluster leaves optind where it was). */
    const char *a = optind > prev && optind - 1 < argc ? argv[optind - 1] : "";
    if (c == ':') {
      if (a[0] == '-' && a[1] == '-')
        tool_usage_error(prog, "option '%s' needs a value", a);
      else
        tool_usage_error(prog, "option '-%c' needs a value", optopt);
    } else if (optopt && !(a[0] == '-' && a[1] == '-')) {
      tool_usage_error(prog, "unknown option '-%c'", optopt);
    } else {
      tool_usage_error(prog, "bad option '%s'", a);
    }
    return TOOL_OPT_BAD;
  }
  return c;
}

int tool_parse_u64(const char *s, uint64_t *out) {
  return wds__parse_u64(s, out);
}

int tool_parse_size(const char *s, size_t *out) {
  uint64_t v;
  if (tool_parse_u64(s, &v) != 0 || v > SIZE_MAX)
    return -1;
  *out = (size_t)v;
  return 0;
}
