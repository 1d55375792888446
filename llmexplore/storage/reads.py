"""The units a :class:`~llmexplore.storage.reader.StagingReader` hands out and reads from: one staged read
(:class:`Staged`: pending, then a hit with a verified payload or a miss with its reason) and one open file for
raw range reads (:class:`RangeFile`), with the O_DIRECT probe (:func:`direct_io_supported`) and the warning a
file system that refuses O_DIRECT raises (:class:`DirectIOFallbackWarning`).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import warnings
from pathlib import Path
from typing import Any

from .blocks import ALIGN

__all__ = ["DirectIOFallbackWarning", "Staged", "RangeFile", "direct_io_supported", "aligned"]

O_DIRECT = getattr(os, "O_DIRECT", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class DirectIOFallbackWarning(RuntimeWarning):
    """The file system refused O_DIRECT: reads are buffered (they measure the page cache, not the device)."""


def aligned(n: int) -> int:
    """``n`` [B] rounded up to the 4 KiB O_DIRECT alignment."""
    return -(-n // ALIGN) * ALIGN


def direct_io_supported(directory: str | os.PathLike) -> bool:
    """Whether files in ``directory`` can be read with O_DIRECT (a 4 KiB probe file is written, read with
    O_DIRECT into an aligned buffer, and removed)."""
    if not O_DIRECT:
        return False
    path = Path(directory) / f".llmexplore-odirect-probe-{os.getpid()}-{threading.get_ident()}"
    buf = mmap.mmap(-1, ALIGN)
    try:
        path.write_bytes(b"\x00" * ALIGN)
        fd = os.open(path, os.O_RDONLY | O_DIRECT | O_CLOEXEC)
        try:
            view = memoryview(buf)
            try:
                return os.preadv(fd, [view], 0) == ALIGN
            finally:
                view.release()
        finally:
            os.close(fd)
    except OSError:
        return False
    finally:
        buf.close()
        try:
            path.unlink()
        except OSError:
            pass


class Staged:
    """One read: pending, then a hit (``ok``, ``payload``) or a miss (``reason``).

    ``payload`` is a read-only memoryview of the staging buffer (the block's verified payload, or the raw
    range), valid until :meth:`release` (or the end of a ``with`` block). Release every hit; a miss holds no
    buffer (releasing it is harmless). ``direct``: whether O_DIRECT was used (None if no file was opened);
    ``read_s``: time from the start of the read (open included) to its verified end [s]; ``tag``: the
    caller's, untouched.
    """

    __slots__ = ("path", "key", "offset", "nbytes", "verify", "tag", "reason", "payload", "direct", "read_bytes",
                 "read_s", "_reader", "_buf", "_view", "_file", "_size", "_warning", "_released", "_completed",
                 "_done", "_on_done", "_error")

    def __init__(self, path: str, key: str | None = None, offset: int = 0, nbytes: int = 0, verify: bool = True,
                 tag: Any = None, reader: Any = None, file: Any = None) -> None:
        self.path, self.key, self.offset, self.nbytes, self.verify, self.tag = path, key, offset, nbytes, verify, tag
        self.reason: str | None = None
        self.payload: memoryview | None = None
        self.direct: bool | None = None
        self.read_bytes = 0
        self.read_s = float("nan")
        self._reader, self._file = reader, file
        self._buf = self._view = self._warning = self._on_done = self._error = self._done = None
        self._size = 0
        self._released = False
        self._completed = True  # until it is queued

    def __repr__(self) -> str:
        state = "pending" if not self._completed else "hit" if self.reason is None else f"miss ({self.reason})"
        return f"Staged({self.path!r}, {state}, {self.nbytes:,} B)"

    @property
    def ok(self) -> bool:
        """True once the read has completed and its data is valid (False while pending and for a miss)."""
        return self._completed and self.reason is None and self.payload is not None

    def done(self) -> bool:
        return self._completed

    def result(self, timeout: float | None = None) -> "Staged":
        """Wait until the read completes (a hit or a miss); return self (TimeoutError after ``timeout`` [s]).
        Warns here, in the caller's thread, when this read found a file system that refuses O_DIRECT (once per
        file system and reader)."""
        if not self._completed:
            done = self._done
            if not done.acquire(timeout=-1 if timeout is None else timeout):
                raise TimeoutError(f"the read of {self.path} did not complete within {timeout} s")
            done.release()
        if self._error is not None:
            raise self._error
        if self._warning is not None:
            msg, self._warning = self._warning, None
            warnings.warn(msg, DirectIOFallbackWarning, stacklevel=2)
        return self

    def release(self) -> None:
        """Give the buffer back (waits for a pending read first). Idempotent."""
        if self._released:
            return
        if not self._completed:
            self._done.acquire()
            self._done.release()
        self._released = True
        if self._buf is not None:
            self._reader._give_back(self)

    def __enter__(self) -> "Staged":
        return self.result()

    def __exit__(self, *exc) -> None:
        self.release()


class RangeFile:
    """One open file for many raw range reads (calibration, benchmarks): the descriptor is shared by the
    reads, as fio shares its file. Opened with O_DIRECT when the file system allows it (a first aligned read
    is tried), else buffered with a :class:`DirectIOFallbackWarning` (here, in the caller's thread). Make it
    with :meth:`~llmexplore.storage.reader.StagingReader.open_file`; close it (or use ``with``) after its reads are released."""

    def __init__(self, path: str | os.PathLike, *, direct: bool = True) -> None:
        self.path = os.fspath(path)
        self.fd = -1
        self.direct = False
        flags = os.O_RDONLY | O_CLOEXEC
        if direct and O_DIRECT:
            try:
                fd = os.open(self.path, flags | O_DIRECT)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
            else:
                if self._direct_read_works(fd):
                    self.fd, self.direct = fd, True
                else:
                    os.close(fd)
            if self.fd < 0:
                warnings.warn(f"the file system of {os.path.dirname(os.path.abspath(self.path))} refuses O_DIRECT: "
                              f"reading with buffered I/O instead (these reads measure the page cache, not the "
                              f"device)", DirectIOFallbackWarning, stacklevel=3)
        if self.fd < 0:
            self.fd = os.open(self.path, flags)
        self.size = os.fstat(self.fd).st_size

    @staticmethod
    def _direct_read_works(fd: int) -> bool:
        buf = mmap.mmap(-1, ALIGN)
        view = memoryview(buf)
        try:
            os.preadv(fd, [view], 0)
            return True
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            return False
        finally:
            view.release()
            buf.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "RangeFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RangeFile({self.path!r}, direct={self.direct})"
