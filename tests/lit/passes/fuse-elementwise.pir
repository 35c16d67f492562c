// RUN: pipec %s --emit=ir --passes=infer-shapes,fuse-elementwise,dce | FileCheck %s
// Trees of elementwise nodes whose inner values have one reader become one
// pipec:FusedElementwise: a bias and a residual added to a product, then a
// Relu (the program: v3 = Add(v0, v1), v4 = Add(v3, v2), v5 = Relu(v4));
// an inner value read twice starts a tree of its own; a per-row input
// ([2,4,1]) is read by the loop, one broadcast across a gap of axes
// ([2,1,8]) leaves its node alone; a Gemm is not elementwise. An axis of
// one element between larger ones ([8,1,16], a one-token decoding step's
// shape) is no gap: x * Sigmoid(x) + x fuses there.

// CHECK: node "/mm/Gemm" Gemm(
// CHECK: node "/a/FusedElementwise" pipec:FusedElementwise(%bias, %mm, %res) {program = [3, 0, 0, 1, 0, 3, 2, 6, 4, 0]} -> %a3 : f32[4,8]
// CHECK: node "/b/FusedElementwise" pipec:FusedElementwise(%x, %y) {program = [2, 2, 0, 1, 4, 2, 0]} -> %b1 : f32[2,4,8]
// CHECK: node "/c/FusedElementwise" pipec:FusedElementwise(%b1, %row) {program = [2, 3, 0, 1, 0, 2, 0]} -> %c2 : f32[2,4,8]
// CHECK: node "/d/Mul" Mul(%c2, %gap) -> %d1 : f32[2,4,8]
// CHECK-NEXT: node "/d/Neg" Neg(%d1) -> %d2 : f32[2,4,8]
// CHECK: node "/e/Sigmoid" Sigmoid(%t) -> %e0 : f32[8,1,16]
// CHECK-NEXT: node "/e/FusedElementwise" pipec:FusedElementwise(%t, %e0) {program = [2, 2, 0, 1, 0, 2, 0]} -> %e2 : f32[8,1,16]
graph "ew" {
  opset "" 13
  input %in : f32[4,16]
  input %w : f32[16,8]
  input %bias : f32[8]
  input %res : f32[4,8]
  input %x : f32[2,4,8]
  input %y : f32[2,4,8]
  input %row : f32[2,4,1]
  input %gap : f32[2,1,8]
  input %t : f32[8,1,16]
  node "/mm/Gemm" Gemm(%in, %w) -> %mm : f32[4,8]
  node "/a/Add" Add(%bias, %mm) -> %a1 : f32[4,8]
  node "/a/Add_1" Add(%a1, %res) -> %a2 : f32[4,8]
  node "/a/Relu" Relu(%a2) -> %a3 : f32[4,8]
  node "/b/Mul" Mul(%x, %y) -> %b0 : f32[2,4,8]
  node "/b/Neg" Neg(%b0) -> %b1 : f32[2,4,8]
  node "/c/Div" Div(%b1, %row) -> %c1 : f32[2,4,8]
  node "/c/Add" Add(%c1, %b1) -> %c2 : f32[2,4,8]
  node "/d/Mul" Mul(%c2, %gap) -> %d1 : f32[2,4,8]
  node "/d/Neg" Neg(%d1) -> %d2 : f32[2,4,8]
  node "/e/Sigmoid" Sigmoid(%t) -> %e0 : f32[8,1,16]
  node "/e/Mul" Mul(%t, %e0) -> %e1 : f32[8,1,16]
  node "/e/Add" Add(%e1, %t) -> %e2 : f32[8,1,16]
  output %a3
  output %d2
  output %e2
}
