// sentencepiece: C linkage around sentencepiece::SentencePieceProcessor (see sentencepiece.h).
#include "sentencepiece.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>
#include <string>
#include <vector>

// Texts longer than this go to libsentencepiece in parts, where that gives the same ids: on one
// long text (a whole file as a document) its BPE needs ~100 bytes of memory per byte of text and
// runs several times slower than on parts of a few KB.
static const size_t kSpmPart = 1 << 12;

struct SpmModel {
    sentencepiece::SentencePieceProcessor sp;
    // The same model without the dummy prefix, for the parts after the first; null when texts
    // cannot be cut (see spm_can_cut).
    std::unique_ptr<sentencepiece::SentencePieceProcessor> rest;
};

// ---- the protobuf wire format, enough to read and patch a ModelProto's specs ----

static bool spm_varint(std::string_view &s, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64 && !s.empty(); shift += 7) {
        const uint8_t c = static_cast<uint8_t>(s[0]);
        s.remove_prefix(1);
        *v |= static_cast<uint64_t>(c & 0x7F) << shift;
        if (!(c & 0x80)) return true;
    }
    return false;
}

static void spm_put_varint(std::string &out, uint64_t v) {
    for (; v >= 0x80; v >>= 7) out += static_cast<char>(v | 0x80);
    out += static_cast<char>(v);
}

// One field of message s: its number, and its value (varints) or payload (length-delimited).
struct SpmField {
    uint32_t number, wire;
    uint64_t value;
    std::string_view payload, raw;  // raw: the whole field as encoded
};

static bool spm_next_field(std::string_view &s, SpmField *f) {
    const char *begin = s.data();
    uint64_t tag, n;
    if (!spm_varint(s, &tag)) return false;
    f->number = static_cast<uint32_t>(tag >> 3);
    f->wire = tag & 7;
    f->value = 0;
    f->payload = {};
    switch (f->wire) {
    case 0:
        if (!spm_varint(s, &f->value)) return false;
        break;
    case 1:
    case 5:
        n = f->wire == 1 ? 8 : 4;
        if (s.size() < n) return false;
        s.remove_prefix(n);
        break;
    case 2:
        if (!spm_varint(s, &n) || s.size() < n) return false;
        f->payload = s.substr(0, n);
        s.remove_prefix(n);
        break;
    default:
        return false;
    }
    f->raw = std::string_view(begin, static_cast<size_t>(s.data() - begin));
    return true;
}

// Whether a text may be cut before a space that follows another character, its parts encoded
// alone (the first with the dummy prefix, the others without) giving the ids of the whole: BPE,
// normalization that maps each character on its own (no rule table, spaces kept and escaped as
// '▁'), and no piece a merge could make across such a cut (none holds a character before a '▁').
static bool spm_can_cut(const SpmModel *m, const std::string &proto) {
    std::string_view s(proto), spec;
    SpmField f;
    uint64_t model_type = 1;  // the defaults of the proto: unigram, ...
    bool suffix = false, charsmap = false, remove_extra = true, escape = true;
    while (!s.empty()) {
        if (!spm_next_field(s, &f)) return false;
        if (f.wire != 2 || (f.number != 2 && f.number != 3)) continue;
        for (spec = f.payload; !spec.empty();) {
            SpmField g;
            if (!spm_next_field(spec, &g)) return false;
            if (f.number == 2 && g.number == 3) model_type = g.value;            // TrainerSpec.model_type
            if (f.number == 2 && g.number == 24) suffix = g.value;               // .treat_whitespace_as_suffix
            if (f.number == 3 && g.number == 2) charsmap = !g.payload.empty();   // NormalizerSpec.precompiled_charsmap
            if (f.number == 3 && g.number == 4) remove_extra = g.value;          // .remove_extra_whitespaces
            if (f.number == 3 && g.number == 5) escape = g.value;                // .escape_whitespaces
        }
    }
    if (model_type != 2 || suffix || charsmap || remove_extra || !escape) return false;
    static const std::string space = "\xE2\x96\x81";
    if (m->sp.IsUnknown(m->sp.PieceToId(space))) return false;
    for (int id = 0; id < m->sp.GetPieceSize(); id++) {
        if (m->sp.IsControl(id) || m->sp.IsUnknown(id) || m->sp.IsByte(id)) continue;
        const std::string &piece = m->sp.IdToPiece(id);
        for (size_t k = piece.find(space, 1); k != std::string::npos; k = piece.find(space, k + 1))
            if (k < 3 || piece.compare(k - 3, 3, space) != 0) return false;
    }
    return true;
}

// The model with NormalizerSpec.add_dummy_prefix false (a repeated scalar field: the last wins).
static std::string spm_without_prefix(const std::string &proto) {
    std::string out;
    std::string_view s(proto);
    SpmField f;
    bool patched = false;
    const std::string off("\x18\x00", 2);  // field 3, varint 0
    while (!s.empty() && spm_next_field(s, &f)) {
        if (f.number == 3 && f.wire == 2) {
            out += '\x1A';  // field 3, length-delimited
            spm_put_varint(out, f.payload.size() + off.size());
            out.append(f.payload.data(), f.payload.size());
            out += off;
            patched = true;
        } else {
            out.append(f.raw.data(), f.raw.size());
        }
    }
    if (!patched) out += '\x1A', spm_put_varint(out, off.size()), out += off;
    return out;
}

static void spm_error(char *err, size_t errlen, const sentencepiece::util::Status &status) {
    std::string why = status.ToString();
    while (!why.empty() && (why.back() == ' ' || why.back() == '\n')) why.pop_back();
    std::snprintf(err, errlen, "%s", why.c_str());
}

extern "C" SpmModel *spm_load(const char *path, char *err, size_t errlen) {
    SpmModel *m = new (std::nothrow) SpmModel;
    if (!m) {
        std::snprintf(err, errlen, "out of memory");
        return nullptr;
    }
    const auto status = m->sp.Load(path);
    if (!status.ok()) {
        spm_error(err, errlen, status);
        delete m;
        return nullptr;
    }
    const std::string proto = m->sp.serialized_model_proto();
    if (spm_can_cut(m, proto)) {
        m->rest.reset(new sentencepiece::SentencePieceProcessor);
        if (!m->rest->LoadFromSerializedProto(spm_without_prefix(proto)).ok()) m->rest.reset();
    }
    return m;
}

extern "C" void spm_free(SpmModel *m) { delete m; }
extern "C" int spm_vocab_size(const SpmModel *m) { return m->sp.GetPieceSize(); }
extern "C" int spm_bos(const SpmModel *m) { return m->sp.bos_id(); }
extern "C" int spm_eos(const SpmModel *m) { return m->sp.eos_id(); }
extern "C" int spm_unk(const SpmModel *m) { return m->sp.unk_id(); }
extern "C" int spm_is_byte(const SpmModel *m, int id) { return m->sp.IsByte(id); }
extern "C" int spm_is_control(const SpmModel *m, int id) { return m->sp.IsControl(id); }
extern "C" int spm_is_unknown(const SpmModel *m, int id) { return m->sp.IsUnknown(id); }

extern "C" const char *spm_piece(const SpmModel *m, int id, size_t *len) {
    const std::string &piece = m->sp.IdToPiece(id);
    *len = piece.size();
    return piece.data();
}

extern "C" long spm_encode(const SpmModel *m, const char *text, size_t n, int32_t **ids, size_t *len, size_t *cap,
                           char *err, size_t errlen) {
    std::vector<int> out, part;
    try {
        for (size_t start = 0, end; start < n; start = end) {
            end = n;
            // cut before a space (' ' or '▁') that follows another character
            for (size_t k = start + kSpmPart; m->rest && k < n; k++) {
                const bool space = text[k] == ' ' || (n - k >= 3 && !std::memcmp(text + k, "\xE2\x96\x81", 3));
                const bool after_space = text[k - 1] == ' ' || (k >= 3 && !std::memcmp(text + k - 3, "\xE2\x96\x81", 3));
                if (space && !after_space) {
                    end = k;
                    break;
                }
            }
            part.clear();
            const auto status = (start ? *m->rest : m->sp).Encode(std::string_view(text + start, end - start), &part);
            if (!status.ok()) {
                spm_error(err, errlen, status);
                return -1;
            }
            out.insert(out.end(), part.begin(), part.end());
        }
    } catch (const std::bad_alloc &) {
        std::snprintf(err, errlen, "out of memory tokenizing %zu bytes of text", n);
        return -1;
    }
    if (*len + out.size() > *cap) {
        size_t want = *cap ? *cap : 1024;
        while (want < *len + out.size()) want *= 2;
        int32_t *grown = static_cast<int32_t *>(std::realloc(*ids, want * sizeof **ids));
        if (!grown) {
            std::snprintf(err, errlen, "out of memory growing the token buffer to %zu ids", want);
            return -1;
        }
        *ids = grown;
        *cap = want;
    }
    for (size_t i = 0; i < out.size(); i++) (*ids)[*len + i] = out[i];
    *len += out.size();
    return static_cast<long>(out.size());
}

extern "C" char *spm_decode(const SpmModel *m, const int32_t *ids, size_t n, size_t *len, char *err, size_t errlen) {
    std::string text;
    sentencepiece::util::Status status;
    try {
        status = m->sp.Decode(std::vector<int>(ids, ids + n), &text);
    } catch (const std::bad_alloc &) {
        std::snprintf(err, errlen, "out of memory decoding %zu ids", n);
        return nullptr;
    }
    if (!status.ok()) {
        spm_error(err, errlen, status);
        return nullptr;
    }
    char *out = static_cast<char *>(std::malloc(text.size() + 1));
    if (!out) {
        std::snprintf(err, errlen, "out of memory decoding %zu ids", n);
        return nullptr;
    }
    std::memcpy(out, text.data(), text.size());
    out[text.size()] = '\0';
    *len = text.size();
    return out;
}
