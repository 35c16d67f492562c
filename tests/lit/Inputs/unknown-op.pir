graph "g" {
  input %x : f32[2]
  node "f" Frobnicate(%x) -> %y : ?
  output %y
}
