"""A doorbell: processes on one machine that wait for something (a message put on the
embedded broker, an agent slot freed) each listen on a datagram socket of their own in a
folder kept for that thing, and whoever makes it happen sends each of them a byte. A ring
is a hint, never the truth: a waiter looks at what it waits for after each ring, and again
on a timer of its own, so a lost ring costs a delay, never a wait for ever.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import socket
import stat
import tempfile
from pathlib import Path


class Doorbell:
    """Wake the processes of this machine that wait for one thing (a message put, a slot freed)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._socket: socket.socket | None = None
        self._path: Path | None = None

    @classmethod
    def named(cls, kind: str, of: str) -> Doorbell:
        """Return the doorbell for kind (say "broker") of one thing (its URL, its folder):
        the same on every call in every process of this machine."""
        # Under the temporary folder, not beside what it serves: a socket's path is short.
        digest = hashlib.sha256(of.encode()).hexdigest()[:16]
        return cls(Path(tempfile.gettempdir()) / f"gaffer-{kind}-{digest}")

    def ring(self) -> None:
        """Wake every process waiting on this doorbell here. Never raises: a ring is a hint."""
        with contextlib.suppress(OSError):
            if not _ours(self.folder):
                return  # none, or not a folder of this user's own: nobody of ours listens
            names = os.listdir(self.folder)
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
                sender.setblocking(False)
                for name in names:
                    _send(sender, self.folder / name)

    def ring_here(self) -> None:
        """Wake the one waiting on this doorbell's own socket."""
        if self._path is not None:
            with (
                contextlib.suppress(OSError),
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender,
            ):
                sender.setblocking(False)
                _send(sender, self._path)

    def wait(self, timeout: float) -> bool:
        """Return when rung (True) or after timeout seconds; False if no doorbell can be had
        here, without waiting."""
        return self.rung_within(timeout) is not None

    def rung_within(self, timeout: float) -> bool | None:
        """Wait up to timeout seconds and say whether a ring came; None, without waiting,
        if no doorbell can be had here."""
        listening = self._listen()
        if listening is None:
            return None
        ready, _, _ = select.select([listening], [], [], timeout)
        while ready:  # one look answers every ring that came meanwhile
            try:
                listening.recv(16)
            except BlockingIOError:
                break
        return bool(ready)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None
            with contextlib.suppress(OSError):  # the last to leave takes the folder away
                self.folder.rmdir()

    def _listen(self) -> socket.socket | None:
        if self._socket is None:
            try:
                self.folder.mkdir(mode=0o700, exist_ok=True)
                if not _ours(self.folder):
                    return None  # another user's folder: rings from it are not to be trusted
                path = self.folder / f"{os.getpid()}-{id(self)}"
                listening = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                listening.bind(str(path))
            except OSError:
                return None
            listening.setblocking(False)
            self._socket, self._path = listening, path
        return self._socket


def _ours(folder: Path) -> bool:
    """A real folder (not a link to one) of this user's, closed to everyone else."""
    found = folder.lstat()
    return (
        stat.S_ISDIR(found.st_mode)
        and found.st_uid == os.getuid()
        and not found.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    )


def _send(sender: socket.socket, path: Path) -> None:
    try:
        sender.sendto(b"!", str(path))
    except BlockingIOError:
        pass  # its queue of rings is full: it wakes anyway
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(OSError):  # the waiter that listened there is gone
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()
    except OSError:
        pass  # a ring is a hint; the waiter looks again on its own
