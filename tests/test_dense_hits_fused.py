"""A dense search's hits made in the loop that reads their records (issue 36 item 2): ``PassageStore.get_hits``
checks, decodes and makes each Hit in one pass, and ``hits_from_records`` ranks them. It must give exactly what
``get_records`` + ``hits_of`` + ``rank_hits`` give, and keep every check: the CRC of each record, the ids against
the index's, the ranking of equal scores by passage id, ``Hit``'s refusal of a score that is not a number."""

from __future__ import annotations

import math
import shutil
import struct

import lmdb
import numpy as np
import pytest

import berds.corpora.docstore as docstore
from berds.corpora.docstore import PassageStore, PassageStoreWriter, StoreDamagedError
from berds.errors import BerdsError
from berds.indexes.encoders import EncoderSpec
from berds.indexes.faiss import DenseIndex, build_dense_index
from berds.retrievers.base import hits_from_records
from berds.types import InvalidScore, Passage, hits_of, rank_hits
from retrieval_fixtures import random_passages, tiny_bert

pytest.importorskip("faiss")
pytest.importorskip("transformers")

TWIN = "storm river apple bridge"  # the text of three passages with the same title: equal vectors, equal scores
DIM = 16  # tiny_bert's vector size
TWINS = ["zz-twin", "mm-twin", "aa-twin"]  # in store order: FAISS orders their tie by row, berds by id


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dense-fused")
    spec = EncoderSpec(name="tiny-bert", model=str(tiny_bert(folder / "bert")), pooling="mean", max_length=32)
    passages = random_passages(150, seed=3)
    passages[40:40] = [Passage(pid, TWIN, title="tower", source=f"https://example.org/{pid}") for pid in TWINS]
    with PassageStoreWriter(folder / "store") as w:
        w.add_many(passages)
    build_dense_index(folder / "store", folder / "idx", encoder=spec, shard_size=64, progress=False)
    index = DenseIndex(folder / "idx")
    index.open(per_group=False)
    assert index.rows_are_store_records
    return folder, spec, index


def _fields(lists):
    return [[(h.passage.id, h.passage.text, h.passage.title, h.passage.source, h.score) for h in hits]
            for hits in lists]


def _the_two_loops(store, found, rows):
    """What hits_from_records did before: passages by record, then Hits, then rank_hits order."""
    return [rank_hits(hits_of(store.get_records(rs), [x for _, x in pairs])) for pairs, rs in zip(found, rows)]


def _no_second_loop(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("get_hits took get_records + hits_of where its one loop applies")
    monkeypatch.setattr(docstore, "hits_of", refused)


def test_one_loop_gives_the_hits_of_get_records_and_hits_of(built, monkeypatch):
    folder, _, index = built
    store = PassageStore.open(folder / "store")
    vectors = np.random.default_rng(1).standard_normal((6, DIM)).astype(np.float32)
    for k in (1, 10, 60, 153):
        found, rows = index.search_rows(vectors, k)
        expected = _fields(_the_two_loops(store, found, rows))
        with monkeypatch.context() as m:
            _no_second_loop(m)  # (the fast loop runs: a format-3 store without compression, float scores)
            got = hits_from_records(store, found, rows)
            flat = [r for rs in rows for r in rs]
            hits, ids = store.get_hits(flat, [x for pairs in found for _, x in pairs])
        assert _fields(got) == expected
        assert all(type(h.score) is float for q in got for h in q)
        assert ids == [h.passage.id for h in hits] == [pid for pairs in found for pid, _ in pairs]
        assert sum(map(len, got)) == len(flat) == len(vectors) * k
    assert store.get_hits([], []) == ([], []) and hits_from_records(store, [[], []], [[], []]) == [[], []]


def test_equal_scores_come_out_by_passage_id(built, monkeypatch):
    folder, spec, index = built
    store = PassageStore.open(folder / "store")
    from berds.indexes.encoders import Encoder

    vectors = Encoder(spec).encode_queries([TWIN, "tower " + TWIN])
    found, rows = index.search_rows(vectors, 20)
    for pairs, rs in zip(found, rows):
        at = [i for i, (pid, _) in enumerate(pairs) if pid in TWINS]
        assert len(at) == 3 and len({pairs[i][1] for i in at}) == 1  # the three twins, one score
        # the engine's tie put out of id order (FAISS's own order of a tie is its heap's)
        by_row = {pid: r for (pid, _), r in zip(pairs, rs)}
        tied = [(pid, pairs[at[0]][1]) for pid in TWINS]  # zz, mm, aa
        swapped_pairs, swapped_rows = list(pairs), list(rs)
        for i, (pid, x) in zip(at, tied):
            swapped_pairs[i], swapped_rows[i] = (pid, x), by_row[pid]
        for engine in ((pairs, rs), (swapped_pairs, swapped_rows)):
            with monkeypatch.context() as m:
                _no_second_loop(m)
                hits = hits_from_records(store, [engine[0]], [engine[1]])[0]
            assert [h.passage.id for h in hits if h.passage.id in TWINS] == sorted(TWINS)  # by id
            assert _fields([hits]) == _fields([rank_hits(hits)]) == _fields(_the_two_loops(store, [engine[0]],
                                                                                           [engine[1]]))
    # an engine list that is not in score order at all is sorted, the same way as rank_hits
    order = list(range(len(found[0])))[::-1]
    backwards = [[found[0][i] for i in order]], [[rows[0][i] for i in order]]
    got = hits_from_records(store, *backwards)
    assert _fields(got) == _fields(_the_two_loops(store, *backwards)) == _fields(hits_from_records(store, found[:1],
                                                                                                   rows[:1]))


def test_a_score_that_is_not_a_plain_float_meets_hits_own_check(built):
    folder, _, index = built
    store = PassageStore.open(folder / "store")
    found, rows = index.search_rows(np.ones((2, DIM), dtype=np.float32), 5)
    nan = [found[0], [(pid, math.nan if i == 3 else x) for i, (pid, x) in enumerate(found[1])]]
    with pytest.raises(InvalidScore, match=rf"score of passage {found[1][3][0]!r} must be a number, got nan"):
        hits_from_records(store, nan, rows)
    text = [[(pid, "0.5" if i == 0 else x) for i, (pid, x) in enumerate(found[0])], found[1]]
    with pytest.raises(InvalidScore, match=r"must be a number, got '0.5'"):
        hits_from_records(store, text, rows)
    # numpy scores (a plug-in's engine) become plain floats, as Hit makes them
    as_numpy = [[(pid, np.float32(x)) for pid, x in pairs] for pairs in found]
    assert _fields(hits_from_records(store, as_numpy, rows)) == _fields(hits_from_records(store, found, rows))


def test_an_id_the_record_does_not_hold_is_an_error(built):
    folder, _, index = built
    store = PassageStore.open(folder / "store")
    found, rows = index.search_rows(np.ones((3, DIM), dtype=np.float32), 4)
    wrong = [list(pairs) for pairs in found]
    pid, x = wrong[1][2]
    wrong[1][2] = ("p0001" if pid != "p0001" else "p0002", x)
    with pytest.raises(BerdsError, match=rf"index idx-path says row {rows[1][2]} is passage '{wrong[1][2][0]}', but "
                                         rf"record {rows[1][2]} of the passage store .* holds '{pid}': its docids.txt "
                                         r"or the store was changed since it was built — rebuild the index"):
        hits_from_records(store, wrong, rows, index_path="idx-path")
    with pytest.raises(BerdsError, match=r"the index idx-path gave 11 rows for 12 hits"):
        hits_from_records(store, found, [rows[0], rows[1], rows[2][:3]], index_path="idx-path")
    with pytest.raises(ValueError, match="2 record numbers but 1 scores"):
        store.get_hits([0, 1], [0.5])


def test_a_changed_record_is_named_not_served(built, tmp_path):
    folder, spec, index = built
    shutil.copytree(folder / "store", tmp_path / "store")
    with lmdb.open(str(tmp_path / "store"), readonly=True, lock=False, max_dbs=3) as env:
        with env.begin(db=env.open_db(b"passages", create=False)) as txn:
            value = txn.get(struct.pack(">Q", 41))  # record 41: mm-twin
    damaged = bytearray(value)
    damaged[len(damaged) - 9] ^= 0x02  # one bit of its text
    data = tmp_path / "store" / "data.mdb"
    raw = data.read_bytes()
    assert value in raw
    data.write_bytes(raw.replace(value, bytes(damaged)))  # (every copy: LMDB's free pages may hold stale ones)
    store = PassageStore.open(tmp_path / "store")
    found, rows = index.search_rows(np.ones((2, DIM), dtype=np.float32), 153)
    with pytest.raises(StoreDamagedError, match=r"damaged: record 41 \(passage 'mm-twin'\) fails its checksum"):
        hits_from_records(store, found, rows)
    assert store.get_hits([40, 42], [1.0, 0.5])[1] == ["zz-twin", "aa-twin"]  # the others still read


@pytest.mark.parametrize("compression", ["zlib", "format2"])
def test_other_store_formats_give_the_same_hits(built, tmp_path, compression):
    folder, _, index = built
    store = PassageStore.open(folder / "store")
    if compression == "format2":  # (written by berds before record checksums; its own passages)
        from pathlib import Path

        other = PassageStore.open(Path(__file__).parent / "data" / "store-format2")
        assert other.format == 2
        rows = [[2, 0, 1], [1]]
        found = [[(p.id, s) for p, s in zip(other.get_records(rows[0]), [0.5, 0.25, 0.25])],
                 [(other.get_records([1])[0].id, 1.0)]]
        expected = _the_two_loops(other, found, rows)
        assert [h.passage.id for h in expected[0]][1:] == sorted(h.passage.id for h in expected[0][1:])
    else:
        with PassageStoreWriter(tmp_path / "z", compression="zlib") as w:
            w.add_many(store)
        other = PassageStore.open(tmp_path / "z")
        found, rows = index.search_rows(np.ones((3, DIM), dtype=np.float32), 30)
        expected = _the_two_loops(store, found, rows)
    assert _fields(hits_from_records(other, found, rows)) == _fields(expected)
