"""The supervisor's catalog reaches children unchanged, whatever happens to the directory after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sie.model_config import load_catalog
from sie.shared_catalog import read_shared_catalog, share_catalog

REPO = Path(__file__).resolve().parents[1]


def write_model(folder: Path, name: str, extra: str = "") -> None:
    (folder / f"{name.replace('/', '__')}.yaml").write_text(f"sie_id: {name}\n{extra}")


def test_round_trip_keeps_order_and_loras(tmp_path: Path) -> None:
    (tmp_path / "adapters" / "a").mkdir(parents=True)
    write_model(tmp_path, "b/two", "loras:\n  fr: adapters/a\n")
    write_model(tmp_path, "a/one")
    catalog = load_catalog(tmp_path)
    fd = share_catalog(catalog)
    try:
        shared = read_shared_catalog(fd)
        again = read_shared_catalog(fd)  # pread: reading twice needs no rewind
    finally:
        os.close(fd)
    assert shared.names() == again.names() == ["a/one", "b/two"]
    assert shared.models == catalog.models
    # Relative adapter folders are resolved against the YAML's folder when the catalog is read.
    assert shared.get("b/two").loras == {"fr": str((tmp_path / "adapters" / "a").resolve())}


def test_a_child_started_after_the_directory_changed_gets_the_original_numbering(tmp_path: Path) -> None:
    write_model(tmp_path, "m/beta")
    write_model(tmp_path, "m/gamma")
    fd = share_catalog(load_catalog(tmp_path))
    # A new model that sorts first: re-reading the directory would shift every slot by one.
    write_model(tmp_path, "m/alpha")
    assert load_catalog(tmp_path).slot("m/beta") == 1
    probe = (
        "import sys; from sie.shared_catalog import read_shared_catalog\n"
        "c = read_shared_catalog(int(sys.argv[1])); print(c.slot('m/beta'), c.slot('m/gamma'), len(c))"
    )
    try:
        result = subprocess.run(
            [sys.executable, "-c", probe, str(fd)],
            cwd=REPO,
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(fd)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1", "2"]
