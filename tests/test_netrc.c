/* test_netrc.c — the .netrc reader wds gives libcurl's credentials from
 * (shards/netrc.h): curl's grammar, the entry chosen for
 * a host and a URL's user, and the file rules (regular files only, never
 * blocking on a FIFO, bounded, a missing file is no credentials). */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shards/netrc.h"

/* The login and password text gives host (and user); "-" for none. */
static int parsed(const char *text, const char *host, const char *user,
                  const char *want_login, const char *want_pass) {
  char *l = NULL, *p = NULL;
  int rc = wds__netrc_parse(text, strlen(text), host, user, &l, &p);
  int good = rc == WDS_OK && !strcmp(l ? l : "-", want_login) &&
             !strcmp(p ? p : "-", want_pass);
  if (!good)
    printf("  %s / %s: got %s %s, want %s %s\n", host, user ? user : "(none)",
           l ? l : "-", p ? p : "-", want_login, want_pass);
  wds__netrc_free_secret(l);
  wds__netrc_free_secret(p);
  return good;
}

TEST(grammar_and_choice) {
  const char *t =
      "# a comment line\n"
      "machine example.com login alice password a1\n"
      "machine example.com login bob password b2\n"
      "machine other.org\n  login carol\n  password \"c 3\\\"x\"\n"
      "macdef init\ncd /\nmachine example.com login eve password e\n"
      "\n"
      "machine onlylogin.net login dave\n"
      "default login anon password guest\n";
  ASSERT_TRUE(parsed(t, "example.com", NULL, "alice", "a1"));
  ASSERT_TRUE(parsed(t, "EXAMPLE.com", NULL, "alice", "a1")); /* no case */
  ASSERT_TRUE(parsed(t, "example.com", "bob", "bob", "b2"));
  ASSERT_TRUE(parsed(t, "other.org", NULL, "carol", "c 3\"x"));
  ASSERT_TRUE(parsed(t, "onlylogin.net", NULL, "dave", "-"));
  /* a macro's body is not entries */
  ASSERT_TRUE(parsed(t, "example.com", "eve", "-", "-"));
  /* default: when no machine matches */
  ASSERT_TRUE(parsed(t, "nowhere.io", NULL, "anon", "guest"));
  ASSERT_TRUE(parsed("machine a login x password y", "b", NULL, "-", "-"));
  ASSERT_TRUE(parsed("", "a", NULL, "-", "-"));
  /* cut short anywhere: no crash, what is there */
  ASSERT_TRUE(parsed("machine a login", "a", NULL, "-", "-"));
  ASSERT_TRUE(parsed("machine a login x password \"unterminated", "a", NULL,
                     "x", "unterminated"));
  ASSERT_TRUE(parsed("login x password y machine a", "a", NULL, "-", "-"));
}

static char dir[] = "/tmp/wds-netrc-XXXXXX";

/* wds__netrc_for_url with NETRC=path: its status, login and message. */
static int for_url(const char *path, const char *url, char *login, size_t lsize,
                   wds__err *e) {
  setenv("NETRC", path, 1);
  char *l = NULL, *p = NULL;
  e->msg[0] = '\0';
  int rc = wds__netrc_for_url(url, &l, &p, NULL, NULL, e);
  snprintf(login, lsize, "%s:%s", l ? l : "-", p ? p : "-");
  wds__netrc_free_secret(l);
  wds__netrc_free_secret(p);
  return rc;
}

TEST(files) {
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  char path[256], got[256];
  wds__err e;
  snprintf(path, sizeof path, "%s/netrc", dir);
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs("machine h.test login u password pw\n", f);
  fclose(f);
  chmod(path, 0600);
  ASSERT_EQ_INT(for_url(path, "http://h.test:8080/a.tar", got, sizeof got, &e),
                WDS_OK);
  ASSERT_STREQ(got, "u:pw");
  /* the URL's user picks the entry; the URL's password wins */
  ASSERT_EQ_INT(for_url(path, "https://v@h.test/a.tar", got, sizeof got, &e),
                WDS_OK);
  ASSERT_STREQ(got, "-:-");
  ASSERT_EQ_INT(for_url(path, "https://u:x@h.test/a.tar", got, sizeof got, &e),
                WDS_OK);
  ASSERT_STREQ(got, "-:-");
  ASSERT_EQ_INT(for_url(path, "https://u@h.test/a.tar", got, sizeof got, &e),
                WDS_OK);
  ASSERT_STREQ(got, "u:pw");
  /* missing: no credentials */
  char missing[300];
  snprintf(missing, sizeof missing, "%s/none", dir);
  ASSERT_EQ_INT(for_url(missing, "http://h.test/a", got, sizeof got, &e),
                WDS_OK);
  ASSERT_STREQ(got, "-:-");
  /* a FIFO: an error at once (no writer: a blocking open would wait) */
  char fifo[300];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  ASSERT_EQ_INT(mkfifo(fifo, 0600), 0);
  ASSERT_EQ_INT(for_url(fifo, "http://h.test/a", got, sizeof got, &e),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(e.msg, fifo);
  ASSERT_CONTAINS(e.msg, "is a FIFO, not a regular file");
  /* a directory */
  ASSERT_EQ_INT(for_url(dir, "http://h.test/a", got, sizeof got, &e),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(e.msg, "is a directory, not a regular file");
  /* too large */
  char big[300];
  snprintf(big, sizeof big, "%s/big", dir);
  int fd = open(big, O_WRONLY | O_CREAT, 0600);
  ASSERT_TRUE(fd >= 0);
  ASSERT_EQ_INT(ftruncate(fd, WDS__NETRC_MAX_BYTES + 1), 0);
  close(fd);
  ASSERT_EQ_INT(for_url(big, "http://h.test/a", got, sizeof got, &e),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(e.msg, "is too large");
  unlink(big);
  unlink(fifo);
  unlink(path);
  rmdir(dir);
  unsetenv("NETRC");
}

int main(void) {
  RUN(grammar_and_choice);
  RUN(files);
  return test_summary();
}
