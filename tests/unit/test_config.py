from pathlib import Path

import pytest

from jobs.ssj.config import SSJConfig
from simjoin.config import ConfigError, SparkConfig, load_config, parse_duration


def test_yaml_defaults_load():
    cfg = load_config(SparkConfig, "spark")
    assert cfg.master.startswith("local")
    ssj = load_config(SSJConfig, "ssj")
    assert 0 < ssj.threshold <= 1


def test_precedence_env_over_yaml_cli_over_env(tmp_path, monkeypatch):
    y = tmp_path / "ssj.yaml"
    y.write_text("ssj:\n  threshold: 0.7\n  similarity: dice\n")
    assert load_config(SSJConfig, "ssj", path=y).threshold == 0.7
    monkeypatch.setenv("SIMJOIN_SSJ_THRESHOLD", "0.9")
    cfg = load_config(SSJConfig, "ssj", path=y)
    assert (cfg.threshold, cfg.similarity) == (0.9, "dice")
    assert load_config(SSJConfig, "ssj", {"threshold": 0.95}, path=y).threshold == 0.95
    monkeypatch.setenv("SIMJOIN_SPARK_MASTER", "local[3]")
    monkeypatch.setenv("SIMJOIN_WAREHOUSE", "/tmp/elsewhere")
    sc = load_config(SparkConfig, "spark")
    assert (sc.master, sc.warehouse) == ("local[3]", "/tmp/elsewhere")
    assert load_config(SparkConfig, "spark", {"master": "local[1]"}).master == "local[1]"


@pytest.mark.parametrize("key,value,needle", [
    ("threshold", 0, "0 < threshold <= 1"),
    ("threshold", 1.5, "0 < threshold <= 1"),
    ("threshold", float("nan"), "0 < threshold <= 1"),
    ("similarity", "overlap", "jaccard, cosine or dice"),
    ("tokenizer", "qgram:x", "qgram:N"),
    ("workers", 0, ">= 1"),
])
def test_bad_values_name_key_value_and_allowed(key, value, needle):
    with pytest.raises(ConfigError) as e:
        load_config(SSJConfig, "ssj", {key: value})
    msg = str(e.value)
    assert f"ssj.{key}" in msg and needle in msg and repr(value)[:3] in msg


def test_bad_type_and_unknown_key(tmp_path):
    with pytest.raises(ConfigError, match="ssj.workers"):
        load_config(SSJConfig, "ssj", {"workers": "many"})
    y = tmp_path / "ssj.yaml"
    y.write_text("ssj:\n  treshold: 0.7\n")
    with pytest.raises(ConfigError, match="ssj.treshold"):
        load_config(SSJConfig, "ssj", path=y)
    with pytest.raises(ConfigError, match="spark.master"):
        SparkConfig(master="mesos://x")


def test_config_is_frozen():
    cfg = SSJConfig()
    with pytest.raises(Exception):
        cfg.threshold = 0.1  # type: ignore[misc]


def test_parse_duration():
    assert parse_duration("60s") == 60 and parse_duration("5m") == 300 and parse_duration("250ms") == 0.25
    with pytest.raises(ValueError, match="allowed"):
        parse_duration("soon")


def test_generate_drift_params():
    from jobs.generate.config import GenerateConfig

    cfg = load_config(GenerateConfig, "generate", {"out": "/tmp/x", "drift": "wander", "drift_period": "30s"})
    assert (cfg.drift, parse_duration(cfg.drift_period), cfg.drift_after) == ("wander", 30.0, 2)
    with pytest.raises(ConfigError, match=r"generate\.drift='skew'.*only for vectors"):
        GenerateConfig(kind="keys", out="/tmp/x", drift="skew")
    with pytest.raises(ConfigError, match=r"generate\.drift='drifty'.*none, wander or skew"):
        GenerateConfig(out="/tmp/x", drift="drifty")
    with pytest.raises(ConfigError, match=r"generate\.drift_period"):
        GenerateConfig(out="/tmp/x", drift="skew", drift_period="0s")
    with pytest.raises(ConfigError, match=r"generate\.drift_after"):
        GenerateConfig(out="/tmp/x", drift="skew", drift_after=-1)


def test_a_changed_setting_is_named_by_its_flag():
    from simjoin.config import fingerprint_changes

    was = "threshold=0.05|metric='angular'|workers=2|max_future=3600.0|rs"
    now = "threshold=0.07|metric='angular'|workers=2|max_future=60.0|self"
    assert fingerprint_changes(was, now) == (
        "--threshold 0.05 -> 0.07, --max-future 3600.0 -> 60.0, "
        "two streams (--left and --right) -> a self-join (--left only)")
    # a value holding "|" stays one value; a field only one side has
    assert fingerprint_changes("self|tasks=('a: l.x | r.y',)", "self|tasks=('a: l.x | r.z',)") == \
        "--tasks ('a: l.x | r.y',) -> ('a: l.x | r.z',)"
    assert fingerprint_changes("a=1", "a=1|b=2") == "--b (none) -> 2"


def test_the_shipped_s2j_example_config_names_its_tasks():
    """README: ``simjoin s2j run --config conf/s2j-aqi.yaml ...`` (conf/s2j.yaml has no tasks)."""
    from jobs.s2j.config import S2JConfig

    cfg = load_config(S2JConfig, "s2j", path=Path(__file__).resolve().parents[2] / "conf" / "s2j-aqi.yaml")
    assert [t.name for t in cfg.task_list] == ["pm25", "pm10"]
    assert cfg.window == load_config(S2JConfig, "s2j").window  # the rest: the defaults
