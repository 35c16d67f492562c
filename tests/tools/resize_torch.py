#!/usr/bin/python3
"""tests/tools/resize_torch.py - Resize through pipec, judged by PyTorch.

    resize_torch.py --bin DIR [--work DIR] [--keep] [--filter SUBSTR]

Exports torch.nn.functional.interpolate (nearest, linear, bilinear with
align_corners False and True, bicubic both ways, trilinear; by scale_factor
and by size) with torch.onnx at opsets 11, 13 and 17 (nearest also at 9,
Upsample, and 10), as y = interpolate(x + p)
for a trainable p of x's shape, and checks pipec against PyTorch in float64:

  forward  pipec's inference output equals torch's to 1e-5 relative (largest
           difference over the largest magnitude);
  grad     the model compiled with --train --loss mse, SGD at a rate of 2^20,
           one step: (p_before - p_after) / rate is pipec's d loss / d p, the
           gradient of interpolate with respect to its input; its relative
           error (L2 norm of the difference over the reference's) against
           torch autograd in float64 must be at most 1e-5.

Prints a line per check; exits non-zero if any fails.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F

FORWARD_RTOL = 1e-5
GRAD_RTOL = 1e-5
LR = 2.0 ** 20

# name, input shape, interpolate keyword arguments, opsets
CASES = [
    ('nearest-scale', (2, 3, 4, 5), dict(scale_factor=2.0, mode='nearest'), (9, 10, 11, 13, 17)),
    ('nearest-size', (1, 2, 6, 7), dict(size=(4, 10), mode='nearest'), (13,)),
    ('linear-1d', (2, 3, 7), dict(size=11, mode='linear', align_corners=False), (13,)),
    ('bilinear-scale', (2, 3, 5, 6), dict(scale_factor=1.5, mode='bilinear', align_corners=False),
     (11, 13, 17)),
    ('bilinear-down', (1, 2, 8, 9), dict(scale_factor=0.5, mode='bilinear', align_corners=False),
     (13,)),
    ('bilinear-size-corners', (2, 2, 5, 4), dict(size=(8, 3), mode='bilinear', align_corners=True),
     (11, 13, 17)),
    ('bicubic-scale', (1, 3, 5, 6), dict(scale_factor=2.0, mode='bicubic', align_corners=False),
     (11, 13, 17)),
    ('bicubic-size-corners', (2, 1, 6, 5), dict(size=(4, 9), mode='bicubic', align_corners=True),
     (13,)),
    ('trilinear-scale', (1, 2, 3, 4, 5), dict(scale_factor=2.0, mode='trilinear', align_corners=False),
     (11, 13, 17)),
    ('trilinear-size-corners', (1, 1, 4, 3, 5), dict(size=(2, 5, 7), mode='trilinear',
                                                     align_corners=True), (13,)),
]


class Interp(torch.nn.Module):
    def __init__(self, shape, kwargs):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.p = torch.nn.Parameter(0.5 * torch.randn(shape, generator=g))
        self.kwargs = kwargs

    def forward(self, x):
        return F.interpolate(x + self.p, **self.kwargs)


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f'{" ".join(args)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}')
    return r.stdout


def check_case(name, shape, kwargs, opset, bindir, work):
    torch.manual_seed(0)
    m = Interp(shape, kwargs)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(shape, generator=g)
    d = os.path.join(work, f'{name}-{opset}')
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, 'model.onnx')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        torch.onnx.export(m, (x,), path, opset_version=opset, input_names=['x'],
                          output_names=['y'], training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
    m64 = Interp(shape, kwargs).double()
    m64.p.data = m.p.data.double()
    x64 = x.double()
    y64 = m64(x64)
    labels = torch.randn(y64.shape, generator=g)
    loss = F.mse_loss(y64, labels.double())
    loss.backward()
    g64 = m64.p.grad.numpy()
    failures = []

    # Forward.
    np.save(os.path.join(d, 'x.npy'), x.numpy())
    plan = os.path.join(d, 'infer.plan')
    run([os.path.join(bindir, 'pipec'), path, '-q', '-o', plan])
    out = os.path.join(d, 'out')
    run([os.path.join(bindir, 'piperun'), plan, '--input', f'x={os.path.join(d, "x.npy")}',
         '--outputs', out])
    y = np.load(os.path.join(out, 'y.npy')).astype(np.float64)
    ref = y64.detach().numpy()
    if y.shape != ref.shape:
        err = float('inf')
        detail = f'shape {y.shape}, torch {ref.shape}'
    else:
        err = float(np.max(np.abs(y - ref)) / max(np.max(np.abs(ref)), 1e-30))
        detail = f'largest relative difference {err:.2e} (limit {FORWARD_RTOL:.0e})'
    ok = err <= FORWARD_RTOL
    print(f'{"PASS" if ok else "FAIL"} {name} opset {opset} forward: {detail}', flush=True)
    if not ok:
        failures.append(f'{name} opset {opset} forward')

    # Gradient with respect to the input, through one SGD step on p.
    data = os.path.join(d, 'data')
    os.makedirs(data, exist_ok=True)
    np.save(os.path.join(data, 'x.npy'), x.numpy())
    np.save(os.path.join(data, 'labels.npy'), labels.numpy())
    plan = os.path.join(d, 'train.plan')
    run([os.path.join(bindir, 'pipec'), path, '-q', '-o', plan, '--train', '--optimizer', 'sgd',
         '--lr', repr(LR), '-m', '1', '--loss', 'mse', '--logits', 'y'])
    trained = os.path.join(d, 'trained.onnx')
    run([os.path.join(bindir, 'piperun'), plan, '--steps', '1', '--data', data, '--save', trained])
    w0 = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    w1 = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(trained).graph.initializer}
    grad = (w0['p'].astype(np.float64) - w1['p'].astype(np.float64)) / LR
    err = float(np.linalg.norm(grad - g64) / np.linalg.norm(g64))
    ok = err <= GRAD_RTOL
    print(f'{"PASS" if ok else "FAIL"} {name} opset {opset} grad: relative error {err:.2e} '
          f'(limit {GRAD_RTOL:.0e}) against torch float64', flush=True)
    if not ok:
        failures.append(f'{name} opset {opset} grad')
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--bin', default=os.path.join(os.path.dirname(__file__), '..', '..', 'build', 'bin'))
    ap.add_argument('--work', help='working directory (default: a temporary one)')
    ap.add_argument('--keep', action='store_true', help='keep the working directory')
    ap.add_argument('--filter', default='', help='only the cases whose name contains this')
    a = ap.parse_args()
    torch.set_num_threads(1)
    work = a.work or tempfile.mkdtemp(prefix='pipec-resize-torch-')
    failures = []
    try:
        for name, shape, kwargs, opsets in CASES:
            if a.filter not in name:
                continue
            for opset in opsets:
                try:
                    failures += check_case(name, shape, kwargs, opset, os.path.abspath(a.bin), work)
                except RuntimeError as e:
                    print(f'FAIL {name} opset {opset}: {e}', flush=True)
                    failures.append(f'{name} opset {opset}')
    finally:
        if not a.keep and not a.work:
            shutil.rmtree(work, ignore_errors=True)
    print('resize_torch: ' + ('FAILED ' + ', '.join(failures) if failures else 'all checks passed'))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
