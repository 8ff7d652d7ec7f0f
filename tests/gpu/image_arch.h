// See image_arch.cu.
#pragma once

// The binaryVersion of this build's device code on the current device (0 if it cannot be read).
namespace gltest {
int loaded_image_arch();
}  // namespace gltest
