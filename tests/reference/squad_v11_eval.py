"""An independent implementation of the official SQuAD v1.1 evaluation (evaluate-v1.1.py's
definition: normalise by lower-casing, removing punctuation and the articles a/an/the, and
collapsing whitespace; EM and token-bag F1, the max over each question's ground truths, averaged
over every question, in percent).

  score DATASET PREDICTIONS  -> {"exact_match": ..., "f1": ...}
"""
import collections
import json
import re
import string
import sys


def normalize(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1(prediction, truth):
    p, t = normalize(prediction).split(), normalize(truth).split()
    same = sum((collections.Counter(p) & collections.Counter(t)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(t)
    return 2 * precision * recall / (precision + recall)


def score(dataset_file, predictions_file):
    dataset = json.load(open(dataset_file, encoding="utf-8"))["data"]
    predictions = json.load(open(predictions_file, encoding="utf-8"))
    em = f = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                truths = [a["text"] for a in qa["answers"]]
                pred = predictions[qa["id"]]
                em += max(float(normalize(pred) == normalize(t)) for t in truths)
                f += max(f1(pred, t) for t in truths)
    print(json.dumps({"exact_match": 100.0 * em / total, "f1": 100.0 * f / total,
                      "normalized": {p: normalize(p) for p in predictions.values()}}))


if __name__ == "__main__":
    score(sys.argv[2], sys.argv[3])
