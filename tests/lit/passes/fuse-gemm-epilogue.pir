// RUN: pipec %s --emit=ir --passes=infer-shapes,fuse-gemm-epilogue,dce | FileCheck %s
// A bias added after a Gemm or a MatMul with a 2-D B, then a Relu or Gelu,
// become one pipec:FusedGemm whose epilogue adds the bias and applies the
// activation: a Gemm's own bias row (C of shape [N]) and a MatMul's Add of
// one (either operand order); the activation alone, or the bias alone. A
// Gemm whose C is a matrix, one scaled by alpha, a product something else
// also reads, a batched B and an Add of a non-row stay as they are.

// CHECK: node "/a/FusedGemm" pipec:FusedGemm(%x, %w, %b) {activation = "Relu", transA = 0, transB = 1} -> %a2 : f32[4,8]
// CHECK: node "/b/FusedGemm" pipec:FusedGemm(%y, %w2, %b) {activation = "GeluTanh"} -> %b3 : f32[2,3,8]
// CHECK: node "/c/FusedGemm" pipec:FusedGemm(%y, %w2, %b) {activation = "Gelu"} -> %c3 : f32[2,3,8]
// CHECK: node "/d/FusedGemm" pipec:FusedGemm(%y, %w2) {activation = "Relu"} -> %d2 : f32[2,3,8]
// CHECK: node "/e/FusedGemm" pipec:FusedGemm(%y, %w2, %b) -> %e2 : f32[2,3,8]
// CHECK: node "/f/Gemm" Gemm(%x, %w, %full) {transB = 1} -> %f1
// CHECK-NEXT: node "/f/Relu" Relu(%f1)
// CHECK-NEXT: node "/g/Gemm" Gemm(%x, %w, %b) {alpha = 2.0, transB = 1} -> %g1
// CHECK-NEXT: node "/g/Relu" Relu(%g1)
// CHECK-NEXT: node "/h/FusedGemm" pipec:FusedGemm(%y, %w2, %b) -> %h2 : f32[2,3,8]
// CHECK-NEXT: node "/h/Relu" Relu(%h2)
// CHECK-NEXT: node "/h/Neg" Neg(%h2)
// CHECK-NEXT: node "/i/MatMul" MatMul(%y, %wb)
// CHECK-NEXT: node "/i/Add" Add(%i1, %b)
// CHECK-NEXT: node "/j/MatMul" MatMul(%y, %w2) -> %j1
// CHECK-NEXT: node "/j/Add" Add(%j1, %full3)
graph "epilogue" {
  opset "" 20
  input %x : f32[4,16]
  input %w : f32[8,16]
  input %b : f32[8]
  input %full : f32[4,8]
  input %full3 : f32[3,8]
  input %y : f32[2,3,16]
  input %w2 : f32[16,8]
  input %wb : f32[2,16,8]
  node "/a/Gemm" Gemm(%x, %w, %b) {transB = 1} -> %a1 : f32[4,8]
  node "/a/Relu" Relu(%a1) -> %a2 : f32[4,8]
  node "/b/MatMul" MatMul(%y, %w2) -> %b1 : f32[2,3,8]
  node "/b/Add" Add(%b, %b1) -> %b2 : f32[2,3,8]
  node "/b/Gelu" Gelu(%b2) {approximate = "tanh"} -> %b3 : f32[2,3,8]
  node "/c/MatMul" MatMul(%y, %w2) -> %c1 : f32[2,3,8]
  node "/c/Add" Add(%c1, %b) -> %c2 : f32[2,3,8]
  node "/c/Gelu" Gelu(%c2) -> %c3 : f32[2,3,8]
  node "/d/MatMul" MatMul(%y, %w2) -> %d1 : f32[2,3,8]
  node "/d/Relu" Relu(%d1) -> %d2 : f32[2,3,8]
  node "/e/MatMul" MatMul(%y, %w2) -> %e1 : f32[2,3,8]
  node "/e/Add" Add(%e1, %b) -> %e2 : f32[2,3,8]
  node "/f/Gemm" Gemm(%x, %w, %full) {transB = 1} -> %f1 : f32[4,8]
  node "/f/Relu" Relu(%f1) -> %f2 : f32[4,8]
  node "/g/Gemm" Gemm(%x, %w, %b) {alpha = 2.0, transB = 1} -> %g1 : f32[4,8]
  node "/g/Relu" Relu(%g1) -> %g2 : f32[4,8]
  node "/h/MatMul" MatMul(%y, %w2) -> %h1 : f32[2,3,8]
  node "/h/Add" Add(%h1, %b) -> %h2 : f32[2,3,8]
  node "/h/Relu" Relu(%h2) -> %h3 : f32[2,3,8]
  node "/h/Neg" Neg(%h2) -> %h4 : f32[2,3,8]
  node "/i/MatMul" MatMul(%y, %wb) -> %i1 : f32[2,3,8]
  node "/i/Add" Add(%i1, %b) -> %i2 : f32[2,3,8]
  node "/j/MatMul" MatMul(%y, %w2) -> %j1 : f32[2,3,8]
  node "/j/Add" Add(%j1, %full3) -> %j2 : f32[2,3,8]
  output %a2
  output %b3
  output %c3
  output %d2
  output %e2
  output %f2
  output %g2
  output %h3
  output %h4
  output %i2
  output %j2
}
