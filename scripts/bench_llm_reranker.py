"""LLM reranker (Qwen3-Reranker's recipe): pairs/s of this server against the raw transformers forward.

    python scripts/bench_llm_reranker.py [--hidden 64 --layers 2] [--queries 16] [--docs 16]
                                         [--rounds 3] [--concurrency 4] [--batch-sizes 8,16,32]

Builds the tests' tiny random-weight Qwen3 reranker (tests/tiny_models/llm_reranker.py), or one as
wide and deep as `--hidden/--layers/--heads/--kv-heads/--intermediate` say (random weights of a real
shape: `--real` is Qwen3-Reranker-0.6B's width with `--layers` layers), starts a throwaway server
with it preloaded, and, round by round, scores the same `--queries` queries against `--docs`
documents each, both ways:

1. `raw`: AutoModelForCausalLM in this process on SIE's prompt rows (built by the tests' reference
   recipe, not by the server's code), length-sorted and right-padded in batches of each of
   `--batch-sizes`; the yes/no logits read at each row's last token. The best batch size counts.
2. `server`: `--concurrency` clients, each request one query and its documents (`/v1/score`).

The rounds alternate so that a busy machine slows both alike; each way's best round is reported.
The server's scores are checked against the raw forward's first. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import torch
import yaml
from _server import start_server, stop_server, timed_posts  # scripts/ is on sys.path when run as a script

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' tiny model builder

from tests.tiny_models import llm_reranker as tiny

MODEL = "bench/llm-reranker"
QWEN3_06B = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
}


def random_texts(n: int, words: tuple[int, int], seed: int) -> list[str]:
    rng = random.Random(seed)
    vocabulary = tiny._CORPUS_WORDS.split()
    return [" ".join(rng.choices(vocabulary, k=rng.randint(*words))) for _ in range(n)]


class RawReranker:
    """The causal LM in process: rows in, yes-minus-no log-softmax scores out."""

    def __init__(self, folder: Path, yes: int, no: int) -> None:
        import transformers

        self.model = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
        self.yes, self.no = yes, no

    @torch.inference_mode()
    def scores(self, rows: list[list[int]], batch_size: int) -> list[float]:
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        out = [0.0] * len(rows)
        for start in range(0, len(order), batch_size):
            picked = order[start : start + batch_size]
            width = max(len(rows[i]) for i in picked)
            ids = torch.zeros((len(picked), width), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for j, i in enumerate(picked):
                ids[j, : len(rows[i])] = torch.tensor(rows[i])
                mask[j, : len(rows[i])] = 1
            last = mask.sum(1) - 1
            hidden = self.model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            logits = self.model.lm_head(hidden[torch.arange(len(picked)), last])
            pair = torch.log_softmax(logits[:, [self.no, self.yes]].float(), dim=-1)
            for j, i in enumerate(picked):
                out[i] = float(pair[j, 1].exp())
        return out


def server_round(url: str, requests: list[tuple[str, list[str]]], concurrency: int) -> float:
    bodies = [{"query": {"text": q}, "items": [{"text": d} for d in docs]} for q, docs in requests]
    return timed_posts(f"{url}/v1/score/{MODEL}", bodies, concurrency)


def server_scores(url: str, query: str, docs: list[str]) -> list[float]:
    body = {"query": {"text": query}, "items": [{"id": str(i), "text": d} for i, d in enumerate(docs)]}
    headers = {"accept": "application/json"}
    response = httpx.post(f"{url}/v1/score/{MODEL}", json=body, headers=headers, timeout=300)
    response.raise_for_status()
    by_id = {s["item_id"]: s["score"] for s in response.json()["scores"]}
    return [by_id[str(i)] for i in range(len(docs))]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--real", action="store_true", help="Qwen3-Reranker-0.6B's width (random weights)")
    parser.add_argument("--hidden", type=int)
    parser.add_argument("--intermediate", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--kv-heads", type=int)
    parser.add_argument("--layers", type=int)
    parser.add_argument("--queries", type=int, default=16)
    parser.add_argument("--docs", type=int, default=16, help="documents per query (one request)")
    parser.add_argument("--doc-words", default="20,120", help="min,max words per document")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch-sizes", default="8,16,32")
    parser.add_argument("--frontends", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def shape(args: argparse.Namespace) -> dict[str, Any]:
    wanted = dict(QWEN3_06B) if args.real else {}
    for flag, key in (
        ("hidden", "hidden_size"),
        ("intermediate", "intermediate_size"),
        ("heads", "num_attention_heads"),
        ("kv_heads", "num_key_value_heads"),
        ("layers", "num_hidden_layers"),
    ):
        if getattr(args, flag):
            wanted[key] = getattr(args, flag)
    return wanted


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tiny.COMMON.update(shape(args))
    if args.real:
        tiny.COMMON["initializer_range"] = 0.02
    low, high = (int(x) for x in args.doc_words.split(","))
    queries = random_texts(args.queries, (3, 10), args.seed)
    docs = random_texts(args.queries * args.docs, (low, high), args.seed + 1)
    requests = [(q, docs[i * args.docs : (i + 1) * args.docs]) for i, q in enumerate(queries)]
    root = Path(tempfile.mkdtemp(prefix="sie-bench-llm-reranker-"))
    result: dict[str, Any] = {
        "shape": {k: tiny.COMMON[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size")},
        "queries": args.queries,
        "docs_per_query": args.docs,
        "concurrency": args.concurrency,
    }
    try:
        folder = tiny.make_llm_reranker(root / "weights", args.seed)
        models_dir = root / "models"
        models_dir.mkdir()
        spec = tiny.model_yaml_llm_reranker(MODEL, folder)
        (models_dir / "bench.yaml").write_text(yaml.safe_dump(spec))
        rows = [
            row
            for q, ds in requests
            for row in tiny.sie_rows(folder, "qwen3", q, ds, max_length=tiny.MAX_SEQUENCE_LENGTH)
        ]
        result["mean_row_tokens"] = round(sum(map(len, rows)) / len(rows), 1)
        from tokenizers import Tokenizer

        vocab = Tokenizer.from_file(str(folder / "tokenizer.json"))
        raw = RawReranker(folder, vocab.token_to_id("yes"), vocab.token_to_id("no"))
        sizes = [int(b) for b in args.batch_sizes.split(",")]
        extra = ["--models-dir", str(models_dir), "--preload", MODEL]
        process, url, _, _ = start_server(args.frontends, extra, "benchllm")
        try:
            query, first_docs = requests[0]
            want = raw.scores(rows[: len(first_docs)], sizes[0])
            got = server_scores(url, query, first_docs)
            result["max_score_diff"] = round(max(abs(a - b) for a, b in zip(got, want, strict=True)), 6)
            server_round(url, requests[:2], args.concurrency)  # warm up both
            raw.scores(rows[: 2 * args.docs], sizes[-1])
            raw_s: dict[int, list[float]] = {b: [] for b in sizes}
            server_s: list[float] = []
            for _ in range(args.rounds):
                for b in sizes:
                    started = time.perf_counter()
                    raw.scores(rows, b)
                    raw_s[b].append(time.perf_counter() - started)
                server_s.append(server_round(url, requests, args.concurrency))
        finally:
            stop_server(process)
        best_b = min(sizes, key=lambda b: min(raw_s[b]))
        result["raw_pairs_per_s"] = {b: round(len(rows) / min(raw_s[b]), 1) for b in sizes}
        result["raw_best_batch"] = best_b
        result["server_pairs_per_s"] = round(len(rows) / min(server_s), 1)
        result["ratio"] = round(min(raw_s[best_b]) / min(server_s), 2)
        result["torch_threads"] = torch.get_num_threads()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
