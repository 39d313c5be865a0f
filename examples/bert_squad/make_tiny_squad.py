"""Writes the BERT example's bundled default data, written for this repository: short
encyclopedia-style paragraphs about invented towns, rivers and people, with SQuAD v1.1 questions
whose answers are spans of the paragraph (names, years, numbers, places), and the WordPiece
vocabulary of that text (special tokens, every word, every character and its ## form).

  python make_tiny_squad.py OUT_DIR   -> train.json, dev.json, vocab.txt (deterministic)
"""
import json
import os
import random
import re
import sys

TOWNS = ["Arvel", "Brisko", "Caldren", "Dunmere", "Elstow", "Farrow", "Galden", "Hollin", "Istra", "Jorvale", "Kestin",
         "Lomar", "Marrow", "Nettle", "Orrin", "Pellam", "Quarry", "Rosk", "Sallow", "Tarn", "Ulver", "Varo", "Wexley",
         "Yarrow", "Zell"]
RIVERS = ["Amber", "Brook", "Cress", "Dale", "Esk", "Fenn", "Glass", "Hart", "Ivy", "Jade"]
PEOPLE = ["Ada Brand", "Bram Cole", "Cora Dunn", "Dirk Ewell", "Edda Frost", "Finn Gale", "Greta Holm", "Hugo Ives",
          "Ilse Joss", "Jonas Kerr", "Kira Lund", "Lars Moss", "Mila Nord", "Nils Ott", "Olga Penn", "Piet Quin"]
GOODS = ["wool", "salt", "glass", "copper", "linen", "cheese", "timber", "paper", "clocks", "bells"]
SEASONS = ["spring", "summer", "autumn", "winter"]


def paragraph(rng, town):
    river, founder, mayor = rng.choice(RIVERS), rng.choice(PEOPLE), rng.choice(PEOPLE)
    year, people, good, season = rng.randint(1100, 1900), rng.randint(2, 90) * 1000, rng.choice(GOODS), rng.choice(SEASONS)
    bridges = rng.randint(2, 19)
    facts = [
        (f"{town} is a town on the river {river}.", [(f"Which river is {town} on?", river),
                                                     (f"On which river does {town} lie?", river)]),
        (f"It was founded in {year} by {founder}.", [(f"When was {town} founded?", str(year)),
                                                    (f"Who founded {town}?", founder)]),
        (f"About {people} people live there today.", [(f"How many people live in {town}?", str(people))]),
        (f"The town is known for its {good}, which is sold at a market every {season}.",
         [(f"What is {town} known for?", good), (f"In which season is the market of {town} held?", season)]),
        (f"{town} has {bridges} bridges, and its mayor is {mayor}.", [(f"How many bridges does {town} have?", str(bridges)),
                                                                      (f"Who is the mayor of {town}?", mayor)]),
    ]
    rng.shuffle(facts)
    context, qas = "", []
    for sentence, questions in facts:
        start = len(context)
        context += sentence + " "
        for question, answer in questions:
            qas.append((question, answer, context.index(answer, start)))
    return context.strip(), qas


def write(out, name, towns, rng, copies):
    data, n = [], 0
    for town in towns:
        for copy in range(copies):
            context, qas = paragraph(rng, town)
            entries = []
            for question, answer, start in qas:
                assert context[start:start + len(answer)] == answer
                entries.append({"id": f"{name}-{n}", "question": question, "answers": [{"text": answer, "answer_start": start}]})
                n += 1
            data.append({"title": town, "paragraphs": [{"context": context, "qas": entries}]})
    json.dump({"version": "1.1", "data": data}, open(os.path.join(out, f"{name}.json"), "w"), indent=1)
    return data


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = random.Random(0)
    train = write(out, "train", TOWNS[:20], rng, 6)
    dev = write(out, "dev", TOWNS[20:], rng, 4)
    text = " ".join(p["context"] + " " + " ".join(q["question"] for q in p["qas"])
                    for article in train + dev for p in article["paragraphs"])
    words = sorted(set(re.findall(r"[a-z0-9]+", text.lower())))
    chars = sorted(set(c for c in text.lower() if not c.isspace()))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + [c for c in chars if c not in words] + ["##" + c for c in chars]
    open(os.path.join(out, "vocab.txt"), "w").write("\n".join(vocab) + "\n")
    print(f"{sum(len(p['qas']) for a in train for p in a['paragraphs'])} training and "
          f"{sum(len(p['qas']) for a in dev for p in a['paragraphs'])} dev questions, {len(vocab)} vocabulary entries")


if __name__ == "__main__":
    main(sys.argv[1])
