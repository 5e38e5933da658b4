// kMatMul on cuBLASLt: row-major products run as column-major ones with the operands swapped.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "launch.h"

namespace autopar::cuda {
namespace {

const char* dt_name(Dt dt) {
  switch (dt) {
    case Dt::kF32:
      return "f32";
    case Dt::kF16:
      return "f16";
    case Dt::kBF16:
      return "bf16";
    case Dt::kF64:
      return "f64";
    case Dt::kI64:
      return "i64";
    case Dt::kI32:
      return "i32";
    case Dt::kI8:
      return "i8";
    case Dt::kU8:
      return "u8";
    case Dt::kBool:
      return "bool";
  }
  return "?";
}

std::string shape(const MatMulParams& p) {
  return "m=" + std::to_string(p.m) + ", n=" + std::to_string(p.n) + ", k=" + std::to_string(p.k) +
         ", batch=" + std::to_string(p.batch);
}

std::string lt_error(cublasStatus_t status, const char* what, const MatMulParams& p) {
  if (status == CUBLAS_STATUS_SUCCESS) return "";
  return std::string("matmul: ") + what + ": " + cublasLtGetStatusName(status) + " (" +
         cublasLtGetStatusString(status) + "; " + shape(p) + ")";
}

// The types cuBLASLt is asked for: one compute and scale type for the three matrices.
struct Types {
  cublasComputeType_t compute;
  cudaDataType_t scale, a, b, c;
  bool double_scale;
};

bool lt_type(Dt dt, cudaDataType_t* type) {
  switch (dt) {
    case Dt::kF32:
      *type = CUDA_R_32F;
      return true;
    case Dt::kF16:
      *type = CUDA_R_16F;
      return true;
    case Dt::kBF16:
      *type = CUDA_R_16BF;
      return true;
    case Dt::kF64:
      *type = CUDA_R_64F;
      return true;
    default:
      return false;
  }
}

// f32 (no TF32), f64, and f16 / bf16 inputs into their own type or f32; others are refused.
std::string choose_types(Dt a, Dt b, Dt c, Types* types) {
  const bool half_inputs = a == b && (a == Dt::kF16 || a == Dt::kBF16);
  const bool ok = (a == Dt::kF32 && b == Dt::kF32 && c == Dt::kF32) ||
                  (a == Dt::kF64 && b == Dt::kF64 && c == Dt::kF64) ||
                  (half_inputs && (c == a || c == Dt::kF32));
  if (!ok || !lt_type(a, &types->a) || !lt_type(b, &types->b) || !lt_type(c, &types->c)) {
    return std::string("matmul: no cuBLASLt product for A ") + dt_name(a) + ", B " + dt_name(b) +
           ", C " + dt_name(c) +
           " (supported: all f32, all f64, f16 or bf16 A and B into the same type or f32)";
  }
  const bool wide = a == Dt::kF64;
  types->compute = wide ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  types->scale = wide ? CUDA_R_64F : CUDA_R_32F;
  types->double_scale = wide;
  return "";
}

// The largest power of two (up to 256) dividing the address: what the heuristic may assume.
uint32_t alignment_of(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

struct MatmulState {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool double_scale = false;
  bool empty_k = false;  // k == 0: C = beta * C without cuBLASLt
  // The problem after folding a broadcast B into one taller product.
  int64_t m = 0, batch = 1;
  ~MatmulState() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

struct PreferenceGuard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceGuard() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  }
};

__device__ inline float load_f(const float* p) { return *p; }
__device__ inline float load_f(const __half* p) { return __half2float(*p); }
__device__ inline float load_f(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline void store_f(float* p, float v) { *p = v; }
__device__ inline void store_f(__half* p, float v) { *p = __float2half_rn(v); }
__device__ inline void store_f(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// k == 0: the product is empty, so C = beta * C (zeros without reading C when beta is 0).
template <typename T, typename S>
__global__ void scale_c_kernel(T* c, int64_t m, int64_t n, int64_t ldc, int64_t stride,
                               int64_t batch, S beta) {
  const int64_t total = batch * m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t col = i % n, row = i / n % m, b = i / n / m;
    T* p = c + b * stride + row * ldc + col;
    if constexpr (sizeof(S) == sizeof(double)) {
      *p = beta == 0 ? T(0) : T(beta * *p);
    } else {
      store_f(p, beta == 0 ? 0.0f : beta * load_f(p));
    }
  }
}

std::string scale_c(const Resolved& r, Context& ctx, const MatMulParams& p, Dt dt) {
  const int64_t total = p.batch * p.m * p.n;
  if (total == 0) return "";
  const int threads = 256;
  const int64_t blocks64 = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(blocks64 < 4096 ? blocks64 : 4096);
  const Dt c_dt = r.launch->out[0].ref.dt;
  char* c = static_cast<char*>(r.out[0]) + r.launch->out[0].base * dt_size(c_dt);
  const float beta = static_cast<float>(p.beta);
  switch (dt) {
    case Dt::kF32:
      scale_c_kernel<<<blocks, threads, 0, ctx.stream>>>(reinterpret_cast<float*>(c), p.m, p.n,
                                                         p.ldc, p.stride_c, p.batch, beta);
      break;
    case Dt::kF16:
      scale_c_kernel<<<blocks, threads, 0, ctx.stream>>>(reinterpret_cast<__half*>(c), p.m, p.n,
                                                         p.ldc, p.stride_c, p.batch, beta);
      break;
    case Dt::kBF16:
      scale_c_kernel<<<blocks, threads, 0, ctx.stream>>>(reinterpret_cast<__nv_bfloat16*>(c), p.m,
                                                         p.n, p.ldc, p.stride_c, p.batch, beta);
      break;
    case Dt::kF64:
      scale_c_kernel<<<blocks, threads, 0, ctx.stream>>>(reinterpret_cast<double*>(c), p.m, p.n,
                                                         p.ldc, p.stride_c, p.batch, p.beta);
      break;
    default:
      return std::string("matmul: k = 0 into ") + dt_name(dt);
  }
  return check_launch("matmul (k = 0)");
}

std::string set_layout(cublasLtMatrixLayout_t* layout, cudaDataType_t type, int64_t rows,
                       int64_t cols, int64_t ld, int32_t batch, int64_t stride,
                       const MatMulParams& p, const char* which) {
  // A single column's leading dimension is never stepped over; cuBLASLt still wants it >= rows.
  if (cols <= 1 && ld < rows) ld = rows;
  std::string what = std::string("cublasLtMatrixLayoutCreate ") + which;
  std::string e = lt_error(cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(rows),
                                                      static_cast<uint64_t>(cols), ld),
                           what.c_str(), p);
  if (!e.empty() || batch == 1) return e;
  what = std::string("cublasLtMatrixLayoutSetAttribute ") + which;
  e = lt_error(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                sizeof batch),
               what.c_str(), p);
  if (e.empty()) {
    e = lt_error(cublasLtMatrixLayoutSetAttribute(
                     *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                 what.c_str(), p);
  }
  return e;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our B and
// its "B" our A, each described as stored (a row-major r x c matrix is a column-major c x r one
// with the same leading dimension), with the same transposes.
std::string plan(const Resolved& r, Context& ctx, const MatMulParams& p, const Types& types,
                 const void* a_ptr, const void* b_ptr, const void* c_ptr, MatmulState* s) {
  s->double_scale = types.double_scale;
  s->m = p.m;
  s->batch = p.batch;
  // A batch of A_b times one B with A and C dense across the batch is one taller product.
  if (p.batch > 1 && p.stride_b == 0 && !p.trans_a && p.stride_a == p.m * p.lda &&
      p.stride_c == p.m * p.ldc) {
    s->m = p.m * p.batch;
    s->batch = 1;
  }
  if (s->batch > INT32_MAX) return "matmul: batch " + std::to_string(s->batch) + " too large";
  const int32_t batch = static_cast<int32_t>(s->batch);

  std::string e = lt_error(cublasLtMatmulDescCreate(&s->op, types.compute, types.scale),
                           "cublasLtMatmulDescCreate", p);
  if (!e.empty()) return e;
  const cublasOperation_t op_first = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  e = lt_error(cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                              sizeof op_first),
               "cublasLtMatmulDescSetAttribute TRANSA", p);
  if (!e.empty()) return e;
  e = lt_error(cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                              sizeof op_second),
               "cublasLtMatmulDescSetAttribute TRANSB", p);
  if (!e.empty()) return e;

  // Our B, stored k x n (or n x k transposed) row-major.
  e = set_layout(&s->a, types.b, p.trans_b ? p.k : p.n, p.trans_b ? p.n : p.k, p.ldb, batch,
                 p.stride_b, p, "B");
  if (!e.empty()) return e;
  // Our A, stored m x k (or k x m transposed) row-major.
  e = set_layout(&s->b, types.a, p.trans_a ? s->m : p.k, p.trans_a ? p.k : s->m, p.lda, batch,
                 p.stride_a, p, "A");
  if (!e.empty()) return e;
  e = set_layout(&s->c, types.c, p.n, s->m, p.ldc, batch, p.stride_c, p, "C");
  if (!e.empty()) return e;

  PreferenceGuard guard;
  e = lt_error(cublasLtMatmulPreferenceCreate(&guard.pref), "cublasLtMatmulPreferenceCreate", p);
  if (!e.empty()) return e;
  const uint64_t workspace = ctx.workspace_bytes;
  e = lt_error(
      cublasLtMatmulPreferenceSetAttribute(guard.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace, sizeof workspace),
      "cublasLtMatmulPreferenceSetAttribute", p);
  // The pointers stay where they are until the next load, which drops this plan.
  const uint32_t align[4] = {alignment_of(b_ptr), alignment_of(a_ptr), alignment_of(c_ptr),
                             alignment_of(c_ptr)};
  const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; e.empty() && i < 4; ++i) {
    e = lt_error(
        cublasLtMatmulPreferenceSetAttribute(guard.pref, align_attr[i], &align[i], sizeof align[i]),
        "cublasLtMatmulPreferenceSetAttribute", p);
  }
  if (!e.empty()) return e;

  cublasLtMatmulHeuristicResult_t results[8] = {};
  int returned = 0;
  e = lt_error(
      cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(ctx.cublaslt), s->op, s->a, s->b,
                                     s->c, s->c, guard.pref, 8, results, &returned),
      "cublasLtMatmulAlgoGetHeuristic", p);
  if (!e.empty()) return e;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspace) {
      s->algo = results[i].algo;
      return "";
    }
  }
  return std::string("matmul: cuBLASLt has no algorithm for A ") + dt_name(r.launch->in[0].ref.dt) +
         ", B " + dt_name(r.launch->in[1].ref.dt) + ", C " + dt_name(r.launch->out[0].ref.dt) +
         " (" + shape(p) + ", lda=" + std::to_string(p.lda) + ", ldb=" + std::to_string(p.ldb) +
         ", ldc=" + std::to_string(p.ldc) + ")";
}

}  // namespace

std::string enqueue_matmul(const Resolved& r, Context& ctx) {
  const Launch& launch = *r.launch;
  const MatMulParams& p = launch.matmul;
  if (launch.in.size() < 2 || launch.out.empty()) {
    return "matmul: needs inputs {A, B} and output {C}";
  }
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0)
    return "matmul: negative size (" + shape(p) + ")";
  if (p.m == 0 || p.n == 0 || p.batch == 0) return "";
  if (p.batch > 1 && p.stride_c == 0) {
    return "matmul: every batch writes the same C (stride_c 0, " + shape(p) + ")";
  }
  const Dt a_dt = launch.in[0].ref.dt, b_dt = launch.in[1].ref.dt, c_dt = launch.out[0].ref.dt;
  const void* a = static_cast<const char*>(r.in[0]) + launch.in[0].base * dt_size(a_dt);
  const void* b = static_cast<const char*>(r.in[1]) + launch.in[1].base * dt_size(b_dt);
  void* c = static_cast<char*>(r.out[0]) + launch.out[0].base * dt_size(c_dt);

  auto found = ctx.state.find(ctx.launch_index);
  if (found == ctx.state.end()) {
    if (ctx.capturing) return "matmul: no cuBLASLt plan (the program must run before capture)";
    Types types;
    std::string e = choose_types(a_dt, b_dt, c_dt, &types);
    if (!e.empty()) return e;
    auto state = std::make_shared<MatmulState>();
    if (p.k == 0) {
      state->empty_k = true;
    } else {
      e = plan(r, ctx, p, types, a, b, c, state.get());
      if (!e.empty()) return e;
    }
    found = ctx.state.emplace(ctx.launch_index, std::move(state)).first;
  }
  const MatmulState& s = *static_cast<const MatmulState*>(found->second.get());
  if (s.empty_k) return scale_c(r, ctx, p, c_dt);

  const float alpha_f = static_cast<float>(p.alpha), beta_f = static_cast<float>(p.beta);
  const double alpha_d = p.alpha, beta_d = p.beta;
  const void* alpha = s.double_scale ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = s.double_scale ? static_cast<const void*>(&beta_d) : &beta_f;
  return lt_error(
      cublasLtMatmul(static_cast<cublasLtHandle_t>(ctx.cublaslt), s.op, alpha, b, s.a, a, s.b, beta,
                     c, s.c, c, s.c, &s.algo, ctx.workspace, ctx.workspace_bytes, ctx.stream),
      "cublasLtMatmul", p);
}

}  // namespace autopar::cuda
