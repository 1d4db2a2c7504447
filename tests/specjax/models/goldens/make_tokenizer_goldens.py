"""Regenerate tokenizer_goldens.json, cross-checked against an independent slow BPE.

    python tests/specjax/models/goldens/make_tokenizer_goldens.py [--models NAME ...]

For each model the strings below are encoded twice: by ``ChatTokenizer`` (HF ``tokenizers``
built from GGUF metadata) and by ``reference_encode`` in this file, a from-scratch pure-Python
byte-level BPE (special-token splitting, NFC for qwen2, the family's pre-tokenizer regex via the
``regex`` module, GPT-2 byte-to-unicode table, merges applied lowest rank first). The goldens
are written only when both agree on every string; a disagreement aborts with the first diff.
"""

from __future__ import annotations

import argparse
import json
import unicodedata
from itertools import pairwise
from pathlib import Path

import regex

from specjax.models.gguf_file import GGUFFile
from specjax.models.tokenizer import ChatTokenizer
from specjax.platform.assets import fetch

STRINGS = [
    "Hello world",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "    x = {'a': [1, 2, 3]}  # it's 2026!\n\n\tprint(x)",
    "Prices: 1234567 and 3.14159, 42nd, 0x1F; year 2026-11-29",
    "naïve café — Ünïcödé 日本語 中文 한국어 🙂🚀 e\u0301",
    "<|im_start|>user\nWrite hello world in C<|im_end|>\n<|im_start|>assistant\n",
    "I'm sure they'll say we've DONE it, don't you?   trailing  ",
    "\n\n\n   \r\n  mixed\twhitespace  \u00a0 nbsp",
]
MODELS = ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"]
OUT = Path(__file__).with_name("tokenizer_goldens.json")

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (Radford et al. 2019)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def isolate(pattern: str, text: str) -> list[str]:
    """Split ``text`` into the matches of ``pattern`` and the gaps between them."""
    out, last = [], 0
    for m in regex.finditer(pattern, text):
        if m.start() > last:
            out.append(text[last : m.start()])
        out.append(m.group())
        last = m.end()
    if last < len(text):
        out.append(text[last:])
    return [p for p in out if p]


NO_MERGE = 1 << 60


def bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    parts = list(word)
    while len(parts) > 1:
        best, a, b = min((ranks.get(pair, NO_MERGE), *pair) for pair in pairwise(parts))
        if best == NO_MERGE:
            break
        merged, i = [], 0
        while i < len(parts):
            if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                merged.append(a + b)
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return parts


def reference_encoder(f: GGUFFile):
    """A slow, independent encoder built from the raw GGUF metadata."""
    tokens = f.get("tokenizer.ggml.tokens")
    types = f.get("tokenizer.ggml.token_type")
    vocab = {t: i for i, t in enumerate(tokens)}
    ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(f.get("tokenizer.ggml.merges"))}
    added = sorted((tokens[i] for i, t in enumerate(types) if t in (3, 4)), key=len, reverse=True)
    table = byte_to_unicode()
    pre_name = f.get("tokenizer.ggml.pre")
    return lambda text: _encode(text, vocab, ranks, added, table, pre_name)


def _encode(text, vocab, ranks, added, table, pre_name) -> list[int]:
    ids: list[int] = []
    for seg in isolate("|".join(regex.escape(a) for a in added), text):
        if seg in added:
            ids.append(vocab[seg])
            continue
        if pre_name == "qwen2":
            words = isolate(QWEN2_SPLIT, unicodedata.normalize("NFC", seg))
        elif pre_name == "smollm":
            words = [w for piece in isolate(r"\p{N}", seg) for w in isolate(GPT2_SPLIT, piece)]
        else:
            raise SystemExit(f"no reference pre-tokenizer for {pre_name!r}")
        for w in words:
            mapped = "".join(table[b] for b in w.encode("utf-8"))
            ids.extend(vocab[p] for p in bpe(mapped, ranks))
    return ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=MODELS)
    args = ap.parse_args()
    goldens = json.loads(OUT.read_text()) if OUT.exists() else {}
    for name in args.models:
        f = GGUFFile(fetch(name))
        tok = ChatTokenizer.from_gguf(f)
        reference = reference_encoder(f)
        rows = []
        for s in STRINGS:
            ours, ref = tok.encode(s), reference(s)
            if ours != ref:
                raise SystemExit(f"{name}: reference disagrees on {s!r}:\n{ours}\n{ref}")
            if tok.decode(ours) not in (s, unicodedata.normalize("NFC", s)):
                raise SystemExit(f"{name}: decode does not round-trip {s!r}")
            rows.append({"text": s, "ids": ours})
        goldens[name] = {"cross_checked_with": "pure-Python reference BPE", "cases": rows}
        print(f"{name}: {len(rows)} strings agree with the reference BPE")
    OUT.write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
