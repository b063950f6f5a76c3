// The key of a call to a C++ cached op (neuron_ops.cpp): each argument as int64 words, so two calls
// with equal keys are the same signature to the Python chokepoint (signature.py) — and more: the key
// keeps what Python's leaves out (a 0-dim CPU scalar's exact bytes, a wrapped number's flag).

#include "neuron_keys.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace neuronsim {
namespace {

bool shallow_ok(const at::Tensor& t) {
  return t.layout() == c10::kStrided && !t.is_conj() && !t.is_neg();
}

// Appends `t` to the key. False for what no record may take.
bool encode_tensor(const at::Tensor& t, Key& key, int& device) {
  if (!t.defined()) {
    key.push_back(-1);
    return true;
  }
  if (!shallow_ok(t)) {
    return false;
  }
  c10::DeviceType type = t.device().type();
  if (type == c10::DeviceType::PrivateUse1) {
    int index = t.device().index();
    if (device < 0) {
      device = index;
    } else if (index != device) {
      return false;
    }
    int64_t dim = t.dim();
    key.push_back(-2);
    key.push_back(static_cast<int64_t>(t.scalar_type()));
    key.push_back(dim);
    auto sizes = t.sizes();
    auto strides = t.strides();
    key.insert(key.end(), sizes.begin(), sizes.end());
    key.insert(key.end(), strides.begin(), strides.end());
    return true;
  }
  if (type == c10::DeviceType::CPU && t.dim() == 0) {  // a wrapped Python number, or a 0-dim tensor
    key.push_back(-3);
    key.push_back(static_cast<int64_t>(t.scalar_type()));
    key.push_back(t.unsafeGetTensorImpl()->is_wrapped_number() ? 1 : 0);
    int64_t bits[2] = {0, 0};
    size_t n = t.element_size();
    if (n > sizeof(bits)) {
      return false;
    }
    std::memcpy(bits, t.const_data_ptr(), n);
    key.push_back(bits[0]);
    key.push_back(bits[1]);
    return true;
  }
  return false;
}

}  // namespace

bool encode(const c10::IValue& v, Key& key, int& device) {
  if (v.isTensor()) {
    return encode_tensor(v.toTensor(), key, device);
  }
  if (v.isNone()) {
    key.push_back(-10);
    return true;
  }
  if (v.isDouble()) {
    double d = v.toDouble();
    int64_t bits;
    std::memcpy(&bits, &d, sizeof(bits));
    key.push_back(-11);
    key.push_back(bits);
    return true;
  }
  if (v.isBool()) {  // (before isInt: a bool is not an int here)
    key.push_back(-12);
    key.push_back(v.toBool() ? 1 : 0);
    return true;
  }
  if (v.isInt()) {
    key.push_back(-13);
    key.push_back(v.toInt());
    return true;
  }
  if (v.isSymInt() || v.isSymFloat() || v.isSymBool()) {
    return false;
  }
  if (v.isString()) {
    const std::string& s = v.toStringRef();
    key.push_back(-14);
    key.push_back(static_cast<int64_t>(s.size()));
    for (size_t i = 0; i < s.size(); i += 8) {
      int64_t word = 0;
      std::memcpy(&word, s.data() + i, std::min<size_t>(8, s.size() - i));
      key.push_back(word);
    }
    return true;
  }
  if (v.isList()) {
    auto list = v.toListRef();
    key.push_back(-15);
    key.push_back(static_cast<int64_t>(list.size()));
    for (const c10::IValue& x : list) {
      if (!encode(x, key, device)) {
        return false;
      }
    }
    return true;
  }
  return false;  // generators, devices, complex numbers...: Python takes them
}

namespace {

enum Alias { kDisjoint = 0, kSame = 1, kOther = 2 };

Alias alias(const at::Tensor& read, const at::Tensor& written) {
  if (read.unsafeGetTensorImpl() == written.unsafeGetTensorImpl()) {
    return kSame;
  }
  if (!read.has_storage() || !written.has_storage() ||
      read.storage().unsafeGetStorageImpl() != written.storage().unsafeGetStorageImpl()) {
    return kDisjoint;
  }
  if (read.storage_offset() == written.storage_offset() && read.sizes() == written.sizes() &&
      read.strides() == written.strides()) {
    return kSame;
  }
  return kOther;  // overlapping or not: Python decides
}

bool is_device_tensor(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == c10::DeviceType::PrivateUse1;
}

}  // namespace

// An in-place op's part of the key: how each other device tensor relates to the written one(s),
// as signature.py's aliasing rule has it (the same view, or no shared storage; anything else: no key).
bool encode_aliases(const c10::IValue* args, size_t n, Key& key) {
  const c10::IValue& written = args[0];
  key.push_back(-20);
  if (written.isTensor()) {
    const at::Tensor& w = written.toTensor();
    for (size_t i = 1; i < n; ++i) {
      if (is_device_tensor(args[i])) {
        Alias a = alias(args[i].toTensor(), w);
        if (a == kOther) {
          return false;
        }
        key.push_back(a);
      }
    }
    return true;
  }
  if (!written.isTensorList()) {
    return false;
  }
  auto ws = written.toTensorList();
  for (size_t i = 1; i < n; ++i) {
    const c10::IValue& a = args[i];
    if (a.isTensorList() && a.toTensorList().size() == ws.size()) {
      auto xs = a.toTensorList();
      for (size_t j = 0; j < ws.size(); ++j) {
        at::Tensor x = xs[j];
        if (x.defined() && x.device().type() == c10::DeviceType::PrivateUse1) {
          Alias r = alias(x, ws[j]);
          if (r == kOther) {
            return false;
          }
          key.push_back(r);
        }
      }
    } else if (is_device_tensor(a)) {
      for (size_t j = 0; j < ws.size(); ++j) {
        if (alias(a.toTensor(), ws[j]) != kDisjoint) {
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace neuronsim
