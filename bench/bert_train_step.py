"""The Python side of the BERT training-step benchmark: Hugging Face transformers'
BertForQuestionAnswering (SDPA attention) trained eagerly with the same config, sequence length,
batch, optimizer and thread count as Frugal's run; STEPS steps timed after one untimed warm-up.

  python bert_train_step.py HIDDEN LAYERS HEADS SEQ BATCH STEPS THREADS [LENGTHS]  -> {"seconds": ...}

LENGTHS: the sequences' real lengths, comma-separated (padded after them with id 0, attention
mask 0); all SEQ without it.
"""
import json
import sys
import time

import torch
from transformers import BertConfig, BertForQuestionAnswering


def main(hidden, layers, heads, seq, batch, steps, threads, lengths):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=512)
    model = BertForQuestionAnswering(config)
    decay = [p for n, p in model.named_parameters() if "bias" not in n and "LayerNorm" not in n]
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    # fused=True: the Hugging Face Trainer's default optimizer with torch >= 2.8 (adamw_torch_fused), as
    # Frugal's example uses frugal::FusedAdamW.
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=3e-5, eps=1e-6,
                            weight_decay=0.01, fused=True)
    mask = (torch.arange(seq).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()
    ids = torch.randint(1, 30522, (batch, seq)) * mask
    types = torch.zeros(batch, seq, dtype=torch.long)
    last = torch.tensor(lengths) - 1
    starts, ends = (torch.rand(batch) * last).long(), (torch.rand(batch) * last).long()
    model.train()
    clock = time.thread_time if threads == 1 else time.perf_counter  # as the Frugal side
    start = clock()
    for step in range(steps + 1):
        if step == 1:
            start = clock()
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, token_type_ids=types, attention_mask=mask, start_positions=starts, end_positions=ends)
        out.loss.backward()
        opt.step()
    out.loss.item()
    print(json.dumps({"seconds": clock() - start}))


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:8]]
    main(*args, [int(n) for n in sys.argv[8].split(",")] if len(sys.argv) > 8 else [args[3]] * args[4])
