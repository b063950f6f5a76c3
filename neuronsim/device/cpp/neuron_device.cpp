// The two C++ pieces of the `neuron` device that a Python backend cannot provide.
//
// 1. A device guard for PrivateUse1 that knows every logical NeuronCore. The Python guard of
//    torch._C._acc reports one device, so autograd's engine sizes its ready queues for neuron:0
//    only and a backward on neuron:1 fails its internal assert. This one reports the device
//    layer's device_count(), keeps the current device and stream per thread (as CUDA does), and
//    records events on each core's simulated clock.
// 2. `Tensor.set_data` across CPU and neuron. c10's TensorImpl::has_compatible_shallow_copy_type
//    lists the dense backends that may swap a tensor's data in place and PrivateUse1 is not among
//    them, so `param.data = neuron_tensor` is refused and nn.Module._apply replaces parameters
//    instead of moving them (tied weights come apart; optimizers keep the old tensors). The
//    autograd VariableHooks are wrapped so that set_data treats neuron as the dense backend it is;
//    every other hook, and set_data between tensors c10 already accepts, go to torch's own.
//
// Loaded with ctypes (no Python headers): the device layer sets the device count, passes a callback
// reading a core's simulated clock (events), and calls the C functions at the end of this file.
// Nothing else calls into Python: the guard is used by torch's own threads, holding its own locks.

#include <ATen/core/VariableHooksInterface.h>
#include <c10/core/ScalarType.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::DispatchKey;
using c10::DispatchKeySet;
using c10::Stream;
using c10::StreamId;

constexpr DeviceType kNeuron = DeviceType::PrivateUse1;
constexpr int kMaxDevices = 127;  // DeviceIndex is an int8_t

using ClockCallback = double (*)(int);

std::atomic<int> g_device_count{0};  // set by the device layer, which owns the figure
std::atomic<ClockCallback> g_clock_callback{nullptr};

thread_local DeviceIndex t_device = 0;
thread_local StreamId t_stream[kMaxDevices] = {};  // 0: the default stream
std::atomic<StreamId> g_next_stream{1};

int device_count() noexcept {
  return g_device_count.load();
}

double clock_ns(DeviceIndex index) {
  ClockCallback callback = g_clock_callback.load();
  return callback == nullptr ? 0.0 : callback(index);
}

struct NeuronEvent {
  double time_ns = 0.0;
  DeviceIndex device = -1;
  bool timing = false;
};

struct NeuronGuard final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override {
    return kNeuron;
  }

  DeviceIndex index_of(Device device) const {
    TORCH_CHECK(device.type() == kNeuron, "expected a neuron device, got ", device);
    DeviceIndex index = device.has_index() ? device.index() : t_device;
    int count = device_count();
    TORCH_CHECK(index >= 0 && index < count, "Invalid device id: ", static_cast<int>(index),
                " (this process has ", count, " neuron devices)");
    return index;
  }

  Device exchangeDevice(Device device) const override {
    Device previous = getDevice();
    setDevice(device);
    return previous;
  }
  Device getDevice() const override {
    return Device(kNeuron, t_device);
  }
  void setDevice(Device device) const override {
    t_device = index_of(device);
  }
  void uncheckedSetDevice(Device device) const noexcept override {
    if (device.index() >= 0 && device.index() < kMaxDevices) {
      t_device = device.index();
    }
  }

  // Every core runs its work in issue order on one timeline: a stream is a label (distinct ids,
  // as on CUDA), work on it is complete when issued, and waits return at once.
  Stream getStream(Device device) const override {
    DeviceIndex index = index_of(device);
    return Stream(Stream::UNSAFE, Device(kNeuron, index), t_stream[index]);
  }
  Stream getDefaultStream(Device device) const override {
    return Stream(Stream::DEFAULT, Device(kNeuron, index_of(device)));
  }
  Stream getStreamFromGlobalPool(Device device, bool /*high_priority*/) const override {
    return getNewStream(device, 0);
  }
  Stream getNewStream(Device device, int /*priority*/) const override {
    return Stream(Stream::UNSAFE, Device(kNeuron, index_of(device)), g_next_stream.fetch_add(1));
  }
  Stream exchangeStream(Stream stream) const noexcept override {
    DeviceIndex index = stream.device_index();
    if (index < 0 || index >= kMaxDevices) {
      return stream;
    }
    Stream previous(Stream::UNSAFE, Device(kNeuron, index), t_stream[index]);
    t_stream[index] = stream.id();
    return previous;
  }
  bool queryStream(const Stream& /*stream*/) const override {
    return true;
  }
  void synchronizeStream(const Stream& /*stream*/) const override {}
  void synchronizeDevice(const DeviceIndex /*device_index*/) const override {}

  void record(void** event, const Stream& stream, const DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    auto* recorded = static_cast<NeuronEvent*>(*event);
    if (recorded == nullptr) {
      recorded = new NeuronEvent();
      recorded->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
      *event = recorded;
    }
    recorded->device = stream.device_index();
    recorded->time_ns = clock_ns(recorded->device);
  }
  void block(void* /*event*/, const Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override {
    return true;
  }
  void synchronizeEvent(void* /*event*/) const override {}
  void destroyEvent(void* event, const DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<NeuronEvent*>(event);
  }
  double elapsedTime(void* start, void* end, const DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    auto* a = static_cast<NeuronEvent*>(start);
    auto* b = static_cast<NeuronEvent*>(end);
    TORCH_CHECK(a->timing && b->timing,
                "Both events must be created with argument 'enable_timing=True'.");
    return (b->time_ns - a->time_ns) / 1e6;  // simulated device milliseconds
  }

  DeviceIndex deviceCount() const noexcept override {
    return static_cast<DeviceIndex>(device_count());
  }
};

// c10's dense-backend rule with PrivateUse1 added: a strided tensor whose memory is host memory
// (CPU, or neuron, whose storages are host memory) can take another's data in place.
bool dense_host_memory(DispatchKeySet keys) {
  return keys.has_any(DispatchKeySet(DispatchKey::Dense)) &&
         (keys.has_backend(c10::BackendComponent::CPUBit) ||
          keys.has_backend(c10::BackendComponent::PrivateUse1Bit));
}

bool compatible(DispatchKeySet self, DispatchKeySet from) {
  return self == from || (dense_host_memory(self) && dense_host_memory(from));
}

struct NeuronVariableHooks final : public at::impl::VariableHooksInterface {
  explicit NeuronVariableHooks(at::impl::VariableHooksInterface* torch_hooks) : torch_(torch_hooks) {}
  at::impl::VariableHooksInterface* torch_;

  void set_data(const at::TensorBase& self, const at::TensorBase& new_data) const override {
    c10::TensorImpl* impl = self.unsafeGetTensorImpl();
    if (!impl->has_compatible_shallow_copy_type(new_data.key_set()) &&
        compatible(self.key_set(), new_data.key_set())) {
      // torch's set_data checks this after its compatibility check; check it before anything moves.
      TORCH_CHECK(!self.requires_grad() || c10::isFloatingType(new_data.scalar_type()) ||
                      c10::isComplexType(new_data.scalar_type()),
                  "data set to a tensor that requires gradients must be floating point or complex dtype");
      // Take the new data's metadata (storage, sizes, device and dispatch keys): the tensors are
      // then of one type, and torch's set_data does the rest as for any dense backend, including
      // resetting a gradient accumulator made for the old device.
      impl->shallow_copy_from(new_data.getIntrusivePtr());
    }
    torch_->set_data(self, new_data);
  }

  at::TensorBase tensor_data(const at::TensorBase& t) const override {
    return torch_->tensor_data(t);
  }
  at::TensorBase variable_data(const at::TensorBase& t) const override {
    return torch_->variable_data(t);
  }
  const c10::intrusive_ptr<torch::autograd::Node>& grad_fn(const at::TensorBase& t) const override {
    return torch_->grad_fn(t);
  }
  unsigned _register_hook(const at::TensorBase& t,
                          std::function<at::TensorBase(const at::TensorBase&)> hook) const override {
    return torch_->_register_hook(t, std::move(hook));
  }
  void remove_hook(const at::TensorBase& t, unsigned pos) const override {
    torch_->remove_hook(t, pos);
  }
  bool is_view(const at::TensorBase& t) const override {
    return torch_->is_view(t);
  }
  const at::TensorBase& base(const at::TensorBase& t) const override {
    return torch_->base(t);
  }
  const std::string& name(const at::TensorBase& t) const override {
    return torch_->name(t);
  }
  bool is_leaf(const at::TensorBase& t) const override {
    return torch_->is_leaf(t);
  }
  int64_t output_nr(const at::TensorBase& t) const override {
    return torch_->output_nr(t);
  }
  at::TensorBase data(const at::TensorBase& t) const override {
    return torch_->data(t);
  }
  int64_t _version(const at::TensorBase& t) const override {
    return torch_->_version(t);
  }
  void retain_grad(const at::TensorBase& t) const override {
    torch_->retain_grad(t);
  }
  bool retains_grad(const at::TensorBase& t) const override {
    return torch_->retains_grad(t);
  }
  void _backward(const at::Tensor& t, at::TensorList inputs, const std::optional<at::Tensor>& gradient,
                 std::optional<bool> keep_graph, bool create_graph) const override {
    torch_->_backward(t, inputs, gradient, keep_graph, create_graph);
  }
  void requires_grad_(const at::TensorBase& t, bool requires_grad) const override {
    torch_->requires_grad_(t, requires_grad);
  }
  void basic_autograd_not_implemented_fallback(const c10::OperatorHandle& op,
                                               c10::DispatchKeySet dispatch_keys,
                                               torch::jit::Stack* stack) const override {
    torch_->basic_autograd_not_implemented_fallback(op, dispatch_keys, stack);
  }
  std::optional<c10::ScalarType> grad_dtype(const at::TensorBase& t) const override {
    return torch_->grad_dtype(t);
  }
  void set_grad_dtype(const at::TensorBase& t,
                      const std::optional<c10::ScalarType>& dtype) const override {
    torch_->set_grad_dtype(t, dtype);
  }
};

std::once_flag g_install_once;
const NeuronGuard* g_guard = nullptr;

}  // namespace

extern "C" {

// Registers the guard and the set_data hooks. 0: done; 1: another PrivateUse1 guard is registered;
// 2: the autograd hooks are missing; 3: a C++ exception.
int neuronsim_install(int device_count, ClockCallback clock) {
  try {
    g_device_count.store(std::clamp(device_count, 0, kMaxDevices));
    g_clock_callback.store(clock);
    int status = 0;
    std::call_once(g_install_once, [&status] {
      if (c10::impl::hasDeviceGuardImpl(kNeuron)) {
        status = 1;
        return;
      }
      if (!at::impl::HasVariableHooks()) {
        status = 2;
        return;
      }
      g_guard = new NeuronGuard();  // leaked, as the guard registry requires
      c10::impl::registerDeviceGuard(kNeuron, g_guard);
      at::impl::SetVariableHooks(new NeuronVariableHooks(at::impl::GetVariableHooks()));
    });
    if (status == 0 && c10::impl::getDeviceGuardImpl(kNeuron) != g_guard) {
      status = 1;
    }
    return status;
  } catch (...) {
    return 3;
  }
}

// Drops the clock callback (at interpreter exit): events record time 0 after that.
void neuronsim_clear_callbacks() {
  g_clock_callback.store(nullptr);
}

// The device layer's device_count(), whenever it changes (a chip option with another core count).
void neuronsim_set_device_count(int count) {
  g_device_count.store(std::clamp(count, 0, kMaxDevices));
}

int neuronsim_current_device() {
  return t_device;
}

// The index is validated by the caller (the device layer).
void neuronsim_set_device(int index) {
  if (index >= 0 && index < kMaxDevices) {
    t_device = static_cast<DeviceIndex>(index);
  }
}

// torch._has_compatible_shallow_copy_type for neuron tensors: the rule set_data applies above.
int neuronsim_shallow_copy_compatible(uint64_t self_keys, uint64_t from_keys) {
  return compatible(DispatchKeySet(DispatchKeySet::RAW, self_keys),
                    DispatchKeySet(DispatchKeySet::RAW, from_keys));
}

}  // extern "C"
