"""Catalogue.create names a misspelt option and the accepted ones (it was a TypeError traceback)."""

import pytest

from berds.errors import BerdsError
from berds.judges.catalogue import load_judge
from berds.registry import Catalogue, Spec


class Needs:
    def __init__(self, *, threshold: float = 0.5, batch_size: int = 8):
        self.threshold, self.batch_size = threshold, batch_size


class TakesAnything:
    def __init__(self, **options):
        self.options = options


def test_unknown_option_is_a_named_error_with_the_accepted_ones():
    cat = Catalogue("widget")
    cat.register(Spec("needs", f"{__name__}:Needs"))
    cat.register(Spec("any", f"{__name__}:TakesAnything"))
    assert cat.create("needs", threshold=0.2).threshold == 0.2
    with pytest.raises(BerdsError, match=r"widget 'needs' does not take option\(s\) 'bogus' \(it takes: threshold, batch_size\)"):
        cat.create("needs", bogus=1)
    assert cat.create("any", bogus=1).options == {"bogus": 1}  # **kwargs factories decide for themselves


def test_judge_and_llm_options_are_checked():
    with pytest.raises(BerdsError, match=r"judge 'demo-gold' does not take option\(s\) 'bogus'"):
        load_judge("demo-gold", bogus=1)
    # an LLM judge takes its own options and its backend's: the error lists both (it listed the backend's only)
    with pytest.raises(BerdsError, match=r"the judge openai:some-model does not take option\(s\) 'bogus' \(the judge "
                                         r"takes: max_new_tokens, .*prompt.*; its openai backend takes: .*base_url"):
        load_judge("openai:some-model", base_url="http://127.0.0.1:1/v1", bogus=1)
    from berds.llm import load_llm

    with pytest.raises(BerdsError, match=r"LLM backend 'openai' does not take option\(s\) 'bogus'"):
        load_llm("openai", "some-model", base_url="http://127.0.0.1:1/v1", bogus=1)


def test_a_list_option_with_an_empty_item_is_refused_not_shortened():
    """``--lambdas 0.5,,0.9`` used to run with two λ: the missing value went unnoticed."""
    from berds.cli.options import parse_floats, parse_ks

    with pytest.raises(BerdsError, match=r"empty item in the list '0.5,,0.9'"):
        parse_floats(["0.5,,0.9"], option="--lambdas")
    with pytest.raises(BerdsError, match="empty item"):
        parse_ks(["5,10,"])
    assert parse_ks([" 5 , 10 ", "20"]) == [5, 10, 20]
