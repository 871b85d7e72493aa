"""Rollout backend on vLLM (GPU only; ``pip install agentr1[gpu]``). vLLM is imported lazily, so
this module imports fine on CPU machines; constructing :class:`VLLMBackend` there raises a clear
error.

Same interface as the HF backend (:class:`agentr1.rollout.backends.Backend`): prompts go in as
``TokensPrompt`` ids (never re-tokenized), sampling uses ``SamplingParams(temperature, top_p,
max_tokens, stop=stop_strings, include_stop_str_in_output=True, logprobs=0, seed)`` and the engine
is built with ``logprobs_mode="processed_logprobs"`` so the returned log-probs are taken after
temperature scaling (``log_softmax(logits / T)``, the convention of the HF backend; top-p
truncation may be reflected in vLLM's processed log-probs, which only matters for ``top_p < 1``).
The sampled ``token_ids`` are trimmed with the same rule as the HF backend
(:func:`agentr1.rollout.backends.first_stop`), since vLLM may keep a token that runs past a stop
string.

Weight sync: after each optimizer step the trainer calls :meth:`VLLMBackend.load_weights` with
its ``named_parameters()``; the tensors are loaded in place into the engine's model (in-process:
the engine is created with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) and the prefix cache is reset so
no KV computed with old weights is reused.

What is tested where: the interface contract, trimming and the engine on top of it are tested on
CPU with the HF backend (``tests/test_rollout.py``); the missing-vLLM error is tested on CPU; the
vLLM path itself (generation, log-prob agreement with a training forward pass, ``load_weights``)
needs a CUDA GPU with vLLM installed and is not run by CPU CI.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import torch

from agentr1.rollout.backends import Generation, first_stop


def _import_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "rollout.backend is 'vllm' but vLLM is not installed: install the GPU extra "
            "(`pip install -e .[gpu]`, needs a CUDA GPU) or set rollout.backend: hf"
        ) from exc
    return vllm


class VLLMBackend:
    """A ``vllm.LLM`` engine over a checkpoint directory (see the module docstring)."""

    def __init__(
        self,
        model_path: str,
        *,
        gpu_memory_utilization: float,
        enforce_eager: bool,
        dtype: str,
        max_model_len: int,
        seed: int = 0,
    ):
        vllm = _import_vllm()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.llm = vllm.LLM(
            model=str(model_path),
            tokenizer=str(model_path),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            max_model_len=max_model_len,
            seed=seed,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
        )
        self.tokenizer = self.llm.get_tokenizer()
        eos = self.tokenizer.eos_token_id
        gen_eos = self.llm.llm_engine.model_config.hf_config.eos_token_id
        ids = [x for x in (eos, *(gen_eos if isinstance(gen_eos, list) else [gen_eos])) if x is not None]
        self.eos_ids = {int(x) for x in ids}

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        stop_strings: Sequence[str],
        temperature: float,
        top_p: float,
        seed: int,
    ) -> list[Generation]:
        """See :class:`agentr1.rollout.backends.Backend`."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not prompts:
            return []
        params = [
            SamplingParams(
                n=1,
                temperature=float(temperature),
                top_p=1.0 if temperature == 0 else float(top_p),
                top_k=0,
                max_tokens=max_new_tokens,
                stop=list(stop_strings) or None,
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                logprobs=0,
                seed=seed + i,
            )
            for i in range(len(prompts))
        ]
        inputs = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        results = []
        for out in outputs:
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            lps = [float(comp.logprobs[i][tok].logprob) for i, tok in enumerate(ids)]
            k, finish = first_stop(self.tokenizer, ids, stop_strings, self.eos_ids)
            results.append(Generation(ids[:k], lps[:k], finish))
        return results

    def _model(self):
        """The engine's ``torch.nn.Module`` (in-process engine); vLLM moved it across versions."""
        engine = self.llm.llm_engine
        for path in (
            ("model_executor", "driver_worker", "worker", "model_runner", "model"),
            ("model_executor", "driver_worker", "model_runner", "model"),
        ):
            obj = engine
            try:
                for name in path:
                    obj = getattr(obj, name)
                return obj
            except AttributeError:
                continue
        raise RuntimeError(
            "cannot reach the vLLM model in-process (is VLLM_ENABLE_V1_MULTIPROCESSING=0 set before the engine starts?)"
        )

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load the trainer's ``(name, tensor)`` pairs (HF parameter names) into the engine."""
        self._model().load_weights(((n, t.detach()) for n, t in named_tensors))
        self.llm.reset_prefix_cache()
