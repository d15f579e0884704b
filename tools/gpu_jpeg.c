/* gpu_jpeg.c — --jpeg-decode gpu in the tools (gpu_jpeg.h). */
#include "gpu_jpeg.h"

#include <inttypes.h>

#include "base/json.h"
#include <stdlib.h>
#include <string.h>

int tool_gpu_jpeg_open(const char *cmd, const wds_loader_config *cfg,
                       wds_gpu_jpeg **out) {
  *out = NULL;
  if (cfg->jpeg_decode != WDS_JPEG_DECODE_GPU)
    return 0;
  if (wds_gpu_jpeg_open(-1, out) != WDS_OK) {
    fprintf(stderr, "wds %s: --jpeg-decode gpu: %s\n", cmd, wds_last_error());
    return -1;
  }
  return 0;
}

int tool_gpu_jpeg_batch(const char *cmd, wds_gpu_jpeg *g, wds_loader *l,
                        const wds_batch *b, int keep_host,
                        tool_gpu_batch *out) {
  out->b = *b;
  void *nf = realloc(out->fields, (b->field_count ? b->field_count : 1) *
                                      sizeof *out->fields);
  if (!nf) {
    fprintf(stderr, "wds %s: out of memory\n", cmd);
    return -1;
  }
  out->fields = nf;
  memcpy(out->fields, b->fields, b->field_count * sizeof *out->fields);
  out->b.fields = out->fields;
  size_t total = 0;
  int64_t shape[3];
  for (size_t i = 0; i < b->field_count; i++)
    if (wds_gpu_jpeg_shape(l, i, shape) == WDS_OK)
      total += b->rows * (size_t)(shape[0] * shape[1] * shape[2]);
  if (total == 0)
    return 0;
  uint8_t *dev = wds_gpu_jpeg_buffer(g, total);
  if (!dev) {
    fprintf(stderr,
            "wds %s: --jpeg-decode gpu: no device memory for %zu "
            "bytes of images\n",
            cmd, total);
    return -1;
  }
  if (keep_host && total > out->host_cap) {
    uint8_t *h = realloc(out->host, total);
    if (!h) {
      fprintf(stderr, "wds %s: out of memory\n", cmd);
      return -1;
    }
    out->host = h;
    out->host_cap = total;
  }
  size_t at = 0;
  for (size_t i = 0; i < b->field_count; i++) {
    if (wds_gpu_jpeg_shape(l, i, shape) != WDS_OK)
      continue;
    size_t row = (size_t)(shape[0] * shape[1] * shape[2]);
    if (wds_gpu_jpeg_decode(g, l, b, i, dev + at, NULL) != WDS_OK ||
        wds_gpu_jpeg_sync(g, NULL) != WDS_OK ||
        (keep_host && wds_gpu_jpeg_download(g, out->host + at, dev + at,
                                            b->rows * row, NULL) != WDS_OK)) {
      fprintf(stderr, "wds %s: %s\n", cmd, wds_last_error());
      return -1;
    }
    wds_batch_field *f = &out->fields[i];
    f->dtype = WDS_DTYPE_U8;
    f->ndim = 4;
    f->shape[0] = (int64_t)b->rows;
    f->shape[1] = shape[0];
    f->shape[2] = shape[1];
    f->shape[3] = shape[2];
    f->data = keep_host ? (void *)(out->host + at) : (void *)(dev + at);
    f->size_bytes = b->rows * row;
    f->row_bytes = row;
    f->offsets = NULL;
    at += b->rows * row;
  }
  return 0;
}

void tool_gpu_batch_free(tool_gpu_batch *t) {
  free(t->fields);
  free(t->host);
  memset(t, 0, sizeof *t);
}

void tool_gpu_jpeg_report(FILE *f, const wds_gpu_jpeg *g) {
  wds_gpu_jpeg_stats st;
  wds_gpu_jpeg_stats_get(g, &st);
  fprintf(f,
          "gpu jpeg: %s  gpu %" PRIu64 "  cpu fallback %" PRIu64
          "  cpu rows %" PRIu64 "  failed %" PRIu64 "  device MB %.1f\n",
          wds_gpu_jpeg_library(g), st.gpu_images, st.cpu_fallback, st.cpu_rows,
          st.failed, (double)st.device_bytes / 1e6);
}

void tool_gpu_jpeg_json(FILE *f, const wds_gpu_jpeg *g) {
  wds_gpu_jpeg_stats st;
  wds_gpu_jpeg_stats_get(g, &st);
  const char *lib = wds_gpu_jpeg_library(g);
  fputs(", \"gpu_jpeg\": {\"library\": ", f);
  wds__json_write_string(f, lib, strlen(lib));
  fprintf(f,
          ", \"gpu_images\": %" PRIu64 ", \"cpu_fallback\": %" PRIu64
          ", \"cpu_rows\": %" PRIu64 ", \"failed\": %" PRIu64
          ", \"device_bytes\": %" PRIu64 ", \"hardware\": %" PRIu64 "}",
          st.gpu_images, st.cpu_fallback, st.cpu_rows, st.failed,
          st.device_bytes, st.hardware);
}
