"""The embedded CPU smoke-test judge v1 (frozen features + head): text helpers, head file validation,
and the real shipped v1 judge (``embedded:v1``). The v2 stance judge is tested in test_embedded_stance.py.

The judge tests load the shipped head and all-MiniLM-L6-v2 from the PyPI package offline.
"""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest

from berds.errors import BerdsError, InputError
from berds.judges.embedded import (
    FEATURE_NAMES, PROMPT_VERSION, EmbeddedJudge, JudgeHead, content_words, default_weights_path,
    has_negation, negate_statement, split_segments,
)
from berds.judges import Judge, load_judge
from berds.types import JudgePair, Verdict

# ------------------------------------------------------------------------------------------ text helpers


def test_split_segments_sentences_merge_short_fragments_and_cut_long_runs():
    text = "Birth control saves lives every year. It works. Access matters a great deal! " + " ".join(["w"] * 70)
    segments = split_segments(text)
    # "It works." has 2 words (< 4): it joins the sentence before it.
    assert segments[0] == "Birth control saves lives every year. It works."
    # The last sentence has 5 + 70 = 75 words (> 40): cut into 30-word pieces, the 15-word tail kept.
    assert [len(s.split()) for s in segments[1:]] == [30, 30, 15]
    assert split_segments("   ") == []


def test_negate_statement_flips_polarity_both_ways():
    assert negate_statement("Free tuition is beneficial.") == "Free tuition is not beneficial."
    assert negate_statement("Scientists should not take part.") == "Scientists should take part."
    assert negate_statement("You don't feel safe.") == "You do feel safe."
    assert negate_statement("Robots replace workers.") == "It is not true that robots replace workers."


def test_content_words_drop_stopwords_and_stem():
    assert content_words("The world's emissions aren't increasing; studies show benefits") == [
        "world", "emission", "increas", "study", "show", "benefit"]
    assert has_negation("It isn't so") and has_negation("never again") and not has_negation("a better place without humans")


# ------------------------------------------------------------------------------------------ head files


def _head_json(**override):
    data = json.loads(default_weights_path().read_text())
    data.update(override)
    return data


def test_head_probability_matches_the_formula(tmp_path):
    d = len(FEATURE_NAMES)
    path = tmp_path / "head.json"
    coef = [0.0] * d
    coef[0], coef[1] = 2.0, -1.0
    path.write_text(json.dumps(_head_json(mean=[1.0] * d, scale=[2.0] * d, coef=coef, intercept=0.5, threshold=0.5)))
    head = JudgeHead.load(path)
    x = np.zeros((1, d))
    x[0, 0], x[0, 1] = 5.0, 3.0
    # z0 = (5-1)/2 = 2, z1 = (3-1)/2 = 1 -> logit = 2*2 - 1*1 + 0.5 = 3.5
    assert head.p_yes(x)[0] == pytest.approx(1 / (1 + math.exp(-3.5)))


@pytest.mark.parametrize("content, message", [
    (b"\x80\x04\x95 not json", "not UTF-8 JSON"),
    (b"{ nope", "not valid JSON"),
    (json.dumps({"format": "something-else"}).encode(), "not an embedded-judge head"),
    (json.dumps(_head_json(format_version=99)).encode(), "format_version 99"),
    (json.dumps(_head_json(feature_names=["a", "b"])).encode(), "trained on features"),
    (json.dumps(_head_json(coef=[1.0])).encode(), "field 'coef' must be a list of"),
    (json.dumps(_head_json(threshold=1.5)).encode(), "threshold must lie in (0, 1)"),
])
def test_bad_weights_file_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "head.json"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        EmbeddedJudge(version="v1", weights=path)
    assert message in str(err.value)
    assert str(path) in str(err.value)
    assert "train_embedded_judge.py" in str(err.value)


def test_pickled_or_missing_weights_are_rejected(tmp_path):
    pickled = tmp_path / "head.pkl"
    pickled.write_bytes(pickle.dumps({"coef": [1.0]}))
    with pytest.raises(InputError, match="binary or pickled"):
        JudgeHead.load(pickled)
    with pytest.raises(InputError, match="not found"):
        JudgeHead.load(tmp_path / "absent.json")


def test_bad_model_folder_and_threshold_are_clear_errors(tmp_path):
    with pytest.raises(InputError, match="not a local model folder"):
        EmbeddedJudge(version="v1", model=tmp_path)
    with pytest.raises(BerdsError, match="threshold must be a number in"):
        EmbeddedJudge(version="v1", threshold=2)


def test_the_encoder_loads_in_float32_from_a_half_precision_folder(tmp_path):
    """transformers 5 keeps a float16 copy in float16 when asked nothing; the judge's head and threshold
    were fitted on float32, so the judge asks for float32 itself."""
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModel

    from berds.judges.embedded import load_local_encoder
    from retrieval_fixtures import tiny_bert

    folder = tiny_bert(tmp_path / "bert")
    AutoModel.from_pretrained(folder).half().save_pretrained(folder)
    assert load_local_encoder(folder)[1].dtype == torch.float32


# ------------------------------------------------------------------------------------------ the real judge

BIRTH_CONTROL = "Access to birth control is beneficial for society."
SUPPORTS_BIRTH_CONTROL = (
    "Birth control use in developing countries has cut maternal deaths by 40 percent. By spacing pregnancies, "
    "access to contraception improves the health of mothers and children, and in the developing world birth "
    "control increases economic growth because families have fewer dependent children."
)
DRIVERLESS = "Driverless cars are safe to share the road with."
SUPPORTS_DRIVERLESS = (
    "Self-driving vehicles have logged millions of miles with far fewer crashes than human drivers. Studies of "
    "autonomous cars find they obey speed limits, never drive drunk and react faster, so sharing the road with "
    "driverless cars is safer than sharing it with people."
)
UNRELATED = (
    "The recipe calls for two cups of flour, a pinch of salt and three eggs. Knead the dough for ten minutes, "
    "let it rest under a damp towel, then bake it at 200 degrees until the crust turns golden brown."
)


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")
    try:
        yield EmbeddedJudge(version="v1")
    finally:
        mp.undo()


def test_judge_follows_the_protocol(judge):
    assert isinstance(judge, Judge)
    assert judge.prompt_version == PROMPT_VERSION
    head = JudgeHead.load(default_weights_path())
    assert judge.id.startswith("embedded:minilm-l6-") and judge.id.endswith(f"+head-{head.digest}")
    assert judge.threshold == head.threshold
    assert judge.judge([]) == []


def test_supporting_passage_scores_above_unrelated_one(judge):
    pairs = [
        JudgePair(BIRTH_CONTROL, SUPPORTS_BIRTH_CONTROL), JudgePair(BIRTH_CONTROL, UNRELATED),
        JudgePair(DRIVERLESS, SUPPORTS_DRIVERLESS), JudgePair(DRIVERLESS, UNRELATED),
        # A passage on the other topic is unrelated too.
        JudgePair(DRIVERLESS, SUPPORTS_BIRTH_CONTROL),
    ]
    verdicts = judge.judge(pairs)
    assert all(isinstance(v, Verdict) and 0.0 <= v.p_yes <= 1.0 for v in verdicts)
    bc_yes, bc_unrelated, dc_yes, dc_unrelated, dc_other_topic = (v.p_yes for v in verdicts)
    assert bc_yes > bc_unrelated and dc_yes > dc_unrelated and dc_yes > dc_other_topic
    assert not verdicts[1].label and not verdicts[3].label
    for v in verdicts:
        assert v.label == (v.p_yes >= judge.threshold)
        assert v.raw == ("Yes" if v.label else "No")


def test_deterministic_and_batch_equals_single(judge):
    pairs = [JudgePair(BIRTH_CONTROL, SUPPORTS_BIRTH_CONTROL), JudgePair(DRIVERLESS, UNRELATED),
             JudgePair(DRIVERLESS, SUPPORTS_DRIVERLESS), JudgePair(BIRTH_CONTROL, UNRELATED)]
    first = judge.judge(pairs)
    again = judge.judge(pairs)
    assert [v.p_yes for v in first] == [v.p_yes for v in again]
    singles = [judge.judge([p])[0] for p in pairs]
    # Padding inside a batch may move float32 sums in the last digits, never more.
    assert [v.p_yes for v in singles] == pytest.approx([v.p_yes for v in first], abs=1e-5)
    assert [v.label for v in singles] == [v.label for v in first]


def test_id_changes_with_weights_and_threshold(judge, tmp_path):
    changed = _head_json()
    changed["coef"] = [c + 0.01 for c in changed["coef"]]
    path = tmp_path / "head.json"
    path.write_text(json.dumps(changed))
    other = EmbeddedJudge(version="v1", weights=path, threshold=0.9)
    assert other.id != judge.id
    assert other.id.endswith("|threshold=0.9")
    assert other.id.split("+head-")[0] == judge.id.split("+head-")[0]  # same encoder fingerprint
    verdicts = other.judge([JudgePair(BIRTH_CONTROL, SUPPORTS_BIRTH_CONTROL)])
    assert verdicts[0].label == (verdicts[0].p_yes >= 0.9)


def test_catalogue_name_builds_the_embedded_judge(tmp_path):
    # Loading is cheap to check without the encoder: a bad weights option must surface from load_judge.
    with pytest.raises(InputError, match="not found"):
        load_judge("embedded:v1", weights=str(tmp_path / "nope.json"))


def test_shipped_model_card_reports_metrics_and_warns():
    card = json.loads((default_weights_path().parent / "model_card.json").read_text())
    assert "NOT the BERDS study's evaluator" in card["warning"]
    assert card["head_sha256_10"] == JudgeHead.load(default_weights_path()).digest
    shipped = card["head"]["variant"]
    loqo = card["evaluation"]["dev_loqo"][shipped]["loqo"]
    assert {"accuracy", "precision", "recall", "f1"} <= set(loqo)


def test_ranks_supporting_demo_passages_above_the_rest(judge):
    """A quality floor on the shipped demo benchmark (written for berds, never used to train the judge):
    over three questions' labelled pairs, a random supporting pair should outscore a random non-supporting
    one well above chance."""
    import csv

    demo = default_weights_path().parents[1] / "demo" / "labelled_pairs.tsv"
    with open(demo, encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
                if r["id"] in {"demo-01", "demo-02", "demo-03"}]
    scores = judge.scores([JudgePair(r["perspective"], r["document"]) for r in rows])
    labels = np.array([r["label"] == "1" for r in rows])
    pos, neg = scores[labels], scores[~labels]
    assert len(pos) >= 10 and len(neg) >= 10
    auc = float(np.mean(pos[:, None] > neg[None, :]))
    assert auc > 0.65


_BAR_STATES = """
import sys, warnings
warnings.simplefilter("error")  # the hub warns when an environment variable overrules a call
from huggingface_hub import utils as hub
from berds.lazy import quiet_model_loading

def states():
    hf = sys.modules.get("transformers.utils.logging")
    return [None if hf is None else hf.is_progress_bar_enabled(), not hub.are_progress_bars_disabled()]

seen = {"before": states()}
with quiet_model_loading():
    import transformers.utils.logging  # first imported inside the block, as a judge's model load does
    seen["inside"] = states()
seen["after"] = states()
from berds.judges.embedded import default_model_path, load_local_encoder
load_local_encoder(default_model_path())
seen["after a load"] = states()
with warnings.catch_warnings():  # (the caller's own call may make the hub warn; berds' calls may not)
    warnings.simplefilter("ignore")
    transformers.utils.logging.disable_progress_bar()  # a program that turned bars off keeps them off
load_local_encoder(default_model_path())
seen["caller turned off"] = states()
print(seen)
"""


@pytest.mark.parametrize("env, expected", [
    ({}, {"before": [None, True], "inside": [False, False], "after": [True, True], "after a load": [True, True],
          "caller turned off": [False, False]}),
    # the user's environment variable rules: berds neither overrides it nor makes the hub warn
    ({"HF_HUB_DISABLE_PROGRESS_BARS": "0"}, {"before": [None, True], "inside": [True, True], "after": [True, True],
                                             "after a load": [True, True], "caller turned off": [False, True]}),
])
def test_model_loading_silences_bars_only_while_it_loads(env, expected):
    import ast
    import subprocess
    import sys

    from conftest import subprocess_env

    child_env = subprocess_env()
    child_env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    done = subprocess.run([sys.executable, "-c", _BAR_STATES], capture_output=True, text=True,
                          env={**child_env, **env}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ast.literal_eval(done.stdout.strip().splitlines()[-1]) == expected


def test_a_model_folder_of_ones_own_is_fingerprinted_whole(tmp_path):
    # The shipped MiniLM keeps its sampled fingerprint (the shipped judge's id); a folder of the user's own is
    # hashed whole, so weights changed in place between the first and last MiB get a new id (they kept it).
    import shutil

    from berds.judges.embedded import _model_fingerprint, default_model_path

    shipped = default_model_path()
    assert _model_fingerprint(shipped) == "dcde3ec3c6"  # the shipped judge's cached verdicts are stored under it
    mine = tmp_path / "minilm"
    shutil.copytree(shipped, mine)
    before = _model_fingerprint(mine)
    weights = next(p for p in sorted(mine.glob("*.safetensors")))
    size = weights.stat().st_size
    assert size > 4 << 20
    with open(weights, "r+b") as f:  # one byte in the middle, the size unchanged
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    after = _model_fingerprint(mine)
    assert after != before
    judge_before = EmbeddedJudge(version="v1", model=mine)
    assert after in judge_before.id
