// A dense row-major tensor with an explicit shape. Values of every stage are stored here, in
// double (bf16 and fp32 values are exactly representable in double). Standard library only.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/tensor_memory.hpp"

namespace dsa {

using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s);

// A tensor's values: a std::vector whose large blocks ask for huge pages (core/tensor_memory.hpp).
template <class T>
using TensorData = std::vector<T, TensorAllocator<T>>;

// Tensor(shape, Uninitialized{}): values left unset, for a tensor every element of which is
// written next (generated inputs, a converted download).
struct Uninitialized {};

template <class T>
struct Tensor {
  Shape shape;
  TensorData<T> data;

  Tensor() = default;
  explicit Tensor(Shape s, T fill = T{}) : shape(std::move(s)), data(numel(shape), fill) {}
  Tensor(Shape s, Uninitialized) : shape(std::move(s)) { data.resize(numel(shape)); }

  int64_t size() const { return static_cast<int64_t>(data.size()); }
  bool empty() const { return data.empty() && shape.empty(); }
  int64_t dim(int i) const { return shape.at(i); }
  // Elements per leading index: the stride of dimension 0.
  int64_t row_size() const { return shape.empty() || shape[0] == 0 ? 0 : size() / shape[0]; }

  T* row(int64_t r) { return data.data() + r * row_size(); }
  const T* row(int64_t r) const { return data.data() + r * row_size(); }

  template <class... I>
  T& at(I... idx) { return data[offset({static_cast<int64_t>(idx)...})]; }
  template <class... I>
  const T& at(I... idx) const { return data[offset({static_cast<int64_t>(idx)...})]; }

  int64_t offset(std::initializer_list<int64_t> idx) const {
    int64_t o = 0;
    size_t k = 0;
    for (int64_t i : idx) o = o * shape[k++] + i;
    return o;
  }
};

using TensorD = Tensor<double>;
using TensorI = Tensor<int32_t>;

}  // namespace dsa
