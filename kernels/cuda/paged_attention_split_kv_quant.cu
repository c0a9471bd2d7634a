// The split-KV kernels for the scaled KV formats (fp8_e4m3, int8, int4,
// fp4_e2m1): the CUDA-core kernel and the tensor-core one
// (paged_attention_split_kv_mma.cuh), instantiated apart from the fp32 / 16-bit caches of
// paged_attention_split_kv.cu so that the two compile in parallel and a change
// to one format's decoder does not rebuild the other.
#include "kernels/cuda/paged_attention_split_kv.cuh"
#include "kernels/cuda/paged_attention_split_kv_mma.cuh"

namespace kvserve::kernels::cuda::split_kv {

#define KVSERVE_SPLIT_KV_INSTANTIATE(F)                                                       \
  template cudaError_t LaunchSplitKvFormat<F>(int, const SplitKvArgs&, const MergeArgs&, int, \
                                              dim3, cudaStream_t);
KVSERVE_SPLIT_KV_INSTANTIATE(KvDtype::kFp8E4m3)
KVSERVE_SPLIT_KV_INSTANTIATE(KvDtype::kInt8)
KVSERVE_SPLIT_KV_INSTANTIATE(KvDtype::kInt4)
KVSERVE_SPLIT_KV_INSTANTIATE(KvDtype::kFp4E2m1)
#undef KVSERVE_SPLIT_KV_INSTANTIATE

cudaError_t LaunchSplitKvMmaFormat(KvDtype format, int head_dim, const SplitKvArgs& args,
                                   const MergeArgs& merge, dim3 grid, cudaStream_t stream) {
  switch (format) {
    case KvDtype::kFp8E4m3:
      return LaunchSplitKvMma<KvDtype::kFp8E4m3>(head_dim, args, merge, grid, stream);
    case KvDtype::kInt8:
      return LaunchSplitKvMma<KvDtype::kInt8>(head_dim, args, merge, grid, stream);
    case KvDtype::kInt4:
      return LaunchSplitKvMma<KvDtype::kInt4>(head_dim, args, merge, grid, stream);
    case KvDtype::kFp4E2m1:
      return LaunchSplitKvMma<KvDtype::kFp4E2m1>(head_dim, args, merge, grid, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace kvserve::kernels::cuda::split_kv
