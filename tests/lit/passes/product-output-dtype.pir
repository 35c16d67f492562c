// A product's output_dtype (support/FusedOps.h): bf16 or f16 operands (one
// of them may be an f32 weight, which the product rounds), an f32 result;
// anything else is refused by name.
// RUN: pipec %s --emit=ir --passes=infer-shapes | FileCheck %s
// CHECK: node "mm" MatMul(%a, %b) {output_dtype = 1} -> %y : f32[2,3]
// CHECK: node "g" Gemm(%a, %bt, %c) {output_dtype = 1, transB = 1} -> %z : f32[2,3]
// CHECK: node "conv" Conv(%x, %w, %c) {output_dtype = 1} -> %v : f32[1,3,2,2]
// CHECK: node "dx" pipec:ConvGradInput(%dv, %w) {output_dtype = 1, shape = [1, 4, 3, 3]} -> %gx : f32[1,4,3,3]
// CHECK: node "mw" MatMul(%a, %wf) {output_dtype = 1} -> %m : f32[2,3]
// RUN: sed -e 's/node "conv" Conv(%x, %w, %c)/node "conv" Conv(%x, %w, %xc)/' %s > %t.bias.pir
// RUN: not pipec %t.bias.pir --emit=ir --passes=infer-shapes 2>&1 | FileCheck %s --check-prefix=BIAS
// BIAS: error: {{.*}}node 'conv' (Conv, opset 17): input 2 'xc' has element type bf16 but the product gives f32
// RUN: sed -e 's/%bt : bf16/%bt : f16/' %s > %t.mixed.pir
// RUN: not pipec %t.mixed.pir --emit=ir --passes=infer-shapes 2>&1 | FileCheck %s --check-prefix=MIXED
// MIXED: error: {{.*}}node 'g' (Gemm, opset 17): the operands differ in type: bf16 and f16
// RUN: sed -e 's/: bf16/: f32/g' %s > %t.f32.pir
// RUN: not pipec %t.f32.pir --emit=ir --passes=infer-shapes 2>&1 | FileCheck %s --check-prefix=F32
// F32: error: {{.*}}output_dtype needs bf16 or f16 operands, they are f32
// RUN: sed -e 's/output_dtype = 1}/output_dtype = 16}/' %s > %t.to16.pir
// RUN: not pipec %t.to16.pir --emit=ir --passes=infer-shapes 2>&1 | FileCheck %s --check-prefix=TO16
// TO16: error: {{.*}}output_dtype must be 1 (f32), got 16
graph "products" {
  opset "" 17
  opset "pipec" 1
  input %a : bf16[2,4]
  input %b : bf16[4,3]
  input %bt : bf16[3,4]
  input %c : f32[3]
  input %x : bf16[1,4,3,3]
  input %w : bf16[3,4,2,2]
  input %xc : bf16[3]
  input %dv : bf16[1,3,2,2]
  const %wf : f32[4,3] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
  node "mm" MatMul(%a, %b) {output_dtype = 1} -> %y : f32[2,3]
  node "g" Gemm(%a, %bt, %c) {output_dtype = 1, transB = 1} -> %z : f32[2,3]
  node "conv" Conv(%x, %w, %c) {output_dtype = 1} -> %v : f32[1,3,2,2]
  node "dx" pipec:ConvGradInput(%dv, %w) {output_dtype = 1, shape = [1, 4, 3, 3]} -> %gx : f32[1,4,3,3]
  node "mw" MatMul(%a, %wf) {output_dtype = 1} -> %m : f32[2,3]
  output %y
  output %z
  output %v
  output %gx
  output %m
}
