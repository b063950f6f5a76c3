"""What a detached helper process (the Numba compile worker, the C++ library's builder) uses to
follow the process that started it and the cache it works for. Standard library only: a helper
calls these before it imports anything else (importing ``neuronsim.sim`` makes its cache directory
again)."""

from __future__ import annotations

import os
import select
from collections.abc import Callable


def lock_is_there(fd: int, path: str) -> bool:
    """Whether ``path`` is still the file open as ``fd`` (an open file's inode is never reused): false
    once the cache directory holding the lock file is deleted or replaced."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


def wait_for_exit(caller: int, gone: Callable[[], bool], poll_s: float = 0.5) -> bool:
    """Block until the caller has exited — EOF on ``caller``, a pipe's read end whose write end the
    caller keeps open until it is gone: True; or False as soon as ``gone()``."""
    while True:
        if gone():
            return False
        ready, _, _ = select.select([caller], [], [], poll_s)
        if ready and not os.read(caller, 4096):
            return True
