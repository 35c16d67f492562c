#!/usr/bin/env python3
"""tests/tools/torch_style.py - a transformer block written the way
torch.onnx.export writes one, for opset 13 or 17, with a dynamic batch.

    torch_style.py OUT.onnx --opset 13|17 [--static-batch N]

What the exporter does and pipec must digest: Constant nodes for scalars,
shape arithmetic on the dynamic batch (Shape -> Gather -> Unsqueeze -> Concat
-> Reshape; Shape -> Slice with INT64_MAX ends), position ids from Range,
LayerNormalization decomposed into ReduceMean/Sub/Pow/Sqrt/Div at opset 13
(the fused op at 17), GELU through Erf, an attention mask built with
ConstantOfShape/Equal/Where/Expand, value names like 'onnx::MatMul_12' and
'/attn/Softmax_output_0'. Weights come from a fixed numpy seed.
"""
import argparse

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh, save

INT64_MAX = 9223372036854775807


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--static-batch", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.RandomState(11)
    S, D, H, V = 8, 32, 4, 50
    nodes, inits = [], []
    n = [0]

    def init(name, arr):
        inits.append(nh.from_array(np.asarray(arr), name))
        return name

    def const(value, dtype=np.int64):
        n[0] += 1
        name = f"/Constant_{n[0]}_output_0"
        nodes.append(h.make_node("Constant", [], [name], name=f"/Constant_{n[0]}",
                                 value=nh.from_array(np.asarray(value, dtype=dtype))))
        return name

    def op(kind, ins, scope, **attrs):
        n[0] += 1
        out = f"/{scope}/{kind}_{n[0]}_output_0"
        nodes.append(h.make_node(kind, ins, [out], name=f"/{scope}/{kind}_{n[0]}", **attrs))
        return out

    def unsqueeze(x, axis, scope):
        if a.opset >= 13:
            return op("Unsqueeze", [x, const([axis])], scope)
        return op("Unsqueeze", [x], scope, axes=[axis])

    def layernorm(x, scope):
        g = init(f"{scope}.weight", (1 + 0.1 * rng.randn(D)).astype(np.float32))
        b = init(f"{scope}.bias", (0.1 * rng.randn(D)).astype(np.float32))
        if a.opset >= 17:
            return op("LayerNormalization", [x, g, b], scope, axis=-1, epsilon=1e-5)
        mu = op("ReduceMean", [x], scope, axes=[-1], keepdims=1)
        d = op("Sub", [x, mu], scope)
        var = op("ReduceMean", [op("Pow", [d, const(2.0, np.float32)], scope)], scope, axes=[-1],
                 keepdims=1)
        y = op("Div", [d, op("Sqrt", [op("Add", [var, const(1e-5, np.float32)], scope)], scope)], scope)
        return op("Add", [op("Mul", [y, g], scope), b], scope)

    def linear(x, din, dout, scope):
        w = init(f"onnx::MatMul_{n[0] + 1000}", (rng.randn(din, dout) / np.sqrt(din)).astype(np.float32))
        b = init(f"{scope}.bias", (0.1 * rng.randn(dout)).astype(np.float32))
        return op("Add", [b, op("MatMul", [x, w], scope)], scope)

    batch_dim = a.static_batch if a.static_batch else "batch_size"
    ids = "input_ids"
    emb = init("wte.weight", rng.randn(V, D).astype(np.float32))
    pos = init("wpe.weight", (0.1 * rng.randn(S, D)).astype(np.float32))
    shape = op("Shape", [ids], "emb")
    seq = op("Gather", [shape, const(1)], "emb", axis=0)
    position_ids = op("Range", [const(0), seq, const(1)], "emb")
    x = op("Add", [op("Gather", [emb, ids], "emb"), op("Gather", [pos, position_ids], "emb")], "emb")

    # Attention with a causal mask and a padding mask from the ids (id 0).
    hdn = layernorm(x, "ln_1")
    qkv = linear(hdn, D, 3 * D, "attn.c_attn")
    split_args = {"axis": 2}
    if a.opset >= 13:
        q, k, v = [f"/attn/split_{i}" for i in range(3)]
        nodes.append(h.make_node("Split", [qkv, const([D, D, D])], [q, k, v], name="/attn/Split", axis=2))
    else:
        q, k, v = [f"/attn/split_{i}" for i in range(3)]
        nodes.append(h.make_node("Split", [qkv], [q, k, v], name="/attn/Split", split=[D, D, D], **split_args))
    bshape = op("Shape", [hdn], "attn")
    b = unsqueeze(op("Gather", [bshape, const(0)], "attn", axis=0), 0, "attn")
    s = op("Slice", [bshape, const([1]), const([2])], "attn")  # [seq]
    heads = op("Concat", [b, s, const([H]), const([D // H])], "attn", axis=0)

    def split_heads(t):
        return op("Transpose", [op("Reshape", [t, heads], "attn")], "attn", perm=[0, 2, 1, 3])

    qh, kh, vh = split_heads(q), split_heads(k), split_heads(v)
    scores = op("Div", [op("MatMul", [qh, op("Transpose", [kh], "attn", perm=[0, 1, 3, 2])], "attn"),
                        const(np.sqrt(D // H), np.float32)], "attn")
    causal = init("attn.masked_bias", np.tril(np.ones((1, 1, S, S), dtype=bool)))
    # Rows and columns up to the actual sequence length (Slice with INT64_MAX).
    causal = op("Slice", [causal, const([0, 0]), op("Concat", [s, s], "attn", axis=0), const([2, 3])], "attn")
    pad = op("Equal", [ids, const(0)], "attn")  # [b, seq] true where padding
    pad = unsqueeze(unsqueeze(pad, 1, "attn"), 1, "attn")
    keep = op("And", [causal, op("Not", [pad], "attn")], "attn")
    neg = op("ConstantOfShape", [op("Shape", [scores], "attn")], "attn",
             value=nh.from_array(np.array([-1e9], np.float32)))
    scores = op("Where", [op("Expand", [keep, op("Shape", [scores], "attn")], "attn"), scores, neg], "attn")
    probs = op("Softmax", [scores], "attn", axis=-1 if a.opset >= 13 else 3)
    ctx = op("Transpose", [op("MatMul", [probs, vh], "attn")], "attn", perm=[0, 2, 1, 3])
    merged = op("Concat", [b, s, const([D])], "attn", axis=0)
    ctx = op("Reshape", [ctx, merged], "attn")
    x = op("Add", [x, linear(ctx, D, D, "attn.c_proj")], "res1")

    # MLP with exact GELU through Erf.
    hdn = linear(layernorm(x, "ln_2"), D, 4 * D, "mlp.c_fc")
    gelu = op("Mul", [op("Mul", [hdn, op("Add", [op("Erf", [op("Div", [hdn, const(1.4142135, np.float32)], "mlp")], "mlp"),
                                                  const(1.0, np.float32)], "mlp")], "mlp"),
                      const(0.5, np.float32)], "mlp")
    x = op("Add", [x, linear(gelu, 4 * D, D, "mlp.c_proj")], "res2")
    logits = op("MatMul", [layernorm(x, "ln_f"), init("lm_head", rng.randn(D, V).astype(np.float32) / np.sqrt(D))],
                "head")
    nodes.append(h.make_node("Identity", [logits], ["logits"], name="/head/Identity"))

    graph = h.make_graph(nodes, "torch_jit", [h.make_tensor_value_info(ids, T.INT64, [batch_dim, S])],
                         [h.make_tensor_value_info("logits", T.FLOAT, [batch_dim, S, V])], initializer=inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", a.opset)], producer_name="pytorch",
                         ir_version=7)
    save(model, a.out)


if __name__ == "__main__":
    main()
