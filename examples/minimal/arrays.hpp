#pragma once
// The minimal example on data of your own: a folder of four NPY arrays, train_x.npy (float32
// [N, F]), train_y.npy (int64 [N], classes 0..K-1), validation_x.npy and validation_y.npy.
// examples/minimal/make_digits.py writes scikit-learn's handwritten digits so (real scans, 64
// features, 10 classes): the data frugal-search's benchmark searches over.

#include <filesystem>
#include <memory>

#include "frugal/data/dataset.hpp"

namespace minimal {

struct Arrays {
  std::shared_ptr<frugal::TensorDataset> train, validation;
  int64_t features = 0, classes = 0;
};

/// DataError naming the file for a missing or malformed array or mismatched shapes.
Arrays load_arrays(const std::filesystem::path& dir);

}  // namespace minimal
