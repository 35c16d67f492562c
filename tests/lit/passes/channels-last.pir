// RUN: pipec %s --emit=ir --passes=infer-shapes,channels-last,dce | FileCheck %s
// channels-last: each f32 2-D Conv runs as pipec:NhwcConv between
// transposes, which move through the elementwise nodes (a per-channel
// constant [8, 1, 1] becomes [1, 1, 1, 8]), Concat (its axis mapped),
// MaxPool (pipec:NhwcMaxPool), a BatchNormalization (x * s + t per
// channel: s = 2 / sqrt(3.99999 + 1e-5) = 1, t = 1 - 3 s = -2) and
// GlobalAveragePool (ReduceMean over the spatial axes, then a Reshape: the
// transpose moved only unit axes) and cancel in pairs; the image's transpose is the one left in the region. A
// Relu, a Clip with constant bounds and a LeakyRelu fold into the NhwcConv
// before them.
// Two transposes of one value merge; a graph output keeps its name and
// layout; an f64 Conv stays.

// CHECK:      const %s/nhwc : f32[1,1,1,8] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
// CHECK:      const %bn/scale : f32[1,1,1,12] = [1.0, 1.0,
// CHECK:      const %bn/shift : f32[1,1,1,12] = [-2.0, -2.0,
// CHECK:      node "c1/to_nhwc" Transpose(%x) {perm = [0, 2, 3, 1]} -> %x/nhwc : f32[2,8,8,3]
// CHECK-NEXT: node "c1" pipec:NhwcConv(%x/nhwc, %w1, %b1) {activation = "Relu", pads = [1, 1, 1, 1]} -> %[[C1:.*]] : f32[2,8,8,8]
// CHECK-NEXT: node "mp" pipec:NhwcMaxPool(%[[C1]]) {kernel_shape = [2, 2], strides = [2, 2]} -> %[[MP:.*]] : f32[2,4,4,8]
// CHECK-NEXT: node "dw" pipec:NhwcConv(%[[MP]], %wd) {activation = "Clip", clip_max = 6.0, clip_min = 0.0, group = 8, pads = [1, 1, 1, 1]} -> %[[DW:.*]] : f32[2,4,4,8]
// CHECK-NEXT: node "pw" pipec:NhwcConv(%[[DW]], %wp) -> %[[PW:.*]] : f32[2,4,4,8]
// CHECK-NEXT: node "scale" Mul(%[[PW]], %s/nhwc) -> %[[SC:.*]] : f32[2,4,4,8]
// CHECK-NEXT: node "res" Add(%[[SC]], %[[MP]]) -> %[[RES:.*]] : f32[2,4,4,8]
// CHECK-NEXT: node "br" pipec:NhwcConv(%[[RES]], %w2) {activation = "LeakyRelu", leaky_alpha = 0.25} -> %[[BR:.*]] : f32[2,4,4,4]
// CHECK-NEXT: node "cat" Concat(%[[RES]], %[[BR]]) {axis = 3} -> %[[CAT:.*]] : f32[2,4,4,12]
// CHECK-NEXT: node "bn/Mul" Mul(%[[CAT]], %bn/scale) -> %[[BS:.*]] : f32[2,4,4,12]
// CHECK-NEXT: node "bn" Add(%[[BS]], %bn/shift) -> %[[BN:.*]] : f32[2,4,4,12]
// CHECK-NEXT: node "relu2" Relu(%[[BN]]) -> %[[R2:.*]] : f32[2,4,4,12]
// CHECK-NEXT: node "gap" ReduceMean(%[[R2]]) {axes = [1, 2], keepdims = 1} -> %[[GAP:.*]] : f32[2,1,1,12]
// CHECK-NEXT: node "gap/to_nchw" Reshape(%[[GAP]], %gap/to_nchw/shape) -> %gap : f32[2,12,1,1]
// CHECK-NEXT: node "flat" Flatten(%gap) {axis = 1} -> %flat : f32[2,12]
// CHECK-NEXT: node "fc" Gemm(%flat, %wf) {transB = 1} -> %y : f32[2,10]
// CHECK-NEXT: node "o" pipec:NhwcConv(%x/nhwc, %w1) -> %[[O:.*]] : f32[2,6,6,8]
// CHECK-NEXT: node "o/to_nchw" Transpose(%[[O]]) {perm = [0, 3, 1, 2]} -> %o : f32[2,8,6,6]
// CHECK-NEXT: node "c64" Conv(%xd, %wd64) -> %y64 : f64[1,2,4,4]
// CHECK-NOT:  Transpose
graph "layout" {
  opset "" 13
  input %x : f32[2,3,8,8]
  input %w1 : f32[8,3,3,3]
  input %b1 : f32[8]
  input %wd : f32[8,1,3,3]
  input %wp : f32[8,8,1,1]
  input %w2 : f32[4,8,1,1]
  input %wf : f32[10,12]
  input %xd : f64[1,2,4,4]
  input %wd64 : f64[2,2,1,1]
  const %s : f32[8,1,1] = [1, 2, 3, 4, 5, 6, 7, 8]
  const %g12 : f32[12] = [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
  const %b12 : f32[12] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
  const %m12 : f32[12] = [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]
  const %v12 : f32[12] = [3.99999, 3.99999, 3.99999, 3.99999, 3.99999, 3.99999, 3.99999, 3.99999, 3.99999, 3.99999, 3.99999, 3.99999]
  const %lo : f32[] = [0]
  const %hi : f32[] = [6]
  node "c1" Conv(%x, %w1, %b1) {pads = [1, 1, 1, 1]} -> %c1 : f32[2,8,8,8]
  node "r1" Relu(%c1) -> %r1 : f32[2,8,8,8]
  node "mp" MaxPool(%r1) {kernel_shape = [2, 2], strides = [2, 2]} -> %mp : f32[2,8,4,4]
  node "dw" Conv(%mp, %wd) {group = 8, pads = [1, 1, 1, 1]} -> %dw : f32[2,8,4,4]
  node "clip" Clip(%dw, %lo, %hi) -> %cl : f32[2,8,4,4]
  node "pw" Conv(%cl, %wp) -> %pw : f32[2,8,4,4]
  node "scale" Mul(%pw, %s) -> %sc : f32[2,8,4,4]
  node "res" Add(%sc, %mp) -> %res : f32[2,8,4,4]
  node "br" Conv(%res, %w2) -> %brc : f32[2,4,4,4]
  node "leaky" LeakyRelu(%brc) {alpha = 0.25} -> %br : f32[2,4,4,4]
  node "cat" Concat(%res, %br) {axis = 1} -> %cat : f32[2,12,4,4]
  node "bn" BatchNormalization(%cat, %g12, %b12, %m12, %v12) -> %bn : f32[2,12,4,4]
  node "relu2" Relu(%bn) -> %r2 : f32[2,12,4,4]
  node "gap" GlobalAveragePool(%r2) -> %gap : f32[2,12,1,1]
  node "flat" Flatten(%gap) {axis = 1} -> %flat : f32[2,12]
  node "fc" Gemm(%flat, %wf) {transB = 1} -> %y : f32[2,10]
  node "o" Conv(%x, %w1) -> %o : f32[2,8,6,6]
  node "c64" Conv(%xd, %wd64) -> %y64 : f64[1,2,4,4]
  output %y
  output %o
  output %y64
}
