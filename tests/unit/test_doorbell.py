"""The doorbell lives in the shared temporary folder, where another local user may have put
something first: a ring never follows a link there, and never removes what is not a socket."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from bot.doorbell import Doorbell


def test_a_ring_does_not_follow_a_link_planted_where_the_folder_goes(tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir(mode=0o700)
    (precious / "data").write_text("keep me")
    bell = Doorbell(tmp_path / "bell")
    (tmp_path / "bell").symlink_to(precious)
    bell.ring()
    assert bell.wait(0) is False  # nor does it listen there
    assert (precious / "data").read_text() == "keep me"


def test_a_ring_removes_a_dead_waiters_socket_and_nothing_else(tmp_path: Path) -> None:
    bell = Doorbell(tmp_path / "bell")
    assert bell.wait(0) is True  # listening: the folder is made, closed to others
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(bell.folder / "dead"))
    dead.close()  # its socket file stays, with nobody behind it
    (bell.folder / "not-a-socket").write_text("x")
    os.mkfifo(bell.folder / "fifo")
    bell.ring()
    names = sorted(path.name for path in bell.folder.iterdir())
    bell.close()
    assert "dead" not in names
    assert "not-a-socket" in names and "fifo" in names


def test_a_folder_open_to_others_is_not_listened_on(tmp_path: Path) -> None:
    folder = tmp_path / "bell"
    folder.mkdir()
    folder.chmod(0o777)
    assert Doorbell(folder).wait(0) is False
