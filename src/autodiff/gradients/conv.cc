// Gradient rules of convolution and pooling.
#include "rules.h"

namespace autopar {

void register_conv_gradients(OpRegistry& registry) {}

}  // namespace autopar
