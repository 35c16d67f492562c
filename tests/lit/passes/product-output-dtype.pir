// A product's output_dtype (support/FusedOps.h): bf16 or f16 operands, an
// f32 result; anything else is refused by name.
// RUN: pipec %s --emit=ir --passes=infer-shapes | FileCheck %s
// CHECK: node "mm" MatMul(%a, %b) {output_dtype = 1} -> %y : f32[2,3]
// CHECK: node "g" Gemm(%a, %bt, %c) {output_dtype = 1, transB = 1} -> %z : f32[2,3]
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
  input %a : bf16[2,4]
  input %b : bf16[4,3]
  input %bt : bf16[3,4]
  input %c : f32[3]
  node "mm" MatMul(%a, %b) {output_dtype = 1} -> %y : f32[2,3]
  node "g" Gemm(%a, %bt, %c) {output_dtype = 1, transB = 1} -> %z : f32[2,3]
  output %y
  output %z
}
