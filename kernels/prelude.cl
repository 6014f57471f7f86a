// Floor division and modulo with MLIR affine-map semantics (rounding toward -inf).
inline long fbc_floordiv(long a, long b) { long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
inline long fbc_ceildiv(long a, long b) { return -fbc_floordiv(-a, b); }
inline long fbc_mod(long a, long b) { return a - fbc_floordiv(a, b) * b; }
inline long fbc_iabs(long a) { return a < 0 ? as_long(0UL - as_ulong(a)) : a; }
// max/min that propagate NaN, as the tensor dialect does.
inline float fbc_fmax(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : fmax(a, b); }
inline float fbc_fmin(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : fmin(a, b); }
inline float fbc_sigmoid(float a) { return a >= 0.0f ? 1.0f / (1.0f + exp(-a)) : exp(a) / (1.0f + exp(a)); }
// Each channel rounded to the nearest f16 (ties to even), as a float: what an f16 image holds.
// write_imagef to a CL_HALF_FLOAT image may round toward zero; values already exact in f16 are
// stored unchanged. vstore_half/vload_half are core OpenCL (no cl_khr_fp16).
inline float4 fbc_rte_half4(float4 v) { ushort h[4]; vstore_half4_rte(v, 0, (__private half*)h); return vload_half4(0, (__private half*)h); }
// Channel c of a texel.
inline float fbc_ch(float4 v, long c) { return c == 0 ? v.x : (c == 1 ? v.y : (c == 2 ? v.z : v.w)); }
__constant sampler_t fbc_smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;
// Run-time checks, for accesses the compiler could not prove in range (data-dependent offsets)
// and for payload arithmetic that can fail (integer division by zero, int() of NaN). A failed
// check does not touch memory (a read gives 0, a write is skipped) and records the run's first
// fault in the error buffer e (the first atomic_cmpxchg of e[0] wins): e[0] the launch's fault
// id, e[1] kind (1 read, 2 load, 3 write, 4 `/` by 0, 5 `%` by 0, 6 int() of NaN, 7 a map
// symbol out of its range), e[2] operand (-1 for arithmetic), e[3..8] the coordinates (offset,
// or x, y, channel; the dividend for kinds 4 and 5; the symbol's value and range for kind 7) as
// lo/hi halves, e[9] the domain rank, e[10..25] the domain point.
#define FBC_PT long p0, long p1, long p2, long p3, long p4, long p5, long p6, long p7
inline void fbc_half(__global int* e, int at, long v) { e[at] = (int)v; e[at + 1] = (int)(v >> 32); }
inline void fbc_fault(__global int* e, int id, int kind, int op, long v0, long v1, long v2, int rank, FBC_PT) {
  if (atomic_cmpxchg((volatile __global int*)e, 0, id) != 0) return;
  e[1] = kind; e[2] = op; fbc_half(e, 3, v0); fbc_half(e, 5, v1); fbc_half(e, 7, v2); e[9] = rank;
  fbc_half(e, 10, p0); fbc_half(e, 12, p1); fbc_half(e, 14, p2); fbc_half(e, 16, p3);
  fbc_half(e, 18, p4); fbc_half(e, 20, p5); fbc_half(e, 22, p6); fbc_half(e, 24, p7);
}
#define FBC_PASS p0, p1, p2, p3, p4, p5, p6, p7
inline float fbc_ldf(__global const float* x, long o, long n, __global int* e, int id, int kind, int op, int rank, FBC_PT) {
  if (o >= 0 && o < n) return x[o];
  fbc_fault(e, id, kind, op, o, 0, 0, rank, FBC_PASS); return 0.0f;
}
inline int fbc_ldi(__global const int* x, long o, long n, __global int* e, int id, int kind, int op, int rank, FBC_PT) {
  if (o >= 0 && o < n) return x[o];
  fbc_fault(e, id, kind, op, o, 0, 0, rank, FBC_PASS); return 0;
}
inline char fbc_ldc(__global const char* x, long o, long n, __global int* e, int id, int kind, int op, int rank, FBC_PT) {
  if (o >= 0 && o < n) return x[o];
  fbc_fault(e, id, kind, op, o, 0, 0, rank, FBC_PASS); return 0;
}
inline void fbc_stf(__global float* x, long o, long n, float v, __global int* e, int id, int op, int rank, FBC_PT) {
  if (o >= 0 && o < n) x[o] = v; else fbc_fault(e, id, 3, op, o, 0, 0, rank, FBC_PASS);
}
inline void fbc_sti(__global int* x, long o, long n, int v, __global int* e, int id, int op, int rank, FBC_PT) {
  if (o >= 0 && o < n) x[o] = v; else fbc_fault(e, id, 3, op, o, 0, 0, rank, FBC_PASS);
}
inline float fbc_rdch(__read_only image2d_t x, long px, long py, long c, long w, long h, __global int* e, int id, int op, int rank, FBC_PT) {
  if (px >= 0 && px < w && py >= 0 && py < h && c >= 0 && c < 4) return fbc_ch(read_imagef(x, fbc_smp, (int2)((int)px, (int)py)), c);
  fbc_fault(e, id, 1, op, px, py, c, rank, FBC_PASS); return 0.0f;
}
inline void fbc_wrimg(__write_only image2d_t x, long px, long py, long w, long h, float4 v, __global int* e, int id, int op, int rank, FBC_PT) {
  if (px >= 0 && px < w && py >= 0 && py < h) write_imagef(x, (int2)((int)px, (int)py), v);
  else fbc_fault(e, id, 3, op, px, py, 0, rank, FBC_PASS);
}
// Payload integers: 64-bit two's complement that wraps (computed on ulong: signed overflow is
// undefined in C), floor division and modulo with MIN / -1 = MIN and MIN % -1 = 0.
inline long fbc_iadd(long a, long b) { return as_long(as_ulong(a) + as_ulong(b)); }
inline long fbc_isub(long a, long b) { return as_long(as_ulong(a) - as_ulong(b)); }
inline long fbc_imul(long a, long b) { return as_long(as_ulong(a) * as_ulong(b)); }
inline long fbc_ineg(long a) { return as_long(0UL - as_ulong(a)); }
// A zero divisor gives 0 here; the checked forms below (used wherever a divisor is not a
// non-zero constant) record it (kinds 4 and 5) in the error buffer, so that the run fails as on
// the reference executor and the CPU JIT.
inline long fbc_idiv(long a, long b) {
  if (b == 0) return 0;
  if (b == -1) return fbc_ineg(a);
  const long q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline long fbc_imod(long a, long b) {
  if (b == 0 || b == -1) return 0;
  const long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
inline long fbc_idivc(long a, long b, __global int* e, int id, int rank, FBC_PT) {
  if (b == 0) fbc_fault(e, id, 4, -1, a, 0, 0, rank, FBC_PASS);
  return fbc_idiv(a, b);
}
inline long fbc_imodc(long a, long b, __global int* e, int id, int rank, FBC_PT) {
  if (b == 0) fbc_fault(e, id, 5, -1, a, 0, 0, rank, FBC_PASS);
  return fbc_imod(a, b);
}
// int(x): toward zero, saturating at the long range (convert_long_sat_rtz); NaN gives 0, and the
// checked form records it (kind 6).
inline long fbc_toint(float x) { return convert_long_sat_rtz(x); }
inline long fbc_tointc(float x, __global int* e, int id, int rank, FBC_PT) {
  if (isnan(x)) fbc_fault(e, id, 6, -1, 0, 0, 0, rank, FBC_PASS);
  return convert_long_sat_rtz(x);
}
// The i32 element a long stores: the low 32 bits (as_int: no implementation-defined conversion).
inline int fbc_toi32(long a) { return as_int((uint)as_ulong(a)); }
