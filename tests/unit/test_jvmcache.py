"""The start-up caches: remembered Delta jars and the class-data archive's key and flags."""

import pytest

from simjoin.spark import jvmcache

PKG = "io.delta:delta-spark_4.2_2.13:4.4.0"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMJOIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SIMJOIN_JVM_CACHE", raising=False)
    return tmp_path / "cache"


def test_jars_are_remembered_only_while_they_all_exist(tmp_path):
    a, b = tmp_path / "a.jar", tmp_path / "b.jar"
    a.write_bytes(b"x")
    b.write_bytes(b"y")
    assert jvmcache.cached_jars(PKG) is None
    jvmcache.remember_jars(PKG, f"file://{a},file://{b}")
    assert jvmcache.cached_jars(PKG) == [f"file://{a}", f"file://{b}"]
    assert jvmcache.cached_jars("other:pkg:1.0") is None
    b.unlink()
    assert jvmcache.cached_jars(PKG) is None  # a jar went missing: resolve with Ivy again


def test_archive_flags_only_when_the_archive_exists(monkeypatch):
    assert jvmcache.archive_flags(PKG) == ""
    flags, tmp = jvmcache.recording_flags(PKG)
    assert f"-XX:ArchiveClassesAtExit={tmp}" in flags and tmp.parent == jvmcache.archive_path(PKG).parent
    with pytest.raises(RuntimeError, match="no class-data archive"):
        jvmcache.finish_recording(tmp, PKG)
    tmp.write_bytes(b"archive")
    final = jvmcache.finish_recording(tmp, PKG)
    assert final == jvmcache.archive_path(PKG) and final.is_file() and not tmp.exists()
    assert jvmcache.archive_flags(PKG) == f"-XX:SharedArchiveFile={final} -Xlog:cds=off -Xlog:cds+dynamic=off"
    monkeypatch.setenv("SIMJOIN_JVM_CACHE", "off")
    assert jvmcache.archive_flags(PKG) == ""


def test_archive_key_depends_on_the_packages():
    assert jvmcache.archive_path(PKG) != jvmcache.archive_path("io.delta:delta-spark_4.2_2.13:4.4.1")
