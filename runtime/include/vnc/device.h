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
/* Threads of the kernel thread pool (the machine's online CPUs, or TORCH_NEURONX_NUM_THREADS). */
int vnc_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif
