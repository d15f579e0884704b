/* gpu_jpeg.h — `--jpeg-decode gpu` for wds bench and wds batches: the
 * batch's GPU-planned JPEG fields decoded by wds/gpu_jpeg.h. */
#ifndef WDS_TOOLS_GPU_JPEG_H
#define WDS_TOOLS_GPU_JPEG_H

#include <stdint.h>
#include <stdio.h>

#include "wds/gpu_jpeg.h"
#include "wds/loader.h"

/* With cfg->jpeg_decode GPU, the decoder on the current device into *out
 * (else *out = NULL). 0, or -1 after printing "wds CMD: --jpeg-decode gpu:
 * why" (no CUDA build, no GPU, no libnvjpeg). */
int tool_gpu_jpeg_open(const char *cmd, const wds_loader_config *cfg,
                       wds_gpu_jpeg **out);

/* A batch with its decoded fields: fields[] of b, the planned ones as u8
 * arrays (rows x H x W x C) on the host when keep_host, else on the device
 * (data: the decoder's buffer, valid until the next batch). */
typedef struct tool_gpu_batch {
  wds_batch b;
  wds_batch_field *fields;
  uint8_t *host;
  size_t host_cap;
} tool_gpu_batch;

/* Decodes every planned field of b (l's) and waits for the GPU. 0, or -1
 * after printing the decoder's error (a JPEG under on_error stop, CUDA). */
int tool_gpu_jpeg_batch(const char *cmd, wds_gpu_jpeg *g, wds_loader *l,
                        const wds_batch *b, int keep_host, tool_gpu_batch *out);
void tool_gpu_batch_free(tool_gpu_batch *t);

/* "gpu jpeg: LIBRARY  gpu N  cpu fallback N  cpu rows N  failed N". */
void tool_gpu_jpeg_report(FILE *f, const wds_gpu_jpeg *g);
/* The same as a JSON member: `, "gpu_jpeg": {...}`. */
void tool_gpu_jpeg_json(FILE *f, const wds_gpu_jpeg *g);

#endif
