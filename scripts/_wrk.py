"""`wrk` (Debian package `wrk`), a C load generator that costs the box almost no CPU, for the
benchmarks: a Lua script that posts given bodies in turn, and the figures of one run."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any


def body_script(folder: Path, bodies: list[bytes], target: str, content_type: str, accept: str) -> Path:
    """A script posting `bodies` to `target` in turn; the bodies are files read once at start, so
    they may be binary (msgpack with image bytes) and large."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, body in enumerate(bodies):
        (folder / f"body-{i}.bin").write_bytes(body)
    lua = ["bodies = {}", f"for i = 0, {len(bodies) - 1} do",
           f'  local file = io.open("{folder}/body-" .. i .. ".bin", "rb")',
           "  bodies[i + 1] = file:read(\"*a\")", "  file:close()", "end",
           "counter = 0", 'wrk.method = "POST"', f'wrk.headers["content-type"] = "{content_type}"',
           f'wrk.headers["accept"] = "{accept}"', "request = function()",
           "  counter = counter % #bodies + 1",
           f'  return wrk.format(nil, "{target}", nil, bodies[counter])', "end"]  # fmt: skip
    path = folder / "post.lua"
    path.write_text("\n".join(lua))
    return path


def run_wrk(url: str, script: Path, seconds: float, connections: int) -> dict[str, Any]:
    """requests_per_s, requests (answered, any status), non_2xx, p50_ms and p99_ms of one run."""
    done = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds:.0f}s", "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    out = done.stdout
    result: dict[str, Any] = {"requests_per_s": float(_find(r"Requests/sec:\s+([\d.]+)", out))}
    result["requests"] = int(_find(r"(\d+) requests in", out))
    result["non_2xx"] = int(_find(r"Non-2xx or 3xx responses: (\d+)", out, "0"))
    for q in ("50", "99"):
        result[f"p{q}_ms"] = _ms(_find(rf"\s{q}%\s+([\d.]+\w+)", out))
    return result


def _find(pattern: str, text: str, default: str | None = None) -> str:
    match = re.search(pattern, text)
    if match is None:
        if default is None:
            raise SystemExit(f"wrk output did not match {pattern!r}:\n{text}")
        return default
    return match.group(1)


def _ms(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(\w+)", value).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]
