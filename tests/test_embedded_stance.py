"""The embedded judge v2 (MiniLM cross-encoder tuned for stance): shipped weights, stance behaviour on
hand-written pairs, ids that never reuse v1 verdicts, clear errors on bad files, and a smoke run of
scripts/train_embedded_judge.py on a tiny generated dataset. Nothing here reads /work/shared."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from berds.errors import BerdsError, InputError
from berds.judges.embedded import (
    PROMPT_VERSION, STANCE_PROMPT_VERSION, EmbeddedJudge, StanceSpec, default_stance_path,
)
from berds.judges import Judge, load_judge
from berds.types import JudgePair

ROOT = Path(__file__).resolve().parents[1]

# A claim, its negation, a paraphrase of the claim, and an off-topic sentence, for three topics.
STANCE_CASES = [
    ("Nuclear power is a safe source of energy.",
     "Nuclear power is not a safe source of energy.",
     "Nuclear plants are among the safest ways to generate electricity; accidents are very rare.",
     "The recipe calls for two cups of flour, a pinch of salt and three eggs."),
    ("Homework should be banned in primary schools.",
     "Homework should not be banned in primary schools.",
     "Primary schools ought to stop giving pupils homework altogether.",
     "The river flooded the valley after three days of heavy rain."),
    ("Social media is harmful to teenagers' mental health.",
     "Social media is not harmful to teenagers' mental health.",
     "Using social networks damages the mental well-being of adolescents.",
     "The museum opens at nine and closes at five on weekdays."),
]


@pytest.fixture(scope="module")
def judge():
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")
    try:
        yield EmbeddedJudge()
    finally:
        mp.undo()


def test_shipped_weights_load_offline_and_stay_small(judge):
    spec = StanceSpec.load(default_stance_path())
    assert spec.tensors_path.suffix == ".safetensors"
    assert spec.tensors_path.stat().st_size < 20_000_000
    assert judge.judge([]) == []
    # Loading replaced the top layers: the network's trained tensors equal the shipped ones.
    from safetensors.torch import load_file

    judge.judge([JudgePair(*STANCE_CASES[0][:2])])
    shipped = load_file(str(spec.tensors_path))
    state = judge.cross_encoder._network.state_dict()
    name = sorted(n for n in shipped if n.startswith("encoder."))[0]
    assert np.allclose(state[name].numpy(), shipped[name].float().numpy())
    assert np.allclose(state["head.weight"].numpy(), shipped["head.weight"].numpy())


def test_id_and_prompt_version_differ_from_v1(judge):
    v1 = load_judge("embedded:v1")
    assert isinstance(judge, Judge) and isinstance(v1, Judge)
    assert judge.id.startswith("embedded:v2-minilm-l6-") and f"+stance-{judge.spec.digest}" in judge.id
    assert v1.id.startswith("embedded:minilm-l6-") and v1.id != judge.id
    assert judge.prompt_version == STANCE_PROMPT_VERSION != PROMPT_VERSION == v1.prompt_version
    assert load_judge("embedded").id == judge.id
    assert EmbeddedJudge(threshold=0.9).id == judge.id + "|threshold=0.9"


@pytest.mark.parametrize("claim, negation, paraphrase, unrelated", STANCE_CASES)
def test_claim_scores_above_its_negation_both_ways(judge, claim, negation, paraphrase, unrelated):
    v = judge.judge([JudgePair(claim, claim), JudgePair(claim, negation), JudgePair(negation, negation),
                     JudgePair(negation, claim), JudgePair(claim, unrelated)])
    same, negated, neg_same, neg_negated, _off_topic = (x.p_yes for x in v)
    assert same > negated and neg_same > neg_negated  # v1 gives near-equal scores here: it is blind to "not"
    logits = judge.cross_encoder.logits([(claim, claim), (claim, negation), (negation, claim)])
    assert logits[0] > max(logits[1], logits[2])
    assert v[0].label and v[2].label and not v[4].label  # a verbatim statement supports itself; off-topic does not
    assert not v[1].label and not v[3].label  # at the shipped threshold "X" does not support "not X", either way round
    for x in v:
        assert x.label == (x.p_yes >= judge.threshold) and x.raw == ("Yes" if x.label else "No")


def test_stance_judge_beats_v1_on_negations(judge):
    """v1 scores a claim against its negation almost as high as against itself; v2 must separate them more."""
    v1 = load_judge("embedded:v1")
    pairs = [JudgePair(c, x) for c, n, _, _ in STANCE_CASES for x in (c, n)]
    gap_v2 = judge.scores(pairs).reshape(-1, 2)
    gap_v1 = v1.scores(pairs).reshape(-1, 2)
    rel_v2 = (gap_v2[:, 0] - gap_v2[:, 1]) / gap_v2[:, 0]
    rel_v1 = (gap_v1[:, 0] - gap_v1[:, 1]) / gap_v1[:, 0]
    assert np.all(rel_v2 > rel_v1)


def test_deterministic_and_batch_equals_single(judge):
    pairs = [JudgePair(c, d) for case in STANCE_CASES for c in case[:2] for d in case]
    first = judge.scores(pairs)
    assert np.array_equal(first, judge.scores(pairs))
    singles = np.array([judge.scores([p])[0] for p in pairs[:6]])
    assert singles == pytest.approx(first[:6], abs=1e-5)  # padding moves float32 sums in the last digits only


# ------------------------------------------------------------------------------------------ bad files


def _spec_json(**override):
    data = json.loads(default_stance_path().read_text())
    data.update(override)
    return data


@pytest.mark.parametrize("content, message", [
    (pickle.dumps({"scale": 1.0}), "binary or pickled"),
    (b"{ nope", "not valid JSON"),
    (json.dumps({"format": "x"}).encode(), "not an embedded-judge stance file"),
    (json.dumps(_spec_json(format_version=9)).encode(), "format_version 9"),
    (json.dumps(_spec_json(threshold=0)).encode(), "threshold must lie in (0, 1)"),
    (json.dumps(_spec_json(trained_layers="2")).encode(), "'trained_layers' must be a finite integer"),
    (json.dumps(_spec_json(tensors="weights.pkl")).encode(), "must name a .safetensors file"),
    (json.dumps(_spec_json(tensors="absent.safetensors")).encode(), "is missing"),
])
def test_bad_stance_file_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "stance.json"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        EmbeddedJudge(stance=path)
    assert message in str(err.value) and "train_embedded_judge.py" in str(err.value)


def test_tensor_file_that_does_not_fit_the_network_is_a_clear_error(tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"head.weight": torch.zeros(1, 384)}, str(tmp_path / "t.safetensors"))
    (tmp_path / "stance.json").write_text(json.dumps(_spec_json(tensors="t.safetensors")))
    bad = EmbeddedJudge(stance=tmp_path / "stance.json")  # files are checked at once, tensors on first use
    with pytest.raises(InputError, match="tensor names do not match"):
        bad.judge([JudgePair("a claim", "a passage")])


def test_options_belong_to_their_version(tmp_path):
    with pytest.raises(BerdsError, match="unknown embedded judge version"):
        EmbeddedJudge(version="v3")
    with pytest.raises(BerdsError, match="weights= belongs to the v1 judge"):
        EmbeddedJudge(weights=tmp_path / "head.json")
    with pytest.raises(BerdsError, match="stance= belongs to the v2 judge"):
        EmbeddedJudge(version="v1", stance=tmp_path / "stance.json")


# ------------------------------------------------------------------------------------------ training smoke run


def _tiny_dataset(folder: Path) -> tuple[Path, Path]:
    """Eight two-perspective yes/no questions with Yes/No expansions, and a labelled TSV of five questions."""
    topics = ["cats make good pets", "cities should ban cars", "exams measure learning",
              "remote work raises productivity", "zoos protect animals", "taxes on sugar improve health",
              "space travel is worth the cost", "uniforms improve schools"]
    qs, ex = [], []
    for i, t in enumerate(topics):
        subject, verb, *rest = t.split()
        claim = f"{subject.capitalize()} {verb} {' '.join(rest)}."
        negated = f"{subject.capitalize()} do not {verb} {' '.join(rest)}."
        qs.append({"id": f"tiny-{i}", "question": f"Do {t}?", "perspectives": [claim, negated]})
        ex.append({"id": f"tiny-{i}", "expansions": [
            {"name": "pro", "text": f"Yes, {t}. Many studies of {subject} agree on it."},
            {"name": "con", "text": f"No, it is wrong that {t}. Reports on {subject} show the opposite."}]})
    dev = folder / "dev"
    dev.mkdir()
    (dev / "tiny.dev.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    (dev / "tiny.dev.expansions.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ex))
    rows = ["question\tid\tdocument\tperspective\tlabel"]
    for i, q in enumerate(qs[:5]):
        for j, p in enumerate(q["perspectives"]):
            rows.append(f"{q['question']}\t{i}-{j}\t{ex[i]['expansions'][0]['text']}\t{p}\t{int(j == 0)}")
    labels = folder / "pairs.tsv"
    labels.write_text("\n".join(rows) + "\n")
    return dev, labels


def test_training_script_runs_end_to_end_on_a_tiny_dataset(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import train_embedded_judge as trainer
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    dev, labels = _tiny_dataset(tmp_path)
    out = tmp_path / "out"
    code = trainer.main(["--berds-dev", str(dev), "--train-sets", "tiny", "--check-sets", "tiny",
                         "--dev-pairs", str(labels), "--out", str(out), "--trained-layers", "1",
                         "--max-length", "48", "--judge-max-length", "48", "--batch-size", "8",
                         "--max-pairs", "16"])  # (a sample: the smoke run trains, it does not need to learn)
    assert code == 0
    assert {p.name for p in out.iterdir()} == {"stance.json", "stance.safetensors", "stance_card.json"}
    card = json.loads((out / "stance_card.json").read_text())
    # The split rules held: validation questions were not trained on; the labelled file's 3 test
    # questions (lowest sha256 of the text) were left out of calibration.
    assert card["training_data"]["questions"] + card["synthetic_validation"]["questions"] == 8
    assert card["dev_pairs_loqo"]["questions"] == 2 and len(card["dev_pairs_loqo"]["test_questions_left_out"]) == 3
    assert set(card["stance_check_out_of_sample"]["mrecall@5"]) >= {"first-only", "both-sides", "unrelated"}
    trained = EmbeddedJudge(stance=out / "stance.json")
    assert trained.spec.trained_layers == 1 and trained.id != EmbeddedJudge().id
    p = trained.scores([JudgePair("Cats make good pets.", "Yes, cats make good pets.")])
    assert p.shape == (1,) and 0.0 < p[0] < 1.0


def test_training_script_reports_bad_input_clearly(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import train_embedded_judge as trainer
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    deep = tmp_path / ("a-folder-name-long-enough-to-pass-eighty-columns-" * 2)  # (rich folded the path)
    deep.mkdir()
    assert trainer.main(["--berds-dev", str(deep), "--train-sets", "nope", "--out", str(tmp_path / "o")]) == 2
    assert str(deep / "nope.dev.jsonl") in capsys.readouterr().out
