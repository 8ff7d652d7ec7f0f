#include "data/dataset.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "data/face_crop.h"
#include "data/fine_tuning.h"
#include "data/workers.h"
#include "ggml-lite/core/error.h"

namespace data {
namespace fs = std::filesystem;

bool has_image_extension(const fs::path& p) { return format_of_extension(p) != ImageFormat::unknown; }

std::string describe_skipped(const std::vector<SkippedImage>& skipped, size_t max_listed, const std::string& indent) {
    std::vector<std::vector<const SkippedImage*>> groups;  // by reason, in order of first appearance
    std::map<std::string, size_t> group_of;
    for (const SkippedImage& k : skipped) {
        const auto [it, added] = group_of.try_emplace(k.reason, groups.size());
        if (added) groups.emplace_back();
        groups[it->second].push_back(&k);
    }
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    std::string s;
    size_t listed = 0;
    for (const auto& g : groups) {
        if (listed >= max_listed) break;
        if (g.size() == 1) {
            s += indent + g[0]->path + ": " + g[0]->reason + "\n";
            listed++;
            continue;
        }
        s += gl::cat(indent, g[0]->reason, ": ", g.size(), " files\n");
        for (size_t i = 0; i < g.size() && listed < max_listed; i++, listed++) s += indent + "  " + g[i]->path + "\n";
    }
    if (listed < skipped.size()) s += gl::cat(indent, "... and ", skipped.size() - listed, " more\n");
    return s;
}

void add_skipped(std::vector<SkippedImage>& list, const std::vector<SkippedImage>& more) {
    std::set<std::string> named;
    for (const SkippedImage& k : list) named.insert(k.path);
    for (const SkippedImage& k : more)
        if (named.insert(k.path).second) list.push_back(k);
}

namespace {

// Every entry but folders: a FIFO, socket or device named like an image is listed, so that
// reading it refuses it by name instead of leaving it out unseen.
std::vector<fs::path> list_images(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
        std::error_code ec;
        if (!e.is_directory(ec) && has_image_extension(e.path())) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string stem_of(const fs::path& p) { return p.stem().string(); }

// kohya's pairing of images with the masks of a subset's conditioning_data_dir (its
// ControlNetDataset): by file name without the extension, in both directions, and each mask of its
// image's size (kohya asserts it when it resizes the pair).
void pair_masks(std::vector<ImageEntry>& images, const DatasetConfig& config,
                const std::vector<std::set<std::string>>& listed_stems) {
    for (size_t si = 0; si < config.subsets.size(); si++) {
        const std::optional<fs::path>& dir = config.subsets[si].conditioning_data_dir;
        if (!dir) continue;
        std::error_code ec;
        GL_CHECK(fs::is_directory(*dir, ec), "conditioning_data_dir ", dir->string(), ": not a directory");
        std::map<std::string, fs::path> masks;  // the first by name, as kohya's sorted glob
        for (const fs::path& m : list_images(*dir)) masks.try_emplace(stem_of(m), m);
        std::vector<std::string> missing, extra;
        for (ImageEntry& e : images) {
            if (e.subset != int(si)) continue;
            const auto it = masks.find(stem_of(e.path));
            if (it == masks.end()) {
                missing.push_back(e.path.filename().string());
                continue;
            }
            const std::vector<uint8_t> bytes = read_file_bytes(it->second);
            const ImageHeader h = verify_image(bytes.data(), bytes.size(), it->second.string());
            GL_CHECK(h.width == e.width && h.height == e.height, "mask ", it->second.string(), ": ", h.width, "x",
                     h.height, ", its image ", e.path.string(), " is ", e.width, "x", e.height,
                     " (a mask has its image's size)");
            e.mask = it->second;
        }
        for (const auto& [stem, m] : masks)
            if (!listed_stems[si].count(stem)) extra.push_back(m.filename().string());
        auto names = [](const std::vector<std::string>& v) {
            std::string out;
            for (size_t i = 0; i < v.size() && i < 5; i++) out += (i ? ", " : "") + v[i];
            return v.size() > 5 ? gl::cat(out, " and ", v.size() - 5, " more") : out;
        };
        GL_CHECK(missing.empty(), "conditioning_data_dir ", dir->string(), ": no mask image for ", missing.size(),
                 missing.size() == 1 ? " image of " : " images of ", config.subsets[si].image_dir.string(), ": ",
                 names(missing), " (a mask is named as its image)");
        GL_CHECK(extra.empty(), "conditioning_data_dir ", dir->string(), ": ", extra.size(),
                 extra.size() == 1 ? " mask has" : " masks have", " no image in ", config.subsets[si].image_dir.string(),
                 ": ", names(extra), " (kohya refuses extra masks too)");
    }
}

struct Listed {
    fs::path path;
    size_t subset = 0;
    size_t index = 0;  // its place in its subset's listing
};

struct Verdict {
    ImageHeader header;
    std::optional<ImageError> error;
};

struct FormatTally {
    int64_t files = 0, read = 0;
    std::map<std::string, int64_t> reasons;
};

// "every JPEG (34 files) failed: <reason>" for each format with two or more files and none read
// (the reason most of them got; "(N of them)" when others got other reasons).
std::vector<std::string> failed_format_lines(const std::map<ImageFormat, FormatTally>& tally) {
    std::vector<std::string> out;
    for (const auto& [f, t] : tally) {
        if (t.files < 2 || t.read > 0) continue;
        const auto top = std::max_element(t.reasons.begin(), t.reasons.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; });
        const std::string head = gl::cat("every ", format_name(f), " (", t.files, " files) failed");
        if (top->second == t.files) out.push_back(head + ": " + top->first);
        else if (top->second > 1) out.push_back(gl::cat(head, ": ", top->first, " (", top->second, " of them)"));
        else out.push_back(head + ", each for its own reason");
    }
    return out;
}

// kohya's crop_target asserts that the scaled image covers the resolution; it never enlarges, so an
// image with a face box smaller than the resolution on a side stops its run at that image. Here
// the run is refused before it starts, naming the file.
void check_face_crop(const ImageEntry& e, const DatasetConfig& c) {
    if (c.enable_bucket || !e.face || e.face->cx <= 0) return;
    GL_CHECK(e.width >= c.width && e.height >= c.height, e.path.string(), ": ", e.width, "x", e.height,
             " is smaller than the resolution ", c.width, "x", c.height,
             " on a side, and face_crop_aug_range only shrinks around the face box of the name (kohya's "
             "assertion: internal error, small scale); use a larger image, or bucketing (which ignores the face box)");
}

// What face_crop_aug_range leaves undone, said once per subset (kohya says nothing): with bucketing
// the face boxes are ignored; images without a box take the plain resize and crop.
void face_crop_warnings(Dataset& ds, const std::vector<ImageEntry>& reg) {
    for (size_t si = 0; si < ds.config.subsets.size(); si++) {
        const SubsetConfig& s = ds.config.subsets[si];
        if (!s.face_crop_aug_range) continue;
        if (ds.config.enable_bucket) {
            ds.warnings.push_back(gl::cat("subset ", s.label(), ": face_crop_aug_range is ignored with "
                                          "enable_bucket (kohya crops around the face only without bucketing)"));
            continue;
        }
        int64_t images = 0, faces = 0;
        for (const std::vector<ImageEntry>* list : {&std::as_const(ds.images), &reg})
            for (const ImageEntry& e : *list)
                if (e.subset == int(si)) {
                    images++;
                    faces += e.face && e.face->cx > 0;
                }
        if (faces < images)
            ds.warnings.push_back(gl::cat("subset ", s.label(), ": face_crop_aug_range: ", images - faces,
                                          " of its ", images, " images have no face box in their name "
                                          "(<name>_<cx>_<cy>_<w>_<h>, cx > 0); they are resized and cropped as "
                                          "without it"));
    }
}

}  // namespace

Dataset build_dataset(const DatasetConfig& config, BadImagePolicy policy, const DatasetSplit& split) {
    Dataset ds;
    ds.config = config;
    const bool validation = split.part == DatasetPart::validation;
    // kohya's validation set takes each image once, whatever its subset's repeats.
    if (validation)
        for (SubsetConfig& s : ds.config.subsets) s.num_repeats = 1;
    std::vector<std::vector<fs::path>> listings(config.subsets.size());
    std::vector<std::vector<MetadataImage>> metadata(config.subsets.size());
    std::set<std::string> metadata_files, image_dirs;
    for (size_t si = 0; si < config.subsets.size(); si++) {
        const SubsetConfig& s = config.subsets[si];
        const std::string dir = s.label();
        if (s.num_repeats < 1 && !validation) {
            ds.warnings.push_back(gl::cat("ignoring subset ", dir, ": num_repeats is less than 1"));
            continue;
        }
        if (s.metadata_file) {  // kohya's FineTuningDataset
            if (!metadata_files.insert(s.metadata_file->string()).second) {
                ds.warnings.push_back(gl::cat("ignoring subset ", dir, ": an earlier subset of this dataset has the "
                                              "same metadata_file (kohya uses the first one)"));
                continue;
            }
            metadata[si] = read_fine_tuning_metadata(s);
            for (const MetadataImage& m : metadata[si]) listings[si].push_back(m.path);
            if (listings[si].empty()) ds.warnings.push_back(gl::cat("ignoring subset ", dir, ": no image entries found"));
            continue;
        }
        // kohya's DreamBoothDataset: a subset equal to one already registered (the same image_dir
        // string, is_reg or not) is ignored; a subset registers once it has found images.
        if (image_dirs.count(s.image_dir.string())) {
            ds.warnings.push_back(gl::cat("ignoring subset ", dir, ": an earlier subset of this dataset has the "
                                          "same image_dir (kohya uses the first one)"));
            continue;
        }
        std::error_code ec;
        if (!fs::is_directory(s.image_dir, ec)) {
            ds.warnings.push_back(gl::cat("ignoring subset ", dir, ": not a directory"));
            continue;
        }
        listings[si] = list_images(s.image_dir);
        if (listings[si].empty()) ds.warnings.push_back(gl::cat("ignoring subset ", dir, ": no images found"));
        else image_dirs.insert(s.image_dir.string());
    }
    size_t files = 0;
    for (const std::vector<fs::path>& l : listings) files += l.size();
    std::vector<std::set<std::string>> listed_stems(config.subsets.size());
    for (size_t si = 0; si < listings.size(); si++)
        for (const fs::path& f : listings[si]) listed_stems[si].insert(stem_of(f));
    listings = split_listings(std::move(listings), config, split);
    std::vector<Listed> listed;
    for (size_t si = 0; si < listings.size(); si++) {
        // config.cpp refuses a split of fine-tuning subsets: their listings are kept whole.
        GL_CHECK(metadata[si].empty() || listings[si].empty() || listings[si].size() == metadata[si].size(),
                 "build_dataset: a fine-tuning subset's listing was split");
        for (size_t i = 0; i < listings[si].size(); i++) listed.push_back({listings[si][i], si, i});
    }
    if (validation && listed.empty()) return ds;
    GL_CHECK(!listed.empty() || files == 0, "validation_split ", config.validation_split,
             " leaves no training image (kohya's rule: each subset trains on its first ceil(n * (1 - split)) "
             "images); lower it");

    const int threads = int(std::clamp<size_t>(listed.size(), 1, size_t(default_worker_threads())));
    Workers pool(threads);  // declared before the window over it, so it outlives the tasks
    Prefetch<Verdict> verdicts(pool, listed.size(), size_t(threads) * 2, [&listed](size_t i) {
        Verdict v;
        try {
            const std::vector<uint8_t> bytes = read_file_bytes(listed[i].path);
            v.header = verify_image(bytes.data(), bytes.size(), listed[i].path.string());
        } catch (const ImageError& e) {
            v.error = e;
        }
        return v;
    });

    std::vector<ImageEntry> reg;
    std::vector<std::string> missing_captions, size_mismatch;
    std::vector<int64_t> files_in(config.subsets.size(), 0), read_in(config.subsets.size(), 0);
    std::vector<std::optional<SkippedImage>> first_bad(config.subsets.size());
    std::map<ImageFormat, FormatTally> tally;
    for (const Listed& l : listed) {
        const Verdict v = *verdicts.next();
        const SubsetConfig& s = ds.config.subsets[l.subset];
        FormatTally& t = tally[format_of_extension(l.path)];
        files_in[l.subset]++;
        t.files++;
        if (v.error) {
            if (policy == BadImagePolicy::fail) throw *v.error;
            ds.skipped.push_back({v.error->path(), v.error->reason()});
            t.reasons[v.error->reason()]++;
            if (!first_bad[l.subset]) first_bad[l.subset] = ds.skipped.back();
            continue;
        }
        read_in[l.subset]++;
        t.read++;
        ImageEntry e;
        e.path = l.path;
        e.subset = int(l.subset);
        e.num_repeats = s.num_repeats;
        e.is_reg = s.is_reg;
        e.resize = s.resize_interpolation;
        e.width = v.header.width;
        e.height = v.header.height;
        if (s.face_crop_aug_range) {
            e.face = face_box_of_name(l.path);
            check_face_crop(e, config);
        }
        if (s.metadata_file) {
            const MetadataImage& m = metadata[l.subset][l.index];
            e.caption = m.caption;
            e.tags = m.tags;
            if (m.image_size && ((*m.image_size)[0] != e.width || (*m.image_size)[1] != e.height))
                size_mismatch.push_back(gl::cat(l.path.string(), ": ", e.width, "x", e.height, ", the metadata says ",
                                                (*m.image_size)[0], "x", (*m.image_size)[1]));
        } else if (std::optional<std::string> c = read_caption_file(l.path, s.caption.caption_extension, s.caption.enable_wildcard)) {
            e.caption = *c;
        } else {
            e.caption = s.class_tokens.value_or("");
            missing_captions.push_back(l.path.string());
        }
        (s.is_reg ? ds.num_reg_images : ds.num_train_images) += s.num_repeats;
        (s.is_reg ? reg : ds.images).push_back(std::move(e));
    }
    pair_masks(ds.images, ds.config, listed_stems);
    for (size_t si = 0; si < config.subsets.size(); si++)
        if (config.subsets[si].is_reg && files_in[si] > 0 && read_in[si] == 0)
            gl::fail("regularisation folder ", config.subsets[si].image_dir.string(), ": none of its ", files_in[si],
                     files_in[si] == 1 ? " image" : " images", " can be read (", first_bad[si]->path, ": ",
                     first_bad[si]->reason, "); remove the folder from the run or fix its images");
    ds.failed_formats = failed_format_lines(tally);
    if (!missing_captions.empty()) {
        std::string w = gl::cat("no caption file for ", missing_captions.size(),
                                " images (their folder's class tokens or an empty caption are used):");
        for (size_t i = 0; i < missing_captions.size() && i < 5; i++) w += "\n  " + missing_captions[i];
        if (missing_captions.size() > 5) w += gl::cat("\n  ... and ", missing_captions.size() - 5, " more");
        ds.warnings.push_back(w);
    }
    if (!size_mismatch.empty()) {
        std::string w = gl::cat(size_mismatch.size(), size_mismatch.size() == 1 ? " image is" : " images are",
                                " not of the image_size their metadata gives (the file's size is used; kohya "
                                "buckets by the metadata's):");
        for (size_t i = 0; i < size_mismatch.size() && i < 5; i++) w += "\n  " + size_mismatch[i];
        if (size_mismatch.size() > 5) w += gl::cat("\n  ... and ", size_mismatch.size() - 5, " more");
        ds.warnings.push_back(w);
    }
    face_crop_warnings(ds, reg);
    if (ds.num_reg_images > 0 && ds.num_train_images < ds.num_reg_images)
        ds.warnings.push_back("more regularisation images than training images: some are not used");
    // kohya's balancing: reg images are added in order (first with their own repeats, then one
    // more repeat each, round after round) until they match the training images with repeats.
    if (!reg.empty()) {
        const size_t first_reg = ds.images.size();
        int64_t n = 0;
        bool first_round = true;
        while (n < ds.num_train_images) {
            for (ImageEntry& r : reg) {
                if (first_round) {
                    ds.images.push_back(r);
                    n += r.num_repeats;
                } else {
                    ds.images[first_reg + size_t(&r - reg.data())].num_repeats++;
                    n += 1;
                }
                if (n >= ds.num_train_images) break;
            }
            first_round = false;
        }
        ds.unused_reg.assign(reg.begin() + long(ds.images.size() - first_reg), reg.end());
    }
    if (ds.images.empty()) {
        std::string msg = "the dataset has no usable images";
        if (!ds.skipped.empty()) msg += gl::cat(" (", ds.skipped.size(), " unreadable, first: ", ds.skipped[0].path,
                                                ": ", ds.skipped[0].reason, ")");
        for (const SubsetConfig& s : config.subsets) msg += "\n  " + s.label();
        throw gl::Error(msg);
    }
    return ds;
}

}  // namespace data
