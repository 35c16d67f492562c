#!/usr/bin/env python3
"""tests/tools/newer_opsets.py - models of ops in their opset 18+ forms.

    newer_opsets.py make DIR    writes DIR/<case>/{model.onnx,x.npy,expected.npy}
    newer_opsets.py check DIR   compares DIR/<case>/out/y.npy with expected.npy

Each case is one op in the form opset 18 and later introduced (axes as an
input, num_outputs, Pad's axes, Gelu), with the expected output computed
here with numpy. The installed onnx package predates these opsets, so models
are assembled with onnx.helper and not run through its checker.
"""
import math
import os
import sys

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh, save

rng = np.random.RandomState(7)


def model(nodes, opset, x_shape, y_shape, inits=()):
    g = h.make_graph(nodes, "newer", [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, y_shape)], initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


def erf(a):
    return np.vectorize(math.erf)(a)


def cases():
    x = rng.randn(2, 3, 4).astype(np.float32)
    yield ("reducemean18", model([h.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)], 18,
                                 [2, 3, 4], [2, 4], [nh.from_array(np.array([1], np.int64), "axes")]),
           x, x.mean(axis=1))
    yield ("reducemax18-noop", model([h.make_node("ReduceMax", ["x"], ["y"], keepdims=1)], 18,
                                     [2, 3, 4], [1, 1, 1]), x, x.max(keepdims=True))
    yield ("reducesumsquare18", model([h.make_node("ReduceSumSquare", ["x", "axes"], ["y"])], 18,
                                      [2, 3, 4], [2, 3, 1],
                                      [nh.from_array(np.array([-1], np.int64), "axes")]),
           x, (x * x).sum(axis=-1, keepdims=True))
    x6 = rng.randn(6, 4).astype(np.float32)
    yield ("split18-num-outputs",
           model([h.make_node("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3),
                  h.make_node("Sub", ["c", "a"], ["y"])], 18, [6, 4], [2, 4]),
           x6, x6[4:6] - x6[0:2])
    yield ("pad18-axes",
           model([h.make_node("Pad", ["x", "pads", "", "axes"], ["y"], mode="constant")], 18,
                 [2, 3, 4], [2, 3, 7],
                 [nh.from_array(np.array([1, 2], np.int64), "pads"),
                  nh.from_array(np.array([2], np.int64), "axes")]),
           x, np.pad(x, ((0, 0), (0, 0), (1, 2))))
    yield ("pad19-wrap",
           model([h.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")], 19, [2, 3, 4], [2, 3, 6],
                 [nh.from_array(np.array([0, 0, 1, 0, 0, 1], np.int64), "pads")]),
           x, np.pad(x, ((0, 0), (0, 0), (1, 1)), mode="wrap"))
    yield ("gelu20", model([h.make_node("Gelu", ["x"], ["y"])], 20, [2, 3, 4], [2, 3, 4]),
           x, 0.5 * x * (1 + erf(x / math.sqrt(2))))
    yield ("gelu20-tanh",
           model([h.make_node("Gelu", ["x"], ["y"], approximate="tanh")], 20, [2, 3, 4], [2, 3, 4]),
           x, 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))))


def main():
    mode, root = sys.argv[1], sys.argv[2]
    bad = 0
    for name, m, x, want in cases():
        d = os.path.join(root, name)
        if mode == "make":
            os.makedirs(d, exist_ok=True)
            save(m, os.path.join(d, "model.onnx"))
            np.save(os.path.join(d, "x.npy"), x)
            np.save(os.path.join(d, "expected.npy"), want.astype(np.float32))
        else:
            got = np.load(os.path.join(d, "out", "y.npy"))
            ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6)
            print(f"{name}: {'ok' if ok else 'MISMATCH'}")
            bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
