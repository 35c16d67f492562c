#!/usr/bin/env python3
"""tests/tools/fusion_models.py - small torch models whose exports the
fusion passes rewrite (passes/Fusion.cpp), for tests/lit/e2e/fusion.test.

    fusion_models.py OUT_DIR

writes, at opset 13, with seeded weights:
  gelu_tanh.onnx   Linear, gelu(approximate='tanh'), Linear, GPT-2's
                   written-out tanh GELU (torch.pow(x, 3)), Linear
  attention.onnx   causal self-attention: scores * 1/sqrt(d), masked_fill
                   with -inf, softmax, as GPT-style models export it
  mha.onnx         torch.nn.MultiheadAttention (batch first, 2 heads) as
                   self-attention: the sequence-first block torchvision's
                   ViT and transformer encoders export
and x.npy, a [2, 8, 16] input both take.
"""
import math
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GeluTanh(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 16)

    def forward(self, x):
        h = F.gelu(self.a(x), approximate='tanh')
        h = self.b(h)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return self.c(h)


class Attention(nn.Module):
    def __init__(self, d=16, heads=2, seq=8):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.register_buffer('mask', torch.tril(torch.ones(seq, seq, dtype=torch.bool)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        h = self.heads
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float('-inf'))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Mha(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def main():
    out = sys.argv[1]
    torch.manual_seed(3)
    x = torch.randn(2, 8, 16)
    np.save(os.path.join(out, 'x.npy'), x.numpy())
    for name, m in (('gelu_tanh', GeluTanh()), ('attention', Attention()), ('mha', Mha())):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            torch.onnx.export(m.eval(), (x,), os.path.join(out, name + '.onnx'), opset_version=13,
                              input_names=['x'], output_names=['y'])


if __name__ == '__main__':
    main()
