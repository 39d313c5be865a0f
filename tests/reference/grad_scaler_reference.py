"""Reference for tests/precision/grad_scaler_parity_test.cpp: torch.amp.GradScaler on a small fp32
model on the CPU, with scripted inf/nan gradients, optionally with clip_grad_norm_ after unscale_.
Prints the scale after each step, which steps were skipped, and the final parameters as JSON.

    python grad_scaler_reference.py [clip]
"""
import json
import math
import sys

import torch

clip = len(sys.argv) > 1 and sys.argv[1] == "clip"
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
# Same numbers as the C++ side: seed after construction, then draw weights, inputs, targets.
torch.manual_seed(0)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.randn(p.shape) * 0.5)
x = torch.randn(12, 16, 4)
y = torch.randn(12, 16, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
inject = {2: math.inf, 5: math.nan, 6: -math.inf}

scales, skipped = [], []
for i in range(12):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x[i]), y[i])
    scaler.scale(loss).backward()
    if i in inject:
        model[0].weight.grad[0, 0] = inject[i]
    if clip:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
    before = scaler.get_scale()
    scaler.step(opt)
    scaler.update()
    scales.append(scaler.get_scale())
    skipped.append(scaler.get_scale() < before)

params = torch.cat([p.detach().flatten() for p in model.parameters()])
print(json.dumps({"scales": scales, "skipped": skipped, "params": params.tolist()}))
