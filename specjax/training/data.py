"""Training text from what is on the machine, tokenized with the target's tokenizer and cached.

Sources (no hub downloads):

- ``stdlib``: the ``.py`` files of the running Python's standard library (``sysconfig``'s
  ``stdlib`` path, without ``site-packages``), in sorted path order, one document each;
- ``alpaca``: the vendored Alpaca prompt suite (``specjax/data``). The suites used for
  evaluation (``humaneval``, ``gsm8k``, ``mt_bench``) are refused as training text;
- ``distill``: self-distillation, the target's own generations (``specjax.generate``) on
  training prompts disjoint from every evaluation suite: the Alpaca suite plus one request per
  documented standard-library function ("Write a Python function ``name(args)``: <first line of
  its docstring>"), chat-formatted with the target's template.

Every source is a 1-D uint32 token stream (documents separated by the first EOS id), stored as
``<cache>/train_data/<target>/<source>-<hash>.npy``; the hash covers everything that changes the
tokens. The tail ``eval_fraction`` of each stream is held out. A batch depends only on
(seed, step), so a resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specjax.platform.assets import cache_root

TEXT_SOURCES = ("stdlib", "alpaca")
SOURCES = (*TEXT_SOURCES, "distill")
EVAL_SUITES = ("humaneval", "gsm8k", "mt_bench", "humaneval_full")


class ByteTokenizer:
    """UTF-8 bytes folded into a small vocabulary: the stand-in for tiny test targets that have
    no tokenizer (their vocabulary is smaller than 256)."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [b % self.vocab_size for b in text.encode("utf-8")]


def tokenizer_of(target):
    tok = getattr(target, "tokenizer", None)
    if tok is not None and hasattr(tok, "tokenizer"):  # ChatTokenizer (HF tokenizers inside)
        return tok
    return ByteTokenizer(int(target.vocab_size))


def _encode_many(tok, texts: list[str]) -> list[list[int]]:
    if hasattr(tok, "tokenizer"):  # HF tokenizers: batched, multi-threaded
        return [e.ids for e in tok.tokenizer.encode_batch(texts, add_special_tokens=False)]
    return [tok.encode(t) for t in texts]


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def _text_docs(source: str):
    if source == "stdlib":
        for path in stdlib_files():
            text = _read(path)
            if text:
                yield text
    elif source == "alpaca":
        from specjax.prompts import load_prompts

        yield from (p.text for p in load_prompts("alpaca"))
    else:
        raise ValueError(f"data.sources: unknown source {source!r}; allowed: "
                         f"{', '.join(SOURCES)} (evaluation suites {', '.join(EVAL_SUITES)} are "
                         "never training text)")


def _eos(target) -> int:
    eos = tuple(getattr(target, "eos_ids", ()) or ())
    return int(eos[0]) if eos else 0


def _stream(docs, tok, eos: int, max_tokens: int | None, chunk: int = 64) -> np.ndarray:
    out, total, batch = [], 0, []

    def flush():
        nonlocal total
        for ids in _encode_many(tok, batch):
            out.append(np.asarray([*ids, eos], np.uint32))
            total += len(ids) + 1
        batch.clear()

    for doc in docs:
        batch.append(doc)
        if len(batch) == chunk:
            flush()
            if max_tokens is not None and total >= max_tokens:
                break
    if batch and (max_tokens is None or total < max_tokens):
        flush()
    stream = np.concatenate(out) if out else np.zeros((0,), np.uint32)
    return stream if max_tokens is None else stream[:max_tokens]


def _cached(target, source: str, key: dict, cache_dir, make) -> np.ndarray:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    path = cache_root(cache_dir) / "train_data" / target.name.replace("/", "_") / \
        f"{source}-{digest}.npy"
    if path.is_file():
        return np.load(path)
    stream = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, stream)
    tmp.replace(path)
    return stream


def text_stream(target, source: str, max_tokens: int | None, cache_dir=None) -> np.ndarray:
    tok = tokenizer_of(target)
    key = {"source": source, "max_tokens": max_tokens, "vocab": int(target.vocab_size),
           "tokenizer": type(tok).__name__, "python": sys.version.split()[0], "v": 1}
    return _cached(target, source, key, cache_dir,
                   lambda: _stream(_text_docs(source), tok, _eos(target), max_tokens))


def distill_prompts(n: int) -> list[str]:
    """Training prompts for self-distillation: Alpaca, then documented stdlib functions."""
    from specjax.prompts import load_prompts

    prompts = [p.text for p in load_prompts("alpaca")]
    for path in stdlib_files():
        if len(prompts) >= n:
            break
        if "test" in path.parts or "tests" in path.parts or "idlelib" in path.parts:
            continue
        text = _read(path)
        try:
            tree = ast.parse(text or "")
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                doc = ast.get_docstring(node)
                if doc and len(doc.split("\n")[0]) > 20:
                    args = ", ".join(a.arg for a in node.args.args)
                    prompts.append(f"Write a Python function `{node.name}({args})`: "
                                   f"{doc.splitlines()[0].strip()}")
    return prompts[:n]


def distill_stream(target, n_prompts: int, new_tokens: int, temperature: float,
                   batch_size: int, seed: int, cache_dir=None, progress: bool = True
                   ) -> np.ndarray:
    """Prompt + generation of the target on ``n_prompts`` training prompts (greedy when
    ``temperature`` is 0), one document each."""
    import specjax
    from specjax.models.sampling import Sampling

    key = {"source": "distill", "n": n_prompts, "new_tokens": new_tokens, "T": temperature,
           "seed": seed, "vocab": int(target.vocab_size), "v": 1}

    def make():
        texts = distill_prompts(n_prompts)
        chat = hasattr(target, "apply_chat_template") and getattr(target, "tokenizer", None) \
            is not None and hasattr(target.tokenizer, "chat_template")
        if chat:
            texts = [target.apply_chat_template([{"role": "user", "content": t}]) for t in texts]
            prompts = [target.encode(t) for t in texts]
        else:
            tok = tokenizer_of(target)
            prompts = [tok.encode(t) or [0] for t in texts]
        # Prompts that cannot hold their generation in the target's context are dropped.
        config = getattr(getattr(target, "model", None), "config", None)
        context = getattr(config, "context_length", None) or getattr(target, "context_length",
                                                                       None)
        if context:
            prompts = [p for p in prompts if len(p) + new_tokens <= context]
        if not prompts:
            raise ValueError(f"data.distill_new_tokens: no training prompt fits {new_tokens} new "
                             f"tokens in the target's context of {context}")
        res = specjax.generate(target, prompts, sampling=Sampling(temperature=temperature),
                               max_new_tokens=new_tokens, seed=seed, batch_size=batch_size,
                               progress=progress)
        eos = _eos(target)
        docs = [np.asarray([*p, *g, eos], np.uint32) for p, g in zip(prompts, res.tokens,
                                                                      strict=True)]
        return np.concatenate(docs) if docs else np.zeros((0,), np.uint32)

    return _cached(target, "distill", key, cache_dir, make)


@dataclass
class Corpus:
    """Train / eval streams per source and the sampling weights of their windows."""

    train: dict[str, np.ndarray]
    eval: dict[str, np.ndarray]
    weights: dict[str, float]

    def counts(self) -> dict[str, dict[str, int]]:
        return {s: {"train": int(self.train[s].size), "eval": int(self.eval[s].size)}
                for s in self.train}

    def _pick(self, rng, streams, batch: int, seq_len: int) -> np.ndarray:
        names = [s for s in streams if streams[s].size > seq_len and self.weights.get(s, 0) > 0]
        if not names:
            raise ValueError(f"data: no source has more than seq_len={seq_len} tokens with a "
                             "positive weight")
        w = np.asarray([self.weights[s] for s in names], np.float64)
        which = rng.choice(len(names), size=batch, p=w / w.sum())
        rows = []
        for i in which:
            stream = streams[names[i]]
            start = int(rng.integers(0, stream.size - seq_len))
            rows.append(stream[start:start + seq_len])
        return np.stack(rows).astype(np.int32)

    def train_batch(self, seed: int, step: int, batch: int, seq_len: int) -> np.ndarray:
        return self._pick(np.random.default_rng([seed, step]), self.train, batch, seq_len)

    def eval_batches(self, seed: int, n: int, batch: int, seq_len: int) -> list[np.ndarray]:
        rng = np.random.default_rng([seed, 2**31 - 1])
        return [self._pick(rng, self.eval, batch, seq_len) for _ in range(n)]


def build_corpus(target, data_cfg: dict, *, seq_len: int, seed: int, cache_dir=None,
                 progress: bool = True) -> Corpus:
    sources = list(data_cfg.get("sources") or [])
    for s in sources:
        if s not in TEXT_SOURCES:
            raise ValueError(f"data.sources: unknown source {s!r}; allowed: "
                             f"{', '.join(TEXT_SOURCES)} (evaluation suites "
                             f"{', '.join(EVAL_SUITES)} are never training text)")
    streams = {s: text_stream(target, s, data_cfg.get("max_tokens"), cache_dir) for s in sources}
    if data_cfg.get("distill_prompts", 0):
        streams["distill"] = distill_stream(
            target, int(data_cfg["distill_prompts"]), int(data_cfg["distill_new_tokens"]),
            float(data_cfg["distill_temperature"]), int(data_cfg["distill_batch"]), seed,
            cache_dir, progress)
    frac = float(data_cfg.get("eval_fraction", 0.01))
    train, held = {}, {}
    for s, stream in streams.items():
        n_eval = min(max(int(stream.size * frac), seq_len + 1), stream.size // 2)
        train[s], held[s] = stream[: stream.size - n_eval], stream[stream.size - n_eval:]
    weights = {s: float((data_cfg.get("weights") or {}).get(s, 1.0)) for s in streams}
    return Corpus(train=train, eval=held, weights=weights)
