/*===- PolymeshRuntime.h - C ABI of the Polymesh runtime ----------*- C -*-===*\
|*                                                                            *|
|* Part of Polymesh. Plain C: generated code (MLIR lowered to LLVM IR) and    *|
|* C programs call it; every argument is a scalar or a pointer.               *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/
/*
 * One PolymeshRuntime is one run of a program over a fixed set of device ids.
 * Every call names the calling device: with the loopback backend each device
 * is a thread of this process, and each device must be driven by one thread
 * at a time (a second concurrent call for the same device is an error).
 *
 * Semantics follow NCCL:
 *  - Collectives on a communicator match in call order: the k-th collective
 *    call of each member on that communicator is one collective, and all its
 *    members must agree on its kind, sizes, root, dtype and op.
 *  - A communicator is identified by its member list exactly as given; the
 *    rank of a device is its index in that list, and outputs are ordered by
 *    rank. [0,1] and [1,0] are two different communicators. Communicators are
 *    created on first use and cached for the life of the runtime.
 *    Member arrays are read during the call only (grouped calls too).
 *  - send/recv between two devices match in call order per (sender,
 *    receiver) pair; byte counts of matched calls must be equal. Outside a
 *    group a send blocks until its receiver posts the matching recv, so two
 *    devices that send to each other first deadlock, as with NCCL.
 *  - Between group_start and group_end a device's calls are only recorded;
 *    group_end posts them all and returns when all of them completed, so a
 *    permutation or all-to-all of send/recv pairs never deadlocks. Buffers
 *    must stay valid until group_end returns. Groups nest; the outermost
 *    group_end posts.
 *  - In place: broadcast with send == recv on the root; all_gather with
 *    send == recv + rank * bytes; all_reduce with send == recv;
 *    reduce_scatter with recv == send + rank * count * dtype size;
 *    all_to_all with send == recv.
 *
 * Errors: every call returns a POLYMESH_RT_* status (0 is success). The first
 * error of a run is kept (polymesh_rt_last_error) and aborts the runtime:
 * every device blocked in a call is released with POLYMESH_RT_ABORTED, and
 * every later call fails the same way. A blocking call never waits past the
 * runtime's timeout; a timeout, or a deadlock the runtime proves (every
 * device blocked or finished), is reported with the collective or peer
 * involved and the devices still waiting.
 */

#ifndef POLYMESH_RUNTIME_POLYMESHRUNTIME_H
#define POLYMESH_RUNTIME_POLYMESHRUNTIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PolymeshRuntime PolymeshRuntime;

/* Status codes. */
#define POLYMESH_RT_OK 0
/* Bad arguments, or calls that do not match (sizes, kinds, roots, dtypes). */
#define POLYMESH_RT_INVALID_ARGUMENT 1
/* A blocking call timed out, or the runtime proved a deadlock. */
#define POLYMESH_RT_TIMEOUT 2
/* Released or refused because of an earlier error (see last_error). */
#define POLYMESH_RT_ABORTED 3
/* A call in the wrong state: group_end without group_start, two threads
 * calling for one device at once. */
#define POLYMESH_RT_FAILED_PRECONDITION 4
/* A device function of polymesh_rt_run_devices returned nonzero. */
#define POLYMESH_RT_DEVICE_FAILED 5
#define POLYMESH_RT_INTERNAL 6

/* Element types of all_reduce and reduce_scatter. An i1 tensor is reduced as
 * u8 holding 0 or 1 (max is logical or, min is logical and). */
#define POLYMESH_RT_F32 0
#define POLYMESH_RT_F64 1
#define POLYMESH_RT_F16 2
#define POLYMESH_RT_BF16 3
#define POLYMESH_RT_I32 4
#define POLYMESH_RT_I64 5
#define POLYMESH_RT_I8 6
#define POLYMESH_RT_U8 7

/* Reduction operators. Ranks are combined in rank order. Integers wrap
 * (two's complement). f16 and bf16 are widened to f32, combined in f32 and
 * rounded to nearest-even once at the end (NCCL may round after every step,
 * so its results can differ in the last bits). max and min return NaN when
 * any input is NaN. */
#define POLYMESH_RT_SUM 0
#define POLYMESH_RT_PROD 1
#define POLYMESH_RT_MAX 2
#define POLYMESH_RT_MIN 3

/* Creates a loopback runtime over `num_devices` distinct non-negative device
 * ids; blocking calls fail after `timeout_ms` milliseconds (<= 0: the default,
 * 10 s). Never returns NULL: with invalid arguments the runtime starts in the
 * failed state, every call fails and polymesh_rt_last_error says why. */
PolymeshRuntime *polymesh_rt_create_loopback(const int64_t *device_ids,
                                             int64_t num_devices,
                                             int64_t timeout_ms);
/* Destroys a runtime; no device may be inside a call. NULL is ignored. */
void polymesh_rt_destroy(PolymeshRuntime *rt);

/* The first error of the run ("" when none). Valid until destroy. */
const char *polymesh_rt_last_error(PolymeshRuntime *rt);
/* The status code of the first error (POLYMESH_RT_OK when none). */
int32_t polymesh_rt_status(PolymeshRuntime *rt);

int64_t polymesh_rt_num_devices(PolymeshRuntime *rt);
/* The device id at `index` (creation order), or -1 when out of range. */
int64_t polymesh_rt_device_id(PolymeshRuntime *rt, int64_t index);
/* Bytes of one element of a POLYMESH_RT_* dtype, or 0 when unknown. */
int64_t polymesh_rt_dtype_size(int32_t dtype);

int32_t polymesh_rt_group_start(PolymeshRuntime *rt, int64_t device);
int32_t polymesh_rt_group_end(PolymeshRuntime *rt, int64_t device);

int32_t polymesh_rt_send(PolymeshRuntime *rt, int64_t device, int64_t peer,
                         const void *buf, int64_t bytes);
int32_t polymesh_rt_recv(PolymeshRuntime *rt, int64_t device, int64_t peer,
                         void *buf, int64_t bytes);

/* `bytes` from the root's `send` to every member's `recv` (the root's too).
 * `send` is read only on the root. */
int32_t polymesh_rt_broadcast(PolymeshRuntime *rt, int64_t device,
                              const int64_t *members, int64_t num_members,
                              int64_t root, const void *send, void *recv,
                              int64_t bytes);
/* Every member's `bytes_per_rank` bytes, concatenated in rank order, into
 * every member's `recv` (num_members * bytes_per_rank bytes). */
int32_t polymesh_rt_all_gather(PolymeshRuntime *rt, int64_t device,
                               const int64_t *members, int64_t num_members,
                               const void *send, void *recv,
                               int64_t bytes_per_rank);
/* Chunk j of rank i's `send` becomes chunk i of rank j's `recv`; both hold
 * num_members chunks of `bytes_per_peer` bytes. */
int32_t polymesh_rt_all_to_all(PolymeshRuntime *rt, int64_t device,
                               const int64_t *members, int64_t num_members,
                               const void *send, void *recv,
                               int64_t bytes_per_peer);
/* Element-wise reduction of every member's `count` elements, on every
 * member. */
int32_t polymesh_rt_all_reduce(PolymeshRuntime *rt, int64_t device,
                               const int64_t *members, int64_t num_members,
                               const void *send, void *recv, int64_t count,
                               int32_t dtype, int32_t op);
/* `send` holds num_members * recv_count elements; rank r receives the
 * reduction of chunk r. */
int32_t polymesh_rt_reduce_scatter(PolymeshRuntime *rt, int64_t device,
                                   const int64_t *members, int64_t num_members,
                                   const void *send, void *recv,
                                   int64_t recv_count, int32_t dtype,
                                   int32_t op);

/* A staging buffer of at least `bytes` bytes for `device`, 64-byte aligned,
 * owned by the runtime: kept for the run, grown on demand, valid until the
 * device's next call of this function. Generated code packs boxes into it.
 * NULL (and the runtime fails) when memory runs out. */
void *polymesh_rt_staging(PolymeshRuntime *rt, int64_t device, int64_t bytes);

/* A local copy on `device` (memmove semantics): lets generated code stay
 * within the runtime's ABI for every step of a plan. */
int32_t polymesh_rt_copy(PolymeshRuntime *rt, int64_t device, void *dst,
                         const void *src, int64_t bytes);

/* Generated code that moves bytes between processes itself (the MPI
 * lowering: mpi.send/mpi.recv on MPI_COMM_WORLD) asks where a send of
 * `device` to `peer` (is_send != 0) or a receive from it goes: -1 when the
 * runtime carries it with polymesh_rt_send/recv (the peer lives in this
 * process, the backend is not MPI, or the call failed: the runtime keeps
 * the error), else the peer's rank * 2^32 + the message's tag. */
int64_t polymesh_rt_mpi_route(PolymeshRuntime *rt, int64_t device, int64_t peer,
                              int32_t is_send);

/* A device function: runs the program of `device`; returns 0 on success. */
typedef int32_t (*PolymeshRtDeviceFn)(PolymeshRuntime *rt, int64_t device,
                                      void *user);
/* Runs `fn` on one thread per device, joins them all and returns the status
 * of the first error (0 when every device succeeded). A device function that
 * returns nonzero aborts the runtime, so the other devices never wait on it. */
int32_t polymesh_rt_run_devices(PolymeshRuntime *rt, PolymeshRtDeviceFn fn,
                                void *user);

#ifdef __cplusplus
}
#endif

#endif /* POLYMESH_RUNTIME_POLYMESHRUNTIME_H */
