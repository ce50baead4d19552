"""A small character-level tokenizer for the embedded task, built with ``tokenizers`` and wrapped as
``PreTrainedTokenizerFast`` so ``save_pretrained`` writes a normal Hugging Face tokenizer directory that any
HF-compatible engine can load.

Vocabulary: special tokens ``<pad>`` (0), ``<eos>`` (1), ``<unk>`` (2); printable ASCII characters one token each;
and two *added* tokens matched before character splitting: the default prompt template's instruction suffix
(`` Let's think step by step and output the final answer within \\boxed{}.``) and ``\\boxed{``. The suffix as one
token keeps a prompt at 13 tokens instead of ~85, which is most of the generation cost of a tiny model; any other
template still works, character by character. Decoding concatenates tokens (no spaces inserted).
"""

from __future__ import annotations

import string
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
BOXED_OPEN = "\\boxed{"
INSTRUCTION = " Let's think step by step and output the final answer within \\boxed{}."


def build_tokenizer() -> PreTrainedTokenizerFast:
    chars = [c for c in string.printable if c not in "\t\n\r\x0b\x0c"]
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(PAD, special=True), AddedToken(EOS, special=True), AddedToken(UNK, special=True)])
    tok.add_tokens([AddedToken(INSTRUCTION, normalized=False), AddedToken(BOXED_OPEN, normalized=False)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",  # decoder-only generation: prompts end where generation starts
        model_max_length=256,
    )
    return fast


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """The fast tokenizer of an HF directory, read from its ``tokenizer.json`` (data, never code: the concrete
    class ignores a ``tokenizer_config.json`` ``auto_map``, and ``trust_remote_code=False`` says so), left-padded."""
    tok = PreTrainedTokenizerFast.from_pretrained(str(path), trust_remote_code=False)
    tok.padding_side = "left"
    return tok
