"""Reference for the crop/resize tests: Pillow's crop + BILINEAR resize (antialiased when
shrinking), which torchvision's Resize on PIL images uses, and torchvision's ImageFolder order.

  resize DIR        reads DIR/input.safetensors ("image": uint8 [H, W, 3], "boxes": int64 [K, 6]
                    rows of x, y, w, h, out_w, out_h) and writes DIR/pillow.safetensors
                    ("out<k>": uint8 [out_h, out_w, 3])
  eval DIR N        torchvision's Resize(256) + CenterCrop(224) on DIR/image<k>.jpg opened with
                    Pillow, k < N; writes DIR/torchvision.safetensors ("out<k>": uint8 [3, 224, 224])
  jpeg_crops DIR    torchvision's resized_crop (Pillow's crop + BILINEAR resize) on DIR/image<k>.jpg
                    opened with Pillow, for the boxes of DIR/boxes.safetensors ("boxes": int64 [K, 6]
                    rows of k, x, y, w, h, out); writes DIR/torchvision.safetensors ("out<i>": uint8
                    [out, out, 3])
  imagefolder ROOT  prints torchvision.datasets.ImageFolder(ROOT)'s classes and samples
"""
import json
import sys

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file


def resize(out):
    data = load_file(f"{out}/input.safetensors")
    image = Image.fromarray(data["image"].numpy())
    result = {}
    for k, (x, y, w, h, ow, oh) in enumerate(data["boxes"].tolist()):
        crop = image.crop((x, y, x + w, y + h)).resize((ow, oh), Image.BILINEAR)
        result[f"out{k}"] = torch.from_numpy(np.asarray(crop).copy())
    save_file(result, f"{out}/pillow.safetensors")
    print(json.dumps({"boxes": len(result)}))


def eval_transform(out, count):
    from torchvision import transforms
    transform = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.PILToTensor()])
    result = {}
    for k in range(int(count)):
        with Image.open(f"{out}/image{k}.jpg") as image:
            result[f"out{k}"] = transform(image.convert("RGB")).contiguous()
    save_file(result, f"{out}/torchvision.safetensors")
    print(json.dumps({"images": len(result)}))


def jpeg_crops(out):
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F
    boxes = load_file(f"{out}/boxes.safetensors")["boxes"].tolist()
    result = {}
    for i, (k, x, y, w, h, size) in enumerate(boxes):
        with Image.open(f"{out}/image{k}.jpg") as image:
            crop = F.resized_crop(image.convert("RGB"), y, x, h, w, [size, size], InterpolationMode.BILINEAR)
        result[f"out{i}"] = torch.from_numpy(np.asarray(crop).copy())
    save_file(result, f"{out}/torchvision.safetensors")
    print(json.dumps({"crops": len(result)}))


def imagefolder(root):
    import torchvision
    folder = torchvision.datasets.ImageFolder(root)
    print(json.dumps({"classes": folder.classes, "samples": [[p, c] for p, c in folder.samples]}))


if __name__ == "__main__":
    {"resize": resize, "eval": eval_transform, "jpeg_crops": jpeg_crops, "imagefolder": imagefolder}[sys.argv[1]](*sys.argv[2:])
