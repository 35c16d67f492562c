// RUN: pipec %s --emit=ir --passes=none --precision bf16 | FileCheck %s
// RUN: pipec %s --emit=ir --passes=none --precision fp16 --keep-fp32 mm2 | FileCheck %s --check-prefix=KEEP
// The products read their operands through bf16 copies: a computed value
// (%h) is copied once, right after its producer. MatMul and Gemm read the
// copies themselves and give f32 (output_dtype = 1); they read a weight
// (%w1) as it is and round it themselves, once a step (where both
// operands are weights, operand 0 is copied). Other products (Einsum)
// read copies back to f32 right before them, a weight's made for that
// reader. Outputs, biases and the other nodes stay f32.

// CHECK: node "x/bf16" Cast(%x) {to = 16} -> %x/bf16 : bf16[2,2]
// CHECK-NEXT: node "mm1" Gemm(%x/bf16, %w1, %b1) {output_dtype = 1} -> %h : f32[2,2]
// CHECK-NEXT: node "h/bf16" Cast(%h) {to = 16} -> %h/bf16 : bf16[2,2]
// CHECK-NEXT: node "relu" Relu(%h) -> %r : f32[2,2]
// CHECK-NEXT: node "r/bf16" Cast(%r) {to = 16} -> %r/bf16 : bf16[2,2]
// CHECK-NEXT: node "mm2" MatMul(%h/bf16, %r/bf16) {output_dtype = 1} -> %y : f32[2,2]
// CHECK-NEXT: node "y/bf16" Cast(%y) {to = 16} -> %y/bf16 : bf16[2,2]
// CHECK-NEXT: node "y/bf16/to_f32" Cast(%y/bf16) {to = 1} -> %y/bf16/f32 : f32[2,2]
// CHECK-NEXT: node "r/bf16/to_f32" Cast(%r/bf16) {to = 1} -> %r/bf16/f32 : f32[2,2]
// CHECK-NEXT: node "e" Einsum(%y/bf16/f32, %r/bf16/f32) {equation = "ij,jk->ik"} -> %z : f32[2,2]
// CHECK-NEXT: node "w1/bf16" Cast(%w1) {to = 16} -> %w1/bf16 : bf16[2,2]
// CHECK-NEXT: node "ww" MatMul(%w1/bf16, %w2) {output_dtype = 1} -> %v : f32[2,2]
// CHECK-NEXT: node "v/bf16" Cast(%v) {to = 16} -> %v/bf16 : bf16[2,2]
// CHECK-NEXT: node "v/bf16/to_f32" Cast(%v/bf16) {to = 1} -> %v/bf16/f32 : f32[2,2]
// CHECK-NEXT: node "w1/bf16.1" Cast(%w1) {to = 16} -> %w1/bf16.1 : bf16[2,2]
// CHECK-NEXT: node "w1/bf16/to_f32" Cast(%w1/bf16.1) {to = 1} -> %w1/bf16/f32 : f32[2,2]
// CHECK-NEXT: node "ew" Einsum(%v/bf16/f32, %w1/bf16/f32) {equation = "ij,jk->ik"} -> %u : f32[2,2]
// CHECK-NOT: Cast
// CHECK: output %z

// KEEP: node "mm1" Gemm(%x/f16, %w1, %b1) {output_dtype = 1} -> %h : f32[2,2]
// KEEP: node "mm2" MatMul(%h, %r) -> %y : f32[2,2]

// RUN: not pipec %s --emit=ir --passes=none --precision bf16 --keep-fp32 nosuch 2>&1 | FileCheck %s --check-prefix=NOSUCH
// NOSUCH: error: pass mixed-precision: --keep-fp32: the graph has no node 'nosuch'
// RUN: not pipec %s --emit=ir --passes=none --keep-fp32 mm2 2>&1 | FileCheck %s --check-prefix=NOPREC
// NOPREC: error: --keep-fp32 needs --precision bf16 or fp16
// RUN: not pipec %s --emit=ir --precision fp8 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: --precision must be fp32, bf16 or fp16 (got 'fp8')
graph "mp" {
  opset "" 17
  input %x : f32[2,2]
  const %w1 : f32[2,2] = [0.5, 1.0, 1.5, 2.0]
  const %b1 : f32[2] = [0.1, 0.2]
  const %w2 : f32[2,2] = [0.25, 0.5, 0.75, 1.0]
  node "mm1" Gemm(%x, %w1, %b1) -> %h : f32[2,2]
  node "relu" Relu(%h) -> %r : f32[2,2]
  node "mm2" MatMul(%h, %r) -> %y : f32[2,2]
  node "e" Einsum(%y, %r) {equation = "ij,jk->ik"} -> %z : f32[2,2]
  node "ww" MatMul(%w1, %w2) -> %v : f32[2,2]
  node "ew" Einsum(%v, %w1) {equation = "ij,jk->ik"} -> %u : f32[2,2]
  output %z
  output %u
}
