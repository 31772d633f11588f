"""ns per AMX-BF16 tile product on one core: alone (by row count), and with tile loads from a 4 KiB, 32 KiB or 1 MiB
buffer on a 64-byte line or 16 bytes past one (where std::vector's malloc puts its data). Best of 3.

    python bench/results/s49/scratch/tile_loads.py            (an AMX-BF16 machine)
"""
from pathlib import Path

from verispec import kernels

here = Path(__file__).parent
ext = kernels.compile_extension("tile_loads", [here / "tile_loads.cpp"], kernels.build_dir().parent / "s49-tile-loads",
                                [Path(kernels.__file__).parent])
best = lambda *a: min(ext.time_products(1_000_000, *a) for _ in range(3))   # noqa: E731
for rows in (1, 8, 16):
    print(f"products alone, {rows:2d} rows: {best(rows, 4, 0, False):5.2f} ns")
for kib in (4, 32, 1024):
    print(f"16 rows, loads from {kib:4d} KiB: on a line {best(16, kib, 0, True):5.2f} ns, "
          f"16 bytes past one {best(16, kib, 16, True):5.2f} ns")
