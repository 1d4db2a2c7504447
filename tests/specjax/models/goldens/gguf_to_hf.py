"""Convert a GGUF file into a Hugging Face checkpoint directory with ``transformers`` itself
(its GGUF loader, then ``save_pretrained``), for the round-trip test of ``test_hf_roundtrip.py``.

    python tests/specjax/models/goldens/gguf_to_hf.py FILE.gguf OUT_DIR

Needs ``transformers``, ``torch``, ``accelerate`` and ``gguf`` (the ``peers`` extra). transformers
dequantizes the GGUF to float32, as specjax's GGUF reader does, so both paths hold the same weights.
"""

from __future__ import annotations

import sys
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 torch_dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))


if __name__ == "__main__":
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
