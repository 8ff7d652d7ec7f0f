#include "train/run/run_paths.h"

#include <filesystem>
#include <optional>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/paths.h"

namespace train {

namespace fs = std::filesystem;

namespace {

// n >= min digits at s[at...]: their count (0 when fewer).
size_t digits_at(const std::string& s, size_t at, size_t min) {
    size_t n = 0;
    while (at + n < s.size() && s[at + n] >= '0' && s[at + n] <= '9') n++;
    return n >= min ? n : 0;
}

// `name` (an entry of the output folder) is one the run writes: a LoRA or state folder under
// kohya's names (save.h), the sample folder, a cache folder, the metrics file or the report.
bool written_by_run(const RunConfig& c, const std::string& name) {
    for (const char* fixed :
         {"sample", "latent_cache", "text_encoder_cache", "metrics.jsonl", "report.html", "skipped_images.txt"})
        if (name == fixed) return true;
    const std::vector<std::string> bases =
        c.output_name ? std::vector<std::string>{*c.output_name} : std::vector<std::string>{"at", "epoch", "last"};
    for (const std::string& base : bases) {
        if (name.compare(0, base.size(), base) != 0) continue;
        size_t at = base.size();
        if (name.compare(at, 5, "-step") == 0 && digits_at(name, at + 5, 8)) at += 5 + digits_at(name, at + 5, 8);
        else if (name.compare(at, 1, "-") == 0 && digits_at(name, at + 1, 6)) at += 1 + digits_at(name, at + 1, 6);
        const std::string rest = name.substr(at);
        if (rest == "." + c.save_model_as || rest == "-state") return true;
    }
    return false;
}

// own_vae: the VAE is --vae's (an input of its own), not a file of the model's folder.
void add_model_files(std::vector<RunInput>& in, const std::string& given, const models::ModelFiles& m, bool own_vae) {
    const bool folder = fs::is_directory(given);
    const std::pair<const char*, const std::string*> files[] = {{"UNet", &m.unet_path},
                                                                 {"text encoder", &m.text_encoder_path},
                                                                 {"VAE", &m.vae_path},
                                                                 {"tokenizer", &m.tokenizer_path}};
    for (const auto& [what, path] : files) {
        if (path->empty()) continue;
        const bool vae_given = own_vae && path == &m.vae_path;
        in.push_back({vae_given ? std::string("--vae's weights file") : gl::cat("the model's ", what, " file"), *path,
                      false});
        if (!folder) continue;  // a single file's folder holds other files, the model is the file
        if (vae_given) continue;
        // The folders the file is in: as spelled (unet/, maybe a symlink) and really (blobs/).
        in.push_back({gl::cat("the model's ", what, " folder"), fs::path(*path).parent_path().string(), false});
        in.push_back({gl::cat("the model's ", what, " folder"),
                      fs::path(gl::io::resolved_path(*path)).parent_path().string(), false});
    }
}

}  // namespace

std::vector<RunInput> run_inputs(const RunConfig& c, const models::ModelFiles* model, const data::DatasetConfig* dataset) {
    std::vector<RunInput> in;
    in.push_back({"--pretrained_model_name_or_path", c.pretrained_model_name_or_path, false});
    if (model) add_model_files(in, c.pretrained_model_name_or_path, *model, c.vae.has_value());
    for (const auto& [what, path] : {std::pair{"--train_data_dir", &c.train_data_dir},
                                     {"--reg_data_dir", &c.reg_data_dir},
                                     {"--dataset_config", &c.dataset_config},
                                     {"--in_json", &c.in_json},
                                     {"--sample_prompts", &c.sample_prompts},
                                     {"--vae", &c.vae}})
        if (*path) in.push_back({what, **path, false});
    if (dataset)
        for (const data::SubsetConfig& s : dataset->subsets) {
            if (!s.image_dir.empty())
                in.push_back({s.is_reg ? "the regularisation subset folder" : "the subset folder", s.image_dir.string(),
                              false});
            if (s.metadata_file) in.push_back({"the subset's metadata file", s.metadata_file->string(), false});
        }
    if (c.network_weights) in.push_back({"--network_weights", *c.network_weights, true});
    for (const std::string& b : c.base_weights) in.push_back({"--base_weights", b, true});  // read before any save
    if (c.resume) in.push_back({"--resume", *c.resume, true});
    return in;
}

void check_run_paths(const RunConfig& c, const std::vector<RunInput>& inputs, const data::DatasetConfig* dataset) {
    const fs::path out = c.output_dir;
    // Where the run writes: the folder, and its sub-folders (one may be a symlink to elsewhere).
    std::vector<std::pair<std::string, fs::path>> places = {{"", out}};
    if (c.sample_prompts) places.push_back({"sample", out / "sample"});
    if (c.cache_latents_to_disk) places.push_back({"latent_cache", out / "latent_cache"});
    if (c.cache_text_encoder_outputs_to_disk) places.push_back({"text_encoder_cache", out / "text_encoder_cache"});
    for (const RunInput& in : inputs) {
        for (const auto& [sub, place] : places) {
            const std::optional<std::string> rel = gl::io::path_below(place.string(), in.path);
            if (!rel) continue;
            const std::string where =
                sub.empty() ? gl::cat("--output_dir ", out.string(), rel->empty() ? " is " : " lies inside ")
                            : gl::cat("--output_dir ", out.string(), ": its ", sub, "/ leads into ");
            gl::fail(where, in.what, " ", in.path, "; the run would write its LoRA, states, samples, report and "
                     "caches among those files: choose an --output_dir outside every input");
        }
        if (in.own_save) continue;
        const std::optional<std::string> rel = gl::io::path_below(in.path, out.string());
        if (!rel || rel->empty()) continue;
        const std::string first = fs::path(*rel).begin()->string();
        GL_CHECK(!written_by_run(c, first), in.what, " ", in.path, " lies where the run writes in --output_dir ",
                 out.string(), " (", first, "); move it, or choose another --output_dir or --output_name");
    }
    // The same images as training and regularisation images.
    auto overlap = [](const std::string& a, const std::string& b) {
        return gl::io::path_within(a, b) || gl::io::path_within(b, a);
    };
    if (c.train_data_dir && c.reg_data_dir && overlap(*c.reg_data_dir, *c.train_data_dir)) {
        const std::string how = gl::io::path_within(*c.reg_data_dir, *c.train_data_dir)
                                    ? (gl::io::path_within(*c.train_data_dir, *c.reg_data_dir) ? "is" : "lies inside")
                                    : "holds";
        gl::fail("--reg_data_dir ", *c.reg_data_dir, " ", how, " --train_data_dir ", *c.train_data_dir,
                 ": regularisation images belong in a folder of their own, outside the training images");
    }
    if (!dataset) return;
    for (const data::SubsetConfig& r : dataset->subsets)
        for (const data::SubsetConfig& t : dataset->subsets) {
            if (!r.is_reg || t.is_reg || t.image_dir.empty()) continue;
            const std::optional<std::string> rel = gl::io::path_below(r.image_dir.string(), t.image_dir.string());
            GL_CHECK(!rel || !rel->empty(), "the regularisation subset ", r.image_dir.string(), " is the training subset ",
                     t.image_dir.string(), ": the same images would be trained on and regularised against");
        }
}

}  // namespace train
