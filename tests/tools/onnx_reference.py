#!/usr/bin/env python3
"""tests/tools/onnx_reference.py - an independent numpy evaluator of ONNX models.

The reference the end-to-end tests compare pipec against: it loads a model
with the onnx Python package (Debian's python3-onnx), evaluates it node by
node in float64 with numpy, and compares with the .npy outputs piperun wrote.

    onnx_reference.py MODEL.onnx --input NAME=FILE.npy ... --compare DIR [--rtol R --atol A]

Covers the ops the sample models use; an op outside that set is an error.
Exits 0 when every graph output matches, 1 otherwise.
"""
import argparse
import math
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def attrs_of(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def conv2d(x, w, b, a):
    strides = a.get("strides", [1, 1])
    pads = a.get("pads", [0, 0, 0, 0])
    group = a.get("group", 1)
    dil = a.get("dilations", [1, 1])
    assert group == 1 and dil == [1, 1], "reference conv handles group=1, dilation 1"
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    oh = (h - kh) // strides[0] + 1
    ow = (wd - kw) // strides[1] + 1
    out = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1]]
            out += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def maxpool2d(x, a):
    k = a["kernel_shape"]
    strides = a.get("strides", [1, 1])
    pads = a.get("pads", [0, 0, 0, 0])
    assert a.get("dilations", [1, 1]) == [1, 1] and not a.get("ceil_mode", 0), "reference MaxPool: no dilation, floor"
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=-np.inf)
    oh = (x.shape[2] - k[0]) // strides[0] + 1
    ow = (x.shape[3] - k[1]) // strides[1] + 1
    out = np.full(x.shape[:2] + (oh, ow), -np.inf)
    for i in range(k[0]):
        for j in range(k[1]):
            out = np.maximum(out, x[:, :, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1]])
    return out


def sce(logits, labels, a):
    # SoftmaxCrossEntropyLoss, reduction mean, no weights, no ignore_index.
    assert a.get("reduction", b"mean") in (b"mean", "mean")
    lse = np.log(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True)) \
        + logits.max(axis=1, keepdims=True)
    logp = logits - lse
    picked = np.take_along_axis(logp, labels[:, None, ...].astype(np.int64), axis=1)
    return np.array(-picked.mean())


def run_node(node, v, a):
    i = [v[n] if n else None for n in node.input]
    op = node.op_type
    if op == "Add": return [i[0] + i[1]]
    if op == "Sub": return [i[0] - i[1]]
    if op == "Mul": return [i[0] * i[1]]
    if op == "Div":
        if np.issubdtype(np.result_type(i[0], i[1]), np.integer):  # truncates, like C
            q = np.abs(i[0]) // np.abs(i[1])
            return [(np.sign(i[0]) * np.sign(i[1]) * q).astype(np.result_type(i[0], i[1]))]
        return [i[0] / i[1]]
    if op == "MatMul": return [np.matmul(i[0], i[1])]
    if op == "Relu": return [np.maximum(i[0], 0)]
    if op == "LeakyRelu": return [np.where(i[0] >= 0, i[0], a.get("alpha", 0.01) * i[0])]
    if op == "Max": return [np.maximum.reduce(i)]
    if op == "MaxPool": return [maxpool2d(i[0], a)]
    if op == "Tanh": return [np.tanh(i[0])]
    if op == "Sqrt": return [np.sqrt(i[0])]
    if op == "Erf": return [np.vectorize(math.erf)(i[0])]
    if op == "Gemm":
        A = i[0].T if a.get("transA", 0) else i[0]
        B = i[1].T if a.get("transB", 0) else i[1]
        y = a.get("alpha", 1.0) * (A @ B)
        if len(i) > 2 and i[2] is not None:
            y = y + a.get("beta", 1.0) * i[2]
        return [y]
    if op == "Softmax":
        ax = a.get("axis", -1)
        e = np.exp(i[0] - i[0].max(axis=ax, keepdims=True))
        return [e / e.sum(axis=ax, keepdims=True)]
    if op == "LayerNormalization":
        ax = a.get("axis", -1)
        axes = tuple(range(ax % i[0].ndim, i[0].ndim))
        mu = i[0].mean(axis=axes, keepdims=True)
        var = ((i[0] - mu) ** 2).mean(axis=axes, keepdims=True)
        y = (i[0] - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * i[1]
        if len(i) > 2 and i[2] is not None:
            y = y + i[2]
        return [y]
    if op == "BatchNormalization":
        x, s, b, m, var = i
        sh = (1, -1) + (1,) * (x.ndim - 2)
        return [(x - m.reshape(sh)) / np.sqrt(var.reshape(sh) + a.get("epsilon", 1e-5)) * s.reshape(sh)
                + b.reshape(sh)]
    if op == "Conv": return [conv2d(i[0], i[1], i[2] if len(i) > 2 else None, a)]
    if op == "GlobalAveragePool": return [i[0].mean(axis=tuple(range(2, i[0].ndim)), keepdims=True)]
    if op == "Flatten":
        ax = a.get("axis", 1)
        return [i[0].reshape(int(np.prod(i[0].shape[:ax])), -1)]
    if op == "Gather": return [np.take(i[0], i[1].astype(np.int64), axis=a.get("axis", 0))]
    if op == "Shape": return [np.array(i[0].shape, dtype=np.int64)]
    if op == "Unsqueeze":
        axes = a["axes"] if "axes" in a else list(i[1])
        y = i[0]
        for ax in sorted(int(x) % (y.ndim + len(axes)) for x in axes):
            y = np.expand_dims(y, ax)
        return [y]
    if op == "Concat": return [np.concatenate(i, axis=a["axis"])]
    if op == "Reshape":
        shape = [int(d) for d in i[1]]
        shape = [i[0].shape[k] if d == 0 else d for k, d in enumerate(shape)]
        return [i[0].reshape(shape)]
    if op == "Transpose": return [np.transpose(i[0], a.get("perm"))]
    if op == "Constant": return [numpy_helper.to_array(a["value"]).astype(np.float64)
                                 if numpy_helper.to_array(a["value"]).dtype.kind == "f"
                                 else numpy_helper.to_array(a["value"])]
    if op == "Split":
        ax = a.get("axis", 0)
        if len(i) > 1 and i[1] is not None:
            sizes = list(i[1])
        elif "split" in a:
            sizes = a["split"]
        else:
            sizes = [i[0].shape[ax] // len(node.output)] * len(node.output)
        return np.split(i[0], np.cumsum(sizes)[:-1], axis=ax)
    if op == "SoftmaxCrossEntropyLoss": return [sce(i[0], i[1], a)]
    if op == "Identity": return [i[0]]
    if op == "Pow": return [np.power(i[0], i[1])]
    if op == "Equal": return [np.equal(i[0], i[1])]
    if op == "Not": return [np.logical_not(i[0])]
    if op == "And": return [np.logical_and(i[0], i[1])]
    if op == "Where": return [np.where(i[0], i[1], i[2])]
    if op == "Expand": return [i[0] * np.ones([int(d) for d in i[1]], dtype=i[0].dtype)]
    if op == "Range": return [np.arange(i[0], i[1], i[2])]
    if op == "ConstantOfShape":
        value = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        out = np.full([int(d) for d in i[0]], value.reshape(-1)[0], dtype=value.dtype)
        return [out.astype(np.float64) if out.dtype.kind == "f" else out]
    if op == "ReduceMean":
        axes = tuple(a["axes"]) if "axes" in a else (tuple(int(x) for x in i[1]) if len(i) > 1 else None)
        return [i[0].mean(axis=axes, keepdims=bool(a.get("keepdims", 1)))]
    if op == "Slice":
        starts, ends = list(i[1]), list(i[2])
        axes = list(i[3]) if len(i) > 3 and i[3] is not None else list(range(len(starts)))
        steps = list(i[4]) if len(i) > 4 and i[4] is not None else [1] * len(starts)
        index = [slice(None)] * i[0].ndim
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            index[int(ax)] = slice(int(st), int(min(en, 2**62)), int(sp))
        return [i[0][tuple(index)]]
    raise SystemExit(f"onnx_reference: op {op} (node {node.name}) is not covered")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--input", action="append", default=[])
    p.add_argument("--compare", required=True, help="directory of piperun's NAME.npy outputs")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=1e-5)
    args = p.parse_args()
    m = onnx.load(args.model)
    v = {}
    for t in m.graph.initializer:
        arr = numpy_helper.to_array(t)
        v[t.name] = arr.astype(np.float64) if arr.dtype.kind == "f" else arr
    for spec in args.input:
        name, path = spec.split("=", 1)
        arr = np.load(path)
        v[name] = arr.astype(np.float64) if arr.dtype.kind == "f" else arr
    for node in m.graph.node:
        outs = run_node(node, v, attrs_of(node))
        for name, val in zip(node.output, outs):
            v[name] = np.asarray(val)
    ok = True
    for o in m.graph.output:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in o.name)
        got = np.load(f"{args.compare}/{safe}.npy").astype(np.float64)
        want = v[o.name]
        if got.shape != want.shape:
            print(f"{o.name}: shape {got.shape}, reference {want.shape}")
            ok = False
            continue
        err = np.abs(got - want)
        tol = args.atol + args.rtol * np.abs(want)
        bad = int((err > tol).sum())
        rel = float((err / np.maximum(np.abs(want), 1e-12)).max()) if want.size else 0.0
        print(f"{o.name}: {want.size} values, max abs error {err.max() if want.size else 0:.3g}, "
              f"max rel error {rel:.3g}, {bad} outside rtol {args.rtol} atol {args.atol}")
        ok = ok and bad == 0
    print("match" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
