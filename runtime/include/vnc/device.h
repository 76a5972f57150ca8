/* vnc/device.h — the table of virtual NeuronCores.
 *
 * The device count comes from NEURON_RT_VISIBLE_CORES ("0-3", "1,3") or
 * NEURON_RT_NUM_CORES (default 2). Reading the count does not initialise anything; the
 * first allocation, stream or launch does (vnc_init), which starts the worker threads.
 *
 *     int n = vnc_device_count();
 *     if (vnc_set_device(1) != VNC_OK) puts(vnc_last_error());   // "... valid range 0 to 1"
 */
#ifndef VNC_DEVICE_H
#define VNC_DEVICE_H

#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible cores (0 when the env var is malformed; the message says why). */
int vnc_device_count(void);
/* Physical core ids the visible devices map to ("neuron:0" -> first listed core). */
int vnc_device_physical_id(int device);
/* Memory capacity of one core in bytes: TORCH_NEURONX_CORE_MEMORY if set (bytes, or with a
 * K/M/G/T suffix), else min(24 GiB, physical memory / 2 / device count). */
uint64_t vnc_device_capacity(int device);

/* VNC_OK if 0 <= device < count, else VNC_ERR_INVALID_DEVICE with the valid range. */
vnc_status vnc_check_device(int device);

/* Starts the runtime once (thread pool, per-core state). Idempotent and thread-safe.
 * Fails with VNC_ERR_FORKED in a child of fork() whose parent had initialised it. */
vnc_status vnc_init(void);
/* 1 after a successful vnc_init in this process. */
int vnc_is_initialized(void);
/* 1 in a forked child whose parent had initialised the runtime. */
int vnc_in_bad_fork(void);

/* The calling thread's current device (default 0). */
int vnc_get_device(void);
vnc_status vnc_set_device(int device);

/* NEURON_LAUNCH_BLOCKING=1: every launch runs before it returns. */
int vnc_launch_blocking(void);
/* Threads of the kernel thread pool: TORCH_NEURONX_NUM_THREADS, else OMP_NUM_THREADS, else
 * the machine's online CPUs; vnc_set_num_threads changes it (torch_neuronx keeps it equal to
 * torch.get_num_threads()). */
int vnc_num_threads(void);
/* Sets the threads kernels (and BLAS) use from the next kernel on, 1 to 1024; before init it
 * sets the size the pool starts with. VNC_ERR_INVALID_ARGUMENT outside that range. */
vnc_status vnc_set_num_threads(int n);

/* CPU tier of the kernels: "avx512" (x86-64-v4), "avx2" (x86-64-v3) or "baseline" (x86-64
 * SSE2, and every non-x86 build). vnc_init picks the best tier the CPU supports, capped by
 * TORCH_NEURONX_ISA=avx512|avx2|baseline (init fails on another value). Every tier computes
 * the same bits; only speed differs. */
const char *vnc_cpu_isa(void);
/* 1 if this CPU can run tier `name`. */
int vnc_cpu_isa_supported(const char *name);
/* Switches the tier for kernels that start afterwards (tests and benchmarks compare tiers in
 * one process). VNC_ERR_INVALID_ARGUMENT for an unknown name, VNC_ERR_UNSUPPORTED for a
 * tier the CPU lacks. */
vnc_status vnc_set_cpu_isa(const char *name);

#ifdef __cplusplus
}
#endif
#endif
