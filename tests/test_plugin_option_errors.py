"""A plug-in's constructor refusing the user's options is one line; a bug inside the plug-in keeps its traceback.

The rule (berds.registry.construct, CONTRIBUTING.md "Plug-ins"): options the call cannot bind, or a ValueError the
plug-in's own code raises while the user gave options, are option errors; anything else is the plug-in's bug.
"""

from __future__ import annotations

import json
import traceback

import pytest

from berds.errors import BerdsError
from berds.registry import Catalogue, Spec
from berds.retrievers.registry import load_retriever


class Strict:
    """Refuses a bad threshold like a plug-in would: float() of a string, or its own range check."""

    def __init__(self, *, threshold: float = 0.5, size: int = 1):
        self.threshold = float(threshold)
        if not 0 <= self.threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        self.size = size


class NeedsIndex:
    def __init__(self, index: str, *, k: int = 10):
        self.index = index


class Buggy:
    """A bug inside the constructor: an attribute that does not exist, or a TypeError from its own arithmetic."""

    def __init__(self, *, kind: str = "attribute", config: str = "{}"):
        if kind == "attribute":
            self.value = self.missing_attribute
        elif kind == "type":
            self.value = None + 1
        elif kind == "json":
            self.value = json.loads(config)  # a library's ValueError: not the plug-in refusing a value
        raise ValueError("failed while no option was given")


class BadRetriever:
    name = "bad"

    def __init__(self, *, threshold: float = 0.5):
        self.threshold = float(threshold)

    def search(self, questions, *, k):
        return []


@pytest.fixture
def catalogue():
    cat = Catalogue("judge")
    for name, cls in (("strict", Strict), ("needs-index", NeedsIndex), ("buggy", Buggy)):
        cat.register(Spec(name, f"{__name__}:{cls.__name__}"))
    return cat


def test_a_value_the_constructor_refuses_is_one_line_naming_plugin_options_and_reason(catalogue):
    with pytest.raises(BerdsError) as info:
        catalogue.create("strict", threshold="abc")
    message = str(info.value)
    assert message.startswith("judge 'strict' refused the option(s) threshold='abc': "
                              "could not convert string to float: 'abc' (ValueError at test_plugin_option_errors.py:")
    assert "\n" not in message and info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(BerdsError, match=r"refused the option\(s\) threshold=3, size=2: threshold must be in \[0, 1\], got 3.0"):
        catalogue.create("strict", threshold=3, size=2)
    assert catalogue.create("strict", threshold="0.25").threshold == 0.25


def test_a_required_option_left_out_is_named_before_the_call(catalogue):
    with pytest.raises(BerdsError, match=r"judge 'needs-index' cannot be built with k=5: missing a required argument: "
                                         r"'index' \(it takes: index, k\)"):
        catalogue.create("needs-index", k=5)
    assert catalogue.create("needs-index", index="x").index == "x"


@pytest.mark.parametrize("options, error", [({"kind": "attribute"}, AttributeError), ({"kind": "type"}, TypeError),
                                            ({"kind": "json", "config": "{not json"}, ValueError),
                                            ({}, AttributeError)])
def test_a_bug_inside_the_plugin_keeps_its_traceback(catalogue, options, error):
    with pytest.raises(error) as info:
        catalogue.create("buggy", **options)
    assert not isinstance(info.value, BerdsError)
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "__init__" in frames  # the author sees the line in the plug-in that failed


def test_a_value_error_with_no_option_given_is_a_bug():
    cat = Catalogue("judge")
    cat.register(Spec("plain", f"{__name__}:Buggy", options={"kind": "none"}))  # catalogue defaults, not the user's
    with pytest.raises(ValueError, match="failed while no option was given"):
        cat.create("plain")


def test_a_factory_function_building_a_class_elsewhere_in_its_package_counts_as_the_plugin(tmp_path, monkeypatch):
    pkg = tmp_path / "optpkg_h26"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def make(**options):\n    from optpkg_h26.judge import Judge\n"
                                     "    return Judge(**options)\n")
    (pkg / "judge.py").write_text("class Judge:\n    def __init__(self, *, size=1):\n        self.size = int(size)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cat = Catalogue("judge")
    with pytest.raises(BerdsError, match=r"judge 'optpkg_h26:make' refused the option\(s\) size='big': invalid literal "
                                         r"for int\(\) with base 10: 'big' \(ValueError at judge.py:3\)"):
        cat.create("optpkg_h26:make", size="big")


def test_retrievers_follow_the_same_rule():
    with pytest.raises(BerdsError, match=r"retriever .*:BadRetriever refused the option\(s\) threshold='high': "
                                         r"could not convert string to float"):
        load_retriever(f"{__name__}:BadRetriever", threshold="high")
    assert load_retriever(f"{__name__}:BadRetriever", threshold=0.1).threshold == 0.1


def test_the_cli_prints_one_line_for_a_refused_judge_option(tmp_path, capsys):
    from conftest import make_run

    from berds.cli import main
    from berds.runs import save_run

    save_run(make_run(), tmp_path / "run")
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", str(tmp_path / "run"), "--judge", f"{__name__}:Strict", "-o", "threshold=abc", "--k", "5",
              "--no-cache", "-q"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert f"error: judge '{__name__}:Strict' refused the option(s) threshold='abc'" in err.replace("\n", "")
