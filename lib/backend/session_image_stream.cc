#include "backend/session_image_stream.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace gpupool::backend {
namespace {

constexpr char kImageMagic[8] = {'G', 'P', 'S', 'I', 'M', 'G', 0, 2};  // 2: memory_stays.
// Bounds that no real session reaches, checked before anything is allocated for what a stream announces.
constexpr uint64_t kMaxItems = uint64_t{1} << 24;   // Objects of one kind.
constexpr uint64_t kMaxName = 4096;                 // A kernel's name.
constexpr uint64_t kMaxModuleImage = uint64_t{4} << 30;
constexpr uint64_t kPieceBytes = uint64_t{1} << 20;  // How much of a long run of bytes is taken at once.

class Writer {
 public:
  explicit Writer(const ImageSink& sink) : sink_(sink) {}
  bool ok() const { return ok_; }
  void Bytes(const void* data, size_t bytes) {
    if (ok_ && bytes > 0) ok_ = sink_(static_cast<const uint8_t*>(data), bytes);
  }
  template <typename T>
  void Value(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    Bytes(&v, sizeof(v));
  }
  void Blob(const std::vector<uint8_t>& data) {
    Value<uint64_t>(data.size());
    Bytes(data.data(), data.size());
  }
  void Memory(const SessionImage::Memory& m) {
    Value(m.address);
    Value(m.bytes);
    Blob(m.data);
  }

 private:
  const ImageSink& sink_;
  bool ok_ = true;
};

class Reader {
 public:
  explicit Reader(const ImageSource& source) : source_(source) {}
  const std::string& error() const { return error_; }
  bool ok() const { return error_.empty(); }
  void Fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }
  void Bytes(void* data, size_t bytes) {
    if (ok() && bytes > 0 && !source_(static_cast<uint8_t*>(data), bytes)) Fail("the stream ends early");
  }
  template <typename T>
  T Value() {
    T v{};
    Bytes(&v, sizeof(v));
    return v;
  }
  // A count of `what`, at most kMaxItems.
  uint64_t Count(const char* what) {
    const uint64_t n = Value<uint64_t>();
    if (ok() && n > kMaxItems) Fail(std::string("it announces ") + std::to_string(n) + " " + what);
    return ok() ? n : 0;
  }
  // `most` bounds what a length may announce; the bytes are then taken a piece at a time, so that what is allocated
  // follows what arrives, not what the stream claims (`most` may itself come from the stream: the window's size).
  void Blob(std::vector<uint8_t>* out, uint64_t most, const char* what) {
    const uint64_t n = Value<uint64_t>();
    if (ok() && n > most) Fail(std::string("it announces ") + std::to_string(n) + " bytes of " + what);
    out->clear();
    for (uint64_t left = n; ok() && left > 0;) {
      const size_t piece = static_cast<size_t>(std::min<uint64_t>(left, kPieceBytes));
      const size_t at = out->size();
      out->resize(at + piece);
      Bytes(out->data() + at, piece);
      left -= piece;
    }
  }
  // `bytes_left_out`: the memory stays where it is (SessionImage::memory_stays): none of its bytes travel.
  SessionImage::Memory Memory(uint64_t most, const char* what, bool bytes_left_out = false) {
    SessionImage::Memory m;
    m.address = Value<uint64_t>();
    m.bytes = Value<uint64_t>();
    Blob(&m.data, most, what);
    if (ok() && m.data.size() != (bytes_left_out ? 0 : m.bytes)) {
      Fail(std::string(what) + (bytes_left_out ? " with bytes where its memory stays" : " whose bytes are not its size"));
    }
    if (ok() && bytes_left_out && m.bytes > most) Fail(std::string(what) + " larger than its window");
    return m;
  }

 private:
  const ImageSource& source_;
  std::string error_;
};

// Boilerplate by nature: a TextureSpec field by field, for writing and reading alike (its padding never travels).
template <typename Spec, typename Visit>
void TextureSpecFields(Spec& t, Visit visit) {
  visit(t.surface);
  visit(t.resource);
  visit(t.dims);
  visit(t.format);
  visit(t.channels);
  visit(t.address);
  visit(t.pitch);
  visit(t.slice_pitch);
  visit(t.width);
  visit(t.height);
  visit(t.depth);
  visit(t.layers);
  for (auto& mode : t.address_mode) visit(mode);
  visit(t.filter_mode);
  visit(t.flags);
  for (auto& border : t.border) visit(border);
}

// Each list: its count, then its items, in this order.
template <typename Item, typename Write>
void WriteList(Writer& w, const std::vector<Item>& items, Write write) {
  w.Value<uint64_t>(items.size());
  for (const Item& item : items) write(item);
}
template <typename Item, typename Read>
void ReadList(Reader& r, const char* what, std::vector<Item>* items, Read read) {
  const uint64_t n = r.Count(what);
  items->clear();
  for (uint64_t i = 0; i < n && r.ok(); ++i) items->push_back(read());
}

}  // namespace

// Boilerplate by nature: each record field by field, in the order ReadSessionImage reads them.
CallStatus WriteSessionImage(const SessionImage& image, const ImageSink& sink) {
  Writer w(sink);
  w.Bytes(kImageMagic, sizeof(kImageMagic));
  w.Value(image.window_base);
  w.Value(image.window_bytes);
  w.Value(static_cast<uint64_t>(image.memory_stays));
  WriteList(w, image.allocations, [&](const SessionImage::Memory& m) { w.Memory(m); });
  WriteList(w, image.modules, [&](const SessionImage::Module& m) {
    w.Value(m.handle);
    w.Blob(m.image);
    WriteList(w, m.variables, [&](const SessionImage::Memory& v) { w.Memory(v); });
  });
  WriteList(w, image.functions, [&](const SessionImage::Function& f) {
    w.Value(f.handle);
    w.Value(f.module);
    w.Blob(std::vector<uint8_t>(f.name.begin(), f.name.end()));
    WriteList(w, f.attributes, [&](const std::pair<int, int>& a) {
      w.Value<int32_t>(a.first);
      w.Value<int32_t>(a.second);
    });
  });
  WriteList(w, image.globals, [&](const SessionImage::Global& g) {
    w.Value(g.address);
    w.Value(g.bytes);
    w.Value(g.module);
  });
  WriteList(w, image.streams, [&](uint64_t h) { w.Value(h); });
  WriteList(w, image.events, [&](uint64_t h) { w.Value(h); });
  WriteList(w, image.textures, [&](const SessionImage::Texture& t) {
    w.Value(t.handle);
    TextureSpecFields(t.spec, [&](const auto& field) {
      if constexpr (std::is_same_v<std::remove_cv_t<std::remove_reference_t<decltype(field)>>, bool>) {
        w.Value<uint8_t>(field ? 1 : 0);
      } else {
        w.Value(field);
      }
    });
  });
  WriteList(w, image.reservations, [&](const SessionImage::Reservation& r) {
    w.Value(r.address);
    w.Value(r.bytes);
  });
  WriteList(w, image.physical, [&](const SessionImage::Physical& p) {
    w.Value(p.handle);
    w.Value(p.bytes);
    w.Value<uint8_t>(p.released ? 1 : 0);
  });
  WriteList(w, image.mappings, [&](const SessionImage::Mapping& m) {
    w.Value(m.address);
    w.Value(m.bytes);
    w.Value(m.memory);
    w.Value(m.offset);
    w.Blob(m.data);
  });
  if (!w.ok()) return CallStatus(cu::kUnknown, "writing the session image: the stream refused its bytes");
  return CallStatus::Ok();
}

CallStatus ReadSessionImage(const ImageSource& source, SessionImage* image) {
  Reader r(source);
  char magic[sizeof(kImageMagic)] = {};
  r.Bytes(magic, sizeof(magic));
  if (r.ok() && std::memcmp(magic, kImageMagic, sizeof(magic)) != 0) {
    r.Fail("it is not a session image of this version");
  }
  SessionImage read;
  read.window_base = r.Value<uint64_t>();
  read.window_bytes = r.Value<uint64_t>();
  const uint64_t stays = r.Value<uint64_t>();
  if (r.ok() && stays > 1) r.Fail("its memory_stays is neither 0 nor 1");
  read.memory_stays = stays == 1;
  // No piece of device memory can be larger than the window it lies in.
  const uint64_t most = read.window_bytes;
  // Boilerplate by nature: each record field by field, in the order WriteSessionImage writes them.
  ReadList(r, "allocations", &read.allocations,
           [&] { return r.Memory(most, "an allocation", /*bytes_left_out=*/read.memory_stays); });
  ReadList(r, "modules", &read.modules, [&] {
    SessionImage::Module m;
    m.handle = r.Value<uint64_t>();
    r.Blob(&m.image, kMaxModuleImage, "a module's image");
    ReadList(r, "module variables", &m.variables, [&] { return r.Memory(most, "a module variable"); });
    return m;
  });
  ReadList(r, "functions", &read.functions, [&] {
    SessionImage::Function f;
    f.handle = r.Value<uint64_t>();
    f.module = r.Value<uint64_t>();
    std::vector<uint8_t> name;
    r.Blob(&name, kMaxName, "a function's name");
    f.name.assign(name.begin(), name.end());
    ReadList(r, "function attributes", &f.attributes, [&] {
      const int32_t attribute = r.Value<int32_t>();
      return std::pair<int, int>(attribute, r.Value<int32_t>());
    });
    return f;
  });
  ReadList(r, "variables", &read.globals, [&] {
    SessionImage::Global g;
    g.address = r.Value<uint64_t>();
    g.bytes = r.Value<uint64_t>();
    g.module = r.Value<uint64_t>();
    return g;
  });
  ReadList(r, "streams", &read.streams, [&] { return r.Value<uint64_t>(); });
  ReadList(r, "events", &read.events, [&] { return r.Value<uint64_t>(); });
  ReadList(r, "textures", &read.textures, [&] {
    SessionImage::Texture t;
    t.handle = r.Value<uint64_t>();
    // Any values make a TextureSpec; the restore checks it as it checks a client's.
    TextureSpecFields(t.spec, [&](auto& field) {
      using Field = std::remove_reference_t<decltype(field)>;
      if constexpr (std::is_same_v<Field, bool>) {
        field = r.Value<uint8_t>() != 0;  // A byte, not a bool: a bool's other bit patterns are undefined.
      } else {
        field = r.Value<Field>();
      }
    });
    return t;
  });
  ReadList(r, "reservations", &read.reservations, [&] {
    SessionImage::Reservation v;
    v.address = r.Value<uint64_t>();
    v.bytes = r.Value<uint64_t>();
    return v;
  });
  ReadList(r, "physical memories", &read.physical, [&] {
    SessionImage::Physical p;
    p.handle = r.Value<uint64_t>();
    p.bytes = r.Value<uint64_t>();
    p.released = r.Value<uint8_t>() != 0;
    return p;
  });
  ReadList(r, "mappings", &read.mappings, [&] {
    SessionImage::Mapping m;
    m.address = r.Value<uint64_t>();
    m.bytes = r.Value<uint64_t>();
    m.memory = r.Value<uint64_t>();
    m.offset = r.Value<uint64_t>();
    r.Blob(&m.data, most, "a mapping");
    if (r.ok() && m.data.size() != m.bytes) r.Fail("a mapping whose bytes are not its size");
    return m;
  });
  if (!r.ok()) return CallStatus(cu::kInvalidValue, "reading a session image: " + r.error());
  *image = std::move(read);
  return CallStatus::Ok();
}

CallStatus ReadSessionImage(const uint8_t* data, size_t bytes, SessionImage* image) {
  size_t at = 0;
  return ReadSessionImage(
      [data, bytes, &at](uint8_t* out, size_t n) {
        if (n > bytes - at) return false;
        std::memcpy(out, data + at, n);
        at += n;
        return true;
      },
      image);
}

}  // namespace gpupool::backend
