// The semantic parameters of one DSA core problem (SPEC.md §0–§7), without its tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsa {

enum class Layout { zigzag, contiguous };
enum class PadRows { attend, masked };
enum class LossMode { off, sparse, dense };
enum class Path { absorbed, explicit_ };
enum class Precision { exact, bf16 };

// Names as they appear in case JSON and on the command line; parse_* throw InvalidInput(field, ...).
const char* name(Layout v);
const char* name(PadRows v);
const char* name(LossMode v);
const char* name(Path v);
const char* name(Precision v);
Layout parse_layout(const std::string& s, const std::string& field = "cp.layout");
PadRows parse_pad_rows(const std::string& s, const std::string& field = "pad_rows");
LossMode parse_loss_mode(const std::string& s, const std::string& field = "loss.mode");
Path parse_path(const std::string& s, const std::string& field = "path");
Precision parse_precision(const std::string& s, const std::string& field = "precision");

struct Dims {
  int64_t H = 4;    // attention heads
  int64_t Dn = 16;  // per-head nope dim
  int64_t R = 8;    // rope dim
  int64_t C = 32;   // kv latent rank
  int64_t Dv = 16;  // per-head value dim
  int64_t HI = 2;   // indexer heads
  int64_t DI = 16;  // indexer head dim
};

struct CpSpec {
  int64_t size = 1;
  Layout layout = Layout::zigzag;
  // 0 = the layout's default: 2·cp for zigzag, 1 for contiguous (SPEC.md §1).
  int64_t pad_multiple = 0;

  int64_t effective_pad_multiple() const {
    if (pad_multiple > 0) return pad_multiple;
    return layout == Layout::zigzag ? 2 * size : 1;
  }
};

struct Problem {
  std::vector<int64_t> seqlens;
  CpSpec cp;
  Dims dims;
  int64_t topk = 8;
  double softmax_scale = 0.125;
  bool relu = true;
  LossMode loss = LossMode::sparse;
  double coeff = 1.0;
  Path path = Path::absorbed;
  PadRows pad_rows = PadRows::attend;
};

// Throws InvalidInput naming the first field that breaks a rule.
void validate(const Problem& p);

}  // namespace dsa
