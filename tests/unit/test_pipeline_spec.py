"""The pipeline spec layer without Spark: field metadata -> validation and fingerprints, spec
checks, the registry, and one-line errors."""

import pytest

from jobs.s3j.config import S3JConfig
from jobs.ssj.config import SSJConfig
from simjoin.config import ConfigError, fingerprint
from simjoin.pipeline import PipelineSpec, Stage, get_spec, specs
from simjoin.pipeline.runner import one_line


def test_registry_finds_every_pipeline_package():
    assert {"generate", "ssj", "s3j"} <= set(specs())
    with pytest.raises(ValueError, match="unknown pipeline 'nope': allowed"):
        get_spec("nope")


def test_spec_checks_its_own_shape():
    st = Stage("a", "x:y")
    with pytest.raises(ValueError, match="invalid pipeline name"):
        PipelineSpec(name="Bad-Name", config=SSJConfig, run_type="batch", stages=(st,), doc="d")
    with pytest.raises(ValueError, match="stage names must be unique"):
        PipelineSpec(name="ok", config=SSJConfig, run_type="batch", stages=(st, st), doc="d")
    with pytest.raises(ValueError, match="invalid stage 'zz' of pipeline ssj: allowed tokenize"):
        get_spec("ssj").stage("zz")


@pytest.mark.parametrize("kw,needle", [
    ({"threshold": 0.0}, "s3j.threshold=0.0: allowed a number > 0"),
    ({"threshold": 1.5}, "s3j.threshold=1.5: allowed 0 < threshold <= 1.0 for metric angular"),
    ({"metric": "manhattan"}, "allowed angular, euclidean or cosine"),
    ({"workers": 0}, "s3j.workers=0: allowed 1 <= workers <= 4096"),
    ({"window": "soon"}, "a positive duration such as 60s"),
    ({"ts_unit": "ns"}, "allowed s, ms or us"),
    ({"left": "/a", "right": "/a/"}, "a stream other than the left one"),
    ({"left": "/a", "output": "/a"}, "a path other than the left stream"),
])
def test_field_metadata_validates(kw, needle):
    with pytest.raises(ConfigError) as e:
        S3JConfig(**kw)
    assert needle in str(e.value)


def test_fingerprint_is_the_state_fields_only():
    a = S3JConfig(left="/a", output="/o")
    b = S3JConfig(left="/b", output="/p", exact_distances=True, max_future="2h")
    assert fingerprint(a) == fingerprint(b)  # paths and state=False fields do not change the state
    assert fingerprint(a) != fingerprint(S3JConfig(left="/a", output="/o", workers=6))


def test_required_paths_are_named():
    with pytest.raises(ConfigError, match=r"s3j.output=None: allowed a Delta table path \(required\)"):
        get_spec("s3j").make_run({"left": "/a"})


def test_one_line_errors():
    from simjoin.quality.gates import GateFailed

    wrapped = RuntimeError("An exception was raised by the Python Proxy.\nTraceback ...\n"
                           "ValueError: input /x lacks columns ['vector']")
    assert one_line(wrapped) == "input /x lacks columns ['vector']"
    gate = GateFailed("p", [{"expectation": "e", "kwargs": {}, "unexpected_count": 2, "samples": [1]}])
    assert "\n" not in one_line(gate) and "2 rows" in one_line(gate)
    assert one_line(OSError("disk\nfull")) == "OSError: disk"
    # any other error of a Python worker: its own last line, not Spark's wrapper (issue 63)
    worker = Exception("An exception was thrown from the Python worker. Please see the stack trace below.\n"
                       "Traceback (most recent call last):\n  File \"/x/worker.py\", line 1, in main\n"
                       "    raise IsADirectoryError\nIsADirectoryError: [Errno 21] Is a directory: '/out/part-0'\n")
    assert one_line(worker) == "IsADirectoryError: [Errno 21] Is a directory: '/out/part-0' (in a Spark task)"


def test_rows_where_keeps_single_valued_batches_and_filters_mixed_ones():
    import numpy as np
    import pyarrow as pa

    from simjoin.pipeline.stream import rows_where

    sch = pa.schema([("kind", pa.int8()), ("a", pa.int64()), ("b", pa.string())])
    batches = [pa.record_batch([pa.array([0, 0, 0], pa.int8()), pa.array([1, 2, 3]), pa.array(["x", "y", "z"])],
                               schema=sch),
               pa.record_batch([pa.array([1], pa.int8()), pa.array([9]), pa.array(["s"])], schema=sch),
               pa.record_batch([pa.array([1, 0, 1, 0], pa.int8()), pa.array([4, 5, 6, 7]),
                                pa.array(["p", "q", "r", None])], schema=sch),
               pa.record_batch([pa.array([], pa.int8()), pa.array([], pa.int64()), pa.array([], pa.string())],
                               schema=sch)]
    t = pa.Table.from_batches(batches)
    for kind in (0, 1, 2):
        want = t.filter(pa.array(np.asarray(t.column("kind")) == kind))
        got = rows_where(t, "kind", kind)
        assert got.schema == want.drop_columns(["kind"]).schema
        assert got.to_pydict() == want.drop_columns(["kind"]).to_pydict()
        assert rows_where(t, "kind", kind, ["b"]).to_pydict() == {"b": want.column("b").to_pylist()}
    assert rows_where(t, "kind", 0).column("a").chunks[0].buffers()[1].address == \
        t.column("a").chunks[0].buffers()[1].address  # a batch of one kind only is not copied
