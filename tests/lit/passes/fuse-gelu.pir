// RUN: pipec %s --emit=ir --passes=infer-shapes,fuse-gelu,dce | FileCheck %s
// The exact GELU written with Erf, in both orders torch.onnx.export and
// hand-written models use, becomes Gelu; a chain with another constant
// (here 0.6 instead of 0.5) stays.

// CHECK: node "/mlp/Gelu" Gelu(%h) {approximate = "none"} -> %g1 : f32[2,8]
// CHECK: node "/mlp2/Gelu" Gelu(%g1) {approximate = "none"} -> %g2 : f32[2,8]
// CHECK: node "/odd/Erf" Erf(
// CHECK-NOT: Gelu
graph "gelu" {
  opset "" 13
  input %h : f32[2,8]
  const %sqrt2 : f32[] = [1.4142135]
  const %rsqrt2 : f32[] = [0.70710678]
  const %one : f32[] = [1.0]
  const %half : f32[] = [0.5]
  const %odd : f32[] = [0.6]
  node "/mlp/Div" Div(%h, %sqrt2) -> %a1 : f32[2,8]
  node "/mlp/Erf" Erf(%a1) -> %e1 : f32[2,8]
  node "/mlp/Add" Add(%e1, %one) -> %p1 : f32[2,8]
  node "/mlp/Mul" Mul(%h, %p1) -> %m1 : f32[2,8]
  node "/mlp/Mul_1" Mul(%m1, %half) -> %g1 : f32[2,8]
  node "/mlp2/Mul" Mul(%g1, %rsqrt2) -> %a2 : f32[2,8]
  node "/mlp2/Erf" Erf(%a2) -> %e2 : f32[2,8]
  node "/mlp2/Add" Add(%one, %e2) -> %p2 : f32[2,8]
  node "/mlp2/Mul_1" Mul(%half, %g1) -> %q2 : f32[2,8]
  node "/mlp2/Mul_2" Mul(%q2, %p2) -> %g2 : f32[2,8]
  node "/odd/Div" Div(%g2, %sqrt2) -> %a3 : f32[2,8]
  node "/odd/Erf" Erf(%a3) -> %e3 : f32[2,8]
  node "/odd/Add" Add(%e3, %one) -> %p3 : f32[2,8]
  node "/odd/Mul" Mul(%g2, %p3) -> %m3 : f32[2,8]
  node "/odd/Mul_1" Mul(%m3, %odd) -> %out : f32[2,8]
  output %out
}
