// RUN: pipec %s --emit=ir --passes=infer-shapes,fuse-attention,dce | FileCheck %s
// Scaled dot-product attention becomes one pipec:Attention(Q, KT, V[, mask]):
// scores MatMul(Q, KT), masked (pipec:MaskedSoftmax: a bool mask), scaled by
// a Mul or Div and plus a constant additive mask, or scaled alone, then
// Softmax over the keys and MatMul with V. Probabilities something else
// reads, a Softmax over another axis and a mask computed in the graph (it
// might need a gradient) stay unfused.

// CHECK: node "/a/Attention" pipec:Attention(%q, %kt, %v, %causal) {fill = -inf, fill_when = 1, mask = "bool", scale = 0.125} -> %ao : f32[2,4,8,16]
// CHECK: node "/b/Attention" pipec:Attention(%q, %kt, %v, %bias) {mask = "add", scale = 0.25} -> %bo : f32[2,4,8,16]
// CHECK: node "/c/Attention" pipec:Attention(%q, %kt, %v) {mask = "none", scale = 0.5} -> %co : f32[2,4,8,16]
// CHECK: node "/d/MatMul" MatMul(%q, %kt)
// CHECK: node "/d/MatMul_1" MatMul(%dp, %v)
// CHECK: node "/e/Softmax" Softmax(%e1) {axis = 2}
// CHECK: node "/f/Add" Add(%f1, %fm)
// CHECK: node "/f/MatMul_1" MatMul(%fp, %v)
graph "attention" {
  opset "" 13
  input %q : f32[2,4,8,16]
  input %kt : f32[2,4,16,8]
  input %v : f32[2,4,8,16]
  input %causal : bool[8,8]
  input %x : f32[8]
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
  output %ao
  output %bo
  output %co
  output %do
  output %dp
  output %eo
  output %fo
}
