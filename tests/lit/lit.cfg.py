# tests/lit/lit.cfg.py - lit configuration for pipec's text tests.
# Tests are IR (.pir) or shell (.test) files with RUN lines checked by
# FileCheck; paths come from lit.site.cfg.py, which CMake generates.
# A missing dependency (a package: Open MPI's mpirun) fails the tests that
# need it, each naming the package, unless the build was configured with
# -DPIPEC_TESTS_ALLOW_SKIPS=ON (tests/CMakeLists.txt): then they are
# reported unsupported. Tests that cannot run on the machine (no GPU,
# address-space limits under the sanitizers) are unsupported either way.
import os
import lit.formats

config.name = "pipec"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".pir", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.pipec_binary_dir, "tests", "lit")

bindir = os.path.join(config.pipec_binary_dir, "bin")
# The default profile this-cpu is the checked-in one, whatever
# `pipec --calibrate --install` left on the machine running the tests.
config.environment["PIPEC_USER_PROFILE_DIR"] = os.path.join(config.test_exec_root, "no-user-profiles")
# The instruction-set caps of CI's capped run (.ci/run; runtime/cpu/CpuIsa.h)
# reach the tools under test, and so does the emulated GPU's pause
# (runtime/EmulatedGpu.h) where a run sets it.
for k in ("PIPEC_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE", "PIPEC_EMULATED_GPU_DELAY_US"):
    if k in os.environ:
        config.environment[k] = os.environ[k]
config.environment["PATH"] = os.pathsep.join(
    [bindir, config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
config.substitutions.append(("%bindir", bindir))
config.substitutions.append(("%samples", os.path.join(config.pipec_binary_dir, "samples")))
config.substitutions.append(("%testdata", "/usr/share/libonnx-testdata/data"))
config.substitutions.append(("%python", "/usr/bin/python3"))
config.substitutions.append(("%reference", os.path.join(config.test_source_root, "..", "tools", "onnx_reference.py")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
config.substitutions.append(("%profiles", os.path.join(config.test_source_root, "..", "..", "partitioner", "profiles")))
# Open MPI's launcher (tools/setup.sh installs it): the tests of plans on
# MPI ranks (tests/tools/mpi_check.py) need it.
import shutil
allow_skips = getattr(config, "pipec_tests_allow_skips", "0") == "1"


def missing(feature, package, what):
    """A command that fails with the message a missing dependency gives
    (the tests of `feature` run it in place of the tool), or None where
    skips are allowed (the tests are unsupported)."""
    if allow_skips:
        return None
    msg = ("%s is missing: apt-get install %s (bash tools/setup.sh --all installs every test "
           "dependency; a build configured with -DPIPEC_TESTS_ALLOW_SKIPS=ON skips the tests "
           "that need it)" % (what, package))
    lit_config.warning(msg)
    config.available_features.add(feature)
    return "sh -c 'echo \"%s\" >&2; exit 1' --" % msg


mpi_missing = None
if shutil.which("mpirun"):
    config.available_features.add("mpi")
else:
    mpi_missing = missing("mpi", "openmpi-bin", "mpirun (Open MPI)")
# As root (CI), more ranks than cores, and without the shared-memory
# single-copy mechanism (CMA), which containers forbid.
for k, v in (("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
             ("OMPI_MCA_btl_vader_single_copy_mechanism", "none")):
    config.environment[k] = v
# Under the sanitizers (tools/sanitize.sh) MPI's own allocations are
# reported as leaks at exit, from plugins LeakSanitizer cannot name (so no
# suppression matches): ranks run without the leak check, every other
# check on; piperun's own leaks are checked by the runs without mpirun.
mpi_env = ""
if "detect_leaks=1" in os.environ.get("ASAN_OPTIONS", ""):
    mpi_env = "env ASAN_OPTIONS=" + os.environ["ASAN_OPTIONS"].replace("detect_leaks=1", "detect_leaks=0") + " "
config.substitutions.append(("%mpirun", mpi_missing or mpi_env + "mpirun --oversubscribe --bind-to none"))
config.substitutions.append(("%mpicheck", mpi_missing or "/usr/bin/python3 " + os.path.join(config.test_source_root, "..", "tools", "mpi_check.py")))
# Address-space limits (ulimit -v) for the out-of-memory tests: not under
# AddressSanitizer, whose shadow memory reserves terabytes of addresses.
if getattr(config, "pipec_sanitize", "OFF").upper() not in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("ulimit-v")
# A GPU the CUDA runtime can use (nvidia-smi lists one): the end-to-end
# tests of --device cuda (tests/lit/e2e/cuda.test) run; elsewhere they are
# reported unsupported.
import subprocess
try:
    if shutil.which("nvidia-smi") and "GPU" in subprocess.run(
            ["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=20).stdout:
        config.available_features.add("cuda-gpu")
except (OSError, subprocess.SubprocessError):
    pass
