"""The supervisor's catalog reaches children unchanged, whatever happens to the directory after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sie.catalog import load_catalog
from sie.shared_catalog import CatalogFeed, read_shared_catalog, share_catalog, write_catalog

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


def test_revised_catalog_keeps_slots_of_unchanged_models(tmp_path: Path) -> None:
    write_model(tmp_path, "m/beta")
    write_model(tmp_path, "m/gamma")
    write_model(tmp_path, "m/delta")
    first = load_catalog(tmp_path)  # beta 0, delta 1, gamma 2
    write_model(tmp_path, "m/alpha")  # new: sorts first, but must not shift anyone
    write_model(tmp_path, "m/gamma", "max_sequence_length: 64\n")  # changed: a new slot
    (tmp_path / "m__delta.yaml").unlink()  # removed: retired
    fresh = load_catalog(tmp_path)
    revised = first.revised(fresh.models, list(fresh.unsupported.values()))
    assert revised.names() == ["m/beta", "m/alpha", "m/gamma"]  # in slot order
    assert (revised.slot("m/beta"), revised.slot("m/alpha"), revised.slot("m/gamma")) == (0, 3, 4)
    assert "m/delta" not in revised and len(revised) == 5
    assert revised.slot_names() == ["m/beta", None, None, "m/alpha", "m/gamma"]
    assert revised.models[2].max_sequence_length is None  # the retired slot still holds the old config
    assert revised.get("m/gamma").max_sequence_length == 64
    same = revised.revised(fresh.models, [])
    assert same.slot_names() == revised.slot_names()


class _Generation:
    """The one control-block field a CatalogFeed reads."""

    def __init__(self) -> None:
        self.value = 0

    def catalog_generation(self) -> int:
        return self.value


def test_feed_follows_rewrites_in_place(tmp_path: Path) -> None:
    write_model(tmp_path, "m/beta")
    first = load_catalog(tmp_path)
    fd = share_catalog(first)
    control = _Generation()
    try:
        feed = CatalogFeed(fd, control)  # type: ignore[arg-type]
        assert feed.changed() is None and feed.catalog.names() == ["m/beta"]
        write_model(tmp_path, "m/alpha")
        fresh = load_catalog(tmp_path)
        write_catalog(fd, first.revised(fresh.models, []), 1)
        assert feed.changed() is None  # written, not yet announced
        control.value = 1
        changed = feed.changed()
        assert changed is not None and changed.names() == ["m/beta", "m/alpha"]
        assert feed.changed() is None
        write_catalog(fd, first, 2)  # a shorter file than before: nothing of the old one may remain
        control.value = 2
        again = feed.changed()
        assert again is not None and again.names() == ["m/beta"] and len(again) == 1
    finally:
        os.close(fd)
