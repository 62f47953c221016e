/* stoker's C ABI: the Loader (stoker/loader.h) for any language that can call C — the Python package
 * (python/stoker) uses it through ctypes. Stable: functions are only ever added; structs carry their size so they
 * can grow; options travel as command-line style flags, so new options need no new symbols.
 *
 *   const char* argv[] = {"--coordinator=tcp://127.0.0.1:7400", "--job=resnet50", "--manifest=data.stoker",
 *                         "--batch-size=256", "--device=0", "--dtype=bfloat16", "--layout=nhwc"};
 *   stoker_loader* loader;
 *   if (stoker_loader_open(7, argv, &loader) != 0) fprintf(stderr, "%s\n", stoker_last_error());
 *   for (;;) {
 *     int kind; uint32_t epoch; stoker_batch* batch;
 *     if (stoker_loader_next(loader, stream, -1, &kind, &epoch, &batch) != 0) break;   // error
 *     if (kind == STOKER_END_OF_JOB) break;
 *     if (kind != STOKER_BATCH) continue;
 *     stoker_batch_info info = {sizeof(info)};
 *     stoker_batch_get_info(batch, &info);            // info.data: device pointer, info.shape, info.strides
 *     ...
 *     stoker_batch_release(batch);                    // any thread; see the Loader's stream contract
 *   }
 *   stoker_loader_close(loader);
 *
 * Errors: every function returning int returns 0 or a stoker status code (3 invalid argument, 4 deadline
 * exceeded, 5 not found, 6 already exists, 9 failed precondition, 13 internal, 14 unavailable, ...); the message is
 * stoker_last_error(), per thread. No C++ exception crosses this boundary.
 *
 * Thread safety: as the Loader's — one thread calls next/checkpoint; release, stats and request_stop from any.
 * close belongs to the thread that calls next (never while a next is in flight): to unblock a next from another
 * thread, use request_stop or a timeout.
 *
 * Retryable errors: 4 (deadline exceeded: no batch within timeout_ms) and 8 (resource exhausted: the consumer holds
 * `depth` unreleased batches) leave the loader as it was; call next again. Any other error is final.
 */
#ifndef STOKER_C_API_H_
#define STOKER_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STOKER_C_API_VERSION 3  /* 2 added validate, job_json and the checkpoint functions; 3 checkpoint_at_point
                                   and loader_describe */

#if defined(__GNUC__)
#define STOKER_C_EXPORT __attribute__((visibility("default")))
#else
#define STOKER_C_EXPORT
#endif

typedef struct stoker_loader stoker_loader;
typedef struct stoker_batch stoker_batch;

enum stoker_kind { STOKER_BATCH = 0, STOKER_END_OF_EPOCH = 1, STOKER_END_OF_JOB = 2, STOKER_STOPPED = 3 };
enum stoker_dtype { STOKER_UINT8 = 0, STOKER_FLOAT32 = 1, STOKER_FLOAT16 = 2, STOKER_BFLOAT16 = 3 };
enum stoker_layout { STOKER_NCHW = 0, STOKER_NHWC = 1 };

typedef struct stoker_batch_info {
  uint32_t struct_size; /* set by the caller to sizeof(stoker_batch_info); the library fills what fits and sets
                           it to the size it filled (later versions only append fields) */
  uint32_t epoch;
  uint64_t index;       /* within the epoch */
  uint64_t position;    /* across epochs */
  uint32_t count;       /* samples */
  int32_t device;       /* CUDA ordinal, -1: host memory */
  int32_t dtype;        /* enum stoker_dtype */
  int32_t layout;       /* enum stoker_layout */
  void* data;           /* the images: logical shape (N, C, H, W), memory order by strides */
  int64_t shape[4];
  int64_t strides[4];   /* in elements */
  const int64_t* labels;      /* count, on `device` */
  const uint64_t* sample_ids; /* count, on `device` */
  const int64_t* host_labels; /* count, host copies */
  const uint64_t* host_sample_ids;
  const uint8_t* host_flags;  /* count: bit 1 padding, bit 2 quarantined */
  const uint8_t* host_pixels; /* the received uint8 NHWC pixels (NULL on a tensor-parallel follower) */
} stoker_batch_info;

STOKER_C_EXPORT int stoker_c_api_version(void);
STOKER_C_EXPORT const char* stoker_last_error(void);

/* Opens a Loader from flags (its options as flags: --help lists them in the error). */
STOKER_C_EXPORT int stoker_loader_open(int argc, const char* const* argv, stoker_loader** out);
/* Checks flags as stoker_loader_open would, without connecting: bad flags fail where they are written, even when
 * the connection is made later (the Python Loader connects at its first use). */
STOKER_C_EXPORT int stoker_loader_validate(int argc, const char* const* argv);
/* The next delivery. stream: a cudaStream_t (NULL: the legacy default stream). timeout_ms < 0: no limit. On
 * STOKER_BATCH *batch is set (release it); otherwise *batch is NULL. */
STOKER_C_EXPORT int stoker_loader_next(stoker_loader* loader, void* stream, int64_t timeout_ms, int* kind, uint32_t* epoch,
                       stoker_batch** batch);
STOKER_C_EXPORT int stoker_batch_get_info(const stoker_batch* batch, stoker_batch_info* info);
STOKER_C_EXPORT void stoker_batch_release(stoker_batch* batch); /* NULL is fine */
/* Copies a NUL-terminated string into buf if it fits; *needed is its size with the NUL. */
STOKER_C_EXPORT int stoker_loader_checkpoint(stoker_loader* loader, char* buf, size_t capacity, size_t* needed);
STOKER_C_EXPORT int stoker_loader_stats_json(stoker_loader* loader, char* buf, size_t capacity, size_t* needed);
STOKER_C_EXPORT uint64_t stoker_loader_steps_per_epoch(const stoker_loader* loader);
/* The job this loader's rank belongs to, as JSON: job, rank, ranks, batch_size, epochs, seed, remainder,
 * steps_per_epoch, origin_epoch and origin_offset (where its plan starts: not 0, 0 once a checkpoint resumed it on
 * another shape), spec_fingerprint (16 hex digits). */
STOKER_C_EXPORT int stoker_loader_job_json(stoker_loader* loader, char* buf, size_t capacity, size_t* needed);
/* What stoker_loader_open with these flags would find, claiming nothing, as JSON: job, ranks, batch_size, epochs,
 * steps_per_epoch (for these flags' ranks and batch size), samples_per_epoch. 5 (NOT_FOUND) when the job does not
 * exist yet. A framework's len() before it gives the checkpoint back (Lightning) asks this. */
STOKER_C_EXPORT int stoker_loader_describe(int argc, const char* const* argv, char* buf, size_t capacity,
                                           size_t* needed);
/* A checkpoint token's fields as JSON (version, job, rank, position; version 1: spec_fingerprint; version 2: epoch,
 * offset, ranks, batch_size, epochs, manifest_fingerprint, seed, shuffle, remainder, pipeline_fingerprint); 3 for a
 * damaged or foreign token. */
STOKER_C_EXPORT int stoker_checkpoint_decode(const char* token, char* buf, size_t capacity, size_t* needed);
/* The token for the same job at another rank and position. Data-parallel ranks step together, so a framework that
 * saves one rank's state (Lightning writes rank 0's checkpoint) can resume every rank from it; and one that
 * resumes at an epoch's start without giving the state back (Lightning, from an epoch-end checkpoint) says only
 * the epoch. The coordinator checks the position against the job. */
STOKER_C_EXPORT int stoker_checkpoint_at(const char* token, uint32_t rank, uint64_t position, char* buf,
                                         size_t capacity, size_t* needed);
/* The same for a version 2 token, which resumes at (epoch, offset): the samples of that epoch's order already
 * trained on. A version 2 token at another rank alone: stoker_checkpoint_at with its own position. */
STOKER_C_EXPORT int stoker_checkpoint_at_point(const char* token, uint32_t rank, uint64_t position, uint32_t epoch,
                                               uint64_t offset, char* buf, size_t capacity, size_t* needed);
STOKER_C_EXPORT void stoker_loader_request_stop(stoker_loader* loader);
STOKER_C_EXPORT void stoker_loader_close(stoker_loader* loader); /* NULL is fine; batches still out stay valid until released */
/* A new NCCL unique id as 256 hex digits and a NUL (buf: at least 257 bytes). */
STOKER_C_EXPORT int stoker_nccl_unique_id(char* buf, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_C_API_H_ */
