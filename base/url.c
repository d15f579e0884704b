/* url.c — see url.h. */
#include "base/url.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/strbuf.h"
#include "base/text.h"

static int starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

int wds__url_has_scheme(const char *url) {
  const char *p = url;
  while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
         (*p >= '0' && *p <= '9') || *p == '+' || *p == '-' || *p == '.')
    p++;
  return p > url && starts_with(p, "://");
}

/* The path of a file:// URL, or NULL when it has none that is absolute. */
static const char *file_path(const char *url) {
  const char *p = url + 7;
  if (starts_with(p, "localhost/"))
    p += 9;
  return *p == '/' ? p : NULL;
}

int wds__url_is_bad_file(const char *url) {
  return starts_with(url, "file://") && !file_path(url);
}

const char *wds__url_local_path(const char *url) {
  if (strcmp(url, "-") == 0 || starts_with(url, "pipe:"))
    return NULL;
  if (starts_with(url, "file://"))
    return file_path(url);
  return wds__url_has_scheme(url) ? NULL : url;
}

/* ---- shard identity ---- */

static int lower_c(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int hexval(int c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

static int unreserved(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

/* The %XX at s[i] of s[0..n) as a byte, or -1. */
static int pct_at(const char *s, size_t n, size_t i) {
  if (s[i] != '%' || i + 2 >= n)
    return -1;
  int h1 = hexval((unsigned char)s[i + 1]),
      h2 = hexval((unsigned char)s[i + 2]);
  return h1 < 0 || h2 < 0 ? -1 : h1 * 16 + h2;
}

/* s[0..n) with percent-encoding normalised: %XX of an unreserved character
 * decoded, other %XX written with upper-case digits. */
static void put_pct_normalised(wds__sbuf *b, const char *s, size_t n) {
  static const char hx[] = "0123456789ABCDEF";
  for (size_t i = 0; i < n; i++) {
    int c = pct_at(s, n, i);
    if (c < 0) {
      wds__sb_putc(b, s[i]);
    } else {
      if (unreserved(c)) {
        wds__sb_putc(b, (char)c);
      } else {
        char e[3] = {'%', hx[c >> 4], hx[c & 15]};
        wds__sb_putn(b, e, 3);
      }
      i += 2;
    }
  }
}

/* s[0..n) percent-decoded (an S3 key from an https URL). */
static void put_pct_decoded(wds__sbuf *b, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int c = pct_at(s, n, i);
    wds__sb_putc(b, c < 0 ? s[i] : (char)c);
    if (c >= 0)
      i += 2;
  }
}

/* The path s[0..n) (empty, or starting with '/') with its "." and ".."
 * segments removed as RFC 3986 5.2.4 does; "" becomes "/". */
static void put_path_without_dots(wds__sbuf *b, const char *s, size_t n) {
  size_t start = b->n;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1; /* s[i] == '/' */
    while (j < n && s[j] != '/')
      j++;
    size_t seg = j - i - 1;
    const char *sp = s + i + 1;
    if (seg == 1 && sp[0] == '.') {
      if (j == n)
        wds__sb_putc(b, '/');
    } else if (seg == 2 && sp[0] == '.' && sp[1] == '.') {
      /* drop the last segment written, with its '/' */
      if (!b->oom) {
        while (b->n > start && b->p[b->n - 1] != '/')
          b->n--;
        if (b->n > start)
          b->n--;
        if (b->p)
          b->p[b->n] = '\0';
      }
      if (j == n)
        wds__sb_putc(b, '/');
    } else {
      wds__sb_putn(b, s + i, j - i);
    }
    i = j;
  }
  if (!b->oom && b->n == start)
    wds__sb_putc(b, '/');
}

/* An AWS S3 https URL ("BUCKET.s3[.REGION].amazonaws.com/KEY",
 * "BUCKET.s3-REGION.amazonaws.com/KEY", or the path style
 * "s3[.REGION].amazonaws.com/BUCKET/KEY") as s3://BUCKET/KEY, its key
 * percent-decoded, into b. host is lower-case, without a port; path has
 * its dot segments removed. Returns 1, or 0 when it is not one. */
static int aws_s3(wds__sbuf *b, const char *host, size_t hn, const char *path,
                  size_t pn) {
  static const char tail[] = ".amazonaws.com";
  size_t tl = sizeof tail - 1, rest, lab = 0;
  if (hn <= tl || memcmp(host + hn - tl, tail, tl) != 0)
    return 0;
  rest = hn - tl; /* host[0..rest): "[BUCKET.]s3[.REGION]" or "s3-REGION" */
  for (;;) {      /* the first label that is "s3" or starts with "s3-" */
    size_t e = lab;
    while (e < rest && host[e] != '.')
      e++;
    if (e - lab >= 2 && host[lab] == 's' && host[lab + 1] == '3' &&
        (e - lab == 2 || host[lab + 2] == '-'))
      break;
    if (e >= rest)
      return 0;
    lab = e + 1;
  }
  if (pn < 2 || path[0] != '/')
    return 0;
  const char *bucket, *key;
  size_t bn, kn;
  if (lab > 0) { /* virtual-hosted */
    bucket = host;
    bn = lab - 1;
    key = path + 1;
    kn = pn - 1;
  } else { /* path style */
    bucket = path + 1;
    const char *sl = memchr(bucket, '/', pn - 1);
    if (!sl)
      return 0;
    bn = (size_t)(sl - bucket);
    key = sl + 1;
    kn = pn - 2 - bn;
  }
  if (bn == 0 || kn == 0)
    return 0;
  wds__sb_putn(b, "s3://", 5);
  wds__sb_putn(b, bucket, bn);
  wds__sb_putc(b, '/');
  put_pct_decoded(b, key, kn);
  return 1;
}

/* The identity of a URL with a scheme (see url.h). */
static char *scheme_identity(const char *url) {
  wds__sbuf b = {0};
  const char *sep = strstr(url, "://"), *auth = sep + 3;
  size_t sn = (size_t)(sep - url);
  for (size_t i = 0; i < sn; i++)
    wds__sb_putc(&b, (char)lower_c((unsigned char)url[i]));
  int http = b.p && strcmp(b.p, "http") == 0,
      https = b.p && strcmp(b.p, "https") == 0;
  if (b.p && strcmp(b.p, "s3") == 0) {
    /* s3://BUCKET/KEY: the bucket lower-case, the key as it is (S3 keys
     * are names, not paths: no dot-segment or percent rules apply) */
    const char *k = auth + strcspn(auth, "/");
    wds__sb_putn(&b, "://", 3);
    for (const char *p = auth; p < k; p++)
      wds__sb_putc(&b, (char)lower_c((unsigned char)*p));
    wds__sb_putn(&b, k, strlen(k));
    return wds__sb_take(&b);
  }
  if (!http && !https) {
    wds__sb_putn(&b, sep, strlen(sep));
    return wds__sb_take(&b);
  }
  wds__sb_putn(&b, "://", 3);
  const char *aend = auth + strcspn(auth, "/?#"), *host = auth;
  for (const char *p = auth; p < aend; p++)
    if (*p == '@')
      host = p + 1;
  wds__sb_putn(&b, auth, (size_t)(host - auth)); /* userinfo@ as given */
  size_t host_at = b.n;
  /* host[:port]: lower-case, the scheme's default port (or an empty one)
   * dropped */
  const char *hend = aend, *colon = NULL;
  for (const char *p = host; p < aend; p++)
    if (*p == ':')
      colon = p;
    else if (*p == ']')
      colon = NULL; /* inside an IPv6 literal */
  if (colon) {
    const char *port = colon + 1;
    while (port + 1 < aend && *port == '0')
      port++;
    const char *dflt = http ? "80" : "443";
    size_t pl = (size_t)(aend - port);
    if (colon + 1 == aend ||
        (pl == strlen(dflt) && memcmp(port, dflt, pl) == 0))
      hend = colon;
  }
  for (const char *p = host; p < hend; p++)
    wds__sb_putc(&b, (char)lower_c((unsigned char)*p));
  size_t hn = b.n - host_at;
  /* the path: percent-encoding normalised, then dot segments removed */
  const char *path = aend, *pend = path + strcspn(path, "?#");
  wds__sbuf pb = {0}, pd = {0};
  put_pct_normalised(&pb, path, (size_t)(pend - path));
  put_path_without_dots(&pd, pb.p ? pb.p : "", pb.n);
  free(pb.p);
  const char *query = *pend == '?' ? pend : NULL;
  if (pb.oom || pd.oom || b.oom) {
    free(pd.p);
    free(b.p);
    return NULL;
  }
  wds__sbuf s3 = {0};
  if (https && !query && host == auth &&
      aws_s3(&s3, b.p + host_at, hn, pd.p, pd.n)) {
    free(pd.p);
    free(b.p);
    return wds__sb_take(&s3);
  }
  free(s3.p);
  wds__sb_putn(&b, pd.p, pd.n);
  free(pd.p);
  if (query)
    put_pct_normalised(&b, query, strcspn(query, "#"));
  return wds__sb_take(&b);
}

/* A command split into words as /bin/sh splits a simple command: on blanks,
 * '...' literal, "..." with \" \\ \$ \` escapes, \x outside quotes. Returns
 * the count, or -1 when it is more than one simple command of plain words
 * (a pipe, a redirection, $ or ` expansions, ;, &, parentheses, a comment)
 * or has more than max words. store holds strlen(s) + max bytes. */
static int split_words(const char *s, char **w, int max, char *store) {
  int n = 0;
  char *o = store;
  const char *p = s;
  for (;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    if (!*p)
      return n;
    if (n == max || *p == '#')
      return -1;
    w[n++] = o;
    while (*p && *p != ' ' && *p != '\t') {
      if (strchr("|&;<>()$`\n\r", *p))
        return -1;
      if (*p == '\'') {
        const char *e = strchr(p + 1, '\'');
        if (!e)
          return -1;
        memcpy(o, p + 1, (size_t)(e - p - 1));
        o += e - p - 1;
        p = e + 1;
      } else if (*p == '"') {
        for (p++; *p && *p != '"'; p++) {
          if (*p == '$' || *p == '`')
            return -1;
          if (*p == '\\' && p[1] && strchr("\"\\$`", p[1]))
            p++;
          *o++ = *p;
        }
        if (*p != '"')
          return -1;
        p++;
      } else if (*p == '\\') {
        if (!p[1])
          return -1;
        *o++ = p[1];
        p += 2;
      } else {
        *o++ = *p++;
      }
    }
    *o++ = '\0';
  }
}

static int one_of(const char *w, const char *const *list) {
  for (; *list; list++)
    if (strcmp(w, *list) == 0)
      return 1;
  return 0;
}

static int is_http_url(const char *u) {
  return strncasecmp(u, "http://", 7) == 0 ||
         strncasecmp(u, "https://", 8) == 0;
}

/* curl [OPTIONS] URL, writing the body to stdout. */
static const char *curl_url(char **w, int n) {
  static const char *const flags[] = {"--silent",         "--show-error",
                                      "--location",       "--fail",
                                      "--fail-with-body", "--insecure",
                                      "--compressed",     "--no-progress-meter",
                                      "--globoff",        "--http1.1",
                                      "--http2",          "--ipv4",
                                      "--ipv6",           NULL};
  static const char *const with_arg[] = {"--retry",
                                         "--retry-delay",
                                         "--retry-max-time",
                                         "--max-time",
                                         "-m",
                                         "--connect-timeout",
                                         "--speed-limit",
                                         "--speed-time",
                                         "-Y",
                                         "-y",
                                         "--max-redirs",
                                         NULL};
  const char *url = NULL;
  for (int i = 1; i < n; i++) {
    const char *a = w[i];
    if (strcmp(a, "--retry-all-errors") == 0 || one_of(a, flags))
      continue;
    if (one_of(a, with_arg)) {
      if (++i >= n)
        return NULL;
      continue;
    }
    if ((strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) && i + 1 < n &&
        strcmp(w[i + 1], "-") == 0) {
      i++;
      continue;
    }
    if (strcmp(a, "-o-") == 0)
      continue;
    if (a[0] == '-' && a[1] && a[1] != '-') { /* -sSLf, -sLo - */
      size_t k = 1;
      while (a[k] && strchr("sSLfkg", a[k]))
        k++;
      if (a[k] == '\0')
        continue;
      if (a[k] == 'o' && ((a[k + 1] == '-' && !a[k + 2]) ||
                          (!a[k + 1] && i + 1 < n && !strcmp(w[i + 1], "-")))) {
        i += a[k + 1] ? 0 : 1;
        continue;
      }
      return NULL;
    }
    if (a[0] == '-' || url || !is_http_url(a))
      return NULL;
    url = a;
  }
  return url;
}

/* wget [OPTIONS] -O - URL (the body to stdout). */
static const char *wget_url(char **w, int n) {
  static const char *const flags[] = {
      "-q", "--quiet", "-nv", "--no-verbose", "--no-check-certificate", NULL};
  const char *url = NULL;
  int to_stdout = 0;
  for (int i = 1; i < n; i++) {
    const char *a = w[i];
    if (one_of(a, flags))
      continue;
    if (!strcmp(a, "-O-") || !strcmp(a, "-qO-") ||
        !strcmp(a, "--output-document=-")) {
      to_stdout = 1;
      continue;
    }
    if ((!strcmp(a, "-O") || !strcmp(a, "-qO") ||
         !strcmp(a, "--output-document")) &&
        i + 1 < n && !strcmp(w[i + 1], "-")) {
      to_stdout = 1;
      i++;
      continue;
    }
    if (!strncmp(a, "--tries=", 8) || !strncmp(a, "--timeout=", 10))
      continue;
    if ((!strcmp(a, "-t") || !strcmp(a, "-T")) && ++i < n)
      continue;
    if (a[0] == '-' || url || !is_http_url(a))
      return NULL;
    url = a;
  }
  return to_stdout ? url : NULL;
}

/* aws s3 cp [OPTIONS] s3://BUCKET/KEY - */
static const char *aws_url(char **w, int n) {
  static const char *const flags[] = {"--quiet", "--no-progress",
                                      "--only-show-errors", "--no-sign-request",
                                      NULL};
  static const char *const with_arg[] = {"--region", "--endpoint-url",
                                         "--profile", NULL};
  if (n < 5 || strcmp(w[1], "s3") != 0 || strcmp(w[2], "cp") != 0)
    return NULL;
  const char *pos[2];
  int np = 0;
  for (int i = 3; i < n; i++) {
    if (one_of(w[i], flags))
      continue;
    if (one_of(w[i], with_arg)) {
      if (++i >= n)
        return NULL;
      continue;
    }
    if ((w[i][0] == '-' && w[i][1]) || np == 2)
      return NULL;
    pos[np++] = w[i];
  }
  if (np != 2 || strncmp(pos[0], "s3://", 5) != 0 || strcmp(pos[1], "-") != 0)
    return NULL;
  return pos[0];
}

char *wds__url_pipe_source(const char *url) {
  if (strncmp(url, "pipe:", 5) != 0)
    return NULL;
  const char *cmd = url + 5;
  enum { MAX_WORDS = 32 };
  char *w[MAX_WORDS];
  char *store = malloc(strlen(cmd) + MAX_WORDS + 1);
  if (!store)
    return NULL;
  int n = split_words(cmd, w, MAX_WORDS, store);
  const char *found = NULL;
  if (n >= 2) {
    const char *prog = strrchr(w[0], '/') ? strrchr(w[0], '/') + 1 : w[0];
    if (strcmp(prog, "curl") == 0)
      found = curl_url(w, n);
    else if (strcmp(prog, "wget") == 0)
      found = wget_url(w, n);
    else if (strcmp(prog, "aws") == 0)
      found = aws_url(w, n);
  }
  char *out = found ? strdup(found) : NULL;
  free(store);
  return out;
}

char *wds__url_identity(const char *url) {
  char *fetched = wds__url_pipe_source(url);
  const char *u = fetched ? fetched : url;
  char *id = wds__url_has_scheme(u) && !wds__url_local_path(u)
                 ? scheme_identity(u)
                 : strdup(u);
  free(fetched);
  return id;
}

/* ---- redaction for messages ---- */

static int ends_with_ci(const char *p, size_t n, const char *suffix) {
  size_t k = strlen(suffix);
  return n >= k && strncasecmp(p + n - k, suffix, k) == 0;
}

static int secret_param(const char *p, size_t n) {
  static const char *const exact[] = {"sig",     "key",    "apikey",
                                      "api_key", "passwd", "awsaccesskeyid",
                                      "code",    "auth"};
  static const char *const suffix[] = {"token", "signature", "secret",
                                       "password", "credential"};
  for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
    if (strlen(exact[i]) == n && strncasecmp(p, exact[i], n) == 0)
      return 1;
  for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++)
    if (ends_with_ci(p, n, suffix[i]))
      return 1;
  return 0;
}

/* Ends a URL's part inside text (a pipe: command quotes or spaces it). */
static int url_end(char c) {
  return c == '\0' || c == ' ' || c == '\t' || c == '\n' || c == '\'' ||
         c == '"';
}

/* A secret's span, [a, b) of the text: reported in order, without overlap,
 * by each of the scanners below. */
typedef void (*span_fn)(void *ctx, const char *a, const char *b);

/* The URLs' secrets in text: a password before an authority's last '@',
 * and the values of query parameters whose names say secret. */
static void url_secrets(const char *text, span_fn hide, void *ctx) {
  const char *p = text;
  while (*p) {
    if (p[0] == ':' && p[1] == '/' && p[2] == '/') {
      /* An authority: a password before its last '@' is hidden. */
      const char *a = p + 3, *e = a;
      while (!url_end(*e) && *e != '/' && *e != '?' && *e != '#')
        e++;
      const char *at = NULL;
      for (const char *q = a; q < e; q++)
        if (*q == '@')
          at = q;
      const char *colon = at ? memchr(a, ':', (size_t)(at - a)) : NULL;
      if (colon && colon + 1 < at)
        hide(ctx, colon + 1, at);
      p = e;
      continue;
    }
    if (*p == '?' || *p == '&' || *p == ';') {
      /* A query parameter: NAME=VALUE, the value hidden if NAME says
       * secret. */
      const char *n = p + 1, *eq = n;
      while (!url_end(*eq) && *eq != '=' && *eq != '&' && *eq != '#')
        eq++;
      if (*eq == '=' && secret_param(n, (size_t)(eq - n))) {
        const char *v = eq + 1, *ve = v;
        while (!url_end(*ve) && *ve != '&' && *ve != '#' && *ve != ';')
          ve++;
        if (ve > v)
          hide(ctx, v, ve);
        p = ve;
        continue;
      }
    }
    p++;
  }
}

/* ---- a command's secrets ---- */

static int contains_ci(const char *p, size_t n, const char *word) {
  size_t k = strlen(word);
  for (size_t i = 0; i + k <= n; i++)
    if (strncasecmp(p + i, word, k) == 0)
      return 1;
  return 0;
}

/* An option's, variable's or header's name that says its value is secret:
 * secret_param's names, and any that holds "secret" or "passw" or ends in
 * "key" after '_' or '-' (AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY,
 * x-api-key). */
static int secret_name(const char *p, size_t n) {
  return secret_param(p, n) || contains_ci(p, n, "secret") ||
         contains_ci(p, n, "passw") || ends_with_ci(p, n, "_key") ||
         ends_with_ci(p, n, "-key");
}

static int secret_header(const char *p, size_t n) {
  return (n == 13 && strncasecmp(p, "authorization", n) == 0) ||
         (n == 19 && strncasecmp(p, "proxy-authorization", n) == 0) ||
         (n == 6 && strncasecmp(p, "cookie", n) == 0) ||
         (n > 6 && strncasecmp(p, "x-amz-", 6) == 0) || secret_name(p, n);
}

static int name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static int is_quote(char c) { return c == '\'' || c == '"'; }

/* One word of a command, [ws, we), quotes included. */
typedef struct {
  const char *ws, *we;
  span_fn hide;
  void *ctx;
} cword;

/* Hides the value from v (after a quote there) to the word's end, less a
 * closing quote whose opening one comes before ("--user 'a:PASS'": PASS,
 * not its quote). */
static void hide_value(const cword *w, const char *v) {
  if (v < w->we && is_quote(*v))
    v++;
  char q = 0;
  for (const char *p = w->ws; p < v; p++) {
    if (!q && is_quote(*p))
      q = *p;
    else if (q && *p == q)
      q = 0;
    else if (!q && *p == '\\' && p + 1 < v)
      p++;
  }
  const char *e = w->we;
  if (q && e > v && e[-1] == q)
    e--;
  if (e > v)
    w->hide(w->ctx, v, e);
}

/* USER:PASS from v on: PASS hidden (a user alone has none). */
static void hide_userpass(const cword *w, const char *v) {
  const char *colon = memchr(v, ':', (size_t)(w->we - v));
  if (colon)
    hide_value(w, colon + 1);
}

/* "NAME: VALUE" from v on (after an optional quote): VALUE hidden when
 * NAME is a secret header's. Returns whether it was a header. */
static int hide_header(const cword *w, const char *v) {
  if (v < w->we && is_quote(*v))
    v++;
  const char *n = v;
  while (v < w->we && name_char(*v))
    v++;
  if (v == n || v >= w->we || *v != ':' || (v + 1 < w->we && v[1] == '/'))
    return 0; /* not NAME: (a URL's "scheme://" neither) */
  if (!secret_header(n, (size_t)(v - n)))
    return 1;
  for (v++; v < w->we && (*v == ' ' || *v == '\t'); v++) {
  }
  hide_value(w, v);
  return 1;
}

/* What the next word is, after an option that takes it. */
enum { NEXT_PLAIN, NEXT_USERPASS, NEXT_SECRET, NEXT_HEADER };

static int long_option_is(const char *n, size_t len, const char *const *names) {
  for (; *names; names++)
    if (strlen(*names) == len && strncmp(n, *names, len) == 0)
      return 1;
  return 0;
}

/* One word's secrets; returns what the next word is. */
static int word_secrets(const cword *w, int next) {
  const char *s = w->ws, *e = w->we;
  static const char *const userpass[] = {"user", "proxy-user", NULL};
  static const char *const secret[] = {
      "password",      "http-password", "ftp-password", "proxy-password",
      "oauth2-bearer", "pass",          "proxy-pass",   NULL};
  if (next == NEXT_USERPASS) {
    hide_userpass(w, s);
    return NEXT_PLAIN;
  }
  if (next == NEXT_SECRET) {
    hide_value(w, s);
    return NEXT_PLAIN;
  }
  if (e - s >= 3 && s[0] == '-' && s[1] == '-') { /* --NAME[=VALUE] */
    const char *n = s + 2, *eq = n;
    while (eq < e && *eq != '=')
      eq++;
    size_t len = (size_t)(eq - n);
    int is_header = len == 6 && strncmp(n, "header", 6) == 0;
    if (eq == e)
      return long_option_is(n, len, userpass) ? NEXT_USERPASS
             : long_option_is(n, len, secret) ? NEXT_SECRET
             : is_header                      ? NEXT_HEADER
                                              : NEXT_PLAIN;
    if (long_option_is(n, len, userpass))
      hide_userpass(w, eq + 1);
    else if (is_header)
      hide_header(w, eq + 1);
    else if (secret_name(n, len))
      hide_value(w, eq + 1);
    return NEXT_PLAIN;
  }
  if (e - s >= 2 && s[0] == '-' && s[1] != '-') {
    /* -u USER:PASS, -uUSER:PASS, -sSu USER:PASS; -H HEADER likewise (curl's
     * -U is --proxy-user) */
    const char *p = s + 1;
    while (p < e && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) &&
           *p != 'u' && *p != 'U' && *p != 'H')
      p++;
    if (p == e || (*p != 'u' && *p != 'U' && *p != 'H'))
      return NEXT_PLAIN;
    if (p + 1 == e)
      return *p == 'H' ? NEXT_HEADER : NEXT_USERPASS;
    if (*p == 'H')
      hide_header(w, p + 1);
    else
      hide_userpass(w, p + 1);
    return NEXT_PLAIN;
  }
  /* NAME=VALUE (an assignment, a form field) or a header */
  const char *n = s < e && is_quote(*s) ? s + 1 : s, *eq = n;
  while (eq < e && name_char(*eq) && *eq != '-')
    eq++;
  if (eq > n && eq < e && *eq == '=' && !(*n >= '0' && *n <= '9')) {
    if (secret_name(n, (size_t)(eq - n)))
      hide_value(w, eq + 1);
    return NEXT_PLAIN;
  }
  hide_header(w, s);
  return NEXT_PLAIN;
}

/* The secrets of a command's words, split as the shell splits them
 * (quotes and backslashes kept inside a word). */
static void command_secrets(const char *cmd, span_fn hide, void *ctx) {
  const char *p = cmd;
  int next = NEXT_PLAIN;
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n')
      p++;
    if (!*p)
      return;
    cword w = {p, NULL, hide, ctx};
    while (*p && *p != ' ' && *p != '\t' && *p != '\n') {
      if (*p == '\'') {
        const char *e = strchr(p + 1, '\'');
        p = e ? e + 1 : p + strlen(p);
      } else if (*p == '"') {
        for (p++; *p && *p != '"'; p++)
          if (*p == '\\' && p[1])
            p++;
        if (*p)
          p++;
      } else {
        p += *p == '\\' && p[1] ? 2 : 1;
      }
    }
    w.we = p;
    next = word_secrets(&w, next);
  }
}

/* ---- the text with its secrets hidden ---- */

typedef struct {
  char *buf;
  size_t size, len;
} rbuf;

static void rb_put(rbuf *b, const char *p, size_t n) {
  if (b->len + 1 >= b->size)
    return;
  size_t room = b->size - 1 - b->len;
  if (n > room)
    n = room;
  memcpy(b->buf + b->len, p, n);
  b->len += n;
  b->buf[b->len] = '\0';
}

/* Writes spans as they come (in order, apart): the text between them as
 * it is, each span as "***". */
typedef struct {
  rbuf b;
  const char *copied;
  int hid;
} emitter;

static void emit_span(void *ctx, const char *a, const char *b) {
  emitter *em = ctx;
  rb_put(&em->b, em->copied, (size_t)(a - em->copied));
  rb_put(&em->b, "***", 3);
  em->copied = b;
  em->hid = 1;
}

/* Marks spans in a byte map of the text (the two scanners' spans may
 * overlap, and come in two orders). */
typedef struct {
  const char *text;
  unsigned char *map;
} marker;

static void mark_span(void *ctx, const char *a, const char *b) {
  marker *m = ctx;
  memset(m->map + (a - m->text), 1, (size_t)(b - a));
}

/* text with the secrets hidden: the URLs' everywhere, a command's from
 * cmd on (NULL: none). Returns text itself when nothing is hidden. */
static const char *redact(const char *text, const char *cmd, char *buf,
                          size_t size) {
  if (!text || !buf || size == 0)
    return text;
  emitter em = {{buf, size, 0}, text, 0};
  buf[0] = '\0';
  if (!cmd) {
    url_secrets(text, emit_span, &em);
  } else {
    size_t n = strlen(text);
    marker m = {text, calloc(n + 1, 1)};
    if (!m.map) { /* out of memory: the whole command hidden */
      if (*cmd)
        emit_span(&em, cmd, text + n);
    } else {
      url_secrets(text, mark_span, &m);
      command_secrets(cmd, mark_span, &m);
      for (size_t i = 0; i < n;) {
        if (!m.map[i]) {
          i++;
          continue;
        }
        size_t j = i;
        while (j < n && m.map[j])
          j++;
        emit_span(&em, text + i, text + j);
        i = j;
      }
      free(m.map);
    }
  }
  if (!em.hid)
    return text;
  rb_put(&em.b, em.copied, strlen(em.copied));
  return buf;
}

/* Where a pipe: command starts in text (after a "pipe:" at its start or
 * after a character that cannot be in a name: "a.tar::pipe:..."), or
 * NULL. */
static const char *command_in(const char *text) {
  for (const char *p = text; p && (p = strstr(p, "pipe:")) != NULL; p += 5)
    if (p == text || !name_char(p[-1]))
      return p + 5;
  return NULL;
}

const char *wds__url_redact(const char *url, char *buf, size_t size) {
  return redact(url, url ? command_in(url) : NULL, buf, size);
}

const char *wds__command_redact(const char *cmd, char *buf, size_t size) {
  return redact(cmd, cmd, buf, size);
}

char *wds__url_redacted(const char *url) {
  /* "***" replaces a value of at least one byte: at most 3 bytes for each
   * one of url's */
  size_t n = strlen(url), size = 3 * n + 4;
  char *buf = malloc(size);
  if (!buf)
    return NULL;
  const char *r = wds__url_redact(url, buf, size);
  if (r == url)
    memcpy(buf, url, n + 1);
  return buf;
}

const char *wds__url_shown(const char *url, char *buf, size_t size) {
  if (!url || !buf || size == 0)
    return url;
  char red[WDS__URL_REDACT_MAX];
  const char *r = wds__url_redact(url, red, sizeof red);
  if (r == url && !wds__esc_needed(url, 0))
    return url;
  wds__esc_into(buf, size, r, 0);
  return buf;
}
