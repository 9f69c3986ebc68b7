"""Load-test a sie server over HTTP and measure the raw model on the same texts, in one run.

    python scripts/bench.py [--url URL | --frontends N] [--concurrency 32] [--items-per-request 1]
                            [--task encode|score] [--output dense|sparse] [--models-dir DIR]
                            [--words 10 40] [--requests N | --duration-s S] [--format msgpack|json]
                            [--warmup 200] [--model ID] [--client raw|httpx] [--server-arg=--flag=value]
                            [--scrape-every-s S]

Without `--url` the script starts `python -m sie serve` itself (free port, unique instance) and
stops it at the end. The raw-model part runs while no server is running (before it starts), so
the two never fight for cores; with `--url` the server is idle while it runs.

Texts: chunks of MIN..MAX consecutive words cut from the SciFact corpus
(`data/beir-scifact/corpus.jsonl`, fixed seed) when that file exists, else random words
from a fixed vocabulary. Each request carries `--items-per-request` of them, cycling over a pool.

Tasks: `encode` (the default) posts `{"items": [...]}` to /v1/encode/{model}, with
`params.output_types` set by `--output` (dense: all-MiniLM-L6-v2 by default; sparse: SPLADE-tiny).
`score` posts one query (4..12 words, from the same source) and `--items-per-request` passages
(default 20) as `{"query": {"text": q}, "items": [{"text": p}, ...]}` to /v1/score/{model}; an item
is one passage, and `--model` must name a model that scores (a cross-encoder or multi-vector model).

The load generator is deliberately light, because it shares the cores with the server: by default
a hand-written HTTP/1.1 keep-alive client on asyncio streams (one connection per concurrent
worker, request bytes built before the run, only the status line and a few headers parsed).
`--client httpx` uses httpx.AsyncClient instead, for comparison; it costs several times more CPU
per request. `client_cpu_s` in the output is the load generator's own CPU time.

Raw model (scripts/_raw_model.py): transformers on the same weights doing the same work as the
device (dense: pooling + L2 normalisation; sparse: the SPLADE formula and its non-zero terms;
score: the (query, passage) pairs of a cross-encoder, or the query and passages of a bi-encoder),
`torch.set_num_threads(available cores)`, everything sorted by length in batches of 64
(`raw_items_per_s`, tokenizing included), and the median of single forwards (`raw_single_ms`: one
text for encode, one request's query and passages for score; `raw_single_tokenize_ms` is the
tokenizer call of one text on top). Its linear layers are the ones the server's CPU device uses
(`--cpu-linear`, else `SIE_CPU_LINEAR`, else the same start-up probe), so `ratio` compares the same
kernels; when that is oneDNN, plain transformers is measured too (`raw_torch_linear_items_per_s`,
`ratio_vs_torch_linear`).

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
from _raw_model import measure_raw  # scripts/ is on sys.path when run as a script
from _server import cpu_by_role, server_pids, start_server, stop_server

REPO = Path(__file__).resolve().parents[1]
SCIFACT_CORPUS = REPO / "data" / "beir-scifact" / "corpus.jsonl"  # README: Retrieval quality
DEFAULT_MODELS = {"dense": "sentence-transformers/all-MiniLM-L6-v2", "sparse": "sie/splade-tiny"}
QUERY_WORDS = (4, 12)
VOCAB_TEXT = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so what no "
    "protein cell gene cancer patients study results treatment risk increased mice human expression "
    "levels analysis effect role disease clinical response model data time system network method"
)
HEADERS_OF_INTEREST = (b"x-queue-time", b"x-tokenization-time", b"x-inference-time", b"x-total-time")


# ---------------------------------------------------------------------------------------------
# texts


def make_texts(n: int, min_words: int, max_words: int, seed: int = 0) -> tuple[list[str], str]:
    rng = random.Random(seed)
    if SCIFACT_CORPUS.exists():
        words: list[str] = []
        with SCIFACT_CORPUS.open() as fh:
            for line in fh:
                words.extend(json.loads(line)["text"].split())
                if len(words) > 400_000:
                    break
        texts = []
        for _ in range(n):
            length = rng.randint(min_words, max_words)
            start = rng.randrange(0, len(words) - length)
            texts.append(" ".join(words[start : start + length]))
        return texts, "scifact-corpus-chunks"
    vocab = VOCAB_TEXT.split()
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(min_words, max_words))) for _ in range(n)]
    return texts, "fixed-vocabulary"


# ---------------------------------------------------------------------------------------------
# server lifecycle and process accounting


# ---------------------------------------------------------------------------------------------
# load generator


@dataclass
class Stats:
    done_s: list[float] = field(default_factory=list)  # perf_counter at each successful completion
    latencies_ms: list[float] = field(default_factory=list)
    items: list[int] = field(default_factory=list)
    server_ms: dict[bytes, list[float]] = field(default_factory=lambda: {h: [] for h in HEADERS_OF_INTEREST})
    errors: dict[str, int] = field(default_factory=dict)
    scrapes: int = 0  # GET /metrics answered during the run (--scrape-every-s)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def window(self, start_s: float, end_s: float) -> Stats:
        """Only the completions inside [start_s, end_s] (errors are kept as they are)."""
        keep = [i for i, t in enumerate(self.done_s) if start_s <= t <= end_s]
        return Stats(
            done_s=[self.done_s[i] for i in keep],
            latencies_ms=[self.latencies_ms[i] for i in keep],
            items=[self.items[i] for i in keep],
            server_ms={
                h: [v[i] for i in keep] for h, v in self.server_ms.items() if len(v) == len(self.done_s)
            },
            errors=self.errors,
            scrapes=self.scrapes,
        )


def build_requests(texts: list[str], queries: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Request bodies: `--items-per-request` texts each, plus one query per request for score."""
    requests: list[dict[str, Any]] = []
    per_request = args.items_per_request
    for index, start in enumerate(range(0, len(texts) - per_request + 1, per_request)):
        items = [{"text": t} for t in texts[start : start + per_request]]
        if args.task == "score":
            requests.append({"query": {"text": queries[index]}, "items": items})
        else:
            requests.append({"items": items, "params": {"output_types": [args.output]}})
    return requests


def encode_bodies(requests: list[dict[str, Any]], fmt: str) -> list[bytes]:
    if fmt == "json":
        return [json.dumps(body).encode() for body in requests]
    return [msgpack.packb(body, use_bin_type=True) for body in requests]


class Schedule:
    """Hands out request indices until the request count or the deadline runs out."""

    def __init__(self, total: int | None, duration_s: float | None, warmup: int) -> None:
        self.total, self.duration_s, self.warmup = total, duration_s, warmup
        self.issued = 0
        self.deadline = float("inf")
        self.measure_start = 0.0

    def next(self) -> int | None:
        now = time.perf_counter()
        if self.issued == self.warmup:
            self.measure_start = now
            if self.duration_s is not None:
                self.deadline = now + self.duration_s
        if now >= self.deadline or (self.total is not None and self.issued >= self.warmup + self.total):
            return None
        self.issued += 1
        return self.issued - 1

    def is_measured(self, index: int) -> bool:
        # With a duration, every completion counts that lands inside the window (see run_load).
        return self.duration_s is not None or index >= self.warmup


async def raw_worker(
    host: str, port: int, head: bytes, bodies: list[bytes], items: int, schedule: Schedule, stats: Stats
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while (index := schedule.next()) is not None:
            body = bodies[index % len(bodies)]
            t0 = time.perf_counter()
            writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
            status_line = await reader.readline()
            headers: dict[bytes, bytes] = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            await reader.readexactly(int(headers.get(b"content-length", b"0")))
            seconds = time.perf_counter() - t0
            record(stats, schedule.is_measured(index), seconds, status_line[9:12], headers, items)
            if headers.get(b"connection") == b"close":
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
    finally:
        writer.close()


async def httpx_worker(
    client: Any,
    path: str,
    headers: dict[str, str],
    bodies: list[bytes],
    items: int,
    schedule: Schedule,
    stats: Stats,
) -> None:
    while (index := schedule.next()) is not None:
        t0 = time.perf_counter()
        response = await client.post(path, content=bodies[index % len(bodies)], headers=headers)
        raw_headers = {k.lower(): v for k, v in response.headers.raw}
        status = str(response.status_code).encode()
        record(stats, schedule.is_measured(index), time.perf_counter() - t0, status, raw_headers, items)


def record(
    stats: Stats, measured: bool, seconds: float, status: bytes, headers: dict[bytes, bytes], items: int
) -> None:
    if not measured:
        return
    if status != b"200":
        stats.error(status.decode(errors="replace"))
        return
    stats.done_s.append(time.perf_counter())
    stats.latencies_ms.append(seconds * 1e3)
    stats.items.append(items)
    for name in HEADERS_OF_INTEREST:
        stats.server_ms[name].append(float(headers.get(name, b"nan")))


async def run_load(url: str, args: argparse.Namespace, bodies: list[bytes]) -> tuple[Stats, float]:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    path = f"/v1/{args.task}/{args.model}"
    mime = "application/json" if args.format == "json" else "application/msgpack"
    schedule = Schedule(args.requests, args.duration_s, args.warmup)
    stats = Stats()
    scraper = None
    if args.scrape_every_s:
        scraper = asyncio.create_task(scrape_loop(host, int(port), args.scrape_every_s, stats))
    if args.client == "raw":
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: {mime}\r\naccept: {mime}\r\n"
            "content-length: "
        ).encode()
        jobs = [
            raw_worker(host, int(port), head, bodies, args.items_per_request, schedule, stats)
            for _ in range(args.concurrency)
        ]
        await asyncio.gather(*jobs)
    else:
        import httpx

        limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
        headers = {"content-type": mime, "accept": mime}
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=300) as client:
            jobs = [
                httpx_worker(client, path, headers, bodies, args.items_per_request, schedule, stats)
                for _ in range(args.concurrency)
            ]
            await asyncio.gather(*jobs)
    if scraper is not None:
        scraper.cancel()
    if args.duration_s is not None:
        # Count what completed inside the window: requests still in flight from the warm-up at its
        # start and the ones finishing after its end would otherwise skew the rate.
        return stats.window(schedule.measure_start, schedule.deadline), args.duration_s
    return stats, time.perf_counter() - schedule.measure_start


async def scrape_loop(host: str, port: int, every_s: float, stats: Stats) -> None:
    """GET /metrics every `every_s` on a fresh connection, as a Prometheus scraper would."""
    while True:
        await asyncio.sleep(every_s)
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET /metrics HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n".encode())
        await reader.read()  # to EOF: the server closes after the page
        writer.close()
        stats.scrapes += 1


def check_first_response(url: str, args: argparse.Namespace, body: dict[str, Any]) -> None:
    import httpx

    response = httpx.post(
        f"{url}/v1/{args.task}/{args.model}",
        json=body,
        headers={"accept": "application/json"},
        timeout=300,
    )
    if response.status_code != 200:
        raise SystemExit(f"server answered {response.status_code}: {response.text[:500]}")


# ---------------------------------------------------------------------------------------------
# report


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summarize(stats: Stats, elapsed_s: float) -> dict[str, Any]:
    lat = stats.latencies_ms
    out: dict[str, Any] = {
        "items_per_s": round(sum(stats.items) / elapsed_s, 1),
        "requests_per_s": round(len(lat) / elapsed_s, 1),
        "p50_ms": round(percentile(lat, 50), 3),
        "p90_ms": round(percentile(lat, 90), 3),
        "p99_ms": round(percentile(lat, 99), 3),
        "mean_ms": round(statistics.fmean(lat), 3) if lat else None,
        "requests": len(lat),
        "errors": sum(stats.errors.values()),
        "errors_by_status": stats.errors,
        "elapsed_s": round(elapsed_s, 2),
        "metrics_scrapes": stats.scrapes,
    }
    for name, values in stats.server_ms.items():
        key = name.decode()[2:].replace("-time", "") + "_p50_ms"
        values = [v for v in values if v == v]  # drop NaN: header missing
        out["server_" + key.replace("-", "_")] = round(percentile(values, 50), 3) if values else None
    return out


def server_linear(server_args: list[str]) -> str:
    """The linear layers ("onednn" or "torch") the server's CPU device will use: its settings read
    as `python -m sie serve` reads them, then the same choice (sie.gpu_proc.cpu_linear)."""
    from sie.__main__ import build_parser
    from sie.gpu_proc.cpu_linear import onednn_wanted
    from sie.settings import load_settings

    cli = vars(build_parser().parse_args(["serve", *server_args]))
    settings = load_settings({k: v for k, v in cli.items() if k != "command"}, os.environ)
    return "onednn" if onednn_wanted(settings.cpu_linear) else "torch"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="an already running server (default: start one)")
    parser.add_argument("--frontends", type=int, default=2, help="frontends of the server this script starts")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra argument for `python -m sie serve` (repeat; use --server-arg=--flag=v)",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--task", choices=("encode", "score"), default="encode")
    parser.add_argument("--output", choices=("dense", "sparse"), default="dense", help="encode output type")
    parser.add_argument("--items-per-request", type=int, help="texts (passages for score); default 1 (20)")
    parser.add_argument("--words", type=int, nargs=2, default=(10, 40), metavar=("MIN", "MAX"))
    parser.add_argument("--requests", type=int, help="measured requests (default: --duration-s 20)")
    parser.add_argument("--duration-s", type=float)
    parser.add_argument("--warmup", type=int, default=200, help="requests sent before measuring")
    parser.add_argument("--format", choices=("msgpack", "json"), default="msgpack")
    parser.add_argument("--model", help="default: by --output for encode; required for score")
    parser.add_argument(
        "--models-dir", help="model YAML directory, for the raw model and the server this script starts"
    )
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw")
    parser.add_argument(
        "--pool", type=int, default=2048, help="distinct texts (also what the raw model encodes)"
    )
    parser.add_argument("--no-raw", action="store_true", help="skip the raw-model measurement")
    parser.add_argument("--scrape-every-s", type=float, help="also GET /metrics this often during the load")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.requests is None and args.duration_s is None:
        args.duration_s = 20.0
    if args.items_per_request is None:
        args.items_per_request = 20 if args.task == "score" else 1
    if args.model is None:
        if args.task == "score":
            parser.error("--task score needs --model (a cross-encoder or multi-vector model)")
        args.model = DEFAULT_MODELS[args.output]
    if args.models_dir:
        args.server_arg = [*args.server_arg, f"--models-dir={args.models_dir}"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    texts, source = make_texts(args.pool, *args.words, seed=args.seed)
    n_requests = len(texts) // args.items_per_request
    queries = make_texts(n_requests, *QUERY_WORDS, seed=args.seed + 1)[0] if args.task == "score" else []
    requests = build_requests(texts, queries, args)
    bodies = encode_bodies(requests, args.format)
    result: dict[str, Any] = {
        "task": args.task,
        "output": args.output if args.task == "encode" else None,
        "texts": source,
        "words": list(args.words),
        "cores": len(os.sched_getaffinity(0)),
    }
    if not args.no_raw:
        print("measuring the raw model (no server running) ...", file=sys.stderr)
        # Exactly the texts the requests carry (the pool's tail that fills no request is left out).
        used = texts[: n_requests * args.items_per_request]
        linear = server_linear(args.server_arg)
        raw = measure_raw(
            args.model, used, task=args.task, queries=queries, models_dir=args.models_dir, linear=linear
        )
        result.update(raw)
        if linear != "torch":  # also what plain transformers does with torch's own linear layers
            plain = measure_raw(args.model, used, task=args.task, queries=queries, models_dir=args.models_dir)
            result["raw_torch_linear_items_per_s"] = plain["raw_items_per_s"]
        print(json.dumps(result), file=sys.stderr)
    process, url, server_argv, log_path = (None, args.url, None, None)
    if url is None:
        process, url, server_argv, log_path = start_server(args.frontends, args.server_arg, "bench")
    try:
        check_first_response(url, args, requests[0])
        pids = server_pids(process.pid) if process else {}
        cpu_before = cpu_by_role(pids)
        client_cpu = time.process_time()
        load_before = os.getloadavg()[0]
        load_wall_s = time.perf_counter()
        stats, elapsed = asyncio.run(run_load(url, args, bodies))
        load_wall_s = time.perf_counter() - load_wall_s
        client_cpu = time.process_time() - client_cpu
        cpu = cpu_by_role(pids, since=cpu_before)
    finally:
        code = stop_server(process) if process else None
    result.update(summarize(stats, elapsed))
    if "raw_items_per_s" in result:
        result["ratio"] = round(result["items_per_s"] / result["raw_items_per_s"], 3)
        if "raw_torch_linear_items_per_s" in result:
            result["ratio_vs_torch_linear"] = round(
                result["items_per_s"] / result["raw_torch_linear_items_per_s"], 3
            )
        result["p50_minus_raw_single_ms"] = round(result["p50_ms"] - result["raw_single_ms"], 3)
    result.update(
        {
            "concurrency": args.concurrency,
            "items_per_request": args.items_per_request,
            "format": args.format,
            "client": args.client,
            "client_cpu_s": round(client_cpu, 2),
            "server_cpu_s": {role: round(seconds, 2) for role, seconds in sorted(cpu.items())},
            "server_cpu_util": {role: round(sec / load_wall_s, 2) for role, sec in sorted(cpu.items())},
            "loadavg_1m_before": round(load_before, 2),
            "model": args.model,
            "url": url,
            "server": {
                "argv": server_argv,
                "frontends": args.frontends if process else None,
                "exit_code": code,
                "log": str(log_path) if log_path else None,
            },
        }
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
