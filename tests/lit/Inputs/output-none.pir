graph "g" {
  opset "" 17
  input %x : f32[4]
  node "a" Relu(%x) -> %a : f32[4]
  output none
}
