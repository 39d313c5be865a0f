"""Reference for the BERT parity tests: Hugging Face transformers' BertForQuestionAnswering.

  make DIR  saves a small randomly initialised model with save_pretrained into DIR/qa (with the QA
            head) and its encoder alone into DIR/encoder (BertModel: names without "bert."), and
            DIR/reference.safetensors: inputs (with padding), eval-mode start/end logits in fp32,
            and in float64 train mode (dropout 0) the loss and the gradients of named parameters;
            then the same with the logits at padding set to -inf (what Frugal's unpadded model
            computes: padding takes no probability), as "masked_loss" and "masked_grad.<name>".
"""
import json
import sys

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForQuestionAnswering

GRADS = ["bert.embeddings.word_embeddings.weight", "bert.embeddings.LayerNorm.weight",
         "bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.0.attention.output.LayerNorm.bias",
         "bert.encoder.layer.1.intermediate.dense.weight", "bert.encoder.layer.1.output.dense.bias", "qa_outputs.weight"]


def make(out):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                        max_position_embeddings=64, type_vocab_size=2, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    model = BertForQuestionAnswering(config)
    with torch.no_grad():  # LayerNorms away from 1/0, so a misnamed one cannot pass
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    model.save_pretrained(f"{out}/qa")
    model.bert.save_pretrained(f"{out}/encoder")
    ids = torch.randint(1, 99, (2, 16))
    token_types = torch.zeros(2, 16, dtype=torch.long)
    token_types[:, 6:] = 1
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 11:] = 0
    ids[1, 11:] = 0
    starts, ends = torch.tensor([7, 8]), torch.tensor([9, 10])
    ref = {"input_ids": ids, "token_type_ids": token_types, "attention_mask": mask, "start_positions": starts,
           "end_positions": ends}
    model.eval()
    with torch.no_grad():
        out_eval = model(input_ids=ids, token_type_ids=token_types, attention_mask=mask)
    ref["start_logits"], ref["end_logits"] = out_eval.start_logits, out_eval.end_logits
    model.double().train()
    result = model(input_ids=ids, token_type_ids=token_types, attention_mask=mask, start_positions=starts,
                   end_positions=ends)
    result.loss.backward()
    ref["loss"] = result.loss.detach().reshape(1)
    for name, p in model.named_parameters():
        if name in GRADS:
            ref["grad." + name] = p.grad
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids, token_type_ids=token_types, attention_mask=mask)
    padding = mask == 0
    cross_entropy = torch.nn.functional.cross_entropy
    masked_loss = (cross_entropy(logits.start_logits.masked_fill(padding, float("-inf")), starts) +
                   cross_entropy(logits.end_logits.masked_fill(padding, float("-inf")), ends)) / 2
    masked_loss.backward()
    ref["masked_loss"] = masked_loss.detach().reshape(1)
    for name, p in model.named_parameters():
        if name in GRADS:
            ref["masked_grad." + name] = p.grad
    save_file(ref, f"{out}/reference.safetensors")
    print(json.dumps({"grads": GRADS}))


if __name__ == "__main__":
    make(sys.argv[2])
