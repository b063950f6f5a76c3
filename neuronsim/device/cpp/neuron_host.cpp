// Host views of neuron tensors and adopted CPU results (memory.py's host_view and adopt), for the
// C++ cached op under fast numerics (neuron_ops.cpp). Adopted storages are made by the core
// library's neuron_tensor (neuron_memory.cpp) and charged to its ledger.

#include "neuron_host.h"

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <vector>

namespace neuronsim {

int device_of(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 ? t.device().index() : -1;
  }
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) {
      if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) {
        return t.device().index();
      }
    }
  }
  return -1;
}

namespace {

void release_storage(void* context) {
  delete static_cast<c10::Storage*>(context);
}

// A CPU tensor over a neuron tensor's bytes (memory.host_view): a storage of its own whose deleter
// holds the neuron storage.
at::Tensor cpu_view(const at::Tensor& t) {
  const c10::Storage& storage = t.storage();
  c10::DataPtr ptr(storage.mutable_data(), new c10::Storage(storage), &release_storage, c10::Device(c10::kCPU));
  c10::Storage host(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), storage.nbytes(),
                                                           std::move(ptr), nullptr, false));
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(host), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                   t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return at::Tensor(std::move(impl));
}

bool on_device(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

}  // namespace

c10::IValue host_view(const c10::IValue& v) {
  if (v.isTensor()) {
    return on_device(v.toTensor()) ? c10::IValue(cpu_view(v.toTensor())) : v;
  }
  if (v.isTensorList()) {
    std::vector<at::Tensor> views = v.toTensorList().vec();
    for (at::Tensor& t : views) {
      if (on_device(t)) {
        t = cpu_view(t);
      }
    }
    return c10::IValue(c10::List<at::Tensor>(views));
  }
  return v;
}

namespace {

// A fresh CPU result as a neuron tensor over the same bytes, charged to `ledger` (memory.adopt: the
// storage spans the tensor's elements from its first). False if over capacity or not plain.
bool adopt_tensor(at::Tensor& t, Ledger* ledger, int64_t capacity, int device) {
  if (!t.defined() || t.device().type() != c10::DeviceType::CPU) {
    return true;  // (returned as it is, as _fresh_result does)
  }
  if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg() || !t.has_storage()) {
    return false;
  }
  int64_t nbytes = 0;
  if (t.numel() > 0) {
    int64_t extent = 1;
    for (int64_t d = 0; d < t.dim(); ++d) {
      extent += (t.size(d) - 1) * t.stride(d);
    }
    nbytes = extent * static_cast<int64_t>(t.element_size());
  }
  if (nbytes > 0 && !ledger->charge(nbytes, capacity)) {
    return false;
  }
  auto* owner = new Charged<c10::Storage>{t.storage(), ledger, nbytes};
  t = at::Tensor(neuron_tensor(t.data_ptr(), owner, &free_charged<c10::Storage>, nbytes, device, t.dtype(),
                               t.sizes(), t.strides()));
  return true;
}

}  // namespace

bool adopt_result(c10::IValue& v, Ledger* ledger, int64_t capacity, int device) {
  if (v.isTensor()) {
    at::Tensor t = v.toTensor();
    if (!adopt_tensor(t, ledger, capacity, device)) {
      return false;
    }
    v = std::move(t);
    return true;
  }
  if (v.isTensorList()) {
    std::vector<at::Tensor> ts = v.toTensorList().vec();
    for (at::Tensor& t : ts) {
      if (!adopt_tensor(t, ledger, capacity, device)) {
        return false;
      }
    }
    v = c10::IValue(c10::List<at::Tensor>(ts));
    return true;
  }
  return true;
}

}  // namespace neuronsim
