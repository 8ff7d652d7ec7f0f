// The run's metrics file and report, kept together (see recorder.h).
#include "train/recorder.h"

namespace train {

Recorder::Recorder(const RecorderOptions& o, Clock monotonic, Clock wall)
    : dir_(o.output_dir),
      meter_(o.meter, std::move(monotonic), wall),
      writer_(o.output_dir / "metrics.jsonl"),
      last_step_(o.meter.first_step) {
    report_.title = o.title;
    report_.status = "running";
    MetricsEvent e;
    e.kind = o.meter.first_step > 0 ? EventKind::resume : EventKind::start;
    e.step = o.meter.first_step;
    e.time = o.start_wall_time ? *o.start_wall_time : wall();
    e.path = o.resumed_from;
    writer_.write(e);
}

StepMetrics Recorder::step(const StepMetrics& facts) {
    const StepMetrics m = meter_.update(facts);
    writer_.write(m);
    last_step_ = m.step;
    last_epoch_ = m.epoch;
    return m;
}

void Recorder::sample(int64_t step, int64_t epoch, std::vector<SampleImage> images) {
    meter_.idle();
    MetricsEvent e;
    e.kind = EventKind::sample;
    e.step = step;
    e.epoch = epoch;
    e.images = std::move(images);
    writer_.write(e);
}

void Recorder::validation(int64_t step, int64_t epoch, const std::string& kind, double loss, double average,
                          double divergence) {
    meter_.idle();
    MetricsEvent e;
    e.kind = EventKind::validation;
    e.step = step;
    e.epoch = epoch;
    e.message = kind;
    e.loss = loss;
    e.average = average;
    e.divergence = divergence;
    writer_.write(e);
}

void Recorder::save(int64_t step, int64_t epoch, const std::string& path) {
    meter_.idle();
    MetricsEvent e;
    e.kind = EventKind::save;
    e.step = step;
    e.epoch = epoch;
    e.path = path;
    writer_.write(e);
    write_report();
}

void Recorder::end(const std::string& message) {
    MetricsEvent e;
    e.kind = EventKind::end;
    e.step = last_step_;
    e.epoch = last_epoch_;
    e.message = message;
    writer_.write(e);
    report_.status = message;
    write_report();
}

void Recorder::write_report() {
    report_.metrics = read_metrics(metrics_path());
    train::write_report(report_path(), report_);
}

}  // namespace train
