// RUN: pipec %s --emit=ir --passes=infer-shapes --ir-constants=all | FileCheck %s
// Shape inference types every value and folds the Shape -> Gather ->
// Unsqueeze -> Concat chain PyTorch exports for a dynamic batch, so the
// Reshape gets a constant target.

// CHECK: const %target : i64[3] = [6, 4, 2]
// CHECK-NOT: Shape(
// CHECK-NOT: Concat(
// CHECK: node "reshape" Reshape(%x, %target) -> %y : f32[6,4,2]
// CHECK: node "mm" MatMul(%y, %w) -> %z : f32[6,4,3]
// CHECK: node "sm" Softmax(%z) {axis = -1} -> %p : f32[6,4,3]
graph "shapes" {
  opset "" 17
  input %x : f32[6,8]
  const %zero : i64[] = [0]
  const %axes : i64[1] = [0]
  const %rest : i64[2] = [4, 2]
  const %w : f32[2,3] = [1, 2, 3, 4, 5, 6]
  node "shape" Shape(%x) -> %s : ?
  node "gather" Gather(%s, %zero) -> %batch : ?
  node "unsq" Unsqueeze(%batch, %axes) -> %b1 : ?
  node "concat" Concat(%b1, %rest) {axis = 0} -> %target : ?
  node "reshape" Reshape(%x, %target) -> %y : ?
  node "mm" MatMul(%y, %w) -> %z : ?
  node "sm" Softmax(%z) {axis = -1} -> %p : ?
  output %p
}
