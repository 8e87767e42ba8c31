"""Index folders across builds (what an interrupted build left, a damaged meta.json) and the build progress line."""

from __future__ import annotations

from berds.indexes.base import BUILDING_MARKER, prepare_index_folder, release_index_folder
from berds.io import write_json


def test_a_resumed_build_drops_the_temporary_files_of_the_killed_one(tmp_path):
    # a build killed inside an atomic write left ".docids.txt.<hex>.tmp"; the resumed build finished around it and
    # the finished index carried it for good
    settings = {"type": "dense", "corpus_fingerprint": "f" * 64}
    out = tmp_path / "idx"
    (out / "embeddings").mkdir(parents=True)
    write_json(out / BUILDING_MARKER, settings)
    stale = [out / ".docids.txt.0123456789ab.tmp", out / "embeddings" / ".shard-00001.npy.ba9876543210.tmp"]
    for path in stale:
        path.write_bytes(b"half")
    shard = out / "embeddings" / "shard-00000.npy"
    shard.write_bytes(b"a finished shard")
    try:
        assert prepare_index_folder(out, settings, overwrite="missing") is True
    finally:
        release_index_folder(out)
    assert not any(path.exists() for path in stale)
    assert shard.read_bytes() == b"a finished shard"  # what the resume is for stays


def test_a_damaged_meta_json_names_the_index_and_the_way_out(tmp_path):
    # it was the bare JSON error, with no fix, and --overwrite always could not get past it either
    import pytest

    from berds.errors import InputError
    from berds.indexes.base import read_index_meta

    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "meta.json").write_text('{"kind": "index", "ty')
    with pytest.raises(InputError, match=r"^damaged index \(.*meta.json, line 1: invalid JSON.*\) — remove .*idx and build "
                                         r"one with `berds index bm25 CORPUS"):
        read_index_meta(tmp_path / "idx", "bm25")


def test_the_progress_line_shows_a_rate_and_the_time_left_in_80_columns():
    # a build advanced in one batch showed "- passages/s" to the end; "0:00:01 left -:--:--" read as 1 s left
    import io

    from rich.console import Console

    from berds.indexes.base import progress_bar

    bar = progress_bar("passages")
    task = bar.add_task("BM25 index", total=21_015_324)
    bar.tasks[0].start_time -= 600  # ten minutes in: a realistic rate
    bar.advance(task, 10_000_000)
    console = Console(file=io.StringIO(), width=80, record=True)
    console.print(bar.make_tasks_table(bar.tasks))
    lines = [line for line in console.export_text().splitlines() if line.strip()]
    assert len(lines) == 1 and len(lines[0]) <= 80, lines
    assert "- passages/s" not in lines[0] and "passages/s" in lines[0]
    assert lines[0].rstrip().endswith("left") and lines[0].count(":") == 2  # one time shown: the time left


def test_a_passage_store_given_as_out_is_named_as_the_corpus(tmp_path):
    # `berds index bm25 corpora/wiki --out corpora/wiki` said only "holds files that are not a berds index"
    import pytest

    from berds.corpora.docstore import write_passage_store
    from berds.errors import InputError
    from berds.types import Passage

    write_passage_store([Passage("p1", "words")], tmp_path / "wiki")
    with pytest.raises(InputError, match=r"wiki: is a passage store \(a corpus\), not an index"):
        prepare_index_folder(tmp_path / "wiki", {"type": "bm25"}, overwrite="always")
    assert (tmp_path / "wiki" / "manifest.json").is_file()


def test_an_unfinished_corpus_build_given_as_corpus_is_named_as_such(tmp_path, capsys):
    # `berds index bm25 corpora/wiki.building` said "not a passage store (no manifest.json)"
    import pytest

    from berds.cli import main
    from berds.corpora.docstore import PassageStoreWriter
    from berds.types import Passage

    with pytest.raises(RuntimeError):
        with PassageStoreWriter(tmp_path / "wiki", shard_size=1) as writer:
            writer.add_many([Passage("p1", "words"), Passage("p2", "more")])
            raise RuntimeError("killed")
    with pytest.raises(SystemExit):
        main(["index", "bm25", str(tmp_path / "wiki.building"), "--out", str(tmp_path / "idx"), "-q"])
    err = " ".join(capsys.readouterr().err.split())
    assert "wiki.building: is an unfinished corpus build, not a passage store" in err and "--resume" in err
