"""sie.shm is shared by every process kind, so it must stay free of torch and the web stack."""

from __future__ import annotations

import subprocess

from .workload import spawn

CHECK = """
import sys
import sie.shm
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in {"torch", "starlette", "hypercorn"})))
"""


def test_importing_sie_shm_pulls_in_no_torch_starlette_or_hypercorn() -> None:
    proc = spawn(CHECK, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == ""
