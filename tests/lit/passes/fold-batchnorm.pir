// RUN: pipec %s --emit=ir --passes=infer-shapes,fold-batchnorm,dce | FileCheck %s
// An inference BatchNormalization after a Conv with constant weights folds
// into them: s = scale / sqrt(var + epsilon) = [4/2, 3/3] = [2, 1],
// W' = W * s = [2, 2], B' = (B - mean) * s + beta = [-1.5, -1] (no B: 0).
// A Conv whose weights are an input, and one whose output something else
// also reads, keep their BatchNormalization.

// CHECK-DAG:  const %w/folded : f32[2,1,1,1] = [2.0, 2.0]
// CHECK-DAG:  const %bn/bias : f32[2] = [-1.5, -1.0]
// CHECK:      node "conv" Conv(%x, %w/folded, %bn/bias) {group = 2} -> %c : f32[1,2,3,3]
// CHECK-NEXT: node "relu" Relu(%c) -> %y : f32[1,2,3,3]
// CHECK-NEXT: node "conv2" Conv(%x, %win) {group = 2} -> %c2 : f32[1,2,3,3]
// CHECK-NEXT: node "bn2" BatchNormalization(%c2, %scale, %beta, %mean, %var)
// CHECK-NEXT: node "conv3" Conv(%x, %w) {group = 2} -> %c3 : f32[1,2,3,3]
// CHECK-NEXT: node "bn3" BatchNormalization(%c3, %scale, %beta, %mean, %var)
// CHECK-NEXT: node "sum" Add(%b3, %c3)
graph "fold" {
  opset "" 15
  input %x : f32[1,2,3,3]
  input %win : f32[2,1,1,1]
  const %w : f32[2,1,1,1] = [1, 2]
  const %scale : f32[2] = [4, 3]
  const %beta : f32[2] = [0.5, -1]
  const %mean : f32[2] = [1, 0]
  const %var : f32[2] = [3, 8]
  node "conv" Conv(%x, %w) {group = 2} -> %c : f32[1,2,3,3]
  node "bn" BatchNormalization(%c, %scale, %beta, %mean, %var) {epsilon = 1.0} -> %b : f32[1,2,3,3]
  node "relu" Relu(%b) -> %y : f32[1,2,3,3]
  node "conv2" Conv(%x, %win) {group = 2} -> %c2 : f32[1,2,3,3]
  node "bn2" BatchNormalization(%c2, %scale, %beta, %mean, %var) {epsilon = 1.0} -> %b2 : f32[1,2,3,3]
  node "conv3" Conv(%x, %w) {group = 2} -> %c3 : f32[1,2,3,3]
  node "bn3" BatchNormalization(%c3, %scale, %beta, %mean, %var) {epsilon = 1.0} -> %b3 : f32[1,2,3,3]
  node "sum" Add(%b3, %c3) -> %s3 : f32[1,2,3,3]
  output %y
  output %b2
  output %s3
}
