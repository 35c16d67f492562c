#!/usr/bin/python3
"""bench/zoo_grad_layers.py - per-parameter gradient errors of zoo models.

    zoo_grad_layers.py MODEL... [--bin DIR]... [--opset 17] [--kind conv|all]
                       [--top N] [--json FILE] [--batch B] [--image S]

tests/zoo/zoo.py's grad check, every row printed: for each parameter (conv
weights by default), pipec's relative error against torch float64 autograd
(one SGD step, as zoo.py measures it), next to torch float32's own under each
of zoo.TORCH_CONFIGS, their best and worst. Several --bin directories
(builds before and after a change) give one pipec column each. MODEL is a
tests/zoo/models.py name, or shufflenet_v2_x0_5 (the zoo's shufflenet_v2
spec with torchvision's x0_5 network). --batch and --image override the
spec's batch and (square image models) image size: longer sums.
"""
import argparse
import copy
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'zoo'))
import zoo  # noqa: E402
from models import ZOO, _cnn  # noqa: E402


def spec_for(name, batch=None, image=None):
    if name in ZOO:
        s = copy.copy(ZOO[name])
    elif name == 'shufflenet_v2_x0_5':
        s = copy.copy(ZOO['shufflenet_v2'])
        s.name = name
        s.build = _cnn(torchvision.models.shufflenet_v2_x0_5)
    else:
        raise SystemExit(f'unknown model {name}')
    if batch:
        s.batch = batch
    if image:
        s.inputs = [('x', (3, image, image), 'float')]
    return s


def pipec_grads(z, path, bindir):
    z.bin = os.path.abspath(bindir)
    B = z.s.batch
    plan = path + '.grad.plan'
    z.pipec(path, plan, z.train_flags('sgd') + ['--lr', repr(z.s.lr), '-m', '1'], B)
    d = os.path.join(z.work, 'grad-data')
    z.write_data(0, B, d)
    trained = path + '.grad.onnx'
    z.piperun([plan, '--steps', '1', '--data', d, '--save', trained])
    w0, w1 = z.initializers(path), z.initializers(trained)
    return {n: (w0[n].astype(np.float64) - w1[n].astype(np.float64)) / z.s.lr for n in w0 if n in w1}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('models', nargs='+')
    ap.add_argument('--bin', action='append', help='pipec build bin directory (repeatable)')
    ap.add_argument('--opset', type=int, default=17)
    ap.add_argument('--kind', default='conv', choices=['conv', 'all'])
    ap.add_argument('--top', type=int, default=0, help='print only the N worst rows (by pipec / best)')
    ap.add_argument('--json', help='write every row here')
    ap.add_argument('--batch', type=int, help="examples per step (default: the spec's)")
    ap.add_argument('--image', type=int, help="image size (default: the spec's)")
    a = ap.parse_args()
    bins = a.bin or [os.path.join(os.path.dirname(__file__), '..', 'build', 'bin')]
    out = []
    for name in a.models:
        work = tempfile.mkdtemp(prefix=f'pipec-gradlayers-{name}-')
        torch.set_num_threads(1)
        z = zoo.Zoo(spec_for(name, a.batch, a.image), bins[0], work)
        g64 = z.torch_grads(torch.float64, 0, z.s.batch)
        g32 = {}
        for label, threads, dnn in zoo.TORCH_CONFIGS:
            torch.set_num_threads(threads)
            with torch.backends.mkldnn.flags(enabled=dnn):
                g32[label] = z.torch_grads(torch.float32, 0, z.s.batch)
        torch.set_num_threads(1)
        path = z.export(a.opset, 'train')
        pg = [pipec_grads(z, path, b) for b in bins]
        convs = {n + '.weight' for n, m in z.model.named_modules() if isinstance(m, torch.nn.Conv2d)}
        largest = max(np.linalg.norm(r) for r in g64.values())
        rows = []
        for n, ref in g64.items():
            if a.kind == 'conv' and n not in convs:
                continue
            scale = max(np.linalg.norm(ref), zoo.SMALL_GRAD * largest)
            t = [float(np.linalg.norm(g[n] - ref) / scale) for g in g32.values()]
            p = [float(np.linalg.norm(g[n] - ref) / scale) if n in g else float('nan') for g in pg]
            rows.append({'model': name, 'param': n, 'pipec': p, 'torch': dict(zip(g32, t)),
                         'best': min(t), 'worst': max(t)})
        rows.sort(key=lambda r: -r['pipec'][-1] / max(zoo.GRAD_FLOOR / 2, r['best']))
        shown = rows[:a.top] if a.top else rows
        print(f'## {name} opset {a.opset}, batch {z.s.batch}, input {z.s.inputs[0][1]}: '
              f'{len(rows)} {a.kind} parameters'
              + (f', the {len(shown)} worst by pipec / best torch' if a.top else ''))
        print('| parameter | ' + ' | '.join(f'pipec {i}' for i in range(len(bins))) + ' | '
              + ' | '.join(f'torch {l}' for l in g32) + ' | pipec / best |')
        print('|---|' + '---|' * (len(bins) + len(g32) + 1))
        for r in shown:
            print(f'| {r["param"]} | ' + ' | '.join(f'{e:.2e}' for e in r['pipec']) + ' | '
                  + ' | '.join(f'{e:.2e}' for e in r['torch'].values())
                  + f' | {r["pipec"][-1] / r["best"]:.2f} |')
        out += rows
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(out, f, indent=1)


if __name__ == '__main__':
    main()
