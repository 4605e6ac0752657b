// Safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the
// raw little-endian tensor bytes. The exec:CMD protocol and `dsa-parity export` use it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "harness/safe_file.hpp"

namespace dsa::st {

// F16 and I64 are read (outputs of a backend: F16 converted like BF16, I64 top-k like I32); the
// harness itself writes BF16, F32, F64 and I32.
enum class DType { BF16, F32, F64, I32, F16, I64 };
const char* name(DType d);
int64_t dtype_size(DType d);

struct Entry {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<uint8_t> bytes;  // little-endian, numel(shape) · dtype_size(dtype)
};

struct File {
  std::map<std::string, Entry> tensors;
  std::map<std::string, std::string> metadata;
};

// Throws std::runtime_error naming the file and what is malformed (truncated, bad header JSON,
// unknown dtype, offsets out of range or overlapping, size not matching the shape).
// The header must be strict JSON: a tensor named twice (or any duplicate key) and nesting deeper
// than 64 levels are refused. read_file opens only a regular file (harness/safe_file.hpp), of at
// most opt.max_bytes (the default: 64 GiB), within opt.deadline.
File read_file(const std::string& path);
File read_file(const std::string& path, const SafeRead& opt);
File parse(const std::vector<uint8_t>& bytes, const std::string& what = "safetensors");
void write_file(const std::string& path, const File& f);
std::vector<uint8_t> serialize(const File& f);

// Conversions. BF16 and F32 round to nearest even (values already of that precision are exact).
Entry from_doubles(const TensorD& t, DType dtype);
Entry from_ints(const TensorI& t);
// Any float dtype (BF16, F16, F32, F64) to double (exact); throws std::runtime_error for I32/I64.
TensorD to_doubles(const Entry& e, const std::string& what);
// I32, or I64 whose every value fits in int32; throws std::runtime_error otherwise.
TensorI to_ints(const Entry& e, const std::string& what);

}  // namespace dsa::st
