"""The embedded tokenizer: one token per character, the instruction and \\boxed{ as single tokens, HF round trip."""

from transformers import AutoTokenizer

from pc_pipelines.data.tokenizer import BOXED_OPEN, INSTRUCTION, build_tokenizer


def test_prompt_and_response_tokenization():
    tok = build_tokenizer()
    ids = tok("00123+04567" + INSTRUCTION, add_special_tokens=False)["input_ids"]
    assert len(ids) == 12  # 11 characters + the instruction token
    assert tok.convert_ids_to_tokens(ids[-1]) == INSTRUCTION
    r = tok("\\boxed{004690}", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(r[0]) == BOXED_OPEN and len(r) == 8
    assert tok.decode(r + [tok.eos_token_id], skip_special_tokens=True) == "\\boxed{004690}"


def test_any_text_round_trips_character_by_character():
    tok = build_tokenizer()
    text = "What is 3*(4+5)? Answer: \\boxed{27}"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_save_pretrained_loads_with_auto_tokenizer(tmp_path):
    tok = build_tokenizer()
    tok.save_pretrained(tmp_path)
    auto = AutoTokenizer.from_pretrained(str(tmp_path))
    text = "00001+00002" + INSTRUCTION
    assert auto(text, add_special_tokens=False)["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]
    assert auto.pad_token_id == 0 and auto.eos_token_id == 1


def test_load_tokenizer_runs_no_code_a_tokenizer_config_names(tmp_path):
    """An auto_map in tokenizer_config.json (a tokenizer class of the directory's own) is never imported: the
    tokenizer is read from tokenizer.json (load_policy refuses such a directory outright, before this)."""
    import json

    from pc_pipelines.data.tokenizer import load_tokenizer

    build_tokenizer().save_pretrained(tmp_path)
    marker = tmp_path / "RAN"
    (tmp_path / "tokenization_custom.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg["auto_map"] = {"AutoTokenizer": [None, "tokenization_custom.CustomTokenizerFast"]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = load_tokenizer(tmp_path)
    assert not marker.exists()
    from transformers import PreTrainedTokenizerFast

    assert isinstance(tok, PreTrainedTokenizerFast) and tok.padding_side == "left"
    assert tok.decode(tok("12+3", add_special_tokens=False)["input_ids"]) == "12+3"
