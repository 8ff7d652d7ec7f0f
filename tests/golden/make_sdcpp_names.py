"""stable-diffusion.cpp's own LoRA name conversion and update shapes, for tests/sdcpp_names.h.

Builds, in a temp dir, two small programs against a stable-diffusion.cpp source tree and a built
ggml (the commit its submodule pins):
- names: src/name_conversion.cpp compiled as it is (with core/util.cpp's four string helpers it
  calls, taken from that file at build time), calling convert_tensor_name("lora." + key, version)
  as the LoRA loader does (init_from_file_and_convert_name with prefix "lora.");
- shapes: ggml_extend.hpp's ggml_ext_mul_n_mode / ggml_ext_merge_lora / ggml_ext_kronecker (taken
  from that file at build time) on a no-alloc ggml context, combined as lora.hpp's
  get_lora / get_loha / get_lokr_weight_diff combine them; a ggml assert (abort) is caught by
  running each case in a child process.
Inputs: every module name of kohya_sd15.json, the tiny LyCORIS files and sd2/lora_keys.json (key
"<module>.lora_up.weight"), every suffix on a few modules, and every distinct module tensor group
(shapes) of kohya_sd15.json's configs and the tiny files.
And (values): the update of each single-layer case of loha / lokr / dora.safetensors without DoRA,
computed as lora.hpp computes it (scale included) on ggml's CPU backend, against LyCORIS's
forward's merged - base: its relative error, or ABORT.
Output: tests/golden/data/lycoris/sdcpp.json. Needs g++, numpy and safetensors (the golden venv).

Usage: python make_sdcpp_names.py SDCPP_SRC_DIR GGML_DIR GGML_BUILD_DIR [SDCPP_COMMIT GGML_COMMIT]
(SDCPP_SRC_DIR holds src/ and include/; GGML_DIR include/; GGML_BUILD_DIR src/libggml*.so.)
"""
import glob
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LYCO = os.path.join(HERE, "data", "lycoris")


def function_text(src, signature_re):
    """The text of the top-level C++ function whose first line matches signature_re."""
    m = re.search(signature_re, src, re.M)
    assert m, signature_re
    i = src.index("{", m.start())
    depth = 0
    for j in range(i, len(src)):
        if src[j] == "{":
            depth += 1
        elif src[j] == "}":
            depth -= 1
            if depth == 0:
                return src[m.start() : j + 1] + "\n"
    raise ValueError(signature_re)


def table(configs, name):
    c = configs[name]
    if "by_weight_shape" in c:
        return json.loads(json.dumps(c["by_weight_shape"]))
    t = table(configs, c["by_weight_shape_vs"])
    for sh, d in c["by_weight_shape_diff"].items():
        e = t.setdefault(sh, {"tensors": {}})
        for s, v in d.get("tensors_added_or_changed", {}).items():
            e["tensors"][s] = v
        for s in d.get("tensors_removed", []):
            e["tensors"].pop(s, None)
    return t


def safetensors_shapes(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: v["shape"] for k, v in h.items()}


def group_line(tensors):
    """'<algo> part=shape ...' for a module's tensors (suffix -> shape); alpha, dora_scale and
    lokr_t2 left out (lora.hpp never reads the last two, alpha has no shape)."""
    if any(k.startswith("lora_up") for k in tensors):
        algo = "lora"
    elif "hada_w1_a" in tensors:
        algo = "loha"
    else:
        algo = "lokr"
    parts = []
    for k, s in sorted(tensors.items()):
        k = k.replace(".weight", "")
        if k in ("alpha", "dora_scale", "lokr_t2"):
            continue
        parts.append("%s=%s" % (k, ",".join(map(str, s))))
    return algo + " " + " ".join(parts)


NAMES_CPP = r"""
#include <iostream>
#include <string>
#include "name_conversion.h"
std::string convert_tensor_name(std::string name, SDVersion version);
int main(int argc, char** argv) {
    SDVersion v = std::string(argv[1]) == "sd2" ? VERSION_SD2 : VERSION_SD1;
    std::string k;
    while (std::getline(std::cin, k)) std::cout << convert_tensor_name("lora." + k, v) << "\n";
}
"""

SHAPES_CPP = r"""
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>
#include "ggml.h"
#define __STATIC_INLINE__ static inline
#include "ext_funcs.inc"
static ggml_tensor* mk(ggml_context* ctx, const std::vector<int64_t>& torch) {
    int64_t ne[4] = {1, 1, 1, 1};
    for (size_t i = 0; i < torch.size(); i++) ne[i] = torch[torch.size() - 1 - i];
    return ggml_new_tensor(ctx, GGML_TYPE_F32, (int)std::max<size_t>(torch.size(), 1), ne);
}
int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream is(line);
        std::string algo, kv;
        is >> algo;
        std::map<std::string, std::vector<int64_t>> t;
        while (is >> kv) {
            size_t eq = kv.find('=');
            std::vector<int64_t> s;
            std::stringstream ss(kv.substr(eq + 1));
            std::string x;
            while (std::getline(ss, x, ',')) if (!x.empty()) s.push_back(std::stoll(x));
            t[kv.substr(0, eq)] = s;
        }
        int fd[2];
        if (pipe(fd) != 0) return 1;
        pid_t pid = fork();
        if (pid == 0) {  // the child: its output (ggml's backtrace on an abort) to /dev/null
            close(fd[0]);
            FILE* null = fopen("/dev/null", "w");
            dup2(fileno(null), 1);
            dup2(fileno(null), 2);
            ggml_init_params p = {64 * 1024 * 1024, nullptr, true};
            ggml_context* ctx = ggml_init(p);
            auto g = [&](const char* n) -> ggml_tensor* { return t.count(n) ? mk(ctx, t[n]) : nullptr; };
            ggml_tensor* d = nullptr;
            if (algo == "lora") {  // get_lora_weight_diff
                d = ggml_ext_merge_lora(ctx, g("lora_down"), g("lora_up"), g("lora_mid"));
            } else if (algo == "loha") {  // get_loha_weight_diff
                ggml_tensor *a1 = g("hada_w1_a"), *a2 = g("hada_w2_a"), *t1 = g("hada_t1"), *t2 = g("hada_t2");
                if (t1) a1 = ggml_cont(ctx, ggml_transpose(ctx, a1));
                if (t2) a2 = ggml_cont(ctx, ggml_transpose(ctx, a2));
                ggml_tensor* u1 = ggml_ext_merge_lora(ctx, g("hada_w1_b"), a1, t1);
                ggml_tensor* u2 = ggml_ext_merge_lora(ctx, g("hada_w2_b"), a2, t2);
                d = ggml_mul_inplace(ctx, u1, u2);
            } else {  // get_lokr_weight_diff
                ggml_tensor* w1 = g("lokr_w1");
                if (!w1) w1 = ggml_ext_merge_lora(ctx, g("lokr_w1_b"), g("lokr_w1_a"));
                ggml_tensor* w2 = g("lokr_w2");
                if (!w2) w2 = ggml_ext_merge_lora(ctx, g("lokr_w2_b"), g("lokr_w2_a"));
                d = ggml_ext_kronecker(ctx, w1, w2);
            }
            char buf[128];
            int n = snprintf(buf, sizeof buf, "%lld,%lld,%lld,%lld", (long long)d->ne[0], (long long)d->ne[1],
                             (long long)d->ne[2], (long long)d->ne[3]);
            if (write(fd[1], buf, n) != n) _exit(1);
            _exit(0);
        }
        close(fd[1]);
        char buf[128] = {0};
        ssize_t n = read(fd[0], buf, sizeof buf - 1);
        close(fd[0]);
        int st = 0;
        waitpid(pid, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && n > 0)
            std::cout << buf << "\n";
        else
            std::cout << "ABORT\n";
    }
}
"""

VALUES_CPP = r"""
// sd.cpp's immediate-mode update (lora.hpp's get_*_weight_diff with ggml_extend.hpp's
// merges) computed on ggml's CPU backend, written out in the model tensor's memory order.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>
#include "ggml.h"
#include "ggml-cpu.h"
#define __STATIC_INLINE__ static inline
#include "ext_funcs.inc"
int main(int argc, char** argv) {
    // argv: dir (part.bin files), algo, alpha or "none", the model tensor's PyTorch shape, part=shape...
    std::string dir = argv[1], algo = argv[2], alpha_s = argv[3];
    ggml_init_params p = {512 * 1024 * 1024, nullptr, false};
    ggml_context* ctx = ggml_init(p);
    auto parse = [](const std::string& s) { std::vector<int64_t> v; std::stringstream ss(s); std::string x; while (std::getline(ss, x, ',')) v.push_back(std::stoll(x)); return v; };
    auto mk = [&](const std::vector<int64_t>& torch) {
        int64_t ne[4] = {1, 1, 1, 1};
        for (size_t i = 0; i < torch.size(); i++) ne[i] = torch[torch.size() - 1 - i];
        return ggml_new_tensor(ctx, GGML_TYPE_F32, (int)torch.size(), ne);
    };
    ggml_tensor* model = mk(parse(argv[4]));
    std::map<std::string, ggml_tensor*> t;
    for (int i = 5; i < argc; i++) {
        std::string kv = argv[i];
        size_t eq = kv.find('=');
        std::string n = kv.substr(0, eq);
        ggml_tensor* x = mk(parse(kv.substr(eq + 1)));
        std::ifstream f(dir + "/" + n + ".bin", std::ios::binary);
        f.read((char*)x->data, ggml_nbytes(x));
        t[n] = x;
    }
    auto g = [&](const char* n) -> ggml_tensor* { return t.count(n) ? t[n] : nullptr; };
    bool has_alpha = alpha_s != "none";
    float alpha = has_alpha ? std::stof(alpha_s) : 0;
    ggml_tensor* d = nullptr;
    float scale = 1.0f;
    if (algo == "lora") {
        d = ggml_ext_merge_lora(ctx, g("lora_down"), g("lora_up"), g("lora_mid"));
        int64_t rank = g("lora_down")->ne[ggml_n_dims(g("lora_down")) - 1];
        if (has_alpha) scale = alpha / rank;
    } else if (algo == "loha") {
        ggml_tensor *a1 = g("hada_w1_a"), *a2 = g("hada_w2_a"), *t1 = g("hada_t1"), *t2 = g("hada_t2");
        if (t1) a1 = ggml_cont(ctx, ggml_transpose(ctx, a1));
        if (t2) a2 = ggml_cont(ctx, ggml_transpose(ctx, a2));
        int64_t rank = g("hada_w1_b")->ne[ggml_n_dims(g("hada_w1_b")) - 1];
        if (has_alpha) scale = alpha / rank;
        d = ggml_mul_inplace(ctx, ggml_ext_merge_lora(ctx, g("hada_w1_b"), a1, t1), ggml_ext_merge_lora(ctx, g("hada_w2_b"), a2, t2));
    } else {
        int64_t rank = 1;
        ggml_tensor* w1 = g("lokr_w1");
        if (!w1) { rank = g("lokr_w1_b")->ne[ggml_n_dims(g("lokr_w1_b")) - 1]; w1 = ggml_ext_merge_lora(ctx, g("lokr_w1_b"), g("lokr_w1_a")); }
        ggml_tensor* w2 = g("lokr_w2");
        if (!w2) { rank = g("lokr_w2_b")->ne[ggml_n_dims(g("lokr_w2_b")) - 1]; w2 = ggml_ext_merge_lora(ctx, g("lokr_w2_b"), g("lokr_w2_a")); }
        if (has_alpha) scale = alpha / rank;
        if (rank == 1) scale = 1.0f;
        d = ggml_ext_kronecker(ctx, w1, w2);
    }
    if (!ggml_is_contiguous(d)) d = ggml_cont(ctx, d);
    d = ggml_scale_inplace(ctx, d, scale);
    if (ggml_nelements(d) != ggml_nelements(model)) { printf("NUMEL %lld %lld\n", (long long)ggml_nelements(d), (long long)ggml_nelements(model)); return 0; }
    d = ggml_reshape(ctx, d, model);
    ggml_cgraph* gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, d);
    ggml_graph_compute_with_ctx(ctx, gf, 1);
    std::ofstream o(dir + "/out.bin", std::ios::binary);
    o.write((const char*)d->data, ggml_nbytes(d));
    printf("OK\n");
}
"""


def values(tmp, inc, lib):
    """Each single-layer case of loha / lokr / dora.safetensors without DoRA (sd.cpp reads no
    dora_scale): sd.cpp's update computed on ggml's CPU backend against LyCORIS's (merged - base)."""
    import numpy as np
    from safetensors.numpy import load_file

    src = os.path.join(tmp, "values.cpp")
    open(src, "w").write(VALUES_CPP)
    exe = os.path.join(tmp, "values")
    subprocess.check_call(["g++", "-std=c++17", "-O1", "-I" + tmp, *inc, src, *lib, "-lggml-cpu", "-o", exe])
    out = {}
    for fn in ["loha", "lokr", "dora"]:
        t = load_file(os.path.join(LYCO, fn + ".safetensors"))
        for case in sorted({k.split(".")[0] for k in t}):
            ps = {k[len(case) + 7 :]: t[k] for k in t if k.startswith(case + ".param.")}
            if "dora_scale" in ps or "dora" in case:
                continue
            algo = "lora" if any(k.startswith("lora_up") for k in ps) else "loha" if "hada_w1_a" in ps else "lokr"
            d = os.path.join(tmp, case)
            os.makedirs(d)
            args = []
            for k, v in sorted(ps.items()):
                n = k.replace(".weight", "")
                if n in ("alpha", "lokr_t2"):
                    continue
                v.astype(np.float32).tofile(os.path.join(d, n + ".bin"))
                args.append("%s=%s" % (n, ",".join(map(str, v.shape))))
            alpha = str(float(ps["alpha"])) if "alpha" in ps else "none"
            base = t[case + ".base.weight"]
            want = t[case + ".merged"].astype(np.float64) - base
            r = subprocess.run([exe, d, algo, alpha, ",".join(map(str, base.shape))] + args, capture_output=True,
                               text=True)
            if r.stdout.strip() == "OK":
                got = np.fromfile(os.path.join(d, "out.bin"), dtype=np.float32).reshape(base.shape)
                out[case] = float(np.linalg.norm(got - want) / np.linalg.norm(want))
            else:
                assert r.returncode != 0 and "ggml_mul_mat" in r.stdout + r.stderr, (case, r.stdout, r.stderr)
                out[case] = "ABORT"
    return out


def main():
    sdcpp, ggml_dir, ggml_build = sys.argv[1:4]
    commits = sys.argv[4:6] if len(sys.argv) >= 6 else ["?", "?"]
    src = os.path.join(sdcpp, "src")
    j = json.load(open(os.path.join(LYCO, "kohya_sd15.json")))
    sd2 = json.load(open(os.path.join(HERE, "data", "sd2", "lora_keys.json")))
    tiny = {
        os.path.basename(f): safetensors_shapes(f)
        for f in sorted(glob.glob(os.path.join(LYCO, "kohya_tiny_*.safetensors")))
        if "expected" not in f
    }

    modules = {m[0] for m in j["modules"]} | {m[0] for m in sd2["modules"]}
    for t in tiny.values():
        modules |= {k.split(".", 1)[0] for k in t}
    suffixes = ["alpha", "scale", "diff", "dora_scale", "lora_up.weight", "lora_down.weight", "lora_mid.weight",
                "hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2", "lokr_w1", "lokr_w1_a",
                "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b", "lokr_t2"]
    some = ["lora_unet_conv_in", "lora_unet_time_embedding_linear_1", "lora_unet_down_blocks_0_resnets_0_conv1",
            "lora_unet_up_blocks_3_attentions_2_transformer_blocks_0_attn1_to_out_0",
            "lora_unet_mid_block_resnets_1_time_emb_proj", "lora_te_text_model_encoder_layers_11_self_attn_q_proj"]
    keys = sorted({m + ".lora_up.weight" for m in modules} | {m + "." + s for m in some for s in suffixes})

    groups = set()
    for name in j["configs"]:
        for e in table(j["configs"], name).values():
            groups.add(group_line(e["tensors"]))
    for t in tiny.values():
        mods = {}
        for k, s in t.items():
            m, suffix = k.split(".", 1)
            mods.setdefault(m, {})[suffix] = s
        for ts in mods.values():
            groups.add(group_line(ts))
    groups = sorted(groups)

    util = open(os.path.join(src, "core", "util.cpp")).read()
    ext = open(os.path.join(src, "core", "ggml_extend.hpp")).read()
    with tempfile.TemporaryDirectory() as tmp:
        stub = "#include <string>\n#include <vector>\n" + "".join(
            function_text(util, r"^[\w:<> ]*\b%s\(" % f) for f in ["ends_with", "starts_with", "contains", "split_string"])
        open(os.path.join(tmp, "util_stub.cpp"), "w").write(stub)
        open(os.path.join(tmp, "names.cpp"), "w").write(NAMES_CPP)
        open(os.path.join(tmp, "ext_funcs.inc"), "w").write("".join(
            function_text(ext, r"^__STATIC_INLINE__ ggml_tensor\* %s\(" % f)
            for f in ["ggml_ext_mul_n_mode", "ggml_ext_merge_lora", "ggml_ext_kronecker"]))
        open(os.path.join(tmp, "shapes.cpp"), "w").write(SHAPES_CPP)
        inc = ["-I" + src, "-I" + os.path.join(sdcpp, "include"), "-I" + os.path.join(ggml_dir, "include")]
        lib = ["-L" + os.path.join(ggml_build, "src"), "-lggml", "-lggml-base",
               "-Wl,-rpath," + os.path.join(ggml_build, "src")]
        names_bin, shapes_bin = os.path.join(tmp, "names"), os.path.join(tmp, "shapes")
        subprocess.check_call(["g++", "-std=c++17", "-O1", *inc, os.path.join(tmp, "names.cpp"),
                               os.path.join(src, "name_conversion.cpp"), os.path.join(tmp, "util_stub.cpp"), "-o",
                               names_bin])
        subprocess.check_call(["g++", "-std=c++17", "-O1", "-I" + tmp, *inc, os.path.join(tmp, "shapes.cpp"), *lib,
                               "-o", shapes_bin])
        run = lambda cmd, lines: subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True,
                                                check=True).stdout.split("\n")[: len(lines)]
        sd1_names = run([names_bin, "sd1"], keys)
        sd2_names = run([names_bin, "sd2"], keys)
        shapes = run([shapes_bin], groups)
        vals = values(tmp, inc, lib)
    assert all(s == "ABORT" or re.fullmatch(r"\d+,\d+,\d+,\d+", s) for s in shapes), shapes
    out = {
        "note": "stable-diffusion.cpp's convert_tensor_name(\"lora.\" + key, VERSION_SD1 / VERSION_SD2) and the "
                "ggml ne (or ABORT: a ggml assert) of the update lora.hpp builds from a module's tensors "
                "(PyTorch shapes; alpha, dora_scale, lokr_t2 left out). tests/golden/make_sdcpp_names.py",
        "stable_diffusion_cpp": commits[0],
        "ggml": commits[1],
        "names": dict(zip(keys, sd1_names)),  # VERSION_SD1
        "names_sd2_differ": {k: b for k, a, b in zip(keys, sd1_names, sd2_names) if a != b},  # VERSION_SD2
        "shapes": [[g, s] for g, s in zip(groups, shapes)],
        "values": vals,
    }
    path = os.path.join(LYCO, "sdcpp.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print("%d names, %d shape groups (%d ABORT) -> %s" % (len(keys), len(groups), shapes.count("ABORT"), path))


if __name__ == "__main__":
    main()
