// Opening checkpoints without caring about their format, and viewing several of them as one
// source (a diffusers folder: unet/, text_encoder/, vae/ each with its own weights file).
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ggml-lite/io/tensor_source.h"

namespace gl::io {

// Picks the reader by content, not by extension: a zip signature means a torch.save checkpoint
// (CkptFile), an 8-byte length followed by '{' a safetensors file. Anything else throws
// gl::Error naming the file and what its first bytes look like.
std::unique_ptr<TensorSource> open_checkpoint(const std::string& path);

// Several sources under name prefixes: tensor "conv_in.weight" of the source added with
// prefix "unet." is listed as "unet.conv_in.weight". Names must stay unique across sources.
class MergedSource : public TensorSource {
public:
    explicit MergedSource(std::string origin = "merged checkpoint") : origin_(std::move(origin)) {}
    // Throws when a resulting name is already taken (naming both origins).
    void add(const std::string& prefix, std::unique_ptr<TensorSource> src);

    std::string origin() const override { return origin_; }
    std::vector<TensorInfo> list() const override;  // sorted by name
    bool has(const std::string& name) const override { return index_.count(name) != 0; }
    TensorInfo info(const std::string& name) const override;
    void read(const std::string& name, void* dst, DType to) const override;

private:
    struct Where {
        size_t source;
        std::string inner;  // the name inside that source
    };
    const Where& find(const std::string& name) const;
    std::string origin_;
    std::vector<std::unique_ptr<TensorSource>> sources_;
    std::unordered_map<std::string, Where> index_;
};

}  // namespace gl::io
