"""Search providers get the contract check and one-line errors the retriever and reranker seams have: a
provider returning the natural [{"title", "link"}] dicts died in a 54-line traceback."""

from __future__ import annotations

import pytest

from berds.corpora.search import build_search_corpus
from berds.errors import BerdsError
from berds.testing import check_provider
from berds.types import Question

from search_providers_for_tests import DictProvider, GoodProvider, NoCacheParams, TooMany
from cli_fixtures import cli

QUESTIONS = [Question("q1", "Should cities build more bike lanes?", ("a", "b"))]




def test_a_provider_returning_dicts_is_refused_in_one_line_saying_what_to_return(tmp_path):
    with pytest.raises(BerdsError, match=r"search provider 'dict-test' broke the provider contract on question 'q1': "
                                         r"result 0 is a dict \('title', 'link'\), not a SearchResult — return "
                                         r"berds.corpora.search.SearchResult\(url=item\['link'\]"):
        build_search_corpus(QUESTIONS, tmp_path / "c", provider=DictProvider(), top=3, cache_dir=tmp_path / "cache",
                            progress=False)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.json"))  # nothing cached


def test_a_provider_without_cache_params_is_refused_before_any_search(tmp_path):
    with pytest.raises(BerdsError, match=r"breaks the provider contract: it needs a method cache_params\(\)"):
        build_search_corpus(QUESTIONS, tmp_path / "c", provider=NoCacheParams(), top=3, cache_dir=tmp_path / "cache",
                            progress=False)


@pytest.mark.parametrize("provider, ok, words", [
    (GoodProvider, True, "3 results"), (DictProvider, False, "is a dict"),
    (NoCacheParams, False, "cache_params"), (TooMany, False, "returned 3 results (at most num)"),
])
def test_check_provider(provider, ok, words):
    report = check_provider(provider)
    assert report.ok is ok and any(words in c.detail for c in report.checks), report.summary()


def test_check_provider_command_and_build_search_through_the_cli(tmp_path, capsys, monkeypatch):
    code, out, _ = cli(capsys, monkeypatch, "check-provider", "search_providers_for_tests:GoodProvider")
    assert code == 0 and "search provider contract" in out and "fail" not in out
    code, out, _ = cli(capsys, monkeypatch, "check-provider", "search_providers_for_tests:DictProvider", "--num", "2")
    assert code == 1 and "is a dict" in out
    code, out, err = cli(capsys, monkeypatch, "corpus", "build", "search", "--questions", "demo", "--limit", "1",
                         "--provider", "search_providers_for_tests:DictProvider", "--cache", str(tmp_path / "cache"),
                         "--out", str(tmp_path / "c"), "-q")
    assert code == 2 and "is a dict" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1
    code, out, err = cli(capsys, monkeypatch, "check-provider", "serper", "-o", "gl=us", "-o", "gl=de")
    assert code == 2 and "option 'gl' is given twice" in err
