// RUN: pipec %s --emit=ir --passes=canonicalize,dce | FileCheck %s
// No-op nodes disappear; a no-op that produces a graph output stays, so the
// model's output names do not change.

// CHECK-NOT: "id1"
// CHECK-NOT: "same-reshape"
// CHECK: node "relu" Relu(%x) -> %r : f32[2,3]
// CHECK: node "real-reshape" Reshape(%r, %flat) -> %f : f32[6]
// CHECK: node "id-out" Identity(%f) -> %out : f32[6]
graph "canon" {
  opset "" 17
  input %x : f32[2,3]
  const %same : i64[2] = [2, 3]
  const %flat : i64[1] = [6]
  node "id1" Identity(%x) -> %a : f32[2,3]
  node "same-reshape" Reshape(%a, %same) -> %b : f32[2,3]
  node "relu" Relu(%b) -> %r : f32[2,3]
  node "real-reshape" Reshape(%r, %flat) -> %f : f32[6]
  node "id-out" Identity(%f) -> %out : f32[6]
  output %out
}
