"""The real supervisor, with children that keep crashing: it gives up, exits 1 (so systemd's
Restart=on-failure takes over) and still stops the others and removes its shared memory.

Children are stand-in processes (a frontend that exits 3 at once, a device that only sleeps) and
the backoff is shrunk, so the nine rapid restarts take about a second instead of a minute.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from tests.integration.server import REPO, free_port, shm_names

pytestmark = pytest.mark.slow

SCRIPT = """
import subprocess, sys, time
from sie.supervisor import children

def start(self, settings, spec_json, pass_fds):
    code = "import sys; sys.exit(3)" if self.role == "frontend" else "import time; time.sleep(120)"
    self.process = subprocess.Popen([sys.executable, "-c", code])
    self.started_s = time.monotonic()
    self.restart_at_s = None

children.RESTART_BACKOFF_S = (0.01,)
children.Child.start = start
from sie.__main__ import main
port, instance = sys.argv[1:3]
sys.exit(main(["serve", "--port", port, "--instance", instance, "--frontends", "1", "--device", "cpu"]))
"""


def test_supervisor_gives_up_on_a_child_that_keeps_crashing() -> None:
    instance = "giveup" + uuid.uuid4().hex[:8]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(free_port()), instance],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SIE_LOG_FORMAT": "text"},
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("frontend0 exited (code 3)") == 9  # MAX_RAPID_RESTARTS + 1
    assert "frontend0 keeps crashing; giving up" in done.stderr
    assert "sie stopped" in done.stderr
    assert shm_names(instance) == []
