// RUN: pipec %s --emit=ir --passes=infer-shapes,pack-qkv,dce | FileCheck %s
// torch.nn.MultiheadAttention's sequence-first block (the projection on the
// sequence-first view, Slices, per-head Reshapes and Transposes, Q divided
// by sqrt(d), the output's way back) becomes the projection on the
// batch-first rows, pipec:Attention on the packed projection (heads
// inner, the Div folded into its scale) and the output projection between
// two Reshapes. A block whose V something else reads, and one whose
// output projection reads the sequence-first rows twice, stay as they are.

// CHECK-NOT: node "/a/{{t0|sq|sk|sv|rq|rk|rv|tq|tk|tv|div|to|ro|ry|t5}}"
// CHECK: node "/a/proj" pipec:FusedGemm(%x, %w, %b) -> [[P:%[^ ]+]] : f32[2,8,48]
// CHECK-NEXT: node "/a/attn" pipec:Attention([[P]], [[P]], [[P]]) {heads = 2, heads_inner = 1, mask = "none", packed_qkv = 1, scale = 0.353553{{[0-9]*}}} -> [[O:%[^ ]+]] : f32[2,8,2,8]
// CHECK-NEXT: node "{{.*}}" Reshape([[O]], {{.*}}) -> [[R:%[^ ]+]] : f32[16,16]
// CHECK-NEXT: node "/a/out" Gemm([[R]], %wo, %bo) {transB = 1} -> [[Y:%[^ ]+]] : f32[16,16]
// CHECK-NEXT: node "{{.*}}" Reshape([[Y]], {{.*}}) -> %ay : f32[2,8,16]
// CHECK-NOT: node "/a/
// CHECK: node "/b/t0" Transpose(%x)
// CHECK: node "/b/attn" pipec:Attention(%bq, %bkt, %bv) {mask = "none", scale = 1.0}
// CHECK: node "/c/t0" Transpose(%x)
// CHECK: node "/c/attn" pipec:Attention(%cq, %ckt, %cv) {mask = "none", scale = 1.0}
graph "mha" {
  opset "" 13
  opset "pipec" 1
  input %x : f32[2,8,16]
  input %w : f32[16,48]
  input %b : f32[48]
  input %wo : f32[16,16]
  input %bo : f32[16]
  const %zero : i64[1] = [0]
  const %d16 : i64[1] = [16]
  const %d32 : i64[1] = [32]
  const %d48 : i64[1] = [48]
  const %last : i64[1] = [-1]
  const %heads : i64[3] = [8, 4, 8]
  const %rows : i64[2] = [16, 16]
  const %seq : i64[3] = [8, 2, 16]
  const %c : f32[] = [2.82842708]
  node "/a/t0" Transpose(%x) {perm = [1, 0, 2]} -> %at0 : f32[8,2,16]
  node "/a/proj" pipec:FusedGemm(%at0, %w, %b) -> %ap : f32[8,2,48]
  node "/a/sq" Slice(%ap, %zero, %d16, %last) -> %asq : f32[8,2,16]
  node "/a/sk" Slice(%ap, %d16, %d32, %last) -> %ask : f32[8,2,16]
  node "/a/sv" Slice(%ap, %d32, %d48, %last) -> %asv : f32[8,2,16]
  node "/a/rq" Reshape(%asq, %heads) -> %arq : f32[8,4,8]
  node "/a/rk" Reshape(%ask, %heads) -> %ark : f32[8,4,8]
  node "/a/rv" Reshape(%asv, %heads) -> %arv : f32[8,4,8]
  node "/a/tq" Transpose(%arq) {perm = [1, 0, 2]} -> %atq : f32[4,8,8]
  node "/a/tk" Transpose(%ark) {perm = [1, 2, 0]} -> %akt : f32[4,8,8]
  node "/a/tv" Transpose(%arv) {perm = [1, 0, 2]} -> %av : f32[4,8,8]
  node "/a/div" Div(%atq, %c) -> %aq : f32[4,8,8]
  node "/a/attn" pipec:Attention(%aq, %akt, %av) {mask = "none", scale = 1.0} -> %ao : f32[4,8,8]
  node "/a/to" Transpose(%ao) {perm = [1, 0, 2]} -> %ato : f32[8,4,8]
  node "/a/ro" Reshape(%ato, %rows) -> %aro : f32[16,16]
  node "/a/out" Gemm(%aro, %wo, %bo) {transB = 1} -> %aout : f32[16,16]
  node "/a/ry" Reshape(%aout, %seq) -> %ary : f32[8,2,16]
  node "/a/t5" Transpose(%ary) {perm = [1, 0, 2]} -> %ay : f32[2,8,16]
  node "/b/t0" Transpose(%x) {perm = [1, 0, 2]} -> %bt0 : f32[8,2,16]
  node "/b/proj" pipec:FusedGemm(%bt0, %w, %b) -> %bp : f32[8,2,48]
  node "/b/sq" Slice(%bp, %zero, %d16, %last) -> %bsq : f32[8,2,16]
  node "/b/sk" Slice(%bp, %d16, %d32, %last) -> %bsk : f32[8,2,16]
  node "/b/sv" Slice(%bp, %d32, %d48, %last) -> %bsv : f32[8,2,16]
  node "/b/rq" Reshape(%bsq, %heads) -> %brq : f32[8,4,8]
  node "/b/rk" Reshape(%bsk, %heads) -> %brk : f32[8,4,8]
  node "/b/rv" Reshape(%bsv, %heads) -> %brv : f32[8,4,8]
  node "/b/tq" Transpose(%brq) {perm = [1, 0, 2]} -> %bq : f32[4,8,8]
  node "/b/tk" Transpose(%brk) {perm = [1, 2, 0]} -> %bkt : f32[4,8,8]
  node "/b/tv" Transpose(%brv) {perm = [1, 0, 2]} -> %bv : f32[4,8,8]
  node "/b/attn" pipec:Attention(%bq, %bkt, %bv) {mask = "none", scale = 1.0} -> %bo2 : f32[4,8,8]
  node "/b/to" Transpose(%bo2) {perm = [1, 0, 2]} -> %bto : f32[8,4,8]
  node "/b/ro" Reshape(%bto, %rows) -> %bro : f32[16,16]
  node "/b/out" Gemm(%bro, %wo, %bo) {transB = 1} -> %bout : f32[16,16]
  node "/b/ry" Reshape(%bout, %seq) -> %bry : f32[8,2,16]
  node "/b/t5" Transpose(%bry) {perm = [1, 0, 2]} -> %by : f32[2,8,16]
  node "/c/t0" Transpose(%x) {perm = [1, 0, 2]} -> %ct0 : f32[8,2,16]
  node "/c/proj" pipec:FusedGemm(%ct0, %w, %b) -> %cp : f32[8,2,48]
  node "/c/sq" Slice(%cp, %zero, %d16, %last) -> %csq : f32[8,2,16]
  node "/c/sk" Slice(%cp, %d16, %d32, %last) -> %csk : f32[8,2,16]
  node "/c/sv" Slice(%cp, %d32, %d48, %last) -> %csv : f32[8,2,16]
  node "/c/rq" Reshape(%csq, %heads) -> %crq : f32[8,4,8]
  node "/c/rk" Reshape(%csk, %heads) -> %crk : f32[8,4,8]
  node "/c/rv" Reshape(%csv, %heads) -> %crv : f32[8,4,8]
  node "/c/tq" Transpose(%crq) {perm = [1, 0, 2]} -> %cq : f32[4,8,8]
  node "/c/tk" Transpose(%crk) {perm = [1, 2, 0]} -> %ckt : f32[4,8,8]
  node "/c/tv" Transpose(%crv) {perm = [1, 0, 2]} -> %cv : f32[4,8,8]
  node "/c/attn" pipec:Attention(%cq, %ckt, %cv) {mask = "none", scale = 1.0} -> %co : f32[4,8,8]
  node "/c/to" Transpose(%co) {perm = [1, 0, 2]} -> %cto : f32[8,4,8]
  node "/c/ro" Reshape(%cto, %rows) -> %cro : f32[16,16]
  node "/c/out" MatMul(%cro, %cro) -> %cout : f32[16,16]
  node "/c/ry" Reshape(%cout, %seq) -> %cry : f32[8,2,16]
  node "/c/t5" Transpose(%cry) {perm = [1, 0, 2]} -> %cy : f32[2,8,16]
  output %ay
  output %by
  output %bv
  output %cy
}
