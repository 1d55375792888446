"""A staging reader: KV block files read with O_DIRECT into aligned buffers, bounded in flight and in bytes.

Which question it answers: how fast do cached KV blocks really come back from this file system into host
memory, with at most ``max_inflight`` reads in flight and at most ``budget_bytes`` of staging buffers
(docs/models.md §6.4), and is every block handed out intact?

**How it reads.** A bounded pool of ``max_inflight`` reading threads, fed from a queue, runs
:func:`os.preadv` (which releases the GIL) into page-aligned buffers from anonymous :mod:`mmap` memory, on files opened with ``O_DIRECT`` so the
page cache is bypassed (offsets, lengths and buffers are 4 KiB multiples). Where the file system refuses
O_DIRECT (EINVAL on open or on the read, as tmpfs did before Linux 6.6 and some FUSE and network file systems
do) the reader falls back to buffered reads and warns once per file system (:class:`DirectIOFallbackWarning`,
raised in the consumer's thread by :meth:`Staged.result`); buffered numbers then measure the page cache, not
the device. Each :class:`Staged` says whether its read was direct.

**Bounds and backpressure.** Every submitted read reserves its buffer (the file size rounded up to 4 KiB)
from the budget before it is queued. When the budget is full, :meth:`StagingReader.submit` BLOCKS until a
consumer releases a buffer (``block=True``, the default; ``timeout`` bounds the wait), or returns ``None``
at once with ``block=False`` ("would block"). It never over-allocates: the bytes mapped for staging (buffers
in use plus idle buffers kept for reuse) never exceed the budget, and a read larger than the whole budget is
a miss ("too_large"), not a deadlock. Released buffers are kept for reuse within the budget (a fresh
anonymous mapping costs page zeroing and faults, ~0.2-0.5 ms per MiB here, 20-40 % of a 1 MiB read) and
unmapped by :meth:`StagingReader.close`. A buffer whose payload the consumer still exports (say a numpy array
over it) when it releases is not reused: it stays counted until the consumer's last reference goes, then it
is unmapped and its bytes return to the budget.

**Integrity.** A block read is verified (header, key, length, CRC-32: :func:`~.blocks.parse_block`) in the
reader's thread before it is handed out. A failed read (missing file, short read, EIO, a corrupted block) is a
miss with its reason (``Staged.reason``), never data; the file descriptor is closed and the buffer returned in
every case. A file deleted while its read is in flight is either read whole (POSIX keeps the open inode) or a
miss.

**A bounded pool of threads over** ``os.preadv``, **not io_uring**: measured against the ``liburing`` binding
and fio (docs/models.md §6.4), io_uring was not faster at KV-block sizes, holds the GIL while it waits and
keeps a buffer exported for good; this reader reaches 0.94-0.96 of fio's bandwidth at 1-4 MiB x QD4.
"""

from __future__ import annotations

import collections
import errno
import mmap
import os
import queue
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Iterator, Mapping

from .. import _check
from ..errors import SpecError
from .blocks import ALIGN, parse_block
from .reads import O_CLOEXEC, O_DIRECT, RangeFile, Staged, aligned

__all__ = ["StagingReader"]

#: largest staging budget [B] (1 TiB: a bound on a typo, not a recommendation)
MAX_BUDGET = 1 << 40


class StagingReader:
    """Read block files (verified) or raw aligned ranges into a bounded staging area.

    ``max_inflight``: reads executing at once (the number of reading threads, i.e. the queue depth).
    ``budget_bytes``: most bytes of staging buffers mapped at any time (in use or idle for reuse). ``direct``:
    try O_DIRECT (False: buffered reads, e.g. to measure the page cache on purpose). ``reuse_buffers``: keep
    released buffers for the next reads of the same size (within the budget).

    Counters for tests and dashboards: ``allocated_bytes`` (buffers held by pending reads and by unreleased
    hits), ``cached_bytes`` (idle buffers kept for reuse), ``inflight`` (reads executing), ``pending``
    (submitted, not complete), and :meth:`stats`. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, max_inflight: int = 4, budget_bytes: int = 256 << 20, *, direct: bool = True,
                 reuse_buffers: bool = True) -> None:
        self.max_inflight = _check.integer("max_inflight", max_inflight, lo=1, hi=1024)
        self.budget_bytes = _check.integer("budget_bytes", budget_bytes, lo=ALIGN, hi=MAX_BUDGET, unit="B")
        self.direct = _check.boolean("direct", direct) and bool(O_DIRECT)
        self.reuse_buffers = _check.boolean("reuse_buffers", reuse_buffers)
        self._cond = threading.Condition(threading.RLock())  # re-entrant: a finalizer may run under it
        self._queue: queue.SimpleQueue[Staged | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._free: dict[int, list[mmap.mmap]] = collections.defaultdict(list)
        self._closed = False
        self.allocated_bytes = 0
        self.cached_bytes = 0
        self.inflight = 0
        self.pending = 0
        self.peak_allocated_bytes = 0
        self.peak_mapped_bytes = 0
        self.peak_inflight = 0
        self.delivered = 0
        self.bytes_read = 0
        self.direct_reads = 0
        self.buffered_reads = 0
        self.misses: collections.Counter[str] = collections.Counter()
        self._refused_dirs: set[str] = set()
        self._warned_devs: set[int] = set()

    def __repr__(self) -> str:
        return (f"StagingReader(max_inflight={self.max_inflight}, budget_bytes={self.budget_bytes:,}, "
                f"allocated={self.allocated_bytes:,}, inflight={self.inflight})")

    # ---- submitting ----------------------------------------------------------------------------------------
    def submit(self, path: str | os.PathLike | RangeFile, *, key: str | None = None, offset: int = 0,
               nbytes: int | None = None, verify: bool = True, tag: Any = None, block: bool = True,
               timeout: float | None = None, on_done: Callable[[Staged], None] | None = None) -> Staged | None:
        """Queue one read; return its :class:`Staged` (wait with ``.result()``), or None if the budget is full
        and ``block`` is False (or ``timeout`` [s] passed first): BACKPRESSURE, never over-allocation.

        ``verify=True`` (a block file): the whole file is read from offset 0 and checked with
        :func:`~.blocks.parse_block` against ``key`` (if given); ``nbytes`` defaults to the file's size.
        ``verify=False`` (a raw range, for calibration): ``nbytes`` bytes at ``offset``, both multiples of
        4 KiB, handed out unchecked; ``path`` may be a :class:`RangeFile` (one descriptor for many reads). A
        missing file or a read larger than the budget is a miss at once. ``on_done(staged)`` is called once the
        read completes (in a reader thread; keep it short, e.g. a queue's put).
        """
        file = None
        if isinstance(path, RangeFile):
            file, path = path, path.path
            if verify or file.fd < 0:
                raise SpecError("a RangeFile is for raw reads of an open file (verify=False), got "
                                + ("verify=True" if verify else "a closed file"))
        elif type(path) is not str:
            path = os.fspath(path)
            if not isinstance(path, str):
                raise SpecError(f"path must be a text path, got {_check.shown(path)}")
        if verify is not True and verify is not False:
            verify = _check.boolean("verify", verify)
        if timeout is not None:
            timeout = _check.number("timeout", timeout, lo=0.0, unit="s")
        st = Staged(path, key, 0, 0, verify, tag, self, file)
        if verify:
            if offset != 0:
                raise SpecError(f"offset must be 0 for a block read (verify=True), got {_check.shown(offset)}")
            if nbytes is None:
                try:
                    nbytes = os.stat(path).st_size
                except FileNotFoundError:
                    return self._missed_now(st, "missing", on_done)
                except OSError:
                    return self._missed_now(st, "io_error", on_done)
            elif type(nbytes) is not int or nbytes < 0:
                nbytes = _check.integer("nbytes", nbytes, lo=0, hi=1 << 62)
            size = max(aligned(nbytes), ALIGN)
        else:
            if type(offset) is not int or offset < 0:
                offset = _check.integer("offset", offset, lo=0, hi=1 << 62, unit="B")
            if nbytes is None:
                nbytes = ALIGN
            elif type(nbytes) is not int or nbytes < ALIGN:
                nbytes = _check.integer("nbytes", nbytes, lo=ALIGN, hi=1 << 62, unit="B")
            if offset % ALIGN or nbytes % ALIGN:
                raise SpecError(f"offset and nbytes of a raw read must be multiples of {ALIGN} (O_DIRECT), got "
                                f"{offset} and {nbytes}")
            st.offset = offset
            size = nbytes
        st.nbytes = nbytes
        if size > self.budget_bytes:
            return self._missed_now(st, "too_large", on_done)
        buf = self._acquire(size, block, timeout)
        if buf is None:
            return None
        st._buf, st._size, st._on_done = buf, size, on_done
        st._done = threading.Lock()
        st._done.acquire()
        st._completed = False
        if len(self._threads) < self.max_inflight:
            self._start_thread()
        self._queue.put(st)
        return st

    def _missed_now(self, st: Staged, reason: str, on_done) -> Staged:
        st.reason = reason
        with self._cond:
            self.misses[reason] += 1
        if on_done is not None:
            on_done(st)
        return st

    def _start_thread(self) -> None:
        with self._cond:
            if len(self._threads) >= self.max_inflight or self._closed:
                return
            t = threading.Thread(target=self._worker, name=f"llmexplore-reader-{len(self._threads)}", daemon=True)
            self._threads.append(t)
        t.start()

    # ---- the staging budget --------------------------------------------------------------------------------
    def _mapped(self) -> int:
        return self.allocated_bytes + self.cached_bytes

    def _acquire(self, size: int, block: bool, timeout: float | None) -> mmap.mmap | None:
        """A buffer of ``size`` bytes within the budget: an idle one of that size, else a new mapping once
        the budget has room (idle buffers of other sizes are unmapped to make it); None if that would
        block and ``block`` is False, or ``timeout`` passes. Counts the read as pending."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise SpecError("StagingReader.submit: the reader is closed")
                idle = self._free.get(size)
                if idle:
                    buf = idle.pop()
                    self.cached_bytes -= size
                    self._reserve(size)
                    return buf
                while self._mapped() + size > self.budget_bytes and self.cached_bytes:
                    self._evict_one()
                if self._mapped() + size <= self.budget_bytes:
                    self._reserve(size)
                    break
                if not block:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
        try:
            return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, ValueError, MemoryError):
            with self._cond:
                self.allocated_bytes -= size
                self.pending -= 1
                self._cond.notify_all()
            raise

    def _reserve(self, size: int) -> None:
        self.allocated_bytes += size
        self.pending += 1
        if self.allocated_bytes > self.peak_allocated_bytes:
            self.peak_allocated_bytes = self.allocated_bytes
        if self.allocated_bytes + self.cached_bytes > self.peak_mapped_bytes:
            self.peak_mapped_bytes = self.allocated_bytes + self.cached_bytes

    def _evict_one(self) -> None:
        size = next(s for s, bufs in self._free.items() if bufs)
        self._free[size].pop().close()
        self.cached_bytes -= size

    def _give_back(self, st: Staged) -> None:
        """Return ``st``'s buffer to the pool (or unmap it); if the consumer still exports it, leave it
        counted until its last reference goes."""
        buf, size = st._buf, st._size
        st._buf = None
        views_free = True
        for view in (st.payload, st._view):
            if view is not None:
                try:
                    view.release()
                except BufferError:  # e.g. a numpy array over the payload
                    views_free = False
        st.payload = st._view = None
        if views_free:
            try:
                buf.resize(size)  # raises BufferError while any view of the buffer is alive
            except BufferError:
                views_free = False
            except (OSError, ValueError, SystemError):
                pass  # resize is unsupported here: the views above were ours, and they are released
        with self._cond:
            if not views_free:
                weakref.finalize(buf, self._orphan_unmapped, size)
                del buf
            elif self.reuse_buffers and not self._closed:
                self.allocated_bytes -= size
                self._free[size].append(buf)
                self.cached_bytes += size
            else:
                self.allocated_bytes -= size
                buf.close()
            self._cond.notify_all()

    def _orphan_unmapped(self, size: int) -> None:
        with self._cond:
            self.allocated_bytes -= size
            self._cond.notify_all()

    # ---- the reads themselves (reader threads) -------------------------------------------------------------
    def _worker(self) -> None:
        get = self._queue.get
        while True:
            st = get()
            if st is None:
                return
            try:
                self._run(st)
            except BaseException as exc:  # a bug, not a bad block: the consumer sees it in result()
                st._error = exc
            finally:
                st._completed = True
                st._done.release()
                if st._on_done is not None:
                    try:
                        st._on_done(st)
                    except Exception as exc:  # noqa: BLE001 - the callback's own bug, reported to the consumer
                        st._error = st._error or exc

    def _run(self, st: Staged) -> None:
        cond = self._cond
        with cond:
            self.inflight += 1
            if self.inflight > self.peak_inflight:
                self.peak_inflight = self.inflight
        fd = -1
        ok = False
        size = st._size
        t0 = time.perf_counter()
        try:
            st._view = memoryview(st._buf)
            if st._file is not None:  # a shared descriptor: its owner closes it
                st.direct = st._file.direct
                got = self._read(st._file.fd, st, size)
            else:
                fd, st.direct = self._open(st)
                try:
                    got = self._read(fd, st, size)
                except OSError as exc:
                    if not (st.direct and exc.errno == errno.EINVAL):
                        raise
                    # the file system accepted O_DIRECT on open but refuses the read: buffered, once more
                    os.close(fd)
                    fd = -1
                    self._refused(st, os.path.dirname(os.path.abspath(st.path)))
                    fd, st.direct = os.open(st.path, os.O_RDONLY | O_CLOEXEC), False
                    got = self._read(fd, st, size)
            if st.verify:
                payload, reason = parse_block(st._view[:got], st.key)
                if payload is not None:
                    st.payload = payload.toreadonly()
                    payload.release()
            else:
                reason = None if got >= st.nbytes else "short"
                if reason is None:
                    st.payload = st._view[:st.nbytes].toreadonly()
            st.read_bytes = got
            st.reason = reason
            ok = reason is None
        except FileNotFoundError:
            st.reason = "missing"
        except (OSError, ValueError, MemoryError):  # EIO, EACCES, a file replaced by a directory, ...
            st.reason = "io_error"
        finally:
            if fd >= 0:
                os.close(fd)
            st.read_s = time.perf_counter() - t0
            if not ok and st.reason is None:
                st.reason = "io_error"
            with cond:
                self.inflight -= 1
                self.pending -= 1
                if ok:
                    self.delivered += 1
                    self.bytes_read += st.read_bytes
                    if st.direct:
                        self.direct_reads += 1
                    else:
                        self.buffered_reads += 1
                else:
                    self.misses[st.reason] += 1
            if not ok:
                st.payload = None
                self._give_back(st)

    def _open(self, st: Staged) -> tuple[int, bool]:
        flags = os.O_RDONLY | O_CLOEXEC
        if self.direct:
            parent = os.path.dirname(os.path.abspath(st.path)) if self._refused_dirs else ""
            if parent not in self._refused_dirs:
                try:
                    return os.open(st.path, flags | O_DIRECT), True
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    self._refused(st, parent or os.path.dirname(os.path.abspath(st.path)))
        return os.open(st.path, flags), False

    def _refused(self, st: Staged, parent: str) -> None:
        """Note that ``parent``'s file system refused O_DIRECT; the first read there per file system carries
        the warning to its consumer."""
        try:
            dev = os.stat(parent).st_dev
        except OSError:
            dev = -1
        with self._cond:
            self._refused_dirs.add(parent)
            first = dev not in self._warned_devs
            self._warned_devs.add(dev)
        if first:
            st._warning = (f"the file system of {parent} refuses O_DIRECT: reading with buffered I/O instead "
                           f"(these reads measure the page cache, not the device)")

    @staticmethod
    def _read(fd: int, st: Staged, size: int) -> int:
        """Read up to ``size`` bytes at ``st.offset`` into the buffer; the bytes read (short at end of file)."""
        view = st._view
        n = os.preadv(fd, [view[:size]] if size != len(view) else [view], st.offset)
        total = n
        while 0 < n and total < size and not (st.direct and n % ALIGN):
            # a short read that is not the end of the file (or, direct, not inside the last page): go on
            n = os.preadv(fd, [view[total:size]], st.offset + total)
            total += n
        return total

    def open_file(self, path: str | os.PathLike) -> RangeFile:
        """A :class:`RangeFile` of ``path`` for raw reads with this reader's O_DIRECT setting."""
        return RangeFile(path, direct=self.direct)

    # ---- consuming in a pipeline ---------------------------------------------------------------------------
    def stream(self, requests: Iterable[Mapping[str, Any] | str | os.PathLike], *, window: int | None = None
               ) -> Iterator[Staged]:
        """Submit ``requests`` (paths of block files, or dicts of :meth:`submit` arguments) and yield each
        completed read in completion order, keeping up to ``window`` (default ``2 * max_inflight``) reads
        submitted, as the budget allows. A yielded read (hit or miss) is released when the next one is
        requested (or when the generator is closed): copy what you need before that."""
        window = 2 * self.max_inflight if window is None else _check.integer("window", window, lo=1, hi=1 << 20)
        done: queue.SimpleQueue[Staged] = queue.SimpleQueue()
        put = done.put
        items = iter(requests)
        carry = None
        exhausted = False
        outstanding = 0
        current = None
        try:
            while True:
                while not exhausted and outstanding < window:
                    req = carry if carry is not None else next(items, None)
                    carry = None
                    if req is None:
                        exhausted = True
                        break
                    if type(req) is dict or isinstance(req, Mapping):
                        st = self.submit(**req, block=outstanding == 0, on_done=put)
                    else:
                        st = self.submit(req, block=outstanding == 0, on_done=put)
                    if st is None:  # the budget is full: consume first
                        carry = req
                        break
                    outstanding += 1
                if outstanding == 0:
                    return
                current = done.get()
                outstanding -= 1
                yield current.result()
                current.release()
                current = None
        finally:
            if current is not None:
                current.release()
            while outstanding:
                done.get().release()
                outstanding -= 1

    # ---- state ---------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters: delivered, misses by reason, bytes read, direct and buffered reads, peaks, and the
        directories whose file system refused O_DIRECT."""
        with self._cond:
            return {"delivered": self.delivered, "misses": dict(self.misses), "bytes_read": self.bytes_read,
                    "direct_reads": self.direct_reads, "buffered_reads": self.buffered_reads,
                    "allocated_bytes": self.allocated_bytes, "cached_bytes": self.cached_bytes,
                    "inflight": self.inflight, "pending": self.pending,
                    "peak_allocated_bytes": self.peak_allocated_bytes, "peak_mapped_bytes": self.peak_mapped_bytes,
                    "peak_inflight": self.peak_inflight, "direct_refused": sorted(self._refused_dirs)}

    def trim(self) -> None:
        """Unmap the idle buffers kept for reuse."""
        with self._cond:
            while self.cached_bytes:
                self._evict_one()
            self._free.clear()
            self._cond.notify_all()

    def close(self) -> None:
        """Finish the queued reads, stop the threads, unmap idle buffers. Unreleased hits stay valid until
        released (then they are unmapped). Idempotent."""
        with self._cond:
            self._closed = True
            threads = list(self._threads)
            self._cond.notify_all()
        for _ in threads:
            self._queue.put(None)
        for t in threads:
            if t is not threading.current_thread():
                t.join()
        with self._cond:
            self._threads.clear()
        self.trim()

    def __enter__(self) -> "StagingReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # a reader dropped without close(): let its threads end
        try:
            if not self._closed:
                self._closed = True
                for _ in self._threads:
                    self._queue.put(None)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
