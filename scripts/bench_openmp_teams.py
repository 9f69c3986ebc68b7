"""What a second OpenMP team in the process costs one forward: why a CPU device keeps its loop and
loader threads off OpenMP and ends an idle second inference thread (sie.gpu_proc.inference).

    python scripts/bench_openmp_teams.py [--tokens 48] [--gap-ms 3] [--forwards 200] [--linear onednn]

libgomp keeps each thread's team for as long as the thread lives. Once the teams of all threads hold
more threads than there are cores, waiting threads stop spinning between parallel regions and sleep
on a futex, and every region pays a wake-up. One MiniLM-shaped forward (6 layers, hidden 384,
random weights) of one text, on every core, with a pause between forwards as between requests;
median ms in three situations:
1. only this thread has a team (what a CPU device now has while one batch runs);
2. another thread has formed a team and sits idle (what the loop or loader thread, or a second
   inference thread, held before);
3. after that thread has ended, its team with it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import torch
from bench_cpu_linear import minilm_shaped_bert  # scripts/ is on sys.path when run as a script

from sie.gpu_proc.cpu_linear import swap_linears
from sie.settings import available_cores


def median_ms(model: torch.nn.Module, tokens: int, gap_s: float, forwards: int) -> float:
    ids = torch.randint(1000, 30000, (1, tokens), generator=torch.Generator().manual_seed(0))
    spent = []
    with torch.inference_mode():
        for _ in range(forwards + 20):
            started = time.perf_counter()
            model(input_ids=ids)
            spent.append((time.perf_counter() - started) * 1e3)
            time.sleep(gap_s)
    return statistics.median(spent[20:])


def idle_team(threads: int, ready: threading.Event, release: threading.Event) -> None:
    torch.set_num_threads(threads)
    (torch.ones(1 << 20) * 2).sum()  # large enough to run in parallel: the team forms
    ready.set()
    release.wait()


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--gap-ms", type=float, default=3.0)
    parser.add_argument("--forwards", type=int, default=200)
    parser.add_argument("--linear", choices=("onednn", "torch"), default="onednn")
    args = parser.parse_args()
    cores = available_cores()
    torch.set_num_threads(cores)
    model = minilm_shaped_bert()
    if args.linear == "onednn":
        swap_linears([model])

    def measure() -> float:
        return round(median_ms(model, args.tokens, args.gap_ms / 1e3, args.forwards), 2)

    alone = measure()
    ready, release = threading.Event(), threading.Event()
    other = threading.Thread(target=idle_team, args=(cores, ready, release))
    other.start()
    ready.wait()
    beside_idle_team = measure()
    release.set()
    other.join()
    after_it_ended = measure()
    print(
        json.dumps(
            {
                "cores": cores,
                "tokens": args.tokens,
                "linear": args.linear,
                "alone_ms": alone,
                "beside_an_idle_team_ms": beside_idle_team,
                "after_it_ended_ms": after_it_ended,
            }
        )
    )


if __name__ == "__main__":
    main()
