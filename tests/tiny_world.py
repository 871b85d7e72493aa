"""A tiny synthetic world for the oracle / SFT / baseline tests: film -> producing company ->
founder chains with invented names, 2-hop bridge questions and 1-hop questions, a real BM25
index over it, and a tiny tokenizer + Llama model."""

from __future__ import annotations

from agentr1.config import BM25Config, EnvConfig, ScratchModelConfig
from agentr1.env import ToolEnv
from agentr1.models import TOOL_TAGS, build_scratch_model, train_tokenizer
from agentr1.retrieval.bm25 import BM25Retriever

# the named runs stage tests train and evaluate (params.yaml holds the real list; Config().runs is empty)
RUNS = {"ppo": {"estimator": "gae"}, "grpo": {"estimator": "grpo"}}
TINY_MODEL = ScratchModelConfig(
    vocab_size=600, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64, max_position=1024
)
FILMS = ["Drozis Letters", "Rotam Storm", "Kelvu Garden", "Somar Tide", "Vintal Crown", "Bresk Hollow"]
COMPANIES = ["Pusesu Labs", "Thobrube Foods", "Krudaru Works", "Stogrifa Motors", "Elmon Trading", "Quasto Mills"]
FOUNDERS = ["Derlin Brisarn", "Kulda Fivisk", "Somdar Ruvok", "Grinki Zenask", "Pomzi Pafosk", "Mombi Rurisk"]


def corpus() -> list[dict]:
    rows = []
    for i, (film, company, person) in enumerate(zip(FILMS, COMPANIES, FOUNDERS)):
        rows.append(
            {
                "id": f"f{i}",
                "title": film,
                "text": f"{film} is a film released in {1950 + i}. It was produced by {company}.",
            }
        )
        rows.append(
            {"id": f"c{i}", "title": company, "text": f"{company} is a company founded in {1900 + i} by {person}."}
        )
        rows.append({"id": f"p{i}", "title": person, "text": f"{person} is a painter born in {1870 + i}."})
    return rows


def questions(split: str = "train") -> list[dict]:
    out = []
    for i, (film, company, person) in enumerate(zip(FILMS, COMPANIES, FOUNDERS)):
        out.append(
            {
                "id": f"{split}-b{i}",
                "question": f"Who founded the company that produced {film}?",
                "answers": [person],
                "type": "bridge",
                "hops": 2,
                "supporting_ids": [f"f{i}", f"c{i}"],
                "source": "synthetic",
                "split": split,
            }
        )
        out.append(
            {
                "id": f"{split}-s{i}",
                "question": f"Who founded {company}?",
                "answers": [person],
                "type": "bridge",
                "hops": 1,
                "supporting_ids": [f"c{i}"],
                "source": "synthetic",
                "split": split,
            }
        )
    return out


def retriever() -> BM25Retriever:
    return BM25Retriever.build(corpus(), BM25Config())


def env(fmt: str = "tags", max_turns: int = 4) -> ToolEnv:
    cfg = EnvConfig(format=fmt, max_turns=max_turns, search={"topk": 2, "passage_max_chars": 200})
    return ToolEnv.from_config(cfg, retriever())


def stage_config(root, splits: dict[str, list[dict]], **sections):
    """A Config for running stages on this world under ``root``: ``splits`` written as
    ``root/processed``, the BM25 index saved as ``root/index``, checkpoints and reports under
    ``root``; ``sections`` override top-level sections (``sft`` merges into the base sft; ``runs``
    defaults to :data:`RUNS`)."""
    from pathlib import Path

    from agentr1.config import config_from_dict
    from agentr1.data.schema import Dataset, write_dataset

    root = Path(root)
    processed, index = root / "processed", root / "index"
    write_dataset(Dataset(questions=splits, corpus=corpus()), processed)
    retriever().save(index)
    sft = {
        "out_dir": str(root / "models" / "sft"),
        "report_dir": str(root / "sft"),
        "num_threads": None,
        **sections.pop("sft", {}),
    }
    pretrain = {
        "out_dir": str(root / "models" / "init"),
        "report_dir": str(root / "pretrain"),
        **sections.pop("pretrain", {}),
    }
    cfg = config_from_dict(
        {
            "data": {"processed_dir": str(processed)},
            "retrieval": {"index_dir": str(index)},
            "env": {"search": {"topk": 2, "passage_max_chars": 200}},
            "model": {"scratch": TINY_MODEL.model_dump()},
            "pretrain": pretrain,
            "sft": sft,
            "runs": RUNS,
            **sections,
        }
    )
    save_base(cfg)
    return cfg


def train_inputs(root) -> tuple:
    """What a train stage reads, written under ``root``: the train split and 2 dev questions as
    ``processed``, the BM25 index as ``index`` and an untrained "cold start" as ``sft``; the three paths."""
    from pathlib import Path

    from agentr1.data.schema import Dataset, write_dataset
    from agentr1.models import save_checkpoint

    root = Path(root)
    processed, index, sft = root / "processed", root / "index", root / "sft"
    write_dataset(
        Dataset(questions={"train": questions("train"), "dev": questions("dev")[:2]}, corpus=corpus()), processed
    )
    retriever().save(index)
    tok = tokenizer([q["question"] for q in questions()])
    save_checkpoint(model(tok), tok, sft)
    return processed, index, sft


def save_base(cfg, seed: int = 0):
    """The base policy the sft stage starts from, as ``agentr1 pretrain`` leaves it in
    ``pretrain.out_dir``: here the tiny model with the tiny world's tokenizer, untrained."""
    from agentr1.models import save_checkpoint

    tok = tokenizer([])
    save_checkpoint(model(tok, seed=seed), tok, cfg.pretrain.out_dir)
    return tok


def tokenizer(texts: list[str]):
    base = [f"{p['title']}\n{p['text']}" for p in corpus()]
    return train_tokenizer(base + list(texts), TINY_MODEL.vocab_size, TOOL_TAGS)


def model(tok, seed: int = 0):
    return build_scratch_model(TINY_MODEL, tok, seed=seed)
