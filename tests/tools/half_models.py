#!/usr/bin/python3
"""tests/tools/half_models.py OUT_DIR - models stored in 16-bit floats.

Writes a small MLP (MatMul, Add, Relu, MatMul, a Cast to the model's type
on the way) three times with the same weights: f16.onnx and bf16.onnx
(initializers, input, output and intermediate values in float16 /
bfloat16) and f32.onnx (the same values exactly, in float32), plus x.npy
(float32 input values that float16 and bfloat16 hold exactly).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def bf16_tensor(name, a):
    bits = (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return helper.make_tensor(name, TensorProto.BFLOAT16, a.shape, bits.tobytes(), raw=True)


def model(kind, w1, b1, w2):
    elem = {'f16': TensorProto.FLOAT16, 'bf16': TensorProto.BFLOAT16, 'f32': TensorProto.FLOAT}[kind]
    if kind == 'f16':
        inits = [numpy_helper.from_array(v.astype(np.float16), n) for n, v in (('W1', w1), ('B1', b1), ('W2', w2))]
    elif kind == 'bf16':
        inits = [bf16_tensor(n, v) for n, v in (('W1', w1), ('B1', b1), ('W2', w2))]
    else:
        inits = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in (('W1', w1), ('B1', b1), ('W2', w2))]
    nodes = [helper.make_node('MatMul', ['x', 'W1'], ['h']), helper.make_node('Add', ['h', 'B1'], ['a']),
             helper.make_node('Relu', ['a'], ['r']), helper.make_node('Cast', ['r'], ['c'], to=elem),
             helper.make_node('MatMul', ['c', 'W2'], ['y'])]
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info('x', elem, ['N', 8])],
                          [helper.make_tensor_value_info('y', elem, ['N', 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    r = np.random.RandomState(0)
    # Multiples of 1/64 up to 4: exact in float16 and bfloat16 alike.
    q = lambda *s: np.round(r.uniform(-4, 4, s) * 64) / 64
    w1, b1, w2 = q(8, 16), q(16), q(16, 3)
    for kind in ('f16', 'bf16', 'f32'):
        onnx.save(model(kind, w1, b1, w2), os.path.join(out, kind + '.onnx'))
    np.save(os.path.join(out, 'x.npy'), q(4, 8).astype(np.float32))


if __name__ == '__main__':
    main()
