/*===- PolymeshCudaRuntime.h - What CUDA-lowered code calls -------*- C -*-===*\
|*                                                                            *|
|* Part of Polymesh. Plain C. Implemented by PolymeshRuntimeNccl (built when  *|
|* the CUDA toolkit and NCCL are found).                                     *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/
/*
 * --polymesh-lower-to-cuda makes host functions that call NCCL directly on
 * communicators and streams they take from the runtime, launch their
 * kernels through the mgpu* wrappers below (what MLIR's gpu-to-llvm and
 * LLVM IR translation call; implemented here over the CUDA driver API,
 * loaded with dlopen so that binaries start without a driver), and get
 * device memory from the runtime. A runtime made by
 * polymesh_rt_create_nccl drives every local GPU from one process; device
 * ids map to CUDA devices 0..n-1 in the order given. Every polymesh_rt_*
 * call of PolymeshRuntime.h works on it too.
 *
 * Errors: functions returning a pointer return NULL and record the error in
 * the runtime (polymesh_rt_status / polymesh_rt_last_error), which aborts
 * it; status-returning functions return a POLYMESH_RT_* code.
 */

#ifndef POLYMESH_RUNTIME_POLYMESHCUDARUNTIME_H
#define POLYMESH_RUNTIME_POLYMESHCUDARUNTIME_H

#include "polymesh/Runtime/PolymeshRuntime.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A runtime over the local GPUs, one per device id. Never NULL: without a
 * GPU (or with fewer GPUs than ids) it starts failed, and
 * polymesh_rt_last_error says "no CUDA device: ..." or why. */
PolymeshRuntime *polymesh_rt_create_nccl(const int64_t *device_ids,
                                         int64_t num_devices,
                                         int64_t timeout_ms);

/* The device's stream (a cudaStream_t): kernels and NCCL calls of
 * generated code are ordered on it. */
void *polymesh_rt_cuda_stream(PolymeshRuntime *rt, int64_t device);
/* The ncclComm_t of `members` (device ids; ranks follow their order) on
 * `device`. Collective over the members on first use; cached. */
void *polymesh_rt_nccl_comm(PolymeshRuntime *rt, int64_t device,
                            const int64_t *members, int64_t num_members);
/* Device memory of `device`'s GPU (at least one byte). Freeing is
 * stream-ordered: the memory is released once the work enqueued on the
 * device's stream before the free has finished (at the next
 * polymesh_rt_device_synchronize, or when the runtime is destroyed). */
void *polymesh_rt_device_alloc(PolymeshRuntime *rt, int64_t device,
                               int64_t bytes);
void polymesh_rt_device_free(PolymeshRuntime *rt, int64_t device, void *ptr);
/* Device-to-device copy on the device's stream. */
int32_t polymesh_rt_device_copy(PolymeshRuntime *rt, int64_t device, void *dst,
                                const void *src, int64_t bytes);
/* Host-to-device and device-to-host copies of `bytes`, ordered after the
 * device's stream; they return when the copy is done. */
int32_t polymesh_rt_device_upload(PolymeshRuntime *rt, int64_t device,
                                  void *dst, const void *src, int64_t bytes);
int32_t polymesh_rt_device_download(PolymeshRuntime *rt, int64_t device,
                                    void *dst, const void *src, int64_t bytes);
/* Generated code passes every NCCL call's ncclResult_t here, with the
 * communicator it used and the call's name. The runtime's communicators are
 * non-blocking: ncclInProgress is waited out (polling the communicator, at
 * most the runtime's timeout) before the next call may be issued, as NCCL
 * requires; any other error becomes the runtime's error. */
int32_t polymesh_rt_nccl_check(PolymeshRuntime *rt, int64_t device, void *comm,
                               int32_t result, const char *call);
/* Waits until everything on the device's stream has finished. */
int32_t polymesh_rt_device_synchronize(PolymeshRuntime *rt, int64_t device);

/* The kernel-launch wrappers MLIR's GPU lowering calls (CUDA driver API).
 * Errors are reported on stderr and make the next
 * polymesh_rt_device_synchronize of any runtime fail (until a runtime is
 * created again). mgpuModuleLoadJIT only records the PTX: each GPU's
 * context JIT-compiles it on the first launch of one of its kernels there
 * (the context of the launch's stream), so one module serves every local
 * GPU. */
void *mgpuModuleLoadJIT(void *ptx, int32_t optLevel);
void mgpuModuleUnload(void *module);
void *mgpuModuleGetFunction(void *module, const char *name);
void mgpuLaunchKernel(void *function, int64_t gridX, int64_t gridY,
                      int64_t gridZ, int64_t blockX, int64_t blockY,
                      int64_t blockZ, int32_t sharedMemoryBytes, void *stream,
                      void **params, void **extra, int64_t paramsCount);

#ifdef __cplusplus
}
#endif

#endif /* POLYMESH_RUNTIME_POLYMESHCUDARUNTIME_H */
