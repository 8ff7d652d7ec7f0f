// LoRA metadata as kohya sd-scripts writes it, checked against sd-scripts' own functions
// (tests/golden/make_kohya_golden.py): sshs_model_hash / sshs_legacy_hash as train_util's
// precalculate_safetensors_hashes computes them, and the modelspec.* keys of sai_model_spec.
// build_metadata for an SD1.x LoRA; SHA-256 against FIPS 180-4's examples.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/io/sha256.h"
#include "lora/kohya.h"
#include "lora_fixtures.h"

namespace {

std::filesystem::path golden(const std::string& name) {
    return std::filesystem::path(__FILE__).parent_path() / "golden" / "data" / "kohya" / name;
}

nlohmann::json read_json(const std::string& name) {
    std::ifstream f(golden(name));
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
}

using io::sha256_hex;

// "2023-11-14T22:13:20" -> "dddd-dd-ddTdd:dd:dd".
std::string iso_form(std::string s) {
    for (char& c : s)
        if (c >= '0' && c <= '9') c = 'd';
    return s;
}

}  // namespace

TEST_CASE("kohya metadata: SHA-256 gives FIPS 180-4's digests, fed whole or piece by piece") {
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(sha256_hex(two_blocks) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const std::string million(1000000, 'a');
    io::Sha256 pieces;
    for (size_t at = 0, step = 1; at < million.size(); at += step, step = step * 3 % 1000 + 1)
        pieces.update(million.data() + at, std::min(step, million.size() - at));
    CHECK(pieces.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("kohya metadata: sshs_model_hash and sshs_legacy_hash equal sd-scripts' precalculate_safetensors_hashes") {
    const nlohmann::json cases = read_json("hashes.json");
    REQUIRE(cases.size() == 2);
    for (const auto& [name, c] : cases.items()) {
        io::SafetensorsFile f(golden("hashes_" + name + ".safetensors").string());
        std::vector<io::TensorToWrite> tensors;
        for (const io::TensorInfo& t : f.list()) tensors.push_back({t.name, t.dtype, t.shape, f.raw(t.name)});
        const std::map<std::string, std::string> md = c.at("metadata").get<std::map<std::string, std::string>>();
        // The tensors come in the file's (sorted) order; the hash orders them as Python does.
        std::reverse(tensors.begin(), tensors.end());
        const auto [model, legacy] = lora::kohya_model_hashes(tensors, md);
        CHECK_MESSAGE(model == c.at("sshs_model_hash").get<std::string>(), name);
        CHECK_MESSAGE(legacy == c.at("sshs_legacy_hash").get<std::string>(), name);
    }
}

TEST_CASE("kohya metadata: modelspec.* as sai_model_spec.build_metadata writes it for an SD1.x LoRA") {
    lora::LoraConfig cfg;
    cfg.rank = 4;
    lora::LoraNetwork net(cfg);
    for (const nlohmann::json& c : read_json("modelspec.json")) {
        lora::SaveOptions opt;
        opt.title = c.at("metadata").at("modelspec.title").get<std::string>();
        opt.resolution_w = c.at("resolution")[0].get<int>();
        opt.resolution_h = c.at("resolution")[1].get<int>();
        opt.clip_skip = c.at("clip_skip").is_null() ? 0 : c.at("clip_skip").get<int>();
        const std::map<std::string, std::string> ours = lora::kohya_metadata(net, opt);
        std::map<std::string, std::string> mine, theirs;
        for (const auto& [k, v] : ours)
            if (k.rfind("modelspec.", 0) == 0) mine[k] = v;
        for (const auto& [k, v] : c.at("metadata").items())
            if (k != "modelspec.implementation_version") theirs[k] = v.get<std::string>();  // "sd-scripts/<commit>"
        // The date is the save time in both (local, ISO 8601 without a zone): compared by form.
        CHECK(iso_form(mine.at("modelspec.date")) == "dddd-dd-ddTdd:dd:dd");
        CHECK(iso_form(theirs.at("modelspec.date")) == "dddd-dd-ddTdd:dd:dd");
        mine.erase("modelspec.date");
        theirs.erase("modelspec.date");
        CHECK(mine == theirs);
    }
}

TEST_CASE("kohya metadata: save_kohya writes the hashes of what it saved, the model hash being the data area's sha256") {
    lora::LoraConfig cfg{4, 2.0f, 1.0f};
    Graph g;
    nn::Weights wt{g, DType::f32};
    LoraNetwork net(cfg);
    net.attach_text_encoder(wt);
    sd::build_clip(wt, g, g.input("ids", DType::i32, {1, 77}), sd::ClipConfig::tiny());
    std::mt19937 rng(3);
    std::map<ValueId, std::vector<float>> store;
    for (const lora::Module& m : net.modules()) {
        store[m.param("lora_down.weight")] = random_vec(size_t(g.v(m.param("lora_down.weight")).numel()), 1.0f, rng);
        store[m.param("lora_up.weight")] = random_vec(size_t(g.v(m.param("lora_up.weight")).numel()), 1.0f, rng);
    }
    const std::string path = tmp_path("hashes.safetensors");
    lora::SaveOptions opt;
    opt.clip_skip = 2;
    lora::save_kohya(path, net, [&](ValueId v) { return store.at(v); }, opt);
    io::SafetensorsFile f(path);
    const auto& md = f.metadata();
    CHECK(md.at("modelspec.encoder_layer") == "2");
    std::vector<io::TensorToWrite> tensors;
    for (const io::TensorInfo& t : f.list()) tensors.push_back({t.name, t.dtype, t.shape, f.raw(t.name)});
    const auto [model, legacy] = lora::kohya_model_hashes(tensors, md);
    CHECK(md.at("sshs_model_hash") == model);
    CHECK(md.at("sshs_legacy_hash") == legacy);
    CHECK(legacy == "e3b0c442");  // a file under 1 MiB: the window is empty, as in kohya
    // A1111 hashes the data area of the file it finds: our writer puts one dtype's tensors in
    // Python's order, so it finds the same hash.
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | uint8_t(bytes[size_t(i)]);
    CHECK(sha256_hex(bytes.substr(size_t(8 + n))) == model);
    std::filesystem::remove(path);
}
