"""Summarize py-spy collapsed stacks (`py-spy record --format raw`): where a process spends its time.

    python scripts/profile_summary.py FILE [--top 25] [--filter sie/]

Prints the share of samples per function as self time (the innermost frame) and as inclusive
time (anywhere on the stack), so a per-stage cost reads off directly.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    file = match["file"]
    for marker in ("site-packages/", "/sie/", "/lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    return f"{match['func']} ({file})"


def summarize(path: Path) -> tuple[int, Counter[str], Counter[str]]:
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            anywhere[name] += count
    return total, own, anywhere


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--filter", default="", help="only functions whose name contains this")
    args = parser.parse_args(argv)
    total, own, anywhere = summarize(args.file)
    if total == 0:
        print(f"{args.file}: no samples")
        return 1
    print(f"{args.file}: {total} samples")
    for title, counts in (("self", own), ("inclusive", anywhere)):
        print(f"-- {title}")
        rows = [(n, c) for n, c in counts.most_common() if args.filter in n][: args.top]
        for name, count in rows:
            print(f"{100 * count / total:6.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
