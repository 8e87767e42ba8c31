"""The BERDS question sets as ir_datasets datasets (``pip install 'berds[irds]'``).

``import berds.ir_datasets`` (or ``berds.ir_datasets.register()``) adds to ir_datasets' registry, with no entry
point and nothing downloaded at registration:

* ``berds/arguana/dev``, ``berds/arguana/test``, ``berds/kialo/dev|test``, ``berds/opinionqa/dev|test`` and
  ``berds/demo``: queries only (``BerdsQuery``: ``query_id``, ``text``, ``perspectives``, ``dataset``). They are
  read when iterated, by ``berds.questions.load_questions`` -- the same files and hub names ``--questions``
  uses: ``$BERDS_DATA_DIR/{name}.{split}.jsonl``, else berds' cached copy, else the study's Hugging Face dataset
  (``timchen0618/Kialo`` ..., ``BERDS_HF_REPO_<NAME>`` for a mirror).
* ``register_evaluation(dataset_id, evaluation, name)`` adds ``{dataset_id}/judged/{name}``: the same queries and
  the evaluation's judgements as subtopic qrels (``TrecQrel``: ``iteration`` = the 1-based perspective, where
  ir_measures and PyTerrier read subtopics; ``relevance`` = the judge's label) -- the qrels ``MRecall@k`` and
  ``BERDS_P@k`` (``berds/evaluate/measures.py``) and ndeval's measures take.

There are no docs: a BERDS corpus is whatever one retrieves from (a berds passage store). With PyTerrier,
``pt.get_dataset("irds:berds/demo").get_topics()`` gives the topics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, NamedTuple, Tuple

from berds.errors import BerdsError, InputError
from berds.lazy import require

ir_datasets = require("ir_datasets", extra="irds", purpose="the BERDS question sets as ir_datasets datasets")
from ir_datasets.datasets.base import Dataset  # noqa: E402
from ir_datasets.formats import BaseQrels, BaseQueries, TrecQrel  # noqa: E402

from berds.questions import BERDS_SETS, SPLITS, hub_repo  # noqa: E402

PREFIX = "berds"
QREL_DEFS = {0: "the judge said the passage does not support this perspective (subtopic)",
             1: "the judge said the passage supports this perspective (subtopic)"}


class BerdsQuery(NamedTuple):
    """A BERDS question: its id, text, gold perspectives (subtopic i = perspectives[i - 1]) and set name."""
    query_id: str
    text: str
    perspectives: Tuple[str, ...]
    dataset: str

    def default_text(self) -> str:
        """ir_datasets' convention: the text a retriever should search with."""
        return self.text


class BerdsQueries(BaseQueries):
    """Questions read by ``berds.questions.load_questions(source, split)`` when first iterated."""

    def __init__(self, source: str, split: str):
        self._source, self._split = source, split

    def queries_iter(self) -> Iterator[BerdsQuery]:
        from berds.questions import load_questions

        for q in load_questions(self._source, self._split):
            yield BerdsQuery(q.id, q.text, tuple(q.perspectives), q.dataset or self._source)

    def queries_cls(self) -> type:
        return BerdsQuery

    def queries_namespace(self) -> str:
        return f"{PREFIX}/{self._source}"

    def queries_lang(self) -> str:
        return "en"


class JudgedQrels(BaseQrels):
    """An evaluation's judgements (``berds eval``'s judgements.jsonl) as subtopic qrels, read when iterated."""

    def __init__(self, evaluation: Path):
        self._evaluation = evaluation

    def qrels_iter(self) -> Iterator[TrecQrel]:
        from berds.evaluate.qrels import read_judgements

        rows, _ = read_judgements(self._evaluation, unjudged=True)
        for qid, subtopic, docid, rel in rows:
            yield TrecQrel(qid, docid, rel, subtopic)

    def qrels_path(self) -> str:
        return str(self._evaluation)

    def qrels_cls(self) -> type:
        return TrecQrel

    def qrels_defs(self) -> dict[int, str]:
        return QREL_DEFS


class _Documentation:
    """What ``dataset.documentation()`` returns in ir_datasets (its YamlDocumentation's keys)."""

    def __init__(self, pretty_name: str, desc: str):
        self._doc = {"pretty_name": pretty_name, "desc": desc}

    def documentation(self) -> dict[str, str]:
        return dict(self._doc)


def dataset_ids() -> list[str]:
    """The ids ``register()`` adds: ``berds/demo`` and ``berds/{set}/{split}``."""
    return [f"{PREFIX}/demo"] + [f"{PREFIX}/{name}/{split}" for name in BERDS_SETS for split in SPLITS]


def _queries_of(dataset_id: str) -> BerdsQueries:
    parts = dataset_id.split("/")
    if parts == [PREFIX, "demo"]:
        return BerdsQueries("demo", "test")
    if len(parts) == 3 and parts[0] == PREFIX and parts[1] in BERDS_SETS and parts[2] in SPLITS:
        return BerdsQueries(parts[1], parts[2])
    raise BerdsError(f"unknown BERDS dataset {dataset_id!r}; use one of {', '.join(dataset_ids())}")


def _add(dataset_id: str, dataset: Any) -> None:
    if dataset_id in ir_datasets.registry:  # (its register refuses a name twice; ours is idempotent)
        return
    ir_datasets.registry.register(dataset_id, dataset)


def register() -> list[str]:
    """Register the BERDS question sets with ir_datasets (idempotent); returns their ids."""
    for dataset_id in dataset_ids():
        queries = _queries_of(dataset_id)
        name = queries._source
        desc = ("berds' demo questions (berds/data/demo)" if name == "demo" else
                f"{BERDS_SETS[name].description}; from $BERDS_DATA_DIR/{name}.{queries._split}.jsonl or the "
                f"Hugging Face dataset {hub_repo(BERDS_SETS[name])}")
        _add(dataset_id, Dataset(queries, _Documentation(f"BERDS {name} ({queries._split})", desc)))
    return dataset_ids()


def register_evaluation(dataset_id: str, evaluation: str | Path, name: str) -> str:
    """Register ``{dataset_id}/judged/{name}``: ``dataset_id``'s questions with the judgements of ``evaluation``
    (an evaluation folder or run folder ``berds eval`` wrote into, or its judgements.jsonl) as subtopic qrels."""
    register()
    queries = _queries_of(dataset_id)
    if not name or any(c.isspace() or c == "/" for c in name):
        raise BerdsError(f"evaluation name {name!r} must be non-empty, without spaces or '/'")
    evaluation = Path(evaluation)
    if not evaluation.exists():
        raise InputError("no such evaluation folder or judgements.jsonl", path=evaluation,
                         fix="pass the folder `berds eval` wrote (a run folder, or its --out)")
    judged_id = f"{dataset_id}/judged/{name}"
    if judged_id in ir_datasets.registry:
        known = ir_datasets.registry[judged_id].qrels_handler().qrels_path()
        if Path(known) != evaluation:
            raise BerdsError(f"{judged_id} is already registered for {known}; give this evaluation another name")
        return judged_id
    _add(judged_id, Dataset(queries, JudgedQrels(evaluation), _Documentation(
        f"{dataset_id}, judged by the evaluation {name}", f"queries of {dataset_id}; qrels from {evaluation} "
        "(iteration = perspective from 1, relevance = the judge's label)")))
    return judged_id


register()
