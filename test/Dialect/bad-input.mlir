// Input that is not IR at all, or is cut off, gives a diagnostic with a
// location and exit code 1.
// RUN: printf '\x7fELF\x02\x01\x01\x00\xff\xfe garbage' > %t.bin
// RUN: not polymesh-opt %t.bin 2>&1 | FileCheck %s --check-prefix=BINARY
// BINARY: {{.*}}.bin:1:1: error:
// RUN: head -c 60 %s.truncated.in > %t.truncated.mlir
// RUN: not polymesh-opt %t.truncated.mlir 2>&1 | FileCheck %s --check-prefix=TRUNC
// TRUNC: truncated.mlir:{{[0-9]+}}:{{[0-9]+}}: error:
// RUN: polymesh-opt %t.bin; test $? -eq 1
// RUN: polymesh-opt %t.truncated.mlir; test $? -eq 1
