"""Embarrassingly parallel sweeps on this machine or on an existing Dask cluster, streamed to Parquet.

:func:`run_sweep` maps a task function over a list of tasks and returns one tidy table:

* a **task** is a dict of plain values (one planning question: model, GPU, GPU count, workload, ...); its
  ``task_id`` is its ``"task_id"`` key or, without one, a hash of its content (:func:`task_id`);
* the **task function** is a top-level (picklable, importable on the workers) function of one task that
  returns a list of flat row dicts of plain scalars (one row per configuration it evaluated);
* tasks run in batches of ``chunk``: in this process (``workers=1``), in a local process pool, or on a Dask
  cluster (``scheduler=``: an address such as ``"tcp://host:8786"``, a ``distributed.Client`` or a
  ``LocalCluster``), with a bounded number of batches in flight so the scheduler is never flooded;
* each completed batch is written as one Parquet part file under ``out`` (to a temporary name, then
  ``os.replace``: a part is either whole or absent), and the task ids it holds are kept in the part's
  metadata, so a rerun with ``resume=True`` skips every task that already has a part (an interrupted sweep
  resumes where it stopped);
* a task that raises becomes one row with the exception's one-line message in ``error`` (``""`` on the rows
  of tasks that succeeded) instead of stopping the sweep.

The result is read back from the parts and sorted by ``task_id`` (rows of one task in the order the function
returned them), so it is the same whichever way the tasks ran. docs/sweeps.md describes running on a
cluster, what is shipped to the workers and a plan for a 1,000-node run.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import math
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import _check
from ..errors import SpecError, UsageError

__all__ = ["run_sweep", "task_id", "read_parts", "completed_tasks", "layout_question", "TASK_ID", "ERROR"]

#: column (and task key) naming the task a row came from
TASK_ID = "task_id"
#: column holding the one-line error of a task that raised ("" on rows of tasks that succeeded)
ERROR = "error"
#: key of the part files' Parquet metadata listing the task ids they hold
_META_KEY = b"llmexplore.sweep"
_PART_GLOB = "part-*.parquet"
#: seconds to wait for a Dask scheduler to answer before saying it is not there [modelling choice: a scheduler on
#: a reachable network answers in well under a second; Dask's own default is 30 s]
CONNECT_TIMEOUT_S = 10.0

Row = dict[str, Any]
TaskFn = Callable[[dict], list]


# ---- tasks --------------------------------------------------------------------------------------------------


def task_id(task: Mapping[str, Any]) -> str:
    """The task's ``"task_id"`` value as a string or, without one, the first 16 hex digits of the SHA-1 of its
    canonical JSON (keys sorted): stable across processes, machines and runs."""
    if TASK_ID in task:
        return str(task[TASK_ID])
    try:
        text = json.dumps(task, sort_keys=True, separators=(",", ":"), allow_nan=True)
    except TypeError as exc:
        raise SpecError(f"a task must be a dict of plain values (str, numbers, bools, None, lists) to get a "
                        f"stable task_id; give it a 'task_id' key or plain values ({exc})") from None
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _one_line(exc: BaseException) -> str:
    """``"ValueError: first line of the message"``."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"row values must be plain scalars (str, int, float, bool, None), got {type(value).__name__}")


def _checked_rows(rows: Any) -> list[Row]:
    if not isinstance(rows, (list, tuple)):
        raise TypeError(f"the task function must return a list of row dicts, got {type(rows).__name__}")
    out = []
    for row in rows:
        if not isinstance(row, Mapping):
            raise TypeError(f"each row must be a dict, got {type(row).__name__}")
        clean = {}
        for k, v in row.items():
            if not isinstance(k, str) or k in (TASK_ID, ERROR):
                raise TypeError(f"row keys must be strings other than {TASK_ID!r} and {ERROR!r}, got {k!r}")
            clean[k] = _plain(v)
        out.append(clean)
    return out


def _run_batch(fn: TaskFn, batch: Sequence[tuple[str, dict]]) -> list[tuple[str, list[Row], str]]:
    """Run ``fn`` on each task of a batch (on a worker): ``(task_id, rows, error)`` per task, errors caught
    per task so one bad task does not lose its batch."""
    out = []
    for tid, task in batch:
        try:
            out.append((tid, _checked_rows(fn(task)), ""))
        except Exception as exc:  # noqa: BLE001  (a task's failure is data, not a crash of the sweep)
            out.append((tid, [], _one_line(exc)))
    return out


# ---- parts --------------------------------------------------------------------------------------------------


def _part_meta(path: Path) -> dict:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta.get(_META_KEY, b'{"task_ids": [], "failed": []}'))


def _parts(out: Path) -> list[Path]:
    """Part files, oldest first (their names start with a timestamp); temporary files are not parts."""
    return sorted(out.glob(_PART_GLOB))


def completed_tasks(out: str | os.PathLike) -> dict[str, tuple[Path, bool]]:
    """``{task_id: (part file, failed)}`` of every task with a part under ``out``; where two parts hold the
    same task (a rerun with ``resume=False`` or ``retry_errors=True``), the newest wins."""
    done: dict[str, tuple[Path, bool]] = {}
    for part in _parts(Path(out)):
        meta = _part_meta(part)
        failed = set(meta.get("failed", []))
        for tid in meta.get("task_ids", []):
            done[tid] = (part, tid in failed)
    return done


def _write_part(out: Path, results: list[tuple[str, list[Row], str]]) -> Path:
    """One part holding a batch's rows (``task_id`` first, ``error`` last), written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for tid, task_rows, error in results:
        rows += [{TASK_ID: tid, **r, ERROR: ""} for r in task_rows] if not error else [{TASK_ID: tid, ERROR: error}]
    frame = pd.DataFrame(rows, columns=None if rows else [TASK_ID, ERROR])
    frame = frame[[TASK_ID, *[c for c in frame.columns if c not in (TASK_ID, ERROR)], ERROR]]
    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = {"task_ids": [tid for tid, _, _ in results], "failed": [tid for tid, _, e in results if e]}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), _META_KEY: json.dumps(meta).encode()})
    name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = out / f".{name}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, out / name)
    return out / name


def read_parts(out: str | os.PathLike, task_ids: Iterable[str] | None = None) -> pd.DataFrame:
    """The rows of the tasks ``task_ids`` (default: every task) from the parts under ``out``, sorted by
    ``task_id`` then row order; columns ``task_id``, the task function's columns, ``error``."""
    done = completed_tasks(out)
    wanted = set(done) if task_ids is None else set(task_ids) & set(done)
    owners: dict[Path, set[str]] = {}
    for tid in wanted:
        owners.setdefault(done[tid][0], set()).add(tid)
    frames = []
    for part, tids in owners.items():
        frame = pd.read_parquet(part, engine="pyarrow")
        frame = frame[frame[TASK_ID].isin(tids)]
        if len(frame):
            frames.append((str(frame[TASK_ID].min()), frame))
    if not frames:
        return pd.DataFrame({TASK_ID: pd.Series([], dtype=str), ERROR: pd.Series([], dtype=str)})
    frames.sort(key=lambda f: f[0])  # column order by the first task of each part: independent of timing
    frame = pd.concat([f for _, f in frames], ignore_index=True)
    frame = frame.sort_values(TASK_ID, kind="stable").reset_index(drop=True)
    if ERROR in frame:
        frame[ERROR] = frame[ERROR].fillna("")
    return frame[[TASK_ID, *[c for c in frame.columns if c not in (TASK_ID, ERROR)], ERROR]]


# ---- running ------------------------------------------------------------------------------------------------


def _batches(items: list[tuple[str, dict]], chunk: int) -> list[list[tuple[str, dict]]]:
    return [items[i:i + chunk] for i in range(0, len(items), chunk)]


def _failed_batch(batch, exc: BaseException) -> list[tuple[str, list[Row], str]]:
    """Every task of a batch whose worker was lost (the batch itself raised)."""
    return [(tid, [], f"batch failed: {_one_line(exc)}") for tid, _ in batch]


def _run_local(fn, batches, workers: int, window: int, sink) -> None:
    if workers == 1:
        for batch in batches:
            sink(_run_batch(fn, batch))
        return
    with cf.ProcessPoolExecutor(max_workers=workers) as pool:
        todo = iter(batches)
        running: dict[cf.Future, list] = {}

        def submit() -> None:
            batch = next(todo, None)
            if batch is not None:
                running[pool.submit(_run_batch, fn, batch)] = batch

        for _ in range(window):
            submit()
        try:
            while running:
                finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for fut in finished:
                    batch = running.pop(fut)
                    try:
                        sink(fut.result())
                    except Exception as exc:  # noqa: BLE001  (a dead worker process: BrokenProcessPool)
                        sink(_failed_batch(batch, exc))
                    submit()
        except BaseException:  # Ctrl-C: drop the queued batches, let the running ones finish (their parts are lost)
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _dask_client(scheduler):
    """(client, owned): a Client for an address, a Client as given, or a Client on a cluster object."""
    try:
        from distributed import Client
    except ImportError:
        raise SpecError("scheduler= needs dask.distributed: pip install 'llmexplore[dask]'") from None
    if isinstance(scheduler, Client):
        return scheduler, False
    if hasattr(scheduler, "scheduler_address"):  # a cluster object of this process: it is there
        return Client(scheduler), True
    if isinstance(scheduler, str):
        try:  # a scheduler that is not there: one line after CONNECT_TIMEOUT_S, not Dask's 30 s and a traceback
            return Client(scheduler, timeout=CONNECT_TIMEOUT_S), True
        except OSError as exc:  # TimeoutError and refused connections are OSErrors
            raise SpecError(f"scheduler must be reachable, got {scheduler!r}: nothing answered there within "
                            f"{CONNECT_TIMEOUT_S:g} s ({type(exc).__name__})") from None
    raise UsageError(f"scheduler must be an address ('tcp://host:8786'), a distributed.Client or a cluster "
                     f"(LocalCluster, ...), got {type(scheduler).__name__}")


def _run_dask(client, fn, batches, window: int, sink) -> None:
    from distributed import as_completed

    run = uuid.uuid4().hex[:8]
    todo = iter(enumerate(batches))
    running: dict[str, tuple] = {}

    def submit():
        item = next(todo, None)
        if item is None:
            return None
        i, batch = item
        fut = client.submit(_run_batch, fn, batch, key=f"llmexplore-sweep-{run}-{i}", pure=False)
        running[fut.key] = (fut, batch)
        return fut

    pending = as_completed([f for f in (submit() for _ in range(window)) if f is not None])
    try:
        for fut in pending:
            _, batch = running.pop(fut.key)
            try:
                sink(fut.result())
            except Exception as exc:  # noqa: BLE001  (KilledWorker after the scheduler's retries, ...)
                sink(_failed_batch(batch, exc))
            fut.release()
            nxt = submit()
            if nxt is not None:
                pending.add(nxt)
    except BaseException:  # Ctrl-C or a failed write: the cluster stops working on this sweep
        client.cancel([f for f, _ in running.values()])
        raise


def run_sweep(fn: TaskFn, tasks: Iterable[Mapping[str, Any]], *, out: str | os.PathLike | None = None,
              scheduler=None, workers: int | None = None, chunk: int | None = None, resume: bool = True,
              retry_errors: bool = False, window: int | None = None) -> pd.DataFrame:
    """Run ``fn`` on every task and return all rows as one table.

    Parameters
    ----------
    fn : top-level function ``fn(task) -> list[dict]`` (picklable by reference: on a cluster the package that
        defines it must be installed on the workers). Each row is a flat dict of plain scalars.
    tasks : dicts of plain values; each one's id is :func:`task_id` (its ``"task_id"`` key or a hash).
    out : directory of the Parquet dataset the results stream to (one part per completed batch). None: a
        temporary directory, removed afterwards (nothing to resume).
    scheduler : None to run on this machine; else a Dask scheduler address (``"tcp://host:8786"``), a
        ``distributed.Client`` or a cluster object (``LocalCluster(...)``): tasks then run on that cluster.
    workers : local processes (default ``os.cpu_count()``); 1 runs in this process without a pool. Ignored
        with ``scheduler``.
    chunk : tasks per batch (one pool or Dask task and one part file each). Default: about four batches per
        worker, at most 64 tasks per batch.
    resume : skip tasks that already have a part under ``out``. False reruns every task (the new parts win
        over the old ones).
    retry_errors : with ``resume``, also rerun the tasks whose part records an error.
    window : batches in flight at once (default: 2 per worker thread, at least 4).

    Returns
    -------
    DataFrame: ``task_id``, the columns of ``fn``'s rows, ``error``; sorted by ``task_id``, then the order of
    each task's rows. A task that raised has one row: its ``task_id`` and the exception's one-line message in
    ``error`` (``""`` on every other row); a task that returned no rows has none.
    """
    items: list[tuple[str, dict]] = []
    seen: set[str] = set()
    for task in tasks:
        if not isinstance(task, Mapping):
            raise UsageError(f"each task must be a dict of plain values, got {type(task).__name__}")
        tid = task_id(task)
        if tid in seen:
            raise SpecError(f"two tasks have task_id {tid!r}; task ids must be unique")
        seen.add(tid)
        items.append((tid, dict(task)))
    workers = (os.cpu_count() or 1) if workers is None else _check.integer("workers", workers, lo=1, hi=4096)
    if chunk is not None:
        chunk = _check.integer("chunk", chunk, lo=1, hi=1_000_000)
    if window is not None:
        window = _check.integer("window", window, lo=1, hi=1_000_000)
    if out is None:
        with tempfile.TemporaryDirectory(prefix="llmexplore-sweep-") as tmp:
            return _run(fn, items, Path(tmp), scheduler, workers, chunk, window, resume=False, retry_errors=False)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return _run(fn, items, out, scheduler, workers, chunk, window, resume=resume, retry_errors=retry_errors)


def _run(fn, items, out: Path, scheduler, workers: int, chunk, window, *, resume: bool,
         retry_errors: bool) -> pd.DataFrame:
    if resume:
        done = completed_tasks(out)
        todo = [(tid, t) for tid, t in items if tid not in done or (retry_errors and done[tid][1])]
    else:
        todo = items

    def batches(slots: int):
        size = chunk or max(1, min(64, math.ceil(len(todo) / (4 * slots))))
        return _batches(todo, size)

    def sink(results):
        _write_part(out, results)

    if todo and scheduler is None:
        _run_local(fn, batches(workers), workers, window or max(4, 2 * workers), sink)
    elif todo:
        client, owned = _dask_client(scheduler)
        try:
            slots = max(1, sum(client.nthreads().values()))
            _run_dask(client, fn, batches(slots), window or max(4, 2 * slots), sink)
        finally:
            if owned:
                client.close()
    return read_parts(out, [tid for tid, _ in items])


# ---- task functions -----------------------------------------------------------------------------------------


def _demo_task(task: Mapping[str, Any]) -> list[Row]:
    """A cheap deterministic task for tests and benchmarks (importable by worker processes).

    Keys: ``i`` (int), ``rows`` (rows to return, default 3), ``spin`` (pure-Python loop iterations of CPU work
    per row, default 0), ``fail`` (raise ValueError), ``calls`` (a directory: one empty file is created per
    call, to count calls across processes), ``interrupt_once`` (a file path: the first call that finds it
    absent creates it and raises KeyboardInterrupt, which stops the sweep like Ctrl-C), ``exit`` (end the
    worker process at once, like a crash; never with ``workers=1``).
    """
    if task.get("calls"):
        Path(task["calls"], f"{task_id(task)}-{uuid.uuid4().hex}").touch()
    if task.get("interrupt_once") and not os.path.exists(task["interrupt_once"]):
        Path(task["interrupt_once"]).touch()
        raise KeyboardInterrupt
    if task.get("exit"):
        os._exit(3)
    i = int(task["i"])
    if task.get("fail"):
        raise ValueError(f"task {i} failed on purpose\nsecond line is dropped")
    rows = []
    for r in range(int(task.get("rows", 3))):
        acc = 0
        for k in range(int(task.get("spin", 0))):
            acc = (acc * 31 + k + i) % 1_000_003
        rows.append({"i": i, "r": r, "value": (i * 7 + r) / 3.0, "label": f"{i}-{r}", "even": i % 2 == 0,
                     "spin_acc": acc})
    return rows


def layout_question(task: Mapping[str, Any]) -> list[Row]:
    """One planning question as a task: model, GPU and GPU count (``model``, ``gpu``, ``gpus``, optional
    ``runtime``) over a workload grid (``batch``, ``context``: lists); one row per (batch, context, layout)
    with the step time and memory of :func:`llmexplore.sweeps.layouts.layout_table` and the inputs.

    An example of the task shape :func:`run_sweep` expects (a deployment planner's per-configuration evaluation
    plugs in the same way: the question in the task, one row per configuration)."""
    from ..models.step.engine import Deployment
    from .layouts import layout_table

    dep = Deployment.build(task["model"], task["gpu"], int(task["gpus"]), runtime=task.get("runtime", "default"))
    rows = []
    for b in task["batch"]:
        for s in task["context"]:
            for row in layout_table(dep, int(b), float(s)).to_dict("records"):
                rows.append({"model": task["model"], "gpu": task["gpu"], "gpus": int(task["gpus"]),
                             "batch": int(b), "context": float(s), **row})
    return rows
