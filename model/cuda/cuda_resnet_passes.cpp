// The CUDA ResNet's passes (cuda_resnet.h): forward and backward layer by layer, each
// convolution an im2col and cuBLAS products, each norm the kernels of resnet_kernels.h (with
// SyncBatchNorm's exchange where a reducer is set), the loss and the gradient hand-off.
#include <cstddef>
#include <cstdint>

#include "common/error.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_resnet.h"
#include "model/cuda/cuda_resnet_layers.h"

namespace gradsync {

using resnet::ConvShape;

void CudaResNet::gemm(cublasOperation_t a_op, cublasOperation_t b_op, int m, int n, int k,
                      const float* a, int lda, const float* b, int ldb, float beta, float* c,
                      int ldc) {
  const float one = 1.0f;
  GRADSYNC_CUBLAS_CHECK(
      cublasSgemm(cublas_.get(), a_op, b_op, m, n, k, &one, a, lda, b, ldb, &beta, c, ldc));
}

void CudaResNet::conv_forward(ConvBn& layer, int batch, const float* x, bool training) {
  const ConvShape& s = layer.conv;
  const int c = s.out_channels, k = s.k();
  const std::int64_t pixels = s.out_pixels(batch);
  GRADSYNC_CUDA_CHECK(kernels::im2col(s, batch, x, col_.data(), stream_.get()));
  // Z [Cout x P] = W [Cout x K] * col [K x P].
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, c, static_cast<int>(pixels), k, params_.data() + layer.weight, c,
       col_.data(), k, 0.0f, layer.z.data(), c);
  const float* gamma = params_.data() + layer.gamma;
  const float* beta = gamma + c;
  float* running_mean = running_.data() + layer.running;
  float* running_var = running_mean + c;
  if (training) {
    GRADSYNC_CHECK(pixels > 1, "batch norm in training needs more than one value per channel");
    GRADSYNC_CUDA_CHECK(
        kernels::channel_sums(c, pixels, layer.z.data(), layer.sums.data(), stream_.get()));
    // SyncBatchNorm: the sums of every rank's batch replace this rank's.
    layer.count =
        sync_->active() ? sync_->forward(c, pixels, layer.sums.data(), stream_.get()) : pixels;
    GRADSYNC_CUDA_CHECK(kernels::bn_train_statistics(c, layer.sums.data(), layer.count, gamma, beta,
                                                     running_mean, running_var, layer.bn(),
                                                     stream_.get()));
  } else {
    GRADSYNC_CUDA_CHECK(kernels::bn_eval_statistics(c, gamma, beta, running_mean, running_var,
                                                    layer.bn(), stream_.get()));
  }
  if (layer.out.size() > 0) {
    GRADSYNC_CUDA_CHECK(kernels::bn_apply(c, pixels, layer.z.data(), layer.bn(), true,
                                          layer.out.data(), stream_.get()));
  }
}

void CudaResNet::forward(int batch, bool training) {
  conv_forward(*stem_, batch, input_.data(), training);
  const float* x = stem_->out.data();
  // Batch norms in layers() order, as the CPU's.
  for (Block& b : blocks_) {
    conv_forward(b.conv1, batch, x, training);
    conv_forward(b.conv2, batch, b.conv1.out.data(), training);
    const int c = b.conv2.channels();
    const std::int64_t pixels = b.conv2.conv.out_pixels(batch);
    if (b.down) {
      conv_forward(*b.down, batch, x, training);
      GRADSYNC_CUDA_CHECK(kernels::bn_bn_add_relu(c, pixels, b.conv2.z.data(), b.conv2.bn(),
                                                  b.down->z.data(), b.down->bn(), b.out.data(),
                                                  stream_.get()));
    } else {
      GRADSYNC_CUDA_CHECK(kernels::bn_add_relu(c, pixels, b.conv2.z.data(), b.conv2.bn(), x,
                                               b.out.data(), stream_.get()));
    }
    x = b.out.data();
  }
  const ConvShape& last = blocks_.back().conv2.conv;
  const int hw = last.out_h * last.out_w, c = fc_in_, classes = shape_.classes;
  GRADSYNC_CUDA_CHECK(kernels::average_pool(c, hw, batch, x, pooled_.data(), stream_.get()));
  // logits [classes x B] = W [classes x C] * pooled [C x B] + b, as the MLP's layers.
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, classes, batch, c, params_.data() + fc_weight_, classes,
       pooled_.data(), c, 0.0f, logits_.data(), classes);
  GRADSYNC_CUDA_CHECK(kernels::add_bias(logits_.data(), params_.data() + fc_bias_, classes, batch,
                                        false, stream_.get()));
}

void CudaResNet::loss(int batch, const float* grad_scale) {
  // Labels are the batch's own (indices null, first 0: column j reads labels_[j]).
  GRADSYNC_CUDA_CHECK(
      kernels::softmax_cross_entropy(logits_.data(), shape_.classes, batch, labels_.data(), nullptr,
                                     0, grad_scale != nullptr ? *grad_scale : 1.0f,
                                     grad_scale != nullptr ? d_logits_.data() : nullptr,
                                     sample_loss_.data(), sample_correct_.data(), stream_.get()));
  GRADSYNC_CUDA_CHECK(kernels::add_loss_totals(sample_loss_.data(), sample_correct_.data(), batch,
                                               totals_.data(), stream_.get()));
}

kernels::LossTotals CudaResNet::read_totals() {
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(host_totals_.data(), totals_.data(),
                                      sizeof(kernels::LossTotals), cudaMemcpyDeviceToHost,
                                      stream_.get()));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  return *host_totals_.data();
}

void CudaResNet::layer_ready(std::size_t layer) {
  if (!grad_ready_) return;
  // Finished, not only enqueued (see the header): the consumer may read grads() on any stream.
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  const ResNet::Layer& range = layers()[layer];
  grad_ready_(range.begin, range.end);
}

void CudaResNet::bn_backward(ConvBn& layer, int batch, const float* g, const float* relu_out,
                             float* g_z, bool accumulate) {
  const int c = layer.channels();
  const std::int64_t pixels = layer.conv.out_pixels(batch);
  const kernels::BnFactors f = layer.bn();
  GRADSYNC_CUDA_CHECK(kernels::bn_backward_sums(c, pixels, g, relu_out, layer.z.data(), f.mean,
                                                layer.sums.data(), stream_.get()));
  float* g_gamma = grads_.data() + layer.gamma;
  GRADSYNC_CUDA_CHECK(kernels::bn_backward_factors(c, layer.sums.data(), pixels,
                                                   params_.data() + layer.gamma, g_gamma,
                                                   g_gamma + c, accumulate, f, stream_.get()));
  if (sync_->active()) {
    // gamma's and beta's gradients stay this rank's; dz's factors take every rank's sums.
    const float* reduced = sync_->backward(c, pixels, layer.count, layer.sums.data(),
                                           layer.invstd.data(), stream_.get());
    GRADSYNC_CUDA_CHECK(kernels::bn_backward_factors_reduced(
        c, reduced, params_.data() + layer.gamma, f, stream_.get()));
  }
  GRADSYNC_CUDA_CHECK(
      kernels::bn_backward_apply(c, pixels, g, relu_out, layer.z.data(), f, g_z, stream_.get()));
}

void CudaResNet::conv_backward(ConvBn& layer, int batch, const float* x, const float* g_z,
                               float* g_x, bool add, bool accumulate) {
  const ConvShape& s = layer.conv;
  const int c = s.out_channels, k = s.k();
  const int pixels = static_cast<int>(s.out_pixels(batch));
  // col is recomputed rather than kept per layer from forward (K times the activation).
  GRADSYNC_CUDA_CHECK(kernels::im2col(s, batch, x, col_.data(), stream_.get()));
  // dW [Cout x K] = dZ [Cout x P] * col [K x P]^T; beta 1 adds to earlier micro-batches.
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, c, k, pixels, g_z, c, col_.data(), k, accumulate ? 1.0f : 0.0f,
       grads_.data() + layer.weight, c);
  if (g_x == nullptr) return;
  // dcol [K x P] = W^T [K x Cout] * dZ [Cout x P], then each input element gathers its entries.
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, k, pixels, c, params_.data() + layer.weight, c, g_z, c, 0.0f,
       dcol_.data(), k);
  GRADSYNC_CUDA_CHECK(kernels::col2im(s, batch, dcol_.data(), g_x, add, stream_.get()));
}

void CudaResNet::backward(int batch, bool accumulate) {
  // The linear layer, as the CUDA MLP's, then the pool's gradient spread over the pixels.
  const int classes = shape_.classes, c = fc_in_;
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, classes, c, batch, d_logits_.data(), classes, pooled_.data(), c,
       accumulate ? 1.0f : 0.0f, grads_.data() + fc_weight_, classes);
  GRADSYNC_CUDA_CHECK(kernels::bias_gradient(d_logits_.data(), classes, batch,
                                             grads_.data() + fc_bias_, accumulate, stream_.get()));
  layer_ready(layers().size() - 1);
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, c, batch, classes, params_.data() + fc_weight_, classes,
       d_logits_.data(), classes, 0.0f, d_pooled_.data(), c);
  const ConvShape& last = blocks_.back().conv2.conv;
  const int hw = last.out_h * last.out_w;
  // The CPU's four rotating gradient tensors, in the same roles (ResNet::backward): `at` holds
  // the gradient of the current block's output; the others take dz of a norm, the gradient of
  // conv1's output and (projection shortcut) the gradient of the block's input. An identity
  // block's input gradient builds up in place of its output gradient, once the norms read it.
  int at = 0;
  GRADSYNC_CUDA_CHECK(kernels::average_pool_backward(c, hw, batch, d_pooled_.data(),
                                                     grad_work_[at].data(), stream_.get()));
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    Block& b = blocks_[i];
    const float* x = i > 0 ? blocks_[i - 1].out.data() : stem_->out.data();
    float* g_out = grad_work_[at].data();
    float* dz = grad_work_[(at + 1) % 4].data();
    float* g_mid = grad_work_[(at + 2) % 4].data();
    float* g_in = g_out;
    // relu(bn2(z2) + shortcut): both branches get dy where the output was positive.
    GRADSYNC_CUDA_CHECK(kernels::relu_mask(b.conv2.conv.out_pixels(batch) * b.conv2.channels(),
                                           b.out.data(), g_out, stream_.get()));
    if (b.down) {
      at = (at + 3) % 4;
      g_in = grad_work_[at].data();
      bn_backward(*b.down, batch, g_out, nullptr, dz, accumulate);
      conv_backward(*b.down, batch, x, dz, g_in, false, accumulate);
      layer_ready(b.down->layer);
    }
    bn_backward(b.conv2, batch, g_out, nullptr, dz, accumulate);
    conv_backward(b.conv2, batch, b.conv1.out.data(), dz, g_mid, false, accumulate);
    layer_ready(b.conv2.layer);
    bn_backward(b.conv1, batch, g_mid, b.conv1.out.data(), g_mid, accumulate);
    // Onto the shortcut's gradient: dy itself (identity) or the projection's.
    conv_backward(b.conv1, batch, x, g_mid, g_in, true, accumulate);
    layer_ready(b.conv1.layer);
  }
  float* g = grad_work_[at].data();
  bn_backward(*stem_, batch, g, stem_->out.data(), g, accumulate);
  // Nobody needs the gradient with respect to the image.
  conv_backward(*stem_, batch, input_.data(), g, nullptr, false, accumulate);
  layer_ready(stem_->layer);
}

}  // namespace gradsync
