"""sd_notify and socket activation; both do nothing when not running under systemd."""

from __future__ import annotations

import os
import socket

SD_LISTEN_FDS_START = 3


def sd_notify(message: str) -> None:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode())
        except OSError:
            pass  # systemd went away; nothing to tell


def inherited_socket() -> socket.socket | None:
    """The listening socket systemd passed us (LISTEN_FDS), if it is meant for this process."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()) or int(os.environ.get("LISTEN_FDS", "0")) < 1:
        return None
    return socket.socket(fileno=SD_LISTEN_FDS_START)
