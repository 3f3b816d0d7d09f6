"""alloclab's own process keeps to one thread of BLAS, without touching the programs' environment."""

import os
import subprocess
import sys


def test_statistics_libraries_start_no_worker_threads_and_programs_do_not_inherit_the_setting():
    code = ("import os, alloclab, numpy, scipy.stats, scipy.linalg\n"
            "from alloclab.measure.runner import Runner\n"
            "import dataclasses\n"
            "base = [f for f in dataclasses.fields(Runner) if f.name == 'base_env'][0].default_factory()\n"
            "print(len(os.listdir('/proc/self/task')), 'OPENBLAS_NUM_THREADS' in base)\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "False"]
    # The user's own choice is left as it is (and so reaches the programs, as it would without us).
    out = subprocess.run([sys.executable, "-c", code], env=env | {"OPENBLAS_NUM_THREADS": "2"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split()[1] == "True"
