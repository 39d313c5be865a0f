#!/usr/bin/env python3
"""scikit-learn's handwritten digits (1,797 real 8x8 scans) as the minimal example's NPY arrays:
train_x.npy (float32, pixels / 16), train_y.npy (int64), validation_x.npy, validation_y.npy; the
validation set is every fifth scan.

    make_digits.py OUT_DIR        then: frugal_minimal --model.data_dir=OUT_DIR
"""
import os
import sys

import numpy as np
from sklearn.datasets import load_digits

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
digits = load_digits()
x = (digits.data / 16.0).astype(np.float32)
y = digits.target.astype(np.int64)
validation = np.arange(len(y)) % 5 == 0
for name, mask in (("train", ~validation), ("validation", validation)):
    np.save(os.path.join(out, f"{name}_x.npy"), x[mask])
    np.save(os.path.join(out, f"{name}_y.npy"), y[mask])
print(f"make_digits: {int((~validation).sum())} training and {int(validation.sum())} validation digits in {out}")
