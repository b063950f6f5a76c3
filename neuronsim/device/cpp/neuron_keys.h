// A call's key for the C++ cached op (neuron_ops.cpp): its arguments as int64 words.

#pragma once

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace neuronsim {

using Key = std::vector<int64_t>;

// FNV-1a over a key's words (the records' hash map).
struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) {
      h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// Appends argument `v` to `key`: a tensor's device, dtype, sizes and strides (a 0-dim CPU tensor's
// value bits), a number's exact bits, a string's bytes, a list's elements. `device` is the neuron
// device index its tensors are on (-1 until one is seen). False for what no record may take
// (another device, a conj/neg bit, a generator...).
bool encode(const c10::IValue& v, Key& key, int& device);

// An in-place op's part of the key: how each other neuron tensor of `args` relates to the written
// `args[0]` (the same view, or no shared storage; anything else is false: Python decides).
bool encode_aliases(const c10::IValue* args, size_t n, Key& key);

}  // namespace neuronsim
