#include "ggml-lite/io/pickle.h"

#include <cstring>
#include <unordered_map>

#include "ggml-lite/core/checked.h"

namespace gl::io {

bool PickledTensor::contiguous() const {
    int64_t expect = 1;
    for (size_t d = size.size(); d-- > 0;) {
        if (size[d] != 1 && stride[d] != expect) return false;
        expect *= size[d];
    }
    return true;
}

namespace {

// What a GLOBAL may name. Callables are implemented below as record constructors; types are
// only ever compared; inert classes produce opaque values.
enum class Global : uint8_t {
    rebuild_tensor_v2, rebuild_tensor, rebuild_parameter, rebuild_parameter_with_state, rebuild_from_type_v2,
    ordered_dict, storage_type, tensor_type, inert,
};

struct AllowedGlobal {
    const char* name;
    Global kind;
    StoredType storage = StoredType::f32;
};

const AllowedGlobal kAllowed[] = {
    {"torch._utils._rebuild_tensor_v2", Global::rebuild_tensor_v2},
    {"torch._utils._rebuild_tensor", Global::rebuild_tensor},
    {"torch._utils._rebuild_parameter", Global::rebuild_parameter},
    {"torch._utils._rebuild_parameter_with_state", Global::rebuild_parameter_with_state},
    {"torch._tensor._rebuild_from_type_v2", Global::rebuild_from_type_v2},
    {"collections.OrderedDict", Global::ordered_dict},
    {"torch.FloatStorage", Global::storage_type, StoredType::f32},
    {"torch.HalfStorage", Global::storage_type, StoredType::f16},
    {"torch.BFloat16Storage", Global::storage_type, StoredType::bf16},
    {"torch.DoubleStorage", Global::storage_type, StoredType::f64},
    {"torch.IntStorage", Global::storage_type, StoredType::i32},
    {"torch.LongStorage", Global::storage_type, StoredType::i64},
    {"torch.ByteStorage", Global::storage_type, StoredType::u8},
    {"torch.CharStorage", Global::storage_type, StoredType::i8},
    {"torch.BoolStorage", Global::storage_type, StoredType::boolean},
    {"torch.Tensor", Global::tensor_type},
    {"torch.nn.parameter.Parameter", Global::tensor_type},
    // Data classes found beside the weights in training checkpoints (global_step as a numpy
    // scalar, Lightning callback state). Nothing of them is ever called or read.
    {"numpy.core.multiarray.scalar", Global::inert},
    {"numpy.core.multiarray._reconstruct", Global::inert},
    {"numpy._core.multiarray.scalar", Global::inert},  // numpy 2 names
    {"numpy._core.multiarray._reconstruct", Global::inert},
    {"numpy.dtype", Global::inert},
    {"numpy.ndarray", Global::inert},
    {"_codecs.encode", Global::inert},
    {"builtins.set", Global::inert},
    {"__builtin__.set", Global::inert},
    {"pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint", Global::inert},
};

enum class Kind : uint8_t { none, boolean, integer, floating, string, bytes, tuple, list, dict, global, storage,
                            tensor, opaque };

struct Obj {
    Kind kind = Kind::none;
    int64_t i = 0;                 // integer, boolean, global index in kAllowed, storage/tensor index
    std::string s;                 // string, bytes, global name
    std::vector<uint32_t> items;   // tuple/list elements; dict keys and values interleaved
    int depth = 0;                 // container nesting below this object
};

class Unpickler {
public:
    Unpickler(const uint8_t* p, size_t n, const std::string& origin) : p_(p), n_(n), origin_(origin) {}
    PickledStateDict run();

private:
    [[noreturn]] void bad(const std::string& msg) const { fail(origin_, ", byte ", op_at_, ": ", msg); }
    const uint8_t* take(size_t k) {
        if (k > n_ - pos_) bad(cat("truncated pickle (needs ", k, " more bytes, ", n_ - pos_, " left)"));
        const uint8_t* q = p_ + pos_;
        pos_ += k;
        return q;
    }
    uint64_t uint_le(size_t k) {
        const uint8_t* q = take(k);
        uint64_t v = 0;
        for (size_t i = k; i-- > 0;) v = (v << 8) | q[i];
        return v;
    }
    std::string line() {
        size_t start = pos_;
        while (pos_ < n_ && p_[pos_] != '\n' && pos_ - start < 256) pos_++;
        if (pos_ >= n_ || p_[pos_] != '\n') bad("unterminated or overlong GLOBAL name");
        return std::string(reinterpret_cast<const char*>(p_ + start), p_ + pos_++ - (p_ + start));
    }

    uint32_t make(Obj o) {
        objs_.push_back(std::move(o));
        return uint32_t(objs_.size() - 1);
    }
    uint32_t make_int(int64_t v) { return make({Kind::integer, v, {}, {}, 0}); }
    void push(uint32_t id) { stack_.push_back(id); }
    uint32_t pop() {
        if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) bad("stack underflow");
        uint32_t id = stack_.back();
        stack_.pop_back();
        return id;
    }
    uint32_t top() {
        if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) bad("stack underflow");
        return stack_.back();
    }
    std::vector<uint32_t> pop_mark() {
        if (marks_.empty()) bad("no MARK to pop to");
        std::vector<uint32_t> items(stack_.begin() + std::ptrdiff_t(marks_.back()), stack_.end());
        stack_.resize(marks_.back());
        marks_.pop_back();
        return items;
    }
    uint32_t container(Kind k, std::vector<uint32_t> items) {
        Obj o{k, 0, {}, std::move(items), 0};
        for (uint32_t c : o.items) o.depth = std::max(o.depth, objs_[c].depth + 1);
        if (o.depth > kPickleMaxDepth) bad(cat("containers nest deeper than ", kPickleMaxDepth));
        return make(std::move(o));
    }
    void add_items(uint32_t target, const std::vector<uint32_t>& items) {
        Obj& t = objs_[target];
        for (uint32_t c : items) t.depth = std::max(t.depth, objs_[c].depth + 1);
        if (t.depth > kPickleMaxDepth) bad(cat("containers nest deeper than ", kPickleMaxDepth));
        t.items.insert(t.items.end(), items.begin(), items.end());
    }
    const Obj& expect(uint32_t id, Kind k, const char* what) {
        if (objs_[id].kind != k) bad(cat(what, " has the wrong type"));
        return objs_[id];
    }
    int64_t as_int(uint32_t id, const char* what) { return expect(id, Kind::integer, what).i; }
    std::vector<int64_t> int_tuple(uint32_t id, const char* what) {
        std::vector<int64_t> v;
        for (uint32_t c : expect(id, Kind::tuple, what).items) v.push_back(as_int(c, what));
        return v;
    }

    uint32_t global(const std::string& module, const std::string& name);
    uint32_t reduce(uint32_t callable, uint32_t args);
    uint32_t rebuild_tensor(const std::vector<uint32_t>& a);
    uint32_t persistent(uint32_t pid);
    PickledStateDict collect(uint32_t root);

    const uint8_t* p_;
    size_t n_, pos_ = 0, op_at_ = 0;
    const std::string& origin_;
    std::vector<Obj> objs_;
    std::vector<uint32_t> stack_;
    std::vector<size_t> marks_;
    std::unordered_map<uint32_t, uint32_t> memo_;
    std::unordered_map<std::string, size_t> storage_index_;
    PickledStateDict out_;
};

uint32_t Unpickler::global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    for (size_t i = 0; i < std::size(kAllowed); i++)
        if (full == kAllowed[i].name) return make({Kind::global, int64_t(i), full, {}, 0});
    bad(cat("refusing to unpickle GLOBAL ", full, " (a state dict holds only tensors, storages and dicts)"));
}

uint32_t Unpickler::persistent(uint32_t pid) {
    // torch: ("storage", <storage type>, key, location, numel)
    const Obj& t = expect(pid, Kind::tuple, "persistent id");
    if (t.items.size() != 5 || objs_[t.items[0]].kind != Kind::string || objs_[t.items[0]].s != "storage")
        bad("persistent id is not a torch storage reference");
    const Obj& type = objs_[t.items[1]];
    if (type.kind != Kind::global || kAllowed[type.i].kind != Global::storage_type)
        bad("persistent id names no known storage type");
    PickledStorage s;
    s.type = kAllowed[type.i].storage;
    s.key = expect(t.items[2], Kind::string, "storage key").s;
    s.numel = as_int(t.items[4], "storage size");
    if (s.numel < 0) bad(cat("storage ", s.key, " has negative size ", s.numel));
    auto [it, fresh] = storage_index_.emplace(s.key, out_.storages.size());
    if (fresh) {
        out_.storages.push_back(s);
    } else {
        const PickledStorage& old = out_.storages[it->second];
        if (old.type != s.type || old.numel != s.numel)
            bad(cat("storage ", s.key, " is declared twice with different types or sizes"));
    }
    return make({Kind::storage, int64_t(it->second), {}, {}, 0});
}

uint32_t Unpickler::rebuild_tensor(const std::vector<uint32_t>& a) {
    // (storage, storage_offset, size, stride, ...): requires_grad, hooks, metadata are ignored.
    const PickledStorage& s = out_.storages[size_t(expect(a[0], Kind::storage, "tensor storage").i)];
    PickledTensor t;
    t.storage = size_t(objs_[a[0]].i);
    t.offset = as_int(a[1], "tensor storage offset");
    t.size = int_tuple(a[2], "tensor size");
    t.stride = int_tuple(a[3], "tensor stride");
    if (t.size.size() != t.stride.size() || t.size.size() > size_t(kPickleMaxRank))
        bad(cat("tensor size and stride disagree or rank exceeds ", kPickleMaxRank));
    int64_t numel = 1, last = t.offset;
    bool ok = t.offset >= 0;
    for (size_t d = 0; d < t.size.size() && ok; d++) {
        int64_t span = 0;
        ok = t.size[d] >= 0 && t.stride[d] >= 0 && mul_ok(numel, t.size[d], &numel);
        if (ok && t.size[d] > 0) ok = mul_ok(t.size[d] - 1, t.stride[d], &span) && add_ok(last, span, &last);
    }
    if (!ok) bad("tensor has a negative or overflowing offset, size or stride");
    // Every element (offset .. last) must lie inside the storage's declared elements.
    if (numel > 0 ? last >= s.numel : t.offset > s.numel)
        bad(cat("tensor view (offset ", t.offset, ", last element ", last, ") lies outside storage ", s.key, " of ",
                s.numel, " elements"));
    out_.tensors.push_back(std::move(t));
    return make({Kind::tensor, int64_t(out_.tensors.size() - 1), {}, {}, 0});
}

uint32_t Unpickler::reduce(uint32_t callable, uint32_t args_id) {
    const Obj& f = objs_[callable];
    if (f.kind == Kind::opaque) return make({Kind::opaque, 0, {}, {}, 0});
    if (f.kind != Kind::global) bad("REDUCE on something that is not a callable");
    const std::vector<uint32_t> a = expect(args_id, Kind::tuple, "REDUCE arguments").items;
    const AllowedGlobal& g = kAllowed[f.i];
    auto need = [&](size_t lo, size_t hi) {
        if (a.size() < lo || a.size() > hi) bad(cat(g.name, " called with ", a.size(), " arguments"));
    };
    switch (g.kind) {
        case Global::rebuild_tensor_v2: need(6, 7); return rebuild_tensor(a);
        case Global::rebuild_tensor: need(4, 4); return rebuild_tensor(a);
        case Global::rebuild_parameter:
        case Global::rebuild_parameter_with_state:
            need(3, 4);
            expect(a[0], Kind::tensor, "parameter data");
            return a[0];
        case Global::rebuild_from_type_v2: {
            // (func, type, args, state): a tensor (subclass) rebuilt by func(*args).
            need(4, 4);
            const Obj& type = objs_[a[1]];
            if (type.kind != Kind::global || kAllowed[type.i].kind != Global::tensor_type)
                bad("_rebuild_from_type_v2 with a type other than torch.Tensor or Parameter");
            if (objs_[a[0]].kind != Kind::global || kAllowed[objs_[a[0]].i].kind == Global::rebuild_from_type_v2)
                bad("_rebuild_from_type_v2 with an unsupported function");
            uint32_t r = reduce(a[0], a[2]);
            expect(r, Kind::tensor, "_rebuild_from_type_v2 result");
            return r;
        }
        case Global::ordered_dict:
            if (!a.empty()) bad("collections.OrderedDict called with arguments");
            return container(Kind::dict, {});
        case Global::inert: return make({Kind::opaque, 0, {}, {}, 0});
        case Global::storage_type:
        case Global::tensor_type: bad(cat("refusing to call ", g.name));
    }
    bad("unreachable");
}

PickledStateDict Unpickler::run() {
    for (;;) {
        op_at_ = pos_;
        const uint8_t op = *take(1);
        switch (op) {
            case 0x80: {  // PROTO
                uint64_t v = uint_le(1);
                if (v < 2 || v > 5) bad(cat("unsupported pickle protocol ", v));
                break;
            }
            case 0x95: uint_le(8); break;  // FRAME: a size hint only
            case '}': push(container(Kind::dict, {})); break;
            case ']': push(container(Kind::list, {})); break;
            case ')': push(container(Kind::tuple, {})); break;
            case '(':
                if (marks_.size() >= size_t(kPickleMaxDepth)) bad(cat("more than ", kPickleMaxDepth, " open MARKs"));
                marks_.push_back(stack_.size());
                break;
            case 'X': case 0x8c: case 0x8d: case 'T': case 'U': case 'B': case 'C': case 0x8e: {
                const bool is4 = op == 'X' || op == 'T' || op == 'B', is1 = op == 0x8c || op == 'U' || op == 'C';
                uint64_t len = uint_le(is4 ? 4 : is1 ? 1 : 8);
                if (len > n_ - pos_) bad(cat("string of ", len, " bytes runs past the end of the pickle"));
                const uint8_t* q = take(size_t(len));
                const bool bytes = op == 'B' || op == 'C' || op == 0x8e;
                push(make({bytes ? Kind::bytes : Kind::string, 0, std::string(reinterpret_cast<const char*>(q), len),
                           {}, 0}));
                break;
            }
            case 'J': push(make_int(int32_t(uint32_t(uint_le(4))))); break;
            case 'K': push(make_int(int64_t(uint_le(1)))); break;
            case 'M': push(make_int(int64_t(uint_le(2)))); break;
            case 0x8a: case 0x8b: {  // LONG1, LONG4: little-endian two's complement
                uint64_t len = uint_le(op == 0x8a ? 1 : 4);
                if (len > 8) bad(cat("integer of ", len, " bytes does not fit in 64 bits"));
                uint64_t v = uint_le(size_t(len));
                if (len > 0 && len < 8 && (v >> (8 * len - 1)) & 1) v |= ~uint64_t(0) << (8 * len);
                push(make_int(int64_t(v)));
                break;
            }
            case 'G': {  // BINFLOAT, big-endian
                const uint8_t* q = take(8);
                uint64_t bits = 0;
                for (int i = 0; i < 8; i++) bits = (bits << 8) | q[i];
                Obj o{Kind::floating, 0, {}, {}, 0};
                std::memcpy(&o.i, &bits, 8);
                push(make(std::move(o)));
                break;
            }
            case 'N': push(make({Kind::none, 0, {}, {}, 0})); break;
            case 0x88: case 0x89: push(make({Kind::boolean, op == 0x88, {}, {}, 0})); break;
            case 't': push(container(Kind::tuple, pop_mark())); break;
            case 0x85: case 0x86: case 0x87: {
                std::vector<uint32_t> items(size_t(op - 0x84));
                for (size_t i = items.size(); i-- > 0;) items[i] = pop();
                push(container(Kind::tuple, std::move(items)));
                break;
            }
            case 'l': push(container(Kind::list, pop_mark())); break;
            case 'd': {
                std::vector<uint32_t> items = pop_mark();
                if (items.size() % 2) bad("DICT with an odd number of items");
                push(container(Kind::dict, std::move(items)));
                break;
            }
            case 'a': case 'e': {
                std::vector<uint32_t> items;
                if (op == 'a') items.push_back(pop()); else items = pop_mark();
                uint32_t list = top();
                expect(list, Kind::list, "APPEND target");
                add_items(list, items);
                break;
            }
            case 's': case 'u': {
                std::vector<uint32_t> items;
                if (op == 's') {
                    uint32_t v = pop(), k = pop();
                    items = {k, v};
                } else {
                    items = pop_mark();
                }
                if (items.size() % 2) bad("SETITEMS with an odd number of items");
                uint32_t dict = top();
                expect(dict, Kind::dict, "SETITEM target");
                add_items(dict, items);
                break;
            }
            case 'c': {
                std::string module = line();
                push(global(module, line()));
                break;
            }
            case 0x93: {  // STACK_GLOBAL
                uint32_t name = pop(), module = pop();
                push(global(expect(module, Kind::string, "STACK_GLOBAL module").s,
                            expect(name, Kind::string, "STACK_GLOBAL name").s));
                break;
            }
            case 'R': {
                uint32_t args = pop(), f = pop();
                push(reduce(f, args));
                break;
            }
            case 'Q': push(persistent(pop())); break;
            case 'b': {  // BUILD: state on dicts (OrderedDict._metadata), tensors and opaque values is dropped
                pop();
                Kind k = objs_[top()].kind;
                if (k != Kind::dict && k != Kind::tensor && k != Kind::opaque) bad("BUILD on an unsupported object");
                break;
            }
            case 'q': memo_[uint32_t(uint_le(1))] = top(); break;
            case 'r': memo_[uint32_t(uint_le(4))] = top(); break;
            case 0x94: memo_[uint32_t(memo_.size())] = top(); break;
            case 'h': case 'j': {
                auto it = memo_.find(uint32_t(uint_le(op == 'h' ? 1 : 4)));
                if (it == memo_.end()) bad("GET of a memo slot never PUT");
                push(it->second);
                break;
            }
            case '0': pop(); break;
            case '1': pop_mark(); break;
            case '2': push(top()); break;
            case '.': return collect(pop());
            default:
                bad(cat("unsupported pickle opcode 0x", "0123456789abcdef"[op >> 4], "0123456789abcdef"[op & 15],
                        " (not something a state dict contains)"));
        }
    }
}

PickledStateDict Unpickler::collect(uint32_t root) {
    if (objs_[root].kind != Kind::dict) bad("the pickle does not hold a dict (a state dict was expected)");
    // Lightning and the original SD checkpoints wrap the weights: {"state_dict": {...}, ...}.
    for (int hops = 0; hops < kPickleMaxDepth; hops++) {
        const Obj& d = objs_[root];
        uint32_t inner = UINT32_MAX;
        for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
            const Obj& k = objs_[d.items[i]];
            if (k.kind == Kind::string && k.s == "state_dict" && objs_[d.items[i + 1]].kind == Kind::dict)
                inner = d.items[i + 1];
        }
        if (inner == UINT32_MAX) break;
        root = inner;
    }
    PickledStateDict r;
    r.storages = out_.storages;
    std::unordered_map<std::string, size_t> at;
    const Obj& d = objs_[root];
    for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
        const Obj& k = objs_[d.items[i]];
        const Obj& v = objs_[d.items[i + 1]];
        std::string key = k.kind == Kind::string ? k.s : "<non-string key>";
        if (k.kind != Kind::string || v.kind != Kind::tensor) {
            r.skipped.push_back(key);
            continue;
        }
        PickledTensor t = out_.tensors[size_t(v.i)];
        t.name = key;
        // A view may repeat storage elements (stride 0, as expand() makes), so its element count
        // is bounded by nothing in the file: it must at least have a byte size in every dtype.
        int64_t numel = checked_numel(t.size.data(), t.size.size(), origin_, ": tensor '", key, "'");
        checked_bytes(numel, 8, origin_, ": tensor '", key, "' (a view of storage ", r.storages[t.storage].key, ")");
        auto [it, fresh] = at.emplace(key, r.tensors.size());
        if (fresh) r.tensors.push_back(std::move(t)); else r.tensors[it->second] = std::move(t);
    }
    return r;
}

}  // namespace

PickledStateDict unpickle_state_dict(const uint8_t* p, size_t n, const std::string& origin) {
    return Unpickler(p, n, origin).run();
}

const char* torch_storage_class(StoredType t) {
    for (const AllowedGlobal& g : kAllowed)
        if (g.kind == Global::storage_type && g.storage == t) return g.name;
    gl::fail("no torch storage class for ", stored_name(t));
}

}  // namespace gl::io
