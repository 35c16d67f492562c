#!/usr/bin/python3
"""bench/zoo_relu_flips.py - how much of torch float32's gradient error is ReLU flips.

    zoo_relu_flips.py MODEL [--image S] [--batch B]

For a zoo CNN (bench/zoo_grad_layers.py's names and overrides), every
nn.ReLU and nn.ReLU6 module is replaced by one that records, in the float64
run, which region each element falls in (0, linear, 6). Then under each of
tests/zoo/zoo.TORCH_CONFIGS, float32 autograd runs twice: as computed
(counting the elements whose region differs from float64's: flips), and with
the regions pinned to float64's. Prints the worst parameter error of each
(zoo.py's measure). If pinning removes most of the error, the error is a
flip's, i.e. a draw on the forward pass's last bits, not a lost sum.
Functional ReLUs (F.relu in a forward) are not pinned.
"""
import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', 'tests', 'zoo'))
import zoo  # noqa: E402
from zoo_grad_layers import spec_for  # noqa: E402

REGIONS = {}
FLIPS = [0]


class Pinned(torch.nn.Module):
    def __init__(self, key, six):
        super().__init__()
        self.key, self.six, self.mode, self.count = key, six, 'record', 0

    def forward(self, x):
        k = (self.key, self.count)
        self.count += 1
        if self.mode == 'record':
            REGIONS[k] = (x <= 0, (x >= 6) if self.six else torch.zeros_like(x, dtype=torch.bool))
        lo, hi = REGIONS[k]
        if self.mode == 'count':
            FLIPS[0] += int(((x <= 0) != lo).sum()) + (int(((x >= 6) != hi).sum()) if self.six else 0)
        if self.mode == 'pinned':
            return torch.where(hi, torch.full_like(x, 6.0), torch.where(lo, torch.zeros_like(x), x))
        return torch.nn.functional.relu6(x) if self.six else torch.nn.functional.relu(x)


def pin(model):
    for n, c in list(model.named_modules()):
        for cn, ch in list(c.named_children()):
            if isinstance(ch, (torch.nn.ReLU, torch.nn.ReLU6)):
                setattr(c, cn, Pinned(f'{n}.{cn}', isinstance(ch, torch.nn.ReLU6)))
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('model')
    ap.add_argument('--batch', type=int)
    ap.add_argument('--image', type=int)
    a = ap.parse_args()
    torch.set_num_threads(1)
    z = zoo.Zoo(spec_for(a.model, a.batch, a.image), '/nonexistent', '/nonexistent')
    z.model = pin(z.model)

    def mode(m):
        for mod in z.model.modules():
            if isinstance(mod, Pinned):
                mod.mode, mod.count = m, 0

    mode('record')
    B = z.s.batch
    g64 = z.torch_grads(torch.float64, 0, B)
    largest = max(np.linalg.norm(r) for r in g64.values())
    for m in ['count', 'pinned']:
        line = []
        for label, threads, dnn in zoo.TORCH_CONFIGS:
            mode(m)
            FLIPS[0] = 0
            torch.set_num_threads(threads)
            with torch.backends.mkldnn.flags(enabled=dnn):
                g = z.torch_grads(torch.float32, 0, B)
            torch.set_num_threads(1)
            e = max(np.linalg.norm(g[n] - g64[n]) / max(np.linalg.norm(g64[n]), zoo.SMALL_GRAD * largest)
                    for n in g64)
            line.append(f'{label}: {e:.2e}' + (f' ({FLIPS[0]} flipped)' if m == 'count' else ''))
        print(f'{a.model} ReLUs {"as computed" if m == "count" else "pinned to float64"}: '
              + '; '.join(line), flush=True)


if __name__ == '__main__':
    main()
