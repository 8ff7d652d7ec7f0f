#include "models/family.h"

namespace models {

namespace {

// Every family, in the order family_names() lists them: a new family adds its getter here.
const Family* const* all_families(size_t& n) {
    static const Family* const families[] = {&sd15_family(), &sd2_family()};
    n = std::size(families);
    return families;
}

}  // namespace

const Family* find_family(std::string_view name) {
    size_t n = 0;
    const Family* const* f = all_families(n);
    for (size_t i = 0; i < n; i++)
        if (f[i]->name() == name) return f[i];
    return nullptr;
}

std::vector<std::string> family_names() {
    size_t n = 0;
    const Family* const* f = all_families(n);
    std::vector<std::string> names;
    for (size_t i = 0; i < n; i++) names.emplace_back(f[i]->name());
    return names;
}

}  // namespace models
