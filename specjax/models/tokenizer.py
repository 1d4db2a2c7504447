"""A model's tokenizer and chat template with HF ``tokenizers``: read from a Hugging Face
checkpoint's ``tokenizer.json`` / ``tokenizer_config.json`` (``ChatTokenizer.from_hf_dir``), or
rebuilt from GGUF metadata, which holds no tokenizer.json (``ChatTokenizer.from_gguf``).

A GGUF file of a byte-level BPE model ("gpt2" tokenizer model) carries the vocabulary
(``tokenizer.ggml.tokens``, in byte-to-unicode form), the ranked merges, a token type per id and
the name of the pre-tokenizer (``tokenizer.ggml.pre``). The pre-tokenizer itself is not stored,
so it is rebuilt here per name, matching the original HF tokenizer.json of each family:

- ``qwen2``: NFC normalisation, the Qwen2 split regex (letters, single digits, punctuation runs,
  newlines), then byte-level mapping without the GPT-2 regex.
- ``smollm``: every digit split on its own, then byte-level with the GPT-2 regex.

Control tokens (token type 3) are registered as special tokens and user-defined ones (type 4,
e.g. ``<tool_call>``) as added tokens, so they are matched whole in the input text. The chat
template (``tokenizer.chat_template``) is rendered with jinja2 as ``transformers`` does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers as pre

from specjax.models.gguf_file import CONTROL, USER_DEFINED, GGUFFile, open_gguf
from specjax.models.gguf_weights import eos_ids as _eos_ids

#: Qwen2's pre-tokenizer split pattern (from its tokenizer.json).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SUPPORTED_PRE = ("qwen2", "smollm")


def _build_pre(pre_name: str) -> tuple[Any, Any]:
    """(normalizer, pre_tokenizer) for ``tokenizer.ggml.pre``."""
    if pre_name == "qwen2":
        split = pre.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False)
        byte_level = pre.ByteLevel(add_prefix_space=False, use_regex=False)
        return normalizers.NFC(), pre.Sequence([split, byte_level])
    if pre_name == "smollm":
        digits = pre.Digits(individual_digits=True)
        byte_level = pre.ByteLevel(add_prefix_space=False, use_regex=True)
        return None, pre.Sequence([digits, byte_level])
    raise ValueError(f"unsupported tokenizer.ggml.pre={pre_name!r}; allowed: {list(SUPPORTED_PRE)}")


@dataclass(frozen=True, kw_only=True)
class ChatTokenizer:
    """Encode/decode and chat formatting (the model agreement's interface), whatever file the
    tokenizer came from."""

    tokenizer: Tokenizer
    chat_template: str | None
    bos_id: int | None  # prepended by encode(add_special_tokens=True); None if the model has none
    eos_ids: tuple[int, ...]
    vocab_size: int
    special_ids: frozenset[int]
    special_tokens: dict[str, str] = field(default_factory=dict)  # bos_token, eos_token, ...

    @classmethod
    def from_gguf(cls, path_or_reader: str | os.PathLike | GGUFFile) -> ChatTokenizer:
        reader = open_gguf(path_or_reader)
        kind = reader.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"unsupported tokenizer.ggml.model={kind!r}; allowed: ['gpt2']")
        tokens: list[str] = reader.get("tokenizer.ggml.tokens")
        types: list[int] = reader.get("tokenizer.ggml.token_type", [1] * len(tokens))
        merges = [tuple(m.split(" ", 1)) for m in reader.get("tokenizer.ggml.merges")]
        tok = Tokenizer(
            models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False)
        )
        normalizer, pre_tokenizer = _build_pre(reader.get("tokenizer.ggml.pre"))
        if normalizer is not None:
            tok.normalizer = normalizer
        tok.pre_tokenizer = pre_tokenizer
        tok.decoder = decoders.ByteLevel()
        control = [i for i, t in enumerate(types) if t == CONTROL]
        user = [i for i, t in enumerate(types) if t == USER_DEFINED]
        tok.add_special_tokens(
            [AddedToken(tokens[i], special=True, normalized=False) for i in control]
        )
        tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user])
        bos = reader.get("tokenizer.ggml.bos_token_id")
        add_bos = bool(reader.get("tokenizer.ggml.add_bos_token", False))
        eos = _eos_ids(reader, tokens)
        named = {"bos_token": bos, "eos_token": reader.get("tokenizer.ggml.eos_token_id")}
        named |= {"pad_token": reader.get("tokenizer.ggml.padding_token_id")}
        named |= {"unk_token": reader.get("tokenizer.ggml.unknown_token_id")}
        return cls(
            tokenizer=tok,
            chat_template=reader.get("tokenizer.chat_template"),
            bos_id=int(bos) if bos is not None and add_bos else None,
            eos_ids=eos,
            vocab_size=len(tokens),
            special_ids=frozenset(control),
            special_tokens={k: tokens[int(v)] for k, v in named.items() if v is not None},
        )

    @classmethod
    def from_hf_dir(cls, path: str | os.PathLike) -> ChatTokenizer:
        """A Hugging Face checkpoint's ``tokenizer.json``, with ``tokenizer_config.json``'s chat
        template (or ``chat_template.jinja``, where newer ``transformers`` writes it) and
        special tokens, and the EOS ids of ``generation_config.json`` and ``config.json``.

        The BOS is whatever the tokenizer's own post-processor prepends to an empty text (Llama
        3 adds ``<|begin_of_text|>``, Qwen nothing), so ``encode`` adds what ``transformers``
        adds."""
        from pathlib import Path

        root = Path(path)
        if not (root / "tokenizer.json").is_file():
            raise ValueError(f"model: {root} has no tokenizer.json (the fast-tokenizer file "
                             "transformers writes with save_pretrained)")
        tok = Tokenizer.from_file(str(root / "tokenizer.json"))
        config = _read_json(root / "tokenizer_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default", next(iter(named.values()), None))
        if template is None and (root / "chat_template.jinja").is_file():
            template = (root / "chat_template.jinja").read_text(encoding="utf-8")
        prefix = tok.encode("", add_special_tokens=True).ids
        bos = prefix[0] if len(prefix) == 1 else None
        special = {}
        for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
            value = config.get(key)
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str):
                special[key] = value
        eos = []
        for source in (_read_json(root / "generation_config.json"),
                       _read_json(root / "config.json")):
            ids = source.get("eos_token_id")
            eos += [ids] if isinstance(ids, int) else list(ids or [])
        if "eos_token" in special and tok.token_to_id(special["eos_token"]) is not None:
            eos.append(tok.token_to_id(special["eos_token"]))
        special_ids = frozenset(i for i, a in tok.get_added_tokens_decoder().items() if a.special)
        return cls(tokenizer=tok, chat_template=template, bos_id=bos,
                   eos_ids=tuple(dict.fromkeys(int(i) for i in eos)),
                   vocab_size=tok.get_vocab_size(with_added_tokens=True),
                   special_ids=special_ids, special_tokens=special)

    def vocabulary(self) -> dict[str, int]:
        """Token string -> id, added tokens included: two models can share drafts only when
        these agree."""
        return self.tokenizer.get_vocab(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; special tokens written in the text map to their ids. The BOS is
        added once: not again when the text already starts with it (chat templates such as
        Llama 3's write it themselves)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.bos_id is not None and ids[:1] != [self.bos_id]:
            return [self.bos_id, *ids]
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids must lie in [0, vocab_size={self.vocab_size}); got {bad[:5]}")
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        """Render ``messages`` ([{"role", "content"}, ...]) with the model's chat template."""
        if self.chat_template is None:
            raise ValueError("this model has no chat template (tokenizer.chat_template in a "
                             "GGUF file, chat_template in tokenizer_config.json); use chat=false")
        if isinstance(messages, dict | str) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m
            for m in messages
        ):
            raise ValueError("messages must be a list of {'role': str, 'content': str} dicts")
        context = dict(self.special_tokens) | {"tools": None, "documents": None} | kwargs
        return _compile(self.chat_template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt, **context
        )


def _read_json(path) -> dict:
    import json

    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _compile(template: str) -> Any:
    """A sandboxed jinja2 template with the helpers HF chat templates call."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
