#!/usr/bin/env python3
"""tests/tools/rnn_grad_check.py - gradients of LSTM, GRU and RNN against
float64 finite differences, on the attributes torch does not export.

    rnn_grad_check.py --bin DIR --work DIR

The zoo (tests/zoo/) checks the recurrences torch.onnx exports (default
activations, no clip, no peepholes, no sequence_lens) against torch's
autograd. Here each case is one node whose weights, biases, initial states
and peepholes are initializers (so pipec trains them), with clip,
peepholes, input_forget, linear_before_reset, sequence_lens (a graph
input, so layout 1: --data counts examples along every input's first
axis), layout 0 and 1, both directions and the activations that lower to more
than one op (ThresholdedRelu, Affine, ScaledTanh) or have their own
gradient rules (HardSigmoid, LeakyRelu, Elu, Softsign, Softplus). pipec
compiles it with an MSE loss on Y (--train, SGD at 2^20, one step);
(w_before - w_after) / 2^20 is its gradient. The reference is the central
difference (h = 1e-6) of the same loss evaluated by rnn_cases.py's float64
evaluator. Each parameter's relative error (L2) must be below 2e-4.

Prints a line per case and exits non-zero if one fails.
"""
import argparse
import os
import subprocess
import sys
import zlib

import numpy as np
import onnx
from onnx import helper as h, numpy_helper as nh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rnn_cases import GATES, reference  # noqa: E402

LR = 2.0 ** 20
LIMIT = 2e-4
PARAMS = ['W', 'R', 'B', 'initial_h', 'initial_c', 'P']


def case(name, op, attrs, opset=14, T=4, N=3, I=3, H=4, seq=None, h0=True, c0=True, peep=False):
    rng = np.random.RandomState(zlib.crc32(name.encode()))
    D = 2 if attrs.get('direction') == 'bidirectional' else 1
    G = GATES[op]
    layout = attrs.get('layout', 0)
    u = lambda *s: rng.uniform(-0.6, 0.6, s).astype(np.float32)
    ss = (N, D, H) if layout else (D, N, H)
    v = {'X': rng.uniform(-1.5, 1.5, (N, T, I) if layout else (T, N, I)).astype(np.float32),
         'W': u(D, G * H, I), 'R': u(D, G * H, H), 'B': u(D, 2 * G * H)}
    if seq is not None:
        v['sequence_lens'] = np.array(seq, np.int32)
    if h0:
        v['initial_h'] = u(*ss)
    if c0 and op == 'LSTM':
        v['initial_c'] = u(*ss)
    if peep:
        v['P'] = u(D, 3 * H)
    y_shape = (N, T, D, H) if layout else (T, D, N, H)
    v['labels'] = rng.uniform(-0.5, 0.5, y_shape).astype(np.float32)
    return name, op, dict(attrs, hidden_size=H), opset, v


CASES = [
    case('lstm_peepholes_clip_seq_lens', 'LSTM', {'direction': 'bidirectional', 'clip': 0.7, 'layout': 1},
         seq=[4, 2, 3], peep=True),
    case('lstm_input_forget_activations_layout1', 'LSTM',
         {'layout': 1, 'input_forget': 1, 'activations': ['HardSigmoid', 'Softsign', 'Elu'],
          'activation_alpha': [0.3, 0.8], 'activation_beta': [0.45]}, seq=[3, 4, 1]),
    case('gru_reverse_seq_lens', 'GRU', {'direction': 'reverse', 'layout': 1}, seq=[2, 4, 3]),
    case('gru_bidirectional_layout0', 'GRU', {'direction': 'bidirectional', 'clip': 0.8}, opset=13),
    case('gru_linear_before_reset_activations', 'GRU',
         {'direction': 'bidirectional', 'linear_before_reset': 1,
          'activations': ['Sigmoid', 'ScaledTanh', 'HardSigmoid', 'Softplus'],
          'activation_alpha': [0.9, 0.25], 'activation_beta': [1.2, 0.5]}, opset=9, h0=False),
    case('rnn_thresholded_affine_clip', 'RNN',
         {'direction': 'bidirectional', 'activations': ['ThresholdedRelu', 'Affine'],
          'activation_alpha': [0.05, 0.7], 'activation_beta': [0.1], 'clip': 1.2}),
    case('rnn_leakyrelu_layout1_seq_lens', 'RNN',
         {'layout': 1, 'activations': ['LeakyRelu'], 'activation_alpha': [0.2]}, seq=[4, 1, 2]),
]


def build(path, name, op, attrs, opset, v):
    order = ['X', 'W', 'R', 'B', 'sequence_lens', 'initial_h', 'initial_c', 'P'][:8 if op == 'LSTM' else 6]
    names = [n if n in v else '' for n in order]
    while names[-1] == '':
        names.pop()
    node = h.make_node(op, names, ['Y'], name=name, **attrs)
    info = lambda n: h.make_tensor_value_info(n, nh.from_array(v[n]).data_type, list(v[n].shape))
    inputs = [info(n) for n in ('X', 'sequence_lens') if n in v]
    inits = [nh.from_array(v[n], n) for n in PARAMS if n in v]
    out = h.make_tensor_value_info('Y', onnx.TensorProto.FLOAT, list(v['labels'].shape))
    g = h.make_graph([node], name, inputs, [out], initializer=inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', opset)], ir_version=7), path)


def loss(op, attrs, v, p):
    args = {'X': v['X'].astype(np.float64), 'seq': v.get('sequence_lens')}
    for n, k in (('W', 'W'), ('R', 'R'), ('B', 'B'), ('initial_h', 'h0'), ('initial_c', 'c0'), ('P', 'P')):
        if n in p:
            args[k] = p[n]
    y = reference(op, attrs, **args)[0]
    return np.mean((y - v['labels']) ** 2)


def finite_differences(op, attrs, v):
    p = {n: v[n].astype(np.float64) for n in PARAMS if n in v}
    grads = {}
    for n, a in p.items():
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            old = a[i]
            a[i] = old + 1e-6
            up = loss(op, attrs, v, p)
            a[i] = old - 1e-6
            down = loss(op, attrs, v, p)
            a[i] = old
            g[i] = (up - down) / 2e-6
        grads[n] = g
    return grads


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--bin', required=True)
    ap.add_argument('--work', required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    failed = 0
    for name, op, attrs, opset, v in CASES:
        d = os.path.join(a.work, name)
        os.makedirs(os.path.join(d, 'data'), exist_ok=True)
        model = os.path.join(d, 'model.onnx')
        build(model, name, op, attrs, opset, v)
        for n in ('X', 'sequence_lens', 'labels'):
            if n in v:
                np.save(os.path.join(d, 'data', n + '.npy'), v[n])
        plan = os.path.join(d, 'plan')
        trained = os.path.join(d, 'trained.onnx')
        for cmd in ([os.path.join(a.bin, 'pipec'), model, '-q', '-o', plan, '--train', '--loss', 'mse',
                     '--logits', 'Y', '--optimizer', 'sgd', '--lr', repr(LR), '-m', '1'],
                    [os.path.join(a.bin, 'piperun'), plan, '--steps', '1', '--data',
                     os.path.join(d, 'data'), '--save', trained]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f'FAIL {name}: {" ".join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}')
                return 1
        after = {t.name: nh.to_array(t) for t in onnx.load(trained).graph.initializer}
        ref = finite_differences(op, attrs, v)
        errs = {}
        for n, g in ref.items():
            got = (v[n].astype(np.float64) - after[n].astype(np.float64)) / LR
            errs[n] = float(np.linalg.norm(got - g) / max(np.linalg.norm(g), 1e-12))
        worst = max(errs, key=errs.get)
        ok = errs[worst] <= LIMIT
        failed += not ok
        print(f'{"PASS" if ok else "FAIL"} {name}: {len(errs)} parameters, worst {worst} '
              f'{errs[worst]:.1e} (limit {LIMIT:.0e})', flush=True)
    print(f'{len(CASES) - failed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
