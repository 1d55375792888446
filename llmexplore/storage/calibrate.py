"""Measure a directory's read bandwidth and latency with the staging reader, and save them as a storage preset.

Which question it answers: what are ``read_GBps``, ``latency_us``, ``queue_depth``, ``io_KiB`` and
``block_overhead_us`` of :class:`~llmexplore.specs.StorageTier` for the disk under PATH, so that the offload
model (docs/models.md §6.1) can price loads from *this* disk (``llmexplore calibrate-disk PATH``).

How. A unique scratch directory is made under PATH; a test file of ``size_MB`` megabytes of random bytes is
written, fsynced and dropped from the page cache (``posix_fadvise(DONTNEED)``); then, for every request size
and queue depth, the reader (:class:`~llmexplore.storage.reader.StagingReader`, O_DIRECT, one shared
descriptor as fio uses) reads 4 KiB-aligned requests at random offsets, with that many reads in flight, until
it has read as many bytes as the file holds or ``point_s`` seconds have passed (and at least
``max(8 x queue depth, 16)`` requests). Per point: ``read_GBps`` = bytes / wall time; ``latency_us`` = mean time of one
request in the reader's thread (the system call and its verification bookkeeping); ``p99_us``. Then
``block_overhead_us`` = median time to open and close a small block file (the per-block cost of a store of
one file per block). Every file is removed afterwards, also after an error or Ctrl-C.

Assumptions and limits. Reads are random within one file (KV blocks are scattered files; no readahead helps
O_DIRECT anyway). Where the file system refuses O_DIRECT the reads are buffered and measure the page cache as
soon as the file is cached (the result says so); on a memory file system (tmpfs, ramfs) every number is
memory, not a disk (the result says so too). ``h2d_GBps`` (host to GPU) is not measured: no GPU copy is made;
it is an option, 25 GB/s by default (pinned copies over PCIe Gen4 x16, an assumption). Numbers are of this
run: repeat on a quiet machine for a preset you rely on.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .. import _check
from ..errors import SpecError
from ..specs import STORAGE_KINDS, StorageTier
from .blocks import ALIGN
from .reader import StagingReader
from .reads import direct_io_supported

__all__ = ["DEFAULT_BLOCK_SIZES_KIB", "DEFAULT_QUEUE_DEPTHS", "DEFAULT_SIZE_MB", "DEFAULT_H2D_GBPS",
           "DEFAULT_SAVE", "calibrate", "check_directory", "filesystem_type", "preset_entry", "preset_yaml",
           "save_preset"]

#: request sizes measured by default [KiB]: 4 KiB (latency), 128 KiB (an NVMe request), 1 MiB (a KV block's share)
DEFAULT_BLOCK_SIZES_KIB = (4, 128, 1024)
DEFAULT_QUEUE_DEPTHS = (1, 4, 16)
#: the test file [MB] (each point reads at most as much, and for at most DEFAULT_POINT_S)
DEFAULT_SIZE_MB = 256
DEFAULT_POINT_S = 0.25
#: host -> GPU bandwidth written into the preset [GB/s] (not measured: an assumption)
DEFAULT_H2D_GBPS = 25.0
#: where ``llmexplore calibrate-disk`` saves the preset unless told otherwise (the current directory)
DEFAULT_SAVE = "llmexplore-disk.yaml"
#: most bytes of staging buffers one point may hold (queue depth x request size x 2) [B]
MAX_BUFFER_BYTES = 1 << 30
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs", "devtmpfs", "hugetlbfs")


def check_directory(path: Any, name: str = "PATH") -> Path:
    """``path`` as a Path if it is a directory this process can create files in; SpecError (one line naming
    ``name`` and the path) otherwise."""
    text = _check.text(name, os.fspath(path) if isinstance(path, os.PathLike) else path, max_len=4096)
    p = _check.user_path("path", text)
    kind = _check.path_kind(p)
    if kind != "dir":
        what = "does not exist" if kind == "missing" else f"is a {kind}" if kind in ("file", "other") else kind
        raise SpecError(f"{name} must be a writable directory, got {text!r} ({what})")
    if not os.access(p, os.W_OK | os.X_OK):
        raise SpecError(f"{name} must be a writable directory, got {text!r} (permission denied)")
    return p


def filesystem_type(path: str | os.PathLike) -> str:
    """The type of the file system holding ``path`` (``"ext4"``, ``"tmpfs"``, ...) from /proc/self/mounts;
    ``"unknown"`` where that cannot be read."""
    try:
        target = os.path.realpath(path)
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            mounts = [line.split() for line in fh]
    except OSError:
        return "unknown"
    best, kind = "", "unknown"
    for fields in mounts:
        if len(fields) < 3:
            continue
        point = fields[1].encode("latin-1", "replace").decode("unicode_escape", "replace")  # \040 = space
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


#: the largest test file [MB]: 64 GB, far above any page cache worth defeating on one machine
MAX_SIZE_MB = 1 << 16


def _sizes(block_sizes_KiB: Sequence[int], queue_depths: Sequence[int], size_MB: int) -> tuple:
    sizes = [_check.integer("block_sizes_KiB", b, lo=4, hi=1 << 20, unit="KiB") for b in block_sizes_KiB]
    if not sizes:
        raise SpecError("block_sizes_KiB must name at least one request size [KiB], got none")
    bad = [b for b in sizes if b % 4]
    if bad:
        raise SpecError(f"block_sizes_KiB must be multiples of 4 KiB (O_DIRECT), got {bad[0]}")
    qds = [_check.integer("queue_depths", q, lo=1, hi=256) for q in queue_depths]
    if not qds:
        raise SpecError("queue_depths must name at least one queue depth, got none")
    size = _check.integer("size_MB", size_MB, lo=1, hi=MAX_SIZE_MB, unit="MB")
    file_B = size * 10**6 // ALIGN * ALIGN
    if max(sizes) * 1024 > file_B:
        raise SpecError(f"block_sizes_KiB must fit in the test file of size_MB = {size} MB ({file_B:,} B), got "
                        f"{max(sizes)} KiB")
    worst = max(sizes) * 1024 * max(qds) * 2
    if worst > MAX_BUFFER_BYTES:
        raise SpecError(f"queue_depths x block_sizes_KiB must stay within {MAX_BUFFER_BYTES >> 20} MiB of buffers "
                        f"(2 x queue depth x request size), got {max(qds)} x {max(sizes)} KiB")
    return sorted(set(sizes)), sorted(set(qds)), size, file_B


def _write_test_file(path: Path, nbytes: int, seed: int) -> None:
    """``nbytes`` of random bytes (incompressible), fsynced, then dropped from the page cache."""
    rng = np.random.default_rng(seed)
    chunk = 4 << 20
    pool = np.frombuffer(rng.bytes(chunk), dtype=np.uint64).copy()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        written = 0
        while written < nbytes:
            pool[0] = written  # every chunk differs: no deduplication
            view = memoryview(pool).cast("B")[: min(chunk, nbytes - written)]
            while view.nbytes:
                n = os.write(fd, view)
                view = view[n:]
                written += n
        os.fsync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _open_close_us(work: Path, direct: bool, files: int = 16, rounds: int = 12) -> float:
    """Median time to open and close one small block file [us]."""
    paths = []
    for i in range(files):
        p = work / f"block-{i:03d}.kvb"
        p.write_bytes(b"\x00" * ALIGN)
        paths.append(str(p))
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | (getattr(os, "O_DIRECT", 0) if direct else 0)
    times = []
    for _ in range(rounds):
        for p in paths:
            t = time.perf_counter()
            os.close(os.open(p, flags))
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def _measure_point(reader: StagingReader, f, io_B: int, qd: int, file_B: int, want_B: int, point_s: float,
                   rng: np.random.Generator) -> dict:
    n_slots = file_B // io_B
    min_requests = max(8 * qd, 16)
    max_requests = max(min_requests, want_B // io_B)
    state = {"submitted": 0, "t_end": None}
    t0 = time.perf_counter()

    def requests():
        while state["submitted"] < max_requests:
            if state["submitted"] >= min_requests and time.perf_counter() - t0 > point_s:
                return
            state["submitted"] += 1
            yield {"path": f, "offset": int(rng.integers(n_slots)) * io_B, "nbytes": io_B, "verify": False}

    times, total, misses = [], 0, 0
    for st in reader.stream(requests(), window=2 * qd):
        if st.ok:
            times.append(st.read_s)
            total += st.nbytes
        else:
            misses += 1
    wall = time.perf_counter() - t0
    lat = np.array(times) * 1e6 if times else np.array([np.nan])
    return {"io_KiB": io_B // 1024, "queue_depth": qd, "read_GBps": total / wall / 1e9 if wall > 0 else 0.0,
            "latency_us": float(np.mean(lat)), "p99_us": float(np.percentile(lat, 99)), "requests": len(times),
            "misses": misses, "bytes": total, "seconds": wall}


def calibrate(path: str | os.PathLike, *, block_sizes_KiB: Sequence[int] = DEFAULT_BLOCK_SIZES_KIB,
              queue_depths: Sequence[int] = DEFAULT_QUEUE_DEPTHS, size_MB: int = DEFAULT_SIZE_MB,
              point_s: float | None = None, h2d_GBps: float = DEFAULT_H2D_GBPS, kind: str = "ssd",
              name: str = "measured-disk", direct: bool = True, seed: int = 0,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure the disk under ``path`` (a writable directory) and return the result (plain values):

    ``points`` (one per request size and queue depth: ``io_KiB``, ``queue_depth``, ``read_GBps``,
    ``latency_us``, ``p99_us``, ``requests``, ``bytes``, ``seconds``), ``block_overhead_us``, ``direct`` (O_DIRECT
    used), ``filesystem``, ``notes`` (sentences: O_DIRECT refused, a memory file system), ``best`` (the point of
    the highest bandwidth), ``preset`` (``{name: fields}`` of a :class:`StorageTier`, validated) and ``date``.
    Writes about ``size_MB`` MB under ``path`` and removes all of it before returning (or raising).
    """
    root = check_directory(path, "path").resolve()
    sizes, qds, size, file_B = _sizes(block_sizes_KiB, queue_depths, size_MB)
    point_s = _check.number("point_s", DEFAULT_POINT_S if point_s is None else point_s, lo=0.0, hi=3600.0, unit="s")
    h2d_GBps = _check.number("h2d_GBps", h2d_GBps, lo=0.0, lo_open=True, hi=1e6, unit="GB/s")
    _check.choice("kind", kind, [k for k in STORAGE_KINDS if k != "dram"])
    _check.text("name", name, max_len=100)
    say = progress or (lambda _msg: None)
    when = _dt.datetime.now().astimezone()
    fs = filesystem_type(root)
    try:
        work = Path(tempfile.mkdtemp(prefix=".llmexplore-calibrate-", dir=root))
    except OSError as exc:  # /proc, a read-only mount, no write permission
        raise SpecError(f"path {str(root)!r} must be a directory where a scratch directory can be written "
                        f"({exc.strerror})") from None
    try:
        need_B = file_B + (1 << 20) + file_B // 100  # the test file, the probe's small block files, a margin
        free_B = shutil.disk_usage(work).free
        if free_B < need_B:
            raise SpecError(f"path {str(root)!r} must have room for the {size:,} MB test file: {free_B / 1e6:,.1f} MB "
                            f"free; give a smaller --size-mb or another directory")
        use_direct = direct and direct_io_supported(work)
        notes = []
        if direct and not use_direct:
            notes.append(f"the file system ({fs}) refuses O_DIRECT: reads are buffered and measure the page cache "
                         f"once the test file is cached, not the device")
        if fs in MEMORY_FILESYSTEMS:
            notes.append(f"{root} is on {fs}, a file system in memory: the numbers are memory bandwidth, not a disk's")
        say(f"writing a {size} MB test file under {work}")
        data = work / "testfile.bin"
        try:
            _write_test_file(data, file_B, seed)
        except OSError as exc:  # the disk filled up while writing (another writer), a quota
            raise SpecError(f"path {str(root)!r}: writing the {size:,} MB test file failed ({exc.strerror}); "
                            "give a smaller --size-mb or another directory") from None
        overhead_us = _open_close_us(work, use_direct)
        rng = np.random.default_rng(seed)
        points = []
        with StagingReader(max(qds), 2 * max(qds) * max(sizes) * 1024, direct=use_direct) as reader:
            with reader.open_file(data) as f:
                for kib in sizes:
                    for qd in qds:
                        point = _measure_point(reader, f, kib * 1024, qd, file_B, file_B, point_s, rng)
                        say(f"  {kib:>7,} KiB x QD{qd:<3}: {point['read_GBps']:.3f} GB/s, "
                            f"{point['latency_us']:,.0f} us per request")
                        points.append(point)
                direct_used = f.direct
        if not any(p["requests"] for p in points):
            raise SpecError(f"path {str(root)!r}: no read succeeded (every request failed); is the disk healthy?")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if work.exists():  # rmtree ignored an error: say so rather than leave files silently
            raise SpecError(f"could not remove the scratch directory {str(work)!r}; remove it by hand")
    best = max(points, key=lambda p: p["read_GBps"])
    smallest = min(sizes)
    lat_point = next(p for p in points if p["io_KiB"] == smallest and p["queue_depth"] == min(qds))
    result = {"path": str(root), "filesystem": fs, "direct": bool(direct_used), "notes": notes,
              "size_MB": size, "points": points, "block_overhead_us": overhead_us, "best": best,
              "latency_point": lat_point, "h2d_GBps": h2d_GBps, "kind": kind, "name": name,
              "date": when.isoformat(timespec="seconds")}
    result["preset"] = {name: preset_entry(result)}
    return result


def preset_entry(result: dict[str, Any]) -> dict[str, Any]:
    """The :class:`StorageTier` fields of a :func:`calibrate` result, with a source for every number
    (validated by building the spec)."""
    best, lat = result["best"], result["latency_point"]
    where = f"measured by llmexplore calibrate-disk on {result['path']} ({result['filesystem']}), {result['date']}"
    how = "O_DIRECT" if result["direct"] else "buffered reads (O_DIRECT refused: the page cache, not the device)"
    entry = {
        "display_name": f"Measured: {result['path']} ({result['filesystem']})",
        "kind": result["kind"],
        "read_GBps": round(max(best["read_GBps"], 1e-6), 4),
        "latency_us": round(lat["latency_us"], 2) if np.isfinite(lat["latency_us"]) else 0.0,
        "link_GBps": 0.0,
        "h2d_GBps": float(result["h2d_GBps"]),
        "queue_depth": int(best["queue_depth"]),
        "io_KiB": int(best["io_KiB"]),
        "block_overhead_us": round(result["block_overhead_us"], 2),
        "sources": {
            "read_GBps": f"{where}: best of {len(result['points'])} points (random {how} reads), at "
                         f"{best['io_KiB']} KiB x QD{best['queue_depth']}",
            "latency_us": f"{where}: mean time of one {lat['io_KiB']} KiB read at QD{lat['queue_depth']} ({how})",
            "link_GBps": f"{where}: 0 = no separate cap (the measured bandwidth already includes the link)",
            "h2d_GBps": f"assumption: host -> GPU copy bandwidth, not measured by calibrate-disk (no GPU copy is "
                        f"made); {result['h2d_GBps']:g} GB/s given ({DEFAULT_H2D_GBPS:g} GB/s by default: pinned "
                        f"copies over PCIe Gen4 x16)",
            "queue_depth": f"{where}: the queue depth of the best bandwidth",
            "io_KiB": f"{where}: the request size of the best bandwidth",
            "block_overhead_us": f"{where}: median open + close of a block file"
                                 + (" with O_DIRECT" if result["direct"] else ""),
        },
    }
    StorageTier(name=result["name"], **entry)  # raises if a measured number breaks a rule
    return entry


def preset_yaml(result: dict[str, Any]) -> str:
    """The preset file text (a ``storage:`` section with one entry), loadable with ``LLMEXPLORE_PRESETS`` or
    :func:`llmexplore.presets.add_file`."""
    import yaml

    head = (f"# Storage preset measured by `llmexplore calibrate-disk {result['path']}` on {result['date']}.\n"
            f"# Use it with LLMEXPLORE_PRESETS=<this file> (or llmexplore.presets.add_file) and the storage preset "
            f"name {result['name']!r}.\n")
    for note in result["notes"]:
        head += f"# Note: {note}.\n"
    lines = ["#   io_KiB  QD  read_GBps  latency_us"]
    lines += [f"#   {p['io_KiB']:>6}  {p['queue_depth']:>2}  {p['read_GBps']:9.3f}  {p['latency_us']:10.1f}"
              for p in result["points"]]
    body = yaml.safe_dump({"storage": result["preset"]}, sort_keys=False, allow_unicode=True, width=1000)
    return head + "\n".join(lines) + "\n" + body


def save_preset(result: dict[str, Any], file: str | os.PathLike) -> Path:
    """Write :func:`preset_yaml` to ``file`` (atomically: a temporary file, then a rename); its path."""
    path = _check.user_path("file", file)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(preset_yaml(result))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is for secrets; a preset is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
