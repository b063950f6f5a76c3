// Host views and adopted results, for the C++ cached op under fast numerics (memory.py's host_view
// and adopt, in C++): part of the cached-op library (neuron_host.cpp).

#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>

#include "neuron_memory.h"

namespace neuronsim {

// The neuron device index of a tensor or tensor list (-1: none).
int device_of(const c10::IValue& v);

// `v` with each neuron tensor replaced by a CPU tensor over its bytes.
c10::IValue host_view(const c10::IValue& v);

// A fresh CPU result (or list) made neuron tensors on `device` over the same bytes, charged to
// `ledger` (false if over `capacity`).
bool adopt_result(c10::IValue& v, Ledger* ledger, int64_t capacity, int device);

}  // namespace neuronsim
