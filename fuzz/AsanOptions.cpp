//===- AsanOptions.cpp - ASan defaults of the MLIR fuzz targets -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// LLVM's BumpPtrAllocator poisons its slabs for ASan in code compiled with
// ASan (ours, which instantiates the allocator from LLVM's headers) and
// unpoisons what it hands out; Debian's libMLIR.so is not compiled with ASan
// and allocates from the same slabs (a context's attribute storage) without
// unpoisoning. Every run would stop at a false use-after-poison in MLIR, so
// manual poisoning is off. Real heap errors are still found: they do not
// rely on it. Built into the binaries so that running a target on a saved
// crash input behaves as under utils/run-fuzz.sh.
//
//===----------------------------------------------------------------------===//

extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}
