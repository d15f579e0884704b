/* _common.h — what the files of the extension wds._wds share.
 *
 * The extension is cut as libuv and libarchive cut theirs: one file per
 * Python type (_reader.c, _index.c, _writer.c, _loader.c, _batch.c,
 * _gpujpeg.c), the module, its functions and the exception hierarchy in
 * _module.c, and the helpers every type uses declared here, once, and
 * written in _common.c (the status -> exception mapping, wds_py_raise, in
 * _module.c beside the classes it raises). Every shared name starts with
 * wds_py_ and is declared hidden here (as the extension is compiled,
 * python/CMakeLists.txt, and scripts/gpu-run.sh, which compiles
 * python/wds/_*.c by hand), so none but PyInit__wds leaves the module.
 *
 * Written over the public C API only (include/wds/; tests/layers.sh). */
#ifndef WDS_PY_COMMON_H
#define WDS_PY_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdint.h>

#include "wds/spec.h"
#include "wds/status.h"

/* What follows is the files' own: hidden, whatever the compiler's flags. */
#pragma GCC visibility push(hidden)

/* ---- signals while a call waits without the GIL (_common.c) ----------------
 * A handle's wait: which thread is in a blocking call of it without the GIL
 * (its address of wds_py_me, 0 when none) and that thread's state. The
 * library may ask the check from other threads (a reading thread): those
 * get 0 at once, without touching Python. */
typedef struct {
  atomic_uintptr_t thread;
  PyThreadState *ts;
  int raised; /* a handler raised during this call: the exception is set */
} wds_py_wait;

/* One per thread: its address names the thread in wds_py_wait.thread. */
extern _Thread_local char wds_py_me;

/* The configs' interrupt check (ctx: a wds_py_wait). In the thread blocked
 * in the call: takes the GIL, runs the signal handlers, lets it go; nonzero
 * when one raised (the exception stays set for the call's return). */
int wds_py_interrupt(void *ctx);

/* Around a call that may wait: like Py_BEGIN/END_ALLOW_THREADS, and marks
 * this thread as the one wds_py_interrupt serves. After the end, w->raised
 * says whether a handler's exception is set. */
#define WDS_PY_BEGIN_WAIT(w)                                                   \
  {                                                                            \
    wds_py_wait *wds_py_w_ = (w);                                              \
    wds_py_w_->raised = 0;                                                     \
    wds_py_w_->ts = PyEval_SaveThread();                                       \
    atomic_store(&wds_py_w_->thread, (uintptr_t)&wds_py_me);
#define WDS_PY_END_WAIT                                                        \
  atomic_store(&wds_py_w_->thread, (uintptr_t)0);                              \
  PyEval_RestoreThread(wds_py_w_->ts);                                         \
  wds_py_w_->ts = NULL;                                                        \
  }

/* ---- errors (_module.c) -------------------------------------------------- */

/* Raises the class for status with msg (the generic text when msg is empty).
 * The exception carries .status (the code) and .status_name. Returns NULL. */
PyObject *wds_py_raise(int status, const char *msg);

/* ---- arguments and results (_common.c) ----------------------------------- */

/* str from library text: UTF-8, undecodable bytes as surrogates (the way
 * Python decodes file names), so any tar member name round-trips; None for
 * NULL. */
PyObject *wds_py_str(const char *s);

/* A C string from a str or bytes argument (a new bytes object holds it). */
int wds_py_fsbytes(PyObject *obj, PyObject **out);

/* A path argument (a str, bytes or os.PathLike) as a new bytes object. */
int wds_py_path(PyObject *obj, PyObject **out);

/* cache_dir= (None, or a str, bytes or os.PathLike) into *out (a bytes
 * object the caller releases; NULL for None). */
int wds_py_cache_dir(PyObject *obj, PyObject **out);

/* A non-negative size option; None means the library's default (0). */
int wds_py_size(PyObject *obj, const char *what, uint64_t max, uint64_t *out);

/* read_timeout_ms and retries as Python takes them, as the commands'
 * --read-timeout and --retries do: None the library's default (5 minutes;
 * 5 retries), 0 wait forever / no retries, N up to max; anything else
 * (a negative value) is a ValueError naming the keyword. Into the C
 * config's value (0: the default, < 0: forever / none). */
int wds_py_zero_is_none(PyObject *obj, const char *what, int max, int *out);

/* A list of the URLs' str. */
PyObject *wds_py_url_list(const wds_url_list *l);

/* The spec argument of Reader and _Loader in C: a str (or bytes) spec, or
 * a sequence of URLs taken as is. What the config points at lives until
 * wds_py_spec_free. */
typedef struct {
  const char *spec;  /* the spec's text, or NULL */
  const char **urls; /* else the URLs (url_count of them) */
  size_t url_count;
  PyObject *keep; /* the bytes (spec) or tuple of bytes (URLs) they are in */
} wds_py_spec;

/* obj into *out (zeroed first); who names the type in the TypeError for
 * anything else ("Reader: spec must be a str or a sequence of URLs"). On
 * failure -1 with an exception, and *out holds nothing. */
int wds_py_spec_get(PyObject *obj, const char *who, wds_py_spec *out);
void wds_py_spec_free(wds_py_spec *s);

/* ---- the types (one file each) and the module's functions ---------------- */

extern PyTypeObject wds_py_reader_type;     /* _reader.c */
extern PyTypeObject wds_py_index_type;      /* _index.c */
extern PyTypeObject wds_py_writer_type;     /* _writer.c */
extern PyTypeObject wds_py_loader_type;     /* _loader.c */
extern PyTypeObject wds_py_batch_type;      /* _batch.c */
extern PyTypeObject wds_py_array_type;      /* _batch.c */
extern PyTypeObject wds_py_bytesfield_type; /* _batch.c */
extern PyTypeObject wds_py_gpujpeg_type;    /* _gpujpeg.c */

/* gpu_jpeg_open(device) -> _GpuJpeg (_gpujpeg.c). */
PyObject *wds_py_gpu_jpeg_open(PyObject *mod, PyObject *args);

#pragma GCC visibility pop

#endif
