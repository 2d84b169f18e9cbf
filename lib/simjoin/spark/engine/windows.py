"""Window assignment: time windows (tumbling or sliding) and count windows."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def assign_windows(df: DataFrame, size_s: float, slide_s: float | None = None, ts_col: str = "ts") -> DataFrame:
    """Time-based tumbling (``slide`` None or equal to ``size``) or sliding windows on ``ts``.

    Adds ``window_start`` and ``window_end``; with sliding windows a row appears once per window
    that contains it (start <= ts < end).
    """
    if size_s <= 0:
        raise ValueError(f"invalid window size {size_s}s: allowed > 0")
    slide_s = slide_s or size_s
    if not 0 < slide_s <= size_s:
        raise ValueError(f"invalid slide {slide_s}s: allowed 0 < slide <= window ({size_s}s)")
    w = F.window(F.col(ts_col), f"{round(size_s * 1e6)} microseconds", f"{round(slide_s * 1e6)} microseconds")
    return df.withColumn("_w", w).select(
        "*", F.col("_w.start").alias("window_start"), F.col("_w.end").alias("window_end")).drop("_w")


def assign_count_windows(df: DataFrame, size: int, slide: int | None = None, order: Sequence[str] = ("ts", "id"),
                         offset: int = 0) -> DataFrame:
    """Count-based windows: the i-th row (by ``order``, counting from ``offset``) belongs to
    windows k with k*slide <= i < k*slide + size. Adds ``window_id`` (and ``row_index``)."""
    if size < 1:
        raise ValueError(f"invalid count window {size}: allowed >= 1")
    slide = slide or size
    if not 1 <= slide <= size:
        raise ValueError(f"invalid count slide {slide}: allowed 1 <= slide <= window ({size})")
    from pyspark.sql import Window

    idx = F.row_number().over(Window.orderBy(*order)) - 1 + F.lit(offset)
    d = df.withColumn("row_index", idx)
    first = F.greatest(F.lit(0), F.floor((F.col("row_index") - size) / slide) + 1)
    last = F.floor(F.col("row_index") / slide)
    return d.withColumn("window_id", F.explode(F.sequence(first.cast("long"), last.cast("long"))))
