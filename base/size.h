/* size.h — the one size grammar of every option and tool. Internal.
 *
 * A SIZE is decimal digits with an optional suffix: K, M, G, T (k, m, g, t
 * too; also Ki, Mi, ... and KiB, MiB, ...) are powers of 1024; KB, MB, GB,
 * TB are powers of 1000; B alone is bytes. No sign, blanks, fraction or
 * exponent. WDS__SIZE_HELP says so in the `--help` of every command that
 * takes a size. */
#ifndef WDS_BASE_SIZE_H
#define WDS_BASE_SIZE_H

#include <stdint.h>

/* One paragraph for the --help texts (ends with a newline). */
#define WDS__SIZE_HELP                                                         \
  "A SIZE is a number of bytes with an optional suffix: K, M, G, T (or KiB,\n" \
  "MiB, GiB, TiB) are powers of 1024, KB, MB, GB, TB powers of 1000.\n"

/* Parses s; 0 and *out, or -1 for anything else (empty, signs, blanks,
 * junk, an unknown suffix, more than 2^64 - 1 bytes). 0 is accepted:
 * callers check their own bounds. */
int wds__size_parse(const char *s, uint64_t *out);

/* Decimal digits only (no sign, blank or suffix; strtoull alone would take
 * "-1", "+5" and leading blanks): 0 and *out, or -1 (also above
 * 2^64 - 1). */
int wds__parse_u64(const char *s, uint64_t *out);

#endif
