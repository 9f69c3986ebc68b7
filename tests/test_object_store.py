"""A models directory on object storage, read through the cloud libraries against real stores on
loopback (moto's S3 server, a GCS emulator): the YAML files in it, and a clear refusal for what is
not a readable directory or cannot be read without the `cloud` extra."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sie import catalog_report
from sie.catalog import Catalog, read_model_texts, select_catalog
from sie.object_store import ObjectStoreError, is_remote, is_url, local_path, read_yaml_files, require_backend
from sie.supervisor.catalog_source import CatalogSource
from tests.object_stores import GcsEmulator, MotoS3

OURS = "sie_id: org/ours\nhf_id: org/ours\nadapter: dense\ntasks: {encode: {dense: {dim: 8}}}\n"
SIES = """\
sie_id: org/theirs
hf_id: org/theirs
inputs: {text: true}
tasks: {encode: {dense: {dim: 8}}}
profiles:
  default:
    adapter_path: sie_server.adapters.bert_flash:BertFlashAdapter
    max_batch_tokens: 8192
    adapter_options: {loadtime: {}, runtime: {pooling: mean, normalize: true}}
"""


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoS3]:
    server = MotoS3()
    yield server
    server.stop()


@pytest.fixture(params=["s3", "gs"])
def models_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, moto: MotoS3) -> str:
    """A bucket holding two model files (ours and SIE's format), a broken one and a non-YAML one."""
    if request.param == "s3":
        store: MotoS3 | GcsEmulator = moto
    else:
        store = GcsEmulator()
        request.addfinalizer(store.stop)
    for name, value in store.env().items():
        monkeypatch.setenv(name, value)
    bucket = store.bucket()
    fs = store.fs()
    fs.pipe_file(f"{bucket}/models/ours.yaml", OURS.encode())
    fs.pipe_file(f"{bucket}/models/theirs.yaml", SIES.encode())
    fs.pipe_file(f"{bucket}/models/org__broken.yaml", b"sie_id: org/broken\nprofiles: [")
    fs.pipe_file(f"{bucket}/models/README.md", b"not a model")
    fs.pipe_file(f"{bucket}/models/deeper/other.yaml", OURS.encode())  # only the top level is read
    return f"{request.param}://{bucket}/models/"


def test_the_yaml_files_of_a_bucket_become_the_catalog(models_url: str) -> None:
    texts = read_yaml_files(models_url)
    names = ("org__broken.yaml", "ours.yaml", "theirs.yaml")
    assert sorted(texts) == [f"{models_url}{name}" for name in names]
    catalog = select_catalog(*read_model_texts(texts))
    assert catalog.names() == ["org/ours", "org/theirs"]
    assert catalog.get("org/theirs").profile().max_batch_tokens == 8192
    broken = catalog.unsupported["org/broken"]
    assert broken.source == f"{models_url}org__broken.yaml" and "not readable as YAML" in broken.reason
    assert CatalogSource(models_url, ["org/ours"], watch=True).read().names() == ["org/ours"]


def test_the_catalog_command_reads_a_bucket(models_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert catalog_report.run(argparse.Namespace(models_dir=models_url, notes=False, json=True)) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(report["served"]) == ["org/ours", "org/theirs"] and list(report["unsupported"]) == [
        "org/broken"
    ]


def test_a_models_url_that_is_not_a_readable_directory_is_refused(models_url: str) -> None:
    bucket_url = models_url.rsplit("/models/", 1)[0]
    with pytest.raises(ObjectStoreError, match="is a file, not a directory"):
        read_yaml_files(models_url + "ours.yaml")
    with pytest.raises(ObjectStoreError, match="does not exist"):
        read_yaml_files(bucket_url + "/nothing-here/")
    with pytest.raises(ObjectStoreError, match="does not exist"):
        read_yaml_files(bucket_url.split("://")[0] + "://sie-no-such-bucket/models/")


def test_refused_credentials_stop_the_read_with_the_reason(
    moto: MotoS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in moto.env().items():
        monkeypatch.setenv(name, value)
    bucket = moto.bucket()
    moto.fs().pipe_file(f"{bucket}/models/ours.yaml", OURS.encode())
    with (
        moto.checking_credentials(),
        pytest.raises(ObjectStoreError, match="is not readable: PermissionError"),
    ):
        read_yaml_files(f"s3://{bucket}/models/")


def test_a_sighup_reread_of_a_bucket_runs_off_the_supervisors_thread(models_url: str) -> None:
    source = CatalogSource(models_url, None, watch=True)
    assert source.read().names() == ["org/ours", "org/theirs"]
    assert source.fresh(requested=False) is None  # never polled
    store_read, release, readers = source.read, threading.Event(), []

    def held_read() -> Catalog:  # the real read, held until the test lets it go
        readers.append(threading.current_thread())
        assert release.wait(10)
        return store_read()

    source.read = held_read  # type: ignore[method-assign]
    assert source.fresh(requested=True) is None  # the read has only begun
    release.set()
    for _ in range(200):
        fresh = source.fresh(requested=False)
        if fresh is not None:
            break
        time.sleep(0.05)
    assert fresh is not None and fresh.names() == ["org/ours", "org/theirs"]
    assert readers and readers[0] is not threading.main_thread()


def test_file_urls_are_local_directories(tmp_path: Path) -> None:
    (tmp_path / "ours.yaml").write_text(OURS)
    url = f"file://{tmp_path}"
    assert is_url(url) and not is_remote(url) and local_path(url) == str(tmp_path)
    assert CatalogSource(url, None, watch=False).read().names() == ["org/ours"]
    assert not is_url("/srv/models") and not is_url("C:/models") and is_remote("s3://b/m")


def test_without_the_cloud_extra_a_url_stops_the_start_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "s3fs", None)  # what an install without sie[cloud] looks like
    with pytest.raises(ObjectStoreError, match=r"s3fs is missing\): pip install 'sie\[cloud\]'"):
        require_backend("s3://bucket/weights", "cluster_cache")
    with pytest.raises(ObjectStoreError, match=r"unsupported scheme abfs://"):
        require_backend("abfs://container/weights", "cluster_cache")
