#!/usr/bin/env python3
"""tests/tools/resize_node_cases.py - Resize node tests of opsets 18 and 19.

    resize_node_cases.py DIR    writes DIR/node/<test>/model.onnx and
                                DIR/node/<test>/test_data_set_0/{input,output}_N.pb

Debian's libonnx-testdata (ONNX 1.12) stops at Resize-13. These cases cover
what Resize-18 and -19 added, in ONNX's layout, for `pipec-conformance
--data DIR`:

  antialias (18)        linear and cubic (A = -0.5) downsampling, judged by
                        PyTorch's antialiased bilinear and bicubic
                        interpolate given the same scales;
  axes, keep_aspect_ratio_policy (18)
                        sizes on a subset of axes, not_larger and
                        not_smaller, judged by PyTorch's bilinear upsample
                        given the output size and the common scale;
  half_pixel_symmetric (19), tf_crop_and_resize with axes (18)
                        judged by a float64 numpy resampler written from the
                        specification's formulas (linear, edge-clamped).

The installed onnx package predates these opsets, so models are assembled
with onnx.helper and not run through its checker.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from onnx import helper as h

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_node_cases import write as write_case  # noqa: E402

rng = np.random.RandomState(18)


def write(root, name, node, opset, inputs, outputs, inits=()):
    """One node's test case, in ONNX's backend test layout."""
    write_case(root, name, [node], opset, inputs, outputs, inits)


def resize(x, inputs, **attrs):
    return h.make_node("Resize", ["x"] + inputs, ["y"], **attrs)


def antialias_cases(root):
    x = rng.randn(1, 2, 9, 11).astype(np.float32)
    for mode, tmode, extra in (("linear", "bilinear", {}), ("cubic", "bicubic", {"cubic_coeff_a": -0.5})):
        for s in (0.6, 0.35):
            scales = np.array([1, 1, s, s], np.float32)
            want = F.interpolate(torch.from_numpy(x).double(), scale_factor=float(scales[2]),
                                 mode=tmode, align_corners=False, antialias=True,
                                 recompute_scale_factor=False).numpy().astype(np.float32)
            write(root, f"test_resize_downsample_scales_{mode}_antialias_{str(s).replace('.', 'p')}",
                  resize(x, ["", "scales"], mode=mode, antialias=1, **extra), 18, [("x", x)],
                  [("y", want)], [("scales", scales)])


def aspect_cases(root):
    x = rng.randn(1, 2, 4, 6).astype(np.float32)
    for policy, sizes in (("not_larger", [7, 8]), ("not_smaller", [7, 8]), ("stretch", [7, 8])):
        ratios = [sizes[0] / 4, sizes[1] / 6]
        s = min(ratios) if policy == "not_larger" else max(ratios) if policy == "not_smaller" else None
        out = list(sizes) if s is None else [int(math.floor(s * 4 + 0.5)), int(math.floor(s * 6 + 0.5))]
        sh, sw = (s, s) if s is not None else (sizes[0] / 4, sizes[1] / 6)
        want = torch._C._nn.upsample_bilinear2d(torch.from_numpy(x).double(), out, False, sh, sw)
        write(root, f"test_resize_upsample_sizes_linear_{policy}_axes_2_3",
              resize(x, ["", "", "sizes"], mode="linear", axes=[2, 3],
                     keep_aspect_ratio_policy=policy),
              18, [("x", x)], [("y", want.numpy().astype(np.float32))],
              [("sizes", np.array(sizes, np.int64))])
    # axes given in another order, and negative.
    want = torch._C._nn.upsample_bilinear2d(torch.from_numpy(x).double(), [5, 9], False, 5 / 4, 1.5)
    write(root, "test_resize_upsample_sizes_linear_axes_3_2_negative",
          resize(x, ["", "", "sizes"], mode="linear", axes=[-1, 2]), 18, [("x", x)],
          [("y", want.numpy().astype(np.float32))], [("sizes", np.array([9, 5], np.int64))])


def linear_reference(x, out_shape, coord):
    """Separable linear resampling in float64: coord(axis, o) is the input
    coordinate of output o (None: outside, the caller's extrapolation)."""
    y = x.astype(np.float64)
    mask = np.zeros(out_shape, bool)
    for ax, n_out in enumerate(out_shape):
        n_in = y.shape[ax]
        rows = []
        for o in range(n_out):
            c = coord(ax, o)
            if c is None:
                idx = [slice(None)] * len(out_shape)
                idx[ax] = o
                mask[tuple(idx)] = True
                c = 0.0
            c = min(max(c, 0.0), n_in - 1)
            i0 = int(math.floor(c))
            i1 = min(i0 + 1, n_in - 1)
            t = c - i0
            rows.append((1 - t) * np.take(y, i0, axis=ax) + t * np.take(y, i1, axis=ax))
        y = np.stack(rows, axis=ax)
    return y, mask


def spec_cases(root):
    # half_pixel_symmetric (19): the specification's formula.
    x = rng.randn(1, 1, 5, 4).astype(np.float32)
    scales = np.array([1, 1, 1.7, 0.6], np.float32)
    out = [int(math.floor(d * float(s))) for d, s in zip(x.shape, scales)]

    def symmetric(ax, o):
        s = float(scales[ax])
        length = x.shape[ax] * s
        adjustment = out[ax] / length
        offset = x.shape[ax] / 2 * (1 - adjustment)
        return offset + (o + 0.5) / s - 0.5
    want, _ = linear_reference(x, out, symmetric)
    write(root, "test_resize_scales_linear_half_pixel_symmetric",
          resize(x, ["", "scales"], mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),
          19, [("x", x)], [("y", want.astype(np.float32))], [("scales", scales)])

    # tf_crop_and_resize on axes 2 and 3 with extrapolation.
    x = rng.randn(1, 2, 4, 5).astype(np.float32)
    roi = np.array([0.2, -0.1, 0.9, 1.2], np.float32)
    sizes = [3, 6]
    out = [1, 2] + sizes

    def crop(ax, o):
        if ax < 2:
            return float(o)
        a, b = float(roi[ax - 2]), float(roi[ax])
        n_in, n_out = x.shape[ax], out[ax]
        c = a * (n_in - 1) + o * (b - a) * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.5 * (a + b) * (n_in - 1)
        return c if 0 <= c <= n_in - 1 else None
    want, mask = linear_reference(x, out, crop)
    want[mask] = 10.0
    write(root, "test_resize_tf_crop_and_resize_axes_2_3_extrapolation",
          h.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear", axes=[2, 3],
                      coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=10.0),
          18, [("x", x)], [("y", want.astype(np.float32))],
          [("roi", roi), ("sizes", np.array(sizes, np.int64))])


def main():
    root = sys.argv[1]
    antialias_cases(root)
    aspect_cases(root)
    spec_cases(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
