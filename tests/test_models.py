"""Policy loading: the scratch tokenizer is lossless and knows the tool tags, the scratch model is
a seeded standard Llama, checkpoints round-trip exactly, GGUF discovery errors are clear."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentr1.config import ModelConfig, ScratchModelConfig
from agentr1.errors import StageError
from agentr1.models import (
    TOOL_TAGS,
    build_scratch_model,
    find_gguf_file,
    load_checkpoint,
    load_policy,
    save_checkpoint,
    train_tokenizer,
)

torch.set_num_threads(1)

CORPUS = [
    "Zorvath Quellin was born in Brindlemoor and founded Vantrix Holdings in 1931.",
    "The film Ombrel Dusk was directed by Kael Veshtar; it premiered in Trelloway.",
    "Question: Who founded the company that produced Ombrel Dusk?",
    "<search> Vantrix Holdings founder </search>\n<information>Doc 1 (Vantrix): ...</information>",
] * 20

TINY = ScratchModelConfig(
    vocab_size=600, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64, max_position=256
)

TRICKY = [
    "  leading spaces and trailing  ",
    "line one\nline two\r\n\ttabbed\n\n",
    "unicode: Zürich, naïve, 東京, Ωμέγα, emoji 🚀👩‍🔬, combining e\u0301",
    "<search> Zorvath  Quellin </search>\n<information>Doc 1: x</information>\n<answer>yes</answer>",
    '<|im_start|>assistant\n<think>hmm</think><tool_call>{"name": "search"}</tool_call><|im_end|>',
    "no-space<answer>tight</answer>after",
    "",
]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(CORPUS, TINY.vocab_size)


@pytest.mark.parametrize("text", TRICKY)
def test_tokenizer_round_trip_is_exact(tok, text):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_tokenizer_round_trip_any_text(tok, text):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text


def test_tokenizer_special_tokens_and_template(tok):
    for tag in (*TOOL_TAGS, "<|im_start|>", "<|im_end|>"):
        assert len(tok(tag, add_special_tokens=False)["input_ids"]) == 1, tag
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|pad|>"
    assert tok.pad_token_id != tok.eos_token_id
    # tool tags are not "special": they survive a human-readable decode
    ids = tok("<search> q </search><|im_end|>", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "<search> q </search>"
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    # invented names learned from the corpus are one or two tokens
    assert len(tok(" Zorvath", add_special_tokens=False)["input_ids"]) <= 2


def test_whole_words_are_one_token_each_and_stay_lossless():
    rare = ["Nukdia", "Brisarnel", "Thobrube", "Krelvia"]  # in no training text
    plain = train_tokenizer(CORPUS, TINY.vocab_size)
    whole = train_tokenizer(CORPUS, TINY.vocab_size, whole_words=[*rare, "Zorvath", "Vantrix Holdings", "x-y"])
    assert all(len(plain(" " + w, add_special_tokens=False)["input_ids"]) > 1 for w in rare)
    for w in (*rare, "Zorvath", "Vantrix", "Holdings"):
        assert len(whole(" " + w, add_special_tokens=False)["input_ids"]) == 1, w
    split = [
        w
        for w in (*rare, "Zorvath", "Vantrix", "Holdings")
        if len(plain(" " + w, add_special_tokens=False)["input_ids"]) > 1
    ]
    assert len(whole) == len(plain) + len(split)  # one token more per split word; "x-y" is no single word
    text = "In which country? Nukdia, officially the Commonwealth of Nukdia.\n<answer> Nukdiaville</answer>"
    ids = whole(text, add_special_tokens=False)["input_ids"]
    assert whole.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text
    assert (
        train_tokenizer(CORPUS, TINY.vocab_size, whole_words=rare).get_vocab()
        == train_tokenizer(CORPUS, TINY.vocab_size, whole_words=rare[::-1]).get_vocab()
    )


def test_tokenizer_training_is_deterministic(tok):
    again = train_tokenizer(CORPUS, TINY.vocab_size)
    assert again.get_vocab() == tok.get_vocab()


def test_scratch_model_is_seeded_llama(tok):
    a = build_scratch_model(TINY, tok, seed=3)
    b = build_scratch_model(TINY, tok, seed=3)
    c = build_scratch_model(TINY, tok, seed=4)
    assert a.config.model_type == "llama" and a.config.vocab_size == len(tok)
    assert a.config.num_key_value_heads == 1 and a.config.tie_word_embeddings
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_load_policy_scratch_needs_texts():
    cfg = ModelConfig(kind="scratch", scratch=TINY)
    with pytest.raises(ValueError, match="tokenizer"):
        load_policy(cfg)
    model, tok = load_policy(cfg, tokenizer_texts=CORPUS, seed=1)
    assert model.config.vocab_size == len(tok) and not model.training


def test_checkpoint_round_trip_gives_identical_logits(tok, tmp_path):
    model = build_scratch_model(TINY, tok, seed=0)
    path = save_checkpoint(model, tok, tmp_path / "ckpt")
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir()), "temporary dir left behind"
    loaded, tok2 = load_checkpoint(path)
    ids = torch.tensor([tok(TRICKY[3], add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert (
        tok2(TRICKY[4], add_special_tokens=False)["input_ids"] == tok(TRICKY[4], add_special_tokens=False)["input_ids"]
    )
    assert tok2.chat_template == tok.chat_template and tok2.pad_token_id == tok.pad_token_id


def test_checkpoint_overwrite_is_atomic(tok, tmp_path):
    target = tmp_path / "ckpt"
    save_checkpoint(build_scratch_model(TINY, tok, seed=0), tok, target)
    second = build_scratch_model(TINY, tok, seed=1)
    save_checkpoint(second, tok, target)
    loaded, _ = load_checkpoint(target)
    assert torch.equal(loaded.model.embed_tokens.weight, second.model.embed_tokens.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_find_gguf_file_errors():
    with pytest.raises(StageError, match="not installed"):
        find_gguf_file("agentr1_no_such_package_xyz")
    with pytest.raises(StageError, match="holds 0 GGUF"):
        find_gguf_file("agentr1")


def test_hf_kind_requires_a_path():
    with pytest.raises(ValueError, match="name_or_path"):
        ModelConfig(kind="hf")


@pytest.mark.parametrize("tied", [True, False])
def test_restricted_vocabulary_keeps_the_world_tokens_and_their_logits(tok, tmp_path, tied):
    from agentr1.models.vocab import restrict_vocabulary

    world = CORPUS[:4]
    cfg = TINY.model_copy(update={"tie_embeddings": tied})
    model = build_scratch_model(cfg, tok, seed=1)
    before = {t: tok(t, add_special_tokens=False)["input_ids"] for t in world}
    with torch.no_grad():
        logits = {t: model(input_ids=torch.tensor([ids])).logits[0] for t, ids in before.items()}
    model, small, info = restrict_vocabulary(model, tok, world)
    assert info["before"] == len(tok) and info["after"] == len(small) < len(tok)
    assert model.config.vocab_size == len(small) and model.get_output_embeddings().weight.shape[0] == len(small)
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tied
    kept = torch.tensor(tok.convert_tokens_to_ids(small.convert_ids_to_tokens(list(range(len(small))))))
    for text, ids in before.items():
        new = small(text, add_special_tokens=False)["input_ids"]
        assert small.convert_ids_to_tokens(new) == tok.convert_ids_to_tokens(ids)  # same pieces
        with torch.no_grad():
            assert torch.allclose(model(input_ids=torch.tensor([new])).logits[0], logits[text][:, kept], atol=1e-5)
    # still lossless for any text (byte-level symbols kept), and the chat/EOS tokens survive
    for text in TRICKY:
        ids = small(text, add_special_tokens=False)["input_ids"]
        assert small.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text
    assert small.eos_token == "<|im_end|>" and model.config.eos_token_id == small.eos_token_id
    assert len(small("<search>", add_special_tokens=False)["input_ids"]) == 1
    save_checkpoint(model, small, tmp_path / "cut")
    again, again_tok = load_checkpoint(tmp_path / "cut")
    assert again.config.vocab_size == len(again_tok) == len(small)


def _corrupt_header(file, header: dict | None = None, length: int | None = None) -> None:
    """Rewrite ``file``'s safetensors header: a new JSON ``header`` and/or a declared ``length``."""
    import json
    import struct

    raw = file.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    body = raw[8 + n :]
    text = json.dumps(header).encode() if header is not None else raw[8 : 8 + n]
    file.write_bytes(struct.pack("<Q", length if length is not None else len(text)) + text + body)


@pytest.mark.parametrize("damage", ["offsets_past_end", "huge_header_length", "not_json"])
def test_damaged_safetensors_header_is_a_stage_error_naming_the_file(tok, tmp_path, damage):
    """Issue 26 item 6: `agentr1 sft` with model.kind=hf on a checkpoint whose safetensors header is
    corrupt raised a bare SafetensorError traceback."""
    import json
    import struct

    path = save_checkpoint(build_scratch_model(TINY, tok, seed=0), tok, tmp_path / "ckpt")
    file = path / "model.safetensors"
    raw = file.read_bytes()
    header = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
    if damage == "offsets_past_end":
        name = next(k for k in header if k != "__metadata__")
        start, end = header[name]["data_offsets"]
        header[name]["data_offsets"] = [start, end + 10**9]
        _corrupt_header(file, header)
    elif damage == "huge_header_length":
        _corrupt_header(file, length=2**62)
    else:
        file.write_bytes(struct.pack("<Q", 12) + b"import os;  " + raw[8:])
    with pytest.raises(StageError) as exc:
        load_policy(ModelConfig(kind="hf", name_or_path=str(path)))
    assert str(file) in str(exc.value) and "not a valid safetensors file" in str(exc.value)
