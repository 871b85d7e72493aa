"""The MLflow pyfunc wrapper of a policy checkpoint (an MLflow "model from code" file).

MLflow copies this file into the logged model and runs it at load time, so the logged model
needs only ``mlflow``, ``torch`` and ``transformers`` - not agentr1. Its one artifact,
``checkpoint``, is the safetensors checkpoint + tokenizer directory the trainer saved.

``predict`` takes prompts (a list of strings, or a one-column DataFrame of them) and
returns the greedy continuation of each (param ``max_new_tokens``, default 32); it is a
smoke-test / serving convenience, not the rollout engine (which keeps token-exact trajectories).
"""

from __future__ import annotations

import mlflow
from mlflow.pyfunc import PythonModel


# ``predict`` has no type hints on purpose: MLflow would replace the explicit signature (which
# declares the ``max_new_tokens`` param) by one inferred from the hints, without params. MLflow
# warns "Add type hints to the `predict` method" at class definition; that warning is expected.
class PolicyModel(PythonModel):
    """Greedy text continuation with the checkpoint in ``context.artifacts["checkpoint"]``."""

    def load_context(self, context):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = context.artifacts["checkpoint"]
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def predict(self, context, model_input, params=None):
        import torch

        prompts = list(model_input.iloc[:, 0]) if hasattr(model_input, "columns") else list(model_input)
        max_new = int((params or {}).get("max_new_tokens", 32))
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        outputs = []
        for prompt in prompts:  # one at a time: no padding side effects on a tiny policy
            ids = self.tokenizer(str(prompt), return_tensors="pt", add_special_tokens=False)
            with torch.no_grad():
                gen = self.model.generate(**ids, max_new_tokens=max_new, do_sample=False, pad_token_id=pad)
            outputs.append(self.tokenizer.decode(gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))
        return outputs


mlflow.models.set_model(PolicyModel())
