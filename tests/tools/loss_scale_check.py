#!/usr/bin/env python3
"""Checks a run's --metrics lines against the dynamic loss-scaling rule
(runtime/train/LossScale.h, docs/precision.md).

Usage: loss_scale_check.py METRICS.jsonl INITIAL WINDOW [--fp32 F32.jsonl]

Each line holds the scale the step ran with and whether it was skipped.
The rule: the first step runs at INITIAL; a skipped step halves the scale;
WINDOW finite steps in a row (since the scale last changed) double it;
otherwise it stays. Also checked: the run recovered (its last step was not
skipped and some steps were not), skipped steps changed no weight (a
skipped step's loss equals that of the last step before it on the same
batch, where the batches repeat), and the losses of the steps that ran
decrease. With --fp32, a run of the same plan in fp32 without scaling:
the fp16 losses of the steps before the first skip stay within 1e-2
(relative) of its losses.
Prints one PASS line, or FAIL lines and exits 1.
"""
import json
import sys


def main():
    args = sys.argv[1:]
    fp32 = None
    if '--fp32' in args:
        i = args.index('--fp32')
        fp32 = [json.loads(x)['loss'] for x in open(args[i + 1])]
        del args[i:i + 2]
    path, initial, window = args[0], float(args[1]), int(args[2])
    steps = [json.loads(x) for x in open(path)]
    fails = []
    scale, good = initial, 0
    for s in steps:
        if s['loss_scale'] != scale:
            fails.append('step %d ran at scale %g, the rule says %g' % (s['step'], s['loss_scale'], scale))
            scale = s['loss_scale']
        if s['skipped']:
            scale, good = scale / 2, 0
        else:
            good += 1
            if good == window:
                scale, good = scale * 2, 0
    skipped = [s['step'] for s in steps if s['skipped']]
    ran = [s for s in steps if not s['skipped']]
    if not ran or steps[-1]['skipped']:
        fails.append('the run did not recover: skipped steps %s' % skipped)
    # The data repeats with some period p (the feed's batches); a skipped
    # step leaves the weights as they were, so the next step on the same
    # batch has the same loss while every step in between was skipped.
    losses = [s['loss'] for s in steps]

    def held(i, p):  # steps i-p .. i-1 all skipped: step i sees step i-p's weights
        return i >= p and all(steps[j]['skipped'] for j in range(i - p, i))

    if skipped and not any(any(held(i, p) for i in range(len(steps))) and
                           all(losses[i] == losses[i - p] for i in range(len(steps)) if held(i, p))
                           for p in range(1, len(steps))):
        fails.append('no batch period over which skipped steps keep the loss')
    if ran and not ran[-1]['loss'] < ran[0]['loss']:
        fails.append('the loss did not decrease: %g -> %g' % (ran[0]['loss'], ran[-1]['loss']))
    near = 'none compared'
    if fp32 is not None:
        first = skipped[0] - 1 if skipped else len(steps)
        d = max((abs(a - b) / abs(b) for a, b in zip(losses[:first], fp32[:first])), default=0.0)
        near = '%d steps within %.1e of fp32' % (min(first, len(fp32)), d)
        if d > 1e-2:
            fails.append('fp16 losses %.3g from fp32' % d)
    if fails:
        for f in fails:
            print('FAIL', f)
        sys.exit(1)
    print('PASS loss scaling: %d steps, %d skipped (%s), scale %g -> %g, loss %.4f -> %.4f; %s' % (
        len(steps), len(skipped), ','.join(map(str, skipped)) or 'none', initial, scale, ran[0]['loss'],
        ran[-1]['loss'], near))


if __name__ == '__main__':
    main()
