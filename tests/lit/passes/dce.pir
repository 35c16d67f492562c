// RUN: pipec %s --emit=ir --passes=dce | FileCheck %s
// Nodes and constants no output depends on are removed; the rest keep their order.

// CHECK-NOT: %unused
// CHECK-NOT: "dead
// CHECK: node "live1" Relu(%x)
// CHECK-NEXT: node "live2" Neg(%a)
// CHECK-NEXT: output %b
graph "dce" {
  opset "" 17
  input %x : f32[4]
  const %unused : f32[4] = [1, 2, 3, 4]
  node "live1" Relu(%x) -> %a : f32[4]
  node "dead1" Add(%a, %unused) -> %d1 : f32[4]
  node "dead2" Exp(%d1) -> %d2 : f32[4]
  node "live2" Neg(%a) -> %b : f32[4]
  output %b
}
