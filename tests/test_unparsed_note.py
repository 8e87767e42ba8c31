"""--allow-unparsed on commands whose tables cannot flag the unparsed share says so on stderr."""

from __future__ import annotations

from berds.evaluate.compare import compare_paths
from berds.runs import save_run
from berds.types import Verdict
from conftest import make_run
from judges_for_tests import OverlapJudge


class EveryOtherMaybe(OverlapJudge):
    prompt_version = "every-other-maybe-v1"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.id = "test-every-other-maybe"

    def judge(self, pairs):
        out = super().judge(pairs)
        return [Verdict(False, None, "Maybe", {"unparsed": True}) if i % 2 else v for i, v in enumerate(out)]


def test_compare_with_allow_unparsed_notes_the_share_on_stderr(tmp_path, capsys):
    # the refusal promised the answers would be flagged, but compare/report/analyze accepted them without a word
    paths = [save_run(make_run(n_questions=3, depth=6, name=n), tmp_path / n) for n in ("a", "b")]
    compare_paths(paths, EveryOtherMaybe(), ks=(5,), cache_path=tmp_path / "j.sqlite", allow_unparsed=True,
                  n_resamples=100)
    err = capsys.readouterr().err
    assert "note: run 'a': the judge 'test-every-other-maybe' answered neither Yes nor No" in err, err
    assert "run 'b'" in err and "--allow-unparsed counts them as No" in err, err
