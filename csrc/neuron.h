// Internal declarations of the PyTorch glue. The glue only registers with PyTorch and
// unpacks at::Tensor into the runtime's vnc_tensor; every computation is a runtime call.
#pragma once

#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <c10/core/Stream.h>

#include <string>
#include <vector>

extern "C" {
#include "vnc/vnc.h"
}

namespace torch_neuronx {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// Throws the Python exception matching a runtime status: torch.OutOfMemoryError for
// VNC_ERR_OUT_OF_MEMORY, IndexError-free RuntimeError otherwise, with the runtime's message.
// VNC_ERR_UNSUPPORTED raises UnsupportedOnNeuron (gate.h: the op takes the CPU fallback).
void raise_status(vnc_status st, const char* what);
inline void check(vnc_status st, const char* what = nullptr) {
  if (st != VNC_OK) raise_status(st, what);
}

// Address of element [0,...,0] (storage offset applied); nullptr for an empty or undefined tensor.
void* element_ptr(const at::TensorBase& t);

// The runtime's view of a tensor (any device): data pointer with storage offset applied,
// sizes, strides, dtype.
vnc_tensor to_vnc(const at::TensorBase& t);

// The runtime's view of a TensorIterator's geometry (operands, dtypes, byte strides,
// coalesced shape). CPU scalar operands are left for the caller to replace.
vnc_iter iter_geometry(const at::TensorIteratorBase& iter);

// The runtime stream behind a c10::Stream, and back.
vnc_stream* vnc_stream_of(const c10::Stream& s);
c10::Stream c10_stream_of(vnc_stream* s);
// The calling thread's current runtime stream on `device`, or on a tensor's device.
vnc_stream* current_vnc_stream(c10::DeviceIndex device);
inline vnc_stream* stream_of(const at::TensorBase& t) { return current_vnc_stream(t.device().index()); }

// Runs `release(arg)` on `stream` after all work enqueued so far (cudaLaunchHostFunc's
// role): used to keep host memory alive until a non_blocking copy has read or written it.
void keep_alive_until_done(vnc_stream* stream, c10::Storage storage);

// Op tracking (torch_neuronx.get_executed_ops / get_fallback_ops).
void record_native(const char* op);
void record_fallback(const std::string& op);
bool tracking_paused();
void set_tracking_paused(bool paused);
std::vector<std::pair<std::string, int64_t>> executed_op_counts();
std::vector<std::string> fallback_op_list();
int64_t fallback_op_total();
void clear_op_tracking();

// Raises PyTorch's "Expected all tensors to be on the same device" error (naming `op`) unless
// every defined tensor is on `ref`'s device. Kernels that read tensors by pointer call it:
// a host tensor's memory would otherwise be read after the call returned.
void check_same_device(const char* op, const at::Tensor& ref, std::initializer_list<const at::Tensor*> others);

// The out= checks of ATen's index_select/masked_select/take: `out` on self's device, without
// internal overlap, sharing no memory with self or `index` (the index or mask tensor).
void check_select_out(const char* op, const at::Tensor& self, const at::Tensor& index, const at::Tensor& out);

// A result of dtype `dtype` for an elementwise op over `inputs` (one shape), laid out as CPU's
// TensorIterator lays out its output: contiguous where every input is_contiguous, channels_last
// where every one is channels_last (both ignoring the strides of size-1 dims, which
// at::empty_like copies: (2, 4, 1) with strides (4, 1, 8) gives (4, 1, 1)), the inputs' strides
// where they are dense and equal, else the inputs' dim order. For the hand-written kernels
// whose CPU counterparts allocate through a TensorIterator (relu, isnan, the losses).
at::Tensor empty_like_iter(std::initializer_list<at::Tensor> inputs, at::ScalarType dtype);

// `r` laid out as `dst` (same shape): r itself where their strides agree, else dst with r
// copied into it. For composite kernels whose last op's layout differs from CPU's result's.
at::Tensor laid_out_as(const at::Tensor& r, const at::Tensor& dst);

// `t` without its repeated elements: each expanded dim (stride 0, size > 1) narrowed to one.
at::Tensor distinct_elements(const at::Tensor& t);

// out.copy_(src), except into an `out` whose elements share memory (expanded), which copy_
// refuses: each shared element receives the last value written to it (the last slice of src
// along each expanded dim), as CPU's serial loops leave it in the kernels that write such an
// out= tensor without refusing it (structured.h: WritesOverlapping). For the copy of a result
// computed in a temporary back into the tensor the op writes.
void copy_written(const at::Tensor& out, const at::Tensor& src);

// Whether the out= tensor `out` shares memory with one of `inputs` (fully, partially, or as
// far as ATen's overlap test can tell), so that a kernel writing it would read what it has
// already written: the caller then computes into a fresh tensor and copies it over. Where
// `refuse` (CPU's kernel refuses it), a partial overlap raises ATen's "unsupported operation:
// some elements of the input tensor and the written-to tensor refer to a single memory
// location" (at::assert_no_partial_overlap) first.
bool out_overlaps(const at::Tensor& out, at::ArrayRef<at::Tensor> inputs, bool refuse);

// ATen's resize_output of an out= tensor, then the refusal of one whose elements share memory
// (expanded) that CPU's out= kernels make (at::assert_no_internal_overlap): for kernels that
// write `out` themselves, not through a structured meta (structured.h) or a copy_ (which check).
void resize_out(const at::Tensor& out, at::IntArrayRef sizes);

// The out= form of a kernel that computes its result `r` apart: the checks CPU's out= kernels
// make (out on r's device, with PyTorch's "Expected all tensors to be on the same device"
// naming `op`; r's dtype castable to out's, ATen's "result type X can't be cast to the desired
// output type Y"), ATen's resize_output, then the copy (which refuses an expanded out).
at::Tensor& result_into(const char* op, const at::Tensor& r, at::Tensor& out);

// Runs the ATen op `name`.`overload` through the visible CPU fallback on a boxed stack of
// arguments (results replace them): for configurations a native kernel does not cover.
void run_cpu_fallback(const char* name, const char* overload, std::vector<c10::IValue>& stack);

// Emits a UserWarning whose text is exactly `msg`. The Python module installs a handler
// that raises it as a Python warning (filters apply; no C++ source location appended);
// without one it goes through TORCH_WARN.
// kind: what the warning is about; the handler may decline a float64 warning caused by
// PyTorch's own code (GradScaler's float64 scale arithmetic), returning false (not emitted).
enum class WarningKind { kFallback = 0, kFloat64 = 1 };
using WarningHandler = bool (*)(const std::string& msg, WarningKind kind);
void set_warning_handler(WarningHandler handler);
bool user_warning(const std::string& msg, WarningKind kind);

// Emits the one-per-process warning of the float64 device rule.
void warn_float64(const char* op);

// Registers hooks, guard, allocator and generators (once; after the Python-side check that
// the PrivateUse1 slot is free).
void register_backend();

// Waits until PyTorch's autograd device threads for neuron hold no GraphTask (called at
// Python exit with the GIL released; see device.cpp).
void flush_autograd_device_threads();

// Generator state (Philox seed and offset) of `device`'s default generator.
at::Generator& default_generator(c10::DeviceIndex device);
// Reserves `numel` elements of Philox counters for a draw into a tensor on `device`: returns
// (seed, offset before the draw). A tensor not on neuron (a CPU op handed a neuron generator,
// which dispatches here by the generator's key) raises ATen's generator device error.
std::pair<uint64_t, uint64_t> philox_reserve(const std::optional<at::Generator>& gen, const c10::Device& device,
                                             int64_t numel);

// Pinned (page-locked stand-in) host allocator.
at::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* p);

// Grows `storage` to `new_bytes`, keeping its contents (stream-ordered copy).
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);

}  // namespace torch_neuronx
