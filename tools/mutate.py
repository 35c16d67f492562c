#!/usr/bin/env python3
"""tools/mutate.py - whole-file mutation testing of the command-line path.

    python3 tools/mutate.py [--onnx N] [--plans N] [--seed S] [--jobs J]
                            [--bin build/bin] [--work DIR] [--json FILE]

Mutates the sample models (samples/*.onnx) and plans compiled from them,
and runs each mutant through the tools as a user would:

  ONNX mutants   pipec MUTANT.onnx -b 2 -k 2 -m 2 [--train] -o P,
                 and when that compiles, piperun P --steps 2
  plan mutants   piperun MUTANT.plan --steps 2

Mutations are byte-level (flips, truncation, insertions, duplicated and
zeroed ranges) and structure-level: for models, through the onnx package
(huge, negative and zero dims, wrong element types, dangling inputs,
cycles, duplicate names, absurd attributes, initializers larger than their
data, other opsets and op types, any field of the protobuf); for plans,
through plan.proto (any field: operands, offsets, arena sizes, tensor ids,
removed or duplicated instructions), with MANIFEST rewritten so that the
mutation reaches the validator, as a deliberate attacker's would; and other
files of a plan changed, replaced by a FIFO, a link to /dev/urandom, a
directory, or removed.

Each run is classified: a clean error (exit status 1, one line on stderr
naming the error), ran (exit 0), crash (a signal or another exit status, or
a sanitizer report), hang (over --timeout seconds) and memory (peak RSS
over --mem-gb). Every mutant that is not a clean error or a run lands in
WORK/findings/ with the command. Progress goes to stderr; the summary is a
table on stdout (and JSON with --json). Exit status 1 if any mutant gave
something other than a clean error or a run.
"""
import argparse
import concurrent.futures as cf
import json
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

INT64_INTERESTING = [0, 1, -1, 2, 3, 7, 64, 255, 2**31 - 1, 2**31, 2**32 + 1, -2**31, 2**48,
                     2**62, -2**62, 2**63 - 1, -2**63, 4611686018427387904,
                     -4611686018427387904]
INT32_INTERESTING = [0, 1, -1, 2, 3, 7, 64, 255, 65535, 2**31 - 1, -2**31]
FLOAT_INTERESTING = [0.0, -0.0, 1.0, -1.0, 1e30, -1e30, 1e-30, float("nan"), float("inf"),
                     float("-inf")]


# ---------------------------------------------------------------- CRC-32C

def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    t = _CRC
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def rewrite_manifest(plan_dir, changed):
    """Updates MANIFEST's entries of the files named in `changed` (removing
    those that are gone) and its own checksum line."""
    path = os.path.join(plan_dir, "MANIFEST")
    with open(path) as f:
        lines = f.read().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        if line.startswith("manifest "):
            continue
        parts = line.split(" ")
        if len(parts) == 3 and parts[2] in changed:
            p = os.path.join(plan_dir, parts[2])
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            with open(p, "rb") as f:
                b = f.read()
            line = "%08x %d %s" % (crc32c(b), len(b), parts[2])
        out.append(line)
    text = "\n".join(out) + "\n"
    text += "manifest %08x\n" % crc32c(text.encode())
    os.chmod(path, 0o644)
    with open(path, "w") as f:
        f.write(text)


# ------------------------------------------------------- byte mutations

def mutate_bytes(b, rng):
    b = bytearray(b)
    kind = rng.choice(["flip", "flip", "truncate", "insert", "duplicate", "zero", "set"])
    if not b:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16))), "insert"
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        b = b[:rng.randrange(len(b))]
    elif kind == "insert":
        i = rng.randrange(len(b) + 1)
        b[i:i] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
    elif kind == "duplicate":
        i = rng.randrange(len(b))
        n = rng.randint(1, min(4096, len(b) - i))
        j = rng.randrange(len(b) + 1)
        b[j:j] = b[i:i + n]
    elif kind == "zero":
        i = rng.randrange(len(b))
        n = rng.randint(1, min(256, len(b) - i))
        b[i:i + n] = bytes(n)
    else:  # set: a byte to an extreme value
        i = rng.randrange(len(b))
        b[i] = rng.choice([0, 0x7F, 0x80, 0xFF])
    return bytes(b), "bytes:" + kind


# ------------------------------------------- protobuf field mutations

def _leaves(msg, out, depth=0):
    """Every (message, field, index) position of a message tree; index is
    None for singular fields."""
    if depth > 12:
        return
    for fd in msg.DESCRIPTOR.fields:
        if fd.label == fd.LABEL_REPEATED:
            vals = getattr(msg, fd.name)
            out.append((msg, fd, None))  # the list itself
            for i in range(len(vals)):
                if fd.type == fd.TYPE_MESSAGE:
                    _leaves(vals[i], out, depth + 1)
                else:
                    out.append((msg, fd, i))
        elif fd.type == fd.TYPE_MESSAGE:
            if msg.HasField(fd.name):
                _leaves(getattr(msg, fd.name), out, depth + 1)
        else:
            out.append((msg, fd, None))


def _scalar_value(fd, old, rng):
    T = fd
    if fd.type in (T.TYPE_INT64, T.TYPE_SINT64, T.TYPE_SFIXED64):
        return rng.choice(INT64_INTERESTING + [old + 1, old - 1, old * 2])
    if fd.type in (T.TYPE_UINT64, T.TYPE_FIXED64):
        return rng.choice([0, 1, 2**32, 2**48, 2**63, 2**64 - 1, old + 1, max(old - 1, 0),
                           old * 2 % 2**64])
    if fd.type in (T.TYPE_INT32, T.TYPE_SINT32, T.TYPE_SFIXED32):
        v = rng.choice(INT32_INTERESTING + [old + 1, old - 1, old * 2])
        return max(min(v, 2**31 - 1), -2**31)
    if fd.type in (T.TYPE_UINT32, T.TYPE_FIXED32):
        return rng.choice([0, 1, 2, 64, 2**16, 2**31, 2**32 - 1, old + 1, max(old - 1, 0)])
    if fd.type == T.TYPE_ENUM:
        return rng.choice([v.number for v in fd.enum_type.values] + [-1, 99])
    if fd.type in (T.TYPE_FLOAT, T.TYPE_DOUBLE):
        return rng.choice(FLOAT_INTERESTING)
    if fd.type == T.TYPE_BOOL:
        return not old
    if fd.type == T.TYPE_BYTES:
        return rng.choice([b"", b"\xff\xfe\xc3(", old + b"x", old[:len(old) // 2],
                           bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 32)))])
    if fd.type == T.TYPE_STRING:
        return rng.choice(["", "x", old + "_", old[:len(old) // 2], "../../../etc/passwd",
                           "/dev/zero", "/dev/urandom"])
    return old


def mutate_fields(msg, rng):
    """One random mutation of any field of a protobuf message tree."""
    leaves = []
    _leaves(msg, leaves)
    if not leaves:
        return "none"
    owner, fd, idx = rng.choice(leaves)
    name = fd.full_name
    if fd.label == fd.LABEL_REPEATED and idx is None:
        vals = getattr(owner, fd.name)
        n = len(vals)
        op = rng.choice(["remove", "duplicate", "swap", "clear"] if n else ["add"])
        try:
            if op == "remove":
                del vals[rng.randrange(n)]
            elif op == "duplicate":
                i = rng.randrange(n)
                if fd.type == fd.TYPE_MESSAGE:
                    vals.add().CopyFrom(vals[i])
                else:
                    vals.append(vals[i])
            elif op == "swap" and n > 1:
                i, j = rng.randrange(n), rng.randrange(n)
                if fd.type == fd.TYPE_MESSAGE:
                    a, b = type(vals[i])(), type(vals[j])()
                    a.CopyFrom(vals[i])
                    b.CopyFrom(vals[j])
                    vals[i].CopyFrom(b)
                    vals[j].CopyFrom(a)
                else:
                    vals[i], vals[j] = vals[j], vals[i]
            elif op == "clear":
                del vals[:]
            elif op == "add":
                if fd.type == fd.TYPE_MESSAGE:
                    vals.add()
                else:
                    vals.append(_scalar_value(fd, fd.default_value if fd.type != fd.TYPE_BYTES
                                              else b"", rng))
        except (TypeError, ValueError):
            return "field:" + name + ":" + op + ":refused"
        return "field:" + name + ":" + op
    try:
        if idx is None:
            old = getattr(owner, fd.name)
            setattr(owner, fd.name, _scalar_value(fd, old, rng))
        else:
            vals = getattr(owner, fd.name)
            vals[idx] = _scalar_value(fd, vals[idx], rng)
    except (TypeError, ValueError):
        return "field:" + name + ":refused"
    return "field:" + name


# --------------------------------------------------- ONNX model mutations

def mutate_model(b, rng):
    import onnx
    from onnx import TensorProto
    m = onnx.ModelProto()
    m.ParseFromString(b)
    g = m.graph
    kinds = ["dim", "dim", "elem_type", "init_dims", "init_data", "external", "dangling",
             "cycle", "duplicate", "attr", "attr", "op_type", "opset", "io", "fields",
             "fields", "fields"]
    kind = rng.choice(kinds)
    values = list(g.input) + list(g.output) + list(g.value_info)
    names = [o for n in g.node for o in n.output] + [i.name for i in g.initializer] + \
            [i.name for i in g.input]
    if kind == "dim":
        cands = [d for v in values for d in v.type.tensor_type.shape.dim]
        if cands:
            d = rng.choice(cands)
            if rng.random() < 0.8:
                d.dim_value = rng.choice(INT64_INTERESTING)
            else:
                d.dim_param = rng.choice(["N", "", "\xff"])
    elif kind == "elem_type":
        if g.initializer and rng.random() < 0.5:
            rng.choice(g.initializer).data_type = rng.randint(0, 25)
        elif values:
            rng.choice(values).type.tensor_type.elem_type = rng.randint(0, 25)
    elif kind == "init_dims" and g.initializer:
        t = rng.choice(g.initializer)
        if t.dims and rng.random() < 0.7:
            t.dims[rng.randrange(len(t.dims))] = rng.choice(INT64_INTERESTING)
        else:
            t.dims.append(rng.choice([0, 1, 2, 2**40]))
    elif kind == "init_data" and g.initializer:
        t = rng.choice(g.initializer)
        if t.raw_data:
            t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data) + 1)]
        else:
            t.raw_data = b"\x00" * rng.randint(0, 7)
    elif kind == "external" and g.initializer:
        t = rng.choice(g.initializer)
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in [("location", rng.choice(["../../../etc/passwd", "/dev/zero",
                                               "/dev/urandom", "missing.bin", "", "."])),
                     ("offset", rng.choice(["0", "-1", "99999999999", "x"])),
                     ("length", rng.choice(["", "4", "-8", "18446744073709551615"]))]:
            if rng.random() < 0.9:
                e = t.external_data.add()
                e.key, e.value = k, v
    elif kind == "dangling" and g.node:
        n = rng.choice(g.node)
        if n.input:
            n.input[rng.randrange(len(n.input))] = rng.choice(["nonexistent", "", "\xff"])
    elif kind == "cycle" and len(g.node) > 1:
        i = rng.randrange(len(g.node) - 1)
        j = rng.randrange(i + 1, len(g.node))
        if g.node[i].input and g.node[j].output:
            g.node[i].input[rng.randrange(len(g.node[i].input))] = g.node[j].output[0]
    elif kind == "duplicate" and g.node and names:
        n = rng.choice(g.node)
        if n.output:
            n.output[rng.randrange(len(n.output))] = rng.choice(names)
    elif kind == "attr":
        nodes = [n for n in g.node if n.attribute]
        if nodes:
            a = rng.choice(rng.choice(nodes).attribute)
            op = rng.random()
            if op < 0.15:
                a.type = rng.randint(0, 14)
            elif a.type == onnx.AttributeProto.INT:
                a.i = rng.choice(INT64_INTERESTING + [99, -99])
            elif a.type == onnx.AttributeProto.INTS:
                del a.ints[:]
                a.ints.extend(rng.choice([[], [0], [-1], [99], [0] * len(a.ints) or [0],
                                          [2**62] * 2, list(range(rng.randint(0, 9)))]))
            elif a.type == onnx.AttributeProto.FLOAT:
                a.f = rng.choice(FLOAT_INTERESTING)
            elif a.type == onnx.AttributeProto.STRING:
                a.s = rng.choice([b"", b"bogus", b"\xff\xfe", a.s + b"x"])
            else:
                mutate_fields(a, rng)
        elif g.node:
            a = rng.choice(g.node).attribute.add()
            a.name = rng.choice(["axis", "group", "kernel_shape", "perm", "alpha"])
            a.type = onnx.AttributeProto.INT
            a.i = rng.choice([0, -1, 99, 2**62])
    elif kind == "op_type" and g.node:
        n = rng.choice(g.node)
        r = rng.random()
        if r < 0.5:
            n.op_type = rng.choice([x.op_type for x in g.node] + ["Bogus", "Loop", "If"])
        elif r < 0.7:
            n.domain = rng.choice(["com.microsoft", "ai.onnx.ml", "bogus"])
        elif r < 0.85:
            del g.node[rng.randrange(len(g.node))]
        else:
            g.node.add().CopyFrom(n)
    elif kind == "opset":
        if m.opset_import and rng.random() < 0.85:
            rng.choice(m.opset_import).version = rng.choice([-1, 0, 1, 6, 11, 13, 17, 18, 19,
                                                             21, 99, 2**62])
        else:
            del m.opset_import[:]
    elif kind == "io":
        r = rng.random()
        if r < 0.3 and g.input:
            del g.input[rng.randrange(len(g.input))]
        elif r < 0.6 and g.output:
            del g.output[rng.randrange(len(g.output))]
        elif r < 0.8 and g.output:
            g.output[rng.randrange(len(g.output))].name = rng.choice(["nonexistent"] + names)
        elif g.input:
            g.input.add().CopyFrom(rng.choice(g.input))
    else:
        kind = mutate_fields(m, rng)
    return m.SerializeToString(), "model:" + kind


# ------------------------------------------------------------ running

class Runner:
    def __init__(self, args, sanitized):
        self.args = args
        self.env = dict(os.environ, OMP_NUM_THREADS="1")
        # ASan reserves terabytes of address space for its shadow: no limit
        # there (its allocator caps what a run may take instead).
        self.limit_as = not sanitized
        # Allocations the machine cannot give fail as they would without
        # ASan (bad_alloc, then pipec's one-line error), not as a report.
        opts = self.env.get("ASAN_OPTIONS", "")
        if sanitized and "allocator_may_return_null" not in opts:
            self.env["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "allocator_may_return_null=1"

    def run(self, cmd):
        """Runs `cmd`; returns (outcome, status, stderr head, peak RSS MiB)."""
        mem_limit = int(self.args.as_gb * 2**30)

        def limits():
            os.setsid()
            if self.limit_as:
                resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        errf = open(os.path.join(self.args.work, "stderr.%d" % threading.get_ident()), "w+b")
        start = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errf, stdin=subprocess.DEVNULL,
                             env=self.env, preexec_fn=limits)
        hung = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > self.args.timeout:
                hung = True
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.005)
        p.returncode = 0  # reaped by wait4
        errf.seek(0)
        err = errf.read(65536).decode("utf-8", "replace")
        errf.close()
        rss_mib = ru.ru_maxrss / 1024.0
        if os.WIFSIGNALED(status):
            code = -os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status)
        # Notes (piperun's about shared cores) are not part of an error.
        lines = [l for l in err.splitlines() if l.strip() and ": note: " not in l]
        sanitizer = any(s in err for s in ("Sanitizer", "runtime error:", "terminate called",
                                           "Assertion", "munmap_chunk", "double free"))
        if hung:
            outcome = "hang"
        elif rss_mib > self.args.mem_gb * 1024:
            outcome = "memory"
        elif code == 0 and not sanitizer:
            outcome = "ran"
        elif code == 1 and not sanitizer and len(lines) == 1 and ": error: " in lines[0]:
            outcome = "error"
        elif code == 1 and not sanitizer and lines:
            outcome = "untidy"  # exit 1, but not one line
        else:
            outcome = "crash"
        return outcome, code, "\n".join(lines[:4]), rss_mib


def worst(a, b):
    order = ["ran", "error", "untidy", "memory", "hang", "crash"]
    return a if order.index(a) >= order.index(b) else b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onnx", type=int, default=200, help="ONNX model mutants")
    ap.add_argument("--plans", type=int, default=200, help="plan mutants")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--samples", default=os.path.join(ROOT, "build", "samples"),
                    help="directory of the sample models (NAME.onnx, NAME-train.onnx)")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "mutate"))
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds before a run is a hang")
    ap.add_argument("--mem-gb", type=float, default=4.0, help="peak RSS that counts as a blow-up")
    ap.add_argument("--as-gb", type=float, default=8.0,
                    help="address-space limit of each run (a safety net for the machine)")
    ap.add_argument("--json", help="write the summary as JSON here")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args()

    pipec = os.path.join(args.bin, "pipec")

    def compile_cmd(model, name, out):
        return [pipec, model, "-b", "2", "-k", "2", "-m", "2", "-o", out, "--quiet"] + \
            (["--train"] if name.endswith("-train") else [])

    piperun = os.path.join(args.bin, "piperun")
    for tool in (pipec, piperun):
        if not os.access(tool, os.X_OK):
            sys.exit("mutate.py: error: %s is not built (cmake --build build)" % tool)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(os.path.join(args.work, "findings"))
    with open(pipec, "rb") as f:
        sanitized = b"__asan_init" in f.read()
    runner = Runner(args, sanitized)

    # The plan schema for structure-level plan mutations.
    subprocess.run(["protoc", "--python_out=" + args.work, "-I",
                    os.path.join(ROOT, "runtime", "plan"),
                    os.path.join(ROOT, "runtime", "plan", "plan.proto")], check=True)
    sys.path.insert(0, args.work)
    import plan_pb2

    # The samples: NAME.onnx for inference, NAME-train.onnx (with a loss)
    # for training.
    models = {}
    for name in ("mlp", "cnn", "gpt", "mlp-train", "cnn-train", "gpt-train"):
        path = os.path.join(args.samples, name + ".onnx")
        if not os.path.isfile(path):
            sys.exit("mutate.py: error: %s is missing (it is built with pipec)" % path)
        with open(path, "rb") as f:
            models[name] = f.read()
    # Base plans: each sample, two stages.
    bases = []
    for name in models:
        d = os.path.join(args.work, "base-%s.plan" % name)
        subprocess.run(compile_cmd(os.path.join(args.samples, name + ".onnx"), name, d),
                       check=True, env=runner.env)
        bases.append(d)

    rng = random.Random(args.seed)
    tasks = []
    for i in range(args.onnx):
        tasks.append(("onnx", i, rng.getrandbits(64)))
    for i in range(args.plans):
        tasks.append(("plan", i, rng.getrandbits(64)))

    def onnx_task(i, seed):
        r = random.Random(seed)
        name = r.choice(sorted(models))
        b = models[name]
        if r.random() < 0.4:
            mb, how = mutate_bytes(b, r)
        else:
            try:
                mb, how = mutate_model(b, r)
            except Exception as e:  # the onnx package refused the mutation
                mb, how = mutate_bytes(b, r)
                how += " (after %s)" % type(e).__name__
        d = os.path.join(args.work, "o%d" % i)
        os.makedirs(d)
        path = os.path.join(d, name + ".onnx")
        with open(path, "wb") as f:
            f.write(mb)
        plan = os.path.join(d, "p.plan")
        cmd = compile_cmd(path, name, plan)
        res = [("pipec", cmd) + runner.run(cmd)]
        if res[0][2] == "ran":
            cmd2 = [piperun, plan, "--steps", "2"]
            res.append(("piperun", cmd2) + runner.run(cmd2))
        return finish("onnx", i, name, how, d, res)

    def plan_task(i, seed):
        r = random.Random(seed)
        base = r.choice(bases)
        d = os.path.join(args.work, "p%d" % i)
        plan = os.path.join(d, "m.plan")
        shutil.copytree(base, plan)
        files = sorted(os.listdir(plan))
        x = r.random()
        if x < 0.55:  # plan.pb, field by field, checksums rewritten
            p = plan_pb2.Plan()
            with open(os.path.join(plan, "plan.pb"), "rb") as f:
                p.ParseFromString(f.read())
            how = "plan:" + mutate_fields(p, r)
            with open(os.path.join(plan, "plan.pb"), "wb") as f:
                f.write(p.SerializeToString())
            rewrite_manifest(plan, {"plan.pb"})
        elif x < 0.85:  # bytes of one file, checksums rewritten or not
            name = r.choice(files)
            path = os.path.join(plan, name)
            with open(path, "rb") as f:
                b, how = mutate_bytes(f.read(), r)
            with open(path, "wb") as f:
                f.write(b)
            if name != "MANIFEST" and r.random() < 0.7:
                rewrite_manifest(plan, {name})
                how += " (manifest rewritten)"
            how = name + ":" + how
        else:  # a file replaced by something that is not one
            name = r.choice(files)
            path = os.path.join(plan, name)
            os.remove(path)
            what = r.choice(["fifo", "urandom", "zero", "dir", "missing", "empty"])
            if what == "fifo":
                os.mkfifo(path)
            elif what == "urandom":
                os.symlink("/dev/urandom", path)
            elif what == "zero":
                os.symlink("/dev/zero", path)
            elif what == "dir":
                os.mkdir(path)
            elif what == "empty":
                open(path, "wb").close()
            how = name + ":" + what
        cmd = [piperun, plan, "--steps", "2"]
        res = [("piperun", cmd) + runner.run(cmd)]
        return finish("plan", i, os.path.basename(base), how, d, res)

    def finish(kind, i, base, how, d, res):
        outcome = "ran"
        for r in res:
            outcome = worst(outcome, r[2])
        rec = {"kind": kind, "index": i, "base": base, "mutation": how, "outcome": outcome,
               "runs": [{"tool": t, "cmd": " ".join(c), "outcome": o, "status": s,
                         "stderr": e, "peak_rss_mib": round(m, 1)}
                        for (t, c, o, s, e, m) in res]}
        if outcome in ("ran", "error"):
            shutil.rmtree(d, ignore_errors=True)
        else:
            dest = os.path.join(args.work, "findings", os.path.basename(d))
            shutil.move(d, dest)
            with open(os.path.join(dest, "finding.json"), "w") as f:
                json.dump(rec, f, indent=1)
        return rec

    results = []
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        futs = [ex.submit(onnx_task if k == "onnx" else plan_task, i, s) for k, i, s in tasks]
        for n, fut in enumerate(cf.as_completed(futs), 1):
            results.append(fut.result())
            if not args.quiet and (n % 50 == 0 or n == len(futs)):
                el = time.monotonic() - t0
                bad = sum(r["outcome"] not in ("ran", "error") for r in results)
                print("mutate: %d/%d mutants, %.1f/s, %d findings, ETA %.0f s" %
                      (n, len(futs), n / el, bad, (len(futs) - n) * el / n),
                      file=sys.stderr, flush=True)

    cols = ["error", "ran", "untidy", "crash", "hang", "memory"]
    summary = {}
    for kind in ("onnx", "plan"):
        rs = [r for r in results if r["kind"] == kind]
        row = {c: sum(r["outcome"] == c for r in rs) for c in cols}
        row["mutants"] = len(rs)
        row["compiled"] = sum(len(r["runs"]) > 1 for r in rs)
        row["peak_rss_mib"] = round(max([x["peak_rss_mib"] for r in rs for x in r["runs"]],
                                        default=0), 1)
        summary[kind] = row
    print("| input | mutants | clean error | ran | untidy error | crash | hang (>%gs) |"
          " memory (>%g GB) | peak RSS |" % (args.timeout, args.mem_gb))
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    label = {"onnx": "ONNX models through pipec (and piperun)", "plan": "plans through piperun"}
    for kind, row in summary.items():
        print("| %s | %d | %d | %d | %d | %d | %d | %d | %.0f MiB |" %
              (label[kind], row["mutants"], row["error"], row["ran"], row["untidy"],
               row["crash"], row["hang"], row["memory"], row["peak_rss_mib"]))
    findings = [r for r in results if r["outcome"] not in ("ran", "error")]
    for r in findings[:20]:
        last = r["runs"][-1]
        print("finding %s %d (%s, %s): %s, status %d: %s" %
              (r["kind"], r["index"], r["base"], r["mutation"], r["outcome"], last["status"],
               last["stderr"].splitlines()[0] if last["stderr"] else "(no message)"))
    if findings:
        print("%d findings in %s" % (len(findings), os.path.join(args.work, "findings")))
    if args.json:
        # Outcomes by kind of mutation ("model:dim", "plan:pipec.plan.Allocation",
        # "weights.bin:bytes", ...).
        by = {}
        for r in results:
            parts = r["mutation"].split(" ")[0].split(":")
            if parts[0] == "plan" and len(parts) > 2:
                fam = "plan:" + parts[2].rsplit(".", 1)[0]
            else:
                fam = ":".join(parts[:2])
            fam = r["kind"] + " " + fam
            by.setdefault(fam, {}).setdefault(r["outcome"], 0)
            by[fam][r["outcome"]] += 1
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "summary": summary, "by_mutation": by,
                       "findings": findings}, f, indent=1, sort_keys=True)
    serious = sum(r["outcome"] in ("untidy", "crash", "hang", "memory") for r in results)
    return 1 if serious else 0


if __name__ == "__main__":
    sys.exit(main())
