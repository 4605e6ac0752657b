// Row-major Eigen views of core tensors: the reference computes on these.
#pragma once

#include <Eigen/Dense>

#include "core/tensor.hpp"

namespace dsa {

// Row-major Eigen views: a [rows, cols] matrix over contiguous memory.
template <class T>
using MatMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <class T>
using ConstMatMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace dsa
