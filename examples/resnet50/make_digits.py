"""Writes scikit-learn's handwritten digits (1,797 real 8x8 scans, UCI) as an ImageFolder of
JPEGs: OUT/train/<digit>/*.jpg and OUT/val/<digit>/*.jpg, upscaled to SIDE pixels so the ResNet
example's crops and DCT-scaled decoding have something to work on. One image in six (stratified,
fixed) goes to validation.

  python make_digits.py OUT [SIDE]
"""
import os
import sys

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits


def main(out, side):
    digits = load_digits()
    for i, (pixels, label) in enumerate(zip(digits.images, digits.target)):
        split = "val" if i % 6 == 5 else "train"
        folder = os.path.join(out, split, str(label))
        os.makedirs(folder, exist_ok=True)
        grey = Image.fromarray((pixels * (255.0 / 16.0)).astype(np.uint8))
        image = grey.resize((side, side), Image.BICUBIC).convert("RGB")
        image.save(os.path.join(folder, f"{i:04d}.jpg"), quality=95)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 64)
