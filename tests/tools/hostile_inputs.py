#!/usr/bin/env python3
"""tests/tools/hostile_inputs.py - small models and files that once crashed,
hung or overflowed pipec and piperun (issue 15's reproducers).

    hostile_inputs.py DIR    writes DIR/<case>.onnx and DIR/<case>.npy

Each case is the smallest input that shows one cause; tests/lit/errors/
hostile-input.test runs them through the tools and checks for a one-line
error (or a clean run). Models are assembled with onnx.helper and patched
at the byte level where the onnx package would refuse to write them.
"""
import os
import sys

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh


def model(nodes, inputs, outputs, inits=(), opset=17, name="g"):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


def vi(name, shape, t=T.FLOAT):
    return h.make_tensor_value_info(name, t, shape)


def save(root, name, m, patch=None):
    b = m.SerializeToString()
    if patch:
        b = patch(b)
    with open(os.path.join(root, name + ".onnx"), "wb") as f:
        f.write(b)


def cases(root):
    # Names that are not UTF-8 (graph, node and tensor names): the report's
    # JSON and the plan's protobuf strings once threw.
    m = model([h.make_node("MatMul", ["xQQQQ", "wQQQQ"], ["hQQQQ"], name="nodeQQQQ"),
               h.make_node("Sigmoid", ["hQQQQ"], ["yQQQQ"], name="sigmoidQQQQ")],
              [vi("xQQQQ", ["batch", 4])], [vi("yQQQQ", ["batch", 3])],
              [nh.from_array(np.ones((4, 3), np.float32), "wQQQQ")], name="graphQQQQ")
    save(root, "invalid-utf8", m, lambda b: b.replace(b"QQQQ", b"\xff\xfe\xc3\x28"))

    # A static dimension of 2^62 (and one of -2^62): shape products overflowed.
    for tag, d in (("huge-dim", 1 << 62), ("negative-dim", -(1 << 62))):
        m = model([h.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2, 3])], [vi("y", None)])
        m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = d
        save(root, tag, m)

    # ConstantOfShape of a huge shape: constant folding's byte count wrapped.
    m = model([h.make_node("ConstantOfShape", ["s"], ["y"], name="c",
                           value=nh.from_array(np.array([1.0], np.float32), "value"))],
              [], [vi("y", None)],
              [nh.from_array(np.array([1 << 40, 1 << 30], np.int64), "s")])
    save(root, "constantofshape-huge", m)

    # Attributes out of range: kernel_shape [0], group 0, axis 99, an integer
    # of -2^62.
    x = vi("x", [1, 4, 5, 5])
    w = nh.from_array(np.ones((4, 4, 3, 3), np.float32), "w")
    save(root, "conv-group-0", model([h.make_node("Conv", ["x", "w"], ["y"], name="conv", group=0)],
                                     [x], [vi("y", None)], [w]))
    save(root, "conv-kernel-0", model([h.make_node("Conv", ["x", "w"], ["y"], name="conv",
                                                   kernel_shape=[0, 0])], [x], [vi("y", None)], [w]))
    save(root, "softmax-axis-99", model([h.make_node("Softmax", ["x"], ["y"], name="sm", axis=99)],
                                        [x], [vi("y", None)]))
    save(root, "pool-stride-huge", model([h.make_node("MaxPool", ["x"], ["y"], name="pool",
                                                      kernel_shape=[2, 2],
                                                      strides=[-(1 << 62), 1])],
                                         [x], [vi("y", None)]))
    # An initializer whose dims promise more than its data.
    short = nh.from_array(np.ones((4, 3), np.float32), "w")
    short.dims[0] = 1 << 40
    save(root, "initializer-short", model([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                                          [vi("x", [2, 4])], [vi("y", None)], [short]))
    # A dangling input, a cycle and two nodes writing one value.
    save(root, "dangling-input", model([h.make_node("Add", ["x", "nowhere"], ["y"], name="add")],
                                       [vi("x", [2])], [vi("y", None)]))
    save(root, "cycle", model([h.make_node("Add", ["x", "b"], ["a"], name="n1"),
                               h.make_node("Relu", ["a"], ["b"], name="n2")],
                              [vi("x", [2])], [vi("a", None)]))
    save(root, "duplicate-output", model([h.make_node("Relu", ["x"], ["y"], name="n1"),
                                          h.make_node("Neg", ["x"], ["y"], name="n2")],
                                         [vi("x", [2])], [vi("y", None)]))

    # A .npy whose header claims 1e11 rows but holds 4 bytes of data.
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 32), }"
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(os.path.join(root, "npy-huge-header.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + b"\0" * 4)
    # A dimension with more digits than any size.
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, ), }"
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(os.path.join(root, "npy-long-dim.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode())


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    cases(sys.argv[1])
