#include "qkv/ops/linalg.h"

#include <algorithm>
#include <cstring>

#include "ops_internal.h"
#include "qkv/kernels/gemm.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/shape_ops.h"

namespace qkv {

using autograd::record;

namespace {

template <class T>
void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, const T* A, std::int64_t lda,
          const T* B, std::int64_t ldb, T beta, T* C, std::int64_t ldc, bool threaded = true) {
  if constexpr (std::is_same_v<T, float>)
    kernels::sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threaded);
  else
    kernels::dgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threaded);
}

template <class T>
void gemm_batched(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, const T* A,
                  std::int64_t lda, std::int64_t sa, const T* B, std::int64_t ldb, std::int64_t sb, T beta, T* C,
                  std::int64_t ldc, std::int64_t sc, std::int64_t batch) {
  if constexpr (std::is_same_v<T, float>)
    kernels::sgemm_batched(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
  else
    kernels::dgemm_batched(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

// How a matrix operand (the last two dims of t) is laid out for GEMM.
struct MatLayout {
  Tensor t;       // possibly a contiguous copy
  bool trans = false;
  std::int64_t ld = 0;
};

MatLayout mat_layout(const Tensor& t) {
  const std::int64_t r = t.dim();
  const std::int64_t rows = t.shape()[r - 2], cols = t.shape()[r - 1];
  const std::int64_t s0 = t.strides()[r - 2], s1 = t.strides()[r - 1];
  if ((s1 == 1 || cols == 1) && s0 >= std::max<std::int64_t>(cols, 1)) return {t, false, std::max<std::int64_t>(s0, 1)};
  if ((s0 == 1 || rows == 1) && s1 >= std::max<std::int64_t>(rows, 1)) return {t, true, std::max<std::int64_t>(s1, 1)};
  Tensor c = t.contiguous();
  return {c, false, std::max<std::int64_t>(cols, 1)};
}

// Offsets (elements) of each batch matrix of t broadcast to batch shape bs.
std::vector<std::int64_t> batch_offsets(const Tensor& t, const Shape& bs) {
  Shape tb(t.shape().begin(), t.shape().end() - 2), ts(t.strides().begin(), t.strides().end() - 2);
  Shape st = broadcast_strides(tb, ts, bs);
  std::vector<std::int64_t> offs;
  for_each_offset(bs, st, [&](std::int64_t o) { offs.push_back(o); });
  return offs;
}

bool arithmetic(const std::vector<std::int64_t>& v, std::int64_t* stride) {
  *stride = v.size() > 1 ? v[1] - v[0] : 0;
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i] - v[i - 1] != *stride) return false;
  return true;
}

// a [..., M, K] @ b [..., K, N], both rank >= 2, no autograd.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  const std::int64_t M = a.shape()[a.dim() - 2], K = a.shape().back(), N = b.shape().back();
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape bs = broadcast_shapes(ab, bb, "matmul");
  Shape out_shape = bs;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  if (out.numel() == 0) return out;
  MatLayout la = mat_layout(a), lb = mat_layout(b);
  // Fold the batch into M when b is a single shared matrix and a's rows are evenly strided.
  if (bb.empty() || checked_numel(bb) == 1) {
    const Tensor& at = la.t;
    if (!la.trans && at.is_contiguous()) {
      dispatch_float(a.dtype(), "matmul", [&]<class T>() {
        const std::int64_t rows = at.numel() / std::max<std::int64_t>(K, 1);
        gemm<T>(false, lb.trans, rows, N, K, T(1), at.data<T>(), std::max<std::int64_t>(K, 1), lb.t.data<T>(), lb.ld,
                T(0), out.data<T>(), std::max<std::int64_t>(N, 1));
      });
      return out;
    }
  }
  auto oa = batch_offsets(la.t, bs), ob = batch_offsets(lb.t, bs);
  std::int64_t sa = 0, sb = 0;
  dispatch_float(a.dtype(), "matmul", [&]<class T>() {
    const T* A = la.t.data<T>();
    const T* B = lb.t.data<T>();
    T* C = out.data<T>();
    const std::int64_t nb = static_cast<std::int64_t>(oa.size());
    if (arithmetic(oa, &sa) && arithmetic(ob, &sb)) {
      gemm_batched<T>(la.trans, lb.trans, M, N, K, T(1), A + oa[0], la.ld, sa, B + ob[0], lb.ld, sb, T(0), C,
                      std::max<std::int64_t>(N, 1), M * N, nb);
    } else {
      parallel_for(0, nb, 1, [&](std::int64_t s, std::int64_t e) {
        for (std::int64_t i = s; i < e; ++i)
          gemm<T>(la.trans, lb.trans, M, N, K, T(1), A + oa[i], la.ld, B + ob[i], lb.ld, T(0), C + i * M * N,
                  std::max<std::int64_t>(N, 1), /*threaded=*/false);
      });
    }
  });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  detail::check_float(a_in, "matmul", "a");
  detail::check_float(b_in, "matmul", "b");
  detail::check_same_dtype(a_in, b_in, "matmul", "a", "b");
  if (a_in.dim() == 0 || b_in.dim() == 0)
    throw ShapeError("matmul: both arguments need at least 1 dim, got a " + a_in.shape_str() + " and b " +
                     b_in.shape_str());
  const bool a1 = a_in.dim() == 1, b1 = b_in.dim() == 1;
  Tensor a = a1 ? a_in.unsqueeze(0) : a_in;
  Tensor b = b1 ? b_in.unsqueeze(-1) : b_in;
  const std::int64_t ka = a.shape().back(), kb = b.shape()[b.dim() - 2];
  if (ka != kb)
    throw ShapeError("matmul: a " + a_in.shape_str() + " @ b " + b_in.shape_str() + ": a.size(-1)=" +
                     std::to_string(ka) + " != b.size(-2)=" + std::to_string(kb));
  {
    Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
    const std::size_t n = std::max(ab.size(), bb.size());
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t da = i < n - ab.size() ? 1 : ab[i - (n - ab.size())];
      const std::int64_t db = i < n - bb.size() ? 1 : bb[i - (n - bb.size())];
      if (da != db && da != 1 && db != 1)
        throw ShapeError("matmul: a " + a_in.shape_str() + " @ b " + b_in.shape_str() +
                         ": batch dims " + shape_str(ab) + " and " + shape_str(bb) + " do not broadcast");
    }
  }
  Tensor out = matmul_nd(a, b);
  record(out, "matmul", {a, b}, [a = a.detach(), b = b.detach(), ga = a.requires_grad(), gb = b.requires_grad()](
                                    const Tensor& g) {
    // out = a @ b  ->  da = g @ b^T,  db = a^T @ g   (summed over broadcast batch dims)
    Tensor da = ga ? autograd::sum_to(matmul_nd(g, b.transpose(-1, -2)), a.shape()) : Tensor();
    Tensor db = gb ? autograd::sum_to(matmul_nd(a.transpose(-1, -2), g), b.shape()) : Tensor();
    return std::vector<Tensor>{da, db};
  });
  if (a1) out = out.squeeze(-2);
  if (b1) out = out.squeeze(-1);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  detail::check_float(x, "linear", "x");
  detail::check_float(w, "linear", "weight");
  detail::check_same_dtype(x, w, "linear", "x", "weight");
  if (w.dim() != 2)
    throw ShapeError("linear: weight must be [out_features, in_features], got " + w.shape_str());
  if (x.dim() < 1 || x.shape().back() != w.shape()[1])
    throw ShapeError("linear: x " + x.shape_str() + " @ weight " + w.shape_str() + "^T: x.size(-1)=" +
                     (x.dim() ? std::to_string(x.shape().back()) : std::string("none")) +
                     " != in_features=" + std::to_string(w.shape()[1]));
  if (bias.defined()) {
    detail::check_same_dtype(x, bias, "linear", "x", "bias");
    if (bias.dim() != 1 || bias.shape()[0] != w.shape()[0])
      throw ShapeError("linear: bias must be [" + std::to_string(w.shape()[0]) + "] for weight " + w.shape_str() +
                       ", got " + bias.shape_str());
  }
  const std::int64_t in = w.shape()[1], outf = w.shape()[0];
  Shape out_shape = x.shape();
  out_shape.back() = outf;
  Tensor x2 = x.detach().contiguous();
  // A weight that is the transpose of a row-major [in, out] matrix (GPT-2's Conv1D weights viewed
  // in place, row stride ldt >= out) is read as it lies; any other layout is made contiguous.
  const bool wt = !w.is_contiguous() && w.stride(0) == 1 && w.stride(1) >= outf && in > 1;
  Tensor wc = wt ? w.detach() : w.detach().contiguous();
  const std::int64_t ldw = wt ? w.stride(1) : std::max<std::int64_t>(in, 1);
  const std::int64_t rows = in ? x2.numel() / in : checked_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Tensor out = Tensor::empty(out_shape, x.dtype());
  dispatch_float(x.dtype(), "linear", [&]<class T>() {
    T* y = out.data<T>();
    T beta = T(0);
    if (bias.defined()) {
      Tensor bc = bias.detach().contiguous();
      // Every row of y starts as the bias, rows split over threads (at 4096 x 1024 the copies
      // on one thread were 1% of a GPT training step).
      if (rows > 0 && outf > 0) {
        const T* bp = bc.data<T>();
        parallel_for(0, rows, std::max<std::int64_t>(1, 16384 / outf), [&](std::int64_t rb, std::int64_t re) {
          for (std::int64_t r = rb; r < re; ++r) std::memcpy(y + r * outf, bp, static_cast<std::size_t>(outf) * sizeof(T));
        });
      }
      beta = T(1);
    }
    // y[rows, out] = x[rows, in] @ w[out, in]^T (+ bias)
    gemm<T>(false, !wt, rows, outf, in, T(1), x2.data<T>(), std::max<std::int64_t>(in, 1), wc.data<T>(), ldw, beta, y,
            std::max<std::int64_t>(outf, 1));
  });
  const bool gx = x.requires_grad(), gw = w.requires_grad(), gbias = bias.defined() && bias.requires_grad();
  record(out, "linear", {x, w, bias}, [x2, wc, wt, ldw, gx, gw, gbias, rows, in, outf, xs = x.shape()](const Tensor& g) {
    // y = x @ w^T + b  ->  dx = g @ w,  dw = g^T @ x,  db = sum_rows(g)
    Tensor gc = g.contiguous();
    Tensor dx, dw, db;
    dispatch_float(g.dtype(), "linear_backward", [&]<class T>() {
      const T* gp = gc.data<T>();
      if (gx) {
        dx = Tensor::empty(xs, g.dtype());
        gemm<T>(false, wt, rows, in, outf, T(1), gp, std::max<std::int64_t>(outf, 1), wc.data<T>(), ldw, T(0),
                dx.data<T>(), std::max<std::int64_t>(in, 1));
      }
      if (gw) {
        dw = Tensor::empty({outf, in}, g.dtype());
        gemm<T>(true, false, outf, in, rows, T(1), gp, std::max<std::int64_t>(outf, 1), x2.data<T>(),
                std::max<std::int64_t>(in, 1), T(0), dw.data<T>(), std::max<std::int64_t>(in, 1));
      }
      if (gbias) {
        db = Tensor::empty({outf}, g.dtype());
        // Four interleaved partial sums per column (rows r = 0, 1, 2, 3 mod 4) so consecutive rows do
        // not wait on each other's additions; combined in a fixed order. Columns are split over
        // threads in blocks of 64: each column's sum is the same for any split.
        std::vector<double> acc(static_cast<std::size_t>(4 * outf), 0.0);
        T* dbp = db.data<T>();
        const std::int64_t col_blocks = (outf + 63) / 64;
        parallel_for(0, col_blocks, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(rows * 64, 1)),
                     [&](std::int64_t cb, std::int64_t ce) {
          const std::int64_t j0 = cb * 64, j1 = std::min(outf, ce * 64);
          double* __restrict a = acc.data();
          const T* __restrict src = gp;
          std::int64_t r = 0;
          for (; r + 4 <= rows; r += 4)
            for (int u = 0; u < 4; ++u)
#pragma omp simd
              for (std::int64_t j = j0; j < j1; ++j) a[u * outf + j] += static_cast<double>(src[(r + u) * outf + j]);
          for (; r < rows; ++r)
            for (std::int64_t j = j0; j < j1; ++j) a[j] += static_cast<double>(src[r * outf + j]);
          for (std::int64_t j = j0; j < j1; ++j)
            dbp[j] = static_cast<T>((a[j] + a[outf + j]) + (a[2 * outf + j] + a[3 * outf + j]));
        });
      }
    });
    return std::vector<Tensor>{dx, dw, db};
  });
  return out;
}

}  // namespace qkv
