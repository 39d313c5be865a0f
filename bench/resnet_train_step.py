"""The Python side of the ResNet training-step benchmark: torchvision's model trained eagerly
with the same variant, width, image side, batch, optimizer and thread count as Frugal's run.

  python resnet_train_step.py VARIANT BASE_CHANNELS SIDE BATCH STEPS THREADS  -> {"seconds": ...}
times STEPS steps after one untimed warm-up step.
"""
import json
import sys
import time

import torch
import torchvision


def main(variant, base, side, batch, steps, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if base != 64:
        raise SystemExit("torchvision's models have 64 base channels; use 64 for this comparison")
    model = getattr(torchvision.models, variant)(weights=None, num_classes=1000)
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.1, momentum=0.875, weight_decay=3.0517578125e-05)
    x = torch.randn(batch, 3, side, side)
    y = torch.randint(0, 1000, (batch,))
    model.train()
    start = time.perf_counter()
    for step in range(steps + 1):  # the first step is a warm-up, not timed (as on Frugal's side)
        if step == 1:
            loss.item()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        opt.step()
    loss.item()
    print(json.dumps({"seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]))
