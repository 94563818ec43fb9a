// Mesh, axis and leaf names with quotes, backslashes, newlines and non-ASCII
// characters (issue 14, item 6). Names are string literals escaped as
// llvm::printEscapedString writes them (`\22` for a quote, `\\` for a
// backslash, `\0A` for a newline, `\XX` per UTF-8 byte), so printing and
// parsing again gives the same module.
// RUN: polymesh-opt %s | FileCheck %s
// RUN: polymesh-opt %s | polymesh-opt | FileCheck %s
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-print-leaves=output=- -o /dev/null | FileCheck %s --check-prefix=LEAVES
// RUN: polymesh-run %s --verify | FileCheck %s --check-prefix=EXEC

// CHECK: polymesh.mesh @"my mesh" = <["q\22uote"=2, "back\\slash"=2, "new\0Aline"=2, "caf\C3\A9"=1]>
// CHECK-LABEL: func.func @names
// CHECK-SAME: #polymesh.sharding<@"my mesh", [{"q\22uote"}, {"new\0Aline", "back\\slash"}]>
// CHECK-SAME: polymesh.leaf = "params[\22w\22]\0A"
// CHECK: polymesh.reshard %{{.*}} <@"my mesh", [{"back\\slash"}, {"caf\C3\A9", "q\22uote"}]>

// The leaf table writes names as the IR does, and a leaf path's control
// characters as `\XX`, so that a newline cannot break a row.
// LEAVES-LABEL: func @names: 1 result
// LEAVES: 0  params["w"]\0A  8x8    f32    @"my mesh" ["q\22uote"=2, "back\\slash"=2, "new\0Aline"=2, "caf\C3\A9"=1] dev 0-7  [{"back\\slash"}, {"caf\C3\A9", "q\22uote"}]  4x4

// EXEC: @names: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 8 devices, PASS

polymesh.mesh @"my mesh" = <["q\22uote"=2, "back\\slash"=2, "new\0Aline"=2, "caf\C3\A9"=1]>

func.func @names(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@"my mesh", [{"q\22uote"}, {"new\0Aline", "back\\slash"}]>})
    -> (tensor<8x8xf32> {polymesh.leaf = "params[\22w\22]\0A"}) {
  %0 = polymesh.reshard %x <@"my mesh", [{"back\\slash"}, {"caf\C3\A9", "q\22uote"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
