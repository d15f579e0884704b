/* int.c — the int decoder: a field of decimal text (a class label, an
 * index) becomes one int64, and its row in the decoder table
 * (decoders.h). The row is 8 bytes held in the value itself: nothing is
 * allocated. */
#include <stdint.h>
#include <string.h>

#include "decode.h"
#include "decoders.h"

static int is_space(uint8_t c) {
  return c == ' ' || (c >= '\t' && c <= '\r'); /* Python's bytes.isspace */
}

int wds__decode_int(const uint8_t *data, size_t size, int64_t *out,
                    wds__err *e) {
  size_t i = 0, n = size;
  while (i < n && is_space(data[i]))
    i++;
  while (n > i && is_space(data[n - 1]))
    n--;
  int neg = 0;
  if (i < n && (data[i] == '+' || data[i] == '-'))
    neg = data[i++] == '-';
  if (i == n)
    return wds__fail(e, WDS_ERR_FORMAT, "int: no digits in %zu bytes", size);
  uint64_t v = 0;
  /* magnitude limit: 2^63 - 1, or 2^63 for a negative number */
  uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < n; i++) {
    uint8_t c = data[i];
    if (c < '0' || c > '9')
      return wds__fail(e, WDS_ERR_FORMAT,
                       "int: unexpected character 0x%02x at byte %zu", c, i);
    unsigned digit = (unsigned)(c - '0');
    if (v > (limit - digit) / 10)
      return wds__fail(e, WDS_ERR_LIMIT, "int: value out of the int64 range");
    v = v * 10 + digit;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return WDS_OK;
}

void wds__int_row_shape(const wds__field_opts *o, wds__row_shape *out) {
  (void)o;
  memset(out, 0, sizeof *out);
  out->dtype = WDS_DTYPE_I64;
  out->row_bytes = 8;
}

int wds__int_decode(const wds__field_opts *o, const wds__decode_call *call,
                    const uint8_t *data, size_t size, wds__field_value *out,
                    wds__err *e) {
  (void)o;
  (void)call;
  out->dtype = WDS_DTYPE_I64;
  out->data = &out->local.i64;
  out->size = 8;
  return wds__decode_int(data, size, &out->local.i64, e);
}

int wds__int_check(wds__decoder *dec, const uint8_t *data, size_t size,
                   wds__err *e) {
  int64_t v;
  (void)dec;
  return wds__decode_int(data, size, &v, e);
}
