// The cached native op in C++: a PrivateUse1 kernel that runs a signature's launch record with no
// Python on the way.
//
// The Python chokepoint (dispatch.execute -> NativeOp -> Entry.run) stays the one definition of an
// op: it is registered on PrivateUse2, and this kernel, registered on PrivateUse1 for the native
// ops, hands it every call it cannot take itself (redispatching the same stack). A call it can take
// is one whose key — the op's arguments as this file encodes them: each tensor's dtype, sizes,
// strides and flags, each scalar's exact bits, and for an in-place op how the written tensor
// aliases the others — was seen before and whose Python run published its launch record here
// (neuronsim/device/native/fast.py). Publishing happens only from the Python run of the very call
// this kernel handed over (same op, same tensors), after that run validated, built and executed the
// signature, so compiled code never sees a signature Python has not checked.
//
// A hit allocates the outputs (the core library's neuron_memory.cpp: the HBM ledger is charged as in
// Python), copies the calling thread's base addresses for the Program, writes each HBM slot's
// address, and calls the Numba executor's compiled loop (`run_encoded`) through its native entry
// point, with Numba's calling convention (the Python side checks the function's LLVM type before
// publishing its address). Under fast numerics a hit calls the op's ATen-CPU kernel on CPU views of
// the neuron tensors and adopts its fresh results as neuron tensors (neuron_host.cpp). The clock
// charge and the op count are queued here and drained into the device clock and the op tracking by
// Python before anything reads or charges them (fast.drain), so the profiler sees the same records
// in the same order. A run that stopped (an index out of bounds, a kernel that raised)
// goes back to Python with the stop, which raises the error the Python path raises.
// The kernel takes no GIL and calls no Python: torch's bindings release the GIL around the dispatcher.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "neuron_host.h"
#include "neuron_keys.h"
#include "neuron_memory.h"

namespace {

using neuronsim::adopt_result, neuronsim::device_of, neuronsim::encode, neuronsim::encode_aliases;
using neuronsim::host_view, neuronsim::Key, neuronsim::KeyHash, neuronsim::Ledger;

constexpr int kMaxDevices = 128;

// run_encoded(itab, ftab, bases, entries, start) as Numba compiled it: each C-contiguous array is
// passed as its data model's members (meminfo, parent, nitems, itemsize, data, shape..., strides...)
// after the return slot and the exception slot; the status (0: returned) is the result.
using RunFn = int32_t (*)(int64_t* ret, void** excinfo,
                          void*, void*, int64_t, int64_t, int64_t*, int64_t, int64_t, int64_t, int64_t,
                          void*, void*, int64_t, int64_t, double*, int64_t, int64_t, int64_t, int64_t,
                          void*, void*, int64_t, int64_t, int64_t*, int64_t, int64_t,
                          void*, void*, int64_t, int64_t, int64_t*, int64_t, int64_t,
                          int64_t start);

struct Output {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
  int64_t nbytes;
};

enum Returns : int32_t { kNothing = 0, kSelf = 1, kEach = 2, kList = 3 };

// One signature's launch record, as Python published it.
struct Record {
  int64_t py_index = 0;  // fast.py's record: the clock charge and the op name
  RunFn run = nullptr;
  int64_t* itab = nullptr;
  int64_t rows = 0, width = 0;
  double* ftab = nullptr;
  int64_t fwidth = 0;
  std::vector<int64_t> opcodes;                // each must have a loaded kernel before a run
  std::vector<int64_t> slots;                  // (Program tensor id, role: 0 input 1 output, index)*
  std::vector<int64_t> inputs;                 // (stack position, list element or -1)*
  std::vector<Output> outputs;                 // fresh outputs (none for in-place ops)
  int32_t written = 0;                         // in-place: the first `written` inputs are the outputs
  int32_t returns = kNothing;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> bases;  // (core token, template) per core
  int32_t host = -1;  // fast numerics: ATen-CPU computes the call on host views (a HostResult)
};

// What a fast-numerics call returns (schema.py's fast_path): its fresh results adopted as neuron
// tensors, `self`, or nothing.
enum HostResult : int32_t { kFresh = 0, kHostSelf = 1, kNone = 2 };

void charged(const Record* r, int device);

// Global state the Python side sets (fast.py); the records live as long as the process.
std::mutex g_mu;                                   // publishing, and the records' core lists
std::atomic<int64_t> g_slot{0};                    // the options in effect (0: no hits), first in every key
std::atomic<int64_t> g_epoch{1};                   // bumped by a clear: thread tokens and records go
std::atomic<int64_t> g_capacity{0};                // HBM bytes of one logical core
std::atomic<Ledger*> g_ledgers[kMaxDevices] = {};  // per device index
std::atomic<int64_t*> g_entries{nullptr};          // execute_numba.ENTRIES: a kernel per opcode
int64_t g_entries_len = 0;

// Queued charges (record, device, wall ns), drained by Python in order. g_pending is read by Python
// (a ctypes view) before it charges or reads a clock or the op counts.
std::mutex g_queue_mu;
std::vector<int64_t> g_queue;
size_t g_queue_head = 0;  // the first value not drained yet
int64_t g_pending = 0;
// A run of hits that nothing reads (no clock read, no Python op) would grow the queue without end:
// past this many, calls go through Python, whose clock charge drains it.
std::atomic<int64_t> g_queue_limit{1 << 16};
// Calls handed to Python that may publish (the Python side asks only when this is nonzero).
std::atomic<int64_t> g_publishable{0};
// Runs that stopped and went back to Python (which raises their error).
int64_t g_stops = 0;
std::atomic<int64_t> g_hits{0};  // calls run here (for tests and benchmarks)

// What the Python run of a handed-over call may publish (one per nested call, innermost current).
struct Pending {
  const std::string* op_name;
  Key* key;
  std::vector<c10::IValue>* args;
  std::unique_ptr<Record> published;
};
thread_local Pending* t_pending = nullptr;
std::vector<std::unique_ptr<Record>> g_retired;  // cleared records (guarded by g_mu)
thread_local int64_t t_core = 0;        // this thread's core token (set by its publishes)
thread_local int64_t t_core_epoch = 0;  // the epoch the token was set in
// A run that stopped on this thread: (record, instruction, bases) for Python's error.
thread_local std::vector<int64_t> t_stop;
thread_local std::vector<int64_t> t_bases;

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const at::Tensor& input_at(const c10::IValue* args, int64_t position, int64_t element, at::Tensor& holder) {
  const c10::IValue& v = args[position];
  if (element < 0) {
    return v.toTensor();
  }
  holder = v.toTensorList()[element];
  return holder;
}

struct OpKernel final : public c10::OperatorKernel {
  std::string name;  // "aten::add.Tensor": what Python publishes under
  bool inplace = false;
  std::mutex mu;
  std::unordered_map<Key, std::unique_ptr<Record>, KeyHash> records;
  std::atomic<int64_t> epoch{0};  // records older than g_epoch are dropped at the next publish

  explicit OpKernel(std::string op_name, bool writes_first) : name(std::move(op_name)), inplace(writes_first) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    size_t n = op.schema().arguments().size();
    c10::IValue* args = stack->data() + (stack->size() - n);
    bool keyed = g_slot.load(std::memory_order_relaxed) != 0 && build_key(args, n);
    if (keyed && run_cached(op, args, n, stack)) {
      return;
    }
    hand_to_python(op, stack, args, n, keyed);
  }

  thread_local static Key t_key;

  bool build_key(const c10::IValue* args, size_t n) {
    Key& key = t_key;
    key.clear();
    key.push_back(g_slot.load(std::memory_order_relaxed));
    int device = -1;
    for (size_t i = 0; i < n; ++i) {
      if (!encode(args[i], key, device)) {
        return false;
      }
    }
    if (device < 0) {
      return false;  // no device tensor: Python decides where it runs
    }
    return !inplace || encode_aliases(args, n, key);
  }

  // The record of t_key with the calling thread's core, its bases template copied into t_bases.
  Record* find() {
    std::lock_guard<std::mutex> hold(mu);
    if (epoch.load(std::memory_order_relaxed) != g_epoch.load(std::memory_order_relaxed)) {
      return nullptr;
    }
    auto it = records.find(t_key);
    if (it == records.end()) {
      return nullptr;
    }
    Record* r = it->second.get();
    if (r->host >= 0) {
      return r;  // (ATen-CPU needs no core memory)
    }
    if (t_core_epoch != g_epoch.load(std::memory_order_relaxed)) {
      return nullptr;
    }
    for (size_t i = 0; i < r->bases.size(); ++i) {
      if (r->bases[i].first == t_core) {
        t_bases = r->bases[i].second;
        return r;
      }
    }
    return nullptr;
  }

  bool run_cached(const c10::OperatorHandle& op, c10::IValue* args, size_t n, torch::jit::Stack* stack) {
    Record* r = find();
    if (r == nullptr || g_pending >= g_queue_limit.load(std::memory_order_relaxed)) {
      return false;
    }
    if (r->host >= 0) {
      return run_on_host(op, r, args, n, stack);
    }
    int64_t* entries = g_entries.load(std::memory_order_relaxed);
    for (int64_t code : r->opcodes) {  // a compile unit unloaded since (tests do): Python resumes it
      if (entries == nullptr || code >= g_entries_len || entries[code] == 0) {
        return false;
      }
    }
    at::Tensor holder;
    const at::Tensor& first = input_at(args, r->inputs[0], r->inputs[1], holder);
    int device = first.device().index();
    Ledger* ledger = device >= 0 && device < kMaxDevices ? g_ledgers[device].load() : nullptr;
    if (ledger == nullptr) {
      return false;
    }
    std::vector<at::Tensor> outs;
    outs.reserve(r->outputs.size());
    int64_t capacity = g_capacity.load(std::memory_order_relaxed);
    for (const Output& o : r->outputs) {
      outs.push_back(neuronsim::fresh_tensor(ledger, capacity, device, o.dtype, o.sizes, o.strides, o.nbytes));
      if (!outs.back().defined()) {
        return false;  // over capacity: Python raises the out-of-memory error
      }
    }
    std::vector<int64_t>& bases = t_bases;
    at::Tensor h;
    for (size_t s = 0; s < r->slots.size(); s += 3) {
      int64_t index = r->slots[s + 2];
      void* address;
      if (r->slots[s + 1] == 0) {
        address = input_at(args, r->inputs[2 * index], r->inputs[2 * index + 1], h).data_ptr();
      } else if (r->written) {
        address = input_at(args, r->inputs[2 * index], r->inputs[2 * index + 1], h).data_ptr();
      } else {
        address = outs[index].data_ptr();
      }
      bases[r->slots[s]] = reinterpret_cast<int64_t>(address);
    }
    int64_t stopped = -1;
    void* excinfo = nullptr;
    int64_t nb = static_cast<int64_t>(bases.size());
    int32_t status = r->run(&stopped, &excinfo,
                            nullptr, nullptr, r->rows * r->width, 8, r->itab, r->rows, r->width, r->width * 8, 8,
                            nullptr, nullptr, r->rows * r->fwidth, 8, r->ftab, r->rows, r->fwidth, r->fwidth * 8, 8,
                            nullptr, nullptr, nb, 8, bases.data(), nb, 8,
                            nullptr, nullptr, g_entries_len, 8, entries, g_entries_len, 8,
                            0);
    if (status != 0 || stopped >= 0) {
      // Python raises the run's error (an unloaded unit was ruled out above); before that, nothing
      // was charged. (An in-place op's tensor keeps what ran, as on the Python path.)
      t_stop.assign({r->py_index, status != 0 ? -2 : stopped});
      t_stop.insert(t_stop.end(), bases.begin(), bases.end());
      std::lock_guard<std::mutex> hold(g_queue_mu);
      ++g_stops;
      return false;
    }
    charged(r, device);
    c10::IValue self;
    if (r->returns == kSelf) {
      self = args[0];
    }
    torch::jit::drop(*stack, n);
    switch (r->returns) {
      case kSelf:
        stack->push_back(std::move(self));
        break;
      case kEach:
        for (at::Tensor& t : outs) {
          stack->emplace_back(std::move(t));
        }
        break;
      case kList:
        stack->emplace_back(c10::List<at::Tensor>(outs));
        break;
      default:
        break;
    }
    return true;
  }

  // Fast numerics: the op on CPU views of the neuron tensors (host.py's host_runner, in C++), its
  // fresh CPU results made neuron tensors charged to the ledger (memory.adopt).
  bool run_on_host(const c10::OperatorHandle& op, Record* r, c10::IValue* args, size_t n, torch::jit::Stack* stack) {
    int device = -1;
    for (size_t i = 0; i < n && device < 0; ++i) {
      device = device_of(args[i]);
    }
    Ledger* ledger = device >= 0 && device < kMaxDevices ? g_ledgers[device].load() : nullptr;
    if (ledger == nullptr) {
      return false;
    }
    std::vector<c10::IValue> saved;  // (if a result cannot be adopted, Python takes the call)
    if (r->host == kFresh) {
      saved.assign(args, args + n);
    }
    c10::IValue self = args[0];
    for (size_t i = 0; i < n; ++i) {
      args[i] = host_view(args[i]);
    }
    c10::Dispatcher::singleton().callBoxed(op, stack);
    size_t returned = op.schema().returns().size();
    c10::IValue* results = stack->data() + (stack->size() - returned);
    if (r->host == kFresh) {
      int64_t capacity = g_capacity.load(std::memory_order_relaxed);
      for (size_t i = 0; i < returned; ++i) {
        if (!adopt_result(results[i], ledger, capacity, device)) {
          torch::jit::drop(*stack, returned);  // (the adopted ones are released with them)
          stack->insert(stack->end(), saved.begin(), saved.end());
          return false;
        }
      }
    } else if (r->host == kHostSelf && returned == 1) {
      results[0] = std::move(self);
    }
    charged(r, device);
    return true;
  }

  void hand_to_python(const c10::OperatorHandle& op, torch::jit::Stack* stack, const c10::IValue* args, size_t n,
                      bool keyed) {
    if (!keyed) {  // nothing to publish: no nested call may publish into an outer one either
      Pending* outer = t_pending;
      t_pending = nullptr;
      struct Restore {
        Pending* outer;
        ~Restore() { t_pending = outer; }
      } restore{outer};
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse2), stack);
      return;
    }
    Key key = t_key;  // (the Python run may make nested calls, which reuse t_key)
    std::vector<c10::IValue> saved(args, args + n);
    Pending pending{&name, &key, &saved};
    Pending* outer = t_pending;
    t_pending = &pending;
    g_publishable.fetch_add(1);
    struct Restore {
      Pending* outer;
      ~Restore() {
        t_pending = outer;
        g_publishable.fetch_sub(1);
      }
    } restore{outer};
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse2), stack);
    if (pending.published != nullptr) {
      adopt(std::move(key), std::move(pending.published));
    }
  }

  void adopt(Key key, std::unique_ptr<Record> record) {
    std::lock_guard<std::mutex> hold(mu);
    int64_t now = g_epoch.load();
    if (epoch.load() != now) {  // cleared: the old records stay allocated (another thread may be running one)
      std::lock_guard<std::mutex> retire(g_mu);
      for (auto& kv : records) {
        g_retired.push_back(std::move(kv.second));
      }
      records.clear();
      epoch.store(now);
    }
    auto it = records.find(key);
    if (it == records.end()) {
      records.emplace(std::move(key), std::move(record));
      return;
    }
    // Known signature, a new core: its bases join the record's (a few cores kept, as entry.py does).
    Record* known = it->second.get();
    for (auto& b : record->bases) {
      bool replaced = false;
      for (auto& k : known->bases) {
        if (k.first == b.first) {
          k.second = std::move(b.second);
          replaced = true;
        }
      }
      if (!replaced) {
        if (known->bases.size() >= 4) {
          known->bases.clear();
        }
        known->bases.push_back(std::move(b));
      }
    }
  }
};

thread_local Key OpKernel::t_key;

// A finished call: its clock charge and op count queued for Python.
void charged(const Record* r, int device) {
  {
    std::lock_guard<std::mutex> hold(g_queue_mu);
    g_queue.push_back(r->py_index);
    g_queue.push_back(device);
    g_queue.push_back(wall_ns());
    g_pending = static_cast<int64_t>((g_queue.size() - g_queue_head) / 3);
  }
  g_hits.fetch_add(1, std::memory_order_relaxed);
}

std::mutex g_library_mu;
torch::Library* g_library = nullptr;

// The pending hand-over of this thread if `op_name` is its op and `pointers` are the data pointers
// of its tensors at `inputs` ((stack position, list element or -1) pairs); else null.
Pending* handed_over(const char* op_name, const int64_t* pointers, const int64_t* inputs, int64_t n_inputs) {
  Pending* p = t_pending;
  if (p == nullptr || p->published != nullptr || *p->op_name != op_name || n_inputs < 1) {
    return nullptr;
  }
  const std::vector<c10::IValue>& args = *p->args;
  at::Tensor holder;
  for (int64_t i = 0; i < n_inputs; ++i) {
    int64_t position = inputs[2 * i], element = inputs[2 * i + 1];
    if (position < 0 || position >= static_cast<int64_t>(args.size())) {
      return nullptr;
    }
    const c10::IValue& v = args[position];
    bool fits = element < 0 ? v.isTensor()
                            : v.isTensorList() && element < static_cast<int64_t>(v.toTensorList().size());
    if (!fits) {
      return nullptr;
    }
    const at::Tensor& t = input_at(args.data(), position, element, holder);
    if (!t.defined() || reinterpret_cast<int64_t>(t.data_ptr()) != pointers[i]) {
      return nullptr;
    }
  }
  return p;
}

}  // namespace

extern "C" {

// Registers the C++ kernel of ATen op `name` ("add.Tensor") on PrivateUse1; its Python kernel must
// be on PrivateUse2. 0 on success.
// `op_name` is the name its Python records are published under (OpOverload.name(): "aten::mm").
int neuronsim_fast_register(const char* name, const char* op_name, int writes_first) {
  try {
    std::lock_guard<std::mutex> hold(g_library_mu);
    if (g_library == nullptr) {
      g_library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                     "neuronsim/device/cpp/neuron_ops.cpp", 0);
    }
    g_library->impl(name, torch::CppFunction::makeFromBoxedFunctor(
                              std::make_unique<OpKernel>(op_name, writes_first != 0)));
    return 0;
  } catch (...) {
    return 1;
  }
}

// The options in effect: records are published and found under their slot (0: no hits).
void neuronsim_fast_set_slot(int64_t slot) {
  g_slot.store(slot);
}

// Drops every record (the next call of each signature goes through Python and publishes again).
void neuronsim_fast_clear() {
  g_epoch.fetch_add(1);
}

void neuronsim_fast_set_memory(int device, void* ledger, int64_t capacity) {
  if (device >= 0 && device < kMaxDevices) {
    g_ledgers[device].store(static_cast<Ledger*>(ledger));
  }
  g_capacity.store(capacity);
}

void neuronsim_fast_set_entries(int64_t* entries, int64_t n) {
  g_entries_len = n;
  g_entries.store(entries);
}

// Addresses Python reads without a call: the queued charges, calls that may publish, stops.
int64_t* neuronsim_fast_pending_address() {
  return &g_pending;
}
int64_t* neuronsim_fast_publishable_address() {
  return reinterpret_cast<int64_t*>(&g_publishable);
}
int64_t* neuronsim_fast_stops_address() {
  return &g_stops;
}
void neuronsim_fast_set_queue_limit(int64_t limit) {
  g_queue_limit.store(limit);
}
int64_t neuronsim_fast_hits() {
  return g_hits.load();
}

// Moves up to `max` queued charges (record, device, wall ns) into `out`; how many.
int64_t neuronsim_fast_drain(int64_t* out, int64_t max) {
  std::lock_guard<std::mutex> hold(g_queue_mu);
  int64_t n = std::min<int64_t>(max, static_cast<int64_t>((g_queue.size() - g_queue_head) / 3));
  std::memcpy(out, g_queue.data() + g_queue_head, n * 3 * sizeof(int64_t));
  g_queue_head += n * 3;
  if (g_queue_head == g_queue.size()) {
    g_queue.clear();
    g_queue_head = 0;
  }
  g_pending = static_cast<int64_t>((g_queue.size() - g_queue_head) / 3);
  return n;
}

// This thread's stopped run, if any: (record, instruction or -2 for a failed call, bases...) into
// `out` (up to `max` values); how many values (0: none). Taking it clears it.
int64_t neuronsim_fast_take_stop(int64_t* out, int64_t max) {
  if (t_stop.empty()) {
    return 0;
  }
  int64_t n = std::min<int64_t>(max, static_cast<int64_t>(t_stop.size()));
  std::memcpy(out, t_stop.data(), n * sizeof(int64_t));
  t_stop.clear();
  std::lock_guard<std::mutex> hold(g_queue_mu);
  --g_stops;
  return n;
}

// Publishes a fast-numerics record (ATen-CPU on host views; `result`: a HostResult) of the call this
// thread handed to Python, as neuronsim_fast_publish does.
int neuronsim_fast_publish_host(const char* op_name, const int64_t* pointers, const int64_t* inputs,
                                int64_t n_inputs, int64_t py_index, int32_t result) {
  Pending* p = handed_over(op_name, pointers, inputs, n_inputs);
  if (p == nullptr) {
    return 0;
  }
  auto r = std::make_unique<Record>();
  r->py_index = py_index;
  r->host = result;
  p->published = std::move(r);
  return 1;
}

// Publishes the launch record of the call this thread handed to Python, if `op_name` is its op and
// `pointers` (the data pointers of the record's inputs, in order) are that call's tensors. Returns
// 1 if kept, 0 if this is not the handed-over call. Arrays are copied; `itab`/`ftab` must outlive
// the record (Python keeps them).
int neuronsim_fast_publish(const char* op_name, const int64_t* pointers, int64_t py_index, void* run,
                           int64_t* itab, int64_t rows, int64_t width, double* ftab, int64_t fwidth,
                           const int64_t* opcodes, int64_t n_opcodes, const int64_t* slots, int64_t n_slots,
                           const int64_t* inputs, int64_t n_inputs, const int64_t* outputs, int64_t n_outputs,
                           int32_t written, int32_t returns, int64_t core, const int64_t* bases,
                           int64_t n_bases) {
  Pending* p = handed_over(op_name, pointers, inputs, n_inputs);
  if (p == nullptr) {
    return 0;
  }
  auto r = std::make_unique<Record>();
  r->py_index = py_index;
  r->run = reinterpret_cast<RunFn>(run);
  r->itab = itab;
  r->rows = rows;
  r->width = width;
  r->ftab = ftab;
  r->fwidth = fwidth;
  r->opcodes.assign(opcodes, opcodes + n_opcodes);
  r->slots.assign(slots, slots + 3 * n_slots);
  r->inputs.assign(inputs, inputs + 2 * n_inputs);
  // outputs: (dtype, nbytes, dim, sizes..., strides...) each
  const int64_t* o = outputs;
  for (int64_t i = 0; i < n_outputs; ++i) {
    Output out;
    out.dtype = static_cast<c10::ScalarType>(o[0]);
    out.nbytes = o[1];
    int64_t dim = o[2];
    out.sizes.assign(o + 3, o + 3 + dim);
    out.strides.assign(o + 3 + dim, o + 3 + 2 * dim);
    r->outputs.push_back(std::move(out));
    o += 3 + 2 * dim;
  }
  r->written = written;
  r->returns = returns;
  r->bases.emplace_back(core, std::vector<int64_t>(bases, bases + n_bases));
  t_core = core;
  t_core_epoch = g_epoch.load();
  p->published = std::move(r);
  return 1;
}

}  // extern "C"
