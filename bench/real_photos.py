#!/usr/bin/env python3
"""Real photographs as JPEGs, for the restart-marker measurements (bench/resnet.cpp restart-interval):
the JPEGs that ship in the venv's packages as their makers encoded them (scikit-learn's china and
flower, matplotlib's Grace Hopper, scikit-image's rocket, retina and Hubble deep field), and
scikit-image's lossless photographs (astronaut, coffee, chelsea, motorcycle, immunohistochemistry)
encoded as cameras and datasets do: Pillow at quality 75, 90 and 95, 4:2:0, and 4:4:4 at 95.

    real_photos.py OUT_DIR
"""
import io
import os
import sys

from PIL import Image


def package_file(module, *parts):
    mod = __import__(module)
    return os.path.join(os.path.dirname(mod.__file__), *parts)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    as_encoded = {
        "china": package_file("sklearn", "datasets", "images", "china.jpg"),
        "flower": package_file("sklearn", "datasets", "images", "flower.jpg"),
        "grace_hopper": package_file("matplotlib", "mpl-data", "sample_data", "grace_hopper.jpg"),
    }
    lossless = {}
    try:
        for name in ("rocket.jpg", "retina.jpg", "hubble_deep_field.jpg"):
            as_encoded[name[:-4]] = package_file("skimage", "data", name)
        for name in ("astronaut", "coffee", "chelsea", "motorcycle_left", "ihc"):
            lossless[name] = package_file("skimage", "data", name + ".png")
    except ImportError:
        print("real_photos: scikit-image is not installed: only the three other JPEGs", file=sys.stderr)
    count = 0
    for name, path in as_encoded.items():
        with open(path, "rb") as src, open(os.path.join(out, f"{name}.jpg"), "wb") as dst:
            dst.write(src.read())
        count += 1
    for name, path in lossless.items():
        image = Image.open(path).convert("RGB")
        for quality, subsampling in ((75, 2), (90, 2), (95, 2), (95, 0)):
            buffer = io.BytesIO()
            image.save(buffer, "JPEG", quality=quality, subsampling=subsampling)
            tag = "444" if subsampling == 0 else "420"
            with open(os.path.join(out, f"{name}_q{quality}_{tag}.jpg"), "wb") as dst:
                dst.write(buffer.getvalue())
            count += 1
    print(f"real_photos: {count} JPEGs in {out}")


if __name__ == "__main__":
    main()
