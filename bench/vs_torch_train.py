"""bench/vs_torch_train.py - pipec training against PyTorch eager on the same
models (bench/run-vs-torch.sh runs it; see there).

For the GPT-like and MLP models of bench/ort_models.py, one training step
(forward, MSE loss against a target, backward, Adam at lr 1e-3): pipec
(`pipec --train --loss mse --logits y`, one device, M=1, `piperun --steps N
--warmup W --threads-per-device T --json`) and PyTorch eager (the same
torch module, torch.optim.Adam, torch.set_num_threads(T) in a fresh
process), interleaved (pipec, torch; threads 1 then 2), ROUNDS rounds. Each
run reports its median step; the table has the median over rounds, pipec's
speed relative to PyTorch's at the same thread count (median over rounds
of the round's ratio), and for the MLP the GEMM-bound limit: the step's
GEMM FLOPs (forward, input and weight gradients, 2 B in out each, except
the first layer's input gradient, which neither pipec nor PyTorch computes)
at the peak FP32 rate `pipec --calibrate` measured (profile this-cpu) times
the threads.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TORCH_STEP = r'''
import sys, time, statistics, torch
sys.path.insert(0, sys.argv[1])
import ort_models
name, threads, steps, warmup = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
ctor, example, _, kind, bound, batch = ort_models.MODELS[name]
torch.manual_seed(0)
m = ctor().train()
x = example(batch)
with torch.no_grad():
    target = torch.randn_like(m(x))
opt = torch.optim.Adam(m.parameters(), lr=1e-3)
times = []
for i in range(warmup + steps):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(m(x), target)
    loss.backward()
    opt.step()
    if i >= warmup:
        times.append(time.perf_counter() - t0)
print(statistics.median(times))
'''


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f'{" ".join(args)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}')
    return r.stdout


def mlp_gemm_flops(batch, width=1024, layers=8):
    # Per layer: the forward GEMM, the weight gradient and the input
    # gradient; the input x needs no gradient.
    return (3 * layers - 1) * 2.0 * batch * width * width


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default='build')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--warmup', type=int, default=3)
    a = ap.parse_args()
    import ort_models
    bin_dir = os.path.join(a.build, 'bin')
    profile = os.path.expanduser('~/.config/pipec/profiles/this-cpu.json')
    peak = json.load(open(profile))['peak_flops']['fp32'] if os.path.exists(profile) else None
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, (_, _, _, _, _, batch) in ort_models.MODELS.items():
            path = ort_models.export(name, work)
            plan = os.path.join(work, name + '.plan')
            run([os.path.join(bin_dir, 'pipec'), path, '-b', str(batch), '--train', '--loss', 'mse', '--logits', 'y',
                 '--optimizer', 'adam', '--lr', '1e-3', '-q', '-o', plan])
            for t in (1, 2):
                p, o = [], []
                for _ in range(a.rounds):
                    j = json.loads(run([os.path.join(bin_dir, 'piperun'), plan, '--steps', str(a.steps + a.warmup),
                                        '--warmup', str(a.warmup), '--threads-per-device', str(t), '--json']))
                    p.append(j['median_step_seconds'])
                    o.append(float(run([sys.executable, '-c', TORCH_STEP, HERE, name, str(t), str(a.steps),
                                        str(a.warmup)])))
                speed = statistics.median(oo / pp for oo, pp in zip(o, p))
                limit = mlp_gemm_flops(batch) / (peak * t) if peak and name.startswith('mlp') else None
                rows.append((name, batch, t, statistics.median(o), statistics.median(p), speed, limit))
                print(f'# {name} b={batch} threads={t}: torch {statistics.median(o) * 1e3:.2f} ms, pipec '
                      f'{statistics.median(p) * 1e3:.2f} ms, pipec/torch speed {speed:.2f}', file=sys.stderr, flush=True)
    print('| model | batch | threads | PyTorch eager ms | pipec ms | pipec / PyTorch speed | GEMM-bound limit ms | pipec at % of the limit |')
    print('| --- | --- | --- | --- | --- | --- | --- | --- |')
    for name, batch, t, o, p, speed, limit in rows:
        lim = f'{limit * 1e3:.2f} | {100 * limit / p:.0f}%' if limit else '- | -'
        print(f'| {name} | {batch} | {t} | {o * 1e3:.2f} | {p * 1e3:.2f} | {speed:.2f} | {lim} |')
    print(f'\n{a.rounds} rounds, pipec and PyTorch interleaved; ms: median over rounds of each run\'s median of '
          f'{a.steps} steps after {a.warmup} warm-up ones; peak FP32 {peak / 1e9 if peak else 0:.0f} GFLOP/s per thread')


if __name__ == '__main__':
    main()
