graph "g" {
  opset "" 17
  input %x : f32[2,2]
  node "m" MatMul(%x) -> %y : ?
  output %y
}
