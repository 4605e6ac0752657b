// Bucket fingerprints (DESIGN.md): a stable string per kind of failure, so that a nightly run with
// a thousand failing cases reads as a handful of bugs, and shrink knows what must keep failing.
#pragma once

#include <string>
#include <vector>

#include "core/verdict.hpp"
#include "harness/case.hpp"

namespace dsa {

// Feature tags of a case, in a fixed order: cp (cp > 1), contiguous (the contiguous layout), pad or
// pad-masked (the stream holds pad rows; pad-masked under pad_rows=masked), ties (score ties or
// all-zero indexer rows), short-rows (a sequence of length <= 1 or shorter than K).
std::vector<std::string> feature_tags(const Case& c);

// "<backend>/<stage>/<tensor>/<class>", e.g. "mutant:kl_reversed/loss/kl/mismatch". A crash or
// timeout has stage "run", tensor "-". The feature tags are not part of it: they are counted inside
// the bucket (the report's summary.buckets[].tags histogram), never split it.
std::string make_bucket(const std::string& backend, const std::string& stage, const std::string& tensor,
                        Failure failure);

// A file name for a bucket: characters outside [A-Za-z0-9._+-] become '_', '/' becomes '.',
// long names are cut and given a hash suffix so they stay unique.
std::string bucket_file_stem(const std::string& bucket);

}  // namespace dsa
