"""Loading a local LLM (with a LoRA adapter) prints nothing of transformers' or peft's own: no "Loading weights"
bar inside berds' progress, no FutureWarning addressed to peft's authors."""

from __future__ import annotations

import subprocess
import sys

from conftest import subprocess_env
from llm_fixtures import tiny_lora, tiny_mistral  # noqa: F401  (session fixtures)


def test_a_local_model_and_its_adapter_load_without_library_noise(tiny_mistral, tiny_lora):
    code = ("import sys\n"
            "from berds.llm.transformers_backend import TransformersLLM\n"
            "from berds.llm import user_prompt\n"
            "llm = TransformersLLM(sys.argv[1], adapter=sys.argv[2], device='cpu')\n"
            "print(llm.generate([user_prompt('Hello there')], max_new_tokens=2)[0].text is not None)\n")
    done = subprocess.run([sys.executable, "-W", "default", "-c", code, str(tiny_mistral), str(tiny_lora)],
                          capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert "Loading weights" not in done.stderr and "FutureWarning" not in done.stderr, done.stderr
