"""The server's own account of a load run, from its /metrics page read before and after.

`breakdown` turns the difference into where a request's time went (mean milliseconds per stage:
queue, tokenization, inference, postprocessing, total), the mean batch, and the CPU the frontends
spent per request and the device per item, so a kit run on a lent GPU says by itself whether the
frontends, the device loop or the forward held a model back.
"""

from __future__ import annotations

import urllib.request

WATCHED = ("sie_batch_size", "sie_forward_seconds", "sie_request_stage_seconds", "sie_process_cpu_seconds")
STAGES = ("queue", "tokenization", "inference", "postprocessing", "total")


def scrape(url: str) -> dict[str, float]:
    """The watched families' samples (histogram buckets left out), keyed by name and labels."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(WATCHED) and "_bucket{" not in line:
            name, _, value = line.rpartition(" ")
            values[name] = values.get(name, 0.0) + float(value)
    return values


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    changed = {name: round(after[name] - before.get(name, 0.0), 4) for name in after}
    return {name: value for name, value in changed.items() if value}


def breakdown(changed: dict[str, float], model: str) -> dict[str, object]:
    """Per-request and per-item figures of one model's run from a `delta` of two scrapes."""

    def total(family: str, *labels: str) -> float:
        prefix = family + "{"
        return sum(v for k, v in changed.items() if k.startswith(prefix) and all(x in k for x in labels))

    of_model = f'model="{model}"'
    requests = total("sie_request_stage_seconds_count", of_model, 'stage="total"')
    items = total("sie_batch_size_sum", of_model)
    batches = total("sie_batch_size_count", of_model)
    stage_ms = {
        stage: round(1000 * total("sie_request_stage_seconds_sum", of_model, f'stage="{stage}"') / count, 3)
        for stage in STAGES
        if (count := total("sie_request_stage_seconds_count", of_model, f'stage="{stage}"'))
    }
    frontend_s = total("sie_process_cpu_seconds_total", 'role="frontend"')
    device_s = total("sie_process_cpu_seconds_total", 'role="device"')
    return {
        "stage_ms": stage_ms,
        "items_per_batch": round(items / batches, 2) if batches else None,
        "frontend_us_per_request": round(1e6 * frontend_s / requests, 1) if requests else None,
        "device_us_per_item": round(1e6 * device_s / items, 1) if items else None,
    }
