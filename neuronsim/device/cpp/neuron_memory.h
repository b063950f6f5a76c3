// The HBM ledger, and neuron tensors charged to it: made by the core library (neuron_memory.cpp),
// used by the cached-op library too (neuron_ops.cpp allocates its outputs with fresh_tensor,
// neuron_host.cpp adopts results with neuron_tensor). Only c10's and TensorBase's headers: the core
// library is built on a cold first run's critical path, and ATen's full Tensor would triple its
// compile time.

#pragma once

#include <ATen/core/TensorBase.h>
#include <c10/core/Allocator.h>
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

// What a neuron storage's DataPtr owns: its host bytes (a fresh allocation, or an adopted CPU
// result's storage) and the bytes to give back to the ledger.
template <class Host>
struct Charged {
  Host host;
  Ledger* ledger;
  int64_t nbytes;
};

template <class Host>
void free_charged(void* context) {
  auto* owner = static_cast<Charged<Host>*>(context);
  if (owner->nbytes > 0) {
    owner->ledger->release(owner->nbytes);
  }
  delete owner;  // frees (or lets go of) the host bytes
}

// A neuron tensor over `data`, whose storage frees `owner` with `free_owner` when it dies.
at::TensorBase neuron_tensor(void* data, void* owner, c10::DeleterFnPtr free_owner, int64_t nbytes, int device,
                             caffe2::TypeMeta dtype, c10::IntArrayRef sizes, c10::IntArrayRef strides);

// A fresh neuron tensor on `device` over `nbytes` of new host memory charged to `ledger`; an
// undefined tensor when the charge would pass `capacity` (nothing allocated, nothing charged) or
// the host allocation failed (the charge undone).
at::TensorBase fresh_tensor(Ledger* ledger, int64_t capacity, int device, c10::ScalarType dtype,
                            c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t nbytes);

}  // namespace neuronsim
