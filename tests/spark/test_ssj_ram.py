"""The optimizer's RAM estimate (Fier & Freytag Sec. 2.3, with ``RamFactors.kernel()``) against
the measured peak of one unit's kernel at 200k records: the product's ``join_task`` (Arrow
batch in, ``ppjoin``, pairs out as Arrow) runs in a fresh Python process, as in a Spark worker,
and its resident-memory peak above the warmed-up worker is compared with the unit's estimate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from simjoin.core.setsim import RamFactors, make_plan

MEASURE = r"""
import json, os, sys
import pyarrow as pa
from simjoin.core.setsim import make_plan
from simjoin.operators import setsim
from simjoin.operators.setsim import join_task

# the kernel's own peak: without the heap a worker faults in once and keeps (keep_freed_memory),
# which the unit's arrays would reuse without raising the resident size
setsim._KEPT.append(False)

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

theta = float(sys.argv[2])
plan = make_plan([1], [1], theta)
with pa.OSFile(sys.argv[1], "rb") as f:
    table = pa.ipc.open_file(f).read_all().combine_chunks()
# warm the worker up on a small slice (numba, Arrow compute kernels): that is the worker's static part
join_task(table.slice(0, 2000), 0, plan, False)
def hwm():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM"))

base = rss() - table.nbytes  # the unit's own batch counts as its memory
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current resident size
pairs = join_task(table, 0, plan, False).num_rows - 1
peak = hwm()
print(json.dumps({"peak": peak - base, "rows": pairs}))
"""


def _unit_table(n: int, theta: float, nodes: int, mod: int, seed: int) -> tuple[pa.Table, int]:
    """One unit's records as its task unpacks them from the shuffle (``unpack``): Zipf sets in
    canonical order, a quarter of them copies of earlier records (many results); and the unit's RAM
    estimate."""
    rng = np.random.default_rng(seed)
    universe = 20_000
    p = np.arange(1, universe + 1, dtype=float) ** -1.0
    cdf = np.cumsum(p / p.sum())
    lengths = np.maximum(1, rng.poisson(12, n))
    flat = np.minimum(np.searchsorted(cdf, rng.random(lengths.sum())), universe - 1)
    key = np.unique(np.repeat(np.arange(n), lengths) * universe + (universe - 1 - flat))  # rarest first
    row, tok = key // universe, key % universe
    src = np.where(rng.random(n) < 0.25, rng.integers(0, n, n) // 50, np.arange(n))
    starts = np.searchsorted(row, np.arange(n + 1))
    cnt = starts[src + 1] - starts[src]
    take = np.repeat(starts[src], cnt) + np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    lens = cnt
    order = np.argsort(lens, kind="stable")  # rid order = length order
    order = order[lens[order] > 0]
    rec_start = np.concatenate([[0], np.cumsum(cnt)])
    rids = np.arange(order.size, dtype=np.int64)
    ls, cs = np.unique(lens[order], return_counts=True)
    plan = make_plan(ls, cs, theta, n=nodes, m=mod, factors=RamFactors.kernel())
    pos, unit, is_index, is_probe = plan.assign_units(lens[order], rids)
    sel = unit == 0
    pos = pos[sel]
    recs = order[pos]
    k = lens[recs]
    values = tok[take][np.repeat(rec_start[recs], k) + np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k)]
    table = pa.table({
        "unit": pa.array(np.zeros(pos.size, np.int32)), "pkey": pa.array(np.zeros(pos.size, np.int64)),
        "rid": pa.array(rids[pos]), "side": pa.array(np.zeros(pos.size, np.int32)), "id": pa.array(rids[pos] * 7),
        "tokens": pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(k)]).astype(np.int32)),
                                           pa.array(values.astype(np.int32))),
        "is_index": pa.array(is_index[sel]), "is_probe": pa.array(is_probe[sel])})
    return table, plan.units[0].est_ram_bytes


@pytest.mark.parametrize(("theta", "nodes", "mod"), [(0.6, 1, 1), (0.6, 2, 2), (0.8, 4, 1)])
def test_ram_estimate_within_1_5x_of_measured_unit_peak(tmp_path: Path, theta: float, nodes: int, mod: int) -> None:
    table, est = _unit_table(200_000, theta, nodes, mod, seed=1)
    path = tmp_path / "unit.arrow"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    out = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(theta)], capture_output=True, text=True,
                         check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rows"] > table.num_rows // 10  # the planted copies give results: their arrays count too
    ratio = got["peak"] / est
    print(f"unit ram: measured {got['peak'] / 2**20:.1f} MiB, estimated {est / 2**20:.1f} MiB, {got['rows']} rows")
    assert 1 / 1.5 <= ratio <= 1.5, f"measured {got['peak'] / 2**20:.1f} MiB, estimated {est / 2**20:.1f} MiB"
