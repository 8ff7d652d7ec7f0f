// The layers (README "Layout"), checked on the sources themselves: every #include "..." of every
// file under ggml-lite/, optim/, models/, lora/, data/, pipelines/, train/, tools/, bench/ and
// examples/ names a file of its own layer or of a layer below it; a lower layer that includes a
// higher one fails, naming the file, the line and the include. The library targets of
// CMakeLists.txt link in the same order (one per layer above the runtime: gl-models, gl-lora,
// gl-data, gl-pipelines, gl-train, gl-run); inside the runtime (one library, ggml-lite) and inside
// models/ the include rule is all that separates the parts.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace fs = std::filesystem;

namespace {

// A layer and the layers directly below it that it may include; what those may include it may too.
struct Layer {
    std::string name;  // its folder, or with `files` the stem of its files (models/family.h, .cpp)
    std::vector<std::string> uses;
    bool files = false;
};

// A lower layer's include of a higher one, allowed for a reason of its own.
struct Exception {
    std::string file, include, why;
};

struct Include {
    std::string file, target;  // both relative to the root
    int line = 0;
};

// The runtime library (ggml-lite) as the layers above it see it: every part of it.
const std::vector<std::string> kRuntime = {"optim", "ggml-lite/cuda"};

const std::vector<Layer> kLayers = {
    // ggml-lite: core below dist below ops below the CUDA backend; checkpoint files need only core.
    {"ggml-lite/core", {}},
    {"ggml-lite/dist", {"ggml-lite/core"}},  // communicators: the op's all_reduce sums over them
    {"ggml-lite/ops", {"ggml-lite/dist"}},
    {"ggml-lite/cuda", {"ggml-lite/ops"}},
    {"ggml-lite/io", {"ggml-lite/core"}},
    {"optim", {"ggml-lite/ops", "ggml-lite/io"}},
    // models/ (gl-models): the layer set, what every diffusion family shares, the family
    // interface and the model a family opens (models::ModelFiles), then each family's folder.
    {"models/nn", kRuntime},
    {"models/diffusion", {"models/nn"}},
    {"models/family", {"models/diffusion"}, true},
    {"models/model_files", {"models/family"}, true},
    {"models/sd15", {"models/model_files"}},
    {"models/sd2", {"models/sd15"}},  // SD2.x runs SD1.x's layers with its configs
    {"lora", {"models/family"}},  // adapters ask the family (models/family.h), never a family's model
    {"data", kRuntime},  // through an encoder interface: no model
    {"pipelines", {"lora", "data", "models/sd15"}},  // through the family; SD's VAE, tokenizer, prompt weights
    // the step, host loop and trainer: no dataset, no pipeline, no family's model: the step builds
    // the denoiser and text encoder through the family, their config opaque (models::ModelConfig)
    {"train", {"lora"}},
    {"train/run", {"pipelines", "train"}},
    {"tools/common", {"train/run"}},
    {"tools/sdtrain", {"tools/common"}},
    {"tools", {"tools/sdtrain"}},  // the programs, tools/<name>.cpp
    {"bench", {"tools/common"}},
    {"examples", {"tools/common"}},
};

// None today: a lower layer that needs a higher one's code has it moved down or behind an interface.
const std::vector<Exception> kExceptions = {};

// The layer of a path relative to the root: the longest layer name it starts with; "" for none.
std::string layer_of(const std::vector<Layer>& layers, const std::string& rel) {
    std::string best;
    for (const Layer& l : layers) {
        const bool in = rel.rfind(l.name + (l.files ? "." : "/"), 0) == 0;
        if (in && l.name.size() > best.size()) best = l.name;
    }
    return best;
}

// Every layer each layer may include: itself and the closure of its uses. A layer uses only
// layers listed before it, so the table cannot hold a loop.
std::map<std::string, std::set<std::string>> allowed_layers(const std::vector<Layer>& layers) {
    std::map<std::string, std::set<std::string>> allowed;
    for (const Layer& l : layers) {
        std::set<std::string> a = {l.name};
        for (const std::string& u : l.uses) {
            REQUIRE_MESSAGE(allowed.count(u), l.name, " uses ", u, ", which is not listed before it");
            a.insert(allowed[u].begin(), allowed[u].end());
        }
        allowed[l.name] = std::move(a);
    }
    return allowed;
}

// What is wrong with an include graph against the layers, one line each ("" when nothing is):
// an include of a higher layer, a file or include outside every layer, an exception nothing uses.
std::vector<std::string> layer_violations(const std::vector<Layer>& layers, const std::vector<Exception>& exceptions,
                                          const std::vector<Include>& graph) {
    const auto allowed = allowed_layers(layers);
    std::vector<std::string> out;
    std::set<size_t> used;
    for (const Include& inc : graph) {
        const std::string at = inc.file + ":" + std::to_string(inc.line) + ": #include \"" + inc.target + "\"";
        const std::string from = layer_of(layers, inc.file), to = layer_of(layers, inc.target);
        if (from.empty()) {
            out.push_back(inc.file + " lies in no layer");
            continue;
        }
        if (to.empty()) {
            out.push_back(at + " names no file of the layers");
            continue;
        }
        if (allowed.at(from).count(to)) continue;
        const auto ex = std::find_if(exceptions.begin(), exceptions.end(), [&](const Exception& e) {
            return inc.file == e.file && inc.target == e.include;
        });
        if (ex != exceptions.end()) {
            used.insert(size_t(ex - exceptions.begin()));
            continue;
        }
        out.push_back(at + ": layer " + from + " may not include " + to + " (a higher layer)");
    }
    for (size_t i = 0; i < exceptions.size(); i++)
        if (!used.count(i))
            out.push_back("exception " + exceptions[i].file + " -> " + exceptions[i].include + " is no longer needed");
    return out;
}

// The quoted includes of every source file of the layers, each resolved as the preprocessor does:
// beside the including file first, then from the root (where generated headers such as
// optim/optimizer_list.inc are not: their names start with their layer's folder all the same).
std::vector<Include> include_graph(const fs::path& root) {
    static const std::regex kInclude(R"re(^\s*#\s*include\s*"([^"]+)")re");
    static const std::set<std::string> kExtensions = {".h", ".cpp", ".cu", ".cuh", ".inc", ".def"};
    std::vector<Include> out;
    for (const char* top : {"ggml-lite", "optim", "models", "lora", "data", "pipelines", "train", "tools", "bench",
                            "examples"})
        for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / top)) {
            if (!e.is_regular_file() || !kExtensions.count(e.path().extension().string())) continue;
            const std::string rel = fs::relative(e.path(), root).generic_string();
            std::ifstream in(e.path());
            std::string text;
            int line = 0;
            for (std::smatch m; std::getline(in, text);) {
                line++;
                if (!std::regex_search(text, m, kInclude)) continue;
                const fs::path beside = e.path().parent_path() / m[1].str();
                const std::string target =
                    fs::exists(beside) ? fs::relative(beside, root).lexically_normal().generic_string() : m[1].str();
                out.push_back({rel, target, line});
            }
        }
    std::sort(out.begin(), out.end(),
              [](const Include& a, const Include& b) { return std::tie(a.file, a.line) < std::tie(b.file, b.line); });
    return out;
}

std::string joined(const std::vector<std::string>& lines) {
    std::string s;
    for (const std::string& l : lines) s += "\n  " + l;
    return s;
}

}  // namespace

TEST_CASE("layers: no source file includes a header of a layer above its own") {
    const fs::path root = fs::path(__FILE__).parent_path().parent_path();
    const std::vector<Include> graph = include_graph(root);
    REQUIRE(graph.size() > 700);  // the tree was found and read
    for (const char* f : {"ggml-lite/core/op.h", "models/sd15/unet.cpp", "train/run/session.cpp", "tools/sdtrain.cpp"})
        REQUIRE_MESSAGE(std::any_of(graph.begin(), graph.end(), [&](const Include& i) { return i.file == f; }), f);
    const std::vector<std::string> wrong = layer_violations(kLayers, kExceptions, graph);
    CHECK_MESSAGE(wrong.empty(), wrong.size(), " include(s) break the layers:", joined(wrong));
}

TEST_CASE("layers: the check names a lower layer's include of a higher one") {
    CHECK(layer_of(kLayers, "models/sd15/unet.h") == "models/sd15");
    CHECK(layer_of(kLayers, "models/family.h") == "models/family");
    CHECK(layer_of(kLayers, "models/family_registry.cpp").empty());
    CHECK(layer_of(kLayers, "train/run/session.cpp") == "train/run");
    CHECK(layer_of(kLayers, "tools/sdtrain.cpp") == "tools");
    CHECK(layer_of(kLayers, "tests/test_layers.cpp").empty());

    const std::vector<Include> fake = {
        {"ggml-lite/core/op.h", "ggml-lite/core/dtype.h", 3},           // its own layer
        {"ggml-lite/cuda/conv.cu", "ggml-lite/ops/builder.h", 4},       // below
        {"train/run/session.cpp", "ggml-lite/core/graph.h", 5},         // far below
        {"ggml-lite/core/op.h", "ggml-lite/ops/op_list.h", 9},          // core above ops
        {"data/latent_cache.h", "models/sd15/vae.h", 12},               // data with a model
        {"models/sd15/unet.cpp", "lora/lora.h", 7},                     // a model with its adapters
        {"lora/kohya.h", "pipelines/pipeline.h", 2},                    // beside, not below
        {"train/step.h", "train/run/config.h", 8},                      // the step with the engine
        {"ggml-lite/io/files.cpp", "ggml-lite/cuda/check.cuh", 1},      // io beside the backend
        {"tools/common/progress.h", "tools/sdtrain/console.h", 6},      // the shared part with a tool's
        {"scripts/x.cpp", "ggml-lite/core/op.h", 1},                    // outside the layers
        {"lora/lora.h", "stb_image.h", 1},                              // a quoted outside header
    };
    const std::vector<Exception> exceptions = {
        {"models/sd15/unet.cpp", "lora/lora.h", "the test's"},
        {"data/text_cache.h", "models/sd15/clip.h", "a stale one"},
    };
    const std::vector<std::string> wrong = layer_violations(kLayers, exceptions, fake);
    const std::vector<std::string> expected = {
        "ggml-lite/core/op.h:9: #include \"ggml-lite/ops/op_list.h\": layer ggml-lite/core may not include "
        "ggml-lite/ops (a higher layer)",
        "data/latent_cache.h:12: #include \"models/sd15/vae.h\": layer data may not include models/sd15 (a higher layer)",
        "lora/kohya.h:2: #include \"pipelines/pipeline.h\": layer lora may not include pipelines (a higher layer)",
        "train/step.h:8: #include \"train/run/config.h\": layer train may not include train/run (a higher layer)",
        "ggml-lite/io/files.cpp:1: #include \"ggml-lite/cuda/check.cuh\": layer ggml-lite/io may not include "
        "ggml-lite/cuda (a higher layer)",
        "tools/common/progress.h:6: #include \"tools/sdtrain/console.h\": layer tools/common may not include "
        "tools/sdtrain (a higher layer)",
        "scripts/x.cpp lies in no layer",
        "lora/lora.h:1: #include \"stb_image.h\" names no file of the layers",
        "exception data/text_cache.h -> models/sd15/clip.h is no longer needed",
    };
    CHECK_MESSAGE(wrong == expected, "got:", joined(wrong));
    CHECK(layer_violations(kLayers, {}, {fake.begin(), fake.begin() + 3}).empty());
}
