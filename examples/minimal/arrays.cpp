#include "arrays.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <fstream>

#include "frugal/data/npy.hpp"
#include "frugal/errors.hpp"

namespace minimal {
namespace {

torch::Tensor read_array(const std::filesystem::path& file, torch::ScalarType dtype, int64_t dims) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw frugal::DataError(file.string(), -1, "cannot be read (model.data_dir needs train_x.npy, train_y.npy, validation_x.npy, validation_y.npy)");
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const torch::Tensor t = frugal::decode_npy(bytes, file.string());
  if (t.scalar_type() != dtype || t.dim() != dims || t.size(0) < 1) {
    throw frugal::DataError(file.string(), -1, c10::str("holds ", t.scalar_type(), " ", t.sizes(), "; expected ", dtype, " with ", dims,
                                                        " dimension(s) and at least one row"));
  }
  return t;
}

}  // namespace

Arrays load_arrays(const std::filesystem::path& dir) {
  Arrays out;
  std::shared_ptr<frugal::TensorDataset>* sets[] = {&out.train, &out.validation};
  int split = 0;
  for (const char* name : {"train", "validation"}) {
    const auto x_file = dir / c10::str(name, "_x.npy"), y_file = dir / c10::str(name, "_y.npy");
    const torch::Tensor x = read_array(x_file, torch::kFloat32, 2), y = read_array(y_file, torch::kLong, 1);
    if (x.size(0) != y.size(0)) {
      throw frugal::DataError(y_file.string(), -1, c10::str(y.size(0), " labels for the ", x.size(0), " rows of ", x_file.string()));
    }
    if (y.min().item<int64_t>() < 0) throw frugal::DataError(y_file.string(), -1, "holds a negative class");
    if (out.features == 0) out.features = x.size(1);
    if (x.size(1) != out.features) throw frugal::DataError(x_file.string(), -1, c10::str(x.size(1), " features, the training set has ", out.features));
    out.classes = std::max(out.classes, y.max().item<int64_t>() + 1);
    *sets[split++] = std::make_shared<frugal::TensorDataset>(x, y);
  }
  return out;
}

}  // namespace minimal
