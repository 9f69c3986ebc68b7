"""Image embeddings per second through sie against the raw transformers pipeline, in one run; and
Whisper's real-time factor with windows batched against one at a time.

    python scripts/bench_images.py [--frontends 2] [--clients 8] [--images-per-request 4]
                                   [--duration-s 20] [--peer-url URL] [--model-dir DIR] [--rounds 1]
                                   [--load clients|wrk]
    python scripts/bench_images.py --whisper --whisper-dir DIR [--windows 8]

Images: 32 JPEGs of 640x480 (a colour field with noise, fixed seed), made in memory.

Model: a small random CLIP (2 layers, hidden 64, 224 px, patch 32, projection 512, CLIP's
processor) built into a temporary folder unless `--model-dir` names one, so that decoding and
resizing, not the model, dominate: the work the frontends spread over processes.

Raw pipeline (measured first, while no server runs): in this process, `PIL.Image.open` +
`CLIPImageProcessor` (Pillow backend) + `get_image_features`, the same 4 images a call, one call
after another, torch on every core: `raw_images_per_s`.

sie: `python -m sie serve` with the model preloaded; `--clients` concurrent clients, each posting
msgpack requests of `--images-per-request` JPEG bytes to /v1/encode and asking for msgpack back, as
`sie-sdk` does: `sie_images_per_s`, and the
CPU time its frontends and its device spent per image (`sie_frontend_ms_per_image`,
`sie_device_ms_per_image`, from /proc, warm-up included on both sides of the division). With
`--peer-url` the same load also goes to another server (e.g. the real sie-server started by its
peer script with this model folder as openai/clip-vit-base-patch32): `peer_images_per_s`. With
`--rounds N` the two loads alternate N times and each figure is the median over the rounds
(`sie_vs_peer` the median of the rounds' ratios), since the box's speed drifts over minutes.
The clients are Python threads (httpx) in this process by default; they take CPU from the server
they load, and more from the faster one. `--load wrk` sends the same bodies with `wrk` (Debian
package), which takes almost none, so each server has the cores it would have alone.

Decoding ceiling (each round, after the loads, while the server idles): sie's own exact decoding
and resizing (`decode_pixels`, what its frontends run) on one thread per core in this process, with
no HTTP, rings or forward: `decoding_ceiling_images_per_s`, the most any server that must produce
the image processor's pixels could answer on these cores, and `ceiling_vs_peer` that ceiling
against the peer.

Whisper (`--whisper`): `--windows` 30 s windows of noise to /v1/extract of the Whisper model in
`--whisper-dir`, first one request per window one after another, then all in one request (one
device batch): `rtf_single` and `rtf_batched` are seconds of audio transcribed per second.

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import msgpack
import numpy as np
from _server import cpu_by_role, server_pids, start_server, stop_server
from _wrk import body_script, run_wrk

MODEL_ID = "bench/clip"
PEER_MODEL_ID = "openai/clip-vit-base-patch32"
MSGPACK = "application/msgpack"


def make_images(n: int = 32, width: int = 640, height: int = 480) -> list[bytes]:
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    out = []
    for i in range(n):
        base = np.stack([x * 255 / width, y * 255 / height, (x + y + 40 * i) % 256], axis=-1)
        pixels = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def make_clip(folder: Path) -> Path:
    """A random CLIP with CLIP's preprocessing and a byte-level BPE tokenizer (no download)."""
    import torch
    import transformers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    vocab = {s: i for i, s in enumerate(symbols)}
    vocab.update({s + "</w>": len(symbols) + i for i, s in enumerate(symbols)})
    vocab["<|startoftext|>"], vocab["<|endoftext|>"] = len(vocab), len(vocab) + 1
    transformers.CLIPTokenizer(vocab=vocab, merges=[]).save_pretrained(folder)
    tower = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256}
    config = transformers.CLIPConfig(
        text_config={
            **tower,
            "vocab_size": len(vocab),
            "eos_token_id": len(vocab) - 1,
            "bos_token_id": len(vocab) - 2,
        },
        vision_config={**tower, "image_size": 224, "patch_size": 32},
        projection_dim=512,
    )
    torch.manual_seed(0)
    transformers.CLIPModel(config).eval().save_pretrained(folder)
    transformers.CLIPImageProcessorPil().save_pretrained(folder)
    return folder


def write_models_dir(root: Path, weights: Path, sie_id: str, adapter: str, inputs: dict[str, bool]) -> Path:
    import yaml

    models = root / "models"
    models.mkdir(exist_ok=True)
    tasks = {"encode": {"dense": {"dim": 512}}} if adapter == "clip" else {"extract": {}}
    config = {
        "sie_id": sie_id,
        "weights": {"path": str(weights)},
        "inputs": inputs,
        "tasks": tasks,
        "adapter": adapter,
    }
    (models / f"{adapter}.yaml").write_text(yaml.safe_dump(config))
    return models


def raw_pipeline(folder: Path, images: list[bytes], per_call: int, duration_s: float) -> float:
    """Images per second: open + processor + get_image_features, one call after another."""
    import torch
    import transformers
    from PIL import Image

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    processor = transformers.CLIPImageProcessorPil.from_pretrained(folder)
    model: Any = transformers.CLIPModel.from_pretrained(folder).eval()
    done, started, i = 0, time.perf_counter(), 0
    while time.perf_counter() - started < duration_s:
        batch = [Image.open(io.BytesIO(images[(i + k) % len(images)])) for k in range(per_call)]
        with torch.inference_mode():
            model.get_image_features(**processor(batch, return_tensors="pt"))
        done, i = done + per_call, i + per_call
    return done / (time.perf_counter() - started)


def decoding_ceiling(folder: Path, images: list[bytes], per_call: int, duration_s: float) -> float:
    """Images per second of the exact decoding and resizing alone (sie's own, as its frontends run
    it), on one thread per core of this process: no HTTP, no rings, no forward. The decoding and
    resizing release the GIL, so the threads use every core. No server that must produce these
    pixels can embed more images per second than this on the same cores."""
    from sie.frontend.tasks.images import ImageUnit, decode_pixels
    from sie.media_config import image_spec
    from sie.settings import Settings

    spec = image_spec(folder, "clip")
    max_pixels = Settings().max_image_pixels  # the server's default bound, as the frontends check it
    units = [ImageUnit(0, k, data, "jpeg") for k, data in enumerate(images)]
    calls = [units[i : i + per_call] for i in range(0, len(units) - per_call + 1, per_call)]
    counts: list[int] = []

    def decode(offset: int) -> None:
        done, i = 0, offset
        while time.perf_counter() < deadline:
            decode_pixels(calls[i % len(calls)], spec, max_pixels)
            done, i = done + per_call, i + 1
        counts.append(done)

    threads = [threading.Thread(target=decode, args=(t,)) for t in range(len(os.sched_getaffinity(0)))]
    started = time.perf_counter()
    deadline = started + duration_s
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def load(url: str, model: str, images: list[bytes], args: argparse.Namespace) -> dict[str, float]:
    """`--clients` concurrent clients posting msgpack requests of `--images-per-request` images."""
    bodies = request_bodies(images, args.images_per_request)
    if args.load == "wrk":
        return wrk_load(url, model, bodies, args)
    return clients_load(url, model, bodies, args)


def request_bodies(images: list[bytes], per_request: int) -> list[bytes]:
    return [
        msgpack.packb(
            {
                "items": [
                    {"images": [{"data": images[(i + k) % len(images)], "format": "jpeg"}]}
                    for k in range(per_request)
                ]
            },
            use_bin_type=True,
        )
        for i in range(0, len(images), per_request)
    ]


def clients_load(url: str, model: str, bodies: list[bytes], args: argparse.Namespace) -> dict[str, float]:
    """Python threads (httpx) in this process, each posting one request after another."""
    latencies: list[float] = []
    errors = [0]
    answered = [0]  # warm-up included: what the server's CPU time was spent on
    lock = threading.Lock()
    deadline = time.monotonic() + args.warmup_s + args.duration_s
    measure_from = time.monotonic() + args.warmup_s

    def client(seed: int) -> None:
        with httpx.Client(timeout=120) as http:
            i = seed
            while (now := time.monotonic()) < deadline:
                response = http.post(
                    f"{url}/v1/encode/{model}",
                    content=bodies[i % len(bodies)],
                    headers={"content-type": MSGPACK, "accept": MSGPACK},
                )
                i += 1
                with lock:
                    if response.status_code != 200:
                        errors[0] += 1
                    else:
                        answered[0] += 1
                        if now >= measure_from:
                            latencies.append(time.monotonic() - now)

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    images_done = len(latencies) * args.images_per_request
    return {
        "images_per_s": round(images_done / args.duration_s, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else 0.0,
        "errors": errors[0],
        "images_answered": answered[0] * args.images_per_request,
    }


def wrk_load(url: str, model: str, bodies: list[bytes], args: argparse.Namespace) -> dict[str, float]:
    """`wrk` with `--clients` connections: a client that takes almost no CPU from the servers."""
    folder = Path(tempfile.mkdtemp(prefix="bench-images-wrk-"))
    script = body_script(folder, bodies, f"/v1/encode/{model}", MSGPACK, MSGPACK)
    warm = run_wrk(url, script, args.warmup_s, args.clients)
    run = run_wrk(url, script, args.duration_s, args.clients)
    per = args.images_per_request
    return {
        "images_per_s": round(run["requests_per_s"] * per, 1),
        "p50_ms": run["p50_ms"],
        "errors": warm["non_2xx"] + run["non_2xx"],
        "images_answered": (warm["requests"] + run["requests"]) * per,
    }


def load_with_cpu(
    url: str, images: list[bytes], args: argparse.Namespace, roles: dict[int, str]
) -> dict[str, float]:
    """`load` on sie, plus the CPU time its frontends and its device spent per image (from /proc)."""
    before = cpu_by_role(roles)
    result = load(url, MODEL_ID, images, args)
    spent = cpu_by_role(roles, since=before)
    answered = max(result["images_answered"], 1)
    for role in ("frontend", "device"):
        result[f"{role}_ms_per_image"] = round(spent.get(role, 0.0) / answered * 1000, 2)
    return result


def whisper_rtf(args: argparse.Namespace) -> dict[str, Any]:
    import soundfile

    root = Path(tempfile.mkdtemp(prefix="bench-whisper-"))
    models = write_models_dir(
        root, Path(args.whisper_dir), "bench/whisper", "whisper", {"text": False, "audio": True}
    )
    rng = np.random.default_rng(0)
    windows = []
    for _ in range(args.windows):
        buffer = io.BytesIO()
        soundfile.write(
            buffer, (rng.standard_normal(16000 * 30) * 0.1).astype(np.float32), 16000, format="FLAC"
        )
        windows.append(buffer.getvalue())
    server, url, _, _ = start_server(1, ["--models-dir", str(models), "--preload", "bench/whisper"], "benchw")
    try:
        post = lambda items: httpx.post(  # noqa: E731
            f"{url}/v1/extract/bench/whisper",
            content=msgpack.packb({"items": items}, use_bin_type=True),
            headers={"content-type": "application/msgpack"},
            timeout=600,
        ).raise_for_status()
        post([{"audio": {"data": windows[0]}}])  # warm up
        started = time.perf_counter()
        for window in windows:
            post([{"audio": {"data": window}}])
        single_s = time.perf_counter() - started
        started = time.perf_counter()
        post([{"audio": {"data": window}} for window in windows])
        batched_s = time.perf_counter() - started
    finally:
        stop_server(server)
    audio_s = 30.0 * args.windows
    return {
        "windows": args.windows,
        "rtf_single": round(audio_s / single_s, 2),
        "rtf_batched": round(audio_s / batched_s, 2),
    }


def images_bench(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-images-"))
    folder = Path(args.model_dir) if args.model_dir else make_clip(root / "clip")
    images = make_images()
    result: dict[str, Any] = {"model_dir": str(folder), "cores": len(os.sched_getaffinity(0))}
    result["raw_images_per_s"] = round(
        raw_pipeline(folder, images, args.images_per_request, args.duration_s), 1
    )
    models = write_models_dir(root, folder, MODEL_ID, "clip", {"text": True, "image": True})
    extra = ["--models-dir", str(models), "--preload", MODEL_ID]
    server, url, _, _ = start_server(args.frontends, extra, "benchi")
    roles = server_pids(server.pid)
    sie_rounds: list[dict[str, float]] = []
    peer_rounds: list[dict[str, float]] = []
    ceilings: list[float] = []  # measured while the server idles between loads
    try:
        for _ in range(args.rounds):  # alternating, so the box's drift falls on both alike
            sie_rounds.append(load_with_cpu(url, images, args, roles))
            if args.peer_url:
                peer_rounds.append(load(args.peer_url, PEER_MODEL_ID, images, args))
            ceilings.append(decoding_ceiling(folder, images, args.images_per_request, args.duration_s / 2))
    finally:
        stop_server(server)
    result["decoding_ceiling_images_per_s"] = round(statistics.median(ceilings), 1)
    if args.rounds > 1:
        result["decoding_ceiling_rounds"] = [round(c, 1) for c in ceilings]
    result.update({f"sie_{k}": v for k, v in _median_round(sie_rounds).items()})
    result["sie_vs_raw"] = round(result["sie_images_per_s"] / result["raw_images_per_s"], 2)
    if args.peer_url:
        result.update({f"peer_{k}": v for k, v in _median_round(peer_rounds).items()})
        pairs = zip(sie_rounds, peer_rounds, strict=True)
        ratios = [sie["images_per_s"] / max(peer["images_per_s"], 1e-9) for sie, peer in pairs]
        result["sie_vs_peer"] = round(statistics.median(ratios), 2)
        if args.rounds > 1:
            result["sie_vs_peer_rounds"] = [round(r, 2) for r in ratios]
        # What `sie_vs_peer` could be if serving and the forward cost nothing at all.
        ceiling = result["decoding_ceiling_images_per_s"]
        result["ceiling_vs_peer"] = round(ceiling / result["peer_images_per_s"], 2)
    return result


def _median_round(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """Each figure's median over the rounds (errors summed)."""
    merged: dict[str, Any] = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    merged["errors"] = sum(r["errors"] for r in rounds)
    if len(rounds) > 1:
        merged["images_per_s_rounds"] = [r["images_per_s"] for r in rounds]
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frontends", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--images-per-request", type=int, default=4)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument(
        "--load", choices=["clients", "wrk"], default="clients",
        help="Python httpx clients in this process (the issue's), or wrk (almost no CPU of its own)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="alternating sie/peer loads; medians reported")
    parser.add_argument("--model-dir", help="a CLIP weights folder (default: build a small random one)")
    parser.add_argument("--peer-url", help="also load another server serving the model as " + PEER_MODEL_ID)
    parser.add_argument("--whisper", action="store_true", help="measure Whisper's real-time factor instead")
    parser.add_argument("--whisper-dir", help="a Whisper weights folder (with tokenizer.json)")
    parser.add_argument("--windows", type=int, default=8)
    args = parser.parse_args(argv)
    if args.whisper and not args.whisper_dir:
        parser.error("--whisper needs --whisper-dir")
    result = whisper_rtf(args) if args.whisper else images_bench(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
