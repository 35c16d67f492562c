// RUN: pipec %s --emit=ir --passes=constant-fold,dce --ir-constants=all | FileCheck %s
// Nodes whose inputs are all constants are evaluated at compile time; the
// folded value keeps the node's output name.

// CHECK: const %c : f32[2] = [3.0, 5.0]
// CHECK-NOT: "sum"
// CHECK: node "use" Mul(%x, %c) -> %y : f32[2]
// A node reading a trainable parameter is never folded: training must see it.
// CHECK: node "scale" Mul(%p, %two) -> %q : f32[2]
graph "fold" {
  opset "" 17
  input %x : f32[2]
  const %a : f32[2] = [1, 2]
  const %b : f32[2] = [2, 3]
  node "sum" Add(%a, %b) -> %c : f32[2]
  node "use" Mul(%x, %c) -> %y : f32[2]
  param %p : f32[2] = [1, 1]
  const %two : f32[2] = [2, 2]
  node "scale" Mul(%p, %two) -> %q : f32[2]
  node "out" Add(%y, %q) -> %r : f32[2]
  output %r
}
