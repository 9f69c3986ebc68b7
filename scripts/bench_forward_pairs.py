"""The CPU device's own MiniLM forward in process, with nothing else on the box: one inference
thread, then two at once (one core each, as a CPU device runs them), over unsorted batches.

    python scripts/bench_forward_pairs.py [--batch 16] [--texts 2048] [--rounds 2]

Loads the built-in all-MiniLM-L6-v2 the way a CPU device does (the packed forward, oneDNN linear
layers where the start-up probe picks them), tokenizes `--texts` 10-40-word texts of bench.py's
fixed vocabulary, cuts them into batches of `--batch` in arrival order, and runs them through the
device's Runner. Prints items/s and CPU milliseconds per item for each way. Set beside
`scripts/bench.py`'s figures at 32 clients, it separates what the served forward loses to the
processes it shares the cores with from what the forward itself costs.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import numpy as np
import torch
from bench import make_texts  # scripts/ is on sys.path when run as a script
from bench_packed import encode_batch
from tokenizers import Tokenizer

from sie.catalog import load_catalog
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.batcher import Batch
from sie.gpu_proc.cpu_linear import onednn_wanted, with_onednn_linears
from sie.gpu_proc.runner import Runner
from sie.model_location import resolve_weights_dir

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--texts", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    config = load_catalog(None).get(MODEL)
    folder = Path(resolve_weights_dir(config))
    loader = with_onednn_linears(load_adapter) if onednn_wanted("auto") else load_adapter
    adapter = loader(config, folder, "cpu")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    texts, _ = make_texts(args.texts, 10, 40)
    items = [np.asarray(e.ids, np.int32) for e in tokenizer.encode_batch(texts)]
    batches = [encode_batch(items[i : i + args.batch]) for i in range(0, len(items), args.batch)]
    runner = Runner(torch.device("cpu"))
    _run(runner, adapter, batches[:4], [])  # warm-up
    for _ in range(args.rounds):
        for threads in (1, 2):
            timings: list[float] = []
            workers = [
                threading.Thread(target=_run, args=(runner, adapter, batches[k::threads], timings))
                for k in range(threads)
            ]
            started = time.perf_counter()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            wall = time.perf_counter() - started
            print(
                f"{threads} thread(s), batches of {args.batch}: {len(items) / wall:.1f} items/s, "
                f"{sum(timings) / len(items) * 1000:.2f} ms CPU per item"
            )


def _run(runner: Runner, adapter: object, batches: list[Batch], cpu_seconds: list[float]) -> None:
    torch.set_num_threads(1)
    started = time.thread_time()
    with torch.inference_mode():
        for batch in batches:
            runner.run_dense(adapter, batch)  # type: ignore[arg-type]
    cpu_seconds.append(time.thread_time() - started)


if __name__ == "__main__":
    main()
