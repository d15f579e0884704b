/* text.h — untrusted text (sample keys, member names, URLs, commands) made
 * safe to show on a terminal. Internal; the one copy of the rule.
 *
 * Escaped as \xHH (two lower-case hex digits), byte by byte: the C0
 * control characters (0x00..0x1f: newline, tab, ESC, BEL), DEL (0x7f), the
 * C1 controls U+0080..U+009F (0xc2 0x80..0x9f: a UTF-8 terminal may obey
 * U+009B as CSI) and every byte that is not part of valid UTF-8
 * (wds__utf8_len). Printable ASCII and valid UTF-8 stay as they are. With
 * WDS__ESC_BLANK a space is escaped too (output whose columns are split on
 * blanks), with WDS__ESC_BACKSLASH a backslash (output read back by
 * programs: every \x in it is then an escape).
 *
 * Where it applies: text output for people (wds ls's lines, verify's
 * report, error messages, wds-train's log). Error messages get it once, as
 * they are made (wds__fail, wds__err_prefix, wds__last_fail in err.c), so
 * every message of the library, the tools and Python is safe whatever it
 * quotes. JSON output needs none: the JSON writer escapes (base/json.h).
 * Without WDS__ESC_BACKSLASH escaping is idempotent: escaped text has
 * nothing left to escape. */
#ifndef WDS_BASE_TEXT_H
#define WDS_BASE_TEXT_H

#include <stddef.h>
#include <stdio.h>

#define WDS__ESC_BLANK 1u     /* ' ' as \x20 */
#define WDS__ESC_BACKSLASH 2u /* '\\' as \x5c */

/* 1 when s (NUL-terminated) has something to escape, else 0. */
int wds__esc_needed(const char *s, unsigned flags);

/* Writes s escaped to f. */
void wds__esc_write(FILE *f, const char *s, unsigned flags);

/* s escaped into dst (size bytes, always terminated when size > 0), cut
 * to fit between whole escapes and characters; returns the length
 * written. */
size_t wds__esc_into(char *dst, size_t size, const char *s, unsigned flags);

/* s as it may be shown: s itself when nothing needs escaping, else buf
 * (size bytes) holding it escaped (cut to fit). */
const char *wds__esc(const char *s, char *buf, size_t size, unsigned flags);

#endif
