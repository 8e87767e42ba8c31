"""Judge ids key the judgement cache: every option that changes a verdict must change the id (or the prompt
version), and options that cannot change one must not split the cache. Nothing here loads a model."""

from __future__ import annotations

from berds.judges import load_judge
from berds.judges.nli import NLIJudge
from llm_fixtures import tiny_mistral  # noqa: F401  (a pytest fixture)


def test_every_nli_option_that_changes_a_verdict_changes_the_id():
    """max_length truncates the passage, seq2seq_format is the text a T5 model reads, entail/other_token the
    words it is scored on: each changed verdicts under the default's id."""
    default = NLIJudge("org/nli-model")
    assert NLIJudge("org/nli-model", batch_size=3, device="cpu").id == default.id
    # (a max_length given by name enters the id even at 512: a T5-vocabulary model's default is then 256)
    changed = {
        "max_length": NLIJudge("org/nli-model", max_length=128).id,
        "seq2seq_format": NLIJudge("org/nli-model", seq2seq_format="{premise} => {hypothesis}").id,
        "entail_token": NLIJudge("org/nli-model", entail_token="yes", other_token="no").id,
        "threshold": NLIJudge("org/nli-model", threshold=0.7).id,
        "entail_label": NLIJudge("org/nli-model", entail_label="ENTAILS").id,
        "dtype": NLIJudge("org/nli-model", dtype="bfloat16").id,
        "revision": NLIJudge("org/nli-model", revision="abc").id,
    }
    assert default.id not in changed.values(), changed
    assert len(set(changed.values())) == len(changed), changed


def test_a_prompt_of_ones_own_keys_the_cache_by_what_it_sends():
    """A PromptTemplate edited under the same version name kept the prompt version, so the old wording's cached
    verdicts were served for the new one; the shipped prompts keep their versions."""
    from berds.judges import LLMJudge
    from berds.judges.prompts import PROMPTS, PromptTemplate

    class NoLLM:
        id = "test:no-llm"

    first = LLMJudge(NoLLM(), prompt=PromptTemplate("mine-v1", "Doc {document} / claim {perspective}? yes or no"))
    edited = LLMJudge(NoLLM(), prompt=PromptTemplate("mine-v1", "Document: {document}\nClaim: {perspective}\nYes/No?"))
    assert first.prompt_version != edited.prompt_version
    assert first.prompt_version.startswith("mine-v1#")
    assert LLMJudge(NoLLM(), prompt=PromptTemplate("mine-v1", "Doc {document} / claim {perspective}? yes or no")
                    ).prompt_version == first.prompt_version
    for version, prompt in PROMPTS.items():
        # (plain prompts add +bos-ids: their tokens changed once, so verdicts from before are not reused; the
        # study's answer rule, the default parse, adds its version: it changed once too, in issue 32)
        expected = version + "+answer-rule-2" + ("+bos-ids" if prompt.plain else "")
        assert LLMJudge(NoLLM(), prompt=prompt).prompt_version == expected
        assert LLMJudge(NoLLM(), prompt=version).prompt_version == expected


def test_a_worker_running_another_precision_is_told_which_option_to_pass(tiny_mistral):
    """Workers whose judge runs in another precision than the driver's (dtype=auto gives bf16 on a GPU worker and
    float32 on a CPU driver) are refused before their verdicts reach the cache, saying how to name one precision."""
    import pytest

    from berds.engine.local import LocalEngine
    from berds.errors import BerdsError
    from berds.evaluate.judging import judge_on_engine
    from berds.judges.recipe import JudgeRecipe
    from berds.types import JudgePair

    name = f"transformers:{tiny_mistral}"
    driver = load_judge(name, device="cpu", dtype="float32", max_new_tokens=2)
    worker = JudgeRecipe(name, {"device": "cpu", "dtype": "bfloat16", "max_new_tokens": 2})
    with pytest.raises(BerdsError, match=r"same precision .*-o dtype=bfloat16"):
        judge_on_engine(LocalEngine(), driver, [JudgePair("taxes should be raised", "the school uniforms")], None,
                        recipe=worker, progress=False)


def test_the_studys_evaluator_names_its_precision_so_every_machine_computes_one_id():
    """mistral-berds ran dtype=auto: float32 on a CPU driver, bfloat16 on GPU workers, so a CPU head node got
    another id than its workers (and was refused) and the validated judge was flagged as changed on a CPU."""
    from berds.judges.catalogue import JUDGES, load_judge
    from berds.judges.validation import judge_warning

    assert JUDGES.spec("mistral-berds-vllm").options["dtype"] == "bfloat16"
    for weights in ("merged", "adapter", "full"):
        judge = load_judge("mistral-berds", weights=weights)
        assert judge.llm.requested_dtype == "bfloat16"
        assert "dtype" not in judge.id and judge_warning(judge.id) is None


def test_thresholds_that_agree_to_six_digits_do_not_share_an_id(tmp_path):
    """Ids wrote thresholds to 6 significant digits: 0.41234561 and 0.41234564 shared one id, so a pair scored
    between them was served the other threshold's cached label. Ids of thresholds 6 digits give exactly keep
    their old text."""
    from berds.evaluate.cache import JudgementCache
    from berds.judges import LLMJudge
    from berds.judges.embedded import EmbeddedJudge
    from berds.judges.threshold import ThresholdJudge
    from berds.types import JudgePair, Verdict

    class Fixed:
        id, prompt_version, batch_size = "test:fixed-p", "fixed-v1", 8

        def judge(self, pairs):
            return [Verdict(label=True, p_yes=0.412345625) for _ in pairs]

    class NoLLM:
        id = "test:no-llm"

    low, high = 0.41234561, 0.41234564
    for make in (lambda t: ThresholdJudge(Fixed(), t), lambda t: NLIJudge("org/nli-model", threshold=t),
                 lambda t: LLMJudge(NoLLM(), threshold=t), lambda t: EmbeddedJudge(version="v1", threshold=t)):
        assert make(low).id != make(high).id
        assert make(0.189).id.endswith("=0.189") and make(0.5).id.endswith("=0.5")
    pair = [JudgePair("p", "d")]
    with JudgementCache(tmp_path / "c.sqlite") as cache:
        for t in (low, high):
            judge = ThresholdJudge(Fixed(), t)
            if cache.get_many(judge.id, judge.prompt_version, pair) == [None]:
                cache.put_many(judge.id, judge.prompt_version, pair, judge.judge(pair))
        labels = [cache.get_many(ThresholdJudge(Fixed(), t).id, "fixed-v1", pair)[0].label for t in (low, high)]
    assert labels == [True, False]
