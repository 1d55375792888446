"""Tests for llmexplore.storage: the block store, the staging reader (under fault injection), disk calibration
(``llmexplore calibrate-disk``) and the replay.

Fast and local: every file lives in the test's tmp_path (a real file system here, ext4; /dev/shm for tmpfs);
faults are injected by monkeypatching ``os.preadv``, ``os.open``, ``os.write`` and ``os.replace``. No
wall-clock assertions.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmexplore import cli, presets
from llmexplore.errors import SpecError
from llmexplore.models.offload import cost as of
from llmexplore.storage import blocks as blocks_mod
from llmexplore.storage import calibrate as cal
from llmexplore.storage import replay as rp
from llmexplore.storage.blocks import (
    ALIGN,
    HEADER_BYTES,
    BlockStore,
    chain_keys,
    encode_header,
    file_bytes,
    parse_block,
)
from llmexplore.storage.reader import StagingReader
from llmexplore.storage.reads import DirectIOFallbackWarning, direct_io_supported
from llmexplore.sweeps import offload as sweeps_offload

PROPS = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
REAL_PREADV = os.preadv
REAL_OPEN = os.open


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def payload_of(i: int, size: int) -> bytes:
    return np.random.default_rng(i).bytes(size)


@pytest.fixture
def store(tmp_path) -> BlockStore:
    return BlockStore(tmp_path / "store", block_tokens=16)


def fill(store: BlockStore, n_blocks: int, size: int = 10_000, seed: int = 0) -> tuple[list[str], list[bytes]]:
    tokens = np.arange(n_blocks * store.block_tokens) + seed * 100_000
    keys = store.keys(tokens)
    payloads = [payload_of(seed * 1000 + i, size) for i in range(n_blocks)]
    assert store.put_prefix(tokens, payloads) == n_blocks
    return keys, payloads


# ---- hash-chain keys --------------------------------------------------------------------------------------
def test_chain_keys_are_stable():
    """A pinned value: the key format is on disk, so it must not change silently."""
    keys = chain_keys(list(range(512)), 256)
    assert len(keys) == 2 and all(len(k) == 64 for k in keys)
    assert keys == chain_keys(np.arange(512, dtype=np.int64), 256) == chain_keys(tuple(range(512)), 256.0)
    import hashlib
    import struct

    seed = hashlib.sha256(b"llmexplore kv block chain v1\x00" + struct.pack("<I", 256)).digest()
    first = hashlib.sha256(seed + np.arange(256, dtype="<i4").tobytes()).digest()
    assert keys[0] == first.hex()
    assert keys[1] == hashlib.sha256(first + np.arange(256, 512, dtype="<i4").tobytes()).hexdigest()


@PROPS
@given(tokens=st.lists(st.integers(0, 2**31 - 1), max_size=200), cut=st.integers(0, 200),
       bt=st.sampled_from([1, 7, 16, 64]))
def test_keys_of_a_prefix_are_a_prefix_of_the_keys(tokens, cut, bt):
    keys = chain_keys(tokens, bt)
    assert len(keys) == len(tokens) // bt  # one key per FULL block
    assert chain_keys(tokens[:cut], bt) == keys[:min(cut, len(tokens)) // bt]


@PROPS
@given(tokens=st.lists(st.integers(0, 1000), min_size=48, max_size=48), where=st.integers(0, 47))
def test_a_changed_token_changes_its_block_and_every_later_key(tokens, where):
    other = list(tokens)
    other[where] = tokens[where] + 1
    a, b = chain_keys(tokens, 16), chain_keys(other, 16)
    block = where // 16
    assert a[:block] == b[:block]
    assert all(x != y for x, y in zip(a[block:], b[block:]))


def test_keys_depend_on_namespace_and_block_size():
    t = list(range(64))
    assert chain_keys(t, 16) != chain_keys(t, 16, namespace="llama-3.2-3b/bf16")
    assert chain_keys(t, 16)[0] != chain_keys(t, 32)[0]


@pytest.mark.parametrize("bad", [[-1], [2**31], [1.5], [[1, 2], [3, 4]], ["a"], [float("nan")]])
def test_bad_token_ids_are_refused(bad):
    with pytest.raises(SpecError, match="token_ids"):
        chain_keys(bad, 1)


@pytest.mark.parametrize("key", ["", "xyz", "g" * 64, "a" * 63, 5, None])
def test_bad_keys_are_refused(store, key):
    with pytest.raises(SpecError, match="key must be 64 hex digits"):
        store.path(key)


# ---- the block store ---------------------------------------------------------------------------------------
@PROPS
@given(size=st.sampled_from([0, 1, 4095, 4096, 4097, 12_288, 100_001]))
def test_put_get_round_trip_and_layout(tmp_path_factory, size):
    store = BlockStore(tmp_path_factory.mktemp("s"), block_tokens=4)
    key = store.keys([1, 2, 3, 4])[0]
    data = payload_of(size, size)
    assert store.put(key, data)
    path = store.path(key)
    assert path.parent.name == key[:2] and path.name == key + ".kvb"
    assert path.stat().st_size == file_bytes(size) and path.stat().st_size % ALIGN == 0
    raw = path.read_bytes()
    assert raw[HEADER_BYTES:HEADER_BYTES + size] == data  # the payload starts at 4 KiB
    assert store.get(key) == data
    assert store.lookup([1, 2, 3, 4, 5]) == 1


def test_put_accepts_numpy_and_replaces_whole(store):
    key = store.keys(range(16))[0]
    arr = np.arange(3000, dtype=np.uint16)
    assert store.put(key, arr)
    assert store.get(key) == arr.tobytes()
    assert store.put(key, b"short")
    assert store.get(key) == b"short"


def test_lookup_counts_leading_present_blocks(store):
    tokens = np.arange(16 * 5)
    keys, _ = fill(store, 5)
    assert store.lookup(tokens) == 5 and store.lookup(tokens[:40]) == 2 and store.lookup([]) == 0
    store.path(keys[2]).unlink()
    assert store.lookup(tokens) == 2  # a gap ends the cached prefix
    assert store.put_prefix(tokens, lambda i, k: payload_of(i, 10_000)) == 5
    assert store.lookup(tokens) == 5


def test_size_and_clear(store):
    fill(store, 3, size=5000)
    assert store.size_bytes() == 3 * file_bytes(5000)
    (store.root / "ab").mkdir(exist_ok=True)
    (store.root / "ab" / ".leftover.kvb.123.tmp").write_bytes(b"x")
    store.clear()
    assert store.size_bytes() == 0 and list(store.root.iterdir()) == []


def test_a_crash_between_write_and_rename_leaves_no_visible_block(store, monkeypatch):
    key = store.keys(range(16))[0]
    before = open_fds()

    def crash(src, dst):
        raise OSError(errno.EIO, "simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    assert store.put(key, b"x" * 10_000) is False
    monkeypatch.undo()
    assert store.get(key) is None and store.misses["missing"] == 1
    assert store.lookup(range(16)) == 0
    assert list(store.path(key).parent.iterdir()) == []  # the temporary file is gone
    assert open_fds() == before


def test_a_leftover_temporary_file_is_never_a_block(store):
    """A process killed after writing the temporary file (before the rename) leaves it; it is not read."""
    key = store.keys(range(16))[0]
    store.path(key).parent.mkdir(parents=True)
    tmp = store.path(key).parent / f".{key}.kvb.999.tmp"
    tmp.write_bytes(encode_header(key, b"abc") + b"abc".ljust(ALIGN, b"\x00"))
    assert store.lookup(range(16)) == 0 and store.get(key) is None
    assert list(store.iter_files()) == []


def test_a_full_disk_while_writing_leaves_nothing(store, monkeypatch):
    key = store.keys(range(16))[0]
    real_write = os.write
    calls = []

    def full_disk(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, memoryview(data)[:1000])  # a short write first, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    before = open_fds()
    monkeypatch.setattr(os, "write", full_disk)
    assert store.put(key, b"y" * 50_000) is False
    monkeypatch.undo()
    assert store.write_errors == {"ENOSPC": 1}
    assert not store.path(key).exists() and list(store.path(key).parent.iterdir()) == []
    assert open_fds() == before
    assert store.get(key) is None


def _corrupt(path: Path, offset: int, value: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset:offset + len(value)] = value
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage, reason", [
    (lambda p: _corrupt(p, HEADER_BYTES + 5, b"\xff\x00"), "checksum"),
    (lambda p: _corrupt(p, 0, b"NOTABLOK"), "bad_magic"),
    (lambda p: _corrupt(p, 8, b"\x09\x00"), "bad_version"),
    (lambda p: _corrupt(p, 16, b"\x01"), "bad_header"),  # the payload length, under the header CRC
    (lambda p: p.write_bytes(p.read_bytes()[:HEADER_BYTES + 100]), "short"),
    (lambda p: p.write_bytes(p.read_bytes()[:30]), "short"),
    (lambda p: p.write_bytes(b""), "short"),
    (lambda p: p.write_bytes(p.read_bytes() + b"\x00" * ALIGN), "bad_length"),
    (lambda p: p.unlink(), "missing"),
    (lambda p: (p.unlink(), p.mkdir()), "io_error"),
])
def test_a_bad_block_is_a_miss_with_its_reason(store, damage, reason):
    keys, payloads = fill(store, 2)
    damage(store.path(keys[0]))
    assert store.get(keys[0]) is None
    assert store.misses == {reason: 1}
    assert store.get(keys[1]) == payloads[1] and store.hits == 1


def test_a_block_under_another_key_is_a_miss(store):
    keys, _ = fill(store, 2)
    os.replace(store.path(keys[0]), store.path(keys[1]))
    assert store.get(keys[1]) is None and store.misses == {"key_mismatch": 1}


@PROPS
@given(where=st.integers(0, HEADER_BYTES + 12_288 - 1), flip=st.integers(1, 255))
def test_any_flipped_byte_gives_the_block_or_a_miss(tmp_path_factory, where, flip):
    """Never other data: a flipped byte anywhere in the file is a miss, or harmless (padding) and the exact
    payload comes back."""
    store = BlockStore(tmp_path_factory.mktemp("s"), block_tokens=1)
    key = store.keys([7])[0]
    data = payload_of(where, 10_000)
    store.put(key, data)
    path = store.path(key)
    raw = bytearray(path.read_bytes())
    raw[where] ^= flip
    path.write_bytes(bytes(raw))
    got = store.get(key)
    assert got is None or got == data
    used = range(blocks_mod.HEADER_USED)
    payload = range(HEADER_BYTES, HEADER_BYTES + 10_000)
    assert (got is None) == (where in used or where in payload)
    payload_view, _ = parse_block(bytes(raw), key)
    assert (payload_view is None) == (got is None)


# ---- the staging reader ------------------------------------------------------------------------------------
def test_reader_reads_verified_blocks_with_o_direct(store):
    keys, payloads = fill(store, 3)
    with StagingReader(max_inflight=2, budget_bytes=1 << 20) as r:
        staged = [r.submit(store.path(k), key=k) for k in keys]
        for s, p in zip(staged, payloads):
            with s:
                assert s.ok and bytes(s.payload) == p and s.payload.readonly
                assert s.direct is direct_io_supported(store.root)
        assert r.allocated_bytes == 0 and r.inflight == 0 and r.pending == 0
        assert r.stats()["delivered"] == 3
    assert r.cached_bytes == 0  # close unmaps the buffers kept for reuse


@pytest.mark.skipif(not direct_io_supported(Path(__file__).parent), reason="this file system refuses O_DIRECT")
def test_o_direct_is_used_where_the_file_system_allows(tmp_path):
    store = BlockStore(tmp_path / "s", block_tokens=1)
    keys, _ = fill(store, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DirectIOFallbackWarning)
        with StagingReader() as r, r.submit(store.path(keys[0]), key=keys[0]) as s:
            assert s.ok and s.direct is True and r.direct_reads == 1


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm (tmpfs)")
def test_tmpfs_reads_direct_where_the_kernel_allows_it_else_falls_back_with_a_warning(tmp_path_factory):
    """tmpfs accepts O_DIRECT since Linux 6.6 and refused it before: either way the data comes back, with a
    warning exactly when it is refused."""
    import tempfile

    root = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="llmexplore-test-"))
    try:
        store = BlockStore(root, block_tokens=1)
        keys, payloads = fill(store, 2)
        expect_direct = direct_io_supported(root)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with StagingReader() as r:
                for k, p in zip(keys, payloads):
                    with r.submit(store.path(k), key=k) as s:
                        assert s.ok and bytes(s.payload) == p and s.direct is expect_direct
        fallback = [w for w in caught if issubclass(w.category, DirectIOFallbackWarning)]
        assert len(fallback) == (0 if expect_direct else 1)
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def refuse_o_direct(monkeypatch, on: str = "open"):
    """Make the file system refuse O_DIRECT: EINVAL on open (tmpfs before 6.6) or on the read (some FUSE)."""
    if on == "open":
        def fake_open(path, flags, *a, **kw):
            if flags & os.O_DIRECT:
                raise OSError(errno.EINVAL, "Invalid argument")
            return REAL_OPEN(path, flags, *a, **kw)

        monkeypatch.setattr(os, "open", fake_open)
    else:
        direct_fds = set()

        def fake_open(path, flags, *a, **kw):
            fd = REAL_OPEN(path, flags, *a, **kw)
            (direct_fds.add if flags & os.O_DIRECT else direct_fds.discard)(fd)
            return fd

        def fake_preadv(fd, buffers, offset, *a):
            if fd in direct_fds:
                raise OSError(errno.EINVAL, "Invalid argument")
            return REAL_PREADV(fd, buffers, offset, *a)

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "preadv", fake_preadv)


@pytest.mark.parametrize("on", ["open", "read"])
def test_refused_o_direct_falls_back_to_buffered_reads_with_one_warning(store, monkeypatch, on):
    keys, payloads = fill(store, 4)
    refuse_o_direct(monkeypatch, on)
    before = open_fds()
    with pytest.warns(DirectIOFallbackWarning, match="refuses O_DIRECT") as caught:
        with StagingReader(max_inflight=1) as r:
            for k, p in zip(keys, payloads):
                with r.submit(store.path(k), key=k) as s:
                    assert s.ok and bytes(s.payload) == p and s.direct is False
            assert r.buffered_reads == 4 and r.direct_reads == 0
            assert str(store.root / keys[0][:2]) in r.stats()["direct_refused"]
    assert len([w for w in caught if issubclass(w.category, DirectIOFallbackWarning)]) == 1  # once per file system
    assert open_fds() == before


def test_a_missing_file_and_a_read_too_large_are_misses_at_once(store):
    keys, _ = fill(store, 1, size=100_000)
    with StagingReader(budget_bytes=64 << 10) as r:
        s = r.submit(store.path(keys[0]), key=keys[0])
        assert s.done() and s.reason == "too_large" and not s.ok and r.allocated_bytes == 0
        s = r.submit(store.root / "nope.kvb")
        assert s.reason == "missing"
        s.release()
        assert r.misses == {"too_large": 1, "missing": 1}


def test_raw_range_reads(tmp_path):
    path = tmp_path / "raw.bin"
    data = payload_of(1, 64 << 10)
    path.write_bytes(data)
    with StagingReader(max_inflight=2, budget_bytes=64 << 10) as r:
        with r.submit(path, offset=8192, nbytes=16384, verify=False) as s:
            assert s.ok and bytes(s.payload) == data[8192:8192 + 16384]
        with r.submit(path, offset=60 << 10, nbytes=8192, verify=False) as s:  # past the end: short
            assert s.reason == "short" and s.payload is None
        for bad in ({"offset": 100, "nbytes": 4096}, {"offset": 0, "nbytes": 5000}):
            with pytest.raises(SpecError, match="multiples of 4096"):
                r.submit(path, verify=False, **bad)
        with pytest.raises(SpecError, match="offset must be 0"):
            r.submit(path, offset=4096)


@pytest.mark.parametrize("kwargs, field", [({"max_inflight": 0}, "max_inflight"),
                                           ({"budget_bytes": 100}, "budget_bytes"),
                                           ({"direct": "yes"}, "direct")])
def test_reader_arguments_are_checked(kwargs, field):
    with pytest.raises(SpecError, match=field):
        StagingReader(**kwargs)


def test_submit_after_close_is_refused(store):
    r = StagingReader()
    r.close()
    r.close()
    keys, _ = fill(store, 1)
    with pytest.raises(SpecError, match="closed"):
        r.submit(store.path(keys[0]))


# ---- fault injection ---------------------------------------------------------------------------------------
class Faults:
    """os.preadv that misbehaves on chosen calls: 'short' (half the bytes), 'eio', 'zero' (EOF at once),
    'garble' (reads, then flips a byte of the buffer: a device returning bad data), or 'ok'."""

    def __init__(self, plan):
        self.plan = list(plan)
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, fd, buffers, offset, *a):
        with self.lock:
            kind = self.plan[self.calls % len(self.plan)]
            self.calls += 1
        buf = buffers[0]
        if kind == "eio":
            raise OSError(errno.EIO, "Input/output error")
        if kind == "zero":
            return 0
        if kind == "short":
            return REAL_PREADV(fd, [buf[:max(ALIGN, (len(buf) // 2) // ALIGN * ALIGN)]], offset, *a)
        n = REAL_PREADV(fd, buffers, offset, *a)
        if kind == "garble" and n > HEADER_BYTES + 10:
            buf[HEADER_BYTES + 10] ^= 0x5A
        return n


def test_faults_never_serve_corrupted_data_and_leak_nothing(store, monkeypatch):
    keys, payloads = fill(store, 12, size=30_000)
    before = open_fds()
    faults = Faults(["ok", "short", "eio", "ok", "garble", "zero", "ok"])
    monkeypatch.setattr(os, "preadv", faults)
    outcomes = []
    with StagingReader(max_inflight=3, budget_bytes=4 * file_bytes(30_000)) as r:
        for _ in range(3):
            for s in r.stream([{"path": store.path(k), "key": k, "tag": i} for i, k in enumerate(keys)]):
                if s.ok:
                    assert bytes(s.payload) == payloads[s.tag]
                outcomes.append(s.reason)
        assert r.allocated_bytes == 0 and r.inflight == 0 and r.pending == 0
        assert r.peak_mapped_bytes <= r.budget_bytes
    assert r.cached_bytes == 0
    assert open_fds() == before
    assert outcomes.count(None) > 0 and {"short", "io_error", "checksum"} <= set(outcomes)


def test_a_short_read_into_a_reused_buffer_is_not_served_from_stale_bytes(store, monkeypatch):
    """The second read of the same block lands in the buffer of the first (reuse): a short read must not pass
    the checksum with the previous read's bytes still there."""
    keys, _ = fill(store, 1, size=50_000)
    with StagingReader(max_inflight=1, budget_bytes=file_bytes(50_000)) as r:
        with r.submit(store.path(keys[0]), key=keys[0]) as s:
            assert s.ok
        assert r.cached_bytes == file_bytes(50_000)
        monkeypatch.setattr(os, "preadv", Faults(["short", "zero"]))
        with r.submit(store.path(keys[0]), key=keys[0]) as s:
            assert s.reason == "short" and s.payload is None


@PROPS
@given(plan=st.lists(st.sampled_from(["ok", "short", "eio", "zero", "garble"]), min_size=1, max_size=6),
       inflight=st.integers(1, 4), budget_blocks=st.integers(1, 5))
def test_fault_plans_property(tmp_path_factory, plan, inflight, budget_blocks):
    store = BlockStore(tmp_path_factory.mktemp("s"), block_tokens=2)
    keys, payloads = fill(store, 6, size=9000)
    before = open_fds()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "preadv", Faults(plan))
        with StagingReader(inflight, budget_blocks * file_bytes(9000)) as r:
            seen = 0
            for s in r.stream([{"path": store.path(k), "key": k, "tag": i} for i, k in enumerate(keys)]):
                seen += 1
                assert (s.ok and bytes(s.payload) == payloads[s.tag]) or (not s.ok and s.reason is not None)
                assert r._mapped() <= r.budget_bytes
            assert seen == 6 and r.allocated_bytes == 0 and r.inflight == 0 and r.pending == 0
    assert open_fds() == before


def test_a_file_deleted_mid_read_is_read_whole_or_missed(store, monkeypatch):
    keys, payloads = fill(store, 8, size=40_000)
    started = threading.Event()

    def slow_preadv(fd, buffers, offset, *a):
        started.set()
        time.sleep(0.005)
        return REAL_PREADV(fd, buffers, offset, *a)

    monkeypatch.setattr(os, "preadv", slow_preadv)
    before = open_fds()
    with StagingReader(max_inflight=2, budget_bytes=8 * file_bytes(40_000)) as r:
        staged = [r.submit(store.path(k), key=k, tag=i) for i, k in enumerate(keys)]
        started.wait(5)
        for k in keys:
            store.path(k).unlink()
        reasons = []
        for s in staged:
            with s:
                if s.ok:
                    assert bytes(s.payload) == payloads[s.tag]
                reasons.append(s.reason)
        assert r.allocated_bytes == 0 and r.inflight == 0
    assert set(reasons) <= {None, "missing"} and "missing" in reasons
    assert open_fds() == before


def test_a_file_truncated_mid_read_is_a_miss(store, monkeypatch):
    keys, _ = fill(store, 1, size=40_000)

    def truncating_preadv(fd, buffers, offset, *a):
        os.truncate(store.path(keys[0]), HEADER_BYTES + 8192)
        return REAL_PREADV(fd, buffers, offset, *a)

    monkeypatch.setattr(os, "preadv", truncating_preadv)
    with StagingReader() as r, r.submit(store.path(keys[0]), key=keys[0]) as s:
        assert s.reason == "short"


# ---- backpressure ------------------------------------------------------------------------------------------
def test_backpressure_under_a_flood_keeps_memory_within_the_budget(store):
    """200 submits against a budget of 4 blocks, from a producer thread; a slow consumer samples the mapped
    bytes: never above the budget, and every read is delivered or missed."""
    keys, payloads = fill(store, 20, size=20_000)
    one = file_bytes(20_000)
    budget = 4 * one
    results: dict[int, str | None] = {}
    samples = []
    with StagingReader(max_inflight=3, budget_bytes=budget) as r:
        handed: list = []
        cv = threading.Condition()

        def produce():
            for i in range(200):
                s = r.submit(store.path(keys[i % 20]), key=keys[i % 20], tag=i)  # blocks when the budget is full
                with cv:
                    handed.append(s)
                    cv.notify()
            with cv:
                handed.append(None)
                cv.notify()

        producer = threading.Thread(target=produce)
        producer.start()
        while True:
            with cv:
                while not handed:
                    cv.wait()
                s = handed.pop(0)
            if s is None:
                break
            with s:
                samples.append(r.allocated_bytes + r.cached_bytes)
                if s.ok:
                    assert bytes(s.payload) == payloads[s.tag % 20]
                results[s.tag] = s.reason
            samples.append(r.allocated_bytes + r.cached_bytes)
        producer.join()
        assert max(samples) <= budget and r.peak_mapped_bytes <= budget and r.peak_allocated_bytes <= budget
        assert r.peak_inflight <= 3
        assert sorted(results) == list(range(200)) and set(results.values()) == {None}
        assert r.allocated_bytes == 0 and r.pending == 0


def test_submit_would_block_or_times_out_when_the_budget_is_full(store):
    keys, _ = fill(store, 3, size=20_000)
    with StagingReader(max_inflight=2, budget_bytes=2 * file_bytes(20_000)) as r:
        held = [r.submit(store.path(k), key=k).result() for k in keys[:2]]
        assert r.submit(store.path(keys[2]), key=keys[2], block=False) is None
        assert r.submit(store.path(keys[2]), key=keys[2], timeout=0.01) is None
        held[0].release()
        s = r.submit(store.path(keys[2]), key=keys[2], block=False)
        assert s is not None and s.result().ok
        s.release()
        held[1].release()
        assert r.allocated_bytes == 0


def test_a_blocked_submit_resumes_when_a_consumer_releases(store):
    keys, _ = fill(store, 2, size=20_000)
    with StagingReader(max_inflight=1, budget_bytes=file_bytes(20_000)) as r:
        first = r.submit(store.path(keys[0]), key=keys[0]).result()
        timer = threading.Timer(0.05, first.release)
        timer.start()
        with r.submit(store.path(keys[1]), key=keys[1]) as second:  # blocks until the timer releases
            assert second.ok and first._released
        timer.join()


def test_a_payload_still_exported_at_release_is_not_reused(store):
    """A numpy array over a released payload keeps its bytes: the buffer stays counted (never handed to
    another read) until the array goes."""
    keys, payloads = fill(store, 3, size=20_000)
    one = file_bytes(20_000)
    with StagingReader(max_inflight=1, budget_bytes=2 * one) as r:
        s = r.submit(store.path(keys[0]), key=keys[0]).result()
        arr = np.frombuffer(s.payload, dtype=np.uint8)
        s.release()
        assert r.allocated_bytes == one
        for k, p in zip(keys[1:], payloads[1:]):
            with r.submit(store.path(k), key=k) as t:
                assert bytes(t.payload) == p
        assert arr.tobytes() == payloads[0]  # untouched by the later reads
        assert r.allocated_bytes == one and r._mapped() <= 2 * one
        del arr
        gc.collect()
        assert r.allocated_bytes == 0


def test_stream_releases_everything_when_closed_early(store):
    keys, _ = fill(store, 10, size=20_000)
    with StagingReader(max_inflight=2, budget_bytes=3 * file_bytes(20_000)) as r:
        gen = r.stream(store.path(k) for k in keys)
        first = next(gen)
        assert first.ok
        gen.close()
        assert r.allocated_bytes == 0 and r.pending == 0 and first._released
        assert sum(1 for s in r.stream([]) if s) == 0


# ---- calibrate-disk ------------------------------------------------------------------------------------------

TINY = ["--size-mb", "1", "--block-sizes", "4,64", "--queue-depths", "1,2"]


@pytest.fixture
def own_presets(monkeypatch):
    """Preset files registered by a test stay in the test."""
    monkeypatch.setattr(presets, "_user_files", [])
    monkeypatch.delenv("LLMEXPLORE_PRESETS", raising=False)
    presets.clear_cache()
    yield
    presets.clear_cache()


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_calibrate_disk_json_points_files_removed_and_preset_loads(tmp_path, capsys, own_presets, monkeypatch):
    disk = tmp_path / "disk"
    disk.mkdir()
    save = tmp_path / "my-disk.yaml"
    code, out, err = run_cli(capsys, "calibrate-disk", str(disk), *TINY, "--json", "--save", str(save),
                             "--name", "tmp-disk")
    assert code == 0 and err == ""
    res = json.loads(out)
    grid = {(p["io_KiB"], p["queue_depth"]): p for p in res["points"]}
    assert set(grid) == {(4, 1), (4, 2), (64, 1), (64, 2)}
    for p in grid.values():
        assert p["read_GBps"] > 0 and p["latency_us"] > 0 and p["requests"] >= 16 and p["misses"] == 0
    assert res["direct"] is direct_io_supported(disk) and res["filesystem"] != "unknown"
    assert list(disk.iterdir()) == []  # every file it wrote is gone
    assert res["saved"] == str(save)
    entry = res["preset"]["tmp-disk"]
    assert entry["read_GBps"] == pytest.approx(max(p["read_GBps"] for p in grid.values()), rel=1e-3)
    assert entry["latency_us"] == pytest.approx(grid[(4, 1)]["latency_us"], rel=1e-3, abs=0.01)
    assert (entry["io_KiB"], entry["queue_depth"]) in grid and entry["link_GBps"] == 0 and entry["h2d_GBps"] == 25
    assert all(src.startswith(f"measured by llmexplore calibrate-disk on {disk}")
               for k, src in entry["sources"].items() if k != "h2d_GBps")
    assert "assumption" in entry["sources"]["h2d_GBps"]
    presets.add_file(save)
    tier = presets.table("storage")["tmp-disk"]
    assert tier.read_GBps == entry["read_GBps"] and tier.kind == "ssd" and tier.effective_GBps() > 0
    monkeypatch.setattr(presets, "_user_files", [])
    monkeypatch.setenv("LLMEXPLORE_PRESETS", str(save))
    presets.clear_cache()
    assert presets.storage("tmp-disk").io_KiB == entry["io_KiB"]


def test_calibrate_disk_text_output_and_default_save(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "calibrate-disk", ".", *TINY, "--kind", "network", "--h2d-gbps", "12.5")
    assert code == 0 and err == ""
    assert "read GB/s" in out and "latency us" in out and "all files removed" in out
    assert f"to {tmp_path / cal.DEFAULT_SAVE}" in out and "LLMEXPLORE_PRESETS=" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [cal.DEFAULT_SAVE]
    text = (tmp_path / cal.DEFAULT_SAVE).read_text()
    assert "kind: network" in text and "h2d_GBps: 12.5" in text
    code, out, _ = run_cli(capsys, "calibrate-disk", ".", *TINY, "--no-save")
    assert code == 0 and "saved" not in out


@pytest.mark.parametrize("make, why", [(lambda d: d / "missing", "does not exist"),
                                       (lambda d: (d / "f").write_text("x") and d / "f", "is a file"),
                                       (lambda d: "", "non-empty text")])
def test_calibrate_disk_refuses_a_bad_path_in_one_line(tmp_path, capsys, make, why):
    path = str(make(tmp_path))
    code, out, err = run_cli(capsys, "calibrate-disk", path, *TINY)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("llmexplore: error: PATH must be a writable directory") or "PATH" in err
    assert why in err and (path in err or not path)


def test_calibrate_disk_refuses_a_read_only_directory(tmp_path, capsys, monkeypatch):
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == tmp_path else real_access(p, mode))
    code, _, err = run_cli(capsys, "calibrate-disk", str(tmp_path), *TINY)
    assert code == 2 and f"PATH must be a writable directory, got '{tmp_path}' (permission denied)" in err


@pytest.mark.parametrize("argv, flag", [(["--block-sizes", "4,6"], "--block-sizes"),
                                        (["--block-sizes", "4096"], "--block-sizes"),
                                        (["--queue-depths", "0"], "--queue-depths"),
                                        (["--size-mb", "0"], "--size-mb"),
                                        (["--kind", "dram"], "--kind"),
                                        (["--h2d-gbps", "0"], "--h2d-gbps")])
def test_calibrate_disk_option_errors_name_the_flag(tmp_path, capsys, argv, flag):
    code, out, err = run_cli(capsys, "calibrate-disk", str(tmp_path), "--size-mb", "1", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and flag in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fault", [RuntimeError("a bug mid-run"), KeyboardInterrupt()])
def test_calibrate_removes_its_files_on_error_and_interrupt(tmp_path, monkeypatch, fault):
    def broken(*a, **kw):
        assert any(tmp_path.iterdir())  # the scratch directory and its test file exist now
        raise fault

    monkeypatch.setattr(cal, "_measure_point", broken)
    with pytest.raises(type(fault)):
        cal.calibrate(tmp_path, size_MB=1, block_sizes_KiB=[4], queue_depths=[1])
    assert list(tmp_path.iterdir()) == []


def test_calibrate_disk_interrupted_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cal, "_measure_point", lambda *a, **kw: (_ for _ in ()).throw(KeyboardInterrupt()))
    code, out, _ = run_cli(capsys, "calibrate-disk", str(tmp_path), *TINY, "--no-save")
    assert code == 130 and "interrupted" in out and list(tmp_path.iterdir()) == []


def test_calibrate_where_o_direct_is_refused_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "direct_io_supported", lambda d: False)
    res = cal.calibrate(tmp_path, size_MB=1, block_sizes_KiB=[4], queue_depths=[1])
    assert res["direct"] is False and any("refuses O_DIRECT" in n for n in res["notes"])
    assert "page cache" in res["preset"]["measured-disk"]["sources"]["read_GBps"]
    assert "refuses O_DIRECT" in cal.preset_yaml(res)


def test_filesystem_type():
    assert cal.filesystem_type("/proc/self") == "proc"
    if Path("/dev/shm").is_dir():
        assert cal.filesystem_type("/dev/shm") == "tmpfs"
    assert cal.filesystem_type(Path(__file__)) not in ("", "unknown")


# ---- the replay ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def setup8b():
    """Llama-3-8B on one H100 against an NVMe Gen4 tier: the gate's break-even is a few blocks."""
    return sweeps_offload.setup("llama-3-8b", "h100-sxm", storage="nvme-gen4", tp=1)


def test_synthetic_trace_shares_prefixes():
    tr = rp.synthetic_trace(20, (300, 1000), suffix_tokens=50, rate_per_s=5.0, seed=3)
    assert len(tr) == 20 and np.all(np.diff(tr.arrival_s) > 0) and tr.arrival_s[0] > 0
    assert set(tr.prefix_tokens) <= {300.0, 1000.0} and len(set(tr.prefix_id)) == 2
    for i in range(20):
        assert len(tr.tokens[i]) == tr.prefix_tokens[i] + 50
        j = next(j for j in range(20) if tr.prefix_id[j] == tr.prefix_id[i])
        L = int(tr.prefix_tokens[i])
        assert np.array_equal(tr.tokens[i][:L], tr.tokens[j][:L])
    assert np.array_equal(rp.synthetic_trace(5, (64,), seed=1).tokens[3], rp.synthetic_trace(5, (64,), seed=1).tokens[3])
    with pytest.raises(SpecError, match="weights"):
        rp.synthetic_trace(4, (64, 128), weights=[1.0])
    with pytest.raises(SpecError, match="rate_per_s"):
        rp.synthetic_trace(4, (64,), rate_per_s=0)


def test_replay_gates_loads_for_real_and_reports_measured_next_to_modelled(tmp_path, setup8b):
    s = setup8b
    be = of.break_even(s.dep, s.tier)["tokens"]
    assert 256 < be <= 2048  # 1,792 tokens: the trace's 256-token prefixes recompute, its 2,048-token ones load
    tr = rp.synthetic_trace(10, (256, 2048), suffix_tokens=256, seed=2)
    out = rp.replay(s.dep, s.tier, tr, tmp_path, block_bytes=8192)
    r, summary = out["requests"], out["summary"]
    first = {int(p): int(np.argmax(tr.prefix_id == p)) for p in set(tr.prefix_id)}
    for i in range(10):
        cached = r["cached_tokens"][i]
        assert cached == (0 if i in first.values() else tr.prefix_tokens[i] // 256 * 256)
        assert r["decision"][i] == ("load" if cached >= be and cached > 0 else "recompute")
        loaded = r["decision"][i] == "load"
        assert np.isfinite(r["measured_read_s"][i]) == loaded and np.isfinite(r["modelled_read_s"][i]) == loaded
        if loaded:
            assert r["loaded_tokens"][i] == cached and r["block_misses"][i] == 0
            assert r["measured_read_s"][i] > 0 and r["modelled_load_s"][i] > 0
            assert r["prefill_rest_s"][i] < r["prefill_full_s"][i]
    assert summary["loads"] == int(np.sum(r["decision"] == "load")) > 0
    assert summary["bytes_read"] == summary["loads"] * 8 * rp.file_bytes(8192)  # 2048 tokens = 8 blocks each
    assert summary["replay_block_B"] == 8192 and summary["real_block_B"] == of.block_bytes(s.dep.model)
    assert summary["direct"] is direct_io_supported(tmp_path)
    assert np.all(r["ttft_preload_s"] <= r["ttft_offload_s"] + 1e-12)  # preloading only hides load time
    assert np.all(r["ttft_recompute_s"] >= r["prefill_full_s"] - 1e-12)
    first_load = int(np.argmax(r["decision"] == "load"))  # until then both queues serve the same requests
    assert np.array_equal(r["ttft_offload_s"][:first_load], r["ttft_recompute_s"][:first_load])


def test_replay_of_a_corrupted_block_loads_only_the_prefix_before_it(tmp_path, setup8b):
    s = setup8b
    tr = rp.synthetic_trace(6, (2048,), suffix_tokens=100, seed=4)
    rp.replay(s.dep, s.tier, tr, tmp_path, block_bytes=8192)  # fills the store
    store = BlockStore(tmp_path, block_tokens=256, namespace=f"{s.dep.model.name}/bf16/256")
    keys = store.keys(tr.tokens[0][:2048])
    _corrupt(store.path(keys[3]), HEADER_BYTES + 7, b"\x00\x01\x02")
    out = rp.replay(s.dep, s.tier, tr, tmp_path, block_bytes=8192)
    r = out["requests"]
    assert np.all(r["decision"] == "load") and np.all(r["cached_tokens"] == 2048)
    assert np.all(r["loaded_tokens"] == 3 * 256) and np.all(r["block_misses"] == 1)
    assert out["summary"]["store"]["misses"] == {"checksum": 6}


def test_replay_for_the_notebook(setup8b):
    df = sweeps_offload.measured_replay(setup8b, n_requests=6, max_block_bytes=8192)
    assert df is not None and len(df) > 0
    assert {"modelled_ms", "measured_ms", "prefix_tokens", "decision"} <= set(df.columns)
    assert (df["measured_ms"] > 0).all() and (df["modelled_ms"] > 0).all()


# ---- issue 20 §2: the store's own boundary -----------------------------------------------------------------
def test_a_symlinked_fanout_directory_never_takes_a_write_outside_the_root(tmp_path):
    from llmexplore.storage.blocks import BlockStore

    root, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    elsewhere.mkdir()
    bs = BlockStore(root)
    key = "ab" + "0" * 62
    (root / "ab").symlink_to(elsewhere, target_is_directory=True)
    assert bs.put(key, b"x" * 10) is False and bs.write_errors["ELOOP"] == 1
    assert list(elsewhere.iterdir()) == []
    (elsewhere / (key + ".kvb")).write_bytes(b"\0" * 4096)
    assert bs.get(key) is None and bs.misses["io_error"] == 1  # nor a read from outside it


def test_a_fifo_at_a_block_path_is_a_miss_not_a_hang(tmp_path):
    import os

    from llmexplore.storage.blocks import BlockStore

    bs = BlockStore(tmp_path)
    key = "cd" + "1" * 62
    bs.path(key).parent.mkdir()
    os.mkfifo(bs.path(key))
    assert bs.get(key) is None and bs.misses["not_a_file"] == 1


@pytest.mark.parametrize("key", [" " * 64, "ab" + " " * 62, "\t" * 64, "0" * 63 + "\n"])
def test_whitespace_is_not_a_key(key, tmp_path):
    from llmexplore.errors import SpecError
    from llmexplore.storage.blocks import BlockStore

    with pytest.raises(SpecError, match="key must be 64 hex digits"):
        BlockStore(tmp_path).put(key, b"x")
