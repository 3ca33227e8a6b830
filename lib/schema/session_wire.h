// The session calls of session_calls.h on the wire: Wire<calls::X> converts the call's plain arguments and
// results to and from its Cap'n Proto messages, and every reply's CallStatus to and from session.capnp's (WriteStatus,
// ReadStatus: the one place a call's status takes its wire shape). Used by the client (to send) and the session
// server (to serve); nothing here is written per call.
#ifndef GPUPOOL_SCHEMA_SESSION_WIRE_H_
#define GPUPOOL_SCHEMA_SESSION_WIRE_H_

#include <optional>
#include <string>
#include <vector>

#include "schema/session_calls.h"
#include "session.capnp.h"

namespace gpupool::session {

// Plain value -> what a Cap'n Proto setter takes.
inline uint64_t ToWire(uint64_t v) { return v; }
inline uint32_t ToWire(uint32_t v) { return v; }
inline uint8_t ToWire(uint8_t v) { return v; }
inline int32_t ToWire(int32_t v) { return v; }
inline float ToWire(float v) { return v; }
template <typename Tag>
uint64_t ToWire(Id<Tag> v) {
  return v.value;
}
inline capnp::Text::Reader ToWire(const std::string& v) { return capnp::Text::Reader(v.data(), v.size()); }
inline capnp::Data::Reader ToWire(ByteView v) { return capnp::Data::Reader(v.data, v.size); }

// Cap'n Proto reader -> plain value.
template <typename T>
void FromWire(T v, T* out) {
  *out = v;
}
template <typename Tag>
void FromWire(uint64_t v, Id<Tag>* out) {
  out->value = v;
}
inline void FromWire(capnp::Text::Reader v, std::string* out) { out->assign(v.begin(), v.size()); }
inline void FromWire(capnp::Data::Reader v, ByteView* out) { *out = ByteView{v.begin(), v.size()}; }
inline void FromWire(capnp::Data::Reader v, ReplyBytes* out) {
  out->data = v.begin();
  out->size = v.size();
}
inline void FromWire(wire::Dim3::Reader v, Dim3* out) { *out = Dim3{v.getX(), v.getY(), v.getZ()}; }
inline void FromWire(capnp::List<wire::ParamInfo>::Reader v, std::vector<KernelParam>* out) {
  out->clear();
  for (auto p : v) out->push_back({p.getOffset(), p.getSize()});
}
inline void FromWire(wire::DeviceProps::Reader d, DeviceInfo* out) {
  out->name = d.getName();
  out->total_memory = d.getTotalMemory();
  out->cc_major = d.getCcMajor();
  out->cc_minor = d.getCcMinor();
  auto uuid = d.getUuid();
  for (size_t i = 0; i < 16; ++i) out->uuid[i] = i < uuid.size() ? uuid[i] : 0;
  out->pci_domain = d.getPciDomain();
  out->pci_bus = d.getPciBus();
  out->pci_device = d.getPciDevice();
  out->emulated = d.getEmulated();
  out->attributes.clear();
  for (auto a : d.getAttributes()) out->attributes[a.getId()] = a.getValue();
}

// Plain value -> a Cap'n Proto struct field (Fill(builder.initX(), v)).
inline void Fill(wire::Dim3::Builder b, const Dim3& v) {
  b.setX(v.x);
  b.setY(v.y);
  b.setZ(v.z);
}
inline void Fill(capnp::List<wire::ParamInfo>::Builder b, const std::vector<KernelParam>& v) {
  for (unsigned i = 0; i < b.size(); ++i) {
    b[i].setOffset(v[i].offset);
    b[i].setSize(v[i].size);
  }
}
// Boilerplate by nature, as every Fill here: field by field into the message.
inline void Fill(wire::DeviceProps::Builder b, const DeviceInfo& v) {
  b.setName(v.name);
  b.setTotalMemory(v.total_memory);
  b.setCcMajor(v.cc_major);
  b.setCcMinor(v.cc_minor);
  b.setUuid(kj::arrayPtr(v.uuid, 16));
  b.setPciDomain(v.pci_domain);
  b.setPciBus(v.pci_bus);
  b.setPciDevice(v.pci_device);
  b.setEmulated(v.emulated);
  auto list = b.initAttributes(static_cast<unsigned>(v.attributes.size()));
  unsigned i = 0;
  for (const auto& [id, value] : v.attributes) {
    list[i].setId(id);
    list[i].setValue(value);
    ++i;
  }
}

// A call's status on the wire, both ways: the one place where a CallStatus takes session.capnp's shape.
inline void WriteStatus(const CallStatus& s, wire::CallStatus::Builder b) {
  b.setCode(s.code());
  if (!s.ok()) b.setMessage(s.message());
}
inline CallStatus ReadStatus(wire::CallStatus::Reader r) {
  if (r.getCode() == cu::kSuccess) return CallStatus::Ok();
  return CallStatus(r.getCode(), r.getMessage().cStr());
}

// How each kind is written to (W) and read from (R) a message; P prepares a server's reply before the handler.
#define GP_SESSION_W_SET(b, Name, v) b.set##Name(::gpupool::session::ToWire(v));
#define GP_SESSION_W_U8 GP_SESSION_W_SET
#define GP_SESSION_W_U32 GP_SESSION_W_SET
#define GP_SESSION_W_U64 GP_SESSION_W_SET
#define GP_SESSION_W_I32 GP_SESSION_W_SET
#define GP_SESSION_W_F32 GP_SESSION_W_SET
#define GP_SESSION_W_TEXT GP_SESSION_W_SET
#define GP_SESSION_W_DATA GP_SESSION_W_SET
#define GP_SESSION_W_STREAM GP_SESSION_W_SET
#define GP_SESSION_W_EVENT GP_SESSION_W_SET
#define GP_SESSION_W_MODULE GP_SESSION_W_SET
#define GP_SESSION_W_FUNCTION GP_SESSION_W_SET
#define GP_SESSION_W_PHYSICAL GP_SESSION_W_SET
#define GP_SESSION_W_DIM3(b, Name, v) ::gpupool::session::Fill(b.init##Name(), v);
#define GP_SESSION_W_OPT_DIM3(b, Name, v) \
  if (v) ::gpupool::session::Fill(b.init##Name(), *v);
#define GP_SESSION_W_PARAMS(b, Name, v) ::gpupool::session::Fill(b.init##Name(static_cast<unsigned>(v.size())), v);
#define GP_SESSION_W_PROPS(b, Name, v) ::gpupool::session::Fill(b.init##Name(), v);
#define GP_SESSION_W_REPLY_DATA(b, Name, v)  // Written in place through `reserve`.

#define GP_SESSION_R_GET(r, Name, v) ::gpupool::session::FromWire(r.get##Name(), &v);
#define GP_SESSION_R_U8 GP_SESSION_R_GET
#define GP_SESSION_R_U32 GP_SESSION_R_GET
#define GP_SESSION_R_U64 GP_SESSION_R_GET
#define GP_SESSION_R_I32 GP_SESSION_R_GET
#define GP_SESSION_R_F32 GP_SESSION_R_GET
#define GP_SESSION_R_TEXT GP_SESSION_R_GET
#define GP_SESSION_R_DATA GP_SESSION_R_GET
#define GP_SESSION_R_STREAM GP_SESSION_R_GET
#define GP_SESSION_R_EVENT GP_SESSION_R_GET
#define GP_SESSION_R_MODULE GP_SESSION_R_GET
#define GP_SESSION_R_FUNCTION GP_SESSION_R_GET
#define GP_SESSION_R_PHYSICAL GP_SESSION_R_GET
#define GP_SESSION_R_DIM3 GP_SESSION_R_GET
#define GP_SESSION_R_PARAMS GP_SESSION_R_GET
#define GP_SESSION_R_PROPS GP_SESSION_R_GET
#define GP_SESSION_R_REPLY_DATA GP_SESSION_R_GET
#define GP_SESSION_R_OPT_DIM3(r, Name, v)                        \
  if (r.has##Name()) {                                           \
    ::gpupool::session::Dim3 d;                                  \
    ::gpupool::session::FromWire(r.get##Name(), &d);             \
    v = d;                                                       \
  } else {                                                       \
    v.reset();                                                   \
  }

#define GP_SESSION_P_REPLY_DATA(b, Name, v) \
  v.reserve = [b](size_t n) mutable -> uint8_t* { return b.init##Name(static_cast<unsigned>(n)).begin(); };

template <typename Call>
struct Wire;

#define GP_SESSION_WRITE_FIELD(kind, name, Name) GP_SESSION_W_##kind(b, Name, v.name)
#define GP_SESSION_READ_FIELD(kind, name, Name) GP_SESSION_R_##kind(r, Name, v.name)
#define GP_SESSION_PREPARE_FIELD(kind, name, Name) GP_SESSION_P_##kind(b, Name, v.name)
#define GP_SESSION_P_U8(b, Name, v)
#define GP_SESSION_P_U32(b, Name, v)
#define GP_SESSION_P_U64(b, Name, v)
#define GP_SESSION_P_I32(b, Name, v)
#define GP_SESSION_P_F32(b, Name, v)
#define GP_SESSION_P_TEXT(b, Name, v)
#define GP_SESSION_P_DATA(b, Name, v)
#define GP_SESSION_P_STREAM(b, Name, v)
#define GP_SESSION_P_EVENT(b, Name, v)
#define GP_SESSION_P_MODULE(b, Name, v)
#define GP_SESSION_P_FUNCTION(b, Name, v)
#define GP_SESSION_P_PHYSICAL(b, Name, v)
#define GP_SESSION_P_DIM3(b, Name, v)
#define GP_SESSION_P_OPT_DIM3(b, Name, v)
#define GP_SESSION_P_PARAMS(b, Name, v)
#define GP_SESSION_P_PROPS(b, Name, v)
#define GP_SESSION_SKIP(kind, name, Name)

// Boilerplate by nature: one converter per direction of args and results, each a field list expanded alike.
#define GP_SESSION_WIRE(Name, method, ordinal, mode, doc)                                                   \
  template <>                                                                                              \
  struct Wire<calls::Name> {                                                                               \
    using Args = calls::Name::Args;                                                                        \
    using Results = calls::Name::Results;                                                                  \
    using Params = wire::Session::Name##Params;                                                            \
    using ResultsStruct = wire::Session::Name##Results;                                                    \
    using Context = capnp::CallContext<wire::Session::Name##Params, wire::Session::Name##Results>;          \
    static auto Request(wire::Session::Client& s) { return s.method##Request(); }                         \
    static void WriteArgs(const Args& v, wire::Session::Name##Params::Builder b) {                        \
      (void)v, (void)b;                                                                                    \
      GP_SESSION_FIELDS_##Name(GP_SESSION_WRITE_FIELD, GP_SESSION_SKIP)                                    \
    }                                                                                                      \
    static void ReadArgs(wire::Session::Name##Params::Reader r, Args& v) {                                 \
      (void)v, (void)r;                                                                                    \
      GP_SESSION_FIELDS_##Name(GP_SESSION_READ_FIELD, GP_SESSION_SKIP)                                     \
    }                                                                                                      \
    static void PrepareResults(wire::Session::Name##Results::Builder b, Results& v) {                     \
      (void)v, (void)b;                                                                                    \
      GP_SESSION_FIELDS_##Name(GP_SESSION_SKIP, GP_SESSION_PREPARE_FIELD)                                  \
    }                                                                                                      \
    static void WriteResults(const Results& v, wire::Session::Name##Results::Builder b) {                 \
      (void)v, (void)b;                                                                                    \
      GP_SESSION_FIELDS_##Name(GP_SESSION_SKIP, GP_SESSION_WRITE_FIELD)                                    \
    }                                                                                                      \
    static void ReadResults(wire::Session::Name##Results::Reader r, Results& v) {                          \
      (void)v, (void)r;                                                                                    \
      GP_SESSION_FIELDS_##Name(GP_SESSION_SKIP, GP_SESSION_READ_FIELD)                                     \
    }                                                                                                      \
  };
GP_SESSION_CALLS(GP_SESSION_WIRE)
#undef GP_SESSION_WIRE

}  // namespace gpupool::session

#endif  // GPUPOOL_SCHEMA_SESSION_WIRE_H_
