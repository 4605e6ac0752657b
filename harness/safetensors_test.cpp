#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <gtest/gtest.h>

#include "harness/safetensors.hpp"
#include "core/result.hpp"

namespace dsa::st {
namespace {

std::vector<uint8_t> with_header(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b(8);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::vector<uint8_t> f32_bytes(std::initializer_list<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), std::data(v), b.size());
  return b;
}

void expect_malformed(const std::vector<uint8_t>& bytes, const std::string& phrase) {
  try {
    parse(bytes, "test.safetensors");
    ADD_FAILURE() << "accepted; expected: " << phrase;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.safetensors"), std::string::npos) << e.what();
  }
}

// A file as the Python safetensors package writes it.
TEST(Safetensors, ReadsAHandWrittenFile) {
  const auto b = with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}})",
                             f32_bytes({1.5f, -2.0f}));
  const File f = parse(b);
  ASSERT_EQ(f.tensors.size(), 1u);
  const TensorD a = to_doubles(f.tensors.at("a"), "a");
  EXPECT_EQ(a.shape, (Shape{2}));
  EXPECT_EQ(a.data, (TensorData<double>{1.5, -2.0}));
  EXPECT_EQ(f.metadata.at("k"), "v");
}

TEST(Safetensors, RoundTripsEveryDtypeExactly) {
  TensorD x({2, 3});
  x.data = {1.0, -0.0078125, 3.140625, INFINITY, -INFINITY, NAN};  // bf16 values
  TensorD y({3});
  y.data = {0.1, -1e300, 5e-324};  // only F64 holds these
  TensorI i({2, 2});
  i.data = {-1, INT32_MIN, INT32_MAX, 7};
  File f;
  f.tensors["x_bf16"] = from_doubles(x, DType::BF16);
  f.tensors["x_f32"] = from_doubles(x, DType::F32);
  f.tensors["y_f64"] = from_doubles(y, DType::F64);
  f.tensors["i"] = from_ints(i);
  f.tensors["empty"] = from_doubles(TensorD({0, 4}), DType::F32);
  f.metadata["format"] = "test";
  const auto path = (std::filesystem::temp_directory_path() / "dsa_st_roundtrip.safetensors").string();
  write_file(path, f);
  const File g = read_file(path);
  std::filesystem::remove(path);
  const auto bytes = serialize(f);
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data(), 8);
  EXPECT_EQ(hlen % 8, 0u);  // data aligned to 8 bytes
  EXPECT_EQ(g.metadata, f.metadata);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (auto& [n, e] : f.tensors) {
    EXPECT_EQ(g.tensors.at(n).bytes, e.bytes) << n;
    EXPECT_EQ(g.tensors.at(n).shape, e.shape) << n;
    EXPECT_EQ(g.tensors.at(n).dtype, e.dtype) << n;
  }
  for (const char* n : {"x_bf16", "x_f32"}) {
    const TensorD back = to_doubles(g.tensors.at(n), n);
    for (int k = 0; k < 5; ++k) EXPECT_EQ(back.data[k], x.data[k]) << n << k;
    EXPECT_TRUE(std::isnan(back.data[5])) << n;
  }
  EXPECT_EQ(to_doubles(g.tensors.at("y_f64"), "y").data, y.data);
  EXPECT_EQ(to_ints(g.tensors.at("i"), "i").data, i.data);
  EXPECT_THROW(to_ints(g.tensors.at("x_f32"), "x"), std::runtime_error);
  EXPECT_THROW(to_doubles(g.tensors.at("i"), "i"), std::runtime_error);
}

TEST(Safetensors, AllOnesBytesReadAsUnwritten) {
  // The exec protocol's poison (0xFF bytes) read back is unwritten_value(); other NaNs stay NaN.
  for (DType dt : {DType::BF16, DType::F32, DType::F64}) {
    TensorD x({3});
    x.data = {1.5, NAN, 2.0};
    Entry e = from_doubles(x, dt);
    const int64_t w = dtype_size(dt);
    std::fill(e.bytes.begin() + 2 * w, e.bytes.begin() + 3 * w, uint8_t{0xFF});
    const TensorD back = to_doubles(e, "x");
    EXPECT_EQ(back.data[0], 1.5) << name(dt);
    EXPECT_TRUE(std::isnan(back.data[1]) && !is_unwritten(back.data[1])) << name(dt);
    EXPECT_TRUE(is_unwritten(back.data[2])) << name(dt);
  }
}

TEST(Safetensors, Bf16RoundsToNearestEven) {
  TensorD x({2});
  x.data = {1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8};
  const TensorD back = to_doubles(from_doubles(x, DType::BF16), "x");
  EXPECT_EQ(back.data, (TensorData<double>{1.0, 1.0 + 0x1p-6}));
}

// F16 floats convert exactly (normal, subnormal, inf); I64 indices convert when they fit in I32.
TEST(Safetensors, ReadsF16AndI64) {
  const std::vector<uint8_t> h16 = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0x00, 0x7c};  // 1, -2, 2^-24, inf
  const File f = parse(with_header(R"({"x":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", h16));
  const TensorD x = to_doubles(f.tensors.at("x"), "x");
  EXPECT_EQ(x.data[0], 1.0);
  EXPECT_EQ(x.data[1], -2.0);
  EXPECT_EQ(x.data[2], std::ldexp(1.0, -24));
  EXPECT_TRUE(std::isinf(x.data[3]));
  std::vector<uint8_t> i64(16, 0);
  const int64_t v[2] = {-1, 7};
  std::memcpy(i64.data(), v, 16);
  const File g = parse(with_header(R"({"k":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", i64));
  const TensorI k = to_ints(g.tensors.at("k"), "k");
  EXPECT_EQ(k.data[0], -1);
  EXPECT_EQ(k.data[1], 7);
  const int64_t big = int64_t(1) << 40;
  std::memcpy(i64.data(), &big, 8);
  const File b = parse(with_header(R"({"k":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", i64));
  EXPECT_THROW(to_ints(b.tensors.at("k"), "k"), std::runtime_error);
}

TEST(Safetensors, RefusesMalformedFiles) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_malformed({1, 2, 3}, "shorter than the 8-byte header length");
  auto b = with_header(ok, f32_bytes({1, 2}));
  b[0] = 0xff;
  expect_malformed(b, "exceeds the file size");
  expect_malformed(with_header("{\"a\":", {}), "header is not valid JSON");
  expect_malformed(with_header("[1,2]", {}), "header is not a JSON object");
  expect_malformed(with_header(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,4]}})", f32_bytes({1})),
                   "supported: BF16, F16, F32, F64, I32, I64");
  expect_malformed(with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32_bytes({1, 2})),
                   "holds 8 bytes, its dtype and shape need 12");
  expect_malformed(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", f32_bytes({1, 2})),
                   "fall outside");
  expect_malformed(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                               f32_bytes({1, 2})),
                   "overlap");
  expect_malformed(with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32_bytes({1, 2})),
                   "not a non-negative integer");
  expect_malformed(with_header(R"({"a":{"dtype":"F32","shape":[2]}})", f32_bytes({1, 2})),
                   "needs dtype, shape and data_offsets");
  expect_malformed(with_header(R"({"__metadata__":{"k":3}})", {}), "__metadata__.k is not a string");
  EXPECT_THROW(read_file("/nonexistent/x.safetensors"), std::runtime_error);
}

}  // namespace
}  // namespace dsa::st
