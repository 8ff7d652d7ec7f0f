// How many CUDA devices this process sees (cudaGetDeviceCount: no context is made, the visible
// devices stay as CUDA_VISIBLE_DEVICES says): 0 in a build without CUDA or on a host without a
// usable GPU. sdtrain's launcher checks --gpus against it before it starts any rank.
#pragma once

namespace gl {

int cuda_device_count();

}  // namespace gl
