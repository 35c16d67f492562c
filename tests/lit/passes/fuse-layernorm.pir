// RUN: pipec %s --emit=ir --passes=infer-shapes,fuse-layernorm,dce | FileCheck %s
// LayerNorm as torch.onnx.export writes it before opset 17 becomes one
// LayerNormalization; the affine Mul and Add fold in; without them the
// scale is ones. A chain whose inner value is also a graph output, or that
// reduces another axis, stays as it is.

// CHECK: node "/ln_1/LayerNormalization" LayerNormalization(%x, %ln_1.weight, %ln_1.bias) {axis = -1, epsilon = 9.99999975e-06} -> %ln1 : f32[2,3,4]
// CHECK: node "/ln_2/LayerNormalization" LayerNormalization(%ln1, %{{.*}}ones{{.*}}) {axis = -1, epsilon = 0.00100000005} -> %ln2 : f32[2,3,4]
// CHECK: node "/keep/ReduceMean" ReduceMean(%ln2)
// CHECK: node "/axis1/ReduceMean" ReduceMean(%keep_out)
// CHECK-NOT: LayerNormalization
graph "ln" {
  opset "" 13
  input %x : f32[2,3,4]
  const %two : f32[] = [2.0]
  const %eps : f32[] = [1e-05]
  const %eps2 : f32[] = [0.001]
  const %ln_1.weight : f32[4] = [1.0, 0.5, 2.0, 1.5]
  const %ln_1.bias : f32[4] = [0.1, 0.2, 0.3, 0.4]
  node "/ln_1/ReduceMean" ReduceMean(%x) {axes = [-1], keepdims = 1} -> %mu1 : f32[2,3,1]
  node "/ln_1/Sub" Sub(%x, %mu1) -> %d1 : f32[2,3,4]
  node "/ln_1/Pow" Pow(%d1, %two) -> %p1 : f32[2,3,4]
  node "/ln_1/ReduceMean_1" ReduceMean(%p1) {axes = [-1], keepdims = 1} -> %v1 : f32[2,3,1]
  node "/ln_1/Add" Add(%v1, %eps) -> %e1 : f32[2,3,1]
  node "/ln_1/Sqrt" Sqrt(%e1) -> %s1 : f32[2,3,1]
  node "/ln_1/Div" Div(%d1, %s1) -> %y1 : f32[2,3,4]
  node "/ln_1/Mul" Mul(%y1, %ln_1.weight) -> %m1 : f32[2,3,4]
  node "/ln_1/Add_1" Add(%ln_1.bias, %m1) -> %ln1 : f32[2,3,4]
  node "/ln_2/ReduceMean" ReduceMean(%ln1) {axes = [2], keepdims = 1} -> %mu2 : f32[2,3,1]
  node "/ln_2/Sub" Sub(%ln1, %mu2) -> %d2 : f32[2,3,4]
  node "/ln_2/Pow" Pow(%d2, %two) -> %p2 : f32[2,3,4]
  node "/ln_2/ReduceMean_1" ReduceMean(%p2) {axes = [-1], keepdims = 1} -> %v2 : f32[2,3,1]
  node "/ln_2/Add" Add(%eps2, %v2) -> %e2 : f32[2,3,1]
  node "/ln_2/Sqrt" Sqrt(%e2) -> %s2 : f32[2,3,1]
  node "/ln_2/Div" Div(%d2, %s2) -> %ln2 : f32[2,3,4]
  node "/keep/ReduceMean" ReduceMean(%ln2) {axes = [-1], keepdims = 1} -> %mu3 : f32[2,3,1]
  node "/keep/Sub" Sub(%ln2, %mu3) -> %d3 : f32[2,3,4]
  node "/keep/Pow" Pow(%d3, %two) -> %p3 : f32[2,3,4]
  node "/keep/ReduceMean_1" ReduceMean(%p3) {axes = [-1], keepdims = 1} -> %v3 : f32[2,3,1]
  node "/keep/Add" Add(%v3, %eps) -> %e3 : f32[2,3,1]
  node "/keep/Sqrt" Sqrt(%e3) -> %s3 : f32[2,3,1]
  node "/keep/Div" Div(%d3, %s3) -> %keep_out : f32[2,3,4]
  node "/axis1/ReduceMean" ReduceMean(%keep_out) {axes = [1], keepdims = 1} -> %mu4 : f32[2,1,4]
  node "/axis1/Sub" Sub(%keep_out, %mu4) -> %d4 : f32[2,3,4]
  node "/axis1/Pow" Pow(%d4, %two) -> %p4 : f32[2,3,4]
  node "/axis1/ReduceMean_1" ReduceMean(%p4) {axes = [1], keepdims = 1} -> %v4 : f32[2,1,4]
  node "/axis1/Add" Add(%v4, %eps) -> %e4 : f32[2,1,4]
  node "/axis1/Sqrt" Sqrt(%e4) -> %s4 : f32[2,1,4]
  node "/axis1/Div" Div(%d4, %s4) -> %out : f32[2,3,4]
  output %out
  output %v3
}
