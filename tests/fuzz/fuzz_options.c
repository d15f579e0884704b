/* fuzz_options.c — libFuzzer target for the loader's option table parser,
 * wds_loader_config_set (loader/options.c), the one grammar of every front
 * end (CLI flags, Python keywords). Built as a libFuzzer binary with
 * -DWDS_FUZZ=ON (clang), and always as a replay driver (fuzz_replay.c)
 * over tests/fuzz/corpus/options; scripts/fuzz.sh runs it.
 *
 * Input: byte 0 picks a row of the table (mod the row count; 255: the name
 * is taken from the input up to the first '=' instead), byte 1's low bit
 * names it by its CLI flag ("--FLAG") rather than its keyword, bit 1 gives
 * no value (NULL); the rest is the value (cut at a NUL, as C strings are).
 * Besides the sanitizers it checks the contract: a status of OK or
 * WDS_ERR_INVALID only; a refusal leaves the config untouched and says
 * why in a printable message; an accepted value follows the row's grammar
 * (INT: decimal digits only; a flag's TIMEOUT: decimal digits with one
 * optional '.', no sign, no exponent, which strtod alone let through; SIZE:
 * starts with a digit); setting the same value twice gives the same config. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "wds/loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t rows(void) {
  size_t n = 0;
  while (wds_loader_option_at(n))
    n++;
  return n;
}

static int only(const char *s, const char *set) {
  return strspn(s, set) == strlen(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static size_t nrows;
  if (!nrows)
    nrows = rows();
  if (size < 2 || !nrows)
    return 0;
  char *text = malloc(size - 1);
  if (!text)
    return 0;
  memcpy(text, data + 2, size - 2);
  text[size - 2] = '\0'; /* the value is a C string: cut at a NUL */
  char name[128];
  const char *value = text;
  const wds_loader_option *r = NULL;
  if (data[0] == 255) { /* a name from the input */
    char *eq = strchr(text, '=');
    size_t n = eq ? (size_t)(eq - text) : strlen(text);
    snprintf(name, sizeof name, "%.*s", (int)(n < 127 ? n : 127), text);
    value = eq ? eq + 1 : "";
  } else {
    r = wds_loader_option_at(data[0] % nrows);
    if ((data[1] & 1) && r->flag)
      snprintf(name, sizeof name, "--%s", r->flag);
    else
      snprintf(name, sizeof name, "%s", r->name);
  }
  if (data[1] & 2)
    value = NULL;

  static const wds_loader_config init = WDS_LOADER_CONFIG_INIT;
  wds_loader_config a = init, b = init;
  int rc = wds_loader_config_set(&a, name, value);
  if (rc != WDS_OK && rc != WDS_ERR_INVALID)
    abort();
  if (rc != WDS_OK) {
    const char *m = wds_last_error();
    if (!*m || wds__esc_needed(m, 0) ||
        memcmp(&a, &init, sizeof a) != 0) /* untouched */
      abort();
    free(text);
    return 0;
  }
  r = wds_loader_option_find(name);
  if (!r)
    abort(); /* an unknown name was accepted */
  if (value && r->type == WDS_OPTION_INT && !only(value, "0123456789"))
    abort();
  if (value && r->type == WDS_OPTION_TIMEOUT && name[0] == '-' &&
      (!only(value, "0123456789.") ||
       strchr(value, '.') != strrchr(value, '.')))
    abort();
  if (value && r->type == WDS_OPTION_TIMEOUT && name[0] != '-' &&
      !only(value, "0123456789"))
    abort();
  if (value && r->type == WDS_OPTION_SIZE && (value[0] < '0' || value[0] > '9'))
    abort();
  /* The same value again: the same config (a pure function of it). */
  if (wds_loader_config_set(&b, name, value) != WDS_OK ||
      memcmp(&a, &b, sizeof a) != 0)
    abort();
  free(text);
  return 0;
}
