#!/usr/bin/env python3
"""tests/tools/onnx_node_cases.py - ONNX node tests of opsets newer than the
installed test data.

    onnx_node_cases.py DIR    writes DIR/node/<test>/model.onnx and
                              DIR/node/<test>/test_data_set_0/{input,output}_N.pb

Debian's libonnx-testdata (ONNX 1.12) stops at opset 17. These are the node
tests of later ONNX releases that pipec must pass, in the same layout, so
that `pipec-conformance --data DIR` runs them exactly as it runs ONNX's own:

  test_averagepool_2d_dilations, test_averagepool_3d_dilations_small and
  test_averagepool_3d_dilations_large_count_include_pad_is_{0,1}_ceil_mode_is_{False,True}
      (AveragePool-19's dilations; ONNX's shapes and attributes)
  test_shape*, test_constant, test_constantofshape_*, test_range_float_type_positive_delta
      at the newest opset of each op (Shape-21, Constant-21, ConstantOfShape-21,
      Range-11 in an opset-21 model): graphs that fold to constants.

Expected outputs: pooling by PyTorch (a convolution with a dilated window of
ones over the input, divided by the same convolution over a mask of the
positions inside the input), the rest by numpy. The installed onnx package
predates these opsets, so models are assembled with onnx.helper and not run
through its checker.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from onnx import TensorProto as T, helper as h, numpy_helper as nh, save

rng = np.random.RandomState(19)


def write(root, name, nodes, opset, inputs, outputs, inits=(), ir_version=8):
    """inputs/outputs: [(name, array)]; the graph's value infos follow them;
    inits: constant inputs."""
    def info(n, a):
        return h.make_tensor_value_info(n, nh.from_array(a).data_type, list(a.shape))
    g = h.make_graph(nodes, name, [info(n, a) for n, a in inputs], [info(n, a) for n, a in outputs],
                     initializer=[nh.from_array(a, n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=ir_version)
    d = os.path.join(root, "node", name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    save(m, os.path.join(d, "model.onnx"))
    for kind, items in (("input", inputs), ("output", outputs)):
        for i, (n, a) in enumerate(items):
            with open(os.path.join(data, f"{kind}_{i}.pb"), "wb") as f:
                f.write(nh.from_array(a, n).SerializeToString())


def average_pool(x, kernel, strides, dilations, ceil_mode):
    """AveragePool without pads by PyTorch convolutions. A window that
    ceil_mode lets run past the input averages the positions inside it (with
    no pads, count_include_pad counts the same ones)."""
    n = len(kernel)
    sizes = []
    for i in range(n):
        extent = (kernel[i] - 1) * dilations[i] + 1
        span = x.shape[2 + i] - extent
        out = (-(-span // strides[i]) if ceil_mode else span // strides[i]) + 1
        if ceil_mode and (out - 1) * strides[i] >= x.shape[2 + i]:
            out -= 1  # the last window must start inside the input
        sizes.append(((out - 1) * strides[i] + extent - x.shape[2 + i], out))
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    pad = []
    for extra, _ in reversed(sizes):
        pad += [0, max(extra, 0)]
    xt = F.pad(torch.from_numpy(x.astype(np.float64)), pad)
    mask = F.pad(torch.ones((1, 1) + x.shape[2:], dtype=torch.float64), pad)
    ones = torch.ones((1, 1) + tuple(kernel), dtype=torch.float64)
    planes = xt.reshape((-1, 1) + xt.shape[2:])
    s = conv(planes, ones, stride=strides, dilation=dilations)
    c = conv(mask, ones, stride=strides, dilation=dilations)
    y = (s / c).reshape(x.shape[:2] + s.shape[2:])
    assert list(y.shape[2:]) == [o for _, o in sizes]
    return y.numpy().astype(np.float32)


def pool_cases(root):
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    node = h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[1, 1],
                       dilations=[2, 2], ceil_mode=True)
    write(root, "test_averagepool_2d_dilations", [node], 19, [("x", x)],
          [("y", average_pool(x, [2, 2], [1, 1], [2, 2], True))])
    x = np.arange(1, 65, dtype=np.float32).reshape(1, 1, 4, 4, 4)
    node = h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2, 2], strides=[1, 1, 1],
                       dilations=[2, 2, 2], ceil_mode=True)
    write(root, "test_averagepool_3d_dilations_small", [node], 19, [("x", x)],
          [("y", average_pool(x, [2, 2, 2], [1, 1, 1], [2, 2, 2], True))])
    x = rng.randn(1, 1, 32, 32, 32).astype(np.float32)
    for include in (0, 1):
        for ceil in (False, True):
            node = h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[5, 5, 5], strides=[3, 3, 3],
                               dilations=[2, 2, 2], count_include_pad=include, ceil_mode=int(ceil))
            write(root, f"test_averagepool_3d_dilations_large_count_include_pad_is_{include}"
                        f"_ceil_mode_is_{ceil}", [node], 19, [("x", x)],
                  [("y", average_pool(x, [5, 5, 5], [3, 3, 3], [2, 2, 2], ceil))])


def constant_cases(root):
    x = rng.randn(3, 4, 5).astype(np.float32)
    full = np.array(x.shape, np.int64)
    for name, attrs, want in [("test_shape", {}, full),
                              ("test_shape_start_1", {"start": 1}, full[1:]),
                              ("test_shape_end_1", {"end": 1}, full[:1]),
                              ("test_shape_start_negative_1", {"start": -1}, full[-1:]),
                              ("test_shape_end_negative_1", {"end": -1}, full[:-1]),
                              ("test_shape_start_1_end_negative_1", {"start": 1, "end": -1},
                               full[1:-1]),
                              ("test_shape_clip_start", {"start": -10}, full),
                              ("test_shape_clip_end", {"end": 10}, full)]:
        write(root, name + "_opset21", [h.make_node("Shape", ["x"], ["y"], **attrs)], 21,
              [("x", x)], [("y", want)])
    value = rng.randn(5, 5).astype(np.float32)
    write(root, "test_constant_opset21",
          [h.make_node("Constant", [], ["values"], value=nh.from_array(value, "value"))], 21, [],
          [("values", value)])
    shape = np.array([4, 3, 2], np.int64)
    ones = nh.from_array(np.array([1.0], np.float32), "value")
    write(root, "test_constantofshape_float_ones_opset21",
          [h.make_node("ConstantOfShape", ["x"], ["y"], value=ones)], 21, [("x", shape)],
          [("y", np.ones(shape, np.float32))])
    zero = nh.from_array(np.array([0], np.int32), "value")
    write(root, "test_constantofshape_int_zeros_opset21",
          [h.make_node("ConstantOfShape", ["x"], ["y"], value=zero)], 21,
          [("x", np.array([10, 6], np.int64))], [("y", np.zeros((10, 6), np.int32))])
    write(root, "test_constantofshape_int_shape_zero_opset21",
          [h.make_node("ConstantOfShape", ["x"], ["y"], value=zero)], 21,
          [("x", np.array([0], np.int64))], [("y", np.zeros((0,), np.int32))])
    start, limit, delta = (np.array(v, np.float32) for v in (1, 5, 2))
    write(root, "test_range_float_type_positive_delta_opset21",
          [h.make_node("Range", ["start", "limit", "delta"], ["output"])], 21,
          [("start", start), ("limit", limit), ("delta", delta)],
          [("output", np.arange(1, 5, 2, dtype=np.float32))])


def main():
    root = sys.argv[1]
    pool_cases(root)
    constant_cases(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
