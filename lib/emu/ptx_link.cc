#include "emu/ptx_link.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace gpupool::emu {
namespace {

using ptx::Function;
using ptx::Module;
using ptx::Operand;
using ptx::Variable;

bool Defines(const Function& f) { return !f.is_extern && (!f.body.empty() || f.is_entry); }
bool Defines(const Variable& v) { return !v.is_extern; }

// Private to its module: another module cannot refer to it, so an equal name elsewhere is another symbol.
bool Private(const Function& f) { return Defines(f) && !f.is_visible && !f.is_weak; }
bool Private(const Variable& v) { return Defines(v) && !v.is_visible && !v.is_common; }

// Merged first-come: a second definition is the same symbol (nvlink keeps one of them too).
bool Mergeable(const Function& f) { return f.is_weak; }
bool Mergeable(const Variable& v) { return v.is_common || (v.is_extern && v.array_size < 0); }

void RenameOperand(Operand& o, const std::map<std::string, std::string>& renames, const std::set<std::string>& local) {
  if (!o.name.empty() && o.name[0] != '%' && !local.count(o.name)) {
    if (auto it = renames.find(o.name); it != renames.end()) o.name = it->second;
  }
  for (Operand& e : o.elements) RenameOperand(e, renames, local);
}

// Applies `renames` to module-scope names and every reference to them in `m`.
void Rename(Module& m, const std::map<std::string, std::string>& renames) {
  if (renames.empty()) return;
  auto renamed = [&](std::string& name) {
    if (auto it = renames.find(name); it != renames.end()) name = it->second;
  };
  for (Variable& v : m.globals) {
    renamed(v.name);
    for (auto& ref : v.init.symbols) renamed(ref.symbol);
  }
  for (Function& f : m.functions) {
    renamed(f.name);
    // Names the function declares itself shadow module-scope ones.
    std::set<std::string> local;
    for (const auto& r : f.registers) local.insert(r.name);
    for (const auto* list : {&f.params, &f.returns, &f.locals}) {
      for (const Variable& v : *list) local.insert(v.name);
    }
    for (const auto& [label, pc] : f.labels) local.insert(label);
    for (auto& in : f.body) {
      for (Operand& o : in.operands) RenameOperand(o, renames, local);
    }
    for (Variable& v : f.locals) {
      for (auto& ref : v.init.symbols) {
        if (!local.count(ref.symbol)) renamed(ref.symbol);
      }
    }
  }
}

}  // namespace

CallResult<ptx::Module> LinkPtxModules(std::vector<ptx::Module> modules) {
  if (modules.empty()) return CallStatus(cu::kInvalidPtx, "nothing to link");
  if (modules.size() == 1) return std::move(modules.front());

  // Which modules name each module-scope symbol, and which define it visibly.
  std::map<std::string, std::set<size_t>> named_in;
  std::map<std::string, size_t> visible_definition;
  for (size_t i = 0; i < modules.size(); ++i) {
    auto note = [&](const auto& symbol) -> CallStatus {
      named_in[symbol.name].insert(i);
      if (!Defines(symbol) || Private(symbol) || Mergeable(symbol)) return CallStatus::Ok();
      auto [it, first] = visible_definition.emplace(symbol.name, i);
      if (!first && it->second != i) {
        return CallStatus(cu::kInvalidPtx, "device link: '" + symbol.name + "' is defined in module " +
                                                std::to_string(it->second + 1) + " and in module " +
                                                std::to_string(i + 1));
      }
      return CallStatus::Ok();
    };
    for (const Function& f : modules[i].functions) {
      if (CallStatus s = note(f); !s.ok()) return s;
    }
    for (const Variable& v : modules[i].globals) {
      if (CallStatus s = note(v); !s.ok()) return s;
    }
  }

  // Private symbols whose name another module also uses get a name of their own.
  for (size_t i = 0; i < modules.size(); ++i) {
    std::map<std::string, std::string> renames;
    auto consider = [&](const auto& symbol) {
      if (Private(symbol) && named_in[symbol.name].size() > 1) {
        renames[symbol.name] = symbol.name + "$link" + std::to_string(i + 1);
      }
    };
    for (const Function& f : modules[i].functions) consider(f);
    for (const Variable& v : modules[i].globals) consider(v);
    Rename(modules[i], renames);
  }

  // One definition per symbol, then a declaration for each symbol nobody defines.
  Module out;
  out.target = modules.front().target;
  out.address_size = modules.front().address_size;
  std::set<std::string> options;
  std::set<std::string> defined_functions, defined_globals;
  for (const Module& m : modules) {
    if (m.address_size != out.address_size) {
      return CallStatus(cu::kInvalidPtx, "device link: modules of " + std::to_string(out.address_size) + "- and " +
                                              std::to_string(m.address_size) + "-bit addresses");
    }
    if (std::tie(m.version_major, m.version_minor) > std::tie(out.version_major, out.version_minor)) {
      out.version_major = m.version_major;
      out.version_minor = m.version_minor;
    }
    options.insert(m.target_options.begin(), m.target_options.end());
    for (const Function& f : m.functions) {
      if (Defines(f)) defined_functions.insert(f.name);
    }
    for (const Variable& v : m.globals) {
      if (Defines(v)) defined_globals.insert(v.name);
    }
  }
  out.target_options.assign(options.begin(), options.end());
  std::set<std::string> declared_functions, placed_globals, placed_functions;
  for (Module& m : modules) {
    for (Variable& v : m.globals) {
      const bool keep = Defines(v) ? !placed_globals.count(v.name) : !defined_globals.count(v.name) &&
                                                                         !placed_globals.count(v.name);
      if (!keep) continue;
      placed_globals.insert(v.name);
      out.globals.push_back(std::move(v));
    }
    for (Function& f : m.functions) {
      if (Defines(f)) continue;
      if (defined_functions.count(f.name) || !declared_functions.insert(f.name).second) continue;
      out.functions.push_back(std::move(f));
    }
  }
  for (Module& m : modules) {
    for (Function& f : m.functions) {
      if (!Defines(f) || !placed_functions.insert(f.name).second) continue;
      out.functions.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace gpupool::emu
