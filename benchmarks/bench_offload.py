"""Benchmark KV offload: the staging reader against fio on the same file, and the break-even grid.

Run: ``.venv/bin/python benchmarks/bench_offload.py`` (or ``make bench``). Medians of repeats; the machines
here are noisy, so fio and the reader take turns on the same file and the ratio is of their medians.

* **reader vs fio** (target >= 0.9): random reads of ``BLOCK`` bytes at queue depth ``QD`` with O_DIRECT from
  one 256 MiB file on a real disk (``LLMEXPLORE_BENCH_DIR``, else /var/tmp, else this directory; a memory file
  system is reported, not used silently), as many bytes as the file holds per run: the staging reader
  (:class:`llmexplore.storage.reader.StagingReader` with one shared descriptor, as calibrate-disk reads) and
  ``fio --rw=randread --direct=1 --ioengine=io_uring --iodepth=QD --bs=BLOCK`` (libaio where io_uring is
  refused). The fio command is printed. Without fio (Debian package ``fio``) the benchmark says so and goes on.
  Two more rows (128 KiB at QD 16, 4 MiB at QD 4) for the record.
* **break-even grid** (target < 0.2 s): the winner of load vs recompute over 1,000 prefix lengths x 1,000
  read bandwidths for Llama-3-70B on 8x H100 from an NVMe Gen4 tier, from :mod:`llmexplore.models.offload.cost`'s
  recompute curve and hop times (:func:`llmexplore.sweeps.offload.regime_grid`); checked against the exact
  gate (:func:`llmexplore.models.offload.cost.break_even`) at three bandwidths. The closed-form break-even map over
  1,000 bandwidths x 1,000 latencies is timed too.

The last line is machine-readable: ``reader_vs_fio=… grid_s=…`` (``reader_vs_fio=n/a`` without fio).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _timing import median_s, print_table, reference_s  # noqa: E402

from llmexplore.models.offload import cost as of  # noqa: E402
from llmexplore.storage import calibrate as cal  # noqa: E402
from llmexplore.storage.reader import StagingReader  # noqa: E402
from llmexplore.sweeps import offload as so  # noqa: E402

FILE_B = 256 << 20
BLOCK, QD = 1 << 20, 4
EXTRA = [(128 << 10, 16), (4 << 20, 4)]
REPEATS = 3


def bench_dir() -> tuple[Path, str]:
    """A directory on a real disk for the test file, and its file system type."""
    here = Path(__file__).resolve().parent
    for cand in (os.environ.get("LLMEXPLORE_BENCH_DIR"), "/var/tmp", str(here)):
        if cand and os.path.isdir(cand) and os.access(cand, os.W_OK):
            fs = cal.filesystem_type(cand)
            if fs not in cal.MEMORY_FILESYSTEMS or cand == str(here):
                return Path(cand), fs
    return here, cal.filesystem_type(here)


def reader_GBps(path: Path, block: int, qd: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    slots = FILE_B // block
    n = FILE_B // block
    with StagingReader(qd, 2 * qd * block) as reader, reader.open_file(path) as f:
        if not f.direct:
            raise RuntimeError(f"O_DIRECT refused on {path}: no fair comparison with fio --direct=1")
        offsets = (rng.integers(slots, size=n) * block).tolist()
        t = time.perf_counter()
        got = 0
        for st in reader.stream({"path": f, "offset": o, "nbytes": block, "verify": False} for o in offsets):
            got += st.nbytes if st.ok else 0
        return got / (time.perf_counter() - t) / 1e9


def fio_command(path: Path, block: int, qd: int, engine: str) -> list[str]:
    return ["fio", "--name=reader-vs-fio", f"--filename={path}", "--rw=randread", f"--bs={block}",
            f"--iodepth={qd}", "--direct=1", f"--ioengine={engine}", f"--io_size={FILE_B}", "--norandommap",
            "--randrepeat=0", "--output-format=json"]


def fio_GBps(path: Path, block: int, qd: int, engine: str) -> float:
    out = subprocess.run(fio_command(path, block, qd, engine), capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}")
    start = out.stdout.find("{")  # fio may print notes before the JSON
    return json.loads(out.stdout[start:])["jobs"][0]["read"]["bw_bytes"] / 1e9


def fio_engine(path: Path) -> str | None:
    """io_uring where fio and the kernel allow it, else libaio; None without fio."""
    if shutil.which("fio") is None:
        return None
    for engine in ("io_uring", "libaio"):
        try:
            subprocess.run(fio_command(path, 4096, 1, engine)[:-3] + ["--io_size=4096", "--output-format=json"],
                           capture_output=True, text=True, timeout=60, check=True)
            return engine
        except (subprocess.SubprocessError, OSError):
            continue
    return None


def compare(path: Path, engine: str | None, block: int, qd: int) -> tuple[float, float]:
    """(reader GB/s, fio GB/s or nan): medians, the two taking turns."""
    ours, theirs = [], []
    for i in range(REPEATS):
        ours.append(reader_GBps(path, block, qd, seed=i))
        if engine is not None:
            theirs.append(fio_GBps(path, block, qd, engine))
    return float(np.median(ours)), float(np.median(theirs)) if theirs else float("nan")


def grid_setup() -> so.OffloadSetup:
    return so.setup("llama-3-70b", "h100-sxm", storage="nvme-gen4", tp=8)


def grid(s: so.OffloadSetup):
    prefixes = np.linspace(256, 131072, 1000).round()
    bandwidths = np.geomspace(0.1, 100.0, 1000)
    return so.regime_grid(s, prefixes, bandwidths)


def check_grid(s: so.OffloadSetup, g) -> None:
    """The grid's winner flips where the exact gate says, at three bandwidths (the tier rebuilt at each)."""
    for j in (100, 500, 900):
        bw = float(g["bandwidth_GBps"][j])
        tier = dataclasses.replace(s.tier, read_GBps=bw, link_GBps=max(s.tier.link_GBps, bw) if s.tier.link_GBps else 0)
        be = of.break_even(s.dep, tier, suffix_tokens=s.suffix_tokens, **s.kw)
        wins = g["load_wins"][:, j]
        if be["also_pays_below"] or not np.isfinite(be["tokens"]):
            continue
        P = g["prefix_tokens"]
        assert np.array_equal(wins, P >= be["tokens"]), f"grid and gate disagree at {bw:.3g} GB/s"


def main() -> int:
    ref = reference_s()
    rows = [("reference numpy workload", ref, "baseline", "-")]
    where, fs = bench_dir()
    work = Path(tempfile.mkdtemp(prefix=".llmexplore-bench-", dir=where))
    ratio = None
    try:
        data = work / "testfile.bin"
        cal._write_test_file(data, FILE_B, seed=0)
        engine = fio_engine(data)
        print(f"test file: {FILE_B >> 20} MiB on {where} ({fs})"
              + (" - a memory file system: these are memory numbers" if fs in cal.MEMORY_FILESYSTEMS else ""))
        if shutil.which("fio") is None:
            print("fio is not installed (Debian: apt-get install fio): the reader is timed alone")
        elif engine is None:
            print("fio refused both io_uring and libaio here: the reader is timed alone")
        else:
            print("fio: " + " ".join(fio_command(Path("<testfile>"), BLOCK, QD, engine)))
        for block, qd in [(BLOCK, QD), *EXTRA]:
            r, f = compare(data, engine, block, qd)
            name = f"{block >> 10:,} KiB x QD{qd}"
            rows.append((f"reader, {name} [GB/s]", r, "-", "-"))
            if np.isfinite(f):
                rows.append((f"fio {engine}, {name} [GB/s]", f, "-", "-"))
                rows.append((f"  reader / fio, {name}", r / f, "ratio", ">= 0.9" if (block, qd) == (BLOCK, QD) else "-"))
            if (block, qd) == (BLOCK, QD) and np.isfinite(f):
                ratio = r / f
    finally:
        shutil.rmtree(work, ignore_errors=True)

    s = grid_setup()
    g = grid(s)
    check_grid(s, g)
    t_grid = median_s(lambda: grid(s), 5)
    t_map = median_s(lambda: so.break_even_map(s, np.geomspace(0.1, 100, 1000), np.linspace(0, 2000, 1000)), 5)
    rows += [("break-even grid, 1,000 prefixes x 1,000 bandwidths", t_grid, f"{t_grid / ref:.2f}x ref", "< 0.2 s"),
             ("closed-form map, 1,000 bandwidths x 1,000 latencies", t_map, f"{t_map / ref:.2f}x ref", "-")]
    print_table(rows)
    print(f"reader_vs_fio={'n/a' if ratio is None else f'{ratio:.3f}'} grid_s={t_grid:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
