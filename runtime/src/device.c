/* The device table: count, capacity, one-time initialisation, fork detection. */
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"

static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static int device_total = 0;           /* visible cores; 0 if a setting is malformed */
static int physical_ids[VNC_MAX_DEVICES];
static char table_error[256] = "";

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int initialized = 0;
static atomic_int bad_fork = 0;
static atomic_int pool_threads = 1;
static atomic_int threads_override = 0; /* vnc_set_num_threads before init */
static int launch_blocking = 0;
static _Thread_local int current_device = 0;

uint64_t vnc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Parses "0-3", "1,3", "0,2-3" into physical_ids; returns count or -1. */
static int parse_core_list(const char *s) {
  int n = 0;
  const char *p = s;
  while (*p) {
    while (isspace((unsigned char)*p)) p++;
    if (!isdigit((unsigned char)*p)) return -1;
    char *end;
    long a = strtol(p, &end, 10), b = a;
    p = end;
    if (*p == '-') {
      p++;
      if (!isdigit((unsigned char)*p)) return -1;
      b = strtol(p, &end, 10);
      p = end;
    }
    if (b < a) return -1;
    for (long v = a; v <= b; v++) {
      if (n >= VNC_MAX_DEVICES) return -1;
      for (int i = 0; i < n; i++)
        if (physical_ids[i] == v) return -1; /* a core listed twice */
      physical_ids[n++] = (int)v;
    }
    while (isspace((unsigned char)*p)) p++;
    if (*p == ',') p++;
    else if (*p) return -1;
  }
  return n;
}

/* Parses "123", "4G", "512M", "1.5G" into bytes; 0 on error. */
static uint64_t parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v <= 0) return 0;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
  }
  if (toupper((unsigned char)*end) == 'I') end++;
  if (toupper((unsigned char)*end) == 'B') end++;
  if (*end) return 0;
  return (uint64_t)(v * mult);
}

/* Whether the integer setting `name`, when set, lies in [lo, hi]; else the table error. */
static int env_int_ok(const char *name, long lo, long hi) {
  const char *v = getenv(name);
  if (!v || !*v) return 1;
  char *end;
  long n = strtol(v, &end, 10);
  if (!*end && n >= lo && n <= hi) return 1;
  snprintf(table_error, sizeof table_error, "%s='%s' must be an integer from %ld to %ld", name, v, lo, hi);
  return 0;
}

/* The process's other settings (the runtime's and the PyTorch glue's), checked once with the
 * device table: a malformed value makes every device use raise naming it, rather than being
 * ignored. (The glue reads TORCH_NEURONX_BLAS while Python imports it: an unknown provider
 * must not fail `import torch` for CPU-only scripts, so it is refused here.) */
static int settings_ok(void) {
  const char *mem = getenv("TORCH_NEURONX_CORE_MEMORY");
  if (mem && *mem && !parse_bytes(mem)) {
    snprintf(table_error, sizeof table_error,
             "TORCH_NEURONX_CORE_MEMORY='%s' is not a size such as '8G', '512M' or a byte count", mem);
    return 0;
  }
  const char *blas = getenv("TORCH_NEURONX_BLAS");
  if (blas && *blas && strcmp(blas, "mkl") != 0 && strcmp(blas, "openblas") != 0) {
    snprintf(table_error, sizeof table_error, "TORCH_NEURONX_BLAS='%s' is not one of mkl, openblas", blas);
    return 0;
  }
  return env_int_ok("TORCH_NEURONX_NUM_THREADS", 1, 1024) &&
         env_int_ok("TORCH_NEURONX_PLAN_CACHE_SIZE", 1, 1L << 30) && env_int_ok("NEURON_LAUNCH_BLOCKING", 0, 1) &&
         env_int_ok("TORCH_NEURONX_STRICT", 0, 1) && env_int_ok("TORCH_NEURONX_FALLBACK_LIST_CAP", 1, 1L << 40);
}

static void build_table(void) {
  const char *visible = getenv("NEURON_RT_VISIBLE_CORES");
  const char *num = getenv("NEURON_RT_NUM_CORES");
  if (visible && *visible) {
    int n = parse_core_list(visible);
    if (n <= 0) {
      snprintf(table_error, sizeof table_error,
               "NEURON_RT_VISIBLE_CORES='%s' is not a core list such as '0-3' or '1,3' "
               "(distinct cores, at most %d)", visible, VNC_MAX_DEVICES);
      n = 0;
    }
    device_total = n;
  } else if (num && *num) {
    char *end;
    long n = strtol(num, &end, 10);
    if (*end || n < 1 || n > VNC_MAX_DEVICES) {
      snprintf(table_error, sizeof table_error,
               "NEURON_RT_NUM_CORES='%s' must be an integer from 1 to %d", num, VNC_MAX_DEVICES);
      n = 0;
    }
    device_total = (int)n;
    for (int i = 0; i < device_total; i++) physical_ids[i] = i;
  } else {
    device_total = 2;
    physical_ids[0] = 0;
    physical_ids[1] = 1;
  }
  if (device_total > 0 && !settings_ok()) device_total = 0;
  const char *lb = getenv("NEURON_LAUNCH_BLOCKING");
  launch_blocking = lb && strcmp(lb, "1") == 0;
}

int vnc_device_count(void) {
  pthread_once(&table_once, build_table);
  return device_total;
}

int vnc_device_physical_id(int device) {
  if (vnc_check_device(device) != VNC_OK) return -1;
  return physical_ids[device];
}

vnc_status vnc_check_device(int device) {
  int n = vnc_device_count();
  if (n == 0) return vnc_set_error(VNC_ERR_INVALID_DEVICE, "no neuron device: %s", table_error);
  if (device < 0 || device >= n)
    return vnc_set_error(VNC_ERR_INVALID_DEVICE,
                         "invalid neuron device index %d: valid range is 0 to %d", device, n - 1);
  return VNC_OK;
}

uint64_t vnc_device_capacity(int device) {
  (void)device;
  const char *env = getenv("TORCH_NEURONX_CORE_MEMORY");
  if (env && *env) {
    uint64_t b = parse_bytes(env);
    if (b) return b;
  }
  /* 24 GiB: one logical core's share of a Trn2 chip's 96 GiB HBM. */
  uint64_t cap = 24ull << 30;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  int n = vnc_device_count();
  if (pages > 0 && page > 0 && n > 0) {
    uint64_t host_share = (uint64_t)pages * (uint64_t)page / 2 / (uint64_t)n;
    if (host_share < cap) cap = host_share;
  }
  return cap;
}

static void after_fork_child(void) {
  if (atomic_load(&initialized)) {
    atomic_store(&bad_fork, 1);
    atomic_store(&initialized, 0);
  }
  pthread_mutex_init(&init_lock, NULL);
}

/* TORCH_NEURONX_NUM_THREADS, else OMP_NUM_THREADS (what torchrun sets per rank and what
 * PyTorch's own pool follows), else the online CPUs. */
static int read_num_threads(void) {
  const char *vars[2] = {"TORCH_NEURONX_NUM_THREADS", "OMP_NUM_THREADS"};
  for (int i = 0; i < 2; i++) {
    const char *env = getenv(vars[i]);
    if (env && *env) {
      long v = strtol(env, NULL, 10);
      if (v >= 1 && v <= 1024) return (int)v;
    }
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

vnc_status vnc_init(void) {
  if (atomic_load_explicit(&initialized, memory_order_acquire)) return VNC_OK;
  if (atomic_load(&bad_fork))
    return vnc_set_error(VNC_ERR_FORKED,
                         "Cannot re-initialize neuron in forked subprocess. To use neuron with "
                         "multiprocessing, you must use the 'spawn' start method");
  int n = vnc_device_count();
  if (n == 0) return vnc_set_error(VNC_ERR_INVALID_DEVICE, "no neuron device: %s", table_error);
  pthread_mutex_lock(&init_lock);
  if (!atomic_load(&initialized)) {
    char err[160];
    if (vnc_tier_init(err, sizeof err) != 0) {
      pthread_mutex_unlock(&init_lock);
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s", err);
    }
    static int atfork_registered = 0;
    if (!atfork_registered) {
      pthread_atfork(NULL, NULL, after_fork_child);
      atfork_registered = 1;
    }
    const int want = atomic_load(&threads_override) > 0 ? atomic_load(&threads_override) : read_num_threads();
    atomic_store(&pool_threads, vnc_threadpool_resize(want));
    for (int d = 0; d < n; d++) {
      vnc_memory_init_device(d);
      vnc_stream_init_device(d);
    }
    atomic_store_explicit(&initialized, 1, memory_order_release);
  }
  pthread_mutex_unlock(&init_lock);
  return VNC_OK;
}

int vnc_is_initialized(void) { return atomic_load(&initialized); }
int vnc_in_bad_fork(void) { return atomic_load(&bad_fork); }

int vnc_get_device(void) { return current_device; }

vnc_status vnc_set_device(int device) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK) return st;
  current_device = device;
  return VNC_OK;
}

int vnc_launch_blocking(void) {
  pthread_once(&table_once, build_table);
  return launch_blocking;
}

int vnc_num_threads(void) {
  const int set = atomic_load(&threads_override);
  return vnc_is_initialized() ? atomic_load(&pool_threads) : set > 0 ? set : read_num_threads();
}

vnc_status vnc_set_num_threads(int n) {
  if (n < 1 || n > 1024)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "set_num_threads: %d threads (1 to 1024 allowed)", n);
  pthread_mutex_lock(&init_lock);
  atomic_store(&threads_override, n);
  if (atomic_load(&initialized)) atomic_store(&pool_threads, vnc_threadpool_resize(n));
  pthread_mutex_unlock(&init_lock);
  return VNC_OK;
}
