"""Reference for the ResNet parity tests: torchvision's model on the same weights and inputs.

  make  DIR VARIANT  writes DIR/model.safetensors (random weights, random BatchNorm statistics so
                     a misnamed norm cannot go unnoticed) and DIR/reference.safetensors: the input,
                     the eval-mode logits (fp32), and the train-mode loss (label smoothing 0.1),
                     gradients and updated running statistics computed in float64: a randomly
                     initialised deep net in train mode is ill-conditioned enough that fp32 gradients
                     differ from exact ones by up to 20% for some inputs, so fp32 gradients could only
                     be compared loosely, while float64 ones must agree to ~1e-10.
  check DIR VARIANT  loads DIR/frugal.safetensors (written by Frugal) into torchvision (strict) and
                     prints the largest relative difference from DIR/frugal_logits.safetensors.
"""
import json
import sys

import torch
import torchvision
from safetensors.torch import load_file, save_file

GRADS = ["conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
         "layer3.1.bn2.bias", "layer4.1.conv2.weight", "fc.weight", "fc.bias"]


def build(variant):
    return getattr(torchvision.models, variant)(weights=None, num_classes=10)


def make(out, variant):
    torch.manual_seed(0)
    model = build(variant)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.num_batches_tracked.fill_(7)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, f"{out}/model.safetensors")
    x = torch.randn(2, 3, 64, 64)
    target = torch.tensor([3, 7])
    ref = {"input": x, "target": target}
    model.eval()
    with torch.no_grad():
        ref["eval_logits"] = model(x)
    model.double().train()
    loss = torch.nn.functional.cross_entropy(model(x.double()), target, label_smoothing=0.1)
    loss.backward()
    ref["train_loss"] = loss.detach().reshape(1)
    for name, p in model.named_parameters():
        if name in GRADS:
            ref["grad." + name] = p.grad
    ref["running_mean.bn1"] = model.bn1.running_mean.clone()
    ref["running_var.layer4.1.bn2"] = model.layer4[1].bn2.running_var.clone()
    save_file(ref, f"{out}/reference.safetensors")
    print(json.dumps({"grads": GRADS}))


def check(out, variant):
    model = build(variant)
    model.load_state_dict(load_file(f"{out}/frugal.safetensors"), strict=True)
    model.eval()
    saved = load_file(f"{out}/frugal_logits.safetensors")
    with torch.no_grad():
        logits = model(saved["input"])
    diff = ((logits - saved["logits"]).abs().max() / saved["logits"].abs().max()).item()
    print(json.dumps({"max_relative_difference": diff}))


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2], sys.argv[3])
