"""The Delta tables of a pipeline run, named after its output path. Pure Python (no pyspark), so
that building a DAG or a CLI command from a spec never imports Spark."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSJTables", "StreamTables", "DirTables"]


@dataclass(frozen=True)
class SSJTables:
    """The Delta tables of one set-similarity join, named after its output path."""

    output: str

    def _side(self, suffix: str) -> str:
        return f"{self.output.rstrip('/')}_{suffix}"

    @property
    def tokens(self) -> str:
        return self._side("tokens")

    @property
    def lengths(self) -> str:
        return self._side("lengths")

    @property
    def plan(self) -> str:
        return self._side("plan")

    @property
    def staging(self) -> str:
        return self._side("staging")

    @property
    def stats(self) -> str:
        return self._side("stats")

    @property
    def quarantine(self) -> str:
        return self._side("quarantine")

    @property
    def runs(self) -> str:
        """The input versions each run read (``simjoin.spark.pins``)."""
        return self._side("runs")

    @property
    def increments(self) -> str:
        """Per run: full or incremental, the published run it built on, and its published pair count."""
        return self._side("increments")

    def layout(self) -> dict[str, str]:
        """Role -> path of every part of the output (``simjoin.runtime.manifest``)."""
        return {"output": self.output, "tokens": self.tokens, "lengths": self.lengths, "plan": self.plan,
                "stats": self.stats, "quarantine": self.quarantine, "runs": self.runs,
                "increments": self.increments, "staging": self.staging,
                "manifest": f"{self.output.rstrip('/')}_manifest.json"}

    def all(self) -> dict[str, str]:
        return {"pairs": self.output, "tokens": self.tokens, "lengths": self.lengths, "plan": self.plan,
                "stats": self.stats, "quarantine": self.quarantine, "runs": self.runs,
                "increments": self.increments}


@dataclass(frozen=True)
class StreamTables:
    """Every table of a stream pipeline, beside its output."""

    output: str

    @property
    def checkpoint(self) -> str:
        return f"{self.output}_checkpoint"

    @property
    def stats(self) -> str:
        return f"{self.output}_stats"

    @property
    def quarantine(self) -> str:
        return f"{self.output}_quarantine"

    @property
    def state_dir(self) -> str:
        return f"{self.output}_state"

    @property
    def work_dir(self) -> str:
        return f"{self.output}_work"

    def state(self, name: str) -> str:
        return f"{self.state_dir}/{name}"

    def work(self, name: str) -> str:
        return f"{self.work_dir}/{name}"

    @property
    def progress(self) -> str:
        return self.state("progress")

    @property
    def records(self) -> str:
        return self.work("records")

    def paths(self) -> dict[str, str]:
        return {"output": self.output, "stats": self.stats, "quarantine": self.quarantine,
                "state": self.state_dir, "work": self.work_dir, "checkpoint": self.checkpoint}

    @property
    def manifest(self) -> str:
        """The output manifest (``simjoin.runtime.manifest``), beside the output."""
        return f"{self.output.rstrip('/')}_manifest.json"

    def layout(self) -> dict[str, str]:
        """Role -> path of every part of the output (``simjoin.runtime.manifest``): its tables, the
        records and progress tables, the publish markers' folder and the manifest itself."""
        return {**self.paths(), "records": self.records, "progress": self.progress,
                "markers": f"{self.work_dir}/_publishing", "manifest": self.manifest}


@dataclass(frozen=True)
class DirTables(StreamTables):
    """Every table of a stream pipeline whose output is a directory (S2J): one table per task at
    ``DIR/<task>``, and the pipeline's own tables under ``DIR/_<name>`` (a task name never
    starts with ``_``)."""

    @property
    def checkpoint(self) -> str:
        return self._under("checkpoint")

    @property
    def stats(self) -> str:
        return self._under("stats")

    @property
    def quarantine(self) -> str:
        return self._under("quarantine")

    @property
    def state_dir(self) -> str:
        return self._under("state")

    @property
    def work_dir(self) -> str:
        return self._under("work")

    @property
    def shed(self) -> str:
        return self._under("shed")

    @property
    def snapshots(self) -> str:
        """The snapshot index: per snapshot and task, the unit and the task table's version."""
        return self._under("snapshots")

    @property
    def manifest(self) -> str:
        return self._under("manifest.json")

    def task(self, name: str) -> str:
        return f"{self.output.rstrip('/')}/{name}"

    def _under(self, name: str) -> str:
        return f"{self.output.rstrip('/')}/_{name}"

    def paths(self) -> dict[str, str]:
        return {**super().paths(), "shed": self.shed, "snapshots": self.snapshots}
