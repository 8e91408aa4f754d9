"""The image plan: mirror discovery from apt sources, and tags that change only with their inputs."""

from pathlib import Path

import pytest

from kafkaesque_harness.clusters import image


def test_mirror_read_from_deb822_sources(tmp_path: Path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://mirror.invalid/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n"
    )
    src = image.host_apt_source((str(d), str(tmp_path / "absent.list")))
    assert (src.uri, src.suite) == ("http://mirror.invalid/debian", "bookworm")


def test_mirror_read_from_one_line_sources(tmp_path: Path):
    f = tmp_path / "sources.list"
    f.write_text("# comment\ndeb [arch=amd64] http://mirror.invalid/debian bookworm main\n")
    src = image.host_apt_source((str(tmp_path / "none"), str(f)))
    assert (src.uri, src.suite) == ("http://mirror.invalid/debian", "bookworm")


def test_no_mirror_is_one_clear_error(tmp_path: Path):
    with pytest.raises(image.ImageError, match="No Debian mirror found"):
        image.host_apt_source((str(tmp_path),))


def test_tags_are_stable_and_follow_inputs(monkeypatch):
    src = image.AptSource("http://mirror.invalid/debian", "bookworm")
    a, b = image.plan(src), image.plan(src)
    assert (a.base_tag, a.node_tag) == (b.base_tag, b.node_tag)
    other = image.plan(image.AptSource("http://mirror.invalid/debian", "trixie"))
    assert other.base_tag != a.base_tag and other.node_tag != a.node_tag
    monkeypatch.setattr(image, "NODE_REQUIREMENTS", ("kafka-python==3.0.11",))
    assert image.plan(src).node_tag != a.node_tag and image.plan(src).base_tag == a.base_tag
