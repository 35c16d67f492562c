#!/usr/bin/env python3
"""tests/tools/mpi_check.py - plans on MPI ranks against the same plans on
threads, and ranks that fail.

    mpi_check.py same PLAN RANKS WORK [--steps N] [piperun options] [--ranks-only options]
        Runs PLAN on threads (one piperun) and on RANKS ranks (mpirun), and
        compares: a training plan's trained model (--save) byte for byte and
        its per-step loss, gradient norm and learning rate (--metrics) bit
        for bit; an inference plan's outputs (--outputs) byte for byte.
        Prints 'PASS same PLAN on RANKS ranks: ...' or fails.

    mpi_check.py close A.onnx B.onnx TOL
        Every initializer of two trained models agrees within TOL relative
        to the tensor's largest magnitude in B (data parallelism against
        one pipeline with the same global batch). Prints 'PASS close: ...'.

    mpi_check.py fail KIND PLAN WORK
        A job in which one rank fails, KIND one of: error (rank 1 fails at
        its 5th instruction, --inject-failure), kill (rank 1 is SIGKILLed
        after a few steps), missing (rank 1 is given a plan that does not
        exist), other-plan (rank 1 is given another plan: WORK/other.plan),
        ranks (one rank more than the plan has devices). The job must exit
        non-zero within 10 s of the failure, and its output must name the
        failed rank and its error. Prints 'PASS fail KIND: ...'.

mpirun runs as root here (CI): OMPI_ALLOW_RUN_AS_ROOT and --oversubscribe
(more ranks than cores). The single-copy mechanism of Open MPI's shared
memory transport (CMA) is off: containers forbid it.
"""
import json
import os
import signal
import subprocess
import sys
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]
# Under the sanitizers, MPI's own allocations are reported as leaks from
# plugins LeakSanitizer cannot name: the ranks run without the leak check
# (lit.cfg.py does the same for %mpirun).
if "detect_leaks=1" in ENV.get("ASAN_OPTIONS", ""):
    ENV["ASAN_OPTIONS"] = ENV["ASAN_OPTIONS"].replace("detect_leaks=1", "detect_leaks=0")


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def run(cmd, timeout=300):
    p = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, text=True, errors="replace")
    if p.returncode != 0:
        fail("%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:]))
    return p.stdout


def metrics(path):
    rows = []
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            # Bit for bit: the printed doubles (shortest round trip).
            rows.append((m["step"], repr(m["loss"]), repr(m["grad_norm"]), repr(m["lr"])))
    return rows


def state(out):
    """Where piperun's run kept the training state (its closing lines)."""
    return "device" if "training state: in the devices' memory" in out else "host"


def is_training(plan):
    out = run(["piperun", plan, "--show-program"])
    return " OPT" in out


def same(plan, ranks, work, rest):
    steps = "3"
    if rest[:1] == ["--steps"]:
        steps, rest = rest[1], rest[2:]
    # Options after --ranks-only are the ranks' alone (--gpu-transport nccl).
    only = []
    if "--ranks-only" in rest:
        at = rest.index("--ranks-only")
        rest, only = rest[:at], rest[at + 1:]
    os.makedirs(work, exist_ok=True)
    if is_training(plan):
        args = lambda tag: ["piperun", plan, "--steps", steps, "--save", os.path.join(work, tag + ".onnx"),
                            "--metrics", os.path.join(work, tag + ".jsonl")] + rest
        state_t = state(run(args("threads")))
        state_r = state(run(MPIRUN + ["-np", str(ranks)] + args("ranks") + only))
        a, b = metrics(os.path.join(work, "threads.jsonl")), metrics(os.path.join(work, "ranks.jsonl"))
        if a != b:
            fail("losses differ:\n threads %s\n ranks   %s" % (a, b))
        with open(os.path.join(work, "threads.onnx"), "rb") as f:
            ta = f.read()
        with open(os.path.join(work, "ranks.onnx"), "rb") as f:
            tb = f.read()
        if ta != tb:
            fail("trained models differ (%d and %d bytes)" % (len(ta), len(tb)))
        print("PASS same %s on %d ranks: %s steps, losses %s, trained model bitwise equal (%d bytes);"
              " training state: threads %s, ranks %s"
              % (os.path.basename(plan), ranks, steps, ", ".join(r[1] for r in a), len(ta), state_t, state_r))
        return
    args = lambda tag: ["piperun", plan, "--steps", steps, "--outputs", os.path.join(work, tag)] + rest
    run(args("threads"))
    run(MPIRUN + ["-np", str(ranks)] + args("ranks") + only)
    names = sorted(os.listdir(os.path.join(work, "threads")))
    if not names or names != sorted(os.listdir(os.path.join(work, "ranks"))):
        fail("outputs differ in names")
    for n in names:
        with open(os.path.join(work, "threads", n), "rb") as f:
            x = f.read()
        with open(os.path.join(work, "ranks", n), "rb") as f:
            y = f.read()
        if x != y:
            fail("output %s differs" % n)
    print("PASS same %s on %d ranks: outputs %s bitwise equal" % (os.path.basename(plan), ranks, ", ".join(names)))


def devices(plan):
    """The ranks the plan runs on: its devices times its replicas (the
    report pipec wrote beside the plan says how many)."""
    out = run(["piperun", plan, "--show-program"])
    k = sum(1 for l in out.splitlines() if l.startswith("device "))
    try:
        with open(os.path.join(plan, "report.json")) as f:
            return k * max(1, int(json.load(f).get("data_parallel", 1)))
    except (OSError, ValueError):
        return k


def fail_case(kind, plan, work):
    k = devices(plan)
    os.makedirs(work, exist_ok=True)
    base = ["piperun", plan, "--steps", "100000" if kind == "kill" else "20"]
    if kind == "error":
        cmd = MPIRUN + ["-np", str(k)] + base + ["--inject-failure", "1:5"]
        expect = ["rank 1: device 1: injected failure at instruction 5",
                  "rank 0: stopped because rank 1 failed: device 1: injected failure"]
    elif kind == "kill":
        cmd = MPIRUN + ["-np", str(k)] + base
        expect = ["rank 1", "signal 9"]
    elif kind == "missing":
        cmd = MPIRUN + ["-np", "1"] + base + [":", "-np", str(k - 1), "piperun",
                                             os.path.join(work, "nowhere.plan"), "--steps", "20"]
        expect = ["rank 1: '%s' is not a plan directory" % os.path.join(work, "nowhere.plan"),
                  "rank 0: stopped because rank 1 failed"]
    elif kind == "other-plan":
        cmd = MPIRUN + ["-np", "1"] + base + [":", "-np", str(k - 1), "piperun",
                                             os.path.join(work, "other.plan"), "--steps", "20"]
        expect = ["rank 1 loaded another plan than rank 0"]
    elif kind == "ranks":
        cmd = MPIRUN + ["-np", str(k + 1)] + base
        expect = ["has %d device(s) and runs on as many MPI ranks (mpirun -np %d); this job has %d"
                  % (k, k, k + 1)]
    else:
        fail("unknown failure kind " + kind)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", start_new_session=True)
    failed_at = t0
    if kind == "kill":
        # Once the run is under way (its first progress lines), kill rank 1.
        time.sleep(2.0)
        pids = subprocess.run(["pgrep", "-f", "piperun " + plan], stdout=subprocess.PIPE,
                              text=True).stdout.split()
        procs = []
        for pid in pids:
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                procs.append((env.get(b"OMPI_COMM_WORLD_RANK"), int(pid)))
            except OSError:
                pass
        victim = [pid for rank, pid in procs if rank == b"1"]
        if not victim:
            p.kill()
            fail("rank 1 of the job not found")
        failed_at = time.monotonic()
        os.kill(victim[0], signal.SIGKILL)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        fail("%s: the job still runs 60 s after the failure (a hang)" % kind)
    took = time.monotonic() - failed_at
    if p.returncode == 0:
        fail("%s: the job exited 0:\n%s" % (kind, out[-3000:]))
    if took > 10:
        fail("%s: the job ended %.1f s after the failure (over 10 s)" % (kind, took))
    for e in expect:
        if e not in out:
            fail("%s: the output does not say '%s':\n%s" % (kind, e, out[-3000:]))
    left = subprocess.run(["pgrep", "-f", "piperun " + plan], stdout=subprocess.PIPE, text=True).stdout
    if left.strip():
        fail("%s: piperun processes left behind: %s" % (kind, left.split()))
    print("PASS fail %s: exit %d %.1f s after the failure; the output names rank 1 and its error"
          % (kind, p.returncode, took))


def close(a_path, b_path, tol):
    """The largest difference of two trained models' initializers, each
    relative to the largest magnitude of the tensor in B."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    a = {t.name: numpy_helper.to_array(t) for t in onnx.load(a_path).graph.initializer}
    b = {t.name: numpy_helper.to_array(t) for t in onnx.load(b_path).graph.initializer}
    if sorted(a) != sorted(b):
        fail("the models have different initializers")
    worst, where = 0.0, ""
    for name in sorted(a):
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        if x.size == 0:
            continue
        d = float(np.max(np.abs(x - y))) / max(float(np.max(np.abs(y))), 1e-30)
        if d > worst:
            worst, where = d, name
    if not worst <= tol:
        fail("models differ by %.3g relative (over %g) at %s" % (worst, tol, where))
    print("PASS close: %d tensors within %.3g relative (limit %g)%s" % (len(a), worst, tol,
          ", largest at " + where if where else ""))


def main():
    if len(sys.argv) < 2:
        fail(__doc__)
    if sys.argv[1] == "same" and len(sys.argv) >= 5:
        same(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:])
    elif sys.argv[1] == "close" and len(sys.argv) == 5:
        close(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif sys.argv[1] == "fail" and len(sys.argv) == 5:
        fail_case(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
