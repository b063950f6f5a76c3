// Shared by the device library's translation units: the HBM ledger, and fresh neuron tensors
// charged to it (neuron_memory.cpp makes them; neuron_ops.cpp's cached ops allocate their outputs
// with it).

#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <mutex>

namespace neuronsim {

constexpr int64_t kLargePoolMinBytes = int64_t{1} << 20;  // hbm.py: LARGE_POOL_MIN_BYTES
constexpr int kPools = 3;                                   // all, large, small
constexpr int kMetrics = 4;                                 // current, peak, allocated, freed
enum { kCur, kPeak, kAlloc, kFreed };

struct Ledger {
  std::mutex mu;
  int64_t bytes[kPools][kMetrics] = {};
  int64_t count[kPools][kMetrics] = {};

  static void up(int64_t* row, int64_t n) {
    row[kCur] += n;
    row[kAlloc] += n;
    if (row[kCur] > row[kPeak]) {
      row[kPeak] = row[kCur];
    }
  }
  static void down(int64_t* row, int64_t n) {
    row[kCur] -= n;
    row[kFreed] += n;
  }
  // Charges `nbytes` unless that would pass `capacity` (then nothing changes): true if charged.
  bool charge(int64_t nbytes, int64_t capacity) {
    std::lock_guard<std::mutex> hold(mu);
    if (bytes[0][kCur] + nbytes > capacity) {
      return false;
    }
    int pool = nbytes >= kLargePoolMinBytes ? 1 : 2;
    up(bytes[0], nbytes);
    up(bytes[pool], nbytes);
    up(count[0], 1);
    up(count[pool], 1);
    return true;
  }
  void release(int64_t nbytes) {
    std::lock_guard<std::mutex> hold(mu);
    int pool = nbytes >= kLargePoolMinBytes ? 1 : 2;
    down(bytes[0], nbytes);
    down(bytes[pool], nbytes);
    down(count[0], 1);
    down(count[pool], 1);
  }
};

// A fresh neuron tensor on `device` over `nbytes` of new host memory charged to `ledger`; an
// undefined tensor when the charge would pass `capacity` (nothing allocated, nothing charged) or
// the host allocation failed (the charge undone).
at::Tensor fresh_tensor(Ledger* ledger, int64_t capacity, int device, c10::ScalarType dtype,
                        c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t nbytes);

// Host views and adopted results, for the C++ cached op under fast numerics (memory.py's host_view
// and adopt, in C++): the neuron device index of a tensor or tensor list (-1: none); `v` with each
// neuron tensor replaced by a CPU tensor over its bytes; a fresh CPU result (or list) made neuron
// tensors on `device` over the same bytes, charged to `ledger` (false if over `capacity`).
int device_of(const c10::IValue& v);
c10::IValue host_view(const c10::IValue& v);
bool adopt_result(c10::IValue& v, Ledger* ledger, int64_t capacity, int device);

}  // namespace neuronsim
