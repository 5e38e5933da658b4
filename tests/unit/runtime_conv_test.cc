// Conv, ConvTranspose and pooling kernels against hand-computed values and direct loops.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/kernels/conv_simd.h"
#include "testing/run_node.h"

namespace autopar {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using testing::f32;
using testing::f64;
using ::testing::HasSubstr;
using testing::i64;
using testing::NodeRun;
using testing::random_f32;
using testing::values_of;

using Ints = std::vector<int64_t>;

Tensor to_f64(const Tensor& t) { return f64(t.dims(), values_of(t)); }

int64_t count_of(const Ints& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Row-major coordinates of `flat` in `dims`.
Ints coords_of(int64_t flat, const Ints& dims) {
  Ints c(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    c[d] = flat % dims[d];
    flat /= dims[d];
  }
  return c;
}

int64_t flat_of(const Ints& coords, const Ints& dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + coords[d];
  return flat;
}

// Explicit window attributes for the reference loops (pads: begins then ends).
struct Geometry {
  Ints strides, dilations, pads;
};

Geometry unit_geometry(size_t rank) { return {Ints(rank, 1), Ints(rank, 1), Ints(2 * rank, 0)}; }

// Direct convolution: for every output element, the sum over its group's input channels and
// the kernel taps that land inside the input.
std::vector<double> naive_conv(const Tensor& x, const Tensor& w, const Tensor* bias,
                               const Ints& y_dims, const Geometry& g, int64_t group) {
  const Ints& xd = x.dims();
  const Ints& wd = w.dims();
  const size_t rank = xd.size() - 2;
  const Ints in(xd.begin() + 2, xd.end()), out(y_dims.begin() + 2, y_dims.end());
  const Ints kernel(wd.begin() + 2, wd.end());
  const int64_t c_per_group = xd[1] / group, m_per_group = y_dims[1] / group;
  const std::vector<double> xv = values_of(x), wv = values_of(w);
  std::vector<double> y;
  for (int64_t n = 0; n < y_dims[0]; ++n) {
    for (int64_t m = 0; m < y_dims[1]; ++m) {
      const int64_t grp = m / m_per_group;
      for (int64_t p = 0; p < count_of(out); ++p) {
        const Ints o = coords_of(p, out);
        double sum = bias ? bias->float_at(m) : 0.0;
        for (int64_t c = 0; c < c_per_group; ++c) {
          for (int64_t k = 0; k < count_of(kernel); ++k) {
            const Ints kc = coords_of(k, kernel);
            Ints i(rank);
            bool inside = true;
            for (size_t d = 0; d < rank; ++d) {
              i[d] = o[d] * g.strides[d] - g.pads[d] + kc[d] * g.dilations[d];
              inside = inside && i[d] >= 0 && i[d] < in[d];
            }
            if (!inside) continue;
            const int64_t channel = grp * c_per_group + c;
            sum += xv[(n * xd[1] + channel) * count_of(in) + flat_of(i, in)] *
                   wv[(m * c_per_group + c) * count_of(kernel) + k];
          }
        }
        y.push_back(sum);
      }
    }
  }
  return y;
}

// Direct transposed convolution: every input element scatters x·w into the outputs
// i·stride − pad + k·dilation that exist.
std::vector<double> naive_conv_transpose(const Tensor& x, const Tensor& w, const Tensor* bias,
                                         const Ints& y_dims, const Geometry& g, int64_t group) {
  const Ints& xd = x.dims();
  const Ints& wd = w.dims();
  const size_t rank = xd.size() - 2;
  const Ints in(xd.begin() + 2, xd.end()), out(y_dims.begin() + 2, y_dims.end());
  const Ints kernel(wd.begin() + 2, wd.end());
  const int64_t c_per_group = xd[1] / group, m_per_group = wd[1];
  const std::vector<double> xv = values_of(x), wv = values_of(w);
  std::vector<double> y(static_cast<size_t>(count_of(y_dims)), 0.0);
  for (int64_t n = 0; n < xd[0]; ++n) {
    for (int64_t c = 0; c < xd[1]; ++c) {
      const int64_t grp = c / c_per_group;
      for (int64_t p = 0; p < count_of(in); ++p) {
        const Ints i = coords_of(p, in);
        const double xval = xv[(n * xd[1] + c) * count_of(in) + p];
        for (int64_t m = 0; m < m_per_group; ++m) {
          for (int64_t k = 0; k < count_of(kernel); ++k) {
            const Ints kc = coords_of(k, kernel);
            Ints o(rank);
            bool inside = true;
            for (size_t d = 0; d < rank; ++d) {
              o[d] = i[d] * g.strides[d] - g.pads[d] + kc[d] * g.dilations[d];
              inside = inside && o[d] >= 0 && o[d] < out[d];
            }
            if (!inside) continue;
            const int64_t channel = grp * m_per_group + m;
            y[(n * y_dims[1] + channel) * count_of(out) + flat_of(o, out)] +=
                xval * wv[(c * m_per_group + m) * count_of(kernel) + k];
          }
        }
      }
    }
  }
  if (bias) {
    for (size_t e = 0; e < y.size(); ++e) {
      y[e] += bias->float_at((static_cast<int64_t>(e) / count_of(out)) % y_dims[1]);
    }
  }
  return y;
}

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected,
                     double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance) << "at element " << i;
  }
}

NodeRun conv_node(const std::string& op, const Tensor& x, const Tensor& w, const Tensor* bias,
                  const Geometry& g, int64_t group) {
  NodeRun run(op);
  run.input(x).input(w);
  if (bias) run.input(*bias);
  run.attr("strides", g.strides).attr("dilations", g.dilations).attr("pads", g.pads);
  run.attr("group", group);
  return run;
}

// ---- Conv --------------------------------------------------------------------------

TEST(RuntimeConv, ConvWithPaddingMatchesHandValues) {
  // ONNX's basic padded example: 5x5 ramp, 3x3 ones, pads 1.
  std::vector<float> ramp(25);
  for (int i = 0; i < 25; ++i) ramp[i] = static_cast<float>(i);
  Tensor y = NodeRun("Conv")
                 .input(f32({1, 1, 5, 5}, ramp))
                 .input(f32({1, 1, 3, 3}, std::vector<float>(9, 1.0f)))
                 .attr("pads", Ints{1, 1, 1, 1})
                 .run1();
  EXPECT_EQ(y.dims(), (Ints{1, 1, 5, 5}));
  EXPECT_THAT(values_of(y), ElementsAreArray({12.,  21.,  27., 33.,  24.,  33.,  54., 63.,  72.,
                                              51.,  63.,  99., 108., 117., 81.,  93., 144., 153.,
                                              162., 111., 72., 111., 117., 123., 84.}));

  // Without pads, strided, with a bias.
  Tensor strided = NodeRun("Conv")
                       .input(f32({1, 1, 5, 5}, ramp))
                       .input(f32({1, 1, 3, 3}, std::vector<float>(9, 1.0f)))
                       .input(f32({1}, {0.5f}))
                       .attr("strides", Ints{2, 2})
                       .run1();
  EXPECT_THAT(values_of(strided), ElementsAre(54.5, 72.5, 144.5, 162.5));
}

struct ConvConfig {
  Ints x_dims, w_dims;
  Geometry geometry;
  int64_t group;
  bool bias;
};

TEST(RuntimeConv, ConvMatchesDirectLoopOverGeometries) {
  const std::vector<ConvConfig> configs = {
      // 2-D: pads, strides, dilations, asymmetric pads.
      {{2, 3, 7, 6}, {4, 3, 3, 2}, {{2, 1}, {1, 2}, {1, 0, 2, 1}}, 1, true},
      // Groups: 2 groups of 2 input channels, 3 outputs each.
      {{1, 4, 6, 6}, {6, 2, 3, 3}, {{1, 2}, {2, 1}, {2, 1, 0, 1}}, 2, false},
      // Depthwise with multiplier 2.
      {{2, 3, 5, 5}, {6, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1, 1, 1}}, 3, true},
      // Depthwise as MobileNets run it: stride 2; a 5x5 kernel with strides 2x1, dilations
      // 1x2 and uneven pads; dilation 2 with pads beyond the kernel's reach and stride 3.
      {{1, 4, 9, 8}, {4, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1, 1, 1}}, 4, true},
      {{2, 3, 8, 7}, {3, 1, 5, 5}, {{2, 1}, {1, 2}, {2, 0, 1, 3}}, 3, false},
      {{1, 2, 3, 3}, {2, 1, 3, 3}, {{1, 3}, {2, 2}, {3, 2, 3, 2}}, 2, true},
      // One channel over a large image: its 119,715 outputs are cut into panels of 116,508
      // (2^20 multiply-adds of 9 taps), the cut inside a row.
      {{1, 1, 345, 347}, {1, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1, 1, 1}}, 1, true},
      // Pointwise (1x1, stride 1, no pads) reads the image directly.
      {{2, 5, 4, 3}, {7, 5, 1, 1}, {{1, 1}, {1, 1}, {0, 0, 0, 0}}, 1, true},
      // 1x1 with stride goes through im2col.
      {{1, 2, 5, 5}, {3, 2, 1, 1}, {{2, 2}, {1, 1}, {0, 0, 0, 0}}, 1, false},
      // 1-D.
      {{2, 3, 11}, {4, 3, 3}, {{2}, {2}, {2, 1}}, 1, true},
      // 3-D with groups.
      {{1, 4, 4, 5, 3}, {2, 2, 2, 3, 2}, {{1, 2, 1}, {2, 1, 1}, {1, 0, 1, 0, 1, 1}}, 2, true},
      // Padding wider than the kernel's reach: whole output rows see only padding.
      {{1, 1, 3, 3}, {1, 1, 2, 2}, {{1, 1}, {1, 1}, {3, 0, 3, 0}}, 1, true},
      // Kernels longer than the output's rows take the columns by output position: a weight
      // gradient's shape, strides and dilations, 1-D, and kernel rows wholly in the padding.
      {{3, 2, 6, 5}, {4, 2, 6, 5}, {{1, 1}, {1, 1}, {1, 1, 1, 1}}, 1, false},
      {{1, 2, 7, 8}, {3, 2, 4, 5}, {{1, 2}, {2, 1}, {1, 2, 0, 1}}, 1, true},
      {{1, 1, 5, 6}, {2, 1, 2, 4}, {{1, 1}, {1, 2}, {0, 1, 0, 2}}, 1, false},
      {{2, 3, 6}, {2, 3, 7}, {{1}, {1}, {2, 2}}, 1, true},
      {{1, 2, 3, 4}, {2, 2, 5, 6}, {{1, 1}, {1, 1}, {2, 1, 2, 1}}, 1, false},
  };
  uint64_t seed = 100;
  for (const ConvConfig& c : configs) {
    const Tensor x = random_f32(c.x_dims, ++seed);
    const Tensor w = random_f32(c.w_dims, ++seed);
    const Tensor b = random_f32({c.w_dims[0]}, ++seed);
    Tensor y = conv_node("Conv", x, w, c.bias ? &b : nullptr, c.geometry, c.group).run1();
    SCOPED_TRACE(::testing::Message() << "x " << ::testing::PrintToString(c.x_dims) << " w "
                                      << ::testing::PrintToString(c.w_dims));
    expect_near_all(values_of(y),
                    naive_conv(x, w, c.bias ? &b : nullptr, y.dims(), c.geometry, c.group), 1e-5);
  }
}

TEST(RuntimeConv, ConvAutoPadPlacesTheOddPad) {
  // 1-D ramp 1..5, kernel [1, 10], stride 2: three outputs need a total pad of 1.
  const Tensor x = f32({1, 1, 5}, {1, 2, 3, 4, 5});
  const Tensor w = f32({1, 1, 2}, {1, 10});
  auto run = [&](const char* auto_pad) {
    return values_of(NodeRun("Conv")
                         .input(x)
                         .input(w)
                         .attr("strides", Ints{2})
                         .attr("auto_pad", auto_pad)
                         .run1());
  };
  // SAME_UPPER pads the end: windows [1,2], [3,4], [5,0].
  EXPECT_THAT(run("SAME_UPPER"), ElementsAre(21, 43, 5));
  // SAME_LOWER pads the beginning: windows [0,1], [2,3], [4,5].
  EXPECT_THAT(run("SAME_LOWER"), ElementsAre(10, 32, 54));
  // VALID: windows [1,2], [3,4].
  EXPECT_THAT(run("VALID"), ElementsAre(21, 43));

  // 2-D SAME with dilation against the direct loop: 8 wide, kernel 3 dilated 2, stride 2 gives
  // 4 outputs and a total pad of 3·2 + 5 − 8 = 3 per dim.
  const Tensor x2 = random_f32({1, 2, 8, 8}, 7);
  const Tensor w2 = random_f32({3, 2, 3, 3}, 8);
  for (const char* auto_pad : {"SAME_UPPER", "SAME_LOWER"}) {
    Tensor y = NodeRun("Conv")
                   .input(x2)
                   .input(w2)
                   .attr("strides", Ints{2, 2})
                   .attr("dilations", Ints{2, 2})
                   .attr("auto_pad", auto_pad)
                   .run1();
    ASSERT_EQ(y.dims(), (Ints{1, 3, 4, 4}));
    const int64_t begin = std::string(auto_pad) == "SAME_UPPER" ? 1 : 2;
    Geometry g{{2, 2}, {2, 2}, {begin, begin, 3 - begin, 3 - begin}};
    expect_near_all(values_of(y), naive_conv(x2, w2, nullptr, y.dims(), g, 1), 1e-5);
  }
}

TEST(RuntimeConv, ConvSplitsLargeImagesIntoPanelsIdenticallyAcrossThreads) {
  // One image, one group: the 48x48 output is split into column panels.
  const Tensor x = random_f32({1, 8, 50, 50}, 11);
  const Tensor w = random_f32({16, 8, 3, 3}, 12);
  const Tensor b = random_f32({16}, 13);
  const Geometry g = unit_geometry(2);
  Tensor two = conv_node("Conv", x, w, &b, g, 1).threads(2).run1();
  Tensor one = conv_node("Conv", x, w, &b, g, 1).threads(1).run1();
  EXPECT_EQ(one, two);
  expect_near_all(values_of(two), naive_conv(x, w, &b, two.dims(), g, 1), 1e-4);

  // The pointwise path splits the same way.
  const Tensor w1 = random_f32({64, 8, 1, 1}, 14);
  Tensor p2 = conv_node("Conv", x, w1, nullptr, g, 1).threads(2).run1();
  Tensor p1 = conv_node("Conv", x, w1, nullptr, g, 1).threads(1).run1();
  EXPECT_EQ(p1, p2);
  expect_near_all(values_of(p2), naive_conv(x, w1, nullptr, p2.dims(), g, 1), 1e-4);
}

// The AVX-512 kernels against direct loops in double, over every row-block size of the
// product (1–12 rows and more), column counts around the 16-lane vectors, and depthwise
// geometries with strides 1 and 2, dilations, pads wider than the kernel, and row ranges.
TEST(RuntimeConv, Avx512KernelsMatchDirectLoops) {
  if (!runtime::cpu_has_avx512())
    GTEST_SKIP() << "this CPU (or AUTOPAR_CPU_KERNELS) has no AVX-512";
  uint64_t seed = 500;
  for (int64_t rows : {1, 5, 12, 13, 27}) {
    for (int64_t cols : {1, 15, 16, 17, 32, 33, 49}) {
      for (int64_t depth : {1, 7, 40}) {
        // One contiguous column is a matrix-vector product of its own.
        const int64_t ldw = depth + 3, ldx = cols == 1 && depth == 40 ? 1 : cols + 5;
        const int64_t ldy = cols + 2;
        const std::vector<double> w = values_of(random_f32({rows, ldw}, ++seed));
        const std::vector<double> x = values_of(random_f32({depth, ldx}, ++seed));
        const std::vector<double> bias = values_of(random_f32({rows}, ++seed));
        std::vector<float> wf(w.begin(), w.end()), xf(x.begin(), x.end()),
            bf(bias.begin(), bias.end());
        for (bool with_bias : {false, true}) {
          std::vector<float> y(static_cast<size_t>(rows * ldy), 7.0f);
          runtime::gemm_avx512(wf.data(), ldw, rows, depth, xf.data(), ldx, cols,
                               with_bias ? bf.data() : nullptr, nullptr, y.data(), ldy);
          for (int64_t m = 0; m < rows; ++m) {
            for (int64_t j = 0; j < ldy; ++j) {
              const float got = y[m * ldy + j];
              if (j >= cols) {
                EXPECT_EQ(got, 7.0f) << "wrote past the columns";
                continue;
              }
              double want = with_bias ? bias[m] : 0.0;
              for (int64_t k = 0; k < depth; ++k) want += w[m * ldw + k] * x[k * ldx + j];
              ASSERT_NEAR(got, want, 1e-5 * (1 + std::abs(want)))
                  << rows << "x" << depth << "x" << cols << " at " << m << "," << j;
            }
          }
        }
      }
    }
  }
  // Depthwise: {ih, iw, kh, kw, sy, sx, py, px, dy, dx, pads at the end}.
  struct Case {
    int64_t ih, iw, kh, kw, sy, sx, py, px, dy, dx, py_end, px_end;
  };
  const std::vector<Case> cases = {
      {7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   {14, 14, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1},
      {20, 37, 5, 5, 1, 1, 2, 2, 1, 1, 2, 2}, {33, 40, 5, 5, 2, 2, 2, 2, 1, 1, 2, 2},
      {9, 18, 3, 3, 1, 2, 2, 3, 2, 2, 2, 3},  {4, 5, 3, 7, 1, 1, 4, 5, 1, 1, 4, 5},
      {1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   {6, 50, 1, 16, 2, 1, 0, 7, 1, 1, 0, 8},
      {12, 12, 2, 4, 3, 2, 1, 1, 1, 3, 0, 2},
  };
  for (const Case& c : cases) {
    runtime::DepthwiseShape s{c.ih, c.iw, 0, 0, c.kh, c.kw, c.sy, c.sx, c.py, c.px, c.dy, c.dx};
    s.oh = (c.ih + c.py + c.py_end - ((c.kh - 1) * c.dy + 1)) / c.sy + 1;
    s.ow = (c.iw + c.px + c.px_end - ((c.kw - 1) * c.dx + 1)) / c.sx + 1;
    ASSERT_TRUE(runtime::depthwise_avx512_supports(s));
    const std::vector<double> in = values_of(random_f32({c.ih, c.iw}, ++seed));
    const std::vector<double> taps = values_of(random_f32({c.kh, c.kw}, ++seed));
    std::vector<float> inf(in.begin(), in.end()), tapf(taps.begin(), taps.end());
    const float bias = 0.375f;
    // Rows [1, oh − 1) (or all of them) into a buffer whose other rows must stay untouched.
    const int64_t begin = s.oh > 2 ? 1 : 0, end = s.oh > 2 ? s.oh - 1 : s.oh;
    std::vector<float> out(static_cast<size_t>(s.oh * s.ow), -9.0f);
    runtime::depthwise_avx512(s, inf.data(), tapf.data(), &bias, nullptr, begin, end, out.data());
    for (int64_t oy = 0; oy < s.oh; ++oy) {
      for (int64_t ox = 0; ox < s.ow; ++ox) {
        const float got = out[oy * s.ow + ox];
        if (oy < begin || oy >= end) {
          EXPECT_EQ(got, -9.0f) << "wrote outside its rows";
          continue;
        }
        double want = bias;
        for (int64_t ky = 0; ky < c.kh; ++ky) {
          for (int64_t kx = 0; kx < c.kw; ++kx) {
            const int64_t iy = oy * c.sy - c.py + ky * c.dy, ix = ox * c.sx - c.px + kx * c.dx;
            if (iy >= 0 && iy < c.ih && ix >= 0 && ix < c.iw)
              want += taps[ky * c.kw + kx] * in[iy * c.iw + ix];
          }
        }
        ASSERT_NEAR(got, want, 1e-5 * (1 + std::abs(want)))
            << c.ih << "x" << c.iw << " k " << c.kh << "x" << c.kw << " at " << oy << "," << ox;
      }
    }
  }
}

// The stride-2 gather reads in[0, 2·n − 1) and nothing past it: its input ends where an
// unreadable page begins, so a load beyond it faults.
TEST(RuntimeConv, Avx512StrideTwoColumnsReadNothingPastTheirInput) {
  if (!runtime::cpu_has_avx512())
    GTEST_SKIP() << "this CPU (or AUTOPAR_CPU_KERNELS) has no AVX-512";
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* pages = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(pages, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char*>(pages) + page, page, PROT_NONE), 0);
  float* end = reinterpret_cast<float*>(static_cast<char*>(pages) + page);
  for (int64_t n = 1; n <= 40; ++n) {
    float* in = end - (2 * n - 1);
    for (int64_t i = 0; i < 2 * n - 1; ++i) in[i] = static_cast<float>(i);
    std::vector<float> out(static_cast<size_t>(n) + 1, -1.0f);
    runtime::even_elements_avx512(in, n, out.data());
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(out[j], static_cast<float>(2 * j)) << n;
    EXPECT_EQ(out[n], -1.0f) << "wrote past the columns, n " << n;
  }
  munmap(pages, 2 * page);
}

TEST(RuntimeConv, ConvComputesInDouble) {
  const Tensor x = to_f64(random_f32({2, 4, 6, 5}, 21));
  const Tensor w = to_f64(random_f32({4, 2, 3, 3}, 22));
  const Tensor b = to_f64(random_f32({4}, 23));
  const Geometry g{{1, 2}, {1, 1}, {1, 1, 1, 1}};
  Tensor y = conv_node("Conv", x, w, &b, g, 2).run1();
  ASSERT_EQ(y.dtype(), DType::kFloat64);
  expect_near_all(values_of(y), naive_conv(x, w, &b, y.dims(), g, 2), 1e-12);
}

TEST(RuntimeConv, ConvRejectsIntegerInputs) {
  auto result = NodeRun("Conv")
                    .input(Tensor::from_int64({1, 1, 2, 2}, std::vector<int64_t>{1, 2, 3, 4}))
                    .input(Tensor::from_int64({1, 1, 1, 1}, std::vector<int64_t>{2}))
                    .run();
  ASSERT_FALSE(result.is_ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("node 'n' (Conv): dtype i64 is not supported by the CPU kernel"));
}

// ---- ConvTranspose -------------------------------------------------------------------

TEST(RuntimeConv, ConvTransposeMatchesHandValues) {
  // ONNX's basic example: a 3x3 ramp scattered by two 3x3 kernels of ones.
  Tensor y = NodeRun("ConvTranspose")
                 .input(f32({1, 1, 3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8}))
                 .input(f32({1, 2, 3, 3}, std::vector<float>(18, 1.0f)))
                 .run1();
  EXPECT_EQ(y.dims(), (Ints{1, 2, 5, 5}));
  const std::vector<double> plane = {0,  1,  3, 3,  2,  3,  8,  15, 12, 7,  9,  21, 36,
                                     27, 15, 9, 20, 33, 24, 13, 6,  13, 21, 15, 8};
  std::vector<double> both = plane;
  both.insert(both.end(), plane.begin(), plane.end());
  EXPECT_THAT(values_of(y), ElementsAreArray(both));

  // 1-D, stride 2 with output_padding 1 and a bias: [1, 2] * [1, 10] -> 1 10 2 20 (+ pad).
  Tensor one_d = NodeRun("ConvTranspose")
                     .input(f32({1, 1, 2}, {1, 2}))
                     .input(f32({1, 1, 2}, {1, 10}))
                     .input(f32({1}, {0.5f}))
                     .attr("strides", Ints{2})
                     .attr("output_padding", Ints{1})
                     .run1();
  EXPECT_THAT(values_of(one_d), ElementsAre(1.5, 10.5, 2.5, 20.5, 0.5));
}

TEST(RuntimeConv, ConvTransposeMatchesDirectLoopOverGeometries) {
  struct Config {
    Ints x_dims, w_dims;
    Geometry geometry;
    Ints output_padding;
    int64_t group;
    bool bias;
  };
  const std::vector<Config> configs = {
      {{2, 3, 4, 5}, {3, 2, 3, 3}, {{2, 1}, {1, 2}, {1, 0, 0, 2}}, {1, 0}, 1, true},
      {{1, 4, 3, 3}, {4, 3, 2, 3}, {{2, 3}, {2, 1}, {0, 1, 1, 0}}, {0, 2}, 2, false},
      {{2, 3, 4, 4}, {3, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1, 1, 1}}, {0, 0}, 3, true},
      {{1, 2, 7}, {2, 3, 4}, {{3}, {1}, {2, 1}}, {2}, 1, true},
      {{1, 2, 3, 2, 3},
       {2, 2, 2, 2, 2},
       {{2, 1, 2}, {1, 2, 1}, {0, 1, 0, 1, 0, 0}},
       {1, 0, 1},
       1,
       true},
  };
  uint64_t seed = 200;
  for (const Config& c : configs) {
    const Tensor x = random_f32(c.x_dims, ++seed);
    const Tensor w = random_f32(c.w_dims, ++seed);
    const Tensor b = random_f32({c.w_dims[1] * c.group}, ++seed);
    Tensor y = conv_node("ConvTranspose", x, w, c.bias ? &b : nullptr, c.geometry, c.group)
                   .attr("output_padding", c.output_padding)
                   .run1();
    SCOPED_TRACE(::testing::Message() << "x " << ::testing::PrintToString(c.x_dims));
    // Output extent: stride·(in − 1) + output_padding + (k − 1)·dilation + 1 − pads.
    const size_t rank = c.x_dims.size() - 2;
    for (size_t d = 0; d < rank; ++d) {
      const Geometry& g = c.geometry;
      EXPECT_EQ(y.dims()[d + 2], g.strides[d] * (c.x_dims[d + 2] - 1) + c.output_padding[d] +
                                     (c.w_dims[d + 2] - 1) * g.dilations[d] + 1 - g.pads[d] -
                                     g.pads[d + rank]);
    }
    expect_near_all(
        values_of(y),
        naive_conv_transpose(x, w, c.bias ? &b : nullptr, y.dims(), c.geometry, c.group), 1e-5);
  }
}

TEST(RuntimeConv, ConvTransposeOutputShapeDerivesPads) {
  // in 3, stride 3, kernel 3: the full extent is 9; output_shape 10 is total_padding −1.
  const Tensor x = random_f32({1, 1, 3, 3}, 31);
  const Tensor w = random_f32({1, 2, 3, 3}, 32);
  // NOTSET keeps pads 0 and extends the output at the end.
  Tensor extended = NodeRun("ConvTranspose")
                        .input(x)
                        .input(w)
                        .attr("strides", Ints{3, 2})
                        .attr("output_shape", Ints{10, 8})
                        .run1();
  ASSERT_EQ(extended.dims(), (Ints{1, 2, 10, 8}));
  expect_near_all(
      values_of(extended),
      naive_conv_transpose(x, w, nullptr, extended.dims(), {{3, 2}, {1, 1}, {0, 0, 0, 0}}, 1),
      1e-5);

  // SAME_UPPER: output in·stride = 6, total padding 2·2 + 3 − 6 = 1, the odd one at the end.
  // SAME_LOWER puts it at the beginning.
  for (const char* auto_pad : {"SAME_UPPER", "SAME_LOWER"}) {
    Tensor y = NodeRun("ConvTranspose")
                   .input(x)
                   .input(w)
                   .attr("strides", Ints{2, 2})
                   .attr("auto_pad", auto_pad)
                   .run1();
    ASSERT_EQ(y.dims(), (Ints{1, 2, 6, 6}));
    const int64_t begin = std::string(auto_pad) == "SAME_UPPER" ? 0 : 1;
    expect_near_all(values_of(y),
                    naive_conv_transpose(x, w, nullptr, y.dims(),
                                         {{2, 2}, {1, 1}, {begin, begin, 1 - begin, 1 - begin}}, 1),
                    1e-5);
  }

  // SAME_UPPER with stride 3 and a 1-wide kernel: total padding 3·2 + 1 − 9 = −2, a negative
  // pad of −1 on each side shifts the output.
  const Tensor w1 = random_f32({1, 1, 1, 1}, 33);
  Tensor shifted = NodeRun("ConvTranspose")
                       .input(x)
                       .input(w1)
                       .attr("strides", Ints{3, 3})
                       .attr("auto_pad", "SAME_UPPER")
                       .run1();
  ASSERT_EQ(shifted.dims(), (Ints{1, 1, 9, 9}));
  expect_near_all(
      values_of(shifted),
      naive_conv_transpose(x, w1, nullptr, shifted.dims(), {{3, 3}, {1, 1}, {-1, -1, -1, -1}}, 1),
      1e-6);
}

TEST(RuntimeConv, ConvTransposePanelsMatchAcrossThreadsAndDouble) {
  const Tensor x = random_f32({1, 16, 20, 20}, 41);
  const Tensor w = random_f32({16, 24, 4, 4}, 42);
  const Tensor b = random_f32({24}, 43);
  const Geometry g{{2, 2}, {1, 1}, {1, 1, 1, 1}};
  Tensor two = conv_node("ConvTranspose", x, w, &b, g, 1).threads(2).run1();
  Tensor one = conv_node("ConvTranspose", x, w, &b, g, 1).threads(1).run1();
  EXPECT_EQ(one, two);
  expect_near_all(values_of(two), naive_conv_transpose(x, w, &b, two.dims(), g, 1), 1e-4);

  const Tensor x64 = to_f64(random_f32({2, 2, 3, 4}, 44));
  const Tensor w64 = to_f64(random_f32({2, 3, 3, 2}, 45));
  const Geometry g64{{2, 1}, {1, 2}, {0, 1, 1, 0}};
  Tensor y64 = conv_node("ConvTranspose", x64, w64, nullptr, g64, 1).run1();
  ASSERT_EQ(y64.dtype(), DType::kFloat64);
  expect_near_all(values_of(y64), naive_conv_transpose(x64, w64, nullptr, y64.dims(), g64, 1),
                  1e-12);
}

// ---- pooling -------------------------------------------------------------------------

TEST(RuntimeConv, MaxPoolReturnsMaximaAndFlatIndices) {
  // Two images of two channels; indices count (n·C + c)·H·W.
  std::vector<float> values(2 * 2 * 4 * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>((i * 7) % 16) + static_cast<float>(i / 16) * 100.0f;
  }
  auto result = NodeRun("MaxPool")
                    .input(f32({2, 2, 4, 4}, values))
                    .attr("kernel_shape", Ints{2, 2})
                    .attr("strides", Ints{2, 2})
                    .outputs(2)
                    .run();
  ASSERT_TRUE(result.is_ok()) << result.status().message();
  const Tensor& y = (*result)[0];
  const Tensor& indices = (*result)[1];
  ASSERT_EQ(indices.dtype(), DType::kInt64);
  // Plane 0 is (7i mod 16): rows [0 7 14 5], [12 3 10 1], [8 15 6 13], [4 11 2 9].
  const std::vector<double> maxima = values_of(y);
  const std::vector<int64_t> flat = indices.to_int64_vector();
  EXPECT_THAT(std::vector<double>(maxima.begin(), maxima.begin() + 4), ElementsAre(12, 14, 15, 13));
  EXPECT_THAT(std::vector<int64_t>(flat.begin(), flat.begin() + 4), ElementsAre(4, 2, 9, 11));
  // Every plane repeats the pattern shifted by 100 and by 16 indices.
  for (int plane = 1; plane < 4; ++plane) {
    EXPECT_EQ(y.float_at(plane * 4), 12 + 100 * plane);
    EXPECT_EQ(indices.int_at(plane * 4 + 3), 11 + 16 * plane);
  }
}

// Reference max / average pooling over explicit pads, strides and dilations.
struct PoolReference {
  std::vector<double> values;
  std::vector<int64_t> indices;
};
PoolReference naive_pool(const Tensor& x, const Ints& y_dims, const Ints& kernel, const Geometry& g,
                         bool average, bool count_include_pad) {
  const Ints& xd = x.dims();
  const size_t rank = xd.size() - 2;
  const Ints in(xd.begin() + 2, xd.end()), out(y_dims.begin() + 2, y_dims.end());
  PoolReference ref;
  for (int64_t plane = 0; plane < xd[0] * xd[1]; ++plane) {
    for (int64_t p = 0; p < count_of(out); ++p) {
      const Ints o = coords_of(p, out);
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      int64_t best_index = -1, valid = 0, padded = 0;
      for (int64_t k = 0; k < count_of(kernel); ++k) {
        const Ints kc = coords_of(k, kernel);
        Ints i(rank);
        bool inside = true, in_padded = true;
        for (size_t d = 0; d < rank; ++d) {
          i[d] = o[d] * g.strides[d] - g.pads[d] + kc[d] * g.dilations[d];
          inside = inside && i[d] >= 0 && i[d] < in[d];
          in_padded = in_padded && i[d] >= -g.pads[d] && i[d] < in[d] + g.pads[d + rank];
        }
        padded += in_padded;
        if (!inside) continue;
        const int64_t index = plane * count_of(in) + flat_of(i, in);
        const double v = x.float_at(index);
        ++valid;
        sum += v;
        if (v > best) {
          best = v;
          best_index = index;
        }
      }
      ref.values.push_back(average ? sum / static_cast<double>(count_include_pad ? padded : valid)
                                   : best);
      ref.indices.push_back(best_index);
    }
  }
  return ref;
}

// MaxPool windows over pads, strides, dilations and ceil_mode in one to three spatial dims.
struct MaxPoolConfig {
  Ints x_dims, kernel;
  Geometry geometry;
  bool ceil_mode;
};
const std::vector<MaxPoolConfig> kMaxPoolConfigs = {
    {{2, 3, 7, 8}, {3, 3}, {{2, 2}, {1, 1}, {1, 1, 1, 1}}, false},  // ResNet's stem pool
    {{2, 3, 7, 8}, {3, 2}, {{2, 3}, {1, 1}, {1, 0, 1, 1}}, false},
    {{1, 2, 9, 9}, {3, 3}, {{2, 2}, {2, 2}, {1, 1, 1, 1}}, true},
    {{1, 1, 6, 5}, {2, 2}, {{2, 2}, {1, 1}, {0, 0, 0, 0}}, true},  // ceil overhangs the end
    {{2, 2, 10}, {4}, {{3}, {2}, {2, 1}}, false},
    {{1, 2, 4, 5, 6}, {2, 3, 2}, {{2, 1, 3}, {1, 1, 2}, {1, 0, 1, 0, 1, 0}}, true},
};

// `run` with the window's attributes.
NodeRun& windowed(NodeRun& run, const MaxPoolConfig& c) {
  return run.attr("kernel_shape", c.kernel)
      .attr("strides", c.geometry.strides)
      .attr("dilations", c.geometry.dilations)
      .attr("pads", c.geometry.pads)
      .attr("ceil_mode", c.ceil_mode ? 1 : 0);
}

TEST(RuntimeConv, MaxPoolMatchesDirectLoopWithPadsDilationsAndCeilMode) {
  uint64_t seed = 300;
  for (const MaxPoolConfig& c : kMaxPoolConfigs) {
    const Tensor x = random_f32(c.x_dims, ++seed);
    NodeRun pool("MaxPool");
    auto result = windowed(pool.input(x), c).outputs(2).run();
    ASSERT_TRUE(result.is_ok()) << result.status().message();
    SCOPED_TRACE(::testing::Message() << "x " << ::testing::PrintToString(c.x_dims));
    const PoolReference ref =
        naive_pool(x, (*result)[0].dims(), c.kernel, c.geometry, false, false);
    EXPECT_EQ(values_of((*result)[0]), ref.values);
    EXPECT_EQ((*result)[1].to_int64_vector(), ref.indices);
  }
}

// MaxPoolGrad adds each window's gradient where MaxPool's index for that window points, windows
// in order: a scatter-add of MaxPool's own indices, to the bit (ties and NaN included).
TEST(RuntimeConv, MaxPoolGradAddsAtMaxPoolsIndices) {
  uint64_t seed = 700;
  for (size_t c = 0; c < kMaxPoolConfigs.size(); ++c) {
    const MaxPoolConfig& config = kMaxPoolConfigs[c];
    SCOPED_TRACE(c);
    Tensor x = random_f32(config.x_dims, ++seed);
    std::vector<double> v = values_of(x);
    // Ties in every other config (values on a coarse grid), and a NaN in the first.
    std::vector<float> values;
    for (double e : v) values.push_back(c % 2 == 1 ? std::round(e * 2.0f) : static_cast<float>(e));
    if (c == 0) values[9] = std::numeric_limits<float>::quiet_NaN();
    x = f32(config.x_dims, values);
    NodeRun pool("MaxPool");
    auto pooled = windowed(pool.input(x), config).outputs(2).run();
    ASSERT_TRUE(pooled.is_ok()) << pooled.status().message();
    const Tensor dy = random_f32((*pooled)[0].dims(), ++seed);
    NodeRun max_pool_grad("MaxPoolGrad", 1, std::string(kTrainingDomain));
    auto grad = windowed(max_pool_grad.input(dy).input(x), config).run();
    ASSERT_TRUE(grad.is_ok()) << grad.status().message();
    std::vector<float> expected(values.size(), 0.0f);
    const std::vector<int64_t> indices = (*pooled)[1].to_int64_vector();
    const std::vector<double> g = values_of(dy);
    for (size_t p = 0; p < indices.size(); ++p) {
      if (indices[p] >= 0) expected[indices[p]] += static_cast<float>(g[p]);
    }
    EXPECT_EQ(values_of((*grad)[0]), values_of(f32(config.x_dims, expected)));
  }
  // dY must have MaxPool's output shape.
  auto wrong = NodeRun("MaxPoolGrad", 1, std::string(kTrainingDomain))
                   .input(random_f32({1, 1, 2, 2}, 1))
                   .input(random_f32({1, 1, 4, 4}, 2))
                   .attr("kernel_shape", Ints{2, 2})
                   .run();
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_THAT(wrong.status().message(), ::testing::HasSubstr("must be f32[1,1,3,3]"));
}

TEST(RuntimeConv, MaxPoolAutoPadStorageOrderAndNaN) {
  // SAME_UPPER on 5 wide, kernel 2, stride 2: pad one at the end: [1,2] [3,4] [5].
  Tensor upper = NodeRun("MaxPool")
                     .input(f32({1, 1, 5}, {1, 5, 3, 2, 4}))
                     .attr("kernel_shape", Ints{2})
                     .attr("strides", Ints{2})
                     .attr("auto_pad", "SAME_UPPER")
                     .run1();
  EXPECT_THAT(values_of(upper), ElementsAre(5, 3, 4));
  // SAME_LOWER pads the beginning: [1] [5,3] [2,4].
  Tensor lower = NodeRun("MaxPool")
                     .input(f32({1, 1, 5}, {1, 5, 3, 2, 4}))
                     .attr("kernel_shape", Ints{2})
                     .attr("strides", Ints{2})
                     .attr("auto_pad", "SAME_LOWER")
                     .run1();
  EXPECT_THAT(values_of(lower), ElementsAre(1, 5, 4));

  // storage_order 1 numbers the spatial dims column-major: h + w·H.
  auto column_major = NodeRun("MaxPool")
                          .input(f32({1, 2, 2, 3}, {1, 9, 2, 3, 4, 5, 6, 0, 7, 8, 1, 2}))
                          .attr("kernel_shape", Ints{2, 3})
                          .attr("storage_order", 1)
                          .outputs(2)
                          .run();
  ASSERT_TRUE(column_major.is_ok()) << column_major.status().message();
  EXPECT_THAT(values_of((*column_major)[0]), ElementsAre(9, 8));
  // 9 is at (h 0, w 1): 0 + 1·2 = 2; 8 at (1, 0) of plane 1: 6 + 1 = 7.
  EXPECT_THAT((*column_major)[1].to_int64_vector(), ElementsAre(2, 7));

  // NaN loses against numbers; the first of equal maxima wins.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto with_nan = NodeRun("MaxPool")
                      .input(f32({1, 1, 4}, {nan, 2, 2, nan}))
                      .attr("kernel_shape", Ints{4})
                      .outputs(2)
                      .run();
  ASSERT_TRUE(with_nan.is_ok());
  EXPECT_THAT(values_of((*with_nan)[0]), ElementsAre(2));
  EXPECT_THAT((*with_nan)[1].to_int64_vector(), ElementsAre(1));
}

TEST(RuntimeConv, MaxPoolTakesEightBitIntegers) {
  Tensor x(DType::kUInt8, {1, 1, 2, 3});
  const std::vector<int64_t> bytes = {7, 255, 0, 3, 200, 9};
  for (size_t i = 0; i < bytes.size(); ++i) x.set_from_int(static_cast<int64_t>(i), bytes[i]);
  auto result = NodeRun("MaxPool").input(x).attr("kernel_shape", Ints{2, 2}).outputs(2).run();
  ASSERT_TRUE(result.is_ok()) << result.status().message();
  EXPECT_EQ((*result)[0].dtype(), DType::kUInt8);
  EXPECT_THAT(values_of((*result)[0]), ElementsAre(255, 255));
  EXPECT_THAT((*result)[1].to_int64_vector(), ElementsAre(1, 1));

  Tensor signed_x(DType::kInt8, {1, 1, 3});
  for (int64_t i = 0; i < 3; ++i) signed_x.set_from_int(i, -100 + i);
  Tensor y = NodeRun("MaxPool").input(signed_x).attr("kernel_shape", Ints{2}).run1();
  EXPECT_THAT(values_of(y), ElementsAre(-99, -98));
}

TEST(RuntimeConv, AveragePoolCountsPadsAsAsked) {
  // 3x3 ramp 1..9, kernel 2x2, pads 1 at the beginning: windows at the top-left corner.
  const Tensor x = f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto run = [&](int count_include_pad) {
    return values_of(NodeRun("AveragePool")
                         .input(x)
                         .attr("kernel_shape", Ints{2, 2})
                         .attr("strides", Ints{2, 2})
                         .attr("pads", Ints{1, 1, 0, 0})
                         .attr("count_include_pad", count_include_pad)
                         .run1());
  };
  // Windows: {1}, {2,3}, {4,7}, {5,6,8,9}.
  EXPECT_THAT(run(0), ElementsAre(1, 2.5, 5.5, 7));
  EXPECT_THAT(run(1), ElementsAre(0.25, 1.25, 2.75, 7));

  // 5 wide, kernel 3, stride 2, one pad at the end: ceil_mode adds a third window at 4 that
  // overhangs the pad.
  auto ceil = [&](int count_include_pad) {
    return values_of(NodeRun("AveragePool")
                         .input(f32({1, 1, 5}, {1, 2, 3, 4, 5}))
                         .attr("kernel_shape", Ints{3})
                         .attr("strides", Ints{2})
                         .attr("pads", Ints{0, 1})
                         .attr("ceil_mode", 1)
                         .attr("count_include_pad", count_include_pad)
                         .run1());
  };
  // Windows [1,2,3], [3,4,5], [5,pad] (overhang past the pad is not counted).
  EXPECT_THAT(ceil(0), ElementsAre(2, 4, 5));
  EXPECT_THAT(ceil(1), ElementsAre(2, 4, 2.5));
}

TEST(RuntimeConv, AveragePoolMatchesDirectLoop) {
  struct Config {
    Ints x_dims, kernel;
    Geometry geometry;
    bool ceil_mode, count_include_pad;
  };
  const std::vector<Config> configs = {
      {{2, 3, 7, 8}, {3, 2}, {{2, 3}, {1, 1}, {1, 0, 1, 1}}, false, false},
      {{2, 3, 7, 8}, {3, 2}, {{2, 3}, {1, 1}, {1, 1, 1, 1}}, true, true},
      {{1, 2, 9}, {4}, {{3}, {1}, {2, 2}}, true, false},
      {{1, 2, 4, 5, 6}, {2, 3, 2}, {{2, 1, 3}, {1, 1, 1}, {1, 0, 1, 0, 1, 0}}, false, true},
  };
  uint64_t seed = 400;
  for (const Config& c : configs) {
    const Tensor x = random_f32(c.x_dims, ++seed);
    Tensor y = NodeRun("AveragePool")
                   .input(x)
                   .attr("kernel_shape", c.kernel)
                   .attr("strides", c.geometry.strides)
                   .attr("pads", c.geometry.pads)
                   .attr("ceil_mode", c.ceil_mode ? 1 : 0)
                   .attr("count_include_pad", c.count_include_pad ? 1 : 0)
                   .run1();
    const PoolReference ref =
        naive_pool(x, y.dims(), c.kernel, c.geometry, true, c.count_include_pad);
    expect_near_all(values_of(y), ref.values, 1e-6);
  }

  // Double precision.
  const Tensor x64 = to_f64(random_f32({1, 2, 5, 5}, 499));
  Tensor y64 = NodeRun("AveragePool")
                   .input(x64)
                   .attr("kernel_shape", Ints{3, 3})
                   .attr("pads", Ints{1, 1, 1, 1})
                   .run1();
  ASSERT_EQ(y64.dtype(), DType::kFloat64);
  expect_near_all(
      values_of(y64),
      naive_pool(x64, y64.dims(), {3, 3}, {{1, 1}, {1, 1}, {1, 1, 1, 1}}, true, false).values,
      1e-15);
}

TEST(RuntimeConv, GlobalAveragePoolAveragesEachPlane) {
  Tensor y = NodeRun("GlobalAveragePool")
                 .input(f32({2, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, -1, -1, -1, -1, 0, 0, 0, 10}))
                 .run1();
  EXPECT_EQ(y.dims(), (Ints{2, 2, 1, 1}));
  EXPECT_THAT(values_of(y), ElementsAre(2.5, 6.5, -1, 2.5));

  Tensor y3 = NodeRun("GlobalAveragePool").input(f64({1, 1, 2, 1, 3}, {1, 2, 3, 4, 5, 6})).run1();
  EXPECT_EQ(y3.dims(), (Ints{1, 1, 1, 1, 1}));
  EXPECT_THAT(values_of(y3), ElementsAre(3.5));
}

TEST(RuntimeConv, PoolingResultsDoNotDependOnThreads) {
  const Tensor x = random_f32({4, 8, 16, 16}, 500);
  auto run = [&](const char* op, int threads) {
    return NodeRun(op)
        .input(x)
        .attr("kernel_shape", Ints{3, 3})
        .attr("strides", Ints{2, 2})
        .attr("pads", Ints{1, 1, 1, 1})
        .threads(threads)
        .run1();
  };
  EXPECT_EQ(run("MaxPool", 1), run("MaxPool", 2));
  EXPECT_EQ(run("AveragePool", 1), run("AveragePool", 2));
}

}  // namespace
}  // namespace autopar
