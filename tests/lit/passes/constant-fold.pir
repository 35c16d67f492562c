// RUN: pipec %s --emit=ir --passes=constant-fold,dce --ir-constants=all | FileCheck %s
// Nodes whose inputs are all constants are evaluated at compile time; the
// folded value keeps the node's output name.

// CHECK: const %c : f32[2] = [3.0, 5.0]
// CHECK-NOT: "sum"
// CHECK: node "use" Mul(%x, %c) -> %y : f32[2]
graph "fold" {
  opset "" 17
  input %x : f32[2]
  const %a : f32[2] = [1, 2]
  const %b : f32[2] = [2, 3]
  node "sum" Add(%a, %b) -> %c : f32[2]
  node "use" Mul(%x, %c) -> %y : f32[2]
  output %y
}
