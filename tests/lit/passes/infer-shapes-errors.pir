// RUN: not pipec %s --emit=ir 2>&1 | FileCheck %s
// A shape that cannot be inferred names the node, op type and opset.
// CHECK: pipec: error: pass infer-shapes: node 'mm' (MatMul, opset 17): {{.*}}
graph "bad" {
  opset "" 17
  input %x : f32[2,3]
  input %w : f32[4,5]
  node "mm" MatMul(%x, %w) -> %y : ?
  output %y
}
