// CLIP tokenizer against transformers' CLIPTokenizer (tests/golden/make_tokenizer_golden.py):
// content ids, 77-token encodings and kohya's long-prompt chunks of 426 captions (unicode,
// emoji, punctuation runs, numbers, special tokens, NFD text, very long text, tag lists), the
// same through a tokenizer/ folder (a small one with other special ids, and the full vocabulary
// written out as vocab.json), then malformed text and files.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <fstream>
#include <sstream>
#include <thread>

#include "ggml-lite/core/error.h"
#include "models/sd15/tokenizer.h"
#include "models/sd15/tokenizer_text.h"
#include "test_util.h"

using sd::ClipTokenizer;

using gltest::error_of;
using gltest::TempDir;

namespace {

std::string here() {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/'));
}
std::string golden(const std::string& name) { return here() + "/golden/data/tokenizer/" + name; }

std::vector<std::string> lines_of(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot open ", path);
    std::vector<std::string> out;
    for (std::string line; std::getline(f, line);) out.push_back(line);
    return out;
}

// captions.txt escapes '\' as "\\" and invisible characters as "\u{HEX}".
std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\') {
            out.push_back(s[i]);
        } else if (s[i + 1] == '\\') {
            out.push_back('\\');
            ++i;
        } else {
            REQUIRE(s.compare(i, 3, "\\u{") == 0);
            size_t close = s.find('}', i);
            sd::cliptext::append_utf8(out, char32_t(std::stoul(s.substr(i + 3, close - i - 3), nullptr, 16)));
            i = close;
        }
    }
    return out;
}

std::vector<int32_t> ints(const std::string& line) {
    std::istringstream ss(line);
    std::vector<int32_t> v;
    for (int32_t x; ss >> x;) v.push_back(x);
    return v;
}

std::vector<std::string> captions() {
    std::vector<std::string> caps;
    for (const std::string& l : lines_of(golden("captions.txt"))) caps.push_back(unescape(l));
    return caps;
}

std::string printable(const std::vector<int32_t>& v) {
    std::string s;
    for (int32_t x : v) s += std::to_string(x) + " ";
    return s;
}

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += char(c);
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += char(c);
        }
    }
    return out + "\"";
}

}  // namespace

TEST_CASE("tokenizer: golden ids of 426 captions match transformers' CLIPTokenizer") {
    const ClipTokenizer& tok = ClipTokenizer::builtin();
    CHECK(tok.vocab_size() == 49408);
    CHECK(tok.bos() == 49406);
    CHECK(tok.eos() == 49407);
    CHECK(tok.pad() == 49407);
    CHECK(tok.token(49406) == "<|startoftext|>");
    CHECK(tok.token(320) == "a</w>");

    const std::vector<std::string> caps = captions();
    const std::vector<std::string> want77 = lines_of(golden("ids77.txt"));
    const std::vector<std::string> want_tokens = lines_of(golden("tokens.txt"));
    REQUIRE(caps.size() >= 300);
    REQUIRE(want77.size() == caps.size());
    REQUIRE(want_tokens.size() == caps.size());

    // First pass with the BPE cache cold (only earlier tests in this file could warm it), then warm.
    std::vector<std::vector<int32_t>> enc(caps.size());
    for (size_t i = 0; i < caps.size(); ++i) enc[i] = tok.encode(caps[i]);

    int bad = 0;
    for (size_t i = 0; i < caps.size(); ++i) {
        std::vector<int32_t> got = tok.tokenize(caps[i]);
        const std::vector<int32_t>& got77 = enc[i];
        REQUIRE(got77.size() == 77);
        if (got != ints(want_tokens[i]) || got77 != ints(want77[i])) {
            if (++bad <= 5)
                MESSAGE("caption ", i, " '", caps[i], "'\n got  ", printable(got), "\n want ", want_tokens[i]);
        }
    }
    CHECK(bad == 0);

    // Again with the cache warm (as in training, where captions come back every epoch).
    int changed = 0;
    for (size_t i = 0; i < caps.size(); ++i) changed += tok.encode(caps[i]) != enc[i];
    CHECK(changed == 0);
}

TEST_CASE("tokenizer: kohya long-prompt chunks (150, 225) match sd-scripts") {
    const ClipTokenizer& tok = ClipTokenizer::builtin();
    const std::vector<std::string> caps = captions();
    for (auto [n, file] : {std::pair{225, "kohya.txt"}, std::pair{150, "kohya150.txt"}}) {
        CAPTURE(n);
        size_t rows = 0;
        for (const std::string& line : lines_of(golden(file))) {
            std::vector<int32_t> want = ints(line);
            size_t idx = size_t(want.front());
            want.erase(want.begin());
            REQUIRE(idx < caps.size());
            std::vector<int32_t> got = tok.encode_chunks(caps[idx], n);
            CHECK_MESSAGE(got == want, "caption ", idx);
            ++rows;
        }
        CHECK(rows > 70);
    }
    // Shape and framing on a short prompt: every chunk BOS ... EOS, padding EOS.
    std::vector<int32_t> c = tok.encode_chunks("a cat", 225);
    REQUIRE(c.size() == 3 * 77);
    for (int k = 0; k < 3; ++k) {
        CHECK(c[size_t(k) * 77] == tok.bos());
        CHECK(c[size_t(k) * 77 + 76] == tok.eos());
    }
    CHECK(tok.encode_chunks("a cat", 75) == tok.encode("a cat"));
    CHECK(error_of([&] { (void)tok.encode_chunks("a cat", 100); }).find("75, 150 or 225") != std::string::npos);
}

TEST_CASE("tokenizer: a diffusers tokenizer/ folder gives transformers' ids") {
    // A small vocabulary (3000 merges, BOS 3512, EOS 3513), its vocab.json \u-escaped.
    ClipTokenizer tiny = ClipTokenizer::from_folder(golden("tiny"));
    CHECK(tiny.bos() == 3512);
    CHECK(tiny.eos() == 3513);
    const std::vector<std::string> caps = captions();
    const std::vector<std::string> want = lines_of(golden("ids_tiny.txt"));
    REQUIRE(want.size() == 120);
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
        if (tiny.encode(caps[i]) != ints(want[i]) && ++bad <= 3) MESSAGE("tiny, caption ", i, " '", caps[i], "'");
    CHECK(bad == 0);

    // The full vocabulary written out as vocab.json (raw UTF-8) + the shipped merges.txt.
    const ClipTokenizer& tok = ClipTokenizer::builtin();
    std::string json = "{";
    for (int32_t id = 0; id < tok.vocab_size(); ++id)
        json += (id ? ",\n" : "") + json_string(tok.token(id)) + ": " + std::to_string(id);
    json += "}";
    TempDir dir;
    dir.file("vocab.json", json);
    std::ifstream merges(here() + "/../models/sd15/data/clip_merges.txt", std::ios::binary);
    REQUIRE(merges.good());
    std::stringstream ms;
    ms << merges.rdbuf();
    dir.file("merges.txt", ms.str());
    ClipTokenizer full = ClipTokenizer::from_folder(dir.path.string());
    CHECK(full.vocab_size() == 49408);
    bad = 0;
    for (const std::string& c : caps) bad += full.tokenize(c) != tok.tokenize(c);
    CHECK(bad == 0);
}

TEST_CASE("tokenizer: encodings, truncation, special tokens, threads") {
    const ClipTokenizer& tok = ClipTokenizer::builtin();
    std::vector<int32_t> empty = tok.encode("");
    CHECK(empty[0] == 49406);
    for (size_t k = 1; k < 77; ++k) CHECK(empty[k] == 49407);
    CHECK(tok.tokenize("a photo of a cat") == std::vector<int32_t>{320, 1125, 539, 320, 2368});
    CHECK(tok.tokenize("A  PHOTO\tof a CAT") == tok.tokenize("a photo of a cat"));

    std::string longtext;
    for (int k = 0; k < 100; ++k) longtext += "word ";
    std::vector<int32_t> t = tok.encode(longtext);
    CHECK(t[75] == tok.tokenize("word")[0]);
    CHECK(t[76] == 49407);

    // Literal special tokens map to their ids; other spellings are ordinary text.
    CHECK(tok.tokenize("<|endoftext|>") == std::vector<int32_t>{49407});
    CHECK(tok.tokenize("x<|startoftext|>") == std::vector<int32_t>{tok.tokenize("x")[0], 49406});
    CHECK(tok.tokenize("<|ENDOFTEXT|>").size() > 1);

    // NFC: a decomposed é tokenises as the composed one.
    CHECK(tok.tokenize("cafe\xCC\x81") == tok.tokenize("caf\xC3\xA9"));

    // The BPE cache is shared between threads.
    const std::vector<std::string> caps = captions();
    std::vector<std::vector<int32_t>> a(caps.size()), b(caps.size());
    std::thread th([&] {
        for (size_t i = 0; i < caps.size(); ++i) a[i] = tok.encode(caps[i]);
    });
    for (size_t i = caps.size(); i-- > 0;) b[i] = tok.encode(caps[i]);
    th.join();
    CHECK(a == b);

    // A pathological word: the BPE heap is O(n log n); a quadratic merge loop would take minutes on
    // it and run into the test's timeout (speed itself is the benchmarks' business, not a test's).
    std::string huge(200000, 'a');
    CHECK(tok.tokenize(huge).size() > 1000);
}

TEST_CASE("tokenizer: malformed text and files give clear errors") {
    const ClipTokenizer& tok = ClipTokenizer::builtin();
    for (const char* bad : {"\x80", "a\xC3", "\xC0\x80", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                            "\xF5\x80\x80\x80", "\xE2\x82", "ok \xFF"}) {
        CAPTURE(bad);
        CHECK(error_of([&] { (void)tok.tokenize(bad); }).find("invalid UTF-8 at byte") != std::string::npos);
    }
    CHECK(error_of([&] { (void)tok.tokenize("ok \xFF"); }).find("byte 3") != std::string::npos);
    CHECK(error_of([&] { (void)tok.token(49408); }).find("outside the vocabulary") != std::string::npos);

    TempDir dir;
    const std::string specials = R"("<|startoftext|>": 4, "<|endoftext|>": 5)";
    const std::string ok_vocab = R"({"a": 0, "b": 1, "ab": 2, "b</w>": 3, )" + specials + "}";
    std::string merges = dir.file("merges.txt", "#version: 0.2\na b\n");
    auto err = [&](const std::string& vocab_text, const std::string& merges_text) {
        std::string v = dir.file("v.json", vocab_text), m = dir.file("m.txt", merges_text);
        return error_of([&] { (void)ClipTokenizer::from_files(v, m); });
    };
    CHECK(err(ok_vocab, "#version: 0.2\na b\n") == "(no error)");
    CHECK(ClipTokenizer::from_files(dir.file("v2.json", ok_vocab), merges).tokenize("ab") ==
          std::vector<int32_t>{0, 3});  // "ab" as a word ends with "b</w>": no merge applies
    CHECK(err("", "").find("v.json at byte 0: expected '{'") != std::string::npos);
    CHECK(err(R"({"a": 0,)", "").find("expected a string") != std::string::npos);
    CHECK(err(R"({"a": -1})", "").find("non-negative integer") != std::string::npos);
    CHECK(err(R"({"a": 99999999999})", "").find("too large") != std::string::npos);
    CHECK(err(R"({"a": 0} x)", "").find("after the object") != std::string::npos);
    CHECK(err(R"({"\ud800": 0})", "").find("surrogate") != std::string::npos);
    CHECK(err(R"({"a": 0, "b": 0})", "").find("id 0 given to both") != std::string::npos);
    CHECK(err(R"({"a": 0, "b": 1})", "").find("<|startoftext|>' is not in the vocabulary") != std::string::npos);
    CHECK(err(ok_vocab, "a c\n").find("m.txt: token 'c' is not in the vocabulary") != std::string::npos);
    CHECK(err(ok_vocab, "a b c\n").find("m.txt line 1: expected two tokens") != std::string::npos);
    CHECK(err(ok_vocab, "#version: 0.2\nab\n").find("m.txt line 2") != std::string::npos);
    CHECK(error_of([&] { (void)ClipTokenizer::from_folder(dir.path.string() + "/missing"); })
              .find("cannot open") != std::string::npos);

    // Bounded fuzzing: random bytes as text, and byte-mutated vocab.json / merges.txt, either
    // work or throw gl::Error (anything else escapes and fails the test).
    std::mt19937 rng(11);
    int rejected = 0;
    for (int k = 0; k < 3000; ++k) {
        std::string s(rng() % 24, '\0');
        for (char& c : s) c = char(rng() % 4 ? 0x61 + rng() % 4 : rng() % 256);
        try {
            (void)tok.encode(s);
        } catch (const gl::Error&) {
            ++rejected;
        }
    }
    CHECK(rejected > 100);
    const std::string good_merges = "#version: 0.2\na b\n";
    for (int k = 0; k < 1500; ++k) {
        std::string v = ok_vocab, m = good_merges;
        std::string& target = k % 3 ? v : m;
        for (int e = 0; e < 1 + int(rng() % 3); ++e) target[rng() % target.size()] = char(rng() % 256);
        std::string vp = dir.file("fv.json", v), mp = dir.file("fm.txt", m);
        try {
            (void)ClipTokenizer::from_files(vp, mp).encode("ab ba");
        } catch (const gl::Error&) {
        }
    }
}
