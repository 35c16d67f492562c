// RUN: pipec %s --emit=ir --passes=none --precision bf16 | FileCheck %s
// The convolutions and their gradients read the bf16 copies of their
// operands themselves and give f32 (output_dtype = 1), as the GEMMs do: no
// f32 view of a copy is left in the graph. They read the weights as they
// are and round them themselves, once a step. Biases stay f32.

// CHECK: node "x/bf16" Cast(%x) {to = 16} -> %x/bf16 : bf16[1,2,4,4]
// CHECK-NEXT: node "c" Conv(%x/bf16, %w, %b) {output_dtype = 1, pads = [1, 1, 1, 1]} -> %y : f32[1,3,4,4]
// CHECK-NEXT: node "y/bf16" Cast(%y) {to = 16} -> %y/bf16 : bf16[1,3,4,4]
// CHECK-NEXT: node "t" ConvTranspose(%y/bf16, %wt) {output_dtype = 1, strides = [2, 2]} -> %u : f32[1,2,8,8]
// CHECK-NEXT: node "dy/bf16" Cast(%dy) {to = 16} -> %dy/bf16 : bf16[1,3,4,4]
// CHECK-NEXT: node "dx" pipec:ConvGradInput(%dy/bf16, %w) {output_dtype = 1, pads = [1, 1, 1, 1], shape = [1, 2, 4, 4]} -> %dx : f32[1,2,4,4]
// CHECK-NEXT: node "dw" pipec:ConvGradWeight(%dy/bf16, %x/bf16) {output_dtype = 1, pads = [1, 1, 1, 1], shape = [3, 2, 3, 3]} -> %dw : f32[3,2,3,3]
// CHECK-NOT: {to = 1}
// RUN: pipec %s --emit=ir --passes=none --precision bf16 --keep-fp32 c | FileCheck %s --check-prefix=KEEP
// KEEP: node "c" Conv(%x, %w, %b) {pads = [1, 1, 1, 1]} -> %y : f32[1,3,4,4]
graph "mpconv" {
  opset "" 17
  opset "pipec" 1
  input %x : f32[1,2,4,4]
  input %dy : f32[1,3,4,4]
  const %w : f32[3,2,3,3] = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
  const %b : f32[3] = [0.25, 0.5, 0.75]
  const %wt : f32[3,2,2,2] = [0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125]
  node "c" Conv(%x, %w, %b) {pads = [1, 1, 1, 1]} -> %y : f32[1,3,4,4]
  node "t" ConvTranspose(%y, %wt) {strides = [2, 2]} -> %u : f32[1,2,8,8]
  node "dx" pipec:ConvGradInput(%dy, %w) {pads = [1, 1, 1, 1], shape = [1, 2, 4, 4]} -> %dx : f32[1,2,4,4]
  node "dw" pipec:ConvGradWeight(%dy, %x) {pads = [1, 1, 1, 1], shape = [3, 2, 3, 3]} -> %dw : f32[3,2,3,3]
  output %u
  output %dx
  output %dw
}
