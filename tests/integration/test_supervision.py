"""What happens around a supervisor that dies: its children follow it, and the next start on the
box sweeps what it left, whatever else (another user's objects, odd entries) lies in /dev/shm."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.balancer import tiny_models_dir
from tests.integration.server import Server, shm_names, wait_until

pytestmark = pytest.mark.slow

MODEL = "tiny/supervised"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_models_dir(tmp_path_factory.mktemp("supervision"), [MODEL])


def is_running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may linger where nothing reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait(10)
    return child.pid


@pytest.fixture
def foreign_leftovers() -> Iterator[list[Path]]:
    """Names of a dead sie server that this process may not remove: a directory, and a file made
    immutable (EPERM even for root, as another user's file in the sticky /dev/shm gives)."""
    pid = dead_pid()
    made = [Path(f"/dev/shm/sie.foreign.{pid}.d0.g1.bell"), Path(f"/dev/shm/sie.foreign.{pid}.ctl")]
    made[0].mkdir()
    made[1].write_bytes(b"not ours to remove")
    subprocess.run(["chattr", "+i", str(made[1])], capture_output=True, check=False)
    yield made
    subprocess.run(["chattr", "-i", str(made[1])], capture_output=True, check=False)
    made[1].unlink(missing_ok=True)
    made[0].rmdir()


def test_children_exit_with_their_supervisor_and_the_next_start_sweeps(
    models: Path, foreign_leftovers: list[Path]
) -> None:
    args = ("--models-dir", str(models), "--preload", MODEL)
    first = Server(*args, frontends=1).wait_ready()
    roles = first.roles()
    children = roles["device"] + roles["frontend"]
    assert len(children) == 2
    left = shm_names(first.instance)
    assert left
    first.process.kill()  # SIGKILL: no drain, no cleanup
    # Left unreaped, the supervisor is a zombie whose pid still counts as alive, so a server that
    # another test starts meanwhile may not sweep these names: only its children could remove them.
    wait_until(lambda: not is_running(first.process.pid), 30, "the supervisor dies")
    wait_until(lambda: not any(is_running(pid) for pid in children), 30, "children exit after the supervisor")
    assert shm_names(first.instance) == left  # nobody removed anything
    first.process.wait(30)

    second = Server(*args, frontends=1, instance=first.instance).wait_ready()
    try:
        assert shm_names(first.instance) and set(shm_names(first.instance)).isdisjoint(left)  # its own
        assert all(path.exists() for path in foreign_leftovers)  # left alone, and the start went on
        assert "may not remove" in second.log()
        body = {"items": [{"text": "still serving"}]}
        assert httpx.post(f"{second.url}/v1/encode/{MODEL}", json=body, timeout=30).status_code == 200
    finally:
        assert second.stop() == 0, second.log()
