"""Bearer tokens: gathered once by the supervisor, handed to frontends in an inherited memfd.

Settings travel to children on argv, which any local user can read in /proc, so tokens never go
there (`Settings.encode` drops them). The supervisor writes them into an anonymous memory file
instead; each frontend, restarted ones too, reads the same bytes from its inherited descriptor.
"""

from __future__ import annotations

import os
from pathlib import Path

from sie.memfd import read_all, write_all
from sie.settings import Settings


def parse_tokens(text: str) -> list[str]:
    """Tokens from a token file: one per line; blank lines and `#` comments are skipped."""
    tokens = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            tokens.append(line)
    return tokens


def load_tokens(settings: Settings) -> list[str]:
    """`--auth-token` values plus `--auth-token-file` lines; ValueError when the file is unusable."""
    tokens = list(settings.auth_tokens or [])
    if settings.auth_token_file:
        path = Path(settings.auth_token_file)
        try:
            from_file = parse_tokens(path.read_text())
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read auth token file {path}: {exc}") from None
        if not from_file:
            raise ValueError(f"auth token file {path} holds no token")
        tokens += from_file
    for token in tokens:
        if any(c.isspace() for c in token) or not token.isprintable():
            raise ValueError("an auth token must be printable and hold no whitespace")
    return list(dict.fromkeys(tokens))


def share_tokens(tokens: list[str]) -> int:
    """A memfd holding the tokens, one per line (close-on-exec; pass it with `pass_fds`); -1 if none."""
    if not tokens:
        return -1
    fd = os.memfd_create("sie-tokens", os.MFD_CLOEXEC)
    write_all(fd, "\n".join(tokens).encode())
    return fd


def read_shared_tokens(fd: int) -> list[str]:
    if fd < 0:
        return []
    data = read_all(fd)
    os.close(fd)
    return parse_tokens(data.decode())
