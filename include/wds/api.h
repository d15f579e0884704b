/* wds/api.h — WDS_API, the mark of every public function.
 *
 * The library is compiled with -fvisibility=hidden: only what is marked
 * WDS_API is exported from libwds.so; everything else (wds__* and the
 * modules' internals) stays inside. On ELF the same attribute serves the
 * library's build and its users; on Windows, WDS_BUILDING_SHARED (set when
 * building the DLL) exports and WDS_SHARED (set by a user of the DLL)
 * imports. Defining WDS_API before including a wds header overrides it. */
#ifndef WDS_API_H
#define WDS_API_H

#ifndef WDS_API
#if defined(_WIN32) || defined(__CYGWIN__)
#if defined(WDS_BUILDING_SHARED)
#define WDS_API __declspec(dllexport)
#elif defined(WDS_SHARED)
#define WDS_API __declspec(dllimport)
#else
#define WDS_API
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define WDS_API __attribute__((visibility("default")))
#else
#define WDS_API
#endif
#endif

#endif /* WDS_API_H */
