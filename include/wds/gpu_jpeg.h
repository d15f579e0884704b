/* wds/gpu_jpeg.h — JPEG fields decoded on a GPU with nvJPEG.
 *
 * A loader opened with jpeg_decode = WDS_JPEG_DECODE_GPU (wds/loader.h)
 * hands out each JPEG image field as planned rows: the JPEG's bytes and the
 * crop the CPU path would make (the same samples, order and crops). A
 * decoder made here turns such a field into the array the CPU path gives,
 * in device memory: rows x height x width x channels uint8 (NHWC):
 *
 *   wds_gpu_jpeg *g;
 *   if (wds_gpu_jpeg_open(0, &g) != WDS_OK) ... (wds_last_error())
 *   wds_gpu_jpeg_shape(l, 0, shape);          (height, width, channels)
 *   wds_loader_next(l, &b);
 *   wds_gpu_jpeg_decode(g, l, b, 0, d_images, stream);
 *   wds_cuda_release_after_stream(l, b, stream);     (wds/cuda.h)
 *
 * nvJPEG decodes each batch's JPEGs (batched; its hardware engine where the
 * GPU has one, else its GPU backend), a CUDA kernel resizes (Pillow's
 * antialiased bilinear filter, as the CPU path) and crops (and flips) each
 * into its row on `stream`. Images nvJPEG refuses (CMYK, lossless, some
 * samplings...) or fails on are decoded on the CPU, as the CPU path would,
 * and copied to their rows (counted: cpu_fallback). A JPEG the CPU cannot
 * decode either is the loader's error naming shard, sample and field:
 * under WDS_ON_ERROR_STOP decode returns it; under SKIP the row is zeros,
 * marked invalid in b->valid, and counted in the loader's skipped stats;
 * the other rows are decoded either way. Non-JPEG rows (PNG: decoded by the
 * workers) are copied; rows of samples that failed in the workers are
 * zeros.
 *
 * libnvjpeg is loaded at run time (wds links none of it) from, in order:
 * $WDS_NVJPEG_LIBRARY (a file), the CUDA toolkit's lib64 directories
 * ($CUDA_HOME, /usr/local/cuda), the nvidia-nvjpeg wheel of a Python on the
 * path (site-packages/nvidia/cu13/lib, nvidia/nvjpeg/lib), torchvision's
 * bundled copy, then the dynamic loader's search (LD_LIBRARY_PATH).
 * wds_gpu_jpeg_library() says which file was loaded. Without a CUDA build,
 * a GPU or libnvjpeg, open fails saying which (WDS_ERR_OPEN): asking for
 * GPU decoding never falls back to the CPU silently. A failed load is not
 * remembered: the next open looks again (after WDS_NVJPEG_LIBRARY is
 * fixed, say).
 *
 * nvJPEG is asked for the CPU path's contract: chroma upsampled with
 * interpolation (as TurboJPEG does; NVJPEG_FLAGS_UPSAMPLING_WITH_
 * INTERPOLATION) and a damaged bitstream an error
 * (NVJPEG_FLAGS_BITSTREAM_STRICT); where a backend refuses one, the
 * decoder opens without it and wds_gpu_jpeg_library() names it. The
 * batched calls have no per-image status (the hardware's, and GPU_HYBRID's
 * above 50 images, where Huffman decoding runs on the GPU), so a batch
 * they fail is decoded image by image, and JPEGs that do not end with
 * their EOI marker (cut short) are never batched: each is decoded alone
 * (nvjpegDecode, which reports it) and a failure is decoded again on the
 * CPU, which names it. Corruption inside a whole JPEG (damaged entropy-
 * coded data that still ends with EOI) is not always detected on the GPU:
 * such an image may come out as a valid row of wrong pixels, where the
 * CPU path may have warned or failed. Data that must be checked: decode
 * on the CPU, or verify the shards' checksums.
 *
 * Memory: nvJPEG's state, its device and pinned buffers and the decoded
 * images' device memory are allocated by the first batches and reused,
 * bounded by the largest batch seen, never grown after it (decoded
 * images: at most WDS_GPU_JPEG_ARENA bytes at a time, larger batches in
 * parts).
 *
 * Threads: a decoder's calls are serialised by a lock of its own, so
 * several threads (two loaders on one GPU) may share one; calls on
 * different streams are ordered on the device too (each call's work waits
 * for the previous call's). Waits: the decoder never blocks in a CUDA
 * call; it polls, and with wds_gpu_jpeg_set_timeout a wait that lasts
 * longer fails (WDS_ERR_TIMEOUT), so a peer that hangs the device's work
 * (a collective) ends the caller's wait instead of hanging it. Device
 * memory it outgrows (its own and nvJPEG's) is freed on the decoder's
 * stream (cudaFreeAsync, where the device has stream-ordered allocation;
 * else cudaFree, which waits for the whole device), outgrown pinned
 * buffers at close. wds_gpu_jpeg_buffer and close may block. */
#ifndef WDS_GPU_JPEG_H
#define WDS_GPU_JPEG_H

#include <stddef.h>
#include <stdint.h>

#include "wds/api.h"
#include "wds/loader.h"
#include "wds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wds_gpu_jpeg wds_gpu_jpeg;

typedef struct wds_gpu_jpeg_stats {
  uint64_t batches;
  uint64_t gpu_images;   /* decoded by nvJPEG */
  uint64_t cpu_fallback; /* JPEGs nvJPEG refused or failed, CPU-decoded */
  uint64_t cpu_rows;     /* rows the workers decoded (PNG) */
  uint64_t failed;       /* JPEGs neither could decode */
  /* device memory held: the decoded images' arena, the resize plans, the
   * wds_gpu_jpeg_buffer, and what nvJPEG allocated on the device for its
   * handles and states (counted by an allocator of the decoder's where the
   * libnvjpeg has nvjpegCreateExV2, 12.1 and later; without it nvJPEG's
   * own buffers are left out). Pinned host memory is not counted. */
  uint64_t device_bytes;
  uint64_t hardware; /* 1: nvJPEG's hardware backend is used */
  /* device_bytes in two: the decoder's own (the arena, the resize plans,
   * the wds_gpu_jpeg_buffer: grown to the largest batch, never shrunk, not
   * grown by a batch no larger than one seen), and nvJPEG's (stream-ordered
   * buffers of its own, which it may shrink and grow again from batch to
   * batch; 0 where they are not counted) */
  uint64_t arena_bytes;
  uint64_t nvjpeg_bytes;
} wds_gpu_jpeg_stats;

/* A decoder on CUDA device `device` (-1: the calling thread's current one).
 * WDS_OK, or WDS_ERR_OPEN with the reason in wds_last_error() (no CUDA in
 * this build, no GPU, libnvjpeg not found: where it was looked for),
 * WDS_ERR_NOMEM. */
WDS_API int wds_gpu_jpeg_open(int device, wds_gpu_jpeg **out);

/* Every wait of the decoder's from now on fails with WDS_ERR_TIMEOUT once
 * it has lasted timeout_ms (0, the default: waits have no deadline).
 * wds-train gives its --collective-timeout. WDS_OK or WDS_ERR_INVALID. */
WDS_API int wds_gpu_jpeg_set_timeout(wds_gpu_jpeg *g, int timeout_ms);

/* The shape of one decoded row of field `field` of l: height, width,
 * channels. WDS_OK, or WDS_ERR_INVALID when the field is not a GPU-planned
 * image field (the loader not opened with WDS_JPEG_DECODE_GPU, or the
 * field takes no JPEG). */
WDS_API int wds_gpu_jpeg_shape(const wds_loader *l, size_t field,
                               int64_t shape[3]);

/* Decodes field `field` of b (held, from l) into dev_out (device memory of
 * b->rows x height x width x channels bytes) on `stream` (a cudaStream_t;
 * NULL: the default stream). The work is queued; b's slot is read by
 * copies on the stream: give b back behind it (wds/cuda.h's
 * wds_cuda_release_after_stream). Returns WDS_OK; the loader's error
 * (WDS_ON_ERROR_STOP: a JPEG neither nvJPEG nor the CPU decodes; the
 * message in wds_last_error()); WDS_ERR_IO for a
 * CUDA or nvJPEG failure; WDS_ERR_TIMEOUT for a wait longer than
 * wds_gpu_jpeg_set_timeout's; WDS_ERR_INVALID for a field that is not
 * planned. */
WDS_API int wds_gpu_jpeg_decode(wds_gpu_jpeg *g, wds_loader *l,
                                const wds_batch *b, size_t field, void *dev_out,
                                void *stream);

/* wds_gpu_jpeg_decode of rows [row0, row0 + rows) of b only (clipped to
 * b->rows), into dev_out's first rows: a rank of several on one loader
 * batch (wds-train's local ranks). Calls for disjoint rows of one batch
 * may run at once on different decoders. */
WDS_API int wds_gpu_jpeg_decode_rows(wds_gpu_jpeg *g, wds_loader *l,
                                     const wds_batch *b, size_t field,
                                     size_t row0, size_t rows, void *dev_out,
                                     void *stream);

/* Device memory of the decoder's, at least `bytes` (one buffer, grown and
 * reused: the previous pointer is invalid after a call that grows it), for
 * callers without a CUDA allocator of their own (`wds bench`); NULL when
 * it cannot be had. Freed by close. Growing it waits for the whole device
 * (cudaDeviceSynchronize, blocking: a hung collective would hold it): for
 * benchmarks and tests, which size it once; not for a training loop. */
WDS_API void *wds_gpu_jpeg_buffer(wds_gpu_jpeg *g, size_t bytes);
/* Waits for the work queued on stream (NULL: the default stream). WDS_OK
 * or WDS_ERR_IO (the CUDA error in wds_last_error()). */
WDS_API int wds_gpu_jpeg_sync(wds_gpu_jpeg *g, void *stream);
/* Copies `bytes` of device memory at dev to host memory at host once the
 * work queued on stream is done (synchronous). WDS_OK or WDS_ERR_IO. */
WDS_API int wds_gpu_jpeg_download(wds_gpu_jpeg *g, void *host, const void *dev,
                                  size_t bytes, void *stream);

/* "PATH (hardware backend)" or "PATH (GPU hybrid backend)", with
 * "; no NVJPEG_FLAGS_..." for a flag nvJPEG refused. */
WDS_API const char *wds_gpu_jpeg_library(const wds_gpu_jpeg *g);
WDS_API void wds_gpu_jpeg_stats_get(const wds_gpu_jpeg *g,
                                    wds_gpu_jpeg_stats *out);
WDS_API void wds_gpu_jpeg_close(wds_gpu_jpeg *g); /* NULL: no-op */

#define WDS_GPU_JPEG_ARENA ((size_t)512 << 20)

#ifdef __cplusplus
}
#endif
#endif /* WDS_GPU_JPEG_H */
