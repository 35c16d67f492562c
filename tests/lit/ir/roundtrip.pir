// Print -> parse -> print is the identity on the IR text form.
// RUN: pipec %s --emit=ir --passes=none --ir-constants=all > %t.pir
// RUN: pipec %t.pir --emit=ir --passes=none --ir-constants=all > %t2.pir
// RUN: diff %t.pir %t2.pir
// RUN: FileCheck %s < %t.pir

// CHECK:      graph "roundtrip" {
// CHECK-NEXT:   opset "" 17
// CHECK-NEXT:   opset "com.example" 1
// CHECK-NEXT:   input %x : f32[2,3]
// CHECK-NEXT:   input %"odd name:1" : i64[2]
// CHECK-NEXT:   param %w : f32[3,2] = [1.0, -2.5, 3.0000001e+10, inf, -inf, 0.100000001]
// CHECK-NEXT:   const %shape : i64[2] = [3, -1]
// CHECK-NEXT:   const %flags : bool[3] = [1, 0, 1]
// CHECK-NEXT:   node "mm" MatMul(%x, %w) -> %y : f32[2,2]
// CHECK-NEXT:   node "g" Gemm(%x, %w, none) {alpha = 0.5, transA = 0, transB = 1} -> %z : ?
// CHECK-NEXT:   node "attrs" Identity(%y) {e = ints [], f = [1.5, 2.0], s = "a\"b", ss = ["p", "q"], t = tensor f32[2] [1.0, 2.0]} -> %y2 : ?
// CHECK-NEXT:   node "grad" bwd("mm") Identity(%y2) -> %dy : ?
// CHECK-NEXT:   output %y
// CHECK-NEXT:   output %dy
// CHECK-NEXT: }

graph "roundtrip" {
  opset "" 17
  opset "com.example" 1
  input %x : f32[2,3]
  input %"odd name:1" : i64[2]
  param %w : f32[3,2] = [1, -2.5, 3e10, inf, -inf, 0.1]
  const %shape : i64[2] = [3, -1]
  const %flags : bool[3] = [1, 0, 1]
  node "mm" MatMul(%x, %w) -> %y : f32[2,2]
  node "g" Gemm(%x, %w, none) {transB = 1, alpha = 0.5, transA = 0} -> %z : ?
  node "attrs" Identity(%y) {s = "a\"b", f = [1.5, 2.0], e = ints [], ss = ["p", "q"], t = tensor f32[2] [1.0, 2.0]} -> %y2 : ?
  node "grad" bwd("mm") Identity(%y2) -> %dy : ?
  output %y
  output %dy
}
