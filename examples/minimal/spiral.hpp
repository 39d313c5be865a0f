#pragma once
// The minimal example's data: points on K interleaved spirals (a classic problem a linear model
// cannot solve), generated from a seed, so the example needs no download.

#include <memory>

#include "frugal/data/dataset.hpp"

namespace minimal {

/// `n` points in 2-D on `classes` spirals with Gaussian noise, labelled by spiral.
std::shared_ptr<frugal::TensorDataset> make_spirals(int64_t n, int64_t classes, double noise, uint64_t seed);

}  // namespace minimal
