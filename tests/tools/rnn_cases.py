#!/usr/bin/env python3
"""tests/tools/rnn_cases.py - node tests of LSTM, GRU and RNN beyond ONNX's own.

    rnn_cases.py DIR    writes DIR/node/<test>/model.onnx and
                        DIR/node/<test>/test_data_set_0/{input,output}_N.pb

ONNX's test data has twelve recurrent node tests, all forward, one
direction, default activations. These cover the rest of the three ops'
attributes, in ONNX's layout, so that `pipec-conformance --data DIR` runs
them as it runs ONNX's: both directions and reverse, layout 1 (with its
batch-major initial states), every activation function with and without
its alpha and beta, clip, LSTM's peepholes and input_forget, GRU's
linear_before_reset 0 and 1, sequence_lens as a graph input and as an
initializer (with sequences shorter than T in both directions), initial
states, omitted optional inputs and outputs (Y_c alone), and opsets 7, 9,
13, 14, 17 and 21 (Gemm's C required before 11, Clip's bounds attributes
before 11, Split's num_outputs from 18).

Expected outputs come from the numpy float64 evaluator below, written from
the ONNX operator specification (gate orders i, o, f, c and z, r, h; clip
applied to each gate's pre-activation after the peepholes; activation_alpha
and activation_beta consumed in the order of the activations, each taking
the scalars it uses, as ONNX Runtime reads them).
"""
import os
import sys

import numpy as np
from onnx import helper as h

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_node_cases import write as write_case  # noqa: E402

rng = np.random.RandomState(23)

# name -> (alphas used, betas used, default alpha, default beta, f(x, a, b))
ACTS = {
    'relu': (0, 0, 0, 0, lambda x, a, b: np.maximum(x, 0)),
    'tanh': (0, 0, 0, 0, lambda x, a, b: np.tanh(x)),
    'sigmoid': (0, 0, 0, 0, lambda x, a, b: 1 / (1 + np.exp(-x))),
    'affine': (1, 1, 1.0, 0.0, lambda x, a, b: a * x + b),
    'leakyrelu': (1, 0, 0.01, 0, lambda x, a, b: np.where(x >= 0, x, a * x)),
    'thresholdedrelu': (1, 0, 1.0, 0, lambda x, a, b: np.where(x > a, x, 0.0)),
    'scaledtanh': (1, 1, 1.0, 1.0, lambda x, a, b: a * np.tanh(b * x)),
    'hardsigmoid': (1, 1, 0.2, 0.5, lambda x, a, b: np.clip(a * x + b, 0, 1)),
    'elu': (1, 0, 1.0, 0, lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1))),
    'softsign': (0, 0, 0, 0, lambda x, a, b: x / (1 + np.abs(x))),
    'softplus': (0, 0, 0, 0, lambda x, a, b: np.log1p(np.exp(x))),
}
GATES = {'LSTM': 4, 'GRU': 3, 'RNN': 1}
DEFAULT_ACTS = {'LSTM': ['Sigmoid', 'Tanh', 'Tanh'], 'GRU': ['Sigmoid', 'Tanh'], 'RNN': ['Tanh']}


def activations(op, attrs, D):
    names = attrs.get('activations', DEFAULT_ACTS[op] * D)
    alphas = list(attrs.get('activation_alpha', []))
    betas = list(attrs.get('activation_beta', []))
    fs = []
    for n in names:
        na, nb, da, db, f = ACTS[n.lower()]
        a = alphas.pop(0) if na and alphas else da
        b = betas.pop(0) if nb and betas else db
        fs.append(lambda x, f=f, a=a, b=b: f(x, a, b))
    per = len(DEFAULT_ACTS[op])
    return [fs[d * per:(d + 1) * per] for d in range(D)]


def reference(op, attrs, X, W, R, B=None, seq=None, h0=None, c0=None, P=None):
    """Y, Y_h (, Y_c) of the op in float64."""
    layout = attrs.get('layout', 0)
    if layout:
        X = X.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    T, N, _ = X.shape
    D, _, H = R.shape
    G = GATES[op]
    clip = attrs.get('clip')
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    direction = attrs.get('direction', 'forward')
    reverse = [direction == 'reverse'] if D == 1 else [False, True]
    acts = activations(op, attrs, D)
    seq = np.full(N, T) if seq is None else seq
    Y = np.zeros((T, D, N, H))
    Yh = np.zeros((D, N, H))
    Yc = np.zeros((D, N, H))
    for d in range(D):
        w, r = W[d], R[d]
        wb = np.zeros(G * H) if B is None else B[d, :G * H]
        rb = np.zeros(G * H) if B is None else B[d, G * H:]
        hs = np.zeros((N, H)) if h0 is None else h0[d].copy()
        cs = np.zeros((N, H)) if c0 is None else c0[d].copy()
        p = np.zeros(3 * H) if P is None else P[d]
        f = acts[d]
        steps = range(T - 1, -1, -1) if reverse[d] else range(T)
        for t in steps:
            x = X[t]
            live = (t < seq)[:, None]
            if op == 'RNN':
                hn = f[0](cl(x @ w.T + hs @ r.T + wb + rb))
                cn = cs
            elif op == 'LSTM':
                blk = lambda k, m: m[k * H:(k + 1) * H]
                gx = lambda k: x @ blk(k, w).T + hs @ blk(k, r).T + blk(k, wb) + blk(k, rb)
                i = f[0](cl(gx(0) + p[:H] * cs))
                if attrs.get('input_forget', 0):
                    fg = 1 - i
                else:
                    fg = f[0](cl(gx(2) + p[2 * H:] * cs))
                cn = fg * cs + i * f[1](cl(gx(3)))
                o = f[0](cl(gx(1) + p[H:2 * H] * cn))
                hn = o * f[2](cn)
            else:
                blk = lambda k, m: m[k * H:(k + 1) * H]
                z = f[0](cl(x @ blk(0, w).T + hs @ blk(0, r).T + blk(0, wb) + blk(0, rb)))
                rr = f[0](cl(x @ blk(1, w).T + hs @ blk(1, r).T + blk(1, wb) + blk(1, rb)))
                if attrs.get('linear_before_reset', 0):
                    hh = f[1](cl(x @ blk(2, w).T + rr * (hs @ blk(2, r).T + blk(2, rb)) + blk(2, wb)))
                else:
                    hh = f[1](cl(x @ blk(2, w).T + (rr * hs) @ blk(2, r).T + blk(2, rb) + blk(2, wb)))
                hn = (1 - z) * hh + z * hs
                cn = cs
            Y[t, d] = np.where(live, hn, 0.0)
            hs = np.where(live, hn, hs)
            cs = np.where(live, cn, cs)
        Yh[d], Yc[d] = hs, cs
    if layout:
        Y, Yh, Yc = Y.transpose(2, 0, 1, 3), Yh.transpose(1, 0, 2), Yc.transpose(1, 0, 2)
    return Y, Yh, Yc


def write(root, name, op, opset, attrs, T=4, N=3, I=3, H=4, bias=True, seq=None, seq_const=False,
          h0=False, c0=False, peep=False, outputs=('Y', 'Y_h')):
    """A test of one node. seq: the lengths (a graph input, or an
    initializer with seq_const); outputs: the node's output names, '' for
    an omitted one."""
    attrs = dict(attrs)
    D = 2 if attrs.get('direction') == 'bidirectional' else 1
    G = GATES[op]
    layout = attrs.get('layout', 0)
    xs = (N, T, I) if layout else (T, N, I)
    ss = (N, D, H) if layout else (D, N, H)
    u = lambda *s: rng.uniform(-0.6, 0.6, s)
    vals = {'X': rng.uniform(-1.5, 1.5, xs), 'W': u(D, G * H, I), 'R': u(D, G * H, H)}
    if bias:
        vals['B'] = u(D, 2 * G * H)
    if seq is not None:
        vals['sequence_lens'] = np.array(seq, np.int32)
    if h0:
        vals['initial_h'] = u(*ss)
    if c0:
        vals['initial_c'] = u(*ss)
    if peep:
        vals['P'] = u(D, 3 * H)
    order = ['X', 'W', 'R', 'B', 'sequence_lens', 'initial_h', 'initial_c', 'P'][:8 if op == 'LSTM' else 6]
    names = [n if n in vals else '' for n in order]
    while names and names[-1] == '':
        names.pop()
    for k in vals:
        if k != 'sequence_lens':
            vals[k] = vals[k].astype(np.float32)
    args = {k.replace('initial_h', 'h0').replace('initial_c', 'c0').replace('sequence_lens', 'seq'):
            v.astype(np.float64) if v.dtype == np.float32 else v for k, v in vals.items()}
    ref = dict(zip(('Y', 'Y_h', 'Y_c'), reference(op, attrs, **args)))
    attrs.setdefault('hidden_size', H)
    node = h.make_node(op, names, list(outputs), name=name, **attrs)
    inputs, inits = [], []
    for n in names:
        if not n:
            continue
        if n == 'sequence_lens' and seq_const:
            inits.append((n, vals[n]))
        else:
            inputs.append((n, vals[n]))
    outs = [(o, ref[o].astype(np.float32)) for o in outputs if o]
    write_case(root, name, [node], opset, inputs, outs, inits, ir_version=7)


def main():
    root = sys.argv[1]
    bi = {'direction': 'bidirectional'}
    rev = {'direction': 'reverse'}
    # LSTM
    write(root, 'test_pipec_lstm_bidirectional_states', 'LSTM', 14, bi, h0=True, c0=True,
          outputs=('Y', 'Y_h', 'Y_c'))
    write(root, 'test_pipec_lstm_reverse_peepholes_clip_opset9', 'LSTM', 9, dict(rev, clip=0.4),
          h0=True, c0=True, peep=True, outputs=('Y', 'Y_h', 'Y_c'))
    write(root, 'test_pipec_lstm_no_bias_opset7', 'LSTM', 7, {}, bias=False, outputs=('Y', 'Y_h'))
    write(root, 'test_pipec_lstm_seq_lens_input', 'LSTM', 13, bi, seq=[4, 2, 1], h0=True, c0=True,
          peep=True, outputs=('Y', 'Y_h', 'Y_c'))
    write(root, 'test_pipec_lstm_seq_lens_constant_layout1', 'LSTM', 17, dict(bi, layout=1),
          seq=[3, 4, 2], seq_const=True, h0=True, c0=True, outputs=('Y', 'Y_h', 'Y_c'))
    write(root, 'test_pipec_lstm_input_forget_activations', 'LSTM', 14,
          dict(input_forget=1, activations=['HardSigmoid', 'LeakyRelu', 'Softsign'],
               activation_alpha=[0.3, 0.2], activation_beta=[0.45]), c0=True,
          outputs=('', '', 'Y_c'))
    write(root, 'test_pipec_lstm_bidirectional_activations_opset21', 'LSTM', 21,
          dict(bi, activations=['Sigmoid', 'Tanh', 'Tanh', 'HardSigmoid', 'Softsign', 'Elu'],
               activation_alpha=[0.25], activation_beta=[0.4]), h0=True, peep=True,
          outputs=('Y', 'Y_h', 'Y_c'))
    # GRU
    write(root, 'test_pipec_gru_linear_before_reset_bidirectional', 'GRU', 14,
          dict(bi, linear_before_reset=1), h0=True)
    write(root, 'test_pipec_gru_linear_before_reset_no_state', 'GRU', 13,
          dict(linear_before_reset=1))
    write(root, 'test_pipec_gru_reverse_clip_opset7', 'GRU', 7, dict(rev, clip=0.5), h0=True)
    write(root, 'test_pipec_gru_seq_lens_layout1_opset21', 'GRU', 21,
          dict(bi, layout=1, linear_before_reset=1), seq=[2, 4, 3], h0=True)
    write(root, 'test_pipec_gru_activations', 'GRU', 14,
          dict(bi, activations=['Sigmoid', 'ScaledTanh', 'HardSigmoid', 'Softplus'],
               activation_alpha=[0.8, 0.15], activation_beta=[1.3, 0.55]), h0=True)
    # RNN
    write(root, 'test_pipec_rnn_bidirectional_relu', 'RNN', 14,
          dict(bi, activations=['Relu', 'Tanh']), h0=True)
    write(root, 'test_pipec_rnn_activations_opset9', 'RNN', 9,
          dict(bi, activations=['ThresholdedRelu', 'Affine'], activation_alpha=[0.1, 0.7],
               activation_beta=[0.2], clip=1.0))
    write(root, 'test_pipec_rnn_reverse_seq_lens_layout1', 'RNN', 14,
          dict(rev, layout=1, activations=['LeakyRelu']), seq=[1, 4, 3], h0=True)
    write(root, 'test_pipec_rnn_elu_seq_lens_constant', 'RNN', 13,
          dict(activations=['Elu'], activation_alpha=[0.5]), seq=[4, 4, 4], seq_const=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
