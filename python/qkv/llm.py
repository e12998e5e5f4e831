"""Text generation and chat with a causal language model: :class:`LLM`."""

from __future__ import annotations

import json
import math
import os
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union, overload

from . import _qkv
from ._qkv import set_num_threads

Prompt = Union[str, Sequence[int]]


def supported_models() -> list[dict[str, Any]]:
    """The model families qkv reads, from its architecture registry, sorted by name.

    Each is a dict: ``name`` (as :attr:`LLM.architecture` gives it), ``display`` (how it is
    written), ``role`` (``"causal-lm"``: :class:`LLM`; ``"encoder"``: :class:`Embedder`),
    ``model_types`` (the ``config.json`` ``model_type`` values of its Hugging Face folders) and
    ``gguf_architectures`` (the ``general.architecture`` values of its GGUF files).

        >>> [f["name"] for f in qkv.supported_models() if f["role"] == "causal-lm"]
        ['gemma2', 'gemma3', 'gpt2', 'llama', ...]
    """
    return [{"name": n, "display": d, "role": r, "model_types": list(t), "gguf_architectures": list(g)}
            for n, d, r, t, g in _qkv._model_families()]


@dataclass
class Generation:
    """One prompt's continuation (``LLM.generate(..., details=True)``)."""

    text: str
    ids: list[int]
    finish_reason: str  # "length" | "eos" | "stop"
    tokens_per_s: float
    #: per new token, with ``logprobs=N``: (token id, log-probability, [(id, logprob) of the N most likely])
    logprobs: list[tuple[int, float, list[tuple[int, float]]]] = field(default_factory=list)
    #: a chat reply's reasoning (a reasoning model's <think> block or gpt-oss's analysis channel; ``text`` is the
    #: answer alone), "" otherwise
    reasoning: str = ""
    #: with a draft (``qkv.LLM(draft=...)``), the call's counts over all its prompts: ``drafted``,
    #: ``accepted``, ``acceptance``, ``target_passes``, ``tokens_per_pass``; empty without one
    speculative: dict[str, float] = field(default_factory=dict)


@dataclass
class Score:
    """A text scored by :meth:`LLM.score`: each token's log-probability given the tokens before it, in
    sliding windows (``qkv perplexity``'s rule)."""

    perplexity: float  # exp(nll)
    nll: float  # mean negative log-likelihood per scored token (natural log)
    tokens: int  # scored tokens (every one but the first when stride < context)
    ids: list[int]  # the text's token ids (BOS first when the model adds one)
    positions: list[int]  # the scored positions of ``ids``, ascending
    token_logprobs: list[float]  # per scored position: log p(ids[p] | the window's tokens before it)
    #: per scored position, with ``logprobs=N``: [(id, logprob) of the N most likely tokens], best first
    top_logprobs: list[list[tuple[int, float]]]
    context: int  # tokens per window
    stride: int  # tokens between window starts
    windows: int
    seconds: float


class _Stops:
    """Per-sequence text with stop strings: qkv's ReplyStream (the CLI's rule: a stop string ends the
    text where it ends; the end-of-sequence tokens show no text unless ignore_eos; a chat reply of a
    reasoning model is its answer, the reasoning apart)."""

    def __init__(self, impl: Any, prompts: list[list[int]], stop: Sequence[str], text: bool, ignore_eos: bool,
                 chat: bool) -> None:
        self.streams = [_qkv._ReplyStream(impl, list(stop), ignore_eos, p, chat) for p in prompts] if text else []

    def stopped(self, seq: int) -> bool:
        return bool(self.streams) and bool(self.streams[seq].stopped)

    def push(self, seq: int, token: int) -> str:
        """The text token adds to sequence seq."""
        return str(self.streams[seq].push(token)) if self.streams else ""

    def finish(self, seq: int) -> str:
        return str(self.streams[seq].finish()) if self.streams else ""

    def text(self, seq: int) -> str:
        return str(self.streams[seq].text) if self.streams else ""

    def reasoning(self, seq: int) -> str:
        return str(self.streams[seq].reasoning) if self.streams else ""


@dataclass(frozen=True)
class _Penalties:
    """The sampler's logit adjustments and min_p (qkv's infer::SamplingOptions; see LLM.generate)."""
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()

    @staticmethod
    def of(min_p: float, repeat_penalty: float, repeat_last_n: int, frequency_penalty: float,
           presence_penalty: float, logit_bias: Mapping[int, float] | None) -> "_Penalties":
        bias = tuple((int(k), float(v)) for k, v in (logit_bias or {}).items())
        return _Penalties(float(min_p), float(repeat_penalty), int(repeat_last_n), float(frequency_penalty),
                          float(presence_penalty), bias)


class LLM:
    """A causal language model, loaded once from a local path (nothing is downloaded).

    Every causal LM qkv loads, by the loader of ``qkv generate``: a GGUF file (quantized weights
    used in place) or a Hugging Face folder of an architecture :func:`supported_models` lists,
    with its tokenizer, chat template and end-of-sequence tokens. One LLM may serve calls
    from several Python threads at once (each call has its own KV cache; the GIL is released
    while it computes). Ctrl-C interrupts a generation with KeyboardInterrupt.

        llm = qkv.LLM("models/SmolLM2-135M-Instruct.Q4_1.gguf")
        print(llm.chat([{"role": "user", "content": "What is the capital of France?"}]))
        print(llm.generate("In the beginning", max_new_tokens=20))

    Args:
        path: the model: a ``.gguf`` file or a folder.
        threads: qkv's kernel threads (process-wide, as :func:`qkv.set_num_threads`); None keeps them.
        chat_template: a Jinja chat template (transformers' ``apply_chat_template`` subset) for
            :meth:`chat`, instead of the model's own (or for models whose files carry none).
        activations: ``"f32"`` (exact, the default) or ``"q8"``: products with quantized weights
            take activations quantized to 8 bits per 32 values (faster prefill, and on AVX-512
            VNNI faster decoding of Q4_0 / Q4_1 / Q8_0 weights; as ``qkv generate --activations q8``).
        kv_cache: ``"f32"`` (the default) or ``"f16"``: the KV cache in half precision (half its
            memory and of what each step reads at long contexts; as ``qkv generate --kv-cache f16``).
        draft: speculative decoding for every generation (as ``qkv generate --draft``): ``"ngram"``
            (prompt lookup: the tokens that followed the latest earlier match of the last
            ``draft_ngram`` tokens, default 3, or fewer), or a draft model: a path (loaded with
            ``activations="q8"``: its guesses need not be exact) or an :class:`LLM` of the same
            vocabulary. Greedy output stays the same token for token, sampled output keeps its
            distribution; :class:`Generation` ``speculative`` holds the counts.
        draft_max: the most tokens per draft (1-32, default 3).
        draft_ngram: with ``draft="ngram"``, the longest n-gram matched (1-16, default 3).

    Raises OSError when ``path`` does not exist, ValueError (qkv's message) for a file or folder
    that is not a causal LM qkv reads, or a chat template it cannot parse.
    """

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None,
                 chat_template: str | None = None, activations: str = "f32", kv_cache: str = "f32",
                 draft: str | os.PathLike[str] | LLM | None = None, draft_max: int | None = None,
                 draft_ngram: int | None = None) -> None:
        if threads is not None:
            set_num_threads(threads)
        if draft is None and (draft_max is not None or draft_ngram is not None):
            raise ValueError("qkv.LLM: draft_max and draft_ngram set how speculative decoding drafts; they need "
                             "draft='ngram' or a draft model")
        if draft_ngram is not None and draft != "ngram":
            raise ValueError("qkv.LLM: draft_ngram sets prompt lookup's n-gram length; it goes with draft='ngram'")
        self.path = os.fspath(path)
        self._impl = _qkv._LanguageModel(self.path, chat_template, activations, kv_cache)
        #: the draft model (an LLM) when ``draft`` names one
        self.draft: LLM | None = None
        if draft == "ngram":
            self._impl.set_draft(None, 3 if draft_ngram is None else draft_ngram, 3 if draft_max is None else draft_max)
        elif draft is not None:
            self.draft = draft if isinstance(draft, LLM) else LLM(draft, activations="q8", kv_cache=kv_cache)
            self._impl.set_draft(self.draft._impl, 0, 3 if draft_max is None else draft_max)

    @property
    def vocab_size(self) -> int:
        return int(self._impl.vocab_size)

    @property
    def architecture(self) -> str:
        """The family qkv reads the model as (``"llama"``, ``"qwen3"``, ``"gpt2"``, ...: a ``name`` of
        :func:`supported_models`)."""
        return str(self._impl.architecture)

    @property
    def eos_token_ids(self) -> list[int]:
        """The tokens that end a reply (the model's and its tokenizer's); generation stops at any of them."""
        return list(self._impl.eos_ids)

    @property
    def eos_token_id(self) -> int | None:
        """The first of :attr:`eos_token_ids`, or None."""
        ids = self.eos_token_ids
        return ids[0] if ids else None

    @property
    def bos_token_id(self) -> int | None:
        return self._impl.bos_id

    def tokenize(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of ``text`` as :meth:`generate` reads a text prompt: the BOS token first when the
        model wants one (``add_bos=False`` leaves it out), special tokens written in the text matched
        as tokens. ValueError when the model has no tokenizer."""
        return list(self._impl.tokenize(text, add_bos))

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (invalid UTF-8 byte runs become U+FFFD)."""
        return str(self._impl.detokenize(list(ids)))

    # ---- scoring ------------------------------------------------------------------------

    def score(self, text: Prompt, context: int | None = None, stride: int | None = None,
              logprobs: int | None = None) -> Score:
        """Scores ``text`` (a string, read as :meth:`tokenize` reads it, or token ids): each token's
        log-probability given the ones before it, as ``qkv perplexity`` computes it.

        The model sees at most ``context`` tokens at once (default: its positions, at most 2048):
        windows of ``context`` tokens start every ``stride`` tokens (default: half the context), and
        each scores only the tokens the previous one did not, with the window's earlier tokens as
        their context (transformers' "Perplexity of fixed-length models"); the first token is never
        scored. Log-probabilities are natural logs, computed in float64 from the model's float32
        logits; ``logprobs=N`` also records the N most likely tokens at each position (N <= 20).

        Raises ValueError (qkv's message) for a text of fewer than 2 tokens, a context outside
        [2, the model's positions], a stride outside [1, context], before any work.
        """
        if isinstance(text, str):
            ids = self.tokenize(text)
        else:
            ids = [int(x) for x in text]
        for name, value in (("context", context), ("stride", stride)):
            if value is not None and value < 1:
                raise ValueError(f"score: {name} must be >= 1, got {value}")
        ctx, strd, windows, positions, rows, nll_sum, seconds = self._impl.score(
            ids, context or 0, stride or 0, -1 if logprobs is None else logprobs)
        n = len(positions)
        nll = nll_sum / n
        return Score(perplexity=math.exp(nll), nll=nll, tokens=n, ids=ids, positions=list(positions),
                     token_logprobs=[lp for _, lp, _ in rows],
                     top_logprobs=[list(top) for _, _, top in rows] if logprobs is not None else [],
                     context=ctx, stride=strd, windows=windows, seconds=seconds)

    def perplexity(self, text: Prompt, context: int | None = None, stride: int | None = None) -> float:
        """``text``'s perplexity: exp of the mean negative log-likelihood of its tokens (:meth:`score`)."""
        return self.score(text, context, stride).perplexity

    # ---- generation ----------------------------------------------------------------------

    def _prompts(self, prompt: Prompt | Sequence[Prompt]) -> tuple[list[list[int]], bool, bool]:
        """(prompts as ids, one prompt given, prompts given as text)."""
        if isinstance(prompt, str):
            return [self.tokenize(prompt)], True, True
        items = list(prompt)
        if items and all(isinstance(x, int) for x in items):
            return [[x for x in items if isinstance(x, int)]], True, False
        ids: list[list[int]] = []
        texts = all(isinstance(x, str) for x in items)
        for i, p in enumerate(items):
            if isinstance(p, str):
                ids.append(self.tokenize(p))
            elif isinstance(p, Sequence) and all(isinstance(x, int) for x in p):
                ids.append([int(x) for x in p])
            else:
                raise TypeError(f"generate: prompt {i} must be a str or a sequence of token ids")
        return ids, False, texts

    def _run(self, prompts: list[list[int]], text: bool, max_new_tokens: int, temperature: float,
             top_k: int | None, top_p: float, seed: int, stop: Sequence[str] | str | None,
             logprobs: int | None, ignore_eos: bool = False, on_text: Any = None,
             cancel: threading.Event | None = None,
             penalties: _Penalties = _Penalties(), chat: bool = False) -> tuple[list[Generation], list[str]]:
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if any(not s for s in stops):
            raise ValueError("generate: an empty stop string would stop at once")
        if top_k is not None and top_k < 1:
            raise ValueError(f"generate: top_k must be >= 1, got {top_k}")
        if stops and not self._impl.has_tokenizer:
            raise ValueError(f"generate: stop strings need the tokenizer: '{self.path}' has none")
        state = _Stops(self._impl, prompts, stops, text and self._impl.has_tokenizer, ignore_eos, chat)

        def on_token(seq: int, token: int) -> bool:
            piece = state.push(seq, token)
            if on_text is not None and piece:
                on_text(seq, piece)
            return not state.stopped(seq) and not (cancel is not None and cancel.is_set())

        pen = penalties
        results, tps, spec = self._impl.generate(prompts, max_new_tokens, temperature, top_k or 0, top_p, seed,
                                           -1 if logprobs is None else logprobs, ignore_eos, on_token, pen.min_p,
                                           pen.repeat_penalty, pen.repeat_last_n, pen.frequency_penalty,
                                           pen.presence_penalty, list(pen.logit_bias))
        drafted, accepted, passes, per_pass = spec
        speculative: dict[str, float] = {} if not self._impl.drafts else {
            "drafted": drafted, "accepted": accepted, "acceptance": accepted / drafted if drafted else 0.0,
            "target_passes": passes, "tokens_per_pass": per_pass}
        out = []
        for b, (ids, reason, lps) in enumerate(results):
            rest = state.finish(b)
            if on_text is not None and rest:
                on_text(b, rest)
            reason = "stop" if state.stopped(b) else reason
            out.append(Generation(text=state.text(b), ids=list(ids), finish_reason=reason, tokens_per_s=tps,
                                  logprobs=[(i, lp, list(top)) for i, lp, top in lps], reasoning=state.reasoning(b),
                                  speculative=dict(speculative)))
        return out, [g.text for g in out]

    @overload
    def generate(self, prompt: str, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float = 1.0, seed: int = 0, stop: Sequence[str] | str | None = None,
                 logprobs: int | None = None, *, details: bool = False, ignore_eos: bool = False,
                 min_p: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 logit_bias: Mapping[int, float] | None = None) -> Any: ...
    @overload
    def generate(self, prompt: Sequence[Prompt] | Sequence[int], max_new_tokens: int = 32, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float = 1.0, seed: int = 0,
                 stop: Sequence[str] | str | None = None, logprobs: int | None = None, *,
                 details: bool = False, ignore_eos: bool = False, min_p: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 logit_bias: Mapping[int, float] | None = None) -> Any: ...
    def generate(self, prompt: Prompt | Sequence[Prompt], max_new_tokens: int = 32, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float = 1.0, seed: int = 0,
                 stop: Sequence[str] | str | None = None, logprobs: int | None = None, *,
                 details: bool = False, ignore_eos: bool = False, min_p: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 logit_bias: Mapping[int, float] | None = None) -> Any:
        """Continues ``prompt``: a string, a list of token ids, or a list of either (one batch).

        Greedy by default; ``temperature > 0`` samples after ``top_k`` / ``top_p`` filtering
        (transformers' order) from a stream seeded by ``seed`` (a prompt gets the same tokens alone
        or in a batch). A text prompt is read as :meth:`tokenize` reads it (BOS first when the model
        wants one). Generation ends at any of the model's end-of-sequence tokens
        (:attr:`eos_token_ids`; kept in the ids, left out of the text), a ``stop`` string (the
        text ends where the stop string ends) or ``max_new_tokens``; with ``ignore_eos=True`` the
        end-of-sequence tokens end nothing (and show as text). ``logprobs=N`` records each new
        token's log-probability and the N most likely alternatives (N <= 20).

        The logits may be adjusted first (greedy and sampled choice alike; the logprobs stay the
        model's): ``logit_bias`` ({token id: bias}, -100 bans a token), ``repeat_penalty`` over
        the last ``repeat_last_n`` tokens with the prompt (llama.cpp's; -1: all), OpenAI's
        ``frequency_penalty`` / ``presence_penalty`` over the generated tokens; ``min_p`` drops
        tokens less likely than that share of the most likely one (after top_k / top_p).

        Returns the continuation's text for a text prompt (a list for a list of prompts), its new
        token ids for an ids prompt, or :class:`Generation` objects with ``details=True``.
        Raises ValueError / IndexError (qkv's messages) for bad options or token ids, before any work.
        """
        prompts, single, text = self._prompts(prompt)
        gens, _ = self._run(prompts, text or bool(stop), max_new_tokens, temperature, top_k, top_p, seed, stop,
                            logprobs, ignore_eos, penalties=_Penalties.of(min_p, repeat_penalty, repeat_last_n, frequency_penalty, presence_penalty, logit_bias))
        if details:
            return gens[0] if single else gens
        values: list[Any] = [g.text if text else g.ids for g in gens]
        return values[0] if single else values

    def stream(self, prompt: Prompt, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
               top_p: float = 1.0, seed: int = 0, stop: Sequence[str] | str | None = None, *,
               ignore_eos: bool = False, min_p: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 logit_bias: Mapping[int, float] | None = None) -> Iterator[str]:
        """Yields the continuation's text as it is made (whole characters only; same options as generate).

        The generation runs in a background thread; closing the iterator early (``break``) stops it.
        """
        prompts, single, _ = self._prompts(prompt)
        if not single:
            raise TypeError("stream: one prompt at a time (a str or a list of token ids)")
        return self._stream(prompts[0], max_new_tokens, temperature, top_k, top_p, seed, stop, ignore_eos,
                            _Penalties.of(min_p, repeat_penalty, repeat_last_n, frequency_penalty, presence_penalty, logit_bias))

    def _stream(self, ids: list[int], max_new_tokens: int, temperature: float, top_k: int | None, top_p: float,
                seed: int, stop: Sequence[str] | str | None, ignore_eos: bool,
                penalties: _Penalties = _Penalties(), chat: bool = False) -> Iterator[str]:
        pieces: queue.Queue[Any] = queue.Queue()
        cancel = threading.Event()
        done = object()

        def work() -> None:
            try:
                self._run([ids], True, max_new_tokens, temperature, top_k, top_p, seed, stop, None, ignore_eos,
                          on_text=lambda _seq, piece: pieces.put(piece), cancel=cancel, penalties=penalties, chat=chat)
                pieces.put(done)
            except BaseException as e:  # noqa: BLE001 (handed to the consumer)
                pieces.put(e)

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        try:
            while True:
                item = pieces.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancel.set()
            thread.join()

    @staticmethod
    def _messages_json(messages: Sequence[Mapping[str, Any]]) -> str:
        return json.dumps([dict(m) if isinstance(m, Mapping) else m for m in messages], ensure_ascii=False)

    @staticmethod
    def _kwargs_json(chat_template_kwargs: Mapping[str, Any] | None) -> str:
        return "" if not chat_template_kwargs else json.dumps(dict(chat_template_kwargs), ensure_ascii=False)

    def render_chat(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                    chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The text of ``messages`` through the chat template, as transformers'
        ``apply_chat_template(..., tokenize=False, **chat_template_kwargs)`` renders it (``bos_token``
        / ``eos_token`` set; ``chat_template_kwargs`` such as ``{"enable_thinking": False}``)."""
        return str(self._impl.render_chat(self._messages_json(messages), add_generation_prompt,
                                          self._kwargs_json(chat_template_kwargs)))

    def chat(self, messages: Sequence[Mapping[str, Any]], max_new_tokens: int = 256, temperature: float = 0.0,
             top_k: int | None = None, top_p: float = 1.0, seed: int = 0, stop: Sequence[str] | str | None = None,
             *, details: bool = False, ignore_eos: bool = False,
             chat_template_kwargs: Mapping[str, Any] | None = None, min_p: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 logit_bias: Mapping[int, float] | None = None) -> Any:
        """The assistant's reply to ``messages`` ([{"role": ..., "content": ...}, ...]), through the chat template.

        The conversation is rendered by the model's chat template (or ``chat_template=``) as
        transformers' ``apply_chat_template(add_generation_prompt=True)`` renders it, tokenized with
        special tokens matched (no BOS added unless the template writes it), and continued as
        :meth:`generate` does, to the first end-of-sequence token: the same tokens as
        ``qkv generate --chat``. Other keys of a message (``tool_calls``, ...) reach the template, and
        ``chat_template_kwargs`` its variables (``{"enable_thinking": False}`` for Qwen3).
        A reasoning model's reply (Qwen3's ``<think>`` block, gpt-oss's harmony channels) is its
        answer; the reasoning is ``Generation.reasoning`` and the format's markup is dropped, as
        ``qkv chat`` and the server show them.
        Returns the reply's text, or a :class:`Generation` with ``details=True``. ValueError for a
        message without a string role or content, or a model without a chat template.
        """
        gens, _ = self._run([self._chat_ids(messages, chat_template_kwargs)], True, max_new_tokens, temperature, top_k, top_p, seed, stop,
                            None, ignore_eos, penalties=_Penalties.of(min_p, repeat_penalty, repeat_last_n, frequency_penalty, presence_penalty, logit_bias),
                            chat=True)
        return gens[0] if details else gens[0].text

    def stream_chat(self, messages: Sequence[Mapping[str, Any]], max_new_tokens: int = 256, temperature: float = 0.0,
                    top_k: int | None = None, top_p: float = 1.0, seed: int = 0,
                    stop: Sequence[str] | str | None = None, *, ignore_eos: bool = False,
                    chat_template_kwargs: Mapping[str, Any] | None = None, min_p: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 logit_bias: Mapping[int, float] | None = None) -> Iterator[str]:
        """Yields :meth:`chat`'s reply as it is made (whole characters only), as :meth:`stream` does."""
        ids = self._chat_ids(messages, chat_template_kwargs)  # errors here, not at the first next()
        return self._stream(ids, max_new_tokens, temperature, top_k, top_p, seed, stop, ignore_eos, _Penalties.of(min_p, repeat_penalty, repeat_last_n, frequency_penalty, presence_penalty, logit_bias),
                            chat=True)

    def _chat_ids(self, messages: Sequence[Mapping[str, Any]],
                  chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
        return list(self._impl.chat_prompt(self._messages_json(messages), True, self._kwargs_json(chat_template_kwargs)))
