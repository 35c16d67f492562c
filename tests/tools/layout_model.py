#!/usr/bin/env python3
"""tests/tools/layout_model.py - a small torch CNN for the channels-last and
fold-batchnorm passes (passes/Layout.cpp, passes/FoldBatchNorm.cpp), for
tests/lit/e2e/layout.test.

    layout_model.py OUT_DIR                 export and write the reference
    layout_model.py OUT_DIR --compare DIR   judge piperun's outputs in DIR

The model has what channels-last rewrites: a convolution with BatchNorm
(which torch folds into it) and ReLU, a max pool, a depthwise convolution
with ReLU6 (exported as Relu, then Clip), a 1x1 convolution scaled per
channel, a residual addition, a channel concatenation with a HardSwish
branch (HardSigmoid and Mul at opset 13) followed by a BatchNorm and ReLU
(which no convolution can take: channels-last makes it a per-channel
multiply-add), an average pool (a zero Pad
before it) and a global one before a Linear. The export is opset 13 with
seeded weights and BatchNorm statistics; x.npy is a [4, 3, 16, 16] input and ref.npy torch's output on
it in float64. --compare prints "match" when piperun's y.npy is within
1e-4 of ref.npy relative to its largest magnitude.
"""
import argparse
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Layout(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 16, 1)
        self.scale = nn.Parameter(torch.rand(16, 1, 1) + 0.5)
        self.branch = nn.Conv2d(16, 8, 1)
        self.bn2 = nn.BatchNorm2d(24)
        self.head = nn.Conv2d(24, 32, 3, padding=1, stride=2)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.stem(x))), 3, 2, 1)
        r = self.pw(F.relu6(self.dw(h))) * self.scale + h
        c = F.relu(self.bn2(torch.cat([r, F.hardswish(self.branch(r))], dim=1)))
        c = F.relu(self.head(F.avg_pool2d(c, 2)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(c, 1), 1))


def build():
    torch.manual_seed(5)
    m = Layout()
    with torch.no_grad():  # BatchNorm statistics that are not the identity
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.5, 0.5)
        m.bn2.running_mean.uniform_(-0.5, 0.5)
        m.bn2.running_var.uniform_(0.5, 2.0)
        m.bn2.weight.uniform_(0.5, 1.5)
        m.bn2.bias.uniform_(-0.5, 0.5)
    return m.eval()


def main():
    p = argparse.ArgumentParser()
    p.add_argument('out')
    p.add_argument('--compare')
    a = p.parse_args()
    if a.compare:
        ref = np.load(os.path.join(a.out, 'ref.npy'))
        got = np.load(os.path.join(a.compare, 'y.npy')).astype(np.float64)
        if got.shape != ref.shape:
            print(f'shape {got.shape} differs from the reference {ref.shape}')
            return 1
        err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
        print(f'largest relative difference {err:.2e}')
        print('match' if err <= 1e-4 else 'MISMATCH')
        return 0 if err <= 1e-4 else 1
    m = build()
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(6))
    np.save(os.path.join(a.out, 'x.npy'), x.numpy())
    with torch.no_grad():
        np.save(os.path.join(a.out, 'ref.npy'), m.double()(x.double()).numpy())
    m = build()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        torch.onnx.export(m, (x,), os.path.join(a.out, 'layout.onnx'), opset_version=13,
                          input_names=['x'], output_names=['y'], do_constant_folding=False)
    return 0


if __name__ == '__main__':
    sys.exit(main())
