// The one explicit list of CPU kernel families; each family's file lists its ops.
#include "kernel_util.h"

namespace autopar::runtime {

void register_all_kernels(KernelRegistry& registry) {
  register_elementwise_kernels(registry);    // arithmetic, comparisons, activations, Cast ...
  register_matmul_kernels(registry);         // MatMul Gemm
  register_conv_kernels(registry);           // Conv ConvTranspose and pooling
  register_normalization_kernels(registry);  // Softmax LogSoftmax LayerNorm BatchNorm
  register_reduce_kernels(registry);         // ReduceMean ReduceSum ReduceMax
  register_shape_kernels(registry);          // Reshape Transpose Slice Gather Pad Resize ...
  register_loss_kernels(registry);           // SoftmaxCrossEntropyLoss
  register_indexing_kernels(registry);       // Range GatherElements GatherND
  register_comm_kernels(registry);           // ai.autopar Send Recv and collectives
  register_training_kernels(registry);       // ai.autopar.training Adam, LayerNorm and Gelu
  register_attention_kernels(registry);      // Attention, its gradient and their ring forms
}

}  // namespace autopar::runtime
