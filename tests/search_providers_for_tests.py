"""Search providers a plug-in author might write, for the provider contract tests (no network: their results
are made here)."""

from __future__ import annotations

from berds.corpora.search import SearchResult

PAGES = [("Bike lanes make streets safer", "http://127.0.0.1:9/a"), ("Shops and bike lanes", "http://127.0.0.1:9/b"),
         ("Cycling in cities", "http://127.0.0.1:9/c")]


class GoodProvider:
    name = "good-test"

    def search(self, query, *, num):
        return [SearchResult(url=u, title=t, rank=i + 1) for i, (t, u) in enumerate(PAGES[:num])]

    def cache_params(self):
        return {}


class DictProvider(GoodProvider):
    """Returns what most search APIs give: dicts with "title" and "link"."""

    name = "dict-test"

    def search(self, query, *, num):
        return [{"title": t, "link": u} for t, u in PAGES[:num]]


class NoCacheParams:
    name = "no-params"

    def search(self, query, *, num):
        return []


class TooMany(GoodProvider):
    name = "too-many"

    def search(self, query, *, num):
        return [SearchResult(url=u, title=t, rank=i + 1) for i, (t, u) in enumerate(PAGES)]
