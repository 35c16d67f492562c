// RUN: pipec %s --emit=ir --passes=infer-shapes,fuse-attention,dce | FileCheck %s
// Scaled dot-product attention becomes one pipec:Attention(Q, KT, V[, mask]):
// scores MatMul(Q, KT), masked (pipec:MaskedSoftmax: a bool mask), scaled by
// a Mul or Div and plus a constant additive mask, or scaled alone, then
// Softmax over the keys and MatMul with V. Probabilities something else
// reads, a Softmax over another axis and a mask computed in the graph (it
// might need a gradient) stay unfused. The heads' transposes around it
// ([n, t, h, d] to [n, h, t, d], K to [n, h, d, t], and the output back)
// are absorbed when all four are there (heads_inner).

// CHECK: node "/a/Attention" pipec:Attention(%q, %kt, %v, %causal) {fill = -inf, fill_when = 1, mask = "bool", scale = 0.125} -> %ao : f32[2,4,8,16]
// CHECK: node "/b/Attention" pipec:Attention(%q, %kt, %v, %bias) {mask = "add", scale = 0.25} -> %bo : f32[2,4,8,16]
// CHECK: node "/c/Attention" pipec:Attention(%q, %kt, %v) {mask = "none", scale = 0.5} -> %co : f32[2,4,8,16]
// CHECK: node "/d/MatMul" MatMul(%q, %kt)
// CHECK: node "/d/MatMul_1" MatMul(%dp, %v)
// CHECK: node "/e/Softmax" Softmax(%e1) {axis = 2}
// CHECK: node "/f/Add" Add(%f1, %fm)
// CHECK: node "/f/MatMul_1" MatMul(%fp, %v)
// CHECK: node "/g/Attention" pipec:Attention(%q4, %k4, %v4) {heads_inner = 1, mask = "none", scale = 0.25} -> %go : f32[2,8,4,16]
// CHECK-NOT: Transpose(
graph "attention" {
  opset "" 13
  input %q : f32[2,4,8,16]
  input %kt : f32[2,4,16,8]
  input %v : f32[2,4,8,16]
  input %causal : bool[8,8]
  input %x : f32[8]
  input %q4 : f32[2,8,4,16]
  input %k4 : f32[2,8,4,16]
  input %v4 : f32[2,8,4,16]
  const %bias : f32[8] = [0.0, -1.0, 0.5, 0.0, -2.0, 1.0, 0.0, -0.5]
  const %two : f32[] = [2.0]
  const %quarter : f32[] = [0.25]
  node "/a/MatMul" MatMul(%q, %kt) -> %a1 : f32[2,4,8,8]
  node "/a/MaskedSoftmax" pipec:MaskedSoftmax(%a1, %causal) {fill = -inf, fill_when = 1, scale = 0.125} -> %ap : f32[2,4,8,8]
  node "/a/MatMul_1" MatMul(%ap, %v) -> %ao : f32[2,4,8,16]
  node "/b/MatMul" MatMul(%q, %kt) -> %b1 : f32[2,4,8,8]
  node "/b/Mul" Mul(%quarter, %b1) -> %b2 : f32[2,4,8,8]
  node "/b/Add" Add(%bias, %b2) -> %b3 : f32[2,4,8,8]
  node "/b/Softmax" Softmax(%b3) {axis = -1} -> %bp : f32[2,4,8,8]
  node "/b/MatMul_1" MatMul(%bp, %v) -> %bo : f32[2,4,8,16]
  node "/c/MatMul" MatMul(%q, %kt) -> %c1 : f32[2,4,8,8]
  node "/c/Div" Div(%c1, %two) -> %c2 : f32[2,4,8,8]
  node "/c/Softmax" Softmax(%c2) {axis = 3} -> %cp : f32[2,4,8,8]
  node "/c/MatMul_1" MatMul(%cp, %v) -> %co : f32[2,4,8,16]
  node "/d/MatMul" MatMul(%q, %kt) -> %d1 : f32[2,4,8,8]
  node "/d/Softmax" Softmax(%d1) {axis = -1} -> %dp : f32[2,4,8,8]
  node "/d/MatMul_1" MatMul(%dp, %v) -> %do : f32[2,4,8,16]
  node "/e/MatMul" MatMul(%q, %kt) -> %e1 : f32[2,4,8,8]
  node "/e/Softmax" Softmax(%e1) {axis = 2} -> %ep : f32[2,4,8,8]
  node "/e/MatMul_1" MatMul(%ep, %v) -> %eo : f32[2,4,8,16]
  node "/f/MatMul" MatMul(%q, %kt) -> %f1 : f32[2,4,8,8]
  node "/f/Neg" Neg(%x) -> %fm : f32[8]
  node "/f/Add" Add(%f1, %fm) -> %f2 : f32[2,4,8,8]
  node "/f/Softmax" Softmax(%f2) {axis = -1} -> %fp : f32[2,4,8,8]
  node "/f/MatMul_1" MatMul(%fp, %v) -> %fo : f32[2,4,8,16]
  node "/g/Transpose" Transpose(%q4) {perm = [0, 2, 1, 3]} -> %gq : f32[2,4,8,16]
  node "/g/Transpose_1" Transpose(%k4) {perm = [0, 2, 3, 1]} -> %gk : f32[2,4,16,8]
  node "/g/Transpose_2" Transpose(%v4) {perm = [0, 2, 1, 3]} -> %gv : f32[2,4,8,16]
  node "/g/MatMul" MatMul(%gq, %gk) -> %g1 : f32[2,4,8,8]
  node "/g/Mul" Mul(%g1, %quarter) -> %g2 : f32[2,4,8,8]
  node "/g/Softmax" Softmax(%g2) {axis = -1} -> %gp : f32[2,4,8,8]
  node "/g/MatMul_1" MatMul(%gp, %gv) -> %g3 : f32[2,4,8,16]
  node "/g/Transpose_3" Transpose(%g3) {perm = [0, 2, 1, 3]} -> %go : f32[2,8,4,16]
  output %go
  output %ao
  output %bo
  output %co
  output %do
  output %dp
  output %eo
  output %fo
}
