"""Real weights through the Hugging Face path: the bundled Qwen2.5-Coder-0.5B GGUF converted to a
checkpoint directory by ``transformers`` itself (its GGUF loader, then ``save_pretrained``:
``goldens/gguf_to_hf.py``) loads through ``specjax.models.hf`` and gives the GGUF path's logits
and greedy tokens.

Slow (a 0.5B model twice, a 2.5 GB float32 checkpoint written), and it needs ``transformers``,
``torch``, ``accelerate`` and ``gguf``: in this interpreter (the ``peers`` extra), or in another
one named by ``SPECJAX_TRANSFORMERS_PYTHON`` that runs the conversion in a subprocess.
Measured when written: logits equal to the last bit (max |diff| 0.0 over a 41-token chat
prompt) and 48 greedy tokens identical.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import specjax
from specjax.platform.assets import fetch

NAME = "qwen2.5-coder-0.5b-instruct"
CONVERT = Path(__file__).parent / "goldens" / "gguf_to_hf.py"


def convert(gguf: Path, out: Path) -> None:
    python = os.environ.get("SPECJAX_TRANSFORMERS_PYTHON")
    if python is None:
        for module in ("transformers", "torch", "accelerate"):
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"needs {module} (pip install -e '.[peers]'), or "
                            "SPECJAX_TRANSFORMERS_PYTHON naming an interpreter that has it")
        python = sys.executable
    subprocess.run([python, str(CONVERT), str(gguf), str(out)], check=True, capture_output=True)


@pytest.mark.slow
def test_gguf_to_hf_round_trip_gives_the_same_logits_and_tokens(tmp_path):
    out = tmp_path / "hf"
    convert(fetch(NAME), out)
    hf = specjax.load_model(str(out), weights="float32")
    gguf = specjax.load_model(NAME, weights="float32")
    assert hf.vocabulary() == gguf.vocabulary()
    text = gguf.apply_chat_template([{"role": "user", "content": "Write a Python function "
                                      "that checks whether a number is prime."}])
    ids = gguf.encode(text)
    assert hf.encode(text) == ids
    np.testing.assert_allclose(hf.forward(ids), gguf.forward(ids), rtol=0, atol=1e-5)
    greedy = specjax.Sampling(temperature=0.0)
    tokens = [specjax.generate(m, [ids], sampling=greedy, max_new_tokens=48,
                               progress=False).tokens for m in (hf, gguf)]
    assert tokens[0] == tokens[1]
