"""What a prune run anywhere (another terminal, a test on another worker) takes for a leftover: a
container whose controller is gone, or which names none. Everything a live process makes for itself
(calls, setups, copies, benches) names its process, so it is left alone."""

from __future__ import annotations

import subprocess
import sys

from sandbox import labels
from sandbox.docker.prune import orphaned_labels


def test_a_live_processs_containers_are_not_leftovers_and_a_dead_ones_are():
    assert not orphaned_labels(labels.of_process("run-1", "setup"))
    assert orphaned_labels(labels.of_run("run-1", "setup")), "naming no process: a leftover"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert orphaned_labels({**labels.of_run("run-1", "setup"), labels.PID: gone.stdout.strip()})
