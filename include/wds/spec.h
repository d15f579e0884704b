/* wds/spec.h — shard specs: from a string to a list of shard URLs.
 *
 * A spec is one or more parts joined by "::". Each part is either
 *   - "@FILE": FILE holds one spec per line (blank lines and lines whose first
 *     non-blank character is '#' are skipped); each line is expanded as a spec
 *     of its own (it may use braces and "::", and further @FILEs, nested at
 *     most WDS_SPEC_MAX_DEPTH deep), or
 *   - a pattern: "${NAME}" is replaced by the environment variable WDS_NAME
 *     (as WebDataset does; a missing variable is an error), then braces are
 *     expanded with the results of Python's braceexpand 0.1.7:
 *     "{000..099}" (zero padding from the leading zeros), "{a,b,c}", nested
 *     braces, several groups (cartesian product, leftmost varies slowest),
 *     steps "{0..10..2}", descending and negative ranges, letter ranges
 *     "{a..e}", backslash escapes ("\{" is a literal brace).
 * Unbalanced braces are an error naming the (byte) position. A spec that
 * would expand past max_urls URLs, or past WDS_SPEC_MAX_URL_BYTES bytes of
 * URLs, is refused before the memory is allocated. Other bounds on hostile
 * input: braces nest at most 64 deep, range numbers have at most 4300 digits
 * (Python's int() limit), a ${} result or @FILE line is at most 1 MiB, and
 * one expansion reads at most 65536 @FILEs and 1 GiB from them.
 *
 * @FILE details: paths are relative to the working directory (also inside
 * a listed file); lines are trimmed of surrounding whitespace; ${} is not
 * substituted in the @FILE path itself. Empty "::" parts are skipped.
 *
 * Plain URLs pass through unchanged: "pipe:curl -s http://x/a-{0..3}.tar"
 * expands its braces too, exactly as WebDataset does.
 *
 * Object-store listings: after brace expansion, an s3:// URL whose key has
 * a glob character (* ? [) or is empty or ends in '/' is replaced by the
 * objects a ListObjectsV2 listing of the bucket gives (a glob is matched
 * with fnmatch, '*' staying within one '/' component; a prefix takes every
 * key under it that ends in a shard extension: .tar, .tar.gz, .tgz,
 * .tar.zst, .tar.xz, .tar.bz2, ...), sorted by key; no match is an error
 * naming the pattern. So expanding such a spec makes network requests, with
 * the credentials of the environment (README, "Object stores").
 *
 * pipe: commands read from a @FILE are refused (WDS_ERR_SPEC, naming the
 * file, the line and the option) unless WDS_SPEC_ALLOW_PIPE_FROM_FILES is
 * given (wds_spec_expand_flags): a list may come from anywhere, and running
 * its lines as commands must be the user's choice (--allow-pipe-from-files,
 * allow_pipe_from_files). A pipe: typed in the spec itself always works. */
#ifndef WDS_SPEC_H
#define WDS_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "wds/api.h"
#include "wds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WDS_DEFAULT_MAX_URLS ((size_t)10000000)
#define WDS_SPEC_MAX_URL_BYTES ((uint64_t)4 << 30)
#define WDS_SPEC_MAX_DEPTH 8

/* Flags of wds_spec_expand_flags. */
#define WDS_SPEC_ALLOW_PIPE_FROM_FILES 1u

/* A list of URLs owned by the caller; free with wds_url_list_free(). */
typedef struct wds_url_list {
  char **urls; /* count NUL-terminated strings */
  size_t count;
} wds_url_list;

/* Expands spec (as described above) into *out, which must be zeroed or
 * freshly freed. max_urls 0 means WDS_DEFAULT_MAX_URLS. On failure returns a
 * negative status (WDS_ERR_SPEC, WDS_ERR_LIMIT, WDS_ERR_OPEN for an unreadable
 * @FILE, WDS_ERR_NOMEM, WDS_ERR_INVALID for NULL arguments), leaves *out
 * empty, and wds_last_error() names what and where. */
WDS_API int wds_spec_expand(const char *spec, size_t max_urls,
                            wds_url_list *out);

/* Expands specs[0..nspecs) in turn into one list, as one expansion: the
 * limits (max_urls, URL bytes, @FILEs) hold for the whole list, and an
 * error names the spec at fault. Same contract as wds_spec_expand(); the
 * `wds` tools expand their SPEC arguments with it. */
WDS_API int wds_spec_expand_list(const char *const *specs, size_t nspecs,
                                 size_t max_urls, wds_url_list *out);

/* wds_spec_expand_list with flags (WDS_SPEC_ALLOW_PIPE_FROM_FILES; the two
 * functions above take 0). */
WDS_API int wds_spec_expand_flags(const char *const *specs, size_t nspecs,
                                  size_t max_urls, unsigned flags,
                                  wds_url_list *out);

/* Brace expansion of a single pattern only: no "::", "@" or "${}" handling.
 * Same contract as wds_spec_expand(). */
WDS_API int wds_brace_expand(const char *pattern, size_t max_urls,
                             wds_url_list *out);

/* Frees the strings and the array; leaves list zeroed. NULL is a no-op. */
WDS_API void wds_url_list_free(wds_url_list *list);

#ifdef __cplusplus
}
#endif
#endif /* WDS_SPEC_H */
