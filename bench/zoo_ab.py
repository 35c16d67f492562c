#!/usr/bin/python3
"""bench/zoo_ab.py - one training step of zoo models, two pipec builds A/B.

    zoo_ab.py --a DIR --b DIR [--threads 2] [--rounds 5] [--steps 10] [--models a,b] [--cpu-time]
               [--op OP]

Each model is exported and compiled as bench/zoo_bench.py does (TRAINING
export at opset 17, --train --optimizer sgd, its bench batch), once with each
build's pipec; then each round times `piperun --steps S --warmup 2` (its
median step) of both, alternating which goes first, so that a drift or a
neighbour on this machine hits both alike. Prints the median over rounds of
each and the median and range of the per-round ratios B / A.

--cpu-time: on a machine others load too, wall times swing by 2-3x; this
measures instead the CPU seconds (user + system, getrusage of the child) of
`piperun --steps S+2` minus those of `--steps 2` (start-up and the first
steps cancel), divided by S: CPU time per step. Meant for --threads 1, where
no thread waits for another.

--op OP: the time of one op instead of the step: `piperun --profile-ops`
each round, every node of type OP at its fastest over the rounds (another
process can only add to a node's time), summed.
"""
import argparse
import json
import os
import resource
import subprocess
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', 'tests', 'zoo'))
import zoo_bench  # noqa: E402
from models import ZOO  # noqa: E402


def cpu_seconds(build, plan, data, threads, steps):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([os.path.join(build, 'piperun'), plan, '--data', data, '--steps', str(steps),
                    '--threads-per-device', str(threads)], check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cpu_step(build, plan, data, threads, steps):
    return (cpu_seconds(build, plan, data, threads, steps + 2) -
            cpu_seconds(build, plan, data, threads, 2)) / steps


def op_nodes(build, plan, data, threads, steps, op, path):
    subprocess.run([os.path.join(build, 'piperun'), plan, '--data', data, '--steps', str(steps),
                    '--threads-per-device', str(threads), '--profile-ops', path],
                   check=True, capture_output=True)
    with open(path) as f:
        return {n['node']: n['seconds'] for n in json.load(f)['nodes'] if n['op'] == op}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--a', required=True)
    ap.add_argument('--b', required=True)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--steps', type=int, default=10)
    ap.add_argument('--op', help='time the nodes of this op only (see above)')
    ap.add_argument('--cpu-time', action='store_true', help='CPU seconds per step (see above)')
    ap.add_argument('--models', default='resnet18,resnet50,mobilenet_v2,densenet121,shufflenet_v2,alexnet,vgg11_bn')
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix='pipec-zoo-ab-')
    builds = {'A': os.path.abspath(a.a), 'B': os.path.abspath(a.b)}
    print('| model | batch | A ms | B ms | B / A (per-round range) |')
    print('|---|---|---|---|---|')
    for m in a.models.split(','):
        batch = ZOO[m].bench_batch
        plans = {}
        for k, b in builds.items():
            os.makedirs(os.path.join(work, k), exist_ok=True)
            plan, data, _ = zoo_bench.prepare(m, b, os.path.join(work, k), batch)
            plans[k] = (plan, data)
        t = {'A': [], 'B': []}
        if a.op:
            nodes = {'A': {}, 'B': {}}
            for r in range(a.rounds):
                for k in (['A', 'B'] if r % 2 == 0 else ['B', 'A']):
                    got = op_nodes(builds[k], *plans[k], a.threads, a.steps, a.op,
                                   os.path.join(work, f'{k}-ops.json'))
                    for n, sec in got.items():
                        nodes[k][n] = min(sec, nodes[k].get(n, sec))
            A, B = sum(nodes['A'].values()), sum(nodes['B'].values())
            print(f'| {m} | {batch} | {A * 1e3:.2f} | {B * 1e3:.2f} | {B / A:.3f} '
                  f'({len(nodes["A"])} {a.op} nodes, each at its fastest of {a.rounds} rounds) |', flush=True)
            continue
        for r in range(a.rounds):
            for k in (['A', 'B'] if r % 2 == 0 else ['B', 'A']):
                timer = cpu_step if a.cpu_time else zoo_bench.time_pipec
                t[k].append(timer(builds[k], *plans[k], a.threads, a.steps))
        ratios = [b / x for x, b in zip(t['A'], t['B'])]
        print(f'| {m} | {batch} | {statistics.median(t["A"]) * 1e3:.1f} | {statistics.median(t["B"]) * 1e3:.1f} | '
              f'{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |', flush=True)


if __name__ == '__main__':
    main()
