/* sniff.c — naming what non-tar bytes are (sniff.h). */
#include "sniff.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static int starts(const uint8_t *p, size_t n, const char *magic, size_t len) {
  return n >= len && memcmp(p, magic, len) == 0;
}

/* Text: no control bytes but tab, newline, carriage return and form feed
 * (bytes >= 0x80 count as text: UTF-8 and legacy code pages). */
static int is_text(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] < 0x20 && p[i] != '\t' && p[i] != '\n' && p[i] != '\r' &&
        p[i] != '\f')
      return 0;
  return n > 0 && p[n - 1] != 0x7f;
}

/* Does the text at p (case-insensitive) begin with word? */
static int starts_nocase(const uint8_t *p, size_t n, const char *word) {
  size_t len = strlen(word);
  if (n < len)
    return 0;
  for (size_t i = 0; i < len; i++)
    if (tolower(p[i]) != word[i])
      return 0;
  return 1;
}

const char *wds__sniff(const uint8_t *p, size_t n) {
  static const struct {
    const char *magic;
    size_t len;
    const char *what;
  } binary[] = {
      {"PK\x03\x04", 4, "a zip archive"},
      {"PK\x05\x06", 4, "a zip archive (empty)"},
      {"PK\x07\x08", 4, "a zip archive"},
      {"7z\xbc\xaf\x27\x1c", 6, "a 7z archive"},
      {"Rar!\x1a\x07", 6, "a RAR archive"},
      {"\x1f\x8b", 2, "gzip data"},
      {"\x28\xb5\x2f\xfd", 4, "zstd data"},
      {"\xfd"
       "7zXZ\x00",
       6, "xz data"},
      {"BZh", 3, "bzip2 data"},
      {"\x89PNG\r\n\x1a\n", 8, "a PNG image"},
      {"\xff\xd8\xff", 3, "a JPEG image"},
      {"GIF8", 4, "a GIF image"},
      {"%PDF-", 5, "a PDF document"},
      {"\x7f"
       "ELF",
       4, "an ELF executable"},
  };
  for (size_t i = 0; i < sizeof binary / sizeof *binary; i++)
    if (starts(p, n, binary[i].magic, binary[i].len))
      return binary[i].what;
  if (!is_text(p, n))
    return NULL;
  /* A byte order mark, then blanks. */
  if (starts(p, n, "\xef\xbb\xbf", 3)) {
    p += 3;
    n -= 3;
  }
  while (n && isspace(*p)) {
    p++;
    n--;
  }
  static const char *const html[] = {"<!doctype html", "<html",  "<head",
                                     "<body",          "<title", "<!--"};
  for (size_t i = 0; i < sizeof html / sizeof *html; i++)
    if (starts_nocase(p, n, html[i]))
      return "an HTML page";
  if (starts_nocase(p, n, "<?xml"))
    return "an XML document";
  if (n && (*p == '{' || *p == '['))
    return "JSON text";
  return "text";
}

int wds__not_tar(wds__err *err, const char *codec, const uint8_t *p, size_t n) {
  int compressed = codec && strcmp(codec, "none") != 0;
  char from[64] = "";
  if (compressed)
    snprintf(from, sizeof from, "%s data whose content is ", codec);
  if (n == 0)
    return compressed
               ? wds__fail(err, WDS_ERR_TRUNCATED,
                           "empty input (%s data with nothing in it, 0 bytes "
                           "once decompressed): not a tar archive",
                           codec)
               : wds__fail(err, WDS_ERR_TRUNCATED,
                           "empty input (0 bytes): not a tar archive");
  const char *what = wds__sniff(p, n);
  char begins[80];
  if (what && is_text(p, n)) {
    /* The first line, up to 40 characters, as it reads. */
    size_t k = 0;
    char line[48];
    for (size_t i = 0; i < n && k < 40 && p[i] != '\n' && p[i] != '\r'; i++)
      line[k++] = p[i] < 0x20 || p[i] >= 0x7f ? '.' : (char)p[i];
    line[k] = '\0';
    snprintf(begins, sizeof begins, "it begins \"%s%s\"", line,
             k == 40 ? "..." : "");
  } else {
    snprintf(begins, sizeof begins, "first bytes %02x %02x %02x %02x",
             n > 0 ? p[0] : 0, n > 1 ? p[1] : 0, n > 2 ? p[2] : 0,
             n > 3 ? p[3] : 0);
  }
  /* Where shards come from a URL, that is what a failed request gives. */
  const char *hint = !what ? ""
                     : strcmp(what, "an HTML page") == 0
                         ? ": an error page from a web server?"
                     : strcmp(what, "an XML document") == 0
                         ? ": an error response from a storage service?"
                         : "";
  if (what)
    return wds__fail(err, WDS_ERR_FORMAT, "not a tar archive: %s%s%s (%s)%s",
                     compressed ? "" : "the data is ", from, what, begins,
                     hint);
  if (compressed)
    return wds__fail(err, WDS_ERR_FORMAT,
                     "not a tar archive: %s data whose content is not tar "
                     "(no valid tar header at offset 0; %s)",
                     codec, begins);
  return wds__fail(err, WDS_ERR_FORMAT,
                   "not a tar archive: no valid tar header at offset 0 and "
                   "no known compression (%s)",
                   begins);
}
