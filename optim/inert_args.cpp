// The keyword arguments of torch's and bitsandbytes' optimizer classes that choose an implementation
// (foreach, fused, paging) or keep a feature off (amsgrad=False, percentile_clipping=100): kohya users
// pass them in --optimizer_args, and the update here is the same whatever they say, within the values
// each check allows.
#include "optim/descriptor.h"

namespace optim {

namespace {

const char* check_false(const ArgValue& v) { return v.none || v.x[0] == 0.0 ? nullptr : "only False is supported"; }
const char* check_true(const ArgValue& v) { return v.x[0] != 0.0 ? nullptr : "only True is supported"; }
const char* check_100(const ArgValue& v) {
    return v.x[0] == 100.0 ? nullptr : "only 100 (no clipping by gradient-norm percentile) is supported";
}
const char* check_4096(const ArgValue& v) {
    return v.x[0] == 4096.0 ? nullptr : "only 4096 is supported (tensors below it keep 32-bit state)";
}
const char* check_32(const ArgValue& v) { return v.x[0] == 32.0 ? nullptr : "only 32, bitsandbytes' default, is supported"; }
const char* check_none(const ArgValue& v) { return v.none ? nullptr : "only None is supported"; }

constexpr const char* kKernel = "chooses torch's kernel; the step here is one graph op either way";
constexpr const char* kOff = "keeps that feature off, as here";
constexpr const char* kPaged = "bitsandbytes' paging; the plan here holds the state on the device";

std::vector<ArgDef> append(std::vector<ArgDef> args, std::initializer_list<ArgDef> more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
}

}  // namespace

std::vector<ArgDef> torch_inert_args(std::vector<ArgDef> args, bool with_amsgrad) {
    args = append(std::move(args), {
        {"foreach", ArgType::flag_or_none, "None", nullptr, {}, kKernel},
        {"fused", ArgType::flag_or_none, "None", nullptr, {}, kKernel},
        {"capturable", ArgType::flag, "False", nullptr, {}, kKernel},
        {"differentiable", ArgType::flag, "False", check_false, {}, kOff},
        {"maximize", ArgType::flag, "False", check_false, {}, kOff},
    });
    if (with_amsgrad) args = append(std::move(args), {{"amsgrad", ArgType::flag, "False", check_false, {}, kOff}});
    return args;
}

std::vector<ArgDef> bnb_inert_args(std::vector<ArgDef> args) {
    return append(std::move(args), {
        {"amsgrad", ArgType::flag, "False", check_false, {}, kOff},
        {"percentile_clipping", ArgType::number, "100", check_100, {}, kOff},
        {"block_wise", ArgType::flag, "True", check_true, {}, "bitsandbytes' block-wise quantisation, as here"},
        {"min_8bit_size", ArgType::number, "4096", check_4096, {}, "bitsandbytes' default, as here"},
        {"optim_bits", ArgType::number, "32", check_32, {}, "bitsandbytes' default, as here"},
        {"args", ArgType::number_or_none, "None", check_none, {}, kOff},
        {"is_paged", ArgType::flag, "False", nullptr, {}, kPaged},
    });
}

}  // namespace optim
