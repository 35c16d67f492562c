#!/usr/bin/env python3
"""tests/tools/tf_style_cnn.py - a CNN as tf2onnx writes a Keras model.

    tf_style_cnn.py OUT.onnx [--blocks 19] [--batch N]

A keyword-spotting style network on a 49 x 40 spectrogram, in the form
tf2onnx gives a Keras model: an NHWC input, a Transpose to NCHW before the
convolutions and one back after them, separable-in-time-and-frequency
convolutions (1x3 then 3x1, padded "same"), LeakyRelu (alpha 0.2) after the
first of each pair, and the second's output combined with the block's input
by an elementwise Max; a 2x2 MaxPool after every fourth block; then a global
average over the NHWC map (ReduceMean over axes 1 and 2, as tf2onnx writes
Keras' GlobalAveragePooling2D), a MatMul and Add, and Softmax. The batch
axis is symbolic ('N'). Seeded random weights (He-scaled).
"""
import argparse

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh, save


def build(blocks, classes=12, width=32, seed=3):
    rng = np.random.RandomState(seed)
    nodes, inits = [], []

    def w(name, shape, fan_in):
        inits.append(nh.from_array((rng.randn(*shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), name))
        return name

    def b(name, n):
        inits.append(nh.from_array((rng.randn(n) * 0.05).astype(np.float32), name))
        return name

    nodes.append(h.make_node("Transpose", ["input"], ["x_nchw"], perm=[0, 3, 1, 2], name="transpose_in"))
    nodes.append(h.make_node("Conv", ["x_nchw", w("stem_w", [width, 1, 3, 3], 9), b("stem_b", width)],
                             ["h0"], pads=[1, 1, 1, 1], name="stem"))
    cur = "h0"
    for i in range(blocks):
        c1 = f"b{i}_c1"
        nodes.append(h.make_node("Conv", [cur, w(f"b{i}_w1", [width, width, 1, 3], 3 * width), b(f"b{i}_b1", width)],
                                 [c1], pads=[0, 1, 0, 1], name=f"block{i}/conv_1x3"))
        nodes.append(h.make_node("LeakyRelu", [c1], [f"b{i}_l"], alpha=0.2, name=f"block{i}/leaky_relu"))
        nodes.append(h.make_node("Conv", [f"b{i}_l", w(f"b{i}_w2", [width, width, 3, 1], 3 * width),
                                          b(f"b{i}_b2", width)], [f"b{i}_c2"], pads=[1, 0, 1, 0],
                                 name=f"block{i}/conv_3x1"))
        nodes.append(h.make_node("Max", [f"b{i}_c2", cur], [f"b{i}_out"], name=f"block{i}/maximum"))
        cur = f"b{i}_out"
        if i % 4 == 3:
            nodes.append(h.make_node("MaxPool", [cur], [f"b{i}_pool"], kernel_shape=[2, 2], strides=[2, 2],
                                     name=f"block{i}/max_pool"))
            cur = f"b{i}_pool"
    nodes.append(h.make_node("Transpose", [cur], ["h_nhwc"], perm=[0, 2, 3, 1], name="transpose_out"))
    nodes.append(h.make_node("ReduceMean", ["h_nhwc"], ["pooled"], axes=[1, 2], keepdims=0, name="global_pool"))
    nodes.append(h.make_node("MatMul", ["pooled", w("fc_w", [width, classes], width)], ["fc"], name="dense/MatMul"))
    nodes.append(h.make_node("Add", ["fc", b("fc_b", classes)], ["logits"], name="dense/BiasAdd"))
    nodes.append(h.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"))
    g = h.make_graph(nodes, "tf_kws", [h.make_tensor_value_info("input", T.FLOAT, ["N", 49, 40, 1])],
                     [h.make_tensor_value_info("probs", T.FLOAT, ["N", classes]),
                      h.make_tensor_value_info("logits", T.FLOAT, ["N", classes])], initializer=inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=7, producer_name="tf2onnx-style")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--blocks", type=int, default=19)
    a = ap.parse_args()
    save(build(a.blocks), a.out)


if __name__ == "__main__":
    main()
