"""bench/vs_ort.py - pipec inference against ONNX Runtime on the same ONNX
files (bench/run-vs-ort.sh runs it; see there).

For every model and thread count the two run interleaved (pipec, ORT, then
again, ROUNDS rounds): pipec as `piperun PLAN --steps N --warmup W
--threads-per-device T --json` (one device, M=1, the whole batch), ORT from
bench/ort_time.js (intra-op threads T, inter-op 1, all graph optimizations).
Each run reports its median step; the table has the median over rounds of
each, and pipec's speed relative to ORT's (ORT's step over pipec's in the
same round, median over rounds; above 1: pipec is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, 'tests', 'zoo'))


def run(args, env=None):
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f'{" ".join(args)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}')
    return r.stdout


def input_specs(path, batch, dims):
    """Each graph input's name, shape (symbolic axes bound), type and, for
    integer inputs, the row count of the table a Gather reads with it."""
    m = onnx.load(path, load_external_data=False)
    inits = {i.name: i for i in m.graph.initializer}
    specs = []
    for inp in m.graph.input:
        if inp.name in inits:
            continue
        shape = []
        for i, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.dim_value > 0:
                shape.append(d.dim_value)
            elif d.dim_param in dims:
                shape.append(dims[d.dim_param])
            else:
                shape.append(batch if i == 0 else dims.get('seq', 1))
        elem = inp.type.tensor_type.elem_type
        spec = {'name': inp.name, 'dims': shape,
                'type': 'int64' if elem == onnx.TensorProto.INT64 else 'float32'}
        if spec['type'] == 'int64':
            bound = 2
            for n in m.graph.node:
                if n.op_type == 'Gather' and len(n.input) > 1 and n.input[1] == inp.name and n.input[0] in inits:
                    bound = inits[n.input[0]].dims[0]
            spec['bound'] = bound
        specs.append(spec)
    return specs


def models(build, work, which):
    """(name, onnx path, batch, extra pipec flags, dims) of every model."""
    import ort_models
    out = []
    for name, (_, _, _, _, _, batch) in ort_models.MODELS.items():
        out.append((name, ort_models.export(name, work), batch, [], {}))
    # A Keras-style CNN as tf2onnx writes it (tests/tools/tf_style_cnn.py):
    # NHWC input, 1x3 and 3x1 convolutions, LeakyRelu, Max, MaxPool.
    tf_cnn = os.path.join(work, 'tf-kws-cnn.onnx')
    run([sys.executable, os.path.join(ROOT, 'tests', 'tools', 'tf_style_cnn.py'), tf_cnn])
    for batch in (1, 16):
        out.append((f'tf-kws-cnn b{batch}', tf_cnn, batch, [], {}))
    samples = os.path.join(build, 'samples')
    for name, batch in (('mlp', 128), ('gpt', 8), ('cnn', 32)):
        out.append((f'sample {name}', os.path.join(samples, name + '.onnx'), batch, [], {}))
    try:
        import torch
        import warnings
        from models import ZOO
        for name in ('resnet18', 'mobilenet_v2', 'densenet121', 'shufflenet_v2', 'vit', 'encoder_post_norm'):
            s = ZOO[name]
            torch.manual_seed(0)
            m = s.build().eval()
            path = os.path.join(work, f'zoo-{name}.onnx')
            shape = lambda sh: (2,) + tuple(sh)
            args = tuple(torch.randn(shape(sh)) for _, sh, _ in s.inputs)
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                torch.onnx.export(m, args, path, opset_version=13, input_names=[n for n, _, _ in s.inputs],
                                  output_names=s.output_names, dynamic_axes=s.dynamic_axes())
            flags = []
            for k, v in s.dims.items():
                flags += ['--dim', f'{k}={v}']
            out.append((f'zoo {name}', path, s.bench_batch, flags, dict(s.dims)))
    except ImportError as e:
        print(f'# zoo models skipped: {e}', file=sys.stderr)
    return [m for m in out if not which or m[0] in which]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default='build')
    ap.add_argument('--ort', required=True, help='node_modules holding onnxruntime-node')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--threads', default='1,2')
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--models', default='', help='comma-separated names (default: all)')
    a = ap.parse_args()
    bin_dir = os.path.join(a.build, 'bin')
    env = dict(os.environ, NODE_PATH=a.ort)
    threads = [int(t) for t in a.threads.split(',')]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, path, batch, flags, dims in models(a.build, work, set(filter(None, a.models.split(',')))):
            plan = os.path.join(work, name.replace(' ', '-') + '.plan')
            run([os.path.join(bin_dir, 'pipec'), path, '-b', str(batch), '-q', '-o', plan] + flags)
            specs = os.path.join(work, name.replace(' ', '-') + '.inputs.json')
            with open(specs, 'w') as f:
                json.dump(input_specs(path, batch, dims), f)
            for t in threads:
                p, o = [], []
                for _ in range(a.rounds):
                    j = json.loads(run([os.path.join(bin_dir, 'piperun'), plan, '--steps', str(a.steps),
                                        '--warmup', '3', '--threads-per-device', str(t), '--json']))
                    p.append(j['median_step_seconds'])
                    j = json.loads(run(['node', os.path.join(HERE, 'ort_time.js'), path, str(t),
                                        str(a.steps), '3', specs], env=env))
                    o.append(j['median_seconds'])
                speed = statistics.median(oo / pp for oo, pp in zip(o, p))
                rows.append((name, batch, t, statistics.median(o), statistics.median(p), speed))
                print(f'# {name} b={batch} threads={t}: ORT {statistics.median(o) * 1e3:.3f} ms, '
                      f'pipec {statistics.median(p) * 1e3:.3f} ms, pipec/ORT speed {speed:.2f}',
                      file=sys.stderr, flush=True)
    print('| model | batch | threads | ONNX Runtime ms | pipec ms | pipec / ORT speed |')
    print('| --- | --- | --- | --- | --- | --- |')
    for name, batch, t, o, p, speed in rows:
        print(f'| {name} | {batch} | {t} | {o * 1e3:.3f} | {p * 1e3:.3f} | {speed:.2f} |')
    print(f'\n{a.rounds} rounds, pipec and ORT interleaved; ms: median over rounds of each run\'s median '
          f'of {a.steps} steps after 3 warm-up ones; speed: median over rounds of ORT\'s step over pipec\'s')


if __name__ == '__main__':
    main()
