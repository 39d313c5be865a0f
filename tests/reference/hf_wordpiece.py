"""Reference for the tokenizer tests: Hugging Face's BertTokenizer (tokens, ids) and
BertTokenizerFast (character offsets) on a vocabulary and texts written by the test, and the
pure-Python tokenizer (BertTokenizerLegacy in transformers 5; in 4, BertTokenizer is that one).

  tokenize VOCAB TEXTS LOWER   TEXTS: a JSON list of strings; LOWER: 1 or 0
  -> {"tokens": [[...]], "ids": [[...]], "offsets": [[[b, e], ...]]}
"""
import json
import sys

from transformers import BertTokenizer, BertTokenizerFast

try:
    from transformers import BertTokenizerLegacy as PythonBertTokenizer
except ImportError:
    PythonBertTokenizer = BertTokenizer


def tokenize(vocab, texts_file, lower):
    texts = json.load(open(texts_file, encoding="utf-8"))
    lower = lower == "1"
    slow = BertTokenizer(vocab, do_lower_case=lower)
    fast = BertTokenizerFast(vocab, do_lower_case=lower)
    legacy = PythonBertTokenizer(vocab, do_lower_case=lower)
    out = {"tokens": [], "ids": [], "offsets": [], "fast_tokens": [], "legacy_tokens": []}
    for text in texts:
        out["tokens"].append(slow.tokenize(text))
        out["ids"].append(slow.convert_tokens_to_ids(slow.tokenize(text)))
        enc = fast(text, add_special_tokens=False, return_offsets_mapping=True)
        out["offsets"].append([list(o) for o in enc["offset_mapping"]])
        out["fast_tokens"].append(fast.convert_ids_to_tokens(enc["input_ids"]))
        out["legacy_tokens"].append(legacy.tokenize(text))
    print(json.dumps(out))


if __name__ == "__main__":
    tokenize(sys.argv[2], sys.argv[3], sys.argv[4])
