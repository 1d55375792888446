"""Wire frames of a transfer plan, protocol version 1 (TokenSpeed ``encode_transfer_fragments`` /
``decode_transfer_fragments``, commit 215acaf1).

A plan travels as two frames: the version (its ASCII decimal digits, ``b"1"``) and the payload, the fragments
as a compact JSON array (``separators=(",", ":")``, ASCII-escaped) of objects with exactly the keys of
:class:`~.layout.TransferFragment` in field order, ``buffer_kind`` as its string value and ``page_count`` as
``null`` when absent. Encoding is byte-identical to the runtime's; decoding accepts every frame the runtime
writes and is stricter than the runtime on everything else: whatever the bytes, it returns fragments or raises
:class:`~llmexplore.errors.UnsupportedPDLayoutError` with the reason (the runtime lets ``KeyError``,
``JSONDecodeError`` or a silently truncated ``int(2.7)`` through).
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from .._check import shown
from ..errors import UnsupportedPDLayoutError
from .layout import FRAGMENT_FIELDS, BufferKind, TransferFragment, _fragment, _fragment_ok

__all__ = ["TRANSFER_PLAN_PROTOCOL_VERSION", "MAX_PAYLOAD_BYTES", "encode_transfer_fragments",
           "decode_transfer_fragments"]

TRANSFER_PLAN_PROTOCOL_VERSION = 1
#: largest payload frame decoded (256 MiB: about a million fragments)
MAX_PAYLOAD_BYTES = 1 << 28
_DIGITS = re.compile(rb"[0-9]{1,9}")
_KEYS = frozenset(FRAGMENT_FIELDS)
_KIND = {k.value: k for k in BufferKind}
_VERSION_FRAME = str(TRANSFER_PLAN_PROTOCOL_VERSION).encode("ascii")
_OBJECT = ("{" + ",".join(f'"{name}":' + ('"%s"' if name == "buffer_kind" else "%s") for name in FRAGMENT_FIELDS)
           + "}")


def encode_transfer_fragments(fragments: Iterable[TransferFragment]) -> tuple[bytes, bytes]:
    """``(version_frame, payload_frame)`` of ``fragments`` (e.g. ``plan.fragments``)."""
    parts = []
    for i, f in enumerate(fragments):
        if type(f) is not TransferFragment:
            raise UnsupportedPDLayoutError(f"fragments[{i}] must be a TransferFragment, got {shown(f)}")
        d = f.__dict__
        pc = d["page_count"]
        # every value is an int, None or a BufferKind value (plain ASCII): this is exactly what
        # json.dumps(..., separators=(",", ":")) writes, at a fraction of its cost (a test keeps them equal)
        parts.append(_OBJECT % (d["buffer_index"], d["buffer_kind"].value, d["src_rank"], d["dst_rank"],
                                d["src_page_stride_bytes"], d["dst_page_stride_bytes"], d["src_byte_offset"],
                                d["dst_byte_offset"], d["bytes_per_page"], "null" if pc is None else pc))
    return _VERSION_FRAME, ("[" + ",".join(parts) + "]").encode("ascii")


def _frame(name: str, frame: Any) -> bytes:
    if frame is None:
        return b""
    if isinstance(frame, (bytes, bytearray, memoryview)):
        return bytes(frame)
    raise UnsupportedPDLayoutError(f"{name} must be bytes or None, got {shown(frame)}")


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        keys = [k for k, _ in pairs]
        raise ValueError(f"key {next(k for k in keys if keys.count(k) > 1)!r} appears twice in one object")
    return out


def decode_transfer_fragments(version_frame: bytes | None, payload_frame: bytes | None
                              ) -> tuple[TransferFragment, ...]:
    """The fragments of a version-1 frame pair. Two empty (or ``None``) frames mean no fragments; anything
    else that is not a valid version-1 pair raises :class:`UnsupportedPDLayoutError` saying why."""
    version_bytes = _frame("version_frame", version_frame)
    payload_bytes = _frame("payload_frame", payload_frame)
    if not version_bytes and not payload_bytes:
        return ()
    if not version_bytes or not payload_bytes:
        missing = "version" if not version_bytes else "payload"
        raise UnsupportedPDLayoutError(f"incomplete transfer plan frames: the {missing} frame is missing or empty "
                                       f"(both frames must be present, or both empty for no fragments)")
    if not _DIGITS.fullmatch(version_bytes):
        raise UnsupportedPDLayoutError(f"version_frame must be the ASCII digits of a protocol version, got "
                                       f"{shown(version_bytes)}")
    version = int(version_bytes)
    if version != TRANSFER_PLAN_PROTOCOL_VERSION:
        raise UnsupportedPDLayoutError(f"unsupported transfer plan protocol version={version}: this planner speaks "
                                       f"version {TRANSFER_PLAN_PROTOCOL_VERSION}")
    if len(payload_bytes) > MAX_PAYLOAD_BYTES:
        raise UnsupportedPDLayoutError(f"payload_frame must be at most {MAX_PAYLOAD_BYTES:,} bytes, got "
                                       f"{len(payload_bytes):,}")
    try:
        raw = json.loads(payload_bytes.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_pairs)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise UnsupportedPDLayoutError(f"payload_frame must be UTF-8 JSON, got malformed data ({reason})") from None
    if not isinstance(raw, list):
        raise UnsupportedPDLayoutError(f"payload_frame must hold a JSON array of fragments, got a "
                                       f"{type(raw).__name__}")
    out = []
    for i, obj in enumerate(raw):
        if not isinstance(obj, dict):
            raise UnsupportedPDLayoutError(f"payload_frame fragment {i} must be a JSON object, got {shown(obj)}")
        keys = obj.keys()
        if keys != _KEYS:
            missing, extra = sorted(_KEYS - keys), sorted(keys - _KEYS)
            what = "; ".join(x for x in (f"missing {missing}" if missing else "",
                                         f"unknown {[shown(k) for k in extra]}" if extra else "") if x)
            raise UnsupportedPDLayoutError(f"payload_frame fragment {i} must have exactly the keys "
                                           f"{list(FRAGMENT_FIELDS)}: {what}")
        bi, kind, src, dst, sps, dps, so, do, bpp, pc = (obj[name] for name in FRAGMENT_FIELDS)
        # JSON integers decode to exactly int (never bool or float), so an exact type test is the rule
        if (type(bi) is int and type(src) is int and type(dst) is int and type(sps) is int and type(dps) is int
                and type(so) is int and type(do) is int and type(bpp) is int and (pc is None or type(pc) is int)
                and type(kind) is str and kind in _KIND  # a list or object kind is unhashable: test str first
                and _fragment_ok(bi, src, dst, sps, dps, so, do, bpp, pc)):
            out.append(_fragment(bi, _KIND[kind], src, dst, sps, dps, so, do, bpp, pc))
            continue
        for name in FRAGMENT_FIELDS:  # the slow path: say what is wrong
            v = obj[name]
            if name == "buffer_kind":
                ok = isinstance(v, str)
            elif name == "page_count":
                ok = v is None or type(v) is int
            else:
                ok = type(v) is int
            if not ok:
                rule = "a string" if name == "buffer_kind" else "an integer or null" if name == "page_count" \
                    else "an integer"
                raise UnsupportedPDLayoutError(f"payload_frame fragment {i}: {name} must be {rule}, got {shown(v)}")
        try:
            TransferFragment(**obj)
        except UnsupportedPDLayoutError as exc:
            raise UnsupportedPDLayoutError(f"payload_frame fragment {i}: {exc}") from None
        # pragma: no cover (the fast check and the constructor apply the same rules; a test keeps them equal)
        raise AssertionError(f"fragment {i} failed the fast check but passed the constructor: {obj}")
    return tuple(out)
