"""The suite's compile accounting (``tests/conftest.py``) counts what a test compiles."""

import os
import shutil
import subprocess
import sys
from pathlib import Path


def test_a_compiled_program_reaches_the_totals_and_the_file_listing(tmp_path):
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_one.py").write_text(
        "import jax, jax.numpy as jnp\n\n\n"
        "def test_compiles():\n"
        "    assert float(jax.jit(lambda x: x * 3 + 1)(jnp.arange(4.0))[1]) == 4.0\n")
    env = {**os.environ, "SPECJAX_TEST_COMPILE_REPORT": "5"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # its own cache: the program is compiled there
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    totals = [line for line in proc.stdout.splitlines() if line.startswith("JAX: ")]
    assert totals, proc.stdout
    assert int(totals[0].split()[1]) >= 1  # "JAX: <programs> programs compiled or loaded ..."
    assert [line for line in proc.stdout.splitlines() if line.endswith("  test_one.py")]
