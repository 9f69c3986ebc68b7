"""Time to first answer for a cold model copied from a cluster cache on S3, against copying the same
files with the cloud library alone.

    .venv/bin/python scripts/bench_cold_load.py [--sizes-mb 90,1000] [--runs 3] [--poll-ms 10]

moto's S3 server runs as a process of its own on loopback. For each size a random-weight BERT of
about that many MB (float32 safetensors, all-MiniLM-L6-v2's tokenizer) is uploaded in the Hugging
Face cache layout (`models--bench--mNNN/snapshots/COMMIT/...`, `refs/main`). Then, `runs` times:
- copy: s3fs's own `get` of the snapshot folder into an empty local folder (the bytes must come);
- sie: one running server (one CPU device; models directory and cluster cache in the bucket) asked
  to encode one text with the model, timed from the first request to the first 200 (asking again
  every `poll-ms` while it answers 503 MODEL_LOADING), with the model neither loaded nor in the
  local cache (between runs it is unloaded when idle and its local copy deleted). The device has
  served another model before, so its first-load imports are not counted.
The two alternate which goes first, each after `sync`, and moto's server is the same for both.
The last stdout line is one JSON object: per size the median seconds of both and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _server import free_port, start_server, stop_server

ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",  # nothing leaves loopback
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
WARM = "bench/warm"


def shape_for(target_mb: int) -> tuple[int, int]:
    """(hidden size, layers) of a BERT (vocabulary 30522, 4x feed-forward) nearest `target_mb`."""
    best = (0, 0, float("inf"))
    for hidden in (128, 256, 384, 512, 768, 1024):
        for layers in range(1, 49):
            params = 30522 * hidden + 512 * hidden + layers * (12 * hidden * hidden + 13 * hidden)
            gap = abs(params * 4 / 1e6 - target_mb)
            if gap < best[2]:
                best = (hidden, layers, gap)
    return best[0], best[1]


def make_model(folder: Path, target_mb: int, tokenizer_dir: Path) -> int:
    """Write a random-weight BERT of about `target_mb` MB into `folder`; its hidden size."""
    import torch
    import transformers
    from safetensors.torch import save_file

    hidden, layers = shape_for(target_mb)
    config = transformers.BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        intermediate_size=4 * hidden,
        max_position_embeddings=512,
    )
    with torch.device("meta"):
        shapes = {name: t.shape for name, t in transformers.BertModel(config).state_dict().items()}
    generator = torch.Generator().manual_seed(target_mb)
    tensors = {name: torch.randn(shape, generator=generator) * 0.02 for name, shape in shapes.items()}
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / name, folder / name)
    return hidden


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit("moto's server did not start")


def upload(fs: Any, root: str, hf_id: str, folder: Path) -> str:
    commit = secrets.token_hex(20)
    repo = f"{root}/models--{hf_id.replace('/', '--')}"
    for path in sorted(folder.iterdir()):
        fs.put_file(str(path), f"{repo}/snapshots/{commit}/{path.name}")
    fs.pipe_file(f"{repo}/refs/main", commit.encode())
    return commit


def model_yaml(sie_id: str, dim: int, folder: Path | None = None) -> bytes:
    import yaml

    where = {"weights": {"path": str(folder)}} if folder else {"hf_id": sie_id}
    body = {"sie_id": sie_id, **where, "tasks": {"encode": {"dense": {"dim": dim}}}, "adapter": "dense"}
    return yaml.safe_dump({**body, "max_sequence_length": 128}).encode()


def time_copy(fs: Any, remote: str, scratch: Path) -> float:
    dest = scratch / "copy"
    started = time.perf_counter()
    fs.get(remote + "/", str(dest) + "/", recursive=True)
    took = time.perf_counter() - started
    shutil.rmtree(dest)
    return took


def time_first_answer(url: str, model: str, poll_s: float) -> float:
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=600) as client:
        while True:
            response = client.post(f"/v1/encode/{model}", json={"items": [{"text": "a cold start"}]})
            if response.status_code == 200:
                return time.perf_counter() - started
            if response.status_code != 503:
                raise SystemExit(f"{model}: {response.status_code} {response.text}")
            time.sleep(poll_s)


def make_cold(url: str, model: str, cache: Path) -> None:
    """Wait until the server unloaded the model (idle), then delete its local copy."""
    deadline = time.monotonic() + 120
    while httpx.get(f"{url}/v1/models/{model}", timeout=10).json()["state"] != "available":
        if time.monotonic() > deadline:
            raise SystemExit(f"{model} was not unloaded")
        time.sleep(0.2)
    shutil.rmtree(cache / f"models--{model.replace('/', '--')}", ignore_errors=True)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--sizes-mb", default="90,1000")
    parser.add_argument("--runs", type=int, default=3)
    # Each poll costs the frontend and this process CPU that the copy on a 2-core box competes for.
    parser.add_argument("--poll-ms", type=float, default=10.0, help="between requests while loading")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mb.split(",")]
    from sie.catalog import load_catalog
    from sie.model_location import resolve_weights_dir

    tokenizer_dir = resolve_weights_dir(load_catalog().get(MINILM))
    scratch = Path(tempfile.mkdtemp(prefix="sie-bench-cold-"))
    moto, moto_url = start_moto()
    os.environ.update({**ENV, "AWS_ENDPOINT_URL": moto_url})
    server = None
    try:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        bucket = "sie-bench-" + secrets.token_hex(4)
        fs.mkdir(bucket)
        remotes: dict[str, tuple[str, int, int]] = {}
        for size in sizes:
            folder = scratch / f"m{size}"
            dim = make_model(folder, size, tokenizer_dir)
            model = f"bench/m{size}"
            commit = upload(fs, f"{bucket}/hub", model, folder)
            total = sum(p.stat().st_size for p in folder.iterdir())
            remote = f"{bucket}/hub/models--{model.replace('/', '--')}/snapshots/{commit}"
            remotes[model] = (remote, dim, total)
            fs.pipe_file(f"{bucket}/models/m{size}.yaml", model_yaml(model, dim))
            shutil.rmtree(folder)
        fs.pipe_file(f"{bucket}/models/warm.yaml", model_yaml(WARM, 384, tokenizer_dir))
        cache = scratch / "cache"
        server, url, _, log_path = start_server(
            1,
            ["--models-dir", f"s3://{bucket}/models/", "--cluster-cache", f"s3://{bucket}/hub",
             "--local-cache", str(cache), "--preload", WARM, "--idle-evict-s", "1"],
            "cold",
        )  # fmt: skip
        results: dict[str, Any] = {}
        for model, (remote, _dim, total) in remotes.items():
            copies, firsts = [], []
            for run in range(args.runs):
                # Alternate which goes first, each after the disk has written back the last one's files.
                for which in ("copy", "sie") if run % 2 == 0 else ("sie", "copy"):
                    os.sync()
                    if which == "copy":
                        copies.append(time_copy(fs, remote, scratch))
                    else:
                        firsts.append(time_first_answer(url, model, args.poll_ms / 1000))
                        make_cold(url, model, cache)
            copy_s, first_s = statistics.median(copies), statistics.median(firsts)
            results[model] = {
                "mb": round(total / 1e6, 1),
                "copy_s": round(copy_s, 3),
                "first_answer_s": round(first_s, 3),
                "ratio": round(first_s / copy_s, 3),
                "copy_runs_s": [round(s, 3) for s in copies],
                "first_answer_runs_s": [round(s, 3) for s in firsts],
            }
            print(model, results[model], flush=True)
        print(json.dumps({"runs": args.runs, "results": results, "server_log": str(log_path)}))
    finally:
        if server is not None:
            stop_server(server)
        moto.terminate()
        moto.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
