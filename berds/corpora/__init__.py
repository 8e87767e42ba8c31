"""Corpora: sources -> 100-word passages -> one passage store.

* ``split``     — DPR's splitter (disjoint 100-word windows, title on every passage, stable ids).
* ``docstore``  — the passage store every index and run reads (``PassageStore``, ``PassageStoreWriter``; LMDB).
* ``wikipedia`` — DPR's ``psgs_w100.tsv`` as is, or a MediaWiki XML dump.
* ``web``       — jsonl snapshots (CCNet, Sphere, ...) and WARC archives.
* ``search``    — one corpus per question from web search results (Serper first).
* ``html``      — the one HTML cleaner (readability-lxml + html2text).
* ``build``     — build report, progress bars, size estimate.

The names below are importable from ``berds.corpora`` directly; they load their module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PassageStore": "docstore", "PassageStoreWriter": "docstore", "write_passage_store": "docstore",
    "load_passages_jsonl": "docstore", "PassageNotFoundError": "docstore", "upgrade_passage_store": "docstore",
    "Document": "split", "split_document": "split", "split_documents": "split", "word_windows": "split",
    "DprCounterIds": "split",
    "build_wikipedia": "wikipedia", "read_dpr_tsv": "wikipedia", "iter_dump_documents": "wikipedia",
    "build_web": "web", "JsonlFields": "web", "iter_jsonl_documents": "web", "iter_warc_documents": "web",
    "build_search_corpus": "search", "SearchProvider": "search", "SerperProvider": "search", "FetchOptions": "search",
    "SEARCH_PROVIDERS": "search",
    "clean_html": "html", "BuildReport": "build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'berds.corpora' has no attribute {name!r}")
    return getattr(importlib.import_module(f"berds.corpora.{module}"), name)
