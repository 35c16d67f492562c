"""bench/vs_torch_train.py - pipec training against PyTorch eager on the same
models (bench/run-vs-torch.sh runs it; see there).

For the GPT-like and MLP models of bench/ort_models.py, one training step
(forward, MSE loss against a target, backward, Adam at lr 1e-3): pipec
(`pipec --train --loss mse --logits y`, one device, M=1, `piperun --steps N
--warmup W --threads-per-device T --json`) and PyTorch eager (the same
torch module, torch.optim.Adam, torch.set_num_threads(T) in a fresh
process) in its two allocator configurations (TORCH_CONFIGS), interleaved
(pipec, torch, torch tuned; threads 1 then 2), ROUNDS rounds. Each run
reports its median step; the table has the median over rounds of each,
pipec's speed relative to the faster PyTorch configuration of each round
at the same thread count (median over rounds of the round's ratio), and
each model's GEMM-bound limit: the step's FLOPs as pipec's plan counts them
(report.json: forward and backward; the products' FLOPs and, a fraction of
a percent beside them, the elementwise ones) at the peak FP32 rate
`pipec --calibrate` measured (profile this-cpu: the GEMM's rate) times the
threads. The faster PyTorch step over the limit is the most any runtime
whose products run at that rate can gain over PyTorch on the model. For
the MLP the count equals the products' alone (forward, input and weight
gradients, 2 B in out each, less the first layer's input gradient, which
neither pipec nor PyTorch computes).
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

# PyTorch allocates through glibc malloc, whose mmap threshold moves with
# the process's history: a run either reuses freed blocks for every step's
# gradients and temporaries or maps and faults in fresh pages for them (the
# MLP's two-thread step then varied widely from run to run). A fixed
# threshold of 32 MB (the most glibc accepts) and no trimming keep them on
# the heap, and the step steady (bench/results/log.md). Both run each
# round; the faster is the round's PyTorch (its best configuration).
TORCH_CONFIGS = {
    'default': {},
    'tuned': {'MALLOC_MMAP_THRESHOLD_': '33554432', 'MALLOC_TRIM_THRESHOLD_': '1073741824'},
}

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


def run(args, env=None):
    r = subprocess.run(args, capture_output=True, text=True, env=None if env is None else {**os.environ, **env})
    if r.returncode != 0:
        raise RuntimeError(f'{" ".join(args)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}')
    return r.stdout


def step_flops(plan):
    """Forward and backward FLOPs of one step of a one-device plan (M=1)."""
    report = json.load(open(os.path.join(plan, 'report.json')))
    return sum(s['forward_flops_per_micro_batch'] + s['backward_flops_per_micro_batch']
               for s in report['stage_list'])


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
                p, o = [], {c: [] for c in TORCH_CONFIGS}
                for _ in range(a.rounds):
                    j = json.loads(run([os.path.join(bin_dir, 'piperun'), plan, '--steps', str(a.steps + a.warmup),
                                        '--warmup', str(a.warmup), '--threads-per-device', str(t), '--json']))
                    p.append(j['median_step_seconds'])
                    for c, env in TORCH_CONFIGS.items():
                        o[c].append(float(run([sys.executable, '-c', TORCH_STEP, HERE, name, str(t), str(a.steps),
                                               str(a.warmup)], env)))
                best = [min(ts) for ts in zip(*o.values())]
                speed = statistics.median(oo / pp for oo, pp in zip(best, p))
                limit = step_flops(plan) / (peak * t) if peak else None
                torch_ms = {c: statistics.median(v) for c, v in o.items()}
                rows.append((name, batch, t, torch_ms, statistics.median(best), statistics.median(p), speed, limit))
                print(f'# {name} b={batch} threads={t}: torch ' +
                      ', '.join(f'{c} {" ".join(f"{v * 1e3:.2f}" for v in o[c])}' for c in o) +
                      f' ms; pipec {" ".join(f"{v * 1e3:.2f}" for v in p)} ms; pipec/best torch speed {speed:.2f}',
                      file=sys.stderr, flush=True)
    print('| model | batch | threads | PyTorch eager ms (glibc malloc default) | PyTorch eager ms (malloc tuned) | '
          'pipec ms | pipec / best PyTorch speed | GEMM-bound limit ms | pipec at % of the limit | '
          'best PyTorch / limit (the most speed-up the limit allows) |')
    print('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |')
    for name, batch, t, o, best, p, speed, limit in rows:
        lim = f'{limit * 1e3:.2f} | {100 * limit / p:.0f}% | {best / limit:.2f}' if limit else '- | - | -'
        print(f'| {name} | {batch} | {t} | {o["default"] * 1e3:.2f} | {o["tuned"] * 1e3:.2f} | {p * 1e3:.2f} | '
              f'{speed:.2f} | {lim} |')
    print(f'\n{a.rounds} rounds, pipec and both PyTorch configurations interleaved; ms: median over rounds of each '
          f'run\'s median of {a.steps} steps after {a.warmup} warm-up ones; speed: median over rounds of the faster '
          f'PyTorch run\'s step over pipec\'s; peak FP32 {peak / 1e9 if peak else 0:.0f} GFLOP/s per thread')


if __name__ == '__main__':
    main()
