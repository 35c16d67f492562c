#!/usr/bin/python3
"""tests/tools/autocast_check.py BIN WORK [--steps N] [--model cnn|transformer|zoo:NAME]
- pipec --precision bf16 against torch.autocast.

A small model (cnn: Conv, ReLU, MaxPool, Linear layers; transformer: a
pre-norm encoder block, single-head attention and a GELU MLP, over 8
tokens of 16 features, mean-pooled into a Linear classifier; zoo:NAME: an
image classifier of tests/zoo/models.py, e.g. zoo:resnet18, in training
mode with BatchNorm on batch statistics; seeded weights) is trained for N
steps of plain SGD on the same seeded batches six ways:

  torch fp32          float32 eager
  torch autocast      torch.autocast('cpu', dtype=torch.bfloat16): the
                      convolutions and matrix products in bf16, as torch
                      1.13 lists them
  torch fp64          float64 eager (the reference the others are judged by)
  pipec fp32          pipec MODEL --train, piperun --metrics
  pipec bf16          the same with --precision bf16
  pipec fp16          the same with --precision fp16 (dynamic loss scaling
                      from 2^16)

and the per-step losses are compared. Printed: the largest relative
difference of each curve from torch fp64's, and of pipec bf16's from
torch autocast's. The check passes when pipec bf16 and fp16 are within 2%
of torch fp64 at every step, pipec fp32 within 1e-4 (for a zoo model,
within the larger of 2% and twice autocast's own difference, and of 1e-4
and twice torch fp32's: on deep BatchNorm networks with small batches the
training itself is chaotic, and torch fp32's loss leaves fp64's by about
10x a step, 2e-2 after 10 steps of ResNet-18 at batch 8), pipec bf16 and fp16 differ from fp32
(the rounding happened),
and the model learns (the last 10 steps' mean loss below 0.97 of the first
10's; for a zoo model, at its small rate over 20 steps, below the first
10's).
Prints 'PASS autocast: ...' or exits non-zero with the numbers.
"""
import argparse
import copy
import inspect
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

B, CLASSES = 16, 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.f1 = nn.Linear(32 * 4 * 4, 64)
        self.f2 = nn.Linear(64, CLASSES)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(torch.flatten(x, 1))))


T, D = 8, 16  # the transformer's tokens and features


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.o = nn.Linear(D, D)
        self.n2 = nn.LayerNorm(D)
        self.up = nn.Linear(D, 4 * D)
        self.down = nn.Linear(4 * D, D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        q, k, v = self.qkv(self.n1(x)).chunk(3, dim=-1)
        att = torch.softmax(torch.matmul(q, k.transpose(1, 2)) / D ** 0.5, dim=-1)
        x = x + self.o(torch.matmul(att, v))
        x = x + self.down(F.gelu(self.up(self.n2(x))))
        return self.head(x.mean(dim=1))


MODELS = {'cnn': (Net, (3, 16, 16)), 'transformer': (Block, (T, D))}


def zoo_spec(name):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zoo'))
    from models import ZOO
    s = ZOO.get(name)
    if s is None or s.loss != 'cross-entropy' or len(s.inputs) != 1 or s.inputs[0][2] != 'float':
        sys.exit(f'autocast_check: zoo:{name} is not a zoo classifier of one float input')
    return s


def torch_losses(model, xs, ys, steps, lr, dtype, autocast):
    m = copy.deepcopy(model).to(dtype)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    losses = []
    for s in range(steps):
        x = torch.from_numpy(xs[s * B:(s + 1) * B]).to(dtype)
        y = torch.from_numpy(ys[s * B:(s + 1) * B])
        opt.zero_grad()
        if autocast:
            with torch.autocast('cpu', dtype=torch.bfloat16):
                out = m(x)
            loss = F.cross_entropy(out.float(), y)
        else:
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def pipec_losses(bindir, work, onnx_path, steps, lr, precision):
    plan = os.path.join(work, f'{precision}.plan')
    metrics = os.path.join(work, f'{precision}.jsonl')
    subprocess.run([os.path.join(bindir, 'pipec'), onnx_path, '-q', '-b', str(B), '--train', '--loss',
                    'cross-entropy', '--logits', 'logits', '--optimizer', f'sgd:lr={lr}', '--precision', precision,
                    '-o', plan], check=True)
    subprocess.run([os.path.join(bindir, 'piperun'), plan, '--steps', str(steps), '--data',
                    os.path.join(work, 'data'), '--metrics', metrics], check=True, stdout=subprocess.DEVNULL)
    return [json.loads(l)['loss'] for l in open(metrics)]


def worst(a, ref):
    return max(abs(x - r) / abs(r) for x, r in zip(a, ref))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('bin')
    ap.add_argument('work')
    ap.add_argument('--steps', type=int, help='SGD steps (default 50; zoo 20)')
    ap.add_argument('--lr', type=float, help='SGD rate (default: cnn 0.05, transformer 0.2, zoo 0.005)')
    ap.add_argument('--batch', type=int, help='examples a step (default 16; zoo 8)')
    ap.add_argument('--model', default='cnn', help='cnn, transformer or zoo:NAME (a tests/zoo classifier)')
    a = ap.parse_args()
    global B
    zoo = a.model.startswith('zoo:')
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get('AUTOCAST_TORCH_THREADS', '1')))
    if zoo:
        spec = zoo_spec(a.model[4:])
        model, shape = spec.build(), tuple(spec.inputs[0][1])
    elif a.model in MODELS:
        cls, shape = MODELS[a.model]
        model = cls()
    else:
        sys.exit(f'autocast_check: --model {a.model}: not cnn, transformer or zoo:NAME')
    if a.lr is None:
        a.lr = 0.005 if zoo else {'cnn': 0.05, 'transformer': 0.2}[a.model]
    B = a.batch or (8 if zoo else B)
    a.steps = a.steps or (20 if zoo else 50)
    os.makedirs(os.path.join(a.work, 'data'), exist_ok=True)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(a.steps * B, *shape, generator=g).numpy()
    # Labels that a fixed projection of the inputs' block means decides:
    # learnable in a few steps (the images' quadrants; the tokens' means).
    if len(shape) == 3:
        c, h, w = shape
        feats = xs.reshape(len(xs), c, 2, h // 2, 2, w // 2).mean(axis=(3, 5)).reshape(len(xs), -1)
    else:
        feats = xs.mean(axis=1)
    teacher = torch.randn(feats.shape[1], CLASSES, generator=g).numpy()
    ys = np.argmax(feats @ teacher, axis=1).astype(np.int64)
    np.save(os.path.join(a.work, 'data', 'x.npy'), xs)
    np.save(os.path.join(a.work, 'data', 'labels.npy'), ys)
    path = os.path.join(a.work, 'net.onnx')
    legacy = {'dynamo': False} if 'dynamo' in inspect.signature(torch.onnx.export).parameters else {}
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        torch.onnx.export(model, torch.from_numpy(xs[:B]), path, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, input_names=['x'], output_names=['logits'],
                          dynamic_axes={'x': {0: 'N'}, 'logits': {0: 'N'}}, do_constant_folding=False, **legacy)
    ref = torch_losses(model, xs, ys, a.steps, a.lr, torch.float64, False)
    t32 = torch_losses(model, xs, ys, a.steps, a.lr, torch.float32, False)
    tac = torch_losses(model, xs, ys, a.steps, a.lr, torch.float32, True)
    p32 = pipec_losses(a.bin, a.work, path, a.steps, a.lr, 'fp32')
    p16 = pipec_losses(a.bin, a.work, path, a.steps, a.lr, 'bf16')
    h16 = pipec_losses(a.bin, a.work, path, a.steps, a.lr, 'fp16')
    e = {k: worst(v, ref) for k, v in
         (('torch fp32', t32), ('torch autocast', tac), ('pipec fp32', p32), ('pipec bf16', p16),
          ('pipec fp16 (loss scaling)', h16))}
    vs_autocast = worst(p16, tac)
    detail = (f'{a.steps} SGD steps, largest relative loss difference from torch fp64: '
              + ', '.join(f'{k} {v:.2e}' for k, v in e.items())
              + f'; pipec bf16 from torch autocast {vs_autocast:.2e}; mean loss of the first and last 10 steps '
              f'{np.mean(ref[:10]):.4f} -> {np.mean(ref[-10:]):.4f}')
    first, last = np.mean(ref[:10]), np.mean(ref[-10:])
    tol = max(2e-2, 2 * e['torch autocast']) if zoo else 2e-2
    tol32 = max(1e-4, 2 * e['torch fp32']) if zoo else 1e-4
    detail += f'; tolerance {tol:.2e} (fp32 {tol32:.2e})'
    ok = (e['pipec bf16'] <= tol and e['pipec fp16 (loss scaling)'] <= tol and e['pipec fp32'] <= tol32 and
          p16 != p32 and h16 != p32 and last < (1.0 if zoo else 0.97) * first)
    print(('PASS' if ok else 'FAIL') + f' autocast {a.model}: ' + detail)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
