#!/usr/bin/python3
"""bench/zoo_bench.py - one training step of each zoo model, pipec against
PyTorch eager. Run through bench/run-zoo.sh.

    zoo_bench.py --build DIR [--threads T] [--rounds R] [--steps S] [--models a,b]
    zoo_bench.py --torch-step MODEL --threads T --batch B --steps S   (internal)

Each model of tests/zoo/models.py is exported by torch.onnx (TRAINING mode,
opset 17) and compiled with `pipec --train --optimizer sgd` at its benchmark
batch (K=1, M=1). A step is forward, backward and the SGD update, on the same
data in both. pipec: `piperun --steps S --warmup 2 --threads-per-device T`,
its median step. PyTorch: a fresh interpreter with OMP_WAIT_POLICY=PASSIVE and
OMP_NUM_THREADS=T set before torch is imported, torch.set_num_threads(T),
2 warm-up steps, the median of S. The two alternate within every round
(A B, then B A), so a drift of this machine hits both alike; the table gives
the median over rounds of each, and the median of the per-round ratios.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'tests', 'zoo'))


def torch_step(model, threads, batch, steps):
    """Runs in its own interpreter: the thread settings precede the import."""
    import torch
    import torch.nn.functional as F
    from models import ZOO
    torch.set_num_threads(threads)
    s = ZOO[model]
    torch.manual_seed(0)
    m = s.build()
    m.train()
    g = torch.Generator().manual_seed(1)
    args = [torch.randint(0, s.num_classes, (batch,) + shape, generator=g) if kind == 'tokens'
            else torch.randn((batch,) + shape, generator=g) for _, shape, kind in s.inputs]
    if s.loss == 'model':
        args.append(torch.randint(0, s.num_classes, (batch, s.dims['seq']), generator=g))
    labels = torch.randint(0, s.num_classes, (batch,), generator=g)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        out = m(*args)
        if s.loss == 'model':
            loss = out[0]
        elif s.loss == 'cross-entropy':
            loss = F.cross_entropy(out, labels)
        else:
            loss = F.mse_loss(out, torch.zeros_like(out))
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({'median_step_seconds': statistics.median(times[2:])}))


def prepare(model, build, work, batch):
    """Exports the model, writes a batch of data and compiles the plan."""
    import numpy as np
    import torch
    import zoo
    from models import ZOO
    s = ZOO[model]
    z = zoo.Zoo(s, build, work)
    path = z.export(17, 'train')
    g = torch.Generator().manual_seed(1)
    data = os.path.join(work, model + '-data')
    os.makedirs(data, exist_ok=True)
    for name, shape, kind in s.inputs:
        t = (torch.randint(0, s.num_classes, (batch,) + shape, generator=g) if kind == 'tokens'
             else torch.randn((batch,) + shape, generator=g))
        np.save(os.path.join(data, name + '.npy'), t.numpy())
    if s.loss == 'model':
        np.save(os.path.join(data, 'targets.npy'),
                torch.randint(0, s.num_classes, (batch, s.dims['seq']), generator=g).numpy())
    elif s.loss == 'cross-entropy':
        np.save(os.path.join(data, 'labels.npy'),
                torch.randint(0, s.num_classes, (batch,), generator=g).numpy())
    else:
        out_shape = (batch,) + tuple(s.inputs[0][1])
        np.save(os.path.join(data, 'labels.npy'), np.zeros(out_shape, np.float32))
    plan = os.path.join(work, model + '.plan')
    flags = ['--train', '--optimizer', 'sgd', '--lr', '0.01', '-b', str(batch), '-q', '-o', plan]
    if s.loss != 'model':
        flags += ['--loss', s.loss, '--logits', s.output_names[0]]
    for k, v in s.dims.items():
        flags += ['--dim', f'{k}={v}']
    subprocess.run([os.path.join(build, 'pipec'), path] + flags, check=True)
    report = json.load(open(os.path.join(plan, 'report.json')))
    return plan, data, report['total_forward_flops_per_micro_batch']


def time_pipec(build, plan, data, threads, steps):
    r = subprocess.run([os.path.join(build, 'piperun'), plan, '--data', data, '--steps', str(steps + 2),
                        '--warmup', '2', '--threads-per-device', str(threads), '--json'],
                       check=True, capture_output=True, text=True)
    return json.loads(r.stdout)['median_step_seconds']


def time_torch(model, threads, batch, steps):
    env = dict(os.environ, OMP_WAIT_POLICY='PASSIVE', OMP_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), '--torch-step', model,
                        '--threads', str(threads), '--batch', str(batch), '--steps', str(steps)],
                       check=True, capture_output=True, text=True, env=env)
    return json.loads(r.stdout.strip().splitlines()[-1])['median_step_seconds']


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', default=os.path.join(HERE, '..', 'build'))
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--steps', type=int, default=6)
    ap.add_argument('--models', default='')
    ap.add_argument('--torch-step')
    ap.add_argument('--batch', type=int)
    a = ap.parse_args()
    if a.torch_step:
        torch_step(a.torch_step, a.threads, a.batch, a.steps)
        return 0
    from models import ZOO
    build = os.path.abspath(os.path.join(a.build, 'bin'))
    models = a.models.split(',') if a.models else list(ZOO)
    work = tempfile.mkdtemp(prefix='pipec-zoo-bench-')
    prepared = {}
    for m in models:
        prepared[m] = prepare(m, build, work, ZOO[m].bench_batch)
    times = {m: {'pipec': [], 'torch': [], 'ratio': []} for m in models}
    start = time.strftime('%H:%M', time.gmtime())
    for r in range(a.rounds):
        for m in models:
            plan, data, _ = prepared[m]
            b = ZOO[m].bench_batch
            order = ['pipec', 'torch'] if r % 2 == 0 else ['torch', 'pipec']
            got = {}
            for who in order:
                got[who] = (time_pipec(build, plan, data, a.threads, a.steps) if who == 'pipec'
                            else time_torch(m, a.threads, b, a.steps))
                times[m][who].append(got[who])
            times[m]['ratio'].append(got['torch'] / got['pipec'])
            print(f'round {r + 1}/{a.rounds} {m}: pipec {got["pipec"] * 1e3:.1f} ms, '
                  f'torch {got["torch"] * 1e3:.1f} ms', file=sys.stderr, flush=True)
    end = time.strftime('%H:%M', time.gmtime())
    print(f'{a.rounds} interleaved rounds, {a.threads} threads, {start}-{end} UTC; '
          f'median step over rounds (ms), training GFLOP/s as 3x the forward FLOPs\n')
    print('| model | batch | pipec ms | PyTorch ms | pipec / PyTorch speed (per-round range) | pipec GFLOP/s |')
    print('| --- | --- | --- | --- | --- | --- |')
    for m in models:
        t = times[m]
        p, q = statistics.median(t['pipec']), statistics.median(t['torch'])
        flops = 3 * prepared[m][2]
        print(f'| {m} | {ZOO[m].bench_batch} | {p * 1e3:.1f} | {q * 1e3:.1f} | '
              f'{statistics.median(t["ratio"]):.2f}x ({min(t["ratio"]):.2f}-{max(t["ratio"]):.2f}) | '
              f'{flops / p / 1e9:.0f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
