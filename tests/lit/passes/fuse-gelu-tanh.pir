// RUN: pipec %s --emit=ir --passes=infer-shapes,fuse-gelu,dce | FileCheck %s
// GELU's tanh approximation as torch.onnx.export writes
// gelu(approximate='tanh') (h * (h * h), the constants first) and as
// GPT-2's code writes it out (Pow(h, 3), 0.5 * h first) becomes Gelu with
// approximate "tanh"; a chain with another cubic coefficient stays.

// CHECK: node "/a/Gelu" Gelu(%h) {approximate = "tanh"} -> %ga : f32[2,8]
// CHECK: node "/b/Gelu" Gelu(%ga) {approximate = "tanh"} -> %gb : f32[2,8]
// CHECK: node "/odd/Tanh" Tanh(
// CHECK-NOT: Gelu
graph "gelu_tanh" {
  opset "" 13
  input %h : f32[2,8]
  const %c : f32[] = [0.044715]
  const %s : f32[] = [0.7978845608]
  const %one : f32[] = [1.0]
  const %half : f32[] = [0.5]
  const %three : f32[] = [3.0]
  const %odd : f32[] = [0.05]
  node "/a/Mul" Mul(%h, %h) -> %a1 : f32[2,8]
  node "/a/Mul_1" Mul(%h, %a1) -> %a2 : f32[2,8]
  node "/a/Mul_2" Mul(%c, %a2) -> %a3 : f32[2,8]
  node "/a/Add" Add(%h, %a3) -> %a4 : f32[2,8]
  node "/a/Mul_3" Mul(%s, %a4) -> %a5 : f32[2,8]
  node "/a/Tanh" Tanh(%a5) -> %a6 : f32[2,8]
  node "/a/Add_1" Add(%one, %a6) -> %a7 : f32[2,8]
  node "/a/Mul_4" Mul(%h, %a7) -> %a8 : f32[2,8]
  node "/a/Mul_5" Mul(%half, %a8) -> %ga : f32[2,8]
  node "/b/Mul" Mul(%ga, %half) -> %b0 : f32[2,8]
  node "/b/Pow" Pow(%ga, %three) -> %b1 : f32[2,8]
  node "/b/Mul_1" Mul(%b1, %c) -> %b2 : f32[2,8]
  node "/b/Add" Add(%ga, %b2) -> %b3 : f32[2,8]
  node "/b/Mul_2" Mul(%b3, %s) -> %b4 : f32[2,8]
  node "/b/Tanh" Tanh(%b4) -> %b5 : f32[2,8]
  node "/b/Add_1" Add(%b5, %one) -> %b6 : f32[2,8]
  node "/b/Mul_3" Mul(%b0, %b6) -> %gb : f32[2,8]
  node "/odd/Pow" Pow(%gb, %three) -> %o1 : f32[2,8]
  node "/odd/Mul" Mul(%o1, %odd) -> %o2 : f32[2,8]
  node "/odd/Add" Add(%gb, %o2) -> %o3 : f32[2,8]
  node "/odd/Mul_1" Mul(%o3, %s) -> %o4 : f32[2,8]
  node "/odd/Tanh" Tanh(%o4) -> %o5 : f32[2,8]
  node "/odd/Add_1" Add(%o5, %one) -> %o6 : f32[2,8]
  node "/odd/Mul_2" Mul(%gb, %o6) -> %o7 : f32[2,8]
  node "/odd/Mul_3" Mul(%o7, %half) -> %out : f32[2,8]
  output %out
}
