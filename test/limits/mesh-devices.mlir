// RUN: polymesh-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// RUN: polymesh-opt %s -split-input-file -verify-diagnostics --polymesh-propagate --polymesh-plan -o /dev/null

// Mesh sizes (docs/limits.md): a mesh holds at most 2^20 devices. Larger
// meshes, and meshes whose device count overflows int64, are refused when
// they are parsed, so no pass ever loops over (or allocates per) 2^40
// devices. Before the limit, a 2^32-device mesh ran out of memory in
// --polymesh-propagate and a 2^40-device one did not finish.

// Exactly 2^20 devices: accepted (test/limits/huge-mesh*.test plan over it).
// CHECK: polymesh.mesh @m = <["a"=1024, "b"=1024]>
polymesh.mesh @m = <["a"=1024, "b"=1024]>

// -----

// expected-error @+1 {{mesh has 1048577 devices; at most 1048576 (2^20) are supported}}
polymesh.mesh @m = <["a"=1048577]>

// -----

// expected-error @+1 {{mesh has 16777216 devices; at most 1048576 (2^20) are supported}}
polymesh.mesh @m = <["a"=4096, "b"=4096]>

// -----

// expected-error @+1 {{mesh has 1099511627776 devices; at most 1048576 (2^20) are supported}}
polymesh.mesh @m = <["a"=1048576, "b"=1048576]>

// -----

// The largest product that fits int64 is still refused by the limit.
// expected-error @+1 {{mesh has 4611686018427387904 devices; at most 1048576 (2^20) are supported}}
polymesh.mesh @m = <["a"=2147483648, "b"=2147483648]>

// -----

// A product that overflows int64 is named as such, at the axis where it does.
// expected-error @+1 {{the product of the mesh axis sizes overflows int64 at axis "z"}}
polymesh.mesh @m = <["x"=2097152, "y"=2097152, "z"=2097152]>

// -----

// expected-error @+1 {{the product of the mesh axis sizes overflows int64 at axis "b"}}
polymesh.mesh @m = <["a"=9223372036854775807, "b"=2]>

// -----

// The limit comes before the device ids are compared with the axes.
// expected-error @+1 {{mesh has 2097152 devices; at most 1048576 (2^20) are supported}}
polymesh.mesh @m = <["a"=2097152], device_ids=[0, 1]>
