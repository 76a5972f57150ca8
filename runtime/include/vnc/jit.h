/* vnc/jit.h — the runtime's one code generator back end: C source in, loaded code out.
 *
 * Generated C11 (from torch.compile graphs today; from eager fusion and user kernels later)
 * is compiled by the system C compiler (`CC`, default `cc`) into a shared object, stored in a
 * content-addressed on-disk cache and loaded with dlopen. The cache key is the SHA-256 of the
 * source, the flags, the compiler's identity (resolved path, size and modification time of
 * its driver) and the contents of every header in the include directories, so a changed
 * header, compiler or flag never reuses stale code. Writes are atomic (temporary file +
 * rename): concurrent processes never load a half-written object. A warm cache runs the
 * compiler zero times.
 *
 * Generated code reaches the runtime through a table of function pointers (vnc/jit_graph.h),
 * not through symbol lookup, so it loads into any process that links the runtime.
 *
 *     vnc_jit_options o = {.cache_dir = "/tmp/cache", .include_dirs = dirs, .n_include_dirs = 1};
 *     vnc_jit_module *m;
 *     if (vnc_jit_compile(src, &o, &m, NULL) != VNC_OK) puts(vnc_last_error());
 *     vnc_jit_graph_fn f = (vnc_jit_graph_fn)vnc_jit_symbol(m, "graph_0");
 *     vnc_jit_launch(stream, "compiled_graph", m, f, bufs, nbufs);  // one task on the stream
 *     vnc_jit_module_release(m);                                      // the task holds its own ref
 */
#ifndef VNC_JIT_H
#define VNC_JIT_H

#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vnc_jit_module vnc_jit_module;

/* Entry point of a generated graph: runs inside one task on `s` (runtime calls it makes on
 * `s` execute inline, in order). bufs[k] is the base address of buffer k. */
typedef vnc_status (*vnc_jit_graph_fn)(vnc_stream *s, char *const *bufs);

typedef struct vnc_jit_options {
  const char *cache_dir;             /* required; created if missing */
  const char *const *include_dirs;   /* -I directories; their headers are part of the key */
  int n_include_dirs;
  const char *cflags;                /* extra flags, space separated (tier flags); may be NULL */
  const char *name;                  /* label used in kept file names and errors; may be NULL */
  const char *keep_dir;              /* when set, the source is also written there */
} vnc_jit_options;

/* Compiles (or finds in the cache) `source` and loads it; *out holds one reference.
 * *cache_hit (may be NULL) is 1 when no compiler ran. On a compiler failure returns
 * VNC_ERR_KERNEL with the compiler's first error lines and the path of the kept source. */
vnc_status vnc_jit_compile(const char *source, const vnc_jit_options *opts, vnc_jit_module **out,
                           int *cache_hit);
/* Address of an exported symbol of the module, or NULL. */
void *vnc_jit_symbol(vnc_jit_module *m, const char *name);
/* Hex SHA-256 cache key of the module (65 bytes with the terminator). */
const char *vnc_jit_key(const vnc_jit_module *m);
/* Path of the loaded shared object. */
const char *vnc_jit_path(const vnc_jit_module *m);
void vnc_jit_module_retain(vnc_jit_module *m);
/* Drops a reference; the module is unloaded when none is left. */
void vnc_jit_module_release(vnc_jit_module *m);

/* Enqueues fn(s, bufs) as one task on `s`; the task keeps `m` loaded until it has run.
 * `nbufs` addresses are copied. `op` names the graph in errors. */
vnc_status vnc_jit_launch(vnc_stream *s, const char *op, vnc_jit_module *m, vnc_jit_graph_fn fn,
                          char *const *bufs, int64_t nbufs);

typedef struct vnc_jit_stats {
  int64_t compiles;       /* compiler runs (successful or not) */
  int64_t disk_hits;      /* objects found in the on-disk cache */
  int64_t memory_hits;    /* modules already loaded in this process */
  int64_t loaded;         /* modules loaded now */
  double compile_seconds; /* wall time spent in the compiler */
} vnc_jit_stats;
void vnc_jit_get_stats(vnc_jit_stats *out);

/* The C compiler the JIT runs: $CC or "cc". */
const char *vnc_jit_compiler(void);

/* Hex SHA-256 (FIPS 180-4) of `n` bytes into hex[65]. Exposed for tests. */
void vnc_sha256_hex(const void *data, size_t n, char hex[65]);

#ifdef __cplusplus
}
#endif
#endif
