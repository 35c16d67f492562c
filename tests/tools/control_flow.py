#!/usr/bin/env python3
"""tests/tools/control_flow.py - If, Loop and Scan models, with numpy's answers.

    control_flow.py make DIR    writes DIR/<case>/{model.onnx,x.npy,expected.npy}
                                and DIR/bad-<case>.onnx (models pipec refuses)
    control_flow.py check DIR   compares DIR/<case>/out/y.npy with expected.npy

Each case computes y from x through If or Loop (nested, capturing values
from the enclosing graphs, conditions from shapes or from data), as
exporters other than torch.jit.script write them, assembled with
onnx.helper. The expected output is computed here with numpy.
"""
import os
import sys

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh, save

rng = np.random.RandomState(11)
OPSET = 13


def vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def const(name, value):
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(value), name + "_v"))


def model(nodes, x_shape, y_shape, inits=(), outputs=None):
    g = h.make_graph(nodes, "cf", [vi("x", T.FLOAT, x_shape)],
                     outputs or [vi("y", T.FLOAT, y_shape)], initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], ir_version=8)


def branch(name, nodes, out):
    return h.make_graph(nodes, name, [], [vi(out, T.FLOAT, None)])


def data_if(x):
    """If on sum(x) > 0 (data): y = x @ w + 1 or x * 3."""
    w = rng.randn(4, 4).astype(np.float32)
    then = branch("then", [h.make_node("MatMul", ["x", "w"], ["mm"]), const("one", np.float32(1)),
                           h.make_node("Add", ["mm", "one"], ["t"])], "t")
    other = branch("else", [const("three", np.float32(3)), h.make_node("Mul", ["x", "three"], ["e"])], "e")
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0), const("zero", np.float32(0)),
             h.make_node("Greater", ["s", "zero"], ["c"]),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    m = model(nodes, [2, 4], [2, 4], [nh.from_array(w, "w")])
    return m, (x @ w + 1 if x.sum() > 0 else x * 3)


def nested_loop(x):
    """Loop M=4 (from the shape of x) carrying x, with an If on the iteration
    number inside reading w from two graphs out; a scan output of the sums."""
    w = rng.randn(4).astype(np.float32)
    even = branch("even", [h.make_node("Add", ["v", "w"], ["ev"])], "ev")
    odd = branch("odd", [h.make_node("Sub", ["v", "w"], ["od"])], "od")
    body = h.make_graph(
        [const("two", np.int64(2)), h.make_node("Mod", ["i", "two"], ["r"]),
         const("zero_i", np.int64(0)), h.make_node("Equal", ["r", "zero_i"], ["is_even"]),
         h.make_node("If", ["is_even"], ["v2"], then_branch=even, else_branch=odd),
         const("half", np.float32(0.5)), h.make_node("Mul", ["v2", "half"], ["v_out"]),
         h.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0),
         h.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", T.INT64, []), vi("cond_in", T.BOOL, []), vi("v", T.FLOAT, None)],
        [vi("cond_out", T.BOOL, []), vi("v_out", T.FLOAT, None), vi("total", T.FLOAT, [])])
    nodes = [h.make_node("Shape", ["x"], ["shape"]), const("idx", np.int64(1)),
             h.make_node("Gather", ["shape", "idx"], ["m"]), const("true", np.bool_(True)),
             h.make_node("Loop", ["m", "true", "x"], ["y", "totals"], body=body)]
    m = model(nodes, [3, 4], [3, 4], [nh.from_array(w, "w")],
              outputs=[vi("y", T.FLOAT, [3, 4]), vi("totals", T.FLOAT, [4])])
    v = x.copy()
    for i in range(4):
        v = (v + w if i % 2 == 0 else v - w) * np.float32(0.5)
    return m, v


def while_loop(x):
    """Loop bounded by M=20 whose condition is data: double x while
    sum(|x|) < 1000 (ONNX's result: the state once the condition fails)."""
    body = h.make_graph(
        [const("two", np.float32(2)), h.make_node("Mul", ["v", "two"], ["v_out"]),
         h.make_node("Abs", ["v_out"], ["a"]), h.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
         const("limit", np.float32(1000)), h.make_node("Less", ["s", "limit"], ["cond_out"])],
        "body", [vi("i", T.INT64, []), vi("cond_in", T.BOOL, []), vi("v", T.FLOAT, None)],
        [vi("cond_out", T.BOOL, []), vi("v_out", T.FLOAT, None)])
    nodes = [const("m", np.int64(20)), const("true", np.bool_(True)),
             h.make_node("Loop", ["m", "true", "x"], ["y"], body=body)]
    v = x.copy()
    for _ in range(20):
        v = v * np.float32(2)
        if np.abs(v).sum() >= 1000:
            break
    return model(nodes, [2, 3], [2, 3]), v


def shape_if(x):
    """If on a shape (folded): the untaken branch does not type-check."""
    then = branch("then", [h.make_node("Neg", ["x"], ["t"])], "t")
    other = branch("else", [const("bad", np.array([7], np.int64)),
                            h.make_node("Reshape", ["x", "bad"], ["e"])], "e")
    nodes = [h.make_node("Size", ["x"], ["n"]), const("six", np.int64(6)),
             h.make_node("Equal", ["n", "six"], ["c"]),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    return model(nodes, [2, 3], [2, 3]), -x


def scan(x):
    """Scan (opset 9+) over axis 1 of x in reverse: a running sum as state,
    each step's state times w as a scan output stacked on axis 1."""
    w = rng.randn(2).astype(np.float32)
    body = h.make_graph(
        [h.make_node("Add", ["acc", "col"], ["acc_out"]), h.make_node("Mul", ["acc_out", "w"], ["scaled"])],
        "body", [vi("acc", T.FLOAT, [2]), vi("col", T.FLOAT, [2])],
        [vi("acc_out", T.FLOAT, [2]), vi("scaled", T.FLOAT, [2])])
    nodes = [const("zeros", np.zeros(2, np.float32)),
             h.make_node("Scan", ["zeros", "x"], ["total", "y"], body=body, num_scan_inputs=1,
                         scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1])]
    m = model(nodes, [2, 5], [2, 5], [nh.from_array(w, "w")],
              outputs=[vi("total", T.FLOAT, [2]), vi("y", T.FLOAT, [2, 5])])
    acc = np.zeros(2, np.float32)
    cols = []
    for t in reversed(range(5)):
        acc = acc + x[:, t]
        cols.append(acc * w)
    return m, np.stack(cols, axis=1)


def bad_cases():
    """Models pipec refuses, each with a clear error (control-flow.test)."""
    then = branch("then", [h.make_node("Identity", ["x"], ["t"])], "t")
    other = branch("else", [const("start", np.array([0], np.int64)), const("end", np.array([1], np.int64)),
                            h.make_node("Slice", ["x", "start", "end"], ["e"])], "e")
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0), const("zero", np.float32(0)),
             h.make_node("Greater", ["s", "zero"], ["c"]),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    yield "branch-shapes", model(nodes, [2, 3], [2, 3])
    body = h.make_graph(
        [const("two", np.float32(2)), h.make_node("Mul", ["v", "two"], ["v_out"]),
         h.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0), const("limit", np.float32(100)),
         h.make_node("Less", ["s", "limit"], ["cond_out"]), h.make_node("Identity", ["v_out"], ["slice"])],
        "body", [vi("i", T.INT64, []), vi("cond_in", T.BOOL, []), vi("v", T.FLOAT, None)],
        [vi("cond_out", T.BOOL, []), vi("v_out", T.FLOAT, None), vi("slice", T.FLOAT, None)])
    nodes = [const("m", np.int64(5)), const("true", np.bool_(True)),
             h.make_node("Loop", ["m", "true", "x"], ["y", "slices"], body=body)]
    yield "while-scan", model(nodes, [2, 3], [2, 3], outputs=[vi("y", T.FLOAT, [2, 3]), vi("slices", T.FLOAT, None)])
    body = h.make_graph(
        [const("two", np.float32(2)), h.make_node("Mul", ["v", "two"], ["v_out"]),
         h.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0), const("limit", np.float32(100)),
         h.make_node("Less", ["s", "limit"], ["cond_out"])],
        "body", [vi("i", T.INT64, []), vi("cond_in", T.BOOL, []), vi("v", T.FLOAT, None)],
        [vi("cond_out", T.BOOL, []), vi("v_out", T.FLOAT, None)])
    nodes = [const("true", np.bool_(True)), h.make_node("Loop", ["", "true", "x"], ["y"], body=body)]
    yield "unbounded", model(nodes, [2, 3], [2, 3])


# (name, model and answer for x, shape of x); data-if runs once per branch.
CASES = [("data-if-then", data_if, [2, 4], 1), ("data-if-else", data_if, [2, 4], -1),
         ("nested-loop", nested_loop, [3, 4], 0), ("while-loop", while_loop, [2, 3], 0),
         ("shape-if", shape_if, [2, 3], 0), ("scan", scan, [2, 5], 0)]


def main():
    what, d = sys.argv[1], sys.argv[2]
    if what == "make":
        for name, make, shape, sign in CASES:
            x = rng.randn(*shape).astype(np.float32)
            if sign:
                x = np.abs(x) * sign
            m, y = make(x)
            os.makedirs(os.path.join(d, name), exist_ok=True)
            save(m, os.path.join(d, name, "model.onnx"))
            np.save(os.path.join(d, name, "x.npy"), x)
            np.save(os.path.join(d, name, "expected.npy"), y.astype(np.float32))
        for name, m in bad_cases():
            save(m, os.path.join(d, f"bad-{name}.onnx"))
    else:
        for name in sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))):
            y = np.load(os.path.join(d, name, "out", "y.npy"))
            e = np.load(os.path.join(d, name, "expected.npy"))
            err = np.abs(y - e).max() / max(np.abs(e).max(), 1e-30)
            print(f"{name}: {'ok' if y.shape == e.shape and err <= 1e-6 else f'FAIL {y.shape} {e.shape} {err}'}")


if __name__ == "__main__":
    main()
