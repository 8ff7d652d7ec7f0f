// Session: the plan before the run (everything here runs without reading a weight).
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>

#include "ggml-lite/io/sha256.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/plan_svg.h"
#include "lora/file_modules.h"
#include "models/sd15/vae_file.h"
#include "train/run/initial_step.h"
#include "train/run/ranks.h"
#include "train/run/run_paths.h"
#include "train/run/save.h"
#include "train/run/session_impl.h"

namespace train {

namespace fs = std::filesystem;

namespace {

// kohya's --dim_from_weights: the rank (and LoCon's conv rank) and alpha of the file's modules.
void dims_from_file(RunConfig& c, const std::string& path) {
    const gl::io::SafetensorsFile f(path);
    std::set<int64_t> ranks, conv_ranks;
    std::optional<float> alpha, conv_alpha;
    for (const gl::io::TensorInfo& t : f.list()) {
        const std::string suffix = ".lora_down.weight";
        if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix))
            continue;
        const bool conv = t.shape.size() == 4 && (t.shape[2] > 1 || t.shape[3] > 1);
        (conv ? conv_ranks : ranks).insert(t.shape.at(0));
        const std::string a = t.name.substr(0, t.name.size() - suffix.size()) + ".alpha";
        if (f.has(a) && !(conv ? conv_alpha : alpha)) {
            float v = 0;
            f.read(a, &v, gl::DType::f32);
            (conv ? conv_alpha : alpha) = v;
        }
    }
    GL_CHECK(ranks.size() == 1 && conv_ranks.size() <= 1, "--dim_from_weights ", path, ": ",
             ranks.empty() ? "holds no lora_down weights" : "its modules have different ranks",
             " (give --network_dim and --network_args conv_dim instead)");
    c.network_dim = int(*ranks.begin());
    if (alpha) c.network_alpha = *alpha;
    if (!conv_ranks.empty()) {
        std::erase_if(c.network_args, [](const std::string& a) { return a.rfind("conv_", 0) == 0; });
        c.network_args.push_back(gl::cat("conv_dim=", *conv_ranks.begin()));
        if (conv_alpha) c.network_args.push_back(gl::cat("conv_alpha=", *conv_alpha));
    }
    c.note(gl::cat("--dim_from_weights: rank ", *c.network_dim, ", alpha ", c.network_alpha,
                   conv_ranks.empty() ? std::string() : gl::cat(", conv rank ", *conv_ranks.begin())));
}

}  // namespace

std::string run_identity(const RunData& d, uint64_t seed, int64_t micro_batch, int accum, int version) {
    gl::io::Sha256 h;
    auto update = [](gl::io::Sha256& sha, const std::string& s) { sha.update(s.data(), s.size()); };
    update(h, gl::cat("seed ", seed, "|micro ", micro_batch, "|accum ", accum, "|"));
    for (const data::ImageEntry& e : d.dataset.images) {
        if (version == 1) {  // states of earlier builds: the paths as they were given
            update(h, gl::cat(e.path.string(), "|", e.num_repeats, "|", e.is_reg, "|"));
            continue;
        }
        // By content: the file within its subset's folder, its size and time, however the folders
        // are spelled (relative, absolute, through a symlink).
        const fs::path& folder = d.dataset.config.subsets[size_t(e.subset)].image_dir;
        struct stat st {};
        const bool known = ::stat(e.path.c_str(), &st) == 0;
        // (A fine-tuning subset without a folder: its keys' absolute paths.)
        const std::string name = folder.empty() ? e.path.generic_string() : e.path.lexically_relative(folder).generic_string();
        update(h, gl::cat(e.subset, "|", name, "|",
                          known ? int64_t(st.st_size) : -1, "|", known ? int64_t(st.st_mtime) : 0, "|", e.num_repeats,
                          "|", e.is_reg, "|"));
    }
    for (const data::Bucket& b : d.buckets.buckets)
        update(h, gl::cat(b.reso.w, "x", b.reso.h, ":", b.images.size(), "|",
                          b.batch_size ? gl::cat("dataset ", b.dataset, " batch ", b.batch_size, "|") : ""));
    return h.hex();
}

std::string RunPlan::text() const {
    std::string s = dataset;
    s += "steps:\n" + counts.arithmetic;
    s += "configuration: " + configuration + "\n";
    s += memory.by_category;
    if (!memory.choice.empty()) s += memory.choice;
    for (const std::string& n : notes) s += "note: " + n + "\n";
    for (const std::string& w : warnings) s += "warning: " + w + "\n";
    return s;
}

Session::Session(RunConfig config, RunObserver* observer) : impl_(std::make_unique<Impl>()) {
    impl_->cfg = std::move(config);
    impl_->obs = observer ? observer : &impl_->quiet;
    impl_->cfg.validate();
}

Session::~Session() = default;

const RunConfig& Session::config() const { return impl_->cfg; }

void Session::set_communicator(gl::dist::Communicator* comm) {
    GL_CHECK(!impl_->prepared, "sdtrain: the communicator is set before the plan");
    impl_->comm = comm && comm->world_size() > 1 ? comm : nullptr;
}

RunShape Session::Impl::resume_shape() const {
    RunShape r;
    r.counts = plan.counts;
    const int64_t f = model.vae_config().downscale(), ch = step.config->latent_channels();
    int64_t smallest = INT64_MAX, largest = 0;  // latent values of one image
    for (const BucketShare& b : bucket_shares(data, f)) {
        smallest = std::min(smallest, b.latent_h * b.latent_w * ch);
        largest = std::max(largest, b.latent_h * b.latent_w * ch);
    }
    const Objective o = cfg.objective();
    r.min_update_draws = BucketTrainer::noise_draws(o, 1, smallest, ch);
    // Several ranks draw every micro-batch's noise for the global micro-batch (world x the batch).
    const int64_t global = step.batch * world();
    r.max_batch_draws = BucketTrainer::noise_draws(o, global, global * largest, ch, true);
    return r;
}

StepOptions Session::Impl::base_step() const {
    StepOptions so;
    so.family = &cfg.family();
    so.config = model.config;
    so.precision = cfg.precision();
    so.base_format = cfg.unet_base_format();
    so.text_encoder_format = cfg.text_encoder_base_format();
    so.batch = data.dataset.config.batch_size;
    so.train_text_encoder = cfg.train_text_encoder();
    so.train_unet = cfg.train_unet();
    so.clip_chunks = cfg.clip_chunks();
    so.context_tokens = so.family->tokens().context_rows(so.clip_chunks);
    so.clip_skip = cfg.clip_skip.value_or(1);
    so.token_weights = cfg.weighted_captions && so.train_text_encoder;
    so.lora = cfg.lora_config();
    if (cfg.dim_from_weights && so.lora.lycoris()) {
        // LyCORIS's create_network_from_weights: the modules exactly as the file holds them.
        so.lora.from_file = std::make_shared<lora::FileModules>(
            std::make_shared<gl::io::SafetensorsFile>(*cfg.network_weights), model.fam().ldm_names(model.cfg()));
        so.lora.from_file->check_holds_modules();
    }
    so.prediction = cfg.objective().prediction;
    so.loss = cfg.objective().loss;
    so.host_noise = draws_noise_on_host(cfg.objective());
    so.input_perturbation = cfg.objective().ip_noise_gamma != 0;
    // kohya applies the alpha masks whenever a batch has one (--masked_loss or not), the mask
    // images of conditioning_data_dir with --masked_loss (data_plan refuses them without it).
    for (const data::SubsetConfig& sub : data.dataset.config.subsets)
        so.masked_loss = so.masked_loss || sub.alpha_mask || sub.conditioning_data_dir;
    // kohya's loss_weights: prior_loss_weight on the regularisation images, 1 on the others.
    for (const data::SubsetConfig& sub : data.dataset.config.subsets)
        so.sample_weights = so.sample_weights || (sub.is_reg && cfg.prior_loss_weight != 1.0);
    so.grad_accum = cfg.gradient_accumulation_steps;
    so.data_parallel = world() > 1;
    so.unet_lr = float(cfg.unet_learning_rate());
    so.text_encoder_lr = float(cfg.text_encoder_learning_rate());
    so.optimizer = cfg.optimizer();
    so.max_grad_norm = float(cfg.max_grad_norm);
    GL_CHECK(so.clip_skip <= so.config->text_layers(), "--clip_skip ", so.clip_skip, ": the text encoder has ",
             so.config->text_layers(), " layers");
    return so;
}

const RunPlan& Session::prepare() {
    if (impl_->prepared) return impl_->plan;
    try {
        impl_->prepare();
    } catch (...) {
        remove_created_dirs(impl_->created_dirs);  // a refused run leaves no output folder behind
        throw;
    }
    impl_->obs->on_plan(impl_->plan);
    return impl_->plan;
}

void Session::Impl::prepare() {
    Impl& m = *this;
    const RunConfig& c = m.cfg;
    // The inputs the options name are checked before the output folder is made, the files and
    // folders they lead to (the model's parts, the subsets) once they are open.
    check_run_paths(c, run_inputs(c, nullptr, nullptr), nullptr);
    m.created_dirs = check_output_dir(c.output_dir);
    if (c.resume) m.resume = read_run_position(*c.resume);
    if (c.network_weights) {
        std::error_code ec;
        GL_CHECK(std::filesystem::is_regular_file(*c.network_weights, ec), "--network_weights ", *c.network_weights,
                 ": not a file");
        if (c.dim_from_weights && m.cfg.lora_config().lycoris()) {
            m.cfg.note("--dim_from_weights: the network's modules, types and ranks are " + *c.network_weights +
                       "'s (LyCORIS's create_network_from_weights)");
        } else if (c.dim_from_weights) {
            dims_from_file(m.cfg, *c.network_weights);
            m.cfg.validate();
        }
    }
    if (c.sample_prompts) read_sample_prompts(c);  // a bad line is refused before the model is opened
    m.message("opening the model " + c.pretrained_model_name_or_path);
    m.model = c.family().open(c.pretrained_model_name_or_path);
    if (c.vae) sd::replace_vae(m.model, *c.vae);
    if (!c.base_weights.empty()) {
        // kohya's --base_weights: every later reader of the UNet and text encoder sees the merge.
        std::vector<std::string> merged;
        m.model = lora::with_base_weights(m.model, c.base_weight_files(), &merged);
        for (const std::string& line : merged) m.cfg.note(line);
    }
    // The seed: given, else the resumed run's, else drawn (kohya draws one too and records it).
    if (c.seed) m.seed = *c.seed;
    else if (m.resume) m.seed = m.resume->seed;
    else m.seed = std::random_device{}() & 0xffffffffu;
    if (m.comm) m.comm->broadcast(&m.seed, sizeof m.seed, 0);  // a drawn seed is rank 0's
    m.message("reading the dataset");
    m.data = load_run_data(c, m.seed);
    check_run_paths(c, run_inputs(c, &m.model, &m.data.dataset.config), &m.data.dataset.config);
    m.plan.dataset = dataset_summary(m.data);
    m.plan.skipped = skipped_before_training(m.data);
    m.plan.notes = c.notes;
    m.plan.warnings = m.data.warnings;
    std::string why;
    m.backend = gl::resolve_backend(c.backend, &why);
    if (!why.empty() && c.backend == gl::Backend::automatic) m.plan.notes.push_back("running on the CPU: " + why);
    m.step = m.base_step();
    // kohya switches network dropout off for validation (network.eval()); our step graphs hold it
    // built in, and the validation runs on them.
    GL_CHECK(!m.data.validation || m.step.lora.lycoris() || m.step.lora.dropout == 0.0f, "validation_split ",
             m.data.dataset.config.validation_split, " with network dropout (", m.step.lora.dropout,
             "): the validation pass runs the training graphs, which cannot switch network dropout off as kohya's "
             "validation does; train without --network_dropout (and network_args dropout) or without the split");
    m.cache_text = c.cache_text_encoder_outputs;
    m.plan_memory();
    std::vector<double> group_lrs;
    for (const ParamGroup& g : m.graphs->steps()[0].graph->update->groups()) group_lrs.push_back(g.lr);
    check_schedule_groups(c, m.plan.counts.max_train_steps * m.world(), group_lrs);
    if (m.world() > 1 && !c.lr_warmup_steps.ratio && c.lr_warmup_steps.value > 0)
        m.plan.notes.push_back(gl::cat("--lr_warmup_steps ", c.lr_warmup_steps.value, " with ", m.world(),
                                       " processes: as kohya's schedule (built for max_train_steps x processes and "
                                       "stepped once per process at each update), the warm-up ends after ",
                                       c.lr_warmup_steps.value / m.world(), " updates"));
    if (const std::optional<KohyaStart> s = kohya_start(c, m.plan.counts)) m.plan.notes.push_back(s->note);

    if (m.resume) {
        GL_CHECK(m.resume->world_size == m.world(), "--resume ", *c.resume, ": the state was saved by a run of ",
                 m.resume->world_size, m.resume->world_size == 1 ? " process" : " processes", ", this run has ",
                 m.world(), " (its global batches, and so its data order, differ: resume with --num_processes ",
                 m.resume->world_size, ")");
        GL_CHECK(m.resume->seed == m.seed, "--resume ", *c.resume, ": the state was trained with --seed ",
                 m.resume->seed, ", this run has --seed ", m.seed);
        GL_CHECK(m.resume->run_identity ==
                     run_identity(m.data, m.seed, m.step.batch, m.step.grad_accum, m.resume->version),
                 "--resume ", *c.resume, ": the dataset, buckets, batch size or gradient accumulation differ from the "
                 "run that saved the state (its data order cannot be continued)");
        check_run_position(*m.resume, "--resume " + (fs::path(*c.resume) / "train_state.json").string(),
                           m.resume_shape());
    }
    m.cfg.seed = m.seed;  // the configuration shows the seed the run uses
    m.plan.config = config_sections(m.cfg);
    if (m.comm) {
        // The ranks run one command line; what each resolved from it (files, datasets, device)
        // must be the same, or their graphs would not meet.
        std::string all = gl::cat(m.plan.counts.arithmetic, "|", m.plan.configuration, "|", m.plan.memory.planned_bytes,
                                  "|", m.plan.dataset, "|");
        for (const ConfigSection& sec : m.plan.config)
            for (const auto& [k, v] : sec.entries) all += k + "=" + v + "|";
        gl::io::Sha256 h;
        h.update(all.data(), all.size());
        check_ranks_agree(*m.comm, "the configuration and the plan", h.hex(),
                          gl::cat("rank ", m.rank(), "'s plan: ", gl::format_bytes(m.plan.memory.planned_bytes), ", ",
                                  m.plan.configuration));
    }
    m.prepared = true;
}

}  // namespace train
