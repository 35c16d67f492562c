// RUN: pipec %s --emit=ir --passes=infer-shapes | FileCheck %s
// infer-shapes expands LSTM and RNN (passes/expand/Recurrent.cpp): one Gemm
// projects every step's input, one Split cuts it into steps; each step has
// one Gemm H x R^T with the step's rows as C (none at the first step, whose
// state is zero), a Split into the gates i, o, f, c and their elementwise
// ops; Y is a Concat over the steps and a Reshape. sequence_lens gives a
// mask per step (Greater) and Where keeps the state and zeros Y.

// CHECK-NOT: LSTM(
// CHECK: node "lstm/Gemm" Gemm(%lstm/Reshape, %lstm/Reshape.1) {transB = 1} -> %lstm/Gemm : f32[2,8]
// CHECK-NEXT: node "lstm/Split" Split(%lstm/Gemm) {axis = 0} -> %"lstm/Split:0" : f32[1,8], %"lstm/Split:1" : f32[1,8]
// CHECK: node "lstm/Split.1" Split(%"lstm/Split:0") {axis = 1} -> {{.*}} : f32[1,2], {{.*}} : f32[1,2], {{.*}} : f32[1,2], {{.*}} : f32[1,2]
// CHECK-NOT: Gemm(
// CHECK: node "lstm/Mul.1" Mul(%lstm/Sigmoid.2, %lstm/Tanh.1) -> %lstm/Mul.1 : f32[1,2]
// CHECK-NEXT: node "lstm/Gemm.1" Gemm(%lstm/Mul.1, %lstm/Reshape.2, %"lstm/Split:1") {transB = 1} -> %lstm/Gemm.1 : f32[1,8]
// CHECK: node "lstm/Mul.4" Mul(%lstm/Sigmoid.5, %lstm/Tanh.3) -> %lstm/Mul.4 : f32[1,2]
// CHECK-NEXT: node "lstm/Concat" Concat(%lstm/Mul.1, %lstm/Mul.4) {axis = 0} -> %lstm/Concat : f32[2,2]
// CHECK-NEXT: node "lstm/Reshape.3" Reshape(%lstm/Concat, %lstm/const.3) -> %y : f32[2,1,1,2]
// CHECK-NEXT: node "lstm/Reshape.4" Reshape(%lstm/Mul.4, %lstm/const.4) -> %yh : f32[1,1,2]

// CHECK-NOT: RNN(
// CHECK: node "rnn/Greater" Greater(%rnn/Reshape.2, %rnn/const.3) -> %rnn/Greater : bool[1,1]
// CHECK: node "rnn/Relu" Relu(%"rnn/Split:0") -> %rnn/Relu : f32[1,2]
// CHECK-NEXT: node "rnn/Where" Where(%rnn/Greater, %rnn/Relu, %rnn/const.6) -> %rnn/Where : f32[1,2]
// CHECK-NEXT: node "rnn/Gemm.1" Gemm(%rnn/Where, %rnn/Reshape.3, %"rnn/Split:1") {transB = 1} -> %rnn/Gemm.1 : f32[1,2]
// CHECK-NEXT: node "rnn/Relu.1" Relu(%rnn/Gemm.1) -> %rnn/Relu.1 : f32[1,2]
// CHECK-NEXT: node "rnn/Where.1" Where(%rnn/Greater.1, %rnn/Relu.1, %rnn/const.6) -> %rnn/Where.1 : f32[1,2]
// CHECK-NEXT: node "rnn/Where.2" Where(%rnn/Greater.1, %rnn/Relu.1, %rnn/Where) -> %rnn/Where.2 : f32[1,2]
// CHECK-NEXT: node "rnn/Concat" Concat(%rnn/Where, %rnn/Where.1) {axis = 0} -> %rnn/Concat : f32[2,2]
// CHECK-NEXT: node "rnn/Reshape.4" Reshape(%rnn/Concat, %rnn/const.7) -> %ry : f32[2,1,1,2]
graph "recurrent" {
  opset "" 14
  input %x : f32[2,1,3]
  input %w : f32[1,8,3]
  input %r : f32[1,8,2]
  input %wr : f32[1,2,3]
  input %rr : f32[1,2,2]
  input %lens : i32[1]
  node "lstm" LSTM(%x, %w, %r) {hidden_size = 2} -> %y : ?, %yh : ?
  node "rnn" RNN(%x, %wr, %rr, none, %lens) {activations = ["Relu"], hidden_size = 2} -> %ry : ?
  output %y
  output %yh
  output %ry
}
