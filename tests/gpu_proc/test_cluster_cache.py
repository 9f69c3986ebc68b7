"""Copying snapshots from a cluster cache into the local Hugging Face cache, against real stores on
loopback (moto's S3 server, a GCS emulator, a file:// folder): whole or not at all, resumed after a
cut, found by huggingface_hub's own lookup; and the disk cache that makes room for a copy."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sie.gpu_proc.cluster_cache import ClusterCache
from sie.gpu_proc.disk_cache import DiskCache
from sie.gpu_proc.hf_cache import RepoLock, incoming_dir, touch
from sie.gpu_proc.weights import WeightsSource
from sie.model_config import ModelConfigError, parse_model_config
from sie.model_location import local_snapshot, repo_folder
from tests.object_stores import GcsEmulator, MotoS3, upload_snapshot


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoS3]:
    server = MotoS3()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsEmulator]:
    server = GcsEmulator()
    yield server
    server.stop()


class Store:
    """One store under test: its fsspec filesystem for uploads and the URL our code is given."""

    def __init__(self, fs: Any, root: str, url: str) -> None:
        self.fs, self.root, self.url = fs, root, url

    def upload(self, hf_id: str, folder: Path, **kwargs: Any) -> str:
        return upload_snapshot(self.fs, self.root, hf_id, folder, **kwargs)


@pytest.fixture(params=["s3", "gs", "file"])
def store(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, moto: MotoS3
) -> Store:
    if request.param == "s3":
        for name, value in moto.env().items():
            monkeypatch.setenv(name, value)
        bucket = moto.bucket()
        return Store(moto.fs(), f"{bucket}/hub", f"s3://{bucket}/hub")
    if request.param == "gs":
        gcs: GcsEmulator = request.getfixturevalue("gcs")
        for name, value in gcs.env().items():
            monkeypatch.setenv(name, value)
        bucket = gcs.bucket()
        return Store(gcs.fs(), f"{bucket}/hub", f"gs://{bucket}/hub")
    import fsspec

    root = tmp_path / "cluster"
    root.mkdir()
    return Store(fsspec.filesystem("file", auto_mkdir=True), str(root), f"file://{root}")


def model_folder(root: Path, weights_bytes: int = 3000) -> Path:
    (root / "nested").mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "bert"}')
    # Not ending in a line break: gcp-storage-emulator drops one from the end of an upload's data.
    (root / "model.safetensors").write_bytes(os.urandom(weights_bytes - 1) + b"\x00")
    (root / "nested" / "vocab.txt").write_text("a\nb\n")
    return root


def same_files(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files
    )


def test_a_copy_lands_whole_where_huggingface_hub_finds_it(store: Store, tmp_path: Path) -> None:
    source = model_folder(tmp_path / "source")
    commit = store.upload("org/model", source)
    cache = tmp_path / "cache"
    snapshot = ClusterCache(store.url).find("org/model", None)
    assert snapshot is not None and snapshot.commit == commit
    assert snapshot.total_bytes == sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
    folder = ClusterCache(store.url).copy(snapshot, cache)
    assert folder == cache / "models--org--model" / "snapshots" / commit
    assert same_files(source, folder)
    assert local_snapshot("org/model", None, cache) == folder  # refs/main written
    assert local_snapshot("org/model", commit, cache) == folder
    assert not incoming_dir(cache, snapshot.repo, commit).exists()
    assert ClusterCache(store.url).find("org/other", None) is None  # a miss, not an error


def test_a_copy_cut_short_is_never_found_and_the_next_one_resumes(
    moto: MotoS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_root = f"{moto.bucket()}/hub"
    source = model_folder(tmp_path / "source", weights_bytes=200_000)
    commit = upload_snapshot(moto.fs(), store_root, "org/cut", source)
    cache = tmp_path / "cache"
    for name, value in moto.env().items():
        monkeypatch.setenv(name, value)
    cluster = ClusterCache(f"s3://{store_root}")
    snapshot = cluster.find("org/cut", None)
    assert snapshot is not None
    # What a copy killed part way leaves: some files whole, one part-written.
    incoming = incoming_dir(cache, snapshot.repo, commit)
    (incoming / "nested").mkdir(parents=True)
    (incoming / "config.json").write_bytes((source / "config.json").read_bytes())
    (incoming / "nested" / "vocab.txt").write_bytes((source / "nested" / "vocab.txt").read_bytes())
    (incoming / "model.safetensors.part").write_bytes(b"\0" * 1000)
    assert local_snapshot("org/cut", None, cache) is None
    assert snapshot.missing_bytes(cache) == 200_000
    before = len(moto.requests)
    folder = cluster.copy(snapshot, cache)
    fetched = [path for method, path in moto.requests[before:] if method == "GET"]
    assert fetched == [f"/{store_root}/models--org--cut/snapshots/{commit}/model.safetensors"]
    assert same_files(source, folder)


def test_a_snapshot_missing_a_shard_is_refused_before_any_fetch(store: Store, tmp_path: Path) -> None:
    source = model_folder(tmp_path / "source")
    index = {"weight_map": {"a.weight": "model-1.safetensors", "b.weight": "model-2.safetensors"}}
    (source / "model.safetensors.index.json").write_text(json.dumps(index))
    (source / "model-1.safetensors").write_bytes(b"x")
    store.upload("org/sharded", source)
    named = r"lacks files its model\.safetensors\.index\.json names: model-2"
    with pytest.raises(ModelConfigError, match=named):
        ClusterCache(store.url).find("org/sharded", None)


def test_revisions_by_commit_by_ref_and_a_lone_snapshot(store: Store, tmp_path: Path) -> None:
    source = model_folder(tmp_path / "source")
    first = store.upload("org/rev", source, ref="v1")
    second = store.upload("org/rev", source)  # main
    cluster = ClusterCache(store.url)
    assert cluster.find("org/rev", first).commit == first  # type: ignore[union-attr]
    assert cluster.find("org/rev", "v1").commit == first  # type: ignore[union-attr]
    assert cluster.find("org/rev", None).commit == second  # type: ignore[union-attr]
    assert cluster.find("org/rev", "v2") is None
    lone = store.upload("org/lone", source, ref=None)
    assert cluster.find("org/lone", None).commit == lone  # type: ignore[union-attr]
    store.upload("org/lone", source, ref=None)
    with pytest.raises(ModelConfigError, match="holds 2 snapshots and no refs/main"):
        cluster.find("org/lone", None)


def test_a_cluster_cache_that_does_not_exist_is_an_error_not_a_miss(
    moto: MotoS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in moto.env().items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ModelConfigError, match="s3://sie-no-such-bucket/hub does not exist"):
        ClusterCache("s3://sie-no-such-bucket/hub").find("org/model", None)


def test_refused_credentials_fail_the_load_with_the_reason(
    moto: MotoS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in moto.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    bucket = moto.bucket()
    upload_snapshot(moto.fs(), f"{bucket}/hub", "org/model", model_folder(tmp_path / "source"))
    cluster = ClusterCache(f"s3://{bucket}/hub")
    weights = WeightsSource(cluster, lambda root: DiskCache(root, enabled=False), set, hub_allowed=False)
    config = parse_model_config({"sie_id": "m", "hf_id": "org/model", "adapter": "dense"})
    with (
        moto.checking_credentials(),
        pytest.raises(ModelConfigError, match=r"hub could not be read: PermissionError"),
        weights.open(config),
    ):
        pass
    assert not (tmp_path / "cache" / "models--org--model").exists()


def fake_repo(cache: Path, name: str, size: int, age_s: float) -> None:
    folder = cache / f"models--org--{name}" / "snapshots" / "c"
    folder.mkdir(parents=True)
    (folder / "w.bin").write_bytes(b"\0" * size)
    stamp = time.time() - age_s
    os.utime(cache / f"models--org--{name}", (stamp, stamp))


def test_the_disk_cache_evicts_the_least_recently_used_model_it_may(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for name, age_s in (("oldest", 40), ("kept", 30), ("locked", 20), ("newer", 10), ("newest", 0)):
        fake_repo(cache, name, 1000, age_s)
    disk = DiskCache(cache, enabled=True, threshold_percent=80, capacity_bytes=6000)  # limit 4800
    with RepoLock(cache, "models--org--locked") as lock:
        lock.shared()  # a load reads it: never deleted under it
        disk.make_room(1500, keep={"models--org--kept"}, what="org/new")
    left = sorted(p.name for p in cache.glob("models--*"))
    # 5000 used + 1500: "oldest" and then (skipping kept and locked) "newer" go; 3000 + 1500 fits.
    assert left == ["models--org--kept", "models--org--locked", "models--org--newest"]
    assert disk.evictions == 2
    touch(cache, "models--org--kept")
    disk.make_room(2500, keep=set(), what="org/next")  # 3000 + 2500: "locked" now oldest unkept
    assert sorted(p.name for p in cache.glob("models--*")) == ["models--org--kept", "models--org--newest"]


def test_a_copy_that_cannot_fit_fails_first_with_the_remedy(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fake_repo(cache, "held", 4000, 10)
    with pytest.raises(ModelConfigError, match=r"SIE_DISK_CACHE_ENABLED=true.*no room for org/new"):
        DiskCache(cache, enabled=False, capacity_bytes=4000).make_room(10, keep=set(), what="org/new")
    with pytest.raises(ModelConfigError, match="every cached model is in use"):
        full = DiskCache(cache, enabled=True, capacity_bytes=4000)
        full.make_room(10, keep={"models--org--held"}, what="org/new")
    assert (cache / "models--org--held").is_dir()


def test_weights_come_from_the_local_cache_then_the_cluster_then_not_at_all(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    source = model_folder(tmp_path / "source")
    store.upload("org/served", source)
    disks: list[DiskCache] = []

    def disk(root: Path) -> DiskCache:
        disks.append(DiskCache(root, enabled=False))
        return disks[-1]

    weights = WeightsSource(ClusterCache(store.url), disk, set, hub_allowed=False)
    config = parse_model_config({"sie_id": "served", "hf_id": "org/served", "adapter": "dense"})
    with weights.open(config) as folder:
        assert same_files(source, folder)
    with weights.open(config) as again:  # now local: no second copy
        assert again == folder
    assert len(disks) == 1
    absent = parse_model_config({"sie_id": "absent", "hf_id": "org/absent", "adapter": "dense"})
    with (
        pytest.raises(ModelConfigError, match=r"in neither the local cache .* nor the cluster cache"),
        weights.open(absent),
    ):
        pass
    assert repo_folder("org/served") in {p.name for p in cache.iterdir()}


def test_a_models_tokenizer_repositories_come_with_it_beside_its_own_tokenizer(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A GLiNER bi-encoder's folder has its text tokenizer; its labels tokenizer is another repository.
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    source = model_folder(tmp_path / "source")
    (source / "tokenizer.json").write_text("{}")
    store.upload("org/bi", source)
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "tokenizer.json").write_text('{"labels": true}')
    commit = store.upload("org/labels", labels)
    weights = WeightsSource(
        ClusterCache(store.url), lambda root: DiskCache(root, enabled=False), set, hub_allowed=False
    )
    raw = {"sie_id": "bi", "hf_id": "org/bi", "adapter": "dense"}
    config = parse_model_config({**raw, "hf_tokenizer_dependencies": {"org/labels": commit}})
    with weights.open(config):
        pass
    folder = local_snapshot("org/labels", commit, cache)
    assert folder is not None and same_files(labels, folder)


def test_a_models_companion_checkpoints_come_from_the_cluster_cache_with_it(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A GLiNER union's second member and a ColQwen LoRA's base are Hub checkpoints of their own.
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    folders = {name: model_folder(tmp_path / name) for name in ("union", "member", "lora", "base")}
    (folders["lora"] / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base"}))
    commits = {name: store.upload(f"org/{name}", folder) for name, folder in folders.items()}
    weights = WeightsSource(
        ClusterCache(store.url), lambda root: DiskCache(root, enabled=False), set, hub_allowed=False
    )

    def union_config(member_id: str) -> Any:
        loadtime = {"members": [{"model": member_id, "revision": commits["member"]}]}
        profile = {"adapter": "gliner_union", "adapter_options": {"loadtime": loadtime}}
        return parse_model_config({"sie_id": "u", "hf_id": "org/union", "profiles": {"default": profile}})

    with weights.open(union_config("org/member")):
        copied = local_snapshot("org/member", commits["member"], cache)
        assert copied is not None and same_files(folders["member"], copied)
    with weights.open(parse_model_config({"sie_id": "c", "hf_id": "org/lora", "adapter": "colqwen2"})):
        copied = local_snapshot("org/base", None, cache)
        assert copied is not None and same_files(folders["base"], copied)
    with (
        pytest.raises(ModelConfigError, match=r"'org/absent' .* in neither the local cache"),
        weights.open(union_config("org/absent")),
    ):
        pass
