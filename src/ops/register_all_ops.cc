// The one explicit list of supported op families; each family's file lists its ops.
#include "families.h"

namespace autopar {

void register_all_ops(OpRegistry& registry) {
  register_matmul_ops(registry);         // MatMul Gemm
  register_elementwise_ops(registry);    // arithmetic, activations, Where, Cast, Dropout
  register_normalization_ops(registry);  // Softmax LogSoftmax LayerNormalization BatchNorm
  register_conv_ops(registry);           // Conv ConvTranspose and pooling
  register_shape_ops(registry);          // Reshape Transpose Slice Gather Pad Resize ...
  register_reduce_ops(registry);         // ReduceMean ReduceSum ReduceMax
  register_loss_ops(registry);           // SoftmaxCrossEntropyLoss
  register_comm_ops(registry);           // ai.autopar Send Recv and collectives
  register_training_ops(registry);       // ai.autopar.training Adam, LayerNorm and Gelu
}

}  // namespace autopar
