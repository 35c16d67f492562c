"""bench/ort_models.py - the models of bench/run-vs-ort.sh, written in torch.

Exported with torch.onnx.export at opset 13, the way a user's export looks:
LayerNorm and GELU decomposed by the exporter (ReduceMean/Sub/Pow/Sqrt/Div
and Erf chains), attention as MatMul, scale, mask, Softmax, MatMul; the
batch axis dynamic. Seeded random weights.

    /usr/bin/python3 bench/ort_models.py OUT_DIR    # writes gpt-like.onnx, mlp-8x1024.onnx, cnn-like.onnx
"""
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

# The zoo's transformer block (tests/zoo/models.py), as bench/vs_ort.py
# finds the zoo.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'zoo'))
from models import Block  # noqa: E402


class GptLike(nn.Module):
    """4 pre-norm blocks, d 256, 4 heads, sequence 128, vocabulary 512. The
    blocks are the zoo's GPT-2 blocks with the causal mask a float buffer
    compared with 0 (Equal, Where on export), as many GPT ports write it:
    the zoo's GPT-2 masks with a bool buffer and ~ (Not, Where), so the two
    exercise both forms fuse-masked-softmax meets."""

    def __init__(self, vocab=512, d=256, heads=4, layers=4, seq=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads, seq, float_mask=True) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, :idx.shape[1]]
        return self.head(self.ln(self.blocks(x)))


class Mlp(nn.Module):
    """8 layers of 1024 x 1024 with ReLU between them."""

    def __init__(self, width=1024, layers=8):
        super().__init__()
        mods = []
        for i in range(layers):
            mods.append(nn.Linear(width, width))
            if i + 1 < layers:
                mods.append(nn.ReLU())
        self.net = nn.Sequential(*mods)

    def forward(self, x):
        return self.net(x)


# name -> (module, example input, input name, per-example shape, dtype, int bound, batch)
class BasicBlock(nn.Module):
    """Conv3x3-BN-ReLU-Conv3x3-BN plus the input (a strided 1x1 Conv + BN
    where the shape changes), then ReLU: samples/gen/Cnn.cpp's block."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (x if self.short is None else self.short(x)))


class CnnLike(nn.Module):
    """The CNN sample's architecture (samples/gen/Cnn.cpp) at CIFAR size: a
    3x3 stem, 3 stages of 2 basic blocks, 32, 64 and 128 channels, 32x32
    images, global average pooling, 10 classes."""

    def __init__(self, width=32, stages=3, blocks=2, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, cin = [], width
        for s in range(stages):
            cout = width * 2 ** s
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if s > 0 and b == 0 else 1))
                cin = cout
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.body(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


MODELS = {
    'gpt-like': (GptLike, lambda b: torch.randint(0, 512, (b, 128)), 'idx', 'tokens', 512, 8),
    'mlp-8x1024': (Mlp, lambda b: torch.randn(b, 1024), 'x', 'float', 0, 128),
    'cnn-like': (CnnLike, lambda b: torch.randn(b, 3, 32, 32), 'x', 'float', 0, 32),
}


def export(name, out_dir):
    ctor, example, input_name, _, _, batch = MODELS[name]
    torch.manual_seed(0)
    m = ctor().eval()
    path = os.path.join(out_dir, name + '.onnx')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        torch.onnx.export(m, (example(batch),), path, opset_version=13, input_names=[input_name],
                          output_names=['y'], dynamic_axes={input_name: {0: 'batch'}, 'y': {0: 'batch'}})
    return path


if __name__ == '__main__':
    for n in MODELS:
        print(export(n, sys.argv[1]))
