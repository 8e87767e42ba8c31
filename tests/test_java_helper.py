"""berds' Java class for Lucene batch search: built from the shipped source, same hits as Anserini's objects."""

from __future__ import annotations

import glob
import hashlib
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from berds.corpora.docstore import write_passage_store
from berds.indexes import bm25 as bm25_index
from berds.types import Passage
from conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[1]
JAVA_DIR = ROOT / "berds" / "data" / "java"
BUILD = json.loads((JAVA_DIR / "build.json").read_text(encoding="utf-8"))


def test_shipped_class_matches_the_recorded_source():
    # Editing the .java without running scripts/build_java_helper.py would ship a class built from other code.
    assert hashlib.sha256((JAVA_DIR / BUILD["source"]).read_bytes()).hexdigest() == BUILD["source_sha256"]
    shipped = sorted(str(p.relative_to(JAVA_DIR / "classes")) for p in (JAVA_DIR / "classes").rglob("*.class"))
    assert shipped == BUILD["classes"] == ["berds/LuceneBridge$Hits.class", "berds/LuceneBridge.class"]


def _same_javac() -> str | None:
    """A javac of the version that built the shipped class (javac output is deterministic per version)."""
    for javac in filter(None, [shutil.which("javac"), *sorted(glob.glob("/usr/lib/jvm/*/bin/javac"))]):
        out = subprocess.run([javac, "-version"], capture_output=True, text=True)
        if (out.stdout + out.stderr).strip() == BUILD["javac"]:
            return javac
    return None


@pytest.mark.java
def test_shipped_class_is_what_the_source_compiles_to(tmp_path):
    javac = _same_javac()
    if javac is None:
        pytest.skip(f"no {BUILD['javac']} here to rebuild the class with")
    sys.path.insert(0, str(ROOT / "scripts"))
    import build_java_helper

    build_java_helper.build(javac, tmp_path)
    for name in BUILD["classes"]:
        assert (tmp_path / name).read_bytes() == (JAVA_DIR / "classes" / name).read_bytes()


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    rng = random.Random(4)
    # non-ASCII ids and words (accents, CJK, an emoji outside the BMP) cross the bridge as UTF-8
    words = [f"w{i}" for i in range(300)] + ["café", "naïve", "東京", "größe", "🙂ok"]
    passages = [Passage(f"p{i}" + ("-é" if i % 7 == 0 else ""), " ".join(rng.choices(words, k=30)),
                        title=("" if i % 3 else f"Title {i}" + (" größe" if i % 2 else ""))) for i in range(400)]
    root = tmp_path_factory.mktemp("helper")
    write_passage_store(passages, root / "store")
    bm25_index.build_bm25_index(root / "store", root / "index", progress=False)
    queries = [" ".join(rng.choices(words, k=rng.randint(1, 5))) for _ in range(60)] + ["café 東京", "", "nothing matches this"]
    return root / "index" / "lucene", queries


@pytest.mark.java
def test_batch_class_gives_anserinis_hits_scores_and_order(index):
    from berds.java import lucene_bridge

    lucene, queries = index
    assert lucene_bridge() is not None  # berds' JVM has it on the classpath
    searcher = bm25_index.LuceneSearcher(lucene)
    for k in (1, 10, 100):
        flat = searcher.search(queries, k, threads=2)
        one_by_one = searcher.search_hit_by_hit(queries, k, threads=2)
        assert flat == one_by_one and len(flat) == len(queries)
        assert flat[-1] == [] and flat[-2] == [] and max(map(len, flat)) == k
        assert k == 1 or any(docid.endswith("-é") for docid, _ in flat[-3])  # non-ASCII ids come back intact
    searcher.close()


FALLBACK = """
import json, sys, jnius_config
from berds.java import anserini_jar, lucene_bridge, find_java
import os
os.environ["JAVA_HOME"] = str(find_java().home)
jnius_config.set_classpath(str(anserini_jar()))  # other code started Java first, without berds' class
import jnius  # noqa: F401  (starts the JVM)
from berds.indexes.bm25 import LuceneSearcher
s = LuceneSearcher(sys.argv[1])
print(json.dumps({"helper": lucene_bridge() is not None, "hits": s.search(json.loads(sys.argv[2]), 10)}))
"""


@pytest.mark.java
def test_without_the_class_the_searcher_reads_hits_one_by_one(index):
    lucene, queries = index
    out = subprocess.run([sys.executable, "-c", FALLBACK, str(lucene), json.dumps(queries[:20])],
                         capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["helper"] is False
    assert "berds' Java class" in out.stderr and "same results, slower" in " ".join(out.stderr.split())
    searcher = bm25_index.LuceneSearcher(lucene)
    assert [[tuple(h) for h in q] for q in result["hits"]] == searcher.search(queries[:20], 10)
    searcher.close()


@pytest.mark.java
def test_index_built_through_the_bridge_equals_the_json_one(index, tmp_path, monkeypatch):
    import berds.java

    lucene, queries = index
    store = lucene.parent.parent / "store"
    monkeypatch.setattr(berds.java, "lucene_bridge", lambda: None)  # the JSON path (addRawDocuments)
    meta = bm25_index.build_bm25_index(store, tmp_path / "json-index", progress=False)
    monkeypatch.undo()
    bridged, by_json = bm25_index.LuceneSearcher(lucene), bm25_index.LuceneSearcher(tmp_path / "json-index" / "lucene")
    assert bridged.num_docs == by_json.num_docs == meta["documents"] == 400
    # the bridge path sends the store's bytes without building Passages: same row ids, same indexed contents
    assert (lucene.parent / "docids.txt").read_bytes() == (tmp_path / "json-index" / "docids.txt").read_bytes()
    assert bridged.search(queries, 50, threads=2) == by_json.search(queries, 50, threads=2)
    assert bridged.search(["東京 café"], 400)[0] and bridged.search(["größe"], 5) == by_json.search(["größe"], 5)
    bridged.close()
    by_json.close()


@pytest.mark.java
def test_what_the_class_calls_outside_the_jdk_is_read_from_it_and_checked_by_exact_signature():
    """The compiled classes' constant pool says what they call in Anserini (methods and fields, with their JVM
    descriptors); each must exist with exactly that signature, reachable (public or protected), declared or
    inherited — a same-name method with other parameters would end in NoSuchMethodError at the first call."""
    from berds.errors import BerdsError
    from berds.java import bridge_references, class_file_references, missing_java_members

    refs = bridge_references()
    names = {(cls.rsplit("/", 1)[-1], name) for _, cls, name, _ in refs}
    assert {("SimpleSearcher", "batch_search"), ("SimpleIndexer", "addJsonDocument"),
            ("JsonCollection$Document", "fromFields"), ("ScoredDoc", "docid"), ("ScoredDoc", "score")} <= names
    source = (JAVA_DIR / BUILD["source"]).read_text(encoding="utf-8")
    assert all(name in source for _, name in names)  # (what the parser found is what the source calls)
    assert missing_java_members(refs) == []  # the installed Anserini has them all
    probes = [
        ("method", "java/lang/String", "length", "()I"),                 # present
        ("method", "java/util/ArrayList", "hashCode", "()I"),            # inherited (AbstractList)
        ("method", "java/util/ArrayList", "<init>", "(I)V"),             # a constructor
        ("method", "java/lang/String", "length", "()J"),                 # same name, other return type
        ("method", "java/lang/String", "indexOf", "(Ljava/lang/Object;)I"),  # same name, other parameters
        ("field", "java/lang/String", "value", "[B"),                    # private
        ("method", "no/such/Class", "x", "()V"),                         # absent class
    ]
    assert missing_java_members(probes) == ["String.length()J", "String.indexOf(Ljava/lang/Object;)I",
                                            "String.value[B", "Class.x()V"]
    with pytest.raises(BerdsError, match="not a Java class file"):
        class_file_references(b"PK\x03\x04 a zip")


