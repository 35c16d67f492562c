// RUN: pipec %s --emit=ir --passes=none --precision bf16 | FileCheck %s
// What the backward reads of a forward value kept as its bf16 copy:
// - the nodes of one backward group (one forward node, one phase: they
//   run one after the other) share one f32 view of the copy (g1 and g2);
//   another phase (g3, a weight-gradient node) or group (g4) has its own,
//   so that no f32 view lives across a schedule's gap;
// - a product's operand that is only a reshape of a copy's f32 view is
//   the reshape of the copy itself: Cast(Reshape(Cast(x/bf16, to=f32)),
//   to=bf16) is Reshape(x/bf16), bit for bit (widening is exact), with no
//   Cast left (rs, read by the weight gradient wg).

// CHECK: node "x/bf16" Cast(%x) {to = 16} -> %x/bf16 : bf16[2,3,4]
// CHECK-NEXT: node "mm" MatMul(%x/bf16, %w) {output_dtype = 1} -> %y : f32[2,3,5]
// CHECK-NEXT: node "y/bf16" Cast(%y) {to = 16} -> %y/bf16 : bf16[2,3,5]
// CHECK: node "y/bf16/to_f32" bwd("relu") Cast(%y/bf16) {to = 1} -> %y/bf16/f32 : f32[2,3,5]
// CHECK-NEXT: node "g1" bwd("relu") Mul(%dr/bf16/f32, %y/bf16/f32) -> %g1 : f32[2,3,5]
// CHECK-NEXT: node "g2" bwd("relu") Add(%g1, %y/bf16/f32) -> %g2 : f32[2,3,5]
// CHECK-NEXT: node "y/bf16/to_f32.1" wgrad("relu") Cast(%y/bf16) {to = 1} -> %y/bf16/f32.1 : f32[2,3,5]
// CHECK-NEXT: node "g3" wgrad("relu") Sub(%g2, %y/bf16/f32.1) -> %g3 : f32[2,3,5]
// CHECK-NEXT: node "y/bf16/to_f32.2" bwd("other") Cast(%y/bf16) {to = 1} -> %y/bf16/f32.2 : f32[2,3,5]
// CHECK-NEXT: node "g4" bwd("other") Sub(%g3, %y/bf16/f32.2) -> %g4 : f32[2,3,5]
// CHECK-NEXT: node "rs" wgrad("mm") Reshape(%x/bf16, %rows) -> %xr : bf16[6,4]
// CHECK-NEXT: node "dy/bf16" wgrad("mm") Cast(%dy) {to = 16} -> %dy/bf16 : bf16[6,5]
// CHECK-NEXT: node "wg" wgrad("mm") Gemm(%xr, %dy/bf16) {output_dtype = 1, transA = 1} -> %gw : f32[4,5]
// CHECK-NOT: x/bf16/to_f32
// CHECK: output %gw
graph "mpb" {
  opset "" 17
  input %x : f32[2,3,4]
  input %dy : f32[6,5]
  input %dr : f32[2,3,5]
  const %w : f32[4,5] = [0.5, 1.0, 1.5, 2.0, 0.5, 1.0, 1.5, 2.0, 0.5, 1.0, 1.5, 2.0, 0.5, 1.0, 1.5, 2.0, 0.5, 1.0, 1.5, 2.0]
  const %rows : i64[2] = [6, 4]
  node "mm" MatMul(%x, %w) -> %y : f32[2,3,5]
  node "relu" Relu(%y) -> %r : f32[2,3,5]
  node "g1" bwd("relu") Mul(%dr, %y) -> %g1 : f32[2,3,5]
  node "g2" bwd("relu") Add(%g1, %y) -> %g2 : f32[2,3,5]
  node "g3" wgrad("relu") Sub(%g2, %y) -> %g3 : f32[2,3,5]
  node "g4" bwd("other") Sub(%g3, %y) -> %g4 : f32[2,3,5]
  node "rs" wgrad("mm") Reshape(%x, %rows) -> %xr : f32[6,4]
  node "wg" wgrad("mm") Gemm(%xr, %dy) {transA = 1} -> %gw : f32[4,5]
  output %r
  output %g4
  output %gw
}
