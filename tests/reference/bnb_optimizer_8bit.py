"""Reference for tests/optim/quantized_state_test.cpp: bitsandbytes' 8-bit blockwise optimizers
(AdamW8bit, Adam8bit, SGD8bit; its CPU backend) on fixed parameters and gradients. Writes the
inputs and, after step 1 and step 10, every parameter, its 8-bit codes and block maxima (or its
fp32 state below min_8bit_size) to a safetensors file, and the dynamic maps.

Twice: "bnb/..." as bitsandbytes computes it, and "exact/..." with its CPU quantizer replaced by
the published one, the nearest value of the map (ties to the lower code). bitsandbytes' CPU
quantizer looks codes up with an approximate search (BinSearch's Direct2) that picks a neighbour
of the nearest code for about 1% of values, and several codes off among the smallest values of
the unsigned map; everything else (state layout, dequantization, update arithmetic, min_8bit_size)
is bitsandbytes' own code in both.

    python bnb_optimizer_8bit.py OUT.safetensors
"""
import json
import sys

import torch
from safetensors.torch import save_file

import bitsandbytes as bnb
import bitsandbytes.functional as F

torch.set_num_threads(1)
out = {"map_signed": F.create_dynamic_map(signed=True), "map_unsigned": F.create_dynamic_map(signed=False)}
# A tensor of whole blocks, one whose last block is partial, and one below min_8bit_size (fp32 states);
# gradients with a few large values, so that blocks differ in scale.
sizes = {"whole": 8192, "partial": 5000, "small": 3000}
steps = 10
gen = torch.Generator().manual_seed(7)
for name, n in sizes.items():
    out[f"{name}/param"] = torch.randn(n, generator=gen)
    grads = torch.randn(steps, n, generator=gen) * torch.exp(torch.randn(steps, n, generator=gen))
    out[f"{name}/grads"] = grads

def nearest_code_quantizer(A, code, absmax_out, out_uint8, blocksize):
    flat = A.reshape(-1).float()
    n = flat.numel()
    blocks = -(n // -blocksize)
    padded = torch.zeros(blocks * blocksize)
    padded[:n] = flat
    absmax = padded.view(blocks, blocksize).abs().amax(1)
    scale = absmax.repeat_interleave(blocksize)[:n]
    normed = torch.where(scale > 0, flat / scale, torch.zeros_like(flat))
    below = (torch.searchsorted(code, normed, right=True) - 1).clamp(0, 255)
    above = (below + 1).clamp(max=255)
    nearer = (normed - code[above]).abs() < (normed - code[below]).abs()
    out_uint8.copy_(torch.where(nearer, above, below).to(torch.uint8).view(out_uint8.shape))
    absmax_out.copy_(absmax)


import bitsandbytes.backends.cpu.ops as cpu_ops

bnb_quantizer = cpu_ops._quant_blockwise_fp32_direct
optimizers = {
    "adamw": lambda ps: bnb.optim.AdamW8bit(ps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
    "adam": lambda ps: bnb.optim.Adam8bit(ps, lr=2e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0),
    "sgd": lambda ps: bnb.optim.SGD8bit(ps, lr=1e-2, momentum=0.9, weight_decay=1e-3),
}
for flavour, quantizer in (("bnb", bnb_quantizer), ("exact", nearest_code_quantizer)):
  cpu_ops._quant_blockwise_fp32_direct = quantizer
  for opt_name, make in optimizers.items():
    params = {name: torch.nn.Parameter(out[f"{name}/param"].clone()) for name in sizes}
    opt = make(list(params.values()))
    for step in range(steps):
        for name, p in params.items():
            p.grad = out[f"{name}/grads"][step].clone()
        opt.step()
        if step + 1 in (1, steps):
            for name, p in params.items():
                key = f"{flavour}/{opt_name}/{step + 1}/{name}"
                out[f"{key}/param"] = p.detach().clone()
                state = opt.state[p]
                for k in ("state1", "state2", "absmax1", "absmax2"):
                    if k in state and isinstance(state[k], torch.Tensor):
                        out[f"{key}/{k}"] = state[k].clone()
save_file({k: v.contiguous() for k, v in out.items()}, sys.argv[1])
print(json.dumps({"bitsandbytes": bnb.__version__, "file": sys.argv[1]}))
