/* The JIT back end: compile generated C with the system compiler, keep the objects in a
 * content-addressed on-disk cache, load them with dlopen, run graphs as stream tasks. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../internal.h"
#include "vnc/jit_graph.h"

extern char **environ;

struct vnc_jit_module {
  struct vnc_jit_module *next;
  atomic_int refs;
  void *handle;
  char key[65];
  char *path;
};

static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;
static vnc_jit_module *modules; /* loaded modules, by key */
static vnc_jit_stats stats;

/* ---------------------------------------------------------------- growable byte buffer */

typedef struct buf {
  char *p;
  size_t n, cap;
} buf;

static int buf_put(buf *b, const void *data, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, data, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}
static int buf_str(buf *b, const char *s) { return buf_put(b, s, strlen(s) + 1); } /* with its NUL */
static int buf_cat(buf *b, const char *s) { return buf_put(b, s, strlen(s)); }      /* without */

static int buf_file(buf *b, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  char chunk[8192];
  size_t n;
  int rc = 0;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    if (buf_put(b, chunk, n)) rc = -1;
  fclose(f);
  return rc;
}

/* The flags of every compile (the caller's tier flags follow); part of the cache key.
 * -fno-math-errno and -fno-trapping-math change no value (the runtime's kernels are built with
 * them too) and let selects and sqrt vectorise. */
static const char FIXED_FLAGS[] =
    "-std=c11 -O3 -fPIC -shared -ffp-contract=off -fwrapv -fno-math-errno -fno-trapping-math -fvisibility=hidden "
    "-Wl,-z,defs -DVNC_JIT_GENERATED";

/* ---------------------------------------------------------------- paths */

#define PATHBUF 4096

/* Formats a path into out[PATHBUF]; -1 when it does not fit. */
static int pathf(char *out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, PATHBUF, fmt, ap);
  va_end(ap);
  return n < 0 || n >= PATHBUF ? -1 : 0;
}

/* ---------------------------------------------------------------- key parts */

const char *vnc_jit_compiler(void) {
  const char *cc = getenv("CC");
  return cc && *cc ? cc : "cc";
}

/* The first word of $CC resolved on PATH, with its size and mtime: identifies the compiler
 * without running it (a warm cache runs no compiler at all). */
static void compiler_identity(buf *b) {
  char first[512];
  snprintf(first, sizeof first, "%s", vnc_jit_compiler());
  char *sp = strchr(first, ' ');
  if (sp) *sp = 0;
  char path[PATHBUF] = "";
  if (strchr(first, '/')) {
    pathf(path, "%s", first);
  } else {
    const char *env = getenv("PATH");
    char dirs[8192];
    snprintf(dirs, sizeof dirs, "%s", env ? env : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
      char cand[PATHBUF];
      if (!pathf(cand, "%s/%s", d, first) && access(cand, X_OK) == 0) {
        pathf(path, "%s", cand);
        break;
      }
    }
  }
  char real[PATHBUF], line[8192];
  struct stat st;
  if (path[0] && realpath(path, real) && stat(real, &st) == 0)
    snprintf(line, sizeof line, "%s|%s|%lld|%lld.%09ld", vnc_jit_compiler(), real, (long long)st.st_size,
             (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
  else
    snprintf(line, sizeof line, "%s|unresolved", vnc_jit_compiler());
  buf_str(b, line);
}

static int name_cmp(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

/* Every header under `dir` (two levels), by relative name and contents, in name order. */
static void headers_of(buf *b, const char *dir, const char *rel, int depth) {
  struct dirent **names;
  char full[PATHBUF];
  if (pathf(full, "%s%s%s", dir, rel[0] ? "/" : "", rel)) return;
  int n = scandir(full, &names, NULL, name_cmp);
  if (n < 0) return;
  for (int i = 0; i < n; i++) {
    const char *nm = names[i]->d_name;
    char sub[PATHBUF], path[4096];
    struct stat st;
    size_t len = strlen(nm);
    int ok = !pathf(sub, "%s%s%s", rel, rel[0] ? "/" : "", nm) && !pathf(path, "%s/%s", dir, sub);
    if (ok && nm[0] != '.' && stat(path, &st) == 0) {
      if (S_ISDIR(st.st_mode) && depth > 0) {
        headers_of(b, dir, sub, depth - 1);
      } else if (S_ISREG(st.st_mode) && len > 2 && strcmp(nm + len - 2, ".h") == 0) {
        buf_str(b, sub);
        buf_file(b, path);
        buf_put(b, "", 1);
      }
    }
    free(names[i]);
  }
  free(names);
}

/* ---------------------------------------------------------------- files */

static int mkdirs(const char *path) {
  char tmp[PATHBUF];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Writes `data` to `path` through a unique temporary file and rename (atomic). */
static int write_atomic(const char *path, const char *data, size_t n) {
  char tmp[PATHBUF];
  if (pathf(tmp, "%s.tmp-%ld-%lx", path, (long)getpid(), (unsigned long)vnc_now_ns())) return -1;
  FILE *f = fopen(tmp, "wb");
  if (!f) return -1;
  int ok = fwrite(data, 1, n, f) == n;
  ok &= fclose(f) == 0;
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* ---------------------------------------------------------------- compile */

/* Runs the compiler; on failure returns -1 with its first error lines in `errors`. */
static int run_compiler(const vnc_jit_options *o, const char *src, const char *out, char *errors, size_t cap) {
  buf cmd = {0};
  buf_cat(&cmd, vnc_jit_compiler());
  buf_cat(&cmd, " ");
  buf_cat(&cmd, FIXED_FLAGS);
  for (int i = 0; i < o->n_include_dirs; i++) {
    buf_cat(&cmd, " -I");
    buf_cat(&cmd, o->include_dirs[i]);
  }
  if (o->cflags && *o->cflags) {
    buf_cat(&cmd, " ");
    buf_cat(&cmd, o->cflags);
  }
  if (!cmd.p) {
    snprintf(errors, cap, "out of host memory");
    return -1;
  }
  /* argv by splitting on spaces (paths with spaces are not supported in CC or flags) */
  char *argv[256];
  int argc = 0;
  for (char *save = NULL, *w = strtok_r(cmd.p, " ", &save); w && argc < 248; w = strtok_r(NULL, " ", &save))
    argv[argc++] = w;
  argv[argc++] = "-o";
  argv[argc++] = (char *)out;
  argv[argc++] = (char *)src;
  argv[argc++] = "-lm";
  argv[argc] = NULL;

  char errpath[PATHBUF];
  pathf(errpath, "%s.err", out); /* out is shorter than PATHBUF - 8 (the caller checks) */
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  uint64_t t0 = vnc_now_ns();
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  if (rc == 0) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pthread_mutex_lock(&jit_lock);
  stats.compiles++;
  stats.compile_seconds += (double)(vnc_now_ns() - t0) * 1e-9;
  pthread_mutex_unlock(&jit_lock);
  if (rc != 0) {
    snprintf(errors, cap, "could not run the C compiler '%s': %s (set CC to a C11 compiler)", argv[0], strerror(rc));
    free(cmd.p);
    unlink(errpath);
    return -1;
  }
  int failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  if (failed) {
    int n = snprintf(errors, cap, "'%s' exited with status %d:\n", argv[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    FILE *f = fopen(errpath, "r");
    char line[512];
    for (int lines = 0; f && lines < 12 && fgets(line, sizeof line, f) && (size_t)n < cap; lines++)
      n += snprintf(errors + n, cap - (size_t)n, "  %s", line);
    if (f) fclose(f);
  }
  unlink(errpath);
  free(cmd.p);
  return failed ? -1 : 0;
}

static vnc_status load(const char *path, const char *key, vnc_jit_module **out) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return vnc_set_error(VNC_ERR_INTERNAL, "could not load generated code %s: %s", path, dlerror());
  int (*bind)(const vnc_jit_api *) = (int (*)(const vnc_jit_api *))dlsym(h, "vnc_jit_bind");
  if (bind && bind(vnc_jit_api_table()) != 0) {
    dlclose(h);
    return vnc_set_error(VNC_ERR_INTERNAL, "generated code %s was built for another runtime API version", path);
  }
  vnc_jit_module *m = calloc(1, sizeof *m);
  if (!m || !(m->path = strdup(path))) {
    free(m);
    dlclose(h);
    return vnc_set_error(VNC_ERR_INTERNAL, "out of host memory");
  }
  m->handle = h;
  atomic_init(&m->refs, 1);
  snprintf(m->key, sizeof m->key, "%s", key);
  m->next = modules;
  modules = m;
  stats.loaded++;
  *out = m;
  return VNC_OK;
}

/* Compiles `source` (written to src) into the cache entry so (through a temporary file and rename). */
static vnc_status build(const vnc_jit_options *o, const char *source, const char *src, const char *so) {
  if (write_atomic(src, source, strlen(source)) != 0)
    return vnc_set_error(VNC_ERR_INTERNAL, "could not write %s: %s", src, strerror(errno));
  char tmp[PATHBUF], errors[4096] = "";
  pathf(tmp, "%s.tmp-%ld-%lx.so", so, (long)getpid(), (unsigned long)vnc_now_ns()); /* fits: checked by the caller */
  if (run_compiler(o, src, tmp, errors, sizeof errors) != 0) {
    unlink(tmp);
    return vnc_set_error(VNC_ERR_KERNEL, "C compilation of %s failed: %s\ngenerated source kept at %s",
                         o->name ? o->name : "generated code", errors, src);
  }
  if (rename(tmp, so) != 0) {
    unlink(tmp);
    return vnc_set_error(VNC_ERR_INTERNAL, "could not store %s: %s", so, strerror(errno));
  }
  return VNC_OK;
}

vnc_status vnc_jit_compile(const char *source, const vnc_jit_options *o, vnc_jit_module **out, int *cache_hit) {
  if (!source || !o || !o->cache_dir || !out)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "vnc_jit_compile: source, options.cache_dir and out are required");
  *out = NULL;
  if (cache_hit) *cache_hit = 0;
  buf key_in = {0};
  buf_str(&key_in, source);
  buf_str(&key_in, FIXED_FLAGS);
  buf_str(&key_in, o->cflags ? o->cflags : "");
  char api[64];
  snprintf(api, sizeof api, "api %d size %zu", VNC_JIT_API_VERSION, sizeof(vnc_jit_api));
  buf_str(&key_in, api);
  compiler_identity(&key_in);
  for (int i = 0; i < o->n_include_dirs; i++) headers_of(&key_in, o->include_dirs[i], "", 2);
  if (!key_in.p) return vnc_set_error(VNC_ERR_INTERNAL, "out of host memory");
  char key[65];
  vnc_sha256_hex(key_in.p, key_in.n, key);
  free(key_in.p);

  pthread_mutex_lock(&jit_lock);
  for (vnc_jit_module *m = modules; m; m = m->next) {
    if (strcmp(m->key, key) == 0) {
      atomic_fetch_add(&m->refs, 1);
      stats.memory_hits++;
      pthread_mutex_unlock(&jit_lock);
      if (cache_hit) *cache_hit = 1;
      *out = m;
      return VNC_OK;
    }
  }
  pthread_mutex_unlock(&jit_lock);

  char dir[PATHBUF], so[4200], src[4200];
  if (pathf(dir, "%s/%.2s", o->cache_dir, key) || pathf(so, "%s/%s.so", dir, key) || pathf(src, "%s/%s.c", dir, key) ||
      strlen(so) + 64 > PATHBUF)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "compile cache directory path too long: %s", o->cache_dir);
  if (mkdirs(dir) != 0)
    return vnc_set_error(VNC_ERR_INTERNAL, "could not create the compile cache directory %s: %s", dir, strerror(errno));
  if (o->keep_dir && *o->keep_dir) {
    char kept[PATHBUF];
    if (!pathf(kept, "%s/%s.c", o->keep_dir, o->name ? o->name : key) && mkdirs(o->keep_dir) == 0)
      write_atomic(kept, source, strlen(source));
  }
  int hit = access(so, R_OK) == 0;
  vnc_status st = hit ? VNC_OK : build(o, source, src, so);
  if (st != VNC_OK) return st;
  pthread_mutex_lock(&jit_lock);
  st = load(so, key, out);
  if (st == VNC_OK && hit) stats.disk_hits++;
  pthread_mutex_unlock(&jit_lock);
  if (st != VNC_OK && hit) {
    /* a damaged cache entry (truncated by a full disk or a killed copy, overwritten): the
     * cache may be deleted at any time, so it is rebuilt rather than failing every run */
    unlink(so);
    hit = 0;
    st = build(o, source, src, so);
    if (st != VNC_OK) return st;
    pthread_mutex_lock(&jit_lock);
    st = load(so, key, out);
    pthread_mutex_unlock(&jit_lock);
  }
  if (cache_hit) *cache_hit = hit;
  return st;
}

void *vnc_jit_symbol(vnc_jit_module *m, const char *name) { return m ? dlsym(m->handle, name) : NULL; }
const char *vnc_jit_key(const vnc_jit_module *m) { return m ? m->key : ""; }
const char *vnc_jit_path(const vnc_jit_module *m) { return m ? m->path : ""; }
void vnc_jit_module_retain(vnc_jit_module *m) {
  if (m) atomic_fetch_add(&m->refs, 1);
}

void vnc_jit_module_release(vnc_jit_module *m) {
  if (!m) return;
  pthread_mutex_lock(&jit_lock);
  if (atomic_fetch_sub(&m->refs, 1) == 1) {
    for (vnc_jit_module **p = &modules; *p; p = &(*p)->next) {
      if (*p == m) {
        *p = m->next;
        break;
      }
    }
    stats.loaded--;
    dlclose(m->handle);
    free(m->path);
    free(m);
  }
  pthread_mutex_unlock(&jit_lock);
}

void vnc_jit_get_stats(vnc_jit_stats *out) {
  pthread_mutex_lock(&jit_lock);
  *out = stats;
  pthread_mutex_unlock(&jit_lock);
}

/* ---------------------------------------------------------------- launch */

typedef struct graph_task {
  vnc_jit_module *m;
  vnc_jit_graph_fn fn;
  vnc_stream *s;
  int64_t nbufs;
  char *bufs[];
} graph_task;

static vnc_status graph_run(void *p) {
  graph_task *t = p;
  return t->fn(t->s, t->bufs);
}

static void graph_release(void *p) { vnc_jit_module_release(((graph_task *)p)->m); }

vnc_status vnc_jit_launch(vnc_stream *s, const char *op, vnc_jit_module *m, vnc_jit_graph_fn fn, char *const *bufs,
                          int64_t nbufs) {
  if (!s || !m || !fn || nbufs < 0 || (nbufs && !bufs))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "vnc_jit_launch: stream, module, function and buffers are required");
  size_t size = sizeof(graph_task) + (size_t)nbufs * sizeof(char *);
  graph_task *t = malloc(size);
  if (!t) return vnc_set_error(VNC_ERR_INTERNAL, "%s: out of host memory for a task", op);
  t->m = m;
  t->fn = fn;
  t->s = s;
  t->nbufs = nbufs;
  if (nbufs) memcpy(t->bufs, bufs, (size_t)nbufs * sizeof(char *));
  vnc_jit_module_retain(m);
  vnc_status st = vnc_launch(s, op, graph_run, t, size, graph_release);
  free(t);
  return st;
}

/* ---------------------------------------------------------------- the API table */

static vnc_jit_api api_table;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void fill_api(void) {
  api_table.version = VNC_JIT_API_VERSION;
  api_table.size = sizeof api_table;
#define VNC_JIT_API_FILL(name) api_table.name = vnc_##name;
  VNC_JIT_API(VNC_JIT_API_FILL)
#undef VNC_JIT_API_FILL
}

const vnc_jit_api *vnc_jit_api_table(void) {
  pthread_once(&api_once, fill_api);
  return &api_table;
}
