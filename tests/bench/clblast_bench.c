// CLBlast reference timings for tests/bench/h200.sh (issue 10): SGEMM (strided-batched where a
// batch is given) on the first OpenCL device whose name contains DEVICE, row-major. One call
// may run several kernels (CLBlast pads and transposes operands for its indirect GEMM, and its
// event covers the last kernel only), so each sample is the host time of CALLS back-to-back
// calls between two clFinish, divided by CALLS: launch gaps are amortised, not removed. Built on the development machine by
// tests/bench/clblast.sh against the Debian libclblast 1.5.3 packages, run on the device with
// those libraries beside it.
//
// usage: clblast_bench DEVICE REPEAT NAME:M:N:K:TA:TB[:BATCH] ...
// prints per shape: NAME M N K ta tb batch: MEDIAN ms, GFLOP/s
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/// Back-to-back calls per sample.
#define CALLS 20

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static cl_device_id find_device(const char *want) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, ps, &np) != CL_SUCCESS) return NULL;
  for (cl_uint p = 0; p < np; ++p) {
    cl_device_id ds[16];
    cl_uint nd = 0;
    if (clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_ALL, 16, ds, &nd) != CL_SUCCESS) continue;
    for (cl_uint d = 0; d < nd; ++d) {
      char name[256] = {0};
      clGetDeviceInfo(ds[d], CL_DEVICE_NAME, sizeof name - 1, name, NULL);
      if (strstr(name, want)) return ds[d];
    }
  }
  return NULL;
}

static cl_mem filled(cl_context cx, cl_command_queue q, size_t n) {
  cl_int e;
  float *h = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  cl_mem m = clCreateBuffer(cx, CL_MEM_READ_WRITE, n * sizeof(float), NULL, &e);
  if (e == CL_SUCCESS) clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n * sizeof(float), h, 0, NULL, NULL);
  free(h);
  return e == CL_SUCCESS ? m : NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s DEVICE REPEAT NAME:M:N:K:TA:TB[:BATCH] ...\n", argv[0]);
    return 2;
  }
  cl_device_id dev = find_device(argv[1]);
  if (!dev) {
    fprintf(stderr, "clblast_bench: no OpenCL device named like '%s'\n", argv[1]);
    return 1;
  }
  int repeat = atoi(argv[2]);
  if (repeat < 1) repeat = 1;
  cl_int e;
  cl_context cx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
  cl_command_queue q = clCreateCommandQueue(cx, dev, CL_QUEUE_PROFILING_ENABLE, &e);
  int failed = 0;
  for (int a = 3; a < argc; ++a) {
    char name[128];
    size_t m, n, k, batch = 1;
    int ta, tb;
    int got = sscanf(argv[a], "%127[^:]:%zu:%zu:%zu:%d:%d:%zu", name, &m, &n, &k, &ta, &tb, &batch);
    if (got < 6) {
      fprintf(stderr, "clblast_bench: bad shape '%s'\n", argv[a]);
      return 2;
    }
    // Row-major: A is M x K (K x M when transposed), B is K x N (N x K), C is M x N.
    size_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    size_t sa = m * k, sb = k * n, sc = m * n;
    cl_mem A = filled(cx, q, sa * batch), B = filled(cx, q, sb * batch), C = filled(cx, q, sc * batch);
    if (!A || !B || !C) {
      fprintf(stderr, "clblast_bench: %s: cannot allocate\n", name);
      return 1;
    }
    CLBlastTranspose TA = ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose TB = tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    double *ms = malloc(sizeof(double) * (size_t)repeat);
    CLBlastStatusCode st = CLBlastSuccess;
    // Two untimed samples: the first call compiles CLBlast's kernels for this device.
    for (int r = -2; r < repeat && st == CLBlastSuccess; ++r) {
      clFinish(q);
      double t0 = now_ms();
      for (int c = 0; c < CALLS && st == CLBlastSuccess; ++c) {
        if (batch > 1)
          st = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, TA, TB, m, n, k, 1.0f, A, 0, lda,
                                          sa, B, 0, ldb, sb, 0.0f, C, 0, ldc, sc, batch, &q, NULL);
        else
          st = CLBlastSgemm(CLBlastLayoutRowMajor, TA, TB, m, n, k, 1.0f, A, 0, lda, B, 0, ldb,
                            0.0f, C, 0, ldc, &q, NULL);
      }
      clFinish(q);
      if (r >= 0) ms[r] = (now_ms() - t0) / CALLS;
    }
    if (st != CLBlastSuccess) {
      printf("clblast %s %zu %zu %zu ta=%d tb=%d batch=%zu: error %d\n", name, m, n, k, ta, tb, batch,
             (int)st);
      failed = 1;
    } else {
      qsort(ms, (size_t)repeat, sizeof(double), cmp);
      double med = ms[repeat / 2];
      double gflops = 2.0 * (double)m * (double)n * (double)k * (double)batch / (med * 1e6);
      double gbs = 4.0 * (double)(sa + sb + sc) * (double)batch / (med * 1e6);
      printf("clblast %s %zu %zu %zu ta=%d tb=%d batch=%zu: %.4f ms, %.1f GFLOP/s, %.1f GB/s\n", name,
             m, n, k, ta, tb, batch, med, gflops, gbs);
    }
    fflush(stdout);
    free(ms);
    clReleaseMemObject(A);
    clReleaseMemObject(B);
    clReleaseMemObject(C);
  }
  clReleaseCommandQueue(q);
  clReleaseContext(cx);
  return failed;
}
