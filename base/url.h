/* url.h — which local file a shard URL names: one rule for the reader's
 * sources and the index. Internal.
 *
 * A URL without a scheme is a local path, as it is (relative to the current
 * directory). file:///PATH and file://localhost/PATH name /PATH (RFC 8089).
 * A file: URL without an absolute path (file://relative, file://host/PATH)
 * names no local file: the reader refuses it, saying so, and the index
 * treats it as any other remote URL. "-", pipe:CMD and SCHEME://... are not
 * local files either. */
#ifndef WDS_BASE_URL_H
#define WDS_BASE_URL_H

#include <stddef.h>

/* The local path url names, pointing into url; NULL when it names none. */
const char *wds__url_local_path(const char *url);

/* 1 when url starts with "SCHEME://" (letters, digits, '+', '-', '.'). */
int wds__url_has_scheme(const char *url);

/* 1 for a file:// URL that names no local file (see above). */
int wds__url_is_bad_file(const char *url);

/* The URL a pipe: command only fetches: "pipe:curl -s URL" (-s -S -L -f
 * and like flags, combined or not, "-o -"), "pipe:wget -q -O - URL",
 * "pipe:aws s3 cp s3://B/K -", with the quoting webdataset users write
 * ('URL', "URL"); malloc'd. NULL for anything else (a pipe, redirection,
 * expansion, another program or option). */
char *wds__url_pipe_source(const char *url);

/* A shard's identity: the same string for every way of naming one remote
 * shard, so an index made with one matches a loader given another
 * (docs/architecture.md, "Shard identity"). A pipe: command that only
 * fetches a URL is that URL; http(s) URLs are normalised: scheme and host
 * lower-case, the default port dropped, "." and ".." path segments
 * removed, percent-encoding normalised (%XX of an unreserved character
 * decoded, other %XX upper-case), an empty path "/", the fragment dropped;
 * an AWS S3 https URL (virtual-hosted or path style) is s3://BUCKET/KEY;
 * s3:// has its bucket lower-case. Anything else (local paths, other
 * commands) is returned as it is: local paths are resolved by the index
 * (index_lookup.c). Malloc'd; NULL when out of memory. */
char *wds__url_identity(const char *url);

/* url (or any text holding URLs, such as a pipe: command or a spec) as it
 * may go into a message: a userinfo password ("user:PASS@host") and the
 * values of query parameters that carry secrets (X-Amz-Signature,
 * X-Amz-Security-Token, X-Amz-Credential, Signature, sig, token,
 * access_token, key, password, secret...; names ending in "token",
 * "signature", "secret", "password" or "credential"), matched without
 * case, are replaced by "***"; the rest stays readable. From a "pipe:" on
 * (at the start, or after a character that cannot be in a name:
 * "a.tar::pipe:..."), the command's own secrets too: the password of
 * -u/--user/-U/--proxy-user USER:PASS (also --user=, -uUSER:PASS, -sSu),
 * the values of secret headers (-H/--header "Authorization: ...",
 * Proxy-Authorization, Cookie, X-Amz-*, names that say secret), of
 * --password, --http-password, --oauth2-bearer and the like (and any
 * --NAME=VALUE whose NAME says secret), and of assignments and form fields
 * NAME=VALUE whose NAME says secret (AWS_SECRET_ACCESS_KEY=, *_TOKEN=,
 * *_API_KEY=, password=). Only what is shown changes: a command runs as
 * it was given. Returns url itself when nothing is hidden, else buf (size
 * bytes, the text cut to fit). */
const char *wds__url_redact(const char *url, char *buf, size_t size);
#define WDS__URL_REDACT_MAX 2048 /* a buffer size for messages */

/* A command (a pipe: URL's text after "pipe:") as wds__url_redact shows
 * it. */
const char *wds__command_redact(const char *cmd, char *buf, size_t size);

/* url redacted (above) in full, never cut; malloc'd (NULL when out of
 * memory). What an output file holds (wds index's "url"). */
char *wds__url_redacted(const char *url);

/* url as text output for people shows it: redacted (above), then its
 * control characters and bytes that are not UTF-8 escaped as \xHH
 * (base/text.h), as error messages have them. Returns url itself when
 * nothing changes, else buf (size bytes, cut to fit). */
const char *wds__url_shown(const char *url, char *buf, size_t size);

#endif
