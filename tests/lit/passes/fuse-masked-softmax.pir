// RUN: pipec %s --emit=ir --passes=infer-shapes,fuse-masked-softmax,dce | FileCheck %s
// Attention scores scaled (Mul or Div by a constant), masked with -inf
// where a broadcast bool mask is true (torch's masked_fill) or false, then
// Softmax over the last axis become one pipec:MaskedSoftmax. A finite
// fill (-1e4: its softmax is not exactly 0, so the gradient would differ)
// and a Softmax over another axis stay; scaled scores that something else
// reads keep their Mul, and the mask and softmax still fuse.

// CHECK: node "/a/MaskedSoftmax" pipec:MaskedSoftmax(%s, %m) {fill = -inf, fill_when = 1, scale = 0.125} -> %pa : f32[2,4,4]
// CHECK: node "/b/MaskedSoftmax" pipec:MaskedSoftmax(%s, %keep) {fill = -inf, fill_when = 0, scale = 0.5} -> %pb : f32[2,4,4]
// CHECK: node "/c/Softmax" Softmax(
// CHECK: node "/d/Softmax" Softmax(
// CHECK: node "/e/Mul" Mul(%s, %scale)
// CHECK: node "/e/MaskedSoftmax" pipec:MaskedSoftmax(%e1, %m) {fill = -inf, fill_when = 1, scale = 1.0}
graph "masked" {
  opset "" 13
  input %s : f32[2,4,4]
  input %m : bool[1,4,4]
  input %keep : bool[4,4]
  const %scale : f32[] = [0.125]
  const %two : f32[] = [2.0]
  const %ninf : f32[] = [-inf]
  const %big : f32[] = [-10000.0]
  node "/a/Mul" Mul(%s, %scale) -> %a1 : f32[2,4,4]
  node "/a/Where" Where(%m, %ninf, %a1) -> %a2 : f32[2,4,4]
  node "/a/Softmax" Softmax(%a2) {axis = -1} -> %pa : f32[2,4,4]
  node "/b/Div" Div(%s, %two) -> %b1 : f32[2,4,4]
  node "/b/Where" Where(%keep, %b1, %ninf) -> %b2 : f32[2,4,4]
  node "/b/Softmax" Softmax(%b2) {axis = 2} -> %pb : f32[2,4,4]
  node "/c/Where" Where(%m, %big, %s) -> %c1 : f32[2,4,4]
  node "/c/Softmax" Softmax(%c1) {axis = -1} -> %pc : f32[2,4,4]
  node "/d/Where" Where(%m, %ninf, %s) -> %d1 : f32[2,4,4]
  node "/d/Softmax" Softmax(%d1) {axis = 1} -> %pd : f32[2,4,4]
  node "/e/Mul" Mul(%s, %scale) -> %e1 : f32[2,4,4]
  node "/e/Where" Where(%m, %ninf, %e1) -> %e2 : f32[2,4,4]
  node "/e/Softmax" Softmax(%e2) {axis = -1} -> %pe : f32[2,4,4]
  node "/e/Add" Add(%pe, %e1) -> %pe2 : f32[2,4,4]
  output %pa
  output %pb
  output %pc
  output %pd
  output %pe2
}
