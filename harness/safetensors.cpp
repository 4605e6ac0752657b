#include "harness/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/bf16.hpp"
#include "harness/philox.hpp"
#include "core/result.hpp"
#include "harness/strict_json.hpp"
#include "harness/text.hpp"

namespace dsa::st {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; this host is not");

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& what, const std::string& why) {
  throw std::runtime_error(what + ": malformed safetensors: " + why);
}

bool parse_dtype(const std::string& s, DType& d) {
  for (DType x : {DType::BF16, DType::F32, DType::F64, DType::I32, DType::F16, DType::I64})
    if (s == name(x)) {
      d = x;
      return true;
    }
  return false;
}

// IEEE binary16 to double, exactly (subnormals, ±inf and NaN included).
double f16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(double(man), -24);
  else if (exp == 31)
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(double(man | 0x400), exp - 25);
  return sign ? -v : v;
}

uint16_t bf16_bits(double v) {  // v is rounded to bf16 first, so the float's low half is zero
  const float f = float(round_bf16(v));
  return uint16_t(std::bit_cast<uint32_t>(f) >> 16);
}

}  // namespace

const char* name(DType d) {
  switch (d) {
    case DType::BF16: return "BF16";
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::F16: return "F16";
    case DType::I64: return "I64";
  }
  return "?";
}

int64_t dtype_size(DType d) {
  return d == DType::BF16 || d == DType::F16 ? 2 : d == DType::F64 || d == DType::I64 ? 8 : 4;
}

File parse(const std::vector<uint8_t>& b, const std::string& what) {
  if (b.size() < 8) fail(what, "shorter than the 8-byte header length");
  uint64_t hlen = 0;
  std::memcpy(&hlen, b.data(), 8);
  if (hlen > b.size() - 8) fail(what, "header length " + std::to_string(hlen) + " exceeds the file size");
  json h;
  try {
    h = parse_strict_json(std::string(b.begin() + 8, b.begin() + 8 + int64_t(hlen)));
  } catch (const JsonRefused& e) {
    const bool syntax = e.rule.rfind("not valid JSON", 0) == 0;
    fail(what, syntax ? "header is " + e.rule
                      : "header: " + (e.field.empty() ? std::string() : "tensor " + e.field + ": ") + e.rule);
  }
  if (!h.is_object()) fail(what, "header is not a JSON object");
  const uint64_t data_size = b.size() - 8 - hlen;
  const uint8_t* data = b.data() + 8 + hlen;
  File f;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& n = it.key();
    const json& v = it.value();
    if (n == "__metadata__") {
      if (!v.is_object()) fail(what, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(what, "__metadata__." + text::one_line(m.key(), 80) + " is not a string");
        f.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor " + text::quoted(n);
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(what, t + " needs dtype, shape and data_offsets");
    Entry e;
    if (!v["dtype"].is_string() || !parse_dtype(v["dtype"].get<std::string>(), e.dtype))
      fail(what, t + " has dtype " + text::one_line(v["dtype"].dump(), 80) + "; supported: BF16, F16, F32, F64, I32, I64");
    if (!v["shape"].is_array()) fail(what, t + " shape is not an array");
    uint64_t count = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        fail(what, t + " shape holds " + text::one_line(d.dump(), 80) + ", not a non-negative integer");
      const uint64_t x = d.get<uint64_t>();
      if (x != 0 && count > (uint64_t(1) << 40) / x) fail(what, t + " shape is too large");
      count *= x;
      e.shape.push_back(int64_t(x));
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(what, t + " data_offsets must be two non-negative integers");
    const uint64_t b0 = off[0].get<uint64_t>(), b1 = off[1].get<uint64_t>();
    if (b0 > b1 || b1 > data_size)
      fail(what, t + " data_offsets [" + std::to_string(b0) + ", " + std::to_string(b1) + ") fall outside the " +
                     std::to_string(data_size) + "-byte data");
    if (b1 - b0 != count * uint64_t(dtype_size(e.dtype)))
      fail(what, t + " holds " + std::to_string(b1 - b0) + " bytes, its dtype and shape need " +
                     std::to_string(count * dtype_size(e.dtype)));
    ranges.push_back({b0, b1});
    e.bytes.assign(data + b0, data + b1);
    f.tensors.emplace(n, std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail(what, "two tensors' data_offsets overlap");
  // As the safetensors reference requires: the data is entirely indexed, nothing after the last tensor.
  const uint64_t end = ranges.empty() ? 0 : ranges.back().second;
  if (end != data_size)
    fail(what, std::to_string(data_size - end) + " bytes follow the last tensor's data (trailing bytes)");
  return f;
}

File read_file(const std::string& path) {
  SafeRead opt;
  opt.max_bytes = uint64_t{64} << 30;
  return read_file(path, opt);
}

File read_file(const std::string& path, const SafeRead& opt) {
  std::string text;
  try {
    text = read_file_safely(path, opt);
  } catch (const FileRefused& e) {
    throw std::runtime_error(e.what());
  }
  const std::vector<uint8_t> b(text.begin(), text.end());
  return parse(b, text::one_line(path, 200));
}

std::vector<uint8_t> serialize(const File& f) {
  json h = json::object();
  uint64_t off = 0;
  for (auto& [n, e] : f.tensors) {
    if (uint64_t(numel(e.shape) * dtype_size(e.dtype)) != e.bytes.size())
      throw std::logic_error("safetensors: tensor '" + n + "' bytes do not match its shape");
    h[n] = {{"dtype", name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
  }
  if (!f.metadata.empty()) h["__metadata__"] = f.metadata;
  std::string hs = h.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');  // align the data to 8 bytes
  std::vector<uint8_t> out;
  out.reserve(8 + hs.size() + off);
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(uint64_t(hs.size()) >> (8 * i)));  // little-endian length
  out.insert(out.end(), hs.begin(), hs.end());
  for (auto& [n, e] : f.tensors) out.insert(out.end(), e.bytes.begin(), e.bytes.end());
  return out;
}

void write_file(const std::string& path, const File& f) {
  const std::vector<uint8_t> b = serialize(f);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  if (!out.good()) throw std::runtime_error(path + ": cannot write");
}

Entry from_doubles(const TensorD& t, DType dtype) {
  Entry e;
  e.dtype = dtype;
  e.shape = t.shape;
  e.bytes.resize(size_t(t.size() * dtype_size(dtype)));
  uint8_t* p = e.bytes.data();
  for (int64_t i = 0; i < t.size(); ++i) {
    const double v = t.data[i];
    switch (dtype) {
      case DType::BF16: {
        const uint16_t x = bf16_bits(v);
        std::memcpy(p + 2 * i, &x, 2);
        break;
      }
      case DType::F32: {
        const float x = float(v);
        std::memcpy(p + 4 * i, &x, 4);
        break;
      }
      case DType::F64: std::memcpy(p + 8 * i, &v, 8); break;
      case DType::I32:
      case DType::I64:
      case DType::F16: throw std::logic_error(std::string("safetensors: from_doubles cannot write ") + name(dtype));
    }
  }
  return e;
}

Entry from_ints(const TensorI& t) {
  Entry e;
  e.dtype = DType::I32;
  e.shape = t.shape;
  e.bytes.resize(size_t(t.size()) * 4);
  std::memcpy(e.bytes.data(), t.data.data(), e.bytes.size());
  return e;
}

TensorD to_doubles(const Entry& e, const std::string& what) {
  if (e.dtype == DType::I32 || e.dtype == DType::I64)
    throw std::runtime_error(what + ": expected a float dtype (F32, BF16, F16, F64), got " + name(e.dtype));
  TensorD t(e.shape);
  const uint8_t* p = e.bytes.data();
  for (int64_t i = 0; i < t.size(); ++i) {
    // All-one bytes are the exec protocol's poison: an output element its command never wrote.
    if (e.dtype == DType::BF16) {
      uint16_t x;
      std::memcpy(&x, p + 2 * i, 2);
      t.data[i] = is_poison_bits(x) ? unwritten_value() : double(std::bit_cast<float>(uint32_t(x) << 16));
    } else if (e.dtype == DType::F16) {
      uint16_t x;
      std::memcpy(&x, p + 2 * i, 2);
      t.data[i] = is_poison_bits(x) ? unwritten_value() : f16_value(x);
    } else if (e.dtype == DType::F32) {
      uint32_t x;
      std::memcpy(&x, p + 4 * i, 4);
      t.data[i] = is_poison_bits(x) ? unwritten_value() : double(std::bit_cast<float>(x));
    } else {
      uint64_t x;
      std::memcpy(&x, p + 8 * i, 8);
      t.data[i] = is_poison_bits(x) ? unwritten_value() : std::bit_cast<double>(x);
    }
  }
  return t;
}

TensorI to_ints(const Entry& e, const std::string& what) {
  if (e.dtype != DType::I32 && e.dtype != DType::I64)
    throw std::runtime_error(what + ": expected dtype I32 or I64, got " + name(e.dtype));
  TensorI t(e.shape);
  if (e.dtype == DType::I32) {
    std::memcpy(t.data.data(), e.bytes.data(), e.bytes.size());
    return t;
  }
  for (int64_t i = 0; i < t.size(); ++i) {
    int64_t x;
    std::memcpy(&x, e.bytes.data() + 8 * i, 8);
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
      throw std::runtime_error(what + ": I64 value " + std::to_string(x) + " at element " + std::to_string(i) +
                               " does not fit in I32");
    t.data[i] = int32_t(x);
  }
  return t;
}

}  // namespace dsa::st
