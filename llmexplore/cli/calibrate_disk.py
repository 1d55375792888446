"""``llmexplore calibrate-disk PATH``: measure a directory's read bandwidth and latency, save a storage preset.

Write a test file under PATH (in a unique scratch directory), read it back with the staging reader (O_DIRECT,
random requests) at each request size and queue depth, time opening a block file, remove every file it wrote,
and save the result as a storage preset (data/storage.yaml format) for the offload model.
"""

from __future__ import annotations

from ._framework import (EXIT_OK, Checked, Col, Rule, command, format_table, int_in, number_in, one_of,
                         print_json, text_value)
__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command
FLAGS = {"block_sizes_KiB": "--block-sizes", "queue_depths": "--queue-depths", "size_MB": "--size-mb",
         "h2d_GBps": "--h2d-gbps", "kind": "--kind", "name": "--name", "path": "PATH"}


def int_list(lo: int, hi: int, *, multiple: int = 1, unit: str = "", max_items: int = 16) -> Rule:
    """A comma-separated list of integers in [lo, hi] (each a multiple of ``multiple``), at most ``max_items``."""
    from .. import _check

    def convert(text: str) -> tuple[int, ...]:
        items = [t.strip() for t in text.split(",")]
        if not 1 <= len(items) <= max_items:
            raise ValueError(text)
        values = []
        for t in items:
            if not t.isascii() or not t.isdigit() or len(t) > 12:
                raise ValueError(text)
            v = _check.integer("value", int(t), lo=lo, hi=hi)
            if v % multiple:
                raise ValueError(text)
            values.append(v)
        return tuple(values)

    rule = f"a comma-separated list of at most {max_items} integers in [{lo:,}, {hi:,}]"
    if multiple > 1:
        rule += f", multiples of {multiple}"
    return Rule(rule + (f" [{unit}]" if unit else ""), convert)


def add(sub) -> None:
    from ..specs import STORAGE_KINDS
    from ..storage import calibrate as cal

    p = command(sub, "calibrate-disk", __doc__,
                help="measure a directory's read bandwidth and latency; save a storage preset")
    p.add_argument("path", metavar="PATH", help="a writable directory on the disk to measure")
    p.add_argument("--block-sizes", default=cal.DEFAULT_BLOCK_SIZES_KIB, action=Checked,
                   check=int_list(4, 1 << 20, multiple=4, unit="KiB"), metavar="KIB,...",
                   help="request sizes [KiB] (default: " + ",".join(map(str, cal.DEFAULT_BLOCK_SIZES_KIB)) + ")")
    p.add_argument("--queue-depths", default=cal.DEFAULT_QUEUE_DEPTHS, action=Checked, check=int_list(1, 256),
                   metavar="QD,...", help="reads in flight (default: " + ",".join(map(str, cal.DEFAULT_QUEUE_DEPTHS))
                                          + ")")
    p.add_argument("--size-mb", default=cal.DEFAULT_SIZE_MB, action=Checked, check=int_in(1, cal.MAX_SIZE_MB, unit="MB"),
                   metavar="N", help=f"size of the test file [MB] (default: {cal.DEFAULT_SIZE_MB}); about as much "
                                     f"is read")
    p.add_argument("--h2d-gbps", default=cal.DEFAULT_H2D_GBPS, action=Checked,
                   check=number_in(0.0, 1e6, lo_open=True, unit="GB/s"), metavar="X",
                   help=f"host -> GPU bandwidth written into the preset, not measured (default: "
                        f"{cal.DEFAULT_H2D_GBPS:g}, an assumption)")
    p.add_argument("--kind", default="ssd", action=Checked, check=one_of([k for k in STORAGE_KINDS if k != "dram"]),
                   metavar="KIND", help="preset kind: ssd or network (default: ssd)")
    p.add_argument("--name", default="measured-disk", action=Checked,
                   check=text_value("a storage preset name (non-empty text of at most 100 characters)", 100),
                   metavar="NAME", help="name of the saved storage preset (default: measured-disk)")
    p.add_argument("--save", default=cal.DEFAULT_SAVE, action=Checked, check=text_value("a file path", 4096),
                   metavar="FILE", help=f"where to write the preset YAML (default: ./{cal.DEFAULT_SAVE}); use it "
                                        f"with LLMEXPLORE_PRESETS=FILE or presets.add_file")
    p.add_argument("--no-save", action="store_true", help="measure and print only")
    p.add_argument("--json", action="store_true",
                   help='JSON: {"points": [{"io_KiB", "queue_depth", "read_GBps", "latency_us", ...}], '
                        '"preset": {...}, "saved": FILE, ...}')
    p.set_defaults(func=run, flags=FLAGS)


POINT_COLS = [Col("io_KiB", "io KiB", ","), Col("queue_depth", "QD"), Col("read_GBps", "read GB/s", ".3f"),
              Col("latency_us", "latency us", ",.1f"), Col("p99_us", "p99 us", ",.1f"), Col("requests", "requests", ","),
              Col("misses", "misses", ",")]


def run(args) -> int:
    import os

    from ..errors import SpecError
    from ..storage import calibrate as cal
    from .calibrate import _check_save_target

    root = cal.check_directory(args.path, "PATH")
    save = None if args.no_save else _check_save_target(args.save)
    try:
        result = cal.calibrate(root, block_sizes_KiB=args.block_sizes, queue_depths=args.queue_depths,
                               size_MB=args.size_mb, h2d_GBps=args.h2d_gbps, kind=args.kind, name=args.name)
    except KeyboardInterrupt:
        print("llmexplore: interrupted; the test files were removed", flush=True)
        return 130
    if save is not None:
        try:
            cal.save_preset(result, save)
        except OSError as exc:
            raise SpecError(f"--save could not be written: {args.save!r}: {exc.strerror or exc}") from None
    saved = str(save) if save is not None else None
    if args.json:
        print_json({**{k: v for k, v in result.items() if k != "latency_point"}, "saved": saved})
        return EXIT_OK
    best, lat = result["best"], result["latency_point"]
    how = "O_DIRECT" if result["direct"] else "buffered reads"
    print(f"calibrate-disk {result['path']} ({result['filesystem']}, {how}): a {result['size_MB']:,} MB test file, "
          f"{len(result['points'])} points, all files removed")
    print(format_table(result["points"], POINT_COLS))
    print(f"best: {best['read_GBps']:.3f} GB/s at {best['io_KiB']:,} KiB x QD{best['queue_depth']}; one "
          f"{lat['io_KiB']:,} KiB read at QD{lat['queue_depth']}: {lat['latency_us']:,.1f} us; open + close of a "
          f"block file: {result['block_overhead_us']:,.1f} us")
    for note in result["notes"]:
        print(f"note: {note}")
    if saved is not None:
        shown_path = saved if os.path.isabs(args.save) else args.save
        print(f"saved storage preset {args.name!r} to {os.path.abspath(saved)}: use LLMEXPLORE_PRESETS={shown_path} "
              f"and --storage {args.name} (or llmexplore.presets.add_file)")
    return EXIT_OK
