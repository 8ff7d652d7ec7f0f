// --save_model_as ckpt / pt: the run's LoRA files as kohya's torch.save of the state dict
// (io/torch_save.h): kohya's names with the extension, the same tensors as the safetensors file of
// the same run, no metadata, and the keep-last-N rule applied to them.
#include <doctest/doctest.h>

#include "ggml-lite/io/torch_ckpt.h"
#include "sdtrain_fixtures.h"
#include "train/run/session.h"

using namespace sdtrain_test;

TEST_CASE("sdtrain --save_model_as ckpt: kohya's names, the safetensors file's tensors, old saves removed") {
    Scratch s("save-ckpt");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig st = tiny_config(model, data, s.root / "st");
    st.max_train_steps = 4;
    st.save_every_n_steps = 2;
    st.save_last_n_steps = 1;  // kohya keeps the saves of the last step: the step-2 file goes at step 4
    train::RunConfig ck = st;
    ck.output_dir = (s.root / "ck").string();
    ck.save_model_as = "ckpt";
    train::Session(st).run();
    train::Session(ck).run();
    CHECK(fs::exists(s.root / "ck" / "tiny.ckpt"));
    CHECK(fs::exists(s.root / "ck" / "tiny-step00000004.ckpt"));
    CHECK_FALSE(fs::exists(s.root / "ck" / "tiny-step00000002.ckpt"));
    CHECK(fs::exists(s.root / "st" / "tiny-step00000004.safetensors"));
    CHECK_FALSE(fs::exists(s.root / "ck" / "tiny.safetensors"));

    const gl::io::SafetensorsFile a((s.root / "st" / "tiny.safetensors").string());
    const gl::io::CkptFile b((s.root / "ck" / "tiny.ckpt").string());
    REQUIRE(a.list().size() == b.list().size());
    for (const gl::io::TensorInfo& t : a.list()) {
        CAPTURE(t.name);
        REQUIRE(b.has(t.name));
        CHECK(b.info(t.name).shape == t.shape);
        CHECK(b.info(t.name).dtype == t.dtype);
        std::vector<float> x(size_t(t.numel())), y(x.size());
        a.read(t.name, x.data(), gl::DType::f32);
        b.read(t.name, y.data(), gl::DType::f32);
        CHECK(x == y);
    }
    CHECK_FALSE(a.metadata().empty());  // the safetensors file has kohya's metadata; a ckpt has none to hold

    train::RunConfig pt = st;
    pt.output_dir = (s.root / "pt").string();
    pt.save_model_as = "pt";
    pt.save_every_n_steps.reset();
    pt.save_last_n_steps.reset();
    train::Session(pt).run();
    CHECK(gl::io::CkptFile((s.root / "pt" / "tiny.pt").string()).list().size() == a.list().size());
}
