// Writes session.capnp: the value types of session.capnp.in followed by `interface Session`, generated from the
// calls' one declaration (session_calls.h). Run by the build; usage: session_schema BASE OUTPUT.
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "schema/session_calls.h"

namespace {

#define GP_CAPNP_U8 "UInt8"
#define GP_CAPNP_U32 "UInt32"
#define GP_CAPNP_U64 "UInt64"
#define GP_CAPNP_I32 "Int32"
#define GP_CAPNP_F32 "Float32"
#define GP_CAPNP_TEXT "Text"
#define GP_CAPNP_DATA "Data"
#define GP_CAPNP_DIM3 "Dim3"
#define GP_CAPNP_OPT_DIM3 "Dim3"
#define GP_CAPNP_STREAM "UInt64"
#define GP_CAPNP_EVENT "UInt64"
#define GP_CAPNP_MODULE "UInt64"
#define GP_CAPNP_FUNCTION "UInt64"
#define GP_CAPNP_PHYSICAL "UInt64"
#define GP_CAPNP_PARAMS "List(ParamInfo)"
#define GP_CAPNP_PROPS "DeviceProps"
#define GP_CAPNP_REPLY_DATA "Data"

struct Field {
  std::string name;  // As Cap'n Proto spells it: lowerCamelCase.
  std::string type;
};

struct Call {
  std::string method;
  int ordinal;
  std::string doc;
  std::vector<Field> args, results;
};

std::string LowerFirst(std::string s) {
  s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

std::vector<Call> Calls() {
  std::vector<Call> calls;
#define GP_ARG(kind, name, Name) call.args.push_back({LowerFirst(#Name), GP_CAPNP_##kind});
#define GP_RESULT(kind, name, Name) call.results.push_back({LowerFirst(#Name), GP_CAPNP_##kind});
#define GP_CALL(Name, method, ordinal, mode, doc) \
  {                                               \
    Call call{#method, ordinal, doc, {}, {}};     \
    GP_SESSION_FIELDS_##Name(GP_ARG, GP_RESULT)   \
    calls.push_back(call);                        \
  }
  GP_SESSION_CALLS(GP_CALL)
#undef GP_CALL
#undef GP_RESULT
#undef GP_ARG
  return calls;
}

// "(a :T, b :U)": a method's parameters or results, numbered by their order.
std::string FieldList(const std::vector<Field>& fields) {
  std::string out = "(";
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ", ";
    out += fields[i].name + " :" + fields[i].type;
  }
  return out + ")";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s BASE OUTPUT\n", argv[0]);
    return 2;
  }
  std::ifstream base(argv[1]);
  if (!base) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  std::ostringstream out;
  out << "# GENERATED from lib/schema/session.capnp.in and lib/schema/session_calls.h: edit those, not this.\n";
  out << base.rdbuf();
  out << "interface Session {\n"
         "  # Every reply carries `status` (a CUresult and a message). Handles (streams, events, modules,\n"
         "  # functions) are session-local numbers; stream 0 is the default stream. `output`: device printf text\n"
         "  # produced since the last synchronising call, for the client's stdout.\n";
  std::vector<Call> calls = Calls();
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    if (c.ordinal != static_cast<int>(i)) {
      std::fprintf(stderr, "session_calls.h: %s has ordinal %d, expected %zu (ordinals run 0, 1, 2... in order)\n",
                   c.method.c_str(), c.ordinal, i);
      return 1;
    }
    if (!c.doc.empty()) out << "\n  # " << c.doc << "\n";
    std::vector<Field> results = {{"status", "CallStatus"}};
    results.insert(results.end(), c.results.begin(), c.results.end());
    out << "  " << c.method << " @" << c.ordinal << " " << FieldList(c.args) << "\n      -> "
        << FieldList(results) << ";\n";
  }
  out << "}\n";

  std::ofstream file(argv[2]);
  file << out.str();
  return file.good() ? 0 : 1;
}
