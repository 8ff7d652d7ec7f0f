// The training report: one HTML file with everything inline (styles, SVG plots, the memory
// timelines as data: URIs; no script, nothing fetched from a network) but the sample images, which
// are the PNG files the trainer wrote beside it, linked relatively. The trainer rewrites it
// atomically (temporary file + rename) at every save, so a browser or a copy never sees half of it.
//
// Sections: the run (status, step, epoch, loss, learning rates, speed, memory, times, saved
// files), the loss curve (every step and the running mean) and the learning rates, the sample
// images of every sampling step with their prompts, the memory plans (Plan::report() text and
// timeline), the dataset and bucket tables, the configuration, the events. Every figure comes
// from the metrics file's records (read_metrics), and all text is escaped: captions, prompts,
// paths and option values are user text.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "train/metrics.h"

namespace train {

struct ReportTable {
    std::string title;
    std::vector<std::string> columns;           // header; empty: a key / value table without one
    std::vector<std::vector<std::string>> rows;
};

struct ReportBlock {
    std::string title;
    std::string text;  // shown preformatted (a plan's dataset summary, its steps arithmetic, notes)
};

struct ReportPlan {
    std::string name;          // "bucket 512x512, batch 4"
    std::string text;          // gl::Plan::report()
    std::string timeline_svg;  // gl::timeline_svg(plan) or ""; shown as an image, never as markup
};

struct ReportInput {
    std::string title;                 // "sdtrain: my_lora"
    std::string status;                // "running", "finished", "stopped at step 120 (Ctrl-C)"
    MetricsHistory metrics;            // read_metrics(<output dir>/metrics.jsonl)
    std::vector<ReportBlock> dataset_text;  // the dataset as the trainer printed it, the steps arithmetic
    std::vector<ReportTable> dataset;       // the datasets and their buckets
    std::vector<ReportPlan> memory;         // the memory plans the run uses
    std::vector<ReportBlock> config_text;   // the configuration summary, notes
    std::vector<ReportTable> config;        // the run's configuration (e.g. one table per option group)
    ReportTable timings;               // phases timed by the caller (model load, latent caching, ...)
};

// The page. Sample paths that are relative are taken relative to report_dir (the report sits in
// the output folder beside metrics.jsonl); absolute ones are linked relative to it when possible.
std::string render_report(const ReportInput& in, const std::filesystem::path& report_dir);
// Renders and writes the page to `file` through a temporary file and a rename. Throws gl::Error
// naming the file; the previous report stays whole on failure.
void write_report(const std::filesystem::path& file, const ReportInput& in);

// The pieces, for tests and other pages.
// Text for HTML content and quoted attributes: & < > " ' escaped, invalid UTF-8 replaced with
// U+FFFD, control characters other than tab and newline dropped.
std::string html_escape(std::string_view s);
// A relative path as a URL path: every byte outside [A-Za-z0-9-._~/] percent-encoded.
std::string url_path(const std::string& path);

struct PlotSeries {
    std::string label, color;
    std::vector<double> x, y;  // non-finite y values break the line
    double width = 1.5;
};
// A line plot as inline SVG. Over ~2 points per horizontal pixel a series is reduced to each
// pixel column's first, lowest, highest and last point (spikes stay visible). marks: x positions
// drawn as dashed vertical lines (saves). y_format: printf format of the y tick labels.
std::string line_plot_svg(const std::string& title, const std::string& x_label, const std::vector<PlotSeries>& series,
                          const std::vector<double>& marks = {}, const char* y_format = "%.3g", int width = 760,
                          int height = 300);

}  // namespace train
