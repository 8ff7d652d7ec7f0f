#include "train/run/config_view.h"

#include <algorithm>

#include "train/run/option_table.h"

namespace train {

std::vector<ConfigSection> config_sections(const RunConfig& c) {
    std::vector<ConfigSection> out;
    for (const Option& o : option_table()) {
        if (o.section.empty()) continue;
        auto s = std::find_if(out.begin(), out.end(), [&](const ConfigSection& x) { return x.title == o.section; });
        if (s == out.end()) s = out.insert(out.end(), ConfigSection{o.section, {}});
        s->entries.emplace_back(o.name, o.show(c));
    }
    return out;
}

}  // namespace train
