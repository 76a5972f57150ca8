/* The JIT: SHA-256 test vectors, compile + cache (memory and disk), generated graphs running as
 * one task that calls runtime kernels inline, compiler errors, errors inside a graph. */
#include <stdlib.h>
#include <unistd.h>
#include "check.h"
#include "vnc/ew_scalar.h"
#include "vnc/jit.h"

/* A graph: out[i] = gelu(a[i] + 2 * b[i]) by the table's bodies, then out2 = fill(7) through
 * the runtime (inline, in order), then out3 = out (a runtime copy reading the first result). */
static const char *SRC =
    "#include \"vnc/jit_graph.h\"\n"
    "static const vnc_ew_params P0 = {.f = {2.0}, .i = {2}};\n"
    "static void loop0(void *ctx, char **d, const int64_t *st, int64_t n, int64_t index) {\n"
    "  (void)ctx; (void)index;\n"
    "  for (int64_t i = 0; i < n; i++) {\n"
    "    float a = *(const float *)(d[1] + i * st[1]), b = *(const float *)(d[2] + i * st[2]);\n"
    "    float t = vnc_ew_add_F32(a, b, 0, &P0);\n"
    "    *(float *)(d[0] + i * st[0]) = vnc_ew_gelu_F32(t, 0, 0, &P0);\n"
    "  }\n"
    "}\n"
    "VNC_JIT_EXPORT vnc_status graph_0(vnc_stream *s, char *const *bufs) {\n"
    "  int64_t n[1] = {1000};\n"
    "  vnc_tensor o = vnc_rt->tensor_contiguous(bufs[0], VNC_FLOAT32, 1, n);\n"
    "  vnc_tensor a = vnc_rt->tensor_contiguous(bufs[1], VNC_FLOAT32, 1, n);\n"
    "  vnc_tensor b = vnc_rt->tensor_contiguous(bufs[2], VNC_FLOAT32, 1, n);\n"
    "  const vnc_tensor *ops[3] = {&o, &a, &b};\n"
    "  vnc_iter it;\n"
    "  VNC_JIT_TRY(vnc_rt->iter_init(&it, 3, ops, 0));\n"
    "  vnc_rt->iter_for_each(&it, loop0, NULL, VNC_ITER_GRAIN);\n"
    "  vnc_tensor o2 = vnc_rt->tensor_contiguous(bufs[3], VNC_FLOAT32, 1, n);\n"
    "  float seven = 7.0f;\n"
    "  VNC_JIT_TRY(vnc_rt->fill(s, \"aten::fill_\", &o2, &seven));\n"
    "  vnc_tensor o3 = vnc_rt->tensor_contiguous(bufs[4], VNC_FLOAT32, 1, n);\n"
    "  VNC_JIT_TRY(vnc_rt->copy(s, \"aten::copy_\", &o3, &o));\n"
    "  return VNC_OK;\n"
    "}\n"
    "VNC_JIT_EXPORT vnc_status graph_fail(vnc_stream *s, char *const *bufs) {\n"
    "  vnc_matrix m = {bufs[0], 0, 1, 1, VNC_BOOL};\n"
    "  VNC_JIT_TRY(vnc_rt->gemm(s, \"aten::mm\", 1, 1, 1, 1, 1.0, &m, &m, 0.0, &m));\n"
    "  return VNC_OK;\n"
    "}\n";

static float gelu_ref(float x) { return 0.5f * x * (1.0f + vnc_erff(x * 0.70710678118654752440f)); }

int main(void) {
  char hex[65];
  vnc_sha256_hex("abc", 3, hex);
  CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
  vnc_sha256_hex("", 0, hex);
  CHECK(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* FIPS 180-2 example */
  vnc_sha256_hex(two, strlen(two), hex);
  CHECK(strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);

  char cache[] = "/tmp/vnc_jit_test_XXXXXX";
  CHECK(mkdtemp(cache) != NULL);
  const char *dirs[2] = {VNC_SOURCE_DIR "/include", VNC_SOURCE_DIR "/src/kernels"};
  vnc_jit_options o = {.cache_dir = cache, .include_dirs = dirs, .n_include_dirs = 2, .name = "test_graph"};
  vnc_jit_stats st0, st1;
  vnc_jit_get_stats(&st0);
  vnc_jit_module *m = NULL;
  int hit = -1;
  CHECK_OK(vnc_jit_compile(SRC, &o, &m, &hit));
  CHECK(hit == 0);
  vnc_jit_get_stats(&st1);
  CHECK(st1.compiles == st0.compiles + 1);
  vnc_jit_graph_fn g = (vnc_jit_graph_fn)vnc_jit_symbol(m, "graph_0");
  CHECK(g != NULL);

  enum { N = 1000 };
  float *a = malloc(N * 4), *b = malloc(N * 4), *out = malloc(N * 4), *out2 = malloc(N * 4), *out3 = malloc(N * 4);
  for (int i = 0; i < N; i++) {
    a[i] = (float)i / 100.0f - 5.0f;
    b[i] = (float)(i % 7) / 3.0f - 1.0f;
  }
  vnc_stream *s;
  CHECK_OK(vnc_stream_get(0, 0, &s));
  char *bufs[5] = {(char *)out, (char *)a, (char *)b, (char *)out2, (char *)out3};
  CHECK_OK(vnc_jit_launch(s, "compiled_graph_0", m, g, bufs, 5));
  CHECK_OK(vnc_stream_synchronize(s));
  int bad = 0;
  for (int i = 0; i < N; i++) {
    float want = gelu_ref(a[i] + 2.0f * b[i]);
    bad += memcmp(&out[i], &want, 4) != 0 || out2[i] != 7.0f || memcmp(&out3[i], &out[i], 4) != 0;
  }
  CHECK(bad == 0);

  /* Same source again: already loaded (memory hit); after unloading: from disk, no compiler. */
  vnc_jit_module *m2 = NULL;
  CHECK_OK(vnc_jit_compile(SRC, &o, &m2, &hit));
  CHECK(hit == 1 && m2 == m);
  vnc_jit_module_release(m2);
  vnc_jit_module_release(m);
  vnc_jit_get_stats(&st0);
  CHECK_OK(vnc_jit_compile(SRC, &o, &m, &hit));
  vnc_jit_get_stats(&st1);
  CHECK(hit == 1 && st1.compiles == st0.compiles && st1.disk_hits == st0.disk_hits + 1);

  /* A runtime error inside the graph: sticky, named by the graph and the kernel. */
  vnc_jit_graph_fn gf = (vnc_jit_graph_fn)vnc_jit_symbol(m, "graph_fail");
  CHECK_OK(vnc_jit_launch(s, "compiled_graph_1", m, gf, bufs, 1));
  vnc_status err = vnc_stream_synchronize(s);
  CHECK(err != VNC_OK);
  CHECK(strstr(vnc_last_error(), "compiled_graph_1") != NULL);
  CHECK_OK(vnc_stream_synchronize(s)); /* cleared */
  vnc_jit_module_release(m);

  /* A compiler error: the compiler's message and the kept source's path. */
  vnc_jit_module *mb = NULL;
  err = vnc_jit_compile("int f(void) { return undefined_name; }\n", &o, &mb, NULL);
  CHECK(err == VNC_ERR_KERNEL && mb == NULL);
  CHECK(strstr(vnc_last_error(), "undefined_name") != NULL);
  CHECK(strstr(vnc_last_error(), "generated source kept at") != NULL);

  free(a); free(b); free(out); free(out2); free(out3);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
  CHECK(system(cmd) == 0);
  CHECK_DONE();
}
