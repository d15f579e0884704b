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

/* The local path url names, pointing into url; NULL when it names none. */
const char *wds__url_local_path(const char *url);

/* 1 when url starts with "SCHEME://" (letters, digits, '+', '-', '.'). */
int wds__url_has_scheme(const char *url);

/* 1 for a file:// URL that names no local file (see above). */
int wds__url_is_bad_file(const char *url);

#endif
