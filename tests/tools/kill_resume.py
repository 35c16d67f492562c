#!/usr/bin/env python3
"""tests/tools/kill_resume.py - SIGKILL piperun at random moments, resume,
and compare with an uninterrupted run.

    kill_resume.py PLAN WORKDIR [--kills 10] [--steps 150] [--seed 15]

An uninterrupted run of STEPS steps writes WORKDIR/full. Then, KILLS times,
a fresh run checkpointing every step into WORKDIR/killed is killed (SIGKILL)
at a moment drawn from a seeded generator over such a run's length, and
resumed from whatever the checkpoint holds (possibly nothing, or a commit
the kill interrupted) to the end. Each time the final checkpoint must be
bitwise the uninterrupted one, with no temporary directory left beside it.
Prints one line per kill and 'bitwise equal after N kills'.
"""
import argparse
import filecmp
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time


def step(ckpt):
    """The step a checkpoint directory holds, or '-' where there is none yet."""
    try:
        with open(os.path.join(ckpt, 'manifest.json')) as f:
            return json.load(f)['step']
    except (OSError, ValueError, KeyError):
        return '-'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('plan')
    ap.add_argument('work')
    ap.add_argument('--kills', type=int, default=10)
    ap.add_argument('--steps', type=int, default=150)
    ap.add_argument('--seed', type=int, default=15)
    ap.add_argument('--piperun', default='piperun')
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    full, killed = os.path.join(a.work, 'full'), os.path.join(a.work, 'killed')
    subprocess.run([a.piperun, a.plan, '--steps', str(a.steps), '--checkpoint', full],
                   check=True, capture_output=True)
    # The kills land anywhere in a run that checkpoints every step.
    scratch = os.path.join(a.work, 'timing')
    t0 = time.time()
    subprocess.run([a.piperun, a.plan, '--steps', str(a.steps), '--checkpoint', scratch,
                    '--checkpoint-every', '1'], check=True, capture_output=True)
    length = time.time() - t0
    shutil.rmtree(scratch)
    rng = random.Random(a.seed)

    def run(extra):
        cmd = [a.piperun, a.plan, '--steps', str(a.steps), '--checkpoint', killed,
               '--checkpoint-every', '1']
        if os.path.exists(killed) or any(n.startswith('killed.old-') for n in os.listdir(a.work)):
            cmd += ['--resume', killed]
        return subprocess.Popen(cmd + extra, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    k, attempts = 0, 0
    while k < a.kills:
        attempts += 1
        if attempts > 3 * a.kills:
            print(f'only {k} of {attempts - 1} runs were still going when their kill came')
            return 1
        # A fresh run each time, killed at its own moment, then resumed.
        for n in os.listdir(a.work):
            if n == 'killed' or n.startswith('killed.'):
                shutil.rmtree(os.path.join(a.work, n))
        p = run([])
        delay = rng.uniform(0.05, 0.9 * length)
        time.sleep(delay)
        if p.poll() is not None:
            if p.returncode != 0:
                print(f'a run failed before its kill: {p.stderr.read().decode().strip()}')
                return 1
            # Faster than the timing run (the machine's load changes): it
            # ended before `delay`, so draw again from a shorter span.
            length = max(0.1, 0.9 * delay)
            continue
        k += 1
        p.send_signal(signal.SIGKILL)
        p.wait()
        at = step(killed)
        p = run([])
        _, err = p.communicate()
        # (A kill after the last step's checkpoint leaves nothing to run.)
        if p.returncode != 0 and b'leaves nothing to run' not in err:
            print(f'kill {k}: the resume failed:', err.decode().strip())
            return 1
        for f in ('tensors.bin', 'manifest.json'):
            if not filecmp.cmp(os.path.join(full, f), os.path.join(killed, f), shallow=False):
                print(f'kill {k}: {f} differs from the uninterrupted run')
                return 1
        left = [n for n in os.listdir(a.work) if n.startswith('killed.')]
        if left:
            print(f'kill {k}: left behind:', ', '.join(left))
            return 1
        print(f'kill {k}: SIGKILL after {delay:.2f} s of a {length:.2f} s run, checkpoint at '
              f'step {at}; resumed: bitwise equal')
    print(f'bitwise equal after {a.kills} kills')
    return 0


if __name__ == '__main__':
    sys.exit(main())
