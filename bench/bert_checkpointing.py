"""The Python side of the activation-checkpointing benchmark: Hugging Face transformers'
BertForQuestionAnswering trained eagerly, with or without gradient_checkpointing_enable(
use_reentrant=False), on fixed-length batches of random tokens. After one warm-up step (gradients
kept allocated, set_to_none=False, and the optimizer's state made), the peak RSS above the RSS
before the step is the step's activation memory (run with MALLOC_MMAP_THRESHOLD_=65536 so that
glibc hands freed blocks back and RSS follows what is live); STEPS steps are timed.

  python bert_checkpointing.py HIDDEN LAYERS HEADS SEQ BATCH STEPS THREADS CHECKPOINTING
      -> {"seconds": per step, "activation_bytes": ...}
"""
import json
import sys
import time

import torch
from transformers import BertConfig, BertForQuestionAnswering


def rss_bytes(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field + " not in /proc/self/status")


def main(hidden, layers, heads, seq, batch, steps, threads, checkpointing):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=512)
    model = BertForQuestionAnswering(config)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=3e-5, eps=1e-6, weight_decay=0.01, fused=True)
    ids = torch.randint(1, 30522, (batch, seq))
    types = torch.zeros(batch, seq, dtype=torch.long)
    mask = torch.ones(batch, seq, dtype=torch.long)
    starts, ends = (torch.rand(batch) * (seq - 1)).long(), (torch.rand(batch) * (seq - 1)).long()
    model.train()

    def step():
        opt.zero_grad(set_to_none=False)
        out = model(input_ids=ids, token_type_ids=types, attention_mask=mask, start_positions=starts, end_positions=ends)
        out.loss.backward()
        opt.step()

    step()
    with open("/proc/self/clear_refs", "w") as refs:  # resets the peak RSS (VmHWM) to the current RSS
        refs.write("5")
    before = rss_bytes("VmRSS")
    clock = time.thread_time if threads == 1 else time.perf_counter
    start = clock()
    for _ in range(steps):
        step()
    seconds = (clock() - start) / steps
    print(json.dumps({"seconds": seconds, "activation_bytes": rss_bytes("VmHWM") - before}))


if __name__ == "__main__":
    main(*[int(a) for a in sys.argv[1:9]])
