// Decode attention over a paged KV cache on the CPU, as an XLA FFI custom call.
//
// One query a row: q [B, Hq, D] (float32) against the first lengths[b] positions of row b,
// whose K/V live in the pages of its block table; the pool is read in place:
//   k_pool, v_pool [L, Hkv, P, page_size, D]  float32, or bfloat16 stored as its uint16 bits;
//   layer          int32 scalar               which layer's pages;
//   block_tables   int32 [B, W]               position p of row b: page tables[b, p / ps],
//                                             offset p % ps;
//   lengths        int32 [B]                  keys a row sees (0: a dead row, zeros out).
// Out: float32 [B, Hq, D]. Each (row, kv head) is one task: the G = Hq / Hkv query heads that
// share the kv head read each page once, with the online softmax (flash attention's
// rescaling) across pages. Tasks are spread over XLA's intra-op thread pool, the calling
// thread taking its share, so a step's attention reads each visible key once, in place.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

inline float to_float(float x) { return x; }

inline float to_float(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

struct Shapes {
  int64_t batch, heads, kv_heads, group, dim, pages, page_size, width;
  int64_t layer;
  float scale;
};

template <typename T>
void attend_task(const Shapes& s, const float* q, const T* k_pool, const T* v_pool,
                 const int32_t* tables, const int32_t* lengths, float* out, int64_t task) {
  const int64_t b = task / s.kv_heads, h = task % s.kv_heads;
  const int64_t G = s.group, D = s.dim, ps = s.page_size;
  float* o = out + (b * s.heads + h * G) * D;
  const int64_t length = std::min<int64_t>(std::max<int32_t>(lengths[b], 0), s.width * ps);
  if (length == 0) {
    std::fill(o, o + G * D, 0.0f);
    return;
  }
  // Queries of the group, pre-scaled; running max, sum and output a query head.
  std::vector<float> qs(G * D), acc(G * D, 0.0f), scores(G * ps);
  std::vector<float> row_max(G, -std::numeric_limits<float>::infinity()), row_sum(G, 0.0f);
  std::vector<float> key(D), value(D);
  const float* qb = q + (b * s.heads + h * G) * D;
  for (int64_t i = 0; i < G * D; ++i) qs[i] = qb[i] * s.scale;
  const int64_t page_elems = ps * D;
  const int64_t head_base = (s.layer * s.kv_heads + h) * s.pages * page_elems;
  const int32_t* table = tables + b * s.width;
  for (int64_t j = 0; j * ps < length; ++j) {
    const int64_t page = table[j];
    if (page < 0 || page >= s.pages) continue;  // never for a live row's own pages
    const int64_t count = std::min(ps, length - j * ps);
    const T* kp = k_pool + head_base + page * page_elems;
    const T* vp = v_pool + head_base + page * page_elems;
    for (int64_t t = 0; t < count; ++t) {
      const T* kt = kp + t * D;
      for (int64_t d = 0; d < D; ++d) key[d] = to_float(kt[d]);
      for (int64_t g = 0; g < G; ++g) {
        const float* qg = qs.data() + g * D;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < D; ++d) dot += qg[d] * key[d];
        scores[g * ps + t] = dot;
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      float* sg = scores.data() + g * ps;
      float page_max = sg[0];
      for (int64_t t = 1; t < count; ++t) page_max = std::max(page_max, sg[t]);
      const float new_max = std::max(row_max[g], page_max);
      const float rescale = std::exp(row_max[g] - new_max);  // 0 on the first page
      row_max[g] = new_max;
      float sum = 0.0f;
      for (int64_t t = 0; t < count; ++t) {
        sg[t] = std::exp(sg[t] - new_max);
        sum += sg[t];
      }
      row_sum[g] = row_sum[g] * rescale + sum;
      float* ag = acc.data() + g * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) ag[d] *= rescale;
    }
    for (int64_t t = 0; t < count; ++t) {
      const T* vt = vp + t * D;
      for (int64_t d = 0; d < D; ++d) value[d] = to_float(vt[d]);
      for (int64_t g = 0; g < G; ++g) {
        const float p = scores[g * ps + t];
        float* ag = acc.data() + g * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) ag[d] += p * value[d];
      }
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    const float inv = row_sum[g] > 0.0f ? 1.0f / row_sum[g] : 0.0f;
    for (int64_t d = 0; d < D; ++d) o[g * D + d] = acc[g * D + d] * inv;
  }
}

// Tasks handed out one at a time by an atomic counter, to the pool's threads and the caller.
struct Work {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  int64_t total = 0;
  std::mutex mu;
  std::condition_variable finished;
};

template <typename Fn>
void run_tasks(ffi::ThreadPool* pool, int64_t total, Fn fn) {
  auto work = std::make_shared<Work>();
  work->total = total;
  auto drain = [work, fn]() {
    int64_t mine = 0;
    for (int64_t task; (task = work->next.fetch_add(1)) < work->total; ++mine) fn(task);
    if (mine && work->done.fetch_add(mine) + mine == work->total) {
      std::lock_guard<std::mutex> lock(work->mu);
      work->finished.notify_all();
    }
  };
  const int64_t helpers = pool ? std::min<int64_t>(pool->num_threads(), total) - 1 : 0;
  for (int64_t i = 0; i < helpers; ++i) pool->Schedule(decltype(drain)(drain));
  drain();
  std::unique_lock<std::mutex> lock(work->mu);
  work->finished.wait(lock, [&] { return work->done.load() == work->total; });
}

ffi::Error PagedDecodeImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q,
                           ffi::AnyBuffer k_pool, ffi::AnyBuffer v_pool,
                           ffi::Buffer<ffi::S32> layer, ffi::Buffer<ffi::S32> tables,
                           ffi::Buffer<ffi::S32> lengths, float scale,
                           ffi::ResultBuffer<ffi::F32> out) {
  auto qd = q.dimensions();
  auto kd = k_pool.dimensions();
  auto td = tables.dimensions();
  if (qd.size() != 3 || kd.size() != 5 || td.size() != 2)
    return ffi::Error::InvalidArgument("paged_decode: q [B,Hq,D], pools [L,Hkv,P,ps,D], "
                                       "tables [B,W] expected");
  if (k_pool.element_type() != v_pool.element_type() ||
      (k_pool.element_type() != ffi::F32 && k_pool.element_type() != ffi::U16))
    return ffi::Error::InvalidArgument("paged_decode: pools must both be f32 or u16 (bf16)");
  for (size_t i = 0; i < 5; ++i)
    if (kd[i] != v_pool.dimensions()[i])
      return ffi::Error::InvalidArgument("paged_decode: K and V pools differ in shape");
  Shapes s;
  s.batch = qd[0];
  s.heads = qd[1];
  s.dim = qd[2];
  s.kv_heads = kd[1];
  s.pages = kd[2];
  s.page_size = kd[3];
  s.width = td[1];
  s.scale = scale;
  if (kd[4] != s.dim || s.kv_heads == 0 || s.heads % s.kv_heads || td[0] != s.batch ||
      lengths.element_count() != static_cast<size_t>(s.batch))
    return ffi::Error::InvalidArgument("paged_decode: shapes do not match");
  s.group = s.heads / s.kv_heads;
  s.layer = layer.typed_data()[0];
  if (s.layer < 0 || s.layer >= kd[0])
    return ffi::Error::InvalidArgument("paged_decode: layer out of range");
  const float* qp = q.typed_data();
  const int32_t* tp = tables.typed_data();
  const int32_t* lp = lengths.typed_data();
  float* op = out->typed_data();
  const int64_t total = s.batch * s.kv_heads;
  if (k_pool.element_type() == ffi::F32) {
    const float* kp = static_cast<const float*>(k_pool.untyped_data());
    const float* vp = static_cast<const float*>(v_pool.untyped_data());
    run_tasks(&pool, total, [=](int64_t t) { attend_task(s, qp, kp, vp, tp, lp, op, t); });
  } else {
    const uint16_t* kp = static_cast<const uint16_t*>(k_pool.untyped_data());
    const uint16_t* vp = static_cast<const uint16_t*>(v_pool.untyped_data());
    run_tasks(&pool, total, [=](int64_t t) { attend_task(s, qp, kp, vp, tp, lp, op, t); });
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(AgenticJaxPagedDecode, PagedDecodeImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Attr<float>("scale")
                                  .Ret<ffi::Buffer<ffi::F32>>());
