# -*- Python -*-
# lit configuration for Polymesh's FileCheck tests.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "Polymesh"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.polymesh_obj_root, "test")

# Every FileCheck run scopes its variables to CHECK-LABEL blocks.
config.environment["FILECHECK_OPTS"] = "-enable-var-scope"

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%polymesh_src_root", config.polymesh_src_root))
config.substitutions.append(("%python", config.python_executable))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.polymesh_tools_dir, config.llvm_tools_dir]
tools = ["polymesh-opt", "polymesh-run", "polymesh-translate", "FileCheck", "not",
         "count", "split-file"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# A build with the NCCL backend (POLYMESH_ENABLE_CUDA found CUDA and NCCL):
# polymesh-run --backend=nccl --simulate-gpus runs CUDA-lowered code on the
# simulated CUDA and NCCL, no GPU needed.
if getattr(config, "polymesh_have_nccl", False):
    config.available_features.add("nccl")

# A build with the MPI backend (POLYMESH_ENABLE_MPI found MPI): tests run
# polymesh-run --backend=mpi as several processes through %mpirun, which
# oversubscribes (more ranks than cores) and allows root (CI runs as root).
if getattr(config, "polymesh_have_mpi", False) and config.mpiexec:
    config.available_features.add("mpi")
    # Under ASan (utils/run-asan.sh) the ranks run without leak checks:
    # Open MPI keeps allocations past MPI_Finalize, and telling them from
    # ours by library (utils/lsan-mpi.supp) needs the slow unwinder, which
    # deadlocks against the JIT's registration of unwind tables. Leaks of
    # polymesh-run are checked by every other lit test, leaks of the MPI
    # backend by PolymeshMpiBackendTests (which does not JIT).
    sanitizer_env = ""
    if "ASAN_OPTIONS" in config.environment:
        sanitizer_env = "env ASAN_OPTIONS=%s:detect_leaks=0 " % (
            config.environment["ASAN_OPTIONS"])
    config.substitutions.append(
        ("%mpirun", sanitizer_env + config.mpiexec +
         " --oversubscribe --allow-run-as-root --mca btl self,vader"
         " --bind-to none"))
    # Open MPI's shared-memory transport wants a writable session directory.
    config.environment["OMPI_MCA_rmaps_base_oversubscribe"] = "1"


def cuda_device_count():
    """GPUs the CUDA driver reports (cuInit, then cuDeviceGetCount); 0 with
    no driver or no device. Tests that need real GPUs say `REQUIRES: gpu`
    (or `gpus-2`), so a machine without them reports UNSUPPORTED, not a pass
    that checked nothing."""
    import ctypes

    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


gpus = cuda_device_count()
lit_config.note(f"CUDA devices: {gpus}")
if gpus >= 1:
    config.available_features.add("gpu")
if gpus >= 2:
    config.available_features.add("gpus-2")

# ptxas from the CUDA toolkit checks the PTX that --polymesh-lower-to-cuda
# generates (no GPU needed). CI installs the toolkit at /usr/local/cuda.
import shutil
ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
if os.path.exists(ptxas):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))

# A build with AddressSanitizer (utils/run-asan.sh): slow or memory-capped
# tests say `UNSUPPORTED: asan`, and a smaller variant `REQUIRES: asan`.
cache = os.path.join(config.polymesh_obj_root, "CMakeCache.txt")
if os.path.exists(cache):
    with open(cache) as f:
        if "POLYMESH_ENABLE_ASAN:BOOL=ON" in f.read():
            config.available_features.add("asan")
