//===- GpuSimulator.h - Simulated GPUs, CUDA and NCCL (opt-in) --*- C++ -*-===//
//
// Part of Polymesh. Library PolymeshGpuSimulator.
//
//===----------------------------------------------------------------------===//
//
// The NCCL backend (NcclBackend.h) on GPUs simulated in this process: a
// CUDA runtime and an NCCL whose memory, streams and collectives run on the
// host, strict where the real libraries are silent. It is test support, not
// part of the product: a tool offers it only by linking this library
// explicitly (polymesh-run's --simulate-gpus, polymesh-nccl-check
// --simulate), and nothing else in Polymesh depends on it. Its test
// controls (injected failures, counters) stay internal to the runtime's
// tests (lib/Runtime/NcclFake.h).
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_RUNTIME_GPUSIMULATOR_H
#define POLYMESH_RUNTIME_GPUSIMULATOR_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <memory>
#include <optional>
#include <string>

namespace polymesh::runtime {

struct NcclApi;

/// The simulated CUDA runtime and NCCL, for NcclBackendOptions::api and
/// cudaDeviceCount.
const NcclApi &simulatedNcclApi();

/// Forgets every allocation, stream, event, communicator and injected
/// failure, and simulates `numDevices` GPUs (devices 0 to numDevices - 1)
/// in this process. With 0, cudaGetDeviceCount fails with
/// cudaErrorNoDevice.
void resetSimulatedGpus(int numDevices);

/// Carries the simulation's messages when the simulated GPUs of one job
/// live in several processes (the ranks of an MPI job, say): each process
/// simulates its own GPUs, and a communicator's ranks may sit in any of
/// them. Only the simulation calls it, under its lock.
class SimulatedGpuTransport {
public:
  virtual ~SimulatedGpuTransport();
  /// This process, and the number of processes, of the job.
  virtual int process() const = 0;
  virtual int numProcesses() const = 0;
  /// Sends `message` to process `to` (not this one), without blocking.
  /// Messages from one process to another arrive in order.
  virtual absl::Status send(int to, std::string message) = 0;
  /// A message that arrived, if any.
  virtual absl::StatusOr<std::optional<std::string>> poll() = 0;
};

/// Connects this process's simulation to the other processes of a job
/// through `transport` (null: this process alone, the default). Survives
/// resetSimulatedGpus. Each process then simulates its own GPUs; a
/// communicator's ranks join from any process (ncclCommInitRankConfig
/// completes when all joined), its calls are matched across processes, and
/// unique ids name their process. Point-to-point sends to another process
/// complete once the data is on its way (as NCCL's do for messages it
/// buffers); a collective completes in each process when every member's
/// call arrived, each process computing it from every member's input.
void connectSimulatedGpus(std::shared_ptr<SimulatedGpuTransport> transport);

} // namespace polymesh::runtime

#endif // POLYMESH_RUNTIME_GPUSIMULATOR_H
