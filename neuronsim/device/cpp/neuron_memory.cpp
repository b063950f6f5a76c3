// Device memory in C++: fresh `neuron` tensors and the HBM ledger's counters.
//
// A neuron tensor's bytes are host memory (c10's CPU allocator: aligned as ATen-CPU's). Made here,
// a fresh tensor is one StorageImpl whose DataPtr carries the neuron device and a deleter that
// releases its bytes from the ledger when the storage dies: no DLPack round trip, no Python object
// per allocation, no weakref to watch it. Every cached native op allocates its outputs here.
//
// The ledger's counters (bytes and allocation counts, per pool, current/peak/allocated/freed) live
// here for every storage, also those made in Python (adopted CPU tensors, whose release a weakref
// reports): one set of counters, so the peaks are of the true totals. Updates take a mutex, as a
// storage can die on any thread (the autograd engine's too), with or without the GIL.
//
// Part of the core library (with neuron_device.cpp), which registration needs before anything else:
// built on a cold first run's critical path, so its headers are c10's and TensorBase's only.
//
// Called through ctypes.PyDLL (the GIL held): the few CPython functions used are declared here,
// not included, so the build needs no Python headers — only torch's own (THPVariable_Wrap).

#include <ATen/core/TensorBase.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/ScalarType.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "neuron_memory.h"

struct _object;
using PyObject = _object;

PyObject* THPVariable_Wrap(const at::TensorBase& var);  // libtorch_python

extern "C" {
extern PyObject _Py_NoneStruct;
void Py_IncRef(PyObject*);
void Py_DecRef(PyObject*);
int64_t PySequence_Size(PyObject*);
PyObject* PySequence_GetItem(PyObject*, int64_t);
long long PyLong_AsLongLong(PyObject*);
PyObject* PyErr_Occurred();
}

namespace {

using namespace neuronsim;

bool read_ints(PyObject* seq, std::vector<int64_t>& out) {
  int64_t n = PySequence_Size(seq);
  if (n < 0) {
    return false;
  }
  out.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_GetItem(seq, i);
    if (item == nullptr) {
      return false;
    }
    out[i] = PyLong_AsLongLong(item);
    Py_DecRef(item);
  }
  return PyErr_Occurred() == nullptr;
}

PyObject* none() {
  Py_IncRef(&_Py_NoneStruct);
  return &_Py_NoneStruct;
}

thread_local std::vector<int64_t> t_sizes, t_strides;

}  // namespace

extern "C" {

// A new ledger (never freed: storages charged to it may outlive its Python object).
void* neuronsim_ledger_new() {
  return new Ledger();
}

int neuronsim_ledger_charge(void* ledger, int64_t nbytes, int64_t capacity) {
  return static_cast<Ledger*>(ledger)->charge(nbytes, capacity) ? 1 : 0;
}

void neuronsim_ledger_release(void* ledger, int64_t nbytes) {
  static_cast<Ledger*>(ledger)->release(nbytes);
}

int64_t neuronsim_ledger_current(void* ledger) {
  auto* l = static_cast<Ledger*>(ledger);
  std::lock_guard<std::mutex> hold(l->mu);
  return l->bytes[0][kCur];
}

// The counters, bytes then counts, each [pool][metric]: 24 values into `out`.
void neuronsim_ledger_read(void* ledger, int64_t* out) {
  auto* l = static_cast<Ledger*>(ledger);
  std::lock_guard<std::mutex> hold(l->mu);
  for (int p = 0; p < kPools; ++p) {
    for (int m = 0; m < kMetrics; ++m) {
      out[p * kMetrics + m] = l->bytes[p][m];
      out[kPools * kMetrics + p * kMetrics + m] = l->count[p][m];
    }
  }
}

void neuronsim_ledger_reset_peak(void* ledger) {
  auto* l = static_cast<Ledger*>(ledger);
  std::lock_guard<std::mutex> hold(l->mu);
  for (int p = 0; p < kPools; ++p) {
    l->bytes[p][kPeak] = l->bytes[p][kCur];
    l->count[p][kPeak] = l->count[p][kCur];
  }
}

void neuronsim_ledger_reset_accumulated(void* ledger) {
  auto* l = static_cast<Ledger*>(ledger);
  std::lock_guard<std::mutex> hold(l->mu);
  for (int p = 0; p < kPools; ++p) {
    l->bytes[p][kAlloc] = l->bytes[p][kFreed] = 0;
    l->count[p][kAlloc] = l->count[p][kFreed] = 0;
  }
}

// c10's name of ScalarType `index` ("Float", "BFloat16"...), "" past the last: the device layer
// maps torch dtypes to these numbers by name, so no enum value is assumed.
const char* neuronsim_scalar_type_name(int index) {
  if (index < 0 || index >= static_cast<int>(c10::ScalarType::NumOptions)) {
    return "";
  }
  return c10::toString(static_cast<c10::ScalarType>(index));
}

// A fresh neuron tensor on `device` of `sizes` and `strides` (sequences of ints) over `nbytes` of
// new host memory charged to `ledger`. None when the charge would pass `capacity` (nothing is
// allocated, nothing charged: the caller raises the out-of-memory error) or the host allocation
// failed (the charge is undone).
PyObject* neuronsim_empty(void* ledger, int64_t capacity, int device, int scalar_type, PyObject* sizes,
                          PyObject* strides, int64_t nbytes) {
  if (!read_ints(sizes, t_sizes) || !read_ints(strides, t_strides)) {
    return nullptr;  // ctypes raises the Python error
  }
  if (t_sizes.size() != t_strides.size()) {
    return none();
  }
  at::TensorBase t = fresh_tensor(static_cast<Ledger*>(ledger), capacity, device,
                              static_cast<c10::ScalarType>(scalar_type), t_sizes, t_strides, nbytes);
  if (!t.defined()) {
    return none();
  }
  return THPVariable_Wrap(t);
}

}  // extern "C"

namespace neuronsim {

at::TensorBase neuron_tensor(void* data, void* owner, c10::DeleterFnPtr free_owner, int64_t nbytes, int device,
                             caffe2::TypeMeta dtype, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  c10::DataPtr ptr(data, owner, free_owner,
                   c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                              std::move(ptr), nullptr, false));
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage),
                                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
  impl->set_sizes_and_strides(sizes, strides);
  return at::TensorBase(std::move(impl));
}

at::TensorBase fresh_tensor(Ledger* ledger, int64_t capacity, int device, c10::ScalarType dtype,
                            c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t nbytes) {
  if (nbytes > 0 && !ledger->charge(nbytes, capacity)) {
    return at::TensorBase();
  }
  Charged<c10::DataPtr>* block;
  try {
    block = new Charged<c10::DataPtr>{c10::GetCPUAllocator()->allocate(nbytes), ledger, nbytes};
  } catch (...) {
    if (nbytes > 0) {
      ledger->release(nbytes);
    }
    return at::TensorBase();
  }
  // From here the storage owns the block: its deleter gives the bytes back.
  return neuron_tensor(block->host.get(), block, &free_charged<c10::DataPtr>, nbytes, device,
                       c10::scalarTypeToTypeMeta(dtype), sizes, strides);
}

}  // namespace neuronsim
