graph "g" {
  opset "" 17
  input %x : f32[2]
  node "r" Relu(%x, %nope) -> %y : ?
  output %y
}
