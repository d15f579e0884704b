/* netrc.c — http(s) credentials from a .netrc file (see netrc.h).
 *
 * The grammar is curl's (and ftp's): whitespace-separated tokens, a token
 * in double quotes may hold spaces and the escapes \" \\ \n \r \t; the
 * keywords machine NAME, default, login NAME, password PASS, account X and
 * macdef NAME (its body, up to an empty line, skipped); '#' starting a
 * token comments out the rest of its line. An entry runs from its machine
 * (or default) to the next. Nothing here blocks: the file is opened
 * O_NONBLOCK and must be a regular file. */
#include "netrc.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/text.h"

void wds__netrc_free_secret(char *s) {
  if (s) {
    explicit_bzero(s, strlen(s));
    free(s);
  }
}

typedef struct lexer {
  const char *p, *end;
  char tok[4096]; /* longer tokens are cut (curl refuses them) */
} lexer;

/* The next token into lx->tok; 0 at the end. */
static int next_token(lexer *lx) {
  for (;;) {
    while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' ||
                               *lx->p == '\n' || *lx->p == '\r'))
      lx->p++;
    if (lx->p >= lx->end)
      return 0;
    if (*lx->p != '#')
      break;
    while (lx->p < lx->end && *lx->p != '\n')
      lx->p++;
  }
  size_t n = 0;
  if (*lx->p == '"') {
    lx->p++;
    while (lx->p < lx->end && *lx->p != '"') {
      char c = *lx->p++;
      if (c == '\\' && lx->p < lx->end) {
        c = *lx->p++;
        c = c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
      }
      if (n + 1 < sizeof lx->tok)
        lx->tok[n++] = c;
    }
    if (lx->p < lx->end)
      lx->p++; /* the closing quote */
  } else {
    while (lx->p < lx->end && *lx->p != ' ' && *lx->p != '\t' &&
           *lx->p != '\n' && *lx->p != '\r') {
      if (n + 1 < sizeof lx->tok)
        lx->tok[n++] = *lx->p;
      lx->p++;
    }
  }
  lx->tok[n] = '\0';
  return 1;
}

/* A macdef's body: up to and with the next empty line. */
static void skip_macro(lexer *lx) {
  while (lx->p < lx->end && *lx->p != '\n') /* the rest of its line */
    lx->p++;
  while (lx->p < lx->end) {
    lx->p++; /* the '\n' */
    if (lx->p < lx->end && (*lx->p == '\n' || *lx->p == '\r'))
      return;
    while (lx->p < lx->end && *lx->p != '\n')
      lx->p++;
  }
}

typedef struct entry {
  int kind; /* 0: none, 1: a machine matching the host, 2: default,
               3: another machine */
  char *login, *password;
} entry;

static void entry_clear(entry *en) {
  wds__netrc_free_secret(en->login);
  wds__netrc_free_secret(en->password);
  en->login = en->password = NULL;
  en->kind = 0;
}

static int set_str(char **dst, const char *v) {
  wds__netrc_free_secret(*dst);
  *dst = strdup(v);
  return *dst ? 0 : -1;
}

int wds__netrc_parse(const char *text, size_t n, const char *host,
                     const char *user, char **login, char **password) {
  *login = *password = NULL;
  lexer *lx = malloc(sizeof *lx);
  if (!lx)
    return WDS_ERR_NOMEM;
  lx->p = text;
  lx->end = text + n;
  entry cur = {0}, hit = {0}, def = {0};
  int rc = WDS_OK, more = 1;
  while (more) {
    more = next_token(lx);
    int starts =
        !more || !strcmp(lx->tok, "machine") || !strcmp(lx->tok, "default");
    if (starts) {
      /* The entry before ends: kept when it is the first that fits. */
      int fits = !user || (cur.login && !strcmp(cur.login, user));
      entry *keep = cur.kind == 1 && !hit.kind && fits   ? &hit
                    : cur.kind == 2 && !def.kind && fits ? &def
                                                         : NULL;
      if (keep) {
        *keep = cur;
        cur = (entry){0};
      } else {
        entry_clear(&cur);
      }
      if (!more)
        break;
      if (!strcmp(lx->tok, "default")) {
        cur.kind = 2;
      } else {
        cur.kind = next_token(lx) && !strcasecmp(lx->tok, host) ? 1 : 3;
      }
      continue;
    }
    if (!cur.kind)
      continue; /* before the first entry: skipped */
    if (!strcmp(lx->tok, "login") || !strcmp(lx->tok, "password")) {
      char **dst = lx->tok[0] == 'l' ? &cur.login : &cur.password;
      if (next_token(lx) && set_str(dst, lx->tok) != 0) {
        rc = WDS_ERR_NOMEM;
        break;
      }
    } else if (!strcmp(lx->tok, "account")) {
      next_token(lx);
    } else if (!strcmp(lx->tok, "macdef")) {
      next_token(lx);
      skip_macro(lx);
    }
  }
  explicit_bzero(lx->tok, sizeof lx->tok);
  free(lx);
  entry_clear(&cur);
  entry *got = hit.kind ? &hit : def.kind ? &def : NULL;
  if (rc == WDS_OK && got) {
    *login = got->login;
    *password = got->password;
    got->login = got->password = NULL;
  }
  entry_clear(&hit);
  entry_clear(&def);
  return rc;
}

char *wds__netrc_path(void) {
  const char *env = getenv("NETRC");
  if (env && *env)
    return strdup(env);
  const char *home = getenv("HOME");
  if (!home || !*home) {
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwuid_r(getuid(), &pw, buf, sizeof buf, &res) != 0 || !res ||
        !res->pw_dir || !*res->pw_dir)
      return NULL;
    home = res->pw_dir;
  }
  size_t n = strlen(home) + sizeof "/.netrc";
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/.netrc", home);
  return p;
}

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* The URL's host (as given, without brackets or port) and
 * its userinfo's user and whether a password is there; 0, or -1 when the
 * URL has no authority. */
static int url_parts(const char *url, char *host, size_t hsize, char *user,
                     size_t usize, int *has_pass) {
  const char *a = strstr(url, "://");
  if (!a)
    return -1;
  a += 3;
  size_t alen = strcspn(a, "/?#");
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (a[i] == '@')
      at = a + i;
  *has_pass = 0;
  user[0] = '\0';
  if (at) {
    size_t ulen = (size_t)(at - a), k = 0;
    const char *colon = memchr(a, ':', ulen);
    if (colon) {
      *has_pass = 1;
      ulen = (size_t)(colon - a);
    }
    /* percent-decoded, as libcurl sends it */
    for (size_t i = 0; i < ulen && k + 1 < usize; i++) {
      int hi, lo;
      if (a[i] == '%' && i + 2 < ulen && (hi = hexval(a[i + 1])) >= 0 &&
          (lo = hexval(a[i + 2])) >= 0) {
        user[k++] = (char)(hi * 16 + lo);
        i += 2;
      } else {
        user[k++] = a[i];
      }
    }
    user[k] = '\0';
    alen -= (size_t)(at + 1 - a);
    a = at + 1;
  }
  size_t hlen;
  if (alen && *a == '[') {
    const char *close = memchr(a, ']', alen);
    if (!close)
      return -1;
    a++;
    hlen = (size_t)(close - a);
  } else {
    const char *colon = memchr(a, ':', alen);
    hlen = colon ? (size_t)(colon - a) : alen;
  }
  if (hlen == 0 || hlen >= hsize)
    return -1;
  memcpy(host, a, hlen);
  host[hlen] = '\0';
  return 0;
}

static atomic_int warned, warned_unreadable;
static void (*_Atomic warn_sink)(const char *msg);

void wds__netrc_set_warn_sink(void (*fn)(const char *msg)) { warn_sink = fn; }

int wds__netrc_for_url(const char *url, char **login, char **password,
                       void (*warn)(void *ctx, const char *msg), void *ctx,
                       wds__err *e) {
  *login = *password = NULL;
  char host[256], user[256];
  int has_pass;
  if (url_parts(url, host, sizeof host, user, sizeof user, &has_pass) != 0 ||
      has_pass)
    return WDS_OK; /* the URL's own credentials, or no host to match */
  char *path = wds__netrc_path();
  if (!path)
    return WDS_OK;
  char shown[512];
  int rc = WDS_OK;
  char *text = NULL;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == EACCES || err == EPERM) {
      /* As curl does: a .netrc this user may not read (root's, say) gives
       * no credentials rather than failing every http(s) read. Said once
       * per process, naming the file. */
      void (*sink)(const char *) = warn_sink;
      if ((sink || warn) && !atomic_exchange(&warned_unreadable, 1)) {
        char msg[700];
        snprintf(msg, sizeof msg,
                 "warning: cannot read the .netrc file %s (%s): http(s) "
                 "reads go without its credentials",
                 wds__esc(path, shown, sizeof shown, 0), strerror(err));
        if (sink)
          sink(msg);
        else
          warn(ctx, msg);
      }
    } else if (err != ENOENT && err != ENOTDIR) {
      rc = wds__fail(e, WDS_ERR_OPEN, "cannot read the .netrc file %s: %s",
                     wds__esc(path, shown, sizeof shown, 0), strerror(err));
    }
    goto done;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = wds__fail(e, WDS_ERR_OPEN, "cannot read the .netrc file %s: %s",
                   wds__esc(path, shown, sizeof shown, 0), strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = wds__fail(e, WDS_ERR_OPEN,
                   "the .netrc file %s is %s, not a regular file: http(s) "
                   "credentials are read from a regular file only (remove "
                   "it, or set NETRC to another file)",
                   wds__esc(path, shown, sizeof shown, 0),
                   S_ISFIFO(st.st_mode)  ? "a FIFO"
                   : S_ISDIR(st.st_mode) ? "a directory"
                   : S_ISCHR(st.st_mode) ? "a character device"
                   : S_ISBLK(st.st_mode) ? "a block device"
                                         : "a socket");
    goto done;
  }
  if (st.st_size > WDS__NETRC_MAX_BYTES) {
    rc = wds__fail(e, WDS_ERR_OPEN,
                   "the .netrc file %s is too large (%lld bytes; at most %u)",
                   wds__esc(path, shown, sizeof shown, 0),
                   (long long)st.st_size, WDS__NETRC_MAX_BYTES);
    goto done;
  }
  void (*sink)(const char *) = warn_sink;
  if ((st.st_mode & (S_IRGRP | S_IROTH)) && (sink || warn) &&
      !atomic_exchange(&warned, 1)) {
    char msg[700];
    snprintf(msg, sizeof msg,
             "warning: the .netrc file %s can be read by %s (mode %03o): "
             "its passwords are not private (chmod 600 it)",
             wds__esc(path, shown, sizeof shown, 0),
             (st.st_mode & S_IROTH) ? "other users" : "its group",
             (unsigned)(st.st_mode & 0777));
    if (sink)
      sink(msg);
    else
      warn(ctx, msg);
  }
  /* One more byte than allowed: a file grown since the fstat is seen. */
  if (!(text = malloc(WDS__NETRC_MAX_BYTES + 1))) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  size_t len = 0;
  for (;;) {
    ssize_t k = read(fd, text + len, WDS__NETRC_MAX_BYTES + 1 - len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      rc = wds__fail(e, WDS_ERR_OPEN, "cannot read the .netrc file %s: %s",
                     wds__esc(path, shown, sizeof shown, 0), strerror(errno));
      goto done;
    }
    if (k == 0)
      break;
    len += (size_t)k;
    if (len > WDS__NETRC_MAX_BYTES) {
      rc = wds__fail(
          e, WDS_ERR_OPEN, "the .netrc file %s is too large (at most %u bytes)",
          wds__esc(path, shown, sizeof shown, 0), WDS__NETRC_MAX_BYTES);
      goto done;
    }
  }
  if (wds__netrc_parse(text, len, host, user[0] ? user : NULL, login,
                       password) != WDS_OK)
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  explicit_bzero(text, len);
done:
  free(text);
  if (fd >= 0)
    close(fd);
  free(path);
  return rc;
}
