/* netrc.h — http(s) credentials from a .netrc file, read by wds itself.
 * Internal.
 *
 * libcurl's own .netrc reading (CURLOPT_NETRC) opens the file with a
 * plain open(): a FIFO at ~/.netrc blocks it there, beyond the read
 * timeout, cancel and signals. So wds reads the file as it reads shards:
 * $NETRC if set, else $HOME/.netrc (the passwd entry's home without HOME);
 * opened with O_NONBLOCK (a FIFO's open does not wait), checked with
 * fstat after the open (regular files only: a FIFO, a device, a directory
 * is an error naming the file), read up to WDS__NETRC_MAX_BYTES (larger is
 * an error); a missing file is no credentials. A file readable by group or
 * others is warned about once per process (warn, when given). The
 * credentials found for the URL's host are given to libcurl as
 * CURLOPT_USERNAME/CURLOPT_PASSWORD, so they go to that host only (a
 * redirect to another host gets none). */
#ifndef WDS_SHARDS_NETRC_H
#define WDS_SHARDS_NETRC_H

#include <stddef.h>

#include "base/err.h"

#define WDS__NETRC_MAX_BYTES (1u << 20)

/* The entry of text (a .netrc's bytes, n of them) for host (matched
 * without case; the `default` entry when no machine matches): with user
 * NULL the first entry of the host, else the first whose login is user.
 * *login and *password are malloc'd (NULL: not in the entry); both NULL
 * when nothing matches. Returns WDS_OK, or WDS_ERR_NOMEM. Never fails on
 * syntax: what it cannot read is skipped, as curl does. */
int wds__netrc_parse(const char *text, size_t n, const char *host,
                     const char *user, char **login, char **password);

/* The .netrc file's path (malloc'd; NULL: none can be named, or out of
 * memory). */
char *wds__netrc_path(void);

/* Credentials for url ("http(s)://[USER[:PASS]@]HOST[:PORT]/...") from
 * the .netrc file, as wds__netrc_parse finds them; none when the URL has a
 * password, or the file does not exist. WDS_ERR_OPEN naming the file when
 * it is not a regular file, cannot be read, or is too large; WDS_ERR_NOMEM.
 * warn (may be NULL) gets the once-per-process warning about a file others
 * can read. */
int wds__netrc_for_url(const char *url, char **login, char **password,
                       void (*warn)(void *ctx, const char *msg), void *ctx,
                       wds__err *e);

/* Where the warning goes in a process whose front end has no log to give
 * it (the commands: stderr). Set once, before any shard opens; without it
 * the warning goes to the warn given to wds__netrc_for_url (a loader's
 * log), if any. */
void wds__netrc_set_warn_sink(void (*fn)(const char *msg));

/* Frees a secret: its bytes wiped first. NULL is a no-op. */
void wds__netrc_free_secret(char *s);

#endif
